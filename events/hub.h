/*
 * hub.h - the live event hub behind Server-Sent Events (GET /v1/events,
 * GET /v1/jobs/{id}/events; api/events.c).
 *
 * The runner (and the jobs API at submit and cancel) publishes job events;
 * each gets the next id and is kept, already formatted as SSE text, in a
 * bounded in-memory ring (--events-ring, default EV_RING_DEFAULT events).
 * Every open stream is a subscriber (ev_sub): it remembers the last id it
 * sent and reads the ring forward from there (its tenant's events, or one
 * job's). The hub knows no transport: a subscriber is attached with a wake
 * callback, which a publish calls for the subscribers it concerns, and a
 * ticker thread for idle ones every EV_KEEPALIVE_S seconds (so they send a
 * `: keepalive` comment, which is also how a vanished client is noticed).
 * server/sse.c ties a subscriber to an HTTP stream (suspended, holding no
 * thread, while it has nothing to send). The ring keeps each event as its
 * SSE text (ev_format), formatted once at publish for every reader.
 *
 * Ids start at the server's start time in seconds times 2^20 and increase
 * by one per event, so an id from an earlier server process is always older
 * than this ring and a resume with it gets `event: reset` rather than
 * silently missing events. They stay below 2^53 (exact in JavaScript).
 *
 * Thread safety: every function may be called from any thread. Lock order:
 * the hub's mutex, then whatever the wake callback takes (server/stream.c's
 * stream mutex) (never the runner's or the
 * store's: publishers render the job before calling ev_publish).
 */
#ifndef TY_EVENTS_H
#define TY_EVENTS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"

#define EV_RING_DEFAULT 4096
#define EV_RING_MAX 1000000
#define EV_KEEPALIVE_S 15
#define EV_ID_MAX 9007199254740991ULL /* 2^53 - 1: exact in JavaScript */

typedef enum {
    EV_JOB_CREATED = 0,
    EV_JOB_STARTED,
    EV_JOB_PROGRESS, /* progress of a running job; also a requeue
                         (preemption, retry), whose job shows "queued" */
    EV_JOB_EPOCH,
    EV_JOB_FINISHED, /* succeeded, failed or cancelled */
    EV_TYPE_COUNT
} ev_type;

/* "job.created", ... */
const char *ev_type_name(ev_type t);

typedef struct ev_hub ev_hub;

/* Creates a hub keeping the last ring_size (1..EV_RING_MAX) events and
 * starts its keepalive ticker. NULL on failure (err says why). */
ev_hub *ev_hub_create(size_t ring_size, ty_err *err);

/* Stops the ticker and frees the hub. The HTTP daemon must be stopped
 * first (no stream may still be open). NULL is ignored. */
void ev_hub_destroy(ev_hub *h);

/* Publishes an event of tenant_id's job job_id; data (stolen) is the
 * event's JSON, written on one line. Returns the event's id, 0 when h is
 * NULL or memory ran out (the event is then dropped and logged). */
uint64_t ev_publish(ev_hub *h, const char *tenant_id, const char *job_id,
                    ev_type type, json_t *data);

/* The ring's bounds: the oldest id kept and the newest id given (both
 * base - 1 and "none kept" before the first event: *oldest = *newest + 1). */
void ev_hub_bounds(ev_hub *h, uint64_t *oldest, uint64_t *newest);

/* One formatted SSE event ("id: ..\nevent: ..\ndata: ..\n\n"), malloc'd;
 * data is borrowed. NULL on out of memory. */
char *ev_format(uint64_t id, const char *type, const json_t *data);

/* When a stream ends, besides after a job stream's job.finished. */
typedef enum {
    EV_END_NEVER = 0,      /* runs until the client goes */
    EV_END_AFTER_PREAMBLE, /* the preamble is all (a finished job) */
    EV_END_CAUGHT_UP       /* once the ring has nothing more for it (a
                                finished job's resume) */
} ev_end;

typedef struct ev_sub ev_sub;

/* A subscriber that first reads preamble (SSE text, may be NULL; stolen),
 * then every event of tenant_id (only job_id's when job_id is not NULL)
 * with an id greater than after, as they come, until `end` says; a job
 * subscriber ends after its job.finished. It gets no event wake-ups until
 * ev_sub_attach. NULL when h is NULL or memory ran out (preamble freed). */
ev_sub *ev_subscribe(ev_hub *h, const char *tenant_id, const char *job_id,
                     uint64_t after, char *preamble, ev_end end);

/* Registers s with its hub: wake(arg) is called (under the hub's mutex,
 * so it must not block or call back into the hub) when s may have
 * something to read. */
void ev_sub_attach(ev_sub *s, void (*wake)(void *arg), void *arg);

/* Writes up to max bytes of s's text into buf: the count, 0 when nothing
 * is ready now (wait for a wake), -1 at the end of the stream. */
long ev_sub_read(ev_sub *s, char *buf, size_t max);

/* Detaches and frees s. NULL is ignored. */
void ev_unsubscribe(ev_sub *s);

/* Open streams (for tests and metrics). */
size_t ev_hub_streams(ev_hub *h);

#endif
