/*
 * test_gpu_ops.c - every op of the CUDA backend against the CPU reference
 * backend (ctest label "gpu").
 *
 * Each case draws random inputs on the host (fixed seeds), runs the CPU
 * member (one thread, host work arena sized by nn_backend_cpu.conv2d_work),
 * uploads the same inputs into nn_backend_cuda.alloc'd memory, runs the
 * CUDA member on an nn_cuda_exec_init context (device work arena sized by
 * nn_backend_cuda.conv2d_work), downloads and compares. After every op the
 * context's status must be TY_OK. Backward kernels get the CPU's forward
 * results as their inputs, so each kernel is compared on identical inputs.
 *
 * fp32 tolerances, |gpu - cpu| <= rtol |cpu| + atol, per op:
 *   exact       0                      copies and selections: relu,
 *                                      bias_rows, max pooling and argmax,
 *                                      uploads, zeroing, zeroed gradients
 *   elementwise rtol 1e-5, atol 1e-6 max|cpu|
 *                                      activations, leaky_relu, add, scale,
 *                                      dropout products, loss gradients of
 *                                      mse/huber/bce, sgd, adam, avg pooling
 *                                      (libm vs CUDA math differ by an ulp or
 *                                      two; FMA contraction another)
 *   reduction   rtol 1e-4, atol 1e-4 rms(cpu)
 *                                      GEMM, convolution, bias_grad, the
 *                                      norms, softmax (summation order)
 *   loss sums   rtol 1e-5 (returned in double), correct counts exact
 *   sum_squares rtol 1e-5
 * Dropout is random on each backend, so it is checked by its statistics
 * (mask values 0 or 1/(1-rate), the dropped fraction near rate in every
 * eighth of the tensor, out = in * mask, backward with the same mask, a
 * fresh mask per call, the same mask for the same generator state).
 *
 * A CUDA member that is NULL or not supports()'ed FAILS its case: the GPU
 * backend must implement every op of the table.
 *
 * Usage: test_gpu_ops [CASE...]   run all (or the named) numeric cases
 *        test_gpu_ops --faults    the error-reporting checks; a process of
 *                                 their own, because the last one (a GEMM
 *                                 through a NULL pointer) leaves the CUDA
 *                                 context unusable.
 * Exit status: 0 all passed, 1 a check failed, 77 skipped (no CUDA device,
 * or a binary built without TRAINYARD_HAVE_CUDA), with "SKIPPED: ..." on stdout.
 */
#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "common/ty.h"
#include "gpu/cuda/backend.h"
#include "models/backend.h"

#if TRAINYARD_HAVE_CUDA

/* ---- the harness ---------------------------------------------------- */

#define TOL_EW_R 1e-5
#define TOL_EW_A 1e-6 /* times max|cpu| */
#define TOL_RED_R 1e-4
#define TOL_RED_A 1e-4 /* times rms(cpu) */
#define TOL_LOSS_R 1e-5

#define MAX_SCRATCH 512
#define MAX_REPORTED 12 /* failed checks printed per case */

static struct {
    const nn_backend *cpu, *gpu;
    nn_exec hx; /* CPU: no pool (one thread) */
    nn_exec dx; /* CUDA context */
    ty_rng rng; /* inputs; reseeded per case */
    const char *case_name;
    int case_failures; /* failed checks in the current case */
    int checks;        /* checks run in the current case */
    void *host[MAX_SCRATCH];
    int n_host;
    void *dev[MAX_SCRATCH];
    int n_dev;
} H;

static void fatal(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));

static void fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("FATAL [%s]: ", H.case_name ? H.case_name : "setup");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    exit(1);
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void fail(const char *fmt, ...)
{
    /* a broken op fails every shape: the first few say enough */
    if (H.case_failures++ >= MAX_REPORTED)
        return;
    va_list ap;
    va_start(ap, fmt);
    printf("  FAIL [%s]: ", H.case_name);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

/* The context must still be healthy after op; a failed device call makes
 * every later kernel a no-op, so there is no point in going on. */
static void after(const char *op)
{
    ty_err err = {0};
    ty_status st = H.gpu->status(&H.dx, &err);
    if (st != TY_OK)
        fatal("status after %s is %s: %s", op, ty_status_name(st), err.msg);
}

static void *host_alloc(size_t bytes)
{
    if (H.n_host == MAX_SCRATCH)
        fatal("too many host buffers in one case");
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p)
        fatal("out of host memory (%zu bytes)", bytes);
    H.host[H.n_host++] = p;
    return p;
}

static float *hrand(size_t n, float lo, float hi)
{
    float *x = host_alloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * ty_rng_uniform(&H.rng);
    return x;
}

static float *hcopy(const float *x, size_t n)
{
    float *y = host_alloc(n * sizeof *y);
    memcpy(y, x, n * sizeof *y);
    return y;
}

static int32_t *hlabels(size_t n, uint32_t classes)
{
    int32_t *y = host_alloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++)
        y[i] = (int32_t)ty_rng_below(&H.rng, classes);
    return y;
}

static void *dev_alloc(size_t bytes)
{
    if (H.n_dev == MAX_SCRATCH)
        fatal("too many device buffers in one case");
    void *p = H.gpu->alloc(&H.dx, bytes ? bytes : 1);
    after("alloc");
    if (!p)
        fatal("nn_backend_cuda.alloc(%zu) returned NULL", bytes);
    if ((uintptr_t)p % 256 != 0)
        fail("alloc(%zu) = %p is not 256-byte aligned", bytes, p);
    H.dev[H.n_dev++] = p;
    return p;
}

static void *dev_from_bytes(const void *h, size_t bytes)
{
    void *d = dev_alloc(bytes);
    H.gpu->upload(&H.dx, d, h, bytes);
    after("upload");
    return d;
}

static float *dev_from(const float *h, size_t n)
{
    return dev_from_bytes(h, n * sizeof *h);
}

static void *dev_to_host_bytes(const void *d, size_t bytes)
{
    void *h = host_alloc(bytes);
    H.gpu->download(&H.dx, h, d, bytes);
    after("download");
    return h;
}

static float *dev_to_host(const float *d, size_t n)
{
    return dev_to_host_bytes(d, n * sizeof *d);
}

static void scratch_release(void)
{
    for (int i = 0; i < H.n_dev; i++)
        H.gpu->release(&H.dx, H.dev[i]);
    H.n_dev = 0;
    for (int i = 0; i < H.n_host; i++)
        free(H.host[i]);
    H.n_host = 0;
    after("release");
}

static double max_abs(const float *x, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        if (fabs((double)x[i]) > m)
            m = fabs((double)x[i]);
    return m;
}

static double rms(const float *x, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * (double)x[i];
    return n ? sqrt(s / (double)n) : 0.0;
}

/* |got - want| <= rtol |want| + atol everywhere; NaN must match NaN.
 * Reports the count, the first and the worst offender. */
static void check_close(const char *what, const float *got, const float *want,
                        size_t n, double rtol, double atol)
{
    size_t bad = 0, first = 0, worst = 0;
    double worst_excess = -1.0;
    H.checks++;
    for (size_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        if (isnan(w) || isnan(g)) {
            if (isnan(w) && isnan(g))
                continue;
        } else {
            double err = fabs(g - w), lim = rtol * fabs(w) + atol;
            if (err <= lim)
                continue;
            if (err - lim > worst_excess) {
                worst_excess = err - lim;
                worst = i;
            }
        }
        if (!bad++)
            first = i;
    }
    if (!bad)
        return;
    if (worst_excess < 0.0)
        worst = first;
    fail("%s: %zu of %zu values differ (rtol %g, atol %g); first [%zu] gpu "
         "%.9g cpu %.9g; worst [%zu] gpu %.9g cpu %.9g",
         what, bad, n, rtol, atol, first, (double)got[first],
         (double)want[first], worst, (double)got[worst], (double)want[worst]);
}

static void check_exact(const char *what, const float *got, const float *want,
                        size_t n)
{
    check_close(what, got, want, n, 0.0, 0.0);
}

static void check_ew(const char *what, const float *got, const float *want,
                     size_t n)
{
    check_close(what, got, want, n, TOL_EW_R, TOL_EW_A * max_abs(want, n));
}

static void check_red(const char *what, const float *got, const float *want,
                      size_t n)
{
    check_close(what, got, want, n, TOL_RED_R, TOL_RED_A * rms(want, n));
}

static void check_zero(const char *what, const float *got, size_t n)
{
    H.checks++;
    for (size_t i = 0; i < n; i++)
        if (got[i] != 0.0f) {
            fail("%s: [%zu] = %.9g, want 0", what, i, (double)got[i]);
            return;
        }
}

static void check_i32(const char *what, const int32_t *got, const int32_t *want,
                      size_t n)
{
    H.checks++;
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            fail("%s: [%zu] gpu %d cpu %d", what, i, (int)got[i], (int)want[i]);
            return;
        }
}

static void check_bits(const char *what, const void *a, const void *b,
                       size_t bytes)
{
    H.checks++;
    if (memcmp(a, b, bytes))
        fail("%s: two runs on the same inputs differ (not reproducible)", what);
}

static void check_scalar(const char *what, double got, double want, double rtol)
{
    H.checks++;
    if (isnan(got) || fabs(got - want) > rtol * fabs(want) + 1e-12)
        fail("%s: gpu %.12g cpu %.12g (rtol %g)", what, got, want, rtol);
}

static void check_u32(const char *what, uint32_t got, uint32_t want)
{
    H.checks++;
    if (got != want)
        fail("%s: gpu %u cpu %u", what, got, want);
}

/* An op the CUDA table must implement: FAIL (not skip) when it does not. */
static int require(nn_op op, int have_member, const char *member)
{
    if (!H.gpu->supports || !H.gpu->supports(op)) {
        fail("nn_backend_cuda does not support %s (required)", nn_op_name(op));
        return 0;
    }
    if (!have_member) {
        fail("nn_backend_cuda.%s is NULL (required for %s)", member,
             nn_op_name(op));
        return 0;
    }
    return 1;
}

#define REQUIRE(op, member)                                 \
    do {                                                    \
        if (!require((op), H.gpu->member != NULL, #member)) \
            return;                                         \
    } while (0)

/* Points both contexts' work arenas at fresh buffers for geometry d. */
static void set_conv_work(const nn_conv_desc *d)
{
    size_t hf = H.cpu->conv2d_work(d), df = H.gpu->conv2d_work(d);
    H.hx.work = hf ? host_alloc(hf * sizeof(float)) : NULL;
    H.hx.work_floats = hf;
    H.dx.work = df ? dev_alloc(df * sizeof(float)) : NULL;
    H.dx.work_floats = df;
}

static void clear_work(void)
{
    H.hx.work = H.dx.work = NULL;
    H.hx.work_floats = H.dx.work_floats = 0;
}

/* ---- memory --------------------------------------------------------- */

static void case_memory(void)
{
    const size_t n = 100003;
    float *x = hrand(n, -1, 1);
    float *d = dev_from(x, n);
    check_exact("upload/download round trip", dev_to_host(d, n), x, n);
    H.gpu->zero(&H.dx, d + 7, (n - 14) * sizeof(float));
    after("zero");
    float *z = dev_to_host(d, n);
    float *want = hcopy(x, n);
    memset(want + 7, 0, (n - 14) * sizeof(float));
    check_exact("zero of a range", z, want, n);
    /* copy: a range of one device buffer into another at an offset */
    float *y = hrand(n, -2, 2);
    float *dy = dev_from(y, n), *dx2 = dev_from(x, n);
    H.gpu->copy(&H.dx, dx2 + 5, dy + 11, (n - 20) * sizeof(float));
    after("copy");
    float *want2 = hcopy(x, n);
    memcpy(want2 + 5, y + 11, (n - 20) * sizeof(float));
    check_exact("device-to-device copy", dev_to_host(dx2, n), want2, n);
    H.gpu->release(&H.dx, NULL);
    after("release(NULL)");
}

/* ---- gemm ----------------------------------------------------------- */

static void gemm_one(int m, int n, int k, int ta, int tb, float alpha,
                     float beta)
{
    size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
    /* a is stored as op(A) requires: (m, k), or (k, m) when transposed. */
    float *a = hrand(na, -1, 1), *b = hrand(nb, -1, 1);
    float *c0 = hrand(nc, -1, 1), *c = hcopy(c0, nc);
    H.cpu->gemm(&H.hx, c, a, b, ta, tb, m, n, k, alpha, beta);
    float *da = dev_from(a, na), *db = dev_from(b, nb), *dc = dev_from(c0, nc);
    H.gpu->gemm(&H.dx, dc, da, db, ta, tb, m, n, k, alpha, beta);
    after("gemm");
    char what[128];
    snprintf(what, sizeof what,
             "gemm m=%d n=%d k=%d ta=%d tb=%d alpha=%g "
             "beta=%g",
             m, n, k, ta, tb, (double)alpha, (double)beta);
    check_red(what, dev_to_host(dc, nc), c, nc);
}

static void case_gemm(void)
{
    REQUIRE(NN_OP_GEMM, gemm);
    static const int shapes[][3] = {
        {67, 45, 129},   {1, 33, 17},     {29, 1, 8},
        {128, 300, 784}, {256, 384, 512},
    };
    for (size_t s = 0; s < TY_ARRAY_LEN(shapes); s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                gemm_one(shapes[s][0], shapes[s][1], shapes[s][2], ta, tb, 1.0f,
                         0.0f);
                gemm_one(shapes[s][0], shapes[s][1], shapes[s][2], ta, tb, 1.0f,
                         1.0f);
                gemm_one(shapes[s][0], shapes[s][1], shapes[s][2], ta, tb, 0.5f,
                         1.0f);
            }
}

/* ---- bias ----------------------------------------------------------- */

static void case_bias_rows(void)
{
    REQUIRE(NN_OP_BIAS_ROWS, bias_rows);
    static const uint32_t shapes[][2] = {{37, 129}, {1, 10}, {1024, 4096}};
    for (size_t s = 0; s < TY_ARRAY_LEN(shapes); s++) {
        uint32_t n = shapes[s][0], c = shapes[s][1];
        size_t len = (size_t)n * c;
        float *bias = hrand(c, -1, 1), *out = hrand(len, -5, 5);
        float *dout = dev_from(out, len), *dbias = dev_from(bias, c);
        H.cpu->bias_rows(&H.hx, out, bias, n, c);
        H.gpu->bias_rows(&H.dx, dout, dbias, n, c);
        after("bias_rows");
        check_exact("bias_rows", dev_to_host(dout, len), out, len);
    }
}

static void case_bias_grad(void)
{
    REQUIRE(NN_OP_BIAS_GRAD, bias_grad);
    static const uint32_t shapes[][2] = {
        {1000, 37}, {3, 2049}, {1024, 4096}, {1, 5}};
    for (size_t s = 0; s < TY_ARRAY_LEN(shapes); s++) {
        uint32_t n = shapes[s][0], c = shapes[s][1];
        size_t len = (size_t)n * c;
        float *dout = hrand(len, -1, 1), *db = hrand(c, -1, 1);
        float *d_db = dev_from(db, c), *d_dout = dev_from(dout, len);
        H.cpu->bias_grad(&H.hx, db, dout, n, c);
        H.gpu->bias_grad(&H.dx, d_db, d_dout, n, c);
        after("bias_grad");
        char what[64];
        snprintf(what, sizeof what, "bias_grad (accumulates) n=%u c=%u", n, c);
        check_red(what, dev_to_host(d_db, c), db, c);
    }
}

/* ---- activations ---------------------------------------------------- */

static void case_activations(void)
{
    REQUIRE(NN_OP_RELU, act_forward);
    REQUIRE(NN_OP_RELU, act_backward);
    static const nn_op ops[] = {NN_OP_RELU, NN_OP_TANH, NN_OP_SIGMOID,
                                NN_OP_GELU, NN_OP_GELU_TANH};
    static const size_t lens[] = {100003, 7};
    for (size_t o = 0; o < TY_ARRAY_LEN(ops); o++) {
        nn_op op = ops[o];
        if (!require(op, 1, "act_forward"))
            continue;
        for (size_t l = 0; l < TY_ARRAY_LEN(lens); l++) {
            size_t len = lens[l];
            float *in = hrand(len, -6, 6);
            in[0] = 0.0f;
            float *out = host_alloc(len * sizeof *out);
            float *d_in = dev_from(in, len), *d_out = dev_alloc(len * 4);
            H.cpu->act_forward(&H.hx, op, out, in, len);
            H.gpu->act_forward(&H.dx, op, d_out, d_in, len);
            after(nn_op_name(op));
            char what[64];
            snprintf(what, sizeof what, "%s forward len=%zu", nn_op_name(op),
                     len);
            float *got = dev_to_host(d_out, len);
            if (op == NN_OP_RELU)
                check_exact(what, got, out, len);
            else
                check_ew(what, got, out, len);

            /* backward on the CPU's forward output */
            float *dout = hrand(len, -1, 1);
            float *din = host_alloc(len * sizeof *din);
            float *d_dout = dev_from(dout, len), *d_fout = dev_from(out, len);
            float *d_din = dev_alloc(len * 4);
            H.cpu->act_backward(&H.hx, op, din, dout, in, out, len);
            H.gpu->act_backward(&H.dx, op, d_din, d_dout, d_in, d_fout, len);
            after(nn_op_name(op));
            snprintf(what, sizeof what, "%s backward len=%zu", nn_op_name(op),
                     len);
            got = dev_to_host(d_din, len);
            if (op == NN_OP_RELU)
                check_exact(what, got, din, len);
            else
                check_ew(what, got, din, len);
        }
    }
}

static void case_leaky_relu(void)
{
    REQUIRE(NN_OP_LEAKY_RELU, leaky_relu_forward);
    REQUIRE(NN_OP_LEAKY_RELU, leaky_relu_backward);
    static const float slopes[] = {0.01f, 0.2f};
    const size_t len = 65537;
    for (size_t s = 0; s < TY_ARRAY_LEN(slopes); s++) {
        float *in = hrand(len, -3, 3), *dout = hrand(len, -1, 1);
        in[0] = 0.0f;
        float *out = host_alloc(len * 4), *din = host_alloc(len * 4);
        float *d_in = dev_from(in, len), *d_dout = dev_from(dout, len);
        float *d_out = dev_alloc(len * 4), *d_din = dev_alloc(len * 4);
        H.cpu->leaky_relu_forward(&H.hx, out, in, len, slopes[s]);
        H.gpu->leaky_relu_forward(&H.dx, d_out, d_in, len, slopes[s]);
        after("leaky_relu_forward");
        check_ew("leaky_relu forward", dev_to_host(d_out, len), out, len);
        H.cpu->leaky_relu_backward(&H.hx, din, dout, in, len, slopes[s]);
        H.gpu->leaky_relu_backward(&H.dx, d_din, d_dout, d_in, len, slopes[s]);
        after("leaky_relu_backward");
        check_ew("leaky_relu backward", dev_to_host(d_din, len), din, len);
    }
}

/* ---- dropout (statistics) ------------------------------------------- */

static void dropout_one(size_t len, float rate)
{
    const float keep_scale = 1.0f / (1.0f - rate);
    float *in = hrand(len, -2, 2), *dout = hrand(len, -1, 1);
    float *d_in = dev_from(in, len), *d_dout = dev_from(dout, len);
    float *d_out = dev_alloc(len * 4), *d_mask = dev_alloc(len * 4);
    float *d_din = dev_alloc(len * 4);
    ty_rng r, r_start;
    ty_rng_seed(&r, 1234, 5);
    r_start = r;
    H.gpu->dropout_forward(&H.dx, d_out, d_mask, d_in, len, rate, &r);
    after("dropout_forward");
    float *mask = dev_to_host(d_mask, len), *out = dev_to_host(d_out, len);

    /* every value 0 or 1/(1-rate); the dropped fraction near rate in each
     * eighth (binomial sd <= 0.5/sqrt(len/8); 0.01 is many sd here) */
    size_t bad = 0, zeros_all = 0;
    H.checks++;
    for (int part = 0; part < 8; part++) {
        size_t b = len * part / 8, e = len * (part + 1) / 8, zeros = 0;
        for (size_t i = b; i < e; i++) {
            if (mask[i] == 0.0f)
                zeros++;
            else if (mask[i] != keep_scale && !bad++)
                fail("dropout mask[%zu] = %.9g, want 0 or %.9g", i,
                     (double)mask[i], (double)keep_scale);
        }
        double frac = (double)zeros / (double)(e - b);
        if (fabs(frac - rate) > 0.01)
            fail("dropout rate %.2f: part %d of 8 drops %.4f of its values",
                 (double)rate, part, frac);
        zeros_all += zeros;
    }
    printf("    dropout rate %.2f: dropped %.5f of %zu\n", (double)rate,
           (double)zeros_all / (double)len, len);

    float *want = host_alloc(len * 4);
    for (size_t i = 0; i < len; i++)
        want[i] = in[i] * mask[i];
    check_ew("dropout forward out = in * mask", out, want, len);

    /* backward with the same mask, against the CPU member on that mask */
    float *din = host_alloc(len * 4);
    H.cpu->dropout_backward(&H.hx, din, dout, mask, len);
    H.gpu->dropout_backward(&H.dx, d_din, d_dout, d_mask, len);
    after("dropout_backward");
    check_ew("dropout backward din = dout * mask", dev_to_host(d_din, len), din,
             len);

    /* the same generator state gives the same mask */
    float *d_mask2 = dev_alloc(len * 4);
    ty_rng r2 = r_start;
    H.gpu->dropout_forward(&H.dx, d_out, d_mask2, d_in, len, rate, &r2);
    after("dropout_forward");
    check_bits("dropout mask from the same rng state",
               dev_to_host(d_mask2, len), mask, len * 4);

    /* the generator moves on: the next call draws a different mask */
    H.checks++;
    if (!memcmp(&r, &r_start, sizeof r))
        fail("dropout_forward did not advance the rng");
    H.gpu->dropout_forward(&H.dx, d_out, d_mask2, d_in, len, rate, &r);
    after("dropout_forward");
    float *mask3 = dev_to_host(d_mask2, len);
    size_t same = 0;
    for (size_t i = 0; i < len; i++)
        same += mask3[i] == mask[i];
    /* independent masks agree on rate^2 + (1-rate)^2 of the values */
    double agree = (double)same / (double)len;
    double expect = (double)rate * rate + (1.0 - rate) * (1.0 - rate);
    H.checks++;
    if (fabs(agree - expect) > 0.02)
        fail("dropout: consecutive masks agree on %.4f of values, "
             "independent ones would on %.4f",
             agree, expect);
}

static void case_dropout(void)
{
    REQUIRE(NN_OP_DROPOUT, dropout_forward);
    REQUIRE(NN_OP_DROPOUT, dropout_backward);
    dropout_one((1u << 20) + 3, 0.3f);
    dropout_one(200003, 0.5f);
}

/* ---- losses --------------------------------------------------------- */

static void xent_one(uint32_t n, uint32_t c)
{
    size_t len = (size_t)n * c;
    float *logits = hrand(len, -8, 8);
    int32_t *labels = hlabels(n, c);
    float *dl = host_alloc(len * 4), *pr = host_alloc(len * 4);
    float *d_logits = dev_from(logits, len);
    int32_t *d_labels = dev_from_bytes(labels, n * sizeof *labels);
    float *d_dl = dev_alloc(len * 4), *d_pr = dev_alloc(len * 4);
    const float gs = 1.0f / (float)n;
    char what[96];

    /* dlogits, probs and correct */
    uint32_t hc = 0, gc = 0;
    double hl =
        H.cpu->softmax_xent(&H.hx, dl, pr, &hc, logits, labels, n, c, gs);
    double gl = H.gpu->softmax_xent(&H.dx, d_dl, d_pr, &gc, d_logits, d_labels,
                                    n, c, gs);
    after("softmax_xent");
    snprintf(what, sizeof what, "softmax_xent n=%u c=%u", n, c);
    check_scalar(what, gl, hl, TOL_LOSS_R);
    check_u32(what, gc, hc);
    snprintf(what, sizeof what, "softmax_xent dlogits n=%u c=%u", n, c);
    check_red(what, dev_to_host(d_dl, len), dl, len);
    snprintf(what, sizeof what, "softmax_xent probs n=%u c=%u", n, c);
    check_red(what, dev_to_host(d_pr, len), pr, len);

    /* dlogits only, no correct */
    H.gpu->zero(&H.dx, d_dl, len * 4);
    gl = H.gpu->softmax_xent(&H.dx, d_dl, NULL, NULL, d_logits, d_labels, n, c,
                             gs);
    after("softmax_xent");
    snprintf(what, sizeof what, "softmax_xent (dlogits only) n=%u c=%u", n, c);
    check_scalar(what, gl, hl, TOL_LOSS_R);
    check_red(what, dev_to_host(d_dl, len), dl, len);

    /* loss only */
    gl = H.gpu->softmax_xent(&H.dx, NULL, NULL, &gc, d_logits, d_labels, n, c,
                             gs);
    after("softmax_xent");
    snprintf(what, sizeof what, "softmax_xent (loss only) n=%u c=%u", n, c);
    check_scalar(what, gl, hl, TOL_LOSS_R);
    check_u32(what, gc, hc);

    /* probs only: no labels */
    H.gpu->zero(&H.dx, d_pr, len * 4);
    gl = H.gpu->softmax_xent(&H.dx, NULL, d_pr, NULL, d_logits, NULL, n, c, gs);
    after("softmax_xent");
    snprintf(what, sizeof what, "softmax_xent (probs only) n=%u c=%u", n, c);
    check_scalar(what, gl, 0.0, 0.0);
    check_red(what, dev_to_host(d_pr, len), pr, len);
}

static void case_softmax_xent(void)
{
    REQUIRE(NN_OP_SOFTMAX_XENT, softmax_xent);
    xent_one(97, 10);
    xent_one(257, 33);
    xent_one(8, 1000);
    xent_one(1024, 10);
    xent_one(3, 2);
}

static void case_softmax_xent_smooth(void)
{
    REQUIRE(NN_OP_SOFTMAX_XENT_SMOOTH, softmax_xent_smooth);
    static const uint32_t shapes[][2] = {{97, 10}, {8, 1000}, {1024, 10}};
    static const float eps[] = {0.1f, 0.0f};
    for (size_t s = 0; s < TY_ARRAY_LEN(shapes); s++)
        for (size_t e = 0; e < TY_ARRAY_LEN(eps); e++) {
            uint32_t n = shapes[s][0], c = shapes[s][1];
            size_t len = (size_t)n * c;
            float *logits = hrand(len, -8, 8), *dl = host_alloc(len * 4);
            int32_t *labels = hlabels(n, c);
            float *d_logits = dev_from(logits, len), *d_dl = dev_alloc(len * 4);
            int32_t *d_labels = dev_from_bytes(labels, n * 4);
            uint32_t hc = 0, gc = 0;
            const float gs = 1.0f / (float)n;
            double hl = H.cpu->softmax_xent_smooth(&H.hx, dl, &hc, logits,
                                                   labels, n, c, eps[e], gs);
            double gl = H.gpu->softmax_xent_smooth(&H.dx, d_dl, &gc, d_logits,
                                                   d_labels, n, c, eps[e], gs);
            after("softmax_xent_smooth");
            char what[96];
            snprintf(what, sizeof what, "softmax_xent_smooth n=%u c=%u eps=%g",
                     n, c, (double)eps[e]);
            check_scalar(what, gl, hl, TOL_LOSS_R);
            check_u32(what, gc, hc);
            check_red(what, dev_to_host(d_dl, len), dl, len);
            gl = H.gpu->softmax_xent_smooth(&H.dx, NULL, NULL, d_logits,
                                            d_labels, n, c, eps[e], gs);
            after("softmax_xent_smooth");
            check_scalar(what, gl, hl, TOL_LOSS_R);
        }
}

static void case_bce_logits(void)
{
    REQUIRE(NN_OP_BCE_LOGITS, bce_logits);
    static const uint32_t ns[] = {1001, 1, 65536};
    for (size_t s = 0; s < TY_ARRAY_LEN(ns); s++) {
        uint32_t n = ns[s];
        float *logits = hrand(n, -12, 12);
        int32_t *labels = hlabels(n, 2);
        float *dl = host_alloc(n * 4), *pr = host_alloc(2 * (size_t)n * 4);
        float *d_logits = dev_from(logits, n), *d_dl = dev_alloc(n * 4);
        float *d_pr = dev_alloc(2 * (size_t)n * 4);
        int32_t *d_labels = dev_from_bytes(labels, n * 4);
        uint32_t hc = 0, gc = 0;
        const float gs = 1.0f / (float)n;
        double hl =
            H.cpu->bce_logits(&H.hx, dl, pr, &hc, logits, labels, n, gs);
        double gl = H.gpu->bce_logits(&H.dx, d_dl, d_pr, &gc, d_logits,
                                      d_labels, n, gs);
        after("bce_logits");
        char what[64];
        snprintf(what, sizeof what, "bce_logits n=%u", n);
        check_scalar(what, gl, hl, TOL_LOSS_R);
        check_u32(what, gc, hc);
        check_ew("bce_logits dlogits", dev_to_host(d_dl, n), dl, n);
        check_ew("bce_logits probs", dev_to_host(d_pr, 2 * (size_t)n), pr,
                 2 * (size_t)n);
        /* probs only */
        H.gpu->zero(&H.dx, d_pr, 2 * (size_t)n * 4);
        gl = H.gpu->bce_logits(&H.dx, NULL, d_pr, NULL, d_logits, NULL, n, gs);
        after("bce_logits");
        check_scalar("bce_logits (probs only) returns 0", gl, 0.0, 0.0);
        check_ew("bce_logits (probs only) probs",
                 dev_to_host(d_pr, 2 * (size_t)n), pr, 2 * (size_t)n);
    }
}

static void case_mse(void)
{
    REQUIRE(NN_OP_MSE, mse);
    static const size_t lens[] = {100003, 1, 4096 * 10};
    for (size_t s = 0; s < TY_ARRAY_LEN(lens); s++) {
        size_t len = lens[s];
        float *pred = hrand(len, -3, 3), *target = hrand(len, -3, 3);
        float *dp = host_alloc(len * 4);
        float *d_pred = dev_from(pred, len), *d_target = dev_from(target, len);
        float *d_dp = dev_alloc(len * 4);
        const float gs = 1.0f / (float)len;
        double hl = H.cpu->mse(&H.hx, dp, pred, target, len, gs);
        double gl = H.gpu->mse(&H.dx, d_dp, d_pred, d_target, len, gs);
        after("mse");
        check_scalar("mse sum", gl, hl, TOL_LOSS_R);
        check_ew("mse dpred", dev_to_host(d_dp, len), dp, len);
        gl = H.gpu->mse(&H.dx, NULL, d_pred, d_target, len, gs);
        after("mse");
        check_scalar("mse sum (no dpred)", gl, hl, TOL_LOSS_R);
    }
}

static void case_huber(void)
{
    REQUIRE(NN_OP_HUBER, huber);
    static const float deltas[] = {1.0f, 0.5f, 3.0f};
    const size_t len = 100003;
    for (size_t s = 0; s < TY_ARRAY_LEN(deltas); s++) {
        float *pred = hrand(len, -4, 4), *target = hrand(len, -4, 4);
        float *dp = host_alloc(len * 4);
        float *d_pred = dev_from(pred, len), *d_target = dev_from(target, len);
        float *d_dp = dev_alloc(len * 4);
        const float gs = 1.0f / (float)len;
        double hl = H.cpu->huber(&H.hx, dp, pred, target, len, deltas[s], gs);
        double gl =
            H.gpu->huber(&H.dx, d_dp, d_pred, d_target, len, deltas[s], gs);
        after("huber");
        char what[64];
        snprintf(what, sizeof what, "huber delta=%g", (double)deltas[s]);
        check_scalar(what, gl, hl, TOL_LOSS_R);
        check_ew(what, dev_to_host(d_dp, len), dp, len);
        gl = H.gpu->huber(&H.dx, NULL, d_pred, d_target, len, deltas[s], gs);
        after("huber");
        check_scalar(what, gl, hl, TOL_LOSS_R);
    }
}

static void case_sum_squares(void)
{
    REQUIRE(NN_OP_SUM_SQUARES, sum_squares);
    static const size_t lens[] = {(1u << 20) + 5, 7, 1, 4096u * 4096u};
    for (size_t s = 0; s < TY_ARRAY_LEN(lens); s++) {
        size_t len = lens[s];
        float *x = hrand(len, -1, 1);
        float *d_x = dev_from(x, len);
        double want = H.cpu->sum_squares(&H.hx, x, len);
        double got = H.gpu->sum_squares(&H.dx, d_x, len);
        after("sum_squares");
        char what[64];
        snprintf(what, sizeof what, "sum_squares len=%zu", len);
        check_scalar(what, got, want, 1e-5);
    }
}

static void case_scale(void)
{
    REQUIRE(NN_OP_SCALE, scale);
    const size_t len = 100003;
    float *x = hrand(len, -3, 3);
    float *d_x = dev_from(x, len);
    H.cpu->scale(&H.hx, x, len, 0.37f);
    H.gpu->scale(&H.dx, d_x, len, 0.37f);
    after("scale");
    check_ew("scale", dev_to_host(d_x, len), x, len);
}

static void case_add(void)
{
    REQUIRE(NN_OP_ADD, add);
    const size_t len = 100003;
    float *a = hrand(len, -3, 3), *b = hrand(len, -3, 3);
    float *out = host_alloc(len * 4);
    H.cpu->add(&H.hx, out, a, b, len);
    float *d_a = dev_from(a, len), *d_b = dev_from(b, len);
    float *d_out = dev_alloc(len * 4);
    H.gpu->add(&H.dx, d_out, d_a, d_b, len);
    after("add");
    check_ew("add", dev_to_host(d_out, len), out, len);
    H.gpu->add(&H.dx, d_a, d_a, d_b, len); /* out == a */
    after("add");
    check_ew("add in place (out == a)", dev_to_host(d_a, len), out, len);
    float *d_a2 = dev_from(a, len);
    H.gpu->add(&H.dx, d_b, d_a2, d_b, len); /* out == b */
    after("add");
    check_ew("add in place (out == b)", dev_to_host(d_b, len), out, len);
}

/* ---- optimizers ----------------------------------------------------- */

static void sgd_one(const char *name, float lr, float wd, float momentum,
                    int nesterov)
{
    const size_t len = 10007;
    nn_optim_args s = {.lr = lr,
                       .weight_decay = wd,
                       .momentum = momentum,
                       .nesterov = nesterov};
    int with_buf = momentum != 0.0f;
    float *p = hrand(len, -1, 1);
    float *buf = with_buf ? hrand(len, -0.1f, 0.1f) : NULL;
    float *d_p = dev_from(p, len), *d_g = dev_alloc(len * 4);
    float *d_buf = with_buf ? dev_from(buf, len) : NULL;
    char what[96];
    for (int step = 1; step <= 3; step++) {
        float *g = hrand(len, -1, 1);
        H.gpu->upload(&H.dx, d_g, g, len * 4);
        H.cpu->sgd(&H.hx, p, g, buf, len, &s);
        H.gpu->sgd(&H.dx, d_p, d_g, d_buf, len, &s);
        after("sgd");
        snprintf(what, sizeof what, "sgd %s step %d param", name, step);
        check_ew(what, dev_to_host(d_p, len), p, len);
        if (with_buf) {
            snprintf(what, sizeof what, "sgd %s step %d momentum buffer", name,
                     step);
            check_ew(what, dev_to_host(d_buf, len), buf, len);
        }
        snprintf(what, sizeof what, "sgd %s step %d grad zeroed", name, step);
        check_zero(what, dev_to_host(d_g, len), len);
    }
}

static void case_sgd(void)
{
    REQUIRE(NN_OP_SGD, sgd);
    sgd_one("plain", 0.1f, 0.0f, 0.0f, 0);
    sgd_one("weight decay", 0.1f, 1e-2f, 0.0f, 0);
    sgd_one("momentum", 0.05f, 0.0f, 0.9f, 0);
    sgd_one("momentum+wd", 0.05f, 5e-4f, 0.9f, 0);
    sgd_one("nesterov", 0.05f, 1e-3f, 0.9f, 1);
}

static void adam_one(const char *name, float lr, float wd, int decoupled)
{
    const size_t len = 10007;
    const double b1 = 0.9, b2 = 0.999;
    float *p = hrand(len, -1, 1);
    float *m = host_alloc(len * 4), *v = host_alloc(len * 4);
    float *d_p = dev_from(p, len), *d_g = dev_alloc(len * 4);
    float *d_m = dev_from(m, len), *d_v = dev_from(v, len);
    char what[96];
    for (int t = 1; t <= 3; t++) {
        nn_optim_args s = {
            .lr = lr,
            .beta1 = (float)b1,
            .beta2 = (float)b2,
            .eps = 1e-8f,
            .one_minus_beta1 = (float)(1.0 - b1),
            .one_minus_beta2 = (float)(1.0 - b2),
            .step_size = (float)(lr / (1.0 - pow(b1, t))),
            .bias_correction2_sqrt = (float)sqrt(1.0 - pow(b2, t)),
            .decoupled = decoupled,
            .weight_decay = decoupled ? 0.0f : wd,
            .decay_scale = decoupled ? (float)(1.0 - (double)lr * wd) : 1.0f,
        };
        float *g = hrand(len, -1, 1);
        H.gpu->upload(&H.dx, d_g, g, len * 4);
        H.cpu->adam(&H.hx, p, g, m, v, len, &s);
        H.gpu->adam(&H.dx, d_p, d_g, d_m, d_v, len, &s);
        after("adam");
        snprintf(what, sizeof what, "%s step %d param", name, t);
        check_ew(what, dev_to_host(d_p, len), p, len);
        snprintf(what, sizeof what, "%s step %d m", name, t);
        check_ew(what, dev_to_host(d_m, len), m, len);
        snprintf(what, sizeof what, "%s step %d v", name, t);
        check_ew(what, dev_to_host(d_v, len), v, len);
        snprintf(what, sizeof what, "%s step %d grad zeroed", name, t);
        check_zero(what, dev_to_host(d_g, len), len);
    }
}

static void case_adam(void)
{
    REQUIRE(NN_OP_ADAM, adam);
    adam_one("adam", 1e-3f, 0.0f, 0);
    adam_one("adam (L2 weight decay)", 1e-3f, 1e-2f, 0);
    adam_one("adamw (decay_scale)", 1e-2f, 0.1f, 1);
}

/* ---- normalization and softmax layers ------------------------------- */

static void layernorm_one(uint32_t n, uint32_t d)
{
    const float eps = 1e-5f;
    size_t len = (size_t)n * d;
    float *x = hrand(len, -2, 3), *gamma = hrand(d, 0.5f, 1.5f);
    float *beta = hrand(d, -0.5f, 0.5f);
    float *out = host_alloc(len * 4), *mean = host_alloc(n * 4);
    float *rstd = host_alloc(n * 4);
    float *d_x = dev_from(x, len), *d_gamma = dev_from(gamma, d);
    float *d_beta = dev_from(beta, d), *d_out = dev_alloc(len * 4);
    float *d_mean = dev_alloc(n * 4), *d_rstd = dev_alloc(n * 4);
    H.cpu->layernorm_forward(&H.hx, out, mean, rstd, x, gamma, beta, n, d, eps);
    H.gpu->layernorm_forward(&H.dx, d_out, d_mean, d_rstd, d_x, d_gamma, d_beta,
                             n, d, eps);
    after("layernorm_forward");
    char what[96];
    snprintf(what, sizeof what, "layernorm forward n=%u d=%u", n, d);
    check_red(what, dev_to_host(d_out, len), out, len);
    check_red("layernorm mean", dev_to_host(d_mean, n), mean, n);
    check_red("layernorm rstd", dev_to_host(d_rstd, n), rstd, n);

    /* backward on the CPU's statistics; parameter grads accumulate */
    float *dout = hrand(len, -1, 1), *dx = host_alloc(len * 4);
    float *dg = hrand(d, -1, 1), *dbt = hrand(d, -1, 1);
    float *d_dout = dev_from(dout, len), *d_dx = dev_alloc(len * 4);
    float *d_dg = dev_from(dg, d), *d_dbt = dev_from(dbt, d);
    H.gpu->upload(&H.dx, d_mean, mean, n * 4);
    H.gpu->upload(&H.dx, d_rstd, rstd, n * 4);
    H.cpu->layernorm_backward(&H.hx, dx, dg, dbt, dout, x, gamma, mean, rstd, n,
                              d);
    H.gpu->layernorm_backward(&H.dx, d_dx, d_dg, d_dbt, d_dout, d_x, d_gamma,
                              d_mean, d_rstd, n, d);
    after("layernorm_backward");
    snprintf(what, sizeof what, "layernorm backward dx n=%u d=%u", n, d);
    check_red(what, dev_to_host(d_dx, len), dx, len);
    check_red("layernorm dgamma", dev_to_host(d_dg, d), dg, d);
    check_red("layernorm dbeta", dev_to_host(d_dbt, d), dbt, d);

    /* dx NULL: parameter gradients only, accumulating onto the above */
    H.cpu->layernorm_backward(&H.hx, NULL, dg, dbt, dout, x, gamma, mean, rstd,
                              n, d);
    H.gpu->layernorm_backward(&H.dx, NULL, d_dg, d_dbt, d_dout, d_x, d_gamma,
                              d_mean, d_rstd, n, d);
    after("layernorm_backward");
    check_red("layernorm dgamma (dx NULL)", dev_to_host(d_dg, d), dg, d);
    check_red("layernorm dbeta (dx NULL)", dev_to_host(d_dbt, d), dbt, d);
}

static void case_layernorm(void)
{
    REQUIRE(NN_OP_LAYERNORM, layernorm_forward);
    REQUIRE(NN_OP_LAYERNORM, layernorm_backward);
    layernorm_one(64, 768);
    layernorm_one(7, 33);
    layernorm_one(1024, 4096);
    layernorm_one(3, 1);
}

static void softmax_one(uint32_t n, uint32_t c)
{
    size_t len = (size_t)n * c;
    float *in = hrand(len, -8, 8), *out = host_alloc(len * 4);
    float *d_in = dev_from(in, len), *d_out = dev_alloc(len * 4);
    H.cpu->softmax_forward(&H.hx, out, in, n, c);
    H.gpu->softmax_forward(&H.dx, d_out, d_in, n, c);
    after("softmax_forward");
    char what[96];
    snprintf(what, sizeof what, "softmax forward n=%u c=%u", n, c);
    check_red(what, dev_to_host(d_out, len), out, len);
    float *dout = hrand(len, -1, 1), *din = host_alloc(len * 4);
    float *d_dout = dev_from(dout, len), *d_din = dev_alloc(len * 4);
    H.gpu->upload(&H.dx, d_out, out, len * 4);
    H.cpu->softmax_backward(&H.hx, din, dout, out, n, c);
    H.gpu->softmax_backward(&H.dx, d_din, d_dout, d_out, n, c);
    after("softmax_backward");
    snprintf(what, sizeof what, "softmax backward n=%u c=%u", n, c);
    check_red(what, dev_to_host(d_din, len), din, len);
}

static void case_softmax(void)
{
    REQUIRE(NN_OP_SOFTMAX, softmax_forward);
    REQUIRE(NN_OP_SOFTMAX, softmax_backward);
    softmax_one(33, 10);
    softmax_one(4, 1000);
    softmax_one(2, 5000);
    softmax_one(1024, 10);
}

static void batchnorm_one(uint32_t n, uint32_t c, uint32_t s)
{
    const float momentum = 0.1f, eps = 1e-5f;
    size_t len = (size_t)n * c * s;
    char what[128];
    float *x = hrand(len, -1.5f, 2.5f), *gamma = hrand(c, 0.5f, 1.5f);
    float *beta = hrand(c, -0.5f, 0.5f);
    float *rm = hrand(c, -0.2f, 0.2f), *rv = hrand(c, 0.5f, 1.5f);
    float *rm0 = hcopy(rm, c), *rv0 = hcopy(rv, c);
    float *out = host_alloc(len * 4), *mean = host_alloc(c * 4);
    float *invstd = host_alloc(c * 4);
    float *d_x = dev_from(x, len), *d_gamma = dev_from(gamma, c);
    float *d_beta = dev_from(beta, c), *d_rm = dev_from(rm, c);
    float *d_rv = dev_from(rv, c), *d_out = dev_alloc(len * 4);
    float *d_mean = dev_alloc(c * 4), *d_invstd = dev_alloc(c * 4);

    for (int training = 1; training >= 0; training--) {
        const char *mode = training ? "train" : "eval";
        H.cpu->batchnorm_forward(&H.hx, out, mean, invstd, rm, rv, x, gamma,
                                 beta, n, c, s, training, momentum, eps);
        H.gpu->batchnorm_forward(&H.dx, d_out, d_mean, d_invstd, d_rm, d_rv,
                                 d_x, d_gamma, d_beta, n, c, s, training,
                                 momentum, eps);
        after("batchnorm_forward");
        snprintf(what, sizeof what, "batchnorm forward (%s) n=%u c=%u s=%u",
                 mode, n, c, s);
        check_red(what, dev_to_host(d_out, len), out, len);
        snprintf(what, sizeof what, "batchnorm mean (%s)", mode);
        check_red(what, dev_to_host(d_mean, c), mean, c);
        snprintf(what, sizeof what, "batchnorm invstd (%s)", mode);
        check_red(what, dev_to_host(d_invstd, c), invstd, c);
        float *grm = dev_to_host(d_rm, c), *grv = dev_to_host(d_rv, c);
        if (training) {
            check_red("batchnorm running_mean (train)", grm, rm, c);
            check_red("batchnorm running_var (train)", grv, rv, c);
            /* eval below starts from identical running statistics */
            H.gpu->upload(&H.dx, d_rm, rm, c * 4);
            H.gpu->upload(&H.dx, d_rv, rv, c * 4);
            memcpy(rm0, rm, c * 4);
            memcpy(rv0, rv, c * 4);
        } else {
            check_exact("batchnorm running_mean untouched (eval)", grm, rm0, c);
            check_exact("batchnorm running_var untouched (eval)", grv, rv0, c);
        }

        /* backward on the CPU's statistics of this mode */
        float *dout = hrand(len, -1, 1), *dx = host_alloc(len * 4);
        float *dg = hrand(c, -1, 1), *dbt = hrand(c, -1, 1);
        float *dg2 = hcopy(dg, c), *dbt2 = hcopy(dbt, c);
        float *d_dout = dev_from(dout, len), *d_dx = dev_alloc(len * 4);
        float *d_dg = dev_from(dg, c), *d_dbt = dev_from(dbt, c);
        float *d_dg2 = dev_from(dg, c), *d_dbt2 = dev_from(dbt, c);
        H.gpu->upload(&H.dx, d_mean, mean, c * 4);
        H.gpu->upload(&H.dx, d_invstd, invstd, c * 4);
        H.cpu->batchnorm_backward(&H.hx, dx, dg, dbt, dout, x, gamma, mean,
                                  invstd, n, c, s, training);
        H.gpu->batchnorm_backward(&H.dx, d_dx, d_dg, d_dbt, d_dout, d_x,
                                  d_gamma, d_mean, d_invstd, n, c, s, training);
        after("batchnorm_backward");
        snprintf(what, sizeof what,
                 "batchnorm backward dx (%s) n=%u c=%u "
                 "s=%u",
                 mode, n, c, s);
        check_red(what, dev_to_host(d_dx, len), dx, len);
        snprintf(what, sizeof what, "batchnorm dgamma (%s)", mode);
        check_red(what, dev_to_host(d_dg, c), dg, c);
        snprintf(what, sizeof what, "batchnorm dbeta (%s)", mode);
        check_red(what, dev_to_host(d_dbt, c), dbt, c);

        H.cpu->batchnorm_backward(&H.hx, NULL, dg2, dbt2, dout, x, gamma, mean,
                                  invstd, n, c, s, training);
        H.gpu->batchnorm_backward(&H.dx, NULL, d_dg2, d_dbt2, d_dout, d_x,
                                  d_gamma, d_mean, d_invstd, n, c, s, training);
        after("batchnorm_backward");
        snprintf(what, sizeof what, "batchnorm dgamma, dx NULL (%s)", mode);
        check_red(what, dev_to_host(d_dg2, c), dg2, c);
        snprintf(what, sizeof what, "batchnorm dbeta, dx NULL (%s)", mode);
        check_red(what, dev_to_host(d_dbt2, c), dbt2, c);
    }
}

static void case_batchnorm(void)
{
    REQUIRE(NN_OP_BATCHNORM, batchnorm_forward);
    REQUIRE(NN_OP_BATCHNORM, batchnorm_backward);
    batchnorm_one(16, 8, 49);  /* BatchNorm2d */
    batchnorm_one(64, 100, 1); /* BatchNorm1d */
    batchnorm_one(2, 3, 1000);
    batchnorm_one(128, 64, 196);
    batchnorm_one(2, 5, 1); /* the smallest batch torch accepts */
}

/* ---- convolution and pooling ---------------------------------------- */

static nn_conv_desc conv_geom(uint32_t in_c, uint32_t in_h, uint32_t in_w,
                              uint32_t out_c, uint32_t kh, uint32_t kw,
                              uint32_t sh, uint32_t sw, uint32_t ph,
                              uint32_t pw, uint32_t dh, uint32_t dw,
                              uint32_t groups)
{
    nn_conv_desc d = {.in_c = in_c,
                      .in_h = in_h,
                      .in_w = in_w,
                      .out_c = out_c,
                      .kernel = {kh, kw},
                      .stride = {sh, sw},
                      .pad = {ph, pw},
                      .dilation = {dh, dw},
                      .groups = groups};
    d.out_h = (in_h + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
    d.out_w = (in_w + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
    return d;
}

static void conv_one(uint32_t n, const nn_conv_desc *d)
{
    const size_t in_len = (size_t)n * d->in_c * d->in_h * d->in_w;
    const size_t out_len = (size_t)n * d->out_c * d->out_h * d->out_w;
    const size_t w_len =
        (size_t)d->out_c * (d->in_c / d->groups) * d->kernel[0] * d->kernel[1];
    char geo[160], what[224];
    snprintf(geo, sizeof geo,
             "n=%u %ux%ux%u->%ux%ux%u k=%ux%u s=%ux%u "
             "p=%ux%u d=%ux%u g=%u",
             n, d->in_c, d->in_h, d->in_w, d->out_c, d->out_h, d->out_w,
             d->kernel[0], d->kernel[1], d->stride[0], d->stride[1], d->pad[0],
             d->pad[1], d->dilation[0], d->dilation[1], d->groups);
    set_conv_work(d);
    float *in = hrand(in_len, -1, 1), *w = hrand(w_len, -0.5f, 0.5f);
    float *bias = hrand(d->out_c, -0.5f, 0.5f);
    float *out = host_alloc(out_len * 4);
    float *d_in = dev_from(in, in_len), *d_w = dev_from(w, w_len);
    float *d_bias = dev_from(bias, d->out_c), *d_out = dev_alloc(out_len * 4);

    for (int with_bias = 1; with_bias >= 0; with_bias--) {
        H.cpu->conv2d_forward(&H.hx, out, in, w, with_bias ? bias : NULL, n, d);
        H.gpu->conv2d_forward(&H.dx, d_out, d_in, d_w,
                              with_bias ? d_bias : NULL, n, d);
        after("conv2d_forward");
        snprintf(what, sizeof what, "conv2d forward%s %s",
                 with_bias ? "" : " (no bias)", geo);
        check_red(what, dev_to_host(d_out, out_len), out, out_len);
    }

    float *dout = hrand(out_len, -1, 1);
    float *d_dout = dev_from(dout, out_len);
    /* full backward: din assigned, dweight and dbias accumulate */
    {
        float *din = hrand(in_len, -9, 9), *dw = hrand(w_len, -1, 1);
        float *db = hrand(d->out_c, -1, 1);
        float *d_din = dev_from(din, in_len), *d_dw = dev_from(dw, w_len);
        float *d_db = dev_from(db, d->out_c);
        H.cpu->conv2d_backward(&H.hx, din, dw, db, dout, in, w, n, d);
        H.gpu->conv2d_backward(&H.dx, d_din, d_dw, d_db, d_dout, d_in, d_w, n,
                               d);
        after("conv2d_backward");
        snprintf(what, sizeof what, "conv2d backward din %s", geo);
        check_red(what, dev_to_host(d_din, in_len), din, in_len);
        snprintf(what, sizeof what, "conv2d backward dweight %s", geo);
        check_red(what, dev_to_host(d_dw, w_len), dw, w_len);
        snprintf(what, sizeof what, "conv2d backward dbias %s", geo);
        check_red(what, dev_to_host(d_db, d->out_c), db, d->out_c);
    }
    /* din NULL and no bias: weight gradient only */
    {
        float *dw = hrand(w_len, -1, 1);
        float *d_dw = dev_from(dw, w_len);
        H.cpu->conv2d_backward(&H.hx, NULL, dw, NULL, dout, in, w, n, d);
        H.gpu->conv2d_backward(&H.dx, NULL, d_dw, NULL, d_dout, d_in, d_w, n,
                               d);
        after("conv2d_backward");
        snprintf(what, sizeof what,
                 "conv2d backward dweight (din, dbias "
                 "NULL) %s",
                 geo);
        check_red(what, dev_to_host(d_dw, w_len), dw, w_len);
    }
    clear_work();
}

static void case_conv2d(void)
{
    REQUIRE(NN_OP_CONV2D, conv2d_work);
    REQUIRE(NN_OP_CONV2D, conv2d_forward);
    REQUIRE(NN_OP_CONV2D, conv2d_backward);
    nn_conv_desc g[] = {
        conv_geom(3, 16, 16, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1),
        conv_geom(4, 15, 13, 6, 3, 5, 2, 1, 1, 2, 1, 1, 1),  /* strides */
        conv_geom(4, 17, 17, 8, 3, 3, 1, 1, 2, 2, 2, 2, 1),  /* dilation */
        conv_geom(3, 12, 14, 4, 3, 3, 1, 2, 2, 3, 2, 3, 1),  /* uneven */
        conv_geom(4, 10, 10, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2),  /* groups */
        conv_geom(8, 9, 9, 8, 3, 3, 2, 2, 1, 1, 1, 1, 8),    /* depthwise */
        conv_geom(16, 8, 8, 32, 1, 1, 1, 1, 0, 0, 1, 1, 1),  /* 1x1 */
        conv_geom(8, 9, 9, 4, 1, 1, 2, 2, 0, 0, 1, 1, 1),    /* 1x1 stride */
        conv_geom(1, 28, 28, 32, 5, 5, 1, 1, 2, 2, 1, 1, 1), /* MNIST in */
        conv_geom(32, 28, 28, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1),
        conv_geom(64, 7, 7, 128, 3, 3, 2, 2, 1, 1, 1, 1, 1),
    };
    static const uint32_t ns[] = {4, 3, 2, 2, 3, 2, 5, 1, 16, 8, 32};
    static_assert(TY_ARRAY_LEN(ns) == TY_ARRAY_LEN(g), "a batch per geometry");
    for (size_t i = 0; i < TY_ARRAY_LEN(g); i++)
        conv_one(ns[i], &g[i]);
}

static void pool_one(nn_op op, uint32_t n, const nn_conv_desc *d, int nan)
{
    const size_t in_len = (size_t)n * d->in_c * d->in_h * d->in_w;
    const size_t out_len = (size_t)n * d->out_c * d->out_h * d->out_w;
    char what[192];
    const char *name = nn_op_name(op);
    float *in = hrand(in_len, -1, 1);
    if (nan) /* NaN wins a max window */
        for (size_t i = 5; i < in_len; i += 97)
            in[i] = NAN;
    float *out = host_alloc(out_len * 4);
    int32_t *arg = host_alloc(out_len * 4);
    float *d_in = dev_from(in, in_len), *d_out = dev_alloc(out_len * 4);
    int32_t *d_arg = dev_alloc(out_len * 4);
    int is_max = op == NN_OP_MAXPOOL2D;
    snprintf(what, sizeof what,
             "%s forward n=%u %ux%ux%u k=%ux%u s=%ux%u "
             "p=%ux%u%s",
             name, n, d->in_c, d->in_h, d->in_w, d->kernel[0], d->kernel[1],
             d->stride[0], d->stride[1], d->pad[0], d->pad[1],
             nan ? " with NaN" : "");
    H.cpu->pool2d_forward(&H.hx, op, out, is_max ? arg : NULL, in, n, d);
    H.gpu->pool2d_forward(&H.dx, op, d_out, is_max ? d_arg : NULL, d_in, n, d);
    after(name);
    float *got = dev_to_host(d_out, out_len);
    if (is_max) {
        check_exact(what, got, out, out_len);
        check_i32("maxpool argmax", dev_to_host_bytes(d_arg, out_len * 4), arg,
                  out_len);
        /* inference: no argmax */
        H.gpu->zero(&H.dx, d_out, out_len * 4);
        H.gpu->pool2d_forward(&H.dx, op, d_out, NULL, d_in, n, d);
        after(name);
        check_exact("maxpool forward (argmax NULL)",
                    dev_to_host(d_out, out_len), out, out_len);
    } else {
        check_ew(what, got, out, out_len);
    }

    float *dout = hrand(out_len, -1, 1), *din = hrand(in_len, -9, 9);
    float *d_dout = dev_from(dout, out_len), *d_din = dev_from(din, in_len);
    if (is_max) /* route through the CPU's argmax (checked equal above) */
        H.gpu->upload(&H.dx, d_arg, arg, out_len * 4);
    H.cpu->pool2d_backward(&H.hx, op, din, dout, is_max ? arg : NULL, n, d);
    H.gpu->pool2d_backward(&H.dx, op, d_din, d_dout, is_max ? d_arg : NULL, n,
                           d);
    after(name);
    snprintf(what, sizeof what,
             "%s backward n=%u %ux%ux%u k=%ux%u s=%ux%u "
             "p=%ux%u",
             name, n, d->in_c, d->in_h, d->in_w, d->kernel[0], d->kernel[1],
             d->stride[0], d->stride[1], d->pad[0], d->pad[1]);
    check_ew(what, dev_to_host(d_din, in_len), din, in_len);
}

static nn_conv_desc pool_geom(uint32_t c, uint32_t h, uint32_t w, uint32_t kh,
                              uint32_t kw, uint32_t sh, uint32_t sw,
                              uint32_t ph, uint32_t pw)
{
    return conv_geom(c, h, w, c, kh, kw, sh, sw, ph, pw, 1, 1, 1);
}

static void case_pool2d(void)
{
    REQUIRE(NN_OP_MAXPOOL2D, pool2d_forward);
    REQUIRE(NN_OP_MAXPOOL2D, pool2d_backward);
    if (!require(NN_OP_AVGPOOL2D, 1, "pool2d_forward"))
        return;
    nn_conv_desc g22 = pool_geom(3, 16, 16, 2, 2, 2, 2, 0, 0);
    nn_conv_desc g33 = pool_geom(5, 15, 13, 3, 3, 2, 2, 1, 1);
    nn_conv_desc g32 = pool_geom(4, 10, 11, 3, 2, 1, 2, 1, 0);
    nn_conv_desc g31 = pool_geom(4, 10, 11, 3, 3, 1, 1, 1, 1);
    nn_conv_desc g77 = pool_geom(64, 7, 7, 7, 7, 7, 7, 0, 0); /* global */
    static const nn_op ops[] = {NN_OP_MAXPOOL2D, NN_OP_AVGPOOL2D};
    for (size_t o = 0; o < 2; o++) {
        pool_one(ops[o], 4, &g22, 0);
        pool_one(ops[o], 2, &g33, 0);
        pool_one(ops[o], 3, &g32, 0);
        pool_one(ops[o], 3, &g31, 0);
        pool_one(ops[o], 8, &g77, 0);
    }
    pool_one(NN_OP_MAXPOOL2D, 2, &g33, 1);
    pool_one(NN_OP_MAXPOOL2D, 4, &g22, 1);
}

/* ---- reproducibility: same inputs, same device -> same bits ---------- */

static void case_determinism(void)
{
    /* Reductions whose order a GPU could leave to chance (atomics). */
    {
        const size_t len = (1u << 22) + 3;
        float *d_x = dev_from(hrand(len, -1, 1), len);
        double a = H.gpu->sum_squares(&H.dx, d_x, len);
        double b = H.gpu->sum_squares(&H.dx, d_x, len);
        after("sum_squares");
        check_bits("sum_squares", &a, &b, sizeof a);
    }
    {
        const uint32_t n = 4096, c = 1000;
        float *d_l = dev_from(hrand((size_t)n * c, -8, 8), (size_t)n * c);
        int32_t *d_y = dev_from_bytes(hlabels(n, c), n * 4);
        double a =
            H.gpu->softmax_xent(&H.dx, NULL, NULL, NULL, d_l, d_y, n, c, 1.0f);
        double b =
            H.gpu->softmax_xent(&H.dx, NULL, NULL, NULL, d_l, d_y, n, c, 1.0f);
        after("softmax_xent");
        check_bits("softmax_xent loss", &a, &b, sizeof a);
    }
    {
        const uint32_t n = 8192, c = 257;
        float *dout = hrand((size_t)n * c, -1, 1);
        float *d_dout = dev_from(dout, (size_t)n * c);
        float *d_a = dev_alloc(c * 4), *d_b = dev_alloc(c * 4);
        H.gpu->zero(&H.dx, d_a, c * 4);
        H.gpu->zero(&H.dx, d_b, c * 4);
        H.gpu->bias_grad(&H.dx, d_a, d_dout, n, c);
        H.gpu->bias_grad(&H.dx, d_b, d_dout, n, c);
        after("bias_grad");
        check_bits("bias_grad", dev_to_host(d_a, c), dev_to_host(d_b, c),
                   c * 4);
    }
    {
        const uint32_t n = 512, d = 1024;
        const size_t len = (size_t)n * d;
        float *x = hrand(len, -1, 1), *g = hrand(d, 0.5f, 1.5f);
        float *mean = host_alloc(n * 4), *rstd = host_alloc(n * 4);
        float *out = host_alloc(len * 4);
        H.cpu->layernorm_forward(&H.hx, out, mean, rstd, x, g, g, n, d, 1e-5f);
        float *d_x = dev_from(x, len), *d_g = dev_from(g, d);
        float *d_mean = dev_from(mean, n), *d_rstd = dev_from(rstd, n);
        float *d_dout = dev_from(hrand(len, -1, 1), len);
        float *d_dg[2], *d_db[2];
        for (int r = 0; r < 2; r++) {
            d_dg[r] = dev_alloc(d * 4);
            d_db[r] = dev_alloc(d * 4);
            H.gpu->zero(&H.dx, d_dg[r], d * 4);
            H.gpu->zero(&H.dx, d_db[r], d * 4);
            H.gpu->layernorm_backward(&H.dx, NULL, d_dg[r], d_db[r], d_dout,
                                      d_x, d_g, d_mean, d_rstd, n, d);
            after("layernorm_backward");
        }
        check_bits("layernorm dgamma", dev_to_host(d_dg[0], d),
                   dev_to_host(d_dg[1], d), d * 4);
        check_bits("layernorm dbeta", dev_to_host(d_db[0], d),
                   dev_to_host(d_db[1], d), d * 4);
    }
    {
        const uint32_t n = 128, c = 64, s = 196;
        const size_t len = (size_t)n * c * s;
        float *d_x = dev_from(hrand(len, -1, 2), len);
        float *d_g = dev_from(hrand(c, 0.5f, 1.5f), c);
        float *d_b = dev_from(hrand(c, -0.5f, 0.5f), c);
        float *d_dout = dev_from(hrand(len, -1, 1), len);
        float *d_out = dev_alloc(len * 4), *d_dx[2];
        float *d_rm = dev_from(hrand(c, -0.1f, 0.1f), c);
        float *d_rv = dev_from(hrand(c, 0.5f, 1.5f), c);
        float *d_mean[2], *d_inv[2], *d_dg[2];
        for (int r = 0; r < 2; r++) {
            d_mean[r] = dev_alloc(c * 4);
            d_inv[r] = dev_alloc(c * 4);
            d_dg[r] = dev_alloc(c * 4);
            d_dx[r] = dev_alloc(len * 4);
            float *d_db = dev_alloc(c * 4);
            H.gpu->zero(&H.dx, d_dg[r], c * 4);
            H.gpu->zero(&H.dx, d_db, c * 4);
            H.gpu->batchnorm_forward(&H.dx, d_out, d_mean[r], d_inv[r], d_rm,
                                     d_rv, d_x, d_g, d_b, n, c, s, 1, 0.1f,
                                     1e-5f);
            H.gpu->batchnorm_backward(&H.dx, d_dx[r], d_dg[r], d_db, d_dout,
                                      d_x, d_g, d_mean[r], d_inv[r], n, c, s,
                                      1);
            after("batchnorm");
        }
        check_bits("batchnorm mean", dev_to_host(d_mean[0], c),
                   dev_to_host(d_mean[1], c), c * 4);
        check_bits("batchnorm invstd", dev_to_host(d_inv[0], c),
                   dev_to_host(d_inv[1], c), c * 4);
        check_bits("batchnorm dgamma", dev_to_host(d_dg[0], c),
                   dev_to_host(d_dg[1], c), c * 4);
        check_bits("batchnorm dx", dev_to_host(d_dx[0], len),
                   dev_to_host(d_dx[1], len), len * 4);
    }
    {
        nn_conv_desc d = conv_geom(32, 28, 28, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1);
        const uint32_t n = 32;
        const size_t in_len = (size_t)n * d.in_c * d.in_h * d.in_w;
        const size_t out_len = (size_t)n * d.out_c * d.out_h * d.out_w;
        const size_t w_len = (size_t)d.out_c * d.in_c * 9;
        set_conv_work(&d);
        float *d_in = dev_from(hrand(in_len, -1, 1), in_len);
        float *d_w = dev_from(hrand(w_len, -0.5f, 0.5f), w_len);
        float *d_dout = dev_from(hrand(out_len, -1, 1), out_len);
        float *d_dw[2], *d_din[2], *d_db[2];
        for (int r = 0; r < 2; r++) {
            d_dw[r] = dev_alloc(w_len * 4);
            d_din[r] = dev_alloc(in_len * 4);
            d_db[r] = dev_alloc(d.out_c * 4);
            H.gpu->zero(&H.dx, d_dw[r], w_len * 4);
            H.gpu->zero(&H.dx, d_db[r], d.out_c * 4);
            H.gpu->conv2d_backward(&H.dx, d_din[r], d_dw[r], d_db[r], d_dout,
                                   d_in, d_w, n, &d);
            after("conv2d_backward");
        }
        check_bits("conv2d dweight", dev_to_host(d_dw[0], w_len),
                   dev_to_host(d_dw[1], w_len), w_len * 4);
        check_bits("conv2d dbias", dev_to_host(d_db[0], d.out_c),
                   dev_to_host(d_db[1], d.out_c), d.out_c * 4);
        check_bits("conv2d din", dev_to_host(d_din[0], in_len),
                   dev_to_host(d_din[1], in_len), in_len * 4);
        clear_work();
    }
    {
        /* overlapping max windows: din sums several gradients */
        nn_conv_desc d = pool_geom(16, 27, 27, 3, 3, 2, 2, 1, 1);
        const uint32_t n = 16;
        const size_t in_len = (size_t)n * d.in_c * d.in_h * d.in_w;
        const size_t out_len = (size_t)n * d.out_c * d.out_h * d.out_w;
        float *d_in = dev_from(hrand(in_len, -1, 1), in_len);
        float *d_out = dev_alloc(out_len * 4);
        int32_t *d_arg = dev_alloc(out_len * 4);
        float *d_dout = dev_from(hrand(out_len, -1, 1), out_len);
        float *d_din[2];
        H.gpu->pool2d_forward(&H.dx, NN_OP_MAXPOOL2D, d_out, d_arg, d_in, n,
                              &d);
        for (int r = 0; r < 2; r++) {
            d_din[r] = dev_alloc(in_len * 4);
            H.gpu->pool2d_backward(&H.dx, NN_OP_MAXPOOL2D, d_din[r], d_dout,
                                   d_arg, n, &d);
            after("maxpool2d");
        }
        check_bits("maxpool2d din", dev_to_host(d_din[0], in_len),
                   dev_to_host(d_din[1], in_len), in_len * 4);
    }
}

/* ---- the op table ---------------------------------------------------- */

static void case_op_table(void)
{
    H.checks++;
    for (int op = 0; op < NN_OP_COUNT; op++)
        if (!H.gpu->supports || !H.gpu->supports((nn_op)op))
            fail("nn_backend_cuda does not support %s (required)",
                 nn_op_name((nn_op)op));
    /* every member, by name, so a missing one is named */
    struct {
        const char *name;
        int present;
    } m[] = {
#define M(x) {#x, H.gpu->x != NULL}
        M(alloc),
        M(release),
        M(upload),
        M(download),
        M(zero),
        M(copy),
        M(status),
        M(supports),
        M(gemm),
        M(bias_rows),
        M(bias_grad),
        M(act_forward),
        M(act_backward),
        M(dropout_forward),
        M(dropout_backward),
        M(softmax_xent),
        M(mse),
        M(sgd),
        M(adam),
        M(batchnorm_forward),
        M(batchnorm_backward),
        M(layernorm_forward),
        M(layernorm_backward),
        M(leaky_relu_forward),
        M(leaky_relu_backward),
        M(softmax_forward),
        M(softmax_backward),
        M(add),
        M(softmax_xent_smooth),
        M(bce_logits),
        M(huber),
        M(sum_squares),
        M(scale),
        M(conv2d_work),
        M(conv2d_forward),
        M(conv2d_backward),
        M(pool2d_forward),
        M(pool2d_backward),
        M(host_alloc),
        M(host_release),
        M(fence_create),
        M(fence_record),
        M(fence_wait),
        M(fence_release),
        M(graph_begin),
        M(graph_end),
        M(graph_launch),
        M(graph_release),
        M(cast),
        M(gemm_lp),
        M(lp_ok),
        M(embedding_forward),
        M(embedding_backward),
        M(to_ids),
        M(attention_forward),
        M(attention_backward),
        M(seq_lens),
        M(seq_pool_forward),
        M(seq_pool_backward),
        M(kv_store),
        M(kv_attention),
        M(rows_gemm),
        M(xent_ignore),
#undef M
    };
    static_assert(sizeof(nn_backend) ==
                      sizeof(const char *) + 63 * sizeof(void (*)(void)),
                  "a member was added to nn_backend: list it here too");
    for (size_t i = 0; i < TY_ARRAY_LEN(m); i++)
        if (!m[i].present)
            fail("nn_backend_cuda.%s is NULL (required)", m[i].name);
    if (!H.gpu->name || strcmp(H.gpu->name, "cuda"))
        fail("nn_backend_cuda.name is \"%s\", want \"cuda\"",
             H.gpu->name ? H.gpu->name : "(null)");
}

/* ---- runner ---------------------------------------------------------- */

static const struct {
    const char *name;
    void (*fn)(void);
} cases[] = {
    {"op_table", case_op_table},
    {"memory", case_memory},
    {"gemm", case_gemm},
    {"bias_rows", case_bias_rows},
    {"bias_grad", case_bias_grad},
    {"activations", case_activations},
    {"leaky_relu", case_leaky_relu},
    {"dropout", case_dropout},
    {"softmax_xent", case_softmax_xent},
    {"softmax_xent_smooth", case_softmax_xent_smooth},
    {"bce_logits", case_bce_logits},
    {"mse", case_mse},
    {"huber", case_huber},
    {"sum_squares", case_sum_squares},
    {"scale", case_scale},
    {"add", case_add},
    {"sgd", case_sgd},
    {"adam", case_adam},
    {"layernorm", case_layernorm},
    {"softmax", case_softmax},
    {"batchnorm", case_batchnorm},
    {"conv2d", case_conv2d},
    {"pool2d", case_pool2d},
    {"determinism", case_determinism},
};

static int selected(const char *name, int argc, char **argv)
{
    if (argc < 2)
        return 1;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], name))
            return 1;
    return 0;
}

static int contains_nocase(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && (hay[i] | 0x20) == (needle[i] | 0x20))
            i++;
        if (i == n)
            return 1;
    }
    return 0;
}

/* The error path: a failed call is reported as TY_EDEVICE naming it, and
 * later kernels on the failed context return without crashing or hanging. */
static int run_faults(void)
{
    ty_err err = {0};
    int failures = 0;
    H.case_name = "faults";
#define FCHECK(cond, ...)                            \
    do {                                             \
        if (!(cond)) {                               \
            printf("  FAIL [faults]: " __VA_ARGS__); \
            printf("\n");                            \
            failures++;                              \
        }                                            \
    } while (0)

    /* 1. an absurd allocation */
    nn_exec a = {0};
    if (nn_cuda_exec_init(&a, 0, &err) != TY_OK)
        fatal("nn_cuda_exec_init: %s", err.msg);
    float *buf = H.gpu->alloc(&a, 1 << 20);
    float *buf2 = H.gpu->alloc(&a, 1 << 20);
    FCHECK(buf && buf2, "alloc of 1 MiB failed on a fresh context");
    if (buf2) /* zero floats read as labels 0 below */
        H.gpu->zero(&a, buf2, 1 << 20);
    void *huge = H.gpu->alloc(&a, SIZE_MAX / 2);
    FCHECK(huge == NULL, "alloc(SIZE_MAX / 2) returned %p, want NULL", huge);
    ty_status st = H.gpu->status(&a, &err);
    printf("    alloc(SIZE_MAX/2): status %s: %s\n", ty_status_name(st),
           err.msg);
    FCHECK(st == TY_EDEVICE,
           "status after a failed alloc is %s, want "
           "TY_EDEVICE",
           ty_status_name(st));
    FCHECK(err.msg[0] && contains_nocase(err.msg, "alloc"),
           "the message does not name the allocation: \"%s\"", err.msg);
    char first[sizeof err.msg];
    memcpy(first, err.msg, sizeof first);
    if (buf && buf2) {
        /* later kernels on the failed context are no-ops, not crashes */
        uint32_t correct = 0;
        float host[16] = {0};
        H.gpu->gemm(&a, buf, buf2, buf2, 0, 0, 64, 64, 64, 1.0f, 0.0f);
        H.gpu->act_forward(&a, NN_OP_GELU, buf, buf2, 4096);
        (void)H.gpu->softmax_xent(&a, buf, NULL, &correct, buf2,
                                  (const int32_t *)buf2, 16, 10, 1.0f);
        (void)H.gpu->sum_squares(&a, buf, 4096);
        H.gpu->download(&a, host, buf, sizeof host);
        st = H.gpu->status(&a, &err);
        FCHECK(st == TY_EDEVICE && !strcmp(err.msg, first),
               "status changed after later kernels: %s \"%s\" (first error "
               "wins)",
               ty_status_name(st), err.msg);
    }
    H.gpu->release(&a, buf);
    H.gpu->release(&a, buf2);
    nn_cuda_exec_free(&a);
    printf("%s faults/absurd_alloc\n", failures ? "FAIL" : "ok  ");

    /* 2. errors belong to their context: a fresh one works */
    int before = failures;
    nn_exec b = {0};
    if (nn_cuda_exec_init(&b, 0, &err) != TY_OK)
        fatal("nn_cuda_exec_init after a failed alloc: %s", err.msg);
    {
        enum { M = 33, N = 17, K = 40 };
        float ha[M * K], hb[K * N], hc[M * N], got[M * N];
        ty_rng_seed(&H.rng, 99, 0);
        for (int i = 0; i < M * K; i++)
            ha[i] = ty_rng_uniform(&H.rng);
        for (int i = 0; i < K * N; i++)
            hb[i] = ty_rng_uniform(&H.rng);
        H.cpu->gemm(NULL, hc, ha, hb, 0, 0, M, N, K, 1.0f, 0.0f);
        float *da = H.gpu->alloc(&b, sizeof ha);
        float *db = H.gpu->alloc(&b, sizeof hb);
        float *dc = H.gpu->alloc(&b, sizeof hc);
        FCHECK(da && db && dc, "alloc failed on a fresh context");
        if (da && db && dc) {
            H.gpu->upload(&b, da, ha, sizeof ha);
            H.gpu->upload(&b, db, hb, sizeof hb);
            /* an own kernel first: its launch check reads the thread's
             * last CUDA error, which the failed cudaMalloc above set
             * unless the backend cleared it */
            H.gpu->act_forward(&b, NN_OP_RELU, da, da, M * K);
            H.gpu->gemm(&b, dc, da, db, 0, 0, M, N, K, 1.0f, 0.0f);
            H.gpu->download(&b, got, dc, sizeof got);
            st = H.gpu->status(&b, &err);
            FCHECK(st == TY_OK,
                   "a fresh context after another one's failed "
                   "alloc reports %s: %s",
                   ty_status_name(st), err.msg);
            for (int i = 0; i < M * N; i++)
                if (fabsf(got[i] - hc[i]) > 1e-4f * (1.0f + fabsf(hc[i]))) {
                    FCHECK(0, "gemm on the fresh context: [%d] %g vs %g", i,
                           (double)got[i], (double)hc[i]);
                    break;
                }
        }
        H.gpu->release(&b, da);
        H.gpu->release(&b, db);
        H.gpu->release(&b, dc);
    }
    nn_cuda_exec_free(&b);
    printf("%s faults/fresh_context\n", failures > before ? "FAIL" : "ok  ");

    /* 3. a GEMM through a NULL device pointer. The fault is asynchronous:
     * it surfaces at the next synchronizing call (the download), as an
     * illegal address, which poisons the process's CUDA context; so this
     * is the last check. */
    before = failures;
    nn_exec c = {0};
    if (nn_cuda_exec_init(&c, 0, &err) != TY_OK)
        fatal("nn_cuda_exec_init: %s", err.msg);
    float *dc = H.gpu->alloc(&c, 256 * 256 * sizeof(float));
    float *dbuf = H.gpu->alloc(&c, 256 * 256 * sizeof(float));
    FCHECK(dc && dbuf, "alloc failed on a fresh context");
    if (dc && dbuf) {
        float host[64];
        H.gpu->gemm(&c, dc, NULL, dbuf, 0, 0, 256, 256, 256, 1.0f, 0.0f);
        H.gpu->download(&c, host, dc, sizeof host);
        st = H.gpu->status(&c, &err);
        printf("    gemm(a = NULL): status %s: %s\n", ty_status_name(st),
               err.msg);
        FCHECK(st == TY_EDEVICE,
               "status after a gemm through NULL is %s, "
               "want TY_EDEVICE",
               ty_status_name(st));
        FCHECK(err.msg[0], "TY_EDEVICE without a message");
        /* later kernels: no crash, no hang */
        H.gpu->gemm(&c, dc, dbuf, dbuf, 0, 0, 256, 256, 256, 1.0f, 0.0f);
        (void)H.gpu->sum_squares(&c, dbuf, 256);
        H.gpu->download(&c, host, dc, sizeof host);
        ty_status st2 = H.gpu->status(&c, &err);
        FCHECK(st2 == TY_EDEVICE, "status after later kernels is %s",
               ty_status_name(st2));
    }
    H.gpu->release(&c, dc);
    H.gpu->release(&c, dbuf);
    nn_cuda_exec_free(&c);
    printf("%s faults/null_pointer_gemm\n",
           failures > before ? "FAIL" : "ok  ");
#undef FCHECK
    printf("%s: faults\n", failures ? "FAILED" : "PASSED");
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    char why[256] = "";
    int ndev = nn_cuda_device_count(why, sizeof why);
    if (ndev <= 0) {
        printf("SKIPPED: no CUDA device (%s)\n",
               why[0] ? why : "none visible to this process");
        return 77;
    }
    H.cpu = &nn_backend_cpu;
    H.gpu = &nn_backend_cuda;

    ty_err err = {0};
    nn_cuda_device dev;
    if (nn_cuda_device_get(0, &dev, &err) != TY_OK)
        fatal("nn_cuda_device_get(0): %s", err.msg);
    char versions[160];
    nn_cuda_versions(versions, sizeof versions);
    printf("device 0 of %d: %s (%s), compute capability %d.%d, %.1f of %.1f "
           "GiB free; %s\n",
           ndev, dev.name, dev.uuid, dev.cc_major, dev.cc_minor,
           (double)dev.free_bytes / (1u << 30),
           (double)dev.total_bytes / (1u << 30), versions);

    if (argc == 2 && !strcmp(argv[1], "--faults"))
        return run_faults();

    if (nn_cuda_exec_init(&H.dx, 0, &err) != TY_OK)
        fatal("nn_cuda_exec_init: %s", err.msg);
    clear_work();

    int failed_cases = 0, ran = 0;
    for (size_t i = 0; i < TY_ARRAY_LEN(cases); i++) {
        if (!selected(cases[i].name, argc, argv))
            continue;
        H.case_name = cases[i].name;
        H.case_failures = 0;
        H.checks = 0;
        ty_rng_seed(&H.rng, 20240601, i);
        cases[i].fn();
        scratch_release();
        clear_work();
        ran++;
        if (H.case_failures)
            failed_cases++;
        if (H.case_failures > MAX_REPORTED)
            printf("  ... and %d more failed checks\n",
                   H.case_failures - MAX_REPORTED);
        printf("%s %-20s (%d checks, %d failed)\n",
               H.case_failures ? "FAIL" : "ok  ", cases[i].name, H.checks,
               H.case_failures);
    }
    nn_cuda_exec_free(&H.dx);
    if (!ran) {
        printf("no case matched; cases are:");
        for (size_t i = 0; i < TY_ARRAY_LEN(cases); i++)
            printf(" %s", cases[i].name);
        printf("\n");
        return 1;
    }
    printf("%s: %d of %d cases failed\n", failed_cases ? "FAILED" : "PASSED",
           failed_cases, ran);
    return failed_cases ? 1 : 0;
}

#else /* !TRAINYARD_HAVE_CUDA */

int main(void)
{
    printf("SKIPPED: built without CUDA (TRAINYARD_HAVE_CUDA is off)\n");
    return 77;
}

#endif
