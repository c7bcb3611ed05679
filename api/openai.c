/*
 * openai.c - OpenAI's completions API (serve/openai.h): POST
 * /openai/v1/completions, plain or streamed (chunks as "data: {...}",
 * then "data: [DONE]", as OpenAI's servers), GET /openai/v1/models, and
 * POST /openai/v1/chat/completions answered 400: no model here has a chat
 * template.
 */
#include "api/api.h"

#include <stdlib.h>

#include "common/opmetrics.h"
#include "serve/openai.h"

static void completions_stream(api_gen_stream *st, void *arg);

static int on_chunk(void *ctx, json_t *chunk)
{
    return api_gen_stream_event(ctx, chunk);
}

static void completions_stream(api_gen_stream *st, void *arg)
{
    ty_err err = {0};
    if (serve_oai_run(arg, on_chunk, st, &err) != TY_OK) {
        api_gen_stream_event(
            st, json_pack("{s:{s:s, s:s, s:n}}", "error", "message",
                          err.msg[0] ? err.msg : "generation failed", "type",
                          "server_error", "param"));
        return;
    }
    static const char done[] = "data: [DONE]\n\n";
    api_gen_stream_raw(st, done, sizeof done - 1);
}

static void oai_free(void *arg) { serve_oai_close(arg); }

static void completions_run(api_ctx *app, http_req *r)
{
    double t0 = opm_now();
    const json_t *body = api_json_object(r);
    if (!body)
        return;
    ty_err err = {0};
    serve_env env = api_serve_env(app);
    serve_oai *o = NULL;
    /* a stream's place first, so a full server refuses before any work */
    const int stream = json_is_true(json_object_get(body, "stream"));
    if (stream && !api_gen_stream_reserve()) {
        http_reply_problem(r, 503, NULL,
                           "too many generations are streaming; try again "
                           "soon");
        return;
    }
    ty_status s = serve_oai_open(&env, api_tenant(r), body, &o, &err);
    if (s != TY_OK) {
        if (stream)
            api_gen_stream_unreserve();
        api_reply_gen_error(r, s, &err);
        return;
    }
    if (serve_oai_streams(o)) {
        api_gen_stream_start(r, completions_stream, o, oai_free);
        return;
    }
    if (stream) /* stream true without streaming cannot be; be safe */
        api_gen_stream_unreserve();
    json_t *doc = NULL;
    if ((s = serve_oai_run(o, NULL, NULL, &err)) == TY_OK &&
        !(doc = serve_oai_result(o)))
        s = ty_fail(&err, TY_ENOMEM, NULL, "out of memory");
    serve_oai_close(o);
    if (s != TY_OK) {
        api_reply_gen_error(r, s, &err);
        return;
    }
    http_req_time(r, "completions", opm_now() - t0);
    http_reply_json(r, 200, doc);
}

/* On the waiting pool, as generate (api/generate.c). */
void api_openai_completions(api_ctx *app, http_req *r)
{
    if (!http_req_offload_wait(r, completions_run))
        completions_run(app, r);
}

void api_openai_chat(api_ctx *app, http_req *r)
{
    (void)app;
    http_reply_problem(r, 400, "messages",
                       "chat completions need a model with a chat template, "
                       "and no model here has one: use /openai/v1/completions "
                       "with a prompt");
}

static void models_run(api_ctx *app, http_req *r)
{
    ty_err err = {0};
    json_t *doc = NULL;
    serve_env env = api_serve_env(app);
    ty_status s = serve_oai_models(&env, api_tenant(r), &doc, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    http_reply_json(r, 200, doc);
}

void api_openai_models(api_ctx *app, http_req *r)
{
    if (!http_req_offload(r, models_run))
        models_run(app, r);
}
