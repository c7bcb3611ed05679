/*
 * pool.c - the CPU backend's pooling kernels (NN_OP_MAXPOOL2D,
 * NN_OP_AVGPOOL2D) over NCHW activations.
 *
 * Pooling splits the batch's (example, channel) planes across parts, so
 * each output (and each input gradient) is written by exactly one part:
 * results do not depend on the thread count.
 */
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic", \
                     "no-tree-loop-distribute-patterns")

#include "models/cpu/cpu_internal.h"

#include <assert.h>
#include <math.h>
#include <string.h>

typedef struct {
    nn_op op;
    const nn_conv_desc *d;
    size_t planes;
    float *out, *din;
    int32_t *argmax;
    const float *in, *dout;
    const int32_t *argmax_in;
} pool_job;

/* The window of output (oh, ow) clipped to the input: rows [*h0, *h1),
 * columns [*w0, *w1). Never empty: padding is at most half the window. */
static inline void pool_window(const nn_conv_desc *d, uint32_t oh, uint32_t ow,
                               uint32_t *h0, uint32_t *h1, uint32_t *w0,
                               uint32_t *w1)
{
    int64_t hs = (int64_t)oh * d->stride[0] - d->pad[0];
    int64_t ws = (int64_t)ow * d->stride[1] - d->pad[1];
    int64_t he = hs + d->kernel[0], we = ws + d->kernel[1];
    *h0 = (uint32_t)(hs < 0 ? 0 : hs);
    *w0 = (uint32_t)(ws < 0 ? 0 : ws);
    *h1 = (uint32_t)(he > d->in_h ? d->in_h : he);
    *w1 = (uint32_t)(we > d->in_w ? d->in_w : we);
}

/* One output row of a 2x2, stride-2 max pool from input rows r0 and r0 + W;
 * the argmax row (when wanted) gets base + the index within those rows. */
static void maxpool2x2_row(float *restrict y, int32_t *restrict arg,
                           const float *restrict r0, uint32_t W, uint32_t n,
                           int32_t base)
{
    const float *restrict r1 = r0 + W;
    const int32_t w = (int32_t)W;
    if (!arg) {
        for (uint32_t o = 0; o < n; o++) {
            float m = r0[2 * o], v = r0[2 * o + 1];
            m = (v > m) | (v != v) ? v : m;
            v = r1[2 * o];
            m = (v > m) | (v != v) ? v : m;
            v = r1[2 * o + 1];
            y[o] = (v > m) | (v != v) ? v : m;
        }
        return;
    }
    for (uint32_t o = 0; o < n; o++) {
        float m = r0[2 * o], v = r0[2 * o + 1];
        int32_t at = 0;
        int take = (v > m) | (v != v);
        m = take ? v : m;
        at = take ? 1 : at;
        v = r1[2 * o];
        take = (v > m) | (v != v);
        m = take ? v : m;
        at = take ? w : at;
        v = r1[2 * o + 1];
        take = (v > m) | (v != v);
        m = take ? v : m;
        at = take ? w + 1 : at;
        y[o] = m;
        arg[o] = base + 2 * (int32_t)o + at;
    }
}

/* As PyTorch's CPU kernel: the first maximum in window order wins, a NaN
 * replaces whatever came before it. */
static void maxpool_plane(float *restrict y, int32_t *restrict arg,
                          const float *restrict x, const nn_conv_desc *d)
{
    const uint32_t W = d->in_w;
    if (d->kernel[0] == 2 && d->kernel[1] == 2 && d->stride[0] == 2 &&
        d->stride[1] == 2 && d->pad[0] == 0 && d->pad[1] == 0) {
        /* The common 2x2/2 case: no clipping, a fixed window, and selects
         * instead of branches so the compiler vectorizes it (random data
         * mispredicts every other branch). */
        for (uint32_t oh = 0; oh < d->out_h; oh++)
            maxpool2x2_row(y + (size_t)oh * d->out_w,
                           arg ? arg + (size_t)oh * d->out_w : NULL,
                           x + (size_t)2 * oh * W, W, d->out_w,
                           (int32_t)(2 * oh * W));
        return;
    }
    for (uint32_t oh = 0; oh < d->out_h; oh++) {
        for (uint32_t ow = 0; ow < d->out_w; ow++) {
            uint32_t h0, h1, w0, w1;
            pool_window(d, oh, ow, &h0, &h1, &w0, &w1);
            float m = -INFINITY;
            uint32_t at = h0 * W + w0;
            for (uint32_t ih = h0; ih < h1; ih++)
                for (uint32_t iw = w0; iw < w1; iw++) {
                    float v = x[(size_t)ih * W + iw];
                    if (v > m || isnan(v)) {
                        m = v;
                        at = ih * W + iw;
                    }
                }
            y[(size_t)oh * d->out_w + ow] = m;
            if (arg)
                arg[(size_t)oh * d->out_w + ow] = (int32_t)at;
        }
    }
}

static void avgpool_plane(float *restrict y, const float *restrict x,
                          const nn_conv_desc *d)
{
    const float inv = 1.0f / (float)(d->kernel[0] * d->kernel[1]);
    if (d->kernel[0] == d->in_h && d->kernel[1] == d->in_w && !d->pad[0] &&
        !d->pad[1]) { /* global average pooling: one window, the plane */
        *y = nn_cpu_row_sum(x, (size_t)d->in_h * d->in_w) * inv;
        return;
    }
    for (uint32_t oh = 0; oh < d->out_h; oh++) {
        for (uint32_t ow = 0; ow < d->out_w; ow++) {
            uint32_t h0, h1, w0, w1;
            pool_window(d, oh, ow, &h0, &h1, &w0, &w1);
            float sum = 0.0f;
            for (uint32_t ih = h0; ih < h1; ih++)
                for (uint32_t iw = w0; iw < w1; iw++)
                    sum += x[(size_t)ih * d->in_w + iw];
            y[(size_t)oh * d->out_w + ow] = sum * inv;
        }
    }
}

static void avgpool_plane_backward(float *restrict dx, const float *restrict dy,
                                   const nn_conv_desc *d)
{
    const float inv = 1.0f / (float)(d->kernel[0] * d->kernel[1]);
    for (uint32_t oh = 0; oh < d->out_h; oh++) {
        for (uint32_t ow = 0; ow < d->out_w; ow++) {
            uint32_t h0, h1, w0, w1;
            pool_window(d, oh, ow, &h0, &h1, &w0, &w1);
            float g = dy[(size_t)oh * d->out_w + ow] * inv;
            for (uint32_t ih = h0; ih < h1; ih++)
                for (uint32_t iw = w0; iw < w1; iw++)
                    dx[(size_t)ih * d->in_w + iw] += g;
        }
    }
}

static void pool_forward_part(void *arg, int part, int parts)
{
    const pool_job *j = arg;
    const nn_conv_desc *d = j->d;
    const size_t hw = (size_t)d->in_h * d->in_w;
    const size_t ohw = (size_t)d->out_h * d->out_w;
    size_t b, e;
    nn_pool_range(j->planes, part, parts, 1, &b, &e);
    for (size_t p = b; p < e; p++) {
        if (j->op == NN_OP_MAXPOOL2D)
            maxpool_plane(j->out + p * ohw,
                          j->argmax ? j->argmax + p * ohw : NULL,
                          j->in + p * hw, d);
        else
            avgpool_plane(j->out + p * ohw, j->in + p * hw, d);
    }
}

static void pool_backward_part(void *arg, int part, int parts)
{
    const pool_job *j = arg;
    const nn_conv_desc *d = j->d;
    const size_t hw = (size_t)d->in_h * d->in_w;
    const size_t ohw = (size_t)d->out_h * d->out_w;
    size_t b, e;
    nn_pool_range(j->planes, part, parts, 1, &b, &e);
    if (e <= b)
        return;
    memset(j->din + b * hw, 0, (e - b) * hw * sizeof *j->din);
    for (size_t p = b; p < e; p++) {
        float *dx = j->din + p * hw;
        const float *dy = j->dout + p * ohw;
        if (j->op == NN_OP_MAXPOOL2D) {
            const int32_t *at = j->argmax_in + p * ohw;
            for (size_t i = 0; i < ohw; i++)
                dx[at[i]] += dy[i];
        } else {
            avgpool_plane_backward(dx, dy, d);
        }
    }
}

void nn_cpu_pool2d_forward(const nn_exec *ex, nn_op op, float *out,
                           int32_t *argmax, const float *in, uint32_t n,
                           const nn_conv_desc *d)
{
    pool_job j = {.op = op,
                  .d = d,
                  .planes = (size_t)n * d->in_c,
                  .out = out,
                  .argmax = argmax,
                  .in = in};
    assert(op == NN_OP_MAXPOOL2D || op == NN_OP_AVGPOOL2D);
    const double values = (double)j.planes * d->in_h * d->in_w;
    nn_pool_run(nn_cpu_pool_for(ex, values, PAR_MIN_ELEMS), pool_forward_part,
                &j);
}

void nn_cpu_pool2d_backward(const nn_exec *ex, nn_op op, float *din,
                            const float *dout, const int32_t *argmax,
                            uint32_t n, const nn_conv_desc *d)
{
    pool_job j = {.op = op,
                  .d = d,
                  .planes = (size_t)n * d->in_c,
                  .din = din,
                  .dout = dout,
                  .argmax_in = argmax};
    assert(op == NN_OP_AVGPOOL2D || argmax);
    const double values = (double)j.planes * d->in_h * d->in_w;
    nn_pool_run(nn_cpu_pool_for(ex, values, PAR_MIN_ELEMS), pool_backward_part,
                &j);
}
