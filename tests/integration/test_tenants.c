/*
 * Integration tests for tenants: the admin endpoints and keys (creation,
 * revocation that takes effect at once, admin-only answers), isolation (every
 * route tried with another tenant's key on a dataset, job and model: 404 for
 * resources named in the path, the same answer as for an id that never
 * existed for ids named in a body), validation errors, the storage quota
 * (a refused upload leaves nothing behind), and the serving limits stored,
 * shown, patched one at a time and refused when out of range.
 *
 * The isolation table is checked against the routing table itself: a new
 * route with a path parameter fails test_every_route_is_in_the_table until
 * it gets a row here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api/api.h"
#include "common/fsutil.h"
#include "common/rng.h"
#include "harness.h"

static srv server;     /* its key is the admin's */
static srv as_a, as_b; /* the same server, with tenant a's or b's key */
static char files[PATH_MAX];
static char tenant_a[64], tenant_b[64];
static char a_ds[64], a_job[64], a_model[64], a_dep[64];
static char
    a_busy[64]; /* a long job of a's, queued or running during the table */

/* ---- helpers ---- */

static char *file_path(const char *name)
{
    static char p[4][PATH_MAX];
    static int next;
    char *out = p[next++ % 4];
    snprintf(out, PATH_MAX, "%s/%s", files, name);
    return out;
}

/* POST /v1/tenants as the admin; fills id and the first key. */
static void create_tenant(const char *body, char id[64], char key[128])
{
    resp *r = http_json(&server, "POST", "/v1/tenants", body);
    expect_status(r, 201);
    snprintf(id, 64, "%s", str(r->json, "id"));
    json_t *k = json_object_get(r->json, "key");
    snprintf(key, 128, "%s", str(k, "api_key"));
    assert_true(strncmp(id, "tn_", 3) == 0);
    assert_true(strncmp(key, "ty_", 3) == 0);
    assert_string_equal(str(k, "tenant"), id);
    resp_free(r);
}

static void upload_csv(const srv *s, const char *name, char id[64])
{
    char part[PATH_MAX + 8], nm[128];
    snprintf(part, sizeof part, "file=@%s", file_path("blobs.csv"));
    snprintf(nm, sizeof nm, "name=%s", name);
    const char *parts[] = {nm, "format=csv", "label_column=species", part,
                           NULL};
    resp *r = http_upload(s, "/v1/datasets", parts);
    expect_status(r, 201);
    snprintf(id, 64, "%s", str(r->json, "id"));
    resp_free(r);
}

static int list_has(const srv *s, const char *path, const char *id)
{
    resp *r = http_get(s, path);
    expect_status(r, 200);
    int found = 0;
    size_t i;
    json_t *it;
    json_array_foreach (json_object_get(r->json, "items"), i, it)
        found |= !strcmp(str(it, "id"), id);
    resp_free(r);
    return found;
}

static size_t list_count(const srv *s, const char *path)
{
    resp *r = http_get(s, path);
    expect_status(r, 200);
    size_t n = json_array_size(json_object_get(r->json, "items"));
    resp_free(r);
    return n;
}

static size_t count_files(const char *dir)
{
    DIR *d = opendir(dir);
    size_t n = 0;
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char sub[PATH_MAX];
        snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
        DIR *inner = opendir(sub);
        if (inner) {
            closedir(inner);
            n += count_files(sub);
        } else {
            n++;
        }
    }
    closedir(d);
    return n;
}

/* ---- setup: tenants a and b; a has a dataset, a finished job, a model ---- */

static int group_setup(void **state)
{
    (void)state;
    temp_dir(files);
    make_blobs_csv(file_path("blobs.csv"), 300, 7);
    /* The fetch-by-URL test's files are served on loopback. */
    const char *flags[] = {"--fetch-allow-networks", "127.0.0.1/32", NULL};
    if (srv_start(&server, NULL, flags) != 0)
        return -1;
    as_a = server;
    as_b = server;
    create_tenant("{\"name\": \"alpha\"}", tenant_a, as_a.key);
    create_tenant("{\"name\": \"beta\", \"weight\": 2}", tenant_b, as_b.key);

    upload_csv(&as_a, "a-data", a_ds);
    char b[512];
    snprintf(b, sizeof b,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"dense\", \"units\": 3}]}, \"hyperparameters\": {\"epochs\": 2, "
             "\"batch_size\": 32}}",
             a_ds);
    resp *r = http_json(&as_a, "POST", "/v1/jobs", b);
    expect_status(r, 202);
    snprintf(a_job, sizeof a_job, "%s", str(r->json, "id"));
    resp_free(r);
    json_t *j = wait_job(&as_a, a_job, 120);
    if (!j || strcmp(str(j, "status"), "succeeded") != 0) {
        fprintf(stderr, "setup job did not succeed\n");
        return -1;
    }
    snprintf(a_model, sizeof a_model, "%s", str(j, "model"));
    json_decref(j);
    /* A deployment of a's model, scaled to zero: nothing runs for it. */
    snprintf(b, sizeof b,
             "{\"name\": \"a-dep\", \"model\": \"%s\", \"replicas\": "
             "{\"min\": 0, \"max\": 1}}",
             a_model);
    r = http_json(&as_a, "POST", "/v1/deployments", b);
    if (r->status != 201) {
        fprintf(stderr, "setup deployment: %ld %s\n", r->status, r->body);
        resp_free(r);
        return -1;
    }
    snprintf(a_dep, sizeof a_dep, "%s", str(r->json, "id"));
    resp_free(r);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    int ws = srv_stop(&server, SIGTERM);
    srv_cleanup(&server);
    fs_remove_tree(files, NULL);
    return WIFEXITED(ws) && WEXITSTATUS(ws) == 0 ? 0 : -1;
}

/* ---- isolation: every route with another tenant's key ---- */

/* One way to name another tenant's resource. path and body may hold {ds},
 * {job}, {busy}, {model}, {tenant} and {dep} (a deployment); status is
 * what the wrong tenant gets (404 for a resource in the path; for an id in
 * a body, the 422 naming field that an id that never existed gets).
 * pattern is the route it exercises. */
typedef struct {
    const char *method;
    const char *pattern;
    const char *path;
    const char *body;
    long status;
    const char *field;
} iso_case;

static const iso_case iso_cases[] = {
    {"GET", "/v1/datasets/{id}", "/v1/datasets/{ds}", NULL, 404, NULL},
    {"DELETE", "/v1/datasets/{id}", "/v1/datasets/{ds}", NULL, 404, NULL},
    {"GET", "/v1/jobs/{id}", "/v1/jobs/{job}", NULL, 404, NULL},
    {"GET", "/v1/jobs/{id}/metrics", "/v1/jobs/{job}/metrics", NULL, 404, NULL},
    {"GET", "/v1/jobs/{id}/curves", "/v1/jobs/{job}/curves", NULL, 404, NULL},
    {"POST", "/v1/jobs/{id}/cancel", "/v1/jobs/{job}/cancel", NULL, 404, NULL},
    {"POST", "/v1/jobs/{id}/cancel", "/v1/jobs/{busy}/cancel", NULL, 404, NULL},
    {"GET", "/v1/jobs/{id}", "/v1/jobs/{busy}", NULL, 404, NULL},
    {"POST", "/v1/jobs", "/v1/jobs",
     "{\"dataset\": \"{ds}\", \"model\": {\"layers\": [{\"type\": \"dense\", "
     "\"units\": 3}]}}",
     422, "dataset"},
    {"GET", "/v1/models/{id}", "/v1/models/{model}", NULL, 404, NULL},
    {"DELETE", "/v1/models/{id}", "/v1/models/{model}", NULL, 404, NULL},
    {"GET", "/v1/models/{id}/weights", "/v1/models/{model}/weights", NULL, 404,
     NULL},
    {"POST", "/v1/models/{id}/predict", "/v1/models/{model}/predict",
     "{\"inputs\": [[0, 5, 100, 0]]}", 404, NULL},
    {"POST", "/v1/models/{id}/evaluate", "/v1/models/{model}/evaluate",
     "{\"dataset\": \"{ds}\"}", 404, NULL},
    {"POST", "/v1/models/{id}/transform", "/v1/models/{model}/transform",
     "{\"inputs\": [[0, 5, 100, 0]]}", 404, NULL},
    {"POST", "/v1/models/{id}/tokenize", "/v1/models/{model}/tokenize",
     "{\"content\": \"x\"}", 404, NULL},
    {"POST", "/v1/models/{id}/detokenize", "/v1/models/{model}/detokenize",
     "{\"tokens\": [1]}", 404, NULL},
    {"GET", "/v2/models/{name}", "/v2/models/{model}", NULL, 404, NULL},
    {"GET", "/v2/models/{name}/ready", "/v2/models/{model}/ready", NULL, 404,
     NULL},
    {"POST", "/v2/models/{name}/infer", "/v2/models/{model}/infer",
     "{\"inputs\": [{\"name\": \"input\", \"shape\": [1, 4], \"datatype\": "
     "\"FP32\", \"data\": [0, 5, 100, 0]}]}",
     404, NULL},
    {"POST", "/v2/models/{name}/generate", "/v2/models/{model}/generate",
     "{\"text_input\": \"x\"}", 404, NULL},
    {"POST", "/openai/v1/completions", "/openai/v1/completions",
     "{\"model\": \"{model}\", \"prompt\": \"x\"}", 404, NULL},
    {"POST", "/v2/models/{name}/generate_stream",
     "/v2/models/{model}/generate_stream", "{\"text_input\": \"x\"}", 404,
     NULL},
    {"GET", "/v2/models/{name}/versions/{version}",
     "/v2/models/{model}/versions/1", NULL, 404, NULL},
    {"GET", "/v2/models/{name}/versions/{version}/ready",
     "/v2/models/{model}/versions/1/ready", NULL, 404, NULL},
    {"POST", "/v2/models/{name}/versions/{version}/infer",
     "/v2/models/{model}/versions/1/infer",
     "{\"inputs\": [{\"name\": \"input\", \"shape\": [1, 4], \"datatype\": "
     "\"FP32\", \"data\": [0, 5, 100, 0]}]}",
     404, NULL},
    {"GET", "/v2/models/{name}/config", "/v2/models/{model}/config", NULL, 404,
     NULL},
    {"GET", "/v2/models/{name}/versions/{version}/config",
     "/v2/models/{model}/versions/1/config", NULL, 404, NULL},
    {"GET", "/v2/models/{name}/stats", "/v2/models/{model}/stats", NULL, 404,
     NULL},
    {"GET", "/v2/models/{name}/versions/{version}/stats",
     "/v2/models/{model}/versions/1/stats", NULL, 404, NULL},
    {"POST", "/v2/repository/models/{name}/load",
     "/v2/repository/models/{model}/load", NULL, 404, NULL},
    {"GET", "/v1/tenants/{id}", "/v1/tenants/{tenant}", NULL, 404, NULL},
    {"GET", "/v1/jobs/{id}/events", "/v1/jobs/{job}/events", NULL, 404, NULL},
    {"GET", "/v1/datasets/{id}/examples", "/v1/datasets/{ds}/examples", NULL,
     404, NULL},
    {"GET", "/v1/deployments/{id}", "/v1/deployments/{dep}", NULL, 404, NULL},
    {"PATCH", "/v1/deployments/{id}", "/v1/deployments/{dep}",
     "{\"replicas\": {\"max\": 2}}", 404, NULL},
    {"DELETE", "/v1/deployments/{id}", "/v1/deployments/{dep}", NULL, 404,
     NULL},
    {"POST", "/v1/deployments", "/v1/deployments",
     "{\"name\": \"iso\", \"model\": \"{model}\", \"replicas\": {\"min\": "
     "0}}",
     422, "model"},
};

/* Routes with a path parameter that name no tenant's dataset, job or model
 * (admin-only: a tenant key gets 403 for any id, checked in
 * test_admin_only; the dashboard's files: public, the same for everyone). */
static const char *const iso_exempt[][2] = {
    {"PATCH", "/v1/tenants/{id}"},
    {"POST", "/v1/tenants/{id}/keys"},
    {"GET", "/v1/tenants/{id}/keys"},
    {"DELETE", "/v1/tenants/{id}/keys/{key_id}"},
    {"GET", "/web/{file}"},
    /* The admin's alone: a tenant's key gets 403 (test_miglayout). */
    {"GET", "/v1/admin/mig-layout/{gpu}"},
    /* KServe v2 extensions not implemented: 400 whoever asks. */
    {"POST", "/v2/repository/models/{name}/unload"},
    {"GET", "/v2/models/{name}/trace/setting"},
    {"POST", "/v2/models/{name}/trace/setting"},
    {"GET", "/v2/systemsharedmemory/region/{region}/status"},
    {"POST", "/v2/systemsharedmemory/region/{region}/register"},
    {"POST", "/v2/systemsharedmemory/region/{region}/unregister"},
    {"GET", "/v2/cudasharedmemory/region/{region}/status"},
    {"POST", "/v2/cudasharedmemory/region/{region}/register"},
    {"POST", "/v2/cudasharedmemory/region/{region}/unregister"},
    /* The remote worker protocol: an attempt's token, never an API key
     * (tests/slurm checks the tokens; test_worker_routes_refuse_keys
     * here that a tenant's key opens nothing). */
    {"GET", "/v1/worker/jobs/{id}"},
    {"GET", "/v1/worker/jobs/{id}/blobs/{sha256}"},
    {"GET", "/v1/worker/jobs/{id}/checkpoint"},
    {"POST", "/v1/worker/jobs/{id}/checkpoint"},
    {"POST", "/v1/worker/jobs/{id}/model"},
    {"POST", "/v1/worker/jobs/{id}/log"},
    {"POST", "/v1/worker/jobs/{id}/events"},
};

/* The ids a case's {placeholders} stand for. */
typedef struct {
    const char *ds, *job, *busy, *model, *tenant, *dep;
} iso_ids;

static const iso_ids never = {
    "ds_aaaaaaaaaaaaaaaaaaaa",  "job_aaaaaaaaaaaaaaaaaaaa",
    "job_bbbbbbbbbbbbbbbbbbbb", "mdl_aaaaaaaaaaaaaaaaaaaa",
    "tn_aaaaaaaaaaaaaaaaaaaa",  "dep_aaaaaaaaaaaaaaaaaaaa"};

/* Replaces {ds}, {job}, {busy}, {model}, {tenant}, {dep} in t. */
static void fill(char *out, size_t n, const char *t, const iso_ids *ids)
{
    const char *names[] = {"{ds}",    "{job}",    "{busy}",
                           "{model}", "{tenant}", "{dep}"};
    const char *vals[] = {ids->ds,    ids->job,    ids->busy,
                          ids->model, ids->tenant, ids->dep};
    size_t o = 0;
    while (*t && o + 1 < n) {
        int hit = -1;
        for (int i = 0; i < 6 && hit < 0; i++)
            if (!strncmp(t, names[i], strlen(names[i])))
                hit = i;
        if (hit >= 0) {
            o += (size_t)snprintf(out + o, n - o, "%s", vals[hit]);
            t += strlen(names[hit]);
        } else {
            out[o++] = *t++;
        }
    }
    out[o < n ? o : n - 1] = '\0';
}

/* Removes every id of ids from text. */
static void strip_ids(char *text, const iso_ids *ids)
{
    const char *vals[] = {ids->ds,    ids->job,    ids->busy,
                          ids->model, ids->tenant, ids->dep};
    for (int i = 0; i < 6; i++) {
        size_t len = strlen(vals[i]);
        char *p;
        while ((p = strstr(text, vals[i])))
            memmove(p, p + len, strlen(p + len) + 1);
    }
}

static resp *run_case(const srv *s, const iso_case *c, const iso_ids *ids)
{
    char path[512], body[1024];
    fill(path, sizeof path, c->path, ids);
    if (!c->body)
        return http_do(s, c->method, path, NULL, NULL, 0, NULL);
    fill(body, sizeof body, c->body, ids);
    return http_do(s, c->method, path, "application/json", body, strlen(body),
                   NULL);
}

static void test_every_route_is_in_the_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < api_routes_count; i++) {
        const route *rt = &api_routes[i];
        if (!strchr(rt->pattern, '{'))
            continue;
        int covered = 0;
        for (size_t k = 0; k < TY_ARRAY_LEN(iso_cases); k++)
            covered |=
                !strcmp(iso_cases[k].pattern, rt->pattern) &&
                !strcmp(iso_cases[k].method, http_method_name(rt->method));
        for (size_t k = 0; k < TY_ARRAY_LEN(iso_exempt); k++)
            covered |=
                !strcmp(iso_exempt[k][0], http_method_name(rt->method)) &&
                !strcmp(iso_exempt[k][1], rt->pattern);
        if (!covered)
            fprintf(stderr, "route %s %s has no isolation case\n",
                    http_method_name(rt->method), rt->pattern);
        assert_true(covered);
    }
}

static int not_queued(const json_t *job)
{
    return strcmp(str(job, "status"), "queued") != 0;
}

static void test_other_tenant_gets_404(void **state)
{
    (void)state;
    /* A job that holds a's dataset while the table runs: deleting the
     * dataset or cancelling the job from b must not reveal it (409 would). */
    char b[512];
    snprintf(b, sizeof b,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"dense\", \"units\": 3}]}, \"hyperparameters\": {\"epochs\": "
             "100000, \"batch_size\": 1}}",
             a_ds);
    resp *r = http_json(&as_a, "POST", "/v1/jobs", b);
    expect_status(r, 202);
    snprintf(a_busy, sizeof a_busy, "%s", str(r->json, "id"));
    resp_free(r);
    json_t *busy = wait_job_until(&as_a, a_busy, 60, not_queued);
    assert_string_equal(str(busy, "status"), "running");
    json_decref(busy);
    const iso_ids mine = {a_ds, a_job, a_busy, a_model, tenant_a, a_dep};
    for (size_t k = 0; k < TY_ARRAY_LEN(iso_cases); k++) {
        const iso_case *c = &iso_cases[k];
        r = run_case(&as_b, c, &mine);
        if (r->status != c->status)
            fprintf(stderr, "%s %s as tenant b: expected %ld, got %ld %s\n",
                    c->method, c->path, c->status, r->status, r->body);
        assert_int_equal(r->status, c->status);
        assert_non_null(strstr(r->content_type, "problem+json"));
        const char *field = str(r->json, "field");
        if (c->field)
            assert_string_equal(field ? field : "", c->field);
        /* Indistinguishable from ids that never existed: the same status,
         * field and detail once the ids are taken out. */
        resp *n = run_case(&as_b, c, &never);
        assert_int_equal(n->status, r->status);
        const char *nf = str(n->json, "field");
        assert_string_equal(nf ? nf : "", field ? field : "");
        char got[1024], want[1024];
        snprintf(got, sizeof got, "%s", str(r->json, "detail"));
        snprintf(want, sizeof want, "%s", str(n->json, "detail"));
        strip_ids(got, &mine);
        strip_ids(want, &never);
        assert_string_equal(got, want);
        resp_free(n);
        resp_free(r);
    }
    /* The owner still has everything: the deletes and cancels did nothing,
     * and its model still predicts. */
    for (size_t k = 0; k < TY_ARRAY_LEN(iso_cases); k++) {
        const iso_case *c = &iso_cases[k];
        int predict = !strcmp(c->pattern, "/v1/models/{id}/predict");
        if (strcmp(c->method, "GET") != 0 && !predict)
            continue;
        r = run_case(&as_a, c, &mine);
        if (r->status != 200)
            fprintf(stderr, "%s %s as tenant a: %ld %s\n", c->method, c->path,
                    r->status, r->body);
        assert_int_equal(r->status, 200);
        resp_free(r);
    }
    /* b's cancel did not stop a's job; a's own does. */
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s", a_busy);
    r = http_get(&as_a, path);
    assert_string_equal(str(r->json, "status"), "running");
    resp_free(r);
    snprintf(path, sizeof path, "/v1/jobs/%s/cancel", a_busy);
    r = http_do(&as_a, "POST", path, NULL, NULL, 0, NULL);
    expect_status(r, 202);
    resp_free(r);
    busy = wait_job(&as_a, a_busy, 60);
    assert_string_equal(str(busy, "status"), "cancelled");
    json_decref(busy);
}

static void test_lists_are_per_tenant(void **state)
{
    (void)state;
    assert_true(list_has(&as_a, "/v1/datasets", a_ds));
    assert_true(list_has(&as_a, "/v1/jobs", a_job));
    assert_true(list_has(&as_a, "/v1/models", a_model));
    assert_int_equal(list_count(&as_b, "/v1/datasets"), 0);
    assert_int_equal(list_count(&as_b, "/v1/jobs"), 0);
    assert_int_equal(list_count(&as_b, "/v1/jobs?status=succeeded"), 0);
    assert_int_equal(list_count(&as_b, "/v1/models"), 0);
    assert_true(list_has(&as_a, "/v1/deployments", a_dep));
    assert_int_equal(list_count(&as_b, "/v1/deployments"), 0);
    /* The admin sees its own tenant's resources, not a's. */
    assert_false(list_has(&server, "/v1/datasets", a_ds));
    assert_false(list_has(&server, "/v1/jobs", a_job));
    assert_false(list_has(&server, "/v1/models", a_model));
    assert_false(list_has(&server, "/v1/deployments", a_dep));
    /* b's own dataset is b's alone. */
    char b_ds[64], path[128];
    upload_csv(&as_b, "b-data", b_ds);
    assert_true(list_has(&as_b, "/v1/datasets", b_ds));
    assert_false(list_has(&as_a, "/v1/datasets", b_ds));
    snprintf(path, sizeof path, "/v1/datasets/%s", b_ds);
    resp *r = http_do(&as_b, "DELETE", path, NULL, NULL, 0, NULL);
    expect_status(r, 204);
    resp_free(r);
}

/* ---- admin endpoints and keys ---- */

/* The worker endpoints take an attempt's token (node/wremote.h), and a
 * tenant's API key, or the admin's, opens none of them. */
static void test_worker_routes_refuse_keys(void **state)
{
    (void)state;
    static const struct {
        const char *method, *path, *body;
    } routes[] = {
        {"GET", "/v1/worker/jobs/job_aaaaaaaaaaaaaaaaaaaa", NULL},
        {"GET",
         "/v1/worker/jobs/job_aaaaaaaaaaaaaaaaaaaa/blobs/"
         "0000000000000000000000000000000000000000000000000000000000000000",
         NULL},
        {"GET", "/v1/worker/jobs/job_aaaaaaaaaaaaaaaaaaaa/checkpoint", NULL},
        {"POST", "/v1/worker/jobs/job_aaaaaaaaaaaaaaaaaaaa/events",
         "{\"lines\": [{\"event\": \"heartbeat\"}]}"},
    };
    const srv *who[] = {&as_a, &server};
    for (size_t k = 0; k < TY_ARRAY_LEN(who); k++)
        for (size_t i = 0; i < TY_ARRAY_LEN(routes); i++) {
            const char *b = routes[i].body;
            resp *r = http_do(who[k], routes[i].method, routes[i].path,
                              b ? "application/json" : NULL, b,
                              b ? strlen(b) : 0, NULL);
            if (r->status != 401)
                fprintf(stderr, "%s %s with an API key: %ld\n",
                        routes[i].method, routes[i].path, r->status);
            assert_int_equal(r->status, 401);
            resp_free(r);
        }
}

static void test_admin_only(void **state)
{
    (void)state;
    char path[128], keys[160];
    snprintf(path, sizeof path, "/v1/tenants/%s", tenant_a);
    snprintf(keys, sizeof keys, "/v1/tenants/%s/keys", tenant_a);
    struct {
        const char *method, *path, *body;
    } admin_routes[] = {
        {"POST", "/v1/tenants", "{\"name\": \"x\"}"},
        {"GET", "/v1/tenants", NULL},
        {"PATCH", path, "{\"weight\": 9}"},
        {"POST", keys, NULL},
        {"GET", keys, NULL},
        {"DELETE",
         "/v1/tenants/tn_aaaaaaaaaaaaaaaaaaaa/keys/key_aaaaaaaaaaaaaaaaaaaa",
         NULL},
    };
    for (size_t i = 0; i < TY_ARRAY_LEN(admin_routes); i++) {
        const char *b = admin_routes[i].body;
        resp *r =
            http_do(&as_a, admin_routes[i].method, admin_routes[i].path,
                    b ? "application/json" : NULL, b, b ? strlen(b) : 0, NULL);
        if (r->status != 403)
            fprintf(stderr, "%s %s as a tenant: %ld\n", admin_routes[i].method,
                    admin_routes[i].path, r->status);
        assert_int_equal(r->status, 403);
        resp_free(r);
    }
    /* Nothing changed. */
    resp *r = http_get(&server, path);
    expect_status(r, 200);
    assert_true(json_number_value(json_object_get(r->json, "weight")) == 1.0);
    resp_free(r);
    /* A tenant reads its own tenant (quota and usage). */
    r = http_get(&as_a, path);
    expect_status(r, 200);
    assert_string_equal(str(r->json, "name"), "alpha");
    assert_true(json_integer_value(json_object_get(
                    json_object_get(r->json, "usage"), "storage_bytes")) > 0);
    resp_free(r);
}

static void test_tenants_listed_and_patched(void **state)
{
    (void)state;
    resp *r = http_get(&server, "/v1/tenants");
    expect_status(r, 200);
    json_t *items = json_object_get(r->json, "items");
    assert_true(json_array_size(items) >= 3); /* admin, alpha, beta */
    int seen_admin = 0;
    size_t i;
    json_t *t;
    json_array_foreach (items, i, t) {
        if (json_is_true(json_object_get(t, "admin")))
            seen_admin++;
        assert_null(json_object_get(t, "key"));
    }
    assert_int_equal(seen_admin, 1);
    resp_free(r);

    char path[128];
    snprintf(path, sizeof path, "/v1/tenants/%s", tenant_b);
    r = http_json(&server, "PATCH", path,
                  "{\"weight\": 0.5, \"quota\": {\"max_gpu_slices\": 2, "
                  "\"max_running_jobs\": 1}}");
    expect_status(r, 200);
    assert_true(json_number_value(json_object_get(r->json, "weight")) == 0.5);
    json_t *q = json_object_get(r->json, "quota");
    assert_int_equal(json_integer_value(json_object_get(q, "max_gpu_slices")),
                     2);
    assert_int_equal(json_integer_value(json_object_get(q, "max_running_jobs")),
                     1);
    assert_true(json_is_null(json_object_get(q, "max_storage_bytes")));
    resp_free(r);
    /* Only what is named changes; null sets unlimited. */
    r = http_json(
        &server, "PATCH", path,
        "{\"name\": \"beta2\", \"quota\": {\"max_gpu_slices\": null}}");
    expect_status(r, 200);
    assert_string_equal(str(r->json, "name"), "beta2");
    assert_true(json_number_value(json_object_get(r->json, "weight")) == 0.5);
    q = json_object_get(r->json, "quota");
    assert_true(json_is_null(json_object_get(q, "max_gpu_slices")));
    assert_int_equal(json_integer_value(json_object_get(q, "max_running_jobs")),
                     1);
    resp_free(r);
    r = http_json(&server, "PATCH", "/v1/tenants/tn_aaaaaaaaaaaaaaaaaaaa",
                  "{\"weight\": 2}");
    expect_status(r, 404);
    resp_free(r);
    /* Survives a restart of nothing: it is stored (read back). */
    r = http_get(&server, path);
    assert_string_equal(str(r->json, "name"), "beta2");
    resp_free(r);
}

static void expect_422(const char *method, const char *path, const char *body,
                       const char *field)
{
    resp *r = http_json(&server, method, path, body);
    const char *f = r->json ? str(r->json, "field") : NULL;
    if (r->status != 422 || !f || strcmp(f, field) != 0)
        fprintf(stderr, "%s %s: expected 422 on %s, got %ld %s\n", method, body,
                field, r->status, r->body);
    assert_int_equal(r->status, 422);
    assert_string_equal(f, field);
    resp_free(r);
}

static void test_validation_errors(void **state)
{
    (void)state;
    expect_422("POST", "/v1/tenants", "{}", "name");
    expect_422("POST", "/v1/tenants", "{\"name\": \"has space\"}", "name");
    expect_422("POST", "/v1/tenants", "{\"name\": \"w\", \"weight\": 0}",
               "weight");
    expect_422("POST", "/v1/tenants", "{\"name\": \"w\", \"weight\": -2}",
               "weight");
    expect_422("POST", "/v1/tenants",
               "{\"name\": \"w\", \"weight\": \"heavy\"}", "weight");
    expect_422("POST", "/v1/tenants",
               "{\"name\": \"w\", \"quota\": {\"max_storage_bytes\": -1}}",
               "quota.max_storage_bytes");
    expect_422("POST", "/v1/tenants",
               "{\"name\": \"w\", \"quota\": {\"max_running_jobs\": -3}}",
               "quota.max_running_jobs");
    expect_422("POST", "/v1/tenants",
               "{\"name\": \"w\", \"quota\": {\"max_gpus\": 1}}",
               "quota.max_gpus");
    expect_422("POST", "/v1/tenants", "{\"name\": \"w\", \"colour\": \"red\"}",
               "colour");
    char path[128];
    snprintf(path, sizeof path, "/v1/tenants/%s", tenant_a);
    expect_422("PATCH", path, "{\"weight\": 0}", "weight");
    expect_422("PATCH", path, "{\"quota\": {\"max_gpu_slices\": -1}}",
               "quota.max_gpu_slices");
    /* None of those created a tenant named w. */
    resp *r = http_get(&server, "/v1/tenants?limit=1000");
    size_t i;
    json_t *t;
    json_array_foreach (json_object_get(r->json, "items"), i, t)
        assert_string_not_equal(str(t, "name"), "w");
    resp_free(r);
    /* A taken name is a conflict. */
    r = http_json(&server, "POST", "/v1/tenants", "{\"name\": \"alpha\"}");
    expect_status(r, 409);
    assert_string_equal(str(r->json, "field"), "name");
    resp_free(r);
    /* Keys of a tenant that does not exist. */
    r = http_do(&server, "POST", "/v1/tenants/tn_aaaaaaaaaaaaaaaaaaaa/keys",
                NULL, NULL, 0, NULL);
    expect_status(r, 404);
    resp_free(r);
}

static void test_keys_and_revocation(void **state)
{
    (void)state;
    char keys[160], del[256], second[128], key_id[64];
    snprintf(keys, sizeof keys, "/v1/tenants/%s/keys", tenant_a);
    resp *r = http_do(&server, "POST", keys, NULL, NULL, 0, NULL);
    expect_status(r, 201);
    snprintf(second, sizeof second, "%s", str(r->json, "api_key"));
    snprintf(key_id, sizeof key_id, "%s", str(r->json, "id"));
    assert_true(json_is_false(json_object_get(r->json, "admin")));
    resp_free(r);

    srv as_a2 = server;
    snprintf(as_a2.key, sizeof as_a2.key, "%s", second);
    assert_true(list_has(&as_a2, "/v1/datasets", a_ds));

    /* Listed without secrets. */
    r = http_get(&server, keys);
    expect_status(r, 200);
    assert_int_equal(json_array_size(json_object_get(r->json, "items")), 2);
    assert_null(strstr(r->body, second));
    assert_null(strstr(r->body, as_a.key));
    assert_null(strstr(r->body, "api_key"));
    assert_null(strstr(r->body, "hash"));
    resp_free(r);

    /* Revoked: the very next request is 401. */
    snprintf(del, sizeof del, "%s/%s", keys, key_id);
    r = http_do(&server, "DELETE", del, NULL, NULL, 0, NULL);
    expect_status(r, 204);
    resp_free(r);
    r = http_get(&as_a2, "/v1/datasets");
    expect_status(r, 401);
    resp_free(r);
    /* The tenant's other key still works; revoking again is fine. */
    assert_true(list_has(&as_a, "/v1/datasets", a_ds));
    r = http_do(&server, "DELETE", del, NULL, NULL, 0, NULL);
    expect_status(r, 204);
    resp_free(r);
    r = http_get(&server, keys);
    json_t *it;
    size_t i;
    int revoked = 0;
    json_array_foreach (json_object_get(r->json, "items"), i, it)
        if (!strcmp(str(it, "id"), key_id))
            revoked = str(it, "revoked_at") != NULL;
    assert_true(revoked);
    resp_free(r);

    /* Another tenant's key id under this tenant is 404. */
    snprintf(del, sizeof del, "/v1/tenants/%s/keys/%s", tenant_b, key_id);
    r = http_do(&server, "DELETE", del, NULL, NULL, 0, NULL);
    expect_status(r, 404);
    resp_free(r);

    /* The admin's last key cannot be revoked. */
    r = http_get(&server, "/v1/tenants");
    char admin_tenant[64] = "";
    json_array_foreach (json_object_get(r->json, "items"), i, it)
        if (json_is_true(json_object_get(it, "admin")))
            snprintf(admin_tenant, sizeof admin_tenant, "%s", str(it, "id"));
    resp_free(r);
    snprintf(keys, sizeof keys, "/v1/tenants/%s/keys", admin_tenant);
    r = http_get(&server, keys);
    snprintf(del, sizeof del, "%s/%s", keys,
             str(json_array_get(json_object_get(r->json, "items"), 0), "id"));
    resp_free(r);
    r = http_do(&server, "DELETE", del, NULL, NULL, 0, NULL);
    expect_status(r, 409);
    resp_free(r);
    r = http_get(&server, "/v1/tenants");
    expect_status(r, 200);
    resp_free(r);
}

/* ---- the storage quota ---- */

static enum MHD_Result serve_file(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *data,
                                  size_t *size, void **ptr)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s%s", files, url);
    int64_t len = strstr(url, "..") ? -1 : fs_file_size(path);
    struct MHD_Response *r;
    enum MHD_Result ret;
    if (len < 0) {
        r = MHD_create_response_from_buffer(9, "not found",
                                            MHD_RESPMEM_PERSISTENT);
        ret = MHD_queue_response(c, 404, r);
    } else {
        r = MHD_create_response_from_fd((uint64_t)len, open(path, 0));
        ret = MHD_queue_response(c, 200, r);
    }
    MHD_destroy_response(r);
    return ret;
}

static int64_t usage_of(const char *tenant)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/tenants/%s", tenant);
    resp *r = http_get(&server, path);
    expect_status(r, 200);
    int64_t n = json_integer_value(
        json_object_get(json_object_get(r->json, "usage"), "storage_bytes"));
    resp_free(r);
    return n;
}

static void expect_quota_413(resp *r, const char *quota_text)
{
    expect_status(r, 413);
    assert_non_null(strstr(r->content_type, "problem+json"));
    const char *d = str(r->json, "detail");
    assert_non_null(d);
    assert_non_null(strstr(d, "max_storage_bytes"));
    assert_non_null(strstr(d, quota_text));
    resp_free(r);
}

static void test_storage_quota(void **state)
{
    (void)state;
    char tenant[64], ds[64], blobs[PATH_MAX + 8], tmp[PATH_MAX + 8];
    srv as_c = server;
    create_tenant("{\"name\": \"gamma\", \"quota\": {\"max_storage_bytes\": "
                  "1000000}}",
                  tenant, as_c.key);
    upload_csv(&as_c, "first", ds);
    int64_t used = usage_of(tenant);
    assert_true(used > 0);
    char patch[256], path[128];
    snprintf(path, sizeof path, "/v1/tenants/%s", tenant);
    /* Room for less than one more copy. */
    int64_t quota = used + used / 2;
    snprintf(patch, sizeof patch, "{\"quota\": {\"max_storage_bytes\": %lld}}",
             (long long)quota);
    resp *r = http_json(&server, "PATCH", path, patch);
    expect_status(r, 200);
    resp_free(r);
    char quota_text[32], used_text[32];
    snprintf(quota_text, sizeof quota_text, "%lld", (long long)quota);
    snprintf(used_text, sizeof used_text, "%lld", (long long)used);

    snprintf(blobs, sizeof blobs, "%s/blobs", server.data);
    snprintf(tmp, sizeof tmp, "%s/tmp", server.data);
    size_t blob_files = count_files(blobs);
    size_t ds_count = list_count(&as_c, "/v1/datasets");
    size_t model_count = list_count(&as_c, "/v1/models");

    /* A multipart upload: the same data, under another name. */
    char part[PATH_MAX + 8];
    snprintf(part, sizeof part, "file=@%s", file_path("blobs.csv"));
    const char *parts[] = {"name=second", "format=csv", "label_column=species",
                           part, NULL};
    r = http_upload(&as_c, "/v1/datasets", parts);
    const char *d = str(r->json, "detail");
    assert_non_null(d);
    assert_non_null(strstr(d, used_text));
    expect_quota_413(r, quota_text);

    /* A fetch by URL. */
    struct MHD_Daemon *daemon =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL,
                         serve_file, NULL, MHD_OPTION_END);
    assert_non_null(daemon);
    int port = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT)->port;
    char body[512];
    snprintf(
        body, sizeof body,
        "{\"name\": \"fetched\", \"format\": \"csv\", \"label_column\": "
        "\"species\", \"urls\": {\"file\": \"http://127.0.0.1:%d/blobs.csv\"}}",
        port);
    r = http_do(&as_c, "POST", "/v1/datasets", "application/json", body,
                strlen(body), NULL);
    expect_quota_413(r, quota_text);
    MHD_stop_daemon(daemon);

    /* A model import: a's model's weights, which are bigger than the room
     * left once the quota is tightened to the usage. */
    snprintf(patch, sizeof patch, "{\"quota\": {\"max_storage_bytes\": %lld}}",
             (long long)used);
    r = http_json(&server, "PATCH", path, patch);
    expect_status(r, 200);
    resp_free(r);
    snprintf(quota_text, sizeof quota_text, "%lld", (long long)used);
    char wpath[128];
    snprintf(wpath, sizeof wpath, "/v1/models/%s/weights", a_model);
    r = http_get(&as_a, wpath);
    expect_status(r, 200);
    write_file(file_path("w.safetensors"), r->body, r->len);
    resp_free(r);
    char wpart[PATH_MAX + 16];
    snprintf(wpart, sizeof wpart, "weights=@%s", file_path("w.safetensors"));
    const char *mparts[] = {wpart, "name=imp", NULL};
    r = http_upload(&as_c, "/v1/models", mparts);
    expect_quota_413(r, quota_text);

    /* Nothing was stored: lists, usage, blob files and temp files. */
    assert_int_equal(list_count(&as_c, "/v1/datasets"), ds_count);
    assert_int_equal(list_count(&as_c, "/v1/models"), model_count);
    assert_int_equal(usage_of(tenant), used);
    assert_int_equal(count_files(blobs), blob_files);
    assert_int_equal(count_files(tmp), 0);

    /* Unlimited again: the same uploads go through. */
    r = http_json(&server, "PATCH", path,
                  "{\"quota\": {\"max_storage_bytes\": null}}");
    expect_status(r, 200);
    resp_free(r);
    r = http_upload(&as_c, "/v1/models", mparts);
    expect_status(r, 201);
    resp_free(r);
    char ds2[64];
    upload_csv(&as_c, "second", ds2);
    assert_true(usage_of(tenant) > used);
    /* Other tenants' usage is their own. */
    assert_true(usage_of(tenant_b) == 0);
}

/* The quota's serving limits of a reply (a tenant), each checked against
 * the expected value: rps < 0, burst < 0 or concurrency < 0 = null. */
static void expect_serving(const json_t *tenant, double rps, long long burst,
                           long long concurrency)
{
    const json_t *q = json_object_get(tenant, "quota");
    const json_t *r = json_object_get(q, "serving_requests_per_second"),
                 *b = json_object_get(q, "serving_burst"),
                 *c = json_object_get(q, "serving_max_concurrency");
    /* Always present, null when unlimited. */
    assert_non_null(r);
    assert_non_null(b);
    assert_non_null(c);
    if (rps < 0)
        assert_true(json_is_null(r));
    else
        assert_true(json_is_number(r) && json_number_value(r) == rps);
    if (burst < 0)
        assert_true(json_is_null(b));
    else
        assert_int_equal(json_integer_value(b), burst);
    if (concurrency < 0)
        assert_true(json_is_null(c));
    else
        assert_int_equal(json_integer_value(c), concurrency);
}

static void test_serving_limits(void **state)
{
    (void)state;
    resp *r = http_json(&server, "POST", "/v1/tenants",
                        "{\"name\": \"delta\", \"quota\": "
                        "{\"max_running_jobs\": 3, "
                        "\"serving_requests_per_second\": 150.5, "
                        "\"serving_burst\": 300, "
                        "\"serving_max_concurrency\": 12}}");
    expect_status(r, 201);
    char id[64], key[128], path[128];
    snprintf(id, sizeof id, "%s", str(r->json, "id"));
    snprintf(key, sizeof key, "%s",
             str(json_object_get(r->json, "key"), "api_key"));
    expect_serving(r->json, 150.5, 300, 12);
    json_t *q = json_object_get(r->json, "quota");
    assert_int_equal(json_integer_value(json_object_get(q, "max_running_jobs")),
                     3);
    assert_true(json_is_null(json_object_get(q, "max_gpu_slices")));
    resp_free(r);
    snprintf(path, sizeof path, "/v1/tenants/%s", id);

    /* Read back by the admin and by the tenant itself. */
    r = http_get(&server, path);
    expect_status(r, 200);
    expect_serving(r->json, 150.5, 300, 12);
    resp_free(r);
    srv as_d = server;
    snprintf(as_d.key, sizeof as_d.key, "%s", key);
    r = http_get(&as_d, path);
    expect_status(r, 200);
    expect_serving(r->json, 150.5, 300, 12);
    resp_free(r);

    /* A tenant made without them has them, null. */
    snprintf(path, sizeof path, "/v1/tenants/%s", tenant_a);
    r = http_get(&server, path);
    expect_status(r, 200);
    expect_serving(r->json, -1, -1, -1);
    resp_free(r);

    /* PATCH one at a time: the others stay. */
    snprintf(path, sizeof path, "/v1/tenants/%s", id);
    r = http_json(&server, "PATCH", path,
                  "{\"quota\": {\"serving_burst\": 50}}");
    expect_status(r, 200);
    expect_serving(r->json, 150.5, 50, 12);
    resp_free(r);
    r = http_json(&server, "PATCH", path,
                  "{\"quota\": {\"serving_requests_per_second\": 20}}");
    expect_status(r, 200);
    expect_serving(r->json, 20, 50, 12);
    q = json_object_get(r->json, "quota");
    assert_int_equal(json_integer_value(json_object_get(q, "max_running_jobs")),
                     3);
    resp_free(r);
    /* null: unlimited (the burst: back to its default). */
    r = http_json(&server, "PATCH", path,
                  "{\"quota\": {\"serving_max_concurrency\": null, "
                  "\"serving_burst\": null}}");
    expect_status(r, 200);
    expect_serving(r->json, 20, -1, -1);
    resp_free(r);

    /* Out of range: 422 naming the field, nothing changed. */
    static const char *const bad[][2] = {
        {"\"serving_requests_per_second\": 0", "serving_requests_per_second"},
        {"\"serving_requests_per_second\": -5", "serving_requests_per_second"},
        {"\"serving_requests_per_second\": 2000000",
         "serving_requests_per_second"},
        {"\"serving_requests_per_second\": \"fast\"",
         "serving_requests_per_second"},
        {"\"serving_burst\": 0", "serving_burst"},
        {"\"serving_burst\": 1000001", "serving_burst"},
        {"\"serving_burst\": 1.5", "serving_burst"},
        {"\"serving_max_concurrency\": 0", "serving_max_concurrency"},
        {"\"serving_max_concurrency\": 100001", "serving_max_concurrency"},
        {"\"serving_max_concurrency\": \"8\"", "serving_max_concurrency"},
        {"\"serving_tokens_per_minute\": 0", "serving_tokens_per_minute"},
        {"\"serving_tokens_per_minute\": -1", "serving_tokens_per_minute"},
        {"\"serving_tokens_per_minute\": 1.5", "serving_tokens_per_minute"},
        {"\"serving_tokens_per_minute\": 1000000001",
         "serving_tokens_per_minute"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char body[192], field[64];
        snprintf(field, sizeof field, "quota.%s", bad[i][1]);
        snprintf(body, sizeof body, "{\"name\": \"epsilon\", \"quota\": {%s}}",
                 bad[i][0]);
        expect_422("POST", "/v1/tenants", body, field);
        /* A valid limit beside the bad one is not applied either. */
        snprintf(body, sizeof body, "{\"quota\": {\"max_gpu_slices\": 1, %s}}",
                 bad[i][0]);
        expect_422("PATCH", path, body, field);
    }
    r = http_get(&server, path);
    expect_status(r, 200);
    expect_serving(r->json, 20, -1, -1);
    assert_true(json_is_null(
        json_object_get(json_object_get(r->json, "quota"), "max_gpu_slices")));
    resp_free(r);
    /* No tenant named epsilon was made. */
    r = http_get(&server, "/v1/tenants?limit=1000");
    size_t i;
    json_t *t;
    json_array_foreach (json_object_get(r->json, "items"), i, t) {
        assert_string_not_equal(str(t, "name"), "epsilon");
        /* Every listed tenant shows the serving limits too. */
        assert_non_null(json_object_get(json_object_get(t, "quota"),
                                        "serving_max_concurrency"));
        assert_non_null(json_object_get(json_object_get(t, "quota"),
                                        "serving_tokens_per_minute"));
    }
    resp_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_route_is_in_the_table),
        cmocka_unit_test(test_other_tenant_gets_404),
        cmocka_unit_test(test_lists_are_per_tenant),
        cmocka_unit_test(test_admin_only),
        cmocka_unit_test(test_worker_routes_refuse_keys),
        cmocka_unit_test(test_tenants_listed_and_patched),
        cmocka_unit_test(test_validation_errors),
        cmocka_unit_test(test_keys_and_revocation),
        cmocka_unit_test(test_storage_quota),
        cmocka_unit_test(test_serving_limits),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
