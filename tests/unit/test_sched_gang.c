/* Unit tests for sched/'s gangs (issue 33): jobs of N whole GPUs placed all
 * at once, on one node unless they spread. Validation at submit; no partial
 * holds (a gang either holds all its members' slots or none), checked after
 * every pass of a long random workload with a fixed seed, which also bounds
 * every gang's wait once it heads its tenant's queue; the reservation that
 * lets a gang start within a stated bound while small jobs keep flowing on
 * the slots it cannot use (and, as a control, starvation without it);
 * backfill kept off the reserved node; quotas and fair share counting every
 * member; a preempted gang stopped whole, once (by fair share or by a
 * serving replica); interconnect domains; CPU gangs against max_cpu_jobs,
 * and their own reservation of CPU places; the queue report's sentence for
 * a gang. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/rng.h"
#include "sched/sched.h"

#define GIB (1ull << 30)

static const sched_config CFG = {.backfill_wait = 1e9,
                                 .preempt = 0,
                                 .preempt_wait = 0,
                                 .max_cpu_jobs = -1,
                                 .max_serving = -1,
                                 .max_serving_per_tenant = -1,
                                 .fair_window = 60};

/* nodes x per whole GPUs (MIG off), node ids 10, 11, ...; domain: GPUs of
 * one node alternate between domains 1 and 2 when `domains`. */
static size_t cluster(sched_slot *out, int nodes, int per, int domains)
{
    size_t n = 0;
    for (int k = 0; k < nodes; k++)
        for (int g = 0; g < per; g++)
            out[n++] = (sched_slot){.gpu = g,
                                    .compute_slices = 7,
                                    .memory_bytes = 80 * GIB,
                                    .node = 10 + k,
                                    .domain = domains ? 1 + g % 2 : 0};
    return n;
}

static sched *make(const sched_config *cfg, const sched_slot *sl, size_t n)
{
    ty_err err = {0};
    sched *s = sched_create(cfg, sl, n, &err);
    if (!s)
        fail_msg("sched_create: %s", err.msg);
    return s;
}

static int tenant(sched *s, const char *id, double w, int64_t slices,
                  int64_t jobs)
{
    int t = -1;
    ty_err err = {0};
    assert_int_equal(sched_tenant_set(s, id, w, slices, jobs, &t, &err), TY_OK);
    return t;
}

static sched_job_desc desc(const char *id, int t, int prio, double at,
                           sched_req_kind kind, int gang)
{
    return (sched_job_desc){.id = id,
                            .tenant = t,
                            .priority = prio,
                            .submit_time = at,
                            .request = {.kind = kind},
                            .gang = gang};
}

static int submit_d(sched *s, const sched_job_desc *d)
{
    int j = -1;
    ty_err err = {0};
    if (sched_job_submit(s, d, &j, &err) != TY_OK)
        fail_msg("submit %s: %s", d->id, err.msg);
    return j;
}

/* A GPU job of `gang` members (1: an ordinary job) wanting any slot. */
static int submit(sched *s, const char *id, int t, int prio, double at,
                  int gang)
{
    sched_job_desc d = desc(id, t, prio, at, SCHED_REQ_ANY, gang);
    return submit_d(s, &d);
}

static void check(const sched *s)
{
    ty_err err = {0};
    if (sched_check(s, &err) != TY_OK)
        fail_msg("invariant: %s", err.msg);
}

static sched_job_info info(const sched *s, int j)
{
    sched_job_info in;
    assert_int_equal(sched_job_get(s, j, &in), TY_OK);
    return in;
}

static void pass(sched *s, double now, sched_result *r)
{
    sched_pass(s, now, r);
    check(s);
}

/* Six singles of tenant t on slots 0..5 of cluster(sl, 2, 4, 0) (node
 * 10 full, node 11 with 2 free), placed by one pass whose result is *r;
 * their handles into single (may be NULL). */
static void place_six_singles(sched *s, int t, int *single, sched_result *r)
{
    char id[32];
    for (int i = 0; i < 6; i++) {
        snprintf(id, sizeof id, "job_s%d", i);
        int h = submit(s, id, t, 0, 0, 1);
        if (single)
            single[i] = h;
    }
    pass(s, 0, r);
    assert_int_equal(r->n_placements, 6);
}

/* How many slots job j holds, by scanning the slots (not its record). */
static int slots_held(const sched *s, size_t nslots, int j)
{
    int k = 0;
    for (size_t i = 0; i < nslots; i++)
        k += sched_slot_holder(s, (int)i) == j;
    return k;
}

static void expect_refused(sched *s, const sched_job_desc *d, const char *field)
{
    ty_err err = {0};
    assert_int_equal(sched_job_check(s, d, &err), TY_EINVAL);
    assert_string_equal(err.field, field);
    assert_true(err.msg[0] != 0);
    size_t before = sched_queued_count(s);
    memset(&err, 0, sizeof err);
    assert_int_equal(sched_job_submit(s, d, NULL, &err), TY_EINVAL);
    assert_string_equal(err.field, field);
    assert_int_equal(sched_queued_count(s), before);
    assert_int_equal(sched_job_find(s, d->id), -1);
}

/* ---- validation ---- */

static void test_gang_validation(void **state)
{
    (void)state;
    sched_slot sl[16];
    size_t n = cluster(sl, 2, 4, 0);
    /* and one GPU split into MIG slices, on node 10 */
    sl[n++] = (sched_slot){.gpu = 4,
                           .is_mig = 1,
                           .profile = "1g.10gb",
                           .compute_slices = 1,
                           .memory_bytes = 10 * GIB,
                           .node = 10};
    sched_config cfg = CFG;
    cfg.max_cpu_jobs = 4;
    sched *s = make(&cfg, sl, n);
    int a = tenant(s, "a", 1, -1, -1);
    int q = tenant(s, "q", 1, 21, -1); /* 3 whole GPUs */

    sched_job_desc d = desc("job_mig", a, 0, 0, SCHED_REQ_PROFILE, 2);
    snprintf(d.request.profile, sizeof d.request.profile, "1g.10gb");
    expect_refused(s, &d, "resources.gpu");
    d = desc("job_big", a, 0, 0, SCHED_REQ_ANY, 5); /* nodes have 4 */
    expect_refused(s, &d, "resources.gpus");
    d.gang_spread = 1; /* 8 whole GPUs in all: 5 fit when spread */
    ty_err err = {0};
    assert_int_equal(sched_job_check(s, &d, &err), TY_OK);
    d = desc("job_nine", a, 0, 0, SCHED_REQ_ANY, 9);
    d.gang_spread = 1;
    expect_refused(s, &d, "resources.gpus");
    d = desc("job_quota", q, 0, 0, SCHED_REQ_ANY, 4); /* 28 > 21 slices */
    expect_refused(s, &d, "resources.gpus");
    d = desc("job_q3", q, 0, 0, SCHED_REQ_ANY, 3);
    assert_int_equal(sched_job_check(s, &d, &err), TY_OK);
    d = desc("job_cpu", a, 0, 0, SCHED_REQ_NONE, 5); /* max_cpu_jobs 4 */
    expect_refused(s, &d, "resources.workers");
    d = desc("job_neg", a, 0, 0, SCHED_REQ_ANY, -2);
    expect_refused(s, &d, "gang");
    d = desc("job_srv", a, 0, 0, SCHED_REQ_ANY, 2);
    d.serving = 1;
    expect_refused(s, &d, "gang");
    sched_destroy(s);

    /* an inventory of MIG slices only: no gang at all */
    sched_slot mig[2] = {
        {0, 1, "3g.40gb", 3, 40 * GIB, 0, 0},
        {0, 1, "3g.40gb", 3, 40 * GIB, 0, 0},
    };
    s = make(&CFG, mig, 2);
    a = tenant(s, "a", 1, -1, -1);
    d = desc("job_g", a, 0, 0, SCHED_REQ_ANY, 2);
    expect_refused(s, &d, "resources.gpu");
    sched_destroy(s);
}

/* ---- all or nothing ---- */

static void test_gang_all_or_nothing(void **state)
{
    (void)state;
    sched_slot sl[8];
    size_t n = cluster(sl, 2, 4, 0);
    sched *s = make(&CFG, sl, n);
    int a = tenant(s, "a", 1, -1, -1), b = tenant(s, "b", 1, -1, -1);
    /* singles on 0..5, then the one on 3 ends: 0,1,2 (node 10) and 4,5
     * (node 11) held */
    int single[6];
    sched_result r;
    place_six_singles(s, a, single, &r);
    assert_int_equal(sched_job_remove(s, sched_slot_holder(s, 3)), TY_OK);
    /* 3 free: 1 on node 10, 2 on node 11; a gang of 3 must not start, nor
     * hold anything */
    int g = submit(s, "job_g", b, 0, 1, 3);
    for (int p = 0; p < 3; p++) {
        pass(s, 10 + p, &r);
        assert_int_equal(r.n_placements, 0);
        assert_int_equal(info(s, g).state, SCHED_JOB_QUEUED);
        assert_int_equal(slots_held(s, n, g), 0);
        assert_null(info(s, g).gang_slots);
    }
    /* free one on node 11: three there now */
    int on11 = -1;
    for (int i = 0; i < 6; i++)
        if (sched_job_get(s, single[i], &(sched_job_info){0}) == TY_OK &&
            info(s, single[i]).slot >= 4)
            on11 = single[i];
    assert_int_equal(sched_job_remove(s, on11), TY_OK);
    pass(s, 20, &r);
    assert_int_equal(r.n_placements, 1); /* one placement for the gang */
    assert_int_equal(r.placements[0].job, g);
    sched_job_info in = info(s, g);
    assert_int_equal(in.state, SCHED_JOB_RUNNING);
    assert_int_equal(in.gang, 3);
    assert_non_null(in.gang_slots);
    assert_int_equal(in.slot, in.gang_slots[0]);
    for (int m = 0; m < 3; m++) {
        assert_true(in.gang_slots[m] >= 4); /* node 11 */
        assert_int_equal(sched_slot_holder(s, in.gang_slots[m]), g);
    }
    assert_int_equal(slots_held(s, n, g), 3);
    /* it ends whole */
    assert_int_equal(sched_job_remove(s, g), TY_OK);
    assert_int_equal(slots_held(s, n, g), 0);
    check(s);
    sched_destroy(s);
}

static void test_gang_spread(void **state)
{
    (void)state;
    sched_slot sl[8];
    size_t n = cluster(sl, 2, 4, 0);
    sched *s = make(&CFG, sl, n);
    int a = tenant(s, "a", 1, -1, -1), b = tenant(s, "b", 1, -1, -1);
    sched_result r;
    place_six_singles(s, a, NULL, &r); /* slots 0..5 */
    /* free 2 on each node: 0, 1 and 6, 7 */
    for (int i = 0; i < 2; i++)
        assert_int_equal(sched_job_remove(s, sched_slot_holder(s, i)), TY_OK);
    int one = submit(s, "job_one", b, 0, 2, 4); /* must share a node */
    sched_job_desc d = desc("job_spread", b, 0, 2, SCHED_REQ_ANY, 4);
    d.gang_spread = 1;
    int spread = submit_d(s, &d);
    pass(s, 3, &r);
    assert_int_equal(r.n_placements, 1);
    assert_int_equal(r.placements[0].job, spread);
    assert_int_equal(info(s, one).state, SCHED_JOB_QUEUED);
    assert_int_equal(slots_held(s, n, one), 0);
    sched_job_info in = info(s, spread);
    int nodes[2] = {0, 0};
    for (int m = 0; m < 4; m++)
        nodes[in.gang_slots[m] >= 4]++;
    assert_int_equal(nodes[0], 2);
    assert_int_equal(nodes[1], 2);
    sched_destroy(s);
}

/* ---- interconnect domains ---- */

static void test_gang_domain(void **state)
{
    (void)state;
    sched_slot sl[8];
    size_t n = cluster(sl, 1, 8, 1); /* even GPUs domain 1, odd domain 2 */
    sched *s = make(&CFG, sl, n);
    int a = tenant(s, "a", 1, -1, -1);
    submit(s, "job_s", a, 0, 0, 1);
    sched_result r;
    pass(s, 0, &r);
    assert_int_equal(r.placements[0].slot, 0);
    /* free: domain 1 {2,4,6}, domain 2 {1,3,5,7}: a gang of 3 takes the
     * domain that holds it with the fewest free (best fit), not 1,2,3 */
    int g3 = submit(s, "job_g3", a, 0, 1, 3);
    pass(s, 1, &r);
    sched_job_info in = info(s, g3);
    assert_int_equal(in.state, SCHED_JOB_RUNNING);
    int want3[3] = {2, 4, 6};
    for (int m = 0; m < 3; m++)
        assert_int_equal(in.gang_slots[m], want3[m]);
    int g4 = submit(s, "job_g4", a, 0, 2, 4);
    pass(s, 2, &r);
    in = info(s, g4);
    assert_int_equal(in.state, SCHED_JOB_RUNNING);
    int want4[4] = {1, 3, 5, 7};
    for (int m = 0; m < 4; m++)
        assert_int_equal(in.gang_slots[m], want4[m]);
    sched_destroy(s);
}

/* ---- CPU gangs ---- */

static void test_gang_cpu(void **state)
{
    (void)state;
    sched_config cfg = CFG;
    cfg.max_cpu_jobs = 4;
    sched *s = make(&cfg, NULL, 0);
    int a = tenant(s, "a", 1, -1, -1);
    sched_job_desc d = desc("job_c1", a, 0, 0, SCHED_REQ_NONE, 1);
    int c1 = submit_d(s, &d);
    d = desc("job_c2", a, 0, 0, SCHED_REQ_NONE, 1);
    submit_d(s, &d);
    sched_result r;
    pass(s, 0, &r);
    assert_int_equal(r.n_placements, 2);
    d = desc("job_w3", a, 0, 1, SCHED_REQ_NONE, 3); /* 2 places free */
    int w = submit_d(s, &d);
    d = desc("job_c3", a, 0, 2, SCHED_REQ_NONE, 1);
    int c3 = submit_d(s, &d);
    pass(s, 3, &r);
    /* the gang does not fit; the single behind it may (backfill) */
    assert_int_equal(info(s, w).state, SCHED_JOB_QUEUED);
    assert_int_equal(r.n_placements, 1);
    assert_int_equal(r.placements[0].job, c3);
    sched_wait wt;
    assert_int_equal(sched_job_wait(s, w, &wt), TY_OK);
    assert_int_equal(wt.reason, SCHED_WAIT_NO_SLICE);
    assert_int_equal(sched_job_remove(s, c3), TY_OK);
    pass(s, 4, &r); /* 2 running of 4: the gang of 3 still waits */
    assert_int_equal(info(s, w).state, SCHED_JOB_QUEUED);
    assert_int_equal(r.n_placements, 0);
    assert_int_equal(sched_job_remove(s, sched_job_find(s, "job_c2")), TY_OK);
    pass(s, 5, &r);
    assert_int_equal(info(s, w).state, SCHED_JOB_RUNNING);
    /* it counts 3 of the 4 places: with c1, all are taken */
    d = desc("job_c4", a, 0, 6, SCHED_REQ_NONE, 1);
    int c4 = submit_d(s, &d);
    pass(s, 7, &r);
    assert_int_equal(r.n_placements, 0);
    assert_int_equal(info(s, c4).state, SCHED_JOB_QUEUED);
    assert_int_equal(info(s, c1).state, SCHED_JOB_RUNNING);
    /* requeued, it gives back all 3 and, older than c4, takes them again */
    ty_err err = {0};
    assert_int_equal(sched_job_requeue(s, w, &err), TY_OK);
    assert_int_equal(sched_job_wait(s, c4, &wt), TY_OK);
    assert_int_equal(wt.reason, SCHED_WAIT_SCHEDULING);
    pass(s, 8, &r);
    assert_int_equal(info(s, w).state, SCHED_JOB_RUNNING);
    assert_int_equal(info(s, c4).state, SCHED_JOB_QUEUED);
    /* it ends: all 3 places free again, c4 runs */
    assert_int_equal(sched_job_remove(s, w), TY_OK);
    pass(s, 9, &r);
    assert_int_equal(info(s, c4).state, SCHED_JOB_RUNNING);
    sched_destroy(s);
}

/* max_cpu_jobs 4, tenant a keeps CPU singles queued (each runs 20-30 s,
 * ends staggered), tenant b submits a CPU gang of 3 at t = 5. Returns when the
 * gang started, -1 never (by t = 600). */
static double run_cpu_reservation(double wait)
{
    sched_config cfg = CFG;
    cfg.max_cpu_jobs = 4;
    cfg.backfill_wait = wait;
    sched *s = make(&cfg, NULL, 0);
    int a = tenant(s, "a", 1, -1, -1), b = tenant(s, "b", 1, -1, -1);
    double end[64];
    int running[64], nrun = 0, seq = 0, g = -1;
    double started = -1;
    char id[32];
    for (double now = 0; now <= 600 && started < 0; now += 5) {
        for (int i = 0; i < nrun; i++)
            if (end[i] <= now) {
                assert_int_equal(sched_job_remove(s, running[i]), TY_OK);
                running[i] = running[nrun - 1];
                end[i--] = end[--nrun];
            }
        while (sched_queued_count(s) < (g >= 0 ? 11u : 10u)) {
            snprintf(id, sizeof id, "job_a%d", seq++);
            sched_job_desc d = desc(id, a, 0, now, SCHED_REQ_NONE, 1);
            submit_d(s, &d);
        }
        if (now == 5) {
            sched_job_desc d = desc("job_w", b, 0, now, SCHED_REQ_NONE, 3);
            g = submit_d(s, &d);
        }
        sched_result r;
        pass(s, now, &r);
        for (size_t i = 0; i < r.n_placements; i++) {
            if (r.placements[i].job == g) {
                started = now;
                continue;
            }
            running[nrun] = r.placements[i].job;
            /* staggered: at most two places free in one pass */
            end[nrun++] = now + 30 - 5 * (int)(i % 3);
        }
        if (g >= 0 && started < 0 && now >= 5 + wait) {
            /* CPU places are kept for it: singles say so */
            sched_wait w;
            int j1 = sched_job_find(s, "job_a0");
            for (int k = 0; j1 < 0 || info(s, j1).state != SCHED_JOB_QUEUED;
                 k++) {
                snprintf(id, sizeof id, "job_a%d", k);
                j1 = sched_job_find(s, id);
            }
            assert_int_equal(sched_job_wait(s, j1, &w), TY_OK);
            assert_int_equal(w.reason, SCHED_WAIT_RESERVED);
            assert_int_equal(w.other_job, g);
        }
    }
    sched_destroy(s);
    return started;
}

static void test_gang_cpu_reservation(void **state)
{
    (void)state;
    /* reserved at 5 + 50; the 4 running singles end within 30 s */
    double t = run_cpu_reservation(50);
    assert_true(t >= 0 && t <= 5 + 50 + 30 + 5);
    assert_true(run_cpu_reservation(1e9) < 0); /* control: starved */
}

/* ---- quotas and fair share ---- */

static void test_gang_quota_and_share(void **state)
{
    (void)state;
    sched_slot sl[8];
    size_t n = cluster(sl, 1, 8, 0);
    sched *s = make(&CFG, sl, n);
    int a = tenant(s, "a", 1, 28, -1), b = tenant(s, "b", 1, -1, -1);
    int g = submit(s, "job_g", a, 1, 0, 4);
    int a1 = submit(s, "job_a1", a, 0, 0, 1);
    sched_result r;
    pass(s, 0, &r);
    assert_int_equal(info(s, g).state, SCHED_JOB_RUNNING);
    int slices = 0, jobs = 0;
    sched_tenant_usage(s, a, &slices, &jobs, NULL);
    assert_int_equal(slices, 28); /* 4 members x 7 */
    assert_int_equal(jobs, 1);
    /* its quota is full: the single waits on it */
    assert_int_equal(info(s, a1).state, SCHED_JOB_QUEUED);
    sched_wait w;
    assert_int_equal(sched_job_wait(s, a1, &w), TY_OK);
    assert_int_equal(w.reason, SCHED_WAIT_QUOTA);
    assert_int_equal(w.quota, SCHED_QUOTA_GPU_SLICES);
    sched_destroy(s);

    /* fair share: a's gang holds 4 GPUs, so b (equal weight) gets all 4
     * free ones before a gets another */
    s = make(&CFG, sl, n);
    a = tenant(s, "a", 1, -1, -1);
    b = tenant(s, "b", 1, -1, -1);
    g = submit(s, "job_g", a, 0, 0, 4);
    pass(s, 0, &r);
    assert_int_equal(info(s, g).state, SCHED_JOB_RUNNING);
    char id[32];
    for (int i = 0; i < 4; i++) {
        snprintf(id, sizeof id, "job_a%d", i);
        submit(s, id, a, 0, 1, 1);
        snprintf(id, sizeof id, "job_b%d", i);
        submit(s, id, b, 0, 1, 1);
    }
    pass(s, 1, &r);
    assert_int_equal(r.n_placements, 4);
    for (size_t i = 0; i < r.n_placements; i++)
        assert_int_equal(info(s, r.placements[i].job).tenant, b);
    sched_destroy(s);
}

/* ---- preemption ---- */

static void test_gang_preempted_whole(void **state)
{
    (void)state;
    sched_slot sl[8];
    size_t n = cluster(sl, 2, 4, 0);
    sched_config cfg = CFG;
    cfg.preempt = 1;
    sched *s = make(&cfg, sl, n);
    int a = tenant(s, "a", 1, -1, -1);
    int b = tenant(s, "b", 1, -1, -1), c = tenant(s, "c", 1, -1, -1);
    /* a fills the 8 GPUs: a gang of 2 at priority 0, 6 singles at 1 */
    int g = submit(s, "job_g", a, 0, 0, 2);
    char id[32];
    for (int i = 0; i < 6; i++) {
        snprintf(id, sizeof id, "job_a%d", i);
        submit(s, id, a, 1, 0, 1);
    }
    sched_result r;
    pass(s, 0, &r);
    assert_int_equal(r.n_placements, 7);
    /* b and c each want one GPU: a is far above its third */
    int jb = submit(s, "job_b", b, 0, 10, 1);
    int jc = submit(s, "job_c", c, 0, 10, 1);
    pass(s, 20, &r);
    assert_int_equal(r.n_preemptions, 2);
    int gang_victim = 0;
    for (size_t i = 0; i < r.n_preemptions; i++)
        gang_victim += r.preemptions[i].victim == g;
    assert_int_equal(gang_victim, 1); /* one decision for the whole gang */
    assert_true(r.preemptions[0].victim != r.preemptions[1].victim);
    sched_job_info in = info(s, g);
    assert_int_equal(in.state, SCHED_JOB_STOPPING);
    assert_int_equal(slots_held(s, n, g), 2); /* both stop together */
    int benef = -1, gslot = -1;
    for (size_t i = 0; i < r.n_preemptions; i++)
        if (r.preemptions[i].victim == g) {
            benef = r.preemptions[i].job;
            gslot = r.preemptions[i].slot;
        }
    assert_true(benef == jb || benef == jc);
    assert_true(gslot == in.gang_slots[0] || gslot == in.gang_slots[1]);
    /* it requeues whole; the beneficiary takes its slot */
    ty_err err = {0};
    assert_int_equal(sched_job_requeue(s, g, &err), TY_OK);
    assert_int_equal(info(s, g).state, SCHED_JOB_QUEUED);
    assert_int_equal(slots_held(s, n, g), 0);
    pass(s, 30, &r);
    assert_int_equal(info(s, benef).state, SCHED_JOB_RUNNING);
    assert_int_equal(info(s, benef).slot, gslot);
    assert_int_equal(slots_held(s, n, g),
                     info(s, g).state == SCHED_JOB_QUEUED ? 0 : 2);
    sched_destroy(s);
}

/* A serving replica that only one member's GPU satisfies (the gang's
 * second slot) stops the whole gang, once. */
static void test_gang_serving_preempts(void **state)
{
    (void)state;
    sched_slot sl[2] = {
        {.compute_slices = 7, .memory_bytes = 40 * GIB, .node = 1},
        {.gpu = 1, .compute_slices = 7, .memory_bytes = 80 * GIB, .node = 1},
    };
    sched_config cfg = CFG;
    cfg.serving_preempt = 1;
    sched *s = make(&cfg, sl, 2);
    int a = tenant(s, "a", 1, -1, -1);
    int g = submit(s, "job_g", a, 0, 0, 2);
    sched_result r;
    pass(s, 0, &r);
    sched_job_info in = info(s, g);
    assert_int_equal(in.state, SCHED_JOB_RUNNING);
    assert_int_equal(in.gang_slots[1], 1);
    sched_job_desc d = desc("rep_x", a, 0, 1, SCHED_REQ_MIN, 1);
    d.request.min_memory_bytes = 60 * GIB;
    d.serving = 1;
    int rep = submit_d(s, &d);
    pass(s, 10, &r); /* checks the books: the replica pends on slot 1 */
    assert_int_equal(r.n_preemptions, 1);
    assert_int_equal(r.preemptions[0].victim, g);
    assert_int_equal(r.preemptions[0].slot, 1);
    assert_int_equal(info(s, g).state, SCHED_JOB_STOPPING);
    assert_int_equal(slots_held(s, 2, g), 2);
    ty_err err = {0};
    assert_int_equal(sched_job_requeue(s, g, &err), TY_OK);
    pass(s, 20, &r);
    assert_int_equal(info(s, rep).state, SCHED_JOB_RUNNING);
    assert_int_equal(info(s, rep).slot, 1);
    /* one GPU left: the gang of 2 waits whole */
    assert_int_equal(info(s, g).state, SCHED_JOB_QUEUED);
    assert_int_equal(slots_held(s, 2, g), 0);
    sched_destroy(s);
}

/* ---- reservation: bound, backfill, head-of-line ---- */

/* Node 10: 8 GPUs (the gang's), node 11: 4 (too small for it). Tenant a
 * keeps 20 single jobs queued, each running 50 s; tenant b submits a gang
 * of 8 at t = 5. Passes every 5 s until t = horizon. Returns when the gang
 * started (-1: never); *small_during counts singles placed on node 11
 * while the gang waited, *on_node10 singles placed on node 10 after the
 * reservation was due (submit + wait). */
static double run_reservation(double wait, double horizon, int *small_during,
                              int *on_node10)
{
    sched_slot sl[12];
    size_t n = cluster(sl, 1, 8, 0);
    n += cluster(sl + n, 1, 4, 0);
    for (size_t i = 8; i < n; i++)
        sl[i].node = 11;
    sched_config cfg = CFG;
    cfg.backfill_wait = wait;
    sched *s = make(&cfg, sl, n);
    int a = tenant(s, "a", 1, -1, -1), b = tenant(s, "b", 1, -1, -1);
    double end[64]; /* by job handle: when a running single ends */
    for (int i = 0; i < 64; i++)
        end[i] = -1;
    int seq = 0, g = -1;
    double started = -1;
    *small_during = *on_node10 = 0;
    char id[32];
    for (double now = 0; now <= horizon && started < 0; now += 5) {
        for (size_t i = 0; i < n; i++) {
            int j = sched_slot_holder(s, (int)i);
            if (j >= 0 && j != g && j < 64 && end[j] >= 0 && end[j] <= now) {
                end[j] = -1;
                assert_int_equal(sched_job_remove(s, j), TY_OK);
            }
        }
        while (sched_queued_count(s) < (g >= 0 ? 21u : 20u)) {
            snprintf(id, sizeof id, "job_a%d", seq++);
            submit(s, id, a, 0, now, 1);
        }
        if (now == 5)
            g = submit(s, "job_gang", b, 0, now, 8);
        sched_result r;
        pass(s, now, &r);
        for (size_t i = 0; i < r.n_placements; i++) {
            int j = r.placements[i].job;
            if (j == g) {
                started = now;
                continue;
            }
            assert_true(j < 64);
            /* staggered ends, so some slot frees every pass or two */
            end[j] = now + 50 - 5 * (j % 4);
            if (g >= 0 && r.placements[i].slot >= 8)
                (*small_during)++;
            if (g >= 0 && r.placements[i].slot < 8 && now >= 5 + wait)
                (*on_node10)++;
        }
        if (g >= 0 && started < 0) {
            assert_int_equal(info(s, g).state, SCHED_JOB_QUEUED);
            assert_int_equal(slots_held(s, n, g), 0);
        }
        /* job handles are reused after removal: keep end[] by handle */
    }
    if (g >= 0 && started < 0) {
        /* the report names the wait */
        sched_wait w;
        char buf[256];
        assert_int_equal(sched_job_wait(s, g, &w), TY_OK);
        sched_wait_describe(s, &w, buf, sizeof buf);
        assert_non_null(strstr(buf, "needs 8 whole GPUs on one node"));
    }
    sched_destroy(s);
    return started;
}

static void test_gang_reservation_bound(void **state)
{
    (void)state;
    int small, on10;
    /* with backfill_wait 60: reserved at t = 65, node 10's running jobs
     * end within 50 s, so the gang starts by 65 + 50 + 5 */
    double t = run_reservation(60, 1000, &small, &on10);
    assert_true(t >= 0);
    assert_true(t <= 120);
    assert_int_equal(on10, 0); /* nothing backfilled onto its node */
    assert_true(small > 0);    /* node 11 kept taking small jobs */
    /* control: without the bound, singles keep refilling node 10 and the
     * gang never finds 8 free at once */
    t = run_reservation(1e9, 1000, &small, &on10);
    assert_true(t < 0);
}

/* A reserving gang holds only the whole GPUs of its node: the node's MIG
 * slices keep taking small jobs, and a job that could use the held GPU
 * waits saying so. */
static void test_gang_reservation_spares_mig(void **state)
{
    (void)state;
    sched_slot sl[4] = {
        {0, 0, NULL, 7, 80 * GIB, 10, 0},
        {1, 0, NULL, 7, 80 * GIB, 10, 0},
        {2, 1, "3g.40gb", 3, 40 * GIB, 10, 0},
        {2, 1, "3g.40gb", 3, 40 * GIB, 10, 0},
    };
    sched_config cfg = CFG;
    cfg.backfill_wait = 0;
    sched *s = make(&cfg, sl, 4);
    int a = tenant(s, "a", 1, -1, -1), b = tenant(s, "b", 1, -1, -1);
    sched_job_desc d = desc("job_whole", a, 0, 0, SCHED_REQ_MIN, 1);
    d.request.min_compute_slices = 7;
    submit_d(s, &d);
    sched_result r;
    pass(s, 0, &r);
    assert_int_equal(r.placements[0].slot, 0);
    int g = submit(s, "job_g", b, 0, 1, 2); /* needs GPUs 0 and 1 */
    int sm[3];
    char id[32];
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof id, "job_s%d", i);
        d = desc(id, a, 0, 1, SCHED_REQ_MIN, 1);
        d.request.min_memory_bytes = 30 * GIB; /* a MIG slice or a GPU */
        sm[i] = submit_d(s, &d);
    }
    pass(s, 1, &r);
    assert_int_equal(info(s, g).state, SCHED_JOB_QUEUED);
    assert_int_equal(slots_held(s, 4, g), 0);
    assert_int_equal(r.n_placements, 2);
    for (size_t i = 0; i < r.n_placements; i++)
        assert_true(r.placements[i].slot >= 2);    /* the MIG slices */
    assert_int_equal(sched_slot_holder(s, 1), -1); /* kept for the gang */
    sched_wait w;
    assert_int_equal(sched_job_wait(s, sm[2], &w), TY_OK);
    assert_int_equal(w.reason, SCHED_WAIT_RESERVED);
    assert_int_equal(w.other_job, g);
    char buf[256];
    assert_int_equal(sched_job_wait(s, g, &w), TY_OK);
    sched_wait_describe(s, &w, buf, sizeof buf);
    assert_non_null(strstr(buf, "node 10, reserved for it, has 1 free"));
    /* GPU 0 frees: the gang starts on both */
    assert_int_equal(sched_job_remove(s, sched_slot_holder(s, 0)), TY_OK);
    pass(s, 2, &r);
    assert_int_equal(info(s, g).state, SCHED_JOB_RUNNING);
    assert_int_equal(info(s, sm[2]).state, SCHED_JOB_QUEUED);
    sched_destroy(s);
}

/* A node where a serving replica holds one of the GPUs a gang needs is not
 * the one it reserves: the replica may never leave. */
static void test_gang_reservation_avoids_replicas(void **state)
{
    (void)state;
    sched_slot sl[4];
    size_t n = cluster(sl, 2, 2, 0); /* nodes 10 and 11, 2 GPUs each */
    sched_config cfg = CFG;
    cfg.backfill_wait = 0;
    sched *s = make(&cfg, sl, n);
    int a = tenant(s, "a", 1, -1, -1), b = tenant(s, "b", 1, -1, -1);
    sched_job_desc d = desc("rep_x", a, 0, 0, SCHED_REQ_ANY, 1);
    d.serving = 1;
    submit_d(s, &d); /* step 1 first: GPU 0 of node 10 */
    char id[32];
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof id, "job_s%d", i);
        submit(s, id, a, 0, 0, 1);
    }
    sched_result r;
    pass(s, 0, &r);
    assert_int_equal(r.n_placements, 4);
    int g = submit(s, "job_g", b, 0, 1, 2);
    pass(s, 1, &r);
    sched_wait w;
    char buf[256];
    assert_int_equal(sched_job_wait(s, g, &w), TY_OK);
    sched_wait_describe(s, &w, buf, sizeof buf);
    assert_non_null(strstr(buf, "node 11, reserved for it"));
    sched_destroy(s);
}

/* ---- the report ---- */

static void test_gang_report(void **state)
{
    (void)state;
    sched_slot sl[8];
    size_t n = cluster(sl, 2, 4, 0);
    sched *s = make(&CFG, sl, n);
    int a = tenant(s, "a", 1, -1, -1), b = tenant(s, "b", 1, -1, -1);
    sched_result r;
    place_six_singles(s, a, NULL, &r); /* node 10 full, node 11 has 2 free */
    int g = submit(s, "job_g", b, 0, 1, 4);
    pass(s, 1, &r);
    sched_wait w[8];
    size_t k = sched_queue_report(s, w, 8);
    assert_int_equal(k, 1);
    assert_int_equal(w[0].job, g);
    assert_int_equal(w[0].reason, SCHED_WAIT_NO_SLICE);
    char buf[256];
    sched_wait_describe(s, &w[0], buf, sizeof buf);
    assert_non_null(strstr(buf, "needs 4 whole GPUs on one node"));
    assert_non_null(strstr(buf, "node 11 has 2 free"));
    sched_wait_summary(s, &w[0], buf, sizeof buf);
    assert_non_null(strstr(buf, "4 whole GPUs on one machine"));
    assert_null(strstr(buf, "node"));
    sched_destroy(s);
}

/* ---- recovery ---- */

static void test_gang_restore(void **state)
{
    (void)state;
    sched_slot sl[8];
    size_t n = cluster(sl, 2, 4, 0);
    sched *s = make(&CFG, sl, n);
    int a = tenant(s, "a", 1, -1, -1);
    int g = submit(s, "job_g", a, 0, 0, 2);
    ty_err err = {0};
    int across[2] = {0, 4}, twice[2] = {1, 1}, ok[2] = {5, 6};
    assert_int_equal(sched_job_restore_gang(s, g, across, 2, 0, &err),
                     TY_EINVAL);
    assert_int_equal(sched_job_restore_gang(s, g, twice, 2, 0, &err),
                     TY_EINVAL);
    assert_int_equal(sched_job_restore_gang(s, g, ok, 1, 0, &err), TY_EINVAL);
    assert_int_equal(sched_job_restore_running(s, g, 5, 0, &err), TY_EINVAL);
    assert_int_equal(sched_job_restore_gang(s, g, ok, 2, 0, &err), TY_OK);
    assert_int_equal(slots_held(s, n, g), 2);
    assert_int_equal(sched_slot_holder(s, 6), g);
    check(s);
    sched_destroy(s);
}

/* ---- a random workload ---- */

#define RT 6    /* tenants */
#define RJ 4096 /* job handles tracked */

/* Every job either holds all its members' slots or none, by the slots
 * themselves; gangs of one node on one node. */
static void check_all_or_nothing(const sched *s, size_t nslots,
                                 const int *nodes)
{
    int held[RJ] = {0};
    int node_of[RJ];
    for (size_t i = 0; i < nslots; i++) {
        int j = sched_slot_holder(s, (int)i);
        if (j < 0)
            continue;
        assert_true(j < RJ);
        if (held[j]++ == 0)
            node_of[j] = nodes[i];
        sched_job_info in = info(s, j);
        if (!in.gang_spread && node_of[j] != nodes[i])
            fail_msg("gang %s on two nodes", in.id);
    }
    for (int j = 0; j < RJ; j++) {
        sched_job_info in;
        if (sched_job_get(s, j, &in) != TY_OK || in.request.kind == 0)
            continue;
        int want =
            in.state == SCHED_JOB_RUNNING || in.state == SCHED_JOB_STOPPING
                ? in.gang
                : 0;
        if (held[j] != want)
            fail_msg("job %s (%d members, state %d) holds %d slots", in.id,
                     in.gang, (int)in.state, held[j]);
    }
}

static void test_gang_random(void **state)
{
    (void)state;
    sched_slot sl[40];
    size_t n = cluster(sl, 4, 8, 1);
    int nodes[40];
    for (size_t i = 0; i < n; i++)
        nodes[i] = sl[i].node;
    const double W = 100, D = 60, STEP = 10;
    sched_config cfg = CFG;
    cfg.backfill_wait = W;
    cfg.preempt = 1;
    cfg.preempt_wait = 30;
    cfg.max_cpu_jobs = 6;
    sched *s = make(&cfg, sl, n);
    for (int t = 0; t < RT; t++) {
        char tid[8];
        snprintf(tid, sizeof tid, "t%d", t);
        tenant(s, tid, 1 + t % 3, t == 0 ? 56 : -1, t == 1 ? 5 : -1);
    }
    ty_rng rng;
    ty_rng_seed(&rng, 33, 1);
    static double end[RJ], head[RJ];
    static int is_gang[RJ];
    for (int j = 0; j < RJ; j++)
        end[j] = head[j] = -1;
    int seq = 0, gangs_started = 0, gangs_submitted = 0;
    double worst = 0;
    /* the bound: once at its tenant's head, a gang waits backfill_wait,
     * then at most every older reservation (one per tenant) and its own
     * node's jobs (each running at most D) before it starts */
    const double BOUND = W + (RT + 1) * D + 2 * STEP;
    sched_result r;
    for (double now = 0; now < 20000; now += STEP) {
        /* jobs end */
        for (int j = 0; j < RJ; j++) {
            sched_job_info in;
            if (end[j] < 0 || end[j] > now || sched_job_get(s, j, &in) != TY_OK)
                continue;
            end[j] = -1;
            if (in.state == SCHED_JOB_RUNNING || in.state == SCHED_JOB_STOPPING)
                assert_int_equal(sched_job_remove(s, j), TY_OK);
        }
        /* arrivals while the queue is short */
        while (sched_queued_count(s) < 30) {
            char id[32];
            snprintf(id, sizeof id, "job_%d", seq++);
            uint32_t k = ty_rng_below(&rng, 20);
            sched_job_desc d = desc(id, (int)ty_rng_below(&rng, RT),
                                    (int)ty_rng_below(&rng, 2), now,
                                    k == 0 ? SCHED_REQ_NONE : SCHED_REQ_ANY,
                                    k < 2   ? 1 + (int)ty_rng_below(&rng, 3)
                                    : k < 6 ? 2 + (int)ty_rng_below(&rng, 7)
                                            : 1);
            d.gang_spread = k == 5;
            ty_err err = {0};
            int j = -1;
            if (sched_job_submit(s, &d, &j, &err) != TY_OK)
                continue; /* a gang above its tenant's quota */
            assert_true(j < RJ);
            is_gang[j] = d.gang > 1;
            gangs_submitted += d.gang > 1 && d.request.kind != 0;
            end[j] = -1;
            head[j] = -1;
        }
        /* when each queued gang became its tenant's head */
        for (int j = 0; j < RJ; j++) {
            sched_job_info in;
            if (!is_gang[j] || sched_job_get(s, j, &in) != TY_OK)
                continue;
            head[j] = in.state == SCHED_JOB_QUEUED ? in.head_since : -1;
        }
        pass(s, now, &r);
        check_all_or_nothing(s, n, nodes);
        for (size_t i = 0; i < r.n_placements; i++) {
            int j = r.placements[i].job;
            end[j] = now + STEP + (double)ty_rng_below(&rng, (uint32_t)D);
            if (is_gang[j] && info(s, j).request.kind != SCHED_REQ_NONE) {
                gangs_started++;
                if (head[j] >= 0 && now - head[j] > worst)
                    worst = now - head[j];
            }
        }
        for (size_t i = 0; i < r.n_preemptions; i++) {
            int v = r.preemptions[i].victim;
            for (size_t k = 0; k < i; k++)
                assert_int_not_equal(r.preemptions[k].victim, v);
            ty_err err = {0}; /* it checkpoints and requeues at once */
            assert_int_equal(sched_job_requeue(s, v, &err), TY_OK);
            end[v] = -1;
        }
        check(s);
        check_all_or_nothing(s, n, nodes);
    }
    print_message("gangs: %d submitted, %d started, worst wait at the head "
                  "%.0f s (bound %.0f s)\n",
                  gangs_submitted, gangs_started, worst, BOUND);
    /* no gang waited past the bound once at its head */
    if (worst > BOUND)
        fail_msg("a gang waited %.0f s at its tenant's head, bound %.0f s",
                 worst, BOUND);
    assert_true(gangs_submitted > 50);
    assert_true(gangs_started > 50);
    sched_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gang_validation),
        cmocka_unit_test(test_gang_all_or_nothing),
        cmocka_unit_test(test_gang_spread),
        cmocka_unit_test(test_gang_domain),
        cmocka_unit_test(test_gang_cpu),
        cmocka_unit_test(test_gang_cpu_reservation),
        cmocka_unit_test(test_gang_quota_and_share),
        cmocka_unit_test(test_gang_preempted_whole),
        cmocka_unit_test(test_gang_serving_preempts),
        cmocka_unit_test(test_gang_reservation_bound),
        cmocka_unit_test(test_gang_reservation_spares_mig),
        cmocka_unit_test(test_gang_reservation_avoids_replicas),
        cmocka_unit_test(test_gang_report),
        cmocka_unit_test(test_gang_restore),
        cmocka_unit_test(test_gang_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
