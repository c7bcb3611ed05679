/*
 * runner.h - the job runner: takes queued jobs in submission order, starts a
 * `trainyard worker` process for each (at most --max-jobs at once), follows
 * the progress lines the worker prints, and records the outcome.
 *
 * Each job runs in its own process, so a crash in training never takes the
 * server down. Workers die with the server (PR_SET_PDEATHSIG); jobs left
 * "running" by a server that died are requeued when the next one starts and
 * resume from their checkpoints.
 *
 * Worker protocol: the runner writes <data>/jobs/<id>/job.json and starts
 * `trainyard worker --job-dir <dir>` with TRAINYARD_DEVICE set to the
 * server's training device ("cpu", "cuda:N"); the worker prints one JSON object per
 * line on stdout:
 *   {"event":"progress", epoch, epochs, step, total_steps, fraction, loss,
 *    samples_per_sec}
 *   {"event":"epoch", epoch, train_loss, train_accuracy, val_loss,
 *    val_accuracy, samples_per_sec, seconds, peak_memory_bytes, device,
 *    precision, loss_scale, skipped_steps, cuda_graph,
 *    device_memory_used_bytes (on a GPU)}
 *   {"event":"resume", epoch, step}
 *   {"event":"done"}                       the model file is complete
 *   {"event":"error", "message"}           then exits non-zero
 * Its stderr goes to <dir>/worker.log.
 */
#ifndef TY_RUNNER_H
#define TY_RUNNER_H

#include "common/ty.h"
#include "server/app.h"

typedef struct runner runner;

/* Starts the runner thread. */
ty_status runner_start(ty_app *app, runner **out, ty_err *err);

/* Tells the runner a job was queued. */
void runner_wake(runner *r);

/* Stops the worker of a running job (SIGTERM, then SIGKILL after a grace
 * period); the job is recorded as cancelled when the worker has exited. */
void runner_cancel(runner *r, const char *job_id);

/* Stops every worker, puts their jobs back in the queue, joins the thread
 * and frees the runner. */
void runner_stop(runner *r);

#endif
