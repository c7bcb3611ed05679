/* test_nn_net.c - model files: a hand-built model loads and predicts what a
 * hand computation says; malformed model files (missing, extra, misshapen
 * or non-F32 tensors; bad metadata) are rejected with TY_EFORMAT; evaluate
 * with a class map; workspaces. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "models/nn_internal.h"
#include "models/safetensors.h"
#include "synth_data.h"
#include "testutil.h"

/* The suite's scratch folder (tu_tmpdir_setup makes it, teardown removes it). */
static const char *const dir = tu_tmpdir;

/* The model: input [3] -> dense 2 -> relu -> dropout -> dense 2 (logits). */
static const char *spec_text =
    "{\"layers\":[{\"type\":\"dense\",\"units\":2},{\"type\":\"relu\"},"
    "{\"type\":\"dropout\",\"rate\":0.5},{\"type\":\"dense\",\"units\":2}]}";
static float w0[6] = {1, -1, 0.5f, -2, 1, 1}, b0[2] = {0.1f, -0.2f};
static float w3[4] = {1, 2, -1, 0.5f}, b3[2] = {0, 0.3f};

typedef struct {
    const char *drop;  /* tensor name to leave out */
    const char *extra; /* extra tensor name to add */
    int bad_shape, f16;
    const char *meta_key, *meta_value; /* metadata override */
} variant;

static void write_model(const char *path, const variant *v)
{
    json_t *spec = json_loads(spec_text, 0, NULL);
    nn_shape in = {.ndim = 1, .d = {3}};
    nn_preproc pp = {.kind = NN_PRE_SCALE, .factor = 0.5, .features = 3};
    json_t *classes = json_pack("[s, s]", "cat", "dog");
    json_t *meta =
        nn_model_metadata(spec, TY_TASK_CLASSIFICATION, &in, 2, classes, &pp);
    assert_non_null(meta);
    if (v && v->meta_key) {
        if (v->meta_value)
            json_object_set_new(meta, v->meta_key, json_string(v->meta_value));
        else
            json_object_del(meta, v->meta_key);
    }
    uint16_t half[6] = {0};
    st_out_tensor t[5] = {
        {.name = "0.weight",
         .dtype = ST_F32,
         .ndim = 2,
         .shape = {2, 3},
         .data = w0},
        {.name = "0.bias",
         .dtype = ST_F32,
         .ndim = 1,
         .shape = {2},
         .data = b0},
        {.name = "3.weight",
         .dtype = ST_F32,
         .ndim = 2,
         .shape = {2, 2},
         .data = w3},
        {.name = "3.bias",
         .dtype = ST_F32,
         .ndim = 1,
         .shape = {2},
         .data = b3},
    };
    size_t n = 4;
    if (v && v->bad_shape) {
        t[0].shape[0] = 3;
        t[0].shape[1] = 2;
    }
    if (v && v->f16) {
        t[0].dtype = ST_F16;
        t[0].data = half;
    }
    if (v && v->drop) {
        for (size_t i = 0; i < n; i++)
            if (!strcmp(t[i].name, v->drop)) {
                memmove(&t[i], &t[i + 1], (n - i - 1) * sizeof *t);
                n--;
                break;
            }
    }
    if (v && v->extra)
        t[n++] = (st_out_tensor){.name = v->extra,
                                 .dtype = ST_F32,
                                 .ndim = 1,
                                 .shape = {2},
                                 .data = b0};
    ty_err err;
    assert_int_equal(st_write(path, meta, t, n, &err), TY_OK);
    json_decref(meta);
    json_decref(classes);
    json_decref(spec);
}

static void test_load_and_predict_by_hand(void **state)
{
    char path[128];
    snprintf(path, sizeof path, "%s/good.safetensors", dir);
    write_model(path, NULL);
    nn_net *net;
    ty_err err;
    assert_int_equal(nn_net_load(path, &net, &err), TY_OK);
    assert_int_equal(nn_net_param_count(net), 6 + 2 + 4 + 2);
    const json_t *meta = nn_net_meta(net);
    assert_string_equal(json_string_value(json_object_get(meta, "task")),
                        "classification");
    assert_int_equal(json_integer_value(json_object_get(meta, "num_outputs")),
                     2);
    /* The normalized spec is what the meta reports. */
    const json_t *layers =
        json_object_get(json_object_get(meta, "spec"), "layers");
    assert_int_equal(json_array_size(layers), 4);
    assert_true(
        json_is_true(json_object_get(json_array_get(layers, 0), "bias")));

    nn_workspace *ws = nn_workspace_create(net, 3);
    float x[2 * 3] = {2, 4, -6, 1, 0, 3}, probs[4];
    assert_int_equal(nn_net_predict(net, ws, x, 2, probs, &err), TY_OK);
    for (int r = 0; r < 2; r++) {
        double in[3], h[2], z[2];
        for (int j = 0; j < 3; j++)
            in[j] = x[r * 3 + j] * 0.5; /* scale preprocessing */
        for (int o = 0; o < 2; o++) {
            h[o] = b0[o];
            for (int j = 0; j < 3; j++)
                h[o] += w0[o * 3 + j] * in[j];
            h[o] = h[o] > 0 ? h[o] : 0; /* relu; dropout is off */
        }
        for (int o = 0; o < 2; o++)
            z[o] = b3[o] + w3[o * 2] * h[0] + w3[o * 2 + 1] * h[1];
        double p1 = 1.0 / (1.0 + exp(z[0] - z[1]));
        assert_float_equal(probs[r * 2 + 1], p1, 1e-6);
        assert_float_equal(probs[r * 2], 1.0 - p1, 1e-6);
    }
    /* Predict twice: the same answer (no state carried between calls). */
    float again[4];
    assert_int_equal(nn_net_predict(net, ws, x, 2, again, &err), TY_OK);
    assert_memory_equal(probs, again, sizeof probs);
    /* Another net's workspace is refused. */
    nn_net *other;
    assert_int_equal(nn_net_load(path, &other, &err), TY_OK);
    assert_int_equal(nn_net_predict(other, ws, x, 1, probs, &err), TY_EINVAL);
    nn_net_destroy(other);

    /* Evaluate with a class map that swaps the dataset's classes. */
    static const uint32_t shape[] = {3};
    synth s;
    synth_init(&s, TY_TASK_CLASSIFICATION, 2, shape, 1, TY_DTYPE_F32, 2,
               "none");
    memcpy(s.x, x, sizeof x);
    float p[4];
    nn_net_predict(net, ws, x, 2, p, &err);
    for (int r = 0; r < 2; r++)
        s.y[r] = p[r * 2 + 1] > p[r * 2]; /* the net's own argmax */
    double loss, acc;
    assert_int_equal(nn_net_evaluate(net, &s.ds, NULL, &loss, &acc, &err),
                     TY_OK);
    assert_float_equal(acc, 1.0, 0);
    double want = 0;
    for (int r = 0; r < 2; r++)
        want -= log(p[r * 2 + s.y[r]]) / 2;
    assert_float_equal(loss, want, 1e-5);
    int32_t swap[2] = {1, 0};
    assert_int_equal(nn_net_evaluate(net, &s.ds, swap, &loss, &acc, &err),
                     TY_OK);
    assert_float_equal(acc, 0.0, 0);
    int32_t bad_map[2] = {0, 7};
    s.y[0] = 1;
    assert_int_equal(nn_net_evaluate(net, &s.ds, bad_map, &loss, &acc, &err),
                     TY_EINVAL);
    synth_free(&s);
    nn_workspace_destroy(ws);
    nn_net_destroy(net);
}

static void expect_rejected(const variant *v, const char *part)
{
    char path[128];
    snprintf(path, sizeof path, "%s/bad.safetensors", dir);
    write_model(path, v);
    nn_net *net = (nn_net *)1;
    ty_err err;
    ty_err_clear(&err);
    assert_int_equal(nn_net_load(path, &net, &err), TY_EFORMAT);
    assert_null(net);
    if (!strstr(err.msg, part))
        fail_msg("message '%s' lacks '%s'", err.msg, part);
}

static void test_load_rejects_bad_models(void **state)
{
    expect_rejected(&(variant){.drop = "3.bias"}, "no tensor '3.bias'");
    expect_rejected(&(variant){.extra = "1.weight"},
                    "unexpected tensor '1.weight'");
    expect_rejected(&(variant){.extra = "3.bias_extra"}, "unexpected tensor");
    expect_rejected(&(variant){.bad_shape = 1},
                    "tensor '0.weight' must be F32 [2, 3], got F32 [3, 2]");
    expect_rejected(&(variant){.f16 = 1}, "must be F32 [2, 3], got F16");
    expect_rejected(&(variant){.meta_key = "trainyard.format"},
                    "trainyard.format");
    expect_rejected(
        &(variant){.meta_key = "trainyard.format", .meta_value = "2"},
        "trainyard.format");
    expect_rejected(
        &(variant){.meta_key = "trainyard.task", .meta_value = "ranking"},
        "trainyard.task");
    expect_rejected(
        &(variant){.meta_key = "trainyard.num_outputs", .meta_value = "3"},
        "an array of 3 classes");
    expect_rejected(&(variant){.meta_key = "trainyard.spec",
                               .meta_value = "{\"layers\":[{\"type\":\"dense\","
                                             "\"units\":5}]}"},
                    "spec does not fit its metadata");
    expect_rejected(
        &(variant){.meta_key = "trainyard.num_outputs", .meta_value = "2x"},
        "num_outputs");
    expect_rejected(&(variant){.meta_key = "trainyard.spec", .meta_value = "{"},
                    "not valid JSON");
    expect_rejected(
        &(variant){.meta_key = "trainyard.spec",
                   .meta_value = "{\"layers\":[{\"type\":\"conv\"}]}"},
        "unknown type");
    expect_rejected(
        &(variant){.meta_key = "trainyard.input_shape", .meta_value = "[0]"},
        "input_shape");
    expect_rejected(
        &(variant){.meta_key = "trainyard.input_shape", .meta_value = "[4]"},
        "must be F32 [2, 4]");
    expect_rejected(
        &(variant){.meta_key = "trainyard.classes", .meta_value = "[\"a\"]"},
        "classes");
    expect_rejected(
        &(variant){.meta_key = "trainyard.preprocess",
                   .meta_value = "{\"kind\":\"scale\",\"factor\":-1}"},
        "factor");
    expect_rejected(&(variant){.meta_key = "trainyard.preprocess",
                               .meta_value =
                                   "{\"kind\":\"standardize\","
                                   "\"mean\":[0,0,0],\"std\":[1,0,1]}"},
                    "std[1]");
    expect_rejected(&(variant){.meta_key = "trainyard.preprocess",
                               .meta_value = "{\"kind\":\"magic\"}"},
                    "preprocess");
}

static void test_load_missing_and_garbage(void **state)
{
    char path[128];
    nn_net *net;
    ty_err err;
    snprintf(path, sizeof path, "%s/none.safetensors", dir);
    assert_int_equal(nn_net_load(path, &net, &err), TY_ENOTFOUND);
    snprintf(path, sizeof path, "%s/garbage.safetensors", dir);
    assert_int_equal(
        fs_write_atomic(path, "not a model at all", 18, 0644, &err), TY_OK);
    assert_int_equal(nn_net_load(path, &net, &err), TY_EFORMAT);
}

static void test_workspace_limits(void **state)
{
    char path[128];
    snprintf(path, sizeof path, "%s/ws.safetensors", dir);
    write_model(path, NULL);
    nn_net *net;
    assert_int_equal(nn_net_load(path, &net, NULL), TY_OK);
    assert_null(nn_workspace_create(net, 0));
    nn_workspace *ws = nn_workspace_create(net, 1);
    float x[3] = {0}, y[2];
    ty_err err;
    assert_int_equal(nn_net_predict(net, ws, x, 2, y, &err), TY_EINVAL);
    assert_int_equal(nn_net_predict(net, ws, x, 0, y, &err), TY_OK);
    nn_workspace_destroy(ws);
    nn_workspace_destroy(NULL);
    nn_net_destroy(net);
    nn_net_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_and_predict_by_hand),
        cmocka_unit_test(test_load_rejects_bad_models),
        cmocka_unit_test(test_load_missing_and_garbage),
        cmocka_unit_test(test_workspace_limits),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
