/*
 * assets.c - datasets and models (see store.h): rows that name a blob by its
 * SHA-256 and hold the API representation ("doc") the upload made.
 */
#include "store/store_internal.h"

#include <stdio.h>
#include <stdlib.h>
/* ---- datasets ---- */

ty_status store_dataset_insert(store *st, const char *tenant_id,
                               const char *id, const char *sha256,
                               int64_t bytes, const json_t *doc, ty_err *err)
{
    char *text = json_dumps(doc, JSON_COMPACT);
    if (!text)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    pthread_mutex_lock(&st->mu);
    ty_status s =
        db_q(st, NULL, NULL, err,
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
    ty_status s = db_q_one(st, &row, err, what, id, sql, "ss", id, tenant_id);
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
    ty_status s = db_q(st, &rows, NULL, err, sql, "siii", tenant_id,
                       page.cursor, page.cursor, (int64_t)page.limit + 1);
    pthread_mutex_unlock(&st->mu);
    if (s != TY_OK)
        return s;
    *items = db_finish_page(rows, page.limit, next_cursor);
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
    ty_status s = db_q_one(st, &row, err, what, id, sql, "ss", id, tenant_id);
    if (s != TY_OK)
        return s;
    snprintf(sha256, 65, "%s",
             json_string_value(json_object_get(row, "sha256")));
    json_decref(row);
    snprintf(sql, sizeof sql, "DELETE FROM %s WHERE id = ? AND tenant_id = ?",
             table);
    return db_q(st, NULL, NULL, err, sql, "ss", id, tenant_id);
}

ty_status store_dataset_delete(store *st, const char *tenant_id,
                               const char *id, char sha256[65], ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    json_t *rows = NULL;
    ty_status s =
        db_q(st, &rows, NULL, err,
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
    ty_status s =
        db_q(st, NULL, NULL, err,
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
