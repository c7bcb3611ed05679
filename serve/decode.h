/*
 * decode.h - predict and KServe v2 request bodies read straight from their
 * text into float buffers, without a jansson tree of the numbers (a 60 MB
 * body of 16 million numbers would otherwise cost ~700 MB of json_t).
 *
 * Two steps, so that the handler can look the model up in between (its
 * input size is needed to place the numbers, and a missing model answers
 * 404 before any per-example error, as it always has):
 *
 *  1. scan: checks that the whole body is JSON (a strict one-pass reader:
 *     the grammar of RFC 8259 with jansson's rules: no duplicate keys, no
 *     \u0000, valid UTF-8), finds the top-level members and, for the
 *     inputs, counts the examples as it goes, stopping at the first one past
 *     SERVE_MAX_EXAMPLES. Nothing proportional to the body is allocated.
 *     The small members (ids, names, shapes, parameters) come back as jansson
 *     values; the numbers stay text.
 *  2. decode: writes the numbers of the counted examples into the caller's
 *     floats, with the errors (and field paths) the predict service has
 *     always given ("inputs[3] must hold only numbers").
 *
 * All functions are pure (bytes in, floats and an error out), so a fuzzer
 * can call them on arbitrary bytes: see serve_predict_parse.
 */
#ifndef TY_SERVE_DECODE_H
#define TY_SERVE_DECODE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"

#define SERVE_MAX_EXAMPLES 100000 /* examples per request */

/* A JSON value's text inside the body (p NULL: absent). */
typedef struct serve_span {
    const char *p;
    size_t len;
} serve_span;

/* A predict body {"inputs": [...]} as scanned. */
typedef struct serve_predict_body {
    const char *text; /* the whole body */
    size_t len;
    serve_span inputs; /* the inputs value */
    serve_span top_k;  /* language models: "top_k" as written (p NULL:
                          absent; serve/lm.h reads it) */
    uint64_t count;    /* its examples when it is an array (at most
                          SERVE_MAX_EXAMPLES + 1: the scan stops there) */
} serve_predict_body;

/* A KServe v2 infer body: everything but the tensor's data as jansson
 * values (small), the data as text. */
typedef struct serve_infer_body {
    json_t *doc;     /* the body without inputs[0].data (NULL on error) */
    serve_span data; /* inputs[0].data, when inputs[0] is an object */
} serve_infer_body;

/* Step 1 for POST /v1/models/{id}/predict. The inputs are skimmed (their
 * brackets, strings and commas), not checked: step 2 reads them strictly.
 * Errors: TY_EFORMAT (HTTP 400)
 * when the body is not JSON ("the request body is not valid JSON: ... (line
 * L, column C)") or not an object; TY_EINVAL (422) for an unknown key or for
 * inputs that are not an array of 1 to SERVE_MAX_EXAMPLES values. */
ty_status serve_predict_scan(const char *text, size_t len,
                             serve_predict_body *b, ty_err *err);

/* The checking scan of b's whole body (step 1 skims the inputs; step 2
 * reads them strictly and calls this when it finds something wrong, so
 * errors are those of checking everything first): TY_OK when the body is
 * valid, else the error step 1 would give had it checked the inputs. */
ty_status serve_predict_check(const serve_predict_body *b, ty_err *err);

/* How many examples x needs room for: b->count, or fewer when the body is
 * too short to hold b->count * features numbers (then decoding fails on a
 * short example anyway, and 100,000 empty examples cost no 300 MB). */
uint64_t serve_predict_room(const serve_predict_body *b, uint64_t features);

/* Step 2: the b->count examples of b->inputs, each features numbers (flat
 * or nested in the input shape), into x (room examples of features floats,
 * room from serve_predict_room). shape, the model's input shape, is named
 * in a size error (NULL: "?"). TY_EINVAL naming the example ("inputs[3]") on a bad
 * one; TY_EFORMAT (HTTP 400) when the inputs are not valid JSON. */
ty_status serve_predict_decode(const serve_predict_body *b, uint64_t features,
                               const json_t *shape, float *x, uint64_t room,
                               ty_err *err);

/* Step 1 for POST /v2/models/{name}/infer: the same checks of the JSON;
 * b->doc is the body with inputs[0]'s "data" left out (the handler checks
 * the protocol fields on it as before): "id", "outputs", "parameters" and
 * inputs[0]'s "name", "datatype", "shape" and "parameters" as values (the
 * parameters of up to 1 MiB, else null), any other member as null. Free
 * with serve_infer_body_free. */
ty_status serve_infer_scan(const char *text, size_t len, serve_infer_body *b,
                           ty_err *err);
void serve_infer_body_free(serve_infer_body *b);

/* The data of inputs[0] is only skimmed by serve_infer_scan (its brackets,
 * strings and commas) and read strictly by serve_infer_walk; when the walk
 * or the model lookup fails, this checking scan of the whole body says
 * whether the body is valid JSON (TY_OK) or what is wrong with it, so that
 * errors are those of checking first. */
ty_status serve_infer_check(const char *text, size_t len, ty_err *err);

/* How many floats x needs for total numbers of data: total, or fewer when
 * the text cannot hold that many (decoding then fails on the count). */
uint64_t serve_infer_room(serve_span data, uint64_t total);

/* Step 2: exactly total numbers of data (an array, nested or flat) into x
 * (serve_infer_room floats). field names the data in errors
 * ("inputs[0].data"). */
ty_status serve_infer_decode(serve_span data, uint64_t total, const char *field,
                             float *x, ty_err *err);

/* One value of KServe tensor data, as its JSON text has it. */
typedef enum {
    SERVE_TOK_NUMBER = 0,
    SERVE_TOK_TRUE,
    SERVE_TOK_FALSE,
    SERVE_TOK_STRING,
    SERVE_TOK_NULL,
    SERVE_TOK_OBJECT,
    SERVE_TOK_ARRAY /* internal: never handed to a serve_value_fn */
} serve_token;

/* Gets value i of a tensor's data: its kind and text (a number's digits, a
 * string with its quotes). Returns TY_OK to go on, or an error (which
 * stops the walk and is returned as it is). */
typedef ty_status (*serve_value_fn)(void *ctx, uint64_t i, serve_token kind,
                                    const char *text, size_t len, ty_err *err);

/* Step 2 for a typed tensor: calls fn for each value of data (an array,
 * nested or flat, row-major; at most 8 levels), which must hold exactly
 * total values. what names the tensor at the start of errors (`input
 * "x"`): "<what>: data holds 3 values; the shape says 4". The walk stops
 * at the first value past total. */
ty_status serve_infer_walk(serve_span data, uint64_t total, const char *what,
                           serve_value_fn fn, void *ctx, ty_err *err);

/* Both steps of a predict body for a model of features inputs, for fuzzers
 * and tests: *x (malloc'd, *n * features floats; free it) and *n on TY_OK. */
ty_status serve_predict_parse(const char *text, size_t len, uint64_t features,
                              float **x, uint64_t *n, ty_err *err);

#endif
