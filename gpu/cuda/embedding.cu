/*
 * embedding.cu - the CUDA twins of models/cpu/embedding.c (issue 31;
 * models/backend.h "Transformer ops"): the embedding gather and its
 * scatter-add, and the cross-entropy with an ignore index. First versions,
 * for correctness and determinism: no atomics, every sum in a fixed order,
 * the same bits run after run. They compile in CI's build; they have not
 * run on a GPU yet.
 * - embedding backward: one thread per (column, vocabulary bucket) walks
 *   the tokens in order and adds those of its bucket: each gradient
 *   element sums in token order, the CPU's order, so the bits equal the
 *   CPU's.
 * - cross-entropy: a count kernel, then one block per row (as loss.cu's
 *   softmax_xent); the per-block sums are added by nn_cuda_finish_sums and
 *   brought to the host, or, with nn_exec.acc (a training step), by one
 *   block that adds mean * weight into acc on the stream (nothing waits,
 *   so the step can be captured in a CUDA graph).
 */
#include "gpu/cuda/kernels.cuh"

#define EMB_BUCKETS 32u /* vocabulary buckets of the embedding scatter-add */

/* ---- embedding ---- */

static __global__ void emb_forward_kernel(float *out, const int32_t *ids,
                                          const float *table, uint32_t n,
                                          uint32_t c)
{
    const size_t len = (size_t)n * c;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < len;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / c, k = i % c;
        out[i] = table[(size_t)ids[r] * c + k];
    }
}

void nn_cuda_embedding_forward(const nn_exec *ex, float *out,
                               const int32_t *ids, const float *table,
                               uint32_t n, uint32_t c)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !n || !c)
        return;
    emb_forward_kernel<<<nn_cuda_grid((size_t)n * c), NN_CUDA_THREADS, 0,
                         x->stream>>>(out, ids, table, n, c);
    (void)nn_cuda_launched(ex, "emb_forward_kernel");
}

/* Thread (column k, bucket u): every token whose id % buckets == u, in
 * token order. */
static __global__ void emb_backward_kernel(float *dtable, const float *dout,
                                           const int32_t *ids, uint32_t n,
                                           uint32_t c, uint32_t buckets)
{
    const size_t len = (size_t)c * buckets;
    for (size_t w = (size_t)blockIdx.x * blockDim.x + threadIdx.x; w < len;
         w += (size_t)gridDim.x * blockDim.x) {
        const uint32_t k = (uint32_t)(w % c), u = (uint32_t)(w / c);
        for (uint32_t i = 0; i < n; i++) {
            const uint32_t id = (uint32_t)ids[i];
            if (id % buckets == u)
                dtable[(size_t)id * c + k] += dout[(size_t)i * c + k];
        }
    }
}

void nn_cuda_embedding_backward(const nn_exec *ex, float *dtable,
                                const float *dout, const int32_t *ids,
                                uint32_t n, uint32_t v, uint32_t c)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !n || !c || !v)
        return;
    const uint32_t buckets = v < EMB_BUCKETS ? v : EMB_BUCKETS;
    emb_backward_kernel<<<nn_cuda_grid((size_t)c * buckets), NN_CUDA_THREADS, 0,
                          x->stream>>>(dtable, dout, ids, n, c, buckets);
    (void)nn_cuda_launched(ex, "emb_backward_kernel");
}

/* ---- cross-entropy with an ignore index ---- */

/* One block: the count of rows whose target is not ignore, into *count. */
static __global__ void xent_count_kernel(double *count, const int32_t *targets,
                                         uint32_t n, int32_t ignore)
{
    __shared__ double sh[32];
    double part = 0.0;
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
        part += targets[i] != ignore ? 1.0 : 0.0;
    part = nn_cuda_block_sum(part, sh);
    if (threadIdx.x == 0)
        *count = part;
}

/* Rows blockIdx.x, + gridDim.x, ...; thread 0 adds the rows' losses in row
 * order into this block's partial. */
static __global__ void
xent_ignore_kernel(double *partials, float *dlogits, const double *count,
                   const float *logits, const int32_t *targets, uint32_t n,
                   uint32_t v, int32_t ignore, float grad_scale)
{
    __shared__ float sh[32];
    const float scale = *count > 0.0 ? grad_scale / (float)*count : 0.0f;
    double loss = 0.0;
    for (uint32_t r = blockIdx.x; r < n; r += gridDim.x) {
        const float *x = logits + (size_t)r * v;
        float *d = dlogits ? dlogits + (size_t)r * v : NULL;
        const int32_t y = targets[r];
        if (y == ignore) {
            if (d)
                for (uint32_t j = threadIdx.x; j < v; j += blockDim.x)
                    d[j] = 0.0f;
            continue;
        }
        float mx = -INFINITY;
        for (uint32_t j = threadIdx.x; j < v; j += blockDim.x)
            mx = fmaxf(mx, x[j]);
        mx = nn_cuda_block_max(mx, sh);
        float part = 0.0f;
        for (uint32_t j = threadIdx.x; j < v; j += blockDim.x)
            part += expf(x[j] - mx);
        const float sum = nn_cuda_block_sum(part, sh);
        if (d) {
            const float s = scale / sum;
            for (uint32_t j = threadIdx.x; j < v; j += blockDim.x) {
                float g = expf(x[j] - mx) * s;
                d[j] = (int32_t)j == y ? g - scale : g;
            }
        }
        if (threadIdx.x == 0) {
            double xy = (uint32_t)y < v ? (double)x[y] : (double)NAN;
            loss += log((double)sum) + (double)mx - xy;
        }
    }
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = loss;
        partials[NN_CUDA_PARTIALS + blockIdx.x] = blockIdx.x ? 0.0 : *count;
    }
}

/* One block, as nn_cuda_finish_sums (loss.cu) adds partials (the same
 * tree, so the same bits): acc[NN_ACC_LOSS] += the loss partials' sum over
 * the count, times weight (0 when nothing was counted). */
static __global__ void
xent_ignore_acc_kernel(double *acc, const double *partials, unsigned nparts,
                       const double *count, double weight)
{
    __shared__ double sh[32];
    double v = 0.0;
    for (unsigned i = threadIdx.x; i < nparts; i += blockDim.x)
        v += partials[i];
    v = nn_cuda_block_sum(v, sh);
    if (threadIdx.x == 0 && *count > 0.0)
        acc[NN_ACC_LOSS] += v / *count * weight;
}

double nn_cuda_xent_ignore(const nn_exec *ex, float *dlogits, uint32_t *counted,
                           const float *logits, const int32_t *targets,
                           uint32_t n, uint32_t v, int32_t ignore_index,
                           float grad_scale, double weight)
{
    if (counted)
        *counted = 0;
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !n || !v)
        return 0.0;
    /* The count lives in the last scalar slot: nn_cuda_finish_sums writes
     * only the first two. */
    double *count = x->d_scalars + NN_CUDA_SCALARS - 1;
    xent_count_kernel<<<1, 1024, 0, x->stream>>>(count, targets, n,
                                                 ignore_index);
    if (!nn_cuda_launched(ex, "xent_count_kernel"))
        return 0.0;
    unsigned grid = n > NN_CUDA_PARTIALS ? NN_CUDA_PARTIALS : n;
    xent_ignore_kernel<<<grid, nn_cuda_row_threads(v, 256), 0, x->stream>>>(
        nn_cuda_partials(x), dlogits, count, logits, targets, n, v,
        ignore_index, grad_scale);
    if (!nn_cuda_launched(ex, "xent_ignore_kernel"))
        return 0.0;
    if (ex->acc) {
        /* into acc on the stream: nothing waits, a graph may capture it */
        xent_ignore_acc_kernel<<<1, 1024, 0, x->stream>>>(
            ex->acc, nn_cuda_partials(x), grid, count, weight);
        (void)nn_cuda_launched(ex, "xent_ignore_acc_kernel");
        return 0.0;
    }
    double s[2];
    nn_cuda_finish_sums(ex, grid, 2, s);
    if (counted)
        *counted = (uint32_t)s[1];
    return s[1] > 0.0 ? s[0] / s[1] * weight : 0.0;
}

/* ---- token ids carried as floats ---- */

static __global__ void to_ids_kernel(int32_t *ids, const float *x, size_t len,
                                     uint32_t bound, int32_t fallback)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < len;
         i += (size_t)gridDim.x * blockDim.x) {
        const float v = x[i];
        ids[i] = v >= 0.0f && v < (float)bound && v == floorf(v) ? (int32_t)v
                                                                 : fallback;
    }
}

void nn_cuda_to_ids(const nn_exec *ex, int32_t *ids, const float *x, size_t len,
                    uint32_t bound, int32_t fallback)
{
    nn_cuda_ctx *c = nn_cuda_begin(ex);
    if (!c || !len)
        return;
    to_ids_kernel<<<nn_cuda_grid(len), NN_CUDA_THREADS, 0, c->stream>>>(
        ids, x, len, bound, fallback);
    (void)nn_cuda_launched(ex, "to_ids_kernel");
}
