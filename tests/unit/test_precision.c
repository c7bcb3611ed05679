/* test_precision.c - mixed-precision training on the CPU: the reference
 * cast (round to nearest even, ties, subnormals, fp16 overflow, NaN) and
 * gemm_lp (against a double-precision product of the rounded inputs, every
 * transpose, thread counts agree bit for bit); the fp16 loss scaler's
 * bookkeeping; hyperparameters.precision and how it resolves per backend;
 * and whole runs on the fake device (tests/unit/fake_device.h, which says
 * it trains fast in bf16 and fp16, so the engine's reduced-precision path
 * runs on the CPU's reference kernels): bf16 tracks fp32 and learns, fp16
 * with overflowing gradients skips steps and halves its scale, an fp16 run
 * resumed from a mid-run checkpoint ends bit-identical, a residual MLP
 * trains in bf16, a device without bf16 fails the run naming the field,
 * and the CPU itself trains a bf16 job in fp32 (and says so). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "models/cpu/cpu_internal.h"
#include "models/train/loss_scaler.h"
#include "models/safetensors.h"
#include "models/train/train.h"
#include "fake_device.h"
#include "synth_data.h"
#include "testutil.h"

/* The suite's scratch folder (tu_tmpdir_setup makes it, teardown removes it). */
static const char *const dir = tu_tmpdir;

static float from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ---- cast ---- */

static void test_bf16_rounding(void **state)
{
    /* 1 + 2^-8 is halfway between 1 (even) and 1 + 2^-7: down. */
    assert_int_equal(nn_cpu_bf16_from_f32(from_bits(0x3f808000u)), 0x3f80);
    /* halfway above an odd mantissa: up to even */
    assert_int_equal(nn_cpu_bf16_from_f32(from_bits(0x3f818000u)), 0x3f82);
    /* just above halfway: up; just below: down */
    assert_int_equal(nn_cpu_bf16_from_f32(from_bits(0x3f808001u)), 0x3f81);
    assert_int_equal(nn_cpu_bf16_from_f32(from_bits(0x3f807fffu)), 0x3f80);
    assert_int_equal(nn_cpu_bf16_from_f32(-1.0f), 0xbf80);
    assert_int_equal(nn_cpu_bf16_from_f32(-0.0f), 0x8000);
    assert_int_equal(nn_cpu_bf16_from_f32(INFINITY), 0x7f80);
    assert_int_equal(nn_cpu_bf16_from_f32(-INFINITY), 0xff80);
    /* FLT_MAX rounds past bf16's largest value: inf, as torch */
    assert_int_equal(nn_cpu_bf16_from_f32(FLT_MAX), 0x7f80);
    /* float subnormals round like any other value */
    assert_int_equal(nn_cpu_bf16_from_f32(from_bits(0x00008000u)), 0x0000);
    assert_int_equal(nn_cpu_bf16_from_f32(from_bits(0x00018000u)), 0x0002);
    uint16_t nan = nn_cpu_bf16_from_f32(NAN);
    assert_true(isnan(nn_cpu_bf16_to_f32(nan)));
    assert_true(isnan(nn_cpu_bf16_to_f32(nn_cpu_bf16_from_f32(-NAN))));
    /* every bf16 value converts back to itself */
    for (uint32_t h = 0; h < 65536; h++) {
        float x = nn_cpu_bf16_to_f32((uint16_t)h);
        if (!isnan(x))
            assert_int_equal(nn_cpu_bf16_from_f32(x), h);
    }
}

static void test_f16_rounding(void **state)
{
    assert_int_equal(nn_cpu_f16_from_f32(1.0f), 0x3c00);
    /* 1 + 2^-11: halfway, to even (1); 1 + 3 * 2^-11: to 1 + 2^-9 */
    assert_int_equal(nn_cpu_f16_from_f32(1.0f + 0x1p-11f), 0x3c00);
    assert_int_equal(nn_cpu_f16_from_f32(1.0f + 3 * 0x1p-11f), 0x3c02);
    assert_int_equal(nn_cpu_f16_from_f32(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
    /* the range's end: 65504 is the largest; 65519.99 still rounds to it,
     * 65520 (halfway, odd below) and beyond overflow to inf */
    assert_int_equal(nn_cpu_f16_from_f32(65504.0f), 0x7bff);
    assert_int_equal(nn_cpu_f16_from_f32(65519.99f), 0x7bff);
    assert_int_equal(nn_cpu_f16_from_f32(65520.0f), 0x7c00);
    assert_int_equal(nn_cpu_f16_from_f32(1e6f), 0x7c00);
    assert_int_equal(nn_cpu_f16_from_f32(-1e6f), 0xfc00);
    assert_int_equal(nn_cpu_f16_from_f32(INFINITY), 0x7c00);
    assert_int_equal(nn_cpu_f16_from_f32(-0.0f), 0x8000);
    /* subnormals: units of 2^-24 */
    assert_int_equal(nn_cpu_f16_from_f32(0x1p-14f),
                     0x0400); /* smallest normal */
    assert_int_equal(nn_cpu_f16_from_f32(0x1p-24f),
                     0x0001); /* smallest subnormal */
    assert_int_equal(nn_cpu_f16_from_f32(1023 * 0x1p-24f), 0x03ff);
    assert_int_equal(nn_cpu_f16_from_f32(1023.5f * 0x1p-24f),
                     0x0400); /* tie, to even */
    assert_int_equal(nn_cpu_f16_from_f32(0x1p-25f),
                     0x0000); /* tie, to even (0) */
    assert_int_equal(nn_cpu_f16_from_f32(0x1.0002p-25f), 0x0001);
    assert_int_equal(nn_cpu_f16_from_f32(3 * 0x1p-25f),
                     0x0002); /* tie, to even */
    assert_int_equal(nn_cpu_f16_from_f32(5 * 0x1p-25f),
                     0x0002); /* tie, to even */
    assert_int_equal(nn_cpu_f16_from_f32(-0x1p-24f), 0x8001);
    assert_int_equal(nn_cpu_f16_from_f32(0x1p-30f), 0x0000);
    assert_int_equal(nn_cpu_f16_from_f32(from_bits(1)),
                     0x0000); /* float subnormal */
    /* NaN stays NaN, sign kept */
    assert_int_equal(nn_cpu_f16_from_f32(NAN) & 0x7fff, 0x7e00);
    assert_true(isnan(nn_cpu_f16_to_f32(nn_cpu_f16_from_f32(NAN))));
    assert_int_equal(nn_cpu_f16_from_f32(-NAN) & 0x8000, 0x8000);
    /* decode: every fp16 value converts back to itself, and each value is
     * what the format says */
    assert_true(nn_cpu_f16_to_f32(0x0001) == 0x1p-24f);
    assert_true(nn_cpu_f16_to_f32(0x7bff) == 65504.0f);
    assert_true(nn_cpu_f16_to_f32(0xc000) == -2.0f);
    for (uint32_t h = 0; h < 65536; h++) {
        float x = nn_cpu_f16_to_f32((uint16_t)h);
        if (!isnan(x))
            assert_int_equal(nn_cpu_f16_from_f32(x), h);
    }
    /* against double arithmetic: the nearest fp16 value (ties even) over a
     * sweep of floats around 1 */
    for (uint32_t u = 0x3f800000u; u < 0x3f800000u + 40000u; u += 7) {
        float x = from_bits(u);
        uint16_t h = nn_cpu_f16_from_f32(x);
        double lo = nn_cpu_f16_to_f32(h), err = fabs((double)x - lo);
        double up = nn_cpu_f16_to_f32((uint16_t)(h + 1));
        double dn = nn_cpu_f16_to_f32((uint16_t)(h - 1));
        assert_true(err <= fabs((double)x - up));
        assert_true(err <= fabs((double)x - dn));
        if (err == fabs((double)x - up) || err == fabs((double)x - dn))
            assert_int_equal(h & 1, 0);
    }
}

/* The backend's cast member agrees with the scalar conversions, split over
 * a pool or not. */
static void test_cast_kernel(void **state)
{
    const size_t len = 100003; /* above the split threshold, odd */
    float *src = malloc(len * sizeof *src);
    uint16_t *a = malloc(len * 2), *b = malloc(len * 2);
    ty_rng r;
    ty_rng_seed(&r, 3, 4);
    for (size_t i = 0; i < len; i++)
        src[i] = (2.0f * ty_rng_uniform(&r) - 1.0f) *
                 ldexpf(1.0f, (int)(ty_rng_uniform(&r) * 60.0f) - 30);
    src[0] = NAN;
    src[1] = 1e30f;
    nn_pool *pool = nn_pool_create(2);
    nn_exec ex = {.pool = pool};
    for (int d = 0; d < 2; d++) {
        nn_dtype dt = d ? NN_DT_F16 : NN_DT_BF16;
        nn_backend_cpu.cast(&ex, a, dt, src, len);
        nn_backend_cpu.cast(NULL, b, dt, src, len);
        assert_memory_equal(a, b, len * 2);
        for (size_t i = 0; i < len; i++)
            assert_int_equal(a[i], dt == NN_DT_BF16
                                       ? nn_cpu_bf16_from_f32(src[i])
                                       : nn_cpu_f16_from_f32(src[i]));
    }
    assert_true(nn_backend_cpu.supports(NN_OP_CAST));
    assert_true(nn_backend_cpu.supports(NN_OP_GEMM_LP));
    assert_string_equal(nn_op_name(NN_OP_CAST), "cast");
    assert_string_equal(nn_op_name(NN_OP_GEMM_LP), "gemm_lp");
    nn_pool_destroy(pool);
    free(src);
    free(a);
    free(b);
}

/* ---- gemm_lp ---- */

static double widen(nn_dtype dt, uint16_t h)
{
    return dt == NN_DT_BF16 ? nn_cpu_bf16_to_f32(h) : nn_cpu_f16_to_f32(h);
}

/* C = alpha op(A) op(B) + beta C for every transpose against double sums
 * of the same rounded inputs: within fp32 summation error. */
static void gemm_lp_case(nn_dtype dt, int m, int n, int k, nn_pool *pool)
{
    const size_t la = (size_t)m * k, lb = (size_t)k * n, lc = (size_t)m * n;
    float *fa = malloc(la * 4), *fb = malloc(lb * 4);
    uint16_t *a = malloc(la * 2), *b = malloc(lb * 2);
    float *c = malloc(lc * 4), *c1 = malloc(lc * 4), *c0 = malloc(lc * 4);
    ty_rng r;
    ty_rng_seed(&r, (uint64_t)m * 131 + n, (uint64_t)k);
    for (size_t i = 0; i < la; i++)
        fa[i] = 4.0f * ty_rng_uniform(&r) - 2.0f;
    for (size_t i = 0; i < lb; i++)
        fb[i] = 4.0f * ty_rng_uniform(&r) - 2.0f;
    for (size_t i = 0; i < lc; i++)
        c0[i] = ty_rng_uniform(&r) - 0.5f;
    nn_backend_cpu.cast(NULL, a, dt, fa, la);
    nn_backend_cpu.cast(NULL, b, dt, fb, lb);
    nn_exec ex = {.pool = pool};
    for (int t = 0; t < 4; t++) {
        const int ta = t & 1, tb = t >> 1;
        for (int pass = 0; pass < 2; pass++) {
            const float alpha = pass ? 0.75f : 1.0f, beta = pass ? 0.5f : 0.0f;
            memcpy(c, c0, lc * 4);
            if (!pass)
                for (size_t i = 0; i < lc; i++)
                    c[i] = NAN; /* beta 0 ignores what was there */
            nn_backend_cpu.gemm_lp(&ex, c, a, b, dt, ta, tb, m, n, k, alpha,
                                   beta);
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) {
                    double s = 0.0, mag = 0.0;
                    for (int p = 0; p < k; p++) {
                        double x = widen(dt, ta ? a[(size_t)p * m + i]
                                                : a[(size_t)i * k + p]);
                        double y = widen(dt, tb ? b[(size_t)j * k + p]
                                                : b[(size_t)p * n + j]);
                        s += x * y;
                        mag += fabs(x * y);
                    }
                    double want = alpha * s + beta * c0[(size_t)i * n + j];
                    double got = c[(size_t)i * n + j];
                    double tol = (double)k * 0x1p-23 * mag + 1e-6;
                    if (!(fabs(got - want) <= tol))
                        fail_msg("%s gemm_lp ta %d tb %d (%d,%d,%d) [%d,%d]: "
                                 "%.9g vs %.9g",
                                 nn_dtype_name(dt), ta, tb, m, n, k, i, j, got,
                                 want);
                }
            /* one thread or several: the same bits (each output is summed
             * along k in order by one part) */
            memcpy(c1, c0, lc * 4);
            nn_backend_cpu.gemm_lp(NULL, c1, a, b, dt, ta, tb, m, n, k, alpha,
                                   beta);
            if (pass)
                assert_memory_equal(c, c1, lc * 4);
        }
    }
    free(fa);
    free(fb);
    free(a);
    free(b);
    free(c);
    free(c1);
    free(c0);
}

static void test_gemm_lp(void **state)
{
    nn_pool *pool = nn_pool_create(3);
    for (int d = 0; d < 2; d++) {
        nn_dtype dt = d ? NN_DT_F16 : NN_DT_BF16;
        gemm_lp_case(dt, 5, 7, 33, NULL);
        gemm_lp_case(dt, 1, 1, 1, pool);
        gemm_lp_case(dt, 70, 64, 80, pool); /* split over the pool */
    }
    nn_pool_destroy(pool);
    /* the CPU trains in fp32 whatever is asked */
    assert_int_equal(nn_backend_cpu.lp_ok(NULL, NN_DT_BF16), 0);
    assert_int_equal(nn_backend_cpu.lp_ok(NULL, NN_DT_F16), 0);
    assert_int_equal(nn_backend_cpu.lp_ok(NULL, NN_DT_F32), 1);
}

/* ---- the loss scaler ---- */

static void test_scaler_growth_and_backoff(void **state)
{
    loss_scaler s;
    loss_scaler_init(&s);
    assert_true(s.scale == 65536.0f);
    for (uint32_t i = 0; i + 1 < LOSS_SCALER_INTERVAL; i++)
        assert_int_equal(loss_scaler_update(&s, 1), 1);
    assert_true(s.scale == 65536.0f);
    assert_int_equal(s.good_steps, LOSS_SCALER_INTERVAL - 1);
    assert_int_equal(loss_scaler_update(&s, 1), 1); /* the 2000th */
    assert_true(s.scale == 131072.0f);
    assert_int_equal(s.good_steps, 0);
    /* an overflow skips, halves and restarts the count */
    for (int i = 0; i < 10; i++)
        assert_int_equal(loss_scaler_update(&s, 1), 1);
    assert_int_equal(loss_scaler_update(&s, 0), 0);
    assert_true(s.scale == 65536.0f);
    assert_int_equal(s.good_steps, 0);
    assert_int_equal(s.skipped, 1);
    assert_int_equal(loss_scaler_update(&s, 0), 0);
    assert_true(s.scale == 32768.0f);
    assert_int_equal(s.skipped, 2);
    /* growth never overflows float */
    s.scale = 0x1p127f;
    s.good_steps = LOSS_SCALER_INTERVAL - 1;
    assert_int_equal(loss_scaler_update(&s, 1), 1);
    assert_true(s.scale == 0x1p127f);
    assert_int_equal(s.good_steps, 0);

    /* checkpoint text round trip, and what is refused */
    char buf[96];
    s = (loss_scaler){.scale = 0.125f, .good_steps = 17, .skipped = 40};
    loss_scaler_format(&s, buf, sizeof buf);
    loss_scaler t;
    loss_scaler_init(&t);
    assert_int_equal(loss_scaler_parse(&t, buf), 1);
    assert_true(t.scale == 0.125f);
    assert_int_equal(t.good_steps, 17);
    assert_int_equal(t.skipped, 40);
    static const char *const bad[] = {"",        "1 2",     "0 1 2",
                                      "-1 1 2",  "inf 1 2", "1 2000 3",
                                      "1 2 3 4", "1 -2 3",  "x 1 2"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(loss_scaler_parse(&t, bad[i]), 0);
    assert_int_equal(loss_scaler_parse(&t, NULL), 0);
    assert_true(t.scale == 0.125f); /* untouched */
}

/* ---- hyperparameters ---- */

static train_hparams hparams_of(const char *text)
{
    json_t *j = json_loads(text, 0, NULL);
    assert_non_null(j);
    train_hparams hp;
    ty_err err;
    if (train_hparams_parse(j, &hp, NULL, &err) != TY_OK)
        fail_msg("%s", err.msg);
    json_decref(j);
    return hp;
}

/* A device that trains fp16 but not bf16 (a V100, say). */
static nn_backend old_device;
static int old_lp_ok(const nn_exec *ex, nn_dtype dt)
{
    return dt != NN_DT_BF16;
}

static void test_hparams_precision(void **state)
{
    train_hparams hp;
    ty_err err;
    json_t *norm = NULL;
    assert_int_equal(train_hparams_parse(NULL, &hp, &norm, &err), TY_OK);
    assert_int_equal(hp.precision, TRAIN_PRECISION_FP32);
    assert_string_equal(json_string_value(json_object_get(norm, "precision")),
                        "fp32");
    json_decref(norm);
    static const char *const names[] = {"fp32", "bf16", "fp16", "auto"};
    for (int i = 0; i < 4; i++) {
        json_t *j = json_pack("{s:s}", "precision", names[i]);
        assert_int_equal(train_hparams_parse(j, &hp, &norm, &err), TY_OK);
        assert_int_equal(hp.precision, i);
        assert_string_equal(
            json_string_value(json_object_get(norm, "precision")), names[i]);
        json_decref(norm);
        json_decref(j);
    }
    static const char *const bad[] = {
        "{\"precision\":\"fp64\"}", "{\"precision\":\"BF16\"}",
        "{\"precision\":16}", "{\"precision\":\"\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_t *j = json_loads(bad[i], 0, NULL);
        memset(&err, 0, sizeof err);
        assert_int_equal(train_hparams_parse(j, &hp, NULL, &err), TY_EINVAL);
        assert_string_equal(err.field, "hyperparameters.precision");
        json_decref(j);
    }

    /* how each backend resolves it */
    struct {
        const char *hp;
        const nn_backend *be;
        ty_status st;
        nn_dtype want;
    } cases[] = {
        {"{}", NULL, TY_OK, NN_DT_F32},
        {"{\"precision\":\"bf16\"}", NULL, TY_OK, NN_DT_F32},
        {"{\"precision\":\"fp16\"}", NULL, TY_OK, NN_DT_F32},
        {"{\"precision\":\"auto\"}", NULL, TY_OK, NN_DT_F32},
        {"{\"precision\":\"bf16\"}", &fake_device, TY_OK, NN_DT_BF16},
        {"{\"precision\":\"fp16\"}", &fake_device, TY_OK, NN_DT_F16},
        {"{\"precision\":\"auto\"}", &fake_device, TY_OK, NN_DT_BF16},
        {"{\"precision\":\"fp32\"}", &fake_device, TY_OK, NN_DT_F32},
        {"{\"precision\":\"auto\"}", &old_device, TY_OK, NN_DT_F32},
        {"{\"precision\":\"fp16\"}", &old_device, TY_OK, NN_DT_F16},
        {"{\"precision\":\"bf16\"}", &old_device, TY_EINVAL, NN_DT_F32},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        hp = hparams_of(cases[i].hp);
        nn_dtype dt = (nn_dtype)99;
        memset(&err, 0, sizeof err);
        assert_int_equal(
            train_precision_resolve(&hp, cases[i].be, NULL, &dt, &err),
            cases[i].st);
        if (cases[i].st == TY_OK) {
            assert_int_equal(dt, cases[i].want);
        } else {
            assert_string_equal(err.field, "hyperparameters.precision");
            assert_non_null(strstr(err.msg, "bf16"));
        }
    }
}

/* ---- whole runs ---- */

typedef struct {
    int epochs_seen;
    train_epoch_metrics first, last;
    uint64_t skipped; /* summed over epoch records */
    uint32_t stop_after_epoch;
    int stop_on_progress;
    volatile sig_atomic_t *stop;
    double losses[32];
    int resumed;
    uint64_t resume_step;
} cb_state;

static void on_resume(void *ctx, uint32_t epoch, uint64_t step)
{
    cb_state *c = ctx;
    c->resumed++;
    c->resume_step = step;
}

static void on_epoch(void *ctx, const train_epoch_metrics *m)
{
    cb_state *c = ctx;
    c->epochs_seen++;
    if (c->epochs_seen == 1)
        c->first = *m;
    c->last = *m;
    c->skipped += m->skipped_steps;
    if (m->epoch >= 1 && m->epoch <= 32)
        c->losses[m->epoch - 1] = m->train_loss;
    if (c->stop_after_epoch && m->epoch == c->stop_after_epoch)
        *c->stop = 1;
}

static void on_progress(void *ctx, const train_progress *p)
{
    cb_state *c = ctx;
    if (c->stop_on_progress && p->step >= (uint64_t)c->stop_on_progress) {
        *c->stop = 1;
        c->stop_on_progress = 0;
    }
}

static int device_token;
static nn_exec device_ex = {.device = &device_token};

static train_job job_of(const json_t *spec, const train_hparams *hp,
                        const ty_dataset *ds, const nn_backend *be,
                        cb_state *cb, volatile sig_atomic_t *stop,
                        const char *ckpt, const char *model)
{
    train_job j = {
        .spec = spec,
        .hp = hp,
        .train = ds,
        .checkpoint_path = ckpt,
        .model_path = model,
        .threads = 1,
        .stop = stop,
        .cb = {.ctx = cb,
               .on_epoch = on_epoch,
               .on_progress = on_progress,
               .on_resume = on_resume},
        .be = be,
        .ex = be ? &device_ex : NULL,
    };
    cb->stop = stop;
    return j;
}

static void run_ok(train_job *job, train_epoch_metrics *fin)
{
    ty_err err;
    ty_status st = train_run(job, fin, &err);
    if (st != TY_OK)
        fail_msg("%s: %s", ty_status_name(st), err.msg);
}

static void path_in(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
    unlink(buf);
}

/* The float tensors of a model file, concatenated (malloc'd; *n floats). */
static float *model_weights(const char *path, size_t *n)
{
    st_file f;
    assert_int_equal(st_open(path, &f, NULL), TY_OK);
    size_t total = 0;
    for (size_t i = 0; i < f.count; i++)
        total += f.tensors[i].nbytes / 4;
    float *w = malloc(total * 4);
    size_t at = 0;
    for (size_t i = 0; i < f.count; i++) {
        memcpy(w + at, f.tensors[i].data, f.tensors[i].nbytes);
        at += f.tensors[i].nbytes / 4;
    }
    st_close(&f);
    *n = total;
    return w;
}

static const char *const mlp_spec =
    "{\"layers\":[{\"type\":\"dense\",\"units\":32},{\"type\":\"tanh\"},"
    "{\"type\":\"dense\",\"units\":2}]}";

/* bf16 on the fake device: the same run as fp32 up to bf16 rounding. Its
 * losses track fp32's epoch by epoch and fall, it ends as accurate, its
 * weights are close but not the same bits (the 16-bit path did run), and
 * the epoch records say bf16. */
static void test_bf16_tracks_fp32(void **state)
{
    synth s;
    synth_xor(&s, 256, 7);
    json_t *spec = json_loads(mlp_spec, 0, NULL);
    char m32[128], m16[128];
    path_in(m32, sizeof m32, "fp32.safetensors");
    path_in(m16, sizeof m16, "bf16.safetensors");
    train_hparams h32 = hparams_of("{\"epochs\":12,\"batch_size\":32,"
                                   "\"learning_rate\":0.01,\"seed\":3}");
    train_hparams h16 = hparams_of("{\"epochs\":12,\"batch_size\":32,"
                                   "\"learning_rate\":0.01,\"seed\":3,"
                                   "\"precision\":\"bf16\"}");
    volatile sig_atomic_t stop = 0;
    cb_state c32 = {0}, c16 = {0};
    train_epoch_metrics f32, f16;
    train_job j =
        job_of(spec, &h32, &s.ds, &fake_device, &c32, &stop, NULL, m32);
    run_ok(&j, &f32);
    j = job_of(spec, &h16, &s.ds, &fake_device, &c16, &stop, NULL, m16);
    run_ok(&j, &f16);
    assert_string_equal(f32.precision, "fp32");
    assert_string_equal(f16.precision, "bf16");
    assert_string_equal(c16.first.precision, "bf16");
    assert_true(f16.loss_scale == 0.0);
    assert_int_equal(c16.skipped, 0);
    for (int e = 0; e < 12; e++) {
        double a = c32.losses[e], b = c16.losses[e];
        if (!(fabs(a - b) <= 0.05 * a + 0.01))
            fail_msg("epoch %d: fp32 loss %g, bf16 %g", e + 1, a, b);
    }
    assert_true(f16.train_loss < 0.5 * c16.first.train_loss);
    assert_true(f16.train_accuracy >= 0.9);
    assert_true(fabs(f16.train_accuracy - f32.train_accuracy) <= 0.05);
    size_t n32, n16;
    float *w32 = model_weights(m32, &n32), *w16 = model_weights(m16, &n16);
    assert_int_equal(n32, n16);
    double maxw = 0.0, maxd = 0.0;
    for (size_t i = 0; i < n32; i++) {
        maxw = fmax(maxw, fabs(w32[i]));
        maxd = fmax(maxd, fabs((double)w32[i] - w16[i]));
    }
    assert_true(maxd > 0.0);         /* bf16 really ran */
    assert_true(maxd <= 0.1 * maxw); /* and stayed near fp32 */
    free(w32);
    free(w16);
    json_decref(spec);
    synth_free(&s);
}

/* A residual MLP (dense layers inside a block) trains in bf16 too, close
 * to fp32. */
static void test_bf16_residual(void **state)
{
    synth s;
    synth_xor(&s, 128, 9);
    json_t *spec = json_loads(
        "{\"layers\":[{\"type\":\"dense\",\"units\":16},{\"type\":\"relu\"},"
        "{\"type\":\"residual\",\"layers\":[{\"type\":\"dense\",\"units\":16},"
        "{\"type\":\"relu\"},{\"type\":\"dense\",\"units\":16}]},"
        "{\"type\":\"residual\",\"layers\":[{\"type\":\"dense\",\"units\":8}],"
        "\"projection\":[{\"type\":\"dense\",\"units\":8,\"bias\":false}]},"
        "{\"type\":\"dense\",\"units\":2}]}",
        0, NULL);
    assert_non_null(spec);
    char m32[128], m16[128];
    path_in(m32, sizeof m32, "r32.safetensors");
    path_in(m16, sizeof m16, "r16.safetensors");
    train_hparams h32 = hparams_of("{\"epochs\":6,\"batch_size\":16,"
                                   "\"learning_rate\":0.01,\"seed\":4}");
    train_hparams h16 = h32;
    h16.precision = TRAIN_PRECISION_BF16;
    volatile sig_atomic_t stop = 0;
    cb_state c32 = {0}, c16 = {0};
    train_epoch_metrics f32, f16;
    train_job j =
        job_of(spec, &h32, &s.ds, &fake_device, &c32, &stop, NULL, m32);
    run_ok(&j, &f32);
    j = job_of(spec, &h16, &s.ds, &fake_device, &c16, &stop, NULL, m16);
    run_ok(&j, &f16);
    assert_string_equal(f16.precision, "bf16");
    for (int e = 0; e < 6; e++)
        assert_true(fabs(c32.losses[e] - c16.losses[e]) <=
                    0.05 * c32.losses[e] + 0.01);
    assert_true(f16.train_loss < c16.first.train_loss);
    size_t n32, n16;
    float *w32 = model_weights(m32, &n32), *w16 = model_weights(m16, &n16);
    assert_int_equal(n32, n16);
    assert_true(memcmp(w32, w16, n32 * 4) != 0);
    free(w32);
    free(w16);
    json_decref(spec);
    synth_free(&s);
}

/* Regression on targets near 1000 with batch 8: the first loss gradients,
 * 2 (pred - y) / 8 times the scale 2^16, are far beyond fp16's 65504, so
 * their 16-bit copies overflow to inf until the scale has halved enough. */
static void synth_big_targets(synth *s, uint32_t n)
{
    static const uint32_t shape[] = {4};
    synth_init(s, TY_TASK_REGRESSION, n, shape, 1, TY_DTYPE_F32, 1, "none");
    ty_rng r;
    ty_rng_seed(&r, 11, 2);
    float *x = s->x;
    for (uint32_t i = 0; i < n; i++) {
        for (int j = 0; j < 4; j++)
            x[i * 4 + j] = 2.0f * ty_rng_uniform(&r) - 1.0f;
        s->yv[i] = 1000.0f + 100.0f * x[i * 4];
    }
}

static const char *const reg_spec =
    "{\"layers\":[{\"type\":\"dense\",\"units\":16},{\"type\":\"relu\"},"
    "{\"type\":\"dense\",\"units\":1}]}";
static const char *const fp16_hp =
    "{\"epochs\":6,\"batch_size\":8,\"learning_rate\":0.5,\"seed\":5,"
    "\"precision\":\"fp16\"}";

static void test_fp16_overflow_skips_and_backs_off(void **state)
{
    synth s;
    synth_big_targets(&s, 64); /* 8 steps an epoch */
    json_t *spec = json_loads(reg_spec, 0, NULL);
    char model[128];
    path_in(model, sizeof model, "fp16.safetensors");
    train_hparams hp = hparams_of(fp16_hp);
    volatile sig_atomic_t stop = 0;
    cb_state cb = {0};
    train_epoch_metrics fin;
    train_job j =
        job_of(spec, &hp, &s.ds, &fake_device, &cb, &stop, NULL, model);
    run_ok(&j, &fin);
    assert_string_equal(fin.precision, "fp16");
    /* at least up to a scale of 256 (65536 -> 256: 8 halvings) */
    assert_true(cb.first.skipped_steps >= 8);
    assert_true(cb.skipped < 6 * 8); /* and then it trains */
    /* no growth in 48 steps: the scale is 2^16 halved once per skip */
    assert_true(fin.loss_scale == ldexp(65536.0, -(int)cb.skipped));
    assert_true(cb.first.loss_scale ==
                ldexp(65536.0, -(int)cb.first.skipped_steps));
    assert_true(isfinite(fin.train_loss));
    assert_true(fin.train_loss < 0.5 * cb.first.train_loss);
    /* reported losses are unscaled: near the mean squared error of the
     * untrained net (about 1000^2) in the first epoch, not 2^16 times it */
    assert_true(cb.first.train_loss < 2e6);
    /* the same run in fp32 never skips and says so */
    train_hparams h32 = hp;
    h32.precision = TRAIN_PRECISION_FP32;
    cb_state c32 = {0};
    j = job_of(spec, &h32, &s.ds, &fake_device, &c32, &stop, NULL, model);
    run_ok(&j, &fin);
    assert_int_equal(c32.skipped, 0);
    assert_true(fin.loss_scale == 0.0);
    assert_string_equal(fin.precision, "fp32");
    json_decref(spec);
    synth_free(&s);
}

/* An fp16 run stopped mid-run (after skipped steps changed the scale) and
 * resumed from its checkpoint ends with the same bits as an uninterrupted
 * one: weights, optimizer state, losses and the scaler's record. */
static void fp16_resume_case(uint32_t stop_after_epoch, int stop_at_step,
                             uint64_t want_step)
{
    synth s;
    synth_big_targets(&s, 64);
    json_t *spec = json_loads(reg_spec, 0, NULL);
    char full[128], full_ckpt[128], part[128], part_ckpt[128];
    path_in(full, sizeof full, "full.safetensors");
    path_in(full_ckpt, sizeof full_ckpt, "full.ckpt");
    path_in(part, sizeof part, "part.safetensors");
    path_in(part_ckpt, sizeof part_ckpt, "part.ckpt");
    train_hparams hp = hparams_of(fp16_hp);
    hp.checkpoint_every_steps = 1;
    hp.optimizer = NN_OPTIM_ADAM; /* its step count must skip too */
    volatile sig_atomic_t stop = 0;
    cb_state a = {0};
    train_epoch_metrics fa, fb;
    train_job j =
        job_of(spec, &hp, &s.ds, &fake_device, &a, &stop, full_ckpt, full);
    run_ok(&j, &fa);
    assert_true(a.skipped >= 8);

    cb_state b = {.stop_after_epoch = stop_after_epoch,
                  .stop_on_progress = stop_at_step};
    j = job_of(spec, &hp, &s.ds, &fake_device, &b, &stop, part_ckpt, part);
    ty_err err;
    assert_int_equal(train_run(&j, &fb, &err), TY_ECANCELLED);
    assert_true(fs_exists(part_ckpt));
    /* the checkpoint carries the scaler: skips so far, the scale halved */
    st_file f;
    assert_int_equal(st_open(part_ckpt, &f, NULL), TY_OK);
    loss_scaler ls;
    assert_int_equal(
        loss_scaler_parse(&ls, st_meta(&f, "trainyard.loss_scaler")), 1);
    assert_true(ls.skipped >= 1);
    assert_true(ls.scale == ldexpf(65536.0f, -(int)ls.skipped));
    st_close(&f);
    stop = 0;
    cb_state c = {0};
    j = job_of(spec, &hp, &s.ds, &fake_device, &c, &stop, part_ckpt, part);
    run_ok(&j, &fb);
    assert_int_equal(c.resumed, 1);
    assert_int_equal(c.resume_step, want_step);
    tu_assert_tensors_equal(full, part);
    tu_assert_tensors_equal(full_ckpt, part_ckpt);
    assert_memory_equal(&fa.train_loss, &fb.train_loss, sizeof(double));
    assert_true(fa.loss_scale == fb.loss_scale);
    assert_int_equal(fa.skipped_steps, fb.skipped_steps);
    assert_string_equal(fb.precision, "fp16");
    json_decref(spec);
    synth_free(&s);
}

static void test_fp16_resume_mid_epoch(void **state)
{
    /* the first progress report comes at step 1, whose gradients
     * overflowed: the checkpoint holds a skipped step and a halved scale */
    fp16_resume_case(0, 1, 1);
}

static void test_fp16_resume_mid_run(void **state)
{
    /* after epoch 1 (8 steps), then mid-epoch resumes are the case above */
    fp16_resume_case(1, 0, 8);
}

/* A checkpoint of a fp32 run does not resume a bf16 one (the trajectory
 * differs) on a device that trains bf16. */
static void test_precision_in_identity(void **state)
{
    synth s;
    synth_xor(&s, 64, 1);
    json_t *spec = json_loads(mlp_spec, 0, NULL);
    char model[128], ckpt[128];
    path_in(model, sizeof model, "id.safetensors");
    path_in(ckpt, sizeof ckpt, "id.ckpt");
    train_hparams hp =
        hparams_of("{\"epochs\":1,\"batch_size\":16,\"seed\":1}");
    volatile sig_atomic_t stop = 0;
    cb_state cb = {0};
    train_epoch_metrics fin;
    train_job j =
        job_of(spec, &hp, &s.ds, &fake_device, &cb, &stop, ckpt, model);
    run_ok(&j, &fin);
    hp.precision = TRAIN_PRECISION_BF16;
    ty_err err;
    assert_int_equal(train_run(&j, &fin, &err), TY_EINVAL);
    assert_non_null(strstr(err.msg, "does not match"));
    json_decref(spec);
    synth_free(&s);
}

/* A device without bf16 fails an explicit bf16 job naming the field. */
static void test_device_without_bf16_fails(void **state)
{
    synth s;
    synth_xor(&s, 64, 1);
    json_t *spec = json_loads(mlp_spec, 0, NULL);
    char model[128];
    path_in(model, sizeof model, "old.safetensors");
    train_hparams hp = hparams_of("{\"epochs\":1,\"precision\":\"bf16\"}");
    volatile sig_atomic_t stop = 0;
    cb_state cb = {0};
    train_epoch_metrics fin;
    train_job j =
        job_of(spec, &hp, &s.ds, &old_device, &cb, &stop, NULL, model);
    ty_err err = {0};
    assert_int_equal(train_run(&j, &fin, &err), TY_EINVAL);
    assert_string_equal(err.field, "hyperparameters.precision");
    assert_false(fs_exists(model));
    assert_int_equal(fake_live, 0);
    /* auto there is fp32 */
    hp.precision = TRAIN_PRECISION_AUTO;
    run_ok(&j, &fin);
    assert_string_equal(fin.precision, "fp32");
    json_decref(spec);
    synth_free(&s);
}

/* The CPU trains a bf16 (or fp16) job in fp32, says fp32, and gets fp32's
 * bits exactly. */
static void test_cpu_bf16_is_fp32(void **state)
{
    synth s;
    synth_xor(&s, 96, 2);
    json_t *spec = json_loads(mlp_spec, 0, NULL);
    char a[128], b[128];
    path_in(a, sizeof a, "cpu32.safetensors");
    path_in(b, sizeof b, "cpu16.safetensors");
    train_hparams h32 =
        hparams_of("{\"epochs\":2,\"batch_size\":16,\"seed\":8}");
    volatile sig_atomic_t stop = 0;
    cb_state c32 = {0};
    train_epoch_metrics f32, f16;
    train_job j = job_of(spec, &h32, &s.ds, NULL, &c32, &stop, NULL, a);
    run_ok(&j, &f32);
    for (int p = TRAIN_PRECISION_BF16; p <= TRAIN_PRECISION_AUTO; p++) {
        train_hparams h16 = h32;
        h16.precision = (train_precision)p;
        cb_state c16 = {0};
        j = job_of(spec, &h16, &s.ds, NULL, &c16, &stop, NULL, b);
        run_ok(&j, &f16);
        assert_string_equal(f16.precision, "fp32");
        assert_string_equal(c16.first.precision, "fp32");
        assert_true(f16.loss_scale == 0.0);
        assert_int_equal(f16.skipped_steps, 0);
        assert_memory_equal(&f32.train_loss, &f16.train_loss, sizeof(double));
        size_t n32, n16;
        float *w32 = model_weights(a, &n32), *w16 = model_weights(b, &n16);
        assert_int_equal(n32, n16);
        assert_memory_equal(w32, w16, n32 * 4);
        free(w32);
        free(w16);
    }
    json_decref(spec);
    synth_free(&s);
}

int main(void)
{
    fake_device_init();
    old_device = fake_device;
    old_device.name = "old-device";
    old_device.lp_ok = old_lp_ok;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_f16_rounding),
        cmocka_unit_test(test_cast_kernel),
        cmocka_unit_test(test_gemm_lp),
        cmocka_unit_test(test_scaler_growth_and_backoff),
        cmocka_unit_test(test_hparams_precision),
        cmocka_unit_test(test_bf16_tracks_fp32),
        cmocka_unit_test(test_bf16_residual),
        cmocka_unit_test(test_fp16_overflow_skips_and_backs_off),
        cmocka_unit_test(test_fp16_resume_mid_epoch),
        cmocka_unit_test(test_fp16_resume_mid_run),
        cmocka_unit_test(test_precision_in_identity),
        cmocka_unit_test(test_device_without_bf16_fails),
        cmocka_unit_test(test_cpu_bf16_is_fp32),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
