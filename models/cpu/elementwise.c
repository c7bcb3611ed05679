/*
 * elementwise.c - the CPU backend's elementwise kernels: the bias broadcast
 * and its gradient, the activations (relu, tanh, sigmoid, gelu,
 * leaky_relu), dropout, add and scale.
 *
 * Each is plain C written so the compiler can vectorize it (restrict
 * pointers, straight loops, no branches on the hot path where avoidable),
 * split into ranges over the execution context's pool. Every output value
 * is computed by exactly one part the same way, so results do not depend on
 * the thread count at all (bias_grad sums each column in row order whatever
 * the split).
 */

/* GCC 12's -O2 only vectorizes loops its "very cheap" model accepts; the
 * elementwise kernels here are worth the full cost model. */
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")

#include "models/cpu/cpu_internal.h"

#include <assert.h>
#include <math.h>
#include <string.h>

typedef struct {
    float *out;
    const float *in;
    uint32_t n, c;
} rows_job;

static void bias_rows_part(void *arg, int part, int parts)
{
    const rows_job *j = arg;
    size_t b, e;
    nn_pool_range(j->n, part, parts, 1, &b, &e);
    for (size_t i = b; i < e; i++)
        memcpy(j->out + i * j->c, j->in, (size_t)j->c * sizeof *j->out);
}

void nn_cpu_bias_rows(const nn_exec *ex, float *out, const float *bias,
                      uint32_t n, uint32_t c)
{
    rows_job j = {.out = out, .in = bias, .n = n, .c = c};
    nn_pool_run(nn_cpu_pool_for(ex, (double)n * c, PAR_MIN_ELEMS),
                bias_rows_part, &j);
}

/* db[j0, j1) += column sums of dout over all rows: each column is summed in
 * row order whatever the split. */
static void bias_grad_part(void *arg, int part, int parts)
{
    const rows_job *j = arg;
    size_t b, e;
    nn_pool_range(j->c, part, parts, PAR_ALIGN, &b, &e);
    float *restrict db = j->out;
    for (uint32_t i = 0; i < j->n; i++) {
        const float *restrict row = j->in + (size_t)i * j->c;
        for (size_t k = b; k < e; k++)
            db[k] += row[k];
    }
}

void nn_cpu_bias_grad(const nn_exec *ex, float *db, const float *dout,
                      uint32_t n, uint32_t c)
{
    rows_job j = {.out = db, .in = dout, .n = n, .c = c};
    nn_pool_run(nn_cpu_pool_for(ex, (double)n * c, PAR_MIN_ELEMS),
                bias_grad_part, &j);
}

#define GELU_RSQRT2 0.70710678118654752440f
#define GELU_RSQRT2PI 0.39894228040143267794f
#define GELU_SQRT2_PI 0.79788456080286535588f /* sqrt(2 / pi) */
#define GELU_CUBIC 0.044715f

static void relu_fwd(float *restrict out, const float *restrict in, size_t len)
{
    for (size_t i = 0; i < len; i++)
        out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

static void relu_bwd(float *restrict din, const float *restrict dout,
                     const float *restrict out, size_t len)
{
    /* dout is loaded unconditionally: a load under the condition could
     * trap, so GCC would keep a branch (mispredicted half the time on
     * real activations) instead of vectorizing. */
    for (size_t i = 0; i < len; i++) {
        float g = dout[i];
        din[i] = out[i] > 0.0f ? g : 0.0f;
    }
}

/* GELU's tanh form, vectorized. Comparisons keep GCC from vectorizing a
 * loop while trapping math is on; these functions raise no exception
 * anyone reads, and -fno-trapping-math changes no result (it allows no
 * reassociation), so it is off for them alone. */
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")

#include "models/cpu/fastexp.h"

/* tanh(u) = sign(u) (1 - e) / (1 + e), e = exp(-2 |u|): within 1e-7 of
 * tanhf absolutely (what GELU's 0.5 x (1 + tanh u) and its gradient
 * carry), and vectorizable where tanhf is a libm call per value - GELU's
 * tanhf (through expm1f) was 30% of a GPT step's time on the CPU. */
static inline float tanh_vec(float u)
{
    float a = fabsf(u);
    a = a > 43.5f ? 43.5f : a; /* tanh is 1.0f from 9 on */
    float e = exp_nonpos(-2.0f * a);
    return copysignf((1.0f - e) / (1.0f + e), u);
}

/* The loops, inlined into one function per instruction set below. */
static inline __attribute__((always_inline)) void
gelu_tanh_fwd_body(float *restrict out, const float *restrict in, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        float x = in[i];
        float u = GELU_SQRT2_PI * (x + GELU_CUBIC * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanh_vec(u));
    }
}

/* d/dx of 0.5 x (1 + tanh u): 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u)
 * du/dx, du/dx = sqrt(2/pi) (1 + 3 c x^2). */
static inline __attribute__((always_inline)) void
gelu_tanh_bwd_body(float *restrict din, const float *restrict dout,
                   const float *restrict in, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        float x = in[i];
        float u = GELU_SQRT2_PI * (x + GELU_CUBIC * x * x * x);
        float th = tanh_vec(u);
        float du = GELU_SQRT2_PI * (1.0f + 3.0f * GELU_CUBIC * x * x);
        din[i] =
            dout[i] * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du);
    }
}

/* Wider vectors where the CPU has them (as the Adam kernel, optim.c). The
 * same operations in the same order on every path (ISO C: no FMA
 * contraction), so the values do not depend on which one runs. */
#define GELU_TANH_ISA(SUFFIX, TARGET)                                   \
    __attribute__((target(TARGET))) static void gelu_tanh_fwd_##SUFFIX( \
        float *restrict out, const float *restrict in, size_t len)      \
    {                                                                   \
        gelu_tanh_fwd_body(out, in, len);                               \
    }                                                                   \
    __attribute__((target(TARGET))) static void gelu_tanh_bwd_##SUFFIX( \
        float *restrict din, const float *restrict dout,                \
        const float *restrict in, size_t len)                           \
    {                                                                   \
        gelu_tanh_bwd_body(din, dout, in, len);                         \
    }
#if defined(__x86_64__)
GELU_TANH_ISA(avx512, "avx512f")
GELU_TANH_ISA(avx2, "avx2")
#endif

static void gelu_tanh_fwd(float *restrict out, const float *restrict in,
                          size_t len)
{
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f")) {
        gelu_tanh_fwd_avx512(out, in, len);
        return;
    }
    if (__builtin_cpu_supports("avx2")) {
        gelu_tanh_fwd_avx2(out, in, len);
        return;
    }
#endif
    gelu_tanh_fwd_body(out, in, len);
}

static void gelu_tanh_bwd(float *restrict din, const float *restrict dout,
                          const float *restrict in, size_t len)
{
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f")) {
        gelu_tanh_bwd_avx512(din, dout, in, len);
        return;
    }
    if (__builtin_cpu_supports("avx2")) {
        gelu_tanh_bwd_avx2(din, dout, in, len);
        return;
    }
#endif
    gelu_tanh_bwd_body(din, dout, in, len);
}

#pragma GCC pop_options

static void act_forward_serial(nn_op op, float *out, const float *in,
                               size_t len)
{
    switch (op) {
        case NN_OP_RELU: relu_fwd(out, in, len); break;
        case NN_OP_TANH:
            for (size_t i = 0; i < len; i++)
                out[i] = tanhf(in[i]);
            break;
        case NN_OP_SIGMOID:
            for (size_t i = 0; i < len; i++) {
                /* Never exp of a large positive: no overflow for any input. */
                float x = in[i];
                if (x >= 0.0f) {
                    out[i] = 1.0f / (1.0f + expf(-x));
                } else {
                    float e = expf(x);
                    out[i] = e / (1.0f + e);
                }
            }
            break;
        case NN_OP_GELU:
            for (size_t i = 0; i < len; i++)
                out[i] = 0.5f * in[i] * (1.0f + erff(in[i] * GELU_RSQRT2));
            break;
        case NN_OP_GELU_TANH: gelu_tanh_fwd(out, in, len); break;
        default: assert(!"not an activation op");
    }
}

static void act_backward_serial(nn_op op, float *din, const float *dout,
                                const float *in, const float *out, size_t len)
{
    switch (op) {
        case NN_OP_RELU: relu_bwd(din, dout, out, len); break;
        case NN_OP_TANH:
            for (size_t i = 0; i < len; i++)
                din[i] = dout[i] * (1.0f - out[i] * out[i]);
            break;
        case NN_OP_SIGMOID:
            for (size_t i = 0; i < len; i++)
                din[i] = dout[i] * out[i] * (1.0f - out[i]);
            break;
        case NN_OP_GELU:
            for (size_t i = 0; i < len; i++) {
                float x = in[i];
                float cdf = 0.5f * (1.0f + erff(x * GELU_RSQRT2));
                float pdf = GELU_RSQRT2PI * expf(-0.5f * x * x);
                din[i] = dout[i] * (cdf + x * pdf);
            }
            break;
        case NN_OP_GELU_TANH: gelu_tanh_bwd(din, dout, in, len); break;
        default: assert(!"not an activation op");
    }
}

/* Serial: the mask consumes the random stream in order. */
void nn_cpu_dropout_forward(const nn_exec *ex, float *restrict out,
                            float *restrict mask, const float *restrict in,
                            size_t len, float rate, ty_rng *rng)
{
    float scale = 1.0f / (1.0f - rate);
    for (size_t i = 0; i < len; i++)
        mask[i] = ty_rng_uniform(rng) >= rate ? scale : 0.0f;
    for (size_t i = 0; i < len; i++)
        out[i] = in[i] * mask[i];
}

static void dropout_backward_serial(float *restrict din,
                                    const float *restrict dout,
                                    const float *restrict mask, size_t len)
{
    for (size_t i = 0; i < len; i++)
        din[i] = dout[i] * mask[i];
}

static void leaky_fwd(float *restrict out, const float *restrict in, size_t n,
                      float slope)
{
    for (size_t i = 0; i < n; i++)
        out[i] = in[i] > 0.0f ? in[i] : slope * in[i];
}

static void leaky_bwd(float *restrict din, const float *restrict dout,
                      const float *restrict in, size_t n, float slope)
{
    for (size_t i = 0; i < n; i++)
        din[i] = in[i] > 0.0f ? dout[i] : slope * dout[i];
}

/* out may be a or b: no restrict. */
static void add_range(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

/* ---- splitting elementwise kernels into ranges ---- */

typedef struct {
    nn_op op;
    int backward;
    size_t len;
    float *o0;
    const float *i0, *i1, *i2;
    float alpha; /* scale; leaky_relu's slope */
} ew_job;

#define AT(p, b) ((p) ? (p) + (b) : NULL)

static void ew_part(void *arg, int part, int parts)
{
    const ew_job *j = arg;
    size_t b, e;
    nn_pool_range(j->len, part, parts, PAR_ALIGN, &b, &e);
    if (e <= b)
        return;
    size_t n = e - b;
    switch (j->op) {
        case NN_OP_DROPOUT:
            dropout_backward_serial(j->o0 + b, j->i0 + b, j->i1 + b, n);
            break;
        case NN_OP_SCALE: {
            float *restrict x = j->o0 + b;
            const float a = j->alpha;
            for (size_t i = 0; i < n; i++)
                x[i] *= a;
            break;
        }
        case NN_OP_LEAKY_RELU:
            if (j->backward)
                leaky_bwd(j->o0 + b, j->i0 + b, j->i1 + b, n, j->alpha);
            else
                leaky_fwd(j->o0 + b, j->i0 + b, n, j->alpha);
            break;
        case NN_OP_ADD: add_range(j->o0 + b, j->i0 + b, j->i1 + b, n); break;
        default:
            if (j->backward)
                act_backward_serial(j->op, j->o0 + b, j->i0 + b, AT(j->i1, b),
                                    AT(j->i2, b), n);
            else
                act_forward_serial(j->op, j->o0 + b, j->i0 + b, n);
    }
}

static void ew_run(const nn_exec *ex, const ew_job *j)
{
    nn_pool_run(nn_cpu_pool_for(ex, (double)j->len, PAR_MIN_ELEMS), ew_part,
                (void *)j);
}

void nn_cpu_act_forward(const nn_exec *ex, nn_op op, float *out,
                        const float *in, size_t len)
{
    ew_run(ex, &(ew_job){.op = op, .len = len, .o0 = out, .i0 = in});
}

void nn_cpu_act_backward(const nn_exec *ex, nn_op op, float *din,
                         const float *dout, const float *in, const float *out,
                         size_t len)
{
    ew_run(ex, &(ew_job){.op = op,
                         .backward = 1,
                         .len = len,
                         .o0 = din,
                         .i0 = dout,
                         .i1 = in,
                         .i2 = out});
}

void nn_cpu_dropout_backward(const nn_exec *ex, float *din, const float *dout,
                             const float *mask, size_t len)
{
    ew_run(ex, &(ew_job){.op = NN_OP_DROPOUT,
                         .len = len,
                         .o0 = din,
                         .i0 = dout,
                         .i1 = mask});
}

void nn_cpu_scale(const nn_exec *ex, float *x, size_t len, float alpha)
{
    ew_run(ex,
           &(ew_job){.op = NN_OP_SCALE, .len = len, .o0 = x, .alpha = alpha});
}

void nn_cpu_leaky_relu_forward(const nn_exec *ex, float *out, const float *in,
                               size_t len, float slope)
{
    ew_run(ex, &(ew_job){.op = NN_OP_LEAKY_RELU,
                         .len = len,
                         .o0 = out,
                         .i0 = in,
                         .alpha = slope});
}

void nn_cpu_leaky_relu_backward(const nn_exec *ex, float *din,
                                const float *dout, const float *in, size_t len,
                                float slope)
{
    ew_run(ex, &(ew_job){.op = NN_OP_LEAKY_RELU,
                         .backward = 1,
                         .len = len,
                         .o0 = din,
                         .i0 = dout,
                         .i1 = in,
                         .alpha = slope});
}

void nn_cpu_add(const nn_exec *ex, float *out, const float *a, const float *b,
                size_t len)
{
    ew_run(ex,
           &(ew_job){.op = NN_OP_ADD, .len = len, .o0 = out, .i0 = a, .i1 = b});
}
