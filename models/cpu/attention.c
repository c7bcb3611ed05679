/*
 * attention.c - the CPU backend's causal multi-head self-attention core
 * (NN_OP_ATTENTION, issue 31), llm.c's decomposition with the products on
 * SGEMM, under a mask (causal, padding) and optional dropout on the
 * probabilities.
 *
 * For each (sequence, head) pair, with Q, K, V its (T, D) slices (rows ld
 * floats apart, so a fused QKV buffer needs no copy) and s = 1/sqrt(D):
 *   forward   S = s Q K^T (SGEMM), P = masked softmax of each row of S
 *             (max subtracted; P is 0 where masked), O = P V (SGEMM);
 *   backward  dP = dO V^T, dS = P (dP - rowsum(P dP)) s (0 where masked),
 *             dQ = dS K, dK = dS^T Q, dV = P^T dO (SGEMMs).
 * A row's visible keys are always a prefix (padding comes last, the causal
 * mask hides later keys), so a row is masked by its count alone.
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
    int causal;
    const int32_t *lens; /* NULL: every key */
    float *keep;         /* NULL: no dropout */
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

/* How many keys row i of pair p sees: the first n (the mask is a prefix:
 * padding is at the end, later keys are masked when causal). */
static uint32_t keys_seen(const attn_job *j, size_t p, uint32_t i)
{
    uint32_t n = j->causal ? i + 1 : j->t;
    if (j->lens) {
        int32_t len = j->lens[p / j->h];
        uint32_t l = len < 0 ? 0 : len > (int32_t)j->t ? j->t : (uint32_t)len;
        n = l < n ? l : n;
    }
    return n;
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

/* Row s (t) becomes the softmax of its first n values, 0 after them (exp(-87)
 * stands in for anything smaller: 1.6e-38 against a sum >= 1); n = 0 leaves
 * a row of zeros. */
static void masked_softmax_row(float *restrict s, uint32_t n, uint32_t t)
{
    if (n) {
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
    }
    if (n < t)
        memset(s + n, 0, (t - n) * sizeof *s);
}

#pragma GCC pop_options

static void attn_forward_part(void *arg, int part, int parts)
{
    const attn_job *j = arg;
    const int t = (int)j->t, d = (int)j->d, ld = (int)j->ld;
    const int c = (int)(j->h * j->d);
    const float s = 1.0f / sqrtf((float)j->d);
    const size_t tt = (size_t)j->t * j->t;
    size_t b, e;
    nn_pool_range((size_t)j->b * j->h, part, parts, 1, &b, &e);
    for (size_t p = b; p < e; p++) {
        const size_t o = qkv_at(j, p);
        float *att = j->att + p * tt;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, t, d, s,
                    j->q + o, ld, j->k + o, ld, 0.0f, att, t);
        for (uint32_t i = 0; i < j->t; i++)
            masked_softmax_row(att + (size_t)i * j->t, keys_seen(j, p, i),
                               j->t);
        const float *use = att;
        if (j->keep) {
            float *restrict pk = j->keep + p * tt;
            for (size_t x = 0; x < tt; x++)
                pk[x] *= att[x];
            use = pk;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t, d, t, 1.0f,
                    use, t, j->v + o, ld, 0.0f, j->out + out_at(j, p), c);
    }
}

void nn_cpu_attention_forward(const nn_exec *ex, float *out, float *att,
                              const float *q, const float *k, const float *v,
                              uint32_t b, uint32_t t, uint32_t h, uint32_t d,
                              uint32_t ld, const nn_attn_mask *m)
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
                  .ld = ld,
                  .causal = m ? m->causal : 1,
                  .lens = m ? m->lens : NULL,
                  .keep = m ? m->keep : NULL};
    double macs = 2.0 * b * h * (double)t * t * d;
    nn_pool_run(nn_cpu_pool_for(ex, macs, PAR_MIN_MACS), attn_forward_part, &j);
}

static void attn_backward_part(void *arg, int part, int parts)
{
    const attn_job *j = arg;
    const int t = (int)j->t, d = (int)j->d, ld = (int)j->ld;
    const int c = (int)(j->h * j->d);
    const float s = 1.0f / sqrtf((float)j->d);
    const size_t tt = (size_t)j->t * j->t;
    size_t b, e;
    nn_pool_range((size_t)j->b * j->h, part, parts, 1, &b, &e);
    for (size_t p = b; p < e; p++) {
        const size_t o = qkv_at(j, p), oo = out_at(j, p);
        const float *att = j->patt + p * tt;
        /* the probabilities out used: P, or P * keep under dropout */
        const float *used = j->keep ? j->keep + p * tt : att;
        float *dat = j->dat + p * tt;
        /* dPk = dO V^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, t, d, 1.0f,
                    j->dout + oo, c, j->v + o, ld, 0.0f, dat, t);
        /* dS = (Pk dPk - P sum_k Pk dPk) s over the keys each row sees
         * (Pk = P without dropout: the softmax's own gradient) */
        for (uint32_t i = 0; i < j->t; i++) {
            const float *restrict pr = att + (size_t)i * j->t;
            const float *restrict pk = used + (size_t)i * j->t;
            float *restrict g = dat + (size_t)i * j->t;
            const uint32_t n = keys_seen(j, p, i);
            float dot = 0.0f;
            for (uint32_t k = 0; k < n; k++)
                dot += pk[k] * g[k];
            for (uint32_t k = 0; k < n; k++)
                g[k] = (pk[k] * g[k] - pr[k] * dot) * s;
            if (n < j->t)
                memset(g + n, 0, (j->t - n) * sizeof *g);
        }
        /* dQ = dS K; dK = dS^T Q; dV = Pk^T dO */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t, d, t, 1.0f,
                    dat, t, j->k + o, ld, 0.0f, j->dq + o, ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, t, d, t, 1.0f, dat,
                    t, j->q + o, ld, 0.0f, j->dk + o, ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, t, d, t, 1.0f,
                    used, t, j->dout + oo, c, 0.0f, j->dv + o, ld);
    }
}

void nn_cpu_attention_backward(const nn_exec *ex, float *dq, float *dk,
                               float *dv, float *datt, const float *dout,
                               const float *q, const float *k, const float *v,
                               const float *att, uint32_t b, uint32_t t,
                               uint32_t h, uint32_t d, uint32_t ld,
                               const nn_attn_mask *m)
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
                  .ld = ld,
                  .causal = m ? m->causal : 1,
                  .lens = m ? m->lens : NULL,
                  .keep = m ? m->keep : NULL};
    double macs = 4.0 * b * h * (double)t * t * d;
    nn_pool_run(nn_cpu_pool_for(ex, macs, PAR_MIN_MACS), attn_backward_part,
                &j);
}

/* NN_OP_ATTENTION's lengths: the first negative value of each row. */
void nn_cpu_seq_lens(const nn_exec *ex, int32_t *lens, const float *x,
                     uint32_t b, uint32_t t)
{
    (void)ex;
    for (uint32_t bi = 0; bi < b; bi++) {
        const float *row = x + (size_t)bi * t;
        uint32_t n = 0;
        while (n < t && !(row[n] < 0.0f))
            n++;
        lens[bi] = (int32_t)n;
    }
}

/* A sequence's pooled positions [first, first + count), count 0 when it
 * is all padding. */
static void pooled(const int32_t *lens, uint32_t bi, uint32_t t,
                   nn_seq_pool_mode mode, uint32_t *first, uint32_t *count)
{
    int32_t len = lens ? lens[bi] : (int32_t)t;
    uint32_t n = len < 0 ? 0 : len > (int32_t)t ? t : (uint32_t)len;
    *first = mode == NN_SEQ_POOL_LAST && n ? n - 1 : 0;
    *count = mode == NN_SEQ_POOL_MEAN ? n : n ? 1 : 0;
}

void nn_cpu_seq_pool_forward(const nn_exec *ex, float *out, const float *in,
                             const int32_t *lens, uint32_t b, uint32_t t,
                             uint32_t c, nn_seq_pool_mode mode)
{
    (void)ex;
    for (uint32_t bi = 0; bi < b; bi++) {
        uint32_t first, n;
        pooled(lens, bi, t, mode, &first, &n);
        float *restrict o = out + (size_t)bi * c;
        memset(o, 0, c * sizeof *o);
        const float *x = in + ((size_t)bi * t + first) * c;
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t k = 0; k < c; k++)
                o[k] += x[(size_t)i * c + k];
        if (n > 1) {
            const float inv = 1.0f / (float)n;
            for (uint32_t k = 0; k < c; k++)
                o[k] *= inv;
        }
    }
}

void nn_cpu_seq_pool_backward(const nn_exec *ex, float *din, const float *dout,
                              const int32_t *lens, uint32_t b, uint32_t t,
                              uint32_t c, nn_seq_pool_mode mode)
{
    (void)ex;
    memset(din, 0, (size_t)b * t * c * sizeof *din);
    for (uint32_t bi = 0; bi < b; bi++) {
        uint32_t first, n;
        pooled(lens, bi, t, mode, &first, &n);
        const float share = n > 1 ? 1.0f / (float)n : 1.0f;
        const float *g = dout + (size_t)bi * c;
        float *x = din + ((size_t)bi * t + first) * c;
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t k = 0; k < c; k++)
                x[(size_t)i * c + k] = g[k] * share;
    }
}
