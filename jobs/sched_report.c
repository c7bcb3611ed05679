/*
 * sched_report.c - why each queued job waits and where it stands:
 * sched_queue_report, sched_wait_reason_name and sched_wait_describe. Reads
 * the books as the last pass left them (recomputing only the shares) and
 * replays the fair-share order on the tenants' queues; changes no job.
 */
#include <stdio.h>

#include "jobs/sched_internal.h"

/* ---- reasons and positions ---- */

/* Whether tenant n is below its share with a GPU job its quotas let run. */
static int tenant_wants_share(const sched *s, const tenant_rec *n)
{
    if (!sched_may_claim_share(n))
        return 0;
    int h = sched_tenant_best(s, n, 1);
    return h >= 0 && (s->jobs[h].mask & sched_fit_mask(s, n));
}

/* The first QUEUED job from k on along its tenant's list, or -1; *tpos counts
 * the jobs passed over (pending ones hold their place in the list). */
static int next_queued(const sched *s, int k, size_t *tpos)
{
    while (k >= 0 && s->jobs[k].state != SCHED_JOB_QUEUED) {
        k = s->jobs[k].tnext;
        (*tpos)++;
    }
    return k;
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
    if (!J->mask) {
        int full =
            s->cfg.max_cpu_jobs >= 0 && s->cpu_running >= s->cfg.max_cpu_jobs;
        w->reason = full ? SCHED_WAIT_NO_SLICE : SCHED_WAIT_SCHEDULING;
        return;
    }
    uint64_t fit = J->mask & sched_fit_mask(s, t);
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
        int h = s->class_holder[sched_ctz64(free_fit)];
        if (h >= 0 && h != j) {
            w->reason = SCHED_WAIT_RESERVED;
            w->other_job = h;
        } else {
            w->reason = SCHED_WAIT_SCHEDULING;
        }
        return;
    }
    int t_below = tenant_wants_share(s, t);
    int over = t->slices_share + J->min_slices > t->share + SCHED_EPS;
    w->reason = over && nbelow - t_below > 0 ? SCHED_WAIT_FAIR_SHARE
                                             : SCHED_WAIT_NO_SLICE;
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
    /* then the tenants' queues interleaved by simulated fair share */
    s->nheap = 0;
    for (int t = 0; t < s->ntenants; t++) {
        tenant_rec *n = &s->tenants[t];
        n->tpos = 1;
        n->cursor = next_queued(s, n->thead, &n->tpos);
        if (n->cursor < 0)
            continue;
        n->sim_slices = n->slices_share;
        n->sim_jobs = n->jobs;
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
        n->sim_slices += s->jobs[j].min_slices;
        n->sim_jobs++;
        int k = next_queued(s, s->jobs[j].tnext, &n->tpos);
        n->cursor = k;
        if (k >= 0) {
            sched_tenant_key(s, t, n->sim_slices, n->sim_jobs, k);
            sched_heap_push(s, t);
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
            else
                snprintf(buf, n,
                         "quota: max_gpu_slices %lld reached (%d in use, "
                         "%s needs %d more)",
                         (long long)t->max_slices, t->slices, want,
                         J->min_slices);
            break;
        case SCHED_WAIT_NO_SLICE:
            if (J->mask)
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
    }
}
