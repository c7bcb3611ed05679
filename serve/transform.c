/*
 * transform.c - the transform endpoint's service (see transform.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonutil.h"
#include "models/data/tabular.h"
#include "serve/rawrows.h"
#include "serve/transform.h"

/* A numeric model's example: features numbers, flat. */
static ty_status numbers_row(const json_t *row, uint64_t features, float *x,
                             size_t i, ty_err *err)
{
    char field[48];
    snprintf(field, sizeof field, "inputs[%zu]", i);
    if (!json_is_array(row) || json_array_size(row) != features)
        return ty_fail(err, TY_EINVAL, field,
                       "%s must be an array of %llu numbers", field,
                       (unsigned long long)features);
    for (uint64_t j = 0; j < features; j++) {
        const json_t *v = json_array_get(row, j);
        if (!json_is_number(v))
            return ty_fail(err, TY_EINVAL, field, "%s must hold only numbers",
                           field);
        x[j] = (float)json_number_value(v);
    }
    return TY_OK;
}

ty_status serve_transform(const serve_env *env, const char *tenant_id,
                          const char *model_id, const json_t *body,
                          json_t **reply, ty_err *err)
{
    static const char *const keys[] = {"inputs", NULL};
    ty_status st = tyjson_check_keys(body, keys, "", err);
    if (st != TY_OK)
        return st;
    const json_t *rows = json_object_get(body, "inputs");
    size_t n = json_array_size(rows);
    if (!json_is_array(rows) || n == 0 || n > SERVE_MAX_EXAMPLES)
        return ty_fail(err, TY_EINVAL, "inputs",
                       "inputs must be an array of 1 to %d rows",
                       SERVE_MAX_EXAMPLES);
    serve_model m;
    if ((st = serve_model_open(env, tenant_id, model_id, 0, &m, err)) != TY_OK)
        return st;
    const nn_net *net = model_entry_net(m.e);
    const json_t *cols = serve_tab_columns(net);
    const uint64_t f = m.features;
    float *x = malloc(n * f * sizeof *x + 1),
          *out = malloc(n * f * sizeof *out + 1);
    json_t *doc = NULL, *all = NULL, *names = NULL;
    if (!x || !out) {
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        goto done;
    }
    if (cols)
        st = serve_tab_decode(cols, rows, f, x, err);
    for (size_t i = 0; !cols && st == TY_OK && i < n; i++)
        st = numbers_row(json_array_get(rows, i), f, x + i * f, i, err);
    if (st != TY_OK)
        goto done;
    nn_net_transform(net, x, (uint32_t)n, out);
    if (cols) {
        ds_tab_schema s;
        if ((st = ds_tab_schema_init(&s, cols, err)) != TY_OK)
            goto done;
        names = ds_tab_feature_names(&s);
        ds_tab_schema_free(&s);
    }
    all = json_array();
    for (size_t i = 0; all && i < n; i++) {
        json_t *r = json_array();
        /* a double holds a float exactly; jansson prints 17 digits */
        for (uint64_t j = 0; r && j < f; j++)
            if (json_array_append_new(r, json_real((double)out[i * f + j])))
                break;
        if (!r || json_array_append_new(all, r)) {
            json_decref(all);
            all = NULL;
        }
    }
    doc = json_pack("{s:s, s:o, s:o}", "model", m.id, "feature_names",
                    names ? names : json_null(), "transformed", all);
    names = all = NULL;
    if (!doc)
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
done:
    json_decref(names);
    free(x);
    free(out);
    serve_model_close(&m);
    *reply = doc;
    return st;
}
