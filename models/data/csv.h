/*
 * csv.h - csv.c's record reader and class rule, reached by the text
 * classification converter (text_csv.c) through one pass function: it reads
 * a CSV as ds_convert_csv does (the same quoting, blank lines, ragged rows
 * and line numbers) and hands each row's text cell to a callback, collecting
 * the label column by the class rule of dataset.h when asked.
 */
#ifndef TY_DS_CSV_H
#define TY_DS_CSV_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"

/* Called with each data row's text cell (text[len] is NUL), the record's
 * 1-based line and the cell's 1-based column. A failure ends the pass. */
typedef ty_status (*ds_csv_cell_fn)(void *ctx, const char *text, size_t len,
                                    uint64_t line, size_t column, ty_err *err);

/* The labels of a classification CSV, in class order (the class rule). */
typedef struct {
    json_t *classes; /* owned */
    int32_t *y;      /* rows class indices, owned (malloc) */
    uint32_t rows;
} ds_csv_labels;

/* One pass over path. The header must name label_column (else TY_EFORMAT,
 * field "label_column") and text_column (else TY_EFORMAT, field
 * "text_column"); other columns are read but ignored. Each data row's
 * text cell goes to fn; with labels non-NULL the label cells are collected
 * (classification: an empty label is an error) and the classes sorted, and
 * a file with no data rows is TY_EFORMAT. Errors name the 1-based line and
 * column, field "file". flags: DS_CONVERT_NO_ECHO. *rows gets the count of
 * data rows (also without labels). */
ty_status ds_csv_text_pass(const char *path, const char *label_column,
                           const char *text_column, unsigned flags,
                           ds_csv_labels *labels, ds_csv_cell_fn fn, void *ctx,
                           uint32_t *rows, ty_err *err);

/* Frees the labels; safe on a zeroed struct. */
void ds_csv_labels_free(ds_csv_labels *l);

#endif
