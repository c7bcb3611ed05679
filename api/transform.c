/*
 * transform.c - POST /v1/models/{id}/transform: what the network sees of
 * raw inputs (the model's stored encoding and preprocessing applied), for
 * people debugging their preprocessing. Runs on a work thread: it opens a
 * model, as evaluate does.
 */
#include "api/api.h"
#include "common/opmetrics.h"
#include "serve/transform.h"

static void transform_run(api_ctx *app, http_req *r)
{
    double t0 = opm_now();
    const json_t *body = api_json_object(r);
    if (!body)
        return;
    ty_err err = {0};
    json_t *doc = NULL;
    serve_env env = api_serve_env(app);
    ty_status s = serve_transform(&env, api_tenant(r), http_req_param(r, 0),
                                  body, &doc, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    http_req_time(r, "transform", opm_now() - t0);
    http_reply_json(r, 200, doc);
}

void api_models_transform(api_ctx *app, http_req *r)
{
    if (!http_req_offload(r, transform_run))
        transform_run(app, r);
}
