/*
 * tensor.c - KServe v2 tensors to and from float32 (see tensor.h).
 *
 * Integers from JSON are read from their digits (strtoll/strtoull), never
 * through a double, so INT64 and UINT64 limits are exact; a number with a
 * fraction or an exponent is no integer here, as in Triton. Floats are read
 * with strtod, as the predict decoder reads them, so FP32 data gives the
 * same floats as POST /v1/models/{id}/predict.
 */
#include "serve/tensor.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/encode.h"
#include "serve/number.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [SERVE_DT_BOOL] = {"BOOL", 1},     [SERVE_DT_UINT8] = {"UINT8", 1},
    [SERVE_DT_UINT16] = {"UINT16", 2}, [SERVE_DT_UINT32] = {"UINT32", 4},
    [SERVE_DT_UINT64] = {"UINT64", 8}, [SERVE_DT_INT8] = {"INT8", 1},
    [SERVE_DT_INT16] = {"INT16", 2},   [SERVE_DT_INT32] = {"INT32", 4},
    [SERVE_DT_INT64] = {"INT64", 8},   [SERVE_DT_FP16] = {"FP16", 2},
    [SERVE_DT_BF16] = {"BF16", 2},     [SERVE_DT_FP32] = {"FP32", 4},
    [SERVE_DT_FP64] = {"FP64", 8},     [SERVE_DT_BYTES] = {"BYTES", 0},
};
_Static_assert(TY_ARRAY_LEN(dtypes) == SERVE_DT_COUNT,
               "a name for every datatype");

int serve_dtype_parse(const char *name, serve_dtype *dt)
{
    for (int i = 0; name && i < SERVE_DT_COUNT; i++)
        if (!strcmp(name, dtypes[i].name)) {
            *dt = (serve_dtype)i;
            return 1;
        }
    return 0;
}

const char *serve_dtype_name(serve_dtype dt)
{
    return (unsigned)dt < SERVE_DT_COUNT ? dtypes[dt].name : "?";
}

size_t serve_dtype_size(serve_dtype dt)
{
    return (unsigned)dt < SERVE_DT_COUNT ? dtypes[dt].size : 0;
}

/* ---- half and bfloat16 ---- */

float serve_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v;
    if (e == 0) {
        v = ldexpf((float)m, -24); /* zero or subnormal */
    } else if (e == 31) {
        v = m ? NAN : INFINITY;
    } else {
        v = ldexpf((float)(m | 0x400), (int)e - 25);
    }
    return sign ? -v : v;
}

float serve_bf16_to_float(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* v rounded to a float format with mant_bits fraction bits, the smallest
 * normal exponent min_exp (v = 1.f x 2^e) and the largest finite max;
 * ties to even (rint under the default rounding mode). */
static double round_to(double v, int mant_bits, int min_exp, double max,
                       int *finite)
{
    double a = fabs(v);
    *finite = 1;
    if (a == 0 || !isfinite(a)) {
        *finite = isfinite(a);
        return v;
    }
    int e;
    frexp(a, &e); /* a = m * 2^e, m in [0.5, 1): 1.f x 2^(e-1) */
    e -= 1;
    if (e < min_exp)
        e = min_exp; /* subnormal: the smallest normal's quantum */
    double q = ldexp(1.0, e - mant_bits);
    double r = rint(a / q) * q;
    if (r > max) {
        *finite = 0;
        return v;
    }
    return v < 0 ? -r : r;
}

double serve_round_half(double v, int *finite)
{
    return round_to(v, 10, -14, 65504.0, finite);
}

static double round_bf16(double v, int *finite)
{
    /* bfloat16's largest finite: (2 - 2^-7) x 2^127 */
    return round_to(v, 7, -126, ldexp(255.0, 120), finite);
}

/* ---- one value, checked ---- */

typedef struct {
    serve_dtype dt;
    const char *name;
    float *x;
} conv;

static ty_status out_of_range(const conv *cv, uint64_t i, const char *text,
                              ty_err *err)
{
    static const char *const ranges[] = {
        [SERVE_DT_BOOL] = "true or false",
        [SERVE_DT_UINT8] = "0 to 255",
        [SERVE_DT_UINT16] = "0 to 65535",
        [SERVE_DT_UINT32] = "0 to 4294967295",
        [SERVE_DT_UINT64] = "0 to 18446744073709551615",
        [SERVE_DT_INT8] = "-128 to 127",
        [SERVE_DT_INT16] = "-32768 to 32767",
        [SERVE_DT_INT32] = "-2147483648 to 2147483647",
        [SERVE_DT_INT64] = "-9223372036854775808 to 9223372036854775807",
        [SERVE_DT_FP16] = "finite, magnitude at most 65504",
        [SERVE_DT_BF16] = "finite, magnitude at most 3.39e38",
        [SERVE_DT_FP32] = "finite, magnitude at most 3.40e38",
        [SERVE_DT_FP64] = ("finite and within float32, magnitude at most "
                           "3.40e38, as the model computes in float32"),
        [SERVE_DT_BYTES] = "-",
    };
    return ty_fail(err, TY_EINVAL, NULL,
                   "input \"%s\": data[%llu]: %s is out of range for %s (%s)",
                   cv->name, (unsigned long long)i, text, dtypes[cv->dt].name,
                   ranges[cv->dt]);
}

/* A finite double of a float type into *out as float32, after rounding
 * to its type; 0 when it does not fit. */
static int float_fits(serve_dtype dt, double v, float *out)
{
    int finite = isfinite(v);
    if (dt == SERVE_DT_FP16)
        v = serve_round_half(v, &finite);
    else if (dt == SERVE_DT_BF16)
        v = round_bf16(v, &finite);
    if (!finite)
        return 0;
    float f = (float)v;
    if (!isfinite(f))
        return 0;
    *out = f;
    return 1;
}

/* Whether an integer (signed types: sv; unsigned: uv, negated when neg)
 * is in dt's range. */
static int int_fits(serve_dtype dt, int neg, long long sv,
                    unsigned long long uv)
{
    if (neg && uv != 0 && dt >= SERVE_DT_UINT8 && dt <= SERVE_DT_UINT64)
        return 0; /* -0 is 0 */
    switch (dt) {
        case SERVE_DT_UINT8: return uv <= 0xff;
        case SERVE_DT_UINT16: return uv <= 0xffff;
        case SERVE_DT_UINT32: return uv <= 0xffffffffull;
        case SERVE_DT_UINT64: return 1;
        case SERVE_DT_INT8: return sv >= -128 && sv <= 127;
        case SERVE_DT_INT16: return sv >= -32768 && sv <= 32767;
        case SERVE_DT_INT32: return sv >= -2147483648LL && sv <= 2147483647LL;
        case SERVE_DT_INT64: return 1;
        default: return 0;
    }
}

static int is_signed(serve_dtype dt)
{
    return dt >= SERVE_DT_INT8 && dt <= SERVE_DT_INT64;
}

static int is_unsigned(serve_dtype dt)
{
    return dt >= SERVE_DT_UINT8 && dt <= SERVE_DT_UINT64;
}

static int is_float(serve_dtype dt)
{
    return dt >= SERVE_DT_FP16 && dt <= SERVE_DT_FP64;
}

/* The JSON text of one value into x[i]. */
/* A value's text as shown in an error (at most 32 bytes of it). */
static void shown_of(const char *text, size_t len, char shown[40])
{
    snprintf(shown, 40, "%.*s%s", len > 32 ? 32 : (int)len, text,
             len > 32 ? "..." : "");
}

static ty_status json_value(void *ctx, uint64_t i, serve_token kind,
                            const char *text, size_t len, ty_err *err)
{
    conv *cv = ctx;
    char shown[40];
    if (cv->dt == SERVE_DT_BOOL) {
        if (kind == SERVE_TOK_TRUE || kind == SERVE_TOK_FALSE) {
            cv->x[i] = kind == SERVE_TOK_TRUE ? 1.0f : 0.0f;
            return TY_OK;
        }
        shown_of(text, len, shown);
        return ty_fail(err, TY_EINVAL, NULL,
                       "input \"%s\": data[%llu]: %s is not a BOOL (send "
                       "true or false)",
                       cv->name, (unsigned long long)i, shown);
    }
    if (kind != SERVE_TOK_NUMBER) {
        shown_of(text, len, shown);
        return ty_fail(err, TY_EINVAL, NULL,
                       "input \"%s\": data[%llu]: %s is not a number; %s "
                       "data holds only numbers",
                       cv->name, (unsigned long long)i, shown,
                       dtypes[cv->dt].name);
    }
    if (is_float(cv->dt)) {
        double v;
        if (serve_number_parse(text, len, &v) &&
            float_fits(cv->dt, v, &cv->x[i]))
            return TY_OK;
        shown_of(text, len, shown);
        return out_of_range(cv, i, shown, err);
    }
    /* Integers: plain digits of up to 18 (every value of the integer
     * types but the 19- and 20-digit ends of INT64 and UINT64, which go
     * through strtoll/strtoull below). */
    int neg = text[0] == '-';
    size_t d0 = (size_t)neg;
    if (len > d0 && len - d0 <= 18) {
        uint64_t u = 0;
        size_t j = d0;
        while (j < len && text[j] >= '0' && text[j] <= '9')
            u = u * 10 + (uint64_t)(text[j++] - '0');
        if (j == len) {
            long long sv = neg ? -(long long)u : (long long)u;
            if (int_fits(cv->dt, neg, sv, u) &&
                (is_signed(cv->dt) || is_unsigned(cv->dt))) {
                cv->x[i] = is_signed(cv->dt) ? (float)sv : (float)u;
                return TY_OK;
            }
            shown_of(text, len, shown);
            return out_of_range(cv, i, shown, err);
        }
    }
    shown_of(text, len, shown);
    char buf[64], *t = buf, *end;
    if (len >= sizeof buf && !(t = malloc(len + 1)))
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    memcpy(t, text, len);
    t[len] = '\0';
    ty_status s = TY_OK;
    if (strpbrk(t, ".eE")) {
        s = ty_fail(err, TY_EINVAL, NULL,
                    "input \"%s\": data[%llu]: %s is not an integer; %s data "
                    "holds only integers",
                    cv->name, (unsigned long long)i, shown,
                    dtypes[cv->dt].name);
    } else {
        long long sv = 0;
        unsigned long long uv = 0;
        errno = 0;
        if (is_signed(cv->dt))
            sv = strtoll(t, &end, 10);
        else
            uv = strtoull(neg ? t + 1 : t, &end, 10);
        int ok = errno == 0 && end == t + len &&
                 int_fits(cv->dt, neg, sv, uv) &&
                 (is_signed(cv->dt) || is_unsigned(cv->dt));
        if (!ok)
            s = out_of_range(cv, i, shown, err);
        else
            cv->x[i] = is_signed(cv->dt) ? (float)sv : (float)uv;
    }
    if (t != buf)
        free(t);
    return s;
}

static ty_status no_bytes(const char *name, ty_err *err)
{
    return ty_fail(err, TY_EINVAL, NULL,
                   "input \"%s\": datatype BYTES is not supported: the model "
                   "takes numbers (send FP32 or another numeric datatype)",
                   name);
}

ty_status serve_tensor_from_json(serve_dtype dt, serve_span data, uint64_t n,
                                 const char *name, float *x, ty_err *err)
{
    if (dt == SERVE_DT_BYTES || (unsigned)dt >= SERVE_DT_COUNT)
        return no_bytes(name, err);
    /* FP32 (what clients send most): the predict path's reader, numbers
     * straight into floats; any doubt (a value past float's range, a
     * non-number, a wrong count) goes to the walk below, which says what
     * is wrong exactly as it always has. */
    if (dt == SERVE_DT_FP32) {
        ty_err quiet = {0};
        int ok = serve_infer_decode(data, n, "data", x, &quiet) == TY_OK;
        for (uint64_t i = 0; ok && i < n; i++)
            ok = isfinite(x[i]);
        if (ok)
            return TY_OK;
    }
    char what[320];
    snprintf(what, sizeof what, "input \"%s\"", name);
    conv cv = {dt, name, x};
    return serve_infer_walk(data, n, what, json_value, &cv, err);
}

static uint64_t load_le(const unsigned char *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

ty_status serve_tensor_from_binary(serve_dtype dt, const void *raw, size_t len,
                                   uint64_t n, const char *name, float *x,
                                   ty_err *err)
{
    if (dt == SERVE_DT_BYTES || (unsigned)dt >= SERVE_DT_COUNT)
        return no_bytes(name, err);
    size_t size = dtypes[dt].size;
    if (n > SIZE_MAX / size || len != n * size)
        return ty_fail(err, TY_EINVAL, NULL,
                       "input \"%s\": the binary data is %zu bytes; shape and "
                       "datatype %s say %llu x %zu = %llu",
                       name, len, dtypes[dt].name, (unsigned long long)n, size,
                       (unsigned long long)n * size);
    const unsigned char *p = raw;
    conv cv = {dt, name, x};
    for (uint64_t i = 0; i < n; i++, p += size) {
        uint64_t u = load_le(p, size);
        float f = 0;
        int ok = 1;
        char shown[40];
        switch (dt) {
            case SERVE_DT_BOOL:
                ok = u <= 1;
                f = (float)u;
                snprintf(shown, sizeof shown, "the byte %u", (unsigned)u);
                break;
            case SERVE_DT_UINT8:
            case SERVE_DT_UINT16:
            case SERVE_DT_UINT32:
            case SERVE_DT_UINT64: f = (float)u; break;
            case SERVE_DT_INT8: f = (float)(int8_t)u; break;
            case SERVE_DT_INT16: f = (float)(int16_t)u; break;
            case SERVE_DT_INT32: f = (float)(int32_t)u; break;
            case SERVE_DT_INT64: f = (float)(int64_t)u; break;
            case SERVE_DT_FP16:
                f = serve_half_to_float((uint16_t)u);
                ok = isfinite(f);
                break;
            case SERVE_DT_BF16:
                f = serve_bf16_to_float((uint16_t)u);
                ok = isfinite(f);
                break;
            case SERVE_DT_FP32: {
                uint32_t b = (uint32_t)u;
                memcpy(&f, &b, sizeof f);
                ok = isfinite(f);
                break;
            }
            case SERVE_DT_FP64: {
                double d;
                memcpy(&d, &u, sizeof d);
                ok = float_fits(dt, d, &f);
                if (!ok)
                    snprintf(shown, sizeof shown, "%.17g", d);
                break;
            }
            default: ok = 0; break;
        }
        if (!ok) {
            if (dt != SERVE_DT_BOOL && dt != SERVE_DT_FP64) {
                if (isnan(f))
                    snprintf(shown, sizeof shown, "NaN");
                else
                    snprintf(shown, sizeof shown, "%sinfinity",
                             f < 0 ? "-" : "");
            }
            return out_of_range(&cv, i, shown, err);
        }
        x[i] = f;
    }
    return TY_OK;
}

ty_status serve_tensor_split(size_t len, const char *header_len,
                             size_t *json_len, ty_err *err)
{
    if (!header_len) {
        *json_len = len;
        return TY_OK;
    }
    const char *p = header_len;
    while (*p == ' ' || *p == '\t')
        p++;
    uint64_t v = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        if (v > (UINT64_MAX - 9) / 10)
            break;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    while (*p == ' ' || *p == '\t')
        p++;
    if (!digits || *p || v > len)
        return ty_fail(err, TY_EINVAL, NULL,
                       "Inference-Header-Content-Length must be the length of "
                       "the JSON header at the start of the body: a decimal "
                       "from 0 to %zu (got \"%.32s\")",
                       len, header_len);
    *json_len = (size_t)v;
    return TY_OK;
}

/* ---- classification ---- */

/* Whether index a of row comes before index b: the larger value first, a
 * NaN after every number, the lower index first on a tie. */
static int ranks_before(const float *row, uint32_t a, uint32_t b)
{
    float x = row[a], y = row[b];
    if (isnan(x) != isnan(y))
        return isnan(y);
    if (!isnan(x) && x != y)
        return x > y;
    return a < b;
}

void serve_tensor_top(const float *row, uint32_t k, uint32_t *idx,
                      uint32_t *scratch)
{
    /* A bottom-up merge sort of all k indices: O(k log k) whatever count
     * is (a classifier may have thousands of classes), and stable. */
    for (uint32_t j = 0; j < k; j++)
        idx[j] = j;
    uint32_t *from = idx, *to = scratch;
    for (uint64_t w = 1; w < k; w *= 2) {
        for (uint64_t lo = 0; lo < k; lo += 2 * w) {
            uint64_t mid = lo + w < k ? lo + w : k;
            uint64_t hi = lo + 2 * w < k ? lo + 2 * w : k;
            uint64_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi)
                to[o++] =
                    ranks_before(row, from[j], from[i]) ? from[j++] : from[i++];
            while (i < mid)
                to[o++] = from[i++];
            while (j < hi)
                to[o++] = from[j++];
        }
        uint32_t *t = from;
        from = to;
        to = t;
    }
    if (from != idx)
        memcpy(idx, from, (size_t)k * sizeof *idx);
}

size_t serve_tensor_class_text(float score, uint32_t index,
                               const json_t *classes, char *out, size_t n)
{
    char num[32];
    serve_float_text(score, num);
    const json_t *label = json_array_get(classes, index);
    int w;
    if (json_is_string(label))
        w = snprintf(out, n, "%s:%u:%s", num, index, json_string_value(label));
    else if (json_is_integer(label))
        w = snprintf(out, n, "%s:%u:%lld", num, index,
                     (long long)json_integer_value(label));
    else
        w = snprintf(out, n, "%s:%u", num, index);
    if (w < 0)
        return 0;
    return (size_t)w < n ? (size_t)w : (n ? n - 1 : 0);
}
