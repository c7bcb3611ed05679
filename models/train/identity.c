/*
 * identity.c - a training run's identity (train_run_identity): what a
 * checkpoint records of the run that wrote it, so a resume into another
 * job, data split or trajectory is refused (checkpoint.c compares it).
 * Everything that shapes the trajectory is in it; epochs are not (a run
 * may grow them on resume), and the hyperparameters added later are left
 * out at their defaults, so older checkpoints still resume. Split from
 * run.c, which stays the loop.
 */
#include <stdio.h>

#include "models/train/loader.h"
#include "models/train/train_internal.h"

/* FNV-1a over the training indices: ties a checkpoint to its data split. */
static uint64_t index_fingerprint(const uint32_t *idx, uint32_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t v = idx ? idx[i] : i;
        for (int b = 0; b < 4; b++) {
            h ^= (v >> (8 * b)) & 0xff;
            h *= 0x100000001b3ull;
        }
    }
    return h;
}

static json_t *schedule_json(const train_lr_schedule *s)
{
    switch (s->kind) {
        case TRAIN_LR_STEP:
            return json_pack("{s:s, s:I, s:f}", "type", "step", "step_epochs",
                             (json_int_t)s->step_epochs, "gamma", s->gamma);
        case TRAIN_LR_COSINE:
            return json_pack("{s:s, s:f}", "type", "cosine", "min_lr",
                             s->min_lr);
        default: return json_pack("{s:s}", "type", "constant");
    }
}

/* The hyperparameters added with schedules, clipping, accumulation and
 * losses, into the identity's "hparams". Each is left out at its default,
 * so checkpoints written before they existed still resume. */
static int add_training_identity(const trainer *t, json_t *id)
{
    const train_hparams *hp = t->hp;
    const nn_loss_spec *loss = &t->arch.loss;
    json_t *h = json_object_get(id, "hparams");
    if (!h)
        return -1;
    int default_loss =
        (loss->kind == NN_LOSS_CROSS_ENTROPY && loss->label_smoothing == 0.0) ||
        loss->kind == NN_LOSS_MSE;
    int bad = 0;
    if (hp->nesterov)
        bad = bad || json_object_set_new(h, "nesterov", json_true());
    if (hp->lr_schedule.kind != TRAIN_LR_CONSTANT)
        bad = bad || json_object_set_new(h, "lr_schedule",
                                         schedule_json(&hp->lr_schedule));
    if (hp->warmup_steps)
        bad = bad || json_object_set_new(h, "warmup_steps",
                                         json_integer(hp->warmup_steps));
    if (hp->clip_grad_norm > 0.0)
        bad = bad || json_object_set_new(h, "clip_grad_norm",
                                         json_real(hp->clip_grad_norm));
    if (t->accum != 1)
        bad = bad || json_object_set_new(h, "accumulation_steps",
                                         json_integer(t->accum));
    if (!default_loss)
        bad = bad || json_object_set_new(h, "loss", nn_loss_to_json(loss));
    /* The precision that runs (a CPU asked for bf16 trains fp32 and
     * matches an fp32 checkpoint). */
    if (t->precision != NN_DT_F32)
        bad = bad ||
              json_object_set_new(h, "precision",
                                  json_string(nn_dtype_name(t->precision)));
    /* Standardized targets are another objective: a checkpoint of a run on
     * raw targets (every regression run before target scaling) must not
     * resume into one. */
    if (t->tg.cols)
        bad = bad || json_object_set_new(h, "target_scaling",
                                         json_string("standardize"));
    /* A cosine schedule spans the whole run: more epochs, another curve. */
    if (hp->lr_schedule.kind == TRAIN_LR_COSINE)
        bad = bad ||
              json_object_set_new(h, "total_steps",
                                  json_integer((json_int_t)t->total_steps));
    return bad ? -1 : 0;
}

static json_t *base_identity(const trainer *t)
{
    const train_hparams *hp = t->hp;
    char fp[24];
    snprintf(
        fp, sizeof fp, "%016llx",
        (unsigned long long)index_fingerprint(t->job->train_idx, t->n_train));
    json_t *shape = json_array();
    for (uint32_t i = 0; shape && i < t->arch.input.ndim; i++)
        json_array_append_new(shape, json_integer(t->arch.input.d[i]));
    /* Everything that shapes the trajectory; epochs may grow on resume. */
    return json_pack(
        "{s:O, s:s, s:o, s:I, s:I, s:s, s:{s:I, s:i, s:f, s:f, "
        "s:f, s:f, s:f, s:f, s:I}}",
        "spec", t->spec, "task", nn_task_str(t->arch.task), "input_shape",
        shape, "num_outputs", (json_int_t)t->arch.num_outputs, "n_train",
        (json_int_t)t->n_train, "train_indices", fp, "hparams", "batch_size",
        (json_int_t)hp->batch_size, "optimizer", (int)hp->optimizer,
        "learning_rate", hp->learning_rate, "momentum", hp->momentum,
        "weight_decay", hp->weight_decay, "beta1", hp->beta1, "beta2",
        hp->beta2, "epsilon", hp->epsilon, "seed", (json_int_t)hp->seed);
}

/* augment shapes the trajectory too (models/train/loader.c); left out when off,
 * like the other later hyperparameters, so older checkpoints still resume. */
static int add_augment_identity(const trainer *t, json_t *id)
{
    const loader_augment *a = &t->hp->augment;
    if (!a->crop_padding && !a->horizontal_flip)
        return 0;
    json_t *h = json_object_get(id, "hparams");
    return h ? json_object_set_new(h, "augment", loader_augment_to_json(a))
             : -1;
}

json_t *train_run_identity(const trainer *t)
{
    json_t *id = base_identity(t);
    if (id && add_training_identity(t, id) == 0 &&
        add_augment_identity(t, id) == 0)
        return id;
    json_decref(id);
    return NULL;
}
