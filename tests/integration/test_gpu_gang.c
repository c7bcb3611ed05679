/*
 * Integration tests for gangs of whole GPUs (resources.gpus, issue 33) on
 * a server with a simulated inventory of two whole GPUs, MIG off
 * (gpu/sim/a100-2x-nomig.json): the scheduler places the gang on both,
 * mpirun starts a rank per GPU, each rank takes its own member's device
 * (sim:<uuid>, computing on the CPU, so the ranks join over MPI as a CPU
 * gang does; NCCL is for real CUDA devices).
 *
 *   - {"gpus": 2} succeeds; its placement lists 2 ranks on the 2 different
 *     sim devices (slot, gpu, uuid each), each rank's log line says it
 *     took its own device, its epochs say world_size 2, and its losses are
 *     those of the same job on {"workers": 2} within 1e-4 relative, epoch
 *     by epoch; its usage is one interval per GPU;
 *   - while a gang runs, GET /v1/devices shows both GPUs held by it and a
 *     whole-GPU job waits; cancelled, both are free again and that job
 *     runs;
 *   - a rank killed (SIGKILL) ends the gang, and the job is retried as
 *     the whole gang (2 ranks on 2 GPUs) from its checkpoint and succeeds;
 *   - refusals name the field: more GPUs than the node has, a count that
 *     is not 1..64, gpus beside workers, a MIG profile beside it, a
 *     batch_size the GPUs cannot share equally, nodes and gpus_per_node
 *     on a server without the Slurm executor.
 *
 * Skipped (a clear message) when the server says it cannot run
 * data-parallel jobs (no Open MPI in the build or no mpirun).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static srv server;
static char files[PATH_MAX];
static int have_mpi;

#define MLP                                                           \
    "{\"layers\": [{\"type\": \"dense\", \"units\": 32}, {\"type\": " \
    "\"relu\"}, {\"type\": \"dense\", \"units\": 3}]}"

static int setup(void **state)
{
    (void)state;
    char path[PATH_MAX], spec[PATH_MAX + 8];
    sim_example("a100-2x-nomig.json", path);
    snprintf(spec, sizeof spec, "sim:%s", path);
    /* 2 CPU places: the comparison job on {"workers": 2} */
    const char *flags[] = {"--devices",       spec,  "--max-jobs", "2",
                           "--retry-backoff", "0.2", NULL};
    if (srv_start(&server, NULL, flags))
        return -1;
    temp_dir(files);
    char csv[PATH_MAX], part[PATH_MAX + 16];
    snprintf(csv, sizeof csv, "%s/blobs.csv", files);
    make_blobs_csv(csv, 3000, 7);
    snprintf(part, sizeof part, "file=@%s", csv);
    const char *parts[] = {"name=blobs", "format=csv", "label_column=species",
                           part, NULL};
    resp *r = http_upload(&server, "/v1/datasets", parts);
    int ok = r->status == 201;
    resp_free(r);
    /* Whether this server runs gangs at all (Open MPI): a dry run of a
     * CPU gang says, whatever it makes of resources.gpus. */
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

/* Submits the blobs job with these hyperparameters and resources (JSON
 * texts), expecting 202; its id into id (64 bytes). */
static void submit(const char *hp, const char *resources, char *id)
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"dataset\": \"blobs\", \"model\": " MLP
             ", \"hyperparameters\": %s, \"resources\": %s}",
             hp, resources);
    resp *r = http_json(&server, "POST", "/v1/jobs", body);
    expect_status(r, 202);
    snprintf(id, 64, "%s", str(r->json, "id"));
    resp_free(r);
}

/* The jobs holding the server's GPUs, as GET /v1/devices shows them
 * (NULL: free), into held[0..n); returns how many GPUs there are. */
static int holders(char held[][64], int n)
{
    resp *r = http_get(&server, "/v1/devices");
    expect_status(r, 200);
    const json_t *gpus = json_object_get(r->json, "gpus");
    int k = 0;
    for (size_t i = 0; i < json_array_size(gpus) && k < n; i++) {
        const json_t *slices =
            json_object_get(json_array_get(gpus, i), "slices");
        assert_int_equal(json_array_size(slices), 1); /* MIG off */
        const char *job = json_string_value(
            json_object_get(json_array_get(slices, 0), "job"));
        snprintf(held[k++], 64, "%s", job ? job : "");
    }
    resp_free(r);
    return k;
}

/* How many usage intervals job id has, on how many distinct GPUs, and
 * how many are open (the store's rows). */
static void usage_rows(const char *id, int *n, int *devices, int *open)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/trainyard.db", server.data);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
                     SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt *st = NULL;
    assert_int_equal(
        sqlite3_prepare_v2(db,
                           "SELECT count(*), count(DISTINCT device), "
                           "sum(end_s IS NULL) FROM usage_intervals "
                           "WHERE owner = ? AND device >= 0",
                           -1, &st, NULL),
        SQLITE_OK);
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    *n = sqlite3_column_int(st, 0);
    *devices = sqlite3_column_int(st, 1);
    *open = sqlite3_column_int(st, 2);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* The same once the job's run entry is freed: its intervals close just
 * after the job's end is stored, so a reader may see them open for a
 * moment. */
static void usage_of(const char *id, int *n, int *devices, int *open)
{
    const double until = now_seconds() + 30;
    do {
        usage_rows(id, n, devices, open);
        if (*open == 0)
            return;
        usleep(50 * 1000);
    } while (now_seconds() < until);
}

/* Whether the job's worker.log has the line rank `rank` prints when it
 * takes device dev. */
static int rank_took(const char *id, int rank, const char *dev)
{
    char path[PATH_MAX + 128], line[512], want[256];
    snprintf(path, sizeof path, "%s/jobs/%s/worker.log", server.data, id);
    snprintf(want, sizeof want, "local rank %d on TRAINYARD_DEVICE=%s\n", rank,
             dev);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, want) != NULL;
    fclose(f);
    return found;
}

static void test_gpu_gang_trains_as_one(void **state)
{
    (void)state;
    if (!have_mpi)
        skip();
    const char *hp = "{\"epochs\": 3, \"batch_size\": 64, \"seed\": 5}";
    char gang[64], cpu[64];
    submit(hp, "{\"gpus\": 2}", gang);
    json_t *j = wait_job(&server, gang, 300);
    if (strcmp(str(j, "status"), "succeeded"))
        fail_msg("the gang of 2 GPUs ended %s: %s", str(j, "status"),
                 str(j, "error") ? str(j, "error") : "no error");
    const json_t *res = json_object_get(j, "resources");
    assert_int_equal(json_integer_value(json_object_get(res, "gpus")), 2);
    assert_string_equal(str(res, "gpu"), "whole");
    const json_t *pl = json_object_get(j, "placement");
    assert_string_equal(str(pl, "launcher"), "mpirun");
    const json_t *ranks = json_object_get(pl, "ranks");
    assert_int_equal(json_array_size(ranks), 2);
    const json_t *r0 = json_array_get(ranks, 0), *r1 = json_array_get(ranks, 1);
    for (size_t i = 0; i < 2; i++) {
        const json_t *r = json_array_get(ranks, i);
        assert_int_equal(json_integer_value(json_object_get(r, "rank")),
                         (json_int_t)i);
        const char *dev = str(r, "device");
        assert_non_null(dev);
        assert_int_equal(strncmp(dev, "sim:", 4), 0);
        /* the device is its GPU's, and the rank took it */
        assert_string_equal(dev + 4, str(r, "uuid"));
        assert_string_equal(str(r, "cuda_visible_devices"), str(r, "uuid"));
        if (!rank_took(gang, (int)i, dev))
            fail_msg("rank %zu's log does not say it took %s", i, dev);
    }
    assert_string_not_equal(str(r0, "device"), str(r1, "device"));
    /* the members' slots, for a restarted server */
    const json_t *gs = json_object_get(pl, "gang_slots");
    assert_int_equal(json_array_size(gs), 2);
    assert_int_equal(json_integer_value(json_array_get(gs, 0)),
                     json_integer_value(json_object_get(r0, "slot")));
    assert_int_equal(json_integer_value(json_array_get(gs, 1)),
                     json_integer_value(json_object_get(r1, "slot")));
    assert_int_not_equal(json_integer_value(json_object_get(r0, "gpu")),
                         json_integer_value(json_object_get(r1, "gpu")));
    assert_int_not_equal(json_integer_value(json_object_get(r0, "slot")),
                         json_integer_value(json_object_get(r1, "slot")));
    /* rank 0 speaks for the job: what it saw is its own member's device */
    assert_string_equal(
        str(json_object_get(pl, "worker_saw"), "trainyard_device"),
        str(r0, "device"));
    json_decref(j);

    int n = 0, devices = 0, open = 0;
    usage_of(gang, &n, &devices, &open);
    assert_int_equal(n, 2);
    assert_int_equal(devices, 2);
    assert_int_equal(open, 0);

    submit(hp, "{\"workers\": 2}", cpu);
    j = wait_job(&server, cpu, 300);
    assert_string_equal(str(j, "status"), "succeeded");
    json_decref(j);

    json_t *eg = job_epochs(&server, gang), *ec = job_epochs(&server, cpu);
    assert_int_equal(json_array_size(eg), 3);
    assert_int_equal(json_array_size(ec), 3);
    for (size_t i = 0; i < 3; i++) {
        const json_t *a = json_array_get(eg, i), *b = json_array_get(ec, i);
        assert_int_equal(json_integer_value(json_object_get(a, "world_size")),
                         2);
        const double la = json_number_value(json_object_get(a, "train_loss"));
        const double lb = json_number_value(json_object_get(b, "train_loss"));
        fprintf(stderr, "epoch %zu: train_loss 2 GPUs %.9g, 2 workers %.9g\n",
                i + 1, la, lb);
        if (!(la > 0 && fabs(la - lb) <= 1e-4 * fabs(lb)))
            fail_msg("epoch %zu: train_loss %.9g on 2 GPUs, %.9g on 2 workers",
                     i + 1, la, lb);
    }
    json_decref(eg);
    json_decref(ec);
}

static void test_gpu_gang_holds_both(void **state)
{
    (void)state;
    if (!have_mpi)
        skip();
    char gang[64], single[64];
    submit("{\"epochs\": 500, \"batch_size\": 32, \"seed\": 4}",
           "{\"gpus\": 2}", gang);
    double until = now_seconds() + 120;
    for (;;) {
        json_t *j = get_job(&server, gang);
        char status[32];
        snprintf(status, sizeof status, "%s", str(j, "status"));
        json_decref(j);
        if (!strcmp(status, "running"))
            break;
        if (strcmp(status, "queued") || now_seconds() > until)
            fail_msg("the gang did not start: %s", status);
        usleep(50 * 1000);
    }
    char held[4][64];
    assert_int_equal(holders(held, 4), 2);
    assert_string_equal(held[0], gang);
    assert_string_equal(held[1], gang);
    /* a whole GPU asked for meanwhile waits for the gang */
    submit("{\"epochs\": 1, \"batch_size\": 32}", "{\"gpus\": 1}", single);
    for (int i = 0; i < 5; i++) {
        json_t *g = get_job(&server, gang), *s = get_job(&server, single);
        int gang_running = !strcmp(str(g, "status"), "running");
        if (gang_running)
            assert_string_equal(str(s, "status"), "queued");
        json_decref(g);
        json_decref(s);
        usleep(100 * 1000);
    }
    char p[128];
    snprintf(p, sizeof p, "/v1/jobs/%s/cancel", gang);
    resp *r = http_do(&server, "POST", p, NULL, NULL, 0, NULL);
    assert_true(r->status == 200 || r->status == 202);
    resp_free(r);
    json_t *j = wait_job(&server, gang, 120);
    assert_string_equal(str(j, "status"), "cancelled");
    json_decref(j);
    /* the single job gets a GPU; the gang holds none any more */
    j = wait_job(&server, single, 300);
    assert_string_equal(str(j, "status"), "succeeded");
    json_decref(j);
    assert_int_equal(holders(held, 4), 2);
    assert_string_not_equal(held[0], gang);
    assert_string_not_equal(held[1], gang);
    int n = 0, devices = 0, open = 0;
    usage_of(gang, &n, &devices, &open);
    assert_int_equal(n, 2);
    assert_int_equal(devices, 2);
    assert_int_equal(open, 0);
}

/* A rank killed: the gang ends, and the job is retried as the whole gang
 * (both GPUs, a rank on each), resuming from its checkpoint. */
static void test_gpu_gang_retried_whole(void **state)
{
    (void)state;
    if (!have_mpi)
        skip();
    char id[64];
    submit("{\"epochs\": 150, \"batch_size\": 32, \"seed\": 9}",
           "{\"gpus\": 2}", id);
    pid_t found[8];
    double until = now_seconds() + 120;
    pid_t victim = 0;
    for (;;) {
        json_t *j = get_job(&server, id);
        const json_int_t epoch = json_integer_value(
            json_object_get(json_object_get(j, "progress"), "epoch"));
        const json_int_t mpirun = json_integer_value(
            json_object_get(json_object_get(j, "placement"), "worker_pid"));
        char status[32];
        snprintf(status, sizeof status, "%s", str(j, "status"));
        json_decref(j);
        int n = find_children(&server, "worker", id, found, 8);
        if (!strcmp(status, "running") && epoch >= 2 && mpirun > 0 && n == 3) {
            /* the rank started last of mpirun's two */
            for (int i = 0; i < n; i++)
                if (found[i] != (pid_t)mpirun && found[i] > victim)
                    victim = found[i];
            break;
        }
        if (now_seconds() > until ||
            (strcmp(status, "running") && strcmp(status, "queued")))
            fail_msg("the gang did not run its second epoch: status %s, "
                     "epoch %lld, %d processes",
                     status, (long long)epoch, n);
        usleep(20 * 1000);
    }
    assert_int_equal(kill(victim, SIGKILL), 0);
    json_t *j = wait_job(&server, id, 300);
    const json_int_t attempts =
        json_integer_value(json_object_get(j, "attempts"));
    if (strcmp(str(j, "status"), "succeeded") || attempts < 2)
        fail_msg("after a rank was killed: status %s, attempts %lld, error %s",
                 str(j, "status"), (long long)attempts,
                 str(j, "error") ? str(j, "error") : "none");
    /* the retry ran the whole gang again */
    const json_t *ranks =
        json_object_get(json_object_get(j, "placement"), "ranks");
    assert_int_equal(json_array_size(ranks), 2);
    assert_string_not_equal(str(json_array_get(ranks, 0), "device"),
                            str(json_array_get(ranks, 1), "device"));
    json_decref(j);
    json_t *e = job_epochs(&server, id);
    assert_int_equal(json_array_size(e), 150);
    assert_int_equal(json_integer_value(
                         json_object_get(json_array_get(e, 149), "world_size")),
                     2);
    json_decref(e);
}

static void test_gpu_gang_refusals(void **state)
{
    (void)state;
    static const struct {
        const char *hp, *resources, *field;
    } bad[] = {
        {"{\"batch_size\": 64}", "{\"gpus\": 3}", "resources.gpus"},
        {"{}", "{\"gpus\": 0}", "resources.gpus"},
        {"{}", "{\"gpus\": 65}", "resources.gpus"},
        {"{}", "{\"gpus\": \"2\"}", "resources.gpus"},
        {"{}", "{\"gpus\": 2, \"workers\": 2}", "resources.gpus"},
        {"{}", "{\"gpus\": 2, \"gpu\": \"1g.10gb\"}", "resources.gpu"},
        {"{}", "{\"gpus\": 2, \"gpu\": \"none\"}", "resources.gpu"},
        {"{\"batch_size\": 63}", "{\"gpus\": 2}", "hyperparameters.batch_size"},
        /* GPUs over several nodes: the Slurm executor's */
        {"{}", "{\"nodes\": 2, \"gpus_per_node\": 1}", "resources.nodes"},
        {"{}", "{\"nodes\": 2}", "resources.gpus_per_node"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        /* without mpirun a well-formed gang is refused on resources.gpus
         * before its batch_size is looked at */
        if (!have_mpi && !strcmp(bad[i].field, "hyperparameters.batch_size"))
            continue;
        char body[1024];
        snprintf(body, sizeof body,
                 "{\"dataset\": \"blobs\", \"model\": " MLP
                 ", \"hyperparameters\": %s, \"resources\": %s}",
                 bad[i].hp, bad[i].resources);
        resp *r = http_json(&server, "POST", "/v1/jobs", body);
        expect_refusal(&server, r, 422, bad[i].field, NULL);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_gang_refusals),
        cmocka_unit_test(test_gpu_gang_trains_as_one),
        cmocka_unit_test(test_gpu_gang_holds_both),
        cmocka_unit_test(test_gpu_gang_retried_whole),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
