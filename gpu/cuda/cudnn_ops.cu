/*
 * cudnn_ops.cu - the CUDA backend's convolution (cuDNN), pooling and batch
 * normalization (own kernels) over NCHW float activations, with the
 * semantics of the CPU reference (models/cpu/conv.c,
 * models/cpu/norm.c).
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
 *
 * Pooling and batch norm are own kernels that do, per output value, the
 * CPU's arithmetic in the CPU's order with contraction into FMA ruled out
 * (the __f*_rn / __d*_rn intrinsics; the CPU build is strict C11, which
 * does not contract): results are bit-identical to the CPU backend.
 *   - cuDNN's max-pooling backward needs x and y, which the member does
 *     not get, and returns no argmax; own kernels write and read the CPU's
 *     argmax layout (index within the plane) instead.
 *   - Pooling backward gathers: each input value sums the gradients routed
 *     to it in ascending output order, which is the order of the CPU's
 *     scatter, with no atomics.
 *   - Batch norm: one block per channel; each row of s values is summed in
 *     the CPU's 8 interleaved lanes (one thread per lane) plus a tail, and
 *     rows are added in order in double by one thread. The running
 *     statistics follow torch (momentum, unbiased variance) in double, as
 *     the CPU does; cudnnBatchNormalizationForwardTraining would match
 *     those semantics but not the CPU's bits.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "gpu/cuda/cuda_internal.h"

#define THREADS 256
#define MAX_BLOCKS (1u << 20)
/* Largest workspace conv2d_work asks for one convolution: faster
 * algorithms that need more are passed over. */
#define CONV_WORK_CAP ((size_t)256 << 20)
/* cuDNN's 4-d descriptors hold int sizes. */
#define INT_LIMIT 2147483647u

static unsigned blocks_for(size_t total)
{
    size_t b = (total + THREADS - 1) / THREADS;
    if (b < 1)
        b = 1;
    return b > MAX_BLOCKS ? MAX_BLOCKS : (unsigned)b;
}

/* Checks the launch just made; kernel names the kernel for the error. */
static int launched(const nn_exec *ex, const char *kernel)
{
    return nn_cuda_check_rt(ex, cudaGetLastError(), kernel);
}

/* ================================================================
 * Convolution (cuDNN)
 * ================================================================ */

enum { CONV_FWD = 1, CONV_BWD_DATA = 2, CONV_BWD_FILTER = 4 };

/* Descriptors for a chunk of `batch` examples and the algorithms chosen
 * for it. */
typedef struct {
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    uint32_t batch;            /* 0: not set yet */
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t data;
    cudnnConvolutionBwdFilterAlgo_t filter;
    size_t fwd_ws, data_ws, filter_ws;   /* bytes */
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

/* The first (fastest by the heuristics) deterministic fp32 algorithm whose
 * workspace fits limit, among the N candidates `get` lists; `size` asks an
 * algorithm's workspace. Returns 1 found (*algo, *ws set), 0 none fits, -1
 * a failed call (recorded). The three directions differ only in their
 * cuDNN types and functions. */
template <typename Perf, typename Algo, int N, typename Get, typename Size>
static int pick_algo(const nn_exec *ex, const char *get_name, Get get,
                     const char *size_name, Size size, size_t limit,
                     Algo *algo, size_t *ws)
{
    Perf perf[N];
    int got = 0;
    if (!nn_cuda_check_dnn(ex, get(N, &got, perf), get_name))
        return -1;
    for (int i = 0; i < got; i++) {
        size_t need = 0;
        if (perf[i].status != CUDNN_STATUS_SUCCESS ||
            perf[i].determinism != CUDNN_DETERMINISTIC ||
            !math_ok(ex, perf[i].mathType) || perf[i].memory > limit)
            continue;
        if (!nn_cuda_check_dnn(ex, size(perf[i].algo, &need), size_name))
            return -1;
        if (need > limit)
            continue;
        *algo = perf[i].algo;
        *ws = need;
        return 1;
    }
    return 0;
}

static int pick_fwd(const nn_exec *ex, cudnnHandle_t h, conv_plan *p,
                    size_t limit)
{
    return pick_algo<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t,
                     CUDNN_CONVOLUTION_FWD_ALGO_COUNT>(
        ex, "cudnnGetConvolutionForwardAlgorithm_v7",
        [&](int n, int *got, cudnnConvolutionFwdAlgoPerf_t *perf) {
            return cudnnGetConvolutionForwardAlgorithm_v7(
                h, p->x, p->w, p->conv, p->y, n, got, perf);
        },
        "cudnnGetConvolutionForwardWorkspaceSize",
        [&](cudnnConvolutionFwdAlgo_t a, size_t *need) {
            return cudnnGetConvolutionForwardWorkspaceSize(
                h, p->x, p->w, p->conv, p->y, a, need);
        },
        limit, &p->fwd, &p->fwd_ws);
}

static int pick_data(const nn_exec *ex, cudnnHandle_t h, conv_plan *p,
                     size_t limit)
{
    return pick_algo<cudnnConvolutionBwdDataAlgoPerf_t,
                     cudnnConvolutionBwdDataAlgo_t,
                     CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT>(
        ex, "cudnnGetConvolutionBackwardDataAlgorithm_v7",
        [&](int n, int *got, cudnnConvolutionBwdDataAlgoPerf_t *perf) {
            return cudnnGetConvolutionBackwardDataAlgorithm_v7(
                h, p->w, p->y, p->conv, p->x, n, got, perf);
        },
        "cudnnGetConvolutionBackwardDataWorkspaceSize",
        [&](cudnnConvolutionBwdDataAlgo_t a, size_t *need) {
            return cudnnGetConvolutionBackwardDataWorkspaceSize(
                h, p->w, p->y, p->conv, p->x, a, need);
        },
        limit, &p->data, &p->data_ws);
}

static int pick_filter(const nn_exec *ex, cudnnHandle_t h, conv_plan *p,
                       size_t limit)
{
    return pick_algo<cudnnConvolutionBwdFilterAlgoPerf_t,
                     cudnnConvolutionBwdFilterAlgo_t,
                     CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>(
        ex, "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
        [&](int n, int *got, cudnnConvolutionBwdFilterAlgoPerf_t *perf) {
            return cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                h, p->x, p->y, p->conv, p->w, n, got, perf);
        },
        "cudnnGetConvolutionBackwardFilterWorkspaceSize",
        [&](cudnnConvolutionBwdFilterAlgo_t a, size_t *need) {
            return cudnnGetConvolutionBackwardFilterWorkspaceSize(
                h, p->x, p->y, p->conv, p->w, a, need);
        },
        limit, &p->filter, &p->filter_ws);
}

/* Sets p's descriptors for `batch` examples of geometry d and picks the
 * algorithms `what` needs within limit bytes: 1 ready, 0 some algorithm
 * does not fit, -1 a failed call (recorded). */
static int conv_plan_set(const nn_exec *ex, cudnnHandle_t h, conv_plan *p,
                         const nn_conv_desc *d, uint32_t batch, unsigned what,
                         size_t limit)
{
    p->batch = 0;
    if (!NN_CUDNN_OK(ex, cudnnSetTensor4dDescriptor(
                             p->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                             (int)batch, (int)d->in_c, (int)d->in_h,
                             (int)d->in_w)) ||
        !NN_CUDNN_OK(ex, cudnnSetTensor4dDescriptor(
                             p->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                             (int)batch, (int)d->out_c, (int)d->out_h,
                             (int)d->out_w)) ||
        !NN_CUDNN_OK(ex, cudnnSetFilter4dDescriptor(
                             p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                             (int)d->out_c, (int)(d->in_c / d->groups),
                             (int)d->kernel[0], (int)d->kernel[1])) ||
        !NN_CUDNN_OK(ex, cudnnSetConvolution2dDescriptor(
                             p->conv, (int)d->pad[0], (int)d->pad[1],
                             (int)d->stride[0], (int)d->stride[1],
                             (int)d->dilation[0], (int)d->dilation[1],
                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT)) ||
        !NN_CUDNN_OK(ex, cudnnSetConvolutionGroupCount(p->conv,
                                                       (int)d->groups)) ||
        !NN_CUDNN_OK(ex, cudnnSetConvolutionMathType(
                             p->conv, tf32_allowed(ex) ? CUDNN_DEFAULT_MATH
                                                       : CUDNN_FMA_MATH)))
        return -1;
    int r = 1;
    if (what & CONV_FWD)
        r = pick_fwd(ex, h, p, limit);
    if (r == 1 && (what & CONV_BWD_DATA))
        r = pick_data(ex, h, p, limit);
    if (r == 1 && (what & CONV_BWD_FILTER))
        r = pick_filter(ex, h, p, limit);
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
static uint32_t conv_plan_fit(const nn_exec *ex, cudnnHandle_t h,
                              conv_plan *p, const nn_conv_desc *d,
                              uint32_t want, unsigned what, size_t limit)
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

/* Fixed-order sum of v over a block of THREADS threads (result valid in
 * thread 0); every thread must call it. */
static __device__ double block_sum(double v)
{
    __shared__ double part[THREADS];
    part[threadIdx.x] = v;
    __syncthreads();
    for (unsigned k = THREADS / 2; k > 0; k /= 2) {
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
    for (size_t q = threadIdx.x; q < count; q += THREADS) {
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
        if (!NN_CUDNN_OK(ex, cudnnConvolutionForward(
                                 ctx->dnn, &one, p.x, in + s * in_numel, p.w,
                                 weight, p.conv, p.fwd,
                                 p.fwd_ws ? ex->work : NULL, p.fwd_ws, &zero,
                                 p.y, out + s * out_numel)))
            goto done;
        s += take;
    }
    if (bias) {
        size_t total = (size_t)n * out_numel;
        conv_bias_kernel<<<blocks_for(total), THREADS, 0, ctx->stream>>>(
            out, bias, total, d->out_c, ohw);
        launched(ex, "conv_bias_kernel");
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
        conv_bias_grad_kernel<<<d->out_c, THREADS, 0, ctx->stream>>>(
            dbias, dout, n, d->out_c, ohw);
        if (!launched(ex, "conv_bias_grad_kernel"))
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
        if (din && !NN_CUDNN_OK(ex, cudnnConvolutionBackwardData(
                                        ctx->dnn, &one, p.w, weight, p.y, dy,
                                        p.conv, p.data,
                                        p.data_ws ? ex->work : NULL,
                                        p.data_ws, &zero, p.x,
                                        din + s * in_numel)))
            goto done;
        s += take;
    }
done:
    conv_plan_free(&p);
}

/* ================================================================
 * Pooling (own kernels, the CPU's arithmetic and order)
 * ================================================================ */

typedef struct {
    uint32_t in_h, in_w, out_h, out_w;
    uint32_t kh, kw, sh, sw, ph, pw;
} pool_geom;

static pool_geom pool_geom_of(const nn_conv_desc *d)
{
    pool_geom g = {d->in_h,      d->in_w,      d->out_h,  d->out_w,
                   d->kernel[0], d->kernel[1], d->stride[0], d->stride[1],
                   d->pad[0],    d->pad[1]};
    return g;
}

/* The window of output (oh, ow) clipped to the input, as pool_window. */
static __device__ void pool_window(const pool_geom &g, uint32_t oh,
                                   uint32_t ow, uint32_t *h0, uint32_t *h1,
                                   uint32_t *w0, uint32_t *w1)
{
    int64_t hs = (int64_t)oh * g.sh - g.ph, ws = (int64_t)ow * g.sw - g.pw;
    int64_t he = hs + g.kh, we = ws + g.kw;
    *h0 = (uint32_t)(hs < 0 ? 0 : hs);
    *w0 = (uint32_t)(ws < 0 ? 0 : ws);
    *h1 = (uint32_t)(he > g.in_h ? g.in_h : he);
    *w1 = (uint32_t)(we > g.in_w ? g.in_w : we);
}

/* The outputs [*lo, *hi) along one axis whose window holds input i. */
static __device__ void pool_outputs_of(uint32_t i, uint32_t k, uint32_t s,
                                       uint32_t p, uint32_t out, uint32_t *lo,
                                       uint32_t *hi)
{
    int64_t a = (int64_t)i + p;             /* o * s <= a < o * s + k */
    int64_t l = a - (int64_t)k + 1;
    l = l <= 0 ? 0 : (l + s - 1) / s;
    int64_t h = a / s + 1;
    if (h > out)
        h = out;
    if (l > h)
        l = h;
    *lo = (uint32_t)l;
    *hi = (uint32_t)h;
}

/* One thread per output value; first maximum in window order, NaN wins. */
static __global__ void maxpool_forward_kernel(float *out, int32_t *argmax,
                                              const float *in, size_t total,
                                              pool_geom g)
{
    const size_t ohw = (size_t)g.out_h * g.out_w;
    const size_t hw = (size_t)g.in_h * g.in_w;
    for (size_t o = (size_t)blockIdx.x * blockDim.x + threadIdx.x; o < total;
         o += (size_t)gridDim.x * blockDim.x) {
        size_t plane = o / ohw, r = o % ohw;
        uint32_t oh = (uint32_t)(r / g.out_w), ow = (uint32_t)(r % g.out_w);
        const float *x = in + plane * hw;
        uint32_t h0, h1, w0, w1;
        pool_window(g, oh, ow, &h0, &h1, &w0, &w1);
        float m = -INFINITY;
        uint32_t at = h0 * g.in_w + w0;
        for (uint32_t ih = h0; ih < h1; ih++)
            for (uint32_t iw = w0; iw < w1; iw++) {
                float v = x[(size_t)ih * g.in_w + iw];
                if (v > m || isnan(v)) {
                    m = v;
                    at = ih * g.in_w + iw;
                }
            }
        out[o] = m;
        if (argmax)
            argmax[o] = (int32_t)at;
    }
}

/* row_sum of backend_cpu_conv.c: 16 interleaved partials, a fixed tree. */
static __device__ float row_sum16(const float *x, size_t n)
{
    float acc[16];
    for (int k = 0; k < 16; k++)
        acc[k] = 0.0f;
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++)
            acc[k] = __fadd_rn(acc[k], x[i + k]);
    for (; i < n; i++)
        acc[i % 16] = __fadd_rn(acc[i % 16], x[i]);
    for (int k = 8; k >= 1; k /= 2)
        for (int j = 0; j < k; j++)
            acc[j] = __fadd_rn(acc[j], acc[j + k]);
    return acc[0];
}

/* One thread per output value; the full window is the divisor. */
static __global__ void avgpool_forward_kernel(float *out, const float *in,
                                              size_t total, pool_geom g,
                                              float inv, int global)
{
    const size_t ohw = (size_t)g.out_h * g.out_w;
    const size_t hw = (size_t)g.in_h * g.in_w;
    for (size_t o = (size_t)blockIdx.x * blockDim.x + threadIdx.x; o < total;
         o += (size_t)gridDim.x * blockDim.x) {
        size_t plane = o / ohw, r = o % ohw;
        const float *x = in + plane * hw;
        if (global) {   /* as the CPU's global-average shortcut */
            out[o] = __fmul_rn(row_sum16(x, hw), inv);
            continue;
        }
        uint32_t oh = (uint32_t)(r / g.out_w), ow = (uint32_t)(r % g.out_w);
        uint32_t h0, h1, w0, w1;
        pool_window(g, oh, ow, &h0, &h1, &w0, &w1);
        float sum = 0.0f;
        for (uint32_t ih = h0; ih < h1; ih++)
            for (uint32_t iw = w0; iw < w1; iw++)
                sum = __fadd_rn(sum, x[(size_t)ih * g.in_w + iw]);
        out[o] = __fmul_rn(sum, inv);
    }
}

/* One thread per input value: the sum, in ascending output order, of the
 * gradients routed to it (max: outputs whose argmax is this value;
 * average: every window holding it, times inv). */
static __global__ void pool_backward_kernel(float *din, const float *dout,
                                            const int32_t *argmax,
                                            size_t total, pool_geom g,
                                            float inv, int is_max)
{
    const size_t ohw = (size_t)g.out_h * g.out_w;
    const size_t hw = (size_t)g.in_h * g.in_w;
    for (size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x; q < total;
         q += (size_t)gridDim.x * blockDim.x) {
        size_t plane = q / hw, r = q % hw;
        uint32_t ih = (uint32_t)(r / g.in_w), iw = (uint32_t)(r % g.in_w);
        const float *dy = dout + plane * ohw;
        uint32_t oh0, oh1, ow0, ow1;
        pool_outputs_of(ih, g.kh, g.sh, g.ph, g.out_h, &oh0, &oh1);
        pool_outputs_of(iw, g.kw, g.sw, g.pw, g.out_w, &ow0, &ow1);
        float sum = 0.0f;
        if (is_max) {
            const int32_t *at = argmax + plane * ohw;
            for (uint32_t oh = oh0; oh < oh1; oh++)
                for (uint32_t ow = ow0; ow < ow1; ow++) {
                    size_t o = (size_t)oh * g.out_w + ow;
                    if (at[o] == (int32_t)r)
                        sum = __fadd_rn(sum, dy[o]);
                }
        } else {
            for (uint32_t oh = oh0; oh < oh1; oh++)
                for (uint32_t ow = ow0; ow < ow1; ow++)
                    sum = __fadd_rn(
                        sum, __fmul_rn(dy[(size_t)oh * g.out_w + ow], inv));
        }
        din[q] = sum;
    }
}

static float pool_inv(const nn_conv_desc *d)
{
    return 1.0f / (float)(d->kernel[0] * d->kernel[1]);
}

extern "C" void nn_cuda_pool2d_forward(const nn_exec *ex, nn_op op,
                                       float *out, int32_t *argmax,
                                       const float *in, uint32_t n,
                                       const nn_conv_desc *d)
{
    nn_cuda_ctx *ctx = nn_cuda_ctx_of(ex);
    const size_t total = (size_t)n * d->in_c * d->out_h * d->out_w;
    if (ctx->failed || total == 0)
        return;
    pool_geom g = pool_geom_of(d);
    if (op == NN_OP_MAXPOOL2D) {
        maxpool_forward_kernel<<<blocks_for(total), THREADS, 0,
                                 ctx->stream>>>(out, argmax, in, total, g);
        launched(ex, "maxpool_forward_kernel");
    } else {
        int global = d->kernel[0] == d->in_h && d->kernel[1] == d->in_w &&
                     !d->pad[0] && !d->pad[1];
        avgpool_forward_kernel<<<blocks_for(total), THREADS, 0,
                                 ctx->stream>>>(out, in, total, g,
                                                pool_inv(d), global);
        launched(ex, "avgpool_forward_kernel");
    }
}

extern "C" void nn_cuda_pool2d_backward(const nn_exec *ex, nn_op op,
                                        float *din, const float *dout,
                                        const int32_t *argmax, uint32_t n,
                                        const nn_conv_desc *d)
{
    nn_cuda_ctx *ctx = nn_cuda_ctx_of(ex);
    const size_t total = (size_t)n * d->in_c * d->in_h * d->in_w;
    if (ctx->failed || total == 0)
        return;
    pool_backward_kernel<<<blocks_for(total), THREADS, 0, ctx->stream>>>(
        din, dout, argmax, total, pool_geom_of(d), pool_inv(d),
        op == NN_OP_MAXPOOL2D);
    launched(ex, "pool_backward_kernel");
}

/* ================================================================
 * Batch normalization (own kernels, the CPU's arithmetic and order)
 * ================================================================ */

#define LANES 8
#define BN_ROWS (THREADS / LANES)   /* rows summed at once by a block */

enum { BN_SUM, BN_SUMSQ_DEV, BN_DOT_DEV };

/* One lane of backend_cpu_norm.c's fixed-order row sums: lane L adds the
 * terms at L, L + 8, ... below the last whole group of 8. Terms: BN_SUM
 * a[q]; BN_SUMSQ_DEV (a[q] - m)^2; BN_DOT_DEV a[q] * (b[q] - m). */
static __device__ float bn_term(int kind, const float *a, const float *b,
                                size_t q, float m)
{
    if (kind == BN_SUM)
        return a[q];
    if (kind == BN_SUMSQ_DEV) {
        float d = __fsub_rn(a[q], m);
        return __fmul_rn(d, d);
    }
    return __fmul_rn(a[q], __fsub_rn(b[q], m));
}

/* Per-channel totals over the n rows (i, ch) of s values, summed as the
 * CPU sums them: each row in 8 lanes + a tail combined in a fixed tree
 * (float), rows added in order in double. Two sums at once (kind1 < 0:
 * only one). Every thread of the block calls it; the totals are returned
 * to every thread. */
static __device__ void bn_channel_sums(double *t0, double *t1, int kind0,
                                       int kind1, const float *a,
                                       const float *b, float m, uint32_t n,
                                       uint32_t c, uint32_t s, uint32_t ch)
{
    __shared__ float lane[2][THREADS];
    __shared__ float row[2][BN_ROWS];
    __shared__ double tot[2];
    const uint32_t lane_id = threadIdx.x % LANES, r = threadIdx.x / LANES;
    const size_t full = (size_t)s / LANES * LANES;
    double acc0 = 0.0, acc1 = 0.0;   /* thread 0's running totals */
    for (uint32_t i0 = 0; i0 < n; i0 += BN_ROWS) {
        const uint32_t i = i0 + r;
        if (i < n) {
            const size_t base = ((size_t)i * c + ch) * s;
            const float *ar = a + base, *br = b ? b + base : NULL;
            float l0 = 0.0f, l1 = 0.0f;
            for (size_t q = lane_id; q < full; q += LANES) {
                l0 = __fadd_rn(l0, bn_term(kind0, ar, br, q, m));
                if (kind1 >= 0)
                    l1 = __fadd_rn(l1, bn_term(kind1, ar, br, q, m));
            }
            lane[0][threadIdx.x] = l0;
            lane[1][threadIdx.x] = l1;
        }
        __syncthreads();
        if (i < n && lane_id == 0) {
            const size_t base = ((size_t)i * c + ch) * s;
            const float *ar = a + base, *br = b ? b + base : NULL;
            for (int k = 0; k < (kind1 >= 0 ? 2 : 1); k++) {
                const int kind = k ? kind1 : kind0;
                const float *v = lane[k] + threadIdx.x;
                float tail = 0.0f;
                for (size_t q = full; q < s; q++)
                    tail = __fadd_rn(tail, bn_term(kind, ar, br, q, m));
                row[k][r] = __fadd_rn(
                    __fadd_rn(__fadd_rn(__fadd_rn(v[0], v[4]),
                                        __fadd_rn(v[1], v[5])),
                              __fadd_rn(__fadd_rn(v[2], v[6]),
                                        __fadd_rn(v[3], v[7]))),
                    tail);
            }
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            uint32_t rows = n - i0 < BN_ROWS ? n - i0 : BN_ROWS;
            for (uint32_t k = 0; k < rows; k++) {
                acc0 += row[0][k];
                if (kind1 >= 0)
                    acc1 += row[1][k];
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        tot[0] = acc0;
        tot[1] = acc1;
    }
    __syncthreads();
    *t0 = tot[0];
    *t1 = tot[1];
    __syncthreads();
}

/* One block per channel. */
static __global__ void bn_forward_kernel(float *out, float *mean,
                                         float *invstd, float *rmean,
                                         float *rvar, const float *x,
                                         const float *gamma,
                                         const float *beta, uint32_t n,
                                         uint32_t c, uint32_t s, int training,
                                         float momentum, float eps)
{
    __shared__ float sh_m, sh_scale, sh_shift;
    const uint32_t ch = blockIdx.x;
    const double count = (double)n * s;
    double sum, ss, unused;
    if (training) {
        bn_channel_sums(&sum, &unused, BN_SUM, -1, x, NULL, 0.0f, n, c, s,
                        ch);
        if (threadIdx.x == 0)
            sh_m = (float)(sum / count);
        __syncthreads();
        const float m = sh_m;
        bn_channel_sums(&ss, &unused, BN_SUMSQ_DEV, -1, x, NULL, m, n, c, s,
                        ch);
        if (threadIdx.x == 0) {   /* bn_set_stats */
            mean[ch] = m;
            invstd[ch] = (float)(1.0 / sqrt(ss / count + (double)eps));
            if (rmean) {
                const double mom = momentum;
                rmean[ch] = (float)__dadd_rn(
                    __dmul_rn(mom, (double)m),
                    __dmul_rn(1.0 - mom, (double)rmean[ch]));
                rvar[ch] = (float)__dadd_rn(
                    __dmul_rn(mom, ss / (count - 1.0)),
                    __dmul_rn(1.0 - mom, (double)rvar[ch]));
            }
        }
    } else if (threadIdx.x == 0) {   /* bn_eval_stats */
        mean[ch] = rmean[ch];
        invstd[ch] = (float)(1.0 / sqrt((double)rvar[ch] + (double)eps));
    }
    if (threadIdx.x == 0) {
        const float scale = __fmul_rn(gamma[ch], invstd[ch]);
        sh_scale = scale;
        sh_shift = __fsub_rn(beta[ch], __fmul_rn(mean[ch], scale));
    }
    __syncthreads();
    const float scale = sh_scale, shift = sh_shift;
    const size_t len = (size_t)n * s;
    for (size_t q = threadIdx.x; q < len; q += THREADS) {
        const size_t at = ((q / s) * c + ch) * s + q % s;
        out[at] = __fadd_rn(__fmul_rn(x[at], scale), shift);
    }
}

/* One block per channel: dgamma, dbeta += sums; dx as bn_backward_rows. */
static __global__ void bn_backward_kernel(float *dx, float *dgamma,
                                          float *dbeta, const float *dout,
                                          const float *x, const float *gamma,
                                          const float *mean,
                                          const float *invstd, uint32_t n,
                                          uint32_t c, uint32_t s,
                                          int batch_stats)
{
    __shared__ float sh_k, sh_a, sh_bm;
    const uint32_t ch = blockIdx.x;
    const double count = (double)n * s;
    const float m = mean[ch], istd = invstd[ch];
    double sdy, sdx;
    bn_channel_sums(&sdy, &sdx, BN_SUM, BN_DOT_DEV, dout, x, m, n, c, s, ch);
    if (threadIdx.x == 0) {
        const double dyx = sdx * (double)istd;
        dgamma[ch] = __fadd_rn(dgamma[ch], (float)dyx);
        dbeta[ch] = __fadd_rn(dbeta[ch], (float)sdy);
        sh_k = __fmul_rn(gamma[ch], istd);
        sh_a = batch_stats ? (float)(sdy / count) : 0.0f;
        sh_bm = batch_stats ? __fmul_rn((float)(dyx / count), istd) : 0.0f;
    }
    __syncthreads();
    if (!dx)
        return;
    const float k = sh_k, a = sh_a, bm = sh_bm;
    const size_t len = (size_t)n * s;
    for (size_t q = threadIdx.x; q < len; q += THREADS) {
        const size_t at = ((q / s) * c + ch) * s + q % s;
        dx[at] = __fmul_rn(k, __fsub_rn(__fsub_rn(dout[at], a),
                                        __fmul_rn(__fsub_rn(x[at], m), bm)));
    }
}

extern "C" void nn_cuda_batchnorm_forward(
    const nn_exec *ex, float *out, float *mean, float *invstd,
    float *running_mean, float *running_var, const float *x,
    const float *gamma, const float *beta, uint32_t n, uint32_t c, uint32_t s,
    int training, float momentum, float eps)
{
    nn_cuda_ctx *ctx = nn_cuda_ctx_of(ex);
    if (ctx->failed || c == 0)
        return;
    bn_forward_kernel<<<c, THREADS, 0, ctx->stream>>>(
        out, mean, invstd, running_mean, running_var, x, gamma, beta, n, c,
        s, training, momentum, eps);
    launched(ex, "bn_forward_kernel");
}

extern "C" void nn_cuda_batchnorm_backward(
    const nn_exec *ex, float *dx, float *dgamma, float *dbeta,
    const float *dout, const float *x, const float *gamma, const float *mean,
    const float *invstd, uint32_t n, uint32_t c, uint32_t s, int batch_stats)
{
    nn_cuda_ctx *ctx = nn_cuda_ctx_of(ex);
    if (ctx->failed || c == 0)
        return;
    bn_backward_kernel<<<c, THREADS, 0, ctx->stream>>>(
        dx, dgamma, dbeta, dout, x, gamma, mean, invstd, n, c, s,
        batch_stats);
    launched(ex, "bn_backward_kernel");
}
