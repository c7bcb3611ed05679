/*
 * Integration tests for the predict path's tables (serve/table.h,
 * server/auth.c): each thread keeps the models and keys it has seen, so
 * they must follow the store and the model cache at once.
 *
 *   cache      --model-cache 1 with two models predicted in turn on one HTTP
 *              thread: each switch makes the cache take its one entry back
 *              from the thread's table; every answer is its model's
 *   delete     a deleted model is 404 from the next request on; the other
 *              still answers
 *   revoke     a key used (so remembered by the thread) and then revoked is
 *              401 from the next request on
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "models/safetensors.h"

static srv server;
static char ids[2][64];

/* Imports a 4 -> 3 linear model whose output j is scale * x[j] (the last
 * input ignored), named name; its id into id. */
static void import(const char *name, float scale, char *id)
{
    float w[3 * 4] = {0}, b[3] = {0};
    for (int j = 0; j < 3; j++)
        w[j * 4 + j] = scale;
    char st[PATH_MAX], part[PATH_MAX + 16], name_part[128];
    snprintf(st, sizeof st, "%s/%s.safetensors", server.data, name);
    st_out_tensor t[2] = {{"0.weight", ST_F32, 2, {3, 4}, w},
                          {"0.bias", ST_F32, 1, {3}, b}};
    ty_err err = {0};
    assert_int_equal(st_write(st, NULL, t, 2, &err), TY_OK);
    snprintf(part, sizeof part, "weights=@%s", st);
    snprintf(name_part, sizeof name_part, "name=%s", name);
    const char *parts[] = {part,
                           "metadata={\"spec\": {\"layers\": [{\"type\": "
                           "\"dense\", \"units\": 3}]}, \"task\": "
                           "\"regression\", \"input_shape\": [4], "
                           "\"num_outputs\": 3}",
                           name_part, NULL};
    resp *r = http_upload(&server, "/v1/models", parts);
    expect_status(r, 201);
    snprintf(id, 64, "%s", str(r->json, "id"));
    resp_free(r);
}

/* Predicts [1, 2, 3, 4] with model id; returns the first output (-1 when
 * the status is not 200; *status gets it). */
static double predict(const char *id, const char *key, long *status)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/models/%s/predict", id);
    const char *body = "{\"inputs\": [[1, 2, 3, 4]]}";
    resp *r = http_do(&server, "POST", path, "application/json", body,
                      strlen(body), key);
    *status = r->status;
    double v = -1;
    if (r->status == 200) {
        assert_string_equal(str(r->json, "model"), id);
        v = json_number_value(json_array_get(
            json_array_get(json_object_get(r->json, "outputs"), 0), 0));
    }
    resp_free(r);
    return v;
}

static int setup(void **state)
{
    (void)state;
    const char *extra[] = {"--model-cache", "1", "--threads", "1", NULL};
    return srv_start(&server, NULL, extra);
}

static int teardown(void **state)
{
    (void)state;
    srv_stop(&server, SIGTERM);
    srv_cleanup(&server);
    return 0;
}

static void test_cache_takes_entries_back(void **state)
{
    (void)state;
    import("double", 2.0f, ids[0]);
    import("triple", 3.0f, ids[1]);
    for (int i = 0; i < 20; i++) {
        long status;
        double v = predict(ids[i % 2], NULL, &status);
        assert_int_equal(status, 200);
        assert_true(v == (i % 2 ? 3.0 : 2.0));
    }
}

static void test_deleted_model_is_gone(void **state)
{
    (void)state;
    long status;
    assert_true(predict(ids[0], NULL, &status) == 2.0); /* remembered */
    char path[128];
    snprintf(path, sizeof path, "/v1/models/%s", ids[0]);
    resp *r = http_do(&server, "DELETE", path, NULL, NULL, 0, NULL);
    expect_status(r, 204);
    resp_free(r);
    predict(ids[0], NULL, &status);
    assert_int_equal(status, 404);
    assert_true(predict(ids[1], NULL, &status) == 3.0);
}

static void test_revoked_key_is_refused(void **state)
{
    (void)state;
    /* The admin's own tenant gets a second key (the tenant's id from its
     * key's GET /v1/tenants). */
    resp *r = http_get(&server, "/v1/tenants");
    expect_status(r, 200);
    const char *tenant =
        str(json_array_get(json_object_get(r->json, "items"), 0), "id");
    char path[128];
    snprintf(path, sizeof path, "/v1/tenants/%s/keys", tenant);
    resp_free(r);
    r = http_do(&server, "POST", path, NULL, NULL, 0, NULL);
    expect_status(r, 201);
    char key[128], key_id[64];
    snprintf(key, sizeof key, "%s", str(r->json, "api_key"));
    snprintf(key_id, sizeof key_id, "%s", str(r->json, "id"));
    resp_free(r);
    long status;
    for (int i = 0; i < 3; i++) {
        predict(ids[1], key, &status);
        assert_int_equal(status, 200);
    }
    snprintf(path + strlen(path), sizeof path - strlen(path), "/%s", key_id);
    r = http_do(&server, "DELETE", path, NULL, NULL, 0, NULL);
    expect_status(r, 204);
    resp_free(r);
    predict(ids[1], key, &status);
    assert_int_equal(status, 401);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cache_takes_entries_back),
        cmocka_unit_test(test_deleted_model_is_gone),
        cmocka_unit_test(test_revoked_key_is_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
