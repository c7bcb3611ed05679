/* Unit tests for sched_slots_replace (sched/sched.h): a MIG layout change
 * as the job service makes it. Draining keeps the running job on its slot
 * and places nothing new there (nor promises it to anyone through a
 * preemption); the re-cut retires the GPU's old slots and appends the new
 * ones, so the other GPU's slots keep their indices and the jobs on them
 * their handles; a queued job whose profile is gone is dropped and named;
 * a held slot with no place in the new list is refused and changes
 * nothing; a stopping job stays stopping. Randomized: 4,000 steps of
 * training, serving, gang and CPU jobs submitted, passed, finished,
 * requeued and cancelled while GPU 0 is drained and re-cut over and over;
 * no placement or preemption ever lands on a draining or retired slot, a
 * dropped job is gone, and sched_check holds after every step. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "sched/sched.h"

#define GIB (1ull << 30)

static const sched_config CFG = {.backfill_wait = 1e9,
                                 .preempt = 1,
                                 .preempt_wait = 0,
                                 .serving_preempt = 1,
                                 .max_cpu_jobs = -1,
                                 .max_serving = -1,
                                 .max_serving_per_tenant = -1,
                                 .fair_window = 0};

/* GPU 0: H100 3g.40gb + 2g.20gb + 1g.10gb + 1g.10gb (slots 0-3);
 * GPU 1: H100 7g.80gb (slot 4). */
static size_t two_gpus(sched_slot *out)
{
    out[0] = (sched_slot){0, 1, "3g.40gb", 3, 40 * GIB, 0, 0};
    out[1] = (sched_slot){0, 1, "2g.20gb", 2, 20 * GIB, 0, 0};
    out[2] = (sched_slot){0, 1, "1g.10gb", 1, 10 * GIB, 0, 0};
    out[3] = (sched_slot){0, 1, "1g.10gb", 1, 10 * GIB, 0, 0};
    out[4] = (sched_slot){1, 1, "7g.80gb", 7, 80 * GIB, 0, 0};
    return 5;
}

static void check(const sched *s)
{
    ty_err err = {0};
    ty_status st = sched_check(s, &err);
    if (st != TY_OK)
        fail_msg("sched_check: %s", err.msg);
}

static sched_request req_profile(const char *p)
{
    sched_request r = {.kind = SCHED_REQ_PROFILE};
    snprintf(r.profile, sizeof r.profile, "%s", p);
    return r;
}

static int submit(sched *s, const char *id, int t, double at, sched_request r)
{
    sched_job_desc d = {.id = id, .tenant = t, .submit_time = at, .request = r};
    int h = -1;
    ty_err err = {0};
    assert_int_equal(sched_job_submit(s, &d, &h, &err), TY_OK);
    return h;
}

static sched_job_info info(const sched *s, int j)
{
    sched_job_info i;
    assert_int_equal(sched_job_get(s, j, &i), TY_OK);
    return i;
}

static size_t pass(sched *s, double now)
{
    sched_result r;
    sched_pass(s, now, &r);
    check(s);
    return r.n_placements;
}

/* GPU 0's slots draining, the rest as they were. */
static void drain_gpu0(sched *s)
{
    sched_slot sl[8];
    size_t n = two_gpus(sl);
    uint8_t st[8] = {0};
    for (int i = 0; i < 4; i++)
        st[i] = SCHED_SLOT_DRAINING;
    ty_err err = {0};
    size_t nd = 9;
    assert_int_equal(
        sched_slots_replace(s, sl, st, n, NULL, NULL, 0, &nd, &err), TY_OK);
    assert_int_equal(nd, 0);
    check(s);
}

/* GPU 0 re-cut into 7 x 1g.10gb as the job service does it: the first 4
 * new instances reuse its old indices 0-3, the other 3 are appended after
 * GPU 1's slot (5-7). */
static size_t recut_gpu0_7x1g(sched_slot *sl, uint8_t *st)
{
    two_gpus(sl);
    for (int i = 0; i < 4; i++)
        sl[i] = (sched_slot){0, 1, "1g.10gb", 1, 10 * GIB, 0, 0};
    for (int i = 5; i < 8; i++)
        sl[i] = (sched_slot){0, 1, "1g.10gb", 1, 10 * GIB, 0, 0};
    memset(st, 0, 8);
    return 8;
}

static void test_drain_keeps_running_places_nothing(void **state)
{
    (void)state;
    sched_slot sl[8];
    size_t n = two_gpus(sl);
    ty_err err = {0};
    sched *s = sched_create(&CFG, sl, n, &err);
    assert_non_null(s);
    int t = -1;
    assert_int_equal(sched_tenant_set(s, "a", 1, -1, -1, &t, &err), TY_OK);
    int a = submit(s, "job_a", t, 1, req_profile("3g.40gb"));
    assert_int_equal(pass(s, 2), 1);
    assert_int_equal(info(s, a).slot, 0);

    drain_gpu0(s);
    assert_int_equal(sched_slot_state(s, 0), SCHED_SLOT_DRAINING);
    assert_int_equal(sched_slot_state(s, 4), SCHED_SLOT_IN_USE);
    /* the running job is where it was, under the same handle */
    assert_int_equal(sched_job_find(s, "job_a"), a);
    assert_int_equal(info(s, a).state, SCHED_JOB_RUNNING);
    assert_int_equal(sched_slot_holder(s, 0), a);

    /* a 1g job may not take a draining slot: it waits; an "any" job
     * takes GPU 1, the only slot in use */
    int b = submit(s, "job_b", t, 3, req_profile("1g.10gb"));
    int c = submit(s, "job_c", t, 4, (sched_request){.kind = SCHED_REQ_ANY});
    assert_int_equal(pass(s, 5), 1);
    assert_int_equal(info(s, b).state, SCHED_JOB_QUEUED);
    assert_int_equal(info(s, c).slot, 4);
    /* the job ends: its slot stays empty */
    assert_int_equal(sched_job_remove(s, a), TY_OK);
    assert_int_equal(pass(s, 6), 0);
    assert_int_equal(sched_slot_holder(s, 0), -1);
    assert_int_equal(info(s, b).state, SCHED_JOB_QUEUED);
    sched_destroy(s);
}

static void test_drain_is_no_preemption_target(void **state)
{
    (void)state;
    sched_slot sl[8];
    size_t n = two_gpus(sl);
    ty_err err = {0};
    sched *s = sched_create(&CFG, sl, n, &err);
    assert_non_null(s);
    int t = -1, u = -1;
    assert_int_equal(sched_tenant_set(s, "a", 1, -1, -1, &t, &err), TY_OK);
    assert_int_equal(sched_tenant_set(s, "b", 1, -1, -1, &u, &err), TY_OK);
    int a = submit(s, "job_a", t, 1, req_profile("3g.40gb"));
    assert_int_equal(pass(s, 2), 1);
    drain_gpu0(s);
    /* a serving replica of the 3g profile would preempt job_a on an
     * ordinary slot; a draining one is nobody's */
    sched_job_desc d = {.id = "dep_r1",
                        .tenant = u,
                        .submit_time = 3,
                        .request = req_profile("3g.40gb"),
                        .serving = 1};
    int r = -1;
    assert_int_equal(sched_job_submit(s, &d, &r, &err), TY_OK);
    sched_result res;
    sched_pass(s, 4, &res);
    check(s);
    assert_int_equal(res.n_preemptions, 0);
    assert_int_equal(info(s, a).state, SCHED_JOB_RUNNING);
    assert_int_equal(info(s, r).state, SCHED_JOB_QUEUED);
    sched_destroy(s);
}

static void test_recut_keeps_other_gpu_and_drops_gone_profile(void **state)
{
    (void)state;
    sched_slot sl[8];
    size_t n = two_gpus(sl);
    ty_err err = {0};
    sched *s = sched_create(&CFG, sl, n, &err);
    assert_non_null(s);
    int t = -1;
    assert_int_equal(sched_tenant_set(s, "a", 1, -1, -1, &t, &err), TY_OK);
    int big = submit(s, "job_big", t, 1, req_profile("7g.80gb"));
    assert_int_equal(pass(s, 2), 1);
    assert_int_equal(info(s, big).slot, 4);
    drain_gpu0(s);
    int q3 = submit(s, "job_3g", t, 3, req_profile("3g.40gb"));
    int q1 = submit(s, "job_1g", t, 4, req_profile("1g.10gb"));
    (void)q3;
    assert_int_equal(pass(s, 5), 0);

    uint8_t st[8];
    n = recut_gpu0_7x1g(sl, st);
    char dropped[4][TY_ID_MAX];
    size_t nd = 0;
    assert_int_equal(
        sched_slots_replace(s, sl, st, n, NULL, dropped, 4, &nd, &err), TY_OK);
    check(s);
    /* no 3g.40gb is left: that job is the caller's to fail */
    assert_int_equal(nd, 1);
    assert_string_equal(dropped[0], "job_3g");
    assert_int_equal(sched_job_find(s, "job_3g"), -1);
    /* GPU 1's job: same slot, same handle */
    assert_int_equal(sched_job_find(s, "job_big"), big);
    assert_int_equal(info(s, big).slot, 4);
    assert_int_equal(info(s, big).state, SCHED_JOB_RUNNING);
    /* the 1g job runs on the new layout; six more fill it */
    assert_int_equal(sched_job_find(s, "job_1g"), q1);
    assert_int_equal(pass(s, 6), 1);
    assert_int_equal(info(s, q1).state, SCHED_JOB_RUNNING);
    char id[32];
    for (int i = 0; i < 7; i++) {
        snprintf(id, sizeof id, "job_more%d", i);
        submit(s, id, t, 7 + i, req_profile("1g.10gb"));
    }
    assert_int_equal(pass(s, 20), 6); /* 7 new 1g slots in all */
    assert_int_equal(sched_queued_count(s), 1);
    for (int i = 0; i < 8; i++)
        if (i != 4)
            assert_true(sched_slot_holder(s, i) >= 0);
    /* a new submission sees the new inventory: 3g is refused */
    sched_request r3 = req_profile("3g.40gb");
    assert_int_equal(sched_request_check(s, t, &r3, &err), TY_EINVAL);
    sched_destroy(s);
}

static void test_held_slot_without_place_is_refused(void **state)
{
    (void)state;
    sched_slot sl[8];
    size_t n = two_gpus(sl);
    ty_err err = {0};
    sched *s = sched_create(&CFG, sl, n, &err);
    assert_non_null(s);
    int t = -1;
    assert_int_equal(sched_tenant_set(s, "a", 1, -1, -1, &t, &err), TY_OK);
    int a = submit(s, "job_a", t, 1, req_profile("3g.40gb"));
    assert_int_equal(pass(s, 2), 1);
    uint8_t st[8];
    n = recut_gpu0_7x1g(sl, st);
    assert_int_equal(
        sched_slots_replace(s, sl, st, n, NULL, NULL, 0, NULL, &err),
        TY_ECONFLICT);
    assert_non_null(strstr(err.msg, "job_a"));
    assert_string_equal(err.field, "slots");
    check(s);
    assert_int_equal(info(s, a).slot, 0);
    assert_int_equal(sched_slot_state(s, 0), SCHED_SLOT_IN_USE);
    /* a retired state for a held slot is refused the same way */
    n = two_gpus(sl);
    memset(st, 0, sizeof st);
    st[0] = SCHED_SLOT_RETIRED;
    assert_int_equal(
        sched_slots_replace(s, sl, st, n, NULL, NULL, 0, NULL, &err),
        TY_ECONFLICT);
    check(s);
    sched_destroy(s);
}

static void test_retired_slots_take_nothing(void **state)
{
    (void)state;
    sched_slot sl[8];
    size_t n = two_gpus(sl);
    ty_err err = {0};
    sched *s = sched_create(&CFG, sl, n, &err);
    assert_non_null(s);
    int t = -1;
    assert_int_equal(sched_tenant_set(s, "a", 1, -1, -1, &t, &err), TY_OK);
    uint8_t st[8] = {SCHED_SLOT_RETIRED, SCHED_SLOT_RETIRED, SCHED_SLOT_RETIRED,
                     SCHED_SLOT_RETIRED, 0};
    assert_int_equal(
        sched_slots_replace(s, sl, st, n, NULL, NULL, 0, NULL, &err), TY_OK);
    check(s);
    assert_int_equal(sched_slot_state(s, 2), SCHED_SLOT_RETIRED);
    sched_request r1 = req_profile("1g.10gb");
    assert_int_equal(sched_request_check(s, t, &r1, &err), TY_EINVAL);
    /* the message lists what is left, not the retired slots */
    assert_null(strstr(err.msg, "1g.10gb ("));
    int any =
        submit(s, "job_any", t, 1, (sched_request){.kind = SCHED_REQ_ANY});
    assert_int_equal(pass(s, 2), 1);
    assert_int_equal(info(s, any).slot, 4);
    sched_destroy(s);
}

static void test_stopping_job_stays_stopping(void **state)
{
    (void)state;
    sched_slot sl[8];
    size_t n = two_gpus(sl);
    ty_err err = {0};
    sched *s = sched_create(&CFG, sl, n, &err);
    assert_non_null(s);
    int t = -1, u = -1;
    assert_int_equal(sched_tenant_set(s, "a", 1, -1, -1, &t, &err), TY_OK);
    assert_int_equal(sched_tenant_set(s, "b", 1, -1, -1, &u, &err), TY_OK);
    int a = submit(s, "job_a", t, 1, req_profile("7g.80gb"));
    assert_int_equal(pass(s, 2), 1);
    /* a replica preempts job_a on GPU 1: job_a stops, the replica is
     * pending on slot 4 */
    sched_job_desc d = {.id = "dep_r1",
                        .tenant = u,
                        .submit_time = 3,
                        .request = req_profile("7g.80gb"),
                        .serving = 1};
    int r = -1;
    assert_int_equal(sched_job_submit(s, &d, &r, &err), TY_OK);
    sched_result res;
    sched_pass(s, 4, &res);
    assert_int_equal(res.n_preemptions, 1);
    assert_int_equal(info(s, r).state, SCHED_JOB_PENDING);
    drain_gpu0(s);
    /* job_a still stops on slot 4; the replica waits in the queue again
     * and takes the slot once job_a has stopped */
    assert_int_equal(info(s, a).state, SCHED_JOB_STOPPING);
    assert_int_equal(info(s, a).slot, 4);
    assert_int_equal(info(s, r).state, SCHED_JOB_QUEUED);
    assert_int_equal(sched_job_requeue(s, a, &err), TY_OK);
    check(s);
    pass(s, 5);
    assert_int_equal(info(s, r).state, SCHED_JOB_RUNNING);
    assert_int_equal(info(s, r).slot, 4);
    sched_destroy(s);
}

/* ---- randomized: layout changes amid every kind of job ---- */

static uint64_t rng_state = 88172645463325252ull;
static unsigned rnd(unsigned n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (unsigned)(rng_state % n);
}

typedef struct {
    const char *profile;
    int slices;
    uint64_t gib;
} prof;

static const prof PROFS[] = {{"1g.10gb", 1, 10},
                             {"2g.20gb", 2, 20},
                             {"3g.40gb", 3, 40},
                             {"4g.40gb", 4, 40},
                             {"7g.80gb", 7, 80}};

/* GPU 0's layouts to re-cut into (profile indices; -1 ends; {-2}: MIG
 * off) */
static const int LAYOUTS[][8] = {
    {0, 0, 0, 0, 0, 0, 0, -1}, {2, 2, -1}, {3, 1, 0, -1}, {-2},
    {2, 1, 0, 0, -1},          {4, -1}};

static void test_random_changes_keep_invariants(void **state)
{
    (void)state;
    sched_slot sl[64];
    uint8_t st[64] = {0};
    size_t n = two_gpus(sl);
    /* GPUs 2 and 3: whole GPUs, for gangs of two */
    sl[n++] = (sched_slot){2, 0, NULL, 7, 80 * GIB, 0, 0};
    sl[n++] = (sched_slot){3, 0, NULL, 7, 80 * GIB, 0, 0};
    ty_err err = {0};
    sched *s = sched_create(&CFG, sl, n, &err);
    assert_non_null(s);
    int t[3];
    for (int i = 0; i < 3; i++) {
        char id[8];
        snprintf(id, sizeof id, "t%d", i);
        assert_int_equal(
            sched_tenant_set(s, id, 1 + i, i == 2 ? 10 : -1, -1, &t[i], &err),
            TY_OK);
    }
    char ids[4000][TY_ID_MAX];
    int nids = 0, draining = 0, recuts = 0, drains = 0, dropped_total = 0;
    double now = 1;
    for (int step = 0; step < 4000; step++, now += 1) {
        unsigned op = rnd(100);
        if (op < 30 && nids < 4000) {
            sched_job_desc d = {.tenant = t[rnd(3)],
                                .priority = (int)rnd(3),
                                .submit_time = now};
            unsigned k = rnd(10);
            if (k < 5)
                d.request = req_profile(PROFS[rnd(5)].profile);
            else if (k < 7)
                d.request = (sched_request){.kind = SCHED_REQ_ANY};
            else if (k < 8)
                d.request = (sched_request){.kind = SCHED_REQ_MIN,
                                            .min_compute_slices = 2};
            else
                d.request = (sched_request){.kind = SCHED_REQ_NONE};
            d.serving = rnd(7) == 0;
            if (!d.serving && d.request.kind == SCHED_REQ_ANY && rnd(4) == 0)
                d.gang = 2;
            snprintf(ids[nids], TY_ID_MAX, "%s%d", d.serving ? "rep_" : "job_",
                     step);
            d.id = ids[nids];
            if (sched_job_submit(s, &d, NULL, &err) == TY_OK)
                nids++;
        } else if (op < 55) {
            sched_result res;
            sched_pass(s, now, &res);
            for (size_t i = 0; i < res.n_placements; i++) {
                int slot = res.placements[i].slot;
                assert_int_equal(sched_slot_state(s, slot), SCHED_SLOT_IN_USE);
                sched_job_info info = {0};
                assert_int_equal(sched_job_get(s, res.placements[i].job, &info),
                                 TY_OK);
                for (int m = 0; info.gang_slots && m < info.gang; m++)
                    assert_int_equal(sched_slot_state(s, info.gang_slots[m]),
                                     SCHED_SLOT_IN_USE);
            }
            for (size_t i = 0; i < res.n_preemptions; i++)
                assert_int_equal(sched_slot_state(s, res.preemptions[i].slot),
                                 SCHED_SLOT_IN_USE);
        } else if (op < 90 && nids > 0) {
            int i = (int)rnd((unsigned)nids);
            int j = sched_job_find(s, ids[i]);
            sched_job_info info;
            if (j < 0 || sched_job_get(s, j, &info) != TY_OK)
                continue;
            if (info.state == SCHED_JOB_STOPPING ||
                (info.state == SCHED_JOB_RUNNING && !info.serving &&
                 rnd(3) == 0))
                assert_int_equal(sched_job_requeue(s, j, &err), TY_OK);
            else if (info.state != SCHED_JOB_QUEUED || rnd(4) == 0)
                assert_int_equal(sched_job_remove(s, j), TY_OK);
        } else if (op < 96) {
            /* GPU 0: drain, or re-cut once its slots are free */
            int idle = 1;
            for (size_t k = 0; k < n; k++)
                if (sl[k].gpu == 0 && sched_slot_holder(s, (int)k) >= 0)
                    idle = 0;
            if (!draining) {
                for (size_t k = 0; k < n; k++)
                    if (sl[k].gpu == 0 && st[k] != SCHED_SLOT_RETIRED)
                        st[k] = SCHED_SLOT_DRAINING;
                assert_int_equal(sched_slots_replace(s, sl, st, n, NULL, NULL,
                                                     0, NULL, &err),
                                 TY_OK);
                draining = 1;
                drains++;
            } else if (idle) {
                const int *lay = LAYOUTS[rnd(6)];
                sched_slot want[8];
                int nw = 0;
                if (lay[0] == -2)
                    want[nw++] = (sched_slot){0, 0, NULL, 7, 80 * GIB, 0, 0};
                for (int q = 0; lay[0] != -2 && lay[q] >= 0; q++)
                    want[nw++] = (sched_slot){0,
                                              1,
                                              PROFS[lay[q]].profile,
                                              PROFS[lay[q]].slices,
                                              PROFS[lay[q]].gib * GIB,
                                              0,
                                              0};
                int w = 0;
                for (size_t k = 0; k < n; k++) {
                    if (sl[k].gpu != 0)
                        continue;
                    if (w < nw) {
                        sl[k] = want[w++];
                        st[k] = SCHED_SLOT_IN_USE;
                    } else {
                        st[k] = SCHED_SLOT_RETIRED;
                    }
                }
                for (; w < nw; w++) {
                    sl[n] = want[w];
                    st[n++] = SCHED_SLOT_IN_USE;
                }
                char dropped[4000][TY_ID_MAX];
                size_t nd = 0;
                assert_int_equal(sched_slots_replace(s, sl, st, n, NULL,
                                                     dropped, 4000, &nd, &err),
                                 TY_OK);
                for (size_t q = 0; q < nd; q++)
                    assert_int_equal(sched_job_find(s, dropped[q]), -1);
                dropped_total += (int)nd;
                draining = 0;
                recuts++;
            }
        }
        check(s);
    }
    /* the run did what it set out to */
    assert_true(drains > 5);
    assert_true(recuts > 3);
    assert_true(n <= 64);
    print_message("drains %d, re-cuts %d, dropped %d, slots %zu\n", drains,
                  recuts, dropped_total, n);
    sched_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_drain_keeps_running_places_nothing),
        cmocka_unit_test(test_drain_is_no_preemption_target),
        cmocka_unit_test(test_recut_keeps_other_gpu_and_drops_gone_profile),
        cmocka_unit_test(test_held_slot_without_place_is_refused),
        cmocka_unit_test(test_retired_slots_take_nothing),
        cmocka_unit_test(test_stopping_job_stays_stopping),
        cmocka_unit_test(test_random_changes_keep_invariants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
