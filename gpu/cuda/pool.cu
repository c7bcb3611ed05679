/*
 * pool.cu - the CUDA backend's max and average pooling over NCHW float
 * activations, with the semantics of the CPU reference
 * (models/cpu/pool.c).
 *
 * Pooling runs own kernels that do, per output value, the CPU's
 * arithmetic in the CPU's order with contraction into FMA ruled out (the
 * __f*_rn intrinsics; the CPU build is strict C11, which does not
 * contract): results are bit-identical to the CPU backend.
 *   - cuDNN's max-pooling backward needs x and y, which the member does
 *     not get, and returns no argmax; own kernels write and read the CPU's
 *     argmax layout (index within the plane) instead.
 *   - Pooling backward gathers: each input value sums the gradients routed
 *     to it in ascending output order, which is the order of the CPU's
 *     scatter, with no atomics.
 */
#include "gpu/cuda/cuda_internal.h"

#include <math.h>

typedef struct {
    uint32_t in_h, in_w, out_h, out_w;
    uint32_t kh, kw, sh, sw, ph, pw;
} pool_geom;

static pool_geom pool_geom_of(const nn_conv_desc *d)
{
    pool_geom g = {d->in_h,      d->in_w,      d->out_h,     d->out_w,
                   d->kernel[0], d->kernel[1], d->stride[0], d->stride[1],
                   d->pad[0],    d->pad[1]};
    return g;
}

/* The window of output (oh, ow) clipped to the input, as pool_window. */
static __device__ void pool_window(const pool_geom &g, uint32_t oh, uint32_t ow,
                                   uint32_t *h0, uint32_t *h1, uint32_t *w0,
                                   uint32_t *w1)
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
    int64_t a = (int64_t)i + p; /* o * s <= a < o * s + k */
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

/* nn_cpu_row_sum of models/cpu/cpu_internal.h: 16 interleaved partials, a fixed tree. */
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
        if (global) { /* as the CPU's global-average shortcut */
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
                                            const int32_t *argmax, size_t total,
                                            pool_geom g, float inv, int is_max)
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

extern "C" void nn_cuda_pool2d_forward(const nn_exec *ex, nn_op op, float *out,
                                       int32_t *argmax, const float *in,
                                       uint32_t n, const nn_conv_desc *d)
{
    nn_cuda_ctx *ctx = nn_cuda_ctx_of(ex);
    const size_t total = (size_t)n * d->in_c * d->out_h * d->out_w;
    if (ctx->failed || total == 0)
        return;
    pool_geom g = pool_geom_of(d);
    if (op == NN_OP_MAXPOOL2D) {
        maxpool_forward_kernel<<<nn_cuda_blocks_for(total), NN_CUDA_THREADS, 0,
                                 ctx->stream>>>(out, argmax, in, total, g);
        nn_cuda_launch_ok(ex, "maxpool_forward_kernel");
    } else {
        int global = d->kernel[0] == d->in_h && d->kernel[1] == d->in_w &&
                     !d->pad[0] && !d->pad[1];
        avgpool_forward_kernel<<<nn_cuda_blocks_for(total), NN_CUDA_THREADS, 0,
                                 ctx->stream>>>(out, in, total, g, pool_inv(d),
                                                global);
        nn_cuda_launch_ok(ex, "avgpool_forward_kernel");
    }
}

extern "C" void nn_cuda_pool2d_backward(const nn_exec *ex, nn_op op, float *din,
                                        const float *dout,
                                        const int32_t *argmax, uint32_t n,
                                        const nn_conv_desc *d)
{
    nn_cuda_ctx *ctx = nn_cuda_ctx_of(ex);
    const size_t total = (size_t)n * d->in_c * d->in_h * d->in_w;
    if (ctx->failed || total == 0)
        return;
    pool_backward_kernel<<<nn_cuda_blocks_for(total), NN_CUDA_THREADS, 0,
                           ctx->stream>>>(din, dout, argmax, total,
                                          pool_geom_of(d), pool_inv(d),
                                          op == NN_OP_MAXPOOL2D);
    nn_cuda_launch_ok(ex, "pool_backward_kernel");
}
