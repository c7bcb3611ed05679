/* Unit tests for gpu/mig and gpu/inventory: the MIG profile tables and
 * layout rules, the simulated inventory's JSON format (every shipped
 * example loads; every kind of impossible layout is refused with a message
 * naming the file, GPU and instance), the slot list, what each viewer sees
 * of a slot's holder, the JSON view, --devices parsing, the NVML source
 * on a host without the library (an empty inventory with the reason), and
 * interconnect domains: a sim file's nvlink_domain (kept by MIG slices and
 * re-cuts; bad values refused) and the union-find that turns NVML's
 * NVLink table into domains, on fake tables. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "gpu/inventory.h"
#include "gpu/mig.h"
#include "testutil.h"
#include "app/config.h"

#define MIB (1ull << 20)
#define GIB (1ull << 30)

/* gpu/sim/<name> in the source tree, wherever the test runs from. */
static void sim_path(const char *name, char *out, size_t n)
{
    char rel[256];
    snprintf(rel, sizeof rel, "gpu/sim/%s", name);
    tu_source_path(out, n, rel);
}

static inventory *load_example(const char *name)
{
    char path[PATH_MAX];
    sim_path(name, path, sizeof path);
    inventory *inv = NULL;
    ty_err err = {0};
    ty_status s = inv_sim_load(path, &inv, &err);
    if (s != TY_OK)
        fail_msg("%s: %s", path, err.msg);
    assert_non_null(inv);
    return inv;
}

/* Parses text as a sim document labelled "t.json"; returns the status and
 * leaves the message in err. */
static ty_status parse(const char *text, inventory **out, ty_err *err)
{
    json_error_t jerr;
    json_t *doc = json_loads(text, 0, &jerr);
    if (!doc)
        fail_msg("test JSON does not parse: %s: %s", text, jerr.text);
    ty_err_clear(err);
    *out = NULL;
    ty_status s = inv_sim_parse(doc, "t.json", out, err);
    json_decref(doc);
    if (s != TY_OK)
        assert_null(*out);
    return s;
}

/* Expects text to be refused with TY_EINVAL, a message holding every
 * needle (NULL-terminated) and the given field. */
static void expect_bad(const char *text, const char *field, ...)
{
    inventory *inv = NULL;
    ty_err err;
    ty_status s = parse(text, &inv, &err);
    if (s == TY_OK) {
        inv_destroy(inv);
        fail_msg("accepted: %s", text);
    }
    assert_int_equal(s, TY_EINVAL);
    /* The file is named first. */
    if (strncmp(err.msg, "t.json: ", 8) != 0)
        fail_msg("message does not start with the file: %s", err.msg);
    va_list ap;
    va_start(ap, field);
    const char *needle;
    while ((needle = va_arg(ap, const char *)) != NULL)
        if (!strstr(err.msg, needle))
            fail_msg("message lacks '%s': %s", needle, err.msg);
    va_end(ap);
    if (field)
        assert_string_equal(err.field, field);
}

#define H200_GPU(insts)                                                       \
    "{\"gpus\": [{\"model\": \"H200\", \"mig\": true, \"instances\": [" insts \
    "]}]}"

/* ---- mig.h ---- */

static void test_mig_tables(void **state)
{
    const mig_model *h200 = mig_model_find("H200");
    assert_non_null(h200);
    assert_ptr_equal(h200, mig_model_find("h200-141gb"));
    assert_string_equal(h200->model, "H200-141GB");
    assert_null(mig_model_find("A100")); /* ambiguous: 40 or 80 GB */
    assert_null(mig_model_find("L4"));
    assert_null(mig_model_find(NULL));
    assert_non_null(mig_model_find("A100-40GB"));
    assert_non_null(mig_model_find("A100-80GB"));
    assert_non_null(mig_model_find("H100"));

    const mig_profile *p = mig_profile_find(h200, "1g.18gb");
    assert_non_null(p);
    assert_int_equal(p->compute_slices, 1);
    assert_int_equal(p->memory_slices, 1);
    assert_int_equal(p->profile_id, 19);
    assert_null(mig_profile_find(h200, "1g.10gb"));
    char buf[128];
    mig_profile_starts(p, buf, sizeof buf);
    assert_string_equal(buf, "0, 1, 2, 3, 4, 5, 6");
    mig_profile_starts(mig_profile_find(h200, "2g.35gb"), buf, sizeof buf);
    assert_string_equal(buf, "0, 2, 4");
    mig_profile_starts(mig_profile_find(h200, "3g.71gb"), buf, sizeof buf);
    assert_string_equal(buf, "0, 4");
    mig_profile_starts(mig_profile_find(h200, "1g.35gb"), buf, sizeof buf);
    assert_string_equal(buf, "0, 2, 4, 6");
    mig_profile_names(mig_model_find("A100-40GB"), buf, sizeof buf);
    assert_string_equal(buf,
                        "1g.5gb, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb");

    /* Every model: six profiles, the 7g one covers the whole GPU, and no
     * profile claims more slices than a GPU has. */
    const char *names[] = {"A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB"};
    for (size_t i = 0; i < TY_ARRAY_LEN(names); i++) {
        const mig_model *m = mig_model_find(names[i]);
        assert_int_equal(m->nprofiles, 6);
        const mig_profile *full = &m->profiles[m->nprofiles - 1];
        assert_int_equal(full->compute_slices, MIG_COMPUTE_SLICES);
        assert_int_equal(full->memory_slices, MIG_MEMORY_SLICES);
        for (int k = 0; k < m->nprofiles; k++) {
            assert_true(m->profiles[k].memory_mib <= m->memory_mib);
            assert_true(m->profiles[k].compute_slices <= MIG_COMPUTE_SLICES);
        }
    }
}

static void test_mig_profile_from_name(void **state)
{
    char b[32];
    mig_profile_from_device_name("NVIDIA H200 MIG 1g.18gb", b, sizeof b);
    assert_string_equal(b, "1g.18gb");
    mig_profile_from_device_name("NVIDIA H100 80GB HBM3 MIG 3g.40gb", b,
                                 sizeof b);
    assert_string_equal(b, "3g.40gb");
    mig_profile_from_device_name("NVIDIA A100-SXM4-40GB MIG 1g.5gb+me", b,
                                 sizeof b);
    assert_string_equal(b, "1g.5gb+me");
    mig_profile_from_device_name("NVIDIA H200", b, sizeof b);
    assert_string_equal(b, "");
    mig_profile_from_device_name(NULL, b, sizeof b);
    assert_string_equal(b, "");
}

/* The compute rule, which the real tables' starts already imply, checked
 * on a made-up model whose profiles would otherwise pass. */
static void test_mig_compute_limit(void **state)
{
    static const mig_profile fat[] = {
        {"4g.big", 99, 4, 2, 1024, 0x55},
    };
    const mig_model m = {"FAKE", NULL, "Fake", 8192, fat, 1};
    mig_placed two[] = {{&fat[0], 0}, {&fat[0], 2}};
    int bad = 7;
    ty_err err = {0};
    assert_int_equal(mig_layout_check(&m, two, 1, &bad, &err), TY_OK);
    assert_int_equal(bad, -1);
    assert_int_equal(mig_layout_check(&m, two, 2, &bad, &err), TY_EINVAL);
    assert_int_equal(bad, 1);
    assert_non_null(strstr(err.msg, "brings the compute slices to 8, more "
                                    "than the GPU's 7"));
}

/* ---- shipped examples and the slot list ---- */

static void test_example_h200(void **state)
{
    inventory *inv = load_example("h200-7x1g.json");
    assert_int_equal(inv->source, INV_SOURCE_SIM);
    assert_non_null(strstr(inv->source_label, "sim:"));
    assert_non_null(strstr(inv->source_label, "h200-7x1g.json"));
    assert_int_equal(inv->ngpus, 1);
    const inv_gpu *g = &inv->gpus[0];
    assert_string_equal(g->model, "H200-141GB");
    assert_string_equal(g->name, "NVIDIA H200");
    assert_true(g->mig_enabled);
    assert_int_equal(g->memory_bytes, 143771 * MIB);
    assert_int_equal(strncmp(g->uuid, "GPU-", 4), 0);
    assert_int_equal(strlen(g->uuid), 40);
    assert_int_equal(g->temperature_c, INV_UNKNOWN);
    assert_int_equal(g->nmig, 7);
    assert_int_equal(inv->nslots, 7);
    for (int i = 0; i < 7; i++) {
        const inv_slot *s = &inv->slots[i];
        assert_int_equal(s->kind, INV_SLOT_MIG);
        assert_int_equal(s->gpu, 0);
        assert_int_equal(s->mig, i);
        assert_string_equal(s->profile, "1g.18gb");
        assert_int_equal(s->compute_slices, 1);
        assert_int_equal(s->memory_bytes, 16384 * MIB);
        assert_ptr_equal(s->uuid, g->migs[i].uuid);
        assert_int_equal(strncmp(s->uuid, "MIG-", 4), 0);
        assert_string_equal(s->job_id, "");
        assert_int_equal(g->migs[i].placement_start, i);
        assert_int_equal(g->migs[i].placement_size, 1);
        assert_int_equal(g->migs[i].gpu_instance_id, i + 1);
        assert_int_equal(g->migs[i].compute_instance_id, 0);
        for (int j = 0; j < i; j++)
            assert_string_not_equal(s->uuid, inv->slots[j].uuid);
    }
    /* Deterministic: a second load gives the same UUIDs. */
    inventory *again = load_example("h200-7x1g.json");
    assert_string_equal(again->gpus[0].uuid, g->uuid);
    for (int i = 0; i < 7; i++)
        assert_string_equal(again->slots[i].uuid, inv->slots[i].uuid);
    inv_destroy(again);
    inv_destroy(inv);
}

static void test_example_h100_mixed(void **state)
{
    inventory *inv = load_example("h100-mixed.json");
    assert_int_equal(inv->ngpus, 1);
    assert_string_equal(inv->gpus[0].model, "H100-80GB");
    assert_int_equal(inv->nslots, 4);
    const char *profiles[] = {"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"};
    const int compute[] = {3, 2, 1, 1};
    const uint64_t mib[] = {40448, 20096, 9984, 9984};
    const int start[] = {4, 0, 2, 3}, size[] = {4, 2, 1, 1};
    int total = 0;
    for (int i = 0; i < 4; i++) {
        assert_string_equal(inv->slots[i].profile, profiles[i]);
        assert_int_equal(inv->slots[i].compute_slices, compute[i]);
        assert_int_equal(inv->slots[i].memory_bytes, mib[i] * MIB);
        assert_int_equal(inv->gpus[0].migs[i].placement_start, start[i]);
        assert_int_equal(inv->gpus[0].migs[i].placement_size, size[i]);
        total += inv->slots[i].compute_slices;
    }
    assert_int_equal(total, 7);
    inv_destroy(inv);
}

static void test_example_a100_nomig(void **state)
{
    inventory *inv = load_example("a100-2x-nomig.json");
    assert_int_equal(inv->ngpus, 2);
    assert_int_equal(inv->nslots, 2);
    for (int i = 0; i < 2; i++) {
        const inv_slot *s = &inv->slots[i];
        assert_false(inv->gpus[i].mig_enabled);
        assert_int_equal(inv->gpus[i].nmig, 0);
        assert_int_equal(inv->gpus[i].index, i);
        assert_int_equal(s->kind, INV_SLOT_GPU);
        assert_int_equal(s->gpu, i);
        assert_int_equal(s->mig, -1);
        assert_null(s->profile);
        assert_int_equal(s->compute_slices, 7);
        assert_int_equal(s->memory_bytes, 40 * GIB);
        assert_ptr_equal(s->uuid, inv->gpus[i].uuid);
    }
    assert_string_not_equal(inv->gpus[0].uuid, inv->gpus[1].uuid);
    inv_destroy(inv);
}

static void test_example_cpu_only(void **state)
{
    inventory *inv = load_example("cpu-only.json");
    assert_int_equal(inv->ngpus, 0);
    assert_int_equal(inv->nslots, 0);
    assert_null(inv->slots);
    inv_destroy(inv);
}

/* A mixed host: one GPU with MIG off, one with MIG on and no instances
 * yet (no slots), one split in two; slots follow GPU order. */
static void test_slots_mixed_host(void **state)
{
    inventory *inv = NULL;
    ty_err err;
    assert_int_equal(
        parse(
            "{\"gpus\": ["
            "{\"model\": \"A100-80GB\"},"
            "{\"model\": \"H100\", \"mig\": true},"
            "{\"model\": \"H100\", \"mig\": true, \"instances\": ["
            "  {\"profile\": \"4g.40gb\", \"start\": 0},"
            "  {\"profile\": \"3g.40gb\", \"start\": 4}]},"
            "{\"model\": \"L4\", \"memory_gb\": 22.5, \"name\": \"NVIDIA L4\"}"
            "]}",
            &inv, &err),
        TY_OK);
    assert_int_equal(inv->ngpus, 4);
    assert_int_equal(inv->nslots, 4);
    assert_int_equal(inv->slots[0].gpu, 0);
    assert_int_equal(inv->slots[0].memory_bytes, 81920 * MIB);
    assert_int_equal(inv->slots[1].gpu, 2);
    assert_string_equal(inv->slots[1].profile, "4g.40gb");
    assert_int_equal(inv->slots[1].compute_slices, 4);
    assert_int_equal(inv->slots[2].gpu, 2);
    assert_string_equal(inv->slots[2].profile, "3g.40gb");
    assert_int_equal(inv->slots[3].gpu, 3);
    assert_int_equal(inv->slots[3].kind, INV_SLOT_GPU);
    assert_int_equal(inv->slots[3].memory_bytes, (uint64_t)(22.5 * GIB));
    assert_string_equal(inv->gpus[3].name, "NVIDIA L4");
    assert_string_equal(inv->gpus[3].model, "");
    inv_destroy(inv);
}

/* ---- impossible and malformed layouts ---- */

static void test_bad_documents(void **state)
{
    expect_bad("[]", NULL, "must be a JSON object", NULL);
    expect_bad("{}", "gpus", "gpus is required", NULL);
    expect_bad("{\"gpus\": {}}", "gpus", "gpus is required", NULL);
    expect_bad("{\"gpus\": [], \"extra\": 1}", "extra", "unknown key 'extra'",
               NULL);
    expect_bad("{\"gpus\": [7]}", "gpus[0]", "gpus[0] must be a JSON object",
               NULL);
    expect_bad("{\"gpus\": [{\"mig\": false}]}", "gpus[0].model",
               "gpus[0].model is required", NULL);
    expect_bad("{\"gpus\": [{\"model\": \"H200\", \"color\": 1}]}",
               "gpus[0].color", "unknown key 'color'", NULL);
    expect_bad("{\"gpus\": [{\"model\": \"H200\", \"mig\": \"yes\"}]}",
               "gpus[0].mig", NULL);
}

static void test_bad_models(void **state)
{
    /* MIG on a model trainyard has no profiles for. */
    expect_bad("{\"gpus\": [{\"model\": \"A100\", \"mig\": true}]}",
               "gpus[0].model", "model 'A100' has no MIG profiles",
               "A100-40GB, A100-80GB, H100-80GB, H200-141GB", NULL);
    /* An unknown model without MIG needs its memory. */
    expect_bad("{\"gpus\": [{\"model\": \"L4\"}]}", "gpus[0].memory_gb",
               "give its memory_gb", NULL);
    expect_bad("{\"gpus\": [{\"model\": \"L4\", \"memory_gb\": 0}]}",
               "gpus[0].memory_gb", NULL);
    /* A known model's memory is its own. */
    expect_bad("{\"gpus\": [{\"model\": \"H200\", \"memory_gb\": 10}]}",
               "gpus[0].memory_gb", "fixed by its model", NULL);
}

static void test_bad_instances(void **state)
{
    /* A profile of another model. */
    expect_bad(H200_GPU("{\"profile\": \"1g.10gb\", \"start\": 0}"),
               "gpus[0].instances[0].profile",
               "gpus[0].instances[0]: a H200-141GB has no MIG profile "
               "'1g.10gb'",
               "1g.18gb, 1g.35gb, 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb", NULL);
    /* A start the profile does not allow. */
    expect_bad(H200_GPU("{\"profile\": \"2g.35gb\", \"start\": 1}"),
               "gpus[0].instances[0].start",
               "gpus[0] (H200-141GB): instances[0] (2g.35gb at start 1)",
               "can start only at memory slices 0, 2, 4", NULL);
    expect_bad(H200_GPU("{\"profile\": \"1g.18gb\", \"start\": 7}"),
               "gpus[0].instances[0].start",
               "instances[0] (1g.18gb at start 7)", "0, 1, 2, 3, 4, 5, 6",
               NULL);
    expect_bad(H200_GPU("{\"profile\": \"7g.141gb\", \"start\": 4}"),
               "gpus[0].instances[0].start",
               "can start only at memory "
               "slice 0",
               NULL);
    /* Past the last memory slice, and a missing start. */
    expect_bad(H200_GPU("{\"profile\": \"1g.18gb\", \"start\": 8}"),
               "gpus[0].instances[0].start", NULL);
    expect_bad(H200_GPU("{\"profile\": \"1g.18gb\"}"),
               "gpus[0].instances[0].start", "is required", NULL);
    expect_bad(H200_GPU("{\"profile\": \"1g.18gb\", \"start\": 0, "
                        "\"id\": 3}"),
               "gpus[0].instances[0].id", "unknown key 'id'", NULL);
    /* Overlap: names both instances and their memory slices. */
    expect_bad(H200_GPU("{\"profile\": \"3g.71gb\", \"start\": 0},"
                        "{\"profile\": \"1g.18gb\", \"start\": 4},"
                        "{\"profile\": \"1g.18gb\", \"start\": 2}"),
               "gpus[0].instances[2].start",
               "t.json: gpus[0] (H200-141GB): instances[2] (1g.18gb at "
               "start 2, memory slices 2-2) overlaps instances[0] (3g.71gb "
               "at start 0, memory slices 0-3)",
               NULL);
    expect_bad(H200_GPU("{\"profile\": \"1g.18gb\", \"start\": 3},"
                        "{\"profile\": \"1g.18gb\", \"start\": 3}"),
               "gpus[0].instances[1].start", "overlaps instances[0]", NULL);
    /* The 3g+2g+1g+1g split with the 3g in the lower half: the second 1g
     * would need memory slice 7, where no 1g may start. */
    expect_bad("{\"gpus\": [{\"model\": \"A100-80GB\"}, {\"model\": "
               "\"H100-80GB\", \"mig\": true, \"instances\": ["
               "{\"profile\": \"3g.40gb\", \"start\": 0},"
               "{\"profile\": \"2g.20gb\", \"start\": 4},"
               "{\"profile\": \"1g.10gb\", \"start\": 6},"
               "{\"profile\": \"1g.10gb\", \"start\": 7}]}]}",
               "gpus[1].instances[3].start",
               "gpus[1] (H100-80GB): instances[3] (1g.10gb at start 7)", NULL);
    /* Instances on a GPU with MIG off, and more than 7. */
    expect_bad("{\"gpus\": [{\"model\": \"H200\", \"instances\": ["
               "{\"profile\": \"1g.18gb\", \"start\": 0}]}]}",
               "gpus[0].instances", "need \"mig\": true", NULL);
    expect_bad(H200_GPU("{\"profile\":\"1g.18gb\",\"start\":0},"
                        "{\"profile\":\"1g.18gb\",\"start\":1},"
                        "{\"profile\":\"1g.18gb\",\"start\":2},"
                        "{\"profile\":\"1g.18gb\",\"start\":3},"
                        "{\"profile\":\"1g.18gb\",\"start\":4},"
                        "{\"profile\":\"1g.18gb\",\"start\":5},"
                        "{\"profile\":\"1g.18gb\",\"start\":6},"
                        "{\"profile\":\"1g.18gb\",\"start\":6}"),
               "gpus[0].instances", "8 instances, but a GPU holds at most 7",
               NULL);
    expect_bad("{\"gpus\": [{\"model\": \"H200\", \"mig\": true, "
               "\"instances\": {}}]}",
               "gpus[0].instances", "must be an array", NULL);
}

/* The largest layouts that fit are accepted. */
static void test_good_full_layouts(void **state)
{
    const char *good[] = {
        H200_GPU("{\"profile\": \"7g.141gb\", \"start\": 0}"),
        H200_GPU("{\"profile\": \"4g.71gb\", \"start\": 0},"
                 "{\"profile\": \"2g.35gb\", \"start\": 4},"
                 "{\"profile\": \"1g.18gb\", \"start\": 6}"),
        H200_GPU("{\"profile\": \"1g.35gb\", \"start\": 6},"
                 "{\"profile\": \"1g.35gb\", \"start\": 4},"
                 "{\"profile\": \"1g.35gb\", \"start\": 2},"
                 "{\"profile\": \"1g.35gb\", \"start\": 0}"),
        H200_GPU("{\"profile\": \"3g.71gb\", \"start\": 0},"
                 "{\"profile\": \"3g.71gb\", \"start\": 4}"),
    };
    const int slots[] = {1, 3, 4, 2};
    for (size_t i = 0; i < TY_ARRAY_LEN(good); i++) {
        inventory *inv = NULL;
        ty_err err;
        if (parse(good[i], &inv, &err) != TY_OK)
            fail_msg("refused %s: %s", good[i], err.msg);
        assert_int_equal(inv->nslots, slots[i]);
        inv_destroy(inv);
    }
}

static void test_load_errors(void **state)
{
    inventory *inv = (inventory *)1;
    ty_err err = {0};
    assert_int_not_equal(inv_sim_load("/nonexistent/devs.json", &inv, &err),
                         TY_OK);
    assert_null(inv);
    assert_non_null(strstr(err.msg, "/nonexistent/devs.json"));

    char path[] = "/tmp/ty_inv_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char bad[] = "{\"gpus\": [\n  {\"model\": \"H200\",}\n]}";
    assert_int_equal(write(fd, bad, sizeof bad - 1), (ssize_t)(sizeof bad - 1));
    close(fd);
    assert_int_equal(inv_sim_load(path, &inv, &err), TY_EFORMAT);
    char where[PATH_MAX + 8];
    snprintf(where, sizeof where, "%s:2:", path);
    assert_non_null(strstr(err.msg, where));
    assert_non_null(strstr(err.msg, "not valid JSON"));

    /* Duplicate keys are a mistake, not the last one winning. */
    fd = open(path, O_WRONLY | O_TRUNC);
    const char dup[] = "{\"gpus\": [], \"gpus\": []}";
    assert_int_equal(write(fd, dup, sizeof dup - 1), (ssize_t)(sizeof dup - 1));
    close(fd);
    assert_int_equal(inv_sim_load(path, &inv, &err), TY_EFORMAT);

    /* Through inv_open, with the layout error naming the file. */
    fd = open(path, O_WRONLY | O_TRUNC);
    const char overlap[] = H200_GPU("{\"profile\": \"2g.35gb\", \"start\": 0},"
                                    "{\"profile\": \"1g.18gb\", \"start\": 1}");
    assert_int_equal(write(fd, overlap, sizeof overlap - 1),
                     (ssize_t)(sizeof overlap - 1));
    close(fd);
    char spec[PATH_MAX + 8];
    snprintf(spec, sizeof spec, "sim:%s", path);
    assert_int_equal(inv_open(spec, &inv, &err), TY_EINVAL);
    assert_null(inv);
    assert_int_equal(strncmp(err.msg, path, strlen(path)), 0);
    assert_non_null(strstr(err.msg, "instances[1] (1g.18gb at start 1"));
    unlink(path);
}

/* ---- sources ---- */

static void test_open_specs(void **state)
{
    inventory *inv = NULL;
    ty_err err = {0};
    assert_int_equal(inv_open("none", &inv, &err), TY_OK);
    assert_int_equal(inv->source, INV_SOURCE_NONE);
    assert_string_equal(inv->source_label, "none");
    assert_int_equal(inv->ngpus, 0);
    inv_destroy(inv);

    assert_int_equal(inv_open("gpus", &inv, &err), TY_EINVAL);
    assert_null(inv);
    assert_string_equal(err.field, "--devices");
    assert_int_equal(inv_open("sim:", &inv, &err), TY_EINVAL);

    char path[PATH_MAX], spec[PATH_MAX + 8];
    sim_path("h100-mixed.json", path, sizeof path);
    snprintf(spec, sizeof spec, "sim:%s", path);
    assert_int_equal(inv_open(spec, &inv, &err), TY_OK);
    /* The file's name without the server's folders. */
    assert_string_equal(inv->source_label, "sim:h100-mixed.json");
    assert_int_equal(inv->nslots, 4);
    inv_destroy(inv);
    inv_destroy(NULL);
}

/* No library: an empty inventory that says why, not an error. */
static void test_nvml_missing(void **state)
{
    inventory *inv = NULL;
    ty_err err = {0};
    assert_int_equal(
        inv_nvml_open("/nonexistent/libnvidia-ml.so.1", &inv, &err), TY_OK);
    assert_non_null(inv);
    assert_int_equal(inv->source, INV_SOURCE_NVML);
    assert_string_equal(inv->source_label, "nvml");
    assert_int_equal(inv->ngpus, 0);
    assert_int_equal(inv->nslots, 0);
    assert_null(inv->source_ctx);
    assert_non_null(strstr(inv->reason, "NVML is not available"));
    inv_refresh(inv); /* nothing to refresh: no crash */
    json_t *doc = inv_to_json(inv, &(inv_viewer){"t", 1});
    assert_string_equal(json_string_value(json_object_get(doc, "reason")),
                        inv->reason);
    json_decref(doc);
    inv_destroy(inv);

    /* A library that is not NVML at all (libc has no nvmlInit_v2). */
    assert_int_equal(inv_nvml_open("libc.so.6", &inv, &err), TY_OK);
    assert_int_equal(inv->ngpus, 0);
    assert_non_null(strstr(inv->reason, "has no nvmlInit_v2"));
    inv_destroy(inv);
}

/* ---- holders and the JSON view ---- */

static void test_holder_visibility(void **state)
{
    inv_slot s = {0};
    inv_viewer admin = {"ten_admin", 1}, a = {"ten_a", 0}, b = {"ten_b", 0};
    json_t *o = json_object();

    inv_slot_holder_json(&s, &a, o);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "free");
    assert_true(json_is_null(json_object_get(o, "job")));
    assert_true(json_is_null(json_object_get(o, "tenant")));

    snprintf(s.job_id, sizeof s.job_id, "job_1");
    snprintf(s.tenant_id, sizeof s.tenant_id, "ten_a");
    inv_slot_holder_json(&s, &a, o);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "held");
    assert_string_equal(json_string_value(json_object_get(o, "job")), "job_1");
    assert_string_equal(json_string_value(json_object_get(o, "tenant")),
                        "ten_a");

    inv_slot_holder_json(&s, &b, o);
    assert_string_equal(json_string_value(json_object_get(o, "state")),
                        "held_by_other_tenant");
    assert_true(json_is_null(json_object_get(o, "job")));
    assert_true(json_is_null(json_object_get(o, "tenant")));
    char *text = json_dumps(o, 0);
    assert_null(strstr(text, "job_1"));
    assert_null(strstr(text, "ten_a"));
    free(text);

    inv_slot_holder_json(&s, &admin, o);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "held");
    assert_string_equal(json_string_value(json_object_get(o, "job")), "job_1");

    /* A viewer without a tenant sees nothing of a holder. */
    inv_viewer anon = {NULL, 0};
    inv_slot_holder_json(&s, &anon, o);
    assert_string_equal(json_string_value(json_object_get(o, "state")),
                        "held_by_other_tenant");
    json_decref(o);
}

static void test_json_view(void **state)
{
    inventory *inv = load_example("h200-7x1g.json");
    snprintf(inv->slots[2].job_id, TY_ID_MAX, "job_x");
    snprintf(inv->slots[2].tenant_id, TY_ID_MAX, "ten_b");
    json_t *doc = inv_to_json(inv, &(inv_viewer){"ten_a", 0});
    assert_non_null(doc);
    assert_string_equal(json_string_value(json_object_get(doc, "source")),
                        inv->source_label);
    assert_true(json_is_null(json_object_get(doc, "reason")));
    json_t *gpus = json_object_get(doc, "gpus");
    assert_int_equal(json_array_size(gpus), 1);
    json_t *g = json_array_get(gpus, 0);
    assert_string_equal(json_string_value(json_object_get(g, "model")),
                        "H200-141GB");
    assert_true(json_is_true(json_object_get(g, "mig")));
    assert_true(json_is_null(json_object_get(g, "temperature_c")));
    assert_true(json_is_null(json_object_get(g, "power_watts")));
    json_t *slices = json_object_get(g, "slices");
    assert_int_equal(json_array_size(slices), 7);
    for (size_t i = 0; i < 7; i++) {
        json_t *s = json_array_get(slices, i);
        assert_int_equal(json_integer_value(json_object_get(s, "slot")), i);
        assert_string_equal(json_string_value(json_object_get(s, "kind")),
                            "mig");
        assert_string_equal(json_string_value(json_object_get(s, "profile")),
                            "1g.18gb");
        assert_string_equal(json_string_value(json_object_get(s, "uuid")),
                            inv->slots[i].uuid);
        assert_int_equal(
            json_integer_value(json_object_get(s, "compute_slices")), 1);
        assert_int_equal(json_integer_value(json_object_get(s, "memory_bytes")),
                         16384 * MIB);
        json_t *pl = json_object_get(s, "placement");
        assert_int_equal(json_integer_value(json_object_get(pl, "start")), i);
        assert_int_equal(json_integer_value(json_object_get(pl, "size")), 1);
        assert_string_equal(json_string_value(json_object_get(s, "state")),
                            i == 2 ? "held_by_other_tenant" : "free");
    }
    json_decref(doc);

    /* A whole GPU: no profile, instance ids or placement. */
    inventory *a100 = load_example("a100-2x-nomig.json");
    doc = inv_to_json(a100, &(inv_viewer){"ten_a", 0});
    json_t *s = json_array_get(
        json_object_get(json_array_get(json_object_get(doc, "gpus"), 1),
                        "slices"),
        0);
    assert_int_equal(json_integer_value(json_object_get(s, "slot")), 1);
    assert_string_equal(json_string_value(json_object_get(s, "kind")), "gpu");
    assert_true(json_is_null(json_object_get(s, "profile")));
    assert_true(json_is_null(json_object_get(s, "placement")));
    assert_true(json_is_null(json_object_get(s, "gpu_instance_id")));
    assert_int_equal(json_integer_value(json_object_get(s, "compute_slices")),
                     7);
    json_decref(doc);
    inv_destroy(a100);
    inv_destroy(inv);
}

/* ---- interconnect domains ---- */

static void test_example_h100_2nvl(void **state)
{
    inventory *inv = load_example("h100-4x-2nvl.json");
    assert_int_equal(inv->ngpus, 4);
    assert_int_equal(inv->nslots, 4);
    const int want[] = {1, 1, 2, 2};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(inv->gpus[i].nvlink_domain, want[i]);
        assert_int_equal(inv->gpus[i].node, 0);
        assert_int_equal(inv->slots[i].kind, INV_SLOT_GPU);
        assert_int_equal(inv->slots[i].domain, want[i]);
        assert_int_equal(inv->slots[i].node, 0);
    }
    /* GET /v1/devices says it; a GPU without one says null */
    inv_viewer admin = {.is_admin = 1};
    json_t *doc = inv_to_json(inv, &admin);
    json_t *gpus = json_object_get(doc, "gpus");
    for (int i = 0; i < 4; i++)
        assert_int_equal(json_integer_value(json_object_get(
                             json_array_get(gpus, (size_t)i), "nvlink_domain")),
                         want[i]);
    json_decref(doc);
    inv_destroy(inv);

    inv = load_example("a100-2x-nomig.json");
    doc = inv_to_json(inv, &admin);
    json_t *d = json_object_get(json_array_get(json_object_get(doc, "gpus"), 0),
                                "nvlink_domain");
    assert_non_null(d);
    assert_true(json_is_null(d));
    assert_int_equal(inv->slots[0].domain, 0);
    json_decref(doc);
    inv_destroy(inv);
}

/* A MIG GPU's slices are in its domain, before and after a re-cut. */
static void test_domains_mig(void **state)
{
    inventory *inv = NULL;
    ty_err err;
    assert_int_equal(
        parse("{\"gpus\": [{\"model\": \"H100\"},"
              " {\"model\": \"H100\", \"nvlink_domain\": 7, \"mig\": true,"
              "  \"instances\": [{\"profile\": \"3g.40gb\", \"start\": 0},"
              "                  {\"profile\": \"3g.40gb\", \"start\": 4}]}]}",
              &inv, &err),
        TY_OK);
    assert_int_equal(inv->nslots, 3);
    assert_int_equal(inv->slots[0].domain, 0);
    assert_int_equal(inv->slots[1].domain, 7);
    assert_int_equal(inv->slots[2].domain, 7);
    /* MIG off: one whole-GPU slot, still in domain 7 */
    assert_int_equal(inv_gpu_recut(inv, 1, 0, NULL, 0, &err), TY_OK);
    assert_int_equal(inv->slots[1].kind, INV_SLOT_GPU);
    assert_int_equal(inv->slots[1].domain, 7);
    /* 7 x 1g: slots 1, 2 reused, five appended, all in domain 7 */
    const mig_model *m = mig_model_find("H100");
    mig_placed inst[7];
    for (int i = 0; i < 7; i++)
        inst[i] = (mig_placed){mig_profile_find(m, "1g.10gb"), i};
    assert_int_equal(inv_gpu_recut(inv, 1, 1, inst, 7, &err), TY_OK);
    assert_int_equal(inv->nslots, 8);
    for (int k = 1; k < 8; k++) {
        assert_int_equal(inv->slots[k].gpu, 1);
        assert_int_equal(inv->slots[k].domain, 7);
    }
    assert_int_equal(inv->slots[0].domain, 0);
    inv_destroy(inv);

    /* null is as left out: no domain */
    assert_int_equal(
        parse("{\"gpus\": [{\"model\": \"H100\", \"nvlink_domain\": null}]}",
              &inv, &err),
        TY_OK);
    assert_int_equal(inv->gpus[0].nvlink_domain, 0);
    inv_destroy(inv);
}

static void test_bad_domains(void **state)
{
    const char *bad[] = {"0", "-1", "1025", "1.5", "\"1\"", "true", "[1]"};
    for (size_t i = 0; i < TY_ARRAY_LEN(bad); i++) {
        char doc[256];
        snprintf(doc, sizeof doc,
                 "{\"gpus\": [{\"model\": \"H100\", \"nvlink_domain\": 1},"
                 " {\"model\": \"H100\", \"nvlink_domain\": %s}]}",
                 bad[i]);
        expect_bad(doc, "gpus[1].nvlink_domain", "gpus[1].nvlink_domain must",
                   NULL);
    }
    expect_bad("{\"gpus\": [{\"model\": \"H100\", \"nvlink_domain\": 0}]}",
               "gpus[0].nvlink_domain", "between 1 and 1024", NULL);
    expect_bad("{\"gpus\": [{\"model\": \"H100\", \"nvlink_domain\": 1.5}]}",
               "gpus[0].nvlink_domain", "must be an integer", NULL);
}

/* inv_domains_from_links on fake NVML link tables. */
static void expect_domains(int n, const inv_link *links, int nl,
                           const int *want)
{
    int got[INV_MAX_GPUS];
    for (int g = 0; g < n; g++)
        got[g] = -99;
    inv_domains_from_links(n, links, nl, got);
    for (int g = 0; g < n; g++)
        if (got[g] != want[g])
            fail_msg("GPU %d: domain %d, want %d", g, got[g], want[g]);
}

#define L(a, b)                 \
    {                           \
        .gpu = (a), .peer = (b) \
    }
#define SW(a)                                  \
    {                                          \
        .gpu = (a), .peer = -1, .to_switch = 1 \
    }

static void test_domains_from_links(void **state)
{
    /* two bridged pairs, each link seen from both ends */
    const inv_link pairs[] = {L(0, 1), L(1, 0), L(2, 3), L(3, 2), L(0, 1)};
    expect_domains(4, pairs, 5, (const int[]){1, 1, 2, 2});
    /* numbered by the lowest GPU, whatever order the links come in */
    const inv_link late[] = {L(3, 2), L(1, 0)};
    expect_domains(4, late, 2, (const int[]){1, 1, 2, 2});
    const inv_link crossed[] = {L(3, 1), L(2, 0)};
    expect_domains(4, crossed, 2, (const int[]){1, 2, 1, 2});
    /* a chain (links seen from one end only) is one domain; a GPU on
     * no link is in none */
    const inv_link chain[] = {L(0, 1), L(2, 1)};
    expect_domains(4, chain, 2, (const int[]){1, 1, 1, 0});
    /* one link between two islands joins them (union-find) */
    const inv_link joined[] = {L(0, 1), L(2, 3), L(4, 5), L(1, 2)};
    expect_domains(6, joined, 4, (const int[]){1, 1, 1, 1, 2, 2});
    /* NVSwitch: every GPU on a switch is one domain */
    inv_link hgx[8 * 2];
    for (int g = 0; g < 8; g++)
        hgx[2 * g] = hgx[2 * g + 1] = (inv_link)SW(g);
    expect_domains(8, hgx, 16, (const int[]){1, 1, 1, 1, 1, 1, 1, 1});
    /* switched GPUs and GPUs on no NVLink side by side */
    const inv_link some[] = {SW(3), SW(1)};
    expect_domains(4, some, 2, (const int[]){0, 1, 0, 1});
    /* a switch and a direct bridge into it: one domain */
    const inv_link mixed[] = {SW(0), SW(1), L(2, 1), L(3, 4)};
    expect_domains(5, mixed, 4, (const int[]){1, 1, 1, 2, 2});
    /* alone on a switch, a loopback, a far end that is no inventory GPU,
     * a link of a GPU outside the table: none joins anything */
    const inv_link junk[] = {SW(2),
                             L(0, 0),
                             L(1, -1),
                             L(1, 99),
                             L(-1, 0),
                             L(7, 0),
                             {.gpu = 3, .peer = -1}};
    expect_domains(4, junk, 7, (const int[]){0, 0, 0, 0});
    /* no GPUs, no links: nothing written */
    int untouched = 5;
    inv_domains_from_links(0, NULL, 0, &untouched);
    assert_int_equal(untouched, 5);
    expect_domains(3, NULL, 0, (const int[]){0, 0, 0});
}

#undef L
#undef SW

/* The NVML source over a fake libnvidia-ml (tests/unit/fake_nvml.c, built
 * beside this test): its NVLink table becomes the GPUs' domains - a bridged
 * pair, two GPUs on an NVSwitch, one whose only active link leads to no
 * GPU of the inventory (its inactive one to a GPU does not count), one
 * without NVLink - and the slots carry them to the scheduler. */
static void test_nvml_domains(void **state)
{
#ifdef TY_FAKE_NVML
    inventory *inv = NULL;
    ty_err err = {0};
    assert_int_equal(inv_nvml_open(TY_FAKE_NVML, &inv, &err), TY_OK);
    if (inv->ngpus != 6)
        fail_msg("the fake NVML gave %d GPUs: %s", inv->ngpus, inv->reason);
    const int want[] = {1, 1, 2, 2, 0, 0};
    for (int g = 0; g < 6; g++) {
        assert_false(inv->gpus[g].mig_enabled);
        if (inv->gpus[g].nvlink_domain != want[g])
            fail_msg("GPU %d: domain %d, want %d", g,
                     inv->gpus[g].nvlink_domain, want[g]);
        assert_int_equal(inv->slots[g].domain, want[g]);
        assert_int_equal(inv->slots[g].node, 0);
    }
    assert_string_equal(inv->gpus[5].uuid, "GPU-fake-5");
    inv_destroy(inv);
#else
    skip();
#endif
}

/* ---- --devices ---- */

static void test_config_devices(void **state)
{
    ty_config cfg;
    config_defaults(&cfg);
    assert_string_equal(cfg.devices, "auto");
    int help = 0;
    ty_err err = {0};
    char *ok[] = {"serve", "--devices", "sim:gpu/sim/h200-7x1g.json"};
    assert_int_equal(config_parse_serve(3, ok, &cfg, &help, &err), TY_OK);
    assert_string_equal(cfg.devices, "sim:gpu/sim/h200-7x1g.json");
    char *none[] = {"serve", "--devices=none"};
    assert_int_equal(config_parse_serve(2, none, &cfg, &help, &err), TY_OK);
    assert_string_equal(cfg.devices, "none");
    const char *bad[] = {"sim:", "gpu", "nvml:0", ""};
    for (size_t i = 0; i < TY_ARRAY_LEN(bad); i++) {
        char *argv[] = {"serve", "--devices", (char *)bad[i]};
        assert_int_equal(config_parse_serve(3, argv, &cfg, &help, &err),
                         TY_EINVAL);
        assert_string_equal(err.field, "--devices");
        assert_non_null(strstr(err.msg, "expected auto, none or sim:"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mig_tables),
        cmocka_unit_test(test_mig_profile_from_name),
        cmocka_unit_test(test_mig_compute_limit),
        cmocka_unit_test(test_example_h200),
        cmocka_unit_test(test_example_h100_mixed),
        cmocka_unit_test(test_example_a100_nomig),
        cmocka_unit_test(test_example_cpu_only),
        cmocka_unit_test(test_slots_mixed_host),
        cmocka_unit_test(test_bad_documents),
        cmocka_unit_test(test_bad_models),
        cmocka_unit_test(test_bad_instances),
        cmocka_unit_test(test_good_full_layouts),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_open_specs),
        cmocka_unit_test(test_nvml_missing),
        cmocka_unit_test(test_holder_visibility),
        cmocka_unit_test(test_json_view),
        cmocka_unit_test(test_config_devices),
        cmocka_unit_test(test_example_h100_2nvl),
        cmocka_unit_test(test_domains_mig),
        cmocka_unit_test(test_bad_domains),
        cmocka_unit_test(test_domains_from_links),
        cmocka_unit_test(test_nvml_domains),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
