/*
 * service.c - the job service's public calls (see service.h): start and
 * stop, submit (the quota check, admission, storing, job.created, the
 * scheduler, and the compensation when it refuses), cancel, tenants, the
 * queue report. What happens to a job once placed is lifecycle.c's.
 *
 * The supervisor's thread (jobs/supervisor.h) drives the scheduling
 * passes and the workers through lifecycle.c's hooks. The scheduler, the
 * run table (one entry per supervisor place) and the retry list are
 * guarded by `mu`, which the supervisor shares; HTTP threads take it to
 * check and submit requests, cancel, refresh a tenant and read the queue
 * report. Lock order: mu, then the store's and the inventory's own
 * mutexes. Database writes of progress are throttled to one a second per
 * job; epoch records and outcomes are written at once.
 *
 * Invariants: a job is in the scheduler while it is queued (not in its
 * back-off), pending or running; it leaves it when its worker has exited
 * (so a slot is never given to a second job while a process may still use
 * it) or when it is cancelled while queued. An inventory slot's holder is
 * set while the scheduler has a job on it. Run entry i and supervisor
 * place i belong to the same job.
 */
#include "jobs/service.h"
#include "jobs/state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ids.h"
#include "common/log.h"
#include "jobs/jobreq.h"
#include "jobs/miglayout.h"
#include "models/train/comm.h"

static void service_free(jobs_service *r)
{
    miglayout_free(r);
    sched_destroy(r->sched);
    free(r->tenant_ids);
    free(r->runs);
    free(r->retries);
    free(r->report);
    free(r);
}

/* Hands a job row of the store (store_job_queued_all's shape) to the
 * scheduler, queued; *sj its handle (may be NULL). */
static ty_status submit_row(jobs_service *r, const json_t *row, int *sj,
                            ty_err *err)
{
    const char *tenant = json_string_value(json_object_get(row, "tenant_id"));
    sched_request req;
    int priority = 0, t = -1;
    int workers = 1, min_workers = 1;
    ty_status s = jobreq_parse(json_object_get(row, "resources"), r->nslots > 0,
                               &req, &workers, NULL, err);
    if (s == TY_OK)
        s = jobreq_priority(json_object_get(row, "priority"), &priority, err);
    if (s == TY_OK)
        s = svc_tenant_handle(r, tenant, &t, err);
    if (s != TY_OK)
        return s;
    /* An elastic gang: the world size of its run (a running one's is in
     * its placement), else what fits now; at least min_workers here (a
     * server that starts knows no Slurm node yet: Slurm decides). */
    svc_job_gang(row, &workers, &min_workers);
    if (min_workers < workers) {
        const json_int_t ran = json_integer_value(
            json_object_get(json_object_get(row, "placement"), "world_size"));
        const char *st = json_string_value(json_object_get(row, "status"));
        int w =
            st && strcmp(st, JOB_QUEUED) && ran >= min_workers && ran <= workers
                ? (int)ran
                : svc_gang_world(r, workers, min_workers, NULL, 0);
        workers = w >= min_workers ? w : min_workers;
    }
    sched_job_desc d = {
        .id = json_string_value(json_object_get(row, "id")),
        .tenant = t,
        .priority = priority,
        .submit_time = json_number_value(json_object_get(row, "submit_time")),
        .request = req,
        .gang = workers,
        .gang_spread = svc_gang_spread(json_object_get(row, "resources"))};
    return sched_job_submit(r->sched, &d, sj, err);
}

/* Fails a stored job this server cannot take (back) at its start: what
 * (the situation) and why. */
static void fail_at_start(jobs_service *r, const char *id, const char *what,
                          const char *why)
{
    ty_err err = {0};
    char msg[700];
    snprintf(msg, sizeof msg, "%s: %s", what, why);
    store_job_finish(r->env.store, id, JOB_FAILED, msg, NULL, &err);
    svc_log_transition(r, id, JOB_FAILED, msg);
}

/* Queues what the store has queued (server start). */
static void load_queued(jobs_service *r)
{
    ty_err err = {0};
    json_t *rows = NULL;
    if (store_job_queued_all(r->env.store, &rows, &err) != TY_OK) {
        log_msg("error", "runner: %s", err.msg);
        return;
    }
    size_t i;
    json_t *row;
    int loaded = 0;
    json_array_foreach (rows, i, row) {
        const char *id = json_string_value(json_object_get(row, "id"));
        ty_status s = submit_row(r, row, NULL, &err);
        if (s == TY_OK) {
            loaded++;
            continue;
        }
        fail_at_start(r, id, "this server cannot run the job", err.msg);
    }
    json_decref(rows);
    if (loaded)
        log_msg("info", "runner: %d queued job(s) handed to the scheduler",
                loaded);
}

/* A gang of GPUs' member slots as its placement lists them (gang_slots,
 * training_start's) into *slots (malloc'd, *n of them; NULL and 0 when
 * the placement has none: a CPU gang). TY_EINVAL for a slot that is not
 * a whole number below nslots; TY_ENOMEM. */
static ty_status gang_slots_of(const json_t *placement, int nslots, int **slots,
                               int *n, ty_err *err)
{
    const json_t *a = json_object_get(placement, "gang_slots");
    *slots = NULL;
    *n = 0;
    const size_t k = json_array_size(a);
    if (k == 0)
        return TY_OK;
    int *v = calloc(k, sizeof *v);
    if (!v)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    for (size_t i = 0; i < k; i++) {
        const json_t *e = json_array_get(a, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0 ||
            json_integer_value(e) >= nslots) {
            free(v);
            return ty_fail(err, TY_EINVAL, NULL,
                           "the gang's slots are not this inventory's");
        }
        v[i] = (int)json_integer_value(e);
    }
    *slots = v;
    *n = (int)k;
    return TY_OK;
}

/* Server start with the Slurm executor: the jobs the store has running on
 * Slurm (left so by the last server, store_job_requeue_running) are taken
 * back as they are: their slot held again, their Slurm job watched, their
 * worker's token valid again. Their Slurm state, read on the executor's
 * next round, settles any that ended meanwhile. Caller holds mu. */
static void reattach_running(jobs_service *r)
{
    if (!exec_is_slurm(r->exec))
        return;
    ty_err err = {0};
    json_t *rows = NULL;
    if (store_job_running_on(r->env.store, "slurm", &rows, &err) != TY_OK) {
        log_msg("error", "runner: %s", err.msg);
        return;
    }
    size_t i;
    json_t *row;
    int n = 0;
    json_array_foreach (rows, i, row) {
        const char *id = json_string_value(json_object_get(row, "id"));
        const char *tenant =
            json_string_value(json_object_get(row, "tenant_id"));
        json_t *pl = json_object_get(row, "placement");
        json_t *sl = json_object_get(pl, "slurm");
        long slurm_id = (long)json_integer_value(json_object_get(sl, "job_id"));
        const char *sha =
            json_string_value(json_object_get(sl, "token_sha256"));
        json_t *slot_v = json_object_get(pl, "slot");
        int slot =
            json_is_integer(slot_v) ? (int)json_integer_value(slot_v) : -1;
        if (slurm_id <= 0 || !sha) {
            /* Never submitted: simply queue it again. */
            store_job_requeue(r->env.store, id, 1, NULL, &err);
            continue;
        }
        int sj = -1;
        ty_status s = submit_row(r, row, &sj, &err);
        if (s == TY_OK && slot >= r->nslots)
            s = ty_fail(&err, TY_EINVAL, NULL,
                        "the cluster has fewer GPUs than when it started");
        /* A gang is restored with its members' slots (a gang of GPUs: the
         * placement's gang_slots; a CPU gang: none). */
        sched_job_info ji;
        int *members = NULL, nmembers = 0, is_gang = 0;
        if (s == TY_OK && sched_job_get(r->sched, sj, &ji) == TY_OK &&
            ji.gang > 1) {
            is_gang = 1;
            s = gang_slots_of(pl, r->nslots, &members, &nmembers, &err);
        }
        if (s == TY_OK)
            s = is_gang ? sched_job_restore_gang(r->sched, sj, members,
                                                 nmembers, svc_wall(), &err)
                        : sched_job_restore_running(r->sched, sj, slot,
                                                    svc_wall(), &err);
        int place = -1;
        for (int k = 0; k < r->cap && place < 0 && s == TY_OK; k++)
            if (!r->runs[k].used)
                place = k;
        if (s == TY_OK && place < 0)
            s = ty_fail(&err, TY_ECONFLICT, NULL, "no place is free");
        if (s == TY_OK)
            s = exec_slurm_adopt(r->exec, place, id, slurm_id, sha, &err);
        if (s != TY_OK) {
            free(members);
            if (sj >= 0)
                sched_job_remove(r->sched, sj);
            fail_at_start(r, id, "the restarted server could not re-attach it",
                          err.msg);
            continue;
        }
        svc_usage_open(r, svc_run_claim(r, place, sj, slot, id, tenant));
        svc_set_holder(r, slot, id, tenant);
        for (int k = 0; k < nmembers; k++)
            svc_set_holder(r, members[k], id, tenant);
        free(members);
        log_event("info", "job_reattach",
                  json_pack("{s:s, s:I}", "job", id, "slurm_job",
                            (json_int_t)slurm_id));
        n++;
    }
    json_decref(rows);
    if (n)
        log_msg("info", "runner: re-attached %d job(s) running on Slurm", n);
}

ty_status jobs_create(const jobs_env *env, jobs_service **out, ty_err *err)
{
    jobs_service *r = calloc(1, sizeof *r);
    if (!r)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    r->env = *env;
    r->inv = env->inventory;
    miglayout_load(r); /* a simulated GPU's saved layout */
    r->nslots = r->inv ? r->inv->nslots : 0;
    /* places for every slot the inventory can have (re-cuts add some) */
    int slot_room =
        r->inv && r->inv->slot_cap > r->nslots ? r->inv->slot_cap : r->nslots;
    r->cap = slot_room + env->max_jobs + env->max_replicas;
    sched_slot *slots = calloc((size_t)r->nslots + 1, sizeof *slots);
    r->runs = calloc((size_t)r->cap + 1, sizeof *r->runs);
    if (!slots || !r->runs) {
        free(slots);
        service_free(r);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    for (int i = 0; i < r->nslots; i++) {
        const inv_slot *s = &r->inv->slots[i];
        slots[i] =
            (sched_slot){.gpu = s->gpu,
                         .is_mig = s->kind == INV_SLOT_MIG,
                         .profile = s->profile,
                         .compute_slices = s->retired ? 1 : s->compute_slices,
                         .memory_bytes = s->memory_bytes,
                         .node = s->node,
                         .domain = s->domain};
    }
    const sched_config cfg = jobs_sched_config(env);
    r->sched = sched_create(&cfg, slots, (size_t)r->nslots, err);
    free(slots);
    if (r->sched && miglayout_sched_init(r, err) != TY_OK) {
        sched_destroy(r->sched);
        r->sched = NULL;
    }
    if (!r->sched) {
        service_free(r);
        return TY_EINVAL;
    }
    pthread_mutex_init(&r->mu, NULL);
    r->kinds[0] = lifecycle_training_kind(r);
    r->nkinds = 1;
    supervisor_hooks hooks = {.ctx = r,
                              .on_tick = lifecycle_tick,
                              .on_message = lifecycle_message,
                              .on_exit = lifecycle_exit};
    r->sup = supervisor_create(r->cap, env->self_exe, env->heartbeat_timeout_s,
                               &r->mu, &hooks, err);
    if (!r->sup) {
        pthread_mutex_destroy(&r->mu);
        service_free(r);
        return TY_ENOMEM;
    }
    if (env->slurm) {
        exec_slurm_config c = *env->slurm;
        c.places = r->cap;
        exec_hooks h = {.ctx = r,
                        .on_message = lifecycle_message,
                        .on_status = lifecycle_status,
                        .on_end = lifecycle_end};
        r->exec = exec_slurm_create(&c, &r->mu, &h, err);
    } else {
        r->exec = exec_local_create(r->sup, r->env.mpirun, err);
    }
    if (!r->exec) {
        supervisor_destroy(r->sup);
        pthread_mutex_destroy(&r->mu);
        service_free(r);
        return TY_EINVAL; /* a setting (err names it), or memory */
    }
    pthread_mutex_lock(&r->mu);
    svc_demand_recover(r);
    svc_usage_recover(r);
    reattach_running(r);
    pthread_mutex_unlock(&r->mu);
    load_queued(r);
    *out = r;
    return TY_OK;
}

ty_status jobs_run(jobs_service *r, ty_err *err)
{
    r->running = 1; /* the kinds are fixed from here on */
    return supervisor_start(r->sup, err) == TY_OK ? TY_OK : TY_EIO;
}

/* Wakes the supervisor's thread for a scheduling pass. */
static void wake(jobs_service *r) { supervisor_wake(r->sup); }

int jobs_host_has_gpus(const jobs_service *r) { return r && r->nslots > 0; }

/* Whether tenant_id's request and gang could ever run here
 * (sched_job_check with the tenant's quota): TY_OK or TY_EINVAL naming
 * "resources.gpu" or "resources.workers". */
static ty_status request_check(jobs_service *r, const char *tenant_id,
                               const sched_request *req, int workers,
                               int spread, ty_err *err)
{
    if (!r)
        return TY_OK;
    pthread_mutex_lock(&r->mu);
    int t = -1;
    ty_status s = svc_tenant_handle(r, tenant_id, &t, err);
    if (s == TY_OK) {
        const sched_job_desc d = {.tenant = t,
                                  .request = *req,
                                  .gang = workers,
                                  .gang_spread = spread};
        s = sched_job_check(r->sched, &d, err);
    }
    pthread_mutex_unlock(&r->mu);
    /* A gang of whole GPUs (resources.gpus) that no node could hold: the
     * count is what to change, whatever resources.gpu narrowed. */
    if (s == TY_EINVAL && workers > 1 && req->kind != SCHED_REQ_NONE &&
        !strcmp(err->field, "resources.gpu"))
        snprintf(err->field, sizeof err->field, "resources.gpus");
    return s;
}

/* Whether this server can run sub's gang at all (1 rank: an ordinary job,
 * always): the Open MPI engine in the build, and mpirun on the machine
 * (local executor: resources.workers or resources.gpus) or enough Slurm
 * nodes (Slurm: resources.workers one rank a node, or resources.nodes of
 * gpus_per_node ranks each, exec_slurm_gang_check); how many at once is
 * the scheduler's check. TY_EINVAL naming resources.workers,
 * resources.gpus or resources.nodes. */
static ty_status gang_check(const jobs_service *r, const job_submission *sub,
                            int workers, ty_err *err)
{
    const json_t *res = sub->resources;
    /* A gang over Slurm nodes (resources.nodes, gpus_per_node), of whole
     * GPUs of one node (resources.gpus) or of CPU processes. */
    const json_int_t nodes = json_integer_value(json_object_get(res, "nodes"));
    const json_int_t per_node =
        json_integer_value(json_object_get(res, "gpus_per_node"));
    if (!r || (workers <= 1 && nodes <= 0))
        return TY_OK;
    const jobs_env *env = &r->env;
    const int gpus = sub->req.kind != SCHED_REQ_NONE;
    const char *field = nodes > 0 ? "resources.nodes"
                        : gpus    ? "resources.gpus"
                                  : "resources.workers";
    const char *why = NULL;
    if (nodes > 0 && !(env->slurm && r->exec))
        why = "resources.nodes and resources.gpus_per_node need the Slurm "
              "executor (--executor slurm); ask for resources.gpus (GPUs of "
              "this server's node) instead";
    else if (!nn_comm_mpi_available())
        why = "this server was built without Open MPI (libopenmpi-dev)";
    else if (env->slurm && r->exec && gpus && nodes <= 0)
        /* GPUs of one node as ranks of one Slurm job: not built yet */
        why = "its Slurm executor takes a gang of GPUs as resources.nodes "
              "and resources.gpus_per_node, not resources.gpus";
    else if (env->slurm && r->exec) {
        /* srun starts the ranks: one a node, or gpus_per_node a node,
         * each with the server's --worker-threads */
        const int threads = env->worker_threads > 0 ? env->worker_threads : 1;
        ty_status st = exec_slurm_gang_check(
            r->exec, nodes > 0 ? (int)nodes : workers,
            nodes > 0 ? threads * (int)per_node : env->worker_threads, err);
        if (st != TY_OK)
            snprintf(err->field, sizeof err->field, "%s", field);
        return st;
    } else if (!env->mpirun[0])
        why = "Open MPI's mpirun is not installed on it (openmpi-bin)";
    if (why)
        return ty_fail(err, TY_EINVAL, field,
                       "this server cannot run this data-parallel job (%s): "
                       "%s",
                       field, why);
    return TY_OK;
}

/* Hands a job just stored as queued to the scheduler and wakes the
 * thread; an elastic gang (min_workers below workers) at the world size
 * that fits now, or, when not even min_workers do, onto the retry list
 * to wait for them. TY_EINVAL (the request cannot run here) or
 * TY_ENOMEM; the caller then fails the job. */
static ty_status enqueue(jobs_service *r, const char *tenant_id,
                         const char *job_id, int priority,
                         const sched_request *req, int workers, int min_workers,
                         int spread, ty_err *err)
{
    pthread_mutex_lock(&r->mu);
    int t = -1;
    ty_status s = svc_tenant_handle(r, tenant_id, &t, err);
    char why[300];
    const int world =
        s == TY_OK ? svc_gang_world(r, workers, min_workers, why, sizeof why)
                   : workers;
    if (s == TY_OK && world == 0) {
        if (svc_retry_add(r, job_id, t, priority, svc_wall(), req, workers,
                          min_workers, spread, svc_now() + JOBS_GANG_RECHECK_S,
                          1, why) != TY_OK)
            s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    } else if (s == TY_OK) {
        sched_job_desc d = {.id = job_id,
                            .tenant = t,
                            .priority = priority,
                            .submit_time = svc_wall(),
                            .request = *req,
                            .gang = world,
                            .gang_spread = spread};
        s = sched_job_submit(r->sched, &d, NULL, err);
        if (s == TY_OK)
            jobs_demand_submitted(r, &d, tenant_id);
    }
    pthread_mutex_unlock(&r->mu);
    if (s == TY_OK)
        wake(r);
    return s;
}

/* Publishes a job event with the job document doc (borrowed, annotated
 * here). */
static void publish_doc(jobs_service *r, const char *tenant, const char *id,
                        ev_type type, const json_t *doc)
{
    json_t *copy = json_deep_copy(doc);
    jobs_annotate(r, copy, tenant);
    ev_publish(r->env.events, tenant, id, type,
               json_pack("{s:o}", "job", copy));
}

/* Whether this host could ever give what the job asks (an error saying
 * why, not a job queued forever), then everything else that can be
 * checked at submit; *adm is for admission_free in any case. */
static ty_status admit(jobs_service *r, const char *tenant,
                       const job_submission *sub, admission *adm, ty_err *err)
{
    memset(adm, 0, sizeof *adm);
    /* An elastic gang need only fit at min_workers: it runs at the most
     * workers that fit (svc_gang_world). */
    const int least = sub->min_workers >= 1 && sub->min_workers < sub->workers
                          ? sub->min_workers
                          : sub->workers;
    ty_status s = gang_check(r, sub, least, err);
    if (s == TY_OK)
        s = request_check(r, tenant, &sub->req, least,
                          svc_gang_spread(sub->resources), err);
    if (s != TY_OK && least < sub->workers &&
        !strcmp(err->field, "resources.workers")) {
        snprintf(err->field, sizeof err->field, "resources.min_workers");
        ty_err_prefix(err, "even resources.min_workers (%d) cannot run here",
                      least);
    }
    /* A gang over Slurm nodes the cluster's GPUs cannot hold: the nodes
     * are what to change. */
    if (s == TY_EINVAL && json_object_get(sub->resources, "nodes") &&
        !strcmp(err->field, "resources.gpus"))
        snprintf(err->field, sizeof err->field, "resources.nodes");
    return s == TY_OK ? admission_check(&r->env, tenant, sub, adm, err) : s;
}

ty_status jobs_check(jobs_service *r, const char *tenant,
                     const job_submission *sub, json_t **out, ty_err *err)
{
    if (!r)
        return ty_fail(err, TY_EINTERNAL, NULL,
                       "the job runner is not running");
    admission adm;
    ty_status s = admit(r, tenant, sub, &adm, err);
    if (s == TY_OK) {
        *out = json_pack("{s:b, s:s, s:s, s:O, s:O, s:O, s:I, s:I}", "valid", 1,
                         "name", adm.name, "dataset", adm.dataset_id,
                         "validation", adm.validation, "model", adm.spec,
                         "hyperparameters", adm.hyperparameters,
                         "estimated_memory_bytes", (json_int_t)adm.memory_bytes,
                         "parameters", (json_int_t)adm.param_count);
        if (!*out)
            s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    admission_free(&adm);
    return s;
}

ty_status jobs_submit(jobs_service *r, const char *tenant,
                      const job_submission *sub, json_t **job_out, ty_err *err)
{
    if (!r)
        return ty_fail(err, TY_EINTERNAL, NULL,
                       "the job runner is not running");
    const jobs_env *env = &r->env;
    admission adm;
    json_t *job = NULL;
    char id[TY_ID_MAX];
    ty_status s;
    if ((s = admit(r, tenant, sub, &adm, err)) == TY_EINVAL)
        svc_demand_refused(r, tenant, &sub->req, sub->workers);
    if (s != TY_OK || (s = ty_id_new("job_", id, err)) != TY_OK ||
        (s = store_job_insert_req(
             env->store, tenant, id, adm.name, adm.dataset_id, adm.validation,
             adm.spec, adm.hyperparameters, (int64_t)adm.memory_bytes,
             sub->resources, sub->priority, err)) != TY_OK ||
        (s = store_job_get(env->store, tenant, id, &job, err)) != TY_OK)
        goto done;
    /* job.created goes out before the supervisor can publish
     * job.started. */
    publish_doc(r, tenant, id, EV_JOB_CREATED, job);
    /* The reply shows the job as submitted (queued), read before the
     * supervisor can start it. */
    if ((s = enqueue(r, tenant, id, sub->priority, &sub->req, sub->workers,
                     sub->min_workers, svc_gang_spread(sub->resources), err)) !=
        TY_OK) {
        /* Stored but not schedulable (a quota lowered meanwhile): the job
         * fails with the reason rather than waiting forever. */
        ty_err e2 = {0};
        json_t *failed = NULL;
        if (store_job_finish(env->store, id, JOB_FAILED, err->msg, NULL, &e2) ==
                TY_OK &&
            store_job_get(env->store, tenant, id, &failed, &e2) == TY_OK) {
            publish_doc(r, tenant, id, EV_JOB_FINISHED, failed);
            json_decref(failed);
        }
        goto done;
    }
    jobs_annotate(r, job, tenant);
    *job_out = job;
    job = NULL;
done:
    admission_free(&adm);
    json_decref(job);
    return s;
}

/* Takes job_id out of the scheduler, or, when a worker runs it, stops the
 * worker. */
static void dequeue_or_stop(jobs_service *r, const char *job_id)
{
    pthread_mutex_lock(&r->mu);
    int running = 0;
    for (int i = 0; i < r->cap; i++) {
        job_run *w = &r->runs[i];
        if (w->used && !strcmp(w->job_id, job_id)) {
            running = 1;
            w->cancel = 1;
            w->kind->cancel(w->kind->ctx, i);
        }
    }
    if (!running) {
        int j = sched_job_find(r->sched, job_id);
        sched_job_info info;
        if (j >= 0 && sched_job_get(r->sched, j, &info) == TY_OK &&
            (info.state == SCHED_JOB_QUEUED ||
             info.state == SCHED_JOB_PENDING)) {
            sched_job_remove(r->sched, j);
            jobs_demand_stopped(r, job_id);
        }
        for (size_t i = 0; i < r->nretries; i++)
            if (!strcmp(r->retries[i].job_id, job_id)) {
                r->retries[i] = r->retries[--r->nretries];
                break;
            }
    }
    pthread_mutex_unlock(&r->mu);
    wake(r);
}

ty_status jobs_cancel(jobs_service *r, const char *tenant, const char *job_id,
                      json_t **job, int *was_running, ty_err *err)
{
    const jobs_env *env = &r->env;
    *was_running = 0;
    ty_status s =
        store_job_request_cancel(env->store, tenant, job_id, was_running, err);
    /* Queued: it leaves the scheduler (and a slot it was promised) now;
     * running: its worker is stopped. */
    if (s == TY_OK)
        dequeue_or_stop(r, job_id);
    if (s == TY_OK)
        s = store_job_get(env->store, tenant, job_id, job, err);
    if (s != TY_OK)
        return s;
    jobs_annotate(r, *job, tenant);
    /* A running job's end is published when its worker has exited. */
    if (!*was_running)
        ev_publish(env->events, tenant, job_id, EV_JOB_FINISHED,
                   json_pack("{s:O}", "job", *job));
    return TY_OK;
}

void jobs_tenant_changed(jobs_service *r, const char *tenant_id)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    if (sched_tenant_find(r->sched, tenant_id) >= 0) {
        store_tenant_limits lim;
        ty_err err = {0};
        if (store_tenant_limits_get(r->env.store, tenant_id, &lim, &err) !=
                TY_OK ||
            sched_tenant_set(
                r->sched, tenant_id, lim.weight > 0 ? lim.weight : 1.0,
                lim.max_gpu_slices, lim.max_running_jobs, NULL, &err) != TY_OK)
            log_msg("error", "runner: tenant %s: %s", tenant_id, err.msg);
    }
    for (int i = 0; i < r->nkinds; i++)
        if (r->kinds[i].tenant_changed)
            r->kinds[i].tenant_changed(r->kinds[i].ctx, tenant_id);
    pthread_mutex_unlock(&r->mu);
    wake(r);
}

/* The queue entry of one queued job, or NULL when the scheduler does not
 * know it (it is in its back-off, or being handed over). */
static json_t *queue_entry(jobs_service *r, const char *id, size_t nrep,
                           const char *viewer_tenant)
{
    int j = sched_job_find(r->sched, id);
    for (size_t i = 0; j >= 0 && i < nrep; i++) {
        const sched_wait *w = &r->report[i];
        if (w->job != j)
            continue;
        char detail[400];
        sched_job_info other;
        int have_other = w->other_job >= 0 &&
                         sched_job_get(r->sched, w->other_job, &other) == TY_OK;
        const char *other_tenant =
            have_other ? svc_tenant_id(r, other.tenant) : "";
        int visible =
            have_other && viewer_tenant && !strcmp(other_tenant, viewer_tenant);
        if (w->reason == SCHED_WAIT_RESERVED && !visible)
            snprintf(detail, sizeof detail,
                     "reserved for another tenant's job: the free slots that "
                     "fit are held for it");
        else if (w->reason == SCHED_WAIT_PREEMPTING && !visible)
            snprintf(detail, sizeof detail,
                     "preempting: another tenant's job is checkpointing to "
                     "free its slot for this one");
        else
            sched_wait_describe(r->sched, w, detail, sizeof detail);
        char summary[300];
        sched_wait_summary(r->sched, w, summary, sizeof summary);
        const char *quota =
            w->quota == SCHED_QUOTA_GPU_SLICES     ? "max_gpu_slices"
            : w->quota == SCHED_QUOTA_RUNNING_JOBS ? "max_running_jobs"
                                                   : NULL;
        return json_pack("{s:I, s:I, s:s, s:s?, s:s?, s:s, s:s}", "position",
                         (json_int_t)w->position, "tenant_position",
                         (json_int_t)w->tenant_position, "reason",
                         sched_wait_reason_name(w->reason), "quota", quota,
                         "job", visible ? other.id : NULL, "detail", detail,
                         "summary", summary);
    }
    for (size_t i = 0; i < r->nretries; i++)
        if (!strcmp(r->retries[i].job_id, id) && r->retries[i].hold) {
            /* An elastic gang waiting for its min_workers to fit: the
             * scheduler's reason for a CPU job without a free place. */
            return json_pack("{s:n, s:n, s:s, s:n, s:n, s:s, s:s}", "position",
                             "tenant_position", "reason",
                             sched_wait_reason_name(SCHED_WAIT_NO_SLICE),
                             "quota", "job", "detail", r->retries[i].why,
                             "summary",
                             "Too few places are up for its fewest workers "
                             "(resources.min_workers); it starts when enough "
                             "are");
        } else if (!strcmp(r->retries[i].job_id, id)) {
            double left = r->retries[i].due - svc_now();
            char detail[400];
            snprintf(detail, sizeof detail, "retry back-off: %.1f s left",
                     left > 0 ? left : 0.0);
            char summary[200];
            snprintf(summary, sizeof summary,
                     "Its last run crashed; it starts again in %.0f s",
                     left > 0 ? left : 0.0);
            return json_pack("{s:n, s:n, s:s, s:n, s:n, s:s, s:s}", "position",
                             "tenant_position", "reason", "retry back-off",
                             "quota", "job", "detail", detail, "summary",
                             summary);
        }
    return json_pack("{s:n, s:n, s:s, s:n, s:n, s:s, s:s}", "position",
                     "tenant_position", "reason", "scheduling", "quota", "job",
                     "detail", "scheduling: the runner is taking the job",
                     "summary", "Starting now");
}

void jobs_annotate(jobs_service *r, json_t *docs, const char *viewer_tenant)
{
    size_t n = json_is_array(docs) ? json_array_size(docs) : 1;
    int any_queued = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *d = json_is_array(docs) ? json_array_get(docs, i) : docs;
        const char *st = json_string_value(json_object_get(d, "status"));
        if (st && !strcmp(st, JOB_QUEUED))
            any_queued = 1;
        else
            json_object_set_new(d, "queue", json_null());
    }
    if (!any_queued || !r)
        return;
    pthread_mutex_lock(&r->mu);
    size_t want = sched_queued_count(r->sched);
    if (want > r->report_cap) {
        sched_wait *p = realloc(r->report, want * sizeof *p);
        if (p) {
            r->report = p;
            r->report_cap = want;
        }
    }
    size_t nrep = sched_queue_report(
        r->sched, r->report, want <= r->report_cap ? want : r->report_cap);
    for (size_t i = 0; i < n; i++) {
        json_t *d = json_is_array(docs) ? json_array_get(docs, i) : docs;
        const char *st = json_string_value(json_object_get(d, "status"));
        if (!st || strcmp(st, JOB_QUEUED))
            continue;
        const char *id = json_string_value(json_object_get(d, "id"));
        json_object_set_new(d, "queue",
                            id ? queue_entry(r, id, nrep, viewer_tenant)
                               : json_null());
    }
    pthread_mutex_unlock(&r->mu);
}

void jobs_stop(jobs_service *r)
{
    if (!r)
        return;
    r->stopping = 1;
    /* The executor's thread stops (Slurm jobs keep running, for the next
     * server to re-attach), then the supervisor's, then the local workers;
     * their jobs stay running in the store until requeued here. */
    int remote = exec_is_slurm(r->exec);
    exec_destroy(r->exec);
    supervisor_stop(r->sup);
    for (int i = 0; i < r->cap; i++)
        if (r->runs[i].used) {
            svc_set_holder(r, r->runs[i].slot, NULL, NULL);
            svc_release_holders(r, r->runs[i].job_id); /* a gang's others */
            svc_usage_close(r, &r->runs[i]);
        }
    int64_t n = 0;
    ty_err err;
    store_job_requeue_running(r->env.store, remote ? "slurm" : NULL, &n, &err);
    if (n)
        log_msg("info", "requeued %lld running job(s) for the next start",
                (long long)n);
    pthread_mutex_destroy(&r->mu);
    service_free(r);
}
