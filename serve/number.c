/*
 * number.c - JSON numbers read straight into doubles and floats (see
 * number.h). The conversion is strtod's to the bit (tests/unit/test_decode
 * holds the cases), with Clinger's fast path for the numbers people send;
 * serve_number_array is the predict service's innermost loop, so the
 * cursor and the count live in locals there and plain integers of up to 9
 * digits skip the general reader.
 */
#include "serve/number.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    if (q + 1 < end && q[0] == '0' && jsonscan_is_digit(q[1]))
        return 0; /* JSON has no leading zeros */
    while (q < end && jsonscan_is_digit(*q)) {
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
        while (q < end && jsonscan_is_digit(*q)) {
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
        while (q < end && jsonscan_is_digit(*q)) {
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

int serve_number_parse(const char *text, size_t len, double *v)
{
    const char *p = text;
    return number_value(&p, text + len, v) && p == text + len;
}

ty_status serve_number_array(jsonscan_cur *c, float *x, uint64_t cap,
                             uint64_t room, uint64_t *count, const char *path,
                             int depth)
{
    if (depth >= SERVE_MAX_NESTING)
        return ty_fail(c->err, TY_EINVAL, path, "%s is nested too deeply",
                       path);
    c->p++;
    jsonscan_ws(c);
    if (jsonscan_at(c, ']')) {
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
            s = jsonscan_fail(c, "unexpected end of the body");
            break;
        }
        char ch = *p;
        /* Plain integers of up to 9 digits (pixels, counts): exact as
         * they are, no power of ten needed. */
        uint32_t iv = 0;
        const char *q = p;
        while (q < end && q - p < 9 && jsonscan_is_digit(*q))
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
            s = serve_number_array(c, x, cap, room, count, path, depth + 1);
            p = c->p;
            n = *count;
            if (s != TY_OK)
                break;
        } else if (ch == '-' || jsonscan_is_digit(ch)) {
            double v;
            q = p;
            if (!number_value(&q, end, &v) || isinf(v)) {
                c->p = p;
                s = jsonscan_fail(c, "invalid number");
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
        s = jsonscan_fail(c, "',' or ']' expected");
        *count = n;
        return s;
    }
    if (s == TY_OK)
        c->p = p;
    *count = n;
    return s;
}
