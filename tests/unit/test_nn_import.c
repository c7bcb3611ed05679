/* test_nn_import.c - nn_model_import's refusal of weights whose tensor
 * names are not the spec's (issue 30): a plain PyTorch module's state dict
 * (fc1.weight, where the spec's nn.Sequential has 1.weight) gets a message
 * that lists what the spec expects and what the file has, counted, and
 * points at the converter; never a server path. Names that fit keep the
 * loader's own message (a shape), and long names never push the pointer
 * to the converter out of the message. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/nn.h"
#include "models/safetensors.h"
#include "testutil.h"

/* flatten, dense 8, relu, dense 3 on [1, 2, 2]: tensors 1.weight [8, 4],
 * 1.bias [8], 3.weight [3, 8], 3.bias [3]. */
static const char *const meta_text =
    "{\"spec\": {\"layers\": [{\"type\": \"flatten\"}, {\"type\": \"dense\","
    " \"units\": 8}, {\"type\": \"relu\"}, {\"type\": \"dense\", \"units\":"
    " 3}]}, \"task\": \"classification\", \"input_shape\": [1, 2, 2],"
    " \"num_outputs\": 3}";

static float w1[8 * 4], b1[8], w2[3 * 8], b2[3];

/* Imports the n tensors (names[i], shaped as the spec's i-th) with the
 * test's metadata; returns the status, the message in err. */
static ty_status import_named(const char *const *names, size_t n, ty_err *err)
{
    const st_out_tensor shapes[4] = {
        {NULL, ST_F32, 2, {8, 4}, w1},
        {NULL, ST_F32, 1, {8}, b1},
        {NULL, ST_F32, 2, {3, 8}, w2},
        {NULL, ST_F32, 1, {3}, b2},
    };
    st_out_tensor t[4];
    for (size_t i = 0; i < n; i++) {
        t[i] = shapes[i];
        t[i].name = names[i];
    }
    char in[512], out[512];
    snprintf(in, sizeof in, "%s/in.safetensors", tu_tmpdir);
    snprintf(out, sizeof out, "%s/out.safetensors", tu_tmpdir);
    ty_err werr = {0};
    assert_int_equal(st_write(in, NULL, t, n, &werr), TY_OK);
    json_error_t je;
    json_t *meta = json_loads(meta_text, 0, &je);
    assert_non_null(meta);
    nn_net *net = NULL;
    ty_status st = nn_model_import(in, meta, out, &net, err);
    json_decref(meta);
    nn_net_destroy(net);
    return st;
}

static void expect_in(const ty_err *err, const char *needle)
{
    if (!strstr(err->msg, needle))
        fail_msg("'%s' not in: %s", needle, err->msg);
}

/* The converter's pointer, whole, at the message's end. */
static void expect_hint(const ty_err *err)
{
    static const char end[] = "tools/trainyard_torch.py convert renames a "
                              "PyTorch module's (docs/models.md)";
    size_t len = strlen(err->msg), n = sizeof end - 1;
    if (len < n || strcmp(err->msg + len - n, end))
        fail_msg("the message does not end with the hint: %s", err->msg);
    assert_null(strstr(err->msg, tu_tmpdir));
}

/* A plain nn.Module's names: all four expected ones missing, all four of
 * the file's unexpected, both listed (three of each, counted). */
static void test_module_names_listed(void **state)
{
    (void)state;
    static const char *const names[] = {"fc1.weight", "fc1.bias", "fc2.weight",
                                        "fc2.bias"};
    ty_err err = {0};
    assert_int_equal(import_named(names, 4, &err), TY_EFORMAT);
    expect_in(&err, "expects 4 tensors (1.weight, 1.bias, 3.weight, ...)");
    expect_in(&err, "none of them");
    expect_in(&err, "4 the spec does not name (fc1.weight, fc1.bias, "
                    "fc2.weight, ...)");
    expect_hint(&err);
}

/* Some names fit: the missing ones and the stray ones are named. */
static void test_some_names_missing(void **state)
{
    (void)state;
    static const char *const names[] = {"1.weight", "1.bias", "fc2.weight",
                                        "3.bias"};
    ty_err err = {0};
    assert_int_equal(import_named(names, 4, &err), TY_EFORMAT);
    expect_in(&err, "1 of them missing (3.weight)");
    expect_in(&err, "1 the spec does not name (fc2.weight)");
    expect_hint(&err);
}

/* All names fit but a shape does not: the loader's message stays. */
static void test_fitting_names_keep_shape_message(void **state)
{
    (void)state;
    static const char *const names[] = {"1.weight", "1.bias", "3.bias",
                                        "3.weight"};
    ty_err err = {0};
    assert_int_equal(import_named(names, 4, &err), TY_EFORMAT);
    expect_in(&err, "tensor '3.weight' must be F32 [3, 8]");
    assert_null(strstr(err.msg, "trainyard_torch"));
}

/* Names of 90 characters: the lists are cut, the pointer stays whole. */
static void test_long_names_keep_hint(void **state)
{
    (void)state;
    char a[4][96];
    const char *names[4];
    for (int i = 0; i < 4; i++) {
        memset(a[i], 'a' + i, 90);
        a[i][90] = '\0';
        names[i] = a[i];
    }
    ty_err err = {0};
    assert_int_equal(import_named(names, 4, &err), TY_EFORMAT);
    expect_in(&err, "expects 4 tensors");
    expect_hint(&err);
}

int main(void)
{
    for (size_t i = 0; i < sizeof w1 / sizeof *w1; i++)
        w1[i] = (float)i / 32.0f;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_module_names_listed),
        cmocka_unit_test(test_some_names_missing),
        cmocka_unit_test(test_fitting_names_keep_shape_message),
        cmocka_unit_test(test_long_names_keep_hint),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
