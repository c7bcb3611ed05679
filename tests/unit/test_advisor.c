/* Unit tests for jobs/advisor: the replay of a demand trace on the real
 * scheduler (a tiny trace whose figures are computed by hand, a request
 * no slot of the layout fits, a training job preempted by a serving one),
 * the enumeration of MIG partitions (every one valid and maximal, none
 * twice, the same set as a brute force over all instance subsets, known
 * members), and the search (3g demand gets 3g slices; no demand keeps
 * today's layout). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "jobs/advisor.h"

static const sched_config CFG = {.backfill_wait = 300,
                                 .preempt = 1,
                                 .preempt_wait = 60,
                                 .serving_preempt = 1,
                                 .max_cpu_jobs = -1,
                                 .max_serving = 16,
                                 .max_serving_per_tenant = -1,
                                 .fair_window = 600};

static adv_layout layout_of(const char *model, const char *const *profiles,
                            const int *starts, int n)
{
    adv_layout l = {.model = mig_model_find(model), .mig = n > 0, .n = n};
    for (int i = 0; i < n; i++) {
        l.inst[i].profile = mig_profile_find(l.model, profiles[i]);
        assert_non_null(l.inst[i].profile);
        l.inst[i].start = starts[i];
    }
    return l;
}

/* gpu/sim/h100-mixed.json: 3g@4, 2g@0, 1g@2, 1g@3. */
static adv_layout h100_mixed(void)
{
    static const char *const p[] = {"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"};
    static const int s[] = {4, 0, 2, 3};
    return layout_of("H100-80GB", p, s, 4);
}

static adv_layout h100_7x1g(void)
{
    static const char *const p[] = {"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb",
                                    "1g.10gb", "1g.10gb", "1g.10gb"};
    static const int s[] = {0, 1, 2, 3, 4, 5, 6};
    return layout_of("H100-80GB", p, s, 7);
}

static adv_record prof(double at, int tenant, const char *profile, double dur,
                       int serving)
{
    adv_record r = {
        .arrival = at, .tenant = tenant, .duration = dur, .serving = serving};
    r.request.kind = SCHED_REQ_PROFILE;
    snprintf(r.request.profile, sizeof r.request.profile, "%s", profile);
    return r;
}

/* Two 3g jobs at once on a layout with one 3g slice: the second waits
 * the first's hour, 3 slices x 1 h = 3 queued slice-hours. A 1g job beside
 * them never waits. Held: 3 slices for 2 h and 1 slice for half an hour
 * of the 14 slice-hours of a 2 h window. */
static void test_replay_by_hand(void **state)
{
    (void)state;
    adv_layout g = h100_mixed();
    adv_record recs[] = {prof(0, 0, "3g.40gb", 3600, 0),
                         prof(0, 1, "3g.40gb", 3600, 0),
                         prof(0, 0, "1g.10gb", 1800, 0)};
    adv_result r;
    ty_err err = {0};
    assert_int_equal(adv_replay(&CFG, &g, 1, recs, 3, 0, 7200, &r, &err),
                     TY_OK);
    assert_int_equal(r.records, 3);
    assert_int_equal(r.served, 3);
    assert_int_equal(r.unservable, 0);
    assert_true(fabs(r.queued_slice_hours - 3.0) < 1e-9);
    assert_true(fabs(r.available_slice_hours - 14.0) < 1e-9);
    assert_true(fabs(r.held_slice_hours - 6.5) < 1e-9);
    assert_true(fabs(r.utilization - 6.5 / 14.0) < 1e-9);
    assert_true(fabs(r.mean_wait_s - 1200.0) < 1e-9);
    assert_true(fabs(r.p95_wait_s - 3600.0) < 1e-9);
    /* The same trace where it is still queued at the window's end: the
     * second job waits to t1 = 1800 s, 3 x 0.5 h. */
    assert_int_equal(adv_replay(&CFG, &g, 1, recs, 3, 0, 1800, &r, &err),
                     TY_OK);
    assert_true(fabs(r.queued_slice_hours - 1.5) < 1e-9);
    assert_int_equal(r.served, 2);
    /* Withdrawn (cancelled) after 1200 s in the queue: 3 x 1/3 h. */
    recs[1].withdraw = 1200;
    assert_int_equal(adv_replay(&CFG, &g, 1, recs, 3, 0, 7200, &r, &err),
                     TY_OK);
    assert_true(fabs(r.queued_slice_hours - 1.0) < 1e-9);
    assert_int_equal(r.served, 2);
    assert_true(fabs(r.held_slice_hours - 3.5) < 1e-9);
}

/* A 7g.80gb request that no slice of the mixed layout fits counts the
 * whole window (7200 s x 7 slices) and is reported unservable; the
 * same request on a GPU with MIG off is not (a profile asks for a MIG
 * device: still unservable) but "whole" is. */
static void test_replay_unservable(void **state)
{
    (void)state;
    adv_layout g = h100_mixed();
    adv_record recs[] = {prof(600, 0, "7g.80gb", 60, 0)};
    adv_result r;
    ty_err err = {0};
    assert_int_equal(adv_replay(&CFG, &g, 1, recs, 1, 0, 7200, &r, &err),
                     TY_OK);
    assert_int_equal(r.unservable, 1);
    assert_int_equal(r.served, 0);
    assert_true(fabs(r.unservable_slice_hours - 7200.0 * 7 / 3600) < 1e-9);
    assert_true(fabs(r.queued_slice_hours - 7200.0 * 7 / 3600) < 1e-9);

    adv_record whole = {.arrival = 600, .duration = 60};
    whole.request.kind = SCHED_REQ_MIN;
    whole.request.min_compute_slices = 7;
    assert_int_equal(adv_replay(&CFG, &g, 1, &whole, 1, 0, 7200, &r, &err),
                     TY_OK);
    assert_int_equal(r.unservable, 1);
    adv_layout off = {.model = mig_model_find("H100-80GB"), .mig = 0};
    assert_int_equal(adv_replay(&CFG, &off, 1, &whole, 1, 0, 7200, &r, &err),
                     TY_OK);
    assert_int_equal(r.unservable, 0);
    assert_int_equal(r.served, 1);
    assert_true(fabs(r.queued_slice_hours) < 1e-9);
}

/* A serving replica arriving at 100 s on a whole GPU a training job holds
 * preempts it at once; the training job resumes at 1100 s with its 3500 s
 * left: it waited 1000 s x 7 slices, and the GPU was held 4600 s. */
static void test_replay_serving_preempts_training(void **state)
{
    (void)state;
    adv_layout off = {.model = mig_model_find("H100-80GB"), .mig = 0};
    adv_record recs[2] = {
        {.arrival = 0, .tenant = 0, .duration = 3600},
        {.arrival = 100, .tenant = 1, .duration = 1000, .serving = 1}};
    recs[0].request.kind = SCHED_REQ_ANY;
    recs[1].request.kind = SCHED_REQ_ANY;
    adv_result r;
    ty_err err = {0};
    assert_int_equal(adv_replay(&CFG, &off, 1, recs, 2, 0, 7200, &r, &err),
                     TY_OK);
    assert_int_equal(r.preemptions, 1);
    assert_int_equal(r.served, 2);
    /* "any" is 1 slice whatever slot it got. */
    assert_true(fabs(r.queued_slice_hours - 1000.0 / 3600) < 1e-9);
    assert_true(fabs(r.held_slice_hours - 7 * 4600.0 / 3600) < 1e-9);
    assert_true(fabs(r.gpu_held_slice_hours[0] - 7 * 4600.0 / 3600) < 1e-9);
    /* Without serving preemption the replica waits for the training job. */
    sched_config c = CFG;
    c.serving_preempt = 0;
    assert_int_equal(adv_replay(&c, &off, 1, recs, 2, 0, 7200, &r, &err),
                     TY_OK);
    assert_int_equal(r.preemptions, 0);
    assert_true(fabs(r.queued_slice_hours - 3500.0 / 3600) < 1e-9);
}

/* A gang of two whole GPUs: on two GPUs with MIG off it runs at once and
 * holds 14 slices; with one of them cut into MIG slices it can never run
 * (14 slices x the whole window). */
static void test_replay_gang(void **state)
{
    (void)state;
    adv_layout off = {.model = mig_model_find("H100-80GB"), .mig = 0};
    adv_layout two[2] = {off, off};
    adv_record g = {.arrival = 0, .duration = 1800, .gang = 2};
    g.request.kind = SCHED_REQ_ANY;
    adv_result r;
    ty_err err = {0};
    assert_int_equal(adv_replay(&CFG, two, 2, &g, 1, 0, 3600, &r, &err), TY_OK);
    assert_int_equal(adv_record_slices(&g), 14);
    assert_int_equal(r.served, 1);
    assert_true(fabs(r.held_slice_hours - 7.0) < 1e-9);
    assert_true(fabs(r.gpu_held_slice_hours[0] - 3.5) < 1e-9);
    assert_true(fabs(r.gpu_held_slice_hours[1] - 3.5) < 1e-9);
    assert_true(fabs(r.utilization - 0.5) < 1e-9);
    two[1] = h100_mixed();
    assert_int_equal(adv_replay(&CFG, two, 2, &g, 1, 0, 3600, &r, &err), TY_OK);
    assert_int_equal(r.unservable, 1);
    assert_true(fabs(r.queued_slice_hours - 14.0) < 1e-9);
}

static void test_replay_bad_window(void **state)
{
    (void)state;
    adv_layout g = h100_mixed();
    adv_result r;
    ty_err err = {0};
    assert_int_equal(adv_replay(&CFG, &g, 1, NULL, 0, 10, 10, &r, &err),
                     TY_EINVAL);
}

/* Brute force: every subset of all (profile, start) candidates, kept when
 * mig_layout_check passes and nothing can be added. */
static int brute_maximal(const mig_model *m)
{
    mig_placed cand[64];
    int nc = 0;
    for (int p = 0; p < m->nprofiles; p++)
        for (int s = 0; s < MIG_MEMORY_SLICES; s++)
            if (m->profiles[p].starts & (1u << s) &&
                s + m->profiles[p].memory_slices <= MIG_MEMORY_SLICES)
                cand[nc++] = (mig_placed){&m->profiles[p], s};
    assert_true(nc <= 24);
    int count = 0;
    for (uint32_t mask = 1; mask < (1u << nc); mask++) {
        mig_placed set[32];
        int n = 0, bad;
        ty_err e = {0};
        if (__builtin_popcount(mask) > MIG_COMPUTE_SLICES)
            continue;
        for (int i = 0; i < nc; i++)
            if (mask & (1u << i))
                set[n++] = cand[i];
        if (mig_layout_check(m, set, n, &bad, &e) != TY_OK)
            continue;
        int maximal = 1;
        for (int i = 0; i < nc && maximal; i++) {
            if (mask & (1u << i))
                continue;
            set[n] = cand[i];
            maximal = mig_layout_check(m, set, n + 1, &bad, &e) != TY_OK;
        }
        count += maximal;
    }
    return count;
}

static int has_layout(const adv_layout *ls, int n, const adv_layout *want)
{
    for (int i = 0; i < n; i++)
        if (adv_layout_equal(&ls[i], want))
            return 1;
    return 0;
}

static void check_model(const char *name, int expect)
{
    const mig_model *m = mig_model_find(name);
    assert_non_null(m);
    static adv_layout ls[ADV_MAX_LAYOUTS];
    int n = adv_enumerate(m, ls, ADV_MAX_LAYOUTS);
    assert_true(n > 0 && n <= ADV_MAX_LAYOUTS);
    assert_int_equal(n, brute_maximal(m));
    assert_int_equal(n, expect);
    for (int i = 0; i < n; i++) {
        int bad;
        ty_err e = {0};
        assert_int_equal(mig_layout_check(m, ls[i].inst, ls[i].n, &bad, &e),
                         TY_OK);
        for (int j = 0; j < i; j++)
            assert_false(adv_layout_equal(&ls[i], &ls[j]));
    }
    /* Known members: seven 1g of the smallest memory, 4g + 3g, 7g, and
     * two 3g. */
    const mig_profile *p1 = &m->profiles[0], *p3 = &m->profiles[3],
                      *p4 = &m->profiles[4], *p7 = &m->profiles[5];
    adv_layout l = {.model = m, .mig = 1, .n = 7};
    for (int i = 0; i < 7; i++)
        l.inst[i] = (mig_placed){p1, i};
    assert_true(has_layout(ls, n, &l));
    l = (adv_layout){.model = m, .mig = 1, .n = 2};
    l.inst[0] = (mig_placed){p4, 0};
    l.inst[1] = (mig_placed){p3, 4};
    assert_true(has_layout(ls, n, &l));
    l.inst[0] = (mig_placed){p3, 0};
    assert_true(has_layout(ls, n, &l));
    l = (adv_layout){.model = m, .mig = 1, .n = 1};
    l.inst[0] = (mig_placed){p7, 0};
    assert_true(has_layout(ls, n, &l));
    /* Not maximal: a lone 3g. */
    l.inst[0] = (mig_placed){p3, 4};
    assert_false(has_layout(ls, n, &l));
}

static void test_enumerate_h100(void **state)
{
    (void)state;
    check_model("H100-80GB", 78);
}

static void test_enumerate_a100_40(void **state)
{
    (void)state;
    check_model("A100-40GB", 78);
}

static int count_profile(const adv_layout *l, const char *name)
{
    int c = 0;
    for (int i = 0; l->mig && i < l->n; i++)
        c += !strcmp(l->inst[i].profile->name, name);
    return c;
}

/* Only 3g jobs, on a GPU cut into seven 1g: every one is unservable
 * today; the advice cuts two 3g.40gb and serves them. */
static void test_search_3g_demand(void **state)
{
    (void)state;
    adv_layout cur = h100_7x1g(), adv;
    adv_record recs[12];
    for (int i = 0; i < 12; i++)
        recs[i] = prof(600.0 * i, i % 3, "3g.40gb", 1800, 0);
    adv_result rc, rb;
    ty_err err = {0};
    assert_int_equal(
        adv_search(&CFG, &cur, 1, recs, 12, 0, 86400, &adv, &rc, &rb, &err),
        TY_OK);
    assert_int_equal(rc.unservable, 12);
    assert_int_equal(rb.unservable, 0);
    assert_int_equal(count_profile(&adv, "3g.40gb"), 2);
    assert_true(rb.queued_slice_hours < rc.queued_slice_hours);
    int bad;
    assert_int_equal(mig_layout_check(adv.model, adv.inst, adv.n, &bad, &err),
                     TY_OK);
}

/* No demand: nothing to gain, the current layout stays. */
static void test_search_keeps_current(void **state)
{
    (void)state;
    adv_layout cur[2] = {h100_mixed(), h100_7x1g()}, adv[2];
    adv_result rc, rb;
    ty_err err = {0};
    assert_int_equal(
        adv_search(&CFG, cur, 2, NULL, 0, 0, 3600, adv, &rc, &rb, &err), TY_OK);
    assert_true(adv_layout_equal(&adv[0], &cur[0]));
    assert_true(adv_layout_equal(&adv[1], &cur[1]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_by_hand),
        cmocka_unit_test(test_replay_unservable),
        cmocka_unit_test(test_replay_serving_preempts_training),
        cmocka_unit_test(test_replay_gang),
        cmocka_unit_test(test_replay_bad_window),
        cmocka_unit_test(test_enumerate_h100),
        cmocka_unit_test(test_enumerate_a100_40),
        cmocka_unit_test(test_search_3g_demand),
        cmocka_unit_test(test_search_keeps_current),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
