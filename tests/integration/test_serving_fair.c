/*
 * Integration test for issue 29's finding 4: one tenant's slow deployment
 * must not delay another tenant's predicts through the serving threads
 * they share (server/offload.c).
 *
 *   noisy neighbour  a server with --serving-threads 8; tenants A and B
 *                    each deploy a small model on a CPU replica. B's
 *                    deployment holds every request in its batcher for up
 *                    to a second (batching.max_queue_delay_us 1000000, a
 *                    batch far bigger than the load), and B floods it from
 *                    24 clients, three times the serving threads. A
 *                    measures the p99 of its own predicts alone, then
 *                    while B floods, in ROUNDS rounds: the ratio of the
 *                    median flooded p99 to the median alone p99 must stay
 *                    under RATIO_MAX.
 *
 * The assertion is a ratio of two figures taken in the same run, never an
 * absolute time. Before per-tenant sharing of the pool, A's predicts queued
 * behind B's (a FIFO across tenants) and took seconds: a ratio in the
 * hundreds. The bound is generous (the target is 1.2) so that a
 * loaded two-core machine does not fail it by noise, and so are the
 * rounds: a p99 of a few hundred samples is its one or two slowest, which
 * on a busy machine are whatever else ran then (seen: 10 to 350 ms for a
 * 5 ms predict, B flooding or not); alternating the two cases and taking
 * each one's median round leaves such a burst one round of three.
 *
 * Only 127.0.0.1; B's clients are bounded in number (B_CLIENTS) and in
 * time (each round they stop once A's window is measured, and wait for
 * their last answers; each request has a timeout).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "harness.h"
#include "models/safetensors.h"

#define SERVING_THREADS "8"
#define B_CLIENTS 24
#define ROUNDS 3           /* of A alone, then A while B floods */
#define WINDOW_SAMPLES 150 /* A's predicts per window at most */
#define FLOODED_MAX_S 5.0  /* and for this long at most while flooded */
#define RATIO_MAX 4.0

static char files[PATH_MAX];
static srv server;

/* A tenant: its id, its key, and the server as seen with that key. */
typedef struct {
    char id[64];
    char key[128];
    srv as;
    char model[64];
    char dep[64];
} tenant;

static tenant ta, tb;

/* POST /v1/tenants as the admin; the tenant's id and first key into t. */
static void tenant_create(const char *name, tenant *t)
{
    char body[128];
    snprintf(body, sizeof body, "{\"name\": \"%s\"}", name);
    resp *r = http_json(&server, "POST", "/v1/tenants", body);
    expect_status(r, 201);
    snprintf(t->id, sizeof t->id, "%s", str(r->json, "id"));
    snprintf(t->key, sizeof t->key, "%s",
             str(json_object_get(r->json, "key"), "api_key"));
    resp_free(r);
    t->as = server;
    snprintf(t->as.key, sizeof t->as.key, "%s", t->key);
}

/* Imports, as tenant t, a 4 -> 3 linear model (output j = x[j] + j). */
static void model_import(tenant *t, const char *name)
{
    char st[PATH_MAX], part[PATH_MAX + 16], name_part[128];
    snprintf(st, sizeof st, "%s/%s.safetensors", files, name);
    float w[3 * 4] = {0}, b[3];
    for (int j = 0; j < 3; j++) {
        w[j * 4 + j] = 1.0f;
        b[j] = (float)j;
    }
    st_out_tensor tensors[2] = {{"0.weight", ST_F32, 2, {3, 4}, w},
                                {"0.bias", ST_F32, 1, {3}, b}};
    ty_err err = {0};
    assert_int_equal(st_write(st, NULL, tensors, 2, &err), TY_OK);
    snprintf(part, sizeof part, "weights=@%s", st);
    snprintf(name_part, sizeof name_part, "name=%s", name);
    const char *parts[] = {
        part,
        "metadata={\"spec\": {\"layers\": [{\"type\": \"dense\", \"units\": "
        "3}]}, \"task\": \"regression\", \"input_shape\": [4], "
        "\"num_outputs\": 3}",
        name_part, NULL};
    resp *r = http_upload(&t->as, "/v1/models", parts);
    expect_status(r, 201);
    snprintf(t->model, sizeof t->model, "%s", str(r->json, "id"));
    resp_free(r);
}

/* Deploys t's model (one CPU replica, batching as given) and waits until
 * its replica is ready. */
static void deploy_ready(tenant *t, const char *name, const char *batching)
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"name\": \"%s\", \"model\": \"%s\", \"replicas\": {\"min\": "
             "1, \"max\": 1}, \"resources\": {\"gpu\": \"none\"}, "
             "\"batching\": %s}",
             name, t->model, batching);
    resp *r = http_json(&t->as, "POST", "/v1/deployments", body);
    expect_status(r, 201);
    snprintf(t->dep, sizeof t->dep, "%s", str(r->json, "id"));
    resp_free(r);
    char path[160];
    snprintf(path, sizeof path, "/v1/deployments/%s", t->dep);
    double deadline = now_seconds() + 60;
    for (;;) {
        r = http_get(&t->as, path);
        const char *st = r->status == 200 ? str(r->json, "status") : NULL;
        int ready = st && !strcmp(st, "ready");
        resp_free(r);
        if (ready)
            return;
        if (now_seconds() > deadline)
            fail_msg("deployment %s never became ready (server log: %s)",
                     t->dep, server.log);
        usleep(100 * 1000);
    }
}

static size_t discard(char *d, size_t size, size_t n, void *ctx)
{
    (void)d;
    (void)ctx;
    return size * n;
}

/* One predict of one row on handle c (kept alive between calls) as t:
 * the HTTP status, or -1 when the transfer failed. */
static long predict(CURL *c, const tenant *t)
{
    static const char body[] = "{\"inputs\": [[1, 2, 3, 4]]}";
    char url[256], auth[192];
    snprintf(url, sizeof url, "%s/v1/models/%s/predict", server.base, t->model);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", t->key);
    struct curl_slist *h = curl_slist_append(NULL, auth);
    h = curl_slist_append(h, "Content-Type: application/json");
    h = curl_slist_append(h, "Expect:");
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)(sizeof body - 1));
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    long status = -1;
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    return status;
}

/* ---- B's flood ---- */

static atomic_int flood_stop;
static atomic_int flood_in_flight; /* B's requests sent and not answered */
static atomic_int flood_ok, flood_other;

static void *flood_client(void *arg)
{
    (void)arg;
    CURL *c = curl_easy_init();
    if (!c)
        return NULL;
    while (!atomic_load(&flood_stop)) {
        atomic_fetch_add(&flood_in_flight, 1);
        long st = predict(c, &tb);
        atomic_fetch_sub(&flood_in_flight, 1);
        atomic_fetch_add(st == 200 ? &flood_ok : &flood_other, 1);
    }
    curl_easy_cleanup(c);
    return NULL;
}

typedef struct {
    pthread_t th[B_CLIENTS];
} flood;

static void flood_start(flood *f)
{
    atomic_store(&flood_stop, 0);
    int started = 0;
    for (int i = 0; i < B_CLIENTS; i++)
        started += pthread_create(&f->th[i], NULL, flood_client, NULL) == 0;
    assert_int_equal(started, B_CLIENTS);
}

/* Stops B's clients and waits for each to have its last answer, so that
 * nothing of B's is left in the server for A's next "alone". */
static void flood_stop_all(flood *f)
{
    atomic_store(&flood_stop, 1);
    for (int i = 0; i < B_CLIENTS; i++)
        pthread_join(f->th[i], NULL);
}

/* ---- A's measurement ---- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The p99 of n latencies (sorted in place): the smallest value at least
 * 99% of the samples do not exceed. */
static double p99(double *lat, int n)
{
    qsort(lat, (size_t)n, sizeof *lat, cmp_double);
    int i = (int)ceil(0.99 * n) - 1;
    return lat[i < 0 ? 0 : i];
}

/* A's predicts on handle c, up to WINDOW_SAMPLES or max_s seconds (at
 * least one); their p99 is returned, how many into *n. Every one must be
 * a 200. *min_flood: the fewest B requests in flight seen as one was
 * sent. */
static double measure_a(CURL *c, double max_s, int *n, int *min_flood)
{
    static double lat[WINDOW_SAMPLES];
    int k = 0;
    double end = now_seconds() + max_s;
    *min_flood = B_CLIENTS;
    while (k < WINDOW_SAMPLES && (k == 0 || now_seconds() < end)) {
        int f = atomic_load(&flood_in_flight);
        if (f < *min_flood)
            *min_flood = f;
        double t0 = now_seconds();
        long st = predict(c, &ta);
        lat[k++] = now_seconds() - t0;
        if (st != 200)
            fail_msg("A's predict answered %ld (server log: %s)", st,
                     server.log);
    }
    *n = k;
    return p99(lat, k);
}

static double median3(const double v[ROUNDS])
{
    double s[ROUNDS];
    memcpy(s, v, sizeof s);
    qsort(s, ROUNDS, sizeof *s, cmp_double);
    return s[ROUNDS / 2];
}

static void test_slow_neighbour_does_not_delay_a(void **state)
{
    (void)state;
    CURL *c = curl_easy_init();
    assert_non_null(c);
    int n, min_flood, fewest_flood = B_CLIENTS;
    /* Warm: A's connection, its key and model in the server's tables. */
    for (int i = 0; i < 20; i++)
        assert_int_equal(predict(c, &ta), 200);

    double alone[ROUNDS], flooded[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        alone[r] = measure_a(c, 30.0, &n, &min_flood);
        print_message("round %d: A alone   %3d predicts, p99 %8.2f ms\n", r + 1,
                      n, alone[r] * 1e3);
        flood f;
        flood_start(&f);
        /* B's requests reach the server at once; a second more for them
         * to hold every serving thread they may. */
        sleep(1);
        flooded[r] = measure_a(c, FLOODED_MAX_S, &n, &min_flood);
        flood_stop_all(&f);
        if (min_flood < fewest_flood)
            fewest_flood = min_flood;
        print_message("round %d: A flooded %3d predicts, p99 %8.2f ms "
                      "(B: at least %d requests in flight)\n",
                      r + 1, n, flooded[r] * 1e3, min_flood);
    }
    curl_easy_cleanup(c);

    double p_alone = median3(alone), p_flooded = median3(flooded);
    double ratio = p_flooded / p_alone;
    print_message("A's p99 (median of %d rounds): alone %.2f ms, flooded "
                  "%.2f ms by B's %d clients (%d answered 200, %d "
                  "otherwise)\n",
                  ROUNDS, p_alone * 1e3, p_flooded * 1e3, B_CLIENTS,
                  atomic_load(&flood_ok), atomic_load(&flood_other));
    print_message("A's p99 flooded / alone: %.2f (bound %.1f; the issue's "
                  "target 1.2)\n",
                  ratio, RATIO_MAX);
    /* The attack ran: B kept more requests in flight than there are
     * serving threads, and its deployment answered them. */
    assert_true(fewest_flood > atoi(SERVING_THREADS));
    assert_true(atomic_load(&flood_ok) > 0);
    assert_true(ratio <= RATIO_MAX);
}

static int group_setup(void **state)
{
    (void)state;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    temp_dir(files);
    const char *flags[] = {
        "--devices",     "none", "--worker-threads", "1", "--serving-threads",
        SERVING_THREADS, NULL};
    if (srv_start(&server, NULL, flags) != 0)
        return -1;
    tenant_create("fair-a", &ta);
    tenant_create("fair-b", &tb);
    model_import(&ta, "fair-a-model");
    model_import(&tb, "fair-b-model");
    /* A: a batching window of 5 ms, so that A's predicts take about what
     * the did (5 ms) and the ratio measures waiting behind B, not
     * the scheduling jitter of a 0.1 ms call on a loaded machine. B: each
     * request waits a second for a batch that never fills. */
    deploy_ready(&ta, "a-batched",
                 "{\"max_batch_size\": 8, \"max_queue_delay_us\": 5000}");
    deploy_ready(&tb, "b-slow",
                 "{\"max_batch_size\": 4096, \"max_queue_delay_us\": "
                 "1000000}");
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    srv_stop(&server, SIGTERM);
    srv_cleanup(&server);
    fs_remove_tree(files, NULL);
    curl_global_cleanup();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slow_neighbour_does_not_delay_a),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
