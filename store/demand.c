/*
 * demand.c - the recorded demand's rows (see demand.h). A row is written
 * at submission and updated at each start and stop of its request; the
 * updates never touch another row, so the table is append-only in
 * practice and its index on arrival serves the advisor's window.
 */
#include "store/demand.h"
#include "store/store_internal.h"

ty_status store_demand_insert(store *st, const store_demand *d, ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    ty_status s = db_q(
        st, NULL, NULL, err,
        "INSERT OR IGNORE INTO demand (id, tenant_id, arrival, req_kind, "
        "profile, min_memory_bytes, min_compute_slices, serving, gang, "
        "refused) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        "ssdisiiiii", d->id, d->tenant_id, d->arrival, (int64_t)d->req_kind,
        d->profile && d->profile[0] ? d->profile : NULL,
        (int64_t)d->min_memory_bytes, (int64_t)d->min_compute_slices,
        (int64_t)d->serving, (int64_t)d->gang, (int64_t)d->refused);
    pthread_mutex_unlock(&st->mu);
    return s;
}

ty_status store_demand_started(store *st, const char *id, double t, ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    ty_status s = db_q(st, NULL, NULL, err,
                       "UPDATE demand SET first_start = coalesce(first_start, "
                       "?2), last_start = ?2, ended = NULL WHERE id = ?1",
                       "sd", id, t);
    pthread_mutex_unlock(&st->mu);
    return s;
}

ty_status store_demand_stopped(store *st, const char *id, double t, ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    ty_status s =
        db_q(st, NULL, NULL, err,
             "UPDATE demand SET held_s = held_s + CASE WHEN last_start IS NULL "
             "THEN 0 ELSE max(0, ?2 - last_start) END, last_start = NULL, "
             "ended = ?2 WHERE id = ?1",
             "sd", id, t);
    pthread_mutex_unlock(&st->mu);
    return s;
}

ty_status store_demand_recover(store *st, double before, int64_t *pruned,
                               ty_err *err)
{
    int changed = 0;
    pthread_mutex_lock(&st->mu);
    ty_status s = db_q(st, NULL, &changed, err,
                       "DELETE FROM demand WHERE arrival < ?", "d", before);
    if (s == TY_OK)
        s = db_q(st, NULL, NULL, err,
                 "UPDATE demand SET last_start = NULL WHERE last_start IS "
                 "NOT NULL",
                 "");
    pthread_mutex_unlock(&st->mu);
    if (pruned)
        *pruned = changed;
    return s;
}

ty_status store_demand_window(store *st, double from, double to, int64_t limit,
                              json_t **rows, ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    ty_status s = db_q(
        st, rows, NULL, err,
        "SELECT id, tenant_id, arrival, req_kind, profile, min_memory_bytes, "
        "min_compute_slices, serving, gang, refused, first_start, "
        "last_start, held_s, ended FROM demand WHERE arrival >= ? AND "
        "arrival < ? ORDER BY arrival LIMIT ?",
        "ddi", from, to, limit);
    pthread_mutex_unlock(&st->mu);
    return s;
}
