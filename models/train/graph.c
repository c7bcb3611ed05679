/*
 * graph.c - what a training run on a device (a backend that is not
 * host-visible) keeps off the host's critical path: the epoch's running
 * loss and correct count, which the loss kernels add into backend memory
 * (nn_exec.acc) and the trainer reads only when it reports, checkpoints or
 * ends an epoch; the optimizer's per-step values (learning rate, Adam's
 * bias corrections, AdamW's decay), uploaded before each step into backend
 * memory the kernels read (nn_optim_args.dyn); and the decision whether
 * the run captures one full-size step as a graph and replays it (the
 * capture itself is in run.c's device_step, which calls the same
 * train_step and optimizer_step the op-by-op path runs).
 *
 * Invariant: between two reads of acc no host code looks at a step's
 * loss, so a step never waits for the device; a loss that stops being
 * finite is caught at the next read and named by the range of steps since
 * the last one.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "models/train/train_internal.h"

/* acc (doubles) then dyn (floats) after the gradients. */
static uint64_t acc_offset(uint64_t p)
{
    return (p * sizeof(float) + sizeof(double) - 1) / sizeof(double) *
           sizeof(double);
}

uint64_t train_grads_bytes(const nn_backend *be, uint64_t p)
{
    if (!be || nn_backend_host_visible(be))
        return p * sizeof(float);
    return acc_offset(p) + NN_ACC_COUNT * sizeof(double) +
           NN_OPTIM_DYN * sizeof(float);
}

/* Whether a (or a residual block inside it) has a dropout layer. */
static int has_dropout(const nn_arch *a)
{
    for (uint32_t i = 0; a && i < a->n_layers; i++) {
        const nn_layer *l = &a->layers[i];
        if (l->type == NN_LAYER_DROPOUT || has_dropout(l->body) ||
            has_dropout(l->proj))
            return 1;
    }
    return 0;
}

void train_graph_off(trainer *t, const char *fmt, ...)
{
    t->graph_on = 0;
    if (t->graph_reason)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->graph_why, sizeof t->graph_why, fmt, ap);
    va_end(ap);
    t->graph_reason = t->graph_why;
}

void train_graph_setup(trainer *t)
{
    const uint64_t p = t->arch.param_count ? t->arch.param_count : 1;
    if (t->world > 1) {
        /* A device rank of a data-parallel gang (dp.c) steps op by op and
         * brings each step's loss to the host, where it joins the step's
         * small all-reduce (as on the CPU): no acc, no dyn (the optimizer
         * takes its values as arguments), no graph. The tail of the
         * allocation carries the host's all-reduces instead (dp_dev). */
        _Static_assert(NN_ACC_COUNT * sizeof(double) +
                               NN_OPTIM_DYN * sizeof(float) >=
                           DP_SCALARS * sizeof(float),
                       "the grads allocation's tail holds dp_dev");
        t->acc = NULL;
        t->dyn = NULL;
        t->opt.dyn = NULL;
        t->dp_dev = (float *)(void *)((char *)t->grads + acc_offset(p));
        train_graph_off(t,
                        "data-parallel training (world %d) steps op by "
                        "op: each step's loss joins its all-reduce",
                        t->world);
        return;
    }
    t->acc = (double *)(void *)((char *)t->grads + acc_offset(p));
    t->dyn = (float *)(t->acc + NN_ACC_COUNT);
    t->be->zero(t->ws->ex, t->acc, NN_ACC_COUNT * sizeof(double));
    t->opt.dyn = t->dyn;

    /* Version 1 captures only steps whose host side never changes: no
     * host-drawn dropout seeds, one minibatch a step, no norm read back
     * for clipping, no fp16 loss scaling (its skip decision is read on
     * the host). */
    const train_hparams *hp = t->hp;
    t->graph_on = 1;
    if (!hp->cuda_graph)
        train_graph_off(t, "hyperparameters.cuda_graph is false");
    else if (!t->be->graph_begin || !t->be->graph_end || !t->be->graph_launch ||
             !t->be->graph_release)
        train_graph_off(t, "the %s backend cannot capture graphs", t->be->name);
    else if (has_dropout(&t->arch))
        train_graph_off(t, "the network has dropout, whose masks are "
                           "drawn on the host each step");
    else if (hp->accumulation_steps > 1)
        train_graph_off(t, "accumulation_steps is above 1");
    else if (hp->clip_grad_norm > 0.0)
        train_graph_off(t, "clip_grad_norm reads the gradient norm on the "
                           "host each step");
    else if (t->precision == NN_DT_F16)
        train_graph_off(t, "fp16 loss scaling decides on the host each step "
                           "whether to skip it");
}

void train_graph_free(trainer *t)
{
    if (t->graph && t->ws) {
        t->be->graph_release(t->ws->ex, t->graph);
        t->graph = NULL;
    }
}

/* Regression kernels sum over every output; the trainer counts per
 * example. */
static double loss_per_example(const trainer *t)
{
    return t->arch.task == TY_TASK_REGRESSION ? (double)t->arch.num_outputs
                                              : 1.0;
}

void train_sums_upload(trainer *t)
{
    /* From the host's stack: an upload from memory that is not the
     * backend's staging has read it when it returns. */
    double a[NN_ACC_COUNT] = {0};
    a[NN_ACC_LOSS] = t->loss_sum * loss_per_example(t);
    a[NN_ACC_CORRECT] = (double)t->hits;
    t->be->upload(t->ws->ex, t->acc, a, sizeof a);
    t->acc_step = t->step;
}

ty_status train_sums_read(trainer *t, uint32_t e, ty_err *err)
{
    if (!t->acc || t->acc_step == t->step)
        return TY_OK;
    double a[NN_ACC_COUNT];
    t->be->download(t->ws->ex, a, t->acc, sizeof a);
    ty_status st = t->be->status(t->ws->ex, err);
    if (st != TY_OK) {
        ty_err_prefix(err, "training on %s", t->be->name);
        return st;
    }
    if (!isfinite(a[NN_ACC_LOSS]))
        return ty_fail(err, TY_EINVAL, "hyperparameters.learning_rate",
                       "the training loss became %s at epoch %u, between "
                       "steps %llu and %llu; try a lower learning_rate (now "
                       "%g)",
                       isnan(a[NN_ACC_LOSS]) ? "NaN" : "infinite", e + 1,
                       (unsigned long long)t->acc_step + 1,
                       (unsigned long long)t->step, t->hp->learning_rate);
    t->loss_sum = a[NN_ACC_LOSS] / loss_per_example(t);
    t->hits = (uint64_t)a[NN_ACC_CORRECT];
    t->acc_step = t->step;
    return TY_OK;
}

void train_dyn_upload(trainer *t)
{
    float v[NN_OPTIM_DYN];
    t->lr = train_lr_at(t->hp, t->step, t->steps_per_epoch, t->total_steps);
    t->opt.lr = t->lr;
    nn_optim_dyn_values(&t->opt, t->opt.t + 1, v);
    t->be->upload(t->ws->ex, t->dyn, v, sizeof v);
}
