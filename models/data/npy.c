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
 * y is read twice: once to validate it and see which labels occur (the meta's
 * class list is those labels in increasing order, the rule of every format:
 * see dataset.h), and again after x to write each label's class index. x
 * streams once, converted chunk by chunk. Nothing proportional to the data is
 * kept: for classes, one byte and one index per possible label
 * (TY_DS_MAX_CLASSES of each).
 *
 * A Fortran-ordered array (fortran_order True, what numpy writes for a
 * transposed or np.asfortranarray array, and pandas' to_numpy often gives) is
 * converted to C order as it is read: see npy_src below.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/data/dataset.h"
#include "models/data/file.h"
#include "models/data/input.h"
#include "models/data/npy.h"

#define NPY_MAX_HEADER 65536u
#define NPY_MAX_NDIM 32

typedef enum { NPY_F4, NPY_F8, NPY_U1, NPY_I4, NPY_I8, NPY_U2 } npy_kind;

static const struct {
    const char *descr;
    npy_kind kind;
} npy_dtypes[] = {
    {"<f4", NPY_F4}, {"<f8", NPY_F8}, {"|u1", NPY_U1}, {"<u1", NPY_U1},
    {"<i4", NPY_I4}, {"<i8", NPY_I8}, {"<u2", NPY_U2},
};

static const size_t npy_itemsize[] = {[NPY_F4] = 4, [NPY_F8] = 8, [NPY_U1] = 1,
                                      [NPY_I4] = 4, [NPY_I8] = 8, [NPY_U2] = 2};

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
                         "float64, uint8, uint16, int32 or int64)",
                         in->name, shown);
        goto done;
    }
    h->kind = npy_dtypes[i].kind;
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
        case NPY_U2: return p[0] | p[1] << 8;
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
    return kind == NPY_U1 || kind == NPY_U2 || kind == NPY_I4 || kind == NPY_I8;
}

/* ---- values in C order --------------------------------------------------- */

/* Where an array's values come from, in C (row-major) order whatever the
 * file's order. A C-ordered array is read straight through. A Fortran-ordered
 * one of shape (N, d1, ..., dk) stores its first index fastest, so value v of
 * example i (v counted in Fortran order over d1..dk) is at (v * N + i): each
 * value's run over consecutive examples is contiguous. It is gathered a block
 * of examples at a time: for each value, in file order, the block's run is
 * read and scattered into the block at the value's C position. One read takes
 * the runs of several consecutive values (they lie N values apart) while the
 * other examples' bytes between them are few (NPY_GAP_BYTES), up to
 * NPY_SPAN_BYTES: so a block of all N examples reads the file straight
 * through, and a small block of a short array does not pay a read per value.
 * A block holds NPY_BLOCK_BYTES, or one example when an example is larger,
 * and never more than the array: memory is bounded whatever the file's size.
 * (The price is in the rare arrays whose examples are megabytes each: a block
 * of few examples, so a read per value and block, or each block reading the
 * runs of its neighbours too.) Where at most one axis has more than one
 * element, the two orders are the same bytes and the file is read straight
 * through. */
#define NPY_BLOCK_BYTES (16u << 20)
#define NPY_SPAN_BYTES (1u << 20)
#define NPY_GAP_BYTES 4096u

typedef struct {
    ds_input *in;
    const npy_header *h;
    size_t isz;
    uint64_t n, per;      /* examples, values per example */
    int gather;           /* Fortran order that differs from C order */
    unsigned char *block; /* gather: block_ex examples, C order */
    unsigned char *run;   /* gather: one value's run over a block */
    uint64_t block_ex;    /* examples per block */
    uint64_t next_ex;     /* first example not yet gathered */
    size_t pos, len;      /* bytes of block handed out, filled */
} npy_src;

/* Sets up reading h's data from in (positioned at the data, as after
 * npy_read_header). h's shape has been checked: ndim >= 1, sizes within the
 * limits, the file's size right. TY_ENOMEM if the block cannot be had. */
static ty_status npy_src_init(npy_src *s, ds_input *in, const npy_header *h,
                              ty_err *err)
{
    uint32_t big_axes = 0;
    memset(s, 0, sizeof *s);
    s->in = in;
    s->h = h;
    s->isz = npy_itemsize[h->kind];
    s->n = h->shape[0];
    s->per = 1;
    for (uint32_t a = 0; a < h->ndim; a++) {
        if (a > 0)
            s->per *= h->shape[a];
        big_axes += h->shape[a] > 1;
    }
    s->gather = h->fortran_order && big_axes > 1;
    if (!s->gather)
        return TY_OK;
    uint64_t ex_bytes = s->per * s->isz;
    s->block_ex = NPY_BLOCK_BYTES / ex_bytes ? NPY_BLOCK_BYTES / ex_bytes : 1;
    if (s->block_ex > s->n)
        s->block_ex = s->n;
    size_t run = (size_t)(s->block_ex * s->isz);
    s->block = malloc((size_t)(s->block_ex * ex_bytes));
    s->run = malloc(run > NPY_SPAN_BYTES ? run : NPY_SPAN_BYTES);
    if (!s->block || !s->run)
        return ty_fail(err, TY_ENOMEM, in->field, "out of memory");
    return TY_OK;
}

static void npy_src_free(npy_src *s)
{
    free(s->block);
    free(s->run);
    s->block = s->run = NULL;
}

/* Back to the first value, for a second pass. */
static ty_status npy_src_rewind(npy_src *s, ty_err *err)
{
    s->next_ex = 0;
    s->pos = s->len = 0;
    return s->gather ? TY_OK : ds_input_seek(s->in, s->h->data_offset, err);
}

/* dst[j * stride] = the j-th of b values of isz bytes at src. */
static void npy_scatter(unsigned char *dst, size_t stride,
                        const unsigned char *src, uint64_t b, size_t isz)
{
    switch (isz) {
        case 1:
            for (uint64_t j = 0; j < b; j++)
                dst[j * stride] = src[j];
            break;
        case 4:
            for (uint64_t j = 0; j < b; j++)
                memcpy(dst + j * stride, src + 4 * j, 4);
            break;
        default:
            for (uint64_t j = 0; j < b; j++)
                memcpy(dst + j * stride, src + 8 * j, 8);
            break;
    }
}

/* Fills the block with the next examples' values in C order. */
static ty_status npy_src_gather(npy_src *s, ty_err *err)
{
    const npy_header *h = s->h;
    const size_t isz = s->isz, stride = (size_t)(s->per * isz);
    const uint64_t n = s->n, e0 = s->next_ex;
    const uint64_t b = n - e0 < s->block_ex ? n - e0 : s->block_ex;
    /* values whose runs one read takes (see the comment above npy_src) */
    uint64_t group = 1;
    if ((n - b) * isz <= NPY_GAP_BYTES && NPY_SPAN_BYTES / (n * isz) > 1)
        group = NPY_SPAN_BYTES / (n * isz);
    uint64_t idx[NPY_MAX_NDIM] = {0}, cstride[NPY_MAX_NDIM];
    cstride[h->ndim - 1] = 1;
    for (uint32_t a = h->ndim - 1; a > 1; a--)
        cstride[a - 1] = cstride[a] * h->shape[a];
    uint64_t f = 0; /* the C position, within an example, of value v */
    for (uint64_t v = 0; v < s->per;) {
        const uint64_t g = s->per - v < group ? s->per - v : group;
        const size_t span = (size_t)(((g - 1) * n + b) * isz);
        size_t got;
        ty_status st =
            ds_input_pread(s->in, s->run, span,
                           h->data_offset + (v * n + e0) * isz, &got, err);
        if (st != TY_OK)
            return st;
        if (got < span)
            return ty_fail(err, TY_EIO, s->in->field,
                           "%s changed or was truncated while being read",
                           s->in->name);
        for (uint64_t k = 0; k < g; k++, v++) {
            npy_scatter(s->block + f * isz, stride, s->run + k * n * isz, b,
                        isz);
            /* the next value in Fortran order: axis 1 runs fastest */
            for (uint32_t a = 1; a < h->ndim; a++) {
                f += cstride[a];
                if (++idx[a] < h->shape[a])
                    break;
                f -= cstride[a] * h->shape[a];
                idx[a] = 0;
            }
        }
    }
    s->next_ex = e0 + b;
    s->pos = 0;
    s->len = (size_t)(b * s->per * isz);
    return TY_OK;
}

/* Reads the next len bytes of values in C order; *got < len means the data
 * ended. */
static ty_status npy_src_read(npy_src *s, unsigned char *buf, size_t len,
                              size_t *got, ty_err *err)
{
    if (!s->gather)
        return ds_input_read_full(s->in, buf, len, got, err);
    *got = 0;
    while (*got < len) {
        if (s->pos == s->len) {
            if (s->next_ex == s->n)
                break;
            ty_status st = npy_src_gather(s, err);
            if (st != TY_OK)
                return st;
        }
        size_t k = s->len - s->pos < len - *got ? s->len - s->pos : len - *got;
        memcpy(buf + *got, s->block + s->pos, k);
        s->pos += k;
        *got += k;
    }
    return TY_OK;
}

/* What a stream of values becomes. */
typedef enum {
    NPY_TO_F32,   /* float32 features or targets */
    NPY_TO_U8,    /* uint8 pixels, copied */
    NPY_TO_CLASS, /* int32 class indices */
} npy_target;

/* Streams all values of src, checks and converts them, and writes them to w
 * (when w is not NULL). For classes, seen[label] is set for each label that
 * occurs (when seen is not NULL), and each label is written as its class
 * index class_of[label] (class_of is needed only with w). */
static ty_status npy_stream(npy_src *src, npy_target to, ds_writer *w,
                            unsigned char *seen, const int32_t *class_of,
                            ty_err *err)
{
    ds_input *in = src->in;
    const npy_kind kind = src->h->kind;
    const size_t isz = src->isz;
    const uint64_t count = src->n * src->per, per_example = src->per;
    const size_t per_chunk = DS_CHUNK; /* values per read */
    unsigned char *raw = malloc(per_chunk * isz);
    float *outbuf = malloc(per_chunk * 4);
    ty_status st = TY_OK;
    if (!raw || !outbuf) {
        st = ty_fail(err, TY_ENOMEM, in->field, "out of memory");
        goto done;
    }
    for (uint64_t done = 0; done < count;) {
        size_t n =
            count - done < per_chunk ? (size_t)(count - done) : per_chunk;
        size_t got;
        if ((st = npy_src_read(src, raw, n * isz, &got, err)))
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
            double v = npy_value(kind, raw + k * isz);
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
            if (seen)
                seen[c] = 1;
            if (w)
                c = class_of[c];
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
    npy_src xsrc, ysrc;
    json_t *meta = NULL, *classes = NULL;
    uint32_t shape[TY_DS_MAX_DIMS], ndim = 0, y_dim = 1, num_classes = 0;
    uint64_t features = 1;
    unsigned char *seen = NULL;
    int32_t *class_of = NULL;
    ty_status st;

    memset(&xin, 0, sizeof xin);
    memset(&yin, 0, sizeof yin);
    memset(&xsrc, 0, sizeof xsrc);
    memset(&ysrc, 0, sizeof ysrc);
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

    if ((st = npy_src_init(&xsrc, &xin, &xh, err)) ||
        (st = npy_src_init(&ysrc, &yin, &yh, err)))
        goto fail;
    npy_target y_to = t == TY_TASK_CLASSIFICATION ? NPY_TO_CLASS : NPY_TO_F32;
    if (t == TY_TASK_CLASSIFICATION) {
        seen = calloc(TY_DS_MAX_CLASSES, 1);
        class_of = malloc(TY_DS_MAX_CLASSES * sizeof *class_of);
        if (!seen || !class_of) {
            st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
            goto fail;
        }
    }
    if ((st = npy_stream(&ysrc, y_to, NULL, seen, NULL, err)))
        goto fail;

    ty_dtype x_dtype = xh.kind == NPY_U1 ? TY_DTYPE_U8 : TY_DTYPE_F32;
    meta = ds_meta_new("npy", t, (uint32_t)n, shape, ndim, x_dtype, y_dim,
                       x_dtype == TY_DTYPE_U8 ? "scale_255" : "none");
    int bad = !meta;
    if (!bad && t == TY_TASK_CLASSIFICATION) {
        classes = ds_classes_from_seen(seen, TY_DS_MAX_CLASSES, class_of,
                                       &num_classes);
        bad = !classes ||
              json_object_set_new(meta, "num_classes",
                                  json_integer(num_classes)) ||
              json_object_set(meta, "classes", classes);
    }
    if (bad) {
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        goto fail;
    }
    uint64_t x_bytes = n * features * (x_dtype == TY_DTYPE_U8 ? 1 : 4);
    uint64_t y_bytes = n * y_dim * 4;
    if ((st = ds_writer_create(&w, out_path, meta, x_bytes, y_bytes, err)) ||
        (st = npy_stream(&xsrc, x_dtype == TY_DTYPE_U8 ? NPY_TO_U8 : NPY_TO_F32,
                         &w, NULL, NULL, err)) ||
        (st = ds_writer_begin_y(&w, err)) ||
        (st = npy_src_rewind(&ysrc, err)) ||
        (st = npy_stream(&ysrc, y_to, &w, NULL, class_of, err)) ||
        (st = ds_writer_finish(&w, err)))
        goto fail;
    goto done;
fail:
    ds_writer_discard(&w, out_path);
done:
    npy_src_free(&xsrc);
    npy_src_free(&ysrc);
    ds_input_close(&xin);
    ds_input_close(&yin);
    json_decref(meta);
    json_decref(classes);
    free(seen);
    free(class_of);
    return st;
}

/* ---- for token files (tokens.c) ------------------------------------------ */

ty_status ds_npy_probe(ds_input *in, ds_npy_info *info, ty_err *err)
{
    npy_header h;
    ty_status st = npy_read_header(in, &h, err);
    if (st != TY_OK)
        return st;
    memset(info, 0, sizeof *info);
    snprintf(info->descr, sizeof info->descr, "%s", h.descr);
    info->itemsize = npy_itemsize[h.kind];
    info->is_int = npy_is_integer(h.kind);
    info->is_signed = h.kind == NPY_I4 || h.kind == NPY_I8;
    info->ndim = h.ndim;
    info->data_offset = h.data_offset;
    uint64_t count = 1;
    for (uint32_t i = 0; i < h.ndim; i++) {
        if (h.shape[i] && count > UINT64_MAX / 8 / h.shape[i])
            return ty_fail(err, TY_EFORMAT, in->field,
                           "%s: its shape is too large", in->name);
        count *= h.shape[i];
    }
    info->count = count;
    return npy_check_size(in, &h, count, err);
}
