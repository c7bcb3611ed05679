/*
 * decode.c - predict and KServe request bodies from text to floats (see
 * decode.h). The reader validates in one pass with recursion bounded by
 * MAX_DEPTH; strings are checked by jansson one at a time (escapes, UTF-8,
 * \u0000), the rare case here; numbers follow RFC 8259 and are converted
 * with strtod, as jansson converts them.
 */
#include "serve/decode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonutil.h"

#define MAX_DEPTH 2048         /* jansson's own limit */
#define MAX_NESTING 8          /* arrays in one example, as before */
#define MAX_TRACKED_KEYS 64    /* duplicate keys checked among the first */
#define SMALL_VALUE (1u << 20) /* KServe members parsed as JSON up to this */

typedef struct {
    const char *s, *p, *end;
    ty_err *err;
} cur;

/* A syntax error at c->p: 400 with the line and column, as jansson says. */
static ty_status bad_json(cur *c, const char *what)
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

static void ws(cur *c)
{
    while (c->p < c->end &&
           (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int at(cur *c, char ch) { return c->p < c->end && *c->p == ch; }

static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }

/* A string at c->p ('"'): checked, and decoded into *out when out is not
 * NULL (a new reference). */
static ty_status string(cur *c, json_t **out)
{
    const char *q = c->p + 1;
    int plain = 1;
    for (;;) {
        if (q >= c->end) {
            c->p = q;
            return bad_json(c, "unterminated string");
        }
        unsigned char ch = (unsigned char)*q;
        if (ch == '"')
            break;
        if (ch < 0x20) {
            c->p = q;
            return bad_json(c, "control character in a string");
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
        return bad_json(c, je.text);
    c->p = q;
    if (out)
        *out = v;
    else
        json_decref(v);
    return TY_OK;
}

/* A number at c->p; its text is [c->p, *end). Rejects what overflows a
 * double, as jansson does. */
static ty_status number(cur *c)
{
    const char *q = c->p, *start = c->p;
    if (q < c->end && *q == '-')
        q++;
    if (q >= c->end || !is_digit(*q))
        return bad_json(c, "invalid number");
    const char *int_start = q;
    if (*q == '0')
        q++;
    else
        while (q < c->end && is_digit(*q))
            q++;
    size_t int_digits = (size_t)(q - int_start);
    int check = int_digits > 300;
    if (q < c->end && *q == '.') {
        q++;
        if (q >= c->end || !is_digit(*q)) {
            c->p = q;
            return bad_json(c, "invalid number");
        }
        while (q < c->end && is_digit(*q))
            q++;
    }
    if (q < c->end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < c->end && (*q == '+' || *q == '-'))
            q++;
        if (q >= c->end || !is_digit(*q)) {
            c->p = q;
            return bad_json(c, "invalid number");
        }
        while (q < c->end && is_digit(*q))
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
            return bad_json(c, "real number overflow");
        }
    }
    return TY_OK;
}

static ty_status literal(cur *c, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0)
        return bad_json(c, "invalid token");
    c->p += n;
    return TY_OK;
}

static ty_status value(cur *c, int depth);

/* Calls fn for each member of the object at c->p ('{') with c->p at the
 * value; fn consumes it. Duplicate keys are rejected (among the first
 * MAX_TRACKED_KEYS: more than that many keys is an unknown key anyway). */
typedef ty_status (*member_fn)(void *ctx, cur *c, const char *key);

static ty_status object(cur *c, int depth, member_fn fn, void *ctx)
{
    if (depth >= MAX_DEPTH)
        return bad_json(c, "maximum parsing depth reached");
    c->p++;
    ws(c);
    if (at(c, '}')) {
        c->p++;
        return TY_OK;
    }
    json_t *seen = json_object();
    if (!seen)
        return ty_fail(c->err, TY_ENOMEM, NULL, "out of memory");
    ty_status s = TY_OK;
    for (;;) {
        ws(c);
        if (!at(c, '"')) {
            s = bad_json(c, "string or '}' expected");
            break;
        }
        const char *key_at = c->p;
        json_t *k = NULL;
        if ((s = string(c, fn ? &k : NULL)) != TY_OK)
            break;
        if (k) {
            const char *key = json_string_value(k);
            if (json_object_get(seen, key)) {
                json_decref(k);
                c->p = key_at;
                s = bad_json(c, "duplicate object key");
                break;
            }
            if (json_object_size(seen) < MAX_TRACKED_KEYS)
                json_object_set_new(seen, key, json_null());
        }
        ws(c);
        if (!at(c, ':')) {
            json_decref(k);
            s = bad_json(c, "':' expected");
            break;
        }
        c->p++;
        ws(c);
        s = fn ? fn(ctx, c, json_string_value(k)) : value(c, depth + 1);
        json_decref(k);
        if (s != TY_OK)
            break;
        ws(c);
        if (at(c, ',')) {
            c->p++;
            continue;
        }
        if (at(c, '}')) {
            c->p++;
            break;
        }
        s = bad_json(c, "',' or '}' expected");
        break;
    }
    json_decref(seen);
    return s;
}

/* Calls fn for each element of the array at c->p ('[') with c->p at it;
 * fn (NULL: skip) consumes it. */
typedef ty_status (*element_fn)(void *ctx, cur *c, uint64_t i);

static ty_status array(cur *c, int depth, element_fn fn, void *ctx)
{
    if (depth >= MAX_DEPTH)
        return bad_json(c, "maximum parsing depth reached");
    c->p++;
    ws(c);
    if (at(c, ']')) {
        c->p++;
        return TY_OK;
    }
    for (uint64_t i = 0;; i++) {
        ws(c);
        ty_status s = fn ? fn(ctx, c, i) : value(c, depth + 1);
        if (s != TY_OK)
            return s;
        ws(c);
        if (at(c, ',')) {
            c->p++;
            continue;
        }
        if (at(c, ']')) {
            c->p++;
            return TY_OK;
        }
        return bad_json(c, "',' or ']' expected");
    }
}

/* Checks one value at c->p (after white space) and steps over it. */
static ty_status value(cur *c, int depth)
{
    if (c->p >= c->end)
        return bad_json(c, "unexpected end of the body");
    switch (*c->p) {
        case '{': return object(c, depth, NULL, NULL);
        case '[': return array(c, depth, NULL, NULL);
        case '"': return string(c, NULL);
        case 't': return literal(c, "true");
        case 'f': return literal(c, "false");
        case 'n': return literal(c, "null");
        default:
            if (*c->p == '-' || is_digit(*c->p))
                return number(c);
            return bad_json(c, "invalid token");
    }
}

/* The value at c->p as its span (after checking it). */
static ty_status span_of(cur *c, serve_span *sp)
{
    const char *start = c->p;
    ty_status s = value(c, 1);
    if (s == TY_OK) {
        sp->p = start;
        sp->len = (size_t)(c->p - start);
    }
    return s;
}

/* The body as one object: calls fn per member and checks that nothing but
 * white space follows. */
static ty_status body_object(cur *c, member_fn fn, void *ctx)
{
    ws(c);
    if (c->p >= c->end)
        return bad_json(c, "'[' or '{' expected");
    if (*c->p == '[') {
        ty_status s = value(c, 0);
        ws(c);
        if (s == TY_OK && c->p < c->end)
            s = bad_json(c, "end of file expected");
        if (s == TY_OK)
            s = ty_fail(c->err, TY_EFORMAT, NULL,
                        "the request body must be a JSON object");
        return s;
    }
    if (*c->p != '{')
        return bad_json(c, "'[' or '{' expected");
    ty_status s = object(c, 0, fn, ctx);
    if (s != TY_OK)
        return s;
    ws(c);
    if (c->p < c->end)
        return bad_json(c, "end of file expected");
    return TY_OK;
}

/* tyjson_check_keys's error for an unknown key. */
static ty_status unknown_key(const char *key, const char *const *allowed,
                             const char *path, ty_err *err)
{
    json_t *o = json_object();
    if (!o)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    json_object_set_new(o, key, json_null());
    ty_status s = tyjson_check_keys(o, allowed, path, err);
    json_decref(o);
    return s;
}

/* ---- predict ---- */

typedef struct {
    serve_predict_body *b;
    char unknown[256]; /* the first unknown key */
    int has_unknown, too_many;
    int light; /* the inputs skimmed, not checked (serve_predict_scan) */
} predict_scan;

/* Steps over the array at c->p ('[') looking only at its brackets, strings
 * and commas, counting its elements into *count (stopping past
 * SERVE_MAX_EXAMPLES: *too_many). Bytes per byte, no calls: about ten times
 * the checking reader's speed. It checks nothing else, so its caller must
 * (serve_predict_decode reads every element strictly). TY_EFORMAT when the
 * structure is broken (the checking reader then says how). */
/* The bytes skim_array must look at (1); digits, signs, dots, letters of
 * numbers and literals, commas of inner arrays are passed over by the
 * table lookup alone. */
static const unsigned char skim_stop[256] = {
    ['"'] = 1, ['['] = 1, ['{'] = 1, [']'] = 1, ['}'] = 1, [','] = 1};
/* Inside an element (depth 2 and more) its commas do not matter either. */
static const unsigned char skim_stop_deep[256] = {
    ['"'] = 1, ['['] = 1, ['{'] = 1, [']'] = 1, ['}'] = 1};

static ty_status skim_array(cur *c, uint64_t *count, int *too_many)
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
                if (depth == 1 && ++n >= SERVE_MAX_EXAMPLES) {
                    *too_many = 1;
                    *count = n + 1;
                    return TY_EINVAL;
                }
                break;
        }
    }
    return TY_EFORMAT;
}

static ty_status count_example(void *ctx, cur *c, uint64_t i)
{
    predict_scan *ps = ctx;
    if (++ps->b->count > SERVE_MAX_EXAMPLES) {
        ps->too_many = 1; /* stop here: the rest is never read */
        return TY_EINVAL;
    }
    return value(c, 2);
}

static ty_status predict_member(void *ctx, cur *c, const char *key)
{
    predict_scan *ps = ctx;
    if (strcmp(key, "inputs") != 0) {
        if (!ps->has_unknown) {
            ps->has_unknown = 1;
            snprintf(ps->unknown, sizeof ps->unknown, "%s", key);
        }
        return value(c, 1);
    }
    const char *start = c->p;
    ty_status s = !at(c, '[') || ps->has_unknown ? value(c, 1)
                  : ps->light ? skim_array(c, &ps->b->count, &ps->too_many)
                              : array(c, 1, count_example, ps);
    ps->b->inputs.p = start;
    ps->b->inputs.len = (size_t)(c->p - start);
    return s;
}

static ty_status inputs_error(ty_err *err)
{
    return ty_fail(err, TY_EINVAL, "inputs",
                   "inputs must be an array of 1 to %d examples, each a "
                   "list of numbers (flat or nested in the model's input "
                   "shape)",
                   SERVE_MAX_EXAMPLES);
}

/* The scan, with the inputs checked (light 0) or skimmed (light 1). */
static ty_status predict_scan_body(const char *text, size_t len, int light,
                                   serve_predict_body *b, ty_err *err)
{
    memset(b, 0, sizeof *b);
    b->text = text;
    b->len = len;
    cur c = {text, text, text + len, err};
    predict_scan ps = {.b = b, .light = light};
    ty_status s = body_object(&c, predict_member, &ps);
    if (ps.too_many)
        return inputs_error(err);
    if (s != TY_OK)
        return s;
    static const char *const keys[] = {"inputs", NULL};
    if (ps.has_unknown)
        return unknown_key(ps.unknown, keys, "", err);
    if (!b->inputs.p || b->inputs.p[0] != '[' || b->count == 0)
        return inputs_error(err);
    return TY_OK;
}

/* The inputs are skimmed here and read strictly by serve_predict_decode;
 * when either finds something wrong, the checking scan of the whole body
 * gives the error, so the errors are those of checking first. */
ty_status serve_predict_scan(const char *text, size_t len,
                             serve_predict_body *b, ty_err *err)
{
    ty_status s = predict_scan_body(text, len, 1, b, err);
    if (s != TY_OK)
        s = predict_scan_body(text, len, 0, b, err);
    return s;
}

/* Exact powers of ten as doubles (10^22 is the largest one). */
static const double pow10_exact[] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* The number at *p (before end) as strtod reads it; *p moves past it.
 * Numbers whose digits fit 2^53 with a power of ten up to 10^22 (pixel
 * values, most decimals people send) are converted here exactly as strtod
 * would (one correctly rounded multiply or divide of exact doubles: Clinger's
 * fast path); the rest go to strtod. 0 when the text is not a number. */
static inline __attribute__((always_inline)) int
number_value(const char **p, const char *end, double *out)
{
    const char *q = *p, *start = q;
    int neg = 0;
    if (q < end && *q == '-') {
        neg = 1;
        q++;
    }
    uint64_t m = 0;
    int digits = 0, frac = 0, exact = 1;
    const char *d0 = q;
    if (q + 1 < end && q[0] == '0' && is_digit(q[1]))
        return 0; /* JSON has no leading zeros */
    while (q < end && is_digit(*q)) {
        if (digits < 19)
            m = m * 10 + (uint64_t)(*q - '0');
        else
            exact = 0;
        if (m || digits)
            digits++;
        q++;
    }
    if (q == d0)
        return 0;
    if (q < end && *q == '.') {
        q++;
        const char *f0 = q;
        while (q < end && is_digit(*q)) {
            if (digits < 19) {
                m = m * 10 + (uint64_t)(*q - '0');
                frac++;
            } else {
                exact = 0;
            }
            if (m || digits)
                digits++;
            q++;
        }
        if (q == f0)
            return 0;
    }
    int e = 0;
    if (q < end && (*q == 'e' || *q == 'E')) {
        q++;
        int eneg = 0;
        if (q < end && (*q == '+' || *q == '-'))
            eneg = *q++ == '-';
        const char *e0 = q;
        while (q < end && is_digit(*q)) {
            if (e < 100000)
                e = e * 10 + (*q - '0');
            q++;
        }
        if (q == e0)
            return 0;
        if (eneg)
            e = -e;
    }
    int p10 = e - frac;
    if (exact && m <= (1ull << 53) && p10 >= -22 && p10 <= 22) {
        double v = (double)m;
        v = p10 < 0 ? v / pow10_exact[-p10] : v * pow10_exact[p10];
        *out = neg ? -v : v;
        *p = q;
        return 1;
    }
    size_t n = (size_t)(q - start);
    char buf[64], *t = buf, *te;
    if (n >= sizeof buf && !(t = malloc(n + 1)))
        return 0;
    memcpy(t, start, n);
    t[n] = '\0';
    double v = strtod(t, &te);
    int ok = te == t + n;
    if (t != buf)
        free(t);
    if (!ok)
        return 0;
    *out = v;
    *p = q;
    return 1;
}

/* The numbers of the array at c->p into x (up to cap, and only the first
 * room of them are written), counting into *count; stops early once *count
 * passes cap (the caller reports it). */
static ty_status flatten(cur *c, float *x, uint64_t cap, uint64_t room,
                         uint64_t *count, const char *path, int depth)
{
    if (depth >= MAX_NESTING)
        return ty_fail(c->err, TY_EINVAL, path, "%s is nested too deeply",
                       path);
    c->p++;
    ws(c);
    if (at(c, ']')) {
        c->p++;
        return TY_OK;
    }
    /* The cursor and count in locals: this loop runs once per number. */
    const char *p = c->p, *end = c->end;
    uint64_t n = *count, keep = cap < room ? cap : room;
    ty_status s = TY_OK;
    for (;;) {
        while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
            p++;
        if (p >= end) {
            c->p = p;
            s = bad_json(c, "unexpected end of the body");
            break;
        }
        char ch = *p;
        /* Plain integers of up to 9 digits (pixels, counts): exact as
         * they are, no power of ten needed. */
        uint32_t iv = 0;
        const char *q = p;
        while (q < end && q - p < 9 && is_digit(*q))
            iv = iv * 10 + (uint32_t)(*q++ - '0');
        if (q > p && q < end && (*q == ',' || *q == ']' || *q == ' ') &&
            !(p[0] == '0' && q - p > 1)) {
            if (n < keep)
                x[n] = (float)iv;
            n++;
            p = q;
        } else if (ch == '[') {
            c->p = p;
            *count = n;
            s = flatten(c, x, cap, room, count, path, depth + 1);
            p = c->p;
            n = *count;
            if (s != TY_OK)
                break;
        } else if (ch == '-' || is_digit(ch)) {
            double v;
            q = p;
            if (!number_value(&q, end, &v) || isinf(v)) {
                c->p = p;
                s = bad_json(c, "invalid number");
                break;
            }
            p = q;
            if (n < keep)
                x[n] = (float)v;
            n++;
        } else {
            s = ty_fail(c->err, TY_EINVAL, path, "%s must hold only numbers",
                        path);
            break;
        }
        if (n > cap)
            break; /* too many; reported by the caller */
        while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
            p++;
        if (p < end && *p == ',') {
            p++;
            continue;
        }
        if (p < end && *p == ']') {
            p++;
            break;
        }
        c->p = p;
        s = bad_json(c, "',' or ']' expected");
        *count = n;
        return s;
    }
    if (s == TY_OK)
        c->p = p;
    *count = n;
    return s;
}

typedef struct {
    uint64_t features, room; /* room: examples x holds */
    const json_t *shape;     /* the model's input shape, for messages */
    float *x;
} predict_decode;

static ty_status decode_example(void *ctx, cur *c, uint64_t i)
{
    predict_decode *pd = ctx;
    char path[64];
    snprintf(path, sizeof path, "inputs[%llu]", (unsigned long long)i);
    if (!at(c, '['))
        return ty_fail(c->err, TY_EINVAL, path, "%s must be a list of numbers",
                       path);
    uint64_t f = pd->features, count = 0;
    /* Past room the body cannot hold all its numbers: the example is
     * decoded unwritten, and one of them is found short. */
    ty_status s = flatten(c, i < pd->room ? pd->x + i * f : NULL, f,
                          i < pd->room ? f : 0, &count, path, 0);
    if (s == TY_OK && count != f) {
        /* The shape is printed only here, not for every request. */
        char *shape = pd->shape ? json_dumps(pd->shape, JSON_COMPACT) : NULL;
        s = ty_fail(c->err, TY_EINVAL, path,
                    "%s has %s%llu values; this model takes %llu (input "
                    "shape %s)",
                    path, count > f ? "more than " : "",
                    (unsigned long long)(count > f ? f : count),
                    (unsigned long long)f, shape ? shape : "?");
        free(shape);
    }
    return s;
}

uint64_t serve_predict_room(const serve_predict_body *b, uint64_t features)
{
    /* n numbers take at least 2n - 1 bytes ("1,1,...") */
    uint64_t most = (b->inputs.len + 1) / 2;
    uint64_t fit = features ? most / features + 1 : b->count;
    return fit < b->count ? fit : b->count;
}

ty_status serve_predict_decode(const serve_predict_body *b, uint64_t features,
                               const json_t *shape, float *x, uint64_t room,
                               ty_err *err)
{
    if (!b->inputs.p || b->inputs.len == 0 || b->inputs.p[0] != '[')
        return inputs_error(err);
    cur c = {b->inputs.p, b->inputs.p, b->inputs.p + b->inputs.len, err};
    predict_decode pd = {features, room, shape, x};
    /* Only the scanned count of examples is written (x has room for
     * exactly those). */
    uint64_t n = 0;
    ty_status s = TY_OK;
    c.p++;
    ws(&c);
    while (s == TY_OK && n < b->count && c.p < c.end && *c.p != ']') {
        ws(&c);
        s = decode_example(&pd, &c, n++);
        ws(&c);
        if (s == TY_OK && at(&c, ',') && n < b->count)
            c.p++;
    }
    /* The inputs were only skimmed: every example read, then the array's
     * end, or the checking scan says what is wrong. */
    if (s == TY_OK && (n != b->count || !at(&c, ']') || c.p + 1 != c.end))
        s = bad_json(&c, "',' or ']' expected");
    if (s != TY_OK) {
        ty_err strict = {0};
        ty_status ss = serve_predict_check(b, &strict);
        if (ss != TY_OK) {
            *err = strict;
            return ss;
        }
    }
    return s;
}

ty_status serve_predict_check(const serve_predict_body *b, ty_err *err)
{
    if (!b->text)
        return TY_OK;
    serve_predict_body again;
    return predict_scan_body(b->text, b->len, 0, &again, err);
}

ty_status serve_predict_parse(const char *text, size_t len, uint64_t features,
                              float **x, uint64_t *n, ty_err *err)
{
    serve_predict_body b;
    *x = NULL;
    *n = 0;
    ty_status s = serve_predict_scan(text, len, &b, err);
    if (s != TY_OK)
        return s;
    if (features == 0 || features > (1u << 24))
        return ty_fail(err, TY_EINVAL, NULL, "features out of range");
    uint64_t room = serve_predict_room(&b, features);
    float *buf = malloc(room * features * sizeof *buf + 1);
    if (!buf)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    s = serve_predict_decode(&b, features, NULL, buf, room, err);
    if (s != TY_OK) {
        free(buf);
        return s;
    }
    *x = buf;
    *n = b.count;
    return TY_OK;
}

/* ---- KServe v2 ---- */

typedef struct {
    serve_infer_body *b;
    json_t *in0; /* inputs[0] without its data */
    json_t *inputs;
    uint64_t ninputs;
    int light; /* the data skimmed, not checked (serve_infer_walk checks) */
} infer_scan;

/* inputs[0]'s members: data as a span, the rest as values (name, datatype
 * and a shape of reasonable size) or placeholders (parameters, unknown
 * keys: only their names are checked). */
static ty_status tensor_member(void *ctx, cur *c, const char *key)
{
    infer_scan *is = ctx;
    if (!strcmp(key, "data")) {
        if (!is->light || !at(c, '['))
            return span_of(c, &is->b->data);
        const char *start = c->p;
        uint64_t count = 0;
        int too_many = 0;
        ty_status s = skim_array(c, &count, &too_many);
        if (s != TY_OK)
            return TY_EFORMAT; /* the checking scan says what */
        is->b->data.p = start;
        is->b->data.len = (size_t)(c->p - start);
        return TY_OK;
    }
    serve_span sp;
    ty_status s = span_of(c, &sp);
    if (s != TY_OK)
        return s;
    json_t *v = NULL;
    if (!strcmp(key, "name") || !strcmp(key, "datatype") ||
        ((!strcmp(key, "shape") || !strcmp(key, "parameters")) &&
         sp.len <= SMALL_VALUE)) {
        json_error_t je;
        v = json_loadb(sp.p, sp.len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES,
                       &je);
        if (!v) {
            c->p = sp.p;
            return bad_json(c, je.text);
        }
    } else {
        v = json_null();
    }
    json_object_set_new(is->in0, key, v);
    return TY_OK;
}

static ty_status tensor(void *ctx, cur *c, uint64_t i)
{
    infer_scan *is = ctx;
    is->ninputs++;
    if (i == 0) {
        if (at(c, '{')) {
            is->in0 = json_object();
            if (!is->in0)
                return ty_fail(c->err, TY_ENOMEM, NULL, "out of memory");
            json_array_append(is->inputs, is->in0);
            return object(c, 2, tensor_member, is);
        }
        /* Not an object: only its kind matters to the checks. */
        json_array_append_new(is->inputs,
                              at(c, '[') ? json_array() : json_null());
    } else if (i == 1) {
        json_array_append_new(is->inputs, json_null());
    }
    return value(c, 2);
}

static ty_status infer_member(void *ctx, cur *c, const char *key)
{
    infer_scan *is = ctx;
    json_t *doc = is->b->doc;
    if (!strcmp(key, "inputs")) {
        if (at(c, '[')) {
            is->inputs = json_array();
            json_object_set_new(doc, "inputs", is->inputs);
            return array(c, 1, tensor, is);
        }
        json_object_set_new(doc, "inputs", json_null());
        return value(c, 1);
    }
    if (!strcmp(key, "id") || !strcmp(key, "outputs") ||
        !strcmp(key, "parameters")) {
        serve_span sp;
        ty_status s = span_of(c, &sp);
        if (s != TY_OK)
            return s;
        if (sp.len > SMALL_VALUE && !strcmp(key, "outputs")) {
            /* Far more than the one output there is: an array whose
             * element fails the check, without a tree of it. */
            json_object_set_new(doc, key, json_pack("[n]"));
            return TY_OK;
        }
        if (sp.len > SMALL_VALUE && !strcmp(key, "parameters")) {
            /* Not an object the handler takes (its check fails). */
            json_object_set_new(doc, key, json_null());
            return TY_OK;
        }
        json_error_t je;
        json_t *v = json_loadb(sp.p, sp.len,
                               JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
        if (!v) {
            c->p = sp.p;
            return bad_json(c, je.text);
        }
        json_object_set_new(doc, key, v);
        return TY_OK;
    }
    json_object_set_new(doc, key, json_null()); /* unknown */
    return value(c, 1);
}

static ty_status infer_scan_body(const char *text, size_t len, int light,
                                 serve_infer_body *b, ty_err *err)
{
    memset(b, 0, sizeof *b);
    b->doc = json_object();
    if (!b->doc)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    cur c = {text, text, text + len, err};
    infer_scan is = {.b = b, .light = light};
    ty_status s = body_object(&c, infer_member, &is);
    json_decref(is.in0);
    if (s != TY_OK)
        serve_infer_body_free(b);
    return s;
}

/* The data is skimmed here (serve_infer_walk reads it strictly); when
 * anything is wrong the checking scan gives the error. */
ty_status serve_infer_scan(const char *text, size_t len, serve_infer_body *b,
                           ty_err *err)
{
    ty_status s = infer_scan_body(text, len, 1, b, err);
    if (s != TY_OK)
        s = infer_scan_body(text, len, 0, b, err);
    return s;
}

ty_status serve_infer_check(const char *text, size_t len, ty_err *err)
{
    serve_infer_body b;
    ty_status s = infer_scan_body(text, len, 0, &b, err);
    serve_infer_body_free(&b);
    return s;
}

int serve_number_parse(const char *text, size_t len, double *v)
{
    const char *p = text;
    return number_value(&p, text + len, v) && p == text + len;
}

void serve_infer_body_free(serve_infer_body *b)
{
    json_decref(b->doc);
    b->doc = NULL;
    b->data.p = NULL;
}

uint64_t serve_infer_room(serve_span data, uint64_t total)
{
    uint64_t most = (data.len + 1) / 2;
    return total < most ? total : most;
}

ty_status serve_infer_decode(serve_span data, uint64_t total, const char *field,
                             float *x, ty_err *err)
{
    if (!data.p || data.len == 0 || data.p[0] != '[')
        return ty_fail(err, TY_EINVAL, field,
                       "data must be an array of numbers");
    cur c = {data.p, data.p, data.p + data.len, err};
    uint64_t count = 0;
    ty_status s =
        flatten(&c, x, total, serve_infer_room(data, total), &count, field, 0);
    if (s == TY_OK && count != total)
        s = ty_fail(err, TY_EINVAL, field,
                    "data holds %s%llu values; shape says %llu",
                    count > total ? "more than " : "",
                    (unsigned long long)(count > total ? total : count),
                    (unsigned long long)total);
    return s;
}

/* The scalars of a KServe tensor's data, nested or flat, in order: fn
 * gets each one's text; the count is checked here. */
typedef struct {
    serve_value_fn fn;
    void *ctx;
    uint64_t total, count;
    const char *what;
    int depth; /* arrays open */
} walk_state;

static ty_status walk(cur *c, walk_state *w);

/* One element of a data array (array() handles the commas and brackets). */
static ty_status walk_element(void *ctx, cur *c, uint64_t i)
{
    (void)i;
    walk_state *w = ctx;
    if (c->p >= c->end)
        return bad_json(c, "unexpected end of the body");
    const char *start = c->p;
    serve_token kind;
    ty_status s;
    switch (*c->p) {
        case '[':
            s = walk(c, w);
            kind = SERVE_TOK_ARRAY;
            break;
        case '{':
            s = value(c, w->depth);
            kind = SERVE_TOK_OBJECT;
            break;
        case '"':
            s = string(c, NULL);
            kind = SERVE_TOK_STRING;
            break;
        case 't':
            s = literal(c, "true");
            kind = SERVE_TOK_TRUE;
            break;
        case 'f':
            s = literal(c, "false");
            kind = SERVE_TOK_FALSE;
            break;
        case 'n':
            s = literal(c, "null");
            kind = SERVE_TOK_NULL;
            break;
        default:
            s = number(c);
            kind = SERVE_TOK_NUMBER;
            break;
    }
    if (s != TY_OK)
        return s;
    if (kind != SERVE_TOK_ARRAY) {
        if (w->count >= w->total)
            return ty_fail(c->err, TY_EINVAL, NULL,
                           "%s: data holds more than %llu values; the "
                           "shape says %llu",
                           w->what, (unsigned long long)w->total,
                           (unsigned long long)w->total);
        s = w->fn(w->ctx, w->count, kind, start, (size_t)(c->p - start),
                  c->err);
        if (s != TY_OK)
            return s;
        w->count++;
    }
    return TY_OK;
}

static ty_status walk(cur *c, walk_state *w)
{
    if (w->depth >= MAX_NESTING)
        return ty_fail(c->err, TY_EINVAL, NULL, "%s: data is nested too deeply",
                       w->what);
    w->depth++;
    ty_status s = array(c, w->depth, walk_element, w);
    w->depth--;
    return s;
}

ty_status serve_infer_walk(serve_span data, uint64_t total, const char *what,
                           serve_value_fn fn, void *ctx, ty_err *err)
{
    if (!data.p || data.len == 0 || data.p[0] != '[')
        return ty_fail(err, TY_EINVAL, NULL,
                       "%s: data must be an array of values (nested or "
                       "flat)",
                       what);
    cur c = {data.p, data.p, data.p + data.len, err};
    walk_state w = {fn, ctx, total, 0, what, 0};
    ty_status s = walk(&c, &w);
    if (s == TY_OK && w.count != total)
        s = ty_fail(err, TY_EINVAL, NULL,
                    "%s: data holds %llu values; the shape says %llu", what,
                    (unsigned long long)w.count, (unsigned long long)total);
    return s;
}
