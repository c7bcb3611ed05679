/*
 * loss_scaler.c - fp16 dynamic loss scaling's bookkeeping (see
 * loss_scaler.h): torch's _amp_update_scale_ in plain C.
 */
#include "models/train/loss_scaler.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

void loss_scaler_init(loss_scaler *s)
{
    s->scale = LOSS_SCALER_INIT;
    s->good_steps = 0;
    s->skipped = 0;
}

int loss_scaler_update(loss_scaler *s, int finite)
{
    if (!finite) {
        s->scale *= LOSS_SCALER_BACKOFF;
        s->good_steps = 0;
        s->skipped++;
        return 0;
    }
    if (++s->good_steps == LOSS_SCALER_INTERVAL) {
        float grown = s->scale * LOSS_SCALER_GROWTH;
        if (isfinite(grown))
            s->scale = grown;
        s->good_steps = 0;
    }
    return 1;
}

void loss_scaler_format(const loss_scaler *s, char *buf, size_t n)
{
    /* %.9g writes every float exactly enough to read it back. */
    snprintf(buf, n, "%.9g %" PRIu32 " %" PRIu64, (double)s->scale,
             s->good_steps, s->skipped);
}

int loss_scaler_parse(loss_scaler *s, const char *text)
{
    double scale;
    uint32_t good;
    uint64_t skipped;
    int used = 0;
    if (!text || strchr(text, '-') ||
        sscanf(text, "%lf %" SCNu32 " %" SCNu64 "%n", &scale, &good, &skipped,
               &used) != 3 ||
        text[used] != '\0' || !(scale > 0.0) || !isfinite((float)scale) ||
        good >= LOSS_SCALER_INTERVAL)
        return 0;
    s->scale = (float)scale;
    s->good_steps = good;
    s->skipped = skipped;
    return 1;
}
