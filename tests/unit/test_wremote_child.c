/* test_wremote_child.c - how the remote worker shim cuts its child's
 * stdout into lines (node/wremote_child.h: wrchild_read, wrchild_line),
 * over a pipe this test writes: lines split across reads, empty lines
 * skipped, a last line without its newline at the end, a line over 64 KiB
 * dropped, nothing to read. No child is started here: the shim with its
 * child is driven as Slurm jobs by the Slurm suite (tests/slurm). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "node/wremote_child.h"

typedef struct {
    wrchild c;
    int w; /* the write end, -1 once closed */
} fixture;

/* A wrchild whose stdout is the read end of a fresh pipe (non-blocking,
 * as wrchild_start makes it). */
static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    int fds[2];
    if (!f || pipe(fds) != 0)
        return -1;
    wrchild_init(&f->c);
    f->c.out_fd = fds[0];
    fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
    f->w = fds[1];
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    close(f->c.out_fd);
    if (f->w >= 0)
        close(f->w);
    free(f);
    return 0;
}

static void put(fixture *f, const char *text)
{
    size_t n = strlen(text);
    assert_int_equal(write(f->w, text, n), (ssize_t)n);
}

static void test_lines_across_reads(void **state)
{
    fixture *f = *state;
    put(f, "{\"a\":1}\n{\"b\"");
    assert_int_equal(wrchild_read(&f->c), 0);
    assert_string_equal(wrchild_line(&f->c), "{\"a\":1}");
    assert_null(wrchild_line(&f->c));
    /* The rest of the second line, an empty line, a third. */
    put(f, ":2}\n\n{\"c\":3}\n");
    assert_int_equal(wrchild_read(&f->c), 0);
    assert_string_equal(wrchild_line(&f->c), "{\"b\":2}");
    assert_string_equal(wrchild_line(&f->c), "{\"c\":3}");
    assert_null(wrchild_line(&f->c));
    assert_int_equal(f->c.len, 0);
}

static void test_nothing_to_read(void **state)
{
    fixture *f = *state;
    assert_int_equal(wrchild_read(&f->c), 0); /* EAGAIN: not the end */
    assert_null(wrchild_line(&f->c));
}

static void test_last_line_without_newline(void **state)
{
    fixture *f = *state;
    put(f, "first\nlast");
    close(f->w);
    f->w = -1;
    assert_int_equal(wrchild_read(&f->c), 0);
    assert_string_equal(wrchild_line(&f->c), "first");
    assert_null(wrchild_line(&f->c));
    assert_int_equal(wrchild_read(&f->c), 1); /* the end of the output */
    assert_string_equal(wrchild_line(&f->c), "last");
    assert_null(wrchild_line(&f->c));
    assert_int_equal(wrchild_read(&f->c), 1);
    assert_null(wrchild_line(&f->c));
}

static void test_end_with_nothing_pending(void **state)
{
    fixture *f = *state;
    put(f, "only\n");
    close(f->w);
    f->w = -1;
    assert_int_equal(wrchild_read(&f->c), 0);
    assert_string_equal(wrchild_line(&f->c), "only");
    assert_null(wrchild_line(&f->c));
    assert_int_equal(wrchild_read(&f->c), 1);
    assert_null(wrchild_line(&f->c));
}

static void test_overlong_line_dropped(void **state)
{
    fixture *f = *state;
    size_t n = sizeof f->c.buf - 1; /* fills the buffer: no newline fits */
    char *big = malloc(n + 1);
    assert_non_null(big);
    memset(big, 'x', n);
    big[n] = '\0';
    put(f, big);
    free(big);
    while (f->c.len < n) /* a pipe may hand it over in parts */
        assert_int_equal(wrchild_read(&f->c), 0);
    assert_null(wrchild_line(&f->c)); /* dropped (said on stderr) */
    assert_int_equal(f->c.len, 0);
    put(f, "after\n");
    assert_int_equal(wrchild_read(&f->c), 0);
    assert_string_equal(wrchild_line(&f->c), "after");
    assert_null(wrchild_line(&f->c));
}

static void test_signals_need_a_child(void **state)
{
    fixture *f = *state;
    wrchild_preempt(&f->c); /* pid 0: not started */
    wrchild_cancel(&f->c);
    assert_int_equal(f->c.preempt_sent, 0);
    assert_int_equal(f->c.cancel_sent, 0);
    wrchild_stop(&f->c); /* nothing to stop */
    assert_int_equal(f->c.pid, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lines_across_reads, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_nothing_to_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_last_line_without_newline, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_end_with_nothing_pending, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_overlong_line_dropped, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_signals_need_a_child, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
