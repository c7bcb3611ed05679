/*
 * norm.c - the CPU backend's row and channel kernels: the normalization
 * layers (batchnorm, layernorm) and the softmax layer.
 *
 * Determinism: every reduction runs in one fixed order that does not depend
 * on the thread count. A sum over a contiguous run of floats keeps eight
 * interleaved partial sums (one vector register's worth, so the compiler can
 * vectorize it without reassociating) combined in a fixed tree; sums across
 * rows accumulate in double, row by row. Work is split over the pool by
 * whole channels (batchnorm), rows (layernorm's input gradient, softmax) or
 * columns (layernorm's parameter gradients), so each output value is
 * computed by one part exactly as the serial code would compute it: results
 * are bit-identical for any thread count.
 */

/* As elementwise.c: the full vectorizer cost model for these loops. */
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")

#include "models/cpu/cpu_internal.h"

#include <math.h>
#include <stddef.h>

#define BN_BLOCK 64 /* channels summed together when s == 1 */

static void run_parts(const nn_exec *ex, double work, nn_pool_fn fn, void *arg)
{
    nn_pool_run(nn_cpu_pool_for(ex, work, PAR_MIN_ELEMS), fn, arg);
}

/* ---- fixed-order sums over contiguous floats ---- */

#define LANES 8

static inline float lanes_total(const float *acc, float tail)
{
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) +
           ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

/* sum x[i] */
static float sum_f(const float *restrict x, size_t n)
{
    float acc[LANES] = {0};
    size_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++)
            acc[k] += x[i + k];
    float tail = 0.0f;
    for (; i < n; i++)
        tail += x[i];
    return lanes_total(acc, tail);
}

/* sum (x[i] - m)^2 */
static float sumsq_dev(const float *restrict x, size_t n, float m)
{
    float acc[LANES] = {0};
    size_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++) {
            float d = x[i + k] - m;
            acc[k] += d * d;
        }
    float tail = 0.0f;
    for (; i < n; i++) {
        float d = x[i] - m;
        tail += d * d;
    }
    return lanes_total(acc, tail);
}

/* sum a[i] * b[i] */
static float dot_f(const float *restrict a, const float *restrict b, size_t n)
{
    float acc[LANES] = {0};
    size_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++)
            acc[k] += a[i + k] * b[i + k];
    float tail = 0.0f;
    for (; i < n; i++)
        tail += a[i] * b[i];
    return lanes_total(acc, tail);
}

/* sum dy[i] * (x[i] - m) */
static float dot_dev(const float *restrict dy, const float *restrict x,
                     size_t n, float m)
{
    float acc[LANES] = {0};
    size_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++)
            acc[k] += dy[i + k] * (x[i + k] - m);
    float tail = 0.0f;
    for (; i < n; i++)
        tail += dy[i] * (x[i] - m);
    return lanes_total(acc, tail);
}

/* sum dy[i] * g[i] * (x[i] - m) */
static float dot3_dev(const float *restrict dy, const float *restrict g,
                      const float *restrict x, size_t n, float m)
{
    float acc[LANES] = {0};
    size_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++)
            acc[k] += dy[i + k] * g[i + k] * (x[i + k] - m);
    float tail = 0.0f;
    for (; i < n; i++)
        tail += dy[i] * g[i] * (x[i] - m);
    return lanes_total(acc, tail);
}

/* ---- batchnorm: x (n, c, s), statistics per channel ---- */

typedef struct {
    float *out, *mean, *invstd, *rmean, *rvar;
    const float *x, *gamma, *beta;
    float *dx, *dgamma, *dbeta;
    const float *dout;
    uint32_t n, c, s;
    int training; /* forward: batch statistics; backward: the
                                  statistics were the batch's */
    float momentum, eps;
} bn_job;

/* Batch statistics of one channel from its sums, and the running update as
 * torch's batch_norm_cpu_update_stats_template does it (in double). */
static void bn_set_stats(const bn_job *j, size_t ch, float m, double ss,
                         double count)
{
    j->mean[ch] = m;
    j->invstd[ch] = (float)(1.0 / sqrt(ss / count + (double)j->eps));
    if (j->rmean) {
        double mom = j->momentum;
        j->rmean[ch] = (float)(mom * m + (1.0 - mom) * j->rmean[ch]);
        j->rvar[ch] =
            (float)(mom * (ss / (count - 1.0)) + (1.0 - mom) * j->rvar[ch]);
    }
}

static void bn_eval_stats(const bn_job *j, size_t b, size_t e)
{
    for (size_t ch = b; ch < e; ch++) {
        j->mean[ch] = j->rmean[ch];
        j->invstd[ch] = (float)(1.0 / sqrt((double)j->rvar[ch] + j->eps));
    }
}

/* (C) inputs: channels are contiguous in a row, so sums run down columns
 * BN_BLOCK channels at a time, vectorized across the channels. */
static void bn_forward_cols(const bn_job *j, size_t b, size_t e)
{
    const size_t c = j->c;
    const double count = j->n;
    if (j->training) {
        for (size_t c0 = b; c0 < e; c0 += BN_BLOCK) {
            const size_t w = e - c0 < BN_BLOCK ? e - c0 : BN_BLOCK;
            double acc[BN_BLOCK] = {0};
            float m[BN_BLOCK];
            for (uint32_t i = 0; i < j->n; i++) {
                const float *restrict row = j->x + i * c + c0;
                for (size_t k = 0; k < w; k++)
                    acc[k] += row[k];
            }
            for (size_t k = 0; k < w; k++) {
                m[k] = (float)(acc[k] / count);
                acc[k] = 0.0;
            }
            for (uint32_t i = 0; i < j->n; i++) {
                const float *restrict row = j->x + i * c + c0;
                for (size_t k = 0; k < w; k++) {
                    float d = row[k] - m[k];
                    acc[k] += d * d;
                }
            }
            for (size_t k = 0; k < w; k++)
                bn_set_stats(j, c0 + k, m[k], acc[k], count);
        }
    } else {
        bn_eval_stats(j, b, e);
    }
    float scale[BN_BLOCK], shift[BN_BLOCK];
    for (size_t c0 = b; c0 < e; c0 += BN_BLOCK) {
        const size_t w = e - c0 < BN_BLOCK ? e - c0 : BN_BLOCK;
        for (size_t k = 0; k < w; k++) {
            scale[k] = j->gamma[c0 + k] * j->invstd[c0 + k];
            shift[k] = j->beta[c0 + k] - j->mean[c0 + k] * scale[k];
        }
        for (uint32_t i = 0; i < j->n; i++) {
            const float *restrict row = j->x + i * c + c0;
            float *restrict o = j->out + i * c + c0;
            for (size_t k = 0; k < w; k++)
                o[k] = row[k] * scale[k] + shift[k];
        }
    }
}

/* (C, H, W) inputs: each channel is n runs of s contiguous values. */
static void bn_forward_rows(const bn_job *j, size_t b, size_t e)
{
    const size_t c = j->c, s = j->s;
    const double count = (double)j->n * s;
    if (!j->training)
        bn_eval_stats(j, b, e);
    for (size_t ch = b; ch < e; ch++) {
        if (j->training) {
            double sum = 0.0, ss = 0.0;
            for (uint32_t i = 0; i < j->n; i++)
                sum += sum_f(j->x + (i * c + ch) * s, s);
            float m = (float)(sum / count);
            for (uint32_t i = 0; i < j->n; i++)
                ss += sumsq_dev(j->x + (i * c + ch) * s, s, m);
            bn_set_stats(j, ch, m, ss, count);
        }
        const float scale = j->gamma[ch] * j->invstd[ch];
        const float shift = j->beta[ch] - j->mean[ch] * scale;
        for (uint32_t i = 0; i < j->n; i++) {
            const float *restrict row = j->x + (i * c + ch) * s;
            float *restrict o = j->out + (i * c + ch) * s;
            for (size_t k = 0; k < s; k++)
                o[k] = row[k] * scale + shift;
        }
    }
}

static void bn_forward_part(void *arg, int part, int parts)
{
    const bn_job *j = arg;
    size_t b, e;
    nn_pool_range(j->c, part, parts, j->s == 1 ? PAR_ALIGN : 1, &b, &e);
    if (e <= b)
        return;
    if (j->s == 1)
        bn_forward_cols(j, b, e);
    else
        bn_forward_rows(j, b, e);
}

void nn_cpu_batchnorm_forward(const nn_exec *ex, float *out, float *mean,
                              float *invstd, float *running_mean,
                              float *running_var, const float *x,
                              const float *gamma, const float *beta, uint32_t n,
                              uint32_t c, uint32_t s, int training,
                              float momentum, float eps)
{
    bn_job j = {.out = out,
                .mean = mean,
                .invstd = invstd,
                .rmean = running_mean,
                .rvar = running_var,
                .x = x,
                .gamma = gamma,
                .beta = beta,
                .n = n,
                .c = c,
                .s = s,
                .training = training,
                .momentum = momentum,
                .eps = eps};
    run_parts(ex, (double)n * c * s, bn_forward_part, &j);
}

/* dx = k (dy - a - (x - mean) * invstd * bm), k = gamma * invstd, a and bm
 * the channel's means of dy and dy * xhat; with constant statistics only
 * k dy remains. */
static void bn_backward_cols(const bn_job *j, size_t b, size_t e)
{
    const size_t c = j->c;
    const double count = j->n;
    for (size_t c0 = b; c0 < e; c0 += BN_BLOCK) {
        const size_t w = e - c0 < BN_BLOCK ? e - c0 : BN_BLOCK;
        const float *mean = j->mean + c0, *invstd = j->invstd + c0;
        double sdy[BN_BLOCK] = {0}, sdx[BN_BLOCK] = {0};
        for (uint32_t i = 0; i < j->n; i++) {
            const float *restrict dy = j->dout + i * c + c0;
            const float *restrict x = j->x + i * c + c0;
            for (size_t k = 0; k < w; k++) {
                sdy[k] += dy[k];
                sdx[k] += dy[k] * (x[k] - mean[k]);
            }
        }
        float kk[BN_BLOCK], a[BN_BLOCK], bm[BN_BLOCK];
        for (size_t k = 0; k < w; k++) {
            double dyx = sdx[k] * invstd[k]; /* sum dy * xhat */
            j->dgamma[c0 + k] += (float)dyx;
            j->dbeta[c0 + k] += (float)sdy[k];
            kk[k] = j->gamma[c0 + k] * invstd[k];
            a[k] = j->training ? (float)(sdy[k] / count) : 0.0f;
            bm[k] = j->training ? (float)(dyx / count) * invstd[k] : 0.0f;
        }
        if (!j->dx)
            continue;
        for (uint32_t i = 0; i < j->n; i++) {
            const float *restrict dy = j->dout + i * c + c0;
            const float *restrict x = j->x + i * c + c0;
            float *restrict dx = j->dx + i * c + c0;
            for (size_t k = 0; k < w; k++)
                dx[k] = kk[k] * (dy[k] - a[k] - (x[k] - mean[k]) * bm[k]);
        }
    }
}

static void bn_backward_rows(const bn_job *j, size_t b, size_t e)
{
    const size_t c = j->c, s = j->s;
    const double count = (double)j->n * s;
    for (size_t ch = b; ch < e; ch++) {
        const float m = j->mean[ch], invstd = j->invstd[ch];
        double sdy = 0.0, sdx = 0.0;
        for (uint32_t i = 0; i < j->n; i++) {
            const float *dy = j->dout + (i * c + ch) * s;
            sdy += sum_f(dy, s);
            sdx += dot_dev(dy, j->x + (i * c + ch) * s, s, m);
        }
        double dyx = sdx * invstd;
        j->dgamma[ch] += (float)dyx;
        j->dbeta[ch] += (float)sdy;
        if (!j->dx)
            continue;
        const float k = j->gamma[ch] * invstd;
        const float a = j->training ? (float)(sdy / count) : 0.0f;
        const float bm = j->training ? (float)(dyx / count) * invstd : 0.0f;
        for (uint32_t i = 0; i < j->n; i++) {
            const float *restrict dy = j->dout + (i * c + ch) * s;
            const float *restrict x = j->x + (i * c + ch) * s;
            float *restrict dx = j->dx + (i * c + ch) * s;
            for (size_t q = 0; q < s; q++)
                dx[q] = k * (dy[q] - a - (x[q] - m) * bm);
        }
    }
}

static void bn_backward_part(void *arg, int part, int parts)
{
    const bn_job *j = arg;
    size_t b, e;
    nn_pool_range(j->c, part, parts, j->s == 1 ? PAR_ALIGN : 1, &b, &e);
    if (e <= b)
        return;
    if (j->s == 1)
        bn_backward_cols(j, b, e);
    else
        bn_backward_rows(j, b, e);
}

void nn_cpu_batchnorm_backward(const nn_exec *ex, float *dx, float *dgamma,
                               float *dbeta, const float *dout, const float *x,
                               const float *gamma, const float *mean,
                               const float *invstd, uint32_t n, uint32_t c,
                               uint32_t s, int batch_stats)
{
    bn_job j = {.dx = dx,
                .dgamma = dgamma,
                .dbeta = dbeta,
                .dout = dout,
                .x = x,
                .gamma = gamma,
                .mean = (float *)mean,
                .invstd = (float *)invstd,
                .n = n,
                .c = c,
                .s = s,
                .training = batch_stats};
    run_parts(ex, (double)n * c * s, bn_backward_part, &j);
}

/* ---- layernorm: each row of x (n, d) on its own ---- */

typedef struct {
    float *out, *mean, *rstd, *dx, *dgamma, *dbeta;
    const float *x, *gamma, *beta, *dout;
    const float *cmean, *crstd;
    uint32_t n, d;
    float eps;
} ln_job;

static void ln_forward_part(void *arg, int part, int parts)
{
    const ln_job *j = arg;
    size_t b, e;
    nn_pool_range(j->n, part, parts, 1, &b, &e);
    const size_t d = j->d;
    for (size_t i = b; i < e; i++) {
        const float *restrict x = j->x + i * d;
        float *restrict o = j->out + i * d;
        float m = (float)((double)sum_f(x, d) / (double)d);
        double var = (double)sumsq_dev(x, d, m) / (double)d;
        float r = (float)(1.0 / sqrt(var + (double)j->eps));
        j->mean[i] = m;
        j->rstd[i] = r;
        const float *restrict g = j->gamma, *restrict bt = j->beta;
        for (size_t k = 0; k < d; k++)
            o[k] = (x[k] - m) * r * g[k] + bt[k];
    }
}

void nn_cpu_layernorm_forward(const nn_exec *ex, float *out, float *mean,
                              float *rstd, const float *x, const float *gamma,
                              const float *beta, uint32_t n, uint32_t d,
                              float eps)
{
    ln_job j = {.out = out,
                .mean = mean,
                .rstd = rstd,
                .x = x,
                .gamma = gamma,
                .beta = beta,
                .n = n,
                .d = d,
                .eps = eps};
    run_parts(ex, (double)n * d, ln_forward_part, &j);
}

/* dx = rstd (g dy - a - xhat bm), a and bm the row's means of g dy and
 * g dy xhat. */
static void ln_dx_part(void *arg, int part, int parts)
{
    const ln_job *j = arg;
    size_t b, e;
    nn_pool_range(j->n, part, parts, 1, &b, &e);
    const size_t d = j->d;
    for (size_t i = b; i < e; i++) {
        const float *restrict dy = j->dout + i * d;
        const float *restrict x = j->x + i * d;
        const float *restrict g = j->gamma;
        float *restrict dx = j->dx + i * d;
        const float m = j->cmean[i], r = j->crstd[i];
        float a = dot_f(dy, g, d) / (float)d;
        float bm = dot3_dev(dy, g, x, d, m) * r / (float)d;
        for (size_t k = 0; k < d; k++)
            dx[k] = r * (g[k] * dy[k] - a - (x[k] - m) * r * bm);
    }
}

/* Columns [b, e) of dgamma and dbeta, summed in row order. */
static void ln_param_part(void *arg, int part, int parts)
{
    const ln_job *j = arg;
    size_t b, e;
    nn_pool_range(j->d, part, parts, PAR_ALIGN, &b, &e);
    const size_t d = j->d;
    float *restrict dg = j->dgamma, *restrict db = j->dbeta;
    for (uint32_t i = 0; i < j->n; i++) {
        const float *restrict dy = j->dout + i * d;
        const float *restrict x = j->x + i * d;
        const float m = j->cmean[i], r = j->crstd[i];
        for (size_t k = b; k < e; k++) {
            dg[k] += dy[k] * ((x[k] - m) * r);
            db[k] += dy[k];
        }
    }
}

void nn_cpu_layernorm_backward(const nn_exec *ex, float *dx, float *dgamma,
                               float *dbeta, const float *dout, const float *x,
                               const float *gamma, const float *mean,
                               const float *rstd, uint32_t n, uint32_t d)
{
    ln_job j = {.dx = dx,
                .dgamma = dgamma,
                .dbeta = dbeta,
                .dout = dout,
                .x = x,
                .gamma = gamma,
                .cmean = mean,
                .crstd = rstd,
                .n = n,
                .d = d};
    if (dx)
        run_parts(ex, (double)n * d, ln_dx_part, &j);
    run_parts(ex, (double)n * d, ln_param_part, &j);
}

/* ---- softmax over rows ---- */

typedef struct {
    float *out;
    const float *in, *aux;
    uint32_t n, c;
} sm_job;

static void sm_forward_part(void *arg, int part, int parts)
{
    const sm_job *j = arg;
    size_t b, e;
    nn_pool_range(j->n, part, parts, 1, &b, &e);
    for (size_t i = b; i < e; i++) {
        const float *restrict x = j->in + i * j->c;
        float *restrict y = j->out + i * j->c;
        float max = x[0];
        for (uint32_t k = 1; k < j->c; k++)
            max = x[k] > max ? x[k] : max;
        for (uint32_t k = 0; k < j->c; k++)
            y[k] = expf(x[k] - max);
        float inv = 1.0f / sum_f(y, j->c);
        for (uint32_t k = 0; k < j->c; k++)
            y[k] *= inv;
    }
}

static void sm_backward_part(void *arg, int part, int parts)
{
    const sm_job *j = arg;
    size_t b, e;
    nn_pool_range(j->n, part, parts, 1, &b, &e);
    for (size_t i = b; i < e; i++) {
        const float *restrict dy = j->in + i * j->c;
        const float *restrict y = j->aux + i * j->c;
        float *restrict dx = j->out + i * j->c;
        float s = dot_f(dy, y, j->c);
        for (uint32_t k = 0; k < j->c; k++)
            dx[k] = y[k] * (dy[k] - s);
    }
}

void nn_cpu_softmax_forward(const nn_exec *ex, float *out, const float *in,
                            uint32_t n, uint32_t c)
{
    sm_job j = {.out = out, .in = in, .n = n, .c = c};
    run_parts(ex, (double)n * c, sm_forward_part, &j);
}

void nn_cpu_softmax_backward(const nn_exec *ex, float *din, const float *dout,
                             const float *out, uint32_t n, uint32_t c)
{
    sm_job j = {.out = din, .in = dout, .aux = out, .n = n, .c = c};
    run_parts(ex, (double)n * c, sm_backward_part, &j);
}
