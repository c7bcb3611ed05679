/*
 * sched_internal.h - the books shared by the scheduler's files (sched_core.c,
 * sched_books.c, sched_passes.c, sched_report.c, sched_check.c,
 * sched_gang.c, sched_layout.c); not a
 * public interface: everything outside sched/sched*.c uses sched/sched.h.
 *
 * Books the scheduler keeps, and the invariants sched_check verifies:
 *   - slots: holder (a RUNNING or STOPPING job, or -1) and reserved_for (the
 *     PENDING job a preemption gave the slot to, or -1). A slot is free for
 *     anyone exactly when both are -1; classes count such slots (nfree) and
 *     the bitmask `avail` has bit c set iff class c has one.
 *   - classes: slots with the same (compute slices, memory, MIG, profile),
 *     numbered in best-fit order, so a request's satisfying classes are a
 *     bitmask and best-fit is the lowest set bit of (mask & avail & ...).
 *   - lanes: a tenant's QUEUED jobs of one kind with the same class mask
 *     (the same request, in effect), a doubly linked list sorted by
 *     (priority desc, submit time, submission order); lane l has mask
 *     masks[l], lane 0 holds CPU jobs (mask 0). Training jobs are in the
 *     tenant's `lanes`, serving jobs in its `slanes` (same indices). Every
 *     QUEUED or PENDING job is also in its tenant's list, in job order
 *     (serving jobs first), which the report walks.
 *   - tenant counters: slices (held by its RUNNING, STOPPING and PENDING
 *     jobs: quota), slices_share (RUNNING and PENDING: fair share), jobs
 *     (RUNNING, STOPPING, PENDING: quota), queued and queued_gpu (QUEUED
 *     training jobs), queued_srv (QUEUED serving jobs; s->queued_srv sums
 *     them). cpu_running counts RUNNING and STOPPING CPU training jobs.
 *   - serving: no serving job is STOPPING; a PENDING job's slot is held by
 *     nobody or by the STOPPING job preempted for it, a training job.
 * Jobs live in a pool addressed by handle (index), with a free list and a
 * hash from id to handle; links are handles, so the pool may move.
 */
#ifndef TY_SCHED_INTERNAL_H
#define TY_SCHED_INTERNAL_H

#include <stdint.h>

#include "sched/sched.h"

#define SCHED_EPS 1e-9

typedef struct {
    char profile[SCHED_PROFILE_MAX];
    int gpu;
    int is_mig;
    int compute_slices;
    uint64_t memory_bytes;
    int cls;
    int node;         /* dense node index (0..nnodes) */
    int domain;       /* interconnect domain, 0 unknown */
    int holder;       /* RUNNING/STOPPING job, or -1 */
    int reserved_for; /* PENDING job, or -1 */
    int off;          /* 0 in use; 1 draining; 2 retired (class's too) */
} slot_rec;

typedef struct {
    char profile[SCHED_PROFILE_MAX];
    int is_mig;
    int compute_slices;
    uint64_t memory_bytes;
    int *slots; /* slot indices, ascending */
    int nslots;
    int nfree; /* free and unreserved; always 0 for a class that is off */
    int first_slot;
    int off; /* 0; 1 draining; 2 retired: takes no job (see s->off) */
} class_rec;

typedef struct {
    int in_use;
    int serving; /* 1: a serving replica (here, in padding) */
    char id[TY_ID_MAX];
    int tenant;
    int priority;
    double submit_time;
    uint64_t seq;
    sched_request req;
    int lane;
    uint64_t mask;  /* satisfying classes; 0 for CPU jobs (a gang: whole
                       GPUs only) */
    int min_slices; /* slices of the smallest satisfying class */
    int members;    /* 1: an ordinary job; N: a gang of N */
    int spread;     /* gang: members may be on several nodes */
    int *gslots;    /* gang: its members' slots while it holds them
                       (members of them; allocated at submit) */
    int resv_node;  /* gang: the node its reservation holds, or -1 */
    sched_job_state state;
    int slot;
    double start_time;
    double head_since;
    int preempted_for;
    int lprev, lnext; /* lane links (QUEUED) */
    int tprev, tnext; /* tenant list links (QUEUED, PENDING) */
    int hnext;        /* id hash chain; free-list link when unused */
} job_rec;

typedef struct {
    int head, tail, count;
} lane_rec;

typedef struct {
    char id[TY_ID_MAX];
    double weight;
    int64_t max_slices, max_jobs;
    int slices, slices_share, jobs;
    int queued, queued_gpu; /* training */
    int queued_srv;         /* serving */
    int serving;            /* serving jobs PENDING or RUNNING */
    lane_rec *lanes;        /* training, by mask index */
    int nlanes;
    lane_rec *slanes; /* serving, by mask index; NULL until one is queued */
    int nslanes;
    int thead, ttail;
    int head_job;
    double share;  /* from the last pass (or report) */
    double recent; /* slices held, averaged over fair_window */
    /* scratch of a pass or a report */
    double key1, key2;
    uint64_t tie;
    int cursor;
    size_t tpos;
    int sim_slices, sim_jobs;
} tenant_rec;

struct sched {
    sched_config cfg;
    slot_rec *slots;
    int nslots;
    class_rec classes[SCHED_MAX_CLASSES];
    int nclasses;
    uint64_t avail;
    uint64_t off; /* classes of draining or retired slots: never free,
                     never a victim's, counted in no share */
    int total_slices;
    int max_class_slices;
    uint64_t *fit_upto; /* [r]: classes with compute slices <= r */

    uint64_t *masks;   /* lane masks; masks[0] = 0 (CPU) */
    int *lane_members; /* [l]: members of lane l's jobs (1: not gangs) */
    int *lane_spread;  /* [l]: 1 when lane l's gangs may spread */
    int nmasks, mask_cap;

    /* nodes: slots by node (node_slots[node_first[n]..node_first[n+1]]),
     * free slots per node and class (node_free[n * SCHED_MAX_CLASSES +
     * c], as classes' nfree), and the gang reservations of this pass:
     * node_holder[n], the gang whose reservation holds node n's free
     * slots of its classes (-1 none); ghold_free[c], free slots of class
     * c so held; gblock, classes whose free slots are all so held. */
    int nnodes;
    int nheld_nodes; /* nodes with node_holder >= 0 */
    int domains;     /* 1: some slot has a non-zero domain */
    int *node_id;    /* the caller's node of each dense index */
    int *node_first, *node_slots;
    int *node_free;
    int *node_holder;
    int ghold_free[SCHED_MAX_CLASSES];
    uint64_t gblock;
    uint64_t whole;    /* classes of whole GPUs (MIG off): gangs' slots */
    int gang_room;     /* this pass: most free whole GPUs on one node */
    int gang_total;    /* this pass: free whole GPUs in all */
    int *gpick, *gtry; /* n_slots each: a gang's chosen slots */
    /* this pass: one-node gangs of gfail_k or more members with classes
     * gfail_mask do not fit (0: nothing known) */
    uint64_t gfail_mask;
    int gfail_k;
    /* the last pass: the CPU gang the free CPU places are kept for, -1 */
    int cpu_holder;

    tenant_rec *tenants;
    int ntenants, tenant_cap;

    job_rec *jobs;
    int job_cap, free_head;
    size_t live;
    int *buckets;
    size_t nbuckets;
    uint64_t next_seq;
    size_t queued;   /* QUEUED + PENDING, both kinds */
    int queued_srv;  /* QUEUED serving jobs */
    int cpu_running; /* CPU training jobs */
    int serving;     /* serving jobs PENDING or RUNNING */
    double last_now; /* the last pass's time; NAN before the first */
    double now;      /* the current pass's time */

    /* pass results and scratch, sized as jobs and tenants are added */
    sched_placement *placements;
    size_t nplacements;
    sched_preemption *preemptions; /* n_slots: one victim per slot */
    size_t npreemptions;
    int *heap;
    int nheap;
    int *order;
    int *victims;
    uint64_t held;
    int class_holder[SCHED_MAX_CLASSES];
    /* step 1's victims: per class, the best RUNNING training job to stop
     * for a serving job (-1 none); victim_avail has bit c iff one */
    int class_victim[SCHED_MAX_CLASSES];
    uint64_t victim_avail;
};

/* ---- small helpers (inline: they sit in every pass's inner loops) ---- */

static inline int sched_ctz64(uint64_t m) { return __builtin_ctzll(m); }

static inline int sched_bad_job(const sched *s, int j)
{
    return j < 0 || j >= s->job_cap || !s->jobs[j].in_use;
}

/* a runs before b within a lane, or among one tenant's jobs of one kind */
static inline int sched_job_before(const job_rec *a, const job_rec *b)
{
    if (a->priority != b->priority)
        return a->priority > b->priority;
    if (a->submit_time != b->submit_time)
        return a->submit_time < b->submit_time;
    return a->seq < b->seq;
}

/* a comes before b in its tenant's list: serving jobs first, then as
 * sched_job_before (a lane holds one kind, so lanes need only that) */
static inline int sched_list_before(const job_rec *a, const job_rec *b)
{
    if (a->serving != b->serving)
        return a->serving;
    return sched_job_before(a, b);
}

/* Classes whose slices fit tenant t's remaining slice quota. */
static inline uint64_t sched_fit_mask(const sched *s, const tenant_rec *t)
{
    if (t->max_slices < 0)
        return s->fit_upto[s->max_class_slices];
    int64_t left = t->max_slices - t->slices;
    if (left <= 0)
        return 0;
    if (left >= s->max_class_slices)
        return s->fit_upto[s->max_class_slices];
    return s->fit_upto[left];
}

static inline int sched_jobs_quota_full(const tenant_rec *t)
{
    return t->max_jobs >= 0 && t->jobs >= t->max_jobs;
}

/* Whether tenant t may not place one more serving job now: the server's
 * or its own serving places are all held (cfg.max_serving,
 * cfg.max_serving_per_tenant). */
static inline int sched_serving_full(const sched *s, const tenant_rec *t)
{
    return (s->cfg.max_serving >= 0 && s->serving >= s->cfg.max_serving) ||
           (s->cfg.max_serving_per_tenant >= 0 &&
            t->serving >= s->cfg.max_serving_per_tenant);
}

/* Classes whose slices fit tenant t's remaining slice quota when a gang
 * of `members` takes one slot of that class per member. */
static inline uint64_t sched_fit_mask_n(const sched *s, const tenant_rec *t,
                                        int members)
{
    if (members <= 1 || t->max_slices < 0)
        return sched_fit_mask(s, t);
    int64_t left = (t->max_slices - t->slices) / members;
    if (left <= 0)
        return 0;
    if (left >= s->max_class_slices)
        return s->fit_upto[s->max_class_slices];
    return s->fit_upto[left];
}

/* Whether slot i's free capacity is held by a gang reservation other than
 * job j's (this pass). */
static inline int sched_slot_gheld(const sched *s, int i, int j)
{
    int g = s->node_holder[s->slots[i].node];
    return g >= 0 && g != j && (s->jobs[g].mask & (1ull << s->slots[i].cls));
}

/* The lowest free slot (neither held nor reserved) of class c that no
 * other job's gang reservation holds (j: the job to place; -1 ignores the
 * gang holds), or -1. */
static inline int sched_class_first_free_for(const sched *s, int c, int j)
{
    const class_rec *k = &s->classes[c];
    if (k->off)
        return -1;
    for (int i = 0; i < k->nslots; i++) {
        const slot_rec *sl = &s->slots[k->slots[i]];
        if (sl->holder < 0 && sl->reserved_for < 0 &&
            (j < 0 || !sched_slot_gheld(s, k->slots[i], j)))
            return k->slots[i];
    }
    return -1;
}

static inline int sched_class_first_free(const sched *s, int c)
{
    return sched_class_first_free_for(s, c, -1);
}

/* Compute slices job J holds (or is promised) now. */
static inline int sched_job_slices(const sched *s, const job_rec *J)
{
    if (J->slot < 0)
        return 0;
    if (J->members <= 1 || !J->gslots)
        return s->slots[J->slot].compute_slices;
    int cs = 0;
    for (int m = 0; m < J->members; m++)
        cs += s->slots[J->gslots[m]].compute_slices;
    return cs;
}

/* The tenant's best QUEUED training job (GPU jobs only when gpu_only), or
 * -1. */
static inline int sched_tenant_best(const sched *s, const tenant_rec *t,
                                    int gpu_only)
{
    int best = -1;
    for (int l = gpu_only ? 1 : 0; l < t->nlanes; l++) {
        int h = t->lanes[l].head;
        if (gpu_only && !s->masks[l])
            continue;
        if (h >= 0 &&
            (best < 0 || sched_job_before(&s->jobs[h], &s->jobs[best])))
            best = h;
    }
    return best;
}

/* Whether tenant n has GPU jobs queued, room for one more slice within its
 * share, and room under its job quota: the tenants preemption works for,
 * and the ones whose wait makes the report say "fair share" (one test, so
 * the two always agree). */
static inline int sched_may_claim_share(const tenant_rec *n)
{
    if (n->queued_gpu == 0 || n->slices_share + 1 > n->share + SCHED_EPS)
        return 0;
    return !sched_jobs_quota_full(n);
}

/* ---- sched_books.c ---- */

void sched_class_count(sched *s, int c, int delta);
/* Job j (QUEUED) leaves its lane and the queued counters; it stays in its
 * tenant's list (sched_dequeue takes it out of both). */
void sched_lane_leave(sched *s, int j);
void sched_enqueue(sched *s, int j);
/* Clears reservations (backfill holds) naming job j. */
void sched_drop_holds(sched *s, int j);
/* Fills each tenant's share of slices: weighted among tenants with GPU work
 * (queued GPU jobs, or slices held for running or pending jobs). */
void sched_compute_shares(sched *s);
/* Takes job j (QUEUED or PENDING) out of the queue. */
void sched_dequeue(sched *s, int j);
/* Job j leaves the slot or CPU it holds (RUNNING, STOPPING) or waits for
 * (PENDING); the tenant's counters follow. */
void sched_release(sched *s, int j);
/* Job j (QUEUED or PENDING) runs on slot (-1: CPU) from `now` on. */
void sched_run_on(sched *s, int j, int slot, double now);
/* Gang j (QUEUED) runs on slots[0..members) (NULL: a CPU gang). */
void sched_run_gang(sched *s, int j, const int *slots, double now);
/* Whether gang g holds node n (this pass's reservation), and the
 * counters that follow: ghold_free and gblock. */
void sched_node_hold(sched *s, int n, int g);
/* Clears every node hold (start of a pass). */
void sched_node_holds_clear(sched *s);

/* ---- sched_gang.c ---- */

/* Free whole-GPU slots of classes `usable` on node n that gang j may use
 * (none when another gang's reservation holds the node). */
int sched_gang_node_free(const sched *s, int n, uint64_t usable, int j);
/* Chooses slots for gang j (QUEUED, GPU) among free slots of classes
 * `usable`: on one node (best fit: the fewest free that suffice,
 * preferring a node where one interconnect domain holds them all), or,
 * spreading, on as few nodes as it can. Writes them to out
 * (members of them); 1 when found, 0 when it does not fit now. */
int sched_gang_find(const sched *s, int j, uint64_t usable, int *out);
/* The node gang j would reserve: its reservation's node if still free of
 * other holds and big enough, else the one with the most free slots among
 * those with at least members slots of classes `usable` that serving
 * replicas do not hold (they may never leave); -1 none. */
int sched_gang_pick_node(const sched *s, int j, uint64_t usable);
/* The node closest to taking gang j (its reservation's node, else the one
 * with the most free slots of its classes among those big enough), -1
 * none; *nfree its free slots. For the report. */
int sched_gang_nearest(const sched *s, int j, int *nfree);
/* Most satisfying whole GPUs (classes `mask`) on one node, or (spread) in
 * all: how large a gang could ever be. */
int sched_gang_capacity(const sched *s, uint64_t mask, int spread);
/* Sets gang_room and gang_total from the books (start of a pass). */
void sched_gang_room(sched *s);

/* ---- sched_core.c ---- */

void sched_request_text(const sched_request *r, char *buf, size_t n);

/* For sched_layout.c: sched_create with each slot's state (NULL: all in
 * use); the classes a request may use (retired ones never); the lane of a
 * mask, gang size and spread (added if new; -1 out of memory); a tenant's
 * lanes grown to hold `lane`; the job table doubled; job j into the id
 * hash. */
sched *sched_create_states(const sched_config *cfg, const sched_slot *slots,
                           const uint8_t *states, size_t n_slots, ty_err *err);
uint64_t sched_request_mask(const sched *s, const sched_request *r);
int sched_lane_for(sched *s, uint64_t mask, int members, int spread,
                   ty_err *err);
ty_status sched_grow_lanes(const sched *s, lane_rec **lanes, int *n, int lane,
                           ty_err *err);
ty_status sched_grow_jobs(sched *s, ty_err *err);
void sched_hash_insert(sched *s, int j);

/* ---- sched_passes.c: the tenant heap, shared with the report ---- */

/* Heap of tenants by (key1, key2, tie), smallest first. */
int sched_tenant_less(const sched *s, int a, int b);
void sched_heap_push(sched *s, int t);
int sched_heap_pop(sched *s);
/* Sets tenant t's fair-share keys as if it held `slices` and `jobs` with
 * `head` as its next job (see sched_passes.c). */
void sched_tenant_key(sched *s, int t, int slices, int jobs, int head);
/* Sets tenant t's keys to serving job j's place in step 1's order
 * (priority desc, submit time, submission order). */
void sched_serving_key(sched *s, int t, int j);

#endif
