/* test_worker.c - the worker's pure parts (node/worker.h): the heartbeat
 * interval TRAINYARD_HEARTBEAT_MS asks for. The process itself is tested
 * by tests/integration/test_worker_protocol.c. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "node/worker.h"

static void test_heartbeat_interval(void **state)
{
    assert_int_equal(worker_heartbeat_ms(NULL), 2000);
    assert_int_equal(worker_heartbeat_ms(""), 2000);
    assert_int_equal(WPROTO_HEARTBEAT_DEFAULT_MS, 2000);
    assert_int_equal(worker_heartbeat_ms("50"), 50);
    assert_int_equal(worker_heartbeat_ms("10"), 10);
    assert_int_equal(worker_heartbeat_ms("3600000"), 3600000);
    static const char *const bad[] = {
        "9",       "0",   "-5",
        "3600001", "1e3", "100ms",
        " 100",    "abc", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(worker_heartbeat_ms(bad[i]), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_heartbeat_interval),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
