/*
 * safetensors.c - safetensors reader (mmap, full validation) and atomic
 * writer (see safetensors.h).
 */
#include "models/safetensors.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fsutil.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; this code copies it as is");

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [ST_BOOL] = {"BOOL", 1},       [ST_U8] = {"U8", 1},
    [ST_I8] = {"I8", 1},           [ST_F8_E5M2] = {"F8_E5M2", 1},
    [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_I16] = {"I16", 2},
    [ST_U16] = {"U16", 2},         [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2},       [ST_I32] = {"I32", 4},
    [ST_U32] = {"U32", 4},         [ST_F32] = {"F32", 4},
    [ST_F64] = {"F64", 8},         [ST_I64] = {"I64", 8},
    [ST_U64] = {"U64", 8},
};
static_assert(TY_ARRAY_LEN(dtypes) == ST_DTYPE_COUNT,
              "every dtype needs a name");

const char *st_dtype_name(st_dtype t)
{
    return (unsigned)t < ST_DTYPE_COUNT ? dtypes[t].name : "?";
}

size_t st_dtype_size(st_dtype t)
{
    return (unsigned)t < ST_DTYPE_COUNT ? dtypes[t].size : 0;
}

int st_dtype_parse(const char *s)
{
    for (int i = 0; s && i < ST_DTYPE_COUNT; i++)
        if (!strcmp(dtypes[i].name, s))
            return i;
    return -1;
}

void st_close(st_file *f)
{
    if (!f)
        return;
    json_decref(f->header);
    free(f->tensors);
    if (f->map)
        munmap(f->map, f->map_len);
    memset(f, 0, sizeof *f);
}

/* A JSON integer in [0, INT64_MAX]. */
static int get_u64(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return 0;
    *out = (uint64_t)json_integer_value(v);
    return 1;
}

static ty_status parse_tensor(st_tensor *t, const char *name, const json_t *v,
                              uint64_t data_len, uint64_t *begin, ty_err *err)
{
    if (!json_is_object(v) || json_object_size(v) != 3)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "tensor '%.64s' must be an object with exactly dtype, "
                       "shape and data_offsets",
                       name);
    const json_t *dt = json_object_get(v, "dtype");
    const json_t *shape = json_object_get(v, "shape");
    const json_t *offs = json_object_get(v, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(shape) || !json_is_array(offs))
        return ty_fail(err, TY_EFORMAT, NULL,
                       "tensor '%.64s' must have a string dtype, a shape array "
                       "and a data_offsets array",
                       name);
    int d = st_dtype_parse(json_string_value(dt));
    if (d < 0)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "tensor '%.64s' has unknown dtype '%.16s'", name,
                       json_string_value(dt));
    t->name = name;
    t->dtype = (st_dtype)d;
    if (json_array_size(shape) > ST_MAX_DIMS)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "tensor '%.64s' has more than %d dimensions", name,
                       ST_MAX_DIMS);
    t->ndim = (uint32_t)json_array_size(shape);
    t->numel = 1;
    for (uint32_t i = 0; i < t->ndim; i++) {
        if (!get_u64(json_array_get(shape, i), &t->shape[i]) ||
            __builtin_mul_overflow(t->numel, t->shape[i], &t->numel))
            return ty_fail(err, TY_EFORMAT, NULL,
                           "tensor '%.64s' has an invalid shape", name);
    }
    uint64_t b, e;
    if (json_array_size(offs) != 2 || !get_u64(json_array_get(offs, 0), &b) ||
        !get_u64(json_array_get(offs, 1), &e) || b > e)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "tensor '%.64s' data_offsets must be [begin, end] with "
                       "0 <= begin <= end",
                       name);
    if (e > data_len)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "tensor '%.64s' data_offsets [%llu, %llu] run past the "
                       "end of the data (%llu bytes)",
                       name, (unsigned long long)b, (unsigned long long)e,
                       (unsigned long long)data_len);
    if (__builtin_mul_overflow(t->numel, (uint64_t)st_dtype_size(t->dtype),
                               &t->nbytes) ||
        t->nbytes != e - b)
        return ty_fail(
            err, TY_EFORMAT, NULL,
            "tensor '%.64s' holds %llu bytes but its shape and dtype "
            "need a different size",
            name, (unsigned long long)(e - b));
    *begin = b;
    return TY_OK;
}

static int cmp_span(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

/* The tensors' [begin, end) spans must tile [0, data_len) exactly. */
static ty_status check_tiling(const st_file *f, const uint64_t *begins,
                              uint64_t data_len, ty_err *err)
{
    uint64_t(*spans)[2] = malloc((f->count ? f->count : 1) * sizeof *spans);
    if (!spans)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory reading tensors");
    for (size_t i = 0; i < f->count; i++) {
        spans[i][0] = begins[i];
        spans[i][1] = begins[i] + f->tensors[i].nbytes;
    }
    qsort(spans, f->count, sizeof *spans, cmp_span);
    uint64_t pos = 0;
    ty_status st = TY_OK;
    for (size_t i = 0; i < f->count && st == TY_OK; i++) {
        if (spans[i][0] != pos)
            st = ty_fail(err, TY_EFORMAT, NULL,
                         "tensor data offsets %s at byte %llu",
                         spans[i][0] < pos ? "overlap" : "leave a gap",
                         (unsigned long long)pos);
        pos = spans[i][1];
    }
    if (st == TY_OK && pos != data_len)
        st =
            ty_fail(err, TY_EFORMAT, NULL,
                    "the data buffer has %llu bytes but the tensors cover %llu",
                    (unsigned long long)data_len, (unsigned long long)pos);
    free(spans);
    return st;
}

static ty_status check_meta(const json_t *meta, ty_err *err)
{
    if (!json_is_object(meta))
        return ty_fail(err, TY_EFORMAT, NULL, "__metadata__ must be an object");
    const char *k;
    json_t *v;
    json_object_foreach ((json_t *)meta, k, v) {
        if (!json_is_string(v))
            return ty_fail(err, TY_EFORMAT, NULL,
                           "__metadata__ value '%.64s' must be a string", k);
    }
    return TY_OK;
}

ty_status st_parse(const void *buf, size_t len, st_file *f, ty_err *err)
{
    memset(f, 0, sizeof *f);
    const uint8_t *p = buf;
    if (len < 8)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "the file has %zu bytes, too short for safetensors",
                       len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | p[i];
    if (hlen > ST_MAX_HEADER)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "the header length %llu is over the %u-byte limit",
                       (unsigned long long)hlen, ST_MAX_HEADER);
    if (hlen > len - 8)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "the header length %llu runs past the end of the file "
                       "(%zu bytes)",
                       (unsigned long long)hlen, len);
    if (hlen < 2 || p[8] != '{')
        return ty_fail(err, TY_EFORMAT, NULL,
                       "the header must be a JSON object");
    json_error_t jerr;
    f->header = json_loadb((const char *)p + 8, (size_t)hlen,
                           JSON_REJECT_DUPLICATES, &jerr);
    if (!f->header && json_error_code(&jerr) == json_error_out_of_memory) {
        st_close(f);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    if (!json_is_object(f->header)) {
        st_close(f);
        return ty_fail(err, TY_EFORMAT, NULL,
                       "the header is not valid JSON: %s", jerr.text);
    }
    const uint8_t *data = p + 8 + hlen;
    uint64_t data_len = len - 8 - hlen;
    size_t n = json_object_size(f->header);
    if (n > ST_MAX_TENSORS + 1) {
        st_close(f);
        return ty_fail(err, TY_EFORMAT, NULL, "the file has over %u tensors",
                       ST_MAX_TENSORS);
    }
    uint64_t *begins = malloc((n ? n : 1) * sizeof *begins);
    f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
    ty_status st = TY_OK;
    if (!begins || !f->tensors) {
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory reading tensors");
        goto done;
    }
    const char *key;
    json_t *v;
    json_object_foreach (f->header, key, v) {
        if (!strcmp(key, "__metadata__")) {
            if ((st = check_meta(v, err)) != TY_OK)
                goto done;
            f->meta = v;
            continue;
        }
        st_tensor *t = &f->tensors[f->count];
        if ((st = parse_tensor(t, key, v, data_len, &begins[f->count], err)) !=
            TY_OK)
            goto done;
        t->data = data + begins[f->count];
        f->count++;
    }
    st = check_tiling(f, begins, data_len, err);
done:
    free(begins);
    if (st != TY_OK)
        st_close(f);
    return st;
}

ty_status st_open(const char *path, st_file *f, ty_err *err)
{
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        /* A 404 reaches clients: no server path in it (a 500 is only
         * logged, and keeps the path for the operator). */
        if (errno == ENOENT)
            return ty_fail(err, TY_ENOTFOUND, NULL,
                           "the safetensors file does not exist");
        return ty_fail(err, TY_EIO, NULL, "cannot open %s: %s", path,
                       strerror(errno));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return ty_fail(err, TY_EIO, NULL, "cannot stat %s: %s", path,
                       strerror(errno));
    }
    if (sb.st_size < 8) {
        close(fd);
        return ty_fail(err, TY_EFORMAT, NULL,
                       "the file has %lld byte%s, too short for safetensors",
                       (long long)sb.st_size, sb.st_size == 1 ? "" : "s");
    }
    size_t len = (size_t)sb.st_size;
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return ty_fail(err, TY_EIO, NULL, "cannot map %s: %s", path,
                       strerror(errno));
    ty_status st = st_parse(map, len, f, err);
    if (st != TY_OK) {
        munmap(map, len);
        return st;
    }
    f->map = map;
    f->map_len = len;
    return TY_OK;
}

const st_tensor *st_find(const st_file *f, const char *name)
{
    for (size_t i = 0; i < f->count; i++)
        if (!strcmp(f->tensors[i].name, name))
            return &f->tensors[i];
    return NULL;
}

const char *st_meta(const st_file *f, const char *key)
{
    return json_string_value(json_object_get(f->meta, key));
}

/* *out gets the header JSON, padded with spaces to a multiple of 8 bytes. */
static ty_status build_header(const json_t *meta, const st_out_tensor *t,
                              size_t n, char **out, size_t *hlen, ty_err *err)
{
    ty_status st;
    char *text = NULL;
    json_t *h = json_object();
    if (!h)
        goto nomem;
    if (meta) {
        if ((st = check_meta(meta, err)) != TY_OK) {
            json_decref(h);
            return TY_EINVAL;
        }
        if (json_object_set_new(h, "__metadata__", json_deep_copy(meta)) != 0)
            goto nomem;
    }
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        if (!t[i].name || !strcmp(t[i].name, "__metadata__") ||
            (unsigned)t[i].dtype >= ST_DTYPE_COUNT || t[i].ndim > ST_MAX_DIMS ||
            json_object_get(h, t[i].name)) {
            json_decref(h);
            return ty_fail(err, TY_EINVAL, NULL,
                           "tensor %zu has a missing, duplicate or reserved "
                           "name, or a bad dtype or rank",
                           i);
        }
        uint64_t numel = 1;
        json_t *shape = json_array();
        for (uint32_t d = 0; d < t[i].ndim; d++) {
            numel *= t[i].shape[d];
            json_array_append_new(shape,
                                  json_integer((json_int_t)t[i].shape[d]));
        }
        uint64_t bytes = numel * st_dtype_size(t[i].dtype);
        json_t *e = json_pack(
            "{s:s, s:o, s:[I, I]}", "dtype", st_dtype_name(t[i].dtype), "shape",
            shape, "data_offsets", (json_int_t)off, (json_int_t)(off + bytes));
        if (!e || json_object_set_new(h, t[i].name, e) != 0)
            goto nomem;
        off += bytes;
    }
    text = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    h = NULL;
    if (!text)
        goto nomem;
    size_t len = strlen(text), padded = (len + 7) & ~(size_t)7;
    *out = realloc(text, padded + 1);
    if (!*out)
        goto nomem;
    memset(*out + len, ' ', padded - len);
    (*out)[padded] = '\0';
    *hlen = padded;
    return TY_OK;
nomem:
    json_decref(h);
    free(text);
    return ty_fail(err, TY_ENOMEM, NULL, "out of memory writing safetensors");
}

ty_status st_write(const char *path, const json_t *meta, const st_out_tensor *t,
                   size_t n, ty_err *err)
{
    size_t hlen = 0;
    char *header = NULL;
    ty_status st = build_header(meta, t, n, &header, &hlen, err);
    if (st != TY_OK)
        return st;
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path) >= (int)sizeof tmp) {
        free(header);
        return ty_fail(err, TY_EINVAL, NULL, "path too long: %s", path);
    }
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        free(header);
        return ty_fail(err, TY_EIO, NULL, "cannot create %s: %s", tmp,
                       strerror(errno));
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    st = fs_write_full(fd, len8, sizeof len8, err);
    if (st == TY_OK)
        st = fs_write_full(fd, header, hlen, err);
    for (size_t i = 0; i < n && st == TY_OK; i++) {
        uint64_t bytes = st_dtype_size(t[i].dtype);
        for (uint32_t d = 0; d < t[i].ndim; d++)
            bytes *= t[i].shape[d];
        st = fs_write_full(fd, t[i].data, (size_t)bytes, err);
    }
    if (st == TY_OK && fchmod(fd, 0644) != 0)
        st = ty_fail(err, TY_EIO, NULL, "chmod %s: %s", tmp, strerror(errno));
    if (st == TY_OK)
        st = fs_fsync_fd(fd, tmp, err);
    close(fd);
    if (st == TY_OK)
        st = fs_rename_durable(tmp, path, err);
    if (st != TY_OK) {
        unlink(tmp);
        ty_err_prefix(err, "writing %s", path);
    }
    free(header);
    return st;
}
