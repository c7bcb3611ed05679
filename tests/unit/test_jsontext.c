/* Unit tests for the JSON text the server writes (common/jsonutil.c,
 * tyjson_dumps): reals as the shortest decimal that reads back as the same
 * double, and everything else byte for byte what jansson's json_dumps
 * writes (issue 30, finding 7). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonutil.h"
#include "common/numtext.h"

/* v in a one-element array, through tyjson_dumps, without the brackets. */
static char *real_text(double v)
{
    json_t *a = json_pack("[f]", v);
    assert_non_null(a);
    char *t = tyjson_dumps(a, JSON_COMPACT);
    json_decref(a);
    assert_non_null(t);
    size_t n = strlen(t);
    assert_true(n > 2 && t[0] == '[' && t[n - 1] == ']');
    memmove(t, t + 1, n - 2);
    t[n - 2] = '\0';
    return t;
}

static void expect_real(double v, const char *want)
{
    char *got = real_text(v);
    if (strcmp(got, want))
        fail_msg("%a written as %s, want %s", v, got, want);
    free(got);
}

/* The examples of the issue and the edges of the double range. */
static void test_reals_are_shortest(void **state)
{
    (void)state;
    expect_real(0.1, "0.1");
    expect_real(0.9, "0.9");
    expect_real(0.2, "0.2");
    expect_real(0.003, "0.003");
    expect_real(0.1 + 0.2, "0.30000000000000004");
    expect_real(1.0 / 3.0, "0.3333333333333333");
    expect_real((double)0.1f, "0.10000000149011612");
    expect_real(1.0, "1.0");
    expect_real(40.0, "40.0");
    expect_real(-2.5, "-2.5");
    expect_real(123456.789, "123456.789");
    expect_real(0.0, "0.0");
    expect_real(-0.0, "-0.0");
    expect_real(1e-5, "0.00001");
    expect_real(1e-7, "1.0e-07");
    expect_real(1.5e-7, "1.5e-07");
    expect_real(1e16, "10000000000000000.0");
    expect_real(1e17, "1.0e+17");
    expect_real(1e22, "1.0e+22");
    expect_real(1e23, "1.0e+23");
    expect_real(1e300, "1.0e+300");
    expect_real(-1e300, "-1.0e+300");
    expect_real(5e-324, "5.0e-324"); /* the least subnormal */
    expect_real(2.2250738585072014e-308, "2.2250738585072014e-308");
    expect_real(DBL_MAX, "1.7976931348623157e+308");
    expect_real(9007199254740993.0, "9007199254740992.0"); /* 2^53 + 1 */
}

/* Number of significant digits in a decimal's text. */
static int significant(const char *t)
{
    char d[40];
    int n = 0;
    for (const char *q = t; *q && *q != 'e' && n < 39; q++)
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

/* Random bit patterns (every exponent): each finite double reads back
 * exactly, and no decimal with fewer significant digits reads back too. */
static void test_reals_round_trip(void **state)
{
    (void)state;
    uint64_t x = 88172645463325252ull;
    int checked = 0;
    for (long i = 0; i < 20000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        double v;
        memcpy(&v, &x, sizeof v);
        if (!isfinite(v))
            continue;
        char *t = real_text(v);
        if (strtod(t, NULL) != v && !(v == 0 && strtod(t, NULL) == 0))
            fail_msg("%a written as %s, which reads back as %a", v, t,
                     strtod(t, NULL));
        if (!strpbrk(t, ".e"))
            fail_msg("%a written as %s: a reader would take an integer", v, t);
        int sig = significant(t);
        for (int p = 1; p < sig; p++) {
            char u[40];
            snprintf(u, sizeof u, "%.*e", p - 1, v);
            if (strtod(u, NULL) == v)
                fail_msg("%a written as %s; %s is shorter", v, t, u);
        }
        free(t);
        checked++;
    }
    assert_true(checked > 19000);
}

/* Reals a person types, where a job document has them: each as short as
 * it was typed, and read back by jansson as the same real. */
static void test_reals_in_documents(void **state)
{
    (void)state;
    json_t *j = json_pack("{s:{s:f}, s:{s:s, s:f, s:f, s:f}, s:[f,f,i,f]}",
                          "validation", "split", 0.1, "hyperparameters",
                          "optimizer", "adam", "beta1", 0.9, "beta2", 0.999,
                          "epsilon", 1e-8, "curve", 0.25, 1.5, 3, 2.0);
    char *t = tyjson_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    assert_non_null(t);
    assert_string_equal(t,
                        "{\"validation\":{\"split\":0.1},\"hyperparameters\":"
                        "{\"optimizer\":\"adam\",\"beta1\":0.9,\"beta2\":0.999,"
                        "\"epsilon\":1.0e-08},\"curve\":[0.25,1.5,3,2.0]}");
    /* jansson reads every real back as the same double, still a real. */
    json_t *back = json_loads(t, 0, NULL);
    assert_non_null(back);
    assert_true(json_equal(back, j));
    assert_true(
        json_is_real(json_array_get(json_object_get(back, "curve"), 3)));
    json_decref(back);
    free(t);
    /* Text that looks like a number, in keys and strings, is left alone. */
    json_t *s = json_pack("{s:s, s:f, s:s}", "0.10000000000000001",
                          "0.10000000000000001", "x", 0.1, "e", "-1.5e300");
    t = tyjson_dumps(s, JSON_COMPACT | JSON_PRESERVE_ORDER);
    assert_string_equal(t, "{\"0.10000000000000001\":\"0.10000000000000001\","
                           "\"x\":0.1,\"e\":\"-1.5e300\"}");
    free(t);
    json_decref(s);
    json_decref(j);
}

/* JSON has no NaN or infinity, and jansson will not hold them: a real
 * that is not finite cannot get into a tree the server writes. */
static void test_no_nan_or_infinity(void **state)
{
    (void)state;
    assert_null(json_real(NAN));
    assert_null(json_real(INFINITY));
    assert_null(json_real(-INFINITY));
    json_t *r = json_real(1.0);
    assert_int_equal(json_real_set(r, NAN), -1);
    assert_int_equal(json_real_set(r, INFINITY), -1);
    assert_true(json_real_value(r) == 1.0);
    json_decref(r);
    /* json_pack refuses the document rather than write a bad one. */
    assert_null(json_pack("{s:f}", "loss", NAN));
    /* Were one to reach the writer, it would be null, never NaN. */
    char t[NUMTEXT_MAX];
    assert_int_equal(numtext_double(NAN, t), 4);
    assert_string_equal(t, "null");
    numtext_double(-INFINITY, t);
    assert_string_equal(t, "null");
}

/* A reply's text: the same, then a newline; and with JSON_REAL_PRECISION
 * the caller's precision is kept. */
static void test_line_and_precision(void **state)
{
    (void)state;
    json_t *j = json_pack("{s:f, s:[]}", "split", 0.1, "a");
    size_t len = 0;
    char *t = tyjson_dumps_line(j, JSON_COMPACT | JSON_PRESERVE_ORDER, &len);
    assert_non_null(t);
    assert_string_equal(t, "{\"split\":0.1,\"a\":[]}\n");
    assert_int_equal(len, strlen(t));
    /* jansson reads it, newline and all (as the CLI does). */
    json_t *back = json_loadb(t, len, 0, NULL);
    assert_non_null(back);
    assert_true(json_equal(back, j));
    json_decref(back);
    free(t);
    t = tyjson_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(3));
    char *want = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(3));
    assert_string_equal(t, want);
    free(want);
    free(t);
    t = tyjson_dumps_line(j, JSON_COMPACT | JSON_REAL_PRECISION(3), &len);
    assert_int_equal(len, strlen(t));
    assert_true(t[len - 1] == '\n');
    free(t);
    json_decref(j);
    /* Indented text keeps its layout; only the reals change. */
    j = json_pack("{s:[f,i]}", "x", 0.9, 7);
    t = tyjson_dumps(j, JSON_INDENT(2));
    assert_string_equal(t, "{\n  \"x\": [\n    0.9,\n    7\n  ]\n}");
    free(t);
    json_decref(j);
}

/* Without reals, tyjson_dumps is json_dumps byte for byte, with every set
 * of flags the server uses and a few it does not. */
static void test_same_as_jansson_without_reals(void **state)
{
    (void)state;
    json_error_t je;
    json_t *j = json_loads(
        "{\"z\": 1, \"a\": [], \"m\": {}, \"esc\": \"q\\\" b\\\\ s/ "
        "\\b\\f\\n\\r\\t \\u0001\\u001f\\u007f\","
        " \"uni\": \"h\\u00e9llo \\u2713 \\ud83d\\ude00 \\u4e2d\","
        " \"nested\": [[[], [1, [2, [3, {}]]]], {\"k\": [true, false, "
        "null]}],"
        " \"ints\": [0, -1, 9223372036854775807, -9223372036854775808, 42],"
        " \"looks\": \"0.10000000000000001 1e300 -0.0\","
        " \"\\u00e9\\n key\": \"\", \"1.5\": -7}",
        0, &je);
    if (!j)
        fail_msg("test document: %s", je.text);
    const size_t flag_sets[] = {
        JSON_COMPACT | JSON_PRESERVE_ORDER,
        JSON_COMPACT,
        0,
        JSON_INDENT(2),
        JSON_INDENT(2) | JSON_PRESERVE_ORDER,
        JSON_COMPACT | JSON_ENSURE_ASCII,
        JSON_COMPACT | JSON_SORT_KEYS,
        JSON_COMPACT | JSON_ESCAPE_SLASH,
    };
    for (size_t i = 0; i < sizeof flag_sets / sizeof flag_sets[0]; i++) {
        char *a = tyjson_dumps(j, flag_sets[i]);
        char *b = json_dumps(j, flag_sets[i]);
        assert_non_null(a);
        assert_non_null(b);
        if (strcmp(a, b))
            fail_msg("flags %#zx:\n%s\n%s", flag_sets[i], a, b);
        free(a);
        free(b);
    }
    /* Empty containers and bare values (JSON_ENCODE_ANY). */
    json_t *bare[] = {json_object(),    json_array(), json_string("1.5e3"),
                      json_integer(-3), json_true(),  json_null()};
    for (size_t i = 0; i < sizeof bare / sizeof bare[0]; i++) {
        char *a = tyjson_dumps(bare[i], JSON_COMPACT | JSON_ENCODE_ANY);
        char *b = json_dumps(bare[i], JSON_COMPACT | JSON_ENCODE_ANY);
        assert_non_null(a);
        assert_string_equal(a, b);
        free(a);
        free(b);
        json_decref(bare[i]);
    }
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reals_are_shortest),
        cmocka_unit_test(test_reals_round_trip),
        cmocka_unit_test(test_reals_in_documents),
        cmocka_unit_test(test_no_nan_or_infinity),
        cmocka_unit_test(test_same_as_jansson_without_reals),
        cmocka_unit_test(test_line_and_precision),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
