/* Unit tests for tenants: the body checks (api/tenants.c), the storage-quota
 * arithmetic (store/quota.c), and the store's tenant and key rows
 * (store/tenants.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/tenants.h"
#include "common/fsutil.h"
#include "server/auth.h"
#include "store/store.h"
#include "testutil.h"

/* ---- tenant_body_parse ---- */

static ty_status parse(const char *text, int create, tenant_body *tb,
                       ty_err *err)
{
    json_error_t je;
    json_t *body = json_loads(text, 0, &je);
    assert_non_null(body);
    memset(err, 0, sizeof *err);
    ty_status s = tenant_body_parse(body, create, tb, err);
    /* name is borrowed from the body: copy the check out before freeing. */
    if (s == TY_OK && tb->name)
        assert_true(strlen(tb->name) > 0);
    json_decref(body);
    return s;
}

static void expect_invalid(const char *text, int create, const char *field)
{
    tenant_body tb;
    ty_err err;
    ty_status s = parse(text, create, &tb, &err);
    if (s != TY_EINVAL || strcmp(err.field, field) != 0)
        fprintf(stderr, "%s: got %d field '%s' (%s)\n", text, s, err.field,
                err.msg);
    assert_int_equal(s, TY_EINVAL);
    assert_string_equal(err.field, field);
    assert_true(strlen(err.msg) > 0);
}

static void test_create_defaults(void **state)
{
    (void)state;
    tenant_body tb;
    ty_err err;
    assert_int_equal(parse("{\"name\": \"team-a\"}", 1, &tb, &err), TY_OK);
    assert_true(tb.lim.weight == 1.0);
    assert_int_equal(tb.lim.max_gpu_slices, STORE_UNLIMITED);
    assert_int_equal(tb.lim.max_running_jobs, STORE_UNLIMITED);
    assert_int_equal(tb.lim.max_storage_bytes, STORE_UNLIMITED);
    assert_int_equal(
        tb.set, STORE_TENANT_SET_WEIGHT | STORE_TENANT_SET_GPU_SLICES |
                    STORE_TENANT_SET_RUNNING_JOBS | STORE_TENANT_SET_STORAGE);
}

static void test_create_full(void **state)
{
    (void)state;
    tenant_body tb;
    ty_err err;
    assert_int_equal(
        parse(
            "{\"name\": \"b\", \"weight\": 2.5, \"quota\": {\"max_gpu_slices\""
            ": 3, \"max_running_jobs\": 0, \"max_storage_bytes\": null}}",
            1, &tb, &err),
        TY_OK);
    assert_true(tb.lim.weight == 2.5);
    assert_int_equal(tb.lim.max_gpu_slices, 3);
    assert_int_equal(tb.lim.max_running_jobs, 0);
    assert_int_equal(tb.lim.max_storage_bytes, STORE_UNLIMITED);
}

static void test_patch_sets_only_what_is_given(void **state)
{
    (void)state;
    tenant_body tb;
    ty_err err;
    assert_int_equal(parse("{}", 0, &tb, &err), TY_OK);
    assert_int_equal(tb.set, 0);
    assert_null(tb.name);
    assert_int_equal(
        parse("{\"quota\": {\"max_storage_bytes\": null}}", 0, &tb, &err),
        TY_OK);
    assert_int_equal(tb.set, STORE_TENANT_SET_STORAGE);
    assert_int_equal(tb.lim.max_storage_bytes, STORE_UNLIMITED);
    assert_int_equal(parse("{\"weight\": 3, \"quota\": {\"max_running_jobs\": "
                           "4}}",
                           0, &tb, &err),
                     TY_OK);
    assert_int_equal(tb.set,
                     STORE_TENANT_SET_WEIGHT | STORE_TENANT_SET_RUNNING_JOBS);
    assert_int_equal(tb.lim.max_running_jobs, 4);
}

static void test_bad_bodies_name_the_field(void **state)
{
    (void)state;
    expect_invalid("{}", 1, "name");
    expect_invalid("{\"name\": \"\"}", 1, "name");
    expect_invalid("{\"name\": \"a b\"}", 1, "name");
    expect_invalid("{\"name\": \"../x\"}", 0, "name");
    expect_invalid("{\"name\": 7}", 1, "name");
    expect_invalid("{\"name\": \"a\", \"weight\": 0}", 1, "weight");
    expect_invalid("{\"name\": \"a\", \"weight\": -1}", 1, "weight");
    expect_invalid("{\"name\": \"a\", \"weight\": \"2\"}", 1, "weight");
    expect_invalid("{\"name\": \"a\", \"weight\": null}", 1, "weight");
    expect_invalid("{\"name\": \"a\", \"weight\": 1e9}", 1, "weight");
    expect_invalid("{\"weight\": 0}", 0, "weight");
    expect_invalid("{\"weight\": 5e-324}", 0, "weight");
    expect_invalid("{\"name\": null}", 0, "name");
    expect_invalid("{\"name\": null}", 1, "name");
    expect_invalid("{\"name\": \"a\", \"quota\": 5}", 1, "quota");
    expect_invalid("{\"name\": \"a\", \"quota\": {\"max_storage_bytes\": -1}}",
                   1, "quota.max_storage_bytes");
    expect_invalid("{\"quota\": {\"max_gpu_slices\": 1.5}}", 0,
                   "quota.max_gpu_slices");
    expect_invalid("{\"quota\": {\"max_running_jobs\": \"3\"}}", 0,
                   "quota.max_running_jobs");
    expect_invalid("{\"quota\": {\"max_gpus\": 3}}", 0, "quota.max_gpus");
    expect_invalid("{\"name\": \"a\", \"colour\": 1}", 1, "colour");
}

/* ---- store_storage_fits ---- */

static void test_storage_check(void **state)
{
    (void)state;
    ty_err err = {0};
    assert_int_equal(store_storage_fits(0, 1000, STORE_UNLIMITED, &err), TY_OK);
    assert_int_equal(store_storage_fits(400, 600, 1000, &err), TY_OK);
    assert_int_equal(store_storage_fits(0, 0, 0, &err), TY_OK);
    assert_int_equal(store_storage_fits(401, 600, 1000, &err), TY_ETOOBIG);
    assert_non_null(strstr(err.msg, "1000"));
    assert_non_null(strstr(err.msg, "401"));
    assert_non_null(strstr(err.msg, "600"));
    assert_non_null(strstr(err.msg, "max_storage_bytes"));
    /* Already over (a trained model may take a tenant past its quota). */
    assert_int_equal(store_storage_fits(2000, 1, 1000, &err), TY_ETOOBIG);
    /* No overflow near the top of int64. */
    assert_int_equal(
        store_storage_fits(INT64_MAX - 5, INT64_MAX - 5, INT64_MAX, &err),
        TY_ETOOBIG);
    assert_int_equal(store_storage_fits(5, INT64_MAX - 5, INT64_MAX, &err),
                     TY_OK);
}

/* ---- store ---- */

/* A store of its own per test, with the admin key key_admin of tenant
 * tn_admin. */
typedef tu_store_fixture fixture;

static int setup(void **state)
{
    static const uint8_t admin_hash[32] = {1};
    return tu_store_setup(state, "tn_admin", "key_admin", admin_hash);
}

static const store_tenant_limits unlimited = {1, STORE_UNLIMITED,
                                              STORE_UNLIMITED, STORE_UNLIMITED};

static void create(fixture *f, const char *id, const char *name,
                   const char *key_id, uint8_t hash_byte)
{
    uint8_t hash[32] = {hash_byte};
    ty_err err;
    assert_int_equal(
        store_tenant_create(f->st, id, name, &unlimited, key_id, hash, &err),
        TY_OK);
}

static void test_store_create_get_and_key(void **state)
{
    fixture *f = *state;
    ty_err err;
    store_tenant_limits lim = {2.5, 7, 3, 1000};
    uint8_t hash[32] = {2};
    assert_int_equal(
        store_tenant_create(f->st, "tn_b", "bee", &lim, "key_b", hash, &err),
        TY_OK);
    json_t *doc;
    assert_int_equal(store_tenant_get(f->st, "tn_b", &doc, &err), TY_OK);
    assert_string_equal(json_string_value(json_object_get(doc, "name")), "bee");
    assert_true(json_number_value(json_object_get(doc, "weight")) == 2.5);
    json_t *q = json_object_get(doc, "quota");
    assert_int_equal(json_integer_value(json_object_get(q, "max_gpu_slices")),
                     7);
    assert_int_equal(json_integer_value(json_object_get(q, "max_running_jobs")),
                     3);
    assert_int_equal(
        json_integer_value(json_object_get(q, "max_storage_bytes")), 1000);
    assert_true(json_is_false(json_object_get(doc, "admin")));
    json_t *u = json_object_get(doc, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "storage_bytes")),
                     0);
    json_decref(doc);

    /* The key authenticates as tenant tn_b, not admin. */
    store_key k;
    uint8_t got[32];
    assert_int_equal(store_key_lookup(f->st, "key_b", &k, got, &err), TY_OK);
    assert_string_equal(k.tenant_id, "tn_b");
    assert_int_equal(k.is_admin, 0);
    assert_memory_equal(got, hash, 32);

    store_tenant_limits back;
    assert_int_equal(store_tenant_limits_get(f->st, "tn_b", &back, &err),
                     TY_OK);
    assert_true(back.weight == 2.5);
    assert_int_equal(back.max_gpu_slices, 7);
    assert_int_equal(back.max_storage_bytes, 1000);

    /* The admin's tenant is marked and unlimited. */
    assert_int_equal(store_tenant_get(f->st, "tn_admin", &doc, &err), TY_OK);
    assert_true(json_is_true(json_object_get(doc, "admin")));
    assert_true(json_is_null(
        json_object_get(json_object_get(doc, "quota"), "max_storage_bytes")));
    json_decref(doc);
    assert_int_equal(store_tenant_get(f->st, "tn_none", &doc, &err),
                     TY_ENOTFOUND);
}

static void test_store_name_conflict_stores_nothing(void **state)
{
    fixture *f = *state;
    ty_err err;
    create(f, "tn_b", "bee", "key_b", 2);
    uint8_t hash[32] = {3};
    assert_int_equal(store_tenant_create(f->st, "tn_c", "bee", &unlimited,
                                         "key_c", hash, &err),
                     TY_ECONFLICT);
    assert_string_equal(err.field, "name");
    json_t *doc;
    assert_int_equal(store_tenant_get(f->st, "tn_c", &doc, &err), TY_ENOTFOUND);
    store_key k;
    uint8_t got[32];
    assert_int_equal(store_key_lookup(f->st, "key_c", &k, got, &err),
                     TY_ENOTFOUND);
    /* Renaming onto a taken name is refused; onto its own name is fine. */
    create(f, "tn_c", "sea", "key_c", 3);
    assert_int_equal(
        store_tenant_update(f->st, "tn_c", "bee", &unlimited, 0, &err),
        TY_ECONFLICT);
    assert_int_equal(
        store_tenant_update(f->st, "tn_c", "sea", &unlimited, 0, &err), TY_OK);
}

static void test_store_update(void **state)
{
    fixture *f = *state;
    ty_err err;
    create(f, "tn_b", "bee", "key_b", 2);
    store_tenant_limits lim = {4, 2, STORE_UNLIMITED, 500};
    assert_int_equal(
        store_tenant_update(f->st, "tn_b", NULL, &lim,
                            STORE_TENANT_SET_WEIGHT | STORE_TENANT_SET_STORAGE,
                            &err),
        TY_OK);
    store_tenant_limits back;
    assert_int_equal(store_tenant_limits_get(f->st, "tn_b", &back, &err),
                     TY_OK);
    assert_true(back.weight == 4);
    assert_int_equal(back.max_storage_bytes, 500);
    assert_int_equal(back.max_gpu_slices, STORE_UNLIMITED); /* not set */
    /* Back to unlimited. */
    lim.max_storage_bytes = STORE_UNLIMITED;
    assert_int_equal(store_tenant_update(f->st, "tn_b", "bee2", &lim,
                                         STORE_TENANT_SET_STORAGE, &err),
                     TY_OK);
    assert_int_equal(store_tenant_limits_get(f->st, "tn_b", &back, &err),
                     TY_OK);
    assert_int_equal(back.max_storage_bytes, STORE_UNLIMITED);
    assert_true(back.weight == 4);
    json_t *doc;
    assert_int_equal(store_tenant_get(f->st, "tn_b", &doc, &err), TY_OK);
    assert_string_equal(json_string_value(json_object_get(doc, "name")),
                        "bee2");
    json_decref(doc);
    assert_int_equal(store_tenant_update(f->st, "tn_x", NULL, &lim, 0, &err),
                     TY_ENOTFOUND);
}

static void test_store_storage_usage(void **state)
{
    fixture *f = *state;
    ty_err err;
    create(f, "tn_b", "bee", "key_b", 2);
    json_t *d = json_pack("{s:s, s:s}", "id", "x", "created_at", "t");
    assert_int_equal(
        store_dataset_insert(f->st, "tn_b", "ds_1", "s1", 100, d, &err), TY_OK);
    /* The same blob in a second row counts again. */
    assert_int_equal(
        store_dataset_insert(f->st, "tn_b", "ds_2", "s1", 100, d, &err), TY_OK);
    assert_int_equal(
        store_model_insert(f->st, "tn_b", "mdl_1", "s2", 50, d, &err), TY_OK);
    assert_int_equal(
        store_dataset_insert(f->st, "tn_admin", "ds_3", "s3", 7, d, &err),
        TY_OK);
    json_decref(d);
    int64_t used = 0;
    assert_int_equal(store_tenant_storage(f->st, "tn_b", &used, &err), TY_OK);
    assert_int_equal(used, 250);
    assert_int_equal(store_tenant_storage(f->st, "tn_admin", &used, &err),
                     TY_OK);
    assert_int_equal(used, 7);
    json_t *doc;
    assert_int_equal(store_tenant_get(f->st, "tn_b", &doc, &err), TY_OK);
    json_t *u = json_object_get(doc, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "storage_bytes")),
                     250);
    assert_int_equal(json_integer_value(json_object_get(u, "datasets")), 2);
    assert_int_equal(json_integer_value(json_object_get(u, "models")), 1);
    json_decref(doc);
}

static void test_store_keys(void **state)
{
    fixture *f = *state;
    ty_err err;
    create(f, "tn_b", "bee", "key_b", 2);
    uint8_t hash[32] = {9};
    json_t *doc;
    assert_int_equal(
        store_key_create(f->st, "tn_b", "key_b2", hash, &doc, &err), TY_OK);
    assert_string_equal(json_string_value(json_object_get(doc, "id")),
                        "key_b2");
    assert_true(json_is_false(json_object_get(doc, "admin")));
    assert_null(json_object_get(doc, "hash"));
    json_decref(doc);
    assert_int_equal(store_key_create(f->st, "tn_x", "key_x", hash, &doc, &err),
                     TY_ENOTFOUND);

    store_page page = {0, 50};
    json_t *items;
    int64_t next;
    assert_int_equal(store_key_list(f->st, "tn_b", page, &items, &next, &err),
                     TY_OK);
    assert_int_equal(json_array_size(items), 2);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(items, 0), "id")),
        "key_b2");
    json_decref(items);
    assert_int_equal(store_key_list(f->st, "tn_x", page, &items, &next, &err),
                     TY_ENOTFOUND);

    /* Revoking: at once, only the tenant's own key, idempotent. */
    assert_int_equal(store_key_revoke(f->st, "tn_admin", "key_b", &err),
                     TY_ENOTFOUND);
    assert_int_equal(store_key_revoke(f->st, "tn_b", "key_b", &err), TY_OK);
    store_key k;
    uint8_t got[32];
    assert_int_equal(store_key_lookup(f->st, "key_b", &k, got, &err),
                     TY_ENOTFOUND);
    assert_int_equal(store_key_lookup(f->st, "key_b2", &k, got, &err), TY_OK);
    assert_int_equal(store_key_list(f->st, "tn_b", page, &items, &next, &err),
                     TY_OK);
    const char *revoked = json_string_value(
        json_object_get(json_array_get(items, 1), "revoked_at"));
    assert_non_null(revoked);
    char first[40];
    snprintf(first, sizeof first, "%s", revoked);
    json_decref(items);
    assert_int_equal(store_key_revoke(f->st, "tn_b", "key_b", &err), TY_OK);
    assert_int_equal(store_key_list(f->st, "tn_b", page, &items, &next, &err),
                     TY_OK);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(items, 1), "revoked_at")),
                        first);
    json_decref(items);
}

static void test_store_last_admin_key_stays(void **state)
{
    fixture *f = *state;
    ty_err err;
    assert_int_equal(store_key_revoke(f->st, "tn_admin", "key_admin", &err),
                     TY_ECONFLICT);
    /* A key added to the admin's tenant is an admin key; then the first may
     * go. */
    uint8_t hash[32] = {5};
    json_t *doc;
    assert_int_equal(
        store_key_create(f->st, "tn_admin", "key_admin2", hash, &doc, &err),
        TY_OK);
    assert_true(json_is_true(json_object_get(doc, "admin")));
    json_decref(doc);
    store_key k;
    uint8_t got[32];
    assert_int_equal(store_key_lookup(f->st, "key_admin2", &k, got, &err),
                     TY_OK);
    assert_int_equal(k.is_admin, 1);
    assert_int_equal(store_key_revoke(f->st, "tn_admin", "key_admin", &err),
                     TY_OK);
    assert_int_equal(store_key_revoke(f->st, "tn_admin", "key_admin2", &err),
                     TY_ECONFLICT);
}

static void test_store_list_pages(void **state)
{
    fixture *f = *state;
    ty_err err;
    create(f, "tn_b", "b", "key_b", 2);
    create(f, "tn_c", "c", "key_c", 3);
    store_page page = {0, 2};
    json_t *items;
    int64_t next;
    assert_int_equal(store_tenant_list(f->st, page, &items, &next, &err),
                     TY_OK);
    assert_int_equal(json_array_size(items), 2);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(items, 0), "id")),
        "tn_c");
    assert_null(json_object_get(json_array_get(items, 0), "_seq"));
    assert_true(next > 0);
    json_decref(items);
    page.cursor = next;
    assert_int_equal(store_tenant_list(f->st, page, &items, &next, &err),
                     TY_OK);
    assert_int_equal(json_array_size(items), 1);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(items, 0), "id")),
        "tn_admin");
    assert_int_equal(next, 0);
    json_decref(items);
}

/* Regression: deleting another tenant's dataset that one of its jobs uses
 * answered 409 naming that job; it must be 404 like any other tenant's
 * dataset. */
static void test_store_dataset_delete_in_use_is_404_for_others(void **state)
{
    fixture *f = *state;
    ty_err err;
    create(f, "tn_b", "bee", "key_b", 2);
    json_t *d = json_pack("{s:s, s:s}", "id", "ds_1", "created_at", "t");
    assert_int_equal(
        store_dataset_insert(f->st, "tn_admin", "ds_1", "s1", 10, d, &err),
        TY_OK);
    json_decref(d);
    json_t *v = json_pack("{s:f}", "split", 0.1),
           *spec = json_pack("{s:[]}", "layers"),
           *hp = json_pack("{s:i}", "epochs", 1);
    assert_int_equal(store_job_insert(f->st, "tn_admin", "job_1", "j", "ds_1",
                                      v, spec, hp, 1, &err),
                     TY_OK);
    json_decref(v);
    json_decref(spec);
    json_decref(hp);
    char sha[65];
    assert_int_equal(store_dataset_delete(f->st, "tn_b", "ds_1", sha, &err),
                     TY_ENOTFOUND);
    assert_null(strstr(err.msg, "job_1"));
    assert_int_equal(store_dataset_delete(f->st, "tn_admin", "ds_1", sha, &err),
                     TY_ECONFLICT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_defaults),
        cmocka_unit_test(test_create_full),
        cmocka_unit_test(test_patch_sets_only_what_is_given),
        cmocka_unit_test(test_bad_bodies_name_the_field),
        cmocka_unit_test(test_storage_check),
        cmocka_unit_test_setup_teardown(test_store_create_get_and_key, setup,
                                        tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_store_name_conflict_stores_nothing,
                                        setup, tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_store_update, setup,
                                        tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_store_storage_usage, setup,
                                        tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_store_keys, setup,
                                        tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_store_last_admin_key_stays, setup,
                                        tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_store_list_pages, setup,
                                        tu_store_teardown),
        cmocka_unit_test_setup_teardown(
            test_store_dataset_delete_in_use_is_404_for_others, setup,
            tu_store_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
