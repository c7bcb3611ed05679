/*
 * datasets.c - /v1/datasets: upload (multipart), fetch from URLs (JSON),
 * list, show, delete.
 *
 * An upload is converted into the internal dataset format (models/data/dataset.h)
 * while it is validated; only a file that converted cleanly is moved into the
 * blob folder, and the 201 is sent after the row commits, so a dataset that
 * was acknowledged is on disk.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "common/fsutil.h"
#include "common/ids.h"
#include "common/jsonutil.h"
#include "models/data/dataset.h"
#include "models/data/input.h"
#include "models/data/tabular.h"
#include "store/blob.h"
#include "common/fetch.h"

#define NAME_MAX_LEN 200

typedef enum { FMT_CSV, FMT_IDX, FMT_NPY, FMT_TEXT, FMT_TOKENS } ds_format;

#define NUM_FORMATS 5
#define FORMAT_LIST "csv, idx, npy, text or tokens"

static const char *const format_names[NUM_FORMATS] = {"csv", "idx", "npy",
                                                      "text", "tokens"};
/* The file parts each format takes, in the order converters want them. */
static const char *const format_files[NUM_FORMATS][2] = {
    {"file", NULL}, {"images", "labels"}, {"x", "y"}, {"file"}, {"file"}};
/* The text fields each format takes besides name and format (a CSV's
 * tokenizer and max_length only with a text_column). */
#define MAX_FIELDS 6
static const char *const format_fields[NUM_FORMATS][MAX_FIELDS] = {
    {"label_column", "task", "max_categories", "text_column", "max_length",
     "tokenizer"},
    {NULL},
    {"task"},
    {"tokenizer"},
    {"vocab_size"}};

typedef struct {
    const char *name;
    ds_format format;
    const char *label_column;
    int task;                  /* -1 = the converter's default */
    uint32_t vocab_size;       /* tokens */
    uint32_t max_categories;   /* csv: 0 = the converter's default */
    ty_tokenizer_request tok;  /* text, csv with a text column: what
                                  tokenizer (tok NULL, learn 0: the byte
                                  tokenizer) */
    const char *text_column;   /* csv: text classification when set */
    uint32_t max_length;       /* with text_column: tokens per example */
    const char *paths[2];      /* input files */
    char fetched[2][PATH_MAX]; /* downloads, for JSON bodies naming URLs */
    json_t *source;            /* how it arrived, for the doc */
    /* DS_CONVERT_NO_ECHO for downloads: a URL may name a service the tenant
     * cannot read, and errors must not show its reply */
    unsigned convert_flags;
} upload;

static int parse_format(const char *s)
{
    for (int i = 0; i < NUM_FORMATS; i++)
        if (s && !strcmp(s, format_names[i]))
            return i;
    return -1;
}

static int format_takes(ds_format f, const char *name)
{
    if (!strcmp(name, "name") || !strcmp(name, "format"))
        return 1;
    for (int i = 0; i < MAX_FIELDS; i++)
        if ((i < 2 && format_files[f][i] &&
             !strcmp(format_files[f][i], name)) ||
            (format_fields[f][i] && !strcmp(format_fields[f][i], name)))
            return 1;
    return 0;
}

static void expected_list(ds_format f, char *out, size_t n)
{
    snprintf(out, n, "name, format");
    for (int i = 0; i < MAX_FIELDS; i++) {
        size_t used = strlen(out);
        if (i < 2 && format_files[f][i])
            snprintf(out + used, n - used, ", %s", format_files[f][i]);
        used = strlen(out);
        if (format_fields[f][i])
            snprintf(out + used, n - used, ", %s", format_fields[f][i]);
    }
}

/* Checks name, format, label_column and task; fills u. */
static ty_status check_fields(upload *u, const char *name, const char *format,
                              const char *label_column, const char *task,
                              ty_err *err)
{
    if (!format)
        return ty_fail(err, TY_EINVAL, "format",
                       "format is required: " FORMAT_LIST);
    int f = parse_format(format);
    if (f < 0)
        return ty_fail(err, TY_EINVAL, "format",
                       "format must be " FORMAT_LIST ", not '%s'", format);
    u->format = (ds_format)f;
    if (!name || !*name || strlen(name) > NAME_MAX_LEN)
        return ty_fail(err, TY_EINVAL, "name",
                       "name is required (1 to %d characters)", NAME_MAX_LEN);
    u->name = name;
    u->task = -1;
    int lm = u->format == FMT_TEXT || u->format == FMT_TOKENS;
    if (task) {
        u->task = ty_task_parse(task);
        if (lm && u->task != TY_TASK_LANGUAGE_MODELING)
            return ty_fail(err, TY_EINVAL, "task",
                           "%s datasets are always language_modeling; leave "
                           "task out",
                           format_names[u->format]);
        if (!lm && u->task == TY_TASK_LANGUAGE_MODELING)
            u->task = -1; /* only text and tokens are */
        if (u->task < 0)
            return ty_fail(
                err, TY_EINVAL, "task",
                "task must be classification or regression, not '%s'", task);
    }
    if (u->format == FMT_CSV) {
        if (!label_column || !*label_column)
            return ty_fail(err, TY_EINVAL, "label_column",
                           "label_column is required for csv: the name of the "
                           "column that holds the target");
        u->label_column = label_column;
        if (u->task < 0)
            u->task = TY_TASK_CLASSIFICATION;
    }
    return TY_OK;
}

/* text_column (csv): text classification; the fields that go with it or
 * not. Checked before max_length, tokenizer and max_categories. */
static ty_status check_text_column(upload *u, const char *text_column,
                                   const char *task, ty_err *err)
{
    if (!text_column)
        return TY_OK;
    if (u->format != FMT_CSV)
        return ty_fail(err, TY_EINVAL, "text_column",
                       "text_column applies to csv datasets only (a text "
                       "classification CSV)");
    if (!*text_column)
        return ty_fail(err, TY_EINVAL, "text_column",
                       "text_column must name the column that holds the text");
    if (u->label_column && !strcmp(text_column, u->label_column))
        return ty_fail(err, TY_EINVAL, "text_column",
                       "text_column and label_column name the same column; "
                       "the text cannot be its own label");
    if (task && u->task != TY_TASK_CLASSIFICATION)
        return ty_fail(err, TY_EINVAL, "task",
                       "a csv dataset with a text_column is always "
                       "classification; leave task out");
    u->text_column = text_column;
    u->max_length = TY_DS_TEXT_DEFAULT_LENGTH;
    return TY_OK;
}

/* max_length (csv with a text_column): 1 to TY_DS_TEXT_MAX_LENGTH. */
static ty_status parse_max_length(upload *u, const char *text, ty_err *err)
{
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (!u->text_column)
        return ty_fail(err, TY_EINVAL, "max_length",
                       "max_length applies to csv datasets with a text_column "
                       "only");
    if (!*text || *end || v < 1 || v > (long)TY_DS_TEXT_MAX_LENGTH)
        return ty_fail(err, TY_EINVAL, "max_length",
                       "max_length must be an integer from 1 to %u (tokens "
                       "per example; longer texts are truncated)",
                       TY_DS_TEXT_MAX_LENGTH);
    u->max_length = (uint32_t)v;
    return TY_OK;
}

/* max_categories (csv): 1 to TY_DS_CATEGORIES_MAX. */
static ty_status parse_max_categories(upload *u, const char *text, ty_err *err)
{
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (u->format != FMT_CSV || u->text_column)
        return ty_fail(err, TY_EINVAL, "max_categories",
                       "max_categories applies to csv datasets without a "
                       "text_column only (their category columns)");
    if (!*text || *end || v < 1 || v > (long)TY_DS_CATEGORIES_MAX)
        return ty_fail(err, TY_EINVAL, "max_categories",
                       "max_categories must be an integer from 1 to %u (the "
                       "most distinct values a text column may have)",
                       TY_DS_CATEGORIES_MAX);
    u->max_categories = (uint32_t)v;
    return TY_OK;
}

/* tokenizer (text): "byte" (the default), {"type": "bpe", "vocab_size": N}
 * (learned from the upload) or a tokenizer.json (tokenizer.h), as a JSON
 * value (body) or as text (a form field or a file part). Loaded here, so a
 * malformed tokenizer is a 422 naming its field before any conversion. */
static ty_status check_tokenizer(upload *u, int given, const json_t *value,
                                 const char *text, size_t len, ty_err *err)
{
    if (!given)
        return TY_OK;
    if (u->format != FMT_TEXT && !u->text_column)
        return ty_fail(err, TY_EINVAL, "tokenizer",
                       "tokenizer applies to text datasets only, and to csv "
                       "datasets with a text_column");
    ty_status s =
        value ? ty_tokenizer_request_parse(value, "tokenizer", &u->tok, err)
              : ty_tokenizer_request_parse_text(text, len, "tokenizer", &u->tok,
                                                err);
    return s == TY_ENOMEM ? s : s != TY_OK ? TY_EINVAL : TY_OK;
}

/* The form's tokenizer part (a field or a file) read whole. */
static ty_status form_tokenizer(http_req *r, upload *u, ty_err *err)
{
    const char *path = NULL;
    char *text = NULL;
    size_t len = 0;
    if (!http_req_form_has(r, "tokenizer"))
        return TY_OK;
    if (u->format != FMT_TEXT && !u->text_column)
        return check_tokenizer(u, 1, NULL, "", 0, err);
    ty_status s = http_req_form_path(r, "tokenizer", &path, err);
    if (s == TY_OK)
        s = fs_read_all(path, TY_TOKENIZER_MAX_JSON_BYTES, &text, &len, err);
    if (s == TY_ETOOBIG)
        return ty_fail(err, TY_EINVAL, "tokenizer",
                       "the tokenizer part is over %u bytes",
                       TY_TOKENIZER_MAX_JSON_BYTES);
    if (s == TY_OK)
        s = check_tokenizer(u, 1, NULL, text, len, err);
    free(text);
    return s;
}

/* vocab_size (tokens): 1 to TY_DS_MAX_VOCAB, required. */
static ty_status parse_vocab_size(upload *u, const char *text, ty_err *err)
{
    char *end = NULL;
    long long v = text ? strtoll(text, &end, 10) : 0;
    if (u->format != FMT_TOKENS)
        return text ? ty_fail(err, TY_EINVAL, "vocab_size",
                              "vocab_size applies to tokens datasets only")
                    : TY_OK;
    if (!text || !*text || *end || v < 1 || v > (long long)TY_DS_MAX_VOCAB)
        return ty_fail(err, TY_EINVAL, "vocab_size",
                       "vocab_size is required for tokens: an integer from 1 "
                       "to %u (token ids run from 0 to vocab_size - 1)",
                       TY_DS_MAX_VOCAB);
    u->vocab_size = (uint32_t)v;
    return TY_OK;
}

static ty_status read_form(http_req *r, upload *u, ty_err *err)
{
    ty_status s = check_fields(u, http_req_form_value(r, "name"),
                               http_req_form_value(r, "format"),
                               http_req_form_value(r, "label_column"),
                               http_req_form_value(r, "task"), err);
    if (s != TY_OK ||
        (s = check_text_column(u, http_req_form_value(r, "text_column"),
                               http_req_form_value(r, "task"), err)) != TY_OK)
        return s;
    const char *ml = http_req_form_value(r, "max_length");
    if (ml && (s = parse_max_length(u, ml, err)) != TY_OK)
        return s;
    const char *mc = http_req_form_value(r, "max_categories");
    if (mc && (s = parse_max_categories(u, mc, err)) != TY_OK)
        return s;
    if ((s = form_tokenizer(r, u, err)) != TY_OK ||
        (s = parse_vocab_size(u, http_req_form_value(r, "vocab_size"), err)) !=
            TY_OK)
        return s;
    char expected[160];
    expected_list(u->format, expected, sizeof expected);
    for (size_t i = 0; i < http_req_form_count(r); i++) {
        const char *part = http_req_form_name(r, i);
        if (!format_takes(u->format, part))
            return ty_fail(err, TY_EINVAL, part,
                           "unknown form field '%s' for format %s; send %s",
                           part, format_names[u->format], expected);
    }
    for (int i = 0; i < 2; i++) {
        const char *part = format_files[u->format][i];
        if (!part)
            continue;
        if (!http_req_form_has(r, part))
            return ty_fail(err, TY_EINVAL, part,
                           "the file part '%s' is missing; format %s needs %s",
                           part, format_names[u->format], expected);
        ty_status ps = http_req_form_path(r, part, &u->paths[i], err);
        if (ps != TY_OK)
            return ps;
    }
    u->source = json_pack("{s:s}", "kind", "upload");
    return TY_OK;
}

static ty_status read_json(api_ctx *app, http_req *r, const json_t *body,
                           upload *u, ty_err *err)
{
    static const char *const keys[] = {
        "name",        "format",         "urls",      "label_column",
        "task",        "max_categories", "tokenizer", "vocab_size",
        "text_column", "max_length",     NULL};
    ty_status s = tyjson_check_keys(body, keys, "", err);
    if (s != TY_OK)
        return s;
    const char *name = NULL, *format = NULL, *label = NULL, *task = NULL,
               *text_column = NULL;
    if ((s = tyjson_get_string(body, "format", "", 0, 16, NULL, &format,
                               err)) != TY_OK ||
        (s = tyjson_get_string(body, "name", "", 0, NAME_MAX_LEN, NULL, &name,
                               err)) != TY_OK ||
        (s = tyjson_get_string(body, "label_column", "", 0, 1024, NULL, &label,
                               err)) != TY_OK ||
        (s = tyjson_get_string(body, "task", "", 0, 32, NULL, &task, err)) !=
            TY_OK ||
        (s = tyjson_get_string(body, "text_column", "", 0, 1024, NULL,
                               &text_column, err)) != TY_OK)
        return s;
    if ((s = check_fields(u, name, format, label, task, err)) != TY_OK ||
        (s = check_text_column(u, text_column, task, err)) != TY_OK)
        return s;
    const json_t *ml = json_object_get(body, "max_length");
    if (ml) {
        char text[32] = "";
        if (json_is_integer(ml))
            snprintf(text, sizeof text, "%lld",
                     (long long)json_integer_value(ml));
        if ((s = parse_max_length(u, text, err)) != TY_OK)
            return s;
    }
    const json_t *mc = json_object_get(body, "max_categories");
    if (mc) {
        char text[32] = "";
        if (json_is_integer(mc))
            snprintf(text, sizeof text, "%lld",
                     (long long)json_integer_value(mc));
        if ((s = parse_max_categories(u, text, err)) != TY_OK)
            return s;
    }
    if (u->format != FMT_CSV && label)
        return ty_fail(err, TY_EINVAL, "label_column",
                       "label_column applies to csv datasets only");
    const json_t *tok = json_object_get(body, "tokenizer");
    const json_t *vs = json_object_get(body, "vocab_size");
    char vtext[32] = "";
    if (json_is_integer(vs))
        snprintf(vtext, sizeof vtext, "%lld",
                 (long long)json_integer_value(vs));
    if ((s = check_tokenizer(u, tok != NULL, tok, NULL, 0, err)) != TY_OK ||
        (s = parse_vocab_size(u, vs ? vtext : NULL, err)) != TY_OK)
        return s;
    if (u->format == FMT_IDX && task)
        return ty_fail(
            err, TY_EINVAL, "task",
            "idx datasets are always classification; leave task out");
    const json_t *urls = json_object_get(body, "urls");
    const char *url_keys[3] = {format_files[u->format][0],
                               format_files[u->format][1], NULL};
    if (!urls)
        return ty_fail(err, TY_EINVAL, "urls",
                       "urls is required: an object naming the URL of each "
                       "file (%s%s%s)",
                       url_keys[0], url_keys[1] ? ", " : "",
                       url_keys[1] ? url_keys[1] : "");
    if ((s = tyjson_check_keys(urls, url_keys, "urls", err)) != TY_OK)
        return s;
    for (int i = 0; i < 2 && url_keys[i]; i++) {
        char field[64];
        const char *url;
        tyjson_path(field, sizeof field, "urls", url_keys[i]);
        if ((s = tyjson_get_string(urls, url_keys[i], "urls", 1, 4096, NULL,
                                   &url, err)) != TY_OK)
            return s;
        char *path = u->fetched[i];
        if ((s = http_req_temp_path(r, ".fetch", path, PATH_MAX, err)) != TY_OK)
            return s;
        if ((s = fetch_url_to_file(url, path, app->max_fetch_bytes,
                                   app->fetch_timeout_s, app->fetch_hosts,
                                   app->fetch_allow_networks, field, err)) !=
            TY_OK)
            return s;
        u->paths[i] = path;
    }
    u->source = json_pack("{s:s, s:O}", "kind", "urls", "urls", urls);
    u->convert_flags = DS_CONVERT_NO_ECHO;
    return TY_OK;
}

static ty_status convert(const api_ctx *app, const upload *u, const char *out,
                         ty_err *err)
{
    ty_status s;
    /* A compressed IDX file may inflate to no more than the route could have
     * taken uncompressed: the upload limit, or the fetch limit per file. */
    ds_idx_opts idx = {
        .max_inflated =
            u->fetched[0][0] ? 2 * app->max_fetch_bytes : app->max_upload_bytes,
        .flags = u->convert_flags,
    };
    switch (u->format) {
        case FMT_CSV:
            if (u->text_column) {
                s = ds_convert_csv_text(u->paths[0], u->label_column,
                                        u->text_column, &u->tok, u->max_length,
                                        u->convert_flags, out, err);
                break;
            }
            s = ds_convert_csv_ex(u->paths[0], u->label_column,
                                  (ty_task)u->task, u->convert_flags,
                                  u->max_categories, out, err);
            break;
        case FMT_IDX:
            s = ds_convert_idx_ex(u->paths[0], u->paths[1], out, &idx, err);
            break;
        case FMT_TEXT:
            s = ds_convert_text_tok(u->paths[0], &u->tok, u->convert_flags, out,
                                    err);
            break;
        case FMT_TOKENS:
            s = ds_convert_tokens(u->paths[0], u->vocab_size, u->convert_flags,
                                  out, err);
            break;
        default:
            s = ds_convert_npy(u->paths[0], u->paths[1], u->task, out, err);
            break;
    }
    return s;
}

/* Inputs of at most this many values get their means in the doc: a form of
 * that many fields is about the most a person fills in, and the doc stays
 * small. */
#define MEANS_MAX_FEATURES 1024

/* Examples per class (classification), in class-index order: the class
 * balance a person checks before training. NULL when out of memory. */
static json_t *class_counts(const ty_dataset *ds)
{
    uint64_t *n = calloc(ds->num_classes ? ds->num_classes : 1, sizeof *n);
    json_t *a = n ? json_array() : NULL;
    if (!a) {
        free(n);
        return NULL;
    }
    for (uint32_t i = 0; i < ds->num_examples; i++)
        n[ds->y_class[i]]++; /* indices checked by ty_dataset_open */
    for (uint32_t c = 0; c < ds->num_classes; c++)
        if (json_array_append_new(a, json_integer((json_int_t)n[c]))) {
            json_decref(a);
            a = NULL;
            break;
        }
    free(n);
    return a;
}

/* Each feature's mean over the whole file, for flat (tabular) inputs of at
 * most MEANS_MAX_FEATURES values: where a "try it" form starts. NULL for
 * other shapes or when out of memory. One pass over the mapped file. */
static json_t *feature_means(const ty_dataset *ds)
{
    if (ds->ndim != 1 || ds->features > MEANS_MAX_FEATURES || !ds->num_examples)
        return NULL;
    size_t k = (size_t)ds->features;
    double *sum = calloc(k, sizeof *sum);
    uint32_t *count = calloc(k, sizeof *count);
    float *x = malloc(k * sizeof *x);
    json_t *a = sum && count && x ? json_array() : NULL;
    if (a) {
        /* of the values present: a CSV's missing cells are NaN */
        for (uint32_t i = 0; i < ds->num_examples; i++) {
            ty_dataset_example_f32(ds, i, x);
            for (size_t j = 0; j < k; j++)
                if (!isnan(x[j])) {
                    sum[j] += x[j];
                    count[j]++;
                }
        }
        for (size_t j = 0; j < k; j++)
            if (json_array_append_new(
                    a, json_real(count[j] ? sum[j] / count[j] : 0.0))) {
                json_decref(a);
                a = NULL;
                break;
            }
    }
    free(sum);
    free(count);
    free(x);
    return a;
}

/* The ids of a text classification row before its padding, and their count
 * (at most max). */
static size_t text_row_ids(const ty_dataset *ds, uint32_t i, uint32_t *ids,
                           size_t max)
{
    const float *x = (const float *)ds->x + (uint64_t)i * ds->features;
    size_t n = 0;
    while (n < ds->features && n < max && x[n] >= 0)
        n++;
    for (size_t k = 0; k < n; k++)
        ids[k] = (uint32_t)x[k];
    return n;
}

/* The decoded text of ids, less a character the last id cuts; NULL when the
 * tokenizer cannot decode them or out of memory. */
static json_t *decoded_text(const ty_tokenizer *tok, const uint32_t *ids,
                            size_t n)
{
    char *text = NULL;
    size_t len = 0, ok = 0;
    ty_err terr = {0};
    if (ty_tokenizer_decode(tok, ids, n, &text, &len, &terr) != TY_OK)
        return NULL;
    while (ok < len) {
        size_t k = ds_utf8_seq((const unsigned char *)text + ok, len - ok);
        if (!k)
            break;
        ok += k;
    }
    json_t *j = json_stringn(text, ok);
    free(text);
    return j;
}

/* The ids a text classification dataset's document shows of its first row. */
#define TEXT_SAMPLE_IDS 128

/* A text classification CSV's part of the document: the text column, the
 * tokenizer, the token counts and the first row decoded. Returns non-zero
 * when out of memory (or the stored tokenizer does not load). */
static int text_doc_fields(json_t *doc, const ty_dataset *ds)
{
    static const char *const copied[] = {"label_column", "text_column",
                                         "vocab_size",   "max_length",
                                         "num_tokens",   "truncated_examples"};
    json_t *m = ds->meta;
    ty_tokenizer *tok = NULL;
    ty_err terr = {0};
    int bad = 0;
    for (size_t i = 0; i < sizeof copied / sizeof *copied; i++)
        bad |= json_object_set(doc, copied[i], json_object_get(m, copied[i]));
    if (ty_tokenizer_load(json_object_get(m, "tokenizer"), &tok, &terr))
        return 1; /* the converter wrote it: it loads */
    json_t *info = ty_tokenizer_describe(tok);
    bad |= !info || json_object_set_new(doc, "tokenizer_info", info);
    bad |= json_object_set_new(
        doc, "tokenizer",
        json_string(ty_tokenizer_type_name(ty_tokenizer_type_of(tok))));
    uint32_t ids[TEXT_SAMPLE_IDS];
    size_t n = text_row_ids(ds, 0, ids, TEXT_SAMPLE_IDS);
    json_t *a = json_array();
    for (size_t k = 0; a && k < n; k++)
        bad |= json_array_append_new(a, json_integer(ids[k]));
    json_t *text = decoded_text(tok, ids, n);
    const json_t *label =
        json_array_get(json_object_get(m, "classes"), (size_t)ds->y_class[0]);
    json_t *sample = a && text ? json_pack("{s:o, s:o, s:O*}", "ids", a, "text",
                                           text, "label", label)
                               : NULL;
    if (!sample) {
        json_decref(a);
        json_decref(text);
    }
    bad |= !sample || json_object_set_new(doc, "sample", sample);
    ty_tokenizer_free(tok);
    return bad;
}

/* The API representation of a converted dataset file. */
static json_t *dataset_doc(const char *id, const upload *u,
                           const ty_dataset *ds)
{
    char now[32];
    ty_now_iso(now);
    json_t *m = ds->meta;
    json_t *doc = json_object();
    int bad = !doc; /* an allocation failed: no half document */
    bad |= json_object_set_new(doc, "id", json_string(id));
    bad |= json_object_set_new(doc, "name", json_string(u->name));
    bad |= json_object_set_new(doc, "format",
                               json_string(format_names[u->format]));
    bad |=
        json_object_set_new(doc, "task", json_string(ty_task_name(ds->task)));
    bad |= json_object_set_new(doc, "num_examples",
                               json_integer(ds->num_examples));
    json_object_set(doc, "input_shape", json_object_get(m, "input_shape"));
    if (ds->task == TY_TASK_CLASSIFICATION) {
        bad |= json_object_set_new(doc, "num_classes",
                                   json_integer(ds->num_classes));
        json_object_set(doc, "classes", json_object_get(m, "classes"));
        json_t *counts = class_counts(ds);
        bad |= !counts || json_object_set_new(doc, "class_counts", counts);
    } else {
        bad |= json_object_set_new(doc, "num_targets", json_integer(ds->y_dim));
    }
    if (json_object_get(m, "feature_names")) {
        json_object_set(doc, "feature_names",
                        json_object_get(m, "feature_names"));
        json_object_set(doc, "label_column",
                        json_object_get(m, "label_column"));
    }
    /* a CSV's feature columns: type, categories, missing cells */
    if (json_object_get(m, "columns"))
        json_object_set(doc, "columns", json_object_get(m, "columns"));
    /* a text column's tokens: no feature means (ids are not quantities) */
    int text = json_object_get(m, "text_column") != NULL;
    if (text)
        bad |= text_doc_fields(doc, ds);
    json_t *means = text ? NULL : feature_means(ds);
    if (means)
        bad |= json_object_set_new(doc, "feature_means", means);
    json_object_set(doc, "source", u->source);
    bad |= json_object_set_new(doc, "created_at", json_string(now));
    if (bad) {
        json_decref(doc);
        return NULL;
    }
    return doc;
}

/* The sample a token dataset's document shows: this many bytes of text
 * (byte tokenizer, cut back to a whole character), else this many ids. */
#define SAMPLE_BYTES 200
#define SAMPLE_IDS 64

/* The API representation of a converted token dataset file. */
static json_t *tokens_doc(const char *id, const upload *u, const ty_tokens *t)
{
    char now[32];
    ty_now_iso(now);
    json_t *doc = json_object();
    json_t *sample = json_object();
    int bad = !doc || !sample;
    bad |= json_object_set_new(doc, "id", json_string(id));
    bad |= json_object_set_new(doc, "name", json_string(u->name));
    bad |= json_object_set_new(doc, "format",
                               json_string(format_names[u->format]));
    bad |= json_object_set_new(
        doc, "task", json_string(ty_task_name(TY_TASK_LANGUAGE_MODELING)));
    /* the tokenizer: its type by name ("byte", "bpe", "huggingface"; null
     * for ids made elsewhere) and, in tokenizer_info, its summary */
    const json_t *desc = json_object_get(t->meta, "tokenizer");
    ty_tokenizer *tok = NULL;
    ty_err terr = {0};
    if (!json_is_null(desc) && ty_tokenizer_load(desc, &tok, &terr) != TY_OK)
        bad = 1; /* the converter wrote it: it loads */
    json_t *info = tok ? ty_tokenizer_describe(tok) : json_null();
    bad |= !info || json_object_set_new(doc, "tokenizer_info", info);
    bad |= json_object_set_new(
        doc, "tokenizer",
        tok ? json_string(ty_tokenizer_type_name(ty_tokenizer_type_of(tok)))
            : json_null());
    bad |= json_object_set_new(doc, "vocab_size", json_integer(t->vocab_size));
    bad |= json_object_set_new(doc, "num_tokens",
                               json_integer((json_int_t)t->num_tokens));
    bad |= json_object_set(doc, "token_dtype",
                           json_object_get(t->meta, "token_dtype"));
    if (t->byte_tokenizer) {
        char text[SAMPLE_BYTES];
        size_t n =
            t->num_tokens < SAMPLE_BYTES ? (size_t)t->num_tokens : SAMPLE_BYTES;
        for (size_t i = 0; i < n; i++)
            text[i] = (char)ty_tokens_at(t, i);
        /* the text is valid UTF-8: end before a character the cut splits */
        while (n > 0 && n < t->num_tokens &&
               (ty_tokens_at(t, n) & 0xC0) == 0x80)
            n--;
        bad |= json_object_set_new(sample, "text", json_stringn(text, n));
    } else {
        uint32_t ids[SAMPLE_IDS];
        size_t n = 0;
        json_t *a = json_array();
        bad |= !a;
        for (; a && n < t->num_tokens && n < SAMPLE_IDS; n++) {
            ids[n] = ty_tokens_at(t, n);
            bad |= json_array_append_new(a, json_integer(ids[n]));
        }
        bad |= json_object_set_new(sample, "ids", a);
        char *text = NULL;
        size_t len = 0;
        if (tok &&
            ty_tokenizer_decode(tok, ids, n, &text, &len, &terr) == TY_OK) {
            /* the ids' text, less a character the last id cuts */
            size_t ok = 0;
            while (ok < len) {
                size_t k =
                    ds_utf8_seq((const unsigned char *)text + ok, len - ok);
                if (!k)
                    break;
                ok += k;
            }
            bad |= json_object_set_new(sample, "text", json_stringn(text, ok));
        }
        free(text);
    }
    ty_tokenizer_free(tok);
    bad |= json_object_set_new(doc, "sample", sample);
    json_object_set(doc, "source", u->source);
    bad |= json_object_set_new(doc, "created_at", json_string(now));
    if (bad) {
        json_decref(doc);
        return NULL;
    }
    return doc;
}

void api_datasets_create(api_ctx *app, http_req *r)
{
    ty_err err = {0};
    upload u = {0};
    ty_dataset ds = {0};
    json_t *doc = NULL;
    char out[PATH_MAX], id[TY_ID_MAX];
    int quota_refused = 0;
    ty_status s;
    if (http_req_is_multipart(r)) {
        s = read_form(r, &u, &err);
    } else {
        const json_t *body = api_json_object(r);
        if (!body)
            return;
        s = read_json(app, r, body, &u, &err);
    }
    if (s != TY_OK)
        goto fail;
    if ((s = http_req_temp_path(r, ".tyds", out, sizeof out, &err)) != TY_OK ||
        (s = convert(app, &u, out, &err)) != TY_OK)
        goto fail;
    /* The converter's own output: if it does not open, that is the server's
     * fault, and the message names a server path: a 500 (logged). */
    if (u.format == FMT_TEXT || u.format == FMT_TOKENS) {
        ty_tokens t;
        if ((s = ty_tokens_open(out, &t, &err)) == TY_OK &&
            (s = ty_id_new("ds_", id, &err)) == TY_OK)
            doc = tokens_doc(id, &u, &t);
        ty_tokens_close(&t);
    } else if ((s = ty_dataset_open(out, &ds, &err)) == TY_OK &&
               (s = ty_id_new("ds_", id, &err)) == TY_OK) {
        doc = dataset_doc(id, &u, &ds);
    }
    ty_dataset_close(&ds);
    if (s != TY_OK) {
        if (s != TY_ENOMEM)
            s = TY_EIO;
        goto fail;
    }
    if (!doc) {
        s = ty_fail(&err, TY_ENOMEM, NULL, "out of memory");
        goto fail;
    }
    if ((s = api_create_blob_resource(app, r, out, id, doc,
                                      store_dataset_insert, "/v1/datasets",
                                      &err)) != TY_OK) {
        quota_refused = s == TY_ETOOBIG;
        goto fail;
    }
    json_decref(doc);
    json_decref(u.source);
    ty_tokenizer_request_free(&u.tok);
    return;
fail:
    ty_dataset_close(&ds);
    json_decref(doc);
    json_decref(u.source);
    ty_tokenizer_request_free(&u.tok);
    /* Past this point a size limit is about the data (too many classes, a
     * download over --max-fetch-bytes), not the request body: 422, not 413;
     * the tenant's storage quota is 413. */
    http_reply_error(r, s == TY_ETOOBIG && !quota_refused ? TY_EINVAL : s,
                     &err);
}

void api_datasets_list(api_ctx *app, http_req *r)
{
    api_list(app, r, store_dataset_list);
}

void api_datasets_get(api_ctx *app, http_req *r)
{
    api_get(app, r, STORE_REF_DATASET, store_dataset_get);
}

void api_datasets_delete(api_ctx *app, http_req *r)
{
    char sha[65], id[TY_ID_MAX];
    ty_err err = {0};
    if (!api_resolve_param(app, r, STORE_REF_DATASET, id))
        return;
    ty_status s =
        store_dataset_delete(app->store, api_tenant(r), id, sha, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    store_blob_release(app->store, sha);
    http_reply_static(r, 204, NULL, "", 0);
}
