/* test_nn_attention.c - the CPU backend's causal multi-head attention
 * core (NN_OP_ATTENTION, issue 31).
 *
 * Forward against a double-precision reference written here (within 1e-5
 * absolute), backward against central finite differences of that
 * reference (step 1e-4 in double; within 1e-4 absolute plus 1e-3
 * relative) of L = sum(R * out), in the fused-QKV layout (ld = 3 C) and
 * the separate one (ld = C). The causal mask: changing a token's q, k or v
 * changes no output of an earlier position (bit for bit) and does change
 * its own. Results have the same bits on one thread and on several. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
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
    tu_fill_uniform(x, n, seed, 32, scale);
}

static void *xmalloc(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    assert_non_null(p);
    return p;
}

typedef struct {
    uint32_t b, t, h, d, ld;
} geom;

/* out (b, t, h d) of causal attention over q, k, v (stride ld), double. */
static void attn_ref(const geom *g, const double *q, const double *k,
                     const double *v, double *out)
{
    const uint32_t c = g->h * g->d;
    const double s = 1.0 / sqrt((double)g->d);
    double *w = xmalloc(sizeof(double) * g->t);
    for (uint32_t bi = 0; bi < g->b; bi++)
        for (uint32_t hi = 0; hi < g->h; hi++)
            for (uint32_t i = 0; i < g->t; i++) {
                const double *qi = q + (bi * g->t + i) * g->ld + hi * g->d;
                double m = -INFINITY, z = 0;
                for (uint32_t j = 0; j <= i; j++) {
                    const double *kj = k + (bi * g->t + j) * g->ld + hi * g->d;
                    double dot = 0;
                    for (uint32_t e = 0; e < g->d; e++)
                        dot += qi[e] * kj[e];
                    w[j] = dot * s;
                    m = fmax(m, w[j]);
                }
                for (uint32_t j = 0; j <= i; j++)
                    z += (w[j] = exp(w[j] - m));
                double *o = out + (bi * g->t + i) * c + hi * g->d;
                for (uint32_t e = 0; e < g->d; e++) {
                    double acc = 0;
                    for (uint32_t j = 0; j <= i; j++)
                        acc += w[j] / z *
                               v[(bi * g->t + j) * g->ld + hi * g->d + e];
                    o[e] = acc;
                }
            }
    free(w);
}

typedef struct {
    const geom *g;
    double *q, *k, *v, *out;
    const float *r;
} fd_ctx;

static double loss(fd_ctx *c)
{
    attn_ref(c->g, c->q, c->k, c->v, c->out);
    size_t n = (size_t)c->g->b * c->g->t * c->g->h * c->g->d;
    double L = 0;
    for (size_t i = 0; i < n; i++)
        L += c->r[i] * c->out[i];
    return L;
}

static double fd_at(fd_ctx *c, double *p, size_t i)
{
    double keep = p[i];
    p[i] = keep + FD_H;
    double lp = loss(c);
    p[i] = keep - FD_H;
    double lm = loss(c);
    p[i] = keep;
    return (lp - lm) / (2 * FD_H);
}

/* q, k, v: the thirds of one (b, t, 3c) buffer when fused, else three
 * (b, t, c) buffers. */
static void check_geom(uint32_t b, uint32_t t, uint32_t h, uint32_t d,
                       int fused, uint64_t seed)
{
    const uint32_t c = h * d;
    geom g = {b, t, h, d, fused ? 3 * c : c};
    const size_t rows = (size_t)b * t, nx = rows * g.ld, no = rows * c;
    const size_t na = (size_t)b * h * t * t;
    /* buffers: fused -> one of 3c per row, the pointers offset by c */
    float *x[3], *dx[3];
    float *base = NULL, *dbase = NULL;
    if (fused) {
        base = xmalloc(sizeof(float) * nx);
        dbase = xmalloc(sizeof(float) * nx);
        fill(base, nx, seed, 1.5f);
        for (int m = 0; m < 3; m++) {
            x[m] = base + m * c;
            dx[m] = dbase + m * c;
        }
    } else {
        for (int m = 0; m < 3; m++) {
            x[m] = xmalloc(sizeof(float) * nx);
            dx[m] = xmalloc(sizeof(float) * nx);
            fill(x[m], nx, seed + m, 1.5f);
        }
    }
    float *out = xmalloc(sizeof(float) * no), *r = xmalloc(sizeof(float) * no);
    float *att = xmalloc(sizeof(float) * na),
          *datt = xmalloc(sizeof(float) * na);
    fill(r, no, seed + 7, 1.0f);
    B.attention_forward(NULL, out, att, x[0], x[1], x[2], b, t, h, d, g.ld,
                        NULL);
    B.attention_backward(NULL, dx[0], dx[1], dx[2], datt, r, x[0], x[1], x[2],
                         att, b, t, h, d, g.ld, NULL);

    /* the reference reads the same floats, in double */
    double *xd[3];
    for (int m = 0; m < 3; m++) {
        xd[m] = xmalloc(sizeof(double) * nx);
        for (size_t i = 0; i < rows; i++)
            for (uint32_t e = 0; e < c; e++)
                xd[m][i * g.ld + e] = x[m][i * g.ld + e];
    }
    double *ref = xmalloc(sizeof(double) * no);
    fd_ctx fc = {&g, xd[0], xd[1], xd[2], ref, r};
    (void)loss(&fc);
    for (size_t i = 0; i < no; i++)
        if (fabs(out[i] - ref[i]) > 1e-5)
            fail_msg("attention out[%zu]: %.8g, reference %.8g", i, out[i],
                     ref[i]);
    /* probabilities: rows sum to 1, nothing above the diagonal */
    for (size_t p = 0; p < (size_t)b * h; p++)
        for (uint32_t i = 0; i < t; i++) {
            double s = 0;
            for (uint32_t j = 0; j < t; j++) {
                float a = att[(p * t + i) * t + j];
                if (j > i)
                    assert_float_equal(a, 0.0f, 0);
                s += a;
            }
            assert_float_equal(s, 1.0, 1e-6);
        }
    static const char *names[3] = {"dq", "dk", "dv"};
    for (int m = 0; m < 3; m++)
        for (size_t i = 0; i < rows; i++)
            for (uint32_t e = 0; e < c; e++) {
                size_t at = i * g.ld + e;
                double num = fd_at(&fc, xd[m], at);
                double got = dx[m][at];
                if (fabs(got - num) > FD_ABS + FD_REL * fabs(num))
                    fail_msg("attention %s[%zu] (ld %u): kernel %.8g, finite "
                             "difference %.8g",
                             names[m], at, g.ld, got, num);
            }
    for (int m = 0; m < 3; m++)
        free(xd[m]);
    if (fused) {
        free(base);
        free(dbase);
    } else {
        for (int m = 0; m < 3; m++) {
            free(x[m]);
            free(dx[m]);
        }
    }
    free(out);
    free(r);
    free(att);
    free(datt);
    free(ref);
}

static void test_attention_vs_reference_fused(void **state)
{
    (void)state;
    check_geom(2, 5, 3, 4, 1, 40);
    check_geom(1, 1, 1, 1, 1, 41); /* one token: out = v */
}

static void test_attention_vs_reference_separate(void **state)
{
    (void)state;
    check_geom(2, 7, 2, 3, 0, 50);
    check_geom(3, 4, 1, 8, 0, 51);
}

/* Changing token j (q, k and v, every head) leaves every output before j
 * bit for bit, and changes j's. */
static void test_attention_causal(void **state)
{
    (void)state;
    enum { Bn = 2, T = 9, H = 2, D = 4, C = H * D, LD = 3 * C };
    float x[Bn * T * LD], out0[Bn * T * C], out1[Bn * T * C];
    float att[Bn * H * T * T];
    fill(x, Bn * T * LD, 60, 1.0f);
    B.attention_forward(NULL, out0, att, x, x + C, x + 2 * C, Bn, T, H, D, LD,
                        NULL);
    for (uint32_t j = 0; j < T; j++) {
        float y[Bn * T * LD];
        memcpy(y, x, sizeof y);
        for (uint32_t e = 0; e < LD; e++)
            y[(1 * T + j) * LD + e] += 0.5f; /* sequence 1, token j */
        B.attention_forward(NULL, out1, att, y, y + C, y + 2 * C, Bn, T, H, D,
                            LD, NULL);
        /* sequence 0 untouched; sequence 1 before j untouched */
        assert_memory_equal(out0, out1, sizeof(float) * (T + j) * C);
        int changed = 0;
        for (uint32_t e = 0; e < C; e++)
            changed |= out0[(T + j) * C + e] != out1[(T + j) * C + e];
        assert_true(changed);
    }
}

static void test_attention_threads(void **state)
{
    (void)state;
    enum { Bn = 2, T = 64, H = 4, D = 16, C = H * D, LD = 3 * C };
    const size_t nx = (size_t)Bn * T * LD, no = (size_t)Bn * T * C;
    const size_t na = (size_t)Bn * H * T * T;
    float *x = xmalloc(sizeof(float) * nx), *r = xmalloc(sizeof(float) * no);
    fill(x, nx, 70, 1.0f);
    fill(r, no, 71, 1.0f);
    float *o[2], *a[2], *da[2], *dx[2];
    nn_pool *p = nn_pool_create(3);
    assert_non_null(p);
    nn_exec ex = {.pool = p};
    for (int k = 0; k < 2; k++) {
        o[k] = xmalloc(sizeof(float) * no);
        a[k] = xmalloc(sizeof(float) * na);
        da[k] = xmalloc(sizeof(float) * na);
        dx[k] = xmalloc(sizeof(float) * nx);
        const nn_exec *e = k ? &ex : NULL;
        B.attention_forward(e, o[k], a[k], x, x + C, x + 2 * C, Bn, T, H, D, LD,
                            NULL);
        B.attention_backward(e, dx[k], dx[k] + C, dx[k] + 2 * C, da[k], r, x,
                             x + C, x + 2 * C, a[k], Bn, T, H, D, LD, NULL);
    }
    assert_memory_equal(o[0], o[1], sizeof(float) * no);
    assert_memory_equal(a[0], a[1], sizeof(float) * na);
    assert_memory_equal(dx[0], dx[1], sizeof(float) * nx);
    for (int k = 0; k < 2; k++) {
        free(o[k]);
        free(a[k]);
        free(da[k]);
        free(dx[k]);
    }
    nn_pool_destroy(p);
    free(x);
    free(r);
}

/* Large scores: the maximum is subtracted, nothing overflows. */
static void test_attention_stable(void **state)
{
    (void)state;
    enum { T = 3, D = 2 };
    float q[T * D] = {100, 100, 100, 100, 100, 100};
    float k[T * D] = {100, 100, 99, 99, -100, -100};
    float v[T * D] = {1, 2, 3, 4, 5, 6};
    float out[T * D], att[T * T];
    B.attention_forward(NULL, out, att, q, k, v, 1, T, 1, D, D, NULL);
    for (int i = 0; i < T * D; i++)
        assert_true(isfinite(out[i]));
    /* row 2: scores 20000/sqrt2, 19800/sqrt2, -20000/sqrt2: all on key 0 */
    assert_float_equal(out[2 * D], 1.0f, 1e-6);
    assert_float_equal(out[2 * D + 1], 2.0f, 1e-6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_vs_reference_fused),
        cmocka_unit_test(test_attention_vs_reference_separate),
        cmocka_unit_test(test_attention_causal),
        cmocka_unit_test(test_attention_threads),
        cmocka_unit_test(test_attention_stable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
