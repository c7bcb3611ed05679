/*
 * inference.c - the predict endpoints: POST /v1/models/{id}/predict and
 * /evaluate, and the KServe v2 inference protocol under /v2 for the same
 * models. Each parses its protocol's request and renders the reply; the
 * work (model cache, decoding, batching, outputs) is the predict service's
 * (serve/predict.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "common/jsonutil.h"
#include "common/opmetrics.h"
#include "serve/predict.h"

static serve_env env_of(api_ctx *app)
{
    return (serve_env){app->store, app->models, app->data_dir};
}

/* The predict service's answer: 200 with the reply, or its error. */
static void reply(http_req *r, ty_status s, const ty_err *err, json_t *doc,
                  const char *endpoint, double t0)
{
    if (s != TY_OK) {
        http_reply_error(r, s, err);
        return;
    }
    opm_predict(endpoint, opm_now() - t0);
    http_reply_json(r, 200, doc);
}

/* A raw JSON body's text, or NULL after answering as api_json_object does
 * for a missing body. */
static const char *raw_body(http_req *r, size_t *len)
{
    const char *text = http_req_body(r, len);
    if (!text)
        http_reply_problem(r, 400, NULL,
                           "this endpoint needs a JSON object as the request "
                           "body (Content-Type: application/json)");
    return text;
}

/* Predicts whose body is over this many bytes run on a work thread
 * (http_req_offload), so a big one never holds the libmicrohttpd thread
 * that serves other connections. Smaller ones (a few examples: tens of
 * microseconds of work) run where they are: handing over costs about as
 * much as they do. */
#define PREDICT_INLINE_MAX (64 * 1024)

/* The body is read by the predict service straight into floats
 * (serve/decode.h): no jansson tree of the numbers. */
static void predict_run(api_ctx *app, http_req *r)
{
    double t0 = opm_now();
    size_t len;
    const char *text = raw_body(r, &len);
    if (!text)
        return;
    ty_err err = {0};
    serve_predict_body b;
    ty_status s = serve_predict_scan(text, len, &b, &err);
    if (s == TY_EFORMAT) {
        http_reply_problem(r, 400, NULL, "%s", err.msg);
        return;
    }
    serve_env env = env_of(app);
    serve_buf out = {0};
    if (s == TY_OK)
        s = serve_predict(&env, api_tenant(r), http_req_param(r, 0), &b, &out,
                          &err);
    if (s == TY_EFORMAT) {
        serve_buf_free(&out);
        http_reply_problem(r, 400, NULL, "%s", err.msg);
        return;
    }
    if (s != TY_OK) {
        serve_buf_free(&out);
        http_reply_error(r, s, &err);
        return;
    }
    opm_predict("predict", opm_now() - t0);
    size_t n;
    char *text_out = serve_buf_take(&out, &n);
    http_reply_buffer(r, 200, "application/json", text_out, n);
}

void api_models_predict(api_ctx *app, http_req *r)
{
    size_t len = 0;
    if (http_req_body(r, &len) && len > PREDICT_INLINE_MAX &&
        http_req_offload(r, predict_run))
        return;
    predict_run(app, r);
}

/* An evaluation reads a whole dataset: always on a work thread. */
static void evaluate_run(api_ctx *app, http_req *r)
{
    double t0 = opm_now();
    const json_t *body = api_json_object(r);
    if (!body)
        return;
    ty_err err = {0};
    json_t *doc = NULL;
    const char *ds_id = NULL;
    static const char *const keys[] = {"dataset", NULL};
    ty_status s = tyjson_check_keys(body, keys, "", &err);
    if (s == TY_OK)
        s = tyjson_get_string(body, "dataset", "", 1, TY_ID_MAX, NULL, &ds_id,
                              &err);
    serve_env env = env_of(app);
    if (s == TY_OK)
        s = serve_evaluate(&env, api_tenant(r), http_req_param(r, 0), ds_id,
                           &doc, &err);
    reply(r, s, &err, doc, "evaluate", t0);
}

void api_models_evaluate(api_ctx *app, http_req *r)
{
    if (!http_req_offload(r, evaluate_run))
        evaluate_run(app, r);
}

/* ---- KServe v2 ---- */

void api_kserve_live(api_ctx *app, http_req *r)
{
    http_reply_json(r, 200, json_pack("{s:b}", "live", 1));
}

void api_kserve_ready(api_ctx *app, http_req *r)
{
    ty_err err;
    int ok = store_ping(app->store, &err) == TY_OK;
    http_reply_json(r, ok ? 200 : 503, json_pack("{s:b}", "ready", ok));
}

void api_kserve_model(api_ctx *app, http_req *r)
{
    json_t *doc;
    ty_err err = {0};
    const char *id = http_req_param(r, 0);
    ty_status s =
        store_model_get(app->store, api_tenant(r), id, &doc, NULL, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    json_t *in_shape = json_array();
    json_array_append_new(in_shape, json_integer(-1));
    json_array_extend(in_shape, json_object_get(doc, "input_shape"));
    json_t *out_shape =
        json_pack("[i, O]", -1, json_object_get(doc, "num_outputs"));
    json_t *meta = json_pack(
        "{s:s, s:[s], s:s, s:[{s:s, s:s, s:o}], s:[{s:s, s:s, s:o}]}", "name",
        id, "versions", "1", "platform", "trainyard", "inputs", "name", "input",
        "datatype", "FP32", "shape", in_shape, "outputs", "name", "output",
        "datatype", "FP32", "shape", out_shape);
    json_decref(doc);
    http_reply_json(r, 200, meta);
}

void api_kserve_model_ready(api_ctx *app, http_req *r)
{
    json_t *doc;
    ty_err err = {0};
    const char *id = http_req_param(r, 0);
    ty_status s =
        store_model_get(app->store, api_tenant(r), id, &doc, NULL, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    json_decref(doc);
    http_reply_json(r, 200, json_pack("{s:s, s:b}", "name", id, "ready", 1));
}

static int numeric_datatype(const char *t)
{
    static const char *const ok[] = {"FP32",   "FP64",   "FP16",  "INT8",
                                     "INT16",  "INT32",  "INT64", "UINT8",
                                     "UINT16", "UINT32", "UINT64"};
    for (size_t i = 0; i < TY_ARRAY_LEN(ok); i++)
        if (!strcmp(t, ok[i]))
            return 1;
    return 0;
}

void api_kserve_infer(api_ctx *app, http_req *r)
{
    double t0 = opm_now();
    size_t len;
    const char *text = raw_body(r, &len);
    if (!text)
        return;
    ty_err err = {0};
    /* The body less inputs[0].data, which stays text until decoded. */
    serve_infer_body ib;
    ty_status s = serve_infer_scan(text, len, &ib, &err);
    if (s == TY_EFORMAT) {
        http_reply_problem(r, 400, NULL, "%s", err.msg);
        return;
    }
    if (s != TY_OK) {
        reply(r, s, &err, NULL, "kserve_infer", t0);
        return;
    }
    const json_t *body = ib.doc;
    json_t *output = NULL, *device = NULL;
    const char *id = http_req_param(r, 0);
    static const char *const keys[] = {"id", "parameters", "inputs", "outputs",
                                       NULL};
    static const char *const in_keys[] = {"name", "shape",      "datatype",
                                          "data", "parameters", NULL};
    s = tyjson_check_keys(body, keys, "", &err);
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
        json_array_foreach (outs, i, o) {
            const char *nm = json_string_value(json_object_get(o, "name"));
            if (s == TY_OK && (!nm || strcmp(nm, "output") != 0))
                s = ty_fail(&err, TY_EINVAL, "outputs",
                            "this model has one output, named \"output\"");
        }
    }
    const json_t *req_id = json_object_get(body, "id");
    if (s == TY_OK && req_id && !json_is_string(req_id))
        s = ty_fail(&err, TY_EINVAL, "id", "id must be a string");
    serve_env env = env_of(app);
    if (s == TY_OK)
        s = serve_infer_tensor(&env, api_tenant(r), id,
                               json_object_get(in, "shape"), ib.data,
                               "inputs[0]", &output, &device, &err);
    json_t *res = NULL;
    if (s == TY_OK) {
        res = json_pack("{s:s, s:s}", "model_name", id, "model_version", "1");
        if (req_id)
            json_object_set_new(res, "id",
                                json_string(json_string_value(req_id)));
        json_object_set_new(res, "parameters",
                            json_pack("{s:o}", "device", device));
        json_object_set_new(res, "outputs", json_pack("[o]", output));
    }
    serve_infer_body_free(&ib);
    reply(r, s, &err, res, "kserve_infer", t0);
}
