/*
 * controller.c - the deployment controller (see deploy.h): it keeps
 * serving deployments, beside the job service that runs their replicas.
 *
 * A deployment is a spec (deploy/deployspec.h), a model and a desired number
 * of replicas; each replica is a job of kind serving in the job service's
 * scheduler ("rep_..." ids): it holds its slot (or a CPU share) for as long
 * as it lives, counts against its tenant's quotas and fair share, and
 * outranks training (the scheduler's serving_preempt). Its process is
 * `trainyard replica` (node/replica.h), started by the supervisor like a
 * training worker.
 *
 * This file has the API's calls (create, list, get, patch, delete), the
 * documents they give, and start and stop: deploy_ctl_create reads the
 * stored deployments and adds the serving kind (replicas.c) to the job
 * service, which calls its hooks and never this controller by name. A
 * request's way is route.c's; the books all three share are books.h's.
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
#include "deploy/deploy.h"
#include "deploy/books.h"
#include "deploy/replicas.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "common/log.h"
#include "common/opmetrics.h"
#include "jobs/kind.h"

/* A replica's engine, as its last heartbeat said (its tokens counted
 * since it started). */
static json_t *engine_of(const replica *p)
{
    return json_pack(
        "{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "sequences",
        (json_int_t)p->gen.sequences, "waiting", (json_int_t)p->gen.waiting,
        "kv_blocks_used", (json_int_t)p->gen.kv_used, "kv_blocks_total",
        (json_int_t)p->gen.kv_total, "kv_blocks_cached",
        (json_int_t)p->gen.kv_cached, "prompt_tokens", (json_int_t)p->gen.prompt,
        "generated_tokens", (json_int_t)p->gen.generated,
        "prefix_cache_hit_tokens", (json_int_t)p->gen.prefix_hit);
}

/* d's text generation: what the server took from its replicas (requests,
 * tokens, time to first token, inter-token latency; all time and the
 * recent windows, with tokens per second) and what their engines hold
 * now (their last heartbeats; the cache's blocks used, cached and in all
 * summed over the live replicas). JSON null for a deployment that never
 * generated and whose replicas have no engine (not a language model).
 * dmu held. */
static json_t *generate_of(deployment *d)
{
    engines_sum e;
    if (!sum_engines(d, &e) && !d->gen_requests)
        return json_null();
    const double t = now_mono();
    window_roll(d, t);
    const double span0 = t - d->win_start + WINDOW_S;
    const double span = span0 < 2 * WINDOW_S ? span0 : 2 * WINDOW_S;
    const uint64_t recent = d->win[0].gen_written + d->win[1].gen_written;
    return json_pack(
        "{s:I, s:I, s:I, s:{s:o, s:o}, s:{s:o, s:o}, s:{s:f, s:I, s:f, "
        "s:{s:o, s:o}, s:{s:o, s:o}}, s:I, s:I, s:I, s:I, s:I}",
        "requests", (json_int_t)d->gen_requests, "prompt_tokens",
        (json_int_t)d->gen_prompt, "generated_tokens",
        (json_int_t)d->gen_written, "ttft_ms", "p50",
        lat_quantile(&d->ttft, 0.5), "p99", lat_quantile(&d->ttft, 0.99),
        "itl_ms", "p50", lat_quantile(&d->itl, 0.5), "p99",
        lat_quantile(&d->itl, 0.99), "recent", "window_s", span,
        "generated_tokens", (json_int_t)recent, "tokens_per_second",
        span > 0 ? (double)recent / span : 0.0, "ttft_ms", "p50",
        lat_quantile2(&d->win[0].ttft, &d->win[1].ttft, 0.5), "p99",
        lat_quantile2(&d->win[0].ttft, &d->win[1].ttft, 0.99), "itl_ms",
        "p50", lat_quantile2(&d->win[0].itl, &d->win[1].itl, 0.5), "p99",
        lat_quantile2(&d->win[0].itl, &d->win[1].itl, 0.99), "sequences",
        (json_int_t)e.sequences, "waiting", (json_int_t)e.waiting,
        "kv_blocks_used", (json_int_t)e.kv_used, "kv_blocks_total",
        (json_int_t)e.kv_total, "kv_blocks_cached", (json_int_t)e.kv_cached);
}

/* The API's Deployment document. dmu held. */
static json_t *dep_doc(const deploy_ctl *b, deployment *d)
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
        /* Why a replica it asked for has not started: the scheduler's
         * words for a queued job (null while none waits). */
        json_object_set_new(reps, "waiting_reason",
                            d->waiting[0] ? json_string(d->waiting)
                                          : json_null());
        json_object_set_new(reps, "waiting",
                            d->waiting_reason[0]
                                ? json_string(d->waiting_reason)
                                : json_null());
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
        const inventory *inv = jobs_env_of(b->js)->inventory;
        if (p->slot >= 0 && inv && p->slot < inv->nslots) {
            const inv_slot *s = &inv->slots[p->slot];
            json_object_set_new(o, "slot", json_integer(p->slot));
            json_object_set_new(o, "gpu",
                                json_integer(inv->gpus[s->gpu].index));
            json_object_set_new(o, "profile",
                                s->profile ? json_string(s->profile)
                                           : json_null());
        } else {
            json_object_set_new(o, "slot", json_null());
            json_object_set_new(o, "gpu", json_null());
            json_object_set_new(o, "profile", json_null());
        }
        if (p->gen.have)
            json_object_set_new(o, "generate", engine_of(p));
        json_array_append_new(inst, o);
    }
    json_object_set_new(doc, "instances", inst);
    json_object_set_new(doc, "generate", generate_of(d));
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

/* ---- the API's calls ---- */

ty_status deploy_create(deploy_ctl *b, const char *tenant, const json_t *body,
                        json_t **doc, ty_err *err)
{
    *doc = NULL;
    deployment *d = calloc(1, sizeof *d);
    if (!d)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    /* With Slurm the inventory's slots are the cluster's, and replicas run
     * on this server: on its CPU only, for now. */
    int remote = jobs_on_cluster(b->js);
    ty_status s = deploy_spec_parse(body, jobs_nslots(b->js) > 0 && !remote,
                                    &d->spec, err);
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
    if ((s = model_resolve(b, tenant, d->spec.model, d->model_id, d->model_path,
                           sizeof d->model_path, err)) != TY_OK)
        goto fail;
    /* Whether this host could ever hold a replica with the tenant's quota. */
    jobs_lock(b->js);
    int t = -1;
    s = jobs_tenant_handle(b->js, tenant, &t, err);
    if (s == TY_OK)
        s = sched_request_check(jobs_sched(b->js), t, &d->spec.request, err);
    if (s == TY_OK)
        tenant_limits_load(b, tenant);
    jobs_unlock(b->js);
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
        s = store_deployment_insert(jobs_env_of(b->js)->store, tenant, d->id,
                                    d->spec.name, spec, d->generation, err);
    json_decref(spec);
    if (s == TY_OK) {
        d->next = b->deps;
        b->deps = d;
        atomic_fetch_add(&b->count, 1);
        *doc = dep_doc(b, d);
        log_event("info", "deployment",
                  json_pack("{s:s, s:s, s:s, s:s, s:i}", "deployment", d->id,
                            "event", "created", "tenant", tenant, "model",
                            d->model_id, "min", d->spec.min_replicas));
    }
    pthread_mutex_unlock(&b->mu);
    if (s != TY_OK)
        goto fail;
    supervisor_wake(jobs_supervisor(b->js));
    return TY_OK;
fail:
    dep_free(d);
    return s;
}

ty_status deploy_list(deploy_ctl *b, const char *tenant, json_t **items,
                      ty_err *err)
{
    (void)err;
    *items = json_array();
    pthread_mutex_lock(&b->mu);
    for (deployment *d = b->deps; d; d = d->next)
        if (!strcmp(d->tenant, tenant))
            json_array_insert_new(*items, 0, dep_doc(b, d));
    pthread_mutex_unlock(&b->mu);
    return TY_OK;
}

static ty_status not_found(const char *ref, ty_err *err)
{
    return ty_fail(err, TY_ENOTFOUND, NULL, "deployment %.200s not found", ref);
}

ty_status deploy_get(deploy_ctl *b, const char *tenant, const char *ref,
                     json_t **doc, ty_err *err)
{
    pthread_mutex_lock(&b->mu);
    deployment *d = dep_find(b, tenant, ref, 1, 1);
    *doc = d ? dep_doc(b, d) : NULL;
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

ty_status deploy_patch(deploy_ctl *b, const char *tenant, const char *ref,
                       const json_t *body, json_t **doc, ty_err *err)
{
    *doc = NULL;
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
        s = model_resolve(b, tenant, next.model, model_id, model_path,
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
    s = store_deployment_update(jobs_env_of(b->js)->store, tenant, d->id, spec,
                                gen, err);
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
        *doc = dep_doc(b, d);
        log_event("info", "deployment",
                  json_pack("{s:s, s:s, s:I, s:s}", "deployment", d->id,
                            "event", "updated", "generation", (json_int_t)gen,
                            "model", d->model_id));
    }
    pthread_mutex_unlock(&b->mu);
    deploy_spec_free(&next);
    if (s == TY_OK)
        supervisor_wake(jobs_supervisor(b->js));
    return s;
}

ty_status deploy_delete(deploy_ctl *b, const char *tenant, const char *ref,
                        json_t **doc, ty_err *err)
{
    *doc = NULL;
    pthread_mutex_lock(&b->mu);
    deployment *d = dep_find(b, tenant, ref, 1, 0);
    ty_status s = d ? store_deployment_delete(jobs_env_of(b->js)->store, tenant,
                                              d->id, err)
                    : not_found(ref, err);
    if (s == TY_OK) {
        d->deleting = 1;
        d->desired = 0;
        *doc = dep_doc(b, d);
        pthread_cond_broadcast(&b->ready);
        log_event(
            "info", "deployment",
            json_pack("{s:s, s:s}", "deployment", d->id, "event", "deleted"));
    }
    pthread_mutex_unlock(&b->mu);
    if (s == TY_OK)
        supervisor_wake(jobs_supervisor(b->js));
    return s;
}

int deploy_uses_model(deploy_ctl *b, const char *tenant, const char *model_id)
{
    if (!b)
        return 0;
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

/* Reads the stored deployments into b: their replicas are queued by the
 * first tick. One that cannot be restored is logged and left out. */
static void deployments_restore(deploy_ctl *b)
{
    json_t *rows = NULL;
    ty_err err = {0};
    if (store_deployment_all(jobs_env_of(b->js)->store, &rows, &err) != TY_OK) {
        log_msg("error", "deployments: %s", err.msg);
        return;
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
        ty_status s = id && tenant
                          ? deploy_spec_parse(spec, jobs_nslots(b->js) > 0,
                                              &d->spec, &err)
                          : TY_EINVAL;
        if (s == TY_OK) {
            snprintf(d->id, sizeof d->id, "%s", id);
            snprintf(d->tenant, sizeof d->tenant, "%s", tenant);
            s = model_resolve(b, tenant, d->spec.model, d->model_id,
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
        tenant_limits_load(b, tenant);
    }
    json_decref(rows);
}

ty_status deploy_ctl_create(struct jobs_service *js, deploy_ctl **out,
                            ty_err *err)
{
    deploy_ctl *b = calloc(1, sizeof *b);
    if (!b)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    b->js = js;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->ready, NULL);
    /* Before the service runs: nothing else uses the books yet, so the
     * restored deployments' tenants load their limits without mu. */
    deployments_restore(b);
    jobs_kind kind = replicas_kind(b);
    ty_status s = jobs_kind_add(js, &kind, err);
    if (s != TY_OK) {
        deploy_ctl_destroy(b);
        return s;
    }
    *out = b;
    return TY_OK;
}

void deploy_ctl_destroy(deploy_ctl *b)
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

int deploy_replica_owner(deploy_ctl *b, const char *tenant, const char *rep_id,
                         char *dep_id, char *dep_name)
{
    if (!b || strncmp(rep_id, REPLICA_PREFIX, strlen(REPLICA_PREFIX)))
        return 0;
    int found = 0;
    pthread_mutex_lock(&b->mu);
    for (const deployment *d = b->deps; d && !found; d = d->next) {
        if (tenant && strcmp(d->tenant, tenant))
            continue;
        for (const replica *p = d->reps; p && !found; p = p->next)
            if (!strcmp(p->id, rep_id)) {
                snprintf(dep_id, TY_ID_MAX, "%s", d->id);
                snprintf(dep_name, DEPLOY_NAME_MAX, "%s", d->spec.name);
                found = 1;
            }
    }
    pthread_mutex_unlock(&b->mu);
    return found;
}
