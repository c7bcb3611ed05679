/* Unit tests for the store's deployment rows (store/deployments.c):
 * insert, a name taken per tenant, update, delete, the list of all, one
 * tenant never touching another's, rows surviving a reopen, and an older
 * database (schema 5, before deployments) migrating with its rows kept. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "store/store.h"
#include "testutil.h"

typedef tu_store_fixture fixture;

/* A store with tenant tn_a (admin key) and tenant tn_b. */
static int setup(void **state)
{
    static const uint8_t hash_a[32] = {1}, hash_b[32] = {2};
    if (tu_store_setup(state, "tn_a", "key_a", hash_a) != 0)
        return -1;
    fixture *f = *state;
    store_tenant_limits lim = {1,
                               STORE_UNLIMITED,
                               STORE_UNLIMITED,
                               STORE_UNLIMITED,
                               STORE_UNLIMITED,
                               STORE_UNLIMITED,
                               STORE_UNLIMITED,
                               STORE_UNLIMITED};
    ty_err err = {0};
    if (store_tenant_create(f->st, "tn_b", "b", &lim, "key_b", hash_b, &err) !=
        TY_OK) {
        fprintf(stderr, "tenant tn_b: %s\n", err.msg);
        tu_store_teardown(state);
        return -1;
    }
    return 0;
}

static json_t *spec(const char *name, const char *model, int max)
{
    return json_pack("{s:s, s:s, s:{s:i, s:i}, s:{s:s}}", "name", name, "model",
                     model, "replicas", "min", 1, "max", max, "resources",
                     "gpu", "any");
}

static json_t *all(store *st)
{
    json_t *rows = NULL;
    ty_err err = {0};
    assert_int_equal(store_deployment_all(st, &rows, &err), TY_OK);
    assert_true(json_is_array(rows));
    return rows;
}

static const char *field(const json_t *row, const char *key)
{
    return json_string_value(json_object_get(row, key));
}

static void test_insert_conflict_and_all(void **state)
{
    fixture *f = *state;
    ty_err err = {0};
    json_t *rows = all(f->st);
    assert_int_equal(json_array_size(rows), 0);
    json_decref(rows);

    json_t *s1 = spec("web", "mdl_1", 2), *s2 = spec("batch", "mdl_2", 4);
    assert_int_equal(
        store_deployment_insert(f->st, "tn_a", "dep_1", "web", s1, 1, &err),
        TY_OK);
    assert_int_equal(
        store_deployment_insert(f->st, "tn_a", "dep_2", "batch", s2, 3, &err),
        TY_OK);
    /* The name is taken in tn_a: 409 naming "name", nothing stored. */
    memset(&err, 0, sizeof err);
    assert_int_equal(
        store_deployment_insert(f->st, "tn_a", "dep_3", "web", s2, 1, &err),
        TY_ECONFLICT);
    assert_string_equal(err.field, "name");
    assert_non_null(strstr(err.msg, "web"));
    assert_non_null(strstr(err.msg, "dep_1"));
    /* ...but free in tn_b. */
    assert_int_equal(
        store_deployment_insert(f->st, "tn_b", "dep_4", "web", s1, 1, &err),
        TY_OK);

    rows = all(f->st);
    assert_int_equal(json_array_size(rows), 3);
    /* oldest first, every column, the spec parsed back */
    const char *ids[] = {"dep_1", "dep_2", "dep_4"};
    const char *tenants[] = {"tn_a", "tn_a", "tn_b"};
    for (size_t i = 0; i < 3; i++) {
        json_t *r = json_array_get(rows, i);
        assert_string_equal(field(r, "id"), ids[i]);
        assert_string_equal(field(r, "tenant_id"), tenants[i]);
        assert_non_null(field(r, "created_at"));
        assert_string_equal(field(r, "created_at"), field(r, "updated_at"));
        assert_null(json_object_get(r, "seq"));
    }
    json_t *r2 = json_array_get(rows, 1);
    assert_string_equal(field(r2, "name"), "batch");
    assert_int_equal(json_integer_value(json_object_get(r2, "generation")), 3);
    assert_true(json_equal(json_object_get(r2, "spec"), s2));
    json_decref(rows);
    json_decref(s1);
    json_decref(s2);
}

static void test_update_and_delete_per_tenant(void **state)
{
    fixture *f = *state;
    ty_err err = {0};
    json_t *s1 = spec("web", "mdl_1", 2), *s2 = spec("web", "mdl_9", 5);
    assert_int_equal(
        store_deployment_insert(f->st, "tn_a", "dep_1", "web", s1, 1, &err),
        TY_OK);

    /* Another tenant can neither change nor delete it. */
    assert_int_equal(
        store_deployment_update(f->st, "tn_b", "dep_1", s2, 2, &err),
        TY_ENOTFOUND);
    assert_int_equal(store_deployment_delete(f->st, "tn_b", "dep_1", &err),
                     TY_ENOTFOUND);
    assert_int_equal(
        store_deployment_update(f->st, "tn_a", "dep_x", s2, 2, &err),
        TY_ENOTFOUND);
    json_t *rows = all(f->st);
    json_t *r = json_array_get(rows, 0);
    assert_true(json_equal(json_object_get(r, "spec"), s1));
    assert_int_equal(json_integer_value(json_object_get(r, "generation")), 1);
    char created[64];
    snprintf(created, sizeof created, "%s", field(r, "created_at"));
    json_decref(rows);

    /* Its own tenant replaces the spec and the generation. */
    assert_int_equal(
        store_deployment_update(f->st, "tn_a", "dep_1", s2, 2, &err), TY_OK);
    rows = all(f->st);
    r = json_array_get(rows, 0);
    assert_true(json_equal(json_object_get(r, "spec"), s2));
    assert_int_equal(json_integer_value(json_object_get(r, "generation")), 2);
    assert_string_equal(field(r, "created_at"), created);
    assert_true(strcmp(field(r, "updated_at"), created) >= 0);
    json_decref(rows);

    /* Deleted, it is gone, its name free again; a second delete is 404. */
    assert_int_equal(store_deployment_delete(f->st, "tn_a", "dep_1", &err),
                     TY_OK);
    assert_int_equal(store_deployment_delete(f->st, "tn_a", "dep_1", &err),
                     TY_ENOTFOUND);
    rows = all(f->st);
    assert_int_equal(json_array_size(rows), 0);
    json_decref(rows);
    assert_int_equal(
        store_deployment_insert(f->st, "tn_a", "dep_5", "web", s1, 1, &err),
        TY_OK);
    json_decref(s1);
    json_decref(s2);
}

static void test_rows_survive_reopen(void **state)
{
    fixture *f = *state;
    ty_err err = {0};
    json_t *s1 = spec("web", "mdl_1", 2);
    assert_int_equal(
        store_deployment_insert(f->st, "tn_a", "dep_1", "web", s1, 7, &err),
        TY_OK);
    store_close(f->st);
    f->st = NULL;
    assert_int_equal(store_open(f->dir, &f->st, &err), TY_OK);
    json_t *rows = all(f->st);
    assert_int_equal(json_array_size(rows), 1);
    json_t *r = json_array_get(rows, 0);
    assert_true(json_equal(json_object_get(r, "spec"), s1));
    assert_int_equal(json_integer_value(json_object_get(r, "generation")), 7);
    json_decref(rows);
    json_decref(s1);
}

/* Runs SQL on the database file directly (the store closed). */
static void sql(const char *dir, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/trainyard.db", dir);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    char *msg = NULL;
    if (sqlite3_exec(db, text, NULL, NULL, &msg) != SQLITE_OK)
        fail_msg("%s: %s", text, msg);
    sqlite3_close(db);
}

static void test_older_database_migrates(void **state)
{
    fixture *f = *state;
    ty_err err = {0};
    json_t *d = json_pack("{s:s, s:s}", "id", "ds_old", "created_at",
                          "2026-01-01T00:00:00.000Z");
    assert_int_equal(
        store_dataset_insert(f->st, "tn_a", "ds_old", "abc", 3, d, &err),
        TY_OK);
    json_decref(d);
    store_close(f->st);
    f->st = NULL;
    /* Back to what schema 5 was: no deployments table (nor schema 7's
     * serving limits of tenants, nor schema 8's job steps, nor schema 9's
     * tokens a minute, nor schema 10's demand, nor schema 11's usage
     * intervals). */
    sql(f->dir, "DROP TABLE demand;" /* schema 10's */
                "DROP TABLE deployments;"
                "DROP TABLE job_steps;"
                "ALTER TABLE tenants DROP COLUMN serving_rps;"
                "ALTER TABLE tenants DROP COLUMN serving_burst;"
                "ALTER TABLE tenants DROP COLUMN serving_max_concurrency;"
                "ALTER TABLE tenants DROP COLUMN serving_tokens_per_minute;"
                "DROP TABLE usage_intervals;"
                "DROP TABLE usage_alive;"
                "PRAGMA user_version=5;");

    assert_int_equal(store_open(f->dir, &f->st, &err), TY_OK);
    assert_int_equal(store_schema_version(f->st), 11);
    json_t *doc;
    ty_status st = store_dataset_get(f->st, "tn_a", "ds_old", &doc, NULL, &err);
    if (st != TY_OK)
        fail_msg("%s", err.msg);
    json_decref(doc);
    json_t *rows = all(f->st);
    assert_int_equal(json_array_size(rows), 0);
    json_decref(rows);
    json_t *s1 = spec("web", "mdl_1", 2);
    assert_int_equal(
        store_deployment_insert(f->st, "tn_a", "dep_1", "web", s1, 1, &err),
        TY_OK);
    assert_int_equal(
        store_deployment_insert(f->st, "tn_a", "dep_2", "web", s1, 1, &err),
        TY_ECONFLICT);
    json_decref(s1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_insert_conflict_and_all, setup,
                                        tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_update_and_delete_per_tenant,
                                        setup, tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_rows_survive_reopen, setup,
                                        tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_older_database_migrates, setup,
                                        tu_store_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
