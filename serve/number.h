/*
 * number.h - JSON numbers from a request body's text into doubles and
 * floats, for the predict service's decoders (serve/decode.c, and
 * serve/tensor.c for KServe's typed tensors).
 *
 * Every number is read strictly (RFC 8259: no leading zeros, no '+', no
 * bare '.') and converted exactly as strtod converts it, then cast to
 * float, so a value reads the same here as through jansson. Numbers whose
 * digits fit 2^53 with a power of ten up to 10^22 are converted without
 * strtod (Clinger's fast path: one correctly rounded multiply or divide);
 * the rest go to strtod. Pure functions: text in, numbers and an error out.
 */
#ifndef TY_SERVE_NUMBER_H
#define TY_SERVE_NUMBER_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"
#include "serve/jsonscan.h"

#define SERVE_MAX_NESTING 8 /* arrays in one example or tensor's data */

/* A JSON number's text (len bytes, nothing else) as strtod reads it: 1 and
 * *v, or 0 when it is not a JSON number. */
int serve_number_parse(const char *text, size_t len, double *v);

/* The numbers of the array at c->p ('['), nested up to SERVE_MAX_NESTING
 * levels, into x in order: counts them into *count (added to what it
 * holds) and writes only the first room of them (x may be NULL when room
 * is 0). Stops early once *count passes cap (the caller reports that).
 * path names the array in errors: TY_EINVAL "<path> must hold only
 * numbers" or "<path> is nested too deeply"; TY_EFORMAT (jsonscan_fail)
 * for what is not JSON, a number that overflows among them. */
ty_status serve_number_array(jsonscan_cur *c, float *x, uint64_t cap,
                             uint64_t room, uint64_t *count, const char *path,
                             int depth);

#endif
