/* Unit tests for KServe v2 tensors (serve/tensor.h): every datatype from
 * JSON and from binary data, the range checks (INT8 200, UINT8 -5 and 1.5,
 * FP16 1e40 ...), binary sizes that do not match, the split of a binary
 * body, and the classification strings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/tensor.h"

static serve_span span(const char *text)
{
    return (serve_span){text, strlen(text)};
}

/* JSON data of dt into x (n values); the status. */
static ty_status from_json(serve_dtype dt, const char *text, uint64_t n,
                           float *x, ty_err *err)
{
    memset(err, 0, sizeof *err);
    return serve_tensor_from_json(dt, span(text), n, "input", x, err);
}

/* Expects the JSON data text of dt to be refused with a message holding
 * msg (and naming the input). */
static void json_refused(serve_dtype dt, const char *text, uint64_t n,
                         const char *msg)
{
    float x[16];
    ty_err err;
    ty_status s = from_json(dt, text, n, x, &err);
    if (s != TY_EINVAL || !strstr(err.msg, msg))
        print_error("%s %s: got %d '%s'\n", serve_dtype_name(dt), text, s,
                    err.msg);
    assert_int_equal(s, TY_EINVAL);
    assert_non_null(strstr(err.msg, msg));
    assert_non_null(strstr(err.msg, "input \"input\""));
}

static void test_dtype_names(void **state)
{
    static const char *const names[] = {
        "BOOL",  "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16",
        "INT32", "INT64", "FP16",   "BF16",   "FP32",   "FP64", "BYTES"};
    static const size_t sizes[] = {1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 2, 4, 8, 0};
    assert_int_equal(TY_ARRAY_LEN(names), SERVE_DT_COUNT);
    for (int i = 0; i < SERVE_DT_COUNT; i++) {
        serve_dtype dt;
        assert_true(serve_dtype_parse(names[i], &dt));
        assert_int_equal(dt, i);
        assert_string_equal(serve_dtype_name(dt), names[i]);
        assert_int_equal(serve_dtype_size(dt), sizes[i]);
    }
    serve_dtype dt;
    assert_false(serve_dtype_parse("fp32", &dt)); /* case-sensitive */
    assert_false(serve_dtype_parse("STRING", &dt));
    assert_false(serve_dtype_parse(NULL, &dt));
}

static void test_json_every_datatype(void **state)
{
    float x[8];
    ty_err err;
    static const struct {
        serve_dtype dt;
        const char *text;
        float want[4];
    } ok[] = {
        {SERVE_DT_BOOL, "[true, false, [true], false]", {1, 0, 1, 0}},
        {SERVE_DT_UINT8, "[0, 255, -0, 7]", {0, 255, 0, 7}},
        {SERVE_DT_UINT16, "[0, 65535, 1, 2]", {0, 65535, 1, 2}},
        {SERVE_DT_UINT32, "[4294967295, 0, 1, 2]", {4294967295.0f, 0, 1, 2}},
        {SERVE_DT_UINT64,
         "[18446744073709551615, 0, 1, 2]",
         {18446744073709551615.0f, 0, 1, 2}},
        {SERVE_DT_INT8, "[-128, 127, 0, -1]", {-128, 127, 0, -1}},
        {SERVE_DT_INT16, "[-32768, 32767, 0, 1]", {-32768, 32767, 0, 1}},
        {SERVE_DT_INT32,
         "[-2147483648, 2147483647, 0, 1]",
         {-2147483648.0f, 2147483647.0f, 0, 1}},
        {SERVE_DT_INT64,
         "[-9223372036854775808, 9223372036854775807, 0, 1]",
         {-9223372036854775808.0f, 9223372036854775807.0f, 0, 1}},
        {SERVE_DT_FP16, "[[0.5, -2], [65504, 1e-8]]", {0.5f, -2, 65504, 0}},
        {SERVE_DT_BF16, "[1, -0.5, 256, 3]", {1, -0.5f, 256, 3}},
        {SERVE_DT_FP32, "[0.1, 1e38, -3.5e-3, 2]", {0.1f, 1e38f, -3.5e-3f, 2}},
        {SERVE_DT_FP64, "[0.1, 1e38, -1e-300, 2]", {0.1f, 1e38f, -0.0f, 2}},
    };
    for (size_t i = 0; i < TY_ARRAY_LEN(ok); i++) {
        ty_status s = from_json(ok[i].dt, ok[i].text, 4, x, &err);
        if (s != TY_OK)
            print_error("%s: %s\n", ok[i].text, err.msg);
        assert_int_equal(s, TY_OK);
        for (int j = 0; j < 4; j++)
            assert_true(x[j] == ok[i].want[j]);
    }
    /* FP16 and BF16 values are rounded to their type: 0.1 is the half
     * 0x2e66, 65519 rounds down to 65504. */
    assert_int_equal(
        from_json(SERVE_DT_FP16, "[0.1, 65519, 1e-7, 3]", 4, x, &err), TY_OK);
    assert_true(x[0] == serve_half_to_float(0x2e66));
    assert_true(x[1] == 65504.0f);
    assert_true(x[2] == serve_half_to_float(0x0002)); /* subnormal */
    assert_int_equal(from_json(SERVE_DT_BF16, "[0.1]", 1, x, &err), TY_OK);
    assert_true(x[0] == serve_bf16_to_float(0x3dcd));
    /* FP32 from JSON is what strtod and a cast give (as /v1 predict). */
    assert_int_equal(
        from_json(SERVE_DT_FP32, "[0.30000001192092896, 16777217]", 2, x, &err),
        TY_OK);
    assert_true(x[0] == (float)0.30000001192092896);
    assert_true(x[1] == 16777216.0f);
}

static void test_json_ranges(void **state)
{
    json_refused(SERVE_DT_INT8, "[200]", 1,
                 "data[0]: 200 is out of range for INT8 (-128 to 127)");
    json_refused(SERVE_DT_INT8, "[1, -129]", 2,
                 "data[1]: -129 is out of range");
    json_refused(SERVE_DT_UINT8, "[-5]", 1,
                 "-5 is out of range for UINT8 (0 to 255)");
    json_refused(SERVE_DT_UINT8, "[256]", 1, "out of range for UINT8");
    json_refused(SERVE_DT_UINT8, "[1.5]", 1,
                 "data[0]: 1.5 is not an integer; UINT8 data holds only "
                 "integers");
    json_refused(SERVE_DT_INT32, "[1e2]", 1, "1e2 is not an integer");
    json_refused(SERVE_DT_INT16, "[1.0]", 1, "not an integer");
    json_refused(SERVE_DT_UINT16, "[65536]", 1, "out of range for UINT16");
    json_refused(SERVE_DT_UINT32, "[4294967296]", 1, "out of range for UINT32");
    json_refused(SERVE_DT_UINT64, "[18446744073709551616]", 1,
                 "out of range for UINT64");
    json_refused(SERVE_DT_UINT64, "[-1]", 1, "out of range for UINT64");
    json_refused(SERVE_DT_INT32, "[2147483648]", 1, "out of range for INT32");
    json_refused(SERVE_DT_INT64, "[9223372036854775808]", 1,
                 "out of range for INT64");
    json_refused(SERVE_DT_INT64, "[-9223372036854775809]", 1,
                 "out of range for INT64");
    json_refused(SERVE_DT_FP16, "[1e40]", 1,
                 "1e40 is out of range for FP16 (finite, magnitude at most "
                 "65504)");
    json_refused(SERVE_DT_FP16, "[65520]", 1, "out of range for FP16");
    json_refused(SERVE_DT_FP16, "[-70000]", 1, "out of range for FP16");
    json_refused(SERVE_DT_BF16, "[1e39]", 1, "out of range for BF16");
    json_refused(SERVE_DT_FP32, "[1e39]", 1, "out of range for FP32");
    json_refused(SERVE_DT_FP64, "[1e300]", 1, "out of range for FP64");
    json_refused(SERVE_DT_BOOL, "[1]", 1,
                 "1 is not a BOOL (send true or false)");
    json_refused(SERVE_DT_FP32, "[\"1\"]", 1,
                 "\"1\" is not a number; FP32 data holds only numbers");
    json_refused(SERVE_DT_INT8, "[null]", 1, "null is not a number");
    json_refused(SERVE_DT_FP32, "[true]", 1, "true is not a number");
    json_refused(SERVE_DT_FP32, "[{}]", 1, "is not a number");
    json_refused(SERVE_DT_BYTES, "[\"a\"]", 1,
                 "datatype BYTES is not supported");
    /* Counts against the shape, nesting, and data that is no array. */
    json_refused(SERVE_DT_FP32, "[1, 2, 3]", 2,
                 "data holds more than 2 values; the shape says 2");
    json_refused(SERVE_DT_FP32, "[[1], [2]]", 3,
                 "data holds 2 values; the shape says 3");
    json_refused(SERVE_DT_FP32, "[[[[[[[[[1]]]]]]]]]", 1, "nested too deeply");
    json_refused(SERVE_DT_FP32, "{\"a\": 1}", 1, "data must be an array");
    json_refused(SERVE_DT_FP32, "3", 1, "data must be an array");
    /* A long number is shown cut. */
    char text[256] = "[1";
    memset(text + 2, '0', 100);
    strcpy(text + 102, "]");
    json_refused(SERVE_DT_INT8, text, 1, "...");
    float x[1];
    ty_err err;
    assert_int_equal(from_json(SERVE_DT_FP32, "[1]", 1, x, &err), TY_OK);
    assert_int_equal(serve_tensor_from_json(SERVE_DT_FP32, (serve_span){0}, 1,
                                            "input", x, &err),
                     TY_EINVAL);
}

/* n elements of size bytes each, from the 64-bit values v (little-endian). */
static size_t pack(unsigned char *out, const uint64_t *v, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++)
        for (size_t b = 0; b < size; b++)
            out[i * size + b] = (unsigned char)(v[i] >> (8 * b));
    return n * size;
}

static uint64_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static uint64_t f64_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

static void test_binary_every_datatype(void **state)
{
    static const struct {
        serve_dtype dt;
        uint64_t v[3];
        float want[3];
    } ok[] = {
        {SERVE_DT_BOOL, {1, 0, 1}, {1, 0, 1}},
        {SERVE_DT_UINT8, {255, 0, 7}, {255, 0, 7}},
        {SERVE_DT_UINT16, {65535, 1, 2}, {65535, 1, 2}},
        {SERVE_DT_UINT32, {4294967295u, 1, 2}, {4294967295.0f, 1, 2}},
        {SERVE_DT_UINT64, {UINT64_MAX, 1, 2}, {18446744073709551615.0f, 1, 2}},
        {SERVE_DT_INT8, {0x80, 0x7f, 0xff}, {-128, 127, -1}},
        {SERVE_DT_INT16, {0x8000, 0x7fff, 0xffff}, {-32768, 32767, -1}},
        {SERVE_DT_INT32,
         {0x80000000u, 5, 0xffffffffu},
         {-2147483648.0f, 5, -1}},
        {SERVE_DT_INT64,
         {(uint64_t)INT64_MIN, 5, UINT64_MAX},
         {-9223372036854775808.0f, 5, -1}},
        {SERVE_DT_FP16, {0x3c00, 0xc000, 0x7bff}, {1, -2, 65504}},
        {SERVE_DT_BF16, {0x3f80, 0xbf00, 0x4380}, {1, -0.5f, 256}},
        {SERVE_DT_FP32, {0, 0, 0}, {0.1f, -3e38f, 1e-45f}},
        {SERVE_DT_FP64, {0, 0, 0}, {0.1f, -3e38f, 0}},
    };
    unsigned char raw[64];
    float x[3];
    ty_err err;
    for (size_t i = 0; i < TY_ARRAY_LEN(ok); i++) {
        uint64_t v[3] = {ok[i].v[0], ok[i].v[1], ok[i].v[2]};
        if (ok[i].dt == SERVE_DT_FP32)
            for (int j = 0; j < 3; j++)
                v[j] = f32_bits(ok[i].want[j]);
        if (ok[i].dt == SERVE_DT_FP64) {
            v[0] = f64_bits(0.1);
            v[1] = f64_bits(-3e38);
            v[2] = f64_bits(1e-300);
        }
        size_t len = pack(raw, v, 3, serve_dtype_size(ok[i].dt));
        ty_status s =
            serve_tensor_from_binary(ok[i].dt, raw, len, 3, "input", x, &err);
        if (s != TY_OK)
            print_error("%s: %s\n", serve_dtype_name(ok[i].dt), err.msg);
        assert_int_equal(s, TY_OK);
        for (int j = 0; j < 3; j++)
            assert_true(x[j] == ok[i].want[j]);
    }
    /* Half subnormals and the bit patterns of JSON's rounding agree. */
    assert_true(serve_half_to_float(0x0001) == ldexpf(1, -24));
    assert_true(serve_half_to_float(0x8000) == 0 &&
                signbit(serve_half_to_float(0x8000)));
    int finite;
    assert_true(serve_round_half(0.1, &finite) ==
                    (double)serve_half_to_float(0x2e66) &&
                finite);
    serve_round_half(65520, &finite);
    assert_false(finite);
    /* ties go to even: 2049 lies between 2048 and 2050 */
    assert_true(serve_round_half(2049, &finite) == 2048);
    assert_true(serve_round_half(2051, &finite) == 2052);
}

static void binary_refused(serve_dtype dt, const uint64_t *v, size_t n,
                           size_t len_cut, uint64_t count, const char *msg)
{
    unsigned char raw[64];
    float x[8];
    ty_err err = {0};
    size_t len = pack(raw, v, n, serve_dtype_size(dt)) - len_cut;
    ty_status s =
        serve_tensor_from_binary(dt, raw, len, count, "input", x, &err);
    if (s != TY_EINVAL || !strstr(err.msg, msg))
        print_error("%s: got %d '%s'\n", serve_dtype_name(dt), s, err.msg);
    assert_int_equal(s, TY_EINVAL);
    assert_non_null(strstr(err.msg, msg));
}

static void test_binary_refused(void **state)
{
    uint64_t four[4] = {1, 2, 3, 4};
    /* sizes: truncated, too long, mismatched with the shape */
    binary_refused(SERVE_DT_FP32, four, 4, 1, 4,
                   "the binary data is 15 bytes; shape and datatype FP32 say "
                   "4 x 4 = 16");
    binary_refused(SERVE_DT_FP32, four, 4, 0, 3,
                   "16 bytes; shape and datatype "
                   "FP32 say 3 x 4 = 12");
    binary_refused(SERVE_DT_INT64, four, 2, 0, 3, "say 3 x 8 = 24");
    binary_refused(SERVE_DT_UINT8, four, 4, 4, 1, "0 bytes");
    uint64_t two[1] = {2};
    binary_refused(SERVE_DT_BOOL, two, 1, 0, 1,
                   "the byte 2 is out of range for BOOL");
    uint64_t nan32[1] = {0x7fc00000u}, inf16[1] = {0x7c00},
             inf_bf[1] = {0xff80};
    binary_refused(SERVE_DT_FP32, nan32, 1, 0, 1,
                   "NaN is out of range for FP32");
    binary_refused(SERVE_DT_FP16, inf16, 1, 0, 1,
                   "infinity is out of range for FP16");
    binary_refused(SERVE_DT_BF16, inf_bf, 1, 0, 1,
                   "-infinity is out of range for BF16");
    uint64_t big[1] = {f64_bits(1e300)};
    binary_refused(SERVE_DT_FP64, big, 1, 0, 1,
                   "1.0000000000000001e+300 is out of range for FP64");
    float x[1];
    ty_err err;
    assert_int_equal(serve_tensor_from_binary(SERVE_DT_BYTES, "abcd", 4, 1,
                                              "input", x, &err),
                     TY_EINVAL);
    assert_non_null(strstr(err.msg, "BYTES is not supported"));
}

static void test_split(void **state)
{
    size_t n = 99;
    ty_err err;
    assert_int_equal(serve_tensor_split(10, NULL, &n, &err), TY_OK);
    assert_int_equal(n, 10);
    assert_int_equal(serve_tensor_split(10, "4", &n, &err), TY_OK);
    assert_int_equal(n, 4);
    assert_int_equal(serve_tensor_split(10, " 10 ", &n, &err), TY_OK);
    assert_int_equal(n, 10);
    assert_int_equal(serve_tensor_split(10, "0", &n, &err), TY_OK);
    assert_int_equal(n, 0);
    const char *bad[] = {"11", "-1",  "",
                         "4x", "0x4", "99999999999999999999999"};
    for (size_t i = 0; i < TY_ARRAY_LEN(bad); i++) {
        assert_int_equal(serve_tensor_split(10, bad[i], &n, &err), TY_EINVAL);
        assert_non_null(strstr(err.msg, "Inference-Header-Content-Length"));
    }
}

static void test_classification(void **state)
{
    float row[5] = {0.1f, 0.7f, 0.7f, -1.0f, 0.2f};
    uint32_t idx[5], scratch[5];
    serve_tensor_top(row, 5, idx, scratch);
    /* largest first, the lower index first on a tie */
    uint32_t want[5] = {1, 2, 4, 0, 3};
    for (int i = 0; i < 5; i++)
        assert_int_equal(idx[i], want[i]);
    float with_nan[3] = {NAN, 0.5f, -0.5f};
    serve_tensor_top(with_nan, 3, idx, scratch);
    assert_int_equal(idx[0], 1);
    assert_int_equal(idx[1], 2);
    assert_int_equal(idx[2], 0); /* NaN last */
    /* Many classes: the order of a full sort, ties by index. */
    enum { K = 1000 };
    static float many[K];
    static uint32_t big[K], big_scratch[K];
    for (int j = 0; j < K; j++)
        many[j] = (float)((j * 37) % 101);
    serve_tensor_top(many, K, big, big_scratch);
    for (int j = 1; j < K; j++) {
        float a = many[big[j - 1]], b = many[big[j]];
        assert_true(a > b || (a == b && big[j - 1] < big[j]));
    }
    serve_tensor_top(row, 1, idx, scratch);
    assert_int_equal(idx[0], 0);

    char text[64];
    json_t *labels = json_pack("[s, s, s]", "cat", "dog", "a:b");
    assert_int_equal(
        serve_tensor_class_text(0.7f, 1, labels, text, sizeof text), 9);
    assert_string_equal(text, "0.7:1:dog");
    serve_tensor_class_text(0.1f, 2, labels, text, sizeof text);
    assert_string_equal(text, "0.1:2:a:b");
    /* past the labels, and without any: no label */
    serve_tensor_class_text(-1.0f, 3, labels, text, sizeof text);
    assert_string_equal(text, "-1.0:3");
    serve_tensor_class_text(3.3f, 1, NULL, text, sizeof text);
    assert_string_equal(text, "3.3:1");
    json_decref(labels);
    json_t *ints = json_pack("[i, i]", 7, -2);
    serve_tensor_class_text(1e-7f, 1, ints, text, sizeof text);
    assert_string_equal(text, "1.0e-07:1:-2");
    /* the score reads back as the same float */
    float v = 0.48417965f;
    serve_tensor_class_text(v, 0, ints, text, sizeof text);
    assert_true(strtof(text, NULL) == v);
    assert_string_equal(text, "0.48417965:0:7");
    /* cut to the buffer, NUL-terminated */
    assert_int_equal(serve_tensor_class_text(0.7f, 0, ints, text, 4), 3);
    assert_string_equal(text, "0.7");
    json_decref(ints);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_names),
        cmocka_unit_test(test_json_every_datatype),
        cmocka_unit_test(test_json_ranges),
        cmocka_unit_test(test_binary_every_datatype),
        cmocka_unit_test(test_binary_refused),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_classification),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
