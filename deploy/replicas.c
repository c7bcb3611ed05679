/*
 * replicas.c - the serving kind of the job service (jobs/kind.h): each
 * deployment's replicas queued as scheduler jobs ("rep_..." ids), started
 * in a supervisor place with replica.json written, followed through their
 * lines (ready) and exit (a crash is replaced after a back-off), and
 * before each scheduling pass (deploy_tick) autoscaled, reconciled with
 * the desired count, drained and rolled to a new generation.
 *
 * A replica's life: QUEUED (in the scheduler) -> STARTING (its process
 * loads the model) -> READY (it listens; requests are routed to it) ->
 * DRAINING (no new requests; stopped with SIGTERM once none is in flight;
 * it answers what it has) -> GONE (its process exited and its slot is
 * free; the record is freed once no request holds it).
 */
#include "deploy/replicas.h"
#include "deploy/books.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/log.h"
#include "common/opmetrics.h"
#include "node/replica.h"
#include "node/replica_gen.h"

static atomic_uint_fast64_t next_serial = 1;

/* Queues a new replica of d's current generation: 1, or 0 when it could
 * not (out of memory, or the scheduler refused it: logged). mu and dmu
 * held. */
static int replica_add(deploy_ctl *b, deployment *d)
{
    replica *p = calloc(1, sizeof *p);
    ty_err err = {0};
    int t = -1;
    if (!p || ty_id_new(REPLICA_PREFIX, p->id, &err) != TY_OK ||
        jobs_tenant_handle(b->js, d->tenant, &t, &err) != TY_OK) {
        free(p);
        return 0;
    }
    p->generation = d->generation;
    snprintf(p->model_id, sizeof p->model_id, "%s", d->model_id);
    p->place = -1;
    p->slot = -1;
    p->serial = atomic_fetch_add(&next_serial, 1);
    sched_job_desc desc = {.id = p->id,
                           .tenant = t,
                           .priority = d->spec.priority,
                           .submit_time = now_wall(),
                           .request = d->spec.request,
                           .serving = 1};
    if (sched_job_submit(jobs_sched(b->js), &desc, &p->sjob, &err) != TY_OK) {
        log_msg("error", "deployment %s: replica not queued: %s", d->id,
                err.msg);
        free(p);
        d->failures++;
        d->restart_at = now_mono() + RESTART_BACKOFF_CAP_S;
        return 0;
    }
    jobs_demand_submitted(b->js, &desc, d->tenant);
    p->state = REP_QUEUED;
    p->next = d->reps;
    d->reps = p;
    return 1;
}

/* Takes p out of service: no new requests; it stops once none is in
 * flight. mu and dmu held. */
static void replica_drain(deploy_ctl *b, replica *p)
{
    if (p->state == REP_QUEUED) {
        sched_job_remove(jobs_sched(b->js), p->sjob);
        jobs_demand_stopped(b->js, p->id);
        p->sjob = -1;
        p->state = REP_GONE;
        return;
    }
    if (p->state == REP_STARTING || p->state == REP_READY) {
        p->state = REP_DRAINING;
        p->drain_since = now_mono();
    }
}

/* The replica in supervisor place `place`, or NULL. dmu held. */
static replica *replica_at(deploy_ctl *b, int place, deployment **dep)
{
    for (deployment *d = b->deps; d; d = d->next)
        for (replica *p = d->reps; p; p = p->next)
            if (p->place == place && p->state != REP_GONE &&
                p->state != REP_QUEUED) {
                if (dep)
                    *dep = d;
                return p;
            }
    return NULL;
}

/* replica.json for p. */
static ty_status replica_file(const deploy_ctl *b, const deployment *d,
                              const replica *p, ty_err *err)
{
    const deploy_spec *sp = &d->spec;
    json_t *pref = json_array();
    for (int i = 0; i < sp->npreferred; i++)
        json_array_append_new(pref, json_integer(sp->preferred[i]));
    json_t *doc = json_pack(
        "{s:s, s:s, s:s, s:s, s:i, s:I, s:{s:i, s:i, s:o}}", RPROTO_REPLICA_ID,
        p->id, RPROTO_DEPLOYMENT_ID, d->id, RPROTO_MODEL_PATH, d->model_path,
        RPROTO_SOCKET_PATH, p->socket, RPROTO_THREADS,
        jobs_env_of(b->js)->worker_threads, RPROTO_KV_CACHE_BYTES,
        (json_int_t)jobs_env_of(b->js)->kv_cache_bytes, RPROTO_BATCHING,
        RPROTO_MAX_BATCH_SIZE, (int)sp->max_batch_size,
        RPROTO_MAX_QUEUE_DELAY_US, (int)sp->max_queue_delay_us,
        RPROTO_PREFERRED_BATCH_SIZES, pref);
    char *text = doc ? json_dumps(doc, JSON_INDENT(2)) : NULL;
    json_decref(doc);
    if (!text)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", p->dir, RPROTO_FILE);
    ty_status s = fs_write_atomic(path, text, strlen(text), 0600, err);
    free(text);
    return s;
}

/* The serving kind's start (jobs_kind.start): replica.json written and
 * the replica's process started by the supervisor. mu held. */
static ty_status replica_start(void *ctx, int place, int sj, int slot)
{
    deploy_ctl *b = ctx;
    ty_err err = {0};
    pthread_mutex_lock(&b->mu);
    replica *p = NULL;
    deployment *d = NULL;
    for (deployment *x = b->deps; x && !p; x = x->next)
        for (replica *q = x->reps; q; q = q->next)
            if (q->state == REP_QUEUED && q->sjob == sj) {
                p = q;
                d = x;
                break;
            }
    if (!p) {
        pthread_mutex_unlock(&b->mu);
        sched_job_remove(jobs_sched(b->js), sj);
        return TY_ENOTFOUND;
    }
    p->place = place;
    p->slot = slot;
    snprintf(p->dir, sizeof p->dir, "%s", jobs_run_dir(b->js, place));
    char cvd[INV_NAME_MAX];
    int has_cvd;
    jobs_device_for(b->js, slot, p->device, sizeof p->device, cvd, sizeof cvd,
                    &has_cvd);
    ty_now_iso(p->started_at);
    ty_status s = TY_OK;
    int n =
        snprintf(p->socket, sizeof p->socket, "%s/%s", p->dir, RPROTO_SOCKET);
    if (n < 0 || (size_t)n >= sizeof p->socket)
        s = ty_fail(&err, TY_EINVAL, NULL,
                    "the data folder's path is too long for a replica's "
                    "unix socket (at most %zu bytes in all)",
                    sizeof p->socket - 1);
    pid_t pid = -1;
    if (s == TY_OK && (s = fs_mkdirs(p->dir, 0700, &err)) == TY_OK &&
        (s = replica_file(b, d, p, &err)) == TY_OK)
        s = supervisor_spawn(jobs_supervisor(b->js), place, RPROTO_COMMAND,
                             p->id, p->dir, p->device, cvd, has_cvd, &pid,
                             &err);
    if (s != TY_OK) {
        log_msg("error", "deployment %s: replica %s did not start: %s", d->id,
                p->id, err.msg);
        sched_job_remove(jobs_sched(b->js), sj);
        p->sjob = -1;
        p->state = REP_GONE;
        p->place = -1;
        d->failures++;
        d->restart_at = now_mono() + RESTART_BACKOFF_CAP_S;
        pthread_mutex_unlock(&b->mu);
        return s;
    }
    p->state = REP_STARTING;
    jobs_slot_holder(b->js, slot, p->id, d->tenant);
    jobs_run_owner(b->js, place, d->id);
    log_event("info", "replica",
              json_pack("{s:s, s:s, s:s, s:s, s:i, s:I}", "replica", p->id,
                        "deployment", d->id, "state", "starting", "device",
                        p->device, "pid", (int)pid, "generation",
                        (json_int_t)p->generation));
    replicas_gauge(d);
    pthread_mutex_unlock(&b->mu);
    return TY_OK;
}

/* The serving kind's message: a replica's line. mu not held. */
/* What d's live replicas' engines hold, as their last heartbeats said,
 * into the deployment's gauges. dmu held. */
static void gen_gauges(const deployment *d)
{
    engines_sum e;
    if (sum_engines(d, &e) || d->gen_requests)
        opm_deploy_gen_engines(d->id, e.sequences, e.waiting, e.kv_used,
                               e.kv_total, e.kv_cached);
}

static long gen_field(const json_t *g, const char *key)
{
    const json_t *v = json_object_get(g, key);
    return json_is_integer(v) && json_integer_value(v) >= 0
               ? (long)json_integer_value(v)
               : 0;
}

/* A heartbeat's engine figures (replica.h's "generation"), into p. */
static void gen_figures(deployment *d, replica *p, const json_t *g)
{
    if (!json_is_object(g))
        return;
    p->gen.have = 1;
    p->gen.sequences = gen_field(g, RPROTO_F_GEN_SEQUENCES);
    p->gen.waiting = gen_field(g, RPROTO_F_GEN_WAITING);
    p->gen.kv_used = gen_field(g, RPROTO_F_GEN_KV_USED);
    p->gen.kv_total = gen_field(g, RPROTO_F_GEN_KV_TOTAL);
    p->gen.kv_cached = gen_field(g, RPROTO_F_GEN_KV_CACHED);
    p->gen.prompt = (uint64_t)gen_field(g, RPROTO_F_GEN_PROMPT);
    p->gen.generated = (uint64_t)gen_field(g, RPROTO_F_GEN_GENERATED);
    p->gen.prefix_hit = (uint64_t)gen_field(g, RPROTO_F_GEN_PREFIX_HIT);
    gen_gauges(d);
}

static void replica_message(void *ctx, int place, wproto_msg kind,
                            const json_t *msg)
{
    deploy_ctl *b = ctx;
    pthread_mutex_lock(&b->mu);
    deployment *d = NULL;
    replica *p = replica_at(b, place, &d);
    if (p && kind == WPROTO_MSG_READY && p->state == REP_STARTING) {
        p->state = REP_READY;
        const char *dev =
            json_string_value(json_object_get(msg, WPROTO_F_DEVICE));
        if (dev)
            snprintf(p->device, sizeof p->device, "%s", dev);
        d->failures = 0;
        if (d->cold_since > 0) {
            d->cold_start_s = now_mono() - d->cold_since;
            d->cold_since = 0;
        }
        log_event("info", "replica",
                  json_pack("{s:s, s:s, s:s, s:O?}", "replica", p->id,
                            "deployment", d->id, "state", "ready",
                            "load_seconds",
                            json_object_get(msg, RPROTO_F_LOAD_SECONDS)));
        replicas_gauge(d);
        pthread_cond_broadcast(&b->ready);
    } else if (p && kind == WPROTO_MSG_HEARTBEAT) {
        gen_figures(d, p, json_object_get(msg, RPROTO_F_GENERATION));
    } else if (p && kind == WPROTO_MSG_ERROR) {
        /* The message may name files of the server: the log only. */
        log_event_limited(p->id, "error", "replica",
                          json_pack("{s:s, s:s, s:O?}", "replica", p->id,
                                    "deployment", d->id, "error",
                                    json_object_get(msg, WPROTO_F_MESSAGE)));
    }
    pthread_mutex_unlock(&b->mu);
}

/* The serving kind's exit: a replica's process ended. mu held. */
static void replica_exit(void *ctx, int place, int ws, int lost)
{
    deploy_ctl *b = ctx;
    pthread_mutex_lock(&b->mu);
    deployment *d = NULL;
    replica *p = replica_at(b, place, &d);
    if (p) {
        int expected = p->state == REP_DRAINING;
        if (p->sjob >= 0)
            sched_job_remove(jobs_sched(b->js), p->sjob);
        p->sjob = -1;
        jobs_slot_holder(b->js, p->slot, NULL, NULL);
        if (!expected) {
            d->failures++;
            double delay = RESTART_BACKOFF_S * pow(2, d->failures - 1);
            d->restart_at =
                now_mono() +
                (delay < RESTART_BACKOFF_CAP_S ? delay : RESTART_BACKOFF_CAP_S);
        }
        log_event(
            expected ? "info" : "error", "replica",
            json_pack("{s:s, s:s, s:s, s:i, s:b}", "replica", p->id,
                      "deployment", d->id, "state", "exited", "status",
                      WIFEXITED(ws) ? WEXITSTATUS(ws) : -(int)WTERMSIG(ws),
                      "lost", lost));
        p->state = REP_GONE;
        p->place = -1;
        /* A replica that stopped as asked leaves nothing; one that died
         * keeps its folder for its worker.log. */
        ty_err err = {0};
        if (expected && p->dir[0] && fs_remove_tree(p->dir, &err) != TY_OK)
            log_msg("warn", "replica %s: %s", p->id, err.msg);
        if (!expected)
            unlink(p->socket);
        replicas_gauge(d);
        gen_gauges(d);
        /* Requests waiting for a replica look again (another may be
         * ready, or they keep waiting for the replacement). */
        pthread_cond_broadcast(&b->ready);
    }
    pthread_mutex_unlock(&b->mu);
}

/* Autoscaling of d at t. dmu held. */
static void autoscale(deployment *d, double t)
{
    const deploy_spec *sp = &d->spec;
    int ready = 0, in_flight = 0;
    for (const replica *p = d->reps; p; p = p->next)
        if (p->state == REP_READY) {
            ready++;
            in_flight += p->in_flight;
        }
    double load = ready ? (double)in_flight / ready : 0;
    /* The latency signal: the recent median wait in the batchers. */
    double queue_ms = 0;
    if (sp->target_queue_ms > 0) {
        window_roll(d, t);
        json_t *q = lat_quantile2(&d->win[0].queue, &d->win[1].queue, 0.5);
        queue_ms = json_is_number(q) ? json_number_value(q) : 0;
        json_decref(q);
    }
    int over = load > sp->target_in_flight ||
               (sp->target_queue_ms > 0 && queue_ms > sp->target_queue_ms);
    if (over && d->desired < sp->max_replicas &&
        count_reps(d, GEN_CUR, LIVE) >= d->desired) {
        if (d->over_since == 0) {
            d->over_since = t;
        } else if (t - d->over_since >= sp->scale_up_after_s) {
            d->desired++;
            d->over_since = 0;
            log_event("info", "deployment",
                      json_pack("{s:s, s:s, s:i, s:f, s:f}", "deployment",
                                d->id, "event", "scale_up", "desired",
                                d->desired, "in_flight_per_replica", load,
                                "queue_ms_p50", queue_ms));
        }
    } else {
        d->over_since = 0;
    }
    if (d->desired > sp->min_replicas && d->active == 0 && in_flight == 0 &&
        d->waiters == 0 && t - d->last_request >= sp->scale_down_after_s) {
        d->desired--;
        d->last_request = t; /* one replica per idle period */
        log_event("info", "deployment",
                  json_pack("{s:s, s:s, s:i}", "deployment", d->id, "event",
                            "scale_down", "desired", d->desired));
    }
}

/* Whether p serves from a slot the scheduler drains (a MIG layout change,
 * jobs/miglayout.h): it moves, make before break. mu held. */
static int on_draining_slot(deploy_ctl *b, const replica *p)
{
    return (p->state == REP_STARTING || p->state == REP_READY) &&
           p->slot >= 0 &&
           sched_slot_state(jobs_sched(b->js), p->slot) == SCHED_SLOT_DRAINING;
}

/* Replicas that move off a draining slot: each is counted out of the
 * live ones, so a replacement is queued (the scheduler places it on a
 * slot in use), and it drains, as a scaled-down one does, once the
 * deployment has as many replicas ready elsewhere as it wants. mu and dmu
 * held. */
static int move_off_draining(deploy_ctl *b, deployment *d, int want)
{
    int moving = 0, ready = 0;
    for (replica *p = d->reps; p; p = p->next) {
        if (on_draining_slot(b, p))
            moving += p->generation == d->generation;
        else if (p->generation == d->generation && p->state == REP_READY)
            ready++;
    }
    if (moving && ready >= want)
        for (replica *p = d->reps; p; p = p->next)
            if (on_draining_slot(b, p)) {
                log_event("info", "replica",
                          json_pack("{s:s, s:s, s:s, s:i}", "replica", p->id,
                                    "deployment", d->id, "state", "moved",
                                    "slot", p->slot));
                replica_drain(b, p);
            }
    return moving;
}

/* Brings d's replicas towards what it wants. mu and dmu held. */
static void reconcile(deploy_ctl *b, deployment *d, double t)
{
    int want = d->deleting ? 0 : d->desired;
    int live = count_reps(d, GEN_CUR, LIVE) - move_off_draining(b, d, want);
    while (live < want && t >= d->restart_at && replica_add(b, d))
        live++;
    /* The surplus: queued first, then starting, then the least busy. */
    for (rep_state st = REP_QUEUED; live > want && st <= REP_READY; st++) {
        for (replica *p = d->reps; p && live > want; p = p->next)
            if (p->generation == d->generation && p->state == st) {
                replica_drain(b, p);
                live--;
            }
    }
    /* A rolling update: the old generation goes once the new one is ready
     * in full. */
    if (count_reps(d, GEN_CUR, READY) >= want)
        for (replica *p = d->reps; p; p = p->next)
            if (p->generation < d->generation && p->state != REP_GONE &&
                p->state != REP_DRAINING)
                replica_drain(b, p);
    for (replica *p = d->reps; p; p = p->next)
        if (p->state == REP_DRAINING && !p->signalled && p->in_flight == 0 &&
            t - p->drain_since >= DRAIN_GRACE_S && p->place >= 0) {
            supervisor_cancel(jobs_supervisor(b->js), p->place);
            p->signalled = 1;
        }
}

/* Notes why d's oldest queued replica waits (the scheduler's report of
 * it, as the last pass left the books), or that none does. Only the
 * summary is kept: it names no job and no other tenant. mu and dmu held. */
static void waiting_note(deploy_ctl *b, deployment *d)
{
    const replica *oldest = NULL;
    for (const replica *p = d->reps; p; p = p->next)
        if (p->state == REP_QUEUED && p->sjob >= 0 &&
            p->generation == d->generation)
            oldest = p; /* the list is newest first */
    d->waiting[0] = d->waiting_reason[0] = '\0';
    sched_wait w;
    if (!oldest || sched_job_wait(jobs_sched(b->js), oldest->sjob, &w) != TY_OK)
        return;
    sched_wait_summary(jobs_sched(b->js), &w, d->waiting, sizeof d->waiting);
    snprintf(d->waiting_reason, sizeof d->waiting_reason, "%s",
             sched_wait_reason_name(w.reason));
}

/* The serving kind's tick, before each scheduling pass. mu held. */
static void deploy_tick(void *ctx)
{
    deploy_ctl *b = ctx;
    double t = now_mono();
    pthread_mutex_lock(&b->mu);
    for (deployment **dp = &b->deps; *dp;) {
        deployment *d = *dp;
        if (!d->deleting)
            autoscale(d, t);
        reconcile(b, d, t);
        waiting_note(b, d);
        for (replica **pp = &d->reps; *pp;) {
            replica *p = *pp;
            if (p->state == REP_GONE && p->in_flight == 0) {
                *pp = p->next;
                replica_free(p);
            } else {
                pp = &p->next;
            }
        }
        if (d->deleting && !d->reps && d->active == 0 && d->waiters == 0) {
            *dp = d->next;
            atomic_fetch_sub(&b->count, 1);
            opm_deploy_forget(d->id);
            dep_free(d);
            continue;
        }
        dp = &d->next;
    }
    pthread_mutex_unlock(&b->mu);
}

/* The serving kind's tenant_changed: a PATCH of the tenant's quota. mu
 * held. */
static void deploy_tenant_changed(void *ctx, const char *tenant)
{
    deploy_ctl *b = ctx;
    pthread_mutex_lock(&b->mu);
    int known = tenant_bucket_find(b, tenant) != NULL;
    pthread_mutex_unlock(&b->mu);
    if (known)
        tenant_limits_load(b, tenant);
}

/* The serving kind's cancel: the supervisor stops the replica. mu held. */
static void replica_cancel(void *ctx, int place)
{
    deploy_ctl *b = ctx;
    supervisor_cancel(jobs_supervisor(b->js), place);
}

jobs_kind replicas_kind(deploy_ctl *b)
{
    return (jobs_kind){.name = "serving",
                       .id_prefix = REPLICA_PREFIX,
                       .ctx = b,
                       .start = replica_start,
                       .message = replica_message,
                       .exit = replica_exit,
                       .cancel = replica_cancel,
                       .tick = deploy_tick,
                       .tenant_changed = deploy_tenant_changed};
}
