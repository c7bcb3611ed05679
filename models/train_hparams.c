/*
 * train_hparams.c - hyperparameter parsing and the train/validation split
 * (see train.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "common/jsonutil.h"
#include "common/rng.h"
#include "models/loader.h"
#include "models/train.h"

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

ty_status train_hparams_parse(const json_t *hp, train_hparams *out,
                              json_t **normalized, ty_err *err)
{
    static const char *const keys[] = {
        "augment", /* models/loader.c */
        "epochs", "batch_size", "optimizer", "learning_rate", "momentum",
        "weight_decay", "beta1", "beta2", "epsilon", "seed",
        "checkpoint_every_steps", NULL};
    json_t *empty = NULL;
    ty_status st;
    int64_t epochs, batch, seed, every;
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
        h.optimizer = TRAIN_OPT_ADAM;
    } else if (!strcmp(opt, "sgd")) {
        h.optimizer = TRAIN_OPT_SGD;
    } else {
        st = ty_fail(err, TY_EINVAL, HP ".optimizer",
                     HP ".optimizer must be \"sgd\" or \"adam\", got \"%.16s\"",
                     opt);
        goto done;
    }
    int adam = h.optimizer == TRAIN_OPT_ADAM;
    if ((st = tyjson_get_number(hp, "learning_rate", HP, 0, 0.0, 10.0,
                                adam ? 0.001 : 0.01, &h.learning_rate, err)) !=
        TY_OK)
        goto done;
    if (h.learning_rate <= 0.0) {
        st = ty_fail(err, TY_EINVAL, HP ".learning_rate",
                     HP ".learning_rate must be above 0 and at most 10");
        goto done;
    }
    if ((st = tyjson_get_number(hp, "weight_decay", HP, 0, 0.0, 1e6, 0.0,
                                &h.weight_decay, err)) != TY_OK)
        goto done;
    if (adam) {
        if ((st = reject_key(hp, "momentum", opt, err)) != TY_OK ||
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
                TY_OK)
            goto done;
    }
    if ((st = tyjson_get_int(hp, "seed", HP, 0, 0, SEED_MAX, -1, &seed, err)) !=
            TY_OK ||
        (st = tyjson_get_int(hp, "checkpoint_every_steps", HP, 0, 0,
                             UINT32_MAX, 0, &every, err)) != TY_OK)
        goto done;
    h.epochs = (uint32_t)epochs;
    h.batch_size = (uint32_t)batch;
    h.seed = seed < 0 ? random_seed() : (uint64_t)seed;
    h.checkpoint_every_steps = (uint32_t)every;

    /* ---- augment: parsed by the loader (models/loader.c); its fit to the
     * dataset's shape is checked where the shape is known (api/jobs.c,
     * train.c). ---- */
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
            bad = json_object_set_new(n, "momentum", json_real(h.momentum));
        if (!bad)
            bad = json_object_set_new(n, "seed", json_integer((json_int_t)h.seed)) ||
                  json_object_set_new(n, "checkpoint_every_steps",
                                      json_integer(h.checkpoint_every_steps));
        /* ---- augment (models/loader.c) ---- */
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
    return st;
}

ty_status train_split(uint32_t n, double fraction, uint64_t seed,
                      uint32_t **train_idx, uint32_t *n_train,
                      uint32_t **val_idx, uint32_t *n_val, ty_err *err)
{
    *train_idx = *val_idx = NULL;
    *n_train = *n_val = 0;
    if (!(fraction >= 0.0 && fraction < 1.0))
        return ty_fail(err, TY_EINVAL, "validation_fraction",
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
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory splitting the data");
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
