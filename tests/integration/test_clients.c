/*
 * test_clients.c - slow and hostile clients (issue 16, findings 2, 7, 8):
 * many connections that trickle their headers do not lock a fresh client
 * out and are dropped at the header deadline; a body that trickles is
 * dropped too; one address cannot hold more than its share of
 * connections; failed authentications from one address are throttled with
 * 429 and Retry-After; and requests that are malformed as HTTP get clear
 * answers.
 *
 * The requests are made on raw sockets, since curl would fix them up, and
 * the slow clients come from several loopback addresses (127.0.0.2 and
 * up) so that the per-address limit leaves the probe from 127.0.0.1 alone.
 * Timings are printed, never asserted: the deadlines asserted are liveness
 * bounds.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

#define HEADER_TIMEOUT "5"
#define PER_IP 32
#define AUTH_BURST 5

static srv server;

/* ---- raw sockets ---- */

/* A socket connected from source address src (e.g. "127.0.0.2"), or -1.
 * nonblock: the connect is started and not waited for (see
 * wait_connected); else it waits at most 5 s. */
static int connect_from(const char *src, int port, int nonblock)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &a.sin_addr);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    if (nonblock) {
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    } else {
        /* Linux bounds a blocking connect by the send timeout. */
        struct timeval tv = {.tv_sec = 5};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    if (connect(fd, (struct sockaddr *)&to, sizeof to) != 0 &&
        !(nonblock && errno == EINPROGRESS)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Waits up to timeout_s for fd's non-blocking connect; 0 once connected. */
static int wait_connected(int fd, double timeout_s)
{
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int ms = timeout_s > 0 ? (int)(timeout_s * 1000) : 0;
    if (poll(&p, 1, ms) != 1)
        return -1;
    int e = 0;
    socklen_t len = sizeof e;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len);
    return e == 0 ? 0 : -1;
}

/* Sends req from src and reads the reply. */
static void raw_request(const char *src, const char *req, raw_resp *out)
{
    memset(out, 0, sizeof *out);
    out->status = -1;
    int fd = connect_from(src, server.port, 0);
    assert_true(fd >= 0);
    assert_int_equal(raw_send_all(fd, req, strlen(req)), 0);
    raw_read_reply(fd, 20, out);
    close(fd);
}

static int has_header(const raw_resp *r, const char *name, const char *value)
{
    char want[256];
    snprintf(want, sizeof want, "\r\n%s: %s", name, value);
    return strcasestr(r->head, want) != NULL;
}

/* 1 when the peer has closed fd (or reset it); 0 while it is open. */
static int peer_closed(int fd)
{
    char c[256];
    for (;;) {
        ssize_t n = recv(fd, c, sizeof c, MSG_DONTWAIT);
        if (n == 0)
            return 1;
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : 1;
        /* a reply (e.g. 408/400) before the close: read on */
    }
}

/* ---- setup ---- */

static int group_setup(void **state)
{
    (void)state;
    /* The test's own sockets need descriptors too. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    char per_ip[16], burst[16];
    snprintf(per_ip, sizeof per_ip, "%d", PER_IP);
    snprintf(burst, sizeof burst, "%d", AUTH_BURST);
    const char *extra[] = {"--header-timeout",
                           HEADER_TIMEOUT,
                           "--body-timeout",
                           "3",
                           "--body-min-rate",
                           "1024",
                           "--per-ip-connections",
                           per_ip,
                           "--auth-fail-rate",
                           "2",
                           "--auth-fail-burst",
                           burst,
                           NULL};
    return srv_start(&server, NULL, extra);
}

static int group_teardown(void **state)
{
    (void)state;
    srv_stop(&server, 15);
    srv_cleanup(&server);
    return 0;
}

/* ---- slow clients ---- */

/* How many slow connections this machine's file limit allows: the server
 * derives its connection limit from the same (inherited) limit. */
static int slow_count(void)
{
    struct rlimit rl;
    long lim = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        lim = (long)rl.rlim_cur;
    long server_max = lim > 2048 ? lim - 512 : lim / 2;
    /* TY_SLOW_CLIENTS=5000 for the figure by hand. */
    const char *env = getenv("TY_SLOW_CLIENTS");
    long n = env && atol(env) > 0 ? atol(env) : 1600;
    if (n > server_max - 64)
        n = server_max - 64;
    if (n > lim - 128)
        n = lim - 128;
    return n > 0 ? (int)n : 0;
}

/* GET /healthz on a fresh connection from 127.0.0.1: the seconds it took,
 * or -1 without a 200 within 5 s. */
static double probe(void)
{
    double t0 = now_seconds();
    int fd = connect_from("127.0.0.1", server.port, 0);
    if (fd < 0)
        return -1;
    const char *req = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: "
                      "close\r\n\r\n";
    raw_resp r;
    if (raw_send_all(fd, req, strlen(req)) != 0) {
        close(fd);
        return -1;
    }
    raw_read_reply(fd, 5, &r);
    close(fd);
    return r.status == 200 ? now_seconds() - t0 : -1;
}

static void test_slow_clients_do_not_lock_out(void **state)
{
    (void)state;
    int n = slow_count();
    assert_true(n >= 200);
    int *fds = calloc((size_t)n, sizeof *fds);
    assert_non_null(fds);
    const char *start = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    double t0 = now_seconds();
    int opened = 0;
    for (int i = 0; i < n; i++) {
        char src[32];
        /* PER_IP connections from each of 127.0.0.2, .3, ... */
        int a = 2 + i / PER_IP;
        snprintf(src, sizeof src, "127.0.%d.%d", a / 250, 2 + a % 250);
        fds[i] = connect_from(src, server.port, 1);
    }
    /* Connections the server does not take within 10 s are not opened
     * (the listen queue is full when it stops accepting). */
    for (int i = 0; i < n; i++) {
        if (fds[i] < 0)
            continue;
        if (wait_connected(fds[i], t0 + 10 - now_seconds()) == 0 &&
            raw_send_all(fds[i], start, strlen(start)) == 0) {
            opened++;
        } else {
            close(fds[i]);
            fds[i] = -1;
        }
    }
    printf("opened %d slow connections of %d in %.2f s\n", opened, n,
           now_seconds() - t0);

    /* Trickle a byte a second on each while probing from 127.0.0.1. */
    double worst = 0, sum = 0;
    int probes = 0, failed = 0, open_at_probe = 0;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < n; i++)
            if (fds[i] >= 0)
                send(fds[i], "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        double p = probe();
        probes++;
        if (p < 0) {
            failed++;
        } else {
            sum += p;
            worst = p > worst ? p : worst;
        }
        if (round == 0)
            for (int i = 0; i < n; i++)
                open_at_probe += fds[i] >= 0 && !peer_closed(fds[i]);
        usleep(700 * 1000);
    }
    printf("probe with %d slow clients: %d of %d answered, mean %.1f ms, "
           "worst %.1f ms; %d slow connections open at the first probe\n",
           n, probes - failed, probes,
           probes > failed ? sum * 1e3 / (probes - failed) : 0.0, worst * 1e3,
           open_at_probe);
    assert_int_equal(failed, 0);
    assert_int_equal(opened, n);
    /* They were held, not refused. */
    assert_true(open_at_probe >= n * 9 / 10);

    /* However they trickle, they are dropped at the header deadline. */
    int left = n;
    double limit = t0 + atoi(HEADER_TIMEOUT) + 20;
    while (left > 0 && now_seconds() < limit) {
        left = 0;
        for (int i = 0; i < n; i++) {
            if (fds[i] < 0)
                continue;
            if (peer_closed(fds[i])) {
                close(fds[i]);
                fds[i] = -1;
            } else {
                send(fds[i], "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
                left++;
            }
        }
        usleep(500 * 1000);
    }
    printf("slow connections dropped %.1f s after they opened (header "
           "deadline %s s); %d still open\n",
           now_seconds() - t0, HEADER_TIMEOUT, left);
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(fds);
    assert_int_equal(left, 0);
    assert_true(probe() >= 0);
}

static void test_trickled_body_is_dropped(void **state)
{
    (void)state;
    int fd = connect_from("127.0.0.1", server.port, 0);
    assert_true(fd >= 0);
    char req[512];
    snprintf(req, sizeof req,
             "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
             "%s\r\nContent-Type: application/json\r\nContent-Length: "
             "100000\r\n\r\n{",
             server.key);
    assert_int_equal(raw_send_all(fd, req, strlen(req)), 0);
    double t0 = now_seconds();
    int closed = 0;
    while (!closed && now_seconds() < t0 + 30) {
        usleep(200 * 1000);
        closed = peer_closed(fd) ||
                 send(fd, " ", 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0;
    }
    printf("a body trickled at 5 bytes/s: %s after %.1f s (body deadline "
           "3 s + 1 s per 1024 bytes)\n",
           closed ? "dropped" : "still open", now_seconds() - t0);
    close(fd);
    assert_true(closed);
    assert_true(probe() >= 0);
}

/* On a kept-alive connection, the next request's headers have the same
 * deadline, counted from its request line. */
static void test_trickled_keepalive_headers_are_dropped(void **state)
{
    (void)state;
    int fd = connect_from("127.0.0.1", server.port, 0);
    assert_true(fd >= 0);
    const char *first = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_int_equal(raw_send_all(fd, first, strlen(first)), 0);
    /* The reply is small: read until its body has come. */
    char buf[4096];
    size_t len = 0;
    double t0 = now_seconds();
    while (!memmem(buf, len, "\"ok\"}", 5) && len < sizeof buf &&
           now_seconds() < t0 + 10) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 1000) <= 0)
            continue;
        ssize_t n = recv(fd, buf + len, sizeof buf - len, 0);
        assert_true(n > 0);
        len += (size_t)n;
    }
    assert_non_null(memmem(buf, len, " 200 ", 5));
    const char *next = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    assert_int_equal(raw_send_all(fd, next, strlen(next)), 0);
    t0 = now_seconds();
    int closed = 0;
    while (!closed && now_seconds() < t0 + atoi(HEADER_TIMEOUT) + 20) {
        usleep(500 * 1000);
        closed = peer_closed(fd) ||
                 send(fd, "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0;
    }
    printf("a kept-alive connection's trickled second request: %s after "
           "%.1f s (header deadline %s s)\n",
           closed ? "dropped" : "still open", now_seconds() - t0,
           HEADER_TIMEOUT);
    close(fd);
    assert_true(closed);
}

static void test_per_address_connection_limit(void **state)
{
    (void)state;
    enum { N = PER_IP + 8 };
    int fds[N];
    for (int i = 0; i < N; i++) {
        fds[i] = connect_from("127.0.3.1", server.port, 1);
        assert_true(fds[i] >= 0);
        assert_int_equal(wait_connected(fds[i], 10), 0);
        send(fds[i], "GET", 3, MSG_NOSIGNAL);
    }
    /* The ones over the limit are closed at once; wait for that. */
    int closed = 0;
    double t0 = now_seconds();
    while (now_seconds() < t0 + 3) {
        closed = 0;
        for (int i = 0; i < N; i++)
            closed += peer_closed(fds[i]);
        if (closed >= N - PER_IP)
            break;
        usleep(100 * 1000);
    }
    printf("%d connections from one address: %d closed (limit %d)\n", N, closed,
           PER_IP);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    assert_int_equal(closed, N - PER_IP);
    assert_true(probe() >= 0);
}

/* ---- failed authentications ---- */

static void test_auth_failures_are_throttled(void **state)
{
    (void)state;
    const char *src = "127.0.4.1";
    const char *bad = "GET /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: "
                      "Bearer ty_wrongwrongwrong\r\nConnection: close\r\n\r\n";
    char good[512];
    snprintf(good, sizeof good,
             "GET /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
             "%s\r\nConnection: close\r\n\r\n",
             server.key);
    int n401 = 0, n429 = 0, first429 = -1;
    raw_resp r, last429;
    for (int i = 0; i < 30; i++) {
        raw_request(src, bad, &r);
        if (r.status == 401)
            n401++;
        else if (r.status == 429) {
            if (first429 < 0)
                first429 = i;
            n429++;
            last429 = r;
        } else
            fail_msg("a wrong key got %d", r.status);
    }
    printf("30 wrong keys from one address: %d x 401, %d x 429 (from "
           "request %d)\n",
           n401, n429, first429 + 1);
    /* The burst is answered 401; then 429 with when to come back. */
    assert_true(first429 >= AUTH_BURST);
    assert_true(n429 > 0);
    assert_int_equal(last429.status, 429);
    assert_non_null(strcasestr(last429.head, "\r\nRetry-After: "));
    int retry = atoi(strcasestr(last429.head, "\r\nRetry-After: ") + 15);
    assert_true(retry >= 1 && retry <= 10);
    assert_non_null(strstr(last429.body, "\"status\":429"));

    /* Another address with a good key is not affected. */
    raw_request("127.0.0.1", good, &r);
    assert_int_equal(r.status, 200);
    raw_request("127.0.4.2", bad, &r);
    assert_int_equal(r.status, 401);

    /* The throttled address waits as told, and its good key works. */
    raw_request(src, good, &r);
    assert_int_equal(r.status, 429);
    sleep((unsigned)retry);
    usleep(200 * 1000);
    raw_request(src, good, &r);
    assert_int_equal(r.status, 200);
}

/* ---- protocol nits ---- */

static void test_duplicate_content_length_is_400(void **state)
{
    (void)state;
    char req[512];
    snprintf(req, sizeof req,
             "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
             "%s\r\nContent-Type: application/json\r\nContent-Length: "
             "2\r\nContent-Length: 5\r\nConnection: close\r\n\r\n{}",
             server.key);
    raw_resp r;
    raw_request("127.0.0.1", req, &r);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "Content-Length"));
}

static void test_unknown_transfer_encoding_is_501(void **state)
{
    (void)state;
    char req[512];
    snprintf(req, sizeof req,
             "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
             "%s\r\nContent-Type: application/json\r\nTransfer-Encoding: "
             "xchunked\r\nConnection: close\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
             server.key);
    raw_resp r;
    raw_request("127.0.0.1", req, &r);
    assert_int_equal(r.status, 501);
    assert_non_null(strstr(r.body, "Transfer-Encoding"));
}

static void test_json_is_nosniff(void **state)
{
    (void)state;
    raw_resp r;
    raw_request("127.0.0.1",
                "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: "
                "close\r\n\r\n",
                &r);
    assert_int_equal(r.status, 200);
    assert_true(has_header(&r, "X-Content-Type-Options", "nosniff"));
    raw_request("127.0.0.1",
                "GET /v1/no-such-thing HTTP/1.1\r\nHost: x\r\nConnection: "
                "close\r\n\r\n",
                &r);
    assert_int_equal(r.status, 404);
    assert_true(has_header(&r, "Content-Type", "application/problem+json"));
    assert_true(has_header(&r, "X-Content-Type-Options", "nosniff"));
}

static void test_nul_in_path_is_refused(void **state)
{
    (void)state;
    const char *paths[] = {"/%00", "/%00/../healthz", "/v1/jobs%00", NULL};
    for (int i = 0; paths[i]; i++) {
        char req[256];
        snprintf(req, sizeof req,
                 "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 paths[i]);
        raw_resp r;
        raw_request("127.0.0.1", req, &r);
        printf("GET %s -> %d\n", paths[i], r.status);
        assert_true(r.status == 400 || r.status == 404);
        assert_null(strcasestr(r.head, "text/html"));
    }
}

static void cancel_with_body(const srv *as, const char *job, const char *body,
                             raw_resp *r)
{
    char req[1024];
    snprintf(req, sizeof req,
             "POST /v1/jobs/%s/cancel HTTP/1.1\r\nHost: x\r\nAuthorization: "
             "Bearer %s\r\nContent-Type: application/json\r\nContent-Length: "
             "%zu\r\nConnection: close\r\n\r\n%s",
             job, as->key, strlen(body), body);
    raw_request("127.0.0.1", req, r);
}

static void test_empty_json_body_on_bodyless_post(void **state)
{
    (void)state;
    /* A tenant with nothing of its own, and a long job of the admin's. */
    srv other = server;
    resp *t = http_json(&server, "POST", "/v1/tenants", "{\"name\": \"nits\"}");
    expect_status(t, 201);
    snprintf(other.key, sizeof other.key, "%s",
             str(json_object_get(t->json, "key"), "api_key"));
    resp_free(t);

    char dir[PATH_MAX], csv[PATH_MAX + 16], part[PATH_MAX + 32];
    temp_dir(dir);
    snprintf(csv, sizeof csv, "%s/blobs.csv", dir);
    make_blobs_csv(csv, 200, 3);
    snprintf(part, sizeof part, "file=@%s", csv);
    const char *parts[] = {"name=nits", "format=csv", "label_column=species",
                           part, NULL};
    resp *d = http_upload(&server, "/v1/datasets", parts);
    expect_status(d, 201);
    char body[512];
    snprintf(body, sizeof body,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"dense\", \"units\": 3}]}, \"hyperparameters\": {\"epochs\": "
             "100000, \"batch_size\": 1}}",
             str(d->json, "id"));
    resp_free(d);
    resp *j = http_json(&server, "POST", "/v1/jobs", body);
    expect_status(j, 202);
    char job[64];
    snprintf(job, sizeof job, "%s", str(j->json, "id"));
    resp_free(j);

    raw_resp r;
    /* Another tenant's job: 404 with a body {} as without one. */
    cancel_with_body(&other, job, "{}", &r);
    assert_int_equal(r.status, 404);
    assert_null(strstr(r.body, "dense"));
    /* A body that is not {} is still refused. */
    cancel_with_body(&server, job, "{\"reason\": \"x\"}", &r);
    assert_int_equal(r.status, 413);
    /* One's own job: {} is no body (200 while queued, 202 once running). */
    cancel_with_body(&server, job, "{}", &r);
    assert_true(r.status == 200 || r.status == 202);
    json_t *done = wait_job(&server, job, 60);
    assert_string_equal(str(done, "status"), "cancelled");
    json_decref(done);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_duplicate_content_length_is_400),
        cmocka_unit_test(test_unknown_transfer_encoding_is_501),
        cmocka_unit_test(test_json_is_nosniff),
        cmocka_unit_test(test_nul_in_path_is_refused),
        cmocka_unit_test(test_empty_json_body_on_bodyless_post),
        cmocka_unit_test(test_auth_failures_are_throttled),
        cmocka_unit_test(test_per_address_connection_limit),
        cmocka_unit_test(test_trickled_body_is_dropped),
        cmocka_unit_test(test_trickled_keepalive_headers_are_dropped),
        cmocka_unit_test(test_slow_clients_do_not_lock_out),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
