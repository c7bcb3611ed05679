/*
 * sched_check.c - sched_check: recounts the books from the jobs and slots
 * and compares them with the counters the scheduler keeps, and checks how
 * jobs of the two kinds stand to each other (the invariants listed in
 * sched_internal.h). For tests; O(jobs + slots).
 */
#include <stdlib.h>

#include "sched/sched_internal.h"

/* ---- invariants ---- */

#define CHECK(cond, ...)                                          \
    do {                                                          \
        if (!(cond))                                              \
            return ty_fail(err, TY_EINTERNAL, NULL, __VA_ARGS__); \
    } while (0)

#define NCOUNT \
    7 /* per tenant: slices, share, jobs, queued, gpu, serving \
                    queued, serving placed */

/* The jobs in lanes `lanes` (n of them, of kind `serving`) of tenant t, all
 * QUEUED, in their lane, sorted and counted right; *total gets how many. */
static ty_status check_lanes(const sched *s, int t, const lane_rec *lanes,
                             int n, int serving, int *total, ty_err *err)
{
    const tenant_rec *tn = &s->tenants[t];
    *total = 0;
    for (int l = 0; l < n; l++) {
        int k = 0;
        for (int j = lanes[l].head; j >= 0; j = s->jobs[j].lnext) {
            const job_rec *J = &s->jobs[j];
            CHECK(J->state == SCHED_JOB_QUEUED && J->lane == l &&
                      J->tenant == t && J->serving == serving,
                  "job %s in the wrong lane", J->id);
            CHECK(J->lnext < 0 || !sched_job_before(&s->jobs[J->lnext], J),
                  "lane %d of %s unsorted", l, tn->id);
            k++;
        }
        CHECK(k == lanes[l].count, "lane %d of %s miscounted", l, tn->id);
        *total += k;
    }
    return TY_OK;
}

/* Tenant t's counters against c (NCOUNT recounted from the jobs), its
 * quotas, lanes and list; *listed gets the length of its list. */
static ty_status check_tenant(const sched *s, int t, const int *c,
                              size_t *listed, ty_err *err)
{
    const tenant_rec *n = &s->tenants[t];
    CHECK(c[0] == n->slices && c[1] == n->slices_share && c[2] == n->jobs &&
              c[3] == n->queued && c[4] == n->queued_gpu &&
              c[5] == n->queued_srv,
          "tenant %s's counters are wrong (slices %d/%d, share %d/%d, jobs "
          "%d/%d, queued %d/%d, gpu %d/%d, serving %d/%d)",
          n->id, n->slices, c[0], n->slices_share, c[1], n->jobs, c[2],
          n->queued, c[3], n->queued_gpu, c[4], n->queued_srv, c[5]);
    CHECK(n->max_slices < 0 || c[0] <= n->max_slices,
          "tenant %s holds %d slices, quota %lld", n->id, c[0],
          (long long)n->max_slices);
    CHECK(n->max_jobs < 0 || c[2] <= n->max_jobs,
          "tenant %s runs %d jobs, quota %lld", n->id, c[2],
          (long long)n->max_jobs);
    CHECK(c[6] == n->serving, "tenant %s: %d serving jobs placed, counted %d",
          n->id, c[6], n->serving);
    CHECK(s->cfg.max_serving_per_tenant < 0 ||
              c[6] <= s->cfg.max_serving_per_tenant,
          "tenant %s holds %d serving places, its share is %d", n->id, c[6],
          s->cfg.max_serving_per_tenant);
    int lq = 0, sq = 0;
    ty_status st = check_lanes(s, t, n->lanes, n->nlanes, 0, &lq, err);
    if (st == TY_OK)
        st = check_lanes(s, t, n->slanes, n->nslanes, 1, &sq, err);
    if (st != TY_OK)
        return st;
    CHECK(lq == c[3], "tenant %s: %d jobs in lanes, %d queued", n->id, lq,
          c[3]);
    CHECK(sq == c[5], "tenant %s: %d jobs in serving lanes, %d queued", n->id,
          sq, c[5]);
    size_t tl = 0;
    for (int j = n->thead; j >= 0; j = s->jobs[j].tnext) {
        const job_rec *J = &s->jobs[j];
        CHECK(J->state == SCHED_JOB_QUEUED || J->state == SCHED_JOB_PENDING,
              "job %s in %s's queue is not queued", J->id, n->id);
        CHECK(J->tnext < 0 || !sched_list_before(&s->jobs[J->tnext], J),
              "queue of %s unsorted", n->id);
        tl++;
    }
    *listed = tl;
    return TY_OK;
}

/* Job j's slot agrees with its state and request; counts it into c. */
/* Gang j (RUNNING or STOPPING, on GPUs) holds all its members' slots,
 * each once, each satisfying it, on one node unless it spreads: all or
 * nothing. */
static ty_status check_gang(const sched *s, int j, ty_err *err)
{
    const job_rec *J = &s->jobs[j];
    CHECK(J->slot == J->gslots[0], "gang %s: slot is not its first member's",
          J->id);
    for (int m = 0; m < J->members; m++) {
        int i = J->gslots[m];
        CHECK(i >= 0 && i < s->nslots && s->slots[i].holder == j,
              "gang %s: member %d does not hold its slot %d", J->id, m, i);
        CHECK(!s->slots[i].is_mig && (J->mask & (1ull << s->slots[i].cls)),
              "gang %s: member %d is on slot %d which does not satisfy it",
              J->id, m, i);
        CHECK(J->spread || s->slots[i].node == s->slots[J->gslots[0]].node,
              "gang %s: members on several nodes", J->id);
        for (int k = 0; k < m; k++)
            CHECK(J->gslots[k] != i, "gang %s: slot %d twice", J->id, i);
    }
    return TY_OK;
}

static ty_status check_job(const sched *s, int j, int *c, int *cpu, ty_err *err)
{
    const job_rec *J = &s->jobs[j];
    int cs = J->state == SCHED_JOB_QUEUED ? 0 : sched_job_slices(s, J);
    CHECK(J->members == 1 || J->state != SCHED_JOB_PENDING,
          "gang %s is pending: gangs never preempt", J->id);
    if (J->state == SCHED_JOB_QUEUED) {
        CHECK(J->slot == -1, "queued job %s has a slot", J->id);
        if (J->serving) {
            c[5]++;
        } else {
            c[3]++;
            c[4] += J->mask != 0;
        }
        return TY_OK;
    }
    CHECK(!J->serving || J->state != SCHED_JOB_STOPPING,
          "serving job %s is stopping: serving jobs are never preempted",
          J->id);
    if (J->state == SCHED_JOB_STOPPING && J->preempted_for >= 0) {
        /* on one of its slots: a gang gives one member's */
        int p = J->preempted_for;
        CHECK(!sched_bad_job(s, p) && s->jobs[p].state == SCHED_JOB_PENDING &&
                  s->jobs[p].slot >= 0 && s->slots[s->jobs[p].slot].holder == j,
              "job %s stops for a job not pending on its slot %d", J->id,
              J->slot);
    }
    if (J->state == SCHED_JOB_PENDING && J->slot >= 0) {
        int v = s->slots[J->slot].holder;
        CHECK(v < 0 || (s->jobs[v].state == SCHED_JOB_STOPPING &&
                        s->jobs[v].preempted_for == j),
              "job %s pends on slot %d, held by job %s which is not stopping "
              "for it",
              J->id, J->slot, s->jobs[v].id);
        CHECK(v < 0 || !J->serving || !s->jobs[v].serving,
              "serving job %s pends on a slot freed by serving job %s", J->id,
              s->jobs[v].id);
    }
    CHECK(J->slot >= 0 || (J->mask == 0 && J->state != SCHED_JOB_PENDING),
          "GPU job %s has no slot", J->id);
    CHECK(J->slot < 0 || (J->mask & (1ull << s->slots[J->slot].cls)),
          "job %s is on slot %d which does not satisfy it", J->id, J->slot);
    if (J->state == SCHED_JOB_RUNNING || J->state == SCHED_JOB_STOPPING) {
        CHECK(J->slot < 0 || s->slots[J->slot].holder == j,
              "job %s is not the holder of its slot %d", J->id, J->slot);
        if (J->slot < 0 && !J->serving)
            (*cpu) += J->members;
        if (J->slot >= 0 && J->members > 1) {
            ty_status st = check_gang(s, j, err);
            if (st != TY_OK)
                return st;
        }
    }
    c[0] += cs;
    if (J->state != SCHED_JOB_STOPPING)
        c[1] += cs;
    if (J->serving)
        c[6]++;
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
            CHECK(sl->off == s->classes[c].off,
                  "slot %d and its class differ "
                  "in draining or retired",
                  s->classes[c].slots[i]);
            CHECK(!sl->off || sl->reserved_for < 0,
                  "slot %d is off but promised to a job",
                  s->classes[c].slots[i]);
            CHECK(sl->off != 2 || sl->holder < 0, "slot %d is retired but held",
                  s->classes[c].slots[i]);
            if (sl->holder < 0 && sl->reserved_for < 0 && !sl->off)
                nfree++;
        }
        CHECK(nfree == s->classes[c].nfree, "class %d counts %d free, has %d",
              c, s->classes[c].nfree, nfree);
        if (nfree)
            avail |= 1ull << c;
    }
    CHECK(avail == s->avail, "free-class mask out of date");
    int ghold[SCHED_MAX_CLASSES] = {0};
    for (int n = 0; n < s->nnodes; n++) {
        int g = s->node_holder[n];
        CHECK(g < 0 || (!sched_bad_job(s, g) &&
                        s->jobs[g].state == SCHED_JOB_QUEUED &&
                        s->jobs[g].members > 1 && s->jobs[g].resv_node == n),
              "node %d held for a job that is not a queued gang reserving it",
              s->node_id[n]);
        for (int c = 0; c < s->nclasses; c++) {
            int f = 0;
            for (int a = s->node_first[n]; a < s->node_first[n + 1]; a++) {
                const slot_rec *sl = &s->slots[s->node_slots[a]];
                f += sl->cls == c && sl->holder < 0 && sl->reserved_for < 0 &&
                     !sl->off;
            }
            CHECK(f == s->node_free[n * SCHED_MAX_CLASSES + c],
                  "node %d counts %d free of class %d, has %d", s->node_id[n],
                  s->node_free[n * SCHED_MAX_CLASSES + c], c, f);
            if (g >= 0 && ((s->jobs[g].mask >> c) & 1))
                ghold[c] += f;
        }
    }
    for (int c = 0; c < s->nclasses; c++)
        CHECK(ghold[c] == s->ghold_free[c],
              "class %d: %d free slots held for gangs, counted %d", c, ghold[c],
              s->ghold_free[c]);
    for (int i = 0; i < s->nslots; i++) {
        const slot_rec *sl = &s->slots[i];
        if (sl->holder >= 0) {
            CHECK(!sched_bad_job(s, sl->holder), "slot %d held by a freed job",
                  i);
            const job_rec *J = &s->jobs[sl->holder];
            CHECK(J->state == SCHED_JOB_RUNNING ||
                      J->state == SCHED_JOB_STOPPING,
                  "slot %d held by job %s which is not running", i, J->id);
            int on = J->slot == i;
            for (int m = 0; J->members > 1 && J->gslots && m < J->members; m++)
                on |= J->gslots[m] == i;
            CHECK(on, "slot %d held by job %s which is on slot %d", i, J->id,
                  J->slot);
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
    int *cnt = calloc((size_t)s->ntenants * NCOUNT + 1, sizeof *cnt);
    if (!cnt)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    for (int j = 0; j < s->job_cap && st == TY_OK; j++) {
        if (!s->jobs[j].in_use)
            continue;
        live++;
        st = check_job(s, j, &cnt[s->jobs[j].tenant * NCOUNT], &cpu, err);
    }
    int queued_srv = 0, serving = 0;
    for (int t = 0; t < s->ntenants && st == TY_OK; t++) {
        size_t listed = 0;
        st = check_tenant(s, t, &cnt[t * NCOUNT], &listed, err);
        queued += listed;
        queued_srv += cnt[t * NCOUNT + 5];
        serving += cnt[t * NCOUNT + 6];
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
    CHECK(queued_srv == s->queued_srv, "serving queue counted %d, holds %d",
          s->queued_srv, queued_srv);
    CHECK(serving == s->serving, "serving jobs placed %d, counted %d", serving,
          s->serving);
    CHECK(s->cfg.max_serving < 0 || serving <= s->cfg.max_serving,
          "%d serving jobs placed, max_serving %d", serving,
          s->cfg.max_serving);
    CHECK(live == s->live, "jobs counted %zu, hold %zu", s->live, live);
    CHECK(s->cpu_holder < 0 ||
              (!sched_bad_job(s, s->cpu_holder) &&
               s->jobs[s->cpu_holder].state == SCHED_JOB_QUEUED &&
               !s->jobs[s->cpu_holder].mask &&
               s->jobs[s->cpu_holder].members > 1),
          "CPU places kept for a job that is not a queued CPU gang");
    for (int c = 0; c < s->nclasses; c++)
        CHECK(s->class_holder[c] < 0 || !sched_bad_job(s, s->class_holder[c]),
              "class %d held for a freed job", c);
    return TY_OK;
}
#undef NCOUNT
#undef CHECK
