/*
 * usage_bench.c - the usage window query over a million intervals (issue
 * 34: GET /v1/usage under 100 ms). Builds a store in --data DIR (made if
 * needed) holding N intervals (default 1,000,000) of 100 tenants over the
 * 90 days before now (durations 5 minutes to 8 hours, a tenth on CPU
 * places, the last few still open), then times store_usage_window for the
 * API's usual windows and prints one line per query: its median and
 * slowest of --repeat runs, in milliseconds. bench/usage/run.py runs it
 * and then the same queries through HTTP on a server over that store.
 *
 *   bench_usage --data DIR [--intervals N] [--repeat R] [--keep]
 */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/rng.h"
#include "store/store.h"

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Fills the store's table through SQLite directly, in one transaction
 * (store_usage_open commits each row: a million fsyncs). */
static int fill(const char *dir, long n, double now)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/trainyard.db", dir);
    sqlite3 *db = NULL;
    if (sqlite3_open(path, &db) != SQLITE_OK)
        return -1;
    sqlite3_exec(db, "PRAGMA synchronous=OFF; BEGIN", NULL, NULL, NULL);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(
            db,
            "INSERT INTO usage_intervals (tenant_id, kind, owner, replica, "
            "device, profile, compute_slices, gpu_slices, memory_bytes, cpu, "
            "start_s, end_s) VALUES (?, ?, ?, NULL, ?, ?, ?, 7, ?, ?, ?, ?)",
            -1, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "bench_usage: %s\n", sqlite3_errmsg(db));
        sqlite3_close(db);
        return -1;
    }
    static const char *const profiles[] = {"1g.10gb", "1g.10gb", "2g.20gb",
                                           "3g.40gb", ""};
    static const int slices[] = {1, 1, 2, 3, 7};
    ty_rng rng;
    ty_rng_seed(&rng, 34, 0);
    const double span = 90 * 86400.0;
    for (long i = 0; i < n; i++) {
        char tenant[32], owner[32];
        snprintf(tenant, sizeof tenant, "tn_bench%03u",
                 (unsigned)(ty_rng_u64(&rng) % 100));
        snprintf(owner, sizeof owner, "job_bench%08ld", i);
        /* starts in order over the 90 days, as a server writes them */
        double start = now - span + span * (double)i / (double)n;
        double dur = 300 + ty_rng_uniform(&rng) * 8 * 3600;
        int cpu = ty_rng_u64(&rng) % 10 == 0;
        int p = (int)(ty_rng_u64(&rng) % 5);
        sqlite3_bind_text(st, 1, tenant, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, ty_rng_u64(&rng) % 4 ? "training" : "serving",
                          -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, owner, -1, SQLITE_TRANSIENT);
        if (cpu) {
            sqlite3_bind_null(st, 4);
            sqlite3_bind_null(st, 5);
            sqlite3_bind_int(st, 6, 0);
            sqlite3_bind_int64(st, 7, 0);
            sqlite3_bind_int(st, 8, 1 + (int)(ty_rng_u64(&rng) % 4));
        } else {
            sqlite3_bind_int(st, 4, (int)(ty_rng_u64(&rng) % 8));
            sqlite3_bind_text(st, 5, profiles[p], -1, SQLITE_STATIC);
            sqlite3_bind_int(st, 6, slices[p]);
            sqlite3_bind_int64(st, 7, (int64_t)slices[p] * 10737418240LL);
            sqlite3_bind_int(st, 8, 0);
        }
        sqlite3_bind_double(st, 9, start);
        if (start + dur > now)
            sqlite3_bind_null(st, 10); /* still running */
        else
            sqlite3_bind_double(st, 10, start + dur);
        if (sqlite3_step(st) != SQLITE_DONE) {
            fprintf(stderr, "bench_usage: %s\n", sqlite3_errmsg(db));
            break;
        }
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    int rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
    sqlite3_close(db);
    return rc;
}

typedef struct {
    const char *name;
    double days;     /* the window's length */
    double ago_days; /* its end, days before now */
    const char *tenant;
    int nkeys;
    store_usage_key keys[2];
} bench_query;

int main(int argc, char **argv)
{
    const char *dir = NULL;
    long n = 1000000;
    int repeat = 7;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--data") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--intervals") && i + 1 < argc)
            n = atol(argv[++i]);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_usage --data DIR [--intervals N] "
                            "[--repeat R]\n");
            return 2;
        }
    }
    if (!dir || n < 1 || repeat < 1 || repeat > 100) {
        fprintf(stderr, "bench_usage: --data DIR is needed\n");
        return 2;
    }
    mkdir(dir, 0700);
    store *st = NULL;
    ty_err err = {0};
    double now = wall();
    if (store_open(dir, &st, &err) != TY_OK) {
        fprintf(stderr, "bench_usage: %s\n", err.msg);
        return 1;
    }
    store_close(st);
    double t0 = mono();
    if (fill(dir, n, now) != 0)
        return 1;
    printf("{\"inserted\": %ld, \"seconds\": %.1f}\n", n, mono() - t0);
    if (store_open(dir, &st, &err) != TY_OK) {
        fprintf(stderr, "bench_usage: %s\n", err.msg);
        return 1;
    }
    const bench_query qs[] = {
        {"7d by tenant", 7, 0, NULL, 1, {STORE_USAGE_TENANT}},
        {"7d by day,kind", 7, 0, NULL, 2, {STORE_USAGE_DAY, STORE_USAGE_KIND}},
        {"7d by tenant,profile",
         7,
         0,
         NULL,
         2,
         {STORE_USAGE_TENANT, STORE_USAGE_PROFILE}},
        {"1d by tenant", 1, 0, NULL, 1, {STORE_USAGE_TENANT}},
        {"1d by day", 1, 0, NULL, 1, {STORE_USAGE_DAY}},
        {"7d one tenant by day", 7, 0, "tn_bench042", 1, {STORE_USAGE_DAY}},
        {"7d 60 days ago by tenant", 7, 53, NULL, 1, {STORE_USAGE_TENANT}},
        {"30d by day", 30, 0, NULL, 1, {STORE_USAGE_DAY}},
        {"90d by tenant", 90, 0, NULL, 1, {STORE_USAGE_TENANT}},
    };
    double ms[100];
    for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
        store_usage_query q = {.to = now - qs[i].ago_days * 86400,
                               .now = now,
                               .tenant_id = qs[i].tenant,
                               .nkeys = qs[i].nkeys,
                               .keys = {qs[i].keys[0], qs[i].keys[1]}};
        q.from = q.to - qs[i].days * 86400;
        size_t nrows = 0;
        for (int r = 0; r < repeat; r++) {
            json_t *rows = NULL;
            double a = mono();
            if (store_usage_window(st, &q, &rows, NULL, &err) != TY_OK) {
                fprintf(stderr, "bench_usage: %s\n", err.msg);
                return 1;
            }
            ms[r] = (mono() - a) * 1000;
            nrows = json_array_size(rows);
            json_decref(rows);
        }
        qsort(ms, (size_t)repeat, sizeof ms[0], cmp_double);
        printf("{\"query\": \"%s\", \"path\": \"store\", \"rows\": %zu, "
               "\"median_ms\": %.1f, \"max_ms\": %.1f}\n",
               qs[i].name, nrows, ms[repeat / 2], ms[repeat - 1]);
        fflush(stdout);
    }
    store_close(st);
    return 0;
}
