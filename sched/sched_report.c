/*
 * sched_report.c - why each queued job waits and where it stands:
 * sched_queue_report, sched_wait_reason_name, sched_wait_describe and
 * sched_wait_summary. Reads
 * the books as the last pass left them (recomputing only the shares) and
 * replays step 1's order on the serving jobs, then the fair-share order on
 * the tenants' training queues; changes no job.
 */
#include <stdio.h>

#include "sched/sched_internal.h"

/* ---- reasons and positions ---- */

/* Whether tenant n is below its share with a GPU job its quotas let run. */
static int tenant_wants_share(const sched *s, const tenant_rec *n)
{
    if (!sched_may_claim_share(n))
        return 0;
    int h = sched_tenant_best(s, n, 1);
    return h >= 0 && (s->jobs[h].mask & sched_fit_mask(s, n));
}

/* The first QUEUED job of kind `serving` from k on along its tenant's list,
 * or -1; *tpos counts the jobs passed over (pending ones, and the serving
 * jobs ahead of the training ones, hold their place in the list). Serving
 * jobs come first in the list, so a serving walk stops at the first
 * training job. */
static int next_queued(const sched *s, int k, int serving, size_t *tpos)
{
    for (; k >= 0; k = s->jobs[k].tnext, (*tpos)++) {
        const job_rec *J = &s->jobs[k];
        if (serving && !J->serving)
            return -1;
        if (J->state == SCHED_JOB_QUEUED && J->serving == serving)
            return k;
    }
    return -1;
}

/* Why QUEUED serving job J waits (its tenant below max_running_jobs): step
 * 1 places it before any training job, so only its slice quota and the
 * slots' state count, never fair share or a reservation. */
static void serving_reason(const sched *s, const job_rec *J,
                           const tenant_rec *t, sched_wait *w)
{
    if (s->cfg.max_serving_per_tenant >= 0 &&
        t->serving >= s->cfg.max_serving_per_tenant) {
        w->reason = SCHED_WAIT_QUOTA;
        w->quota = SCHED_QUOTA_REPLICAS;
        return;
    }
    if (s->cfg.max_serving >= 0 && s->serving >= s->cfg.max_serving) {
        w->reason = SCHED_WAIT_REPLICAS;
        return;
    }
    if (!J->mask) {
        w->reason = SCHED_WAIT_SCHEDULING;
        return;
    }
    uint64_t fit = J->mask & sched_fit_mask(s, t);
    if (!fit) {
        w->reason = SCHED_WAIT_QUOTA;
        w->quota = SCHED_QUOTA_GPU_SLICES;
        return;
    }
    w->reason = fit & s->avail ? SCHED_WAIT_SCHEDULING : SCHED_WAIT_NO_SLICE;
}

/* Whether job J's tenant waits for fair share rather than capacity. */
static int waits_share(const sched *s, const job_rec *J, int nbelow)
{
    const tenant_rec *t = &s->tenants[J->tenant];
    int t_below = tenant_wants_share(s, t);
    int over =
        t->slices_share + J->min_slices * J->members > t->share + SCHED_EPS;
    return over && nbelow - t_below > 0;
}

/* Why QUEUED GPU gang j waits, within its quotas (fit: its classes that
 * its slice quota allows): its members fit now (scheduling), a reservation
 * holds its classes (reserved), or no node has them all free (no slice,
 * or fair share); sched_wait_describe names the node. */
static void gang_reason(const sched *s, int j, uint64_t fit, int nbelow,
                        sched_wait *w)
{
    const job_rec *J = &s->jobs[j];
    uint64_t open = fit & ~s->held;
    for (uint64_t m = fit & s->held; m; m &= m - 1)
        if (s->class_holder[sched_ctz64(m)] == j)
            open |= 1ull << sched_ctz64(m);
    int free_total = 0, free_most = 0;
    for (int n = 0; n < s->nnodes; n++) {
        int f = sched_gang_node_free(s, n, open & J->mask, j);
        free_total += f;
        if (f > free_most)
            free_most = f;
    }
    if ((J->spread ? free_total : free_most) >= J->members) {
        w->reason = SCHED_WAIT_SCHEDULING;
        return;
    }
    uint64_t held = fit & s->held & s->avail;
    if (held && s->class_holder[sched_ctz64(held)] != j) {
        w->reason = SCHED_WAIT_RESERVED;
        w->other_job = s->class_holder[sched_ctz64(held)];
        return;
    }
    w->reason =
        waits_share(s, J, nbelow) ? SCHED_WAIT_FAIR_SHARE : SCHED_WAIT_NO_SLICE;
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
    if (sched_jobs_quota_full(t)) {
        w->reason = SCHED_WAIT_QUOTA;
        w->quota = SCHED_QUOTA_RUNNING_JOBS;
        return;
    }
    if (J->serving) {
        serving_reason(s, J, t, w);
        return;
    }
    if (!J->mask && s->cpu_holder >= 0 && s->cpu_holder != j) {
        w->reason = SCHED_WAIT_RESERVED; /* the CPU places are kept */
        w->other_job = s->cpu_holder;
        return;
    }
    if (!J->mask) {
        int full = s->cfg.max_cpu_jobs >= 0 &&
                   s->cpu_running + J->members > s->cfg.max_cpu_jobs;
        w->reason = full ? SCHED_WAIT_NO_SLICE : SCHED_WAIT_SCHEDULING;
        return;
    }
    uint64_t fit = J->mask & sched_fit_mask_n(s, t, J->members);
    if (!fit) {
        w->reason = SCHED_WAIT_QUOTA;
        w->quota = SCHED_QUOTA_GPU_SLICES;
        return;
    }
    if (J->members > 1) {
        gang_reason(s, j, fit, nbelow, w);
        return;
    }
    uint64_t free_fit = fit & s->avail;
    if (free_fit & ~s->held & ~s->gblock) {
        w->reason = SCHED_WAIT_SCHEDULING;
        return;
    }
    if (free_fit & ~s->held) { /* free ones are all a gang's reservation */
        int c = sched_ctz64(free_fit & ~s->held);
        for (int n = 0; n < s->nnodes; n++) {
            int g = s->node_holder[n];
            if (g >= 0 && g != j && ((s->jobs[g].mask >> c) & 1) &&
                s->node_free[n * SCHED_MAX_CLASSES + c] > 0) {
                w->reason = SCHED_WAIT_RESERVED;
                w->other_job = g;
                return;
            }
        }
    }
    if (free_fit) {
        int h = s->class_holder[sched_ctz64(free_fit)];
        if (h >= 0 && h != j) {
            w->reason = SCHED_WAIT_RESERVED;
            w->other_job = h;
        } else {
            w->reason = SCHED_WAIT_SCHEDULING;
        }
        return;
    }
    w->reason =
        waits_share(s, J, nbelow) ? SCHED_WAIT_FAIR_SHARE : SCHED_WAIT_NO_SLICE;
}

ty_status sched_job_wait(sched *s, int j, sched_wait *w)
{
    if (sched_bad_job(s, j) || (s->jobs[j].state != SCHED_JOB_QUEUED &&
                                s->jobs[j].state != SCHED_JOB_PENDING))
        return TY_ENOTFOUND;
    int nbelow = 0;
    if (!s->jobs[j].serving) { /* fair share plays no part among replicas */
        sched_compute_shares(s);
        for (int t = 0; t < s->ntenants; t++)
            nbelow += tenant_wants_share(s, &s->tenants[t]);
    }
    job_reason(s, j, nbelow, w);
    w->position = 0;
    w->tenant_position = 0;
    return TY_OK;
}

size_t sched_queue_report(sched *s, sched_wait *out, size_t cap)
{
    size_t pos = 0;
    sched_compute_shares(s);
    int nbelow = 0;
    for (int t = 0; t < s->ntenants; t++) {
        if (tenant_wants_share(s, &s->tenants[t]))
            nbelow++;
    }
    /* pending jobs first: they start as soon as their slot is left */
    for (int i = 0; i < s->nslots && pos < cap; i++) {
        int j = s->slots[i].reserved_for;
        if (j < 0)
            continue;
        sched_wait *w = &out[pos];
        job_reason(s, j, nbelow, w);
        w->position = ++pos;
        size_t tp = 1;
        for (int k = s->tenants[s->jobs[j].tenant].thead; k >= 0 && k != j;
             k = s->jobs[k].tnext)
            tp++;
        w->tenant_position = tp;
    }
    /* then the serving jobs, best first across tenants (step 1) */
    s->nheap = 0;
    for (int t = 0; t < s->ntenants; t++) {
        tenant_rec *n = &s->tenants[t];
        n->sim_slices = n->slices_share;
        n->sim_jobs = n->jobs;
        n->tpos = 1;
        n->cursor = n->queued_srv ? next_queued(s, n->thead, 1, &n->tpos) : -1;
        if (n->cursor < 0)
            continue;
        sched_serving_key(s, t, n->cursor);
        sched_heap_push(s, t);
    }
    while (s->nheap > 0 && pos < cap) {
        int t = sched_heap_pop(s);
        tenant_rec *n = &s->tenants[t];
        int j = n->cursor;
        sched_wait *w = &out[pos];
        job_reason(s, j, nbelow, w);
        w->position = ++pos;
        w->tenant_position = n->tpos++;
        n->sim_slices += s->jobs[j].min_slices * s->jobs[j].members;
        n->sim_jobs++;
        n->cursor = next_queued(s, s->jobs[j].tnext, 1, &n->tpos);
        if (n->cursor >= 0) {
            sched_serving_key(s, t, n->cursor);
            sched_heap_push(s, t);
        }
    }
    /* then the tenants' training queues interleaved by simulated fair
     * share, from where their serving jobs left them */
    s->nheap = 0;
    for (int t = 0; t < s->ntenants; t++) {
        tenant_rec *n = &s->tenants[t];
        n->tpos = 1;
        n->cursor = n->queued ? next_queued(s, n->thead, 0, &n->tpos) : -1;
        if (n->cursor < 0)
            continue;
        sched_tenant_key(s, t, n->sim_slices, n->sim_jobs, n->cursor);
        sched_heap_push(s, t);
    }
    while (s->nheap > 0 && pos < cap) {
        int t = sched_heap_pop(s);
        tenant_rec *n = &s->tenants[t];
        int j = n->cursor;
        sched_wait *w = &out[pos];
        job_reason(s, j, nbelow, w);
        w->position = ++pos;
        w->tenant_position = n->tpos++;
        n->sim_slices += s->jobs[j].min_slices * s->jobs[j].members;
        n->sim_jobs++;
        int k = next_queued(s, s->jobs[j].tnext, 0, &n->tpos);
        n->cursor = k;
        if (k >= 0) {
            sched_tenant_key(s, t, n->sim_slices, n->sim_jobs, k);
            sched_heap_push(s, t);
        }
    }
    return pos;
}

/* Why gang j finds no room, in the scheduler's words (user 0: "needs 4
 * whole GPUs on one node; node 3 has 2 free") or a user's. */
static void gang_text(const sched *s, int j, int user, char *buf, size_t n)
{
    const job_rec *J = &s->jobs[j];
    int k = J->members;
    if (!J->mask) {
        int cpu_free = s->cfg.max_cpu_jobs - s->cpu_running;
        if (user)
            snprintf(buf, n,
                     "%d CPU workers must start together and %d of the %d "
                     "CPU job places are free",
                     k, cpu_free, s->cfg.max_cpu_jobs);
        else
            snprintf(buf, n,
                     "no free slice of that size (needs %d CPU job places at "
                     "once; %d of %d are free)",
                     k, cpu_free, s->cfg.max_cpu_jobs);
        return;
    }
    int nfree = 0;
    int node = sched_gang_nearest(s, j, &nfree);
    int id = node >= 0 ? s->node_id[node] : -1;
    if (J->spread) {
        int total = 0;
        for (int m = 0; m < s->nnodes; m++)
            total += sched_gang_node_free(s, m, J->mask, j);
        if (user)
            snprintf(buf, n,
                     "The job needs %d whole GPUs at once and %d are free; "
                     "it starts when enough are",
                     k, total);
        else
            snprintf(buf, n,
                     "no free slice of that size (needs %d whole GPUs at "
                     "once; %d are free)",
                     k, total);
    } else if (user) {
        snprintf(buf, n,
                 "The job needs %d whole GPUs on one machine and the "
                 "%s has %d free; it starts when it has enough",
                 k,
                 node >= 0 && s->node_holder[node] == j ? "machine kept for it"
                                                        : "freest",
                 nfree);
    } else {
        snprintf(buf, n,
                 "no free slice of that size (needs %d whole GPUs on one "
                 "node; node %d%s has %d free)",
                 k, id,
                 node >= 0 && s->node_holder[node] == j ? ", reserved for it,"
                                                        : "",
                 nfree);
    }
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
        case SCHED_WAIT_REPLICAS: return "replica places";
    }
    return "unknown";
}

void sched_wait_describe(const sched *s, const sched_wait *w, char *buf,
                         size_t n)
{
    if (sched_bad_job(s, w->job)) {
        snprintf(buf, n, "unknown job");
        return;
    }
    const job_rec *J = &s->jobs[w->job];
    const tenant_rec *t = &s->tenants[J->tenant];
    char want[96];
    sched_request_text(&J->req, want, sizeof want);
    const char *other =
        !sched_bad_job(s, w->other_job) ? s->jobs[w->other_job].id : "?";
    switch (w->reason) {
        case SCHED_WAIT_SCHEDULING:
            snprintf(buf, n, "scheduling: %s is free; the next pass starts it",
                     want);
            break;
        case SCHED_WAIT_QUOTA:
            if (w->quota == SCHED_QUOTA_RUNNING_JOBS)
                snprintf(buf, n,
                         "quota: max_running_jobs %lld reached (%d running)",
                         (long long)t->max_jobs, t->jobs);
            else if (w->quota == SCHED_QUOTA_REPLICAS)
                snprintf(buf, n,
                         "quota: the tenant's share of replica places, %d, "
                         "is held (%d replicas)",
                         s->cfg.max_serving_per_tenant, t->serving);
            else
                snprintf(buf, n,
                         "quota: max_gpu_slices %lld reached (%d in use, "
                         "%s needs %d more)",
                         (long long)t->max_slices, t->slices, want,
                         J->min_slices * J->members);
            break;
        case SCHED_WAIT_NO_SLICE:
            if (J->members > 1) {
                gang_text(s, w->job, 0, buf, n);
                break;
            }
            if (J->mask && J->serving && s->cfg.serving_preempt)
                snprintf(buf, n,
                         "no free slice of that size (needs %s; no training "
                         "job holds one it may preempt)",
                         want);
            else if (J->mask)
                snprintf(buf, n, "no free slice of that size (needs %s)", want);
            else
                snprintf(buf, n,
                         "no free slice of that size (all %d CPU job slots "
                         "are busy)",
                         s->cfg.max_cpu_jobs);
            break;
        case SCHED_WAIT_FAIR_SHARE:
            snprintf(buf, n,
                     "fair share: the tenant holds %d compute slices, its "
                     "share is %.2f; tenants below their share go first",
                     t->slices_share, t->share);
            break;
        case SCHED_WAIT_RESERVED:
            snprintf(buf, n,
                     "reserved for job %s: the free slots that fit are held "
                     "for it",
                     other);
            break;
        case SCHED_WAIT_PREEMPTING:
            snprintf(buf, n,
                     "preempting: job %s is checkpointing to free slot %d "
                     "for it",
                     other, J->slot);
            break;
        case SCHED_WAIT_REPLICAS:
            snprintf(buf, n,
                     "replica places: all %d of the server's are held (%d "
                     "replicas)",
                     s->cfg.max_serving, s->serving);
            break;
    }
}

void sched_wait_summary(const sched *s, const sched_wait *w, char *buf,
                        size_t n)
{
    if (sched_bad_job(s, w->job)) {
        snprintf(buf, n, "Waiting for the scheduler");
        return;
    }
    const job_rec *J = &s->jobs[w->job];
    const tenant_rec *t = &s->tenants[J->tenant];
    char want[96];
    sched_request_text(&J->req, want, sizeof want);
    switch (w->reason) {
        case SCHED_WAIT_SCHEDULING: snprintf(buf, n, "Starting now"); return;
        case SCHED_WAIT_QUOTA:
            if (w->quota == SCHED_QUOTA_RUNNING_JOBS)
                snprintf(buf, n,
                         "Your tenant may run %lld job%s at once and %d %s "
                         "running",
                         (long long)t->max_jobs, t->max_jobs == 1 ? "" : "s",
                         t->jobs, t->jobs == 1 ? "is" : "are");
            else if (w->quota == SCHED_QUOTA_REPLICAS)
                snprintf(buf, n,
                         "Your tenant may run %d replica%s at once and %d %s "
                         "running",
                         s->cfg.max_serving_per_tenant,
                         s->cfg.max_serving_per_tenant == 1 ? "" : "s",
                         t->serving, t->serving == 1 ? "is" : "are");
            else
                snprintf(buf, n,
                         "Your tenant may hold %lld GPU slices and holds %d; "
                         "this job needs %d more",
                         (long long)t->max_slices, t->slices,
                         J->min_slices * J->members);
            return;
        case SCHED_WAIT_NO_SLICE:
            if (J->members > 1)
                gang_text(s, w->job, 1, buf, n);
            else if (J->mask)
                snprintf(buf, n, "No %s is free; the job starts when one is",
                         want);
            else
                snprintf(buf, n,
                         "All %d CPU job slots are busy; the job starts when "
                         "one frees",
                         s->cfg.max_cpu_jobs);
            return;
        case SCHED_WAIT_FAIR_SHARE:
            snprintf(buf, n,
                     "Tenants below their fair share of the GPUs go first");
            return;
        case SCHED_WAIT_RESERVED:
            snprintf(buf, n,
                     "The free slices are held for an older job that needs "
                     "more of them");
            return;
        case SCHED_WAIT_PREEMPTING:
            snprintf(buf, n,
                     "A lower-priority job is saving a checkpoint to make "
                     "room");
            return;
        case SCHED_WAIT_REPLICAS:
            snprintf(buf, n,
                     "All %d replica places of this server are in use; the "
                     "replica starts when one frees",
                     s->cfg.max_serving);
            return;
    }
    snprintf(buf, n, "Waiting for the scheduler");
}
