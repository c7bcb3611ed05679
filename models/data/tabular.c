/*
 * tabular.c - column types, the schema and the raw-cell encoding of CSV
 * datasets (see tabular.h). The same encoding serves the CSV converter (a
 * cell's text), predict (a JSON cell) and KServe (a BYTES element), so a
 * value means the same features whichever way it arrives.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "models/data/input.h"
#include "models/data/tabular.h"

static const char *const type_names[] = {"numeric", "boolean", "categorical"};

const char *ds_col_type_name(ds_col_type t)
{
    return (unsigned)t < 3 ? type_names[t] : "?";
}

int ds_col_type_parse(const char *s)
{
    for (int i = 0; s && i < 3; i++)
        if (!strcmp(s, type_names[i]))
            return i;
    return -1;
}

/* ---- numbers and booleans ---- */

static int is_blank(char c) { return c == ' ' || c == '\t'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

ds_num_status ds_number_value(const char *s, size_t len, double *out)
{
    if (len == 0)
        return DS_NUM_EMPTY;
    size_t i = 0, digits = 0;
    if (s[i] == '+' || s[i] == '-')
        i++;
    size_t word = i;
    for (; i < len && is_digit(s[i]); i++)
        digits++;
    if (i < len && s[i] == '.')
        for (i++; i < len && is_digit(s[i]); i++)
            digits++;
    if (digits == 0) {
        size_t n = len - word;
        if ((n == 3 && !strncasecmp(s + word, "nan", 3)) ||
            (n == 3 && !strncasecmp(s + word, "inf", 3)) ||
            (n == 8 && !strncasecmp(s + word, "infinity", 8)))
            return DS_NUM_NOT_FINITE;
        return DS_NUM_SYNTAX;
    }
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < len && (s[i] == '+' || s[i] == '-'))
            i++;
        size_t exp_digits = 0;
        for (; i < len && is_digit(s[i]); i++)
            exp_digits++;
        if (!exp_digits)
            return DS_NUM_SYNTAX;
    }
    if (i != len)
        return DS_NUM_SYNTAX;
    /* strtod stops at the same place: the syntax above is a subset of its;
     * s may not be NUL-terminated at len, so copy short texts */
    char buf[128];
    if (len < sizeof buf) {
        memcpy(buf, s, len);
        buf[len] = '\0';
        *out = strtod(buf, NULL);
    } else {
        char *t = strndup(s, len);
        *out = t ? strtod(t, NULL) : NAN;
        free(t);
    }
    return DS_NUM_OK;
}

ds_num_status ds_number_f32(const char *s, size_t len, float *out)
{
    while (len && is_blank(*s))
        s++, len--;
    while (len && is_blank(s[len - 1]))
        len--;
    double d;
    ds_num_status ns = ds_number_value(s, len, &d);
    if (ns != DS_NUM_OK)
        return ns;
    if (!isfinite(d) || fabs(d) > FLT_MAX)
        return DS_NUM_RANGE;
    *out = (float)d;
    return DS_NUM_OK;
}

int ds_bool_word(const char *s, size_t len)
{
    while (len && is_blank(*s))
        s++, len--;
    while (len && is_blank(s[len - 1]))
        len--;
    if ((len == 4 && !strncasecmp(s, "true", 4)) ||
        (len == 3 && !strncasecmp(s, "yes", 3)))
        return 1;
    if ((len == 5 && !strncasecmp(s, "false", 5)) ||
        (len == 2 && !strncasecmp(s, "no", 2)))
        return 0;
    return -1;
}

/* ---- the string index ---- */

static size_t str_hash(const char *s, size_t n)
{
    uint64_t h = ds_fnv1a(DS_FNV_BASIS, s, n);
    return (size_t)(h ^ (h >> 29));
}

static size_t str_index_slot(const ds_str_index *x, const char *s, size_t n)
{
    size_t i = str_hash(s, n) & (x->cap - 1);
    while (x->slots[i]) {
        const json_t *v = json_array_get(x->list, x->slots[i] - 1);
        if (json_string_length(v) == n && !memcmp(json_string_value(v), s, n))
            break;
        i = (i + 1) & (x->cap - 1);
    }
    return i;
}

int64_t ds_str_index_find(const ds_str_index *x, const char *s, size_t n)
{
    if (!x->cap)
        return -1;
    size_t i = str_index_slot(x, s, n);
    return x->slots[i] ? (int64_t)x->slots[i] - 1 : -1;
}

int ds_str_index_add_last(ds_str_index *x)
{
    if (2 * (x->count + 1) > x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 64;
        uint32_t *slots = calloc(cap, sizeof *slots);
        if (!slots)
            return -1;
        free(x->slots);
        x->slots = slots;
        x->cap = cap;
        for (size_t j = 0; j < x->count; j++) {
            const json_t *v = json_array_get(x->list, j);
            x->slots[str_index_slot(x, json_string_value(v),
                                    json_string_length(v))] = (uint32_t)j + 1;
        }
    }
    const json_t *v = json_array_get(x->list, x->count);
    x->slots[str_index_slot(x, json_string_value(v), json_string_length(v))] =
        (uint32_t)x->count + 1;
    x->count++;
    return 0;
}

void ds_str_index_free(ds_str_index *x)
{
    free(x->slots);
    memset(x, 0, sizeof *x);
}

/* ---- the schema ---- */

void ds_tab_schema_free(ds_tab_schema *s)
{
    for (size_t i = 0; s->cols && i < s->ncols; i++)
        ds_str_index_free(&s->cols[i].cats);
    free(s->cols);
    ds_str_index_free(&s->names);
    json_decref(s->name_list);
    json_decref(s->columns);
    memset(s, 0, sizeof *s);
}

static int text_cmp(const json_t *a, const json_t *b)
{
    size_t la = json_string_length(a), lb = json_string_length(b);
    int c =
        memcmp(json_string_value(a), json_string_value(b), la < lb ? la : lb);
    return c ? c : (la > lb) - (la < lb);
}

/* Compiles column i, appending its name to names (the index's list). */
static ty_status schema_col(ds_tab_schema *s, size_t i, json_t *names,
                            ty_err *err)
{
    const json_t *c = json_array_get(s->columns, i);
    const json_t *name = json_object_get(c, "name");
    int type = ds_col_type_parse(json_string_value(json_object_get(c, "type")));
    ds_tab_col *col = &s->cols[i];
    if (!json_is_object(c) || !json_is_string(name) || type < 0)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "columns[%zu] must be an object with a \"name\" and a "
                       "\"type\" (numeric, boolean or categorical)",
                       i);
    col->name = json_string_value(name);
    col->type = (ds_col_type)type;
    col->offset = (uint32_t)s->width;
    col->width = 1;
    if (ds_str_index_find(&s->names, col->name, json_string_length(name)) >= 0)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "columns[%zu]: the name appears twice", i);
    if (json_array_append(names, (json_t *)name) ||
        ds_str_index_add_last(&s->names))
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    if (col->type == DS_COL_CATEGORICAL) {
        const json_t *cats = json_object_get(c, "categories");
        size_t n = json_array_size(cats);
        if (!json_is_array(cats) || n == 0 || n > TY_DS_CATEGORIES_MAX)
            return ty_fail(err, TY_EFORMAT, NULL,
                           "columns[%zu].categories must be an array of 1 to "
                           "%u strings",
                           i, TY_DS_CATEGORIES_MAX);
        col->cats.list = cats;
        for (size_t k = 0; k < n; k++) {
            const json_t *v = json_array_get(cats, k);
            if (!json_is_string(v) || json_string_length(v) == 0 ||
                (k && text_cmp(json_array_get(cats, k - 1), v) >= 0))
                return ty_fail(err, TY_EFORMAT, NULL,
                               "columns[%zu].categories must be distinct "
                               "non-empty strings in byte order",
                               i);
            if (ds_str_index_add_last(&col->cats))
                return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        }
        col->width = (uint32_t)n;
    }
    s->width += col->width;
    return TY_OK;
}

ty_status ds_tab_schema_init(ds_tab_schema *s, const json_t *columns,
                             ty_err *err)
{
    memset(s, 0, sizeof *s);
    size_t n = json_array_size(columns);
    if (!json_is_array(columns) || n == 0)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "columns must be a non-empty array");
    s->columns = json_incref((json_t *)columns);
    s->name_list = json_array();
    s->cols = calloc(n, sizeof *s->cols);
    if (!s->name_list || !s->cols) {
        ds_tab_schema_free(s);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    s->ncols = n;
    s->names.list = s->name_list;
    ty_status st = TY_OK;
    for (size_t i = 0; i < n && st == TY_OK; i++)
        st = schema_col(s, i, s->name_list, err);
    if (st == TY_OK && s->width > (1u << 24))
        st = ty_fail(err, TY_EFORMAT, NULL,
                     "the columns have too many "
                     "features");
    if (st != TY_OK)
        ds_tab_schema_free(s);
    return st;
}

/* ---- encoding raw cells ---- */

static ty_status cell_fail(const ds_tab_col *c, const char *field,
                           const char *what, ty_err *err)
{
    char name[64];
    ds_snippet(name, sizeof name, c->name, strlen(c->name));
    return ty_fail(err, TY_EINVAL, field, "%s (column \"%s\", %s): %s",
                   field ? field : "a cell", name, ds_col_type_name(c->type),
                   what);
}

ty_status ds_tab_encode_text(const ds_tab_schema *s, size_t col,
                             const char *text, size_t len, float *out,
                             const char *field, ty_err *err)
{
    const ds_tab_col *c = &s->cols[col];
    float *f = out + c->offset;
    size_t t = len;
    while (t && is_blank(*text))
        text++, t--;
    while (t && is_blank(text[t - 1]))
        t--;
    if (c->type == DS_COL_CATEGORICAL) {
        memset(f, 0, c->width * sizeof *f);
        /* categories are matched as written: blanks were dropped from
         * unquoted CSV cells, so a category has none around it */
        int64_t k = len ? ds_str_index_find(&c->cats, text, t) : -1;
        if (k >= 0)
            f[k] = 1.0f;
        return TY_OK;
    }
    if (t == 0) {
        *f = NAN;
        return TY_OK;
    }
    if (c->type == DS_COL_BOOLEAN) {
        int b = ds_bool_word(text, t);
        if (b >= 0) {
            *f = (float)b;
            return TY_OK;
        }
    }
    ds_num_status ns = ds_number_f32(text, t, f);
    if (ns == DS_NUM_OK)
        return TY_OK;
    return cell_fail(c, field,
                     ns == DS_NUM_RANGE ? "the number is outside the float32 "
                                          "range"
                     : ns == DS_NUM_NOT_FINITE
                         ? "NaN and Inf are not allowed (send null or an "
                           "empty string for a missing value)"
                     : c->type == DS_COL_BOOLEAN
                         ? "expected true, false, yes, no, a number or null"
                         : "expected a number, or null for a missing value",
                     err);
}

static ty_status encode_cell(const ds_tab_schema *s, size_t col,
                             const json_t *v, float *out, const char *field,
                             ty_err *err)
{
    const ds_tab_col *c = &s->cols[col];
    char num[32];
    switch (json_typeof(v)) {
        case JSON_STRING:
            return ds_tab_encode_text(s, col, json_string_value(v),
                                      json_string_length(v), out, field, err);
        case JSON_NULL:
            return ds_tab_encode_text(s, col, "", 0, out, field, err);
        case JSON_TRUE:
        case JSON_FALSE:
            if (c->type == DS_COL_CATEGORICAL)
                break;
            out[c->offset] = json_is_true(v) ? 1.0f : 0.0f;
            return TY_OK;
        case JSON_INTEGER:
            /* an integer category ("3") may come as the number 3 */
            snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
            return ds_tab_encode_text(s, col, num, strlen(num), out, field,
                                      err);
        case JSON_REAL: {
            if (c->type == DS_COL_CATEGORICAL)
                break;
            double d = json_real_value(v);
            if (!isfinite(d) || fabs(d) > FLT_MAX)
                return cell_fail(
                    c, field, "the number is outside the float32 range", err);
            out[c->offset] = (float)d;
            return TY_OK;
        }
        default: break;
    }
    return cell_fail(c, field,
                     c->type == DS_COL_CATEGORICAL
                         ? "expected a category as a string, or null"
                         : "expected a number, a string or null",
                     err);
}

ty_status ds_tab_encode_json(const ds_tab_schema *s, const json_t *row,
                             float *out, const char *field, ty_err *err)
{
    char at[128];
    ty_status st = TY_OK;
    if (json_is_array(row)) {
        if (json_array_size(row) != s->ncols)
            return ty_fail(err, TY_EINVAL, field,
                           "%s has %zu values; the model takes rows of %zu "
                           "columns (the CSV's feature columns, in order)",
                           field, json_array_size(row), s->ncols);
        for (size_t i = 0; i < s->ncols && st == TY_OK; i++) {
            snprintf(at, sizeof at, "%s[%zu]", field, i);
            st = encode_cell(s, i, json_array_get(row, i), out, at, err);
        }
        return st;
    }
    if (!json_is_object(row))
        return ty_fail(err, TY_EINVAL, field,
                       "%s must be an array of the row's cells or an object "
                       "keyed by column name",
                       field);
    const char *key;
    const json_t *v;
    json_object_foreach ((json_t *)row, key, v) {
        if (ds_str_index_find(&s->names, key, strlen(key)) < 0) {
            char shown[64];
            ds_snippet(shown, sizeof shown, key, strlen(key));
            return ty_fail(err, TY_EINVAL, field,
                           "%s: the model has no column \"%s\"", field, shown);
        }
    }
    for (size_t i = 0; i < s->ncols && st == TY_OK; i++) {
        const json_t *cell = json_object_get(row, s->cols[i].name);
        snprintf(at, sizeof at, "%s.%s", field, s->cols[i].name);
        st = encode_cell(s, i, cell ? cell : json_null(), out, at, err);
    }
    return st;
}

ty_status ds_tab_remap(const ds_tab_schema *model, const ds_tab_schema *data,
                       int64_t *src, int *identity, ty_err *err)
{
    char shown[64];
    *identity = model->width == data->width && model->ncols == data->ncols;
    for (size_t i = 0; i < data->ncols; i++) {
        const ds_tab_col *d = &data->cols[i];
        if (ds_str_index_find(&model->names, d->name, strlen(d->name)) < 0) {
            ds_snippet(shown, sizeof shown, d->name, strlen(d->name));
            return ty_fail(err, TY_EINVAL, NULL,
                           "the data has a column \"%s\" that the model "
                           "does not take",
                           shown);
        }
    }
    for (size_t i = 0; i < model->ncols; i++) {
        const ds_tab_col *c = &model->cols[i];
        ds_snippet(shown, sizeof shown, c->name, strlen(c->name));
        int64_t k = ds_str_index_find(&data->names, c->name, strlen(c->name));
        if (k < 0)
            return ty_fail(err, TY_EINVAL, NULL,
                           "the data has no column \"%s\" (the model takes "
                           "it)",
                           shown);
        const ds_tab_col *d = &data->cols[k];
        int text = c->type == DS_COL_CATEGORICAL;
        if (text != (d->type == DS_COL_CATEGORICAL))
            return ty_fail(err, TY_EINVAL, NULL,
                           "column \"%s\" is %s in the model but %s in the "
                           "data",
                           shown, ds_col_type_name(c->type),
                           ds_col_type_name(d->type));
        if (!text) {
            src[c->offset] = d->offset;
            *identity &= d->offset == c->offset;
            continue;
        }
        for (uint32_t j = 0; j < c->width; j++) {
            const json_t *cat = json_array_get(c->cats.list, j);
            int64_t e = ds_str_index_find(&d->cats, json_string_value(cat),
                                          json_string_length(cat));
            src[c->offset + j] = e < 0 ? -1 : (int64_t)d->offset + e;
            *identity &= src[c->offset + j] == (int64_t)(c->offset + j);
        }
        *identity &= c->width == d->width;
    }
    return TY_OK;
}

json_t *ds_tab_decode_row(const ds_tab_schema *s, const float *features)
{
    json_t *row = json_array();
    for (size_t i = 0; row && i < s->ncols; i++) {
        const ds_tab_col *c = &s->cols[i];
        const float *f = features + c->offset;
        json_t *v = json_null();
        if (c->type == DS_COL_NUMERIC && !isnan(*f))
            v = json_real(*f);
        else if (c->type == DS_COL_BOOLEAN && !isnan(*f))
            v = json_boolean(*f != 0.0f);
        for (uint32_t k = 0; c->type == DS_COL_CATEGORICAL && k < c->width; k++)
            if (f[k] == 1.0f)
                v = json_copy(json_array_get(c->cats.list, k));
        if (json_array_append_new(row, v)) {
            json_decref(row);
            row = NULL;
        }
    }
    return row;
}

json_t *ds_tab_feature_names(const ds_tab_schema *s)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < s->ncols; i++) {
        const ds_tab_col *c = &s->cols[i];
        if (c->type != DS_COL_CATEGORICAL) {
            if (json_array_append_new(a, json_string(c->name)))
                goto oom;
            continue;
        }
        for (uint32_t k = 0; k < c->width; k++) {
            const char *cat =
                json_string_value(json_array_get(c->cats.list, k));
            size_t len = strlen(c->name) + strlen(cat) + 2;
            char *t = malloc(len);
            if (!t)
                goto oom;
            snprintf(t, len, "%s=%s", c->name, cat);
            int bad = json_array_append_new(a, json_string(t));
            free(t);
            if (bad)
                goto oom;
        }
    }
    return a;
oom:
    json_decref(a);
    return NULL;
}

/* ---- typing columns while a CSV is read ---- */

typedef struct {
    uint64_t missing, values;
    int not_number, not_bool;
    uint64_t text_line; /* the first cell that is not a number */
    json_t *texts;      /* distinct non-empty texts, up to the limit + 1 */
    ds_str_index index;
} col_stat;

struct ds_tab_builder {
    size_t ncols, label_col;
    uint32_t max_categories;
    col_stat *cols;
};

/* Feature column col's 1-based column in the file. */
static size_t file_col(const ds_tab_builder *b, size_t col)
{
    return col < b->label_col ? col + 1 : col + 2;
}

ds_tab_builder *ds_tab_builder_create(size_t ncols, uint32_t max_categories,
                                      size_t label_col)
{
    ds_tab_builder *b = calloc(1, sizeof *b);
    if (!b || !(b->cols = calloc(ncols ? ncols : 1, sizeof *b->cols))) {
        free(b);
        return NULL;
    }
    b->ncols = ncols;
    b->label_col = label_col;
    b->max_categories = max_categories;
    for (size_t i = 0; i < ncols; i++) {
        if (!(b->cols[i].texts = json_array())) {
            ds_tab_builder_destroy(b);
            return NULL;
        }
        b->cols[i].index.list = b->cols[i].texts;
    }
    return b;
}

void ds_tab_builder_destroy(ds_tab_builder *b)
{
    if (!b)
        return;
    for (size_t i = 0; i < b->ncols; i++) {
        ds_str_index_free(&b->cols[i].index);
        json_decref(b->cols[i].texts);
    }
    free(b->cols);
    free(b);
}

ty_status ds_tab_builder_add(ds_tab_builder *b, size_t col, const char *text,
                             size_t len, uint64_t line, ty_err *err)
{
    col_stat *c = &b->cols[col];
    while (len && is_blank(*text))
        text++, len--;
    while (len && is_blank(text[len - 1]))
        len--;
    if (len == 0) {
        c->missing++;
        return TY_OK;
    }
    c->values++;
    float f;
    if (!c->not_number && ds_number_f32(text, len, &f) != DS_NUM_OK) {
        c->not_number = 1;
        c->text_line = line;
    }
    if (!c->not_bool && ds_bool_word(text, len) < 0)
        c->not_bool = 1;
    /* Categories are kept only while they may still be wanted: a column
     * of numbers with a word among them needs its texts to say how many;
     * past the limit only the count "more" matters. */
    if (c->index.count > b->max_categories ||
        ds_str_index_find(&c->index, text, len) >= 0)
        return TY_OK;
    if (!ds_utf8_valid(text, len))
        return ty_fail(err, TY_EFORMAT, "file",
                       "line %llu, column %zu: the cell is not valid UTF-8 "
                       "(save the file as UTF-8)",
                       (unsigned long long)line, file_col(b, col));
    json_t *s = json_stringn(text, len);
    if (!s || json_array_append_new(c->texts, s) ||
        ds_str_index_add_last(&c->index))
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    return TY_OK;
}

static int json_text_cmp(const void *a, const void *b)
{
    return text_cmp(*(json_t *const *)a, *(json_t *const *)b);
}

static ty_status finish_col(ds_tab_builder *b, size_t i, const char *name,
                            int no_echo, json_t *col, int *plain, ty_err *err)
{
    col_stat *c = &b->cols[i];
    char shown[64];
    ds_snippet(shown, sizeof shown, name, strlen(name));
    if (c->values == 0)
        return no_echo ? ty_fail(err, TY_EFORMAT, "file",
                                 "column %zu has no values (every cell is "
                                 "empty)",
                                 file_col(b, i))
                       : ty_fail(err, TY_EFORMAT, "file",
                                 "column \"%s\" has no values (every cell "
                                 "is empty); leave it out of the file",
                                 shown);
    ds_col_type t = !c->not_number ? DS_COL_NUMERIC
                    : !c->not_bool ? DS_COL_BOOLEAN
                                   : DS_COL_CATEGORICAL;
    if (t != DS_COL_NUMERIC || c->missing)
        *plain = 0;
    if (t == DS_COL_CATEGORICAL && c->index.count > b->max_categories) {
        if (no_echo)
            return ty_fail(err, TY_EFORMAT, "max_categories",
                           "column %zu has more than %u distinct values (it "
                           "is categorical: line %llu holds one that is not "
                           "a number); raise max_categories (at most %u) or "
                           "clean the column",
                           file_col(b, i), b->max_categories,
                           (unsigned long long)c->text_line,
                           TY_DS_CATEGORIES_MAX);
        return ty_fail(err, TY_EFORMAT, "max_categories",
                       "column \"%s\" has more than %u distinct values: it "
                       "is categorical (line %llu holds a value that is not "
                       "a number), one feature per value; raise "
                       "max_categories (at most %u), or if the column is "
                       "numeric, fix that cell",
                       shown, b->max_categories,
                       (unsigned long long)c->text_line, TY_DS_CATEGORIES_MAX);
    }
    if (json_object_set_new(col, "type", json_string(ds_col_type_name(t))))
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    if (t == DS_COL_CATEGORICAL) {
        size_t n = json_array_size(c->texts);
        json_t **v = malloc(n * sizeof *v);
        json_t *cats = json_array();
        if (!v || !cats) {
            free(v);
            json_decref(cats);
            return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        }
        for (size_t k = 0; k < n; k++)
            v[k] = json_array_get(c->texts, k);
        qsort(v, n, sizeof *v, json_text_cmp);
        int bad = 0;
        for (size_t k = 0; k < n; k++)
            bad |= json_array_append(cats, v[k]);
        free(v);
        if (bad || json_object_set_new(col, "categories", cats))
            return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    if (json_object_set_new(col, "missing",
                            json_integer((json_int_t)c->missing)))
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    return TY_OK;
}

ty_status ds_tab_builder_finish(ds_tab_builder *b, const json_t *names,
                                int no_echo, json_t **columns, int *plain,
                                ty_err *err)
{
    json_t *out = json_array();
    ty_status st = out ? TY_OK : ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    *plain = 1;
    for (size_t i = 0; i < b->ncols && st == TY_OK; i++) {
        const json_t *name = json_array_get(names, i);
        json_t *col = json_pack("{s:O}", "name", name);
        if (!col || json_array_append_new(out, col)) {
            st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
            break;
        }
        st =
            finish_col(b, i, json_string_value(name), no_echo, col, plain, err);
    }
    if (st != TY_OK) {
        json_decref(out);
        return st;
    }
    *columns = out;
    return TY_OK;
}
