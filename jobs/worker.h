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

#include <pthread.h>
#include <signal.h>

#include "jobs/protocol.h"

/* The heartbeat interval TRAINYARD_HEARTBEAT_MS = value asks for, in ms:
 * the default for NULL or "", -1 for anything but a whole number from
 * WPROTO_HEARTBEAT_MIN_MS to WPROTO_HEARTBEAT_MAX_MS. */
long worker_heartbeat_ms(const char *value);

/* ---- what a serving replica (jobs/replica.c) shares with the worker ----
 * Both are processes of the worker protocol: the same started line,
 * heartbeats, device environment and stdout discipline. */

/* The folder after --job-dir in argv (argv[0] the command), or NULL. */
const char *worker_job_dir(int argc, char **argv);

/* Prints line (taken: freed here; NULL, an encoder out of memory, prints
 * nothing) as one line on stdout, whole, under the process's one stdout
 * mutex: lines from different threads never interleave. */
void worker_emit(json_t *line);

/* Prints the "error" line with msg, says it on stderr as "trainyard
 * <who>: msg" and returns WPROTO_EXIT_FAILED. */
int worker_fail(const char *who, const char *msg);

/* Installs on_term for SIGTERM and SIGINT and on_usr1 (a handler, or
 * SIG_IGN) for SIGUSR1, and unblocks the three (a parent may have left
 * them blocked, and they would never arrive). Before the started line. */
void worker_install_signals(void (*on_term)(int), void (*on_usr1)(int));

/* Measures the CPU GEMM rate (50 ms) and prints the started line. */
void worker_emit_started(void);

/* The heartbeat thread (worker_heartbeat_start, _stop). */
typedef struct {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* signalled to stop */
    int stop;
    long interval_ms;
} worker_heartbeat;

/* Starts the thread that prints a heartbeat every TRAINYARD_HEARTBEAT_MS
 * (worker_heartbeat_ms; a bad value is the default, with a note on stderr
 * naming `trainyard <who>`), with SIGTERM, SIGINT and SIGUSR1 blocked in
 * it so they reach the other threads. -1 when it cannot start. */
int worker_heartbeat_start(worker_heartbeat *hb, const char *who);

/* Stops the thread and waits for it: no heartbeat after this returns. */
void worker_heartbeat_stop(worker_heartbeat *hb);

/* The device the server named in TRAINYARD_DEVICE: "cuda" or "cuda:N"
 * (N within CUDA_VISIBLE_DEVICES) sets *device; "sim:<uuid>" leaves it -1
 * (the CPU computes) and sets *sim to the whole value (borrowed from the
 * environment), the label the process reports; anything else (the server
 * says "cpu") leaves it -1 and *sim NULL. TY_EINVAL for a malformed cuda:N
 * or sim:<uuid>, TY_EDEVICE for cuda when this binary has no CUDA. */
ty_status worker_device(int *device, const char **sim, ty_err *err);

/* `trainyard worker --job-dir DIR` (argv[0] is "worker"): returns the
 * process's exit status, a WPROTO_EXIT_* code. */
int worker_main(int argc, char **argv);

#endif
