/*
 * seqpool.cu - the CUDA twin of NN_OP_SEQ_POOL (models/cpu/attention.c's
 * nn_cpu_seq_pool_*; models/backend.h): a sequence (b, t, c) to one
 * vector per sequence over the positions that are not padding. One thread
 * per output value, the positions summed in order, so the bits equal the
 * CPU's. It compiles in CI's build; it has not run on a GPU yet.
 */
#include "gpu/cuda/kernels.cuh"

/* A sequence's pooled positions [first, first + count), as the CPU's
 * pooled(). */
__device__ __forceinline__ void pooled_range(const int32_t *lens, uint32_t bi,
                                             uint32_t t, int mode,
                                             uint32_t *first, uint32_t *count)
{
    int32_t len = lens ? lens[bi] : (int32_t)t;
    uint32_t n = len < 0 ? 0 : len > (int32_t)t ? t : (uint32_t)len;
    *first = mode == NN_SEQ_POOL_LAST && n ? n - 1 : 0;
    *count = mode == NN_SEQ_POOL_MEAN ? n : n ? 1 : 0;
}

static __global__ void seq_pool_forward_kernel(float *out, const float *in,
                                               const int32_t *lens, uint32_t b,
                                               uint32_t t, uint32_t c,
                                               int mode)
{
    const size_t len = (size_t)b * c;
    for (size_t w = (size_t)blockIdx.x * blockDim.x + threadIdx.x; w < len;
         w += (size_t)gridDim.x * blockDim.x) {
        const uint32_t bi = (uint32_t)(w / c), k = (uint32_t)(w % c);
        uint32_t first, n;
        pooled_range(lens, bi, t, mode, &first, &n);
        const float *x = in + ((size_t)bi * t + first) * c + k;
        float acc = 0.0f;
        for (uint32_t i = 0; i < n; i++)
            acc += x[(size_t)i * c];
        out[w] = n > 1 ? acc * (1.0f / (float)n) : acc;
    }
}

static __global__ void seq_pool_backward_kernel(float *din, const float *dout,
                                                const int32_t *lens,
                                                uint32_t b, uint32_t t,
                                                uint32_t c, int mode)
{
    const size_t len = (size_t)b * t * c;
    for (size_t w = (size_t)blockIdx.x * blockDim.x + threadIdx.x; w < len;
         w += (size_t)gridDim.x * blockDim.x) {
        const uint32_t k = (uint32_t)(w % c);
        const size_t row = w / c;
        const uint32_t bi = (uint32_t)(row / t), i = (uint32_t)(row % t);
        uint32_t first, n;
        pooled_range(lens, bi, t, mode, &first, &n);
        const float share = n > 1 ? 1.0f / (float)n : 1.0f;
        din[w] = i >= first && i < first + n
                     ? dout[(size_t)bi * c + k] * share
                     : 0.0f;
    }
}

void nn_cuda_seq_pool_forward(const nn_exec *ex, float *out, const float *in,
                              const int32_t *lens, uint32_t b, uint32_t t,
                              uint32_t c, nn_seq_pool_mode mode)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !b || !c)
        return;
    seq_pool_forward_kernel<<<nn_cuda_grid((size_t)b * c), NN_CUDA_THREADS, 0,
                              x->stream>>>(out, in, lens, b, t, c, (int)mode);
    (void)nn_cuda_launched(ex, "seq_pool_forward_kernel");
}

void nn_cuda_seq_pool_backward(const nn_exec *ex, float *din,
                               const float *dout, const int32_t *lens,
                               uint32_t b, uint32_t t, uint32_t c,
                               nn_seq_pool_mode mode)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !b || !t || !c)
        return;
    seq_pool_backward_kernel<<<nn_cuda_grid((size_t)b * t * c),
                               NN_CUDA_THREADS, 0, x->stream>>>(
        din, dout, lens, b, t, c, (int)mode);
    (void)nn_cuda_launched(ex, "seq_pool_backward_kernel");
}
