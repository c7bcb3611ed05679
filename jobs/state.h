/*
 * state.h - the job service's state and the calls on it that its files
 * share: service.c (the public jobs_* calls: create, run, submit, cancel,
 * tenants, the queue report, stop) above lifecycle.c (the scheduling pass
 * and the training kind: a placed job's worker, its lines and exit, the
 * outcome and the retries) and remote.c (the remote workers' requests),
 * all three above state.c, which owns the helpers below and the kind
 * interface (jobs/kind.h). Not for use outside jobs/.
 */
#ifndef TY_JOBS_STATE_H
#define TY_JOBS_STATE_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include <jansson.h>

#include "common/ids.h"
#include "events/hub.h"
#include "gpu/inventory.h"
#include "jobs/env.h"
#include "jobs/executor.h"
#include "jobs/kind.h"
#include "node/protocol.h"
#include "sched/sched.h"
#include "jobs/supervisor.h"

/* As service.h has it (repeated, not included: service.c includes this
 * header, and the layer test counts that as a circle). */
typedef struct jobs_service jobs_service;

/* The most usage intervals one run holds at once (one per GPU of a gang:
 * a node's GPUs), and how often the server stamps the store alive. */
#define JOBS_USAGE_MAX INV_MAX_GPUS
#define JOBS_USAGE_ALIVE_S 10.0

/* A job whose worker runs (or is being started) in supervisor place i:
 * what the service knows of that run. */
typedef struct {
    int used;
    char job_id[TY_ID_MAX];
    char dir[PATH_MAX];
    int sjob;        /* the scheduler's handle */
    int slot;        /* inventory slot; -1 a CPU job */
    int done;        /* the worker said the model is written */
    char error[512]; /* the worker's error message, if any */
    int cancel;      /* a cancel was requested */
    int preempting;  /* preempted: it checkpoints and exits */
    double last_progress_write;
    double last_val_write; /* of a line with an eval_every_steps val_loss */
    int64_t last_progress_epoch; /* the epoch of the last progress written */
    double eta_t0;               /* the run's first progress line: when */
    int64_t eta_step0;           /* and at which step (0: none seen yet) */
    int resumed_from_epoch;      /* -1 unless this run resumed */
    char tenant_id[TY_ID_MAX];   /* for metrics labels */
    const jobs_kind *kind;       /* training (lifecycle.c) or another kind's */
    /* Usage accounting (usage.c): the owner a kind named (a replica's
     * deployment; "": the job itself), the open intervals' store ids, the
     * slices and CPU places they hold, and when the counters last
     * advanced (wall seconds). */
    char owner[TY_ID_MAX];
    int64_t usage_ids[JOBS_USAGE_MAX];
    int nusage;
    int usage_slices, usage_cpu;
    double usage_counted;
} job_run;

/* A crashed job waiting out its back-off, outside the scheduler. */
typedef struct {
    char job_id[TY_ID_MAX];
    int tenant;
    int priority;
    double submit_time;
    sched_request req;
    double due; /* monotonic */
    char why[300];
    /* A gang: its resources.workers and min_workers (elastic below
     * workers), its world size chosen again when it is due; hold: it is
     * not in a back-off but waits for min_workers to fit (why says so). */
    int workers, min_workers;
    int spread; /* a gang over Slurm nodes (resources.nodes): it spreads */
    int hold;
} retry_rec;

/* How often a held elastic gang (retry_rec.hold) checks again whether its
 * min_workers fit. */
#define JOBS_GANG_RECHECK_S 2.0

struct jobs_service {
    jobs_env env;   /* jobs_create's copy */
    inventory *inv; /* env.inventory; NULL: no slots */
    pthread_mutex_t mu;
    atomic_int stopping;
    supervisor *sup; /* local processes: replicas, and training workers
                        with the local executor */
    executor *exec;  /* where training workers run (jobs/executor.h) */
    sched *sched;
    int nslots;                    /* inventory slots */
    char (*tenant_ids)[TY_ID_MAX]; /* by scheduler tenant handle */
    int ntenant_ids, tenant_cap;
    int nruns;     /* entries in use */
    int cap;       /* inventory slots + --max-jobs */
    job_run *runs; /* cap, by supervisor place */
    retry_rec *retries;
    size_t nretries, retry_cap;
    sched_wait *report; /* jobs_annotate's buffer */
    size_t report_cap;
    jobs_kind kinds[JOBS_KINDS_MAX]; /* [0] training; then jobs_kind_add's */
    int nkinds;
    int running; /* jobs_run was called: no kind is added after */
    struct jobs_miglayout *migl; /* MIG layout changes (miglayout.c) */
    double usage_alive_at;       /* the last alive stamp (wall seconds) */
};

/* Monotonic seconds: deadlines, heartbeats, back-offs. */
static inline double svc_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The scheduler's clock: wall time, so submit times read back from the
 * store after a restart (created_at) compare with it. */
static inline double svc_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- state.c ---- */

/* Publishes a live event of the job (events/hub.h) with the job as GET
 * /v1/jobs/{id} shows it, read back from the store; epoch (borrowed) is
 * added for job.epoch. The queue report is left null: it needs mu, which
 * callers may hold. Nothing happens when the store cannot say. */
void svc_publish(jobs_service *r, const char *job_id, ev_type type,
                 const json_t *epoch);

/* Logs a job's change of status and publishes it: job.finished, or
 * job.progress for a requeue. */
void svc_log_transition(jobs_service *r, const char *job, const char *to,
                        const char *why);

/* The tenant id of scheduler tenant handle h ("" for none). */
const char *svc_tenant_id(const jobs_service *r, int h);

/* The scheduler's handle of tenant id into *h, registering it with its
 * store limits on first use. Caller holds mu. */
ty_status svc_tenant_handle(jobs_service *r, const char *id, int *h,
                            ty_err *err);

/* Names job and tenant (NULL: none) as inventory slot `slot`'s holder;
 * nothing for a CPU job (slot -1) or a host without slots. */
void svc_set_holder(jobs_service *r, int slot, const char *job,
                    const char *tenant);

/* Clears every inventory slot job holds (a gang of whole GPUs holds one
 * per member). */
void svc_release_holders(jobs_service *r, const char *job);

/* What the job document shows of where a run on slot (-1: the CPU) with
 * device dev (and cvd when has_cvd) is placed (see openapi.yaml's
 * Placement), with the time it starts (new reference; NULL when out of
 * memory). */
json_t *svc_placement_json(const jobs_service *r, int slot, const char *device,
                           const char *cvd, int has_cvd);

/* A gang of whole GPUs placed on info's slots (info->gang > 1 with
 * gang_slots): each member held by job and tenant, and each rank's member
 * - its device as svc_device_for says, slot, GPU, uuid - in one
 * allocation the caller frees (the strings are inside it). NULL, nothing
 * held, when out of memory. */
exec_rank *svc_gang_hold(jobs_service *r, const sched_job_info *info,
                         const char *job, const char *tenant);

/* Adds such a gang's slots to placement as gang_slots (what a restarted
 * server gives the scheduler back, reattach_running); nothing for any
 * other job or a NULL placement. */
void svc_gang_placement(const sched_job_info *info, json_t *placement);

/* A gang over Slurm nodes: its ranks a node (resources.gpus_per_node of a
 * job document); 0 for any other job. */
int svc_job_ranks_per_node(const json_t *job);

/* The kind of scheduler job id (the training kind when no other's prefix
 * matches). */
const jobs_kind *svc_kind_of(const jobs_service *r, const char *sched_id);

/* Takes run entry `place` for scheduler job sj of tenant on slot (-1: the
 * CPU), its folder <jobs>/<job_id>, its kind svc_kind_of(job_id). Caller
 * holds mu. */
job_run *svc_run_claim(jobs_service *r, int place, int sj, int slot,
                       const char *job_id, const char *tenant);

/* Where a job on `slot` (-1: a CPU job) runs (jobs_device_for). */
void svc_device_for(const jobs_service *r, int slot, char *dev, size_t ndev,
                    char *cvd, size_t ncvd, int *has_cvd);

/* Leaves run entry w free. Caller holds mu. */
void svc_run_release(jobs_service *r, job_run *w);

/* ---- service.c: elastic gangs ---- */

/* The world size an elastic gang of `workers` (min_workers below it)
 * starts at now (jobreq_world over what the executor can run now: the
 * server's --max-jobs, and with Slurm its nodes that are up), or 0 when
 * fewer than min_workers can run, with a sentence for the queue entry in
 * why ("needs 2 Slurm nodes up; 1 is"). A gang that is not elastic gets
 * workers. Caller holds mu. */
int svc_gang_world(jobs_service *r, int workers, int min_workers, char *why,
                   size_t nwhy);

/* Puts job id on the retry list (outside the scheduler) until `due`
 * (monotonic): its back-off (hold 0), or the wait of an elastic gang for
 * min_workers to fit (hold 1). why is for the queue entry. TY_ENOMEM when
 * the list cannot grow (nothing changes). Caller holds mu. */
ty_status svc_retry_add(jobs_service *r, const char *id, int tenant,
                        int priority, double submit_time,
                        const sched_request *req, int workers, int min_workers,
                        int spread, double due, int hold, const char *why);

/* The ranks of a job document or store row's gang and its min_workers:
 * resources.workers, resources.gpus or resources.nodes times
 * gpus_per_node (1 and 1 without; min_workers = workers when not
 * elastic, which a gang of GPUs never is). */
void svc_job_gang(const json_t *job, int *workers, int *min_workers);

/* Whether a gang asked for with these resources (normalized) may spread
 * over the scheduler's nodes: a gang of GPUs over Slurm nodes
 * (resources.nodes); every other gang is on one node. */
int svc_gang_spread(const json_t *resources);

/* ---- demand.c: the MIG advisor's demand records ---- */

/* Demand records older than this are removed at server start. */
#define JOBS_DEMAND_KEEP_DAYS 90

/* A request no slot of this inventory could satisfy (refused with 422),
 * recorded as refused demand; nothing for a CPU or gang request or one
 * refused only by the tenant's quota. Takes mu. */
void svc_demand_refused(jobs_service *r, const char *tenant_id,
                        const sched_request *req, int workers);
/* Request id was placed now. */
void svc_demand_started(jobs_service *r, const char *id);
/* Server start: prunes old records, closes the runs left open. */
void svc_demand_recover(jobs_service *r);

/* The folder of the training job in place `place` with a current
 * attempt (remote workers' requests). mu held. */
const char *svc_run_dir(const jobs_service *r, int place);

/* ---- usage.c: usage accounting ---- */

/* Opens w's usage intervals (one per slot it holds, or its CPU places)
 * now; nothing when they are open. A store failure is logged. mu held. */
void svc_usage_open(jobs_service *r, job_run *w);

/* Closes w's open intervals now. mu held. */
void svc_usage_close(jobs_service *r, job_run *w);

/* Stamps the store alive every JOBS_USAGE_ALIVE_S seconds and advances
 * the usage counters of the runs. mu held. */
void svc_usage_tick(jobs_service *r);

/* At start: closes the intervals a crash left open (store_usage_recover)
 * and logs how many. */
void svc_usage_recover(jobs_service *r);

/* ---- lifecycle.c: the training kind and the scheduling pass ---- */

/* The training kind's hooks (ctx is the service), for kinds[0]. */
jobs_kind lifecycle_training_kind(jobs_service *r);

/* ---- lifecycle.c: the supervisor's hooks (ctx is the service) ---- */

/* A scheduling pass: back-offs that are over, preemptions, placements
 * (workers started). mu held. */
void lifecycle_tick(void *ctx);

/* What a worker's line means for its job. mu not held. */
void lifecycle_message(void *ctx, int place, wproto_msg kind,
                       const json_t *msg);

/* A worker has exited: the outcome is recorded and the run entry freed.
 * mu held. */
void lifecycle_exit(void *ctx, int place, int ws, int lost);

/* ---- lifecycle.c: the executor's hooks (exec_hooks) ---- */

/* What the cluster says of a remote worker: merged into the job's
 * placement ("slurm") and published. mu not held. */
void lifecycle_status(void *ctx, int place, const json_t *status);

/* A worker ended (exec_end says how). mu held. */
void lifecycle_end(void *ctx, int place, int ws, exec_end how, const char *why);

#endif
