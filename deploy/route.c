/*
 * route.c - a predict's way through a deployment (see deploy.h's request
 * path): the deployment found by name or model, its tenant's and its own
 * token buckets (requests a second, generation tokens a minute) and
 * concurrency limits applied, a ready replica of the request's model
 * picked (the one with the fewest requests in flight, waiting for one on a
 * cold start, which scales a deployment up from zero), and the request's
 * figures counted (and unused generation tokens given back) when it ends.
 * Everything here runs on request threads under dmu only: never under the
 * job service's mutex.
 */
#include "deploy/books.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/opmetrics.h"
#include "jobs/kind.h"

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
static deployment *route_find(deploy_ctl *b, const char *tenant,
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

int deploy_find(deploy_ctl *b, const char *tenant, const char *ref, int by_name,
                char *model_id)
{
    if (!b || !atomic_load(&b->count))
        return 0;
    pthread_mutex_lock(&b->mu);
    deployment *d = route_find(b, tenant, ref, by_name);
    if (d && model_id)
        snprintf(model_id, TY_ID_MAX, "%s", by_name ? route_model(d) : ref);
    pthread_mutex_unlock(&b->mu);
    return d != NULL;
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

/* ---- generation tokens a minute ----
 *
 * A bucket of tpm tokens, refilled at tpm / 60 a second, full at its first
 * use. A generation reserves its prompt and max_tokens (the most it can
 * use) at admission, from the tenant's bucket and the deployment's or from
 * neither, and deploy_finish gives back what it did not use. */

/* The bucket (*level at *at) brought to t. */
static void gen_refill(double *level, double *at, double tpm, double t)
{
    if (*at == 0)
        *level = tpm;
    else if ((*level += (t - *at) * tpm / 60) > tpm)
        *level = tpm;
    *at = t;
}

/* The 429 for a request needing need tokens from a bucket of tpm a minute
 * that holds fewer: TY_ELIMIT with *retry_after_s and a sentence; who names
 * the limit ("deployment story is over its"), whose the same as an owner
 * ("deployment story's"). */
static ty_status gen_refuse(double level, double tpm, uint64_t need,
                            const char *who, const char *whose,
                            double *retry_after_s, ty_err *err)
{
    if ((double)need > tpm) {
        *retry_after_s = 60;
        return ty_fail(err, TY_ELIMIT, NULL,
                       "this request needs %llu tokens, more than %s limit "
                       "of %.0f per minute allows at once: lower max_tokens "
                       "(its prompt and max_tokens are reserved)",
                       (unsigned long long)need, whose, tpm);
    }
    /* a tenth of a second up, so the retry finds enough */
    *retry_after_s = ceil(((double)need - level) * 60 / tpm * 10) / 10;
    return ty_fail(err, TY_ELIMIT, NULL,
                   "%s limit of %.0f tokens per minute: this request needs "
                   "%llu (its prompt and max_tokens); retry after %.1f s",
                   who, tpm, (unsigned long long)need, *retry_after_s);
}

/* Gives n tokens back to a bucket (no fuller than tpm). */
static void gen_refund(double *level, double tpm, uint64_t n)
{
    if (tpm > 0 && (*level += (double)n) > tpm)
        *level = tpm;
}

ty_status deploy_admit(deploy_ctl *b, const char *tenant, const char *ref,
                       int by_name, const char *model_id, uint64_t tokens,
                       deploy_call *c, double *retry_after_s, ty_err *err)
{
    memset(c, 0, sizeof *c);
    *retry_after_s = 0;
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
    const double tb_tpm = tb && tokens ? tb->tokens_per_minute : 0,
                 d_tpm = tokens ? (double)sp->tokens_per_minute : 0;
    if (tb_tpm > 0)
        gen_refill(&tb->gen_tokens, &tb->gen_tokens_at, tb_tpm, t);
    if (d_tpm > 0)
        gen_refill(&d->gen_tokens, &d->gen_tokens_at, d_tpm, t);
    char who[DEPLOY_NAME_MAX + 48], whose[DEPLOY_NAME_MAX + 32];
    snprintf(who, sizeof who, "deployment %s is over its", sp->name);
    snprintf(whose, sizeof whose, "deployment %s's", sp->name);
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
    } else if (tb_tpm > 0 && (double)tokens > tb->gen_tokens) {
        s = gen_refuse(tb->gen_tokens, tb_tpm, tokens,
                       "your generations are over the tenant's", "the tenant's",
                       retry_after_s, err);
    } else if (d_tpm > 0 && (double)tokens > d->gen_tokens) {
        s = gen_refuse(d->gen_tokens, d_tpm, tokens, who, whose, retry_after_s,
                       err);
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
        /* both have enough (checked above): take from both */
        if (tb_tpm > 0) {
            tb->gen_tokens -= (double)tokens;
            c->tokens_from |= DEPLOY_TOKENS_TENANT;
        }
        if (d_tpm > 0) {
            d->gen_tokens -= (double)tokens;
            c->tokens_from |= DEPLOY_TOKENS_DEPLOYMENT;
        }
        c->tokens_reserved = c->tokens_from ? tokens : 0;
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
     * still do, unless it is draining. That one is on its way out (a
     * rolling update moved on): the request waits for another, or learns
     * from deploy_pick that no replica serves its model once it is gone,
     * instead of failing on it again. */
    if (!best && avoid) {
        const replica *p = d->reps;
        while (p && p->serial != avoid)
            p = p->next;
        if (!p || p->state != REP_DRAINING)
            return route_pick(d, model, 0);
    }
    return best;
}

ty_status deploy_pick(deploy_ctl *b, deploy_call *c, uint64_t avoid,
                      double wait_s, ty_err *err)
{
    deployment *d = c->dep;
    double t0 = now_mono();
    if (wait_s < 0)
        wait_s = jobs_env_of(b->js)->replica_wait_s;
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
            supervisor_wake(jobs_supervisor(b->js));
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

void deploy_unpick(deploy_ctl *b, deploy_call *c, int ok,
                   const rframe_call_info *info)
{
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

void deploy_finish(deploy_ctl *b, deploy_call *c, int failed)
{
    deployment *d = c->dep;
    if (!d)
        return;
    double t = now_mono(), total = t - c->t0;
    pthread_mutex_lock(&b->mu);
    d->active--;
    if (c->tenant_bucket)
        ((tenant_bucket *)c->tenant_bucket)->active--;
    if (c->tokens_reserved > c->tokens_used) {
        /* what the generation reserved and did not use */
        const uint64_t back = c->tokens_reserved - c->tokens_used;
        tenant_bucket *tb = c->tenant_bucket;
        if (tb && (c->tokens_from & DEPLOY_TOKENS_TENANT))
            gen_refund(&tb->gen_tokens, tb->tokens_per_minute, back);
        if (c->tokens_from & DEPLOY_TOKENS_DEPLOYMENT)
            gen_refund(&d->gen_tokens, (double)d->spec.tokens_per_minute, back);
    }
    c->tokens_reserved = 0;
    c->tokens_from = 0;
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

void deploy_gen_token(deploy_ctl *b, deploy_call *c, int first,
                      uint32_t prompt_tokens, double seconds)
{
    deployment *d = c->dep;
    if (!d)
        return;
    pthread_mutex_lock(&b->mu);
    window_roll(d, now_mono());
    if (first) {
        d->gen_requests++;
        d->gen_prompt += prompt_tokens;
        lat_add(&d->ttft, seconds);
        lat_add(&d->win[0].ttft, seconds);
    } else {
        lat_add(&d->itl, seconds);
        lat_add(&d->win[0].itl, seconds);
    }
    d->gen_written++;
    d->win[0].gen_written++;
    pthread_mutex_unlock(&b->mu);
    /* d lives while the admission holds it; its id is the call's */
    opm_deploy_gen_token(c->deployment_id, first, first ? prompt_tokens : 0,
                         seconds);
}
