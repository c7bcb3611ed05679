/* Unit tests for common/: durable file writes, checked JSON access, ids,
 * the RNG, and error records. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/fsutil.h"
#include "common/ids.h"
#include "common/jsonutil.h"
#include "common/rng.h"
#include "common/ty.h"

static void test_write_atomic_and_read(void **state)
{
    char dir[] = "/tmp/ty-common-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char sub[256], path[300];
    snprintf(sub, sizeof sub, "%s/a/b/c", dir);
    ty_err err;
    assert_int_equal(fs_mkdirs(sub, 0700, &err), TY_OK);
    assert_int_equal(fs_mkdirs(sub, 0700, &err), TY_OK); /* idempotent */
    snprintf(path, sizeof path, "%s/file", sub);
    assert_int_equal(fs_write_atomic(path, "hello", 5, 0600, &err), TY_OK);
    assert_int_equal(fs_write_atomic(path, "bye", 3, 0640, &err), TY_OK);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0640);
    char *text;
    size_t len;
    assert_int_equal(fs_read_all(path, 100, &text, &len, &err), TY_OK);
    assert_int_equal(len, 3);
    assert_string_equal(text, "bye");
    free(text);
    assert_int_equal(fs_read_all(path, 2, &text, &len, &err), TY_ETOOBIG);
    assert_int_equal(fs_file_size(path), 3);
    assert_true(fs_exists(path));
    /* No temp files are left behind. */
    snprintf(path, sizeof path, "%s/file.tmp", sub);
    assert_false(fs_exists(path));
    snprintf(path, sizeof path, "%s/missing", sub);
    assert_int_equal(fs_read_all(path, 100, &text, &len, &err), TY_ENOTFOUND);
    assert_int_equal(fs_remove_tree(dir, &err), TY_OK);
    assert_false(fs_exists(dir));
    assert_int_equal(fs_remove_tree(dir, &err), TY_OK); /* missing is fine */
}

static void test_json_checks_name_the_field(void **state)
{
    json_t *o = json_loads("{\"a\": 3, \"b\": 1.5, \"c\": \"x\", \"d\": true, "
                           "\"e\": 2.0, \"f\": \"\"}",
                           0, NULL);
    ty_err err;
    int64_t i;
    double d;
    int b;
    const char *s;
    static const char *const ok[] = {"a", "b", "c", "d", "e", "f", NULL};
    static const char *const few[] = {"a", "b", NULL};
    assert_int_equal(tyjson_check_keys(o, ok, "hp", &err), TY_OK);
    assert_int_equal(tyjson_check_keys(o, few, "hp", &err), TY_EINVAL);
    assert_string_equal(err.field, "hp.c");
    assert_non_null(strstr(err.msg, "allowed: a, b"));

    assert_int_equal(tyjson_get_int(o, "a", "hp", 1, 0, 10, 0, &i, &err),
                     TY_OK);
    assert_int_equal(i, 3);
    assert_int_equal(tyjson_get_int(o, "e", "hp", 1, 0, 10, 0, &i, &err),
                     TY_OK);
    assert_int_equal(i, 2); /* 2.0 is a whole number */
    assert_int_equal(tyjson_get_int(o, "b", "hp", 1, 0, 10, 0, &i, &err),
                     TY_EINVAL);
    assert_string_equal(err.field, "hp.b");
    assert_int_equal(tyjson_get_int(o, "a", "hp", 1, 5, 10, 0, &i, &err),
                     TY_EINVAL);
    assert_non_null(strstr(err.msg, "between 5 and 10"));
    assert_int_equal(tyjson_get_int(o, "zz", "hp", 0, 0, 10, 7, &i, &err),
                     TY_OK);
    assert_int_equal(i, 7);
    assert_int_equal(tyjson_get_int(o, "zz", "", 1, 0, 10, 7, &i, &err),
                     TY_EINVAL);
    assert_string_equal(err.field, "zz");
    assert_non_null(strstr(err.msg, "required"));

    assert_int_equal(tyjson_get_number(o, "b", "", 1, 0, 2, 0, &d, &err),
                     TY_OK);
    assert_true(d == 1.5);
    assert_int_equal(tyjson_get_number(o, "c", "", 1, 0, 2, 0, &d, &err),
                     TY_EINVAL);
    assert_int_equal(tyjson_get_bool(o, "d", "", 1, 0, &b, &err), TY_OK);
    assert_int_equal(b, 1);
    assert_int_equal(tyjson_get_bool(o, "a", "", 1, 0, &b, &err), TY_EINVAL);
    assert_int_equal(tyjson_get_string(o, "c", "", 1, 10, NULL, &s, &err),
                     TY_OK);
    assert_string_equal(s, "x");
    assert_int_equal(tyjson_get_string(o, "f", "", 1, 10, NULL, &s, &err),
                     TY_EINVAL);
    assert_int_equal(tyjson_get_string(o, "a", "", 1, 10, NULL, &s, &err),
                     TY_EINVAL);
    json_decref(o);

    json_t *arr = json_loads("[1, 2]", 0, NULL);
    assert_int_equal(tyjson_check_keys(arr, ok, "model", &err), TY_EINVAL);
    assert_non_null(strstr(err.msg, "must be a JSON object"));
    json_decref(arr);
}

static void test_ids(void **state)
{
    char a[TY_ID_MAX], b[TY_ID_MAX];
    assert_int_equal(ty_id_new("ds_", a, NULL), TY_OK);
    assert_int_equal(ty_id_new("ds_", b, NULL), TY_OK);
    assert_string_not_equal(a, b);
    assert_int_equal(strlen(a), 23);
    assert_true(strncmp(a, "ds_", 3) == 0);
    for (const char *p = a + 3; *p; p++)
        assert_non_null(strchr("abcdefghijklmnopqrstuvwxyz234567", *p));
}

static void test_rng_is_seeded_and_unbiased(void **state)
{
    ty_rng r1, r2, r3;
    ty_rng_seed(&r1, 42, 0);
    ty_rng_seed(&r2, 42, 0);
    ty_rng_seed(&r3, 42, 1);
    int same_stream = 1, diff_stream = 0;
    for (int i = 0; i < 100; i++) {
        uint64_t a = ty_rng_u64(&r1), b = ty_rng_u64(&r2), c = ty_rng_u64(&r3);
        same_stream &= a == b;
        diff_stream |= a != c;
    }
    assert_true(same_stream);
    assert_true(diff_stream);
    /* Uniform, below and normal land where they should. */
    int counts[10] = {0};
    double sum = 0, sq = 0;
    for (int i = 0; i < 100000; i++) {
        float u = ty_rng_uniform(&r1);
        assert_true(u >= 0.0f && u < 1.0f);
        counts[ty_rng_below(&r1, 10)]++;
        double z = ty_rng_normal(&r1);
        sum += z;
        sq += z * z;
    }
    for (int k = 0; k < 10; k++)
        assert_in_range(counts[k], 9500, 10500);
    assert_true(sum / 100000 > -0.02 && sum / 100000 < 0.02);
    assert_true(sq / 100000 > 0.97 && sq / 100000 < 1.03);
    /* A shuffle is a permutation. */
    uint32_t idx[1000], seen[1000] = {0};
    for (uint32_t i = 0; i < 1000; i++)
        idx[i] = i;
    ty_rng_shuffle_u32(&r1, idx, 1000);
    int moved = 0;
    for (uint32_t i = 0; i < 1000; i++) {
        seen[idx[i]]++;
        moved += idx[i] != i;
    }
    for (uint32_t i = 0; i < 1000; i++)
        assert_int_equal(seen[i], 1);
    assert_true(moved > 900);
}

static void test_error_records(void **state)
{
    ty_err err;
    assert_int_equal(ty_fail(&err, TY_EINVAL, "x.y", "bad %d", 3), TY_EINVAL);
    assert_string_equal(err.msg, "bad 3");
    assert_string_equal(err.field, "x.y");
    ty_err_prefix(&err, "layer %d", 2);
    assert_string_equal(err.msg, "layer 2: bad 3");
    assert_string_equal(err.field, "x.y");
    ty_err_clear(&err);
    assert_string_equal(err.msg, "");
    assert_int_equal(ty_fail(NULL, TY_EIO, NULL, "ignored"), TY_EIO);
    for (int s = 0; s < TY_STATUS_COUNT; s++)
        assert_true(strncmp(ty_status_name((ty_status)s), "TY_", 3) == 0);
    assert_string_equal(ty_status_name((ty_status)999), "TY_UNKNOWN");
}

/* A full disk (or quota) is its own status, answered 507; other write
 * errors stay TY_EIO. */
static void test_errno_status(void **state)
{
    (void)state;
    assert_int_equal(ty_errno_status(ENOSPC), TY_ENOSPC);
    assert_int_equal(ty_errno_status(EDQUOT), TY_ENOSPC);
    assert_int_equal(ty_errno_status(EIO), TY_EIO);
    assert_int_equal(ty_errno_status(EACCES), TY_EIO);
    assert_string_equal(ty_status_name(TY_ENOSPC), "TY_ENOSPC");
}

/* tyjson_dumps gives what json_dumps gives when nothing fails. */
static void test_tyjson_dumps(void **state)
{
    (void)state;
    json_t *j = json_pack("{s:s, s:i, s:[i,i]}", "a", "x", "b", 2, "c", 1, 2);
    char *a = tyjson_dumps(j, JSON_COMPACT);
    char *b = json_dumps(j, JSON_COMPACT);
    assert_non_null(a);
    assert_string_equal(a, b);
    free(a);
    free(b);
    json_decref(j);
}

/* ty_hash is FNV-1a: the published vectors, and continuing equals one
 * pass. */
static void test_hash(void **state)
{
    (void)state;
    assert_int_equal(ty_hash("", 0, TY_HASH_INIT), 0x811c9dc5u);
    assert_int_equal(ty_hash("a", 1, TY_HASH_INIT), 0xe40c292cu);
    assert_int_equal(ty_hash("foobar", 6, TY_HASH_INIT), 0xbf9cf968u);
    assert_int_equal(ty_hash("bar", 3, ty_hash("foo", 3, TY_HASH_INIT)),
                     0xbf9cf968u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_atomic_and_read),
        cmocka_unit_test(test_json_checks_name_the_field),
        cmocka_unit_test(test_ids),
        cmocka_unit_test(test_hash),
        cmocka_unit_test(test_errno_status),
        cmocka_unit_test(test_tyjson_dumps),
        cmocka_unit_test(test_rng_is_seeded_and_unbiased),
        cmocka_unit_test(test_error_records),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
