/*
 * lp.cu - the CUDA backend's reduced-precision members: the
 * fp32 -> bf16 / fp16 cast (round to nearest even by the hardware
 * conversions __float2bfloat16_rn / __float2half_rn: fp16 overflow gives
 * +-inf, NaN stays NaN), the GEMM on 16-bit inputs through cublasGemmEx
 * (fp32 output and CUBLAS_COMPUTE_32F: products and sums in fp32, on
 * Tensor Cores where cuBLAS finds them worthwhile), and lp_ok from the
 * device's compute capability (bf16 from 8.0, fp16 from 7.0: the Tensor
 * Core generations that run them).
 *
 * The CPU reference (models/cpu/lp.c) rounds the same way; the
 * GEMM's sums differ from it only in their order.
 */
#include "gpu/cuda/cuda_internal.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

// dst (len) = src (len) rounded to bf16
static __global__ void cast_bf16_kernel(__nv_bfloat16 *dst, const float *src,
                                        size_t len)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < len;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

// dst (len) = src (len) rounded to fp16
static __global__ void cast_f16_kernel(__half *dst, const float *src,
                                       size_t len)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < len;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2half_rn(src[i]);
}

void nn_cuda_cast(const nn_exec *ex, void *dst, nn_dtype dt, const float *src,
                  size_t len)
{
    nn_cuda_ctx *c = nn_cuda_begin(ex);
    if (!c || !len)
        return;
    if (dt == NN_DT_BF16) {
        cast_bf16_kernel<<<nn_cuda_grid(len), NN_CUDA_THREADS, 0, c->stream>>>(
            (__nv_bfloat16 *)dst, src, len);
        (void)nn_cuda_launched(ex, "cast_bf16_kernel");
    } else if (dt == NN_DT_F16) {
        cast_f16_kernel<<<nn_cuda_grid(len), NN_CUDA_THREADS, 0, c->stream>>>(
            (__half *)dst, src, len);
        (void)nn_cuda_launched(ex, "cast_f16_kernel");
    } else {
        (void)NN_CUDA_OK(ex,
                         cudaMemcpyAsync(dst, src, len * sizeof(float),
                                         cudaMemcpyDeviceToDevice, c->stream));
    }
}

/* As nn_cuda_gemm (matmul.cu): row-major C (m, n) = op(A) op(B) is
 * column-major C^T = op(B)^T op(A)^T, so cuBLAS gets B then A with the
 * caller's trans flags and the row-major leading dimensions. */
void nn_cuda_gemm_lp(const nn_exec *ex, float *c, const void *a, const void *b,
                     nn_dtype dt, int trans_a, int trans_b, int m, int n, int k,
                     float alpha, float beta)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || m <= 0 || n <= 0)
        return;
    if (dt != NN_DT_BF16 && dt != NN_DT_F16) {
        nn_cuda_fail(ex, "gemm_lp", "the element type must be bf16 or fp16");
        return;
    }
    const cudaDataType_t t = dt == NN_DT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    const int lda = trans_a ? m : k, ldb = trans_b ? k : n;
    (void)NN_CUBLAS_OK(
        ex,
        cublasGemmEx(x->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                     trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, t,
                     ldb > 0 ? ldb : 1, a, t, lda > 0 ? lda : 1, &beta, c,
                     CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* A query, not a kernel: a failed attribute call says "no" and records
 * nothing (ex may be NULL: the current device). */
int nn_cuda_lp_ok(const nn_exec *ex, nn_dtype dt)
{
    if (dt == NN_DT_F32)
        return 1;
    const nn_cuda_ctx *c = ex && ex->device ? nn_cuda_ctx_of(ex) : NULL;
    int dev = 0, major = 0, minor = 0;
    if (c)
        dev = c->device;
    else if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                               dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor,
                               dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    const int cc = major * 10 + minor;
    return dt == NN_DT_BF16 ? cc >= 80 : cc >= 70;
}
