/*
 * Integration tests for POST /v2/models/{name}/generate (serve/generate.h)
 * through a live server, on a small GPT trained here on a grammar's
 * sentences:
 *
 *   - greedy generation (temperature 0) writes the tokens that predict's
 *     most likely next token gives, one after another (the key/value
 *     cache decoder against the full forward, through the API);
 *   - max_tokens bounds the text (finish_reason "length"), a stop string
 *     ends it before the string (finish_reason "stop");
 *   - sampling with a seed gives the same text twice, and other seeds
 *     other texts;
 *   - eight seeded requests at once write what each writes alone, with a
 *     cache of 6 blocks (--kv-cache 24576: three sequences of
 *     this model at a time, so the others wait for blocks), and the
 *     engine did run several sequences in one step (continuous
 *     batching: trainyard_generate_step_sequences);
 *   - bad requests are 422s naming the field, a model of another kind is
 *     refused, a model the tenant does not have is 404;
 *   - a streaming client that leaves stops its generation;
 *   - deployed (a CPU replica, node/replica_gen.c), the model writes the
 *     same texts, logprobs and streams as in the server, by the
 *     deployment's name and by the model's id, and the deployment counts
 *     the requests;
 *   - prefix caching: prompts that begin alike share their first blocks
 *     and write, bit for bit, what they write with the cache cold, in
 *     the server and on a replica (whose heartbeats count the hits); the
 *     cache outlives its requests (the same request after an idle gap
 *     hits every choice's blocks);
 *   - a rolling update while a deployment streams a long generation: the
 *     stream completes whole on the old replica, which drains after it;
 *     requests through the update get no 5xx, and after it go to the new
 *     model;
 *   - a replica that fails before the first token after its deployment
 *     was rolled to another model: the retried generation is served here
 *     on the model it opened (not a 404).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <glob.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "harness.h"

static srv server;
static char files[PATH_MAX];
static char model_id[64];
static char wide_id[64]; /* test_disconnect_cancels's model */

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

static int setup(void **state)
{
    (void)state;
    /* the model's cache: 2 x 16 positions x 32 channels x 4 bytes a block,
     * 6 blocks: three requests of up to 32 tokens at a time */
    static const char *const flags[] = {"--kv-cache", "24576", NULL};
    if (srv_start(&server, NULL, flags))
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
    return ok ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    srv_stop(&server, SIGTERM);
    srv_cleanup(&server);
    return 0;
}

static resp *generate(const char *body)
{
    char path[160];
    snprintf(path, sizeof path, "/v2/models/%s/generate", model_id);
    return http_json(&server, "POST", path, body);
}

/* A 422 naming field (NULL: not checked) whose detail holds needle. */
static void expect_422(resp *r, const char *field, const char *needle)
{
    expect_refusal(&server, r, 422, field, needle);
}

static void test_greedy_is_predicts_chain(void **state)
{
    (void)state;
    resp *r = generate("{\"text_input\": \"the old k\", \"parameters\": "
                       "{\"temperature\": 0, \"max_tokens\": 12}}");
    if (r->status != 200)
        fprintf(stderr, "%.*s\n", (int)r->len, r->body);
    expect_status(r, 200);
    char text[64];
    snprintf(text, sizeof text, "%s", str(r->json, "text_output"));
    assert_string_equal(str(r->json, "finish_reason"), "length");
    assert_int_equal(
        json_integer_value(json_object_get(r->json, "completion_tokens")), 12);
    assert_int_equal(
        json_integer_value(json_object_get(r->json, "prompt_tokens")), 9);
    assert_string_equal(str(r->json, "model_version"), "1");
    resp_free(r);
    fprintf(stderr, "greedy: \"the old k\" + \"%s\"\n", text);
    assert_int_equal(strlen(text), 12); /* byte tokens, ASCII text */
    /* predict's most likely next token, appended, 12 times */
    char prompt[64] = "the old k", path[160], body[256];
    snprintf(path, sizeof path, "/v1/models/%s/predict", model_id);
    for (int i = 0; i < 12; i++) {
        snprintf(body, sizeof body, "{\"inputs\": [\"%s\"], \"top_k\": 1}",
                 prompt);
        r = http_json(&server, "POST", path, body);
        expect_status(r, 200);
        const json_t *best = json_array_get(
            json_object_get(
                json_array_get(json_object_get(r->json, "predictions"), 0),
                "next_tokens"),
            0);
        size_t len = strlen(prompt);
        prompt[len] = (char)json_integer_value(json_object_get(best, "id"));
        prompt[len + 1] = '\0';
        resp_free(r);
    }
    assert_string_equal(prompt + strlen("the old k"), text);
}

static void test_stop_and_length(void **state)
{
    (void)state;
    resp *r = generate("{\"text_input\": \"a dog sees the\", \"parameters\": "
                       "{\"temperature\": 0, \"max_tokens\": 16}}");
    expect_status(r, 200);
    char full[64];
    snprintf(full, sizeof full, "%s", str(r->json, "text_output"));
    resp_free(r);
    /* a stop string from the middle of that text ends it there */
    assert_true(strlen(full) >= 6);
    char stop[4] = {full[3], full[4], full[5], 0};
    char body[256];
    snprintf(body, sizeof body,
             "{\"text_input\": \"a dog sees the\", \"parameters\": "
             "{\"temperature\": 0, \"max_tokens\": 16, \"stop\": [\"%s\"]}}",
             stop);
    r = generate(body);
    expect_status(r, 200);
    const char *cut = str(r->json, "text_output");
    assert_string_equal(str(r->json, "finish_reason"), "stop");
    assert_true(strlen(cut) <= 3);
    assert_memory_equal(cut, full, strlen(cut));
    assert_null(strstr(cut, stop));
    resp_free(r);
}

static void test_seeded_sampling(void **state)
{
    (void)state;
    const char *a = "{\"text_input\": \"the cat \", \"parameters\": "
                    "{\"temperature\": 1.5, \"top_p\": 0.95, \"max_tokens\": "
                    "24, \"seed\": 7}}";
    resp *r1 = generate(a), *r2 = generate(a);
    expect_status(r1, 200);
    expect_status(r2, 200);
    assert_string_equal(str(r1->json, "text_output"),
                        str(r2->json, "text_output"));
    /* other seeds: at least one of five writes another text */
    int differs = 0;
    for (int seed = 8; seed < 13 && !differs; seed++) {
        char body[256];
        snprintf(body, sizeof body,
                 "{\"text_input\": \"the cat \", \"parameters\": "
                 "{\"temperature\": 1.5, \"top_p\": 0.95, \"max_tokens\": 24, "
                 "\"seed\": %d}}",
                 seed);
        resp *r = generate(body);
        expect_status(r, 200);
        differs = strcmp(str(r->json, "text_output"),
                         str(r1->json, "text_output")) != 0;
        resp_free(r);
    }
    assert_true(differs);
    resp_free(r1);
    resp_free(r2);
}

/* generate_stream: the events' texts add up to generate's text, the last
 * event says why it ended, and a bad request is refused before any event
 * (a problem reply, not a stream). */
static void test_stream(void **state)
{
    (void)state;
    const char *body = "{\"text_input\": \"my friend \", \"parameters\": "
                       "{\"temperature\": 0, \"max_tokens\": 14}}";
    resp *whole = generate(body);
    expect_status(whole, 200);
    char path[160];
    snprintf(path, sizeof path, "/v2/models/%s/generate_stream", model_id);
    resp *r = http_json(&server, "POST", path, body);
    expect_status(r, 200);
    assert_non_null(strstr(r->content_type, "text/event-stream"));
    char text[256] = "";
    int events = 0, last_seen = 0;
    char *save = NULL, *copy = strndup(r->body, r->len);
    for (char *ev = strtok_r(copy, "\n", &save); ev;
         ev = strtok_r(NULL, "\n", &save)) {
        assert_true(!strncmp(ev, "data: ", 6));
        json_t *o = json_loads(ev + 6, 0, NULL);
        assert_non_null(o);
        assert_false(last_seen); /* nothing after the last event */
        events++;
        if (json_object_get(o, "finish_reason")) {
            last_seen = 1;
            assert_string_equal(str(o, "finish_reason"), "length");
            assert_string_equal(str(o, "text_output"), "");
            assert_int_equal(
                json_integer_value(json_object_get(o, "completion_tokens")),
                14);
        } else {
            strncat(text, str(o, "text_output"),
                    sizeof text - strlen(text) - 1);
        }
        json_decref(o);
    }
    free(copy);
    assert_true(last_seen);
    assert_true(events >= 3); /* pieces as they came, not one reply */
    assert_string_equal(text, str(whole->json, "text_output"));
    resp_free(r);
    resp_free(whole);
    r = http_json(&server, "POST", path,
                  "{\"text_input\": \"x\", \"parameters\": {\"top_p\": 2}}");
    expect_422(r, "parameters.top_p", NULL);
}

#define N_AT_ONCE 8

typedef struct {
    char body[256];
    char text[256];
    long status;
} gen_call;

static void gen_call_run(gen_call *c)
{
    resp *r = generate(c->body);
    c->status = r->status;
    snprintf(c->text, sizeof c->text, "%s",
             r->json ? str(r->json, "text_output") : "");
    resp_free(r);
}

static void *gen_thread(void *arg)
{
    gen_call_run(arg);
    return NULL;
}

static double metric_sum(const char *text, const char *name, const char *has);

/* /metrics read again and again while requests run: the cache's blocks
 * never past the pool's 6 (the budget), and what was seen. */
typedef struct {
    volatile int stop;
    int samples, busy; /* busy: samples with a cache in use */
    double max_used, max_total, max_waiting;
    int over; /* samples with used > total or total not 0 or 6 */
} kv_watch;

static void *kv_watch_run(void *arg)
{
    kv_watch *k = arg;
    while (!k->stop) {
        resp *m = http_get(&server, "/metrics");
        const double used = metric_sum(m->body, "trainyard_generate_kv_blocks",
                                       "state=\"used\"");
        const double total = metric_sum(m->body, "trainyard_generate_kv_blocks",
                                        "state=\"total\"");
        const double waiting =
            metric_sum(m->body, "trainyard_generate_waiting", NULL);
        resp_free(m);
        k->samples++;
        k->busy += used > 0;
        k->over += used > total || (total != 0 && total != 6);
        k->max_used = used > k->max_used ? used : k->max_used;
        k->max_total = total > k->max_total ? total : k->max_total;
        k->max_waiting = waiting > k->max_waiting ? waiting : k->max_waiting;
    }
    return NULL;
}

/* The engine's steps so far, and those that ran one sequence alone. */
static void step_counts(double *steps, double *single)
{
    resp *m = http_get(&server, "/metrics");
    *steps =
        metric_sum(m->body, "trainyard_generate_step_sequences_count", NULL);
    *single = metric_sum(m->body, "trainyard_generate_step_sequences_bucket",
                         "le=\"1\"");
    resp_free(m);
}

/* Eight seeded requests, alone one after another, then all at once: the
 * same texts. Three fit the cache at a time; the rest wait their turn. */
static void test_batched_as_alone(void **state)
{
    (void)state;
    static const char *const prompts[] = {"the cat ", "a dog ", "the old king ",
                                          "my friend "};
    gen_call alone[N_AT_ONCE], together[N_AT_ONCE];
    for (int i = 0; i < N_AT_ONCE; i++) {
        snprintf(alone[i].body, sizeof alone[i].body,
                 "{\"text_input\": \"%s\", \"parameters\": "
                 "{\"temperature\": 1.0, \"top_p\": 0.9, \"max_tokens\": "
                 "18, \"seed\": %d}}",
                 prompts[i % 4], 100 + i);
        together[i] = alone[i];
        gen_call_run(&alone[i]);
        assert_int_equal(alone[i].status, 200);
    }
    /* Whether the eight share steps depends on when their threads get to
     * send them: on a loaded machine they may come one after another. A
     * round that shared none is run again (at most four rounds); every
     * round's texts must be the alone ones. */
    int shared = 0, round = 0;
    for (; round < 4 && !shared; round++) {
        double steps0, single0;
        step_counts(&steps0, &single0);
        pthread_t t[N_AT_ONCE], watcher;
        kv_watch kw = {0};
        assert_int_equal(pthread_create(&watcher, NULL, kv_watch_run, &kw), 0);
        for (int i = 0; i < N_AT_ONCE; i++) {
            together[i] = alone[i];
            together[i].status = 0;
            together[i].text[0] = '\0';
            assert_int_equal(
                pthread_create(&t[i], NULL, gen_thread, &together[i]), 0);
        }
        for (int i = 0; i < N_AT_ONCE; i++)
            pthread_join(t[i], NULL);
        kw.stop = 1;
        pthread_join(watcher, NULL);
        fprintf(stderr,
                "cache while they ran: %d samples, %d with blocks in use; at "
                "most %.0f of %.0f blocks used, %.0f requests waiting\n",
                kw.samples, kw.busy, kw.max_used, kw.max_total, kw.max_waiting);
        assert_int_equal(kw.over, 0); /* never past the pool, a pool of 6 */
        for (int i = 0; i < N_AT_ONCE; i++) {
            assert_int_equal(together[i].status, 200);
            if (strcmp(alone[i].text, together[i].text))
                fail_msg("request %d: alone \"%s\", together \"%s\"", i,
                         alone[i].text, together[i].text);
        }
        double steps, single;
        step_counts(&steps, &single);
        fprintf(stderr,
                "together (round %d): %.0f steps, %.0f of them with one "
                "sequence\n",
                round + 1, steps - steps0, single - single0);
        shared = steps - steps0 > single - single0;
    }
    assert_true(shared); /* some steps shared */
}

/* The sum of a metric's samples whose line holds `has` (0 when none). */
static double metric_sum(const char *text, const char *name, const char *has)
{
    double sum = 0;
    size_t n = strlen(name);
    for (const char *l = text; l && *l;
         l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        const char *end = strchr(l, '\n');
        size_t len = end ? (size_t)(end - l) : strlen(l);
        if (strncmp(l, name, n) || (l[n] != '{' && l[n] != ' '))
            continue;
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)(len < 511 ? len : 511), l);
        if (has && !strstr(line, has))
            continue;
        const char *v = strrchr(line, ' ');
        sum += v ? strtod(v + 1, NULL) : 0;
    }
    return sum;
}

/* Generation's metrics: the tokens written so far by this file's tests,
 * times to first token and between tokens, and no sequence left running. */
static void test_metrics(void **state)
{
    (void)state;
    resp *r = http_get(&server, "/metrics");
    expect_status(r, 200);
    double generated = metric_sum(r->body, "trainyard_generate_tokens_total",
                                  "kind=\"generated\"");
    double prompt = metric_sum(r->body, "trainyard_generate_tokens_total",
                               "kind=\"prompt\"");
    double ttft = metric_sum(
        r->body, "trainyard_generate_latency_seconds_count", "phase=\"ttft\"");
    double itl = metric_sum(r->body, "trainyard_generate_latency_seconds_count",
                            "phase=\"itl\"");
    fprintf(stderr, "generated %.0f prompt %.0f ttft %.0f itl %.0f\n",
            generated, prompt, ttft, itl);
    assert_true(generated >= 100); /* 12 + 16 + 16 + 7 x 24 + ... */
    assert_true(prompt >= 50);
    assert_true(ttft >= 8);
    assert_true(itl >= generated - ttft - 0.5);
    assert_true(metric_sum(r->body, "trainyard_generate_sequences", NULL) ==
                0.0);
    /* idle: no block held, nothing waits (the pool stays, its blocks
     * free or cached, for the prefix cache) */
    assert_true(metric_sum(r->body, "trainyard_generate_kv_blocks",
                           "state=\"used\"") == 0.0);
    assert_true(
        metric_sum(r->body, "trainyard_generate_kv_blocks",
                   "state=\"cached\"") <=
        metric_sum(r->body, "trainyard_generate_kv_blocks", "state=\"total\""));
    assert_true(metric_sum(r->body, "trainyard_generate_waiting", NULL) == 0.0);
    resp_free(r);
}

/* A client that leaves frees its sequences: a streamed completion of 16
 * choices of 120 tokens each, whose client resets the connection after
 * the first chunk. The server notices at its next write, and every choice
 * stops at its next piece: far fewer than 16 x 120 tokens are generated,
 * and nothing is left running or waiting in the engine. The model is one
 * of its own, wider (4 blocks of 128) and with a context of 128, trained
 * one step (what it writes does not matter): the story model writes its
 * 16 x 24 tokens in a few milliseconds, before a server notices a reset,
 * and its cache would hold several choices at once; this one's holds one
 * (the budget buys less than a context, so the pool is one context), so
 * the choices run one after another for long enough to see them stop. */
/* Streams n completions of max_tokens from model, reads the first chunk
 * and leaves with a reset (not a polite close): the server's next write
 * fails. */
static void stream_then_leave(const char *model, int n_choices, int max_tokens)
{
    char body[256], req[1024];
    int blen = snprintf(body, sizeof body,
                        "{\"model\": \"%s\", \"prompt\": \"the \", "
                        "\"max_tokens\": %d, \"n\": %d, \"temperature\": 1, "
                        "\"seed\": 3, \"stream\": true}",
                        model, max_tokens, n_choices);
    int n = snprintf(req, sizeof req,
                     "POST /openai/v1/completions HTTP/1.1\r\nHost: "
                     "127.0.0.1\r\nAuthorization: Bearer %s\r\nContent-Type: "
                     "application/json\r\nContent-Length: %d\r\n\r\n%s",
                     server.key, blen, body);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)server.port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(raw_send_all(fd, req, (size_t)n), 0);
    char got[8192];
    size_t have = 0;
    const double first_by = now_seconds() + 30;
    while (!memmem(got, have, "data: ", 6) && have < sizeof got &&
           now_seconds() < first_by) {
        struct timeval tv = {.tv_sec = 1};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        ssize_t k = recv(fd, got + have, sizeof got - have, 0);
        if (k == 0)
            break;
        if (k > 0)
            have += (size_t)k;
    }
    if (!memmem(got, have, "data: ", 6))
        fail_msg("no chunk came: %.*s", (int)have, got);
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fd);
}

static void test_disconnect_cancels(void **state)
{
    (void)state;
    resp *r = http_json(
        &server, "POST", "/v1/jobs",
        "{\"dataset\": \"story\", \"name\": \"story-wide\", \"model\": "
        "{\"layers\": [{\"type\": \"embedding\", \"dim\": 128},"
        " {\"type\": \"positional_embedding\"},"
        " {\"type\": \"transformer_block\", \"heads\": 4},"
        " {\"type\": \"transformer_block\", \"heads\": 4},"
        " {\"type\": \"transformer_block\", \"heads\": 4},"
        " {\"type\": \"transformer_block\", \"heads\": 4},"
        " {\"type\": \"layernorm\"}, {\"type\": \"lm_head\"}]},"
        " \"hyperparameters\": {\"context_length\": 128, \"batch_size\": 4,"
        " \"epochs\": 1, \"max_steps\": 1, \"seed\": 2}}");
    expect_status(r, 202);
    char job[64];
    snprintf(job, sizeof job, "%s", str(r->json, "id"));
    resp_free(r);
    json_t *j = wait_job(&server, job, 600);
    assert_string_equal(str(j, "status"), "succeeded");
    snprintf(wide_id, sizeof wide_id, "%s", str(j, "model"));
    json_decref(j);

    resp *m0 = http_get(&server, "/metrics");
    const double before = metric_sum(
        m0->body, "trainyard_generate_tokens_total", "kind=\"generated\"");
    resp_free(m0);
    stream_then_leave(wide_id, 16, 120);
    double busy = 1, generated = 0;
    const double until = now_seconds() + 60;
    do {
        usleep(50 * 1000);
        resp *m = http_get(&server, "/metrics");
        busy = metric_sum(m->body, "trainyard_generate_sequences", NULL) +
               metric_sum(m->body, "trainyard_generate_waiting", NULL) +
               metric_sum(m->body, "trainyard_generate_kv_blocks",
                          "state=\"used\"");
        generated = metric_sum(m->body, "trainyard_generate_tokens_total",
                               "kind=\"generated\"") -
                    before;
        resp_free(m);
    } while ((busy > 0 || generated == 0) && now_seconds() < until);
    fprintf(stderr, "after the client left: %.0f tokens generated of 1920\n",
            generated);
    assert_true(busy == 0);       /* nothing left running, waiting, held */
    assert_true(generated > 0);   /* it started */
    assert_true(generated < 960); /* and stopped well before the end */
}

static void test_refusals(void **state)
{
    (void)state;
    expect_422(generate("{\"parameters\": {}}"), "text_input", "required");
    expect_422(generate("{\"text_input\": \"x\", \"prompt\": 1}"), NULL,
               "prompt");
    expect_422(generate("{\"text_input\": \"\"}"), "text_input", "no token");
    expect_422(generate("{\"text_input\": \"x\", \"parameters\": "
                        "{\"temperature\": -1}}"),
               "parameters.temperature", NULL);
    expect_422(generate("{\"text_input\": \"x\", \"parameters\": "
                        "{\"top_p\": 0}}"),
               "parameters.top_p", NULL);
    expect_422(generate("{\"text_input\": \"x\", \"parameters\": "
                        "{\"max_tokens\": 40}}"),
               "parameters.max_tokens", "context of 32");
    expect_422(generate("{\"text_input\": \"x\", \"parameters\": "
                        "{\"stop\": [1]}}"),
               "parameters.stop", NULL);
    expect_422(generate("{\"text_input\": \"x\", \"parameters\": "
                        "{\"best_of\": 2}}"),
               NULL, "best_of");
    char longp[80] = "{\"text_input\": \"";
    for (int i = 0; i < 40; i++)
        strcat(longp, "a");
    strcat(longp, "\"}");
    expect_422(generate(longp), "text_input", "at most 31");
    resp *r = http_json(&server, "POST", "/v2/models/nope/generate",
                        "{\"text_input\": \"x\"}");
    assert_int_equal(r->status, 404);
    resp_free(r);
}

/* A generate_stream reply's events: their texts joined into text, the
 * last event's finish_reason into finish. 0, or -1 with what was wrong
 * in text (a bad event, an error event). No assertion: threads use it. */
static int parse_stream(const resp *r, char *text, size_t cap, char finish[16])
{
    text[0] = finish[0] = '\0';
    int rc = 0;
    char *save = NULL, *copy = strndup(r->body, r->len);
    for (char *ev = strtok_r(copy, "\n", &save); ev && !rc;
         ev = strtok_r(NULL, "\n", &save)) {
        json_t *o =
            strncmp(ev, "data: ", 6) ? NULL : json_loads(ev + 6, 0, NULL);
        if (!o || json_object_get(o, "error")) {
            snprintf(text, cap, "bad event: %.200s", ev);
            rc = -1;
        } else {
            strncat(text, str(o, "text_output"), cap - strlen(text) - 1);
            if (json_object_get(o, "finish_reason"))
                snprintf(finish, 16, "%s", str(o, "finish_reason"));
        }
        json_decref(o);
    }
    free(copy);
    return rc;
}

/* generate_stream of model: its text and finish reason. */
static void stream_text(const char *model, const char *body, char *text,
                        size_t cap, char finish[16])
{
    char path[160];
    snprintf(path, sizeof path, "/v2/models/%s/generate_stream", model);
    resp *r = http_json(&server, "POST", path, body);
    expect_status(r, 200);
    if (parse_stream(r, text, cap, finish) != 0)
        fail_msg("stream: %s", text);
    resp_free(r);
}

#define N_DEP_BODIES 3

/* OpenAI completions of model: the choices (texts, logprobs, finish
 * reasons), as JSON text (malloc'd). */
static char *completion_choices(const char *model)
{
    char body[320];
    snprintf(body, sizeof body,
             "{\"model\": \"%s\", \"prompt\": [\"the cat\", \"a dog \"], "
             "\"max_tokens\": 8, \"temperature\": 0.8, \"seed\": 3, "
             "\"logprobs\": 2, \"n\": 2, \"stop\": \".\"}",
             model);
    resp *r = http_json(&server, "POST", "/openai/v1/completions", body);
    expect_status(r, 200);
    char *t = json_dumps(json_object_get(r->json, "choices"), JSON_SORT_KEYS);
    resp_free(r);
    return t;
}

#define N_DEP_STREAMS 16

typedef struct {
    const char *body;
    char text[256], finish[16];
} dep_stream;

/* stream_text on a thread of its own: no assertion here (cmocka's are
 * the main thread's); what went wrong into text. */
static void *dep_stream_run(void *arg)
{
    dep_stream *d = arg;
    resp *r = http_json(&server, "POST", "/v2/models/story-dep/generate_stream",
                        d->body);
    if (r->status != 200) {
        d->text[0] = d->finish[0] = '\0';
        snprintf(d->text, sizeof d->text, "status %ld", r->status);
    } else {
        parse_stream(r, d->text, sizeof d->text, d->finish);
    }
    resp_free(r);
    return NULL;
}

static void test_deployed(void **state)
{
    (void)state;
    static const char *const bodies[N_DEP_BODIES] = {
        "{\"text_input\": \"the old k\", \"parameters\": "
        "{\"temperature\": 0, \"max_tokens\": 20}}",
        "{\"text_input\": \"the cat \", \"parameters\": "
        "{\"temperature\": 1.5, \"top_p\": 0.95, \"max_tokens\": 24, "
        "\"seed\": 7}}",
        "{\"text_input\": \"my friend \", \"parameters\": "
        "{\"temperature\": 1, \"top_k\": 5, \"max_tokens\": 20, "
        "\"seed\": 11, \"stop\": [\"e\", \"a\"]}}",
    };
    /* in the server first */
    char here[N_DEP_BODIES][256], fin[N_DEP_BODIES][16];
    for (int i = 0; i < N_DEP_BODIES; i++) {
        resp *r = generate(bodies[i]);
        expect_status(r, 200);
        snprintf(here[i], sizeof here[i], "%s", str(r->json, "text_output"));
        snprintf(fin[i], sizeof fin[i], "%s", str(r->json, "finish_reason"));
        resp_free(r);
    }
    assert_string_equal(fin[2], "stop");
    char *oai_here = completion_choices(model_id);

    char dpath[128];
    deploy_cpu_ready(&server, "story-dep", model_id, dpath);
    resp *r;

    /* on the replica: by the deployment's name and by the model's id */
    static const char *const refs[2] = {"story-dep", NULL};
    int sent = 0;
    for (int k = 0; k < 2; k++) {
        const char *ref = refs[k] ? refs[k] : model_id;
        char path[160];
        snprintf(path, sizeof path, "/v2/models/%s/generate", ref);
        for (int i = 0; i < N_DEP_BODIES; i++) {
            r = http_json(&server, "POST", path, bodies[i]);
            expect_status(r, 200);
            assert_string_equal(str(r->json, "text_output"), here[i]);
            assert_string_equal(str(r->json, "finish_reason"), fin[i]);
            resp_free(r);
            char text[256], finish[16];
            stream_text(ref, bodies[i], text, sizeof text, finish);
            assert_string_equal(text, here[i]);
            assert_string_equal(finish, fin[i]);
            sent += 2;
        }
    }
    /* many streams at once: each outlives the handler that opened it */
    pthread_t th[N_DEP_STREAMS];
    dep_stream ds[N_DEP_STREAMS];
    for (int i = 0; i < N_DEP_STREAMS; i++) {
        ds[i].body = bodies[i % N_DEP_BODIES];
        assert_int_equal(pthread_create(&th[i], NULL, dep_stream_run, &ds[i]),
                         0);
    }
    for (int i = 0; i < N_DEP_STREAMS; i++) {
        pthread_join(th[i], NULL);
        assert_string_equal(ds[i].text, here[i % N_DEP_BODIES]);
        assert_string_equal(ds[i].finish, fin[i % N_DEP_BODIES]);
    }
    sent += N_DEP_STREAMS;
    char *oai_there = completion_choices("story-dep");
    sent += 4; /* n 2 of 2 prompts: a sequence each */
    assert_string_equal(oai_there, oai_here);
    free(oai_here);
    free(oai_there);

    /* they did run on the replica */
    r = http_get(&server, dpath);
    expect_status(r, 200);
    const json_int_t counted = json_integer_value(
        json_object_get(json_object_get(r->json, "traffic"), "requests"));
    resp_free(r);
    if (counted < sent)
        fail_msg("the deployment counted %lld requests of %d",
                 (long long)counted, sent);
    /* and its generation figures: the tokens the server took from it */
    r = http_get(&server, dpath);
    const json_t *gen = json_object_get(r->json, "generate");
    assert_true(json_is_object(gen));
    assert_true(json_integer_value(json_object_get(gen, "requests")) >= sent);
    assert_true(json_integer_value(json_object_get(gen, "generated_tokens")) >
                0);
    assert_true(json_is_number(
        json_object_get(json_object_get(gen, "ttft_ms"), "p50")));
    assert_true(
        json_is_number(json_object_get(json_object_get(gen, "itl_ms"), "p99")));
    resp_free(r);
    /* the replica's cache is the server's --kv-cache (a CPU replica; on
     * a GPU or MIG slice the replica takes most of its free memory) */
    char pattern[PATH_MAX + 32];
    snprintf(pattern, sizeof pattern, "%s/jobs/rep_*/replica.json",
             server.data);
    glob_t g;
    assert_int_equal(glob(pattern, 0, NULL, &g), 0);
    assert_true(g.gl_pathc >= 1);
    json_t *rj = json_load_file(g.gl_pathv[0], 0, NULL);
    globfree(&g);
    assert_non_null(rj);
    assert_int_equal(json_integer_value(json_object_get(rj, "kv_cache_bytes")),
                     24576);
    json_decref(rj);
    r = http_do(&server, "DELETE", dpath, NULL, NULL, 0, NULL);
    resp_free(r);
}

/* The replica's engine, as the deployment shows its last heartbeat: 1
 * with *generated (tokens written since it started) and *busy (running
 * and waiting sequences), 0 before its first heartbeat. */
static int replica_engine(const char *dpath, long long *generated,
                          long long *busy)
{
    resp *r = http_get(&server, dpath);
    const json_t *g = json_object_get(
        json_array_get(json_object_get(r->json, "instances"), 0), "generate");
    int have = json_is_object(g);
    if (have) {
        *generated = json_integer_value(json_object_get(g, "generated_tokens"));
        *busy = json_integer_value(json_object_get(g, "sequences")) +
                json_integer_value(json_object_get(g, "waiting"));
    }
    resp_free(r);
    return have;
}

/* A streaming client of a deployed model that leaves stops its
 * sequences on the replica, not only in this server: the replica's
 * engine (its heartbeats' figures) wrote far fewer than the 1,920 tokens
 * asked for. The wide model's cache is one context (the budget is below
 * a block), so the 16 choices run one after another on the replica and a
 * replica that went on would write every one whole. */
static void test_deployed_disconnect(void **state)
{
    (void)state;
    assert_true(wide_id[0]);
    char dpath[128];
    deploy_cpu_ready(&server, "wide-dep", wide_id, dpath);
    long long before = 0, after = 0, busy = 1;
    double until = now_seconds() + 30;
    while (!replica_engine(dpath, &before, &busy) && now_seconds() < until)
        usleep(100 * 1000);
    if (now_seconds() >= until)
        fail_msg("the replica sent no heartbeat with its engine in 30 s");
    stream_then_leave("wide-dep", 16, 120);
    /* idle again, after it wrote something; then one more heartbeat */
    until = now_seconds() + 60;
    do {
        usleep(200 * 1000);
        replica_engine(dpath, &after, &busy);
    } while ((busy > 0 || after == before) && now_seconds() < until);
    assert_true(busy == 0);
    sleep(3); /* heartbeats every 2 s */
    replica_engine(dpath, &after, &busy);
    fprintf(stderr,
            "on the replica, after the client left: %lld tokens "
            "written of 1920\n",
            after - before);
    assert_true(busy == 0);
    assert_true(after > before);
    assert_true(after - before < 960);
    resp *r = http_do(&server, "DELETE", dpath, NULL, NULL, 0, NULL);
    resp_free(r);
}

/* The choices of an OpenAI completion of model over a list of prompts
 * (seeded sampling, logprobs), as a JSON array (a new reference). */
static char prefix_id[64];     /* test_prefix_cache's model */
static json_t *prefix_cold[2]; /* its choices with the cache cold */

#define P "\"the old king finds the castle. my friend sees \""
#define P2 "\"the old king finds the castle. my friend calls \""
#define X "\"a dog loves the moon. the cat sees the river. \""
#define WARM "[" P ", " P ", " P2 "]"

static json_t *prefix_choices(const char *model, const char *prompts)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"model\": \"%s\", \"prompt\": %s, \"max_tokens\": 16, "
             "\"temperature\": 1, \"seed\": 5, \"logprobs\": 2}",
             model, prompts);
    resp *r = http_json(&server, "POST", "/openai/v1/completions", body);
    expect_status(r, 200);
    json_t *c = json_incref(json_object_get(r->json, "choices"));
    resp_free(r);
    assert_int_equal(json_array_size(c), 3);
    return c;
}

static double prefix_tokens(const char *kind)
{
    char has[32];
    snprintf(has, sizeof has, "kind=\"%s\"", kind);
    resp *m = http_get(&server, "/metrics");
    double v = metric_sum(m->body,
                          "trainyard_generate_prefix_cache_tokens_total", has);
    resp_free(m);
    return v;
}

static void same_choice(json_t *cold, json_t *warm, size_t i)
{
    char *a = json_dumps(json_array_get(cold, i), JSON_SORT_KEYS);
    char *b = json_dumps(json_array_get(warm, i), JSON_SORT_KEYS);
    if (strcmp(a, b))
        fail_msg("choice %zu: cache cold %s, warm %s", i, a, b);
    free(a);
    free(b);
}

/* Prefix caching: prompts that begin with the same two blocks of 16
 * tokens share them. A model of its own with a context of 64 (4 blocks),
 * whose cache of 6 blocks holds one sequence at a time, so a request's
 * prompts run one after another and each finds the blocks of those
 * before. Its prompts P, P and P' (P's first 32 tokens, another ending)
 * write the texts and logprobs, bit for bit, that each writes with the
 * cache cold (after a prompt X that shares nothing, for the same choice
 * index: the same seeded stream), and the cache gave 2 x 32 tokens.
 * The same request again, after the engine went idle, finds all three
 * prompts' two blocks (3 x 32 tokens): the cache outlives its requests. */
static void test_prefix_cache(void **state)
{
    (void)state;
    resp *r = http_json(
        &server, "POST", "/v1/jobs",
        "{\"dataset\": \"story\", \"name\": \"story-prefix\", \"model\": "
        "{\"layers\": [{\"type\": \"embedding\", \"dim\": 32},"
        " {\"type\": \"positional_embedding\"},"
        " {\"type\": \"transformer_block\", \"heads\": 4},"
        " {\"type\": \"layernorm\"}, {\"type\": \"lm_head\"}]},"
        " \"hyperparameters\": {\"context_length\": 64, \"batch_size\": 4,"
        " \"epochs\": 1, \"max_steps\": 2, \"seed\": 2}}");
    expect_status(r, 202);
    char job[64];
    snprintf(job, sizeof job, "%s", str(r->json, "id"));
    resp_free(r);
    json_t *j = wait_job(&server, job, 600);
    assert_string_equal(str(j, "status"), "succeeded");
    snprintf(prefix_id, sizeof prefix_id, "%s", str(j, "model"));
    json_decref(j);
    prefix_cold[0] = prefix_choices(prefix_id, "[" X ", " P ", " X "]");
    prefix_cold[1] = prefix_choices(prefix_id, "[" X ", " X ", " P2 "]");
    const double hit0 = prefix_tokens("hit");
    const double computed0 = prefix_tokens("computed");
    json_t *warm = prefix_choices(prefix_id, WARM);
    const double hit = prefix_tokens("hit") - hit0;
    const double computed = prefix_tokens("computed") - computed0;
    fprintf(stderr, "prefix cache: %.0f prompt tokens hit, %.0f computed\n",
            hit, computed);
    same_choice(prefix_cold[0], warm, 1);
    same_choice(prefix_cold[1], warm, 2);
    assert_true(hit >= 64); /* choices 1 and 2: two blocks each */
    assert_true(computed > 0);
    json_decref(warm);
    /* idle between: the blocks are cached, not forgotten */
    const double hit1 = prefix_tokens("hit");
    warm = prefix_choices(prefix_id, WARM);
    const double again = prefix_tokens("hit") - hit1;
    fprintf(stderr, "prefix cache after idle: %.0f prompt tokens hit\n", again);
    same_choice(prefix_cold[0], warm, 1);
    same_choice(prefix_cold[1], warm, 2);
    assert_true(again >= 96); /* all three choices: two blocks each */
    json_decref(warm);
}

/* The prefix cache value a deployment's first instance reported with
 * its last heartbeat (-1: none yet). */
static long long replica_prefix_hits(const char *dpath)
{
    resp *r = http_get(&server, dpath);
    const json_t *g = json_object_get(
        json_array_get(json_object_get(r->json, "instances"), 0), "generate");
    const json_t *v = json_object_get(g, "prefix_cache_hit_tokens");
    long long n = json_is_integer(v) ? json_integer_value(v) : -1;
    resp_free(r);
    return n;
}

/* Deployed, the replica's engine caches prefixes too: the same request
 * by the deployment's name writes the choices the server wrote with the
 * cache cold, and the replica's heartbeats count the tokens its cache
 * gave. Each choice reaches the replica on a connection of its own; its
 * cache outlives its requests, so a second request finds the first's
 * blocks whatever the choices' timing. The request is made up to five
 * times (the same choices each time) until a heartbeat shows the hits;
 * code without the cache never counts any. Once the replica is idle, the
 * deployment's generate section gives its blocks used, cached and in all:
 * the sums of its instances' (with some cached). */
static void test_prefix_cache_deployed(void **state)
{
    (void)state;
    assert_true(prefix_id[0] && prefix_cold[0] && prefix_cold[1]);
    char dpath[128];
    deploy_cpu_ready(&server, "prefix-dep", prefix_id, dpath);
    long long before = -1, after = -1;
    double until = now_seconds() + 30;
    while ((before = replica_prefix_hits(dpath)) < 0 && now_seconds() < until)
        usleep(100 * 1000);
    if (before < 0)
        fail_msg("the replica reported no prefix cache figure in 30 s");
    int tries = 0;
    do {
        json_t *warm = prefix_choices("prefix-dep", WARM);
        same_choice(prefix_cold[0], warm, 1);
        same_choice(prefix_cold[1], warm, 2);
        json_decref(warm);
        tries++;
        until = now_seconds() + 5; /* heartbeats every 2 s */
        do {
            usleep(200 * 1000);
            after = replica_prefix_hits(dpath);
        } while (after == before && now_seconds() < until);
    } while (after == before && tries < 5);
    fprintf(stderr,
            "on the replica: %lld prompt tokens from the cache (%d "
            "requests)\n",
            after - before, tries);
    assert_true(after - before >= 32); /* two blocks, at least once */
    /* The deployment's generate section sums its replicas' cache blocks
     * (used, cached, total), as their heartbeats said; once idle, the
     * blocks of the prompts stay cached. */
    json_t *doc = NULL;
    long long used = -1, cached = 0, total = 0, busy = 1;
    until = now_seconds() + 10;
    do {
        json_decref(doc);
        usleep(200 * 1000);
        resp *g = http_get(&server, dpath);
        expect_status(g, 200);
        doc = json_incref(g->json);
        resp_free(g);
        used = cached = total = busy = 0;
        size_t i;
        json_t *it;
        json_array_foreach (json_object_get(doc, "instances"), i, it) {
            const json_t *e = json_object_get(it, "generate");
            used += json_integer_value(json_object_get(e, "kv_blocks_used"));
            cached +=
                json_integer_value(json_object_get(e, "kv_blocks_cached"));
            total += json_integer_value(json_object_get(e, "kv_blocks_total"));
            busy += json_integer_value(json_object_get(e, "sequences")) +
                    json_integer_value(json_object_get(e, "waiting"));
        }
    } while ((busy || cached == 0) && now_seconds() < until);
    const json_t *gen = json_object_get(doc, "generate");
    fprintf(
        stderr,
        "the deployment's cache: %lld blocks used, %lld cached, %lld in "
        "all\n",
        (long long)json_integer_value(json_object_get(gen, "kv_blocks_used")),
        (long long)json_integer_value(json_object_get(gen, "kv_blocks_cached")),
        (long long)json_integer_value(json_object_get(gen, "kv_blocks_total")));
    assert_true(busy == 0 && cached > 0 && used + cached <= total);
    assert_true(json_is_integer(json_object_get(gen, "kv_blocks_cached")));
    assert_int_equal(json_integer_value(json_object_get(gen, "kv_blocks_used")),
                     used);
    assert_int_equal(
        json_integer_value(json_object_get(gen, "kv_blocks_cached")), cached);
    assert_int_equal(
        json_integer_value(json_object_get(gen, "kv_blocks_total")), total);
    json_decref(doc);
    /* /metrics has the same (the replica idle: no heartbeat moved them) */
    char dep_label[160];
    snprintf(dep_label, sizeof dep_label, "deployment=\"%s\"",
             strrchr(dpath, '/') + 1);
    resp *m = http_get(&server, "/metrics");
    char cached_label[200];
    snprintf(cached_label, sizeof cached_label, "%s,state=\"cached\"",
             dep_label);
    const double cached_metric = metric_sum(
        m->body, "trainyard_deployment_generate_kv_blocks", cached_label);
    resp_free(m);
    assert_true(cached_metric == (double)cached);
    resp *r = http_do(&server, "DELETE", dpath, NULL, NULL, 0, NULL);
    resp_free(r);
    json_decref(prefix_cold[0]);
    json_decref(prefix_cold[1]);
}

#undef P
#undef P2
#undef X
#undef WARM

/* ---- a rolling update in the middle of a generation ---- */

#define ROLL_N 16    /* the stream's choices */
#define ROLL_MAX 120 /* tokens each: 1,920, one choice at a time */
#define ROLL_STREAM                                                   \
    "{\"model\": \"%s\", \"prompt\": \"the \", \"max_tokens\": 120, " \
    "\"n\": 16, \"temperature\": 1, \"seed\": 3, \"stream\": true, "  \
    "\"stream_options\": {\"include_usage\": true}}"
#define ROLL_SHORT                                                         \
    "{\"text_input\": \"the cat \", \"parameters\": {\"temperature\": 0, " \
    "\"max_tokens\": 6}}"

/* A completion stream's choices, joined per index, and its end. */
typedef struct {
    char text[ROLL_N][2048]; /* bytes: an untrained model writes NULs too */
    size_t len[ROLL_N];
    char finish[ROLL_N][16];
    long completion_tokens; /* the usage chunk's; -1: none */
    int done;               /* it ended with data: [DONE] */
    char bad[256];          /* the first thing wrong, "" when none */
} roll_stream;

static void roll_parse(const resp *r, roll_stream *o)
{
    memset(o, 0, sizeof *o);
    o->completion_tokens = -1;
    if (r->status != 200) {
        snprintf(o->bad, sizeof o->bad, "status %ld: %.200s", r->status,
                 r->body ? r->body : "");
        return;
    }
    char *save = NULL, *copy = strndup(r->body, r->len);
    for (char *ev = strtok_r(copy, "\n", &save); ev && !o->bad[0];
         ev = strtok_r(NULL, "\n", &save)) {
        if (o->done) {
            snprintf(o->bad, sizeof o->bad, "after [DONE]: %.200s", ev);
            break;
        }
        if (!strcmp(ev, "data: [DONE]")) {
            o->done = 1;
            continue;
        }
        json_t *c = strncmp(ev, "data: ", 6)
                        ? NULL
                        : json_loads(ev + 6, JSON_ALLOW_NUL, NULL);
        if (!c || json_object_get(c, "error")) {
            snprintf(o->bad, sizeof o->bad, "bad event: %.200s", ev);
            json_decref(c);
            break;
        }
        size_t i;
        json_t *ch;
        json_array_foreach (json_object_get(c, "choices"), i, ch) {
            json_int_t k = json_integer_value(json_object_get(ch, "index"));
            if (k < 0 || k >= ROLL_N) {
                snprintf(o->bad, sizeof o->bad, "choice %lld", (long long)k);
                break;
            }
            const json_t *t = json_object_get(ch, "text");
            const size_t n = json_string_length(t);
            if (o->len[k] + n > sizeof o->text[k]) {
                snprintf(o->bad, sizeof o->bad, "choice %lld: too long",
                         (long long)k);
                break;
            }
            memcpy(o->text[k] + o->len[k], json_string_value(t), n);
            o->len[k] += n;
            if (json_is_string(json_object_get(ch, "finish_reason")))
                snprintf(o->finish[k], sizeof o->finish[k], "%s",
                         str(ch, "finish_reason"));
        }
        const json_t *u = json_object_get(c, "usage");
        if (json_is_object(u))
            o->completion_tokens = (long)json_integer_value(
                json_object_get(u, "completion_tokens"));
        json_decref(c);
    }
    free(copy);
}

/* A generate reply's model_name and text_output (as JSON text: an
 * untrained model writes NULs too) into model and text (64 bytes each);
 * 0, or -1 when the body is no such reply. */
static int roll_reply(const resp *r, char *model, char *text)
{
    json_t *j =
        json_loadb(r->body ? r->body : "", r->len, JSON_ALLOW_NUL, NULL);
    const json_t *t = json_object_get(j, "text_output");
    const char *m = json_string_value(json_object_get(j, "model_name"));
    char *d = t ? json_dumps(t, JSON_ENCODE_ANY) : NULL;
    snprintf(model, 64, "%s", m ? m : "");
    snprintf(text, 64, "%s", d ? d : "");
    free(d);
    json_decref(j);
    return t && m ? 0 : -1;
}

typedef struct {
    const char *model;
    resp *r;
    double t0, t1; /* when it was sent and when it ended */
    atomic_int finished;
} roll_call;

static void *roll_stream_run(void *arg)
{
    roll_call *c = arg;
    char body[320];
    snprintf(body, sizeof body, ROLL_STREAM, c->model);
    c->t0 = now_seconds();
    c->r = http_json(&server, "POST", "/openai/v1/completions", body);
    c->t1 = now_seconds();
    atomic_store(&c->finished, 1);
    return NULL;
}

/* Short greedy generations by the deployment's name until stop, each
 * reply's status, model and text kept (the first 512). */
typedef struct {
    atomic_int *stop;
    int n, n5xx, nother;
    long bad_status;
    char bad_body[256];
    struct {
        double t0;
        char model[64], text[64];
    } rec[512];
} roll_loader;

static void *roll_load_run(void *arg)
{
    roll_loader *l = arg;
    while (!atomic_load(l->stop)) {
        const double t0 = now_seconds();
        resp *r = http_json(&server, "POST", "/v2/models/roll-gen/generate",
                            ROLL_SHORT);
        if (r->status != 200) {
            if (r->status >= 500 || r->status < 0)
                l->n5xx++;
            else
                l->nother++;
            if (!l->bad_status) {
                l->bad_status = r->status;
                snprintf(l->bad_body, sizeof l->bad_body, "%.200s",
                         r->body ? r->body : "");
            }
        } else if (l->n < 512) {
            l->rec[l->n].t0 = t0;
            roll_reply(r, l->rec[l->n].model, l->rec[l->n].text);
        }
        l->n += r->status == 200;
        resp_free(r);
        usleep(20 * 1000);
    }
    return NULL;
}

/* The instance of generation gen in doc: its state and in_flight (0 when
 * none). */
static int roll_instance(const json_t *doc, int gen, char state[32],
                         long *in_flight)
{
    size_t i;
    json_t *it;
    json_array_foreach (json_object_get(doc, "instances"), i, it) {
        if (json_integer_value(json_object_get(it, "generation")) != gen)
            continue;
        snprintf(state, 32, "%s", str(it, "state") ? str(it, "state") : "");
        *in_flight = (long)json_integer_value(json_object_get(it, "in_flight"));
        return 1;
    }
    return 0;
}

/* Whether every instance is of generation gen and ready, and there are
 * as many as desired. */
static int roll_done(const json_t *doc, int gen)
{
    size_t i;
    json_t *it;
    int n = 0, ok = 0;
    json_array_foreach (json_object_get(doc, "instances"), i, it) {
        n++;
        ok += json_integer_value(json_object_get(it, "generation")) == gen &&
              !strcmp(str(it, "state"), "ready");
    }
    return n > 0 && n == ok && !strcmp(str(doc, "status"), "ready");
}

static void model_name_of(const char *id, char *out, size_t cap)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/models/%s", id);
    resp *r = http_get(&server, path);
    expect_status(r, 200);
    snprintf(out, cap, "%s", str(r->json, "name") ? str(r->json, "name") : id);
    resp_free(r);
}

/* A rolling update while a deployment streams a long generation: the
 * deployment serves a slow untrained model (A: 16 choices of 120 tokens,
 * one at a time in its cache of one context); once the stream holds the
 * replica, a PATCH moves it to the small story model (B). The stream
 * completes whole: every choice its 120 tokens, finish_reason "length",
 * the text the server writes for the same seeded request, the usage
 * chunk and [DONE], no error event. Its replica was seen draining while
 * the stream was open and stays until the stream ends (a replica drains
 * only once its requests and generations are over). Short generations
 * by the deployment's name all through the update get 200s (never a
 * 5xx), each from the model its reply names; after the switch, from B.
 * No timing is asserted: the polls are bounded only, and the round is
 * rerun (at most 3 times, after a PATCH back to A) when the stream ended
 * before the update began draining its replica. */
static void test_rolling_update_mid_stream(void **state)
{
    (void)state;
    assert_true(model_id[0]);
    /* A: slow enough that its stream outlasts a CPU replica's start
     * (about 6 times the wide model's work a token) */
    resp *r = http_json(
        &server, "POST", "/v1/jobs",
        "{\"dataset\": \"story\", \"name\": \"story-slow\", \"model\": "
        "{\"layers\": [{\"type\": \"embedding\", \"dim\": 256},"
        " {\"type\": \"positional_embedding\"},"
        " {\"type\": \"transformer_block\", \"heads\": 4},"
        " {\"type\": \"transformer_block\", \"heads\": 4},"
        " {\"type\": \"transformer_block\", \"heads\": 4},"
        " {\"type\": \"transformer_block\", \"heads\": 4},"
        " {\"type\": \"transformer_block\", \"heads\": 4},"
        " {\"type\": \"transformer_block\", \"heads\": 4},"
        " {\"type\": \"layernorm\"}, {\"type\": \"lm_head\"}]},"
        " \"hyperparameters\": {\"context_length\": 128, \"batch_size\": 4,"
        " \"epochs\": 1, \"max_steps\": 1, \"seed\": 2}}");
    expect_status(r, 202);
    char job[64], slow_id[64];
    snprintf(job, sizeof job, "%s", str(r->json, "id"));
    resp_free(r);
    json_t *j = wait_job(&server, job, 600);
    assert_string_equal(str(j, "status"), "succeeded");
    snprintf(slow_id, sizeof slow_id, "%s", str(j, "model"));
    json_decref(j);
    const char *a_id = slow_id; /* A */
    char name_a[64], name_b[64];
    model_name_of(a_id, name_a, sizeof name_a);
    model_name_of(model_id, name_b, sizeof name_b);
    /* the references, in the server before the deployment exists */
    char body[320];
    snprintf(body, sizeof body, ROLL_STREAM, a_id);
    double t = now_seconds();
    r = http_json(&server, "POST", "/openai/v1/completions", body);
    const double stream_s = now_seconds() - t;
    roll_stream want;
    roll_parse(r, &want);
    resp_free(r);
    if (want.bad[0])
        fail_msg("the reference stream: %s", want.bad);
    char short_a[64], short_b[64];
    const char *ids[2] = {a_id, model_id};
    char *shorts[2] = {short_a, short_b};
    for (int k = 0; k < 2; k++) {
        char path[160];
        snprintf(path, sizeof path, "/v2/models/%s/generate", ids[k]);
        r = http_json(&server, "POST", path, ROLL_SHORT);
        expect_status(r, 200);
        char ignore[64];
        assert_int_equal(roll_reply(r, ignore, shorts[k]), 0);
        resp_free(r);
    }
    char dpath[128];
    deploy_cpu_ready(&server, "roll-gen", a_id, dpath);

    fprintf(stderr, "the stream took %.1f s in the server\n", stream_s);
    r = http_get(&server, dpath);
    int gen = (int)json_integer_value(json_object_get(r->json, "generation"));
    resp_free(r);
    int straddled = 0;
    for (int round = 0; round < 3 && !straddled; round++) {
        if (round) { /* back to A for another try, unchecked */
            char back[128];
            snprintf(back, sizeof back, "{\"model\": \"%s\"}", a_id);
            r = http_json(&server, "PATCH", dpath, back);
            expect_status(r, 200);
            gen =
                (int)json_integer_value(json_object_get(r->json, "generation"));
            resp_free(r);
            double until = now_seconds() + 120;
            int back_done = 0;
            while (!back_done && now_seconds() < until) {
                r = http_get(&server, dpath);
                back_done = r->status == 200 && roll_done(r->json, gen);
                resp_free(r);
                usleep(100 * 1000);
            }
            assert_true(back_done);
        }
        const char *to = model_id, *to_name = name_b, *to_short = short_b;
        roll_call call = {.model = "roll-gen"};
        atomic_int stop = 0;
        roll_loader *l = calloc(1, sizeof *l);
        assert_non_null(l);
        l->stop = &stop;
        pthread_t ts, tl;
        assert_int_equal(pthread_create(&ts, NULL, roll_stream_run, &call), 0);
        /* the stream holds the replica before the update */
        double until = now_seconds() + 60;
        char st[32] = "";
        long in_flight = 0;
        while (!atomic_load(&call.finished) && now_seconds() < until) {
            r = http_get(&server, dpath);
            int have =
                r->status == 200 && roll_instance(r->json, gen, st, &in_flight);
            resp_free(r);
            if (have && in_flight > 0)
                break;
            usleep(20 * 1000);
        }
        assert_int_equal(pthread_create(&tl, NULL, roll_load_run, l), 0);
        char patch[128];
        snprintf(patch, sizeof patch, "{\"model\": \"%s\"}", to);
        t = now_seconds();
        r = http_json(&server, "PATCH", dpath, patch);
        const int patched =
            r->status == 200 &&
            json_integer_value(json_object_get(r->json, "generation")) ==
                gen + 1;
        if (!patched)
            fprintf(stderr, "PATCH: %ld %s\n", r->status, r->body);
        resp_free(r);
        /* until the stream ends and the update is done: whether the old
         * replica was draining, still holding the stream, while it ran */
        int seen_draining = 0, rolled = 0;
        double t_switch = -1;
        until = now_seconds() + 180;
        while (patched && (!atomic_load(&call.finished) || !rolled) &&
               now_seconds() < until) {
            const int open = !atomic_load(&call.finished);
            r = http_get(&server, dpath);
            if (r->status == 200) {
                if (roll_instance(r->json, gen, st, &in_flight) && open &&
                    !strcmp(st, "draining") && in_flight > 0 &&
                    !atomic_load(&call.finished))
                    seen_draining = 1;
                if (!rolled && roll_done(r->json, gen + 1)) {
                    rolled = 1;
                    t_switch = now_seconds();
                }
            }
            resp_free(r);
            usleep(50 * 1000);
        }
        const double roll_s = t_switch > 0 ? t_switch - t : -1;
        /* a few requests after the switch */
        const int n_at_switch = l->n;
        until = now_seconds() + 30;
        while (l->n < n_at_switch + 3 && now_seconds() < until)
            usleep(20 * 1000);
        atomic_store(&stop, 1);
        pthread_join(tl, NULL);
        pthread_join(ts, NULL);
        fprintf(stderr,
                "round %d: stream %s while the update %s the old replica; "
                "stream %.1f s, updated in %.1f s; %d short requests (%d "
                "5xx, %d other)\n",
                round + 1, seen_draining ? "open" : "over",
                seen_draining ? "drained" : "had not drained",
                call.t1 - call.t0, roll_s, l->n, l->n5xx, l->nother);
        if (l->bad_status)
            fprintf(stderr, "a short request: %ld %s\n", l->bad_status,
                    l->bad_body);
        assert_true(patched);
        assert_true(rolled);
        /* the stream: whole, and what the server writes for it */
        roll_stream got;
        roll_parse(call.r, &got);
        resp_free(call.r);
        if (got.bad[0])
            fail_msg("round %d: the stream: %s", round + 1, got.bad);
        assert_true(got.done);
        assert_int_equal(got.completion_tokens, ROLL_N * ROLL_MAX);
        for (int i = 0; i < ROLL_N; i++) {
            assert_string_equal(got.finish[i], "length");
            assert_string_equal(got.finish[i], want.finish[i]);
            if (got.len[i] != want.len[i] ||
                memcmp(got.text[i], want.text[i], got.len[i]))
                fail_msg("round %d, choice %d: %zu bytes, in the server %zu "
                         "(or others)",
                         round + 1, i, got.len[i], want.len[i]);
        }
        /* no short request failed; each came from the model it names,
         * and those sent after the switch from the new one */
        assert_int_equal(l->n5xx, 0);
        assert_int_equal(l->nother, 0);
        assert_true(l->n > n_at_switch);
        int n = l->n < 512 ? l->n : 512;
        for (int i = 0; i < n; i++) {
            const int is_a = !strcmp(l->rec[i].model, name_a) &&
                             !strcmp(l->rec[i].text, short_a);
            const int is_b = !strcmp(l->rec[i].model, name_b) &&
                             !strcmp(l->rec[i].text, short_b);
            if (!is_a && !is_b)
                fail_msg("a reply names %s and says \"%s\" (A %s: \"%s\", B "
                         "%s: \"%s\")",
                         l->rec[i].model, l->rec[i].text, name_a, short_a,
                         name_b, short_b);
            if (l->rec[i].t0 > t_switch && (strcmp(l->rec[i].model, to_name) ||
                                            strcmp(l->rec[i].text, to_short)))
                fail_msg("after the switch, a reply from %s", l->rec[i].model);
        }
        free(l);
        straddled = seen_draining;
        gen++;
    }
    assert_true(straddled);
    r = http_do(&server, "DELETE", dpath, NULL, NULL, 0, NULL);
    resp_free(r);
}

/* A generation by the deployment's name, on a thread: its reply. */
typedef struct {
    resp *r;
} retry_call;

static void *retry_gen_run(void *arg)
{
    retry_call *c = arg;
    c->r =
        http_json(&server, "POST", "/v2/models/retry-gen/generate", ROLL_SHORT);
    return NULL;
}

/* ROLL_SHORT as an OpenAI completion of model (serve_gen_wait_all's way):
 * the body, in 256 bytes. */
static const char *retry_oai_body(const char *model, char *body)
{
    snprintf(body, 256,
             "{\"model\": \"%s\", \"prompt\": \"the cat \", "
             "\"max_tokens\": 6, \"temperature\": 0}",
             model);
    return body;
}

static void *retry_oai_run(void *arg)
{
    retry_call *c = arg;
    char body[256];
    c->r = http_json(&server, "POST", "/openai/v1/completions",
                     retry_oai_body("retry-gen", body));
    return NULL;
}

/* An OpenAI completion's first choice's text, as JSON text (64 bytes). */
static void retry_oai_text(const resp *r, char *text)
{
    json_t *j =
        json_loadb(r->body ? r->body : "", r->len, JSON_ALLOW_NUL, NULL);
    const json_t *t = json_object_get(
        json_array_get(json_object_get(j, "choices"), 0), "text");
    char *d = t ? json_dumps(t, JSON_ENCODE_ANY) : NULL;
    snprintf(text, 64, "%s", d ? d : "");
    free(d);
    json_decref(j);
}

/* The id and state of the instance of generation gen in doc (0 when
 * none): id (64 bytes), state (32). */
static int retry_instance(const json_t *doc, int gen, char *id, char *state,
                          long *in_flight)
{
    size_t i;
    json_t *it;
    json_array_foreach (json_object_get(doc, "instances"), i, it) {
        if (json_integer_value(json_object_get(it, "generation")) != gen)
            continue;
        snprintf(id, 64, "%s", str(it, "id") ? str(it, "id") : "");
        snprintf(state, 32, "%s", str(it, "state") ? str(it, "state") : "");
        *in_flight = (long)json_integer_value(json_object_get(it, "in_flight"));
        return 1;
    }
    return 0;
}

/* A replica that fails before the first token after its deployment was
 * rolled to another model: the generation is retried as one that opened
 * the old model then would be, here in the server on that model (it used
 * to answer 404 "no longer serves model", or fail again on the dead
 * replica). The deployment serves the wide model (A) on one replica,
 * held with SIGSTOP; a short generation by the deployment's name opens A
 * and waits on it; a PATCH moves the deployment to the story model (B);
 * once B's replica is ready and A's drains, A's is killed. The reply is
 * 200, names A and holds the text the server writes for A; so does an
 * OpenAI completion by the deployment's name sent beside it. */
static void test_retry_after_rollout(void **state)
{
    (void)state;
    assert_true(wide_id[0]);
    const char *a_id = wide_id;
    char name_a[64], want[64], got_model[64], got_text[64], path[160];
    model_name_of(a_id, name_a, sizeof name_a);
    snprintf(path, sizeof path, "/v2/models/%s/generate", a_id);
    resp *r = http_json(&server, "POST", path, ROLL_SHORT);
    expect_status(r, 200);
    assert_int_equal(roll_reply(r, got_model, want), 0);
    resp_free(r);
    char oai_body[256], want_oai[64], got_oai[64];
    r = http_json(&server, "POST", "/openai/v1/completions",
                  retry_oai_body(a_id, oai_body));
    expect_status(r, 200);
    retry_oai_text(r, want_oai);
    resp_free(r);
    char dpath[128];
    deploy_cpu_ready(&server, "retry-gen", a_id, dpath);
    r = http_get(&server, dpath);
    const int gen =
        (int)json_integer_value(json_object_get(r->json, "generation"));
    char rep[64], st[32];
    long in_flight = 0;
    assert_true(retry_instance(r->json, gen, rep, st, &in_flight));
    resp_free(r);
    const pid_t pid = find_child(&server, "replica", rep);
    assert_true(pid > 0);
    assert_int_equal(kill(pid, SIGSTOP), 0);

    /* the requests hold A's replica */
    retry_call call = {0}, oai = {0};
    pthread_t th, th_oai;
    assert_int_equal(pthread_create(&th, NULL, retry_gen_run, &call), 0);
    assert_int_equal(pthread_create(&th_oai, NULL, retry_oai_run, &oai), 0);
    double until = now_seconds() + 30;
    in_flight = 0;
    while (in_flight < 2 && now_seconds() < until) {
        r = http_get(&server, dpath);
        if (r->status == 200)
            retry_instance(r->json, gen, rep, st, &in_flight);
        resp_free(r);
        usleep(20 * 1000);
    }
    if (in_flight < 2)
        kill(pid, SIGCONT);
    assert_int_equal(in_flight, 2);

    /* rolled to B: B's replica ready, A's draining (the request holds it) */
    char patch[128];
    snprintf(patch, sizeof patch, "{\"model\": \"%s\"}", model_id);
    r = http_json(&server, "PATCH", dpath, patch);
    expect_status(r, 200);
    resp_free(r);
    int rolled = 0;
    until = now_seconds() + 120;
    while (!rolled && now_seconds() < until) {
        char rep_b[64], st_b[32];
        long ignore;
        r = http_get(&server, dpath);
        rolled = r->status == 200 &&
                 retry_instance(r->json, gen + 1, rep_b, st_b, &ignore) &&
                 !strcmp(st_b, "ready") &&
                 retry_instance(r->json, gen, rep, st, &ignore) &&
                 !strcmp(st, "draining");
        resp_free(r);
        if (!rolled)
            usleep(50 * 1000);
    }
    /* the old replica fails before its first token */
    assert_int_equal(kill(pid, SIGKILL), 0);
    pthread_join(th, NULL);
    pthread_join(th_oai, NULL);
    assert_true(rolled);
    if (call.r->status != 200)
        fail_msg("after the rollout, the retried generation: %ld %.300s",
                 call.r->status, call.r->body ? call.r->body : "");
    assert_int_equal(roll_reply(call.r, got_model, got_text), 0);
    assert_string_equal(got_model, name_a);
    assert_string_equal(got_text, want);
    resp_free(call.r);
    if (oai.r->status != 200)
        fail_msg("after the rollout, the retried completion: %ld %.300s",
                 oai.r->status, oai.r->body ? oai.r->body : "");
    retry_oai_text(oai.r, got_oai);
    assert_string_equal(got_oai, want_oai);
    resp_free(oai.r);
    r = http_do(&server, "DELETE", dpath, NULL, NULL, 0, NULL);
    resp_free(r);
}

#undef ROLL_N
#undef ROLL_MAX
#undef ROLL_STREAM
#undef ROLL_SHORT

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_is_predicts_chain),
        cmocka_unit_test(test_stop_and_length),
        cmocka_unit_test(test_seeded_sampling),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_disconnect_cancels),
        cmocka_unit_test(test_batched_as_alone),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_deployed),
        cmocka_unit_test(test_deployed_disconnect),
        cmocka_unit_test(test_prefix_cache),
        cmocka_unit_test(test_prefix_cache_deployed),
        cmocka_unit_test(test_rolling_update_mid_stream),
        cmocka_unit_test(test_retry_after_rollout),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
