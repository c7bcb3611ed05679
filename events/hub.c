/*
 * hub.c - the live event hub: a ring of recent events and the streams
 * reading it (see hub.h).
 *
 * Invariants (under mu): the ring holds ids oldest..newest, event id i at
 * ring[i % cap]; a stream has sent every event of its own up to `after`
 * (an event that is partly sent sits in its pending buffer); every open
 * stream is on the list, and is taken off it (by its free callback, under
 * mu) before its http handle becomes invalid, so a publisher never wakes a
 * freed stream.
 */
#include "events/hub.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/ids.h"
#include "common/jsonutil.h"
#include "common/log.h"

static const char *const type_names[] = {
    [EV_JOB_CREATED] = "job.created",   [EV_JOB_STARTED] = "job.started",
    [EV_JOB_PROGRESS] = "job.progress", [EV_JOB_EPOCH] = "job.epoch",
    [EV_JOB_FINISHED] = "job.finished",
};
_Static_assert(sizeof type_names / sizeof type_names[0] == EV_TYPE_COUNT,
               "a name for every event type");

static const char keepalive_text[] = ": keepalive\n\n";

typedef struct {
    uint64_t id;
    ev_type type;
    char tenant[TY_ID_MAX];
    char job[TY_ID_MAX];
    char *text; /* the SSE event, formatted */
    size_t len;
} ev_entry;

struct ev_sub {
    ev_hub *hub;
    void (*wake)(void *arg); /* NULL until attached */
    void *wake_arg;
    char tenant[TY_ID_MAX];
    char job[TY_ID_MAX]; /* "" = every job of the tenant */
    uint64_t after;      /* the last id sent (or skipped) */
    char *pending;       /* text being sent */
    size_t pending_len, pending_off;
    int end_after_pending;  /* a job stream sent its job.finished */
    int end_when_caught_up; /* EV_END_CAUGHT_UP */
    double last_write;      /* monotonic */
    ev_sub *prev, *next;
};

struct ev_hub {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t ticker;
    int stopping;
    ev_entry *ring;
    size_t cap;
    uint64_t oldest, newest; /* oldest = newest + 1 while empty */
    ev_sub *streams;
    size_t nstreams;
};

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

const char *ev_type_name(ev_type t)
{
    return t < EV_TYPE_COUNT ? type_names[t] : "unknown";
}

char *ev_format(uint64_t id, const char *type, const json_t *data)
{
    /* Compact JSON has no raw newline: one data line. */
    char *json = tyjson_dumps(data, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!json)
        return NULL;
    size_t n = strlen(json) + strlen(type) + 64;
    char *text = malloc(n);
    if (text)
        snprintf(text, n, "id: %" PRIu64 "\nevent: %s\ndata: %s\n\n", id, type,
                 json);
    free(json);
    return text;
}

/* Wakes, once a second, the streams that have been quiet for the
 * keepalive interval. */
static void *ticker_main(void *arg)
{
    ev_hub *h = arg;
    pthread_mutex_lock(&h->mu);
    while (!h->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        pthread_cond_timedwait(&h->cv, &h->mu, &until);
        double t = mono_s();
        for (ev_sub *s = h->streams; s; s = s->next)
            if (t - s->last_write >= EV_KEEPALIVE_S)
                s->wake(s->wake_arg);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

ev_hub *ev_hub_create(size_t ring_size, ty_err *err)
{
    if (ring_size < 1 || ring_size > EV_RING_MAX) {
        ty_fail(err, TY_EINVAL, "--events-ring",
                "--events-ring must be 1 to %d events", EV_RING_MAX);
        return NULL;
    }
    ev_hub *h = calloc(1, sizeof *h);
    if (h)
        h->ring = calloc(ring_size, sizeof *h->ring);
    if (!h || !h->ring) {
        free(h);
        ty_fail(err, TY_ENOMEM, NULL, "out of memory for the event ring");
        return NULL;
    }
    h->cap = ring_size;
    h->newest = (uint64_t)time(NULL) << 20;
    h->oldest = h->newest + 1;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    if (pthread_create(&h->ticker, NULL, ticker_main, h) != 0) {
        pthread_mutex_destroy(&h->mu);
        pthread_cond_destroy(&h->cv);
        free(h->ring);
        free(h);
        ty_fail(err, TY_EINTERNAL, NULL, "cannot start the event ticker");
        return NULL;
    }
    return h;
}

void ev_hub_destroy(ev_hub *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->stopping = 1;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->ticker, NULL);
    for (size_t i = 0; i < h->cap; i++)
        free(h->ring[i].text);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h->ring);
    free(h);
}

static int stream_wants(const ev_sub *s, const ev_entry *e)
{
    return !strcmp(s->tenant, e->tenant) &&
           (!s->job[0] || !strcmp(s->job, e->job));
}

uint64_t ev_publish(ev_hub *h, const char *tenant_id, const char *job_id,
                    ev_type type, json_t *data)
{
    if (!h || !data) {
        json_decref(data);
        return 0;
    }
    pthread_mutex_lock(&h->mu);
    uint64_t id = h->newest + 1;
    char *text = ev_format(id, type_names[type], data);
    json_decref(data);
    if (!text) {
        pthread_mutex_unlock(&h->mu);
        log_msg_limited(NULL, "error",
                        "events: out of memory; %s of %s dropped",
                        type_names[type], job_id);
        return 0;
    }
    ev_entry *e = &h->ring[id % h->cap];
    free(e->text);
    e->id = id;
    e->type = type;
    snprintf(e->tenant, sizeof e->tenant, "%s", tenant_id);
    snprintf(e->job, sizeof e->job, "%s", job_id);
    e->text = text;
    e->len = strlen(text);
    h->newest = id;
    if (h->newest - h->oldest + 1 > h->cap)
        h->oldest = h->newest - h->cap + 1;
    for (ev_sub *s = h->streams; s; s = s->next)
        if (stream_wants(s, e))
            s->wake(s->wake_arg);
    pthread_mutex_unlock(&h->mu);
    return id;
}

void ev_hub_bounds(ev_hub *h, uint64_t *oldest, uint64_t *newest)
{
    pthread_mutex_lock(&h->mu);
    *oldest = h->oldest;
    *newest = h->newest;
    pthread_mutex_unlock(&h->mu);
}

size_t ev_hub_streams(ev_hub *h)
{
    pthread_mutex_lock(&h->mu);
    size_t n = h->nstreams;
    pthread_mutex_unlock(&h->mu);
    return n;
}

/* The stream's next text into pending: its next event from the ring, a
 * reset when the ring has moved past it (a reader slower than the ring),
 * or a keepalive when it has been quiet. 0 when there is nothing. Caller
 * holds mu. */
static int stream_next(ev_hub *h, ev_sub *s)
{
    if (s->after + 1 < h->oldest && h->oldest <= h->newest) {
        s->after = h->newest;
        json_t *d = json_pack("{s:s}", "reason",
                              "events were missed; fetch the state again");
        s->pending = d ? ev_format(h->newest, "reset", d) : NULL;
        json_decref(d);
    } else {
        while (s->after < h->newest && !s->pending) {
            const ev_entry *e = &h->ring[(s->after + 1) % h->cap];
            s->after++;
            if (!stream_wants(s, e))
                continue;
            s->pending = strdup(e->text);
            if (s->job[0] && e->type == EV_JOB_FINISHED)
                s->end_after_pending = 1;
        }
        if (!s->pending && s->end_when_caught_up) {
            s->end_after_pending = 1;
            return 0;
        }
        if (!s->pending && mono_s() - s->last_write >= EV_KEEPALIVE_S)
            s->pending = strdup(keepalive_text);
    }
    if (!s->pending)
        return 0;
    s->pending_len = strlen(s->pending);
    s->pending_off = 0;
    return 1;
}

long ev_sub_read(ev_sub *s, char *buf, size_t max)
{
    ev_hub *h = s->hub;
    size_t n = 0;
    pthread_mutex_lock(&h->mu);
    while (n < max) {
        if (!s->pending) {
            if (s->end_after_pending)
                break;
            if (!stream_next(h, s))
                break;
        }
        size_t k = s->pending_len - s->pending_off;
        if (k > max - n)
            k = max - n;
        memcpy(buf + n, s->pending + s->pending_off, k);
        n += k;
        s->pending_off += k;
        if (s->pending_off == s->pending_len) {
            free(s->pending);
            s->pending = NULL;
        }
    }
    if (n > 0)
        s->last_write = mono_s();
    int ended = !s->pending && s->end_after_pending;
    pthread_mutex_unlock(&h->mu);
    if (n == 0 && ended)
        return -1;
    return (long)n;
}

void ev_unsubscribe(ev_sub *s)
{
    if (!s)
        return;
    ev_hub *h = s->hub;
    pthread_mutex_lock(&h->mu);
    if (s->wake) {
        if (s->prev)
            s->prev->next = s->next;
        else
            h->streams = s->next;
        if (s->next)
            s->next->prev = s->prev;
        h->nstreams--;
    }
    pthread_mutex_unlock(&h->mu);
    free(s->pending);
    free(s);
}

ev_sub *ev_subscribe(ev_hub *h, const char *tenant_id, const char *job_id,
                     uint64_t after, char *preamble, ev_end end)
{
    ev_sub *s = h ? calloc(1, sizeof *s) : NULL;
    if (!s) {
        free(preamble);
        return NULL;
    }
    s->hub = h;
    snprintf(s->tenant, sizeof s->tenant, "%s", tenant_id);
    snprintf(s->job, sizeof s->job, "%s", job_id ? job_id : "");
    s->after = after;
    s->pending = preamble;
    s->pending_len = preamble ? strlen(preamble) : 0;
    s->end_after_pending = end == EV_END_AFTER_PREAMBLE;
    s->end_when_caught_up = end == EV_END_CAUGHT_UP;
    s->last_write = mono_s();
    return s;
}

void ev_sub_attach(ev_sub *s, void (*wake)(void *arg), void *arg)
{
    ev_hub *h = s->hub;
    pthread_mutex_lock(&h->mu);
    s->wake = wake;
    s->wake_arg = arg;
    s->next = h->streams;
    if (h->streams)
        h->streams->prev = s;
    h->streams = s;
    h->nstreams++;
    pthread_mutex_unlock(&h->mu);
}
