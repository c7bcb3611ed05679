/* test_safetensors.c - round trips, and malformed files rejected with
 * TY_EFORMAT without crashing (run it under ASan): bad lengths, huge
 * headers, offsets out of range, overlapping or leaving gaps, size/shape
 * mismatches, unknown dtypes, duplicate keys, non-string metadata, every
 * truncation of a valid file, and random byte corruption. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/rng.h"
#include "models/safetensors.h"
#include "testutil.h"

/* The suite's scratch folder (tu_tmpdir_setup makes it, teardown removes it). */
static const char *const dir = tu_tmpdir;

/* A file image: 8-byte length, header text, then data_len bytes. */
static uint8_t *image(const char *header, size_t data_len, size_t *len)
{
    size_t h = strlen(header);
    *len = 8 + h + data_len;
    uint8_t *b = calloc(1, *len);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    for (size_t i = 0; i < data_len; i++)
        b[8 + h + i] = (uint8_t)i;
    return b;
}

static ty_status parse_header(const char *header, size_t data_len, ty_err *err)
{
    size_t len;
    uint8_t *b = image(header, data_len, &len);
    st_file f;
    ty_status st = st_parse(b, len, &f, err);
    if (st == TY_OK)
        st_close(&f);
    free(b);
    return st;
}

static void test_round_trip(void **state)
{
    char path[128];
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    float w[6] = {1, 2, 3, 4, 5, 6}, b[3] = {-1, 0.5f, 7};
    uint8_t bytes[3] = {9, 8, 7};
    st_out_tensor t[3] = {
        {.name = "0.weight",
         .dtype = ST_F32,
         .ndim = 2,
         .shape = {3, 2},
         .data = w},
        {.name = "0.bias", .dtype = ST_F32, .ndim = 1, .shape = {3}, .data = b},
        {.name = "extra",
         .dtype = ST_U8,
         .ndim = 1,
         .shape = {3},
         .data = bytes},
    };
    json_t *meta =
        json_pack("{s:s, s:s}", "trainyard.format", "1", "note", "hi");
    ty_err err;
    assert_int_equal(st_write(path, meta, t, 3, &err), TY_OK);
    json_decref(meta);
    /* Header padded so data starts 8-aligned. */
    assert_int_equal(
        (fs_file_size(path) - 8 - (int64_t)sizeof w - (int64_t)sizeof b - 3) %
            8,
        0);
    st_file f;
    assert_int_equal(st_open(path, &f, &err), TY_OK);
    assert_int_equal(f.count, 3);
    assert_string_equal(st_meta(&f, "note"), "hi");
    assert_null(st_meta(&f, "missing"));
    const st_tensor *tw = st_find(&f, "0.weight");
    assert_non_null(tw);
    assert_int_equal(tw->dtype, ST_F32);
    assert_int_equal(tw->ndim, 2);
    assert_int_equal(tw->shape[0], 3);
    assert_int_equal(tw->shape[1], 2);
    assert_memory_equal(tw->data, w, sizeof w);
    assert_memory_equal(st_find(&f, "0.bias")->data, b, sizeof b);
    assert_int_equal(st_find(&f, "extra")->dtype, ST_U8);
    assert_memory_equal(st_find(&f, "extra")->data, bytes, 3);
    assert_null(st_find(&f, "nope"));
    st_close(&f);
    /* No temporary files left behind. */
    char cmd[160];
    snprintf(cmd, sizeof cmd, "test $(ls %s | wc -l) -eq 1", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_dtype_names(void **state)
{
    static const char *names[] = {"BOOL", "U8",  "I8",  "F8_E5M2", "F8_E4M3",
                                  "I16",  "U16", "F16", "BF16",    "I32",
                                  "U32",  "F32", "F64", "I64",     "U64"};
    for (int i = 0; i < ST_DTYPE_COUNT; i++) {
        assert_int_equal(st_dtype_parse(names[i]), i);
        assert_string_equal(st_dtype_name((st_dtype)i), names[i]);
    }
    assert_int_equal(st_dtype_parse("F33"), -1);
    assert_int_equal(st_dtype_size(ST_BF16), 2);
    assert_int_equal(st_dtype_size(ST_F64), 8);
    /* Other dtypes parse (a F16 tensor reads fine; callers check dtype). */
    assert_int_equal(
        parse_header(
            "{\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}",
            4, NULL),
        TY_OK);
}

static void test_empty_and_metadata_only(void **state)
{
    assert_int_equal(parse_header("{}", 0, NULL), TY_OK);
    assert_int_equal(
        parse_header("{\"__metadata__\":{\"a\":\"b\"}}  ", 0, NULL), TY_OK);
}

static void expect_format(const char *header, size_t data_len, const char *part)
{
    ty_err err;
    ty_err_clear(&err);
    assert_int_equal(parse_header(header, data_len, &err), TY_EFORMAT);
    if (!strstr(err.msg, part))
        fail_msg("message '%s' lacks '%s'", err.msg, part);
}

static void test_malformed_headers(void **state)
{
    expect_format(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
        "run past the end");
    expect_format(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
        8, "overlap");
    expect_format(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
        "gap");
    expect_format(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8,
        "cover 4");
    expect_format(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
        "different size");
    expect_format(
        "{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
        "unknown dtype");
    expect_format(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
        "invalid shape");
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,"
                  "4294967296],\"data_offsets\":[0,8]}}",
                  8, "invalid shape");
    expect_format(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8,
        "data_offsets");
    expect_format(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8,
        "data_offsets");
    expect_format(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],"
        "\"x\":1}}",
        8, "exactly");
    expect_format(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
        8, "not valid JSON");
    expect_format("{\"__metadata__\":{\"a\":1}}", 0, "must be a string");
    expect_format("{\"__metadata__\":[]}", 0, "must be an object");
    expect_format("[1,2]", 0, "JSON object");
    expect_format("{\"a\":", 0, "not valid JSON");
    expect_format("{\"a\":3}", 0, "must be an object");
}

static void test_bad_lengths(void **state)
{
    ty_err err;
    st_file f;
    uint8_t small[5] = {0};
    assert_int_equal(st_parse(small, sizeof small, &f, &err), TY_EFORMAT);
    /* Header length past the end of the file. */
    size_t len;
    uint8_t *b = image("{}", 0, &len);
    b[0] = 200;
    assert_int_equal(st_parse(b, len, &f, &err), TY_EFORMAT);
    assert_non_null(strstr(err.msg, "runs past the end"));
    /* Huge header length (over the 100 MB limit, and near 2^64). */
    memset(b, 0xff, 8);
    assert_int_equal(st_parse(b, len, &f, &err), TY_EFORMAT);
    assert_non_null(strstr(err.msg, "limit"));
    b[7] = 0;
    b[6] = 0;
    b[5] = 0;
    b[4] = 0;
    b[3] = 0x10; /* 0x10ffffff > 100e6 */
    assert_int_equal(st_parse(b, len, &f, &err), TY_EFORMAT);
    free(b);
    /* Missing file and too-short file by path. */
    char path[128];
    snprintf(path, sizeof path, "%s/missing.safetensors", dir);
    assert_int_equal(st_open(path, &f, &err), TY_ENOTFOUND);
    snprintf(path, sizeof path, "%s/short.safetensors", dir);
    assert_int_equal(fs_write_atomic(path, "abc", 3, 0644, &err), TY_OK);
    assert_int_equal(st_open(path, &f, &err), TY_EFORMAT);
}

static void test_truncations_and_corruption(void **state)
{
    char path[128];
    snprintf(path, sizeof path, "%s/b.safetensors", dir);
    float w[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    st_out_tensor t[2] = {
        {.name = "w", .dtype = ST_F32, .ndim = 2, .shape = {2, 2}, .data = w},
        {.name = "v", .dtype = ST_F32, .ndim = 1, .shape = {4}, .data = w + 4},
    };
    json_t *meta = json_pack("{s:s}", "k", "v");
    ty_err err;
    assert_int_equal(st_write(path, meta, t, 2, &err), TY_OK);
    json_decref(meta);
    char *data;
    size_t len;
    assert_int_equal(fs_read_all(path, 1 << 20, &data, &len, &err), TY_OK);
    st_file f;
    assert_int_equal(st_parse(data, len, &f, &err), TY_OK);
    st_close(&f);
    /* Every proper prefix is rejected. */
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1);
        memcpy(copy, data, cut);
        assert_int_equal(st_parse(copy, cut, &f, &err), TY_EFORMAT);
        free(copy);
    }
    /* Random corruption never crashes; whatever parses is self-consistent. */
    ty_rng r;
    ty_rng_seed(&r, 2024, 0);
    uint8_t *copy = malloc(len);
    for (int iter = 0; iter < 5000; iter++) {
        memcpy(copy, data, len);
        int flips = 1 + (int)ty_rng_below(&r, 4);
        for (int k = 0; k < flips; k++)
            copy[ty_rng_below(&r, (uint32_t)len)] = (uint8_t)ty_rng_u64(&r);
        if (st_parse(copy, len, &f, &err) == TY_OK) {
            for (size_t i = 0; i < f.count; i++) {
                const uint8_t *p = f.tensors[i].data;
                assert_true(p >= copy && p + f.tensors[i].nbytes <= copy + len);
            }
            st_close(&f);
        }
    }
    free(copy);
    free(data);
}

static void test_writer_rejects_bad_input(void **state)
{
    char path[128];
    snprintf(path, sizeof path, "%s/c.safetensors", dir);
    float w[1] = {1};
    st_out_tensor dup[2] = {
        {.name = "w", .dtype = ST_F32, .ndim = 1, .shape = {1}, .data = w},
        {.name = "w", .dtype = ST_F32, .ndim = 1, .shape = {1}, .data = w},
    };
    ty_err err;
    assert_int_equal(st_write(path, NULL, dup, 2, &err), TY_EINVAL);
    json_t *meta = json_pack("{s:i}", "n", 1);
    assert_int_equal(st_write(path, meta, dup, 1, &err), TY_EINVAL);
    json_decref(meta);
    assert_false(fs_exists(path));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_dtype_names),
        cmocka_unit_test(test_empty_and_metadata_only),
        cmocka_unit_test(test_malformed_headers),
        cmocka_unit_test(test_bad_lengths),
        cmocka_unit_test(test_truncations_and_corruption),
        cmocka_unit_test(test_writer_rejects_bad_input),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
