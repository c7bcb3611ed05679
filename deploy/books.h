/*
 * books.h - the deployments controller's books, shared by its files:
 * controller.c (the API's calls, start and stop) and the two below it,
 * replicas.c (the serving kind: a replica's life, autoscaling, rollout)
 * and route.c (a request's way: admission, limits, the replica picked).
 * books.c keeps the helpers all three use; nothing in it calls them.
 *
 * The books (deployments, their replicas, traffic, the tenants' limits)
 * are guarded by the controller's own mutex, dmu (deploy_ctl.mu), so
 * that requests never wait on the job service's mutex, which the
 * supervisor holds through its passes. Lock order: the service's (mu),
 * then dmu, then the store's. A replica record outlives its process until
 * no request holds it (in_flight 0); a deployment outlives its deletion
 * until its last replica is gone. Not for use outside deploy/.
 */
#ifndef TY_DEPLOY_BOOKS_H
#define TY_DEPLOY_BOOKS_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include <jansson.h>

#include "common/ids.h"
#include "deploy/deploy.h"

struct jobs_service;

#define REPLICA_PREFIX DEPLOY_REPLICA_ID_PREFIX
/* Seconds a replica that died before it was ready waits, doubling, before
 * the next one starts (a model that does not load must not spin). */
#define RESTART_BACKOFF_S 1.0
#define RESTART_BACKOFF_CAP_S 60.0
/* A drained replica gets this long to finish before SIGTERM even with
 * nothing in flight (a request may be on its way from a thread that picked
 * it just before the drain: picks happen under dmu, so none can, but the
 * margin costs nothing). */
#define DRAIN_GRACE_S 0.05
/* Latency buckets: 2^(i/4) microseconds, up to about 2^(95/4) us = 14 min. */
#define LAT_BUCKETS 96
/* traffic.recent covers the current window and the one before it: 10 to
 * 20 seconds. */
#define WINDOW_S 10.0

typedef enum {
    REP_QUEUED = 0,
    REP_STARTING,
    REP_READY,
    REP_DRAINING,
    REP_GONE,
} rep_state;

typedef struct replica {
    char id[TY_ID_MAX];
    int64_t generation;
    char model_id[TY_ID_MAX]; /* what it serves (its generation's) */
    rep_state state;
    int sjob;  /* the scheduler's handle while it is there; -1 after */
    int place; /* supervisor place; -1 while queued */
    int slot;  /* inventory slot; -1 the CPU or not placed */
    int signalled;
    uint64_t serial;
    char dir[PATH_MAX];
    char socket[108];
    char device[64];
    char started_at[32];
    double drain_since;
    int in_flight; /* requests holding it (dmu) */
    /* its engine's figures, as its last heartbeat said (a language
     * model's replica; have 0 until one did) */
    struct {
        int have;
        long sequences, waiting, kv_used, kv_total, kv_cached;
        uint64_t prompt, generated, prefix_hit;
    } gen;
    struct replica *next;
} replica;

typedef struct {
    uint64_t n[LAT_BUCKETS];
    uint64_t count;
} lat_hist;

typedef struct deployment {
    char id[TY_ID_MAX];
    char tenant[TY_ID_MAX];
    char model_id[TY_ID_MAX];
    char model_path[PATH_MAX];
    deploy_spec spec;
    int64_t generation;
    char created_at[32], updated_at[32];
    int deleting;
    int desired;
    replica *reps;
    /* limits */
    double tokens, tokens_at;
    double gen_tokens, gen_tokens_at; /* limits.tokens_per_minute's bucket */
    int active;                       /* admitted and not finished */
    /* autoscaling and restarts */
    double over_since, last_request;
    int failures;
    double restart_at;
    double cold_since; /* a request waits for a first replica since */
    double cold_start_s;
    int waiters;
    /* Why its oldest queued replica waits, in the words a queued job's
     * queue.summary uses, and the scheduler's reason (sched_wait_reason_
     * name); "" while none waits. Set by each tick. */
    char waiting[200];
    char waiting_reason[40];
    /* traffic */
    uint64_t requests, errors, rejected;
    uint64_t batches, batch_rows_sum, batch_max;
    lat_hist total, queue, compute;
    /* generation on its replicas (deploy_gen_token): tokens the server
     * took from them, time to first token, inter-token latency */
    uint64_t gen_requests, gen_prompt, gen_written;
    lat_hist ttft, itl;
    /* the recent windows: [0] the current, [1] the one before */
    struct {
        lat_hist total, queue;
        uint64_t requests, batches, batch_rows_sum;
        lat_hist ttft, itl;
        uint64_t gen_written;
    } win[2];
    double win_start;
    struct deployment *next;
} deployment;

/* A tenant's serving limits over all its deployments (its quota's
 * serving_* fields), read from the store when the tenant's first
 * deployment is made or restored and again after a change of its quota
 * (tenant_limits_load): never on a request's way. */
typedef struct tenant_bucket {
    char tenant[TY_ID_MAX];
    double rps; /* <= 0: none */
    double burst;
    int max_concurrency; /* <= 0: none */
    double tokens, tokens_at;
    double tokens_per_minute; /* generation tokens; <= 0: none */
    double gen_tokens, gen_tokens_at;
    int active;
    struct tenant_bucket *next;
} tenant_bucket;

struct deploy_ctl {
    struct jobs_service *js; /* the job service it runs replicas in */
    pthread_mutex_t mu;      /* dmu */
    tenant_bucket *tenants;
    pthread_cond_t ready;
    deployment *deps;
    /* Deployments in the list, read without dmu: a server without any
     * (most predicts) pays one atomic load on the request path. */
    atomic_int count;
};

/* Which replicas count_reps counts: of the current generation, of older
 * ones (a rolling update's), or all. */
enum { GEN_CUR, GEN_OLD, GEN_ANY };
#define LIVE ((1 << REP_QUEUED) | (1 << REP_STARTING) | (1 << REP_READY))
#define READY (1 << REP_READY)

/* Monotonic seconds: back-offs, windows, waits. */
static inline double now_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The scheduler's clock (wall time), for a replica's submit time. */
static inline double now_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* rep_state's names, as the API shows them. */
extern const char *const rep_state_names[];

/* Counts one latency of `seconds` into h. */
void lat_add(lat_hist *h, double seconds);

/* The q-quantile in milliseconds (the bucket's upper bound), or JSON null
 * without data. */
json_t *lat_quantile(const lat_hist *h, double q);

/* The quantile over two histograms. */
json_t *lat_quantile2(const lat_hist *a, const lat_hist *b, double q);

/* Moves d's recent windows on to time t. dmu held. */
void window_roll(deployment *d, double t);

/* d's replicas of generation `which` in one of `states` (a mask of
 * 1 << rep_state). dmu held. */
int count_reps(const deployment *d, int which, int states);

/* What d's live replicas' engines hold, as their last heartbeats said:
 * the number of replicas that reported, and their sums. dmu held. */
typedef struct {
    long sequences, waiting, kv_used, kv_total, kv_cached;
} engines_sum;
int sum_engines(const deployment *d, engines_sum *sum);

/* The API's status of d ("ready", "starting", "degraded", ...). dmu
 * held. */
const char *dep_status(const deployment *d);

/* Sets d's replica gauges (trainyard_deployment_replicas). dmu held. */
void replicas_gauge(const deployment *d);

/* tenant's deployment whose id is ref (or name, by_id_or_name), NULL when
 * none; one being deleted only with_deleting. dmu held. */
deployment *dep_find(deploy_ctl *b, const char *tenant, const char *ref,
                     int by_id_or_name, int with_deleting);

/* Free a replica's record, and a deployment's with all its replicas'. */
void replica_free(replica *p);
void dep_free(deployment *d);

/* The model's id and blob path for tenant's reference ref. */
ty_status model_resolve(const deploy_ctl *b, const char *tenant,
                        const char *ref, char id[TY_ID_MAX], char *path,
                        size_t npath, ty_err *err);

/* tenant's bucket, or NULL when it has none (no limits known). dmu
 * held. */
tenant_bucket *tenant_bucket_find(deploy_ctl *b, const char *tenant);

/* Reads tenant's serving limits from the store into its bucket (made on
 * first use). Callers hold mu (so that two changes apply in order), not
 * dmu: the store is read before dmu is taken. */
void tenant_limits_load(deploy_ctl *b, const char *tenant);

#endif
