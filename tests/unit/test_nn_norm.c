/* test_nn_norm.c - batchnorm, layernorm, leaky_relu and softmax layers:
 * backward against central finite differences, batchnorm's running
 * statistics in training and their use in eval, forwards against direct
 * formulas, spec errors naming the field, tensor names, and the kernels
 * split over a pool giving the serial bits. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn_fd.h"
#include "testutil.h"

static const uint32_t vec4[] = {4}, vec5[] = {5};

/* ---- gradients ---- */

static void test_batchnorm1d_backward(void **state)
{
    fd_case c;
    fd_setup(&c, "{\"layers\":[{\"type\":\"batchnorm\"}]}", vec4, 1, 4, 5, 10);
    fd_check(&c, 1e-2f, 2e-4);
    fd_free(&c);
}

/* The dense layer has no bias: batchnorm takes the mean out, so a bias
 * before it has a zero gradient (which the check would call vacuous). */
static void test_batchnorm1d_in_net_backward(void **state)
{
    fd_case c;
    fd_setup(&c,
             "{\"layers\":[{\"type\":\"dense\",\"units\":6,\"bias\":false},"
             "{\"type\":\"batchnorm\",\"momentum\":0.5},{\"type\":\"tanh\"},"
             "{\"type\":\"dense\",\"units\":3}]}",
             vec5, 1, 3, 4, 11);
    fd_check(&c, 1e-2f, 2e-4);
    fd_free(&c);
}

static void test_batchnorm2d_backward(void **state)
{
    static const uint32_t img[] = {3, 2, 3};
    fd_case c;
    fd_setup(&c, "{\"layers\":[{\"type\":\"batchnorm\"}]}", img, 3, 18, 2, 12);
    fd_check(&c, 1e-2f, 2e-4);
    fd_free(&c);
}

static void test_layernorm_backward(void **state)
{
    static const uint32_t img[] = {2, 2, 3};
    fd_case c;
    fd_setup(&c, "{\"layers\":[{\"type\":\"layernorm\"}]}", vec5, 1, 5, 3, 13);
    fd_check(&c, 1e-2f, 2e-4);
    fd_free(&c);
    fd_setup(&c, "{\"layers\":[{\"type\":\"layernorm\",\"eps\":0.001}]}", img,
             3, 12, 2, 14);
    fd_check(&c, 1e-2f, 2e-4);
    fd_free(&c);
}

static void test_leaky_relu_backward(void **state)
{
    fd_case c;
    fd_setup(&c,
             "{\"layers\":[{\"type\":\"leaky_relu\",\"negative_slope\":0.2}]}",
             vec5, 1, 5, 4, 15);
    fd_push_from_zero(&c, 0.05f);
    fd_check(&c, 1e-3f, 2e-4);
    fd_free(&c);
}

static void test_softmax_backward(void **state)
{
    fd_case c;
    fd_setup(&c,
             "{\"layers\":[{\"type\":\"dense\",\"units\":4},"
             "{\"type\":\"softmax\"}]}",
             vec5, 1, 4, 3, 16);
    fd_check(&c, 1e-2f, 1e-4);
    fd_free(&c);
}

/* ---- batchnorm: running statistics, train vs eval ---- */

static void test_batchnorm_running_stats(void **state)
{
    static const uint32_t in[] = {2};
    fd_case c;
    fd_setup(&c, "{\"layers\":[{\"type\":\"batchnorm\",\"momentum\":0.3}]}", in,
             1, 2, 4, 20);
    float *w = c.state, *b = c.state + 2;
    float *rm = c.state + 4, *rv = c.state + 6;
    w[0] = 1.0f, w[1] = 1.0f, b[0] = 0.0f, b[1] = 0.0f;
    assert_true(rm[0] == 0.0f && rm[1] == 0.0f && rv[0] == 1.0f &&
                rv[1] == 1.0f);
    const float x[8] = {1, 2, 3, -2, 5, 0, 7, 4};
    memcpy(c.x, x, sizeof x);
    /* channel 0: mean 4, biased variance 5, unbiased 20/3;
     * channel 1: mean 1, biased variance 5, unbiased 20/3. */
    const float *y = fd_forward(&c);
    const double mean[2] = {4, 1};
    for (int i = 0; i < 8; i++)
        assert_float_equal(y[i], (x[i] - mean[i % 2]) / sqrt(5.0 + 1e-5), 1e-5);
    assert_float_equal(rm[0], 0.3 * 4, 1e-6);
    assert_float_equal(rm[1], 0.3 * 1, 1e-6);
    assert_float_equal(rv[0], 0.7 + 0.3 * 20.0 / 3.0, 1e-6);
    assert_float_equal(rv[1], 0.7 + 0.3 * 20.0 / 3.0, 1e-6);
    fd_forward(&c);
    const double rm2[2] = {0.7 * 1.2 + 0.3 * 4, 0.7 * 0.3 + 0.3 * 1};
    const double rv2 = 0.7 * 2.7 + 0.3 * 20.0 / 3.0;
    assert_float_equal(rm[0], rm2[0], 1e-6);
    assert_float_equal(rm[1], rm2[1], 1e-6);
    assert_float_equal(rv[0], rv2, 1e-6);
    assert_float_equal(rv[1], rv2, 1e-6);

    /* Eval: the running statistics, which stay as they are. */
    w[0] = 2.0f, w[1] = -1.0f, b[0] = 0.5f, b[1] = 0.25f;
    const float xe[8] = {0.5f, -1, 2, 3, -4, 1, 0, 0};
    memcpy(c.ws->act[0], xe, sizeof xe);
    y = nn_forward(&c.arch, c.state, c.ws, 4, 0, NULL);
    for (int i = 0; i < 8; i++) {
        int ch = i % 2;
        double want = (xe[i] - rm2[ch]) / sqrt(rv2 + 1e-5) * w[ch] + b[ch];
        assert_float_equal(y[i], want, 1e-5);
    }
    assert_float_equal(rm[0], rm2[0], 1e-6);
    assert_float_equal(rv[1], rv2, 1e-6);
    fd_free(&c);
}

static void test_batchnorm2d_running_stats(void **state)
{
    static const uint32_t img[] = {1, 2, 2};
    fd_case c;
    fd_setup(&c, "{\"layers\":[{\"type\":\"batchnorm\"}]}", img, 3, 4, 2, 21);
    for (int i = 0; i < 8; i++)
        c.x[i] = (float)(i + 1);
    c.state[0] = 1.0f;
    c.state[1] = 0.0f;
    fd_forward(&c);
    /* mean 4.5 over 8 values; biased variance 5.25, unbiased 6. */
    assert_float_equal(c.state[2], 0.1 * 4.5, 1e-6);
    assert_float_equal(c.state[3], 0.9 + 0.1 * 6.0, 1e-6);
    const float *y = c.ws->act[1];
    for (int i = 0; i < 8; i++)
        assert_float_equal(y[i], (i + 1 - 4.5) / sqrt(5.25 + 1e-5), 1e-5);
    fd_free(&c);
}

/* One value per channel in a training batch: normalized with the running
 * statistics (as eval), which stay unchanged; gradients are those of that
 * fixed affine map. */
static void test_batchnorm_batch_of_one(void **state)
{
    static const uint32_t in[] = {3};
    fd_case c;
    fd_setup(&c, "{\"layers\":[{\"type\":\"batchnorm\"}]}", in, 1, 3, 1, 22);
    float *w = c.state, *b = c.state + 3, *rm = c.state + 6, *rv = c.state + 9;
    const float rm0[3] = {0.5f, -1.0f, 2.0f}, rv0[3] = {4.0f, 0.25f, 1.0f};
    memcpy(rm, rm0, sizeof rm0);
    memcpy(rv, rv0, sizeof rv0);
    const float *y = fd_forward(&c);
    for (int i = 0; i < 3; i++) {
        assert_true(isfinite(y[i]));
        assert_float_equal(
            y[i], (c.x[i] - rm0[i]) / sqrt(rv0[i] + 1e-5) * w[i] + b[i], 1e-5);
        assert_true(rm[i] == rm0[i] && rv[i] == rv0[i]);
    }
    fd_check(&c, 1e-2f, 1e-4);
    for (int i = 0; i < 3; i++)
        assert_float_equal(c.din[i], c.r[i] * w[i] / sqrt(rv0[i] + 1e-5), 1e-5);
    fd_free(&c);

    /* A single image still has H * W values per channel: batch statistics. */
    static const uint32_t img[] = {2, 2, 2};
    fd_setup(&c, "{\"layers\":[{\"type\":\"batchnorm\"}]}", img, 3, 8, 1, 23);
    fd_forward(&c);
    assert_true(c.state[4] != 0.0f && c.state[6] != 1.0f);
    fd_check(&c, 1e-2f, 2e-4);
    fd_free(&c);
}

/* ---- forwards against formulas ---- */

static void test_layernorm_forward_formula(void **state)
{
    static const uint32_t img[] = {3, 2, 2};
    fd_case c;
    fd_setup(&c, "{\"layers\":[{\"type\":\"layernorm\",\"eps\":0.01}]}", img, 3,
             12, 2, 30);
    const float *y = fd_forward(&c);
    const float *w = c.state, *b = c.state + 12;
    for (int r = 0; r < 2; r++) {
        const float *x = c.x + r * 12;
        double m = 0, v = 0;
        for (int k = 0; k < 12; k++)
            m += x[k];
        m /= 12;
        for (int k = 0; k < 12; k++)
            v += (x[k] - m) * (x[k] - m);
        v /= 12;
        for (int k = 0; k < 12; k++)
            assert_float_equal(y[r * 12 + k],
                               (x[k] - m) / sqrt(v + 0.01) * w[k] + b[k], 1e-5);
    }
    /* Eval gives the same: layernorm has no batch statistics. */
    float train_y[24];
    memcpy(train_y, y, sizeof train_y);
    memcpy(c.ws->act[0], c.x, sizeof train_y);
    y = nn_forward(&c.arch, c.state, c.ws, 2, 0, NULL);
    assert_memory_equal(y, train_y, sizeof train_y);
    fd_free(&c);
}

static void test_softmax_and_leaky_forward_formula(void **state)
{
    static const uint32_t in[] = {6};
    fd_case c;
    fd_setup(&c, "{\"layers\":[{\"type\":\"softmax\"}]}", in, 1, 6, 3, 31);
    c.x[0] = 80.0f; /* large logits must not overflow */
    const float *y = fd_forward(&c);
    for (int r = 0; r < 3; r++) {
        const float *x = c.x + r * 6;
        double max = x[0], s = 0, total = 0;
        for (int k = 1; k < 6; k++)
            max = fmax(max, x[k]);
        for (int k = 0; k < 6; k++)
            s += exp(x[k] - max);
        for (int k = 0; k < 6; k++) {
            assert_float_equal(y[r * 6 + k], exp(x[k] - max) / s, 1e-6);
            total += y[r * 6 + k];
        }
        assert_float_equal(total, 1.0, 1e-5);
    }
    fd_free(&c);

    fd_setup(&c, "{\"layers\":[{\"type\":\"leaky_relu\"}]}", in, 1, 6, 2, 32);
    y = fd_forward(&c);
    for (int i = 0; i < 12; i++)
        assert_float_equal(y[i], c.x[i] > 0 ? c.x[i] : 0.01 * c.x[i], 1e-7);
    fd_free(&c);
}

/* ---- specs ---- */

/* testutil's, for a classification net. */
static void expect_error(const char *spec_text, const uint32_t *shape,
                         uint32_t ndim, uint32_t outputs, const char *field,
                         const char *msg_part)
{
    tu_expect_spec_error(spec_text, shape, ndim, outputs,
                         TY_TASK_CLASSIFICATION, field, msg_part);
}

static void test_spec_errors(void **state)
{
    static const uint32_t mat[] = {3, 4}, img[] = {2, 3, 3};
    expect_error("{\"layers\":[{\"type\":\"batchnorm\"},{\"type\":\"flatten\"},"
                 "{\"type\":\"dense\",\"units\":2}]}",
                 mat, 2, 2, "model.layers[0]", "layer 0 (batchnorm)");
    expect_error("{\"layers\":[{\"type\":\"batchnorm\"},{\"type\":\"flatten\"},"
                 "{\"type\":\"dense\",\"units\":2}]}",
                 mat, 2, 2, "model.layers[0]", "[3, 4]");
    expect_error("{\"layers\":[{\"type\":\"dense\",\"units\":2},"
                 "{\"type\":\"batchnorm\",\"momentum\":1.5}]}",
                 vec4, 1, 2, "model.layers[1].momentum", "layer 1 (batchnorm)");
    expect_error("{\"layers\":[{\"type\":\"batchnorm\",\"eps\":0},"
                 "{\"type\":\"dense\",\"units\":2}]}",
                 vec4, 1, 2, "model.layers[0].eps", "eps");
    expect_error("{\"layers\":[{\"type\":\"layernorm\",\"epsilon\":0.1},"
                 "{\"type\":\"dense\",\"units\":2}]}",
                 vec4, 1, 2, "model.layers[0].epsilon", "layer 0 (layernorm)");
    expect_error(
        "{\"layers\":[{\"type\":\"leaky_relu\",\"negative_slope\":\"x\"},"
        "{\"type\":\"dense\",\"units\":2}]}",
        vec4, 1, 2, "model.layers[0].negative_slope", "number");
    expect_error("{\"layers\":[{\"type\":\"softmax\"},{\"type\":\"flatten\"},"
                 "{\"type\":\"dense\",\"units\":2}]}",
                 img, 3, 2, "model.layers[0]", "flatten");
}

static void test_normalized_and_tensors(void **state)
{
    static const uint32_t img[] = {2, 3, 3};
    json_t *spec = json_loads(
        "{\"layers\":[{\"type\":\"batchnorm\"},{\"type\":\"layernorm\"},"
        "{\"type\":\"flatten\"},{\"type\":\"leaky_relu\"},"
        "{\"type\":\"dense\",\"units\":3},{\"type\":\"softmax\"}]}",
        0, NULL);
    nn_arch a;
    json_t *norm;
    ty_err err;
    assert_int_equal(
        nn_arch_build(spec, img, 3, 3, TY_TASK_CLASSIFICATION, &a, &norm, &err),
        TY_OK);
    json_t *want = json_loads(
        "{\"layers\":[{\"type\":\"batchnorm\",\"momentum\":0.1,\"eps\":1e-05},"
        "{\"type\":\"layernorm\",\"eps\":1e-05},{\"type\":\"flatten\"},"
        "{\"type\":\"leaky_relu\",\"negative_slope\":0.01},"
        "{\"type\":\"dense\",\"units\":3,\"bias\":true},"
        "{\"type\":\"softmax\"}]}",
        0, NULL);
    assert_true(json_equal(norm, want));
    /* The state dict of nn.Sequential(BatchNorm2d(2), LayerNorm([2, 3, 3]),
     * Flatten(), LeakyReLU(), Linear(18, 3), Softmax(dim=1)). */
    static const char *const names[] = {
        "0.weight", "0.bias", "0.running_mean", "0.running_var",
        "1.weight", "1.bias", "4.weight",       "4.bias"};
    assert_int_equal(a.n_tensors, 8);
    for (uint32_t i = 0; i < 8; i++)
        assert_string_equal(a.tensors[i].name, names[i]);
    assert_int_equal(a.tensors[2].desc->buffer, 1);
    assert_int_equal(a.tensors[3].desc->buffer, 1);
    assert_int_equal(a.tensors[0].desc->buffer, 0);
    assert_int_equal(a.tensors[2].offset, a.param_count); /* buffers last */
    assert_int_equal(a.tensors[3].offset, a.param_count + 2);
    assert_int_equal(a.tensors[4].desc->ndim, 3);
    assert_int_equal(a.tensors[4].desc->shape[2], 3);
    assert_int_equal(a.param_count, 4 + 36 + 18 * 3 + 3);
    assert_int_equal(a.buffer_count, 4);
    json_decref(spec);
    json_decref(want);
    json_decref(norm);
    nn_arch_free(&a);
}

/* ---- kernels: a pool gives the serial bits ---- */

static void test_parallel_matches_serial(void **state)
{
    nn_pool *pool = nn_pool_create(2);
    assert_non_null(pool);
    nn_exec ex = {.pool = pool};
    const nn_backend *be = &nn_backend_cpu;
    enum { N = 64, C = 40, S = 49, LEN = N * C * S };
    float *x = malloc(LEN * sizeof(float)), *dy = malloc(LEN * sizeof(float));
    float *o[2], *d[2], st[2][4][C * 8], g[2][2][1024];
    for (int k = 0; k < 2; k++) {
        o[k] = malloc(LEN * sizeof(float));
        d[k] = malloc(LEN * sizeof(float));
    }
    fd_fill(x, LEN, 1, 2.0f);
    fd_fill(dy, LEN, 2, 1.0f);
    float gamma[1024], beta[1024];
    fd_fill(gamma, 1024, 3, 1.0f);
    fd_fill(beta, 1024, 4, 1.0f);
    /* batchnorm 2d (s = 49) and 1d (c = 40 * 49 channels of 64 rows) */
    const uint32_t shapes[2][3] = {{N, C, S}, {N, 1024, 1}};
    for (int sh = 0; sh < 2; sh++) {
        uint32_t n = shapes[sh][0], c = shapes[sh][1], s = shapes[sh][2];
        for (int k = 0; k < 2; k++) {
            const nn_exec *e = k ? &ex : NULL;
            float *rm = st[k][2], *rv = st[k][3];
            for (uint32_t i = 0; i < c && i < C * 8; i++)
                rm[i] = 0.0f, rv[i] = 1.0f;
            memset(g[k], 0, sizeof g[k]);
            float *mean = malloc(c * sizeof(float)),
                  *inv = malloc(c * sizeof(float));
            float *rmb = calloc(c, sizeof(float)),
                  *rvb = calloc(c, sizeof(float));
            be->batchnorm_forward(e, o[k], mean, inv, rmb, rvb, x, gamma, beta,
                                  n, c, s, 1, 0.1f, 1e-5f);
            be->batchnorm_backward(e, d[k], g[k][0], g[k][1], dy, x, gamma,
                                   mean, inv, n, c, s, 1);
            memcpy(st[k][0], rmb, (c < C * 8 ? c : C * 8) * sizeof(float));
            memcpy(st[k][1], rvb, (c < C * 8 ? c : C * 8) * sizeof(float));
            free(mean), free(inv), free(rmb), free(rvb);
        }
        assert_memory_equal(o[0], o[1], (size_t)n * c * s * sizeof(float));
        assert_memory_equal(d[0], d[1], (size_t)n * c * s * sizeof(float));
        assert_memory_equal(g[0], g[1], sizeof g[0]);
        assert_memory_equal(st[0][0], st[1][0], sizeof st[0][0]);
        assert_memory_equal(st[0][1], st[1][1], sizeof st[0][1]);
    }
    /* layernorm over rows of 1024 */
    const uint32_t ln = LEN / 1024;
    float mean[2][LEN / 1024], rstd[2][LEN / 1024];
    for (int k = 0; k < 2; k++) {
        const nn_exec *e = k ? &ex : NULL;
        memset(g[k], 0, sizeof g[k]);
        be->layernorm_forward(e, o[k], mean[k], rstd[k], x, gamma, beta, ln,
                              1024, 1e-5f);
        be->layernorm_backward(e, d[k], g[k][0], g[k][1], dy, x, gamma, mean[k],
                               rstd[k], ln, 1024);
    }
    assert_memory_equal(o[0], o[1], LEN * sizeof(float));
    assert_memory_equal(d[0], d[1], LEN * sizeof(float));
    assert_memory_equal(g[0], g[1], sizeof g[0]);
    /* softmax, leaky_relu, add */
    for (int k = 0; k < 2; k++) {
        const nn_exec *e = k ? &ex : NULL;
        be->softmax_forward(e, o[k], x, LEN / 100, 100);
        be->softmax_backward(e, d[k], dy, o[k], LEN / 100, 100);
    }
    assert_memory_equal(o[0], o[1], LEN * sizeof(float));
    assert_memory_equal(d[0], d[1], LEN * sizeof(float));
    for (int k = 0; k < 2; k++) {
        const nn_exec *e = k ? &ex : NULL;
        be->leaky_relu_forward(e, o[k], x, LEN, 0.1f);
        be->leaky_relu_backward(e, d[k], dy, x, LEN, 0.1f);
        be->add(e, d[k], d[k], o[k], LEN);
    }
    assert_memory_equal(o[0], o[1], LEN * sizeof(float));
    assert_memory_equal(d[0], d[1], LEN * sizeof(float));
    for (size_t i = 0; i < LEN; i += 997) {
        float lr = x[i] > 0 ? x[i] : 0.1f * x[i];
        float dl = x[i] > 0 ? dy[i] : 0.1f * dy[i];
        assert_float_equal(o[0][i], lr, 0);
        assert_float_equal(d[0][i], dl + lr, 1e-6);
    }
    for (int k = 0; k < 2; k++) {
        free(o[k]);
        free(d[k]);
    }
    free(x);
    free(dy);
    nn_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batchnorm1d_backward),
        cmocka_unit_test(test_batchnorm1d_in_net_backward),
        cmocka_unit_test(test_batchnorm2d_backward),
        cmocka_unit_test(test_layernorm_backward),
        cmocka_unit_test(test_leaky_relu_backward),
        cmocka_unit_test(test_softmax_backward),
        cmocka_unit_test(test_batchnorm_running_stats),
        cmocka_unit_test(test_batchnorm2d_running_stats),
        cmocka_unit_test(test_batchnorm_batch_of_one),
        cmocka_unit_test(test_layernorm_forward_formula),
        cmocka_unit_test(test_softmax_and_leaky_forward_formula),
        cmocka_unit_test(test_spec_errors),
        cmocka_unit_test(test_normalized_and_tensors),
        cmocka_unit_test(test_parallel_matches_serial),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
