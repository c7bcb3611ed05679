/* Unit tests for a deployment's spec (deploy/deployspec.h): the defaults,
 * every bound and every unknown key rejected naming its field, PATCH
 * changing only what it names (and nothing when it fails), and the rendered
 * spec parsing back to the same spec. Also jobreq's "whole" GPU, which
 * deployments and jobs share. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deploy/deployspec.h"
#include "jobs/jobreq.h"

static json_t *load(const char *text)
{
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    if (!j)
        fail_msg("bad test JSON (%s): %s", e.text, text);
    return j;
}

/* Parses text (a POST body) into *s, which the caller frees. */
static void parse_ok(const char *text, int gpus, deploy_spec *s)
{
    json_t *b = load(text);
    ty_err err = {0};
    ty_status st = deploy_spec_parse(b, gpus, s, &err);
    json_decref(b);
    if (st != TY_OK)
        fail_msg("%s: %s (field %s)", text, err.msg, err.field);
}

/* The POST body must be refused with TY_EINVAL naming field. */
static void parse_bad(const char *text, const char *field)
{
    json_t *b = load(text);
    ty_err err = {0};
    deploy_spec s;
    memset(&s, 0x5a, sizeof s);
    ty_status st = deploy_spec_parse(b, 1, &s, &err);
    json_decref(b);
    if (st != TY_EINVAL)
        fail_msg("%s: got %s, wanted TY_EINVAL on %s", text, ty_status_name(st),
                 field);
    if (strcmp(err.field, field))
        fail_msg("%s: the error names '%s', wanted '%s' (%s)", text, err.field,
                 field, err.msg);
    assert_true(strlen(err.msg) > 0);
    /* On failure *out holds nothing to free. */
    assert_null(s.resources);
}

static void test_defaults(void **state)
{
    (void)state;
    deploy_spec s;
    parse_ok("{\"name\": \"fashion\", \"model\": \"mdl_abc\"}", 1, &s);
    assert_string_equal(s.name, "fashion");
    assert_string_equal(s.model, "mdl_abc");
    assert_int_equal(s.min_replicas, 1);
    assert_int_equal(s.max_replicas, 1);
    assert_int_equal(s.request.kind, SCHED_REQ_ANY);
    assert_string_equal(json_string_value(json_object_get(s.resources, "gpu")),
                        "any");
    assert_int_equal(s.max_batch_size, 32);
    assert_int_equal(s.max_queue_delay_us, 500);
    assert_int_equal(s.npreferred, 0);
    assert_true(s.rps == 0);
    assert_int_equal(s.burst, 0);
    assert_int_equal(s.max_concurrency, 0);
    assert_int_equal(s.tokens_per_minute, 0);
    assert_true(s.target_in_flight == 32);
    assert_true(s.target_queue_ms == 0); /* no latency target */
    assert_true(s.scale_up_after_s == 2);
    assert_true(s.scale_down_after_s == 60);
    assert_int_equal(s.priority, 0);
    deploy_spec_free(&s);
    deploy_spec_free(&s); /* twice is harmless */

    /* No GPUs: "none", as a job's default. */
    parse_ok("{\"name\": \"a\", \"model\": \"m\"}", 0, &s);
    assert_int_equal(s.request.kind, SCHED_REQ_NONE);
    assert_string_equal(json_string_value(json_object_get(s.resources, "gpu")),
                        "none");
    deploy_spec_free(&s);

    /* Derived defaults: max follows a larger min; target follows
     * max_batch_size; burst follows the rate. */
    parse_ok("{\"name\": \"a\", \"model\": \"m\", \"replicas\": {\"min\": 3}, "
             "\"batching\": {\"max_batch_size\": 8}, \"limits\": "
             "{\"requests_per_second\": 12.5}}",
             1, &s);
    assert_int_equal(s.min_replicas, 3);
    assert_int_equal(s.max_replicas, 3);
    assert_true(s.target_in_flight == 8);
    assert_true(s.rps == 12.5);
    assert_int_equal(s.burst, 13);
    deploy_spec_free(&s);
    parse_ok("{\"name\": \"a\", \"model\": \"m\", \"replicas\": {\"min\": 0}, "
             "\"limits\": {\"requests_per_second\": 0.2}}",
             1, &s);
    assert_int_equal(s.min_replicas, 0);
    assert_int_equal(s.max_replicas, 1);
    assert_int_equal(s.burst, 1);
    deploy_spec_free(&s);

    /* Nulls take the defaults. */
    parse_ok("{\"name\": \"a\", \"model\": \"m\", \"priority\": null, "
             "\"autoscaling\": {\"target_in_flight\": null}, \"limits\": "
             "{\"requests_per_second\": null, \"max_concurrency\": null}}",
             1, &s);
    assert_true(s.target_in_flight == 32);
    assert_true(s.rps == 0);
    assert_int_equal(s.max_concurrency, 0);
    deploy_spec_free(&s);
}

static void test_every_member(void **state)
{
    (void)state;
    deploy_spec s;
    parse_ok("{\"name\": \"Fash-ion_2.v1\", \"model\": \"my model\", "
             "\"replicas\": {\"min\": 0, \"max\": 64}, "
             "\"resources\": {\"gpu\": \"1g.18gb\"}, "
             "\"batching\": {\"max_batch_size\": 4096, "
             "\"max_queue_delay_us\": 1000000, "
             "\"preferred_batch_sizes\": [1, 2, 4, 8, 16, 32, 64, 4096]}, "
             "\"limits\": {\"requests_per_second\": 1000000, \"burst\": "
             "1000000, \"max_concurrency\": 100000, "
             "\"tokens_per_minute\": 1000000000}, "
             "\"autoscaling\": {\"target_in_flight\": 0.5, "
             "\"target_queue_ms\": 60000, "
             "\"scale_up_after_s\": 0, \"scale_down_after_s\": 86400}, "
             "\"priority\": -1000000}",
             0, &s);
    assert_string_equal(s.name, "Fash-ion_2.v1");
    assert_string_equal(s.model, "my model");
    assert_int_equal(s.min_replicas, 0);
    assert_int_equal(s.max_replicas, DEPLOY_MAX_REPLICAS);
    assert_int_equal(s.request.kind, SCHED_REQ_PROFILE);
    assert_string_equal(s.request.profile, "1g.18gb");
    assert_int_equal(s.max_batch_size, DEPLOY_MAX_BATCH);
    assert_int_equal(s.max_queue_delay_us, 1000000);
    assert_int_equal(s.npreferred, DEPLOY_MAX_PREFERRED);
    assert_int_equal(s.preferred[0], 1);
    assert_int_equal(s.preferred[7], 4096);
    assert_true(s.rps == 1000000);
    assert_int_equal(s.burst, 1000000);
    assert_int_equal(s.max_concurrency, 100000);
    assert_int_equal(s.tokens_per_minute, 1000000000);
    assert_true(s.target_in_flight == 0.5);
    assert_true(s.target_queue_ms == 60000);
    assert_true(s.scale_up_after_s == 0);
    assert_true(s.scale_down_after_s == 86400);
    assert_int_equal(s.priority, -1000000);
    deploy_spec_free(&s);

    /* A whole GPU: 7 compute slices, any memory, normalized as "whole". */
    parse_ok("{\"name\": \"w\", \"model\": \"m\", \"resources\": {\"gpu\": "
             "\"whole\"}}",
             1, &s);
    assert_int_equal(s.request.kind, SCHED_REQ_MIN);
    assert_int_equal(s.request.min_compute_slices, 7);
    assert_true(s.request.min_memory_bytes == 0);
    assert_string_equal(json_string_value(json_object_get(s.resources, "gpu")),
                        "whole");
    deploy_spec_free(&s);
}

static void test_bounds_and_unknown_keys(void **state)
{
    (void)state;
/* Ten bytes, to spell long strings. */
#define TEN "0123456789"
#define B "{\"name\": \"a\", \"model\": \"m\", "
    static const struct {
        const char *body, *field;
    } cases[] = {
        /* the body and its keys */
        {"{\"name\": \"a\", \"model\": \"m\", \"colour\": 1}", "colour"},
        {"{\"model\": \"m\"}", "name"},
        {"{\"name\": \"a\"}", "model"},
        {"{\"name\": \"\", \"model\": \"m\"}", "name"},
        {"{\"name\": 7, \"model\": \"m\"}", "name"},
        {"{\"name\": \"a b\", \"model\": \"m\"}", "name"},
        {"{\"name\": \"a/b\", \"model\": \"m\"}", "name"},
        {"{\"name\": \"0123456789012345678901234567890123456789012345678901"
         "234567890123\", \"model\": \"m\"}",
         "name"},
        {"{\"name\": \"a\", \"model\": \"\"}", "model"},
        {"{\"name\": \"a\", \"model\": 5}", "model"},
        /* a model's name is at most STORE_NAME_MAX (200) bytes */
        {"{\"name\": \"a\", \"model\": \"" TEN TEN TEN TEN TEN TEN TEN TEN TEN
             TEN TEN TEN TEN TEN TEN TEN TEN TEN TEN TEN "0\"}",
         "model"},
        /* replicas */
        {B "\"replicas\": 2}", "replicas"},
        {B "\"replicas\": null}", "replicas"},
        {B "\"replicas\": {\"min\": 1, \"most\": 2}}", "replicas.most"},
        {B "\"replicas\": {\"min\": -1}}", "replicas.min"},
        {B "\"replicas\": {\"min\": 65, \"max\": 64}}", "replicas.min"},
        {B "\"replicas\": {\"min\": 1.5}}", "replicas.min"},
        {B "\"replicas\": {\"max\": 0}}", "replicas.max"},
        {B "\"replicas\": {\"max\": 65}}", "replicas.max"},
        {B "\"replicas\": {\"max\": \"2\"}}", "replicas.max"},
        {B "\"replicas\": {\"min\": 3, \"max\": 2}}", "replicas.min"},
        /* resources, as a job's */
        {B "\"resources\": {\"gpus\": \"any\"}}", "resources.gpus"},
        {B "\"resources\": {\"gpu\": \"Whole\"}}", "resources.gpu"},
        {B "\"resources\": {\"gpu\": {\"min_compute_slices\": 8}}}",
         "resources.gpu.min_compute_slices"},
        {B "\"resources\": []}", "resources"},
        /* batching */
        {B "\"batching\": []}", "batching"},
        {B "\"batching\": {\"max_batch\": 4}}", "batching.max_batch"},
        {B "\"batching\": {\"max_batch_size\": 0}}", "batching.max_batch_size"},
        {B "\"batching\": {\"max_batch_size\": 4097}}",
         "batching.max_batch_size"},
        {B "\"batching\": {\"max_queue_delay_us\": -1}}",
         "batching.max_queue_delay_us"},
        {B "\"batching\": {\"max_queue_delay_us\": 1000001}}",
         "batching.max_queue_delay_us"},
        {B "\"batching\": {\"preferred_batch_sizes\": 8}}",
         "batching.preferred_batch_sizes"},
        {B "\"batching\": {\"preferred_batch_sizes\": [1,2,3,4,5,6,7,8,9]}}",
         "batching.preferred_batch_sizes"},
        {B "\"batching\": {\"preferred_batch_sizes\": [1, 0]}}",
         "batching.preferred_batch_sizes[1]"},
        {B "\"batching\": {\"preferred_batch_sizes\": [4, 8, 8]}}",
         "batching.preferred_batch_sizes[2]"},
        {B "\"batching\": {\"preferred_batch_sizes\": [4, 2]}}",
         "batching.preferred_batch_sizes[1]"},
        {B "\"batching\": {\"preferred_batch_sizes\": [2, 4.5]}}",
         "batching.preferred_batch_sizes[1]"},
        {B "\"batching\": {\"preferred_batch_sizes\": [8, 16, 64]}}",
         "batching.preferred_batch_sizes[2]"}, /* above the default 32 */
        {B "\"batching\": {\"max_batch_size\": 4, "
           "\"preferred_batch_sizes\": [2, 8]}}",
         "batching.preferred_batch_sizes[1]"},
        /* limits */
        {B "\"limits\": 1}", "limits"},
        {B "\"limits\": {\"rps\": 1}}", "limits.rps"},
        {B "\"limits\": {\"requests_per_second\": 0}}",
         "limits.requests_per_second"},
        {B "\"limits\": {\"requests_per_second\": -2}}",
         "limits.requests_per_second"},
        {B "\"limits\": {\"requests_per_second\": 1000001}}",
         "limits.requests_per_second"},
        {B "\"limits\": {\"requests_per_second\": \"5\"}}",
         "limits.requests_per_second"},
        {B "\"limits\": {\"burst\": 5}}", "limits.burst"},
        {B "\"limits\": {\"requests_per_second\": 5, \"burst\": 0}}",
         "limits.burst"},
        {B "\"limits\": {\"requests_per_second\": 5, \"burst\": 1000001}}",
         "limits.burst"},
        {B "\"limits\": {\"max_concurrency\": 0}}", "limits.max_concurrency"},
        {B "\"limits\": {\"max_concurrency\": 100001}}",
         "limits.max_concurrency"},
        {B "\"limits\": {\"tokens_per_minute\": 0}}",
         "limits.tokens_per_minute"},
        {B "\"limits\": {\"tokens_per_minute\": -5}}",
         "limits.tokens_per_minute"},
        {B "\"limits\": {\"tokens_per_minute\": 1.5}}",
         "limits.tokens_per_minute"},
        {B "\"limits\": {\"tokens_per_minute\": 1000000001}}",
         "limits.tokens_per_minute"},
        {B "\"limits\": {\"tokens_per_minute\": \"600\"}}",
         "limits.tokens_per_minute"},
        /* autoscaling */
        {B "\"autoscaling\": \"on\"}", "autoscaling"},
        {B "\"autoscaling\": {\"target\": 4}}", "autoscaling.target"},
        {B "\"autoscaling\": {\"target_in_flight\": 0}}",
         "autoscaling.target_in_flight"},
        {B "\"autoscaling\": {\"target_in_flight\": 1000001}}",
         "autoscaling.target_in_flight"},
        {B "\"autoscaling\": {\"target_queue_ms\": 0}}",
         "autoscaling.target_queue_ms"},
        {B "\"autoscaling\": {\"target_queue_ms\": 60001}}",
         "autoscaling.target_queue_ms"},
        {B "\"autoscaling\": {\"target_queue_ms\": \"5\"}}",
         "autoscaling.target_queue_ms"},
        {B "\"autoscaling\": {\"scale_up_after_s\": -1}}",
         "autoscaling.scale_up_after_s"},
        {B "\"autoscaling\": {\"scale_up_after_s\": 601}}",
         "autoscaling.scale_up_after_s"},
        {B "\"autoscaling\": {\"scale_down_after_s\": 0.5}}",
         "autoscaling.scale_down_after_s"},
        {B "\"autoscaling\": {\"scale_down_after_s\": 86401}}",
         "autoscaling.scale_down_after_s"},
        /* priority, as a job's */
        {B "\"priority\": 1000001}", "priority"},
        {B "\"priority\": 1.5}", "priority"},
    };
#undef B
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        parse_bad(cases[i].body, cases[i].field);

    /* Not an object at all. */
    json_t *arr = json_array();
    deploy_spec s;
    ty_err err = {0};
    assert_int_equal(deploy_spec_parse(arr, 1, &s, &err), TY_EINVAL);
    json_decref(arr);
}

/* Applies the PATCH text to *s; fails the test on an error. */
static void patch_ok(deploy_spec *s, const char *text, int want_model)
{
    json_t *b = load(text);
    ty_err err = {0};
    int changed = -1;
    ty_status st = deploy_spec_patch(b, s, &changed, &err);
    json_decref(b);
    if (st != TY_OK)
        fail_msg("%s: %s (field %s)", text, err.msg, err.field);
    assert_int_equal(changed, want_model);
}

/* The PATCH must fail naming field and leave *s as rendered before. */
static void patch_bad(deploy_spec *s, const char *text, const char *field)
{
    json_t *before = deploy_spec_json(s);
    json_t *b = load(text);
    ty_err err = {0};
    int changed = -1;
    ty_status st = deploy_spec_patch(b, s, &changed, &err);
    json_decref(b);
    if (st != TY_EINVAL || strcmp(err.field, field))
        fail_msg("%s: got %s on '%s' (%s), wanted TY_EINVAL on '%s'", text,
                 ty_status_name(st), err.field, err.msg, field);
    assert_int_equal(changed, 0);
    json_t *after = deploy_spec_json(s);
    if (!json_equal(before, after)) {
        char *a = json_dumps(before, JSON_COMPACT);
        char *c = json_dumps(after, JSON_COMPACT);
        fail_msg("%s changed the spec: %s -> %s", text, a, c);
    }
    json_decref(before);
    json_decref(after);
}

static void test_patch(void **state)
{
    (void)state;
    deploy_spec s;
    parse_ok("{\"name\": \"p\", \"model\": \"mdl_1\", \"replicas\": {\"min\": "
             "1, \"max\": 4}, \"batching\": {\"max_batch_size\": 16, "
             "\"preferred_batch_sizes\": [4, 8]}, \"limits\": "
             "{\"requests_per_second\": 10, \"burst\": 50, "
             "\"max_concurrency\": 7}, \"priority\": 3}",
             1, &s);
    json_t *resources = json_incref(s.resources);

    /* Nothing given: nothing changes. */
    json_t *before = deploy_spec_json(&s);
    patch_ok(&s, "{}", 0);
    json_t *after = deploy_spec_json(&s);
    assert_true(json_equal(before, after));
    json_decref(after);

    /* One member of one object: only that member changes. */
    patch_ok(&s, "{\"replicas\": {\"max\": 6}}", 0);
    assert_int_equal(s.min_replicas, 1);
    assert_int_equal(s.max_replicas, 6);
    assert_int_equal(s.max_batch_size, 16);
    assert_int_equal(s.npreferred, 2);
    assert_true(s.rps == 10);
    assert_int_equal(s.burst, 50);
    assert_int_equal(s.max_concurrency, 7);
    assert_int_equal(s.priority, 3);
    assert_string_equal(s.model, "mdl_1");
    assert_ptr_equal(s.resources, resources); /* the same document */
    after = deploy_spec_json(&s);
    json_object_set_new(json_object_get(before, "replicas"), "max",
                        json_integer(6));
    assert_true(json_equal(before, after));
    json_decref(after);
    json_decref(before);

    /* model_changed only when "model" is given. */
    patch_ok(&s, "{\"model\": \"mdl_2\", \"priority\": -4}", 1);
    assert_string_equal(s.model, "mdl_2");
    assert_int_equal(s.priority, -4);
    patch_ok(&s, "{\"priority\": null}", 0); /* null: left as it was */
    assert_int_equal(s.priority, -4);

    /* limits: a burst alone; a new rate gets its own burst; null lifts a
     * limit. */
    patch_ok(&s, "{\"limits\": {\"burst\": 20}}", 0);
    assert_true(s.rps == 10);
    assert_int_equal(s.burst, 20);
    patch_ok(&s, "{\"limits\": {\"requests_per_second\": 99.5}}", 0);
    assert_true(s.rps == 99.5);
    assert_int_equal(s.burst, 100);
    assert_int_equal(s.max_concurrency, 7);
    patch_ok(&s, "{\"limits\": {\"max_concurrency\": null}}", 0);
    assert_int_equal(s.max_concurrency, 0);
    /* tokens a minute: set alone, then none again */
    patch_ok(&s, "{\"limits\": {\"tokens_per_minute\": 6000}}", 0);
    assert_int_equal(s.tokens_per_minute, 6000);
    assert_true(s.rps == 99.5);
    patch_bad(&s, "{\"limits\": {\"tokens_per_minute\": 0}}",
              "limits.tokens_per_minute");
    assert_int_equal(s.tokens_per_minute, 6000);
    patch_ok(&s, "{\"limits\": {\"tokens_per_minute\": null}}", 0);
    assert_int_equal(s.tokens_per_minute, 0);
    assert_true(s.rps == 99.5);
    patch_ok(&s, "{\"limits\": {\"requests_per_second\": null}}", 0);
    assert_true(s.rps == 0);
    assert_int_equal(s.burst, 0);

    /* preferred sizes are replaced as a whole, [] clears them */
    patch_ok(&s, "{\"batching\": {\"preferred_batch_sizes\": [2, 4, 16]}}", 0);
    assert_int_equal(s.npreferred, 3);
    assert_int_equal(s.preferred[2], 16);
    patch_ok(&s, "{\"batching\": {\"preferred_batch_sizes\": []}}", 0);
    assert_int_equal(s.npreferred, 0);
    patch_ok(&s, "{\"batching\": {\"preferred_batch_sizes\": [8, 16]}}", 0);

    /* autoscaling keeps the members not named */
    patch_ok(&s, "{\"autoscaling\": {\"scale_up_after_s\": 5}}", 0);
    assert_true(s.scale_up_after_s == 5);
    assert_true(s.scale_down_after_s == 60);
    assert_true(s.target_in_flight == 16);

    /* Invalid patches leave the spec as it was, including those whose
     * members are each fine but whose whole is not, and those that fail
     * after an earlier section was applied. */
    patch_bad(&s, "{\"name\": \"q\"}", "name");
    patch_bad(&s, "{\"resources\": {\"gpu\": \"none\"}}", "resources");
    patch_bad(&s, "{\"colour\": 1}", "colour");
    patch_bad(&s, "{\"model\": \"\"}", "model");
    patch_bad(&s, "{\"model\": \"mdl_3\", \"replicas\": {\"min\": 7}}",
              "replicas.min");
    patch_bad(&s, "{\"replicas\": {\"max\": 0}}", "replicas.max");
    patch_bad(&s, "{\"replicas\": {\"mn\": 0}}", "replicas.mn");
    patch_bad(&s, "{\"batching\": {\"max_batch_size\": 8}}",
              "batching.preferred_batch_sizes[1]");
    patch_bad(&s,
              "{\"replicas\": {\"max\": 2}, \"limits\": {\"burst\": 3, "
              "\"max_concurrency\": 0}}",
              "limits.burst"); /* no rate now */
    patch_bad(&s,
              "{\"priority\": 2, \"autoscaling\": {\"scale_down_after_s\": "
              "0}}",
              "autoscaling.scale_down_after_s");
    patch_bad(&s, "{\"limits\": {\"max_concurrency\": 0}}",
              "limits.max_concurrency");

    /* A body that is not an object. */
    json_t *arr = json_array();
    ty_err err = {0};
    int changed = -1;
    assert_int_equal(deploy_spec_patch(arr, &s, &changed, &err), TY_EINVAL);
    json_decref(arr);
    assert_string_equal(s.model, "mdl_2");

    json_decref(resources);
    deploy_spec_free(&s);
}

static void assert_request_equal(const sched_request *a, const sched_request *b)
{
    assert_int_equal(a->kind, b->kind);
    assert_string_equal(a->profile, b->profile);
    assert_true(a->min_memory_bytes == b->min_memory_bytes);
    assert_int_equal(a->min_compute_slices, b->min_compute_slices);
}

/* render -> parse gives the same spec, rendered the same. */
static void round_trip(const char *text, int gpus)
{
    deploy_spec a, b;
    parse_ok(text, gpus, &a);
    json_t *ja = deploy_spec_json(&a);
    assert_non_null(ja);
    ty_err err = {0};
    /* the other host: a normalized resources is explicit, so it parses the
     * same anywhere */
    if (deploy_spec_parse(ja, !gpus, &b, &err) != TY_OK)
        fail_msg("the rendered spec does not parse: %s (%s)", err.msg,
                 err.field);
    json_t *jb = deploy_spec_json(&b);
    if (!json_equal(ja, jb)) {
        char *x = json_dumps(ja, JSON_COMPACT), *y = json_dumps(jb, 0);
        fail_msg("round trip: %s -> %s", x, y);
    }
    assert_string_equal(a.name, b.name);
    assert_string_equal(a.model, b.model);
    assert_int_equal(a.min_replicas, b.min_replicas);
    assert_int_equal(a.max_replicas, b.max_replicas);
    assert_request_equal(&a.request, &b.request);
    assert_int_equal(a.max_batch_size, b.max_batch_size);
    assert_int_equal(a.max_queue_delay_us, b.max_queue_delay_us);
    assert_int_equal(a.npreferred, b.npreferred);
    assert_memory_equal(a.preferred, b.preferred, sizeof a.preferred);
    assert_true(a.rps == b.rps);
    assert_int_equal(a.burst, b.burst);
    assert_int_equal(a.max_concurrency, b.max_concurrency);
    assert_int_equal(a.tokens_per_minute, b.tokens_per_minute);
    assert_true(a.target_in_flight == b.target_in_flight);
    assert_true(a.scale_up_after_s == b.scale_up_after_s);
    assert_true(a.scale_down_after_s == b.scale_down_after_s);
    assert_int_equal(a.priority, b.priority);
    json_decref(ja);
    json_decref(jb);
    deploy_spec_free(&a);
    deploy_spec_free(&b);
}

static void test_render_round_trip(void **state)
{
    (void)state;
    round_trip("{\"name\": \"r\", \"model\": \"mdl_x\"}", 1);
    round_trip("{\"name\": \"r\", \"model\": \"mdl_x\"}", 0);
    round_trip(
        "{\"name\": \"r2\", \"model\": \"a name\", \"replicas\": {\"min\": 0, "
        "\"max\": 9}, \"resources\": {\"gpu\": {\"min_memory_gb\": 20, "
        "\"min_compute_slices\": 2}}, \"batching\": {\"max_batch_size\": 64, "
        "\"max_queue_delay_us\": 0, \"preferred_batch_sizes\": [16, 64]}, "
        "\"limits\": {\"requests_per_second\": 2.5, \"burst\": 9, "
        "\"max_concurrency\": 12, \"tokens_per_minute\": 6000}, "
        "\"autoscaling\": {\"target_in_flight\": "
        "3.25, \"scale_up_after_s\": 0.5, \"scale_down_after_s\": 300}, "
        "\"priority\": 17}",
        1);
    round_trip("{\"name\": \"w\", \"model\": \"m\", \"resources\": {\"gpu\": "
               "\"whole\"}, \"limits\": {\"max_concurrency\": 1}}",
               0);

    /* The rendered document's shape: what the API shows. */
    deploy_spec s;
    parse_ok("{\"name\": \"r\", \"model\": \"mdl_x\"}", 1, &s);
    json_t *j = deploy_spec_json(&s);
    const char *const keys[] = {"name",        "model",    "replicas",
                                "resources",   "batching", "limits",
                                "autoscaling", "priority"};
    assert_int_equal(json_object_size(j), 8);
    for (size_t i = 0; i < 8; i++)
        assert_non_null(json_object_get(j, keys[i]));
    json_t *limits = json_object_get(j, "limits");
    assert_true(json_is_null(json_object_get(limits, "requests_per_second")));
    assert_true(json_is_null(json_object_get(limits, "burst")));
    assert_true(json_is_null(json_object_get(limits, "max_concurrency")));
    assert_true(json_is_null(json_object_get(limits, "tokens_per_minute")));
    assert_int_equal(json_object_size(limits), 4);
    assert_int_equal(
        json_array_size(json_object_get(json_object_get(j, "batching"),
                                        "preferred_batch_sizes")),
        0);
    /* The rendered resources is a copy: changing it leaves the spec. */
    json_object_set_new(json_object_get(j, "resources"), "gpu",
                        json_string("none"));
    assert_string_equal(json_string_value(json_object_get(s.resources, "gpu")),
                        "any");
    json_decref(j);

    /* A copy shares resources by count and outlives the original. */
    deploy_spec c;
    deploy_spec_copy(&c, &s);
    assert_ptr_equal(c.resources, s.resources);
    deploy_spec_free(&s);
    assert_string_equal(json_string_value(json_object_get(c.resources, "gpu")),
                        "any");
    deploy_spec_free(&c);
}

/* A job's gang of CPU workers: a count, "none" whatever the host has,
 * normalized with the count; a GPU beside it, a bad count, or workers in
 * a deployment's resources are refused naming the field. */
static void test_jobreq_workers(void **state)
{
    (void)state;
    sched_request req;
    json_t *norm = NULL;
    ty_err err = {0};
    int workers = 0;
    json_t *r = load("{\"workers\": 4}");
    assert_int_equal(jobreq_parse(r, 1, &req, &workers, &norm, &err), TY_OK);
    assert_int_equal(workers, 4);
    assert_int_equal(req.kind, SCHED_REQ_NONE);
    json_t *want = load("{\"gpu\": \"none\", \"workers\": 4}");
    assert_true(json_equal(norm, want));
    workers = 0;
    assert_int_equal(jobreq_parse(norm, 1, &req, &workers, NULL, &err), TY_OK);
    assert_int_equal(workers, 4);
    json_decref(want);
    json_decref(norm);
    json_decref(r);
    /* one worker is an ordinary job, the host's default device */
    r = load("{\"workers\": 1}");
    assert_int_equal(jobreq_parse(r, 1, &req, &workers, &norm, &err), TY_OK);
    assert_int_equal(workers, 1);
    assert_int_equal(req.kind, SCHED_REQ_ANY);
    assert_null(json_object_get(norm, "workers"));
    json_decref(norm);
    json_decref(r);
    static const char *const bad[][2] = {
        {"{\"workers\": 0}", "resources.workers"},
        {"{\"workers\": 65}", "resources.workers"},
        {"{\"workers\": 2.5}", "resources.workers"},
        {"{\"workers\": \"2\"}", "resources.workers"},
        {"{\"workers\": 2, \"gpu\": \"any\"}", "resources.gpu"},
        {"{\"workers\": 2, \"gpu\": \"1g.18gb\"}", "resources.gpu"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = load(bad[i][0]);
        memset(&err, 0, sizeof err);
        assert_int_equal(jobreq_parse(r, 1, &req, &workers, NULL, &err),
                         TY_EINVAL);
        assert_string_equal(err.field, bad[i][1]);
        json_decref(r);
    }
    /* "gpu": "none" beside it is what the normalized form says */
    r = load("{\"workers\": 2, \"gpu\": \"none\"}");
    assert_int_equal(jobreq_parse(r, 1, &req, &workers, NULL, &err), TY_OK);
    json_decref(r);
    /* a deployment's resources have no workers */
    r = load("{\"workers\": 2}");
    assert_int_equal(jobreq_parse(r, 1, &req, NULL, NULL, &err), TY_EINVAL);
    assert_string_equal(err.field, "resources.workers");
    json_decref(r);
}

/* jobs take "whole" too: the same request and normalized form. */
static void test_jobreq_whole(void **state)
{
    (void)state;
    json_t *r = load("{\"gpu\": \"whole\"}");
    sched_request req;
    json_t *norm = NULL;
    ty_err err = {0};
    assert_int_equal(jobreq_parse(r, 0, &req, NULL, &norm, &err), TY_OK);
    assert_int_equal(req.kind, SCHED_REQ_MIN);
    assert_int_equal(req.min_compute_slices, 7);
    assert_true(req.min_memory_bytes == 0);
    assert_true(json_equal(r, norm));
    /* and the normalized form parses to the same request */
    sched_request again;
    assert_int_equal(jobreq_parse(norm, 1, &again, NULL, NULL, &err), TY_OK);
    assert_request_equal(&req, &again);
    json_decref(norm);
    json_decref(r);
    /* a profile-like name is still a profile */
    r = load("{\"gpu\": \"7g.141gb\"}");
    assert_int_equal(jobreq_parse(r, 1, &req, NULL, NULL, &err), TY_OK);
    assert_int_equal(req.kind, SCHED_REQ_PROFILE);
    json_decref(r);
    r = load("{\"gpu\": \"WHOLE\"}");
    assert_int_equal(jobreq_parse(r, 1, &req, NULL, NULL, &err), TY_EINVAL);
    assert_string_equal(err.field, "resources.gpu");
    assert_non_null(strstr(err.msg, "whole"));
    json_decref(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_every_member),
        cmocka_unit_test(test_bounds_and_unknown_keys),
        cmocka_unit_test(test_patch),
        cmocka_unit_test(test_render_round_trip),
        cmocka_unit_test(test_jobreq_whole),
        cmocka_unit_test(test_jobreq_workers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
