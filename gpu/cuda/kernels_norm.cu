/*
 * kernels_norm.cu - the CUDA backend's row kernels: layernorm forward and
 * backward and the softmax layer. One block per row (rows blockIdx.x,
 * + gridDim.x, ...), fixed-order block sums; layernorm's parameter
 * gradients are column sums split over rows in a fixed order. Formulas as backend_cpu_norm.c (statistics in float sums, the
 * variance's reciprocal square root in double).
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
                               float *rstd, const float *x,
                               const float *gamma, const float *beta,
                               uint32_t n, uint32_t d, float eps)
{
    nn_cuda_ctx *c = nn_cuda_begin(ex);
    if (!c || !n || !d)
        return;
    layernorm_forward_kernel<<<row_blocks(n), nn_cuda_row_threads(d, ROW_THREADS),
                               0, c->stream>>>(out, mean, rstd, x, gamma, beta,
                                               n, d, eps);
    (void)nn_cuda_launched(ex, "layernorm_forward_kernel");
}

/* dx = rstd (g dy - a - xhat bm), a and bm the row's means of g dy and
 * g dy xhat. */
static __global__ void layernorm_dx_kernel(float *dx, const float *dout,
                                           const float *x, const float *gamma,
                                           const float *mean,
                                           const float *rstd, uint32_t n,
                                           uint32_t d)
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
 * (kernels_elementwise.cu): 32 columns a block, rows spread over
 * NN_CUDA_COL_ROWS threads, partial sums added in a fixed order. */
static __global__ void layernorm_param_kernel(float *dgamma, float *dbeta,
                                              const float *dout,
                                              const float *x,
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
                                float *dbeta, const float *dout,
                                const float *x, const float *gamma,
                                const float *mean, const float *rstd,
                                uint32_t n, uint32_t d)
{
    nn_cuda_ctx *c = nn_cuda_begin(ex);
    if (!c || !n || !d)
        return;
    if (dx) {
        layernorm_dx_kernel<<<row_blocks(n), nn_cuda_row_threads(d, ROW_THREADS),
                              0, c->stream>>>(dx, dout, x, gamma, mean, rstd,
                                              n, d);
        if (!nn_cuda_launched(ex, "layernorm_dx_kernel"))
            return;
    }
    layernorm_param_kernel<<<(d + 31) / 32, dim3(32, NN_CUDA_COL_ROWS), 0,
                             c->stream>>>(dgamma, dbeta, dout, x, mean, rstd,
                                          n, d);
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

void nn_cuda_softmax_backward(const nn_exec *ex, float *din,
                              const float *dout, const float *out, uint32_t n,
                              uint32_t c)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !n || !c)
        return;
    softmax_backward_kernel<<<row_blocks(n), nn_cuda_row_threads(c, ROW_THREADS),
                              0, x->stream>>>(din, dout, out, n, c);
    (void)nn_cuda_launched(ex, "softmax_backward_kernel");
}
