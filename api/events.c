/*
 * events.c - live events over Server-Sent Events: GET /v1/events (the
 * caller's tenant's jobs) and GET /v1/jobs/{id}/events (one job, ending
 * with its job.finished). The hub and the streams are events/hub.c's;
 * this file decides where a stream starts.
 *
 * Where a stream starts:
 *   Last-Event-ID N still in the ring (or the newest id): after N.
 *   Last-Event-ID older than the ring (or not from this server process):
 *     `event: reset` (the client refetches), then new events.
 *   No Last-Event-ID: /v1/events from now on; a job's stream with the
 *     job's events still in the ring, then new ones.
 *   A job already finished (no Last-Event-ID, or a reset): its last 100
 *     epochs (FINISHED_REPLAY_EPOCHS) and job.finished at once, rendered from the store, with the id of the
 *     newest event; then the stream ends.
 * The ring's bounds are read before the job's state, so a job finishing
 * in between is in the ring after `after` and still reaches the stream.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "jobs/service.h"
#include "events/hub.h"
#include "server/sse.h"

int api_parse_last_event_id(const char *v, uint64_t *id)
{
    *id = 0;
    if (!v)
        return 1;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    /* Ids stay below 2^53 (events.h); a larger one was never sent. */
    if (errno || *end || *v < '0' || *v > '9' || n > EV_ID_MAX)
        return 0;
    *id = n;
    return 1;
}

/* Parses the Last-Event-ID header into *id (0: none). Replies 400 and
 * returns 0 when it is not a decimal id. */
static int last_event_id(http_req *r, uint64_t *id)
{
    if (!api_parse_last_event_id(http_req_header(r, "Last-Event-ID"), id)) {
        http_reply_problem(r, 400, "Last-Event-ID",
                           "Last-Event-ID must be the decimal id of an event "
                           "this server sent");
        return 0;
    }
    return 1;
}

/* Appends text (stolen) to *buf; 0 on out of memory. */
static int append(char **buf, size_t *len, char *text)
{
    if (!text)
        return 0;
    size_t n = strlen(text);
    char *b = realloc(*buf, *len + n + 1);
    if (!b) {
        free(text);
        return 0;
    }
    memcpy(b + *len, text, n + 1);
    *len += n;
    *buf = b;
    free(text);
    return 1;
}

static char *reset_text(uint64_t newest)
{
    json_t *d = json_pack("{s:s}", "reason",
                          "the events after Last-Event-ID are no longer kept; "
                          "fetch the state again");
    char *t = d ? ev_format(newest, "reset", d) : NULL;
    json_decref(d);
    return t;
}

static int job_is_finished(const json_t *job)
{
    const char *st = json_string_value(json_object_get(job, "status"));
    return st && (!strcmp(st, JOB_SUCCEEDED) || !strcmp(st, JOB_FAILED) ||
                  !strcmp(st, JOB_CANCELLED));
}

/* The most epochs a finished job's stream replays: its last ones (a run
 * of thousands is read from GET .../curves and .../metrics pages). */
#define FINISHED_REPLAY_EPOCHS 100

/* The finished job's last epochs and job.finished as SSE text (appended to
 * *buf). job is borrowed. */
static ty_status finished_job_text(api_ctx *app, http_req *r, const json_t *job,
                                   uint64_t id, char **buf, size_t *len,
                                   ty_err *err)
{
    json_t *epochs = NULL;
    int64_t total;
    ty_status s =
        store_job_epochs_page(app->store, api_tenant(r),
                              json_string_value(json_object_get(job, "id")), 0,
                              FINISHED_REPLAY_EPOCHS, 1, &epochs, &total, err);
    if (s != TY_OK)
        return s;
    /* Fetched newest first; sent oldest first. */
    for (size_t i = json_array_size(epochs); i-- > 0;) {
        json_t *e = json_array_get(epochs, i);
        json_t *d = json_pack("{s:O, s:O}", "job", job, "epoch", e);
        char *t = d ? ev_format(id, ev_type_name(EV_JOB_EPOCH), d) : NULL;
        json_decref(d);
        if (!append(buf, len, t)) {
            json_decref(epochs);
            return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        }
    }
    json_decref(epochs);
    json_t *d = json_pack("{s:O}", "job", job);
    char *t = d ? ev_format(id, ev_type_name(EV_JOB_FINISHED), d) : NULL;
    json_decref(d);
    if (!append(buf, len, t))
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    return TY_OK;
}

void api_events_stream(api_ctx *app, http_req *r)
{
    uint64_t last, oldest, newest;
    if (!last_event_id(r, &last))
        return;
    if (!app->events) {
        http_reply_problem(r, 503, NULL, "live events are not available");
        return;
    }
    ev_hub_bounds(app->events, &oldest, &newest);
    char *pre = NULL;
    uint64_t after = newest;
    if (last && (last + 1 < oldest || last > newest))
        pre = reset_text(newest);
    else if (last)
        after = last;
    sse_reply(r, app->events, api_tenant(r), NULL, after, pre, EV_END_NEVER);
}

void api_jobs_events(api_ctx *app, http_req *r)
{
    uint64_t last, oldest, newest;
    if (!last_event_id(r, &last))
        return;
    if (!app->events) {
        http_reply_problem(r, 503, NULL, "live events are not available");
        return;
    }
    ev_hub_bounds(app->events, &oldest, &newest);
    json_t *job = NULL;
    ty_err err = {0};
    char *pre = NULL;
    size_t pre_len = 0;
    char id[TY_ID_MAX];
    if (!api_resolve_param(app, r, STORE_REF_JOB, id))
        return;
    ty_status s = store_job_get(app->store, api_tenant(r), id, &job, &err);
    if (s != TY_OK)
        goto fail;
    /* As GET /v1/jobs/{id} shows it. */
    jobs_annotate(app->jobs, job, api_tenant(r));
    int reset = last && (last + 1 < oldest || last > newest);
    if (reset && !append(&pre, &pre_len, reset_text(newest))) {
        s = ty_fail(&err, TY_ENOMEM, NULL, "out of memory");
        goto fail;
    }
    if (last && !reset) {
        /* A resume: what came after `last`, from the ring (all there is,
         * when the job has finished). */
        sse_reply(r, app->events, api_tenant(r), id, last, pre,
                  job_is_finished(job) ? EV_END_CAUGHT_UP : EV_END_NEVER);
        json_decref(job);
        return;
    }
    if (job_is_finished(job)) {
        if ((s = finished_job_text(app, r, job, newest, &pre, &pre_len,
                                   &err)) != TY_OK)
            goto fail;
        sse_reply(r, app->events, api_tenant(r), id, newest, pre,
                  EV_END_AFTER_PREAMBLE);
        json_decref(job);
        return;
    }
    /* Running or queued: its events still in the ring, then new ones;
     * after a reset, new ones only. */
    sse_reply(r, app->events, api_tenant(r), id, reset ? newest : oldest - 1,
              pre, EV_END_NEVER);
    json_decref(job);
    return;
fail:
    free(pre);
    json_decref(job);
    http_reply_error(r, s, &err);
}
