/*
 * optim.h - optimizers: SGD (momentum, Nesterov, weight decay), Adam and
 * AdamW, as torch.optim.SGD, Adam and AdamW compute them, and gradient
 * clipping by global norm (torch.nn.utils.clip_grad_norm_).
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

#define NN_OPTIM_MAX_SLOTS 2

/* hyperparameters.optimizer (train.h keeps it in train_hparams). */
typedef enum {
    NN_OPTIM_SGD = 0,
    NN_OPTIM_ADAM = 1,
    NN_OPTIM_ADAMW = 2
} nn_optim_kind;

/* What an optimizer is set up from: the optimizer's own copy of the
 * hyperparameters it reads (train_hparams_optim fills it from a
 * train_hparams), so that this module does not depend on the trainer's. */
typedef struct {
    nn_optim_kind kind;
    double lr;
    double momentum, weight_decay; /* sgd; weight_decay adam/adamw too */
    double beta1, beta2, eps;      /* adam, adamw */
    int nesterov;                  /* sgd */
} nn_optim_config;

typedef struct {
    nn_optim_kind kind;
    double lr; /* of the next step: the trainer sets it from
                                  the schedule before each step */
    double momentum, weight_decay, beta1, beta2, eps;
    uint64_t param_count;
    uint64_t t;           /* steps taken */
    uint32_t n_slots;     /* state arrays: 0, 1 (momentum) or 2 (m, v) */
    float *state;         /* n_slots * param_count floats, owned */
    const nn_backend *be; /* whose memory state is */
    const nn_exec *ex;    /* borrowed, for release */
    int nesterov;         /* sgd */
    uint64_t bytes;       /* taken from be->alloc for state */
    /* NULL, or NN_OPTIM_DYN floats of be's memory the kernels read this
     * step's values from (nn_optim_args.dyn); the caller uploads
     * nn_optim_dyn_values into it before each step. Borrowed. */
    const float *dyn;
} nn_optim;

/* The state slots cfg's optimizer keeps: 0, 1 or 2. */
uint32_t nn_optim_slots(nn_optim_config cfg);
/* The bytes nn_optim_init_on takes from the backend for param_count
 * parameters under cfg. */
uint64_t nn_optim_state_bytes(nn_optim_config cfg, uint64_t param_count);

/* Sets up an optimizer for param_count parameters with zeroed state. On
 * error TY_ENOMEM and o is zeroed. */
ty_status nn_optim_init(nn_optim *o, nn_optim_config cfg, uint64_t param_count,
                        ty_err *err);
/* nn_optim_init with the state in be's memory (zeroed there); ex (may be
 * NULL on the CPU) must outlive o, which nn_optim_free releases through. */
ty_status nn_optim_init_on(nn_optim *o, nn_optim_config cfg,
                           uint64_t param_count, const nn_backend *be,
                           const nn_exec *ex, ty_err *err);
void nn_optim_free(nn_optim *o);

/* One step over params with grads (both param_count floats), on be in ex
 * (may be NULL); grads are zeroed. */
void nn_optim_step(nn_optim *o, const nn_backend *be, const nn_exec *ex,
                   float *params, float *grads);

/* The values that change from step to step (nn_optim_dyn_slot order) for
 * step t (1-based: o->t + 1 is the next) at o->lr, exactly as
 * nn_optim_step passes them. */
void nn_optim_dyn_values(const nn_optim *o, uint64_t t,
                         float out[NN_OPTIM_DYN]);

/* Scales grads (len floats) as torch.nn.utils.clip_grad_norm_(max_norm)
 * does: with norm the L2 norm of all of them (summed in double), by
 * max_norm / (norm + 1e-6) when that is below 1. Returns the norm before
 * clipping. */
double nn_optim_clip_grad_norm(const nn_backend *be, const nn_exec *ex,
                               float *grads, uint64_t len, double max_norm);
/* The same scaling with the norm given (the whole gradient's, of which
 * grads may be a part: ZeRO-1's shard with the norm summed across ranks). */
void nn_optim_clip_to_norm(const nn_backend *be, const nn_exec *ex,
                           float *grads, uint64_t len, double norm,
                           double max_norm);

/* State slot k (param_count floats) and its name in checkpoints
 * ("momentum_buffer", "exp_avg", "exp_avg_sq", as PyTorch's state dict). */
float *nn_optim_slot(const nn_optim *o, uint32_t k);
const char *nn_optim_slot_name(const nn_optim *o, uint32_t k);

#endif
