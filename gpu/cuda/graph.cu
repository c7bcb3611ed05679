/*
 * graph.cu - the CUDA backend's host staging, fences and graphs (see
 * models/backend.h): pinned host memory (cudaHostAlloc) so uploads from
 * the loader's batches run asynchronously, events as fences that say when
 * a pinned buffer has been read, and stream capture of one training step
 * (cudaStreamBeginCapture in thread-local mode on the context's stream,
 * cudaStreamEndCapture + cudaGraphInstantiate), replayed with
 * cudaGraphLaunch on the same stream.
 *
 * A capture that fails is not a device failure: the kernels captured
 * record their errors in the context as always (a call that may not be
 * captured fails there, and the capture is invalidated), so graph_end
 * takes such a record back out, ends the capture, and reports it through
 * its err; the trainer then goes on op by op. Everything else goes
 * through the usual checks. cuBLAS already has its workspace
 * (nn_cuda_exec_init, cublasSetWorkspace) and cuDNN takes its own from
 * ex->work, so nothing in a step allocates while it is captured.
 */
#include "gpu/cuda/cuda_internal.h"

#include <stdio.h>
#include <string.h>

void *nn_cuda_host_alloc(const nn_exec *ex, size_t bytes)
{
    if (!nn_cuda_begin(ex))
        return NULL;
    void *p = NULL;
    if (!NN_CUDA_OK(
            ex, cudaHostAlloc(&p, bytes ? bytes : 64, cudaHostAllocDefault)))
        return NULL;
    return p;
}

void nn_cuda_host_release(const nn_exec *ex, void *p)
{
    if (p)
        (void)NN_CUDA_OK(ex, cudaFreeHost(p));
}

void *nn_cuda_fence_create(const nn_exec *ex)
{
    if (!nn_cuda_begin(ex))
        return NULL;
    cudaEvent_t e = NULL;
    if (!NN_CUDA_OK(ex, cudaEventCreateWithFlags(&e, cudaEventDisableTiming)))
        return NULL;
    return (void *)e;
}

void nn_cuda_fence_record(const nn_exec *ex, void *fence)
{
    nn_cuda_ctx *c = nn_cuda_begin(ex);
    if (c && fence)
        (void)NN_CUDA_OK(ex, cudaEventRecord((cudaEvent_t)fence, c->stream));
}

/* Also after a failure: the host must not rewrite a buffer the device may
 * still be reading, whatever else went wrong. */
void nn_cuda_fence_wait(const nn_exec *ex, void *fence)
{
    nn_cuda_ctx *c = ex ? nn_cuda_ctx_of(ex) : NULL;
    if (!c || !fence)
        return;
    (void)NN_CUDA_OK(ex, cudaSetDevice(c->device));
    (void)NN_CUDA_OK(ex, cudaEventSynchronize((cudaEvent_t)fence));
}

void nn_cuda_fence_release(const nn_exec *ex, void *fence)
{
    if (fence)
        (void)NN_CUDA_OK(ex, cudaEventDestroy((cudaEvent_t)fence));
}

int nn_cuda_graph_begin(const nn_exec *ex)
{
    nn_cuda_ctx *c = nn_cuda_begin(ex);
    if (!c)
        return -1;
    /* Thread-local: only this thread's unsafe calls (a cudaMalloc, a
     * synchronous copy) break the capture; the loader's thread makes no
     * CUDA calls and other contexts' threads are not disturbed. */
    cudaError_t e =
        cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return 0;
}

int nn_cuda_graph_end(const nn_exec *ex, void **graph, ty_err *err)
{
    *graph = NULL;
    nn_cuda_ctx *c = ex ? nn_cuda_ctx_of(ex) : NULL;
    if (!c) {
        ty_fail(err, TY_EDEVICE, NULL, "no CUDA execution context");
        return -1;
    }
    /* graph_begin succeeded only on a healthy context: a failure recorded
     * since came from the capture. */
    char what[sizeof c->what] = "";
    if (c->failed) {
        snprintf(what, sizeof what, "%s", c->what);
        c->failed = 0;
        c->what[0] = '\0';
    }
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    if (e == cudaSuccess && !what[0] && g) {
        cudaGraphExec_t x = NULL;
        e = cudaGraphInstantiate(&x, g, 0);
        (void)NN_CUDA_OK(ex, cudaGraphDestroy(g));
        if (e == cudaSuccess) {
            *graph = (void *)x;
            return 0;
        }
        snprintf(what, sizeof what, "cudaGraphInstantiate: %s",
                 cudaGetErrorString(e));
    } else {
        if (g)
            (void)NN_CUDA_OK(ex, cudaGraphDestroy(g));
        if (!what[0])
            snprintf(what, sizeof what, "cudaStreamEndCapture: %s",
                     e != cudaSuccess ? cudaGetErrorString(e)
                                      : "no graph captured");
    }
    (void)cudaGetLastError();
    ty_fail(err, TY_EDEVICE, NULL, "%s", what);
    return -1;
}

void nn_cuda_graph_launch(const nn_exec *ex, void *graph)
{
    nn_cuda_ctx *c = nn_cuda_begin(ex);
    if (c && graph)
        (void)NN_CUDA_OK(ex,
                         cudaGraphLaunch((cudaGraphExec_t)graph, c->stream));
}

void nn_cuda_graph_release(const nn_exec *ex, void *graph)
{
    if (graph)
        (void)NN_CUDA_OK(ex, cudaGraphExecDestroy((cudaGraphExec_t)graph));
}
