/*
 * kernels.cuh - what the CUDA backend's own kernels share on the device:
 * the fixed-order warp and block reductions that make a sum, a maximum or
 * an argmax have the same bits on every run. Host-side state, launch
 * helpers and the scratch layout the reductions write into are in
 * cuda_internal.h, which this header includes (never the reverse).
 */
#ifndef TY_CUDA_KERNELS_CUH
#define TY_CUDA_KERNELS_CUH

#include "gpu/cuda/cuda_internal.h"

#include <stdint.h>

/* ---- fixed-order reductions (blockDim.x a multiple of 32, <= 1024) ---- */

/* Sum over the warp by an xor butterfly: float addition commutes, so every
 * lane ends with the same bits. */
template <typename T> __device__ __forceinline__ T nn_cuda_warp_sum(T v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum of v over the block, returned to every thread. sh: 32 T of shared
 * memory, free again when this returns. */
template <typename T> __device__ T nn_cuda_block_sum(T v, T *sh)
{
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned warps = blockDim.x >> 5;
    v = nn_cuda_warp_sum(v);
    if (lane == 0)
        sh[warp] = v;
    __syncthreads();
    T r = lane < warps ? sh[lane] : T(0);
    r = nn_cuda_warp_sum(r);
    __syncthreads();
    return r;
}

/* Max over the block (NaN never wins, as a > comparison would have it),
 * returned to every thread. sh: 32 floats. */
__device__ __forceinline__ float nn_cuda_block_max(float v, float *sh)
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
__device__ __forceinline__ float nn_cuda_block_argmax(float v, uint32_t i,
                                                      uint32_t *arg,
                                                      float *sh_v,
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

#endif
