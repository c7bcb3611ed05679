/*
 * sched_check.c - sched_check: recounts the books from the jobs and slots
 * and compares them with the counters the scheduler keeps (the invariants
 * listed in sched_internal.h). For tests; O(jobs + slots).
 */
#include <stdlib.h>

#include "jobs/sched_internal.h"

/* ---- invariants ---- */

#define CHECK(cond, ...)                                          \
    do {                                                          \
        if (!(cond))                                              \
            return ty_fail(err, TY_EINTERNAL, NULL, __VA_ARGS__); \
    } while (0)

/* Tenant t's counters against c (slices, share, jobs, queued, queued_gpu
 * recounted from the jobs), its quotas, lanes and list; *listed gets the
 * length of its list. */
static ty_status check_tenant(const sched *s, int t, const int *c,
                              size_t *listed, ty_err *err)
{
    const tenant_rec *n = &s->tenants[t];
    CHECK(c[0] == n->slices && c[1] == n->slices_share && c[2] == n->jobs &&
              c[3] == n->queued && c[4] == n->queued_gpu,
          "tenant %s's counters are wrong (slices %d/%d, share %d/%d, jobs "
          "%d/%d, "
          "queued %d/%d, gpu %d/%d)",
          n->id, n->slices, c[0], n->slices_share, c[1], n->jobs, c[2],
          n->queued, c[3], n->queued_gpu, c[4]);
    CHECK(n->max_slices < 0 || c[0] <= n->max_slices,
          "tenant %s holds %d slices, quota %lld", n->id, c[0],
          (long long)n->max_slices);
    CHECK(n->max_jobs < 0 || c[2] <= n->max_jobs,
          "tenant %s runs %d jobs, quota %lld", n->id, c[2],
          (long long)n->max_jobs);
    int lq = 0;
    for (int l = 0; l < n->nlanes; l++) {
        int k = 0;
        for (int j = n->lanes[l].head; j >= 0; j = s->jobs[j].lnext) {
            const job_rec *J = &s->jobs[j];
            CHECK(J->state == SCHED_JOB_QUEUED && J->lane == l &&
                      J->tenant == t,
                  "job %s in the wrong lane", J->id);
            CHECK(J->lnext < 0 || !sched_job_before(&s->jobs[J->lnext], J),
                  "lane %d of %s unsorted", l, n->id);
            k++;
        }
        CHECK(k == n->lanes[l].count, "lane %d of %s miscounted", l, n->id);
        lq += k;
    }
    CHECK(lq == c[3], "tenant %s: %d jobs in lanes, %d queued", n->id, lq,
          c[3]);
    size_t tl = 0;
    for (int j = n->thead; j >= 0; j = s->jobs[j].tnext) {
        const job_rec *J = &s->jobs[j];
        CHECK(J->state == SCHED_JOB_QUEUED || J->state == SCHED_JOB_PENDING,
              "job %s in %s's queue is not queued", J->id, n->id);
        CHECK(J->tnext < 0 || !sched_job_before(&s->jobs[J->tnext], J),
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
        if (J->slot < 0)
            (*cpu)++;
    }
    c[0] += cs;
    if (J->state != SCHED_JOB_STOPPING)
        c[1] += cs;
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
            CHECK(sl->cls == c, "slot %d in the wrong class",
                  s->classes[c].slots[i]);
            if (sl->holder < 0 && sl->reserved_for < 0)
                nfree++;
        }
        CHECK(nfree == s->classes[c].nfree, "class %d counts %d free, has %d",
              c, s->classes[c].nfree, nfree);
        if (nfree)
            avail |= 1ull << c;
    }
    CHECK(avail == s->avail, "free-class mask out of date");
    for (int i = 0; i < s->nslots; i++) {
        const slot_rec *sl = &s->slots[i];
        if (sl->holder >= 0) {
            CHECK(!sched_bad_job(s, sl->holder), "slot %d held by a freed job",
                  i);
            const job_rec *J = &s->jobs[sl->holder];
            CHECK(J->state == SCHED_JOB_RUNNING ||
                      J->state == SCHED_JOB_STOPPING,
                  "slot %d held by job %s which is not running", i, J->id);
            CHECK(J->slot == i, "slot %d held by job %s which is on slot %d", i,
                  J->id, J->slot);
        }
        if (sl->reserved_for >= 0) {
            CHECK(!sched_bad_job(s, sl->reserved_for),
                  "slot %d reserved for a freed job", i);
            const job_rec *J = &s->jobs[sl->reserved_for];
            CHECK(J->state == SCHED_JOB_PENDING && J->slot == i,
                  "slot %d reserved for job %s which is not pending on it", i,
                  J->id);
        }
    }
    return TY_OK;
}

ty_status sched_check(const sched *s, ty_err *err)
{
    ty_status st = check_slots(s, err);
    if (st != TY_OK)
        return st;
    int cpu = 0;
    size_t queued = 0, live = 0;
    /* per tenant: slices, share, jobs, queued, queued_gpu */
    int *cnt = calloc((size_t)s->ntenants * 5 + 1, sizeof *cnt);
    if (!cnt)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    for (int j = 0; j < s->job_cap && st == TY_OK; j++) {
        if (!s->jobs[j].in_use)
            continue;
        live++;
        st = check_job(s, j, &cnt[s->jobs[j].tenant * 5], &cpu, err);
    }
    for (int t = 0; t < s->ntenants && st == TY_OK; t++) {
        size_t listed = 0;
        st = check_tenant(s, t, &cnt[t * 5], &listed, err);
        queued += listed;
    }
    free(cnt);
    if (st != TY_OK)
        return st;
    CHECK(cpu == s->cpu_running, "CPU jobs counted %d, running %d",
          s->cpu_running, cpu);
    CHECK(s->cfg.max_cpu_jobs < 0 || cpu <= s->cfg.max_cpu_jobs,
          "too many CPU jobs");
    CHECK(queued == s->queued, "queue counted %zu, holds %zu", s->queued,
          queued);
    CHECK(live == s->live, "jobs counted %zu, hold %zu", s->live, live);
    for (int c = 0; c < s->nclasses; c++)
        CHECK(s->class_holder[c] < 0 || !sched_bad_job(s, s->class_holder[c]),
              "class %d held for a freed job", c);
    return TY_OK;
}
#undef CHECK
