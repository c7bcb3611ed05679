/* Unit tests for gpu/sched: the scheduling policy on a simulated clock.
 * Best-fit choices; requests no slot could ever satisfy; long randomized
 * runs with training and serving jobs arriving, finishing, being cancelled
 * and preempted, the scheduler's invariants (sched_check) and an
 * independent model of the slots, quotas and serving guarantees checked
 * after every pass; fair share converging to the weights; backfill that
 * does not starve a big job (and, as a control, starvation without the
 * bound); preemption order and minimality; the reasons and positions of
 * queued jobs; serving jobs placed first, preempting training jobs (and
 * never preempted), within quotas, outside the CPU job limit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
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

/* ---- inventories ---- */

static size_t h200_7x1g(sched_slot *out)
{
    for (int i = 0; i < 7; i++)
        out[i] = (sched_slot){0, 1, "1g.18gb", 1, 16 * GIB, 0, 0};
    return 7;
}

/* H100-80GB split 3g.40gb + 2g.20gb + 1g.10gb + 1g.10gb */
static size_t h100_mixed(sched_slot *out)
{
    out[0] = (sched_slot){0, 1, "3g.40gb", 3, 40 * GIB, 0, 0};
    out[1] = (sched_slot){0, 1, "2g.20gb", 2, 20 * GIB, 0, 0};
    out[2] = (sched_slot){0, 1, "1g.10gb", 1, 10 * GIB, 0, 0};
    out[3] = (sched_slot){0, 1, "1g.10gb", 1, 10 * GIB, 0, 0};
    return 4;
}

static sched_request req_any(void)
{
    return (sched_request){.kind = SCHED_REQ_ANY};
}
static sched_request req_none(void)
{
    return (sched_request){.kind = SCHED_REQ_NONE};
}

static sched_request req_profile(const char *p)
{
    sched_request r = {.kind = SCHED_REQ_PROFILE};
    snprintf(r.profile, sizeof r.profile, "%s", p);
    return r;
}

static sched_request req_min(int slices, uint64_t mem)
{
    return (sched_request){.kind = SCHED_REQ_MIN,
                           .min_compute_slices = slices,
                           .min_memory_bytes = mem};
}

static int tenant(sched *s, const char *id, double w, int64_t slices,
                  int64_t jobs)
{
    int t = -1;
    ty_err err = {0};
    assert_int_equal(sched_tenant_set(s, id, w, slices, jobs, &t, &err), TY_OK);
    return t;
}

static int submit_kind(sched *s, const char *id, int t, int prio, double at,
                       sched_request r, int serving)
{
    int j = -1;
    ty_err err = {0};
    sched_job_desc d = {.id = id,
                        .tenant = t,
                        .priority = prio,
                        .submit_time = at,
                        .request = r,
                        .serving = serving};
    ty_status st = sched_job_submit(s, &d, &j, &err);
    if (st != TY_OK)
        fail_msg("submit %s: %s", id, err.msg);
    return j;
}

/* A training job. */
static int submit(sched *s, const char *id, int t, int prio, double at,
                  sched_request r)
{
    return submit_kind(s, id, t, prio, at, r, 0);
}

/* A serving replica. */
static int submit_srv(sched *s, const char *id, int t, int prio, double at,
                      sched_request r)
{
    return submit_kind(s, id, t, prio, at, r, 1);
}

static void check(const sched *s)
{
    ty_err err = {0};
    if (sched_check(s, &err) != TY_OK)
        fail_msg("invariant: %s", err.msg);
}

/* One pass; returns the slot of the single placement, or -1 if none (and
 * fails on more than one). */
static int pass1(sched *s, double now)
{
    sched_result r;
    sched_pass(s, now, &r);
    check(s);
    assert_true(r.n_placements <= 1);
    return r.n_placements ? r.placements[0].slot : -1;
}

static int state_of(const sched *s, int j)
{
    sched_job_info in;
    assert_int_equal(sched_job_get(s, j, &in), TY_OK);
    return (int)in.state;
}

static int slot_of(const sched *s, int j)
{
    sched_job_info in;
    assert_int_equal(sched_job_get(s, j, &in), TY_OK);
    return in.slot;
}

/* ---- best fit ---- */

static void test_best_fit(void **state)
{
    /* deliberately out of size order */
    sched_slot sl[8];
    sl[0] = (sched_slot){0, 0, NULL, 7, 40 * GIB, 0, 0}; /* whole A100 */
    sl[1] = (sched_slot){1, 1, "3g.40gb", 3, 40 * GIB, 0, 0};
    sl[2] = (sched_slot){1, 1, "2g.20gb", 2, 20 * GIB, 0, 0};
    sl[3] = (sched_slot){1, 1, "1g.10gb", 1, 10 * GIB, 0, 0};
    sl[4] = (sched_slot){1, 1, "1g.10gb", 1, 10 * GIB, 0, 0};
    ty_err err = {0};
    sched *s = sched_create(&CFG, sl, 5, &err);
    assert_non_null(s);
    int a = tenant(s, "ten_a", 1, -1, -1);

    submit(s, "j1", a, 0, 1, req_any());
    assert_int_equal(pass1(s, 1), 3); /* smallest, lowest index */
    submit(s, "j2", a, 0, 2, req_any());
    assert_int_equal(pass1(s, 2), 4);
    submit(s, "j3", a, 0, 3, req_any());
    assert_int_equal(pass1(s, 3), 2); /* 1g's gone: the 2g */
    submit(s, "j4", a, 0, 4, req_min(2, 0));
    assert_int_equal(pass1(s, 4), 1); /* 2g gone: the 3g */
    int j5 = submit(s, "j5", a, 0, 5, req_profile("1g.10gb"));
    assert_int_equal(pass1(s, 5), -1); /* both 1g's held */
    assert_int_equal(state_of(s, j5), SCHED_JOB_QUEUED);
    submit(s, "j6", a, 0, 6, req_min(0, 30 * GIB));
    assert_int_equal(pass1(s, 6), 0); /* only the whole GPU is left */
    /* a 1g frees: j5 takes it */
    assert_int_equal(sched_job_remove(s, sched_job_find(s, "j2")), TY_OK);
    assert_int_equal(pass1(s, 7), 4);
    assert_int_equal(slot_of(s, j5), 4);
    sched_destroy(s);

    /* memory breaks a tie of compute slices; profile picks its class */
    sl[0] = (sched_slot){0, 1, "1g.20gb", 1, 20 * GIB, 0, 0};
    sl[1] = (sched_slot){0, 1, "1g.10gb", 1, 10 * GIB, 0, 0};
    sl[2] = (sched_slot){0, 1, "1g.10gb", 1, 10 * GIB, 0, 0};
    sl[3] = (sched_slot){0, 1, "3g.40gb", 3, 40 * GIB, 0, 0};
    s = sched_create(&CFG, sl, 4, &err);
    assert_non_null(s);
    a = tenant(s, "ten_a", 1, -1, -1);
    submit(s, "k1", a, 0, 1, req_min(1, 15 * GIB));
    assert_int_equal(pass1(s, 1), 0); /* 1g.20gb, not the 3g */
    submit(s, "k2", a, 0, 2, req_any());
    assert_int_equal(pass1(s, 2), 1); /* less memory first */
    submit(s, "k3", a, 0, 3, req_profile("3g.40gb"));
    assert_int_equal(pass1(s, 3), 3);
    submit(s, "k4", a, 0, 4, req_min(1, 15 * GIB));
    assert_int_equal(pass1(s, 4), -1); /* the 1g.10gb is too small */
    submit(s, "k5", a, 0, 5, req_any());
    assert_int_equal(pass1(s, 5), 2); /* backfills past k4 */
    sched_destroy(s);
}

/* ---- impossible requests ---- */

static void test_impossible(void **state)
{
    sched_slot sl[8];
    ty_err err = {0};
    sched *s = sched_create(&CFG, sl, h200_7x1g(sl), &err);
    assert_non_null(s);
    int a = tenant(s, "ten_a", 1, -1, -1);
    int z = tenant(s, "ten_z", 1, 0, -1); /* CPU only */

    sched_request r = req_min(2, 0);
    assert_int_equal(sched_request_check(s, -1, &r, &err), TY_EINVAL);
    assert_string_equal(err.field, "resources.gpu");
    assert_non_null(
        strstr(err.msg,
               "no device of this host can satisfy at least 2 compute slices"));
    assert_non_null(strstr(err.msg, "7 x 1g.18gb"));
    r = req_min(1, 17 * GIB);
    assert_int_equal(sched_request_check(s, a, &r, &err), TY_EINVAL);
    r = req_profile("3g.71gb");
    assert_int_equal(sched_request_check(s, a, &r, &err), TY_EINVAL);
    assert_non_null(strstr(err.msg, "3g.71gb"));
    r = req_profile("");
    assert_int_equal(sched_request_check(s, a, &r, &err), TY_EINVAL);
    r = req_profile("1g.18gb");
    assert_int_equal(sched_request_check(s, a, &r, &err), TY_OK);
    r = req_any();
    assert_int_equal(sched_request_check(s, a, &r, &err), TY_OK);
    r = req_none();
    assert_int_equal(sched_request_check(s, z, &r, &err), TY_OK);
    /* above the tenant's slice quota */
    r = req_any();
    assert_int_equal(sched_request_check(s, z, &r, &err), TY_EINVAL);
    assert_non_null(strstr(err.msg, "max_gpu_slices quota of 0"));

    /* submit refuses it and queues nothing */
    sched_job_desc d = {
        .id = "big", .tenant = a, .submit_time = 0, .request = req_min(7, 0)};
    assert_int_equal(sched_job_submit(s, &d, NULL, &err), TY_EINVAL);
    assert_int_equal(sched_queued_count(s), 0);
    assert_int_equal(sched_job_find(s, "big"), -1);
    /* and a duplicate id */
    submit(s, "dup", a, 0, 0, req_any());
    d = (sched_job_desc){.id = "dup", .tenant = a, .request = req_any()};
    assert_int_equal(sched_job_submit(s, &d, NULL, &err), TY_EINVAL);
    assert_int_equal(sched_queued_count(s), 1);
    sched_destroy(s);

    /* a CPU-only host */
    s = sched_create(&CFG, NULL, 0, &err);
    assert_non_null(s);
    a = tenant(s, "ten_a", 1, -1, -1);
    r = req_any();
    assert_int_equal(sched_request_check(s, a, &r, &err), TY_EINVAL);
    assert_non_null(strstr(err.msg, "this host has no GPU"));
    submit(s, "cpu1", a, 0, 0, req_none());
    sched_result res;
    sched_pass(s, 0, &res);
    assert_int_equal(res.n_placements, 1);
    assert_int_equal(res.placements[0].slot, -1);
    sched_destroy(s);

    /* bad weights and slots */
    s = sched_create(&CFG, sl, h200_7x1g(sl), &err);
    assert_int_equal(sched_tenant_set(s, "t", 0, -1, -1, NULL, &err),
                     TY_EINVAL);
    assert_string_equal(err.field, "weight");
    assert_int_equal(sched_tenant_set(s, "t", NAN, -1, -1, NULL, &err),
                     TY_EINVAL);
    sched_destroy(s);
    sl[2].compute_slices = 0;
    assert_null(sched_create(&CFG, sl, 7, &err));
    assert_non_null(strstr(err.msg, "slot 2"));
}

/* ---- randomized runs: invariants after every pass ---- */

typedef struct {
    int live, tenant, slot, state; /* external model, by handle */
    int serving;
    double started; /* RUNNING: when placed */
    int from_queue; /* RUNNING: placed from the queue, not a pending job */
    double until;   /* RUNNING: finishes; STOPPING: stops */
    sched_request req;
} ext_job;

#define MAXJ 4096

static int satisfies(const sched_slot *sl, const sched_request *r)
{
    switch (r->kind) {
        case SCHED_REQ_NONE: return 0;
        case SCHED_REQ_ANY: return 1;
        case SCHED_REQ_PROFILE:
            return sl->is_mig && sl->profile &&
                   !strcmp(sl->profile, r->profile);
        case SCHED_REQ_MIN:
            return sl->compute_slices >= r->min_compute_slices &&
                   sl->memory_bytes >= r->min_memory_bytes;
    }
    return 0;
}

/* Whether model job e (QUEUED, serving, of a tenant holding `slices` and
 * `jobs`) is left waiting after the pass at `now` although step 1 should
 * have acted: a slot that fits it within its quotas is free, or was free
 * and given to a training job by this pass, or (serving_preempt) holds a
 * training job running since before this pass. Returns the slot, or -1. */
static int serving_missed(const ext_job *ext, const ext_job *e,
                          const sched_slot *sl, size_t ns, const int *holder,
                          const int *pending, int slices, int jobs, int64_t qs,
                          int64_t qj, int serving_preempt, double now)
{
    if (qj >= 0 && jobs >= qj)
        return -1;
    if (e->req.kind == SCHED_REQ_NONE)
        return 0; /* a CPU replica always runs within max_running_jobs */
    for (size_t i = 0; i < ns; i++) {
        if (!satisfies(&sl[i], &e->req) ||
            (qs >= 0 && slices + sl[i].compute_slices > qs))
            continue;
        if (holder[i] < 0 && !pending[i])
            return (int)i;
        if (holder[i] >= 0 && !ext[holder[i]].serving &&
            ext[holder[i]].started == now && ext[holder[i]].from_queue)
            return (int)i;
        if (serving_preempt && holder[i] >= 0 &&
            ext[holder[i]].state == SCHED_JOB_RUNNING &&
            !ext[holder[i]].serving && ext[holder[i]].started < now)
            return (int)i;
    }
    return -1;
}

/* A randomized run; serving: 0 no serving jobs, 1 a sixth of the jobs are
 * serving replicas (long-lived), serving_preempt off, 2 the same with it
 * on. Returns the preemptions (training and serving); *srv_preempted (may
 * be NULL) gets those made for serving jobs. */
static int random_run(uint64_t seed, int layout, int preempt, double backfill,
                      int serving, int *srv_preempted)
{
    static ext_job ext[MAXJ];
    memset(ext, 0, sizeof ext);
    sched_slot sl[32];
    size_t ns = 0;
    if (layout == 0)
        ns = h200_7x1g(sl);
    else if (layout == 1)
        ns = h100_mixed(sl);
    else {
        ns = h100_mixed(sl);
        ns += h200_7x1g(sl + ns);
        sl[ns++] = (sched_slot){2, 0, NULL, 7, 40 * GIB, 0, 0};
        sl[ns++] = (sched_slot){3, 0, NULL, 7, 40 * GIB, 0, 0};
    }
    sched_config cfg = {.backfill_wait = backfill,
                        .preempt = preempt,
                        .preempt_wait = 1,
                        .serving_preempt = serving == 2,
                        .max_cpu_jobs = 2,
                        .max_serving = -1,
                        .max_serving_per_tenant = -1,
                        .fair_window = 30};
    ty_err err = {0};
    sched *s = sched_create(&cfg, sl, ns, &err);
    assert_non_null(s);
    ty_rng rng;
    ty_rng_seed(&rng, seed, 0);
    int nt = 4;
    int64_t qs[4], qj[4];
    for (int t = 0; t < nt; t++) {
        char id[16];
        snprintf(id, sizeof id, "ten_%d", t);
        qs[t] =
            ty_rng_below(&rng, 3) == 0 ? -1 : (int64_t)ty_rng_below(&rng, 8);
        qj[t] = ty_rng_below(&rng, 3) == 0 ? -1
                                           : (int64_t)ty_rng_below(&rng, 6) + 1;
        assert_int_equal(
            tenant(s, id, 0.5 + ty_rng_below(&rng, 4), qs[t], qj[t]), t);
    }
    static const char *profiles[] = {"1g.18gb", "1g.10gb", "2g.20gb", "3g.40gb",
                                     "7g.80gb"};
    int holder[32];
    for (size_t i = 0; i < ns; i++)
        holder[i] = -1;
    int placed = 0, preempted = 0, refused = 0, seq = 0, srv_pre = 0;
    int srv_placed = 0;
    for (int step = 0; step < 4000; step++) {
        double now = step * 0.5;
        /* arrivals */
        int arrivals = (int)ty_rng_below(&rng, 3);
        for (int a = 0; a < arrivals; a++) {
            sched_request r;
            switch (ty_rng_below(&rng, 5)) {
                case 0: r = req_none(); break;
                case 1: r = req_any(); break;
                case 2: r = req_profile(profiles[ty_rng_below(&rng, 5)]); break;
                default:
                    r = req_min((int)ty_rng_below(&rng, 8),
                                (uint64_t)ty_rng_below(&rng, 48) * GIB);
            }
            int t = (int)ty_rng_below(&rng, (uint32_t)nt);
            if (sched_request_check(s, t, &r, &err) != TY_OK) {
                refused++;
                continue;
            }
            char id[24];
            snprintf(id, sizeof id, "job_%d", seq++);
            int srv = serving && ty_rng_below(&rng, 6) == 0;
            int j =
                submit_kind(s, id, t, (int)ty_rng_below(&rng, 3), now, r, srv);
            assert_true(j < MAXJ);
            assert_false(ext[j].live);
            ext[j] = (ext_job){1, t, -1, SCHED_JOB_QUEUED, srv, 0, 0, 0, r};
        }
        /* finishes, cancels, stops */
        for (int j = 0; j < MAXJ; j++) {
            ext_job *e = &ext[j];
            if (!e->live)
                continue;
            if (e->state == SCHED_JOB_RUNNING && now >= e->until) {
                assert_int_equal(sched_job_remove(s, j), TY_OK);
                if (e->slot >= 0)
                    holder[e->slot] = -1;
                e->live = 0;
            } else if (e->state == SCHED_JOB_STOPPING && now >= e->until) {
                assert_int_equal(sched_job_requeue(s, j, &err), TY_OK);
                holder[e->slot] = -1;
                e->slot = -1;
                e->state = SCHED_JOB_QUEUED;
            } else if (e->state == SCHED_JOB_QUEUED &&
                       ty_rng_below(&rng, 200) == 0) {
                assert_int_equal(sched_job_remove(s, j), TY_OK);
                e->live = 0;
            } else if (e->state == SCHED_JOB_PENDING &&
                       ty_rng_below(&rng, 50) == 0) {
                assert_int_equal(sched_job_remove(s, j), TY_OK); /* cancelled */
                e->live = 0;
            }
        }
        sched_result r;
        sched_pass(s, now, &r);
        check(s);
        for (size_t i = 0; i < r.n_preemptions; i++) {
            const sched_preemption *p = &r.preemptions[i];
            ext_job *v = &ext[p->victim], *b = &ext[p->job];
            assert_int_equal(v->state, SCHED_JOB_RUNNING);
            assert_int_equal(v->slot, p->slot);
            /* a serving job is never a victim; fair share preempts only
             * another tenant, serving preemption any tenant */
            assert_false(v->serving);
            if (b->serving) {
                assert_int_equal(serving, 2);
                srv_pre++;
            } else {
                assert_true(preempt);
                assert_int_not_equal(v->tenant, b->tenant);
            }
            assert_int_equal(b->state, SCHED_JOB_QUEUED);
            assert_true(satisfies(&sl[p->slot], &b->req));
            v->state = SCHED_JOB_STOPPING;
            v->until = now + 1 + ty_rng_below(&rng, 3);
            b->state = SCHED_JOB_PENDING;
            b->slot = p->slot;
            preempted++;
        }
        for (size_t i = 0; i < r.n_placements; i++) {
            const sched_placement *p = &r.placements[i];
            ext_job *e = &ext[p->job];
            assert_true(e->live);
            if (e->state == SCHED_JOB_PENDING)
                assert_int_equal(e->slot, p->slot);
            else
                assert_int_equal(e->state, SCHED_JOB_QUEUED);
            if (p->slot >= 0) {
                /* never double-booked, always a fitting slot */
                assert_int_equal(holder[p->slot], -1);
                assert_true(satisfies(&sl[p->slot], &e->req));
                holder[p->slot] = p->job;
            } else {
                assert_int_equal(e->req.kind, SCHED_REQ_NONE);
            }
            e->from_queue = e->state == SCHED_JOB_QUEUED;
            e->slot = p->slot;
            e->state = SCHED_JOB_RUNNING;
            e->started = now;
            e->until = now + 0.5 + ty_rng_below(&rng, 20);
            if (e->serving) {
                e->until += 20 + ty_rng_below(&rng, 40); /* long-lived */
                srv_placed++;
            }
            placed++;
        }
        /* quotas, counted independently: slots held or promised */
        int slices[4] = {0}, jobs[4] = {0}, cpu = 0;
        for (int j = 0; j < MAXJ; j++) {
            const ext_job *e = &ext[j];
            if (!e->live || e->state == SCHED_JOB_QUEUED)
                continue;
            jobs[e->tenant]++;
            if (e->slot >= 0)
                slices[e->tenant] += sl[e->slot].compute_slices;
            else if (!e->serving && (e->state == SCHED_JOB_RUNNING ||
                                     e->state == SCHED_JOB_STOPPING))
                cpu++; /* CPU replicas are outside max_cpu_jobs */
            if (e->serving)
                assert_int_not_equal(e->state, SCHED_JOB_STOPPING);
        }
        for (int t = 0; t < nt; t++) {
            if (qs[t] >= 0)
                assert_true(slices[t] <= qs[t]);
            if (qj[t] >= 0)
                assert_true(jobs[t] <= qj[t]);
        }
        assert_true(cpu <= 2);
        /* step 1 left no queued serving job beside a slot it could take */
        int pending[32] = {0};
        for (int j = 0; j < MAXJ; j++)
            if (ext[j].live && ext[j].state == SCHED_JOB_PENDING)
                pending[ext[j].slot] = 1;
        for (int j = 0; j < MAXJ; j++) {
            const ext_job *e = &ext[j];
            if (!e->live || !e->serving || e->state != SCHED_JOB_QUEUED)
                continue;
            int missed =
                serving_missed(ext, e, sl, ns, holder, pending,
                               slices[e->tenant], jobs[e->tenant],
                               qs[e->tenant], qj[e->tenant], serving == 2, now);
            if (missed >= 0)
                fail_msg("step %d: serving job %d waits beside slot %d", step,
                         j, missed);
        }
        /* every queued job gets a position and a reason */
        if (step % 97 == 0) {
            static sched_wait w[MAXJ];
            size_t n = sched_queue_report(s, w, MAXJ);
            assert_int_equal(n, sched_queued_count(s));
            int seen_training = 0;
            for (size_t i = 0; i < n; i++) {
                assert_int_equal(w[i].position, i + 1);
                char buf[256];
                sched_wait_describe(s, &w[i], buf, sizeof buf);
                assert_true(strlen(buf) > 5);
                sched_wait_summary(s, &w[i], buf, sizeof buf);
                assert_true(strlen(buf) > 5);
                const ext_job *e = &ext[w[i].job];
                if (e->state != SCHED_JOB_QUEUED)
                    continue;
                /* queued serving jobs come before every queued training
                 * job, and never wait on fair share or a reservation */
                if (e->serving) {
                    assert_false(seen_training);
                    assert_true(w[i].reason == SCHED_WAIT_QUOTA ||
                                w[i].reason == SCHED_WAIT_NO_SLICE);
                } else {
                    seen_training = 1;
                }
            }
        }
    }
    assert_true(placed > 500);
    if (serving)
        assert_true(srv_placed > 20);
    (void)refused;
    sched_destroy(s);
    if (srv_preempted)
        *srv_preempted = srv_pre;
    return preempted;
}

static void test_random_invariants(void **state)
{
    int preempted = 0, srv_only = 0, mixed = 0, srv_mixed = 0;
    for (uint64_t seed = 1; seed <= 3; seed++)
        for (int layout = 0; layout < 3; layout++) {
            int srv = 0;
            assert_int_equal(random_run(seed, layout, 0, 1e9, 0, NULL), 0);
            preempted += random_run(seed, layout, 1, 5, 0, NULL);
            /* serving jobs without serving_preempt: nothing preempted */
            assert_int_equal(random_run(seed, layout, 0, 5, 1, NULL), 0);
            /* serving preemption alone: every preemption is for a replica */
            int n = random_run(seed, layout, 0, 5, 2, &srv);
            assert_int_equal(n, srv);
            srv_only += srv;
            /* and beside fair share's */
            mixed += random_run(seed, layout, 1, 5, 2, &srv);
            srv_mixed += srv;
        }
    print_message("preemptions in the randomized runs: %d training only; "
                  "%d for replicas alone; %d with both, %d of them for "
                  "replicas\n",
                  preempted, srv_only, mixed, srv_mixed);
    assert_true(preempted > 20);
    assert_true(srv_only > 20);
    assert_true(srv_mixed > 20);
    assert_true(mixed - srv_mixed > 20);
}

/* ---- fair share under contention ---- */

static void fair_share_run(int preempt)
{
    sched_slot sl[8];
    sched_config cfg = CFG;
    cfg.preempt = preempt;
    ty_err err = {0};
    sched *s = sched_create(&cfg, sl, h200_7x1g(sl), &err);
    assert_non_null(s);
    const double w[3] = {1, 1, 2};
    for (int t = 0; t < 3; t++) {
        char id[16];
        snprintf(id, sizeof id, "t%d", t);
        tenant(s, id, w[t], -1, -1);
    }
    ty_rng rng;
    ty_rng_seed(&rng, 42, 1);
    static double until[MAXJ];
    static int tof[MAXJ];
    int queued[3] = {0}, seq = 0;
    double used[3] = {0};
    const double dt = 0.25;
    for (int step = 0; step < 40000; step++) {
        double now = step * dt;
        for (int t = 0; t < 3; t++)
            while (queued[t] < 10) {
                char id[24];
                snprintf(id, sizeof id, "j%d", seq++);
                int j = submit(s, id, t, 0, now, req_any());
                tof[j] = t;
                until[j] = -1;
                queued[t]++;
            }
        sched_result r;
        sched_pass(s, now, &r);
        for (size_t i = 0; i < r.n_preemptions; i++) {
            /* a preempted job stops at once and goes back to the queue */
            assert_int_equal(
                sched_job_requeue(s, r.preemptions[i].victim, &err), TY_OK);
            queued[tof[r.preemptions[i].victim]]++;
            until[r.preemptions[i].victim] = -1;
        }
        for (size_t i = 0; i < r.n_placements; i++) {
            int j = r.placements[i].job;
            until[j] = now + 1 + ty_rng_below(&rng, 16) * dt;
            queued[tof[j]]--;
        }
        if (step % 500 == 0)
            check(s);
        for (int i = 0; i < 7; i++) {
            int j = sched_slot_holder(s, i);
            if (j >= 0)
                used[tof[j]] += dt;
        }
        for (int i = 0; i < 7; i++) {
            int j = sched_slot_holder(s, i);
            if (j >= 0 && until[j] >= 0 && now + dt >= until[j]) {
                assert_int_equal(sched_job_remove(s, j), TY_OK);
            }
        }
    }
    double total = used[0] + used[1] + used[2];
    double f0 = used[0] / total, f1 = used[1] / total, f2 = used[2] / total;
    print_message(
        "fair share (preempt %d): %.3f %.3f %.3f (want .25 .25 .50)\n", preempt,
        f0, f1, f2);
    assert_true(fabs(f0 - 0.25) < 0.02);
    assert_true(fabs(f1 - 0.25) < 0.02);
    assert_true(fabs(f2 - 0.50) < 0.02);
    sched_destroy(s);
}

static void test_fair_share(void **state)
{
    fair_share_run(0);
    fair_share_run(1);
}

/* ---- backfill without starvation ---- */

/* Tenant A (weight 1) holds the 2g with a long job, so tenant B (weight
 * 10), which floods small jobs that fit any slot, is always ahead of it in
 * fair-share order; A's big job needs the 3g, which B's small jobs take
 * whenever it frees. Returns how long the big job waited, or -1 if it
 * never started. */
static double starvation_run(double backfill_wait)
{
    sched_slot sl[4];
    sched_config cfg = CFG;
    cfg.backfill_wait = backfill_wait;
    ty_err err = {0};
    sched *s = sched_create(&cfg, sl, h100_mixed(sl), &err);
    assert_non_null(s);
    int a = tenant(s, "ten_a", 1, -1, -1);
    int b = tenant(s, "ten_b", 10, -1, -1);
    static double until[MAXJ];
    int seq = 0, qb = 0, big = -1;
    double started = -1, submitted = 10;
    until[submit(s, "a_long", a, 0, 0, req_profile("2g.20gb"))] = 1e9;
    for (int step = 0; step < 2000 && started < 0; step++) {
        double now = step * 0.5;
        char id[24];
        while (step > 0 && qb < 20) {
            snprintf(id, sizeof id, "b%d", seq);
            until[submit(s, id, b, 0, now, req_any())] = 2.0 + (seq % 3) * 0.5;
            seq++;
            qb++;
        }
        if (now == submitted) {
            big = submit(s, "big", a, 5, now, req_min(3, 0));
            until[big] = 1e9;
        }
        sched_result r;
        sched_pass(s, now, &r);
        check(s);
        for (size_t i = 0; i < r.n_placements; i++) {
            int j = r.placements[i].job;
            if (j == big)
                started = now;
            if (r.placements[i].slot != 1)
                qb--;
            until[j] += now; /* duration -> end time */
        }
        for (int i = 0; i < 4; i++) {
            int j = sched_slot_holder(s, i);
            if (j >= 0 && now + 0.5 >= until[j])
                assert_int_equal(sched_job_remove(s, j), TY_OK);
        }
    }
    sched_destroy(s);
    return started < 0 ? -1 : started - submitted;
}

static void test_backfill_no_starvation(void **state)
{
    /* the control: without a bound the big job starves */
    assert_true(starvation_run(1e9) < 0);
    /* with a 10 s bound it starts within the bound plus one small job's
     * run (at most 3 s) plus a pass */
    double waited = starvation_run(10);
    print_message("big job waited %.1f s (bound 10 s)\n", waited);
    assert_true(waited >= 0);
    assert_true(waited <= 10 + 3 + 0.5);
}

/* ---- preemption ---- */

static void test_preemption_order(void **state)
{
    sched_slot sl[8];
    sched_config cfg = CFG;
    cfg.preempt = 1;
    ty_err err = {0};
    sched *s = sched_create(&cfg, sl, h200_7x1g(sl), &err);
    assert_non_null(s);
    int a = tenant(s, "ten_a", 1, -1, -1);
    int b = tenant(s, "ten_b", 1, -1, -1);
    const int prio[7] = {0, 0, 1, 2, 0, 1, 0};
    int aj[7];
    for (int i = 0; i < 7; i++) {
        char id[8];
        snprintf(id, sizeof id, "a%d", i);
        aj[i] = submit(s, id, a, prio[i], i, req_any());
        assert_int_equal(pass1(s, i), i);
    }
    int bj[4];
    for (int i = 0; i < 4; i++) {
        char id[8];
        snprintf(id, sizeof id, "b%d", i);
        bj[i] = submit(s, id, b, 0, 10, req_any());
    }
    /* lowest priority first, then most recently started: a6, a4, a1; then B
     * holds 3 of its 3.5-slice share and preempts no more */
    const int expect[3] = {6, 4, 1};
    for (int k = 0; k < 3; k++) {
        sched_result r;
        sched_pass(s, 10 + k, &r);
        check(s);
        if (k > 0) {
            /* the previous beneficiary took the freed slot */
            assert_int_equal(r.n_placements, 1);
            assert_int_equal(r.placements[0].job, bj[k - 1]);
        } else {
            assert_int_equal(r.n_placements, 0);
        }
        assert_int_equal(r.n_preemptions, 1); /* one is enough */
        assert_int_equal(r.preemptions[0].victim, aj[expect[k]]);
        assert_int_equal(r.preemptions[0].job, bj[k]);
        assert_int_equal(r.preemptions[0].slot, expect[k]);
        assert_int_equal(state_of(s, aj[expect[k]]), SCHED_JOB_STOPPING);
        assert_int_equal(state_of(s, bj[k]), SCHED_JOB_PENDING);
        /* the victim still holds its slot until it has stopped */
        assert_int_equal(sched_slot_holder(s, expect[k]), aj[expect[k]]);
        assert_int_equal(sched_job_requeue(s, aj[expect[k]], &err), TY_OK);
        /* requeued, it cannot take back the slot promised to b */
        check(s);
    }
    sched_result r;
    sched_pass(s, 13, &r);
    check(s);
    assert_int_equal(r.n_placements, 1);
    assert_int_equal(r.placements[0].job, bj[2]);
    assert_int_equal(r.n_preemptions, 0);
    sched_pass(s, 14, &r);
    assert_int_equal(r.n_preemptions, 0);
    int slices, jobs;
    sched_tenant_usage(s, a, &slices, &jobs, NULL);
    assert_int_equal(slices, 4);
    sched_tenant_usage(s, b, &slices, &jobs, NULL);
    assert_int_equal(slices, 3);
    sched_destroy(s);
}

static void test_preemption_minimal(void **state)
{
    /* the only victim that makes a 3g job fit is the one on the 3g, though
     * jobs of lower priority run elsewhere */
    sched_slot sl[4];
    sched_config cfg = CFG;
    cfg.preempt = 1;
    cfg.preempt_wait = 5;
    ty_err err = {0};
    sched *s = sched_create(&cfg, sl, h100_mixed(sl), &err);
    assert_non_null(s);
    int a = tenant(s, "ten_a", 1, -1, -1);
    int b = tenant(s, "ten_b", 1, -1, -1);
    int on3g = submit(s, "a_3g", a, 5, 0, req_profile("3g.40gb"));
    submit(s, "a_2g", a, 0, 0, req_profile("2g.20gb"));
    submit(s, "a_1", a, 0, 0, req_any());
    submit(s, "a_2", a, 0, 0, req_any());
    sched_result r;
    sched_pass(s, 0, &r);
    assert_int_equal(r.n_placements, 4);
    int bj = submit(s, "b_3g", b, 0, 1, req_profile("3g.40gb"));
    /* not before preempt_wait */
    sched_pass(s, 2, &r);
    assert_int_equal(r.n_preemptions, 0);
    sched_pass(s, 6, &r);
    assert_int_equal(r.n_preemptions, 1);
    assert_int_equal(r.preemptions[0].victim, on3g);
    assert_int_equal(r.preemptions[0].slot, 0);
    /* b's second 3g job would put b above its share: no more preemption;
     * a job of b's own tenant is never a victim */
    submit(s, "b_more", b, 9, 6, req_any());
    sched_pass(s, 20, &r);
    assert_int_equal(r.n_preemptions, 0);
    /* the victim finishes instead of stopping: b's job gets the slot */
    assert_int_equal(sched_job_remove(s, on3g), TY_OK);
    sched_pass(s, 21, &r);
    check(s);
    assert_int_equal(r.n_placements, 1);
    assert_int_equal(r.placements[0].job, bj);
    assert_int_equal(r.placements[0].slot, 0);

    /* a pending job cancelled: its slot goes to whoever fits next */
    sched_destroy(s);
    s = sched_create(&cfg, sl, h100_mixed(sl), &err);
    a = tenant(s, "ten_a", 1, -1, -1);
    b = tenant(s, "ten_b", 1, -1, -1);
    for (int i = 0; i < 4; i++) {
        char id[8];
        snprintf(id, sizeof id, "a%d", i);
        submit(s, id, a, 0, 0, req_any());
    }
    sched_pass(s, 0, &r);
    bj = submit(s, "b", b, 0, 0, req_min(3, 0));
    sched_pass(s, 10, &r);
    assert_int_equal(r.n_preemptions, 1);
    int victim = r.preemptions[0].victim;
    assert_int_equal(sched_job_remove(s, bj), TY_OK);
    check(s);
    assert_int_equal(sched_job_requeue(s, victim, &err), TY_OK);
    sched_pass(s, 11, &r);
    check(s);
    assert_int_equal(r.n_placements, 1);
    assert_int_equal(r.placements[0].job, victim);
    sched_destroy(s);
}

/* ---- reasons and positions ---- */

static const sched_wait *find_wait(const sched_wait *w, size_t n, int job)
{
    for (size_t i = 0; i < n; i++)
        if (w[i].job == job)
            return &w[i];
    fail_msg("job %d not in the report", job);
    return NULL;
}

static void test_reasons(void **state)
{
    sched_slot sl[4];
    sched_config cfg = CFG;
    cfg.max_cpu_jobs = 1;
    cfg.backfill_wait = 5;
    ty_err err = {0};
    sched *s = sched_create(&cfg, sl, h100_mixed(sl), &err);
    assert_non_null(s);
    int q = tenant(s, "ten_q", 1, -1, 1);  /* one job at a time */
    int r2 = tenant(s, "ten_r", 1, 1, -1); /* one slice */
    int c = tenant(s, "ten_c", 1, -1, -1);
    submit(s, "q1", q, 0, 0, req_profile("2g.20gb"));
    int q2 = submit(s, "q2", q, 0, 0, req_any());
    submit(s, "r1", r2, 0, 0, req_any());
    int r3 = submit(s, "r2", r2, 0, 0, req_any());
    submit(s, "cpu1", c, 0, 0, req_none());
    int cpu2 = submit(s, "cpu2", c, 0, 0, req_none());
    submit(s, "c1", c, 0, 0, req_any());
    int c3g = submit(s, "c3g", c, 0, 0, req_profile("3g.40gb"));
    sched_result res;
    sched_pass(s, 0, &res);
    /* q1 on the 2g, r1 on a 1g, c1 on a 1g, cpu1; c3g on the 3g */
    assert_int_equal(res.n_placements, 5);
    int big = submit(s, "c_big", c, 0, 1, req_min(3, 0));
    sched_pass(s, 1, &res);
    assert_int_equal(res.n_placements, 0);

    static sched_wait w[16];
    size_t n = sched_queue_report(s, w, 16);
    assert_int_equal(n, 4);
    const sched_wait *x = find_wait(w, n, q2);
    assert_int_equal(x->reason, SCHED_WAIT_QUOTA);
    assert_int_equal(x->quota, SCHED_QUOTA_RUNNING_JOBS);
    char buf[256];
    sched_wait_describe(s, x, buf, sizeof buf);
    assert_non_null(strstr(buf, "quota: max_running_jobs 1 reached"));
    sched_wait_summary(s, x, buf, sizeof buf);
    assert_string_equal(buf,
                        "Your tenant may run 1 job at once and 1 is running");
    x = find_wait(w, n, r3);
    assert_int_equal(x->reason, SCHED_WAIT_QUOTA);
    assert_int_equal(x->quota, SCHED_QUOTA_GPU_SLICES);
    sched_wait_describe(s, x, buf, sizeof buf);
    assert_non_null(strstr(buf, "max_gpu_slices 1"));
    x = find_wait(w, n, cpu2);
    assert_int_equal(x->reason, SCHED_WAIT_NO_SLICE);
    x = find_wait(w, n, big);
    /* c holds 4 slices, more than its 7/3 share, but q and r, the tenants
     * below theirs, wait on their quotas, not for slices: no free slice */
    assert_int_equal(x->reason, SCHED_WAIT_NO_SLICE);
    sched_wait_describe(s, x, buf, sizeof buf);
    assert_string_equal(buf, "no free slice of that size (needs at least 3 "
                             "compute slices and 0.0 GiB)");
    assert_string_equal(sched_wait_reason_name(SCHED_WAIT_NO_SLICE),
                        "no free slice of that size");

    /* a fourth tenant below its share waits too: now c waits on fair share */
    int d = tenant(s, "ten_d", 1, -1, -1);
    int d1 = submit(s, "d1", d, 0, 2, req_profile("3g.40gb"));
    sched_pass(s, 2, &res);
    n = sched_queue_report(s, w, 16);
    assert_int_equal(find_wait(w, n, big)->reason, SCHED_WAIT_FAIR_SHARE);
    assert_int_equal(find_wait(w, n, d1)->reason, SCHED_WAIT_NO_SLICE);

    /* c_big waits past the bound: it reserves the 3g; when c3g leaves,
     * d1 (ahead in fair share) may not take it */
    sched_pass(s, 10, &res);
    assert_int_equal(res.n_placements, 0);
    assert_int_equal(sched_job_remove(s, c3g), TY_OK);
    n = sched_queue_report(s, w, 16);
    x = find_wait(w, n, d1);
    assert_int_equal(x->reason, SCHED_WAIT_RESERVED);
    assert_int_equal(x->other_job, big);
    sched_wait_describe(s, x, buf, sizeof buf);
    assert_string_equal(
        buf, "reserved for job c_big: the free slots that fit are held for it");
    /* In a user's words, without the other job's id. */
    sched_wait_summary(s, x, buf, sizeof buf);
    assert_null(strstr(buf, "c_big"));
    assert_non_null(strstr(buf, "held for an older job"));
    assert_int_equal(find_wait(w, n, big)->reason, SCHED_WAIT_SCHEDULING);
    sched_pass(s, 11, &res);
    check(s);
    assert_int_equal(res.n_placements, 1);
    assert_int_equal(res.placements[0].job, big);
    sched_destroy(s);
}

static void test_positions(void **state)
{
    sched_slot sl[8];
    ty_err err = {0};
    sched_config cfg = CFG;
    cfg.preempt = 1;
    sched *s = sched_create(&cfg, sl, h200_7x1g(sl), &err);
    int a = tenant(s, "ten_a", 1, -1, -1);
    int b = tenant(s, "ten_b", 3, -1, -1);
    int aj[8], bj[8];
    for (int i = 0; i < 8; i++) {
        char id[8];
        snprintf(id, sizeof id, "a%d", i);
        aj[i] = submit(s, id, a, 0, i, req_any());
    }
    for (int i = 0; i < 8; i++) {
        char id[8];
        snprintf(id, sizeof id, "b%d", i);
        bj[i] = submit(s, id, b, 0, 10 + i, req_any());
    }
    /* a's high-priority job goes to the front of a's queue */
    int hi = submit(s, "a_hi", a, 3, 20, req_any());
    static sched_wait w[32];
    size_t n = sched_queue_report(s, w, 32);
    assert_int_equal(n, 17);
    /* fair share by weight 1:3 (ties: the older head first) */
    const char pattern[] = "babbabbbabbaaaaaa";
    int ai = 0, bi = 0;
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(w[i].position, i + 1);
        assert_int_equal(w[i].reason, SCHED_WAIT_SCHEDULING);
        if (pattern[i] == 'a') {
            int want = ai == 0 ? hi : aj[ai - 1];
            assert_int_equal(w[i].job, want);
            assert_int_equal(w[i].tenant_position, (size_t)ai + 1);
            ai++;
        } else {
            assert_int_equal(w[i].job, bj[bi]);
            assert_int_equal(w[i].tenant_position, (size_t)bi + 1);
            bi++;
        }
    }
    /* the pass places in that order: 7 slots */
    sched_result r;
    sched_pass(s, 30, &r);
    assert_int_equal(r.n_placements, 7);
    for (size_t i = 0; i < 7; i++)
        assert_int_equal(r.placements[i].job, w[i].job);
    /* a pending job comes first */
    int c = tenant(s, "ten_c", 4, -1, -1);
    int cj = submit(s, "c0", c, 0, 31, req_any());
    sched_pass(s, 31, &r);
    assert_int_equal(r.n_preemptions, 1);
    n = sched_queue_report(s, w, 32);
    assert_int_equal(w[0].job, cj);
    assert_int_equal(w[0].reason, SCHED_WAIT_PREEMPTING);
    assert_int_equal(w[0].other_job, r.preemptions[0].victim);
    char buf[256];
    sched_wait_describe(s, &w[0], buf, sizeof buf);
    assert_non_null(strstr(buf, "is checkpointing to free slot"));
    sched_destroy(s);
}

/* ---- serving jobs ---- */

/* Serving jobs go before training jobs of any tenant, priority or fair
 * share: priority, then submit time across tenants; reservations hold no
 * slot back from them. */
static void test_serving_first(void **state)
{
    sched_slot sl[8];
    ty_err err = {0};
    sched *s = sched_create(&CFG, sl, h200_7x1g(sl), &err);
    assert_non_null(s);
    int a = tenant(s, "ten_a", 1, -1, -1);
    int b = tenant(s, "ten_b", 10, -1, -1);
    int bj[7];
    for (int i = 0; i < 7; i++) {
        char id[8];
        snprintf(id, sizeof id, "b%d", i);
        bj[i] = submit(s, id, b, 9, 0, req_any());
    }
    for (int i = 0; i < 3; i++) {
        char id[8];
        snprintf(id, sizeof id, "a%d", i);
        submit(s, id, a, 5, 1, req_any());
    }
    int sa = submit_srv(s, "srv_a", a, 0, 3, req_any());
    int sb = submit_srv(s, "srv_b", b, 0, 2, req_any());
    int shi = submit_srv(s, "srv_hi", a, 2, 4, req_any());

    /* the report says so before the pass */
    static sched_wait w[16];
    size_t n = sched_queue_report(s, w, 16);
    assert_int_equal(n, 13);
    const int order[3] = {shi, sb, sa};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(w[i].job, order[i]);
        assert_int_equal(w[i].reason, SCHED_WAIT_SCHEDULING);
    }
    /* a's serving jobs head its queue, before its training jobs of higher
     * priority */
    assert_int_equal(w[0].tenant_position, 1);
    assert_int_equal(w[1].tenant_position, 1);
    assert_int_equal(w[2].tenant_position, 2);
    assert_int_equal(find_wait(w, n, bj[0])->tenant_position, 2);

    sched_result r;
    sched_pass(s, 5, &r);
    check(s);
    assert_int_equal(r.n_placements, 7);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(r.placements[i].job, order[i]);
        assert_int_equal(r.placements[i].slot, i); /* best fit, in order */
    }
    sched_job_info in;
    assert_int_equal(sched_job_get(s, shi, &in), TY_OK);
    assert_int_equal(in.serving, 1);
    assert_int_equal(in.state, SCHED_JOB_RUNNING);
    assert_int_equal(sched_job_get(s, bj[0], &in), TY_OK);
    assert_int_equal(in.serving, 0);

    /* a late replica of low priority waits for a slot (no serving_preempt),
     * first in line */
    int late = submit_srv(s, "srv_late", b, -3, 6, req_any());
    sched_pass(s, 6, &r);
    check(s);
    assert_int_equal(r.n_placements, 0);
    assert_int_equal(r.n_preemptions, 0);
    n = sched_queue_report(s, w, 16);
    assert_int_equal(w[0].job, late);
    assert_int_equal(w[0].reason, SCHED_WAIT_NO_SLICE);
    char buf[256];
    sched_wait_describe(s, &w[0], buf, sizeof buf);
    assert_string_equal(buf, "no free slice of that size (needs any GPU slot)");
    /* a slot frees: the replica takes it, not a's training jobs (a is far
     * below its share) nor b's (priority 9) */
    assert_int_equal(sched_job_remove(s, sched_slot_holder(s, 5)), TY_OK);
    assert_int_equal(pass1(s, 7), 5);
    assert_int_equal(state_of(s, late), SCHED_JOB_RUNNING);
    sched_destroy(s);

    /* an overdue training head reserves the 3g; a replica takes it anyway */
    sched_config cfg = CFG;
    cfg.backfill_wait = 0;
    s = sched_create(&cfg, sl, h100_mixed(sl), &err);
    assert_non_null(s);
    a = tenant(s, "ten_a", 1, -1, -1);
    b = tenant(s, "ten_b", 1, -1, -1);
    int c = tenant(s, "ten_c", 1, -1, -1);
    int a3g = submit(s, "a3g", a, 0, 0, req_profile("3g.40gb"));
    assert_int_equal(pass1(s, 0), 0);
    int big = submit(s, "big", b, 9, 1, req_min(3, 0));
    assert_int_equal(pass1(s, 1), -1);
    assert_int_equal(sched_job_remove(s, a3g), TY_OK);
    /* a training job of another tenant may not take it: it is reserved */
    int other = submit(s, "other", c, 0, 2, req_min(3, 0));
    n = sched_queue_report(s, w, 16);
    assert_int_equal(find_wait(w, n, big)->reason, SCHED_WAIT_SCHEDULING);
    assert_int_equal(find_wait(w, n, other)->reason, SCHED_WAIT_RESERVED);
    int srv = submit_srv(s, "srv", c, 0, 2, req_min(3, 0));
    n = sched_queue_report(s, w, 16);
    assert_int_equal(w[0].job, srv);
    assert_int_equal(w[0].reason, SCHED_WAIT_SCHEDULING);
    assert_int_equal(pass1(s, 2), 0);
    assert_int_equal(sched_slot_holder(s, 0), srv);
    assert_int_equal(state_of(s, big), SCHED_JOB_QUEUED);
    sched_destroy(s);

    /* across tenants, the best job that can still start goes first: once
     * b1 has the 3g, a's best (a1, priority 8) cannot start, and c1
     * (priority 5) goes before a2 (priority 1) */
    s = sched_create(&CFG, sl, h100_mixed(sl), &err);
    assert_non_null(s);
    a = tenant(s, "ten_a", 1, -1, -1);
    b = tenant(s, "ten_b", 1, -1, -1);
    c = tenant(s, "ten_c", 1, -1, -1);
    int b1 = submit_srv(s, "b1", b, 9, 0, req_profile("3g.40gb"));
    int a1 = submit_srv(s, "a1", a, 8, 0, req_profile("3g.40gb"));
    int a2 = submit_srv(s, "a2", a, 1, 0, req_any());
    int c1 = submit_srv(s, "c1", c, 5, 0, req_any());
    sched_pass(s, 0, &r);
    check(s);
    assert_int_equal(r.n_placements, 3);
    assert_int_equal(r.placements[0].job, b1);
    assert_int_equal(r.placements[0].slot, 0);
    assert_int_equal(r.placements[1].job, c1);
    assert_int_equal(r.placements[1].slot, 2);
    assert_int_equal(r.placements[2].job, a2);
    assert_int_equal(r.placements[2].slot, 3);
    assert_int_equal(state_of(s, a1), SCHED_JOB_QUEUED);
    sched_destroy(s);
}

/* Fills slot i of a 7 x 1g GPU with a job of tenant ten[i], priority
 * prio[i], serving when srv[i] (NULL: none), started at time i. */
static void fill_7(sched *s, const int *ten, const int *prio, const int *srv,
                   int *jobs)
{
    for (int i = 0; i < 7; i++) {
        char id[8];
        snprintf(id, sizeof id, "f%d", i);
        jobs[i] =
            submit_kind(s, id, ten[i], prio[i], i, req_any(), srv ? srv[i] : 0);
        assert_int_equal(pass1(s, i), i);
    }
}

/* A serving job that finds no free slot stops the lowest-priority, most
 * recently started training job on a slot that fits it, at once, and takes
 * the slot once that job is requeued. */
static void test_serving_preempts(void **state)
{
    sched_slot sl[8];
    sched_config cfg = CFG;
    cfg.serving_preempt = 1;
    cfg.preempt = 1;
    cfg.preempt_wait = 1e9; /* keeps fair-share preemption away */
    ty_err err = {0};
    sched *s = sched_create(&cfg, sl, h200_7x1g(sl), &err);
    assert_non_null(s);
    int a = tenant(s, "ten_a", 1, -1, -1);
    int b = tenant(s, "ten_b", 1, -1, -1);
    /* slot:             0  1  2  3  4  5  6 */
    const int ten[7] = {a, a, b, a, a, b, b};
    const int prio[7] = {0, 0, 1, 2, 0, 1, 0};
    int tj[7];
    fill_7(s, ten, prio, NULL, tj);
    /* b holds 3 slices, below its 3.5 share, but the victim is b's own job
     * on slot 6 (priority 0, started last) */
    int s1 = submit_srv(s, "srv1", b, 0, 10, req_any());
    sched_result r;
    sched_pass(s, 10, &r);
    check(s);
    assert_int_equal(r.n_placements, 0);
    assert_int_equal(r.n_preemptions, 1);
    assert_int_equal(r.preemptions[0].victim, tj[6]);
    assert_int_equal(r.preemptions[0].job, s1);
    assert_int_equal(r.preemptions[0].slot, 6);
    assert_int_equal(state_of(s, tj[6]), SCHED_JOB_STOPPING);
    assert_int_equal(state_of(s, s1), SCHED_JOB_PENDING);
    assert_int_equal(sched_slot_holder(s, 6), tj[6]);
    static sched_wait w[16];
    size_t n = sched_queue_report(s, w, 16);
    assert_int_equal(n, 1);
    assert_int_equal(w[0].job, s1);
    assert_int_equal(w[0].reason, SCHED_WAIT_PREEMPTING);
    assert_int_equal(w[0].other_job, tj[6]);

    /* two more replicas in one pass, the higher priority first: slots 4
     * then 1 (priority 0, latest first); slot 6, already stopping, is not
     * chosen again */
    int s2 = submit_srv(s, "srv2", a, 0, 11, req_any());
    int s3 = submit_srv(s, "srv3", b, 1, 11, req_any());
    sched_pass(s, 11, &r);
    check(s);
    assert_int_equal(r.n_placements, 0);
    assert_int_equal(r.n_preemptions, 2);
    assert_int_equal(r.preemptions[0].job, s3);
    assert_int_equal(r.preemptions[0].victim, tj[4]);
    assert_int_equal(r.preemptions[1].job, s2);
    assert_int_equal(r.preemptions[1].victim, tj[1]);

    /* the victim stops: the replica takes its slot, the victim waits */
    assert_int_equal(sched_job_requeue(s, tj[6], &err), TY_OK);
    check(s);
    sched_pass(s, 12, &r);
    check(s);
    assert_int_equal(r.n_placements, 1);
    assert_int_equal(r.placements[0].job, s1);
    assert_int_equal(r.placements[0].slot, 6);
    assert_int_equal(state_of(s, s1), SCHED_JOB_RUNNING);
    assert_int_equal(state_of(s, tj[6]), SCHED_JOB_QUEUED);
    /* once running, replicas are no victims: the next one stops f0, the
     * last training job of priority 0 */
    assert_int_equal(sched_job_requeue(s, tj[4], &err), TY_OK);
    assert_int_equal(sched_job_requeue(s, tj[1], &err), TY_OK);
    sched_pass(s, 13, &r);
    assert_int_equal(r.n_placements, 2);
    int s4 = submit_srv(s, "srv4", a, 5, 14, req_any());
    sched_pass(s, 14, &r);
    check(s);
    assert_int_equal(r.n_preemptions, 1);
    assert_int_equal(r.preemptions[0].job, s4);
    assert_int_equal(r.preemptions[0].victim, tj[0]);
    sched_destroy(s);

    /* only on a fitting slot; victims by priority before slot size, then
     * the lower index */
    s = sched_create(&cfg, sl, h100_mixed(sl), &err);
    assert_non_null(s);
    a = tenant(s, "ten_a", 1, -1, -1);
    b = tenant(s, "ten_b", 1, -1, -1);
    int on3g = submit(s, "on3g", a, 0, 0, req_profile("3g.40gb"));
    int on2g = submit(s, "on2g", a, 5, 0, req_profile("2g.20gb"));
    int on1a = submit(s, "on1a", a, 0, 0, req_profile("1g.10gb"));
    submit(s, "on1b", a, 0, 0, req_profile("1g.10gb"));
    sched_pass(s, 0, &r);
    assert_int_equal(r.n_placements, 4);
    int big = submit_srv(s, "srv_big", b, 0, 1, req_min(2, 0));
    int two = submit_srv(s, "srv_2g", b, 0, 2, req_profile("2g.20gb"));
    int any = submit_srv(s, "srv_any", b, 0, 3, req_any());
    sched_pass(s, 4, &r);
    check(s);
    assert_int_equal(r.n_preemptions, 3);
    assert_int_equal(r.preemptions[0].job, big);
    assert_int_equal(r.preemptions[0].victim, on3g); /* the 2g's is prio 5 */
    assert_int_equal(r.preemptions[1].job, two);
    assert_int_equal(r.preemptions[1].victim, on2g); /* the only fit */
    assert_int_equal(r.preemptions[2].job, any);
    assert_int_equal(r.preemptions[2].victim, on1a); /* lower index */
    assert_int_equal(r.preemptions[2].slot, 2);
    sched_destroy(s);
}

/* Tenant a fills a 7 x 1g GPU (serving jobs where srv[i]); tenant b's
 * training job, queued at 10, may preempt by fair share at once. Returns
 * the victim of the first preemption in passes at 10..19, or -1. */
static int fair_share_victim(const int *srv, const int *prio, int *aj)
{
    sched_slot sl[8];
    sched_config cfg = CFG;
    cfg.preempt = 1;
    cfg.serving_preempt = 1;
    ty_err err = {0};
    sched *s = sched_create(&cfg, sl, h200_7x1g(sl), &err);
    assert_non_null(s);
    int a = tenant(s, "ten_a", 1, -1, -1);
    int b = tenant(s, "ten_b", 1, -1, -1);
    const int ten[7] = {a, a, a, a, a, a, a};
    fill_7(s, ten, prio, srv, aj);
    int bj = submit(s, "b_train", b, 0, 10, req_any());
    int victim = -1;
    for (int k = 0; k < 10 && victim < 0; k++) {
        sched_result r;
        sched_pass(s, 10 + k, &r);
        check(s);
        if (r.n_preemptions > 0) {
            assert_int_equal(r.preemptions[0].job, bj);
            victim = r.preemptions[0].victim;
        }
    }
    if (victim < 0) {
        static sched_wait w[4];
        size_t n = sched_queue_report(s, w, 4);
        assert_int_equal(n, 1);
        assert_int_equal(w[0].reason, SCHED_WAIT_NO_SLICE);
    }
    sched_destroy(s);
    return victim;
}

/* Serving jobs are never victims: a fair-share scenario that preempts a
 * training job preempts nothing when the same jobs serve, and only the
 * training job among replicas; serving jobs do not preempt each other. */
static void test_serving_not_preempted(void **state)
{
    int aj[7];
    const int prio0[7] = {0, 0, 0, 0, 0, 0, 0};
    const int train[7] = {0};
    const int serve[7] = {1, 1, 1, 1, 1, 1, 1};
    /* the control: a's training jobs, the latest one goes */
    int v = fair_share_victim(train, prio0, aj);
    assert_int_equal(v, aj[6]);
    assert_int_equal(fair_share_victim(serve, prio0, aj), -1);
    /* replicas of lower priority, started later, are passed over */
    const int mixed[7] = {0, 1, 1, 1, 1, 1, 1};
    const int prio[7] = {9, -5, -5, -5, -5, -5, -5};
    v = fair_share_victim(mixed, prio, aj);
    assert_int_equal(v, aj[0]);

    /* nor does a replica stop a replica */
    sched_slot sl[8];
    sched_config cfg = CFG;
    cfg.preempt = 1;
    cfg.serving_preempt = 1;
    ty_err err = {0};
    sched *s = sched_create(&cfg, sl, h200_7x1g(sl), &err);
    assert_non_null(s);
    int a = tenant(s, "ten_a", 1, -1, -1);
    int b = tenant(s, "ten_b", 1, -1, -1);
    const int ten[7] = {a, a, a, a, a, a, a};
    fill_7(s, ten, prio, serve, aj);
    int sb = submit_srv(s, "srv_b", b, 9, 10, req_any());
    for (int k = 0; k < 5; k++) {
        sched_result r;
        sched_pass(s, 10 + k, &r);
        check(s);
        assert_int_equal(r.n_preemptions, 0);
        assert_int_equal(r.n_placements, 0);
    }
    static sched_wait w[4];
    size_t n = sched_queue_report(s, w, 4);
    assert_int_equal(n, 1);
    assert_int_equal(w[0].job, sb);
    assert_int_equal(w[0].reason, SCHED_WAIT_NO_SLICE);
    char buf[256];
    sched_wait_describe(s, &w[0], buf, sizeof buf);
    assert_string_equal(buf, "no free slice of that size (needs any GPU slot; "
                             "no training job holds one it may preempt)");
    sched_destroy(s);
}

/* serving_preempt 0: a replica waits for a slot to free; fair-share
 * preemption (on) does not act for it either. */
static void test_serving_preempt_off(void **state)
{
    sched_slot sl[8];
    sched_config cfg = CFG;
    cfg.preempt = 1;
    cfg.serving_preempt = 0;
    ty_err err = {0};
    sched *s = sched_create(&cfg, sl, h200_7x1g(sl), &err);
    assert_non_null(s);
    int a = tenant(s, "ten_a", 1, -1, -1);
    int b = tenant(s, "ten_b", 1, -1, -1);
    const int ten[7] = {a, a, a, a, a, a, a};
    const int prio[7] = {0, 0, 0, 0, 0, 0, 0};
    int aj[7];
    fill_7(s, ten, prio, NULL, aj);
    int sb = submit_srv(s, "srv_b", b, 9, 10, req_any());
    for (int k = 0; k < 10; k++) {
        sched_result r;
        sched_pass(s, 10 + k, &r);
        check(s);
        assert_int_equal(r.n_preemptions, 0);
        assert_int_equal(r.n_placements, 0);
    }
    assert_int_equal(state_of(s, sb), SCHED_JOB_QUEUED);
    static sched_wait w[4];
    size_t n = sched_queue_report(s, w, 4);
    assert_int_equal(n, 1);
    assert_int_equal(w[0].reason, SCHED_WAIT_NO_SLICE);
    char buf[256];
    sched_wait_describe(s, &w[0], buf, sizeof buf);
    assert_string_equal(buf, "no free slice of that size (needs any GPU slot)");
    assert_int_equal(sched_job_remove(s, aj[3]), TY_OK);
    assert_int_equal(pass1(s, 20), 3);
    assert_int_equal(sched_slot_holder(s, 3), sb);
    sched_destroy(s);
}

/* Quotas bound serving jobs like any job, in placement and preemption. */
static void test_serving_quotas(void **state)
{
    sched_slot sl[8];
    sched_config cfg = CFG;
    cfg.serving_preempt = 1;
    ty_err err = {0};
    sched *s = sched_create(&cfg, sl, h200_7x1g(sl), &err);
    assert_non_null(s);
    int q = tenant(s, "ten_q", 1, 2, 3); /* 2 slices, 3 jobs */
    int o = tenant(s, "ten_o", 1, -1, -1);
    const int ten[7] = {o, o, o, o, o, o, o};
    const int prio[7] = {0, 0, 0, 0, 0, 0, 0};
    int oj[7];
    fill_7(s, ten, prio, NULL, oj);
    int g[3];
    for (int i = 0; i < 3; i++) {
        char id[8];
        snprintf(id, sizeof id, "g%d", i);
        g[i] = submit_srv(s, id, q, 0, 10 + i, req_any());
    }
    sched_result r;
    sched_pass(s, 20, &r);
    check(s);
    assert_int_equal(r.n_preemptions, 2); /* max_gpu_slices 2 */
    assert_int_equal(r.preemptions[0].job, g[0]);
    assert_int_equal(r.preemptions[0].victim, oj[6]);
    assert_int_equal(r.preemptions[1].job, g[1]);
    assert_int_equal(r.preemptions[1].victim, oj[5]);
    static sched_wait w[8];
    size_t n = sched_queue_report(s, w, 8);
    const sched_wait *x = find_wait(w, n, g[2]);
    assert_int_equal(x->reason, SCHED_WAIT_QUOTA);
    assert_int_equal(x->quota, SCHED_QUOTA_GPU_SLICES);
    /* a CPU replica counts against max_running_jobs: one more fits */
    int c1 = submit_srv(s, "c1", q, 0, 21, req_none());
    int c2 = submit_srv(s, "c2", q, 0, 21, req_none());
    sched_pass(s, 21, &r);
    check(s);
    assert_int_equal(r.n_preemptions, 0);
    assert_int_equal(r.n_placements, 1);
    assert_int_equal(r.placements[0].job, c1);
    assert_int_equal(r.placements[0].slot, -1);
    n = sched_queue_report(s, w, 8);
    x = find_wait(w, n, c2);
    assert_int_equal(x->reason, SCHED_WAIT_QUOTA);
    assert_int_equal(x->quota, SCHED_QUOTA_RUNNING_JOBS);
    /* the victims stop; the replicas start; g2 still preempts nobody */
    assert_int_equal(sched_job_requeue(s, oj[6], &err), TY_OK);
    assert_int_equal(sched_job_requeue(s, oj[5], &err), TY_OK);
    sched_pass(s, 22, &r);
    check(s);
    assert_int_equal(r.n_placements, 2);
    assert_int_equal(r.n_preemptions, 0);
    int slices, jobs;
    sched_tenant_usage(s, q, &slices, &jobs, NULL);
    assert_int_equal(slices, 2);
    assert_int_equal(jobs, 3);
    sched_destroy(s);

    /* a tenant at its slice quota cannot stop its own training job for a
     * replica (the stopping job counts until it has stopped); once that job
     * finishes the replica takes its slot */
    s = sched_create(&cfg, sl, h200_7x1g(sl), &err);
    assert_non_null(s);
    q = tenant(s, "ten_q", 1, 1, -1);
    o = tenant(s, "ten_o", 1, -1, -1);
    const int ten2[7] = {q, o, o, o, o, o, o};
    fill_7(s, ten2, prio, NULL, oj);
    int rep = submit_srv(s, "rep", q, 0, 10, req_any());
    sched_pass(s, 10, &r);
    check(s);
    assert_int_equal(r.n_preemptions, 0);
    n = sched_queue_report(s, w, 8);
    assert_int_equal(find_wait(w, n, rep)->reason, SCHED_WAIT_QUOTA);
    assert_int_equal(sched_job_remove(s, oj[0]), TY_OK);
    assert_int_equal(pass1(s, 11), 0);
    assert_int_equal(sched_slot_holder(s, 0), rep);
    sched_destroy(s);
}

/* CPU replicas are outside max_cpu_jobs but within max_running_jobs. */
static void test_serving_cpu(void **state)
{
    sched_config cfg = CFG;
    cfg.max_cpu_jobs = 1;
    ty_err err = {0};
    sched *s = sched_create(&cfg, NULL, 0, &err);
    assert_non_null(s);
    int a = tenant(s, "ten_a", 1, -1, -1);
    int b = tenant(s, "ten_b", 1, -1, 2);
    int t1 = submit(s, "t1", a, 5, 0, req_none());
    int t2 = submit(s, "t2", a, 5, 0, req_none());
    int sa[3];
    for (int i = 0; i < 3; i++) {
        char id[8];
        snprintf(id, sizeof id, "sa%d", i);
        sa[i] = submit_srv(s, id, a, 0, 1, req_none());
    }
    int sb[3];
    for (int i = 0; i < 3; i++) {
        char id[8];
        snprintf(id, sizeof id, "sb%d", i);
        sb[i] = submit_srv(s, id, b, 0, 2, req_none());
    }
    sched_result r;
    sched_pass(s, 3, &r);
    check(s);
    /* three of a's replicas, two of b's (its quota), one training job */
    assert_int_equal(r.n_placements, 6);
    for (int i = 0; i < 3; i++)
        assert_int_equal(state_of(s, sa[i]), SCHED_JOB_RUNNING);
    assert_int_equal(state_of(s, sb[0]), SCHED_JOB_RUNNING);
    assert_int_equal(state_of(s, sb[1]), SCHED_JOB_RUNNING);
    assert_int_equal(state_of(s, sb[2]), SCHED_JOB_QUEUED);
    assert_int_equal(state_of(s, t1), SCHED_JOB_RUNNING);
    assert_int_equal(state_of(s, t2), SCHED_JOB_QUEUED);
    static sched_wait w[8];
    size_t n = sched_queue_report(s, w, 8);
    assert_int_equal(n, 2);
    assert_int_equal(w[0].job, sb[2]); /* serving first */
    assert_int_equal(w[0].reason, SCHED_WAIT_QUOTA);
    assert_int_equal(w[0].quota, SCHED_QUOTA_RUNNING_JOBS);
    assert_int_equal(w[1].job, t2);
    assert_int_equal(w[1].reason, SCHED_WAIT_NO_SLICE);
    char buf[256];
    sched_wait_describe(s, &w[1], buf, sizeof buf);
    assert_non_null(strstr(buf, "all 1 CPU job slots are busy"));
    /* a replica leaving frees no CPU training slot; the training job does */
    assert_int_equal(sched_job_remove(s, sa[0]), TY_OK);
    assert_int_equal(pass1(s, 4), -1);
    assert_int_equal(state_of(s, t2), SCHED_JOB_QUEUED);
    assert_int_equal(sched_job_remove(s, t1), TY_OK);
    assert_int_equal(pass1(s, 5), -1);
    assert_int_equal(state_of(s, t2), SCHED_JOB_RUNNING);
    /* b below its quota again: its replica goes */
    assert_int_equal(sched_job_remove(s, sb[0]), TY_OK);
    sched_pass(s, 6, &r);
    assert_int_equal(r.n_placements, 1);
    assert_int_equal(r.placements[0].job, sb[2]);
    sched_destroy(s);
}

/* Issue 29: replicas hold places, the server's and their tenant's. A
 * tenant with no quota asks for 64 CPU replicas on a server of 4 replica
 * places: it gets its share (2) and the rest wait, saying why; another
 * tenant's replica and CPU training job still start. GPU replicas hold
 * places too. */
static void test_serving_places(void **state)
{
    (void)state;
    sched_slot sl[8];
    sched_config cfg = CFG;
    cfg.max_cpu_jobs = 2;
    cfg.max_serving = 4;
    cfg.max_serving_per_tenant = 2;
    ty_err err = {0};
    sched *s = sched_create(&cfg, sl, h200_7x1g(sl), &err);
    assert_non_null(s);
    int a = tenant(s, "ten_a", 1, -1, -1);
    int b = tenant(s, "ten_b", 1, -1, -1);
    int hog[64];
    for (int i = 0; i < 64; i++) {
        char id[16];
        snprintf(id, sizeof id, "hog%d", i);
        hog[i] = submit_srv(s, id, b, 0, 1, req_none());
    }
    sched_result r;
    sched_pass(s, 2, &r);
    check(s);
    assert_int_equal(r.n_placements, 2);
    assert_int_equal(state_of(s, hog[0]), SCHED_JOB_RUNNING);
    assert_int_equal(state_of(s, hog[1]), SCHED_JOB_RUNNING);
    assert_int_equal(state_of(s, hog[2]), SCHED_JOB_QUEUED);
    sched_wait w;
    assert_int_equal(sched_job_wait(s, hog[2], &w), TY_OK);
    assert_int_equal(w.reason, SCHED_WAIT_QUOTA);
    assert_int_equal(w.quota, SCHED_QUOTA_REPLICAS);
    char buf[256];
    sched_wait_summary(s, &w, buf, sizeof buf);
    assert_string_equal(buf, "Your tenant may run 2 replicas at once and 2 are "
                             "running");
    /* the other tenant: a replica on the CPU, one on a GPU slice, and a
     * CPU training job, all placed */
    int ra = submit_srv(s, "ra", a, 0, 3, req_none());
    int ga = submit_srv(s, "ga", a, 0, 3, req_any());
    int ta = submit(s, "ta", a, 0, 3, req_none());
    sched_pass(s, 4, &r);
    check(s);
    assert_int_equal(r.n_placements, 3);
    assert_int_equal(state_of(s, ra), SCHED_JOB_RUNNING);
    assert_int_equal(state_of(s, ga), SCHED_JOB_RUNNING);
    assert_true(slot_of(s, ga) >= 0);
    assert_int_equal(state_of(s, ta), SCHED_JOB_RUNNING);
    /* every place is held now: a third tenant's replica waits for one */
    int c = tenant(s, "ten_c", 1, -1, -1);
    int rc = submit_srv(s, "rc", c, 0, 5, req_none());
    assert_int_equal(pass1(s, 6), -1);
    assert_int_equal(sched_job_wait(s, rc, &w), TY_OK);
    assert_int_equal(w.reason, SCHED_WAIT_REPLICAS);
    sched_wait_summary(s, &w, buf, sizeof buf);
    assert_non_null(strstr(buf, "All 4 replica places"));
    static sched_wait all[80];
    size_t n = sched_queue_report(s, all, 80);
    const sched_wait *f = find_wait(all, n, rc);
    assert_non_null(f);
    assert_int_equal(f->reason, SCHED_WAIT_REPLICAS);
    /* a place frees: c's replica (its tenant holds none) takes it before
     * b's 63rd (b holds its share) */
    assert_int_equal(sched_job_remove(s, ra), TY_OK);
    assert_int_equal(pass1(s, 7), -1);
    assert_int_equal(state_of(s, rc), SCHED_JOB_RUNNING);
    assert_int_equal(state_of(s, hog[2]), SCHED_JOB_QUEUED);
    assert_int_equal(sched_job_wait(s, ta, &w), TY_ENOTFOUND);
    sched_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_best_fit),
        cmocka_unit_test(test_impossible),
        cmocka_unit_test(test_random_invariants),
        cmocka_unit_test(test_fair_share),
        cmocka_unit_test(test_backfill_no_starvation),
        cmocka_unit_test(test_preemption_order),
        cmocka_unit_test(test_preemption_minimal),
        cmocka_unit_test(test_reasons),
        cmocka_unit_test(test_positions),
        cmocka_unit_test(test_serving_first),
        cmocka_unit_test(test_serving_preempts),
        cmocka_unit_test(test_serving_not_preempted),
        cmocka_unit_test(test_serving_preempt_off),
        cmocka_unit_test(test_serving_quotas),
        cmocka_unit_test(test_serving_cpu),
        cmocka_unit_test(test_serving_places),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
