/*
 * generate.c - POST /v2/models/{name}/generate and /generate_stream: text
 * from a language model, as Triton's generate extension (serve/generate.h).
 *
 * generate runs on a work thread and replies with the whole text.
 * generate_stream checks the request on a work thread (every error is an
 * ordinary problem reply, before the stream starts), then replies with a
 * text/event-stream fed by a thread of its own: one event per piece of
 * text, `data: {"model_name", "model_version", "text_output"}`, then a
 * last one with text_output "" and finish_reason and the token counts (no
 * [DONE] sentinel, as Triton). An error after the first event is an event
 * `data: {"error": "..."}`. A client that leaves stops its generation
 * within a token. At most GEN_STREAMS streams run at once (503 past it).
 */
#include "api/api.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/opmetrics.h"
#include "serve/generate.h"

#define GEN_STREAMS 64

static atomic_int streams_running;

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

/* ---- streaming ---- */

/* What the generating thread and the HTTP stream share. */
typedef struct {
    pthread_mutex_t mu;
    char *buf; /* events not sent yet: buf[off, len) */
    size_t len, cap, off;
    int done;        /* the last event is in buf */
    int gone;        /* the stream is over (the client left, or done) */
    int refs;        /* the thread and the stream */
    http_stream *hs; /* NULL once gone */
    serve_gen *g;
    char model[256];
} gen_stream;

static void stream_unref(gen_stream *st)
{
    pthread_mutex_lock(&st->mu);
    int left = --st->refs;
    pthread_mutex_unlock(&st->mu);
    if (left)
        return;
    pthread_mutex_destroy(&st->mu);
    free(st->buf);
    free(st);
}

/* Appends one event (the object's JSON after "data: "); takes obj. 1 when
 * the stream's reader is gone. */
static int push_event(gen_stream *st, json_t *obj, int last)
{
    char *text = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    pthread_mutex_lock(&st->mu);
    int gone = st->gone;
    size_t need = text ? strlen(text) + 8 : 0;
    if (!gone && text && st->len + need > st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 4096;
        while (cap < st->len + need)
            cap *= 2;
        char *b = realloc(st->buf, cap);
        if (b) {
            st->buf = b;
            st->cap = cap;
        }
    }
    if (!gone && text && st->len + need <= st->cap) {
        memcpy(st->buf + st->len, "data: ", 6);
        memcpy(st->buf + st->len + 6, text, need - 8);
        memcpy(st->buf + st->len + need - 2, "\n\n", 2);
        st->len += need;
    }
    if (last)
        st->done = 1;
    if (st->hs)
        http_stream_wake(st->hs);
    pthread_mutex_unlock(&st->mu);
    free(text);
    return gone;
}

static int on_chunk(void *ctx, const char *text, size_t len)
{
    gen_stream *st = ctx;
    return push_event(st,
                      json_pack("{s:s, s:s, s:s%}", "model_name", st->model,
                                "model_version", "1", "text_output", text, len),
                      0);
}

static void *stream_thread(void *arg)
{
    gen_stream *st = arg;
    ty_err err = {0};
    ty_status s = serve_gen_run(st->g, on_chunk, st, &err);
    push_event(st,
               s == TY_OK ? serve_gen_result(st->g, 0)
                          : json_pack("{s:s}", "error",
                                      err.msg[0] ? err.msg
                                                 : "generation "
                                                   "failed"),
               1);
    serve_gen_close(st->g);
    st->g = NULL;
    atomic_fetch_sub(&streams_running, 1);
    stream_unref(st);
    return NULL;
}

static long stream_fill(void *cls, char *buf, size_t max)
{
    gen_stream *st = cls;
    pthread_mutex_lock(&st->mu);
    long n = 0;
    if (st->off < st->len) {
        size_t k = st->len - st->off < max ? st->len - st->off : max;
        memcpy(buf, st->buf + st->off, k);
        st->off += k;
        n = (long)k;
    } else if (st->done) {
        n = -1;
    }
    pthread_mutex_unlock(&st->mu);
    return n;
}

static void stream_free(void *cls)
{
    gen_stream *st = cls;
    pthread_mutex_lock(&st->mu);
    st->gone = 1;
    st->hs = NULL;
    pthread_mutex_unlock(&st->mu);
    stream_unref(st);
}

static void generate_stream_run(api_ctx *app, http_req *r)
{
    const json_t *body = api_json_object(r);
    if (!body)
        return;
    if (atomic_fetch_add(&streams_running, 1) >= GEN_STREAMS) {
        atomic_fetch_sub(&streams_running, 1);
        http_reply_problem(r, 503, NULL,
                           "%d generations are streaming; try again soon",
                           GEN_STREAMS);
        return;
    }
    ty_err err = {0};
    serve_env env = api_serve_env(app);
    serve_gen *g = NULL;
    gen_stream *st = NULL;
    ty_status s = serve_gen_open(&env, api_tenant(r), http_req_param(r, 0),
                                 body, &g, &err);
    if (s == TY_OK && !(st = calloc(1, sizeof *st)))
        s = ty_fail(&err, TY_ENOMEM, NULL, "out of memory");
    if (s != TY_OK) {
        serve_gen_close(g);
        atomic_fetch_sub(&streams_running, 1);
        http_reply_error(r, s, &err);
        return;
    }
    pthread_mutex_init(&st->mu, NULL);
    st->g = g;
    st->refs = 2;
    snprintf(st->model, sizeof st->model, "%s", serve_gen_model_name(g));
    /* the stream first (it holds one reference from here on, and drops it
     * at once if it fails), then the thread that feeds it; the handle is
     * kept only while the stream lives (free_cls may already have run) */
    http_stream *hs =
        http_reply_stream(r, "text/event-stream", stream_fill, stream_free, st);
    pthread_mutex_lock(&st->mu);
    if (!st->gone)
        st->hs = hs;
    pthread_mutex_unlock(&st->mu);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, stream_thread, st) != 0) {
        /* no thread: end the stream with an error event */
        push_event(st, json_pack("{s:s}", "error", "no thread to generate"), 1);
        serve_gen_close(g);
        atomic_fetch_sub(&streams_running, 1);
        stream_unref(st);
    }
    pthread_attr_destroy(&attr);
}

void api_kserve_generate_stream(api_ctx *app, http_req *r)
{
    if (!http_req_offload(r, generate_stream_run))
        generate_stream_run(app, r);
}
