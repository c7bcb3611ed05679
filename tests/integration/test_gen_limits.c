/*
 * Integration tests for the token limits of generations on deployed
 * language models (issue 32): a deployment's limits.tokens_per_minute and
 * a tenant's quota.serving_tokens_per_minute, on a small character GPT
 * trained here (test_generate.c's) and deployed on the CPU:
 *
 *   - a deployment's limit: a generation reserves its prompt and
 *     max_tokens; requests fit until the bucket is spent, then 429 with
 *     Retry-After and a sentence naming the limit and the request's need;
 *     one bigger than the whole limit is told to lower max_tokens;
 *   - the refund: a generation a stop string ends at once gives back what
 *     it did not use, so a request admitted next would not fit without it;
 *   - the tenant's quota bounds the generations of all its deployments
 *     together, and a predict (which reserves nothing) is unaffected;
 *   - bad values are 422s naming the field, and both limits show in the
 *     deployment's and the tenant's documents.
 *
 * No assertion depends on time: each limit refills at half a token a
 * second (30 a minute) or less, and each request that must be refused
 * needs tens of seconds' refill more than the bucket holds; where a slow
 * machine could have refilled enough, the check says so instead of
 * failing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/ty.h"
#include "harness.h"
#include "models/safetensors.h"

static srv server;
static char files[PATH_MAX];
static char model_id[64];
static char tenant_id[64]; /* the admin key's tenant */
/* The prompt every generation here sends, its tokens, and the model's
 * greedy text after it (in the server, with no limit). */
#define PROMPT "the cat "
static int prompt_n;
static char greedy[64];

/* Tokens a minute of every limit set here: half a token a second. */
#define TPM 30

/* ---- a client that keeps Retry-After (test_deploy.c's) ---- */

typedef struct {
    long status;
    char *body;
    size_t len;
    json_t *json;
    char retry_after[64];
} reply;

typedef struct {
    char *buf;
    size_t len;
} grow;

static size_t on_data(char *d, size_t size, size_t n, void *ctx)
{
    grow *g = ctx;
    size_t len = size * n;
    char *b = realloc(g->buf, g->len + len + 1);
    if (!b)
        return 0;
    memcpy(b + g->len, d, len);
    g->buf = b;
    g->len += len;
    b[g->len] = '\0';
    return len;
}

static size_t on_hdr(char *d, size_t size, size_t n, void *ctx)
{
    reply *r = ctx;
    size_t len = size * n;
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)(len < 511 ? len : 511), d);
    line[strcspn(line, "\r\n")] = '\0';
    if (!strncasecmp(line, "Retry-After:", 12))
        snprintf(r->retry_after, sizeof r->retry_after, "%s",
                 line + 12 + (line[12] == ' '));
    return len;
}

static reply *call(const char *method, const char *path, const char *body)
{
    reply *r = calloc(1, sizeof *r);
    assert_non_null(r);
    CURL *c = curl_easy_init();
    assert_non_null(c);
    char url[1024], auth[256];
    snprintf(url, sizeof url, "%s%s", server.base, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    struct curl_slist *h = NULL;
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", server.key);
    h = curl_slist_append(h, auth);
    h = curl_slist_append(h, "Expect:");
    if (body) {
        h = curl_slist_append(h, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    grow g = {0};
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &g);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_hdr);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 300L);
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    else
        r->status = -1;
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    r->body = g.buf ? g.buf : calloc(1, 1);
    r->len = g.len;
    r->json = json_loadb(r->body, r->len, 0, NULL);
    return r;
}

static void reply_free(reply *r)
{
    free(r->body);
    json_decref(r->json);
    free(r);
}

/* ---- setup: the model, its prompt's size and greedy text ---- */

static void write_story(const char *path, int n)
{
    static const char *subj[] = {"the cat", "a dog", "the old king",
                                 "my friend"};
    static const char *verb[] = {"sees", "loves", "finds", "calls"};
    static const char *obj[] = {"the moon", "a red apple", "the river",
                                "the castle"};
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    uint64_t s = 99;
    for (int i = 0; i < n; i++) {
        int k[3];
        for (int j = 0; j < 3; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            k[j] = (int)((s >> 33) % 4);
        }
        fprintf(f, "%s %s %s.\n", subj[k[0]], verb[k[1]], obj[k[2]]);
    }
    fclose(f);
}

/* A generation's body: PROMPT, greedy, max_tokens, a stop string (NULL:
 * none). */
static char *gen_body(int max_tokens, const char *stop)
{
    json_t *params =
        json_pack("{s:i, s:i}", "temperature", 0, "max_tokens", max_tokens);
    if (stop)
        json_object_set_new(params, "stop", json_pack("[s]", stop));
    json_t *b =
        json_pack("{s:s, s:o}", "text_input", PROMPT, "parameters", params);
    char *text = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return text;
}

/* POST /v2/models/{ref}/generate. */
static reply *generate(const char *ref, int max_tokens, const char *stop)
{
    char path[160];
    snprintf(path, sizeof path, "/v2/models/%s/generate", ref);
    char *body = gen_body(max_tokens, stop);
    reply *r = call("POST", path, body);
    free(body);
    return r;
}

static json_int_t int_of(const json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

static int setup(void **state)
{
    (void)state;
    if (srv_start(&server, NULL, NULL))
        return -1;
    temp_dir(files);
    char path[PATH_MAX], part[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/story.txt", files);
    write_story(path, 800);
    snprintf(part, sizeof part, "file=@%s", path);
    const char *parts[] = {"name=story", "format=text", part, NULL};
    resp *r = http_upload(&server, "/v1/datasets", parts);
    if (r->status != 201)
        return -1;
    resp_free(r);
    r = http_json(
        &server, "POST", "/v1/jobs",
        "{\"dataset\": \"story\", \"name\": \"story-gen\", \"model\": "
        "{\"layers\": [{\"type\": \"embedding\", \"dim\": 32},"
        " {\"type\": \"positional_embedding\"},"
        " {\"type\": \"transformer_block\", \"heads\": 4},"
        " {\"type\": \"layernorm\"}, {\"type\": \"lm_head\"}]},"
        " \"hyperparameters\": {\"context_length\": 32, \"batch_size\": 16,"
        " \"optimizer\": \"adamw\", \"learning_rate\": 0.005, \"epochs\": 5,"
        " \"max_steps\": 80, \"seed\": 2}}");
    if (r->status != 202)
        return -1;
    char job[64];
    snprintf(job, sizeof job, "%s", str(r->json, "id"));
    resp_free(r);
    json_t *j = wait_job(&server, job, 600);
    int ok = !strcmp(str(j, "status"), "succeeded");
    if (ok)
        snprintf(model_id, sizeof model_id, "%s", str(j, "model"));
    json_decref(j);
    if (!ok)
        return -1;
    /* in the server (no deployment yet, no limit): the prompt's size and
     * the greedy text */
    reply *g = generate(model_id, 8, NULL);
    ok = g->status == 200;
    if (ok) {
        prompt_n = (int)int_of(g->json, "prompt_tokens");
        snprintf(greedy, sizeof greedy, "%s", str(g->json, "text_output"));
    }
    reply_free(g);
    r = http_get(&server, "/v1/tenants");
    size_t i;
    json_t *it;
    json_array_foreach (json_object_get(r->json, "items"), i, it)
        if (json_is_true(json_object_get(it, "admin")))
            snprintf(tenant_id, sizeof tenant_id, "%s", str(it, "id"));
    resp_free(r);
    /* the arithmetic below needs a short prompt and a greedy text */
    return ok && prompt_n >= 1 && prompt_n <= 10 && greedy[0] && tenant_id[0]
               ? 0
               : -1;
}

static int teardown(void **state)
{
    (void)state;
    srv_stop(&server, SIGTERM);
    srv_cleanup(&server);
    return 0;
}

/* ---- helpers: deployments ---- */

/* Deploys model_id on the CPU as name with limits (a JSON object's text,
 * or NULL) and waits for it to be ready; its document (new reference). */
static json_t *deploy(const char *name, const char *model, const char *limits,
                      char id[64])
{
    char body[512];
    snprintf(
        body, sizeof body,
        "{\"name\": \"%s\", \"model\": \"%s\", \"replicas\": "
        "{\"min\": 1, \"max\": 1}, \"resources\": {\"gpu\": \"none\"}%s%s}",
        name, model, limits ? ", \"limits\": " : "", limits ? limits : "");
    resp *r = http_json(&server, "POST", "/v1/deployments", body);
    expect_status(r, 201);
    snprintf(id, 64, "%s", str(r->json, "id"));
    resp_free(r);
    char path[128];
    snprintf(path, sizeof path, "/v1/deployments/%s", id);
    const double until = now_seconds() + 60;
    for (;;) {
        r = http_get(&server, path);
        if (r->status == 200 && !strcmp(str(r->json, "status"), "ready")) {
            json_t *doc = json_incref(r->json);
            resp_free(r);
            return doc;
        }
        resp_free(r);
        if (now_seconds() > until)
            fail_msg("deployment %s not ready in 60 s (log: %s)", name,
                     server.log);
        usleep(100 * 1000);
    }
}

static void undeploy(const char *id)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/deployments/%s", id);
    resp *r = http_do(&server, "DELETE", path, NULL, NULL, 0, NULL);
    resp_free(r);
}

/* A 429 with a Retry-After of whole seconds in [lo, hi] whose detail holds
 * each of the NULL-terminated needles. */
static void expect_429(const reply *r, long lo, long hi, ...)
{
    if (r->status != 429)
        fail_msg("expected 429, got %ld: %s", r->status, r->body);
    char *end;
    long ra = strtol(r->retry_after, &end, 10);
    const char *detail = str(r->json, "detail");
    assert_non_null(detail);
    if (!r->retry_after[0] || *end || ra < lo || ra > hi)
        fail_msg("Retry-After \"%s\", expected %ld..%ld (%s)", r->retry_after,
                 lo, hi, detail);
    va_list ap;
    va_start(ap, hi);
    for (const char *n; (n = va_arg(ap, const char *));)
        if (!strstr(detail, n))
            fail_msg("the 429's detail \"%s\" lacks \"%s\"", detail, n);
    va_end(ap);
}

/* ---- the tests ---- */

/* A deployment of TPM tokens a minute: a first generation reserving all
 * but 2 of them is admitted, the next (needing more than 2 plus what
 * refills in the seconds between) is refused with the time until enough
 * is back; one needing more than TPM can never fit. */
static void test_deployment_limit(void **state)
{
    (void)state;
    char dep[64];
    json_t *doc =
        deploy("gl-dep", model_id, "{\"tokens_per_minute\": 30}", dep);
    /* the document shows the limit */
    assert_int_equal(
        int_of(json_object_get(doc, "limits"), "tokens_per_minute"), TPM);
    json_decref(doc);

    const int n = prompt_n;
    const int first = TPM - 2 - n; /* reserves TPM - 2 */
    double t0 = now_seconds();
    reply *r = generate("gl-dep", first, NULL);
    if (r->status != 200)
        fail_msg("the first generation: %ld %s", r->status, r->body);
    const int used = n + (int)int_of(r->json, "completion_tokens");
    reply_free(r);

    /* needs 20 (with a prompt of 8); the bucket holds 2 plus what the
     * generation left unused plus half a token a second since */
    const int second = 12;
    const int need = n + second;
    r = generate("gl-dep", second, NULL);
    const double elapsed = now_seconds() - t0;
    const double level = TPM - used + elapsed * TPM / 60.0;
    print_message("first used %d of %d; %.2f s later the bucket held at most "
                  "%.1f of the %d needed\n",
                  used, n + first, elapsed, level, need);
    if (level < need) {
        char needle[160];
        snprintf(needle, sizeof needle,
                 "deployment gl-dep is over its limit of %d tokens per "
                 "minute: this request needs %d (its prompt and "
                 "max_tokens); retry after",
                 TPM, need);
        /* the seconds until need is back: (need - level) * 2, at most
         * need * 2 */
        expect_429(r, 1, (long)ceil((need - (TPM - used)) * 60.0 / TPM) + 1,
                   needle, NULL);
    } else {
        print_message("the machine took %.0f s: refilled enough to admit\n",
                      elapsed);
    }
    reply_free(r);

    /* more than the whole limit: never fits, whatever the bucket holds */
    const int big = TPM + 1 - n;
    r = generate("gl-dep", big, NULL);
    char needle[160];
    snprintf(needle, sizeof needle,
             "needs %d tokens, more than deployment gl-dep's limit of %d per "
             "minute allows at once: lower max_tokens",
             TPM + 1, TPM);
    expect_429(r, 60, 60, needle, NULL);
    reply_free(r);

    /* the limit's refusals count as the deployment's rejected requests */
    char path[128];
    snprintf(path, sizeof path, "/v1/deployments/%s", dep);
    resp *g = http_get(&server, path);
    expect_status(g, 200);
    assert_true(int_of(json_object_get(g->json, "traffic"), "rejected") >= 1);
    resp_free(g);
    undeploy(dep);
}

/* A generation a stop string ends at once reserves its prompt and
 * max_tokens but uses only its prompt and a token or two: the rest comes
 * back at its end, so a request needing nearly all of the limit is
 * admitted right after it. Without the refund the bucket would hold 2
 * tokens, and at half a token a second it could not hold what the second
 * needs for tens of seconds. */
static void test_refund(void **state)
{
    (void)state;
    char dep[64];
    json_decref(
        deploy("gl-refund", model_id, "{\"tokens_per_minute\": 30}", dep));
    const int n = prompt_n;
    const int first = TPM - 2 - n; /* reserves TPM - 2, leaving 2 */
    /* the greedy text's first character stops it at once */
    char stop[2] = {greedy[0], 0};
    double t0 = now_seconds();
    reply *r = generate("gl-refund", first, stop);
    if (r->status != 200)
        fail_msg("the stopped generation: %ld %s", r->status, r->body);
    assert_string_equal(str(r->json, "finish_reason"), "stop");
    const int generated = (int)int_of(r->json, "completion_tokens");
    reply_free(r);
    assert_true(generated <= 3);
    /* the bucket now holds TPM - n - generated (plus the refill) */
    const int back = TPM - n - generated;
    const int second = back - n; /* needs exactly what came back */
    assert_true(second >= 1);
    r = generate("gl-refund", second, NULL);
    const double elapsed = now_seconds() - t0;
    print_message("stopped after %d tokens: %d came back; the next needs %d "
                  "(%.2f s later; without the refund the bucket would hold "
                  "%.1f)\n",
                  generated, first - generated, back, elapsed,
                  2 + elapsed * TPM / 60.0);
    if (r->status != 200)
        fail_msg("the generation after the refund: %ld %s", r->status, r->body);
    const int used2 = n + (int)int_of(r->json, "completion_tokens");
    reply_free(r);

    /* And the refund is no more than the unused part: what the second
     * used is gone, so a third needing as much is refused (unless the
     * machine took long enough to refill it). */
    r = generate("gl-refund", second, NULL);
    const double level = back - used2 + (now_seconds() - t0) * TPM / 60.0;
    if (level < back)
        expect_429(r, 1, 61, "deployment gl-refund is over its limit", NULL);
    reply_free(r);
    undeploy(dep);
}

/* A regression model of 4 inputs (a dense layer), for predicts. */
static void import_dense(char id[64])
{
    char st[PATH_MAX], part[PATH_MAX + 16];
    snprintf(st, sizeof st, "%s/dense.safetensors", files);
    float w[3 * 4] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0}, b[3] = {0};
    st_out_tensor t[2] = {{"0.weight", ST_F32, 2, {3, 4}, w},
                          {"0.bias", ST_F32, 1, {3}, b}};
    ty_err err = {0};
    assert_int_equal(st_write(st, NULL, t, 2, &err), TY_OK);
    snprintf(part, sizeof part, "weights=@%s", st);
    const char *parts[] = {
        part,
        "metadata={\"spec\": {\"layers\": [{\"type\": \"dense\", \"units\": "
        "3}]}, \"task\": \"regression\", \"input_shape\": [4], "
        "\"num_outputs\": 3}",
        "name=dense", NULL};
    resp *r = http_upload(&server, "/v1/models", parts);
    expect_status(r, 201);
    snprintf(id, 64, "%s", str(r->json, "id"));
    resp_free(r);
}

static void patch_tenant_tokens(const char *value)
{
    char path[128], body[128];
    snprintf(path, sizeof path, "/v1/tenants/%s", tenant_id);
    snprintf(body, sizeof body,
             "{\"quota\": {\"serving_tokens_per_minute\": %s}}", value);
    resp *r = http_json(&server, "PATCH", path, body);
    expect_status(r, 200);
    json_t *v = json_object_get(json_object_get(r->json, "quota"),
                                "serving_tokens_per_minute");
    if (!strcmp(value, "null"))
        assert_true(json_is_null(v));
    else
        assert_int_equal(json_integer_value(v), atoi(value));
    resp_free(r);
}

/* The tenant's tokens a minute bound its deployments together: what one
 * deployment's generation reserved is missing for the other's; a predict
 * reserves nothing and is answered; lifted, generations are admitted
 * again. */
static void test_tenant_quota(void **state)
{
    (void)state;
    char d1[64], d2[64], d3[64], dense[64];
    import_dense(dense);
    json_decref(deploy("gl-t1", model_id, NULL, d1));
    json_decref(deploy("gl-t2", model_id, NULL, d2));
    json_decref(deploy("gl-dense", dense, NULL, d3));
    patch_tenant_tokens("30");

    const int n = prompt_n;
    double t0 = now_seconds();
    reply *r = generate("gl-t1", TPM - 2 - n, NULL);
    if (r->status != 200)
        fail_msg("the first generation: %ld %s", r->status, r->body);
    const int used = n + (int)int_of(r->json, "completion_tokens");
    reply_free(r);

    const int need = n + 12;
    r = generate("gl-t2", 12, NULL);
    const double level = TPM - used + (now_seconds() - t0) * TPM / 60.0;
    if (level < need) {
        char needle[160];
        snprintf(needle, sizeof needle,
                 "over the tenant's limit of %d tokens per minute: this "
                 "request needs %d",
                 TPM, need);
        expect_429(r, 1, (long)ceil((need - (TPM - used)) * 60.0 / TPM) + 1,
                   needle, NULL);
    }
    reply_free(r);
    /* too big for the tenant's limit */
    r = generate("gl-t2", TPM + 1 - n, NULL);
    expect_429(r, 60, 60, "more than the tenant's limit of 30 per minute",
               "lower max_tokens", NULL);
    reply_free(r);

    /* predicts are not generations: answered */
    char path[160];
    snprintf(path, sizeof path, "/v1/models/%s/predict", dense);
    for (int i = 0; i < 3; i++) {
        reply *p = call("POST", path, "{\"inputs\": [[1, 2, 3, 4]]}");
        if (p->status != 200)
            fail_msg("a predict under the token quota: %ld %s", p->status,
                     p->body);
        reply_free(p);
    }

    /* lifted: admitted again */
    patch_tenant_tokens("null");
    r = generate("gl-t2", 12, NULL);
    if (r->status != 200)
        fail_msg("after the quota was lifted: %ld %s", r->status, r->body);
    reply_free(r);
    undeploy(d1);
    undeploy(d2);
    undeploy(d3);
}

/* Bad values are 422s naming the field, on the deployment (POST and
 * PATCH) and on the tenant's quota. */
static void test_validation(void **state)
{
    (void)state;
    static const char *const bad[] = {"0", "-5", "1.5", "1000000001",
                                      "\"600\""};
    char dep[64];
    json_decref(
        deploy("gl-valid", model_id, "{\"tokens_per_minute\": 1000}", dep));
    char dpath[128], tpath[128];
    snprintf(dpath, sizeof dpath, "/v1/deployments/%s", dep);
    snprintf(tpath, sizeof tpath, "/v1/tenants/%s", tenant_id);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"name\": \"gl-bad\", \"model\": \"%s\", \"resources\": "
                 "{\"gpu\": \"none\"}, \"limits\": {\"tokens_per_minute\": "
                 "%s}}",
                 model_id, bad[i]);
        expect_refusal(&server,
                       http_json(&server, "POST", "/v1/deployments", body), 422,
                       "limits.tokens_per_minute", NULL);
        snprintf(body, sizeof body, "{\"limits\": {\"tokens_per_minute\": %s}}",
                 bad[i]);
        expect_refusal(&server, http_json(&server, "PATCH", dpath, body), 422,
                       "limits.tokens_per_minute", NULL);
        snprintf(body, sizeof body,
                 "{\"quota\": {\"serving_tokens_per_minute\": %s}}", bad[i]);
        expect_refusal(&server, http_json(&server, "PATCH", tpath, body), 422,
                       "quota.serving_tokens_per_minute", NULL);
    }
    /* nothing changed; a PATCH sets and lifts the deployment's limit */
    resp *r = http_get(&server, dpath);
    expect_status(r, 200);
    assert_int_equal(
        int_of(json_object_get(r->json, "limits"), "tokens_per_minute"), 1000);
    resp_free(r);
    r = http_json(&server, "PATCH", dpath,
                  "{\"limits\": {\"tokens_per_minute\": null}}");
    expect_status(r, 200);
    assert_true(json_is_null(json_object_get(json_object_get(r->json, "limits"),
                                             "tokens_per_minute")));
    resp_free(r);
    r = http_get(&server, tpath);
    expect_status(r, 200);
    json_t *q = json_object_get(r->json, "quota");
    assert_non_null(json_object_get(q, "serving_tokens_per_minute"));
    assert_true(json_is_null(json_object_get(q, "serving_tokens_per_minute")));
    resp_free(r);
    undeploy(dep);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_deployment_limit),
        cmocka_unit_test(test_refund),
        cmocka_unit_test(test_tenant_quota),
    };
    int rc = cmocka_run_group_tests(tests, setup, teardown);
    curl_global_cleanup();
    return rc;
}
