/* Unit tests for common/log.c: the lines are JSON objects with ts, level
 * and event first, and a limited call site writes at most one line a
 * second per cause (issue 29: "runner: no worker entry free" was logged
 * about 300 times a second), the lines it dropped counted on the next one
 * it writes.
 *
 * stderr is sent to a file while a test logs and put back before it
 * asserts (CMocka reports failures on stderr). The limits' clock is a
 * fake one the tests move, except in the test that runs on the real
 * clock, which asserts only "at most so many lines for the time the run
 * took". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"

#define NS 1000000000LL

/* ---- stderr into a file ---- */

static char capture_file[64];
static int saved_stderr = -1;

static void capture_start(void)
{
    snprintf(capture_file, sizeof capture_file, "/tmp/test_log_XXXXXX");
    int fd = mkstemp(capture_file);
    assert_true(fd >= 0);
    fflush(stderr);
    saved_stderr = dup(2);
    assert_true(saved_stderr >= 0);
    dup2(fd, 2);
    close(fd);
}

/* The lines written since capture_start, as a JSON array of the parsed
 * lines (a line that is not JSON fails the test). Caller decrefs. */
static json_t *capture_end(void)
{
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    saved_stderr = -1;
    FILE *f = fopen(capture_file, "r");
    assert_non_null(f);
    json_t *lines = json_array();
    char buf[4096];
    while (fgets(buf, sizeof buf, f)) {
        json_error_t je;
        json_t *line = json_loads(buf, 0, &je);
        if (!line)
            fail_msg("not a JSON line: %s", buf);
        json_array_append_new(lines, line);
    }
    fclose(f);
    unlink(capture_file);
    return lines;
}

/* How many of lines have member key equal to the string value (prefix
 * with a trailing '*'). */
static size_t count_where(const json_t *lines, const char *key,
                          const char *value)
{
    size_t n = 0, i, len = strlen(value);
    int prefix = len > 0 && value[len - 1] == '*';
    json_t *line;
    json_array_foreach (lines, i, line) {
        const char *v = json_string_value(json_object_get(line, key));
        if (v && (prefix ? !strncmp(v, value, len - 1) : !strcmp(v, value)))
            n++;
    }
    return n;
}

/* The line of lines whose key is value (the last such), or NULL. */
static json_t *line_where(const json_t *lines, const char *key,
                          const char *value)
{
    json_t *found = NULL, *line;
    size_t i;
    json_array_foreach (lines, i, line) {
        const char *v = json_string_value(json_object_get(line, key));
        if (v && !strcmp(v, value))
            found = line;
    }
    return found;
}

/* ---- the fake clock ---- */

static _Atomic int64_t fake_now = 1000 * NS;

static int64_t fake_clock(void) { return atomic_load(&fake_now); }

static void fake_advance(double s)
{
    atomic_fetch_add(&fake_now, (int64_t)(s * NS));
}

/* Each test starts 100 s after the last one's end, so the sites' state
 * from earlier tests (static, per site) has expired. */
static int fake_setup(void **state)
{
    (void)state;
    fake_advance(100);
    log_limit_clock(fake_clock);
    return 0;
}

static int fake_teardown(void **state)
{
    (void)state;
    log_limit_clock(NULL);
    return 0;
}

/* ---- the call sites ---- */

/* The finding's line, as jobs/lifecycle.c writes it. */
static void site_runner(const char *job)
{
    log_msg_limited(NULL, "error", "runner: no worker entry free for job %s",
                    job);
}

static void site_other(void) { log_msg_limited(NULL, "error", "other site"); }

static void site_keyed(const char *deployment)
{
    log_event_limited(deployment, "error", "replica",
                      json_pack("{s:s}", "deployment", deployment));
}

static atomic_int evaluated;

static json_t *counted_fields(void)
{
    atomic_fetch_add(&evaluated, 1);
    return json_pack("{s:s}", "what", "counted");
}

static void site_counted(void)
{
    log_event_limited(NULL, "warn", "counted", counted_fields());
}

#define THREADS 4
#define CALLS 1000 /* in all, over the threads */

static void *hammer(void *arg)
{
    char job[32];
    snprintf(job, sizeof job, "job_%d", (int)(intptr_t)arg);
    for (int i = 0; i < CALLS / THREADS; i++)
        site_runner(job);
    return NULL;
}

static void run_threads(void)
{
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(
            pthread_create(&t[i], NULL, hammer, (void *)(intptr_t)i), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
}

/* ---- the tests ---- */

/* 1,000 calls from four threads within one second: one line; the next
 * line let through, a second later, carries the 999 dropped. */
static void test_one_line_a_second_with_the_count(void **state)
{
    (void)state;
    capture_start();
    run_threads();
    json_t *burst = capture_end();
    assert_int_equal(json_array_size(burst), 1);
    json_t *first = json_array_get(burst, 0);
    assert_int_equal(
        count_where(burst, "msg", "runner: no worker entry free for job job_*"),
        1);
    assert_null(json_object_get(first, "repeated"));

    /* Still within the second: dropped. */
    fake_advance(0.5);
    capture_start();
    site_runner("job_x");
    json_t *half = capture_end();
    assert_int_equal(json_array_size(half), 0);

    fake_advance(0.5);
    capture_start();
    site_runner("job_y");
    json_t *next = capture_end();
    assert_int_equal(json_array_size(next), 1);
    json_t *line = json_array_get(next, 0);
    assert_string_equal(json_string_value(json_object_get(line, "msg")),
                        "runner: no worker entry free for job job_y");
    /* The burst's 999 and the call half a second in. */
    assert_int_equal(json_integer_value(json_object_get(line, "repeated")),
                     CALLS - 1 + 1);
    assert_true(fabs(json_number_value(json_object_get(line, "repeated_s")) -
                     1.0) < 1e-6);
    json_decref(burst);
    json_decref(half);
    json_decref(next);

    /* And a line after a quiet second says nothing was dropped. */
    fake_advance(5);
    capture_start();
    site_runner("job_z");
    json_t *quiet = capture_end();
    assert_int_equal(json_array_size(quiet), 1);
    assert_null(json_object_get(json_array_get(quiet, 0), "repeated"));
    json_decref(quiet);
}

/* A site that is dropping lines does not drop another site's. */
static void test_other_site_not_suppressed(void **state)
{
    (void)state;
    capture_start();
    for (int i = 0; i < 100; i++)
        site_runner("job_a");
    site_other();
    site_other();
    json_t *lines = capture_end();
    assert_int_equal(json_array_size(lines), 2);
    assert_int_equal(count_where(lines, "msg", "other site"), 1);
    json_decref(lines);
}

/* A site that logs for several objects limits each key on its own. */
static void test_keys_are_causes_of_their_own(void **state)
{
    (void)state;
    capture_start();
    for (int i = 0; i < 50; i++) {
        site_keyed("dep_a");
        site_keyed("dep_b");
    }
    json_t *lines = capture_end();
    assert_int_equal(json_array_size(lines), 2);
    assert_int_equal(count_where(lines, "deployment", "dep_a"), 1);
    assert_int_equal(count_where(lines, "deployment", "dep_b"), 1);
    json_decref(lines);
    fake_advance(1);
    capture_start();
    site_keyed("dep_b");
    lines = capture_end();
    assert_int_equal(json_integer_value(json_object_get(
                         line_where(lines, "deployment", "dep_b"), "repeated")),
                     49);
    json_decref(lines);
}

/* A dropped line costs no formatting: its fields are not even built. */
static void test_dropped_line_builds_nothing(void **state)
{
    (void)state;
    atomic_store(&evaluated, 0);
    capture_start();
    for (int i = 0; i < 1000; i++)
        site_counted();
    json_t *lines = capture_end();
    assert_int_equal(json_array_size(lines), 1);
    assert_int_equal(atomic_load(&evaluated), 1);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(lines, 0), "what")),
        "counted");
    json_decref(lines);
}

/* The first line of a limited site is what log_msg writes, to the byte
 * (but for its time). */
static void test_first_line_unchanged(void **state)
{
    (void)state;
    capture_start();
    log_msg("error", "runner: no worker entry free for job %s", "job_1");
    log_msg_limited(NULL, "error", "runner: no worker entry free for job %s",
                    "job_1");
    json_t *lines = capture_end();
    assert_int_equal(json_array_size(lines), 2);
    json_t *a = json_array_get(lines, 0), *b = json_array_get(lines, 1);
    json_object_del(a, "ts");
    json_object_del(b, "ts");
    assert_true(json_equal(a, b));
    json_decref(lines);
}

/* On the real clock: 1,000 calls from four threads as fast as they go
 * write at most one line for each second begun, plus the first. */
static void test_real_clock(void **state)
{
    (void)state;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    capture_start();
    run_threads();
    json_t *lines = capture_end();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double took = (double)(t1.tv_sec - t0.tv_sec) +
                  (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    size_t n = json_array_size(lines);
    printf("# %zu line(s) for %d calls in %.3f s\n", n, CALLS, took);
    assert_true(n >= 1);
    assert_true(n <= 2 + (size_t)took);
    json_decref(lines);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_one_line_a_second_with_the_count,
                                        fake_setup, fake_teardown),
        cmocka_unit_test_setup_teardown(test_other_site_not_suppressed,
                                        fake_setup, fake_teardown),
        cmocka_unit_test_setup_teardown(test_keys_are_causes_of_their_own,
                                        fake_setup, fake_teardown),
        cmocka_unit_test_setup_teardown(test_dropped_line_builds_nothing,
                                        fake_setup, fake_teardown),
        cmocka_unit_test_setup_teardown(test_first_line_unchanged, fake_setup,
                                        fake_teardown),
        cmocka_unit_test(test_real_clock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
