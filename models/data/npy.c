/*
 * npy.c - NPY x and y arrays -> TYDS dataset (see ds_convert_npy in
 * dataset.h).
 *
 * An NPY file is "\x93NUMPY", a version (1.0, 2.0 or 3.0), a little-endian
 * header length (u16 in 1.0, u32 later), a header that is a Python dict
 * literal - {'descr': '<f4', 'fortran_order': False, 'shape': (N, 4), } - and
 * the raw array. We parse the literal with a small recursive-descent reader
 * rather than pattern matching, so spacing, quote style, trailing commas and
 * Python 2's 10L integers all work.
 *
 * y is read twice: once to validate it and find the largest class (the meta's
 * class list depends on it), and again after x to write it. x streams once,
 * converted chunk by chunk. Nothing proportional to the data is kept.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/data/dataset.h"
#include "models/data/file.h"
#include "models/data/input.h"

#define NPY_MAX_HEADER 65536u
#define NPY_MAX_NDIM 32

typedef enum { NPY_F4, NPY_F8, NPY_U1, NPY_I4, NPY_I8 } npy_kind;

static const struct {
    const char *descr;
    npy_kind kind;
} npy_dtypes[] = {
    {"<f4", NPY_F4}, {"<f8", NPY_F8}, {"|u1", NPY_U1},
    {"<u1", NPY_U1}, {"<i4", NPY_I4}, {"<i8", NPY_I8},
};

static const size_t npy_itemsize[] = {
    [NPY_F4] = 4, [NPY_F8] = 8, [NPY_U1] = 1, [NPY_I4] = 4, [NPY_I8] = 8};

typedef struct {
    char descr[32];
    npy_kind kind;
    int fortran_order;
    uint32_t ndim;
    uint64_t shape[NPY_MAX_NDIM];
    uint64_t data_offset; /* where the array starts in the file */
} npy_header;

/* ---- the header dict ------------------------------------------------------ */

typedef struct {
    const char *p, *end, *start;
    const char *why; /* what was wrong, for the message */
} npy_lex;

static void lex_ws(npy_lex *l)
{
    while (l->p < l->end &&
           (*l->p == ' ' || *l->p == '\t' || *l->p == '\n' || *l->p == '\r'))
        l->p++;
}

static int lex_char(npy_lex *l, char c)
{
    lex_ws(l);
    if (l->p < l->end && *l->p == c) {
        l->p++;
        return 1;
    }
    return 0;
}

/* A quoted string without escapes into out (size n). */
static int lex_string(npy_lex *l, char *out, size_t n)
{
    lex_ws(l);
    if (l->p >= l->end || (*l->p != '\'' && *l->p != '"')) {
        l->why = "expected a quoted string";
        return 0;
    }
    char q = *l->p++;
    size_t len = 0;
    while (l->p < l->end && *l->p != q) {
        if (*l->p == '\\' || len + 1 >= n) {
            l->why = *l->p == '\\' ? "escapes in strings are not supported"
                                   : "string too long";
            return 0;
        }
        out[len++] = *l->p++;
    }
    if (l->p >= l->end) {
        l->why = "unterminated string";
        return 0;
    }
    l->p++;
    out[len] = '\0';
    return 1;
}

static int lex_word(npy_lex *l, const char *w)
{
    size_t n = strlen(w);
    lex_ws(l);
    if ((size_t)(l->end - l->p) >= n && !memcmp(l->p, w, n)) {
        l->p += n;
        return 1;
    }
    return 0;
}

/* A non-negative integer (Python 2 files may end it with L). */
static int lex_uint(npy_lex *l, uint64_t *out)
{
    lex_ws(l);
    uint64_t v = 0;
    const char *s = l->p;
    while (l->p < l->end && *l->p >= '0' && *l->p <= '9') {
        if (v > (UINT64_MAX - 9) / 10) {
            l->why = "a size is too large";
            return 0;
        }
        v = v * 10 + (uint64_t)(*l->p++ - '0');
    }
    if (l->p == s) {
        l->why = "expected a size";
        return 0;
    }
    if (l->p < l->end && *l->p == 'L')
        l->p++;
    *out = v;
    return 1;
}

/* (a, b, ...) with an optional trailing comma; () is a scalar. */
static int lex_shape(npy_lex *l, npy_header *h)
{
    h->ndim = 0;
    if (!lex_char(l, '(')) {
        l->why = "shape must be a tuple";
        return 0;
    }
    if (lex_char(l, ')'))
        return 1;
    for (;;) {
        if (h->ndim == NPY_MAX_NDIM) {
            l->why = "too many dimensions";
            return 0;
        }
        if (!lex_uint(l, &h->shape[h->ndim++]))
            return 0;
        int comma = lex_char(l, ',');
        if (lex_char(l, ')')) {
            if (h->ndim == 1 && !comma) {
                l->why = "(N) is not a tuple; write (N,)";
                return 0;
            }
            return 1;
        }
        if (!comma) {
            l->why = "expected ',' or ')' in shape";
            return 0;
        }
    }
}

static int npy_parse_dict(npy_lex *l, npy_header *h)
{
    int seen_descr = 0, seen_order = 0, seen_shape = 0;
    char key[32];
    if (!lex_char(l, '{')) {
        l->why = "expected '{'";
        return 0;
    }
    while (!lex_char(l, '}')) {
        if (!lex_string(l, key, sizeof key))
            return 0;
        if (!lex_char(l, ':')) {
            l->why = "expected ':'";
            return 0;
        }
        if (!strcmp(key, "descr") && !seen_descr) {
            seen_descr = 1;
            lex_ws(l);
            if (l->p < l->end && *l->p == '[') {
                l->why = "structured dtypes are not supported";
                return 0;
            }
            if (!lex_string(l, h->descr, sizeof h->descr))
                return 0;
        } else if (!strcmp(key, "fortran_order") && !seen_order) {
            seen_order = 1;
            if (lex_word(l, "True"))
                h->fortran_order = 1;
            else if (lex_word(l, "False"))
                h->fortran_order = 0;
            else {
                l->why = "fortran_order must be True or False";
                return 0;
            }
        } else if (!strcmp(key, "shape") && !seen_shape) {
            seen_shape = 1;
            if (!lex_shape(l, h))
                return 0;
        } else {
            l->why = "unknown or repeated key";
            return 0;
        }
        if (!lex_char(l, ',')) {
            if (!lex_char(l, '}')) {
                l->why = "expected ',' or '}'";
                return 0;
            }
            break;
        }
    }
    lex_ws(l);
    if (l->p != l->end) {
        l->why = "unexpected text after the dict";
        return 0;
    }
    if (!seen_descr || !seen_order || !seen_shape) {
        l->why = "it must have the keys 'descr', 'fortran_order' and 'shape'";
        return 0;
    }
    return 1;
}

/* "(100, 4)" or "(100,)", for messages. */
static void shape_text(const npy_header *h, char *out, size_t n)
{
    size_t used = (size_t)snprintf(out, n, "(");
    for (uint32_t i = 0; i < h->ndim && used < n; i++)
        used += (size_t)snprintf(out + used, n - used, "%s%llu", i ? ", " : "",
                                 (unsigned long long)h->shape[i]);
    if (used < n)
        snprintf(out + used, n - used, h->ndim == 1 ? ",)" : ")");
}

/* Reads and checks the preamble and header: magic, version, dict, dtype and
 * order. Shapes are the caller's to judge. */
static ty_status npy_read_header(ds_input *in, npy_header *h, ty_err *err)
{
    unsigned char pre[12];
    char *text = NULL;
    size_t got;
    ty_status st;

    memset(h, 0, sizeof *h);
    if ((st = ds_input_read_full(in, pre, 8, &got, err)) != TY_OK)
        return st;
    if (got < 8 || memcmp(pre, "\x93NUMPY", 6) != 0)
        return ty_fail(err, TY_EFORMAT, in->field,
                       "%s is not an NPY file (it does not start with "
                       "\\x93NUMPY; save arrays with numpy.save)",
                       in->name);
    unsigned major = pre[6], minor = pre[7];
    if (major < 1 || major > 3 || minor != 0)
        return ty_fail(err, TY_EFORMAT, in->field,
                       "%s: NPY format version %u.%u is not supported (1.0, "
                       "2.0 and 3.0 are)",
                       in->name, major, minor);
    size_t len_bytes = major == 1 ? 2 : 4;
    if ((st = ds_input_read_full(in, pre + 8, len_bytes, &got, err)) != TY_OK)
        return st;
    if (got < len_bytes)
        return ty_fail(err, TY_EFORMAT, in->field,
                       "%s is truncated in its "
                       "header",
                       in->name);
    uint32_t hlen = pre[8] | (uint32_t)pre[9] << 8;
    if (len_bytes == 4)
        hlen |= (uint32_t)pre[10] << 16 | (uint32_t)pre[11] << 24;
    if (hlen > NPY_MAX_HEADER)
        return ty_fail(err, TY_EFORMAT, in->field,
                       "%s: the header is %u bytes long; the limit is %u",
                       in->name, hlen, NPY_MAX_HEADER);
    text = malloc(hlen ? hlen : 1);
    if (!text)
        return ty_fail(err, TY_ENOMEM, in->field, "out of memory");
    if ((st = ds_input_read_full(in, text, hlen, &got, err)) != TY_OK)
        goto done;
    if (got < hlen) {
        st = ty_fail(err, TY_EFORMAT, in->field,
                     "%s is truncated in its header", in->name);
        goto done;
    }
    h->data_offset = 8 + len_bytes + hlen;
    npy_lex l = {.p = text, .end = text + hlen, .start = text};
    if (!npy_parse_dict(&l, h)) {
        st = ty_fail(err, TY_EFORMAT, in->field,
                     "%s: the header is not a valid NPY header (%s at byte "
                     "%zu of the header)",
                     in->name, l.why ? l.why : "syntax error",
                     (size_t)(l.p - l.start));
        goto done;
    }
    size_t i;
    for (i = 0; i < TY_ARRAY_LEN(npy_dtypes); i++)
        if (!strcmp(h->descr, npy_dtypes[i].descr))
            break;
    char shown[48];
    ds_snippet(shown, sizeof shown, h->descr, strlen(h->descr));
    if (i == TY_ARRAY_LEN(npy_dtypes)) {
        char little[32];
        int known = 0;
        snprintf(little, sizeof little, "<%s", h->descr + 1);
        for (size_t j = 0; j < TY_ARRAY_LEN(npy_dtypes); j++)
            known |= !strcmp(little, npy_dtypes[j].descr);
        if (h->descr[0] == '>' && known)
            st = ty_fail(err, TY_EFORMAT, in->field,
                         "%s: dtype '%s' is big-endian; save it little-endian "
                         "(e.g. a.astype('%s'))",
                         in->name, shown, little);
        else
            st = ty_fail(err, TY_EFORMAT, in->field,
                         "%s: dtype '%s' is not supported (use float32, "
                         "float64, uint8, int32 or int64)",
                         in->name, shown);
        goto done;
    }
    h->kind = npy_dtypes[i].kind;
    if (h->fortran_order)
        st = ty_fail(err, TY_EFORMAT, in->field,
                     "%s: the array is in Fortran order; save a C-ordered "
                     "array (numpy.ascontiguousarray)",
                     in->name);
done:
    free(text);
    return st;
}

/* The file must hold exactly the data its header declares. */
static ty_status npy_check_size(const ds_input *in, const npy_header *h,
                                uint64_t count, ty_err *err)
{
    char shape[160];
    uint64_t want = count * npy_itemsize[h->kind];
    uint64_t have = (uint64_t)in->file_size > h->data_offset
                        ? (uint64_t)in->file_size - h->data_offset
                        : 0;
    shape_text(h, shape, sizeof shape);
    if (have < want)
        return ty_fail(err, TY_EFORMAT, in->field,
                       "%s is truncated: its header declares shape %s of '%s' "
                       "(%llu bytes of data), found %llu",
                       in->name, shape, h->descr, (unsigned long long)want,
                       (unsigned long long)have);
    if (have > want)
        return ty_fail(err, TY_EFORMAT, in->field,
                       "%s has %llu byte%s after the data its header "
                       "declares (shape %s of '%s')",
                       in->name, (unsigned long long)(have - want),
                       have - want == 1 ? "" : "s", shape, h->descr);
    return TY_OK;
}

/* ---- values --------------------------------------------------------------- */

static double npy_value(npy_kind kind, const unsigned char *p)
{
    switch (kind) {
        case NPY_F4: {
            float v;
            memcpy(&v, p, 4);
            return v;
        }
        case NPY_F8: {
            double v;
            memcpy(&v, p, 8);
            return v;
        }
        case NPY_U1: return p[0];
        case NPY_I4: {
            int32_t v;
            memcpy(&v, p, 4);
            return v;
        }
        case NPY_I8: {
            int64_t v;
            memcpy(&v, p, 8);
            return (double)v;
        }
    }
    return 0;
}

static int npy_is_integer(npy_kind kind)
{
    return kind == NPY_U1 || kind == NPY_I4 || kind == NPY_I8;
}

/* What a stream of values becomes. */
typedef enum {
    NPY_TO_F32,   /* float32 features or targets */
    NPY_TO_U8,    /* uint8 pixels, copied */
    NPY_TO_CLASS, /* int32 class indices */
} npy_target;

/* Streams count values of h from in, checks and converts them, and writes
 * them to w (when w is not NULL). per_example values make one example (for
 * messages). For classes, *max_class gets the largest. */
static ty_status npy_stream(ds_input *in, const npy_header *h, uint64_t count,
                            uint64_t per_example, npy_target to, ds_writer *w,
                            int64_t *max_class, ty_err *err)
{
    const size_t isz = npy_itemsize[h->kind];
    const size_t per_chunk = DS_CHUNK; /* values per read */
    unsigned char *raw = malloc(per_chunk * isz);
    float *outbuf = malloc(per_chunk * 4);
    ty_status st = TY_OK;
    if (!raw || !outbuf) {
        st = ty_fail(err, TY_ENOMEM, in->field, "out of memory");
        goto done;
    }
    if (max_class)
        *max_class = -1;
    for (uint64_t done = 0; done < count;) {
        size_t n =
            count - done < per_chunk ? (size_t)(count - done) : per_chunk;
        size_t got;
        if ((st = ds_input_read_full(in, raw, n * isz, &got, err)))
            goto done;
        if (got < n * isz) {
            st = ty_fail(err, TY_EIO, in->field,
                         "%s changed or was truncated while being read",
                         in->name);
            goto done;
        }
        if (to == NPY_TO_U8) {
            if (w && (st = ds_writer_write(w, raw, n, err)))
                goto done;
            done += n;
            continue;
        }
        for (size_t k = 0; k < n; k++) {
            double v = npy_value(h->kind, raw + k * isz);
            uint64_t at = done + k;
            unsigned long long ex = at / per_example, pos = at % per_example;
            if (!isfinite(v)) {
                st = ty_fail(err, TY_EFORMAT, in->field,
                             "%s: example %llu, value %llu is %s (NaN and Inf "
                             "are not allowed)",
                             in->name, ex, pos, isnan(v) ? "NaN" : "infinite");
                goto done;
            }
            if (to == NPY_TO_F32) {
                if (fabs(v) > FLT_MAX) {
                    st = ty_fail(err, TY_EFORMAT, in->field,
                                 "%s: example %llu, value %llu (%g) is outside "
                                 "the float32 range",
                                 in->name, ex, pos, v);
                    goto done;
                }
                outbuf[k] = (float)v;
                continue;
            }
            /* a class label */
            if (v != floor(v)) {
                st = ty_fail(err, TY_EFORMAT, in->field,
                             "%s: label %g of example %llu is not a whole "
                             "number; classification needs class indices "
                             "(use the regression task for real targets)",
                             in->name, v, ex);
                goto done;
            }
            if (v < 0) {
                st =
                    ty_fail(err, TY_EFORMAT, in->field,
                            "%s: label %.0f of example %llu is negative; class "
                            "indices start at 0",
                            in->name, v, ex);
                goto done;
            }
            if (v >= TY_DS_MAX_CLASSES) {
                st = ty_fail(err, TY_ETOOBIG, in->field,
                             "%s: label %.0f of example %llu is too large; at "
                             "most %u classes (0 to %u) are supported",
                             in->name, v, ex, TY_DS_MAX_CLASSES,
                             TY_DS_MAX_CLASSES - 1);
                goto done;
            }
            int32_t c = (int32_t)v;
            if (max_class && c > *max_class)
                *max_class = c;
            memcpy(&outbuf[k], &c, 4);
        }
        if (w && (st = ds_writer_write(w, outbuf, n * 4, err)))
            goto done;
        done += n;
    }
done:
    free(raw);
    free(outbuf);
    return st;
}

/* ---- the conversion ------------------------------------------------------- */

/* Checks x's shape; sets the example count and input shape. */
static ty_status npy_x_shape(const ds_input *in, const npy_header *h,
                             uint32_t *shape, uint32_t *ndim,
                             uint64_t *features, ty_err *err)
{
    char text[160];
    shape_text(h, text, sizeof text);
    if (h->ndim == 0)
        return ty_fail(err, TY_EFORMAT, in->field,
                       "%s holds a single value; x needs shape (N, ...) with "
                       "one row per example",
                       in->name);
    if (h->ndim > 1 + TY_DS_MAX_DIMS)
        return ty_fail(err, TY_EFORMAT, in->field,
                       "%s has shape %s; at most %d dimensions after the "
                       "examples are supported",
                       in->name, text, TY_DS_MAX_DIMS);
    for (uint32_t i = 0; i < h->ndim; i++)
        if (h->shape[i] == 0)
            return ty_fail(err, TY_EFORMAT, in->field,
                           "%s has shape %s, which holds no data", in->name,
                           text);
    if (h->shape[0] > TY_DS_MAX_EXAMPLES)
        return ty_fail(err, TY_ETOOBIG, in->field,
                       "%s has %llu examples; the limit is %u", in->name,
                       (unsigned long long)h->shape[0], TY_DS_MAX_EXAMPLES);
    *features = 1;
    *ndim = 0;
    for (uint32_t i = 1; i < h->ndim; i++) {
        if (h->shape[i] > TY_DS_MAX_FEATURES ||
            (*features *= h->shape[i]) > TY_DS_MAX_FEATURES)
            return ty_fail(err, TY_ETOOBIG, in->field,
                           "%s has shape %s: more than %u values per example",
                           in->name, text, TY_DS_MAX_FEATURES);
        shape[(*ndim)++] = (uint32_t)h->shape[i];
    }
    if (*ndim == 0) /* (N,): one value per example */
        shape[(*ndim)++] = 1;
    return TY_OK;
}

static ty_status npy_y_shape(const ds_input *in, const npy_header *h,
                             uint64_t n, ty_task task, uint32_t *y_dim,
                             ty_err *err)
{
    char text[160];
    shape_text(h, text, sizeof text);
    if (h->ndim < 1 || h->ndim > 2 || (h->ndim == 2 && h->shape[1] == 0))
        return ty_fail(err, TY_EFORMAT, in->field,
                       "%s has shape %s; y needs shape (N,) or (N, k)",
                       in->name, text);
    if (h->shape[0] != n)
        return ty_fail(err, TY_EFORMAT, in->field,
                       "%s has %llu labels but x.npy has %llu examples",
                       in->name, (unsigned long long)h->shape[0],
                       (unsigned long long)n);
    *y_dim =
        h->ndim == 2
            ? (uint32_t)(h->shape[1] > TY_DS_MAX_FEATURES ? 0 : h->shape[1])
            : 1;
    if (*y_dim == 0)
        return ty_fail(err, TY_ETOOBIG, in->field,
                       "%s has shape %s: more than %u targets per example",
                       in->name, text, TY_DS_MAX_FEATURES);
    if (task == TY_TASK_CLASSIFICATION && *y_dim != 1)
        return ty_fail(err, TY_EFORMAT, in->field,
                       "%s has shape %s; classification needs one class index "
                       "per example, shape (N,) (for one-hot labels save "
                       "y.argmax(axis=1); for several targets use the "
                       "regression task)",
                       in->name, text);
    return TY_OK;
}

ty_status ds_convert_npy(const char *x_path, const char *y_path, int task,
                         const char *out_path, ty_err *err)
{
    ds_input xin, yin;
    ds_writer w = DS_WRITER_INIT;
    npy_header xh, yh;
    json_t *meta = NULL, *classes = NULL;
    uint32_t shape[TY_DS_MAX_DIMS], ndim = 0, y_dim = 1;
    uint64_t features = 1;
    int64_t max_class = -1;
    ty_status st;

    memset(&xin, 0, sizeof xin);
    memset(&yin, 0, sizeof yin);
    xin.fd = yin.fd = -1;
    if (!out_path || !*out_path)
        return ty_fail(err, TY_EINVAL, NULL, "no output path given");
    if (task > (int)TY_TASK_REGRESSION) {
        st = ty_fail(err, TY_EINVAL, "task",
                     "task must be classification or regression");
        goto fail;
    }
    if ((st = ds_input_open(&xin, x_path, 0, "x", "x.npy", err)) ||
        (st = npy_read_header(&xin, &xh, err)) ||
        (st = npy_x_shape(&xin, &xh, shape, &ndim, &features, err)) ||
        (st = ds_input_open(&yin, y_path, 0, "y", "y.npy", err)) ||
        (st = npy_read_header(&yin, &yh, err)))
        goto fail;
    ty_task t = task >= 0                 ? (ty_task)task
                : npy_is_integer(yh.kind) ? TY_TASK_CLASSIFICATION
                                          : TY_TASK_REGRESSION;
    uint64_t n = xh.shape[0];
    if ((st = npy_y_shape(&yin, &yh, n, t, &y_dim, err)) ||
        (st = npy_check_size(&xin, &xh, n * features, err)) ||
        (st = npy_check_size(&yin, &yh, n * y_dim, err)))
        goto fail;

    npy_target y_to = t == TY_TASK_CLASSIFICATION ? NPY_TO_CLASS : NPY_TO_F32;
    if ((st = npy_stream(&yin, &yh, n * y_dim, y_dim, y_to, NULL, &max_class,
                         err)))
        goto fail;

    ty_dtype x_dtype = xh.kind == NPY_U1 ? TY_DTYPE_U8 : TY_DTYPE_F32;
    meta = ds_meta_new("npy", t, (uint32_t)n, shape, ndim, x_dtype, y_dim,
                       x_dtype == TY_DTYPE_U8 ? "scale_255" : "none");
    int bad = !meta;
    if (!bad && t == TY_TASK_CLASSIFICATION) {
        classes = json_array();
        bad = !classes;
        for (int64_t c = 0; !bad && c <= max_class; c++)
            bad = json_array_append_new(classes, json_integer(c));
        bad = bad ||
              json_object_set_new(meta, "num_classes",
                                  json_integer(max_class + 1)) ||
              json_object_set(meta, "classes", classes);
    }
    if (bad) {
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        goto fail;
    }
    uint64_t x_bytes = n * features * (x_dtype == TY_DTYPE_U8 ? 1 : 4);
    uint64_t y_bytes = n * y_dim * 4;
    if ((st = ds_writer_create(&w, out_path, meta, x_bytes, y_bytes, err)) ||
        (st = npy_stream(&xin, &xh, n * features, features,
                         x_dtype == TY_DTYPE_U8 ? NPY_TO_U8 : NPY_TO_F32, &w,
                         NULL, err)) ||
        (st = ds_writer_begin_y(&w, err)) ||
        (st = ds_input_seek(&yin, yh.data_offset, err)) ||
        (st = npy_stream(&yin, &yh, n * y_dim, y_dim, y_to, &w, NULL, err)) ||
        (st = ds_writer_finish(&w, err)))
        goto fail;
    goto done;
fail:
    ds_writer_discard(&w, out_path);
done:
    ds_input_close(&xin);
    ds_input_close(&yin);
    json_decref(meta);
    json_decref(classes);
    return st;
}
