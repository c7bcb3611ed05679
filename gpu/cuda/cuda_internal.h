/*
 * cuda_internal.h - what the CUDA backend's source files share: the
 * context behind nn_exec.device and the error-recording checks. Not a
 * public API (see backend_cuda.h).
 */
#ifndef TY_CUDA_INTERNAL_H
#define TY_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "gpu/cuda/backend_cuda.h"

typedef struct {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    cudnnHandle_t dnn;
    /* Scalar results: kernels reduce into d_scalars (device), one
     * cudaMemcpyAsync brings them to h_scalars (pinned host) and the
     * stream is synchronized. NN_CUDA_SCALARS doubles each. */
    double *d_scalars, *h_scalars;
    /* The first failure; once set, kernels return without launching. */
    int failed;
    char what[256];
} nn_cuda_ctx;

#define NN_CUDA_SCALARS 64

#ifdef __cplusplus
extern "C" {
#endif

/* The context of ex (ex must come from nn_cuda_exec_init). */
static inline nn_cuda_ctx *nn_cuda_ctx_of(const nn_exec *ex)
{
    return (nn_cuda_ctx *)ex->device;
}

/* Records the first failure: call is the function that failed
 * ("cublasSgemm"), detail the library's message. */
void nn_cuda_fail(const nn_exec *ex, const char *call, const char *detail);

#ifdef __cplusplus
}
#endif

/* Check a call's result; on failure record it (first one wins). Each
 * evaluates to 1 when the call succeeded. */
#define NN_CUDA_OK(ex, expr)                                                  \
    nn_cuda_check_rt((ex), (expr), #expr)
#define NN_CUBLAS_OK(ex, expr)                                                \
    nn_cuda_check_blas((ex), (expr), #expr)
#define NN_CUDNN_OK(ex, expr)                                                 \
    nn_cuda_check_dnn((ex), (expr), #expr)

static inline int nn_cuda_check_rt(const nn_exec *ex, cudaError_t e,
                                   const char *call)
{
    if (e == cudaSuccess)
        return 1;
    nn_cuda_fail(ex, call, cudaGetErrorString(e));
    return 0;
}

static inline int nn_cuda_check_dnn(const nn_exec *ex, cudnnStatus_t e,
                                    const char *call)
{
    if (e == CUDNN_STATUS_SUCCESS)
        return 1;
    nn_cuda_fail(ex, call, cudnnGetErrorString(e));
    return 0;
}

int nn_cuda_check_blas(const nn_exec *ex, cublasStatus_t e, const char *call);

#endif
