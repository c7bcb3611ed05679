/*
 * rawrows.c - raw rows for tabular models (see rawrows.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/data/tabular.h"
#include "serve/rawrows.h"

const json_t *serve_tab_columns(const nn_net *net)
{
    const json_t *pre = json_object_get(nn_net_meta(net), "preprocess");
    const char *kind = json_string_value(json_object_get(pre, "kind"));
    return kind && !strcmp(kind, "tabular") ? json_object_get(pre, "columns")
                                            : NULL;
}

json_t *serve_tab_rows_load(const char *text, size_t len)
{
    json_t *rows = json_loadb(text, len, 0, NULL);
    return rows ? rows : json_loadb(text, len, JSON_DECODE_INT_AS_REAL, NULL);
}

ty_status serve_tab_decode(const json_t *columns, const json_t *rows,
                           uint64_t features, float *x, ty_err *err)
{
    ds_tab_schema s;
    ty_status st = ds_tab_schema_init(&s, columns, err);
    if (st != TY_OK)
        return st == TY_EFORMAT ? TY_EIO : st;
    if (s.width != features) {
        ds_tab_schema_free(&s);
        return ty_fail(err, TY_EIO, NULL,
                       "the model's columns do not match its inputs");
    }
    for (size_t i = 0; st == TY_OK && i < json_array_size(rows); i++) {
        char field[48];
        snprintf(field, sizeof field, "inputs[%zu]", i);
        st = ds_tab_encode_json(&s, json_array_get(rows, i), x + i * features,
                                field, err);
    }
    ds_tab_schema_free(&s);
    return st;
}

/* One cell's text into its row. */
typedef struct {
    ds_tab_schema s;
    uint64_t features;
    float *x;
} bytes_ctx;

static ty_status bytes_cell(bytes_ctx *c, uint64_t i, const char *text,
                            size_t len, ty_err *err)
{
    char field[96];
    uint64_t row = i / c->s.ncols, col = i % c->s.ncols;
    snprintf(field, sizeof field, "input \"input\" row %llu, column %llu",
             (unsigned long long)row, (unsigned long long)col);
    return ds_tab_encode_text(&c->s, (size_t)col, text, len,
                              c->x + row * c->features, field, err);
}

static ty_status json_cell(void *ctx, uint64_t i, serve_token kind,
                           const char *text, size_t len, ty_err *err)
{
    if (kind == SERVE_TOK_NULL)
        return bytes_cell(ctx, i, "", 0, err);
    if (kind != SERVE_TOK_STRING)
        return kind == SERVE_TOK_OBJECT
                   ? ty_fail(err, TY_EINVAL, NULL,
                             "input \"input\": value %llu is an object; "
                             "BYTES data holds strings",
                             (unsigned long long)i)
                   : bytes_cell(ctx, i, text, len, err);
    json_t *v = json_loadb(text, len, JSON_DECODE_ANY, NULL);
    ty_status st =
        v ? bytes_cell(ctx, i, json_string_value(v), json_string_length(v), err)
          : ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    json_decref(v);
    return st;
}

ty_status serve_tab_from_bytes(const json_t *columns, int binary,
                               const char *raw, size_t raw_len, serve_span data,
                               uint64_t batch, uint64_t features, float *x,
                               ty_err *err)
{
    bytes_ctx c = {.features = features, .x = x};
    ty_status st = ds_tab_schema_init(&c.s, columns, err);
    if (st != TY_OK)
        return st == TY_EFORMAT ? TY_EIO : st;
    const uint64_t total = batch * c.s.ncols;
    if (!binary) {
        st = serve_infer_walk(data, total, "input \"input\"", json_cell, &c,
                              err);
        ds_tab_schema_free(&c.s);
        return st;
    }
    size_t off = 0;
    for (uint64_t i = 0; st == TY_OK && i < total; i++) {
        if (raw_len - off < 4) {
            st = ty_fail(err, TY_EINVAL, NULL,
                         "input \"input\": the binary data ends after %llu "
                         "of %llu BYTES elements",
                         (unsigned long long)i, (unsigned long long)total);
            break;
        }
        const unsigned char *p = (const unsigned char *)raw + off;
        uint32_t n = (uint32_t)p[0] | (uint32_t)p[1] << 8 |
                     (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        off += 4;
        if (n > raw_len - off) {
            st = ty_fail(err, TY_EINVAL, NULL,
                         "input \"input\": BYTES element %llu says %u bytes; "
                         "%zu are left",
                         (unsigned long long)i, n, raw_len - off);
            break;
        }
        st = bytes_cell(&c, i, raw + off, n, err);
        off += n;
    }
    if (st == TY_OK && off != raw_len)
        st = ty_fail(err, TY_EINVAL, NULL,
                     "input \"input\": %zu bytes follow the %llu BYTES "
                     "elements the shape says",
                     raw_len - off, (unsigned long long)total);
    ds_tab_schema_free(&c.s);
    return st;
}
