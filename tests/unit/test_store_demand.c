/* Unit tests for store/demand: the MIG advisor's demand records. A
 * request's runs add up (a preempted job runs twice), a second insert of
 * the same id changes nothing, the window query returns by arrival, and
 * recovery prunes old rows and closes the runs a stopped server left
 * open without counting their unknown rest. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "store/demand.h"
#include "testutil.h"

static int setup(void **state)
{
    static const uint8_t hash[32] = {1};
    return tu_store_setup(state, "tn_a", "key_a", hash);
}

static double num(const json_t *row, const char *k)
{
    return json_number_value(json_object_get(row, k));
}

static void test_demand_runs_add_up(void **state)
{
    store *st = ((tu_store_fixture *)*state)->st;
    ty_err err = {0};
    store_demand d = {.id = "job_1",
                      .tenant_id = "tn_a",
                      .arrival = 1000,
                      .req_kind = 2,
                      .profile = "3g.40gb"};
    assert_int_equal(store_demand_insert(st, &d, &err), TY_OK);
    d.arrival = 5000; /* the same id again: ignored */
    assert_int_equal(store_demand_insert(st, &d, &err), TY_OK);
    store_demand e = {.id = "rep_2",
                      .tenant_id = "tn_a",
                      .arrival = 1500,
                      .req_kind = 3,
                      .min_compute_slices = 2,
                      .min_memory_bytes = 1 << 30,
                      .serving = 1};
    assert_int_equal(store_demand_insert(st, &e, &err), TY_OK);
    store_demand old = {.id = "job_0",
                        .tenant_id = "tn_a",
                        .arrival = 10,
                        .req_kind = 1,
                        .refused = 1};
    assert_int_equal(store_demand_insert(st, &old, &err), TY_OK);

    /* Runs 1100-1400 and 2000-2500: 800 s held, first start 1100. */
    assert_int_equal(store_demand_started(st, "job_1", 1100, &err), TY_OK);
    assert_int_equal(store_demand_stopped(st, "job_1", 1400, &err), TY_OK);
    assert_int_equal(store_demand_started(st, "job_1", 2000, &err), TY_OK);
    assert_int_equal(store_demand_stopped(st, "job_1", 2500, &err), TY_OK);
    /* The replica is still running from 1600. */
    assert_int_equal(store_demand_started(st, "rep_2", 1600, &err), TY_OK);

    json_t *rows = NULL;
    assert_int_equal(store_demand_window(st, 0, 1e12, 100, &rows, &err), TY_OK);
    assert_int_equal(json_array_size(rows), 3);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(rows, 0), "id")),
        "job_0");
    json_t *j = json_array_get(rows, 1);
    assert_string_equal(json_string_value(json_object_get(j, "id")), "job_1");
    assert_true(num(j, "arrival") == 1000);
    assert_true(num(j, "first_start") == 1100);
    assert_true(fabs(num(j, "held_s") - 800) < 1e-9);
    assert_true(num(j, "ended") == 2500);
    assert_true(json_is_null(json_object_get(j, "last_start")));
    assert_string_equal(json_string_value(json_object_get(j, "profile")),
                        "3g.40gb");
    json_t *r = json_array_get(rows, 2);
    assert_true(num(r, "last_start") == 1600);
    assert_int_equal(json_integer_value(json_object_get(r, "serving")), 1);
    assert_int_equal(
        json_integer_value(json_object_get(r, "min_compute_slices")), 2);
    json_decref(rows);

    /* A window: [1000, 1500) holds job_1 only. */
    assert_int_equal(store_demand_window(st, 1000, 1500, 100, &rows, &err),
                     TY_OK);
    assert_int_equal(json_array_size(rows), 1);
    json_decref(rows);

    /* Recovery: job_0 (arrival 10) pruned; the replica's open run closed
     * without counting. */
    int64_t pruned = 0;
    assert_int_equal(store_demand_recover(st, 500, &pruned, &err), TY_OK);
    assert_int_equal(pruned, 1);
    assert_int_equal(store_demand_window(st, 0, 1e12, 100, &rows, &err), TY_OK);
    assert_int_equal(json_array_size(rows), 2);
    r = json_array_get(rows, 1);
    assert_true(json_is_null(json_object_get(r, "last_start")));
    assert_true(num(r, "held_s") == 0);
    json_decref(rows);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_demand_runs_add_up, setup,
                                        tu_store_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
