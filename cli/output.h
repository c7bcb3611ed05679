/*
 * output.h - what the client shows a person: aligned tables, sizes in
 * KiB/MiB, times as local ISO or relative, key/value views, and the progress
 * bar redrawn on stderr when stderr is a terminal.
 */
#ifndef TY_CLI_OUTPUT_H
#define TY_CLI_OUTPUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

/* A table with up to CLI_TABLE_COLS columns; cells are copied. */
#define CLI_TABLE_COLS 10
typedef struct {
    size_t ncols, nrows, cap;
    const char *head[CLI_TABLE_COLS];
    char **cells; /* nrows * ncols, malloc'd */
} cli_table;

/* Starts a table with the given column headers (NULL-terminated). */
void cli_table_init(cli_table *t, const char *const *head);

/* Adds a row of ncols cells (NULL shows as "-"). Returns -1 when out of
 * memory (the row is not added). */
int cli_table_add(cli_table *t, const char *const *cells);

/* Prints the table aligned to f; "(none)" when it has no rows. */
void cli_table_print(const cli_table *t, FILE *f);

void cli_table_free(cli_table *t);

/* "512 B", "1.5 KiB", "3.2 MiB", "1.1 GiB". */
void cli_fmt_bytes(int64_t bytes, char *out, size_t size);

/* An RFC 3339 UTC timestamp as "5m ago" within a day, else local
 * "YYYY-MM-DD HH:MM"; "-" for NULL, the input when it does not parse. */
void cli_fmt_time(const char *rfc3339, char *out, size_t size);

/* A JSON scalar as text (strings unquoted, null as "-", numbers with up to
 * 4 significant decimals); objects and arrays compact. */
void cli_fmt_value(const json_t *v, char *out, size_t size);

/* A task's headline metrics from a Metrics object, the keys prefixed
 * with prefix ("val_" or "train_"): "acc 0.8700" for classification,
 * "rmse 1.2340 r2 0.9500" for regression (in the target's units; one
 * decimal from 1000 up; a part absent is left out); "-" when it has none
 * of them. */
void cli_fmt_metrics(const json_t *metrics, const char *prefix, char *out,
                     size_t size);

/* Prints a CSV dataset's or a tabular model's typed columns (the
 * documents' "columns") as a table: NAME, TYPE, CATEGORIES (the first few
 * and how many in all) and, when with_missing, MISSING (empty cells). */
void cli_print_columns(const json_t *columns, int with_missing, FILE *f);

/* Prints an object's fields as aligned "key: value" lines; sizes and
 * timestamps formatted (keys "bytes", "*_bytes", "*_at"). */
void cli_print_object(const json_t *obj, FILE *f);

/* Prints body as is, with a newline when it lacks one. */
void cli_print_raw(const char *body, size_t len, FILE *f);

/* 1 when stderr is a terminal (progress bars are drawn there). */
int cli_stderr_tty(void);

/* Redraws "label [#####     ] 42% extra" on stderr (tty only). */
void cli_progress_draw(const char *label, double fraction, const char *extra);

/* Ends a drawn progress line (newline), if one was drawn. */
void cli_progress_end(void);

/* A cli_progress_fn for uploads and downloads; ctx is the label. */
void cli_progress_bytes(void *ctx, double done, double total);

#endif
