/*
 * backend.cu - the CUDA backend's frame: devices and versions, the
 * execution context (stream, cuBLAS and cuDNN handles bound to it, pinned
 * scalar buffers, device scratch), memory, and the nn_backend_cuda table.
 * Error recording and the launch helpers every op file uses are in
 * launch.cu, below both the table and the ops. The members it points at live
 * in files named as the CPU backend's (models/cpu/): matmul.cu (GEMM
 * through cuBLAS), elementwise.cu, loss.cu, optim.cu, norm.cu, conv.cu
 * (through cuDNN), pool.cu, lp.cu (reduced precision), embedding.cu and
 * attention.cu (the transformer ops), and graph.cu (host staging, fences,
 * CUDA graphs; no CPU twin).
 *
 * Invariants: every CUDA, cuBLAS and cuDNN call goes through NN_CUDA_OK,
 * NN_CUBLAS_OK or NN_CUDNN_OK; the first failure is kept in the context and
 * every kernel after it returns without launching. All work of a context
 * is ordered on its one stream; only download and the calls that return
 * scalars wait for it.
 */
#include "gpu/cuda/backend.h"
#include "gpu/cuda/cuda_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- devices and versions ---- */

int nn_cuda_device_count(char *why, size_t n)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaSuccess && count > 0)
        return count;
    if (why && n) {
        if (e == cudaSuccess)
            snprintf(why, n, "no CUDA device visible (CUDA_VISIBLE_DEVICES=%s)",
                     getenv("CUDA_VISIBLE_DEVICES")
                         ? getenv("CUDA_VISIBLE_DEVICES")
                         : "unset");
        else if (e == cudaErrorInsufficientDriver)
            snprintf(why, n, "no CUDA driver (%s)", cudaGetErrorString(e));
        else if (e == cudaErrorNoDevice)
            snprintf(why, n, "no CUDA device (%s)", cudaGetErrorString(e));
        else
            snprintf(why, n, "CUDA initialization failed (%s: %s)",
                     cudaGetErrorName(e), cudaGetErrorString(e));
    }
    /* Clear the error so the next runtime call does not report it. */
    (void)cudaGetLastError();
    return 0;
}

ty_status nn_cuda_device_get(int i, nn_cuda_device *out, ty_err *err)
{
    memset(out, 0, sizeof *out);
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, i);
    if (e != cudaSuccess)
        return ty_fail(err, TY_EDEVICE, NULL,
                       "CUDA error in cudaGetDeviceProperties: %s",
                       cudaGetErrorString(e));
    snprintf(out->name, sizeof out->name, "%s", p.name);
    const unsigned char *u = (const unsigned char *)p.uuid.bytes;
    snprintf(out->uuid, sizeof out->uuid,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
             "%02x%02x%02x%02x%02x%02x",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10],
             u[11], u[12], u[13], u[14], u[15]);
    out->total_bytes = p.totalGlobalMem;
    out->cc_major = p.major;
    out->cc_minor = p.minor;

    /* Free memory needs the device's context: made current for the
     * question, then the caller's device is restored. */
    int prev = 0;
    e = cudaGetDevice(&prev);
    if (e == cudaSuccess)
        e = cudaSetDevice(i);
    size_t free_b = 0, total_b = 0;
    if (e == cudaSuccess)
        e = cudaMemGetInfo(&free_b, &total_b);
    cudaError_t r = cudaSetDevice(prev);
    if (e == cudaSuccess)
        e = r;
    if (e != cudaSuccess)
        return ty_fail(err, TY_EDEVICE, NULL,
                       "CUDA error in cudaMemGetInfo on device %d: %s", i,
                       cudaGetErrorString(e));
    out->free_bytes = free_b;
    if (total_b)
        out->total_bytes = total_b;
    return TY_OK;
}

void nn_cuda_versions(char *buf, size_t n)
{
    int rt = 0, bmaj = 0, bmin = 0, bpat = 0;
    if (cudaRuntimeGetVersion(&rt) != cudaSuccess)
        rt = CUDART_VERSION;
    if (cublasGetProperty(MAJOR_VERSION, &bmaj) != CUBLAS_STATUS_SUCCESS ||
        cublasGetProperty(MINOR_VERSION, &bmin) != CUBLAS_STATUS_SUCCESS ||
        cublasGetProperty(PATCH_LEVEL, &bpat) != CUBLAS_STATUS_SUCCESS) {
        bmaj = CUBLAS_VER_MAJOR;
        bmin = CUBLAS_VER_MINOR;
        bpat = CUBLAS_VER_PATCH;
    }
    /* cuDNN 9 numbers itself major * 10000 + minor * 100 + patch. */
    size_t dnn = cudnnGetVersion();
    snprintf(buf, n, "CUDA %d.%d, cuBLAS %d.%d.%d, cuDNN %zu.%zu.%zu",
             rt / 1000, rt % 1000 / 10, bmaj, bmin, bpat, dnn / 10000,
             dnn % 10000 / 100, dnn % 100);
}

/* ---- the execution context ---- */

/* cuBLAS's recommended workspace: 32 MiB on Hopper, 4 MiB before. Given
 * at init so cuBLAS never allocates while kernels run. */
static size_t blas_workspace_bytes(int cc_major)
{
    return (cc_major >= 9 ? 32u : 4u) << 20;
}

ty_status nn_cuda_exec_init(nn_exec *ex, int device, ty_err *err)
{
    memset(ex, 0, sizeof *ex);
    nn_cuda_ctx *c = (nn_cuda_ctx *)calloc(1, sizeof *c);
    if (!c)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    c->device = device;
    ex->device = c;

    int cc_major = 0;
    size_t ws = 0;
    if (!NN_CUDA_OK(ex, cudaSetDevice(device)) ||
        !NN_CUDA_OK(
            ex, cudaDeviceGetAttribute(
                    &cc_major, cudaDevAttrComputeCapabilityMajor, device)) ||
        !NN_CUDA_OK(
            ex, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)))
        goto fail;
    ws = blas_workspace_bytes(cc_major);
    if (!NN_CUDA_OK(ex, cudaMalloc((void **)&c->d_scalars,
                                   NN_CUDA_SCRATCH_BYTES + ws)) ||
        !NN_CUDA_OK(ex, cudaMallocHost((void **)&c->h_scalars,
                                       NN_CUDA_SCALARS * sizeof(double))) ||
        !NN_CUBLAS_OK(ex, cublasCreate(&c->blas)) ||
        !NN_CUBLAS_OK(ex, cublasSetStream(c->blas, c->stream)) ||
        /* After SetStream, which resets the workspace to cuBLAS's own. */
        !NN_CUBLAS_OK(
            ex, cublasSetWorkspace(c->blas,
                                   (char *)c->d_scalars + NN_CUDA_SCRATCH_BYTES,
                                   ws)) ||
        !NN_CUDNN_OK(ex, cudnnCreate(&c->dnn)) ||
        !NN_CUDNN_OK(ex, cudnnSetStream(c->dnn, c->stream)))
        goto fail;
    return TY_OK;

fail:
    ty_fail(err, TY_EDEVICE, NULL, "%s on device %d", c->what, device);
    nn_cuda_exec_free(ex);
    return TY_EDEVICE;
}

void nn_cuda_exec_free(nn_exec *ex)
{
    nn_cuda_ctx *c = ex ? nn_cuda_ctx_of(ex) : NULL;
    if (!c)
        return;
    /* Teardown goes on after a failure: each call is still checked (the
     * record dies with the context) but nothing is skipped. */
    (void)NN_CUDA_OK(ex, cudaSetDevice(c->device));
    if (c->stream)
        (void)NN_CUDA_OK(ex, cudaStreamSynchronize(c->stream));
    if (c->dnn)
        (void)NN_CUDNN_OK(ex, cudnnDestroy(c->dnn));
    if (c->blas)
        (void)NN_CUBLAS_OK(ex, cublasDestroy(c->blas));
    if (c->h_scalars)
        (void)NN_CUDA_OK(ex, cudaFreeHost(c->h_scalars));
    if (c->d_scalars)
        (void)NN_CUDA_OK(ex, cudaFree(c->d_scalars));
    if (c->stream)
        (void)NN_CUDA_OK(ex, cudaStreamDestroy(c->stream));
    free(c);
    ex->device = NULL;
}

/* ---- memory ---- */

static void *nn_cuda_alloc(const nn_exec *ex, size_t bytes)
{
    if (!nn_cuda_begin(ex))
        return NULL;
    /* cudaMalloc aligns to at least 256 bytes; 0 bytes still gets a
     * pointer of its own, as on the CPU. */
    void *p = NULL;
    if (!NN_CUDA_OK(ex, cudaMalloc(&p, bytes ? bytes : 256)))
        return NULL;
    return p;
}

/* cudaFree waits for the device; release belongs outside the hot loop. */
static void nn_cuda_release(const nn_exec *ex, void *p)
{
    if (!p)
        return;
    nn_cuda_ctx *c = ex ? nn_cuda_ctx_of(ex) : NULL;
    if (c)
        (void)NN_CUDA_OK(ex, cudaSetDevice(c->device));
    (void)NN_CUDA_OK(ex, cudaFree(p));
}

/* From pageable memory the call returns once src has been staged; from
 * pinned memory the copy may still run, and src must stay untouched until
 * the stream has passed it (the next download or scalar result). */
static void nn_cuda_upload(const nn_exec *ex, void *dst, const void *src,
                           size_t bytes)
{
    nn_cuda_ctx *c = nn_cuda_begin(ex);
    if (!c || !bytes)
        return;
    (void)NN_CUDA_OK(ex, cudaMemcpyAsync(dst, src, bytes,
                                         cudaMemcpyHostToDevice, c->stream));
}

static void nn_cuda_download(const nn_exec *ex, void *dst, const void *src,
                             size_t bytes)
{
    nn_cuda_ctx *c = nn_cuda_begin(ex);
    if (!c || !bytes)
        return;
    if (NN_CUDA_OK(ex, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost,
                                       c->stream)))
        (void)NN_CUDA_OK(ex, cudaStreamSynchronize(c->stream));
}

static void nn_cuda_zero(const nn_exec *ex, void *dst, size_t bytes)
{
    nn_cuda_ctx *c = nn_cuda_begin(ex);
    if (!c || !bytes)
        return;
    (void)NN_CUDA_OK(ex, cudaMemsetAsync(dst, 0, bytes, c->stream));
}

static void nn_cuda_copy(const nn_exec *ex, void *dst, const void *src,
                         size_t bytes)
{
    nn_cuda_ctx *c = nn_cuda_begin(ex);
    if (!c || !bytes || dst == src)
        return;
    (void)NN_CUDA_OK(ex, cudaMemcpyAsync(dst, src, bytes,
                                         cudaMemcpyDeviceToDevice, c->stream));
}

/* Reports the recorded failure; also picks up a fault of work already
 * finished on the stream (an illegal address in a kernel surfaces only
 * there), without waiting for work still running. */
static ty_status nn_cuda_status(const nn_exec *ex, ty_err *err)
{
    nn_cuda_ctx *c = ex ? nn_cuda_ctx_of(ex) : NULL;
    if (!c)
        return ty_fail(err, TY_EDEVICE, NULL,
                       "CUDA error: no CUDA execution context");
    if (!c->failed) {
        cudaError_t e = cudaStreamQuery(c->stream);
        if (e != cudaSuccess && e != cudaErrorNotReady)
            nn_cuda_fail(ex, "cudaStreamQuery", cudaGetErrorString(e));
    }
    if (c->failed)
        return ty_fail(err, TY_EDEVICE, NULL, "%s", c->what);
    return TY_OK;
}

/* ---- the table ---- */

/* An op is supported when the table has its kernels: the cuDNN ones
 * (convolution, pooling, batch norm) join when conv.cu, pool.cu and norm.cu
 * fill them. */
static int nn_cuda_supports(nn_op op)
{
    const nn_backend *t = &nn_backend_cuda;
    switch (op) {
        case NN_OP_GEMM: return t->gemm != NULL;
        case NN_OP_BIAS_ROWS: return t->bias_rows != NULL;
        case NN_OP_BIAS_GRAD: return t->bias_grad != NULL;
        case NN_OP_RELU:
        case NN_OP_TANH:
        case NN_OP_SIGMOID:
        case NN_OP_GELU: return t->act_forward && t->act_backward;
        case NN_OP_DROPOUT: return t->dropout_forward && t->dropout_backward;
        case NN_OP_SOFTMAX_XENT: return t->softmax_xent != NULL;
        case NN_OP_MSE: return t->mse != NULL;
        case NN_OP_SGD: return t->sgd != NULL;
        case NN_OP_ADAM: return t->adam != NULL;
        case NN_OP_BATCHNORM:
            return t->batchnorm_forward && t->batchnorm_backward;
        case NN_OP_LAYERNORM:
            return t->layernorm_forward && t->layernorm_backward;
        case NN_OP_LEAKY_RELU:
            return t->leaky_relu_forward && t->leaky_relu_backward;
        case NN_OP_SOFTMAX: return t->softmax_forward && t->softmax_backward;
        case NN_OP_ADD: return t->add != NULL;
        case NN_OP_SOFTMAX_XENT_SMOOTH: return t->softmax_xent_smooth != NULL;
        case NN_OP_BCE_LOGITS: return t->bce_logits != NULL;
        case NN_OP_HUBER: return t->huber != NULL;
        case NN_OP_SUM_SQUARES: return t->sum_squares != NULL;
        case NN_OP_SCALE: return t->scale != NULL;
        case NN_OP_CONV2D:
            return t->conv2d_work && t->conv2d_forward && t->conv2d_backward;
        case NN_OP_MAXPOOL2D:
        case NN_OP_AVGPOOL2D: return t->pool2d_forward && t->pool2d_backward;
        case NN_OP_CAST: return t->cast != NULL;
        case NN_OP_GEMM_LP: return t->gemm_lp != NULL;
        case NN_OP_GELU_TANH: return t->act_forward && t->act_backward;
        case NN_OP_EMBEDDING:
            return t->embedding_forward && t->embedding_backward && t->to_ids;
        case NN_OP_ATTENTION:
            return t->attention_forward && t->attention_backward && t->seq_lens;
        case NN_OP_XENT_IGNORE: return t->xent_ignore != NULL;
        case NN_OP_SEQ_POOL:
            return t->seq_pool_forward && t->seq_pool_backward;
        case NN_OP_KV_CACHE:
            return t->kv_store && t->kv_attention && t->rows_gemm;
        default: return 0;
    }
}

const nn_backend nn_backend_cuda = {
    .name = "cuda",
    .alloc = nn_cuda_alloc,
    .release = nn_cuda_release,
    .upload = nn_cuda_upload,
    .download = nn_cuda_download,
    .zero = nn_cuda_zero,
    .copy = nn_cuda_copy,
    .status = nn_cuda_status,
    .supports = nn_cuda_supports,
    .gemm = nn_cuda_gemm,           /* matmul.cu */
    .bias_rows = nn_cuda_bias_rows, /* elementwise.cu */
    .bias_grad = nn_cuda_bias_grad,
    .act_forward = nn_cuda_act_forward,
    .act_backward = nn_cuda_act_backward,
    .dropout_forward = nn_cuda_dropout_forward,
    .dropout_backward = nn_cuda_dropout_backward,
    .softmax_xent = nn_cuda_softmax_xent, /* loss.cu */
    .mse = nn_cuda_mse,
    .sgd = nn_cuda_sgd, /* optim.cu */
    .adam = nn_cuda_adam,
    .batchnorm_forward = nn_cuda_batchnorm_forward, /* norm.cu */
    .batchnorm_backward = nn_cuda_batchnorm_backward,
    .layernorm_forward = nn_cuda_layernorm_forward,
    .layernorm_backward = nn_cuda_layernorm_backward,
    .leaky_relu_forward = nn_cuda_leaky_relu_forward, /* elementwise.cu */
    .leaky_relu_backward = nn_cuda_leaky_relu_backward,
    .softmax_forward = nn_cuda_softmax_forward, /* norm.cu */
    .softmax_backward = nn_cuda_softmax_backward,
    .add = nn_cuda_add,                                 /* elementwise.cu */
    .softmax_xent_smooth = nn_cuda_softmax_xent_smooth, /* loss.cu */
    .bce_logits = nn_cuda_bce_logits,
    .huber = nn_cuda_huber,
    .sum_squares = nn_cuda_sum_squares,
    .scale = nn_cuda_scale,             /* elementwise.cu */
    .conv2d_work = nn_cuda_conv2d_work, /* conv.cu */
    .conv2d_forward = nn_cuda_conv2d_forward,
    .conv2d_backward = nn_cuda_conv2d_backward,
    .pool2d_forward = nn_cuda_pool2d_forward, /* pool.cu */
    .pool2d_backward = nn_cuda_pool2d_backward,
    .host_alloc = nn_cuda_host_alloc, /* graph.cu */
    .host_release = nn_cuda_host_release,
    .fence_create = nn_cuda_fence_create,
    .fence_record = nn_cuda_fence_record,
    .fence_wait = nn_cuda_fence_wait,
    .fence_release = nn_cuda_fence_release,
    .graph_begin = nn_cuda_graph_begin,
    .graph_end = nn_cuda_graph_end,
    .graph_launch = nn_cuda_graph_launch,
    .graph_release = nn_cuda_graph_release,
    .cast = nn_cuda_cast, /* lp.cu */
    .gemm_lp = nn_cuda_gemm_lp,
    .lp_ok = nn_cuda_lp_ok,
    .embedding_forward = nn_cuda_embedding_forward, /* embedding.cu */
    .embedding_backward = nn_cuda_embedding_backward,
    .to_ids = nn_cuda_to_ids,
    .attention_forward = nn_cuda_attention_forward, /* attention.cu */
    .attention_backward = nn_cuda_attention_backward,
    .seq_lens = nn_cuda_seq_lens,
    .seq_pool_forward = nn_cuda_seq_pool_forward, /* seqpool.cu */
    .seq_pool_backward = nn_cuda_seq_pool_backward,
    .kv_store = nn_cuda_kv_store, /* kvcache.cu */
    .kv_attention = nn_cuda_kv_attention,
    .rows_gemm = nn_cuda_rows_gemm,
    .xent_ignore = nn_cuda_xent_ignore, /* embedding.cu */
};
