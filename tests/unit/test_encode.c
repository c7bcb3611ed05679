/* Unit tests for replies written into a buffer (serve/encode.h): floats as
 * their shortest round-trip decimals, JSON strings and labels, and the
 * buffer's growth. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/encode.h"

static void expect_text(float v, const char *want)
{
    char t[32];
    size_t n = serve_float_text(v, t);
    assert_string_equal(t, want);
    assert_int_equal(n, strlen(want));
}

static void test_known_values(void **state)
{
    (void)state;
    expect_text(0.1f, "0.1");
    expect_text(1.0f, "1.0");
    expect_text(-2.5f, "-2.5");
    expect_text(0.3f, "0.3");
    expect_text(100.0f, "100.0");
    expect_text(65504.0f, "65504.0");
    expect_text(0.000123f, "0.000123");
    expect_text(123456789.0f, "123456790.0");
    expect_text(1e-7f, "1.0e-07");
    expect_text(1e20f, "1.0e+20");
    expect_text(3.4028235e38f, "3.4028235e+38");
    expect_text(1.4e-45f, "1.0e-45"); /* the smallest subnormal */
    expect_text(0.0f, "0.0");
    expect_text(-0.0f, "-0.0");
    expect_text(NAN, "null");
    expect_text(INFINITY, "null");
    expect_text(-INFINITY, "null");
    /* 1.61240715e+38 with 9 digits: rounding those half up to 8 gives
     * 1.6124072e+38, which is another float; the 8-digit answer is the one
     * below. */
    float v;
    uint32_t bits = 0x7ef29baau;
    memcpy(&v, &bits, sizeof v);
    expect_text(v, "1.6124071e+38");
}

/* The number of significant digits of a decimal text. */
static int significant(const char *t)
{
    char d[40];
    int n = 0;
    for (const char *q = t; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9')
            d[n++] = *q;
    d[n] = '\0';
    const char *s = d;
    while (*s == '0' && s[1])
        s++;
    int len = (int)strlen(s);
    while (len > 1 && s[len - 1] == '0')
        len--;
    return len;
}

/* Random bit patterns: every finite float reads back exactly, and no
 * decimal with fewer significant digits reads back too. */
static void test_round_trip_and_shortest(void **state)
{
    (void)state;
    uint32_t x = 12345;
    int checked = 0;
    for (long i = 0; i < 300000; i++) {
        x = x * 1664525u + 1013904223u;
        float v;
        memcpy(&v, &x, sizeof v);
        if (!isfinite(v) || v == 0.0f)
            continue;
        char t[32], u[40];
        serve_float_text(v, t);
        if (strtof(t, NULL) != v)
            fail_msg("%a written as %s, which reads back as %a", (double)v, t,
                     (double)strtof(t, NULL));
        int sig = significant(t);
        for (int p = 1; p < sig; p++) {
            snprintf(u, sizeof u, "%.*e", p - 1, (double)v);
            if (strtof(u, NULL) == v)
                fail_msg("%a written as %s; %s is shorter", (double)v, t, u);
        }
        checked++;
    }
    assert_true(checked > 250000);
}

static void test_buffer(void **state)
{
    (void)state;
    serve_buf b = {0};
    float v[1000];
    for (int i = 0; i < 1000; i++)
        v[i] = (float)i / 4;
    assert_true(serve_buf_str(&b, "["));
    assert_true(serve_buf_floats(&b, v, 1000));
    assert_true(serve_buf_str(&b, "]"));
    assert_true(serve_buf_ok(&b));
    size_t len = 0;
    char *text = serve_buf_take(&b, &len);
    assert_non_null(text);
    assert_int_equal(len, strlen(text));
    json_error_t je;
    json_t *arr = json_loads(text, 0, &je);
    assert_non_null(arr);
    assert_int_equal(json_array_size(arr), 1000);
    for (int i = 0; i < 1000; i++)
        assert_true((float)json_number_value(json_array_get(arr, i)) == v[i]);
    json_decref(arr);
    free(text);
    assert_null(b.p); /* taken: the buffer is empty again */

    /* JSON strings and labels. */
    assert_true(serve_buf_json_string(&b, "a\"b\\c\n\x01"));
    assert_true(serve_buf_str(&b, ","));
    json_t *label = json_integer(-7);
    assert_true(serve_buf_json(&b, label));
    json_decref(label);
    assert_true(serve_buf_str(&b, ","));
    label = json_string("T-shirt/top");
    assert_true(serve_buf_json(&b, label));
    json_decref(label);
    assert_string_equal(b.p,
                        "\"a\\\"b\\\\c\\u000a\\u0001\",-7,\"T-shirt/top\"");
    serve_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_values),
        cmocka_unit_test(test_round_trip_and_shortest),
        cmocka_unit_test(test_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
