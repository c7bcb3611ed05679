/* Unit tests for the predict and KServe body decoder (serve/decode.h):
 * numbers in every JSON spelling, nested and flat, the example limit
 * enforced while counting, and the errors with their field paths. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/decode.h"
#include "serve/predict.h"

/* Parses text for a model of f inputs; returns the status, *x and *n. */
static ty_status parse(const char *text, uint64_t f, float **x, uint64_t *n,
                       ty_err *err)
{
    memset(err, 0, sizeof *err);
    return serve_predict_parse(text, strlen(text), f, x, n, err);
}

/* Expects the parse of text to fail with status s, field and a message
 * containing msg. */
static void expect_error(const char *text, uint64_t f, ty_status s,
                         const char *field, const char *msg)
{
    float *x = NULL;
    uint64_t n = 0;
    ty_err err;
    ty_status got = parse(text, f, &x, &n, &err);
    if (got != s || strcmp(err.field, field) != 0 || !strstr(err.msg, msg))
        print_error("%s: got %d field '%s' msg '%s'\n", text, got, err.field,
                    err.msg);
    assert_int_equal(got, s);
    assert_string_equal(err.field, field);
    assert_non_null(strstr(err.msg, msg));
    assert_null(x);
}

static void test_good_inputs(void **state)
{
    float *x;
    uint64_t n;
    ty_err err;
    /* Every spelling of a number, flat and nested in the input shape, white
     * space anywhere; the floats are those of (float)strtod, as jansson
     * gave them. */
    const char *text =
        " {\n\"inputs\" : [ [1, -2.5, 3e2, 4E-1], [[0.5, -0], [1.0e+0, "
        "12345678901234567890]] ,[[[7]],[8],[[9, 10]]] ] } \r\n";
    assert_int_equal(parse(text, 4, &x, &n, &err), TY_OK);
    assert_int_equal(n, 3);
    const float want[12] = {1,    -2.5f, 300,  0.4f,
                            0.5f, -0.0f, 1.0f, (float)12345678901234567890.0,
                            7,    8,     9,    10};
    for (int i = 0; i < 12; i++)
        assert_true(x[i] == want[i]);
    assert_true(signbit(x[5]));
    free(x);

    /* Escaped key names are keys. */
    assert_int_equal(parse("{\"inp\\u0075ts\": [[1]]}", 1, &x, &n, &err),
                     TY_OK);
    assert_int_equal(n, 1);
    assert_true(x[0] == 1.0f);
    free(x);
}

static void test_syntax_errors(void **state)
{
    const char *bad[] = {
        "",
        "   ",
        "{",
        "{\"inputs\": [[1, 2]]",
        "{\"inputs\": [[1, 2]]} x",
        "{\"inputs\": [[1, 2,]]}",
        "{\"inputs\": [[01]]}",
        "{\"inputs\": [[1.]]}",
        "{\"inputs\": [[.5]]}",
        "{\"inputs\": [[1e]]}",
        "{\"inputs\": [[+1]]}",
        "{\"inputs\": [[NaN]]}",
        "{\"inputs\": [[1e999]]}",
        "{\"inputs\": [[tru]]}",
        "{\"inputs\": [[1]], \"inputs\": [[2]]}",
        "{\"inputs\": [[\"\\u0000\"]]}",
        "{\"inputs\": [[\"\xff\"]]}",
        "{\"inputs\": [[\"a\nb\"]]}",
        "{\"inputs\" [[1]]}",
        "{inputs: [[1]]}",
        "7",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_error(bad[i], 1, TY_EFORMAT, "", "not valid JSON");
    /* The line and column of the error. */
    expect_error("{\n  \"inputs\": [[1, 2,]]}", 2, TY_EFORMAT, "",
                 "(line 2, column 20)");
    /* Deeper than jansson allows. */
    size_t d = 3000;
    char *deep = malloc(2 * d + 32);
    strcpy(deep, "{\"x\": ");
    memset(deep + 6, '[', d);
    memset(deep + 6 + d, ']', d);
    strcpy(deep + 6 + 2 * d, "}");
    expect_error(deep, 1, TY_EFORMAT, "", "maximum parsing depth");
    free(deep);
    /* Valid JSON but not an object. */
    expect_error("[[1]]", 1, TY_EFORMAT, "", "must be a JSON object");
}

static void test_field_errors(void **state)
{
    expect_error("{\"input\": [[1]]}", 1, TY_EINVAL, "input",
                 "unknown key 'input'; allowed: inputs");
    expect_error("{}", 1, TY_EINVAL, "inputs", "array of 1 to 100000");
    expect_error("{\"inputs\": []}", 1, TY_EINVAL, "inputs", "1 to 100000");
    expect_error("{\"inputs\": {\"a\": 1}}", 1, TY_EINVAL, "inputs",
                 "1 to 100000");
    expect_error("{\"inputs\": [[1, 2], 3]}", 2, TY_EINVAL, "inputs[1]",
                 "inputs[1] must be a list of numbers");
    expect_error("{\"inputs\": [[1, 2], [1, \"x\"]]}", 2, TY_EINVAL,
                 "inputs[1]", "inputs[1] must hold only numbers");
    expect_error("{\"inputs\": [[true, 2]]}", 2, TY_EINVAL, "inputs[0]",
                 "must hold only numbers");
    expect_error("{\"inputs\": [[null, 2]]}", 2, TY_EINVAL, "inputs[0]",
                 "must hold only numbers");
    expect_error("{\"inputs\": [[{}, 2]]}", 2, TY_EINVAL, "inputs[0]",
                 "must hold only numbers");
    expect_error("{\"inputs\": [[1, 2, 3]]}", 2, TY_EINVAL, "inputs[0]",
                 "inputs[0] has more than 2 values; this model takes 2");
    expect_error("{\"inputs\": [[1, 2], [[1]]]}", 2, TY_EINVAL, "inputs[1]",
                 "inputs[1] has 1 values; this model takes 2");
    expect_error("{\"inputs\": [[[[[[[[[[1]]]]]]]]]]}", 1, TY_EINVAL,
                 "inputs[0]", "inputs[0] is nested too deeply");
    /* 8 levels of arrays in an example are allowed. */
    float *x;
    uint64_t n;
    ty_err err;
    assert_int_equal(
        parse("{\"inputs\": [[[[[[[[[1]]]]]]]]]}", 1, &x, &n, &err), TY_OK);
    free(x);
    /* Many empty examples for a wide model: an error, without room for
     * 100,000 wide examples being taken. */
    expect_error("{\"inputs\": [[], []]}", 1 << 20, TY_EINVAL, "inputs[0]",
                 "has 0 values");
}

/* The limit is enforced while counting: a body whose example 100,001 is
 * followed by garbage is refused for its size, not its syntax. */
static void test_example_limit(void **state)
{
    size_t n = SERVE_MAX_EXAMPLES + 1;
    char *text = malloc(n * 4 + 64);
    char *p = text + sprintf(text, "{\"inputs\": [");
    for (size_t i = 0; i < n; i++)
        p += sprintf(p, "%s[1]", i ? "," : "");
    strcpy(p, ", this is not JSON");
    expect_error(text, 1, TY_EINVAL, "inputs", "1 to 100000");
    /* Exactly the limit is accepted. */
    p = text + sprintf(text, "{\"inputs\": [");
    for (size_t i = 0; i < SERVE_MAX_EXAMPLES; i++)
        p += sprintf(p, "%s[%zu]", i ? "," : "", i % 7);
    strcpy(p, "]}");
    float *x;
    uint64_t got;
    ty_err err;
    assert_int_equal(parse(text, 1, &x, &got, &err), TY_OK);
    assert_int_equal(got, SERVE_MAX_EXAMPLES);
    assert_true(x[SERVE_MAX_EXAMPLES - 1] ==
                (float)((SERVE_MAX_EXAMPLES - 1) % 7));
    free(x);
    free(text);
}

static void test_kserve(void **state)
{
    const char *text =
        "{\"id\": \"42\", \"parameters\": {\"a\": [1]}, \"inputs\": [{\"name\":"
        " \"input\", \"shape\": [2, 2], \"datatype\": \"FP32\", \"data\": [[1, "
        "2], [3, 4.5]], \"parameters\": {}}], \"outputs\": [{\"name\": "
        "\"output\"}]}";
    serve_infer_body b;
    ty_err err = {0};
    assert_int_equal(serve_infer_scan(text, strlen(text), &b, &err), TY_OK);
    assert_string_equal(json_string_value(json_object_get(b.doc, "id")), "42");
    const json_t *in = json_array_get(json_object_get(b.doc, "inputs"), 0);
    assert_string_equal(json_string_value(json_object_get(in, "name")),
                        "input");
    assert_int_equal(json_array_size(json_object_get(in, "shape")), 2);
    assert_null(json_object_get(in, "data")); /* left as text */
    float x[4];
    assert_int_equal(serve_infer_room(b.data, 4), 4);
    assert_int_equal(serve_infer_decode(b.data, 4, "inputs[0].data", x, &err),
                     TY_OK);
    assert_true(x[0] == 1 && x[1] == 2 && x[2] == 3 && x[3] == 4.5f);
    assert_int_equal(serve_infer_decode(b.data, 3, "inputs[0].data", x, &err),
                     TY_EINVAL);
    assert_string_equal(err.field, "inputs[0].data");
    assert_non_null(strstr(err.msg, "data holds more than 3 values; shape "
                                    "says 3"));
    assert_int_equal(serve_infer_decode(b.data, 5, "inputs[0].data", x, &err),
                     TY_EINVAL);
    assert_non_null(strstr(err.msg, "data holds 4 values; shape says 5"));
    serve_infer_body_free(&b);

    const char *bad_data = "{\"inputs\": [{\"data\": [1, \"x\"]}]}";
    assert_int_equal(serve_infer_scan(bad_data, strlen(bad_data), &b, &err),
                     TY_OK);
    assert_int_equal(serve_infer_decode(b.data, 2, "inputs[0].data", x, &err),
                     TY_EINVAL);
    assert_string_equal(err.field, "inputs[0].data");
    assert_non_null(strstr(err.msg, "must hold only numbers"));
    serve_infer_body_free(&b);

    const char *no_data = "{\"inputs\": [{\"name\": \"input\"}]}";
    assert_int_equal(serve_infer_scan(no_data, strlen(no_data), &b, &err),
                     TY_OK);
    assert_int_equal(serve_infer_decode(b.data, 2, "inputs[0].data", x, &err),
                     TY_EINVAL);
    assert_non_null(strstr(err.msg, "data must be an array of numbers"));
    serve_infer_body_free(&b);

    /* Two tensors, the second big and never a tree: the count is all the
     * handler sees of it. */
    const char *two = "{\"inputs\": [{}, {\"data\": [1, 2, 3]}, [4]]}";
    assert_int_equal(serve_infer_scan(two, strlen(two), &b, &err), TY_OK);
    assert_true(json_array_size(json_object_get(b.doc, "inputs")) > 1);
    serve_infer_body_free(&b);

    const char *bad[] = {"{\"inputs\": [{\"name\": \"a\", \"name\": \"b\"}]}",
                         "{\"id\": \"\\ud800\"}", "[]",
                         "{\"inputs\": [{\"data\": [1, 2}]}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(serve_infer_scan(bad[i], strlen(bad[i]), &b, &err),
                         TY_EFORMAT);
        assert_null(b.doc);
        assert_int_equal(serve_infer_check(bad[i], strlen(bad[i]), &err),
                         TY_EFORMAT);
    }
    /* The data is skimmed by the scan, read strictly by the walk; the
     * checking scan names what is wrong. */
    const char *trailing = "{\"inputs\": [{\"data\": [1,]}]}";
    assert_int_equal(serve_infer_scan(trailing, strlen(trailing), &b, &err),
                     TY_OK);
    assert_int_not_equal(
        serve_infer_decode(b.data, 1, "inputs[0].data", x, &err), TY_OK);
    serve_infer_body_free(&b);
    assert_int_equal(serve_infer_check(trailing, strlen(trailing), &err),
                     TY_EFORMAT);
    assert_non_null(strstr(err.msg, "not valid JSON"));
}

/* Arbitrary bytes never crash the decoder (a tiny fuzz loop; the libFuzzer
 * targets run the same function for longer). */
/* Numbers are converted as strtod converts them, then rounded to float:
 * the fast path (exact digits and powers of ten) and the fallback agree
 * with strtod on every form (integers, decimals, exponents, 19+ digits,
 * tiny and huge values). */
static void test_numbers_as_strtod(void **state)
{
    (void)state;
    uint64_t x = 88172645463325252ull;
    char text[64 * 40 + 32];
    char nums[64][40];
    for (int round = 0; round < 2000; round++) {
        size_t len = (size_t)snprintf(text, sizeof text, "{\"inputs\": [[");
        for (int i = 0; i < 64; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            uint64_t m = x % 100000000000000000ull;
            int kind = (int)((x >> 40) % 7), e = (int)((x >> 48) % 60) - 30;
            switch (kind) {
                case 0:
                    snprintf(nums[i], 40, "%llu",
                             (unsigned long long)(m % 256));
                    break;
                case 1:
                    snprintf(nums[i], 40, "-%llu.%03llu",
                             (unsigned long long)(m % 1000),
                             (unsigned long long)(m / 1000 % 1000));
                    break;
                case 2:
                    snprintf(nums[i], 40, "%llue%d", (unsigned long long)m, e);
                    break;
                case 3:
                    snprintf(nums[i], 40, "0.%017llu", (unsigned long long)m);
                    break;
                case 4:
                    snprintf(nums[i], 40, "%llu%llu", (unsigned long long)m,
                             (unsigned long long)(x % 1000000));
                    break;
                case 5:
                    snprintf(nums[i], 40, "%.17g", (double)m * 1e-40);
                    break;
                default:
                    snprintf(nums[i], 40, "-%llu.%llue-%d",
                             (unsigned long long)(m % 10),
                             (unsigned long long)m, (int)(x % 40));
                    break;
            }
            len += (size_t)snprintf(text + len, sizeof text - len, "%s%s",
                                    i ? "," : "", nums[i]);
        }
        len += (size_t)snprintf(text + len, sizeof text - len, "]]}");
        float *xs = NULL;
        uint64_t n = 0;
        ty_err err = {0};
        assert_int_equal(serve_predict_parse(text, len, 64, &xs, &n, &err),
                         TY_OK);
        for (int i = 0; i < 64; i++) {
            float want = (float)strtod(nums[i], NULL);
            if (memcmp(&xs[i], &want, sizeof want) != 0)
                fail_msg("%s read as %a, strtod says %a", nums[i],
                         (double)xs[i], (double)want);
        }
        free(xs);
    }
}

static void test_arbitrary_bytes(void **state)
{
    const char *seeds[] = {"{\"inputs\": [[1, 2], [[3], [4]]]}",
                           "{\"inputs\": [[1e5, -0.5, 7]]}"};
    unsigned rng = 12345;
    char buf[64];
    for (int round = 0; round < 20000; round++) {
        const char *seed = seeds[round % 2];
        size_t len = strlen(seed);
        memcpy(buf, seed, len);
        for (int k = 0; k < 1 + round % 3; k++) {
            rng = rng * 1103515245u + 12345u;
            size_t at = (rng >> 8) % len;
            rng = rng * 1103515245u + 12345u;
            buf[at] = "[]{},:\"0123456789-+.eE \\tfnu\x80"[(rng >> 8) % 30];
        }
        rng = rng * 1103515245u + 12345u;
        size_t cut = (rng >> 8) % (len + 1);
        float *x = NULL;
        uint64_t n = 0;
        ty_err err = {0};
        ty_status s =
            serve_predict_parse(buf, cut, 1 + round % 3, &x, &n, &err);
        if (s == TY_OK)
            assert_true(n >= 1);
        else
            assert_true(err.msg[0] != '\0');
        free(x);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_inputs),
        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_field_errors),
        cmocka_unit_test(test_example_limit),
        cmocka_unit_test(test_kserve),
        cmocka_unit_test(test_numbers_as_strtod),
        cmocka_unit_test(test_arbitrary_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
