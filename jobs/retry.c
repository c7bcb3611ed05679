/* retry.c - capped exponential back-off (see retry.h). */
#include "jobs/retry.h"

#include <math.h>

double retry_backoff_seconds(int attempt, double base, double cap)
{
    if (isnan(base) || base < 0.0)
        base = RETRY_BACKOFF_BASE_S;
    if (isnan(cap) || cap < 0.0)
        cap = RETRY_BACKOFF_CAP_S;
    if (attempt < 1)
        attempt = 1;
    if (base == 0.0)
        return 0.0;
    double wait = base;
    /* Doubling stops at the cap (or infinity), so a huge attempt costs
     * no overflow and at most about 2100 doublings. */
    for (int i = 1; i < attempt && wait < cap; i++)
        wait *= 2.0;
    return wait < cap ? wait : cap;
}
