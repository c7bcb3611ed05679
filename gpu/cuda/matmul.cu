/*
 * matmul.cu - the CUDA backend's fp32 GEMM through cuBLAS (cublasSgemm on
 * the context's handle, bound to its stream, with the workspace
 * nn_cuda_exec_init gave it, so cuBLAS never allocates). The GEMM on
 * 16-bit inputs is lp.cu's gemm_lp.
 */
#include "gpu/cuda/cuda_internal.h"

/* Row-major C (m, n) = op(A) op(B) is column-major C^T (n, m) = op(B)^T
 * op(A)^T: the row-major buffers read column-major are already the
 * transposes, so cuBLAS gets B then A with the caller's trans flags and
 * the leading dimensions the row-major layout has. */
void nn_cuda_gemm(const nn_exec *ex, float *c, const float *a, const float *b,
                  int trans_a, int trans_b, int m, int n, int k, float alpha,
                  float beta)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || m <= 0 || n <= 0)
        return;
    const int lda = trans_a ? m : k, ldb = trans_b ? k : n;
    (void)NN_CUBLAS_OK(
        ex, cublasSgemm(x->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                        trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
                        ldb > 0 ? ldb : 1, a, lda > 0 ? lda : 1, &beta, c, n));
}
