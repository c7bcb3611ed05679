/*
 * admission.c - the submit-time checks of a job (see admission.h), moved
 * here from the HTTP handler so that the job service owns a job's whole
 * life, from admission on.
 */
#include "jobs/admission.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ids.h"
#include "common/jsonutil.h"
#include "gpu/inventory.h"
#include "node/placement.h"
#if TRAINYARD_HAVE_CUDA
#include "gpu/cuda/backend.h"
#endif
#include "models/data/dataset.h"
#include "models/data/windows.h"
#include "models/train/loader.h"
#include "models/nn.h"
#include "models/train/train.h"

#define DEFAULT_SPLIT 0.1

/* The dataset's input shape as numbers; 0 if the doc is malformed. */
static int doc_shape(const json_t *doc, uint32_t shape[TY_DS_MAX_DIMS],
                     uint32_t *ndim)
{
    const json_t *s = json_object_get(doc, "input_shape");
    size_t n = json_array_size(s);
    if (n == 0 || n > TY_DS_MAX_DIMS)
        return 0;
    for (size_t i = 0; i < n; i++)
        shape[i] = (uint32_t)json_integer_value(json_array_get(s, i));
    *ndim = (uint32_t)n;
    return 1;
}

/* The id of the tenant's dataset ref (an id or a name) names, as
 * store_ref_resolve resolves it; not found is a 422 naming field. */
static ty_status resolve_dataset(const jobs_env *env, const char *tenant,
                                 const char *ref, const char *field,
                                 char id[TY_ID_MAX], ty_err *err)
{
    ty_status s =
        store_ref_resolve(env->store, STORE_REF_DATASET, tenant, ref, id, err);
    if (s == TY_ENOTFOUND) {
        snprintf(err->field, sizeof err->field, "%s", field);
        return TY_EINVAL;
    }
    return s;
}

/* Checks "validation" against the training dataset and writes the
 * normalized object into *out. */
static ty_status check_validation(const jobs_env *env, const char *tenant,
                                  const json_t *v, const json_t *train_doc,
                                  json_t **out, ty_err *err)
{
    int64_t n = json_integer_value(json_object_get(train_doc, "num_examples"));
    if (!v) {
        *out = json_pack("{s:f}", "split", DEFAULT_SPLIT);
        return TY_OK;
    }
    static const char *const keys[] = {"split", "dataset", NULL};
    ty_status s = tyjson_check_keys(v, keys, "validation", err);
    if (s != TY_OK)
        return s;
    int has_split = json_object_get(v, "split") != NULL;
    int has_ds = json_object_get(v, "dataset") != NULL;
    if (has_split == has_ds)
        return ty_fail(err, TY_EINVAL, "validation",
                       "validation takes either {\"split\": fraction} or "
                       "{\"dataset\": id}");
    if (has_split) {
        double split;
        if ((s = tyjson_get_number(v, "split", "validation", 1, 0.0, 0.9, 0.0,
                                   &split, err)) != TY_OK)
            return s;
        int64_t n_val = (int64_t)llround((double)n * split);
        if (n - n_val < 1)
            return ty_fail(err, TY_EINVAL, "validation.split",
                           "a split of %g leaves no training examples out of "
                           "%lld",
                           split, (long long)n);
        *out = json_pack("{s:f}", "split", split);
        return TY_OK;
    }
    const char *ref;
    char id[TY_ID_MAX];
    if ((s = tyjson_get_string(v, "dataset", "validation", 1, STORE_NAME_MAX,
                               NULL, &ref, err)) != TY_OK)
        return s;
    json_t *vdoc = NULL;
    s = resolve_dataset(env, tenant, ref, "validation.dataset", id, err);
    if (s == TY_OK)
        s = store_dataset_get(env->store, tenant, id, &vdoc, NULL, err);
    if (s != TY_OK)
        return s;
    if (!json_equal(json_object_get(vdoc, "task"),
                    json_object_get(train_doc, "task"))) {
        s = ty_fail(err, TY_EINVAL, "validation.dataset",
                    "validation dataset %s is a %s dataset; the training "
                    "dataset is %s",
                    id, json_string_value(json_object_get(vdoc, "task")),
                    json_string_value(json_object_get(train_doc, "task")));
    } else if (!json_equal(json_object_get(vdoc, "input_shape"),
                           json_object_get(train_doc, "input_shape"))) {
        char *a =
            json_dumps(json_object_get(vdoc, "input_shape"), JSON_COMPACT);
        char *b =
            json_dumps(json_object_get(train_doc, "input_shape"), JSON_COMPACT);
        s = ty_fail(err, TY_EINVAL, "validation.dataset",
                    "validation dataset %s has input shape %s; the training "
                    "dataset has %s",
                    id, a ? a : "?", b ? b : "?");
        free(a);
        free(b);
    } else if (json_object_get(vdoc, "classes")) {
        const json_t *vc = json_object_get(vdoc, "classes");
        int32_t *map = calloc(json_array_size(vc) + 1, sizeof *map);
        if (!map) {
            s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        } else {
            s = ty_dataset_class_map(vc, json_object_get(train_doc, "classes"),
                                     map, err);
            if (s != TY_OK)
                snprintf(err->field, sizeof err->field, "validation.dataset");
            free(map);
        }
    }
    json_decref(vdoc);
    if (s == TY_OK)
        *out = json_pack("{s:s}", "dataset", id);
    return s;
}

/* The training examples the worker will have: all of the dataset with a
 * validation dataset, else what the split leaves (as train_split). */
static uint32_t train_examples(const json_t *ds, const json_t *validation)
{
    int64_t n = json_integer_value(json_object_get(ds, "num_examples"));
    const json_t *split = json_object_get(validation, "split");
    if (split)
        n -= (int64_t)llround((double)n * json_number_value(split));
    return n < 1 ? 1 : n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

/* Whether a job asking `req` trains on CUDA here (node/protocol.h): a GPU
 * job on a real (nvml) inventory, or a CPU job on a host without slots
 * whose --train-device is CUDA - when the server's training device is. */
static int job_on_cuda(const jobs_env *env, const sched_request *req)
{
    if (env->train_dev.device < 0)
        return 0;
    int nslots = env->inventory ? env->inventory->nslots : 0;
    if (req->kind == SCHED_REQ_NONE)
        return nslots == 0;
    return env->inventory && env->inventory->source == INV_SOURCE_NVML;
}

/* The backend a job trains on. */
static const nn_backend *train_backend(int on_cuda)
{
#if TRAINYARD_HAVE_CUDA
    if (on_cuda)
        return &nn_backend_cuda;
#endif
    (void)on_cuda;
    return NULL;
}

/* What the job's training will take from the worker's backend (the
 * training device's: the CPU's with the server's --worker-threads, or
 * CUDA's, whose convolution workspaces cuDNN sizes), refused with a 422 on
 * hyperparameters.batch_size that says where it goes when it is over
 * --max-job-memory, or, on a GPU, when it and PLACE_CUDA_OVERHEAD_BYTES
 * exceed the device's memory (a MIG slice's size inside one). */
static ty_status check_memory(const jobs_env *env, const job_submission *sub,
                              const json_t *spec, const uint32_t *shape,
                              uint32_t ndim, uint32_t outputs, ty_task task,
                              const train_hparams *hp, uint32_t n_train,
                              train_memory *m, ty_err *err)
{
    const sched_request *req = &sub->req;
    const uint32_t world = sub->workers > 1 ? (uint32_t)sub->workers : 1;
    /* An elastic job may run at any world size from min_workers up: the
     * estimate is the smallest's (the largest share of a batch and of
     * ZeRO's state on each rank). */
    const uint32_t least =
        sub->min_workers >= 1 && (uint32_t)sub->min_workers < world
            ? (uint32_t)sub->min_workers
            : world;
    /* A data-parallel job: every rank takes an equal share of each
     * global batch (models/train/train.h's train_job.comm), at every
     * world size it may run at. */
    if (hp->batch_size % world)
        return ty_fail(err, TY_EINVAL, "hyperparameters.batch_size",
                       "hyperparameters.batch_size (%u) must be divisible by "
                       "%s (%u): each %s trains on an equal share of every "
                       "batch",
                       hp->batch_size,
                       req->kind == SCHED_REQ_NONE ? "resources.workers"
                                                   : "resources.gpus",
                       world, req->kind == SCHED_REQ_NONE ? "worker" : "GPU");
    for (uint32_t w = least; w < world; w++)
        if (hp->batch_size % w)
            return ty_fail(err, TY_EINVAL, "hyperparameters.batch_size",
                           "hyperparameters.batch_size (%u) must be "
                           "divisible by every world size the elastic job "
                           "may run at (resources.min_workers %u to "
                           "resources.workers %u): not by %u",
                           hp->batch_size, least, world, w);
    int on_cuda = job_on_cuda(env, req);
    const nn_backend *be = train_backend(on_cuda);
    ty_status s = train_memory_estimate_rank(
        spec, shape, ndim, outputs, task, hp, n_train,
        train_threads(env->worker_threads, be), be, least, m, err);
    /* On a slot the worker checks the slot's free memory when it starts;
     * here only the --train-device of a host without slots is known. */
    if (s == TY_OK && on_cuda && req->kind == SCHED_REQ_NONE)
        s = place_check_device_memory(m, PLACE_CUDA_OVERHEAD_BYTES,
                                      env->train_dev.total_bytes,
                                      env->train_dev.label, 0, err);
    if (s != TY_OK || !env->max_job_memory || m->total <= env->max_job_memory)
        return s;
    char total[32], state[32], grads[32], opt[32], act[32], work[32], cap[32];
    train_format_bytes(m->total, total, sizeof total);
    train_format_bytes(m->state, state, sizeof state);
    train_format_bytes(m->grads, grads, sizeof grads);
    train_format_bytes(m->optimizer, opt, sizeof opt);
    train_format_bytes(m->activations, act, sizeof act);
    train_format_bytes(m->work, work, sizeof work);
    train_format_bytes(env->max_job_memory, cap, sizeof cap);
    return ty_fail(err, TY_EINVAL, "hyperparameters.batch_size",
                   "the job needs about %s for training (parameters %s, "
                   "gradients %s, optimizer state %s, activations %s at batch "
                   "%u, working memory %s) but this server allows %s per job; "
                   "lower batch_size or use a smaller model",
                   total, state, grads, opt, act, m->batch_rows, work, cap);
}

/* hyperparameters.init_from: the tenant's model (id or name) the job
 * starts from must be of the job's task, input shape and outputs, with
 * the job's (normalized) spec, else a 422 naming the first difference;
 * the normalized hyperparameters then name it by id. */
static ty_status check_init_from(const jobs_env *env, const char *tenant,
                                 const train_hparams *hp, const json_t *spec,
                                 const uint32_t *shape, uint32_t ndim,
                                 uint32_t outputs, ty_task task,
                                 json_t *norm_hp, ty_err *err)
{
    static const char *const F = "hyperparameters.init_from";
    if (!hp->init_from[0])
        return TY_OK;
    char id[TY_ID_MAX], sha[65];
    json_t *doc = NULL;
    ty_status s =
        store_model_find(env->store, tenant, hp->init_from, id, &doc, sha, err);
    if (s == TY_ENOTFOUND)
        return ty_fail(err, TY_EINVAL, F, "no model with id or name '%.200s'",
                       hp->init_from);
    if (s != TY_OK)
        return s;
    json_t *want_shape = json_array();
    for (uint32_t i = 0; want_shape && i < ndim; i++)
        json_array_append_new(want_shape, json_integer(shape[i]));
    const json_t *have =
        json_object_get(json_object_get(doc, "spec"), "layers");
    const json_t *want = json_object_get(spec, "layers");
    if (strcmp(json_string_value(json_object_get(doc, "task")) ?: "",
               ty_task_name(task)) ||
        !json_equal(json_object_get(doc, "input_shape"), want_shape) ||
        json_integer_value(json_object_get(doc, "num_outputs")) != outputs) {
        s = ty_fail(
            err, TY_EINVAL, F,
            "model %s is a %s model of %lld outputs; this job trains "
            "a %s model of %u outputs on its dataset's input shape",
            id, json_string_value(json_object_get(doc, "task")),
            (long long)json_integer_value(json_object_get(doc, "num_outputs")),
            ty_task_name(task), outputs);
    } else if (json_array_size(have) != json_array_size(want)) {
        s = ty_fail(err, TY_EINVAL, F,
                    "model %s has %zu layers; this job's model has %zu", id,
                    json_array_size(have), json_array_size(want));
    } else {
        for (size_t i = 0; i < json_array_size(want) && s == TY_OK; i++) {
            const json_t *a = json_array_get(have, i),
                         *b = json_array_get(want, i);
            if (json_equal(a, b))
                continue;
            char *ta = json_dumps(a, JSON_COMPACT | JSON_SORT_KEYS);
            char *tb = json_dumps(b, JSON_COMPACT | JSON_SORT_KEYS);
            s = ty_fail(err, TY_EINVAL, F,
                        "layer %zu differs: model %s has %.200s, this job's "
                        "model %.200s",
                        i, id, ta ? ta : "?", tb ? tb : "?");
            free(ta);
            free(tb);
        }
    }
    if (s == TY_OK &&
        json_object_set_new(norm_hp, "init_from", json_string(id)))
        s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    json_decref(want_shape);
    json_decref(doc);
    return s;
}

/* ---- language models (text and tokens datasets) ---- */

/* validation for a language model: {"split": f} takes the last round(N f)
 * tokens as a held-out stretch (models/data/windows.h); {"dataset": id}
 * another text or tokens dataset of the same vocabulary. Each side must
 * hold at least one window of t tokens. */
static ty_status check_validation_lm(const jobs_env *env, const char *tenant,
                                     const json_t *v, const json_t *train_doc,
                                     uint32_t t, json_t **out,
                                     uint64_t *n_train_tokens, ty_err *err)
{
    const uint64_t n =
        (uint64_t)json_integer_value(json_object_get(train_doc, "num_tokens"));
    double split = DEFAULT_SPLIT;
    ty_status s;
    if (v) {
        static const char *const keys[] = {"split", "dataset", NULL};
        if ((s = tyjson_check_keys(v, keys, "validation", err)) != TY_OK)
            return s;
        int has_split = json_object_get(v, "split") != NULL;
        if (has_split == (json_object_get(v, "dataset") != NULL))
            return ty_fail(err, TY_EINVAL, "validation",
                           "validation takes either {\"split\": fraction} "
                           "or {\"dataset\": id}");
        if (!has_split) {
            const char *ref;
            char id[TY_ID_MAX];
            json_t *vdoc = NULL;
            if ((s = tyjson_get_string(v, "dataset", "validation", 1,
                                       STORE_NAME_MAX, NULL, &ref, err)) !=
                    TY_OK ||
                (s = resolve_dataset(env, tenant, ref, "validation.dataset", id,
                                     err)) != TY_OK ||
                (s = store_dataset_get(env->store, tenant, id, &vdoc, NULL,
                                       err)) != TY_OK)
                return s;
            const uint64_t vn = (uint64_t)json_integer_value(
                json_object_get(vdoc, "num_tokens"));
            if (ty_task_parse(json_string_value(json_object_get(
                    vdoc, "task"))) != TY_TASK_LANGUAGE_MODELING)
                s = ty_fail(err, TY_EINVAL, "validation.dataset",
                            "validation dataset %s is not a text or tokens "
                            "dataset",
                            id);
            else if (!json_equal(json_object_get(vdoc, "vocab_size"),
                                 json_object_get(train_doc, "vocab_size")))
                s = ty_fail(err, TY_EINVAL, "validation.dataset",
                            "validation dataset %s has a vocabulary of %lld "
                            "tokens; the training dataset's has %lld",
                            id,
                            (long long)json_integer_value(
                                json_object_get(vdoc, "vocab_size")),
                            (long long)json_integer_value(
                                json_object_get(train_doc, "vocab_size")));
            else if (ds_windows_count(vn, t) == 0)
                s = ty_fail(err, TY_EINVAL, "validation.dataset",
                            "validation dataset %s has %llu tokens, no window "
                            "of hyperparameters.context_length %u and its "
                            "next token",
                            id, (unsigned long long)vn, t);
            json_decref(vdoc);
            if (s != TY_OK)
                return s;
            *n_train_tokens = n;
            *out = json_pack("{s:s}", "dataset", id);
            return ds_windows_count(n, t) ? TY_OK
                                          : ty_fail(err, TY_EINVAL,
                                                    "hyperparameters."
                                                    "context_length",
                                                    "the dataset's %llu "
                                                    "tokens hold no window "
                                                    "of %u tokens and its "
                                                    "next token",
                                                    (unsigned long long)n, t);
        }
        if ((s = tyjson_get_number(v, "split", "validation", 1, 0.0, 0.9, 0.0,
                                   &split, err)) != TY_OK)
            return s;
    }
    uint64_t n_train, n_val;
    ds_lm_split(n, split, &n_train, &n_val);
    if (ds_windows_count(n_train, t) == 0)
        return ty_fail(err, TY_EINVAL, "hyperparameters.context_length",
                       "the %llu training tokens (the text without its "
                       "held-out %g) hold no window of %u tokens and its next "
                       "token; lower hyperparameters.context_length or "
                       "validation.split",
                       (unsigned long long)n_train, split, t);
    if (n_val && ds_windows_count(n_val, t) == 0)
        return ty_fail(err, TY_EINVAL, "validation.split",
                       "the held-out %llu tokens (validation.split %g) hold "
                       "no window of %u tokens and its next token; raise "
                       "validation.split, lower "
                       "hyperparameters.context_length, or give a validation "
                       "dataset",
                       (unsigned long long)n_val, split, t);
    *n_train_tokens = n_train;
    *out = json_pack("{s:f}", "split", split);
    return TY_OK;
}

/* The rest of admission_check for a language-modeling dataset: the model
 * sees windows of hyperparameters.context_length tokens and predicts over
 * the dataset's vocabulary. */
static ty_status admit_lm(const jobs_env *env, const char *tenant,
                          const job_submission *sub, json_t *hp_in,
                          admission *a, ty_err *err)
{
    const json_t *ds = a->dataset;
    const uint32_t vocab =
        (uint32_t)json_integer_value(json_object_get(ds, "vocab_size"));
    train_hparams hp;
    ty_status s;
    if (!sub->model)
        return ty_fail(err, TY_EINVAL, "model",
                       "model is required: {\"layers\": [...]}");
    if ((s = train_hparams_parse(hp_in, &hp, &a->hyperparameters, err)) !=
            TY_OK ||
        (s = train_hparams_resolve_loss(&hp, TY_TASK_LANGUAGE_MODELING, vocab,
                                        a->hyperparameters, err)) != TY_OK)
        return s;
    const uint32_t t = hp.context_length;
    uint64_t n_train_tokens = 0, params = 0;
    if ((s = check_validation_lm(env, tenant, sub->validation, ds, t,
                                 &a->validation, &n_train_tokens, err)) !=
            TY_OK ||
        (s = nn_spec_validate_for_loss(sub->model, &t, 1, vocab,
                                       TY_TASK_LANGUAGE_MODELING, &hp.loss,
                                       &a->spec, &params, err)) != TY_OK ||
        (s = check_init_from(env, tenant, &hp, a->spec, &t, 1, vocab,
                             TY_TASK_LANGUAGE_MODELING, a->hyperparameters,
                             err)) != TY_OK)
        return s;
    uint64_t windows = ds_windows_count(n_train_tokens, t);
    train_memory mem;
    if ((s = check_memory(env, sub, a->spec, &t, 1, vocab,
                          TY_TASK_LANGUAGE_MODELING, &hp,
                          windows > UINT32_MAX ? UINT32_MAX : (uint32_t)windows,
                          &mem, err)) != TY_OK)
        return s;
    a->memory_bytes = mem.total;
    a->param_count = params;
    return TY_OK;
}

/* *out: a copy of model in which, on a text classification dataset (a CSV
 * with text_column: rows of token ids), the embedding layers that name no
 * vocab_size get the dataset's. Such a dataset's model must start with an
 * embedding (a 422 says so). */
static ty_status text_model(const json_t *model, const json_t *ds, json_t **out,
                            ty_err *err)
{
    const json_t *vocab = json_object_get(ds, "vocab_size");
    *out = json_deep_copy(model);
    json_t *layers = json_object_get(*out, "layers");
    if (!*out)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    if (!json_is_integer(vocab) || !json_is_array(layers))
        return TY_OK;
    const char *first =
        json_string_value(json_object_get(json_array_get(layers, 0), "type"));
    if (!first || strcmp(first, "embedding"))
        return ty_fail(err, TY_EINVAL, "model.layers[0]",
                       "dataset %s holds texts as token ids: start the model "
                       "with {\"type\": \"embedding\", \"dim\": 64} (its "
                       "vocab_size, %lld, comes from the dataset)",
                       json_string_value(json_object_get(ds, "name")),
                       (long long)json_integer_value(vocab));
    size_t i;
    json_t *l;
    json_array_foreach (layers, i, l) {
        const char *type = json_string_value(json_object_get(l, "type"));
        if (type && !strcmp(type, "embedding") &&
            !json_object_get(l, "vocab_size") &&
            json_object_set(l, "vocab_size", (json_t *)vocab) != 0)
            return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    return TY_OK;
}

ty_status admission_check(const jobs_env *env, const char *tenant,
                          const job_submission *sub, admission *a, ty_err *err)
{
    memset(a, 0, sizeof *a);
    int64_t max_attempts = 0;
    ty_status s = TY_OK;
    json_t *model = NULL;
    /* hyperparameters.max_attempts is the service's (retries after a
     * crash); the trainer's parser does not know it. */
    json_t *hp_in = json_deep_copy(sub->hyperparameters);
    if (json_is_object(hp_in) && json_object_get(hp_in, "max_attempts")) {
        if ((s = tyjson_get_int(hp_in, "max_attempts", "hyperparameters", 0, 1,
                                100, 0, &max_attempts, err)) != TY_OK)
            goto done;
        json_object_del(hp_in, "max_attempts");
    }
    if ((s = resolve_dataset(env, tenant, sub->dataset, "dataset",
                             a->dataset_id, err)) != TY_OK ||
        (s = store_dataset_get(env->store, tenant, a->dataset_id, &a->dataset,
                               NULL, err)) != TY_OK)
        goto done;
    const json_t *ds = a->dataset;
    a->name =
        sub->name ? sub->name : json_string_value(json_object_get(ds, "name"));
    /* text and tokens datasets hold a token array, not examples */
    if (ty_task_parse(json_string_value(json_object_get(ds, "task"))) ==
        TY_TASK_LANGUAGE_MODELING) {
        if ((s = admit_lm(env, tenant, sub, hp_in, a, err)) == TY_OK &&
            max_attempts > 0)
            json_object_set_new(a->hyperparameters, "max_attempts",
                                json_integer(max_attempts));
        goto done;
    }
    if ((s = check_validation(env, tenant, sub->validation, ds, &a->validation,
                              err)) != TY_OK)
        goto done;

    if (!sub->model) {
        s = ty_fail(err, TY_EINVAL, "model",
                    "model is required: {\"layers\": [...]}");
        goto done;
    }
    if ((s = text_model(sub->model, ds, &model, err)) != TY_OK)
        goto done;
    uint32_t shape[TY_DS_MAX_DIMS], ndim;
    if (!doc_shape(ds, shape, &ndim)) {
        s = ty_fail(err, TY_EINTERNAL, NULL, "dataset %s has no input shape",
                    a->dataset_id);
        goto done;
    }
    ty_task task =
        ty_task_parse(json_string_value(json_object_get(ds, "task"))) ==
                TY_TASK_REGRESSION
            ? TY_TASK_REGRESSION
            : TY_TASK_CLASSIFICATION;
    uint32_t outputs = (uint32_t)json_integer_value(json_object_get(
        ds, task == TY_TASK_CLASSIFICATION ? "num_classes" : "num_targets"));
    /* The hyperparameters first: the loss decides the model's output size
     * (1 unit for binary_cross_entropy). */
    uint64_t params = 0;
    train_hparams hp;
    if ((s = train_hparams_parse(hp_in, &hp, &a->hyperparameters, err)) !=
            TY_OK ||
        (s = train_hparams_resolve_loss(&hp, task, outputs, a->hyperparameters,
                                        err)) != TY_OK ||
        (s = nn_spec_validate_for_loss(model, shape, ndim, outputs, task,
                                       &hp.loss, &a->spec, &params, err)) !=
            TY_OK ||
        (s = loader_augment_check(&hp.augment, shape, ndim, err)) != TY_OK ||
        (s = check_init_from(env, tenant, &hp, a->spec, shape, ndim, outputs,
                             task, a->hyperparameters, err)) != TY_OK)
        goto done;
    if (max_attempts > 0)
        json_object_set_new(a->hyperparameters, "max_attempts",
                            json_integer(max_attempts));
    train_memory mem;
    if ((s = check_memory(env, sub, a->spec, shape, ndim, outputs, task, &hp,
                          train_examples(ds, a->validation), &mem, err)) !=
        TY_OK)
        goto done;
    a->memory_bytes = mem.total;
    a->param_count = params;
done:
    json_decref(model);
    json_decref(hp_in);
    return s;
}

void admission_free(admission *a)
{
    json_decref(a->dataset);
    json_decref(a->validation);
    json_decref(a->spec);
    json_decref(a->hyperparameters);
    memset(a, 0, sizeof *a);
}
