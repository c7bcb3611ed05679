/*
 * optim.c - the CPU backend's optimizer steps (NN_OP_SGD, NN_OP_ADAM): SGD
 * with momentum, Nesterov and weight decay, Adam and AdamW, as torch.optim
 * computes them, each consuming (zeroing) the gradients.
 *
 * A step is split into ranges of parameters over the execution context's
 * pool; every parameter is updated by one part in one fixed order of IEEE
 * operations, so results do not depend on the thread count (the CUDA
 * kernels follow the same order and give the same bits).
 */

/* GCC 12's -O2 only vectorizes loops its "very cheap" model accepts; the
 * elementwise kernels here are worth the full cost model. */
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")

#include "models/cpu/cpu_internal.h"

#include <math.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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
    return p -
           s->step_size * mi / (sqrtf(vi) / s->bias_correction2_sqrt + s->eps);
}

static void adam_scalar(float *restrict param, float *restrict grad,
                        float *restrict m, float *restrict v, size_t from,
                        size_t len, const nn_optim_args *s)
{
    for (size_t i = from; i < len; i++)
        param[i] = adam_one(&param[i], &grad[i], &m[i], &v[i], s);
}

#if defined(__x86_64__)
#define ADAM_SIMD(NAME, TARGET, VEC, W, SET1, LOAD, STORE, ADD, SUB, MUL, DIV, \
                  SQRT, ZERO)                                                  \
    __attribute__((target(TARGET))) static size_t NAME(                        \
        float *param, float *grad, float *m, float *v, size_t len,             \
        const nn_optim_args *s)                                                \
    {                                                                          \
        const VEC wd = SET1(s->weight_decay), b1 = SET1(s->beta1);             \
        const VEC b2 = SET1(s->beta2), ob1 = SET1(s->one_minus_beta1);         \
        const VEC ob2 = SET1(s->one_minus_beta2), step = SET1(s->step_size);   \
        const VEC bc2 = SET1(s->bias_correction2_sqrt), eps = SET1(s->eps);    \
        const VEC ds = SET1(s->decoupled ? s->decay_scale : 1.0f);             \
        size_t i = 0;                                                          \
        for (; i + W <= len; i += W) {                                         \
            VEC p = MUL(LOAD(param + i), ds);                                  \
            VEC g = ADD(LOAD(grad + i), MUL(wd, p));                           \
            VEC mi = ADD(MUL(b1, LOAD(m + i)), MUL(ob1, g));                   \
            VEC vi = ADD(MUL(b2, LOAD(v + i)), MUL(MUL(ob2, g), g));           \
            STORE(m + i, mi);                                                  \
            STORE(v + i, vi);                                                  \
            STORE(grad + i, ZERO());                                           \
            VEC den = ADD(DIV(SQRT(vi), bc2), eps);                            \
            STORE(param + i, SUB(p, DIV(MUL(step, mi), den)));                 \
        }                                                                      \
        return i;                                                              \
    }
ADAM_SIMD(adam_avx512, "avx512f", __m512, 16, _mm512_set1_ps, _mm512_loadu_ps,
          _mm512_storeu_ps, _mm512_add_ps, _mm512_sub_ps, _mm512_mul_ps,
          _mm512_div_ps, _mm512_sqrt_ps, _mm512_setzero_ps)
ADAM_SIMD(adam_avx, "avx", __m256, 8, _mm256_set1_ps, _mm256_loadu_ps,
          _mm256_storeu_ps, _mm256_add_ps, _mm256_sub_ps, _mm256_mul_ps,
          _mm256_div_ps, _mm256_sqrt_ps, _mm256_setzero_ps)
ADAM_SIMD(adam_sse, "sse2", __m128, 4, _mm_set1_ps, _mm_loadu_ps, _mm_storeu_ps,
          _mm_add_ps, _mm_sub_ps, _mm_mul_ps, _mm_div_ps, _mm_sqrt_ps,
          _mm_setzero_ps)
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

/* ---- splitting optimizer steps into ranges ---- */

typedef struct {
    nn_op op; /* NN_OP_SGD or NN_OP_ADAM */
    size_t len;
    float *param, *grad, *s0, *s1; /* s0: sgd's buf or adam's m; s1: v */
    const nn_optim_args *s;
} optim_job;

static void optim_part(void *arg, int part, int parts)
{
    const optim_job *j = arg;
    size_t b, e;
    nn_pool_range(j->len, part, parts, PAR_ALIGN, &b, &e);
    if (e <= b)
        return;
    size_t n = e - b;
    if (j->op == NN_OP_SGD)
        sgd_serial(j->param + b, j->grad + b, j->s0 ? j->s0 + b : NULL, n,
                   j->s);
    else
        adam_serial(j->param + b, j->grad + b, j->s0 + b, j->s1 + b, n, j->s);
}

static void optim_run(const nn_exec *ex, const optim_job *j)
{
    nn_pool_run(nn_cpu_pool_for(ex, (double)j->len, PAR_MIN_ELEMS), optim_part,
                (void *)j);
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

void nn_cpu_sgd(const nn_exec *ex, float *param, float *grad, float *buf,
                size_t len, const nn_optim_args *s)
{
    nn_optim_args tmp;
    optim_run(ex, &(optim_job){.op = NN_OP_SGD,
                               .len = len,
                               .param = param,
                               .grad = grad,
                               .s0 = buf,
                               .s = optim_now(s, &tmp)});
}

void nn_cpu_adam(const nn_exec *ex, float *param, float *grad, float *m,
                 float *v, size_t len, const nn_optim_args *s)
{
    nn_optim_args tmp;
    optim_run(ex, &(optim_job){.op = NN_OP_ADAM,
                               .len = len,
                               .param = param,
                               .grad = grad,
                               .s0 = m,
                               .s1 = v,
                               .s = optim_now(s, &tmp)});
}
