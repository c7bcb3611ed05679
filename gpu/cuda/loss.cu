/*
 * loss.cu - the CUDA backend's losses (softmax cross-entropy with
 * and without label smoothing, binary cross-entropy on logits, MSE, Huber)
 * and the sum of squares, with the reduction that brings their sums to the
 * host, or (nn_exec.acc) into device memory without waiting.
 *
 * Sums: every block adds its share in double (each thread over a fixed
 * stride, then a fixed tree over the block) into its slot of the context's
 * partials; one block adds the partials in a fixed tree (see
 * cuda_internal.h). The block count depends only on the size, so a loss
 * has the same bits run after run on one device; it differs from the CPU's
 * order, and so in the last bits. Counts of correct rows travel as doubles
 * (exact below 2^53). The per-row formulas are models/cpu/loss.c's.
 */
#include "gpu/cuda/kernels.cuh"

#define RED_THREADS 256
#define RED_PER_THREAD 4 /* values per thread before a new block is worth it */

/* out[k] = (or += when add) the sum of set k's partials. */
static __global__ void finish_sums_kernel(double *out, const double *partials,
                                          unsigned nparts, int nsums, int add)
{
    __shared__ double sh[32];
    for (int k = 0; k < nsums; k++) {
        double v = 0.0;
        for (unsigned i = threadIdx.x; i < nparts; i += blockDim.x)
            v += partials[(size_t)k * NN_CUDA_PARTIALS + i];
        v = nn_cuda_block_sum(v, sh);
        if (threadIdx.x == 0)
            out[k] = add ? out[k] + v : v;
    }
}

/* A loss's sums into ex->acc (see nn_exec): one thread adds each after
 * the fixed tree, so the order is the kernels' and nothing waits. Returns
 * 1 when ex has acc (the sums went there), else 0. */
static int finish_sums_acc(const nn_exec *ex, unsigned nparts, int nsums)
{
    if (!ex || !ex->acc)
        return 0;
    nn_cuda_ctx *c = nn_cuda_begin(ex);
    if (!c)
        return 1;
    finish_sums_kernel<<<1, 1024, 0, c->stream>>>(ex->acc, nn_cuda_partials(c),
                                                  nparts, nsums, 1);
    (void)nn_cuda_launched(ex, "finish_sums_kernel");
    return 1;
}

void nn_cuda_finish_sums(const nn_exec *ex, unsigned nparts, int nsums,
                         double *out)
{
    for (int k = 0; k < nsums; k++)
        out[k] = 0.0;
    nn_cuda_ctx *c = nn_cuda_begin(ex);
    if (!c)
        return;
    finish_sums_kernel<<<1, 1024, 0, c->stream>>>(
        c->d_scalars, nn_cuda_partials(c), nparts, nsums, 0);
    if (!nn_cuda_launched(ex, "finish_sums_kernel") ||
        !NN_CUDA_OK(ex, cudaMemcpyAsync(c->h_scalars, c->d_scalars,
                                        (size_t)nsums * sizeof(double),
                                        cudaMemcpyDeviceToHost, c->stream)) ||
        !NN_CUDA_OK(ex, cudaStreamSynchronize(c->stream)))
        return;
    for (int k = 0; k < nsums; k++)
        out[k] = c->h_scalars[k];
}

/* Blocks for a sum over len values: depends only on len. */
static unsigned red_grid(size_t len)
{
    size_t per = (size_t)RED_THREADS * RED_PER_THREAD;
    size_t g = (len + per - 1) / per;
    return g > NN_CUDA_PARTIALS ? NN_CUDA_PARTIALS : g ? (unsigned)g : 1u;
}

/* ---- softmax cross-entropy, plain and smoothed ---- */

typedef struct {
    float *dlogits, *probs; /* (n, c) or NULL */
    const float *logits;    /* (n, c) */
    const int32_t *labels;  /* (n) or NULL: probs only */
    uint32_t n, c;
    float grad_scale;
    int smooth; /* label smoothing (labels required) */
    float smoothing;
} xent_args;

/* Rows blockIdx.x, + gridDim.x, ...: one block per row at a time. Thread 0
 * adds each row's loss and hit in row order into this block's partials. */
static __global__ void softmax_xent_kernel(double *partials, xent_args a)
{
    __shared__ float sh_f[32];
    __shared__ uint32_t sh_i[32];
    __shared__ double sh_d[32];
    const uint32_t c = a.c;
    double loss = 0.0, hits = 0.0;
    for (uint32_t r = blockIdx.x; r < a.n; r += gridDim.x) {
        const float *x = a.logits + (size_t)r * c;
        float best = -INFINITY;
        uint32_t arg = UINT32_MAX;
        /* Each thread's first maximum over its values, then the block's
         * lowest index among equal maxima: the CPU's argmax. */
        for (uint32_t j = threadIdx.x; j < c; j += blockDim.x)
            if (arg == UINT32_MAX || x[j] > best) {
                best = x[j];
                arg = j;
            }
        float max = nn_cuda_block_argmax(best, arg, &arg, sh_f, sh_i);

        float part = 0.0f;
        double xpart = 0.0;
        for (uint32_t j = threadIdx.x; j < c; j += blockDim.x) {
            part += expf(x[j] - max);
            if (a.smooth)
                xpart += (double)x[j];
        }
        const float sum = nn_cuda_block_sum(part, sh_f);
        const double xsum = a.smooth ? nn_cuda_block_sum(xpart, sh_d) : 0.0;
        const float inv = 1.0f / sum;
        const int32_t y = a.labels ? a.labels[r] : -1;

        if (a.probs) {
            float *p = a.probs + (size_t)r * c;
            for (uint32_t j = threadIdx.x; j < c; j += blockDim.x)
                p[j] = expf(x[j] - max) * inv;
        }
        if (a.dlogits) {
            float *d = a.dlogits + (size_t)r * c;
            const float gs = a.grad_scale;
            if (a.smooth) {
                const float off = a.smoothing / (float)c;
                const float on = 1.0f - a.smoothing + off;
                for (uint32_t j = threadIdx.x; j < c; j += blockDim.x)
                    d[j] = (expf(x[j] - max) * inv -
                            ((int32_t)j == y ? on : off)) *
                           gs;
            } else {
                for (uint32_t j = threadIdx.x; j < c; j += blockDim.x) {
                    float v = expf(x[j] - max) * inv * gs;
                    d[j] = (int32_t)j == y ? v - gs : v;
                }
            }
        }
        if (threadIdx.x == 0 && a.labels) {
            /* A label out of range is the caller's bug; it shows as NaN. */
            double xy = (uint32_t)y < c ? (double)x[y] : (double)NAN;
            double lse = log((double)sum) + (double)max;
            if (a.smooth)
                loss += lse - (1.0 - (double)a.smoothing) * xy -
                        (double)a.smoothing / (double)c * xsum;
            else
                loss += lse - xy;
            hits += (uint32_t)y == arg ? 1.0 : 0.0;
        }
    }
    if (threadIdx.x == 0 && partials) {
        partials[blockIdx.x] = loss;
        partials[NN_CUDA_PARTIALS + blockIdx.x] = hits;
    }
}

static double xent_run(const nn_exec *ex, uint32_t *correct, const xent_args *a)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !a->n || !a->c) {
        if (correct)
            *correct = 0;
        return 0.0;
    }
    unsigned grid = a->n > NN_CUDA_PARTIALS ? NN_CUDA_PARTIALS : a->n;
    softmax_xent_kernel<<<grid, nn_cuda_row_threads(a->c, 256), 0, x->stream>>>(
        a->labels ? nn_cuda_partials(x) : NULL, *a);
    if (!nn_cuda_launched(ex, "softmax_xent_kernel") || !a->labels) {
        /* Probs only: nothing to wait for. */
        if (correct)
            *correct = 0;
        return 0.0;
    }
    if (correct)
        *correct = 0;
    if (finish_sums_acc(ex, grid, 2))
        return 0.0;
    double s[2];
    nn_cuda_finish_sums(ex, grid, 2, s);
    if (correct)
        *correct = (uint32_t)s[1];
    return s[0];
}

double nn_cuda_softmax_xent(const nn_exec *ex, float *dlogits, float *probs,
                            uint32_t *correct, const float *logits,
                            const int32_t *labels, uint32_t n, uint32_t c,
                            float grad_scale)
{
    xent_args a = {};
    a.dlogits = labels ? dlogits : NULL;
    a.probs = probs;
    a.logits = logits;
    a.labels = labels;
    a.n = n;
    a.c = c;
    a.grad_scale = grad_scale;
    return xent_run(ex, correct, &a);
}

double nn_cuda_softmax_xent_smooth(const nn_exec *ex, float *dlogits,
                                   uint32_t *correct, const float *logits,
                                   const int32_t *labels, uint32_t n,
                                   uint32_t c, float smoothing,
                                   float grad_scale)
{
    xent_args a = {};
    a.dlogits = dlogits;
    a.logits = logits;
    a.labels = labels;
    a.n = n;
    a.c = c;
    a.grad_scale = grad_scale;
    a.smooth = 1;
    a.smoothing = smoothing;
    return xent_run(ex, correct, &a);
}

/* ---- binary cross-entropy on logits ---- */

__device__ __forceinline__ float sigmoid_one(float x)
{
    if (x >= 0.0f)
        return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

// logits, labels, dlogits (n); probs (n, 2)
static __global__ void bce_kernel(double *partials, float *dlogits,
                                  float *probs, const float *logits,
                                  const int32_t *labels, uint32_t n,
                                  float grad_scale)
{
    __shared__ double sh[32];
    double loss = 0.0, hits = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = logits[i];
        float p = sigmoid_one(x);
        if (probs) {
            probs[2 * i] = 1.0f - p;
            probs[2 * i + 1] = p;
        }
        if (!labels)
            continue;
        float y = labels[i] ? 1.0f : 0.0f;
        hits += (p > 0.5f) == (labels[i] != 0) ? 1.0 : 0.0;
        double xd = x;
        loss += (xd > 0.0 ? xd : 0.0) - xd * (double)y + log1p(exp(-fabs(xd)));
        if (dlogits)
            dlogits[i] = (p - y) * grad_scale;
    }
    if (!partials)
        return;
    loss = nn_cuda_block_sum(loss, sh);
    hits = nn_cuda_block_sum(hits, sh);
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = loss;
        partials[NN_CUDA_PARTIALS + blockIdx.x] = hits;
    }
}

double nn_cuda_bce_logits(const nn_exec *ex, float *dlogits, float *probs,
                          uint32_t *correct, const float *logits,
                          const int32_t *labels, uint32_t n, float grad_scale)
{
    if (correct)
        *correct = 0;
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !n)
        return 0.0;
    unsigned grid = red_grid(n);
    bce_kernel<<<grid, RED_THREADS, 0, x->stream>>>(
        labels ? nn_cuda_partials(x) : NULL, labels ? dlogits : NULL, probs,
        logits, labels, n, grad_scale);
    if (!nn_cuda_launched(ex, "bce_kernel") || !labels ||
        finish_sums_acc(ex, grid, 2))
        return 0.0;
    double s[2];
    nn_cuda_finish_sums(ex, grid, 2, s);
    if (correct)
        *correct = (uint32_t)s[1];
    return s[0];
}

/* ---- sums over values: mse, huber, sum of squares ---- */

enum { SUM_MSE, SUM_HUBER, SUM_SQUARES };

// pred, target, dpred (len); target and dpred unused by SUM_SQUARES
static __global__ void sum_kernel(double *partials, int kind, float *dpred,
                                  const float *pred, const float *target,
                                  size_t len, float delta, float grad_scale)
{
    __shared__ double sh[32];
    double acc = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < len;
         i += (size_t)gridDim.x * blockDim.x) {
        if (kind == SUM_SQUARES) {
            double v = pred[i];
            acc += v * v;
            continue;
        }
        float d = pred[i] - target[i];
        if (kind == SUM_MSE) {
            acc += (double)d * (double)d;
            if (dpred)
                dpred[i] = 2.0f * d * grad_scale;
        } else {
            float a = fabsf(d);
            if (a < delta)
                acc += 0.5 * (double)d * (double)d;
            else
                acc += (double)delta * ((double)a - 0.5 * (double)delta);
            if (dpred) {
                float g = d < -delta ? -delta : d > delta ? delta : d;
                dpred[i] = g * grad_scale;
            }
        }
    }
    acc = nn_cuda_block_sum(acc, sh);
    if (threadIdx.x == 0)
        partials[blockIdx.x] = acc;
}

/* A loss (not SUM_SQUARES) adds to ex->acc when there is one. */
static double sum_run(const nn_exec *ex, int kind, float *dpred,
                      const float *pred, const float *target, size_t len,
                      float delta, float grad_scale)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !len)
        return 0.0;
    unsigned grid = red_grid(len);
    sum_kernel<<<grid, RED_THREADS, 0, x->stream>>>(
        nn_cuda_partials(x), kind, dpred, pred, target, len, delta, grad_scale);
    if (!nn_cuda_launched(ex, "sum_kernel") ||
        (kind != SUM_SQUARES && finish_sums_acc(ex, grid, 1)))
        return 0.0;
    double s;
    nn_cuda_finish_sums(ex, grid, 1, &s);
    return s;
}

double nn_cuda_mse(const nn_exec *ex, float *dpred, const float *pred,
                   const float *target, size_t len, float grad_scale)
{
    return sum_run(ex, SUM_MSE, dpred, pred, target, len, 0.0f, grad_scale);
}

double nn_cuda_huber(const nn_exec *ex, float *dpred, const float *pred,
                     const float *target, size_t len, float delta,
                     float grad_scale)
{
    return sum_run(ex, SUM_HUBER, dpred, pred, target, len, delta, grad_scale);
}

double nn_cuda_sum_squares(const nn_exec *ex, const float *x, size_t len)
{
    return sum_run(ex, SUM_SQUARES, NULL, x, NULL, len, 0.0f, 1.0f);
}
