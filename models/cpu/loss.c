/*
 * loss.c - the CPU backend's losses (softmax cross-entropy with and without
 * label smoothing, binary cross-entropy on logits, MSE, Huber) and the sum
 * of squares that gradient clipping takes its norm from.
 *
 * Losses run on the calling thread, row by row, summing in double; with a
 * context that has acc (nn_exec) the sums go there instead of to the caller
 * (loss_result). The sum of squares is split over the pool into ranges
 * whose partial sums are added in part order: the same result for a given
 * thread count.
 */

/* GCC 12's -O2 only vectorizes loops its "very cheap" model accepts; the
 * elementwise kernels here are worth the full cost model. */
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")

#include "models/cpu/cpu_internal.h"

#include <math.h>

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

double nn_cpu_softmax_xent(const nn_exec *ex, float *dlogits, float *probs,
                           uint32_t *correct, const float *logits,
                           const int32_t *labels, uint32_t n, uint32_t c,
                           float grad_scale)
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
                   : probs ? probs + (size_t)i * c
                           : NULL;
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

double nn_cpu_mse(const nn_exec *ex, float *dpred, const float *pred,
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

/* ---- losses added with label smoothing, BCE and Huber ---- */

double nn_cpu_softmax_xent_smooth(const nn_exec *ex, float *dlogits,
                                  uint32_t *correct, const float *logits,
                                  const int32_t *labels, uint32_t n, uint32_t c,
                                  float smoothing, float grad_scale)
{
    double loss = 0.0;
    uint32_t hits = 0;
    const float off = smoothing / (float)c;  /* target off the label */
    const float on = 1.0f - smoothing + off; /* target at the label */
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

double nn_cpu_bce_logits(const nn_exec *ex, float *dlogits, float *probs,
                         uint32_t *correct, const float *logits,
                         const int32_t *labels, uint32_t n, float grad_scale)
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
        loss += (xd > 0.0 ? xd : 0.0) - xd * (double)y + log1p(exp(-fabs(xd)));
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

double nn_cpu_huber(const nn_exec *ex, float *dpred, const float *pred,
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

double nn_cpu_sum_squares(const nn_exec *ex, const float *x, size_t len)
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
