/* test_nn_device.c - inference on a device backend: a model trained and
 * saved on the CPU, loaded both on the CPU and on fake_device.h's backend
 * (the CPU's kernels behind a non-host-visible allocator, so loading,
 * predict and evaluate take the device path: parameters uploaded,
 * inputs staged and uploaded, outputs downloaded, status checked), predicts
 * and evaluates to the same bits, an MLP (with a short last predict batch)
 * and a CNN with a residual block and batchnorm. A device whose status
 * reports a failure makes predict and evaluate fail with its message, and
 * a device net gives back every byte it took. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "models/train/train.h"
#include "fake_device.h"
#include "synth_data.h"
#include "testutil.h"

/* The suite's scratch folder (tu_tmpdir_setup makes it, teardown removes it). */
static const char *const dir = tu_tmpdir;

static const char *const mlp =
    "{\"layers\":[{\"type\":\"flatten\"},{\"type\":\"dense\",\"units\":16},"
    "{\"type\":\"relu\"},{\"type\":\"dropout\",\"rate\":0.1},"
    "{\"type\":\"dense\",\"units\":3}]}";
static const char *const resnet =
    "{\"layers\":[{\"type\":\"conv2d\",\"filters\":4,\"kernel_size\":3,"
    "\"padding\":\"same\"},{\"type\":\"batchnorm\"},{\"type\":\"relu\"},"
    "{\"type\":\"residual\",\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
    "\"kernel_size\":3,\"padding\":\"same\"},{\"type\":\"batchnorm\"},"
    "{\"type\":\"relu\"}]},{\"type\":\"maxpool2d\",\"pool_size\":2},"
    "{\"type\":\"flatten\"},{\"type\":\"dense\",\"units\":3}]}";

#define N_EX 40u

/* s: N_EX examples of shape (2, 6, 6), 3 classes. */
static void make_data(synth *s)
{
    const uint32_t shape[3] = {2, 6, 6};
    synth_init(s, TY_TASK_CLASSIFICATION, N_EX, shape, 3, TY_DTYPE_F32, 3,
               "standardize");
    for (uint32_t i = 0; i < N_EX; i++) {
        s->y[i] = (int32_t)(i % 3);
        for (uint32_t j = 0; j < s->ds.features; j++)
            ((float *)s->x)[(size_t)i * s->ds.features + j] =
                (float)((i * 7 + j * 3) % 11) / 11.0f + (float)(i % 3);
    }
}

/* Trains spec_text on the CPU for 2 epochs and saves it at path. */
static void train_to(const char *spec_text, const synth *s, const char *path)
{
    json_t *spec = json_loads(spec_text, 0, NULL);
    json_t *hpj = json_pack("{s:i, s:i, s:i, s:s}", "epochs", 2, "batch_size",
                            16, "seed", 5, "optimizer", "adam");
    assert_non_null(spec);
    assert_non_null(hpj);
    train_hparams hp;
    ty_err err = {0};
    assert_int_equal(train_hparams_parse(hpj, &hp, NULL, &err), TY_OK);
    assert_int_equal(
        train_hparams_resolve_loss(&hp, TY_TASK_CLASSIFICATION, 3, NULL, &err),
        TY_OK);
    unlink(path);
    train_job job = {.spec = spec,
                     .hp = &hp,
                     .train = &s->ds,
                     .model_path = path,
                     .threads = 1};
    train_epoch_metrics fin;
    if (train_run(&job, &fin, &err) != TY_OK)
        fail_msg("%s", err.msg);
    json_decref(spec);
    json_decref(hpj);
}

static int device_token;

/* Predicts every example in batches of `batch` with net into out. */
static ty_status predict_all(const nn_net *net, nn_workspace *ws,
                             const synth *s, uint32_t batch, float *out,
                             ty_err *err)
{
    const uint32_t f = (uint32_t)s->ds.features, k = 3;
    for (uint32_t i = 0; i < N_EX; i += batch) {
        uint32_t b = N_EX - i < batch ? N_EX - i : batch;
        ty_status st =
            nn_net_predict(net, ws, (const float *)s->x + (size_t)i * f, b,
                           out + (size_t)i * k, err);
        if (st != TY_OK)
            return st;
    }
    return TY_OK;
}

static void check_same_bits(const char *spec_text)
{
    synth s;
    make_data(&s);
    char path[128];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    train_to(spec_text, &s, path);

    ty_err err = {0};
    nn_net *cpu = NULL, *dev = NULL;
    nn_exec ex = {.device = &device_token};
    assert_int_equal(nn_net_load(path, &cpu, &err), TY_OK);
    fake_live = fake_peak = fake_allocs = 0;
    if (nn_net_load_on(path, &fake_device, &ex, &dev, &err) != TY_OK)
        fail_msg("%s", err.msg);
    assert_true(fake_allocs >= 1); /* the parameters went to the device */
    assert_int_equal(nn_net_param_count(dev), nn_net_param_count(cpu));

    /* Batch 16 over 40 examples: a short last batch. */
    nn_workspace *wc = nn_workspace_create(cpu, 16);
    nn_workspace *wd = nn_workspace_create(dev, 16);
    assert_non_null(wc);
    assert_non_null(wd);
    uint64_t before = fake_live;
    assert_true(fake_allocs >= 2); /* the workspace is the device's too */
    float pc[N_EX * 3], pd[N_EX * 3];
    memset(pd, 0xff, sizeof pd);
    assert_int_equal(predict_all(cpu, wc, &s, 16, pc, &err), TY_OK);
    assert_int_equal(predict_all(dev, wd, &s, 16, pd, &err), TY_OK);
    assert_memory_equal(pc, pd, sizeof pc);
    assert_int_equal(fake_live, before); /* predict allocates nothing */
    /* The probabilities are real ones, not a zeroed buffer. */
    float sum = pd[0] + pd[1] + pd[2];
    assert_true(sum > 0.999f && sum < 1.001f);

    double lc, ac, ld, ad;
    assert_int_equal(nn_net_evaluate(cpu, &s.ds, NULL, &lc, &ac, &err), TY_OK);
    assert_int_equal(nn_net_evaluate(dev, &s.ds, NULL, &ld, &ad, &err), TY_OK);
    assert_memory_equal(&lc, &ld, sizeof lc);
    assert_memory_equal(&ac, &ad, sizeof ac);
    assert_int_equal(fake_live, before); /* evaluate's workspace released */

    /* A failed device: predict and evaluate report it, not garbage. */
    fake_device_fail = 1;
    err = (ty_err){0};
    assert_int_equal(predict_all(dev, wd, &s, 16, pd, &err), TY_EDEVICE);
    assert_non_null(strstr(err.msg, "illegal memory access"));
    err = (ty_err){0};
    assert_int_equal(nn_net_evaluate(dev, &s.ds, NULL, &ld, &ad, &err),
                     TY_EDEVICE);
    assert_non_null(strstr(err.msg, "illegal memory access"));
    /* Loading on a failed device fails the same way, leaking nothing. */
    nn_net *bad = NULL;
    err = (ty_err){0};
    assert_int_equal(nn_net_load_on(path, &fake_device, &ex, &bad, &err),
                     TY_EDEVICE);
    assert_null(bad);
    assert_int_equal(fake_live, before);
    fake_device_fail = 0;

    nn_workspace_destroy(wc);
    nn_workspace_destroy(wd);
    nn_net_destroy(cpu);
    nn_net_destroy(dev);
    assert_int_equal(fake_live, 0);
    synth_free(&s);
}

static void test_mlp_same_bits(void **state) { check_same_bits(mlp); }
static void test_resnet_same_bits(void **state) { check_same_bits(resnet); }

/* nn_net_load_on with no backend is nn_net_load. */
static void test_null_backend_is_cpu(void **state)
{
    synth s;
    make_data(&s);
    char path[128];
    snprintf(path, sizeof path, "%s/mlp.safetensors", dir);
    train_to(mlp, &s, path);
    ty_err err = {0};
    nn_net *a = NULL, *b = NULL;
    assert_int_equal(nn_net_load(path, &a, &err), TY_OK);
    assert_int_equal(nn_net_load_on(path, NULL, NULL, &b, &err), TY_OK);
    nn_workspace *wa = nn_workspace_create(a, 8),
                 *wb = nn_workspace_create(b, 8);
    float pa[N_EX * 3], pb[N_EX * 3];
    assert_int_equal(predict_all(a, wa, &s, 8, pa, &err), TY_OK);
    assert_int_equal(predict_all(b, wb, &s, 8, pb, &err), TY_OK);
    assert_memory_equal(pa, pb, sizeof pa);
    nn_workspace_destroy(wa);
    nn_workspace_destroy(wb);
    nn_net_destroy(a);
    nn_net_destroy(b);
    synth_free(&s);
}

int main(void)
{
    fake_device_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_same_bits),
        cmocka_unit_test(test_resnet_same_bits),
        cmocka_unit_test(test_null_backend_is_cpu),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
