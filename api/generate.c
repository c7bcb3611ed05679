/*
 * generate.c - POST /v2/models/{name}/generate and /generate_stream: text
 * from a language model, as Triton's generate extension (serve/generate.h).
 *
 * generate runs on a work thread and replies with the whole text.
 * generate_stream checks the request on a work thread (every error is an
 * ordinary problem reply, before the stream starts), then streams from a
 * thread of its own (genstream.c): one event per piece of text,
 * `data: {"model_name", "model_version", "text_output"}`, then a last one
 * with text_output "" and finish_reason and the token counts (no [DONE]
 * sentinel, as Triton). An error after the first event is an event
 * `data: {"error": "..."}`.
 */
#include "api/api.h"

#include <stdio.h>
#include <string.h>

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
        api_reply_gen_error(r, s, &err);
        return;
    }
    http_req_time(r, "generate", opm_now() - t0);
    http_reply_json(r, 200, doc);
}

/* On the waiting pool: a generation mostly waits for its engine's steps
 * (node/gen_engine.c), where it shares steps with the others. */
void api_kserve_generate(api_ctx *app, http_req *r)
{
    if (!http_req_offload_wait(r, generate_run))
        generate_run(app, r);
}

/* ---- streaming ---- */

typedef struct {
    serve_gen *g;
    api_gen_stream *st;
    char model[256];
} triton_stream;

static int on_chunk(void *ctx, const char *text, size_t len)
{
    triton_stream *t = ctx;
    return api_gen_stream_event(
        t->st, json_pack("{s:s, s:s, s:s%}", "model_name", t->model,
                         "model_version", "1", "text_output", text, len));
}

static void produce(api_gen_stream *st, void *arg)
{
    triton_stream *t = arg;
    t->st = st;
    ty_err err = {0};
    ty_status s = serve_gen_run(t->g, on_chunk, t, &err);
    api_gen_stream_event(
        st, s == TY_OK ? serve_gen_result(t->g, 0)
                       : json_pack("{s:s}", "error",
                                   err.msg[0] ? err.msg : "generation failed"));
}

static void triton_free(void *arg)
{
    triton_stream *t = arg;
    serve_gen_close(t->g);
    free(t);
}

static void generate_stream_run(api_ctx *app, http_req *r)
{
    const json_t *body = api_json_object(r);
    if (!body)
        return;
    if (!api_gen_stream_reserve()) {
        http_reply_problem(r, 503, NULL,
                           "too many generations are streaming; try again "
                           "soon");
        return;
    }
    ty_err err = {0};
    serve_env env = api_serve_env(app);
    triton_stream *t = calloc(1, sizeof *t);
    ty_status s = t ? serve_gen_open(&env, api_tenant(r), http_req_param(r, 0),
                                     body, &t->g, &err)
                    : ty_fail(&err, TY_ENOMEM, NULL, "out of memory");
    if (s != TY_OK) {
        free(t);
        api_gen_stream_unreserve();
        api_reply_gen_error(r, s, &err);
        return;
    }
    snprintf(t->model, sizeof t->model, "%s", serve_gen_model_name(t->g));
    api_gen_stream_start(r, produce, t, triton_free);
}

void api_kserve_generate_stream(api_ctx *app, http_req *r)
{
    if (!http_req_offload(r, generate_stream_run))
        generate_stream_run(app, r);
}
