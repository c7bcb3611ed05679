/*
 * kserve_stats.c - the KServe statistics extension's counters (see
 * kserve_stats.h). Split from kserve.c, which records and serves them.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/kserve_stats.h"
#include "common/ids.h"
#include "serve/modelcache.h"

#define VERSION "1"

/* ---- statistics (the statistics extension) ----
 *
 * Counters per (tenant, model) since the server started, for GET
 * /v2/models[/{name}[/versions/1]]/stats. An infer must not take a lock
 * for them: each thread counts into its own table (no lock; the counters
 * are atomics only so that a reader on another thread sees whole values),
 * and a read sums every thread's table. The tables are made once per
 * thread and registered under stats_mu, and live as long as the server.
 * At most STATS_PER_THREAD models per thread; past that the one inferred
 * longest ago on that thread starts over. */
#define STATS_PER_THREAD 1024

typedef struct {
    uint64_t count, ns;
} duration_stat;

typedef struct {
    char tenant[TY_ID_MAX], id[TY_ID_MAX];
    uint64_t last_ms, inferences, executions;
    duration_stat success, fail, input, infer, output;
} model_stats;

typedef struct stats_table {
    int n; /* entries in use (only grows; read by readers) */
    model_stats e[STATS_PER_THREAD];
    struct stats_table *next;
} stats_table;

static pthread_mutex_t stats_mu = PTHREAD_MUTEX_INITIALIZER;
static stats_table *stats_tables; /* every thread's, newest first */
static __thread stats_table *stats_mine;

uint64_t kserve_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static uint64_t wall_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

#define ST_ADD(field, v) __atomic_add_fetch(&(field), (v), __ATOMIC_RELAXED)
#define ST_GET(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)

/* This thread's entry of (tenant, id), made when missing; NULL when out of
 * memory (the infer is then not counted). An entry reused for another
 * model has its names rewritten while a reader may look: a reader may
 * then count it once under either model, never crash (both names stay
 * NUL-terminated within their arrays). */
static model_stats *stats_entry(const char *tenant, const char *id)
{
    stats_table *t = stats_mine;
    if (!t) {
        t = calloc(1, sizeof *t);
        if (!t)
            return NULL;
        pthread_mutex_lock(&stats_mu);
        t->next = stats_tables;
        stats_tables = t;
        pthread_mutex_unlock(&stats_mu);
        stats_mine = t;
    }
    int n = t->n, oldest = 0;
    for (int i = 0; i < n; i++) {
        if (!strcmp(t->e[i].id, id) && !strcmp(t->e[i].tenant, tenant))
            return &t->e[i];
        if (t->e[i].last_ms < t->e[oldest].last_ms)
            oldest = i;
    }
    model_stats *e = &t->e[n < STATS_PER_THREAD ? n : oldest];
    memset(e, 0, sizeof *e);
    snprintf(e->tenant, sizeof e->tenant, "%s", tenant);
    snprintf(e->id, sizeof e->id, "%s", id);
    if (n < STATS_PER_THREAD)
        __atomic_store_n(&t->n, n + 1, __ATOMIC_RELEASE);
    return e;
}

void kserve_stats_record(const char *tenant, const char *id, int ok,
                         uint64_t total_ns, const infer_times *t)
{
    model_stats *e = stats_entry(tenant, id);
    if (!e)
        return;
    duration_stat *d = ok ? &e->success : &e->fail;
    ST_ADD(d->count, 1);
    ST_ADD(d->ns, total_ns);
    if (ok) {
        __atomic_store_n(&e->last_ms, wall_ms(), __ATOMIC_RELAXED);
        ST_ADD(e->inferences, t->batch);
        ST_ADD(e->executions,
               (t->batch + MODEL_CACHE_BATCH - 1) / MODEL_CACHE_BATCH);
        ST_ADD(e->input.count, 1);
        ST_ADD(e->input.ns, t->input_ns);
        ST_ADD(e->infer.count, 1);
        ST_ADD(e->infer.ns, t->infer_ns);
        ST_ADD(e->output.count, 1);
        ST_ADD(e->output.ns, t->output_ns);
    }
}

static void duration_sum(duration_stat *to, duration_stat *from)
{
    to->count += ST_GET(from->count);
    to->ns += ST_GET(from->ns);
}

/* The sum over every thread's table of (tenant, id). */
static model_stats stats_sum(const char *tenant, const char *id)
{
    model_stats sum = {0};
    pthread_mutex_lock(&stats_mu);
    for (stats_table *t = stats_tables; t; t = t->next) {
        int n = __atomic_load_n(&t->n, __ATOMIC_ACQUIRE);
        for (int i = 0; i < n; i++) {
            model_stats *e = &t->e[i];
            if (strcmp(e->id, id) != 0 || strcmp(e->tenant, tenant) != 0)
                continue;
            uint64_t last = ST_GET(e->last_ms);
            if (last > sum.last_ms)
                sum.last_ms = last;
            sum.inferences += ST_GET(e->inferences);
            sum.executions += ST_GET(e->executions);
            duration_sum(&sum.success, &e->success);
            duration_sum(&sum.fail, &e->fail);
            duration_sum(&sum.input, &e->input);
            duration_sum(&sum.infer, &e->infer);
            duration_sum(&sum.output, &e->output);
        }
    }
    pthread_mutex_unlock(&stats_mu);
    return sum;
}

static json_t *duration_json(duration_stat d)
{
    return json_pack("{s:I, s:I}", "count", (json_int_t)d.count, "ns",
                     (json_int_t)d.ns);
}

/* The statistics document of one model (zeros when it has none). */
json_t *kserve_stats_json(const char *tenant, const char *id)
{
    model_stats e = stats_sum(tenant, id);
    return json_pack(
        "{s:s, s:s, s:I, s:I, s:I, s:{s:o, s:o, s:o, s:o, s:o}}", "name", id,
        "version", VERSION, "last_inference", (json_int_t)e.last_ms,
        "inference_count", (json_int_t)e.inferences, "execution_count",
        (json_int_t)e.executions, "inference_stats", "success",
        duration_json(e.success), "fail", duration_json(e.fail),
        "compute_input", duration_json(e.input), "compute_infer",
        duration_json(e.infer), "compute_output", duration_json(e.output));
}
