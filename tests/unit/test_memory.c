/* test_memory.c - train_memory_estimate is exact: a counting backend (the
 * CPU's kernels behind an alloc/release that count live and peak bytes,
 * driven as a device backend through train_job.be/ex, so the trainer takes
 * its staging/upload path) sees a short training run of an MLP, a CNN and a
 * residual net with batchnorm, under every optimizer, hold at most exactly
 * the estimated bytes, and release them all; the run's reported
 * peak_memory_bytes is that same figure. Mixed precision (bf16, fp16) on
 * the fake device is counted exactly as well. On the CPU backend itself (two
 * threads, so the work arena is two threads') the reported peak equals the
 * estimate too. */
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
#include "models/train/train_internal.h" /* dp_zero_range */
#include "fake_device.h"
#include "synth_data.h"
#include "testutil.h"

/* The suite's scratch folder (tu_tmpdir_setup makes it, teardown removes it). */
static const char *const dir = tu_tmpdir;

/* The counting backend is fake_device.h's. */

static int device_token;

/* ---- the runs ---- */

static const char *const mlp =
    "{\"layers\":[{\"type\":\"flatten\"},{\"type\":\"dense\",\"units\":32},"
    "{\"type\":\"relu\"},{\"type\":\"dropout\",\"rate\":0.1},"
    "{\"type\":\"dense\",\"units\":3}]}";
static const char *const cnn =
    "{\"layers\":[{\"type\":\"conv2d\",\"filters\":4,\"kernel_size\":3,"
    "\"padding\":\"same\"},{\"type\":\"relu\"},"
    "{\"type\":\"maxpool2d\",\"pool_size\":2},{\"type\":\"flatten\"},"
    "{\"type\":\"dense\",\"units\":3}]}";
static const char *const resnet =
    "{\"layers\":[{\"type\":\"conv2d\",\"filters\":4,\"kernel_size\":3,"
    "\"padding\":\"same\"},{\"type\":\"batchnorm\"},{\"type\":\"relu\"},"
    "{\"type\":\"residual\",\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
    "\"kernel_size\":3,\"padding\":\"same\"},{\"type\":\"batchnorm\"},"
    "{\"type\":\"relu\"}]},{\"type\":\"flatten\"},"
    "{\"type\":\"dense\",\"units\":3}]}";

static const char *const optimizers[] = {
    "{\"optimizer\":\"sgd\"}",
    "{\"optimizer\":\"sgd\",\"momentum\":0.9}",
    "{\"optimizer\":\"adam\"}",
    "{\"optimizer\":\"adamw\"}",
};

/* Trains spec for 2 epochs (batch 16 over 40 examples: a short last batch)
 * on be (NULL: the CPU) with `threads`; returns the estimate and checks the
 * run's reported peak against it. */
static void check_run(const char *spec_text, const char *hp_text,
                      const nn_backend *be, int threads)
{
    const uint32_t shape[3] = {2, 6, 6};
    synth s;
    synth_init(&s, TY_TASK_CLASSIFICATION, 40, shape, 3, TY_DTYPE_F32, 3,
               "none");
    for (uint32_t i = 0; i < 40; i++) {
        s.y[i] = (int32_t)(i % 3);
        for (uint32_t j = 0; j < s.ds.features; j++)
            ((float *)s.x)[(size_t)i * s.ds.features + j] =
                (float)((i * 7 + j * 3) % 11) / 11.0f;
    }
    json_t *spec = json_loads(spec_text, 0, NULL);
    json_t *hpj = json_loads(hp_text, 0, NULL);
    assert_non_null(spec);
    assert_non_null(hpj);
    json_object_set_new(hpj, "epochs", json_integer(2));
    json_object_set_new(hpj, "batch_size", json_integer(16));
    json_object_set_new(hpj, "seed", json_integer(5));
    train_hparams hp;
    ty_err err = {0};
    assert_int_equal(train_hparams_parse(hpj, &hp, NULL, &err), TY_OK);
    assert_int_equal(
        train_hparams_resolve_loss(&hp, TY_TASK_CLASSIFICATION, 3, NULL, &err),
        TY_OK);
    train_memory est;
    int t = train_threads(threads, be);
    assert_int_equal(train_memory_estimate_spec(spec, shape, 3, 3,
                                                TY_TASK_CLASSIFICATION, &hp, 40,
                                                t, be, &est, &err),
                     TY_OK);
    assert_int_equal(est.batch_rows, 16);
    assert_int_equal(est.total, est.state + est.grads + est.optimizer +
                                    est.activations + est.work +
                                    est.low_precision);
    uint32_t slots = hp.optimizer != NN_OPTIM_SGD ? 2 : hp.momentum > 0 ? 1 : 0;
    assert_int_equal(est.optimizer, (uint64_t)slots * est.param_count * 4);

    char model[128];
    snprintf(model, sizeof model, "%s/model.safetensors", dir);
    unlink(model);
    nn_exec ex = {.device = &device_token};
    train_job job = {.spec = spec,
                     .hp = &hp,
                     .train = &s.ds,
                     .model_path = model,
                     .threads = threads,
                     .be = be,
                     .ex = be ? &ex : NULL};
    fake_live = fake_peak = fake_allocs = 0;
    train_epoch_metrics fin;
    ty_status st = train_run(&job, &fin, &err);
    if (st != TY_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(fin.peak_memory_bytes, est.total);
    if (be) {
        assert_true(fake_allocs >=
                    3); /* workspace, state, grads (+ arena, slots) */
        assert_int_equal(fake_peak, est.total);
        assert_int_equal(fake_live, 0);
    }
    json_decref(spec);
    json_decref(hpj);
    synth_free(&s);
}

static void check_all(const char *spec, const nn_backend *be, int threads)
{
    for (size_t i = 0; i < sizeof optimizers / sizeof *optimizers; i++)
        check_run(spec, optimizers[i], be, threads);
}

static void test_mlp_counted(void **state) { check_all(mlp, &fake_device, 1); }

/* Mixed precision on the fake device (which trains bf16 and fp16): the
 * 16-bit parameter copy and the dense layers' 16-bit scratch, in a plain
 * MLP, a CNN and a residual MLP (dense layers inside blocks), are counted
 * exactly too; on the CPU (fp32 whatever is asked) nothing is added. */
static const char *const resmlp =
    "{\"layers\":[{\"type\":\"flatten\"},{\"type\":\"dense\",\"units\":24},"
    "{\"type\":\"residual\",\"layers\":[{\"type\":\"dense\",\"units\":24},"
    "{\"type\":\"relu\"},{\"type\":\"dense\",\"units\":24}]},"
    "{\"type\":\"residual\",\"layers\":[{\"type\":\"dense\",\"units\":5}],"
    "\"projection\":[{\"type\":\"dense\",\"units\":5}]},"
    "{\"type\":\"dense\",\"units\":3}]}";

static void test_low_precision_counted(void **state)
{
    static const char *const hps[] = {
        "{\"optimizer\":\"adam\",\"precision\":\"bf16\"}",
        "{\"optimizer\":\"sgd\",\"precision\":\"fp16\"}",
        "{\"optimizer\":\"sgd\",\"momentum\":0.9,\"precision\":\"auto\"}",
    };
    const char *const specs[] = {mlp, cnn, resmlp};
    for (size_t i = 0; i < 3; i++)
        for (size_t h = 0; h < 3; h++) {
            check_run(specs[i], hps[h], &fake_device, 1);
            check_run(specs[i], hps[h], NULL, 2);
        }
    /* the parts: a 16-bit copy of every parameter, and more activation
     * memory than fp32 (the dense scratch) */
    const uint32_t shape[3] = {2, 6, 6};
    json_t *spec = json_loads(resmlp, 0, NULL);
    train_hparams h32, h16;
    ty_err err = {0};
    json_t *j = json_pack("{s:s}", "precision", "bf16");
    assert_int_equal(train_hparams_parse(NULL, &h32, NULL, &err), TY_OK);
    assert_int_equal(train_hparams_parse(j, &h16, NULL, &err), TY_OK);
    h16.seed = h32.seed;
    assert_int_equal(
        train_hparams_resolve_loss(&h32, TY_TASK_CLASSIFICATION, 3, NULL, &err),
        TY_OK);
    assert_int_equal(
        train_hparams_resolve_loss(&h16, TY_TASK_CLASSIFICATION, 3, NULL, &err),
        TY_OK);
    train_memory a, b, c;
    assert_int_equal(train_memory_estimate_spec(spec, shape, 3, 3,
                                                TY_TASK_CLASSIFICATION, &h32,
                                                100, 1, &fake_device, &a, &err),
                     TY_OK);
    assert_int_equal(train_memory_estimate_spec(spec, shape, 3, 3,
                                                TY_TASK_CLASSIFICATION, &h16,
                                                100, 1, &fake_device, &b, &err),
                     TY_OK);
    assert_int_equal(train_memory_estimate_spec(spec, shape, 3, 3,
                                                TY_TASK_CLASSIFICATION, &h16,
                                                100, 1, NULL, &c, &err),
                     TY_OK);
    assert_int_equal(a.low_precision, 0);
    assert_int_equal(b.low_precision, b.param_count * 2);
    assert_true(b.activations > a.activations);
    assert_int_equal(b.state, a.state);
    assert_int_equal(c.low_precision, 0); /* the CPU: fp32 */
    json_decref(j);
    json_decref(spec);
}
static void test_cnn_counted(void **state) { check_all(cnn, &fake_device, 1); }
static void test_resnet_counted(void **state)
{
    check_all(resnet, &fake_device, 1);
}

/* On the CPU itself: the reported peak, with a two-thread work arena. */
static void test_cpu_reported(void **state)
{
    check_all(mlp, NULL, 2);
    check_all(cnn, NULL, 2);
    check_all(resnet, NULL, 2);
}

/* The estimate grows with the batch: activations scale, parameters don't;
 * a batch above the example count is the example count. */
static void test_estimate_scales(void **state)
{
    const uint32_t shape[3] = {2, 6, 6};
    json_t *spec = json_loads(cnn, 0, NULL);
    train_hparams hp;
    ty_err err = {0};
    assert_int_equal(train_hparams_parse(NULL, &hp, NULL, &err), TY_OK);
    assert_int_equal(
        train_hparams_resolve_loss(&hp, TY_TASK_CLASSIFICATION, 3, NULL, &err),
        TY_OK);
    train_memory a, b, c;
    hp.batch_size = 16;
    assert_int_equal(train_memory_estimate_spec(spec, shape, 3, 3,
                                                TY_TASK_CLASSIFICATION, &hp,
                                                1000, 1, NULL, &a, &err),
                     TY_OK);
    hp.batch_size = 512;
    assert_int_equal(train_memory_estimate_spec(spec, shape, 3, 3,
                                                TY_TASK_CLASSIFICATION, &hp,
                                                1000, 1, NULL, &b, &err),
                     TY_OK);
    assert_int_equal(train_memory_estimate_spec(spec, shape, 3, 3,
                                                TY_TASK_CLASSIFICATION, &hp,
                                                100, 1, NULL, &c, &err),
                     TY_OK);
    assert_int_equal(a.state, b.state);
    assert_int_equal(a.optimizer, b.optimizer);
    assert_true(b.activations > 20 * a.activations);
    assert_int_equal(c.batch_rows, 100);
    assert_true(c.total < b.total);
    char buf[32];
    train_format_bytes(3435973837ull, buf, sizeof buf);
    assert_string_equal(buf, "3.2 GiB");
    train_format_bytes(12u << 20, buf, sizeof buf);
    assert_string_equal(buf, "12 MiB");
    train_format_bytes(100, buf, sizeof buf);
    assert_string_equal(buf, "100 B");
    json_decref(spec);
}

/* ZeRO-1's partition of the flat parameter block: the ranges tile
 * [0, total) in rank order, sizes differ by at most one with rank 0's the
 * largest, whatever the tensors (a range may cut one); more ranks than
 * elements leaves the last ranks empty. */
static void check_partition(uint64_t total, int world)
{
    uint64_t next = 0, big = 0, small = UINT64_MAX;
    for (int r = 0; r < world; r++) {
        uint64_t lo, hi;
        dp_zero_range(total, r, world, &lo, &hi);
        assert_int_equal(lo, next);
        assert_true(hi >= lo);
        if (r == 0)
            big = hi - lo;
        assert_true(hi - lo <= big);
        small = hi - lo < small ? hi - lo : small;
        next = hi;
    }
    assert_int_equal(next, total);
    assert_true(big - small <= 1);
    assert_int_equal(big, (total + (uint64_t)world - 1) / (uint64_t)world);
}

static void test_zero_partition(void **state)
{
    (void)state;
    uint64_t lo, hi;
    /* 10 over 3: 4, 3, 3. */
    dp_zero_range(10, 0, 3, &lo, &hi);
    assert_int_equal(lo, 0);
    assert_int_equal(hi, 4);
    dp_zero_range(10, 1, 3, &lo, &hi);
    assert_int_equal(lo, 4);
    assert_int_equal(hi, 7);
    dp_zero_range(10, 2, 3, &lo, &hi);
    assert_int_equal(lo, 7);
    assert_int_equal(hi, 10);
    /* Tensors of 7, 1 and 5 elements (13): over 2, 7 and 6 (the boundary
     * between the first two); over 4, 4, 3, 3, 3 (boundaries 4 and 10 cut
     * the first tensor and the third). */
    dp_zero_range(13, 1, 2, &lo, &hi);
    assert_int_equal(lo, 7);
    assert_int_equal(hi, 13);
    dp_zero_range(13, 1, 4, &lo, &hi);
    assert_int_equal(lo, 4);
    assert_int_equal(hi, 7);
    /* More ranks than elements (and than tensors): 3 over 5. */
    dp_zero_range(3, 2, 5, &lo, &hi);
    assert_int_equal(hi - lo, 1);
    dp_zero_range(3, 3, 5, &lo, &hi);
    assert_int_equal(lo, 3);
    assert_int_equal(hi, 3);
    dp_zero_range(0, 0, 2, &lo, &hi);
    assert_int_equal(hi, 0);
    /* One rank: everything. */
    dp_zero_range(235146, 0, 1, &lo, &hi);
    assert_int_equal(lo, 0);
    assert_int_equal(hi, 235146);
    const uint64_t totals[] = {0, 1, 2, 3, 7, 13, 1000, 235146, 235147};
    for (size_t i = 0; i < sizeof totals / sizeof *totals; i++)
        for (int w = 1; w <= 9; w++)
            check_partition(totals[i], w);
}

/* The estimate of one rank with zero 1: rank 0's shard of the optimizer
 * state (ceil(param_count / world) parameters' slots), the rest as zero 0;
 * at world 1, or with SGD without momentum (no state), nothing changes. */
static void test_zero_estimate(void **state)
{
    (void)state;
    const uint32_t shape[3] = {2, 6, 6};
    json_t *spec = json_loads(cnn, 0, NULL);
    train_hparams hp;
    ty_err err = {0};
    json_t *j = json_pack("{s:s, s:i}", "optimizer", "adam", "batch_size", 24);
    assert_int_equal(train_hparams_parse(j, &hp, NULL, &err), TY_OK);
    assert_int_equal(
        train_hparams_resolve_loss(&hp, TY_TASK_CLASSIFICATION, 3, NULL, &err),
        TY_OK);
    train_memory z0, z1, alone, plain;
    for (uint32_t world = 1; world <= 3; world++) {
        hp.zero = 0;
        assert_int_equal(train_memory_estimate_rank(
                             spec, shape, 3, 3, TY_TASK_CLASSIFICATION, &hp,
                             1000, 1, NULL, world, &z0, &err),
                         TY_OK);
        hp.zero = 1;
        assert_int_equal(train_memory_estimate_rank(
                             spec, shape, 3, 3, TY_TASK_CLASSIFICATION, &hp,
                             1000, 1, NULL, world, &z1, &err),
                         TY_OK);
        const uint64_t p = z0.param_count;
        assert_int_equal(z0.optimizer, 2 * p * sizeof(float));
        assert_int_equal(z1.optimizer,
                         2 * ((p + world - 1) / world) * sizeof(float));
        assert_int_equal(z1.total, z0.total - z0.optimizer + z1.optimizer);
        assert_int_equal(z1.activations, z0.activations);
        if (world == 1)
            alone = z1;
    }
    assert_int_equal(alone.optimizer, 2 * alone.param_count * sizeof(float));
    /* SGD without momentum keeps no state, sharded or not. */
    hp.optimizer = NN_OPTIM_SGD;
    hp.momentum = 0;
    assert_int_equal(train_memory_estimate_rank(spec, shape, 3, 3,
                                                TY_TASK_CLASSIFICATION, &hp,
                                                1000, 1, NULL, 2, &plain, &err),
                     TY_OK);
    assert_int_equal(plain.optimizer, 0);
    json_decref(j);
    json_decref(spec);
}

int main(void)
{
    fake_device_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_counted),
        cmocka_unit_test(test_low_precision_counted),
        cmocka_unit_test(test_cnn_counted),
        cmocka_unit_test(test_resnet_counted),
        cmocka_unit_test(test_cpu_reported),
        cmocka_unit_test(test_estimate_scales),
        cmocka_unit_test(test_zero_partition),
        cmocka_unit_test(test_zero_estimate),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
