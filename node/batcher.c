/*
 * batcher.c - the dynamic batching policy (see batcher.h): choosing the
 * next batch.
 */
#include "node/batcher.h"

static int preferred(const batcher_policy *p, uint64_t rows)
{
    for (int i = 0; i < p->npreferred; i++)
        if (p->preferred[i] == rows)
            return 1;
    return 0;
}

size_t batcher_next(const batcher_policy *p, const uint32_t *rows, size_t n,
                    uint64_t waited_ns, int flush, uint64_t *wait_ns)
{
    uint64_t unused;
    if (!wait_ns)
        wait_ns = &unused;
    *wait_ns = UINT64_MAX;
    if (n == 0)
        return 0;
    const uint64_t max = p->max_batch_size;
    if (rows[0] > max)
        return 1; /* alone, in chunks */
    /* The whole requests that fit, and the longest run of them that fills
     * a preferred size. */
    size_t fit = 0, best_preferred = 0;
    uint64_t total = 0;
    while (fit < n && total + rows[fit] <= max) {
        total += rows[fit++];
        if (preferred(p, total))
            best_preferred = fit;
    }
    if (total == max || fit < n || flush || waited_ns >= p->max_queue_delay_ns)
        return fit;
    if (best_preferred)
        return best_preferred;
    *wait_ns = p->max_queue_delay_ns - waited_ns;
    return 0;
}
