/*
 * db.c - the store's connection (see store.h, store_internal.h): open,
 * migrate, close, and the query helpers every table's file uses.
 *
 * Queries go through db_q(): it binds arguments described by a small format
 * string ('s' text or NULL, 'i' int64, 'I' int64 or NULL when negative, 'd'
 * double, 'D' double or NULL when not > 0, 'b' 32-byte blob) and turns result
 * rows into JSON objects keyed by column name. A column whose name ends in
 * "_json" holds JSON text and is parsed (the suffix dropped); columns whose
 * name starts with "_" are bookkeeping (the list cursor) and are removed from
 * what callers see. Every public function takes the connection's mutex for
 * its whole duration, so multi-statement transactions are never interleaved.
 */
#include "store/store_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"

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
    /* 6: serving deployments (store/deployments.c): the spec as JSON text
     * (deploy/deployspec.h's rendering, the model resolved to its id) and the
     * generation the controller bumps on every model change; a name is
     * unique per tenant */
    "CREATE TABLE deployments ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  id TEXT NOT NULL UNIQUE,"
    "  tenant_id TEXT NOT NULL REFERENCES tenants(id),"
    "  name TEXT NOT NULL,"
    "  spec TEXT NOT NULL,"
    "  generation INTEGER NOT NULL,"
    "  created_at TEXT NOT NULL,"
    "  updated_at TEXT NOT NULL,"
    "  UNIQUE (tenant_id, name));",
    /* 7: each tenant's serving limits over all its deployments together
     * (NULL = unlimited; a NULL burst with a rate is the rate rounded up) */
    "ALTER TABLE tenants ADD COLUMN serving_rps REAL;"
    "ALTER TABLE tenants ADD COLUMN serving_burst INTEGER;"
    "ALTER TABLE tenants ADD COLUMN serving_max_concurrency INTEGER;",
    /* 8: a job's per-step training curve (store/curves.c): the progress
     * lines the server records (at most one a second), keyed by the run's
     * optimizer step; x is the fractional epoch it was reached at */
    "CREATE TABLE job_steps ("
    "  job_id TEXT NOT NULL,"
    "  step INTEGER NOT NULL,"
    "  epoch INTEGER NOT NULL,"
    "  x REAL NOT NULL,"
    "  loss REAL,"
    "  lr REAL,"
    "  PRIMARY KEY (job_id, step));",
    /* 9: each tenant's generation tokens a minute over all its deployments
     * (prompt and max_tokens reserved at admission; NULL = unlimited) */
    "ALTER TABLE tenants ADD COLUMN serving_tokens_per_minute INTEGER;",
    /* 10: the demand the scheduler saw (store/demand.c), for the MIG
     * layout advisor: one row per request (job or replica), its arrival,
     * what it asked for, when it first started, the seconds it held a slot
     * and when it ended; refused = 1 for a request no slot could satisfy
     * (answered 422) */
    "CREATE TABLE demand ("
    "  id TEXT PRIMARY KEY,"
    "  tenant_id TEXT NOT NULL,"
    "  arrival REAL NOT NULL,"
    "  req_kind INTEGER NOT NULL,"
    "  profile TEXT,"
    "  min_memory_bytes INTEGER NOT NULL DEFAULT 0,"
    "  min_compute_slices INTEGER NOT NULL DEFAULT 0,"
    "  serving INTEGER NOT NULL DEFAULT 0,"
    "  gang INTEGER NOT NULL DEFAULT 0,"
    "  refused INTEGER NOT NULL DEFAULT 0,"
    "  first_start REAL,"
    "  last_start REAL,"
    "  held_s REAL NOT NULL DEFAULT 0,"
    "  ended REAL);"
    "CREATE INDEX demand_by_arrival ON demand(arrival);",
    /* 11: usage accounting (store/usage.c): every interval a job or a
     * serving replica held a device slice or a CPU place (end_s NULL while
     * open; unix seconds), and the last time the server proved itself
     * alive, at which recovery closes what a crash left open. The
     * (end_s, start_s, ...) index covers the window query's columns (a
     * tenant's too: its rows of a window are found there faster than by
     * a (tenant_id, start_s) index's range over all its history). */
    "CREATE TABLE usage_intervals ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  tenant_id TEXT NOT NULL,"
    "  kind TEXT NOT NULL,"
    "  owner TEXT NOT NULL,"
    "  replica TEXT,"
    "  device INTEGER,"
    "  profile TEXT,"
    "  compute_slices INTEGER NOT NULL,"
    "  gpu_slices INTEGER NOT NULL,"
    "  memory_bytes INTEGER NOT NULL,"
    "  cpu INTEGER NOT NULL,"
    "  start_s REAL NOT NULL,"
    "  end_s REAL);"
    "CREATE INDEX usage_end_start ON usage_intervals(end_s, start_s,"
    "  tenant_id, kind, profile, compute_slices, gpu_slices, cpu);"
    "CREATE TABLE usage_alive ("
    "  id INTEGER PRIMARY KEY CHECK (id = 1),"
    "  at_s REAL NOT NULL);",
};

/* ---- helpers ---- */

ty_status db_fail(store *st, ty_err *err, const char *what)
{
    /* SQLite says SQLITE_FULL when a write found the disk full. */
    int rc = sqlite3_errcode(st->db);
    ty_status code = rc == SQLITE_FULL    ? TY_ENOSPC
                     : rc == SQLITE_NOMEM ? TY_ENOMEM
                                          : TY_EIO;
    return ty_fail(err, code, NULL, "database error (%s): %s", what,
                   sqlite3_errmsg(st->db));
}

static json_t *column_json(sqlite3_stmt *s, int i)
{
    const char *name = sqlite3_column_name(s, i);
    size_t nlen = strlen(name);
    int is_json = nlen > 5 && strcmp(name + nlen - 5, "_json") == 0;
    switch (sqlite3_column_type(s, i)) {
        case SQLITE_INTEGER: return json_integer(sqlite3_column_int64(s, i));
        case SQLITE_FLOAT: return json_real(sqlite3_column_double(s, i));
        case SQLITE_NULL: return json_null();
        default: {
            const char *text = (const char *)sqlite3_column_text(s, i);
            if (!text)
                return json_null();
            if (is_json) {
                json_error_t je;
                json_t *v = json_loads(text, JSON_DECODE_ANY, &je);
                /* NULL (the caller's out of memory) rather than a null that
                 * would stand for the stored value */
                if (!v && json_error_code(&je) == json_error_out_of_memory)
                    return NULL;
                return v ? v : json_null();
            }
            return json_string(text);
        }
    }
}

/* The current row as an object keyed by column name ("_json" dropped);
 * NULL when an allocation failed (never a row with a column missing). */
static json_t *row_json(sqlite3_stmt *s)
{
    json_t *row = json_object();
    int n = sqlite3_column_count(s);
    for (int i = 0; row && i < n; i++) {
        const char *name = sqlite3_column_name(s, i);
        size_t nlen = strlen(name);
        char key[64];
        if (nlen > 5 && strcmp(name + nlen - 5, "_json") == 0)
            nlen -= 5;
        if (nlen >= sizeof key)
            nlen = sizeof key - 1;
        memcpy(key, name, nlen);
        key[nlen] = '\0';
        json_t *v = column_json(s, i);
        if (!v || json_object_set_new(row, key, v) != 0) {
            json_decref(row);
            row = NULL;
        }
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
            case 'D': { /* double; not > 0 (NaN too) binds NULL (unset) */
                double v = va_arg(ap, double);
                rc = v > 0 ? sqlite3_bind_double(s, idx, v)
                           : sqlite3_bind_null(s, idx);
                break;
            }
            case 'I': { /* int64; negative binds NULL (an unset limit) */
                int64_t v = va_arg(ap, int64_t);
                rc = v < 0 ? sqlite3_bind_null(s, idx)
                           : sqlite3_bind_int64(s, idx, v);
                break;
            }
            default: return SQLITE_MISUSE;
        }
    }
    return rc;
}

/* Runs one statement with arguments per fmt. If rows is not NULL it gets a
 * new array of row objects; with first_only, only the first row is read. If
 * changes is not NULL it gets the number of rows changed. Caller holds
 * st->mu. */
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
    int oom = rows && !out;
    while (!oom && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        /* A row lost to a failed allocation would read as absent: a count
         * of 0, a missing resource. Fail the query instead. */
        json_t *row = out ? row_json(s) : NULL;
        if (out && (!row || json_array_append_new(out, row) != 0)) {
            oom = 1;
            break;
        }
        if (first_only) {
            rc = SQLITE_DONE;
            break;
        }
    }
    if (oom) {
        json_decref(out);
        sqlite3_finalize(s);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
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

ty_status db_q(store *st, json_t **rows, int *changes, ty_err *err,
               const char *sql, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ty_status s = vq(st, rows, changes, 0, err, sql, fmt, ap);
    va_end(ap);
    return s;
}

/* The first row of a query, or TY_ENOTFOUND with "<what> <id> not found". */
ty_status db_q_one(store *st, json_t **row, ty_err *err, const char *what,
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
ty_status db_q_int(store *st, int64_t *out, ty_err *err, const char *sql,
                   const char *fmt, ...)
{
    json_t *rows = NULL;
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&st->mu);
    ty_status s = vq(st, &rows, NULL, 1, err, sql, fmt, ap);
    pthread_mutex_unlock(&st->mu);
    va_end(ap);
    json_t *n = json_object_get(json_array_get(rows, 0), "n");
    if (s == TY_OK && !json_is_integer(n))
        s = ty_fail(err, TY_EINTERNAL, NULL, "the count query gave no row");
    if (s == TY_OK)
        *out = json_integer_value(n);
    json_decref(rows);
    return s;
}

ty_status db_exec(store *st, const char *sql, ty_err *err)
{
    char *msg = NULL;
    int rc = sqlite3_exec(st->db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        ty_status s =
            ty_fail(err, (rc & 0xff) == SQLITE_FULL ? TY_ENOSPC : TY_EIO, NULL,
                    "database error: %s", msg ? msg : sqlite3_errmsg(st->db));
        sqlite3_free(msg);
        return s;
    }
    return TY_OK;
}

void db_rollback(store *st)
{
    sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
}

/* Turns rows fetched with LIMIT page+1 into a page: each row (or its "_doc"
 * for document tables) without "_seq", and the cursor of the next page (the
 * last shown row's sequence number) when the extra row exists. */
json_t *db_finish_page(json_t *rows, int limit, int64_t *next_cursor)
{
    *next_cursor = 0;
    json_t *items = json_array();
    size_t i;
    json_t *row;
    json_array_foreach (rows, i, row) {
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

/* The database and its side files hold key hashes, tenants and jobs: they
 * are 0600. SQLite makes -wal, -shm and -journal with the database file's
 * mode, so the database file is made (0600) before SQLite opens it; files
 * an older trainyard or another tool left open to group or others are
 * made 0600, with a warning. TY_EIO when one cannot be made so. */
static ty_status db_files_private(const char *db_path, ty_err *err)
{
    static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < TY_ARRAY_LEN(suffixes); i++) {
        char path[PATH_MAX + 16];
        snprintf(path, sizeof path, "%s%s", db_path, suffixes[i]);
        int fd = i == 0 ? open(path, O_RDONLY | O_CREAT | O_CLOEXEC, 0600)
                        : open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            if (i > 0 && errno == ENOENT)
                continue;
            return ty_fail(err, ty_errno_status(errno), NULL,
                           "cannot open database %s: %s", path,
                           strerror(errno));
        }
        struct stat st;
        ty_status s = TY_OK;
        unsigned mode = 0;
        if (fstat(fd, &st) == 0 &&
            ((mode = (unsigned)st.st_mode & 07777) & 077)) {
            if (fchmod(fd, 0600) == 0)
                log_msg("warn",
                        "%s was mode 0%o, open to group or others; made it "
                        "0600",
                        path, mode);
            else
                s = ty_fail(err, TY_EIO, NULL,
                            "%s is mode 0%o, open to group or others, and "
                            "cannot be made 0600: %s",
                            path, mode, strerror(errno));
        }
        close(fd);
        if (s != TY_OK)
            return s;
    }
    return TY_OK;
}

ty_status store_open(const char *data_dir, store **out, ty_err *err)
{
    *out = NULL;
    store *st = calloc(1, sizeof *st);
    if (!st)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    pthread_mutex_init(&st->blob_mu, NULL);
    snprintf(st->data_dir, sizeof st->data_dir, "%s", data_dir);
    pthread_mutex_init(&st->mu, NULL);
    /* Counters start apart for every store this process opens, so a cache
     * never mistakes a new store (at a freed one's address) for the old. */
    static uint64_t opened;
    uint64_t base = __atomic_add_fetch(&opened, 1, __ATOMIC_RELAXED) << 40;
    for (int i = 0; i < STORE_GEN_COUNT; i++)
        st->gen[i] = base;
    char path[4096];
    snprintf(path, sizeof path, "%s/trainyard.db", data_dir);
    ty_status s = db_files_private(path, err);
    if (s != TY_OK)
        goto fail;
    if (sqlite3_open_v2(path, &st->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                            SQLITE_OPEN_FULLMUTEX,
                        NULL) != SQLITE_OK) {
        s = ty_fail(err, TY_EIO, NULL, "cannot open database %s: %s", path,
                    st->db ? sqlite3_errmsg(st->db) : "out of memory");
        goto fail;
    }
    sqlite3_busy_timeout(st->db, 5000);
    if ((s = db_exec(st,
                     "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
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
        if ((s = db_exec(st, "BEGIN IMMEDIATE", err)) != TY_OK)
            goto fail;
        if ((s = db_exec(st, migrations[v], err)) != TY_OK ||
            (s = db_exec(st, bump, err)) != TY_OK ||
            (s = db_exec(st, "COMMIT", err)) != TY_OK) {
            db_rollback(st);
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

void store_gen_bump(store *st, store_gen which)
{
    __atomic_add_fetch(&st->gen[which], 1, __ATOMIC_RELEASE);
}

uint64_t store_gen_get(store *st, store_gen which)
{
    return __atomic_load_n(&st->gen[which], __ATOMIC_ACQUIRE);
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
    ty_status s = db_q(st, &rows, NULL, err, "SELECT 1 AS ok", "");
    json_decref(rows);
    pthread_mutex_unlock(&st->mu);
    return s;
}
