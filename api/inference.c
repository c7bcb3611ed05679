/*
 * inference.c - predictions: POST /v1/models/{id}/predict and /evaluate, and
 * the KServe v2 inference protocol under /v2 for the same models.
 *
 * Inputs are in the units of the uploaded data (pixel values 0-255, raw CSV
 * features); the model applies its own stored preprocessing. Loaded models
 * stay in the model cache.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "common/jsonutil.h"
#include "models/data/dataset.h"
#include "jobs/placement.h"
#include "store/blob.h"
#include "serve/modelcache.h"
#include "common/opmetrics.h"

#define MAX_PREDICT_EXAMPLES 100000
#define MAX_NESTING 8

/* Looks up the tenant's model and takes it from the cache. */
static ty_status open_model(ty_app *app, http_req *r, const char *id,
                            model_entry **entry, ty_err *err)
{
    char sha[65], path[PATH_MAX];
    json_t *doc = NULL;
    ty_status s = store_model_get(app->store, api_tenant(r), id, &doc, sha, err);
    if (s != TY_OK)
        return s;
    blob_path(app->cfg.data_dir, sha, path, sizeof path);
    /* Served where it was trained when this server has that device
     * (trained_on: "cuda:N"; absent for imports), unless --serve-device
     * says otherwise. */
    s = model_cache_get(app->models, id, path,
                        json_string_value(json_object_get(doc, "trained_on")),
                        entry, err);
    json_decref(doc);
    return s;
}

/* "cpu" or "cuda:N": where the entry's predictions run. */
static json_t *device_of(const model_entry *e)
{
    char label[16];
    place_device_label(model_entry_device(e), label, sizeof label);
    return json_string(label);
}

static void shape_text(const json_t *shape, char *out, size_t n)
{
    char *t = json_dumps(shape, JSON_COMPACT);
    snprintf(out, n, "%s", t ? t : "?");
    free(t);
}

/* Appends the numbers of v (a number or nested arrays of numbers) to x,
 * counting into *count (which may exceed cap: the caller then reports the
 * size mismatch). */
static ty_status flatten(const json_t *v, float *x, uint64_t cap,
                         uint64_t *count, const char *path, int depth,
                         ty_err *err)
{
    if (json_is_number(v)) {
        if (*count < cap)
            x[*count] = (float)json_number_value(v);
        (*count)++;
        return TY_OK;
    }
    if (json_is_true(v) || json_is_false(v) || !json_is_array(v))
        return ty_fail(err, TY_EINVAL, path, "%s must hold only numbers", path);
    if (depth >= MAX_NESTING)
        return ty_fail(err, TY_EINVAL, path, "%s is nested too deeply", path);
    size_t i;
    json_t *c;
    json_array_foreach(v, i, c) {
        ty_status s = flatten(c, x, cap, count, path, depth + 1, err);
        if (s != TY_OK)
            return s;
        if (*count > cap)
            return TY_OK; /* too many; reported by the caller */
    }
    return TY_OK;
}

/* Runs n examples of x through the model into out (n * outputs). */
static ty_status run_batches(model_entry *e, const float *x, uint32_t n,
                             float *out, ty_err *err)
{
    const nn_net *net = model_entry_net(e);
    uint64_t f = nn_net_input_features(net);
    uint32_t k = nn_net_num_outputs(net);
    model_entry_device_lock(e);
    nn_workspace *ws = model_entry_workspace_get(e);
    if (!ws) {
        model_entry_device_unlock(e);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    ty_status s = TY_OK;
    for (uint32_t i = 0; i < n && s == TY_OK; i += MODEL_CACHE_BATCH) {
        uint32_t b = n - i < MODEL_CACHE_BATCH ? n - i : MODEL_CACHE_BATCH;
        s = nn_net_predict(net, ws, x + (uint64_t)i * f, b,
                           out + (uint64_t)i * k, err);
    }
    model_entry_workspace_put(e, ws);
    model_entry_device_unlock(e);
    return s;
}

/* The "predictions" array: class labels (argmax) or values. */
static json_t *predictions(const nn_net *net, const float *out, uint32_t n)
{
    const json_t *meta = nn_net_meta(net);
    const json_t *classes = json_object_get(meta, "classes");
    uint32_t k = nn_net_num_outputs(net);
    json_t *p = json_array();
    for (uint32_t i = 0; i < n; i++) {
        const float *row = out + (uint64_t)i * k;
        if (nn_net_task(net) == TY_TASK_CLASSIFICATION) {
            uint32_t best = 0;
            for (uint32_t j = 1; j < k; j++)
                if (row[j] > row[best])
                    best = j;
            json_t *label = json_array_get(classes, best);
            json_array_append_new(p, label ? json_incref(label)
                                           : json_integer(best));
        } else if (k == 1) {
            json_array_append_new(p, json_real(row[0]));
        } else {
            json_t *v = json_array();
            for (uint32_t j = 0; j < k; j++)
                json_array_append_new(v, json_real(row[j]));
            json_array_append_new(p, v);
        }
    }
    return p;
}

void api_models_predict(ty_app *app, http_req *r)
{
    double t0 = opm_now();
    const json_t *body = api_json_object(r);
    if (!body)
        return;
    ty_err err = {0};
    model_entry *e = NULL;
    float *x = NULL, *out = NULL;
    const char *id = http_req_param(r, 0);
    static const char *const keys[] = {"inputs", NULL};
    ty_status s = tyjson_check_keys(body, keys, "", &err);
    const json_t *inputs = json_object_get(body, "inputs");
    size_t n = json_array_size(inputs);
    if (s == TY_OK && (!json_is_array(inputs) || n == 0 ||
                       n > MAX_PREDICT_EXAMPLES))
        s = ty_fail(&err, TY_EINVAL, "inputs",
                    "inputs must be an array of 1 to %d examples, each a list "
                    "of numbers (flat or nested in the model's input shape)",
                    MAX_PREDICT_EXAMPLES);
    if (s != TY_OK || (s = open_model(app, r, id, &e, &err)) != TY_OK)
        goto done;
    const nn_net *net = model_entry_net(e);
    uint64_t f = nn_net_input_features(net);
    uint32_t k = nn_net_num_outputs(net);
    x = malloc(n * f * sizeof *x);
    out = malloc(n * k * sizeof *out);
    if (!x || !out) {
        s = ty_fail(&err, TY_ENOMEM, NULL, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        char path[64];
        uint64_t count = 0;
        snprintf(path, sizeof path, "inputs[%zu]", i);
        const json_t *ex = json_array_get(inputs, i);
        if (!json_is_array(ex)) {
            s = ty_fail(&err, TY_EINVAL, path, "%s must be a list of numbers",
                        path);
            goto done;
        }
        if ((s = flatten(ex, x + i * f, f, &count, path, 0, &err)) != TY_OK)
            goto done;
        if (count != f) {
            char shape[128];
            shape_text(json_object_get(nn_net_meta(net), "input_shape"), shape,
                       sizeof shape);
            s = ty_fail(&err, TY_EINVAL, path,
                        "%s has %s%llu values; this model takes %llu (input "
                        "shape %s)",
                        path, count > f ? "more than " : "",
                        (unsigned long long)(count > f ? f : count),
                        (unsigned long long)f, shape);
            goto done;
        }
    }
    if ((s = run_batches(e, x, (uint32_t)n, out, &err)) != TY_OK)
        goto done;
    json_t *outputs = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *row = json_array();
        for (uint32_t j = 0; j < k; j++)
            json_array_append_new(row, json_real(out[i * k + j]));
        json_array_append_new(outputs, row);
    }
    opm_predict("predict", opm_now() - t0);
    http_reply_json(r, 200,
                    json_pack("{s:s, s:o, s:o, s:o}", "model", id, "outputs",
                              outputs, "predictions",
                              predictions(net, out, (uint32_t)n), "device",
                              device_of(e)));
done:
    if (s != TY_OK)
        http_reply_error(r, s, &err);
    free(x);
    free(out);
    if (e)
        model_cache_release(app->models, e);
}

void api_models_evaluate(ty_app *app, http_req *r)
{
    double t0 = opm_now();
    const json_t *body = api_json_object(r);
    if (!body)
        return;
    ty_err err = {0};
    model_entry *e = NULL;
    ty_dataset ds = {0};
    json_t *ds_doc = NULL;
    int32_t *map = NULL;
    const char *id = http_req_param(r, 0), *ds_id = NULL;
    static const char *const keys[] = {"dataset", NULL};
    char sha[65], path[PATH_MAX];
    ty_status s = tyjson_check_keys(body, keys, "", &err);
    if (s == TY_OK)
        s = tyjson_get_string(body, "dataset", "", 1, TY_ID_MAX, NULL, &ds_id,
                              &err);
    if (s != TY_OK || (s = open_model(app, r, id, &e, &err)) != TY_OK)
        goto done;
    s = store_dataset_get(app->store, api_tenant(r), ds_id, &ds_doc, sha, &err);
    if (s == TY_ENOTFOUND)
        s = ty_fail(&err, TY_EINVAL, "dataset", "dataset %s not found", ds_id);
    if (s != TY_OK)
        goto done;
    blob_path(app->cfg.data_dir, sha, path, sizeof path);
    if ((s = ty_dataset_open(path, &ds, &err)) != TY_OK)
        goto done;
    const nn_net *net = model_entry_net(e);
    if (ds.task != nn_net_task(net) || ds.features != nn_net_input_features(net)) {
        char a[128], b[128];
        shape_text(json_object_get(ds.meta, "input_shape"), a, sizeof a);
        shape_text(json_object_get(nn_net_meta(net), "input_shape"), b, sizeof b);
        s = ty_fail(&err, TY_EINVAL, "dataset",
                    "dataset %s (%s, input shape %s) does not fit model %s "
                    "(%s, input shape %s)",
                    ds_id, ty_task_name(ds.task), a, id,
                    ty_task_name(nn_net_task(net)), b);
        goto done;
    }
    if (ds.task == TY_TASK_CLASSIFICATION) {
        const json_t *dc = json_object_get(ds.meta, "classes");
        map = calloc(json_array_size(dc) + 1, sizeof *map);
        if (!map) {
            s = ty_fail(&err, TY_ENOMEM, NULL, "out of memory");
            goto done;
        }
        if ((s = ty_dataset_class_map(dc, json_object_get(nn_net_meta(net),
                                                          "classes"),
                                      map, &err)) != TY_OK) {
            snprintf(err.field, sizeof err.field, "dataset");
            goto done;
        }
    }
    double loss = 0, accuracy = -1;
    model_entry_device_lock(e);
    s = nn_net_evaluate(net, &ds, map, &loss, &accuracy, &err);
    model_entry_device_unlock(e);
    if (s != TY_OK)
        goto done;
    json_t *res = json_pack("{s:s, s:s, s:I, s:f}", "model", id, "dataset",
                            ds_id, "num_examples", (json_int_t)ds.num_examples,
                            "loss", loss);
    json_object_set_new(res, "accuracy",
                        accuracy >= 0 ? json_real(accuracy) : json_null());
    json_object_set_new(res, "device", device_of(e));
    opm_predict("evaluate", opm_now() - t0);
    http_reply_json(r, 200, res);
done:
    if (s != TY_OK)
        http_reply_error(r, s, &err);
    free(map);
    ty_dataset_close(&ds);
    json_decref(ds_doc);
    if (e)
        model_cache_release(app->models, e);
}

/* ---- KServe v2 ---- */

void api_kserve_live(ty_app *app, http_req *r)
{
    http_reply_json(r, 200, json_pack("{s:b}", "live", 1));
}

void api_kserve_ready(ty_app *app, http_req *r)
{
    ty_err err;
    int ok = store_ping(app->store, &err) == TY_OK;
    http_reply_json(r, ok ? 200 : 503, json_pack("{s:b}", "ready", ok));
}

void api_kserve_model(ty_app *app, http_req *r)
{
    json_t *doc;
    ty_err err = {0};
    const char *id = http_req_param(r, 0);
    ty_status s = store_model_get(app->store, api_tenant(r), id, &doc, NULL, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    json_t *in_shape = json_array();
    json_array_append_new(in_shape, json_integer(-1));
    json_array_extend(in_shape, json_object_get(doc, "input_shape"));
    json_t *out_shape = json_pack("[i, O]", -1, json_object_get(doc, "num_outputs"));
    json_t *meta = json_pack(
        "{s:s, s:[s], s:s, s:[{s:s, s:s, s:o}], s:[{s:s, s:s, s:o}]}", "name",
        id, "versions", "1", "platform", "trainyard", "inputs", "name", "input",
        "datatype", "FP32", "shape", in_shape, "outputs", "name", "output",
        "datatype", "FP32", "shape", out_shape);
    json_decref(doc);
    http_reply_json(r, 200, meta);
}

void api_kserve_model_ready(ty_app *app, http_req *r)
{
    json_t *doc;
    ty_err err = {0};
    const char *id = http_req_param(r, 0);
    ty_status s = store_model_get(app->store, api_tenant(r), id, &doc, NULL, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    json_decref(doc);
    http_reply_json(r, 200, json_pack("{s:s, s:b}", "name", id, "ready", 1));
}

static int numeric_datatype(const char *t)
{
    static const char *const ok[] = {"FP32", "FP64", "FP16", "INT8", "INT16",
                                     "INT32", "INT64", "UINT8", "UINT16",
                                     "UINT32", "UINT64"};
    for (size_t i = 0; i < TY_ARRAY_LEN(ok); i++)
        if (!strcmp(t, ok[i]))
            return 1;
    return 0;
}

void api_kserve_infer(ty_app *app, http_req *r)
{
    double t0 = opm_now();
    const json_t *body = api_json_object(r);
    if (!body)
        return;
    ty_err err = {0};
    model_entry *e = NULL;
    float *x = NULL, *out = NULL;
    const char *id = http_req_param(r, 0);
    static const char *const keys[] = {"id", "parameters", "inputs", "outputs",
                                       NULL};
    static const char *const in_keys[] = {"name", "shape", "datatype", "data",
                                          "parameters", NULL};
    ty_status s = tyjson_check_keys(body, keys, "", &err);
    const json_t *inputs = json_object_get(body, "inputs");
    const json_t *in = json_array_get(inputs, 0);
    const char *dtype = NULL, *in_name = NULL;
    if (s == TY_OK && (!json_is_array(inputs) || json_array_size(inputs) != 1))
        s = ty_fail(&err, TY_EINVAL, "inputs",
                    "inputs must hold exactly one tensor");
    if (s == TY_OK)
        s = tyjson_check_keys(in, in_keys, "inputs[0]", &err);
    if (s == TY_OK)
        s = tyjson_get_string(in, "name", "inputs[0]", 1, 256, NULL, &in_name,
                              &err);
    if (s == TY_OK)
        s = tyjson_get_string(in, "datatype", "inputs[0]", 1, 16, NULL, &dtype,
                              &err);
    if (s == TY_OK && !numeric_datatype(dtype))
        s = ty_fail(&err, TY_EINVAL, "inputs[0].datatype",
                    "datatype %s is not supported; send FP32 (or another "
                    "numeric type)",
                    dtype);
    const json_t *outs = json_object_get(body, "outputs");
    if (s == TY_OK && outs) {
        size_t i;
        json_t *o;
        if (!json_is_array(outs))
            s = ty_fail(&err, TY_EINVAL, "outputs", "outputs must be an array");
        json_array_foreach(outs, i, o) {
            const char *nm = json_string_value(json_object_get(o, "name"));
            if (s == TY_OK && (!nm || strcmp(nm, "output") != 0))
                s = ty_fail(&err, TY_EINVAL, "outputs",
                            "this model has one output, named \"output\"");
        }
    }
    const json_t *req_id = json_object_get(body, "id");
    if (s == TY_OK && req_id && !json_is_string(req_id))
        s = ty_fail(&err, TY_EINVAL, "id", "id must be a string");
    if (s != TY_OK || (s = open_model(app, r, id, &e, &err)) != TY_OK)
        goto done;
    const nn_net *net = model_entry_net(e);
    uint64_t f = nn_net_input_features(net);
    uint32_t k = nn_net_num_outputs(net);
    const json_t *shape = json_object_get(in, "shape");
    size_t nd = json_array_size(shape);
    uint64_t total = 1;
    int shape_ok = json_is_array(shape) && nd >= 1;
    for (size_t i = 0; i < nd && shape_ok; i++) {
        json_t *d = json_array_get(shape, i);
        if (!json_is_integer(d) || json_integer_value(d) < 1 ||
            json_integer_value(d) > MAX_PREDICT_EXAMPLES * 100000LL)
            shape_ok = 0;
        else
            total *= (uint64_t)json_integer_value(d);
        if (total > (uint64_t)MAX_PREDICT_EXAMPLES * f)
            shape_ok = 0;
    }
    uint64_t batch = shape_ok ? (uint64_t)json_integer_value(json_array_get(shape, 0)) : 0;
    if (!shape_ok || batch * f != total) {
        char want[128];
        shape_text(json_object_get(nn_net_meta(net), "input_shape"), want,
                   sizeof want);
        s = ty_fail(&err, TY_EINVAL, "inputs[0].shape",
                    "shape must be [batch, ...] with batch 1 to %d and the "
                    "rest holding %llu values (input shape %s)",
                    MAX_PREDICT_EXAMPLES, (unsigned long long)f, want);
        goto done;
    }
    x = malloc(total * sizeof *x);
    out = malloc(batch * k * sizeof *out);
    if (!x || !out) {
        s = ty_fail(&err, TY_ENOMEM, NULL, "out of memory");
        goto done;
    }
    uint64_t count = 0;
    const json_t *data = json_object_get(in, "data");
    if (!json_is_array(data)) {
        s = ty_fail(&err, TY_EINVAL, "inputs[0].data",
                    "data must be an array of numbers");
        goto done;
    }
    if ((s = flatten(data, x, total, &count, "inputs[0].data", 0, &err)) !=
        TY_OK)
        goto done;
    if (count != total) {
        s = ty_fail(&err, TY_EINVAL, "inputs[0].data",
                    "data holds %s%llu values; shape says %llu",
                    count > total ? "more than " : "",
                    (unsigned long long)(count > total ? total : count),
                    (unsigned long long)total);
        goto done;
    }
    if ((s = run_batches(e, x, (uint32_t)batch, out, &err)) != TY_OK)
        goto done;
    json_t *flat = json_array();
    for (uint64_t i = 0; i < batch * k; i++)
        json_array_append_new(flat, json_real(out[i]));
    json_t *res = json_pack("{s:s, s:s}", "model_name", id, "model_version", "1");
    if (req_id)
        json_object_set_new(res, "id", json_string(json_string_value(req_id)));
    json_object_set_new(res, "parameters",
                        json_pack("{s:o}", "device", device_of(e)));
    json_object_set_new(res, "outputs",
                        json_pack("[{s:s, s:s, s:[I, i], s:o}]", "name",
                                  "output", "datatype", "FP32", "shape",
                                  (json_int_t)batch, (int)k, "data", flat));
    opm_predict("kserve_infer", opm_now() - t0);
    http_reply_json(r, 200, res);
done:
    if (s != TY_OK)
        http_reply_error(r, s, &err);
    free(x);
    free(out);
    if (e)
        model_cache_release(app->models, e);
}
