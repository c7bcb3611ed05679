/*
 * demand.c - the job service's side of the MIG layout advisor: what every
 * request to the scheduler asked for is recorded in the store
 * (store/demand.h) at submission, at each start and stop of its slot, and
 * when it is refused for want of a slot; jobs_mig_advice reads a window of
 * it back, replays it on today's layout and searches for a better one
 * (jobs/advisor.h).
 *
 * Recording never fails a request: a store error is logged (limited) and
 * the demand of that request is lost.
 */
#include "jobs/service.h"
#include "jobs/state.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "jobs/advisor.h"
#include "store/demand.h"

/* Rows one advice reads at most: the oldest of the window, the reply then
 * says "truncated". The search replays the window a few hundred times
 * (about 2 s for 1,350 requests over 5 days on 4 GPUs: bench/advisor), so
 * this bounds one call to minutes. */
#define ADVICE_MAX_RECORDS 50000
/* A request that never held a slot has no measured duration: it gets the
 * median of the window's measured ones, or this. */
#define ADVICE_DEFAULT_DURATION_S 3600.0

static void demand_insert(jobs_service *js, const char *id,
                          const char *tenant_id, double arrival,
                          const sched_request *req, int serving, int gang,
                          int refused)
{
    if (!js || js->nslots == 0 || req->kind == SCHED_REQ_NONE)
        return;
    store_demand d = {.id = id,
                      .tenant_id = tenant_id,
                      .arrival = arrival,
                      .req_kind = (int)req->kind,
                      .profile = req->profile,
                      .min_memory_bytes = req->min_memory_bytes,
                      .min_compute_slices = req->min_compute_slices,
                      .serving = serving,
                      .gang = gang,
                      .refused = refused};
    ty_err err = {0};
    if (store_demand_insert(js->env.store, &d, &err) != TY_OK)
        log_msg_limited(NULL, "error", "demand: %s", err.msg);
}

void jobs_demand_submitted(jobs_service *js, const sched_job_desc *d,
                           const char *tenant_id)
{
    if (d)
        demand_insert(js, d->id, tenant_id, d->submit_time, &d->request,
                      d->serving, d->gang, 0);
}

void svc_demand_refused(jobs_service *js, const char *tenant_id,
                        const sched_request *req, int workers)
{
    if (!js || js->nslots == 0 || req->kind == SCHED_REQ_NONE || workers > 1)
        return;
    /* Only a request no slot of the layout satisfies, whatever the
     * tenant's quota: that is demand the layout refused. */
    pthread_mutex_lock(&js->mu);
    ty_err e = {0};
    int by_layout = sched_request_check(js->sched, -1, req, &e) != TY_OK;
    pthread_mutex_unlock(&js->mu);
    char id[TY_ID_MAX];
    if (!by_layout || ty_id_new("job_", id, &e) != TY_OK)
        return;
    demand_insert(js, id, tenant_id, svc_wall(), req, 0, 0, 1);
}

void jobs_demand_stopped(jobs_service *js, const char *id)
{
    if (!js || js->nslots == 0 || !id)
        return;
    ty_err err = {0};
    if (store_demand_stopped(js->env.store, id, svc_wall(), &err) != TY_OK)
        log_msg_limited(NULL, "error", "demand: %s", err.msg);
}

void svc_demand_started(jobs_service *js, const char *id)
{
    if (!js || js->nslots == 0 || !id)
        return;
    ty_err err = {0};
    if (store_demand_started(js->env.store, id, svc_wall(), &err) != TY_OK)
        log_msg_limited(NULL, "error", "demand: %s", err.msg);
}

void svc_demand_recover(jobs_service *js)
{
    int64_t pruned = 0;
    ty_err err = {0};
    if (store_demand_recover(js->env.store,
                             svc_wall() - JOBS_DEMAND_KEEP_DAYS * 86400.0,
                             &pruned, &err) != TY_OK)
        log_msg("error", "demand: %s", err.msg);
    else if (pruned)
        log_msg("info", "demand: %lld record(s) older than %d days removed",
                (long long)pruned, JOBS_DEMAND_KEEP_DAYS);
}

/* ---- the advice ---- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The window's rows as replay records; *n how many. Tenants are numbered
 * in order of appearance. NULL when out of memory. */
static adv_record *records_of(const json_t *rows, double now, size_t *n)
{
    size_t nrows = json_array_size(rows);
    adv_record *recs = calloc(nrows + 1, sizeof *recs);
    double *known = calloc(nrows + 1, sizeof *known);
    json_t *tenants = json_object();
    if (!recs || !known || !tenants) {
        free(recs);
        free(known);
        json_decref(tenants);
        return NULL;
    }
    size_t nknown = 0, m = 0;
    for (size_t i = 0; i < nrows; i++) {
        const json_t *row = json_array_get(rows, i);
        adv_record *r = &recs[m];
        const char *tid = json_string_value(json_object_get(row, "tenant_id"));
        json_t *th = json_object_get(tenants, tid ? tid : "");
        if (!th) {
            th = json_integer((json_int_t)json_object_size(tenants));
            json_object_set_new(tenants, tid ? tid : "", th);
        }
        r->tenant = (int)json_integer_value(th);
        r->arrival = json_number_value(json_object_get(row, "arrival"));
        int kind = (int)json_integer_value(json_object_get(row, "req_kind"));
        if (kind != SCHED_REQ_ANY && kind != SCHED_REQ_PROFILE &&
            kind != SCHED_REQ_MIN)
            continue;
        r->request.kind = (sched_req_kind)kind;
        const char *prof = json_string_value(json_object_get(row, "profile"));
        snprintf(r->request.profile, sizeof r->request.profile, "%s",
                 prof ? prof : "");
        r->request.min_memory_bytes = (uint64_t)json_integer_value(
            json_object_get(row, "min_memory_bytes"));
        r->request.min_compute_slices =
            (int)json_integer_value(json_object_get(row, "min_compute_slices"));
        r->serving = json_integer_value(json_object_get(row, "serving")) != 0;
        r->gang = (int)json_integer_value(json_object_get(row, "gang"));
        int refused = json_integer_value(json_object_get(row, "refused")) != 0;
        double held = json_number_value(json_object_get(row, "held_s"));
        const json_t *last = json_object_get(row, "last_start");
        if (json_is_number(last))
            held += fmax(0, now - json_number_value(last));
        const json_t *first = json_object_get(row, "first_start");
        const json_t *ended = json_object_get(row, "ended");
        r->duration = held > 0 ? held : -1;
        if (held > 0)
            known[nknown++] = held;
        /* Left the queue without ever starting: withdrawn then. */
        if (!refused && !json_is_number(first) && json_is_number(ended))
            r->withdraw = json_number_value(ended);
        m++;
    }
    double fill = ADVICE_DEFAULT_DURATION_S;
    if (nknown) {
        qsort(known, nknown, sizeof *known, cmp_double);
        fill = known[nknown / 2];
    }
    for (size_t i = 0; i < m; i++)
        if (recs[i].duration <= 0)
            recs[i].duration = fill;
    free(known);
    json_decref(tenants);
    *n = m;
    return recs;
}

static json_t *instances_json(const adv_layout *l)
{
    json_t *a = json_array();
    for (int i = 0; l->mig && i < l->n; i++) {
        json_t *o = json_pack("{s:s}", "profile", l->inst[i].profile->name);
        json_object_set_new(o, "start",
                            l->inst[i].start >= 0
                                ? json_integer(l->inst[i].start)
                                : json_null());
        json_array_append_new(a, o);
    }
    return a;
}

static json_t *figures_json(const adv_result *r)
{
    return json_pack("{s:f, s:f, s:f, s:f, s:I, s:I, s:I, s:f, s:f}",
                     "queued_slice_hours", r->queued_slice_hours,
                     "unservable_slice_hours", r->unservable_slice_hours,
                     "held_slice_hours", r->held_slice_hours, "utilization",
                     r->utilization, "served", (json_int_t)r->served,
                     "unservable", (json_int_t)r->unservable, "preemptions",
                     (json_int_t)r->preemptions, "mean_wait_s", r->mean_wait_s,
                     "p95_wait_s", r->p95_wait_s);
}

static json_t *side_json(const adv_layout *l, const adv_result *r, int g,
                         double window_s)
{
    json_t *o = json_pack("{s:b, s:o, s:f}", "mig", l->mig && l->model,
                          "instances", instances_json(l), "queued_slice_hours",
                          r->queued_slice_hours);
    double avail = MIG_COMPUTE_SLICES * window_s / 3600.0;
    double held = g < ADV_MAX_GPUS ? r->gpu_held_slice_hours[g] : 0;
    json_object_set_new(o, "utilization",
                        json_real(avail > 0 ? held / avail : 0));
    return o;
}

/* Today's layout of GPU g of the inventory into *l; 0 when the advisor
 * cannot change it (a model without MIG profiles trainyard knows, or a
 * MIG device of a profile its model does not have), *why saying so. */
static int current_layout(const inv_gpu *gpu, adv_layout *l, char *why,
                          size_t nwhy)
{
    memset(l, 0, sizeof *l);
    const mig_model *m = mig_model_find(gpu->model);
    l->memory_bytes = gpu->memory_bytes;
    if (!m) {
        snprintf(why, nwhy,
                 "%s is not a MIG-capable model trainyard knows: it keeps "
                 "its layout",
                 gpu->model[0] ? gpu->model : gpu->name);
        return 0;
    }
    l->model = m;
    l->mig = gpu->mig_enabled;
    for (int i = 0; l->mig && i < gpu->nmig && i < MIG_COMPUTE_SLICES; i++) {
        const mig_profile *p = mig_profile_find(m, gpu->migs[i].profile);
        if (!p) {
            l->model = NULL;
            l->mig = 0;
            snprintf(why, nwhy,
                     "its MIG device %s is of no profile trainyard knows "
                     "for the %s: it keeps its layout",
                     gpu->migs[i].profile, m->model);
            return 0;
        }
        l->inst[l->n++] = (mig_placed){p, gpu->migs[i].placement_start};
    }
    return 1;
}

ty_status jobs_mig_advice(jobs_service *js, double window_s, json_t **out,
                          ty_err *err)
{
    if (!js)
        return ty_fail(err, TY_EINTERNAL, NULL,
                       "the job runner is not running");
    const jobs_env *env = &js->env;
    inventory *inv = js->inv;
    int ngpus = inv ? inv->ngpus : 0;
    if (ngpus > ADV_MAX_GPUS)
        ngpus = ADV_MAX_GPUS;
    double now = svc_wall(), from = now - window_s;
    json_t *rows = NULL;
    adv_record *recs = NULL;
    adv_layout cur[ADV_MAX_GPUS], adv[ADV_MAX_GPUS], one[ADV_MAX_GPUS];
    char why[ADV_MAX_GPUS][160];
    int capable[ADV_MAX_GPUS];
    adv_result rc, rb, r1;
    size_t n = 0;
    ty_status s = store_demand_window(env->store, from, now, ADVICE_MAX_RECORDS,
                                      &rows, err);
    if (s != TY_OK)
        return s;
    if (!(recs = records_of(rows, now, &n))) {
        json_decref(rows);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    size_t nrows = json_array_size(rows);
    json_decref(rows);
    if (inv)
        pthread_mutex_lock(&inv->mu);
    for (int g = 0; g < ngpus; g++) {
        why[g][0] = '\0';
        capable[g] =
            current_layout(&inv->gpus[g], &cur[g], why[g], sizeof why[g]);
    }
    if (inv)
        pthread_mutex_unlock(&inv->mu);
    const sched_config cfg = jobs_sched_config(env);
    s = adv_search(&cfg, cur, ngpus, recs, n, from, now, adv, &rc, &rb, err);
    if (s != TY_OK)
        goto done;
    json_t *gpus = json_array();
    for (int g = 0; g < ngpus; g++) {
        const inv_gpu *gpu = &inv->gpus[g];
        int change = !adv_layout_equal(&adv[g], &cur[g]);
        /* This GPU alone re-cut, the others as today: what applying its
         * advice by itself buys. */
        r1 = rc;
        if (change) {
            memcpy(one, cur, (size_t)ngpus * sizeof *one);
            one[g] = adv[g];
            if ((s = adv_replay(&cfg, one, ngpus, recs, n, from, now, &r1,
                                err)) != TY_OK) {
                json_decref(gpus);
                goto done;
            }
        }
        json_t *o = json_pack(
            "{s:i, s:s, s:b, s:o, s:o, s:b}", "gpu", gpu->index, "model",
            gpu->model[0] ? gpu->model : gpu->name, "mig_capable", capable[g],
            "current", side_json(&cur[g], &rc, g, window_s), "advised",
            side_json(&adv[g], &r1, g, window_s), "change", change);
        if (!capable[g])
            json_object_set_new(o, "note", json_string(why[g]));
        json_array_append_new(gpus, o);
    }
    *out = json_pack("{s:f, s:f, s:f, s:I, s:I, s:o, s:{s:o, s:o}}",
                     "window_seconds", window_s, "from", from, "to", now,
                     "records", (json_int_t)n, "records_read",
                     (json_int_t)nrows, "gpus", gpus, "totals", "current",
                     figures_json(&rc), "advised", figures_json(&rb));
    if (!*out)
        s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    else
        json_object_set_new(*out, "truncated",
                            json_boolean(nrows >= ADVICE_MAX_RECORDS));
done:
    free(recs);
    return s;
}
