/*
 * generate.c - POST /v2/models/{name}/generate: text from a language
 * model, as Triton's generate extension (serve/generate.h). On a work
 * thread: a generation runs as long as its tokens take.
 */
#include "api/api.h"
#include "common/opmetrics.h"
#include "serve/generate.h"

static void generate_run(api_ctx *app, http_req *r)
{
    double t0 = opm_now();
    const json_t *body = api_json_object(r);
    if (!body)
        return;
    ty_err err = {0};
    json_t *doc = NULL;
    serve_env env = api_serve_env(app);
    ty_status s = serve_generate(&env, api_tenant(r), http_req_param(r, 0),
                                 body, &doc, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    http_req_time(r, "generate", opm_now() - t0);
    http_reply_json(r, 200, doc);
}

void api_kserve_generate(api_ctx *app, http_req *r)
{
    if (!http_req_offload(r, generate_run))
        generate_run(app, r);
}
