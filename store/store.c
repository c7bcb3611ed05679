/*
 * store.c - SQLite metadata store (see store.h).
 *
 * Queries go through q(): it binds arguments described by a small format
 * string ('s' text or NULL, 'i' int64, 'I' int64 or NULL when negative, 'd'
 * double, 'b' 32-byte blob) and turns result
 * rows into JSON objects keyed by column name. A column whose name ends in
 * "_json" holds JSON text and is parsed (the suffix dropped); columns whose
 * name starts with "_" are bookkeeping (the list cursor) and are removed from
 * what callers see. Every public function takes the connection's mutex for
 * its whole duration, so multi-statement transactions are never interleaved.
 */
#include "store/store.h"

#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/blob.h"

struct store {
    sqlite3 *db;
    pthread_mutex_t mu;
    /* Held from a blob's import until its row commits, and from a row's
     * delete until its blob is released, so identical content uploaded while
     * another copy is deleted never loses its file. */
    pthread_mutex_t blob_mu;
    char data_dir[PATH_MAX];
};

/* ---- migrations: append only; never edit one that has shipped ---- */

static const char *const migrations[] = {
    /* 1: tenants, keys, datasets, jobs with per-epoch metrics, models */
    "CREATE TABLE tenants ("
    "  id TEXT PRIMARY KEY,"
    "  name TEXT NOT NULL UNIQUE,"
    "  created_at TEXT NOT NULL);"
    "CREATE TABLE api_keys ("
    "  id TEXT PRIMARY KEY,"
    "  tenant_id TEXT NOT NULL REFERENCES tenants(id),"
    "  hash BLOB NOT NULL UNIQUE,"
    "  is_admin INTEGER NOT NULL DEFAULT 0,"
    "  created_at TEXT NOT NULL,"
    "  revoked_at TEXT);"
    "CREATE TABLE datasets ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  id TEXT NOT NULL UNIQUE,"
    "  tenant_id TEXT NOT NULL REFERENCES tenants(id),"
    "  sha256 TEXT NOT NULL,"
    "  bytes INTEGER NOT NULL,"
    "  doc TEXT NOT NULL,"
    "  created_at TEXT NOT NULL);"
    "CREATE INDEX datasets_tenant ON datasets(tenant_id, seq);"
    "CREATE INDEX datasets_sha ON datasets(sha256);"
    "CREATE TABLE jobs ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  id TEXT NOT NULL UNIQUE,"
    "  tenant_id TEXT NOT NULL REFERENCES tenants(id),"
    "  name TEXT NOT NULL,"
    "  dataset_id TEXT NOT NULL,"
    "  validation TEXT NOT NULL,"
    "  spec TEXT NOT NULL,"
    "  hyperparameters TEXT NOT NULL,"
    "  status TEXT NOT NULL,"
    "  progress TEXT,"
    "  metrics TEXT,"
    "  model_id TEXT,"
    "  error TEXT,"
    "  attempts INTEGER NOT NULL DEFAULT 0,"
    "  created_at TEXT NOT NULL,"
    "  started_at TEXT,"
    "  finished_at TEXT);"
    "CREATE INDEX jobs_tenant ON jobs(tenant_id, seq);"
    "CREATE INDEX jobs_status ON jobs(status, seq);"
    "CREATE TABLE job_epochs ("
    "  job_id TEXT NOT NULL,"
    "  epoch INTEGER NOT NULL,"
    "  metrics TEXT NOT NULL,"
    "  PRIMARY KEY (job_id, epoch));"
    "CREATE TABLE models ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  id TEXT NOT NULL UNIQUE,"
    "  tenant_id TEXT NOT NULL REFERENCES tenants(id),"
    "  job_id TEXT,"
    "  sha256 TEXT NOT NULL,"
    "  bytes INTEGER NOT NULL,"
    "  doc TEXT NOT NULL,"
    "  created_at TEXT NOT NULL);"
    "CREATE INDEX models_tenant ON models(tenant_id, seq);"
    "CREATE INDEX models_sha ON models(sha256);",
    /* 2: the memory a job's training was estimated to take at submit
     * (models/train/train.h's train_memory total; NULL for older jobs) */
    "ALTER TABLE jobs ADD COLUMN estimated_memory_bytes INTEGER;",
    /* 3: where the job's latest run trains ("cpu", "cuda:N"), set when it
     * starts; NULL while queued for the first time and for older jobs */
    "ALTER TABLE jobs ADD COLUMN device TEXT;",
    /* 4: each tenant's fair-share weight and quotas (NULL = unlimited) */
    "ALTER TABLE tenants ADD COLUMN weight REAL NOT NULL DEFAULT 1;"
    "ALTER TABLE tenants ADD COLUMN max_gpu_slices INTEGER;"
    "ALTER TABLE tenants ADD COLUMN max_running_jobs INTEGER;"
    "ALTER TABLE tenants ADD COLUMN max_storage_bytes INTEGER;",
    /* 5: what a job asks of the scheduler (resources {"gpu": ...}, priority),
     * where its latest run was placed (placement, with what the worker saw),
     * how often it was preempted, and whether its next start resumes a run
     * a preemption stopped (then it counts no new attempt) */
    "ALTER TABLE jobs ADD COLUMN resources TEXT;"
    "ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN placement TEXT;"
    "ALTER TABLE jobs ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN resume_preempted INTEGER NOT NULL DEFAULT 0;",
};

/* ---- helpers ---- */

static ty_status db_fail(store *st, ty_err *err, const char *what)
{
    return ty_fail(err, TY_EIO, NULL, "database error (%s): %s", what,
                   sqlite3_errmsg(st->db));
}


static json_t *column_json(sqlite3_stmt *s, int i)
{
    const char *name = sqlite3_column_name(s, i);
    size_t nlen = strlen(name);
    int is_json = nlen > 5 && strcmp(name + nlen - 5, "_json") == 0;
    switch (sqlite3_column_type(s, i)) {
    case SQLITE_INTEGER:
        return json_integer(sqlite3_column_int64(s, i));
    case SQLITE_FLOAT:
        return json_real(sqlite3_column_double(s, i));
    case SQLITE_NULL:
        return json_null();
    default: {
        const char *text = (const char *)sqlite3_column_text(s, i);
        if (!text)
            return json_null();
        if (is_json) {
            json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
            return v ? v : json_null();
        }
        return json_string(text);
    }
    }
}

/* The current row as an object keyed by column name ("_json" dropped). */
static json_t *row_json(sqlite3_stmt *s)
{
    json_t *row = json_object();
    int n = sqlite3_column_count(s);
    for (int i = 0; i < n; i++) {
        const char *name = sqlite3_column_name(s, i);
        size_t nlen = strlen(name);
        char key[64];
        if (nlen > 5 && strcmp(name + nlen - 5, "_json") == 0)
            nlen -= 5;
        if (nlen >= sizeof key)
            nlen = sizeof key - 1;
        memcpy(key, name, nlen);
        key[nlen] = '\0';
        json_object_set_new(row, key, column_json(s, i));
    }
    return row;
}

static int bind_args(sqlite3_stmt *s, const char *fmt, va_list ap)
{
    int idx = 1, rc = SQLITE_OK;
    for (const char *f = fmt; *f && rc == SQLITE_OK; f++, idx++) {
        switch (*f) {
        case 's': {
            const char *v = va_arg(ap, const char *);
            rc = v ? sqlite3_bind_text(s, idx, v, -1, SQLITE_TRANSIENT)
                   : sqlite3_bind_null(s, idx);
            break;
        }
        case 'i':
            rc = sqlite3_bind_int64(s, idx, va_arg(ap, int64_t));
            break;
        case 'b':
            rc = sqlite3_bind_blob(s, idx, va_arg(ap, const void *), 32,
                                   SQLITE_TRANSIENT);
            break;
        case 'd':
            rc = sqlite3_bind_double(s, idx, va_arg(ap, double));
            break;
        case 'I': { /* int64; negative binds NULL (an unset limit) */
            int64_t v = va_arg(ap, int64_t);
            rc = v < 0 ? sqlite3_bind_null(s, idx) : sqlite3_bind_int64(s, idx, v);
            break;
        }
        default:
            return SQLITE_MISUSE;
        }
    }
    return rc;
}

/* Runs one statement with arguments per fmt. If rows is not NULL it gets a
 * new array of row objects; with first_only, only the first row is read. If
 * changes is not NULL it gets the number of rows changed. Caller holds st->mu. */
static ty_status vq(store *st, json_t **rows, int *changes, int first_only,
                    ty_err *err, const char *sql, const char *fmt, va_list ap)
{
    sqlite3_stmt *s = NULL;
    if (rows)
        *rows = NULL;
    if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) != SQLITE_OK)
        return db_fail(st, err, "prepare");
    int rc = bind_args(s, fmt, ap);
    if (rc != SQLITE_OK) {
        sqlite3_finalize(s);
        return db_fail(st, err, "bind");
    }
    json_t *out = rows ? json_array() : NULL;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (out)
            json_array_append_new(out, row_json(s));
        if (first_only) {
            rc = SQLITE_DONE;
            break;
        }
    }
    if (rc != SQLITE_DONE) {
        json_decref(out);
        ty_status status = db_fail(st, err, "step");
        sqlite3_finalize(s);
        return status;
    }
    if (changes)
        *changes = sqlite3_changes(st->db);
    sqlite3_finalize(s);
    if (rows)
        *rows = out;
    return TY_OK;
}

static ty_status q(store *st, json_t **rows, int *changes, ty_err *err,
                   const char *sql, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ty_status s = vq(st, rows, changes, 0, err, sql, fmt, ap);
    va_end(ap);
    return s;
}

/* The first row of a query, or TY_ENOTFOUND with "<what> <id> not found". */
static ty_status q_one(store *st, json_t **row, ty_err *err, const char *what,
                       const char *id, const char *sql, const char *fmt, ...)
{
    json_t *rows = NULL;
    va_list ap;
    va_start(ap, fmt);
    ty_status s = vq(st, &rows, NULL, 1, err, sql, fmt, ap);
    va_end(ap);
    if (s != TY_OK)
        return s;
    if (json_array_size(rows) == 0) {
        json_decref(rows);
        return ty_fail(err, TY_ENOTFOUND, NULL, "%s %s not found", what, id);
    }
    *row = json_incref(json_array_get(rows, 0));
    json_decref(rows);
    return TY_OK;
}

/* A query whose one row has one integer column named "n". */
static ty_status q_int(store *st, int64_t *out, ty_err *err, const char *sql,
                       const char *fmt, ...)
{
    json_t *rows = NULL;
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&st->mu);
    ty_status s = vq(st, &rows, NULL, 1, err, sql, fmt, ap);
    pthread_mutex_unlock(&st->mu);
    va_end(ap);
    if (s == TY_OK)
        *out = json_integer_value(json_object_get(json_array_get(rows, 0), "n"));
    json_decref(rows);
    return s;
}

static ty_status exec(store *st, const char *sql, ty_err *err)
{
    char *msg = NULL;
    if (sqlite3_exec(st->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        ty_status s = ty_fail(err, TY_EIO, NULL, "database error: %s",
                              msg ? msg : sqlite3_errmsg(st->db));
        sqlite3_free(msg);
        return s;
    }
    return TY_OK;
}

static void rollback(store *st)
{
    sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
}

/* Turns rows fetched with LIMIT page+1 into a page: each row (or its "_doc"
 * for document tables) without "_seq", and the cursor of the next page (the
 * last shown row's sequence number) when the extra row exists. */
static json_t *finish_page(json_t *rows, int limit, int64_t *next_cursor)
{
    *next_cursor = 0;
    json_t *items = json_array();
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        if ((int)i == limit) {
            *next_cursor = json_integer_value(
                json_object_get(json_array_get(rows, i - 1), "_seq"));
            break;
        }
        json_t *doc = json_object_get(row, "_doc");
        json_t *item = json_deep_copy(doc ? doc : row);
        json_object_del(item, "_seq");
        json_array_append_new(items, item);
    }
    json_decref(rows);
    return items;
}

/* ---- open, migrate, close ---- */

ty_status store_open(const char *data_dir, store **out, ty_err *err)
{
    *out = NULL;
    store *st = calloc(1, sizeof *st);
    if (!st)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    pthread_mutex_init(&st->blob_mu, NULL);
    snprintf(st->data_dir, sizeof st->data_dir, "%s", data_dir);
    pthread_mutex_init(&st->mu, NULL);
    char path[4096];
    snprintf(path, sizeof path, "%s/trainyard.db", data_dir);
    ty_status s = TY_OK;
    if (sqlite3_open_v2(path, &st->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                            SQLITE_OPEN_FULLMUTEX,
                        NULL) != SQLITE_OK) {
        s = ty_fail(err, TY_EIO, NULL, "cannot open database %s: %s", path,
                    st->db ? sqlite3_errmsg(st->db) : "out of memory");
        goto fail;
    }
    sqlite3_busy_timeout(st->db, 5000);
    if ((s = exec(st, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                      "PRAGMA foreign_keys=ON;",
                  err)) != TY_OK)
        goto fail;
    int version = store_schema_version(st);
    int known = (int)TY_ARRAY_LEN(migrations);
    if (version > known) {
        s = ty_fail(err, TY_EINVAL, NULL,
                    "database %s is at schema version %d, newer than this "
                    "trainyard (%d); upgrade trainyard",
                    path, version, known);
        goto fail;
    }
    for (int v = version; v < known; v++) {
        char bump[64];
        snprintf(bump, sizeof bump, "PRAGMA user_version=%d;", v + 1);
        if ((s = exec(st, "BEGIN IMMEDIATE", err)) != TY_OK)
            goto fail;
        if ((s = exec(st, migrations[v], err)) != TY_OK ||
            (s = exec(st, bump, err)) != TY_OK ||
            (s = exec(st, "COMMIT", err)) != TY_OK) {
            rollback(st);
            ty_err_prefix(err, "migration %d", v + 1);
            goto fail;
        }
    }
    *out = st;
    return TY_OK;
fail:
    store_close(st);
    return s;
}

void store_close(store *st)
{
    if (!st)
        return;
    if (st->db)
        sqlite3_close_v2(st->db);
    pthread_mutex_destroy(&st->mu);
    pthread_mutex_destroy(&st->blob_mu);
    free(st);
}

int store_schema_version(store *st)
{
    sqlite3_stmt *s;
    int v = -1;
    if (sqlite3_prepare_v2(st->db, "PRAGMA user_version", -1, &s, NULL) ==
        SQLITE_OK) {
        if (sqlite3_step(s) == SQLITE_ROW)
            v = sqlite3_column_int(s, 0);
        sqlite3_finalize(s);
    }
    return v;
}

ty_status store_ping(store *st, ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    json_t *rows;
    ty_status s = q(st, &rows, NULL, err, "SELECT 1 AS ok", "");
    json_decref(rows);
    pthread_mutex_unlock(&st->mu);
    return s;
}

/* ---- tenants and keys ---- */

ty_status store_key_count(store *st, int64_t *count, ty_err *err)
{
    return q_int(st, count, err, "SELECT count(*) AS n FROM api_keys", "");
}

ty_status store_admin_key_ensure(store *st, const char *new_tenant_id,
                                 const char *key_id, const uint8_t hash[32],
                                 store_admin_key_result *result, ty_err *err)
{
    char now[32];
    ty_now_iso(now);
    pthread_mutex_lock(&st->mu);
    json_t *rows = NULL;
    ty_status s = exec(st, "BEGIN IMMEDIATE", err);
    if (s == TY_OK)
        s = q(st, &rows, NULL, err,
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
        s = q(st, &admin, NULL, err,
              "SELECT tenant_id FROM api_keys WHERE is_admin = 1 "
              "ORDER BY created_at, id LIMIT 1",
              "");
        const char *tenant = json_string_value(
            json_object_get(json_array_get(admin, 0), "tenant_id"));
        *result = tenant ? STORE_ADMIN_KEY_ADDED : STORE_ADMIN_KEY_CREATED;
        if (s == TY_OK && !tenant) {
            tenant = new_tenant_id;
            s = q(st, NULL, NULL, err,
                  "INSERT INTO tenants(id, name, created_at) VALUES (?, ?, ?)",
                  "sss", tenant, "admin", now);
        }
        if (s == TY_OK)
            s = q(st, NULL, NULL, err,
                  "INSERT INTO api_keys(id, tenant_id, hash, is_admin, "
                  "created_at) VALUES (?, ?, ?, 1, ?)",
                  "ssbs", key_id, tenant, hash, now);
        json_decref(admin);
    }
    json_decref(rows);
    if (s == TY_OK)
        s = exec(st, "COMMIT", err);
    if (s != TY_OK)
        rollback(st);
    pthread_mutex_unlock(&st->mu);
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

/* ---- datasets ---- */

ty_status store_dataset_insert(store *st, const char *tenant_id,
                               const char *id, const char *sha256,
                               int64_t bytes, const json_t *doc, ty_err *err)
{
    char *text = json_dumps(doc, JSON_COMPACT);
    if (!text)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    pthread_mutex_lock(&st->mu);
    ty_status s = q(st, NULL, NULL, err,
                    "INSERT INTO datasets(id, tenant_id, sha256, bytes, doc, "
                    "created_at) VALUES (?, ?, ?, ?, ?, ?)",
                    "sssiss", id, tenant_id, sha256, bytes, text,
                    json_string_value(json_object_get(doc, "created_at")));
    pthread_mutex_unlock(&st->mu);
    free(text);
    return s;
}

static ty_status get_doc(store *st, const char *table, const char *what,
                         const char *tenant_id, const char *id, json_t **doc,
                         char sha256[65], ty_err *err)
{
    char sql[160];
    snprintf(sql, sizeof sql,
             "SELECT doc AS doc_json, sha256 FROM %s WHERE id = ? AND "
             "tenant_id = ?",
             table);
    pthread_mutex_lock(&st->mu);
    json_t *row = NULL;
    ty_status s = q_one(st, &row, err, what, id, sql, "ss", id, tenant_id);
    pthread_mutex_unlock(&st->mu);
    if (s != TY_OK)
        return s;
    if (sha256)
        snprintf(sha256, 65, "%s",
                 json_string_value(json_object_get(row, "sha256")));
    *doc = json_incref(json_object_get(row, "doc"));
    json_decref(row);
    return TY_OK;
}

static ty_status list_docs(store *st, const char *table, const char *tenant_id,
                           store_page page, json_t **items,
                           int64_t *next_cursor, ty_err *err)
{
    char sql[200];
    snprintf(sql, sizeof sql,
             "SELECT seq AS _seq, doc AS _doc_json FROM %s WHERE tenant_id = ? "
             "AND (? = 0 OR seq < ?) ORDER BY seq DESC LIMIT ?",
             table);
    pthread_mutex_lock(&st->mu);
    json_t *rows;
    ty_status s = q(st, &rows, NULL, err, sql, "siii", tenant_id, page.cursor,
                    page.cursor, (int64_t)page.limit + 1);
    pthread_mutex_unlock(&st->mu);
    if (s != TY_OK)
        return s;
    *items = finish_page(rows, page.limit, next_cursor);
    return TY_OK;
}

ty_status store_dataset_get(store *st, const char *tenant_id, const char *id,
                            json_t **doc, char sha256[65], ty_err *err)
{
    return get_doc(st, "datasets", "dataset", tenant_id, id, doc, sha256, err);
}

ty_status store_dataset_list(store *st, const char *tenant_id,
                             store_page page, json_t **items,
                             int64_t *next_cursor, ty_err *err)
{
    return list_docs(st, "datasets", tenant_id, page, items, next_cursor, err);
}

static ty_status delete_row(store *st, const char *table, const char *what,
                            const char *tenant_id, const char *id,
                            char sha256[65], ty_err *err)
{
    char sql[160];
    snprintf(sql, sizeof sql,
             "SELECT sha256 FROM %s WHERE id = ? AND tenant_id = ?", table);
    json_t *row = NULL;
    ty_status s = q_one(st, &row, err, what, id, sql, "ss", id, tenant_id);
    if (s != TY_OK)
        return s;
    snprintf(sha256, 65, "%s", json_string_value(json_object_get(row, "sha256")));
    json_decref(row);
    snprintf(sql, sizeof sql, "DELETE FROM %s WHERE id = ? AND tenant_id = ?",
             table);
    return q(st, NULL, NULL, err, sql, "ss", id, tenant_id);
}

ty_status store_dataset_delete(store *st, const char *tenant_id,
                               const char *id, char sha256[65], ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    json_t *rows = NULL;
    ty_status s = q(st, &rows, NULL, err,
                    "SELECT id FROM jobs WHERE tenant_id = ?2 AND "
                    "status IN ('queued', 'running') AND (dataset_id = ?1 OR "
                    "json_extract(validation, '$.dataset') = ?1) LIMIT 1",
                    "ss", id, tenant_id);
    if (s == TY_OK && json_array_size(rows) > 0) {
        s = ty_fail(err, TY_ECONFLICT, NULL,
                    "dataset %s is in use by job %s; cancel the job or wait "
                    "for it to finish before deleting the dataset",
                    id,
                    json_string_value(
                        json_object_get(json_array_get(rows, 0), "id")));
    } else if (s == TY_OK) {
        s = delete_row(st, "datasets", "dataset", tenant_id, id, sha256, err);
    }
    json_decref(rows);
    pthread_mutex_unlock(&st->mu);
    return s;
}

/* ---- jobs ---- */

#define JOB_COLUMNS                                                           \
    "id, name, status, dataset_id AS dataset, validation AS validation_json, " \
    "spec AS spec_json, hyperparameters AS hyperparameters_json, "            \
    "progress AS progress_json, metrics AS metrics_json, model_id AS model, " \
    "error, attempts, created_at, started_at, finished_at, "                  \
    "estimated_memory_bytes, device, "                                       \
    "coalesce(resources, '{\"gpu\":\"none\"}') AS resources_json, priority, " \
    "placement AS placement_json, preemptions"

ty_status store_job_insert(store *st, const char *tenant_id, const char *id,
                           const char *name, const char *dataset_id,
                           const json_t *validation, const json_t *spec,
                           const json_t *hyperparameters,
                           int64_t estimated_memory_bytes, ty_err *err)
{
    return store_job_insert_req(st, tenant_id, id, name, dataset_id,
                                validation, spec, hyperparameters,
                                estimated_memory_bytes, NULL, 0, err);
}

ty_status store_job_insert_req(store *st, const char *tenant_id,
                               const char *id, const char *name,
                               const char *dataset_id,
                               const json_t *validation, const json_t *spec,
                               const json_t *hyperparameters,
                               int64_t estimated_memory_bytes,
                               const json_t *resources, int64_t priority,
                               ty_err *err)
{
    char now[32];
    ty_now_iso(now);
    char *v = json_dumps(validation, JSON_COMPACT);
    char *sp = json_dumps(spec, JSON_COMPACT);
    char *hp = json_dumps(hyperparameters, JSON_COMPACT);
    char *res = resources ? json_dumps(resources, JSON_COMPACT) : NULL;
    ty_status s;
    if (!v || !sp || !hp || (resources && !res)) {
        s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    } else {
        pthread_mutex_lock(&st->mu);
        s = q(st, NULL, NULL, err,
              "INSERT INTO jobs(id, tenant_id, name, dataset_id, validation, "
              "spec, hyperparameters, status, progress, metrics, created_at, "
              "estimated_memory_bytes, resources, priority) "
              "VALUES (?, ?, ?, ?, ?, ?, ?, 'queued', "
              "'{\"epoch\":0,\"step\":0,\"fraction\":0}', '{}', ?, ?, ?, ?)",
              "ssssssssisi", id, tenant_id, name, dataset_id, v, sp, hp, now,
              estimated_memory_bytes, res, priority);
        pthread_mutex_unlock(&st->mu);
    }
    free(v);
    free(sp);
    free(hp);
    free(res);
    return s;
}

ty_status store_job_get(store *st, const char *tenant_id, const char *id,
                        json_t **doc, ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    ty_status s = q_one(st, doc, err, "job", id,
                        "SELECT " JOB_COLUMNS
                        " FROM jobs WHERE id = ? AND tenant_id = ?",
                        "ss", id, tenant_id);
    pthread_mutex_unlock(&st->mu);
    return s;
}

ty_status store_job_get_internal(store *st, const char *id, json_t **doc,
                                 ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    ty_status s = q_one(st, doc, err, "job", id,
                        "SELECT " JOB_COLUMNS ", tenant_id FROM jobs "
                        "WHERE id = ?",
                        "s", id);
    pthread_mutex_unlock(&st->mu);
    return s;
}

ty_status store_job_list(store *st, const char *tenant_id, const char *status,
                         store_page page, json_t **items,
                         int64_t *next_cursor, ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    json_t *rows;
    ty_status s = q(st, &rows, NULL, err,
                    "SELECT seq AS _seq, " JOB_COLUMNS
                    " FROM jobs WHERE tenant_id = ? AND (? IS NULL OR "
                    "status = ?) AND (? = 0 OR seq < ?) ORDER BY seq DESC "
                    "LIMIT ?",
                    "sssiii", tenant_id, status, status, page.cursor,
                    page.cursor, (int64_t)page.limit + 1);
    pthread_mutex_unlock(&st->mu);
    if (s != TY_OK)
        return s;
    *items = finish_page(rows, page.limit, next_cursor);
    return TY_OK;
}

ty_status store_job_epochs(store *st, const char *tenant_id, const char *id,
                           json_t **items, ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    json_t *row = NULL;
    ty_status s = q_one(st, &row, err, "job", id,
                        "SELECT id FROM jobs WHERE id = ? AND tenant_id = ?",
                        "ss", id, tenant_id);
    json_decref(row);
    json_t *rows = NULL;
    if (s == TY_OK)
        s = q(st, &rows, NULL, err,
              "SELECT metrics AS m_json FROM job_epochs WHERE job_id = ? "
              "ORDER BY epoch",
              "s", id);
    pthread_mutex_unlock(&st->mu);
    if (s != TY_OK)
        return s;
    *items = json_array();
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r)
        json_array_append(*items, json_object_get(r, "m"));
    json_decref(rows);
    return TY_OK;
}

ty_status store_job_next_queued(store *st, char id[TY_ID_MAX], ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    json_t *row = NULL;
    ty_status s = q_one(st, &row, err, "queued job", "",
                        "SELECT id FROM jobs WHERE status = 'queued' "
                        "ORDER BY seq LIMIT 1",
                        "");
    pthread_mutex_unlock(&st->mu);
    if (s == TY_OK)
        snprintf(id, TY_ID_MAX, "%s",
                 json_string_value(json_object_get(row, "id")));
    json_decref(row);
    return s;
}

ty_status store_job_start(store *st, const char *id, const char *device,
                          ty_err *err)
{
    return store_job_start_on(st, id, device, NULL, err);
}

ty_status store_job_start_on(store *st, const char *id, const char *device,
                             const json_t *placement, ty_err *err)
{
    char now[32];
    ty_now_iso(now);
    char *pl = placement ? json_dumps(placement, JSON_COMPACT) : NULL;
    if (placement && !pl)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    int changed = 0;
    pthread_mutex_lock(&st->mu);
    ty_status s = q(st, NULL, &changed, err,
                    "UPDATE jobs SET status = 'running', "
                    "attempts = attempts + (1 - resume_preempted), "
                    "resume_preempted = 0, "
                    "started_at = coalesce(started_at, ?), device = ?, "
                    "placement = coalesce(?, placement) "
                    "WHERE id = ? AND status = 'queued'",
                    "ssss", now, device, pl, id);
    pthread_mutex_unlock(&st->mu);
    free(pl);
    if (s == TY_OK && changed == 0)
        return ty_fail(err, TY_ECONFLICT, NULL, "job %s is not queued", id);
    return s;
}

ty_status store_job_progress(store *st, const char *id, const json_t *progress,
                             const json_t *metrics, ty_err *err)
{
    char *p = progress ? json_dumps(progress, JSON_COMPACT) : NULL;
    char *m = metrics ? json_dumps(metrics, JSON_COMPACT) : NULL;
    pthread_mutex_lock(&st->mu);
    ty_status s = q(st, NULL, NULL, err,
                    "UPDATE jobs SET progress = coalesce(?, progress), "
                    "metrics = CASE WHEN ? IS NULL THEN metrics "
                    "ELSE json_patch(coalesce(metrics, '{}'), ?) END "
                    "WHERE id = ? AND status = 'running'",
                    "ssss", p, m, m, id);
    pthread_mutex_unlock(&st->mu);
    free(p);
    free(m);
    return s;
}

ty_status store_job_epoch(store *st, const char *id, int64_t epoch,
                          const json_t *metrics, ty_err *err)
{
    char *m = json_dumps(metrics, JSON_COMPACT);
    if (!m)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    pthread_mutex_lock(&st->mu);
    ty_status s = exec(st, "BEGIN IMMEDIATE", err);
    if (s == TY_OK)
        s = q(st, NULL, NULL, err,
              "INSERT OR REPLACE INTO job_epochs(job_id, epoch, metrics) "
              "VALUES (?, ?, ?)",
              "sis", id, epoch, m);
    if (s == TY_OK)
        s = q(st, NULL, NULL, err,
              "UPDATE jobs SET metrics = json_patch(coalesce(metrics, '{}'), ?) "
              "WHERE id = ?",
              "ss", m, id);
    if (s == TY_OK)
        s = exec(st, "COMMIT", err);
    if (s != TY_OK)
        rollback(st);
    pthread_mutex_unlock(&st->mu);
    free(m);
    return s;
}

ty_status store_job_finish(store *st, const char *id, const char *status,
                           const char *error, int *changed, ty_err *err)
{
    char now[32];
    ty_now_iso(now);
    int n = 0;
    pthread_mutex_lock(&st->mu);
    ty_status s = q(st, NULL, &n, err,
                    "UPDATE jobs SET status = ?, error = ?, finished_at = ? "
                    "WHERE id = ? AND status IN ('queued', 'running')",
                    "ssss", status, error, now, id);
    pthread_mutex_unlock(&st->mu);
    if (changed)
        *changed = n;
    return s;
}

ty_status store_job_succeed(store *st, const char *id, const char *model_id,
                            const char *sha256, int64_t bytes,
                            const json_t *model_doc, ty_err *err)
{
    char now[32];
    ty_now_iso(now);
    char *doc = json_dumps(model_doc, JSON_COMPACT);
    if (!doc)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    int changed = 0;
    pthread_mutex_lock(&st->mu);
    ty_status s = exec(st, "BEGIN IMMEDIATE", err);
    if (s == TY_OK)
        s = q(st, NULL, NULL, err,
              "INSERT INTO models(id, tenant_id, job_id, sha256, bytes, doc, "
              "created_at) SELECT ?, tenant_id, id, ?, ?, ?, ? FROM jobs "
              "WHERE id = ?",
              "ssisss", model_id, sha256, bytes, doc,
              json_string_value(json_object_get(model_doc, "created_at")), id);
    if (s == TY_OK)
        s = q(st, NULL, &changed, err,
              "UPDATE jobs SET status = 'succeeded', model_id = ?, error = NULL, "
              "finished_at = ?, progress = json_set(coalesce(progress, '{}'), "
              "'$.fraction', 1, '$.epoch', json_extract(progress, '$.epochs')) "
              "WHERE id = ? AND status = 'running'",
              "sss", model_id, now, id);
    if (s == TY_OK && changed == 0)
        s = ty_fail(err, TY_ECONFLICT, NULL, "job %s is not running", id);
    if (s == TY_OK)
        s = exec(st, "COMMIT", err);
    if (s != TY_OK)
        rollback(st);
    pthread_mutex_unlock(&st->mu);
    free(doc);
    return s;
}

ty_status store_job_request_cancel(store *st, const char *tenant_id,
                                   const char *id, int *was_running,
                                   ty_err *err)
{
    char now[32];
    ty_now_iso(now);
    pthread_mutex_lock(&st->mu);
    json_t *row = NULL;
    ty_status s = q_one(st, &row, err, "job", id,
                        "SELECT status FROM jobs WHERE id = ? AND tenant_id = ?",
                        "ss", id, tenant_id);
    if (s == TY_OK) {
        const char *status = json_string_value(json_object_get(row, "status"));
        if (!strcmp(status, JOB_QUEUED)) {
            *was_running = 0;
            s = q(st, NULL, NULL, err,
                  "UPDATE jobs SET status = 'cancelled', finished_at = ?, "
                  "error = 'cancelled by request' WHERE id = ?",
                  "ss", now, id);
        } else if (!strcmp(status, JOB_RUNNING)) {
            *was_running = 1;
        } else {
            s = ty_fail(err, TY_ECONFLICT, NULL,
                        "job %s has already %s; only queued or running jobs "
                        "can be cancelled",
                        id, status);
        }
    }
    json_decref(row);
    pthread_mutex_unlock(&st->mu);
    return s;
}

ty_status store_job_requeue_running(store *st, int64_t *count, ty_err *err)
{
    int n = 0;
    pthread_mutex_lock(&st->mu);
    ty_status s = q(st, NULL, &n, err,
                    "UPDATE jobs SET status = 'queued' WHERE status = 'running'",
                    "");
    pthread_mutex_unlock(&st->mu);
    *count = n;
    return s;
}

ty_status store_job_placement_merge(store *st, const char *id,
                                   const json_t *patch, ty_err *err)
{
    char *p = json_dumps(patch, JSON_COMPACT);
    if (!p)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    pthread_mutex_lock(&st->mu);
    ty_status s = q(st, NULL, NULL, err,
                    "UPDATE jobs SET placement = json_patch(coalesce(placement, "
                    "'{}'), ?) WHERE id = ?",
                    "ss", p, id);
    pthread_mutex_unlock(&st->mu);
    free(p);
    return s;
}

ty_status store_job_requeue(store *st, const char *id, int preempted,
                            const char *error, ty_err *err)
{
    int changed = 0;
    pthread_mutex_lock(&st->mu);
    ty_status s = q(st, NULL, &changed, err,
                    "UPDATE jobs SET status = 'queued', error = ?, "
                    "preemptions = preemptions + ?, resume_preempted = ? "
                    "WHERE id = ? AND status = 'running'",
                    "siis", error, (int64_t)!!preempted, (int64_t)!!preempted,
                    id);
    pthread_mutex_unlock(&st->mu);
    if (s == TY_OK && changed == 0)
        return ty_fail(err, TY_ECONFLICT, NULL, "job %s is not running", id);
    return s;
}

ty_status store_job_queued_all(store *st, json_t **rows, ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    ty_status s = q(st, rows, NULL, err,
                    "SELECT id, tenant_id, priority, "
                    "coalesce(resources, '{\"gpu\":\"none\"}') AS "
                    "resources_json, (julianday(created_at) - 2440587.5) * "
                    "86400.0 AS submit_time FROM jobs WHERE status = 'queued' "
                    "ORDER BY seq",
                    "");
    pthread_mutex_unlock(&st->mu);
    return s;
}

/* ---- models ---- */

ty_status store_model_get(store *st, const char *tenant_id, const char *id,
                          json_t **doc, char sha256[65], ty_err *err)
{
    return get_doc(st, "models", "model", tenant_id, id, doc, sha256, err);
}

ty_status store_model_insert(store *st, const char *tenant_id, const char *id,
                             const char *sha256, int64_t bytes,
                             const json_t *doc, ty_err *err)
{
    char *text = json_dumps(doc, JSON_COMPACT);
    if (!text)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    pthread_mutex_lock(&st->mu);
    ty_status s = q(st, NULL, NULL, err,
                    "INSERT INTO models(id, tenant_id, job_id, sha256, bytes, "
                    "doc, created_at) VALUES (?, ?, NULL, ?, ?, ?, ?)",
                    "sssiss", id, tenant_id, sha256, bytes, text,
                    json_string_value(json_object_get(doc, "created_at")));
    pthread_mutex_unlock(&st->mu);
    free(text);
    return s;
}

ty_status store_model_list(store *st, const char *tenant_id, store_page page,
                           json_t **items, int64_t *next_cursor, ty_err *err)
{
    return list_docs(st, "models", tenant_id, page, items, next_cursor, err);
}

ty_status store_model_delete(store *st, const char *tenant_id, const char *id,
                             char sha256[65], ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    ty_status s = delete_row(st, "models", "model", tenant_id, id, sha256, err);
    pthread_mutex_unlock(&st->mu);
    return s;
}

/* ---- blobs ---- */

ty_status store_blob_refs(store *st, const char *sha256, int64_t *refs,
                          ty_err *err)
{
    return q_int(st, refs, err,
                 "SELECT (SELECT count(*) FROM datasets WHERE sha256 = ?1) + "
                 "(SELECT count(*) FROM models WHERE sha256 = ?1) AS n",
                 "s", sha256);
}

/* ---- tenants (admin) ---- */

/* A tenant's API representation; usage counts what the storage quota
 * measures (every dataset and model row's bytes) and what the scheduler will
 * limit. A tenant is the admin's when it holds an admin key. */
#define TENANT_COLUMNS                                                        \
    "t.id, t.name, t.weight, json_object("                                   \
    "'max_gpu_slices', t.max_gpu_slices, "                                   \
    "'max_running_jobs', t.max_running_jobs, "                               \
    "'max_storage_bytes', t.max_storage_bytes) AS quota_json, json_object("  \
    "'storage_bytes', "                                                      \
    "(SELECT coalesce(sum(bytes), 0) FROM datasets WHERE tenant_id = t.id) + " \
    "(SELECT coalesce(sum(bytes), 0) FROM models WHERE tenant_id = t.id), "  \
    "'datasets', (SELECT count(*) FROM datasets WHERE tenant_id = t.id), "   \
    "'models', (SELECT count(*) FROM models WHERE tenant_id = t.id), "       \
    "'running_jobs', (SELECT count(*) FROM jobs WHERE tenant_id = t.id AND " \
    "status = 'running')) AS usage_json, "                                   \
    "json(CASE WHEN EXISTS (SELECT 1 FROM api_keys k WHERE k.tenant_id = "   \
    "t.id AND k.is_admin = 1) THEN 'true' ELSE 'false' END) AS admin_json, " \
    "t.created_at"

#define KEY_COLUMNS                                                           \
    "id, tenant_id AS tenant, json(CASE WHEN is_admin = 1 THEN 'true' ELSE "  \
    "'false' END) AS admin_json, created_at, revoked_at"

/* TY_ECONFLICT if another tenant than self_id (may be "") is named name.
 * Caller holds st->mu. */
static ty_status tenant_name_free(store *st, const char *name,
                                  const char *self_id, ty_err *err)
{
    json_t *rows = NULL;
    ty_status s = q(st, &rows, NULL, err,
                    "SELECT id FROM tenants WHERE name = ? AND id != ?", "ss",
                    name, self_id);
    if (s == TY_OK && json_array_size(rows) > 0)
        s = ty_fail(err, TY_ECONFLICT, "name",
                    "a tenant named '%s' exists already (%s); choose another "
                    "name",
                    name,
                    json_string_value(
                        json_object_get(json_array_get(rows, 0), "id")));
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
    ty_status s = exec(st, "BEGIN IMMEDIATE", err);
    if (s != TY_OK)
        goto done;
    if ((s = tenant_name_free(st, name, "", err)) == TY_OK)
        s = q(st, NULL, NULL, err,
              "INSERT INTO tenants(id, name, created_at, weight, "
              "max_gpu_slices, max_running_jobs, max_storage_bytes) "
              "VALUES (?, ?, ?, ?, ?, ?, ?)",
              "sssdIII", id, name, now, lim->weight, lim->max_gpu_slices,
              lim->max_running_jobs, lim->max_storage_bytes);
    if (s == TY_OK)
        s = q(st, NULL, NULL, err,
              "INSERT INTO api_keys(id, tenant_id, hash, is_admin, created_at) "
              "VALUES (?, ?, ?, 0, ?)",
              "ssbs", key_id, id, hash, now);
    if (s == TY_OK)
        s = exec(st, "COMMIT", err);
    if (s != TY_OK)
        rollback(st);
done:
    pthread_mutex_unlock(&st->mu);
    return s;
}

ty_status store_tenant_get(store *st, const char *id, json_t **doc,
                           ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    ty_status s = q_one(st, doc, err, "tenant", id,
                        "SELECT " TENANT_COLUMNS " FROM tenants t WHERE t.id = ?",
                        "s", id);
    pthread_mutex_unlock(&st->mu);
    return s;
}

ty_status store_tenant_list(store *st, store_page page, json_t **items,
                            int64_t *next_cursor, ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    json_t *rows;
    ty_status s = q(st, &rows, NULL, err,
                    "SELECT t.rowid AS _seq, " TENANT_COLUMNS
                    " FROM tenants t WHERE (? = 0 OR t.rowid < ?) "
                    "ORDER BY t.rowid DESC LIMIT ?",
                    "iii", page.cursor, page.cursor, (int64_t)page.limit + 1);
    pthread_mutex_unlock(&st->mu);
    if (s != TY_OK)
        return s;
    *items = finish_page(rows, page.limit, next_cursor);
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
    ty_status s = q_one(st, &row, err, "tenant", id,
                        "SELECT weight, max_gpu_slices, max_running_jobs, "
                        "max_storage_bytes FROM tenants WHERE id = ?",
                        "s", id);
    pthread_mutex_unlock(&st->mu);
    if (s != TY_OK)
        return s;
    out->weight = json_number_value(json_object_get(row, "weight"));
    out->max_gpu_slices = limit_of(row, "max_gpu_slices");
    out->max_running_jobs = limit_of(row, "max_running_jobs");
    out->max_storage_bytes = limit_of(row, "max_storage_bytes");
    json_decref(row);
    return TY_OK;
}

ty_status store_tenant_update(store *st, const char *id, const char *name,
                              const store_tenant_limits *lim, unsigned set,
                              ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    ty_status s = exec(st, "BEGIN IMMEDIATE", err);
    if (s != TY_OK)
        goto done;
    json_t *row = NULL;
    s = q_one(st, &row, err, "tenant", id,
              "SELECT id FROM tenants WHERE id = ?", "s", id);
    json_decref(row);
    if (s == TY_OK && name)
        s = tenant_name_free(st, name, id, err);
    if (s == TY_OK)
        s = q(st, NULL, NULL, err,
              "UPDATE tenants SET name = coalesce(?, name), "
              "weight = CASE WHEN ? THEN ? ELSE weight END, "
              "max_gpu_slices = CASE WHEN ? THEN ? ELSE max_gpu_slices END, "
              "max_running_jobs = CASE WHEN ? THEN ? ELSE max_running_jobs END, "
              "max_storage_bytes = CASE WHEN ? THEN ? ELSE max_storage_bytes "
              "END WHERE id = ?",
              "sidiIiIiIs", name, (int64_t)!!(set & STORE_TENANT_SET_WEIGHT),
              lim->weight, (int64_t)!!(set & STORE_TENANT_SET_GPU_SLICES),
              lim->max_gpu_slices,
              (int64_t)!!(set & STORE_TENANT_SET_RUNNING_JOBS),
              lim->max_running_jobs,
              (int64_t)!!(set & STORE_TENANT_SET_STORAGE),
              lim->max_storage_bytes, id);
    if (s == TY_OK)
        s = exec(st, "COMMIT", err);
    if (s != TY_OK)
        rollback(st);
done:
    pthread_mutex_unlock(&st->mu);
    return s;
}

ty_status store_tenant_storage(store *st, const char *id, int64_t *bytes,
                               ty_err *err)
{
    return q_int(st, bytes, err,
                 "SELECT (SELECT coalesce(sum(bytes), 0) FROM datasets WHERE "
                 "tenant_id = ?1) + (SELECT coalesce(sum(bytes), 0) FROM "
                 "models WHERE tenant_id = ?1) AS n",
                 "s", id);
}

ty_status store_key_create(store *st, const char *tenant_id,
                           const char *key_id, const uint8_t hash[32],
                           json_t **doc, ty_err *err)
{
    char now[32];
    ty_now_iso(now);
    pthread_mutex_lock(&st->mu);
    json_t *row = NULL;
    ty_status s = q_one(st, &row, err, "tenant", tenant_id,
                        "SELECT EXISTS (SELECT 1 FROM api_keys WHERE "
                        "tenant_id = t.id AND is_admin = 1) AS admin "
                        "FROM tenants t WHERE t.id = ?",
                        "s", tenant_id);
    if (s == TY_OK)
        s = q(st, NULL, NULL, err,
              "INSERT INTO api_keys(id, tenant_id, hash, is_admin, created_at) "
              "VALUES (?, ?, ?, ?, ?)",
              "ssbis", key_id, tenant_id, hash,
              (int64_t)json_integer_value(json_object_get(row, "admin")), now);
    json_decref(row);
    if (s == TY_OK)
        s = q_one(st, doc, err, "key", key_id,
                  "SELECT " KEY_COLUMNS " FROM api_keys WHERE id = ?", "s",
                  key_id);
    pthread_mutex_unlock(&st->mu);
    return s;
}

ty_status store_key_list(store *st, const char *tenant_id, store_page page,
                         json_t **items, int64_t *next_cursor, ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    json_t *row = NULL, *rows = NULL;
    ty_status s = q_one(st, &row, err, "tenant", tenant_id,
                        "SELECT id FROM tenants WHERE id = ?", "s", tenant_id);
    json_decref(row);
    if (s == TY_OK)
        s = q(st, &rows, NULL, err,
              "SELECT rowid AS _seq, " KEY_COLUMNS " FROM api_keys "
              "WHERE tenant_id = ? AND (? = 0 OR rowid < ?) "
              "ORDER BY rowid DESC LIMIT ?",
              "siii", tenant_id, page.cursor, page.cursor,
              (int64_t)page.limit + 1);
    pthread_mutex_unlock(&st->mu);
    if (s != TY_OK)
        return s;
    *items = finish_page(rows, page.limit, next_cursor);
    return TY_OK;
}

ty_status store_key_revoke(store *st, const char *tenant_id,
                           const char *key_id, ty_err *err)
{
    char now[32];
    ty_now_iso(now);
    pthread_mutex_lock(&st->mu);
    json_t *row = NULL;
    ty_status s = exec(st, "BEGIN IMMEDIATE", err);
    if (s != TY_OK)
        goto done;
    s = q_one(st, &row, err, "key", key_id,
              "SELECT is_admin, revoked_at IS NULL AS live, (SELECT count(*) "
              "FROM api_keys WHERE is_admin = 1 AND revoked_at IS NULL) AS "
              "live_admins FROM api_keys WHERE id = ? AND tenant_id = ?",
              "ss", key_id, tenant_id);
    if (s == TY_OK &&
        json_integer_value(json_object_get(row, "is_admin")) &&
        json_integer_value(json_object_get(row, "live")) &&
        json_integer_value(json_object_get(row, "live_admins")) <= 1)
        s = ty_fail(err, TY_ECONFLICT, NULL,
                    "%s is the last admin key; create another admin key "
                    "(POST /v1/tenants/%s/keys) before revoking this one",
                    key_id, tenant_id);
    if (s == TY_OK)
        s = q(st, NULL, NULL, err,
              "UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?) "
              "WHERE id = ?",
              "ss", now, key_id);
    if (s == TY_OK)
        s = exec(st, "COMMIT", err);
    if (s != TY_OK)
        rollback(st);
done:
    json_decref(row);
    pthread_mutex_unlock(&st->mu);
    return s;
}

/* ---- metrics ---- */

ty_status store_job_counts(store *st, json_t **rows, ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    ty_status s = q(st, rows, NULL, err,
                    "SELECT tenant_id, status, count(*) AS n FROM jobs "
                    "GROUP BY tenant_id, status ORDER BY tenant_id, status",
                    "");
    pthread_mutex_unlock(&st->mu);
    return s;
}

/* ---- blob references ---- */

void store_blob_lock(store *st)
{
    pthread_mutex_lock(&st->blob_mu);
}

void store_blob_unlock(store *st)
{
    pthread_mutex_unlock(&st->blob_mu);
}

void store_blob_release(store *st, const char *sha256)
{
    int64_t refs = 1;
    ty_err err;
    pthread_mutex_lock(&st->blob_mu);
    if (store_blob_refs(st, sha256, &refs, &err) == TY_OK && refs == 0)
        blob_remove(st->data_dir, sha256, &err);
    pthread_mutex_unlock(&st->blob_mu);
}

int store_blob_gc(store *st)
{
    char root[PATH_MAX];
    snprintf(root, sizeof root, "%s/blobs", st->data_dir);
    DIR *d = opendir(root);
    if (!d)
        return 0;
    struct dirent *e;
    int removed = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char sub[PATH_MAX];
        snprintf(sub, sizeof sub, "%s/%s", root, e->d_name);
        DIR *sd = opendir(sub);
        if (!sd)
            continue;
        struct dirent *f;
        while ((f = readdir(sd)) != NULL) {
            if (f->d_name[0] == '.')
                continue;
            int64_t refs = 1;
            ty_err err;
            if (strlen(f->d_name) == 64 &&
                store_blob_refs(st, f->d_name, &refs, &err) == TY_OK &&
                refs == 0 && blob_remove(st->data_dir, f->d_name, &err) == TY_OK)
                removed++;
        }
        closedir(sd);
    }
    closedir(d);
    return removed;
}
