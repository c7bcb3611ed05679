/* test_stop.c - stop strings across token boundaries (serve/stop.h): a
 * stop string split over three tokens, a false start then a real match,
 * overlapping candidates (the first to complete wins; the longest at the
 * same byte), what is held back and when (nothing when no stop string
 * could start), multi-byte characters cut across tokens, invalid bytes as
 * U+FFFD, the flush at the end, and every cut of a text into tokens giving
 * the same output. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "serve/stop.h"
#include "testutil.h"

static stop_matcher m;

static void init(const char *const *stops, uint32_t n)
{
    size_t lens[STOP_MAX_STRINGS];
    for (uint32_t i = 0; i < n; i++)
        lens[i] = strlen(stops[i]);
    ty_err err = {0};
    assert_int_equal(stop_init(&m, stops, lens, n, &err), TY_OK);
}

/* Feeds one token; checks what came out. */
static void feed(const char *token, const char *want)
{
    char out[STOP_FEED_CAP(64)];
    size_t n = strlen(token);
    assert_true(n <= 64);
    size_t got = stop_feed(&m, token, n, out);
    assert_int_equal(got, strlen(want));
    assert_memory_equal(out, want, got);
}

static void finish(const char *want)
{
    char out[STOP_FINISH_CAP];
    size_t got = stop_finish(&m, out);
    assert_int_equal(got, strlen(want));
    assert_memory_equal(out, want, got);
}

static void test_split_over_three_tokens(void **state)
{
    (void)state;
    const char *stops[] = {"###END"};
    init(stops, 1);
    feed("Hello ", "Hello ");
    feed("world#", "world");
    feed("##E", "");
    feed("ND and more", "");
    assert_int_equal(stop_matched(&m), 0);
    feed("after", ""); /* nothing after a stop */
    finish("");
}

static void test_false_start_then_match(void **state)
{
    (void)state;
    const char *stops[] = {"</s>"};
    init(stops, 1);
    feed("a</", "a");
    feed("b", "</b"); /* not the stop string after all: released */
    feed("<", "");
    feed("/", "");
    feed("<", "</"); /* "<" restarts the candidate, "</" goes out */
    feed("/s", "");
    feed(">tail", "");
    assert_int_equal(stop_matched(&m), 0);
    /* A self-overlapping stop string: "aab" inside "aaab". */
    const char *s2[] = {"aab"};
    init(s2, 1);
    feed("xa", "x");
    feed("a", "");
    feed("a", "a"); /* "aaa": the last two may still start "aab" */
    feed("by", "");
    assert_int_equal(stop_matched(&m), 0);
}

static void test_overlapping_candidates(void **state)
{
    (void)state;
    /* "b" completes before "abc" can: the output ends before "b". */
    const char *s1[] = {"abc", "b"};
    init(s1, 2);
    feed("xa", "x");
    feed("bc", "a");
    assert_int_equal(stop_matched(&m), 1);
    /* Two completing at the same byte: the longer, which starts first. */
    const char *s2[] = {"c", "abc", "zz"};
    init(s2, 3);
    feed("xab", "x");
    feed("cd", "");
    assert_int_equal(stop_matched(&m), 1);
    /* The hold covers the longest live candidate of several. */
    const char *s3[] = {"hello world", "lo!"};
    init(s3, 2);
    feed("say hello wor", "say ");
    feed("m", "hello worm");
    finish("");
    assert_int_equal(stop_matched(&m), -1);
    init(s3, 2);
    feed("hello", "");
    feed("!", "hel");
    assert_int_equal(stop_matched(&m), 1);
}

static void test_nothing_held_without_candidate(void **state)
{
    (void)state;
    const char *stops[] = {"xyz", "\n\n"};
    init(stops, 2);
    feed("abc", "abc");
    feed("def ghi", "def ghi");
    feed("line\n", "line");
    feed("next", "\nnext");
    feed("x", "");
    feed("x", "x");
    feed("y", "");
    finish("xy");
    assert_int_equal(stop_matched(&m), -1);
    /* No stop strings at all: everything goes out at once. */
    init(NULL, 0);
    feed("free text, ###", "free text, ###");
    finish("");
}

static void test_utf8_cut_across_tokens(void **state)
{
    (void)state;
    init(NULL, 0);
    /* "é" (C3 A9), "€" (E2 82 AC), "😀" (F0 9F 98 80) cut in every way. */
    feed("caf\xC3", "caf");
    feed("\xA9 ", "\xC3\xA9 ");
    feed("\xE2", "");
    feed("\x82", "");
    feed("\xAC!", "\xE2\x82\xAC!");
    feed("\xF0\x9F", "");
    feed("\x98", "");
    feed("\x80", "\xF0\x9F\x98\x80");
    /* A dangling partial at the end: U+FFFD. */
    feed("ok\xE2\x82", "ok");
    finish("\xEF\xBF\xBD");
    feed("more", ""); /* finished */
    /* A stop string of multi-byte characters, cut mid-character. */
    const char *stops[] = {"\xE2\x82\xAC\xE2\x82\xAC"}; /* "€€" */
    init(stops, 1);
    feed("1\xE2\x82", "1");
    feed("\xAC\xE2", "");
    feed("\x82", "");
    feed("\xAC", "");
    assert_int_equal(stop_matched(&m), 0);
    init(stops, 1);
    feed("\xE2\x82\xAC\xC3", "");
    feed("\xA9", "\xE2\x82\xAC\xC3\xA9"); /* "€é": not the stop string */
}

static void test_invalid_bytes_replaced(void **state)
{
    (void)state;
    init(NULL, 0);
    /* A lone continuation, an impossible byte, an overlong lead, a
     * surrogate's lead pair, a lead cut short by ASCII. */
    feed("a\x80"
         "b\xFF"
         "c\xC0\xAF"
         "d",
         "a\xEF\xBF\xBD"
         "b\xEF\xBF\xBD"
         "c\xEF\xBF\xBD\xEF\xBF\xBD"
         "d");
    feed("\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    feed("\xE2\x82"
         "x",
         "\xEF\xBF\xBDx");
    finish("");
    /* A replacement character can complete a stop string. */
    const char *stops[] = {"a\xEF\xBF\xBD"};
    init(stops, 1);
    feed("xa", "x");
    feed("\xF0\x9F", "");
    finish("");
    assert_int_equal(stop_matched(&m), 0);
}

static void test_init_refusals(void **state)
{
    (void)state;
    ty_err err = {0};
    const char *five[] = {"a", "b", "c", "d", "e"};
    size_t lens[5] = {1, 1, 1, 1, 1};
    assert_int_equal(stop_init(&m, five, lens, 5, &err), TY_EINVAL);
    assert_string_equal(err.field, "stop");
    const char *empty[] = {"a", ""};
    size_t el[] = {1, 0};
    assert_int_equal(stop_init(&m, empty, el, 2, &err), TY_EINVAL);
    assert_non_null(strstr(err.msg, "stop string 1"));
    char big[STOP_MAX_BYTES + 1];
    memset(big, 'q', sizeof big);
    const char *bs[] = {big};
    size_t bl[] = {STOP_MAX_BYTES + 1};
    assert_int_equal(stop_init(&m, bs, bl, 1, &err), TY_EINVAL);
    bl[0] = STOP_MAX_BYTES;
    assert_int_equal(stop_init(&m, bs, bl, 1, &err), TY_OK);
    const char *bad[] = {"ok", "\xC3("};
    size_t badl[] = {2, 2};
    assert_int_equal(stop_init(&m, bad, badl, 2, &err), TY_EINVAL);
    assert_non_null(strstr(err.msg, "UTF-8"));
}

/* The longest stop string held almost whole, then completed or not. */
static void test_longest_stop(void **state)
{
    (void)state;
    char s[STOP_MAX_BYTES + 1];
    memset(s, 'z', STOP_MAX_BYTES);
    s[STOP_MAX_BYTES] = 0;
    const char *stops[] = {s};
    init(stops, 1);
    char out[STOP_FEED_CAP(STOP_MAX_BYTES)];
    assert_int_equal(stop_feed(&m, s, STOP_MAX_BYTES - 1, out), 0);
    assert_int_equal(m.n_hold, STOP_HOLD_MAX);
    assert_int_equal(stop_feed(&m, "y", 1, out), STOP_MAX_BYTES);
    init(stops, 1);
    feed("a", "a");
    assert_int_equal(stop_feed(&m, s, STOP_MAX_BYTES - 1, out), 0);
    feed("z", "");
    assert_int_equal(stop_matched(&m), 0);
}

/* Text, stop strings, cut at random points: always the same output, equal
 * to the prefix before the first stop string's end, found naively. */
static void test_any_cut_same_output(void **state)
{
    (void)state;
    const char *text = "the end\xE2\x82\xAC is near; END\xC3\xA9 ENDE\xF0\x9F";
    const char *stops[] = {"END\xC3\xA9", "d\xE2\x82\xAC i", "near;;"};
    size_t n = strlen(text);
    ty_rng r;
    ty_rng_seed(&r, 77, 0);
    for (uint32_t ns = 0; ns <= 3; ns++) {
        const char *want_by_ns[] = {
            "the end\xE2\x82\xAC is near; END\xC3\xA9 ENDE\xEF\xBF\xBD",
            "the end\xE2\x82\xAC is near; ", "the en", "the en"};
        const char *want = want_by_ns[ns];
        for (int trial = 0; trial < 200; trial++) {
            init(stops, ns);
            char got[512], out[STOP_FEED_CAP(64)];
            size_t g = 0;
            for (size_t i = 0; i < n;) {
                size_t c = 1 + ty_rng_below(&r, 6);
                if (c > n - i)
                    c = n - i;
                size_t k = stop_feed(&m, text + i, c, out);
                memcpy(got + g, out, k);
                g += k;
                i += c;
            }
            g += stop_finish(&m, got + g);
            assert_int_equal(g, strlen(want));
            assert_memory_equal(got, want, g);
            assert_true(stop_utf8_valid(got, g));
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_over_three_tokens),
        cmocka_unit_test(test_false_start_then_match),
        cmocka_unit_test(test_overlapping_candidates),
        cmocka_unit_test(test_nothing_held_without_candidate),
        cmocka_unit_test(test_utf8_cut_across_tokens),
        cmocka_unit_test(test_invalid_bytes_replaced),
        cmocka_unit_test(test_init_refusals),
        cmocka_unit_test(test_longest_stop),
        cmocka_unit_test(test_any_cut_same_output),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
