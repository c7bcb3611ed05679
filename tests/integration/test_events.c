/*
 * Integration tests for live events (Server-Sent Events): GET /v1/events
 * and GET /v1/jobs/{id}/events against a real server.
 *
 * The streams are read with a small raw-socket SSE client (below): HTTP/1.1,
 * chunked transfer decoding, events split on blank lines, comments
 * skipped. It reads with timeouts so that a missing event fails the test
 * instead of hanging it; nothing asserts how fast anything is.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/fsutil.h"
#include "harness.h"

#define WAIT_S 60.0 /* how long a test waits for an event before failing */

static srv server; /* its key is the admin's (tenant "a" below) */
static srv as_b;   /* the same server with another tenant's key */
static char files[PATH_MAX];
static char ds_a[64], ds_b[64];

/* ---- a small SSE client ---- */

typedef struct {
    int fd;
    int status;
    int chunked;
    char raw[1 << 16]; /* received, not yet decoded */
    size_t raw_len;
    char *body; /* decoded body */
    size_t body_len, body_cap, body_off;
    long chunk_left;
    int need_crlf;
    int done; /* the last chunk came */
    int eof;  /* the server closed the connection */
} sse;

typedef struct {
    uint64_t id;
    char type[32];
    json_t *data; /* NULL when the data was not JSON */
} sse_event;

static void body_append(sse *c, const char *p, size_t n)
{
    if (c->body_len + n + 1 > c->body_cap) {
        size_t cap = c->body_cap ? c->body_cap * 2 : 65536;
        while (cap < c->body_len + n + 1)
            cap *= 2;
        c->body = realloc(c->body, cap);
        assert_non_null(c->body);
        c->body_cap = cap;
    }
    memcpy(c->body + c->body_len, p, n);
    c->body_len += n;
    c->body[c->body_len] = '\0';
}

/* Moves what raw holds of the chunked body into body. */
static void dechunk(sse *c)
{
    size_t p = 0;
    if (!c->chunked) {
        body_append(c, c->raw, c->raw_len);
        c->raw_len = 0;
        return;
    }
    for (;;) {
        if (c->chunk_left > 0) {
            size_t k = c->raw_len - p;
            if (k > (size_t)c->chunk_left)
                k = (size_t)c->chunk_left;
            if (k == 0)
                break;
            body_append(c, c->raw + p, k);
            p += k;
            c->chunk_left -= (long)k;
            if (c->chunk_left == 0)
                c->need_crlf = 1;
            continue;
        }
        if (c->need_crlf) {
            if (c->raw_len - p < 2)
                break;
            p += 2;
            c->need_crlf = 0;
            continue;
        }
        if (c->done)
            break;
        char *nl = memmem(c->raw + p, c->raw_len - p, "\r\n", 2);
        if (!nl)
            break;
        long n = strtol(c->raw + p, NULL, 16);
        p = (size_t)(nl - c->raw) + 2;
        if (n == 0) {
            c->done = 1;
            break;
        }
        c->chunk_left = n;
    }
    memmove(c->raw, c->raw + p, c->raw_len - p);
    c->raw_len -= p;
}

/* Reads what arrives within timeout_s: 1 data, 0 nothing, -1 closed. */
static int sse_recv(sse *c, double timeout_s)
{
    struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
    int rc = poll(&pfd, 1, (int)(timeout_s * 1000));
    if (rc <= 0)
        return 0;
    ssize_t n = recv(c->fd, c->raw + c->raw_len, sizeof c->raw - c->raw_len, 0);
    if (n <= 0) {
        c->eof = 1;
        return -1;
    }
    c->raw_len += (size_t)n;
    return 1;
}

/* Opens a stream: GET path with key (NULL: the admin's) and, when not
 * NULL, Last-Event-ID. Reads the status line and headers. */
static sse *sse_open(const srv *s, const char *path, const char *key,
                     const char *last_id)
{
    sse *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(c->fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)s->port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(connect(c->fd, (struct sockaddr *)&a, sizeof a), 0);
    char req[1024], lid[128] = "";
    if (last_id)
        snprintf(lid, sizeof lid, "Last-Event-ID: %s\r\n", last_id);
    int n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: "
                     "text/event-stream\r\nAuthorization: Bearer %s\r\n%s\r\n",
                     path, key ? key : s->key, lid);
    assert_int_equal(send(c->fd, req, (size_t)n, MSG_NOSIGNAL), n);
    double until = now_seconds() + WAIT_S;
    char *end;
    while (!(end = memmem(c->raw, c->raw_len, "\r\n\r\n", 4))) {
        assert_true(now_seconds() < until);
        assert_true(sse_recv(c, 1.0) >= 0);
    }
    *end = '\0';
    assert_int_equal(sscanf(c->raw, "HTTP/1.1 %d", &c->status), 1);
    c->chunked = strcasestr(c->raw, "Transfer-Encoding: chunked") != NULL;
    if (c->status == 200)
        assert_non_null(strcasestr(c->raw, "Content-Type: text/event-stream"));
    size_t hl = (size_t)(end - c->raw) + 4;
    memmove(c->raw, c->raw + hl, c->raw_len - hl);
    c->raw_len -= hl;
    dechunk(c);
    return c;
}

static void sse_close(sse *c)
{
    if (!c)
        return;
    close(c->fd);
    free(c->body);
    free(c);
}

static void event_clear(sse_event *e)
{
    json_decref(e->data);
    memset(e, 0, sizeof *e);
}

/* The next event (comments skipped) within timeout_s: 1, 0 on timeout,
 * -1 when the stream ended. */
static int sse_next(sse *c, double timeout_s, sse_event *ev)
{
    memset(ev, 0, sizeof *ev);
    double until = now_seconds() + timeout_s;
    for (;;) {
        char *start = c->body ? c->body + c->body_off : NULL;
        char *blank = start ? strstr(start, "\n\n") : NULL;
        if (blank) {
            *blank = '\0';
            c->body_off = (size_t)(blank - c->body) + 2;
            int any = 0;
            for (char *line = strtok(start, "\n"); line;
                 line = strtok(NULL, "\n")) {
                if (!strncmp(line, "id: ", 4)) {
                    ev->id = strtoull(line + 4, NULL, 10);
                    any = 1;
                } else if (!strncmp(line, "event: ", 7)) {
                    snprintf(ev->type, sizeof ev->type, "%s", line + 7);
                    any = 1;
                } else if (!strncmp(line, "data: ", 6)) {
                    ev->data = json_loads(line + 6, 0, NULL);
                    any = 1;
                }
            }
            if (any)
                return 1;
            continue; /* a comment */
        }
        if (c->done || c->eof)
            return -1;
        double left = until - now_seconds();
        if (left <= 0)
            return 0;
        if (sse_recv(c, left > 1 ? 1 : left) != 0)
            dechunk(c);
    }
}

/* The next event, which must come. */
static void sse_expect(sse *c, sse_event *ev)
{
    int rc = sse_next(c, WAIT_S, ev);
    if (rc != 1)
        fprintf(stderr, "no event within %g s (%s)\n", WAIT_S,
                rc < 0 ? "the stream ended" : "timeout");
    assert_int_equal(rc, 1);
}

static const char *job_of(const sse_event *e)
{
    return json_string_value(
        json_object_get(json_object_get(e->data, "job"), "id"));
}

static const char *status_of(const sse_event *e)
{
    return json_string_value(
        json_object_get(json_object_get(e->data, "job"), "status"));
}

/* ---- helpers ---- */

static void upload_csv(const srv *s, char id[64])
{
    char part[PATH_MAX + 8];
    snprintf(part, sizeof part, "file=@%s/blobs.csv", files);
    const char *parts[] = {"name=blobs", "format=csv", "label_column=species",
                           part, NULL};
    resp *r = http_upload(s, "/v1/datasets", parts);
    expect_status(r, 201);
    snprintf(id, 64, "%s", str(r->json, "id"));
    resp_free(r);
}

/* Submits a small job of `epochs` epochs; its id into id. */
static void submit(const srv *s, const char *ds, int epochs, char id[64])
{
    char b[512];
    snprintf(b, sizeof b,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"dense\", \"units\": 3}]}, \"hyperparameters\": {\"epochs\": "
             "%d, \"batch_size\": 32}}",
             ds, epochs);
    resp *r = http_json(s, "POST", "/v1/jobs", b);
    expect_status(r, 202);
    snprintf(id, 64, "%s", str(r->json, "id"));
    resp_free(r);
}

/* Reads events until job's job.finished; appends their ids to ids (when
 * not NULL) and whether each was job's to mine (when not NULL). Returns
 * the number read. */
static size_t read_until_finished_of(sse *c, const char *job, uint64_t *ids,
                                     int *mine, size_t max)
{
    size_t n = 0;
    for (;;) {
        sse_event e;
        sse_expect(c, &e);
        if (ids && n < max)
            ids[n] = e.id;
        if (mine && n < max)
            mine[n] = job_of(&e) && !strcmp(job_of(&e), job);
        n++;
        int fin = !strcmp(e.type, "job.finished") && job_of(&e) &&
                  !strcmp(job_of(&e), job);
        event_clear(&e);
        if (fin)
            return n;
    }
}

static size_t read_until_finished(sse *c, const char *job, uint64_t *ids,
                                  size_t max)
{
    return read_until_finished_of(c, job, ids, NULL, max);
}

static int fd_count(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    assert_non_null(d);
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

static int thread_count(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int n = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1)
            break;
    fclose(f);
    return n;
}

/* ---- setup: the admin's tenant and tenant b, each with a dataset ---- */

static int group_setup(void **state)
{
    (void)state;
    temp_dir(files);
    char p[PATH_MAX + 16];
    snprintf(p, sizeof p, "%s/blobs.csv", files);
    make_blobs_csv(p, 300, 7);
    if (srv_start(&server, NULL, NULL) != 0)
        return -1;
    as_b = server;
    resp *r = http_json(&server, "POST", "/v1/tenants", "{\"name\": \"beta\"}");
    if (r->status != 201)
        return -1;
    snprintf(as_b.key, sizeof as_b.key, "%s",
             str(json_object_get(r->json, "key"), "api_key"));
    resp_free(r);
    upload_csv(&server, ds_a);
    upload_csv(&as_b, ds_b);
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

/* ---- tests ---- */

/* A job's life arrives in order on the tenant's stream: created, started,
 * progress and epochs (numbered 1..n), finished; ids increase by one (the
 * tenant has no other job meanwhile). Then the finished job's own stream
 * gives its epochs and job.finished at once and ends. */
static void test_job_life_in_order(void **state)
{
    (void)state;
    sse *all = sse_open(&server, "/v1/events", NULL, NULL);
    assert_int_equal(all->status, 200);
    char job[64];
    submit(&server, ds_a, 3, job);

    sse_event e;
    int saw_started = 0, next_epoch = 1;
    uint64_t prev = 0;
    for (int i = 0;; i++) {
        sse_expect(all, &e);
        assert_string_equal(job_of(&e), job);
        if (prev)
            assert_true(e.id == prev + 1);
        prev = e.id;
        if (i == 0) {
            assert_string_equal(e.type, "job.created");
            assert_string_equal(status_of(&e), "queued");
            /* The job as GET /v1/jobs/{id} shows it. */
            assert_non_null(
                json_object_get(json_object_get(e.data, "job"), "spec"));
        } else if (!strcmp(e.type, "job.started")) {
            assert_false(saw_started);
            saw_started = 1;
            assert_string_equal(status_of(&e), "running");
        } else if (!strcmp(e.type, "job.progress")) {
            assert_true(saw_started);
        } else if (!strcmp(e.type, "job.epoch")) {
            assert_true(saw_started);
            json_t *ep = json_object_get(e.data, "epoch");
            assert_int_equal(json_integer_value(json_object_get(ep, "epoch")),
                             next_epoch);
            assert_true(json_is_number(json_object_get(ep, "train_loss")));
            next_epoch++;
        } else {
            assert_string_equal(e.type, "job.finished");
            assert_string_equal(status_of(&e), "succeeded");
            event_clear(&e);
            break;
        }
        event_clear(&e);
    }
    assert_true(saw_started);
    assert_int_equal(next_epoch, 4);
    sse_close(all);

    /* The job's own stream, after the end: epochs, then finished, then the
     * server closes it. */
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s/events", job);
    sse *one = sse_open(&server, path, NULL, NULL);
    assert_int_equal(one->status, 200);
    for (int ep = 1; ep <= 3; ep++) {
        sse_expect(one, &e);
        assert_string_equal(e.type, "job.epoch");
        assert_int_equal(json_integer_value(json_object_get(
                             json_object_get(e.data, "epoch"), "epoch")),
                         ep);
        event_clear(&e);
    }
    sse_expect(one, &e);
    assert_string_equal(e.type, "job.finished");
    event_clear(&e);
    assert_int_equal(sse_next(one, WAIT_S, &e), -1);
    assert_true(one->done); /* a proper end of the chunked body */
    sse_close(one);
}

/* A job's stream opened while it is queued or running replays what the
 * ring has of it and ends after its job.finished. */
static void test_job_stream_ends_after_finished(void **state)
{
    (void)state;
    char job[64], path[128];
    submit(&server, ds_a, 2, job);
    snprintf(path, sizeof path, "/v1/jobs/%s/events", job);
    sse *one = sse_open(&server, path, NULL, NULL);
    assert_int_equal(one->status, 200);
    sse_event e;
    sse_expect(one, &e);
    /* Its first event is still in the ring. */
    assert_string_equal(e.type, "job.created");
    event_clear(&e);
    read_until_finished(one, job, NULL, 0);
    assert_int_equal(sse_next(one, WAIT_S, &e), -1);
    sse_close(one);
}

/* A client that drops the stream and reconnects with Last-Event-ID gets
 * every event it missed: its ids across the reconnect are exactly those of
 * a stream that stayed open. */
static void test_resume_loses_nothing(void **state)
{
    (void)state;
    sse *ref = sse_open(&server, "/v1/events", NULL, NULL);
    sse *c = sse_open(&server, "/v1/events", NULL, NULL);
    char job[64];
    submit(&server, ds_a, 3, job);
    uint64_t want[256], got[256];
    size_t ngot = 0;
    sse_event e;
    for (int i = 0; i < 2; i++) {
        sse_expect(c, &e);
        got[ngot++] = e.id;
        event_clear(&e);
    }
    sse_close(c);
    /* Events go on while it is away. */
    int mine[256];
    size_t nwant = read_until_finished_of(ref, job, want, mine, 256);
    sse_close(ref);
    char last[32];
    snprintf(last, sizeof last, "%" PRIu64, got[ngot - 1]);
    c = sse_open(&server, "/v1/events", NULL, last);
    assert_int_equal(c->status, 200);
    ngot += read_until_finished(c, job, got + ngot, 256 - ngot);
    sse_close(c);
    assert_int_equal(ngot, nwant);
    for (size_t i = 0; i < nwant; i++) {
        assert_true(got[i] == want[i]);
        if (i)
            assert_true(got[i] == got[i - 1] + 1);
    }

    /* The same on a job's stream (which has only that job's events). */
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s/events", job);
    snprintf(last, sizeof last, "%" PRIu64, want[1]);
    c = sse_open(&server, path, NULL, last);
    for (size_t i = 2; i < nwant; i++) {
        if (!mine[i])
            continue;
        sse_expect(c, &e);
        assert_true(e.id == want[i]);
        event_clear(&e);
    }
    assert_int_equal(sse_next(c, WAIT_S, &e), -1);
    sse_close(c);

    /* A Last-Event-ID that is not a number is a 400. */
    c = sse_open(&server, "/v1/events", NULL, "twelve");
    assert_int_equal(c->status, 400);
    sse_close(c);
}

/* Tenants see only their own jobs' events. */
static void test_tenants_are_apart(void **state)
{
    (void)state;
    sse *b = sse_open(&as_b, "/v1/events", NULL, NULL);
    assert_int_equal(b->status, 200);
    char job_a[64], job_b[64], path[128];
    submit(&server, ds_a, 1, job_a);
    snprintf(path, sizeof path, "/v1/jobs/%s/events", job_a);
    sse *x = sse_open(&as_b, path, NULL, NULL);
    assert_int_equal(x->status, 404);
    sse_close(x);
    x = sse_open(&server, path, "", NULL);
    assert_int_equal(x->status, 401);
    sse_close(x);
    json_t *j = wait_job(&server, job_a, WAIT_S);
    assert_non_null(j);
    json_decref(j);
    /* b's first event is its own job's, though a's came before it. */
    submit(&as_b, ds_b, 1, job_b);
    sse_event e;
    sse_expect(b, &e);
    assert_string_equal(e.type, "job.created");
    assert_string_equal(job_of(&e), job_b);
    event_clear(&e);
    read_until_finished(b, job_b, NULL, 0);
    sse_close(b);
}

/* 200 open streams hold no thread each, the API keeps answering, and a
 * publish reaches every one of them. */
static void test_many_streams(void **state)
{
    (void)state;
    enum { N = 200 };
    static sse *c[N];
    int before = thread_count(server.pid);
    int fds_before = fd_count(server.pid);
    for (int i = 0; i < N; i++) {
        c[i] = sse_open(&server, "/v1/events", NULL, NULL);
        assert_int_equal(c[i]->status, 200);
    }
    int after = thread_count(server.pid);
    /* A thread per stream would be N more. */
    if (after - before >= 10)
        fprintf(stderr, "threads: %d before, %d with %d streams\n", before,
                after, N);
    assert_true(after - before < 10);
    resp *r = http_get(&server, "/v1/jobs");
    expect_status(r, 200);
    resp_free(r);
    r = http_do(&server, "GET", "/healthz", NULL, NULL, 0, "");
    expect_status(r, 200);
    resp_free(r);

    char job[64];
    submit(&server, ds_a, 1, job);
    for (int i = 0; i < N; i++) {
        sse_event e;
        sse_expect(c[i], &e);
        assert_string_equal(e.type, "job.created");
        assert_string_equal(job_of(&e), job);
        event_clear(&e);
    }
    assert_true(fd_count(server.pid) >= fds_before + N);
    for (int i = 0; i < N; i++)
        sse_close(c[i]);
    json_t *j = wait_job(&server, job, WAIT_S);
    assert_non_null(j);
    json_decref(j);
    /* The job's later events (or a keepalive) meet the closed sockets:
     * the server frees those streams and their connections. */
    double until = now_seconds() + WAIT_S;
    while (fd_count(server.pid) > fds_before + 5 && now_seconds() < until)
        usleep(100 * 1000);
    assert_true(fd_count(server.pid) <= fds_before + 5);
    r = http_get(&server, "/v1/jobs");
    expect_status(r, 200);
    resp_free(r);
}

/* With a ring of 4 events, resuming from an id it no longer holds starts
 * with `event: reset`; resuming from the newest id does not. */
static void test_reset_when_too_old(void **state)
{
    (void)state;
    srv small;
    const char *extra[] = {"--events-ring", "4", NULL};
    assert_int_equal(srv_start(&small, NULL, extra), 0);
    char ds[64], job[64];
    upload_csv(&small, ds);
    sse *c = sse_open(&small, "/v1/events", NULL, NULL);
    submit(&small, ds, 2, job);
    uint64_t ids[64];
    size_t n = read_until_finished(c, job, ids, 64);
    sse_close(c);
    assert_true(n > 4); /* created, started, 2 epochs, finished at least */

    char last[32];
    snprintf(last, sizeof last, "%" PRIu64, ids[0]);
    c = sse_open(&small, "/v1/events", NULL, last);
    assert_int_equal(c->status, 200);
    sse_event e;
    sse_expect(c, &e);
    assert_string_equal(e.type, "reset");
    assert_true(e.id == ids[n - 1]);
    event_clear(&e);
    sse_close(c);

    snprintf(last, sizeof last, "%" PRIu64, ids[n - 1]);
    c = sse_open(&small, "/v1/events", NULL, last);
    char job2[64];
    submit(&small, ds, 1, job2);
    sse_expect(c, &e);
    assert_string_equal(e.type, "job.created");
    assert_true(e.id == ids[n - 1] + 1);
    event_clear(&e);
    read_until_finished(c, job2, NULL, 0);
    sse_close(c);

    int ws = srv_stop(&small, SIGTERM);
    srv_cleanup(&small);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_job_life_in_order),
        cmocka_unit_test(test_job_stream_ends_after_finished),
        cmocka_unit_test(test_resume_loses_nothing),
        cmocka_unit_test(test_tenants_are_apart),
        cmocka_unit_test(test_many_streams),
        cmocka_unit_test(test_reset_when_too_old),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
