/*
 * text_csv.c - a text classification CSV -> TYDS dataset (see
 * ds_convert_csv_text in dataset.h).
 *
 * Three passes over the file, each through csv.c's reader
 * (ds_csv_text_pass), so quoting, line numbers and the class rule are the
 * tabular converter's: the first checks every text cell (UTF-8), collects
 * the labels and, when a BPE is to be learned, counts the cells' words; the
 * second encodes every cell to count the tokens and the truncated rows
 * (the meta needs them before the writer lays out the file); the third
 * encodes again and writes each row's first max_length ids as floats,
 * padded with -1. Only one record, one row of ids, the labels and the class
 * list are ever in memory. On any failure the output is removed.
 */
#include <stdlib.h>
#include <string.h>

#include "models/data/csv.h"
#include "models/data/dataset.h"
#include "models/data/file.h"
#include "models/data/tokenizer.h"
#include "models/data/tokens.h"

#define CSV_FIELD "file"

typedef struct {
    ty_tokenizer *tok;       /* encodes (passes 2 and 3) */
    ty_bpe_learner *learner; /* pass 1, when learning */
    uint32_t max_length;
    uint64_t num_tokens;
    uint32_t truncated;
    uint32_t rows;  /* rows written (pass 3) */
    uint32_t limit; /* pass 3: the rows pass 1 found */
    float *row;     /* max_length values */
    ds_writer *w;   /* pass 3 */
} text_ctx;

/* Pass 1: the cell is UTF-8 (named by line and column when not) and, when
 * learning, its words are counted. */
static ty_status check_cell(void *ctx, const char *text, size_t len,
                            uint64_t line, size_t column, ty_err *err)
{
    text_ctx *c = ctx;
    ds_utf8_check check;
    uint64_t bad = 0;
    ds_utf8_check_init(&check);
    if (!ds_utf8_check_feed(&check, (const unsigned char *)text, len, &bad) ||
        !ds_utf8_check_end(&check, &bad))
        return ty_fail(err, TY_EFORMAT, CSV_FIELD,
                       "line %llu, column %zu: the text is not valid UTF-8 "
                       "(the byte sequence at byte %llu of the cell is not a "
                       "UTF-8 character; save the file as UTF-8)",
                       (unsigned long long)line, column,
                       (unsigned long long)bad + 1);
    if (c->learner && len)
        return ty_bpe_learner_feed(c->learner, text, len, err);
    return TY_OK;
}

static ty_status file_changed(ty_err *err)
{
    return ty_fail(err, TY_EIO, CSV_FIELD,
                   "the file changed while it was being converted");
}

/* Passes 2 and 3: the cell's ids, counted and (pass 3) written. */
static ty_status encode_cell(void *ctx, const char *text, size_t len,
                             uint64_t line, size_t column, ty_err *err)
{
    text_ctx *c = ctx;
    uint32_t *ids = NULL;
    size_t n = 0;
    (void)line;
    (void)column;
    ty_status st = ty_tokenizer_encode(c->tok, text, len, &ids, &n, err);
    if (st != TY_OK) {
        free(ids);
        return st == TY_EINVAL ? file_changed(err) : st; /* pass 1 checked */
    }
    c->num_tokens += n;
    if (n > c->max_length)
        c->truncated++;
    if (c->w) {
        if (c->rows == c->limit) {
            free(ids);
            return file_changed(err);
        }
        size_t keep = n < c->max_length ? n : c->max_length;
        for (size_t i = 0; i < keep; i++)
            c->row[i] = (float)ids[i];
        for (size_t i = keep; i < c->max_length; i++)
            c->row[i] = -1.0f;
        st = ds_writer_write(c->w, c->row, c->max_length * sizeof *c->row, err);
        c->rows++;
    }
    free(ids);
    return st;
}

/* The byte tokenizer, for a request that names none. */
static ty_status byte_tokenizer(ty_tokenizer **out, ty_err *err)
{
    json_t *byte = json_string("byte");
    if (!byte)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    ty_status st = ty_tokenizer_load(byte, out, err);
    json_decref(byte);
    return st;
}

static json_t *text_meta(const char *label_column, const char *text_column,
                         const ds_csv_labels *labels, const text_ctx *c)
{
    uint32_t shape = c->max_length;
    json_t *meta = ds_meta_new("csv", TY_TASK_CLASSIFICATION, labels->rows,
                               &shape, 1, TY_DTYPE_F32, 1, "tokens");
    if (!meta ||
        json_object_set_new(
            meta, "num_classes",
            json_integer((json_int_t)json_array_size(labels->classes))) ||
        json_object_set(meta, "classes", labels->classes) ||
        json_object_set_new(meta, "label_column", json_string(label_column)) ||
        json_object_set_new(meta, "text_column", json_string(text_column)) ||
        json_object_set(meta, "tokenizer",
                        (json_t *)ty_tokenizer_description(c->tok)) ||
        json_object_set_new(meta, "vocab_size",
                            json_integer(ty_tokenizer_vocab_size(c->tok))) ||
        json_object_set_new(meta, "max_length", json_integer(c->max_length)) ||
        json_object_set_new(meta, "num_tokens",
                            json_integer((json_int_t)c->num_tokens)) ||
        json_object_set_new(meta, "truncated_examples",
                            json_integer(c->truncated))) {
        json_decref(meta);
        return NULL;
    }
    return meta;
}

ty_status ds_convert_csv_text(const char *csv_path, const char *label_column,
                              const char *text_column,
                              const ty_tokenizer_request *req,
                              uint32_t max_length, unsigned flags,
                              const char *out_path, ty_err *err)
{
    text_ctx c = {.max_length = max_length};
    ds_csv_labels labels = {0};
    ty_tokenizer *own = NULL;
    ds_writer w = DS_WRITER_INIT;
    json_t *meta = NULL;
    uint32_t rows = 0;
    ty_status st;

    if (!out_path || !*out_path)
        return ty_fail(err, TY_EINVAL, NULL, "no output path given");
    if (!label_column || !*label_column) {
        st = ty_fail(err, TY_EINVAL, "label_column",
                     "label_column is required for a CSV dataset");
        goto fail;
    }
    if (!text_column || !*text_column) {
        st = ty_fail(err, TY_EINVAL, "text_column",
                     "text_column must name the column that holds the text");
        goto fail;
    }
    if (!strcmp(text_column, label_column)) {
        st = ty_fail(err, TY_EINVAL, "text_column",
                     "text_column and label_column name the same column; "
                     "the text cannot be its own label");
        goto fail;
    }
    if (max_length < 1 || max_length > TY_DS_TEXT_MAX_LENGTH) {
        st = ty_fail(err, TY_EINVAL, "max_length",
                     "max_length must be an integer from 1 to %u (tokens "
                     "per example)",
                     TY_DS_TEXT_MAX_LENGTH);
        goto fail;
    }
    if (req && !req->tok && req->learn_vocab &&
        (st = ty_bpe_learner_create(req->learn_vocab, &c.learner, err)))
        goto fail;
    /* pass 1: the labels, the check, the words when learning */
    if ((st = ds_csv_text_pass(csv_path, label_column, text_column, flags,
                               &labels, check_cell, &c, &rows, err)))
        goto fail;
    if (c.learner) {
        if ((st = ty_bpe_learner_finish(c.learner, &own, err)))
            goto fail;
    } else if (!req || !req->tok) {
        if ((st = byte_tokenizer(&own, err)))
            goto fail;
    }
    c.tok = own ? own : req->tok;
    /* pass 2: the counts the meta holds */
    if ((st = ds_csv_text_pass(csv_path, label_column, text_column, flags, NULL,
                               encode_cell, &c, &rows, err)))
        goto fail;
    if (rows != labels.rows) {
        st = file_changed(err);
        goto fail;
    }
    meta = text_meta(label_column, text_column, &labels, &c);
    c.row = malloc(max_length * sizeof *c.row);
    if (!meta || !c.row) {
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        goto fail;
    }
    uint64_t x_bytes = (uint64_t)labels.rows * max_length * sizeof(float);
    uint64_t y_bytes = (uint64_t)labels.rows * sizeof(int32_t);
    c.w = &w;
    c.limit = labels.rows;
    if ((st = ds_writer_create(&w, out_path, meta, x_bytes, y_bytes, err)) ||
        (st = ds_csv_text_pass(csv_path, label_column, text_column, flags, NULL,
                               encode_cell, &c, &rows, err)))
        goto fail;
    if (c.rows != labels.rows) {
        st = file_changed(err);
        goto fail;
    }
    if ((st = ds_writer_begin_y(&w, err)) ||
        (st = ds_writer_write(&w, labels.y, (size_t)y_bytes, err)) ||
        (st = ds_writer_finish(&w, err)))
        goto fail;
    goto done;
fail:
    ds_writer_discard(&w, out_path);
done:
    json_decref(meta);
    ds_csv_labels_free(&labels);
    ty_bpe_learner_free(c.learner);
    ty_tokenizer_free(own);
    free(c.row);
    return st;
}
