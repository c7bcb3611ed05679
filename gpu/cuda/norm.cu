/*
 * norm.cu - the CUDA backend's normalizations: batch norm, layernorm and
 * the softmax layer (a row normalization, as on the CPU), forward and
 * backward, with the semantics of the CPU reference (models/cpu/norm.c).
 *
 * Layernorm and softmax are row kernels: one block per row (rows
 * blockIdx.x, + gridDim.x, ...), fixed-order block sums; layernorm's
 * parameter gradients are column sums split over rows in a fixed order.
 * Formulas as models/cpu/norm.c (statistics in float sums, the
 * variance's reciprocal square root in double).
 *
 * Batch norm runs own kernels that do, per output value, the CPU's
 * arithmetic in the CPU's order with contraction into FMA ruled out (the
 * __f*_rn / __d*_rn intrinsics; the CPU build is strict C11, which does
 * not contract): results are bit-identical to the CPU backend. One block
 * per channel; each row of s values is summed in the CPU's 8 interleaved
 * lanes (one thread per lane) plus a tail, and rows are added in order in
 * double by one thread. The running statistics follow torch (momentum,
 * unbiased variance) in double, as the CPU does;
 * cudnnBatchNormalizationForwardTraining would match those semantics but
 * not the CPU's bits.
 */
#include "gpu/cuda/kernels.cuh"

#define ROW_THREADS 256
#define MAX_ROW_BLOCKS 65535u

static unsigned row_blocks(uint32_t n)
{
    return n > MAX_ROW_BLOCKS ? MAX_ROW_BLOCKS : n;
}

/* ---- layernorm ---- */

// x, out (n, d); mean, rstd (n); gamma, beta (d)
static __global__ void layernorm_forward_kernel(float *out, float *mean,
                                                float *rstd, const float *x,
                                                const float *gamma,
                                                const float *beta, uint32_t n,
                                                uint32_t d, float eps)
{
    __shared__ float sh[32];
    for (uint32_t r = blockIdx.x; r < n; r += gridDim.x) {
        const float *xr = x + (size_t)r * d;
        float s = 0.0f;
        for (uint32_t k = threadIdx.x; k < d; k += blockDim.x)
            s += xr[k];
        const float m = (float)((double)nn_cuda_block_sum(s, sh) / (double)d);
        float q = 0.0f;
        for (uint32_t k = threadIdx.x; k < d; k += blockDim.x) {
            float dv = xr[k] - m;
            q += dv * dv;
        }
        const double var = (double)nn_cuda_block_sum(q, sh) / (double)d;
        const float rs = (float)(1.0 / sqrt(var + (double)eps));
        if (threadIdx.x == 0) {
            mean[r] = m;
            rstd[r] = rs;
        }
        float *o = out + (size_t)r * d;
        for (uint32_t k = threadIdx.x; k < d; k += blockDim.x)
            o[k] = (xr[k] - m) * rs * gamma[k] + beta[k];
    }
}

void nn_cuda_layernorm_forward(const nn_exec *ex, float *out, float *mean,
                               float *rstd, const float *x, const float *gamma,
                               const float *beta, uint32_t n, uint32_t d,
                               float eps)
{
    nn_cuda_ctx *c = nn_cuda_begin(ex);
    if (!c || !n || !d)
        return;
    layernorm_forward_kernel<<<
        row_blocks(n), nn_cuda_row_threads(d, ROW_THREADS), 0, c->stream>>>(
        out, mean, rstd, x, gamma, beta, n, d, eps);
    (void)nn_cuda_launched(ex, "layernorm_forward_kernel");
}

/* dx = rstd (g dy - a - xhat bm), a and bm the row's means of g dy and
 * g dy xhat. */
static __global__ void layernorm_dx_kernel(float *dx, const float *dout,
                                           const float *x, const float *gamma,
                                           const float *mean, const float *rstd,
                                           uint32_t n, uint32_t d)
{
    __shared__ float sh[32];
    for (uint32_t r = blockIdx.x; r < n; r += gridDim.x) {
        const float *dy = dout + (size_t)r * d;
        const float *xr = x + (size_t)r * d;
        const float m = mean[r], rs = rstd[r];
        float s1 = 0.0f, s2 = 0.0f;
        for (uint32_t k = threadIdx.x; k < d; k += blockDim.x) {
            float gd = dy[k] * gamma[k];
            s1 += gd;
            s2 += gd * (xr[k] - m);
        }
        const float a = nn_cuda_block_sum(s1, sh) / (float)d;
        const float bm = nn_cuda_block_sum(s2, sh) * rs / (float)d;
        float *o = dx + (size_t)r * d;
        for (uint32_t k = threadIdx.x; k < d; k += blockDim.x)
            o[k] = rs * (gamma[k] * dy[k] - a - (xr[k] - m) * rs * bm);
    }
}

/* dgamma, dbeta (d) += sums over the rows, split as bias_grad_kernel
 * (elementwise.cu): 32 columns a block, rows spread over
 * NN_CUDA_COL_ROWS threads, partial sums added in a fixed order. */
static __global__ void layernorm_param_kernel(float *dgamma, float *dbeta,
                                              const float *dout, const float *x,
                                              const float *mean,
                                              const float *rstd, uint32_t n,
                                              uint32_t d)
{
    __shared__ float pg[NN_CUDA_COL_ROWS][33], pb[NN_CUDA_COL_ROWS][33];
    const uint32_t k = blockIdx.x * 32 + threadIdx.x;
    float dg = 0.0f, db = 0.0f;
    if (k < d)
        for (uint32_t i = threadIdx.y; i < n; i += NN_CUDA_COL_ROWS) {
            const size_t at = (size_t)i * d + k;
            const float dy = dout[at];
            dg += dy * ((x[at] - mean[i]) * rstd[i]);
            db += dy;
        }
    pg[threadIdx.y][threadIdx.x] = dg;
    pb[threadIdx.y][threadIdx.x] = db;
    __syncthreads();
    if (threadIdx.y == 0 && k < d) {
        float tg = pg[0][threadIdx.x], tb = pb[0][threadIdx.x];
        for (int y = 1; y < NN_CUDA_COL_ROWS; y++) {
            tg += pg[y][threadIdx.x];
            tb += pb[y][threadIdx.x];
        }
        dgamma[k] += tg;
        dbeta[k] += tb;
    }
}

void nn_cuda_layernorm_backward(const nn_exec *ex, float *dx, float *dgamma,
                                float *dbeta, const float *dout, const float *x,
                                const float *gamma, const float *mean,
                                const float *rstd, uint32_t n, uint32_t d)
{
    nn_cuda_ctx *c = nn_cuda_begin(ex);
    if (!c || !n || !d)
        return;
    if (dx) {
        layernorm_dx_kernel<<<
            row_blocks(n), nn_cuda_row_threads(d, ROW_THREADS), 0, c->stream>>>(
            dx, dout, x, gamma, mean, rstd, n, d);
        if (!nn_cuda_launched(ex, "layernorm_dx_kernel"))
            return;
    }
    layernorm_param_kernel<<<(d + 31) / 32, dim3(32, NN_CUDA_COL_ROWS), 0,
                             c->stream>>>(dgamma, dbeta, dout, x, mean, rstd, n,
                                          d);
    (void)nn_cuda_launched(ex, "layernorm_param_kernel");
}

/* ---- softmax over rows ---- */

// in, out (n, c)
static __global__ void softmax_forward_kernel(float *out, const float *in,
                                              uint32_t n, uint32_t c)
{
    __shared__ float sh[32];
    for (uint32_t r = blockIdx.x; r < n; r += gridDim.x) {
        const float *x = in + (size_t)r * c;
        float *y = out + (size_t)r * c;
        float mx = -INFINITY;
        for (uint32_t k = threadIdx.x; k < c; k += blockDim.x)
            mx = fmaxf(mx, x[k]);
        mx = nn_cuda_block_max(mx, sh);
        float s = 0.0f;
        for (uint32_t k = threadIdx.x; k < c; k += blockDim.x) {
            float e = expf(x[k] - mx);
            y[k] = e;
            s += e;
        }
        /* Each thread rescales the values it wrote itself. */
        const float inv = 1.0f / nn_cuda_block_sum(s, sh);
        for (uint32_t k = threadIdx.x; k < c; k += blockDim.x)
            y[k] *= inv;
    }
}

// din = out (dout - sum over the row of dout out)
static __global__ void softmax_backward_kernel(float *din, const float *dout,
                                               const float *out, uint32_t n,
                                               uint32_t c)
{
    __shared__ float sh[32];
    for (uint32_t r = blockIdx.x; r < n; r += gridDim.x) {
        const float *dy = dout + (size_t)r * c;
        const float *y = out + (size_t)r * c;
        float s = 0.0f;
        for (uint32_t k = threadIdx.x; k < c; k += blockDim.x)
            s += dy[k] * y[k];
        s = nn_cuda_block_sum(s, sh);
        float *dx = din + (size_t)r * c;
        for (uint32_t k = threadIdx.x; k < c; k += blockDim.x)
            dx[k] = y[k] * (dy[k] - s);
    }
}

void nn_cuda_softmax_forward(const nn_exec *ex, float *out, const float *in,
                             uint32_t n, uint32_t c)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !n || !c)
        return;
    softmax_forward_kernel<<<row_blocks(n), nn_cuda_row_threads(c, ROW_THREADS),
                             0, x->stream>>>(out, in, n, c);
    (void)nn_cuda_launched(ex, "softmax_forward_kernel");
}

void nn_cuda_softmax_backward(const nn_exec *ex, float *din, const float *dout,
                              const float *out, uint32_t n, uint32_t c)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !n || !c)
        return;
    softmax_backward_kernel<<<
        row_blocks(n), nn_cuda_row_threads(c, ROW_THREADS), 0, x->stream>>>(
        din, dout, out, n, c);
    (void)nn_cuda_launched(ex, "softmax_backward_kernel");
}

/* ---- batch normalization (the CPU's arithmetic and order) ---- */

#define LANES 8
#define BN_ROWS (NN_CUDA_THREADS / LANES) /* rows summed at once by a block */

enum { BN_SUM, BN_SUMSQ_DEV, BN_DOT_DEV };

/* One lane of models/cpu/norm.c's fixed-order row sums: lane L adds the
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
    __shared__ float lane[2][NN_CUDA_THREADS];
    __shared__ float row[2][BN_ROWS];
    __shared__ double tot[2];
    const uint32_t lane_id = threadIdx.x % LANES, r = threadIdx.x / LANES;
    const size_t full = (size_t)s / LANES * LANES;
    double acc0 = 0.0, acc1 = 0.0; /* thread 0's running totals */
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
                row[k][r] =
                    __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(v[0], v[4]),
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
static __global__ void bn_forward_kernel(float *out, float *mean, float *invstd,
                                         float *rmean, float *rvar,
                                         const float *x, const float *gamma,
                                         const float *beta, uint32_t n,
                                         uint32_t c, uint32_t s, int training,
                                         float momentum, float eps)
{
    __shared__ float sh_m, sh_scale, sh_shift;
    const uint32_t ch = blockIdx.x;
    const double count = (double)n * s;
    double sum, ss, unused;
    if (training) {
        bn_channel_sums(&sum, &unused, BN_SUM, -1, x, NULL, 0.0f, n, c, s, ch);
        if (threadIdx.x == 0)
            sh_m = (float)(sum / count);
        __syncthreads();
        const float m = sh_m;
        bn_channel_sums(&ss, &unused, BN_SUMSQ_DEV, -1, x, NULL, m, n, c, s,
                        ch);
        if (threadIdx.x == 0) { /* bn_set_stats */
            mean[ch] = m;
            invstd[ch] = (float)(1.0 / sqrt(ss / count + (double)eps));
            if (rmean) {
                const double mom = momentum;
                rmean[ch] =
                    (float)__dadd_rn(__dmul_rn(mom, (double)m),
                                     __dmul_rn(1.0 - mom, (double)rmean[ch]));
                rvar[ch] =
                    (float)__dadd_rn(__dmul_rn(mom, ss / (count - 1.0)),
                                     __dmul_rn(1.0 - mom, (double)rvar[ch]));
            }
        }
    } else if (threadIdx.x == 0) { /* bn_eval_stats */
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
    for (size_t q = threadIdx.x; q < len; q += NN_CUDA_THREADS) {
        const size_t at = ((q / s) * c + ch) * s + q % s;
        out[at] = __fadd_rn(__fmul_rn(x[at], scale), shift);
    }
}

/* One block per channel: dgamma, dbeta += sums; dx as bn_backward_rows. */
static __global__ void
bn_backward_kernel(float *dx, float *dgamma, float *dbeta, const float *dout,
                   const float *x, const float *gamma, const float *mean,
                   const float *invstd, uint32_t n, uint32_t c, uint32_t s,
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
    for (size_t q = threadIdx.x; q < len; q += NN_CUDA_THREADS) {
        const size_t at = ((q / s) * c + ch) * s + q % s;
        dx[at] = __fmul_rn(k, __fsub_rn(__fsub_rn(dout[at], a),
                                        __fmul_rn(__fsub_rn(x[at], m), bm)));
    }
}

extern "C" void nn_cuda_batchnorm_forward(
    const nn_exec *ex, float *out, float *mean, float *invstd,
    float *running_mean, float *running_var, const float *x, const float *gamma,
    const float *beta, uint32_t n, uint32_t c, uint32_t s, int training,
    float momentum, float eps)
{
    nn_cuda_ctx *ctx = nn_cuda_ctx_of(ex);
    if (ctx->failed || c == 0)
        return;
    bn_forward_kernel<<<c, NN_CUDA_THREADS, 0, ctx->stream>>>(
        out, mean, invstd, running_mean, running_var, x, gamma, beta, n, c, s,
        training, momentum, eps);
    nn_cuda_launch_ok(ex, "bn_forward_kernel");
}

extern "C" void nn_cuda_batchnorm_backward(
    const nn_exec *ex, float *dx, float *dgamma, float *dbeta,
    const float *dout, const float *x, const float *gamma, const float *mean,
    const float *invstd, uint32_t n, uint32_t c, uint32_t s, int batch_stats)
{
    nn_cuda_ctx *ctx = nn_cuda_ctx_of(ex);
    if (ctx->failed || c == 0)
        return;
    bn_backward_kernel<<<c, NN_CUDA_THREADS, 0, ctx->stream>>>(
        dx, dgamma, dbeta, dout, x, gamma, mean, invstd, n, c, s, batch_stats);
    nn_cuda_launch_ok(ex, "bn_backward_kernel");
}
