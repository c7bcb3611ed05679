/*
 * csv.c - CSV upload -> TYDS dataset (see ds_convert_csv in dataset.h).
 *
 * Two passes over the file. The first validates every cell, counts the rows
 * and collects the label column (class indices or target values) and the
 * class list; after it the meta is complete, the writer lays out the file,
 * and the second pass parses the features again and streams them out as
 * float32. Only one record (at most TY_DS_MAX_LINE bytes), the labels and the
 * class list are ever in memory. Were the file to change between the passes,
 * the second one notices and fails with TY_EIO.
 *
 * Classes are interned in order of first appearance during pass 1, each with
 * its kind (an integer, another number, or text); after it they are sorted by
 * the rule of dataset.h (integers numerically as JSON integers, other
 * numbers numerically as the strings written, anything else bytewise) and
 * the class indices already collected are renumbered. Until then an index is
 * a position in first-appearance order.
 *
 * The tokenizer follows RFC 4180: fields are separated by commas and records
 * by LF, CRLF or CR; a field that starts with a quote runs to the matching
 * quote, may hold commas and line breaks, and writes a quote as "". Blanks
 * around a field are dropped (inside quotes they are kept, except around a
 * quoted number). A UTF-8 byte-order mark at the start is skipped. Messages
 * give 1-based physical line numbers (where the record starts) and columns.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "models/data/csv.h"
#include "models/data/dataset.h"
#include "models/data/file.h"
#include "models/data/input.h"
#include "models/data/tabular.h"

#define CSV_FIELD "file"

/* ---- the record reader ---------------------------------------------------- */

typedef struct {
    uint32_t off, len; /* into rec; the text is NUL-terminated there */
    int quoted;
} csv_field;

typedef struct {
    ds_input in;
    unsigned char *chunk; /* DS_CHUNK bytes */
    size_t clen, cpos;
    int eof, bom_checked;
    char *rec; /* TY_DS_MAX_LINE + 1 bytes of field text */
    csv_field *fields;
    size_t nfields, fields_cap;
    uint64_t line;     /* physical line of the next byte */
    uint64_t rec_line; /* where the current record starts */
} csv_reader;

static ty_status csv_fill(csv_reader *r, ty_err *err)
{
    size_t got;
    ty_status st = ds_input_read_full(&r->in, r->chunk, DS_CHUNK, &got, err);
    if (st != TY_OK)
        return st;
    r->clen = got;
    r->cpos = 0;
    r->eof = got == 0;
    if (!r->bom_checked) {
        r->bom_checked = 1;
        if (got >= 3 && !memcmp(r->chunk, "\xef\xbb\xbf", 3))
            r->cpos = 3;
    }
    return TY_OK;
}

/* The next byte without consuming it, or -1 at the end of the data. */
static int csv_peek(csv_reader *r, ty_err *err, ty_status *st)
{
    *st = TY_OK;
    if (r->cpos == r->clen && !r->eof && (*st = csv_fill(r, err)) != TY_OK)
        return -1;
    return r->cpos < r->clen ? r->chunk[r->cpos] : -1;
}

static ty_status csv_end_field(csv_reader *r, size_t *out, size_t start,
                               size_t trim_end, int quoted, ty_err *err)
{
    if (r->nfields == r->fields_cap) {
        size_t cap = r->fields_cap ? 2 * r->fields_cap : 64;
        csv_field *f = realloc(r->fields, cap * sizeof *f);
        if (!f)
            return ty_fail(err, TY_ENOMEM, CSV_FIELD, "out of memory");
        r->fields = f;
        r->fields_cap = cap;
    }
    size_t end = quoted ? *out : trim_end;
    r->fields[r->nfields++] = (csv_field){.off = (uint32_t)start,
                                          .len = (uint32_t)(end - start),
                                          .quoted = quoted};
    r->rec[end] = '\0';
    *out = end + 1;
    return TY_OK;
}

/* Reads the next record into r->fields; *have is 0 at the end of the file. */
static ty_status csv_read_record(csv_reader *r, int *have, ty_err *err)
{
    enum { START, UNQUOTED, QUOTED, QUOTE_SEEN, AFTER_QUOTE } state = START;
    size_t out = 0, start = 0, trim_end = 0, raw = 0;
    uint64_t quote_line = 0;
    int quoted = 0, any = 0, c = 0, eol = 0;
    ty_status st;

    r->nfields = 0;
    r->rec_line = r->line;
    *have = 0;
    for (;;) {
        if (r->cpos == r->clen && !r->eof && (st = csv_fill(r, err)) != TY_OK)
            return st;
        if (r->cpos == r->clen) {
            if (!any)
                return TY_OK;
            if (state == QUOTED)
                return ty_fail(err, TY_EFORMAT, CSV_FIELD,
                               "line %llu, column %zu: the quoted field that "
                               "starts here is not closed before the end of "
                               "the file",
                               (unsigned long long)quote_line, r->nfields + 1);
            eol = 0;
            break;
        }
        c = r->chunk[r->cpos++];
        any = 1;
        eol = c == '\n' || c == '\r';
        if (++raw > TY_DS_MAX_LINE && !(eol && state != QUOTED))
            return ty_fail(err, TY_ETOOBIG, CSV_FIELD,
                           "line %llu is longer than %u bytes",
                           (unsigned long long)r->rec_line, TY_DS_MAX_LINE);
        if (c == 0)
            return ty_fail(err, TY_EFORMAT, CSV_FIELD,
                           "line %llu contains a NUL byte (is this a text "
                           "file?)",
                           (unsigned long long)r->line);
        switch (state) {
            case START:
                if (c == ' ' || c == '\t')
                    continue;
                if (c == '"') {
                    state = QUOTED;
                    quoted = 1;
                    quote_line = r->line;
                    continue;
                }
                state = UNQUOTED;
                /* fall through */
            case UNQUOTED:
                if (c == ',' || eol)
                    break;
                r->rec[out++] = (char)c;
                if (c != ' ' && c != '\t')
                    trim_end = out;
                continue;
            case QUOTED:
                if (c == '"') {
                    state = QUOTE_SEEN;
                    continue;
                }
                if (c == '\n')
                    r->line++;
                r->rec[out++] = (char)c;
                continue;
            case QUOTE_SEEN:
                if (c == '"') {
                    r->rec[out++] = '"';
                    state = QUOTED;
                    continue;
                }
                state = AFTER_QUOTE;
                /* fall through */
            case AFTER_QUOTE:
                if (c == ' ' || c == '\t')
                    continue;
                if (c == ',' || eol)
                    break;
                return ty_fail(
                    err, TY_EFORMAT, CSV_FIELD,
                    "line %llu, column %zu: unexpected '%c' after the "
                    "closing quote (inside a quoted field, write a "
                    "quote as \"\")",
                    (unsigned long long)r->line, r->nfields + 1,
                    c >= 0x20 && c < 0x7f ? c : '?');
        }
        /* c is a comma or the line break that ends the record */
        if ((st = csv_end_field(r, &out, start, trim_end, quoted, err)))
            return st;
        if (eol)
            break;
        state = START;
        quoted = 0;
        start = trim_end = out;
    }
    if (!eol && (st = csv_end_field(r, &out, start, trim_end, quoted, err)))
        return st; /* the last record had no line break */
    if (eol) {
        if (c == '\r' && csv_peek(r, err, &st) == '\n')
            r->cpos++;
        if (st != TY_OK)
            return st;
        r->line++;
    }
    *have = 1;
    return TY_OK;
}

static int csv_record_blank(const csv_reader *r)
{
    return r->nfields == 1 && !r->fields[0].quoted && r->fields[0].len == 0;
}

/* The next non-blank record. Blank lines are allowed only at the end: one
 * followed by more data is an error naming it. */
static ty_status csv_next(csv_reader *r, int *have, ty_err *err)
{
    uint64_t blank = 0;
    for (;;) {
        ty_status st = csv_read_record(r, have, err);
        if (st != TY_OK || !*have)
            return st;
        if (!csv_record_blank(r))
            break;
        if (!blank)
            blank = r->rec_line;
    }
    if (blank)
        return ty_fail(err, TY_EFORMAT, CSV_FIELD,
                       "line %llu is blank (blank lines are allowed only at "
                       "the end of the file)",
                       (unsigned long long)blank);
    return TY_OK;
}

static ty_status csv_open(csv_reader *r, const char *path, ty_err *err)
{
    memset(r, 0, sizeof *r);
    r->line = 1;
    r->chunk = malloc(DS_CHUNK);
    r->rec = malloc(TY_DS_MAX_LINE + 1);
    if (!r->chunk || !r->rec) {
        r->in.fd = -1;
        return ty_fail(err, TY_ENOMEM, CSV_FIELD, "out of memory");
    }
    return ds_input_open(&r->in, path, 0, CSV_FIELD, "file", err);
}

static void csv_close(csv_reader *r)
{
    ds_input_close(&r->in);
    free(r->chunk);
    free(r->rec);
    free(r->fields);
    memset(r, 0, sizeof *r);
}

/* ---- cells ---------------------------------------------------------------- */

/* ---- the class rule ------------------------------------------------------- */

/* What a label is, and what a column of them is: the least of its labels. */
typedef enum { LABEL_TEXT = 0, LABEL_NUMBER = 1, LABEL_INT = 2 } label_kind;

/* A class as pass 1 found it, for sorting. */
typedef struct {
    int64_t i;    /* LABEL_INT: the value */
    double d;     /* LABEL_INT and LABEL_NUMBER: the value */
    uint32_t pos; /* its index in first-appearance order */
} class_key;

static label_kind label_kind_of(const char *text, size_t len, class_key *key)
{
    key->i = 0;
    key->d = 0;
    if (ds_label_int(text, len, &key->i)) {
        key->d = (double)key->i;
        return LABEL_INT;
    }
    if (ds_number_value(text, len, &key->d) == DS_NUM_OK && isfinite(key->d))
        return LABEL_NUMBER;
    return LABEL_TEXT;
}

/* qsort's comparators see only the two elements, so the sort works on
 * entries that carry what they need. */
typedef struct {
    class_key key;
    const char *text;
    size_t len;
    label_kind kind; /* the column's, the same in every entry */
} class_entry;

static int text_cmp(const class_entry *a, const class_entry *b)
{
    /* bytewise, so by code point: UTF-8 keeps that order */
    int c = memcmp(a->text, b->text, a->len < b->len ? a->len : b->len);
    return c ? c : (a->len > b->len) - (a->len < b->len);
}

static int class_entry_cmp(const void *pa, const void *pb)
{
    const class_entry *a = pa, *b = pb;
    switch (a->kind) {
        case LABEL_INT: return (a->key.i > b->key.i) - (a->key.i < b->key.i);
        case LABEL_NUMBER:
            if (a->key.d != b->key.d)
                return a->key.d < b->key.d ? -1 : 1;
            return text_cmp(a, b); /* "1.0" and "1.00" are two classes */
        case LABEL_TEXT: break;
    }
    return text_cmp(a, b);
}

/* ---- the conversion ------------------------------------------------------- */

typedef struct {
    const char *label_column;
    ty_task task;
    size_t ncols, label_col;
    json_t *columns;       /* every header name, in order */
    json_t *feature_names; /* the columns but the label */
    json_t *classes;       /* classification: labels by first appearance until
                              sort_classes, then in class order */
    ds_str_index class_index;
    class_key *keys; /* per class, by first appearance */
    size_t keys_cap;
    label_kind kind; /* the least kind of the labels so far */
    void *y;         /* int32 class indices or float targets */
    size_t y_cap;
    uint32_t rows;
    float *row;  /* one example's features (the schema's width) */
    int no_echo; /* DS_CONVERT_NO_ECHO: quote nothing from the file */
    uint32_t max_categories;
    ds_tab_builder *types; /* pass 1: the feature columns' types */
    ds_tab_schema schema;  /* pass 2: how cells become features */
} csv_conv;

static const char *column_name(const csv_conv *cv, size_t col)
{
    return json_string_value(json_array_get(cv->columns, col));
}

static ty_status cell_error(const csv_conv *cv, const csv_reader *r, size_t col,
                            ds_num_status ns, ty_err *err)
{
    const csv_field *f = &r->fields[col];
    char name[64], value[64];
    const char *cname = column_name(cv, col);
    ds_snippet(name, sizeof name, cname, strlen(cname));
    ds_snippet(value, sizeof value, r->rec + f->off, f->len);
    const char *what = ns == DS_NUM_EMPTY ? "the cell is empty (missing values "
                                            "are not supported)"
                       : ns == DS_NUM_NOT_FINITE
                           ? "is not a finite number (NaN "
                             "and Inf are not allowed)"
                       : ns == DS_NUM_RANGE ? "is outside the float32 range"
                                            : "is not a number";
    if (cv->no_echo)
        return ty_fail(err, TY_EFORMAT, CSV_FIELD,
                       "line %llu, column %zu: %s%s",
                       (unsigned long long)r->rec_line, col + 1,
                       ns == DS_NUM_EMPTY ? "" : "the cell ", what);
    if (ns == DS_NUM_EMPTY)
        return ty_fail(err, TY_EFORMAT, CSV_FIELD,
                       "line %llu, column %zu (\"%s\"): %s",
                       (unsigned long long)r->rec_line, col + 1, name, what);
    return ty_fail(err, TY_EFORMAT, CSV_FIELD,
                   "line %llu, column %zu (\"%s\"): \"%s\" %s",
                   (unsigned long long)r->rec_line, col + 1, name, value, what);
}

static ty_status header_error_columns(const csv_conv *cv, ty_err *err)
{
    static const char more[] = ", ...";
    char list[320] = "", shown[64], label[64];
    size_t used = 0;
    for (size_t i = 0; i < cv->ncols; i++) {
        const char *name = column_name(cv, i);
        ds_snippet(shown, sizeof shown, name, strlen(name));
        /* keep room for `more` after whatever fits */
        size_t room = sizeof list - used - sizeof more;
        int w = snprintf(list + used, room, "%s%s", i ? ", " : "", shown);
        if (w < 0 || (size_t)w >= room) {
            memcpy(list + used, more, sizeof more);
            break;
        }
        used += (size_t)w;
    }
    ds_snippet(label, sizeof label, cv->label_column, strlen(cv->label_column));
    if (cv->no_echo)
        return ty_fail(err, TY_EFORMAT, "label_column",
                       "label column \"%s\" is not in the header (it names "
                       "%zu columns)",
                       label, cv->ncols);
    return ty_fail(err, TY_EFORMAT, "label_column",
                   "label column \"%s\" is not in the header (columns: %s)",
                   label, list);
}

/* Pass 1's header: names must be non-empty, valid UTF-8 and unique, there must
 * be a feature column, and the label column must be among them. */
static ty_status read_header(csv_conv *cv, const csv_reader *r, ty_err *err)
{
    ds_str_index names = {0};
    ty_status st = TY_OK;
    char shown[64];

    cv->ncols = r->nfields;
    cv->columns = json_array();
    cv->feature_names = json_array();
    if (!cv->columns || !cv->feature_names)
        return ty_fail(err, TY_ENOMEM, CSV_FIELD, "out of memory");
    names.list = cv->columns;
    if (cv->ncols < 2) {
        const csv_field *f = &r->fields[0];
        const char *text = r->rec + f->off;
        /* Most likely binary data uploaded as CSV: say so, rather than guess
         * at separators or echo the bytes back. */
        if (!ds_utf8_valid(text, f->len))
            return ty_fail(err, TY_EFORMAT, CSV_FIELD,
                           "line %llu: this is not a text CSV file (it holds "
                           "bytes that are not UTF-8 text); upload the data "
                           "as CSV, or choose the format that matches the "
                           "file (idx or npy)",
                           (unsigned long long)r->rec_line);
        const char *sep = memchr(text, ';', f->len)    ? "';'"
                          : memchr(text, '\t', f->len) ? "tabs"
                                                       : NULL;
        ds_snippet(shown, sizeof shown, text, f->len);
        if (cv->no_echo)
            return ty_fail(err, TY_EFORMAT, CSV_FIELD,
                           "not a CSV file with a header: line %llu has 1 "
                           "column%s; a dataset needs a label column and at "
                           "least one feature column, separated by commas",
                           (unsigned long long)r->rec_line,
                           sep ? " (it seems to use another separator)" : "");
        if (sep)
            return ty_fail(err, TY_EFORMAT, CSV_FIELD,
                           "line %llu: the header has only one column "
                           "(\"%s\"); columns must be separated by commas, "
                           "but this file seems to use %s",
                           (unsigned long long)r->rec_line, shown, sep);
        return ty_fail(err, TY_EFORMAT, CSV_FIELD,
                       "line %llu: the header has only one column (\"%s\"); "
                       "a dataset needs a label column and at least one "
                       "feature column",
                       (unsigned long long)r->rec_line, shown);
    }
    for (size_t i = 0; i < cv->ncols; i++) {
        const csv_field *f = &r->fields[i];
        const char *name = r->rec + f->off;
        if (f->len == 0) {
            st = ty_fail(err, TY_EFORMAT, CSV_FIELD,
                         "line %llu, column %zu: the column name is empty",
                         (unsigned long long)r->rec_line, i + 1);
            goto done;
        }
        if (!ds_utf8_valid(name, f->len)) {
            st = ty_fail(err, TY_EFORMAT, CSV_FIELD,
                         "line %llu, column %zu: the column name is not valid "
                         "UTF-8 (save the file as UTF-8)",
                         (unsigned long long)r->rec_line, i + 1);
            goto done;
        }
        int64_t seen = ds_str_index_find(&names, name, f->len);
        if (seen >= 0 && cv->no_echo) {
            st = ty_fail(err, TY_EFORMAT, CSV_FIELD,
                         "line %llu: columns %lld and %zu have the same name",
                         (unsigned long long)r->rec_line, (long long)seen + 1,
                         i + 1);
            goto done;
        }
        if (seen >= 0) {
            ds_snippet(shown, sizeof shown, name, f->len);
            st = ty_fail(err, TY_EFORMAT, CSV_FIELD,
                         "line %llu: the column name \"%s\" appears twice "
                         "(columns %lld and %zu)",
                         (unsigned long long)r->rec_line, shown,
                         (long long)seen + 1, i + 1);
            goto done;
        }
        if (json_array_append_new(cv->columns, json_stringn(name, f->len)) ||
            ds_str_index_add_last(&names)) {
            st = ty_fail(err, TY_ENOMEM, CSV_FIELD, "out of memory");
            goto done;
        }
    }
    int64_t label =
        ds_str_index_find(&names, cv->label_column, strlen(cv->label_column));
    if (label < 0) {
        st = header_error_columns(cv, err);
        goto done;
    }
    cv->label_col = (size_t)label;
    for (size_t i = 0; i < cv->ncols; i++)
        if (i != cv->label_col &&
            json_array_append(cv->feature_names,
                              json_array_get(cv->columns, i))) {
            st = ty_fail(err, TY_ENOMEM, CSV_FIELD, "out of memory");
            goto done;
        }
    cv->types =
        ds_tab_builder_create(cv->ncols - 1, cv->max_categories, cv->label_col);
    if (!cv->types)
        st = ty_fail(err, TY_ENOMEM, CSV_FIELD, "out of memory");
done:
    free(names.slots);
    return st;
}

static ty_status push_label(csv_conv *cv, const void *v, ty_err *err)
{
    if (cv->rows == cv->y_cap) {
        size_t cap = cv->y_cap ? 2 * cv->y_cap : 1024;
        void *y = realloc(cv->y, cap * 4);
        if (!y)
            return ty_fail(err, TY_ENOMEM, CSV_FIELD, "out of memory");
        cv->y = y;
        cv->y_cap = cap;
    }
    memcpy((char *)cv->y + (size_t)cv->rows * 4, v, 4);
    return TY_OK;
}

/* Pass 1's label cell: a class (interned in order of first appearance, with
 * its kind) or a regression target. */
static ty_status read_label(csv_conv *cv, const csv_reader *r, ty_err *err)
{
    const csv_field *f = &r->fields[cv->label_col];
    const char *text = r->rec + f->off;
    char name[64];
    ds_snippet(name, sizeof name, cv->label_column, strlen(cv->label_column));

    if (cv->task == TY_TASK_REGRESSION) {
        float v = 0;
        ds_num_status ns = ds_number_f32(text, f->len, &v);
        if (ns != DS_NUM_OK)
            return cell_error(cv, r, cv->label_col, ns, err);
        return push_label(cv, &v, err);
    }
    if (f->len == 0)
        return ty_fail(err, TY_EFORMAT, CSV_FIELD,
                       "line %llu, column %zu (\"%s\"): the label is empty",
                       (unsigned long long)r->rec_line, cv->label_col + 1,
                       name);
    if (f->len > TY_DS_MAX_LABEL_LEN)
        return ty_fail(err, TY_ETOOBIG, CSV_FIELD,
                       "line %llu, column %zu (\"%s\"): the label is %u bytes "
                       "long; the limit is %u",
                       (unsigned long long)r->rec_line, cv->label_col + 1, name,
                       f->len, TY_DS_MAX_LABEL_LEN);
    int64_t k = ds_str_index_find(&cv->class_index, text, f->len);
    if (k < 0) {
        if (!ds_utf8_valid(text, f->len))
            return ty_fail(err, TY_EFORMAT, CSV_FIELD,
                           "line %llu, column %zu (\"%s\"): the label is not "
                           "valid UTF-8 (save the file as UTF-8)",
                           (unsigned long long)r->rec_line, cv->label_col + 1,
                           name);
        if (cv->class_index.count == TY_DS_MAX_CLASSES)
            return ty_fail(err, TY_ETOOBIG, CSV_FIELD,
                           "line %llu, column %zu (\"%s\"): more than %u "
                           "distinct labels; if this is a numeric target, use "
                           "the regression task",
                           (unsigned long long)r->rec_line, cv->label_col + 1,
                           name, TY_DS_MAX_CLASSES);
        if (cv->class_index.count == cv->keys_cap) {
            size_t cap = cv->keys_cap ? 2 * cv->keys_cap : 64;
            class_key *keys = realloc(cv->keys, cap * sizeof *keys);
            if (!keys)
                return ty_fail(err, TY_ENOMEM, CSV_FIELD, "out of memory");
            cv->keys = keys;
            cv->keys_cap = cap;
        }
        class_key *key = &cv->keys[cv->class_index.count];
        label_kind kind = label_kind_of(text, f->len, key);
        key->pos = (uint32_t)cv->class_index.count;
        if (kind < cv->kind)
            cv->kind = kind;
        if (json_array_append_new(cv->classes, json_stringn(text, f->len)) ||
            ds_str_index_add_last(&cv->class_index))
            return ty_fail(err, TY_ENOMEM, CSV_FIELD, "out of memory");
        k = (int64_t)cv->class_index.count - 1;
    }
    int32_t idx = (int32_t)k;
    return push_label(cv, &idx, err);
}

/* After pass 1: puts the classes in the order of the rule (integers as JSON
 * integers) and renumbers the class indices collected. On failure (out of
 * memory) nothing is changed. */
static ty_status sort_classes(csv_conv *cv, ty_err *err)
{
    const size_t n = json_array_size(cv->classes);
    class_entry *e = malloc((n ? n : 1) * sizeof *e);
    int32_t *index = malloc((n ? n : 1) * sizeof *index);
    json_t *sorted = json_array();
    ty_status st = TY_OK;
    if (!e || !index || !sorted)
        goto oom;
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(cv->classes, i);
        e[i] = (class_entry){.key = cv->keys[i],
                             .text = json_string_value(v),
                             .len = json_string_length(v),
                             .kind = cv->kind};
    }
    qsort(e, n, sizeof *e, class_entry_cmp);
    for (size_t i = 0; i < n; i++) {
        index[e[i].key.pos] = (int32_t)i;
        json_t *c = cv->kind == LABEL_INT ? json_integer(e[i].key.i)
                                          : json_stringn(e[i].text, e[i].len);
        if (json_array_append_new(sorted, c))
            goto oom;
    }
    int32_t *y = cv->y;
    for (uint32_t r = 0; r < cv->rows; r++)
        y[r] = index[y[r]];
    json_decref(cv->classes);
    cv->classes = sorted;
    sorted = NULL;
    goto done;
oom:
    st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
done:
    json_decref(sorted);
    free(e);
    free(index);
    return st;
}

static ty_status file_changed(ty_err *err)
{
    return ty_fail(err, TY_EIO, CSV_FIELD,
                   "the file changed while it was being converted");
}

/* One pass over the file. Without a writer (pass 1) it reads the header and
 * the labels and counts the rows; with one (pass 2) it writes the features. */
static ty_status csv_pass(csv_conv *cv, const char *path, ds_writer *w,
                          ty_err *err)
{
    csv_reader r;
    int have;
    uint32_t rows = 0;
    ty_status st = csv_open(&r, path, err);
    if (st != TY_OK)
        goto done;
    if ((st = csv_next(&r, &have, err)) != TY_OK)
        goto done;
    if (!have) {
        st = w ? file_changed(err)
               : ty_fail(err, TY_EFORMAT, CSV_FIELD,
                         "the file is empty; a CSV file starts with a header "
                         "row naming its columns");
        goto done;
    }
    if (!w && (st = read_header(cv, &r, err)) != TY_OK)
        goto done;
    if (w && r.nfields != cv->ncols) {
        st = file_changed(err);
        goto done;
    }
    for (;;) {
        if ((st = csv_next(&r, &have, err)) != TY_OK || !have)
            break;
        if (r.nfields != cv->ncols) {
            st = ty_fail(err, TY_EFORMAT, CSV_FIELD,
                         "line %llu has %zu column%s but the header has %zu",
                         (unsigned long long)r.rec_line, r.nfields,
                         r.nfields == 1 ? "" : "s", cv->ncols);
            break;
        }
        if (rows == TY_DS_MAX_EXAMPLES) {
            st = ty_fail(err, TY_ETOOBIG, CSV_FIELD,
                         "the file has more than %u rows", TY_DS_MAX_EXAMPLES);
            break;
        }
        if (w && rows == cv->rows) {
            st = file_changed(err);
            break;
        }
        size_t j = 0;
        for (size_t col = 0; col < cv->ncols && st == TY_OK; col++) {
            if (col == cv->label_col) {
                if (!w)
                    st = read_label(cv, &r, err);
                continue;
            }
            const csv_field *f = &r.fields[col];
            if (!w)
                st = ds_tab_builder_add(cv->types, j++, r.rec + f->off, f->len,
                                        r.rec_line, err);
            else if (ds_tab_encode_text(&cv->schema, j++, r.rec + f->off,
                                        f->len, cv->row, NULL, err) != TY_OK)
                st = file_changed(err); /* pass 1 typed every cell */
        }
        if (st == TY_OK && w)
            st = ds_writer_write(w, cv->row, cv->schema.width * sizeof *cv->row,
                                 err);
        if (st != TY_OK)
            break;
        rows++;
        if (!w)
            cv->rows = rows;
    }
    if (st == TY_OK && !w && rows == 0)
        st = ty_fail(err, TY_EFORMAT, CSV_FIELD,
                     "the file has a header but no data rows");
    if (st == TY_OK && w && rows != cv->rows)
        st = file_changed(err);
done:
    csv_close(&r);
    return st;
}

ty_status ds_convert_csv(const char *csv_path, const char *label_column,
                         ty_task task, const char *out_path, ty_err *err)
{
    return ds_convert_csv_flags(csv_path, label_column, task, 0, out_path, err);
}

ty_status ds_convert_csv_flags(const char *csv_path, const char *label_column,
                               ty_task task, unsigned flags,
                               const char *out_path, ty_err *err)
{
    return ds_convert_csv_ex(csv_path, label_column, task, flags, 0, out_path,
                             err);
}

ty_status ds_convert_csv_ex(const char *csv_path, const char *label_column,
                            ty_task task, unsigned flags,
                            uint32_t max_categories, const char *out_path,
                            ty_err *err)
{
    csv_conv cv = {.label_column = label_column,
                   .task = task,
                   .kind = LABEL_INT,
                   .no_echo = (flags & DS_CONVERT_NO_ECHO) != 0,
                   .max_categories = max_categories ? max_categories
                                                    : TY_DS_CATEGORIES_DEFAULT};
    ds_writer w = DS_WRITER_INIT;
    json_t *meta = NULL, *columns = NULL, *names = NULL;
    int plain = 1;
    ty_status st;

    if (!out_path || !*out_path)
        return ty_fail(err, TY_EINVAL, NULL, "no output path given");
    if (!label_column || !*label_column) {
        st = ty_fail(err, TY_EINVAL, "label_column",
                     "label_column is required for a CSV dataset");
        goto fail;
    }
    if (task != TY_TASK_CLASSIFICATION && task != TY_TASK_REGRESSION) {
        st = ty_fail(err, TY_EINVAL, "task",
                     "task must be classification or regression");
        goto fail;
    }
    cv.classes = json_array();
    cv.class_index.list = cv.classes;
    if (!cv.classes) {
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        goto fail;
    }
    if (cv.max_categories > TY_DS_CATEGORIES_MAX) {
        st = ty_fail(err, TY_EINVAL, "max_categories",
                     "max_categories must be from 1 to %u",
                     TY_DS_CATEGORIES_MAX);
        goto fail;
    }
    if ((st = csv_pass(&cv, csv_path, NULL, err)) != TY_OK ||
        (task == TY_TASK_CLASSIFICATION &&
         (st = sort_classes(&cv, err)) != TY_OK) ||
        (st = ds_tab_builder_finish(cv.types, cv.feature_names, cv.no_echo,
                                    &columns, &plain, err)) != TY_OK ||
        (st = ds_tab_schema_init(&cv.schema, columns, err)) != TY_OK)
        goto fail;
    if (cv.schema.width > TY_DS_MAX_FEATURES) {
        st = ty_fail(err, TY_ETOOBIG, CSV_FIELD,
                     "the columns make more than %u features",
                     TY_DS_MAX_FEATURES);
        goto fail;
    }
    names = plain ? json_incref(cv.feature_names)
                  : ds_tab_feature_names(&cv.schema);
    cv.row = malloc(cv.schema.width * sizeof *cv.row);
    uint32_t features = (uint32_t)cv.schema.width;
    /* Numeric, complete columns keep the preprocessing they always had;
     * anything else needs the model to impute and encode (tabular.h). */
    meta = ds_meta_new("csv", task, cv.rows, &features, 1, TY_DTYPE_F32, 1,
                       plain ? "standardize" : "tabular");
    if (!meta || !names || !cv.row ||
        json_object_set(meta, "columns", columns) ||
        (task == TY_TASK_CLASSIFICATION &&
         (json_object_set_new(
              meta, "num_classes",
              json_integer((json_int_t)json_array_size(cv.classes))) ||
          json_object_set(meta, "classes", cv.classes))) ||
        json_object_set(meta, "feature_names", names) ||
        json_object_set_new(meta, "label_column", json_string(label_column))) {
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        goto fail;
    }
    uint64_t x_bytes = (uint64_t)cv.rows * features * sizeof(float);
    uint64_t y_bytes = (uint64_t)cv.rows * 4;
    if ((st = ds_writer_create(&w, out_path, meta, x_bytes, y_bytes, err)) ||
        (st = csv_pass(&cv, csv_path, &w, err)) ||
        (st = ds_writer_begin_y(&w, err)) ||
        (st = ds_writer_write(&w, cv.y, (size_t)y_bytes, err)) ||
        (st = ds_writer_finish(&w, err)))
        goto fail;
    goto done;
fail:
    ds_writer_discard(&w, out_path);
done:
    json_decref(meta);
    json_decref(columns);
    json_decref(names);
    ds_tab_builder_destroy(cv.types);
    ds_tab_schema_free(&cv.schema);
    json_decref(cv.columns);
    json_decref(cv.feature_names);
    json_decref(cv.classes);
    free(cv.class_index.slots);
    free(cv.keys);
    free(cv.y);
    free(cv.row);
    return st;
}

/* ---- a text column (csv.h) ------------------------------------------------ */

static ty_status text_column_missing(const csv_conv *cv,
                                     const char *text_column, ty_err *err)
{
    char shown[64];
    ds_snippet(shown, sizeof shown, text_column, strlen(text_column));
    if (cv->no_echo)
        return ty_fail(err, TY_EFORMAT, "text_column",
                       "text column \"%s\" is not in the header (it names %zu "
                       "columns)",
                       shown, cv->ncols);
    ty_err tmp = {0};
    header_error_columns(cv, &tmp); /* the list of columns, reworded */
    const char *list = strstr(tmp.msg, "(columns: ");
    return ty_fail(err, TY_EFORMAT, "text_column",
                   "text column \"%s\" is not in the header %s", shown,
                   list ? list : "");
}

ty_status ds_csv_text_pass(const char *path, const char *label_column,
                           const char *text_column, unsigned flags,
                           ds_csv_labels *labels, ds_csv_cell_fn fn, void *ctx,
                           uint32_t *rows, ty_err *err)
{
    csv_conv cv = {.label_column = label_column,
                   .task = TY_TASK_CLASSIFICATION,
                   .kind = LABEL_INT,
                   .no_echo = (flags & DS_CONVERT_NO_ECHO) != 0,
                   .max_categories = TY_DS_CATEGORIES_DEFAULT};
    csv_reader r;
    size_t text_col = 0;
    int have;
    ty_status st;

    *rows = 0;
    cv.classes = json_array();
    cv.class_index.list = cv.classes;
    if ((st = csv_open(&r, path, err)) != TY_OK)
        goto done;
    if (!cv.classes) {
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        goto done;
    }
    if ((st = csv_next(&r, &have, err)) != TY_OK)
        goto done;
    if (!have) {
        st = ty_fail(err, TY_EFORMAT, CSV_FIELD,
                     "the file is empty; a CSV file starts with a header row "
                     "naming its columns");
        goto done;
    }
    if ((st = read_header(&cv, &r, err)) != TY_OK)
        goto done;
    for (text_col = 0; text_col < cv.ncols; text_col++)
        if (!strcmp(column_name(&cv, text_col), text_column))
            break;
    if (text_col == cv.ncols) {
        st = text_column_missing(&cv, text_column, err);
        goto done;
    }
    for (;;) {
        if ((st = csv_next(&r, &have, err)) != TY_OK || !have)
            break;
        if (r.nfields != cv.ncols) {
            st = ty_fail(err, TY_EFORMAT, CSV_FIELD,
                         "line %llu has %zu column%s but the header has %zu",
                         (unsigned long long)r.rec_line, r.nfields,
                         r.nfields == 1 ? "" : "s", cv.ncols);
            break;
        }
        if (cv.rows == TY_DS_MAX_EXAMPLES) {
            st = ty_fail(err, TY_ETOOBIG, CSV_FIELD,
                         "the file has more than %u rows", TY_DS_MAX_EXAMPLES);
            break;
        }
        const csv_field *f = &r.fields[text_col];
        if ((labels && (st = read_label(&cv, &r, err)) != TY_OK) ||
            (st = fn(ctx, r.rec + f->off, f->len, r.rec_line, text_col + 1,
                     err)) != TY_OK)
            break;
        cv.rows++;
    }
    *rows = cv.rows;
    if (st != TY_OK || !labels)
        goto done;
    if (cv.rows == 0) {
        st = ty_fail(err, TY_EFORMAT, CSV_FIELD,
                     "the file has a header but no data rows");
        goto done;
    }
    if ((st = sort_classes(&cv, err)) != TY_OK)
        goto done;
    labels->classes = cv.classes;
    labels->y = cv.y;
    labels->rows = cv.rows;
    cv.classes = NULL;
    cv.y = NULL;
done:
    csv_close(&r);
    ds_tab_builder_destroy(cv.types);
    json_decref(cv.columns);
    json_decref(cv.feature_names);
    json_decref(cv.classes);
    free(cv.class_index.slots);
    free(cv.keys);
    free(cv.y);
    return st;
}

void ds_csv_labels_free(ds_csv_labels *l)
{
    json_decref(l->classes);
    free(l->y);
    memset(l, 0, sizeof *l);
}
