/*
 * pool.c - worker threads for splitting work (see pool.h).
 *
 * A call splits into `threads` parts (chunks). Chunks are claimed, not
 * assigned: the caller and the workers take the next unclaimed chunk until
 * none is left, so a worker that is slow to wake (or preempted by another
 * process) simply leaves its chunk to the caller. Which thread runs a chunk
 * never changes what the chunk computes, so results stay reproducible.
 *
 * state packs (generation << 32 | next chunk). The caller writes fn and arg,
 * zeroes done, then stores a new generation with next 0 (release). A claim is
 * a compare-and-swap that checks the generation, so a worker still looking
 * at an old call can never take a chunk of a new one, and fn/arg are only
 * read after a successful claim (acquire), while the call cannot finish.
 * Each finished chunk adds 1 to done (release); the caller returns when done
 * equals the chunk count (acquire).
 *
 * Waiting: a short spin of pause instructions (the next call of a training
 * step usually comes within microseconds), then sched_yield, so a pool with
 * more threads than free cores still makes progress, then - for a worker
 * with no news for a few milliseconds - sleep on cv. Generations are
 * published under mu and a sleeper re-checks under mu before waiting, so no
 * wake-up is lost.
 */
#include "models/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#define SPIN_PAUSES 4000 /* tens of microseconds */
#define SPIN_YIELDS 2000 /* then a few milliseconds of sched_yield */

typedef struct {
    nn_pool *pool;
    pthread_t tid;
} worker;

struct nn_pool {
    int threads;     /* also the chunk count of every call */
    worker *workers; /* threads - 1 */
    int started;     /* workers running */
    nn_pool_fn fn;   /* the current call; see the file comment */
    void *arg;
    uint32_t gen; /* caller's copy of the current generation */
    _Atomic uint64_t state;
    _Atomic int done;
    _Atomic int quit;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int sleepers; /* under mu */
};

/* One round of waiting; returns 0 once the caller should block instead. */
static int wait_round(int *spins, int may_block)
{
    if (*spins < SPIN_PAUSES) {
        CPU_RELAX();
    } else {
        if (may_block && *spins >= SPIN_PAUSES + SPIN_YIELDS)
            return 0;
        sched_yield();
    }
    (*spins)++;
    return 1;
}

static uint32_t state_gen(uint64_t v) { return (uint32_t)(v >> 32); }

/* Claims the next chunk of generation gen into *chunk; 0 when none is left
 * (or the generation has moved on). */
static int claim(nn_pool *p, uint32_t gen, int *chunk)
{
    uint64_t v = atomic_load_explicit(&p->state, memory_order_acquire);
    for (;;) {
        if (state_gen(v) != gen || (v & 0xffffffffu) >= (uint64_t)p->threads)
            return 0;
        if (atomic_compare_exchange_weak_explicit(&p->state, &v, v + 1,
                                                  memory_order_acq_rel,
                                                  memory_order_acquire)) {
            *chunk = (int)(v & 0xffffffffu);
            return 1;
        }
    }
}

static void run_chunks(nn_pool *p, uint32_t gen)
{
    int chunk;
    while (claim(p, gen, &chunk)) {
        p->fn(p->arg, chunk, p->threads);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
    }
}

static void *worker_main(void *x)
{
    nn_pool *p = ((worker *)x)->pool;
    uint32_t seen = 0;
    for (;;) {
        uint32_t g;
        int spins = 0;
        while ((g = state_gen(atomic_load_explicit(
                    &p->state, memory_order_acquire))) == seen) {
            if (wait_round(&spins, 1))
                continue;
            pthread_mutex_lock(&p->mu);
            p->sleepers++;
            while (state_gen(atomic_load_explicit(
                       &p->state, memory_order_acquire)) == seen)
                pthread_cond_wait(&p->cv, &p->mu);
            p->sleepers--;
            pthread_mutex_unlock(&p->mu);
            spins = 0;
        }
        seen = g;
        if (atomic_load_explicit(&p->quit, memory_order_acquire))
            return NULL;
        run_chunks(p, g);
    }
}

/* Starts generation p->gen + 1 with its first chunk unclaimed. */
static void publish(nn_pool *p)
{
    p->gen++;
    pthread_mutex_lock(&p->mu);
    atomic_store_explicit(&p->state, (uint64_t)p->gen << 32,
                          memory_order_release);
    if (p->sleepers)
        pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

nn_pool *nn_pool_create(int threads)
{
    if (threads < 1)
        return NULL;
    nn_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->threads = threads;
    atomic_init(&p->state, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->quit, 0);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (threads > 1) {
        p->workers = calloc((size_t)threads - 1, sizeof *p->workers);
        if (!p->workers) {
            nn_pool_destroy(p);
            return NULL;
        }
        for (int i = 0; i < threads - 1; i++) {
            p->workers[i].pool = p;
            if (pthread_create(&p->workers[i].tid, NULL, worker_main,
                               &p->workers[i]) != 0) {
                nn_pool_destroy(p);
                return NULL;
            }
            p->started++;
        }
    }
    return p;
}

void nn_pool_destroy(nn_pool *p)
{
    if (!p)
        return;
    if (p->started) {
        atomic_store_explicit(&p->quit, 1, memory_order_release);
        publish(p);
        for (int i = 0; i < p->started; i++)
            pthread_join(p->workers[i].tid, NULL);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->workers);
    free(p);
}

int nn_pool_threads(const nn_pool *p) { return p ? p->threads : 1; }

void nn_pool_run(nn_pool *p, nn_pool_fn fn, void *arg)
{
    if (!p || p->threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    publish(p);
    run_chunks(p, p->gen);
    int spins = 0;
    while (atomic_load_explicit(&p->done, memory_order_acquire) != p->threads)
        wait_round(&spins, 0);
}

void nn_pool_range(size_t n, int part, int parts, size_t align, size_t *begin,
                   size_t *end)
{
    size_t chunk = (n + (size_t)parts - 1) / (size_t)parts;
    chunk = (chunk + align - 1) / align * align;
    size_t b = chunk * (size_t)part, e = b + chunk;
    if (part == parts - 1 || e > n)
        e = n;
    if (b > n)
        b = n;
    *begin = b;
    *end = e;
}
