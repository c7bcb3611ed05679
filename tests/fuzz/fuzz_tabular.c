/*
 * fuzz_tabular - raw CSV rows as a tabular model's inputs, as the server
 * reads them: the REST predict body (serve_predict_scan, the inputs
 * loaded as JSON, serve_tab_decode: rows as arrays or objects of
 * numbers, strings, true/false, null) and KServe v2 BYTES data, JSON
 * (serve_infer_scan, then serve_tab_from_bytes of inputs[0].data) or
 * binary (4-byte little-endian lengths, then the bytes). The model is a
 * fixed schema made here (a numeric, a boolean and a categorical column
 * of 3 categories, with fitted statistics), its preprocessing
 * (nn_preproc_tab_row) applied to what was encoded.
 *
 * Input: byte 0 the path (0 REST, 1 KServe JSON, 2 KServe binary), byte 1
 * the KServe batch (1 to 16), then the body (binary: the BYTES data).
 *
 * Invariants: a failure says why; a success fills exactly rows x 5
 * floats (the buffer is exactly that: ASan sees a write past), each
 * finite after the preprocessing (a missing cell imputed), the 3 one-hot
 * features each 0 or 1 and summing to 0 or 1. A feature left unwritten
 * is caught by the -7 it was filled with.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <jansson.h>

#include "models/nn_internal.h"
#include "serve/decode.h"
#include "serve/rawrows.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size);

#define FEATURES 5u /* numeric, boolean, 3 categories */
#define ONEHOT 2u   /* the first one-hot feature */

static const char schema_text[] =
    "[{\"name\": \"age\", \"type\": \"numeric\", \"impute\": 30, "
    "\"mean\": 35.5, \"std\": 12.25},"
    " {\"name\": \"member\", \"type\": \"boolean\", \"impute\": 1, "
    "\"mean\": 0.625, \"std\": 0.484},"
    " {\"name\": \"color\", \"type\": \"categorical\", "
    "\"categories\": [\"blue\", \"green\", \"red\"]}]";

static json_t *columns;
static nn_preproc pp;

static void setup(void)
{
    columns = json_loads(schema_text, 0, NULL);
    json_t *pre =
        json_pack("{s:s, s:O}", "kind", "tabular", "columns", columns);
    ty_err err = {0};
    pp.features = FEATURES;
    if (!pre || nn_preproc_tab_from_json(&pp, pre, &err) != TY_OK)
        abort();
    json_decref(pre);
}

/* The rows encoded (n x FEATURES) through the preprocessing, checked. */
static void check_rows(const float *x, uint64_t n)
{
    float y[FEATURES];
    for (uint64_t i = 0; i < n; i++) {
        const float *r = x + i * FEATURES;
        nn_preproc_tab_row(&pp, y, r);
        float hot = 0.0f;
        for (unsigned j = 0; j < FEATURES; j++)
            if (!isfinite(y[j]))
                abort(); /* imputed and standardized: always a number */
        for (unsigned j = ONEHOT; j < FEATURES; j++) {
            if (r[j] != 0.0f && r[j] != 1.0f)
                abort();
            hot += r[j];
        }
        if (hot > 1.0f)
            abort(); /* one category, or none (missing, unseen) */
        /* a boolean column takes numbers too (1.5 is 1.5: see
         * ds_tab_remap), so only its finiteness above is checked */
    }
}

static float *room(uint64_t n)
{
    float *x = malloc(n * FEATURES * sizeof *x); /* exactly: ASan sees past */
    if (!x)
        abort();
    for (uint64_t i = 0; i < n * FEATURES; i++)
        x[i] = -7.0f; /* not 0/1: a feature left unwritten fails the check */
    return x;
}

static void rest(const char *text, size_t len)
{
    ty_err err = {0};
    serve_predict_body b = {0};
    ty_status s = serve_predict_scan(text, len, &b, &err);
    if (s != TY_OK) {
        if (!err.msg[0])
            abort();
        return;
    }
    if (b.count == 0 || b.count > SERVE_MAX_EXAMPLES)
        abort();
    /* as serve/predict.c: room for the scan's count, rows from jansson */
    float *x = room(b.count);
    json_t *rows = serve_tab_rows_load(b.inputs.p, b.inputs.len);
    if (rows) {
        if (json_array_size(rows) != b.count)
            abort(); /* the scan's count is the room the server takes */
        s = serve_tab_decode(columns, rows, FEATURES, x, &err);
        if (s != TY_OK && !err.msg[0])
            abort();
        if (s == TY_OK)
            check_rows(x, b.count);
    } else if (serve_predict_check(&b, &err) == TY_OK) {
        abort(); /* valid JSON the rows' load refused: a 503 */
    } else if (!err.msg[0]) {
        abort();
    }
    json_decref(rows);
    free(x);
}

static void kserve(int binary, uint64_t batch, const char *text, size_t len)
{
    ty_err err = {0};
    serve_infer_body b = {0};
    serve_span data = {0};
    if (!binary) {
        if (serve_infer_scan(text, len, &b, &err) != TY_OK) {
            if (!err.msg[0])
                abort();
            serve_infer_body_free(&b);
            return;
        }
        data = b.data;
    }
    float *x = room(batch);
    ty_status s =
        serve_tab_from_bytes(columns, binary, binary ? text : NULL,
                             binary ? len : 0, data, batch, FEATURES, x, &err);
    if (s != TY_OK && !err.msg[0])
        abort();
    if (s == TY_OK)
        check_rows(x, batch);
    free(x);
    serve_infer_body_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size)
{
    if (!columns)
        setup();
    if (size < 2)
        return 0;
    const char *text = (const char *)d + 2;
    size_t len = size - 2;
    switch (d[0] % 3) {
        case 0: rest(text, len); break;
        case 1: kserve(0, (uint64_t)(d[1] % 16) + 1, text, len); break;
        default: kserve(1, (uint64_t)(d[1] % 16) + 1, text, len); break;
    }
    return 0;
}
