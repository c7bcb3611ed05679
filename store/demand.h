/*
 * demand.h - the demand the scheduler saw, recorded for the MIG layout
 * advisor (jobs/advisor.h): one row per request (a training job or a
 * serving replica) with its arrival, what it asked for, when it first
 * started, the seconds it held a slot (summed over its runs: a preempted
 * job runs again) and when it ended.
 *
 * Separate from the usage intervals: this is what was asked for, waited
 * for and held, not a bill. Bounded: store_demand_recover prunes rows
 * older than a cut-off at server start. Every write is one committed
 * statement.
 */
#ifndef TY_STORE_DEMAND_H
#define TY_STORE_DEMAND_H

#include <jansson.h>
#include <stdint.h>

#include "common/ty.h"
#include "store/store.h"

/* What a request asked for (req_kind: sched_req_kind's values, 1 any,
 * 2 a MIG profile, 3 a minimum). */
typedef struct {
    const char *id; /* the scheduler's id: job_... or rep_... */
    const char *tenant_id;
    double arrival; /* seconds since the epoch */
    int req_kind;
    const char *profile; /* req_kind 2 */
    uint64_t min_memory_bytes;
    int min_compute_slices;
    int serving;
    int gang;
    int refused; /* 1: no slot could ever satisfy it (422) */
} store_demand;

/* Records a request (a second insert of the same id changes nothing: a
 * retried job is the same demand). TY_EIO / TY_ENOSPC. */
ty_status store_demand_insert(store *st, const store_demand *d, ty_err *err);

/* Request id was placed at t (its first start is kept). */
ty_status store_demand_started(store *st, const char *id, double t,
                               ty_err *err);

/* Request id stopped holding its slot at t, or left the queue (cancelled,
 * withdrawn): the seconds since its last start are added to what it held
 * and `ended` is t. A later start opens it again. */
ty_status store_demand_stopped(store *st, const char *id, double t,
                               ty_err *err);

/* Server start: rows older than `before` (arrival, seconds) are removed
 * (*pruned how many; may be NULL), and runs the last server left open
 * (it stopped or crashed while they held a slot) are closed without
 * counting the unknown rest of them. */
ty_status store_demand_recover(store *st, double before, int64_t *pruned,
                               ty_err *err);

/* Requests that arrived in [from, to), by arrival: a new array of objects
 * with the table's columns (id, tenant_id, arrival, req_kind, profile,
 * min_memory_bytes, min_compute_slices, serving, gang, refused,
 * first_start, last_start, held_s, ended; null where unset), at most
 * `limit` of them (the oldest). */
ty_status store_demand_window(store *st, double from, double to, int64_t limit,
                              json_t **rows, ty_err *err);

#endif
