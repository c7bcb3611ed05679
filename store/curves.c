/*
 * curves.c - what a job's page draws (see store.h): its per-epoch records a
 * page at a time, the best epoch so far, and its training curves
 * downsampled here to a fixed number of points, so that a run of 20,000
 * epochs costs a client as much as a run of 20.
 *
 * The per-step records of a job are at most STORE_STEPS_MAX: past that,
 * every other one is dropped (the curve keeps its whole span at half the
 * density), so neither the table nor a curves query grows with the run.
 *
 * A curve of n records shown in at most `points` points takes buckets of
 * w = ceil(last / points) consecutive epochs (or steps), and each point is
 * the mean of its bucket's values (SQL avg: nulls left out) at the bucket's
 * last epoch (or step). With n <= points every record is its own point.
 */
#include "store/store_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The job must be the tenant's (TY_ENOTFOUND otherwise). Caller holds mu. */
static ty_status own_job(store *st, const char *tenant_id, const char *id,
                         ty_err *err)
{
    json_t *row = NULL;
    ty_status s = db_q_one(st, &row, err, "job", id,
                           "SELECT id FROM jobs WHERE id = ? AND tenant_id = ?",
                           "ss", id, tenant_id);
    json_decref(row);
    return s;
}

ty_status store_job_epochs_page(store *st, const char *tenant_id,
                                const char *id, int64_t offset, int64_t limit,
                                int newest_first, json_t **items,
                                int64_t *total, ty_err *err)
{
    json_t *rows = NULL;
    pthread_mutex_lock(&st->mu);
    ty_status s = own_job(st, tenant_id, id, err);
    if (s == TY_OK)
        s = db_q(st, &rows, NULL, err,
                 newest_first ? "SELECT metrics AS m_json FROM job_epochs "
                                "WHERE job_id = ? ORDER BY epoch DESC "
                                "LIMIT ? OFFSET ?"
                              : "SELECT metrics AS m_json FROM job_epochs "
                                "WHERE job_id = ? ORDER BY epoch "
                                "LIMIT ? OFFSET ?",
                 "sii", id, limit, offset);
    pthread_mutex_unlock(&st->mu);
    if (s == TY_OK)
        s = db_q_int(st, total, err,
                     "SELECT count(*) AS n FROM job_epochs WHERE job_id = ?",
                     "s", id);
    if (s != TY_OK) {
        json_decref(rows);
        return s;
    }
    *items = json_array();
    size_t i;
    json_t *r;
    json_array_foreach (rows, i, r)
        json_array_append(*items, json_object_get(r, "m"));
    json_decref(rows);
    return TY_OK;
}

ty_status store_job_step(store *st, const char *id, int64_t step, int64_t epoch,
                         double x, double loss, double lr, ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    /* A non-finite value is stored as NULL (a gap in the curve). */
    ty_status s = db_q(st, NULL, NULL, err,
                       "INSERT OR REPLACE INTO job_steps(job_id, step, epoch, "
                       "x, loss, lr) VALUES (?, ?, ?, ?, "
                       "CASE WHEN ? THEN ? END, CASE WHEN ? THEN ? END)",
                       "siididid", id, step, epoch, x, (int64_t)isfinite(loss),
                       isfinite(loss) ? loss : 0.0, (int64_t)isfinite(lr),
                       isfinite(lr) ? lr : 0.0);
    pthread_mutex_unlock(&st->mu);
    int64_t n = 0;
    if (s == TY_OK)
        s = db_q_int(st, &n, err,
                     "SELECT count(*) AS n FROM job_steps WHERE job_id = ?",
                     "s", id);
    if (s != TY_OK || n <= STORE_STEPS_MAX)
        return s;
    /* Over the cap: every other record goes (the first and the newest
     * stay), so a run of any length keeps an even record of its whole
     * curve in at most STORE_STEPS_MAX rows. */
    pthread_mutex_lock(&st->mu);
    s = db_q(st, NULL, NULL, err,
             "DELETE FROM job_steps WHERE job_id = ?1 AND step IN ("
             "SELECT step FROM (SELECT step, row_number() OVER "
             "(ORDER BY step) AS rn FROM job_steps WHERE job_id = ?1) "
             "WHERE rn % 2 = 0) AND step < ?2",
             "si", id, step);
    pthread_mutex_unlock(&st->mu);
    return s;
}

/* Bucket width for values numbered 1..last in at most points buckets. */
static int64_t bucket_width(int64_t last, int points)
{
    return last <= points ? 1 : (last + points - 1) / points;
}

ty_status store_job_curves(store *st, const char *tenant_id, const char *id,
                           int points, json_t **doc, ty_err *err)
{
    json_t *ep = NULL, *steps = NULL;
    int64_t last_epoch = 0, last_step = 0, n_epochs = 0, n_steps = 0;
    pthread_mutex_lock(&st->mu);
    ty_status s = own_job(st, tenant_id, id, err);
    json_t *row = NULL;
    if (s == TY_OK)
        s = db_q(st, &row, NULL, err,
                 "SELECT (SELECT coalesce(max(epoch), 0) FROM job_epochs "
                 "WHERE job_id = ?1) AS le, (SELECT count(*) FROM job_epochs "
                 "WHERE job_id = ?1) AS ne, (SELECT coalesce(max(step), 0) "
                 "FROM job_steps WHERE job_id = ?1) AS ls, (SELECT count(*) "
                 "FROM job_steps WHERE job_id = ?1) AS ns",
                 "s", id);
    if (s == TY_OK) {
        json_t *r0 = json_array_get(row, 0);
        last_epoch = json_integer_value(json_object_get(r0, "le"));
        n_epochs = json_integer_value(json_object_get(r0, "ne"));
        last_step = json_integer_value(json_object_get(r0, "ls"));
        n_steps = json_integer_value(json_object_get(r0, "ns"));
    }
    json_decref(row);
    int64_t we = bucket_width(last_epoch, points);
    int64_t ws = bucket_width(last_step, points);
    if (s == TY_OK)
        s = db_q(
            st, &ep, NULL, err,
            "SELECT max(epoch) AS epoch, count(*) AS n, "
            "avg(json_extract(metrics, '$.train_loss')) AS train_loss, "
            "avg(json_extract(metrics, '$.val_loss')) AS val_loss, "
            "avg(json_extract(metrics, '$.train_accuracy')) AS train_accuracy, "
            "avg(json_extract(metrics, '$.val_accuracy')) AS val_accuracy, "
            /* regression records only (target units); null otherwise */
            "avg(json_extract(metrics, '$.train_rmse')) AS train_rmse, "
            "avg(json_extract(metrics, '$.val_rmse')) AS val_rmse, "
            "avg(json_extract(metrics, '$.val_mae')) AS val_mae, "
            "avg(json_extract(metrics, '$.val_r2')) AS val_r2 "
            "FROM job_epochs WHERE job_id = ? "
            "GROUP BY (epoch - 1) / ? ORDER BY 1",
            "si", id, we);
    if (s == TY_OK)
        s = db_q(st, &steps, NULL, err,
                 "SELECT max(step) AS step, max(x) AS x, count(*) AS n, "
                 "avg(loss) AS loss, avg(lr) AS lr FROM job_steps "
                 "WHERE job_id = ? GROUP BY (step - 1) / ? ORDER BY 1",
                 "si", id, ws);
    pthread_mutex_unlock(&st->mu);
    if (s != TY_OK) {
        json_decref(ep);
        json_decref(steps);
        return s;
    }
    *doc = json_pack("{s:s, s:i, s:{s:I, s:I, s:o}, s:{s:I, s:I, s:o}}", "job",
                     id, "points", points, "epochs", "total", n_epochs,
                     "per_point", we, "points", ep, "steps", "total", n_steps,
                     "per_point", ws, "points", steps);
    return *doc ? TY_OK : ty_fail(err, TY_ENOMEM, NULL, "out of memory");
}
