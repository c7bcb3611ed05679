/* test_nn_spec.c - model spec validation: normalization with defaults and
 * every error path, each with its field and a message naming the layer. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "models/nn.h"

static const uint32_t mnist[] = {1, 28, 28};
static const uint32_t vec8[] = {8};

static ty_status validate(const char *text, const uint32_t *shape,
                          uint32_t ndim, uint32_t outputs, json_t **norm,
                          uint64_t *params, ty_err *err)
{
    json_t *spec = json_loads(text, 0, NULL);
    assert_non_null(spec);
    ty_err_clear(err);
    ty_status st = nn_spec_validate(spec, shape, ndim, outputs,
                                    TY_TASK_CLASSIFICATION, norm, params, err);
    json_decref(spec);
    return st;
}

static void expect_error(const char *text, const uint32_t *shape, uint32_t ndim,
                         uint32_t outputs, const char *field,
                         const char *msg_part)
{
    ty_err err;
    json_t *norm = (json_t *)1;
    assert_int_equal(validate(text, shape, ndim, outputs, &norm, NULL, &err),
                     TY_EINVAL);
    assert_null(norm);
    assert_string_equal(err.field, field);
    if (!strstr(err.msg, msg_part))
        fail_msg("message '%s' lacks '%s'", err.msg, msg_part);
}

static void test_good_spec_normalized(void **state)
{
    ty_err err;
    json_t *norm = NULL;
    uint64_t params = 0;
    assert_int_equal(
        validate("{\"layers\":[{\"type\":\"flatten\"},{\"units\":256,\"type\":"
                 "\"dense\"},{\"type\":\"relu\"},{\"type\":\"dropout\"},"
                 "{\"type\":\"dense\",\"units\":10,\"bias\":false}]}",
                 mnist, 3, 10, &norm, &params, &err),
        TY_OK);
    assert_int_equal(params, 784 * 256 + 256 + 256 * 10);
    char *text = json_dumps(norm, JSON_COMPACT);
    assert_string_equal(
        text, "{\"layers\":[{\"type\":\"flatten\"},{\"type\":\"dense\","
              "\"units\":256,\"bias\":true},{\"type\":\"relu\"},"
              "{\"type\":\"dropout\",\"rate\":0.5},{\"type\":\"dense\","
              "\"units\":10,\"bias\":false}]}");
    free(text);
    /* The normalized spec validates to itself. */
    json_t *again = NULL;
    assert_int_equal(nn_spec_validate(norm, mnist, 3, 10,
                                      TY_TASK_CLASSIFICATION, &again, NULL,
                                      &err),
                     TY_OK);
    assert_true(json_equal(norm, again));
    json_decref(again);
    json_decref(norm);
}

static void test_activations_and_regression(void **state)
{
    json_t *spec = json_loads("{\"layers\":[{\"type\":\"dense\",\"units\":4},"
                              "{\"type\":\"gelu\"},{\"type\":\"tanh\"},"
                              "{\"type\":\"sigmoid\"},{\"type\":\"dense\","
                              "\"units\":2}]}",
                              0, NULL);
    uint64_t params;
    ty_err err;
    assert_int_equal(nn_spec_validate(spec, vec8, 1, 2, TY_TASK_REGRESSION,
                                      NULL, &params, &err),
                     TY_OK);
    assert_int_equal(params, 8 * 4 + 4 + 4 * 2 + 2);
    json_decref(spec);
}

static void test_errors(void **state)
{
    expect_error("{}", vec8, 1, 2, "model.layers", "required");
    expect_error("{\"layers\":[]}", vec8, 1, 2, "model.layers", "at least one");
    expect_error("{\"layers\":{}}", vec8, 1, 2, "model.layers", "array");
    expect_error("{\"layers\":[{\"type\":\"dense\",\"units\":2}],\"loss\":1}",
                 vec8, 1, 2, "model.loss", "unknown key 'loss'");
    expect_error("{\"layers\":[{\"type\":\"dense\",\"units\":2},3]}", vec8, 1,
                 2, "model.layers[1]", "layer 1 must be an object");
    expect_error("{\"layers\":[{\"type\":\"relu\"},{\"type\":\"conv9\"}]}",
                 vec8, 1, 2, "model.layers[1].type",
                 "layer 1: unknown type 'conv9'; known types: flatten, dense");
    expect_error("{\"layers\":[{\"units\":3}]}", vec8, 1, 2,
                 "model.layers[0].type", "layer 0: type is required");
    expect_error("{\"layers\":[{\"type\":\"dense\",\"units\":2,\"activation\":"
                 "\"relu\"}]}",
                 vec8, 1, 2, "model.layers[0].activation",
                 "layer 0 (dense): unknown key 'activation'");
    expect_error("{\"layers\":[{\"type\":\"relu\"},{\"type\":\"dense\"}]}",
                 vec8, 1, 2, "model.layers[1].units",
                 "layer 1 (dense): units is required");
    expect_error("{\"layers\":[{\"type\":\"dense\",\"units\":0}]}", vec8, 1, 2,
                 "model.layers[0].units",
                 "layer 0 (dense): units must be between 1 and 65536, got 0");
    expect_error("{\"layers\":[{\"type\":\"dense\",\"units\":2.5}]}", vec8, 1,
                 2, "model.layers[0].units", "must be an integer");
    expect_error("{\"layers\":[{\"type\":\"dense\",\"units\":2,\"bias\":1}]}",
                 vec8, 1, 2, "model.layers[0].bias", "true or false");
    expect_error("{\"layers\":[{\"type\":\"dropout\",\"rate\":1}]}", vec8, 1, 8,
                 "model.layers[0].rate", "layer 0 (dropout): rate must be");
    expect_error(
        "{\"layers\":[{\"type\":\"dense\",\"units\":10}]}", mnist, 3, 10,
        "model.layers[0]",
        "layer 0 (dense): its input has shape [1, 28, 28] but dense "
        "needs a vector; add a {\"type\": \"flatten\"} layer before it");
    expect_error("{\"layers\":[{\"type\":\"flatten\"},{\"type\":\"dense\","
                 "\"units\":5},{\"type\":\"relu\"}]}",
                 mnist, 3, 10, "model.layers[1].units",
                 "the last layer outputs 5 values but the dataset has 10 "
                 "classes; make the last dense layer's units 10");
    expect_error("{\"layers\":[{\"type\":\"relu\"}]}", vec8, 1, 3,
                 "model.layers", "outputs 8 values but the dataset has 3");
    /* 65536 * 65536 * 2 parameters is over the limit. */
    static const uint32_t wide[] = {65536};
    expect_error(
        "{\"layers\":[{\"type\":\"dense\",\"units\":65536},{\"type\":"
        "\"dense\",\"units\":65536},{\"type\":\"dense\",\"units\":2}]}",
        wide, 1, 2, "model.layers", "parameters; the limit is");
}

static void test_too_many_layers(void **state)
{
    json_t *layers = json_array();
    for (int i = 0; i < NN_MAX_LAYERS + 1; i++)
        json_array_append_new(layers, json_pack("{s:s}", "type", "relu"));
    json_t *spec = json_pack("{s:o}", "layers", layers);
    ty_err err;
    assert_int_equal(nn_spec_validate(spec, vec8, 1, 8, TY_TASK_CLASSIFICATION,
                                      NULL, NULL, &err),
                     TY_EINVAL);
    assert_string_equal(err.field, "model.layers");
    assert_non_null(strstr(err.msg, "limit is 256"));
    /* Exactly the limit is fine. */
    json_array_remove(layers, 0);
    assert_int_equal(nn_spec_validate(spec, vec8, 1, 8, TY_TASK_CLASSIFICATION,
                                      NULL, NULL, &err),
                     TY_OK);
    json_decref(spec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_spec_normalized),
        cmocka_unit_test(test_activations_and_regression),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_too_many_layers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
