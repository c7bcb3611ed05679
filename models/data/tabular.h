/*
 * tabular.h - the columns of a CSV dataset: their types (numeric, boolean,
 * categorical), how a raw cell becomes network features, and the schema
 * that a dataset's meta and a model's preprocessing both carry.
 *
 * A CSV's feature columns are typed by their non-empty cells:
 *   - numeric:     every one is a number (decimal or exponent notation);
 *   - boolean:     every one is true/false or yes/no (any letter case);
 *   - categorical: anything else. Its categories are its distinct non-empty
 *                  texts, sorted by byte value (so by code point: what
 *                  numpy's sort of Python strs and scikit-learn's
 *                  OneHotEncoder(categories="auto") give).
 * An empty cell is a missing value. A numeric or boolean column is one
 * feature (a boolean is 1 for true/yes, 0 for false/no; a missing cell is
 * NaN in the dataset file and is imputed by the model's preprocessing); a
 * categorical column is one feature per category, one-hot (a missing cell
 * and, at predict, a category the training data did not have are all
 * zeros: scikit-learn's handle_unknown="ignore").
 *
 * The schema is a JSON array of column objects in the CSV's order (label
 * column left out): {"name", "type": "numeric"|"boolean"|"categorical",
 * "categories": [..] (categorical only)}, plus "missing" (a count) in a
 * dataset's meta, and "impute", "mean", "std" (numeric and boolean) in a
 * model's "tabular" preprocessing.
 */
#ifndef TY_DS_TABULAR_H
#define TY_DS_TABULAR_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"

#define TY_DS_CATEGORIES_DEFAULT 50u /* per column, unless the upload says */
#define TY_DS_CATEGORIES_MAX 1000u   /* the most an upload may allow */

typedef enum {
    DS_COL_NUMERIC = 0,
    DS_COL_BOOLEAN = 1,
    DS_COL_CATEGORICAL = 2
} ds_col_type;

/* "numeric" | "boolean" | "categorical"; parse returns -1 when unknown. */
const char *ds_col_type_name(ds_col_type t);
int ds_col_type_parse(const char *s);

/* A number cell: what ds_number_f32 found. */
typedef enum {
    DS_NUM_OK,
    DS_NUM_EMPTY,
    DS_NUM_SYNTAX,
    DS_NUM_NOT_FINITE,
    DS_NUM_RANGE
} ds_num_status;

/* A decimal number, optionally with an exponent, and nothing else; its
 * value (maybe infinite) in *out. */
ds_num_status ds_number_value(const char *s, size_t len, double *out);

/* ds_number_value with blanks around allowed; finite and within float32
 * range, as float32 in *out. */
ds_num_status ds_number_f32(const char *s, size_t len, float *out);

/* 1 for true/yes, 0 for false/no (any letter case), -1 for anything else. */
int ds_bool_word(const char *s, size_t len);

/* ---- a hash index over the strings of a JSON array ---- */

/* Finds strings among list's elements (all JSON strings) in O(1): slots
 * hold an element index + 1, 0 is empty. */
typedef struct {
    const json_t *list; /* borrowed */
    uint32_t *slots;
    size_t cap;   /* a power of two, at least twice the indexed count */
    size_t count; /* list elements indexed so far */
} ds_str_index;

/* Index of s in the list, or -1. */
int64_t ds_str_index_find(const ds_str_index *x, const char *s, size_t n);
/* Indexes the list's next element (appended, not already present).
 * Returns 0, or -1 when out of memory. */
int ds_str_index_add_last(ds_str_index *x);
void ds_str_index_free(ds_str_index *x);

/* ---- a compiled schema ---- */

typedef struct {
    const char *name; /* borrowed from the schema's JSON */
    ds_col_type type;
    uint32_t offset;   /* its first feature */
    uint32_t width;    /* 1, or its number of categories */
    ds_str_index cats; /* categorical: its categories */
} ds_tab_col;

typedef struct {
    json_t *columns; /* a reference held */
    size_t ncols;
    uint64_t width; /* features: the columns' widths summed */
    ds_tab_col *cols;
    json_t *name_list; /* owned: the names, for the index */
    ds_str_index names;
} ds_tab_schema;

/* Compiles a schema array (see above). TY_EFORMAT naming what is wrong
 * (field NULL: the caller says where the schema came from), TY_ENOMEM. On
 * failure *s needs no free. */
ty_status ds_tab_schema_init(ds_tab_schema *s, const json_t *columns,
                             ty_err *err);
void ds_tab_schema_free(ds_tab_schema *s);

/* Encodes column col's cell given as text (a CSV cell, a KServe BYTES
 * element) into its features at out + offset (out: the row's width
 * floats). Empty text is missing. TY_EINVAL for a cell its column cannot
 * hold (a word in a numeric column), naming field. */
ty_status ds_tab_encode_text(const ds_tab_schema *s, size_t col,
                             const char *text, size_t len, float *out,
                             const char *field, ty_err *err);

/* Encodes one raw row given as JSON (a predict example): an array of the
 * schema's columns' cells in order, or an object keyed by column name
 * (absent names are missing). Cells: numbers, strings (numbers as text are
 * read), true/false, null (missing). TY_EINVAL naming field ("inputs[3]"). */
ty_status ds_tab_encode_json(const ds_tab_schema *s, const json_t *row,
                             float *out, const char *field, ty_err *err);

/* How data's features (a dataset's schema) become model's: for each of
 * model's features, src[j] is the data feature it takes, or -1 for a
 * one-hot feature of a category the data does not have (0). Columns are
 * matched by name, in any order; numbers and booleans go into either
 * (a boolean is 0/1); a categorical column's categories by their text, so
 * a category the model did not see is dropped (all zeros, as at predict).
 * *identity is 1 when src is j for every j and the widths are equal.
 * TY_EINVAL naming the first column that cannot be mapped: absent from
 * data, an extra data column, or text where the model has numbers and the
 * other way round. */
ty_status ds_tab_remap(const ds_tab_schema *model, const ds_tab_schema *data,
                       int64_t *src, int *identity, ty_err *err);

/* ---- typing a CSV's columns while reading it ---- */

typedef struct ds_tab_builder ds_tab_builder;

/* For ncols feature columns, at most max_categories categories each
 * (1..TY_DS_CATEGORIES_MAX); label_col is the file's label column (0-based,
 * for the column numbers of messages). NULL when out of memory. */
ds_tab_builder *ds_tab_builder_create(size_t ncols, uint32_t max_categories,
                                      size_t label_col);
void ds_tab_builder_destroy(ds_tab_builder *b);

/* Sees feature column col's cell (text, len bytes) on line. TY_EFORMAT
 * for text that is not UTF-8 (not a number, so it would be a category),
 * TY_ENOMEM. */
ty_status ds_tab_builder_add(ds_tab_builder *b, size_t col, const char *text,
                             size_t len, uint64_t line, ty_err *err);

/* The types once every row was seen: *columns (a new schema array with
 * "missing" counts), *plain 1 when every column is numeric and complete
 * (the dataset keeps the "standardize" preprocessing). names: the feature
 * columns' names in order; no_echo: quote nothing from the file. TY_EFORMAT
 * for a column with no value at all or with more categories than the
 * limit (naming it, and the upload parameter that raises it). */
ty_status ds_tab_builder_finish(ds_tab_builder *b, const json_t *names,
                                int no_echo, json_t **columns, int *plain,
                                ty_err *err);

/* One example's features back as its raw row (the form predict takes): a
 * number (null when missing), true/false (null), a category's text (null
 * when missing). NULL when out of memory. */
json_t *ds_tab_decode_row(const ds_tab_schema *s, const float *features);

/* The one-hot features' names: "name" for a numeric or boolean column,
 * "name=category" for each category. NULL when out of memory. */
json_t *ds_tab_feature_names(const ds_tab_schema *s);

#endif
