/*
 * optim.h - optimizers: SGD (momentum, weight decay) and Adam, as
 * torch.optim.SGD and torch.optim.Adam compute them.
 *
 * The optimizer's state (momentum buffer, or Adam's m and v) is one
 * allocation laid out like the parameter block, so each state slot is a
 * whole-model array and a step is one kernel call over every parameter.
 * A step consumes the gradients: the kernels zero them for the next
 * accumulation.
 */
#ifndef TY_OPTIM_H
#define TY_OPTIM_H

#include <stdint.h>

#include "common/ty.h"
#include "models/backend.h"
#include "models/train.h"

#define NN_OPTIM_MAX_SLOTS 2

typedef struct {
    train_optimizer kind;
    double lr, momentum, weight_decay, beta1, beta2, eps;
    uint64_t param_count;
    uint64_t t;                /* steps taken */
    uint32_t n_slots;          /* state arrays: 0, 1 (momentum) or 2 (m, v) */
    float *state;              /* n_slots * param_count floats, owned */
} nn_optim;

/* Sets up an optimizer for param_count parameters with zeroed state. On
 * error TY_ENOMEM and o is zeroed. */
ty_status nn_optim_init(nn_optim *o, const train_hparams *hp,
                        uint64_t param_count, ty_err *err);
void nn_optim_free(nn_optim *o);

/* One step over params with grads (both param_count floats), on be in ex
 * (may be NULL); grads are zeroed. */
void nn_optim_step(nn_optim *o, const nn_backend *be, const nn_exec *ex,
                   float *params, float *grads);

/* State slot k (param_count floats) and its name in checkpoints
 * ("momentum_buffer", "exp_avg", "exp_avg_sq", as PyTorch's state dict). */
float *nn_optim_slot(const nn_optim *o, uint32_t k);
const char *nn_optim_slot_name(const nn_optim *o, uint32_t k);

#endif
