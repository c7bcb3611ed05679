/*
 * tokenize.c - POST /v1/models/{id}/tokenize and /detokenize: a language
 * model's tokenizer both ways (serve/lm.h). On a work thread: they open a
 * model, as transform does.
 */
#include "api/api.h"
#include "common/opmetrics.h"
#include "serve/lm.h"

static void lm_text_run(api_ctx *app, http_req *r, int detokenize)
{
    double t0 = opm_now();
    const json_t *body = api_json_object(r);
    if (!body)
        return;
    ty_err err = {0};
    json_t *doc = NULL;
    serve_env env = api_serve_env(app);
    ty_status s =
        detokenize ? serve_lm_detokenize(&env, api_tenant(r),
                                         http_req_param(r, 0), body, &doc, &err)
                   : serve_lm_tokenize(&env, api_tenant(r),
                                       http_req_param(r, 0), body, &doc, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    http_req_time(r, detokenize ? "detokenize" : "tokenize", opm_now() - t0);
    http_reply_json(r, 200, doc);
}

static void tokenize_run(api_ctx *app, http_req *r) { lm_text_run(app, r, 0); }
static void detokenize_run(api_ctx *app, http_req *r)
{
    lm_text_run(app, r, 1);
}

void api_models_tokenize(api_ctx *app, http_req *r)
{
    if (!http_req_offload(r, tokenize_run))
        tokenize_run(app, r);
}

void api_models_detokenize(api_ctx *app, http_req *r)
{
    if (!http_req_offload(r, detokenize_run))
        detokenize_run(app, r);
}
