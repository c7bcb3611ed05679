/*
 * test_dataset_tokens.c - the language-modeling converters (tokens.c): the
 * streaming UTF-8 check and its offsets whatever the cut, text to byte
 * tokens, llm.c .bin headers (magic, version, count against the size),
 * integer NPY token arrays of each dtype, the vocabulary bound naming the
 * position, and that a failed conversion leaves no output; and that
 * ty_dataset_open and ty_tokens_open each refuse the other's files.
 */
#include "ds_testutil.h"

#include "models/data/tokens.h"

#define IN_PATH dt_path(0, "in")
#define OUT_PATH dt_path(1, "out.tyds")

/* ---- UTF-8 ---------------------------------------------------------------- */

/* The verdict on s (n bytes) fed whole and fed one byte at a time: -1 when
 * valid, else the offset reported (the same both ways, asserted). */
static long long utf8_verdict(const char *s, size_t n)
{
    long long whole = -1, bytewise = -1;
    ds_utf8_check c;
    uint64_t bad = 0;
    ds_utf8_check_init(&c);
    if (!ds_utf8_check_feed(&c, (const unsigned char *)s, n, &bad) ||
        !ds_utf8_check_end(&c, &bad))
        whole = (long long)bad;
    ds_utf8_check_init(&c);
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++)
        ok = ds_utf8_check_feed(&c, (const unsigned char *)s + i, 1, &bad);
    if (!ok || !ds_utf8_check_end(&c, &bad))
        bytewise = (long long)bad;
    assert_int_equal(whole, bytewise);
    return whole;
}

static void test_utf8_offsets(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        size_t n;
        long long bad;
    } cases[] = {
        {"plain ascii", 11, -1},
        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14, -1},
        {"", 0, -1},
        {"ab\x80", 3, 2},              /* a lone continuation byte */
        {"ab\xc3", 3, 2},              /* cut by the end */
        {"x\xe2\x82", 3, 1},           /* cut 3-byte sequence */
        {"xy\xc3(", 4, 2},             /* a bad continuation */
        {"\xc0\xaf", 2, 0},            /* overlong '/' */
        {"ok\xe0\x80\xaf", 5, 2},      /* overlong 3-byte */
        {"\xed\xa0\x80", 3, 0},        /* a surrogate */
        {"abc\xf4\x90\x80\x80", 7, 3}, /* past U+10FFFF */
        {"\xf5\x80\x80\x80", 4, 0},    /* no such lead byte */
        {"\xef\xbb\xbfhi\xff", 6, 5},  /* a BOM is fine, 0xFF is not */
        {"a\0b", 3, -1},               /* NUL is UTF-8 */
    };
    for (size_t i = 0; i < TY_ARRAY_LEN(cases); i++) {
        long long got = utf8_verdict(cases[i].s, cases[i].n);
        if (got != cases[i].bad)
            fail_msg("case %zu: offset %lld, want %lld", i, got, cases[i].bad);
    }
}

/* ---- text ----------------------------------------------------------------- */

static void expect_no_output(void)
{
    assert_int_equal(access(OUT_PATH, F_OK), -1);
}

static void test_text_to_byte_tokens(void **state)
{
    (void)state;
    const char *text = "h\xc3\xa9llo\r\nworld";
    dt_write_str(IN_PATH, text);
    ty_err err = {0};
    assert_int_equal(ds_convert_text(IN_PATH, 0, OUT_PATH, &err), TY_OK);
    ty_tokens t;
    if (ty_tokens_open(OUT_PATH, &t, &err) != TY_OK)
        fail_msg("open: %s", err.msg);
    assert_int_equal(t.num_tokens, strlen(text));
    assert_int_equal(t.vocab_size, 256);
    assert_int_equal(t.token_size, 2);
    assert_true(t.byte_tokenizer);
    for (size_t i = 0; i < strlen(text); i++)
        assert_int_equal(ty_tokens_at(&t, i), (unsigned char)text[i]);
    assert_string_equal(json_string_value(json_object_get(t.meta, "task")),
                        "language_modeling");
    ty_tokens_close(&t);

    /* not a dataset of examples */
    ty_dataset ds;
    assert_int_equal(ty_dataset_open(OUT_PATH, &ds, &err), TY_EFORMAT);
    dt_assert_contains(err.msg, "language-modeling");
}

/* A text longer than one read (64 KiB) with a bad byte past the first
 * chunk: the offset counts from the start of the file. */
static void test_text_rejects_with_offsets(void **state)
{
    (void)state;
    size_t n = 70000;
    char *big = malloc(n);
    assert_non_null(big);
    memset(big, 'a', n);
    big[65535] = '\xc3'; /* a sequence across the chunk boundary: fine */
    big[65536] = '\xa9';
    big[68001] = '\xfe';
    dt_write(IN_PATH, big, n);
    free(big);
    ty_err err = {0};
    assert_int_equal(ds_convert_text(IN_PATH, 0, OUT_PATH, &err), TY_EFORMAT);
    dt_assert_contains(err.msg, "byte offset 68001");
    assert_string_equal(err.field, "file");
    expect_no_output();

    dt_write(IN_PATH, "abc\xe2\x82", 5);
    assert_int_equal(ds_convert_text(IN_PATH, 0, OUT_PATH, &err), TY_EFORMAT);
    dt_assert_contains(err.msg, "ends inside the character that starts at "
                                "byte offset 3");
    expect_no_output();

    dt_write(IN_PATH, "", 0);
    assert_int_equal(ds_convert_text(IN_PATH, 0, OUT_PATH, &err), TY_EFORMAT);
    dt_assert_contains(err.msg, "empty");
    expect_no_output();
}

/* ---- .bin ----------------------------------------------------------------- */

/* An llm.c .bin of n uint16 ids (ids[i]) with the header's fields given. */
static void write_bin(const char *path, int32_t magic, int32_t version,
                      int32_t count, const uint16_t *ids, size_t n)
{
    size_t len = DS_BIN_HEADER_BYTES + 2 * n;
    unsigned char *buf = calloc(1, len);
    assert_non_null(buf);
    int32_t h[3] = {magic, version, count};
    memcpy(buf, h, sizeof h);
    if (n)
        memcpy(buf + DS_BIN_HEADER_BYTES, ids, 2 * n);
    dt_write(path, buf, len);
    free(buf);
}

static void test_bin_header_checks(void **state)
{
    (void)state;
    unsigned char h[DS_BIN_HEADER_BYTES] = {0};
    int32_t f[3] = {DS_BIN_MAGIC, 1, 5};
    memcpy(h, f, sizeof f);
    uint64_t count = 0;
    ty_err err = {0};
    assert_int_equal(ds_bin_header_check(h, sizeof h, 1024 + 10, &count, &err),
                     TY_OK);
    assert_int_equal(count, 5);
    static const struct {
        int32_t magic, version, count;
        size_t got;
        uint64_t size;
        const char *needle;
    } bad[] = {
        {DS_BIN_MAGIC, 1, 5, 1000, 1000, "truncated in its header"},
        {20240521, 1, 5, 1024, 1034, "magic 20240521 at byte offset 0"},
        {DS_BIN_MAGIC, 2, 5, 1024, 1034, "version 2 at byte offset 4"},
        {DS_BIN_MAGIC, 1, 0, 1024, 1024, "declares 0 tokens at byte offset 8"},
        {DS_BIN_MAGIC, 1, -3, 1024, 1024, "declares -3 tokens"},
        {DS_BIN_MAGIC, 1, 6, 1024, 1034,
         "declares 6 tokens at byte offset 8 (12 bytes of uint16 from byte "
         "offset 1024) but 10 bytes follow the header: the file is truncated"},
        {DS_BIN_MAGIC, 1, 4, 1024, 1034, "but 10 bytes follow the header"},
        {DS_BIN_MAGIC, 1, 5, 1024, 1035, "but 11 bytes"},
    };
    for (size_t i = 0; i < TY_ARRAY_LEN(bad); i++) {
        int32_t g[3] = {bad[i].magic, bad[i].version, bad[i].count};
        memcpy(h, g, sizeof g);
        ty_err_clear(&err);
        assert_int_equal(
            ds_bin_header_check(h, bad[i].got, bad[i].size, &count, &err),
            TY_EFORMAT);
        dt_assert_contains(err.msg, bad[i].needle);
        assert_string_equal(err.field, "file");
    }
}

static void test_bin_tokens(void **state)
{
    (void)state;
    const uint16_t ids[] = {0, 5, 50256, 7, 1};
    write_bin(IN_PATH, DS_BIN_MAGIC, 1, 5, ids, 5);
    ty_err err = {0};
    assert_int_equal(ds_convert_tokens(IN_PATH, 50257, 0, OUT_PATH, &err),
                     TY_OK);
    ty_tokens t;
    assert_int_equal(ty_tokens_open(OUT_PATH, &t, &err), TY_OK);
    assert_int_equal(t.num_tokens, 5);
    assert_int_equal(t.vocab_size, 50257);
    assert_false(t.byte_tokenizer);
    for (int i = 0; i < 5; i++)
        assert_int_equal(ty_tokens_at(&t, (uint64_t)i), ids[i]);
    ty_tokens_close(&t);
    unlink(OUT_PATH);

    /* an id at vocab_size is out: its position and byte offset named */
    assert_int_equal(ds_convert_tokens(IN_PATH, 50256, 0, OUT_PATH, &err),
                     TY_EFORMAT);
    dt_assert_contains(err.msg, "token 2 (at byte offset 1028) is 50256, "
                                "outside 0..50255");
    expect_no_output();

    /* a count the size disagrees with, a bad magic, no vocab_size */
    write_bin(IN_PATH, DS_BIN_MAGIC, 1, 9, ids, 5);
    assert_int_equal(ds_convert_tokens(IN_PATH, 60000, 0, OUT_PATH, &err),
                     TY_EFORMAT);
    dt_assert_contains(err.msg, "declares 9 tokens");
    expect_no_output();
    write_bin(IN_PATH, 12345, 1, 5, ids, 5);
    assert_int_equal(ds_convert_tokens(IN_PATH, 60000, 0, OUT_PATH, &err),
                     TY_EFORMAT);
    dt_assert_contains(err.msg, "magic 20240520 at byte offset 0");
    expect_no_output();
    assert_int_equal(ds_convert_tokens(IN_PATH, 0, 0, OUT_PATH, &err),
                     TY_EINVAL);
    assert_string_equal(err.field, "vocab_size");
    expect_no_output();
}

/* ---- NPY ------------------------------------------------------------------ */

/* A version 1.0 NPY of descr and shape text holding len bytes of data. */
static void write_npy(const char *path, const char *descr, const char *shape,
                      const void *data, size_t len)
{
    char dict[160];
    int dl = snprintf(dict, sizeof dict,
                      "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                      descr, shape);
    size_t hlen = (size_t)dl + 1;
    hlen += (64 - (10 + hlen) % 64) % 64;
    unsigned char *buf = calloc(1, 10 + hlen + len);
    assert_non_null(buf);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (unsigned char)(hlen & 0xff);
    buf[9] = (unsigned char)(hlen >> 8);
    memcpy(buf + 10, dict, (size_t)dl);
    memset(buf + 10 + dl, ' ', hlen - (size_t)dl - 1);
    buf[10 + hlen - 1] = '\n';
    if (len)
        memcpy(buf + 10 + hlen, data, len);
    dt_write(path, buf, 10 + hlen + len);
    free(buf);
}

static void expect_tokens(uint32_t vocab, const int64_t *want, size_t n)
{
    ty_err err = {0};
    ty_status st = ds_convert_tokens(IN_PATH, vocab, 0, OUT_PATH, &err);
    if (st != TY_OK)
        fail_msg("convert: %s", err.msg);
    ty_tokens t;
    assert_int_equal(ty_tokens_open(OUT_PATH, &t, &err), TY_OK);
    assert_int_equal(t.num_tokens, n);
    assert_int_equal(t.token_size, vocab <= 65536 ? 2 : 4);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ty_tokens_at(&t, i), want[i]);
    ty_tokens_close(&t);
    unlink(OUT_PATH);
}

static void test_npy_int_dtypes(void **state)
{
    (void)state;
    const int64_t want[] = {3, 0, 65535, 2};
    const uint16_t u2[] = {3, 0, 65535, 2};
    const int32_t i4[] = {3, 0, 65535, 2};
    write_npy(IN_PATH, "<u2", "(4,)", u2, sizeof u2);
    expect_tokens(65536, want, 4);
    write_npy(IN_PATH, "<i4", "(4,)", i4, sizeof i4);
    expect_tokens(65536, want, 4);
    write_npy(IN_PATH, "<i8", "(4,)", want, sizeof want);
    expect_tokens(65536, want, 4);
    /* a vocabulary past uint16: stored as uint32 */
    const int64_t wide[] = {100000, 1};
    write_npy(IN_PATH, "<i8", "(2,)", wide, sizeof wide);
    expect_tokens(200000, wide, 2);
}

static void test_npy_rejects(void **state)
{
    (void)state;
    static const int64_t neg[] = {1, 2, -1};
    static const int32_t big[] = {1, 9, 10};
    static const float f4[] = {1, 2};
    static const int32_t two_d[] = {1, 2, 3, 4};
    static const struct {
        const char *descr, *shape;
        const void *data;
        size_t len;
        uint32_t vocab;
        const char *needle;
    } bad[] = {
        {"<i8", "(3,)", neg, sizeof neg, 10,
         "token 2 (at byte offset 144) is -1, outside 0..9"},
        {"<i4", "(3,)", big, sizeof big, 10, "token 2 (at byte offset 136)"},
        {"<f4", "(2,)", f4, sizeof f4, 10, "integer ids"},
        {"<i4", "(2, 2)", two_d, sizeof two_d, 10, "2 dimensions"},
        {"<i4", "(0,)", NULL, 0, 10, "no values"},
        {"<i4", "(5,)", two_d, sizeof two_d, 10, "truncated"},
        {">i4", "(1,)", two_d, 4, 10, "big-endian"},
    };
    for (size_t i = 0; i < TY_ARRAY_LEN(bad); i++) {
        write_npy(IN_PATH, bad[i].descr, bad[i].shape, bad[i].data, bad[i].len);
        ty_err err = {0};
        assert_int_equal(
            ds_convert_tokens(IN_PATH, bad[i].vocab, 0, OUT_PATH, &err),
            TY_EFORMAT);
        dt_assert_contains(err.msg, bad[i].needle);
        assert_string_equal(err.field, "file");
        expect_no_output();
    }
    /* neither NPY nor .bin */
    dt_write_str(IN_PATH, "hello, world");
    ty_err err = {0};
    assert_int_equal(ds_convert_tokens(IN_PATH, 10, 0, OUT_PATH, &err),
                     TY_EFORMAT);
    dt_assert_contains(err.msg, "neither an NPY array");
    expect_no_output();
}

/* A TYDS file of examples is not a token dataset. */
static void test_tokens_open_refuses_examples(void **state)
{
    (void)state;
    dt_write_str(IN_PATH, "a,y\n1,0\n2,1\n");
    ty_err err = {0};
    assert_int_equal(
        ds_convert_csv(IN_PATH, "y", TY_TASK_CLASSIFICATION, OUT_PATH, &err),
        TY_OK);
    ty_tokens t;
    assert_int_equal(ty_tokens_open(OUT_PATH, &t, &err), TY_EFORMAT);
    dt_assert_contains(err.msg, "not a language-modeling dataset");
    unlink(OUT_PATH);
    assert_int_equal(ty_task_parse("language_modeling"),
                     TY_TASK_LANGUAGE_MODELING);
    assert_string_equal(ty_task_name(TY_TASK_LANGUAGE_MODELING),
                        "language_modeling");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_offsets),
        cmocka_unit_test(test_text_to_byte_tokens),
        cmocka_unit_test(test_text_rejects_with_offsets),
        cmocka_unit_test(test_bin_header_checks),
        cmocka_unit_test(test_bin_tokens),
        cmocka_unit_test(test_npy_int_dtypes),
        cmocka_unit_test(test_npy_rejects),
        cmocka_unit_test(test_tokens_open_refuses_examples),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
