/*
 * service.h - the job service: owns a training job's life on this server,
 * from admission to its outcome. It admits a job (jobs/admission.h and the
 * tenant's quotas), stores it and publishes its events, keeps the
 * scheduler (jobs/sched.h) over the node's slots (gpu/inventory.h), has
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

#include <jansson.h>

#include "common/ty.h"
#include "jobs/admission.h"
#include "jobs/env.h"

typedef struct jobs_service jobs_service;

/* Builds the scheduler over env->inventory's slots, queues every job the
 * store has queued (a job whose request this host can no longer satisfy
 * fails with the reason) and starts the supervisor's thread. env is
 * copied. */
ty_status jobs_start(const jobs_env *env, jobs_service **out, ty_err *err);

/* Whether this host has GPU slots (the default request is then "any"). */
int jobs_host_has_gpus(const jobs_service *js);

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

/* Stops every worker, puts their jobs back in the queue, joins the thread
 * and frees the service. */
void jobs_stop(jobs_service *js);

#endif
