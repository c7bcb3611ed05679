/*
 * elementwise.cu - the CUDA backend's elementwise kernels: bias
 * broadcast and its gradient, the activations, dropout, leaky_relu, add and
 * scale. Each is a grid-stride loop whose results do not depend on the
 * launch shape; the formulas are models/cpu/elementwise.c's (the transcendental
 * functions are CUDA's, within a few ulp of glibc's).
 *
 * Dropout differs from the CPU on purpose: the CPU draws the mask from the
 * ty_rng stream value by value, which a GPU cannot do in parallel. Here one
 * 64-bit seed is drawn from the rng per call and value i keeps with
 * probability 1 - rate by a counter-based generator (splitmix64 at
 * position i of that seed). The mask is deterministic per seed and per
 * rng state, with the same distribution as the CPU's, but not the CPU's
 * bits.
 */
#include "gpu/cuda/cuda_internal.h"

#define GELU_RSQRT2 0.70710678118654752440f
#define GELU_RSQRT2PI 0.39894228040143267794f
#define GELU_SQRT2_PI 0.79788456080286535588f /* sqrt(2 / pi) */
#define GELU_CUBIC 0.044715f

#define GRID_STRIDE(i, len)                                                   \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (len); \
         i += (size_t)gridDim.x * blockDim.x)

#define LAUNCH(ex, c, len, kernel, ...)                                 \
    do {                                                                \
        kernel<<<nn_cuda_grid(len), NN_CUDA_THREADS, 0, (c)->stream>>>( \
            __VA_ARGS__);                                               \
        (void)nn_cuda_launched((ex), #kernel);                          \
    } while (0)

/* ---- bias ---- */

// out (n, c) rows = bias (c)
static __global__ void bias_rows_kernel(float *out, const float *bias,
                                        size_t len, uint32_t c)
{
    GRID_STRIDE(i, len)
    out[i] = bias[i % c];
}

void nn_cuda_bias_rows(const nn_exec *ex, float *out, const float *bias,
                       uint32_t n, uint32_t c)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    size_t len = (size_t)n * c;
    if (!x || !len)
        return;
    LAUNCH(ex, x, len, bias_rows_kernel, out, bias, len, c);
}

/* db (c) += column sums of dout (n, c). A block takes 32 columns; its
 * thread (x, y) adds rows y, y + COL_ROWS, ... of column x, then thread
 * y = 0 adds the COL_ROWS partial sums in order: a fixed order for a given
 * n, with the rows spread over COL_ROWS threads per column. */
static __global__ void bias_grad_kernel(float *db, const float *dout,
                                        uint32_t n, uint32_t c)
{
    __shared__ float part[NN_CUDA_COL_ROWS][33];
    const uint32_t k = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (k < c)
        for (uint32_t i = threadIdx.y; i < n; i += NN_CUDA_COL_ROWS)
            acc += dout[(size_t)i * c + k];
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && k < c) {
        float total = part[0][threadIdx.x];
        for (int y = 1; y < NN_CUDA_COL_ROWS; y++)
            total += part[y][threadIdx.x];
        db[k] += total;
    }
}

void nn_cuda_bias_grad(const nn_exec *ex, float *db, const float *dout,
                       uint32_t n, uint32_t c)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !n || !c)
        return;
    bias_grad_kernel<<<(c + 31) / 32, dim3(32, NN_CUDA_COL_ROWS), 0,
                       x->stream>>>(db, dout, n, c);
    (void)nn_cuda_launched(ex, "bias_grad_kernel");
}

/* ---- activations ---- */

__device__ __forceinline__ float sigmoid_dev(float x)
{
    /* Never exp of a large positive: no overflow for any input. */
    if (x >= 0.0f)
        return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

static __global__ void act_forward_kernel(int op, float *out, const float *in,
                                          size_t len)
{
    GRID_STRIDE(i, len)
    {
        float x = in[i];
        float y;
        switch (op) {
            case NN_OP_RELU: y = x > 0.0f ? x : 0.0f; break;
            case NN_OP_TANH: y = tanhf(x); break;
            case NN_OP_SIGMOID: y = sigmoid_dev(x); break;
            case NN_OP_GELU_TANH:
                y = 0.5f * x *
                    (1.0f +
                     tanhf(GELU_SQRT2_PI * (x + GELU_CUBIC * x * x * x)));
                break;
            default: /* NN_OP_GELU, exact */
                y = 0.5f * x * (1.0f + erff(x * GELU_RSQRT2));
        }
        out[i] = y;
    }
}

/* relu, tanh, sigmoid read the output; gelu the input. */
static __global__ void act_backward_kernel(int op, float *din,
                                           const float *dout, const float *in,
                                           const float *out, size_t len)
{
    GRID_STRIDE(i, len)
    {
        float g = dout[i];
        float d;
        switch (op) {
            case NN_OP_RELU: d = out[i] > 0.0f ? g : 0.0f; break;
            case NN_OP_TANH: {
                float y = out[i];
                d = g * (1.0f - y * y);
                break;
            }
            case NN_OP_SIGMOID: {
                float y = out[i];
                d = g * y * (1.0f - y);
                break;
            }
            case NN_OP_GELU_TANH: {
                float x = in[i];
                float th = tanhf(GELU_SQRT2_PI * (x + GELU_CUBIC * x * x * x));
                float du = GELU_SQRT2_PI * (1.0f + 3.0f * GELU_CUBIC * x * x);
                d = g * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du);
                break;
            }
            default: { /* NN_OP_GELU */
                float x = in[i];
                float cdf = 0.5f * (1.0f + erff(x * GELU_RSQRT2));
                float pdf = GELU_RSQRT2PI * expf(-0.5f * x * x);
                d = g * (cdf + x * pdf);
            }
        }
        din[i] = d;
    }
}

static int is_activation(nn_op op)
{
    return op == NN_OP_RELU || op == NN_OP_TANH || op == NN_OP_SIGMOID ||
           op == NN_OP_GELU || op == NN_OP_GELU_TANH;
}

void nn_cuda_act_forward(const nn_exec *ex, nn_op op, float *out,
                         const float *in, size_t len)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !len)
        return;
    if (!is_activation(op)) {
        nn_cuda_fail(ex, "act_forward", "not an activation op");
        return;
    }
    LAUNCH(ex, x, len, act_forward_kernel, (int)op, out, in, len);
}

void nn_cuda_act_backward(const nn_exec *ex, nn_op op, float *din,
                          const float *dout, const float *in, const float *out,
                          size_t len)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !len)
        return;
    if (!is_activation(op)) {
        nn_cuda_fail(ex, "act_backward", "not an activation op");
        return;
    }
    LAUNCH(ex, x, len, act_backward_kernel, (int)op, din, dout, in, out, len);
}

/* ---- dropout ---- */

/* splitmix64's output number i + 1 from seed: a counter-based generator
 * (Steele, Lea and Flood 2014), each value independent of the others. */
__device__ __forceinline__ uint64_t splitmix64_at(uint64_t seed, uint64_t i)
{
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// mask, out (len): mask 0 or scale, out = in * mask
static __global__ void dropout_forward_kernel(float *out, float *mask,
                                              const float *in, size_t len,
                                              float rate, float scale,
                                              uint64_t seed)
{
    GRID_STRIDE(i, len)
    {
        /* A uniform float in [0, 1) from the top 24 bits, as
         * ty_rng_uniform makes it. */
        float u = (float)(splitmix64_at(seed, i) >> 40) * (1.0f / 16777216.0f);
        float m = u >= rate ? scale : 0.0f;
        mask[i] = m;
        out[i] = in[i] * m;
    }
}

void nn_cuda_dropout_forward(const nn_exec *ex, float *out, float *mask,
                             const float *in, size_t len, float rate,
                             ty_rng *rng)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !len)
        return;
    /* One draw per call, even where the CPU would draw len: the rng moves
     * on differently from the CPU's (see the top of this file). */
    uint64_t seed = ty_rng_u64(rng);
    float scale = 1.0f / (1.0f - rate);
    LAUNCH(ex, x, len, dropout_forward_kernel, out, mask, in, len, rate, scale,
           seed);
}

// a (len) * b (len); also dropout's backward (dout * mask)
static __global__ void mul_kernel(float *out, const float *a, const float *b,
                                  size_t len)
{
    GRID_STRIDE(i, len)
    out[i] = a[i] * b[i];
}

void nn_cuda_dropout_backward(const nn_exec *ex, float *din, const float *dout,
                              const float *mask, size_t len)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !len)
        return;
    LAUNCH(ex, x, len, mul_kernel, din, dout, mask, len);
}

/* ---- leaky_relu, add, scale ---- */

static __global__ void leaky_forward_kernel(float *out, const float *in,
                                            size_t len, float slope)
{
    GRID_STRIDE(i, len)
    {
        float v = in[i];
        out[i] = v > 0.0f ? v : slope * v;
    }
}

/* By the input's sign, as torch. */
static __global__ void leaky_backward_kernel(float *din, const float *dout,
                                             const float *in, size_t len,
                                             float slope)
{
    GRID_STRIDE(i, len)
    {
        float g = dout[i];
        din[i] = in[i] > 0.0f ? g : slope * g;
    }
}

void nn_cuda_leaky_relu_forward(const nn_exec *ex, float *out, const float *in,
                                size_t len, float slope)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !len)
        return;
    LAUNCH(ex, x, len, leaky_forward_kernel, out, in, len, slope);
}

void nn_cuda_leaky_relu_backward(const nn_exec *ex, float *din,
                                 const float *dout, const float *in, size_t len,
                                 float slope)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !len)
        return;
    LAUNCH(ex, x, len, leaky_backward_kernel, din, dout, in, len, slope);
}

/* out may be a or b: each value is read before it is written, by the same
 * thread. */
static __global__ void add_kernel(float *out, const float *a, const float *b,
                                  size_t len)
{
    GRID_STRIDE(i, len)
    out[i] = a[i] + b[i];
}

void nn_cuda_add(const nn_exec *ex, float *out, const float *a, const float *b,
                 size_t len)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !len)
        return;
    LAUNCH(ex, x, len, add_kernel, out, a, b, len);
}

static __global__ void scale_kernel(float *x, size_t len, float alpha)
{
    GRID_STRIDE(i, len)
    x[i] *= alpha;
}

void nn_cuda_scale(const nn_exec *ex, float *x, size_t len, float alpha)
{
    nn_cuda_ctx *c = nn_cuda_begin(ex);
    if (!c || !len)
        return;
    LAUNCH(ex, c, len, scale_kernel, x, len, alpha);
}
