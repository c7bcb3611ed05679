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
