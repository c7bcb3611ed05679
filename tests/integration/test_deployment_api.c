/*
 * Integration tests for /v1/deployments over HTTP: create (201 with a
 * Location), a taken name (409), spec and model errors (422 naming the
 * field), a body that is not an object (400), list, get by id and by name,
 * PATCH changing only what it names (and refusing name and resources),
 * delete (202, status "deleting", then gone), and the Deployment document's
 * shape. The deployments here keep min 0 replicas, so the tests hold
 * whatever the controller does with running replicas; test_tenants covers
 * another tenant's view.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "harness.h"

static srv server;
static char files[PATH_MAX];
static char model[64]; /* trained by the group setup */

static int group_setup(void **state)
{
    (void)state;
    temp_dir(files);
    char csv[PATH_MAX + 16], part[PATH_MAX + 32];
    snprintf(csv, sizeof csv, "%s/blobs.csv", files);
    make_blobs_csv(csv, 90, 5);
    if (srv_start(&server, NULL, NULL) != 0)
        return -1;
    snprintf(part, sizeof part, "file=@%s", csv);
    const char *parts[] = {"name=blobs", "format=csv", "label_column=species",
                           part, NULL};
    resp *r = http_upload(&server, "/v1/datasets", parts);
    if (r->status != 201) {
        resp_free(r);
        return -1;
    }
    char body[512];
    snprintf(body, sizeof body,
             "{\"dataset\": \"%s\", \"name\": \"served\", \"model\": "
             "{\"layers\": [{\"type\": \"dense\", \"units\": 3}]}, "
             "\"hyperparameters\": {\"epochs\": 1}}",
             str(r->json, "id"));
    resp_free(r);
    r = http_json(&server, "POST", "/v1/jobs", body);
    if (r->status != 202) {
        resp_free(r);
        return -1;
    }
    json_t *job = wait_job(&server, str(r->json, "id"), 120);
    resp_free(r);
    int ok = job && !strcmp(str(job, "status"), "succeeded");
    if (ok)
        snprintf(model, sizeof model, "%s", str(job, "model"));
    json_decref(job);
    return ok ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    srv_stop(&server, SIGTERM);
    srv_cleanup(&server);
    fs_remove_tree(files, NULL);
    return 0;
}

/* A 422 (or other problem) naming field. */
static void expect_problem(resp *r, long status, const char *field)
{
    if (r->status != status)
        fail_msg("wanted %ld on %s, got %ld %s", status, field ? field : "-",
                 r->status, r->body);
    assert_non_null(strstr(r->content_type, "problem+json"));
    const char *f = str(r->json, "field");
    if (field && (!f || strcmp(f, field)))
        fail_msg("wanted field %s, got %s: %s", field, f ? f : "none", r->body);
    assert_non_null(str(r->json, "detail"));
}

static int is_one_of(const char *v, const char *const *set)
{
    for (; v && *set; set++)
        if (!strcmp(v, *set))
            return 1;
    return 0;
}

/* The Deployment document: the spec's members and the running state. */
static void expect_deployment(const json_t *d, const char *name)
{
    static const char *const statuses[] = {
        "starting", "ready",    "updating", "scaled_to_zero",
        "degraded", "deleting", NULL};
    assert_string_equal(str(d, "name"), name);
    assert_string_equal(str(d, "model"), model);
    assert_non_null(str(d, "id"));
    assert_non_null(str(d, "created_at"));
    assert_non_null(str(d, "updated_at"));
    assert_true(json_is_integer(json_object_get(d, "generation")));
    if (!is_one_of(str(d, "status"), statuses))
        fail_msg("status %s", str(d, "status"));
    const json_t *rep = json_object_get(d, "replicas");
    const char *const rk[] = {"min", "max", "desired", "ready"};
    for (size_t i = 0; i < 4; i++)
        assert_true(json_is_integer(json_object_get(rep, rk[i])));
    assert_true(json_is_array(json_object_get(d, "instances")));
    assert_true(json_is_object(json_object_get(d, "traffic")));
    const char *const sk[] = {"resources", "batching", "limits", "autoscaling"};
    for (size_t i = 0; i < 4; i++)
        assert_true(json_is_object(json_object_get(d, sk[i])));
    assert_true(json_is_integer(json_object_get(d, "priority")));
}

static void test_create_get_list(void **state)
{
    (void)state;
    char body[512], path[128];
    snprintf(body, sizeof body,
             "{\"name\": \"web\", \"model\": \"%s\", \"replicas\": {\"min\": "
             "0, \"max\": 2}, \"batching\": {\"max_batch_size\": 16, "
             "\"preferred_batch_sizes\": [4, 16]}, \"limits\": "
             "{\"requests_per_second\": 50, \"max_concurrency\": 8}, "
             "\"priority\": 2}",
             model);
    resp *r = http_json(&server, "POST", "/v1/deployments", body);
    expect_status(r, 201);
    assert_non_null(strstr(r->content_type, "application/json"));
    expect_deployment(r->json, "web");
    char id[64];
    snprintf(id, sizeof id, "%s", str(r->json, "id"));
    snprintf(path, sizeof path, "/v1/deployments/%s", id);
    assert_string_equal(r->location, path);
    const json_t *rep = json_object_get(r->json, "replicas");
    assert_int_equal(json_integer_value(json_object_get(rep, "min")), 0);
    assert_int_equal(json_integer_value(json_object_get(rep, "max")), 2);
    const json_t *b = json_object_get(r->json, "batching");
    assert_int_equal(json_integer_value(json_object_get(b, "max_batch_size")),
                     16);
    const json_t *l = json_object_get(r->json, "limits");
    assert_true(json_number_value(json_object_get(l, "requests_per_second")) ==
                50);
    assert_int_equal(json_integer_value(json_object_get(l, "burst")), 50);
    assert_int_equal(json_integer_value(json_object_get(l, "max_concurrency")),
                     8);
    assert_string_equal(str(json_object_get(r->json, "resources"), "gpu"),
                        "none");
    assert_int_equal(json_integer_value(json_object_get(r->json, "priority")),
                     2);
    resp_free(r);

    /* By id and by name: the same deployment. */
    r = http_get(&server, path);
    expect_status(r, 200);
    expect_deployment(r->json, "web");
    assert_string_equal(str(r->json, "id"), id);
    resp_free(r);
    r = http_get(&server, "/v1/deployments/web");
    expect_status(r, 200);
    assert_string_equal(str(r->json, "id"), id);
    resp_free(r);

    /* The list holds it, on one page. */
    r = http_get(&server, "/v1/deployments");
    expect_status(r, 200);
    assert_true(json_is_null(json_object_get(r->json, "next_cursor")));
    int found = 0;
    size_t i;
    json_t *it;
    json_array_foreach (json_object_get(r->json, "items"), i, it) {
        if (!strcmp(str(it, "id"), id)) {
            found++;
            expect_deployment(it, "web");
        }
    }
    assert_int_equal(found, 1);
    resp_free(r);

    /* The name is taken: 409 naming it. */
    snprintf(body, sizeof body,
             "{\"name\": \"web\", \"model\": \"%s\", \"replicas\": {\"min\": "
             "0}}",
             model);
    r = http_json(&server, "POST", "/v1/deployments", body);
    expect_problem(r, 409, "name");
    resp_free(r);
    /* No such deployment: 404. */
    r = http_get(&server, "/v1/deployments/dep_aaaaaaaaaaaaaaaaaaaa");
    expect_problem(r, 404, NULL);
    resp_free(r);
}

static void test_create_errors(void **state)
{
    (void)state;
    char body[512];
    static const struct {
        const char *members, *field;
    } cases[] = {
        {"\"replicas\": {\"min\": 0, \"max\": 0}", "replicas.max"},
        {"\"replicas\": {\"min\": 3, \"max\": 2}", "replicas.min"},
        {"\"batching\": {\"max_batch_size\": 0}", "batching.max_batch_size"},
        {"\"batching\": {\"preferred_batch_sizes\": [8, 4]}",
         "batching.preferred_batch_sizes[1]"},
        {"\"limits\": {\"burst\": 4}", "limits.burst"},
        {"\"autoscaling\": {\"scale_up_after_s\": 601}",
         "autoscaling.scale_up_after_s"},
        {"\"resources\": {\"gpu\": \"hal\", \"x\": 1}", "resources.x"},
        {"\"colour\": \"blue\"", "colour"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(body, sizeof body,
                 "{\"name\": \"bad\", \"model\": \"%s\", %s}", model,
                 cases[i].members);
        resp *r = http_json(&server, "POST", "/v1/deployments", body);
        expect_problem(r, 422, cases[i].field);
        resp_free(r);
    }
    resp *r = http_json(&server, "POST", "/v1/deployments",
                        "{\"name\": \"bad\", \"model\": "
                        "\"mdl_aaaaaaaaaaaaaaaaaaaa\", \"replicas\": {\"min\": "
                        "0}}");
    expect_problem(r, 422, "model");
    resp_free(r);
    r = http_json(&server, "POST", "/v1/deployments", "{\"model\": \"x\"}");
    expect_problem(r, 422, "name");
    resp_free(r);
    r = http_json(&server, "POST", "/v1/deployments", "[1, 2]");
    expect_problem(r, 400, NULL);
    resp_free(r);
    /* Nothing of these was created. */
    r = http_get(&server, "/v1/deployments/bad");
    expect_problem(r, 404, NULL);
    resp_free(r);
}

static void test_patch_and_delete(void **state)
{
    (void)state;
    char body[512], path[128];
    snprintf(body, sizeof body,
             "{\"name\": \"patched\", \"model\": \"%s\", \"replicas\": "
             "{\"min\": 0, \"max\": 1}, \"autoscaling\": "
             "{\"scale_down_after_s\": 30}}",
             model);
    resp *r = http_json(&server, "POST", "/v1/deployments", body);
    expect_status(r, 201);
    snprintf(path, sizeof path, "/v1/deployments/%s", str(r->json, "id"));
    json_t *created = json_incref(r->json);
    resp_free(r);

    /* Only what the PATCH names changes. */
    r = http_json(&server, "PATCH", path,
                  "{\"replicas\": {\"max\": 3}, \"batching\": "
                  "{\"max_queue_delay_us\": 2000}}");
    expect_status(r, 200);
    expect_deployment(r->json, "patched");
    const json_t *rep = json_object_get(r->json, "replicas");
    assert_int_equal(json_integer_value(json_object_get(rep, "min")), 0);
    assert_int_equal(json_integer_value(json_object_get(rep, "max")), 3);
    const json_t *b = json_object_get(r->json, "batching");
    assert_int_equal(
        json_integer_value(json_object_get(b, "max_queue_delay_us")), 2000);
    assert_true(json_equal(json_object_get(b, "max_batch_size"),
                           json_object_get(json_object_get(created, "batching"),
                                           "max_batch_size")));
    const char *const same[] = {"autoscaling", "limits", "resources",
                                "priority",    "id",     "created_at"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        if (!json_equal(json_object_get(r->json, same[i]),
                        json_object_get(created, same[i])))
            fail_msg("PATCH changed %s: %s", same[i], r->body);
    resp_free(r);
    /* And it is stored so. */
    r = http_get(&server, "/v1/deployments/patched");
    expect_status(r, 200);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(r->json, "replicas"), "max")),
                     3);
    resp_free(r);

    /* What PATCH refuses, naming the field; nothing changes. */
    static const struct {
        const char *body, *field;
        long status;
    } bad[] = {
        {"{\"name\": \"other\"}", "name", 422},
        {"{\"resources\": {\"gpu\": \"any\"}}", "resources", 422},
        {"{\"replicas\": {\"min\": 4}}", "replicas.min", 422},
        {"{\"limits\": {\"max_concurrency\": 0}}", "limits.max_concurrency",
         422},
        {"{\"model\": \"mdl_aaaaaaaaaaaaaaaaaaaa\"}", "model", 422},
        {"{\"replicas\": {\"max\": 2}, \"what\": 1}", "what", 422},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = http_json(&server, "PATCH", path, bad[i].body);
        expect_problem(r, bad[i].status, bad[i].field);
        resp_free(r);
    }
    r = http_json(&server, "PATCH", path, "\"x\"");
    expect_problem(r, 400, NULL);
    resp_free(r);
    r = http_get(&server, path);
    rep = json_object_get(r->json, "replicas");
    assert_int_equal(json_integer_value(json_object_get(rep, "max")), 3);
    assert_int_equal(json_integer_value(json_object_get(rep, "min")), 0);
    resp_free(r);
    r = http_json(&server, "PATCH", "/v1/deployments/dep_aaaaaaaaaaaaaaaaaaaa",
                  "{\"replicas\": {\"max\": 2}}");
    expect_problem(r, 404, NULL);
    resp_free(r);

    /* Delete: 202 with the deployment as it was, "deleting"; then gone
     * once drained (nothing runs for it, so at once or nearly). */
    r = http_do(&server, "DELETE", path, NULL, NULL, 0, NULL);
    expect_status(r, 202);
    assert_string_equal(str(r->json, "status"), "deleting");
    assert_string_equal(str(r->json, "name"), "patched");
    resp_free(r);
    double deadline = now_seconds() + 60;
    long status = 0;
    while (now_seconds() < deadline) {
        r = http_get(&server, path);
        status = r->status;
        resp_free(r);
        if (status == 404)
            break;
        assert_int_equal(status, 200);
        usleep(100000);
    }
    assert_int_equal(status, 404);
    /* Its name is free again. */
    r = http_json(&server, "POST", "/v1/deployments", body);
    expect_status(r, 201);
    resp_free(r);
    json_decref(created);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_get_list),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_patch_and_delete),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
