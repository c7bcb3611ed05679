/*
 * state.c - the job service's shared state (jobs/state.h): the helpers its
 * files share (events, logs, tenant handles, slot holders, run entries,
 * device strings) and the interface a kind's owner uses (jobs/kind.h).
 * Nothing here calls the rest of the service: service.c, lifecycle.c and
 * remote.c all build on this file (a gang's world size now and the retry
 * list are here for that reason: submit and a retry both need them).
 */
#include "jobs/state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "jobs/jobreq.h"

/* ---- events and logs ---- */

void svc_publish(jobs_service *r, const char *job_id, ev_type type,
                 const json_t *epoch)
{
    json_t *doc = NULL;
    ty_err err = {0};
    if (!r->env.events ||
        store_job_get_internal(r->env.store, job_id, &doc, &err) != TY_OK)
        return;
    char tenant[TY_ID_MAX];
    snprintf(tenant, sizeof tenant, "%s",
             json_string_value(json_object_get(doc, "tenant_id")));
    json_object_del(doc, "tenant_id");
    /* The queue report needs mu, which the caller may hold: null. */
    json_object_set_new(doc, "queue", json_null());
    json_t *data = json_pack("{s:o}", "job", doc);
    if (data && epoch)
        json_object_set_new(data, "epoch", json_deep_copy(epoch));
    ev_publish(r->env.events, tenant, job_id, type, data);
}

void svc_log_transition(jobs_service *r, const char *job, const char *to,
                        const char *why)
{
    json_t *f = json_pack("{s:s, s:s}", "job", job, "status", to);
    if (why)
        json_object_set_new(f, "reason", json_string(why));
    log_event("info", "job", f);
    svc_publish(r, job,
                strcmp(to, JOB_QUEUED) ? EV_JOB_FINISHED : EV_JOB_PROGRESS,
                NULL);
}

/* ---- tenants ---- */

ty_status svc_tenant_handle(jobs_service *r, const char *id, int *h,
                            ty_err *err)
{
    *h = sched_tenant_find(r->sched, id);
    if (*h >= 0)
        return TY_OK;
    store_tenant_limits lim;
    ty_status s = store_tenant_limits_get(r->env.store, id, &lim, err);
    if (s == TY_OK)
        s = sched_tenant_set(r->sched, id, lim.weight > 0 ? lim.weight : 1.0,
                             lim.max_gpu_slices, lim.max_running_jobs, h, err);
    if (s != TY_OK)
        return s;
    if (*h >= r->tenant_cap) {
        int ncap = r->tenant_cap ? r->tenant_cap * 2 : 16;
        while (ncap <= *h)
            ncap *= 2;
        void *p = realloc(r->tenant_ids, (size_t)ncap * sizeof *r->tenant_ids);
        if (!p)
            return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        r->tenant_ids = p;
        r->tenant_cap = ncap;
    }
    snprintf(r->tenant_ids[*h], TY_ID_MAX, "%s", id);
    if (*h >= r->ntenant_ids)
        r->ntenant_ids = *h + 1;
    return TY_OK;
}

const char *svc_tenant_id(const jobs_service *r, int h)
{
    return h >= 0 && h < r->ntenant_ids ? r->tenant_ids[h] : "";
}

/* ---- inventory holders ---- */

void svc_set_holder(jobs_service *r, int slot, const char *job,
                    const char *tenant)
{
    if (!r->inv || slot < 0 || slot >= r->inv->nslots)
        return;
    pthread_mutex_lock(&r->inv->mu);
    inv_slot *s = &r->inv->slots[slot];
    snprintf(s->job_id, sizeof s->job_id, "%s", job ? job : "");
    snprintf(s->tenant_id, sizeof s->tenant_id, "%s", tenant ? tenant : "");
    pthread_mutex_unlock(&r->inv->mu);
}

void svc_release_holders(jobs_service *r, const char *job)
{
    if (!r->inv || !job || !*job)
        return;
    pthread_mutex_lock(&r->inv->mu);
    for (int i = 0; i < r->inv->nslots; i++) {
        inv_slot *s = &r->inv->slots[i];
        if (!strcmp(s->job_id, job)) {
            s->job_id[0] = '\0';
            s->tenant_id[0] = '\0';
        }
    }
    pthread_mutex_unlock(&r->inv->mu);
}

json_t *svc_placement_json(const jobs_service *r, int slot, const char *device,
                           const char *cvd, int has_cvd)
{
    char now[32];
    ty_now_iso(now);
    json_t *p = json_pack("{s:s, s:s?, s:n, s:s}", "device", device,
                          "cuda_visible_devices", has_cvd ? cvd : NULL,
                          "worker_saw", "started_at", now);
    if (!p)
        return NULL;
    if (slot < 0) {
        json_object_set_new(p, "slot", json_null());
        json_object_set_new(p, "gpu", json_null());
        json_object_set_new(p, "uuid", json_null());
        json_object_set_new(p, "profile", json_null());
        json_object_set_new(p, "compute_slices", json_integer(0));
        json_object_set_new(p, "memory_bytes", json_null());
        return p;
    }
    const inv_slot *s = &r->inv->slots[slot];
    json_object_set_new(p, "slot", json_integer(slot));
    json_object_set_new(p, "gpu", json_integer(r->inv->gpus[s->gpu].index));
    json_object_set_new(p, "uuid", json_string(s->uuid));
    json_object_set_new(p, "profile",
                        s->profile ? json_string(s->profile) : json_null());
    json_object_set_new(p, "compute_slices", json_integer(s->compute_slices));
    json_object_set_new(p, "memory_bytes",
                        json_integer((json_int_t)s->memory_bytes));
    return p;
}

exec_rank *svc_gang_hold(jobs_service *r, const sched_job_info *info,
                         const char *job, const char *tenant)
{
    enum { STR = INV_NAME_MAX + 8 };
    const size_t n = (size_t)info->gang;
    exec_rank *m = calloc(1, n * (sizeof *m + 2 * STR));
    if (!m)
        return NULL;
    char *strs = (char *)(m + n);
    for (size_t i = 0; i < n; i++) {
        const int slot = info->gang_slots[i];
        const inv_slot *is = &r->inv->slots[slot];
        char *dev = strs + 2 * i * STR, *cvd = dev + STR;
        int has_cvd = 0;
        svc_device_for(r, slot, dev, STR, cvd, STR, &has_cvd);
        m[i] = (exec_rank){.device = dev,
                           .cvd = has_cvd ? cvd : "",
                           .slot = slot,
                           .gpu = r->inv->gpus[is->gpu].index,
                           .uuid = is->uuid};
        svc_set_holder(r, slot, job, tenant);
    }
    return m;
}

void svc_gang_placement(const sched_job_info *info, json_t *placement)
{
    if (!placement || info->gang <= 1 || !info->gang_slots)
        return;
    json_t *gs = json_array();
    for (int i = 0; i < info->gang; i++)
        json_array_append_new(gs, json_integer(info->gang_slots[i]));
    json_object_set_new(placement, "gang_slots", gs);
}

int svc_job_ranks_per_node(const json_t *job)
{
    const json_int_t n = json_integer_value(
        json_object_get(json_object_get(job, "resources"), "gpus_per_node"));
    return n > 0 ? (int)n : 0;
}

/* ---- run entries ---- */

const jobs_kind *svc_kind_of(const jobs_service *r, const char *sched_id)
{
    for (int i = 1; i < r->nkinds; i++) {
        const char *p = r->kinds[i].id_prefix;
        if (p && !strncmp(sched_id, p, strlen(p)))
            return &r->kinds[i];
    }
    return &r->kinds[0];
}

job_run *svc_run_claim(jobs_service *r, int place, int sj, int slot,
                       const char *job_id, const char *tenant)
{
    job_run *w = &r->runs[place];
    memset(w, 0, sizeof *w);
    w->used = 1;
    w->resumed_from_epoch = -1;
    w->sjob = sj;
    w->slot = slot;
    snprintf(w->job_id, sizeof w->job_id, "%s", job_id);
    snprintf(w->tenant_id, sizeof w->tenant_id, "%s", tenant);
    snprintf(w->dir, sizeof w->dir, "%s/%s", r->env.jobs_dir, job_id);
    w->kind = svc_kind_of(r, job_id);
    r->nruns++;
    svc_demand_started(r, job_id);
    return w;
}

void svc_run_release(jobs_service *r, job_run *w)
{
    svc_usage_close(r, w);
    w->used = 0;
    r->nruns--;
    jobs_demand_stopped(r, w->job_id);
}

const char *svc_run_dir(const jobs_service *r, int place)
{
    if (place < 0 || place >= r->cap || !r->runs[place].used ||
        r->runs[place].kind != &r->kinds[0])
        return NULL;
    return r->runs[place].dir;
}

/* ---- devices ---- */

void svc_device_for(const jobs_service *r, int slot, char *dev, size_t ndev,
                    char *cvd, size_t ncvd, int *has_cvd)
{
    const jobs_env *env = &r->env;
    *has_cvd = 0;
    cvd[0] = '\0';
    if (slot < 0) {
        if (r->nslots == 0) {
            snprintf(dev, ndev, "%s", env->train_dev.label);
        } else {
            snprintf(dev, ndev, "%s", WPROTO_DEVICE_CPU);
            *has_cvd = 1;
        }
        return;
    }
    const inv_slot *s = &r->inv->slots[slot];
    if (r->inv->source == INV_SOURCE_SLURM) {
        /* Slurm gives the job its device (CUDA_VISIBLE_DEVICES from the
         * gres); stand-in GRES (tests) compute on the CPU. */
        if (env->slurm && env->slurm->gpu_sim)
            snprintf(dev, ndev, WPROTO_DEVICE_SIM_PREFIX "%s", s->uuid);
        else
            snprintf(dev, ndev, "%s:0", WPROTO_DEVICE_CUDA);
        return;
    }
    *has_cvd = 1;
    snprintf(cvd, ncvd, "%s", s->uuid);
    if (r->inv->source == INV_SOURCE_SIM)
        snprintf(dev, ndev, WPROTO_DEVICE_SIM_PREFIX "%s", s->uuid);
    else if (env->train_dev.device >= 0)
        snprintf(dev, ndev, "%s:0", WPROTO_DEVICE_CUDA);
    else
        snprintf(dev, ndev, "%s", WPROTO_DEVICE_CPU);
}

/* ---- jobs/kind.h ---- */

ty_status jobs_kind_add(jobs_service *js, const jobs_kind *kind, ty_err *err)
{
    if (js->running || js->nkinds >= JOBS_KINDS_MAX)
        return ty_fail(err, TY_EINVAL, NULL,
                       "job kind %s: added too late or one too many",
                       kind->name);
    js->kinds[js->nkinds++] = *kind;
    return TY_OK;
}

void jobs_lock(jobs_service *js) { pthread_mutex_lock(&js->mu); }

void jobs_unlock(jobs_service *js) { pthread_mutex_unlock(&js->mu); }

const jobs_env *jobs_env_of(const jobs_service *js) { return &js->env; }

sched *jobs_sched(jobs_service *js) { return js->sched; }

supervisor *jobs_supervisor(jobs_service *js) { return js->sup; }

int jobs_nslots(const jobs_service *js) { return js->nslots; }

int jobs_on_cluster(const jobs_service *js) { return exec_is_slurm(js->exec); }

ty_status jobs_tenant_handle(jobs_service *js, const char *tenant, int *h,
                             ty_err *err)
{
    return svc_tenant_handle(js, tenant, h, err);
}

void jobs_slot_holder(jobs_service *js, int slot, const char *job,
                      const char *tenant)
{
    svc_set_holder(js, slot, job, tenant);
}

void jobs_device_for(const jobs_service *js, int slot, char *dev, size_t ndev,
                     char *cvd, size_t ncvd, int *has_cvd)
{
    svc_device_for(js, slot, dev, ndev, cvd, ncvd, has_cvd);
}

const char *jobs_run_dir(const jobs_service *js, int place)
{
    if (place < 0 || place >= js->cap || !js->runs[place].used)
        return NULL;
    return js->runs[place].dir;
}

/* ---- gangs: their size now, and the retry list ---- */

void svc_job_gang(const json_t *job, int *workers, int *min_workers)
{
    const json_t *res = json_object_get(job, "resources");
    json_int_t n = json_integer_value(json_object_get(res, "workers"));
    json_int_t m = json_integer_value(json_object_get(res, "min_workers"));
    /* a gang of whole GPUs: its ranks, never elastic */
    const json_int_t g = json_integer_value(json_object_get(res, "gpus"));
    const json_int_t ng =
        json_integer_value(json_object_get(res, "nodes")) *
        json_integer_value(json_object_get(res, "gpus_per_node"));
    if (g > n || ng > n) {
        n = g > ng ? g : ng;
        m = 0;
    }
    *workers = n > 1 ? (int)n : 1;
    *min_workers = m >= 1 && m < *workers ? (int)m : *workers;
}

int svc_gang_spread(const json_t *resources)
{
    return json_integer_value(json_object_get(resources, "nodes")) > 0;
}

int svc_gang_world(jobs_service *r, int workers, int min_workers, char *why,
                   size_t nwhy)
{
    if (why && nwhy)
        why[0] = '\0';
    if (min_workers >= workers)
        return workers;
    /* The scheduler's CPU places bound every gang; on Slurm, one rank a
     * node, the nodes that are up too. */
    int can = r->env.max_jobs >= 0 ? r->env.max_jobs : -1;
    int up = -1, total = 0;
    if (r->env.slurm && r->exec && exec_is_slurm(r->exec))
        up = exec_slurm_nodes_up(r->exec, r->env.worker_threads, &total);
    if (up >= 0 && (can < 0 || up < can))
        can = up;
    const int world = jobreq_world(workers, min_workers, can);
    if (world == 0 && why && nwhy) {
        if (up >= 0 && up == can)
            snprintf(why, nwhy,
                     "elastic gang: needs %d Slurm node%s up (resources."
                     "min_workers, one rank a node); %d of %d %s",
                     min_workers, min_workers == 1 ? "" : "s", up, total,
                     up == 1 ? "is" : "are");
        else
            snprintf(why, nwhy,
                     "elastic gang: needs %d CPU places (resources."
                     "min_workers); this server runs %d CPU jobs at once",
                     min_workers, can);
    }
    return world;
}

ty_status svc_retry_add(jobs_service *r, const char *id, int tenant,
                        int priority, double submit_time,
                        const sched_request *req, int workers, int min_workers,
                        int spread, double due, int hold, const char *why)
{
    if (r->nretries == r->retry_cap) {
        size_t ncap = r->retry_cap ? r->retry_cap * 2 : 8;
        retry_rec *p = realloc(r->retries, ncap * sizeof *p);
        if (!p)
            return TY_ENOMEM;
        r->retries = p;
        r->retry_cap = ncap;
    }
    retry_rec *rr = &r->retries[r->nretries++];
    memset(rr, 0, sizeof *rr);
    snprintf(rr->job_id, sizeof rr->job_id, "%s", id);
    rr->tenant = tenant;
    rr->priority = priority;
    rr->submit_time = submit_time;
    rr->req = *req;
    rr->workers = workers;
    rr->min_workers = min_workers;
    rr->spread = spread;
    rr->due = due;
    rr->hold = hold;
    snprintf(rr->why, sizeof rr->why, "%.299s", why ? why : "");
    return TY_OK;
}
