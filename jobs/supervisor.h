/*
 * supervisor.h - the worker processes: a fixed table of places, each
 * holding at most one `trainyard worker` child (node/worker.h). The
 * supervisor starts them (fork/exec with the environment of
 * node/protocol.h), follows their stdout pipes line by line, enforces
 * heartbeats, sends the signals of cancel and preemption, and reaps them.
 * What a line or an exit means for the job is its owner's business (the
 * job service, jobs/service.h): the supervisor hands each decoded line and
 * each exit to the hooks it was given, with the place's index.
 *
 * One thread (started by supervisor_start) runs the loop: on_tick, then a
 * poll over the pipes and a wake-up eventfd, then the lines, then the
 * exits. The caller's mutex `mu` guards the table with the caller's own
 * state: the thread holds it for on_tick and on_exit (and while it builds
 * the poll set and reaps), not for on_message. Callers hold it for
 * supervisor_spawn, _preempt and _cancel.
 *
 * Each job runs in its own process, so a crash in training never takes the
 * server down. Workers die with the server (PR_SET_PDEATHSIG).
 */
#ifndef TY_SUPERVISOR_H
#define TY_SUPERVISOR_H

#include <pthread.h>
#include <sys/types.h>

#include <jansson.h>

#include "common/ty.h"
#include "node/protocol.h"

typedef struct supervisor supervisor;

typedef struct {
    void *ctx;
    /* Before each poll, with mu held: a scheduling pass, which may spawn
     * and signal workers. */
    void (*on_tick)(void *ctx);
    /* A line worker `place` printed (kind not WPROTO_MSG_NONE; msg
     * borrowed), mu not held. Any line also counts as a heartbeat, and
     * the first one unlocks signals (see supervisor_preempt). */
    void (*on_message)(void *ctx, int place, wproto_msg kind,
                       const json_t *msg);
    /* Worker `place` has exited with wait status ws (0 when it could not
     * be known); lost: the supervisor killed it after heartbeat silence.
     * mu held. The place is free again when this returns. Not called
     * while the supervisor stops. */
    void (*on_exit)(void *ctx, int place, int ws, int lost);
} supervisor_hooks;

/* A supervisor of `cap` places that starts self_exe as the worker and
 * kills a worker silent for heartbeat_timeout_s seconds (0: never). mu
 * and hooks are borrowed. NULL when out of memory (err says). */
supervisor *supervisor_create(int cap, const char *self_exe,
                              double heartbeat_timeout_s, pthread_mutex_t *mu,
                              const supervisor_hooks *hooks, ty_err *err);

/* Starts the thread. TY_EIO when it cannot (nothing runs then). */
ty_status supervisor_start(supervisor *s, ty_err *err);

/* Wakes the thread for a pass (on_tick) now. */
void supervisor_wake(supervisor *s);

/* Starts `trainyard <command> --job-dir <dir>` (command: WPROTO_COMMAND
 * for a training worker, RPROTO_COMMAND for a serving replica; a string
 * that outlives the call) in free place `place` for job_id (named in the
 * logs) and its job folder dir, with
 * TRAINYARD_DEVICE=device and, when has_cvd, CUDA_VISIBLE_DEVICES=cvd; its
 * stderr goes to dir/worker.log. Caller holds mu. TY_EIO or TY_ENOMEM
 * with nothing started; *pid the child's otherwise. */
ty_status supervisor_spawn(supervisor *s, int place, const char *command,
                           const char *job_id, const char *dir,
                           const char *device, const char *cvd, int has_cvd,
                           pid_t *pid, ty_err *err);

/* The same for a data-parallel job of `ranks` workers (> 1): mpirun (a
 * path) starts them on this machine as one MPI job, in the place; its pid
 * is *pid, its stdout (rank 0's lines; the other ranks print none) is the
 * place's, and the signals of cancel and preemption go to it, which
 * forwards them to every rank. ranks 1: supervisor_spawn. */
ty_status supervisor_spawn_ranks(supervisor *s, int place, const char *command,
                                 const char *job_id, const char *dir,
                                 const char *device, const char *cvd,
                                 int has_cvd, int ranks, const char *mpirun,
                                 pid_t *pid, ty_err *err);

/* The same for a gang whose ranks each have a device of their own (a gang
 * of whole GPUs): rank i's TRAINYARD_DEVICE is devices[i] and its
 * CUDA_VISIBLE_DEVICES cvds[i] (ranks entries each). mpirun gives every
 * rank one environment, so the lists go in it as
 * TRAINYARD_RANK_DEVICES and TRAINYARD_RANK_CUDA_VISIBLE
 * (node/protocol.h), comma-separated, and each worker takes its entry by
 * its local rank before anything opens a device (wproto_rank_env);
 * TRAINYARD_DEVICE and CUDA_VISIBLE_DEVICES are rank 0's until then.
 * TY_EINVAL for an entry with a comma or ranks < 2. */
ty_status supervisor_spawn_gang(supervisor *s, int place, const char *command,
                                const char *job_id, const char *dir,
                                const char *const *devices,
                                const char *const *cvds, int ranks,
                                const char *mpirun, pid_t *pid, ty_err *err);

/* Tells worker `place` to checkpoint and stop (SIGUSR1): now if it has
 * printed a line, else when it does (before, SIGUSR1 would kill it).
 * Caller holds mu. */
void supervisor_preempt(supervisor *s, int place);

/* Stops worker `place` (SIGTERM; SIGKILL after a grace period). Caller
 * holds mu. */
void supervisor_cancel(supervisor *s, int place);

/* Stops the thread, then every worker (SIGTERM, SIGKILL after 5 s) and
 * waits for them; on_exit is not called for them. Frees s. */
void supervisor_stop(supervisor *s);

/* Frees a supervisor whose thread never started. */
void supervisor_destroy(supervisor *s);

#endif
