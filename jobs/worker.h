/*
 * worker.h - `trainyard worker`: one training job in its own process.
 *
 * Started by the runner (jobs/runner.h; worker.c's header comment has the
 * lifecycle protocol: the "started" line, heartbeats, preemption, sim
 * devices). Exit status: 0 the model is written, 2 training failed (an
 * "error" line says why), 3 stopped by SIGTERM or SIGINT (cancel or
 * shutdown), 4 preempted by SIGUSR1 (a "preempted" line; its checkpoint
 * written: run it again to resume), 64 bad usage.
 */
#ifndef TY_WORKER_H
#define TY_WORKER_H

#define WORKER_HEARTBEAT_DEFAULT_MS 2000
#define WORKER_HEARTBEAT_MIN_MS 10
#define WORKER_HEARTBEAT_MAX_MS 3600000

/* The heartbeat interval TRAINYARD_HEARTBEAT_MS = value asks for, in ms:
 * the default for NULL or "", -1 for anything but a whole number from
 * WORKER_HEARTBEAT_MIN_MS to WORKER_HEARTBEAT_MAX_MS. */
long worker_heartbeat_ms(const char *value);

int worker_main(int argc, char **argv);

#endif
