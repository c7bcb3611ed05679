/*
 * test_log_limit.c - clients cannot make the server log at their pace
 * (issue 29: "runner: no worker entry free" took 14,451 lines in 40 s).
 *
 * The loop of that finding is being removed at its root (the runner's
 * table); the same limit (common/log.h, log_msg_limited) is driven here
 * through the paths any client reaches: libmicrohttpd's own messages,
 * one per request. Two causes, each provoked 150 times within a moment:
 * event streams (a dashboard tab) closed by the client, and requests
 * whose Content-Length is not a number. Each cause is written at most once
 * for each second the run took (plus its first line); the other cause is
 * not silenced by the first; the line after a quiet second says how many
 * were dropped, and for the Content-Length cause, whose every request
 * makes one line, the lines and their counts add up to the requests.
 * A closed tab is normal: its line is "debug", not "warn".
 *
 * Requests are made on raw sockets (curl would fix them up). No timing is
 * asserted beyond "at most N lines for a run of this length".
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

#define ROUNDS 150

/* libmicrohttpd says "Failed to send the footers (or the chunked response
 * body) for the request for `/v1/events'": two causes, by when the reset
 * came. */
static const char closed_tab[] = "for the request for `/v1/events'";
static const char bad_length[] = "Failed to parse `Content-Length' header";

static int connect_local(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&to, sizeof to), 0);
    return fd;
}

static void send_text(int fd, const char *text)
{
    size_t len = strlen(text);
    while (len > 0) {
        ssize_t n = send(fd, text, len, MSG_NOSIGNAL);
        assert_true(n > 0);
        text += n;
        len -= (size_t)n;
    }
}

/* Opens the event stream, reads its first bytes, and resets the
 * connection (as a browser tab that closes does, at worst). */
static void close_a_tab(const srv *s)
{
    char req[512], buf[1024];
    int fd = connect_local(s->port);
    snprintf(req, sizeof req,
             "GET /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
             "%s\r\n\r\n",
             s->key);
    send_text(fd, req);
    assert_true(recv(fd, buf, sizeof buf, 0) > 0);
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fd);
}

/* A request whose Content-Length is not a number: 400, and one line of
 * libmicrohttpd's about it. */
static void send_bad_length(const srv *s)
{
    char buf[1024];
    int fd = connect_local(s->port);
    send_text(fd, "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: "
                  "abc\r\n\r\n");
    ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
    assert_true(n > 12);
    buf[n] = '\0';
    assert_int_equal(strncmp(buf, "HTTP/1.1 400", 12), 0);
    close(fd);
}

/* The server's log lines whose msg contains needle. Caller decrefs. */
static json_t *lines_with(const srv *s, const char *needle)
{
    FILE *f = fopen(s->log, "r");
    assert_non_null(f);
    json_t *out = json_array();
    char buf[8192];
    while (fgets(buf, sizeof buf, f)) {
        json_t *line = json_loads(buf, 0, NULL);
        const char *msg = json_string_value(json_object_get(line, "msg"));
        if (msg && strstr(msg, needle))
            json_array_append(out, line);
        json_decref(line);
    }
    fclose(f);
    return out;
}

static json_int_t sum_repeated(const json_t *lines)
{
    json_int_t sum = 0;
    size_t i;
    json_t *line;
    json_array_foreach (lines, i, line)
        sum += json_integer_value(json_object_get(line, "repeated"));
    return sum;
}

static void test_client_driven_lines_are_limited(void **state)
{
    (void)state;
    srv s;
    assert_int_equal(srv_start(&s, NULL, NULL), 0);
    double t0 = now_seconds();
    for (int i = 0; i < ROUNDS; i++) {
        close_a_tab(&s);
        send_bad_length(&s);
    }
    double took = now_seconds() - t0;
    /* A quiet second, then one more of each cause: let through, with the
     * count of what was dropped since the last line. */
    struct timespec nap = {.tv_sec = 1, .tv_nsec = 100 * 1000000L};
    nanosleep(&nap, NULL);
    send_bad_length(&s);
    srv_stop(&s, SIGTERM);

    json_t *tabs = lines_with(&s, closed_tab);
    json_t *lengths = lines_with(&s, bad_length);
    size_t ntabs = json_array_size(tabs), nlengths = json_array_size(lengths);
    size_t bound = 2 + (size_t)took; /* lines of one cause */
    printf("# %d rounds in %.2f s: %zu line(s) of closed tabs (%lld more "
           "counted), %zu of bad Content-Length (%lld more counted); at most "
           "%zu per cause allowed\n",
           ROUNDS, took, ntabs, (long long)sum_repeated(tabs), nlengths,
           (long long)sum_repeated(lengths), bound);
    /* Each cause has its line: one does not silence the other. */
    assert_true(ntabs >= 1);
    assert_true(nlengths >= 2);
    assert_true(ntabs <= 2 * bound);
    assert_true(nlengths <= bound + 1);
    /* A closed tab is normal, not a warning. */
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(tabs, 0), "level")),
        "debug");
    /* The last line (after the quiet second) counts what was dropped, and
     * nothing is lost: every request is a line or counted in one. */
    json_t *last = json_array_get(lengths, nlengths - 1);
    assert_true(json_integer_value(json_object_get(last, "repeated")) >= 1);
    assert_int_equal((json_int_t)nlengths + sum_repeated(lengths), ROUNDS + 1);
    json_decref(tabs);
    json_decref(lengths);
    srv_cleanup(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_client_driven_lines_are_limited),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
