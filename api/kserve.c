/*
 * kserve.c - the KServe v2 (Open Inference) protocol under /v2, as Triton's
 * HTTP clients (tritonclient.http) speak it: health, server and model
 * metadata, inference with JSON or binary tensor data (Triton's binary
 * tensor data extension) and classification outputs, and the parts of
 * Triton's model repository, model configuration and statistics extensions
 * that mean something here. The other extensions answer 400 saying they
 * are not supported (a 5xx would blame the server for a request it
 * cannot serve by design).
 *
 * A model is named by its id or by its name: an id always wins, else the
 * newest of the tenant's models with that name (serve_model_open). Its only
 * version is "1". It has one input, "input" ([batch, ...input shape]), and
 * one output, "output" (FP32 [batch, outputs]); an input of any numeric
 * datatype is checked and converted to float32 (serve/tensor.h).
 *
 * Request errors are 400 with the v2 "error" key (server/reply.c adds it
 * to every problem under /v2), a model that is not the tenant's 404.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "api/api.h"
#include "common/jsonutil.h"
#include "common/opmetrics.h"
#include "serve/encode.h"
#include "serve/predict.h"
#include "serve/rawrows.h"
#include "serve/tensor.h"
#include "api/kserve_stats.h"

/* Binary tensor data is little-endian: floats are copied as they are. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "binary tensor data assumes a little-endian host"
#endif

#define INPUT_NAME "input"
#define OUTPUT_NAME "output"
#define VERSION "1"

/* The version in the path ("" when the route has none): "1" or 404. */
static int version_ok(http_req *r, int param)
{
    const char *v = http_req_param(r, param);
    if (!*v || !strcmp(v, VERSION))
        return 1;
    http_reply_problem(
        r, 404, NULL,
        "model %s has no version %s; its only version is " VERSION,
        http_req_param(r, 0), v);
    return 0;
}

/* The tenant's model named by path parameter 0 (an id, else a name):
 * *doc (the store's document) and id, or the reply (404) and 0. */
static int find_model(api_ctx *app, http_req *r, char id[TY_ID_MAX],
                      json_t **doc)
{
    ty_err err = {0};
    char sha[65];
    ty_status s = store_model_find(app->store, api_tenant(r),
                                   http_req_param(r, 0), id, doc, sha, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return 0;
    }
    if (!version_ok(r, 1)) {
        json_decref(*doc);
        return 0;
    }
    return 1;
}

/* ---- health and metadata ---- */

void api_kserve_server(api_ctx *app, http_req *r)
{
    (void)app;
    http_reply_json(r, 200,
                    json_pack("{s:s, s:s, s:[s, s, s, s, s]}", "name",
                              "trainyard", "version", TRAINYARD_VERSION,
                              "extensions", "binary_tensor_data",
                              "classification", "model_repository",
                              "model_configuration", "statistics"));
}

void api_kserve_live(api_ctx *app, http_req *r)
{
    (void)app;
    http_reply_json(r, 200, json_pack("{s:b}", "live", 1));
}

void api_kserve_ready(api_ctx *app, http_req *r)
{
    ty_err err;
    int ok = store_ping(app->store, &err) == TY_OK;
    http_reply_json(r, ok ? 200 : 503, json_pack("{s:b}", "ready", ok));
}

/* [-1, dims...]: a shape with its batch dimension first. */
static json_t *batched(const json_t *dims)
{
    json_t *a = json_array();
    json_array_append_new(a, json_integer(-1));
    json_array_extend(a, (json_t *)dims);
    return a;
}

void api_kserve_model(api_ctx *app, http_req *r)
{
    char id[TY_ID_MAX];
    json_t *doc;
    if (!find_model(app, r, id, &doc))
        return;
    json_t *out =
        json_pack("{s:s, s:s, s:[i, O]}", "name", OUTPUT_NAME, "datatype",
                  "FP32", "shape", -1, json_object_get(doc, "num_outputs"));
    /* The label of each output index, for a client that takes its own
     * argmax (the classification extension uses them too). */
    const json_t *classes = json_object_get(doc, "classes");
    if (json_is_array(classes))
        json_object_set(out, "classes", (json_t *)classes);
    /* A tabular model takes raw CSV cells as text: [batch, columns]. */
    const json_t *cols = json_object_get(doc, "columns");
    json_t *ncols = json_pack("[I]", (json_int_t)json_array_size(cols));
    json_t *meta = json_pack(
        "{s:s, s:[s], s:s, s:[{s:s, s:s, s:o}], s:[o]}", "name", id, "versions",
        VERSION, "platform", "trainyard", "inputs", "name", INPUT_NAME,
        "datatype", cols ? "BYTES" : "FP32", "shape",
        batched(cols ? ncols : json_object_get(doc, "input_shape")), "outputs",
        out);
    json_decref(ncols);
    json_decref(doc);
    http_reply_json(r, 200, meta);
}

void api_kserve_model_ready(api_ctx *app, http_req *r)
{
    char id[TY_ID_MAX];
    json_t *doc;
    if (!find_model(app, r, id, &doc))
        return;
    json_decref(doc);
    http_reply_json(r, 200, json_pack("{s:s, s:b}", "name", id, "ready", 1));
}

/* The model configuration extension: a minimal Triton config derived from
 * the model (dims without the batch dimension). */
void api_kserve_config(api_ctx *app, http_req *r)
{
    char id[TY_ID_MAX];
    json_t *doc;
    if (!find_model(app, r, id, &doc))
        return;
    const json_t *cols = json_object_get(doc, "columns");
    json_t *ncols = json_pack("[I]", (json_int_t)json_array_size(cols));
    json_t *cfg = json_pack(
        "{s:s, s:s, s:s, s:i, s:[{s:s, s:s, s:O}], s:[{s:s, s:s, s:[O]}]}",
        "name", id, "platform", "trainyard", "backend", "trainyard",
        "max_batch_size", SERVE_MAX_EXAMPLES, "input", "name", INPUT_NAME,
        "data_type", cols ? "TYPE_STRING" : "TYPE_FP32", "dims",
        cols ? ncols : json_object_get(doc, "input_shape"), "output", "name",
        OUTPUT_NAME, "data_type", "TYPE_FP32", "dims",
        json_object_get(doc, "num_outputs"));
    const json_t *classes = json_object_get(doc, "classes");
    if (cfg && json_is_array(classes))
        json_object_set(json_array_get(json_object_get(cfg, "output"), 0),
                        "classes", (json_t *)classes);
    json_decref(ncols);
    json_decref(doc);
    http_reply_json(r, 200, cfg);
}

/* ---- the model repository extension ---- */

/* A small optional JSON body of a v2 POST (the route buffers it raw): the
 * object, or NULL after replying 400. An empty body is {}. */
static json_t *small_body(http_req *r)
{
    size_t len;
    const char *text = http_req_body(r, &len);
    if (!text)
        return json_object();
    json_error_t je;
    json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(doc)) {
        json_decref(doc);
        http_reply_problem(r, 400, NULL,
                           "the request body must be empty or a JSON object");
        return NULL;
    }
    return doc;
}

/* Calls add(list, tenant, model) for every model of the caller's tenant,
 * page by page. 0 after replying the store's error. */
typedef void (*model_add_fn)(json_t *list, const char *tenant,
                             const json_t *model);

static int each_model(api_ctx *app, http_req *r, model_add_fn add, json_t *list)
{
    store_page page = {0, 1000};
    ty_err err = {0};
    for (;;) {
        json_t *items = NULL;
        int64_t next = 0;
        ty_status s = store_model_list(app->store, api_tenant(r), page, &items,
                                       &next, &err);
        if (s != TY_OK) {
            http_reply_error(r, s, &err);
            return 0;
        }
        size_t i;
        json_t *m;
        json_array_foreach (items, i, m)
            add(list, api_tenant(r), m);
        json_decref(items);
        if (!next)
            return 1;
        page.cursor = next;
    }
}

static void index_add(json_t *list, const char *tenant, const json_t *model)
{
    (void)tenant;
    json_array_append_new(list,
                          json_pack("{s:O, s:s, s:s, s:s}", "name",
                                    json_object_get(model, "id"), "version",
                                    VERSION, "state", "READY", "reason", ""));
}

static void stats_add(json_t *list, const char *tenant, const json_t *model)
{
    json_array_append_new(
        list, kserve_stats_json(
                  tenant, json_string_value(json_object_get(model, "id"))));
}

/* POST /v2/repository/index: the tenant's models, each READY (a model is
 * loaded on its first request and stays servable). */
void api_kserve_index(api_ctx *app, http_req *r)
{
    json_t *body = small_body(r);
    if (!body)
        return;
    const json_t *ready = json_object_get(body, "ready");
    if (ready && !json_is_boolean(ready)) {
        json_decref(body);
        http_reply_problem(r, 400, "ready", "ready must be true or false");
        return;
    }
    json_decref(body);
    json_t *index = json_array();
    if (!each_model(app, r, index_add, index)) {
        json_decref(index);
        return;
    }
    http_reply_json(r, 200, index);
}

/* POST /v2/repository/models/{name}/load: loads the model into the model
 * cache now rather than on its first request. A model cannot be given
 * here (parameters "config", "file:..."): import it with POST /v1/models. */
void api_kserve_load(api_ctx *app, http_req *r)
{
    json_t *body = small_body(r);
    if (!body)
        return;
    const json_t *params = json_object_get(body, "parameters");
    int bad_params = params && !json_is_object(params);
    int has_params = json_is_object(params) && json_object_size(params) > 0;
    json_decref(body);
    if (bad_params) {
        http_reply_problem(r, 400, "parameters",
                           "parameters must be an object");
        return;
    }
    if (has_params) {
        http_reply_problem(r, 400, "parameters",
                           "loading a model from a config or files is not "
                           "supported; import it with POST /v1/models, then "
                           "load it by its id or name");
        return;
    }
    serve_env env = api_serve_env(app);
    serve_model m;
    ty_err err = {0};
    ty_status s = serve_model_open(&env, api_tenant(r), http_req_param(r, 0), 1,
                                   &m, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    serve_model_close(&m);
    http_reply_json(r, 200, json_object());
}

/* ---- statistics ---- */

void api_kserve_stats(api_ctx *app, http_req *r)
{
    json_t *list = json_array();
    const char *tenant = api_tenant(r);
    if (*http_req_param(r, 0)) {
        char id[TY_ID_MAX];
        json_t *doc;
        if (!find_model(app, r, id, &doc)) {
            json_decref(list);
            return;
        }
        json_decref(doc);
        json_array_append_new(list, kserve_stats_json(tenant, id));
    } else if (!each_model(app, r, stats_add, list)) {
        json_decref(list);
        return;
    }
    http_reply_json(r, 200, json_pack("{s:o}", "model_stats", list));
}

/* ---- Triton extensions this server does not offer (docs/kserve.md) ---- */

void api_kserve_unsupported(api_ctx *app, http_req *r)
{
    (void)app;
    const char *path = http_req_path(r);
    const char *what = strstr(path, "sharedmemory") ? "shared memory"
                       : strstr(path, "/trace")     ? "tracing"
                       : strstr(path, "/logging")   ? "log settings"
                       : strstr(path, "/unload")
                           ? "unloading a model (models are loaded on demand "
                             "and stay servable; DELETE /v1/models/{id} "
                             "removes one)"
                           : "this extension";
    http_reply_problem(r, 400, NULL,
                       "%s is not supported by this server (KServe v2 "
                       "extensions here: binary_tensor_data, classification, "
                       "model_repository (index, load), model_configuration, "
                       "statistics)",
                       what);
}

/* ---- inference ---- */

/* The largest classification count taken. Triton reads the count as an
 * unsigned integer (a negative, fractional or string one is a 400) and
 * returns at most the classes the output has; a count this far past any
 * model's classes is a mistake, told as one rather than read as "all". */
#define MAX_CLASS_COUNT (1 << 20)

/* One requested output. */
typedef struct {
    int binary;           /* as binary tensor data */
    uint32_t class_count; /* classification: top k; 0: raw scores */
} out_req;

/* A parsed infer request. */
typedef struct {
    const json_t *id; /* string or NULL */
    serve_dtype dt;
    uint64_t batch, n;  /* examples; values (batch * features) */
    int binary_in;      /* the input's data is binary */
    const json_t *cols; /* BYTES for a tabular model: its columns; q->n
                           counts cells (batch * columns) */
    uint64_t binary_size;
    out_req out;
} infer_req;

/* Replies 400 naming field; returns 0, for `return bad(...)`. */
__attribute__((format(printf, 3, 4))) static int
bad(http_req *r, const char *field, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    http_reply_problem(r, 400, field, "%s", msg);
    return 0;
}

static int is_uint(const json_t *v, json_int_t max)
{
    return json_is_integer(v) && json_integer_value(v) >= 0 &&
           json_integer_value(v) <= max;
}

static int reject_shared_memory(http_req *r, const json_t *params,
                                const char *field)
{
    if (json_object_get(params, "shared_memory_region"))
        return bad(r, field,
                   "%s: shared memory is not supported by this server; send "
                   "the data in the body (JSON or binary)",
                   field);
    return 1;
}

/* A tabular model's BYTES input: its raw CSV cells as text, [batch,
 * columns]; 0 after replying 400. */
static int bytes_shape(http_req *r, const serve_model *m, const json_t *in,
                       const json_t *cols, infer_req *q)
{
    const json_t *shape = json_object_get(in, "shape");
    size_t nc = json_array_size(cols);
    if (!json_is_array(shape) || json_array_size(shape) != 2 ||
        !is_uint(json_array_get(shape, 0), SERVE_MAX_EXAMPLES) ||
        json_integer_value(json_array_get(shape, 0)) < 1 ||
        !json_is_integer(json_array_get(shape, 1)) ||
        (size_t)json_integer_value(json_array_get(shape, 1)) != nc)
        return bad(r, "inputs[0].shape",
                   "input \"" INPUT_NAME "\": BYTES data for model %s is "
                   "its raw CSV cells: shape [batch, %zu] (1 to %d rows "
                   "of its feature columns, in the CSV's order; an empty "
                   "string is a missing value)",
                   m->id, nc, SERVE_MAX_EXAMPLES);
    q->cols = cols;
    q->batch = (uint64_t)json_integer_value(json_array_get(shape, 0));
    q->n = q->batch * nc;
    return 1;
}

/* A numeric input's shape; 0 after replying 400. */
static int numeric_shape(http_req *r, const serve_model *m, const json_t *in,
                         infer_req *q)
{
    /* [batch, ...input shape], or [batch, features] flattened. */
    const json_t *shape = json_object_get(in, "shape");
    const json_t *want = m->input_shape;
    size_t nd = json_array_size(shape);
    int ok = json_is_array(shape) && nd >= 2 &&
             is_uint(json_array_get(shape, 0), SERVE_MAX_EXAMPLES) &&
             json_integer_value(json_array_get(shape, 0)) >= 1;
    int exact = ok && nd == json_array_size(want) + 1;
    for (size_t i = 1; exact && i < nd; i++)
        exact =
            json_equal(json_array_get(shape, i), json_array_get(want, i - 1));
    int flat =
        ok && nd == 2 &&
        is_uint(json_array_get(shape, 1), (json_int_t)m->features) &&
        (uint64_t)json_integer_value(json_array_get(shape, 1)) == m->features;
    if (!exact && !flat) {
        char *got = shape ? json_dumps(shape, JSON_COMPACT) : NULL;
        char *dims = json_dumps(want, JSON_COMPACT);
        bad(r, "inputs[0].shape",
            "input \"" INPUT_NAME "\": shape %s does not fit model %s: send "
            "[batch, %s] (its input shape %s after a batch of 1 to %d), or "
            "[batch, %llu] flattened",
            got ? got : "(none)", m->id,
            dims ? (dims[0] == '[' ? dims + 1 : dims) : "?", dims ? dims : "?",
            SERVE_MAX_EXAMPLES, (unsigned long long)m->features);
        free(got);
        free(dims);
        return 0;
    }
    q->batch = (uint64_t)json_integer_value(json_array_get(shape, 0));
    q->n = q->batch * m->features;

    return 1;
}

/* Checks the request's protocol fields against the model; 0 after
 * replying 400. */
static int infer_parse(http_req *r, const serve_model *m, const json_t *body,
                       infer_req *q)
{
    static const char *const keys[] = {"id",      "parameters", "inputs",
                                       "outputs", "model_name", "model_version",
                                       NULL};
    static const char *const in_keys[] = {"name", "shape",      "datatype",
                                          "data", "parameters", NULL};
    ty_err err = {0};
    memset(q, 0, sizeof *q);
    if (tyjson_check_keys(body, keys, "", &err) != TY_OK)
        return bad(r, err.field, "%s", err.msg);
    q->id = json_object_get(body, "id");
    if (q->id && !json_is_string(q->id))
        return bad(r, "id", "id must be a string");
    const json_t *params = json_object_get(body, "parameters");
    if (params && !json_is_object(params))
        return bad(r, "parameters", "parameters must be an object");
    const json_t *bdo = json_object_get(params, "binary_data_output");
    if (bdo && !json_is_boolean(bdo))
        return bad(r, "parameters.binary_data_output",
                   "parameters.binary_data_output must be true or false");
    q->out.binary = json_is_true(bdo);

    const json_t *inputs = json_object_get(body, "inputs");
    if (!json_is_array(inputs) || json_array_size(inputs) != 1)
        return bad(r, "inputs",
                   "inputs must hold exactly one tensor: model %s takes one "
                   "input, \"" INPUT_NAME "\"",
                   m->id);
    const json_t *in = json_array_get(inputs, 0);
    if (!json_is_object(in))
        return bad(r, "inputs[0]", "inputs[0] must be an object");
    if (tyjson_check_keys(in, in_keys, "inputs[0]", &err) != TY_OK)
        return bad(r, err.field, "%s", err.msg);
    const char *name = json_string_value(json_object_get(in, "name"));
    if (!name)
        return bad(r, "inputs[0].name", "inputs[0].name must be a string");
    if (strcmp(name, INPUT_NAME) != 0)
        return bad(r, "inputs[0].name",
                   "unknown input \"%.64s\": model %s takes one input, named "
                   "\"" INPUT_NAME "\"",
                   name, m->id);
    const char *dt = json_string_value(json_object_get(in, "datatype"));
    if (!serve_dtype_parse(dt, &q->dt))
        return bad(r, "inputs[0].datatype",
                   "input \"" INPUT_NAME "\": datatype must be one of BOOL, "
                   "UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, "
                   "FP16, BF16, FP32, FP64");
    const json_t *cols = serve_tab_columns(model_entry_net(m->e));
    if (q->dt == SERVE_DT_BYTES && !cols)
        return bad(r, "inputs[0].datatype",
                   "input \"" INPUT_NAME "\": datatype BYTES is not supported: "
                   "the model takes numbers (send FP32 or another numeric "
                   "datatype)");
    if (q->dt == SERVE_DT_BYTES ? !bytes_shape(r, m, in, cols, q)
                                : !numeric_shape(r, m, in, q))
        return 0;

    const json_t *ip = json_object_get(in, "parameters");
    if (ip && !json_is_object(ip))
        return bad(r, "inputs[0].parameters",
                   "inputs[0].parameters must be an object");
    if (!reject_shared_memory(r, ip, "inputs[0]"))
        return 0;
    const json_t *bds = json_object_get(ip, "binary_data_size");
    int has_data = json_object_get(in, "data") != NULL;
    if (bds) {
        if (!json_is_integer(bds) || json_integer_value(bds) < 0)
            return bad(r, "inputs[0].parameters.binary_data_size",
                       "binary_data_size must be a byte count");
        if (has_data)
            return bad(r, "inputs[0]",
                       "input \"" INPUT_NAME "\": send either data or "
                       "parameters.binary_data_size, not both");
        q->binary_in = 1;
        q->binary_size = (uint64_t)json_integer_value(bds);
    }
    /* data itself is checked when decoded (it is not in body). */

    const json_t *outs = json_object_get(body, "outputs");
    if (outs && !json_is_array(outs))
        return bad(r, "outputs", "outputs must be an array");
    if (json_array_size(outs) > 1)
        return bad(r, "outputs",
                   "model %s has one output, named \"" OUTPUT_NAME
                   "\"; request it once",
                   m->id);
    const json_t *o = json_array_get(outs, 0);
    if (o) {
        static const char *const out_keys[] = {"name", "parameters", NULL};
        if (!json_is_object(o))
            return bad(r, "outputs[0]", "outputs[0] must be an object");
        if (tyjson_check_keys(o, out_keys, "outputs[0]", &err) != TY_OK)
            return bad(r, err.field, "%s", err.msg);
        const char *on = json_string_value(json_object_get(o, "name"));
        if (!on || strcmp(on, OUTPUT_NAME) != 0)
            return bad(r, "outputs[0].name",
                       "unknown output \"%.64s\": model %s has one output, "
                       "named \"" OUTPUT_NAME "\"",
                       on ? on : "", m->id);
        const json_t *op = json_object_get(o, "parameters");
        if (op && !json_is_object(op))
            return bad(r, "outputs[0].parameters",
                       "outputs[0].parameters must be an object");
        if (!reject_shared_memory(r, op, "outputs[0]"))
            return 0;
        const json_t *bd = json_object_get(op, "binary_data");
        if (bd && !json_is_boolean(bd))
            return bad(r, "outputs[0].parameters.binary_data",
                       "binary_data must be true or false");
        if (bd)
            q->out.binary = json_is_true(bd);
        /* tritonclient's name for the count, sent as a parameter by hand:
         * refused, not ignored (the classes would silently not come). */
        if (json_object_get(op, "class_count"))
            return bad(r, "outputs[0].parameters.class_count",
                       "class_count is not a parameter of the KServe "
                       "protocol: the number of classes to return is "
                       "outputs[0].parameters.classification (what "
                       "tritonclient's InferRequestedOutput(class_count=...) "
                       "sends)");
        const json_t *cls = json_object_get(op, "classification");
        if (cls && !is_uint(cls, MAX_CLASS_COUNT))
            return bad(r, "outputs[0].parameters.classification",
                       "classification (tritonclient's class_count) must be "
                       "the number of classes to return, a whole number "
                       "from 0 (the raw scores) to %d",
                       MAX_CLASS_COUNT);
        /* As Triton: more than the output has gives all of them. */
        uint64_t k = cls ? (uint64_t)json_integer_value(cls) : 0;
        q->out.class_count = k > m->outputs ? m->outputs : (uint32_t)k;
    }
    return 1;
}

/* The raw scores, or the classification strings, of batch examples. */
typedef struct {
    const float *y;
    uint64_t batch;
    uint32_t k;
    const json_t *classes;
} outputs_view;

/* Writes the output tensor: its JSON object into h and, when binary, its
 * data into d. */
static int write_output(serve_buf *h, serve_buf *d, const out_req *o,
                        const outputs_view *v)
{
    uint32_t count = o->class_count;
    uint32_t cols = count ? count : v->k;
    serve_buf_str(h, "{\"name\":\"" OUTPUT_NAME "\",\"datatype\":\"");
    serve_buf_str(h, count ? "BYTES" : "FP32");
    serve_buf_str(h, "\",\"shape\":[");
    serve_buf_int(h, (int64_t)v->batch);
    serve_buf_str(h, ",");
    serve_buf_int(h, cols);
    serve_buf_str(h, "],");
    size_t before = d->len;
    if (!o->binary)
        serve_buf_str(h, "\"data\":[");
    if (!count) {
        size_t n = (size_t)v->batch * v->k;
        if (o->binary)
            serve_buf_add(d, v->y, n * sizeof *v->y); /* little-endian */
        else
            serve_buf_floats(h, v->y, n);
    } else {
        uint32_t *top = malloc(2 * (size_t)v->k * sizeof *top + 1);
        if (!top)
            return 0;
        char text[1100];
        for (uint64_t i = 0; i < v->batch; i++) {
            const float *row = v->y + i * v->k;
            serve_tensor_top(row, v->k, top, top + v->k);
            for (uint32_t c = 0; c < count; c++) {
                size_t len = serve_tensor_class_text(
                    row[top[c]], top[c], v->classes, text, sizeof text);
                if (o->binary) {
                    unsigned char le[4] = {
                        (unsigned char)len, (unsigned char)(len >> 8),
                        (unsigned char)(len >> 16), (unsigned char)(len >> 24)};
                    serve_buf_add(d, le, 4);
                    serve_buf_add(d, text, len);
                } else {
                    if (i || c)
                        serve_buf_str(h, ",");
                    serve_buf_json_string(h, text);
                }
            }
        }
        free(top);
    }
    if (o->binary) {
        serve_buf_str(h, "\"parameters\":{\"binary_data_size\":");
        serve_buf_int(h, (int64_t)(d->len - before));
        serve_buf_str(h, "}}");
    } else {
        serve_buf_str(h, "]}");
    }
    return serve_buf_ok(h) && serve_buf_ok(d);
}

/* The reply: the JSON header, then the binary output data if any. */
static void infer_reply(http_req *r, const serve_model *m, const infer_req *q,
                        const float *y)
{
    serve_buf h = {0}, d = {0};
    serve_buf_str(&h, "{\"model_name\":");
    serve_buf_json_string(&h, m->id);
    serve_buf_str(&h, ",\"model_version\":\"" VERSION "\"");
    if (q->id) {
        serve_buf_str(&h, ",\"id\":");
        serve_buf_json_string(&h, json_string_value(q->id));
    }
    serve_buf_str(&h, ",\"parameters\":{\"device\":");
    serve_buf_json_string(&h, m->device);
    if (m->deployment[0]) {
        serve_buf_str(&h, ",\"deployment\":");
        serve_buf_json_string(&h, m->deployment);
    }
    serve_buf_str(&h, "},\"outputs\":[");
    outputs_view v = {y, q->batch, m->outputs, m->classes};
    int ok = write_output(&h, &d, &q->out, &v);
    serve_buf_str(&h, "]}");
    size_t header_len = h.len;
    if (q->out.binary)
        serve_buf_add(&h, d.p ? d.p : "", d.len);
    else
        serve_buf_str(&h, "\n"); /* JSON replies end with a newline */
    serve_buf_free(&d);
    size_t len;
    char *text = ok ? serve_buf_take(&h, &len) : NULL;
    serve_buf_free(&h);
    if (!text) {
        http_reply_error(r, TY_ENOMEM, NULL);
        return;
    }
    if (q->out.binary) {
        char hl[24];
        snprintf(hl, sizeof hl, "%zu", header_len);
        http_reply_header(r, "Inference-Header-Content-Length", hl);
        http_reply_buffer(r, 200, "application/octet-stream", text, len);
    } else {
        http_reply_buffer(r, 200, "application/json", text, len);
    }
}

static void infer_run(api_ctx *app, http_req *r)
{
    double t0 = opm_now();
    uint64_t start = kserve_now_ns();
    size_t len;
    const char *text = http_req_body(r, &len);
    if (!text) {
        http_reply_problem(r, 400, NULL,
                           "this endpoint needs an inference request as the "
                           "body: JSON, or a JSON header and binary tensor "
                           "data (Inference-Header-Content-Length)");
        return;
    }
    if (!version_ok(r, 1))
        return;
    ty_err err = {0};
    size_t json_len;
    if (serve_tensor_split(
            len, http_req_header(r, "Inference-Header-Content-Length"),
            &json_len, &err) != TY_OK) {
        http_reply_problem(r, 400, NULL, "%s", err.msg);
        return;
    }
    /* json_len 0: a raw binary request, the body all FP32 data. */
    serve_infer_body ib = {0};
    if (json_len > 0) {
        ty_status s = serve_infer_scan(text, json_len, &ib, &err);
        if (s != TY_OK) {
            if (s == TY_EFORMAT || s == TY_EINVAL)
                http_reply_problem(r, 400, err.field, "%s", err.msg);
            else
                http_reply_error(r, s, &err);
            return;
        }
    }
    serve_env env = api_serve_env(app);
    serve_model m;
    ty_status s = serve_model_open(&env, api_tenant(r), http_req_param(r, 0), 1,
                                   &m, &err);
    /* The deployment's limits before any work on the inputs. */
    if (s == TY_OK && (s = serve_model_admit(&m, &err)) != TY_OK) {
        if (s == TY_ELIMIT)
            api_retry_after(r, m.retry_after);
        serve_model_close(&m);
        serve_infer_body_free(&ib);
        http_reply_error(r, s, &err);
        return;
    }
    if (s != TY_OK) {
        serve_infer_body_free(&ib);
        /* The data was only skimmed: a body that is not JSON is answered
         * so before a missing model. */
        if (json_len > 0 && serve_infer_check(text, json_len, &err) != TY_OK)
            http_reply_problem(r, 400, err.field, "%s", err.msg);
        else
            http_reply_error(r, s, &err);
        return;
    }
    infer_req q;
    int ok = 1;
    const char *data = text + json_len;
    size_t data_len = len - json_len;
    if (json_len > 0) {
        ok = infer_parse(r, &m, ib.doc, &q);
        if (ok && q.binary_in && q.binary_size != data_len)
            ok = bad(r, "inputs[0].parameters.binary_data_size",
                     "input \"" INPUT_NAME "\": binary_data_size is %llu but "
                     "the body holds %zu bytes of binary data after its "
                     "%zu-byte JSON header",
                     (unsigned long long)q.binary_size, data_len, json_len);
        if (ok && !q.binary_in && data_len > 0)
            ok = bad(r, NULL,
                     "the body holds %zu bytes after its JSON header, but no "
                     "input has parameters.binary_data_size",
                     data_len);
    } else {
        /* Triton's raw binary request: one FP32 input, all outputs
         * binary; the batch follows from the size. A body declared JSON
         * is not raw data. */
        uint64_t row = m.features * sizeof(float);
        const char *ct = http_req_header(r, "Content-Type");
        memset(&q, 0, sizeof q);
        q.dt = SERVE_DT_FP32;
        q.binary_in = 1;
        q.out.binary = 1;
        q.batch = row ? data_len / row : 0;
        if (ct && strncasecmp(ct, "application/octet-stream", 24) != 0)
            ok = bad(r, NULL,
                     "Inference-Header-Content-Length: 0 makes the body raw "
                     "FP32 data; send it as application/octet-stream (or "
                     "give the length of its JSON header)");
        else if (!row || data_len % row || q.batch < 1 ||
                 q.batch > SERVE_MAX_EXAMPLES)
            ok = bad(r, NULL,
                     "a raw binary request (Inference-Header-Content-Length: "
                     "0) is FP32 data of 1 to %d examples of %llu values "
                     "(%llu bytes each); got %zu bytes",
                     SERVE_MAX_EXAMPLES, (unsigned long long)m.features,
                     (unsigned long long)row, data_len);
        q.n = q.batch * m.features;
    }
    infer_times t = {0};
    float *x = NULL, *y = NULL;
    if (ok) {
        /* The values' text or bytes must be there before their room is
         * taken: a JSON value is at least 2 bytes ("1,"). */
        uint64_t most = q.binary_in
                            ? data_len / (q.cols ? 4 : serve_dtype_size(q.dt))
                            : (ib.data.len + 1) / 2;
        uint64_t room = q.n < most ? q.n : most;
        /* cells become the model's features: a BYTES element is at least
         * its 4-byte length, a JSON one 2 bytes ("", is 3) */
        if (q.cols && most < q.n)
            ok = bad(r,
                     q.binary_in ? "inputs[0].parameters.binary_data_size"
                                 : "inputs[0].data",
                     "input \"" INPUT_NAME "\": the data cannot hold the "
                     "%llu cells the shape says",
                     (unsigned long long)q.n);
        if (q.cols)
            room = q.batch * m.features;
        x = ok ? malloc(room * sizeof *x + 1) : NULL;
        y = ok ? malloc(q.batch * m.outputs * sizeof *y + 1) : NULL;
        if (ok && (!x || !y)) {
            http_reply_error(r, TY_ENOMEM, NULL);
            ok = 0;
        }
    }
    if (ok) {
        uint64_t t1 = kserve_now_ns();
        if (q.cols)
            s = serve_tab_from_bytes(q.cols, q.binary_in, data, data_len,
                                     ib.data, q.batch, m.features, x, &err);
        else
            s = q.binary_in ? serve_tensor_from_binary(q.dt, data, data_len,
                                                       q.n, INPUT_NAME, x, &err)
                            : serve_tensor_from_json(q.dt, ib.data, q.n,
                                                     INPUT_NAME, x, &err);
        t.input_ns = kserve_now_ns() - t1;
        /* The data was only skimmed: what the checking scan finds wrong
         * comes first. */
        if (s != TY_OK && !q.binary_in &&
            serve_infer_check(text, json_len, &err) != TY_OK)
            ok = bad(r, err.field[0] ? err.field : NULL, "%s", err.msg);
        else if (s == TY_EINVAL || s == TY_EFORMAT)
            ok = bad(r,
                     q.binary_in ? "inputs[0].parameters.binary_data_size"
                                 : "inputs[0].data",
                     "%s", err.msg);
        else if (s != TY_OK)
            ok = (http_reply_error(r, s, &err), 0);
    }
    if (ok) {
        uint64_t t1 = kserve_now_ns();
        s = serve_model_run(&m, x, q.batch, y, &err);
        t.infer_ns = kserve_now_ns() - t1;
        if (s == TY_EUNAVAILABLE)
            api_retry_after(r, 5);
        if (s != TY_OK)
            ok = (http_reply_error(r, s, &err), 0);
    }
    if (ok) {
        uint64_t t1 = kserve_now_ns();
        infer_reply(r, &m, &q, y);
        t.output_ns = kserve_now_ns() - t1;
        t.batch = q.batch;
    }
    kserve_stats_record(api_tenant(r), m.id, ok, kserve_now_ns() - start, &t);
    if (ok)
        http_req_time(r, "kserve_infer", opm_now() - t0);
    free(x);
    free(y);
    serve_model_close(&m);
    serve_infer_body_free(&ib);
}

void api_kserve_infer(api_ctx *app, http_req *r)
{
    api_predict_dispatch(app, r, 1, infer_run);
}
