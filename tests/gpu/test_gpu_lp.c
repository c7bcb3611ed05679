/*
 * test_gpu_lp.c - the CUDA backend's reduced-precision members against the
 * CPU reference (models/cpu/lp.c), and mixed-precision training on
 * the GPU against fp32 training on the GPU (ctest label "gpu").
 *
 *   cast     fp32 -> bf16 and fp16 of random values over a wide exponent
 *            range plus the edge cases (ties, subnormals, fp16 overflow,
 *            inf, NaN): bit-identical to the CPU (NaN only as NaN: the
 *            payload differs, 0x7fff on CUDA, torch's 0x7fc0 on the CPU).
 *   gemm_lp  every transpose, alpha/beta, bf16 and fp16, on the same
 *            rounded inputs: |cuda - cpu| <= k 2^-23 sum_p |a_p b_p| +
 *            1e-6 (both sum exact products in fp32; only the order of the
 *            sums differs). beta 0 ignores NaN in C.
 *   lp_ok    bf16 from compute capability 8.0, fp16 from 7.0; fp32 always.
 *   train    an MLP and a CNN (whose convolutions then run TF32) trained on
 *            the GPU in bf16 and in fp16 track the same run in fp32: last
 *            epoch losses within 5% + 0.01, every weight within 0.1 of the
 *            largest, and the weights not bit-identical (the 16-bit path
 *            ran); the records say bf16 / fp16, fp16 reports its scale.
 *
 * Exit status: 0 passed, 1 a check failed, 77 skipped (no CUDA device, or
 * a binary built without TRAINYARD_HAVE_CUDA), with "SKIPPED: ..." on stdout.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/rng.h"
#include "common/ty.h"
#include "models/cpu/cpu_internal.h"
#include "models/safetensors.h"
#include "models/train/train.h"
#include "tests/unit/synth_data.h"

#if TRAINYARD_HAVE_CUDA
#include "gpu/cuda/backend.h"
#include "tests/gpu/gpu_testutil.h"

static int failures;

#define CHECK(cond, ...)                  \
    do {                                  \
        if (!(cond)) {                    \
            printf("FAIL: " __VA_ARGS__); \
            printf("\n");                 \
            failures++;                   \
        }                                 \
    } while (0)

static const nn_backend *gpu = &nn_backend_cuda;

static void *dev_from(const nn_exec *ex, const void *host, size_t bytes)
{
    void *d = gpu->alloc(ex, bytes);
    if (d)
        gpu->upload(ex, d, host, bytes);
    return d;
}

static int device_ok(const nn_exec *ex, const char *what)
{
    ty_err err;
    if (gpu->status(ex, &err) == TY_OK)
        return 1;
    printf("FAIL: %s: %s\n", what, err.msg);
    failures++;
    return 0;
}

static float from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static void case_cast(const nn_exec *ex)
{
    const size_t len = 200000;
    float *src = malloc(len * 4);
    uint16_t *want = malloc(len * 2), *got = malloc(len * 2);
    ty_rng r;
    ty_rng_seed(&r, 1, 2);
    static const uint32_t edges[] = {0x3f808000u, 0x3f818000u, 0x3f808001u,
                                     0x3f807fffu,              /* bf16 ties */
                                     0x3f801000u, 0x3f803000u, /* fp16 ties */
                                     0x477fe000u, 0x477fefffu, 0x477ff000u,
                                     0x49742400u, /* fp16 top */
                                     0x33800000u, 0x33000000u, 0x33400000u,
                                     0x38800000u, /* fp16 subnormals */
                                     0x387fc000u, 0x387fe000u, 0x00000001u,
                                     0x80000000u, 0x7f800000u, 0xff800000u,
                                     0x7f7fffffu, 0x7fc00000u, 0xffc00001u};
    const size_t ne = sizeof edges / sizeof *edges;
    for (size_t i = 0; i < len; i++)
        src[i] = i < ne
                     ? from_bits(edges[i])
                     : (2.0f * ty_rng_uniform(&r) - 1.0f) *
                           ldexpf(1.0f, (int)(ty_rng_uniform(&r) * 80.0f) - 40);
    float *d_src = dev_from(ex, src, len * 4);
    void *d_dst = gpu->alloc(ex, len * 2);
    for (int d = 0; d < 2; d++) {
        const nn_dtype dt = d ? NN_DT_F16 : NN_DT_BF16;
        nn_backend_cpu.cast(NULL, want, dt, src, len);
        gpu->cast(ex, d_dst, dt, d_src, len);
        gpu->download(ex, got, d_dst, len * 2);
        if (!device_ok(ex, "cast"))
            break;
        size_t bad = 0;
        for (size_t i = 0; i < len; i++) {
            if (isnan(src[i])) {
                float g = dt == NN_DT_BF16 ? nn_cpu_bf16_to_f32(got[i])
                                           : nn_cpu_f16_to_f32(got[i]);
                if (!isnan(g) && bad++ < 8)
                    printf("FAIL: %s cast of NaN gave %04x\n",
                           nn_dtype_name(dt), got[i]);
                continue;
            }
            uint32_t bits;
            memcpy(&bits, &src[i], sizeof bits);
            if (got[i] != want[i] && bad++ < 8)
                printf("FAIL: %s cast of %.9g (%08x): cuda %04x cpu %04x\n",
                       nn_dtype_name(dt), src[i], (unsigned)bits, got[i],
                       want[i]);
        }
        failures += bad != 0;
        if (!bad)
            printf("ok: cast %s: %zu values bit-identical to the CPU\n",
                   nn_dtype_name(dt), len);
    }
    gpu->release(ex, d_src);
    gpu->release(ex, d_dst);
    free(src);
    free(want);
    free(got);
}

static void case_gemm_lp(const nn_exec *ex, nn_dtype dt, int m, int n, int k)
{
    const size_t la = (size_t)m * k, lb = (size_t)k * n, lc = (size_t)m * n;
    float *fa = malloc(la * 4), *fb = malloc(lb * 4), *c0 = malloc(lc * 4);
    float *cc = malloc(lc * 4), *cg = malloc(lc * 4);
    uint16_t *a = malloc(la * 2), *b = malloc(lb * 2);
    ty_rng r;
    ty_rng_seed(&r, (uint64_t)m * 7 + n, (uint64_t)k);
    for (size_t i = 0; i < la; i++)
        fa[i] = 4.0f * ty_rng_uniform(&r) - 2.0f;
    for (size_t i = 0; i < lb; i++)
        fb[i] = 4.0f * ty_rng_uniform(&r) - 2.0f;
    for (size_t i = 0; i < lc; i++)
        c0[i] = ty_rng_uniform(&r) - 0.5f;
    nn_backend_cpu.cast(NULL, a, dt, fa, la);
    nn_backend_cpu.cast(NULL, b, dt, fb, lb);
    void *d_a = dev_from(ex, a, la * 2), *d_b = dev_from(ex, b, lb * 2);
    float *d_c = gpu->alloc(ex, lc * 4);
    double worst = 0.0;
    int bad = 0;
    for (int t = 0; t < 8 && !bad; t++) {
        const int ta = t & 1, tb = (t >> 1) & 1, pass = t >> 2;
        const float alpha = pass ? 0.75f : 1.0f, beta = pass ? 0.5f : 0.0f;
        memcpy(cc, c0, lc * 4);
        if (!pass)
            for (size_t i = 0; i < lc; i++)
                cc[i] = NAN;
        gpu->upload(ex, d_c, cc, lc * 4);
        nn_backend_cpu.gemm_lp(NULL, cc, a, b, dt, ta, tb, m, n, k, alpha,
                               beta);
        gpu->gemm_lp(ex, d_c, d_a, d_b, dt, ta, tb, m, n, k, alpha, beta);
        gpu->download(ex, cg, d_c, lc * 4);
        if (!device_ok(ex, "gemm_lp"))
            break;
        for (int i = 0; i < m && !bad; i++)
            for (int j = 0; j < n && !bad; j++) {
                double mag = 0.0;
                for (int p = 0; p < k; p++) {
                    uint16_t x =
                        ta ? a[(size_t)p * m + i] : a[(size_t)i * k + p];
                    uint16_t y =
                        tb ? b[(size_t)j * k + p] : b[(size_t)p * n + j];
                    double xv = dt == NN_DT_BF16 ? nn_cpu_bf16_to_f32(x)
                                                 : nn_cpu_f16_to_f32(x);
                    double yv = dt == NN_DT_BF16 ? nn_cpu_bf16_to_f32(y)
                                                 : nn_cpu_f16_to_f32(y);
                    mag += fabs(xv * yv);
                }
                const size_t at = (size_t)i * n + j;
                double tol = 2.0 * k * 0x1p-23 * mag * fabs(alpha) + 1e-6;
                double d = fabs((double)cg[at] - cc[at]);
                if (d / tol > worst)
                    worst = d / tol;
                if (!(d <= tol)) {
                    printf("FAIL: gemm_lp %s ta %d tb %d (%d,%d,%d) [%d,%d]: "
                           "cuda %.9g cpu %.9g\n",
                           nn_dtype_name(dt), ta, tb, m, n, k, i, j, cg[at],
                           cc[at]);
                    bad = 1;
                }
            }
    }
    failures += bad;
    if (!bad)
        printf("ok: gemm_lp %s (%d,%d,%d), all transposes: worst %.3f of "
               "the tolerance\n",
               nn_dtype_name(dt), m, n, k, worst);
    gpu->release(ex, d_a);
    gpu->release(ex, d_b);
    gpu->release(ex, d_c);
    free(fa);
    free(fb);
    free(c0);
    free(cc);
    free(cg);
    free(a);
    free(b);
}

static void case_lp_ok(const nn_exec *ex)
{
    nn_cuda_device d;
    ty_err err;
    if (nn_cuda_device_get(0, &d, &err) != TY_OK) {
        printf("FAIL: %s\n", err.msg);
        failures++;
        return;
    }
    const int cc = d.cc_major * 10 + d.cc_minor;
    CHECK(gpu->lp_ok(ex, NN_DT_BF16) == (cc >= 80), "lp_ok bf16 on cc %d", cc);
    CHECK(gpu->lp_ok(ex, NN_DT_F16) == (cc >= 70), "lp_ok fp16 on cc %d", cc);
    CHECK(gpu->lp_ok(NULL, NN_DT_BF16) == (cc >= 80),
          "lp_ok(NULL) bf16 on cc %d", cc);
    CHECK(gpu->lp_ok(ex, NN_DT_F32) == 1, "lp_ok fp32");
    CHECK(gpu->supports(NN_OP_CAST) && gpu->supports(NN_OP_GEMM_LP),
          "supports cast and gemm_lp");
    printf("ok: lp_ok on %s (cc %d.%d)\n", d.name, d.cc_major, d.cc_minor);
}

/* ---- training ---- */

static int train_once(const synth *s, const char *spec_text, const char *prec,
                      const char *path, const nn_exec *ex,
                      train_epoch_metrics *out)
{
    char hp_text[256];
    snprintf(hp_text, sizeof hp_text,
             "{\"epochs\":4,\"batch_size\":32,\"optimizer\":\"adam\","
             "\"learning_rate\":0.003,\"seed\":5,\"precision\":\"%s\"}",
             prec);
    const train_callbacks none = {0};
    return gpu_train_run(prec, s, NULL, spec_text, hp_text, path, gpu, ex, -1,
                         none, out);
}

static float *weights(const char *path, size_t *n)
{
    st_file f;
    if (st_open(path, &f, NULL) != TY_OK)
        return NULL;
    size_t total = 0;
    for (size_t i = 0; i < f.count; i++)
        total += f.tensors[i].nbytes / 4;
    float *w = malloc(total * 4 + 4);
    size_t at = 0;
    for (size_t i = 0; i < f.count; i++) {
        memcpy(w + at, f.tensors[i].data, f.tensors[i].nbytes);
        at += f.tensors[i].nbytes / 4;
    }
    st_close(&f);
    *n = total;
    return w;
}

static void case_train(const char *name, const synth *s, const char *spec,
                       const char *prec, const nn_exec *ex)
{
    char p32[256], plp[256];
    snprintf(p32, sizeof p32, "/tmp/ty_gpu_lp_%d_%s_fp32.st", (int)getpid(),
             name);
    snprintf(plp, sizeof plp, "/tmp/ty_gpu_lp_%d_%s_%s.st", (int)getpid(), name,
             prec);
    train_epoch_metrics m32, mlp;
    if (train_once(s, spec, "fp32", p32, ex, &m32) ||
        train_once(s, spec, prec, plp, ex, &mlp)) {
        failures++;
        return;
    }
    int bad = 0;
    if (strcmp(mlp.precision, prec) || strcmp(m32.precision, "fp32")) {
        printf("FAIL: %s: records say %s and %s\n", name, m32.precision,
               mlp.precision);
        bad = 1;
    }
    if (!strcmp(prec, "fp16") != (mlp.loss_scale > 0.0)) {
        printf("FAIL: %s %s: loss_scale %g\n", name, prec, mlp.loss_scale);
        bad = 1;
    }
    if (!(fabs(m32.train_loss - mlp.train_loss) <=
          0.05 * m32.train_loss + 0.01)) {
        printf("FAIL: %s: last epoch loss fp32 %.6g %s %.6g\n", name,
               m32.train_loss, prec, mlp.train_loss);
        bad = 1;
    }
    size_t n32 = 0, nlp = 0;
    float *w32 = weights(p32, &n32), *wlp = weights(plp, &nlp);
    if (!w32 || !wlp || n32 != nlp) {
        printf("FAIL: %s: model files unreadable or of different sizes\n",
               name);
        bad = 1;
    } else {
        double maxw = 0.0, maxd = 0.0;
        for (size_t i = 0; i < n32; i++) {
            maxw = fmax(maxw, fabs(w32[i]));
            maxd = fmax(maxd, fabs((double)w32[i] - wlp[i]));
        }
        if (!(maxd > 0.0) || !(maxd <= 0.1 * maxw)) {
            printf("FAIL: %s %s: largest weight difference %.3g (largest "
                   "weight %.3g)\n",
                   name, prec, maxd, maxw);
            bad = 1;
        } else {
            printf("ok: %s %s: loss %.5f vs fp32 %.5f, weights within %.3g "
                   "(largest %.3g), skipped %llu\n",
                   name, prec, mlp.train_loss, m32.train_loss, maxd, maxw,
                   (unsigned long long)mlp.skipped_steps);
        }
    }
    free(w32);
    free(wlp);
    unlink(p32);
    unlink(plp);
    failures += bad;
}

int main(void)
{
    nn_exec ex;
    int open_rc = gpu_open(&ex);
    if (open_rc != 0)
        return open_rc;
    case_lp_ok(&ex);
    case_cast(&ex);
    for (int d = 0; d < 2; d++) {
        const nn_dtype dt = d ? NN_DT_F16 : NN_DT_BF16;
        case_gemm_lp(&ex, dt, 5, 7, 33);
        case_gemm_lp(&ex, dt, 1, 1, 1);
        case_gemm_lp(&ex, dt, 128, 96, 256);
        case_gemm_lp(&ex, dt, 67, 130, 515);
    }
    if (!gpu->lp_ok(&ex, NN_DT_BF16)) {
        printf("SKIPPED: training checks: this GPU does not train bf16\n");
        nn_cuda_exec_free(&ex);
        return failures ? 1 : 77;
    }

    /* MLP: 512 examples of 16 features, 4 classes from a linear rule. */
    synth mlp;
    static const uint32_t mlp_shape[] = {16};
    synth_init(&mlp, TY_TASK_CLASSIFICATION, 512, mlp_shape, 1, TY_DTYPE_F32, 4,
               "none");
    ty_rng r;
    ty_rng_seed(&r, 9, 1);
    for (uint32_t i = 0; i < 512; i++) {
        float *x = (float *)mlp.x + (size_t)i * 16;
        for (int j = 0; j < 16; j++)
            x[j] = ty_rng_normal(&r);
        mlp.y[i] = (x[0] > 0) + 2 * (x[1] + x[2] > 0);
    }
    const char *mlp_spec =
        "{\"layers\":[{\"type\":\"dense\",\"units\":64},{\"type\":\"relu\"},"
        "{\"type\":\"dense\",\"units\":64},{\"type\":\"relu\"},"
        "{\"type\":\"dense\",\"units\":4}]}";
    case_train("mlp", &mlp, mlp_spec, "bf16", &ex);
    case_train("mlp", &mlp, mlp_spec, "fp16", &ex);
    synth_free(&mlp);

    /* CNN: 512 images (1, 12, 12), 3 classes by which third is brightest. */
    synth cnn;
    static const uint32_t cnn_shape[] = {1, 12, 12};
    synth_init(&cnn, TY_TASK_CLASSIFICATION, 512, cnn_shape, 3, TY_DTYPE_F32, 3,
               "none");
    for (uint32_t i = 0; i < 512; i++) {
        float *x = (float *)cnn.x + (size_t)i * 144;
        int cls = (int)(ty_rng_u64(&r) % 3);
        for (int p = 0; p < 144; p++)
            x[p] = ty_rng_uniform(&r) + ((p % 12) / 4 == cls ? 0.5f : 0.0f);
        cnn.y[i] = cls;
    }
    const char *cnn_spec =
        "{\"layers\":[{\"type\":\"conv2d\",\"filters\":8,\"kernel_size\":3,"
        "\"padding\":1},{\"type\":\"relu\"},"
        "{\"type\":\"maxpool2d\",\"pool_size\":2},{\"type\":\"flatten\"},"
        "{\"type\":\"dense\",\"units\":32},{\"type\":\"relu\"},"
        "{\"type\":\"dense\",\"units\":3}]}";
    case_train("cnn", &cnn, cnn_spec, "bf16", &ex);
    synth_free(&cnn);

    nn_cuda_exec_free(&ex);
    printf("%s\n", failures ? "FAILED" : "all passed");
    return failures ? 1 : 0;
}

#else

int main(void)
{
    printf("SKIPPED: this binary was built without the CUDA backend\n");
    return 77;
}

#endif
