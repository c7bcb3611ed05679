/*
 * executor.h - where a training job's worker runs: the seam between the
 * job service (scheduling policy, quotas, fair share, preemption, events:
 * one code path) and what starts, watches, signals and reaps a worker.
 *
 *   local   a child process of the server (jobs/supervisor.h): stdout
 *           pipe, job folder on the server's disk. The default.
 *   slurm   a Slurm batch job submitted through slurmrestd
 *           (cluster/slurmrest.h), on whichever node Slurm picks. Its
 *           worker is the shim of node/wremote.h: it reaches the server
 *           over HTTP with a token scoped to the job's attempt, and sends
 *           the same protocol lines (node/protocol.h) the local worker
 *           prints.
 *
 * The service calls start, preempt and cancel with its mutex held. What a
 * worker says and how it ends come back through the hooks the service gave
 * the executor, with the place index the service chose: on_message
 * without the mutex, on_end with it. Serving replicas always run locally
 * (the supervisor directly); executors run training workers only.
 */
#ifndef TY_EXECUTOR_H
#define TY_EXECUTOR_H

#include <pthread.h>
#include <stdint.h>

#include <jansson.h>

#include "cluster/slurmrest.h"
#include "common/ty.h"
#include "gpu/inventory.h"
#include "node/protocol.h"
#include "jobs/supervisor.h"

typedef struct executor executor;

/* One rank of a gang of whole GPUs: the member it trains on. */
typedef struct {
    const char *device; /* its TRAINYARD_DEVICE, as svc_device_for said */
    const char *cvd;    /* its CUDA_VISIBLE_DEVICES (the GPU's uuid) */
    int slot;           /* the inventory slot */
    int gpu;            /* the GPU's index, as the inventory shows it */
    const char *uuid;   /* the slot's uuid */
} exec_rank;

/* A worker to start. */
typedef struct {
    const char *job_id;
    const char *tenant_id;
    const char *dir;    /* the job folder on the server (job.json in it) */
    const char *device; /* TRAINYARD_DEVICE, as svc_device_for said */
    const char *cvd;    /* CUDA_VISIBLE_DEVICES when has_cvd */
    int has_cvd;
    const inv_slot *slot;  /* NULL: a CPU job */
    int threads;           /* engine threads; 0: all the node gives */
    uint64_t memory_bytes; /* what the job may take; 0: unknown */
    int ranks;             /* a data-parallel job's workers (mpirun); 0 or
                              1: one worker */
    /* A gang of whole GPUs (resources.gpus): `ranks` members, rank i on
     * members[i] (its own device; device, cvd and slot above are rank
     * 0's). NULL: every rank on `device` (a CPU gang). */
    const exec_rank *members;
    /* A gang over Slurm nodes (resources.nodes, gpus_per_node): its ranks
     * a node, ranks / ranks_per_node nodes. 0: one rank a node (Slurm) or
     * every rank on this server (local). */
    int ranks_per_node;
} exec_start;

/* How a worker ended, beyond its wait status. */
typedef enum {
    EXEC_END_EXITED = 0, /* ws is the worker's wait status */
    EXEC_END_LOST,       /* lost (no heartbeats, a node failure, a time
                            limit): requeue it to resume; why says */
    EXEC_END_FAILED,     /* the cluster refused or killed it (why): not
                            retried */
    EXEC_END_OUTSIDE,    /* cancelled outside trainyard (scancel) */
} exec_end;

typedef struct {
    void *ctx;
    /* A line of the worker in `place` (msg borrowed). mu not held. */
    void (*on_message)(void *ctx, int place, wproto_msg kind,
                       const json_t *msg);
    /* What the cluster says of the worker (borrowed: {"job_id", "state",
     * "reason", "node"}), when it changes. mu not held. */
    void (*on_status)(void *ctx, int place, const json_t *status);
    /* The worker ended; the place is free when this returns. mu held. */
    void (*on_end)(void *ctx, int place, int ws, exec_end how, const char *why);
} exec_hooks;

struct executor {
    const char *name; /* "local", "slurm" */
    void *impl;
    /* Starts the worker of st in free place `place`; *placement (new, may
     * stay NULL) is what to merge into the job's placement document (the
     * pid, the Slurm job). Caller holds mu. Nothing started on error. */
    ty_status (*start)(void *impl, int place, const exec_start *st,
                       json_t **placement, ty_err *err);
    /* Checkpoint and stop. Caller holds mu. */
    void (*preempt)(void *impl, int place);
    /* Stop now. Caller holds mu. */
    void (*cancel)(void *impl, int place);
    /* {"executor", "ok", "detail"?} for /readyz (new reference). */
    json_t *(*status)(void *impl);
    /* Stops its thread and frees it; workers outside the server (Slurm)
     * keep running, to be re-attached by the next server. */
    void (*destroy)(void *impl);
};

/* Frees x (its destroy, then x itself); NULL is a no-op. */
void exec_destroy(executor *x);

/* ---- local: the supervisor's child processes ---- */

/* An executor over sup (borrowed; its hooks are the service's) that
 * starts a data-parallel job's workers with mpirun (a path; NULL or "":
 * such jobs cannot start). */
executor *exec_local_create(supervisor *sup, const char *mpirun, ty_err *err);

/* ---- slurm ---- */

typedef struct {
    int places;                 /* the service's place count */
    slurmrest *rest;            /* borrowed */
    const char *worker_command; /* trainyard's path on the nodes */
    const char *server_url;     /* this server, as the nodes reach it */
    const char *workdir;        /* the jobs' working folder on the nodes */
    const char *partition, *account, *qos; /* "" or NULL: Slurm's default */
    int gpu_sim;         /* GPU jobs compute on the CPU ("sim:<slot>"): for
                          clusters whose GRES are stand-ins (tests); the
                          service's device string says it (svc_device_for) */
    const char *ca_file; /* the server's CA for an https server_url */
    int heartbeat_ms;    /* the workers' heartbeat interval */
    double heartbeat_timeout_s; /* silent this long while RUNNING: lost */
    double start_grace_s;       /* first line due this long after RUNNING */
    double poll_s;              /* state polling interval */
    double preempt_grace_s;     /* after a preempt, cancel after this */
    int time_limit_min;         /* 0: the partition's */
} exec_slurm_config;

executor *exec_slurm_create(const exec_slurm_config *cfg, pthread_mutex_t *mu,
                            const exec_hooks *hooks, ty_err *err);

/* Re-attaches a worker a previous server started: Slurm job slurm_id of
 * job_id, whose attempt token hashes to token_sha256 (hex). Caller holds
 * mu. */
ty_status exec_slurm_adopt(executor *x, int place, const char *job_id,
                           long slurm_id, const char *token_sha256,
                           ty_err *err);

/* Whether token (as the worker sent it) is the current attempt's of
 * job_id: its place into *place. TY_EAUTH-like: TY_EINVAL "unknown token"
 * (401), TY_ECONFLICT the attempt is over (409). Caller holds mu. */
ty_status exec_slurm_auth(executor *x, const char *job_id, const char *token,
                          int *place, ty_err *err);

/* Hands the worker's lines (an array of protocol objects) to on_message,
 * in order, and says what the worker should do next (WREMOTE_ACTION_*,
 * a static string) into *action. Auth as exec_slurm_auth. mu NOT held. */
ty_status exec_slurm_deliver(executor *x, pthread_mutex_t *mu,
                             const char *job_id, const char *token,
                             const json_t *lines, const char **action,
                             ty_err *err);

/* Whether a data-parallel gang of `ranks` workers of `threads` CPUs each
 * (0: 1) can ever run on the cluster: one rank a node, so `ranks` nodes
 * with that many CPUs, as slurmrestd's node list (read by the executor's
 * thread every minute) says. TY_OK when it fits or the list is not known
 * yet (Slurm refuses at submission then); TY_EINVAL naming
 * resources.workers otherwise. mu not needed. */
ty_status exec_slurm_gang_check(executor *x, int ranks, int threads,
                                ty_err *err);

/* How many of the cluster's nodes could take one rank of `threads` CPUs
 * (0: 1) now: up (slurm_node_up: not down, drained, failing or silent)
 * with that many CPUs, as slurmrestd's node list last said; -1 while the
 * list is not known. *total (may be NULL): such nodes, up or not. Asks
 * the executor's thread to read the list again when it is over
 * NODES_WANTED_S (2 s) old, and the list is read at once when a gang's
 * Slurm job ends. mu not needed. */
int exec_slurm_nodes_up(executor *x, int threads, int *total);

/* Whether x is the Slurm executor. */
int exec_is_slurm(const executor *x);

#endif
