/*
 * optim.c - SGD, Adam and AdamW steps and gradient clipping (see optim.h). The per-step scalars (Adam's
 * bias corrections) are computed in double, as PyTorch does in Python, and
 * handed to the backend kernel as floats.
 */
#include "models/train/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

ty_status nn_optim_init(nn_optim *o, nn_optim_config cfg, uint64_t param_count,
                        ty_err *err)
{
    return nn_optim_init_on(o, cfg, param_count, &nn_backend_cpu, NULL, err);
}

uint32_t nn_optim_slots(nn_optim_config cfg)
{
    if (cfg.kind != NN_OPTIM_SGD)
        return 2;
    return cfg.momentum > 0.0 ? 1 : 0;
}

uint64_t nn_optim_state_bytes(nn_optim_config cfg, uint64_t param_count)
{
    return (uint64_t)nn_optim_slots(cfg) * (param_count ? param_count : 1) *
           sizeof(float);
}

ty_status nn_optim_init_on(nn_optim *o, nn_optim_config cfg,
                           uint64_t param_count, const nn_backend *be,
                           const nn_exec *ex, ty_err *err)
{
    memset(o, 0, sizeof *o);
    o->be = be;
    o->ex = ex;
    o->kind = cfg.kind;
    o->lr = cfg.lr;
    o->momentum = cfg.momentum;
    o->weight_decay = cfg.weight_decay;
    o->beta1 = cfg.beta1;
    o->beta2 = cfg.beta2;
    o->eps = cfg.eps;
    o->param_count = param_count;
    o->nesterov = cfg.nesterov;
    o->n_slots = nn_optim_slots(cfg);
    if (o->n_slots) {
        const size_t bytes = (size_t)nn_optim_state_bytes(cfg, param_count);
        o->state = be->alloc(ex, bytes);
        if (o->state)
            be->zero(ex, o->state, bytes);
        if (!o->state) {
            memset(o, 0, sizeof *o);
            return ty_fail(err, TY_ENOMEM, NULL,
                           "out of memory for the optimizer state");
        }
        o->bytes = bytes;
    }
    return TY_OK;
}

void nn_optim_free(nn_optim *o)
{
    if (!o)
        return;
    if (o->be)
        o->be->release(o->ex, o->state);
    memset(o, 0, sizeof *o);
}

float *nn_optim_slot(const nn_optim *o, uint32_t k)
{
    return k < o->n_slots ? o->state + (size_t)k * o->param_count : NULL;
}

const char *nn_optim_slot_name(const nn_optim *o, uint32_t k)
{
    if (o->kind != NN_OPTIM_SGD)
        return k == 0 ? "exp_avg" : "exp_avg_sq";
    return "momentum_buffer";
}

void nn_optim_dyn_values(const nn_optim *o, uint64_t t, float out[NN_OPTIM_DYN])
{
    out[NN_OPTIM_DYN_LR] = (float)o->lr;
    out[NN_OPTIM_DYN_STEP_SIZE] = 0.0f;
    out[NN_OPTIM_DYN_BIAS_CORRECTION2_SQRT] = 0.0f;
    out[NN_OPTIM_DYN_DECAY_SCALE] = 0.0f;
    /* torch: param.mul_(1 - lr * weight_decay), then Adam without L2. */
    if (o->kind == NN_OPTIM_ADAMW)
        out[NN_OPTIM_DYN_DECAY_SCALE] = (float)(1.0 - o->lr * o->weight_decay);
    if (o->kind != NN_OPTIM_SGD) {
        double bc1 = 1.0 - pow(o->beta1, (double)t);
        double bc2 = 1.0 - pow(o->beta2, (double)t);
        out[NN_OPTIM_DYN_STEP_SIZE] = (float)(o->lr / bc1);
        out[NN_OPTIM_DYN_BIAS_CORRECTION2_SQRT] = (float)sqrt(bc2);
    }
}

void nn_optim_step(nn_optim *o, const nn_backend *be, const nn_exec *ex,
                   float *params, float *grads)
{
    o->t++;
    float dyn[NN_OPTIM_DYN];
    nn_optim_dyn_values(o, o->t, dyn);
    nn_optim_args s = {
        .lr = dyn[NN_OPTIM_DYN_LR],
        .weight_decay = (float)o->weight_decay,
        .momentum = (float)o->momentum,
        .beta1 = (float)o->beta1,
        .beta2 = (float)o->beta2,
        .eps = (float)o->eps,
        .one_minus_beta1 = (float)(1.0 - o->beta1),
        .one_minus_beta2 = (float)(1.0 - o->beta2),
        .nesterov = o->nesterov,
        .step_size = dyn[NN_OPTIM_DYN_STEP_SIZE],
        .bias_correction2_sqrt = dyn[NN_OPTIM_DYN_BIAS_CORRECTION2_SQRT],
        .decay_scale = dyn[NN_OPTIM_DYN_DECAY_SCALE],
        .dyn = o->dyn,
    };
    if (o->kind == NN_OPTIM_ADAMW) {
        s.decoupled = 1;
        s.weight_decay = 0.0f;
    }
    if (o->kind != NN_OPTIM_SGD)
        be->adam(ex, params, grads, nn_optim_slot(o, 0), nn_optim_slot(o, 1),
                 o->param_count, &s);
    else
        be->sgd(ex, params, grads, nn_optim_slot(o, 0), o->param_count, &s);
}

double nn_optim_clip_grad_norm(const nn_backend *be, const nn_exec *ex,
                               float *grads, uint64_t len, double max_norm)
{
    double norm = sqrt(be->sum_squares(ex, grads, (size_t)len));
    nn_optim_clip_to_norm(be, ex, grads, len, norm, max_norm);
    return norm;
}

void nn_optim_clip_to_norm(const nn_backend *be, const nn_exec *ex,
                           float *grads, uint64_t len, double norm,
                           double max_norm)
{
    double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0)
        be->scale(ex, grads, (size_t)len, (float)coef);
}
