/* test_nn_backend.c - every op of every backend against a plain double
 * precision reference (today the CPU backend; a CUDA backend joins the
 * backends[] list and must match the same references). */
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
#include "testutil.h"

static const nn_backend *const backends[] = {&nn_backend_cpu};

/* Uniform in [-scale, scale): testutil's fill on this suite's RNG stream. */
static void fill(float *x, size_t n, uint64_t seed, float scale)
{
    tu_fill_uniform(x, n, seed, 7, scale);
}

static void test_op_table(void **state)
{
    for (int op = 0; op < NN_OP_COUNT; op++) {
        assert_string_not_equal(nn_op_name((nn_op)op), "?");
        for (size_t b = 0; b < TY_ARRAY_LEN(backends); b++)
            assert_true(backends[b]->supports((nn_op)op));
    }
    assert_string_equal(nn_op_name(NN_OP_GELU), "gelu");
    assert_string_equal(nn_op_name(NN_OP_COUNT), "?");
}

static void test_gemm_all_transposes(void **state)
{
    enum { M = 7, N = 5, K = 9 };
    float a[M * K], b[K * N], c[M * N], c0[M * N];
    fill(a, M * K, 1, 1.0f);
    fill(b, K * N, 2, 1.0f);
    fill(c0, M * N, 3, 1.0f);
    for (size_t be = 0; be < TY_ARRAY_LEN(backends); be++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                /* a is stored as op(A) requires: (M,K) or (K,M). */
                memcpy(c, c0, sizeof c);
                backends[be]->gemm(NULL, c, a, b, ta, tb, M, N, K, 0.5f, 2.0f);
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        double s = 0;
                        for (int k = 0; k < K; k++) {
                            double av = ta ? a[k * M + i] : a[i * K + k];
                            double bv = tb ? b[j * K + k] : b[k * N + j];
                            s += av * bv;
                        }
                        double want = 0.5 * s + 2.0 * c0[i * N + j];
                        assert_float_equal(c[i * N + j], want, 1e-5);
                    }
            }
}

static void test_bias_ops(void **state)
{
    float bias[3] = {1, -2, 3}, out[4 * 3], db[3] = {10, 20, 30};
    float dout[4 * 3];
    fill(dout, 12, 4, 1.0f);
    nn_backend_cpu.bias_rows(NULL, out, bias, 4, 3);
    for (int i = 0; i < 12; i++)
        assert_float_equal(out[i], bias[i % 3], 0);
    nn_backend_cpu.bias_grad(NULL, db, dout, 4, 3);
    for (int j = 0; j < 3; j++) {
        double s = 10.0 * (j + 1);
        for (int i = 0; i < 4; i++)
            s += dout[i * 3 + j];
        assert_float_equal(db[j], s, 1e-5); /* accumulates */
    }
}

static double ref_act(nn_op op, double x)
{
    switch (op) {
        case NN_OP_RELU: return x > 0 ? x : 0;
        case NN_OP_TANH: return tanh(x);
        case NN_OP_SIGMOID: return 1.0 / (1.0 + exp(-x));
        default: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    }
}

static void test_activations_forward(void **state)
{
    enum { N = 64 };
    float in[N], out[N];
    fill(in, N, 5, 6.0f);
    in[0] = -100.0f; /* sigmoid must not overflow */
    in[1] = 100.0f;
    for (nn_op op = NN_OP_RELU; op <= NN_OP_GELU; op++) {
        nn_backend_cpu.act_forward(NULL, op, out, in, N);
        for (int i = 0; i < N; i++) {
            assert_true(isfinite(out[i]));
            assert_float_equal(out[i], ref_act(op, in[i]), 2e-6);
        }
    }
    /* PyTorch's exact GELU at a few points. */
    float x[3] = {-1.0f, 0.5f, 2.0f}, y[3];
    nn_backend_cpu.act_forward(NULL, NN_OP_GELU, y, x, 3);
    assert_float_equal(y[0], -0.15865525, 1e-6);
    assert_float_equal(y[1], 0.34573123, 1e-6);
    assert_float_equal(y[2], 1.95449984, 1e-6);
}

static void test_activations_backward_vs_reference(void **state)
{
    enum { N = 64 };
    float in[N], out[N], dout[N], din[N];
    fill(in, N, 6, 4.0f);
    fill(dout, N, 7, 1.0f);
    for (nn_op op = NN_OP_RELU; op <= NN_OP_GELU; op++) {
        nn_backend_cpu.act_forward(NULL, op, out, in, N);
        nn_backend_cpu.act_backward(NULL, op, din, dout, in, out, N);
        for (int i = 0; i < N; i++) {
            if (op == NN_OP_RELU && fabsf(in[i]) < 1e-3f)
                continue;
            double h = 1e-5, x = in[i];
            double d = (ref_act(op, x + h) - ref_act(op, x - h)) / (2 * h);
            assert_float_equal(din[i], dout[i] * d, 1e-5);
        }
    }
}

static void test_dropout(void **state)
{
    enum { N = 20000 };
    static float in[N], out[N], mask[N], din[N];
    for (int i = 0; i < N; i++)
        in[i] = 1.0f + (float)(i % 7);
    ty_rng r;
    ty_rng_seed(&r, 42, 1);
    nn_backend_cpu.dropout_forward(NULL, out, mask, in, N, 0.25f, &r);
    int zeros = 0;
    for (int i = 0; i < N; i++) {
        assert_true(mask[i] == 0.0f || mask[i] == 1.0f / 0.75f);
        zeros += mask[i] == 0.0f;
        assert_float_equal(out[i], in[i] * mask[i], 0);
    }
    assert_in_range(zeros, N / 4 - 400, N / 4 + 400);
    nn_backend_cpu.dropout_backward(NULL, din, in, mask, N);
    for (int i = 0; i < N; i++)
        assert_float_equal(din[i], in[i] * mask[i], 0);
    /* Same stream, same mask. */
    static float mask2[N];
    ty_rng_seed(&r, 42, 1);
    nn_backend_cpu.dropout_forward(NULL, out, mask2, in, N, 0.25f, &r);
    assert_memory_equal(mask, mask2, sizeof mask);
}

static void test_softmax_xent(void **state)
{
    enum { N = 5, C = 4 };
    float logits[N * C], probs[N * C], d[N * C];
    int32_t labels[N] = {0, 3, 2, 1, 3};
    fill(logits, N * C, 8, 3.0f);
    logits[0] = 1000.0f; /* stable for large logits */
    uint32_t correct = 99;
    double loss = nn_backend_cpu.softmax_xent(NULL, d, probs, &correct, logits,
                                              labels, N, C, 1.0f / N);
    double want = 0;
    uint32_t hits = 0;
    for (int i = 0; i < N; i++) {
        const float *x = logits + i * C;
        double mx = x[0];
        int arg = 0;
        for (int j = 1; j < C; j++)
            if (x[j] > mx) {
                mx = x[j];
                arg = j;
            }
        double s = 0;
        for (int j = 0; j < C; j++)
            s += exp(x[j] - mx);
        want += log(s) + mx - x[labels[i]];
        hits += arg == labels[i];
        double psum = 0;
        for (int j = 0; j < C; j++) {
            double p = exp(x[j] - mx) / s;
            psum += probs[i * C + j];
            assert_float_equal(probs[i * C + j], p, 1e-6);
            assert_float_equal(d[i * C + j], (p - (j == labels[i])) / N, 1e-6);
        }
        assert_float_equal(psum, 1.0, 1e-6);
    }
    assert_float_equal(loss, want, 1e-5);
    assert_int_equal(correct, hits);
    /* Probabilities only. */
    float p2[N * C];
    assert_float_equal(nn_backend_cpu.softmax_xent(NULL, NULL, p2, NULL, logits,
                                                   NULL, N, C, 0.0f),
                       0.0, 0);
    assert_memory_equal(p2, probs, sizeof p2);
}

static void test_mse(void **state)
{
    float pred[6] = {1, 2, 3, 4, 5, 6}, target[6] = {1.5f, 2, 2, 4, 7, 6}, d[6];
    double sum = nn_backend_cpu.mse(NULL, d, pred, target, 6, 1.0f / 6);
    assert_float_equal(sum, 0.25 + 1 + 4, 1e-9);
    for (int i = 0; i < 6; i++)
        assert_float_equal(d[i], 2.0 * (pred[i] - target[i]) / 6, 1e-7);
}

/* Every kernel split over a worker pool gives exactly the serial result
 * (elementwise kernels, bias ops and optimizer steps: each element is done
 * by one part the same way) or, for GEMM, the same values to rounding,
 * bit-identical from one run to the next. Sizes are above the split
 * thresholds. */
static void test_parallel_matches_serial(void **state)
{
    nn_pool *pool = nn_pool_create(3);
    assert_non_null(pool);
    assert_int_equal(nn_pool_threads(pool), 3);
    const nn_exec par = {.pool = pool};
    const nn_backend *be = &nn_backend_cpu;
    enum { L = 100003 };
    float *in = malloc(L * sizeof(float)), *out = malloc(L * sizeof(float));
    float *a1 = malloc(L * sizeof(float)), *a2 = malloc(L * sizeof(float));
    float *d = malloc(L * sizeof(float));
    fill(in, L, 31, 3.0f);
    fill(d, L, 32, 1.0f);
    for (nn_op op = NN_OP_RELU; op <= NN_OP_GELU; op++) {
        be->act_forward(NULL, op, a1, in, L);
        be->act_forward(&par, op, a2, in, L);
        assert_memory_equal(a1, a2, L * sizeof(float));
        memcpy(out, a1, L * sizeof(float));
        be->act_backward(NULL, op, a1, d, in, out, L);
        be->act_backward(&par, op, a2, d, in, out, L);
        assert_memory_equal(a1, a2, L * sizeof(float));
    }
    be->dropout_backward(NULL, a1, d, in, L);
    be->dropout_backward(&par, a2, d, in, L);
    assert_memory_equal(a1, a2, L * sizeof(float));

    /* bias ops: 300 rows of 130 */
    float bias[130], db1[130] = {0}, db2[130] = {0};
    fill(bias, 130, 33, 1.0f);
    be->bias_rows(NULL, a1, bias, 300, 130);
    be->bias_rows(&par, a2, bias, 300, 130);
    assert_memory_equal(a1, a2, 300 * 130 * sizeof(float));
    be->bias_grad(NULL, db1, d, 300, 130);
    be->bias_grad(&par, db2, d, 300, 130);
    assert_memory_equal(db1, db2, sizeof db1);

    /* optimizer steps over L parameters */
    nn_optim_args s = {.lr = 0.01f,
                       .weight_decay = 0.01f,
                       .momentum = 0.9f,
                       .beta1 = 0.9f,
                       .beta2 = 0.999f,
                       .eps = 1e-8f,
                       .one_minus_beta1 = 0.1f,
                       .one_minus_beta2 = 0.001f,
                       .step_size = 0.1f,
                       .bias_correction2_sqrt = 0.0316f};
    float *p1 = malloc(L * sizeof(float)), *p2 = malloc(L * sizeof(float));
    float *m1 = calloc(L, sizeof(float)), *m2 = calloc(L, sizeof(float));
    float *v1 = calloc(L, sizeof(float)), *v2 = calloc(L, sizeof(float));
    memcpy(p1, in, L * sizeof(float));
    memcpy(p2, in, L * sizeof(float));
    for (int step = 0; step < 2; step++) {
        memcpy(a1, d, L * sizeof(float));
        memcpy(a2, d, L * sizeof(float));
        be->adam(NULL, p1, a1, m1, v1, L, &s);
        be->adam(&par, p2, a2, m2, v2, L, &s);
        memcpy(a1, d, L * sizeof(float));
        memcpy(a2, d, L * sizeof(float));
        be->sgd(NULL, p1, a1, NULL, L, &s);
        be->sgd(&par, p2, a2, NULL, L, &s);
    }
    assert_memory_equal(p1, p2, L * sizeof(float));
    assert_memory_equal(m1, m2, L * sizeof(float));
    assert_memory_equal(v1, v2, L * sizeof(float));
    for (int i = 0; i < L; i++)
        assert_true(a2[i] == 0.0f); /* consumed */

    /* GEMM, split by columns (n >= m) and by rows (m > n), all transposes */
    static const int shapes[2][3] = {{40, 200, 70}, {210, 48, 50}};
    for (int sh = 0; sh < 2; sh++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int m = shapes[sh][0], n = shapes[sh][1], k = shapes[sh][2];
                float *c1 = a1, *c2 = a2, *c3 = out;
                fill(c1, (size_t)m * n, 34, 1.0f);
                memcpy(c2, c1, (size_t)m * n * sizeof(float));
                memcpy(c3, c1, (size_t)m * n * sizeof(float));
                be->gemm(NULL, c1, in, d, ta, tb, m, n, k, 1.0f, 1.0f);
                be->gemm(&par, c2, in, d, ta, tb, m, n, k, 1.0f, 1.0f);
                be->gemm(&par, c3, in, d, ta, tb, m, n, k, 1.0f, 1.0f);
                assert_memory_equal(c2, c3, (size_t)m * n * sizeof(float));
                for (int i = 0; i < m * n; i++)
                    assert_float_equal(c1[i], c2[i], 1e-4);
            }
    free(p1);
    free(p2);
    free(m1);
    free(m2);
    free(v1);
    free(v2);
    free(in);
    free(out);
    free(a1);
    free(a2);
    free(d);
    nn_pool_destroy(pool);
}

typedef struct {
    int hits[8];
    size_t covered;
} pool_probe;

static void probe_part(void *arg, int part, int parts)
{
    pool_probe *p = arg;
    p->hits[part]++;
    size_t b, e;
    nn_pool_range(1000, part, parts, 16, &b, &e);
    __atomic_fetch_add(&p->covered, e - b, __ATOMIC_RELAXED);
}

static void test_pool(void **state)
{
    assert_null(nn_pool_create(0));
    assert_int_equal(nn_pool_threads(NULL), 1);
    pool_probe probe = {0};
    nn_pool_run(NULL, probe_part, &probe);
    assert_int_equal(probe.hits[0], 1);
    assert_int_equal(probe.covered, 1000);
    nn_pool *pool = nn_pool_create(4);
    for (int round = 0; round < 1000; round++)
        nn_pool_run(pool, probe_part, &probe);
    for (int i = 0; i < 4; i++)
        assert_int_equal(probe.hits[i], 1000 + (i == 0));
    assert_int_equal(probe.covered, 1000 * 1001);
    /* Ranges tile [0, n) with aligned boundaries, short n included. */
    size_t b, e;
    nn_pool_range(5, 3, 4, 16, &b, &e);
    assert_int_equal(b, 5);
    assert_int_equal(e, 5);
    nn_pool_range(100, 1, 2, 16, &b, &e);
    assert_int_equal(b, 64);
    assert_int_equal(e, 100);
    nn_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op_table),
        cmocka_unit_test(test_gemm_all_transposes),
        cmocka_unit_test(test_bias_ops),
        cmocka_unit_test(test_activations_forward),
        cmocka_unit_test(test_activations_backward_vs_reference),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_softmax_xent),
        cmocka_unit_test(test_mse),
        cmocka_unit_test(test_parallel_matches_serial),
        cmocka_unit_test(test_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
