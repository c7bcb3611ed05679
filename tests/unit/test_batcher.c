/* test_batcher.c - the replica's dynamic batching policy (node/batcher.h):
 * which of the waiting requests a batch takes and when it runs: full
 * (max rows reached, or the next request does not fit), the oldest's delay
 * expired, a preferred size filled exactly, an oversize request alone,
 * delay 0, flushing, batching off; and how long the replica waits
 * otherwise. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "node/batcher.h"

#define US 1000ull

static batcher_policy policy(uint32_t max, uint64_t delay_us)
{
    batcher_policy p = {.max_batch_size = max,
                        .max_queue_delay_ns = delay_us * US};
    return p;
}

static void test_nothing_waits(void **state)
{
    batcher_policy p = policy(8, 500);
    uint64_t wait = 0;
    assert_int_equal(batcher_next(&p, NULL, 0, 0, 0, &wait), 0);
    assert_true(wait == UINT64_MAX);
    assert_int_equal(batcher_next(&p, NULL, 0, 0, 1, &wait), 0);
    assert_true(wait == UINT64_MAX);
}

static void test_waits_for_the_delay(void **state)
{
    batcher_policy p = policy(8, 500);
    const uint32_t rows[] = {1, 2, 3};
    uint64_t wait = 0;
    /* 6 rows of 8, 100 us old: wait the other 400 us. */
    assert_int_equal(batcher_next(&p, rows, 3, 100 * US, 0, &wait), 0);
    assert_true(wait == 400 * US);
    assert_int_equal(batcher_next(&p, rows, 3, 0, 0, &wait), 0);
    assert_true(wait == 500 * US);
    /* wait_ns may be NULL. */
    assert_int_equal(batcher_next(&p, rows, 3, 499 * US, 0, NULL), 0);
    /* Expired: everything that fits goes. */
    assert_int_equal(batcher_next(&p, rows, 3, 500 * US, 0, &wait), 3);
    assert_int_equal(batcher_next(&p, rows, 3, 9000 * US, 0, &wait), 3);
}

static void test_full_batch_runs_at_once(void **state)
{
    batcher_policy p = policy(8, 1000000);
    /* Exactly max rows. */
    const uint32_t exact[] = {3, 5, 1};
    assert_int_equal(batcher_next(&p, exact, 3, 0, 0, NULL), 2);
    const uint32_t ones[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    assert_int_equal(batcher_next(&p, ones, 10, 0, 0, NULL), 8);
    assert_int_equal(batcher_next(&p, ones, 7, 0, 0, NULL), 0);
    /* Not max, but the next request does not fit: waiting cannot fill
     * the batch more (whole requests, in order). */
    const uint32_t gap[] = {5, 4, 1};
    assert_int_equal(batcher_next(&p, gap, 3, 0, 0, NULL), 1);
    const uint32_t gap2[] = {2, 2, 7};
    assert_int_equal(batcher_next(&p, gap2, 3, 0, 0, NULL), 2);
}

static void test_preferred_sizes(void **state)
{
    batcher_policy p = policy(16, 1000000);
    p.preferred[0] = 4;
    p.preferred[1] = 8;
    p.npreferred = 2;
    uint64_t wait = 0;
    /* 3 rows: below every preferred size. */
    const uint32_t three[] = {1, 2};
    assert_int_equal(batcher_next(&p, three, 2, 0, 0, &wait), 0);
    assert_true(wait == 1000000 * US);
    /* 4 rows exactly: runs. */
    const uint32_t four[] = {1, 2, 1};
    assert_int_equal(batcher_next(&p, four, 3, 0, 0, NULL), 3);
    /* 1,2,1,3 = 4 then 7: the run that fills 4 goes, the 3 waits. */
    const uint32_t seven[] = {1, 2, 1, 3};
    assert_int_equal(batcher_next(&p, seven, 4, 0, 0, NULL), 3);
    /* Both 4 and 8 can be filled: the largest. */
    const uint32_t nine[] = {2, 2, 4, 1};
    assert_int_equal(batcher_next(&p, nine, 4, 0, 0, NULL), 3);
    /* Reached but not filled exactly (3, then 6, then 9): wait. */
    const uint32_t skip[] = {3, 3, 3};
    assert_int_equal(batcher_next(&p, skip, 3, 0, 0, &wait), 0);
    /* ... until the delay, then all that fits. */
    assert_int_equal(batcher_next(&p, skip, 3, 1000000 * US, 0, NULL), 3);
    /* Full beats preferred: 16 rows with 4 and 8 on the way. */
    const uint32_t full[] = {4, 4, 8, 1};
    assert_int_equal(batcher_next(&p, full, 4, 0, 0, NULL), 3);
}

static void test_oversize_alone(void **state)
{
    batcher_policy p = policy(8, 1000000);
    const uint32_t big[] = {20, 1, 1};
    assert_int_equal(batcher_next(&p, big, 3, 0, 0, NULL), 1);
    assert_int_equal(batcher_next(&p, big, 1, 0, 0, NULL), 1);
    /* Behind a small one: the small one first, alone (the big one does
     * not fit with it), at once. */
    const uint32_t behind[] = {1, 20};
    assert_int_equal(batcher_next(&p, behind, 2, 0, 0, NULL), 1);
    /* 9 rows is over 8 too. */
    const uint32_t nine[] = {9};
    assert_int_equal(batcher_next(&p, nine, 1, 0, 0, NULL), 1);
}

static void test_delay_zero(void **state)
{
    batcher_policy p = policy(8, 0);
    const uint32_t rows[] = {1, 2, 3, 4};
    /* Whatever is there, at once, up to max rows. */
    assert_int_equal(batcher_next(&p, rows, 1, 0, 0, NULL), 1);
    assert_int_equal(batcher_next(&p, rows, 3, 0, 0, NULL), 3);
    assert_int_equal(batcher_next(&p, rows, 4, 0, 0, NULL), 3);
}

static void test_flush(void **state)
{
    batcher_policy p = policy(8, 1000000);
    const uint32_t rows[] = {1, 2, 6};
    /* Draining: no waiting, still whole requests up to max. */
    assert_int_equal(batcher_next(&p, rows, 1, 0, 1, NULL), 1);
    assert_int_equal(batcher_next(&p, rows, 3, 0, 1, NULL), 2);
    assert_int_equal(batcher_next(&p, rows + 2, 1, 0, 1, NULL), 1);
}

static void test_batching_off(void **state)
{
    batcher_policy p = policy(1, 1000000);
    const uint32_t rows[] = {1, 1, 1};
    assert_int_equal(batcher_next(&p, rows, 3, 0, 0, NULL), 1);
    const uint32_t big[] = {3, 1};
    assert_int_equal(batcher_next(&p, big, 2, 0, 0, NULL), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nothing_waits),
        cmocka_unit_test(test_waits_for_the_delay),
        cmocka_unit_test(test_full_batch_runs_at_once),
        cmocka_unit_test(test_preferred_sizes),
        cmocka_unit_test(test_oversize_alone),
        cmocka_unit_test(test_delay_zero),
        cmocka_unit_test(test_flush),
        cmocka_unit_test(test_batching_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
