/* Unit tests for the streaming multipart parser: every split point of a body
 * must give the same parts, and malformed bodies must fail with a message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/multipart.h"

typedef struct {
    int nparts;
    char names[8][64];
    char filenames[8][64];
    int has_filename[8];
    char data[8][512];
    size_t len[8];
    int open;
} collected;

static ty_status on_begin(void *ctx, const char *name, const char *filename,
                          const char *ctype, ty_err *err)
{
    collected *c = ctx;
    if (c->open || c->nparts >= 8)
        return ty_fail(err, TY_EINTERNAL, NULL, "unexpected part");
    snprintf(c->names[c->nparts], 64, "%s", name);
    c->has_filename[c->nparts] = filename != NULL;
    snprintf(c->filenames[c->nparts], 64, "%s", filename ? filename : "");
    c->len[c->nparts] = 0;
    c->open = 1;
    return TY_OK;
}

static ty_status on_data(void *ctx, const char *data, size_t len, ty_err *err)
{
    collected *c = ctx;
    if (!c->open || c->len[c->nparts] + len > 512)
        return ty_fail(err, TY_EINTERNAL, NULL, "data outside a part");
    memcpy(c->data[c->nparts] + c->len[c->nparts], data, len);
    c->len[c->nparts] += len;
    return TY_OK;
}

static ty_status on_end(void *ctx, ty_err *err)
{
    collected *c = ctx;
    if (!c->open)
        return ty_fail(err, TY_EINTERNAL, NULL, "end without begin");
    c->open = 0;
    c->nparts++;
    return TY_OK;
}

static const mp_callbacks cbs = {on_begin, on_data, on_end};

/* Parses body fed in two pieces split at `split`; returns the status. */
static ty_status parse_split(const char *boundary, const char *body, size_t len,
                             size_t split, collected *c, ty_err *err)
{
    memset(c, 0, sizeof *c);
    mp_parser *p = mp_parser_create(boundary, &cbs, c);
    assert_non_null(p);
    ty_status st = mp_parser_feed(p, body, split, err);
    if (st == TY_OK)
        st = mp_parser_feed(p, body + split, len - split, err);
    if (st == TY_OK)
        st = mp_parser_finish(p, err);
    mp_parser_destroy(p);
    return st;
}

static const char BODY[] =
    "preamble to ignore\r\n"
    "--XyZ\r\n"
    "Content-Disposition: form-data; name=\"name\"\r\n"
    "\r\n"
    "fashion\r\n"
    "--XyZ\r\n"
    "Content-Disposition: form-data; name=\"file\"; filename=\"a.csv\"\r\n"
    "Content-Type: text/csv\r\n"
    "\r\n"
    "x,y\r\n1,2\r\n--Xy not a boundary\r\n\r\r\n-\r\nx--XyZ\r\n"
    "--XyZ--\r\n"
    "epilogue";

static const char FILE_DATA[] =
    "x,y\r\n1,2\r\n--Xy not a boundary\r\n\r\r\n-\r\nx--XyZ";

static void test_every_split_point_gives_same_parts(void **state)
{
    size_t len = strlen(BODY);
    for (size_t split = 0; split <= len; split++) {
        collected c;
        ty_err err = {0};
        ty_status st = parse_split("XyZ", BODY, len, split, &c, &err);
        assert_int_equal(st, TY_OK);
        assert_int_equal(c.nparts, 2);
        assert_string_equal(c.names[0], "name");
        assert_false(c.has_filename[0]);
        assert_int_equal(c.len[0], 7);
        assert_memory_equal(c.data[0], "fashion", 7);
        assert_string_equal(c.names[1], "file");
        assert_true(c.has_filename[1]);
        assert_string_equal(c.filenames[1], "a.csv");
        assert_int_equal(c.len[1], strlen(FILE_DATA));
        assert_memory_equal(c.data[1], FILE_DATA, strlen(FILE_DATA));
    }
}

static void test_byte_at_a_time(void **state)
{
    collected c = {0};
    ty_err err = {0};
    mp_parser *p = mp_parser_create("XyZ", &cbs, &c);
    for (size_t i = 0; BODY[i]; i++)
        assert_int_equal(mp_parser_feed(p, BODY + i, 1, &err), TY_OK);
    assert_int_equal(mp_parser_finish(p, &err), TY_OK);
    mp_parser_destroy(p);
    assert_int_equal(c.nparts, 2);
    assert_memory_equal(c.data[1], FILE_DATA, strlen(FILE_DATA));
}

static void test_body_starting_with_boundary(void **state)
{
    const char body[] = "--b\r\nContent-Disposition: form-data; name=a\r\n\r\n"
                        "1\r\n--b--";
    collected c;
    ty_err err = {0};
    assert_int_equal(parse_split("b", body, strlen(body), 3, &c, &err), TY_OK);
    assert_int_equal(c.nparts, 1);
    assert_string_equal(c.names[0], "a");
    assert_int_equal(c.len[0], 1);
}

static void test_empty_part(void **state)
{
    const char body[] = "--b\r\nContent-Disposition: form-data; name=\"e\"\r\n"
                        "\r\n\r\n--b--\r\n";
    collected c;
    ty_err err = {0};
    assert_int_equal(parse_split("b", body, strlen(body), 10, &c, &err), TY_OK);
    assert_int_equal(c.nparts, 1);
    assert_int_equal(c.len[0], 0);
}

static void test_truncated_body_fails(void **state)
{
    size_t len = strlen(BODY);
    collected c;
    ty_err err = {0};
    /* Cut in the middle of the file part. */
    ty_status st = parse_split("XyZ", BODY, len - 40, 5, &c, &err);
    assert_int_equal(st, TY_EFORMAT);
    assert_non_null(strstr(err.msg, "closing boundary"));
}

static void test_missing_disposition_fails(void **state)
{
    const char body[] = "--b\r\nContent-Type: text/plain\r\n\r\nx\r\n--b--";
    collected c;
    ty_err err = {0};
    assert_int_equal(parse_split("b", body, strlen(body), 0, &c, &err),
                     TY_EFORMAT);
    assert_non_null(strstr(err.msg, "Content-Disposition"));
}

static void test_garbage_after_boundary_fails(void **state)
{
    const char body[] = "--bXX";
    collected c;
    ty_err err = {0};
    assert_int_equal(parse_split("b", body, strlen(body), 0, &c, &err),
                     TY_EFORMAT);
}

static void test_oversized_headers_fail(void **state)
{
    size_t n = MP_MAX_HEADER + 100;
    char *body = malloc(n + 16);
    memcpy(body, "--b\r\n", 5);
    memset(body + 5, 'h', n);
    collected c;
    ty_err err = {0};
    assert_int_equal(parse_split("b", body, n + 5, 0, &c, &err), TY_EFORMAT);
    assert_non_null(strstr(err.msg, "longer than"));
    free(body);
}

static void test_callback_error_stops_parse(void **state)
{
    /* More than 8 parts makes on_begin fail; the status must surface. */
    char body[4096] = "";
    for (int i = 0; i < 9; i++)
        strcat(body,
               "--b\r\nContent-Disposition: form-data; name=p\r\n\r\nv\r\n");
    strcat(body, "--b--");
    collected c;
    ty_err err = {0};
    assert_int_equal(parse_split("b", body, strlen(body), 0, &c, &err),
                     TY_EINTERNAL);
}

static void test_boundary_from_content_type(void **state)
{
    char b[MP_MAX_BOUNDARY + 1];
    ty_err err = {0};
    assert_int_equal(mp_boundary_from_content_type(
                         "multipart/form-data; boundary=abc123", b, &err),
                     TY_OK);
    assert_string_equal(b, "abc123");
    assert_int_equal(
        mp_boundary_from_content_type("multipart/form-data; charset=utf-8; "
                                      "boundary=\"quoted: yes\"",
                                      b, &err),
        TY_OK);
    assert_string_equal(b, "quoted: yes");
    assert_int_equal(mp_boundary_from_content_type("application/json", b, &err),
                     TY_EINVAL);
    assert_int_equal(
        mp_boundary_from_content_type("multipart/form-data", b, &err),
        TY_EINVAL);
    assert_non_null(strstr(err.msg, "no boundary"));
    char long_ct[200];
    snprintf(long_ct, sizeof long_ct, "multipart/form-data; boundary=%080d", 1);
    assert_int_equal(mp_boundary_from_content_type(long_ct, b, &err),
                     TY_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_split_point_gives_same_parts),
        cmocka_unit_test(test_byte_at_a_time),
        cmocka_unit_test(test_body_starting_with_boundary),
        cmocka_unit_test(test_empty_part),
        cmocka_unit_test(test_truncated_body_fails),
        cmocka_unit_test(test_missing_disposition_fails),
        cmocka_unit_test(test_garbage_after_boundary_fails),
        cmocka_unit_test(test_oversized_headers_fail),
        cmocka_unit_test(test_callback_error_stops_parse),
        cmocka_unit_test(test_boundary_from_content_type),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
