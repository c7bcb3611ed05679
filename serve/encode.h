/*
 * encode.h - replies written straight into a byte buffer, without a jansson
 * tree of the numbers: a predict reply of 64 examples x 10 outputs would
 * otherwise cost 640 heap nodes and jansson's 17-digit printing.
 *
 * Floats are written as the shortest decimal that reads back as the same
 * float32 (what Python's repr does for float32 values through numpy):
 * 0.1f is "0.1", not "0.10000000149011612". A value that is not finite
 * (JSON has no NaN or infinity) is written as null.
 */
#ifndef TY_SERVE_ENCODE_H
#define TY_SERVE_ENCODE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"

/* A growable byte buffer. Zero-initialise it; every append returns 0 and
 * marks the buffer failed when memory runs out (later appends do nothing),
 * so a writer checks once at the end with serve_buf_ok. */
typedef struct serve_buf {
    char *p;
    size_t len, cap;
    int failed;
} serve_buf;

int serve_buf_ok(const serve_buf *b);
/* Makes room for n more bytes; 0 when out of memory. */
int serve_buf_reserve(serve_buf *b, size_t n);
int serve_buf_add(serve_buf *b, const void *data, size_t n);
int serve_buf_str(serve_buf *b, const char *s);
/* s as a JSON string literal (quoted, escaped). */
int serve_buf_json_string(serve_buf *b, const char *s);
int serve_buf_int(serve_buf *b, int64_t v);
/* v as the shortest decimal that reads back as v (null when not finite). */
int serve_buf_float(serve_buf *b, float v);
/* n floats separated by commas (no brackets). */
int serve_buf_floats(serve_buf *b, const float *v, size_t n);
/* A small JSON value (a class label: string, integer, anything else through
 * jansson) as JSON text. */
int serve_buf_json(serve_buf *b, const json_t *v);
/* Takes the bytes (the caller frees them); the buffer is empty after. */
char *serve_buf_take(serve_buf *b, size_t *len);
void serve_buf_free(serve_buf *b);

/* The shortest decimal for v into out (at least 32 bytes), NUL-terminated;
 * returns its length. Not finite: "null". */
size_t serve_float_text(float v, char out[32]);

#endif
