/*
 * jsonscan.h - a strict one-pass JSON reader over a text cursor, for the
 * request bodies of the predict service (serve/decode.c) that are too big
 * for a jansson tree. It checks the grammar of RFC 8259 with jansson's
 * rules (no duplicate keys, no \u0000, valid UTF-8, numbers that fit a
 * double, nesting up to jansson's 2048) and steps over what it checked;
 * objects and arrays hand each member or element to a callback, which
 * reads it (or, NULL, it is checked and skipped).
 *
 * Errors are those jansson would give, as the predict service's HTTP 400:
 * "the request body is not valid JSON: <what> (line L, column C)", counted
 * from the cursor's start. Nothing proportional to the text is allocated.
 * Every function is pure (text in, an error out), so fuzzers reach it
 * through serve_predict_parse.
 */
#ifndef TY_SERVE_JSONSCAN_H
#define TY_SERVE_JSONSCAN_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"

/* A reading position: s <= p <= end. s is where line 1, column 1 is (the
 * text an error's position is counted in); err is filled on failure. */
typedef struct {
    const char *s, *p, *end;
    ty_err *err;
} jsonscan_cur;

/* A syntax error at c->p: TY_EFORMAT with the line and column, as jansson
 * says them. Always returns TY_EFORMAT. */
ty_status jsonscan_fail(jsonscan_cur *c, const char *what);

/* Steps over JSON white space. */
static inline void jsonscan_ws(jsonscan_cur *c)
{
    while (c->p < c->end &&
           (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

/* Whether c->p is at ch (and not at the end). */
static inline int jsonscan_at(const jsonscan_cur *c, char ch)
{
    return c->p < c->end && *c->p == ch;
}

static inline int jsonscan_is_digit(char ch) { return ch >= '0' && ch <= '9'; }

/* The string at c->p ('"'): checked, and decoded into *out when out is not
 * NULL (a new reference, the caller's). */
ty_status jsonscan_string(jsonscan_cur *c, json_t **out);

/* The number at c->p, checked; rejects one that overflows a double, as
 * jansson does. TY_ENOMEM when a long number cannot be copied to check. */
ty_status jsonscan_number(jsonscan_cur *c);

/* The literal word ("true", "false", "null") at c->p. */
ty_status jsonscan_literal(jsonscan_cur *c, const char *word);

/* Checks one value at c->p (after white space) and steps over it; depth is
 * how many objects and arrays hold it. */
ty_status jsonscan_value(jsonscan_cur *c, int depth);

/* Gets one member of an object with c->p at its value (after white space)
 * and key its decoded name; must step over the value or fail. */
typedef ty_status (*jsonscan_member_fn)(void *ctx, jsonscan_cur *c,
                                        const char *key);

/* The object at c->p ('{'): fn per member (NULL: each value checked and
 * skipped). Duplicate keys are rejected among the first 64 (more keys than
 * that is an unknown key to every caller anyway). fn's error stops the
 * walk and is returned as it is. */
ty_status jsonscan_object(jsonscan_cur *c, int depth, jsonscan_member_fn fn,
                          void *ctx);

/* Gets element i of an array with c->p at it (after white space); must
 * step over it or fail. */
typedef ty_status (*jsonscan_element_fn)(void *ctx, jsonscan_cur *c,
                                         uint64_t i);

/* The array at c->p ('['): fn per element (NULL: checked and skipped). */
ty_status jsonscan_array(jsonscan_cur *c, int depth, jsonscan_element_fn fn,
                         void *ctx);

/* The value at c->p, checked, as its span of the text: *start and *len
 * (left as they were on failure). */
ty_status jsonscan_span(jsonscan_cur *c, const char **start, size_t *len);

/* The whole text as one object: fn per member, then nothing but white
 * space. A top-level array that is valid JSON is TY_EFORMAT "the request
 * body must be a JSON object". */
ty_status jsonscan_body_object(jsonscan_cur *c, jsonscan_member_fn fn,
                               void *ctx);

/* Steps over the array at c->p ('[') looking only at its brackets, strings
 * and commas (about ten times the checking reader's speed), counting its
 * elements into *count; past limit elements it stops with *too_many set
 * and TY_EINVAL. It checks nothing else, so its caller must read every
 * element strictly. TY_EFORMAT (no message) when the structure is broken:
 * the checking reader then says how. */
ty_status jsonscan_skim_array(jsonscan_cur *c, uint64_t limit, uint64_t *count,
                              int *too_many);

#endif
