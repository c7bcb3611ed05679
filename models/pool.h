/*
 * pool.h - a small pool of worker threads for splitting one piece of work
 * (a GEMM, an optimizer step, a minibatch gather) across cores.
 *
 * A call is split into as many parts as the pool has threads; the caller
 * and the workers claim parts until none is left, and the call returns when
 * every part is done. Workers spin briefly between calls (a training step
 * issues a dozen calls a millisecond, too fast for a sleep and wake-up) and
 * then sleep on a condition variable. A pool serves one calling thread at a
 * time. How work is split depends only on the part count, so results are
 * reproducible for a given thread count.
 */
#ifndef TY_POOL_H
#define TY_POOL_H

#include <stddef.h>

typedef struct nn_pool nn_pool;

/* fn runs once per part, part in [0, parts). */
typedef void (*nn_pool_fn)(void *arg, int part, int parts);

/* A pool of threads - 1 workers (threads >= 1). NULL when threads or memory
 * cannot be had; callers then run serially (nn_pool_run(NULL, ...)). */
nn_pool *nn_pool_create(int threads);
void nn_pool_destroy(nn_pool *p);

/* Number of parts nn_pool_run splits into (1 for NULL). */
int nn_pool_threads(const nn_pool *p);

/* Runs fn over every part and waits for all of them. p may be NULL. */
void nn_pool_run(nn_pool *p, nn_pool_fn fn, void *arg);

/* [*begin, *end) of n items for part of parts, boundaries multiples of
 * align (the last part takes the rest). */
void nn_pool_range(size_t n, int part, int parts, size_t align, size_t *begin,
                   size_t *end);

#endif
