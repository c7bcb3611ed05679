/*
 * Integration tests for what the server shows of its tenants to those who
 * should not see them (issue 29, findings 5 and 6):
 *
 *   metrics       two tenants, each with a finished job, a deployment with
 *                 a ready replica that served one predict, and tenant a
 *                 with a running job (its worker stopped with SIGSTOP so
 *                 its series hold still): GET /metrics with no key and
 *                 with either tenant's key names no tenant, deployment,
 *                 replica or job id anywhere, and its sums equal the sums
 *                 of the admin scrape's per-id series; the admin scrape
 *                 has those series; a bad key is 401, not the public view
 *   db modes      trainyard.db, -wal and -shm are 0600 after a start
 *                 (umask 022), and again after a restart that finds them
 *                 0644
 *   folder mode   a data folder made 0755 is 0700 after a start, and the
 *                 log says so in a warning; a second start has nothing to
 *                 say
 *
 * Every scrape is parsed by metrics_parse.py (prometheus_client's parser,
 * plus one HELP and TYPE per family and no series twice). No timing
 * assertions: every wait is a bounded poll.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "harness.h"

static char files[PATH_MAX];
static char parser[PATH_MAX];
static srv server;             /* its key is the admin's */
static pid_t stopped_pid;      /* a worker left stopped by a failed test */
static char own_dir[PATH_MAX]; /* a test's own folder, removed after it */

/* The labels that name a tenant's things: never in a public scrape. */
static const char *const id_labels[] = {"tenant", "deployment", "job", NULL};

static char *file_path(const char *name)
{
    static char p[4][PATH_MAX];
    static int next;
    char *out = p[next++ % 4];
    snprintf(out, PATH_MAX, "%s/%s", files, name);
    return out;
}

/* ---- scraping ---- */

typedef struct {
    char *text;      /* the exposition text */
    json_t *samples; /* [[name, {labels}, value], ...] */
} scrape;

/* GET /metrics with key (NULL: the admin's, "": none), expected 200 and
 * valid exposition text. */
static scrape scrape_as(const char *key)
{
    resp *r = http_do(&server, "GET", "/metrics", NULL, NULL, 0, key);
    expect_status(r, 200);
    assert_non_null(strstr(r->content_type, "version=0.0.4"));
    char in[PATH_MAX + 16], out[PATH_MAX + 16], cmd[3 * PATH_MAX + 64];
    snprintf(in, sizeof in, "%s/scrape.txt", files);
    snprintf(out, sizeof out, "%s/scrape.json", files);
    write_file(in, r->body, r->len);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' < '%s' > '%s'", parser, in,
             out);
    if (system(cmd) != 0)
        fail_msg("/metrics did not parse as Prometheus text (see %s)", in);
    json_error_t e;
    scrape sc = {strndup(r->body, r->len), json_load_file(out, 0, &e)};
    resp_free(r);
    assert_non_null(sc.text);
    assert_non_null(sc.samples);
    return sc;
}

static void scrape_free(scrape *sc)
{
    free(sc->text);
    json_decref(sc->samples);
    sc->text = NULL;
    sc->samples = NULL;
}

static int is_id_label(const char *k)
{
    for (int i = 0; id_labels[i]; i++)
        if (!strcmp(k, id_labels[i]))
            return 1;
    return 0;
}

/* The sums of the per-id samples over their ids: {"<name> <labels without
 * ids, sorted JSON>": sum}. Samples with no id label are left out. */
static json_t *id_sums(const json_t *samples)
{
    json_t *sums = json_object();
    size_t i;
    json_t *smp;
    json_array_foreach (samples, i, smp) {
        json_t *labels = json_deep_copy(json_array_get(smp, 1));
        int had_id = 0;
        for (int k = 0; id_labels[k]; k++)
            had_id |= json_object_del(labels, id_labels[k]) == 0;
        if (had_id) {
            char *l = json_dumps(labels, JSON_SORT_KEYS | JSON_COMPACT);
            char key[1024];
            snprintf(key, sizeof key, "%s %s",
                     json_string_value(json_array_get(smp, 0)), l);
            free(l);
            double v = json_number_value(json_array_get(smp, 2));
            json_t *sum = json_object_get(sums, key);
            json_object_set_new(
                sums, key, json_real(v + (sum ? json_real_value(sum) : 0)));
        }
        json_decref(labels);
    }
    return sums;
}

/* Whether the per-id families of two admin scrapes hold the same values. */
static int same_id_sums(const json_t *a, const json_t *b)
{
    json_t *sa = id_sums(a), *sb = id_sums(b);
    int same = json_equal(sa, sb);
    json_decref(sa);
    json_decref(sb);
    return same;
}

static int close_to(double a, double b)
{
    return fabs(a - b) <= 1e-9 * fmax(1, fmax(fabs(a), fabs(b)));
}

/* A public scrape's samples carry no id label, and for every family the
 * admin scrape has per-id series of, its samples are exactly the admin's
 * sums over the ids (every sum there, none more). */
static void expect_sums_of(const json_t *pub, const json_t *admin)
{
    json_t *sums = id_sums(admin);
    assert_true(json_object_size(sums) > 0);
    size_t matched = 0, i;
    json_t *smp;
    json_array_foreach (pub, i, smp) {
        const char *name = json_string_value(json_array_get(smp, 0));
        const json_t *labels = json_array_get(smp, 1);
        const char *k;
        json_t *v;
        json_object_foreach ((json_t *)labels, k, v)
            if (is_id_label(k))
                fail_msg("public sample %s has the label %s=\"%s\"", name, k,
                         json_string_value(v));
        char *l = json_dumps(labels, JSON_SORT_KEYS | JSON_COMPACT);
        char key[1024];
        snprintf(key, sizeof key, "%s %s", name, l);
        free(l);
        json_t *want = json_object_get(sums, key);
        if (!want) {
            /* Not a per-id family (or a sum the admin has none of). */
            size_t n = strlen(name);
            const char *kk;
            json_t *vv;
            json_object_foreach (sums, kk, vv)
                if (!strncmp(kk, name, n) && kk[n] == ' ')
                    fail_msg("public sample %s has no admin series to sum",
                             key);
            continue;
        }
        double got = json_number_value(json_array_get(smp, 2));
        if (!close_to(got, json_real_value(want)))
            fail_msg("public %s = %.17g, the admin's series sum to %.17g", key,
                     got, json_real_value(want));
        matched++;
    }
    if (matched != json_object_size(sums)) {
        char *t = json_dumps(sums, JSON_INDENT(1));
        fail_msg("the public scrape has %zu of the %zu sums:\n%s", matched,
                 json_object_size(sums), t);
    }
    json_decref(sums);
}

/* The value of sample name whose labels include the k, v pairs of kv
 * (NULL-terminated); NAN when there is none. */
static double value(const json_t *samples, const char *name,
                    const char *const *kv)
{
    size_t i;
    json_t *smp;
    json_array_foreach (samples, i, smp) {
        if (strcmp(json_string_value(json_array_get(smp, 0)), name))
            continue;
        const json_t *labels = json_array_get(smp, 1);
        int ok = 1;
        for (int k = 0; kv && kv[k] && ok; k += 2)
            ok = str(labels, kv[k]) && !strcmp(str(labels, kv[k]), kv[k + 1]);
        if (ok)
            return json_number_value(json_array_get(smp, 2));
    }
    return NAN;
}

#define KV(...) ((const char *const[]){__VA_ARGS__, NULL})

/* ---- setup ---- */

static int group_setup(void **state)
{
    (void)state;
    /* The modes below are what a usual shell's umask gives. */
    umask(022);
    temp_dir(files);
    make_blobs_csv(file_path("small.csv"), 300, 7);
    make_blobs_csv(file_path("big.csv"), 12000, 11);
    snprintf(parser, sizeof parser, "%s", __FILE__);
    char *slash = strrchr(parser, '/');
    if (!slash)
        return -1;
    snprintf(slash + 1, sizeof parser - (size_t)(slash + 1 - parser),
             "metrics_parse.py");
    return access(parser, R_OK) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    fs_remove_tree(files, NULL);
    return 0;
}

/* A test's server is stopped here even when the test failed. */
static int server_teardown(void **state)
{
    (void)state;
    if (stopped_pid > 0)
        kill(stopped_pid, SIGCONT);
    stopped_pid = 0;
    if (server.pid > 0)
        srv_stop(&server, SIGKILL);
    srv_cleanup(&server);
    if (own_dir[0])
        fs_remove_tree(own_dir, NULL);
    own_dir[0] = '\0';
    return 0;
}

/* ---- helpers: tenants and their things ---- */

static void create_tenant(const char *name, char id[64], char key[128])
{
    char b[128];
    snprintf(b, sizeof b, "{\"name\": \"%s\"}", name);
    resp *r = http_json(&server, "POST", "/v1/tenants", b);
    expect_status(r, 201);
    snprintf(id, 64, "%s", str(r->json, "id"));
    snprintf(key, 128, "%s", str(json_object_get(r->json, "key"), "api_key"));
    resp_free(r);
}

static void upload(const char *key, const char *csv, char id[64])
{
    char part[PATH_MAX + 16];
    snprintf(part, sizeof part, "file=@%s", file_path(csv));
    const char *parts[] = {"name=blobs", "format=csv", "label_column=species",
                           part, NULL};
    srv as = server;
    snprintf(as.key, sizeof as.key, "%s", key);
    resp *r = http_upload(&as, "/v1/datasets", parts);
    expect_status(r, 201);
    snprintf(id, 64, "%s", str(r->json, "id"));
    resp_free(r);
}

static resp *post_as(const char *key, const char *path, const char *body)
{
    return http_do(&server, "POST", path, "application/json", body,
                   strlen(body), key);
}

static void submit(const char *key, const char *ds, const char *layers,
                   const char *hp, char id[64])
{
    char b[1024];
    snprintf(b, sizeof b,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": %s}, "
             "\"hyperparameters\": %s}",
             ds, layers, hp);
    resp *r = post_as(key, "/v1/jobs", b);
    expect_status(r, 202);
    snprintf(id, 64, "%s", str(r->json, "id"));
    resp_free(r);
}

/* GET path as key, expected 200: the document (new reference). */
static json_t *get_as(const char *key, const char *path)
{
    resp *r = http_do(&server, "GET", path, NULL, NULL, 0, key);
    expect_status(r, 200);
    json_t *doc = json_incref(r->json);
    resp_free(r);
    return doc;
}

typedef struct {
    char id[64], key[128];
    char ds[64], job[64], model[64], dep[64], replica[64];
} tenant;

/* A finished job, its model deployed on one CPU replica, and one predict
 * served by that replica. */
static void tenant_setup(tenant *t, const char *name)
{
    create_tenant(name, t->id, t->key);
    upload(t->key, "small.csv", t->ds);
    submit(t->key, t->ds, "[{\"type\": \"dense\", \"units\": 3}]",
           "{\"epochs\": 2, \"batch_size\": 32}", t->job);
    srv as = server;
    snprintf(as.key, sizeof as.key, "%s", t->key);
    json_t *j = wait_job(&as, t->job, 300);
    assert_string_equal(str(j, "status"), "succeeded");
    snprintf(t->model, sizeof t->model, "%s", str(j, "model"));
    json_decref(j);

    char b[512], path[160];
    snprintf(b, sizeof b,
             "{\"name\": \"%s-dep\", \"model\": \"%s\", \"replicas\": "
             "{\"min\": 1, \"max\": 1}, \"resources\": {\"gpu\": \"none\"}}",
             name, t->model);
    resp *r = post_as(t->key, "/v1/deployments", b);
    expect_status(r, 201);
    snprintf(t->dep, sizeof t->dep, "%s", str(r->json, "id"));
    resp_free(r);
    snprintf(path, sizeof path, "/v1/deployments/%s", t->dep);
    double deadline = now_seconds() + 120;
    json_t *doc = NULL;
    for (;;) {
        doc = get_as(t->key, path);
        if (!strcmp(str(doc, "status"), "ready") || now_seconds() > deadline)
            break;
        json_decref(doc);
        usleep(100 * 1000);
    }
    assert_string_equal(str(doc, "status"), "ready");
    json_t *inst = json_array_get(json_object_get(doc, "instances"), 0);
    assert_non_null(str(inst, "id"));
    snprintf(t->replica, sizeof t->replica, "%s", str(inst, "id"));
    json_decref(doc);

    snprintf(path, sizeof path, "/v1/models/%s/predict", t->model);
    r = post_as(t->key, path, "{\"inputs\": [[1, 2, 3, 4]]}");
    expect_status(r, 200);
    assert_non_null(json_object_get(r->json, "deployment"));
    resp_free(r);
}

/* The admin scrape has the series of tenant t. */
static void expect_detail(const json_t *m, const tenant *t)
{
    assert_true(value(m, "trainyard_jobs",
                      KV("tenant", t->id, "state", "succeeded")) >= 1);
    assert_true(value(m, "trainyard_job_queue_wait_seconds_count",
                      KV("tenant", t->id)) >= 1);
    assert_true(
        value(m, "trainyard_deployment_requests_total",
              KV("deployment", t->dep, "tenant", t->id, "outcome", "ok")) == 1);
    assert_true(value(m, "trainyard_deployment_replicas",
                      KV("deployment", t->dep, "tenant", t->id, "state",
                         "ready")) == 1);
    assert_true(value(m, "trainyard_deployment_batch_size_count",
                      KV("deployment", t->dep)) == 1);
    assert_true(value(m, "trainyard_deployment_latency_seconds_count",
                      KV("deployment", t->dep, "phase", "total")) == 1);
}

/* No id of any tenant's things anywhere in text. */
static void expect_no_ids(const char *text, const char *const *ids, size_t n,
                          const char *who)
{
    for (size_t i = 0; i < n; i++) {
        const char *at = ids[i][0] ? strstr(text, ids[i]) : NULL;
        if (!at)
            continue;
        const char *line = at;
        while (line > text && line[-1] != '\n')
            line--;
        fail_msg("the scrape %s names %s: %.*s", who, ids[i],
                 (int)strcspn(line, "\n"), line);
    }
}

/* ---- tests ---- */

static void test_metrics_public_and_admin(void **state)
{
    (void)state;
    const char *flags[] = {"--devices", "none", "--worker-threads", "1", NULL};
    assert_int_equal(srv_start(&server, NULL, flags), 0);
    tenant a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    tenant_setup(&a, "alpha");
    tenant_setup(&b, "beta");

    /* A long job of a's: running once its throughput shows, then held
     * still (SIGSTOP) so the scrapes compared below see the same values. */
    char big[64], running[64];
    upload(a.key, "big.csv", big);
    submit(a.key, big,
           "[{\"type\": \"dense\", \"units\": 256}, {\"type\": \"relu\"}, "
           "{\"type\": \"dense\", \"units\": 3}]",
           "{\"epochs\": 50, \"batch_size\": 8}", running);
    double deadline = now_seconds() + 300;
    scrape m = {0};
    for (;;) {
        m = scrape_as(NULL);
        if (!isnan(value(m.samples, "trainyard_job_samples_per_second",
                         KV("job", running))) ||
            now_seconds() > deadline)
            break;
        scrape_free(&m);
        usleep(100 * 1000);
    }
    assert_false(isnan(value(m.samples, "trainyard_job_samples_per_second",
                             KV("job", running, "tenant", a.id))));
    scrape_free(&m);
    char path[160];
    snprintf(path, sizeof path, "/v1/jobs/%s", running);
    json_t *j = get_as(a.key, path);
    assert_string_equal(str(j, "status"), "running");
    stopped_pid = (pid_t)json_integer_value(
        json_object_get(json_object_get(j, "placement"), "worker_pid"));
    json_decref(j);
    assert_true(stopped_pid > 0);
    assert_int_equal(kill(stopped_pid, SIGSTOP), 0);

    /* Every id there is: the tenants (the admin's own too), their jobs,
     * datasets, models, deployments and replicas. */
    const char *ids[32];
    size_t nids = 0;
    json_t *tenants = get_as(NULL, "/v1/tenants");
    size_t i;
    json_t *it;
    json_array_foreach (json_object_get(tenants, "items"), i, it)
        if (nids < 8)
            ids[nids++] = str(it, "id");
    const tenant *both[] = {&a, &b};
    for (int k = 0; k < 2; k++) {
        ids[nids++] = both[k]->id;
        ids[nids++] = both[k]->ds;
        ids[nids++] = both[k]->job;
        ids[nids++] = both[k]->model;
        ids[nids++] = both[k]->dep;
        ids[nids++] = both[k]->replica;
    }
    ids[nids++] = big;
    ids[nids++] = running;

    /* An admin scrape, a public one, an admin one again: the comparison
     * holds when nothing moved between the two admin scrapes (a progress
     * line read after the stop moves the throughput once). */
    scrape before = {0}, pub = {0}, after = {0};
    for (int tries = 0; tries < 50; tries++) {
        scrape_free(&before);
        scrape_free(&pub);
        scrape_free(&after);
        before = scrape_as(NULL);
        pub = scrape_as("");
        after = scrape_as(NULL);
        if (same_id_sums(before.samples, after.samples))
            break;
        usleep(100 * 1000);
    }
    assert_true(same_id_sums(before.samples, after.samples));

    /* (b) the admin's scrape has the per-id series */
    expect_detail(before.samples, &a);
    expect_detail(before.samples, &b);
    assert_true(value(before.samples, "trainyard_jobs",
                      KV("tenant", a.id, "state", "running")) == 1);
    assert_true(value(before.samples, "trainyard_job_samples_per_second",
                      KV("job", running, "tenant", a.id)) > 0);

    /* (a) the public scrape: no ids, and the admin's sums */
    expect_no_ids(pub.text, ids, nids, "with no key");
    expect_sums_of(pub.samples, before.samples);
    assert_true(value(pub.samples, "trainyard_deployment_requests_total",
                      KV("outcome", "ok")) == 2);
    assert_true(value(pub.samples, "trainyard_deployment_replicas",
                      KV("state", "ready")) == 2);
    assert_true(value(pub.samples, "trainyard_jobs", KV("state", "running")) ==
                1);
    assert_true(value(pub.samples, "trainyard_job_samples_per_second", NULL) >
                0);

    /* A tenant's key gets the public view: neither its own ids nor the
     * other tenant's. */
    const char *keys[] = {a.key, b.key};
    for (int k = 0; k < 2; k++) {
        scrape t = scrape_as(keys[k]);
        expect_no_ids(t.text, ids, nids,
                      k == 0 ? "with tenant a's key" : "with tenant b's key");
        assert_true(value(t.samples, "trainyard_deployment_requests_total",
                          KV("outcome", "ok")) == 2);
        assert_true(isnan(
            value(t.samples, "trainyard_jobs", KV("tenant", both[k]->id))));
        scrape_free(&t);
    }

    /* A key that is not one is refused, not taken for no key. */
    resp *r = http_do(&server, "GET", "/metrics", NULL, NULL, 0,
                      "ty_notakey_notakey_notakey");
    expect_status(r, 401);
    resp_free(r);

    scrape_free(&before);
    scrape_free(&pub);
    scrape_free(&after);
    json_decref(tenants);

    kill(stopped_pid, SIGCONT);
    stopped_pid = 0;
    snprintf(path, sizeof path, "/v1/jobs/%s/cancel", running);
    r = http_do(&server, "POST", path, NULL, NULL, 0, a.key);
    assert_true(r->status == 200 || r->status == 202);
    resp_free(r);
    int ws = srv_stop(&server, SIGTERM);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
}

static unsigned mode_of(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        fail_msg("%s is missing", path);
    return (unsigned)st.st_mode & 07777;
}

static const char *const db_files[] = {"trainyard.db", "trainyard.db-wal",
                                       "trainyard.db-shm"};

static void expect_db_private(const srv *s, const char *when)
{
    for (int i = 0; i < 3; i++) {
        char p[PATH_MAX + 32];
        snprintf(p, sizeof p, "%s/%s", s->data, db_files[i]);
        unsigned m = mode_of(p);
        if (m != 0600)
            fail_msg("%s: %s is mode 0%o, not 0600", when, db_files[i], m);
    }
}

static void test_db_files_are_private(void **state)
{
    (void)state;
    assert_int_equal(srv_start(&server, NULL, NULL), 0);
    /* The database has been written (the admin key), so its WAL is open. */
    expect_db_private(&server, "after the first start");

    /* Killed, so the -wal and -shm stay; made 0644 as an older trainyard
     * left them; the next start makes all three private again. */
    srv_stop(&server, SIGKILL);
    for (int i = 0; i < 3; i++) {
        char p[PATH_MAX + 32];
        snprintf(p, sizeof p, "%s/%s", server.data, db_files[i]);
        assert_int_equal(chmod(p, 0644), 0);
    }
    char data[PATH_MAX];
    snprintf(data, sizeof data, "%s", server.data);
    assert_int_equal(srv_start(&server, data, NULL), 0);
    resp *r = http_get(&server, "/v1/jobs");
    expect_status(r, 200);
    resp_free(r);
    expect_db_private(&server, "after a restart on 0644 files");
    int ws = srv_stop(&server, SIGTERM);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
}

/* The log's warning lines that name the data folder. */
static int folder_warnings(const srv *s)
{
    FILE *f = fopen(s->log, "r");
    assert_non_null(f);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        json_t *l = line[0] == '{' ? json_loads(line, 0, NULL) : NULL;
        const char *msg = str(l, "msg");
        if (l && str(l, "level") && !strcmp(str(l, "level"), "warn") && msg &&
            strstr(msg, s->data) && strstr(msg, "0700"))
            n++;
        json_decref(l);
    }
    fclose(f);
    return n;
}

static void test_data_folder_mode(void **state)
{
    (void)state;
    char data[PATH_MAX + 16];
    temp_dir(own_dir);
    snprintf(data, sizeof data, "%s/data", own_dir);
    assert_int_equal(mkdir(data, 0755), 0);
    assert_int_equal(chmod(data, 0755), 0);
    assert_int_equal(srv_start(&server, data, NULL), 0);
    if (mode_of(data) != 0700)
        fail_msg("the data folder made 0755 is 0%o after a start",
                 mode_of(data));
    if (folder_warnings(&server) != 1)
        fail_msg("no warning about the data folder's mode in %s", server.log);
    int ws = srv_stop(&server, SIGTERM);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);

    /* Private already: nothing more to say. */
    unlink(server.log);
    assert_int_equal(srv_start(&server, data, NULL), 0);
    assert_int_equal(mode_of(data), 0700);
    assert_int_equal(folder_warnings(&server), 0);
    ws = srv_stop(&server, SIGTERM);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_metrics_public_and_admin,
                                  server_teardown),
        cmocka_unit_test_teardown(test_db_files_are_private, server_teardown),
        cmocka_unit_test_teardown(test_data_folder_mode, server_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
