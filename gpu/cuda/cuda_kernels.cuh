/*
 * cuda_kernels.cuh - what the CUDA backend's own kernel files share (not
 * cuDNN's): the launch helpers, the fixed-order reductions, the layout of
 * the context's device scratch, and the entry points the backend table in
 * backend_cuda.cu points at.
 *
 * Device scratch: nn_cuda_exec_init makes one cudaMalloc and points
 * ctx->d_scalars at its start. It holds, in order,
 *   NN_CUDA_SCALARS doubles        results that travel to h_scalars,
 *   NN_CUDA_PARTS x NN_CUDA_PARTIALS doubles, the per-block partial sums
 *                                  of a reduction (set k at k * PARTIALS),
 *   the cuBLAS workspace           (nn_cuda_blas_workspace_bytes).
 * A reduction launches at most NN_CUDA_PARTIALS blocks, each writing its
 * partial sums; one block then adds them in a fixed tree into d_scalars,
 * one copy brings them to the host and the stream is synchronized. The
 * number of blocks depends only on the problem's size, so a sum has the
 * same bits on every run on the same device.
 */
#ifndef TY_CUDA_KERNELS_CUH
#define TY_CUDA_KERNELS_CUH

#include "gpu/cuda/cuda_internal.h"

#include <stdint.h>

#define NN_CUDA_PARTIALS 1024   /* most blocks in one reduction */
#define NN_CUDA_PARTS 2         /* sums a reduction may carry (loss, hits) */
#define NN_CUDA_THREADS 256     /* block size of elementwise kernels */
#define NN_CUDA_COL_ROWS 16     /* threads splitting the rows of a column sum */

/* Bytes of the scratch before the cuBLAS workspace (a multiple of 256). */
#define NN_CUDA_SCRATCH_BYTES                                                 \
    ((size_t)(NN_CUDA_SCALARS + NN_CUDA_PARTS * NN_CUDA_PARTIALS) *           \
     sizeof(double))

static inline double *nn_cuda_partials(const nn_cuda_ctx *c)
{
    return c->d_scalars + NN_CUDA_SCALARS;
}

/* The context of ex, ready for work on this thread (its device made
 * current); NULL when ex has no context or it has already failed: the
 * caller returns at once. */
nn_cuda_ctx *nn_cuda_begin(const nn_exec *ex);

/* After a launch: records a launch failure naming kernel. 1 on success. */
int nn_cuda_launched(const nn_exec *ex, const char *kernel);

/* Grid for a grid-stride loop over len values with NN_CUDA_THREADS
 * threads per block; depends only on len. len > 0. */
unsigned nn_cuda_grid(size_t len);

/* Block size for a kernel that gives one block to each row of c values:
 * a multiple of 32, at most max_threads. */
unsigned nn_cuda_row_threads(uint32_t c, unsigned max_threads);

/* Adds the first nparts partial sums of each of the first nsums sets into
 * d_scalars[0 .. nsums), brings them to the host and waits for the stream:
 * out[0 .. nsums) gets them (zeros once the context has failed). */
void nn_cuda_finish_sums(const nn_exec *ex, unsigned nparts, int nsums,
                         double *out);

/* ---- fixed-order reductions (blockDim.x a multiple of 32, <= 1024) ---- */

/* Sum over the warp by an xor butterfly: float addition commutes, so every
 * lane ends with the same bits. */
template <typename T> __device__ __forceinline__ T nn_warp_sum(T v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum of v over the block, returned to every thread. sh: 32 T of shared
 * memory, free again when this returns. */
template <typename T> __device__ T nn_block_sum(T v, T *sh)
{
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned warps = blockDim.x >> 5;
    v = nn_warp_sum(v);
    if (lane == 0)
        sh[warp] = v;
    __syncthreads();
    T r = lane < warps ? sh[lane] : T(0);
    r = nn_warp_sum(r);
    __syncthreads();
    return r;
}

/* Max over the block (NaN never wins, as a > comparison would have it),
 * returned to every thread. sh: 32 floats. */
__device__ __forceinline__ float nn_block_max(float v, float *sh)
{
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned warps = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0)
        sh[warp] = v;
    __syncthreads();
    float r = lane < warps ? sh[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1)
        r = fmaxf(r, __shfl_xor_sync(0xffffffffu, r, o));
    __syncthreads();
    return r;
}

/* Largest value and its index over the block, the lowest index among
 * equal values (the CPU's first maximum); *arg gets the index. Every
 * thread gets both. sh_v, sh_i: 32 each. */
__device__ __forceinline__ float nn_block_argmax(float v, uint32_t i,
                                                 uint32_t *arg, float *sh_v,
                                                 uint32_t *sh_i)
{
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned warps = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        uint32_t oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (ov > v || (ov == v && oi < i)) {
            v = ov;
            i = oi;
        }
    }
    if (lane == 0) {
        sh_v[warp] = v;
        sh_i[warp] = i;
    }
    __syncthreads();
    v = lane < warps ? sh_v[lane] : -INFINITY;
    i = lane < warps ? sh_i[lane] : UINT32_MAX;
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        uint32_t oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (ov > v || (ov == v && oi < i)) {
            v = ov;
            i = oi;
        }
    }
    __syncthreads();
    *arg = i;
    return v;
}

/* ---- the kernels of kernels_*.cu, as the backend table takes them ---- */

void nn_cuda_bias_rows(const nn_exec *ex, float *out, const float *bias,
                       uint32_t n, uint32_t c);
void nn_cuda_bias_grad(const nn_exec *ex, float *db, const float *dout,
                       uint32_t n, uint32_t c);
void nn_cuda_act_forward(const nn_exec *ex, nn_op op, float *out,
                         const float *in, size_t len);
void nn_cuda_act_backward(const nn_exec *ex, nn_op op, float *din,
                          const float *dout, const float *in,
                          const float *out, size_t len);
void nn_cuda_dropout_forward(const nn_exec *ex, float *out, float *mask,
                             const float *in, size_t len, float rate,
                             ty_rng *rng);
void nn_cuda_dropout_backward(const nn_exec *ex, float *din,
                              const float *dout, const float *mask,
                              size_t len);
void nn_cuda_leaky_relu_forward(const nn_exec *ex, float *out,
                                const float *in, size_t len, float slope);
void nn_cuda_leaky_relu_backward(const nn_exec *ex, float *din,
                                 const float *dout, const float *in,
                                 size_t len, float slope);
void nn_cuda_add(const nn_exec *ex, float *out, const float *a,
                 const float *b, size_t len);
void nn_cuda_scale(const nn_exec *ex, float *x, size_t len, float alpha);

double nn_cuda_softmax_xent(const nn_exec *ex, float *dlogits, float *probs,
                            uint32_t *correct, const float *logits,
                            const int32_t *labels, uint32_t n, uint32_t c,
                            float grad_scale);
double nn_cuda_softmax_xent_smooth(const nn_exec *ex, float *dlogits,
                                   uint32_t *correct, const float *logits,
                                   const int32_t *labels, uint32_t n,
                                   uint32_t c, float smoothing,
                                   float grad_scale);
double nn_cuda_bce_logits(const nn_exec *ex, float *dlogits, float *probs,
                          uint32_t *correct, const float *logits,
                          const int32_t *labels, uint32_t n,
                          float grad_scale);
double nn_cuda_mse(const nn_exec *ex, float *dpred, const float *pred,
                   const float *target, size_t len, float grad_scale);
double nn_cuda_huber(const nn_exec *ex, float *dpred, const float *pred,
                     const float *target, size_t len, float delta,
                     float grad_scale);
double nn_cuda_sum_squares(const nn_exec *ex, const float *x, size_t len);

void nn_cuda_sgd(const nn_exec *ex, float *param, float *grad, float *buf,
                 size_t len, const nn_optim_args *s);
void nn_cuda_adam(const nn_exec *ex, float *param, float *grad, float *m,
                  float *v, size_t len, const nn_optim_args *s);

void nn_cuda_layernorm_forward(const nn_exec *ex, float *out, float *mean,
                               float *rstd, const float *x,
                               const float *gamma, const float *beta,
                               uint32_t n, uint32_t d, float eps);
void nn_cuda_layernorm_backward(const nn_exec *ex, float *dx, float *dgamma,
                                float *dbeta, const float *dout,
                                const float *x, const float *gamma,
                                const float *mean, const float *rstd,
                                uint32_t n, uint32_t d);
void nn_cuda_softmax_forward(const nn_exec *ex, float *out, const float *in,
                             uint32_t n, uint32_t c);
void nn_cuda_softmax_backward(const nn_exec *ex, float *din,
                              const float *dout, const float *out, uint32_t n,
                              uint32_t c);

/* ---- graph.cu: host staging, fences, graphs (backend.h) ---- */
void *nn_cuda_host_alloc(const nn_exec *ex, size_t bytes);
void nn_cuda_host_release(const nn_exec *ex, void *p);
void *nn_cuda_fence_create(const nn_exec *ex);
void nn_cuda_fence_record(const nn_exec *ex, void *fence);
void nn_cuda_fence_wait(const nn_exec *ex, void *fence);
void nn_cuda_fence_release(const nn_exec *ex, void *fence);
int nn_cuda_graph_begin(const nn_exec *ex);
int nn_cuda_graph_end(const nn_exec *ex, void **graph, ty_err *err);
void nn_cuda_graph_launch(const nn_exec *ex, void *graph);
void nn_cuda_graph_release(const nn_exec *ex, void *graph);

#endif
