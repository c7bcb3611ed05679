/*
 * numtext.c - shortest decimals that read back (see numtext.h).
 *
 * A double's 17 digits come from snprintf's "%.16e" (correctly rounded by
 * glibc); a candidate of at most 15 digits with a decimal exponent within
 * +-22 is read back by one correctly rounded multiply or divide of exact
 * doubles (Clinger's fast path: the digits are an integer below 2^53 and
 * 10^0..10^22 are exact, so the one rounding is strtod's); anything else
 * by strtod. Float32s bring their own digits and read-back test
 * (serve/encode.c).
 */
#include "common/numtext.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double pow10_table[] = {
    1e-32, 1e-31, 1e-30, 1e-29, 1e-28, 1e-27, 1e-26, 1e-25, 1e-24, 1e-23,
    1e-22, 1e-21, 1e-20, 1e-19, 1e-18, 1e-17, 1e-16, 1e-15, 1e-14, 1e-13,
    1e-12, 1e-11, 1e-10, 1e-9,  1e-8,  1e-7,  1e-6,  1e-5,  1e-4,  1e-3,
    1e-2,  1e-1,  1e0,   1e1,   1e2,   1e3,   1e4,   1e5,   1e6,   1e7,
    1e8,   1e9,   1e10,  1e11,  1e12,  1e13,  1e14,  1e15,  1e16,  1e17,
    1e18,  1e19,  1e20,  1e21,  1e22,  1e23,  1e24,  1e25,  1e26,  1e27,
    1e28,  1e29,  1e30,  1e31,  1e32,  1e33,  1e34,  1e35,  1e36,  1e37,
    1e38,  1e39,  1e40,  1e41,  1e42,  1e43,  1e44,  1e45,  1e46,  1e47,
    1e48,  1e49,  1e50,  1e51,  1e52,  1e53,  1e54,  1e55,  1e56};
_Static_assert(sizeof pow10_table / sizeof pow10_table[0] ==
                   NUMTEXT_POW10_MAX - NUMTEXT_POW10_MIN + 1,
               "a power of ten for every exponent in the range");

double numtext_pow10(int e) { return pow10_table[e - NUMTEXT_POW10_MIN]; }

/* digits cut to p digits into out, plus one unit in the last place when
 * up; *exp10 moves by one when that carries out (9.99 -> 10.0). */
static void cut_digits(const char *digits, int p, int up, char *out, int *exp10)
{
    memcpy(out, digits, (size_t)p);
    out[p] = '\0';
    if (!up)
        return;
    int i = p - 1;
    while (i >= 0 && out[i] == '9')
        out[i--] = '0';
    if (i >= 0) {
        out[i]++;
    } else {
        memmove(out + 1, out, (size_t)p);
        out[0] = '1';
        out[p] = '\0'; /* still p digits: the last 0 drops */
        (*exp10)++;
    }
}

/* The decimal of digits (p of them, d.ddd x 10^exp10) in out: plain
 * notation for exponents -5..16, else d.ddde[+-]XX, with at least one
 * digit after the point ("3.0"). */
static size_t layout(int neg, const char *digits, int p, int exp10, char *out)
{
    while (p > 1 && digits[p - 1] == '0')
        p--;
    char *o = out;
    if (neg)
        *o++ = '-';
    if (exp10 >= -5 && exp10 < 17) {
        if (exp10 < 0) {
            *o++ = '0';
            *o++ = '.';
            for (int i = -1; i > exp10; i--)
                *o++ = '0';
            memcpy(o, digits, (size_t)p);
            o += p;
        } else {
            for (int i = 0; i <= exp10; i++)
                *o++ = i < p ? digits[i] : '0';
            *o++ = '.';
            if (p > exp10 + 1) {
                memcpy(o, digits + exp10 + 1, (size_t)(p - exp10 - 1));
                o += p - exp10 - 1;
            } else {
                *o++ = '0';
            }
        }
    } else {
        *o++ = digits[0];
        *o++ = '.';
        if (p > 1) {
            memcpy(o, digits + 1, (size_t)(p - 1));
            o += p - 1;
        } else {
            *o++ = '0';
        }
        o += sprintf(o, "e%c%02d", exp10 < 0 ? '-' : '+',
                     exp10 < 0 ? -exp10 : exp10);
    }
    *o = '\0';
    return (size_t)(o - out);
}

size_t numtext_shortest(int neg, const char *digits, int max_p, int exp10,
                        numtext_reads_back_fn reads_back, const void *value,
                        char out[NUMTEXT_MAX])
{
    int lo = 1, hi = max_p; /* max_p digits always read back */
    char best[NUMTEXT_DIGITS_MAX + 2];
    int best_exp = exp10;
    memcpy(best, digits, (size_t)max_p);
    best[max_p] = '\0';
    /* p digits work when the p-digit decimal just below the value or the
     * one just above reads back; the nearer one (by the next digit) is
     * tried first. */
    while (lo < hi) {
        int mid = (lo + hi) / 2, found = 0;
        int near_up = digits[mid] >= '5';
        for (int k = 0; k < 2 && !found; k++) {
            int e = exp10;
            char cand[NUMTEXT_DIGITS_MAX + 2];
            cut_digits(digits, mid, k == 0 ? near_up : !near_up, cand, &e);
            if (reads_back(value, cand, mid, e)) {
                found = 1;
                memcpy(best, cand, (size_t)mid + 1);
                best_exp = e;
            }
        }
        if (found)
            hi = mid;
        else
            lo = mid + 1;
    }
    if (hi == max_p) {
        memcpy(best, digits, (size_t)max_p);
        best_exp = exp10;
    }
    return layout(neg, best, hi, best_exp, out);
}

static int double_reads_back(const void *value, const char *digits, int p,
                             int exp10)
{
    double v = *(const double *)value;
    int e = exp10 - (p - 1);
#if FLT_EVAL_METHOD == 0
    if (p <= 15 && e >= -22 && e <= 22) {
        double m = 0;
        for (int i = 0; i < p; i++)
            m = m * 10 + (digits[i] - '0');
        return (e < 0 ? m / numtext_pow10(-e) : m * numtext_pow10(e)) == v;
    }
#endif
    char t[NUMTEXT_DIGITS_MAX + 16];
    int n = 0;
    t[n++] = digits[0];
    t[n++] = '.';
    memcpy(t + n, digits + 1, (size_t)(p - 1));
    n += p - 1;
    snprintf(t + n, sizeof t - (size_t)n, "e%d", exp10);
    return strtod(t, NULL) == v;
}

size_t numtext_double(double v, char out[NUMTEXT_MAX])
{
    if (!isfinite(v)) {
        memcpy(out, "null", 5);
        return 4;
    }
    if (v == 0.0) {
        const char *z = signbit(v) ? "-0.0" : "0.0";
        strcpy(out, z);
        return strlen(z);
    }
    double mag = fabs(v);
    char sci[40], digits[NUMTEXT_DIGITS_MAX + 1];
    /* "d.dddddddddddddddde[+-]XX[X]" */
    snprintf(sci, sizeof sci, "%.16e", mag);
    digits[0] = sci[0];
    memcpy(digits + 1, sci + 2, 16);
    digits[17] = '\0';
    int exp10 = atoi(sci + 19);
    return numtext_shortest(signbit(v) != 0, digits, NUMTEXT_DIGITS_MAX, exp10,
                            double_reads_back, &mag, out);
}
