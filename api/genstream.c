/*
 * genstream.c - a Server-Sent Events reply fed by a thread of its own,
 * for generation (api/generate.c's generate_stream, api/openai.c's
 * streamed completions): the producer runs on its own thread and pushes
 * events as its text comes; the HTTP stream drains them. A client that
 * leaves makes every later push report it, so the producer stops.
 * At most API_GEN_STREAMS streams run at once.
 */
#include "api/api.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define API_GEN_STREAMS 64

static atomic_int running;

struct api_gen_stream {
    pthread_mutex_t mu;
    char *buf; /* not sent yet: buf[off, len) */
    size_t len, cap, off;
    int done;        /* the producer is finished */
    int gone;        /* the stream is over (the client left) */
    int refs;        /* the producer and the stream */
    http_stream *hs; /* NULL once gone */
    api_gen_produce produce;
    void *arg;
    void (*arg_free)(void *arg);
};

static void unref(api_gen_stream *st)
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

int api_gen_stream_raw(api_gen_stream *st, const char *text, size_t n)
{
    pthread_mutex_lock(&st->mu);
    int gone = st->gone;
    if (!gone && st->len + n > st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 4096;
        while (cap < st->len + n)
            cap *= 2;
        char *b = realloc(st->buf, cap);
        if (b) {
            st->buf = b;
            st->cap = cap;
        }
    }
    if (!gone && st->len + n <= st->cap) {
        memcpy(st->buf + st->len, text, n);
        st->len += n;
    }
    if (st->hs)
        http_stream_wake(st->hs);
    pthread_mutex_unlock(&st->mu);
    return gone;
}

int api_gen_stream_event(api_gen_stream *st, json_t *obj)
{
    char *text = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (!text)
        return api_gen_stream_raw(st, "", 0);
    size_t n = strlen(text);
    char *ev = malloc(n + 9);
    int gone;
    if (ev) {
        memcpy(ev, "data: ", 6);
        memcpy(ev + 6, text, n);
        memcpy(ev + 6 + n, "\n\n", 2);
        gone = api_gen_stream_raw(st, ev, n + 8);
    } else {
        gone = api_gen_stream_raw(st, "", 0);
    }
    free(ev);
    free(text);
    return gone;
}

static void finish(api_gen_stream *st)
{
    pthread_mutex_lock(&st->mu);
    st->done = 1;
    if (st->hs)
        http_stream_wake(st->hs);
    pthread_mutex_unlock(&st->mu);
    if (st->arg_free)
        st->arg_free(st->arg);
    atomic_fetch_sub(&running, 1);
    unref(st);
}

static void *producer(void *arg)
{
    api_gen_stream *st = arg;
    st->produce(st, st->arg);
    finish(st);
    return NULL;
}

static long fill(void *cls, char *buf, size_t max)
{
    api_gen_stream *st = cls;
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
    api_gen_stream *st = cls;
    pthread_mutex_lock(&st->mu);
    st->gone = 1;
    st->hs = NULL;
    pthread_mutex_unlock(&st->mu);
    unref(st);
}

int api_gen_stream_reserve(void)
{
    if (atomic_fetch_add(&running, 1) < API_GEN_STREAMS)
        return 1;
    atomic_fetch_sub(&running, 1);
    return 0;
}

void api_gen_stream_unreserve(void) { atomic_fetch_sub(&running, 1); }

void api_gen_stream_start(http_req *r, api_gen_produce produce, void *arg,
                          void (*arg_free)(void *arg))
{
    api_gen_stream *st = calloc(1, sizeof *st);
    if (!st) {
        if (arg_free)
            arg_free(arg);
        atomic_fetch_sub(&running, 1);
        http_reply_problem(r, 503, NULL, "out of memory");
        return;
    }
    pthread_mutex_init(&st->mu, NULL);
    st->refs = 2;
    st->produce = produce;
    st->arg = arg;
    st->arg_free = arg_free;
    /* the stream first (it holds a reference from here on, and drops it at
     * once if it fails), then the producer; the handle is kept only while
     * the stream lives (free_cls may already have run) */
    http_stream *hs =
        http_reply_stream(r, "text/event-stream", fill, stream_free, st);
    pthread_mutex_lock(&st->mu);
    if (!st->gone)
        st->hs = hs;
    pthread_mutex_unlock(&st->mu);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, producer, st) != 0) {
        api_gen_stream_event(
            st, json_pack("{s:s}", "error", "no thread to generate"));
        finish(st);
    }
    pthread_attr_destroy(&attr);
}
