/*
 * Integration tests for data-parallel jobs (issue 33): resources.workers
 * on a server that runs two CPU training processes at once (--max-jobs 2),
 * its workers started together by Open MPI's mpirun.
 *
 *   - a job of 2 workers succeeds, its placement lists both ranks, its
 *     epoch records say world_size 2 and the all-reduce's share, and its
 *     losses are the same job's on one worker (the same steps: within
 *     1e-4 relative, epoch by epoch); with hyperparameters.zero 1 the
 *     same losses (1e-5) and half the optimizer_state_bytes a rank, and
 *     about the comm_bytes of the unsharded gang;
 *   - refusals name the field: more workers than --max-jobs, a batch_size
 *     the workers cannot share equally, a GPU beside workers, a bad count,
 *     a zero other than 0 or 1, a bad resources.min_workers (above
 *     workers, 0, without workers, above --max-jobs), a gang of GPUs on a
 *     server without GPUs;
 *   - an elastic gang (workers 3, min_workers 2) runs at world size 2,
 *     what --max-jobs 2 allows, and succeeds (without min_workers: 422);
 *   - the gang holds both of the server's CPU places: a job submitted
 *     while it runs waits until it has finished;
 *   - a worker killed (SIGKILL) mid-run ends the whole gang within 30 s
 *     (no process of the job left), and the job resumes from its last
 *     checkpoint, as the whole gang again (both places held: a job
 *     submitted meanwhile waits), and succeeds;
 *   - a running gang preempted (SIGUSR1 to its mpirun, as the supervisor
 *     sends a preemption) stops both ranks at one step with a checkpoint
 *     there, goes back to the queue and resumes from that step to
 *     success.
 *
 * Skipped (a clear message) when the server says it cannot run
 * data-parallel jobs (no Open MPI in the build or no mpirun).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static srv server;
static char files[PATH_MAX];
static int have_mpi;

#define MLP                                                           \
    "{\"layers\": [{\"type\": \"dense\", \"units\": 64}, {\"type\": " \
    "\"relu\"}, {\"type\": \"dense\", \"units\": 3}]}"
/* Wider: an epoch of the blobs takes long enough (about 0.2 s on 2 cores)
 * that a test can watch the gang run for seconds. */
#define WIDE_MLP                                                       \
    "{\"layers\": [{\"type\": \"dense\", \"units\": 256}, {\"type\": " \
    "\"relu\"}, {\"type\": \"dense\", \"units\": 256}, {\"type\": "    \
    "\"relu\"}, {\"type\": \"dense\", \"units\": 3}]}"

static int setup(void **state)
{
    (void)state;
    static const char *const flags[] = {"--max-jobs", "2", NULL};
    if (srv_start(&server, NULL, flags))
        return -1;
    temp_dir(files);
    char path[PATH_MAX], part[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/blobs.csv", files);
    make_blobs_csv(path, 12000, 7);
    snprintf(part, sizeof part, "file=@%s", path);
    const char *parts[] = {"name=blobs", "format=csv", "label_column=species",
                           part, NULL};
    resp *r = http_upload(&server, "/v1/datasets", parts);
    int ok = r->status == 201;
    resp_free(r);
    /* Whether this server runs gangs at all: a dry run says. */
    r = http_json(&server, "POST", "/v1/jobs?dry_run=true",
                  "{\"dataset\": \"blobs\", \"model\": " MLP
                  ", \"resources\": {\"workers\": 2}}");
    have_mpi = r->status == 200;
    if (!have_mpi)
        fprintf(stderr,
                "SKIPPED: the server cannot run data-parallel jobs: "
                "%ld %s\n",
                r->status, r->body);
    resp_free(r);
    return ok ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    srv_stop(&server, SIGTERM);
    srv_cleanup(&server);
    return 0;
}

/* Submits the blobs job of model with these hyperparameters and
 * resources (JSON texts), expecting 202; its id into id (64 bytes). */
static void submit(const char *model, const char *hp, const char *resources,
                   char *id)
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"dataset\": \"blobs\", \"model\": %s"
             ", \"hyperparameters\": %s, \"resources\": %s}",
             model, hp, resources);
    resp *r = http_json(&server, "POST", "/v1/jobs", body);
    expect_status(r, 202);
    snprintf(id, 64, "%s", str(r->json, "id"));
    resp_free(r);
}

static void test_gang_trains_as_one(void **state)
{
    (void)state;
    if (!have_mpi)
        skip();
    const char *hp = "{\"epochs\": 3, \"batch_size\": 64, \"seed\": 5}";
    char two[64], one[64];
    submit(MLP, hp, "{\"workers\": 2}", two);
    json_t *j = wait_job(&server, two, 300);
    assert_string_equal(str(j, "status"), "succeeded");
    const json_t *res = json_object_get(j, "resources");
    assert_int_equal(json_integer_value(json_object_get(res, "workers")), 2);
    assert_string_equal(str(res, "gpu"), "none");
    const json_t *pl = json_object_get(j, "placement");
    assert_string_equal(str(pl, "launcher"), "mpirun");
    const json_t *ranks = json_object_get(pl, "ranks");
    assert_int_equal(json_array_size(ranks), 2);
    for (size_t i = 0; i < 2; i++)
        assert_int_equal(json_integer_value(
                             json_object_get(json_array_get(ranks, i), "rank")),
                         (json_int_t)i);
    json_decref(j);

    submit(MLP, hp, "{\"workers\": 1, \"gpu\": \"none\"}", one);
    j = wait_job(&server, one, 300);
    assert_string_equal(str(j, "status"), "succeeded");
    assert_null(json_object_get(json_object_get(j, "placement"), "ranks"));
    json_decref(j);

    json_t *e2 = job_epochs(&server, two), *e1 = job_epochs(&server, one);
    assert_int_equal(json_array_size(e2), 3);
    assert_int_equal(json_array_size(e1), 3);
    for (size_t i = 0; i < 3; i++) {
        const json_t *a = json_array_get(e2, i), *b = json_array_get(e1, i);
        assert_int_equal(json_integer_value(json_object_get(a, "world_size")),
                         2);
        const double share =
            json_number_value(json_object_get(a, "allreduce_share"));
        assert_true(share >= 0 && share <= 1);
        assert_true(
            json_number_value(json_object_get(a, "allreduce_seconds")) >= 0);
        assert_null(json_object_get(b, "world_size"));
        const double la = json_number_value(json_object_get(a, "train_loss"));
        const double lb = json_number_value(json_object_get(b, "train_loss"));
        fprintf(stderr, "epoch %zu: train_loss 2 workers %.9g, 1 worker %.9g\n",
                i + 1, la, lb);
        if (!(fabs(la - lb) <= 1e-4 * fabs(lb)))
            fail_msg("epoch %zu: train_loss %.9g on 2 workers, %.9g on 1",
                     i + 1, la, lb);
    }
    json_decref(e1);

    /* ZeRO-1: the same losses as the unsharded gang, rank 0's optimizer
     * state half of it (its slice: ceil(param_count / 2) parameters'). */
    const char *hpz =
        "{\"epochs\": 3, \"batch_size\": 64, \"seed\": 5, \"zero\": 1}";
    char zero[64];
    submit(MLP, hpz, "{\"workers\": 2}", zero);
    j = wait_job(&server, zero, 300);
    assert_string_equal(str(j, "status"), "succeeded");
    json_decref(j);
    json_t *ez = job_epochs(&server, zero);
    assert_int_equal(json_array_size(ez), 3);
    for (size_t i = 0; i < 3; i++) {
        const json_t *a = json_array_get(e2, i), *z = json_array_get(ez, i);
        const json_int_t full =
            json_integer_value(json_object_get(a, "optimizer_state_bytes"));
        const json_int_t part =
            json_integer_value(json_object_get(z, "optimizer_state_bytes"));
        fprintf(stderr, "epoch %zu: optimizer state %lld bytes, zero 1 %lld\n",
                i + 1, (long long)full, (long long)part);
        assert_true(full > 0);
        /* 2 * part is full, or full + one parameter's slots (odd count). */
        assert_true(2 * part >= full && 2 * part <= full + 8);
        /* The epoch's collective bytes reach the record, and zero 1's
         * reduce-scatter + all-gather send what zero 0's all-reduce does
         * (within 2%: the gather's ranges round to whole parameters). */
        const json_int_t ca =
            json_integer_value(json_object_get(a, "comm_bytes"));
        const json_int_t cz =
            json_integer_value(json_object_get(z, "comm_bytes"));
        fprintf(stderr, "epoch %zu: comm_bytes %lld, zero 1 %lld\n", i + 1,
                (long long)ca, (long long)cz);
        assert_true(ca > 0);
        assert_true(fabs((double)cz - (double)ca) <= 0.02 * (double)ca);
        const double la = json_number_value(json_object_get(a, "train_loss"));
        const double lz = json_number_value(json_object_get(z, "train_loss"));
        if (!(fabs(la - lz) <= 1e-5 * fabs(la)))
            fail_msg("epoch %zu: train_loss %.9g unsharded, %.9g zero 1", i + 1,
                     la, lz);
    }
    json_decref(ez);
    json_decref(e2);
}

static void test_gang_refusals(void **state)
{
    (void)state;
    if (!have_mpi)
        skip();
    static const struct {
        const char *hp, *resources, *field;
    } bad[] = {
        {"{\"batch_size\": 64}", "{\"workers\": 3}", "resources.workers"},
        {"{\"batch_size\": 63}", "{\"workers\": 2}",
         "hyperparameters.batch_size"},
        {"{}", "{\"workers\": 2, \"gpu\": \"any\"}", "resources.gpu"},
        {"{}", "{\"workers\": 0}", "resources.workers"},
        {"{}", "{\"workers\": \"two\"}", "resources.workers"},
        /* Elastic: min_workers from 1 to workers, with workers above 1,
         * and within what the server runs (--max-jobs 2); batch_size
         * divisible by every world size from min_workers to workers. */
        {"{}", "{\"workers\": 2, \"min_workers\": 3}", "resources.min_workers"},
        {"{}", "{\"workers\": 2, \"min_workers\": 0}", "resources.min_workers"},
        {"{}", "{\"min_workers\": 1}", "resources.min_workers"},
        {"{\"batch_size\": 64}", "{\"workers\": 4, \"min_workers\": 3}",
         "resources.min_workers"},
        {"{\"batch_size\": 64}", "{\"workers\": 3, \"min_workers\": 2}",
         "hyperparameters.batch_size"},
        /* a gang of GPUs on a server without any (test_gpu_gang.c has
         * the rest of resources.gpus) */
        {"{}", "{\"gpus\": 2}", "resources.gpus"},
        /* ZeRO: stage 0 or 1 only. */
        {"{\"zero\": 2}", "{\"workers\": 2}", "hyperparameters.zero"},
        {"{\"zero\": -1}", "{\"workers\": 2}", "hyperparameters.zero"},
        {"{\"zero\": \"1\"}", "{\"workers\": 2}", "hyperparameters.zero"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char body[1024];
        snprintf(body, sizeof body,
                 "{\"dataset\": \"blobs\", \"model\": " MLP
                 ", \"hyperparameters\": %s, \"resources\": %s}",
                 bad[i].hp, bad[i].resources);
        resp *r = http_json(&server, "POST", "/v1/jobs", body);
        expect_refusal(&server, r, 422, bad[i].field, NULL);
    }
}

static void test_gang_holds_its_places(void **state)
{
    (void)state;
    if (!have_mpi)
        skip();
    char gang[64], single[64];
    submit(WIDE_MLP, "{\"epochs\": 40, \"batch_size\": 32, \"seed\": 4}",
           "{\"workers\": 2}", gang);
    double until = now_seconds() + 120;
    json_t *j = NULL;
    for (;;) {
        j = get_job(&server, gang);
        int running = !strcmp(str(j, "status"), "running");
        json_decref(j);
        if (running)
            break;
        if (now_seconds() > until)
            fail_msg("the gang did not start in 120 s");
        usleep(100 * 1000);
    }
    submit(MLP, "{\"epochs\": 1, \"batch_size\": 32}", "{\"gpu\": \"none\"}",
           single);
    /* while the gang runs, the single job never does (and it was seen
     * waiting while the gang ran: a gang over before the first look would
     * prove nothing) */
    int overlapped = 0, gang_done = 0, seen_waiting = 0;
    while (!gang_done && now_seconds() < until + 300) {
        json_t *g = get_job(&server, gang), *s = get_job(&server, single);
        gang_done = strcmp(str(g, "status"), "running") != 0;
        if (!gang_done && strcmp(str(s, "status"), "queued") != 0)
            overlapped = 1;
        else if (!gang_done)
            seen_waiting++;
        json_decref(g);
        json_decref(s);
        usleep(100 * 1000);
    }
    assert_true(gang_done);
    assert_false(overlapped);
    if (seen_waiting == 0)
        fail_msg("the gang ended before the second job could be seen "
                 "waiting for it");
    j = wait_job(&server, single, 300);
    assert_string_equal(str(j, "status"), "succeeded");
    json_decref(j);
    j = get_job(&server, gang);
    assert_string_equal(str(j, "status"), "succeeded");
    json_decref(j);
}

/* An elastic gang (resources.min_workers) larger than the server's
 * --max-jobs 2 runs at the largest world size that fits: 3 workers, at
 * least 2, run as 2 and succeed; the same job without min_workers is a
 * 422 on resources.workers. */
static void test_elastic_gang_runs_at_what_fits(void **state)
{
    (void)state;
    if (!have_mpi)
        skip();
    const char *hp = "{\"epochs\": 2, \"batch_size\": 66, \"seed\": 5}";
    char body[1024];
    snprintf(body, sizeof body,
             "{\"dataset\": \"blobs\", \"model\": " MLP
             ", \"hyperparameters\": %s, \"resources\": {\"workers\": 3}}",
             hp);
    resp *r = http_json(&server, "POST", "/v1/jobs", body);
    expect_refusal(&server, r, 422, "resources.workers", NULL);
    char id[64];
    submit(MLP, hp, "{\"workers\": 3, \"min_workers\": 2}", id);
    json_t *j = wait_job(&server, id, 300);
    assert_string_equal(str(j, "status"), "succeeded");
    const json_t *res = json_object_get(j, "resources");
    assert_int_equal(json_integer_value(json_object_get(res, "workers")), 3);
    assert_int_equal(json_integer_value(json_object_get(res, "min_workers")),
                     2);
    const json_t *pl = json_object_get(j, "placement");
    assert_int_equal(json_integer_value(json_object_get(pl, "world_size")), 2);
    assert_int_equal(json_array_size(json_object_get(pl, "ranks")), 2);
    json_decref(j);
    json_t *e = job_epochs(&server, id);
    assert_int_equal(json_array_size(e), 2);
    for (size_t i = 0; i < json_array_size(e); i++)
        assert_int_equal(json_integer_value(json_object_get(
                             json_array_get(e, i), "world_size")),
                         2);
    json_decref(e);
}

/* The ranks among procs, the processes in job id's folder (found by
 * find_children): all but mpirun, which the placement names. */
static int ranks_of(const pid_t *procs, int n, json_int_t mpirun, pid_t *ranks)
{
    int k = 0;
    for (int i = 0; i < n && i < 8; i++)
        if (procs[i] != (pid_t)mpirun)
            ranks[k++] = procs[i];
    return k;
}

static void test_gang_rank_killed(void **state)
{
    (void)state;
    if (!have_mpi)
        skip();
    char id[64];
    submit(WIDE_MLP, "{\"epochs\": 60, \"batch_size\": 32, \"seed\": 9}",
           "{\"workers\": 2}", id);
    /* past its second epoch: a checkpoint is on disk */
    pid_t found[8], ranks[8];
    int nranks = 0, procs = 0;
    double until = now_seconds() + 120;
    for (;;) {
        json_t *j = get_job(&server, id);
        const json_int_t epoch = json_integer_value(
            json_object_get(json_object_get(j, "progress"), "epoch"));
        const json_int_t mpirun = json_integer_value(
            json_object_get(json_object_get(j, "placement"), "worker_pid"));
        char status[32];
        snprintf(status, sizeof status, "%s", str(j, "status"));
        json_decref(j);
        procs = find_children(&server, "worker", id, found, 8);
        nranks = ranks_of(found, procs, mpirun, ranks);
        if (!strcmp(status, "running") && epoch >= 2 && mpirun > 0 &&
            nranks == 2)
            break;
        if (now_seconds() > until ||
            (strcmp(status, "running") && strcmp(status, "queued")))
            fail_msg("the job did not run its second epoch on 2 workers: "
                     "status %s, epoch %lld, %d processes of which %d ranks",
                     status, (long long)epoch, procs, nranks);
        usleep(50 * 1000);
    }
    /* rank 1's process: either is a rank; kill the one started last */
    pid_t victim = ranks[0] > ranks[1] ? ranks[0] : ranks[1];
    const double t0 = now_seconds();
    assert_int_equal(kill(victim, SIGKILL), 0);
    int left = 0;
    do {
        usleep(100 * 1000);
        left = find_children(&server, "worker", id, found, 8);
    } while (left > 0 && now_seconds() - t0 < 30);
    fprintf(stderr, "a worker killed: the gang was gone %.1f s later\n",
            now_seconds() - t0);
    if (left > 0)
        fail_msg("%d processes of the job still run 30 s after one of its "
                 "workers was killed",
                 left);
    /* The retry runs the whole gang again, holding both CPU places: a job
     * submitted while it runs waits for it (before, the retry list gave a
     * gang back to the scheduler as one worker's job, so this one ran
     * beside the gang's 2 workers, 3 processes on 2 places). */
    until = now_seconds() + 120;
    for (;;) {
        json_t *g = get_job(&server, id);
        const int again =
            !strcmp(str(g, "status"), "running") &&
            json_integer_value(json_object_get(g, "attempts")) >= 2;
        json_decref(g);
        if (again)
            break;
        if (now_seconds() > until)
            fail_msg("the gang did not run again within 120 s");
        usleep(50 * 1000);
    }
    char single[64];
    submit(MLP, "{\"epochs\": 1, \"batch_size\": 32}", "{\"gpu\": \"none\"}",
           single);
    int overlapped = 0, seen_waiting = 0, gang_done = 0;
    while (!gang_done && now_seconds() < until + 600) {
        json_t *g = get_job(&server, id), *o = get_job(&server, single);
        gang_done = strcmp(str(g, "status"), "running") != 0;
        if (!gang_done && strcmp(str(o, "status"), "queued") != 0)
            overlapped = 1;
        else if (!gang_done)
            seen_waiting++;
        json_decref(g);
        json_decref(o);
        usleep(100 * 1000);
    }
    if (overlapped)
        fail_msg("a job ran beside the retried gang, which holds both of "
                 "the server's CPU places");
    if (seen_waiting == 0)
        fail_msg("the retried gang ended before the other job could be "
                 "seen waiting for it");
    /* it resumes from its checkpoint and finishes */
    json_t *j = wait_job(&server, id, 600);
    const json_int_t attempts =
        json_integer_value(json_object_get(j, "attempts"));
    if (strcmp(str(j, "status"), "succeeded") || attempts < 2)
        fail_msg("after a worker was killed: status %s, attempts %lld, "
                 "error %s",
                 str(j, "status"), (long long)attempts,
                 str(j, "error") ? str(j, "error") : "none");
    /* the retry ran the whole gang again (before, the scheduler took a
     * retried gang back as one worker's job) */
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(j, "placement"), "world_size")),
                     2);
    json_decref(j);
    json_t *e = job_epochs(&server, id);
    if (json_array_size(e) != 60)
        fail_msg("%zu epoch records of 60", json_array_size(e));
    json_decref(e);
    j = wait_job(&server, single, 300);
    assert_string_equal(str(j, "status"), "succeeded");
    json_decref(j);
}

/* The step of job id's last `event` line in server s's log (job_resume,
 * job_preempted), or -1 when none; *checkpointed: that line's
 * "checkpointed" (0 when absent). */
static long long logged_step(const srv *s, const char *id, const char *event,
                             int *checkpointed)
{
    long long step = -1;
    char tag[64];
    snprintf(tag, sizeof tag, "\"%s\"", event);
    FILE *f = fopen(s->log, "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f)) {
        if (!strstr(line, tag) || !strstr(line, id))
            continue;
        json_t *o = json_loads(line, 0, NULL);
        const json_t *v = json_object_get(o, "step");
        if (json_is_integer(v)) {
            step = (long long)json_integer_value(v);
            *checkpointed = json_is_true(json_object_get(o, "checkpointed"));
        }
        json_decref(o);
    }
    if (f)
        fclose(f);
    return step;
}

/* A running gang preempted: the supervisor's preemption is SIGUSR1 to
 * the place's process, mpirun, which hands it to every rank
 * (supervisor_preempt; the scheduler never picks CPU jobs as victims and
 * the API has no preempt call, so the test sends it as the supervisor
 * would). Both ranks stop at the step they agree on, rank 0 writes the
 * checkpoint there (the server's job_preempted: a step at or past the
 * one seen before the signal, checkpointed), and the job goes back to the
 * queue (preemptions 1, none of its processes left) and resumes at that
 * very step (job_resume), to success: every epoch recorded, attempts
 * still 1 (a rank killed by the signal would have failed the attempt). */
static void test_gang_preempted_resumes(void **state)
{
    (void)state;
    if (!have_mpi)
        skip();
    char id[64];
    submit(WIDE_MLP, "{\"epochs\": 12, \"batch_size\": 32, \"seed\": 4}",
           "{\"workers\": 2}", id);
    /* running on 2 ranks, a few steps in */
    long long seen_step = 0;
    json_int_t mpirun = 0;
    pid_t found[8], ranks[8];
    int nranks = 0;
    double until = now_seconds() + 120;
    for (;;) {
        json_t *j = get_job(&server, id);
        seen_step = (long long)json_integer_value(
            json_object_get(json_object_get(j, "progress"), "step"));
        mpirun = json_integer_value(
            json_object_get(json_object_get(j, "placement"), "worker_pid"));
        const int running = !strcmp(str(j, "status"), "running");
        json_decref(j);
        nranks = ranks_of(found, find_children(&server, "worker", id, found, 8),
                          mpirun, ranks);
        if (running && seen_step >= 5 && mpirun > 0 && nranks == 2)
            break;
        if (now_seconds() > until || (!running && seen_step > 0))
            fail_msg("the gang was not seen running past step 5 on 2 ranks "
                     "(step %lld, %d ranks)",
                     seen_step, nranks);
        usleep(20 * 1000);
    }
    assert_int_equal(kill((pid_t)mpirun, SIGUSR1), 0);
    /* back in the queue (or already restarted), its first run's processes
     * gone */
    int preempted = 0;
    until = now_seconds() + 60;
    while (!preempted && now_seconds() < until) {
        json_t *j = get_job(&server, id);
        preempted = json_integer_value(json_object_get(j, "preemptions")) == 1;
        if (!strcmp(str(j, "status"), "failed"))
            fail_msg("the preempted gang failed: %s",
                     str(j, "error") ? str(j, "error") : "?");
        json_decref(j);
        if (!preempted)
            usleep(20 * 1000);
    }
    assert_true(preempted);
    int left = nranks;
    until = now_seconds() + 30;
    while (left > 0 && now_seconds() < until) {
        left = 0;
        for (int i = 0; i < nranks; i++)
            left += kill(ranks[i], 0) == 0 || errno != ESRCH;
        if (left)
            usleep(50 * 1000);
    }
    assert_int_equal(left, 0);
    json_t *j = wait_job(&server, id, 600);
    if (strcmp(str(j, "status"), "succeeded"))
        fail_msg("the preempted gang: %s (%s)", str(j, "status"),
                 str(j, "error") ? str(j, "error") : "no error");
    assert_int_equal(json_integer_value(json_object_get(j, "preemptions")), 1);
    assert_int_equal(json_integer_value(json_object_get(j, "attempts")), 1);
    assert_true(json_is_integer(
        json_object_get(json_object_get(j, "progress"), "resumed_from_epoch")));
    json_decref(j);
    int checkpointed = 0, ignore;
    const long long stopped =
        logged_step(&server, id, "job_preempted", &checkpointed);
    const long long resumed = logged_step(&server, id, "job_resume", &ignore);
    fprintf(stderr,
            "the gang was seen at step %lld before SIGUSR1, stopped at step "
            "%lld (checkpointed: %d) and resumed at step %lld\n",
            seen_step, stopped, checkpointed, resumed);
    assert_true(stopped >= seen_step);
    assert_true(checkpointed);
    assert_int_equal(resumed, stopped);
    json_t *e = job_epochs(&server, id);
    assert_int_equal(json_array_size(e), 12);
    json_decref(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gang_trains_as_one),
        cmocka_unit_test(test_gang_refusals),
        cmocka_unit_test(test_elastic_gang_runs_at_what_fits),
        cmocka_unit_test(test_gang_holds_its_places),
        cmocka_unit_test(test_gang_rank_killed),
        cmocka_unit_test(test_gang_preempted_resumes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
