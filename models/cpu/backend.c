/*
 * backend_cpu.c - the CPU reference backend: GEMM through OpenBLAS, every
 * other op in plain C written so the compiler can vectorize it (restrict
 * pointers, straight loops, no branches on the hot path where avoidable).
 *
 * Parallelism comes from the execution context's worker pool, not from
 * OpenBLAS's threads (which must be set to 1: its own threading was several
 * times slower than one thread on these small GEMMs): a large GEMM is split
 * into column (or row) blocks, elementwise kernels and optimizer steps into
 * ranges. Every output element is computed by exactly one part, the same way
 * for a given thread count, so runs are bit-reproducible for that count
 * (elementwise results do not depend on it at all).
 */

/* GCC 12's -O2 only vectorizes loops its "very cheap" model accepts; the
 * elementwise kernels here are worth the full cost model. */
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")

#include "models/backend.h"
#include "models/cpu/par.h"
#include "models/cpu/norm.h"
#include "models/cpu/lp.h"

#include "common/ty.h"

#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
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
    [NN_OP_BATCHNORM] = "batchnorm",
    [NN_OP_LAYERNORM] = "layernorm",
    [NN_OP_LEAKY_RELU] = "leaky_relu",
    [NN_OP_SOFTMAX] = "softmax",
    [NN_OP_ADD] = "add",
    [NN_OP_SOFTMAX_XENT_SMOOTH] = "softmax_xent_smooth",
    [NN_OP_BCE_LOGITS] = "bce_logits",
    [NN_OP_HUBER] = "huber",
    [NN_OP_SUM_SQUARES] = "sum_squares",
    [NN_OP_SCALE] = "scale",
    [NN_OP_CONV2D] = "conv2d",
    [NN_OP_MAXPOOL2D] = "maxpool2d",
    [NN_OP_AVGPOOL2D] = "avgpool2d",
    [NN_OP_CAST] = "cast",
    [NN_OP_GEMM_LP] = "gemm_lp",
};
static_assert(TY_ARRAY_LEN(op_names) == NN_OP_COUNT, "every nn_op needs a name");

const char *nn_op_name(nn_op op)
{
    if ((unsigned)op >= NN_OP_COUNT || !op_names[op])
        return "?";
    return op_names[op];
}

static int cpu_supports(nn_op op) { return (unsigned)op < NN_OP_COUNT; }

typedef struct {
    float *c;
    const float *a, *b;
    int ta, tb, m, n, k;
    float alpha, beta;
    int split_n;               /* split C's columns, else its rows */
    int gemv;                  /* one GEMV per row of C (small m, see below) */
} gemm_job;

/* A GEMM of one or two rows against a large B (a predict of a row or two
 * through a big dense layer) is cheaper as GEMVs: OpenBLAS's GEMM packs all
 * of B first, which for a 3136 x 1024 layer costs four times the
 * multiply-adds (bench/gemm.c's shapes; measured with OpenBLAS 0.3.21). At
 * three rows or more, or for a B that fits in the L2 cache, GEMM wins or
 * ties. The choice depends only on the shape, so results stay
 * bit-identical run to run for a given shape and thread count. */
#define GEMV_MAX_ROWS 2
#define GEMV_MIN_B_FLOATS (1u << 20)

static void gemm_part(void *arg, int part, int parts)
{
    const gemm_job *g = arg;
    const int lda = g->ta ? g->m : g->k, ldb = g->tb ? g->k : g->n;
    size_t b, e;
    if (g->gemv) {
        /* C row i (columns [b, e)) = alpha op(B)[:, b:e]^T a_i + beta C. */
        nn_pool_range((size_t)g->n, part, parts, PAR_ALIGN, &b, &e);
        if (e <= b)
            return;
        for (int i = 0; i < g->m; i++) {
            const float *ai = g->a + (size_t)i * g->k;
            float *ci = g->c + (size_t)i * g->n + b;
            /* beta 0 must not read C (GEMM's contract). GEMV scales y by
             * beta instead; Debian's OpenBLAS 0.3.21 writes zeros for 0,
             * but whether 0 x NaN stays NaN is the library's choice, so C
             * is cleared here and the result never depends on it. */
            if (g->beta == 0.0f)
                memset(ci, 0, (e - b) * sizeof *ci);
            if (g->tb) /* B (n, k): rows b..e of B times a_i */
                cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)(e - b), g->k,
                            g->alpha, g->b + b * (size_t)g->k, ldb, ai, 1,
                            g->beta, ci, 1);
            else       /* B (k, n): columns b..e of B, transposed, times a_i */
                cblas_sgemv(CblasRowMajor, CblasTrans, g->k, (int)(e - b),
                            g->alpha, g->b + b, ldb, ai, 1, g->beta, ci, 1);
        }
    } else if (g->split_n) {
        nn_pool_range((size_t)g->n, part, parts, PAR_ALIGN, &b, &e);
        if (e > b)
            cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans,
                        g->tb ? CblasTrans : CblasNoTrans, g->m, (int)(e - b),
                        g->k, g->alpha, g->a, lda,
                        g->b + (g->tb ? b * (size_t)g->k : b), ldb, g->beta,
                        g->c + b, g->n);
    } else {
        nn_pool_range((size_t)g->m, part, parts, PAR_ALIGN, &b, &e);
        if (e > b)
            cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans,
                        g->tb ? CblasTrans : CblasNoTrans, (int)(e - b), g->n,
                        g->k, g->alpha, g->a + (g->ta ? b : b * (size_t)g->k),
                        lda, g->b, ldb, g->beta, g->c + b * (size_t)g->n, g->n);
    }
}

static void cpu_gemm(const nn_exec *ex, float *c, const float *a,
                     const float *b, int trans_a, int trans_b, int m, int n,
                     int k, float alpha, float beta)
{
    gemm_job g = {.c = c, .a = a, .b = b, .ta = trans_a, .tb = trans_b,
                  .m = m, .n = n, .k = k, .alpha = alpha, .beta = beta,
                  .split_n = n >= m,
                  .gemv = !trans_a && m <= GEMV_MAX_ROWS &&
                          (size_t)n * (size_t)k >= GEMV_MIN_B_FLOATS};
    nn_pool_run(nn_cpu_pool_for(ex, (double)m * n * k, PAR_MIN_MACS),
                gemm_part, &g);
}

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

static void cpu_bias_rows(const nn_exec *ex, float *out, const float *bias,
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

static void cpu_bias_grad(const nn_exec *ex, float *db, const float *dout,
                          uint32_t n, uint32_t c)
{
    rows_job j = {.out = db, .in = dout, .n = n, .c = c};
    nn_pool_run(nn_cpu_pool_for(ex, (double)n * c, PAR_MIN_ELEMS),
                bias_grad_part, &j);
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
    /* dout is loaded unconditionally: a load under the condition could
     * trap, so GCC would keep a branch (mispredicted half the time on
     * real activations) instead of vectorizing. */
    for (size_t i = 0; i < len; i++) {
        float g = dout[i];
        din[i] = out[i] > 0.0f ? g : 0.0f;
    }
}

static void act_forward_serial(nn_op op, float *out, const float *in,
                               size_t len)
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

static void act_backward_serial(nn_op op, float *din, const float *dout,
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

/* Serial: the mask consumes the random stream in order. */
static void cpu_dropout_forward(const nn_exec *ex, float *restrict out,
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

/* A loss kernel's sums: added to ex->acc when the context has one (see
 * nn_exec; the host's memory here), else returned with *correct. */
static double loss_result(const nn_exec *ex, double loss, uint32_t hits,
                          uint32_t *correct)
{
    if (ex && ex->acc) {
        ex->acc[NN_ACC_LOSS] += loss;
        ex->acc[NN_ACC_CORRECT] += (double)hits;
        loss = 0.0;
        hits = 0;
    }
    if (correct)
        *correct = hits;
    return loss;
}

static double cpu_softmax_xent(const nn_exec *ex, float *dlogits,
                               float *probs, uint32_t *correct,
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
    if (!labels) {
        if (correct)
            *correct = 0;
        return 0.0;
    }
    return loss_result(ex, loss, hits, correct);
}

static double cpu_mse(const nn_exec *ex, float *dpred, const float *pred,
                      const float *target, size_t len, float grad_scale)
{
    double sum = 0.0;
    for (size_t i = 0; i < len; i++) {
        float d = pred[i] - target[i];
        sum += (double)d * (double)d;
        if (dpred)
            dpred[i] = 2.0f * d * grad_scale;
    }
    return loss_result(ex, sum, 0, NULL);
}

static void sgd_serial(float *restrict param, float *restrict grad,
                    float *restrict buf, size_t len, const nn_optim_args *s)
{
    const float lr = s->lr, wd = s->weight_decay, mom = s->momentum;
    if (buf && s->nesterov) {
        for (size_t i = 0; i < len; i++) {
            float g = grad[i] + wd * param[i];
            float b = mom * buf[i] + g;
            buf[i] = b;
            param[i] -= lr * (g + mom * b);
            grad[i] = 0.0f;
        }
    } else if (buf) {
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
    float p = s->decoupled ? *param * s->decay_scale : *param;
    float g = *grad + s->weight_decay * p;
    float mi = s->beta1 * *m + s->one_minus_beta1 * g;
    float vi = s->beta2 * *v + s->one_minus_beta2 * g * g;
    *m = mi;
    *v = vi;
    *grad = 0.0f;
    return p - s->step_size * mi /
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
        const VEC ds = SET1(s->decoupled ? s->decay_scale : 1.0f);              \
        size_t i = 0;                                                           \
        for (; i + W <= len; i += W) {                                          \
            VEC p = MUL(LOAD(param + i), ds);                                   \
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

static void adam_serial(float *restrict param, float *restrict grad,
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

/* ---- splitting elementwise kernels and optimizer steps into ranges ---- */

typedef struct {
    nn_op op;
    int backward;
    size_t len;
    float *o0, *o1, *o2, *o3;
    const float *i0, *i1, *i2;
    const nn_optim_args *s;
    float alpha;               /* scale */
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
    case NN_OP_SGD:
        sgd_serial(j->o0 + b, j->o1 + b, AT(j->o2, b), n, j->s);
        break;
    case NN_OP_ADAM:
        adam_serial(j->o0 + b, j->o1 + b, j->o2 + b, j->o3 + b, n, j->s);
        break;
    case NN_OP_SCALE: {
        float *restrict x = j->o0 + b;
        const float a = j->alpha;
        for (size_t i = 0; i < n; i++)
            x[i] *= a;
        break;
    }
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

static void cpu_act_forward(const nn_exec *ex, nn_op op, float *out,
                            const float *in, size_t len)
{
    ew_run(ex, &(ew_job){.op = op, .len = len, .o0 = out, .i0 = in});
}

static void cpu_act_backward(const nn_exec *ex, nn_op op, float *din,
                             const float *dout, const float *in,
                             const float *out, size_t len)
{
    ew_run(ex, &(ew_job){.op = op, .backward = 1, .len = len, .o0 = din,
                         .i0 = dout, .i1 = in, .i2 = out});
}

static void cpu_dropout_backward(const nn_exec *ex, float *din,
                                 const float *dout, const float *mask,
                                 size_t len)
{
    ew_run(ex, &(ew_job){.op = NN_OP_DROPOUT, .len = len, .o0 = din,
                         .i0 = dout, .i1 = mask});
}

/* s with the values s->dyn holds (read now, when the kernel runs), in
 * *tmp; s itself without dyn. */
static const nn_optim_args *optim_now(const nn_optim_args *s,
                                      nn_optim_args *tmp)
{
    if (!s->dyn)
        return s;
    *tmp = *s;
    tmp->lr = s->dyn[NN_OPTIM_DYN_LR];
    tmp->step_size = s->dyn[NN_OPTIM_DYN_STEP_SIZE];
    tmp->bias_correction2_sqrt = s->dyn[NN_OPTIM_DYN_BIAS_CORRECTION2_SQRT];
    tmp->decay_scale = s->dyn[NN_OPTIM_DYN_DECAY_SCALE];
    return tmp;
}

static void cpu_sgd(const nn_exec *ex, float *param, float *grad, float *buf,
                    size_t len, const nn_optim_args *s)
{
    nn_optim_args tmp;
    ew_run(ex, &(ew_job){.op = NN_OP_SGD, .len = len, .o0 = param, .o1 = grad,
                         .o2 = buf, .s = optim_now(s, &tmp)});
}

static void cpu_adam(const nn_exec *ex, float *param, float *grad, float *m,
                     float *v, size_t len, const nn_optim_args *s)
{
    nn_optim_args tmp;
    ew_run(ex, &(ew_job){.op = NN_OP_ADAM, .len = len, .o0 = param,
                         .o1 = grad, .o2 = m, .o3 = v,
                         .s = optim_now(s, &tmp)});
}

/* ---- losses added with label smoothing, BCE and Huber ---- */

static double cpu_softmax_xent_smooth(const nn_exec *ex, float *dlogits,
                                      uint32_t *correct, const float *logits,
                                      const int32_t *labels, uint32_t n,
                                      uint32_t c, float smoothing,
                                      float grad_scale)
{
    double loss = 0.0;
    uint32_t hits = 0;
    const float off = smoothing / (float)c;       /* target off the label */
    const float on = 1.0f - smoothing + off;      /* target at the label */
    for (uint32_t i = 0; i < n; i++) {
        const float *x = logits + (size_t)i * c;
        uint32_t arg = 0;
        float max = x[0];
        for (uint32_t j = 1; j < c; j++)
            if (x[j] > max) {
                max = x[j];
                arg = j;
            }
        float sum = 0.0f;
        double xsum = 0.0;
        for (uint32_t j = 0; j < c; j++) {
            sum += expf(x[j] - max);
            xsum += (double)x[j];
        }
        int32_t y = labels[i];
        hits += (uint32_t)y == arg;
        /* -sum_j t_j log p_j with log p_j = x_j - lse and sum_j t_j = 1. */
        double lse = log((double)sum) + (double)max;
        loss += lse - (1.0 - (double)smoothing) * (double)x[y] -
                (double)smoothing / (double)c * xsum;
        if (dlogits) {
            float *d = dlogits + (size_t)i * c;
            float inv = 1.0f / sum;
            for (uint32_t j = 0; j < c; j++)
                d[j] = (expf(x[j] - max) * inv - off) * grad_scale;
            d[y] = (expf(x[y] - max) * inv - on) * grad_scale;
        }
    }
    return loss_result(ex, loss, hits, correct);
}

/* p = sigmoid(x) without overflow for any x. */
static inline float sigmoid_one(float x)
{
    if (x >= 0.0f)
        return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

static double cpu_bce_logits(const nn_exec *ex, float *dlogits, float *probs,
                             uint32_t *correct, const float *logits,
                             const int32_t *labels, uint32_t n,
                             float grad_scale)
{
    double loss = 0.0;
    uint32_t hits = 0;
    for (uint32_t i = 0; i < n; i++) {
        float x = logits[i];
        float p = sigmoid_one(x);
        if (probs) {
            probs[2 * (size_t)i] = 1.0f - p;
            probs[2 * (size_t)i + 1] = p;
        }
        if (!labels)
            continue;
        float y = labels[i] ? 1.0f : 0.0f;
        hits += (p > 0.5f) == (labels[i] != 0);
        double xd = x;
        loss += (xd > 0.0 ? xd : 0.0) - xd * (double)y +
                log1p(exp(-fabs(xd)));
        if (dlogits)
            dlogits[i] = (p - y) * grad_scale;
    }
    if (!labels) {
        if (correct)
            *correct = 0;
        return 0.0;
    }
    return loss_result(ex, loss, hits, correct);
}

static double cpu_huber(const nn_exec *ex, float *dpred, const float *pred,
                        const float *target, size_t len, float delta,
                        float grad_scale)
{
    double sum = 0.0;
    for (size_t i = 0; i < len; i++) {
        float d = pred[i] - target[i];
        float a = fabsf(d);
        if (a < delta)
            sum += 0.5 * (double)d * (double)d;
        else
            sum += (double)delta * ((double)a - 0.5 * (double)delta);
        if (dpred) {
            float g = d < -delta ? -delta : d > delta ? delta : d;
            dpred[i] = g * grad_scale;
        }
    }
    return loss_result(ex, sum, 0, NULL);
}

#define SUMSQ_MAX_PARTS 64

typedef struct {
    const float *x;
    size_t len;
    double partial[SUMSQ_MAX_PARTS];
} sumsq_job;

/* Four accumulators in a fixed order: the sum depends only on the range. */
static void sumsq_part(void *arg, int part, int parts)
{
    sumsq_job *j = arg;
    size_t b, e;
    nn_pool_range(j->len, part, parts, PAR_ALIGN, &b, &e);
    double acc[4] = {0, 0, 0, 0};
    size_t i = b;
    for (; i + 4 <= e; i += 4)
        for (int k = 0; k < 4; k++)
            acc[k] += (double)j->x[i + k] * (double)j->x[i + k];
    for (; i < e; i++)
        acc[0] += (double)j->x[i] * (double)j->x[i];
    j->partial[part] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

static double cpu_sum_squares(const nn_exec *ex, const float *x, size_t len)
{
    sumsq_job j = {.x = x, .len = len};
    nn_pool *pool = nn_cpu_pool_for(ex, (double)len, PAR_MIN_ELEMS);
    if (nn_pool_threads(pool) > SUMSQ_MAX_PARTS)
        pool = NULL;
    const int parts = nn_pool_threads(pool);
    nn_pool_run(pool, sumsq_part, &j);
    double sum = 0.0;
    for (int p = 0; p < parts; p++)
        sum += j.partial[p];
    return sum;
}

static void cpu_scale(const nn_exec *ex, float *x, size_t len, float alpha)
{
    ew_run(ex, &(ew_job){.op = NN_OP_SCALE, .len = len, .o0 = x,
                         .alpha = alpha});
}
/* Convolution and pooling: backend_cpu_conv.c. */
size_t nn_cpu_conv2d_work(const nn_conv_desc *d);
void nn_cpu_conv2d_forward(const nn_exec *ex, float *out, const float *in,
                           const float *weight, const float *bias, uint32_t n,
                           const nn_conv_desc *d);
void nn_cpu_conv2d_backward(const nn_exec *ex, float *din, float *dweight,
                            float *dbias, const float *dout, const float *in,
                            const float *weight, uint32_t n,
                            const nn_conv_desc *d);
void nn_cpu_pool2d_forward(const nn_exec *ex, nn_op op, float *out,
                           int32_t *argmax, const float *in, uint32_t n,
                           const nn_conv_desc *d);
void nn_cpu_pool2d_backward(const nn_exec *ex, nn_op op, float *din,
                            const float *dout, const int32_t *argmax,
                            uint32_t n, const nn_conv_desc *d);

/* ---- memory: the host's ---- */

static void *cpu_alloc(const nn_exec *ex, size_t bytes)
{
    (void)ex;
    return aligned_alloc(256, (bytes + 255) / 256 * 256 + (bytes ? 0 : 256));
}

static void cpu_release(const nn_exec *ex, void *p)
{
    (void)ex;
    free(p);
}

static void cpu_copy(const nn_exec *ex, void *dst, const void *src,
                     size_t bytes)
{
    (void)ex;
    if (bytes && dst != src)
        memmove(dst, src, bytes);
}

static void cpu_zero(const nn_exec *ex, void *dst, size_t bytes)
{
    (void)ex;
    if (bytes)
        memset(dst, 0, bytes);
}

static ty_status cpu_status(const nn_exec *ex, ty_err *err)
{
    (void)ex;
    (void)err;
    return TY_OK;
}

const nn_backend nn_backend_cpu = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_copy,
    .download = cpu_copy,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .status = cpu_status,
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
    .batchnorm_forward = cpu_batchnorm_forward,
    .batchnorm_backward = cpu_batchnorm_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .leaky_relu_forward = cpu_leaky_relu_forward,
    .leaky_relu_backward = cpu_leaky_relu_backward,
    .softmax_forward = cpu_softmax_forward,
    .softmax_backward = cpu_softmax_backward,
    .add = cpu_add,
    .softmax_xent_smooth = cpu_softmax_xent_smooth,
    .bce_logits = cpu_bce_logits,
    .huber = cpu_huber,
    .sum_squares = cpu_sum_squares,
    .scale = cpu_scale,
    .conv2d_work = nn_cpu_conv2d_work,
    .conv2d_forward = nn_cpu_conv2d_forward,
    .conv2d_backward = nn_cpu_conv2d_backward,
    .pool2d_forward = nn_cpu_pool2d_forward,
    .pool2d_backward = nn_cpu_pool2d_backward,
    .cast = nn_cpu_cast,                 /* backend_cpu_lp.c */
    .gemm_lp = nn_cpu_gemm_lp,
    .lp_ok = nn_cpu_lp_ok,
};
