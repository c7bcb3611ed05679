/*
 * encode.c - replies written into a byte buffer (see encode.h).
 *
 * The shortest float: the value's 9 significant digits (always enough for
 * a float32 to read back exactly) are computed by scaling in double, then
 * cut to p digits (the decimal just below and just above) and read back;
 * reading back succeeds for every p from the shortest one up, so a binary
 * search over p = 1..9 needs three or four reads. Both steps are exact
 * double arithmetic (Clinger's fast path) with snprintf and strtof only
 * where a value sits too near a rounding boundary to be sure: ~120 ns a
 * float instead of ~900 ns through snprintf and strtof alone, with the
 * same output (compared on 5 million random bit patterns). The search
 * and the layout are common/numtext.c's, shared with the doubles of every
 * other JSON text the server writes.
 */
#include "serve/encode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/numtext.h"

int serve_buf_ok(const serve_buf *b) { return !b->failed; }

int serve_buf_reserve(serve_buf *b, size_t n)
{
    if (b->failed)
        return 0;
    if (b->len + n + 1 <= b->cap)
        return 1;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->failed = 1;
        return 0;
    }
    b->p = p;
    b->cap = cap;
    return 1;
}

int serve_buf_add(serve_buf *b, const void *data, size_t n)
{
    if (!serve_buf_reserve(b, n))
        return 0;
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 1;
}

int serve_buf_str(serve_buf *b, const char *s)
{
    return serve_buf_add(b, s, strlen(s));
}

int serve_buf_json_string(serve_buf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    if (!serve_buf_reserve(b, strlen(s) * 6 + 2))
        return 0;
    char *o = b->p + b->len;
    *o++ = '"';
    for (const unsigned char *q = (const unsigned char *)s; *q; q++) {
        if (*q == '"' || *q == '\\') {
            *o++ = '\\';
            *o++ = (char)*q;
        } else if (*q < 0x20) {
            *o++ = '\\';
            *o++ = 'u';
            *o++ = '0';
            *o++ = '0';
            *o++ = hex[*q >> 4];
            *o++ = hex[*q & 15];
        } else {
            *o++ = (char)*q;
        }
    }
    *o++ = '"';
    b->len = (size_t)(o - b->p);
    b->p[b->len] = '\0';
    return 1;
}

int serve_buf_int(serve_buf *b, int64_t v)
{
    char t[24];
    int n = snprintf(t, sizeof t, "%lld", (long long)v);
    return serve_buf_add(b, t, (size_t)n);
}

/* Whether d (a double near a float) is so close to the midpoint between
 * two floats, or in the subnormal range, that converting it to float may
 * differ from converting the exact decimal it stands for. */
static int near_midpoint(double d)
{
    if (d < 0x1p-126)
        return 1;
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    int64_t low = (int64_t)(bits & ((1ull << 29) - 1)); /* below float's */
    return low >= (1ll << 28) - 8 && low <= (1ll << 28) + 8;
}

/* Whether the decimal digits (p of them) x 10^exp10 reads back as |v|:
 * exactly by one correctly rounded multiply or divide of exact doubles
 * (Clinger), near a midpoint or outside the table by strtof. */
static int reads_back_slow(float v, const char *digits, int p, int exp10);

static int reads_back(float v, const char *digits, int p, int exp10)
{
    int e = exp10 - (p - 1);
    if (e >= -22 && e <= 22) {
        double m = 0;
        for (int i = 0; i < p; i++)
            m = m * 10 + (digits[i] - '0');
        double d = e < 0 ? m / numtext_pow10(-e) : m * numtext_pow10(e);
        if (!near_midpoint(d))
            return (float)d == fabsf(v);
    }
    return reads_back_slow(v, digits, p, exp10);
}

static int reads_back_slow(float v, const char *digits, int p, int exp10)
{
    char t[40];
    int n = 0;
    t[n++] = digits[0];
    t[n++] = '.';
    memcpy(t + n, digits + 1, (size_t)(p - 1));
    n += p - 1;
    snprintf(t + n, sizeof t - (size_t)n, "e%d", exp10);
    return strtof(t, NULL) == fabsf(v);
}

static int float_reads_back(const void *value, const char *digits, int p,
                            int exp10)
{
    return reads_back(*(const float *)value, digits, p, exp10);
}

/* v (positive, finite) with 9 significant digits, correctly rounded as
 * "%.8e" prints them: by scaling in double (v has 24 bits, a double 53, so
 * the product is within a few units of 10^-16 of the exact value), or by
 * snprintf when that leaves the ninth digit's rounding in doubt. */
static void nine_digits(float v, char digits[10], int *exp10)
{
    double d = v;
    int e2;
    frexp(d, &e2);
    int k = (int)floor((e2 - 1) * 0.30102999566398120); /* ~log10(d) */
    double scaled = 0;
    if (8 - k >= NUMTEXT_POW10_MIN && 8 - k <= NUMTEXT_POW10_MAX - 1) {
        scaled = d * numtext_pow10(8 - k);
        if (scaled >= 1e9) {
            k++;
            scaled = d * numtext_pow10(8 - k);
        } else if (scaled < 1e8) {
            k--;
            scaled = d * numtext_pow10(8 - k);
        }
    }
    double fl = floor(scaled), frac = scaled - fl;
    if (scaled >= 1e8 && scaled < 1e9 && fabs(frac - 0.5) > 1e-6) {
        uint64_t n = (uint64_t)fl + (frac > 0.5);
        if (n < 1000000000ull) {
            for (int i = 8; i >= 0; i--, n /= 10)
                digits[i] = (char)('0' + n % 10);
            digits[9] = '\0';
            *exp10 = k;
            return;
        }
    }
    char sci[32];
    snprintf(sci, sizeof sci, "%.8e", d);
    /* "d.dddddddde[+-]XX" */
    digits[0] = sci[0];
    memcpy(digits + 1, sci + 2, 8);
    digits[9] = '\0';
    *exp10 = atoi(sci + 11);
}

size_t serve_float_text(float v, char out[32])
{
    if (!isfinite(v)) {
        memcpy(out, "null", 5);
        return 4;
    }
    if (v == 0.0f) {
        const char *z = signbit(v) ? "-0.0" : "0.0";
        strcpy(out, z);
        return strlen(z);
    }
    char digits[10];
    int exp10;
    float mag = fabsf(v);
    nine_digits(mag, digits, &exp10);
    return numtext_shortest(signbit(v) != 0, digits, 9, exp10, float_reads_back,
                            &mag, out);
}

int serve_buf_float(serve_buf *b, float v)
{
    char t[32];
    size_t n = serve_float_text(v, t);
    return serve_buf_add(b, t, n);
}

int serve_buf_floats(serve_buf *b, const float *v, size_t n)
{
    if (!serve_buf_reserve(b, n * 16))
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (i && !serve_buf_add(b, ",", 1))
            return 0;
        if (!serve_buf_float(b, v[i]))
            return 0;
    }
    return 1;
}

int serve_buf_json(serve_buf *b, const json_t *v)
{
    if (json_is_string(v) &&
        strlen(json_string_value(v)) == json_string_length(v))
        return serve_buf_json_string(b, json_string_value(v));
    if (json_is_integer(v))
        return serve_buf_int(b, (int64_t)json_integer_value(v));
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!t) {
        b->failed = 1;
        return 0;
    }
    int ok = serve_buf_str(b, t);
    free(t);
    return ok;
}

char *serve_buf_take(serve_buf *b, size_t *len)
{
    if (b->failed) {
        serve_buf_free(b);
        return NULL;
    }
    if (!b->p && !serve_buf_reserve(b, 0))
        return NULL;
    char *p = b->p;
    if (len)
        *len = b->len;
    memset(b, 0, sizeof *b);
    return p;
}

void serve_buf_free(serve_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}
