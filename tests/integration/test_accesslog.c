/*
 * Integration tests for the request log (server/accesslog.h): written by a
 * writer thread, sampled by --access-log-sample (every error kept), to a
 * file rotated by --access-log-max-bytes; the request metrics count every
 * request whatever the sampling, and a scrape counts every request that
 * finished before it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define MAX_BYTES 12000

/* The value of the request counter for route and status (0 when absent). */
static double requests(const srv *s, const char *route, const char *status)
{
    resp *r = http_do(s, "GET", "/metrics", NULL, NULL, 0, "");
    expect_status(r, 200);
    char want_route[128], want_status[32];
    snprintf(want_route, sizeof want_route, "route=\"%s\"", route);
    snprintf(want_status, sizeof want_status, "status=\"%s\"", status);
    double v = 0;
    for (char *line = strtok(r->body, "\n"); line; line = strtok(NULL, "\n"))
        if (!strncmp(line, "trainyard_http_requests_total{", 30) &&
            strstr(line, want_route) && strstr(line, want_status))
            v += atof(strrchr(line, ' ') + 1);
    resp_free(r);
    return v;
}

/* Counts the request lines of path (a missing file counts 0) with route
 * and status; *size gets the file's size. */
static int lines(const char *path, const char *route, int status, long *size)
{
    FILE *f = fopen(path, "r");
    *size = 0;
    if (!f)
        return 0;
    char want_route[128], want_status[32], line[4096];
    snprintf(want_route, sizeof want_route, "\"route\":\"%s\"", route);
    snprintf(want_status, sizeof want_status, "\"status\":%d,", status);
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        assert_non_null(strchr(line, '\n')); /* whole lines only */
        n += strstr(line, "\"event\":\"request\"") &&
             strstr(line, want_route) && strstr(line, want_status);
    }
    *size = ftell(f);
    fclose(f);
    return n;
}

static void test_sampled_rotated_counted(void **state)
{
    (void)state;
    char dir[PATH_MAX], log[PATH_MAX + 16], old[PATH_MAX + 32];
    temp_dir(dir);
    snprintf(log, sizeof log, "%s/access.log", dir);
    snprintf(old, sizeof old, "%s.1", log);
    char max[16];
    snprintf(max, sizeof max, "%d", MAX_BYTES);
    const char *extra[] = {"--access-log",
                           log,
                           "--access-log-sample",
                           "4",
                           "--access-log-max-bytes",
                           max,
                           NULL};
    srv s;
    assert_int_equal(srv_start(&s, NULL, extra), 0);
    double ok0 = requests(&s, "/healthz", "200");
    double nf0 = requests(&s, "/v1/jobs/{id}", "404");
    for (int i = 0; i < 200; i++) {
        resp *r = http_get(&s, "/healthz");
        expect_status(r, 200);
        resp_free(r);
    }
    for (int i = 0; i < 10; i++) {
        resp *r = http_get(&s, "/v1/jobs/job_doesnotexist");
        expect_status(r, 404);
        resp_free(r);
    }
    /* The last request's completion can come just after its reply: the
     * counters are read until they move, for at most 10 s. */
    double until = now_seconds() + 10;
    while (requests(&s, "/v1/jobs/{id}", "404") < nf0 + 10 &&
           now_seconds() < until)
        usleep(20 * 1000);
    /* Every request is counted, sampled or not. */
    assert_true(requests(&s, "/healthz", "200") >= ok0 + 200);
    assert_true(requests(&s, "/v1/jobs/{id}", "404") == nf0 + 10);
    assert_int_equal(srv_stop(&s, SIGTERM), 0);

    long size, size_old;
    int ok = lines(log, "healthz", 200, &size) +
             lines(old, "healthz", 200, &size_old);
    int nf = lines(log, "jobs.get", 404, &size) +
             lines(old, "jobs.get", 404, &size_old);
    printf("access log: %d of 200+ /healthz lines, %d of 10 errors; files "
           "%ld and %ld bytes (limit %d)\n",
           ok, nf, size, size_old, MAX_BYTES);
    /* One in four successes (the scrapes and the start's polls add a few),
     * every error. */
    assert_true(ok >= 50 && ok <= 60);
    assert_int_equal(nf, 10);
    /* Rotated: both files hold whole lines, neither past the limit. */
    assert_true(size_old > 0 && size_old <= MAX_BYTES);
    assert_true(size > 0 && size <= MAX_BYTES);
    /* Nothing of the request log on stderr. */
    long err_size;
    assert_int_equal(lines(s.log, "healthz", 200, &err_size), 0);
    srv_cleanup(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sampled_rotated_counted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
