/* Unit tests for tenants: the body checks (api/tenants.c), the storage-quota
 * arithmetic (store/quota.c), and the store's tenant and key rows
 * (store/tenants.c), the serving limits among them, kept through the
 * migration of a database from before them (schema 6). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <sqlite3.h>
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
    assert_true(tb.lim.serving_rps == STORE_UNLIMITED);
    assert_int_equal(tb.lim.serving_burst, STORE_UNLIMITED);
    assert_int_equal(tb.lim.serving_max_concurrency, STORE_UNLIMITED);
    assert_int_equal(tb.lim.serving_tokens_per_minute, STORE_UNLIMITED);
    assert_int_equal(
        tb.set, STORE_TENANT_SET_WEIGHT | STORE_TENANT_SET_GPU_SLICES |
                    STORE_TENANT_SET_RUNNING_JOBS | STORE_TENANT_SET_STORAGE |
                    STORE_TENANT_SET_SERVING_RPS |
                    STORE_TENANT_SET_SERVING_BURST |
                    STORE_TENANT_SET_SERVING_CONCURRENCY |
                    STORE_TENANT_SET_SERVING_TOKENS);
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
    assert_true(tb.lim.serving_rps == STORE_UNLIMITED);

    assert_int_equal(parse("{\"name\": \"s\", \"quota\": "
                           "{\"serving_requests_per_second\": 12.5, "
                           "\"serving_burst\": 40, "
                           "\"serving_max_concurrency\": 8}}",
                           1, &tb, &err),
                     TY_OK);
    assert_true(tb.lim.serving_rps == 12.5);
    assert_int_equal(tb.lim.serving_burst, 40);
    assert_int_equal(tb.lim.serving_max_concurrency, 8);
    assert_int_equal(tb.lim.max_gpu_slices, STORE_UNLIMITED);
    /* The bounds themselves are allowed; a rate may be a fraction. */
    assert_int_equal(parse("{\"name\": \"s\", \"quota\": "
                           "{\"serving_requests_per_second\": 1000000, "
                           "\"serving_burst\": 1000000, "
                           "\"serving_max_concurrency\": 100000}}",
                           1, &tb, &err),
                     TY_OK);
    assert_true(tb.lim.serving_rps == 1e6);
    assert_int_equal(tb.lim.serving_burst, 1000000);
    assert_int_equal(tb.lim.serving_max_concurrency, 100000);
    assert_int_equal(parse("{\"name\": \"s\", \"quota\": "
                           "{\"serving_requests_per_second\": 0.25, "
                           "\"serving_burst\": 1, "
                           "\"serving_max_concurrency\": 1}}",
                           1, &tb, &err),
                     TY_OK);
    assert_true(tb.lim.serving_rps == 0.25);
    assert_int_equal(tb.lim.serving_burst, 1);
    assert_int_equal(tb.lim.serving_max_concurrency, 1);
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
    /* One serving limit: only its bit. */
    assert_int_equal(
        parse("{\"quota\": {\"serving_burst\": 64}}", 0, &tb, &err), TY_OK);
    assert_int_equal(tb.set, STORE_TENANT_SET_SERVING_BURST);
    assert_int_equal(tb.lim.serving_burst, 64);
    /* null sets a serving limit back to unlimited. */
    assert_int_equal(parse("{\"quota\": {\"serving_requests_per_second\": "
                           "null, \"serving_max_concurrency\": null}}",
                           0, &tb, &err),
                     TY_OK);
    assert_int_equal(tb.set, STORE_TENANT_SET_SERVING_RPS |
                                 STORE_TENANT_SET_SERVING_CONCURRENCY);
    assert_true(tb.lim.serving_rps == STORE_UNLIMITED);
    assert_int_equal(tb.lim.serving_max_concurrency, STORE_UNLIMITED);
    assert_int_equal(parse("{\"quota\": {\"serving_requests_per_second\": "
                           "300}}",
                           0, &tb, &err),
                     TY_OK);
    assert_int_equal(tb.set, STORE_TENANT_SET_SERVING_RPS);
    assert_true(tb.lim.serving_rps == 300);
    /* Tokens a minute: its own bit; the bounds allowed; null unlimited. */
    assert_int_equal(parse("{\"quota\": {\"serving_tokens_per_minute\": "
                           "1000000000}}",
                           0, &tb, &err),
                     TY_OK);
    assert_int_equal(tb.set, STORE_TENANT_SET_SERVING_TOKENS);
    assert_int_equal(tb.lim.serving_tokens_per_minute, 1000000000);
    assert_int_equal(
        parse("{\"quota\": {\"serving_tokens_per_minute\": 1}}", 0, &tb, &err),
        TY_OK);
    assert_int_equal(tb.lim.serving_tokens_per_minute, 1);
    assert_int_equal(parse("{\"quota\": {\"serving_tokens_per_minute\": null}}",
                           0, &tb, &err),
                     TY_OK);
    assert_int_equal(tb.set, STORE_TENANT_SET_SERVING_TOKENS);
    assert_int_equal(tb.lim.serving_tokens_per_minute, STORE_UNLIMITED);
    /* A create without it is unlimited and sets it. */
    assert_int_equal(parse("{\"name\": \"t\"}", 1, &tb, &err), TY_OK);
    assert_int_equal(tb.lim.serving_tokens_per_minute, STORE_UNLIMITED);
    assert_true(tb.set & STORE_TENANT_SET_SERVING_TOKENS);
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
    static const char *const bad_serving[][2] = {
        {"\"serving_requests_per_second\": 0", "serving_requests_per_second"},
        {"\"serving_requests_per_second\": -1", "serving_requests_per_second"},
        {"\"serving_requests_per_second\": 1000000.5",
         "serving_requests_per_second"},
        {"\"serving_requests_per_second\": \"5\"",
         "serving_requests_per_second"},
        {"\"serving_requests_per_second\": true",
         "serving_requests_per_second"},
        {"\"serving_burst\": 0", "serving_burst"},
        {"\"serving_burst\": -1", "serving_burst"},
        {"\"serving_burst\": 2.5", "serving_burst"},
        {"\"serving_burst\": 1000001", "serving_burst"},
        {"\"serving_burst\": \"10\"", "serving_burst"},
        {"\"serving_max_concurrency\": 0", "serving_max_concurrency"},
        {"\"serving_max_concurrency\": 100001", "serving_max_concurrency"},
        {"\"serving_max_concurrency\": [4]", "serving_max_concurrency"},
        {"\"serving_rps\": 5", "serving_rps"},
        {"\"serving_tokens_per_minute\": 0", "serving_tokens_per_minute"},
        {"\"serving_tokens_per_minute\": -1", "serving_tokens_per_minute"},
        {"\"serving_tokens_per_minute\": 1.5", "serving_tokens_per_minute"},
        {"\"serving_tokens_per_minute\": 1000000001",
         "serving_tokens_per_minute"},
        {"\"serving_tokens_per_minute\": \"10\"", "serving_tokens_per_minute"},
    };
    for (size_t i = 0; i < sizeof bad_serving / sizeof bad_serving[0]; i++) {
        char body[160], field[64];
        snprintf(field, sizeof field, "quota.%s", bad_serving[i][1]);
        snprintf(body, sizeof body, "{\"quota\": {%s}}", bad_serving[i][0]);
        expect_invalid(body, 0, field);
        snprintf(body, sizeof body, "{\"name\": \"a\", \"quota\": {%s}}",
                 bad_serving[i][0]);
        expect_invalid(body, 1, field);
    }
    /* The message says what is allowed. */
    tenant_body tb;
    ty_err err;
    assert_int_equal(parse("{\"quota\": {\"serving_burst\": 0}}", 0, &tb, &err),
                     TY_EINVAL);
    assert_non_null(strstr(err.msg, "1 to 1000000"));
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

static const store_tenant_limits unlimited = {1,
                                              STORE_UNLIMITED,
                                              STORE_UNLIMITED,
                                              STORE_UNLIMITED,
                                              STORE_UNLIMITED,
                                              STORE_UNLIMITED,
                                              STORE_UNLIMITED,
                                              STORE_UNLIMITED};

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
    store_tenant_limits lim = {2.5, 7, 3, 1000, 12.5, 40, 8, 6000};
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
    assert_true(json_number_value(
                    json_object_get(q, "serving_requests_per_second")) == 12.5);
    assert_int_equal(json_integer_value(json_object_get(q, "serving_burst")),
                     40);
    assert_int_equal(
        json_integer_value(json_object_get(q, "serving_max_concurrency")), 8);
    assert_int_equal(
        json_integer_value(json_object_get(q, "serving_tokens_per_minute")),
        6000);
    assert_int_equal(json_object_size(q), 7);
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
    assert_true(back.serving_rps == 12.5);
    assert_int_equal(back.serving_burst, 40);
    assert_int_equal(back.serving_max_concurrency, 8);
    assert_int_equal(back.serving_tokens_per_minute, 6000);

    /* The admin's tenant is marked and unlimited. */
    assert_int_equal(store_tenant_get(f->st, "tn_admin", &doc, &err), TY_OK);
    assert_true(json_is_true(json_object_get(doc, "admin")));
    q = json_object_get(doc, "quota");
    assert_true(json_is_null(json_object_get(q, "max_storage_bytes")));
    assert_true(
        json_is_null(json_object_get(q, "serving_requests_per_second")));
    assert_true(json_is_null(json_object_get(q, "serving_burst")));
    assert_true(json_is_null(json_object_get(q, "serving_max_concurrency")));
    json_decref(doc);
    assert_int_equal(store_tenant_limits_get(f->st, "tn_admin", &back, &err),
                     TY_OK);
    assert_true(back.serving_rps == STORE_UNLIMITED);
    assert_int_equal(back.serving_burst, STORE_UNLIMITED);
    assert_int_equal(back.serving_max_concurrency, STORE_UNLIMITED);
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
    store_tenant_limits lim = {4, 2, STORE_UNLIMITED, 500, 9, 3, 2, 70};
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
    assert_true(back.serving_rps == STORE_UNLIMITED);       /* not set */
    assert_int_equal(back.serving_burst, STORE_UNLIMITED);
    assert_int_equal(back.serving_max_concurrency, STORE_UNLIMITED);
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

static void expect_serving(store *st, const char *id, double rps, int64_t burst,
                           int64_t concurrency)
{
    ty_err err;
    store_tenant_limits back;
    assert_int_equal(store_tenant_limits_get(st, id, &back, &err), TY_OK);
    if (back.serving_rps != rps || back.serving_burst != burst ||
        back.serving_max_concurrency != concurrency)
        fail_msg("%s: serving %g/%lld/%lld, expected %g/%lld/%lld", id,
                 back.serving_rps, (long long)back.serving_burst,
                 (long long)back.serving_max_concurrency, rps, (long long)burst,
                 (long long)concurrency);
    /* The representation agrees: null where unlimited. */
    json_t *doc;
    assert_int_equal(store_tenant_get(st, id, &doc, &err), TY_OK);
    json_t *q = json_object_get(doc, "quota");
    json_t *r = json_object_get(q, "serving_requests_per_second"),
           *b = json_object_get(q, "serving_burst"),
           *c = json_object_get(q, "serving_max_concurrency");
    assert_true(rps < 0 ? json_is_null(r) : json_number_value(r) == rps);
    assert_true(burst < 0 ? json_is_null(b) : json_integer_value(b) == burst);
    assert_true(concurrency < 0 ? json_is_null(c)
                                : json_integer_value(c) == concurrency);
    json_decref(doc);
}

/* Each serving limit is set alone, leaving the others (and the other
 * quotas) as they were, and goes back to unlimited with STORE_UNLIMITED. */
static void test_store_update_serving(void **state)
{
    fixture *f = *state;
    ty_err err;
    store_tenant_limits lim = {2, 5, 6, 700, 250.5, 500, 16, 1000};
    uint8_t hash[32] = {2};
    assert_int_equal(
        store_tenant_create(f->st, "tn_b", "bee", &lim, "key_b", hash, &err),
        TY_OK);
    expect_serving(f->st, "tn_b", 250.5, 500, 16);

    store_tenant_limits upd = {9, 9, 9, 9, 40, 80, 4, 90000};
    assert_int_equal(store_tenant_update(f->st, "tn_b", NULL, &upd,
                                         STORE_TENANT_SET_SERVING_BURST, &err),
                     TY_OK);
    expect_serving(f->st, "tn_b", 250.5, 80, 16);
    assert_int_equal(store_tenant_update(f->st, "tn_b", NULL, &upd,
                                         STORE_TENANT_SET_SERVING_RPS, &err),
                     TY_OK);
    expect_serving(f->st, "tn_b", 40, 80, 16);
    assert_int_equal(store_tenant_update(f->st, "tn_b", NULL, &upd,
                                         STORE_TENANT_SET_SERVING_CONCURRENCY,
                                         &err),
                     TY_OK);
    expect_serving(f->st, "tn_b", 40, 80, 4);
    /* The other quotas never moved. */
    store_tenant_limits back;
    assert_int_equal(store_tenant_limits_get(f->st, "tn_b", &back, &err),
                     TY_OK);
    assert_true(back.weight == 2);
    assert_int_equal(back.max_gpu_slices, 5);
    assert_int_equal(back.max_running_jobs, 6);
    assert_int_equal(back.max_storage_bytes, 700);

    /* Back to unlimited (the burst to its default), one at a time. */
    upd.serving_rps = STORE_UNLIMITED;
    upd.serving_burst = STORE_UNLIMITED;
    upd.serving_max_concurrency = STORE_UNLIMITED;
    assert_int_equal(store_tenant_update(f->st, "tn_b", NULL, &upd,
                                         STORE_TENANT_SET_SERVING_BURST, &err),
                     TY_OK);
    expect_serving(f->st, "tn_b", 40, STORE_UNLIMITED, 4);
    assert_int_equal(
        store_tenant_update(f->st, "tn_b", NULL, &upd,
                            STORE_TENANT_SET_SERVING_RPS |
                                STORE_TENANT_SET_SERVING_CONCURRENCY,
                            &err),
        TY_OK);
    expect_serving(f->st, "tn_b", STORE_UNLIMITED, STORE_UNLIMITED,
                   STORE_UNLIMITED);

    /* Values below the ranges (0, as a struct set field by field but
     * missing these would hold) are stored as unset, never as a limit of
     * 0 that would refuse every request. */
    store_tenant_limits zero = {
        1, STORE_UNLIMITED, STORE_UNLIMITED, STORE_UNLIMITED, 0, 0, 0, 0};
    hash[0] = 3;
    assert_int_equal(
        store_tenant_create(f->st, "tn_c", "sea", &zero, "key_c", hash, &err),
        TY_OK);
    expect_serving(f->st, "tn_c", STORE_UNLIMITED, STORE_UNLIMITED,
                   STORE_UNLIMITED);
    assert_int_equal(
        store_tenant_update(f->st, "tn_b", NULL, &zero,
                            STORE_TENANT_SET_SERVING_RPS |
                                STORE_TENANT_SET_SERVING_BURST |
                                STORE_TENANT_SET_SERVING_CONCURRENCY,
                            &err),
        TY_OK);
    expect_serving(f->st, "tn_b", STORE_UNLIMITED, STORE_UNLIMITED,
                   STORE_UNLIMITED);
}

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

/* A database of schema 6 (before the serving limits) migrates: its tenants
 * keep their weight and quotas and have no serving limits, which can then
 * be set. */
static void test_store_schema6_migrates(void **state)
{
    fixture *f = *state;
    ty_err err = {0};
    store_tenant_limits lim = {3,
                               4,
                               5,
                               600,
                               STORE_UNLIMITED,
                               STORE_UNLIMITED,
                               STORE_UNLIMITED,
                               STORE_UNLIMITED};
    uint8_t hash[32] = {2};
    assert_int_equal(
        store_tenant_create(f->st, "tn_b", "bee", &lim, "key_b", hash, &err),
        TY_OK);
    store_close(f->st);
    f->st = NULL;
    /* Back to what schema 6 was: tenants without the serving columns (and
     * no job steps, schema 8's). */
    sql(f->dir, "DROP TABLE demand;" /* schema 10's */
                "DROP TABLE job_steps;"
                "ALTER TABLE tenants DROP COLUMN serving_rps;"
                "ALTER TABLE tenants DROP COLUMN serving_burst;"
                "ALTER TABLE tenants DROP COLUMN serving_max_concurrency;"
                "ALTER TABLE tenants DROP COLUMN serving_tokens_per_minute;"
                "DROP TABLE usage_intervals;"
                "DROP TABLE usage_alive;"
                "PRAGMA user_version=6;");

    assert_int_equal(store_open(f->dir, &f->st, &err), TY_OK);
    assert_int_equal(store_schema_version(f->st), 11);
    store_tenant_limits back;
    assert_int_equal(store_tenant_limits_get(f->st, "tn_b", &back, &err),
                     TY_OK);
    assert_true(back.weight == 3);
    assert_int_equal(back.max_gpu_slices, 4);
    assert_int_equal(back.max_running_jobs, 5);
    assert_int_equal(back.max_storage_bytes, 600);
    expect_serving(f->st, "tn_b", STORE_UNLIMITED, STORE_UNLIMITED,
                   STORE_UNLIMITED);
    expect_serving(f->st, "tn_admin", STORE_UNLIMITED, STORE_UNLIMITED,
                   STORE_UNLIMITED);
    lim.serving_rps = 0.5;
    lim.serving_max_concurrency = 3;
    assert_int_equal(
        store_tenant_update(f->st, "tn_b", NULL, &lim,
                            STORE_TENANT_SET_SERVING_RPS |
                                STORE_TENANT_SET_SERVING_CONCURRENCY,
                            &err),
        TY_OK);
    expect_serving(f->st, "tn_b", 0.5, STORE_UNLIMITED, 3);
}

static int64_t tokens_of(store *st, const char *id)
{
    ty_err err;
    store_tenant_limits back;
    assert_int_equal(store_tenant_limits_get(st, id, &back, &err), TY_OK);
    /* The representation agrees: null where unlimited. */
    json_t *doc;
    assert_int_equal(store_tenant_get(st, id, &doc, &err), TY_OK);
    const json_t *v = json_object_get(json_object_get(doc, "quota"),
                                      "serving_tokens_per_minute");
    assert_non_null(v);
    assert_true(back.serving_tokens_per_minute == STORE_UNLIMITED
                    ? json_is_null(v)
                    : json_integer_value(v) == back.serving_tokens_per_minute);
    json_decref(doc);
    return back.serving_tokens_per_minute;
}

/* Tokens a minute are stored at create, set alone by an update (the other
 * serving limits as they were), and go back to unlimited; a database of
 * schema 8 (before them) migrates with none. */
static void test_store_tokens_per_minute(void **state)
{
    fixture *f = *state;
    ty_err err = {0};
    store_tenant_limits lim = {2, 5, 6, 700, 250.5, 500, 16, 6000};
    uint8_t hash[32] = {2};
    assert_int_equal(
        store_tenant_create(f->st, "tn_b", "bee", &lim, "key_b", hash, &err),
        TY_OK);
    assert_int_equal(tokens_of(f->st, "tn_b"), 6000);
    lim.serving_tokens_per_minute = 120;
    lim.serving_burst = 1;
    assert_int_equal(store_tenant_update(f->st, "tn_b", NULL, &lim,
                                         STORE_TENANT_SET_SERVING_TOKENS, &err),
                     TY_OK);
    assert_int_equal(tokens_of(f->st, "tn_b"), 120);
    expect_serving(f->st, "tn_b", 250.5, 500, 16);
    lim.serving_tokens_per_minute = STORE_UNLIMITED;
    assert_int_equal(store_tenant_update(f->st, "tn_b", NULL, &lim,
                                         STORE_TENANT_SET_SERVING_TOKENS, &err),
                     TY_OK);
    assert_int_equal(tokens_of(f->st, "tn_b"), STORE_UNLIMITED);

    lim.serving_tokens_per_minute = 900;
    assert_int_equal(store_tenant_update(f->st, "tn_b", NULL, &lim,
                                         STORE_TENANT_SET_SERVING_TOKENS, &err),
                     TY_OK);
    store_close(f->st);
    f->st = NULL;
    sql(f->dir, "DROP TABLE demand;" /* schema 10's */
                "ALTER TABLE tenants DROP COLUMN serving_tokens_per_minute;"
                "DROP TABLE usage_intervals;"
                "DROP TABLE usage_alive;"
                "PRAGMA user_version=8;");
    assert_int_equal(store_open(f->dir, &f->st, &err), TY_OK);
    assert_int_equal(store_schema_version(f->st), 11);
    assert_int_equal(tokens_of(f->st, "tn_b"), STORE_UNLIMITED);
    expect_serving(f->st, "tn_b", 250.5, 500, 16);
    lim.serving_tokens_per_minute = 60;
    assert_int_equal(store_tenant_update(f->st, "tn_b", NULL, &lim,
                                         STORE_TENANT_SET_SERVING_TOKENS, &err),
                     TY_OK);
    assert_int_equal(tokens_of(f->st, "tn_b"), 60);
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
        cmocka_unit_test_setup_teardown(test_store_update_serving, setup,
                                        tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_store_schema6_migrates, setup,
                                        tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_store_tokens_per_minute, setup,
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
