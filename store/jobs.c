/*
 * jobs.c - job rows and their per-epoch metrics (see store.h): a job's life
 * queued -> running -> succeeded | failed | cancelled, with requeues after a
 * preemption or a crash, and the counts GET /metrics shows.
 *
 * A state change names the state it expects in its WHERE clause, so a
 * change that lost a race (a job cancelled meanwhile) changes nothing and
 * says so (TY_ECONFLICT or *changed = 0).
 */
#include "store/store_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonutil.h"

#define JOB_COLUMNS                                                            \
    "id, name, status, dataset_id AS dataset, validation AS validation_json, " \
    "spec AS spec_json, hyperparameters AS hyperparameters_json, "             \
    "progress AS progress_json, metrics AS metrics_json, model_id AS model, "  \
    "error, attempts, created_at, started_at, finished_at, "                   \
    "estimated_memory_bytes, device, "                                         \
    "coalesce(resources, '{\"gpu\":\"none\"}') AS resources_json, priority, "  \
    "placement AS placement_json, preemptions"

ty_status store_job_insert(store *st, const char *tenant_id, const char *id,
                           const char *name, const char *dataset_id,
                           const json_t *validation, const json_t *spec,
                           const json_t *hyperparameters,
                           int64_t estimated_memory_bytes, ty_err *err)
{
    return store_job_insert_req(st, tenant_id, id, name, dataset_id, validation,
                                spec, hyperparameters, estimated_memory_bytes,
                                NULL, 0, err);
}

ty_status store_job_insert_req(store *st, const char *tenant_id, const char *id,
                               const char *name, const char *dataset_id,
                               const json_t *validation, const json_t *spec,
                               const json_t *hyperparameters,
                               int64_t estimated_memory_bytes,
                               const json_t *resources, int64_t priority,
                               ty_err *err)
{
    char now[32];
    ty_now_iso(now);
    char *v = tyjson_dumps(validation, JSON_COMPACT);
    char *sp = tyjson_dumps(spec, JSON_COMPACT);
    char *hp = tyjson_dumps(hyperparameters, JSON_COMPACT);
    char *res = resources ? tyjson_dumps(resources, JSON_COMPACT) : NULL;
    ty_status s;
    if (!v || !sp || !hp || (resources && !res)) {
        s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    } else {
        pthread_mutex_lock(&st->mu);
        s = db_q(
            st, NULL, NULL, err,
            "INSERT INTO jobs(id, tenant_id, name, dataset_id, validation, "
            "spec, hyperparameters, status, progress, metrics, created_at, "
            "estimated_memory_bytes, resources, priority) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, 'queued', "
            /* Queued, the progress already names the planned epochs (none
             * when the hyperparameters have none: json_patch drops a
             * null). */
            "json_patch('{\"epoch\":0,\"step\":0,\"fraction\":0}', "
            "json_object('epochs', json_extract(?, '$.epochs'))), "
            "'{}', ?, ?, ?, ?)",
            "sssssssssisi", id, tenant_id, name, dataset_id, v, sp, hp, hp, now,
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
    ty_status s = db_q_one(st, doc, err, "job", id,
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
    ty_status s = db_q_one(st, doc, err, "job", id,
                           "SELECT " JOB_COLUMNS ", tenant_id FROM jobs "
                           "WHERE id = ?",
                           "s", id);
    pthread_mutex_unlock(&st->mu);
    return s;
}

ty_status store_job_list(store *st, const char *tenant_id, const char *status,
                         store_page page, json_t **items, int64_t *next_cursor,
                         ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    json_t *rows;
    ty_status s = db_q(st, &rows, NULL, err,
                       "SELECT seq AS _seq, " JOB_COLUMNS
                       " FROM jobs WHERE tenant_id = ? AND (? IS NULL OR "
                       "status = ?) AND (? = 0 OR seq < ?) ORDER BY seq DESC "
                       "LIMIT ?",
                       "sssiii", tenant_id, status, status, page.cursor,
                       page.cursor, (int64_t)page.limit + 1);
    pthread_mutex_unlock(&st->mu);
    if (s != TY_OK)
        return s;
    *items = db_finish_page(rows, page.limit, next_cursor);
    return TY_OK;
}

ty_status store_job_epochs(store *st, const char *tenant_id, const char *id,
                           json_t **items, ty_err *err)
{
    int64_t total;
    return store_job_epochs_page(st, tenant_id, id, 0, -1, 0, items, &total,
                                 err);
}

ty_status store_job_next_queued(store *st, char id[TY_ID_MAX], ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    json_t *row = NULL;
    ty_status s = db_q_one(st, &row, err, "queued job", "",
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

/* Takes a queued job to `status` (running, or scheduled: handed to a
 * cluster that has not started it yet). */
static ty_status job_start_as(store *st, const char *id, const char *status,
                              const char *device, const json_t *placement,
                              ty_err *err)
{
    char now[32];
    ty_now_iso(now);
    char *pl = placement ? tyjson_dumps(placement, JSON_COMPACT) : NULL;
    if (placement && !pl)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    int changed = 0;
    pthread_mutex_lock(&st->mu);
    ty_status s = db_q(st, NULL, &changed, err,
                       "UPDATE jobs SET status = ?, "
                       "attempts = attempts + (1 - resume_preempted), "
                       "resume_preempted = 0, "
                       "started_at = coalesce(started_at, ?), device = ?, "
                       "placement = coalesce(?, placement) "
                       "WHERE id = ? AND status = 'queued'",
                       "sssss", status, now, device, pl, id);
    pthread_mutex_unlock(&st->mu);
    free(pl);
    if (s == TY_OK && changed == 0)
        return ty_fail(err, TY_ECONFLICT, NULL, "job %s is not queued", id);
    return s;
}

ty_status store_job_start_on(store *st, const char *id, const char *device,
                             const json_t *placement, ty_err *err)
{
    return job_start_as(st, id, JOB_RUNNING, device, placement, err);
}

ty_status store_job_schedule_on(store *st, const char *id, const char *device,
                                const json_t *placement, ty_err *err)
{
    return job_start_as(st, id, JOB_SCHEDULED, device, placement, err);
}

ty_status store_job_mark_running(store *st, const char *id, int *changed,
                                 ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    ty_status s = db_q(st, NULL, changed, err,
                       "UPDATE jobs SET status = 'running' "
                       "WHERE id = ? AND status = 'scheduled'",
                       "s", id);
    pthread_mutex_unlock(&st->mu);
    return s;
}

ty_status store_job_progress(store *st, const char *id, const json_t *progress,
                             const json_t *metrics, ty_err *err)
{
    char *p = progress ? tyjson_dumps(progress, JSON_COMPACT) : NULL;
    char *m = metrics ? tyjson_dumps(metrics, JSON_COMPACT) : NULL;
    pthread_mutex_lock(&st->mu);
    ty_status s = db_q(st, NULL, NULL, err,
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

/* The metric an epoch is ranked by for the job's "best": the first of
 * these the record has a number for. */
static const struct {
    const char *key;
    int higher; /* 1: higher is better */
} BEST_KEYS[] = {{"val_accuracy", 1},
                 {"val_loss", 0},
                 {"train_accuracy", 1},
                 {"train_loss", 0}};

/* The job's best {metric, epoch, value} after this epoch's record (new
 * reference), or NULL when the previous best (in latest, the job's
 * metrics; may be NULL) stays. */
static json_t *better_best(const json_t *latest, int64_t epoch,
                           const json_t *record)
{
    for (size_t i = 0; i < TY_ARRAY_LEN(BEST_KEYS); i++) {
        json_t *v = json_object_get(record, BEST_KEYS[i].key);
        if (!json_is_number(v))
            continue;
        double x = json_number_value(v);
        const json_t *old = json_object_get(latest, "best");
        const char *old_key = json_string_value(json_object_get(old, "metric"));
        json_t *ov = json_object_get(old, "value");
        int replace =
            !old_key || strcmp(old_key, BEST_KEYS[i].key) ||
            !json_is_number(ov) ||
            json_integer_value(json_object_get(old, "epoch")) == epoch ||
            (BEST_KEYS[i].higher ? x > json_number_value(ov)
                                 : x < json_number_value(ov));
        return replace
                   ? json_pack("{s:s, s:I, s:f}", "metric", BEST_KEYS[i].key,
                               "epoch", (json_int_t)epoch, "value", x)
                   : NULL;
    }
    return NULL;
}

ty_status store_job_epoch(store *st, const char *id, int64_t epoch,
                          const json_t *metrics, ty_err *err)
{
    char *rec = tyjson_dumps(metrics, JSON_COMPACT), *m = NULL;
    json_t *patch = json_deep_copy(metrics), *row = NULL;
    pthread_mutex_lock(&st->mu);
    ty_status s = rec && patch ? db_exec(st, "BEGIN IMMEDIATE", err)
                               : ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    if (s == TY_OK)
        s = db_q(st, &row, NULL, err,
                 "SELECT metrics AS m_json FROM jobs WHERE id = ?", "s", id);
    if (s == TY_OK) {
        json_t *best = better_best(json_object_get(json_array_get(row, 0), "m"),
                                   epoch, metrics);
        if (best)
            json_object_set_new(patch, "best", best);
        if (!(m = tyjson_dumps(patch, JSON_COMPACT)))
            s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    if (s == TY_OK)
        s = db_q(st, NULL, NULL, err,
                 "INSERT OR REPLACE INTO job_epochs(job_id, epoch, metrics) "
                 "VALUES (?, ?, ?)",
                 "sis", id, epoch, rec);
    if (s == TY_OK)
        s = db_q(
            st, NULL, NULL, err,
            "UPDATE jobs SET metrics = json_patch(coalesce(metrics, '{}'), ?) "
            "WHERE id = ?",
            "ss", m, id);
    if (s == TY_OK)
        s = db_exec(st, "COMMIT", err);
    if (s != TY_OK && rec && patch)
        db_rollback(st);
    pthread_mutex_unlock(&st->mu);
    json_decref(row);
    json_decref(patch);
    free(rec);
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
    ty_status s = db_q(st, NULL, &n, err,
                       "UPDATE jobs SET status = ?, error = ?, finished_at = ? "
                       "WHERE id = ? AND status IN ('queued', 'scheduled', "
                       "'running')",
                       "ssss", status, error, now, id);
    pthread_mutex_unlock(&st->mu);
    if (changed)
        *changed = n;
    return s;
}

/* A succeeded job's progress is complete: its last line may be older than
 * the end (the trainer writes at most every quarter second, a remote
 * worker's lines are coalesced), so the end is written here: the last
 * epoch and step, fraction 1, no time left. A key the run never had stays
 * absent (json_patch drops a null). */
#define SUCCEEDED_PROGRESS                                         \
    "progress = json_remove(json_patch(coalesce(progress, '{}'), " \
    "json_object('fraction', 1, "                                  \
    "'epoch', coalesce(json_extract(progress, '$.epochs'), "       \
    "json_extract(progress, '$.epoch')), "                         \
    "'step', coalesce(json_extract(progress, '$.total_steps'), "   \
    "json_extract(progress, '$.step')))), '$.eta_seconds')"

ty_status store_job_succeed(store *st, const char *id, const char *model_id,
                            const char *sha256, int64_t bytes,
                            const json_t *model_doc, ty_err *err)
{
    char now[32];
    ty_now_iso(now);
    char *doc = tyjson_dumps(model_doc, JSON_COMPACT);
    if (!doc)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    int changed = 0;
    pthread_mutex_lock(&st->mu);
    ty_status s = db_exec(st, "BEGIN IMMEDIATE", err);
    if (s == TY_OK)
        s = db_q(
            st, NULL, NULL, err,
            "INSERT INTO models(id, tenant_id, job_id, sha256, bytes, doc, "
            "created_at) SELECT ?, tenant_id, id, ?, ?, ?, ? FROM jobs "
            "WHERE id = ?",
            "ssisss", model_id, sha256, bytes, doc,
            json_string_value(json_object_get(model_doc, "created_at")), id);
    if (s == TY_OK)
        s = db_q(
            st, NULL, &changed, err,
            "UPDATE jobs SET status = 'succeeded', model_id = ?, error = NULL, "
            "finished_at = ?, " SUCCEEDED_PROGRESS
            " WHERE id = ? AND status IN ('scheduled', 'running')",
            "sss", model_id, now, id);
    if (s == TY_OK && changed == 0)
        s = ty_fail(err, TY_ECONFLICT, NULL, "job %s is not running", id);
    if (s == TY_OK)
        s = db_exec(st, "COMMIT", err);
    if (s != TY_OK)
        db_rollback(st);
    pthread_mutex_unlock(&st->mu);
    free(doc);
    if (s == TY_OK)
        store_gen_bump(st, STORE_GEN_MODELS);
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
    ty_status s =
        db_q_one(st, &row, err, "job", id,
                 "SELECT status FROM jobs WHERE id = ? AND tenant_id = ?", "ss",
                 id, tenant_id);
    if (s == TY_OK) {
        const char *status = json_string_value(json_object_get(row, "status"));
        if (!strcmp(status, JOB_QUEUED)) {
            *was_running = 0;
            s = db_q(st, NULL, NULL, err,
                     "UPDATE jobs SET status = 'cancelled', finished_at = ?, "
                     "error = 'cancelled by request' WHERE id = ?",
                     "ss", now, id);
        } else if (!strcmp(status, JOB_RUNNING) ||
                   !strcmp(status, JOB_SCHEDULED)) {
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

ty_status store_job_requeue_running(store *st, const char *keep_executor,
                                    int64_t *count, ty_err *err)
{
    int n = 0;
    pthread_mutex_lock(&st->mu);
    ty_status s =
        keep_executor
            ? db_q(st, NULL, &n, err,
                   "UPDATE jobs SET status = 'queued' WHERE status IN "
                   "('scheduled', 'running') AND coalesce(json_extract("
                   "placement, "
                   "'$.executor'), 'local') != ?",
                   "s", keep_executor)
            : db_q(st, NULL, &n, err,
                   "UPDATE jobs SET status = 'queued' WHERE status IN "
                   "('scheduled', 'running')",
                   "");
    pthread_mutex_unlock(&st->mu);
    *count = n;
    return s;
}

ty_status store_job_running_on(store *st, const char *executor, json_t **rows,
                               ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    ty_status s =
        db_q(st, rows, NULL, err,
             "SELECT id, tenant_id, priority, "
             "coalesce(resources, '{\"gpu\":\"none\"}') AS "
             "resources_json, (julianday(created_at) - 2440587.5) * "
             "86400.0 AS submit_time, placement AS placement_json FROM jobs "
             "WHERE status IN ('scheduled', 'running') AND "
             "coalesce(json_extract(placement, "
             "'$.executor'), 'local') = ? ORDER BY seq",
             "s", executor);
    pthread_mutex_unlock(&st->mu);
    return s;
}

ty_status store_job_placement_merge(store *st, const char *id,
                                    const json_t *patch, ty_err *err)
{
    char *p = tyjson_dumps(patch, JSON_COMPACT);
    if (!p)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    pthread_mutex_lock(&st->mu);
    ty_status s =
        db_q(st, NULL, NULL, err,
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
    ty_status s =
        db_q(st, NULL, &changed, err,
             "UPDATE jobs SET status = 'queued', error = ?, "
             "preemptions = preemptions + ?, resume_preempted = ? "
             "WHERE id = ? AND status IN ('scheduled', 'running')",
             "siis", error, (int64_t) !!preempted, (int64_t) !!preempted, id);
    pthread_mutex_unlock(&st->mu);
    if (s == TY_OK && changed == 0)
        return ty_fail(err, TY_ECONFLICT, NULL, "job %s is not running", id);
    return s;
}

ty_status store_job_queued_all(store *st, json_t **rows, ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    ty_status s =
        db_q(st, rows, NULL, err,
             "SELECT id, tenant_id, priority, "
             "coalesce(resources, '{\"gpu\":\"none\"}') AS "
             "resources_json, (julianday(created_at) - 2440587.5) * "
             "86400.0 AS submit_time FROM jobs WHERE status = 'queued' "
             "ORDER BY seq",
             "");
    pthread_mutex_unlock(&st->mu);
    return s;
}

/* ---- metrics ---- */

ty_status store_job_counts(store *st, json_t **rows, ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    ty_status s = db_q(st, rows, NULL, err,
                       "SELECT tenant_id, status, count(*) AS n FROM jobs "
                       "GROUP BY tenant_id, status ORDER BY tenant_id, status",
                       "");
    pthread_mutex_unlock(&st->mu);
    return s;
}
