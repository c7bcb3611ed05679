/*
 * Integration test of the MIG layout advisor (issue 34): a real server on
 * the simulated H200 cut into seven 1g.18gb slices (gpu/sim/h200-7x1g.json).
 * A tenant's jobs asking for 3g.71gb are refused (422: no such slice) and a
 * 1g job runs; the demand is recorded in the store, survives a restart,
 * and GET /v1/admin/mig-advice advises a layout with a 3g.71gb instance
 * that serves what today's refuses. A tenant key gets 403; a bad window
 * 400. A GPU of a model without MIG profiles is said to be so and keeps
 * its layout; a GPU with MIG off is advised MIG on when the demand is MIG
 * profiles.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "harness.h"

static char files[PATH_MAX];
static char csv[PATH_MAX];
static char sim[PATH_MAX + 8];

static const char *const NET = "{\"layers\": [{\"type\": \"dense\", "
                               "\"units\": 3}]}";

static int group_setup(void **state)
{
    (void)state;
    temp_dir(files);
    snprintf(csv, sizeof csv, "%s/small.csv", files);
    make_blobs_csv(csv, 90, 11);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", __FILE__);
    char *cut = strstr(path, "tests/integration/");
    if (!cut)
        return -1;
    snprintf(cut, sizeof path - (size_t)(cut - path), "gpu/sim/h200-7x1g.json");
    snprintf(sim, sizeof sim, "sim:%s", path);
    return access(path, R_OK) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    fs_remove_tree(files, NULL);
    return 0;
}

static srv as(const srv *s, const char *key)
{
    srv t = *s;
    snprintf(t.key, sizeof t.key, "%s", key);
    return t;
}

static json_t *advice(const srv *s, const char *query, long status)
{
    char p[128];
    snprintf(p, sizeof p, "/v1/admin/mig-advice%s", query);
    resp *r = http_get(s, p);
    if (r->status != status)
        fprintf(stderr, "GET %s: %ld %s\n", p, r->status, r->body);
    expect_status(r, status);
    json_t *doc = r->json ? json_incref(r->json) : NULL;
    resp_free(r);
    return doc;
}

static int has_profile(const json_t *side, const char *profile)
{
    size_t i;
    json_t *inst;
    json_array_foreach (json_object_get(side, "instances"), i, inst)
        if (!strcmp(json_string_value(json_object_get(inst, "profile")),
                    profile))
            return 1;
    return 0;
}

static double num(const json_t *o, const char *a, const char *b)
{
    return json_number_value(json_object_get(json_object_get(o, a), b));
}

static void check_advice(const json_t *doc)
{
    assert_int_equal(json_integer_value(json_object_get(doc, "records")), 5);
    json_t *gpus = json_object_get(doc, "gpus");
    assert_int_equal(json_array_size(gpus), 1);
    json_t *g = json_array_get(gpus, 0);
    assert_string_equal(json_string_value(json_object_get(g, "model")),
                        "H200-141GB");
    assert_true(json_is_true(json_object_get(g, "mig_capable")));
    assert_true(json_is_true(json_object_get(g, "change")));
    json_t *cur = json_object_get(g, "current");
    json_t *adv = json_object_get(g, "advised");
    assert_int_equal(json_array_size(json_object_get(cur, "instances")), 7);
    assert_false(has_profile(cur, "3g.71gb"));
    assert_true(has_profile(adv, "3g.71gb"));
    assert_true(json_is_true(json_object_get(adv, "mig")));
    /* Every instance has the apply call's shape: profile and start. */
    size_t i;
    json_t *inst;
    json_array_foreach (json_object_get(adv, "instances"), i, inst) {
        assert_true(json_is_string(json_object_get(inst, "profile")));
        assert_true(json_is_integer(json_object_get(inst, "start")));
    }
    json_t *tot = json_object_get(doc, "totals");
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(tot, "current"), "unservable")),
                     4);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(tot, "advised"), "unservable")),
                     0);
    assert_true(num(tot, "advised", "queued_slice_hours") <
                num(tot, "current", "queued_slice_hours"));
}

static void test_advice_from_recorded_demand(void **state)
{
    (void)state;
    srv s;
    const char *flags[] = {"--devices", sim, NULL};
    assert_int_equal(srv_start(&s, NULL, flags), 0);

    resp *r = http_json(&s, "POST", "/v1/tenants", "{\"name\": \"t1\"}");
    expect_status(r, 201);
    srv t = as(&s, str(json_object_get(r->json, "key"), "api_key"));
    resp_free(r);

    char part[PATH_MAX + 8], ds[64];
    snprintf(part, sizeof part, "file=@%s", csv);
    const char *parts[] = {"name=blobs", "format=csv", "label_column=species",
                           part, NULL};
    r = http_upload(&t, "/v1/datasets", parts);
    expect_status(r, 201);
    snprintf(ds, sizeof ds, "%s", str(r->json, "id"));
    resp_free(r);

    char body[1024];
    for (int k = 0; k < 4; k++) {
        snprintf(body, sizeof body,
                 "{\"dataset\": \"%s\", \"model\": %s, \"hyperparameters\": "
                 "{\"epochs\": 1}, \"resources\": {\"gpu\": \"3g.71gb\"}}",
                 ds, NET);
        r = http_json(&t, "POST", "/v1/jobs", body);
        expect_refusal(&t, r, 422, "resources.gpu", NULL);
    }
    snprintf(body, sizeof body,
             "{\"dataset\": \"%s\", \"model\": %s, \"hyperparameters\": "
             "{\"epochs\": 1}, \"resources\": {\"gpu\": \"1g.18gb\"}}",
             ds, NET);
    r = http_json(&t, "POST", "/v1/jobs", body);
    expect_status(r, 202);
    char job[64];
    snprintf(job, sizeof job, "%s", str(r->json, "id"));
    resp_free(r);
    json_t *done = wait_job(&t, job, 120);
    assert_string_equal(str(done, "status"), "succeeded");
    json_decref(done);

    /* The tenant may not ask; bad windows are 400. */
    r = http_get(&t, "/v1/admin/mig-advice");
    expect_status(r, 403);
    resp_free(r);
    const char *bad[] = {"?window=abc",  "?window=0d",
                         "?window=91d",  "?window=30s",
                         "?window=7",    "?window=-1h",
                         "?window=1.5h", "?window=99999999999999999999d"};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        json_t *e = advice(&s, bad[k], 400);
        assert_string_equal(str(e, "field"), "window");
        json_decref(e);
    }

    json_t *doc = advice(&s, "?window=1h", 200);
    assert_string_equal(str(doc, "window"), "1h");
    check_advice(doc);
    json_decref(doc);

    /* Durable: the same advice after a restart. */
    srv_stop(&s, 15);
    char data[PATH_MAX];
    snprintf(data, sizeof data, "%s", s.data);
    char key[128];
    snprintf(key, sizeof key, "%s", s.key);
    srv s2;
    assert_int_equal(srv_start(&s2, data, flags), 0);
    if (!s2.key[0])
        snprintf(s2.key, sizeof s2.key, "%s", key);
    doc = advice(&s2, "", 200);
    assert_string_equal(str(doc, "window"), "7d");
    check_advice(doc);
    json_decref(doc);
    srv_stop(&s2, 15);
    srv_cleanup(&s2);
}

/* Two GPUs: a model trainyard has no MIG profiles for, and an A100-40GB
 * with MIG off. Jobs asking for 1g.5gb are refused (no MIG slice); the
 * advice keeps the first as it is (a note says why) and cuts the second. */
static void test_advice_non_mig_model(void **state)
{
    (void)state;
    char path[PATH_MAX], spec[PATH_MAX + 8];
    snprintf(path, sizeof path, "%s/two.json", files);
    const char *doc_text =
        "{\"gpus\": [{\"model\": \"T4\", \"mig\": false, \"memory_gb\": 16},"
        " {\"model\": \"A100-40GB\", \"mig\": false}]}";
    write_file(path, doc_text, strlen(doc_text));
    snprintf(spec, sizeof spec, "sim:%s", path);
    srv s;
    const char *flags[] = {"--devices", spec, NULL};
    assert_int_equal(srv_start(&s, NULL, flags), 0);

    char part[PATH_MAX + 8], ds[64], body[1024];
    snprintf(part, sizeof part, "file=@%s", csv);
    const char *parts[] = {"name=blobs", "format=csv", "label_column=species",
                           part, NULL};
    resp *r = http_upload(&s, "/v1/datasets", parts);
    expect_status(r, 201);
    snprintf(ds, sizeof ds, "%s", str(r->json, "id"));
    resp_free(r);
    for (int k = 0; k < 3; k++) {
        snprintf(body, sizeof body,
                 "{\"dataset\": \"%s\", \"model\": %s, \"hyperparameters\": "
                 "{\"epochs\": 1}, \"resources\": {\"gpu\": \"1g.5gb\"}}",
                 ds, NET);
        r = http_json(&s, "POST", "/v1/jobs", body);
        expect_refusal(&s, r, 422, "resources.gpu", NULL);
    }
    json_t *doc = advice(&s, "?window=10m", 200);
    assert_int_equal(json_integer_value(json_object_get(doc, "records")), 3);
    json_t *gpus = json_object_get(doc, "gpus");
    assert_int_equal(json_array_size(gpus), 2);
    json_t *t4 = json_array_get(gpus, 0), *a100 = json_array_get(gpus, 1);
    assert_false(json_is_true(json_object_get(t4, "mig_capable")));
    assert_non_null(strstr(str(t4, "note"), "not a MIG-capable model"));
    assert_false(json_is_true(json_object_get(t4, "change")));
    assert_false(
        json_is_true(json_object_get(json_object_get(t4, "advised"), "mig")));
    assert_true(json_is_true(json_object_get(a100, "mig_capable")));
    json_t *cur = json_object_get(a100, "current");
    assert_false(json_is_true(json_object_get(cur, "mig")));
    assert_int_equal(json_array_size(json_object_get(cur, "instances")), 0);
    assert_true(json_is_true(json_object_get(a100, "change")));
    assert_true(has_profile(json_object_get(a100, "advised"), "1g.5gb"));
    json_decref(doc);
    srv_stop(&s, 15);
    srv_cleanup(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_advice_from_recorded_demand),
        cmocka_unit_test(test_advice_non_mig_model),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
