/* test_opmetrics.c - the server's metric families (common/opmetrics.h):
 * the inventory as scraped — slots and held slots by profile, GPU info,
 * and telemetry rendered where the driver gave it and left out where it
 * did not (filled in by hand here, as NVML would) — the per-request and
 * per-job calls, and the public rendering, which names no tenant,
 * deployment or job. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "gpu/inventory.h"
#include "common/opmetrics.h"

static void assert_has(const char *text, const char *line)
{
    if (!strstr(text, line))
        fail_msg("missing %s in:\n%s", line, text);
}

static char *render(void)
{
    char *t = metrics_render(opm_registry(), NULL);
    assert_non_null(t);
    return t;
}

static void test_inventory_and_telemetry(void **state)
{
    json_error_t je;
    json_t *doc = json_loads(
        "{\"gpus\": [{\"model\": \"H200\", \"mig\": true, \"instances\": ["
        "{\"profile\": \"1g.18gb\", \"start\": 0},"
        "{\"profile\": \"1g.18gb\", \"start\": 1}]},"
        "{\"model\": \"H200\", \"mig\": false}]}",
        0, &je);
    assert_non_null(doc);
    inventory *inv = NULL;
    ty_err err = {0};
    assert_int_equal(inv_sim_parse(doc, "test", &inv, &err), TY_OK);
    json_decref(doc);
    snprintf(inv->slots[0].job_id, sizeof inv->slots[0].job_id, "job_x");
    /* What NVML would have read on the second GPU; memory bandwidth stays
     * unknown. */
    inv->gpus[1].utilization_gpu_pct = 40;
    inv->gpus[1].temperature_c = 55;
    inv->gpus[1].power_mw = 250500;

    opm_collect_inventory(inv);
    char *t = render();
    assert_has(t, "trainyard_slices{profile=\"1g.18gb\"} 2\n");
    assert_has(t, "trainyard_slices{profile=\"gpu\"} 1\n");
    assert_has(t, "trainyard_slices_in_use{profile=\"1g.18gb\"} 1\n");
    assert_has(t, "trainyard_slices_in_use{profile=\"gpu\"} 0\n");
    assert_has(t, "trainyard_gpu_utilization_ratio{gpu=\"1\"} 0.4\n");
    assert_has(t, "trainyard_gpu_temperature_celsius{gpu=\"1\"} 55\n");
    assert_has(t, "trainyard_gpu_power_watts{gpu=\"1\"} 250.5\n");
    assert_has(t, "trainyard_gpu_memory_total_bytes{gpu=\"0\"} ");
    /* unknown: no series, never a made-up value */
    assert_null(strstr(t, "trainyard_gpu_memory_utilization_ratio{"));
    assert_null(strstr(t, "trainyard_gpu_temperature_celsius{gpu=\"0\"}"));
    free(t);

    /* A slot freed, a scrape later: 0, and no stale series. */
    inv->slots[0].job_id[0] = '\0';
    opm_collect_inventory(inv);
    t = render();
    assert_has(t, "trainyard_slices_in_use{profile=\"1g.18gb\"} 0\n");
    free(t);
    opm_collect_inventory(NULL);
    t = render();
    assert_null(strstr(t, "trainyard_slices{"));
    free(t);
    inv_destroy(inv);
}

static void test_requests_and_jobs(void **state)
{
    opm_http_request("GET", "/v1/jobs/{id}", 404, 0.002);
    opm_http_request("GET", "/v1/jobs/{id}", 404, 0.5);
    /* An event stream: counted, not timed. */
    opm_http_request("GET", "/v1/events", 200, -1.0);
    opm_job_started("tn_a", 3);
    opm_job_samples_per_sec("job_1", "tn_a", 1234.5);
    opm_job_samples_per_sec("job_2", "tn_a", 10);
    opm_job_ended("job_1");
    opm_predict("predict", 0.003);
    char *t = render();
    assert_has(t, "trainyard_http_requests_total{method=\"GET\",route=\"/v1/"
                  "jobs/{id}\",status=\"404\"} 2\n");
    assert_has(t,
               "trainyard_http_request_duration_seconds_bucket{method=\"GET\","
               "route=\"/v1/jobs/{id}\",le=\"0.0025\"} 1\n");
    assert_has(t,
               "trainyard_http_request_duration_seconds_count{method=\"GET\","
               "route=\"/v1/jobs/{id}\"} 2\n");
    assert_has(t, "trainyard_http_requests_total{method=\"GET\",route=\"/v1/"
                  "events\",status=\"200\"} 1\n");
    assert_null(strstr(t, "trainyard_http_request_duration_seconds_count{"
                          "method=\"GET\",route=\"/v1/events\"}"));
    assert_has(t, "trainyard_job_queue_wait_seconds_bucket{tenant=\"tn_a\","
                  "le=\"1\"} 0\n");
    assert_has(t, "trainyard_job_queue_wait_seconds_bucket{tenant=\"tn_a\","
                  "le=\"5\"} 1\n");
    assert_null(strstr(t, "job=\"job_1\""));
    assert_has(
        t,
        "trainyard_job_samples_per_second{job=\"job_2\",tenant=\"tn_a\"} 10\n");
    assert_has(
        t,
        "trainyard_predict_duration_seconds_count{endpoint=\"predict\"} 1\n");
    free(t);
}

static void test_public_names_no_owner(void **state)
{
    opm_job_started("tn_pub", 1);
    opm_job_samples_per_sec("job_pub", "tn_pub", 5);
    opm_deploy_request("dep_pub", "tn_pub", "ok", 0.01, 0.002, 0.005, 4);
    opm_deploy_replicas("dep_pub", "tn_pub", "ready", 1);
    char *t = render();
    assert_has(t, "trainyard_deployment_requests_total{deployment=\"dep_pub\","
                  "tenant=\"tn_pub\",outcome=\"ok\"} 1\n");
    free(t);
    t = metrics_render_public(opm_registry(), NULL);
    assert_non_null(t);
    assert_null(strstr(t, "_pub"));
    assert_null(strstr(t, "tenant=\""));
    assert_null(strstr(t, "deployment=\""));
    assert_null(strstr(t, "job=\""));
    assert_has(t, "trainyard_deployment_requests_total{outcome=\"ok\"} 1\n");
    assert_has(t, "trainyard_deployment_replicas{state=\"ready\"} 1\n");
    assert_has(t, "trainyard_deployment_batch_size_count 1\n");
    /* The other tests' series are in the sums too. */
    assert_has(t, "trainyard_job_samples_per_second 15\n");
    free(t);
    /* A deleted deployment's requests stay counted in public. */
    opm_deploy_forget("dep_pub");
    t = metrics_render_public(opm_registry(), NULL);
    assert_has(t, "trainyard_deployment_requests_total{outcome=\"ok\"} 1\n");
    assert_null(strstr(t, "trainyard_deployment_replicas{"));
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inventory_and_telemetry),
        cmocka_unit_test(test_requests_and_jobs),
        cmocka_unit_test(test_public_names_no_owner),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
