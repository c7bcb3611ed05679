/*
 * lifecycle.c - the scheduling pass and a placed job's life in the job
 * service (see state.h). The pass places jobs of every kind and hands each
 * placement to its kind's hooks (jobs/kind.h); the supervisor's and the
 * executor's hooks come here and are dispatched the same way. The rest of
 * the file is the training kind: its worker started in a supervisor place with the
 * job folder written (job.json), its lines turned into the job's state
 * (progress, epochs, resume, the worker's view of its placement), and its
 * exit settled: the model registered, a failure or cancel recorded, a
 * preempted job requeued to resume, a crashed one retried after its
 * back-off or failed after max_attempts. Every function here runs on the
 * supervisor's thread, through its hooks.
 */
#include "jobs/state.h"

#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/ids.h"
#include "common/log.h"
#include "common/opmetrics.h"
#include "jobs/miglayout.h"
#include "jobs/retry.h"
#include "models/nn.h"
#include "store/blob.h"

/* ---- starting a worker ---- */

/* Writes job.json: what the worker needs, with blob paths resolved; world
 * is the run's world size (the scheduler's gang: resources.workers, or
 * for an elastic job what fitted at this start). */
static ty_status write_job_file(const jobs_env *env, const json_t *job,
                                const char *dir, int world, ty_err *err)
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
    json_object_set_new(spec, WPROTO_JOB_ID,
                        json_object_get(job, "id")
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
    /* max_attempts is the service's, not the trainer's. */
    json_t *hp = json_deep_copy(json_object_get(job, "hyperparameters"));
    json_object_del(hp, "max_attempts");
    json_object_set_new(spec, WPROTO_JOB_HYPERPARAMETERS,
                        hp ? hp : json_object());
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/checkpoint.safetensors", dir);
    json_object_set_new(spec, WPROTO_JOB_CHECKPOINT_PATH, json_string(p));
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    json_object_set_new(spec, WPROTO_JOB_MODEL_PATH, json_string(p));
    json_object_set_new(spec, WPROTO_JOB_THREADS,
                        json_integer(env->worker_threads));
    if (world > 1)
        json_object_set_new(spec, WPROTO_JOB_WORLD, json_integer(world));
    json_object_set_new(spec, WPROTO_JOB_EXTRA_META,
                        json_pack("{s:O, s:s}", "trainyard.job",
                                  json_object_get(job, "id"),
                                  "trainyard.dataset", ds_id));
    /* hyperparameters.init_from (an id since admission): its file */
    const char *init = json_string_value(
        json_object_get(json_object_get(job, "hyperparameters"), "init_from"));
    if (init) {
        char msha[65];
        json_t *mdoc = NULL;
        if ((s = store_model_get(env->store, tenant, init, &mdoc, msha, err)) !=
            TY_OK) {
            if (s == TY_ENOTFOUND)
                s = ty_fail(err, TY_EINVAL, "hyperparameters.init_from",
                            "model %s, which the job starts from, was "
                            "deleted",
                            init);
            json_decref(spec);
            spec = NULL;
            goto done;
        }
        json_decref(mdoc);
        blob_path(env->data_dir, msha, p, sizeof p);
        json_object_set_new(spec, WPROTO_JOB_INIT_PATH, json_string(p));
    }
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

/* The memory a worker asks of a cluster for the job: twice the training
 * estimate (admission's, which leaves out the dataset and the process) and
 * 1 GiB besides, within --max-job-memory's doubling when that is set; 0
 * (the cluster's default) when there is no estimate. */
/* The job's data-parallel workers (resources.workers; 1 without). */
static uint64_t job_memory_ask(const jobs_env *env, const json_t *job)
{
    json_t *e = json_object_get(job, "estimated_memory_bytes");
    if (!json_is_integer(e) || json_integer_value(e) <= 0)
        return 0;
    uint64_t ask = 2 * (uint64_t)json_integer_value(e) + (1ull << 30);
    if (env->max_job_memory && ask > 2 * env->max_job_memory + (1ull << 30))
        ask = 2 * env->max_job_memory + (1ull << 30);
    return ask;
}

/* The training kind's start (jobs_kind.start): job.json written, the
 * job's start recorded, its worker started by the executor. Caller holds
 * mu. */
static ty_status training_start(void *ctx, int place, int sj, int slot)
{
    jobs_service *r = ctx;
    const jobs_env *env = &r->env;
    job_run *w = &r->runs[place];
    const char *id = w->job_id, *tenant = w->tenant_id;
    sched_job_info info;
    ty_err err = {0};
    ty_status s = sched_job_get(r->sched, sj, &info);
    if (s != TY_OK) {
        sched_job_remove(r->sched, sj);
        return s;
    }

    char dev[INV_NAME_MAX + 8], cvd[INV_NAME_MAX];
    int has_cvd;
    svc_device_for(r, slot, dev, sizeof dev, cvd, sizeof cvd, &has_cvd);
    json_t *placement = svc_placement_json(r, slot, dev, cvd, has_cvd);
    svc_gang_placement(&info, placement);
    /* A data-parallel job runs at the scheduler's gang size: its workers,
     * or for an elastic one what fitted at this start (svc_gang_world). */
    const int world = info.gang > 1 ? info.gang : 1;
    /* On a cluster the job is scheduled until its worker starts. */
    int remote = exec_is_slurm(r->exec);
    s = remote ? store_job_schedule_on(env->store, id, dev, placement, &err)
               : store_job_start_on(env->store, id, dev, placement, &err);
    json_decref(placement);
    if (s != TY_OK) {
        /* TY_ECONFLICT: cancelled meanwhile. */
        if (s != TY_ECONFLICT)
            log_msg_limited(NULL, "error", "runner: %s", err.msg);
        sched_job_remove(r->sched, sj);
        return s;
    }
    /* A gang of whole GPUs: a rank on each member, each member held. */
    exec_rank *members = NULL;
    if (info.gang > 1 && info.gang_slots && slot >= 0 &&
        !(members = svc_gang_hold(r, &info, id, tenant))) {
        store_job_finish(env->store, id, JOB_FAILED, "out of memory", NULL,
                         &err);
        sched_job_remove(r->sched, sj);
        return TY_ENOMEM;
    }
    if (!members)
        svc_set_holder(r, slot, id, tenant);
    double queue_wait = svc_wall() - info.submit_time;
    opm_job_started(tenant, queue_wait);
    json_t *job = NULL, *where = NULL;
    int workers = 1, least = 1;
    s = store_job_get_internal(env->store, id, &job, &err);
    if (s == TY_OK)
        svc_job_gang(job, &workers, &least);
    if (s == TY_OK && (s = fs_mkdirs(w->dir, 0700, &err)) == TY_OK &&
        (s = write_job_file(env, job, w->dir, world, &err)) == TY_OK) {
        exec_start st = {.job_id = id,
                         .tenant_id = tenant,
                         .dir = w->dir,
                         .device = dev,
                         .cvd = cvd,
                         .has_cvd = has_cvd,
                         .slot = slot >= 0 ? &r->inv->slots[slot] : NULL,
                         .threads = env->worker_threads,
                         .memory_bytes = job_memory_ask(env, job),
                         .ranks = world,
                         .members = members,
                         .ranks_per_node = svc_job_ranks_per_node(job)};
        s = r->exec->start(r->exec->impl, place, &st, &where, &err);
    }
    json_decref(job);
    free(members);
    if (s != TY_OK) {
        char msg[600];
        snprintf(msg, sizeof msg, "could not start the training process: %s",
                 err.msg);
        store_job_finish(env->store, id, JOB_FAILED, msg, NULL, &err);
        svc_log_transition(r, id, JOB_FAILED, msg);
        sched_job_remove(r->sched, sj);
        svc_set_holder(r, slot, NULL, NULL);
        svc_release_holders(r, id);
        return s;
    }
    /* A data-parallel job's placement says the world size of this run
     * (an elastic job's may be below resources.workers). */
    if (workers > 1 && (where || (where = json_object())))
        json_object_set_new(where, "world_size", json_integer(world));
    if (where)
        store_job_placement_merge(env->store, id, where, &err);
    json_t *f = json_pack("{s:s, s:s, s:s, s:s}", "job", id, "status",
                          remote ? JOB_SCHEDULED : JOB_RUNNING, "device", dev,
                          "executor", r->exec->name);
    json_t *pid = json_object_get(where, "worker_pid");
    if (pid)
        json_object_set(f, "pid", pid);
    json_decref(where);
    if (slot >= 0)
        json_object_set_new(f, "slot", json_integer(slot));
    json_object_set_new(f, "tenant", json_string(tenant));
    json_object_set_new(f, "queue_wait_s",
                        json_real(queue_wait > 0 ? queue_wait : 0));
    log_event("info", "job", f);
    svc_publish(r, id, EV_JOB_STARTED, NULL);
    return TY_OK;
}

/* Starts scheduler job sj, placed on slot (-1: CPU): a run entry is
 * claimed for it and its kind starts its process. Caller holds mu. */
static void start_placement(jobs_service *r, int sj, int slot)
{
    sched_job_info info;
    if (sched_job_get(r->sched, sj, &info) != TY_OK)
        return;
    char id[TY_ID_MAX];
    snprintf(id, sizeof id, "%s", info.id);
    int place = -1;
    for (int i = 0; i < r->cap && place < 0; i++)
        if (!r->runs[i].used)
            place = i;
    if (place < 0) {
        /* Cannot happen: the table has a place per slot, CPU job and
         * replica (--max-replicas bounds the replicas on the CPU). */
        ty_err err = {0};
        log_msg_limited(NULL, "error",
                        "runner: no worker entry free for job %s", id);
        sched_job_requeue(r->sched, sj, &err);
        return;
    }
    job_run *w =
        svc_run_claim(r, place, sj, slot, id, svc_tenant_id(r, info.tenant));
    if (w->kind->start(w->kind->ctx, place, sj, slot) != TY_OK)
        svc_run_release(r, w);
    else
        svc_usage_open(r, w);
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
        r->exec->preempt(r->exec->impl, i);
        log_event("info", "job_preempt",
                  json_pack("{s:s, s:s, s:i}", "job", victim.id, "for", job.id,
                            "slot", p->slot));
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

/* A finite number of the line as it is (R^2 may be below 0), else null. */
static json_t *signed_metric(const json_t *ev, const char *key)
{
    json_t *v = json_object_get(ev, key);
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        return json_null();
    return json_real(json_number_value(v));
}

/* A regression epoch's metrics into its record m (the names of the line),
 * and the job's own rmse, mae and r2: the validation set's, or the
 * training examples' when the job has none (new reference; NULL for a
 * line without them: classification, older workers). */
static json_t *regression_metrics(const json_t *ev, json_t *m)
{
    static const char *const keys[] = {WPROTO_F_TRAIN_RMSE, WPROTO_F_TRAIN_MAE,
                                       WPROTO_F_TRAIN_R2,   WPROTO_F_VAL_RMSE,
                                       WPROTO_F_VAL_MAE,    WPROTO_F_VAL_R2};
    if (!json_object_get(ev, WPROTO_F_TRAIN_RMSE))
        return NULL;
    for (size_t i = 0; i < TY_ARRAY_LEN(keys); i++)
        json_object_set_new(m, keys[i], signed_metric(ev, keys[i]));
    int val = json_is_number(json_object_get(m, WPROTO_F_VAL_RMSE));
    return json_pack(
        "{s:O, s:O, s:O}", "rmse",
        json_object_get(m, val ? WPROTO_F_VAL_RMSE : WPROTO_F_TRAIN_RMSE),
        "mae", json_object_get(m, val ? WPROTO_F_VAL_MAE : WPROTO_F_TRAIN_MAE),
        "r2", json_object_get(m, val ? WPROTO_F_VAL_R2 : WPROTO_F_TRAIN_R2));
}

/* A number of the line, NAN when it has none (stored as a gap). */
static double number_or_nan(const json_t *ev, const char *key)
{
    json_t *v = json_object_get(ev, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* What a worker's line means for its job (the training kind's message:
 * mu not held). */
static void training_message(void *ctx, int place, wproto_msg kind,
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
            double t = svc_now();
            int last = json_number_value(
                           json_object_get(ev, WPROTO_F_FRACTION)) >= 1.0;
            int64_t epoch =
                json_integer_value(json_object_get(ev, WPROTO_F_EPOCH));
            int64_t step =
                json_integer_value(json_object_get(ev, WPROTO_F_STEP));
            int64_t total =
                json_integer_value(json_object_get(ev, WPROTO_F_TOTAL_STEPS));
            int64_t epochs =
                json_integer_value(json_object_get(ev, WPROTO_F_EPOCHS));
            if (!w->eta_step0 && step > 0) {
                w->eta_t0 = t;
                w->eta_step0 = step;
            }
            /* Written at most once a second, but always at a new epoch, so
             * the progress never names an epoch before the one running.
             * A line with a validation (eval_every_steps) is written up to
             * ten times a second: every one at any sensible pace, without
             * a store write and an event per step of a tiny model
             * validated every step (which starved a browser's renderer). */
            const int val =
                json_is_number(json_object_get(ev, WPROTO_F_VAL_LOSS));
            if (last || epoch != w->last_progress_epoch ||
                t - w->last_progress_write >= 1.0 ||
                (val && t - w->last_val_write >= 0.1)) {
                w->last_progress_write = t;
                if (val)
                    w->last_val_write = t;
                w->last_progress_epoch = epoch;
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
                /* The time left at this run's pace so far. */
                if (step > w->eta_step0 && total >= step && t > w->eta_t0)
                    json_object_set_new(
                        progress, "eta_seconds",
                        json_real((double)(total - step) * (t - w->eta_t0) /
                                  (double)(step - w->eta_step0)));
                if (step > 0 && total > 0 && epochs > 0)
                    store_job_step(env->store, w->job_id, step, epoch,
                                   (double)step * (double)epochs /
                                       (double)total,
                                   number_or_nan(ev, WPROTO_F_LOSS),
                                   number_or_nan(ev, WPROTO_F_LR), &err);
                json_t *metrics = json_object();
                json_object_set_new(metrics, "train_loss",
                                    metric(ev, WPROTO_F_LOSS));
                json_object_set_new(metrics, "samples_per_sec",
                                    metric(ev, WPROTO_F_SAMPLES_PER_SEC));
                json_object_set_new(metrics, "learning_rate",
                                    metric(ev, WPROTO_F_LR));
                /* eval_every_steps: the validation loss of this step */
                json_t *vl = json_object_get(ev, WPROTO_F_VAL_LOSS);
                if (json_is_number(vl)) {
                    json_object_set_new(metrics, "val_loss",
                                        metric(ev, WPROTO_F_VAL_LOSS));
                    json_object_set_new(metrics, "val_step",
                                        json_integer(step));
                }
                store_job_progress(env->store, w->job_id, progress, metrics,
                                   &err);
                svc_publish(r, w->job_id, EV_JOB_PROGRESS, NULL);
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
                WPROTO_F_TRAIN_LOSS,      WPROTO_F_TRAIN_ACCURACY,
                WPROTO_F_VAL_LOSS,        WPROTO_F_VAL_ACCURACY,
                WPROTO_F_SAMPLES_PER_SEC, WPROTO_F_SECONDS};
            for (size_t i = 0; i < TY_ARRAY_LEN(keys); i++)
                json_object_set_new(m, keys[i], metric(ev, keys[i]));
            /* A byte count: kept whole (older workers do not send it). */
            json_t *peak = json_object_get(ev, WPROTO_F_PEAK_MEMORY_BYTES);
            json_object_set_new(m, "peak_memory_bytes",
                                json_is_integer(peak)
                                    ? json_integer(json_integer_value(peak))
                                    : json_null());
            /* Where and how it ran: passed through when the worker said. */
            static const char *const where[] = {
                WPROTO_F_DEVICE,
                WPROTO_F_PRECISION,
                WPROTO_F_LOSS_SCALE,
                WPROTO_F_SKIPPED_STEPS,
                WPROTO_F_CUDA_GRAPH,
                WPROTO_F_CUDA_GRAPH_REASON,
                WPROTO_F_DEVICE_MEMORY_USED_BYTES};
            for (size_t i = 0; i < TY_ARRAY_LEN(where); i++) {
                json_t *v = json_object_get(ev, where[i]);
                json_object_set(m, where[i], v ? v : json_null());
            }
            /* A language model's, a data-parallel run's: kept when the
             * worker sent them. */
            static const char *const lm_keys[] = {
                WPROTO_F_TOKENS_PER_SEC,        WPROTO_F_TRAIN_PERPLEXITY,
                WPROTO_F_VAL_PERPLEXITY,        WPROTO_F_WORLD_SIZE,
                WPROTO_F_ALLREDUCE_SECONDS,     WPROTO_F_ALLREDUCE_SHARE,
                WPROTO_F_OPTIMIZER_STATE_BYTES, WPROTO_F_COMM_BYTES};
            for (size_t i = 0; i < TY_ARRAY_LEN(lm_keys); i++) {
                json_t *v = json_object_get(ev, lm_keys[i]);
                if (v)
                    json_object_set(m, lm_keys[i], v);
            }
            json_t *reg = regression_metrics(ev, m);
            store_job_epoch(
                env->store, w->job_id,
                json_integer_value(json_object_get(ev, WPROTO_F_EPOCH)), m,
                &err);
            /* The job's latest rmse, mae, r2 beside its val_loss. */
            if (reg)
                store_job_progress(env->store, w->job_id, NULL, reg, &err);
            /* The epoch's val_loss is no step's: the step of the last
             * eval_every_steps measurement no longer goes with it. */
            json_t *nostep = json_pack("{s:n}", "val_step");
            if (nostep)
                store_job_progress(env->store, w->job_id, NULL, nostep, &err);
            json_decref(nostep);
            svc_publish(r, w->job_id, EV_JOB_EPOCH, m);
            json_decref(reg);
            json_decref(m);
            break;
        }
        case WPROTO_MSG_RESUME:
            w->resumed_from_epoch =
                (int)json_integer_value(json_object_get(ev, WPROTO_F_EPOCH));
            log_event_limited(
                w->job_id, "info", "job_resume",
                json_pack("{s:s, s:O?, s:O?}", "job", w->job_id, "epoch",
                          json_object_get(ev, WPROTO_F_EPOCH), "step",
                          json_object_get(ev, WPROTO_F_STEP)));
            break;
        case WPROTO_MSG_PREEMPTED:
            /* Where it stopped and whether a checkpoint holds that step
             * (the exit status requeues it): the resume's log says where
             * it went on. */
            log_event_limited(
                w->job_id, "info", "job_preempted",
                json_pack("{s:s, s:O?, s:O?, s:O?}", "job", w->job_id, "epoch",
                          json_object_get(ev, WPROTO_F_EPOCH), "step",
                          json_object_get(ev, WPROTO_F_STEP), "checkpointed",
                          json_object_get(ev, WPROTO_F_CHECKPOINT)));
            break;
        case WPROTO_MSG_DONE: w->done = 1; break;
        case WPROTO_MSG_STARTED: {
            /* What the worker found in its environment, for comparison with
         * the placement. */
            json_t *saw = json_deep_copy(ev);
            json_object_del(saw, WPROTO_F_EVENT);
            json_t *patch = json_pack("{s:o}", "worker_saw", saw);
            store_job_placement_merge(env->store, w->job_id, patch, &err);
            json_decref(patch);
            /* A cluster's job: scheduled until its worker says it runs. */
            int changed = 0;
            if (exec_is_slurm(r->exec) &&
                store_job_mark_running(env->store, w->job_id, &changed, &err) ==
                    TY_OK &&
                changed)
                svc_publish(r, w->job_id, EV_JOB_PROGRESS, NULL);
            break;
        }
        case WPROTO_MSG_ERROR: {
            const char *msg =
                json_string_value(json_object_get(ev, WPROTO_F_MESSAGE));
            snprintf(w->error, sizeof w->error, "%s",
                     msg ? msg : "training failed");
            break;
        }
        default:
            /* heartbeat: the supervisor noted the time; unknown kinds count
             * as heartbeats only. */
            break;
    }
    if (err.msg[0])
        log_msg_limited(w->job_id, "error", "runner: job %s: %s", w->job_id,
                        err.msg);
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
    if ((s = store_job_get_internal(env->store, w->job_id, &job, err)) !=
            TY_OK ||
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
    int workers = 1, least = 1;
    if (store_job_get_internal(env->store, w->job_id, &job, &err) == TY_OK) {
        svc_job_gang(job, &workers, &least);
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
        snprintf(msg, sizeof msg, "%s; it failed %lld of %lld attempts", what,
                 (long long)attempts, (long long)max_attempts);
        store_job_finish(env->store, w->job_id, JOB_FAILED, msg, NULL, &err);
        svc_log_transition(r, w->job_id, JOB_FAILED, msg);
        sched_job_remove(r->sched, w->sjob);
        return;
    }
    double delay = retry_backoff_seconds((int)attempts, env->retry_backoff_s,
                                         RETRY_BACKOFF_CAP_S);
    snprintf(msg, sizeof msg,
             "%s; attempt %lld of %lld, retrying in %.1f s from the last "
             "checkpoint",
             what, (long long)attempts, (long long)max_attempts, delay);
    /* Back to the retry list with its whole gang (workers, min_workers):
     * when it is due, its world size is chosen again (retries_due). */
    if (svc_retry_add(r, w->job_id, info.tenant, info.priority,
                      info.submit_time, &info.request, workers, least,
                      info.gang_spread, svc_now() + delay, 0, msg) != TY_OK) {
        store_job_finish(env->store, w->job_id, JOB_FAILED, what, NULL, &err);
        sched_job_remove(r->sched, w->sjob);
        return;
    }
    if (store_job_requeue(env->store, w->job_id, 0, msg, &err) != TY_OK) {
        r->nretries--;
        sched_job_remove(r->sched, w->sjob);
        return;
    }
    sched_job_remove(r->sched, w->sjob);
    svc_log_transition(r, w->job_id, JOB_QUEUED, msg);
}

/* A preempted elastic gang (resources.min_workers below workers) leaves
 * the scheduler for the retry list, due now: the next pass gives it the
 * world size that fits then. 1 when done; 0 for any other job, or when it
 * could not be done (the caller requeues it as it is). Caller holds mu. */
static int requeue_elastic(jobs_service *r, job_run *w)
{
    ty_err err = {0};
    json_t *job = NULL;
    int workers = 1, least = 1;
    sched_job_info info;
    if (store_job_get_internal(r->env.store, w->job_id, &job, &err) == TY_OK)
        svc_job_gang(job, &workers, &least);
    json_decref(job);
    if (least >= workers || sched_job_get(r->sched, w->sjob, &info) != TY_OK ||
        info.slot >= 0 || info.request.kind != SCHED_REQ_NONE)
        return 0;
    if (svc_retry_add(r, w->job_id, info.tenant, info.priority,
                      info.submit_time, &info.request, workers, least,
                      info.gang_spread, svc_now(), 0, "preempted") != TY_OK)
        return 0;
    if (store_job_requeue(r->env.store, w->job_id, 1, NULL, &err) != TY_OK) {
        r->nretries--;
        return 0;
    }
    sched_job_remove(r->sched, w->sjob);
    return 1;
}

/* What went wrong, for the job's error: the last lines of the worker's
 * log (a remote worker uploads them), never the log's path: the server's
 * folders are no business of the tenant's. */
static void log_hint(const job_run *w, char *buf, size_t n)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/" WPROTO_LOG_FILE, w->dir);
    char tail[400] = "";
    FILE *f = fopen(path, "rb");
    if (f) {
        long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : 0;
        long from =
            size > (long)sizeof tail - 1 ? size - (long)sizeof tail + 1 : 0;
        if (fseek(f, from, SEEK_SET) == 0) {
            size_t got = fread(tail, 1, sizeof tail - 1, f);
            tail[got] = '\0';
        }
        fclose(f);
    }
    /* Whole lines only, trailing newline off. */
    char *t = tail;
    if (t[0] && strlen(t) == sizeof tail - 1) {
        char *nl = strchr(t, '\n');
        if (nl)
            t = nl + 1;
    }
    size_t len = strlen(t);
    while (len && (t[len - 1] == '\n' || t[len - 1] == '\r'))
        t[--len] = '\0';
    if (len)
        snprintf(buf, n, "the end of its log: %s", t);
    else
        snprintf(buf, n, "it left no log");
}

/* The worker ended: wait status ws, and how (executor.h: a loss, the
 * cluster's refusal, a cancel outside trainyard; why says). Records the
 * outcome and settles the job with the scheduler. Caller holds mu. */
static void finish_worker(jobs_service *r, job_run *w, int ws, exec_end how,
                          const char *why)
{
    const jobs_env *env = &r->env;
    ty_err err = {0};
    char msg[900], hint[600];
    const char *status;
    svc_set_holder(r, w->slot, NULL, NULL);
    svc_release_holders(r, w->job_id); /* a gang's other members */
    opm_job_ended(w->job_id);
    int ok_exit = WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
    /* A remote worker that ended while this server was away: its model,
     * if it uploaded one, is the result. */
    int remote = exec_is_slurm(r->exec);
    if (remote && !w->done && (ok_exit || how == EXEC_END_LOST)) {
        char model[PATH_MAX];
        snprintf(model, sizeof model, "%s/model.safetensors", w->dir);
        if (fs_exists(model)) {
            w->done = 1;
            ok_exit = 1;
            how = EXEC_END_EXITED;
            ws = 0;
        }
    }
    if (w->cancel) {
        status = JOB_CANCELLED;
        snprintf(msg, sizeof msg, "cancelled by request");
    } else if (how == EXEC_END_EXITED && ok_exit && w->done) {
        ty_status s = register_model(env, w, &err);
        sched_job_remove(r->sched, w->sjob);
        if (s == TY_OK) {
            svc_log_transition(r, w->job_id, JOB_SUCCEEDED, NULL);
            return;
        }
        store_job_finish(env->store, w->job_id, JOB_FAILED, err.msg, NULL,
                         &err);
        svc_log_transition(r, w->job_id, JOB_FAILED, err.msg);
        return;
    } else if (how == EXEC_END_FAILED || how == EXEC_END_OUTSIDE) {
        status = how == EXEC_END_FAILED ? JOB_FAILED : JOB_CANCELLED;
        snprintf(msg, sizeof msg, "%s", why ? why : "ended by the cluster");
    } else if (w->preempting ||
               (WIFEXITED(ws) && WEXITSTATUS(ws) == WPROTO_EXIT_PREEMPTED)) {
        /* Preempted (or stopped by SIGUSR1 before it could checkpoint): back
         * to the queue, to resume from its last checkpoint. An elastic
         * gang (CPU: it holds no slot a preemption could promise) goes
         * through the retry list at once, so that its world size is
         * chosen again. */
        if (requeue_elastic(r, w)) {
            svc_log_transition(r, w->job_id, JOB_QUEUED, "preempted");
        } else if (store_job_requeue(env->store, w->job_id, 1, NULL, &err) ==
                       TY_OK &&
                   sched_job_requeue(r->sched, w->sjob, &err) == TY_OK) {
            svc_log_transition(r, w->job_id, JOB_QUEUED, "preempted");
        } else {
            sched_job_remove(r->sched, w->sjob);
        }
        return;
    } else if (how == EXEC_END_LOST) {
        if (why) {
            snprintf(msg, sizeof msg, "%s", why);
        } else {
            log_hint(w, hint, sizeof hint);
            snprintf(msg, sizeof msg,
                     "the training process sent no heartbeat for %d s and "
                     "was killed; %s",
                     env->heartbeat_timeout_s, hint);
        }
        retry_or_fail(r, w, msg);
        return;
    } else if (w->error[0]) {
        /* The worker said what went wrong: running it again would not
         * help. */
        status = JOB_FAILED;
        if (remote) {
            log_hint(w, hint, sizeof hint);
            snprintf(msg, sizeof msg, "%s; %s", w->error, hint);
        } else {
            snprintf(msg, sizeof msg, "%s", w->error);
        }
    } else if (WIFSIGNALED(ws)) {
        log_hint(w, hint, sizeof hint);
        snprintf(msg, sizeof msg,
                 "the training process was killed by signal %d (%s); %s",
                 WTERMSIG(ws), strsignal(WTERMSIG(ws)), hint);
        retry_or_fail(r, w, msg);
        return;
    } else {
        log_hint(w, hint, sizeof hint);
        int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
        if (remote && code > 128 && code < 128 + 65)
            snprintf(msg, sizeof msg,
                     "the training process was killed by signal %d (%s); %s",
                     code - 128, strsignal(code - 128), hint);
        else
            snprintf(msg, sizeof msg,
                     "the training process exited with status %d without a "
                     "result; %s",
                     code, hint);
        retry_or_fail(r, w, msg);
        return;
    }
    sched_job_remove(r->sched, w->sjob);
    store_job_finish(env->store, w->job_id, status, msg, NULL, &err);
    svc_log_transition(r, w->job_id, status, msg);
}

/* Hands jobs whose back-off is over back to the scheduler. Caller holds
 * mu. */
static void retries_due(jobs_service *r)
{
    double t = svc_now();
    for (size_t i = 0; i < r->nretries;) {
        retry_rec *rr = &r->retries[i];
        if (rr->due > t) {
            i++;
            continue;
        }
        /* A gang goes back whole (before, a retried gang came back as
         * one worker's job); an elastic one at the world size that fits
         * now, or it waits on the list until its min_workers do. */
        char why[300];
        const int world =
            svc_gang_world(r, rr->workers, rr->min_workers, why, sizeof why);
        if (world == 0) {
            if (!rr->hold)
                log_msg("info",
                        "runner: job %s waits for its fewest workers: %s",
                        rr->job_id, why);
            rr->hold = 1;
            snprintf(rr->why, sizeof rr->why, "%s", why);
            rr->due = t + JOBS_GANG_RECHECK_S;
            i++;
            continue;
        }
        sched_job_desc d = {.id = rr->job_id,
                            .tenant = rr->tenant,
                            .priority = rr->priority,
                            .submit_time = rr->submit_time,
                            .request = rr->req,
                            .gang = world,
                            .gang_spread = rr->spread};
        ty_err err = {0};
        if (sched_job_submit(r->sched, &d, NULL, &err) != TY_OK) {
            store_job_finish(r->env.store, rr->job_id, JOB_FAILED, err.msg,
                             NULL, &err);
            svc_log_transition(r, rr->job_id, JOB_FAILED, err.msg);
        }
        r->retries[i] = r->retries[--r->nretries];
    }
}

/* One scheduling pass and its decisions. Caller holds mu. */
static void schedule(jobs_service *r)
{
    retries_due(r);
    miglayout_tick(r);
    for (int i = 0; i < r->nkinds; i++)
        if (r->kinds[i].tick)
            r->kinds[i].tick(r->kinds[i].ctx);
    sched_result res;
    sched_pass(r->sched, svc_wall(), &res);
    /* The arrays belong to the scheduler until its next pass; starting a
     * worker may remove jobs (a cancel), which does not touch them. */
    for (size_t i = 0; i < res.n_preemptions; i++)
        preempt_worker(r, &res.preemptions[i]);
    for (size_t i = 0; i < res.n_placements && !r->stopping; i++)
        start_placement(r, res.placements[i].job, res.placements[i].slot);
}

/* supervisor_hooks.on_tick: mu held. */
void lifecycle_tick(void *ctx)
{
    schedule(ctx);
    svc_usage_tick(ctx);
}

/* The training kind's exit: the outcome of a local worker. mu held. */
static void training_exit(void *ctx, int place, int ws, int lost)
{
    jobs_service *r = ctx;
    finish_worker(r, &r->runs[place], ws,
                  lost ? EXEC_END_LOST : EXEC_END_EXITED, NULL);
}

/* The training kind's cancel: the executor stops the worker. mu held. */
static void training_cancel(void *ctx, int place)
{
    jobs_service *r = ctx;
    r->exec->cancel(r->exec->impl, place);
}

jobs_kind lifecycle_training_kind(jobs_service *r)
{
    return (jobs_kind){.name = "training",
                       .ctx = r,
                       .start = training_start,
                       .message = training_message,
                       .exit = training_exit,
                       .cancel = training_cancel};
}

/* ---- the supervisor's hooks: dispatch by the job's kind ---- */

/* supervisor_hooks.on_message (and exec_hooks.on_message): mu not held.
 * The entry's kind is set when it is claimed (mu held), before its
 * process starts, and stays after it is freed. */
void lifecycle_message(void *ctx, int place, wproto_msg kind, const json_t *ev)
{
    jobs_service *r = ctx;
    const jobs_kind *k = r->runs[place].kind;
    if (!k) /* an entry never claimed: nothing runs there */
        return;
    k->message(k->ctx, place, kind, ev);
}

/* supervisor_hooks.on_exit: mu held. */
void lifecycle_exit(void *ctx, int place, int ws, int lost)
{
    jobs_service *r = ctx;
    job_run *w = &r->runs[place];
    if (!w->used)
        return;
    w->kind->exit(w->kind->ctx, place, ws, lost);
    svc_run_release(r, w);
}

/* exec_hooks.on_end: mu held. */
void lifecycle_end(void *ctx, int place, int ws, exec_end how, const char *why)
{
    jobs_service *r = ctx;
    job_run *w = &r->runs[place];
    if (!w->used || w->kind != &r->kinds[0])
        return;
    finish_worker(r, w, ws, how, why);
    svc_run_release(r, w);
}

/* exec_hooks.on_status: mu not held. */
void lifecycle_status(void *ctx, int place, const json_t *status)
{
    jobs_service *r = ctx;
    job_run *w = &r->runs[place];
    if (!w->used || w->kind != &r->kinds[0])
        return;
    ty_err err = {0};
    json_t *patch = json_pack("{s:O}", "slurm", status);
    if (store_job_placement_merge(r->env.store, w->job_id, patch, &err) ==
        TY_OK)
        svc_publish(r, w->job_id, EV_JOB_PROGRESS, NULL);
    else
        log_msg_limited(w->job_id, "error", "runner: job %s: %s", w->job_id,
                        err.msg);
    json_decref(patch);
}
