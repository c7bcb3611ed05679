/*
 * conv.c - the CPU backend's convolution kernels (NN_OP_CONV2D) over NCHW
 * activations.
 *
 * Convolution is im2col + GEMM one example at a time. The batch's examples
 * are split into one contiguous range per pool part; a part unfolds one
 * example (one group at a time) into its slice of the work arena and calls
 * single-threaded OpenBLAS on it:
 *   forward   out (F, OH*OW) = W (F, K) x col (K, OH*OW), K = C/groups*kh*kw,
 *             onto the bias broadcast into out first;
 *   backward  dW_part (F, K) += dout (F, OH*OW) x col^T; db_part += row sums
 *             of dout; dcol = W^T dout (into the same col buffer), folded
 *             back into din by col2im.
 * Per-example GEMMs of these sizes already run near OpenBLAS's single-core
 * peak, so there is no batching across examples (which would need the
 * output transposed back to NCHW). A 1x1, stride-1, unpadded convolution
 * needs no unfolding: the input plane is the col matrix.
 *
 * Determinism: each part writes its own weight/bias gradient partial
 * (its work arena slice); a second pass adds the partials to the gradients
 * in part order, so a thread count always gives the same bits. Everything
 * else (outputs, din) has each element written by exactly one part.
 */
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic", \
                     "no-tree-loop-distribute-patterns")

#include "models/cpu/cpu_internal.h"

#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <string.h>

#define ALIGN16(n) (((size_t)(n) + 15) / 16 * 16)

/* Sizes derived once per call from the descriptor. */
typedef struct {
    size_t hw, ohw;             /* input and output plane sizes */
    size_t in_numel, out_numel; /* per example */
    uint32_t cg, fg;            /* channels and filters per group */
    size_t kg;                  /* rows of col: cg * kh * kw */
    int direct;                 /* 1x1, stride 1, no padding: col = input */
    size_t col_floats, dw_floats;
} conv_geom;

static conv_geom geom_of(const nn_conv_desc *d)
{
    conv_geom g;
    g.hw = (size_t)d->in_h * d->in_w;
    g.ohw = (size_t)d->out_h * d->out_w;
    g.in_numel = d->in_c * g.hw;
    g.out_numel = d->out_c * g.ohw;
    g.cg = d->in_c / d->groups;
    g.fg = d->out_c / d->groups;
    g.kg = (size_t)g.cg * d->kernel[0] * d->kernel[1];
    g.direct = d->kernel[0] == 1 && d->kernel[1] == 1 && d->stride[0] == 1 &&
               d->stride[1] == 1 && d->pad[0] == 0 && d->pad[1] == 0;
    g.col_floats = g.direct ? 0 : g.kg * g.ohw;
    g.dw_floats = (size_t)d->out_c * g.kg;
    return g;
}

/* Work arena layout of a part: [col | dW partial | db partial]. */
size_t nn_cpu_conv2d_work(const nn_conv_desc *d)
{
    conv_geom g = geom_of(d);
    return ALIGN16(g.col_floats) + ALIGN16(g.dw_floats) + ALIGN16(d->out_c);
}

/* The outputs [*lo, *hi) of out whose input index o * s + off lies in
 * [0, n). */
static void valid_range(uint32_t out, uint32_t s, int64_t off, uint32_t n,
                        uint32_t *lo, uint32_t *hi)
{
    int64_t l = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t h = (int64_t)n - 1 - off < 0 ? 0 : ((int64_t)n - 1 - off) / s + 1;
    if (l > out)
        l = out;
    if (h > out)
        h = out;
    if (h < l)
        h = l;
    *lo = (uint32_t)l;
    *hi = (uint32_t)h;
}

/* col (c*kh*kw, oh*ow): row (ci, ki, kj) holds x[ci] sampled at window
 * element (ki, kj) of every output position, zero where that is padding.
 *
 * With stride 1 on both axes and out_w == in_w (a "same" convolution, as in
 * the Fashion CNN), consecutive positions of a col row read consecutive
 * input positions: its valid rows [h_lo, h_hi) are one run of the input
 * plane shifted by offh * W + offw, copied with one memcpy; the few edge
 * columns (ow outside [w_lo, w_hi)), which that run fills from the
 * neighbouring input row, are then set to zero. Any other geometry copies
 * row by row. Both produce the same col, bit for bit. */
static void im2col(float *restrict col, const float *restrict x, uint32_t c,
                   const nn_conv_desc *d)
{
    const uint32_t H = d->in_h, W = d->in_w, OH = d->out_h, OW = d->out_w;
    const uint32_t sh = d->stride[0], sw = d->stride[1];
    const size_t ohw = (size_t)OH * OW;
    const int shifted = sh == 1 && sw == 1 && OW == W;
    for (uint32_t ci = 0; ci < c; ci++) {
        const float *xc = x + (size_t)ci * H * W;
        for (uint32_t ki = 0; ki < d->kernel[0]; ki++) {
            int64_t offh = (int64_t)ki * d->dilation[0] - d->pad[0];
            uint32_t h_lo, h_hi;
            valid_range(OH, sh, offh, H, &h_lo, &h_hi);
            for (uint32_t kj = 0; kj < d->kernel[1]; kj++) {
                int64_t offw = (int64_t)kj * d->dilation[1] - d->pad[1];
                uint32_t w_lo, w_hi;
                valid_range(OW, sw, offw, W, &w_lo, &w_hi);
                float *row =
                    col +
                    (((size_t)ci * d->kernel[0] + ki) * d->kernel[1] + kj) *
                        ohw;
                memset(row, 0, (size_t)h_lo * OW * sizeof *row);
                memset(row + (size_t)h_hi * OW, 0,
                       (size_t)(OH - h_hi) * OW * sizeof *row);
                if (shifted) {
                    /* col index i reads plane index i + shift; indices that
                     * would fall outside the plane are edge columns. */
                    const int64_t shift = offh * (int64_t)W + offw;
                    int64_t a = (int64_t)h_lo * OW, b = (int64_t)h_hi * OW;
                    const int64_t first = a, last = b;
                    if (a + shift < 0)
                        a = -shift;
                    if (b + shift > (int64_t)H * W)
                        b = (int64_t)H * W - shift;
                    if (b > a)
                        memcpy(row + a, xc + a + shift,
                               (size_t)(b - a) * sizeof *row);
                    else
                        a = b = last;
                    for (int64_t i = first; i < a; i++)
                        row[i] = 0.0f;
                    for (int64_t i = b; i < last; i++)
                        row[i] = 0.0f;
                    if (w_lo > 0 || w_hi < OW)
                        for (uint32_t oh = h_lo; oh < h_hi; oh++) {
                            float *restrict r = row + (size_t)oh * OW;
                            for (uint32_t ow = 0; ow < w_lo; ow++)
                                r[ow] = 0.0f;
                            for (uint32_t ow = w_hi; ow < OW; ow++)
                                r[ow] = 0.0f;
                        }
                    continue;
                }
                for (uint32_t oh = h_lo; oh < h_hi; oh++) {
                    const float *restrict src =
                        xc + (size_t)((int64_t)oh * sh + offh) * W + offw;
                    float *restrict dst = row + (size_t)oh * OW;
                    for (uint32_t ow = 0; ow < w_lo; ow++)
                        dst[ow] = 0.0f;
                    if (sw == 1)
                        for (uint32_t ow = w_lo; ow < w_hi; ow++)
                            dst[ow] = src[ow];
                    else
                        for (uint32_t ow = w_lo; ow < w_hi; ow++)
                            dst[ow] = src[(size_t)ow * sw];
                    for (uint32_t ow = w_hi; ow < OW; ow++)
                        dst[ow] = 0.0f;
                }
            }
        }
    }
}

/* The adjoint of im2col: dx (c, H, W) += every col entry at the input
 * position it was read from (padding entries are dropped). */
static void col2im(float *restrict dx, const float *restrict col, uint32_t c,
                   const nn_conv_desc *d)
{
    const uint32_t H = d->in_h, W = d->in_w, OH = d->out_h, OW = d->out_w;
    const uint32_t sh = d->stride[0], sw = d->stride[1];
    const size_t ohw = (size_t)OH * OW;
    for (uint32_t ci = 0; ci < c; ci++) {
        float *xc = dx + (size_t)ci * H * W;
        for (uint32_t ki = 0; ki < d->kernel[0]; ki++) {
            int64_t offh = (int64_t)ki * d->dilation[0] - d->pad[0];
            uint32_t h_lo, h_hi;
            valid_range(OH, sh, offh, H, &h_lo, &h_hi);
            for (uint32_t kj = 0; kj < d->kernel[1]; kj++) {
                int64_t offw = (int64_t)kj * d->dilation[1] - d->pad[1];
                uint32_t w_lo, w_hi;
                valid_range(OW, sw, offw, W, &w_lo, &w_hi);
                const float *row =
                    col +
                    (((size_t)ci * d->kernel[0] + ki) * d->kernel[1] + kj) *
                        ohw;
                for (uint32_t oh = h_lo; oh < h_hi; oh++) {
                    float *restrict dst =
                        xc + (size_t)((int64_t)oh * sh + offh) * W + offw;
                    const float *restrict src = row + (size_t)oh * OW;
                    if (sw == 1)
                        for (uint32_t ow = w_lo; ow < w_hi; ow++)
                            dst[ow] += src[ow];
                    else
                        for (uint32_t ow = w_lo; ow < w_hi; ow++)
                            dst[(size_t)ow * sw] += src[ow];
                }
            }
        }
    }
}

typedef struct {
    const nn_exec *ex;
    const nn_conv_desc *d;
    conv_geom g;
    uint32_t n;
    float *out, *din, *dweight, *dbias;
    const float *in, *weight, *bias, *dout;
} conv_job;

static float *part_work(const nn_exec *ex, int part)
{
    return ex->work + (size_t)part * ex->work_floats;
}

static void conv_forward_part(void *arg, int part, int parts)
{
    const conv_job *j = arg;
    const nn_conv_desc *d = j->d;
    const conv_geom *g = &j->g;
    float *col = g->direct ? NULL : part_work(j->ex, part);
    size_t b, e;
    nn_pool_range(j->n, part, parts, 1, &b, &e);
    for (size_t s = b; s < e; s++) {
        for (uint32_t gi = 0; gi < d->groups; gi++) {
            const float *x =
                j->in + s * g->in_numel + (size_t)gi * g->cg * g->hw;
            float *y = j->out + s * g->out_numel + (size_t)gi * g->fg * g->ohw;
            const float *src = x;
            if (!g->direct) {
                im2col(col, x, g->cg, d);
                src = col;
            }
            if (j->bias) {
                for (uint32_t f = 0; f < g->fg; f++) {
                    float bf = j->bias[(size_t)gi * g->fg + f];
                    float *restrict yf = y + f * g->ohw;
                    for (size_t i = 0; i < g->ohw; i++)
                        yf[i] = bf;
                }
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)g->fg,
                        (int)g->ohw, (int)g->kg, 1.0f,
                        j->weight + (size_t)gi * g->fg * g->kg, (int)g->kg, src,
                        (int)g->ohw, j->bias ? 1.0f : 0.0f, y, (int)g->ohw);
        }
    }
}

void nn_cpu_conv2d_forward(const nn_exec *ex, float *out, const float *in,
                           const float *weight, const float *bias, uint32_t n,
                           const nn_conv_desc *d)
{
    conv_job j = {.ex = ex,
                  .d = d,
                  .g = geom_of(d),
                  .n = n,
                  .out = out,
                  .in = in,
                  .weight = weight,
                  .bias = bias};
    assert(j.g.direct || (ex && ex->work));
    nn_pool_run(ex ? ex->pool : NULL, conv_forward_part, &j);
}

static void conv_backward_part(void *arg, int part, int parts)
{
    const conv_job *j = arg;
    const nn_conv_desc *d = j->d;
    const conv_geom *g = &j->g;
    float *col = part_work(j->ex, part);
    float *dw = col + ALIGN16(g->col_floats);
    float *db = dw + ALIGN16(g->dw_floats);
    memset(dw, 0, g->dw_floats * sizeof *dw);
    memset(db, 0, d->out_c * sizeof *db);
    size_t b, e;
    nn_pool_range(j->n, part, parts, 1, &b, &e);
    for (size_t s = b; s < e; s++) {
        if (j->din)
            memset(j->din + s * g->in_numel, 0, g->in_numel * sizeof *j->din);
        for (uint32_t gi = 0; gi < d->groups; gi++) {
            const size_t xoff = s * g->in_numel + (size_t)gi * g->cg * g->hw;
            const float *x = j->in + xoff;
            const float *dy =
                j->dout + s * g->out_numel + (size_t)gi * g->fg * g->ohw;
            const float *w = j->weight + (size_t)gi * g->fg * g->kg;
            const float *src = x;
            if (!g->direct) {
                im2col(col, x, g->cg, d);
                src = col;
            }
            /* dW_g (fg, kg) += dy (fg, ohw) x col^T (ohw, kg) */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)g->fg,
                        (int)g->kg, (int)g->ohw, 1.0f, dy, (int)g->ohw, src,
                        (int)g->ohw, 1.0f, dw + (size_t)gi * g->fg * g->kg,
                        (int)g->kg);
            if (j->dbias) {
                for (uint32_t f = 0; f < g->fg; f++)
                    db[(size_t)gi * g->fg + f] +=
                        nn_cpu_row_sum(dy + f * g->ohw, g->ohw);
            }
            if (!j->din)
                continue;
            /* dcol (kg, ohw) = W_g^T (kg, fg) x dy (fg, ohw) */
            float *dx = j->din + xoff;
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)g->kg,
                        (int)g->ohw, (int)g->fg, 1.0f, w, (int)g->kg, dy,
                        (int)g->ohw, 0.0f, g->direct ? dx : col, (int)g->ohw);
            if (!g->direct)
                col2im(dx, col, g->cg, d);
        }
    }
}

/* dweight and dbias += the parts' partials, added in part order for every
 * element whichever part does the adding. */
static void conv_reduce_part(void *arg, int part, int parts)
{
    const conv_job *j = arg;
    const conv_geom *g = &j->g;
    const int nparts = nn_pool_threads(j->ex->pool);
    const size_t dw_at = ALIGN16(g->col_floats);
    const size_t db_at = dw_at + ALIGN16(g->dw_floats);
    size_t b, e;
    nn_pool_range(g->dw_floats, part, parts, 16, &b, &e);
    for (int p = 0; p < nparts; p++) {
        const float *restrict src = part_work(j->ex, p) + dw_at;
        float *restrict dst = j->dweight;
        for (size_t i = b; i < e; i++)
            dst[i] += src[i];
    }
    if (!j->dbias)
        return;
    nn_pool_range(j->d->out_c, part, parts, 16, &b, &e);
    for (int p = 0; p < nparts; p++) {
        const float *restrict src = part_work(j->ex, p) + db_at;
        for (size_t i = b; i < e; i++)
            j->dbias[i] += src[i];
    }
}

void nn_cpu_conv2d_backward(const nn_exec *ex, float *din, float *dweight,
                            float *dbias, const float *dout, const float *in,
                            const float *weight, uint32_t n,
                            const nn_conv_desc *d)
{
    conv_job j = {.ex = ex,
                  .d = d,
                  .g = geom_of(d),
                  .n = n,
                  .din = din,
                  .dweight = dweight,
                  .dbias = dbias,
                  .dout = dout,
                  .in = in,
                  .weight = weight};
    assert(ex && ex->work);
    /* Every part runs (and zeroes its partial) even when it gets no
     * examples, so the reduction reads defined partials. */
    nn_pool_run(ex->pool, conv_backward_part, &j);
    nn_pool_run(ex->pool, conv_reduce_part, &j);
}
