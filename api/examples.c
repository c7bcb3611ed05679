/*
 * examples.c - GET /v1/datasets/{id}/examples: a page of a dataset's
 * examples, so a client (the dashboard's "Pick a test image") can show them
 * and send one to predict.
 *
 * Values are the stored ones, before any preprocessing (pixel bytes 0-255,
 * raw CSV features), which is what predict takes. Examples are read through
 * the dataset module (ty_dataset_example_f32), never by parsing files here.
 *
 * A language-modeling dataset (text, tokens) has no examples but one token
 * array: its "examples" are consecutive windows of `length` tokens
 * (default 64), offset and limit counting windows, each with its ids and,
 * when the dataset has a tokenizer (byte, BPE, tokenizer.json), its text:
 * the window's ids decoded (a character the window's edge cuts shows as
 * U+FFFD, as Python's errors="replace" decodes).
 *
 * A text classification CSV (meta "text_column") shows each example as its
 * token ids without the padding, their decoded text and its label.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "models/data/dataset.h"
#include "models/data/input.h"
#include "models/data/tabular.h"
#include "models/data/tokenizer.h"
#include "store/blob.h"

#define DEFAULT_EXAMPLES 8
#define MAX_EXAMPLES 64
/* Values in one reply, so a page of huge examples stays a sane size: a page
 * holds fewer than limit examples when they would pass it (at least one),
 * and an example with more values than this is refused. */
#define MAX_VALUES (1u << 20)

/* Values v[*at...] as arrays nested in ds's shape from dimension dim on;
 * advances *at past them. */
static json_t *nest(const ty_dataset *ds, const float *v, uint32_t dim,
                    uint64_t *at)
{
    json_t *a = json_array();
    for (uint32_t i = 0; i < ds->shape[dim]; i++) {
        if (dim + 1 < ds->ndim) {
            json_array_append_new(a, nest(ds, v, dim + 1, at));
            continue;
        }
        float x = v[(*at)++];
        json_array_append_new(a, ds->x_dtype == TY_DTYPE_U8
                                     ? json_integer((json_int_t)x)
                                     : json_real(x));
    }
    return a;
}

static json_t *label_of(const ty_dataset *ds, uint32_t i)
{
    if (ds->task == TY_TASK_CLASSIFICATION) {
        const json_t *c = json_array_get(json_object_get(ds->meta, "classes"),
                                         (size_t)ds->y_class[i]);
        return c ? json_deep_copy(c) : json_integer(ds->y_class[i]);
    }
    const float *y = ds->y_value + (size_t)i * ds->y_dim;
    if (ds->y_dim == 1)
        return json_real(y[0]);
    json_t *a = json_array();
    for (uint32_t k = 0; k < ds->y_dim; k++)
        json_array_append_new(a, json_real(y[k]));
    return a;
}

#define DEFAULT_WINDOW 64
#define MAX_WINDOW 4096

/* Bytes p[0..n) as text: each invalid or cut sequence is U+FFFD. */
static json_t *decode_bytes(const unsigned char *p, size_t n)
{
    char *out = malloc(3 * n + 1);
    size_t o = 0;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n;) {
        size_t len = ds_utf8_seq(p + i, n - i);
        if (!len) {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
            continue;
        }
        memcpy(out + o, p + i, len);
        o += len;
        i += len;
    }
    json_t *s = json_stringn(out, o);
    free(out);
    return s;
}

/* A page of a token dataset's windows (see the top of the file). */
static ty_status token_windows(http_req *r, const char *id, const char *path,
                               long long offset, long long limit, long long len,
                               ty_err *err)
{
    ty_tokens t;
    ty_status s = ty_tokens_open(path, &t, err);
    if (s != TY_OK)
        return s == TY_ENOMEM ? s : TY_EIO;
    uint64_t total = (t.num_tokens + (uint64_t)len - 1) / (uint64_t)len;
    /* a BPE or tokenizer.json decodes the windows; the byte tokenizer's
     * ids are the bytes */
    ty_tokenizer *tok = NULL;
    const json_t *desc = json_object_get(t.meta, "tokenizer");
    if (!t.byte_tokenizer && !json_is_null(desc) &&
        (s = ty_tokenizer_load(desc, &tok, err)) != TY_OK) {
        ty_tokens_close(&t);
        return s == TY_ENOMEM ? s : TY_EIO; /* stored: the server's fault */
    }
    unsigned char *bytes = malloc((size_t)len);
    uint32_t *wids = malloc((size_t)len * sizeof *wids);
    json_t *items = json_array();
    for (long long k = 0; bytes && items && k < limit; k++) {
        uint64_t w = (uint64_t)offset + (uint64_t)k;
        if (w >= total)
            break;
        uint64_t start = w * (uint64_t)len;
        uint64_t end = start + (uint64_t)len < t.num_tokens
                           ? start + (uint64_t)len
                           : t.num_tokens;
        json_t *ids = json_array();
        for (uint64_t i = start; ids && i < end; i++) {
            bytes[i - start] = (unsigned char)ty_tokens_at(&t, i);
            if (wids)
                wids[i - start] = ty_tokens_at(&t, i);
            json_array_append_new(ids, json_integer(ty_tokens_at(&t, i)));
        }
        json_t *item = json_pack("{s:I, s:I, s:o*}", "index", (json_int_t)w,
                                 "start", (json_int_t)start, "ids", ids);
        if (item && t.byte_tokenizer)
            json_object_set_new(item, "text",
                                decode_bytes(bytes, (size_t)(end - start)));
        char *text = NULL;
        size_t tlen = 0;
        ty_err derr = {0};
        if (item && tok && wids &&
            ty_tokenizer_decode(tok, wids, (size_t)(end - start), &text, &tlen,
                                &derr) == TY_OK)
            json_object_set_new(item, "text",
                                decode_bytes((unsigned char *)text, tlen));
        free(text);
        json_array_append_new(items, item);
    }
    ty_tokenizer_free(tok);
    free(wids);
    if (!items || (!bytes && (uint64_t)offset < total)) {
        json_decref(items);
        ty_tokens_close(&t);
        free(bytes);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    free(bytes);
    http_reply_json(r, 200,
                    json_pack("{s:s, s:I, s:I, s:I, s:I, s:o}", "dataset", id,
                              "offset", (json_int_t)offset, "length",
                              (json_int_t)len, "total", (json_int_t)total,
                              "num_tokens", (json_int_t)t.num_tokens, "items",
                              items));
    ty_tokens_close(&t);
    return TY_OK;
}

/* A text classification example: its ids up to the padding (-1), decoded
 * with the dataset's tokenizer, and its label. ids is ds->features long. */
static json_t *text_example(const ty_dataset *ds, ty_tokenizer *tok, uint32_t i,
                            const float *x, uint32_t *wids)
{
    size_t n = 0;
    json_t *ids = json_array();
    while (n < ds->features && x[n] >= 0) {
        wids[n] = (uint32_t)x[n];
        json_array_append_new(ids, json_integer(wids[n]));
        n++;
    }
    json_t *item = json_pack("{s:I, s:o*}", "index", (json_int_t)i, "ids", ids);
    char *text = NULL;
    size_t tlen = 0;
    ty_err derr = {0};
    if (item && ty_tokenizer_decode(tok, wids, n, &text, &tlen, &derr) == TY_OK)
        json_object_set_new(item, "text",
                            decode_bytes((unsigned char *)text, tlen));
    free(text);
    if (item)
        json_object_set_new(item, "label", label_of(ds, i));
    return item;
}

void api_datasets_examples(api_ctx *app, http_req *r)
{
    long long offset, limit, len;
    /* length is checked for every dataset, though only token datasets
     * use it: a bad value is a 400 whatever the dataset */
    if (!api_query_number(r, "offset", 0, TY_DS_MAX_EXAMPLES, 0, &offset) ||
        !api_query_number(r, "limit", 1, MAX_EXAMPLES, DEFAULT_EXAMPLES,
                          &limit) ||
        !api_query_number(r, "length", 1, MAX_WINDOW, DEFAULT_WINDOW, &len))
        return;
    ty_err err = {0};
    json_t *doc = NULL;
    ty_dataset ds = {0};
    float *buf = NULL;
    uint32_t *wids = NULL;
    ty_tokenizer *tok = NULL;
    char sha[65], path[PATH_MAX];
    char id[TY_ID_MAX];
    if (!api_resolve_param(app, r, STORE_REF_DATASET, id))
        return;
    ty_status s =
        store_dataset_get(app->store, api_tenant(r), id, &doc, sha, &err);
    if (s != TY_OK)
        goto done;
    blob_path(app->data_dir, sha, path, sizeof path);
    const char *task = json_string_value(json_object_get(doc, "task"));
    if (task && ty_task_parse(task) == TY_TASK_LANGUAGE_MODELING) {
        s = token_windows(r, id, path, offset, limit, len, &err);
        goto done;
    }
    if ((s = ty_dataset_open(path, &ds, &err)) != TY_OK) {
        /* A stored file that does not open is the server's fault, and the
         * message names its path: a 500 (the log has the message). */
        if (s != TY_ENOMEM)
            s = TY_EIO;
        goto done;
    }
    if (ds.features > MAX_VALUES) {
        s = ty_fail(&err, TY_EINVAL, "id",
                    "dataset %s has %llu values per example; examples are "
                    "served up to %u values",
                    id, (unsigned long long)ds.features, MAX_VALUES);
        goto done;
    }
    uint64_t fit = MAX_VALUES / ds.features;
    uint64_t n = (uint64_t)limit < fit ? (uint64_t)limit : fit;
    if ((uint64_t)offset >= ds.num_examples)
        n = 0;
    else if (n > ds.num_examples - (uint64_t)offset)
        n = ds.num_examples - (uint64_t)offset;
    buf = malloc((size_t)ds.features * sizeof *buf);
    if (!buf) {
        s = ty_fail(&err, TY_ENOMEM, NULL, "out of memory");
        goto done;
    }
    /* a CSV with missing cells or text: its raw rows, as predict takes
     * them from a model trained on it (models/data/tabular.h) */
    /* a text column's tokens: ids and decoded text */
    if (json_object_get(ds.meta, "text_column")) {
        wids = malloc((size_t)ds.features * sizeof *wids);
        if (!wids) {
            s = ty_fail(&err, TY_ENOMEM, NULL, "out of memory");
            goto done;
        }
        if ((s = ty_tokenizer_load(json_object_get(ds.meta, "tokenizer"), &tok,
                                   &err)) != TY_OK) {
            s = s == TY_ENOMEM ? s : TY_EIO; /* stored: the server's fault */
            goto done;
        }
    }
    ds_tab_schema tab = {0};
    const char *pre = json_string_value(json_object_get(ds.meta, "preprocess"));
    if (pre && !strcmp(pre, "tabular") &&
        (s = ds_tab_schema_init(&tab, json_object_get(ds.meta, "columns"),
                                &err)) != TY_OK) {
        s = TY_EIO;
        goto done;
    }
    json_t *items = json_array();
    for (uint64_t k = 0; k < n; k++) {
        uint32_t i = (uint32_t)(offset + k);
        uint64_t at = 0;
        ty_dataset_example_f32(&ds, i, buf);
        if (tok) {
            json_array_append_new(items, text_example(&ds, tok, i, buf, wids));
            continue;
        }
        json_array_append_new(
            items, json_pack("{s:I, s:o, s:o}", "index", (json_int_t)i, "x",
                             tab.cols ? ds_tab_decode_row(&tab, buf)
                                      : nest(&ds, buf, 0, &at),
                             "label", label_of(&ds, i)));
    }
    ds_tab_schema_free(&tab);
    http_reply_json(r, 200,
                    json_pack("{s:s, s:I, s:I, s:o}", "dataset", id, "offset",
                              (json_int_t)offset, "total",
                              (json_int_t)ds.num_examples, "items", items));
done:
    if (s != TY_OK)
        http_reply_error(r, s, &err);
    free(buf);
    free(wids);
    ty_tokenizer_free(tok);
    ty_dataset_close(&ds);
    json_decref(doc);
}
