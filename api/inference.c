/*
 * inference.c - the predict endpoints: POST /v1/models/{id}/predict and
 * /evaluate (the KServe v2 protocol for the same models is kserve.c). Each
 * parses its protocol's request and renders the reply; the work (model
 * cache, decoding, batching, outputs) is the predict service's
 * (serve/predict.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "common/jsonutil.h"
#include "common/opmetrics.h"
#include "serve/predict.h"

serve_env api_serve_env(api_ctx *app)
{
    return (serve_env){app->store, app->models, app->data_dir, app->deploy};
}

/* The predict service's answer: 200 with the reply, or its error. */
static void reply(http_req *r, ty_status s, const ty_err *err, json_t *doc,
                  const char *endpoint, double t0)
{
    if (s != TY_OK) {
        http_reply_error(r, s, err);
        return;
    }
    http_req_time(r, endpoint, opm_now() - t0);
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
    serve_env env = api_serve_env(app);
    serve_buf out = {0};
    double retry_after = 0;
    if (s == TY_OK)
        s = serve_predict(&env, api_tenant(r), http_req_param(r, 0), &b, &out,
                          &retry_after, &err);
    if (s == TY_ELIMIT)
        api_retry_after(r, retry_after);
    if (s == TY_EUNAVAILABLE)
        api_retry_after(r, 5);
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
    http_req_time(r, "predict", opm_now() - t0);
    serve_buf_str(&out, "\n"); /* JSON replies end with a newline */
    size_t n;
    char *text_out = serve_buf_take(&out, &n);
    http_reply_buffer(r, 200, "application/json", text_out, n);
}

/* Bodies over this run on a work thread (see api_predict_dispatch). */
#define PREDICT_INLINE_MAX (64 * 1024)

/* Whether ref has the shape of a model id ("mdl_" and 20 characters). */
static int looks_like_model_id(const char *ref)
{
    return !strncmp(ref, "mdl_", 4) && strlen(ref) == 24;
}

/* Whether a deployment serves the model ref names. A /v1 path names a
 * model by id or by name (the newest of that name): a deployment is known
 * by its model's id, so a name costs a store lookup here; an id, the
 * common case, none. */
static int model_deployed(api_ctx *app, http_req *r, const char *ref,
                          int by_name)
{
    serve_env env = api_serve_env(app);
    if (serve_model_deployed(&env, api_tenant(r), ref, by_name))
        return 1;
    char id[TY_ID_MAX];
    ty_err err = {0};
    return !by_name && !looks_like_model_id(ref) &&
           store_ref_resolve(app->store, STORE_REF_MODEL, api_tenant(r), ref,
                             id, &err) == TY_OK &&
           serve_model_deployed(&env, api_tenant(r), id, 0);
}

void api_predict_dispatch(api_ctx *app, http_req *r, int by_name,
                          http_offload_fn fn)
{
    size_t len = 0;
    if (model_deployed(app, r, http_req_param(r, 0), by_name)) {
        if (http_req_offload_wait(r, fn))
            return;
    } else if (http_req_body(r, &len) && len > PREDICT_INLINE_MAX &&
               http_req_offload(r, fn)) {
        return;
    }
    fn(app, r);
}

void api_models_predict(api_ctx *app, http_req *r)
{
    api_predict_dispatch(app, r, 0, predict_run);
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
    if (s == TY_OK) /* an id or a name: serve_evaluate resolves both */
        s = tyjson_get_string(body, "dataset", "", 1, STORE_NAME_MAX, NULL,
                              &ds_id, &err);
    serve_env env = api_serve_env(app);
    double retry_after = 0;
    if (s == TY_OK)
        s = serve_evaluate(&env, api_tenant(r), http_req_param(r, 0), ds_id,
                           &doc, &retry_after, &err);
    if (s == TY_ELIMIT)
        api_retry_after(r, retry_after);
    reply(r, s, &err, doc, "evaluate", t0);
}

void api_models_evaluate(api_ctx *app, http_req *r)
{
    if (!http_req_offload(r, evaluate_run))
        evaluate_run(app, r);
}
