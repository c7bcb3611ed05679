/*
 * jsonutil.h - checked access to jansson objects for request validation.
 *
 * Every getter names the field it failed on as "<path>.<key>" in err->field
 * and says what was expected, so a 422 tells the user exactly which field to
 * fix. Unknown keys are errors, not warnings (tyjson_check_keys).
 *
 * tyjson_dumps is how the server turns a tree into JSON text: replies,
 * events, log lines and stored documents.
 */
#ifndef TY_JSONUTIL_H
#define TY_JSONUTIL_H

#include <jansson.h>
#include <stdint.h>

#include "common/ty.h"

/* Fails with TY_EINVAL if obj is not an object or has a key not in allowed
 * (a NULL-terminated list). path names obj in messages ("" for the root). */
ty_status tyjson_check_keys(const json_t *obj, const char *const *allowed,
                            const char *path, ty_err *err);

/* Integer in [min, max]. When the key is absent: *out = def if !required,
 * else TY_EINVAL. Non-integers (including 1.5 and "1") are TY_EINVAL. */
ty_status tyjson_get_int(const json_t *obj, const char *key, const char *path,
                         int required, int64_t min, int64_t max, int64_t def,
                         int64_t *out, ty_err *err);

/* Number (integer or real) in [min, max]; same rules as tyjson_get_int. */
ty_status tyjson_get_number(const json_t *obj, const char *key,
                            const char *path, int required, double min,
                            double max, double def, double *out, ty_err *err);

/* Boolean; same absent rules. */
ty_status tyjson_get_bool(const json_t *obj, const char *key, const char *path,
                          int required, int def, int *out, ty_err *err);

/* String of length 1..max_len (borrowed pointer into obj). When absent and not
 * required, *out = def (may be NULL). */
ty_status tyjson_get_string(const json_t *obj, const char *key,
                            const char *path, int required, size_t max_len,
                            const char *def, const char **out, ty_err *err);

/* Writes "<path>.<key>" (or "<key>" when path is empty) into buf. */
void tyjson_path(char *buf, size_t n, const char *path, const char *key);

/* Writes "<path>[<i>]" into buf. */
void tyjson_path_index(char *buf, size_t n, const char *path, size_t i);

/* json_dumps, except that (1) a failed allocation gives NULL and never a
 * document with a key left out: jansson 2.14's json_dumps ignores a failed
 * append of an object key and returns invalid JSON (the text is measured
 * and written with json_dumpb, which appends to no growing buffer); and
 * (2) every real is written as the shortest decimal that reads back as the
 * same double (numtext_double: 0.1, not jansson's 0.10000000000000001).
 * Everything else is json_dumps's text byte for byte, whatever the flags;
 * with JSON_REAL_PRECISION in flags the reals are jansson's too. Free
 * with free(). */
char *tyjson_dumps(const json_t *j, size_t flags);

/* tyjson_dumps followed by a newline, as an HTTP reply ends (a shell
 * prompt after curl starts on a line of its own); its length, newline
 * included, in *len. NULL when out of memory. Free with free(). */
char *tyjson_dumps_line(const json_t *j, size_t flags, size_t *len);

#endif
