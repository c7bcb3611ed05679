/*
 * kvcache.cu - the CUDA twin of models/cpu/kvcache.c (NN_OP_KV_CACHE,
 * models/backend.h): a step's keys and values into their sequences'
 * cache blocks, and each row's causal attention over its cached
 * positions. One block per (row, head), the positions taken in chunks of
 * the block's size in order: the scores' maximum first, then the
 * exponentials summed and the values weighted in position order, so a
 * row's bits do not depend on the other rows. rows_gemm, the decode
 * step's linear layers: one warp per output, each lane summing its
 * stride of k in order, then a fixed butterfly across the warp, so an
 * output's sum does not depend on the row count (cuBLAS picks kernels,
 * and so orders, by shape). The rows of a step share W through the L2.
 * It compiles in CI's build; it has not run on a GPU yet.
 */
#include "gpu/cuda/kernels.cuh"

#define KV_THREADS 128u

__device__ __forceinline__ size_t kv_slot(const int32_t *tab, int32_t j,
                                          uint32_t bt, uint32_t c)
{
    return ((size_t)tab[(uint32_t)j / bt] * bt + (uint32_t)j % bt) * c;
}

static __global__ void kv_store_kernel(float *kc, float *vc, const float *k,
                                       const float *v, uint32_t ld,
                                       const int32_t *tables, uint32_t tstride,
                                       const int32_t *pos, uint32_t n,
                                       uint32_t c, uint32_t bt)
{
    const size_t len = (size_t)n * c;
    for (size_t w = (size_t)blockIdx.x * blockDim.x + threadIdx.x; w < len;
         w += (size_t)gridDim.x * blockDim.x) {
        const uint32_t r = (uint32_t)(w / c), e = (uint32_t)(w % c);
        const size_t at = kv_slot(tables + (size_t)r * tstride, pos[r], bt, c);
        kc[at + e] = k[(size_t)r * ld + e];
        vc[at + e] = v[(size_t)r * ld + e];
    }
}

void nn_cuda_kv_store(const nn_exec *ex, float *kc, float *vc, const float *k,
                      const float *v, uint32_t ld, const int32_t *tables,
                      uint32_t tstride, const int32_t *pos, uint32_t n,
                      uint32_t c, uint32_t bt)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !n || !c)
        return;
    kv_store_kernel<<<nn_cuda_grid((size_t)n * c), NN_CUDA_THREADS, 0,
                      x->stream>>>(kc, vc, k, v, ld, tables, tstride, pos, n,
                                   c, bt);
    (void)nn_cuda_launched(ex, "kv_store_kernel");
}

/* Block (row r, head hi). */
static __global__ void kv_attention_kernel(float *out, const float *q,
                                           uint32_t ldq, const float *kc,
                                           const float *vc,
                                           const int32_t *tables,
                                           uint32_t tstride, const int32_t *pos,
                                           uint32_t h, uint32_t d, uint32_t bt)
{
    __shared__ float sh[32];
    __shared__ float s[KV_THREADS];
    const uint32_t r = blockIdx.x / h, hi = blockIdx.x % h, c = h * d;
    const int32_t *tab = tables + (size_t)r * tstride;
    const int32_t last = pos[r];
    const float *qr = q + (size_t)r * ldq + (size_t)hi * d;
    const float scale = rsqrtf((float)d);
    /* pass 1: the largest score */
    float mx = -INFINITY;
    for (int32_t p = threadIdx.x; p <= last; p += blockDim.x) {
        const float *k = kc + kv_slot(tab, p, bt, c) + (size_t)hi * d;
        float dot = 0.0f;
        for (uint32_t e = 0; e < d; e++)
            dot += qr[e] * k[e];
        mx = fmaxf(mx, dot * scale);
    }
    mx = nn_cuda_block_max(mx, sh);
    /* pass 2, a chunk of positions at a time: their weights, then each
     * thread's output values over the chunk in position order */
    float *o = out + (size_t)r * c + (size_t)hi * d;
    for (uint32_t e = threadIdx.x; e < d; e += blockDim.x)
        o[e] = 0.0f;
    float sum = 0.0f; /* every thread keeps the same sum, in order */
    for (int32_t base = 0; base <= last; base += (int32_t)blockDim.x) {
        const int32_t p = base + (int32_t)threadIdx.x;
        if (p <= last) {
            const float *k = kc + kv_slot(tab, p, bt, c) + (size_t)hi * d;
            float dot = 0.0f;
            for (uint32_t e = 0; e < d; e++)
                dot += qr[e] * k[e];
            s[threadIdx.x] = expf(dot * scale - mx);
        }
        __syncthreads();
        const int32_t m = min((int32_t)blockDim.x, last - base + 1);
        for (int32_t j = 0; j < m; j++)
            sum += s[j];
        for (uint32_t e = threadIdx.x; e < d; e += blockDim.x) {
            float acc = o[e];
            for (int32_t j = 0; j < m; j++)
                acc += s[j] *
                       vc[kv_slot(tab, base + j, bt, c) + (size_t)hi * d + e];
            o[e] = acc;
        }
        __syncthreads();
    }
    const float inv = 1.0f / sum;
    for (uint32_t e = threadIdx.x; e < d; e += blockDim.x)
        o[e] *= inv;
}

void nn_cuda_kv_attention(const nn_exec *ex, float *out, const float *q,
                          uint32_t ldq, const float *kc, const float *vc,
                          const int32_t *tables, uint32_t tstride,
                          const int32_t *pos, uint32_t n, uint32_t h,
                          uint32_t d, uint32_t bt)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !n || !h || !d)
        return;
    kv_attention_kernel<<<n * h, KV_THREADS, 0, x->stream>>>(
        out, q, ldq, kc, vc, tables, tstride, pos, h, d, bt);
    (void)nn_cuda_launched(ex, "kv_attention_kernel");
}

#define ROWS_WARPS 8u

/* Block (8 of W's rows, one row of x); warp wi computes out[r][j]. */
static __global__ void rows_gemm_kernel(float *out, const float *x,
                                        const float *w, uint32_t u, uint32_t k,
                                        float beta)
{
    const uint32_t r = blockIdx.y, lane = threadIdx.x & 31u;
    const uint32_t j = blockIdx.x * ROWS_WARPS + (threadIdx.x >> 5);
    if (j >= u)
        return;
    const float *xr = x + (size_t)r * k, *wj = w + (size_t)j * k;
    float acc = 0.0f;
    for (uint32_t i = lane; i < k; i += 32u)
        acc = fmaf(xr[i], wj[i], acc);
    for (int off = 16; off > 0; off >>= 1)
        acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) {
        float *o = out + (size_t)r * u + j;
        *o = beta != 0.0f ? acc + beta * *o : acc;
    }
}

void nn_cuda_rows_gemm(const nn_exec *ex, float *out, const float *x,
                       const float *w, uint32_t n, uint32_t u, uint32_t k,
                       float beta)
{
    nn_cuda_ctx *c = nn_cuda_begin(ex);
    if (!c || !n || !u)
        return;
    const dim3 grid((u + ROWS_WARPS - 1) / ROWS_WARPS, n);
    rows_gemm_kernel<<<grid, ROWS_WARPS * 32u, 0, c->stream>>>(out, x, w, u, k,
                                                             beta);
    (void)nn_cuda_launched(ex, "rows_gemm_kernel");
}
