/*
 * matmul.c - the CPU backend's GEMM (NN_OP_GEMM): OpenBLAS's SGEMM on one
 * thread per part, or its SGEMV for one or two rows against a large B.
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

#include <cblas.h>
#include <string.h>

typedef struct {
    float *c;
    const float *a, *b;
    int ta, tb, m, n, k;
    float alpha, beta;
    int split_n; /* split C's columns, else its rows */
    int gemv;    /* one GEMV per row of C (small m, see below) */
} gemm_job;

/* A GEMM of one or two rows against a large B (a predict of a row or two
 * through a big dense layer) is cheaper as GEMVs: OpenBLAS's GEMM packs all
 * of B first, which for a 3136 x 1024 layer costs four times the
 * multiply-adds (bench/gemm.c's shapes; measured with OpenBLAS 0.3.21). At
 * three rows or more, or for a B that fits in the L2 cache, GEMM wins or
 * ties. The choice depends only on the shape, so results stay
 * bit-identical run to run for a given shape and thread count. */
#define GEMV_MAX_ROWS 2
#define GEMV_MIN_B_FLOATS (1u << 20)

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
                  .gemv = !trans_a && m <= GEMV_MAX_ROWS &&
                          (size_t)n * (size_t)k >= GEMV_MIN_B_FLOATS};
    nn_pool_run(nn_cpu_pool_for(ex, (double)m * n * k, PAR_MIN_MACS), gemm_part,
                &g);
}
