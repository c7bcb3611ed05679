/*
 * service_deploy.c - the deployment controller (see deploy.h), the part of
 * the job service that keeps serving deployments.
 *
 * A deployment is a spec (jobs/deployspec.h), a model and a desired number
 * of replicas; each replica is a job of kind serving in the job service's
 * scheduler ("rep_..." ids): it holds its slot (or a CPU share) for as long
 * as it lives, counts against its tenant's quotas and fair share, and
 * outranks training (the scheduler's serving_preempt). Its process is
 * `trainyard replica` (jobs/replica.h), started by the supervisor like a
 * training worker.
 *
 * The hooks the job service calls are declared in service_internal.h.
 *
 * A replica's life: QUEUED (in the scheduler) -> STARTING (its process
 * loads the model) -> READY (it listens; requests are routed to it) ->
 * DRAINING (no new requests; stopped with SIGTERM once none is in flight;
 * it answers what it has) -> GONE (its process exited and its slot is
 * free; the record is freed once no request holds it).
 *
 * Before each scheduling pass deploy_tick: autoscales each deployment
 * between its min and max (up when the requests in flight per ready
 * replica stay above target_in_flight for scale_up_after_s, down one
 * replica per scale_down_after_s without a request), queues replicas up to
 * the desired count (a crashed one is replaced after a back-off), drains
 * the surplus, and rolls a new model out: replicas of the new generation
 * start beside the old ones, traffic moves to them once as many are ready
 * as are desired, and the old ones are drained.
 */
#include "jobs/deploy.h"
#include "jobs/service_internal.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/log.h"
#include "common/opmetrics.h"
#include "jobs/replica.h"
#include "store/blob.h"

#define REPLICA_PREFIX "rep_"
/* Seconds a replica that died before it was ready waits, doubling, before
 * the next one starts (a model that does not load must not spin). */
#define RESTART_BACKOFF_S 1.0
#define RESTART_BACKOFF_CAP_S 60.0
/* A drained replica gets this long to finish before SIGTERM even with
 * nothing in flight (a request may be on its way from a thread that picked
 * it just before the drain: picks happen under dmu, so none can, but the
 * margin costs nothing). */
#define DRAIN_GRACE_S 0.05
/* Latency buckets: 2^(i/4) microseconds, up to about 2^(95/4) us = 14 min. */
#define LAT_BUCKETS 96
/* traffic.recent covers the current window and the one before it: 10 to
 * 20 seconds. */
#define WINDOW_S 10.0

typedef enum {
    REP_QUEUED = 0,
    REP_STARTING,
    REP_READY,
    REP_DRAINING,
    REP_GONE,
} rep_state;

static const char *const rep_state_names[] = {"queued", "starting", "ready",
                                              "draining", "gone"};

typedef struct replica {
    char id[TY_ID_MAX];
    int64_t generation;
    char model_id[TY_ID_MAX]; /* what it serves (its generation's) */
    rep_state state;
    int sjob;  /* the scheduler's handle while it is there; -1 after */
    int place; /* supervisor place; -1 while queued */
    int slot;  /* inventory slot; -1 the CPU or not placed */
    int signalled;
    uint64_t serial;
    char dir[PATH_MAX];
    char socket[108];
    char device[64];
    char started_at[32];
    double drain_since;
    int in_flight; /* requests holding it (dmu) */
    struct replica *next;
} replica;

typedef struct {
    uint64_t n[LAT_BUCKETS];
    uint64_t count;
} lat_hist;

typedef struct deployment {
    char id[TY_ID_MAX];
    char tenant[TY_ID_MAX];
    char model_id[TY_ID_MAX];
    char model_path[PATH_MAX];
    deploy_spec spec;
    int64_t generation;
    char created_at[32], updated_at[32];
    int deleting;
    int desired;
    replica *reps;
    /* limits */
    double tokens, tokens_at;
    int active; /* admitted and not finished */
    /* autoscaling and restarts */
    double over_since, last_request;
    int failures;
    double restart_at;
    double cold_since; /* a request waits for a first replica since */
    double cold_start_s;
    int waiters;
    /* traffic */
    uint64_t requests, errors, rejected;
    uint64_t batches, batch_rows_sum, batch_max;
    lat_hist total, queue, compute;
    /* the recent windows: [0] the current, [1] the one before */
    struct {
        lat_hist total, queue;
        uint64_t requests, batches, batch_rows_sum;
    } win[2];
    double win_start;
    struct deployment *next;
} deployment;

/* A tenant's serving limits over all its deployments (its quota's
 * serving_* fields), read from the store when the tenant's first
 * deployment is made or restored and again after a change of its quota
 * (tenant_limits_load): never on a request's way. */
typedef struct tenant_bucket {
    char tenant[TY_ID_MAX];
    double rps; /* <= 0: none */
    double burst;
    int max_concurrency; /* <= 0: none */
    double tokens, tokens_at;
    int active;
    struct tenant_bucket *next;
} tenant_bucket;

struct deploy_books {
    pthread_mutex_t mu; /* dmu */
    tenant_bucket *tenants;
    pthread_cond_t ready;
    deployment *deps;
    /* Deployments in the list, read without dmu: a server without any
     * (most predicts) pays one atomic load on the request path. */
    atomic_int count;
};

static atomic_uint_fast64_t next_serial = 1;

static double now_mono(void) { return svc_now(); }

/* ---- latency histograms ---- */

static void lat_add(lat_hist *h, double seconds)
{
    double us = seconds * 1e6;
    int i = us <= 1 ? 0 : (int)ceil(4.0 * log2(us));
    if (i >= LAT_BUCKETS)
        i = LAT_BUCKETS - 1;
    h->n[i]++;
    h->count++;
}

/* The q-quantile in milliseconds (the bucket's upper bound), or JSON null
 * without data. */
static json_t *lat_quantile(const lat_hist *h, double q)
{
    if (!h->count)
        return json_null();
    uint64_t want = (uint64_t)ceil(q * (double)h->count), seen = 0;
    for (int i = 0; i < LAT_BUCKETS; i++) {
        seen += h->n[i];
        if (seen >= want && seen)
            return json_real(pow(2.0, i / 4.0) / 1000.0);
    }
    return json_real(pow(2.0, (LAT_BUCKETS - 1) / 4.0) / 1000.0);
}

/* The quantile over two histograms. */
static json_t *lat_quantile2(const lat_hist *a, const lat_hist *b, double q)
{
    lat_hist m = *a;
    for (int i = 0; i < LAT_BUCKETS; i++)
        m.n[i] += b->n[i];
    m.count += b->count;
    return lat_quantile(&m, q);
}

/* Moves d's recent windows on to time t. dmu held. */
static void window_roll(deployment *d, double t)
{
    if (t - d->win_start < WINDOW_S)
        return;
    if (t - d->win_start < 2 * WINDOW_S)
        d->win[1] = d->win[0];
    else
        memset(&d->win[1], 0, sizeof d->win[1]);
    memset(&d->win[0], 0, sizeof d->win[0]);
    d->win_start = t - fmod(t - d->win_start, WINDOW_S);
}

/* ---- the books ---- */

/* Which replicas count_reps counts: of the current generation, of older
 * ones (a rolling update's), or all. */
enum { GEN_CUR, GEN_OLD, GEN_ANY };

/* d's replicas of generation `which` in one of `states` (a mask of
 * 1 << rep_state). dmu held. */
static int count_reps(const deployment *d, int which, int states)
{
    int n = 0;
    for (const replica *p = d->reps; p; p = p->next) {
        int cur = p->generation == d->generation;
        if ((which == GEN_ANY || cur == (which == GEN_CUR)) &&
            (states & (1 << p->state)))
            n++;
    }
    return n;
}

#define LIVE ((1 << REP_QUEUED) | (1 << REP_STARTING) | (1 << REP_READY))
#define READY (1 << REP_READY)

static const char *dep_status(const deployment *d)
{
    int ready = count_reps(d, GEN_CUR, READY);
    int old = count_reps(d, GEN_OLD, LIVE);
    if (d->deleting)
        return "deleting";
    if (old)
        return "updating";
    if (d->desired == 0 && !count_reps(d, GEN_CUR, LIVE))
        return "scaled_to_zero";
    if (ready >= d->desired)
        return "ready";
    return d->failures ? "degraded" : "starting";
}

/* The API's Deployment document. dmu held. */
static json_t *dep_doc(const jobs_service *r, deployment *d)
{
    json_t *doc = deploy_spec_json(&d->spec);
    if (!doc)
        return NULL;
    json_object_set_new(doc, "id", json_string(d->id));
    json_object_set_new(doc, "model", json_string(d->model_id));
    json_object_set_new(doc, "generation", json_integer(d->generation));
    json_object_set_new(doc, "status", json_string(dep_status(d)));
    json_object_set_new(doc, "created_at", json_string(d->created_at));
    json_object_set_new(doc, "updated_at", json_string(d->updated_at));
    json_t *reps = json_object_get(doc, "replicas");
    if (json_is_object(reps)) {
        json_object_set_new(reps, "desired", json_integer(d->desired));
        json_object_set_new(reps, "ready",
                            json_integer(count_reps(d, GEN_ANY, READY)));
    }
    json_t *inst = json_array();
    int in_flight = 0;
    for (const replica *p = d->reps; p; p = p->next) {
        if (p->state == REP_GONE)
            continue;
        in_flight += p->in_flight;
        json_t *o = json_pack(
            "{s:s, s:s, s:I, s:s?, s:s?, s:i}", "id", p->id, "state",
            rep_state_names[p->state], "generation", (json_int_t)p->generation,
            "device", p->device[0] ? p->device : NULL, "started_at",
            p->started_at[0] ? p->started_at : NULL, "in_flight", p->in_flight);
        if (!o)
            continue;
        if (p->slot >= 0 && r->inv && p->slot < r->inv->nslots) {
            const inv_slot *s = &r->inv->slots[p->slot];
            json_object_set_new(o, "slot", json_integer(p->slot));
            json_object_set_new(o, "gpu",
                                json_integer(r->inv->gpus[s->gpu].index));
            json_object_set_new(o, "profile",
                                s->profile ? json_string(s->profile)
                                           : json_null());
        } else {
            json_object_set_new(o, "slot", json_null());
            json_object_set_new(o, "gpu", json_null());
            json_object_set_new(o, "profile", json_null());
        }
        json_array_append_new(inst, o);
    }
    json_object_set_new(doc, "instances", inst);
    json_t *t = json_pack(
        "{s:I, s:I, s:I, s:i, s:{s:o, s:o}, s:{s:o, s:o}, s:{s:o, s:o}}",
        "requests", (json_int_t)d->requests, "errors", (json_int_t)d->errors,
        "rejected", (json_int_t)d->rejected, "in_flight", in_flight,
        "latency_ms", "p50", lat_quantile(&d->total, 0.5), "p99",
        lat_quantile(&d->total, 0.99), "queue_ms", "p50",
        lat_quantile(&d->queue, 0.5), "p99", lat_quantile(&d->queue, 0.99),
        "compute_ms", "p50", lat_quantile(&d->compute, 0.5), "p99",
        lat_quantile(&d->compute, 0.99));
    if (t) {
        json_object_set_new(
            t, "batch_size",
            json_pack("{s:o, s:I}", "mean",
                      d->batches ? json_real((double)d->batch_rows_sum /
                                             (double)d->batches)
                                 : json_null(),
                      "max", (json_int_t)d->batch_max));
        json_object_set_new(t, "cold_start_s",
                            d->cold_start_s > 0 ? json_real(d->cold_start_s)
                                                : json_null());
        double t_now = now_mono();
        window_roll(d, t_now);
        uint64_t n = d->win[0].requests + d->win[1].requests;
        uint64_t nb = d->win[0].batches + d->win[1].batches;
        uint64_t rows = d->win[0].batch_rows_sum + d->win[1].batch_rows_sum;
        double span = t_now - d->win_start + WINDOW_S;
        json_object_set_new(
            t, "recent",
            json_pack("{s:f, s:I, s:{s:o, s:o}, s:o}", "window_s",
                      span < 2 * WINDOW_S ? span : 2 * WINDOW_S, "requests",
                      (json_int_t)n, "latency_ms", "p50",
                      lat_quantile2(&d->win[0].total, &d->win[1].total, 0.5),
                      "p99",
                      lat_quantile2(&d->win[0].total, &d->win[1].total, 0.99),
                      "batch_size_mean",
                      nb ? json_real((double)rows / (double)nb) : json_null()));
        json_object_set_new(doc, "traffic", t);
    }
    return doc;
}

static void replicas_gauge(const deployment *d)
{
    for (int st = REP_QUEUED; st <= REP_DRAINING; st++) {
        int n = 0;
        for (const replica *p = d->reps; p; p = p->next)
            n += p->state == (rep_state)st;
        opm_deploy_replicas(d->id, d->tenant, rep_state_names[st], n);
    }
}

static deployment *dep_find(deploy_books *b, const char *tenant,
                            const char *ref, int by_id_or_name,
                            int with_deleting)
{
    for (deployment *d = b->deps; d; d = d->next)
        if ((!d->deleting || with_deleting) && !strcmp(d->tenant, tenant) &&
            (!strcmp(d->id, ref) ||
             (by_id_or_name && !strcmp(d->spec.name, ref))))
            return d;
    return NULL;
}

static void replica_free(replica *p) { free(p); }

static void dep_free(deployment *d)
{
    while (d->reps) {
        replica *p = d->reps;
        d->reps = p->next;
        replica_free(p);
    }
    deploy_spec_free(&d->spec);
    free(d);
}

/* The model's id and blob path for tenant's reference ref. */
static ty_status model_resolve(const jobs_service *r, const char *tenant,
                               const char *ref, char id[TY_ID_MAX], char *path,
                               size_t npath, ty_err *err)
{
    char sha[65];
    json_t *doc = NULL;
    ty_status s =
        store_model_find(r->env.store, tenant, ref, id, &doc, sha, err);
    json_decref(doc);
    if (s == TY_ENOTFOUND) {
        ty_err e = {0};
        snprintf(e.field, sizeof e.field, "model");
        snprintf(e.msg, sizeof e.msg, "model %.200s not found", ref);
        *err = e;
        return TY_EINVAL;
    }
    if (s == TY_OK)
        blob_path(r->env.data_dir, sha, path, npath);
    return s;
}

/* ---- tenant limits ---- */

/* tenant's bucket, or NULL when it has none (no limits known). dmu
 * held. */
static tenant_bucket *tenant_bucket_find(deploy_books *b, const char *tenant)
{
    tenant_bucket *tb = b->tenants;
    while (tb && strcmp(tb->tenant, tenant))
        tb = tb->next;
    return tb;
}

/* Reads tenant's serving limits from the store into its bucket (made on
 * first use). Callers hold mu (so that two changes apply in order), not
 * dmu: the store is read before dmu is taken. */
static void tenant_limits_load(jobs_service *r, const char *tenant)
{
    store_tenant_limits lim;
    ty_err err = {0};
    if (store_tenant_limits_get(r->env.store, tenant, &lim, &err) != TY_OK) {
        log_msg("error", "tenant %s: serving limits not read: %s", tenant,
                err.msg);
        return;
    }
    deploy_books *b = r->deploy;
    pthread_mutex_lock(&b->mu);
    tenant_bucket *tb = tenant_bucket_find(b, tenant);
    if (!tb && (tb = calloc(1, sizeof *tb))) {
        snprintf(tb->tenant, sizeof tb->tenant, "%s", tenant);
        /* tokens_at 0: the first take fills the bucket. */
        tb->next = b->tenants;
        b->tenants = tb;
    }
    if (tb) {
        tb->rps = lim.serving_rps > 0 ? lim.serving_rps : 0;
        tb->burst = lim.serving_burst > 0 ? (double)lim.serving_burst
                    : tb->rps > 1         ? ceil(tb->rps)
                                          : 1;
        tb->max_concurrency = lim.serving_max_concurrency > 0
                                  ? (int)lim.serving_max_concurrency
                                  : 0;
    }
    pthread_mutex_unlock(&b->mu);
}

/* ---- the API's calls ---- */

ty_status jobs_deploy_create(jobs_service *r, const char *tenant,
                             const json_t *body, json_t **doc, ty_err *err)
{
    *doc = NULL;
    deployment *d = calloc(1, sizeof *d);
    if (!d)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    /* With Slurm the inventory's slots are the cluster's, and replicas run
     * on this server: on its CPU only, for now. */
    int remote = exec_is_slurm(r->exec);
    ty_status s =
        deploy_spec_parse(body, r->nslots > 0 && !remote, &d->spec, err);
    if (s == TY_OK && remote && d->spec.request.kind != SCHED_REQ_NONE)
        s = ty_fail(err, TY_EINVAL, "resources.gpu",
                    "this server runs training on a Slurm cluster and its "
                    "serving replicas on its own CPU: resources.gpu must be "
                    "none");
    if (s != TY_OK) {
        free(d);
        return s;
    }
    snprintf(d->tenant, sizeof d->tenant, "%s", tenant);
    if ((s = model_resolve(r, tenant, d->spec.model, d->model_id, d->model_path,
                           sizeof d->model_path, err)) != TY_OK)
        goto fail;
    /* Whether this host could ever hold a replica with the tenant's quota. */
    pthread_mutex_lock(&r->mu);
    int t = -1;
    s = svc_tenant_handle(r, tenant, &t, err);
    if (s == TY_OK)
        s = sched_request_check(r->sched, t, &d->spec.request, err);
    if (s == TY_OK)
        tenant_limits_load(r, tenant);
    pthread_mutex_unlock(&r->mu);
    if (s != TY_OK) {
        if (s == TY_EINVAL)
            snprintf(err->field, sizeof err->field, "resources.gpu");
        goto fail;
    }
    if ((s = ty_id_new("dep_", d->id, err)) != TY_OK)
        goto fail;
    d->generation = 1;
    d->desired = d->spec.min_replicas;
    d->last_request = now_mono();
    ty_now_iso(d->created_at);
    memcpy(d->updated_at, d->created_at, sizeof d->updated_at);
    json_t *spec = deploy_spec_json(&d->spec);
    json_object_set_new(spec, "model", json_string(d->model_id));
    deploy_books *b = r->deploy;
    pthread_mutex_lock(&b->mu);
    /* The store's unique index is the final word on names; checking here
     * first keeps a deleting deployment's name taken until it is gone. */
    for (deployment *o = b->deps; o; o = o->next)
        if (!strcmp(o->tenant, tenant) && !strcmp(o->spec.name, d->spec.name)) {
            s = ty_fail(err, TY_ECONFLICT, "name",
                        "a deployment named %s exists%s", d->spec.name,
                        o->deleting ? " (it is being deleted)" : "");
            break;
        }
    if (s == TY_OK)
        s = store_deployment_insert(r->env.store, tenant, d->id, d->spec.name,
                                    spec, d->generation, err);
    json_decref(spec);
    if (s == TY_OK) {
        d->next = b->deps;
        b->deps = d;
        atomic_fetch_add(&b->count, 1);
        *doc = dep_doc(r, d);
        log_event("info", "deployment",
                  json_pack("{s:s, s:s, s:s, s:s, s:i}", "deployment", d->id,
                            "event", "created", "tenant", tenant, "model",
                            d->model_id, "min", d->spec.min_replicas));
    }
    pthread_mutex_unlock(&b->mu);
    if (s != TY_OK)
        goto fail;
    supervisor_wake(r->sup);
    return TY_OK;
fail:
    dep_free(d);
    return s;
}

ty_status jobs_deploy_list(jobs_service *r, const char *tenant, json_t **items,
                           ty_err *err)
{
    (void)err;
    deploy_books *b = r->deploy;
    *items = json_array();
    pthread_mutex_lock(&b->mu);
    for (deployment *d = b->deps; d; d = d->next)
        if (!strcmp(d->tenant, tenant))
            json_array_insert_new(*items, 0, dep_doc(r, d));
    pthread_mutex_unlock(&b->mu);
    return TY_OK;
}

static ty_status not_found(const char *ref, ty_err *err)
{
    return ty_fail(err, TY_ENOTFOUND, NULL, "deployment %.200s not found", ref);
}

ty_status jobs_deploy_get(jobs_service *r, const char *tenant, const char *ref,
                          json_t **doc, ty_err *err)
{
    deploy_books *b = r->deploy;
    pthread_mutex_lock(&b->mu);
    deployment *d = dep_find(b, tenant, ref, 1, 1);
    *doc = d ? dep_doc(r, d) : NULL;
    pthread_mutex_unlock(&b->mu);
    return d ? TY_OK : not_found(ref, err);
}

static int batching_differs(const deploy_spec *a, const deploy_spec *b)
{
    return a->max_batch_size != b->max_batch_size ||
           a->max_queue_delay_us != b->max_queue_delay_us ||
           a->npreferred != b->npreferred ||
           memcmp(a->preferred, b->preferred,
                  (size_t)a->npreferred * sizeof a->preferred[0]);
}

ty_status jobs_deploy_patch(jobs_service *r, const char *tenant,
                            const char *ref, const json_t *body, json_t **doc,
                            ty_err *err)
{
    *doc = NULL;
    deploy_books *b = r->deploy;
    deploy_spec next;
    char model_id[TY_ID_MAX] = "", model_path[PATH_MAX] = "";
    int model_changed = 0;
    pthread_mutex_lock(&b->mu);
    deployment *d = dep_find(b, tenant, ref, 1, 0);
    if (!d) {
        pthread_mutex_unlock(&b->mu);
        return not_found(ref, err);
    }
    deploy_spec_copy(&next, &d->spec);
    pthread_mutex_unlock(&b->mu);
    /* The spec is checked and the model resolved without dmu (the store
     * may take a while); the deployment is looked up again after. */
    ty_status s = deploy_spec_patch(body, &next, &model_changed, err);
    if (s == TY_OK && model_changed)
        s = model_resolve(r, tenant, next.model, model_id, model_path,
                          sizeof model_path, err);
    if (s != TY_OK) {
        deploy_spec_free(&next);
        return s;
    }
    pthread_mutex_lock(&b->mu);
    d = dep_find(b, tenant, ref, 1, 0);
    if (!d) {
        pthread_mutex_unlock(&b->mu);
        deploy_spec_free(&next);
        return not_found(ref, err);
    }
    int64_t gen = d->generation;
    /* A different model or batching is a new generation (the replicas
     * read both when they start): it rolls. Limits, bounds, autoscaling
     * and priority take effect in place. */
    int new_model = model_changed && strcmp(model_id, d->model_id);
    if (new_model || batching_differs(&next, &d->spec))
        gen++;
    if (!new_model) {
        snprintf(model_id, sizeof model_id, "%s", d->model_id);
        snprintf(model_path, sizeof model_path, "%s", d->model_path);
    }
    json_t *spec = deploy_spec_json(&next);
    json_object_set_new(
        spec, "model",
        json_string(gen != d->generation ? model_id : d->model_id));
    s = store_deployment_update(r->env.store, tenant, d->id, spec, gen, err);
    json_decref(spec);
    if (s == TY_OK) {
        if (gen != d->generation) {
            /* replica_add takes the model of the new generation. */
            snprintf(d->model_id, sizeof d->model_id, "%s", model_id);
            snprintf(d->model_path, sizeof d->model_path, "%s", model_path);
            d->generation = gen;
            d->failures = 0;
            d->restart_at = 0;
        }
        deploy_spec_free(&d->spec);
        d->spec = next;
        memset(&next, 0, sizeof next);
        if (d->desired < d->spec.min_replicas)
            d->desired = d->spec.min_replicas;
        if (d->desired > d->spec.max_replicas)
            d->desired = d->spec.max_replicas;
        ty_now_iso(d->updated_at);
        *doc = dep_doc(r, d);
        log_event("info", "deployment",
                  json_pack("{s:s, s:s, s:I, s:s}", "deployment", d->id,
                            "event", "updated", "generation", (json_int_t)gen,
                            "model", d->model_id));
    }
    pthread_mutex_unlock(&b->mu);
    deploy_spec_free(&next);
    if (s == TY_OK)
        supervisor_wake(r->sup);
    return s;
}

ty_status jobs_deploy_delete(jobs_service *r, const char *tenant,
                             const char *ref, json_t **doc, ty_err *err)
{
    *doc = NULL;
    deploy_books *b = r->deploy;
    pthread_mutex_lock(&b->mu);
    deployment *d = dep_find(b, tenant, ref, 1, 0);
    ty_status s = d ? store_deployment_delete(r->env.store, tenant, d->id, err)
                    : not_found(ref, err);
    if (s == TY_OK) {
        d->deleting = 1;
        d->desired = 0;
        *doc = dep_doc(r, d);
        pthread_cond_broadcast(&b->ready);
        log_event(
            "info", "deployment",
            json_pack("{s:s, s:s}", "deployment", d->id, "event", "deleted"));
    }
    pthread_mutex_unlock(&b->mu);
    if (s == TY_OK)
        supervisor_wake(r->sup);
    return s;
}

int jobs_deploy_uses_model(jobs_service *r, const char *tenant,
                           const char *model_id)
{
    if (!r || !r->deploy)
        return 0;
    deploy_books *b = r->deploy;
    int used = 0;
    pthread_mutex_lock(&b->mu);
    for (deployment *d = b->deps; d && !used; d = d->next) {
        if (strcmp(d->tenant, tenant))
            continue;
        if (!strcmp(d->model_id, model_id))
            used = 1;
        for (replica *p = d->reps; p && !used; p = p->next)
            used = p->state != REP_GONE && !strcmp(p->model_id, model_id);
    }
    pthread_mutex_unlock(&b->mu);
    return used;
}

/* ---- the request path ---- */

/* Whether a replica of d not yet gone serves model (an old generation's
 * during a rolling update). dmu held. */
static int serves_model(const deployment *d, const char *model)
{
    if (!strcmp(d->model_id, model))
        return 1;
    for (const replica *p = d->reps; p; p = p->next)
        if (p->state != REP_GONE && !strcmp(p->model_id, model))
            return 1;
    return 0;
}

/* The model traffic addressed to d by name goes to now: the current
 * generation's once it has as many replicas ready as are desired (or the
 * old ones have none ready), else the old generation's. dmu held. */
static const char *route_model(const deployment *d)
{
    if (count_reps(d, GEN_CUR, READY) >= d->desired)
        return d->model_id;
    for (const replica *p = d->reps; p; p = p->next)
        if (p->generation < d->generation && p->state == REP_READY)
            return p->model_id;
    return d->model_id;
}

/* The deployment for a request, or NULL. dmu held. */
static deployment *route_find(deploy_books *b, const char *tenant,
                              const char *ref, int by_name)
{
    for (deployment *d = b->deps; d; d = d->next) {
        if (d->deleting || strcmp(d->tenant, tenant))
            continue;
        if (by_name ? !strcmp(d->spec.name, ref) || !strcmp(d->id, ref)
                    : serves_model(d, ref))
            return d;
    }
    return NULL;
}

int jobs_deploy_find(jobs_service *r, const char *tenant, const char *ref,
                     int by_name, char *model_id)
{
    if (!r || !r->deploy || !atomic_load(&r->deploy->count))
        return 0;
    deploy_books *b = r->deploy;
    pthread_mutex_lock(&b->mu);
    deployment *d = route_find(b, tenant, ref, by_name);
    if (d && model_id)
        snprintf(model_id, TY_ID_MAX, "%s", by_name ? route_model(d) : ref);
    pthread_mutex_unlock(&b->mu);
    return d != NULL;
}

void deploy_tenant_changed(jobs_service *r, const char *tenant)
{
    deploy_books *b = r->deploy;
    if (!b)
        return;
    pthread_mutex_lock(&b->mu);
    int known = tenant_bucket_find(b, tenant) != NULL;
    pthread_mutex_unlock(&b->mu);
    if (known)
        tenant_limits_load(r, tenant);
}

/* A token from a bucket of rate rps and size burst at t: 1, or 0 with
 * *retry_after the seconds until one is due. */
static int bucket_take(double *tokens, double *at, double rps, double burst,
                       double t, double *retry_after)
{
    *tokens += (t - *at) * rps;
    if (*tokens > burst)
        *tokens = burst;
    *at = t;
    if (*tokens >= 1) {
        *tokens -= 1;
        return 1;
    }
    *retry_after = (1 - *tokens) / rps;
    return 0;
}

ty_status jobs_deploy_admit(jobs_service *r, const char *tenant,
                            const char *ref, int by_name, const char *model_id,
                            deploy_call *c, double *retry_after_s, ty_err *err)
{
    memset(c, 0, sizeof *c);
    *retry_after_s = 0;
    deploy_books *b = r->deploy;
    double t = now_mono();
    pthread_mutex_lock(&b->mu);
    deployment *d = route_find(b, tenant, ref, by_name);
    if (!d) {
        pthread_mutex_unlock(&b->mu);
        return ty_fail(err, TY_ENOTFOUND, NULL, "model %.200s not found", ref);
    }
    ty_status s = TY_OK;
    const deploy_spec *sp = &d->spec;
    tenant_bucket *tb = tenant_bucket_find(b, tenant);
    if (tb && tb->max_concurrency && tb->active >= tb->max_concurrency) {
        *retry_after_s = 1;
        s = ty_fail(err, TY_ELIMIT, NULL,
                    "your serving requests are at the tenant's limit of %d "
                    "in progress at once; retry shortly",
                    tb->max_concurrency);
    } else if (sp->max_concurrency && d->active >= (int)sp->max_concurrency) {
        *retry_after_s = 1;
        s = ty_fail(err, TY_ELIMIT, NULL,
                    "deployment %s is at its concurrency limit of %u "
                    "requests in progress; retry shortly",
                    sp->name, sp->max_concurrency);
    } else if (tb && tb->rps > 0 &&
               !bucket_take(&tb->tokens, &tb->tokens_at, tb->rps, tb->burst, t,
                            retry_after_s)) {
        s = ty_fail(err, TY_ELIMIT, NULL,
                    "your serving requests are over the tenant's limit of %g "
                    "per second (burst %g); retry after %.3f s",
                    tb->rps, tb->burst, *retry_after_s);
    } else if (sp->rps > 0 && !bucket_take(&d->tokens, &d->tokens_at, sp->rps,
                                           sp->burst, t, retry_after_s)) {
        s = ty_fail(err, TY_ELIMIT, NULL,
                    "deployment %s is over its limit of %g requests per "
                    "second (burst %u); retry after %.3f s",
                    sp->name, sp->rps, sp->burst, *retry_after_s);
    }
    if (s == TY_OK) {
        d->active++;
        if (tb)
            tb->active++;
        c->tenant_bucket = tb;
        d->last_request = t;
        c->dep = d;
        c->t0 = t;
        snprintf(c->deployment_id, sizeof c->deployment_id, "%s", d->id);
        snprintf(c->deployment_name, sizeof c->deployment_name, "%s", sp->name);
        snprintf(c->model_id, sizeof c->model_id, "%s", model_id);
    } else {
        d->rejected++;
    }
    char dep_id[TY_ID_MAX];
    snprintf(dep_id, sizeof dep_id, "%s", d->id);
    pthread_mutex_unlock(&b->mu);
    /* The registry's lock is not taken under dmu. */
    if (s != TY_OK)
        opm_deploy_request(dep_id, tenant, "rejected", -1, -1, -1, 0);
    return s;
}

/* The replica a request for model goes to, among those serving it:
 * traffic stays on the old generation until the new one has as many
 * ready as are desired (or the old has none ready); then the ready replica
 * with the fewest requests in flight. A draining replica not yet told to
 * stop still answers for its model when no ready one does (a request that
 * opened the old model just before the traffic moved). dmu held. */
static replica *route_pick(deployment *d, const char *model, uint64_t avoid)
{
    int cur_ready = 0, old_ready = 0;
    for (const replica *p = d->reps; p; p = p->next)
        if (p->state == REP_READY && !strcmp(p->model_id, model)) {
            if (p->generation == d->generation)
                cur_ready++;
            else
                old_ready++;
        }
    int use_cur = cur_ready >= d->desired || old_ready == 0;
    replica *best = NULL, *draining = NULL;
    for (replica *p = d->reps; p; p = p->next) {
        if (p->serial == avoid || strcmp(p->model_id, model))
            continue;
        if (p->state == REP_DRAINING && !p->signalled &&
            (!draining || p->in_flight < draining->in_flight))
            draining = p;
        if (p->state != REP_READY ||
            (p->generation == d->generation) != use_cur)
            continue;
        if (!best || p->in_flight < best->in_flight)
            best = p;
    }
    if (!best)
        best = draining;
    /* Every other replica failed this request: the one it avoided may
     * still do. */
    if (!best && avoid)
        return route_pick(d, model, 0);
    return best;
}

ty_status jobs_deploy_pick(jobs_service *r, deploy_call *c, uint64_t avoid,
                           double wait_s, ty_err *err)
{
    deploy_books *b = r->deploy;
    deployment *d = c->dep;
    double t0 = now_mono();
    if (wait_s < 0)
        wait_s = r->env.replica_wait_s;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double whole = floor(wait_s);
    until.tv_sec += (time_t)whole;
    until.tv_nsec += (long)((wait_s - whole) * 1e9);
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&b->mu);
    replica *p;
    int asked = 0;
    int gone = 0;
    while (!(p = route_pick(d, c->model_id, avoid)) && !d->deleting) {
        /* No replica serves the request's model any more (a rolling
         * update finished since it opened it): the caller runs it. */
        if (!serves_model(d, c->model_id)) {
            gone = 1;
            break;
        }
        if (d->desired == 0) {
            /* Scaled to zero: this request starts one. */
            d->desired = 1;
            if (d->cold_since == 0)
                d->cold_since = t0;
            asked = 1;
        }
        if (asked) {
            supervisor_wake(r->sup);
            asked = 0;
        }
        d->waiters++;
        int rc = pthread_cond_timedwait(&b->ready, &b->mu, &until);
        d->waiters--;
        if (rc == ETIMEDOUT)
            break;
    }
    if (p) {
        p->in_flight++;
        c->rep = p;
        c->serial = p->serial;
        memcpy(c->socket, p->socket, sizeof c->socket);
        snprintf(c->device, sizeof c->device, "%s", p->device);
    }
    pthread_mutex_unlock(&b->mu);
    if (p)
        return TY_OK;
    if (gone)
        return ty_fail(err, TY_ENOTFOUND, NULL,
                       "deployment %s no longer serves model %s",
                       c->deployment_name, c->model_id);
    return ty_fail(err, TY_EUNAVAILABLE, NULL,
                   "no replica of deployment %s became ready within %.0f s; "
                   "try again later",
                   c->deployment_name, wait_s);
}

void jobs_deploy_unpick(jobs_service *r, deploy_call *c, int ok,
                        const rframe_call_info *info)
{
    deploy_books *b = r->deploy;
    replica *p = c->rep;
    if (!p)
        return;
    pthread_mutex_lock(&b->mu);
    p->in_flight--;
    deployment *d = c->dep;
    if (ok && info) {
        c->queue_s = (double)info->queue_ns / 1e9;
        c->compute_s = (double)info->compute_ns / 1e9;
        c->batch_rows = info->batch_rows;
        lat_add(&d->queue, c->queue_s);
        lat_add(&d->compute, c->compute_s);
        d->batches++;
        d->batch_rows_sum += info->batch_rows;
        window_roll(d, now_mono());
        lat_add(&d->win[0].queue, c->queue_s);
        d->win[0].batches++;
        d->win[0].batch_rows_sum += info->batch_rows;
        if (info->batch_rows > d->batch_max)
            d->batch_max = info->batch_rows;
    }
    pthread_mutex_unlock(&b->mu);
    c->rep = NULL;
}

void jobs_deploy_finish(jobs_service *r, deploy_call *c, int failed)
{
    deploy_books *b = r->deploy;
    deployment *d = c->dep;
    if (!d)
        return;
    double t = now_mono(), total = t - c->t0;
    pthread_mutex_lock(&b->mu);
    d->active--;
    if (c->tenant_bucket)
        ((tenant_bucket *)c->tenant_bucket)->active--;
    d->requests++;
    d->last_request = t;
    window_roll(d, t);
    d->win[0].requests++;
    if (failed) {
        d->errors++;
    } else {
        lat_add(&d->total, total);
        lat_add(&d->win[0].total, total);
    }
    char tenant[TY_ID_MAX];
    snprintf(tenant, sizeof tenant, "%s", d->tenant);
    pthread_mutex_unlock(&b->mu);
    /* d may go once dmu is released: the admission held it. */
    opm_deploy_request(c->deployment_id, tenant, failed ? "error" : "ok", total,
                       c->batch_rows ? c->queue_s : -1,
                       c->batch_rows ? c->compute_s : -1, c->batch_rows);
    c->dep = NULL;
}

/* ---- replicas ---- */

int deploy_is_replica(const char *sched_id)
{
    return !strncmp(sched_id, REPLICA_PREFIX, strlen(REPLICA_PREFIX));
}

/* Queues a new replica of d's current generation: 1, or 0 when it could
 * not (out of memory, or the scheduler refused it: logged). mu and dmu
 * held. */
static int replica_add(jobs_service *r, deployment *d)
{
    replica *p = calloc(1, sizeof *p);
    ty_err err = {0};
    int t = -1;
    if (!p || ty_id_new(REPLICA_PREFIX, p->id, &err) != TY_OK ||
        svc_tenant_handle(r, d->tenant, &t, &err) != TY_OK) {
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
                           .submit_time = svc_wall(),
                           .request = d->spec.request,
                           .serving = 1};
    if (sched_job_submit(r->sched, &desc, &p->sjob, &err) != TY_OK) {
        log_msg("error", "deployment %s: replica not queued: %s", d->id,
                err.msg);
        free(p);
        d->failures++;
        d->restart_at = now_mono() + RESTART_BACKOFF_CAP_S;
        return 0;
    }
    p->state = REP_QUEUED;
    p->next = d->reps;
    d->reps = p;
    return 1;
}

/* Takes p out of service: no new requests; it stops once none is in
 * flight. mu and dmu held. */
static void replica_drain(jobs_service *r, replica *p)
{
    if (p->state == REP_QUEUED) {
        sched_job_remove(r->sched, p->sjob);
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
static replica *replica_at(deploy_books *b, int place, deployment **dep)
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
static ty_status replica_file(const jobs_service *r, const deployment *d,
                              const replica *p, ty_err *err)
{
    const deploy_spec *sp = &d->spec;
    json_t *pref = json_array();
    for (int i = 0; i < sp->npreferred; i++)
        json_array_append_new(pref, json_integer(sp->preferred[i]));
    json_t *doc = json_pack(
        "{s:s, s:s, s:s, s:s, s:i, s:{s:i, s:i, s:o}}", RPROTO_REPLICA_ID,
        p->id, RPROTO_DEPLOYMENT_ID, d->id, RPROTO_MODEL_PATH, d->model_path,
        RPROTO_SOCKET_PATH, p->socket, RPROTO_THREADS, r->env.worker_threads,
        RPROTO_BATCHING, RPROTO_MAX_BATCH_SIZE, (int)sp->max_batch_size,
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

void deploy_replica_start(jobs_service *r, int sj, int slot, int place)
{
    deploy_books *b = r->deploy;
    job_run *w = &r->runs[place];
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
        sched_job_remove(r->sched, sj);
        return;
    }
    memset(w, 0, sizeof *w);
    w->used = 1;
    w->replica = 1;
    w->sjob = sj;
    w->slot = slot;
    w->resumed_from_epoch = -1;
    snprintf(w->job_id, sizeof w->job_id, "%s", p->id);
    snprintf(w->tenant_id, sizeof w->tenant_id, "%s", d->tenant);
    snprintf(w->dir, sizeof w->dir, "%s/%s", r->env.jobs_dir, p->id);
    r->nruns++;
    p->place = place;
    p->slot = slot;
    snprintf(p->dir, sizeof p->dir, "%s", w->dir);
    char cvd[INV_NAME_MAX];
    int has_cvd;
    svc_device_for(r, slot, p->device, sizeof p->device, cvd, sizeof cvd,
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
        (s = replica_file(r, d, p, &err)) == TY_OK)
        s = supervisor_spawn(r->sup, place, RPROTO_COMMAND, p->id, p->dir,
                             p->device, cvd, has_cvd, &pid, &err);
    if (s != TY_OK) {
        log_msg("error", "deployment %s: replica %s did not start: %s", d->id,
                p->id, err.msg);
        sched_job_remove(r->sched, sj);
        p->sjob = -1;
        p->state = REP_GONE;
        p->place = -1;
        d->failures++;
        d->restart_at = now_mono() + RESTART_BACKOFF_CAP_S;
        w->used = 0;
        r->nruns--;
        pthread_mutex_unlock(&b->mu);
        return;
    }
    p->state = REP_STARTING;
    svc_set_holder(r, slot, p->id, d->tenant);
    log_event("info", "replica",
              json_pack("{s:s, s:s, s:s, s:s, s:i, s:I}", "replica", p->id,
                        "deployment", d->id, "state", "starting", "device",
                        p->device, "pid", (int)pid, "generation",
                        (json_int_t)p->generation));
    replicas_gauge(d);
    pthread_mutex_unlock(&b->mu);
}

void deploy_replica_message(jobs_service *r, int place, wproto_msg kind,
                            const json_t *msg)
{
    deploy_books *b = r->deploy;
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
    } else if (p && kind == WPROTO_MSG_ERROR) {
        /* The message may name files of the server: the log only. */
        log_event("error", "replica",
                  json_pack("{s:s, s:s, s:O?}", "replica", p->id, "deployment",
                            d->id, "error",
                            json_object_get(msg, WPROTO_F_MESSAGE)));
    }
    pthread_mutex_unlock(&b->mu);
}

void deploy_replica_exit(jobs_service *r, int place, int ws, int lost)
{
    deploy_books *b = r->deploy;
    pthread_mutex_lock(&b->mu);
    deployment *d = NULL;
    replica *p = replica_at(b, place, &d);
    if (p) {
        int expected = p->state == REP_DRAINING;
        if (p->sjob >= 0)
            sched_job_remove(r->sched, p->sjob);
        p->sjob = -1;
        svc_set_holder(r, p->slot, NULL, NULL);
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

/* Brings d's replicas towards what it wants. mu and dmu held. */
static void reconcile(jobs_service *r, deployment *d, double t)
{
    int want = d->deleting ? 0 : d->desired;
    int live = count_reps(d, GEN_CUR, LIVE);
    while (live < want && t >= d->restart_at && replica_add(r, d))
        live++;
    /* The surplus: queued first, then starting, then the least busy. */
    for (rep_state st = REP_QUEUED; live > want && st <= REP_READY; st++) {
        for (replica *p = d->reps; p && live > want; p = p->next)
            if (p->generation == d->generation && p->state == st) {
                replica_drain(r, p);
                live--;
            }
    }
    /* A rolling update: the old generation goes once the new one is ready
     * in full. */
    if (count_reps(d, GEN_CUR, READY) >= want)
        for (replica *p = d->reps; p; p = p->next)
            if (p->generation < d->generation && p->state != REP_GONE &&
                p->state != REP_DRAINING)
                replica_drain(r, p);
    for (replica *p = d->reps; p; p = p->next)
        if (p->state == REP_DRAINING && !p->signalled && p->in_flight == 0 &&
            t - p->drain_since >= DRAIN_GRACE_S && p->place >= 0) {
            supervisor_cancel(r->sup, p->place);
            p->signalled = 1;
        }
}

void deploy_tick(jobs_service *r)
{
    deploy_books *b = r->deploy;
    if (!b)
        return;
    double t = now_mono();
    pthread_mutex_lock(&b->mu);
    for (deployment **dp = &b->deps; *dp;) {
        deployment *d = *dp;
        if (!d->deleting)
            autoscale(d, t);
        reconcile(r, d, t);
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

/* ---- start and stop ---- */

deploy_books *deploy_books_create(jobs_service *r)
{
    deploy_books *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->ready, NULL);
    /* Before the supervisor starts: nothing else uses the books yet, so
     * the restored deployments' tenants load their limits without mu. */
    r->deploy = b;
    json_t *rows = NULL;
    ty_err err = {0};
    if (store_deployment_all(r->env.store, &rows, &err) != TY_OK) {
        log_msg("error", "deployments: %s", err.msg);
        return b;
    }
    size_t i;
    json_t *row;
    json_array_foreach (rows, i, row) {
        deployment *d = calloc(1, sizeof *d);
        if (!d)
            break;
        const char *id = json_string_value(json_object_get(row, "id"));
        const char *tenant =
            json_string_value(json_object_get(row, "tenant_id"));
        json_t *spec = json_object_get(row, "spec");
        ty_status s = id && tenant ? deploy_spec_parse(spec, r->nslots > 0,
                                                       &d->spec, &err)
                                   : TY_EINVAL;
        if (s == TY_OK) {
            snprintf(d->id, sizeof d->id, "%s", id);
            snprintf(d->tenant, sizeof d->tenant, "%s", tenant);
            s = model_resolve(r, tenant, d->spec.model, d->model_id,
                              d->model_path, sizeof d->model_path, &err);
        }
        if (s != TY_OK) {
            log_msg("error", "deployment %s not restored: %s", id ? id : "?",
                    err.msg);
            dep_free(d);
            continue;
        }
        d->generation = json_integer_value(json_object_get(row, "generation"));
        snprintf(d->created_at, sizeof d->created_at, "%s",
                 json_string_value(json_object_get(row, "created_at")));
        snprintf(d->updated_at, sizeof d->updated_at, "%s",
                 json_string_value(json_object_get(row, "updated_at")));
        d->desired = d->spec.min_replicas;
        d->last_request = now_mono();
        d->next = b->deps;
        b->deps = d;
        atomic_fetch_add(&b->count, 1);
        tenant_limits_load(r, tenant);
    }
    json_decref(rows);
    return b;
}

void deploy_books_destroy(deploy_books *b)
{
    if (!b)
        return;
    while (b->tenants) {
        tenant_bucket *tb = b->tenants;
        b->tenants = tb->next;
        free(tb);
    }
    while (b->deps) {
        deployment *d = b->deps;
        b->deps = d->next;
        /* The supervisor has stopped every replica: their folders go. */
        for (replica *p = d->reps; p; p = p->next) {
            ty_err err = {0};
            if (p->state != REP_GONE && p->state != REP_QUEUED && p->dir[0])
                fs_remove_tree(p->dir, &err);
        }
        dep_free(d);
    }
    pthread_cond_destroy(&b->ready);
    pthread_mutex_destroy(&b->mu);
    free(b);
}
