/*
 * attention.cu - the CUDA twin of models/cpu/attention.c (issue 31;
 * models/backend.h "Transformer ops"): causal multi-head attention, same
 * layout and formulas. A first version, for correctness and determinism:
 * one block per query row for the scores and the softmax (fixed-order
 * block reductions), one thread per output value for the products (plain
 * loops over the keys in order), no atomics. The (T, T) products are not
 * on cuBLAS yet (strided-batched GEMMs, or cuDNN's fused attention, are the
 * next step). It compiles in CI's build; it has not run on a GPU yet.
 */
#include "gpu/cuda/kernels.cuh"

#define ATT_THREADS 128u

/* ---- attention ---- */

typedef struct {
    float *out, *att, *dq, *dk, *dv, *datt;
    const float *q, *k, *v, *dout, *patt;
    uint32_t b, t, h, d, ld;
    float scale;
} attn_args;

/* Offset of token ti of pair p (= bi * h + hi) in q/k/v, and in out. */
__device__ __forceinline__ size_t qkv_off(const attn_args &a, size_t p,
                                          uint32_t ti)
{
    size_t bi = p / a.h, hi = p % a.h;
    return (bi * a.t + ti) * a.ld + hi * a.d;
}

__device__ __forceinline__ size_t out_off(const attn_args &a, size_t p,
                                          uint32_t ti)
{
    size_t bi = p / a.h, hi = p % a.h;
    return (bi * a.t + ti) * ((size_t)a.h * a.d) + hi * a.d;
}

/* Block (row i of pair p): the scores, then the causal softmax. */
static __global__ void attn_softmax_kernel(attn_args a)
{
    __shared__ float sh[32];
    const size_t row = blockIdx.x;
    const size_t p = row / a.t;
    const uint32_t i = (uint32_t)(row % a.t);
    float *s = a.att + row * a.t;
    const float *qi = a.q + qkv_off(a, p, i);
    float mx = -INFINITY;
    for (uint32_t j = threadIdx.x; j <= i; j += blockDim.x) {
        const float *kj = a.k + qkv_off(a, p, j);
        float dot = 0.0f;
        for (uint32_t e = 0; e < a.d; e++)
            dot += qi[e] * kj[e];
        s[j] = dot * a.scale;
        mx = fmaxf(mx, s[j]);
    }
    mx = nn_cuda_block_max(mx, sh);
    float part = 0.0f;
    for (uint32_t j = threadIdx.x; j <= i; j += blockDim.x) {
        s[j] = expf(s[j] - mx);
        part += s[j];
    }
    const float inv = 1.0f / nn_cuda_block_sum(part, sh);
    for (uint32_t j = threadIdx.x; j < a.t; j += blockDim.x)
        s[j] = j <= i ? s[j] * inv : 0.0f;
}

/* Thread (pair p, row i, element e): out = sum_{j <= i} P_ij v_j. */
static __global__ void attn_out_kernel(attn_args a)
{
    const size_t len = (size_t)a.b * a.h * a.t * a.d;
    for (size_t w = (size_t)blockIdx.x * blockDim.x + threadIdx.x; w < len;
         w += (size_t)gridDim.x * blockDim.x) {
        const uint32_t e = (uint32_t)(w % a.d);
        const size_t row = w / a.d, p = row / a.t;
        const uint32_t i = (uint32_t)(row % a.t);
        const float *pr = a.att + row * a.t;
        float acc = 0.0f;
        for (uint32_t j = 0; j <= i; j++)
            acc += pr[j] * a.v[qkv_off(a, p, j) + e];
        a.out[out_off(a, p, i) + e] = acc;
    }
}

void nn_cuda_attention_forward(const nn_exec *ex, float *out, float *att,
                               const float *q, const float *k, const float *v,
                               uint32_t b, uint32_t t, uint32_t h, uint32_t d,
                               uint32_t ld)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !b || !t || !h || !d)
        return;
    attn_args a = {};
    a.out = out;
    a.att = att;
    a.q = q;
    a.k = k;
    a.v = v;
    a.b = b;
    a.t = t;
    a.h = h;
    a.d = d;
    a.ld = ld;
    a.scale = 1.0f / sqrtf((float)d);
    const size_t rows = (size_t)b * h * t;
    attn_softmax_kernel<<<(unsigned)rows, nn_cuda_row_threads(t, ATT_THREADS),
                          0, x->stream>>>(a);
    if (!nn_cuda_launched(ex, "attn_softmax_kernel"))
        return;
    attn_out_kernel<<<nn_cuda_grid(rows * d), NN_CUDA_THREADS, 0, x->stream>>>(
        a);
    (void)nn_cuda_launched(ex, "attn_out_kernel");
}

/* Block (row i of pair p): dP_ij = dout_i . v_j, then dS = P (dP - sum_j
 * P dP) scale, 0 above the diagonal, into datt. */
static __global__ void attn_dscores_kernel(attn_args a)
{
    __shared__ float sh[32];
    const size_t row = blockIdx.x;
    const size_t p = row / a.t;
    const uint32_t i = (uint32_t)(row % a.t);
    const float *pr = a.patt + row * a.t;
    float *g = a.datt + row * a.t;
    const float *di = a.dout + out_off(a, p, i);
    float part = 0.0f;
    for (uint32_t j = threadIdx.x; j <= i; j += blockDim.x) {
        const float *vj = a.v + qkv_off(a, p, j);
        float dot = 0.0f;
        for (uint32_t e = 0; e < a.d; e++)
            dot += di[e] * vj[e];
        g[j] = dot;
        part += pr[j] * dot;
    }
    const float dot = nn_cuda_block_sum(part, sh);
    for (uint32_t j = threadIdx.x; j < a.t; j += blockDim.x)
        g[j] = j <= i ? pr[j] * (g[j] - dot) * a.scale : 0.0f;
}

/* Thread (pair p, token r, element e): dq_r = sum_{j <= r} dS_rj k_j;
 * dk_r = sum_{i >= r} dS_ir q_i; dv_r = sum_{i >= r} P_ir dout_i. */
static __global__ void attn_dqkv_kernel(attn_args a)
{
    const size_t len = (size_t)a.b * a.h * a.t * a.d;
    for (size_t w = (size_t)blockIdx.x * blockDim.x + threadIdx.x; w < len;
         w += (size_t)gridDim.x * blockDim.x) {
        const uint32_t e = (uint32_t)(w % a.d);
        const size_t row = w / a.d, p = row / a.t;
        const uint32_t r = (uint32_t)(row % a.t);
        const float *ds = a.datt + p * a.t * a.t;
        const float *pp = a.patt + p * a.t * a.t;
        float gq = 0.0f, gk = 0.0f, gv = 0.0f;
        for (uint32_t j = 0; j <= r; j++)
            gq += ds[(size_t)r * a.t + j] * a.k[qkv_off(a, p, j) + e];
        for (uint32_t i = r; i < a.t; i++) {
            gk += ds[(size_t)i * a.t + r] * a.q[qkv_off(a, p, i) + e];
            gv += pp[(size_t)i * a.t + r] * a.dout[out_off(a, p, i) + e];
        }
        const size_t o = qkv_off(a, p, r) + e;
        a.dq[o] = gq;
        a.dk[o] = gk;
        a.dv[o] = gv;
    }
}

void nn_cuda_attention_backward(const nn_exec *ex, float *dq, float *dk,
                                float *dv, float *datt, const float *dout,
                                const float *q, const float *k, const float *v,
                                const float *att, uint32_t b, uint32_t t,
                                uint32_t h, uint32_t d, uint32_t ld)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !b || !t || !h || !d)
        return;
    attn_args a = {};
    a.dq = dq;
    a.dk = dk;
    a.dv = dv;
    a.datt = datt;
    a.dout = dout;
    a.q = q;
    a.k = k;
    a.v = v;
    a.patt = att;
    a.b = b;
    a.t = t;
    a.h = h;
    a.d = d;
    a.ld = ld;
    a.scale = 1.0f / sqrtf((float)d);
    const size_t rows = (size_t)b * h * t;
    attn_dscores_kernel<<<(unsigned)rows, nn_cuda_row_threads(t, ATT_THREADS),
                          0, x->stream>>>(a);
    if (!nn_cuda_launched(ex, "attn_dscores_kernel"))
        return;
    attn_dqkv_kernel<<<nn_cuda_grid(rows * d), NN_CUDA_THREADS, 0, x->stream>>>(
        a);
    (void)nn_cuda_launched(ex, "attn_dqkv_kernel");
}
