/*
 * conv.cu - the CUDA backend's convolution (cuDNN) over NCHW float
 * activations, with the semantics of the CPU reference
 * (models/cpu/conv.c): the workspace query conv2d_work, forward and
 * backward.
 *
 * Convolution runs cuDNN's legacy API with descriptors made per call (host
 * side, cheap) and the workspace in ex->work (never cudaMalloc). The batch
 * goes through cuDNN in chunks of at most NN_CUDA_CONV_BATCH examples, so
 * the workspace (conv2d_work) is independent of the batch size; dweight
 * accumulates over the chunks with beta = 1. Algorithms come from the
 * _v7 heuristics (no timing, so the same choice every run on a device),
 * keeping only those that report CUDNN_DETERMINISTIC, need no Tensor Core
 * math, and fit the arena. Math is CUDNN_FMA_MATH: on Ampere and later
 * CUDNN_DEFAULT_MATH permits TF32, which would not be fp32-accurate. Under
 * reduced-precision training (nn_exec.precision bf16 or fp16) the math is
 * CUDNN_DEFAULT_MATH, which cuDNN documents as permitting TF32 Tensor Core
 * kernels on A100 and later (CUDNN_TENSOR_OP_MATH is documented only as
 * "Tensor Cores permitted, no down-conversion of tensors", so it is not
 * relied on for TF32; PyTorch's allow_tf32 uses DEFAULT too); algorithms
 * reporting Tensor Core math qualify then as well (still
 * deterministic only, still within the arena conv2d_work sized for the
 * fp32 choice, so the memory estimate does not change).
 * Bias add and the bias gradient are own kernels (the gradient a fixed-
 * order block reduction, so it is deterministic).
 */
#include "gpu/cuda/cuda_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* Largest workspace conv2d_work asks for one convolution: faster
 * algorithms that need more are passed over. */
#define CONV_WORK_CAP ((size_t)256 << 20)
/* cuDNN's 4-d descriptors hold int sizes. */
#define INT_LIMIT 2147483647u

enum { CONV_FWD = 1, CONV_BWD_DATA = 2, CONV_BWD_FILTER = 4 };

/* Descriptors for a chunk of `batch` examples and the algorithms chosen
 * for it. */
typedef struct {
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    uint32_t batch; /* 0: not set yet */
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t data;
    cudnnConvolutionBwdFilterAlgo_t filter;
    size_t fwd_ws, data_ws, filter_ws; /* bytes */
} conv_plan;

/* 1 when all descriptors were created (p is then destroyed with
 * conv_plan_free whatever happens next). */
static int conv_plan_init(const nn_exec *ex, conv_plan *p)
{
    memset(p, 0, sizeof *p);
    return NN_CUDNN_OK(ex, cudnnCreateTensorDescriptor(&p->x)) &&
           NN_CUDNN_OK(ex, cudnnCreateTensorDescriptor(&p->y)) &&
           NN_CUDNN_OK(ex, cudnnCreateFilterDescriptor(&p->w)) &&
           NN_CUDNN_OK(ex, cudnnCreateConvolutionDescriptor(&p->conv));
}

/* Destroy results are not recorded: nothing useful can follow them. */
static void conv_plan_free(conv_plan *p)
{
    if (p->conv)
        cudnnDestroyConvolutionDescriptor(p->conv);
    if (p->w)
        cudnnDestroyFilterDescriptor(p->w);
    if (p->y)
        cudnnDestroyTensorDescriptor(p->y);
    if (p->x)
        cudnnDestroyTensorDescriptor(p->x);
}

/* Math that keeps fp32 accuracy: no Tensor Core (TF32/half) kernels. */
static int fp32_math(cudnnMathType_t m)
{
    return m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH;
}

/* Reduced-precision training (ex->precision bf16 or fp16) lets the fp32
 * convolutions run on Tensor Cores in TF32: the descriptor gets
 * CUDNN_DEFAULT_MATH (TF32 permitted on A100 and later), never the
 * down-conversion to half (..._ALLOW_CONVERSION). fp32 runs, and
 * conv2d_work's probe, stay on FMA math. */
static int tf32_allowed(const nn_exec *ex)
{
    return ex->precision != NN_DT_F32;
}

static int math_ok(const nn_exec *ex, cudnnMathType_t m)
{
    return fp32_math(m) || (tf32_allowed(ex) && m == CUDNN_TENSOR_OP_MATH);
}

/* What choosing an algorithm needs to know of one direction (CONV_FWD,
 * CONV_BWD_DATA, CONV_BWD_FILTER): cuDNN's types for it, its _v7
 * heuristic and workspace-size calls with their names (for the error
 * record), and the fields of conv_plan that keep the choice. The three
 * directions differ only in these. */
template <unsigned Dir> struct conv_dir;

template <> struct conv_dir<CONV_FWD> {
    typedef cudnnConvolutionFwdAlgoPerf_t perf;
    typedef cudnnConvolutionFwdAlgo_t algo;
    static const int count = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    static constexpr const char *get_name =
        "cudnnGetConvolutionForwardAlgorithm_v7";
    static constexpr const char *size_name =
        "cudnnGetConvolutionForwardWorkspaceSize";
    static cudnnStatus_t get(cudnnHandle_t h, const conv_plan *p, int n,
                             int *got, perf *out)
    {
        return cudnnGetConvolutionForwardAlgorithm_v7(h, p->x, p->w, p->conv,
                                                      p->y, n, got, out);
    }
    static cudnnStatus_t size(cudnnHandle_t h, const conv_plan *p, algo a,
                              size_t *need)
    {
        return cudnnGetConvolutionForwardWorkspaceSize(h, p->x, p->w, p->conv,
                                                       p->y, a, need);
    }
    static algo *chosen(conv_plan *p) { return &p->fwd; }
    static size_t *ws(conv_plan *p) { return &p->fwd_ws; }
};

template <> struct conv_dir<CONV_BWD_DATA> {
    typedef cudnnConvolutionBwdDataAlgoPerf_t perf;
    typedef cudnnConvolutionBwdDataAlgo_t algo;
    static const int count = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
    static constexpr const char *get_name =
        "cudnnGetConvolutionBackwardDataAlgorithm_v7";
    static constexpr const char *size_name =
        "cudnnGetConvolutionBackwardDataWorkspaceSize";
    static cudnnStatus_t get(cudnnHandle_t h, const conv_plan *p, int n,
                             int *got, perf *out)
    {
        return cudnnGetConvolutionBackwardDataAlgorithm_v7(
            h, p->w, p->y, p->conv, p->x, n, got, out);
    }
    static cudnnStatus_t size(cudnnHandle_t h, const conv_plan *p, algo a,
                              size_t *need)
    {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(
            h, p->w, p->y, p->conv, p->x, a, need);
    }
    static algo *chosen(conv_plan *p) { return &p->data; }
    static size_t *ws(conv_plan *p) { return &p->data_ws; }
};

template <> struct conv_dir<CONV_BWD_FILTER> {
    typedef cudnnConvolutionBwdFilterAlgoPerf_t perf;
    typedef cudnnConvolutionBwdFilterAlgo_t algo;
    static const int count = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
    static constexpr const char *get_name =
        "cudnnGetConvolutionBackwardFilterAlgorithm_v7";
    static constexpr const char *size_name =
        "cudnnGetConvolutionBackwardFilterWorkspaceSize";
    static cudnnStatus_t get(cudnnHandle_t h, const conv_plan *p, int n,
                             int *got, perf *out)
    {
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(
            h, p->x, p->y, p->conv, p->w, n, got, out);
    }
    static cudnnStatus_t size(cudnnHandle_t h, const conv_plan *p, algo a,
                              size_t *need)
    {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(
            h, p->x, p->y, p->conv, p->w, a, need);
    }
    static algo *chosen(conv_plan *p) { return &p->filter; }
    static size_t *ws(conv_plan *p) { return &p->filter_ws; }
};

/* Picks direction Dir's algorithm for p's descriptors: the first (fastest
 * by the heuristics) deterministic fp32 algorithm whose workspace fits
 * limit, among the candidates the heuristic lists. Returns 1 found (the
 * choice and its workspace set in p), 0 none fits, -1 a failed call
 * (recorded). */
template <unsigned Dir>
static int pick_algo(const nn_exec *ex, cudnnHandle_t h, conv_plan *p,
                     size_t limit)
{
    typedef conv_dir<Dir> D;
    typename D::perf perf[D::count];
    int got = 0;
    if (!nn_cuda_check_dnn(ex, D::get(h, p, D::count, &got, perf), D::get_name))
        return -1;
    for (int i = 0; i < got; i++) {
        size_t need = 0;
        if (perf[i].status != CUDNN_STATUS_SUCCESS ||
            perf[i].determinism != CUDNN_DETERMINISTIC ||
            !math_ok(ex, perf[i].mathType) || perf[i].memory > limit)
            continue;
        if (!nn_cuda_check_dnn(ex, D::size(h, p, perf[i].algo, &need),
                               D::size_name))
            return -1;
        if (need > limit)
            continue;
        *D::chosen(p) = perf[i].algo;
        *D::ws(p) = need;
        return 1;
    }
    return 0;
}

/* Sets p's descriptors for `batch` examples of geometry d and picks the
 * algorithms `what` needs within limit bytes: 1 ready, 0 some algorithm
 * does not fit, -1 a failed call (recorded). */
static int conv_plan_set(const nn_exec *ex, cudnnHandle_t h, conv_plan *p,
                         const nn_conv_desc *d, uint32_t batch, unsigned what,
                         size_t limit)
{
    p->batch = 0;
    if (!NN_CUDNN_OK(ex,
                     cudnnSetTensor4dDescriptor(
                         p->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)batch,
                         (int)d->in_c, (int)d->in_h, (int)d->in_w)) ||
        !NN_CUDNN_OK(ex,
                     cudnnSetTensor4dDescriptor(
                         p->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)batch,
                         (int)d->out_c, (int)d->out_h, (int)d->out_w)) ||
        !NN_CUDNN_OK(ex, cudnnSetFilter4dDescriptor(
                             p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                             (int)d->out_c, (int)(d->in_c / d->groups),
                             (int)d->kernel[0], (int)d->kernel[1])) ||
        !NN_CUDNN_OK(ex, cudnnSetConvolution2dDescriptor(
                             p->conv, (int)d->pad[0], (int)d->pad[1],
                             (int)d->stride[0], (int)d->stride[1],
                             (int)d->dilation[0], (int)d->dilation[1],
                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT)) ||
        !NN_CUDNN_OK(ex,
                     cudnnSetConvolutionGroupCount(p->conv, (int)d->groups)) ||
        !NN_CUDNN_OK(ex, cudnnSetConvolutionMathType(
                             p->conv, tf32_allowed(ex) ? CUDNN_DEFAULT_MATH
                                                       : CUDNN_FMA_MATH)))
        return -1;
    int r = 1;
    if (what & CONV_FWD)
        r = pick_algo<CONV_FWD>(ex, h, p, limit);
    if (r == 1 && (what & CONV_BWD_DATA))
        r = pick_algo<CONV_BWD_DATA>(ex, h, p, limit);
    if (r == 1 && (what & CONV_BWD_FILTER))
        r = pick_algo<CONV_BWD_FILTER>(ex, h, p, limit);
    if (r == 1)
        p->batch = batch;
    return r;
}

/* The most examples one cuDNN call takes for geometry d: at most
 * NN_CUDA_CONV_BATCH, and few enough that each tensor's element count fits
 * an int. 0 when not even one example fits. */
static uint32_t conv_batch_cap(const nn_conv_desc *d)
{
    size_t in = (size_t)d->in_c * d->in_h * d->in_w;
    size_t out = (size_t)d->out_c * d->out_h * d->out_w;
    size_t per = in > out ? in : out;
    if (per == 0 || per > INT_LIMIT)
        return 0;
    size_t cap = INT_LIMIT / per;
    return cap < NN_CUDA_CONV_BATCH ? (uint32_t)cap : NN_CUDA_CONV_BATCH;
}

/* Makes p ready for a chunk of up to `want` examples: the largest batch
 * (halving from want) whose algorithms fit limit. Returns that batch, or 0
 * after recording why. */
static uint32_t conv_plan_fit(const nn_exec *ex, cudnnHandle_t h, conv_plan *p,
                              const nn_conv_desc *d, uint32_t want,
                              unsigned what, size_t limit)
{
    for (uint32_t b = want;; b /= 2) {
        int r = conv_plan_set(ex, h, p, d, b, what, limit);
        if (r == 1)
            return b;
        if (r < 0)
            return 0;
        if (b == 1) {
            char why[160];
            snprintf(why, sizeof why,
                     "no deterministic fp32 cuDNN algorithm fits the %zu-byte "
                     "work arena, even for one example",
                     limit);
            nn_cuda_fail(ex, "conv2d", why);
            return 0;
        }
    }
}

/* A context of its own for conv2d_work, which has no nn_exec: a cuDNN
 * handle on the current device of the first caller, used under a lock
 * (a handle serves one thread at a time). */
static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;
static cudnnHandle_t probe_dnn;
static int probe_ok;

static void probe_init(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
        return;
    probe_ok = cudnnCreate(&probe_dnn) == CUDNN_STATUS_SUCCESS;
}

extern "C" size_t nn_cuda_conv2d_work(const nn_conv_desc *d)
{
    uint32_t cap = conv_batch_cap(d);
    pthread_once(&probe_once, probe_init);
    if (!probe_ok || cap == 0)
        return 0;
    /* Calls go through the usual checks into a throwaway context. */
    nn_cuda_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.dnn = probe_dnn;
    nn_exec ex;
    memset(&ex, 0, sizeof ex);
    ex.device = &ctx;
    size_t bytes = 0;
    conv_plan p;
    pthread_mutex_lock(&probe_lock);
    if (conv_plan_init(&ex, &p) &&
        conv_plan_fit(&ex, probe_dnn, &p, d, cap,
                      CONV_FWD | CONV_BWD_DATA | CONV_BWD_FILTER,
                      CONV_WORK_CAP)) {
        bytes = p.fwd_ws;
        if (p.data_ws > bytes)
            bytes = p.data_ws;
        if (p.filter_ws > bytes)
            bytes = p.filter_ws;
    }
    conv_plan_free(&p);
    pthread_mutex_unlock(&probe_lock);
    /* Whole floats, on a 64-float (256-byte) boundary. */
    size_t floats = (bytes + sizeof(float) - 1) / sizeof(float);
    return (floats + 63) / 64 * 64;
}

/* out (n, c, hw) += bias (c) broadcast over each plane. */
static __global__ void conv_bias_kernel(float *out, const float *bias,
                                        size_t total, uint32_t c, size_t hw)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = __fadd_rn(out[i], bias[(i / hw) % c]);
}

/* Fixed-order sum of v over a block of NN_CUDA_THREADS threads (result valid in
 * thread 0); every thread must call it. */
static __device__ double block_sum(double v)
{
    __shared__ double part[NN_CUDA_THREADS];
    part[threadIdx.x] = v;
    __syncthreads();
    for (unsigned k = NN_CUDA_THREADS / 2; k > 0; k /= 2) {
        if (threadIdx.x < k)
            part[threadIdx.x] += part[threadIdx.x + k];
        __syncthreads();
    }
    double r = part[0];
    __syncthreads();
    return r;
}

/* db (c) += sum over n and hw of dout (n, c, hw): one block per channel,
 * a fixed split and a fixed tree, so the same bits every run. */
static __global__ void conv_bias_grad_kernel(float *db, const float *dout,
                                             uint32_t n, uint32_t c, size_t hw)
{
    const uint32_t ch = blockIdx.x;
    const size_t count = (size_t)n * hw;
    double acc = 0.0;
    for (size_t q = threadIdx.x; q < count; q += NN_CUDA_THREADS) {
        size_t i = q / hw, k = q % hw;
        acc += dout[(i * c + ch) * hw + k];
    }
    double total = block_sum(acc);
    if (threadIdx.x == 0)
        db[ch] = __fadd_rn(db[ch], (float)total);
}

extern "C" void nn_cuda_conv2d_forward(const nn_exec *ex, float *out,
                                       const float *in, const float *weight,
                                       const float *bias, uint32_t n,
                                       const nn_conv_desc *d)
{
    nn_cuda_ctx *ctx = nn_cuda_ctx_of(ex);
    if (ctx->failed || n == 0)
        return;
    const size_t in_numel = (size_t)d->in_c * d->in_h * d->in_w;
    const size_t ohw = (size_t)d->out_h * d->out_w;
    const size_t out_numel = d->out_c * ohw;
    const size_t limit = ex->work_floats * sizeof(float);
    const float one = 1.0f, zero = 0.0f;
    uint32_t cap = conv_batch_cap(d);
    conv_plan p;
    if (cap == 0) {
        nn_cuda_fail(ex, "conv2d", "one example exceeds cuDNN's int sizes");
        return;
    }
    if (!conv_plan_init(ex, &p))
        goto done;
    for (uint32_t s = 0; s < n;) {
        uint32_t take = n - s < cap ? n - s : cap;
        if (take != p.batch) {
            take = conv_plan_fit(ex, ctx->dnn, &p, d, take, CONV_FWD, limit);
            if (!take)
                goto done;
            cap = take;
        }
        if (!NN_CUDNN_OK(ex,
                         cudnnConvolutionForward(
                             ctx->dnn, &one, p.x, in + s * in_numel, p.w,
                             weight, p.conv, p.fwd, p.fwd_ws ? ex->work : NULL,
                             p.fwd_ws, &zero, p.y, out + s * out_numel)))
            goto done;
        s += take;
    }
    if (bias) {
        size_t total = (size_t)n * out_numel;
        conv_bias_kernel<<<nn_cuda_blocks_for(total), NN_CUDA_THREADS, 0,
                           ctx->stream>>>(out, bias, total, d->out_c, ohw);
        nn_cuda_launch_ok(ex, "conv_bias_kernel");
    }
done:
    conv_plan_free(&p);
}

extern "C" void nn_cuda_conv2d_backward(const nn_exec *ex, float *din,
                                        float *dweight, float *dbias,
                                        const float *dout, const float *in,
                                        const float *weight, uint32_t n,
                                        const nn_conv_desc *d)
{
    nn_cuda_ctx *ctx = nn_cuda_ctx_of(ex);
    if (ctx->failed || n == 0)
        return;
    const size_t in_numel = (size_t)d->in_c * d->in_h * d->in_w;
    const size_t ohw = (size_t)d->out_h * d->out_w;
    const size_t out_numel = d->out_c * ohw;
    const size_t limit = ex->work_floats * sizeof(float);
    const unsigned what = CONV_BWD_FILTER | (din ? CONV_BWD_DATA : 0);
    const float one = 1.0f, zero = 0.0f;
    uint32_t cap = conv_batch_cap(d);
    conv_plan p;
    if (cap == 0) {
        nn_cuda_fail(ex, "conv2d", "one example exceeds cuDNN's int sizes");
        return;
    }
    if (dbias) {
        conv_bias_grad_kernel<<<d->out_c, NN_CUDA_THREADS, 0, ctx->stream>>>(
            dbias, dout, n, d->out_c, ohw);
        if (!nn_cuda_launch_ok(ex, "conv_bias_grad_kernel"))
            return;
    }
    if (!conv_plan_init(ex, &p))
        goto done;
    for (uint32_t s = 0; s < n;) {
        uint32_t take = n - s < cap ? n - s : cap;
        if (take != p.batch) {
            take = conv_plan_fit(ex, ctx->dnn, &p, d, take, what, limit);
            if (!take)
                goto done;
            cap = take;
        }
        const float *x = in + s * in_numel, *dy = dout + s * out_numel;
        /* dweight accumulates across chunks and calls (beta 1). */
        if (!NN_CUDNN_OK(ex, cudnnConvolutionBackwardFilter(
                                 ctx->dnn, &one, p.x, x, p.y, dy, p.conv,
                                 p.filter, p.filter_ws ? ex->work : NULL,
                                 p.filter_ws, &one, p.w, dweight)))
            goto done;
        if (din &&
            !NN_CUDNN_OK(ex, cudnnConvolutionBackwardData(
                                 ctx->dnn, &one, p.w, weight, p.y, dy, p.conv,
                                 p.data, p.data_ws ? ex->work : NULL, p.data_ws,
                                 &zero, p.x, din + s * in_numel)))
            goto done;
        s += take;
    }
done:
    conv_plan_free(&p);
}
