/*
 * Integration tests for the operators' side (issue 6): GET /metrics and
 * the request logs of a real server on a simulated H200 (seven 1g.18gb
 * slices) whose GPU name needs escaping.
 *
 * Every scrape is parsed by prometheus_client's own parser
 * (metrics_parse.py, Debian python3-prometheus-client), which also checks
 * histograms (cumulative buckets, +Inf = _count) and that every sample is
 * typed; the C side then checks values:
 *   scrape      public (no key), text/plain version 0.0.4; the GPU name's
 *               quote, backslash and newline come back intact; slices
 *   requests    the counter of a route template moves by the requests
 *               made; a raw path never becomes a label; 401 and 404 counted
 *   jobs        a running job (its worker stopped with SIGSTOP so the
 *               scrape sees it running) holds one slice and has a
 *               throughput series; after its cancel: 0 slices, no series;
 *               a second job succeeds; jobs by state and the queue-wait
 *               count follow; a predict lands in the predict histogram
 *               (scraped with the admin's key: the per-tenant and per-job
 *               series are not public; test_exposure checks that)
 *   logs        request lines carry request id, tenant, route template,
 *               status, bytes and duration; no API key (the admin's, or a
 *               bad one sent) appears anywhere in the server's log
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
#include <sys/wait.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "harness.h"

static char files[PATH_MAX];
static char parser[PATH_MAX];
/* JSON for: Lab "H200" \ one<newline>two */
#define GPU_NAME_JSON "Lab \\\"H200\\\" \\\\ one\\ntwo"
#define GPU_NAME "Lab \"H200\" \\ one\ntwo"

/* ---- scraping ---- */

/* A /metrics reply (freed here), parsed: the samples [[name, labels,
 * value]]. */
static json_t *parse_reply(resp *r)
{
    expect_status(r, 200);
    assert_non_null(strstr(r->content_type, "text/plain"));
    assert_non_null(strstr(r->content_type, "version=0.0.4"));
    char in[PATH_MAX + 16], out[PATH_MAX + 16], cmd[3 * PATH_MAX + 64];
    snprintf(in, sizeof in, "%s/scrape.txt", files);
    snprintf(out, sizeof out, "%s/scrape.json", files);
    write_file(in, r->body, r->len);
    resp_free(r);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' < '%s' > '%s'", parser, in,
             out);
    if (system(cmd) != 0)
        fail_msg("/metrics did not parse as Prometheus text (see %s)", in);
    json_error_t e;
    json_t *doc = json_load_file(out, 0, &e);
    assert_non_null(doc);
    return doc;
}

/* GET /metrics without a key. */
static json_t *scrape(const srv *s)
{
    return parse_reply(http_do(s, "GET", "/metrics", NULL, NULL, 0, ""));
}

/* GET /metrics with the admin's key: every series, per tenant and job. */
static json_t *scrape_admin(const srv *s)
{
    return parse_reply(http_do(s, "GET", "/metrics", NULL, NULL, 0, NULL));
}

/* The value of the sample `name` whose labels include every k=v pair of
 * kv (NULL-terminated k, v, ...); NAN when there is none. */
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

/* 0 when absent: a counter not yet made. */
static double count_or_0(const json_t *m, const char *name,
                         const char *const *kv)
{
    double v = value(m, name, kv);
    return isnan(v) ? 0 : v;
}

/* ---- setup ---- */

static int group_setup(void **state)
{
    temp_dir(files);
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/big.csv", files);
    make_blobs_csv(p, 12000, 11);
    snprintf(p, sizeof p, "%s/small.csv", files);
    make_blobs_csv(p, 90, 11);
    /* seven 1g.18gb slices on a GPU whose name needs every escape */
    const char *sim =
        "{\"gpus\": [{\"model\": \"H200\", \"name\": \"" GPU_NAME_JSON "\", "
        "\"mig\": true, \"instances\": ["
        "{\"profile\": \"1g.18gb\", \"start\": 0},"
        "{\"profile\": \"1g.18gb\", \"start\": 1},"
        "{\"profile\": \"1g.18gb\", \"start\": 2},"
        "{\"profile\": \"1g.18gb\", \"start\": 3},"
        "{\"profile\": \"1g.18gb\", \"start\": 4},"
        "{\"profile\": \"1g.18gb\", \"start\": 5},"
        "{\"profile\": \"1g.18gb\", \"start\": 6}]}]}";
    snprintf(p, sizeof p, "%s/sim.json", files);
    write_file(p, sim, strlen(sim));
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
    fs_remove_tree(files, NULL);
    return 0;
}

static srv start(void)
{
    char devices[PATH_MAX + 16];
    snprintf(devices, sizeof devices, "sim:%s/sim.json", files);
    const char *flags[] = {"--devices", devices, "--worker-threads", "1", NULL};
    srv s;
    assert_int_equal(srv_start(&s, NULL, flags), 0);
    return s;
}

static void upload(const srv *s, const char *csv, char id[64])
{
    char part[PATH_MAX + 16];
    snprintf(part, sizeof part, "file=@%s/%s", files, csv);
    const char *parts[] = {"name=blobs", "format=csv", "label_column=species",
                           part, NULL};
    resp *r = http_upload(s, "/v1/datasets", parts);
    expect_status(r, 201);
    snprintf(id, 64, "%s", str(r->json, "id"));
    resp_free(r);
}

static void submit(const srv *s, const char *ds, const char *model,
                   const char *hp, char id[64])
{
    char b[1024];
    snprintf(b, sizeof b,
             "{\"dataset\": \"%s\", \"model\": %s, \"hyperparameters\": %s}",
             ds, model, hp);
    resp *r = http_json(s, "POST", "/v1/jobs", b);
    expect_status(r, 202);
    snprintf(id, 64, "%s", str(r->json, "id"));
    resp_free(r);
}

static const char *const SMALL_NET =
    "{\"layers\": [{\"type\": \"dense\", \"units\": 3}]}";
static const char *const BIG_NET =
    "{\"layers\": [{\"type\": \"dense\", \"units\": 512}, {\"type\": \"relu\"},"
    " {\"type\": \"dense\", \"units\": 512}, {\"type\": \"relu\"},"
    " {\"type\": \"dense\", \"units\": 3}]}";

/* ---- tests ---- */

static void test_scrape_requests_and_escaping(void **state)
{
    srv s = start();
    json_t *m = scrape(&s);
    /* the inventory, and the GPU name exactly as the sim file has it */
    assert_true(value(m, "trainyard_slices", KV("profile", "1g.18gb")) == 7);
    assert_true(value(m, "trainyard_slices_in_use", KV("profile", "1g.18gb")) ==
                0);
    assert_true(
        value(m, "trainyard_gpu_info",
              KV("gpu", "0", "name", GPU_NAME, "model", "H200-141GB")) == 1);
    assert_true(value(m, "trainyard_gpu_memory_total_bytes", KV("gpu", "0")) >
                0);
    /* simulated: no telemetry is made up */
    assert_true(isnan(value(m, "trainyard_gpu_temperature_celsius", NULL)));
    assert_true(isnan(value(m, "trainyard_gpu_utilization_ratio", NULL)));
    const char *const *ok =
        KV("method", "GET", "route", "/v1/jobs", "status", "200");
    const char *const *unauth = KV("route", "/v1/jobs", "status", "401");
    double ok0 = count_or_0(m, "trainyard_http_requests_total", ok);
    double un0 = count_or_0(m, "trainyard_http_requests_total", unauth);
    json_decref(m);

    for (int i = 0; i < 3; i++) {
        resp *r = http_get(&s, "/v1/jobs");
        expect_status(r, 200);
        resp_free(r);
    }
    resp *r = http_do(&s, "GET", "/v1/jobs", NULL, NULL, 0,
                      "ty_notakey_notakey_notakey");
    expect_status(r, 401);
    resp_free(r);
    r = http_get(&s, "/v1/jobs/job_doesnotexist");
    expect_status(r, 404);
    resp_free(r);
    r = http_get(&s, "/no/such/endpoint");
    expect_status(r, 404);
    resp_free(r);

    /* A request is counted when its completion callback runs, which can
     * come after the client already has the reply (seen under ASan): scrape
     * until the batch's requests are all in, for at most 10 s; then the
     * exact counts below must hold. */
    const char *const *unmatched = KV("route", "unmatched", "status", "404");
    double until = now_seconds() + 10;
    for (m = scrape(&s);
         !(value(m, "trainyard_http_requests_total", ok) >= ok0 + 3 &&
           value(m, "trainyard_http_requests_total", unauth) >= un0 + 1 &&
           value(m, "trainyard_http_requests_total",
                 KV("route", "/v1/jobs/{id}", "status", "404")) >= 1 &&
           value(m, "trainyard_http_requests_total", unmatched) >= 1) &&
         now_seconds() < until;
         m = scrape(&s)) {
        json_decref(m);
        usleep(50 * 1000);
    }
    assert_true(value(m, "trainyard_http_requests_total", ok) == ok0 + 3);
    assert_true(value(m, "trainyard_http_requests_total", unauth) == un0 + 1);
    assert_true(value(m, "trainyard_http_requests_total",
                      KV("route", "/v1/jobs/{id}", "status", "404")) >= 1);
    assert_true(value(m, "trainyard_http_requests_total", unmatched) >= 1);
    assert_true(value(m, "trainyard_http_request_duration_seconds_count",
                      KV("route", "/v1/jobs")) >= 4);
    /* raw paths never become labels */
    char *text = json_dumps(m, 0);
    assert_null(strstr(text, "job_doesnotexist"));
    assert_null(strstr(text, "/no/such"));
    free(text);
    json_decref(m);
    /* A graceful stop exits 0 (under the sanitizers: no leak, no error). */
    int ws = srv_stop(&s, SIGTERM);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    srv_cleanup(&s);
}

static void test_jobs_slices_and_logs(void **state)
{
    srv s = start();
    char ds_big[64], ds_small[64], long_job[64], short_job[64], tenant[64];
    upload(&s, "big.csv", ds_big);
    upload(&s, "small.csv", ds_small);
    resp *r = http_get(&s, "/v1/tenants");
    expect_status(r, 200);
    snprintf(tenant, sizeof tenant, "%s",
             str(json_array_get(json_object_get(r->json, "items"), 0), "id"));
    resp_free(r);

    /* A long job: wait until its throughput shows, then stop its worker so
     * the scrape sees it running on its slice. */
    submit(&s, ds_big, BIG_NET, "{\"epochs\": 50, \"batch_size\": 8}",
           long_job);
    json_t *m = NULL;
    double deadline = now_seconds() + 300;
    while (now_seconds() < deadline) {
        m = scrape_admin(&s);
        if (!isnan(value(m, "trainyard_job_samples_per_second",
                         KV("job", long_job))))
            break;
        json_decref(m);
        m = NULL;
        usleep(100 * 1000);
    }
    assert_non_null(m);
    json_decref(m);
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s", long_job);
    r = http_get(&s, path);
    expect_status(r, 200);
    assert_string_equal(str(r->json, "status"), "running");
    int pid = (int)json_integer_value(
        json_object_get(json_object_get(r->json, "placement"), "worker_pid"));
    resp_free(r);
    assert_true(pid > 0);
    assert_int_equal(kill(pid, SIGSTOP), 0);

    m = scrape_admin(&s);
    assert_true(value(m, "trainyard_slices_in_use", KV("profile", "1g.18gb")) ==
                1);
    assert_true(value(m, "trainyard_job_samples_per_second",
                      KV("job", long_job, "tenant", tenant)) > 0);
    assert_true(value(m, "trainyard_jobs",
                      KV("tenant", tenant, "state", "running")) == 1);
    assert_true(value(m, "trainyard_jobs",
                      KV("tenant", tenant, "state", "succeeded")) == 0);
    assert_true(value(m, "trainyard_job_queue_wait_seconds_count",
                      KV("tenant", tenant)) == 1);
    json_decref(m);

    snprintf(path, sizeof path, "/v1/jobs/%s/cancel", long_job);
    r = http_do(&s, "POST", path, NULL, NULL, 0, NULL);
    assert_true(r->status == 200 || r->status == 202);
    resp_free(r);
    kill(pid, SIGCONT);
    json_t *j = wait_job(&s, long_job, 120);
    assert_string_equal(str(j, "status"), "cancelled");
    json_decref(j);

    submit(&s, ds_small, SMALL_NET, "{\"epochs\": 1}", short_job);
    j = wait_job(&s, short_job, 300);
    assert_string_equal(str(j, "status"), "succeeded");
    char predict[128];
    snprintf(predict, sizeof predict, "/v1/models/%s/predict", str(j, "model"));
    json_decref(j);
    r = http_json(&s, "POST", predict, "{\"inputs\": [[1, 2, 3, 4]]}");
    expect_status(r, 200);
    resp_free(r);

    /* The request's duration is recorded once its reply has gone out, so
     * the client may scrape a moment before it is counted. */
    m = scrape_admin(&s);
    for (int i = 0;
         i < 100 && value(m, "trainyard_predict_duration_seconds_count",
                          KV("endpoint", "predict")) != 1;
         i++) {
        json_decref(m);
        usleep(20000);
        m = scrape_admin(&s);
    }
    assert_true(value(m, "trainyard_slices_in_use", KV("profile", "1g.18gb")) ==
                0);
    assert_true(isnan(
        value(m, "trainyard_job_samples_per_second", KV("job", long_job))));
    assert_true(value(m, "trainyard_jobs",
                      KV("tenant", tenant, "state", "running")) == 0);
    assert_true(value(m, "trainyard_jobs",
                      KV("tenant", tenant, "state", "cancelled")) == 1);
    assert_true(value(m, "trainyard_jobs",
                      KV("tenant", tenant, "state", "succeeded")) == 1);
    assert_true(value(m, "trainyard_job_queue_wait_seconds_count",
                      KV("tenant", tenant)) == 2);
    assert_true(value(m, "trainyard_predict_duration_seconds_count",
                      KV("endpoint", "predict")) == 1);
    json_decref(m);

    /* A bad key too, then read the whole log. */
    r = http_do(&s, "GET", "/v1/jobs", NULL, NULL, 0,
                "ty_badbadbadbadbad_secretsecretsecret");
    expect_status(r, 401);
    resp_free(r);
    char key[128];
    snprintf(key, sizeof key, "%s", s.key);
    int ws = srv_stop(&s, SIGTERM);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    FILE *f = fopen(s.log, "r");
    assert_non_null(f);
    char line[16384];
    int request_lines = 0, job_get_lines = 0, started_lines = 0;
    /* The admin key is printed once on stdout at first start; the log
     * (stderr) holds neither it nor the bad key, on any line. */
    while (fgets(line, sizeof line, f)) {
        assert_null(strstr(line, key));
        assert_null(strstr(line, "ty_badbadbadbadbad"));
        assert_null(strstr(line, "secretsecretsecret"));
        if (line[0] != '{')
            continue;
        json_t *l = json_loads(line, 0, NULL);
        assert_non_null(l);
        if (str(l, "event") && !strcmp(str(l, "event"), "request")) {
            request_lines++;
            assert_non_null(str(l, "request_id"));
            assert_true(json_is_integer(json_object_get(l, "status")));
            assert_true(json_is_integer(json_object_get(l, "bytes_in")));
            assert_true(json_is_integer(json_object_get(l, "bytes_out")));
            assert_true(json_is_number(json_object_get(l, "duration_ms")));
            const char *tpl = str(l, "route_template");
            if (tpl && !strcmp(tpl, "/v1/jobs/{id}") &&
                json_integer_value(json_object_get(l, "status")) == 200) {
                job_get_lines++;
                assert_string_equal(str(l, "tenant"), tenant);
            }
        }
        if (str(l, "event") && !strcmp(str(l, "event"), "job") &&
            !strcmp(str(l, "status"), "running")) {
            started_lines++;
            assert_string_equal(str(l, "tenant"), tenant);
            assert_true(json_is_number(json_object_get(l, "queue_wait_s")));
        }
        json_decref(l);
    }
    fclose(f);
    assert_true(request_lines > 5);
    assert_true(job_get_lines >= 1);
    assert_int_equal(started_lines, 2);
    srv_cleanup(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scrape_requests_and_escaping),
        cmocka_unit_test(test_jobs_slices_and_logs),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
