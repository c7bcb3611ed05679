/*
 * jsonscan.c - the strict one-pass JSON reader (see jsonscan.h). It
 * validates as it goes, with recursion bounded by MAX_DEPTH; strings are
 * checked by jansson one at a time (escapes, UTF-8, \u0000), the rare case
 * in a body of numbers; numbers follow RFC 8259 and are converted with
 * strtod (to catch an overflow), as jansson converts them. The skimmer is
 * the fast path: bytes through a table, no calls; what it passes over,
 * its caller reads strictly.
 */
#include "serve/jsonscan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 2048      /* jansson's own limit */
#define MAX_TRACKED_KEYS 64 /* duplicate keys checked among the first */

ty_status jsonscan_fail(jsonscan_cur *c, const char *what)
{
    int line = 1, col = 1;
    for (const char *q = c->s; q < c->p && q < c->end; q++) {
        if (*q == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    return ty_fail(c->err, TY_EFORMAT, NULL,
                   "the request body is not valid JSON: %s (line %d, column "
                   "%d)",
                   what, line, col);
}

ty_status jsonscan_string(jsonscan_cur *c, json_t **out)
{
    const char *q = c->p + 1;
    int plain = 1;
    for (;;) {
        if (q >= c->end) {
            c->p = q;
            return jsonscan_fail(c, "unterminated string");
        }
        unsigned char ch = (unsigned char)*q;
        if (ch == '"')
            break;
        if (ch < 0x20) {
            c->p = q;
            return jsonscan_fail(c, "control character in a string");
        }
        if (ch == '\\') {
            plain = 0;
            q++;
        } else if (ch >= 0x80) {
            plain = 0;
        }
        q++;
    }
    q++;
    if (plain && !out) {
        c->p = q;
        return TY_OK;
    }
    json_error_t je;
    json_t *v = json_loadb(c->p, (size_t)(q - c->p), JSON_DECODE_ANY, &je);
    if (!v)
        return jsonscan_fail(c, je.text);
    c->p = q;
    if (out)
        *out = v;
    else
        json_decref(v);
    return TY_OK;
}

/* The number's text is [start, c->p) once read. */
ty_status jsonscan_number(jsonscan_cur *c)
{
    const char *q = c->p, *start = c->p;
    if (q < c->end && *q == '-')
        q++;
    if (q >= c->end || !jsonscan_is_digit(*q))
        return jsonscan_fail(c, "invalid number");
    const char *int_start = q;
    if (*q == '0')
        q++;
    else
        while (q < c->end && jsonscan_is_digit(*q))
            q++;
    size_t int_digits = (size_t)(q - int_start);
    int check = int_digits > 300;
    if (q < c->end && *q == '.') {
        q++;
        if (q >= c->end || !jsonscan_is_digit(*q)) {
            c->p = q;
            return jsonscan_fail(c, "invalid number");
        }
        while (q < c->end && jsonscan_is_digit(*q))
            q++;
    }
    if (q < c->end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < c->end && (*q == '+' || *q == '-'))
            q++;
        if (q >= c->end || !jsonscan_is_digit(*q)) {
            c->p = q;
            return jsonscan_fail(c, "invalid number");
        }
        while (q < c->end && jsonscan_is_digit(*q))
            q++;
        check = 1;
    }
    c->p = q;
    if (check) {
        size_t n = (size_t)(q - start);
        char *t = malloc(n + 1);
        if (!t)
            return ty_fail(c->err, TY_ENOMEM, NULL, "out of memory");
        memcpy(t, start, n);
        t[n] = '\0';
        double v = strtod(t, NULL);
        free(t);
        if (isinf(v)) {
            c->p = start;
            return jsonscan_fail(c, "real number overflow");
        }
    }
    return TY_OK;
}

ty_status jsonscan_literal(jsonscan_cur *c, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0)
        return jsonscan_fail(c, "invalid token");
    c->p += n;
    return TY_OK;
}

ty_status jsonscan_object(jsonscan_cur *c, int depth, jsonscan_member_fn fn,
                          void *ctx)
{
    if (depth >= MAX_DEPTH)
        return jsonscan_fail(c, "maximum parsing depth reached");
    c->p++;
    jsonscan_ws(c);
    if (jsonscan_at(c, '}')) {
        c->p++;
        return TY_OK;
    }
    json_t *seen = json_object();
    if (!seen)
        return ty_fail(c->err, TY_ENOMEM, NULL, "out of memory");
    ty_status s = TY_OK;
    for (;;) {
        jsonscan_ws(c);
        if (!jsonscan_at(c, '"')) {
            s = jsonscan_fail(c, "string or '}' expected");
            break;
        }
        const char *key_at = c->p;
        json_t *k = NULL;
        if ((s = jsonscan_string(c, fn ? &k : NULL)) != TY_OK)
            break;
        if (k) {
            const char *key = json_string_value(k);
            if (json_object_get(seen, key)) {
                json_decref(k);
                c->p = key_at;
                s = jsonscan_fail(c, "duplicate object key");
                break;
            }
            if (json_object_size(seen) < MAX_TRACKED_KEYS)
                json_object_set_new(seen, key, json_null());
        }
        jsonscan_ws(c);
        if (!jsonscan_at(c, ':')) {
            json_decref(k);
            s = jsonscan_fail(c, "':' expected");
            break;
        }
        c->p++;
        jsonscan_ws(c);
        s = fn ? fn(ctx, c, json_string_value(k))
               : jsonscan_value(c, depth + 1);
        json_decref(k);
        if (s != TY_OK)
            break;
        jsonscan_ws(c);
        if (jsonscan_at(c, ',')) {
            c->p++;
            continue;
        }
        if (jsonscan_at(c, '}')) {
            c->p++;
            break;
        }
        s = jsonscan_fail(c, "',' or '}' expected");
        break;
    }
    json_decref(seen);
    return s;
}

ty_status jsonscan_array(jsonscan_cur *c, int depth, jsonscan_element_fn fn,
                         void *ctx)
{
    if (depth >= MAX_DEPTH)
        return jsonscan_fail(c, "maximum parsing depth reached");
    c->p++;
    jsonscan_ws(c);
    if (jsonscan_at(c, ']')) {
        c->p++;
        return TY_OK;
    }
    for (uint64_t i = 0;; i++) {
        jsonscan_ws(c);
        ty_status s = fn ? fn(ctx, c, i) : jsonscan_value(c, depth + 1);
        if (s != TY_OK)
            return s;
        jsonscan_ws(c);
        if (jsonscan_at(c, ',')) {
            c->p++;
            continue;
        }
        if (jsonscan_at(c, ']')) {
            c->p++;
            return TY_OK;
        }
        return jsonscan_fail(c, "',' or ']' expected");
    }
}

/* Checks one value at c->p (after white space) and steps over it. */
ty_status jsonscan_value(jsonscan_cur *c, int depth)
{
    if (c->p >= c->end)
        return jsonscan_fail(c, "unexpected end of the body");
    switch (*c->p) {
        case '{': return jsonscan_object(c, depth, NULL, NULL);
        case '[': return jsonscan_array(c, depth, NULL, NULL);
        case '"': return jsonscan_string(c, NULL);
        case 't': return jsonscan_literal(c, "true");
        case 'f': return jsonscan_literal(c, "false");
        case 'n': return jsonscan_literal(c, "null");
        default:
            if (*c->p == '-' || jsonscan_is_digit(*c->p))
                return jsonscan_number(c);
            return jsonscan_fail(c, "invalid token");
    }
}

ty_status jsonscan_span(jsonscan_cur *c, const char **start, size_t *len)
{
    const char *from = c->p;
    ty_status s = jsonscan_value(c, 1);
    if (s == TY_OK) {
        *start = from;
        *len = (size_t)(c->p - from);
    }
    return s;
}

ty_status jsonscan_body_object(jsonscan_cur *c, jsonscan_member_fn fn,
                               void *ctx)
{
    jsonscan_ws(c);
    if (c->p >= c->end)
        return jsonscan_fail(c, "'[' or '{' expected");
    if (*c->p == '[') {
        ty_status s = jsonscan_value(c, 0);
        jsonscan_ws(c);
        if (s == TY_OK && c->p < c->end)
            s = jsonscan_fail(c, "end of file expected");
        if (s == TY_OK)
            s = ty_fail(c->err, TY_EFORMAT, NULL,
                        "the request body must be a JSON object");
        return s;
    }
    if (*c->p != '{')
        return jsonscan_fail(c, "'[' or '{' expected");
    ty_status s = jsonscan_object(c, 0, fn, ctx);
    if (s != TY_OK)
        return s;
    jsonscan_ws(c);
    if (c->p < c->end)
        return jsonscan_fail(c, "end of file expected");
    return TY_OK;
}

/* The bytes jsonscan_skim_array must look at (1); digits, signs, dots,
 * letters of numbers and literals, commas of inner arrays are passed over
 * by the table lookup alone. */
static const unsigned char skim_stop[256] = {
    ['"'] = 1, ['['] = 1, ['{'] = 1, [']'] = 1, ['}'] = 1, [','] = 1};
/* Inside an element (depth 2 and more) its commas do not matter either. */
static const unsigned char skim_stop_deep[256] = {
    ['"'] = 1, ['['] = 1, ['{'] = 1, [']'] = 1, ['}'] = 1};

ty_status jsonscan_skim_array(jsonscan_cur *c, uint64_t limit, uint64_t *count,
                              int *too_many)
{
    const char *q = c->p, *end = c->end;
    int depth = 0, content = 0;
    uint64_t n = 0;
    while (q < end) {
        /* Anything that is not a bracket, a string or a comma is content
         * when it is not white space; only depth 1's matters, and only
         * whether there is any, so it is looked at once per element. */
        if (depth >= 2) {
            while (q < end && !skim_stop_deep[(unsigned char)*q])
                q++;
            if (q >= end)
                break;
        } else if (!skim_stop[(unsigned char)*q]) {
            if (depth == 1 && !content && *q != ' ' && *q != '\n' &&
                *q != '\r' && *q != '\t')
                content = 1;
            q++;
            while (q < end && !skim_stop[(unsigned char)*q])
                q++;
            continue;
        }
        char ch = *q++;
        switch (ch) {
            case '"':
                while (q < end && *q != '"')
                    q += *q == '\\' ? 2 : 1;
                if (q >= end)
                    return TY_EFORMAT;
                q++;
                if (depth == 1)
                    content = 1;
                break;
            case '[':
            case '{':
                if (depth == 1)
                    content = 1;
                depth++;
                break;
            case ']':
            case '}':
                if (--depth == 0) {
                    c->p = q;
                    *count = content ? n + 1 : 0;
                    return TY_OK;
                }
                if (depth < 0)
                    return TY_EFORMAT;
                break;
            default: /* ',' */
                if (depth == 1 && ++n >= limit) {
                    *too_many = 1;
                    *count = n + 1;
                    return TY_EINVAL;
                }
                break;
        }
    }
    return TY_EFORMAT;
}
