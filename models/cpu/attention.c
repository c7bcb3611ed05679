/*
 * attention.c - the CPU backend's causal multi-head self-attention core
 * (NN_OP_ATTENTION, issue 31), llm.c's decomposition with the products on
 * SGEMM.
 *
 * For each (sequence, head) pair, with Q, K, V its (T, D) slices (rows ld
 * floats apart, so a fused QKV buffer needs no copy) and s = 1/sqrt(D):
 *   forward   S = s Q K^T (SGEMM), P = causal softmax of each row of S
 *             (max subtracted; P is 0 above the diagonal), O = P V (SGEMM);
 *   backward  dP = dO V^T, dS = P (dP - rowsum(P dP)) s (0 above the
 *             diagonal), dQ = dS K, dK = dS^T Q, dV = P^T dO (SGEMMs).
 * The products run over the full (T, T) square: the masked half is
 * multiplied by zeros (twice the minimum work, but one SGEMM call each
 * instead of a triangle of blocks; a blocked triangle is later work).
 *
 * Pairs are split over the pool, each computed by one part with
 * OpenBLAS on that thread, the same way whatever the split, so results do
 * not depend on the thread count.
 */

/* GCC 12's -O2 only vectorizes loops its "very cheap" model accepts; the
 * row loops here are worth the full cost model. */
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")

#include "models/cpu/cpu_internal.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

typedef struct {
    float *out, *att;          /* forward outputs */
    float *dq, *dk, *dv, *dat; /* backward outputs (dat: datt) */
    const float *q, *k, *v, *dout, *patt;
    uint32_t b, t, h, d, ld;
} attn_job;

/* Offsets of pair p's first value in q/k/v (stride ld), in out/dout (stride
 * h d) and in att (t t). */
static size_t qkv_at(const attn_job *j, size_t p)
{
    size_t bi = p / j->h, hi = p % j->h;
    return bi * j->t * j->ld + hi * j->d;
}

static size_t out_at(const attn_job *j, size_t p)
{
    size_t bi = p / j->h, hi = p % j->h;
    return bi * j->t * ((size_t)j->h * j->d) + hi * j->d;
}

/* The softmax's exp, vectorized: exp(x) for x in [-87, 0], as
 * elementwise.c's GELU computes it (fastexp.h; within 1e-7 relative, as
 * expf).
 * libm's expf, a call per value, was a third of the softmax's time.
 * Comparisons keep GCC from vectorizing a loop while trapping math is on;
 * it changes no result, so it is off for the softmax alone. */
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")

#include "models/cpu/fastexp.h"

/* Row i of s (t) becomes the causal softmax of its first i + 1 values
 * (exp(-87) stands in for anything smaller: 1.6e-38 against a sum >= 1). */
static void causal_softmax_row(float *restrict s, uint32_t i, uint32_t t)
{
    const size_t n = (size_t)i + 1;
    float max = s[0];
    for (size_t k = 1; k < n; k++)
        max = s[k] > max ? s[k] : max;
    for (size_t k = 0; k < n; k++) {
        float x = s[k] - max;
        s[k] = exp_nonpos(x < -87.0f ? -87.0f : x);
    }
    float sum = 0.0f;
    for (size_t k = 0; k < n; k++)
        sum += s[k];
    float inv = 1.0f / sum;
    for (size_t k = 0; k < n; k++)
        s[k] *= inv;
    if (i + 1 < t)
        memset(s + i + 1, 0, (t - i - 1) * sizeof *s);
}

#pragma GCC pop_options

static void attn_forward_part(void *arg, int part, int parts)
{
    const attn_job *j = arg;
    const int t = (int)j->t, d = (int)j->d, ld = (int)j->ld;
    const int c = (int)(j->h * j->d);
    const float s = 1.0f / sqrtf((float)j->d);
    size_t b, e;
    nn_pool_range((size_t)j->b * j->h, part, parts, 1, &b, &e);
    for (size_t p = b; p < e; p++) {
        const size_t o = qkv_at(j, p);
        float *att = j->att + p * j->t * j->t;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, t, d, s,
                    j->q + o, ld, j->k + o, ld, 0.0f, att, t);
        for (uint32_t i = 0; i < j->t; i++)
            causal_softmax_row(att + (size_t)i * j->t, i, j->t);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t, d, t, 1.0f,
                    att, t, j->v + o, ld, 0.0f, j->out + out_at(j, p), c);
    }
}

void nn_cpu_attention_forward(const nn_exec *ex, float *out, float *att,
                              const float *q, const float *k, const float *v,
                              uint32_t b, uint32_t t, uint32_t h, uint32_t d,
                              uint32_t ld)
{
    attn_job j = {.out = out,
                  .att = att,
                  .q = q,
                  .k = k,
                  .v = v,
                  .b = b,
                  .t = t,
                  .h = h,
                  .d = d,
                  .ld = ld};
    double macs = 2.0 * b * h * (double)t * t * d;
    nn_pool_run(nn_cpu_pool_for(ex, macs, PAR_MIN_MACS), attn_forward_part, &j);
}

static void attn_backward_part(void *arg, int part, int parts)
{
    const attn_job *j = arg;
    const int t = (int)j->t, d = (int)j->d, ld = (int)j->ld;
    const int c = (int)(j->h * j->d);
    const float s = 1.0f / sqrtf((float)j->d);
    size_t b, e;
    nn_pool_range((size_t)j->b * j->h, part, parts, 1, &b, &e);
    for (size_t p = b; p < e; p++) {
        const size_t o = qkv_at(j, p), oo = out_at(j, p);
        const float *att = j->patt + p * j->t * j->t;
        float *dat = j->dat + p * j->t * j->t;
        /* dP = dO V^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, t, d, 1.0f,
                    j->dout + oo, c, j->v + o, ld, 0.0f, dat, t);
        /* dS = P (dP - sum_k P dP) s over the causal part of each row */
        for (uint32_t i = 0; i < j->t; i++) {
            const float *restrict pr = att + (size_t)i * j->t;
            float *restrict g = dat + (size_t)i * j->t;
            float dot = 0.0f;
            for (uint32_t k = 0; k <= i; k++)
                dot += pr[k] * g[k];
            for (uint32_t k = 0; k <= i; k++)
                g[k] = pr[k] * (g[k] - dot) * s;
            if (i + 1 < j->t)
                memset(g + i + 1, 0, (j->t - i - 1) * sizeof *g);
        }
        /* dQ = dS K; dK = dS^T Q; dV = P^T dO */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t, d, t, 1.0f,
                    dat, t, j->k + o, ld, 0.0f, j->dq + o, ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, t, d, t, 1.0f, dat,
                    t, j->q + o, ld, 0.0f, j->dk + o, ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, t, d, t, 1.0f, att,
                    t, j->dout + oo, c, 0.0f, j->dv + o, ld);
    }
}

void nn_cpu_attention_backward(const nn_exec *ex, float *dq, float *dk,
                               float *dv, float *datt, const float *dout,
                               const float *q, const float *k, const float *v,
                               const float *att, uint32_t b, uint32_t t,
                               uint32_t h, uint32_t d, uint32_t ld)
{
    attn_job j = {.dq = dq,
                  .dk = dk,
                  .dv = dv,
                  .dat = datt,
                  .dout = dout,
                  .q = q,
                  .k = k,
                  .v = v,
                  .patt = att,
                  .b = b,
                  .t = t,
                  .h = h,
                  .d = d,
                  .ld = ld};
    double macs = 4.0 * b * h * (double)t * t * d;
    nn_pool_run(nn_cpu_pool_for(ex, macs, PAR_MIN_MACS), attn_backward_part,
                &j);
}
