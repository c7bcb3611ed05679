/*
 * assets.c - datasets and models (see store.h): rows that name a blob by its
 * SHA-256 and hold the API representation ("doc") the upload made.
 *
 * Both kinds have the same columns (seq, id, tenant_id, sha256, bytes, doc,
 * created_at; models add job_id, NULL for an import) and are inserted, read,
 * listed and deleted alike, so one code path serves both, keyed by an
 * asset_kind that names the table. The public store_dataset_* and
 * store_model_* functions are thin wrappers: their callers pass them as
 * typed function pointers (api.h's api_list_fn, api_get_fn, api_insert_fn)
 * and the kind stays a detail of this file. (A model made by a job is
 * inserted by store_job_succeed, in the job's transaction.)
 */
#include "store/store_internal.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/jsonutil.h"

typedef enum { ASSET_DATASET, ASSET_MODEL, ASSET_KIND_COUNT } asset_kind_id;

/* What differs between the kinds: the table, so the statements, and what
 * may hold a row. */
typedef struct {
    const char *noun; /* in messages: "dataset ds_x not found" */
    const char *insert, *get, *list, *remove;
    /* A query naming one job (column "id") that still needs the row (?1 the
     * row's id, ?2 its tenant), so the row may not go yet; NULL when
     * nothing holds rows of this kind. */
    const char *in_use;
} asset_kind;

/* The statements every kind runs, spelled at compile time for its table. */
#define ASSET_STATEMENTS(table)                                               \
    .insert = "INSERT INTO " table "(id, tenant_id, sha256, bytes, doc, "     \
              "created_at) VALUES (?, ?, ?, ?, ?, ?)",                        \
    .get = "SELECT doc AS doc_json, sha256 FROM " table " WHERE id = ? AND "  \
           "tenant_id = ?",                                                   \
    .list = "SELECT seq AS _seq, doc AS _doc_json FROM " table " WHERE "      \
            "tenant_id = ? AND (? = 0 OR seq < ?) ORDER BY seq DESC LIMIT ?", \
    .remove = "DELETE FROM " table " WHERE id = ? AND tenant_id = ?"

static const asset_kind asset_kinds[] = {
    [ASSET_DATASET] =
        {
            .noun = "dataset",
            ASSET_STATEMENTS("datasets"),
            /* a queued or running job trains on it or validates on it */
            .in_use = "SELECT id FROM jobs WHERE tenant_id = ?2 AND "
                      "status IN ('queued', 'scheduled', 'running') AND "
                      "(dataset_id = ?1 OR "
                      "json_extract(validation, '$.dataset') = ?1) LIMIT 1",
        },
    [ASSET_MODEL] =
        {
            .noun = "model",
            ASSET_STATEMENTS("models"),
            .in_use = NULL,
        },
};
static_assert(TY_ARRAY_LEN(asset_kinds) == ASSET_KIND_COUNT,
              "every asset kind needs its table");

/* Inserts a row of the kind; doc is its API representation (borrowed),
 * whose created_at the row keeps. TY_ENOMEM if doc cannot be serialized. */
static ty_status asset_insert(store *st, asset_kind_id kind,
                              const char *tenant_id, const char *id,
                              const char *sha256, int64_t bytes,
                              const json_t *doc, ty_err *err)
{
    char *text = tyjson_dumps(doc, JSON_COMPACT);
    if (!text)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    pthread_mutex_lock(&st->mu);
    ty_status s = db_q(st, NULL, NULL, err, asset_kinds[kind].insert, "sssiss",
                       id, tenant_id, sha256, bytes, text,
                       json_string_value(json_object_get(doc, "created_at")));
    pthread_mutex_unlock(&st->mu);
    free(text);
    return s;
}

/* The tenant's row: TY_ENOTFOUND ("<noun> <id> not found") if it is not
 * this tenant's. Caller holds st->mu. */
static ty_status asset_row(store *st, asset_kind_id kind, const char *tenant_id,
                           const char *id, json_t **row, ty_err *err)
{
    return db_q_one(st, row, err, asset_kinds[kind].noun, id,
                    asset_kinds[kind].get, "ss", id, tenant_id);
}

/* The row's doc (new reference) and, when sha256 is not NULL, its blob
 * hash. TY_ENOTFOUND if it is not this tenant's. */
static ty_status asset_get(store *st, asset_kind_id kind, const char *tenant_id,
                           const char *id, json_t **doc, char sha256[65],
                           ty_err *err)
{
    json_t *row = NULL;
    pthread_mutex_lock(&st->mu);
    ty_status s = asset_row(st, kind, tenant_id, id, &row, err);
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

/* A page of the tenant's rows of the kind, newest first: their docs. */
static ty_status asset_list(store *st, asset_kind_id kind,
                            const char *tenant_id, store_page page,
                            json_t **items, int64_t *next_cursor, ty_err *err)
{
    json_t *rows;
    pthread_mutex_lock(&st->mu);
    ty_status s =
        db_q(st, &rows, NULL, err, asset_kinds[kind].list, "siii", tenant_id,
             page.cursor, page.cursor, (int64_t)page.limit + 1);
    pthread_mutex_unlock(&st->mu);
    if (s != TY_OK)
        return s;
    *items = db_finish_page(rows, page.limit, next_cursor);
    return TY_OK;
}

/* TY_ECONFLICT naming the job when the kind's in_use query finds one that
 * still needs row id. Caller holds st->mu. */
static ty_status asset_check_unused(store *st, asset_kind_id kind,
                                    const char *tenant_id, const char *id,
                                    ty_err *err)
{
    const asset_kind *k = &asset_kinds[kind];
    if (!k->in_use)
        return TY_OK;
    json_t *rows = NULL;
    ty_status s = db_q(st, &rows, NULL, err, k->in_use, "ss", id, tenant_id);
    if (s == TY_OK && json_array_size(rows) > 0)
        s = ty_fail(
            err, TY_ECONFLICT, NULL,
            "%s %s is in use by job %s; cancel the job or wait "
            "for it to finish before deleting the %s",
            k->noun, id,
            json_string_value(json_object_get(json_array_get(rows, 0), "id")),
            k->noun);
    json_decref(rows);
    return s;
}

/* Deletes the tenant's row and writes its blob hash into sha256 (the caller
 * releases the blob). TY_ENOTFOUND if it is not this tenant's; TY_ECONFLICT
 * while a job needs it (asset_check_unused). On failure nothing changes. */
static ty_status asset_delete(store *st, asset_kind_id kind,
                              const char *tenant_id, const char *id,
                              char sha256[65], ty_err *err)
{
    json_t *row = NULL;
    pthread_mutex_lock(&st->mu);
    ty_status s = asset_check_unused(st, kind, tenant_id, id, err);
    if (s == TY_OK)
        s = asset_row(st, kind, tenant_id, id, &row, err);
    if (s == TY_OK) {
        snprintf(sha256, 65, "%s",
                 json_string_value(json_object_get(row, "sha256")));
        s = db_q(st, NULL, NULL, err, asset_kinds[kind].remove, "ss", id,
                 tenant_id);
    }
    json_decref(row);
    pthread_mutex_unlock(&st->mu);
    return s;
}

/* ---- the public names, one per kind and operation ---- */

ty_status store_dataset_insert(store *st, const char *tenant_id, const char *id,
                               const char *sha256, int64_t bytes,
                               const json_t *doc, ty_err *err)
{
    return asset_insert(st, ASSET_DATASET, tenant_id, id, sha256, bytes, doc,
                        err);
}

ty_status store_model_insert(store *st, const char *tenant_id, const char *id,
                             const char *sha256, int64_t bytes,
                             const json_t *doc, ty_err *err)
{
    ty_status s =
        asset_insert(st, ASSET_MODEL, tenant_id, id, sha256, bytes, doc, err);
    if (s == TY_OK)
        store_gen_bump(st, STORE_GEN_MODELS);
    return s;
}

ty_status store_dataset_get(store *st, const char *tenant_id, const char *id,
                            json_t **doc, char sha256[65], ty_err *err)
{
    return asset_get(st, ASSET_DATASET, tenant_id, id, doc, sha256, err);
}

ty_status store_model_get(store *st, const char *tenant_id, const char *id,
                          json_t **doc, char sha256[65], ty_err *err)
{
    return asset_get(st, ASSET_MODEL, tenant_id, id, doc, sha256, err);
}

ty_status store_model_find(store *st, const char *tenant_id, const char *ref,
                           char *id, json_t **doc, char sha256[65], ty_err *err)
{
    json_t *row = NULL;
    char found[TY_ID_MAX];
    /* One lock: the row read is the row the reference resolved to. */
    pthread_mutex_lock(&st->mu);
    ty_status s =
        db_ref_resolve(st, STORE_REF_MODEL, tenant_id, ref, found, err);
    if (s == TY_OK)
        s = asset_row(st, ASSET_MODEL, tenant_id, found, &row, err);
    pthread_mutex_unlock(&st->mu);
    if (s != TY_OK)
        return s;
    snprintf(id, TY_ID_MAX, "%s", found);
    snprintf(sha256, 65, "%s",
             json_string_value(json_object_get(row, "sha256")));
    *doc = json_incref(json_object_get(row, "doc"));
    json_decref(row);
    return TY_OK;
}

ty_status store_dataset_list(store *st, const char *tenant_id, store_page page,
                             json_t **items, int64_t *next_cursor, ty_err *err)
{
    return asset_list(st, ASSET_DATASET, tenant_id, page, items, next_cursor,
                      err);
}

ty_status store_model_list(store *st, const char *tenant_id, store_page page,
                           json_t **items, int64_t *next_cursor, ty_err *err)
{
    return asset_list(st, ASSET_MODEL, tenant_id, page, items, next_cursor,
                      err);
}

ty_status store_dataset_delete(store *st, const char *tenant_id, const char *id,
                               char sha256[65], ty_err *err)
{
    return asset_delete(st, ASSET_DATASET, tenant_id, id, sha256, err);
}

ty_status store_model_delete(store *st, const char *tenant_id, const char *id,
                             char sha256[65], ty_err *err)
{
    ty_status s = asset_delete(st, ASSET_MODEL, tenant_id, id, sha256, err);
    if (s == TY_OK)
        store_gen_bump(st, STORE_GEN_MODELS);
    return s;
}
