/*
 * books.c - the deployments controller's shared helpers (see books.h):
 * latency histograms and their windows, counting replicas, a deployment's
 * status, finding and freeing records, resolving a model, and the
 * tenants' serving limits.
 */
#include "deploy/books.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/opmetrics.h"
#include "jobs/kind.h"
#include "store/blob.h"

/* ---- latency histograms ---- */

const char *const rep_state_names[] = {"queued", "starting", "ready",
                                       "draining", "gone"};

void lat_add(lat_hist *h, double seconds)
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
json_t *lat_quantile(const lat_hist *h, double q)
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
json_t *lat_quantile2(const lat_hist *a, const lat_hist *b, double q)
{
    lat_hist m = *a;
    for (int i = 0; i < LAT_BUCKETS; i++)
        m.n[i] += b->n[i];
    m.count += b->count;
    return lat_quantile(&m, q);
}

/* Moves d's recent windows on to time t. dmu held. */
void window_roll(deployment *d, double t)
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

/* d's replicas of generation `which` in one of `states` (a mask of
 * 1 << rep_state). dmu held. */
int sum_engines(const deployment *d, engines_sum *sum)
{
    int n = 0;
    *sum = (engines_sum){0};
    for (const replica *p = d->reps; p; p = p->next)
        if (p->gen.have && p->state != REP_GONE) {
            n++;
            sum->sequences += p->gen.sequences;
            sum->waiting += p->gen.waiting;
            sum->kv_used += p->gen.kv_used;
            sum->kv_total += p->gen.kv_total;
            sum->kv_cached += p->gen.kv_cached;
        }
    return n;
}

int count_reps(const deployment *d, int which, int states)
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

const char *dep_status(const deployment *d)
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

void replicas_gauge(const deployment *d)
{
    for (int st = REP_QUEUED; st <= REP_DRAINING; st++) {
        int n = 0;
        for (const replica *p = d->reps; p; p = p->next)
            n += p->state == (rep_state)st;
        opm_deploy_replicas(d->id, d->tenant, rep_state_names[st], n);
    }
}

deployment *dep_find(deploy_ctl *b, const char *tenant, const char *ref,
                     int by_id_or_name, int with_deleting)
{
    for (deployment *d = b->deps; d; d = d->next)
        if ((!d->deleting || with_deleting) && !strcmp(d->tenant, tenant) &&
            (!strcmp(d->id, ref) ||
             (by_id_or_name && !strcmp(d->spec.name, ref))))
            return d;
    return NULL;
}

void replica_free(replica *p) { free(p); }

void dep_free(deployment *d)
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
ty_status model_resolve(const deploy_ctl *b, const char *tenant,
                        const char *ref, char id[TY_ID_MAX], char *path,
                        size_t npath, ty_err *err)
{
    char sha[65];
    json_t *doc = NULL;
    ty_status s = store_model_find(jobs_env_of(b->js)->store, tenant, ref, id,
                                   &doc, sha, err);
    json_decref(doc);
    if (s == TY_ENOTFOUND) {
        ty_err e = {0};
        snprintf(e.field, sizeof e.field, "model");
        snprintf(e.msg, sizeof e.msg, "no model with id or name '%.200s'", ref);
        *err = e;
        return TY_EINVAL;
    }
    if (s == TY_OK)
        blob_path(jobs_env_of(b->js)->data_dir, sha, path, npath);
    return s;
}

/* ---- tenant limits ---- */

/* tenant's bucket, or NULL when it has none (no limits known). dmu
 * held. */
tenant_bucket *tenant_bucket_find(deploy_ctl *b, const char *tenant)
{
    tenant_bucket *tb = b->tenants;
    while (tb && strcmp(tb->tenant, tenant))
        tb = tb->next;
    return tb;
}

/* Reads tenant's serving limits from the store into its bucket (made on
 * first use). Callers hold mu (so that two changes apply in order), not
 * dmu: the store is read before dmu is taken. */
void tenant_limits_load(deploy_ctl *b, const char *tenant)
{
    store_tenant_limits lim;
    ty_err err = {0};
    if (store_tenant_limits_get(jobs_env_of(b->js)->store, tenant, &lim,
                                &err) != TY_OK) {
        log_msg("error", "tenant %s: serving limits not read: %s", tenant,
                err.msg);
        return;
    }
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
        tb->tokens_per_minute = lim.serving_tokens_per_minute > 0
                                    ? (double)lim.serving_tokens_per_minute
                                    : 0;
    }
    pthread_mutex_unlock(&b->mu);
}
