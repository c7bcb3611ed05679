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
 * The queue is a mutex and a condition variable: what comes here costs
 * milliseconds, so the lock is nothing beside it. Stopping finishes every
 * queued request first (each must be resumed before the daemon stops).
 */
#include <pthread.h>
#include <stdlib.h>

#include "common/log.h"
#include "server/http_internal.h"

typedef struct job {
    http_req *r;
    http_offload_fn fn;
    struct job *next;
} job;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t ready;
    job *head, *tail;
    int nthreads, stopping;
    pthread_t *threads;
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .ready = PTHREAD_COND_INITIALIZER};

static void *work(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        while (!pool.head && !pool.stopping)
            pthread_cond_wait(&pool.ready, &pool.mu);
        job *j = pool.head;
        if (!j)
            break; /* stopping, and nothing is left */
        pool.head = j->next;
        if (!pool.head)
            pool.tail = NULL;
        pthread_mutex_unlock(&pool.mu);
        j->fn(j->r->app, j->r);
        if (!j->r->replied)
            http_reply_problem(j->r, 500, NULL,
                               "the handler for %s gave no "
                               "reply",
                               j->r->match.route->name);
        MHD_resume_connection(j->r->conn);
        free(j);
        pthread_mutex_lock(&pool.mu);
    }
    pthread_mutex_unlock(&pool.mu);
    return NULL;
}

ty_status http_offload_start(int nthreads, ty_err *err)
{
    if (nthreads <= 0)
        return TY_OK;
    pool.threads = calloc((size_t)nthreads, sizeof *pool.threads);
    if (!pool.threads)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    pool.stopping = 0;
    for (int i = 0; i < nthreads; i++) {
        if (pthread_create(&pool.threads[i], NULL, work, NULL) != 0) {
            http_offload_stop();
            return ty_fail(err, TY_EIO, NULL,
                           "cannot start the request work threads");
        }
        pool.nthreads = i + 1;
    }
    return TY_OK;
}

void http_offload_stop(void)
{
    pthread_mutex_lock(&pool.mu);
    pool.stopping = 1;
    pthread_cond_broadcast(&pool.ready);
    int n = pool.nthreads;
    pthread_mutex_unlock(&pool.mu);
    for (int i = 0; i < n; i++)
        pthread_join(pool.threads[i], NULL);
    pthread_mutex_lock(&pool.mu);
    free(pool.threads);
    pool.threads = NULL;
    pool.nthreads = 0;
    pthread_mutex_unlock(&pool.mu);
}

int http_req_offload(http_req *r, http_offload_fn fn)
{
    if (r->replied || r->offloaded)
        return 0;
    job *j = malloc(sizeof *j);
    if (!j)
        return 0;
    j->r = r;
    j->fn = fn;
    j->next = NULL;
    pthread_mutex_lock(&pool.mu);
    if (pool.stopping || pool.nthreads == 0) {
        pthread_mutex_unlock(&pool.mu);
        free(j);
        return 0;
    }
    r->offloaded = 1;
    MHD_suspend_connection(r->conn);
    if (pool.tail)
        pool.tail->next = j;
    else
        pool.head = j;
    pool.tail = j;
    pthread_cond_signal(&pool.ready);
    pthread_mutex_unlock(&pool.mu);
    return 1;
}
