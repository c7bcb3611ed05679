/* jsonutil.c - checked access to jansson objects (see jsonutil.h). */
#include "common/jsonutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/numtext.h"

void tyjson_path(char *buf, size_t n, const char *path, const char *key)
{
    if (path && *path)
        snprintf(buf, n, "%s.%s", path, key);
    else
        snprintf(buf, n, "%s", key);
}

void tyjson_path_index(char *buf, size_t n, const char *path, size_t i)
{
    snprintf(buf, n, "%s[%zu]", path ? path : "", i);
}

ty_status tyjson_check_keys(const json_t *obj, const char *const *allowed,
                            const char *path, ty_err *err)
{
    if (!json_is_object(obj))
        return ty_fail(err, TY_EINVAL, path, "%s must be a JSON object",
                       path && *path ? path : "the request body");
    const char *key;
    json_t *val;
    json_object_foreach ((json_t *)obj, key, val) {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            if (!strcmp(*a, key)) {
                ok = 1;
                break;
            }
        if (ok)
            continue;
        char field[128], list[256] = "";
        size_t used = 0;
        for (const char *const *a = allowed; *a; a++) {
            int w = snprintf(list + used, sizeof list - used, "%s%s",
                             used ? ", " : "", *a);
            if (w < 0 || (size_t)w >= sizeof list - used)
                break;
            used += (size_t)w;
        }
        tyjson_path(field, sizeof field, path, key);
        return ty_fail(err, TY_EINVAL, field,
                       "unknown key '%s'%s%s; allowed: %s", key,
                       path && *path ? " in " : "", path ? path : "", list);
    }
    return TY_OK;
}

static ty_status absent(const char *field, int required, ty_err *err)
{
    if (required)
        return ty_fail(err, TY_EINVAL, field, "%s is required", field);
    return TY_OK;
}

ty_status tyjson_get_int(const json_t *obj, const char *key, const char *path,
                         int required, int64_t min, int64_t max, int64_t def,
                         int64_t *out, ty_err *err)
{
    char field[128];
    tyjson_path(field, sizeof field, path, key);
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return absent(field, required, err);
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d != floor(d) || d < (double)INT64_MIN || d > (double)INT64_MAX)
            return ty_fail(err, TY_EINVAL, field,
                           "%s must be an integer, got %g", field, d);
        *out = (int64_t)d;
    } else if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
    } else {
        return ty_fail(err, TY_EINVAL, field, "%s must be an integer", field);
    }
    if (*out < min || *out > max)
        return ty_fail(err, TY_EINVAL, field,
                       "%s must be between %lld and %lld, got %lld", field,
                       (long long)min, (long long)max, (long long)*out);
    return TY_OK;
}

ty_status tyjson_get_number(const json_t *obj, const char *key,
                            const char *path, int required, double min,
                            double max, double def, double *out, ty_err *err)
{
    char field[128];
    tyjson_path(field, sizeof field, path, key);
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return absent(field, required, err);
    }
    if (!json_is_number(v))
        return ty_fail(err, TY_EINVAL, field, "%s must be a number", field);
    *out = json_number_value(v);
    if (!isfinite(*out) || *out < min || *out > max)
        return ty_fail(err, TY_EINVAL, field,
                       "%s must be between %g and %g, got %g", field, min, max,
                       *out);
    return TY_OK;
}

ty_status tyjson_get_bool(const json_t *obj, const char *key, const char *path,
                          int required, int def, int *out, ty_err *err)
{
    char field[128];
    tyjson_path(field, sizeof field, path, key);
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return absent(field, required, err);
    }
    if (!json_is_boolean(v))
        return ty_fail(err, TY_EINVAL, field, "%s must be true or false",
                       field);
    *out = json_is_true(v);
    return TY_OK;
}

ty_status tyjson_get_string(const json_t *obj, const char *key,
                            const char *path, int required, size_t max_len,
                            const char *def, const char **out, ty_err *err)
{
    char field[128];
    tyjson_path(field, sizeof field, path, key);
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return absent(field, required, err);
    }
    if (!json_is_string(v))
        return ty_fail(err, TY_EINVAL, field, "%s must be a string", field);
    size_t len = json_string_length(v);
    if (len == 0 || len > max_len)
        return ty_fail(err, TY_EINVAL, field,
                       "%s must be 1 to %zu characters long", field, max_len);
    if (strlen(json_string_value(v)) != len)
        return ty_fail(err, TY_EINVAL, field, "%s must not contain NUL bytes",
                       field);
    *out = json_string_value(v);
    return TY_OK;
}

/* A growable text; out of memory sets failed and drops later appends. */
typedef struct {
    char *p;
    size_t len, cap;
    int failed;
} text_buf;

static void text_add(text_buf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

/* text (jansson's, n bytes) with each real rewritten by numtext_double,
 * plus a newline when newline is set, into a new string; *len its length.
 * jansson writes a real with a point or an exponent and an integer with
 * neither, and its "%.17g" reads back exactly, so strtod gives the tree's
 * double. Strings (keys included) are copied as they are: a quote inside
 * one is always escaped. NULL when out of memory. */
static char *rewrite_reals(const char *text, size_t n, int newline, size_t *len)
{
    text_buf b = {malloc(n + n / 8 + 64), 0, n + n / 8 + 64, 0};
    if (!b.p)
        return NULL;
    size_t i = 0, copied = 0;
    while (i < n) {
        char c = text[i];
        if (c == '"') {
            for (i++; i < n && text[i] != '"'; i++)
                if (text[i] == '\\')
                    i++;
            i++;
            continue;
        }
        if (c != '-' && (c < '0' || c > '9')) {
            i++;
            continue;
        }
        size_t start = i;
        int real = 0;
        while (i < n && text[i] && strchr("0123456789+-.eE", text[i])) {
            real |= text[i] == '.' || text[i] == 'e' || text[i] == 'E';
            i++;
        }
        if (!real)
            continue;
        char num[64], out[NUMTEXT_MAX];
        size_t tn = i - start;
        if (tn >= sizeof num)
            continue; /* not a "%.17g" real: left as it is */
        memcpy(num, text + start, tn);
        num[tn] = '\0';
        size_t on = numtext_double(strtod(num, NULL), out);
        text_add(&b, text + copied, start - copied);
        text_add(&b, out, on);
        copied = i;
    }
    text_add(&b, text + copied, n - copied);
    if (newline)
        text_add(&b, "\n", 1);
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    b.p[b.len] = '\0';
    *len = b.len;
    return b.p;
}

static char *dumps(const json_t *j, size_t flags, int newline, size_t *len)
{
    size_t n = json_dumpb(j, NULL, 0, flags);
    if (n == 0)
        return NULL;
    char *text = malloc(n + 2);
    if (!text)
        return NULL;
    if (json_dumpb(j, text, n, flags) != n) {
        free(text);
        return NULL;
    }
    text[n] = '\0';
    if (!(flags & JSON_REAL_PRECISION(0x1F))) {
        char *t = rewrite_reals(text, n, newline, len);
        free(text);
        return t;
    }
    if (newline)
        text[n++] = '\n';
    text[n] = '\0';
    *len = n;
    return text;
}

char *tyjson_dumps(const json_t *j, size_t flags)
{
    size_t len;
    return dumps(j, flags, 0, &len);
}

char *tyjson_dumps_line(const json_t *j, size_t flags, size_t *len)
{
    return dumps(j, flags, 1, len);
}
