/*
 * dataset.c - opening TYDS dataset files, and the small helpers of dataset.h
 * (task names, example access, class maps). The converters live in csv.c,
 * idx.c and npy.c; the layout's constants in layout.h, the writer in file.c.
 *
 * ty_dataset_open trusts nothing in the file: every meta key is checked for
 * type and range, every offset and size against the file length and
 * alignment, and every class index against num_classes, so that code reading
 * through the returned pointers never leaves the mapping.
 */
#include "models/data/dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/jsonutil.h"
#include "models/data/input.h"
#include "models/data/layout.h"
#include "models/data/tabular.h"

static const char *const task_names[] = {
    [TY_TASK_CLASSIFICATION] = "classification",
    [TY_TASK_REGRESSION] = "regression",
    [TY_TASK_LANGUAGE_MODELING] = "language_modeling",
};

const char *ty_task_name(ty_task t)
{
    if ((unsigned)t >= TY_ARRAY_LEN(task_names))
        return "unknown";
    return task_names[t];
}

int ty_task_parse(const char *s)
{
    for (size_t i = 0; s && i < TY_ARRAY_LEN(task_names); i++)
        if (!strcmp(s, task_names[i]))
            return (int)i;
    return -1;
}

/* ---- opening ------------------------------------------------------------ */

static uint64_t load_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* A meta integer in [min, max]; failures become TY_EFORMAT. */
static ty_status meta_int(const json_t *meta, const char *key, int64_t min,
                          int64_t max, int64_t *out, ty_err *err)
{
    if (tyjson_get_int(meta, key, "meta", 1, min, max, 0, out, err) != TY_OK)
        return TY_EFORMAT;
    return TY_OK;
}

/* A meta string that must be one of choices; returns its index. */
static ty_status meta_choice(const json_t *meta, const char *key,
                             const char *const *choices, size_t n, int *out,
                             ty_err *err)
{
    const char *s;
    if (tyjson_get_string(meta, key, "meta", 1, 64, NULL, &s, err) != TY_OK)
        return TY_EFORMAT;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s, choices[i])) {
            *out = (int)i;
            return TY_OK;
        }
    return ty_fail(err, TY_EFORMAT, NULL, "meta.%s has an unknown value \"%s\"",
                   key, s);
}

static ty_status check_meta(ty_dataset *ds, uint64_t file_size,
                            uint64_t meta_len, ty_err *err)
{
    static const char *const formats[] = {"csv", "idx", "npy"};
    static const char *const dtypes[] = {
        [TY_DTYPE_F32] = "float32", [TY_DTYPE_U8] = "uint8"};
    static const char *const preprocesses[] = {"scale_255", "standardize",
                                               "none", "tabular", "tokens"};
    const json_t *meta = ds->meta;
    int64_t v;
    int choice = 0, format = 0, preprocess = 0;
    ty_status st;

    const char *task = json_string_value(json_object_get(meta, "task"));
    if (task && !strcmp(task, task_names[TY_TASK_LANGUAGE_MODELING]))
        return ty_fail(err, TY_EFORMAT, NULL,
                       "it is a language-modeling dataset: a token array, "
                       "not examples");
    if ((st = meta_int(meta, "version", DS_VERSION, DS_VERSION, &v, err)) ||
        (st = meta_choice(meta, "format", formats, 3, &format, err)) ||
        (st = meta_choice(meta, "task", task_names, 2, &choice, err)))
        return st;
    ds->task = (ty_task)choice;
    if ((st = meta_int(meta, "num_examples", 1, TY_DS_MAX_EXAMPLES, &v, err)))
        return st;
    ds->num_examples = (uint32_t)v;

    const json_t *shape = json_object_get(meta, "input_shape");
    if (!json_is_array(shape) || json_array_size(shape) < 1 ||
        json_array_size(shape) > TY_DS_MAX_DIMS)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "meta.input_shape must be an array of 1 to %d sizes",
                       TY_DS_MAX_DIMS);
    ds->ndim = (uint32_t)json_array_size(shape);
    uint64_t features = 1;
    for (uint32_t i = 0; i < ds->ndim; i++) {
        const json_t *d = json_array_get(shape, i);
        if (!json_is_integer(d) || json_integer_value(d) < 1 ||
            json_integer_value(d) > TY_DS_MAX_FEATURES)
            return ty_fail(
                err, TY_EFORMAT, NULL,
                "meta.input_shape[%u] must be an integer from 1 to %u", i,
                TY_DS_MAX_FEATURES);
        ds->shape[i] = (uint32_t)json_integer_value(d);
        features *= ds->shape[i];
        if (features > TY_DS_MAX_FEATURES)
            return ty_fail(err, TY_EFORMAT, NULL,
                           "meta.input_shape has more than %u features",
                           TY_DS_MAX_FEATURES);
    }
    if ((st = meta_int(meta, "features", 1, TY_DS_MAX_FEATURES, &v, err)))
        return st;
    if ((uint64_t)v != features)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "meta.features is %lld but input_shape holds %llu",
                       (long long)v, (unsigned long long)features);
    ds->features = features;
    if ((st = meta_choice(meta, "x_dtype", dtypes, 2, &choice, err)) ||
        (st = meta_choice(meta, "preprocess", preprocesses, 5, &preprocess,
                          err)))
        return st;
    ds->x_dtype = (ty_dtype)choice;
    if ((st = meta_int(meta, "y_dim", 1, TY_DS_MAX_FEATURES, &v, err)))
        return st;
    ds->y_dim = (uint32_t)v;

    if (ds->task == TY_TASK_CLASSIFICATION) {
        if (ds->y_dim != 1)
            return ty_fail(err, TY_EFORMAT, NULL,
                           "meta.y_dim must be 1 for classification");
        if ((st = meta_int(meta, "num_classes", 1, TY_DS_MAX_CLASSES, &v, err)))
            return st;
        ds->num_classes = (uint32_t)v;
        const json_t *classes = json_object_get(meta, "classes");
        if (!json_is_array(classes) ||
            json_array_size(classes) != ds->num_classes)
            return ty_fail(err, TY_EFORMAT, NULL,
                           "meta.classes must be an array of num_classes (%u) "
                           "labels",
                           ds->num_classes);
    }
    if (json_object_get(meta, "label_column") &&
        !json_is_string(json_object_get(meta, "label_column")))
        return ty_fail(err, TY_EFORMAT, NULL,
                       "meta.label_column must be a string");
    const json_t *names = json_object_get(meta, "feature_names");
    if (names &&
        (!json_is_array(names) || json_array_size(names) != ds->features))
        return ty_fail(err, TY_EFORMAT, NULL,
                       "meta.feature_names must be an array of %llu names",
                       (unsigned long long)ds->features);

    const json_t *columns = json_object_get(meta, "columns");
    if (columns || preprocess == 3) {
        ds_tab_schema schema;
        if ((st = ds_tab_schema_init(&schema, columns, err)) != TY_OK) {
            ty_err_prefix(err, "meta");
            return st;
        }
        uint64_t width = schema.width;
        ds_tab_schema_free(&schema);
        if (width != ds->features || ds->x_dtype != TY_DTYPE_F32)
            return ty_fail(err, TY_EFORMAT, NULL,
                           "meta.columns make %llu float32 features; the "
                           "data has %llu",
                           (unsigned long long)width,
                           (unsigned long long)ds->features);
    }

    int64_t x_off, y_off;
    if ((st = meta_int(meta, "x_offset", 0, INT64_MAX, &x_off, err)) ||
        (st = meta_int(meta, "y_offset", 0, INT64_MAX, &y_off, err)))
        return st;
    uint64_t x_bytes = (uint64_t)ds->num_examples * ds->features *
                       (ds->x_dtype == TY_DTYPE_U8 ? 1 : 4);
    uint64_t y_bytes = (uint64_t)ds->num_examples * ds->y_dim * 4;
    if ((uint64_t)x_off < DS_HEADER_LEN + meta_len || x_off % DS_ALIGN != 0 ||
        (uint64_t)y_off < (uint64_t)x_off + x_bytes || y_off % DS_ALIGN != 0)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "meta offsets are inconsistent (x at %lld, y at %lld)",
                       (long long)x_off, (long long)y_off);
    if ((uint64_t)y_off + y_bytes > file_size)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "the file is truncated: %llu bytes, but its data ends "
                       "at byte %llu",
                       (unsigned long long)file_size,
                       (unsigned long long)((uint64_t)y_off + y_bytes));

    const unsigned char *base = ds->map;
    ds->x = base + x_off;
    if (ds->task == TY_TASK_CLASSIFICATION)
        ds->y_class = (const int32_t *)(const void *)(base + y_off);
    else
        ds->y_value = (const float *)(const void *)(base + y_off);
    return TY_OK;
}

/* Maps path and parses its TYDS header and meta into *map, *map_len and
 * *meta (the caller frees them on every return). */
static ty_status map_tyds(const char *path, void **map_out, size_t *len_out,
                          json_t **meta_out, uint64_t *meta_len_out,
                          ty_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ty_fail(err, TY_EIO, NULL, "cannot open dataset %s: %s", path,
                       strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        ty_status st = ty_fail(err, TY_EIO, NULL, "cannot stat dataset %s: %s",
                               path, strerror(errno));
        close(fd);
        return st;
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < DS_HEADER_LEN) {
        close(fd);
        return ty_fail(err, TY_EFORMAT, NULL,
                       "dataset %s is not a dataset file (only %llu bytes)",
                       path, (unsigned long long)size);
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED)
        return ty_fail(err, TY_EIO, NULL, "cannot map dataset %s: %s", path,
                       strerror(map_errno));
    *map_out = map;
    *len_out = (size_t)size;

    const unsigned char *p = map;
    uint64_t meta_len = load_le(p + 8, 8);
    *meta_len_out = meta_len;
    json_error_t jerr;
    if (memcmp(p, DS_MAGIC, 4) != 0)
        return ty_fail(err, TY_EFORMAT, NULL, "bad magic (not a TYDS file)");
    if (load_le(p + 4, 4) != DS_VERSION)
        return ty_fail(err, TY_EFORMAT, NULL, "version %llu is not supported",
                       (unsigned long long)load_le(p + 4, 4));
    if (meta_len > size - DS_HEADER_LEN)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "the meta is %llu bytes but the file has only %llu",
                       (unsigned long long)meta_len, (unsigned long long)size);
    *meta_out = json_loadb((const char *)p + DS_HEADER_LEN, (size_t)meta_len,
                           JSON_REJECT_DUPLICATES, &jerr);
    if (!*meta_out && json_error_code(&jerr) == json_error_out_of_memory)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    if (!json_is_object(*meta_out))
        return ty_fail(err, TY_EFORMAT, NULL,
                       "the meta is not a JSON object%s%s",
                       *meta_out ? "" : ": ", *meta_out ? "" : jerr.text);
    return TY_OK;
}

ty_status ty_dataset_open(const char *path, ty_dataset *ds, ty_err *err)
{
    ty_status st;
    uint64_t meta_len = 0;
    memset(ds, 0, sizeof *ds);
    st = map_tyds(path, &ds->map, &ds->map_len, &ds->meta, &meta_len, err);
    if (st == TY_EIO && !ds->map)
        return st; /* nothing mapped */
    if (st != TY_OK ||
        (st = check_meta(ds, ds->map_len, meta_len, err)) != TY_OK)
        goto fail;
    for (uint32_t i = 0; ds->y_class && i < ds->num_examples; i++) {
        if (ds->y_class[i] < 0 || (uint32_t)ds->y_class[i] >= ds->num_classes) {
            st = ty_fail(err, TY_EFORMAT, NULL,
                         "example %u has class index %d, outside 0..%u", i,
                         ds->y_class[i], ds->num_classes - 1);
            goto fail;
        }
    }
    return TY_OK;
fail:
    ty_err_prefix(err, "dataset %s", path);
    if (err)
        err->field[0] = '\0';
    ty_dataset_close(ds);
    return st;
}

/* A token dataset's meta (dataset.h, "Token datasets") against the file. */
static ty_status check_tokens_meta(ty_tokens *t, uint64_t file_size,
                                   uint64_t meta_len, ty_err *err)
{
    static const char *const formats[] = {"text", "tokens"};
    static const char *const dtypes[] = {"uint16", "uint32"};
    const json_t *meta = t->meta;
    int64_t v, x_off, y_off;
    int format = 0, dtype = 0;
    ty_status st;
    const char *task = json_string_value(json_object_get(meta, "task"));
    if (!task || strcmp(task, task_names[TY_TASK_LANGUAGE_MODELING]))
        return ty_fail(err, TY_EFORMAT, NULL,
                       "it is not a language-modeling dataset");
    if ((st = meta_int(meta, "version", DS_VERSION, DS_VERSION, &v, err)) ||
        (st = meta_choice(meta, "format", formats, 2, &format, err)) ||
        (st = meta_choice(meta, "token_dtype", dtypes, 2, &dtype, err)) ||
        (st = meta_int(meta, "vocab_size", 1, TY_DS_MAX_VOCAB, &v, err)))
        return st;
    t->vocab_size = (uint32_t)v;
    t->token_size = dtype == 0 ? 2 : 4;
    if (t->token_size == 2 && t->vocab_size > 65536)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "meta.vocab_size %u does not fit uint16 ids",
                       t->vocab_size);
    if ((st = meta_int(meta, "num_tokens", 1, INT64_MAX / 4, &v, err)))
        return st;
    t->num_tokens = (uint64_t)v;
    const json_t *tok = json_object_get(meta, "tokenizer");
    if (json_is_string(tok) && !strcmp(json_string_value(tok), "byte"))
        t->byte_tokenizer = 1;
    else if (!json_is_null(tok) &&
             !json_is_string(json_object_get(tok, "type")))
        return ty_fail(err, TY_EFORMAT, NULL,
                       "meta.tokenizer must be \"byte\", null or a "
                       "tokenizer description (an object with a type)");
    if (t->byte_tokenizer && t->vocab_size != TY_DS_BYTE_VOCAB)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "meta.vocab_size must be %u for the byte tokenizer",
                       TY_DS_BYTE_VOCAB);
    if ((st = meta_int(meta, "x_offset", 0, INT64_MAX, &x_off, err)) ||
        (st = meta_int(meta, "y_offset", 0, INT64_MAX, &y_off, err)))
        return st;
    uint64_t bytes = t->num_tokens * t->token_size;
    if ((uint64_t)x_off < DS_HEADER_LEN + meta_len || x_off % DS_ALIGN != 0 ||
        (uint64_t)y_off < (uint64_t)x_off + bytes)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "meta offsets are inconsistent (tokens at %lld)",
                       (long long)x_off);
    if ((uint64_t)x_off + bytes > file_size)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "the file is truncated: %llu bytes, but its tokens end "
                       "at byte %llu",
                       (unsigned long long)file_size,
                       (unsigned long long)((uint64_t)x_off + bytes));
    t->tokens = (const unsigned char *)t->map + x_off;
    return TY_OK;
}

ty_status ty_tokens_open(const char *path, ty_tokens *t, ty_err *err)
{
    uint64_t meta_len = 0;
    memset(t, 0, sizeof *t);
    ty_status st =
        map_tyds(path, &t->map, &t->map_len, &t->meta, &meta_len, err);
    if (st == TY_EIO && !t->map)
        return st;
    if (st != TY_OK ||
        (st = check_tokens_meta(t, t->map_len, meta_len, err)) != TY_OK)
        goto fail;
    for (uint64_t i = 0; i < t->num_tokens; i++)
        if (ty_tokens_at(t, i) >= t->vocab_size) {
            st = ty_fail(err, TY_EFORMAT, NULL,
                         "token %llu is %u, outside the vocabulary of %u",
                         (unsigned long long)i, ty_tokens_at(t, i),
                         t->vocab_size);
            goto fail;
        }
    return TY_OK;
fail:
    ty_err_prefix(err, "dataset %s", path);
    if (err)
        err->field[0] = '\0';
    ty_tokens_close(t);
    return st;
}

void ty_tokens_close(ty_tokens *t)
{
    if (!t)
        return;
    json_decref(t->meta);
    if (t->map)
        munmap(t->map, t->map_len);
    memset(t, 0, sizeof *t);
}

void ty_dataset_close(ty_dataset *ds)
{
    if (!ds)
        return;
    json_decref(ds->meta);
    if (ds->map)
        munmap(ds->map, ds->map_len);
    memset(ds, 0, sizeof *ds);
}

void ty_dataset_example_f32(const ty_dataset *ds, uint32_t i, float *out)
{
    size_t n = (size_t)ds->features;
    if (ds->x_dtype == TY_DTYPE_U8) {
        const uint8_t *row = (const uint8_t *)ds->x + (size_t)i * n;
        for (size_t j = 0; j < n; j++)
            out[j] = (float)row[j];
    } else {
        memcpy(out, (const float *)ds->x + (size_t)i * n, n * sizeof *out);
    }
}

/* ---- class maps ----------------------------------------------------------- */

/* A hash consistent with json_equal: equal values hash alike (json_equal
 * compares reals by value, so -0.0 and 0.0 must meet). */
static uint64_t json_hash(const json_t *v)
{
    int type = (int)json_typeof(v);
    uint64_t h = ds_fnv1a(DS_FNV_BASIS, &type, sizeof type);
    switch (json_typeof(v)) {
        case JSON_STRING:
            return ds_fnv1a(h, json_string_value(v), json_string_length(v));
        case JSON_INTEGER: {
            json_int_t i = json_integer_value(v);
            return ds_fnv1a(h, &i, sizeof i);
        }
        case JSON_REAL: {
            double d = json_real_value(v);
            if (d == 0)
                d = 0; /* -0.0 */
            return ds_fnv1a(h, &d, sizeof d);
        }
        default:
            return h; /* arrays, objects, literals: json_equal sorts them out */
    }
}

/* The slot of v in the table over `to`: its index + 1, or 0. */
static uint32_t class_find(const uint32_t *slots, size_t cap, const json_t *to,
                           const json_t *v)
{
    size_t s = (size_t)json_hash(v) & (cap - 1);
    while (slots[s] && !json_equal(json_array_get(to, slots[s] - 1), v))
        s = (s + 1) & (cap - 1);
    return slots[s];
}

/* v's other spelling under the class rule - the integer 3 for the string
 * "3" and back - into *out, or NULL where there is none. A CSV label column
 * of integers became strings before the rule and JSON integers since, so
 * datasets and models from either side of it meet this way. -1 when out of
 * memory. */
static int class_other_spelling(const json_t *v, json_t **out)
{
    int64_t i;
    *out = NULL;
    if (json_is_string(v) &&
        ds_label_int(json_string_value(v), json_string_length(v), &i))
        *out = json_integer(i);
    else if (json_is_integer(v) && json_integer_value(v) >= -DS_LABEL_INT_MAX &&
             json_integer_value(v) <= DS_LABEL_INT_MAX) {
        char text[32];
        snprintf(text, sizeof text, "%lld", (long long)json_integer_value(v));
        *out = json_string(text);
    } else
        return 0;
    return *out ? 0 : -1;
}

ty_status ty_dataset_class_map(const json_t *from, const json_t *to,
                               int32_t *map, ty_err *err)
{
    if (!json_is_array(from) || !json_is_array(to))
        return ty_fail(err, TY_EINVAL, NULL, "class lists must be arrays");
    size_t n_to = json_array_size(to), n_from = json_array_size(from);
    if (n_to > INT32_MAX)
        return ty_fail(err, TY_EINVAL, NULL, "too many classes");
    /* open addressing over `to`; slots hold index + 1, 0 is empty */
    size_t cap = 16;
    while (cap < 2 * n_to)
        cap *= 2;
    uint32_t *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    for (size_t j = 0; j < n_to; j++) {
        const json_t *v = json_array_get(to, j);
        size_t s = (size_t)json_hash(v) & (cap - 1);
        while (slots[s] && !json_equal(json_array_get(to, slots[s] - 1), v))
            s = (s + 1) & (cap - 1);
        if (!slots[s])
            slots[s] = (uint32_t)j + 1; /* the first of duplicates wins */
    }
    ty_status st = TY_OK;
    for (size_t i = 0; i < n_from; i++) {
        const json_t *v = json_array_get(from, i);
        uint32_t found = class_find(slots, cap, to, v);
        if (!found) {
            json_t *other;
            if (class_other_spelling(v, &other) != 0) {
                st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
                break;
            }
            found = other ? class_find(slots, cap, to, other) : 0;
            json_decref(other);
        }
        if (!found) {
            char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
            char shown[64];
            ds_snippet(shown, sizeof shown, text ? text : "?",
                       text ? strlen(text) : 1);
            st = ty_fail(err, TY_EINVAL, NULL,
                         "class %s (index %zu) is not one of the %zu known "
                         "classes",
                         shown, i, n_to);
            free(text);
            break;
        }
        map[i] = (int32_t)(found - 1);
    }
    free(slots);
    return st;
}
