/*
 * loss_scaler.h - fp16 dynamic loss scaling, as torch.cuda.amp.GradScaler
 * does it with its defaults: the loss gradient is multiplied by a scale S
 * (initially 2^16) so small gradients survive fp16; after backward the
 * gradients are checked, and a step whose gradients hold an inf or NaN is
 * skipped (gradients dropped, optimizer untouched) and halves S, while
 * 2000 consecutive good steps double it. Good steps divide the gradients
 * by S before clipping and the optimizer.
 *
 * This is only the bookkeeping (no kernels), so tests drive it directly;
 * the trainer (run.c optimizer_step) checks the gradients and applies
 * the decision. S stays a power of two, so scaling and unscaling are
 * exact in float.
 */
#ifndef TY_LOSS_SCALER_H
#define TY_LOSS_SCALER_H

#include <stddef.h>
#include <stdint.h>

#define LOSS_SCALER_INIT 65536.0f  /* GradScaler init_scale */
#define LOSS_SCALER_GROWTH 2.0f    /* growth_factor */
#define LOSS_SCALER_BACKOFF 0.5f   /* backoff_factor */
#define LOSS_SCALER_INTERVAL 2000u /* growth_interval */

typedef struct {
    float scale;         /* S, multiplied into the loss gradient */
    uint32_t good_steps; /* consecutive finite steps since S changed
                                  (GradScaler's growth tracker) */
    uint64_t skipped;    /* steps skipped, whole run */
} loss_scaler;

/* A scaler at its initial state. */
void loss_scaler_init(loss_scaler *s);

/* Settles one optimizer step whose gradients were finite or not: returns 1
 * when the step goes ahead (the caller unscales by the S it had before this
 * call), 0 when it is skipped. Updates S as GradScaler.update: backoff and
 * a reset count on a skip; the count up on a good step, and at the
 * interval S doubles (unless that would overflow float) and the count
 * restarts. */
int loss_scaler_update(loss_scaler *s, int finite);

/* The state as text for a checkpoint ("65536 12 3": S, good steps,
 * skipped), into buf; and back. Parse returns 0 on anything malformed (S
 * must be a positive finite float) and then leaves *s alone. */
void loss_scaler_format(const loss_scaler *s, char *buf, size_t n);
int loss_scaler_parse(loss_scaler *s, const char *text);

#endif
