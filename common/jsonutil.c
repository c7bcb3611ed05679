/* jsonutil.c - checked access to jansson objects (see jsonutil.h). */
#include "common/jsonutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

char *tyjson_dumps(const json_t *j, size_t flags)
{
    size_t n = json_dumpb(j, NULL, 0, flags);
    if (n == 0)
        return NULL;
    char *text = malloc(n + 1);
    if (!text)
        return NULL;
    if (json_dumpb(j, text, n, flags) != n) {
        free(text);
        return NULL;
    }
    text[n] = '\0';
    return text;
}
