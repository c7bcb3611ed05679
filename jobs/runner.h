/*
 * runner.h - the job runner: keeps the scheduler (jobs/sched.h) over the
 * node's slots (gpu/inventory.h), starts a `trainyard worker` process for
 * each placement it makes, follows the lines the worker prints, and
 * records the outcome: success, failure, cancel, preemption (the job goes
 * back to the queue and resumes from its checkpoint) or a crash (retried
 * with back-off up to max_attempts, resuming from its checkpoint).
 *
 * Each job runs in its own process, so a crash in training never takes the
 * server down. Workers die with the server (PR_SET_PDEATHSIG); jobs left
 * "running" by a server that died are requeued when the next one starts and
 * resume from their checkpoints, so no job runs twice at once.
 *
 * The worker protocol - job.json, the environment a worker gets (where it
 * runs), the lines it prints, the signals and the exit codes - is
 * jobs/protocol.h's. Any line counts as a heartbeat: a worker silent for
 * --heartbeat-timeout seconds is killed (SIGKILL) and handled as a crash.
 * Its stderr goes to <dir>/worker.log.
 */
#ifndef TY_RUNNER_H
#define TY_RUNNER_H

#include <limits.h>
#include <stdint.h>

#include <jansson.h>

#include "common/ty.h"
#include "events/hub.h"
#include "gpu/inventory.h"
#include "jobs/placement.h"
#include "jobs/sched.h"
#include "store/store.h"

/* What the job runner works with: filled by the composition root
 * (app/main.c) from the server's state and settings, copied by
 * runner_start. The pointers are borrowed and must outlive the runner. */
typedef struct jobs_env {
    store *store;
    ev_hub *events;              /* NULL: no live events are published */
    inventory *inventory;        /* the GPUs and MIG slices; NULL: none */
    place_device train_dev;      /* --train-device, resolved */
    char data_dir[PATH_MAX];     /* blobs live under it (store/blob.h) */
    char jobs_dir[PATH_MAX];     /* <data>/jobs/<id>: job.json, logs */
    char self_exe[PATH_MAX];     /* this binary, to start workers */
    int max_jobs;                /* CPU jobs running at once */
    int worker_threads;          /* engine threads per worker; 0 = all */
    uint64_t max_job_memory;     /* bytes a job may take; 0 = no limit */
    int heartbeat_timeout_s;     /* a silent worker is killed after */
    double retry_backoff_s;      /* first retry's delay; doubles */
    int max_attempts;            /* runs of a crashing job, by default */
    int preempt;                 /* sched_config.preempt */
    double preempt_wait_s;       /* sched_config.preempt_wait */
    double backfill_wait_s;      /* sched_config.backfill_wait */
    double fair_window_s;        /* sched_config.fair_window */
} jobs_env;

typedef struct runner runner;

/* Builds the scheduler over env->inventory's slots, queues every job the
 * store has queued (a job whose request this host can no longer satisfy
 * fails with the reason) and starts the runner thread. */
ty_status runner_start(const jobs_env *env, runner **out, ty_err *err);

/* Wakes the runner thread for a scheduling pass. */
void runner_wake(runner *r);

/* Whether this host has GPU slots (the default request is then "any"). */
int runner_host_has_gpus(const runner *r);

/* Whether tenant_id's request could ever run here (sched_request_check
 * with the tenant's quota): TY_OK or TY_EINVAL naming "resources.gpu". */
ty_status runner_request_check(runner *r, const char *tenant_id,
                               const sched_request *req, ty_err *err);

/* Hands a job just stored as queued to the scheduler and wakes the
 * thread. TY_EINVAL (the request cannot run here) or TY_ENOMEM; the
 * caller then fails the job. */
ty_status runner_submit(runner *r, const char *tenant_id, const char *job_id,
                        int priority, const sched_request *req, ty_err *err);

/* Cancels a job: a queued one leaves the scheduler (and any slot it was
 * promised) at once; a running worker is stopped (SIGTERM, then SIGKILL
 * after a grace period) and its slot freed when it has exited; the job is
 * recorded as cancelled then. */
void runner_cancel(runner *r, const char *job_id);

/* Re-reads a tenant's weight and quotas from the store (after a PATCH). */
void runner_tenant_changed(runner *r, const char *tenant_id);

/* Sets "queue" on each queued job in docs (one job object or an array of
 * them, as the API shows them): {position, tenant_position, reason, quota,
 * detail}, from the scheduler's report at this moment; null on jobs that
 * are not queued. viewer_tenant: other tenants' job ids are not named. */
void runner_annotate(runner *r, json_t *docs, const char *viewer_tenant);

/* Stops every worker, puts their jobs back in the queue, joins the thread
 * and frees the runner. */
void runner_stop(runner *r);

#endif
