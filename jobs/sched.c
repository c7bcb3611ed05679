/*
 * sched.c - the scheduling policy of sched.h.
 *
 * Books the scheduler keeps, and the invariants sched_check verifies:
 *   - slots: holder (a RUNNING or STOPPING job, or -1) and reserved_for (the
 *     PENDING job a preemption gave the slot to, or -1). A slot is free for
 *     anyone exactly when both are -1; classes count such slots (nfree) and
 *     the bitmask `avail` has bit c set iff class c has one.
 *   - classes: slots with the same (compute slices, memory, MIG, profile),
 *     numbered in best-fit order, so a request's satisfying classes are a
 *     bitmask and best-fit is the lowest set bit of (mask & avail & ...).
 *   - lanes: a tenant's QUEUED jobs with the same class mask (the same
 *     request, in effect), a doubly linked list sorted by (priority desc,
 *     submit time, submission order); lane 0 holds CPU jobs (mask 0). Every
 *     QUEUED or PENDING job is also in its tenant's list, in the same order,
 *     which the report walks.
 *   - tenant counters: slices (held by its RUNNING, STOPPING and PENDING
 *     jobs: quota), slices_share (RUNNING and PENDING: fair share), jobs
 *     (RUNNING, STOPPING, PENDING: quota), queued and queued_gpu (QUEUED).
 * Jobs live in a pool addressed by handle (index), with a free list and a
 * hash from id to handle; links are handles, so the pool may move.
 */
#include "jobs/sched.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EPS 1e-9

typedef struct {
    char profile[SCHED_PROFILE_MAX];
    int gpu;
    int is_mig;
    int compute_slices;
    uint64_t memory_bytes;
    int cls;
    int holder;               /* RUNNING/STOPPING job, or -1 */
    int reserved_for;         /* PENDING job, or -1 */
} slot_rec;

typedef struct {
    char profile[SCHED_PROFILE_MAX];
    int is_mig;
    int compute_slices;
    uint64_t memory_bytes;
    int *slots;               /* slot indices, ascending */
    int nslots;
    int nfree;                /* free and unreserved */
    int first_slot;
} class_rec;

typedef struct {
    int in_use;
    char id[TY_ID_MAX];
    int tenant;
    int priority;
    double submit_time;
    uint64_t seq;
    sched_request req;
    int lane;
    uint64_t mask;            /* satisfying classes; 0 for CPU jobs */
    int min_slices;           /* slices of the smallest satisfying class */
    sched_job_state state;
    int slot;
    double start_time;
    double head_since;
    int preempted_for;
    int lprev, lnext;         /* lane links (QUEUED) */
    int tprev, tnext;         /* tenant list links (QUEUED, PENDING) */
    int hnext;                /* id hash chain; free-list link when unused */
} job_rec;

typedef struct {
    int head, tail, count;
} lane_rec;

typedef struct {
    char id[TY_ID_MAX];
    double weight;
    int64_t max_slices, max_jobs;
    int slices, slices_share, jobs;
    int queued, queued_gpu;
    lane_rec *lanes;
    int nlanes;
    int thead, ttail;
    int head_job;
    double share;             /* from the last pass (or report) */
    double recent;            /* slices held, averaged over fair_window */
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
    int total_slices;
    int max_class_slices;
    uint64_t *fit_upto;       /* [r]: classes with compute slices <= r */

    uint64_t *masks;          /* lane masks; masks[0] = 0 (CPU) */
    int nmasks, mask_cap;

    tenant_rec *tenants;
    int ntenants, tenant_cap;

    job_rec *jobs;
    int job_cap, free_head;
    size_t live;
    int *buckets;
    size_t nbuckets;
    uint64_t next_seq;
    size_t queued;            /* QUEUED + PENDING */
    int cpu_running;
    double last_now;          /* the last pass's time; NAN before the first */
    double now;               /* the current pass's time */

    /* pass results and scratch, sized as jobs and tenants are added */
    sched_placement *placements;
    size_t nplacements;
    sched_preemption *preemptions;
    size_t npreemptions;
    int *heap;
    int nheap;
    int *order;
    int *victims;
    uint64_t held;
    int class_holder[SCHED_MAX_CLASSES];
};

/* ---- small helpers ---- */

static int ctz64(uint64_t m) { return __builtin_ctzll(m); }

static int bad_job(const sched *s, int j)
{
    return j < 0 || j >= s->job_cap || !s->jobs[j].in_use;
}

/* a runs before b within a tenant */
static int job_before(const job_rec *a, const job_rec *b)
{
    if (a->priority != b->priority) return a->priority > b->priority;
    if (a->submit_time != b->submit_time) return a->submit_time < b->submit_time;
    return a->seq < b->seq;
}

static uint64_t fnv1a(const char *str)
{
    uint64_t h = 1469598103934665603ull;
    for (; *str; str++) h = (h ^ (unsigned char)*str) * 1099511628211ull;
    return h;
}

static double gib(uint64_t b) { return (double)b / (double)(1ull << 30); }

/* Classes whose slices fit tenant t's remaining slice quota. */
static uint64_t fit_mask(const sched *s, const tenant_rec *t)
{
    if (t->max_slices < 0) return s->fit_upto[s->max_class_slices];
    int64_t left = t->max_slices - t->slices;
    if (left <= 0) return 0;
    if (left >= s->max_class_slices) return s->fit_upto[s->max_class_slices];
    return s->fit_upto[left];
}

static int jobs_quota_full(const tenant_rec *t)
{
    return t->max_jobs >= 0 && t->jobs >= t->max_jobs;
}

static uint64_t request_mask(const sched *s, const sched_request *r)
{
    uint64_t m = 0;
    for (int c = 0; c < s->nclasses; c++) {
        const class_rec *k = &s->classes[c];
        int ok = 0;
        switch (r->kind) {
        case SCHED_REQ_NONE: ok = 0; break;
        case SCHED_REQ_ANY: ok = 1; break;
        case SCHED_REQ_PROFILE:
            ok = k->is_mig && strcmp(k->profile, r->profile) == 0;
            break;
        case SCHED_REQ_MIN:
            ok = k->compute_slices >= r->min_compute_slices &&
                 k->memory_bytes >= r->min_memory_bytes;
            break;
        }
        if (ok) m |= 1ull << c;
    }
    return m;
}

/* ---- slots ---- */

static void class_count(sched *s, int c, int delta)
{
    s->classes[c].nfree += delta;
    if (s->classes[c].nfree > 0) s->avail |= 1ull << c;
    else s->avail &= ~(1ull << c);
}

static int class_first_free(const sched *s, int c)
{
    const class_rec *k = &s->classes[c];
    for (int i = 0; i < k->nslots; i++) {
        const slot_rec *sl = &s->slots[k->slots[i]];
        if (sl->holder < 0 && sl->reserved_for < 0) return k->slots[i];
    }
    return -1;
}

static void slot_take(sched *s, int i, int job)
{
    slot_rec *sl = &s->slots[i];
    if (sl->reserved_for == job) sl->reserved_for = -1;
    else if (sl->reserved_for < 0) class_count(s, sl->cls, -1);
    sl->holder = job;
}

static void slot_release(sched *s, int i)
{
    slot_rec *sl = &s->slots[i];
    sl->holder = -1;
    if (sl->reserved_for < 0) class_count(s, sl->cls, +1);
}

static void slot_unreserve(sched *s, int i)
{
    slot_rec *sl = &s->slots[i];
    sl->reserved_for = -1;
    if (sl->holder < 0) class_count(s, sl->cls, +1);
}

/* ---- lanes and tenant lists ---- */

static void lane_insert(sched *s, tenant_rec *t, int j)
{
    job_rec *J = s->jobs;
    lane_rec *l = &t->lanes[J[j].lane];
    int after = l->tail;
    if (l->head >= 0 && job_before(&J[j], &J[l->head])) after = -1;
    else
        while (after >= 0 && job_before(&J[j], &J[after])) after = J[after].lprev;
    int next = after >= 0 ? J[after].lnext : l->head;
    J[j].lprev = after;
    J[j].lnext = next;
    if (after >= 0) J[after].lnext = j; else l->head = j;
    if (next >= 0) J[next].lprev = j; else l->tail = j;
    l->count++;
}

static void lane_unlink(sched *s, tenant_rec *t, int j)
{
    job_rec *J = s->jobs;
    lane_rec *l = &t->lanes[J[j].lane];
    if (J[j].lprev >= 0) J[J[j].lprev].lnext = J[j].lnext; else l->head = J[j].lnext;
    if (J[j].lnext >= 0) J[J[j].lnext].lprev = J[j].lprev; else l->tail = J[j].lprev;
    J[j].lprev = J[j].lnext = -1;
    l->count--;
}

static void tlist_insert(sched *s, tenant_rec *t, int j)
{
    job_rec *J = s->jobs;
    int after = t->ttail;
    if (t->thead >= 0 && job_before(&J[j], &J[t->thead])) after = -1;
    else
        while (after >= 0 && job_before(&J[j], &J[after])) after = J[after].tprev;
    int next = after >= 0 ? J[after].tnext : t->thead;
    J[j].tprev = after;
    J[j].tnext = next;
    if (after >= 0) J[after].tnext = j; else t->thead = j;
    if (next >= 0) J[next].tprev = j; else t->ttail = j;
}

static void tlist_unlink(sched *s, tenant_rec *t, int j)
{
    job_rec *J = s->jobs;
    if (J[j].tprev >= 0) J[J[j].tprev].tnext = J[j].tnext; else t->thead = J[j].tnext;
    if (J[j].tnext >= 0) J[J[j].tnext].tprev = J[j].tprev; else t->ttail = J[j].tprev;
    J[j].tprev = J[j].tnext = -1;
}

/* The tenant's best QUEUED job (GPU jobs only when gpu_only), or -1. */
static int tenant_best(const sched *s, const tenant_rec *t, int gpu_only)
{
    int best = -1;
    for (int l = gpu_only ? 1 : 0; l < t->nlanes; l++) {
        int h = t->lanes[l].head;
        if (h >= 0 && (best < 0 || job_before(&s->jobs[h], &s->jobs[best])))
            best = h;
    }
    return best;
}

static void enqueue(sched *s, int j)
{
    job_rec *J = &s->jobs[j];
    tenant_rec *t = &s->tenants[J->tenant];
    J->state = SCHED_JOB_QUEUED;
    J->slot = -1;
    J->head_since = -1;
    J->preempted_for = -1;
    lane_insert(s, t, j);
    tlist_insert(s, t, j);
    t->queued++;
    if (J->mask) t->queued_gpu++;
    s->queued++;
}

/* Clears reservations (backfill holds) naming job j. */
static void drop_holds(sched *s, int j)
{
    if (!s->held) return;
    for (int c = 0; c < s->nclasses; c++)
        if (s->class_holder[c] == j) {
            s->class_holder[c] = -1;
            s->held &= ~(1ull << c);
        }
}

/* ---- creation ---- */

static ty_status grow_jobs(sched *s, ty_err *err)
{
    int cap = s->job_cap ? s->job_cap * 2 : 64;
    job_rec *nj = realloc(s->jobs, (size_t)cap * sizeof *nj);
    if (!nj) goto oom;
    s->jobs = nj;
    sched_placement *np = realloc(s->placements, (size_t)cap * sizeof *np);
    if (!np) goto oom;
    s->placements = np;
    for (int i = cap - 1; i >= s->job_cap; i--) {
        memset(&nj[i], 0, sizeof nj[i]);
        nj[i].hnext = s->free_head;
        s->free_head = i;
    }
    s->job_cap = cap;
    /* the id hash: one bucket per job slot */
    int *nb = calloc((size_t)cap, sizeof *nb);
    if (!nb) goto oom;
    for (int i = 0; i < cap; i++) nb[i] = -1;
    for (int i = 0; i < cap; i++)
        if (nj[i].in_use) {
            size_t b = fnv1a(nj[i].id) & ((size_t)cap - 1);
            nj[i].hnext = nb[b];
            nb[b] = i;
        }
    free(s->buckets);
    s->buckets = nb;
    s->nbuckets = (size_t)cap;
    return TY_OK;
oom:
    return ty_fail(err, TY_ENOMEM, NULL, "out of memory growing the job table");
}

static ty_status grow_tenants(sched *s, ty_err *err)
{
    int cap = s->tenant_cap ? s->tenant_cap * 2 : 16;
    tenant_rec *nt = realloc(s->tenants, (size_t)cap * sizeof *nt);
    if (!nt) goto oom;
    s->tenants = nt;
    int *nh = realloc(s->heap, (size_t)cap * sizeof *nh);
    if (!nh) goto oom;
    s->heap = nh;
    int *no = realloc(s->order, (size_t)cap * sizeof *no);
    if (!no) goto oom;
    s->order = no;
    sched_preemption *np = realloc(s->preemptions, (size_t)cap * sizeof *np);
    if (!np) goto oom;
    s->preemptions = np;
    s->tenant_cap = cap;
    return TY_OK;
oom:
    return ty_fail(err, TY_ENOMEM, NULL, "out of memory growing the tenant table");
}

static int class_cmp(const class_rec *a, const class_rec *b)
{
    if (a->compute_slices != b->compute_slices)
        return a->compute_slices < b->compute_slices ? -1 : 1;
    if (a->memory_bytes != b->memory_bytes)
        return a->memory_bytes < b->memory_bytes ? -1 : 1;
    return a->first_slot < b->first_slot ? -1 : a->first_slot > b->first_slot;
}

sched *sched_create(const sched_config *cfg, const sched_slot *slots,
                    size_t n_slots, ty_err *err)
{
    if (!cfg || !(cfg->backfill_wait >= 0) || !(cfg->preempt_wait >= 0) ||
        !(cfg->fair_window >= 0)) {
        ty_fail(err, TY_EINVAL, "backfill_wait",
                "backfill_wait, preempt_wait and fair_window must be numbers >= 0");
        return NULL;
    }
    if (n_slots > (size_t)INT_MAX / 2) {
        ty_fail(err, TY_EINVAL, "slots", "too many slots (%zu)", n_slots);
        return NULL;
    }
    sched *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->cfg = *cfg;
    s->free_head = -1;
    s->last_now = NAN;
    s->nslots = (int)n_slots;
    s->slots = calloc(n_slots ? n_slots : 1, sizeof *s->slots);
    s->victims = calloc(n_slots ? n_slots : 1, sizeof *s->victims);
    if (!s->slots || !s->victims) goto oom;
    for (int c = 0; c < SCHED_MAX_CLASSES; c++) s->class_holder[c] = -1;

    /* slots into classes, classes in first-seen order for now */
    for (int i = 0; i < s->nslots; i++) {
        const sched_slot *in = &slots[i];
        slot_rec *sl = &s->slots[i];
        const char *prof = in->profile ? in->profile : "";
        if (in->compute_slices < 1 || in->compute_slices > 64) {
            ty_fail(err, TY_EINVAL, "slots.compute_slices",
                    "slot %d: compute_slices must be 1..64, not %d", i,
                    in->compute_slices);
            goto fail;
        }
        if (strlen(prof) >= SCHED_PROFILE_MAX) {
            ty_fail(err, TY_EINVAL, "slots.profile",
                    "slot %d: profile name longer than %d bytes", i,
                    SCHED_PROFILE_MAX - 1);
            goto fail;
        }
        snprintf(sl->profile, sizeof sl->profile, "%s", prof);
        sl->gpu = in->gpu;
        sl->is_mig = in->is_mig ? 1 : 0;
        sl->compute_slices = in->compute_slices;
        sl->memory_bytes = in->memory_bytes;
        sl->holder = sl->reserved_for = -1;
        s->total_slices += sl->compute_slices;
        if (sl->compute_slices > s->max_class_slices)
            s->max_class_slices = sl->compute_slices;
        int c;
        for (c = 0; c < s->nclasses; c++) {
            const class_rec *k = &s->classes[c];
            if (k->compute_slices == sl->compute_slices &&
                k->memory_bytes == sl->memory_bytes &&
                k->is_mig == sl->is_mig && strcmp(k->profile, sl->profile) == 0)
                break;
        }
        if (c == s->nclasses) {
            if (s->nclasses == SCHED_MAX_CLASSES) {
                ty_fail(err, TY_EINVAL, "slots",
                        "more than %d distinct kinds of slot", SCHED_MAX_CLASSES);
                goto fail;
            }
            class_rec *k = &s->classes[s->nclasses++];
            snprintf(k->profile, sizeof k->profile, "%s", sl->profile);
            k->is_mig = sl->is_mig;
            k->compute_slices = sl->compute_slices;
            k->memory_bytes = sl->memory_bytes;
            k->first_slot = i;
        }
        s->classes[c].nslots++;
    }
    /* best-fit order (insertion sort: a handful of classes) */
    for (int a = 1; a < s->nclasses; a++) {
        class_rec k = s->classes[a];
        int b = a - 1;
        while (b >= 0 && class_cmp(&k, &s->classes[b]) < 0) {
            s->classes[b + 1] = s->classes[b];
            b--;
        }
        s->classes[b + 1] = k;
    }
    for (int c = 0; c < s->nclasses; c++) {
        class_rec *k = &s->classes[c];
        k->slots = malloc((size_t)k->nslots * sizeof *k->slots);
        if (!k->slots) goto oom;
        k->nslots = 0;
    }
    for (int i = 0; i < s->nslots; i++) {
        slot_rec *sl = &s->slots[i];
        for (int c = 0; c < s->nclasses; c++) {
            class_rec *k = &s->classes[c];
            if (k->compute_slices == sl->compute_slices &&
                k->memory_bytes == sl->memory_bytes &&
                k->is_mig == sl->is_mig && strcmp(k->profile, sl->profile) == 0) {
                sl->cls = c;
                k->slots[k->nslots++] = i;
                break;
            }
        }
    }
    for (int c = 0; c < s->nclasses; c++) class_count(s, c, s->classes[c].nslots);
    s->fit_upto = calloc((size_t)s->max_class_slices + 1, sizeof *s->fit_upto);
    if (!s->fit_upto) goto oom;
    for (int r = 0; r <= s->max_class_slices; r++)
        for (int c = 0; c < s->nclasses; c++)
            if (s->classes[c].compute_slices <= r) s->fit_upto[r] |= 1ull << c;

    s->mask_cap = 8;
    s->masks = calloc((size_t)s->mask_cap, sizeof *s->masks);
    if (!s->masks) goto oom;
    s->nmasks = 1; /* lane 0: CPU jobs */
    if (grow_jobs(s, err) != TY_OK || grow_tenants(s, err) != TY_OK) goto fail;
    return s;
oom:
    ty_fail(err, TY_ENOMEM, NULL, "out of memory creating the scheduler");
fail:
    sched_destroy(s);
    return NULL;
}

void sched_destroy(sched *s)
{
    if (!s) return;
    for (int c = 0; c < s->nclasses; c++) free(s->classes[c].slots);
    for (int t = 0; t < s->ntenants; t++) free(s->tenants[t].lanes);
    free(s->slots);
    free(s->victims);
    free(s->fit_upto);
    free(s->masks);
    free(s->tenants);
    free(s->jobs);
    free(s->buckets);
    free(s->placements);
    free(s->preemptions);
    free(s->heap);
    free(s->order);
    free(s);
}

/* ---- tenants ---- */

int sched_tenant_find(const sched *s, const char *id)
{
    if (!id) return -1;
    for (int t = 0; t < s->ntenants; t++)
        if (strcmp(s->tenants[t].id, id) == 0) return t;
    return -1;
}

ty_status sched_tenant_set(sched *s, const char *id, double weight,
                           int64_t max_gpu_slices, int64_t max_running_jobs,
                           int *handle, ty_err *err)
{
    if (!id || !*id || strlen(id) >= TY_ID_MAX)
        return ty_fail(err, TY_EINVAL, "id", "a tenant id of 1 to %d bytes is needed",
                       TY_ID_MAX - 1);
    if (!(weight > 0) || !isfinite(weight))
        return ty_fail(err, TY_EINVAL, "weight",
                       "weight must be a finite number > 0, not %g", weight);
    int t = sched_tenant_find(s, id);
    if (t < 0) {
        if (s->ntenants == s->tenant_cap && grow_tenants(s, err) != TY_OK)
            return TY_ENOMEM;
        t = s->ntenants++;
        tenant_rec *n = &s->tenants[t];
        memset(n, 0, sizeof *n);
        snprintf(n->id, sizeof n->id, "%s", id);
        n->thead = n->ttail = n->head_job = -1;
    }
    tenant_rec *n = &s->tenants[t];
    n->weight = weight;
    n->max_slices = max_gpu_slices < 0 ? SCHED_UNLIMITED : max_gpu_slices;
    n->max_jobs = max_running_jobs < 0 ? SCHED_UNLIMITED : max_running_jobs;
    if (handle) *handle = t;
    return TY_OK;
}

/* Fills each tenant's share of slices: weighted among tenants with GPU work
 * (queued GPU jobs, or slices held for running or pending jobs). */
static void compute_shares(sched *s)
{
    double w = 0;
    for (int t = 0; t < s->ntenants; t++) {
        const tenant_rec *n = &s->tenants[t];
        if (n->queued_gpu > 0 || n->slices_share > 0) w += n->weight;
    }
    for (int t = 0; t < s->ntenants; t++) {
        tenant_rec *n = &s->tenants[t];
        n->share = (w > 0 && (n->queued_gpu > 0 || n->slices_share > 0))
                       ? s->total_slices * n->weight / w : 0;
    }
}

void sched_tenant_usage(const sched *s, int t, int *slices, int *jobs,
                        double *share)
{
    if (t < 0 || t >= s->ntenants) {
        if (slices) *slices = 0;
        if (jobs) *jobs = 0;
        if (share) *share = 0;
        return;
    }
    const tenant_rec *n = &s->tenants[t];
    if (slices) *slices = n->slices;
    if (jobs) *jobs = n->jobs;
    if (share) *share = n->share;
}

/* ---- requests ---- */

static void request_text(const sched_request *r, char *buf, size_t n)
{
    switch (r->kind) {
    case SCHED_REQ_NONE: snprintf(buf, n, "the CPU"); break;
    case SCHED_REQ_ANY: snprintf(buf, n, "any GPU slot"); break;
    case SCHED_REQ_PROFILE: snprintf(buf, n, "a %s MIG slice", r->profile); break;
    case SCHED_REQ_MIN:
        snprintf(buf, n, "at least %d compute slices and %.1f GiB",
                 r->min_compute_slices, gib(r->min_memory_bytes));
        break;
    }
}

static void inventory_text(const sched *s, char *buf, size_t n)
{
    if (s->nslots == 0) {
        snprintf(buf, n, "this host has no GPU");
        return;
    }
    size_t off = (size_t)snprintf(buf, n, "this host has");
    for (int c = 0; c < s->nclasses && off < n; c++) {
        const class_rec *k = &s->classes[c];
        off += (size_t)snprintf(buf + off, n - off, "%s %d x %s (%d compute slices, %.1f GiB)",
                                c ? "," : "", k->nslots,
                                k->is_mig ? k->profile : "whole GPU",
                                k->compute_slices, gib(k->memory_bytes));
    }
}

ty_status sched_request_check(const sched *s, int tenant,
                              const sched_request *req, ty_err *err)
{
    const char *field = "resources.gpu";
    switch (req->kind) {
    case SCHED_REQ_NONE:
        return TY_OK;
    case SCHED_REQ_ANY:
        break;
    case SCHED_REQ_PROFILE:
        if (!req->profile[0])
            return ty_fail(err, TY_EINVAL, field, "a MIG profile name is needed");
        break;
    case SCHED_REQ_MIN:
        if (req->min_compute_slices < 0)
            return ty_fail(err, TY_EINVAL, "resources.gpu.min_compute_slices",
                           "min_compute_slices must be >= 0");
        break;
    default:
        return ty_fail(err, TY_EINVAL, field, "unknown kind of GPU request");
    }
    uint64_t m = request_mask(s, req);
    char want[96], have[400];
    request_text(req, want, sizeof want);
    if (!m) {
        inventory_text(s, have, sizeof have);
        return ty_fail(err, TY_EINVAL, field,
                       "no device of this host can satisfy %s: %s", want, have);
    }
    if (tenant >= 0 && tenant < s->ntenants) {
        const tenant_rec *t = &s->tenants[tenant];
        int need = s->classes[ctz64(m)].compute_slices;
        if (t->max_slices >= 0 && need > t->max_slices)
            return ty_fail(err, TY_EINVAL, field,
                           "%s takes at least %d compute slices here, above "
                           "the tenant's max_gpu_slices quota of %lld",
                           want, need, (long long)t->max_slices);
    }
    return TY_OK;
}

/* ---- jobs ---- */

int sched_job_find(const sched *s, const char *id)
{
    if (!id) return -1;
    size_t b = fnv1a(id) & (s->nbuckets - 1);
    for (int j = s->buckets[b]; j >= 0; j = s->jobs[j].hnext)
        if (strcmp(s->jobs[j].id, id) == 0) return j;
    return -1;
}

static int lane_for(sched *s, uint64_t mask, ty_err *err)
{
    for (int l = 0; l < s->nmasks; l++)
        if (s->masks[l] == mask) return l;
    if (s->nmasks == s->mask_cap) {
        uint64_t *nm = realloc(s->masks, (size_t)s->mask_cap * 2 * sizeof *nm);
        if (!nm) {
            ty_fail(err, TY_ENOMEM, NULL, "out of memory");
            return -1;
        }
        s->masks = nm;
        s->mask_cap *= 2;
    }
    s->masks[s->nmasks] = mask;
    return s->nmasks++;
}

ty_status sched_job_submit(sched *s, const sched_job_desc *d, int *handle,
                           ty_err *err)
{
    if (!d->id || !*d->id || strlen(d->id) >= TY_ID_MAX)
        return ty_fail(err, TY_EINVAL, "id", "a job id of 1 to %d bytes is needed",
                       TY_ID_MAX - 1);
    if (d->tenant < 0 || d->tenant >= s->ntenants)
        return ty_fail(err, TY_EINVAL, "tenant", "unknown tenant %d", d->tenant);
    if (!isfinite(d->submit_time))
        return ty_fail(err, TY_EINVAL, "submit_time", "submit_time must be finite");
    if (sched_job_find(s, d->id) >= 0)
        return ty_fail(err, TY_EINVAL, "id", "job %s is already queued", d->id);
    ty_status st = sched_request_check(s, d->tenant, &d->request, err);
    if (st != TY_OK) return st;
    uint64_t mask = request_mask(s, &d->request);
    int lane = lane_for(s, mask, err);
    if (lane < 0) return TY_ENOMEM;
    tenant_rec *t = &s->tenants[d->tenant];
    if (t->nlanes <= lane) {
        lane_rec *nl = realloc(t->lanes, (size_t)s->mask_cap * sizeof *nl);
        if (!nl) return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        for (int l = t->nlanes; l < s->mask_cap; l++)
            nl[l] = (lane_rec){-1, -1, 0};
        t->lanes = nl;
        t->nlanes = s->mask_cap;
    }
    if (s->free_head < 0 && grow_jobs(s, err) != TY_OK) return TY_ENOMEM;

    int j = s->free_head;
    job_rec *J = &s->jobs[j];
    s->free_head = J->hnext;
    memset(J, 0, sizeof *J);
    J->in_use = 1;
    snprintf(J->id, sizeof J->id, "%s", d->id);
    J->tenant = d->tenant;
    J->priority = d->priority;
    J->submit_time = d->submit_time;
    J->seq = s->next_seq++;
    J->req = d->request;
    J->req.profile[SCHED_PROFILE_MAX - 1] = 0;
    J->lane = lane;
    J->mask = mask;
    J->min_slices = mask ? s->classes[ctz64(mask)].compute_slices : 0;
    J->lprev = J->lnext = J->tprev = J->tnext = -1;
    size_t b = fnv1a(J->id) & (s->nbuckets - 1);
    J->hnext = s->buckets[b];
    s->buckets[b] = j;
    s->live++;
    enqueue(s, j);
    if (handle) *handle = j;
    return TY_OK;
}

/* Takes job j (QUEUED or PENDING) out of the queue. */
static void dequeue(sched *s, int j)
{
    job_rec *J = &s->jobs[j];
    tenant_rec *t = &s->tenants[J->tenant];
    if (J->state == SCHED_JOB_QUEUED) {
        lane_unlink(s, t, j);
        t->queued--;
        if (J->mask) t->queued_gpu--;
        if (t->head_job == j) t->head_job = -1;
    }
    tlist_unlink(s, t, j);
    s->queued--;
    drop_holds(s, j);
}

/* Job j leaves the slot or CPU it holds (RUNNING, STOPPING) or waits for
 * (PENDING); the tenant's counters follow. */
static void release(sched *s, int j)
{
    job_rec *J = &s->jobs[j];
    tenant_rec *t = &s->tenants[J->tenant];
    int cs = J->slot >= 0 ? s->slots[J->slot].compute_slices : 0;
    switch (J->state) {
    case SCHED_JOB_PENDING:
        slot_unreserve(s, J->slot);
        t->slices -= cs;
        t->slices_share -= cs;
        t->jobs--;
        break;
    case SCHED_JOB_RUNNING:
    case SCHED_JOB_STOPPING:
        if (J->slot >= 0) slot_release(s, J->slot);
        else s->cpu_running--;
        t->slices -= cs;
        if (J->state == SCHED_JOB_RUNNING) t->slices_share -= cs;
        t->jobs--;
        break;
    case SCHED_JOB_QUEUED:
        break;
    }
    J->slot = -1;
}

ty_status sched_job_remove(sched *s, int j)
{
    if (bad_job(s, j)) return TY_ENOTFOUND;
    job_rec *J = &s->jobs[j];
    if (J->state == SCHED_JOB_QUEUED || J->state == SCHED_JOB_PENDING) dequeue(s, j);
    if (J->state == SCHED_JOB_PENDING) {
        /* the victim keeps stopping; it no longer makes room for anyone */
        int v = s->slots[J->slot].holder;
        if (v >= 0 && s->jobs[v].preempted_for == j) s->jobs[v].preempted_for = -1;
    }
    release(s, j);
    /* out of the id hash */
    size_t b = fnv1a(J->id) & (s->nbuckets - 1);
    int *p = &s->buckets[b];
    while (*p != j) p = &s->jobs[*p].hnext;
    *p = J->hnext;
    J->in_use = 0;
    J->hnext = s->free_head;
    s->free_head = j;
    s->live--;
    return TY_OK;
}

ty_status sched_job_requeue(sched *s, int j, ty_err *err)
{
    if (bad_job(s, j)) return ty_fail(err, TY_ENOTFOUND, NULL, "no such job");
    job_rec *J = &s->jobs[j];
    if (J->state != SCHED_JOB_RUNNING && J->state != SCHED_JOB_STOPPING)
        return ty_fail(err, TY_ECONFLICT, NULL, "job %s is not running", J->id);
    release(s, j);
    enqueue(s, j);
    return TY_OK;
}

static void run_on(sched *s, int j, int slot, double now)
{
    job_rec *J = &s->jobs[j];
    tenant_rec *t = &s->tenants[J->tenant];
    dequeue(s, j);
    int cs = slot >= 0 ? s->slots[slot].compute_slices : 0;
    if (J->state == SCHED_JOB_QUEUED) { /* PENDING counted these already */
        t->slices += cs;
        t->slices_share += cs;
        t->jobs++;
    }
    if (slot >= 0) slot_take(s, slot, j);
    else s->cpu_running++;
    J->state = SCHED_JOB_RUNNING;
    J->slot = slot;
    J->start_time = now;
    J->head_since = -1;
    J->preempted_for = -1;
}

ty_status sched_job_restore_running(sched *s, int j, int slot,
                                    double start_time, ty_err *err)
{
    if (bad_job(s, j)) return ty_fail(err, TY_ENOTFOUND, NULL, "no such job");
    job_rec *J = &s->jobs[j];
    if (J->state != SCHED_JOB_QUEUED)
        return ty_fail(err, TY_ECONFLICT, NULL, "job %s is not queued", J->id);
    if (slot < -1 || slot >= s->nslots)
        return ty_fail(err, TY_EINVAL, "slot", "no slot %d", slot);
    if ((slot < 0) != (J->mask == 0) ||
        (slot >= 0 && !(J->mask & (1ull << s->slots[slot].cls))))
        return ty_fail(err, TY_EINVAL, "slot", "slot %d does not satisfy job %s",
                       slot, J->id);
    if (slot >= 0 && (s->slots[slot].holder >= 0 || s->slots[slot].reserved_for >= 0))
        return ty_fail(err, TY_ECONFLICT, "slot", "slot %d is held", slot);
    run_on(s, j, slot, start_time);
    return TY_OK;
}

ty_status sched_job_get(const sched *s, int j, sched_job_info *out)
{
    if (bad_job(s, j)) return TY_ENOTFOUND;
    const job_rec *J = &s->jobs[j];
    out->id = J->id;
    out->tenant = J->tenant;
    out->priority = J->priority;
    out->submit_time = J->submit_time;
    out->request = J->req;
    out->state = J->state;
    out->slot = J->slot;
    out->start_time = J->start_time;
    out->head_since = J->state == SCHED_JOB_QUEUED ? J->head_since : -1;
    out->preempted_for = J->preempted_for;
    return TY_OK;
}

int sched_slot_holder(const sched *s, int slot)
{
    return slot >= 0 && slot < s->nslots ? s->slots[slot].holder : -1;
}

size_t sched_queued_count(const sched *s) { return s->queued; }

/* ---- the pass ---- */

/* Heap of tenants by (key1, key2, tie), smallest first. */
static int tenant_less(const sched *s, int a, int b)
{
    const tenant_rec *x = &s->tenants[a], *y = &s->tenants[b];
    if (x->key1 != y->key1) return x->key1 < y->key1;
    if (x->key2 != y->key2) return x->key2 < y->key2;
    if (x->tie != y->tie) return x->tie < y->tie;
    return a < b;
}

static void heap_push(sched *s, int t)
{
    int i = s->nheap++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!tenant_less(s, t, s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = t;
}

static int heap_pop(sched *s)
{
    int top = s->heap[0];
    int last = s->heap[--s->nheap];
    int i = 0, n = s->nheap;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && tenant_less(s, s->heap[c + 1], s->heap[c])) c++;
        if (!tenant_less(s, s->heap[c], last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n > 0) s->heap[i] = last;
    return top;
}

/* Fair-share order: slices held over the recent past plus an eighth of
 * those held now, per unit of weight; then running jobs per weight, then
 * the older head. The history decides (it is what converges to the
 * weights); the small present term spreads the slots one pass hands out
 * and makes a fresh start (no history) follow the weights. */
static void tenant_key(sched *s, int t, int slices, int jobs, int head)
{
    tenant_rec *n = &s->tenants[t];
    n->key1 = (n->recent + slices / 8.0) / n->weight;
    n->key2 = jobs / n->weight;
    n->tie = head >= 0 ? s->jobs[head].seq : UINT64_MAX;
}

static void place(sched *s, int j, int slot, double now)
{
    run_on(s, j, slot, now);
    s->placements[s->nplacements++] = (sched_placement){j, slot};
}

/* Orders reservers: longest wait at the head first, then job order. */
static int reserver_before(const sched *s, int a, int b)
{
    const job_rec *x = &s->jobs[a], *y = &s->jobs[b];
    if (x->head_since != y->head_since) return x->head_since < y->head_since;
    return job_before(x, y);
}

static void pass_reservations(sched *s, double now)
{
    int nres = 0;
    for (int t = 0; t < s->ntenants; t++) {
        tenant_rec *n = &s->tenants[t];
        if (n->queued_gpu == 0) {
            n->head_job = -1;
            continue;
        }
        /* the head among GPU jobs: CPU jobs never wait for slots */
        int h = tenant_best(s, n, 1);
        job_rec *H = &s->jobs[h];
        if (h != n->head_job) {
            n->head_job = h;
            H->head_since = now;
        }
        /* waiting on its own quota is not waiting for capacity */
        if (jobs_quota_full(n) || !(H->mask & fit_mask(s, n))) {
            H->head_since = now;
            continue;
        }
        if (now - H->head_since >= s->cfg.backfill_wait) {
            int i = nres++;
            while (i > 0 && reserver_before(s, h, s->order[i - 1])) {
                s->order[i] = s->order[i - 1];
                i--;
            }
            s->order[i] = h;
        }
    }
    for (int i = 0; i < nres; i++) {
        int h = s->order[i];
        job_rec *H = &s->jobs[h];
        tenant_rec *n = &s->tenants[H->tenant];
        if (jobs_quota_full(n)) continue;
        uint64_t usable = H->mask & fit_mask(s, n) & ~s->held;
        if (usable & s->avail) {
            place(s, h, class_first_free(s, ctz64(usable & s->avail)), now);
        } else if (usable) {
            for (uint64_t m = usable; m; m &= m - 1) s->class_holder[ctz64(m)] = h;
            s->held |= usable;
        }
    }
}

static void pass_fair_share(sched *s, double now)
{
    int cpu_free = s->cfg.max_cpu_jobs < 0 ? INT_MAX
                                            : s->cfg.max_cpu_jobs - s->cpu_running;
    s->nheap = 0;
    for (int t = 0; t < s->ntenants; t++) {
        tenant_rec *n = &s->tenants[t];
        if (n->queued == 0) continue;
        tenant_key(s, t, n->slices_share, n->jobs, tenant_best(s, n, 0));
        heap_push(s, t);
    }
    while (s->nheap > 0 && ((s->avail & ~s->held) || cpu_free > 0)) {
        int t = heap_pop(s);
        tenant_rec *n = &s->tenants[t];
        if (jobs_quota_full(n)) continue;
        uint64_t fit = fit_mask(s, n) & s->avail & ~s->held;
        int best = -1;
        for (int l = 0; l < n->nlanes; l++) {
            int h = n->lanes[l].head;
            if (h < 0) continue;
            if (l == 0 ? cpu_free <= 0 : !(s->masks[l] & fit)) continue;
            if (best < 0 || job_before(&s->jobs[h], &s->jobs[best])) best = h;
        }
        if (best < 0) continue;
        int slot = -1;
        if (s->jobs[best].mask)
            slot = class_first_free(s, ctz64(s->jobs[best].mask & fit));
        else
            cpu_free--;
        place(s, best, slot, now);
        if (n->queued > 0) {
            tenant_key(s, t, n->slices_share, n->jobs, tenant_best(s, n, 0));
            heap_push(s, t);
        }
    }
}

/* Whether victim v (RUNNING, on a slot) may be stopped for job h. */
static int victim_ok(const sched *s, int v, int h, uint64_t allowed)
{
    const job_rec *V = &s->jobs[v], *H = &s->jobs[h];
    if (V->tenant == H->tenant) return 0;
    const slot_rec *sl = &s->slots[V->slot];
    if (!(allowed & (1ull << sl->cls))) return 0;
    const tenant_rec *t = &s->tenants[H->tenant], *u = &s->tenants[V->tenant];
    int cs = sl->compute_slices;
    if (V->start_time >= s->now) return 0; /* placed by this very pass */
    if (t->max_slices >= 0 && t->slices + cs > t->max_slices) return 0;
    if (t->slices_share + cs > t->share + EPS) return 0;
    return u->slices_share - cs >= u->share - EPS;
}

/* Victim order: lowest priority, most recent start, smaller slot, lower
 * slot index. */
static int victim_before(const sched *s, int a, int b)
{
    const job_rec *x = &s->jobs[a], *y = &s->jobs[b];
    if (x->priority != y->priority) return x->priority < y->priority;
    if (x->start_time != y->start_time) return x->start_time > y->start_time;
    int xs = s->slots[x->slot].compute_slices, ys = s->slots[y->slot].compute_slices;
    if (xs != ys) return xs < ys;
    return x->slot < y->slot;
}

static void preempt(sched *s, int v, int h)
{
    job_rec *V = &s->jobs[v], *H = &s->jobs[h];
    int slot = V->slot;
    int cs = s->slots[slot].compute_slices;
    tenant_rec *t = &s->tenants[H->tenant], *u = &s->tenants[V->tenant];
    V->state = SCHED_JOB_STOPPING;
    V->preempted_for = h;
    u->slices_share -= cs;
    /* h leaves its lane but stays in its tenant's list */
    lane_unlink(s, t, h);
    t->queued--;
    t->queued_gpu--;
    if (t->head_job == h) t->head_job = -1;
    drop_holds(s, h);
    H->state = SCHED_JOB_PENDING;
    H->slot = slot;
    H->head_since = -1;
    t->slices += cs;
    t->slices_share += cs;
    t->jobs++;
    s->slots[slot].reserved_for = h;
    s->preemptions[s->npreemptions++] = (sched_preemption){v, h, slot};
}

static void pass_preemption(sched *s, double now)
{
    int nv = 0;
    for (int i = 0; i < s->nslots; i++) {
        int v = s->slots[i].holder;
        if (v < 0 || s->jobs[v].state != SCHED_JOB_RUNNING) continue;
        const tenant_rec *u = &s->tenants[s->jobs[v].tenant];
        if (u->slices_share > u->share + EPS) s->victims[nv++] = v;
    }
    if (nv == 0) return;
    /* beneficiaries: tenants below their share, furthest below first */
    int nb = 0;
    for (int t = 0; t < s->ntenants; t++) {
        tenant_rec *n = &s->tenants[t];
        if (n->queued_gpu == 0 || n->slices_share + 1 > n->share + EPS) continue;
        if (jobs_quota_full(n)) continue;
        n->key1 = n->slices_share / n->weight;
        n->key2 = 0;
        n->tie = 0;
        int i = nb++;
        while (i > 0 && tenant_less(s, t, s->order[i - 1])) {
            s->order[i] = s->order[i - 1];
            i--;
        }
        s->order[i] = t;
    }
    for (int b = 0; b < nb && nv > 0; b++) {
        tenant_rec *n = &s->tenants[s->order[b]];
        int h = tenant_best(s, n, 1);
        if (h < 0) continue;
        job_rec *H = &s->jobs[h];
        if (now - H->submit_time < s->cfg.preempt_wait) continue;
        uint64_t allowed = H->mask & fit_mask(s, n);
        for (uint64_t m = allowed & s->held; m; m &= m - 1)
            if (s->class_holder[ctz64(m)] != h) allowed &= ~(1ull << ctz64(m));
        if (!allowed || (allowed & s->avail)) continue;
        int best = -1;
        for (int i = 0; i < nv; i++)
            if (victim_ok(s, s->victims[i], h, allowed) &&
                (best < 0 || victim_before(s, s->victims[i], s->victims[best])))
                best = i;
        if (best < 0) continue;
        int v = s->victims[best];
        s->victims[best] = s->victims[--nv];
        preempt(s, v, h);
    }
}

void sched_pass(sched *s, double now, sched_result *out)
{
    s->nplacements = 0;
    s->npreemptions = 0;
    s->held = 0;
    for (int c = 0; c < s->nclasses; c++) s->class_holder[c] = -1;

    /* 0: pending jobs whose slot the preempted job has left */
    for (int i = 0; i < s->nslots; i++) {
        const slot_rec *sl = &s->slots[i];
        if (sl->holder < 0 && sl->reserved_for >= 0) place(s, sl->reserved_for, i, now);
    }
    /* the recent average of each tenant's slices: an exponential moving
     * average with time constant fair_window, fed with what it held since
     * the last pass; it lets a tenant that integer slot counts keep just
     * under its share catch up over time */
    double dt = isnan(s->last_now) ? 0 : now - s->last_now;
    if (dt < 0) dt = 0;
    double keep = s->cfg.fair_window > 0 ? exp(-dt / s->cfg.fair_window) : 0;
    for (int t = 0; t < s->ntenants; t++) {
        tenant_rec *n = &s->tenants[t];
        n->recent = n->recent * keep + n->slices_share * (1 - keep);
    }
    s->last_now = now;
    s->now = now;
    compute_shares(s);
    pass_reservations(s, now);
    pass_fair_share(s, now);
    if (s->cfg.preempt) pass_preemption(s, now);

    out->placements = s->placements;
    out->n_placements = s->nplacements;
    out->preemptions = s->preemptions;
    out->n_preemptions = s->npreemptions;
}

/* ---- reasons and positions ---- */

/* Whether tenant n is below its share with a GPU job its quotas let run. */
static int tenant_wants_share(const sched *s, const tenant_rec *n)
{
    if (n->queued_gpu == 0 || n->slices_share + 1 > n->share + EPS) return 0;
    if (jobs_quota_full(n)) return 0;
    int h = tenant_best(s, n, 1);
    return h >= 0 && (s->jobs[h].mask & fit_mask(s, n));
}

static void job_reason(const sched *s, int j, int nbelow, sched_wait *w)
{
    const job_rec *J = &s->jobs[j];
    const tenant_rec *t = &s->tenants[J->tenant];
    w->job = j;
    w->quota = SCHED_QUOTA_NONE;
    w->other_job = -1;
    if (J->state == SCHED_JOB_PENDING) {
        w->reason = SCHED_WAIT_PREEMPTING;
        w->other_job = s->slots[J->slot].holder;
        return;
    }
    if (jobs_quota_full(t)) {
        w->reason = SCHED_WAIT_QUOTA;
        w->quota = SCHED_QUOTA_RUNNING_JOBS;
        return;
    }
    if (!J->mask) {
        int full = s->cfg.max_cpu_jobs >= 0 && s->cpu_running >= s->cfg.max_cpu_jobs;
        w->reason = full ? SCHED_WAIT_NO_SLICE : SCHED_WAIT_SCHEDULING;
        return;
    }
    uint64_t fit = J->mask & fit_mask(s, t);
    if (!fit) {
        w->reason = SCHED_WAIT_QUOTA;
        w->quota = SCHED_QUOTA_GPU_SLICES;
        return;
    }
    uint64_t free_fit = fit & s->avail;
    if (free_fit & ~s->held) {
        w->reason = SCHED_WAIT_SCHEDULING;
        return;
    }
    if (free_fit) {
        int h = s->class_holder[ctz64(free_fit)];
        if (h >= 0 && h != j) {
            w->reason = SCHED_WAIT_RESERVED;
            w->other_job = h;
        } else {
            w->reason = SCHED_WAIT_SCHEDULING;
        }
        return;
    }
    int t_below = tenant_wants_share(s, t);
    int over = t->slices_share + J->min_slices > t->share + EPS;
    w->reason = over && nbelow - t_below > 0 ? SCHED_WAIT_FAIR_SHARE
                                             : SCHED_WAIT_NO_SLICE;
}

size_t sched_queue_report(sched *s, sched_wait *out, size_t cap)
{
    size_t pos = 0;
    compute_shares(s);
    int nbelow = 0;
    for (int t = 0; t < s->ntenants; t++) {
        if (tenant_wants_share(s, &s->tenants[t])) nbelow++;
    }
    /* pending jobs first: they start as soon as their slot is left */
    for (int i = 0; i < s->nslots && pos < cap; i++) {
        int j = s->slots[i].reserved_for;
        if (j < 0) continue;
        sched_wait *w = &out[pos];
        job_reason(s, j, nbelow, w);
        w->position = ++pos;
        size_t tp = 1;
        for (int k = s->tenants[s->jobs[j].tenant].thead; k >= 0 && k != j;
             k = s->jobs[k].tnext)
            tp++;
        w->tenant_position = tp;
    }
    /* then the tenants' queues interleaved by simulated fair share */
    s->nheap = 0;
    for (int t = 0; t < s->ntenants; t++) {
        tenant_rec *n = &s->tenants[t];
        n->tpos = 1;
        n->cursor = n->thead;
        while (n->cursor >= 0 && s->jobs[n->cursor].state != SCHED_JOB_QUEUED) {
            n->cursor = s->jobs[n->cursor].tnext;
            n->tpos++;
        }
        if (n->cursor < 0) continue;
        n->sim_slices = n->slices_share;
        n->sim_jobs = n->jobs;
        tenant_key(s, t, n->sim_slices, n->sim_jobs, n->cursor);
        heap_push(s, t);
    }
    while (s->nheap > 0 && pos < cap) {
        int t = heap_pop(s);
        tenant_rec *n = &s->tenants[t];
        int j = n->cursor;
        sched_wait *w = &out[pos];
        job_reason(s, j, nbelow, w);
        w->position = ++pos;
        w->tenant_position = n->tpos++;
        n->sim_slices += s->jobs[j].min_slices;
        n->sim_jobs++;
        int k = s->jobs[j].tnext;
        while (k >= 0 && s->jobs[k].state != SCHED_JOB_QUEUED) {
            k = s->jobs[k].tnext;
            n->tpos++;
        }
        n->cursor = k;
        if (k >= 0) {
            tenant_key(s, t, n->sim_slices, n->sim_jobs, k);
            heap_push(s, t);
        }
    }
    return pos;
}

const char *sched_wait_reason_name(sched_wait_reason r)
{
    switch (r) {
    case SCHED_WAIT_SCHEDULING: return "scheduling";
    case SCHED_WAIT_QUOTA: return "quota";
    case SCHED_WAIT_NO_SLICE: return "no free slice of that size";
    case SCHED_WAIT_FAIR_SHARE: return "fair share";
    case SCHED_WAIT_RESERVED: return "reserved for job";
    case SCHED_WAIT_PREEMPTING: return "preempting";
    }
    return "unknown";
}

void sched_wait_describe(const sched *s, const sched_wait *w, char *buf, size_t n)
{
    if (bad_job(s, w->job)) {
        snprintf(buf, n, "unknown job");
        return;
    }
    const job_rec *J = &s->jobs[w->job];
    const tenant_rec *t = &s->tenants[J->tenant];
    char want[96];
    request_text(&J->req, want, sizeof want);
    const char *other = !bad_job(s, w->other_job) ? s->jobs[w->other_job].id : "?";
    switch (w->reason) {
    case SCHED_WAIT_SCHEDULING:
        snprintf(buf, n, "scheduling: %s is free; the next pass starts it", want);
        break;
    case SCHED_WAIT_QUOTA:
        if (w->quota == SCHED_QUOTA_RUNNING_JOBS)
            snprintf(buf, n, "quota: max_running_jobs %lld reached (%d running)",
                     (long long)t->max_jobs, t->jobs);
        else
            snprintf(buf, n, "quota: max_gpu_slices %lld reached (%d in use, "
                     "%s needs %d more)", (long long)t->max_slices, t->slices,
                     want, J->min_slices);
        break;
    case SCHED_WAIT_NO_SLICE:
        if (J->mask)
            snprintf(buf, n, "no free slice of that size (needs %s)", want);
        else
            snprintf(buf, n, "no free slice of that size (all %d CPU job slots "
                     "are busy)", s->cfg.max_cpu_jobs);
        break;
    case SCHED_WAIT_FAIR_SHARE:
        snprintf(buf, n, "fair share: the tenant holds %d compute slices, its "
                 "share is %.2f; tenants below their share go first",
                 t->slices_share, t->share);
        break;
    case SCHED_WAIT_RESERVED:
        snprintf(buf, n, "reserved for job %s: the free slots that fit are held "
                 "for it", other);
        break;
    case SCHED_WAIT_PREEMPTING:
        snprintf(buf, n, "preempting: job %s is checkpointing to free slot %d "
                 "for it", other, J->slot);
        break;
    }
}

/* ---- invariants ---- */

#define CHECK(cond, ...) \
    do { if (!(cond)) return ty_fail(err, TY_EINTERNAL, NULL, __VA_ARGS__); } while (0)

/* Tenant t's counters against c (slices, share, jobs, queued, queued_gpu
 * recounted from the jobs), its quotas, lanes and list; *listed gets the
 * length of its list. */
static ty_status check_tenant(const sched *s, int t, const int *c, size_t *listed,
                              ty_err *err)
{
    const tenant_rec *n = &s->tenants[t];
    CHECK(c[0] == n->slices && c[1] == n->slices_share && c[2] == n->jobs &&
              c[3] == n->queued && c[4] == n->queued_gpu,
          "tenant %s's counters are wrong (slices %d/%d, share %d/%d, jobs %d/%d, "
          "queued %d/%d, gpu %d/%d)", n->id, n->slices, c[0], n->slices_share, c[1],
          n->jobs, c[2], n->queued, c[3], n->queued_gpu, c[4]);
    CHECK(n->max_slices < 0 || c[0] <= n->max_slices,
          "tenant %s holds %d slices, quota %lld", n->id, c[0], (long long)n->max_slices);
    CHECK(n->max_jobs < 0 || c[2] <= n->max_jobs,
          "tenant %s runs %d jobs, quota %lld", n->id, c[2], (long long)n->max_jobs);
    int lq = 0;
    for (int l = 0; l < n->nlanes; l++) {
        int k = 0;
        for (int j = n->lanes[l].head; j >= 0; j = s->jobs[j].lnext) {
            const job_rec *J = &s->jobs[j];
            CHECK(J->state == SCHED_JOB_QUEUED && J->lane == l && J->tenant == t,
                  "job %s in the wrong lane", J->id);
            CHECK(J->lnext < 0 || !job_before(&s->jobs[J->lnext], J),
                  "lane %d of %s unsorted", l, n->id);
            k++;
        }
        CHECK(k == n->lanes[l].count, "lane %d of %s miscounted", l, n->id);
        lq += k;
    }
    CHECK(lq == c[3], "tenant %s: %d jobs in lanes, %d queued", n->id, lq, c[3]);
    size_t tl = 0;
    for (int j = n->thead; j >= 0; j = s->jobs[j].tnext) {
        const job_rec *J = &s->jobs[j];
        CHECK(J->state == SCHED_JOB_QUEUED || J->state == SCHED_JOB_PENDING,
              "job %s in %s's queue is not queued", J->id, n->id);
        CHECK(J->tnext < 0 || !job_before(&s->jobs[J->tnext], J),
              "queue of %s unsorted", n->id);
        tl++;
    }
    *listed = tl;
    return TY_OK;
}

/* Job j's slot agrees with its state and request; counts it into c. */
static ty_status check_job(const sched *s, int j, int *c, int *cpu, ty_err *err)
{
    const job_rec *J = &s->jobs[j];
    int cs = J->slot >= 0 ? s->slots[J->slot].compute_slices : 0;
    if (J->state == SCHED_JOB_QUEUED) {
        CHECK(J->slot == -1, "queued job %s has a slot", J->id);
        c[3]++;
        c[4] += J->mask != 0;
        return TY_OK;
    }
    CHECK(J->slot >= 0 || (J->mask == 0 && J->state != SCHED_JOB_PENDING),
          "GPU job %s has no slot", J->id);
    CHECK(J->slot < 0 || (J->mask & (1ull << s->slots[J->slot].cls)),
          "job %s is on slot %d which does not satisfy it", J->id, J->slot);
    if (J->state == SCHED_JOB_RUNNING || J->state == SCHED_JOB_STOPPING) {
        CHECK(J->slot < 0 || s->slots[J->slot].holder == j,
              "job %s is not the holder of its slot %d", J->id, J->slot);
        if (J->slot < 0) (*cpu)++;
    }
    c[0] += cs;
    if (J->state != SCHED_JOB_STOPPING) c[1] += cs;
    c[2]++;
    return TY_OK;
}

static ty_status check_slots(const sched *s, ty_err *err)
{
    uint64_t avail = 0;
    for (int c = 0; c < s->nclasses; c++) {
        int nfree = 0;
        for (int i = 0; i < s->classes[c].nslots; i++) {
            const slot_rec *sl = &s->slots[s->classes[c].slots[i]];
            CHECK(sl->cls == c, "slot %d in the wrong class", s->classes[c].slots[i]);
            if (sl->holder < 0 && sl->reserved_for < 0) nfree++;
        }
        CHECK(nfree == s->classes[c].nfree, "class %d counts %d free, has %d", c,
              s->classes[c].nfree, nfree);
        if (nfree) avail |= 1ull << c;
    }
    CHECK(avail == s->avail, "free-class mask out of date");
    for (int i = 0; i < s->nslots; i++) {
        const slot_rec *sl = &s->slots[i];
        if (sl->holder >= 0) {
            CHECK(!bad_job(s, sl->holder), "slot %d held by a freed job", i);
            const job_rec *J = &s->jobs[sl->holder];
            CHECK(J->state == SCHED_JOB_RUNNING || J->state == SCHED_JOB_STOPPING,
                  "slot %d held by job %s which is not running", i, J->id);
            CHECK(J->slot == i, "slot %d held by job %s which is on slot %d", i,
                  J->id, J->slot);
        }
        if (sl->reserved_for >= 0) {
            CHECK(!bad_job(s, sl->reserved_for), "slot %d reserved for a freed job", i);
            const job_rec *J = &s->jobs[sl->reserved_for];
            CHECK(J->state == SCHED_JOB_PENDING && J->slot == i,
                  "slot %d reserved for job %s which is not pending on it", i, J->id);
        }
    }
    return TY_OK;
}

ty_status sched_check(const sched *s, ty_err *err)
{
    ty_status st = check_slots(s, err);
    if (st != TY_OK) return st;
    int cpu = 0;
    size_t queued = 0, live = 0;
    /* per tenant: slices, share, jobs, queued, queued_gpu */
    int *cnt = calloc((size_t)s->ntenants * 5 + 1, sizeof *cnt);
    if (!cnt) return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    for (int j = 0; j < s->job_cap && st == TY_OK; j++) {
        if (!s->jobs[j].in_use) continue;
        live++;
        st = check_job(s, j, &cnt[s->jobs[j].tenant * 5], &cpu, err);
    }
    for (int t = 0; t < s->ntenants && st == TY_OK; t++) {
        size_t listed = 0;
        st = check_tenant(s, t, &cnt[t * 5], &listed, err);
        queued += listed;
    }
    free(cnt);
    if (st != TY_OK) return st;
    CHECK(cpu == s->cpu_running, "CPU jobs counted %d, running %d", s->cpu_running, cpu);
    CHECK(s->cfg.max_cpu_jobs < 0 || cpu <= s->cfg.max_cpu_jobs, "too many CPU jobs");
    CHECK(queued == s->queued, "queue counted %zu, holds %zu", s->queued, queued);
    CHECK(live == s->live, "jobs counted %zu, hold %zu", s->live, live);
    for (int c = 0; c < s->nclasses; c++)
        CHECK(s->class_holder[c] < 0 || !bad_job(s, s->class_holder[c]),
              "class %d held for a freed job", c);
    return TY_OK;
}
#undef CHECK
