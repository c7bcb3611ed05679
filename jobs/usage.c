/*
 * usage.c - the job service's usage accounting (store/usage.c holds the
 * rows): every run of a job or a serving replica records the intervals in
 * which it holds a device slice or CPU places, opened when its process has
 * started and closed when its run entry is freed (an end, a preemption, a
 * crash, a cancel) or the server stops.
 *
 * One interval per slot held (a GPU gang: one per member's GPU); a CPU run
 * holds one interval with cpu = its places (a CPU gang: its ranks). While
 * the server runs it stamps the store every JOBS_USAGE_ALIVE_S seconds, and
 * at start closes what a crash left open at the last time the store proves
 * it alive (store_usage_recover). The Prometheus counters of slice- and
 * CPU-seconds per tenant and kind advance on every stamp and close, so a
 * long run is counted while it runs.
 */
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/opmetrics.h"
#include "jobs/state.h"

/* Adds what w's intervals held since they were last counted to the
 * Prometheus counters. */
static void count_until(job_run *w, double now)
{
    double dt = now - w->usage_counted;
    if (w->nusage == 0 || dt <= 0)
        return;
    opm_usage_add(w->tenant_id, w->kind->name, dt * w->usage_slices,
                  dt * w->usage_cpu);
    w->usage_counted = now;
}

static void open_one(jobs_service *r, job_run *w, int slot, int cpu, double now)
{
    const inv_slot *s = slot >= 0 && r->inv && slot < r->inv->nslots
                            ? &r->inv->slots[slot]
                            : NULL;
    int serving = w->owner[0] != '\0';
    store_usage_interval iv = {.tenant_id = w->tenant_id,
                               .kind = w->kind->name,
                               .owner = serving ? w->owner : w->job_id,
                               .replica = serving ? w->job_id : NULL,
                               .device = s ? r->inv->gpus[s->gpu].index : -1,
                               .profile =
                                   s ? (s->profile ? s->profile : "") : NULL,
                               .compute_slices = s ? s->compute_slices : 0,
                               .gpu_slices = s ? MIG_COMPUTE_SLICES : 0,
                               .memory_bytes = s ? (int64_t)s->memory_bytes : 0,
                               .cpu = s ? 0 : cpu,
                               .start = now};
    int64_t id = 0;
    ty_err err = {0};
    if (store_usage_open(r->env.store, &iv, &id, &err) != TY_OK) {
        log_msg_limited(w->job_id, "error", "usage: job %s: %s", w->job_id,
                        err.msg);
        return;
    }
    if (w->nusage < JOBS_USAGE_MAX)
        w->usage_ids[w->nusage++] = id;
    w->usage_slices += iv.compute_slices;
    w->usage_cpu += iv.cpu;
}

void svc_usage_open(jobs_service *r, job_run *w)
{
    sched_job_info info;
    if (w->nusage || sched_job_get(r->sched, w->sjob, &info) != TY_OK)
        return;
    double now = svc_wall();
    w->usage_counted = now;
    if (w->slot < 0) {
        open_one(r, w, -1, info.gang > 1 ? info.gang : 1, now);
    } else if (info.gang > 1 && info.gang_slots) {
        for (int i = 0; i < info.gang; i++)
            open_one(r, w, info.gang_slots[i], 0, now);
    } else {
        open_one(r, w, w->slot, 0, now);
    }
}

void svc_usage_close(jobs_service *r, job_run *w)
{
    if (!w->nusage)
        return;
    double now = svc_wall();
    count_until(w, now);
    for (int i = 0; i < w->nusage; i++) {
        ty_err err = {0};
        if (store_usage_close(r->env.store, w->usage_ids[i], now, &err) !=
            TY_OK)
            /* left open: the next start's recovery closes it */
            log_msg_limited(w->job_id, "error", "usage: job %s: %s", w->job_id,
                            err.msg);
    }
    w->nusage = 0;
    w->usage_slices = w->usage_cpu = 0;
}

void svc_usage_tick(jobs_service *r)
{
    double now = svc_wall();
    if (now - r->usage_alive_at < JOBS_USAGE_ALIVE_S &&
        now >= r->usage_alive_at)
        return;
    ty_err err = {0};
    if (store_usage_alive(r->env.store, now, &err) != TY_OK) {
        log_msg_limited(NULL, "error", "usage: %s", err.msg);
        return;
    }
    r->usage_alive_at = now;
    for (int i = 0; i < r->cap; i++)
        if (r->runs[i].used)
            count_until(&r->runs[i], now);
}

void svc_usage_recover(jobs_service *r)
{
    int64_t closed = 0;
    double proven = 0, now = svc_wall();
    ty_err err = {0};
    if (store_usage_recover(r->env.store, now, &closed, &proven, &err) !=
        TY_OK) {
        log_msg("error", "usage: recovery: %s", err.msg);
        return;
    }
    r->usage_alive_at = now;
    if (closed)
        log_event("info", "usage_recover",
                  json_pack("{s:I, s:f}", "closed", (json_int_t)closed,
                            "proven_alive_at", proven));
}

void jobs_run_owner(jobs_service *js, int place, const char *owner)
{
    if (place < 0 || place >= js->cap)
        return;
    snprintf(js->runs[place].owner, sizeof js->runs[place].owner, "%s",
             owner ? owner : "");
}
