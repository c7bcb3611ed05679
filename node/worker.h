/*
 * worker.h - `trainyard worker`: one training job in its own process.
 *
 * Started by the job supervisor (jobs/supervisor.h); it speaks the worker
 * protocol (node/protocol.h: the "started" line, heartbeats, preemption,
 * sim devices, and the exit status: WPROTO_EXIT_OK the model is written,
 * _FAILED training failed (an "error" line says why), _CANCELLED stopped
 * by SIGTERM or SIGINT (cancel or shutdown), _PREEMPTED by SIGUSR1 (a
 * "preempted" line; its checkpoint written: run it again to resume),
 * _USAGE bad usage).
 */
#ifndef TY_WORKER_H
#define TY_WORKER_H

#include "node/protocol.h"

/* The heartbeat interval TRAINYARD_HEARTBEAT_MS = value asks for, in ms:
 * the default for NULL or "", -1 for anything but a whole number from
 * WPROTO_HEARTBEAT_MIN_MS to WPROTO_HEARTBEAT_MAX_MS. */
long worker_heartbeat_ms(const char *value);

/* ---- what a serving replica (node/replica.c) shares with the worker ----
 * Both are processes of the worker protocol: the same usage, signals,
 * started line, heartbeats, device environment and stdout discipline. */

/* A process of the worker protocol (worker_process runs it). */
typedef struct {
    const char *who;      /* its command, argv[0]: "worker", "replica" */
    const char *file;     /* the JSON file it reads in its job folder */
    void (*on_term)(int); /* SIGTERM and SIGINT's handler */
    void (*on_usr1)(int); /* SIGUSR1's: a handler, or SIG_IGN */
    /* The work, given the file's document (borrowed): the exit status. */
    int (*body)(const json_t *doc);
    /* Fields each heartbeat line carries besides "event" (a new object,
     * called on the heartbeat thread), or NULL: none. */
    json_t *(*heartbeat_fields)(void);
} worker_process_def;

/* Runs `trainyard <who> --job-dir DIR` (argv[0] is who): without DIR,
 * a usage note on stderr and WPROTO_EXIT_USAGE, nothing on stdout. Else
 * installs the handlers and unblocks the three signals (a parent may have
 * left them blocked), prints the started line (the CPU GEMM rate measured
 * for 50 ms first), starts the heartbeat thread (TRAINYARD_HEARTBEAT_MS,
 * the signals blocked in it), reads DIR/file and returns body's status;
 * the heartbeat thread is stopped and joined before it returns, so no
 * heartbeat follows the last line. An unreadable file is an "error" line
 * and WPROTO_EXIT_FAILED. */
int worker_process(const worker_process_def *def, int argc, char **argv);

/* Prints line (taken: freed here; NULL, an encoder out of memory, prints
 * nothing) as one line on stdout, whole, under the process's one stdout
 * mutex: lines from different threads never interleave. */
void worker_emit(json_t *line);

/* Prints the "error" line with msg, says it on stderr as "trainyard
 * <who>: msg" and returns WPROTO_EXIT_FAILED. */
int worker_fail(const char *who, const char *msg);

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
