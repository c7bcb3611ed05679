/*
 * numtext.h - numbers as the shortest decimal that reads back as the same
 * value: 0.1 is "0.1", not "0.10000000000000001" (jansson's "%.17g").
 *
 * Float32 outputs (serve/encode.c) and doubles in every JSON text the
 * server writes (common/jsonutil.c) share the search and the layout here:
 * plain notation for decimal exponents -5..16, else d.ddde[+-]XX, always
 * with a point or an exponent ("3.0", "1.0e-07"), so that a JSON reader
 * keeps the number a real. A value that is not finite is "null" (JSON has
 * no NaN or infinity).
 */
#ifndef TY_NUMTEXT_H
#define TY_NUMTEXT_H

#include <stddef.h>

/* Room for any text numtext writes, NUL included. */
#define NUMTEXT_MAX 32
/* The most significant digits the search takes (a double's 17). */
#define NUMTEXT_DIGITS_MAX 17

/* 10^e as the nearest double, for e in [NUMTEXT_POW10_MIN,
 * NUMTEXT_POW10_MAX]; exact for 0..22. */
#define NUMTEXT_POW10_MIN (-32)
#define NUMTEXT_POW10_MAX 56
double numtext_pow10(int e);

/* Whether the decimal of digits (p of them, d.ddd x 10^exp10) reads back as
 * the value (its magnitude), which the caller passes as an opaque pointer. */
typedef int (*numtext_reads_back_fn)(const void *value, const char *digits,
                                     int p, int exp10);

/* The shortest decimal for a value of sign neg whose magnitude's digits
 * (max_p of them, correctly rounded; enough always to read back) are
 * d.ddd x 10^exp10, into out; returns its length. Reading back succeeds
 * for every p from the shortest up, so p is found by a binary search, each
 * p trying the p-digit decimal just below and the one just above. */
size_t numtext_shortest(int neg, const char *digits, int max_p, int exp10,
                        numtext_reads_back_fn reads_back, const void *value,
                        char out[NUMTEXT_MAX]);

/* v as the shortest decimal that strtod reads back as v, into out; returns
 * its length. -0.0 is "-0.0"; not finite: "null". */
size_t numtext_double(double v, char out[NUMTEXT_MAX]);

#endif
