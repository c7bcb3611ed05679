/*
 * kvcache.c - the CPU backend's paged key/value cache for decoding
 * (NN_OP_KV_CACHE, models/backend.h): storing a step's keys and values in
 * their sequences' blocks, and one query's causal attention over its
 * sequence's cached positions.
 *
 * Each row is computed alone, in a fixed order (the keys in position
 * order, the softmax's sum likewise), so a row's numbers do not depend on
 * which other rows share the step: the same bits alone or batched. Rows
 * are split over the pool.
 */
#include "models/cpu/cpu_internal.h"

#include <math.h>

#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#include <string.h>

/* Where position j of the sequence whose table is tab lives. */
static size_t slot_of(const int32_t *tab, int32_t j, uint32_t bt, uint32_t c)
{
    return ((size_t)tab[(uint32_t)j / bt] * bt + (uint32_t)j % bt) * c;
}

void nn_cpu_kv_store(const nn_exec *ex, float *kc, float *vc, const float *k,
                     const float *v, uint32_t ld, const int32_t *tables,
                     uint32_t tstride, const int32_t *pos, uint32_t n,
                     uint32_t c, uint32_t bt)
{
    (void)ex;
    for (uint32_t r = 0; r < n; r++) {
        const size_t at = slot_of(tables + (size_t)r * tstride, pos[r], bt, c);
        memcpy(kc + at, k + (size_t)r * ld, c * sizeof *kc);
        memcpy(vc + at, v + (size_t)r * ld, c * sizeof *vc);
    }
}

typedef struct {
    float *out;
    const float *q, *kc, *vc;
    const int32_t *tables, *pos;
    uint32_t ldq, tstride, n, h, d, bt;
} kv_job;

/* q . k over d values: 8 partial sums (value e into sum e % 8, in
 * order), then d's tail, then the sums pairwise; the same order on every
 * CPU, and one the compiler can keep in a vector. */
static float dot_d(const float *q, const float *k, uint32_t d)
{
    float l[8] = {0};
    const uint32_t dv = d / 8 * 8;
    for (uint32_t e = 0; e < dv; e += 8)
        for (uint32_t i = 0; i < 8; i++)
            l[i] += q[e + i] * k[e + i];
    float tail = 0.0f;
    for (uint32_t e = dv; e < d; e++)
        tail += q[e] * k[e];
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7])) +
           tail;
}

/* Row r, head hi, in two passes over the cached positions (no buffer the
 * length of the sequence): the scores' maximum, then the exponentials'
 * sum and the weighted values, divided by the sum at the end. */
static void kv_row_head(const kv_job *j, uint32_t r, uint32_t hi)
{
    const uint32_t c = j->h * j->d, d = j->d;
    const int32_t *tab = j->tables + (size_t)r * j->tstride;
    const int32_t last = j->pos[r];
    const float *q = j->q + (size_t)r * j->ldq + (size_t)hi * d;
    const float scale = 1.0f / sqrtf((float)d);
    float max = -INFINITY;
    for (int32_t p = 0; p <= last; p++) {
        const float *k = j->kc + slot_of(tab, p, j->bt, c) + (size_t)hi * d;
        const float s = dot_d(q, k, d) * scale;
        max = s > max ? s : max;
    }
    float *o = j->out + (size_t)r * c + (size_t)hi * d;
    memset(o, 0, d * sizeof *o);
    float sum = 0.0f;
    for (int32_t p = 0; p <= last; p++) {
        const size_t at = slot_of(tab, p, j->bt, c) + (size_t)hi * d;
        const float w = expf(dot_d(q, j->kc + at, d) * scale - max);
        sum += w;
        for (uint32_t e = 0; e < d; e++)
            o[e] += w * j->vc[at + e];
    }
    const float inv = 1.0f / sum;
    for (uint32_t e = 0; e < d; e++)
        o[e] *= inv;
}

static void kv_part(void *arg, int part, int parts)
{
    const kv_job *j = arg;
    size_t b, e;
    nn_pool_range((size_t)j->n * j->h, part, parts, 1, &b, &e);
    for (size_t w = b; w < e; w++)
        kv_row_head(j, (uint32_t)(w / j->h), (uint32_t)(w % j->h));
}

void nn_cpu_kv_attention(const nn_exec *ex, float *out, const float *q,
                         uint32_t ldq, const float *kc, const float *vc,
                         const int32_t *tables, uint32_t tstride,
                         const int32_t *pos, uint32_t n, uint32_t h, uint32_t d,
                         uint32_t bt)
{
    kv_job j = {.out = out,
                .q = q,
                .kc = kc,
                .vc = vc,
                .tables = tables,
                .pos = pos,
                .ldq = ldq,
                .tstride = tstride,
                .n = n,
                .h = h,
                .d = d,
                .bt = bt};
    double work = 0.0;
    for (uint32_t r = 0; r < n; r++)
        work += 2.0 * ((double)pos[r] + 1) * h * d;
    nn_pool_run(nn_cpu_pool_for(ex, work, PAR_MIN_MACS), kv_part, &j);
}
