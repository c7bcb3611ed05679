/*
 * env.h - what the job service works with (jobs/service.h): the server's
 * store, live events, device inventory and training device, its folders
 * and the job settings. Filled by the composition root (app/main.c), which
 * is the only place that knows the server's own state (ty_app); jobs/
 * reads nothing else of it.
 */
#ifndef TY_JOBS_ENV_H
#define TY_JOBS_ENV_H

#include <limits.h>
#include <stdint.h>

#include "events/hub.h"
#include "jobs/executor.h"
#include "gpu/inventory.h"
#include "node/placement.h"
#include "sched/sched.h"
#include "store/store.h"

/* Copied by jobs_create; the pointers are borrowed and must outlive the
 * service. */
typedef struct jobs_env {
    store *store;
    ev_hub *events;          /* NULL: no live events are published */
    inventory *inventory;    /* the GPUs and MIG slices; NULL: none */
    place_device train_dev;  /* --train-device, resolved */
    char data_dir[PATH_MAX]; /* blobs live under it (store/blob.h) */
    char jobs_dir[PATH_MAX]; /* <data>/jobs/<id>: job.json, logs */
    char self_exe[PATH_MAX]; /* this binary, to start workers */
    int max_jobs;            /* CPU jobs running at once */
    int worker_threads;      /* engine threads per worker; 0 = all */
    uint64_t kv_cache_bytes; /* a CPU replica's generation cache (--kv-cache) */
    /* Open MPI's mpirun, which starts a data-parallel job's CPU workers
     * (resources.workers); "": not found, such jobs are refused. */
    char mpirun[PATH_MAX];
    uint64_t max_job_memory; /* bytes a job may take; 0 = no limit */
    int heartbeat_timeout_s; /* a silent worker is killed after */
    double retry_backoff_s;  /* first retry's delay; doubles */
    int max_attempts;        /* runs of a crashing job, by default */
    int preempt;             /* sched_config.preempt */
    double preempt_wait_s;   /* sched_config.preempt_wait */
    double backfill_wait_s;  /* sched_config.backfill_wait */
    double fair_window_s;    /* sched_config.fair_window */
    int serving_preempt;     /* sched_config.serving_preempt */
    int max_replicas;        /* serving replicas at once, GPU and CPU
                                (places beside the slots and CPU jobs) */
    int tenant_replicas;     /* of those, one tenant's at once */
    double replica_wait_s;   /* a request waits this long for a ready
                                replica before a 503 */
    /* The Slurm executor's settings (its places set by jobs_create);
     * NULL: training workers run locally. */
    const exec_slurm_config *slurm;
} jobs_env;

/* The scheduler's configuration from the server's: the live scheduler
 * (jobs/service.c) and the MIG advisor's replays (jobs/demand.c) are made
 * with the same one. */
static inline sched_config jobs_sched_config(const jobs_env *env)
{
    return (sched_config){.backfill_wait = env->backfill_wait_s,
                          .preempt = env->preempt,
                          .preempt_wait = env->preempt_wait_s,
                          .max_cpu_jobs = env->max_jobs,
                          .fair_window = env->fair_window_s,
                          .serving_preempt = env->serving_preempt,
                          .max_serving = env->max_replicas,
                          .max_serving_per_tenant = env->tenant_replicas};
}

#endif
