/*
 * batcher.h - a serving replica's dynamic batching policy (node/replica.h),
 * pure: given the rows of the requests waiting, oldest first, and how long
 * the oldest has waited, which of them the next batch takes and when. No
 * clock, no sockets: the replica (node/replica.c) keeps the queue and asks.
 *
 * As Triton's dynamic batcher: a batch takes whole requests in arrival
 * order while their rows fit max_batch_size. It runs
 *   - at once when it is full: its rows reach max_batch_size, or the next
 *     request waiting does not fit (waiting cannot make it fuller);
 *   - at once when some of its first requests add up to a preferred size
 *     exactly; it then takes the longest such run, that is the largest
 *     preferred size they can fill, and leaves the rest waiting;
 *   - when the oldest request has waited max_queue_delay (0: at once);
 *   - at once when flushing (the replica is draining).
 * A request of more than max_batch_size rows is a batch of its own, run at
 * once (in chunks of max_batch_size: the replica's part).
 */
#ifndef TY_BATCHER_H
#define TY_BATCHER_H

#include <stddef.h>
#include <stdint.h>

/* What a deployment's "batching" gets when it says nothing, and the
 * bounds it may ask for (deploy/deployspec.h checks a spec against them;
 * node/replica.c checks replica.json's copy). */
#define BATCHER_MAX_BATCH 4096
#define BATCHER_MAX_PREFERRED 8
#define BATCHER_DEFAULT_MAX_BATCH 32
#define BATCHER_DEFAULT_DELAY_US 500
#define BATCHER_MAX_DELAY_US 1000000

/* The policy, as replica.json's "batching" gives it (node/replica.c reads
 * and checks it). */
typedef struct {
    uint32_t max_batch_size; /* rows, 1..BATCHER_MAX_BATCH (1: no batching) */
    uint64_t max_queue_delay_ns;
    uint32_t preferred[BATCHER_MAX_PREFERRED]; /* strictly increasing */
    int npreferred;
} batcher_policy;

/* The next batch for n requests waiting, rows[i] examples each (rows[0]
 * the oldest, every one >= 1), the oldest having waited waited_ns; flush:
 * run what is there now. Returns how many requests, from the front, the
 * batch takes; 0 when none should run yet, and then *wait_ns (may be NULL)
 * is how long until one should (UINT64_MAX when nothing waits). */
size_t batcher_next(const batcher_policy *p, const uint32_t *rows, size_t n,
                    uint64_t waited_ns, int flush, uint64_t *wait_ns);

#endif
