/* Unit tests for a MIG layout change's pure parts: the nvidia-smi commands
 * a real GPU's change comes with (gpu/mig.c: mig_smi_commands, profile ids
 * from the tables), the request's checks (jobs_mig_change_parse: 422
 * naming the field for an overlap, a bad start, a profile of another
 * model, MIG on a model without it; 404 for a GPU the host lacks) and the
 * simulated inventory's re-cut (inv_gpu_recut: the GPU's slot indices
 * reused, extra ones appended, the rest retired and hidden from
 * GET /v1/devices, a held slot refused). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "gpu/inventory.h"
#include "gpu/mig.h"
#include "jobs/miglayout.h"
#include "testutil.h"

static inventory *sim(const char *file)
{
    char path[4096];
    tu_source_path(path, sizeof path, file);
    inventory *inv = NULL;
    ty_err err = {0};
    assert_int_equal(inv_sim_load(path, &inv, &err), TY_OK);
    return inv;
}

static mig_placed at(const mig_model *m, const char *profile, int start)
{
    mig_placed p = {mig_profile_find(m, profile), start};
    assert_non_null(p.profile);
    return p;
}

/* ---- nvidia-smi commands ---- */

static void test_commands_recut_mig_gpu(void **state)
{
    (void)state;
    const mig_model *m = mig_model_find("H100-80GB");
    mig_placed inst[] = {at(m, "3g.40gb", 4), at(m, "2g.20gb", 0),
                         at(m, "1g.10gb", 2), at(m, "1g.10gb", 3)};
    char out[MIG_CMDS_MAX][MIG_CMD_MAX];
    int n = mig_smi_commands(0, 1, 1, inst, 4, out);
    assert_int_equal(n, 3);
    assert_string_equal(out[0], "nvidia-smi mig -i 0 -dci");
    assert_string_equal(out[1], "nvidia-smi mig -i 0 -dgi");
    /* NVML profile ids: 3g 9, 2g 14, 1g (one memory slice) 19 */
    assert_string_equal(out[2],
                        "nvidia-smi mig -i 0 -cgi 9:4,14:0,19:2,19:3 -C");
}

static void test_commands_enable_and_disable(void **state)
{
    (void)state;
    const mig_model *m = mig_model_find("A100-40GB");
    /* 1g.10gb on an A100-40GB is the two-memory-slice 1g: id 15 */
    mig_placed inst[] = {at(m, "1g.10gb", 0), at(m, "1g.10gb", 2),
                         at(m, "4g.20gb", 0)};
    char out[MIG_CMDS_MAX][MIG_CMD_MAX];
    int n = mig_smi_commands(1, 0, 1, inst, 2, out);
    assert_int_equal(n, 2);
    assert_string_equal(out[0], "nvidia-smi -i 1 -mig 1");
    assert_string_equal(out[1], "nvidia-smi mig -i 1 -cgi 15:0,15:2 -C");
    n = mig_smi_commands(1, 0, 1, &inst[2], 1, out);
    assert_int_equal(n, 2);
    assert_string_equal(out[1], "nvidia-smi mig -i 1 -cgi 5:0 -C");
    /* MIG off: instances go first, then the mode */
    n = mig_smi_commands(3, 1, 0, NULL, 0, out);
    assert_int_equal(n, 3);
    assert_string_equal(out[0], "nvidia-smi mig -i 3 -dci");
    assert_string_equal(out[1], "nvidia-smi mig -i 3 -dgi");
    assert_string_equal(out[2], "nvidia-smi -i 3 -mig 0");
    /* off to off: nothing to run */
    assert_int_equal(mig_smi_commands(3, 0, 0, NULL, 0, out), 0);
}

static void test_commands_h200_seven(void **state)
{
    (void)state;
    const mig_model *m = mig_model_find("H200");
    mig_placed inst[7];
    for (int i = 0; i < 7; i++)
        inst[i] = at(m, "1g.18gb", i);
    char out[MIG_CMDS_MAX][MIG_CMD_MAX];
    int n = mig_smi_commands(0, 1, 1, inst, 7, out);
    assert_int_equal(n, 3);
    assert_string_equal(
        out[2],
        "nvidia-smi mig -i 0 -cgi 19:0,19:1,19:2,19:3,19:4,19:5,19:6 -C");
}

/* ---- the request's checks ---- */

static ty_status parse(const inventory *inv, const char *text,
                       jobs_mig_change *c, ty_err *err)
{
    json_error_t jerr;
    json_t *body = json_loads(text, 0, &jerr);
    assert_non_null(body);
    ty_status s = jobs_mig_change_parse(body, inv, c, err);
    json_decref(body);
    return s;
}

static void test_parse_good_and_defaults(void **state)
{
    (void)state;
    inventory *inv = sim("gpu/sim/h100-mixed.json");
    jobs_mig_change c;
    ty_err err = {0};
    assert_int_equal(
        parse(inv,
              "{\"gpu\": 0, \"instances\": [{\"profile\": \"3g.40gb\", "
              "\"start\": 0}, {\"profile\": \"3g.40gb\", \"start\": 4}]}",
              &c, &err),
        TY_OK);
    assert_int_equal(c.gpu, 0);
    assert_int_equal(c.mig, 1);
    assert_int_equal(c.n, 2);
    assert_string_equal(c.inst[1].profile->name, "3g.40gb");
    assert_int_equal(c.inst[1].start, 4);
    assert_int_equal(c.drain, JOBS_MIG_DRAIN_WAIT);
    assert_true(c.timeout_s == JOBS_MIG_TIMEOUT_DEFAULT_S);
    assert_int_equal(parse(inv,
                           "{\"gpu\": 0, \"mig\": false, \"drain\": "
                           "\"preempt\", \"timeout_s\": 30}",
                           &c, &err),
                     TY_OK);
    assert_int_equal(c.mig, 0);
    assert_int_equal(c.drain, JOBS_MIG_DRAIN_PREEMPT);
    inv_destroy(inv);
}

static void test_parse_refusals_name_the_field(void **state)
{
    (void)state;
    inventory *inv = sim("gpu/sim/h100-mixed.json");
    jobs_mig_change c;
    ty_err err = {0};
    /* overlap: a 2g at 2 covers slices 2-3, where the 1g at 3 sits */
    assert_int_equal(
        parse(inv,
              "{\"gpu\": 0, \"instances\": [{\"profile\": \"2g.20gb\", "
              "\"start\": 2}, {\"profile\": \"1g.10gb\", \"start\": 3}]}",
              &c, &err),
        TY_EINVAL);
    assert_string_equal(err.field, "instances[1].start");
    assert_non_null(strstr(err.msg, "overlaps instances[0]"));
    /* a start the profile may not use */
    assert_int_equal(parse(inv,
                           "{\"gpu\": 0, \"instances\": [{\"profile\": "
                           "\"3g.40gb\", \"start\": 2}]}",
                           &c, &err),
                     TY_EINVAL);
    assert_string_equal(err.field, "instances[0].start");
    assert_non_null(strstr(err.msg, "can start only at memory slices 0, 4"));
    /* another model's profile */
    assert_int_equal(parse(inv,
                           "{\"gpu\": 0, \"instances\": [{\"profile\": "
                           "\"1g.18gb\", \"start\": 0}]}",
                           &c, &err),
                     TY_EINVAL);
    assert_string_equal(err.field, "instances[0].profile");
    assert_non_null(strstr(err.msg, "1g.10gb"));
    /* a GPU the host does not have */
    assert_int_equal(parse(inv, "{\"gpu\": 5, \"mig\": false}", &c, &err),
                     TY_ENOTFOUND);
    assert_string_equal(err.field, "gpu");
    /* unknown keys, a bad drain, instances without MIG */
    assert_int_equal(
        parse(inv, "{\"gpu\": 0, \"mig\": false, \"x\": 1}", &c, &err),
        TY_EINVAL);
    assert_int_equal(parse(inv,
                           "{\"gpu\": 0, \"mig\": false, \"drain\": "
                           "\"now\"}",
                           &c, &err),
                     TY_EINVAL);
    assert_string_equal(err.field, "drain");
    assert_int_equal(parse(inv,
                           "{\"gpu\": 0, \"mig\": false, \"instances\": "
                           "[{\"profile\": \"7g.80gb\", \"start\": 0}]}",
                           &c, &err),
                     TY_EINVAL);
    assert_string_equal(err.field, "instances");
    /* MIG on needs its instances */
    assert_int_equal(parse(inv, "{\"gpu\": 0}", &c, &err), TY_EINVAL);
    assert_string_equal(err.field, "instances");
    inv_destroy(inv);
}

static void test_parse_mig_on_model_without_mig(void **state)
{
    (void)state;
    json_t *doc = json_loads("{\"gpus\": [{\"model\": \"RTX-4090\", "
                             "\"memory_gb\": 24}]}",
                             0, NULL);
    inventory *inv = NULL;
    ty_err err = {0};
    assert_int_equal(inv_sim_parse(doc, "rtx.json", &inv, &err), TY_OK);
    json_decref(doc);
    jobs_mig_change c;
    assert_int_equal(parse(inv,
                           "{\"gpu\": 0, \"instances\": [{\"profile\": "
                           "\"7g.80gb\", \"start\": 0}]}",
                           &c, &err),
                     TY_EINVAL);
    assert_string_equal(err.field, "mig");
    assert_non_null(strstr(err.msg, "not MIG-capable"));
    /* MIG off is a layout it has */
    assert_int_equal(parse(inv, "{\"gpu\": 0, \"mig\": false}", &c, &err),
                     TY_OK);
    inv_destroy(inv);
}

/* ---- the simulated re-cut ---- */

static int shown_slices(inventory *inv)
{
    inv_viewer v = {.is_admin = 1};
    json_t *doc = inv_to_json(inv, &v);
    int n = (int)json_array_size(json_object_get(
        json_array_get(json_object_get(doc, "gpus"), 0), "slices"));
    json_decref(doc);
    return n;
}

static void test_recut_reuses_appends_retires(void **state)
{
    (void)state;
    inventory *inv = sim("gpu/sim/h100-mixed.json");
    const mig_model *m = mig_model_find("H100-80GB");
    assert_int_equal(inv->nslots, 4);
    char old_uuid[INV_NAME_MAX];
    snprintf(old_uuid, sizeof old_uuid, "%s", inv->slots[0].uuid);
    mig_placed seven[7];
    for (int i = 0; i < 7; i++)
        seven[i] = at(m, "1g.10gb", i);
    ty_err err = {0};
    assert_int_equal(inv_gpu_recut(inv, 0, 1, seven, 7, &err), TY_OK);
    assert_int_equal(inv->nslots, 7); /* 0-3 reused, 4-6 appended */
    for (int k = 0; k < 7; k++) {
        assert_false(inv->slots[k].retired);
        assert_string_equal(inv->slots[k].profile, "1g.10gb");
        assert_int_equal(inv->slots[k].mig, k);
    }
    assert_string_not_equal(inv->slots[0].uuid, old_uuid);
    assert_string_not_equal(inv->slots[0].uuid, inv->slots[1].uuid);
    assert_int_equal(shown_slices(inv), 7);
    /* back to two halves: two slots in use, five retired and not shown */
    mig_placed halves[] = {at(m, "3g.40gb", 0), at(m, "3g.40gb", 4)};
    assert_int_equal(inv_gpu_recut(inv, 0, 1, halves, 2, &err), TY_OK);
    assert_int_equal(inv->nslots, 7);
    assert_string_equal(inv->slots[1].profile, "3g.40gb");
    for (int k = 2; k < 7; k++)
        assert_true(inv->slots[k].retired);
    assert_int_equal(shown_slices(inv), 2);
    json_t *lay = inv_gpu_layout_json(inv, 0);
    assert_int_equal(json_array_size(lay), 2);
    assert_int_equal(
        json_integer_value(json_object_get(json_array_get(lay, 1), "start")),
        4);
    json_decref(lay);
    /* MIG off: one whole-GPU slot at index 0 */
    assert_int_equal(inv_gpu_recut(inv, 0, 0, NULL, 0, &err), TY_OK);
    assert_int_equal(inv->slots[0].kind, INV_SLOT_GPU);
    assert_null(inv->slots[0].profile);
    assert_true(inv->slots[1].retired);
    assert_int_equal(shown_slices(inv), 1);
    /* a held slot: refused, nothing changes */
    snprintf(inv->slots[0].job_id, sizeof inv->slots[0].job_id, "job_x");
    assert_int_equal(inv_gpu_recut(inv, 0, 1, seven, 7, &err), TY_ECONFLICT);
    assert_non_null(strstr(err.msg, "job_x"));
    assert_int_equal(inv->slots[0].kind, INV_SLOT_GPU);
    /* a bad layout: refused */
    inv->slots[0].job_id[0] = 0;
    mig_placed bad[] = {at(m, "4g.40gb", 0), at(m, "3g.40gb", 0)};
    assert_int_equal(inv_gpu_recut(inv, 0, 1, bad, 2, &err), TY_EINVAL);
    inv_destroy(inv);
}

static void test_recut_keeps_other_gpus_indices(void **state)
{
    (void)state;
    inventory *inv = sim("gpu/sim/a100-2x-nomig.json");
    const mig_model *m = mig_model_find("A100-40GB");
    const char *gpu1 = inv->slots[1].uuid;
    mig_placed three[] = {at(m, "3g.20gb", 0), at(m, "2g.10gb", 4),
                          at(m, "1g.5gb", 6)};
    ty_err err = {0};
    assert_int_equal(inv_gpu_recut(inv, 0, 1, three, 3, &err), TY_OK);
    /* GPU 0: slot 0 reused, 2 and 3 appended; GPU 1 still slot 1 */
    assert_int_equal(inv->nslots, 4);
    assert_int_equal(inv->slots[1].gpu, 1);
    assert_ptr_equal(inv->slots[1].uuid, gpu1);
    assert_int_equal(inv->slots[2].gpu, 0);
    assert_string_equal(inv->slots[3].profile, "1g.5gb");
    inv_viewer v = {.is_admin = 1};
    json_t *doc = inv_to_json(inv, &v);
    json_t *g0 = json_array_get(json_object_get(doc, "gpus"), 0);
    assert_int_equal(json_array_size(json_object_get(g0, "slices")), 3);
    assert_int_equal(
        json_integer_value(json_object_get(
            json_array_get(json_object_get(g0, "slices"), 2), "slot")),
        3);
    json_decref(doc);
    inv_destroy(inv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commands_recut_mig_gpu),
        cmocka_unit_test(test_commands_enable_and_disable),
        cmocka_unit_test(test_commands_h200_seven),
        cmocka_unit_test(test_parse_good_and_defaults),
        cmocka_unit_test(test_parse_refusals_name_the_field),
        cmocka_unit_test(test_parse_mig_on_model_without_mig),
        cmocka_unit_test(test_recut_reuses_appends_retires),
        cmocka_unit_test(test_recut_keeps_other_gpus_indices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
