/*
 * service.h - the job service: owns a training job's life on this server,
 * from admission to its outcome. It admits a job (jobs/admission.h and the
 * tenant's quotas), stores it and publishes its events, keeps the
 * scheduler (sched/sched.h) over the node's slots (gpu/inventory.h), has
 * the supervisor (jobs/supervisor.h) start a `trainyard worker` for each
 * placement, turns the worker's lines into the job's state, and records
 * the outcome: success (the model is registered), failure, cancel,
 * preemption (the job goes back to the queue and resumes from its
 * checkpoint) or a crash (retried with back-off, jobs/retry.h, up to
 * max_attempts, resuming from its checkpoint).
 *
 * Jobs left "running" by a server that died are requeued when the next one
 * starts and resume from their checkpoints, so no job runs twice at once.
 *
 * The public names are jobs_*: operations on the set of jobs this server
 * runs (the object is the service, one per server, as `jobs` is in the
 * URL /v1/jobs); the HTTP handlers (api/jobs.c) call one of them each.
 */
#ifndef TY_JOBS_SERVICE_H
#define TY_JOBS_SERVICE_H

#include <limits.h>

#include <jansson.h>

#include "common/ty.h"
#include "jobs/admission.h"
#include "jobs/env.h"

typedef struct jobs_service jobs_service;

/* Builds the scheduler over env->inventory's slots and queues every job
 * the store has queued (a job whose request this host can no longer
 * satisfy fails with the reason). env is copied. Other kinds of job
 * (jobs/kind.h) are added next, then jobs_run starts the service;
 * jobs_stop frees it, run or not. */
ty_status jobs_create(const jobs_env *env, jobs_service **out, ty_err *err);

/* Starts the supervisor's thread: placements, workers, retries from now
 * on. TY_EIO when it cannot (then jobs_stop). */
ty_status jobs_run(jobs_service *js, ty_err *err);

/* Whether this host has GPU slots (the default request is then "any"). */
int jobs_host_has_gpus(const jobs_service *js);

/* What jobs_submit would accept, without submitting: the same checks
 * (what this host can give, the quotas, admission) and, when they pass,
 * {valid: true, name, dataset, validation, model, hyperparameters (all
 * normalized), estimated_memory_bytes, parameters} (new). */
ty_status jobs_check(jobs_service *r, const char *tenant,
                     const job_submission *sub, json_t **out, ty_err *err);

/* Admits and queues a job for tenant: the request must be one this host
 * could ever run with the tenant's quota (else TY_EINVAL naming
 * "resources.gpu"), then admission_check; the job is stored, published
 * (job.created) and handed to the scheduler. *job is the job as submitted
 * (queued; new reference). When the scheduler refuses it after it was
 * stored (a quota lowered meanwhile) the job fails with the reason
 * (job.finished) and the error is returned. */
ty_status jobs_submit(jobs_service *js, const char *tenant,
                      const job_submission *sub, json_t **job, ty_err *err);

/* Cancels tenant's job: a queued one leaves the scheduler (and any slot it
 * was promised) at once and is cancelled now (*was_running 0, job.finished
 * published); a running worker is stopped (SIGTERM, then SIGKILL after a
 * grace period), its slot freed and the job recorded as cancelled when it
 * has exited (*was_running 1). *job is the job now (new reference). The
 * store's error (TY_ENOTFOUND, TY_ECONFLICT for a finished job) else. */
ty_status jobs_cancel(jobs_service *js, const char *tenant, const char *job_id,
                      json_t **job, int *was_running, ty_err *err);

/* Re-reads a tenant's weight and quotas from the store (after a PATCH). */
void jobs_tenant_changed(jobs_service *js, const char *tenant_id);

/* Sets "queue" on each queued job in docs (one job object or an array of
 * them, as the API shows them): {position, tenant_position, reason, quota,
 * detail}, from the scheduler's report at this moment; null on jobs that
 * are not queued. viewer_tenant: other tenants' job ids are not named.
 * js may be NULL (no report: queued jobs keep what they have). */
void jobs_annotate(jobs_service *js, json_t *docs, const char *viewer_tenant);

/* ---- remote workers (node/wremote.h), with the Slurm executor ----
 * Each call is authenticated by the worker's attempt token: TY_EINVAL for
 * an unknown token (HTTP 401), TY_ECONFLICT when its attempt is over (409),
 * TY_ENOTFOUND when this server runs its workers itself. */

/* Whether token is the current attempt's of job_id: TY_OK; TY_EINVAL
 * ("unknown token", 401) or TY_ECONFLICT (the attempt is over, 409); on a
 * server that runs its workers itself every token is unknown. Only checks:
 * reads no file (the server's header-time check, before any body). */
ty_status jobs_worker_auth(jobs_service *js, const char *job_id,
                           const char *token, ty_err *err);

/* The job document of WREMOTE_PATH_JOB (new reference). */
ty_status jobs_worker_job(jobs_service *js, const char *job_id,
                          const char *token, json_t **doc, ty_err *err);

/* The path of a blob the job names (TY_ENOTFOUND for any other). */
ty_status jobs_worker_blob(jobs_service *js, const char *job_id,
                           const char *token, const char *sha256,
                           char path[PATH_MAX], ty_err *err);

/* The job's last uploaded checkpoint and its sha256; TY_ENOTFOUND none. */
ty_status jobs_worker_checkpoint(jobs_service *js, const char *job_id,
                                 const char *token, char path[PATH_MAX],
                                 char sha[65], ty_err *err);

/* Stores an upload (what: "checkpoint", "model", "log"; tmp_path the
 * server's temp file of it, moved or removed): checked against sha256
 * (TY_EINVAL on a mismatch; not for the log), made durable, then renamed
 * over the job folder's file; the same content again changes nothing.
 * *reply {"sha256", "bytes"}. */
ty_status jobs_worker_upload(jobs_service *js, const char *job_id,
                             const char *token, const char *what,
                             const char *tmp_path, const char *sha256,
                             json_t **reply, ty_err *err);

/* The worker's lines (a JSON array of protocol objects), handled as the
 * local worker's; *action what it should do next (WREMOTE_ACTION_*). */
ty_status jobs_worker_events(jobs_service *js, const char *job_id,
                             const char *token, const json_t *lines,
                             const char **action, ty_err *err);

/* The executor's state for /readyz ({"executor", "ok", ...}; new). */
json_t *jobs_executor_status(jobs_service *js);

/* Stops every worker, puts their jobs back in the queue, joins the thread
 * and frees the service. */
void jobs_stop(jobs_service *js);

/* GET /v1/admin/mig-advice: the demand recorded over the last window_s
 * seconds replayed on today's layout and on the advised one
 * (jobs/advisor.h), per GPU and in total, as a new document in *out.
 * TY_EIO from the store; TY_ENOMEM. */
ty_status jobs_mig_advice(jobs_service *js, double window_s, json_t **out,
                          ty_err *err);

#endif
