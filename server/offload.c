/*
 * offload.c - handlers run off libmicrohttpd's threads (see
 * http_req_offload in http.h).
 *
 * libmicrohttpd's few threads each serve many connections; a handler that
 * computes for long on one (a big predict, an evaluation) makes every other
 * connection of that thread wait. Such a handler hands its request here:
 * the connection is suspended (its thread goes back to the others), a work
 * thread runs the handler, and the connection is resumed once the reply is
 * set; libmicrohttpd then calls http_on_request once more, which queues it.
 *
 * Two pools: one for handlers that compute, one for handlers that wait
 * (on a serving replica). Each is shared by tenants (server/fairq.h): a
 * queue per tenant (the request's key's), a free thread takes the next
 * request of the tenant holding the fewest threads, and no tenant holds
 * more than its share of the pool's threads at once (--tenant-thread-share,
 * half by default). So a tenant whose deployment answers slowly, or who
 * floods it, waits in its own queue on its own threads, and another
 * tenant's request takes a thread that the first could not: issue 29's
 * noisy neighbour, where one tenant's 24 slow requests held all 8 serving
 * threads and another's predicts queued behind them for seconds.
 *
 * Each pool is a mutex over its queue: what comes here costs tens of
 * microseconds or more, so the lock is nothing beside it. An idle thread
 * waits on its own condition variable, on a stack of idle threads; a new
 * request wakes the one that went idle last. A shared condition variable
 * wakes waiters about in turn, so every thread of the pool (256 waiting
 * ones by default) ran requests and kept its stack's pages and its
 * allocator caches: a generation soak's memory grew for minutes (issue
 * 32). Last idle, first woken keeps to as few threads as the requests in
 * flight, with their caches warm. Stopping finishes every queued request
 * first, the shares aside (each must be resumed before the daemon stops).
 */
#include <pthread.h>
#include <stdlib.h>

#include "common/log.h"
#include "server/fairq.h"
#include "server/http_internal.h"

typedef struct job {
    fairq_node node; /* first: a node is its job */
    http_req *r;
    http_offload_fn fn;
} job;

typedef struct pool_t pool_t;

/* A work thread: where it waits while idle. */
typedef struct worker {
    pool_t *pool;
    pthread_cond_t cv;
    int woken;                /* set by its waker, under the pool's mu */
    struct worker *next_idle; /* on the idle stack */
} worker;

/* A pool: its queue and threads. */
struct pool_t {
    pthread_mutex_t mu;
    fairq q;
    int nthreads, stopping;
    pthread_t *threads;
    worker *workers; /* nthreads */
    worker *idle;    /* the idle ones, the last to go idle first */
};

/* compute: handlers that compute for long (big predicts, evaluations),
 * about one thread per core. wait: handlers that mostly wait (a predict
 * on a deployment's replica, http_req_offload_wait): as many threads as
 * requests may be in flight to replicas, since each blocks one. */
static pool_t pools[2] = {
    {.mu = PTHREAD_MUTEX_INITIALIZER},
    {.mu = PTHREAD_MUTEX_INITIALIZER},
};

/* Wakes the thread that went idle last, if any (pool->mu held). */
static void wake_one(pool_t *pool)
{
    worker *w = pool->idle;
    if (!w)
        return;
    pool->idle = w->next_idle;
    w->woken = 1;
    pthread_cond_signal(&w->cv);
}

static void *work(void *arg)
{
    worker *w = arg;
    pool_t *pool = w->pool;
    pthread_mutex_lock(&pool->mu);
    for (;;) {
        fairq_tenant *who = NULL;
        job *j = (job *)fairq_take(&pool->q, pool->stopping, &who);
        if (!j) {
            if (pool->stopping && pool->q.queued == 0)
                break; /* nothing is left */
            /* Nothing, or only tenants at their share: a thread that
             * finishes one of theirs takes their next itself. Idle, on
             * top of the stack, until a request (or the stop) wakes it. */
            w->woken = 0;
            w->next_idle = pool->idle;
            pool->idle = w;
            while (!w->woken)
                pthread_cond_wait(&w->cv, &pool->mu);
            continue;
        }
        pthread_mutex_unlock(&pool->mu);
        j->fn(j->r->app, j->r);
        if (!j->r->replied)
            http_reply_problem(j->r, 500, NULL,
                               "the handler for %s gave no "
                               "reply",
                               j->r->match.route->name);
        MHD_resume_connection(j->r->conn);
        free(j);
        pthread_mutex_lock(&pool->mu);
        fairq_done(&pool->q, who);
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

static void pool_stop(pool_t *pool)
{
    pthread_mutex_lock(&pool->mu);
    pool->stopping = 1;
    while (pool->idle)
        wake_one(pool);
    int n = pool->nthreads;
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < n; i++)
        pthread_join(pool->threads[i], NULL);
    pthread_mutex_lock(&pool->mu);
    for (int i = 0; pool->workers && i < n; i++)
        pthread_cond_destroy(&pool->workers[i].cv);
    free(pool->workers);
    pool->workers = NULL;
    pool->idle = NULL;
    free(pool->threads);
    pool->threads = NULL;
    pool->nthreads = 0;
    fairq_free(&pool->q);
    pthread_mutex_unlock(&pool->mu);
}

/* The threads one tenant may hold: share percent of nthreads, at least
 * one, and all of them in a pool of one. */
static int tenant_cap(int nthreads, int share)
{
    if (share <= 0 || share > 100)
        share = HTTP_TENANT_THREAD_SHARE;
    int cap = (int)((long)nthreads * share / 100);
    return cap < 1 ? 1 : cap;
}

static ty_status pool_start(pool_t *pool, int nthreads, int share, ty_err *err)
{
    pool->stopping = 0;
    fairq_init(&pool->q, tenant_cap(nthreads, share));
    if (nthreads <= 0)
        return TY_OK;
    pool->threads = calloc((size_t)nthreads, sizeof *pool->threads);
    pool->workers = calloc((size_t)nthreads, sizeof *pool->workers);
    if (!pool->threads || !pool->workers)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    pool->idle = NULL;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    /* A waiting thread needs little stack: a handler's frames and the
     * predict's buffers, which are on the heap. */
    pthread_attr_setstacksize(&attr, 1u << 20);
    for (int i = 0; i < nthreads; i++) {
        pool->workers[i].pool = pool;
        pthread_cond_init(&pool->workers[i].cv, NULL);
        if (pthread_create(&pool->threads[i], &attr, work, &pool->workers[i]) !=
            0) {
            pthread_cond_destroy(&pool->workers[i].cv);
            pthread_attr_destroy(&attr);
            return ty_fail(err, TY_EIO, NULL,
                           "cannot start the request work threads");
        }
        pool->nthreads = i + 1;
    }
    pthread_attr_destroy(&attr);
    return TY_OK;
}

ty_status http_offload_start(int nthreads, int nwait, int share, ty_err *err)
{
    ty_status s = pool_start(&pools[0], nthreads, share, err);
    if (s == TY_OK)
        s = pool_start(&pools[1], nwait, share, err);
    if (s != TY_OK)
        http_offload_stop();
    return s;
}

void http_offload_stop(void)
{
    pool_stop(&pools[0]);
    pool_stop(&pools[1]);
}

static int offload(pool_t *pool, http_req *r, http_offload_fn fn)
{
    if (r->replied || r->offloaded)
        return 0;
    job *j = malloc(sizeof *j);
    if (!j)
        return 0;
    j->r = r;
    j->fn = fn;
    int takeable = 0;
    pthread_mutex_lock(&pool->mu);
    if (pool->stopping || pool->nthreads == 0 ||
        fairq_push(&pool->q, r->key.tenant_id, &j->node, &takeable) != TY_OK) {
        pthread_mutex_unlock(&pool->mu);
        free(j);
        return 0;
    }
    r->offloaded = 1;
    MHD_suspend_connection(r->conn);
    /* A tenant at its share waits for one of its own threads, which
     * takes the request when it is free: no other needs waking. */
    if (takeable)
        wake_one(pool);
    pthread_mutex_unlock(&pool->mu);
    return 1;
}

int http_req_offload(http_req *r, http_offload_fn fn)
{
    return offload(&pools[0], r, fn);
}

int http_req_offload_wait(http_req *r, http_offload_fn fn)
{
    return offload(&pools[1], r, fn) || offload(&pools[0], r, fn);
}
