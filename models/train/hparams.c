/*
 * hparams.c - hyperparameter parsing and the train/validation split
 * (see train.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "common/jsonutil.h"
#include "common/rng.h"
#include "models/train/loader.h"
#include "models/nn_internal.h"
#include "models/train/train.h"

#define HP "hyperparameters"
#define SEED_MAX (1ll << 53)

/* A number in [min, 1): tyjson_get_number checks [min, 1], this the rest. */
static ty_status get_below_one(const json_t *hp, const char *key, double min,
                               double def, double *out, ty_err *err)
{
    ty_status st = tyjson_get_number(hp, key, HP, 0, min, 1.0, def, out, err);
    if (st == TY_OK && *out >= 1.0) {
        char field[64];
        tyjson_path(field, sizeof field, HP, key);
        return ty_fail(err, TY_EINVAL, field,
                       "%s must be at least %g and below 1, got %g", field, min,
                       *out);
    }
    return st;
}

static ty_status reject_key(const json_t *hp, const char *key,
                            const char *optimizer, ty_err *err)
{
    if (!json_object_get(hp, key))
        return TY_OK;
    char field[64];
    tyjson_path(field, sizeof field, HP, key);
    return ty_fail(err, TY_EINVAL, field,
                   "%s does not apply to the %s optimizer", field, optimizer);
}

/* A key present although the `what` chosen (`choice`) has no use for it. */
static ty_status reject_key_for(const json_t *hp, const char *key,
                                const char *what, const char *choice,
                                ty_err *err)
{
    if (!json_object_get(hp, key))
        return TY_OK;
    char field[64];
    tyjson_path(field, sizeof field, HP, key);
    return ty_fail(err, TY_EINVAL, field, "%s does not apply to the %s %s",
                   field, choice, what);
}

static uint64_t random_seed(void)
{
    uint64_t s = 0;
    if (getrandom(&s, sizeof s, 0) != (ssize_t)sizeof s) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
    }
    return s & ((1ull << 53) - 1);
}

/* lr_schedule: an object with "type" and that type's keys. */
static ty_status parse_schedule(const json_t *hp, double lr,
                                train_lr_schedule *out, json_t **norm,
                                ty_err *err)
{
    static const char *const type_keys[] = {"type", "step_epochs", "gamma",
                                            "min_lr", NULL};
    static const char *const constant_keys[] = {"type", NULL};
    static const char *const step_keys[] = {"type", "step_epochs", "gamma",
                                            NULL};
    static const char *const cosine_keys[] = {"type", "min_lr", NULL};
    const char *path = HP ".lr_schedule";
    const json_t *j = json_object_get(hp, "lr_schedule");
    train_lr_schedule s = {.kind = TRAIN_LR_CONSTANT};
    const char *type = "constant";
    ty_status st;
    *norm = NULL;
    if (j) {
        if ((st = tyjson_check_keys(j, type_keys, path, err)) != TY_OK ||
            (st = tyjson_get_string(j, "type", path, 1, 16, NULL, &type,
                                    err)) != TY_OK)
            return st;
    }
    if (!strcmp(type, "constant")) {
        if (j && (st = tyjson_check_keys(j, constant_keys, path, err)) != TY_OK)
            return st;
        *norm = json_pack("{s:s}", "type", "constant");
    } else if (!strcmp(type, "step")) {
        int64_t every;
        if ((st = tyjson_check_keys(j, step_keys, path, err)) != TY_OK ||
            (st = tyjson_get_int(j, "step_epochs", path, 1, 1, 100000, 0,
                                 &every, err)) != TY_OK ||
            (st = tyjson_get_number(j, "gamma", path, 0, 0.0, 1.0, 0.1,
                                    &s.gamma, err)) != TY_OK)
            return st;
        if (s.gamma <= 0.0)
            return ty_fail(err, TY_EINVAL, HP ".lr_schedule.gamma",
                           HP ".lr_schedule.gamma must be above 0 and at most "
                              "1");
        s.kind = TRAIN_LR_STEP;
        s.step_epochs = (uint32_t)every;
        *norm = json_pack("{s:s, s:I, s:f}", "type", "step", "step_epochs",
                          (json_int_t)s.step_epochs, "gamma", s.gamma);
    } else if (!strcmp(type, "cosine")) {
        if ((st = tyjson_check_keys(j, cosine_keys, path, err)) != TY_OK ||
            (st = tyjson_get_number(j, "min_lr", path, 0, 0.0, 10.0, 0.0,
                                    &s.min_lr, err)) != TY_OK)
            return st;
        if (s.min_lr > lr)
            return ty_fail(err, TY_EINVAL, HP ".lr_schedule.min_lr",
                           HP ".lr_schedule.min_lr must be at most the "
                              "learning_rate (%g), got %g",
                           lr, s.min_lr);
        s.kind = TRAIN_LR_COSINE;
        *norm = json_pack("{s:s, s:f}", "type", "cosine", "min_lr", s.min_lr);
    } else {
        return ty_fail(err, TY_EINVAL, HP ".lr_schedule.type",
                       HP ".lr_schedule.type must be \"constant\", \"step\" "
                          "or \"cosine\", got \"%.16s\"",
                       type);
    }
    if (!*norm)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    *out = s;
    return TY_OK;
}

/* loss, label_smoothing, huber_delta. Without the task the loss may stay
 * NN_LOSS_AUTO; keys that cannot apply to a named loss are errors here,
 * the rest when the task is known (train_hparams_resolve_loss). */
static ty_status parse_loss(const json_t *hp, nn_loss_spec *out, ty_err *err)
{
    const char *name;
    nn_loss_spec l = {.kind = NN_LOSS_AUTO};
    ty_status st;
    if ((st = tyjson_get_string(hp, "loss", HP, 0, 32, NULL, &name, err)) !=
        TY_OK)
        return st;
    if (name) {
        int k = nn_loss_from_name(name);
        if (k <= NN_LOSS_AUTO)
            return ty_fail(err, TY_EINVAL, HP ".loss",
                           HP ".loss must be \"cross_entropy\", "
                              "\"binary_cross_entropy\", \"mse\" or \"huber\", "
                              "got \"%.32s\"",
                           name);
        l.kind = (nn_loss_kind)k;
    }
    int ce = l.kind == NN_LOSS_AUTO || l.kind == NN_LOSS_CROSS_ENTROPY;
    if (!ce && (st = reject_key_for(hp, "label_smoothing", "loss", name,
                                    err)) != TY_OK)
        return st;
    if (l.kind != NN_LOSS_HUBER &&
        (st = reject_key_for(hp, "huber_delta", "loss", name ? name : "default",
                             err)) != TY_OK)
        return st;
    if ((st = get_below_one(hp, "label_smoothing", 0.0, 0.0, &l.label_smoothing,
                            err)) != TY_OK ||
        (st = tyjson_get_number(hp, "huber_delta", HP, 0, 0.0, 1e9, 1.0,
                                &l.huber_delta, err)) != TY_OK)
        return st;
    if (l.kind == NN_LOSS_HUBER && l.huber_delta <= 0.0)
        return ty_fail(err, TY_EINVAL, HP ".huber_delta",
                       HP ".huber_delta must be above 0");
    if (l.kind != NN_LOSS_HUBER)
        l.huber_delta = 0.0;
    *out = l;
    return TY_OK;
}

static ty_status loss_to_normalized(const nn_loss_spec *l, const json_t *hp,
                                    json_t *n)
{
    int bad = 0;
    if (l->kind != NN_LOSS_AUTO)
        bad =
            json_object_set_new(n, "loss", json_string(nn_loss_name(l->kind)));
    if (!bad &&
        (l->kind == NN_LOSS_CROSS_ENTROPY ||
         (l->kind == NN_LOSS_AUTO && json_object_get(hp, "label_smoothing"))))
        bad = json_object_set_new(n, "label_smoothing",
                                  json_real(l->label_smoothing));
    if (!bad && l->kind == NN_LOSS_HUBER)
        bad = json_object_set_new(n, "huber_delta", json_real(l->huber_delta));
    return bad ? TY_ENOMEM : TY_OK;
}

/* hyperparameters.precision, by train_precision value. */
static const char *const precision_names[] = {
    [TRAIN_PRECISION_FP32] = "fp32",
    [TRAIN_PRECISION_BF16] = "bf16",
    [TRAIN_PRECISION_FP16] = "fp16",
    [TRAIN_PRECISION_AUTO] = "auto",
};

static ty_status parse_precision(const json_t *hp, train_precision *out,
                                 ty_err *err)
{
    const char *name;
    ty_status st =
        tyjson_get_string(hp, "precision", HP, 0, 16, "fp32", &name, err);
    if (st != TY_OK)
        return st;
    for (size_t i = 0; i < TY_ARRAY_LEN(precision_names); i++)
        if (!strcmp(name, precision_names[i])) {
            *out = (train_precision)i;
            return TY_OK;
        }
    return ty_fail(err, TY_EINVAL, HP ".precision",
                   HP ".precision must be \"fp32\", \"bf16\", \"fp16\" or "
                      "\"auto\", got \"%.16s\"",
                   name);
}

/* hyperparameters.target_scaling, by train_target_scaling value (AUTO:
 * absent). */
static const char *const target_scaling_names[] = {
    [TRAIN_TARGET_AUTO] = NULL,
    [TRAIN_TARGET_STANDARDIZE] = "standardize",
    [TRAIN_TARGET_NONE] = "none",
};

static ty_status parse_target_scaling(const json_t *hp,
                                      train_target_scaling *out, ty_err *err)
{
    const char *name;
    ty_status st =
        tyjson_get_string(hp, "target_scaling", HP, 0, 16, NULL, &name, err);
    if (st != TY_OK)
        return st;
    *out = TRAIN_TARGET_AUTO;
    if (!name)
        return TY_OK;
    for (size_t i = 1; i < TY_ARRAY_LEN(target_scaling_names); i++)
        if (!strcmp(name, target_scaling_names[i])) {
            *out = (train_target_scaling)i;
            return TY_OK;
        }
    return ty_fail(err, TY_EINVAL, HP ".target_scaling",
                   HP ".target_scaling must be \"standardize\" or \"none\", "
                      "got \"%.16s\"",
                   name);
}

ty_status train_precision_resolve(const train_hparams *hp, const nn_backend *be,
                                  const nn_exec *ex, nn_dtype *out, ty_err *err)
{
    if (!be)
        be = &nn_backend_cpu;
    const int bf16 = be->lp_ok && be->lp_ok(ex, NN_DT_BF16);
    const int fp16 = be->lp_ok && be->lp_ok(ex, NN_DT_F16);
    *out = NN_DT_F32;
    switch (hp->precision) {
        case TRAIN_PRECISION_AUTO:
            if (bf16)
                *out = NN_DT_BF16;
            return TY_OK;
        case TRAIN_PRECISION_BF16:
        case TRAIN_PRECISION_FP16: {
            const nn_dtype want =
                hp->precision == TRAIN_PRECISION_BF16 ? NN_DT_BF16 : NN_DT_F16;
            if (want == NN_DT_BF16 ? bf16 : fp16) {
                *out = want;
                return TY_OK;
            }
            /* The CPU trains every precision in fp32 (and says so). */
            if (nn_backend_host_visible(be))
                return TY_OK;
            return ty_fail(err, TY_EINVAL, HP ".precision",
                           HP
                           ".precision \"%s\" needs a GPU that trains in it "
                           "(compute capability %s or newer); this %s device "
                           "does not: use \"fp32\" or \"auto\"",
                           nn_dtype_name(want),
                           want == NN_DT_BF16 ? "8.0" : "7.0", be->name);
        }
        default: return TY_OK;
    }
}

ty_status train_hparams_parse(const json_t *hp, train_hparams *out,
                              json_t **normalized, ty_err *err)
{
    static const char *const keys[] = {"augment", /* models/train/loader.c */
                                       "epochs",
                                       "batch_size",
                                       "optimizer",
                                       "learning_rate",
                                       "momentum",
                                       "weight_decay",
                                       "beta1",
                                       "beta2",
                                       "epsilon",
                                       "seed",
                                       "checkpoint_every_steps",
                                       "nesterov",
                                       "lr_schedule",
                                       "warmup_steps",
                                       "clip_grad_norm",
                                       "accumulation_steps",
                                       "loss",
                                       "label_smoothing",
                                       "huber_delta",
                                       "cuda_graph",
                                       "precision",
                                       "target_scaling",
                                       "context_length",
                                       "max_steps",
                                       "eval_every_steps",
                                       "init_from",
                                       "zero",
                                       NULL};
    json_t *empty = NULL, *sched_norm = NULL;
    ty_status st;
    int64_t epochs, batch, seed, every, accum, warmup;
    int cuda_graph;
    const char *opt;
    train_hparams h = {0};

    if (normalized)
        *normalized = NULL;
    if (!hp)
        hp = empty = json_object();
    if ((st = tyjson_check_keys(hp, keys, HP, err)) != TY_OK)
        goto done;
    if ((st = tyjson_get_int(hp, "epochs", HP, 0, 1, 100000, 10, &epochs,
                             err)) != TY_OK ||
        (st = tyjson_get_int(hp, "batch_size", HP, 0, 1, 65536, 64, &batch,
                             err)) != TY_OK ||
        (st = tyjson_get_string(hp, "optimizer", HP, 0, 16, "adam", &opt,
                                err)) != TY_OK)
        goto done;
    if (!strcmp(opt, "adam")) {
        h.optimizer = NN_OPTIM_ADAM;
    } else if (!strcmp(opt, "adamw")) {
        h.optimizer = NN_OPTIM_ADAMW;
    } else if (!strcmp(opt, "sgd")) {
        h.optimizer = NN_OPTIM_SGD;
    } else {
        st = ty_fail(err, TY_EINVAL, HP ".optimizer",
                     HP ".optimizer must be \"sgd\", \"adam\" or \"adamw\", "
                        "got \"%.16s\"",
                     opt);
        goto done;
    }
    int adam = h.optimizer != NN_OPTIM_SGD;
    if ((st = tyjson_get_number(hp, "learning_rate", HP, 0, 0.0, 10.0,
                                adam ? 0.001 : 0.01, &h.learning_rate, err)) !=
        TY_OK)
        goto done;
    if (h.learning_rate <= 0.0) {
        st = ty_fail(err, TY_EINVAL, HP ".learning_rate",
                     HP ".learning_rate must be above 0 and at most 10");
        goto done;
    }
    if ((st = tyjson_get_number(hp, "weight_decay", HP, 0, 0.0, 1e6,
                                h.optimizer == NN_OPTIM_ADAMW ? 0.01 : 0.0,
                                &h.weight_decay, err)) != TY_OK)
        goto done;
    if (adam) {
        if ((st = reject_key(hp, "momentum", opt, err)) != TY_OK ||
            (st = reject_key(hp, "nesterov", opt, err)) != TY_OK ||
            (st = get_below_one(hp, "beta1", 0.0, 0.9, &h.beta1, err)) !=
                TY_OK ||
            (st = get_below_one(hp, "beta2", 0.0, 0.999, &h.beta2, err)) !=
                TY_OK ||
            (st = tyjson_get_number(hp, "epsilon", HP, 0, 0.0, 1.0, 1e-8,
                                    &h.epsilon, err)) != TY_OK)
            goto done;
        if (h.epsilon <= 0.0) {
            st = ty_fail(err, TY_EINVAL, HP ".epsilon",
                         HP ".epsilon must be above 0 and at most 1");
            goto done;
        }
    } else {
        if ((st = reject_key(hp, "beta1", opt, err)) != TY_OK ||
            (st = reject_key(hp, "beta2", opt, err)) != TY_OK ||
            (st = reject_key(hp, "epsilon", opt, err)) != TY_OK ||
            (st = get_below_one(hp, "momentum", 0.0, 0.0, &h.momentum, err)) !=
                TY_OK ||
            (st = tyjson_get_bool(hp, "nesterov", HP, 0, 0, &h.nesterov,
                                  err)) != TY_OK)
            goto done;
        if (h.nesterov && h.momentum <= 0.0) {
            st = ty_fail(err, TY_EINVAL, HP ".nesterov",
                         HP ".nesterov needs a momentum above 0 (as "
                            "torch.optim.SGD requires)");
            goto done;
        }
    }
    if ((st = parse_schedule(hp, h.learning_rate, &h.lr_schedule, &sched_norm,
                             err)) != TY_OK ||
        (st = tyjson_get_int(hp, "warmup_steps", HP, 0, 0, 1000000000, 0,
                             &warmup, err)) != TY_OK ||
        (st = tyjson_get_number(hp, "clip_grad_norm", HP, 0, 0.0, 1e9, 0.0,
                                &h.clip_grad_norm, err)) != TY_OK ||
        (st = tyjson_get_int(hp, "accumulation_steps", HP, 0, 1, 1024, 1,
                             &accum, err)) != TY_OK ||
        (st = parse_loss(hp, &h.loss, err)) != TY_OK)
        goto done;
    if (json_object_get(hp, "clip_grad_norm") && h.clip_grad_norm <= 0.0) {
        st = ty_fail(err, TY_EINVAL, HP ".clip_grad_norm",
                     HP ".clip_grad_norm must be above 0 (leave it out for "
                        "no clipping)");
        goto done;
    }
    if ((st = tyjson_get_int(hp, "seed", HP, 0, 0, SEED_MAX, -1, &seed, err)) !=
            TY_OK ||
        (st = tyjson_get_int(hp, "checkpoint_every_steps", HP, 0, 0, UINT32_MAX,
                             0, &every, err)) != TY_OK ||
        (st = tyjson_get_bool(hp, "cuda_graph", HP, 0, 1, &cuda_graph, err)) !=
            TY_OK)
        goto done;
    int64_t ctx, max_steps, eval_every, zero;
    if ((st = tyjson_get_int(hp, "zero", HP, 0, 0, 1, 0, &zero, err)) !=
            TY_OK ||
        (st = tyjson_get_int(hp, "context_length", HP, 0, 1, 65536, 0, &ctx,
                             err)) != TY_OK ||
        (st = tyjson_get_int(hp, "max_steps", HP, 0, 1, 1000000000, 0,
                             &max_steps, err)) != TY_OK ||
        (st = tyjson_get_int(hp, "eval_every_steps", HP, 0, 1, 1000000000, 0,
                             &eval_every, err)) != TY_OK)
        goto done;
    const char *init_from;
    if ((st = tyjson_get_string(hp, "init_from", HP, 0, TRAIN_INIT_FROM_MAX,
                                NULL, &init_from, err)) != TY_OK)
        goto done;
    if (init_from && !init_from[0]) {
        st = ty_fail(err, TY_EINVAL, HP ".init_from",
                     HP ".init_from must name a model (its id or name)");
        goto done;
    }
    snprintf(h.init_from, sizeof h.init_from, "%s", init_from ? init_from : "");
    h.context_length = (uint32_t)ctx;
    h.zero = (uint32_t)zero;
    h.max_steps = (uint64_t)max_steps;
    h.eval_every_steps = (uint64_t)eval_every;
    h.cuda_graph = cuda_graph;
    h.epochs = (uint32_t)epochs;
    h.batch_size = (uint32_t)batch;
    h.seed = seed < 0 ? random_seed() : (uint64_t)seed;
    h.checkpoint_every_steps = (uint32_t)every;
    h.accumulation_steps = (uint32_t)accum;
    h.warmup_steps = (uint32_t)warmup;

    if ((st = parse_precision(hp, &h.precision, err)) != TY_OK ||
        (st = parse_target_scaling(hp, &h.target_scaling, err)) != TY_OK)
        goto done;

    /* ---- augment: parsed by the loader (models/train/loader.c); its fit to the
     * dataset's shape is checked where the shape is known (api/jobs.c,
     * run.c). ---- */
    if ((st = loader_augment_parse(hp, &h.augment, err)) != TY_OK)
        goto done;
    /* ---- end augment ---- */

    if (normalized) {
        json_t *n = json_pack(
            "{s:I, s:I, s:s, s:f, s:f}", "epochs", (json_int_t)h.epochs,
            "batch_size", (json_int_t)h.batch_size, "optimizer", opt,
            "learning_rate", h.learning_rate, "weight_decay", h.weight_decay);
        int bad = !n;
        if (!bad && adam)
            bad = json_object_set_new(n, "beta1", json_real(h.beta1)) ||
                  json_object_set_new(n, "beta2", json_real(h.beta2)) ||
                  json_object_set_new(n, "epsilon", json_real(h.epsilon));
        else if (!bad)
            bad = json_object_set_new(n, "momentum", json_real(h.momentum)) ||
                  json_object_set_new(n, "nesterov", json_boolean(h.nesterov));
        if (!bad)
            bad = json_object_set_new(n, "seed",
                                      json_integer((json_int_t)h.seed)) ||
                  json_object_set_new(n, "checkpoint_every_steps",
                                      json_integer(h.checkpoint_every_steps)) ||
                  json_object_set(n, "lr_schedule", sched_norm) ||
                  json_object_set_new(n, "warmup_steps",
                                      json_integer(h.warmup_steps)) ||
                  json_object_set_new(n, "accumulation_steps",
                                      json_integer(h.accumulation_steps)) ||
                  (h.clip_grad_norm > 0.0 &&
                   json_object_set_new(n, "clip_grad_norm",
                                       json_real(h.clip_grad_norm))) ||
                  loss_to_normalized(&h.loss, hp, n) != TY_OK ||
                  json_object_set_new(n, "cuda_graph",
                                      json_boolean(h.cuda_graph));
        if (!bad)
            bad = json_object_set_new(
                n, "precision", json_string(precision_names[h.precision]));
        /* Spelled out once the task is known (train_hparams_resolve_loss). */
        if (!bad && h.target_scaling != TRAIN_TARGET_AUTO)
            bad = json_object_set_new(
                n, "target_scaling",
                json_string(target_scaling_names[h.target_scaling]));
        /* Named only when given, so older jobs' normalized
         * hyperparameters (and checkpoint identities) stay as they were;
         * context_length is spelled out for language models at resolve. */
        if (!bad && h.context_length)
            bad = json_object_set_new(n, "context_length",
                                      json_integer(h.context_length));
        if (!bad && h.max_steps)
            bad = json_object_set_new(n, "max_steps",
                                      json_integer((json_int_t)h.max_steps));
        if (!bad && h.zero)
            bad = json_object_set_new(n, "zero", json_integer(h.zero));
        if (!bad && h.init_from[0])
            bad = json_object_set_new(n, "init_from", json_string(h.init_from));
        if (!bad && h.eval_every_steps)
            bad = json_object_set_new(
                n, "eval_every_steps",
                json_integer((json_int_t)h.eval_every_steps));
        /* ---- augment (models/train/loader.c) ---- */
        if (!bad)
            bad = json_object_set_new(n, "augment",
                                      loader_augment_to_json(&h.augment));
        /* ---- end augment ---- */
        if (bad) {
            json_decref(n);
            st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
            goto done;
        }
        *normalized = n;
    }
    *out = h;
done:
    json_decref(empty);
    json_decref(sched_norm);
    return st;
}

nn_optim_config train_hparams_optim(const train_hparams *hp)
{
    return (nn_optim_config){
        .kind = hp->optimizer,
        .lr = hp->learning_rate,
        .momentum = hp->momentum,
        .weight_decay = hp->weight_decay,
        .beta1 = hp->beta1,
        .beta2 = hp->beta2,
        .eps = hp->epsilon,
        .nesterov = hp->nesterov,
    };
}

ty_status train_hparams_resolve_loss(train_hparams *hp, ty_task task,
                                     uint32_t num_outputs, json_t *normalized,
                                     ty_err *err)
{
    nn_loss_spec l = hp->loss;
    ty_status st = nn_loss_resolve(&l, task, num_outputs, err);
    if (st != TY_OK)
        return st;
    /* target_scaling is for regression, as huber_delta is: named for a
     * classification dataset it is an error, not silently dropped. */
    if (task == TY_TASK_CLASSIFICATION &&
        hp->target_scaling != TRAIN_TARGET_AUTO)
        return ty_fail(err, TY_EINVAL, HP ".target_scaling",
                       HP ".target_scaling applies to regression; this "
                          "dataset is for classification");
    if (task == TY_TASK_LANGUAGE_MODELING &&
        hp->target_scaling != TRAIN_TARGET_AUTO)
        return ty_fail(err, TY_EINVAL, HP ".target_scaling",
                       HP ".target_scaling applies to regression; this "
                          "dataset is for language modeling");
    if (task != TY_TASK_LANGUAGE_MODELING && hp->context_length)
        return ty_fail(err, TY_EINVAL, HP ".context_length",
                       HP ".context_length applies to text and tokens "
                          "datasets (language models)");
    uint32_t ctx = hp->context_length;
    if (task == TY_TASK_LANGUAGE_MODELING && !ctx)
        ctx = TRAIN_DEFAULT_CONTEXT;
    train_target_scaling ts = hp->target_scaling;
    if (task == TY_TASK_REGRESSION && ts == TRAIN_TARGET_AUTO)
        ts = TRAIN_TARGET_STANDARDIZE;
    if (normalized) {
        /* What applied to the unresolved loss may not to the resolved one
         * (label_smoothing 0 given for a regression dataset). */
        json_object_del(normalized, "label_smoothing");
        json_object_del(normalized, "huber_delta");
        if (loss_to_normalized(&l, NULL, normalized) != TY_OK ||
            (ts != TRAIN_TARGET_AUTO &&
             json_object_set_new(normalized, "target_scaling",
                                 json_string(target_scaling_names[ts]))) ||
            (ctx && json_object_set_new(normalized, "context_length",
                                        json_integer(ctx))))
            return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    hp->context_length = ctx;
    hp->loss = l;
    hp->target_scaling = ts;
    return TY_OK;
}

double train_lr_at(const train_hparams *hp, uint64_t step,
                   uint64_t steps_per_epoch, uint64_t total_steps)
{
    const train_lr_schedule *s = &hp->lr_schedule;
    double lr = hp->learning_rate;
    if (s->kind == TRAIN_LR_STEP && s->step_epochs && steps_per_epoch) {
        /* StepLR's chainable form multiplies by gamma at each boundary. */
        uint64_t drops = step / steps_per_epoch / s->step_epochs;
        for (uint64_t i = 0; i < drops; i++)
            lr *= s->gamma;
    } else if (s->kind == TRAIN_LR_COSINE && total_steps) {
        double t = (double)(step < total_steps ? step : total_steps);
        lr = s->min_lr + (lr - s->min_lr) *
                             (1.0 + cos(M_PI * t / (double)total_steps)) / 2.0;
    }
    if (hp->warmup_steps && step < hp->warmup_steps)
        lr *= (double)(step + 1) / ((double)hp->warmup_steps + 1.0);
    return lr;
}

ty_status train_split(uint32_t n, double fraction, uint64_t seed,
                      uint32_t **train_idx, uint32_t *n_train,
                      uint32_t **val_idx, uint32_t *n_val, ty_err *err)
{
    *train_idx = *val_idx = NULL;
    *n_train = *n_val = 0;
    if (!(fraction >= 0.0 && fraction < 1.0))
        return ty_fail(
            err, TY_EINVAL, "validation_fraction",
            "the validation fraction must be at least 0 and below 1");
    uint32_t nv = (uint32_t)llround((double)n * fraction);
    if (n == 0 || nv >= n)
        return ty_fail(err, TY_EINVAL, "validation_fraction",
                       "the dataset has %u examples: too few to train on after "
                       "holding out a fraction of %g for validation",
                       n, fraction);
    uint32_t *all = malloc((size_t)n * sizeof *all);
    uint32_t *val = nv ? malloc((size_t)nv * sizeof *val) : NULL;
    if (!all || (nv && !val)) {
        free(all);
        free(val);
        return ty_fail(err, TY_ENOMEM, NULL,
                       "out of memory splitting the data");
    }
    for (uint32_t i = 0; i < n; i++)
        all[i] = i;
    ty_rng rng;
    ty_rng_seed(&rng, seed, 0x5b117);
    ty_rng_shuffle_u32(&rng, all, n);
    if (nv)
        memcpy(val, all + (n - nv), (size_t)nv * sizeof *val);
    *train_idx = all; /* its first n - nv entries */
    *n_train = n - nv;
    *val_idx = val;
    *n_val = nv;
    return TY_OK;
}
