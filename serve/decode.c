/*
 * decode.c - predict and KServe request bodies from text to floats (see
 * decode.h): which members each body has and keeps, how its examples or
 * its tensor's values are counted, placed and named in errors. The JSON
 * grammar is serve/jsonscan.c's and the numbers serve/number.c's; this
 * file calls them and nothing calls back into it but their callbacks.
 *
 * Each scan and decode has a fast way (the numbers skimmed, then read
 * strictly) and, only when that finds something wrong, the checking scan
 * of the whole body, so that every error is the one checking first gives.
 */
#include "serve/decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonutil.h"
#include "serve/jsonscan.h"
#include "serve/number.h"

#define SMALL_VALUE (1u << 20) /* KServe members parsed as JSON up to this */

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

static ty_status count_example(void *ctx, jsonscan_cur *c, uint64_t i)
{
    predict_scan *ps = ctx;
    if (++ps->b->count > SERVE_MAX_EXAMPLES) {
        ps->too_many = 1; /* stop here: the rest is never read */
        return TY_EINVAL;
    }
    return jsonscan_value(c, 2);
}

static ty_status predict_member(void *ctx, jsonscan_cur *c, const char *key)
{
    predict_scan *ps = ctx;
    if (!strcmp(key, "top_k")) {
        const char *start = c->p;
        ty_status s = jsonscan_value(c, 1);
        ps->b->top_k.p = start;
        ps->b->top_k.len = (size_t)(c->p - start);
        return s;
    }
    if (strcmp(key, "inputs") != 0) {
        if (!ps->has_unknown) {
            ps->has_unknown = 1;
            snprintf(ps->unknown, sizeof ps->unknown, "%s", key);
        }
        return jsonscan_value(c, 1);
    }
    const char *start = c->p;
    ty_status s;
    if (!jsonscan_at(c, '[') || ps->has_unknown)
        s = jsonscan_value(c, 1);
    else if (ps->light)
        s = jsonscan_skim_array(c, SERVE_MAX_EXAMPLES, &ps->b->count,
                                &ps->too_many);
    else
        s = jsonscan_array(c, 1, count_example, ps);
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
    jsonscan_cur c = {text, text, text + len, err};
    predict_scan ps = {.b = b, .light = light};
    ty_status s = jsonscan_body_object(&c, predict_member, &ps);
    if (ps.too_many)
        return inputs_error(err);
    if (s != TY_OK)
        return s;
    static const char *const keys[] = {"inputs", "top_k", NULL};
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

typedef struct {
    uint64_t features, room; /* room: examples x holds */
    const json_t *shape;     /* the model's input shape, for messages */
    float *x;
} predict_decode;

static ty_status decode_example(void *ctx, jsonscan_cur *c, uint64_t i)
{
    predict_decode *pd = ctx;
    char path[64];
    snprintf(path, sizeof path, "inputs[%llu]", (unsigned long long)i);
    if (!jsonscan_at(c, '['))
        return ty_fail(c->err, TY_EINVAL, path, "%s must be a list of numbers",
                       path);
    uint64_t f = pd->features, count = 0;
    /* Past room the body cannot hold all its numbers: the example is
     * decoded unwritten, and one of them is found short. */
    ty_status s = serve_number_array(c, i < pd->room ? pd->x + i * f : NULL, f,
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
    jsonscan_cur c = {b->inputs.p, b->inputs.p, b->inputs.p + b->inputs.len,
                      err};
    predict_decode pd = {features, room, shape, x};
    /* Only the scanned count of examples is written (x has room for
     * exactly those). */
    uint64_t n = 0;
    ty_status s = TY_OK;
    c.p++;
    jsonscan_ws(&c);
    while (s == TY_OK && n < b->count && c.p < c.end && *c.p != ']') {
        jsonscan_ws(&c);
        s = decode_example(&pd, &c, n++);
        jsonscan_ws(&c);
        if (s == TY_OK && jsonscan_at(&c, ',') && n < b->count)
            c.p++;
    }
    /* The inputs were only skimmed: every example read, then the array's
     * end, or the checking scan says what is wrong. */
    if (s == TY_OK &&
        (n != b->count || !jsonscan_at(&c, ']') || c.p + 1 != c.end))
        s = jsonscan_fail(&c, "',' or ']' expected");
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
static ty_status tensor_member(void *ctx, jsonscan_cur *c, const char *key)
{
    infer_scan *is = ctx;
    if (!strcmp(key, "data")) {
        if (!is->light || !jsonscan_at(c, '['))
            return jsonscan_span(c, &is->b->data.p, &is->b->data.len);
        const char *start = c->p;
        uint64_t count = 0;
        int too_many = 0;
        ty_status s =
            jsonscan_skim_array(c, SERVE_MAX_EXAMPLES, &count, &too_many);
        if (s != TY_OK)
            return TY_EFORMAT; /* the checking scan says what */
        is->b->data.p = start;
        is->b->data.len = (size_t)(c->p - start);
        return TY_OK;
    }
    serve_span sp;
    ty_status s = jsonscan_span(c, &sp.p, &sp.len);
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
            return jsonscan_fail(c, je.text);
        }
    } else {
        v = json_null();
    }
    json_object_set_new(is->in0, key, v);
    return TY_OK;
}

static ty_status tensor(void *ctx, jsonscan_cur *c, uint64_t i)
{
    infer_scan *is = ctx;
    is->ninputs++;
    if (i == 0) {
        if (jsonscan_at(c, '{')) {
            is->in0 = json_object();
            if (!is->in0)
                return ty_fail(c->err, TY_ENOMEM, NULL, "out of memory");
            json_array_append(is->inputs, is->in0);
            return jsonscan_object(c, 2, tensor_member, is);
        }
        /* Not an object: only its kind matters to the checks. */
        json_array_append_new(is->inputs,
                              jsonscan_at(c, '[') ? json_array() : json_null());
    } else if (i == 1) {
        json_array_append_new(is->inputs, json_null());
    }
    return jsonscan_value(c, 2);
}

static ty_status infer_member(void *ctx, jsonscan_cur *c, const char *key)
{
    infer_scan *is = ctx;
    json_t *doc = is->b->doc;
    if (!strcmp(key, "inputs")) {
        if (jsonscan_at(c, '[')) {
            is->inputs = json_array();
            json_object_set_new(doc, "inputs", is->inputs);
            return jsonscan_array(c, 1, tensor, is);
        }
        json_object_set_new(doc, "inputs", json_null());
        return jsonscan_value(c, 1);
    }
    if (!strcmp(key, "id") || !strcmp(key, "outputs") ||
        !strcmp(key, "parameters")) {
        serve_span sp;
        ty_status s = jsonscan_span(c, &sp.p, &sp.len);
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
            return jsonscan_fail(c, je.text);
        }
        json_object_set_new(doc, key, v);
        return TY_OK;
    }
    json_object_set_new(doc, key, json_null()); /* unknown */
    return jsonscan_value(c, 1);
}

static ty_status infer_scan_body(const char *text, size_t len, int light,
                                 serve_infer_body *b, ty_err *err)
{
    memset(b, 0, sizeof *b);
    b->doc = json_object();
    if (!b->doc)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    jsonscan_cur c = {text, text, text + len, err};
    infer_scan is = {.b = b, .light = light};
    ty_status s = jsonscan_body_object(&c, infer_member, &is);
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
    jsonscan_cur c = {data.p, data.p, data.p + data.len, err};
    uint64_t count = 0;
    ty_status s = serve_number_array(
        &c, x, total, serve_infer_room(data, total), &count, field, 0);
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

static ty_status walk(jsonscan_cur *c, walk_state *w);

/* One element of a data array (jsonscan_array handles the commas and
 * brackets). */
static ty_status walk_element(void *ctx, jsonscan_cur *c, uint64_t i)
{
    (void)i;
    walk_state *w = ctx;
    if (c->p >= c->end)
        return jsonscan_fail(c, "unexpected end of the body");
    const char *start = c->p;
    serve_token kind;
    ty_status s;
    switch (*c->p) {
        case '[':
            s = walk(c, w);
            kind = SERVE_TOK_ARRAY;
            break;
        case '{':
            s = jsonscan_value(c, w->depth);
            kind = SERVE_TOK_OBJECT;
            break;
        case '"':
            s = jsonscan_string(c, NULL);
            kind = SERVE_TOK_STRING;
            break;
        case 't':
            s = jsonscan_literal(c, "true");
            kind = SERVE_TOK_TRUE;
            break;
        case 'f':
            s = jsonscan_literal(c, "false");
            kind = SERVE_TOK_FALSE;
            break;
        case 'n':
            s = jsonscan_literal(c, "null");
            kind = SERVE_TOK_NULL;
            break;
        default:
            s = jsonscan_number(c);
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

static ty_status walk(jsonscan_cur *c, walk_state *w)
{
    if (w->depth >= SERVE_MAX_NESTING)
        return ty_fail(c->err, TY_EINVAL, NULL, "%s: data is nested too deeply",
                       w->what);
    w->depth++;
    ty_status s = jsonscan_array(c, w->depth, walk_element, w);
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
    jsonscan_cur c = {data.p, data.p, data.p + data.len, err};
    walk_state w = {fn, ctx, total, 0, what, 0};
    ty_status s = walk(&c, &w);
    if (s == TY_OK && w.count != total)
        s = ty_fail(err, TY_EINVAL, NULL,
                    "%s: data holds %llu values; the shape says %llu", what,
                    (unsigned long long)w.count, (unsigned long long)total);
    return s;
}
