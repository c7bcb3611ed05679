/*
 * matmul.c - the CPU backend's GEMM (NN_OP_GEMM): OpenBLAS's SGEMM on one
 * thread per part, or its SGEMV per row for a few rows against a large B.
 *
 * Parallelism comes from the execution context's worker pool, not from
 * OpenBLAS's threads (which must be set to 1: its own threading was several
 * times slower than one thread on these small GEMMs): a large GEMM is split
 * into column (or row) blocks. Every output element is computed by exactly
 * one part, the same way for a given thread count, so runs are
 * bit-reproducible for that count.
 */

/* GCC 12's -O2 only vectorizes loops its "very cheap" model accepts; the
 * elementwise kernels here are worth the full cost model. */
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")

#include "models/cpu/cpu_internal.h"
#include "models/cpu/kernels.h"

#include <cblas.h>
#include <pthread.h>
#include <string.h>

typedef struct {
    float *c;
    const float *a, *b;
    int ta, tb, m, n, k;
    float alpha, beta;
    int split_n; /* split C's columns, else its rows */
    int gemv;    /* one GEMV per row of C (small m, see below) */
} gemm_job;

/* A GEMM of a few rows (a predict of a few examples through a dense
 * layer) can be cheaper as one GEMV per row, when OpenBLAS's GEMM would
 * pack all of B first. Measured with `bench_gemm rows` (OpenBLAS 0.3.21,
 * one thread, a virtual Intel Xeon with AVX-512 and 2 MiB of L2 per core),
 * microseconds of GEMM -> one GEMV per row, for C (m, n) = A B^T:
 *
 *   B (n x k)      m=1          m=2          m=4          m=8
 *   128 x 256      0.9 -> 1.3   1.3 -> 2.6   1.8 -> 5.0   3.4 -> 9.9
 *   256 x 784      9.7 -> 8.4   11 -> 17     15 -> 34     74 -> 67
 *   256 x 1024     7.0 -> 9.1   10 -> 19     84 -> 37     100 -> 71
 *   512 x 1024     25 -> 27     179 -> 54    172 -> 108   225 -> 223
 *   1024 x 1024    364 -> 139   378 -> 279   381 -> 556   452 -> 1109
 *   1024 x 3136    1153 -> 422  1149 -> 842  1182 -> 1699 1377 -> 3373
 *
 * The SkylakeX kernels (what trainyard runs on any AVX-512 CPU) do not pack
 * while m*n*k <= 10^6 (OpenBLAS's small-matrix path). There GEMM wins from
 * two rows on, and at one row GEMV wins by 13% for 256 x 784 but loses by
 * 30% for 256 x 1024, so GEMM stays (the README's MLP at one row too).
 * Past that bound GEMM packs B (about 0.35 ns per float of B), and one GEMV
 * per row wins up to four rows while B fits in L2, up to two rows beyond
 * it, where each row's GEMV streams B from L3. The AVX2 (Haswell) kernels
 * always pack, so GEMV would win more widely there (256 x 784 at m=1: 61 ->
 * 8 us, m=4: 60 -> 32; 128 x 256 at m=1: 10 -> 1.5). For C = A B^T (dense
 * layers' forward pass) every GEMV this rule picks was faster on both
 * kernel sets; for C = A B one was not (512 x 1024 at m=4 on Haswell, 17%
 * slower). The rule reads only the shape, not the kernel set, so results
 * stay bit-identical run to run for a given shape and thread count. */
#define GEMV_MAX_ROWS 4
#define GEMV_PACKED_MNK 1e6         /* OpenBLAS's small-matrix bound */
#define GEMV_L2_B_FLOATS (1u << 20) /* B this large is past L2: m <= 2 */

/* 1 when OpenBLAS's SGEMM kernels have the small-matrix path that skips
 * packing (0.3.21: the AVX-512 cores, SkylakeX and later). The AVX2 and
 * older cores (Haswell, Zen, Sandybridge, generic) pack B on every call,
 * whatever its size: there a row or two through the README's MLP (784 ->
 * 256 -> 128 -> 10) is GEMV's (its first layer: 61 us as GEMM, 8 us as
 * GEMV on the Haswell kernels of this Xeon). Fixed once the kernels are
 * chosen, so results stay bit-identical run to run on a machine. */
static int small_path;
static pthread_once_t small_path_once = PTHREAD_ONCE_INIT;

static void small_path_init(void)
{
    small_path =
        cpu_openblas_core_isa(cpu_kernels_get()->core) >= CPU_ISA_AVX512;
}

static int gemm_as_gemv(int trans_a, int m, int n, int k)
{
    const double b = (double)n * (double)k;
    if (trans_a || m > GEMV_MAX_ROWS)
        return 0;
    pthread_once(&small_path_once, small_path_init);
    if (!small_path && m <= 2)
        return 1;
    if ((double)m * b <= GEMV_PACKED_MNK)
        return 0;
    return b < GEMV_L2_B_FLOATS || m <= 2;
}

static void gemm_part(void *arg, int part, int parts)
{
    const gemm_job *g = arg;
    const int lda = g->ta ? g->m : g->k, ldb = g->tb ? g->k : g->n;
    size_t b, e;
    if (g->gemv) {
        /* C row i (columns [b, e)) = alpha op(B)[:, b:e]^T a_i + beta C. */
        nn_pool_range((size_t)g->n, part, parts, PAR_ALIGN, &b, &e);
        if (e <= b)
            return;
        for (int i = 0; i < g->m; i++) {
            const float *ai = g->a + (size_t)i * g->k;
            float *ci = g->c + (size_t)i * g->n + b;
            /* beta 0 must not read C (GEMM's contract). GEMV scales y by
             * beta instead; Debian's OpenBLAS 0.3.21 writes zeros for 0,
             * but whether 0 x NaN stays NaN is the library's choice, so C
             * is cleared here and the result never depends on it. */
            if (g->beta == 0.0f)
                memset(ci, 0, (e - b) * sizeof *ci);
            if (g->tb) /* B (n, k): rows b..e of B times a_i */
                cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)(e - b), g->k,
                            g->alpha, g->b + b * (size_t)g->k, ldb, ai, 1,
                            g->beta, ci, 1);
            else /* B (k, n): columns b..e of B, transposed, times a_i */
                cblas_sgemv(CblasRowMajor, CblasTrans, g->k, (int)(e - b),
                            g->alpha, g->b + b, ldb, ai, 1, g->beta, ci, 1);
        }
    } else if (g->split_n) {
        nn_pool_range((size_t)g->n, part, parts, PAR_ALIGN, &b, &e);
        if (e > b)
            cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans,
                        g->tb ? CblasTrans : CblasNoTrans, g->m, (int)(e - b),
                        g->k, g->alpha, g->a, lda,
                        g->b + (g->tb ? b * (size_t)g->k : b), ldb, g->beta,
                        g->c + b, g->n);
    } else {
        nn_pool_range((size_t)g->m, part, parts, PAR_ALIGN, &b, &e);
        if (e > b)
            cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans,
                        g->tb ? CblasTrans : CblasNoTrans, (int)(e - b), g->n,
                        g->k, g->alpha, g->a + (g->ta ? b : b * (size_t)g->k),
                        lda, g->b, ldb, g->beta, g->c + b * (size_t)g->n, g->n);
    }
}

void nn_cpu_gemm(const nn_exec *ex, float *c, const float *a, const float *b,
                 int trans_a, int trans_b, int m, int n, int k, float alpha,
                 float beta)
{
    gemm_job g = {.c = c,
                  .a = a,
                  .b = b,
                  .ta = trans_a,
                  .tb = trans_b,
                  .m = m,
                  .n = n,
                  .k = k,
                  .alpha = alpha,
                  .beta = beta,
                  .split_n = n >= m,
                  .gemv = gemm_as_gemv(trans_a, m, n, k)};
    nn_pool_run(nn_cpu_pool_for(ex, (double)m * n * k, PAR_MIN_MACS), gemm_part,
                &g);
}
