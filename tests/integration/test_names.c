/*
 * Integration tests for naming a dataset, model or job by its name where
 * /v1 takes an id (issue 30, finding 3): every path parameter and body
 * field resolves an id first and else the newest of the tenant's resources
 * of that name (store_ref_resolve). Covers a job submitted by dataset
 * name (and validation dataset name), the job, its metrics, curves, events
 * and cancel by the job's name, a model shown, evaluated, predicted and
 * downloaded by name, two datasets of one name (the newest wins, the id
 * still reaches the older), another tenant's names (never reached, and
 * answered as a name nobody has: no id leaks), names shaped like ids, a
 * name with a space, and the command-line client by name.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "common/fsutil.h"
#include "harness.h"

static srv server;     /* its key is the admin's */
static srv as_a, as_b; /* the same server, with tenant a's or b's key */
static char files[PATH_MAX];
/* a's dataset "names-train", the job "names-job" trained on it by name,
 * and its model */
static char a_ds[64], a_job[64], a_model[64], a_model_name[256];

/* ---- helpers ---- */

static char *file_path(const char *name)
{
    static char p[4][PATH_MAX];
    static int next;
    char *out = p[next++ % 4];
    snprintf(out, PATH_MAX, "%s/%s", files, name);
    return out;
}

/* POST /v1/tenants as the admin; fills the tenant's first key. */
static int create_tenant(const char *name, char key[128])
{
    char body[128];
    snprintf(body, sizeof body, "{\"name\": \"%s\"}", name);
    resp *r = http_json(&server, "POST", "/v1/tenants", body);
    int ok = r->status == 201;
    if (ok)
        snprintf(key, 128, "%s",
                 str(json_object_get(r->json, "key"), "api_key"));
    resp_free(r);
    return ok ? 0 : -1;
}

/* Uploads the blobs CSV as tenant s's dataset `name`; its id into id. */
static void upload(const srv *s, const char *name, char id[64])
{
    char part[PATH_MAX + 8], nm[300];
    snprintf(part, sizeof part, "file=@%s", file_path("blobs.csv"));
    snprintf(nm, sizeof nm, "name=%s", name);
    const char *parts[] = {nm, "format=csv", "label_column=species", part,
                           NULL};
    resp *r = http_upload(s, "/v1/datasets", parts);
    expect_status(r, 201);
    snprintf(id, 64, "%s", str(r->json, "id"));
    resp_free(r);
}

/* GET path as s, expecting status; the reply (caller frees). */
static resp *get_as(const srv *s, const char *path, long status)
{
    resp *r = http_do(s, "GET", path, NULL, NULL, 0, NULL);
    expect_status(r, status);
    return r;
}

/* The id GET path answers with as s (200 expected), into id. */
static void id_at(const srv *s, const char *path, char id[64])
{
    resp *r = get_as(s, path, 200);
    snprintf(id, 64, "%s", str(r->json, "id"));
    resp_free(r);
}

static resp *post_as(const srv *s, const char *path, const char *body)
{
    return http_do(s, "POST", path, "application/json", body,
                   body ? strlen(body) : 0, NULL);
}

/* A job body training on dataset ref (validated on vref when not NULL). */
static void job_body(char *out, size_t n, const char *name, const char *ref,
                     const char *vref)
{
    char v[320] = "";
    if (vref)
        snprintf(v, sizeof v, "\"validation\": {\"dataset\": \"%s\"}, ", vref);
    snprintf(out, n,
             "{\"name\": \"%s\", \"dataset\": \"%s\", %s\"model\": "
             "{\"layers\": [{\"type\": \"dense\", \"units\": 3}]}, "
             "\"hyperparameters\": {\"epochs\": 2, \"batch_size\": 32}}",
             name, ref, v);
}

/* The problem's detail, or "". */
static const char *detail(const resp *r)
{
    const char *d = str(r->json, "detail");
    return d ? d : "";
}

/* ---- setup: tenants a and b; a trains a job by its dataset's name ---- */

static int group_setup(void **state)
{
    (void)state;
    temp_dir(files);
    make_blobs_csv(file_path("blobs.csv"), 300, 7);
    if (srv_start(&server, NULL, NULL) != 0)
        return -1;
    as_a = server;
    as_b = server;
    if (create_tenant("alpha", as_a.key) || create_tenant("beta", as_b.key))
        return -1;
    upload(&as_a, "names-train", a_ds);
    char b[1024];
    job_body(b, sizeof b, "names-job", a_ds, NULL);
    resp *r = post_as(&as_a, "/v1/jobs", b);
    if (r->status != 202) {
        fprintf(stderr, "submit: %ld %s\n", r->status, r->body);
        resp_free(r);
        return -1;
    }
    snprintf(a_job, sizeof a_job, "%s", str(r->json, "id"));
    resp_free(r);
    json_t *j = wait_job(&as_a, a_job, 120);
    if (!j || strcmp(str(j, "status"), "succeeded") != 0) {
        fprintf(stderr, "setup job did not succeed\n");
        json_decref(j);
        return -1;
    }
    snprintf(a_model, sizeof a_model, "%s", str(j, "model"));
    json_decref(j);
    char path[128];
    snprintf(path, sizeof path, "/v1/models/%s", a_model);
    r = http_do(&as_a, "GET", path, NULL, NULL, 0, NULL);
    int ok = r->status == 200 && str(r->json, "name");
    if (ok)
        snprintf(a_model_name, sizeof a_model_name, "%s", str(r->json, "name"));
    resp_free(r);
    return ok ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    int ws = srv_stop(&server, SIGTERM);
    srv_cleanup(&server);
    fs_remove_tree(files, NULL);
    return WIFEXITED(ws) && WEXITSTATUS(ws) == 0 ? 0 : -1;
}

/* ---- tests ---- */

/* A job names its dataset and validation dataset by name; what it
 * stores and shows are ids. */
static void test_job_by_dataset_name(void **state)
{
    (void)state;
    char b[1024];
    job_body(b, sizeof b, "by-name-job", "names-train", "names-train");
    resp *r = post_as(&as_a, "/v1/jobs", b);
    expect_status(r, 202);
    char id[64];
    snprintf(id, sizeof id, "%s", str(r->json, "id"));
    resp_free(r);
    json_t *j = wait_job(&as_a, id, 120);
    assert_non_null(j);
    assert_string_equal(str(j, "status"), "succeeded");
    assert_string_equal(str(j, "dataset"), a_ds);
    assert_string_equal(str(json_object_get(j, "validation"), "dataset"), a_ds);
    json_decref(j);
    /* A dry run answers with the id too. */
    job_body(b, sizeof b, "dry", "names-train", NULL);
    r = post_as(&as_a, "/v1/jobs?dry_run=true", b);
    expect_status(r, 200);
    assert_string_equal(str(r->json, "dataset"), a_ds);
    resp_free(r);
    /* A name nobody has: 422 naming the field, in words that say both. */
    job_body(b, sizeof b, "x", "no-such-data", NULL);
    r = post_as(&as_a, "/v1/jobs", b);
    expect_status(r, 422);
    assert_string_equal(str(r->json, "field"), "dataset");
    assert_string_equal(detail(r), "no dataset with id or name 'no-such-data'");
    resp_free(r);
    job_body(b, sizeof b, "x", "names-train", "no-such-data");
    r = post_as(&as_a, "/v1/jobs", b);
    expect_status(r, 422);
    assert_string_equal(str(r->json, "field"), "validation.dataset");
    resp_free(r);
}

/* Every /v1/jobs/{id} route takes the job's name. */
static void test_job_routes_by_name(void **state)
{
    (void)state;
    char id[64];
    id_at(&as_a, "/v1/jobs/names-job", id);
    assert_string_equal(id, a_job);
    resp *r = get_as(&as_a, "/v1/jobs/names-job/metrics", 200);
    assert_string_equal(str(r->json, "job"), a_job); /* the id, not the name */
    assert_int_equal(json_array_size(json_object_get(r->json, "epochs")), 2);
    resp_free(r);
    r = get_as(&as_a, "/v1/jobs/names-job/metrics?format=csv", 200);
    assert_non_null(strstr(r->body, "train_loss"));
    resp_free(r);
    r = get_as(&as_a, "/v1/jobs/names-job/curves", 200);
    resp_free(r);
    /* A finished job's stream replays its epochs and job.finished, then
     * ends. */
    r = get_as(&as_a, "/v1/jobs/names-job/events", 200);
    assert_non_null(strstr(r->body, "event: job.finished"));
    assert_non_null(strstr(r->body, a_job));
    resp_free(r);
    /* Cancelling it by name reaches it: finished, so 409, not 404. */
    r = post_as(&as_a, "/v1/jobs/names-job/cancel", NULL);
    expect_status(r, 409);
    resp_free(r);
    r = get_as(&as_a, "/v1/jobs/no-such-job", 404);
    assert_string_equal(detail(r), "no job with id or name 'no-such-job'");
    resp_free(r);
}

/* Show, evaluate (on a dataset by name), predict, download by the
 * model's name; the replies carry ids. */
static void test_model_by_name(void **state)
{
    (void)state;
    char path[512], id[64];
    snprintf(path, sizeof path, "/v1/models/%s", a_model_name);
    id_at(&as_a, path, id);
    assert_string_equal(id, a_model);
    snprintf(path, sizeof path, "/v1/models/%s/evaluate", a_model_name);
    resp *r = post_as(&as_a, path, "{\"dataset\": \"names-train\"}");
    expect_status(r, 200);
    assert_string_equal(str(r->json, "model"), a_model);
    assert_string_equal(str(r->json, "dataset"), a_ds);
    resp_free(r);
    /* The dataset of an evaluation that no one has: 422 on the field. */
    r = post_as(&as_a, path, "{\"dataset\": \"no-such-data\"}");
    expect_status(r, 422);
    assert_string_equal(str(r->json, "field"), "dataset");
    assert_string_equal(detail(r), "no dataset with id or name 'no-such-data'");
    resp_free(r);
    snprintf(path, sizeof path, "/v1/models/%s/predict", a_model_name);
    r = post_as(&as_a, path, "{\"inputs\": [[0, 5, 100, 0]]}");
    expect_status(r, 200);
    assert_string_equal(str(r->json, "model"), a_model);
    resp_free(r);
    snprintf(path, sizeof path, "/v1/models/%s/weights", a_model_name);
    r = get_as(&as_a, path, 200);
    assert_true(r->len > 8);
    resp_free(r);
    r = post_as(&as_a, "/v1/models/no-such-model/evaluate",
                "{\"dataset\": \"names-train\"}");
    expect_status(r, 404);
    assert_string_equal(detail(r), "no model with id or name 'no-such-model'");
    resp_free(r);
    r = get_as(&as_a, "/v1/datasets/names-train/examples?limit=2", 200);
    resp_free(r);
}

/* Two datasets of one name: the newest answers to the name, the older
 * to its id; deleting by name deletes the newest. */
static void test_newest_of_a_name_wins(void **state)
{
    (void)state;
    char old_id[64], new_id[64], id[64], path[128];
    upload(&as_a, "twin", old_id);
    upload(&as_a, "twin", new_id);
    assert_string_not_equal(old_id, new_id);
    id_at(&as_a, "/v1/datasets/twin", id);
    assert_string_equal(id, new_id);
    snprintf(path, sizeof path, "/v1/datasets/%s", old_id);
    id_at(&as_a, path, id);
    assert_string_equal(id, old_id);
    /* A job by the name trains on the newest. */
    char b[1024];
    job_body(b, sizeof b, "twin-job", "twin", NULL);
    resp *r = post_as(&as_a, "/v1/jobs?dry_run=true", b);
    expect_status(r, 200);
    assert_string_equal(str(r->json, "dataset"), new_id);
    resp_free(r);
    r = http_do(&as_a, "DELETE", "/v1/datasets/twin", NULL, NULL, 0, NULL);
    expect_status(r, 204);
    resp_free(r);
    id_at(&as_a, "/v1/datasets/twin", id);
    assert_string_equal(id, old_id);
    snprintf(path, sizeof path, "/v1/datasets/%s", new_id);
    resp_free(get_as(&as_a, path, 404));
}

/* Tenant b's names never reach b's resources from a, and a's from b: the
 * answer is the one for a name nobody has, with no id in it; a's own
 * resource of the same name answers a, whoever made theirs last. */
static void test_other_tenants_names(void **state)
{
    (void)state;
    char b_ds[64], a_same[64], b_same[64], id[64], path[512];
    upload(&as_b, "b-only", b_ds);
    upload(&as_a, "shared-name", a_same);
    upload(&as_b, "shared-name", b_same); /* newer than a's */
    id_at(&as_a, "/v1/datasets/shared-name", id);
    assert_string_equal(id, a_same);
    id_at(&as_b, "/v1/datasets/shared-name", id);
    assert_string_equal(id, b_same);

    resp *r = get_as(&as_a, "/v1/datasets/b-only", 404);
    resp *n = get_as(&as_a, "/v1/datasets/never-named", 404);
    char got[600], want[600];
    snprintf(got, sizeof got, "%s", detail(r));
    snprintf(want, sizeof want, "%s", detail(n));
    assert_null(strstr(r->body, b_ds));
    assert_string_equal(got, "no dataset with id or name 'b-only'");
    assert_string_equal(want, "no dataset with id or name 'never-named'");
    resp_free(r);
    resp_free(n);
    r = http_do(&as_a, "DELETE", "/v1/datasets/b-only", NULL, NULL, 0, NULL);
    expect_status(r, 404);
    resp_free(r);
    id_at(&as_b, "/v1/datasets/b-only", id); /* still there */
    assert_string_equal(id, b_ds);

    /* In a job's body: 422 on the field, b's id nowhere. */
    char b[1024];
    job_body(b, sizeof b, "x", "b-only", NULL);
    r = post_as(&as_a, "/v1/jobs", b);
    expect_status(r, 422);
    assert_string_equal(str(r->json, "field"), "dataset");
    assert_null(strstr(r->body, b_ds));
    resp_free(r);

    /* a's job, model and dataset by name from b: 404 (422 for a body's
     * field), as for names nobody has. */
    const char *paths[] = {"/v1/jobs/names-job", "/v1/jobs/names-job/metrics",
                           "/v1/jobs/names-job/events",
                           "/v1/datasets/names-train",
                           "/v1/datasets/names-train/examples"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        r = get_as(&as_b, paths[i], 404);
        assert_null(strstr(r->body, a_job));
        assert_null(strstr(r->body, a_ds));
        resp_free(r);
    }
    r = post_as(&as_b, "/v1/jobs/names-job/cancel", NULL);
    expect_status(r, 404);
    resp_free(r);
    snprintf(path, sizeof path, "/v1/models/%s", a_model_name);
    r = get_as(&as_b, path, 404);
    assert_null(strstr(r->body, a_model));
    resp_free(r);
    snprintf(path, sizeof path, "/v1/models/%s/evaluate", a_model_name);
    r = post_as(&as_b, path, "{\"dataset\": \"b-only\"}");
    expect_status(r, 404);
    assert_null(strstr(r->body, a_model));
    resp_free(r);
    snprintf(path, sizeof path, "/v1/models/%s/predict", a_model_name);
    r = post_as(&as_b, path, "{\"inputs\": [[0, 5, 100, 0]]}");
    expect_status(r, 404);
    assert_null(strstr(r->body, a_model));
    resp_free(r);
    snprintf(path, sizeof path, "/v1/models/%s/weights", a_model_name);
    resp_free(get_as(&as_b, path, 404));
    snprintf(b, sizeof b,
             "{\"name\": \"steal\", \"model\": \"%s\", \"replicas\": "
             "{\"min\": 0}}",
             a_model_name);
    r = post_as(&as_b, "/v1/deployments", b);
    expect_status(r, 422);
    assert_string_equal(str(r->json, "field"), "model");
    assert_null(strstr(r->body, a_model));
    resp_free(r);
}

/* A name may look like an id. A real id of the caller's still wins over
 * a name; another tenant's id used as a's name means a's dataset; an
 * id-shaped name nobody's id has resolves as a name. */
static void test_names_shaped_like_ids(void **state)
{
    (void)state;
    char b_ds[64], a_named[64], a_first[64], a_second[64], id[64];
    char path[128];
    upload(&as_b, "b-data", b_ds);
    /* a names a dataset after b's id */
    upload(&as_a, b_ds, a_named);
    snprintf(path, sizeof path, "/v1/datasets/%s", b_ds);
    id_at(&as_a, path, id);
    assert_string_equal(id, a_named);
    id_at(&as_b, path, id);
    assert_string_equal(id, b_ds);
    /* a names a dataset after its own dataset's id: the id wins */
    upload(&as_a, "first", a_first);
    upload(&as_a, a_first, a_second);
    snprintf(path, sizeof path, "/v1/datasets/%s", a_first);
    id_at(&as_a, path, id);
    assert_string_equal(id, a_first);
    /* an id-shaped name that is nobody's id */
    upload(&as_a, "ds_zzzzzzzzzzzzzzzzzzzz", a_second);
    id_at(&as_a, "/v1/datasets/ds_zzzzzzzzzzzzzzzzzzzz", id);
    assert_string_equal(id, a_second);
    resp_free(get_as(&as_b, "/v1/datasets/ds_zzzzzzzzzzzzzzzzzzzz", 404));
}

/* A name with a space, percent-encoded in the path. */
static void test_name_with_a_space(void **state)
{
    (void)state;
    char ds[64], id[64];
    upload(&as_a, "spaced name", ds);
    id_at(&as_a, "/v1/datasets/spaced%20name", id);
    assert_string_equal(id, ds);
}

/* A deployment of a model named by its name serves predicts that name
 * the model, and the model cannot be deleted by name while it serves. */
static void test_deployment_by_model_name(void **state)
{
    (void)state;
    char b[600], path[512], dep[64];
    snprintf(b, sizeof b,
             "{\"name\": \"names-dep\", \"model\": \"%s\", \"replicas\": "
             "{\"min\": 0, \"max\": 1}}",
             a_model_name);
    resp *r = post_as(&as_a, "/v1/deployments", b);
    expect_status(r, 201);
    snprintf(dep, sizeof dep, "%s", str(r->json, "id"));
    assert_string_equal(str(r->json, "model"), a_model);
    resp_free(r);
    /* Scaled from zero by a predict that names the model. */
    snprintf(path, sizeof path, "/v1/models/%s/predict", a_model_name);
    r = post_as(&as_a, path, "{\"inputs\": [[0, 5, 100, 0]]}");
    expect_status(r, 200);
    assert_string_equal(str(r->json, "model"), a_model);
    /* a replica of the deployment answered (it names the deployment) */
    assert_non_null(str(r->json, "deployment"));
    resp_free(r);
    snprintf(path, sizeof path, "/v1/models/%s", a_model_name);
    r = http_do(&as_a, "DELETE", path, NULL, NULL, 0, NULL);
    expect_status(r, 409);
    resp_free(r);
    r = http_do(&as_a, "DELETE", "/v1/deployments/names-dep", NULL, NULL, 0,
                NULL);
    expect_status(r, 202);
    resp_free(r);
}

/* ---- the command-line client ---- */

/* Runs `trainyard <args>` (a shell-quoted tail) as tenant a with --json;
 * its exit status, and stdout parsed into *out (NULL when not JSON). */
static int cli(const char *args, json_t **out)
{
    char cmd[2048], home[PATH_MAX + 8];
    snprintf(home, sizeof home, "%s/home", files);
    snprintf(cmd, sizeof cmd,
             "env -u TRAINYARD_URL -u TRAINYARD_KEY HOME='%s' "
             "XDG_CONFIG_HOME='%s' TRAINYARD_URL='%s' TRAINYARD_KEY='%s' "
             "'%s' %s --json 2>&1",
             home, home, as_a.base, as_a.key, getenv("TRAINYARD_BIN"), args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, p)) > 0) {
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        memcpy(buf + len, chunk, n);
        len += n;
    }
    int ws = pclose(p);
    if (buf)
        buf[len] = '\0';
    *out = buf ? json_loads(buf, JSON_DECODE_ANY, NULL) : NULL;
    int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
    if (code != 0)
        fprintf(stderr, "trainyard %s: exit %d: %s\n", args, code,
                buf ? buf : "");
    free(buf);
    return code;
}

static void test_cli_by_name(void **state)
{
    (void)state;
    json_t *o = NULL;
    assert_int_equal(cli("datasets show names-train", &o), 0);
    assert_string_equal(str(o, "id"), a_ds);
    json_decref(o);
    assert_int_equal(cli("jobs show names-job", &o), 0);
    assert_string_equal(str(o, "id"), a_job);
    json_decref(o);
    char args[600];
    snprintf(args, sizeof args, "models show '%s'", a_model_name);
    assert_int_equal(cli(args, &o), 0);
    assert_string_equal(str(o, "id"), a_model);
    json_decref(o);
    snprintf(args, sizeof args, "models evaluate '%s' --dataset names-train",
             a_model_name);
    assert_int_equal(cli(args, &o), 0);
    assert_string_equal(str(o, "model"), a_model);
    assert_string_equal(str(o, "dataset"), a_ds);
    json_decref(o);
    /* A name longer than an id, with characters that need escaping. */
    char ds[64];
    upload(&as_a, "a name with: odd? characters & more, longer than any id",
           ds);
    assert_int_equal(
        cli("datasets show 'a name with: odd? characters & more, longer than "
            "any id'",
            &o),
        0);
    assert_string_equal(str(o, "id"), ds);
    json_decref(o);
    /* A watch by name follows the job's id: it ends with its outcome. */
    assert_int_equal(cli("jobs watch names-job", &o), 0);
    json_decref(o); /* one JSON line an event: not one document */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_job_by_dataset_name),
        cmocka_unit_test(test_job_routes_by_name),
        cmocka_unit_test(test_model_by_name),
        cmocka_unit_test(test_newest_of_a_name_wins),
        cmocka_unit_test(test_other_tenants_names),
        cmocka_unit_test(test_names_shaped_like_ids),
        cmocka_unit_test(test_name_with_a_space),
        cmocka_unit_test(test_deployment_by_model_name),
        cmocka_unit_test(test_cli_by_name),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
