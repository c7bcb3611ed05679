/*
 * launch.cu - what every file of the CUDA backend uses to run an op:
 * recording the first failure in the context (nn_cuda_fail, cuBLAS
 * statuses), starting an op on a context that has not failed, checking a
 * launch, and grid and block sizes. The op files and the table
 * (backend.cu) call down into it; it calls none of them.
 */
#include "gpu/cuda/cuda_internal.h"

#include <stdio.h>
#include <string.h>

void nn_cuda_fail(const nn_exec *ex, const char *call, const char *detail)
{
    /* The runtime keeps a per-thread "last error" that the next
     * cudaGetLastError (our launch check) returns: clear it, or one
     * context's failed cudaMalloc would fail a healthy context's next
     * launch on this thread. (Sticky errors, such as an illegal address,
     * stay whatever is done here.) */
    (void)cudaGetLastError();
    nn_cuda_ctx *c = ex ? nn_cuda_ctx_of(ex) : NULL;
    if (!c || c->failed)
        return;
    /* The checks pass the call's text; the function's name is enough. */
    size_t len = strcspn(call, "( ");
    c->failed = 1;
    snprintf(c->what, sizeof c->what, "CUDA error in %.*s: %s", (int)len, call,
             detail ? detail : "unknown error");
}

int nn_cuda_check_blas(const nn_exec *ex, cublasStatus_t e, const char *call)
{
    if (e == CUBLAS_STATUS_SUCCESS)
        return 1;
    char detail[160];
    snprintf(detail, sizeof detail, "%s (%s)", cublasGetStatusName(e),
             cublasGetStatusString(e));
    nn_cuda_fail(ex, call, detail);
    return 0;
}

nn_cuda_ctx *nn_cuda_begin(const nn_exec *ex)
{
    nn_cuda_ctx *c = ex ? nn_cuda_ctx_of(ex) : NULL;
    if (!c || c->failed)
        return NULL;
    /* Cheap once the device's context exists; a context may be used by
     * one thread after another, each with its own current device. */
    if (!NN_CUDA_OK(ex, cudaSetDevice(c->device)))
        return NULL;
    return c;
}

int nn_cuda_launched(const nn_exec *ex, const char *kernel)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess)
        return 1;
    char call[96];
    snprintf(call, sizeof call, "%s<<<>>>", kernel);
    nn_cuda_fail(ex, call, cudaGetErrorString(e));
    return 0;
}

unsigned nn_cuda_grid(size_t len)
{
    size_t blocks = (len + NN_CUDA_THREADS - 1) / NN_CUDA_THREADS;
    /* Enough to fill any current GPU several times over; the kernels
     * stride over the rest. */
    return blocks > 16384 ? 16384u : (unsigned)blocks;
}

unsigned nn_cuda_row_threads(uint32_t c, unsigned max_threads)
{
    unsigned t = (c + 31u) / 32u * 32u;
    return t > max_threads ? max_threads : t < 32 ? 32u : t;
}
