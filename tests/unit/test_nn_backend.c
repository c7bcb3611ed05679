/* test_nn_backend.c - every op of every backend against a plain double
 * precision reference (today the CPU backend; a CUDA backend joins the
 * backends[] list and must match the same references). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "common/ty.h"
#include "models/backend.h"

static const nn_backend *const backends[] = {&nn_backend_cpu};

static void fill(float *x, size_t n, uint64_t seed, float scale)
{
    ty_rng r;
    ty_rng_seed(&r, seed, 7);
    for (size_t i = 0; i < n; i++)
        x[i] = (2.0f * ty_rng_uniform(&r) - 1.0f) * scale;
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
                backends[be]->gemm(c, a, b, ta, tb, M, N, K, 0.5f, 2.0f);
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
    nn_backend_cpu.bias_rows(out, bias, 4, 3);
    for (int i = 0; i < 12; i++)
        assert_float_equal(out[i], bias[i % 3], 0);
    nn_backend_cpu.bias_grad(db, dout, 4, 3);
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
    case NN_OP_RELU:
        return x > 0 ? x : 0;
    case NN_OP_TANH:
        return tanh(x);
    case NN_OP_SIGMOID:
        return 1.0 / (1.0 + exp(-x));
    default:
        return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
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
        nn_backend_cpu.act_forward(op, out, in, N);
        for (int i = 0; i < N; i++) {
            assert_true(isfinite(out[i]));
            assert_float_equal(out[i], ref_act(op, in[i]), 2e-6);
        }
    }
    /* PyTorch's exact GELU at a few points. */
    float x[3] = {-1.0f, 0.5f, 2.0f}, y[3];
    nn_backend_cpu.act_forward(NN_OP_GELU, y, x, 3);
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
        nn_backend_cpu.act_forward(op, out, in, N);
        nn_backend_cpu.act_backward(op, din, dout, in, out, N);
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
    nn_backend_cpu.dropout_forward(out, mask, in, N, 0.25f, &r);
    int zeros = 0;
    for (int i = 0; i < N; i++) {
        assert_true(mask[i] == 0.0f || mask[i] == 1.0f / 0.75f);
        zeros += mask[i] == 0.0f;
        assert_float_equal(out[i], in[i] * mask[i], 0);
    }
    assert_in_range(zeros, N / 4 - 400, N / 4 + 400);
    nn_backend_cpu.dropout_backward(din, in, mask, N);
    for (int i = 0; i < N; i++)
        assert_float_equal(din[i], in[i] * mask[i], 0);
    /* Same stream, same mask. */
    static float mask2[N];
    ty_rng_seed(&r, 42, 1);
    nn_backend_cpu.dropout_forward(out, mask2, in, N, 0.25f, &r);
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
    double loss = nn_backend_cpu.softmax_xent(d, probs, &correct, logits,
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
    assert_float_equal(nn_backend_cpu.softmax_xent(NULL, p2, NULL, logits, NULL,
                                                   N, C, 0.0f),
                       0.0, 0);
    assert_memory_equal(p2, probs, sizeof p2);
}

static void test_mse(void **state)
{
    float pred[6] = {1, 2, 3, 4, 5, 6}, target[6] = {1.5f, 2, 2, 4, 7, 6}, d[6];
    double sum = nn_backend_cpu.mse(d, pred, target, 6, 1.0f / 6);
    assert_float_equal(sum, 0.25 + 1 + 4, 1e-9);
    for (int i = 0; i < 6; i++)
        assert_float_equal(d[i], 2.0 * (pred[i] - target[i]) / 6, 1e-7);
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
