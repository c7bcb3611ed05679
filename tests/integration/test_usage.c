/*
 * Integration tests for usage accounting (issue 34): a real server on the
 * simulated H100 cut 3g.40gb + 2g.20gb + 1g.10gb + 1g.10gb
 * (gpu/sim/h100-mixed.json) with real worker processes computing on the
 * CPU, and GET /v1/usage.
 *
 *   adds up      two tenants' jobs on the 3g, 2g and 1g slices and a CPU
 *                job: each tenant's GPU-hours and CPU-hours equal the truth
 *                the test computes from the jobs' recorded start and finish
 *                times and the slices they asked for (within 1%), and the
 *                tenants' GPU-hours plus the idle hours equal the
 *                inventory's GPU-hours in the window within 1%
 *   restart      the server stopped (SIGTERM) while a job runs: its
 *                interval is closed at the stop, inside the stop's span, and
 *                the restarted run opens a new one
 *   crash        the server SIGKILLed while a job runs: the interval is
 *                left open, and the next start closes it at the last time
 *                the store proved the server alive: no earlier than the
 *                alive stamp seen before the kill, never after the kill
 *   serving      a CPU replica is recorded as serving, for its
 *                deployment, with one CPU place, closed when it drains;
 *                `trainyard usage` shows it as a table and as CSV
 *   isolation    a tenant's key sees its own rows only, in JSON and CSV,
 *                no inventory, and is refused another tenant's; the admin
 *                sees both tenants and may filter one
 *   bad input    400s naming from, to, group_by and format
 *
 * No timing assertions: intervals are checked against the times the test
 * and the server observed, by order only.
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
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "harness.h"

static char files[PATH_MAX];
static char sim_file[PATH_MAX + 8];

static char *file_path(const char *name)
{
    static char p[4][PATH_MAX];
    static int next;
    char *out = p[next++ % 4];
    snprintf(out, PATH_MAX, "%s/%s", files, name);
    return out;
}

static double wall(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + tv.tv_usec / 1e6;
}

static srv as(const srv *s, const char *key)
{
    srv t = *s;
    snprintf(t.key, sizeof t.key, "%s", key);
    return t;
}

static void create_tenant(const srv *s, const char *name, char id[64],
                          char key[128])
{
    char body[128];
    snprintf(body, sizeof body, "{\"name\": \"%s\"}", name);
    resp *r = http_json(s, "POST", "/v1/tenants", body);
    expect_status(r, 201);
    snprintf(id, 64, "%s", str(r->json, "id"));
    snprintf(key, 128, "%s", str(json_object_get(r->json, "key"), "api_key"));
    resp_free(r);
}

static void upload(const srv *s, const char *csv, char id[64])
{
    char part[PATH_MAX + 8];
    snprintf(part, sizeof part, "file=@%s", file_path(csv));
    const char *parts[] = {"name=blobs", "format=csv", "label_column=species",
                           part, NULL};
    resp *r = http_upload(s, "/v1/datasets", parts);
    expect_status(r, 201);
    snprintf(id, 64, "%s", str(r->json, "id"));
    resp_free(r);
}

static const char *const NET =
    "{\"layers\": [{\"type\": \"dense\", \"units\": 512}, {\"type\": \"relu\"},"
    " {\"type\": \"dense\", \"units\": 512}, {\"type\": \"relu\"},"
    " {\"type\": \"dense\", \"units\": 3}]}";

/* A job of `epochs` epochs asking for gpu ("1g.10gb", "none"). */
static void submit(const srv *s, const char *ds, int epochs, const char *gpu,
                   char id[64])
{
    char b[2048];
    snprintf(b, sizeof b,
             "{\"dataset\": \"%s\", \"model\": %s, \"hyperparameters\": "
             "{\"epochs\": %d, \"batch_size\": 8}, \"resources\": {\"gpu\": "
             "\"%s\"}}",
             ds, NET, epochs, gpu);
    resp *r = http_json(s, "POST", "/v1/jobs", b);
    expect_status(r, 202);
    snprintf(id, 64, "%s", str(r->json, "id"));
    resp_free(r);
}

static int is_running(const json_t *j)
{
    const char *st = str(j, "status");
    return st && !strcmp(st, "running") &&
           json_integer_value(json_object_get(json_object_get(j, "placement"),
                                              "worker_pid")) > 0;
}

/* RFC 3339 with milliseconds ("2026-11-29T18:36:10.123Z") as seconds. */
static double time_of(const char *t)
{
    struct tm tm = {0};
    int ms = 0;
    assert_non_null(t);
    assert_int_equal(sscanf(t, "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon,
                            &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec,
                            &ms),
                     7);
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (double)timegm(&tm) + ms / 1000.0;
}

static void sim_setup(void)
{
    snprintf(sim_file, sizeof sim_file, "sim:%s", __FILE__);
    char *cut = strstr(sim_file, "tests/integration/");
    assert_non_null(cut);
    snprintf(cut, sizeof sim_file - (size_t)(cut - sim_file),
             "gpu/sim/h100-mixed.json");
    assert_int_equal(access(sim_file + 4, R_OK), 0);
}

static int group_setup(void **state)
{
    (void)state;
    temp_dir(files);
    /* about half a second an epoch on one thread */
    make_blobs_csv(file_path("big.csv"), 12000, 11);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    fs_remove_tree(files, NULL);
    return 0;
}

static srv start(const char *data)
{
    sim_setup();
    const char *flags[] = {"--devices", sim_file, "--worker-threads", "1",
                           NULL};
    srv s;
    if (srv_start(&s, data, flags) != 0)
        fail_msg("the server did not start");
    return s;
}

/* GET path as s's key: the JSON reply, expected 200 (new reference). */
static json_t *get_json(const srv *s, const char *path)
{
    resp *r = http_do(s, "GET", path, NULL, NULL, 0, s->key);
    expect_status(r, 200);
    assert_non_null(r->json);
    json_t *doc = json_incref(r->json);
    resp_free(r);
    return doc;
}

static double fig(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    assert_true(json_is_number(v));
    return json_number_value(v);
}

/* The row of tenant id in a group_by=tenant reply, or NULL. */
static const json_t *tenant_row(const json_t *doc, const char *id)
{
    size_t i;
    const json_t *row;
    json_array_foreach (json_object_get(doc, "rows"), i, row)
        if (!strcmp(str(row, "tenant"), id))
            return row;
    return NULL;
}

/* ---- it adds up ---- */

typedef struct {
    const char *gpu;
    int slices; /* of 7; 0 a CPU job */
    int tenant; /* 0 or 1 */
    char id[64];
} planned_job;

static void test_usage_adds_up(void **state)
{
    (void)state;
    srv s = start(NULL);
    char tid[2][64], tkey[2][128], ds[2][64];
    create_tenant(&s, "ua", tid[0], tkey[0]);
    create_tenant(&s, "ub", tid[1], tkey[1]);
    srv t[2] = {as(&s, tkey[0]), as(&s, tkey[1])};
    upload(&t[0], "big.csv", ds[0]);
    upload(&t[1], "big.csv", ds[1]);
    planned_job jobs[] = {{"3g.40gb", 3, 0, ""},
                          {"1g.10gb", 1, 0, ""},
                          {"2g.20gb", 2, 1, ""},
                          {"1g.10gb", 1, 1, ""},
                          {"none", 0, 1, ""}};
    const int njobs = (int)(sizeof jobs / sizeof jobs[0]);
    double t0 = wall();
    for (int i = 0; i < njobs; i++)
        submit(&t[jobs[i].tenant], ds[jobs[i].tenant], 8, jobs[i].gpu,
               jobs[i].id);
    double gpu_truth[2] = {0, 0}, cpu_truth[2] = {0, 0}, slice_truth[2] = {0};
    /* The interval opens once the worker is spawned and closes when its
     * exit is reaped: a moment after the job's recorded start and finish.
     * A quarter of a second a job is allowed for each (in slice-seconds,
     * CPU-place-seconds). */
    double slice_slack[2] = {0, 0}, cpu_slack[2] = {0, 0};
    for (int i = 0; i < njobs; i++) {
        /* a job is its tenant's: the admin's key answers 404 */
        json_t *j = wait_job(&t[jobs[i].tenant], jobs[i].id, 600);
        assert_string_equal(str(j, "status"), "succeeded");
        assert_int_equal(json_integer_value(json_object_get(j, "attempts")), 1);
        double held =
            time_of(str(j, "finished_at")) - time_of(str(j, "started_at"));
        assert_true(held > 0);
        int k = jobs[i].tenant;
        if (jobs[i].slices) {
            gpu_truth[k] += held * jobs[i].slices / 7.0 / 3600;
            slice_truth[k] += held * jobs[i].slices / 3600;
            slice_slack[k] += 0.25 * jobs[i].slices / 3600;
        } else {
            cpu_truth[k] += held / 3600;
            cpu_slack[k] += 0.25 / 3600;
        }
        json_decref(j);
    }
    /* Let the last run entry be freed (its interval closes then). */
    usleep(500 * 1000);
    double t1 = wall();

    char path[256];
    snprintf(path, sizeof path, "/v1/usage?from=%.3f&to=%.3f&group_by=tenant",
             t0, t1);
    json_t *doc = get_json(&s, path);
    double sum_gpu = 0;
    for (int k = 0; k < 2; k++) {
        const json_t *row = tenant_row(doc, tid[k]);
        assert_non_null(row);
        double g = fig(row, "gpu_hours"), c = fig(row, "cpu_hours"),
               sl = fig(row, "slice_hours");
        fprintf(stderr,
                "tenant %d: gpu_hours %.6f (truth %.6f), slice_hours %.6f "
                "(truth %.6f), cpu_hours %.6f (truth %.6f)\n",
                k, g, gpu_truth[k], sl, slice_truth[k], c, cpu_truth[k]);
        /* within 1%, and the moments between the job's recorded start
         * (finish) and its run's */
        assert_true(fabs(g - gpu_truth[k]) <=
                    0.01 * gpu_truth[k] + slice_slack[k] / 7);
        assert_true(fabs(sl - slice_truth[k]) <=
                    0.01 * slice_truth[k] + slice_slack[k]);
        assert_true(fabs(c - cpu_truth[k]) <=
                    0.01 * cpu_truth[k] + cpu_slack[k]);
        sum_gpu += g;
    }
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(doc, "total"), "intervals")),
                     njobs);
    const json_t *inv = json_object_get(doc, "inventory");
    assert_non_null(inv);
    assert_int_equal(json_integer_value(json_object_get(inv, "gpus")), 1);
    double inv_hours = fig(inv, "gpu_hours"), idle = fig(inv, "idle_gpu_hours");
    assert_true(fabs(inv_hours - (t1 - t0) / 3600) < 1e-6);
    /* the tenants' GPU-hours plus the idle ones are the inventory's */
    assert_true(fabs(sum_gpu + idle - inv_hours) <= 0.01 * inv_hours);
    /* and the idle ones are what the truth leaves idle */
    double truth_idle = inv_hours - gpu_truth[0] - gpu_truth[1];
    assert_true(fabs(idle - truth_idle) <= 0.01 * inv_hours);
    assert_true(idle > 0);
    json_decref(doc);

    /* day,kind: every figure under "training", the same totals */
    snprintf(path, sizeof path, "/v1/usage?from=%.3f&to=%.3f&group_by=day,kind",
             t0, t1);
    doc = get_json(&s, path);
    json_t *keys = json_object_get(doc, "group_by");
    assert_int_equal(json_array_size(keys), 2);
    assert_string_equal(json_string_value(json_array_get(keys, 0)), "day");
    size_t i;
    json_t *row;
    double g2 = 0;
    json_array_foreach (json_object_get(doc, "rows"), i, row) {
        assert_string_equal(str(row, "kind"), "training");
        assert_non_null(str(row, "day"));
        assert_null(json_object_get(row, "tenant"));
        g2 += fig(row, "gpu_hours");
    }
    assert_true(fabs(g2 - sum_gpu) < 1e-9);
    json_decref(doc);

    /* the public scrape counts slice-seconds by kind, naming no tenant */
    resp *r = http_do(&s, "GET", "/metrics", NULL, NULL, 0, "");
    expect_status(r, 200);
    assert_non_null(strstr(r->body, "trainyard_usage_slice_seconds_total"));
    assert_null(strstr(r->body, tid[0]));
    assert_null(strstr(r->body, tid[1]));
    resp_free(r);

    srv_stop(&s, SIGTERM);
    srv_cleanup(&s);
}

/* ---- the intervals in the store, read as the server left them ---- */

typedef struct {
    int n;
    double start[8], end[8]; /* end -1: open */
} intervals;

static void read_intervals(const srv *s, const char *owner, intervals *out)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/trainyard.db", s->data);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
                     SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT start_s, end_s FROM "
                                        "usage_intervals WHERE owner = ? "
                                        "ORDER BY id",
                                        -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_text(st, 1, owner, -1, SQLITE_TRANSIENT);
    out->n = 0;
    while (sqlite3_step(st) == SQLITE_ROW && out->n < 8) {
        out->start[out->n] = sqlite3_column_double(st, 0);
        out->end[out->n] = sqlite3_column_type(st, 1) == SQLITE_NULL
                               ? -1
                               : sqlite3_column_double(st, 1);
        out->n++;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* read_intervals once owner has at least n intervals (or after 30 s): a
 * job's status may read running a moment before its interval is written
 * (the interval opens once the start succeeded), and after a restart the
 * store still says running before the job is started again. */
static void wait_intervals(const srv *s, const char *owner, int n,
                           intervals *out)
{
    for (int i = 0; i < 300; i++) {
        read_intervals(s, owner, out);
        if (out->n >= n)
            return;
        usleep(100 * 1000);
    }
}

static double alive_stamp(const srv *s)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/trainyard.db", s->data);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
                     SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt *st = NULL;
    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT at_s FROM usage_alive WHERE id = 1", -1,
                           &st, NULL),
        SQLITE_OK);
    double v =
        sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_double(st, 0) : -1;
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* Waits until the job runs with a worker (fails the test after 300 s). */
static void wait_running(const srv *s, const char *id)
{
    json_t *j = wait_job_until(s, id, 300, is_running);
    assert_non_null(j);
    assert_true(is_running(j));
    json_decref(j);
}

static void cancel_and_wait(const srv *s, const char *id)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s/cancel", id);
    resp *r = http_do(s, "POST", path, NULL, NULL, 0, NULL);
    assert_true(r->status == 200 || r->status == 202);
    resp_free(r);
    json_decref(wait_job(s, id, 120));
}

/* The server stopped cleanly with a job running, then started again. */
static void test_usage_restart_mid_interval(void **state)
{
    (void)state;
    srv s = start(NULL);
    char ds[64], job[64];
    upload(&s, "big.csv", ds);
    submit(&s, ds, 400, "1g.10gb", job);
    wait_running(&s, job);
    intervals iv;
    wait_intervals(&s, job, 1, &iv);
    assert_int_equal(iv.n, 1);
    assert_true(iv.end[0] < 0); /* open while it runs */

    double before = wall();
    assert_int_equal(srv_stop(&s, SIGTERM) & 0x7f, 0);
    double after = wall();
    read_intervals(&s, job, &iv);
    assert_int_equal(iv.n, 1);
    /* closed by the stop, within it */
    assert_true(iv.end[0] >= before - 0.01);
    assert_true(iv.end[0] <= after + 0.01);
    assert_true(iv.end[0] >= iv.start[0]);

    srv again;
    const char *flags[] = {"--devices", sim_file, "--worker-threads", "1",
                           NULL};
    assert_int_equal(srv_start(&again, s.data, flags), 0);
    wait_running(&again, job);
    wait_intervals(&again, job, 2, &iv);
    assert_int_equal(iv.n, 2);
    /* the first untouched by the restart, the second open after it */
    assert_true(iv.end[0] <= after + 0.01);
    assert_true(iv.start[1] >= after - 0.01);
    assert_true(iv.end[1] < 0);
    cancel_and_wait(&again, job);
    usleep(500 * 1000);
    read_intervals(&again, job, &iv);
    assert_int_equal(iv.n, 2);
    assert_true(iv.end[1] >= iv.start[1]);
    srv_stop(&again, SIGTERM);
    srv_cleanup(&again);
}

/* The server SIGKILLed with a job running: recovery closes the interval
 * at the last proven time. */
static void test_usage_crash_closed_at_proven_time(void **state)
{
    (void)state;
    srv s = start(NULL);
    char ds[64], job[64];
    upload(&s, "big.csv", ds);
    submit(&s, ds, 400, "2g.20gb", job);
    wait_running(&s, job);
    intervals iv;
    wait_intervals(&s, job, 1, &iv);
    assert_int_equal(iv.n, 1);
    /* Wait for an alive stamp after the interval's start (one every 10
     * s), so the proven time is inside the interval. */
    double stamp = alive_stamp(&s);
    for (int i = 0; i < 600 && stamp <= iv.start[0]; i++) {
        usleep(100 * 1000);
        stamp = alive_stamp(&s);
    }
    assert_true(stamp > iv.start[0]);
    srv_stop(&s, SIGKILL);
    double killed = wall();
    read_intervals(&s, job, &iv);
    assert_int_equal(iv.n, 1);
    assert_true(iv.end[0] < 0); /* the crash left it open */

    /* the orphaned worker, if any, dies with its pipe; give it a moment */
    srv again;
    const char *flags[] = {"--devices", sim_file, "--worker-threads", "1",
                           NULL};
    assert_int_equal(srv_start(&again, s.data, flags), 0);
    read_intervals(&again, job, &iv);
    assert_true(iv.n >= 1);
    /* closed at recovery: never left open, never past the kill, and not
     * before what the store had proven when the test looked */
    assert_true(iv.end[0] >= 0);
    assert_true(iv.end[0] <= killed);
    assert_true(iv.end[0] >= stamp);
    assert_true(iv.end[0] > iv.start[0]);
    fprintf(stderr, "crash: interval %.3f..%.3f, stamp %.3f, killed %.3f\n",
            iv.start[0], iv.end[0], stamp, killed);

    /* the usage of the window up to now counts the first interval as
     * closed: asked twice, a second apart, its hours do not grow */
    char path[256];
    snprintf(path, sizeof path, "/v1/usage?from=%.3f&to=%.3f&group_by=kind",
             iv.start[0] - 1, killed + 0.001);
    json_t *a = get_json(&again, path);
    sleep(1);
    json_t *b = get_json(&again, path);
    double ga = fig(json_object_get(a, "total"), "slice_hours"),
           gb = fig(json_object_get(b, "total"), "slice_hours");
    assert_true(fabs(ga - gb) < 1e-9);
    assert_true(ga > 0);
    json_decref(a);
    json_decref(b);
    cancel_and_wait(&again, job);
    srv_stop(&again, SIGTERM);
    srv_cleanup(&again);
}

/* ---- serving, and the CLI ---- */

/* One column of interval rows of owner, as text ("" for NULL), into out. */
static void interval_text(const srv *s, const char *owner, const char *col,
                          char *out, size_t n)
{
    char path[PATH_MAX + 32], q[256];
    snprintf(path, sizeof path, "%s/trainyard.db", s->data);
    snprintf(q, sizeof q,
             "SELECT coalesce(%s, '') FROM usage_intervals WHERE owner = ?",
             col);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
                     SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, q, -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_text(st, 1, owner, -1, SQLITE_TRANSIENT);
    out[0] = '\0';
    if (sqlite3_step(st) == SQLITE_ROW)
        snprintf(out, n, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* A CPU serving replica is recorded as serving, for its deployment, with
 * its replica's id and one CPU place, closed when it drains; `trainyard
 * usage` shows it, as a table and as CSV. */
static void test_usage_serving_and_cli(void **state)
{
    (void)state;
    srv s = start(NULL);
    char ds[64], job[64], dpath[128];
    upload(&s, "big.csv", ds);
    submit(&s, ds, 1, "1g.10gb", job);
    json_t *j = wait_job(&s, job, 600);
    assert_string_equal(str(j, "status"), "succeeded");
    char model[64];
    snprintf(model, sizeof model, "%s", str(j, "model"));
    json_decref(j);
    double t0 = wall();
    deploy_cpu_ready(&s, "usage-dep", model, dpath);
    const char *dep = dpath + strlen("/v1/deployments/");
    intervals iv;
    read_intervals(&s, dep, &iv);
    assert_int_equal(iv.n, 1);
    assert_true(iv.end[0] < 0);
    char text[128];
    interval_text(&s, dep, "kind", text, sizeof text);
    assert_string_equal(text, "serving");
    interval_text(&s, dep, "replica", text, sizeof text);
    assert_true(text[0] != '\0');
    interval_text(&s, dep, "cpu", text, sizeof text);
    assert_string_equal(text, "1");
    interval_text(&s, dep, "profile", text, sizeof text);
    assert_string_equal(text, ""); /* NULL: CPU places */

    resp *r = http_do(&s, "DELETE", dpath, NULL, NULL, 0, NULL);
    assert_true(r->status == 202 || r->status == 200 || r->status == 204);
    resp_free(r);
    for (int i = 0; i < 600 && iv.end[0] < 0; i++) {
        usleep(100 * 1000);
        read_intervals(&s, dep, &iv);
    }
    assert_true(iv.end[0] >= iv.start[0]);

    char path[256];
    snprintf(path, sizeof path, "/v1/usage?from=%.3f&group_by=kind,profile",
             t0);
    json_t *doc = get_json(&s, path);
    size_t i;
    json_t *row;
    int serving = 0;
    json_array_foreach (json_object_get(doc, "rows"), i, row) {
        if (!strcmp(str(row, "kind"), "serving")) {
            serving = 1;
            assert_string_equal(str(row, "profile"), "cpu");
            assert_true(fig(row, "cpu_hours") > 0);
            assert_true(fig(row, "gpu_hours") == 0);
        }
    }
    assert_true(serving);
    json_decref(doc);

    char home[PATH_MAX];
    temp_dir(home);
    char from[32];
    snprintf(from, sizeof from, "%.3f", t0);
    cli_result c;
    const char *table[] = {"usage", "--from", from, "--group-by", "kind", NULL};
    cli_run(&c, home, s.base, s.key, table);
    cli_expect_code(&c, 0);
    assert_non_null(strstr(c.out, "KIND"));
    assert_non_null(strstr(c.out, "serving"));
    assert_non_null(strstr(c.out, "inventory: 1 GPU(s)"));
    cli_result_free(&c);
    const char *csv[] = {"usage", "--from", from, "--group-by",
                         "kind",  "--csv",  NULL};
    cli_run(&c, home, s.base, s.key, csv);
    cli_expect_code(&c, 0);
    static const char head[] =
        "kind,slice_hours,gpu_hours,cpu_hours,intervals\r\n";
    assert_int_equal(strncmp(c.out, head, sizeof head - 1), 0);
    assert_non_null(strstr(c.out, "serving,"));
    cli_result_free(&c);
    const char *bad[] = {"usage", "--group-by", "owner", NULL};
    cli_run(&c, home, s.base, s.key, bad);
    assert_true(c.code != 0);
    cli_result_free(&c);
    fs_remove_tree(home, NULL);
    srv_stop(&s, SIGTERM);
    srv_cleanup(&s);
}

/* ---- tenant isolation and bad input ---- */

static void test_usage_tenant_isolation(void **state)
{
    (void)state;
    srv s = start(NULL);
    char tid[2][64], tkey[2][128], ds[2][64], job[2][64];
    create_tenant(&s, "ia", tid[0], tkey[0]);
    create_tenant(&s, "ib", tid[1], tkey[1]);
    srv t[2] = {as(&s, tkey[0]), as(&s, tkey[1])};
    double t0 = wall();
    for (int k = 0; k < 2; k++) {
        upload(&t[k], "big.csv", ds[k]);
        submit(&t[k], ds[k], 1, k ? "1g.10gb" : "3g.40gb", job[k]);
    }
    for (int k = 0; k < 2; k++)
        json_decref(wait_job(&t[k], job[k], 600));
    usleep(500 * 1000);
    char q[256];
    snprintf(q, sizeof q, "/v1/usage?from=%.3f&group_by=tenant,profile", t0);

    for (int k = 0; k < 2; k++) {
        json_t *doc = get_json(&t[k], q);
        json_t *rows = json_object_get(doc, "rows");
        assert_int_equal(json_array_size(rows), 1);
        assert_string_equal(str(json_array_get(rows, 0), "tenant"), tid[k]);
        assert_string_equal(str(json_array_get(rows, 0), "profile"),
                            k ? "1g.10gb" : "3g.40gb");
        assert_null(json_object_get(doc, "inventory"));
        char *text = json_dumps(doc, 0);
        assert_null(strstr(text, tid[1 - k]));
        free(text);
        json_decref(doc);

        /* CSV: by format and by Accept */
        char qc[300];
        snprintf(qc, sizeof qc, "%s&format=csv", q);
        resp *r = http_do(&t[k], "GET", qc, NULL, NULL, 0, t[k].key);
        expect_status(r, 200);
        assert_non_null(strstr(r->content_type, "text/csv"));
        assert_non_null(strstr(r->body, "tenant,profile,slice_hours"));
        assert_non_null(strstr(r->body, tid[k]));
        assert_null(strstr(r->body, tid[1 - k]));
        resp_free(r);

        /* another tenant's, asked by name: refused */
        char qo[300];
        snprintf(qo, sizeof qo, "%s&tenant=%s", q, tid[1 - k]);
        expect_refusal(&t[k],
                       http_do(&t[k], "GET", qo, NULL, NULL, 0, t[k].key), 403,
                       "tenant", NULL);
    }

    /* The admin: both, and one on asking */
    json_t *doc = get_json(&s, q);
    assert_int_equal(json_array_size(json_object_get(doc, "rows")), 2);
    assert_non_null(json_object_get(doc, "inventory"));
    json_decref(doc);
    char qa[300];
    snprintf(qa, sizeof qa, "%s&tenant=%s", q, tid[1]);
    doc = get_json(&s, qa);
    assert_int_equal(json_array_size(json_object_get(doc, "rows")), 1);
    assert_string_equal(
        str(json_array_get(json_object_get(doc, "rows"), 0), "tenant"), tid[1]);
    json_decref(doc);

    /* bad input: 400 naming the parameter */
    static const struct {
        const char *query, *field;
    } bad[] = {
        {"from=2026-12-02T00:00:00Z&to=2026-12-01T00:00:00Z", "from"},
        {"from=1796428800&to=1796428800", "from"},
        {"from=yesterday", "from"},
        {"to=2026-13-01T00:00:00Z", "to"},
        {"from=2020-01-01T00:00:00Z&to=2026-01-01T00:00:00Z", "to"},
        {"group_by=owner", "group_by"},
        {"group_by=day,kind,tenant", "group_by"},
        {"group_by=day,day", "group_by"},
        {"group_by=", "group_by"},
        {"format=xml", "format"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char p[256];
        snprintf(p, sizeof p, "/v1/usage?%s", bad[i].query);
        expect_refusal(&t[0], http_do(&t[0], "GET", p, NULL, NULL, 0, t[0].key),
                       400, bad[i].field, NULL);
    }
    /* RFC 3339 with an offset and a date alone are times */
    doc = get_json(&t[0],
                   "/v1/usage?from=2026-12-01&to=2026-12-02T01:00:00%2B01:00");
    assert_string_equal(str(doc, "from"), "2026-12-01T00:00:00Z");
    assert_string_equal(str(doc, "to"), "2026-12-02T00:00:00Z");
    json_decref(doc);
    srv_stop(&s, SIGTERM);
    srv_cleanup(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage_tenant_isolation),
        cmocka_unit_test(test_usage_adds_up),
        cmocka_unit_test(test_usage_restart_mid_interval),
        cmocka_unit_test(test_usage_crash_closed_at_proven_time),
        cmocka_unit_test(test_usage_serving_and_cli),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
