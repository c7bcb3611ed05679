/*
 * store_internal.h - what the store's files share, and nothing outside
 * store/ includes: the connection (struct store) and the query helpers of
 * db.c.
 *
 * Every public store function takes st->mu for its whole duration (the
 * helpers below expect the caller to hold it, except db_q_int), so a
 * multi-statement transaction is never interleaved with another thread's.
 */
#ifndef TY_STORE_INTERNAL_H
#define TY_STORE_INTERNAL_H

#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdint.h>

#include "common/ty.h"
#include "store/store.h"

struct store {
    sqlite3 *db;
    pthread_mutex_t mu;
    /* Held from a blob's import until its row commits, and from a row's
     * delete until its blob is released, so identical content uploaded while
     * another copy is deleted never loses its file. */
    pthread_mutex_t blob_mu;
    char data_dir[PATH_MAX];
    /* store_gen: bumped after each committed change (atomics; read
     * without mu). */
    uint64_t gen[STORE_GEN_COUNT];
};

/* Marks a committed change to the rows of a kind (store_gen_get). */
void store_gen_bump(store *st, store_gen which);

/* TY_EIO with SQLite's message for the connection, naming what failed. */
ty_status db_fail(store *st, ty_err *err, const char *what);

/* Runs one statement, arguments bound per fmt ('s' text or NULL, 'i' int64,
 * 'I' int64 or NULL when negative, 'd' double, 'D' double or NULL when not
 * > 0, 'b' 32-byte blob). rows (may be NULL) gets a new array of row objects, changes (may be NULL) the number
 * of rows changed. Caller holds st->mu. */
ty_status db_q(store *st, json_t **rows, int *changes, ty_err *err,
               const char *sql, const char *fmt, ...);

/* The first row of a query (new reference), or TY_ENOTFOUND with "<what>
 * <id> not found". Caller holds st->mu. */
ty_status db_q_one(store *st, json_t **row, ty_err *err, const char *what,
                   const char *id, const char *sql, const char *fmt, ...);

/* A query whose one row has one integer column named "n"; takes st->mu
 * itself. */
ty_status db_q_int(store *st, int64_t *out, ty_err *err, const char *sql,
                   const char *fmt, ...);

/* store_ref_resolve's lookup (refs.c). Caller holds st->mu. */
ty_status db_ref_resolve(store *st, store_ref_kind kind, const char *tenant_id,
                         const char *ref, char id[TY_ID_MAX], ty_err *err);

/* Runs SQL text without arguments (BEGIN, COMMIT, migrations). */
ty_status db_exec(store *st, const char *sql, ty_err *err);

/* Rolls back the open transaction; failure leaves nothing to do. */
void db_rollback(store *st);

/* Turns rows fetched with LIMIT page+1 into a page's items (takes rows). */
json_t *db_finish_page(json_t *rows, int limit, int64_t *next_cursor);

#endif
