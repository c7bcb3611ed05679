/* Unit tests for store_ref_resolve (store/refs.c): an id wins over a
 * name, the newest of a name by created_at and then by insertion, only the
 * tenant's rows, the three kinds, and store_model_find on the same rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "store/store.h"
#include "testutil.h"

typedef tu_store_fixture fixture;

static int setup(void **state)
{
    static const uint8_t hash[32] = {1};
    return tu_store_setup(state, "tn_a", "key_a", hash);
}

/* Inserts dataset id named name, created at `at`, for tenant. */
static void dataset(fixture *f, const char *tenant, const char *id,
                    const char *name, const char *at)
{
    ty_err err = {0};
    json_t *d =
        json_pack("{s:s, s:s, s:s}", "id", id, "name", name, "created_at", at);
    assert_int_equal(store_dataset_insert(f->st, tenant, id, "abc", 1, d, &err),
                     TY_OK);
    json_decref(d);
}

static void model(fixture *f, const char *tenant, const char *id,
                  const char *name, const char *at)
{
    ty_err err = {0};
    json_t *d =
        json_pack("{s:s, s:s, s:s}", "id", id, "name", name, "created_at", at);
    assert_int_equal(store_model_insert(f->st, tenant, id, "abc", 1, d, &err),
                     TY_OK);
    json_decref(d);
}

/* Makes tenant tn_b beside the fixture's tn_a. */
static void tenant_b(fixture *f)
{
    static const uint8_t hash[32] = {2};
    store_tenant_limits lim = {.weight = 1};
    ty_err err = {0};
    assert_int_equal(
        store_tenant_create(f->st, "tn_b", "b", &lim, "key_b", hash, &err),
        TY_OK);
}

/* What ref resolves to for tenant (the id), or "" when not found (then
 * the message must name the kind and the reference). */
static const char *resolve(fixture *f, store_ref_kind kind, const char *tenant,
                           const char *ref)
{
    static char id[TY_ID_MAX];
    ty_err err = {0};
    snprintf(id, sizeof id, "untouched");
    ty_status s = store_ref_resolve(f->st, kind, tenant, ref, id, &err);
    if (s == TY_ENOTFOUND) {
        char want[300];
        snprintf(want, sizeof want, "no %s with id or name '%s'",
                 store_ref_noun(kind), ref);
        assert_string_equal(err.msg, want);
        assert_string_equal(id, "untouched");
        return "";
    }
    assert_int_equal(s, TY_OK);
    return id;
}

static void test_newest_by_created_at_then_insertion(void **state)
{
    fixture *f = *state;
    /* Inserted out of time order: created_at decides, not the order. */
    dataset(f, "tn_a", "ds_new", "n", "2026-01-02T00:00:00.000Z");
    dataset(f, "tn_a", "ds_old", "n", "2026-01-01T00:00:00.000Z");
    assert_string_equal(resolve(f, STORE_REF_DATASET, "tn_a", "n"), "ds_new");
    /* An equal created_at: the one created last (whatever its id). */
    dataset(f, "tn_a", "ds_zz", "t", "2026-01-03T00:00:00.000Z");
    dataset(f, "tn_a", "ds_aa", "t", "2026-01-03T00:00:00.000Z");
    assert_string_equal(resolve(f, STORE_REF_DATASET, "tn_a", "t"), "ds_aa");
    /* Each id still reaches its own. */
    assert_string_equal(resolve(f, STORE_REF_DATASET, "tn_a", "ds_old"),
                        "ds_old");
    assert_string_equal(resolve(f, STORE_REF_DATASET, "tn_a", "ds_zz"),
                        "ds_zz");
    assert_string_equal(resolve(f, STORE_REF_DATASET, "tn_a", "nope"), "");
}

static void test_id_wins_over_a_name(void **state)
{
    fixture *f = *state;
    dataset(f, "tn_a", "ds_one", "first", "2026-01-01T00:00:00.000Z");
    /* A newer dataset named after the first one's id. */
    dataset(f, "tn_a", "ds_two", "ds_one", "2026-01-02T00:00:00.000Z");
    assert_string_equal(resolve(f, STORE_REF_DATASET, "tn_a", "ds_one"),
                        "ds_one");
}

static void test_only_the_tenants_rows(void **state)
{
    fixture *f = *state;
    tenant_b(f);
    dataset(f, "tn_a", "ds_a", "shared", "2026-01-01T00:00:00.000Z");
    dataset(f, "tn_b", "ds_b", "shared", "2026-01-09T00:00:00.000Z");
    dataset(f, "tn_b", "ds_b2", "b-only", "2026-01-09T00:00:00.000Z");
    /* a's own dataset named after b's id */
    dataset(f, "tn_a", "ds_a2", "ds_b", "2026-01-01T00:00:00.000Z");
    assert_string_equal(resolve(f, STORE_REF_DATASET, "tn_a", "shared"),
                        "ds_a");
    assert_string_equal(resolve(f, STORE_REF_DATASET, "tn_b", "shared"),
                        "ds_b");
    assert_string_equal(resolve(f, STORE_REF_DATASET, "tn_a", "b-only"), "");
    assert_string_equal(resolve(f, STORE_REF_DATASET, "tn_a", "ds_b2"), "");
    assert_string_equal(resolve(f, STORE_REF_DATASET, "tn_a", "ds_b"), "ds_a2");
    assert_string_equal(resolve(f, STORE_REF_DATASET, "tn_b", "ds_b"), "ds_b");
}

static void test_models_and_jobs(void **state)
{
    fixture *f = *state;
    ty_err err = {0};
    model(f, "tn_a", "mdl_1", "m", "2026-01-01T00:00:00.000Z");
    model(f, "tn_a", "mdl_2", "m", "2026-01-02T00:00:00.000Z");
    assert_string_equal(resolve(f, STORE_REF_MODEL, "tn_a", "m"), "mdl_2");
    assert_string_equal(resolve(f, STORE_REF_MODEL, "tn_a", "mdl_1"), "mdl_1");
    /* A dataset's name is no model's. */
    dataset(f, "tn_a", "ds_m", "only-a-dataset", "2026-01-01T00:00:00.000Z");
    assert_string_equal(resolve(f, STORE_REF_MODEL, "tn_a", "only-a-dataset"),
                        "");
    /* store_model_find: the same rule, the row it resolved to. */
    char id[TY_ID_MAX], sha[65];
    json_t *doc = NULL;
    assert_int_equal(store_model_find(f->st, "tn_a", "m", id, &doc, sha, &err),
                     TY_OK);
    assert_string_equal(id, "mdl_2");
    assert_string_equal(json_string_value(json_object_get(doc, "id")), "mdl_2");
    json_decref(doc);
    assert_int_equal(store_model_find(f->st, "tn_b", "m", id, &doc, sha, &err),
                     TY_ENOTFOUND);
    assert_string_equal(err.msg, "no model with id or name 'm'");

    /* Jobs by their name column; submitted one after the other. */
    json_t *spec = json_pack("{s:[]}", "layers");
    json_t *hp = json_pack("{s:i}", "epochs", 1);
    json_t *val = json_pack("{s:f}", "split", 0.1);
    assert_int_equal(store_job_insert(f->st, "tn_a", "job_1", "train", "ds_m",
                                      val, spec, hp, 0, &err),
                     TY_OK);
    assert_int_equal(store_job_insert(f->st, "tn_a", "job_2", "train", "ds_m",
                                      val, spec, hp, 0, &err),
                     TY_OK);
    json_decref(spec);
    json_decref(hp);
    json_decref(val);
    /* created_at to the millisecond may be equal: then the later one. */
    assert_string_equal(resolve(f, STORE_REF_JOB, "tn_a", "train"), "job_2");
    assert_string_equal(resolve(f, STORE_REF_JOB, "tn_a", "job_1"), "job_1");
    assert_string_equal(resolve(f, STORE_REF_JOB, "tn_b", "train"), "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_newest_by_created_at_then_insertion, setup, tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_id_wins_over_a_name, setup,
                                        tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_only_the_tenants_rows, setup,
                                        tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_models_and_jobs, setup,
                                        tu_store_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
