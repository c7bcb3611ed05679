/*
 * sched.h - the multi-tenant scheduling policy: which queued job runs on
 * which GPU slot, which running job is preempted for whom, and why every
 * other queued job waits.
 *
 * Pure: no I/O, no clock, no threads, no store. The caller (the runner)
 * tells the scheduler what happens - a tenant's limits, a job submitted,
 * finished, cancelled or stopped - and calls sched_pass(now) whenever
 * something changed or a timer fires; the pass returns decisions and
 * applies them to its own books (a placed job is RUNNING from then on). The
 * caller is not thread-safe-wrapped: hold one lock around every call.
 *
 * Model
 *   slot    somewhere one job runs: a whole GPU (MIG off) or one MIG device,
 *           fixed at sched_create (the inventory's flat slot list, same
 *           order: a slot is its index there). One job per slot, one slot
 *           per GPU job; CPU jobs (request "none") take no slot.
 *   tenant  weight > 0 and two quotas, SCHED_UNLIMITED (any negative) or a
 *           limit >= 0 (0 is a real limit: a tenant with max_gpu_slices 0
 *           runs CPU jobs only): max_gpu_slices counts compute slices held
 *           (a whole GPU holds its 7), max_running_jobs counts jobs holding
 *           or about to hold resources (running, stopping after preemption,
 *           or waiting for a preempted job's slot).
 *   job     tenant, priority (higher first), submit time, a request and
 *           a kind: training (the default) or serving, a replica of a
 *           serving deployment - a long-lived process that holds its slot
 *           (or, request "none", its place on the CPU) while it lives.
 *           Serving outranks training (step 1); a serving job is never
 *           preempted.
 *   node    the host a slot is on (sched_slot.node; all 0 on one host),
 *           and within it an optional interconnect domain (NVLink island).
 *   gang    a training job of N members (sched_job_desc.gang >= 2): N
 *           whole GPUs (MIG off) each satisfying its request, on one node
 *           unless gang_spread, or, request "none", N CPU workers taking N
 *           of cfg.max_cpu_jobs. One job throughout: one placement, one
 *           preemption, one requeue; sched_job_info.gang_slots lists where
 *           its members are.
 *
 * Policy, one pass at time `now`
 *   0. A job a preemption made room for takes its slot once the preempted
 *      job has stopped (sched_job_requeue or sched_job_remove).
 *   1. Serving: queued serving jobs go before every training job, whatever
 *      its tenant, priority or fair share, and before step 2's
 *      reservations (which so never hold a slot back from them). Order:
 *      priority, then submit time, then submission order, across all
 *      tenants (fair share plays no part among replicas). Each takes its
 *      best-fit free slot (as in step 3) within its tenant's quotas: a
 *      replica counts in max_gpu_slices and max_running_jobs like any job;
 *      a CPU replica (request "none") is not bounded by cfg.max_cpu_jobs,
 *      which is for training on the CPU, but every replica, GPU or CPU,
 *      holds one of cfg.max_serving places and one of its tenant's
 *      cfg.max_serving_per_tenant (from being placed or pending until it
 *      is removed): a serving job waits while either is full, so one
 *      tenant's replicas cannot take every place. With cfg.serving_preempt on, a
 *      serving job that no free slot satisfies, and that its tenant's
 *      quotas let hold one more slot, stops one RUNNING training job (of
 *      any tenant, its own included) on a slot that satisfies it, at once:
 *      no preempt_wait, no fair-share test. Victims are ordered as in step
 *      4 (lowest priority, most recently started, smaller slot, lower
 *      index); the victim becomes STOPPING and the serving job PENDING on
 *      its slot exactly as in step 4, and sched_result.preemptions reports
 *      both kinds alike. A slot already stopping or promised is never
 *      chosen again, nor a job step 0 has just started (no job is started
 *      and stopped by one pass). A tenant at its quota cannot make room
 *      for its own replica this way: its stopping job counts until it has
 *      stopped.
 *   2. Reservations (backfill bound): each tenant's head job (its best
 *      queued GPU training job: priority, then submit time) that has waited at
 *      the head for cfg.backfill_wait seconds, not held back by its own
 *      quota, goes first, oldest wait first; if nothing satisfying it is
 *      free, every slot size (class) that would satisfy it is held back
 *      from all later training jobs ("reserved for job X"), and since it
 *      stays first in every pass it starts on the first such slot that
 *      frees (unless a serving job takes it): smaller jobs cannot keep it
 *      waiting past the bound. A gang head reserves one node instead (see
 *      Gangs). An overdue head jumps the fair-share order,
 *      so backfill_wait should be well above the wait fair share alone
 *      causes (minutes, not seconds).
 *   3. Fair share: tenants with queued training jobs in order of their
 *      average compute slices held over the last cfg.fair_window seconds
 *      plus an eighth of those held now, divided by weight (then running
 *      jobs / weight, then the older head job); the history is what makes
 *      shares converge to the weights when whole slots cannot (weights
 *      1,1,2 on 7 slots: 2,2,3 now, 1/4,1/4,1/2 over time); the first
 *      tenant places its best training job that fits a free slot that is
 *      not held back and its quotas (within a tenant: priority, then submit
 *      time, then submission order), and goes back in the order with its
 *      new usage. Smaller jobs behind a head that cannot fit run
 *      (backfill), within the bound of step 2. Best-fit: the smallest free
 *      slot satisfying the request - fewest compute slices, then least
 *      memory, then the slot's class (profile) first seen in the inventory,
 *      then lowest index. A tenant's serving replicas count in its slices
 *      here like any job: they use up its share of training.
 *   4. Preemption (cfg.preempt): a tenant whose slices plus the victim's
 *      slot stay within its weighted share (total slices x weight / sum of
 *      weights of tenants with GPU jobs queued or holding slices), whose
 *      head GPU training job has been queued cfg.preempt_wait seconds and
 *      could not be placed, may stop one running training job of another
 *      tenant that is above its share and stays at or above it without
 *      that job, on a slot that satisfies the head job (so freeing it makes
 *      the job fit, and one victim is always enough: never more than
 *      needed). Victims: lowest
 *      priority first, then most recently started, then the smaller slot,
 *      then lower index. The victim becomes STOPPING (it still holds its
 *      slot: the runner makes it checkpoint and exit, then calls
 *      sched_job_requeue), the job becomes PENDING on that slot. At most one
 *      preemption per tenant per pass. Neither side can then preempt the
 *      other back: the beneficiary is at or below its share, the victim's
 *      tenant at or above.
 *   Quotas are checked on every placement and preemption and are never
 *   exceeded by the scheduler (lowering a quota below current usage stops
 *   new placements; it preempts nothing).
 *
 * Gangs
 *   All or nothing: a gang is placed only when all its members fit at
 *   once (free slots of its classes on one node, or anywhere when it
 *   spreads; CPU: N free places); it never holds some slots while waiting
 *   for the others, and sched_check verifies that every gang RUNNING or
 *   STOPPING holds exactly its N slots (on one node) and every other holds
 *   none. Placement: the node with the fewest free slots that suffice
 *   (best fit, keeping whole nodes free for big gangs), preferring one
 *   where a single non-zero domain holds them all (then the domain with
 *   the fewest that suffice); a spreading gang that fits no one node takes
 *   the freest nodes first. In step 3 a tenant's gang is tried where it
 *   comes first in its tenant's order; when it does not fit, the tenant's
 *   other jobs go on (each gang size, and spreading or not, has a lane of
 *   its own, so a small gang is not stuck behind a big one).
 *   Reservation (step 2): an overdue head gang that does not fit reserves
 *   one node - the one it reserved in earlier passes while that stays
 *   possible, else the node with the most free slots of its classes among
 *   those with at least N - and that node's free slots of its classes are
 *   held back from every later training job; what frees there stays free
 *   until it has N. One gang per node; a spreading gang holds its classes
 *   as a single job does. A CPU gang that heads its tenant's CPU jobs and
 *   has been queued backfill_wait seconds (the oldest such, one at a time)
 *   starts if its N places are free, else keeps every CPU place that
 *   frees until it has N (the report says "reserved for job" to the CPU
 *   jobs it holds back). Jobs carry no expected runtime here, so
 *   reserved slots are simply not backfilled (no job is known to end
 *   before the reservation is due); every other slot - other nodes, MIG
 *   slices on the same node - keeps taking small jobs, so a gang blocks
 *   only what it will use. Bound: once overdue, a gang waits at most for
 *   the older reservations ahead of it and for the jobs already running
 *   on its node (serving jobs, step 1, may still take its slots).
 *   Fair share and quotas count every member: a gang of 4 whole GPUs is 28
 *   compute slices of max_gpu_slices and of the tenant's share, and one
 *   job of max_running_jobs; a CPU gang of N counts N of cfg.max_cpu_jobs.
 *   Preemption: a running gang is a victim like any job (step 1 or 4; in
 *   step 4 its tenant must stay at or above its share without all of it);
 *   chosen for one of its slots, it becomes STOPPING whole - all its slots
 *   stay held until the caller requeues or removes it, which frees them
 *   all - and sched_result.preemptions names it once. A queued gang never
 *   preempts (step 4 skips a tenant whose head is a gang): it relies on
 *   its reservation. Serving jobs are never gangs.
 *
 * Cost: sched_pass never allocates and never sorts the queue. Jobs live in
 * per-tenant lanes, one per distinct request (its set of satisfying slot
 * classes), each kept sorted on insert; a pass looks only at lane heads:
 * O(T * L + P * (L + log T) + S) for T tenants with queued jobs, L lanes
 * per tenant, P placements and preemptions and S slots, independent of the
 * number of queued jobs. A tenant's serving jobs have lanes of their own
 * (the same lists), so step 1 too looks only at lane heads, walking the
 * tenants with queued serving jobs by a heap keyed by their best placeable
 * head; its victims are kept as the best one per slot class (found in O(S)
 * once, and again for one class after each serving preemption), and with
 * no serving job queued step 1 costs nothing. Free slots are counted per
 * class and a free-class bitmask makes best-fit one bit scan. Submission
 * inserts from the tail of the lane (O(1) for the usual newest-last order;
 * a requeued or high-priority job walks its lane).
 * A gang at the head of a lane costs a bound check (more members than the
 * freest node has free: out at once), else O(nodes x classes) to find its
 * node and O(slots of that node) to pick its members; a reservation's
 * node is kept from pass to pass, so finding it again is O(slots of a
 * node).
 *
 * Positions and reasons for every queued job are NOT computed by the pass:
 * sched_queue_report computes them on request, O(N log T) for N queued
 * jobs (about 10,000 jobs in well under a millisecond; see bench/sched).
 *
 * Limits: at most SCHED_MAX_CLASSES distinct slot classes (compute slices,
 * memory, MIG or not, profile, draining, retired) - an inventory has a
 * handful. The slot list changes only through sched_slots_replace (a MIG
 * layout change: drain a GPU's slots, then re-cut them).
 */
#ifndef TY_SCHED_H
#define TY_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "common/ids.h"
#include "common/ty.h"

#define SCHED_UNLIMITED (-1)
#define SCHED_MAX_CLASSES 64
#define SCHED_PROFILE_MAX 32

typedef struct sched sched;

/* A slot as the inventory describes it (gpu/inventory.h's inv_slot). */
typedef struct {
    int gpu;             /* GPU index */
    int is_mig;          /* 1: a MIG device; 0: a whole GPU, MIG off */
    const char *profile; /* "1g.18gb" (copied); NULL or "" whole GPU */
    int compute_slices;  /* 1..7; a whole GPU 7 */
    uint64_t memory_bytes;
    /* The host the slot is on (any int; slots with the same value share a
     * node). 0, the default, for all: one host, as a local inventory is.
     * A gang's members go on one node unless it spreads. */
    int node;
    /* Interconnect domain within the node (GPUs that reach each other
     * over NVLink/NVSwitch, as NVML topology or a sim file says: the
     * inventory's inv_slot.domain); 0 unknown. A gang prefers members
     * that share one non-zero domain. */
    int domain;
} sched_slot;

typedef enum {
    SCHED_REQ_NONE = 0, /* CPU only: no slot */
    SCHED_REQ_ANY,      /* any slot */
    SCHED_REQ_PROFILE,  /* a MIG device of this profile */
    SCHED_REQ_MIN,      /* any slot with at least these */
} sched_req_kind;

typedef struct {
    sched_req_kind kind;
    char profile[SCHED_PROFILE_MAX]; /* SCHED_REQ_PROFILE */
    uint64_t min_memory_bytes;       /* SCHED_REQ_MIN */
    int min_compute_slices;          /* SCHED_REQ_MIN */
} sched_request;

typedef struct {
    /* Seconds the head job of a tenant waits before it reserves the slot
     * sizes it needs (a gang: one node's slots) and backfill stops using
     * them (>= 0; 0 reserves at once, i.e. no backfill onto slots a head
     * job could use). */
    double backfill_wait;
    int preempt;         /* 1: step 4 runs; 0: never preempt for fair share */
    double preempt_wait; /* seconds queued before a job may preempt */
    /* 1: a serving job no free slot satisfies stops a running training job
     * (step 1), at once; 0: it waits for a slot to free. The server turns
     * it on by default. */
    int serving_preempt;
    int max_cpu_jobs; /* CPU training jobs at once; SCHED_UNLIMITED (<0).
                         CPU serving jobs are not counted. */
    /* Serving jobs holding a place at once (running, or pending on a
     * preempted job's slot), GPU and CPU alike: the server's replica
     * processes; SCHED_UNLIMITED (<0), or a limit >= 0. */
    int max_serving;
    /* The same for one tenant (its default share of max_serving), on top
     * of its quotas; SCHED_UNLIMITED (<0), or a limit >= 0. */
    int max_serving_per_tenant;
    /* Seconds of history fair share remembers (>= 0): a tenant's standing
     * is its average compute slices held over about this long (plus a
     * little for what it holds now), per unit of weight. 0: only what it
     * holds now. */
    double fair_window;
} sched_config;

typedef enum {
    SCHED_JOB_QUEUED = 0,
    SCHED_JOB_PENDING, /* given a slot a preempted job still holds */
    SCHED_JOB_RUNNING,
    SCHED_JOB_STOPPING, /* preempted: still holds its slot */
} sched_job_state;

/* What the caller tells about a new job. */
typedef struct {
    const char *id;     /* "job_..." (copied; unique) */
    int tenant;         /* a handle from sched_tenant_set */
    int priority;       /* higher runs first within the tenant */
    double submit_time; /* seconds, the caller's clock */
    sched_request request;
    int serving; /* 1: a serving replica (step 1); 0: training */
    /* Gang: 0 or 1, an ordinary job; N >= 2, N members placed all at
     * once or not at all (see "Gangs" above). GPU request (ANY or MIN):
     * each member one whole GPU (MIG off) satisfying `request`; request
     * NONE: N CPU workers, N places of cfg.max_cpu_jobs. Training only. */
    int gang;
    /* 1: members may be on different nodes; 0 (default): one node. */
    int gang_spread;
} sched_job_desc;

/* A job as the scheduler sees it (read-only view). */
typedef struct {
    const char *id;
    int tenant;
    int priority;
    double submit_time;
    sched_request request;
    sched_job_state state;
    int slot;          /* RUNNING/STOPPING/PENDING: the slot; else -1
                                 (and -1 for a running CPU job) */
    double start_time; /* RUNNING/STOPPING: when placed */
    double head_since; /* QUEUED: since when it has been its
                                 tenant's head job; < 0 not the head */
    int preempted_for; /* STOPPING: the job it makes room for */
    int serving;       /* 1: a serving replica; 0: training */
    int gang;          /* members: 1 an ordinary job, N a gang */
    int gang_spread;   /* as submitted */
    /* RUNNING/STOPPING GPU gang: its members' slots (gang of them, slot
     * is the first); else NULL. Valid until the next call that changes
     * the job. */
    const int *gang_slots;
} sched_job_info;

/* One per job, gangs included: a gang's members' slots are in
 * sched_job_info.gang_slots (slot is the first of them). */
typedef struct {
    int job;
    int slot; /* -1: a CPU job */
} sched_placement;

/* One per victim job: a gang victim is stopped whole (all its members
 * STOPPING, one entry); slot is the one of its slots given to job. */
typedef struct {
    int victim; /* now STOPPING: tell it to checkpoint */
    int job;    /* now PENDING on the victim's slot */
    int slot;
} sched_preemption;

/* A pass's decisions; the arrays belong to the scheduler and stay valid
 * until the next sched_pass or sched_destroy. */
typedef struct {
    const sched_placement *placements;
    size_t n_placements;
    const sched_preemption *preemptions;
    size_t n_preemptions;
} sched_result;

typedef enum {
    SCHED_WAIT_SCHEDULING = 0, /* could run now: the next pass places it */
    SCHED_WAIT_QUOTA,          /* its tenant is at a quota (see quota) */
    SCHED_WAIT_NO_SLICE,       /* no free slice of that size (or CPU slot) */
    SCHED_WAIT_FAIR_SHARE,     /* its tenant holds its share and another
                                  tenant below its share is waiting */
    SCHED_WAIT_RESERVED,       /* a fitting slot is held for other_job */
    SCHED_WAIT_PREEMPTING,     /* PENDING: other_job is checkpointing to
                                  free its slot */
    SCHED_WAIT_REPLICAS,       /* serving: the server's max_serving places
                                  are all held */
} sched_wait_reason;

typedef enum {
    SCHED_QUOTA_NONE = 0,
    SCHED_QUOTA_GPU_SLICES,
    SCHED_QUOTA_RUNNING_JOBS,
    SCHED_QUOTA_REPLICAS, /* serving: max_serving_per_tenant */
} sched_quota;

/* Why a queued (or pending) job waits, and where it stands. */
typedef struct {
    int job;
    size_t position;        /* 1-based estimated start order over all
                                  queued jobs (pending jobs first, then
                                  serving jobs in step 1's order, then the
                                  fair-share interleaving of the tenants'
                                  training queues, each job counted at its
                                  smallest fitting slot) */
    size_t tenant_position; /* 1-based within its tenant's queue (its
                                  serving jobs first) */
    sched_wait_reason reason;
    sched_quota quota; /* SCHED_WAIT_QUOTA: which */
    int other_job;     /* RESERVED, PREEMPTING: that job; else -1 */
} sched_wait;

/* Creates a scheduler over n_slots slots (copied; n_slots may be 0: a
 * CPU-only host). NULL with err on a bad slot (field "slots[i]...") or
 * config, or too many slot classes, or out of memory. */
sched *sched_create(const sched_config *cfg, const sched_slot *slots,
                    size_t n_slots, ty_err *err);
void sched_destroy(sched *s);

/* Adds tenant `id` or updates its weight and quotas; *handle (may be NULL)
 * is its handle, stable for the scheduler's life. TY_EINVAL naming
 * "weight" (must be finite and > 0); TY_ENOMEM. */
ty_status sched_tenant_set(sched *s, const char *id, double weight,
                           int64_t max_gpu_slices, int64_t max_running_jobs,
                           int *handle, ty_err *err);

/* The handle of tenant `id`, or -1. */
int sched_tenant_find(const sched *s, const char *id);

/* Compute slices (running, pending and stopping jobs) and jobs (the same)
 * tenant t holds now; its weighted share of slices as the pass computes
 * it (0 when it has no GPU work). */
void sched_tenant_usage(const sched *s, int t, int *slices, int *jobs,
                        double *share);

/* Whether `req` could ever run here: TY_OK, or TY_EINVAL with a sentence
 * for the 422 (field "resources.gpu") when no slot of this inventory
 * satisfies it, or when tenant >= 0 and even the smallest slot that does
 * is above the tenant's max_gpu_slices quota (its quota as it is now).
 * Pure. */
ty_status sched_request_check(const sched *s, int tenant,
                              const sched_request *req, ty_err *err);

/* Whether job d could ever run here, as sched_job_submit checks it (the id
 * aside): its request (sched_request_check) and its gang. TY_EINVAL with
 * the field for the 422: "resources.gpu" for a MIG profile in a gang (or
 * a request only MIG slices satisfy), "resources.gpus" for a GPU gang
 * larger than any node's satisfying whole GPUs (than all of them when it
 * spreads) or than the tenant's max_gpu_slices, "resources.workers" for a
 * CPU gang above cfg.max_cpu_jobs, "gang" for a negative size or a
 * serving gang. Pure. */
ty_status sched_job_check(const sched *s, const sched_job_desc *d, ty_err *err);

/* Queues a job (state QUEUED). TY_EINVAL for an unknown tenant, an empty
 * or duplicate id, or a request or gang sched_job_check refuses (then
 * nothing changes); TY_ENOMEM. *handle (may be NULL) is the job's handle, valid
 * until sched_job_remove. */
ty_status sched_job_submit(sched *s, const sched_job_desc *d, int *handle,
                           ty_err *err);

/* Forgets a job in any state (finished, failed, cancelled), freeing its
 * slot; a job pending on a slot loses it. TY_ENOTFOUND for a bad handle. */
ty_status sched_job_remove(sched *s, int job);

/* A RUNNING or STOPPING job goes back to the queue (its worker stopped
 * after a preemption, or crashed and will be retried), in its original
 * place (priority, submit time); its slot is freed (for the job it was
 * preempted for, if any). TY_ECONFLICT in another state. */
ty_status sched_job_requeue(sched *s, int job, ty_err *err);

/* Recovery: marks a QUEUED job RUNNING on `slot` (-1: CPU) since
 * start_time, as a restarted server found it. Quotas are not checked (it
 * is already running). TY_ECONFLICT if the slot is held or the job not
 * queued; TY_EINVAL for a slot that does not satisfy its request. */
ty_status sched_job_restore_running(sched *s, int job, int slot,
                                    double start_time, ty_err *err);

/* The same for a gang: its members' slots (n == its size; NULL and 0 for
 * a CPU gang). TY_EINVAL for a wrong count, a repeated slot, one that does
 * not satisfy it, or members on several nodes of a one-node gang. */
ty_status sched_job_restore_gang(sched *s, int job, const int *slots, int n,
                                 double start_time, ty_err *err);

/* The job with this id, or -1. */
int sched_job_find(const sched *s, const char *id);

/* Fills a view of job; TY_ENOTFOUND for a bad handle. */
ty_status sched_job_get(const sched *s, int job, sched_job_info *out);

/* The job on slot i (RUNNING or STOPPING), or -1 when free. */
int sched_slot_holder(const sched *s, int slot);

/* One scheduling pass at `now` (see the policy above). Never allocates;
 * fills out and applies the decisions. */
void sched_pass(sched *s, double now, sched_result *out);

/* Number of queued and pending jobs. */
size_t sched_queued_count(const sched *s);

/* Positions and reasons of every queued and pending job, in position
 * order, into out[0..cap) (cap >= sched_queued_count: all of them);
 * returns how many were written. Reasons reflect the state after the last
 * pass. O(N log T); allocates nothing (uses buffers sized at submit). */
size_t sched_queue_report(sched *s, sched_wait *out, size_t cap);

/* Why job j (queued or pending) waits, as sched_queue_report would say,
 * without positions (0): O(1) for a serving job, O(T) for a training one.
 * TY_ENOTFOUND when j is not queued or pending. */
ty_status sched_job_wait(sched *s, int j, sched_wait *w);

/* "quota", "no free slice of that size", "fair share", "reserved for job",
 * "preempting", "scheduling". */
const char *sched_wait_reason_name(sched_wait_reason r);

/* A sentence for a person: "quota: max_gpu_slices 4 reached (4 in use)",
 * "reserved for job job_x", "no free slice of that size (needs 3g.71gb)". */
void sched_wait_describe(const sched *s, const sched_wait *w, char *buf,
                         size_t n);

/* The same wait in a user's words, without the scheduler's terms (what
 * the dashboard shows): "Your tenant may run 2 jobs at once and 2 are
 * running", "No 3g.71gb slice is free; the job starts when one is". Jobs
 * of other tenants are never named. */
void sched_wait_summary(const sched *s, const sched_wait *w, char *buf,
                        size_t n);

/* What a slot of a changing layout is (sched_slots_replace). */
typedef enum {
    SCHED_SLOT_IN_USE = 0,
    /* Draining (a layout change waits for it): it satisfies requests as
     * before, but takes no new job, is never promised to one by a
     * preemption and counts in no share; the job on it runs on. */
    SCHED_SLOT_DRAINING = 1,
    /* Retired (a layout change removed it): it satisfies no request and
     * takes no job; it stays in the list so that the slots after it keep
     * their indices. */
    SCHED_SLOT_RETIRED = 2,
} sched_slot_state_kind;

/* Replaces the slot list with slots[0..n_slots) (copied), their states in
 * states[] (NULL: all in use), keeping every
 * tenant and job with its handle: a job on old slot i (RUNNING or
 * STOPPING) goes on slot remap[i] (NULL: the same index), which must
 * exist and be of the same kind (compute slices, memory, MIG, profile)
 * and not retired; a PENDING job goes back to the queue (the job stopping
 * for it stops for nobody); queued jobs keep their place, their requests
 * matched against the new slots. A queued job of a GPU request that no
 * slot satisfies any more is removed, its id written to dropped (cap
 * entries; pass cap >= sched_queued_count for all) and counted in
 * *ndropped: the caller fails it. Use it to drain a GPU (the same slots,
 * SCHED_SLOT_DRAINING for the GPU's) and to re-cut it (its slots retired or
 * reused, new ones appended, so the other GPUs' slots keep their
 * indices). TY_ECONFLICT naming the slot when a held slot has no fitting
 * place in the new list (nothing changes), TY_EINVAL as sched_create,
 * TY_ENOMEM. */
ty_status sched_slots_replace(sched *s, const sched_slot *slots,
                              const uint8_t *states, size_t n_slots,
                              const int *remap, char (*dropped)[TY_ID_MAX],
                              size_t cap, size_t *ndropped, ty_err *err);

/* Slot i's sched_slot_state_kind (SCHED_SLOT_IN_USE for a bad index). */
int sched_slot_state(const sched *s, int slot);

/* Checks every invariant the scheduler keeps (no slot held twice, holder
 * and job agree, usage counters match, quotas respected, queues sorted, no
 * serving job stopping, a pending job's slot held only by the job stopping
 * for it, and by a training job when the pending job serves):
 * TY_OK or TY_EINTERNAL saying which. O(jobs + slots); for tests. */
ty_status sched_check(const sched *s, ty_err *err);

#endif
