/*
 * worker.h - `trainyard worker`: one training job in its own process.
 *
 * Started by the job supervisor (jobs/supervisor.h); it speaks the worker
 * protocol (jobs/protocol.h: the "started" line, heartbeats, preemption,
 * sim devices, and the exit status: WPROTO_EXIT_OK the model is written,
 * _FAILED training failed (an "error" line says why), _CANCELLED stopped
 * by SIGTERM or SIGINT (cancel or shutdown), _PREEMPTED by SIGUSR1 (a
 * "preempted" line; its checkpoint written: run it again to resume),
 * _USAGE bad usage).
 */
#ifndef TY_WORKER_H
#define TY_WORKER_H

#include "jobs/protocol.h"

/* The heartbeat interval TRAINYARD_HEARTBEAT_MS = value asks for, in ms:
 * the default for NULL or "", -1 for anything but a whole number from
 * WPROTO_HEARTBEAT_MIN_MS to WPROTO_HEARTBEAT_MAX_MS. */
long worker_heartbeat_ms(const char *value);

/* `trainyard worker --job-dir DIR` (argv[0] is "worker"): returns the
 * process's exit status, a WPROTO_EXIT_* code. */
int worker_main(int argc, char **argv);

#endif
