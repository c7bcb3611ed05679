/*
 * backend_cpu.c - the CPU reference backend: GEMM through OpenBLAS, every
 * other op in plain C written so the compiler can vectorize it (restrict
 * pointers, straight loops, no branches on the hot path where avoidable).
 *
 * Results depend only on the inputs and, for GEMM, on OpenBLAS's thread
 * count: no kernel here splits work by thread, so a run is bit-reproducible
 * for a fixed count.
 */

/* GCC 12's -O2 only vectorizes loops its "very cheap" model accepts; the
 * elementwise kernels here are worth the full cost model. */
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")

#include "models/backend.h"

#include "common/ty.h"

#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static const char *const op_names[] = {
    [NN_OP_GEMM] = "gemm",
    [NN_OP_BIAS_ROWS] = "bias_rows",
    [NN_OP_BIAS_GRAD] = "bias_grad",
    [NN_OP_RELU] = "relu",
    [NN_OP_TANH] = "tanh",
    [NN_OP_SIGMOID] = "sigmoid",
    [NN_OP_GELU] = "gelu",
    [NN_OP_DROPOUT] = "dropout",
    [NN_OP_SOFTMAX_XENT] = "softmax_xent",
    [NN_OP_MSE] = "mse",
    [NN_OP_SGD] = "sgd",
    [NN_OP_ADAM] = "adam",
};
static_assert(TY_ARRAY_LEN(op_names) == NN_OP_COUNT, "every nn_op needs a name");

const char *nn_op_name(nn_op op)
{
    if ((unsigned)op >= NN_OP_COUNT || !op_names[op])
        return "?";
    return op_names[op];
}

static int cpu_supports(nn_op op) { return (unsigned)op < NN_OP_COUNT; }

static void cpu_gemm(float *c, const float *a, const float *b, int trans_a,
                     int trans_b, int m, int n, int k, float alpha, float beta)
{
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a,
                trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
}

static void cpu_bias_rows(float *out, const float *bias, uint32_t n,
                          uint32_t c)
{
    for (uint32_t i = 0; i < n; i++)
        memcpy(out + (size_t)i * c, bias, (size_t)c * sizeof *out);
}

static void cpu_bias_grad(float *restrict db, const float *restrict dout,
                          uint32_t n, uint32_t c)
{
    for (uint32_t i = 0; i < n; i++) {
        const float *row = dout + (size_t)i * c;
        for (uint32_t j = 0; j < c; j++)
            db[j] += row[j];
    }
}

#define GELU_RSQRT2 0.70710678118654752440f
#define GELU_RSQRT2PI 0.39894228040143267794f

static void relu_fwd(float *restrict out, const float *restrict in, size_t len)
{
    for (size_t i = 0; i < len; i++)
        out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

static void relu_bwd(float *restrict din, const float *restrict dout,
                     const float *restrict out, size_t len)
{
    for (size_t i = 0; i < len; i++)
        din[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

static void cpu_act_forward(nn_op op, float *out, const float *in, size_t len)
{
    switch (op) {
    case NN_OP_RELU:
        relu_fwd(out, in, len);
        break;
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
    default:
        assert(!"not an activation op");
    }
}

static void cpu_act_backward(nn_op op, float *din, const float *dout,
                             const float *in, const float *out, size_t len)
{
    switch (op) {
    case NN_OP_RELU:
        relu_bwd(din, dout, out, len);
        break;
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
    default:
        assert(!"not an activation op");
    }
}

static void cpu_dropout_forward(float *restrict out, float *restrict mask,
                                const float *restrict in, size_t len,
                                float rate, ty_rng *rng)
{
    float scale = 1.0f / (1.0f - rate);
    for (size_t i = 0; i < len; i++)
        mask[i] = ty_rng_uniform(rng) >= rate ? scale : 0.0f;
    for (size_t i = 0; i < len; i++)
        out[i] = in[i] * mask[i];
}

static void cpu_dropout_backward(float *restrict din, const float *restrict dout,
                                 const float *restrict mask, size_t len)
{
    for (size_t i = 0; i < len; i++)
        din[i] = dout[i] * mask[i];
}

static double cpu_softmax_xent(float *dlogits, float *probs, uint32_t *correct,
                               const float *logits, const int32_t *labels,
                               uint32_t n, uint32_t c, float grad_scale)
{
    double loss = 0.0;
    uint32_t hits = 0;
    for (uint32_t i = 0; i < n; i++) {
        const float *x = logits + (size_t)i * c;
        uint32_t arg = 0;
        float max = x[0];
        for (uint32_t j = 1; j < c; j++)
            if (x[j] > max) {
                max = x[j];
                arg = j;
            }
        /* exp once, into whichever output row exists, then normalize. */
        float *t = dlogits ? dlogits + (size_t)i * c
                           : probs ? probs + (size_t)i * c : NULL;
        float sum = 0.0f;
        if (t) {
            for (uint32_t j = 0; j < c; j++) {
                t[j] = expf(x[j] - max);
                sum += t[j];
            }
        } else {
            for (uint32_t j = 0; j < c; j++)
                sum += expf(x[j] - max);
        }
        int32_t y = labels ? labels[i] : 0;
        if (labels) {
            hits += (uint32_t)y == arg;
            loss += log((double)sum) + (double)max - (double)x[y];
        }
        float inv = 1.0f / sum;
        if (probs) {
            float *p = probs + (size_t)i * c;
            for (uint32_t j = 0; j < c; j++)
                p[j] = t[j] * inv;
        }
        if (dlogits) {
            float *d = dlogits + (size_t)i * c;
            for (uint32_t j = 0; j < c; j++)
                d[j] = d[j] * inv * grad_scale;
            d[y] -= grad_scale;
        }
    }
    if (correct)
        *correct = hits;
    return loss;
}

static double cpu_mse(float *dpred, const float *pred, const float *target,
                      size_t len, float grad_scale)
{
    double sum = 0.0;
    for (size_t i = 0; i < len; i++) {
        float d = pred[i] - target[i];
        sum += (double)d * (double)d;
        if (dpred)
            dpred[i] = 2.0f * d * grad_scale;
    }
    return sum;
}

static void cpu_sgd(float *restrict param, float *restrict grad,
                    float *restrict buf, size_t len, const nn_optim_args *s)
{
    const float lr = s->lr, wd = s->weight_decay, mom = s->momentum;
    if (buf) {
        for (size_t i = 0; i < len; i++) {
            float g = grad[i] + wd * param[i];
            buf[i] = mom * buf[i] + g;
            param[i] -= lr * buf[i];
            grad[i] = 0.0f;
        }
    } else {
        for (size_t i = 0; i < len; i++) {
            float g = grad[i] + wd * param[i];
            param[i] -= lr * g;
            grad[i] = 0.0f;
        }
    }
}

/* Adam's per-element update, in one fixed order of IEEE operations (no
 * fused multiply-add), so the scalar and SIMD versions below give identical
 * bits. The SIMD versions exist because sqrtf's errno path keeps GCC from
 * vectorizing the scalar loop. */
static inline float adam_one(float *param, float *grad, float *m, float *v,
                             const nn_optim_args *s)
{
    float g = *grad + s->weight_decay * *param;
    float mi = s->beta1 * *m + s->one_minus_beta1 * g;
    float vi = s->beta2 * *v + s->one_minus_beta2 * g * g;
    *m = mi;
    *v = vi;
    *grad = 0.0f;
    return *param - s->step_size * mi /
                        (sqrtf(vi) / s->bias_correction2_sqrt + s->eps);
}

static void adam_scalar(float *restrict param, float *restrict grad,
                        float *restrict m, float *restrict v, size_t from,
                        size_t len, const nn_optim_args *s)
{
    for (size_t i = from; i < len; i++)
        param[i] = adam_one(&param[i], &grad[i], &m[i], &v[i], s);
}

#if defined(__x86_64__)
#define ADAM_SIMD(NAME, TARGET, VEC, W, SET1, LOAD, STORE, ADD, SUB, MUL, DIV,  \
                  SQRT, ZERO)                                                   \
    __attribute__((target(TARGET))) static size_t NAME(                         \
        float *param, float *grad, float *m, float *v, size_t len,              \
        const nn_optim_args *s)                                                 \
    {                                                                           \
        const VEC wd = SET1(s->weight_decay), b1 = SET1(s->beta1);              \
        const VEC b2 = SET1(s->beta2), ob1 = SET1(s->one_minus_beta1);          \
        const VEC ob2 = SET1(s->one_minus_beta2), step = SET1(s->step_size);    \
        const VEC bc2 = SET1(s->bias_correction2_sqrt), eps = SET1(s->eps);     \
        size_t i = 0;                                                           \
        for (; i + W <= len; i += W) {                                          \
            VEC p = LOAD(param + i);                                            \
            VEC g = ADD(LOAD(grad + i), MUL(wd, p));                            \
            VEC mi = ADD(MUL(b1, LOAD(m + i)), MUL(ob1, g));                    \
            VEC vi = ADD(MUL(b2, LOAD(v + i)), MUL(MUL(ob2, g), g));            \
            STORE(m + i, mi);                                                   \
            STORE(v + i, vi);                                                   \
            STORE(grad + i, ZERO());                                            \
            VEC den = ADD(DIV(SQRT(vi), bc2), eps);                             \
            STORE(param + i, SUB(p, DIV(MUL(step, mi), den)));                  \
        }                                                                       \
        return i;                                                               \
    }
ADAM_SIMD(adam_avx512, "avx512f", __m512, 16, _mm512_set1_ps, _mm512_loadu_ps,
          _mm512_storeu_ps, _mm512_add_ps, _mm512_sub_ps, _mm512_mul_ps,
          _mm512_div_ps, _mm512_sqrt_ps, _mm512_setzero_ps)
ADAM_SIMD(adam_avx, "avx", __m256, 8, _mm256_set1_ps, _mm256_loadu_ps,
          _mm256_storeu_ps, _mm256_add_ps, _mm256_sub_ps, _mm256_mul_ps,
          _mm256_div_ps, _mm256_sqrt_ps, _mm256_setzero_ps)
ADAM_SIMD(adam_sse, "sse2", __m128, 4, _mm_set1_ps, _mm_loadu_ps,
          _mm_storeu_ps, _mm_add_ps, _mm_sub_ps, _mm_mul_ps, _mm_div_ps,
          _mm_sqrt_ps, _mm_setzero_ps)
#endif

static void cpu_adam(float *restrict param, float *restrict grad,
                     float *restrict m, float *restrict v, size_t len,
                     const nn_optim_args *s)
{
    size_t done = 0;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f"))
        done = adam_avx512(param, grad, m, v, len, s);
    else if (__builtin_cpu_supports("avx"))
        done = adam_avx(param, grad, m, v, len, s);
    else
        done = adam_sse(param, grad, m, v, len, s);
#endif
    adam_scalar(param, grad, m, v, done, len, s);
}

const nn_backend nn_backend_cpu = {
    .name = "cpu",
    .supports = cpu_supports,
    .gemm = cpu_gemm,
    .bias_rows = cpu_bias_rows,
    .bias_grad = cpu_bias_grad,
    .act_forward = cpu_act_forward,
    .act_backward = cpu_act_backward,
    .dropout_forward = cpu_dropout_forward,
    .dropout_backward = cpu_dropout_backward,
    .softmax_xent = cpu_softmax_xent,
    .mse = cpu_mse,
    .sgd = cpu_sgd,
    .adam = cpu_adam,
};
