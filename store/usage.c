/*
 * usage.c - usage accounting (see store.h): the intervals in which a job or
 * a serving replica held a device slice or CPU places, and the window
 * query that adds them up.
 *
 * An interval is opened when a run starts and closed when it ends (end_s
 * NULL while open; times are unix seconds). The server stamps the time it
 * was last alive (store_usage_alive) every few seconds; a crash leaves
 * intervals open, and the next start closes each at the latest time the
 * store proves the server was alive: the stamp, or the latest start or end
 * it wrote, whichever is later (never earlier than the interval's own
 * start). So an interval is never extended past what the server saw, and
 * a crash loses at most one stamp period of usage.
 *
 * The window query reads the intervals overlapping [from, to) through the
 * covering index usage_end_start (never the table), clips each to the
 * window (an open one ends at now) and sums per group in a hash table:
 * slice-seconds (compute slices x seconds), GPU seconds (compute slices /
 * the GPU's slices x seconds) and CPU seconds; grouped by up to two of
 * tenant, kind, profile and day (UTC; an interval across midnight is split
 * between its days).
 */
#include "store/store_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

ty_status store_usage_open(store *st, const store_usage_interval *iv,
                           int64_t *id, ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    ty_status s = db_q(
        st, NULL, NULL, err,
        "INSERT INTO usage_intervals (tenant_id, kind, owner, replica, "
        "device, profile, compute_slices, gpu_slices, memory_bytes, cpu, "
        "start_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        "ssssIsiiiid", iv->tenant_id, iv->kind, iv->owner, iv->replica,
        (int64_t)iv->device, iv->profile, (int64_t)iv->compute_slices,
        (int64_t)iv->gpu_slices, iv->memory_bytes, (int64_t)iv->cpu, iv->start);
    if (s == TY_OK)
        *id = sqlite3_last_insert_rowid(st->db);
    pthread_mutex_unlock(&st->mu);
    return s;
}

ty_status store_usage_close(store *st, int64_t id, double end, ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    /* max(): a clock stepped back never makes a negative interval. */
    ty_status s = db_q(st, NULL, NULL, err,
                       "UPDATE usage_intervals SET end_s = max(start_s, ?) "
                       "WHERE id = ? AND end_s IS NULL",
                       "di", end, id);
    pthread_mutex_unlock(&st->mu);
    return s;
}

ty_status store_usage_alive(store *st, double at, ty_err *err)
{
    pthread_mutex_lock(&st->mu);
    ty_status s = db_q(st, NULL, NULL, err,
                       "INSERT INTO usage_alive (id, at_s) VALUES (1, ?) "
                       "ON CONFLICT (id) DO UPDATE SET at_s = "
                       "max(at_s, excluded.at_s)",
                       "d", at);
    pthread_mutex_unlock(&st->mu);
    return s;
}

ty_status store_usage_recover(store *st, double now, int64_t *closed,
                              double *proven, ty_err *err)
{
    json_t *rows = NULL;
    int changes = 0;
    *closed = 0;
    *proven = 0;
    pthread_mutex_lock(&st->mu);
    ty_status s = db_exec(st, "BEGIN IMMEDIATE", err);
    if (s != TY_OK)
        goto out;
    /* The latest time something this store holds was written: each of
     * these three is an index's last entry. */
    s = db_q(st, &rows, NULL, err,
             "SELECT max(coalesce((SELECT at_s FROM usage_alive WHERE id = 1),"
             " 0), coalesce((SELECT max(start_s) FROM usage_intervals), 0),"
             " coalesce((SELECT max(end_s) FROM usage_intervals), 0)) AS t",
             "");
    double t =
        s == TY_OK
            ? json_number_value(json_object_get(json_array_get(rows, 0), "t"))
            : 0;
    if (s == TY_OK)
        s = db_q(st, NULL, &changes, err,
                 "UPDATE usage_intervals SET end_s = max(start_s, ?) "
                 "WHERE end_s IS NULL",
                 "d", t);
    if (s == TY_OK)
        s = db_q(st, NULL, NULL, err,
                 "INSERT INTO usage_alive (id, at_s) VALUES (1, ?) "
                 "ON CONFLICT (id) DO UPDATE SET at_s = excluded.at_s",
                 "d", now > t ? now : t);
    if (s == TY_OK)
        s = db_exec(st, "COMMIT", err);
    if (s != TY_OK)
        db_rollback(st);
    else {
        *closed = changes;
        *proven = t;
    }
out:
    pthread_mutex_unlock(&st->mu);
    json_decref(rows);
    return s;
}

ty_status store_usage_get(store *st, int64_t id, json_t **row, ty_err *err)
{
    char idtext[32];
    snprintf(idtext, sizeof idtext, "%lld", (long long)id);
    pthread_mutex_lock(&st->mu);
    ty_status s =
        db_q_one(st, row, err, "usage interval", idtext,
                 "SELECT * FROM usage_intervals WHERE id = ?", "i", id);
    pthread_mutex_unlock(&st->mu);
    return s;
}

/* ---- the window query ---- */

static const char *const key_names[STORE_USAGE_KEY_COUNT] = {
    [STORE_USAGE_TENANT] = "tenant",
    [STORE_USAGE_KIND] = "kind",
    [STORE_USAGE_PROFILE] = "profile",
    [STORE_USAGE_DAY] = "day",
};

const char *store_usage_key_name(store_usage_key k)
{
    return k >= 0 && k < STORE_USAGE_KEY_COUNT ? key_names[k] : NULL;
}

int store_usage_key_parse(const char *name, store_usage_key *k)
{
    for (int i = 0; i < STORE_USAGE_KEY_COUNT; i++)
        if (!strcmp(name, key_names[i])) {
            *k = (store_usage_key)i;
            return 1;
        }
    return 0;
}

/* One group of the answer: its key values (a string, or a day number for
 * STORE_USAGE_DAY) and its sums in seconds. */
typedef struct {
    char *text[2];
    long long day[2];
    uint64_t hash;
    double slice_s, gpu_s, cpu_s;
    long long pieces;
    int used, nkeys;
} usage_group;

/* The groups, an open-addressing table (capacity a power of two, at most
 * half full). */
typedef struct {
    usage_group *g;
    size_t cap, n;
} usage_groups;

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static int groups_grow(usage_groups *gs)
{
    size_t ncap = gs->cap ? gs->cap * 2 : 64;
    usage_group *ng = calloc(ncap, sizeof *ng);
    if (!ng)
        return -1;
    for (size_t i = 0; i < gs->cap; i++) {
        if (!gs->g[i].used)
            continue;
        size_t j = gs->g[i].hash & (ncap - 1);
        while (ng[j].used)
            j = (j + 1) & (ncap - 1);
        ng[j] = gs->g[i];
    }
    free(gs->g);
    gs->g = ng;
    gs->cap = ncap;
    return 0;
}

static void groups_free(usage_groups *gs)
{
    for (size_t i = 0; i < gs->cap; i++) {
        free(gs->g[i].text[0]);
        free(gs->g[i].text[1]);
    }
    free(gs->g);
}

/* The group of these key values (made when new); NULL when out of
 * memory. */
static usage_group *group_of(usage_groups *gs, int nkeys,
                             const char *const text[2], const long long day[2])
{
    uint64_t h = 14695981039346656037ull;
    for (int i = 0; i < nkeys; i++)
        h = text[i] ? fnv(h, text[i], strlen(text[i]) + 1)
                    : fnv(h, &day[i], sizeof day[i]);
    if ((gs->n + 1) * 2 > gs->cap && groups_grow(gs) != 0)
        return NULL;
    size_t j = h & (gs->cap - 1);
    for (;; j = (j + 1) & (gs->cap - 1)) {
        usage_group *g = &gs->g[j];
        if (!g->used)
            break;
        if (g->hash != h)
            continue;
        int same = 1;
        for (int i = 0; i < nkeys && same; i++)
            same = text[i] ? g->text[i] && !strcmp(g->text[i], text[i])
                           : !g->text[i] && g->day[i] == day[i];
        if (same)
            return g;
    }
    usage_group *g = &gs->g[j];
    memset(g, 0, sizeof *g);
    for (int i = 0; i < nkeys; i++) {
        g->day[i] = day[i];
        if (text[i] && !(g->text[i] = strdup(text[i]))) {
            free(g->text[0]);
            g->text[0] = g->text[1] = NULL;
            return NULL;
        }
    }
    g->used = 1;
    g->nkeys = nkeys;
    g->hash = h;
    gs->n++;
    return g;
}

static int group_cmp(const void *pa, const void *pb)
{
    const usage_group *a = *(usage_group *const *)pa,
                      *b = *(usage_group *const *)pb;
    for (int i = 0; i < a->nkeys; i++) {
        int c = a->text[i] ? strcmp(a->text[i], b->text[i])
                           : (a->day[i] > b->day[i]) - (a->day[i] < b->day[i]);
        if (c)
            return c;
    }
    return 0;
}

/* The window's rows: every interval overlapping [?1, ?2), as two ranges of
 * the covering index usage_end_start (closed: end_s > from; open: end_s
 * NULL), with start_s < to checked in the index. */
#define WINDOW_SQL(tenant)                                               \
    "SELECT tenant_id, kind, profile, compute_slices, gpu_slices, cpu, " \
    "start_s, end_s FROM usage_intervals INDEXED BY usage_end_start "    \
    "WHERE end_s > ?1 AND start_s < ?2" tenant " UNION ALL "             \
    "SELECT tenant_id, kind, profile, compute_slices, gpu_slices, cpu, " \
    "start_s, end_s FROM usage_intervals INDEXED BY usage_end_start "    \
    "WHERE end_s IS NULL AND start_s < ?2" tenant

/* Adds one clipped piece [s, e) of a row to its group. */
static int add_piece(usage_groups *gs, const store_usage_query *q,
                     const char *const vals[STORE_USAGE_KEY_COUNT],
                     long long day, double secs, int slices, int gpu_slices,
                     int cpu)
{
    const char *text[2] = {NULL, NULL};
    long long days[2] = {0, 0};
    for (int i = 0; i < q->nkeys; i++) {
        if (q->keys[i] == STORE_USAGE_DAY)
            days[i] = day;
        else
            text[i] = vals[q->keys[i]];
    }
    usage_group *g = group_of(gs, q->nkeys, text, days);
    if (!g)
        return -1;
    g->slice_s += secs * slices;
    if (gpu_slices > 0)
        g->gpu_s += secs * slices / gpu_slices;
    g->cpu_s += secs * cpu;
    g->pieces++;
    return 0;
}

ty_status store_usage_window(store *st, const store_usage_query *q,
                             json_t **rows, int64_t *intervals, ty_err *err)
{
    *rows = NULL;
    int64_t counted = 0;
    if (!(q->from < q->to) || q->nkeys < 0 || q->nkeys > 2)
        return ty_fail(err, TY_EINVAL, NULL, "a bad usage window");
    int by_day = 0;
    for (int i = 0; i < q->nkeys; i++) {
        if (q->keys[i] < 0 || q->keys[i] >= STORE_USAGE_KEY_COUNT)
            return ty_fail(err, TY_EINVAL, NULL, "a bad usage key");
        by_day |= q->keys[i] == STORE_USAGE_DAY;
    }
    /* The rows are read here and summed in a hash table rather than by a
     * GROUP BY: SQLite sorts every row of a GROUP BY through a temporary
     * b-tree, which over a 7-day window of a million intervals (78,000
     * rows) took 60-90 ms of the query's 90; the scan itself takes 5. */
    const char *sql =
        q->tenant_id ? WINDOW_SQL(" AND tenant_id = ?4") : WINDOW_SQL("");
    usage_groups gs = {0};
    ty_status s = TY_OK;
    sqlite3_stmt *stmt = NULL;
    pthread_mutex_lock(&st->mu);
    if (sqlite3_prepare_v2(st->db, sql, -1, &stmt, NULL) != SQLITE_OK) {
        s = db_fail(st, err, "prepare");
        goto out;
    }
    sqlite3_bind_double(stmt, 1, q->from);
    sqlite3_bind_double(stmt, 2, q->to);
    if (q->tenant_id)
        sqlite3_bind_text(stmt, 4, q->tenant_id, -1, SQLITE_TRANSIENT);
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        const char *vals[STORE_USAGE_KEY_COUNT] = {0};
        vals[STORE_USAGE_TENANT] = (const char *)sqlite3_column_text(stmt, 0);
        vals[STORE_USAGE_KIND] = (const char *)sqlite3_column_text(stmt, 1);
        const char *prof = (const char *)sqlite3_column_text(stmt, 2);
        /* NULL: CPU places; '': a whole GPU */
        vals[STORE_USAGE_PROFILE] = !prof ? "cpu" : !*prof ? "gpu" : prof;
        if (!vals[STORE_USAGE_TENANT] || !vals[STORE_USAGE_KIND])
            continue;
        int slices = sqlite3_column_int(stmt, 3),
            gpu_slices = sqlite3_column_int(stmt, 4),
            cpu = sqlite3_column_int(stmt, 5);
        double start = sqlite3_column_double(stmt, 6);
        double end = sqlite3_column_type(stmt, 7) == SQLITE_NULL
                         ? (q->now > start ? q->now : start)
                         : sqlite3_column_double(stmt, 7);
        double a = start > q->from ? start : q->from,
               b = end < q->to ? end : q->to;
        if (!(b > a))
            continue;
        counted++;
        int fail = 0;
        if (!by_day) {
            fail = add_piece(&gs, q, vals, 0, b - a, slices, gpu_slices, cpu);
        } else {
            for (long long k = (long long)floor(a / 86400);
                 !fail && k * 86400.0 < b; k++) {
                double pa = a > k * 86400.0 ? a : k * 86400.0,
                       pb = b < (k + 1) * 86400.0 ? b : (k + 1) * 86400.0;
                if (pb > pa)
                    fail = add_piece(&gs, q, vals, k, pb - pa, slices,
                                     gpu_slices, cpu);
            }
        }
        if (fail) {
            s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
            goto out;
        }
    }
    if (rc != SQLITE_DONE)
        s = db_fail(st, err, "step");
out:
    sqlite3_finalize(stmt);
    pthread_mutex_unlock(&st->mu);
    if (s == TY_OK && q->nkeys == 0 && gs.n == 0) {
        /* no keys: always the one row of the totals, zeros here */
        const char *const text[2] = {NULL, NULL};
        const long long days[2] = {0, 0};
        if (!group_of(&gs, 0, text, days))
            s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    usage_group **order = NULL;
    json_t *out = NULL;
    if (s == TY_OK && (!(order = malloc((gs.n + 1) * sizeof *order)) ||
                       !(out = json_array())))
        s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    if (s == TY_OK) {
        size_t n = 0;
        for (size_t i = 0; i < gs.cap; i++)
            if (gs.g[i].used)
                order[n++] = &gs.g[i];
        qsort(order, n, sizeof *order, group_cmp);
        for (size_t i = 0; i < n && s == TY_OK; i++) {
            const usage_group *g = order[i];
            json_t *row = json_pack(
                "{s:f, s:f, s:f, s:I}", "slice_hours", g->slice_s / 3600,
                "gpu_hours", g->gpu_s / 3600, "cpu_hours", g->cpu_s / 3600,
                "intervals", (json_int_t)g->pieces);
            for (int k = 0; row && k < q->nkeys; k++) {
                char day[16];
                if (!g->text[k]) {
                    time_t t = (time_t)(g->day[k] * 86400);
                    struct tm tm;
                    gmtime_r(&t, &tm);
                    strftime(day, sizeof day, "%Y-%m-%d", &tm);
                }
                if (json_object_set_new(
                        row, key_names[q->keys[k]],
                        json_string(g->text[k] ? g->text[k] : day)) != 0) {
                    json_decref(row);
                    row = NULL;
                }
            }
            if (!row || json_array_append_new(out, row) != 0)
                s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        }
    }
    free(order);
    groups_free(&gs);
    if (s != TY_OK) {
        json_decref(out);
        return s;
    }
    *rows = out;
    if (intervals)
        *intervals = counted;
    return TY_OK;
}
