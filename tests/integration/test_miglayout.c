/*
 * Integration tests for POST /v1/admin/mig-layout (issue 34, "Apply") on a
 * real server with the simulated inventory gpu/sim/h100-mixed.json (one
 * H100: 3g.40gb at 4, 2g.20gb at 0, 1g.10gb at 2 and 3) and real workers
 * that compute on the CPU.
 *
 *   wait      a layout change while a 3g job runs stays "draining" (202,
 *             waiting on that job) until the job ends; a job queued
 *             meanwhile is not placed on the draining GPU (it is still
 *             queued when the running job has succeeded); then the new
 *             slots (4g.40gb + 3g.40gb) are in GET /v1/devices, the queued
 *             job runs, a job asking for the new 4g.40gb profile runs on
 *             it; the new layout survives a restart
 *   preempt   the running training job checkpoints, goes back to the
 *             queue (preemptions 1), and resumes on the new layout
 *   replica   a deployment's replica on the GPU moves to another GPU, make
 *             before break; the change is done and the deployment ready
 *   timeout   a drain past its timeout_s fails; the GPU's old slices take
 *             jobs again, the running job was never stopped
 *   refusals  a tenant's key: 403; an overlapping layout: 422 naming
 *             instances[1].start; a GPU the host lacks: 404; a second
 *             change while one drains: 409
 *
 * No timing assertions: waits are bounded polls.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "harness.h"

static char files[PATH_MAX];
static char sim_h100[PATH_MAX];

static const char *const BIG_NET =
    "{\"layers\": [{\"type\": \"dense\", \"units\": 512}, {\"type\": \"relu\"},"
    " {\"type\": \"dense\", \"units\": 512}, {\"type\": \"relu\"},"
    " {\"type\": \"dense\", \"units\": 3}]}";
static const char *const SMALL_NET =
    "{\"layers\": [{\"type\": \"dense\", \"units\": 3}]}";

/* 4g.40gb at 0 and 3g.40gb at 4: a profile the file does not have */
static const char *const NEW_LAYOUT =
    "\"instances\": [{\"profile\": \"4g.40gb\", \"start\": 0}, "
    "{\"profile\": \"3g.40gb\", \"start\": 4}]";

static char *file_path(const char *name)
{
    static char p[4][PATH_MAX];
    static int next;
    char *out = p[next++ % 4];
    snprintf(out, PATH_MAX, "%s/%s", files, name);
    return out;
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

static void submit(const srv *s, const char *ds, const char *model,
                   const char *hp, const char *gpu, char id[64])
{
    char b[2048];
    snprintf(b, sizeof b,
             "{\"dataset\": \"%s\", \"model\": %s, \"hyperparameters\": %s, "
             "\"resources\": {\"gpu\": \"%s\"}}",
             ds, model, hp, gpu);
    resp *r = http_json(s, "POST", "/v1/jobs", b);
    expect_status(r, 202);
    snprintf(id, 64, "%s", str(r->json, "id"));
    resp_free(r);
}

static int running_past_first_step(const json_t *j)
{
    return !strcmp(str(j, "status"), "running") &&
           json_integer_value(
               json_object_get(json_object_get(j, "progress"), "step")) > 0;
}

static const char *slot_profile(const json_t *j)
{
    return str(json_object_get(j, "placement"), "profile");
}

/* GET /v1/admin/mig-layout/0's change state (a static buffer). */
static const char *change_state(const srv *s)
{
    static char st[32];
    resp *r = http_get(s, "/v1/admin/mig-layout/0");
    expect_status(r, 200);
    json_t *c = json_object_get(r->json, "change");
    snprintf(st, sizeof st, "%s", json_is_object(c) ? str(c, "state") : "");
    resp_free(r);
    return st;
}

static void wait_change(const srv *s, const char *state, double timeout_s)
{
    double deadline = now_seconds() + timeout_s;
    while (strcmp(change_state(s), state) && now_seconds() < deadline)
        usleep(50000);
    assert_string_equal(change_state(s), state);
}

/* The profiles of GPU 0's slices in GET /v1/devices, "a,b". */
static void device_profiles(const srv *s, char *out, size_t n)
{
    resp *r = http_get(s, "/v1/devices");
    expect_status(r, 200);
    json_t *slices = json_object_get(
        json_array_get(json_object_get(r->json, "gpus"), 0), "slices");
    size_t i, used = 0;
    json_t *sl;
    out[0] = 0;
    json_array_foreach (slices, i, sl)
        used +=
            (size_t)snprintf(out + used, n - used, "%s%s", i ? "," : "",
                             str(sl, "profile") ? str(sl, "profile") : "whole");
    resp_free(r);
}

static const char *start_flags_devices(char *buf, size_t n)
{
    snprintf(buf, n, "sim:%s", sim_h100);
    return buf;
}

static int group_setup(void **state)
{
    (void)state;
    temp_dir(files);
    make_blobs_csv(file_path("small.csv"), 90, 11);
    make_blobs_csv(file_path("big.csv"), 12000, 11);
    snprintf(sim_h100, sizeof sim_h100, "%s", __FILE__);
    char *cut = strstr(sim_h100, "tests/integration/");
    if (!cut)
        return -1;
    snprintf(cut, sizeof sim_h100 - (size_t)(cut - sim_h100),
             "gpu/sim/h100-mixed.json");
    return access(sim_h100, R_OK) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    fs_remove_tree(files, NULL);
    return 0;
}

static void test_wait_drains_then_recuts(void **state)
{
    (void)state;
    char devices[PATH_MAX + 16];
    const char *flags[] = {"--devices",
                           start_flags_devices(devices, sizeof devices),
                           "--worker-threads",
                           "1",
                           "--preempt",
                           "off",
                           NULL};
    srv s;
    assert_int_equal(srv_start(&s, NULL, flags), 0);
    char big[64], small[64], a[64], b[64], c[64];
    upload(&s, "big.csv", big);
    upload(&s, "small.csv", small);
    submit(&s, big, BIG_NET, "{\"epochs\": 4, \"batch_size\": 8}", "3g.40gb",
           a);
    json_t *j = wait_job_until(&s, a, 300, running_past_first_step);
    assert_true(running_past_first_step(j));
    json_decref(j);

    char body[1024];
    snprintf(body, sizeof body, "{\"gpu\": 0, %s, \"drain\": \"wait\"}",
             NEW_LAYOUT);
    resp *r = http_json(&s, "POST", "/v1/admin/mig-layout", body);
    expect_status(r, 202);
    assert_string_equal(str(r->json, "state"), "draining");
    assert_true(json_is_false(json_object_get(r->json, "applied")));
    json_t *w = json_object_get(r->json, "waiting_on");
    assert_int_equal(json_array_size(w), 1);
    assert_string_equal(json_string_value(json_array_get(w, 0)), a);
    assert_int_equal(json_array_size(json_object_get(
                         json_object_get(r->json, "before"), "instances")),
                     4);
    resp_free(r);
    /* a second change while this one drains */
    r = http_json(&s, "POST", "/v1/admin/mig-layout",
                  "{\"gpu\": 0, \"mig\": false}");
    expect_refusal(&s, r, 409, "gpu", "draining");

    /* a job for any slot: every slot of the only GPU drains, so it
     * waits, even on the three free ones */
    submit(&s, small, SMALL_NET, "{\"epochs\": 1}", "any", b);
    int saw_queued = 0;
    for (;;) {
        json_t *ja = get_job(&s, a), *jb = get_job(&s, b);
        int a_done = !strcmp(str(ja, "status"), "succeeded") ||
                     !strcmp(str(ja, "status"), "failed");
        const char *state_now = change_state(&s);
        /* while the change drains, b is never placed */
        if (!strcmp(state_now, "draining")) {
            assert_string_equal(str(jb, "status"), "queued");
            saw_queued = 1;
        }
        json_decref(jb);
        if (a_done) {
            assert_string_equal(str(ja, "status"), "succeeded");
            json_decref(ja);
            break;
        }
        json_decref(ja);
        usleep(50000);
    }
    assert_true(saw_queued);
    wait_change(&s, "done", 60);

    /* the new slots, in place of the old ones */
    char prof[256];
    device_profiles(&s, prof, sizeof prof);
    assert_string_equal(prof, "4g.40gb,3g.40gb");
    r = http_get(&s, "/v1/admin/mig-layout/0");
    expect_status(r, 200);
    json_t *ch = json_object_get(r->json, "change");
    assert_true(json_is_true(json_object_get(ch, "applied")));
    assert_int_equal(json_array_size(json_object_get(
                         json_object_get(ch, "after"), "instances")),
                     2);
    assert_string_equal(
        str(json_array_get(json_object_get(json_object_get(r->json, "layout"),
                                           "instances"),
                           0),
            "profile"),
        "4g.40gb");
    resp_free(r);

    /* the queued job runs now, and one for the new profile runs on it */
    j = wait_job(&s, b, 300);
    assert_string_equal(str(j, "status"), "succeeded");
    json_decref(j);
    submit(&s, small, SMALL_NET, "{\"epochs\": 1}", "4g.40gb", c);
    j = wait_job(&s, c, 300);
    assert_string_equal(str(j, "status"), "succeeded");
    assert_string_equal(slot_profile(j), "4g.40gb");
    json_decref(j);

    /* the layout outlives the server */
    srv_stop(&s, SIGTERM);
    char data[PATH_MAX];
    snprintf(data, sizeof data, "%s", s.data);
    srv s2;
    assert_int_equal(srv_start(&s2, data, flags), 0);
    device_profiles(&s2, prof, sizeof prof);
    assert_string_equal(prof, "4g.40gb,3g.40gb");
    srv_stop(&s2, SIGTERM);
    srv_cleanup(&s2);
}

static void test_preempt_checkpoints_and_resumes(void **state)
{
    (void)state;
    char devices[PATH_MAX + 16];
    const char *flags[] = {"--devices",
                           start_flags_devices(devices, sizeof devices),
                           "--worker-threads",
                           "1",
                           "--preempt",
                           "off",
                           NULL};
    srv s;
    assert_int_equal(srv_start(&s, NULL, flags), 0);
    char big[64], a[64];
    upload(&s, "big.csv", big);
    submit(&s, big, BIG_NET, "{\"epochs\": 8, \"batch_size\": 8}", "3g.40gb",
           a);
    json_t *j = wait_job_until(&s, a, 300, running_past_first_step);
    assert_true(running_past_first_step(j));
    json_decref(j);

    char body[1024];
    snprintf(body, sizeof body,
             "{\"gpu\": 0, %s, \"drain\": \"preempt\", \"timeout_s\": 600}",
             NEW_LAYOUT);
    resp *r = http_json(&s, "POST", "/v1/admin/mig-layout", body);
    expect_status(r, 202);
    assert_string_equal(str(r->json, "drain"), "preempt");
    resp_free(r);
    wait_change(&s, "done", 300);
    j = wait_job(&s, a, 600);
    if (strcmp(str(j, "status"), "succeeded"))
        fprintf(stderr, "job: %s\n", str(j, "error"));
    assert_string_equal(str(j, "status"), "succeeded");
    assert_int_equal(json_integer_value(json_object_get(j, "preemptions")), 1);
    assert_int_equal(json_integer_value(json_object_get(j, "attempts")), 1);
    /* it resumed on the new layout's 3g.40gb (slot 1 now), from its
     * checkpoint */
    assert_string_equal(slot_profile(j), "3g.40gb");
    assert_true(json_is_integer(
        json_object_get(json_object_get(j, "progress"), "resumed_from_epoch")));
    json_decref(j);
    srv_stop(&s, SIGTERM);
    srv_cleanup(&s);
}

/* The first replica of deployment dpath as (state, gpu) ("", -1 none). */
static void first_replica(const srv *s, const char *dpath, char *state,
                          size_t n, int *gpu)
{
    resp *r = http_get(s, dpath);
    expect_status(r, 200);
    json_t *inst = json_object_get(r->json, "instances");
    state[0] = 0;
    *gpu = -1;
    size_t i;
    json_t *o;
    json_array_foreach (inst, i, o) {
        /* the newest first: report a ready one if there is one */
        const char *st = str(o, "state");
        if (!state[0] || !strcmp(st, "ready")) {
            snprintf(state, n, "%s", st);
            json_t *g = json_object_get(o, "gpu");
            *gpu = json_is_integer(g) ? (int)json_integer_value(g) : -1;
        }
    }
    resp_free(r);
}

/* A serving replica on the GPU is moved, make before break: its
 * replacement starts on the other GPU, then it drains; the change is done
 * and the deployment never stopped answering. */
static void test_replica_moves_to_another_gpu(void **state)
{
    (void)state;
    /* two H100s as the file has one */
    char two[PATH_MAX];
    snprintf(two, sizeof two, "%s", file_path("two-h100.json"));
    const char *doc =
        "{\"gpus\": [{\"model\": \"H100-80GB\", \"mig\": true, "
        "\"instances\": [{\"profile\": \"3g.40gb\", \"start\": 4}, "
        "{\"profile\": \"2g.20gb\", \"start\": 0}, {\"profile\": "
        "\"1g.10gb\", \"start\": 2}, {\"profile\": \"1g.10gb\", "
        "\"start\": 3}]}, {\"model\": \"H100-80GB\", \"mig\": true, "
        "\"instances\": [{\"profile\": \"1g.10gb\", \"start\": 0}]}]}";
    write_file(two, doc, strlen(doc));
    char devices[PATH_MAX + 16];
    snprintf(devices, sizeof devices, "sim:%s", two);
    const char *flags[] = {"--devices", devices, "--worker-threads", "1", NULL};
    srv s;
    assert_int_equal(srv_start(&s, NULL, flags), 0);
    char small[64], job[64];
    upload(&s, "small.csv", small);
    submit(&s, small, SMALL_NET, "{\"epochs\": 1}", "any", job);
    json_t *j = wait_job(&s, job, 300);
    assert_string_equal(str(j, "status"), "succeeded");
    char model[64], body[512], dpath[128];
    snprintf(model, sizeof model, "%s", str(j, "model"));
    json_decref(j);
    snprintf(body, sizeof body,
             "{\"name\": \"mover\", \"model\": \"%s\", \"replicas\": "
             "{\"min\": 1, \"max\": 1}, \"resources\": {\"gpu\": "
             "\"1g.10gb\"}}",
             model);
    resp *r = http_json(&s, "POST", "/v1/deployments", body);
    expect_status(r, 201);
    snprintf(dpath, sizeof dpath, "/v1/deployments/%s", str(r->json, "id"));
    resp_free(r);
    char st[32];
    int gpu = -1;
    double deadline = now_seconds() + 120;
    do {
        first_replica(&s, dpath, st, sizeof st, &gpu);
        if (strcmp(st, "ready"))
            usleep(100000);
    } while (strcmp(st, "ready") && now_seconds() < deadline);
    assert_string_equal(st, "ready");
    assert_int_equal(gpu, 0); /* best fit: the first 1g.10gb */

    snprintf(body, sizeof body, "{\"gpu\": 0, %s}", NEW_LAYOUT);
    r = http_json(&s, "POST", "/v1/admin/mig-layout", body);
    expect_status(r, 202);
    assert_int_equal(json_array_size(json_object_get(r->json, "waiting_on")),
                     1);
    resp_free(r);
    wait_change(&s, "done", 120);
    /* the replica that serves now is on GPU 1, and it answers */
    first_replica(&s, dpath, st, sizeof st, &gpu);
    assert_string_equal(st, "ready");
    assert_int_equal(gpu, 1);
    char pp[160];
    snprintf(pp, sizeof pp, "/v1/models/%s/predict", model);
    const char *in = "{\"inputs\": [[1, 2, 3, 4]]}";
    r = http_do(&s, "POST", pp, "application/json", in, strlen(in), s.key);
    expect_status(r, 200);
    resp_free(r);
    r = http_get(&s, dpath);
    expect_status(r, 200);
    assert_string_equal(str(r->json, "status"), "ready");
    resp_free(r);
    r = http_do(&s, "DELETE", dpath, NULL, NULL, 0, s.key);
    resp_free(r);
    srv_stop(&s, SIGTERM);
    srv_cleanup(&s);
}

/* A drain that outlasts its timeout_s fails, and the GPU is in use
 * again with its old layout: a queued job runs on it. */
static void test_timeout_fails_and_restores(void **state)
{
    (void)state;
    char devices[PATH_MAX + 16];
    const char *flags[] = {"--devices",
                           start_flags_devices(devices, sizeof devices),
                           "--worker-threads",
                           "1",
                           "--preempt",
                           "off",
                           NULL};
    srv s;
    assert_int_equal(srv_start(&s, NULL, flags), 0);
    char big[64], small[64], a[64], b[64];
    upload(&s, "big.csv", big);
    upload(&s, "small.csv", small);
    submit(&s, big, BIG_NET, "{\"epochs\": 40, \"batch_size\": 8}", "3g.40gb",
           a);
    json_t *j = wait_job_until(&s, a, 300, running_past_first_step);
    assert_true(running_past_first_step(j));
    json_decref(j);
    char body[1024];
    snprintf(body, sizeof body, "{\"gpu\": 0, %s, \"timeout_s\": 1}",
             NEW_LAYOUT);
    resp *r = http_json(&s, "POST", "/v1/admin/mig-layout", body);
    expect_status(r, 202);
    resp_free(r);
    wait_change(&s, "failed", 120);
    r = http_get(&s, "/v1/admin/mig-layout/0");
    expect_status(r, 200);
    json_t *ch = json_object_get(r->json, "change");
    assert_non_null(strstr(str(ch, "error"), "timed out"));
    assert_true(json_is_false(json_object_get(ch, "applied")));
    resp_free(r);
    char prof[256];
    device_profiles(&s, prof, sizeof prof);
    assert_string_equal(prof, "3g.40gb,2g.20gb,1g.10gb,1g.10gb");
    /* the long job ran on; a new one takes a free slice again */
    submit(&s, small, SMALL_NET, "{\"epochs\": 1}", "1g.10gb", b);
    j = wait_job(&s, b, 300);
    assert_string_equal(str(j, "status"), "succeeded");
    json_decref(j);
    j = get_job(&s, a);
    assert_int_equal(json_integer_value(json_object_get(j, "preemptions")), 0);
    json_decref(j);
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s/cancel", a);
    resp *c = http_do(&s, "POST", path, NULL, NULL, 0, s.key);
    resp_free(c);
    srv_stop(&s, SIGTERM);
    srv_cleanup(&s);
}

static void test_refusals(void **state)
{
    (void)state;
    char devices[PATH_MAX + 16];
    const char *flags[] = {"--devices",
                           start_flags_devices(devices, sizeof devices), NULL};
    srv s;
    assert_int_equal(srv_start(&s, NULL, flags), 0);
    resp *r = http_json(&s, "POST", "/v1/tenants", "{\"name\": \"t\"}");
    expect_status(r, 201);
    srv t = s;
    snprintf(t.key, sizeof t.key, "%s",
             str(json_object_get(r->json, "key"), "api_key"));
    resp_free(r);
    r = http_json(&t, "POST", "/v1/admin/mig-layout",
                  "{\"gpu\": 0, \"mig\": false}");
    assert_int_equal(r->status, 403);
    resp_free(r);
    r = http_get(&t, "/v1/admin/mig-layout");
    assert_int_equal(r->status, 403);
    resp_free(r);
    r = http_get(&t, "/v1/admin/mig-layout/0");
    assert_int_equal(r->status, 403);
    resp_free(r);
    r = http_json(&s, "POST", "/v1/admin/mig-layout",
                  "{\"gpu\": 0, \"instances\": [{\"profile\": \"2g.20gb\", "
                  "\"start\": 2}, {\"profile\": \"1g.10gb\", \"start\": 3}]}");
    expect_refusal(&s, r, 422, "instances[1].start", "overlaps");
    r = http_json(&s, "POST", "/v1/admin/mig-layout",
                  "{\"gpu\": 0, \"instances\": [{\"profile\": \"1g.18gb\", "
                  "\"start\": 0}]}");
    expect_refusal(&s, r, 422, "instances[0].profile", "1g.10gb");
    r = http_json(&s, "POST", "/v1/admin/mig-layout",
                  "{\"gpu\": 3, \"mig\": false}");
    expect_refusal(&s, r, 404, "gpu", NULL);
    r = http_get(&s, "/v1/admin/mig-layout/7");
    assert_int_equal(r->status, 404);
    resp_free(r);
    /* an idle GPU changes at once: 200, done */
    r = http_json(&s, "POST", "/v1/admin/mig-layout",
                  "{\"gpu\": 0, \"mig\": false}");
    expect_status(r, 200);
    assert_string_equal(str(r->json, "state"), "done");
    resp_free(r);
    char prof[256];
    device_profiles(&s, prof, sizeof prof);
    assert_string_equal(prof, "whole"); /* one whole GPU: profile null */
    srv_stop(&s, SIGTERM);
    srv_cleanup(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_wait_drains_then_recuts),
        cmocka_unit_test(test_preempt_checkpoints_and_resumes),
        cmocka_unit_test(test_timeout_fails_and_restores),
        cmocka_unit_test(test_replica_moves_to_another_gpu),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
