/*
 * rowgemm.c - the CPU backend's batch-invariant GEMM for decoding
 * (rows_gemm, NN_OP_KV_CACHE, models/backend.h): out (n, u) = x (n, k)
 * W^T (+ beta out), W (u, k) row-major, as a decode step's linear layers
 * need it.
 *
 * A BLAS sums a row's products in an order that can change with the row
 * count (another kernel, another blocking, a GEMV for one row), so a
 * sequence's numbers would depend on how many others share its step. Here
 * every output is one dot product computed by the same instructions
 * whatever the tile it falls in: W lanes of partial sums over k in
 * order, then k's tail, then a fixed reduction of the lanes. The tiles
 * (4 rows of x against 2 rows of W) only decide what is read once and
 * used for several outputs: each pair of W's rows is read once for every
 * 4 rows of the step, not once a row. Which instruction set runs is fixed
 * for the process (the CPU's best of AVX2 with FMA, SSE2, plain C), so
 * results are the same bits alone or batched on one machine and build.
 * W's rows are split over the pool.
 */
#include "models/cpu/cpu_internal.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { TILE_ROWS = 4, TILE_COLS = 2 };

typedef struct {
    float *out;
    const float *x, *w;
    uint32_t n, u, k;
    float beta;
} rows_job;

/* out = dot + beta * out, with beta 0 ignoring what out held. */
static inline float rows_put(float dot, float old, float beta)
{
    return beta != 0.0f ? dot + beta * old : dot;
}

/* The tail of k past the last whole vector, in order. */
static inline float rows_tail(const float *x, const float *w, uint32_t from,
                              uint32_t k)
{
    float t = 0.0f;
    for (uint32_t i = from; i < k; i++)
        t += x[i] * w[i];
    return t;
}

/* One tile body: R rows of x (from x0) against C rows of w (from w0), R
 * and C constants where it is inlined, so the sums stay in registers. VEC
 * is W floats; MADD(a, b, acc) is acc + a b; HSUM reduces a VEC to a
 * float in a fixed order. */
/* The tile loops, fully unrolled: the sums stay in registers. */
#define UNROLL _Pragma("GCC unroll 4")

#define ROWS_TILE(NAME, ATTR, VEC, W, LOAD, MADD, ZERO, HSUM)                 \
    ATTR __attribute__((always_inline)) static inline void NAME(              \
        const rows_job *j, uint32_t r0, uint32_t c0, uint32_t R, uint32_t C)  \
    {                                                                         \
        const uint32_t k = j->k, kv = k / W * W;                              \
        VEC acc[TILE_ROWS][TILE_COLS];                                        \
        UNROLL for (uint32_t r = 0; r < R; r++)                               \
            UNROLL for (uint32_t c = 0; c < C; c++) acc[r][c] = ZERO();       \
        const float *xr = j->x + (size_t)r0 * k, *wc = j->w + (size_t)c0 * k; \
        for (uint32_t i = 0; i < kv; i += W) {                                \
            VEC wv[TILE_COLS];                                                \
            UNROLL for (uint32_t c = 0; c < C; c++) wv[c] =                   \
                LOAD(wc + (size_t)c * k + i);                                 \
            UNROLL for (uint32_t r = 0; r < R; r++)                           \
            {                                                                 \
                const VEC xv = LOAD(xr + (size_t)r * k + i);                  \
                UNROLL for (uint32_t c = 0; c < C; c++) acc[r][c] =           \
                    MADD(xv, wv[c], acc[r][c]);                               \
            }                                                                 \
        }                                                                     \
        UNROLL for (uint32_t r = 0; r < R; r++)                               \
            UNROLL for (uint32_t c = 0; c < C; c++)                           \
        {                                                                     \
            const float *xp = xr + (size_t)r * k, *wp = wc + (size_t)c * k;   \
            float *o = j->out + (size_t)(r0 + r) * j->u + c0 + c;             \
            *o = rows_put(HSUM(acc[r][c]) + rows_tail(xp, wp, kv, k), *o,     \
                          j->beta);                                           \
        }                                                                     \
    }

/* A range of W's rows [cb, ce) against every row of x, by tiles; the
 * constant-size calls let each tile body keep its sums in registers. */
#define ROWS_RANGE(NAME, ATTR, TILE)                                      \
    ATTR static void NAME(const rows_job *j, uint32_t cb, uint32_t ce)    \
    {                                                                     \
        for (uint32_t c0 = cb; c0 < ce; c0 += TILE_COLS) {                \
            const uint32_t C = ce - c0 < TILE_COLS ? ce - c0 : TILE_COLS; \
            uint32_t r0 = 0;                                              \
            for (; r0 + TILE_ROWS <= j->n; r0 += TILE_ROWS)               \
                C == 2 ? TILE(j, r0, c0, 4, 2) : TILE(j, r0, c0, 4, 1);   \
            for (; r0 < j->n; r0++)                                       \
                C == 2 ? TILE(j, r0, c0, 1, 2) : TILE(j, r0, c0, 1, 1);   \
        }                                                                 \
    }

#if defined(__x86_64__)
__attribute__((target("avx2"))) static inline float hsum256(__m256 v)
{
    __m128 s =
        _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
static inline float hsum128(__m128 s)
{
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
#define MADD_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define MADD_SSE(a, b, c) _mm_add_ps(c, _mm_mul_ps(a, b))
#define AVX2_FMA __attribute__((target("avx2,fma")))
ROWS_TILE(tile_avx2, AVX2_FMA, __m256, 8, _mm256_loadu_ps, MADD_FMA,
          _mm256_setzero_ps, hsum256)
ROWS_RANGE(range_avx2, AVX2_FMA, tile_avx2)
ROWS_TILE(tile_sse, , __m128, 4, _mm_loadu_ps, MADD_SSE, _mm_setzero_ps,
          hsum128)
ROWS_RANGE(range_sse, , tile_sse)
#else
/* Elsewhere: 8 lanes as a plain array, the same order. */
typedef struct {
    float l[8];
} lanes8;
static inline lanes8 lanes_zero(void) { return (lanes8){{0}}; }
static inline lanes8 lanes_load(const float *p)
{
    lanes8 v;
    for (int i = 0; i < 8; i++)
        v.l[i] = p[i];
    return v;
}
static inline lanes8 lanes_madd(lanes8 a, lanes8 b, lanes8 c)
{
    for (int i = 0; i < 8; i++)
        c.l[i] += a.l[i] * b.l[i];
    return c;
}
static inline float lanes_hsum(lanes8 v)
{
    return ((v.l[0] + v.l[4]) + (v.l[2] + v.l[6])) +
           ((v.l[1] + v.l[5]) + (v.l[3] + v.l[7]));
}
ROWS_TILE(tile_c, , lanes8, 8, lanes_load, lanes_madd, lanes_zero, lanes_hsum)
ROWS_RANGE(range_c, , tile_c)
#endif

static void rows_part(void *arg, int part, int parts)
{
    const rows_job *j = arg;
    size_t b, e;
    nn_pool_range(j->u, part, parts, TILE_COLS, &b, &e);
    if (e <= b)
        return;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        range_avx2(j, (uint32_t)b, (uint32_t)e);
    else
        range_sse(j, (uint32_t)b, (uint32_t)e);
#else
    range_c(j, (uint32_t)b, (uint32_t)e);
#endif
}

void nn_cpu_rows_gemm(const nn_exec *ex, float *out, const float *x,
                      const float *w, uint32_t n, uint32_t u, uint32_t k,
                      float beta)
{
    if (!n || !u)
        return;
    rows_job j = {
        .out = out, .x = x, .w = w, .n = n, .u = u, .k = k, .beta = beta};
    nn_pool_run(nn_cpu_pool_for(ex, (double)n * u * k, PAR_MIN_MACS), rows_part,
                &j);
}
