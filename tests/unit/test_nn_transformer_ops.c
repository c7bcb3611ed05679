/* test_nn_transformer_ops.c - the transformer ops of the CPU backend
 * (issue 31: gelu_tanh, embedding, layernorm over the last axis, causal
 * attention, cross-entropy with an ignore index).
 *
 * Each forward is compared with a plain double-precision reference written
 * here; each backward with central finite differences of that double
 * reference (step 1e-4 in double, so the numeric gradient carries no float
 * rounding) of L = sum(R * out) for a fixed random R: a gradient passes
 * within 1e-4 absolute plus 1e-3 relative. Determinism across thread
 * counts is checked bit for bit on sizes that split over the pool. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ty.h"
#include "models/backend.h"
#include "models/pool.h"
#include "testutil.h"

#define B nn_backend_cpu
#define FD_H 1e-4
#define FD_ABS 1e-4
#define FD_REL 1e-3

static void fill(float *x, size_t n, uint64_t seed, float scale)
{
    tu_fill_uniform(x, n, seed, 31, scale);
}

static void *xmalloc(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    assert_non_null(p);
    return p;
}

static void grad_close(double got, double want, const char *what, size_t i)
{
    if (fabs(got - want) > FD_ABS + FD_REL * fabs(want))
        fail_msg("%s[%zu]: kernel %.8g, finite difference %.8g", what, i, got,
                 want);
}

static void test_op_names(void **state)
{
    (void)state;
    assert_string_equal(nn_op_name(NN_OP_GELU_TANH), "gelu_tanh");
    assert_string_equal(nn_op_name(NN_OP_EMBEDDING), "embedding");
    assert_string_equal(nn_op_name(NN_OP_ATTENTION), "attention");
    assert_string_equal(nn_op_name(NN_OP_XENT_IGNORE), "xent_ignore");
    assert_true(B.supports(NN_OP_ATTENTION));
    assert_non_null(B.embedding_forward);
    assert_non_null(B.embedding_backward);
    assert_non_null(B.attention_forward);
    assert_non_null(B.attention_backward);
    assert_non_null(B.xent_ignore);
}

/* ---- gelu (tanh) ---- */

static double gelu_tanh_ref(double x)
{
    const double k = sqrt(2.0 / M_PI);
    return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}

static void test_gelu_tanh(void **state)
{
    (void)state;
    enum { N = 301 };
    float x[N], y[N], dy[N], dx[N];
    for (int i = 0; i < N; i++)
        x[i] = -6.0f + 12.0f * (float)i / (N - 1);
    fill(dy, N, 1, 1.0f);
    B.act_forward(NULL, NN_OP_GELU_TANH, y, x, N);
    B.act_backward(NULL, NN_OP_GELU_TANH, dx, dy, x, y, N);
    for (int i = 0; i < N; i++) {
        assert_float_equal(y[i], gelu_tanh_ref(x[i]), 2e-6);
        double num = (gelu_tanh_ref(x[i] + FD_H) - gelu_tanh_ref(x[i] - FD_H)) /
                     (2 * FD_H) * dy[i];
        grad_close(dx[i], num, "gelu_tanh dx", (size_t)i);
    }
    /* Differs from the exact (erf) GELU: not the same op under a new name. */
    float ye[N];
    B.act_forward(NULL, NN_OP_GELU, ye, x, N);
    double most = 0;
    for (int i = 0; i < N; i++)
        most = fmax(most, fabs((double)ye[i] - y[i]));
    assert_true(most > 1e-4);
}

/* ---- embedding ---- */

static void test_embedding(void **state)
{
    (void)state;
    enum { V = 11, C = 7, N = 23 };
    float table[V * C], out[N * C], dout[N * C], dtab[V * C];
    int32_t ids[N];
    fill(table, V * C, 2, 1.0f);
    fill(dout, N * C, 3, 1.0f);
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)((i * 7 + 3) % V); /* repeats */
    ids[5] = ids[6] = ids[7] = 4;
    B.embedding_forward(NULL, out, ids, table, N, C);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++)
            assert_float_equal(out[i * C + c], table[ids[i] * C + c], 0);
    for (int i = 0; i < V * C; i++)
        dtab[i] = 0.5f; /* accumulates */
    B.embedding_backward(NULL, dtab, dout, ids, N, V, C);
    for (int v = 0; v < V; v++)
        for (int c = 0; c < C; c++) {
            double s = 0.5;
            for (int i = 0; i < N; i++)
                if (ids[i] == v)
                    s += dout[i * C + c];
            assert_float_equal(dtab[v * C + c], s, 1e-5);
        }
}

/* The scatter-add has the same bits whatever the thread count: heavy
 * repeats (16 distinct ids over 1024 tokens) on a size that splits. */
static void test_embedding_backward_deterministic(void **state)
{
    (void)state;
    enum { V = 50, C = 96, N = 1024 };
    float *dout = xmalloc(sizeof(float) * N * C);
    int32_t *ids = xmalloc(sizeof(int32_t) * N);
    float *ref = xmalloc(sizeof(float) * V * C);
    float *got = xmalloc(sizeof(float) * V * C);
    fill(dout, (size_t)N * C, 4, 1.0f);
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)((i * 13) % 16);
    B.embedding_backward(NULL, ref, dout, ids, N, V, C);
    const int counts[] = {2, 3, 4, 7};
    for (size_t t = 0; t < TY_ARRAY_LEN(counts); t++) {
        nn_pool *p = nn_pool_create(counts[t]);
        assert_non_null(p);
        nn_exec ex = {.pool = p};
        memset(got, 0, sizeof(float) * V * C);
        B.embedding_backward(&ex, got, dout, ids, N, V, C);
        if (memcmp(got, ref, sizeof(float) * V * C) != 0)
            fail_msg("embedding backward on %d threads differs from one",
                     counts[t]);
        /* and the forward */
        float *o1 = xmalloc(sizeof(float) * N * C);
        float *o2 = xmalloc(sizeof(float) * N * C);
        B.embedding_forward(NULL, o1, ids, dout, N, C);
        B.embedding_forward(&ex, o2, ids, dout, N, C);
        assert_memory_equal(o1, o2, sizeof(float) * N * C);
        free(o1);
        free(o2);
        nn_pool_destroy(p);
    }
    free(dout);
    free(ids);
    free(ref);
    free(got);
}

/* ---- layernorm over the last axis (NN_OP_LAYERNORM on (B*T, C) rows) ---- */

/* sum(R * layernorm(x)) over rows (n, d), in double. */
static double ln_loss(const double *x, const double *g, const double *b,
                      const float *r, int n, int d, double eps, double *out)
{
    double L = 0;
    for (int i = 0; i < n; i++) {
        double m = 0, v = 0;
        for (int j = 0; j < d; j++)
            m += x[i * d + j];
        m /= d;
        for (int j = 0; j < d; j++)
            v += (x[i * d + j] - m) * (x[i * d + j] - m);
        v /= d;
        double rs = 1.0 / sqrt(v + eps);
        for (int j = 0; j < d; j++) {
            double y = (x[i * d + j] - m) * rs * g[j] + b[j];
            if (out)
                out[i * d + j] = y;
            L += r[i * d + j] * y;
        }
    }
    return L;
}

static double fd_at(double *p, size_t i, double (*f)(void *), void *ctx)
{
    double keep = p[i];
    p[i] = keep + FD_H;
    double lp = f(ctx);
    p[i] = keep - FD_H;
    double lm = f(ctx);
    p[i] = keep;
    return (lp - lm) / (2 * FD_H);
}

typedef struct {
    double *x, *g, *b;
    const float *r;
    int n, d;
    double eps;
} ln_ctx;

static double ln_f(void *p)
{
    ln_ctx *c = p;
    return ln_loss(c->x, c->g, c->b, c->r, c->n, c->d, c->eps, NULL);
}

static void test_layernorm_rows(void **state)
{
    (void)state;
    enum { N = 6, D = 10 }; /* (B=2, T=3, C=10) */
    const float eps = 1e-5f;
    float x[N * D], g[D], b[D], out[N * D], mean[N], rstd[N], r[N * D];
    float dx[N * D], dg[D] = {0}, db[D] = {0};
    double xd[N * D], gd[D], bd[D], ref[N * D];
    fill(x, N * D, 5, 2.0f);
    fill(g, D, 6, 1.0f);
    fill(b, D, 7, 1.0f);
    fill(r, N * D, 8, 1.0f);
    for (int i = 0; i < N * D; i++)
        xd[i] = x[i];
    for (int j = 0; j < D; j++) {
        gd[j] = g[j];
        bd[j] = b[j];
    }
    B.layernorm_forward(NULL, out, mean, rstd, x, g, b, N, D, eps);
    ln_loss(xd, gd, bd, r, N, D, eps, ref);
    for (int i = 0; i < N * D; i++)
        assert_float_equal(out[i], ref[i], 1e-5);
    B.layernorm_backward(NULL, dx, dg, db, r, x, g, mean, rstd, N, D);
    ln_ctx c = {xd, gd, bd, r, N, D, eps};
    for (size_t i = 0; i < N * D; i++)
        grad_close(dx[i], fd_at(xd, i, ln_f, &c), "layernorm dx", i);
    for (size_t j = 0; j < D; j++) {
        grad_close(dg[j], fd_at(gd, j, ln_f, &c), "layernorm dgamma", j);
        grad_close(db[j], fd_at(bd, j, ln_f, &c), "layernorm dbeta", j);
    }
}

/* ---- cross-entropy with an ignore index ---- */

typedef struct {
    double *x;
    const int32_t *y;
    int n, v;
    int32_t ignore;
} xe_ctx;

/* The mean over counted rows of -log softmax(x)[y], in double. */
static double xe_f(void *p)
{
    xe_ctx *c = p;
    double s = 0;
    int cnt = 0;
    for (int i = 0; i < c->n; i++) {
        if (c->y[i] == c->ignore)
            continue;
        const double *x = c->x + (size_t)i * c->v;
        double m = x[0], z = 0;
        for (int k = 1; k < c->v; k++)
            m = fmax(m, x[k]);
        for (int k = 0; k < c->v; k++)
            z += exp(x[k] - m);
        s += log(z) + m - x[c->y[i]];
        cnt++;
    }
    return cnt ? s / cnt : 0.0;
}

static void check_xent(int32_t ignore, const int32_t *y, int n, int v,
                       uint32_t want_count, uint64_t seed)
{
    float *x = xmalloc(sizeof(float) * n * v);
    float *d = xmalloc(sizeof(float) * n * v);
    double *xd = xmalloc(sizeof(double) * n * v);
    fill(x, (size_t)n * v, seed, 3.0f);
    for (int i = 0; i < n * v; i++) {
        xd[i] = x[i];
        d[i] = 99.0f; /* assigned, ignored rows too */
    }
    uint32_t cnt = 12345;
    double loss = B.xent_ignore(NULL, d, &cnt, x, y, (uint32_t)n, (uint32_t)v,
                                ignore, 1.0f, 1.0);
    assert_int_equal(cnt, want_count);
    xe_ctx c = {xd, y, n, v, ignore};
    assert_float_equal(loss, xe_f(&c), 1e-6);
    for (size_t i = 0; i < (size_t)n * v; i++) {
        if (y[i / v] == ignore)
            assert_float_equal(d[i], 0.0f, 0);
        grad_close(d[i], fd_at(xd, i, xe_f, &c), "xent dlogits", i);
    }
    /* grad_scale multiplies the gradient, not the loss; no dlogits: loss
     * only. */
    float *d2 = xmalloc(sizeof(float) * n * v);
    double l2 = B.xent_ignore(NULL, d2, NULL, x, y, (uint32_t)n, (uint32_t)v,
                              ignore, 0.25f, 1.0);
    assert_float_equal(l2, loss, 0);
    for (int i = 0; i < n * v; i++)
        assert_float_equal(d2[i], 0.25f * d[i], 1e-7);
    assert_float_equal(B.xent_ignore(NULL, NULL, NULL, x, y, (uint32_t)n,
                                     (uint32_t)v, ignore, 1.0f, 1.0),
                       loss, 0);
    /* weight multiplies the mean (a language model's windows), not the
     * gradient; with acc the result goes there, not to the caller */
    float *d3 = xmalloc(sizeof(float) * n * v);
    assert_float_equal(B.xent_ignore(NULL, d3, NULL, x, y, (uint32_t)n,
                                     (uint32_t)v, ignore, 1.0f, 5.0),
                       loss * 5.0, 0);
    assert_memory_equal(d3, d, sizeof(float) * n * v);
    double acc[NN_ACC_COUNT] = {[NN_ACC_LOSS] = 1.25, [NN_ACC_CORRECT] = 3.0};
    nn_exec ex = {.acc = acc};
    uint32_t cnt2 = 12345;
    memset(d3, 0, sizeof(float) * n * v);
    assert_float_equal(B.xent_ignore(&ex, d3, &cnt2, x, y, (uint32_t)n,
                                     (uint32_t)v, ignore, 1.0f, 5.0),
                       0.0, 0);
    assert_int_equal(cnt2, 0);
    assert_float_equal(acc[NN_ACC_LOSS], 1.25 + loss * 5.0, 0);
    assert_float_equal(acc[NN_ACC_CORRECT], 3.0, 0);
    assert_memory_equal(d3, d, sizeof(float) * n * v);
    free(d3);
    free(x);
    free(d);
    free(d2);
    free(xd);
}

static void test_xent_ignore(void **state)
{
    (void)state;
    const int32_t y[] = {3, -1, 0, 6, -1, 2, 2};
    check_xent(-1, y, 7, 7, 5, 9);
    /* Any value may be the ignore index, a class id too. */
    check_xent(2, y, 7, 7, 5, 10);
    /* Nothing counted: loss 0, gradient 0. */
    const int32_t none[] = {-100, -100, -100};
    check_xent(-100, none, 3, 5, 0, 11);
    /* Large logits: the maximum is subtracted, nothing overflows. */
    float x[4] = {1000.0f, 999.0f, -1000.0f, 0.0f}, d[4];
    int32_t t[1] = {1};
    double l = B.xent_ignore(NULL, d, NULL, x, t, 1, 4, -1, 1.0f, 1.0);
    assert_float_equal(l, log(1.0 + exp(1.0)), 1e-6);
    for (int i = 0; i < 4; i++)
        assert_true(isfinite(d[i]));
}

static void test_xent_ignore_threads(void **state)
{
    (void)state;
    enum { N = 200, V = 300 };
    float *x = xmalloc(sizeof(float) * N * V);
    float *d1 = xmalloc(sizeof(float) * N * V);
    float *d2 = xmalloc(sizeof(float) * N * V);
    int32_t y[N];
    fill(x, (size_t)N * V, 12, 4.0f);
    for (int i = 0; i < N; i++)
        y[i] = i % 9 == 0 ? -1 : (int32_t)((i * 37) % V);
    double l1 = B.xent_ignore(NULL, d1, NULL, x, y, N, V, -1, 1.0f, 1.0);
    nn_pool *p = nn_pool_create(3);
    assert_non_null(p);
    nn_exec ex = {.pool = p};
    double l2 = B.xent_ignore(&ex, d2, NULL, x, y, N, V, -1, 1.0f, 1.0);
    /* Rows are one part's each: gradients identical; the loss is summed
     * by part, so within rounding. */
    assert_memory_equal(d1, d2, sizeof(float) * N * V);
    assert_float_equal(l1, l2, 1e-12 * fabs(l1) + 1e-12);
    nn_pool_destroy(p);
    free(x);
    free(d1);
    free(d2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op_names),
        cmocka_unit_test(test_gelu_tanh),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_embedding_backward_deterministic),
        cmocka_unit_test(test_layernorm_rows),
        cmocka_unit_test(test_xent_ignore),
        cmocka_unit_test(test_xent_ignore_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
