/* test_nn_residual.c - residual blocks: backward against central finite
 * differences (identity, projection, nested, with batchnorm inside),
 * inference workspaces, spec errors with the inner layer's full path, the
 * normalized spec and state-dict names, and a trained model with batchnorm
 * and residual blocks saved by train_run and loaded back with its buffers. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "models/safetensors.h"
#include "models/train/train.h"
#include "nn_fd.h"
#include "synth_data.h"
#include "testutil.h"

static const uint32_t vec4[] = {4}, vec5[] = {5};

/* ---- gradients ---- */

static void test_identity_backward(void **state)
{
    fd_case c;
    fd_setup(&c,
             "{\"layers\":[{\"type\":\"residual\",\"layers\":["
             "{\"type\":\"dense\",\"units\":5},{\"type\":\"relu\"},"
             "{\"type\":\"dense\",\"units\":5}]},"
             "{\"type\":\"dense\",\"units\":3}]}",
             vec5, 1, 3, 3, 40);
    fd_check(&c, 1e-3f, 5e-4);
    fd_free(&c);
}

static void test_projection_backward(void **state)
{
    fd_case c;
    fd_setup(
        &c,
        "{\"layers\":[{\"type\":\"dense\",\"units\":4},"
        "{\"type\":\"residual\",\"layers\":["
        "{\"type\":\"dense\",\"units\":6},{\"type\":\"relu\"},"
        "{\"type\":\"dense\",\"units\":6}],"
        "\"projection\":[{\"type\":\"dense\",\"units\":6,\"bias\":false}]},"
        "{\"type\":\"tanh\"},{\"type\":\"dense\",\"units\":2}]}",
        vec4, 1, 2, 3, 41);
    fd_check(&c, 1e-3f, 5e-4);
    fd_free(&c);
}

static void test_nested_backward(void **state)
{
    fd_case c;
    fd_setup(
        &c,
        "{\"layers\":[{\"type\":\"residual\",\"layers\":["
        "{\"type\":\"dense\",\"units\":4},{\"type\":\"relu\"},"
        "{\"type\":\"residual\",\"layers\":[{\"type\":\"dense\",\"units\":3},"
        "{\"type\":\"tanh\"}],\"projection\":[{\"type\":\"dense\",\"units\":3}]"
        "},"
        "{\"type\":\"dense\",\"units\":4}]},"
        "{\"type\":\"residual\",\"layers\":[{\"type\":\"residual\","
        "\"layers\":[{\"type\":\"dense\",\"units\":4}]}]},"
        "{\"type\":\"dense\",\"units\":2}]}",
        vec4, 1, 2, 3, 42);
    fd_check(&c, 1e-3f, 5e-4);
    fd_free(&c);
}

/* batchnorm before the block (so the block's buffers do not start at 0),
 * in the body and in the projection. (The tanh keeps the first batchnorm's
 * bias from being cancelled by the ones inside the block.) */
static const char *bn_spec =
    "{\"layers\":[{\"type\":\"batchnorm\"},{\"type\":\"tanh\"},"
    "{\"type\":\"residual\",\"layers\":["
    "{\"type\":\"dense\",\"units\":6,\"bias\":false},{\"type\":\"batchnorm\"},"
    "{\"type\":\"relu\"},{\"type\":\"dense\",\"units\":6}],"
    "\"projection\":[{\"type\":\"dense\",\"units\":6,\"bias\":false},"
    "{\"type\":\"batchnorm\",\"momentum\":0.2}]},"
    "{\"type\":\"dense\",\"units\":3}]}";

static void test_batchnorm_inside_backward(void **state)
{
    fd_case c;
    fd_setup(&c, bn_spec, vec4, 1, 3, 5, 43);
    fd_check(&c, 1e-3f, 5e-4);
    fd_free(&c);
}

/* A training forward moves every running statistic (each in its own place)
 * and touches no parameter. */
static void test_batchnorm_inside_buffers(void **state)
{
    fd_case c;
    fd_setup(&c, bn_spec, vec4, 1, 3, 5, 44);
    const size_t ns = c.arch.param_count + c.arch.buffer_count;
    float *before = malloc(ns * sizeof(float));
    memcpy(before, c.state, ns * sizeof(float));
    fd_forward(&c);
    assert_memory_equal(before, c.state, c.arch.param_count * sizeof(float));
    int seen = 0;
    for (uint32_t t = 0; t < c.arch.n_tensors; t++) {
        const nn_named_tensor *nt = &c.arch.tensors[t];
        if (!nt->desc->buffer)
            continue;
        seen++;
        for (uint64_t k = 0; k < nt->desc->numel; k++)
            if (c.state[nt->offset + k] == before[nt->offset + k])
                fail_msg("%s[%llu] did not move", nt->name,
                         (unsigned long long)k);
    }
    assert_int_equal(seen, 6);
    /* Eval leaves them alone. */
    memcpy(before, c.state, ns * sizeof(float));
    memcpy(c.ws->act[0], c.x, c.nx * sizeof(float));
    nn_forward(&c.arch, c.state, c.ws, c.n, 0, NULL);
    assert_memory_equal(before, c.state, ns * sizeof(float));
    free(before);
    fd_free(&c);
}

/* ---- inference ---- */

static void test_inference_workspace(void **state)
{
    /* By hand first: out = W x + b + x. */
    fd_case c;
    fd_setup(&c,
             "{\"layers\":[{\"type\":\"residual\",\"layers\":["
             "{\"type\":\"dense\",\"units\":3}]}]}",
             (const uint32_t[]){3}, 1, 3, 2, 50);
    const float *y = fd_forward(&c);
    for (int r = 0; r < 2; r++)
        for (int o = 0; o < 3; o++) {
            double want = c.state[9 + o] + c.x[r * 3 + o];
            for (int k = 0; k < 3; k++)
                want += (double)c.state[o * 3 + k] * c.x[r * 3 + k];
            assert_float_equal(y[r * 3 + o], want, 1e-5);
        }
    fd_free(&c);

    /* The same eval outputs from a training workspace and an inference one
     * (shared scratch, ping-pong activations), dropout inside a block. */
    fd_setup(
        &c,
        "{\"layers\":[{\"type\":\"dense\",\"units\":6},"
        "{\"type\":\"residual\",\"layers\":[{\"type\":\"dense\",\"units\":6},"
        "{\"type\":\"batchnorm\"},{\"type\":\"dropout\",\"rate\":0.5},"
        "{\"type\":\"relu\"},{\"type\":\"residual\",\"layers\":["
        "{\"type\":\"layernorm\"},{\"type\":\"dense\",\"units\":6}]}],"
        "\"projection\":[{\"type\":\"dense\",\"units\":6}]},"
        "{\"type\":\"dropout\",\"rate\":0.5},{\"type\":\"dense\",\"units\":2}]"
        "}",
        vec5, 1, 2, 4, 51);
    fd_forward(&c); /* running statistics away from their initial values */
    memcpy(c.ws->act[0], c.x, c.nx * sizeof(float));
    float want[8];
    memcpy(want, nn_forward(&c.arch, c.state, c.ws, 4, 0, NULL), sizeof want);
    nn_workspace *inf = nn_workspace_create_for(&c.arch, 7, 0);
    assert_non_null(inf);
    memcpy(inf->act[0], c.x, c.nx * sizeof(float));
    const float *got = nn_forward(&c.arch, c.state, inf, 4, 0, NULL);
    for (int i = 0; i < 8; i++)
        assert_float_equal(got[i], want[i], 0);
    nn_workspace_destroy(inf);
    fd_free(&c);
}

/* ---- specs ---- */

/* testutil's, for a regression net. */
static void expect_error(const char *spec_text, const uint32_t *shape,
                         uint32_t ndim, uint32_t outputs, const char *field,
                         const char *msg_part)
{
    tu_expect_spec_error(spec_text, shape, ndim, outputs, TY_TASK_REGRESSION,
                         field, msg_part);
}

static void test_spec_errors(void **state)
{
    expect_error("{\"layers\":[{\"type\":\"dense\",\"units\":4},"
                 "{\"type\":\"residual\",\"layers\":[{\"type\":\"relu\"},"
                 "{\"type\":\"dense\",\"units\":0}]}]}",
                 vec4, 1, 4, "model.layers[1].layers[1].units",
                 "layer 1 (residual): layer 1 (dense)");
    expect_error("{\"layers\":[{\"type\":\"residual\",\"layers\":["
                 "{\"type\":\"dense\",\"units\":2}],\"projection\":["
                 "{\"type\":\"dense\",\"units\":2,\"bias\":3}]}]}",
                 vec4, 1, 2, "model.layers[0].projection[0].bias", "bias");
    expect_error("{\"layers\":[{\"type\":\"residual\",\"layers\":["
                 "{\"type\":\"relu\"},{\"type\":\"residual\",\"layers\":["
                 "{\"type\":\"conv3d\"}]}]}]}",
                 vec4, 1, 4, "model.layers[0].layers[1].layers[0].type",
                 "conv3d");
    expect_error("{\"layers\":[{\"type\":\"residual\",\"layers\":["
                 "{\"type\":\"dense\",\"units\":6}]}]}",
                 vec4, 1, 6, "model.layers[0].layers", "projection");
    expect_error("{\"layers\":[{\"type\":\"residual\",\"layers\":["
                 "{\"type\":\"dense\",\"units\":6}]}]}",
                 vec4, 1, 6, "model.layers[0].layers", "layer 0 (residual)");
    expect_error("{\"layers\":[{\"type\":\"residual\",\"layers\":["
                 "{\"type\":\"dense\",\"units\":6}],\"projection\":["
                 "{\"type\":\"dense\",\"units\":5}]}]}",
                 vec4, 1, 6, "model.layers[0].projection", "[5]");
    expect_error("{\"layers\":[{\"type\":\"residual\"}]}", vec4, 1, 4,
                 "model.layers[0].layers", "required");
    expect_error("{\"layers\":[{\"type\":\"residual\",\"layers\":[]}]}", vec4,
                 1, 4, "model.layers[0].layers", "at least one");
    expect_error("{\"layers\":[{\"type\":\"residual\",\"layers\":["
                 "{\"type\":\"relu\"}],\"shortcut\":[]}]}",
                 vec4, 1, 4, "model.layers[0].shortcut", "shortcut");
    /* Nesting is bounded. */
    char deep[2048] = "{\"layers\":[";
    for (int i = 0; i < 10; i++)
        strcat(deep, "{\"type\":\"residual\",\"layers\":[");
    strcat(deep, "{\"type\":\"relu\"}");
    for (int i = 0; i < 10; i++)
        strcat(deep, "]}");
    strcat(deep, "]}");
    json_t *spec = json_loads(deep, 0, NULL);
    assert_non_null(spec);
    ty_err err;
    assert_int_equal(nn_spec_validate(spec, vec4, 1, 4, TY_TASK_REGRESSION,
                                      NULL, NULL, &err),
                     TY_EINVAL);
    assert_non_null(strstr(err.msg, "nest"));
    json_decref(spec);
}

static void test_normalized_and_names(void **state)
{
    json_t *spec = json_loads(bn_spec, 0, NULL);
    nn_arch a;
    json_t *norm;
    ty_err err;
    assert_int_equal(
        nn_arch_build(spec, vec4, 1, 3, TY_TASK_REGRESSION, &a, &norm, &err),
        TY_OK);
    const json_t *block = json_array_get(json_object_get(norm, "layers"), 2);
    assert_string_equal(json_string_value(json_object_get(block, "type")),
                        "residual");
    const json_t *body = json_object_get(block, "layers");
    const json_t *proj = json_object_get(block, "projection");
    assert_int_equal(json_array_size(body), 4);
    assert_int_equal(json_array_size(proj), 2);
    assert_true(json_is_true(json_object_get(json_array_get(body, 3), "bias")));
    assert_float_equal(
        json_real_value(json_object_get(json_array_get(body, 1), "momentum")),
        0.1, 1e-12);
    assert_float_equal(
        json_real_value(json_object_get(json_array_get(proj, 1), "momentum")),
        0.2, 1e-12);
    /* Without a projection, none appears. */
    json_t *s2 = json_loads("{\"layers\":[{\"type\":\"residual\",\"layers\":["
                            "{\"type\":\"relu\"}]}]}",
                            0, NULL);
    json_t *n2;
    assert_int_equal(
        nn_spec_validate(s2, vec4, 1, 4, TY_TASK_REGRESSION, &n2, NULL, &err),
        TY_OK);
    assert_null(json_object_get(
        json_array_get(json_object_get(n2, "layers"), 0), "projection"));
    json_decref(s2);
    json_decref(n2);

    /* As PyTorch's state dict of the same modules would list them. */
    static const char *const names[] = {"0.weight",
                                        "0.bias",
                                        "0.running_mean",
                                        "0.running_var",
                                        "2.body.0.weight",
                                        "2.body.1.weight",
                                        "2.body.1.bias",
                                        "2.body.1.running_mean",
                                        "2.body.1.running_var",
                                        "2.body.3.weight",
                                        "2.body.3.bias",
                                        "2.projection.0.weight",
                                        "2.projection.1.weight",
                                        "2.projection.1.bias",
                                        "2.projection.1.running_mean",
                                        "2.projection.1.running_var",
                                        "3.weight",
                                        "3.bias"};
    assert_int_equal(a.n_tensors, TY_ARRAY_LEN(names));
    for (uint32_t i = 0; i < a.n_tensors; i++)
        assert_string_equal(a.tensors[i].name, names[i]);
    assert_int_equal(a.param_count, 8 + 24 + 12 + 42 + 24 + 12 + 21);
    assert_int_equal(a.buffer_count, 8 + 12 + 12);
    /* The tensors tile the state block: parameters, then buffers. */
    const uint64_t total = a.param_count + a.buffer_count;
    unsigned char *hit = calloc(total, 1);
    for (uint32_t i = 0; i < a.n_tensors; i++) {
        const nn_named_tensor *nt = &a.tensors[i];
        assert_true(nt->desc->buffer
                        ? nt->offset >= a.param_count
                        : nt->offset + nt->desc->numel <= a.param_count);
        for (uint64_t k = 0; k < nt->desc->numel; k++) {
            assert_true(nt->offset + k < total);
            assert_int_equal(hit[nt->offset + k], 0);
            hit[nt->offset + k] = 1;
        }
    }
    for (uint64_t k = 0; k < total; k++)
        assert_int_equal(hit[k], 1);
    free(hit);
    json_decref(spec);
    json_decref(norm);
    nn_arch_free(&a);
}

/* ---- a trained model with batchnorm and residual blocks ---- */

/* The suite's scratch folder (tu_tmpdir_setup makes it, teardown removes it). */
static const char *const dir = tu_tmpdir;

static const char *train_spec =
    "{\"layers\":[{\"type\":\"batchnorm\"},{\"type\":\"flatten\"},"
    "{\"type\":\"dense\",\"units\":8},{\"type\":\"relu\"},"
    "{\"type\":\"residual\",\"layers\":[{\"type\":\"dense\",\"units\":8,"
    "\"bias\":false},{\"type\":\"batchnorm\"},{\"type\":\"relu\"},"
    "{\"type\":\"dense\",\"units\":8}]},"
    "{\"type\":\"residual\",\"layers\":[{\"type\":\"dense\",\"units\":4}],"
    "\"projection\":[{\"type\":\"dense\",\"units\":4,\"bias\":false},"
    "{\"type\":\"batchnorm\"}]},"
    "{\"type\":\"layernorm\"},{\"type\":\"leaky_relu\"},"
    "{\"type\":\"dense\",\"units\":2}]}";

static void test_train_save_load(void **state)
{
    /* 97 examples in batches of 16: the last batch of each epoch has one
     * example (batchnorm's running-statistics fallback). */
    synth s;
    synth_images_sized(&s, 97, 4, 9);
    json_t *spec = json_loads(train_spec, 0, NULL);
    json_t *hpj =
        json_loads("{\"epochs\":3,\"batch_size\":16,\"seed\":5}", 0, NULL);
    train_hparams hp;
    ty_err err;
    assert_int_equal(train_hparams_parse(hpj, &hp, NULL, &err), TY_OK);
    char model[128];
    snprintf(model, sizeof model, "%s/res.safetensors", dir);
    volatile sig_atomic_t stop = 0;
    train_job job = {.spec = spec,
                     .hp = &hp,
                     .train = &s.ds,
                     .model_path = model,
                     .threads = 2,
                     .stop = &stop};
    train_epoch_metrics fin;
    if (train_run(&job, &fin, &err) != TY_OK)
        fail_msg("%s", err.msg);
    assert_true(isfinite(fin.train_loss));

    /* The file: exactly the state-dict names, buffers moved by training. */
    static const char *const names[] = {"0.weight",
                                        "0.bias",
                                        "0.running_mean",
                                        "0.running_var",
                                        "2.weight",
                                        "2.bias",
                                        "4.body.0.weight",
                                        "4.body.1.weight",
                                        "4.body.1.bias",
                                        "4.body.1.running_mean",
                                        "4.body.1.running_var",
                                        "4.body.3.weight",
                                        "4.body.3.bias",
                                        "5.body.0.weight",
                                        "5.body.0.bias",
                                        "5.projection.0.weight",
                                        "5.projection.1.weight",
                                        "5.projection.1.bias",
                                        "5.projection.1.running_mean",
                                        "5.projection.1.running_var",
                                        "6.weight",
                                        "6.bias",
                                        "8.weight",
                                        "8.bias"};
    st_file f;
    assert_int_equal(st_open(model, &f, &err), TY_OK);
    assert_int_equal(f.count, TY_ARRAY_LEN(names));
    for (size_t i = 0; i < TY_ARRAY_LEN(names); i++)
        assert_non_null(st_find(&f, names[i]));
    const st_tensor *rm = st_find(&f, "0.running_mean");
    const st_tensor *rv = st_find(&f, "4.body.1.running_var");
    assert_int_equal(rm->ndim, 1);
    assert_int_equal(rm->shape[0], 1);
    float m0, v0[8];
    memcpy(&m0, rm->data, sizeof m0);
    memcpy(v0, rv->data, sizeof v0);
    /* Pixels scaled to [0, 1], mean about 0.5; 18 updates of momentum 0.1
     * from 0 bring the running mean most of the way. */
    assert_true(m0 > 0.3f && m0 < 0.55f);
    for (int i = 0; i < 8; i++)
        assert_true(v0[i] != 1.0f && v0[i] > 0.0f);

    /* Loaded: predictions equal an eval pass over the file's state. */
    nn_net *net;
    if (nn_net_load(model, &net, &err) != TY_OK)
        fail_msg("%s", err.msg);
    const json_t *meta = nn_net_meta(net);
    nn_arch a;
    assert_int_equal(nn_arch_build(json_object_get(meta, "spec"), s.ds.shape, 3,
                                   2, TY_TASK_CLASSIFICATION, &a, NULL, &err),
                     TY_OK);
    float *st = malloc((a.param_count + a.buffer_count) * sizeof(float));
    for (uint32_t i = 0; i < a.n_tensors; i++) {
        const st_tensor *t = st_find(&f, a.tensors[i].name);
        assert_non_null(t);
        memcpy(st + a.tensors[i].offset, t->data, t->nbytes);
    }
    nn_preproc pp;
    assert_int_equal(nn_preproc_from_json(
                         &pp, json_object_get(meta, "preprocess"), 16, &err),
                     TY_OK);
    enum { N = 5 };
    float x[N * 16], probs[N * 2], want[N * 2];
    for (int i = 0; i < N * 16; i++)
        x[i] = (float)((const uint8_t *)s.x)[i];
    nn_workspace *ws = nn_workspace_create(net, N);
    assert_int_equal(nn_net_predict(net, ws, x, N, probs, &err), TY_OK);
    nn_workspace *ws2 = nn_workspace_create_for(&a, N, 0);
    nn_preproc_apply(&pp, ws2->act[0], x, N);
    const float *logits = nn_forward(&a, st, ws2, N, 0, NULL);
    nn_backend_cpu.softmax_xent(NULL, NULL, want, NULL, logits, NULL, N, 2, 0);
    for (int i = 0; i < N * 2; i++) {
        assert_true(isfinite(probs[i]));
        assert_float_equal(probs[i], want[i], 1e-6);
    }
    /* The buffers matter: other running statistics, other predictions. */
    st[a.tensors[2].offset] += 0.5f;
    nn_preproc_apply(&pp, ws2->act[0], x, N);
    logits = nn_forward(&a, st, ws2, N, 0, NULL);
    nn_backend_cpu.softmax_xent(NULL, NULL, want, NULL, logits, NULL, N, 2, 0);
    double diff = 0;
    for (int i = 0; i < N * 2; i++)
        diff += fabs(want[i] - probs[i]);
    assert_true(diff > 1e-4);

    nn_workspace_destroy(ws);
    nn_workspace_destroy(ws2);
    nn_preproc_free(&pp);
    free(st);
    nn_arch_free(&a);
    nn_net_destroy(net);
    st_close(&f);
    json_decref(spec);
    json_decref(hpj);
    synth_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identity_backward),
        cmocka_unit_test(test_projection_backward),
        cmocka_unit_test(test_nested_backward),
        cmocka_unit_test(test_batchnorm_inside_backward),
        cmocka_unit_test(test_batchnorm_inside_buffers),
        cmocka_unit_test(test_inference_workspace),
        cmocka_unit_test(test_spec_errors),
        cmocka_unit_test(test_normalized_and_names),
        cmocka_unit_test(test_train_save_load),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
