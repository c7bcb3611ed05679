/* test_jobreq_gpus.c - a job's resource request as POST /v1/jobs spells it
 * (jobs/jobreq.h): resources.gpus, a gang of whole GPUs (issue 33), and
 * its refusals, each naming the field; resources.workers beside it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "jobs/jobreq.h"

/* Parses text as resources on a host with or without GPUs. */
static ty_status parse(const char *text, int host_has_gpus, sched_request *req,
                       int *workers, json_t **norm, ty_err *err)
{
    json_error_t jerr;
    json_t *res = json_loads(text, 0, &jerr);
    assert_non_null(res);
    memset(err, 0, sizeof *err);
    ty_status s = jobreq_parse(res, host_has_gpus, req, workers, norm, err);
    json_decref(res);
    return s;
}

static void test_gpus_is_a_whole_gpu_gang(void **state)
{
    (void)state;
    sched_request req;
    int workers = 0;
    json_t *norm = NULL;
    ty_err err;
    assert_int_equal(parse("{\"gpus\": 4}", 1, &req, &workers, &norm, &err),
                     TY_OK);
    assert_int_equal(workers, 4);
    assert_int_equal(req.kind, SCHED_REQ_MIN);
    assert_int_equal(req.min_compute_slices, 7);
    assert_string_equal(json_string_value(json_object_get(norm, "gpu")),
                        "whole");
    assert_int_equal(json_integer_value(json_object_get(norm, "gpus")), 4);
    /* The normalized copy parses back to the same request (a restart). */
    sched_request again;
    int w2 = 0;
    assert_int_equal(jobreq_parse(norm, 1, &again, &w2, NULL, &err), TY_OK);
    assert_int_equal(w2, 4);
    assert_int_equal(again.kind, SCHED_REQ_MIN);
    assert_int_equal(again.min_compute_slices, 7);
    json_decref(norm);

    /* "any" beside it is still a whole GPU; a memory minimum stays. */
    assert_int_equal(parse("{\"gpus\": 2, \"gpu\": \"any\"}", 1, &req, &workers,
                           &norm, &err),
                     TY_OK);
    assert_int_equal(req.kind, SCHED_REQ_MIN);
    assert_int_equal(req.min_compute_slices, 7);
    assert_string_equal(json_string_value(json_object_get(norm, "gpu")),
                        "whole");
    json_decref(norm);
    assert_int_equal(parse("{\"gpus\": 2, \"gpu\": {\"min_memory_gb\": 40}}", 1,
                           &req, &workers, &norm, &err),
                     TY_OK);
    assert_int_equal(req.kind, SCHED_REQ_MIN);
    assert_int_equal(req.min_compute_slices, 7);
    assert_true(req.min_memory_bytes == 40ull << 30);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(norm, "gpu"), "min_compute_slices")),
                     7);
    json_decref(norm);

    /* gpus 1: an ordinary whole-GPU job. */
    assert_int_equal(parse("{\"gpus\": 1}", 1, &req, &workers, NULL, &err),
                     TY_OK);
    assert_int_equal(workers, 1);
    assert_int_equal(req.kind, SCHED_REQ_MIN);
    assert_int_equal(req.min_compute_slices, 7);
    /* null: as if absent */
    assert_int_equal(parse("{\"gpus\": null, \"gpu\": \"none\"}", 1, &req,
                           &workers, NULL, &err),
                     TY_OK);
    assert_int_equal(workers, 1);
    assert_int_equal(req.kind, SCHED_REQ_NONE);
}

static void test_gpus_refusals_name_the_field(void **state)
{
    (void)state;
    static const struct {
        const char *resources;
        int host_has_gpus;
        const char *field;
    } bad[] = {
        {"{\"gpus\": 0}", 1, "resources.gpus"},
        {"{\"gpus\": 65}", 1, "resources.gpus"},
        {"{\"gpus\": 2.5}", 1, "resources.gpus"},
        {"{\"gpus\": \"2\"}", 1, "resources.gpus"},
        {"{\"gpus\": true}", 1, "resources.gpus"},
        {"{\"gpus\": 2}", 0, "resources.gpus"}, /* no GPUs at all */
        {"{\"gpus\": 2, \"workers\": 2}", 1, "resources.gpus"},
        {"{\"gpus\": 2, \"workers\": 1}", 1, "resources.gpus"},
        {"{\"gpus\": 2, \"gpu\": \"1g.18gb\"}", 1, "resources.gpu"},
        {"{\"gpus\": 1, \"gpu\": \"3g.71gb\"}", 1, "resources.gpu"},
        {"{\"gpus\": 2, \"gpu\": \"none\"}", 1, "resources.gpu"},
        {"{\"gpus\": 2, \"gpu\": \"NOPE!\"}", 1, "resources.gpu"},
        {"{\"gpus\": 2, \"gpu\": {\"min_memory_gb\": -1}}", 1,
         "resources.gpu.min_memory_gb"},
        {"{\"gpus\": 2, \"gpu\": {\"x\": 1}}", 1, "resources.gpu.x"},
        {"{\"gpus\": 2, \"gpux\": 1}", 1, "resources.gpux"},
        /* a gang of GPUs is never elastic */
        {"{\"gpus\": 2, \"min_workers\": 1}", 1, "resources.min_workers"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sched_request req;
        int workers = 0;
        json_t *norm = NULL;
        ty_err err;
        ty_status s = parse(bad[i].resources, bad[i].host_has_gpus, &req,
                            &workers, &norm, &err);
        if (s != TY_EINVAL || strcmp(err.field, bad[i].field))
            fail_msg("%s: status %d field \"%s\" (%s); want %s",
                     bad[i].resources, (int)s, err.field, err.msg,
                     bad[i].field);
        assert_null(norm);
        assert_true(strlen(err.msg) > 0);
    }
}

/* nodes and gpus_per_node: m Slurm nodes of n whole GPUs, m * n ranks. */
static void test_nodes_of_gpus(void **state)
{
    (void)state;
    sched_request req;
    int workers = 0;
    json_t *norm = NULL;
    ty_err err;
    assert_int_equal(parse("{\"nodes\": 3, \"gpus_per_node\": 2}", 1, &req,
                           &workers, &norm, &err),
                     TY_OK);
    assert_int_equal(workers, 6);
    assert_int_equal(req.kind, SCHED_REQ_MIN);
    assert_int_equal(req.min_compute_slices, 7);
    assert_int_equal(json_integer_value(json_object_get(norm, "nodes")), 3);
    assert_int_equal(json_integer_value(json_object_get(norm, "gpus_per_node")),
                     2);
    assert_null(json_object_get(norm, "gpus"));
    int w2 = 0;
    assert_int_equal(jobreq_parse(norm, 1, &req, &w2, NULL, &err), TY_OK);
    assert_int_equal(w2, 6);
    json_decref(norm);

    static const struct {
        const char *resources;
        int host_has_gpus;
        const char *field;
    } bad[] = {
        {"{\"nodes\": 2}", 1, "resources.gpus_per_node"},
        {"{\"gpus_per_node\": 2}", 1, "resources.nodes"},
        {"{\"nodes\": 0, \"gpus_per_node\": 2}", 1, "resources.nodes"},
        {"{\"nodes\": 2, \"gpus_per_node\": 0}", 1, "resources.gpus_per_node"},
        {"{\"nodes\": 2, \"gpus_per_node\": 65}", 1, "resources.gpus_per_node"},
        {"{\"nodes\": 256, \"gpus_per_node\": 8}", 1, "resources.nodes"},
        {"{\"nodes\": 2, \"gpus_per_node\": 2, \"gpus\": 4}", 1,
         "resources.gpus"},
        {"{\"nodes\": 2, \"gpus_per_node\": 2, \"workers\": 2}", 1,
         "resources.nodes"},
        {"{\"nodes\": 2, \"gpus_per_node\": 2}", 0, "resources.nodes"},
        {"{\"nodes\": 2, \"gpus_per_node\": 2, \"gpu\": \"1g.18gb\"}", 1,
         "resources.gpu"},
        {"{\"nodes\": 2, \"gpus_per_node\": 2, \"min_workers\": 1}", 1,
         "resources.min_workers"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ty_status s = parse(bad[i].resources, bad[i].host_has_gpus, &req,
                            &workers, &norm, &err);
        if (s != TY_EINVAL || strcmp(err.field, bad[i].field))
            fail_msg("%s: status %d field \"%s\" (%s); want %s",
                     bad[i].resources, (int)s, err.field, err.msg,
                     bad[i].field);
        assert_null(norm);
    }
}

static void test_gpus_not_a_deployment_key(void **state)
{
    (void)state;
    /* Without *workers (a deployment's resources) gpus is unknown. */
    json_t *res = json_pack("{s:i}", "gpus", 2);
    sched_request req;
    ty_err err = {0};
    assert_int_equal(jobreq_parse(res, 1, &req, NULL, NULL, &err), TY_EINVAL);
    assert_string_equal(err.field, "resources.gpus");
    json_decref(res);
}

static void test_workers_unchanged(void **state)
{
    (void)state;
    sched_request req;
    int workers = 0;
    json_t *norm = NULL;
    ty_err err;
    assert_int_equal(parse("{\"workers\": 3}", 1, &req, &workers, &norm, &err),
                     TY_OK);
    assert_int_equal(workers, 3);
    assert_int_equal(req.kind, SCHED_REQ_NONE);
    assert_null(json_object_get(norm, "gpus"));
    json_decref(norm);
    assert_int_equal(parse("{\"workers\": 2, \"gpu\": \"whole\"}", 1, &req,
                           &workers, NULL, &err),
                     TY_EINVAL);
    assert_string_equal(err.field, "resources.gpu");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpus_is_a_whole_gpu_gang),
        cmocka_unit_test(test_gpus_refusals_name_the_field),
        cmocka_unit_test(test_nodes_of_gpus),
        cmocka_unit_test(test_gpus_not_a_deployment_key),
        cmocka_unit_test(test_workers_unchanged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
