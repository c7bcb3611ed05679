/*
 * rawrows.h - raw CSV rows as a tabular model's inputs, and what the
 * network sees of them (POST /v1/models/{id}/transform).
 *
 * A model trained on a CSV with missing cells, booleans or text columns
 * (preprocess "tabular", models/data/tabular.h) takes rows as the CSV had
 * them: an array of the feature columns' cells in the CSV's order
 * (numbers, strings, true/false, null for missing) or an object keyed by
 * column name. They are encoded with the model's own schema (a category
 * it did not see is all zeros), then its preprocessing imputes and
 * standardizes them. serve/transform.h answers what the network sees.
 */
#ifndef TY_SERVE_RAWROWS_H
#define TY_SERVE_RAWROWS_H

#include <jansson.h>
#include <stdint.h>

#include "common/ty.h"
#include "models/nn.h"
#include "serve/decode.h"

/* The model's columns when its preprocessing is tabular, else NULL
 * (borrowed from the net). */
const json_t *serve_tab_columns(const nn_net *net);

/* The predict body's inputs text (valid JSON: serve_predict_check) as
 * rows for serve_tab_decode; an integer past int64, which jansson does
 * not read as an integer, as a real (as the numeric decoder reads every
 * number). NULL when out of memory. */
json_t *serve_tab_rows_load(const char *text, size_t len);

/* Encodes the rows (a JSON array of raw rows) with columns into x (rows *
 * features floats, NaN for a missing number). Errors name the row
 * ("inputs[3]") and cell; TY_EINVAL. */
ty_status serve_tab_decode(const json_t *columns, const json_t *rows,
                           uint64_t features, float *x, ty_err *err);

/* KServe v2 BYTES data for a tabular model: batch rows of its columns'
 * cells as text, row-major; binary (each element a 4-byte little-endian
 * length, then its bytes: raw, raw_len) or JSON (data: strings; numbers,
 * true/false and null are read as their text, null as empty). An empty
 * cell is missing. Into x (batch * features floats). TY_EINVAL naming the
 * row and column. */
ty_status serve_tab_from_bytes(const json_t *columns, int binary,
                               const char *raw, size_t raw_len, serve_span data,
                               uint64_t batch, uint64_t features, float *x,
                               ty_err *err);

#endif
