/* test_metrics.c - the metrics registry and its exposition text
 * (common/metrics.h): counters, gauges, cumulative histogram buckets,
 * escaping of label values and help text, series removal, bad names,
 * updates from several threads, and the public rendering summed over the
 * private labels (removed counts kept in its sums). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/metrics.h"

#define LABELS(...) ((const char *const[]){__VA_ARGS__, NULL})

static char *render(metrics_registry *reg)
{
    size_t len = 0;
    char *t = metrics_render(reg, &len);
    assert_non_null(t);
    assert_int_equal(strlen(t), len);
    return t;
}

static void assert_has(const char *text, const char *line)
{
    if (!strstr(text, line))
        fail_msg("missing line %s in:\n%s", line, text);
}

static void test_counter_and_gauge(void **state)
{
    metrics_registry *reg = metrics_registry_create();
    metrics_family *c =
        metrics_family_add(reg, METRICS_COUNTER, "t_total", "Things.",
                           LABELS("route", "status"), NULL, 0);
    metrics_family *g = metrics_family_add(reg, METRICS_GAUGE, "t_gauge",
                                           "A level.", NULL, NULL, 0);
    assert_non_null(c);
    assert_non_null(g);
    metrics_add(c, LABELS("/v1/jobs/{id}", "200"), 1);
    metrics_add(c, LABELS("/v1/jobs/{id}", "200"), 2);
    metrics_add(c, LABELS("/v1/jobs/{id}", "200"), -5); /* ignored */
    metrics_add(c, LABELS("/healthz", "200"), 1);
    metrics_set(c, LABELS("/healthz", "200"), 100); /* not a gauge */
    metrics_set(g, NULL, 2.5);
    metrics_add(g, NULL, -1);
    char *t = render(reg);
    assert_has(t, "# HELP t_total Things.\n# TYPE t_total counter\n");
    assert_has(t, "\nt_total{route=\"/v1/jobs/{id}\",status=\"200\"} 3\n");
    assert_has(t, "\nt_total{route=\"/healthz\",status=\"200\"} 1\n");
    assert_has(t, "# TYPE t_gauge gauge\nt_gauge 1.5\n");
    free(t);
    metrics_registry_destroy(reg);
}

static void test_histogram_buckets_are_cumulative(void **state)
{
    metrics_registry *reg = metrics_registry_create();
    static const double b[] = {0.1, 1, 10};
    metrics_family *h = metrics_family_add(
        reg, METRICS_HISTOGRAM, "lat_seconds", "Latency.", LABELS("ep"), b, 3);
    assert_non_null(h);
    metrics_observe(h, LABELS("p"), 0.05);
    metrics_observe(h, LABELS("p"), 0.1); /* le is inclusive */
    metrics_observe(h, LABELS("p"), 5);
    metrics_observe(h, LABELS("p"), 50);
    metrics_observe(h, LABELS("p"), NAN); /* dropped */
    char *t = render(reg);
    assert_has(t, "# TYPE lat_seconds histogram\n"
                  "lat_seconds_bucket{ep=\"p\",le=\"0.1\"} 2\n"
                  "lat_seconds_bucket{ep=\"p\",le=\"1\"} 2\n"
                  "lat_seconds_bucket{ep=\"p\",le=\"10\"} 3\n"
                  "lat_seconds_bucket{ep=\"p\",le=\"+Inf\"} 4\n"
                  "lat_seconds_sum{ep=\"p\"} 55.15\n"
                  "lat_seconds_count{ep=\"p\"} 4\n");
    free(t);
    metrics_registry_destroy(reg);
}

static void test_escaping(void **state)
{
    metrics_registry *reg = metrics_registry_create();
    metrics_family *g = metrics_family_add(reg, METRICS_GAUGE, "gpu_info",
                                           "Back\\slash and\nnewline \"kept\".",
                                           LABELS("name"), NULL, 0);
    metrics_set(g, LABELS("Lab \"H200\" \\ one\ntwo"), 1);
    char *t = render(reg);
    /* HELP escapes backslash and newline, not quotes. */
    assert_has(t, "# HELP gpu_info Back\\\\slash and\\nnewline \"kept\".\n");
    assert_has(t, "gpu_info{name=\"Lab \\\"H200\\\" \\\\ one\\ntwo\"} 1\n");
    free(t);

    char out[64];
    assert_int_equal(metrics_escape_label(out, sizeof out, "a\"b\\c\nd"), 10);
    assert_string_equal(out, "a\\\"b\\\\c\\nd");
    /* Truncated at a whole escape, never half of one. */
    assert_int_equal(metrics_escape_label(out, 3, "a\"b"), 4);
    assert_string_equal(out, "a");
    metrics_registry_destroy(reg);
}

static void test_remove_and_clear(void **state)
{
    metrics_registry *reg = metrics_registry_create();
    metrics_family *g = metrics_family_add(reg, METRICS_GAUGE, "sps", "x",
                                           LABELS("job", "tenant"), NULL, 0);
    metrics_set(g, LABELS("job_a", "t1"), 10);
    metrics_set(g, LABELS("job_b", "t1"), 20);
    metrics_set(g, LABELS("job_c", "t2"), 30);
    metrics_remove(g, 0, "job_b");
    char *t = render(reg);
    assert_has(t, "sps{job=\"job_a\",tenant=\"t1\"} 10\n");
    assert_has(t, "sps{job=\"job_c\",tenant=\"t2\"} 30\n");
    assert_null(strstr(t, "job_b"));
    free(t);
    metrics_clear(g);
    t = render(reg);
    assert_null(strstr(t, "sps{"));
    assert_has(t, "# TYPE sps gauge\n");
    free(t);
    metrics_registry_destroy(reg);
}

static char *render_public(metrics_registry *reg)
{
    size_t len = 0;
    char *t = metrics_render_public(reg, &len);
    assert_non_null(t);
    assert_int_equal(strlen(t), len);
    return t;
}

static void assert_lacks(const char *text, const char *what)
{
    if (strstr(text, what))
        fail_msg("%s should not be in:\n%s", what, text);
}

static void test_public_sums_over_private_labels(void **state)
{
    metrics_registry *reg = metrics_registry_create();
    static const double b[] = {0.1, 1};
    /* Made before the private names are: they apply all the same. */
    metrics_family *c =
        metrics_family_add(reg, METRICS_COUNTER, "req_total", "Requests.",
                           LABELS("tenant", "outcome"), NULL, 0);
    assert_int_equal(metrics_registry_private(reg, LABELS("tenant", "job")), 0);
    metrics_family *g =
        metrics_family_add(reg, METRICS_GAUGE, "sps", "Throughput.",
                           LABELS("job", "tenant"), NULL, 0);
    metrics_family *h =
        metrics_family_add(reg, METRICS_HISTOGRAM, "lat_seconds", "Latency.",
                           LABELS("tenant", "phase"), b, 2);
    metrics_family *open = metrics_family_add(
        reg, METRICS_GAUGE, "slots", "Slots.", LABELS("profile"), NULL, 0);
    metrics_add(c, LABELS("tn_1", "ok"), 1);
    metrics_add(c, LABELS("tn_2", "ok"), 2);
    metrics_add(c, LABELS("tn_1", "error"), 5);
    metrics_set(g, LABELS("job_1", "tn_1"), 10.5);
    metrics_set(g, LABELS("job_2", "tn_2"), 20);
    metrics_observe(h, LABELS("tn_1", "total"), 0.05);
    metrics_observe(h, LABELS("tn_2", "total"), 0.5);
    metrics_observe(h, LABELS("tn_2", "total"), 5);
    metrics_observe(h, LABELS("tn_2", "queue"), 0.01);
    metrics_set(open, LABELS("gpu"), 7);

    /* The whole registry: every series, as before. */
    char *t = render(reg);
    assert_has(t, "req_total{tenant=\"tn_2\",outcome=\"ok\"} 2\n");
    assert_has(t, "sps{job=\"job_1\",tenant=\"tn_1\"} 10.5\n");
    assert_has(t, "# HELP req_total Requests.\n");
    free(t);

    t = render_public(reg);
    assert_lacks(t, "tn_");
    assert_lacks(t, "job_");
    assert_lacks(t, "tenant=");
    assert_has(t, "# HELP req_total Requests. (This view sums over tenant.)\n"
                  "# TYPE req_total counter\n"
                  "req_total{outcome=\"ok\"} 3\n"
                  "req_total{outcome=\"error\"} 5\n");
    assert_has(t, "# HELP sps Throughput. (This view sums over job, tenant.)\n"
                  "# TYPE sps gauge\nsps 30.5\n");
    assert_has(t, "lat_seconds_bucket{phase=\"total\",le=\"0.1\"} 1\n"
                  "lat_seconds_bucket{phase=\"total\",le=\"1\"} 2\n"
                  "lat_seconds_bucket{phase=\"total\",le=\"+Inf\"} 3\n"
                  "lat_seconds_sum{phase=\"total\"} 5.55\n"
                  "lat_seconds_count{phase=\"total\"} 3\n");
    assert_has(t, "lat_seconds_count{phase=\"queue\"} 1\n");
    /* A family without private labels is the same in both. */
    assert_has(t, "# HELP slots Slots.\n# TYPE slots gauge\n"
                  "slots{profile=\"gpu\"} 7\n");
    free(t);

    /* Removed series leave the whole rendering; a counter's and a
     * histogram's counts stay in the public sums (they never go down), a
     * gauge's do not. */
    metrics_remove(c, 0, "tn_2");
    metrics_remove(g, 0, "job_2");
    metrics_remove(h, 0, "tn_2");
    metrics_add(c, LABELS("tn_3", "ok"), 4);
    t = render(reg);
    assert_lacks(t, "tn_2");
    free(t);
    t = render_public(reg);
    assert_has(t, "req_total{outcome=\"ok\"} 7\n");
    assert_has(t, "req_total{outcome=\"error\"} 5\n");
    assert_has(t, "sps 10.5\n");
    assert_has(t, "lat_seconds_count{phase=\"total\"} 3\n");
    assert_has(t, "lat_seconds_count{phase=\"queue\"} 1\n");
    free(t);
    metrics_clear(c);
    metrics_clear(g);
    t = render_public(reg);
    assert_has(t, "req_total{outcome=\"ok\"} 7\n");
    assert_has(t, "# TYPE sps gauge\n# HELP lat_seconds");
    free(t);
    t = render(reg);
    assert_has(t, "# TYPE req_total counter\n# HELP sps");
    free(t);

    /* A bad list changes nothing. */
    assert_int_equal(metrics_registry_private(reg, LABELS("bad label")), -1);
    t = render_public(reg);
    assert_lacks(t, "job_1");
    free(t);
    metrics_registry_destroy(reg);
}

static void test_bad_definitions(void **state)
{
    metrics_registry *reg = metrics_registry_create();
    static const double up[] = {1, 2}, down[] = {2, 1};
    assert_null(
        metrics_family_add(reg, METRICS_GAUGE, "9lives", "", NULL, NULL, 0));
    assert_null(
        metrics_family_add(reg, METRICS_GAUGE, "a-b", "", NULL, NULL, 0));
    assert_null(metrics_family_add(reg, METRICS_GAUGE, "ok", "",
                                   LABELS("bad label"), NULL, 0));
    assert_null(
        metrics_family_add(reg, METRICS_HISTOGRAM, "h", "", NULL, down, 2));
    assert_null(
        metrics_family_add(reg, METRICS_HISTOGRAM, "h", "", NULL, NULL, 0));
    assert_null(metrics_family_add(reg, METRICS_HISTOGRAM, "h", "",
                                   LABELS("le"), up, 2));
    assert_null(metrics_family_add(reg, METRICS_GAUGE, "g", "",
                                   LABELS("a", "b", "c", "d", "e", "f", "g"),
                                   NULL, 0));
    /* Nothing half-made was left behind. */
    char *t = render(reg);
    assert_string_equal(t, "");
    free(t);
    metrics_registry_destroy(reg);
}

typedef struct {
    metrics_family *c, *h;
} pair;

static void *hammer(void *arg)
{
    pair *p = arg;
    for (int i = 0; i < 20000; i++) {
        metrics_add(p->c, LABELS(i % 2 ? "odd" : "even"), 1);
        metrics_observe(p->h, NULL, 0.5);
    }
    return NULL;
}

static void test_threads(void **state)
{
    metrics_registry *reg = metrics_registry_create();
    static const double b[] = {1};
    pair p = {metrics_family_add(reg, METRICS_COUNTER, "n_total", "",
                                 LABELS("k"), NULL, 0),
              metrics_family_add(reg, METRICS_HISTOGRAM, "h", "", NULL, b, 1)};
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, hammer, &p), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    char *t = render(reg);
    assert_has(t, "n_total{k=\"even\"} 40000\n");
    assert_has(t, "n_total{k=\"odd\"} 40000\n");
    assert_has(t, "h_bucket{le=\"1\"} 80000\nh_bucket{le=\"+Inf\"} 80000\n"
                  "h_sum 40000\nh_count 80000\n");
    free(t);
    metrics_registry_destroy(reg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counter_and_gauge),
        cmocka_unit_test(test_histogram_buckets_are_cumulative),
        cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_remove_and_clear),
        cmocka_unit_test(test_public_sums_over_private_labels),
        cmocka_unit_test(test_bad_definitions),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
