/*
 * ds_testutil.h - helpers shared by the dataset test suites (test_dataset*.c):
 * paths in the suite's scratch folder (testutil.h's tu_tmpdir, which the
 * suites make and remove with tu_tmpdir_setup and tu_tmpdir_teardown),
 * writing fixture files, and reading a converted dataset back. Everything
 * is static inline so each suite takes only what it uses.
 */
#ifndef TY_DS_TESTUTIL_H
#define TY_DS_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/fsutil.h"
#include "models/data/dataset.h"
#include "testutil.h"

/* A path in the scratch directory (a static buffer per slot, 0..7). */
static inline const char *dt_path(int slot, const char *name)
{
    static char paths[8][256];
    snprintf(paths[slot & 7], sizeof paths[0], "%s/%s", tu_tmpdir, name);
    return paths[slot & 7];
}

static inline void dt_write(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (len)
        assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static inline void dt_write_str(const char *path, const char *text)
{
    dt_write(path, text, strlen(text));
}

/* Asserts that msg contains needle, printing both when it does not. */
#define dt_assert_contains(msg, needle)                               \
    do {                                                              \
        if (!strstr((msg), (needle)))                                 \
            fail_msg("message \"%s\" lacks \"%s\"", (msg), (needle)); \
    } while (0)

/* The meta's integer at key (asserting it is one). */
static inline long long dt_meta_int(const ty_dataset *ds, const char *key)
{
    json_t *v = json_object_get(ds->meta, key);
    if (!json_is_integer(v))
        fail_msg("meta.%s is not an integer", key);
    return (long long)json_integer_value(v);
}

static inline const char *dt_meta_str(const ty_dataset *ds, const char *key)
{
    json_t *v = json_object_get(ds->meta, key);
    if (!json_is_string(v))
        fail_msg("meta.%s is not a string", key);
    return json_string_value(v);
}

/* Asserts that ds's classes are exactly the JSON text expected. */
static inline void dt_assert_json(const json_t *v, const char *expected)
{
    json_error_t jerr;
    json_t *want = json_loads(expected, JSON_DECODE_ANY, &jerr);
    assert_non_null(want);
    if (!json_equal((json_t *)v, want)) {
        char *got = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        fail_msg("got %s, expected %s", got ? got : "(null)", expected);
    }
    json_decref(want);
}

#endif
