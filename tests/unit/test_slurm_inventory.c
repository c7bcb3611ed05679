/* Unit tests for cluster/slurm_inventory: GRES strings as slurmrestd's
 * /nodes gives them (gpu:1g.18gb:7, gpu:2, gpu:h100:4(S:0-1), several
 * entries, other GRES names, none) become inventory GPUs and slots, the
 * uuids and profiles the scheduler sees, the gres a slot asks Slurm for,
 * and every kind of malformed GRES is TY_EINVAL naming the node. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/slurm_inventory.h"
#include "testutil.h"

#define GIB (1ull << 30)

static inventory *build1(const char *node, const char *gres)
{
    slurm_node n = {0};
    snprintf(n.name, sizeof n.name, "%s", node);
    snprintf(n.gres, sizeof n.gres, "%s", gres);
    inventory *inv = NULL;
    ty_err err = {0};
    ty_status s = slurm_inventory_build(&n, 1, "http://127.0.0.1:6820", &inv,
                                        &err);
    if (s != TY_OK)
        fail_msg("%s: %s", gres, err.msg);
    return inv;
}

static void test_mig_profile(void **state)
{
    (void)state;
    inventory *inv = build1("vm", "gpu:1g.18gb:7");
    assert_int_equal(inv->source, INV_SOURCE_SLURM);
    assert_string_equal(inv->source_label, "slurm:http://127.0.0.1:6820");
    assert_int_equal(inv->ngpus, 1);
    assert_true(inv->gpus[0].mig_enabled);
    assert_int_equal(inv->gpus[0].nmig, 7);
    assert_int_equal(inv->nslots, 7);
    for (int i = 0; i < 7; i++) {
        const inv_slot *s = &inv->slots[i];
        char want[64];
        snprintf(want, sizeof want, "slurm:vm:1g.18gb:%d", i);
        assert_int_equal(s->kind, INV_SLOT_MIG);
        assert_string_equal(s->uuid, want);
        assert_string_equal(s->profile, "1g.18gb");
        assert_int_equal(s->compute_slices, 1);
        assert_int_equal(s->memory_bytes, 18 * GIB);
        assert_string_equal(s->job_id, "");
    }
    char g[64];
    slurm_gres_for_slot(&inv->slots[3], g, sizeof g);
    assert_string_equal(g, "gpu:1g.18gb:1");
    inv_destroy(inv);
}

static void test_whole_gpus(void **state)
{
    (void)state;
    inventory *inv = build1("n1", "gpu:2");
    assert_int_equal(inv->ngpus, 2);
    assert_int_equal(inv->nslots, 2);
    assert_false(inv->gpus[0].mig_enabled);
    assert_string_equal(inv->slots[0].uuid, "slurm:n1:gpu:0");
    assert_string_equal(inv->slots[1].uuid, "slurm:n1:gpu:1");
    assert_null(inv->slots[0].profile);
    assert_int_equal(inv->slots[0].compute_slices, 7);
    assert_string_equal(inv->gpus[0].model, "");
    char g[64];
    slurm_gres_for_slot(&inv->slots[0], g, sizeof g);
    assert_string_equal(g, "gpu:1");
    inv_destroy(inv);

    inv = build1("n2", "gpu:h100:4(S:0-1)");
    assert_int_equal(inv->nslots, 4);
    assert_string_equal(inv->gpus[3].model, "h100");
    assert_string_equal(inv->gpus[3].name, "h100");
    assert_string_equal(inv->slots[3].uuid, "slurm:n2:gpu:3");
    inv_destroy(inv);

    /* A type without a count is one. */
    inv = build1("n3", "gpu:a100");
    assert_int_equal(inv->nslots, 1);
    inv_destroy(inv);
}

static void test_several_entries_and_nodes(void **state)
{
    (void)state;
    slurm_node nodes[3] = {0};
    snprintf(nodes[0].name, sizeof nodes[0].name, "a");
    snprintf(nodes[0].gres, sizeof nodes[0].gres,
             "gpu:h100:2(S:0),gpu:3g.71gb:2(IDX:0,1),mps:100,gpu:a100:1");
    snprintf(nodes[1].name, sizeof nodes[1].name, "b");
    snprintf(nodes[1].gres, sizeof nodes[1].gres, "(null)");
    snprintf(nodes[2].name, sizeof nodes[2].name, "c");
    snprintf(nodes[2].gres, sizeof nodes[2].gres, "gpu:1g.18gb:1");
    snprintf(nodes[2].state, sizeof nodes[2].state, "down");
    inventory *inv = NULL;
    ty_err err = {0};
    assert_int_equal(slurm_inventory_build(nodes, 3, "slurm:x", &inv, &err),
                     TY_OK);
    assert_string_equal(inv->source_label, "slurm:x");
    /* a: 2 h100 + one MIG GPU + 1 a100; c: one MIG GPU. */
    assert_int_equal(inv->ngpus, 5);
    assert_int_equal(inv->nslots, 2 + 2 + 1 + 1);
    assert_string_equal(inv->slots[0].uuid, "slurm:a:gpu:0");
    assert_string_equal(inv->slots[1].uuid, "slurm:a:gpu:1");
    assert_string_equal(inv->slots[2].uuid, "slurm:a:3g.71gb:0");
    assert_int_equal(inv->slots[2].compute_slices, 3);
    assert_int_equal(inv->slots[2].memory_bytes, 71 * GIB);
    assert_string_equal(inv->slots[3].uuid, "slurm:a:3g.71gb:1");
    /* The whole GPUs of one node are numbered across types. */
    assert_string_equal(inv->slots[4].uuid, "slurm:a:gpu:2");
    assert_string_equal(inv->slots[5].uuid, "slurm:c:1g.18gb:0");
    /* Each slot is on its node's place in the list (a: 0, c: 2), so a
     * gang stays on one node; GRES gives no NVLink domain. */
    const int node[] = {0, 0, 0, 0, 0, 2};
    for (int k = 0; k < 6; k++) {
        assert_int_equal(inv->slots[k].node, node[k]);
        assert_int_equal(inv->slots[k].domain, 0);
        assert_int_equal(inv->gpus[inv->slots[k].gpu].node, node[k]);
    }
    inv_destroy(inv);

    /* No GRES at all: an empty inventory. */
    inv = build1("d", "");
    assert_int_equal(inv->nslots, 0);
    inv_destroy(inv);
    assert_int_equal(slurm_inventory_build(NULL, 0, "", &inv, &err), TY_OK);
    assert_int_equal(inv->ngpus, 0);
    inv_destroy(inv);
}

static void test_malformed(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "gpu:1g.18gb:x",      "gpu:1g.18gb:7:9",  "gpu:h100:4(S:0-1",
        "gpu:h100:4)",        "gpu:2,,gpu:1",     "gpu:2,",
        ",gpu:2",             "gpu::2",           "gpu:",
        ":2",                 "gpu:h1 00:2",      "gpu:h100:99999",
        "gpu:1g.18gb:-1",
    };
    for (size_t i = 0; i < TY_ARRAY_LEN(bad); i++) {
        slurm_node n = {0};
        snprintf(n.name, sizeof n.name, "node7");
        snprintf(n.gres, sizeof n.gres, "%s", bad[i]);
        inventory *inv = NULL;
        ty_err err = {0};
        ty_status s = slurm_inventory_build(&n, 1, "u", &inv, &err);
        if (s != TY_EINVAL)
            fail_msg("'%s' gave %s, not TY_EINVAL", bad[i], ty_status_name(s));
        assert_null(inv);
        assert_non_null(strstr(err.msg, "node7"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mig_profile),
        cmocka_unit_test(test_whole_gpus),
        cmocka_unit_test(test_several_entries_and_nodes),
        cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
