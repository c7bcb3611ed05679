/*
 * bench/sched - how long a scheduling pass takes with a deep queue.
 *
 * 10,000 queued jobs from 50 tenants (weights 1..4, some with quotas) on 8
 * simulated GPUs of 7 compute slices each: four H200s split 7 x 1g.18gb,
 * two split 3g + 2g + 1g + 1g, one split 4g + 3g and one with MIG off.
 * Requests mix any, profiles and minimum sizes; priorities 0..3. Between
 * passes 1..8 running jobs finish and as many new jobs arrive, so each pass
 * places jobs (and, with preemption on, may preempt). A third run mixes in
 * serving replicas (1 job in 200, so some 50 queued at any time) with
 * serving_preempt on: they go first and stop training jobs for their slots.
 * Prints the median and p99 time per pass, placements per second of pass
 * time, and the time of a full report (positions and reasons of all 10,000
 * queued jobs), beside the 1 ms target. The first two runs' workload is
 * the same with or without serving support, so their figures compare
 * across versions.
 *
 * Then the cluster workload (issue 33), with preemption off and on:
 * 100,000 queued jobs from 1,000 tenants on 1,000 simulated whole GPUs
 * (125 nodes of 8), 1 job in 50 a gang of 2-8 GPUs on one node, 1 in 50 a
 * CPU job; between passes 1..32 running jobs finish. Same figures.
 * Not a test: `make bench-sched` or build/bench_sched.
 *
 *   bench_sched [passes]     default 20000 (the cluster runs a fifth)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/rng.h"
#include "sched/sched.h"

#define GIB (1ull << 30)
#define QUEUED 10000
#define TENANTS 50

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* This thread's CPU time: what a pass costs when other processes share
 * the cores (wall time then counts their turns too). */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static size_t inventory(sched_slot *sl)
{
    size_t n = 0;
    for (int g = 0; g < 4; g++)
        for (int i = 0; i < 7; i++)
            sl[n++] = (sched_slot){g, 1, "1g.18gb", 1, 16 * GIB, 0, 0};
    for (int g = 4; g < 6; g++) {
        sl[n++] = (sched_slot){g, 1, "3g.71gb", 3, 70 * GIB, 0, 0};
        sl[n++] = (sched_slot){g, 1, "2g.35gb", 2, 33 * GIB, 0, 0};
        sl[n++] = (sched_slot){g, 1, "1g.18gb", 1, 16 * GIB, 0, 0};
        sl[n++] = (sched_slot){g, 1, "1g.18gb", 1, 16 * GIB, 0, 0};
    }
    sl[n++] = (sched_slot){6, 1, "4g.71gb", 4, 70 * GIB, 0, 0};
    sl[n++] = (sched_slot){6, 1, "3g.71gb", 3, 70 * GIB, 0, 0};
    sl[n++] = (sched_slot){7, 0, NULL, 7, 140 * GIB, 0, 0};
    return n;
}

static sched_request random_request(ty_rng *r)
{
    sched_request q = {.kind = SCHED_REQ_ANY};
    uint32_t k = ty_rng_below(r, 100);
    if (k < 50)
        return q;
    if (k < 70) {
        q.kind = SCHED_REQ_PROFILE;
        snprintf(q.profile, sizeof q.profile, "%s",
                 k < 65 ? "1g.18gb" : "2g.35gb");
    } else if (k < 90) {
        q.kind = SCHED_REQ_MIN;
        q.min_compute_slices = k < 80 ? 2 : 3;
    } else if (k < 97) {
        q.kind = SCHED_REQ_MIN;
        q.min_memory_bytes = 60 * GIB;
    } else {
        q.kind = SCHED_REQ_MIN;
        q.min_compute_slices = 7;
    }
    return q;
}

/* serving: 1 makes 1 job in 200 a serving replica, serving_preempt on */
/* 1..most of the jobs in running[0..*n) finish (removed from s and from
 * the list); a job found preempted and requeued is dropped from the list
 * and another is picked in its place. */
static void finish_some(sched *s, ty_rng *rng, int *running, int *n, int most)
{
    int finish = 1 + (int)ty_rng_below(rng, (uint32_t)most);
    for (int f = 0; f<finish && * n> 0; f++) {
        int k = (int)ty_rng_below(rng, (uint32_t)*n);
        int j = running[k];
        running[k] = running[--*n];
        sched_job_info in;
        if (sched_job_get(s, j, &in) == TY_OK &&
            (in.state == SCHED_JOB_RUNNING || in.state == SCHED_JOB_STOPPING))
            sched_job_remove(s, j);
        else
            f--;
    }
}

static int run(int passes, int preempt, int serving)
{
    sched_slot sl[64];
    size_t ns = inventory(sl);
    sched_config cfg = {.backfill_wait = 600,
                        .preempt = preempt,
                        .preempt_wait = 30,
                        .serving_preempt = serving,
                        .max_cpu_jobs = 4,
                        .max_serving = SCHED_UNLIMITED,
                        .max_serving_per_tenant = SCHED_UNLIMITED,
                        .fair_window = 300};
    ty_err err = {0};
    sched *s = sched_create(&cfg, sl, ns, &err);
    if (!s) {
        fprintf(stderr, "sched_create: %s\n", err.msg);
        return 1;
    }
    ty_rng rng;
    ty_rng_seed(&rng, 7, (uint64_t)preempt + 2 * (uint64_t)serving);
    for (int t = 0; t < TENANTS; t++) {
        char id[16];
        snprintf(id, sizeof id, "ten_%02d", t);
        int64_t qs = t % 5 == 0 ? 8 : SCHED_UNLIMITED;
        int64_t qj = t % 7 == 0 ? 3 : SCHED_UNLIMITED;
        if (sched_tenant_set(s, id, 1 + t % 4, qs, qj, NULL, &err) != TY_OK)
            return 1;
    }
    long seq = 0;
    double clock = 0;
    int *running = malloc(ns * 4 * sizeof *running);
    sched_wait *report = malloc((QUEUED + 1024) * sizeof *report);
    double *times = malloc((size_t)passes * sizeof *times);
    if (!running || !report || !times)
        return 1;

    int nrunning = 0;
    sched_result r;
    long placed = 0, preempted = 0, srv_preempted = 0;
    double total = 0;
    for (int p = -1; p < passes; p++) {
        /* top the queue up to 10,000 */
        while (sched_queued_count(s) < QUEUED) {
            char id[24];
            snprintf(id, sizeof id, "job_%ld", seq++);
            sched_job_desc d = {.id = id,
                                .tenant = (int)ty_rng_below(&rng, TENANTS),
                                .priority = (int)ty_rng_below(&rng, 4),
                                .submit_time = clock,
                                .request = random_request(&rng)};
            if (ty_rng_below(&rng, 50) == 0)
                d.request.kind = SCHED_REQ_NONE;
            /* drawn only here, so the other runs' jobs stay as they were */
            if (serving)
                d.serving = ty_rng_below(&rng, 200) == 0;
            if (sched_job_submit(s, &d, NULL, &err) != TY_OK) {
                fprintf(stderr, "submit: %s\n", err.msg);
                return 1;
            }
        }
        double t0 = now_s();
        sched_pass(s, clock, &r);
        double dt = now_s() - t0;
        if (p >= 0) {
            times[p] = dt;
            total += dt;
            placed += (long)r.n_placements;
            preempted += (long)r.n_preemptions;
            for (size_t i = 0; i < r.n_preemptions; i++) {
                sched_job_info in;
                if (sched_job_get(s, r.preemptions[i].job, &in) == TY_OK &&
                    in.serving)
                    srv_preempted++;
            }
        }
        for (size_t i = 0; i < r.n_placements; i++)
            running[nrunning++] = r.placements[i].job;
        /* preempted jobs stop and requeue at once */
        for (size_t i = 0; i < r.n_preemptions; i++)
            sched_job_requeue(s, r.preemptions[i].victim, &err);
        /* 1..8 running jobs finish */
        finish_some(s, &rng, running, &nrunning, 8);
        clock += 5;
    }
    if (sched_check(s, &err) != TY_OK) {
        fprintf(stderr, "invariant broken: %s\n", err.msg);
        return 1;
    }
    qsort(times, (size_t)passes, sizeof *times, cmp_double);
    double med = times[passes / 2], p99 = times[(size_t)(passes * 0.99)];

    int reps = 50;
    double rt = now_s();
    size_t n = 0;
    for (int i = 0; i < reps; i++)
        n = sched_queue_report(s, report, QUEUED + 1024);
    rt = (now_s() - rt) / reps;

    printf("preemption %s%s: %d passes over %zu queued jobs, %d tenants, %zu "
           "slots (8 GPUs x 7 slices)\n",
           preempt ? "on " : "off",
           serving ? ", serving replicas (1 in 200, serving_preempt on)" : "",
           passes, sched_queued_count(s), TENANTS, ns);
    printf(
        "  pass time     median %8.2f us   p99 %8.2f us   (target < 1000 us)\n",
        med * 1e6, p99 * 1e6);
    printf("  placements    %.2f per pass, %.0f per second of pass time; "
           "%ld preemptions",
           (double)placed / passes, placed / total, preempted);
    if (serving)
        printf(" (%ld for replicas)", srv_preempted);
    printf("\n");
    printf("  full report   %8.2f us for %zu jobs' positions and reasons "
           "(on request, not per pass)\n",
           rt * 1e6, n);
    free(running);
    free(report);
    free(times);
    sched_destroy(s);
    return 0;
}

/* ---- the cluster workload ---- */

#define CL_QUEUED 100000
#define CL_TENANTS 1000
#define CL_NODES 125
#define CL_PER_NODE 8

static int run_cluster(int passes, int preempt)
{
    size_t ns = CL_NODES * CL_PER_NODE;
    sched_slot *sl = calloc(ns, sizeof *sl);
    if (!sl)
        return 1;
    for (size_t i = 0; i < ns; i++)
        sl[i] = (sched_slot){.gpu = (int)(i % CL_PER_NODE),
                             .compute_slices = 7,
                             .memory_bytes = 80 * GIB,
                             .node = (int)(i / CL_PER_NODE),
                             .domain = 1 + (int)(i % CL_PER_NODE) / 4};
    sched_config cfg = {.backfill_wait = 600,
                        .preempt = preempt,
                        .preempt_wait = 30,
                        .max_cpu_jobs = 64,
                        .max_serving = SCHED_UNLIMITED,
                        .max_serving_per_tenant = SCHED_UNLIMITED,
                        .fair_window = 300};
    ty_err err = {0};
    sched *s = sched_create(&cfg, sl, ns, &err);
    free(sl);
    if (!s) {
        fprintf(stderr, "sched_create: %s\n", err.msg);
        return 1;
    }
    ty_rng rng;
    ty_rng_seed(&rng, 33, (uint64_t)preempt);
    for (int t = 0; t < CL_TENANTS; t++) {
        char id[16];
        snprintf(id, sizeof id, "ten_%03d", t);
        int64_t qs = t % 5 == 0 ? 8 * 7 : SCHED_UNLIMITED;
        int64_t qj = t % 7 == 0 ? 4 : SCHED_UNLIMITED;
        if (sched_tenant_set(s, id, 1 + t % 4, qs, qj, NULL, &err) != TY_OK)
            return 1;
    }
    long seq = 0, gangs_placed = 0, placed = 0, preempted = 0;
    double clock = 0, total = 0;
    int *running = malloc((ns + 256) * sizeof *running);
    double *times = malloc((size_t)passes * sizeof *times);
    double *cpu = malloc((size_t)passes * sizeof *cpu);
    sched_wait *report = malloc((CL_QUEUED + 1024) * sizeof *report);
    if (!running || !times || !cpu || !report)
        return 1;
    int nrunning = 0;
    sched_result r;
    for (int p = -1; p < passes; p++) {
        while (sched_queued_count(s) < CL_QUEUED) {
            char id[24];
            snprintf(id, sizeof id, "job_%ld", seq++);
            sched_job_desc d = {.id = id,
                                .tenant = (int)ty_rng_below(&rng, CL_TENANTS),
                                .priority = (int)ty_rng_below(&rng, 4),
                                .submit_time = clock,
                                .request = {.kind = SCHED_REQ_ANY}};
            uint32_t k = ty_rng_below(&rng, 100);
            if (k < 2)
                d.gang = 2 + (int)ty_rng_below(&rng, 7);
            else if (k < 4)
                d.request.kind = SCHED_REQ_NONE;
            else if (k < 20)
                d.request = (sched_request){.kind = SCHED_REQ_MIN,
                                            .min_memory_bytes = 40 * GIB};
            if (sched_job_submit(s, &d, NULL, &err) != TY_OK &&
                err.field[0] != 'r') { /* a gang above its quota: skip */
                fprintf(stderr, "submit: %s\n", err.msg);
                return 1;
            }
        }
        double c0 = cpu_s(), t0 = now_s();
        sched_pass(s, clock, &r);
        double dt = now_s() - t0, dc = cpu_s() - c0;
        if (p >= 0) {
            times[p] = dt;
            cpu[p] = dc;
            total += dt;
            placed += (long)r.n_placements;
            preempted += (long)r.n_preemptions;
        }
        for (size_t i = 0; i < r.n_placements; i++) {
            sched_job_info in;
            running[nrunning++] = r.placements[i].job;
            if (p >= 0 && sched_job_get(s, r.placements[i].job, &in) == TY_OK &&
                in.gang > 1)
                gangs_placed++;
        }
        for (size_t i = 0; i < r.n_preemptions; i++)
            sched_job_requeue(s, r.preemptions[i].victim, &err);
        finish_some(s, &rng, running, &nrunning, 32);
        clock += 5;
    }
    if (sched_check(s, &err) != TY_OK) {
        fprintf(stderr, "invariant broken: %s\n", err.msg);
        return 1;
    }
    qsort(times, (size_t)passes, sizeof *times, cmp_double);
    qsort(cpu, (size_t)passes, sizeof *cpu, cmp_double);
    double med = times[passes / 2], p99 = times[(size_t)(passes * 0.99)];
    double rt = now_s();
    size_t n = sched_queue_report(s, report, CL_QUEUED + 1024);
    rt = now_s() - rt;
    printf("cluster, preemption %s: %d passes over %zu queued jobs, %d "
           "tenants, %zu GPUs (%d nodes x %d), 1 job in 50 a gang of 2-8\n",
           preempt ? "on " : "off", passes, sched_queued_count(s), CL_TENANTS,
           ns, CL_NODES, CL_PER_NODE);
    printf(
        "  pass time     median %8.2f us   p99 %8.2f us   (target < 1000 us)\n",
        med * 1e6, p99 * 1e6);
    printf("  CPU time      median %8.2f us   p99 %8.2f us   (the thread's: "
           "without other processes' turns)\n",
           cpu[passes / 2] * 1e6, cpu[(size_t)(passes * 0.99)] * 1e6);
    printf("  placements    %.2f per pass (%ld gangs), %.0f per second of "
           "pass time; %ld preemptions\n",
           (double)placed / passes, gangs_placed, placed / total, preempted);
    printf("  full report   %8.2f us for %zu jobs' positions and reasons\n",
           rt * 1e6, n);
    free(running);
    free(times);
    free(cpu);
    free(report);
    sched_destroy(s);
    return 0;
}

int main(int argc, char **argv)
{
    int passes = argc > 1 ? atoi(argv[1]) : 20000;
    if (passes < 100)
        passes = 100;
    int cl = passes / 5 < 100 ? 100 : passes / 5;
    return run(passes, 0, 0) || run(passes, 1, 0) || run(passes, 1, 1) ||
           run_cluster(cl, 0) || run_cluster(cl, 1);
}
