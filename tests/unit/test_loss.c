/* test_loss.c - the losses (loss.c and their backend kernels): values and
 * gradients against hand computations (checked against torch.nn.functional
 * when written: cross_entropy(label_smoothing), binary_cross_entropy_with_
 * logits, huber_loss) and central finite differences, the output transform
 * predict uses, resolving a loss for a task, and the model file's form. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "models/nn_internal.h"

static void fill(float *x, size_t n, uint64_t seed, float scale)
{
    ty_rng r;
    ty_rng_seed(&r, seed, 3);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((ty_rng_uniform(&r) * 2.0 - 1.0) * scale);
}

/* Summed loss of spec over (n, width), no gradient. */
static double loss_sum(const nn_loss_spec *l, const float *out,
                       const int32_t *labels, const float *targets, uint32_t n,
                       uint32_t width)
{
    return nn_loss_compute(l, &nn_backend_cpu, NULL, NULL, out, labels, targets,
                           n, width, NULL, 0.0f);
}

/* The gradient nn_loss_compute gives (of the mean: grad_scale) against
 * central differences of the summed loss times grad_scale. */
static void check_fd(const nn_loss_spec *l, float *out, const int32_t *labels,
                     const float *targets, uint32_t n, uint32_t width,
                     float grad_scale, float h, double tol)
{
    float d[64];
    assert_true(n * width <= 64);
    nn_loss_compute(l, &nn_backend_cpu, NULL, d, out, labels, targets, n, width,
                    NULL, grad_scale);
    for (uint32_t i = 0; i < n * width; i++) {
        float x = out[i];
        out[i] = x + h;
        double up = loss_sum(l, out, labels, targets, n, width);
        out[i] = x - h;
        double down = loss_sum(l, out, labels, targets, n, width);
        out[i] = x;
        double fd = (up - down) / (2.0 * h) * grad_scale;
        if (fabs(fd - d[i]) > tol * (1.0 + fabs(fd)))
            fail_msg("%s: d[%u] = %.7g, finite differences %.7g",
                     nn_loss_name(l->kind), i, d[i], fd);
    }
}

static void test_label_smoothing_values(void **state)
{
    nn_loss_spec l = {.kind = NN_LOSS_CROSS_ENTROPY, .label_smoothing = 0.1};
    float x[3] = {1.0f, 2.0f, 3.0f}, d[3];
    int32_t y = 0;
    uint32_t hits = 7;
    /* lse = 3 + log(e^-2 + e^-1 + 1); loss = lse - 0.9 * 1 - (0.1/3) * 6 */
    double loss = nn_loss_compute(&l, &nn_backend_cpu, NULL, d, x, &y, NULL, 1,
                                  3, &hits, 1.0f);
    assert_float_equal(loss, 2.3076059644443805, 1e-6);
    assert_int_equal(hits, 0); /* argmax 2, label 0 */
    /* softmax - ((1 - 0.1) onehot + 0.1 / 3) */
    assert_float_equal(d[0], -0.8433027601629529, 1e-6);
    assert_float_equal(d[1], 0.21139513772146432, 1e-6);
    assert_float_equal(d[2], 0.6319076224414885, 1e-6);

    /* Smoothing 0 is the plain kernel, bit for bit. */
    enum { N = 3, C = 4 };
    float z[N * C], a[N * C], b[N * C];
    int32_t labels[N] = {3, 0, 1};
    fill(z, N * C, 5, 3.0f);
    nn_loss_spec plain = {.kind = NN_LOSS_CROSS_ENTROPY};
    double la = nn_loss_compute(&plain, &nn_backend_cpu, NULL, a, z, labels,
                                NULL, N, C, NULL, 0.25f);
    double lb = nn_backend_cpu.softmax_xent_smooth(NULL, b, NULL, z, labels, N,
                                                   C, 0.0f, 0.25f);
    assert_float_equal(la, lb, 1e-12);
    for (int i = 0; i < N * C; i++)
        assert_float_equal(a[i], b[i], 1e-7);
}

static void test_label_smoothing_gradient(void **state)
{
    enum { N = 4, C = 5 };
    float z[N * C];
    int32_t labels[N] = {4, 0, 2, 2};
    fill(z, N * C, 11, 3.0f);
    nn_loss_spec l = {.kind = NN_LOSS_CROSS_ENTROPY, .label_smoothing = 0.2};
    check_fd(&l, z, labels, NULL, N, C, 1.0f / N, 1e-2f, 1e-4);
}

static void test_bce_values(void **state)
{
    nn_loss_spec l = {.kind = NN_LOSS_BINARY_CROSS_ENTROPY};
    float x[3] = {0.5f, -2.0f, 3.0f}, d[3], probs[6];
    int32_t y[3] = {1, 1, 0};
    uint32_t hits = 0;
    /* log(1 + e^-0.5); 2 + log(1 + e^-2) ... as max(x,0) - xy + log1p(e^-|x|) */
    double loss = nn_loss_compute(&l, &nn_backend_cpu, NULL, d, x, y, NULL, 3,
                                  1, &hits, 1.0f);
    assert_float_equal(
        loss, 0.4740769841801067 + 2.1269280110429727 + 3.048587351573742,
        1e-6);
    assert_int_equal(hits, 1); /* only the first: p > 0.5 and y = 1 */
    /* sigmoid(x) - y */
    assert_float_equal(d[0], -0.3775406687981454, 1e-6);
    assert_float_equal(d[1], -0.8807970779778824, 1e-6);
    assert_float_equal(d[2], 0.9525741268224334, 1e-6);
    /* Predictions: [1 - p, p]. */
    nn_loss_output(&l, &nn_backend_cpu, NULL, probs, x, 3, 1);
    assert_float_equal(probs[1], 1.0 / (1.0 + exp(-0.5)), 1e-7);
    assert_float_equal(probs[0] + probs[1], 1.0, 1e-7);
    assert_float_equal(probs[2], 1.0 - 1.0 / (1.0 + exp(2.0)), 1e-7);
    assert_float_equal(probs[5], 1.0 / (1.0 + exp(-3.0)), 1e-7);
    /* Large logits stay finite. */
    float big[2] = {80.0f, -80.0f};
    int32_t by[2] = {0, 1};
    double lbig = loss_sum(&l, big, by, NULL, 2, 1);
    assert_float_equal(lbig, 160.0, 1e-9);
}

static void test_bce_gradient(void **state)
{
    enum { N = 8 };
    float x[N];
    int32_t y[N] = {0, 1, 1, 0, 1, 0, 0, 1};
    fill(x, N, 17, 4.0f);
    nn_loss_spec l = {.kind = NN_LOSS_BINARY_CROSS_ENTROPY};
    check_fd(&l, x, y, NULL, N, 1, 1.0f / N, 1e-2f, 1e-4);
}

static void test_huber_values(void **state)
{
    nn_loss_spec l = {.kind = NN_LOSS_HUBER, .huber_delta = 1.0};
    float pred[4] = {0.5f, -3.0f, 2.0f, 1.0f}, t[4] = {0, 0, 0, 0}, d[4];
    /* quadratic 0.125; linear 3 - 0.5 = 2.5; 2 - 0.5 = 1.5; at delta 0.5 */
    double loss = nn_loss_compute(&l, &nn_backend_cpu, NULL, d, pred, NULL, t,
                                  1, 4, NULL, 1.0f);
    assert_float_equal(loss, 4.625, 1e-12);
    assert_float_equal(d[0], 0.5, 0);
    assert_float_equal(d[1], -1.0, 0);
    assert_float_equal(d[2], 1.0, 0);
    assert_float_equal(d[3], 1.0, 0);
    /* Another delta: 0.5 d^2 below it, delta (|d| - delta / 2) above. */
    l.huber_delta = 2.5;
    loss = nn_loss_compute(&l, &nn_backend_cpu, NULL, d, pred, NULL, t, 2, 2,
                           NULL, 0.5f);
    assert_float_equal(loss, 0.125 + 2.5 * (3.0 - 1.25) + 2.0 + 0.5, 1e-12);
    assert_float_equal(d[1], -1.25, 0); /* -delta * grad_scale */
    assert_float_equal(d[2], 1.0, 0);   /* 2 * 0.5 */
    /* Regression predictions are the outputs. */
    float out[4];
    nn_loss_output(&l, &nn_backend_cpu, NULL, out, pred, 2, 2);
    assert_memory_equal(out, pred, sizeof out);
}

static void test_huber_gradient(void **state)
{
    enum { L = 16 };
    float pred[L], target[L];
    fill(pred, L, 21, 3.0f);
    fill(target, L, 22, 1.0f);
    nn_loss_spec l = {.kind = NN_LOSS_HUBER, .huber_delta = 0.8};
    /* Keep every difference away from the kink at |d| = delta. */
    for (int i = 0; i < L; i++)
        if (fabsf(fabsf(pred[i] - target[i]) - 0.8f) < 0.05f)
            pred[i] += 0.2f;
    check_fd(&l, pred, NULL, target, 4, 4, 1.0f / L, 1e-2f, 1e-4);
}

static void test_mse_through_compute(void **state)
{
    nn_loss_spec l = {.kind = NN_LOSS_MSE};
    float pred[2] = {1.0f, -1.0f}, t[2] = {0.0f, 1.0f}, d[2];
    uint32_t hits = 9;
    double loss = nn_loss_compute(&l, &nn_backend_cpu, NULL, d, pred, NULL, t,
                                  1, 2, &hits, 0.5f);
    assert_float_equal(loss, 5.0, 0);
    assert_int_equal(hits, 0);
    assert_float_equal(d[0], 1.0, 0);
    assert_float_equal(d[1], -2.0, 0);
}

static void expect_resolve(nn_loss_spec l, ty_task task, uint32_t outputs,
                           const char *field)
{
    ty_err err = {0};
    nn_loss_spec before = l;
    assert_int_equal(nn_loss_resolve(&l, task, outputs, &err), TY_EINVAL);
    assert_string_equal(err.field, field);
    assert_memory_equal(&l, &before, sizeof l);
}

static void test_resolve(void **state)
{
    ty_err err;
    nn_loss_spec l = {.kind = NN_LOSS_AUTO};
    assert_int_equal(nn_loss_resolve(&l, TY_TASK_CLASSIFICATION, 10, &err),
                     TY_OK);
    assert_int_equal(l.kind, NN_LOSS_CROSS_ENTROPY);
    l = (nn_loss_spec){.kind = NN_LOSS_AUTO, .huber_delta = 1.0};
    assert_int_equal(nn_loss_resolve(&l, TY_TASK_REGRESSION, 3, &err), TY_OK);
    assert_int_equal(l.kind, NN_LOSS_MSE);
    assert_float_equal(l.huber_delta, 0.0, 0); /* canonical */
    l = (nn_loss_spec){.kind = NN_LOSS_BINARY_CROSS_ENTROPY};
    assert_int_equal(nn_loss_resolve(&l, TY_TASK_CLASSIFICATION, 2, &err),
                     TY_OK);

    expect_resolve((nn_loss_spec){.kind = NN_LOSS_BINARY_CROSS_ENTROPY},
                   TY_TASK_CLASSIFICATION, 3, "hyperparameters.loss");
    expect_resolve((nn_loss_spec){.kind = NN_LOSS_MSE}, TY_TASK_CLASSIFICATION,
                   2, "hyperparameters.loss");
    expect_resolve((nn_loss_spec){.kind = NN_LOSS_CROSS_ENTROPY},
                   TY_TASK_REGRESSION, 1, "hyperparameters.loss");
    expect_resolve((nn_loss_spec){.kind = NN_LOSS_AUTO, .label_smoothing = 0.1},
                   TY_TASK_REGRESSION, 1, "hyperparameters.label_smoothing");
    expect_resolve(
        (nn_loss_spec){.kind = NN_LOSS_CROSS_ENTROPY, .label_smoothing = 1.0},
        TY_TASK_CLASSIFICATION, 4, "hyperparameters.label_smoothing");
    expect_resolve((nn_loss_spec){.kind = NN_LOSS_HUBER, .huber_delta = 0.0},
                   TY_TASK_REGRESSION, 1, "hyperparameters.huber_delta");
    ty_err e = {0};
    l = (nn_loss_spec){.kind = NN_LOSS_BINARY_CROSS_ENTROPY};
    assert_int_equal(nn_loss_resolve(&l, TY_TASK_CLASSIFICATION, 5, &e),
                     TY_EINVAL);
    assert_non_null(strstr(e.msg, "exactly 2 classes"));
}

static void test_json_form(void **state)
{
    ty_err err;
    nn_loss_spec l, back;
    /* Files without trainyard.loss read as the task's default. */
    assert_int_equal(nn_loss_from_json(&l, NULL, TY_TASK_REGRESSION, 2, &err),
                     TY_OK);
    assert_int_equal(l.kind, NN_LOSS_MSE);
    nn_loss_spec cases[] = {
        {.kind = NN_LOSS_CROSS_ENTROPY, .label_smoothing = 0.15},
        {.kind = NN_LOSS_BINARY_CROSS_ENTROPY},
        {.kind = NN_LOSS_HUBER, .huber_delta = 0.25},
        {.kind = NN_LOSS_MSE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ty_task task =
            cases[i].kind == NN_LOSS_HUBER || cases[i].kind == NN_LOSS_MSE
                ? TY_TASK_REGRESSION
                : TY_TASK_CLASSIFICATION;
        json_t *j = nn_loss_to_json(&cases[i]);
        assert_non_null(j);
        assert_int_equal(nn_loss_from_json(&back, j, task, 2, &err), TY_OK);
        assert_memory_equal(&back, &cases[i], sizeof back);
        json_decref(j);
    }
    json_t *bad = json_pack("{s:s}", "kind", "hinge");
    assert_int_equal(
        nn_loss_from_json(&l, bad, TY_TASK_CLASSIFICATION, 2, &err),
        TY_EFORMAT);
    json_decref(bad);
    bad = json_pack("{s:s}", "kind", "binary_cross_entropy");
    assert_int_equal(
        nn_loss_from_json(&l, bad, TY_TASK_CLASSIFICATION, 3, &err),
        TY_EFORMAT);
    json_decref(bad);
    bad = json_pack("{s:s, s:i}", "kind", "mse", "delta", 1);
    assert_int_equal(nn_loss_from_json(&l, bad, TY_TASK_REGRESSION, 1, &err),
                     TY_EFORMAT);
    json_decref(bad);
}

/* A BCE network must end in 1 unit; the error says so and names the units. */
static void test_spec_output_size(void **state)
{
    const uint32_t in[] = {4};
    nn_loss_spec bce = {.kind = NN_LOSS_BINARY_CROSS_ENTROPY};
    json_t *two = json_loads("{\"layers\":[{\"type\":\"dense\",\"units\":8},"
                             "{\"type\":\"relu\"},{\"type\":\"dense\","
                             "\"units\":2}]}",
                             0, NULL);
    json_t *one = json_loads("{\"layers\":[{\"type\":\"dense\",\"units\":8},"
                             "{\"type\":\"relu\"},{\"type\":\"dense\","
                             "\"units\":1}]}",
                             0, NULL);
    ty_err err = {0};
    assert_int_equal(nn_spec_validate_for_loss(two, in, 1, 2,
                                               TY_TASK_CLASSIFICATION, &bce,
                                               NULL, NULL, &err),
                     TY_EINVAL);
    assert_string_equal(err.field, "model.layers[2].units");
    assert_non_null(strstr(err.msg, "needs 1"));
    uint64_t params = 0;
    assert_int_equal(nn_spec_validate_for_loss(one, in, 1, 2,
                                               TY_TASK_CLASSIFICATION, &bce,
                                               NULL, &params, &err),
                     TY_OK);
    assert_int_equal(params, 4 * 8 + 8 + 8 + 1);
    /* The default loss still wants one output per class. */
    assert_int_equal(nn_spec_validate(one, in, 1, 2, TY_TASK_CLASSIFICATION,
                                      NULL, NULL, &err),
                     TY_EINVAL);
    assert_string_equal(err.field, "model.layers[2].units");
    assert_int_equal(nn_spec_validate(two, in, 1, 2, TY_TASK_CLASSIFICATION,
                                      NULL, NULL, &err),
                     TY_OK);
    json_decref(one);
    json_decref(two);
}

/* nn_loss_scaled: a batch that is part of a larger group gets the group
 * mean's gradient (accumulation). */
static void test_scaled_gradient(void **state)
{
    const uint32_t in[] = {3};
    json_t *spec =
        json_loads("{\"layers\":[{\"type\":\"dense\",\"units\":2}]}", 0, NULL);
    nn_arch arch;
    ty_err err;
    nn_loss_spec huber = {.kind = NN_LOSS_HUBER, .huber_delta = 1.0};
    assert_int_equal(nn_arch_build_for_loss(spec, in, 1, 2, TY_TASK_REGRESSION,
                                            &huber, &arch, NULL, &err),
                     TY_OK);
    nn_workspace *ws = nn_workspace_create_for(&arch, 4, 1);
    assert_non_null(ws);
    float *out = ws->act[arch.n_layers];
    for (int i = 0; i < 8; i++) {
        out[i] = (float)i * 0.3f - 1.0f;
        ws->targets[i] = 0.0f;
    }
    double a = nn_loss_scaled(&arch, ws, 4, NULL, ws->targets, NULL, 4);
    float full[8];
    memcpy(full, ws->grad[0], sizeof full);
    double b = nn_loss_scaled(&arch, ws, 4, NULL, ws->targets, NULL, 12);
    assert_float_equal(a, b, 0);
    for (int i = 0; i < 8; i++)
        assert_float_equal(ws->grad[0][i], full[i] * 4.0 / 12.0, 1e-7);
    nn_workspace_destroy(ws);
    nn_arch_free(&arch);
    json_decref(spec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_label_smoothing_values),
        cmocka_unit_test(test_label_smoothing_gradient),
        cmocka_unit_test(test_bce_values),
        cmocka_unit_test(test_bce_gradient),
        cmocka_unit_test(test_huber_values),
        cmocka_unit_test(test_huber_gradient),
        cmocka_unit_test(test_mse_through_compute),
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_json_form),
        cmocka_unit_test(test_spec_output_size),
        cmocka_unit_test(test_scaled_gradient),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
