/*
 * embedding.c - the CPU backend's token ops for language models
 * (issue 31): the embedding gather and its scatter-add backward
 * (NN_OP_EMBEDDING), and the per-position softmax cross-entropy with an
 * ignore index (NN_OP_XENT_IGNORE).
 *
 * The gather splits tokens over the pool. The scatter-add splits the
 * embedding's columns: each part adds every token's slice of its columns,
 * in token order, so each gradient element sums in the same order for any
 * thread count (no atomics, no per-thread copies of the table). The loss
 * splits rows; its per-part sums are added in part order, the same result
 * for a given thread count.
 */

/* GCC 12's -O2 only vectorizes loops its "very cheap" model accepts; the
 * row loops here are worth the full cost model. */
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")

#include "models/cpu/cpu_internal.h"

#include <math.h>
#include <string.h>

/* ---- embedding ---- */

typedef struct {
    float *out;
    const float *in;
    const int32_t *ids;
    uint32_t n, c;
} emb_job;

static void emb_forward_part(void *arg, int part, int parts)
{
    const emb_job *j = arg;
    size_t b, e;
    nn_pool_range(j->n, part, parts, 1, &b, &e);
    for (size_t i = b; i < e; i++)
        memcpy(j->out + i * j->c, j->in + (size_t)j->ids[i] * j->c,
               j->c * sizeof(float));
}

void nn_cpu_embedding_forward(const nn_exec *ex, float *out, const int32_t *ids,
                              const float *table, uint32_t n, uint32_t c)
{
    emb_job j = {.out = out, .in = table, .ids = ids, .n = n, .c = c};
    nn_pool_run(nn_cpu_pool_for(ex, (double)n * c, PAR_MIN_ELEMS),
                emb_forward_part, &j);
}

static void emb_backward_part(void *arg, int part, int parts)
{
    const emb_job *j = arg;
    size_t b, e;
    nn_pool_range(j->c, part, parts, PAR_ALIGN, &b, &e);
    if (e <= b)
        return;
    for (size_t i = 0; i < j->n; i++) {
        float *restrict d = j->out + (size_t)j->ids[i] * j->c;
        const float *restrict g = j->in + i * j->c;
        for (size_t k = b; k < e; k++)
            d[k] += g[k];
    }
}

void nn_cpu_embedding_backward(const nn_exec *ex, float *dtable,
                               const float *dout, const int32_t *ids,
                               uint32_t n, uint32_t v, uint32_t c)
{
    (void)v;
    emb_job j = {.out = dtable, .in = dout, .ids = ids, .n = n, .c = c};
    nn_pool_run(nn_cpu_pool_for(ex, (double)n * c, PAR_MIN_ELEMS),
                emb_backward_part, &j);
}

/* ---- cross-entropy with an ignore index ---- */

#define XENT_MAX_PARTS 256 /* more threads than this: one part */

typedef struct {
    float *dlogits;
    const float *logits;
    const int32_t *targets;
    uint32_t n, v;
    int32_t ignore;
    float scale; /* grad_scale / counted */
    double loss[XENT_MAX_PARTS];
} xent_job;

static void xent_part(void *arg, int part, int parts)
{
    xent_job *j = arg;
    size_t b, e;
    nn_pool_range(j->n, part, parts, 1, &b, &e);
    double loss = 0.0;
    const uint32_t v = j->v;
    for (size_t i = b; i < e; i++) {
        const float *restrict x = j->logits + i * v;
        float *restrict d = j->dlogits ? j->dlogits + i * v : NULL;
        int32_t y = j->targets[i];
        if (y == j->ignore) {
            if (d)
                memset(d, 0, v * sizeof *d);
            continue;
        }
        float max = x[0];
        for (uint32_t k = 1; k < v; k++)
            max = x[k] > max ? x[k] : max;
        float sum = 0.0f;
        if (d) {
            for (uint32_t k = 0; k < v; k++) {
                d[k] = expf(x[k] - max);
                sum += d[k];
            }
            float s = j->scale / sum;
            for (uint32_t k = 0; k < v; k++)
                d[k] *= s;
            d[y] -= j->scale;
        } else {
            for (uint32_t k = 0; k < v; k++)
                sum += expf(x[k] - max);
        }
        loss += log((double)sum) + (double)max - (double)x[y];
    }
    j->loss[part] = loss;
}

double nn_cpu_xent_ignore(const nn_exec *ex, float *dlogits, uint32_t *counted,
                          const float *logits, const int32_t *targets,
                          uint32_t n, uint32_t v, int32_t ignore_index,
                          float grad_scale, double weight)
{
    /* Pass one: the count, so that pass two can write the mean's gradient
     * directly. */
    uint32_t cnt = 0;
    for (uint32_t i = 0; i < n; i++)
        cnt += targets[i] != ignore_index;
    xent_job j = {.dlogits = dlogits,
                  .logits = logits,
                  .targets = targets,
                  .n = n,
                  .v = v,
                  .ignore = ignore_index,
                  .scale = cnt ? grad_scale / (float)cnt : 0.0f};
    nn_pool *pool = nn_cpu_pool_for(ex, (double)n * v, PAR_MIN_ELEMS);
    if (nn_pool_threads(pool) > XENT_MAX_PARTS)
        pool = NULL;
    nn_pool_run(pool, xent_part, &j);
    double loss = 0.0;
    for (int p = 0; p < nn_pool_threads(pool); p++)
        loss += j.loss[p];
    /* the mean, then the weight: a caller that multiplied the mean by its
     * windows itself gets the same bits */
    const double result = cnt ? loss / cnt * weight : 0.0;
    if (ex && ex->acc) {
        ex->acc[NN_ACC_LOSS] += result;
        if (counted)
            *counted = 0;
        return 0.0;
    }
    if (counted)
        *counted = cnt;
    return result;
}

/* ---- token ids carried as floats ---- */

void nn_cpu_to_ids(const nn_exec *ex, int32_t *ids, const float *x, size_t len,
                   uint32_t bound, int32_t fallback)
{
    (void)ex;
    for (size_t i = 0; i < len; i++) {
        const float v = x[i];
        ids[i] = v >= 0.0f && v < (float)bound && v == floorf(v) ? (int32_t)v
                                                                 : fallback;
    }
}
