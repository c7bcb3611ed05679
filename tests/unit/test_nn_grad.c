/* test_nn_grad.c - every layer's backward, both losses' gradients and whole
 * networks' parameter gradients against central finite differences.
 *
 * Layers are checked through the scalar L = sum(R * out) for a fixed random
 * R, so dL/dout = R is fed to backward. Finite differences run in float with
 * a step of 1e-2 (smooth ops) or 1e-3 (piecewise linear ones, whose inputs
 * are kept away from the kink); an analytic gradient passes when it is
 * within 1% of the numeric one (plus a small absolute floor for values near
 * zero), which a wrong factor, sign or index fails by far. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/nn_internal.h"
#include "testutil.h"

#define N_ROWS 3

/* Uniform in [-scale, scale): testutil's fill on this suite's RNG stream. */
static void fill(float *x, size_t n, uint64_t seed, float scale)
{
    tu_fill_uniform(x, n, seed, 9, scale);
}

static void build(const char *spec_text, const uint32_t *shape, uint32_t ndim,
                  uint32_t outputs, ty_task task, nn_arch *arch)
{
    json_t *spec = json_loads(spec_text, 0, NULL);
    assert_non_null(spec);
    ty_err err;
    ty_status st =
        nn_arch_build(spec, shape, ndim, outputs, task, arch, NULL, &err);
    if (st != TY_OK)
        fail_msg("%s", err.msg);
    json_decref(spec);
}

typedef struct {
    const nn_layer *l;
    float *params, *in, *out, *scratch, *r;
    uint32_t n_in, n_out;
} layer_case;

/* sum(R * forward(in)) with the dropout stream reset, so every call draws
 * the same mask. */
static double layer_objective(const layer_case *c)
{
    ty_rng rng;
    ty_rng_seed(&rng, 1234, 5);
    nn_pass p = {
        .be = &nn_backend_cpu, .n = N_ROWS, .training = 1, .rng = &rng};
    if (c->l->kind->alias)
        memcpy(c->out, c->in, (size_t)N_ROWS * c->n_in * sizeof(float));
    else
        c->l->kind->forward(c->l, &p, c->params, c->in, c->out, c->scratch);
    double s = 0;
    for (size_t i = 0; i < (size_t)N_ROWS * c->n_out; i++)
        s += (double)c->r[i] * c->out[i];
    return s;
}

static void check_layer(const char *spec, const uint32_t *shape, uint32_t ndim,
                        uint32_t outputs, float eps, float kink_gap)
{
    nn_arch arch;
    build(spec, shape, ndim, outputs, TY_TASK_REGRESSION, &arch);
    assert_int_equal(arch.n_layers, 1);
    const nn_layer *l = &arch.layers[0];
    layer_case c = {.l = l,
                    .n_in = (uint32_t)nn_shape_numel(&l->in),
                    .n_out = (uint32_t)nn_shape_numel(&l->out)};
    size_t np = arch.param_count ? arch.param_count : 1;
    c.params = malloc(np * sizeof(float));
    float *grads = calloc(np, sizeof(float));
    c.in = malloc((size_t)N_ROWS * c.n_in * sizeof(float));
    c.out = malloc((size_t)N_ROWS * c.n_out * sizeof(float));
    c.r = malloc((size_t)N_ROWS * c.n_out * sizeof(float));
    c.scratch =
        malloc(((size_t)N_ROWS * l->scratch_per_example + 1) * sizeof(float));
    float *din = malloc((size_t)N_ROWS * c.n_in * sizeof(float));
    ty_rng init;
    ty_rng_seed(&init, 77, 1);
    nn_arch_init_params(&arch, c.params, &init);
    fill(c.in, (size_t)N_ROWS * c.n_in, 3, 2.0f);
    for (size_t i = 0; i < (size_t)N_ROWS * c.n_in; i++)
        if (fabsf(c.in[i]) < kink_gap)
            c.in[i] += c.in[i] < 0 ? -kink_gap : kink_gap;
    fill(c.r, (size_t)N_ROWS * c.n_out, 4, 1.0f);

    layer_objective(&c);
    nn_pass p = {.be = &nn_backend_cpu, .n = N_ROWS, .training = 1};
    if (l->kind->alias)
        memcpy(din, c.r, (size_t)N_ROWS * c.n_in * sizeof(float));
    else
        l->kind->backward(l, &p, c.params, grads, c.in, c.out, c.r, din,
                          c.scratch);

    double norm = 0;
    for (size_t i = 0; i < (size_t)N_ROWS * c.n_in; i++) {
        float x = c.in[i];
        c.in[i] = x + eps;
        double up = layer_objective(&c);
        c.in[i] = x - eps;
        double down = layer_objective(&c);
        c.in[i] = x;
        tu_assert_grad_close(din[i], (up - down) / (2.0 * eps), 1e-4, "din", i);
        norm += fabs(din[i]);
    }
    assert_true(norm > 0.1); /* the check is not vacuous */
    for (size_t i = 0; i < arch.param_count; i++) {
        float w = c.params[i];
        c.params[i] = w + eps;
        double up = layer_objective(&c);
        c.params[i] = w - eps;
        double down = layer_objective(&c);
        c.params[i] = w;
        tu_assert_grad_close(grads[i], (up - down) / (2.0 * eps), 1e-4,
                             "dparam", i);
    }
    /* Parameter gradients accumulate: a second backward doubles them. */
    if (arch.param_count) {
        float *once = malloc(np * sizeof(float));
        memcpy(once, grads, np * sizeof(float));
        layer_objective(&c);
        l->kind->backward(l, &p, c.params, grads, c.in, c.out, c.r, NULL,
                          c.scratch);
        for (size_t i = 0; i < arch.param_count; i++)
            assert_float_equal(grads[i], 2.0f * once[i], 1e-6);
        free(once);
    }
    free(c.params);
    free(grads);
    free(c.in);
    free(c.out);
    free(c.r);
    free(c.scratch);
    free(din);
    nn_arch_free(&arch);
}

static const uint32_t vec5[] = {5};

static void test_dense_backward(void **state)
{
    check_layer("{\"layers\":[{\"type\":\"dense\",\"units\":4}]}", vec5, 1, 4,
                1e-2f, 0);
}

static void test_dense_no_bias_backward(void **state)
{
    check_layer(
        "{\"layers\":[{\"type\":\"dense\",\"units\":3,\"bias\":false}]}", vec5,
        1, 3, 1e-2f, 0);
}

static void test_relu_backward(void **state)
{
    check_layer("{\"layers\":[{\"type\":\"relu\"}]}", vec5, 1, 5, 1e-3f, 0.05f);
}

static void test_tanh_backward(void **state)
{
    check_layer("{\"layers\":[{\"type\":\"tanh\"}]}", vec5, 1, 5, 1e-2f, 0);
}

static void test_sigmoid_backward(void **state)
{
    check_layer("{\"layers\":[{\"type\":\"sigmoid\"}]}", vec5, 1, 5, 1e-2f, 0);
}

static void test_gelu_backward(void **state)
{
    check_layer("{\"layers\":[{\"type\":\"gelu\"}]}", vec5, 1, 5, 1e-2f, 0);
}

static void test_dropout_backward(void **state)
{
    check_layer("{\"layers\":[{\"type\":\"dropout\",\"rate\":0.4}]}", vec5, 1,
                5, 1e-2f, 0);
}

static void test_flatten_backward(void **state)
{
    static const uint32_t img[] = {2, 2, 3};
    check_layer("{\"layers\":[{\"type\":\"flatten\"}]}", img, 3, 12, 1e-2f, 0);
}

/* ---- losses ---- */

static double xent_mean(const float *logits, const int32_t *labels, uint32_t n,
                        uint32_t c)
{
    return nn_backend_cpu.softmax_xent(NULL, NULL, NULL, NULL, logits, labels,
                                       n, c, 0) /
           n;
}

static void test_softmax_xent_gradient(void **state)
{
    enum { N = 4, C = 5 };
    float logits[N * C], d[N * C];
    int32_t labels[N] = {4, 0, 2, 2};
    fill(logits, N * C, 11, 3.0f);
    nn_backend_cpu.softmax_xent(NULL, d, NULL, NULL, logits, labels, N, C,
                                1.0f / N);
    const float eps = 1e-2f;
    for (int i = 0; i < N * C; i++) {
        float x = logits[i];
        logits[i] = x + eps;
        double up = xent_mean(logits, labels, N, C);
        logits[i] = x - eps;
        double down = xent_mean(logits, labels, N, C);
        logits[i] = x;
        tu_assert_grad_close(d[i], (up - down) / (2 * eps), 1e-5, "dlogits",
                             (size_t)i);
    }
}

static void test_mse_gradient(void **state)
{
    enum { L = 12 };
    float pred[L], target[L], d[L];
    fill(pred, L, 12, 2.0f);
    fill(target, L, 13, 2.0f);
    nn_backend_cpu.mse(NULL, d, pred, target, L, 1.0f / L);
    const float eps = 1e-2f;
    for (int i = 0; i < L; i++) {
        float x = pred[i];
        pred[i] = x + eps;
        double up = nn_backend_cpu.mse(NULL, NULL, pred, target, L, 0) / L;
        pred[i] = x - eps;
        double down = nn_backend_cpu.mse(NULL, NULL, pred, target, L, 0) / L;
        pred[i] = x;
        tu_assert_grad_close(d[i], (up - down) / (2 * eps), 1e-5, "dpred",
                             (size_t)i);
    }
}

/* ---- whole networks ---- */

typedef struct {
    nn_arch arch;
    nn_workspace *ws;
    float *params;
    int32_t labels[N_ROWS];
    float targets[N_ROWS * 8];
    float *x;
} net_case;

static double net_loss(net_case *c)
{
    ty_rng rng;
    ty_rng_seed(&rng, 99, 3);
    memcpy(c->ws->act[0], c->x,
           (size_t)N_ROWS * nn_shape_numel(&c->arch.input) * sizeof(float));
    nn_forward(&c->arch, c->params, c->ws, N_ROWS, 1, &rng);
    double sum =
        nn_loss(&c->arch, c->ws, N_ROWS, c->labels, c->targets, NULL, 1);
    return c->arch.task == TY_TASK_CLASSIFICATION
               ? sum / N_ROWS
               : sum / (N_ROWS * c->arch.num_outputs);
}

static void check_net(const char *spec, const uint32_t *shape, uint32_t ndim,
                      uint32_t outputs, ty_task task, float eps)
{
    net_case c = {0};
    build(spec, shape, ndim, outputs, task, &c.arch);
    c.ws = nn_workspace_create_for(&c.arch, N_ROWS, 1);
    assert_non_null(c.ws);
    size_t np = c.arch.param_count;
    c.params = malloc(np * sizeof(float));
    float *grads = calloc(np, sizeof(float));
    size_t nx = (size_t)N_ROWS * nn_shape_numel(&c.arch.input);
    c.x = malloc(nx * sizeof(float));
    fill(c.x, nx, 21, 1.5f);
    for (int i = 0; i < N_ROWS; i++)
        c.labels[i] = (int32_t)((i * 2 + 1) % outputs);
    fill(c.targets, N_ROWS * outputs, 22, 1.0f);
    ty_rng init;
    ty_rng_seed(&init, 5, 1);
    nn_arch_init_params(&c.arch, c.params, &init);

    net_loss(&c);
    nn_backward(&c.arch, c.params, grads, c.ws, N_ROWS);
    double norm = 0;
    for (size_t i = 0; i < np; i++) {
        float w = c.params[i];
        c.params[i] = w + eps;
        double up = net_loss(&c);
        c.params[i] = w - eps;
        double down = net_loss(&c);
        c.params[i] = w;
        tu_assert_grad_close(grads[i], (up - down) / (2 * eps), 2e-4,
                             "net dparam", i);
        norm += fabs(grads[i]);
    }
    assert_true(norm > 1e-2);
    free(c.params);
    free(grads);
    free(c.x);
    nn_workspace_destroy(c.ws);
    nn_arch_free(&c.arch);
}

static void test_mlp_classification_gradient(void **state)
{
    static const uint32_t img[] = {2, 3};
    check_net("{\"layers\":[{\"type\":\"flatten\"},"
              "{\"type\":\"dense\",\"units\":5},{\"type\":\"tanh\"},"
              "{\"type\":\"dense\",\"units\":4},{\"type\":\"gelu\"},"
              "{\"type\":\"dropout\",\"rate\":0.3},"
              "{\"type\":\"dense\",\"units\":3}]}",
              img, 2, 3, TY_TASK_CLASSIFICATION, 1e-2f);
}

static void test_mlp_regression_gradient(void **state)
{
    static const uint32_t in[] = {4};
    check_net(
        "{\"layers\":[{\"type\":\"dense\",\"units\":6},{\"type\":\"relu\"},"
        "{\"type\":\"dense\",\"units\":5},{\"type\":\"sigmoid\"},"
        "{\"type\":\"dense\",\"units\":2,\"bias\":false}]}",
        in, 1, 2, TY_TASK_REGRESSION, 1e-3f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_backward),
        cmocka_unit_test(test_dense_no_bias_backward),
        cmocka_unit_test(test_relu_backward),
        cmocka_unit_test(test_tanh_backward),
        cmocka_unit_test(test_sigmoid_backward),
        cmocka_unit_test(test_gelu_backward),
        cmocka_unit_test(test_dropout_backward),
        cmocka_unit_test(test_flatten_backward),
        cmocka_unit_test(test_softmax_xent_gradient),
        cmocka_unit_test(test_mse_gradient),
        cmocka_unit_test(test_mlp_classification_gradient),
        cmocka_unit_test(test_mlp_regression_gradient),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
