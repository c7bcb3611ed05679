/*
 * lp.c - the CPU reference for reduced-precision training:
 * fp32 -> bf16 / fp16 casts with round-to-nearest-even done in integer
 * arithmetic (no dependence on the FPU's rounding mode or on the compiler
 * contracting anything), and a GEMM over bf16 / fp16 inputs that widens
 * each value to fp32 exactly and sums each output along k in order in
 * fp32. Both split over the context's pool by output rows (or values), so
 * every output is computed by one part the same way whatever the thread
 * count: results do not depend on it.
 *
 * The CPU trains every precision in fp32 (nn_cpu_lp_ok says no: these
 * kernels are plain loops, far slower than OpenBLAS's SGEMM); they are the
 * reference the CUDA kernels are tested against and what the fake device
 * of the unit tests runs the mixed-precision engine path on.
 */
#include "models/cpu/cpu_internal.h"

#include <string.h>

static uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float f32_from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

uint16_t nn_cpu_bf16_from_f32(float x)
{
    uint32_t u = f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0x7fc0u;
    /* Adding 0x7fff plus the lowest kept bit rounds half to even; a carry
     * into the exponent is the right answer (up to inf). */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float nn_cpu_bf16_to_f32(uint16_t h)
{
    return f32_from_bits((uint32_t)h << 16);
}

uint16_t nn_cpu_f16_from_f32(float x)
{
    const uint32_t u = f32_bits(x);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t ax = u & 0x7fffffffu;
    if (ax > 0x7f800000u)
        return sign | 0x7e00u;
    /* 65520 is halfway between 65504 (odd mantissa) and 2^16: ties round
     * up, so it and everything above become inf. */
    if (ax >= 0x477ff000u)
        return sign | 0x7c00u;
    uint32_t h, rem, half;
    if (ax >= 0x38800000u) { /* >= 2^-14: a normal half */
        h = ((ax >> 23) - 112u) << 10 | (ax & 0x7fffffu) >> 13;
        rem = ax & 0x1fffu;
        half = 0x1000u;
    } else {
        /* A subnormal half counts units of 2^-24: the value is m 2^(e -
         * 150), so the count is m >> (126 - e). Below 2^-25 (shift > 24)
         * everything rounds to zero; float subnormals are far below. */
        const uint32_t e = ax >> 23;
        const uint32_t shift = 126u - e;
        if (e == 0 || shift > 24u)
            return sign;
        const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        h = m >> shift;
        rem = m & ((1u << shift) - 1u);
        half = 1u << (shift - 1u);
    }
    /* A carry out of the mantissa bumps the exponent: still correct. */
    if (rem > half || (rem == half && (h & 1u)))
        h++;
    return sign | (uint16_t)h;
}

float nn_cpu_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) /* inf, NaN (payload kept) */
        return f32_from_bits(sign | 0x7f800000u | m << 13);
    if (e != 0)
        return f32_from_bits(sign | (e + 112u) << 23 | m << 13);
    /* zero or subnormal: m * 2^-24, exact in fp32 */
    float v = (float)m * 0x1p-24f;
    return sign ? -v : v;
}

/* ---- cast ---- */

typedef struct {
    void *dst;
    const float *src;
    size_t len;
    nn_dtype dt;
} cast_job;

static void cast_part(void *arg, int part, int parts)
{
    const cast_job *j = arg;
    size_t b, e;
    nn_pool_range(j->len, part, parts, PAR_ALIGN, &b, &e);
    uint16_t *d = j->dst;
    if (j->dt == NN_DT_BF16)
        for (size_t i = b; i < e; i++)
            d[i] = nn_cpu_bf16_from_f32(j->src[i]);
    else
        for (size_t i = b; i < e; i++)
            d[i] = nn_cpu_f16_from_f32(j->src[i]);
}

void nn_cpu_cast(const nn_exec *ex, void *dst, nn_dtype dt, const float *src,
                 size_t len)
{
    if (dt == NN_DT_F32) {
        memcpy(dst, src, len * sizeof *src);
        return;
    }
    cast_job j = {.dst = dst, .src = src, .len = len, .dt = dt};
    nn_pool_run(nn_cpu_pool_for(ex, (double)len, PAR_MIN_ELEMS), cast_part, &j);
}

/* ---- gemm_lp ---- */

typedef struct {
    float *c;
    const uint16_t *a, *b;
    nn_dtype dt;
    int ta, tb, m, n, k;
    float alpha, beta;
} gemm_lp_job;

static inline float widen(nn_dtype dt, uint16_t h)
{
    return dt == NN_DT_BF16 ? nn_cpu_bf16_to_f32(h) : nn_cpu_f16_to_f32(h);
}

static void gemm_lp_part(void *arg, int part, int parts)
{
    const gemm_lp_job *g = arg;
    const size_t lda = (size_t)(g->ta ? g->m : g->k);
    const size_t ldb = (size_t)(g->tb ? g->k : g->n);
    size_t rb, re;
    nn_pool_range((size_t)g->m, part, parts, 1, &rb, &re);
    for (size_t i = rb; i < re; i++) {
        float *crow = g->c + i * (size_t)g->n;
        for (size_t j = 0; j < (size_t)g->n; j++) {
            float sum = 0.0f;
            for (size_t p = 0; p < (size_t)g->k; p++) {
                uint16_t av = g->ta ? g->a[p * lda + i] : g->a[i * lda + p];
                uint16_t bv = g->tb ? g->b[j * ldb + p] : g->b[p * ldb + j];
                sum += widen(g->dt, av) * widen(g->dt, bv);
            }
            /* beta 0: C is only written, as BLAS does (old NaNs vanish). */
            crow[j] = g->beta == 0.0f ? g->alpha * sum
                                      : g->alpha * sum + g->beta * crow[j];
        }
    }
}

void nn_cpu_gemm_lp(const nn_exec *ex, float *c, const void *a, const void *b,
                    nn_dtype dt, int trans_a, int trans_b, int m, int n, int k,
                    float alpha, float beta)
{
    if (m <= 0 || n <= 0)
        return;
    gemm_lp_job g = {.c = c,
                     .a = a,
                     .b = b,
                     .dt = dt,
                     .ta = trans_a,
                     .tb = trans_b,
                     .m = m,
                     .n = n,
                     .k = k > 0 ? k : 0,
                     .alpha = alpha,
                     .beta = beta};
    nn_pool_run(
        nn_cpu_pool_for(ex, (double)m * n * (k > 0 ? k : 1), PAR_MIN_MACS),
        gemm_lp_part, &g);
}

int nn_cpu_lp_ok(const nn_exec *ex, nn_dtype dt)
{
    (void)ex;
    return dt == NN_DT_F32;
}
