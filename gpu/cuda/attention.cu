/*
 * attention.cu - the CUDA twin of models/cpu/attention.c (issue 31;
 * models/backend.h "Transformer ops"): multi-head attention under a mask
 * (causal or not, per-sequence lengths, dropout multipliers), the same
 * layout and formulas, with the (T, T) products on cuBLAS:
 *   forward   S = s Q K^T (SGEMM), P = masked softmax of each row of S
 *             (att; keep *= P), O = Pk V (SGEMM; Pk = keep or P);
 *   backward  dPk = dO V^T (SGEMM), dS = (Pk dPk - P rowsum(Pk dPk)) s
 *             on the keys a row sees, 0 elsewhere, then dQ = dS K,
 *             dK = dS^T Q, dV = Pk^T dO (SGEMMs).
 * The masked softmax and dS are this file's kernels: one block per query
 * row, fixed-order block reductions, no atomics.
 *
 * The products: every (sequence, head) pair is one small GEMM. Within one
 * sequence the heads are equally spaced (d floats apart in q/k/v/out,
 * T*T in att), and within one head so are the sequences (T*ld, T*C and
 * H*T*T), so cublasSgemmStridedBatched covers all pairs in min(B, H) calls
 * of max(B, H) GEMMs each, looping over the smaller dimension. That needs
 * no pointer arrays (cublasGemmBatchedEx would need them in device memory,
 * written by a kernel before each call: one more launch and workspace for
 * nothing here), never allocates, and is captured into a CUDA graph like
 * any cuBLAS call on the context's stream (the handle already has its
 * workspace, see backend.cu). cuBLAS gives the same bits run after run on
 * one device; its sums are in its own order, so results match the CPU's to
 * rounding, not bit for bit. As on the CPU the products run over the full
 * (T, T) square; the masked half is multiplied by zeros.
 */
#include "gpu/cuda/kernels.cuh"

#define ATT_THREADS 256u
#define ATT_EXP_FLOOR -87.0f /* the CPU's clamp before exp (attention.c) */

/* How many keys row i of sequence bi sees (the mask is always a prefix:
 * padding comes last, later keys are masked when causal). */
__device__ __forceinline__ uint32_t attn_keys_seen(const int32_t *lens,
                                                   int causal, uint32_t bi,
                                                   uint32_t i, uint32_t t)
{
    uint32_t n = causal ? i + 1 : t;
    if (lens) {
        const int32_t len = lens[bi];
        const uint32_t l = len < 0 ? 0u : len > (int32_t)t ? t : (uint32_t)len;
        n = l < n ? l : n;
    }
    return n;
}

/* Block (row i of pair p = bi * h + hi): row (t) of att holds s Q K^T;
 * it becomes the softmax of its first n values, 0 after them; keep's row,
 * when there is one, is multiplied by it. */
static __global__ void attn_softmax_kernel(float *att, float *keep,
                                           const int32_t *lens, int causal,
                                           uint32_t t, uint32_t h)
{
    __shared__ float sh[32];
    const size_t row = blockIdx.x;
    const size_t p = row / t;
    const uint32_t i = (uint32_t)(row % t);
    const uint32_t n = attn_keys_seen(lens, causal, (uint32_t)(p / h), i, t);
    float *s = att + row * t;
    float mx = -INFINITY;
    for (uint32_t j = threadIdx.x; j < n; j += blockDim.x)
        mx = fmaxf(mx, s[j]);
    mx = nn_cuda_block_max(mx, sh);
    float part = 0.0f;
    for (uint32_t j = threadIdx.x; j < n; j += blockDim.x) {
        const float z = s[j] - mx; /* NaN stays NaN, as on the CPU */
        const float e = expf(z < ATT_EXP_FLOOR ? ATT_EXP_FLOOR : z);
        s[j] = e;
        part += e;
    }
    const float sum = nn_cuda_block_sum(part, sh);
    const float inv = n ? 1.0f / sum : 0.0f;
    float *k = keep ? keep + row * t : NULL;
    for (uint32_t j = threadIdx.x; j < t; j += blockDim.x) {
        const float pr = j < n ? s[j] * inv : 0.0f;
        s[j] = pr;
        if (k)
            k[j] *= pr;
    }
}

/* Block (row i of pair p): datt's row holds dPk = dO V^T; it becomes dS =
 * (Pk dPk - P sum_k Pk dPk) scale on the n keys the row sees, 0 after. */
static __global__ void attn_dscores_kernel(float *datt, const float *att,
                                           const float *used,
                                           const int32_t *lens, int causal,
                                           uint32_t t, uint32_t h, float scale)
{
    __shared__ float sh[32];
    const size_t row = blockIdx.x;
    const size_t p = row / t;
    const uint32_t i = (uint32_t)(row % t);
    const uint32_t n = attn_keys_seen(lens, causal, (uint32_t)(p / h), i, t);
    const float *pr = att + row * t;
    const float *pk = used + row * t;
    float *g = datt + row * t;
    float part = 0.0f;
    for (uint32_t j = threadIdx.x; j < n; j += blockDim.x)
        part += pk[j] * g[j];
    const float dot = nn_cuda_block_sum(part, sh);
    for (uint32_t j = threadIdx.x; j < t; j += blockDim.x)
        g[j] = j < n ? (pk[j] * g[j] - pr[j] * dot) * scale : 0.0f;
}

/* ---- the products ---- */

/* Where the pairs of the attention lie: q/k/v rows ld apart, out/dout rows
 * c = h d apart, att (t, t) per pair. */
typedef struct {
    uint32_t b, t, h, d, ld, c;
} attn_geom;

/* The pairs one strided-batched call covers: call i of the loop holds
 * sequence i's heads (by_seq 0) or head i's sequences (by_seq 1). */
typedef struct {
    int by_seq;
    unsigned calls, batch;
    long long s_qkv, s_out, s_att; /* strides between the batch's pairs */
} attn_batching;

static attn_batching attn_batching_of(const attn_geom *g)
{
    attn_batching r;
    const long long tt = (long long)g->t * g->t;
    r.by_seq = g->b > g->h; /* batch over the larger dimension */
    if (r.by_seq) {
        r.calls = g->h;
        r.batch = g->b;
        r.s_qkv = (long long)g->t * g->ld;
        r.s_out = (long long)g->t * g->c;
        r.s_att = (long long)g->h * tt;
    } else {
        r.calls = g->b;
        r.batch = g->h;
        r.s_qkv = g->d;
        r.s_out = g->d;
        r.s_att = tt;
    }
    return r;
}

/* Offsets of call i's first pair in q/k/v, in out and in att. */
static size_t attn_qkv_base(const attn_geom *g, const attn_batching *r,
                            unsigned i)
{
    return r->by_seq ? (size_t)i * g->d : (size_t)i * g->t * g->ld;
}

static size_t attn_out_base(const attn_geom *g, const attn_batching *r,
                            unsigned i)
{
    return r->by_seq ? (size_t)i * g->d : (size_t)i * g->t * g->c;
}

static size_t attn_att_base(const attn_geom *g, const attn_batching *r,
                            unsigned i)
{
    const size_t tt = (size_t)g->t * g->t;
    return r->by_seq ? (size_t)i * tt : (size_t)i * g->h * tt;
}

/* One operand of a row-major product: its base, row stride and stride
 * between the batch's pairs. */
typedef struct {
    const float *p;
    int ld;
    long long stride;
} attn_mat;

/* Row-major C (m, n) = alpha op(A) op(B) (+ 0 C) for each of batch pairs:
 * column-major C^T = op(B)^T op(A)^T, so cuBLAS gets B then A with the
 * caller's trans flags, as nn_cuda_gemm does. 1 on success. */
static int attn_gemm(const nn_exec *ex, const nn_cuda_ctx *x, int trans_a,
                     int trans_b, int m, int n, int k, float alpha, attn_mat a,
                     attn_mat b, float *c, int ldc, long long sc, int batch)
{
    const float beta = 0.0f;
    return NN_CUBLAS_OK(ex, cublasSgemmStridedBatched(
                                x->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                                &alpha, b.p, b.ld, b.stride, a.p, a.ld,
                                a.stride, &beta, c, ldc, sc, batch));
}

/* ---- forward ---- */

void nn_cuda_attention_forward(const nn_exec *ex, float *out, float *att,
                               const float *q, const float *k, const float *v,
                               uint32_t b, uint32_t t, uint32_t h, uint32_t d,
                               uint32_t ld, const nn_attn_mask *m)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !b || !t || !h || !d)
        return;
    const int causal = m ? m->causal : 1;
    const int32_t *lens = m ? m->lens : NULL;
    float *keep = m ? m->keep : NULL;
    const attn_geom g = {b, t, h, d, ld, h * d};
    const attn_batching r = attn_batching_of(&g);
    const int T = (int)t, D = (int)d, LD = (int)ld, C = (int)g.c;
    const int n = (int)r.batch;
    const float s = 1.0f / sqrtf((float)d);

    /* S (t, t) = s Q K^T, into att */
    for (unsigned i = 0; i < r.calls; i++) {
        const size_t o = attn_qkv_base(&g, &r, i);
        if (!attn_gemm(ex, x, 0, 1, T, T, D, s, attn_mat{q + o, LD, r.s_qkv},
                       attn_mat{k + o, LD, r.s_qkv},
                       att + attn_att_base(&g, &r, i), T, r.s_att, n))
            return;
    }
    const size_t rows = (size_t)b * h * t;
    attn_softmax_kernel<<<(unsigned)rows, nn_cuda_row_threads(t, ATT_THREADS),
                          0, x->stream>>>(att, keep, lens, causal, t, h);
    if (!nn_cuda_launched(ex, "attn_softmax_kernel"))
        return;
    /* O (t, d) = Pk V */
    const float *used = keep ? keep : att;
    for (unsigned i = 0; i < r.calls; i++) {
        const size_t a = attn_att_base(&g, &r, i);
        if (!attn_gemm(ex, x, 0, 0, T, D, T, 1.0f,
                       attn_mat{used + a, T, r.s_att},
                       attn_mat{v + attn_qkv_base(&g, &r, i), LD, r.s_qkv},
                       out + attn_out_base(&g, &r, i), C, r.s_out, n))
            return;
    }
}

/* ---- backward ---- */

void nn_cuda_attention_backward(const nn_exec *ex, float *dq, float *dk,
                                float *dv, float *datt, const float *dout,
                                const float *q, const float *k, const float *v,
                                const float *att, uint32_t b, uint32_t t,
                                uint32_t h, uint32_t d, uint32_t ld,
                                const nn_attn_mask *m)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !b || !t || !h || !d)
        return;
    const int causal = m ? m->causal : 1;
    const int32_t *lens = m ? m->lens : NULL;
    /* the probabilities out used: P, or P * keep under dropout */
    const float *used = m && m->keep ? m->keep : att;
    const attn_geom g = {b, t, h, d, ld, h * d};
    const attn_batching r = attn_batching_of(&g);
    const int T = (int)t, D = (int)d, LD = (int)ld, C = (int)g.c;
    const int n = (int)r.batch;

    /* dPk (t, t) = dO V^T, into datt */
    for (unsigned i = 0; i < r.calls; i++)
        if (!attn_gemm(ex, x, 0, 1, T, T, D, 1.0f,
                       attn_mat{dout + attn_out_base(&g, &r, i), C, r.s_out},
                       attn_mat{v + attn_qkv_base(&g, &r, i), LD, r.s_qkv},
                       datt + attn_att_base(&g, &r, i), T, r.s_att, n))
            return;
    const size_t rows = (size_t)b * h * t;
    attn_dscores_kernel<<<(unsigned)rows, nn_cuda_row_threads(t, ATT_THREADS),
                          0, x->stream>>>(datt, att, used, lens, causal, t, h,
                                          1.0f / sqrtf((float)d));
    if (!nn_cuda_launched(ex, "attn_dscores_kernel"))
        return;
    /* dQ = dS K; dK = dS^T Q; dV = Pk^T dO (each (t, d), stride ld) */
    for (unsigned i = 0; i < r.calls; i++) {
        const size_t o = attn_qkv_base(&g, &r, i), a = attn_att_base(&g, &r, i);
        const attn_mat ds = {datt + a, T, r.s_att};
        if (!attn_gemm(ex, x, 0, 0, T, D, T, 1.0f, ds,
                       attn_mat{k + o, LD, r.s_qkv}, dq + o, LD, r.s_qkv, n) ||
            !attn_gemm(ex, x, 1, 0, T, D, T, 1.0f, ds,
                       attn_mat{q + o, LD, r.s_qkv}, dk + o, LD, r.s_qkv, n) ||
            !attn_gemm(ex, x, 1, 0, T, D, T, 1.0f,
                       attn_mat{used + a, T, r.s_att},
                       attn_mat{dout + attn_out_base(&g, &r, i), C, r.s_out},
                       dv + o, LD, r.s_qkv, n))
            return;
    }
}

/* ---- lengths ---- */

/* Warp (row bi of x (b, t)): lens[bi] = the first j with x[j] < 0, or t.
 * Each lane finds its own first in a chunk of 32 at a time; the chunk's
 * smallest wins, so the scan stops at the first chunk holding one. */
static __global__ void seq_lens_kernel(int32_t *lens, const float *x,
                                       uint32_t b, uint32_t t)
{
    const size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const unsigned lane = threadIdx.x & 31;
    if (w >= b)
        return; /* whole warps leave together: blockDim is a multiple of 32 */
    const float *row = x + w * t;
    uint32_t first = t;
    for (uint32_t base = 0; base < t && first == t; base += 32) {
        const uint32_t j = base + lane;
        uint32_t mine = j < t && row[j] < 0.0f ? j : t;
        for (int o = 16; o > 0; o >>= 1) {
            const uint32_t other = __shfl_xor_sync(0xffffffffu, mine, o);
            mine = other < mine ? other : mine;
        }
        first = mine;
    }
    if (lane == 0)
        lens[w] = (int32_t)first;
}

void nn_cuda_seq_lens(const nn_exec *ex, int32_t *lens, const float *x,
                      uint32_t b, uint32_t t)
{
    nn_cuda_ctx *c = nn_cuda_begin(ex);
    if (!c || !b)
        return;
    const unsigned per_block = NN_CUDA_THREADS / 32;
    seq_lens_kernel<<<(unsigned)((b + per_block - 1) / per_block),
                      NN_CUDA_THREADS, 0, c->stream>>>(lens, x, b, t);
    (void)nn_cuda_launched(ex, "seq_lens_kernel");
}
