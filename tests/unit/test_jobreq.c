/*
 * Unit tests for elastic gangs (issue 33): resources.min_workers as
 * jobreq_min_workers parses it, the world size jobreq_world chooses at a
 * start, and which Slurm nodes count as up (slurm_node_up) when the
 * Slurm executor counts them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <jansson.h>
#include <string.h>

#include "cluster/slurm.h"
#include "jobs/jobreq.h"

/* The largest W in [min, workers] within what can run, else 0. */
static void test_world_choice(void **state)
{
    (void)state;
    /* No bound: all the workers. */
    assert_int_equal(jobreq_world(4, 2, -1), 4);
    /* Room for more than asked: still the workers asked for. */
    assert_int_equal(jobreq_world(4, 2, 9), 4);
    assert_int_equal(jobreq_world(4, 2, 4), 4);
    /* Shrunk: as many as fit, down to min_workers. */
    assert_int_equal(jobreq_world(4, 2, 3), 3);
    assert_int_equal(jobreq_world(4, 2, 2), 2);
    assert_int_equal(jobreq_world(2, 1, 1), 1);
    /* Fewer than min_workers: it waits. */
    assert_int_equal(jobreq_world(4, 2, 1), 0);
    assert_int_equal(jobreq_world(4, 2, 0), 0);
    /* Not elastic (min = workers, or a min out of range): all or wait. */
    assert_int_equal(jobreq_world(3, 3, 2), 0);
    assert_int_equal(jobreq_world(3, 3, 3), 3);
    assert_int_equal(jobreq_world(3, 0, 2), 0);
    assert_int_equal(jobreq_world(3, 7, 2), 0);
    /* One worker is one worker. */
    assert_int_equal(jobreq_world(1, 1, 0), 0);
    assert_int_equal(jobreq_world(0, 1, 5), 1);
}

/* Parses {"resources": text} as jobs do; returns the status. */
static ty_status parse(const char *text, int *workers, int *min_workers,
                       json_t **norm, ty_err *err)
{
    json_error_t jerr;
    json_t *res = json_loads(text, 0, &jerr);
    assert_non_null(res);
    sched_request req;
    *norm = NULL;
    ty_status s = jobreq_parse(res, 0, &req, workers, norm, err);
    if (s == TY_OK)
        s = jobreq_min_workers(res, *workers, min_workers, *norm, err);
    json_decref(res);
    return s;
}

static void test_min_workers_parse(void **state)
{
    (void)state;
    int n = 0, m = 0;
    json_t *norm = NULL;
    ty_err err = {0};
    /* Elastic: kept, and echoed in the normalized copy. */
    assert_int_equal(
        parse("{\"workers\": 3, \"min_workers\": 2}", &n, &m, &norm, &err),
        TY_OK);
    assert_int_equal(n, 3);
    assert_int_equal(m, 2);
    assert_int_equal(json_integer_value(json_object_get(norm, "min_workers")),
                     2);
    assert_int_equal(json_integer_value(json_object_get(norm, "workers")), 3);
    json_decref(norm);
    /* Absent or null: workers (not elastic), nothing echoed. */
    assert_int_equal(parse("{\"workers\": 3}", &n, &m, &norm, &err), TY_OK);
    assert_int_equal(m, 3);
    assert_null(json_object_get(norm, "min_workers"));
    json_decref(norm);
    assert_int_equal(
        parse("{\"workers\": 3, \"min_workers\": null}", &n, &m, &norm, &err),
        TY_OK);
    assert_int_equal(m, 3);
    json_decref(norm);
    /* min = workers is allowed (the same as absent). */
    assert_int_equal(
        parse("{\"workers\": 2, \"min_workers\": 2}", &n, &m, &norm, &err),
        TY_OK);
    assert_int_equal(m, 2);
    json_decref(norm);
    /* Refusals name resources.min_workers. */
    static const char *const bad[] = {
        "{\"workers\": 2, \"min_workers\": 3}",
        "{\"workers\": 2, \"min_workers\": 0}",
        "{\"workers\": 2, \"min_workers\": -1}",
        "{\"workers\": 2, \"min_workers\": 1.5}",
        "{\"workers\": 2, \"min_workers\": \"1\"}",
        "{\"min_workers\": 1}",
        "{\"workers\": 1, \"min_workers\": 1}",
        "{\"gpu\": \"none\", \"min_workers\": 2}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&err, 0, sizeof err);
        assert_int_equal(parse(bad[i], &n, &m, &norm, &err), TY_EINVAL);
        assert_string_equal(err.field, "resources.min_workers");
        assert_non_null(strstr(err.msg, "min_workers"));
        json_decref(norm);
    }
    /* A deployment's resources take no min_workers (nor workers). */
    json_t *res = json_pack("{s:i}", "min_workers", 1);
    sched_request req;
    assert_int_equal(jobreq_parse(res, 0, &req, NULL, NULL, &err), TY_EINVAL);
    json_decref(res);
}

/* Which nodes an elastic gang may count on. */
static void test_slurm_node_up(void **state)
{
    (void)state;
    assert_true(slurm_node_up("idle", ""));
    assert_true(slurm_node_up("mixed", NULL));
    assert_true(slurm_node_up("allocated", ""));
    assert_true(slurm_node_up("IDLE", ""));
    assert_true(slurm_node_up("completing", ""));
    /* A lost node: down once Slurm says so, silent before. */
    assert_false(slurm_node_up("down", ""));
    assert_false(slurm_node_up("down", "NOT_RESPONDING"));
    assert_false(slurm_node_up("allocated", "NOT_RESPONDING"));
    assert_false(slurm_node_up("idle*", ""));
    /* Drained or draining, failing, powered down, in maintenance. */
    assert_false(slurm_node_up("idle", "DRAIN"));
    assert_false(slurm_node_up("mixed", "COMPLETING,DRAIN"));
    assert_false(slurm_node_up("IDLE+DRAIN", ""));
    assert_false(slurm_node_up("idle", "FAIL"));
    assert_false(slurm_node_up("idle", "POWERED_DOWN"));
    assert_false(slurm_node_up("idle", "MAINTENANCE"));
    assert_false(slurm_node_up("future", ""));
    assert_false(slurm_node_up("unknown", ""));
    assert_false(slurm_node_up("", ""));
    assert_false(slurm_node_up(NULL, ""));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_world_choice),
        cmocka_unit_test(test_min_workers_parse),
        cmocka_unit_test(test_slurm_node_up),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
