/*
 * kind.h - the kinds of job the job service runs, and what a kind's owner
 * may use of the service.
 *
 * The scheduler places jobs of every kind on the same slots (a training
 * job, a serving replica); what a placed job's life means depends on its
 * kind. The service dispatches it through a table of hooks per kind,
 * filled by the kind's owner at start-up: training by the service itself
 * (jobs/lifecycle.c), serving by the deployments controller
 * (deploy/controller.c), which sits above the service and is never called
 * by it by name. A job belongs to the kind whose id_prefix its scheduler
 * id starts with; every other id is training's.
 *
 * The hooks run on the supervisor's thread. "mu held" means the service's
 * mutex (jobs_lock) is held by the caller; a hook may take its own locks
 * after it (lock order: mu, then the kind's, then the store's).
 */
#ifndef TY_JOBS_KIND_H
#define TY_JOBS_KIND_H

#include <stddef.h>

#include <jansson.h>

#include "common/ty.h"
#include "jobs/env.h"
#include "jobs/supervisor.h"
#include "node/protocol.h"
#include "sched/sched.h"

struct jobs_service;

#define JOBS_KINDS_MAX 4

typedef struct jobs_kind {
    const char *name;      /* "training", "serving": for the logs */
    const char *id_prefix; /* its jobs' scheduler ids start so; NULL: any */
    void *ctx;             /* the owner's, passed to every hook */
    /* The scheduler placed job sj on slot (-1: the CPU) and run entry
     * `place` (supervisor place `place`) is claimed for it
     * (jobs_run_dir names its folder). TY_OK when its process starts; on
     * any other status the service frees the entry and the hook has taken
     * the job out of the scheduler. mu held. */
    ty_status (*start)(void *ctx, int place, int sj, int slot);
    /* A line of the process in place `place`. mu not held. */
    void (*message)(void *ctx, int place, wproto_msg kind, const json_t *msg);
    /* The process in place `place` exited (ws its wait status; lost: the
     * server lost track of it). The entry is freed after. mu held. */
    void (*exit)(void *ctx, int place, int ws, int lost);
    /* Stops the process in place `place` now (a cancel). mu held. */
    void (*cancel)(void *ctx, int place);
    /* Before each scheduling pass (may be NULL). mu held. */
    void (*tick)(void *ctx);
    /* The tenant's limits changed in the store (may be NULL). mu held. */
    void (*tenant_changed)(void *ctx, const char *tenant);
} jobs_kind;

/* Adds a kind (copied) before jobs_run. TY_EINVAL when the table is full
 * or the service already runs. */
ty_status jobs_kind_add(struct jobs_service *js, const jobs_kind *kind,
                        ty_err *err);

/* The service's mutex: it guards the scheduler, the run entries and the
 * supervisor's places. */
void jobs_lock(struct jobs_service *js);
void jobs_unlock(struct jobs_service *js);

/* What the service was started with (borrowed, for its life). */
const jobs_env *jobs_env_of(const struct jobs_service *js);

/* The scheduler (mu held while it is used) and the supervisor of the
 * server's own processes. */
sched *jobs_sched(struct jobs_service *js);
supervisor *jobs_supervisor(struct jobs_service *js);

/* The inventory's slot count (0: a host without slots), and whether
 * training runs on a cluster (--executor slurm). */
int jobs_nslots(const struct jobs_service *js);
int jobs_on_cluster(const struct jobs_service *js);

/* The scheduler's handle of tenant id into *h, registering it with its
 * store limits on first use. mu held. */
ty_status jobs_tenant_handle(struct jobs_service *js, const char *tenant,
                             int *h, ty_err *err);

/* Names job and tenant (NULL: none) as slot's holder in the inventory
 * (GET /v1/devices); nothing for slot -1. */
void jobs_slot_holder(struct jobs_service *js, int slot, const char *job,
                      const char *tenant);

/* Where a process on slot (-1: the CPU) runs: TRAINYARD_DEVICE's value
 * into dev, CUDA_VISIBLE_DEVICES's into cvd (*has_cvd 0: leave the
 * server's). See node/protocol.h. */
void jobs_device_for(const struct jobs_service *js, int slot, char *dev,
                     size_t ndev, char *cvd, size_t ncvd, int *has_cvd);

/* Names owner (a serving replica's deployment id) as what run entry
 * `place`'s usage intervals are recorded for (GET /v1/usage), the entry's
 * own id then recorded as its replica; called from a kind's start. mu
 * held. */
void jobs_run_owner(struct jobs_service *js, int place, const char *owner);

/* The folder of the job in run entry `place` (<jobs>/<id>); NULL when the
 * entry is free. mu held. */
const char *jobs_run_dir(const struct jobs_service *js, int place);

/* The MIG advisor's demand record (jobs/demand.c, store/demand.h): a
 * request just queued in the scheduler (d as submitted, tenant_id its
 * tenant's id), and one that left the queue without running (withdrawn)
 * or stopped holding its slot. Never fails: a store error is logged. */
void jobs_demand_submitted(struct jobs_service *js, const sched_job_desc *d,
                           const char *tenant_id);
void jobs_demand_stopped(struct jobs_service *js, const char *id);

#endif
