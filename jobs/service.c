/*
 * service.c - the job service (see service.h): submit, cancel, the
 * scheduling passes, the job's state from its worker's lines, the outcome
 * of each run (model registration, retry policy, preemption).
 *
 * The supervisor's thread (jobs/supervisor.h) drives it: a scheduling pass
 * before each poll (on_tick), each worker line (on_message), each exit
 * (on_exit). The scheduler, the run table (one entry per supervisor
 * place) and the retry list are guarded by `mu`, which the supervisor
 * shares; HTTP threads take it to check and submit requests, cancel,
 * refresh a tenant and read the queue report. Lock order: mu, then the
 * store's and the inventory's own mutexes. Database writes of progress are
 * throttled to one a second per job; epoch records and outcomes are
 * written at once.
 *
 * Invariants: a job is in the scheduler while it is queued (not in its
 * back-off), pending or running; it leaves it when its worker has exited
 * (so a slot is never given to a second job while a process may still use
 * it) or when it is cancelled while queued. An inventory slot's holder is
 * set while the scheduler has a job on it. Run entry i and supervisor
 * place i belong to the same job.
 */
#include "jobs/service.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/ids.h"
#include "common/log.h"
#include "common/opmetrics.h"
#include "events/hub.h"
#include "gpu/inventory.h"
#include "jobs/jobreq.h"
#include "jobs/protocol.h"
#include "jobs/retry.h"
#include "jobs/sched.h"
#include "jobs/supervisor.h"
#include "models/nn.h"
#include "store/blob.h"

/* A job whose worker runs (or is being started) in supervisor place i:
 * what the service knows of that run. */
typedef struct {
    int used;
    char job_id[TY_ID_MAX];
    char dir[PATH_MAX];
    int sjob;                    /* the scheduler's handle */
    int slot;                    /* inventory slot; -1 a CPU job */
    int done;                    /* the worker said the model is written */
    char error[512];             /* the worker's error message, if any */
    int cancel;                  /* a cancel was requested */
    int preempting;              /* preempted: it checkpoints and exits */
    double last_progress_write;
    int resumed_from_epoch;      /* -1 unless this run resumed */
    char tenant_id[TY_ID_MAX];   /* for metrics labels */
} job_run;

/* A crashed job waiting out its back-off, outside the scheduler. */
typedef struct {
    char job_id[TY_ID_MAX];
    int tenant;
    int priority;
    double submit_time;
    sched_request req;
    double due;                  /* monotonic */
    char why[300];
} retry_rec;

struct jobs_service {
    jobs_env env;                /* jobs_start's copy */
    inventory *inv;              /* env.inventory; NULL: no slots */
    pthread_mutex_t mu;
    atomic_int stopping;
    supervisor *sup;
    sched *sched;
    int nslots;                  /* inventory slots */
    char (*tenant_ids)[TY_ID_MAX]; /* by scheduler tenant handle */
    int ntenant_ids, tenant_cap;
    int nruns;                   /* entries in use */
    int cap;                     /* inventory slots + --max-jobs */
    job_run *runs;               /* cap, by supervisor place */
    retry_rec *retries;
    size_t nretries, retry_cap;
    sched_wait *report;          /* jobs_annotate's buffer */
    size_t report_cap;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The scheduler's clock: wall time, so submit times read back from the
 * store after a restart (created_at) compare with it. */
static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Publishes a live event of the job (events/hub.h) with the job as GET
 * /v1/jobs/{id} shows it, read back from the store; epoch (borrowed) is
 * added for job.epoch. The queue report is left null: it needs mu, which
 * callers may hold. */
static void publish(jobs_service *r, const char *job_id, ev_type type,
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
    jobs_annotate(NULL, doc, tenant);
    if (!json_object_get(doc, "queue"))
        json_object_set_new(doc, "queue", json_null());
    json_t *data = json_pack("{s:o}", "job", doc);
    if (data && epoch)
        json_object_set_new(data, "epoch", json_deep_copy(epoch));
    ev_publish(r->env.events, tenant, job_id, type, data);
}

/* Logs a job's change of status and publishes it: job.finished, or
 * job.progress for a requeue. */
static void log_transition(jobs_service *r, const char *job, const char *to,
                           const char *why)
{
    json_t *f = json_pack("{s:s, s:s}", "job", job, "status", to);
    if (why)
        json_object_set_new(f, "reason", json_string(why));
    log_event("info", "job", f);
    publish(r, job, strcmp(to, JOB_QUEUED) ? EV_JOB_FINISHED : EV_JOB_PROGRESS,
            NULL);
}

/* ---- tenants ---- */

/* The scheduler's handle of tenant id into *h, registering it with its
 * store limits on first use. Caller holds mu. */
static ty_status tenant_handle(jobs_service *r, const char *id, int *h, ty_err *err)
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

static const char *tenant_id_of(const jobs_service *r, int h)
{
    return h >= 0 && h < r->ntenant_ids ? r->tenant_ids[h] : "";
}

/* ---- inventory holders ---- */

static void set_holder(jobs_service *r, int slot, const char *job, const char *tenant)
{
    if (!r->inv || slot < 0 || slot >= r->inv->nslots)
        return;
    pthread_mutex_lock(&r->inv->mu);
    inv_slot *s = &r->inv->slots[slot];
    snprintf(s->job_id, sizeof s->job_id, "%s", job ? job : "");
    snprintf(s->tenant_id, sizeof s->tenant_id, "%s", tenant ? tenant : "");
    pthread_mutex_unlock(&r->inv->mu);
}

/* ---- starting a worker ---- */

/* Writes job.json: what the worker needs, with blob paths resolved. */
static ty_status write_job_file(const jobs_env *env, const json_t *job,
                                const char *dir, ty_err *err)
{
    const char *tenant = json_string_value(json_object_get(job, "tenant_id"));
    const char *ds_id = json_string_value(json_object_get(job, "dataset"));
    char sha[65], path[PATH_MAX];
    json_t *ds = NULL, *vds = NULL;
    ty_status s = store_dataset_get(env->store, tenant, ds_id, &ds, sha, err);
    if (s != TY_OK)
        return s;
    blob_path(env->data_dir, sha, path, sizeof path);
    json_t *spec = json_object();
    json_object_set_new(spec, WPROTO_JOB_ID, json_object_get(job, "id")
                                            ? json_incref(json_object_get(job, "id"))
                                            : json_null());
    json_object_set_new(spec, WPROTO_JOB_DATASET_PATH, json_string(path));
    json_t *val = json_object_get(job, "validation");
    const char *val_id = json_string_value(json_object_get(val, "dataset"));
    if (val_id) {
        char vsha[65], vpath[PATH_MAX];
        s = store_dataset_get(env->store, tenant, val_id, &vds, vsha, err);
        if (s != TY_OK)
            goto done;
        blob_path(env->data_dir, vsha, vpath, sizeof vpath);
        json_object_set_new(spec, WPROTO_JOB_VALIDATION,
                            json_pack("{s:s}", WPROTO_JOB_DATASET_PATH, vpath));
    } else {
        json_object_set(spec, WPROTO_JOB_VALIDATION, val);
    }
    json_object_set(spec, WPROTO_JOB_SPEC, json_object_get(job, "spec"));
    /* max_attempts is the runner's, not the trainer's. */
    json_t *hp = json_deep_copy(json_object_get(job, "hyperparameters"));
    json_object_del(hp, "max_attempts");
    json_object_set_new(spec, WPROTO_JOB_HYPERPARAMETERS, hp ? hp : json_object());
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/checkpoint.safetensors", dir);
    json_object_set_new(spec, WPROTO_JOB_CHECKPOINT_PATH, json_string(p));
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    json_object_set_new(spec, WPROTO_JOB_MODEL_PATH, json_string(p));
    json_object_set_new(spec, WPROTO_JOB_THREADS, json_integer(env->worker_threads));
    json_object_set_new(spec, WPROTO_JOB_EXTRA_META,
                        json_pack("{s:O, s:s}", "trainyard.job",
                                  json_object_get(job, "id"), "trainyard.dataset",
                                  ds_id));
    char *text = json_dumps(spec, JSON_INDENT(2));
    snprintf(p, sizeof p, "%s/%s", dir, WPROTO_JOB_FILE);
    s = text ? fs_write_atomic(p, text, strlen(text), 0600, err)
             : ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    free(text);
done:
    json_decref(spec);
    json_decref(ds);
    json_decref(vds);
    return s;
}

/* Where a job on `slot` (-1: a CPU job) runs: TRAINYARD_DEVICE's value
 * into dev, and CUDA_VISIBLE_DEVICES's into cvd (*has_cvd 0: leave the
 * server's). See jobs/protocol.h. */
static void device_for(const jobs_service *r, int slot, char *dev, size_t ndev,
                       char *cvd, size_t ncvd, int *has_cvd)
{
    const jobs_env *env = &r->env;
    *has_cvd = 0;
    cvd[0] = '\0';
    if (slot < 0) {
        if (r->nslots == 0) {
            snprintf(dev, ndev, "%s", env->train_dev.label);
        } else {
            snprintf(dev, ndev, "cpu");
            *has_cvd = 1;
        }
        return;
    }
    const inv_slot *s = &r->inv->slots[slot];
    *has_cvd = 1;
    snprintf(cvd, ncvd, "%s", s->uuid);
    if (r->inv->source == INV_SOURCE_SIM)
        snprintf(dev, ndev, "sim:%s", s->uuid);
    else if (env->train_dev.device >= 0)
        snprintf(dev, ndev, "cuda:0");
    else
        snprintf(dev, ndev, "cpu");
}

/* What the job document shows of where it runs (see openapi.yaml's
 * Placement). */
static json_t *placement_json(const jobs_service *r, int slot, const char *device,
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

/* Leaves the run entry free. Caller holds mu. */
static void run_release(jobs_service *r, job_run *w)
{
    w->used = 0;
    r->nruns--;
}

/* Starts scheduler job sj, placed on slot (-1: CPU). Caller holds mu. */
static void start_placement(jobs_service *r, int sj, int slot)
{
    const jobs_env *env = &r->env;
    sched_job_info info;
    if (sched_job_get(r->sched, sj, &info) != TY_OK)
        return;
    char id[TY_ID_MAX];
    snprintf(id, sizeof id, "%s", info.id);
    const char *tenant = tenant_id_of(r, info.tenant);
    job_run *w = NULL;
    int place = -1;
    for (int i = 0; i < r->cap && !w; i++)
        if (!r->runs[i].used) {
            w = &r->runs[i];
            place = i;
        }
    ty_err err = {0};
    if (!w) {
        /* Cannot happen: the table has a place per slot and CPU job. */
        log_msg("error", "runner: no worker entry free for job %s", id);
        sched_job_requeue(r->sched, sj, &err);
        return;
    }
    memset(w, 0, sizeof *w);
    w->used = 1;
    w->resumed_from_epoch = -1;
    w->sjob = sj;
    w->slot = slot;
    snprintf(w->job_id, sizeof w->job_id, "%s", id);
    snprintf(w->tenant_id, sizeof w->tenant_id, "%s", tenant);
    snprintf(w->dir, sizeof w->dir, "%s/%s", env->jobs_dir, id);
    r->nruns++;

    char dev[INV_NAME_MAX + 8], cvd[INV_NAME_MAX];
    int has_cvd;
    device_for(r, slot, dev, sizeof dev, cvd, sizeof cvd, &has_cvd);
    json_t *placement = placement_json(r, slot, dev, cvd, has_cvd);
    ty_status s = store_job_start_on(env->store, id, dev, placement, &err);
    json_decref(placement);
    if (s != TY_OK) {
        /* TY_ECONFLICT: cancelled meanwhile. */
        if (s != TY_ECONFLICT)
            log_msg("error", "runner: %s", err.msg);
        sched_job_remove(r->sched, sj);
        run_release(r, w);
        return;
    }
    set_holder(r, slot, id, tenant);
    double queue_wait = wall_s() - info.submit_time;
    opm_job_started(tenant, queue_wait);
    json_t *job = NULL;
    pid_t pid = -1;
    if ((s = store_job_get_internal(env->store, id, &job, &err)) == TY_OK &&
        (s = fs_mkdirs(w->dir, 0700, &err)) == TY_OK &&
        (s = write_job_file(env, job, w->dir, &err)) == TY_OK)
        s = supervisor_spawn(r->sup, place, id, w->dir, dev, cvd, has_cvd,
                             &pid, &err);
    json_decref(job);
    if (s != TY_OK) {
        char msg[600];
        snprintf(msg, sizeof msg, "could not start the training process: %s",
                 err.msg);
        store_job_finish(env->store, id, JOB_FAILED, msg, NULL, &err);
        log_transition(r, id, JOB_FAILED, msg);
        sched_job_remove(r->sched, sj);
        set_holder(r, slot, NULL, NULL);
        run_release(r, w);
        return;
    }
    json_t *patch = json_pack("{s:i}", "worker_pid", (int)pid);
    store_job_placement_merge(env->store, id, patch, &err);
    json_decref(patch);
    json_t *f = json_pack("{s:s, s:s, s:s, s:i}", "job", id, "status",
                          JOB_RUNNING, "device", dev, "pid", (int)pid);
    if (slot >= 0)
        json_object_set_new(f, "slot", json_integer(slot));
    json_object_set_new(f, "tenant", json_string(tenant));
    json_object_set_new(f, "queue_wait_s",
                        json_real(queue_wait > 0 ? queue_wait : 0));
    log_event("info", "job", f);
    publish(r, id, EV_JOB_STARTED, NULL);
}

/* Tells a preemption victim to checkpoint and stop. Caller holds mu. */
static void preempt_worker(jobs_service *r, const sched_preemption *p)
{
    sched_job_info victim, job;
    if (sched_job_get(r->sched, p->victim, &victim) != TY_OK ||
        sched_job_get(r->sched, p->job, &job) != TY_OK)
        return;
    for (int i = 0; i < r->cap; i++) {
        job_run *w = &r->runs[i];
        if (!w->used || w->sjob != p->victim)
            continue;
        w->preempting = 1;
        supervisor_preempt(r->sup, i);
        log_event("info", "job_preempt",
                  json_pack("{s:s, s:s, s:i}", "job", victim.id, "for",
                            job.id, "slot", p->slot));
    }
}

/* ---- following a worker ---- */

/* A number from a worker line, or JSON null for the -1 "not applicable". */
static json_t *metric(const json_t *ev, const char *key)
{
    json_t *v = json_object_get(ev, key);
    if (!json_is_number(v) || json_number_value(v) < 0)
        return json_null();
    return json_real(json_number_value(v));
}

/* What a worker's line means for its job (supervisor_hooks.on_message:
 * mu not held). */
static void on_message(void *ctx, int place, wproto_msg kind,
                       const json_t *ev)
{
    jobs_service *r = ctx;
    const jobs_env *env = &r->env;
    job_run *w = &r->runs[place];
    ty_err err = {0};
    switch (kind) {
    case WPROTO_MSG_PROGRESS: {
        json_t *sps = json_object_get(ev, WPROTO_F_SAMPLES_PER_SEC);
        if (json_is_number(sps) && json_number_value(sps) >= 0)
            opm_job_samples_per_sec(w->job_id, w->tenant_id,
                                    json_number_value(sps));
        double t = now_s();
        int last =
            json_number_value(json_object_get(ev, WPROTO_F_FRACTION)) >= 1.0;
        if (last || t - w->last_progress_write >= 1.0) {
            w->last_progress_write = t;
            json_t *progress = json_pack(
                "{s:O?, s:O?, s:O?, s:O?, s:O?}", "epoch",
                json_object_get(ev, WPROTO_F_EPOCH), "epochs",
                json_object_get(ev, WPROTO_F_EPOCHS), "step",
                json_object_get(ev, WPROTO_F_STEP), "total_steps",
                json_object_get(ev, WPROTO_F_TOTAL_STEPS), "fraction",
                json_object_get(ev, WPROTO_F_FRACTION));
            if (w->resumed_from_epoch >= 0)
                json_object_set_new(progress, "resumed_from_epoch",
                                    json_integer(w->resumed_from_epoch));
            json_t *metrics = json_object();
            json_object_set_new(metrics, "train_loss",
                                metric(ev, WPROTO_F_LOSS));
            json_object_set_new(metrics, "samples_per_sec",
                                metric(ev, WPROTO_F_SAMPLES_PER_SEC));
            json_object_set_new(metrics, "learning_rate",
                                metric(ev, WPROTO_F_LR));
            store_job_progress(env->store, w->job_id, progress, metrics, &err);
            publish(r, w->job_id, EV_JOB_PROGRESS, NULL);
            json_decref(progress);
            json_decref(metrics);
        }
        break;
    }
    case WPROTO_MSG_EPOCH: {
        /* The epoch record as the store and GET .../metrics keep it: the
         * same names as the line's. */
        json_t *m = json_object();
        json_object_set(m, "epoch", json_object_get(ev, WPROTO_F_EPOCH));
        static const char *const keys[] = {
            WPROTO_F_TRAIN_LOSS, WPROTO_F_TRAIN_ACCURACY, WPROTO_F_VAL_LOSS,
            WPROTO_F_VAL_ACCURACY, WPROTO_F_SAMPLES_PER_SEC, WPROTO_F_SECONDS};
        for (size_t i = 0; i < TY_ARRAY_LEN(keys); i++)
            json_object_set_new(m, keys[i], metric(ev, keys[i]));
        /* A byte count: kept whole (older workers do not send it). */
        json_t *peak = json_object_get(ev, WPROTO_F_PEAK_MEMORY_BYTES);
        json_object_set_new(m, "peak_memory_bytes",
                            json_is_integer(peak) ? json_integer(
                                                        json_integer_value(peak))
                                                  : json_null());
        /* Where and how it ran: passed through when the worker said. */
        static const char *const where[] = {
            WPROTO_F_DEVICE, WPROTO_F_PRECISION, WPROTO_F_LOSS_SCALE,
            WPROTO_F_SKIPPED_STEPS, WPROTO_F_CUDA_GRAPH,
            WPROTO_F_CUDA_GRAPH_REASON, WPROTO_F_DEVICE_MEMORY_USED_BYTES};
        for (size_t i = 0; i < TY_ARRAY_LEN(where); i++) {
            json_t *v = json_object_get(ev, where[i]);
            json_object_set(m, where[i], v ? v : json_null());
        }
        store_job_epoch(env->store, w->job_id,
                        json_integer_value(json_object_get(ev, WPROTO_F_EPOCH)),
                        m, &err);
        publish(r, w->job_id, EV_JOB_EPOCH, m);
        json_decref(m);
        break;
    }
    case WPROTO_MSG_RESUME:
        w->resumed_from_epoch =
            (int)json_integer_value(json_object_get(ev, WPROTO_F_EPOCH));
        log_event("info", "job_resume",
                  json_pack("{s:s, s:O?, s:O?}", "job", w->job_id, "epoch",
                            json_object_get(ev, WPROTO_F_EPOCH), "step",
                            json_object_get(ev, WPROTO_F_STEP)));
        break;
    case WPROTO_MSG_DONE:
        w->done = 1;
        break;
    case WPROTO_MSG_STARTED: {
        /* What the worker found in its environment, for comparison with
         * the placement. */
        json_t *saw = json_deep_copy(ev);
        json_object_del(saw, WPROTO_F_EVENT);
        json_t *patch = json_pack("{s:o}", "worker_saw", saw);
        store_job_placement_merge(env->store, w->job_id, patch, &err);
        json_decref(patch);
        break;
    }
    case WPROTO_MSG_ERROR: {
        const char *msg =
            json_string_value(json_object_get(ev, WPROTO_F_MESSAGE));
        snprintf(w->error, sizeof w->error, "%s", msg ? msg : "training failed");
        break;
    }
    default:
        /* heartbeat: the supervisor noted the time; preempted: the exit
         * status says it; unknown kinds count as heartbeats only. */
        break;
    }
    if (err.msg[0])
        log_msg("error", "runner: job %s: %s", w->job_id, err.msg);
}

/* Registers the finished model: validates it by loading it, moves it into
 * the blob folder, and commits the model row with the job's success. */
static ty_status register_model(const jobs_env *env, job_run *w, ty_err *err)
{
    char model_path[PATH_MAX];
    snprintf(model_path, sizeof model_path, "%s/model.safetensors", w->dir);
    nn_net *net = NULL;
    json_t *job = NULL, *doc = NULL;
    ty_status s = nn_net_load(model_path, &net, err);
    if (s != TY_OK) {
        ty_err_prefix(err, "the trained model could not be read back");
        return s;
    }
    char model_id[TY_ID_MAX], sha[65], now[32];
    int64_t bytes = 0;
    if ((s = store_job_get_internal(env->store, w->job_id, &job, err)) != TY_OK ||
        (s = ty_id_new("mdl_", model_id, err)) != TY_OK)
        goto done;
    ty_now_iso(now);
    doc = json_object();
    json_object_set_new(doc, "id", json_string(model_id));
    json_object_set(doc, "name", json_object_get(job, "name"));
    json_object_set_new(doc, "job", json_string(w->job_id));
    json_object_set(doc, "dataset", json_object_get(job, "dataset"));
    nn_net_describe(net, doc);
    /* Where it was trained: the job's device (its last run's). */
    json_t *device = json_object_get(job, "device");
    json_object_set_new(doc, "trained_on",
                        json_is_string(device) ? json_incref(device)
                                               : json_null());
    json_object_set(doc, "hyperparameters",
                    json_object_get(job, "hyperparameters"));
    json_object_set(doc, "metrics", json_object_get(job, "metrics"));
    store_blob_lock(env->store);
    s = blob_import(env->data_dir, model_path, sha, &bytes, err);
    if (s == TY_OK) {
        json_object_set_new(doc, "sha256", json_string(sha));
        json_object_set_new(doc, "bytes", json_integer(bytes));
        json_object_set_new(doc, "created_at", json_string(now));
        s = store_job_succeed(env->store, w->job_id, model_id, sha, bytes, doc,
                              err);
    }
    store_blob_unlock(env->store);
    if (s == TY_OK) {
        char ckpt[PATH_MAX];
        snprintf(ckpt, sizeof ckpt, "%s/checkpoint.safetensors", w->dir);
        unlink(ckpt);
    }
done:
    json_decref(doc);
    json_decref(job);
    nn_net_destroy(net);
    return s;
}

/* A crashed job (killed, lost, or exited without a result) goes back to
 * the queue after its back-off, or fails when it has had max_attempts
 * runs. Caller holds mu; the job is still in the scheduler. */
static void retry_or_fail(jobs_service *r, job_run *w, const char *what)
{
    const jobs_env *env = &r->env;
    ty_err err = {0};
    json_t *job = NULL;
    int64_t attempts = 1, max_attempts = env->max_attempts;
    if (store_job_get_internal(env->store, w->job_id, &job, &err) == TY_OK) {
        attempts = json_integer_value(json_object_get(job, "attempts"));
        json_t *m = json_object_get(json_object_get(job, "hyperparameters"),
                                    "max_attempts");
        if (json_is_integer(m))
            max_attempts = json_integer_value(m);
    }
    json_decref(job);
    char msg[900];
    sched_job_info info;
    int have = sched_job_get(r->sched, w->sjob, &info) == TY_OK;
    if (attempts >= max_attempts || !have || r->nretries == SIZE_MAX) {
        snprintf(msg, sizeof msg, "%s; it failed %lld of %lld attempts",
                 what, (long long)attempts, (long long)max_attempts);
        store_job_finish(env->store, w->job_id, JOB_FAILED, msg, NULL, &err);
        log_transition(r, w->job_id, JOB_FAILED, msg);
        sched_job_remove(r->sched, w->sjob);
        return;
    }
    double delay = retry_backoff_seconds((int)attempts, env->retry_backoff_s,
                                         RETRY_BACKOFF_CAP_S);
    snprintf(msg, sizeof msg,
             "%s; attempt %lld of %lld, retrying in %.1f s from the last "
             "checkpoint",
             what, (long long)attempts, (long long)max_attempts, delay);
    if (r->nretries == r->retry_cap) {
        size_t ncap = r->retry_cap ? r->retry_cap * 2 : 8;
        retry_rec *p = realloc(r->retries, ncap * sizeof *p);
        if (!p) {
            store_job_finish(env->store, w->job_id, JOB_FAILED, what, NULL,
                             &err);
            sched_job_remove(r->sched, w->sjob);
            return;
        }
        r->retries = p;
        r->retry_cap = ncap;
    }
    if (store_job_requeue(env->store, w->job_id, 0, msg, &err) != TY_OK) {
        sched_job_remove(r->sched, w->sjob);
        return;
    }
    retry_rec *rr = &r->retries[r->nretries++];
    memset(rr, 0, sizeof *rr);
    snprintf(rr->job_id, sizeof rr->job_id, "%s", w->job_id);
    rr->tenant = info.tenant;
    rr->priority = info.priority;
    rr->submit_time = info.submit_time;
    rr->req = info.request;
    rr->due = now_s() + delay;
    snprintf(rr->why, sizeof rr->why, "%.299s", msg);
    sched_job_remove(r->sched, w->sjob);
    log_transition(r, w->job_id, JOB_QUEUED, msg);
}

/* The worker has exited with wait status ws (lost: killed after heartbeat
 * silence): record the outcome and settle the job with the scheduler.
 * Caller holds mu. */
static void finish_worker(jobs_service *r, job_run *w, int ws, int lost)
{
    const jobs_env *env = &r->env;
    ty_err err = {0};
    char msg[700];
    const char *status;
    set_holder(r, w->slot, NULL, NULL);
    opm_job_ended(w->job_id);
    if (w->cancel) {
        status = JOB_CANCELLED;
        snprintf(msg, sizeof msg, "cancelled by request");
    } else if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0 && w->done) {
        ty_status s = register_model(env, w, &err);
        sched_job_remove(r->sched, w->sjob);
        if (s == TY_OK) {
            log_transition(r, w->job_id, JOB_SUCCEEDED, NULL);
            return;
        }
        store_job_finish(env->store, w->job_id, JOB_FAILED, err.msg, NULL,
                         &err);
        log_transition(r, w->job_id, JOB_FAILED, err.msg);
        return;
    } else if (w->preempting ||
               (WIFEXITED(ws) && WEXITSTATUS(ws) == WPROTO_EXIT_PREEMPTED)) {
        /* Preempted (or stopped by SIGUSR1 before it could checkpoint): back
         * to the queue, to resume from its last checkpoint. */
        if (store_job_requeue(env->store, w->job_id, 1, NULL, &err) == TY_OK &&
            sched_job_requeue(r->sched, w->sjob, &err) == TY_OK) {
            log_transition(r, w->job_id, JOB_QUEUED, "preempted");
        } else {
            sched_job_remove(r->sched, w->sjob);
        }
        return;
    } else if (lost) {
        snprintf(msg, sizeof msg,
                 "the training process sent no heartbeat for %d s and was "
                 "killed; its log is %s/" WPROTO_LOG_FILE,
                 env->heartbeat_timeout_s, w->dir);
        retry_or_fail(r, w, msg);
        return;
    } else if (w->error[0]) {
        /* The worker said what went wrong: running it again would not
         * help. */
        status = JOB_FAILED;
        snprintf(msg, sizeof msg, "%s", w->error);
    } else if (WIFSIGNALED(ws)) {
        snprintf(msg, sizeof msg,
                 "the training process was killed by signal %d (%s); its log "
                 "is %s/" WPROTO_LOG_FILE,
                 WTERMSIG(ws), strsignal(WTERMSIG(ws)), w->dir);
        retry_or_fail(r, w, msg);
        return;
    } else {
        snprintf(msg, sizeof msg,
                 "the training process exited with status %d without a "
                 "result; its log is %s/" WPROTO_LOG_FILE,
                 WIFEXITED(ws) ? WEXITSTATUS(ws) : -1, w->dir);
        retry_or_fail(r, w, msg);
        return;
    }
    sched_job_remove(r->sched, w->sjob);
    store_job_finish(env->store, w->job_id, status, msg, NULL, &err);
    log_transition(r, w->job_id, status, msg);
}

/* Hands jobs whose back-off is over back to the scheduler. Caller holds
 * mu. */
static void retries_due(jobs_service *r)
{
    double t = now_s();
    for (size_t i = 0; i < r->nretries;) {
        retry_rec *rr = &r->retries[i];
        if (rr->due > t) {
            i++;
            continue;
        }
        sched_job_desc d = {.id = rr->job_id, .tenant = rr->tenant,
                            .priority = rr->priority,
                            .submit_time = rr->submit_time,
                            .request = rr->req};
        ty_err err = {0};
        if (sched_job_submit(r->sched, &d, NULL, &err) != TY_OK) {
            store_job_finish(r->env.store, rr->job_id, JOB_FAILED, err.msg,
                             NULL, &err);
            log_transition(r, rr->job_id, JOB_FAILED, err.msg);
        }
        r->retries[i] = r->retries[--r->nretries];
    }
}

/* One scheduling pass and its decisions. Caller holds mu. */
static void schedule(jobs_service *r)
{
    retries_due(r);
    sched_result res;
    sched_pass(r->sched, wall_s(), &res);
    /* The arrays belong to the scheduler until its next pass; starting a
     * worker may remove jobs (a cancel), which does not touch them. */
    for (size_t i = 0; i < res.n_preemptions; i++)
        preempt_worker(r, &res.preemptions[i]);
    for (size_t i = 0; i < res.n_placements && !r->stopping; i++)
        start_placement(r, res.placements[i].job, res.placements[i].slot);
}

/* supervisor_hooks.on_tick: mu held. */
static void on_tick(void *ctx)
{
    schedule(ctx);
}

/* supervisor_hooks.on_exit: mu held. */
static void on_worker_exit(void *ctx, int place, int ws, int lost)
{
    jobs_service *r = ctx;
    job_run *w = &r->runs[place];
    if (!w->used)
        return;
    finish_worker(r, w, ws, lost);
    run_release(r, w);
}

static void service_free(jobs_service *r)
{
    sched_destroy(r->sched);
    free(r->tenant_ids);
    free(r->runs);
    free(r->retries);
    free(r->report);
    free(r);
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
    json_array_foreach(rows, i, row) {
        const char *id = json_string_value(json_object_get(row, "id"));
        const char *tenant =
            json_string_value(json_object_get(row, "tenant_id"));
        sched_request req;
        int priority = 0;
        ty_status s = jobreq_parse(json_object_get(row, "resources"),
                                   r->nslots > 0, &req, NULL, &err);
        if (s == TY_OK)
            s = jobreq_priority(json_object_get(row, "priority"), &priority,
                                &err);
        int t = -1;
        if (s == TY_OK)
            s = tenant_handle(r, tenant, &t, &err);
        if (s == TY_OK) {
            sched_job_desc d = {
                .id = id, .tenant = t, .priority = priority,
                .submit_time =
                    json_number_value(json_object_get(row, "submit_time")),
                .request = req};
            s = sched_job_submit(r->sched, &d, NULL, &err);
        }
        if (s == TY_OK) {
            loaded++;
            continue;
        }
        char msg[600];
        snprintf(msg, sizeof msg, "this server cannot run the job: %s",
                 err.msg);
        store_job_finish(r->env.store, id, JOB_FAILED, msg, NULL, &err);
        log_transition(r, id, JOB_FAILED, msg);
    }
    json_decref(rows);
    if (loaded)
        log_msg("info", "runner: %d queued job(s) handed to the scheduler",
                loaded);
}

ty_status jobs_start(const jobs_env *env, jobs_service **out, ty_err *err)
{
    jobs_service *r = calloc(1, sizeof *r);
    if (!r)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    r->env = *env;
    r->inv = env->inventory;
    r->nslots = r->inv ? r->inv->nslots : 0;
    r->cap = r->nslots + env->max_jobs;
    sched_slot *slots = calloc((size_t)r->nslots + 1, sizeof *slots);
    r->runs = calloc((size_t)r->cap + 1, sizeof *r->runs);
    if (!slots || !r->runs) {
        free(slots);
        service_free(r);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    for (int i = 0; i < r->nslots; i++) {
        const inv_slot *s = &r->inv->slots[i];
        slots[i] = (sched_slot){.gpu = s->gpu,
                                .is_mig = s->kind == INV_SLOT_MIG,
                                .profile = s->profile,
                                .compute_slices = s->compute_slices,
                                .memory_bytes = s->memory_bytes};
    }
    sched_config cfg = {.backfill_wait = env->backfill_wait_s,
                        .preempt = env->preempt,
                        .preempt_wait = env->preempt_wait_s,
                        .max_cpu_jobs = env->max_jobs,
                        .fair_window = env->fair_window_s};
    r->sched = sched_create(&cfg, slots, (size_t)r->nslots, err);
    free(slots);
    if (!r->sched) {
        service_free(r);
        return TY_EINVAL;
    }
    pthread_mutex_init(&r->mu, NULL);
    supervisor_hooks hooks = {.ctx = r, .on_tick = on_tick,
                              .on_message = on_message,
                              .on_exit = on_worker_exit};
    r->sup = supervisor_create(r->cap, env->self_exe,
                               env->heartbeat_timeout_s, &r->mu, &hooks, err);
    if (!r->sup) {
        pthread_mutex_destroy(&r->mu);
        service_free(r);
        return TY_ENOMEM;
    }
    load_queued(r);
    if (supervisor_start(r->sup, err) != TY_OK) {
        supervisor_destroy(r->sup);
        pthread_mutex_destroy(&r->mu);
        service_free(r);
        return TY_EIO;
    }
    *out = r;
    return TY_OK;
}

/* Wakes the supervisor's thread for a scheduling pass. */
static void wake(jobs_service *r)
{
    supervisor_wake(r->sup);
}

int jobs_host_has_gpus(const jobs_service *r)
{
    return r && r->nslots > 0;
}

/* Whether tenant_id's request could ever run here (sched_request_check
 * with the tenant's quota): TY_OK or TY_EINVAL naming "resources.gpu". */
static ty_status request_check(jobs_service *r, const char *tenant_id,
                               const sched_request *req, ty_err *err)
{
    if (!r)
        return TY_OK;
    pthread_mutex_lock(&r->mu);
    int t = -1;
    ty_status s = tenant_handle(r, tenant_id, &t, err);
    if (s == TY_OK)
        s = sched_request_check(r->sched, t, req, err);
    pthread_mutex_unlock(&r->mu);
    return s;
}

/* Hands a job just stored as queued to the scheduler and wakes the
 * thread. TY_EINVAL (the request cannot run here) or TY_ENOMEM; the
 * caller then fails the job. */
static ty_status enqueue(jobs_service *r, const char *tenant_id,
                         const char *job_id, int priority,
                         const sched_request *req, ty_err *err)
{
    pthread_mutex_lock(&r->mu);
    int t = -1;
    ty_status s = tenant_handle(r, tenant_id, &t, err);
    if (s == TY_OK) {
        sched_job_desc d = {.id = job_id, .tenant = t, .priority = priority,
                            .submit_time = wall_s(), .request = *req};
        s = sched_job_submit(r->sched, &d, NULL, err);
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

ty_status jobs_submit(jobs_service *r, const char *tenant,
                      const job_submission *sub, json_t **job_out,
                      ty_err *err)
{
    if (!r)
        return ty_fail(err, TY_EINTERNAL, NULL, "the job runner is not running");
    const jobs_env *env = &r->env;
    admission adm;
    json_t *job = NULL;
    char id[TY_ID_MAX];
    ty_status s;
    /* Whether this host could ever give what it asks (an error saying
     * why, not a job queued forever), then everything else that can be
     * checked now. */
    if ((s = request_check(r, tenant, &sub->req, err)) != TY_OK) {
        memset(&adm, 0, sizeof adm);
        goto done;
    }
    if ((s = admission_check(env, tenant, sub, &adm, err)) != TY_OK ||
        (s = ty_id_new("job_", id, err)) != TY_OK ||
        (s = store_job_insert_req(env->store, tenant, id, adm.name,
                                  sub->dataset, adm.validation, adm.spec,
                                  adm.hyperparameters,
                                  (int64_t)adm.memory_bytes, sub->resources,
                                  sub->priority, err)) != TY_OK ||
        (s = store_job_get(env->store, tenant, id, &job, err)) != TY_OK)
        goto done;
    /* job.created goes out before the supervisor can publish
     * job.started. */
    publish_doc(r, tenant, id, EV_JOB_CREATED, job);
    /* The reply shows the job as submitted (queued), read before the
     * supervisor can start it. */
    if ((s = enqueue(r, tenant, id, sub->priority, &sub->req, err)) !=
        TY_OK) {
        /* Stored but not schedulable (a quota lowered meanwhile): the job
         * fails with the reason rather than waiting forever. */
        ty_err e2 = {0};
        json_t *failed = NULL;
        if (store_job_finish(env->store, id, JOB_FAILED, err->msg, NULL,
                             &e2) == TY_OK &&
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
            supervisor_cancel(r->sup, i);
        }
    }
    if (!running) {
        int j = sched_job_find(r->sched, job_id);
        sched_job_info info;
        if (j >= 0 && sched_job_get(r->sched, j, &info) == TY_OK &&
            (info.state == SCHED_JOB_QUEUED || info.state == SCHED_JOB_PENDING))
            sched_job_remove(r->sched, j);
        for (size_t i = 0; i < r->nretries; i++)
            if (!strcmp(r->retries[i].job_id, job_id)) {
                r->retries[i] = r->retries[--r->nretries];
                break;
            }
    }
    pthread_mutex_unlock(&r->mu);
    wake(r);
}

ty_status jobs_cancel(jobs_service *r, const char *tenant,
                      const char *job_id, json_t **job, int *was_running,
                      ty_err *err)
{
    const jobs_env *env = &r->env;
    *was_running = 0;
    ty_status s = store_job_request_cancel(env->store, tenant, job_id,
                                           was_running, err);
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
            sched_tenant_set(r->sched, tenant_id,
                             lim.weight > 0 ? lim.weight : 1.0,
                             lim.max_gpu_slices, lim.max_running_jobs, NULL,
                             &err) != TY_OK)
            log_msg("error", "runner: tenant %s: %s", tenant_id, err.msg);
    }
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
        const char *other_tenant = have_other ? tenant_id_of(r, other.tenant)
                                              : "";
        int visible = have_other && viewer_tenant &&
                      !strcmp(other_tenant, viewer_tenant);
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
        const char *quota = w->quota == SCHED_QUOTA_GPU_SLICES ? "max_gpu_slices"
                            : w->quota == SCHED_QUOTA_RUNNING_JOBS
                                ? "max_running_jobs"
                                : NULL;
        return json_pack("{s:I, s:I, s:s, s:s?, s:s?, s:s}", "position",
                         (json_int_t)w->position, "tenant_position",
                         (json_int_t)w->tenant_position, "reason",
                         sched_wait_reason_name(w->reason), "quota", quota,
                         "job", visible ? other.id : NULL, "detail", detail);
    }
    for (size_t i = 0; i < r->nretries; i++)
        if (!strcmp(r->retries[i].job_id, id)) {
            double left = r->retries[i].due - now_s();
            char detail[400];
            snprintf(detail, sizeof detail, "retry back-off: %.1f s left",
                     left > 0 ? left : 0.0);
            return json_pack("{s:n, s:n, s:s, s:n, s:n, s:s}", "position",
                             "tenant_position", "reason", "retry back-off",
                             "quota", "job", "detail", detail);
        }
    return json_pack("{s:n, s:n, s:s, s:n, s:n, s:s}", "position",
                     "tenant_position", "reason", "scheduling", "quota", "job",
                     "detail", "scheduling: the runner is taking the job");
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
    size_t nrep = sched_queue_report(r->sched, r->report,
                                     want <= r->report_cap ? want
                                                           : r->report_cap);
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
    /* The thread stops, then the workers; their jobs stay running in the
     * store until requeued here. */
    supervisor_stop(r->sup);
    for (int i = 0; i < r->cap; i++)
        if (r->runs[i].used)
            set_holder(r, r->runs[i].slot, NULL, NULL);
    int64_t n = 0;
    ty_err err;
    store_job_requeue_running(r->env.store, &n, &err);
    if (n)
        log_msg("info", "requeued %lld running job(s) for the next start",
                (long long)n);
    pthread_mutex_destroy(&r->mu);
    service_free(r);
}
