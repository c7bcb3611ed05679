/* test_retry.c - the runner's back-off between retries (jobs/retry.h):
 * the default sequence, the cap, huge attempt counts, and odd inputs. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <limits.h>
#include <math.h>

#include "jobs/retry.h"

static void test_default_sequence(void **state)
{
    static const double want[] = {5, 10, 20, 40, 80, 160, 300, 300, 300};
    for (int a = 1; a <= 9; a++)
        assert_true(retry_backoff_seconds(a, RETRY_BACKOFF_BASE_S,
                                          RETRY_BACKOFF_CAP_S) == want[a - 1]);
}

static void test_cap_and_huge_attempts(void **state)
{
    assert_true(retry_backoff_seconds(3, 1.0, 3.0) == 3.0);
    assert_true(retry_backoff_seconds(2, 1.0, 3.0) == 2.0);
    assert_true(retry_backoff_seconds(INT_MAX, 5.0, 300.0) == 300.0);
    /* No cap to speak of: still finite or infinite, never NaN, and quick. */
    double w = retry_backoff_seconds(INT_MAX, 1e-300, INFINITY);
    assert_false(isnan(w));
    assert_true(w > 1e300);
    /* The base above the cap: the cap. */
    assert_true(retry_backoff_seconds(1, 500.0, 300.0) == 300.0);
}

static void test_odd_inputs(void **state)
{
    /* attempt below 1 counts as the first retry. */
    assert_true(retry_backoff_seconds(0, 5.0, 300.0) == 5.0);
    assert_true(retry_backoff_seconds(-7, 5.0, 300.0) == 5.0);
    /* base 0: no wait, however many attempts. */
    assert_true(retry_backoff_seconds(INT_MAX, 0.0, 300.0) == 0.0);
    /* Negative or NaN: the defaults. */
    assert_true(retry_backoff_seconds(2, -1.0, 300.0) == 10.0);
    assert_true(retry_backoff_seconds(2, NAN, 300.0) == 10.0);
    assert_true(retry_backoff_seconds(10, 5.0, -1.0) == 300.0);
    assert_true(retry_backoff_seconds(10, 5.0, NAN) == 300.0);
    assert_true(retry_backoff_seconds(1, 5.0, 0.0) == 0.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_sequence),
        cmocka_unit_test(test_cap_and_huge_attempts),
        cmocka_unit_test(test_odd_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
