/*
 * tenants.c - tenants and their API keys (see store.h): the admin key
 * ensured at start, the key lookup every request makes, and the admin's
 * tenant and key rows with their weights and quotas (the serving limits
 * among them: stored and shown here, enforced by the serving controller).
 *
 * A key's secret is never stored, only its SHA-256; at least one live admin
 * key always remains (store_key_revoke refuses the last).
 */
#include "store/store_internal.h"

#include <stdio.h>
#include <string.h>

/* ---- tenants and keys ---- */

ty_status store_key_count(store *st, int64_t *count, ty_err *err)
{
    return db_q_int(st, count, err, "SELECT count(*) AS n FROM api_keys", "");
}

ty_status store_admin_key_ensure(store *st, const char *new_tenant_id,
                                 const char *key_id, const uint8_t hash[32],
                                 store_admin_key_result *result, ty_err *err)
{
    char now[32];
    ty_now_iso(now);
    pthread_mutex_lock(&st->mu);
    json_t *rows = NULL;
    ty_status s = db_exec(st, "BEGIN IMMEDIATE", err);
    if (s == TY_OK)
        s = db_q(st, &rows, NULL, err,
                 "SELECT hash = ? AS same, revoked_at IS NOT NULL AS revoked "
                 "FROM api_keys WHERE id = ?",
                 "bs", hash, key_id);
    json_t *row = json_array_get(rows, 0);
    if (s == TY_OK && row) {
        if (!json_integer_value(json_object_get(row, "same")))
            s = ty_fail(err, TY_ECONFLICT, NULL,
                        "another key with the id %s exists", key_id);
        else if (json_integer_value(json_object_get(row, "revoked")))
            *result = STORE_ADMIN_KEY_REVOKED;
        else
            *result = STORE_ADMIN_KEY_PRESENT;
    } else if (s == TY_OK) {
        json_t *admin = NULL;
        s = db_q(st, &admin, NULL, err,
                 "SELECT tenant_id FROM api_keys WHERE is_admin = 1 "
                 "ORDER BY created_at, id LIMIT 1",
                 "");
        const char *tenant = json_string_value(
            json_object_get(json_array_get(admin, 0), "tenant_id"));
        *result = tenant ? STORE_ADMIN_KEY_ADDED : STORE_ADMIN_KEY_CREATED;
        if (s == TY_OK && !tenant) {
            tenant = new_tenant_id;
            s = db_q(
                st, NULL, NULL, err,
                "INSERT INTO tenants(id, name, created_at) VALUES (?, ?, ?)",
                "sss", tenant, "admin", now);
        }
        if (s == TY_OK)
            s = db_q(st, NULL, NULL, err,
                     "INSERT INTO api_keys(id, tenant_id, hash, is_admin, "
                     "created_at) VALUES (?, ?, ?, 1, ?)",
                     "ssbs", key_id, tenant, hash, now);
        json_decref(admin);
    }
    json_decref(rows);
    if (s == TY_OK)
        s = db_exec(st, "COMMIT", err);
    if (s != TY_OK)
        db_rollback(st);
    pthread_mutex_unlock(&st->mu);
    if (s == TY_OK)
        store_gen_bump(st, STORE_GEN_KEYS);
    return s;
}

ty_status store_key_lookup(store *st, const char *key_id, store_key *out,
                           uint8_t hash[32], ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    sqlite3_stmt *s = NULL;
    ty_status status = TY_OK;
    if (sqlite3_prepare_v2(st->db,
                           "SELECT tenant_id, is_admin, hash FROM api_keys "
                           "WHERE id = ? AND revoked_at IS NULL",
                           -1, &s, NULL) != SQLITE_OK ||
        sqlite3_bind_text(s, 1, key_id, -1, SQLITE_TRANSIENT) != SQLITE_OK) {
        status = db_fail(st, err, "key lookup");
        goto done;
    }
    int rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) {
        status = ty_fail(err, TY_ENOTFOUND, NULL, "no such key");
        goto done;
    }
    if (rc != SQLITE_ROW || sqlite3_column_bytes(s, 2) != 32) {
        status = db_fail(st, err, "key lookup");
        goto done;
    }
    snprintf(out->key_id, sizeof out->key_id, "%s", key_id);
    snprintf(out->tenant_id, sizeof out->tenant_id, "%s",
             (const char *)sqlite3_column_text(s, 0));
    out->is_admin = sqlite3_column_int(s, 1);
    memcpy(hash, sqlite3_column_blob(s, 2), 32);
done:
    sqlite3_finalize(s);
    pthread_mutex_unlock(&st->mu);
    return status;
}

/* ---- tenants (admin) ---- */

/* A tenant's API representation; usage counts what the storage quota
 * measures (every dataset and model row's bytes) and what the scheduler will
 * limit. A tenant is the admin's when it holds an admin key. */
#define TENANT_COLUMNS                                                         \
    "t.id, t.name, t.weight, json_object("                                     \
    "'max_gpu_slices', t.max_gpu_slices, "                                     \
    "'max_running_jobs', t.max_running_jobs, "                                 \
    "'max_storage_bytes', t.max_storage_bytes, "                               \
    "'serving_requests_per_second', t.serving_rps, "                           \
    "'serving_burst', t.serving_burst, "                                       \
    "'serving_max_concurrency', t.serving_max_concurrency, "                   \
    "'serving_tokens_per_minute', t.serving_tokens_per_minute) AS "            \
    "quota_json, "                                                             \
    "json_object("                                                             \
    "'storage_bytes', "                                                        \
    "(SELECT coalesce(sum(bytes), 0) FROM datasets WHERE tenant_id = t.id) + " \
    "(SELECT coalesce(sum(bytes), 0) FROM models WHERE tenant_id = t.id), "    \
    "'datasets', (SELECT count(*) FROM datasets WHERE tenant_id = t.id), "     \
    "'models', (SELECT count(*) FROM models WHERE tenant_id = t.id), "         \
    "'running_jobs', (SELECT count(*) FROM jobs WHERE tenant_id = t.id AND "   \
    "status IN ('scheduled', 'running'))) AS usage_json, "                     \
    "json(CASE WHEN EXISTS (SELECT 1 FROM api_keys k WHERE k.tenant_id = "     \
    "t.id AND k.is_admin = 1) THEN 'true' ELSE 'false' END) AS admin_json, "   \
    "t.created_at"

#define KEY_COLUMNS                                                          \
    "id, tenant_id AS tenant, json(CASE WHEN is_admin = 1 THEN 'true' ELSE " \
    "'false' END) AS admin_json, created_at, revoked_at"

/* A serving count limit as the store binds it ('I'): below 1 is unset. */
static int64_t count_or_unset(int64_t v)
{
    return v >= 1 ? v : STORE_UNLIMITED;
}

/* TY_ECONFLICT if another tenant than self_id (may be "") is named name.
 * Caller holds st->mu. */
static ty_status tenant_name_free(store *st, const char *name,
                                  const char *self_id, ty_err *err)
{
    json_t *rows = NULL;
    ty_status s = db_q(st, &rows, NULL, err,
                       "SELECT id FROM tenants WHERE name = ? AND id != ?",
                       "ss", name, self_id);
    if (s == TY_OK && json_array_size(rows) > 0)
        s = ty_fail(
            err, TY_ECONFLICT, "name",
            "a tenant named '%s' exists already (%s); choose another "
            "name",
            name,
            json_string_value(json_object_get(json_array_get(rows, 0), "id")));
    json_decref(rows);
    return s;
}

ty_status store_tenant_create(store *st, const char *id, const char *name,
                              const store_tenant_limits *lim,
                              const char *key_id, const uint8_t hash[32],
                              ty_err *err)
{
    char now[32];
    ty_now_iso(now);
    pthread_mutex_lock(&st->mu);
    ty_status s = db_exec(st, "BEGIN IMMEDIATE", err);
    if (s != TY_OK)
        goto done;
    if ((s = tenant_name_free(st, name, "", err)) == TY_OK)
        s = db_q(st, NULL, NULL, err,
                 "INSERT INTO tenants(id, name, created_at, weight, "
                 "max_gpu_slices, max_running_jobs, max_storage_bytes, "
                 "serving_rps, serving_burst, serving_max_concurrency, "
                 "serving_tokens_per_minute) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 "sssdIIIDIII", id, name, now, lim->weight, lim->max_gpu_slices,
                 lim->max_running_jobs, lim->max_storage_bytes,
                 lim->serving_rps, count_or_unset(lim->serving_burst),
                 count_or_unset(lim->serving_max_concurrency),
                 count_or_unset(lim->serving_tokens_per_minute));
    if (s == TY_OK)
        s = db_q(
            st, NULL, NULL, err,
            "INSERT INTO api_keys(id, tenant_id, hash, is_admin, created_at) "
            "VALUES (?, ?, ?, 0, ?)",
            "ssbs", key_id, id, hash, now);
    if (s == TY_OK)
        s = db_exec(st, "COMMIT", err);
    if (s != TY_OK)
        db_rollback(st);
done:
    pthread_mutex_unlock(&st->mu);
    return s;
}

ty_status store_tenant_get(store *st, const char *id, json_t **doc, ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    ty_status s = db_q_one(
        st, doc, err, "tenant", id,
        "SELECT " TENANT_COLUMNS " FROM tenants t WHERE t.id = ?", "s", id);
    pthread_mutex_unlock(&st->mu);
    return s;
}

ty_status store_tenant_list(store *st, store_page page, json_t **items,
                            int64_t *next_cursor, ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    json_t *rows;
    ty_status s =
        db_q(st, &rows, NULL, err,
             "SELECT t.rowid AS _seq, " TENANT_COLUMNS
             " FROM tenants t WHERE (? = 0 OR t.rowid < ?) "
             "ORDER BY t.rowid DESC LIMIT ?",
             "iii", page.cursor, page.cursor, (int64_t)page.limit + 1);
    pthread_mutex_unlock(&st->mu);
    if (s != TY_OK)
        return s;
    *items = db_finish_page(rows, page.limit, next_cursor);
    return TY_OK;
}

static int64_t limit_of(const json_t *row, const char *name)
{
    const json_t *v = json_object_get(row, name);
    return json_is_integer(v) ? json_integer_value(v) : STORE_UNLIMITED;
}

ty_status store_tenant_limits_get(store *st, const char *id,
                                  store_tenant_limits *out, ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    json_t *row = NULL;
    ty_status s =
        db_q_one(st, &row, err, "tenant", id,
                 "SELECT weight, max_gpu_slices, max_running_jobs, "
                 "max_storage_bytes, serving_rps, serving_burst, "
                 "serving_max_concurrency, "
                 "serving_tokens_per_minute FROM tenants WHERE id = ?",
                 "s", id);
    pthread_mutex_unlock(&st->mu);
    if (s != TY_OK)
        return s;
    out->weight = json_number_value(json_object_get(row, "weight"));
    out->max_gpu_slices = limit_of(row, "max_gpu_slices");
    out->max_running_jobs = limit_of(row, "max_running_jobs");
    out->max_storage_bytes = limit_of(row, "max_storage_bytes");
    const json_t *rps = json_object_get(row, "serving_rps");
    out->serving_rps = json_is_number(rps) && json_number_value(rps) > 0
                           ? json_number_value(rps)
                           : STORE_UNLIMITED;
    out->serving_burst = limit_of(row, "serving_burst");
    out->serving_max_concurrency = limit_of(row, "serving_max_concurrency");
    out->serving_tokens_per_minute = limit_of(row, "serving_tokens_per_minute");
    json_decref(row);
    return TY_OK;
}

ty_status store_tenant_update(store *st, const char *id, const char *name,
                              const store_tenant_limits *lim, unsigned set,
                              ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    ty_status s = db_exec(st, "BEGIN IMMEDIATE", err);
    if (s != TY_OK)
        goto done;
    json_t *row = NULL;
    s = db_q_one(st, &row, err, "tenant", id,
                 "SELECT id FROM tenants WHERE id = ?", "s", id);
    json_decref(row);
    if (s == TY_OK && name)
        s = tenant_name_free(st, name, id, err);
    if (s == TY_OK)
        s = db_q(
            st, NULL, NULL, err,
            "UPDATE tenants SET name = coalesce(?, name), "
            "weight = CASE WHEN ? THEN ? ELSE weight END, "
            "max_gpu_slices = CASE WHEN ? THEN ? ELSE max_gpu_slices END, "
            "max_running_jobs = CASE WHEN ? THEN ? ELSE max_running_jobs END, "
            "max_storage_bytes = CASE WHEN ? THEN ? ELSE max_storage_bytes "
            "END, "
            "serving_rps = CASE WHEN ? THEN ? ELSE serving_rps END, "
            "serving_burst = CASE WHEN ? THEN ? ELSE serving_burst END, "
            "serving_max_concurrency = CASE WHEN ? THEN ? ELSE "
            "serving_max_concurrency END, "
            "serving_tokens_per_minute = CASE WHEN ? THEN ? ELSE "
            "serving_tokens_per_minute END WHERE id = ?",
            "sidiIiIiIiDiIiIiIs", name,
            (int64_t) !!(set & STORE_TENANT_SET_WEIGHT), lim->weight,
            (int64_t) !!(set & STORE_TENANT_SET_GPU_SLICES),
            lim->max_gpu_slices,
            (int64_t) !!(set & STORE_TENANT_SET_RUNNING_JOBS),
            lim->max_running_jobs, (int64_t) !!(set & STORE_TENANT_SET_STORAGE),
            lim->max_storage_bytes,
            (int64_t) !!(set & STORE_TENANT_SET_SERVING_RPS), lim->serving_rps,
            (int64_t) !!(set & STORE_TENANT_SET_SERVING_BURST),
            count_or_unset(lim->serving_burst),
            (int64_t) !!(set & STORE_TENANT_SET_SERVING_CONCURRENCY),
            count_or_unset(lim->serving_max_concurrency),
            (int64_t) !!(set & STORE_TENANT_SET_SERVING_TOKENS),
            count_or_unset(lim->serving_tokens_per_minute), id);
    if (s == TY_OK)
        s = db_exec(st, "COMMIT", err);
    if (s != TY_OK)
        db_rollback(st);
done:
    pthread_mutex_unlock(&st->mu);
    return s;
}

ty_status store_key_create(store *st, const char *tenant_id, const char *key_id,
                           const uint8_t hash[32], json_t **doc, ty_err *err)
{
    char now[32];
    ty_now_iso(now);
    pthread_mutex_lock(&st->mu);
    json_t *row = NULL;
    ty_status s = db_q_one(st, &row, err, "tenant", tenant_id,
                           "SELECT EXISTS (SELECT 1 FROM api_keys WHERE "
                           "tenant_id = t.id AND is_admin = 1) AS admin "
                           "FROM tenants t WHERE t.id = ?",
                           "s", tenant_id);
    if (s == TY_OK)
        s = db_q(
            st, NULL, NULL, err,
            "INSERT INTO api_keys(id, tenant_id, hash, is_admin, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            "ssbis", key_id, tenant_id, hash,
            (int64_t)json_integer_value(json_object_get(row, "admin")), now);
    json_decref(row);
    if (s == TY_OK)
        s = db_q_one(st, doc, err, "key", key_id,
                     "SELECT " KEY_COLUMNS " FROM api_keys WHERE id = ?", "s",
                     key_id);
    pthread_mutex_unlock(&st->mu);
    if (s == TY_OK)
        store_gen_bump(st, STORE_GEN_KEYS);
    return s;
}

ty_status store_key_list(store *st, const char *tenant_id, store_page page,
                         json_t **items, int64_t *next_cursor, ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    json_t *row = NULL, *rows = NULL;
    ty_status s =
        db_q_one(st, &row, err, "tenant", tenant_id,
                 "SELECT id FROM tenants WHERE id = ?", "s", tenant_id);
    json_decref(row);
    if (s == TY_OK)
        s = db_q(st, &rows, NULL, err,
                 "SELECT rowid AS _seq, " KEY_COLUMNS " FROM api_keys "
                 "WHERE tenant_id = ? AND (? = 0 OR rowid < ?) "
                 "ORDER BY rowid DESC LIMIT ?",
                 "siii", tenant_id, page.cursor, page.cursor,
                 (int64_t)page.limit + 1);
    pthread_mutex_unlock(&st->mu);
    if (s != TY_OK)
        return s;
    *items = db_finish_page(rows, page.limit, next_cursor);
    return TY_OK;
}

ty_status store_key_revoke(store *st, const char *tenant_id, const char *key_id,
                           ty_err *err)
{
    char now[32];
    ty_now_iso(now);
    pthread_mutex_lock(&st->mu);
    json_t *row = NULL;
    ty_status s = db_exec(st, "BEGIN IMMEDIATE", err);
    if (s != TY_OK)
        goto done;
    s = db_q_one(
        st, &row, err, "key", key_id,
        "SELECT is_admin, revoked_at IS NULL AS live, (SELECT count(*) "
        "FROM api_keys WHERE is_admin = 1 AND revoked_at IS NULL) AS "
        "live_admins FROM api_keys WHERE id = ? AND tenant_id = ?",
        "ss", key_id, tenant_id);
    if (s == TY_OK && json_integer_value(json_object_get(row, "is_admin")) &&
        json_integer_value(json_object_get(row, "live")) &&
        json_integer_value(json_object_get(row, "live_admins")) <= 1)
        s = ty_fail(err, TY_ECONFLICT, NULL,
                    "%s is the last admin key; create another admin key "
                    "(POST /v1/tenants/%s/keys) before revoking this one",
                    key_id, tenant_id);
    if (s == TY_OK)
        s = db_q(st, NULL, NULL, err,
                 "UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?) "
                 "WHERE id = ?",
                 "ss", now, key_id);
    if (s == TY_OK)
        s = db_exec(st, "COMMIT", err);
    if (s != TY_OK)
        db_rollback(st);
done:
    json_decref(row);
    pthread_mutex_unlock(&st->mu);
    if (s == TY_OK)
        store_gen_bump(st, STORE_GEN_KEYS);
    return s;
}
