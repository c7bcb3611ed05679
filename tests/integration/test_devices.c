/*
 * Integration tests for the device inventory: `trainyard serve --devices`
 * with each shipped simulated inventory (gpu/sim/), a layout the hardware
 * could not hold (the start stops, naming the file, GPU and instance,
 * before an admin key exists), --devices none, GET /v1/devices over
 * HTTP, and the GPUs' NVLink domains a sim file gives (h100-4x-2nvl.json).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static srv start_with(const char *devices)
{
    srv s;
    const char *flags[] = {"--devices", devices, NULL};
    if (srv_start(&s, NULL, flags) != 0)
        fail_msg("the server did not start with --devices %s", devices);
    return s;
}

static json_t *get_devices(const srv *s)
{
    resp *r = http_get(s, "/v1/devices");
    assert_int_equal(r->status, 200);
    assert_non_null(r->json);
    json_t *doc = json_incref(r->json);
    resp_free(r);
    return doc;
}

static void read_log(const srv *s, char *text, size_t n)
{
    FILE *f = fopen(s->log, "r");
    assert_non_null(f);
    size_t got = fread(text, 1, n - 1, f);
    text[got] = '\0';
    fclose(f);
}

static void test_h200_seven_slices(void **state)
{
    char path[PATH_MAX], spec[PATH_MAX + 8];
    sim_example("h200-7x1g.json", path);
    snprintf(spec, sizeof spec, "sim:%s", path);
    srv s = start_with(spec);
    json_t *doc = get_devices(&s);
    /* The file's name, not the server's folder it is in. */
    assert_string_equal(json_string_value(json_object_get(doc, "source")),
                        "sim:h200-7x1g.json");
    assert_true(json_is_null(json_object_get(doc, "reason")));
    json_t *gpus = json_object_get(doc, "gpus");
    assert_int_equal(json_array_size(gpus), 1);
    json_t *g = json_array_get(gpus, 0);
    assert_string_equal(json_string_value(json_object_get(g, "name")),
                        "NVIDIA H200");
    assert_true(json_is_true(json_object_get(g, "mig")));
    json_t *slices = json_object_get(g, "slices");
    assert_int_equal(json_array_size(slices), 7);
    for (size_t i = 0; i < 7; i++) {
        json_t *sl = json_array_get(slices, i);
        assert_string_equal(json_string_value(json_object_get(sl, "profile")),
                            "1g.18gb");
        assert_int_equal(
            json_integer_value(json_object_get(sl, "compute_slices")), 1);
        assert_int_equal(
            json_integer_value(json_object_get(sl, "memory_bytes")),
            16384ll << 20);
        assert_int_equal(
            strncmp(json_string_value(json_object_get(sl, "uuid")), "MIG-", 4),
            0);
        assert_int_equal(json_integer_value(json_object_get(
                             json_object_get(sl, "placement"), "start")),
                         i);
        /* Nobody holds a slice yet (the scheduler comes next). */
        assert_string_equal(json_string_value(json_object_get(sl, "state")),
                            "free");
        assert_true(json_is_null(json_object_get(sl, "job")));
        assert_true(json_is_null(json_object_get(sl, "tenant")));
        assert_true(json_is_null(json_object_get(sl, "tenant_name")));
        assert_true(json_is_null(json_object_get(sl, "job_name")));
        /* A MIG slice, simulated: no utilisation. */
        assert_true(json_is_null(json_object_get(sl, "utilization_percent")));
    }
    /* Nothing waits. */
    assert_true(json_is_integer(json_object_get(doc, "queued_jobs")));
    assert_int_equal(json_integer_value(json_object_get(doc, "queued_jobs")),
                     0);
    /* The harness's key is the admin's: every tenant's queue. */
    assert_string_equal(
        json_string_value(json_object_get(doc, "queued_jobs_scope")), "all");
    /* The same file gives the same UUIDs after a restart. */
    char uuid0[128];
    snprintf(
        uuid0, sizeof uuid0, "%s",
        json_string_value(json_object_get(json_array_get(slices, 0), "uuid")));
    json_decref(doc);

    /* The key is needed, as everywhere under /v1. */
    resp *r = http_do(&s, "GET", "/v1/devices", NULL, NULL, 0, "");
    assert_int_equal(r->status, 401);
    resp_free(r);

    assert_int_equal(srv_stop(&s, SIGTERM) & 0x7f, 0);
    srv again;
    const char *flags[] = {"--devices", spec, NULL};
    assert_int_equal(srv_start(&again, s.data, flags), 0);
    doc = get_devices(&again);
    json_t *sl0 = json_array_get(
        json_object_get(json_array_get(json_object_get(doc, "gpus"), 0),
                        "slices"),
        0);
    assert_string_equal(json_string_value(json_object_get(sl0, "uuid")), uuid0);
    json_decref(doc);
    srv_stop(&again, SIGTERM);
    srv_cleanup(&again);
}

static void test_other_examples(void **state)
{
    struct {
        const char *file;
        size_t gpus, slices_on_first;
        const char *first_profile; /* NULL: a whole GPU */
    } cases[] = {
        {"h100-mixed.json", 1, 4, "3g.40gb"},
        {"a100-2x-nomig.json", 2, 1, NULL},
        {"cpu-only.json", 0, 0, NULL},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char path[PATH_MAX], spec[PATH_MAX + 8];
        sim_example(cases[c].file, path);
        snprintf(spec, sizeof spec, "sim:%s", path);
        srv s = start_with(spec);
        json_t *doc = get_devices(&s);
        json_t *gpus = json_object_get(doc, "gpus");
        assert_int_equal(json_array_size(gpus), cases[c].gpus);
        if (cases[c].gpus) {
            json_t *slices = json_object_get(json_array_get(gpus, 0), "slices");
            assert_int_equal(json_array_size(slices), cases[c].slices_on_first);
            json_t *p = json_object_get(json_array_get(slices, 0), "profile");
            if (cases[c].first_profile)
                assert_string_equal(json_string_value(p),
                                    cases[c].first_profile);
            else
                assert_true(json_is_null(p));
        }
        json_decref(doc);
        srv_stop(&s, SIGTERM);
        srv_cleanup(&s);
    }
}

static void test_none(void **state)
{
    srv s = start_with("none");
    json_t *doc = get_devices(&s);
    assert_string_equal(json_string_value(json_object_get(doc, "source")),
                        "none");
    assert_int_equal(json_array_size(json_object_get(doc, "gpus")), 0);
    json_decref(doc);
    srv_stop(&s, SIGTERM);
    srv_cleanup(&s);
}

/* The default (auto) reads the driver; on a machine without one the list
 * is empty and says why, and the server still starts. */
static void test_auto(void **state)
{
    srv s;
    assert_int_equal(srv_start(&s, NULL, NULL), 0);
    json_t *doc = get_devices(&s);
    assert_string_equal(json_string_value(json_object_get(doc, "source")),
                        "nvml");
    if (json_array_size(json_object_get(doc, "gpus")) == 0)
        assert_true(json_is_string(json_object_get(doc, "reason")));
    json_decref(doc);
    srv_stop(&s, SIGTERM);
    srv_cleanup(&s);
}

/* h100-4x-2nvl.json: four whole H100s in two NVLink domains, as GET
 * /v1/devices reports them (GPUs 0-1 in domain 1, 2-3 in domain 2); a GPU
 * on no NVLink says null; a domain that is no positive integer stops the
 * start, naming the field. */
static void test_nvlink_domains(void **state)
{
    char path[PATH_MAX], spec[PATH_MAX + 8];
    sim_example("h100-4x-2nvl.json", path);
    snprintf(spec, sizeof spec, "sim:%s", path);
    srv s = start_with(spec);
    json_t *doc = get_devices(&s);
    json_t *gpus = json_object_get(doc, "gpus");
    assert_int_equal(json_array_size(gpus), 4);
    const int want[] = {1, 1, 2, 2};
    for (size_t g = 0; g < 4; g++) {
        json_t *gpu = json_array_get(gpus, g);
        json_t *d = json_object_get(gpu, "nvlink_domain");
        if (!json_is_integer(d) || json_integer_value(d) != want[g])
            fail_msg("GPU %zu: nvlink_domain is not %d", g, want[g]);
        json_t *slices = json_object_get(gpu, "slices");
        assert_int_equal(json_array_size(slices), 1);
        assert_string_equal(json_string_value(json_object_get(
                                json_array_get(slices, 0), "kind")),
                            "gpu");
    }
    json_decref(doc);
    srv_stop(&s, SIGTERM);
    srv_cleanup(&s);

    char dir[PATH_MAX], file[PATH_MAX + 32];
    temp_dir(dir);
    snprintf(file, sizeof file, "%s/domains.json", dir);
    snprintf(spec, sizeof spec, "sim:%s", file);
    const char *mixed = "{\"gpus\": [{\"model\": \"A100-40GB\"},\n"
                        " {\"model\": \"H100\", \"nvlink_domain\": 3}]}\n";
    write_file(file, mixed, strlen(mixed));
    s = start_with(spec);
    doc = get_devices(&s);
    gpus = json_object_get(doc, "gpus");
    json_t *none = json_object_get(json_array_get(gpus, 0), "nvlink_domain");
    assert_non_null(none);
    assert_true(json_is_null(none));
    assert_int_equal(json_integer_value(json_object_get(json_array_get(gpus, 1),
                                                        "nvlink_domain")),
                     3);
    json_decref(doc);
    srv_stop(&s, SIGTERM);
    srv_cleanup(&s);

    const char *bad = "{\"gpus\": [{\"model\": \"A100-40GB\"},\n"
                      " {\"model\": \"H100\", \"nvlink_domain\": 0}]}\n";
    write_file(file, bad, strlen(bad));
    const char *flags[] = {"--devices", spec, NULL};
    srv refused;
    assert_int_equal(srv_start(&refused, NULL, flags), -1);
    char text[8192];
    read_log(&refused, text, sizeof text);
    if (!strstr(text, file) ||
        !strstr(text, "gpus[1].nvlink_domain must be between 1 and 1024"))
        fail_msg("the error does not name the file and field: %s", text);
    srv_cleanup(&refused);
    unlink(file);
    rmdir(dir);
}

/* An impossible layout stops the start, with the file, GPU and instance
 * named, and before the admin key is made. */
static void test_bad_layout_stops_start(void **state)
{
    char dir[PATH_MAX], path[PATH_MAX + 32], spec[PATH_MAX + 40];
    temp_dir(dir);
    snprintf(path, sizeof path, "%s/overlap.json", dir);
    const char *layout =
        "{\"gpus\": [{\"model\": \"A100-40GB\"},\n"
        " {\"model\": \"H200\", \"mig\": true, \"instances\": [\n"
        "  {\"profile\": \"3g.71gb\", \"start\": 0},\n"
        "  {\"profile\": \"2g.35gb\", \"start\": 2}]}]}\n";
    write_file(path, layout, strlen(layout));
    snprintf(spec, sizeof spec, "sim:%s", path);
    const char *flags[] = {"--devices", spec, NULL};
    srv bad;
    assert_int_equal(srv_start(&bad, NULL, flags), -1);
    char key[PATH_MAX + 16];
    snprintf(key, sizeof key, "%s/admin.key", bad.data);
    assert_int_equal(access(key, F_OK), -1);
    char text[8192];
    read_log(&bad, text, sizeof text);
    if (!strstr(text, path) || !strstr(text, "gpus[1] (H200-141GB)") ||
        !strstr(text, "instances[1] (2g.35gb at start 2") ||
        !strstr(text, "overlaps instances[0] (3g.71gb"))
        fail_msg("the error does not name the file, GPU and instance: %s",
                 text);
    srv_cleanup(&bad);

    /* A file that is not there, and one that is not JSON. */
    snprintf(spec, sizeof spec, "sim:%s/missing.json", dir);
    assert_int_equal(srv_start(&bad, NULL, flags), -1);
    read_log(&bad, text, sizeof text);
    assert_non_null(strstr(text, "missing.json"));
    srv_cleanup(&bad);
    write_file(path, "{\"gpus\": [", 10);
    snprintf(spec, sizeof spec, "sim:%s", path);
    assert_int_equal(srv_start(&bad, NULL, flags), -1);
    read_log(&bad, text, sizeof text);
    assert_non_null(strstr(text, "not valid JSON"));
    srv_cleanup(&bad);

    /* A malformed flag is a usage error. */
    const char *junk[] = {"--devices", "gpus", NULL};
    assert_int_equal(srv_start(&bad, NULL, junk), -1);
    read_log(&bad, text, sizeof text);
    assert_non_null(strstr(text, "--devices gpus: expected auto, none or "
                                 "sim:<file.json>"));
    srv_cleanup(&bad);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_h200_seven_slices),
        cmocka_unit_test(test_other_examples),
        cmocka_unit_test(test_none),
        cmocka_unit_test(test_auto),
        cmocka_unit_test(test_bad_layout_stops_start),
        cmocka_unit_test(test_nvlink_domains),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
