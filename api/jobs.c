/*
 * jobs.c - /v1/jobs: submit a training job, list, show, per-epoch metrics,
 * cancel.
 *
 * Everything that can be checked at submit is checked here (the dataset, the
 * validation set, the model spec against the dataset's shape, the
 * hyperparameters), so a mistake is a 422 naming the field, not a job that
 * fails minutes later.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "common/ids.h"
#include "common/jsonutil.h"
#include "gpu/inventory.h"
#include "jobs/jobreq.h"
#include "jobs/placement.h"
#include "jobs/runner.h"
#if TRAINYARD_HAVE_CUDA
#include "gpu/cuda/backend.h"
#endif
#include "models/data/dataset.h"
#include "models/train/loader.h"
#include "models/nn.h"
#include "models/train/train.h"
#include "events/hub.h"

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

/* Checks "validation" against the training dataset and writes the
 * normalized object into *out. */
static ty_status check_validation(ty_app *app, const char *tenant,
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
        if ((s = tyjson_get_number(v, "split", "validation", 1, 0.0, 0.9,
                                   0.0, &split, err)) != TY_OK)
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
    const char *id;
    if ((s = tyjson_get_string(v, "dataset", "validation", 1, TY_ID_MAX, NULL,
                               &id, err)) != TY_OK)
        return s;
    json_t *vdoc = NULL;
    s = store_dataset_get(app->store, tenant, id, &vdoc, NULL, err);
    if (s == TY_ENOTFOUND)
        return ty_fail(err, TY_EINVAL, "validation.dataset",
                       "validation dataset %s not found", id);
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
        char *a = json_dumps(json_object_get(vdoc, "input_shape"), JSON_COMPACT);
        char *b = json_dumps(json_object_get(train_doc, "input_shape"),
                             JSON_COMPACT);
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

/* Whether a job asking `req` trains on CUDA here (jobs/runner.h): a GPU
 * job on a real (nvml) inventory, or a CPU job on a host without slots
 * whose --train-device is CUDA - when the server's training device is. */
static int job_on_cuda(const ty_app *app, const sched_request *req)
{
    if (app->train_dev.device < 0)
        return 0;
    int nslots = app->inventory ? app->inventory->nslots : 0;
    if (req->kind == SCHED_REQ_NONE)
        return nslots == 0;
    return app->inventory && app->inventory->source == INV_SOURCE_NVML;
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
static ty_status check_memory(const ty_app *app, const sched_request *req,
                              const json_t *spec,
                              const uint32_t *shape, uint32_t ndim,
                              uint32_t outputs, ty_task task,
                              const train_hparams *hp, uint32_t n_train,
                              train_memory *m, ty_err *err)
{
    int on_cuda = job_on_cuda(app, req);
    const nn_backend *be = train_backend(on_cuda);
    ty_status s = train_memory_estimate_spec(
        spec, shape, ndim, outputs, task, hp, n_train,
        train_threads(app->cfg.worker_threads, be), be, m, err);
    /* On a slot the worker checks the slot's free memory when it starts;
     * here only the --train-device of a host without slots is known. */
    if (s == TY_OK && on_cuda && req->kind == SCHED_REQ_NONE)
        s = place_check_device_memory(m, PLACE_CUDA_OVERHEAD_BYTES,
                                      app->train_dev.total_bytes,
                                      app->train_dev.label, 0, err);
    if (s != TY_OK || !app->cfg.max_job_memory ||
        m->total <= app->cfg.max_job_memory)
        return s;
    char total[32], state[32], grads[32], opt[32], act[32], work[32], cap[32];
    train_format_bytes(m->total, total, sizeof total);
    train_format_bytes(m->state, state, sizeof state);
    train_format_bytes(m->grads, grads, sizeof grads);
    train_format_bytes(m->optimizer, opt, sizeof opt);
    train_format_bytes(m->activations, act, sizeof act);
    train_format_bytes(m->work, work, sizeof work);
    train_format_bytes(app->cfg.max_job_memory, cap, sizeof cap);
    return ty_fail(err, TY_EINVAL, "hyperparameters.batch_size",
                   "the job needs about %s for training (parameters %s, "
                   "gradients %s, optimizer state %s, activations %s at batch "
                   "%u, working memory %s) but this server allows %s per job; "
                   "lower batch_size or use a smaller model",
                   total, state, grads, opt, act, m->batch_rows, work, cap);
}

void api_jobs_create(ty_app *app, http_req *r)
{
    const json_t *body = api_json_object(r);
    if (!body)
        return;
    const char *tenant = api_tenant(r);
    ty_err err = {0};
    json_t *ds = NULL, *validation = NULL, *spec = NULL, *hp_norm = NULL,
           *job = NULL;
    static const char *const keys[] = {"name", "dataset", "validation", "model",
                                       "hyperparameters", "resources",
                                       "priority", NULL};
    const char *name = NULL, *ds_id = NULL;
    json_t *resources = NULL, *hp_in = NULL;
    sched_request req;
    int priority = 0;
    int64_t max_attempts = 0;
    ty_status s;
    if ((s = tyjson_check_keys(body, keys, "", &err)) != TY_OK ||
        (s = tyjson_get_string(body, "dataset", "", 1, TY_ID_MAX, NULL, &ds_id,
                               &err)) != TY_OK ||
        (s = tyjson_get_string(body, "name", "", 0, 200, NULL, &name, &err)) !=
            TY_OK)
        goto fail;
    /* What it asks of the scheduler, and whether this host could ever
     * give it (a 422 saying why, not a job queued forever). */
    if ((s = jobreq_parse(json_object_get(body, "resources"),
                          runner_host_has_gpus(app->runner), &req, &resources,
                          &err)) != TY_OK ||
        (s = jobreq_priority(json_object_get(body, "priority"), &priority,
                             &err)) != TY_OK ||
        (s = runner_request_check(app->runner, tenant, &req, &err)) != TY_OK)
        goto fail;
    /* hyperparameters.max_attempts is the runner's (retries after a crash);
     * the trainer's parser does not know it. */
    hp_in = json_deep_copy(json_object_get(body, "hyperparameters"));
    if (json_is_object(hp_in) && json_object_get(hp_in, "max_attempts")) {
        if ((s = tyjson_get_int(hp_in, "max_attempts", "hyperparameters", 0,
                                1, 100, 0, &max_attempts, &err)) != TY_OK)
            goto fail;
        json_object_del(hp_in, "max_attempts");
    }
    s = store_dataset_get(app->store, tenant, ds_id, &ds, NULL, &err);
    if (s == TY_ENOTFOUND) {
        s = ty_fail(&err, TY_EINVAL, "dataset", "dataset %s not found", ds_id);
        goto fail;
    }
    if (s != TY_OK)
        goto fail;
    if (!name)
        name = json_string_value(json_object_get(ds, "name"));
    if ((s = check_validation(app, tenant, json_object_get(body, "validation"),
                              ds, &validation, &err)) != TY_OK)
        goto fail;

    const json_t *model = json_object_get(body, "model");
    if (!model) {
        s = ty_fail(&err, TY_EINVAL, "model",
                    "model is required: {\"layers\": [...]}");
        goto fail;
    }
    uint32_t shape[TY_DS_MAX_DIMS], ndim;
    if (!doc_shape(ds, shape, &ndim)) {
        s = ty_fail(&err, TY_EINTERNAL, NULL, "dataset %s has no input shape",
                    ds_id);
        goto fail;
    }
    ty_task task = ty_task_parse(json_string_value(json_object_get(ds, "task")))
                           == TY_TASK_REGRESSION
                       ? TY_TASK_REGRESSION
                       : TY_TASK_CLASSIFICATION;
    uint32_t outputs = (uint32_t)json_integer_value(json_object_get(
        ds, task == TY_TASK_CLASSIFICATION ? "num_classes" : "num_targets"));
    /* The hyperparameters first: the loss decides the model's output size
     * (1 unit for binary_cross_entropy). */
    uint64_t params = 0;
    train_hparams hp;
    if ((s = train_hparams_parse(hp_in, &hp, &hp_norm, &err)) != TY_OK ||
        (s = train_hparams_resolve_loss(&hp, task, outputs, hp_norm, &err)) !=
            TY_OK ||
        (s = nn_spec_validate_for_loss(model, shape, ndim, outputs, task,
                                       &hp.loss, &spec, &params, &err)) != TY_OK ||
        (s = loader_augment_check(&hp.augment, shape, ndim, &err)) != TY_OK)
        goto fail;
    if (max_attempts > 0)
        json_object_set_new(hp_norm, "max_attempts", json_integer(max_attempts));
    train_memory mem;
    if ((s = check_memory(app, &req, spec, shape, ndim, outputs, task, &hp,
                          train_examples(ds, validation), &mem, &err)) != TY_OK)
        goto fail;

    char id[TY_ID_MAX];
    if ((s = ty_id_new("job_", id, &err)) != TY_OK ||
        (s = store_job_insert_req(app->store, tenant, id, name, ds_id,
                                  validation, spec, hp_norm,
                                  (int64_t)mem.total, resources, priority,
                                  &err)) != TY_OK ||
        (s = store_job_get(app->store, tenant, id, &job, &err)) != TY_OK)
        goto fail;
    /* job.created goes out before the runner can publish job.started. */
    json_t *created = json_deep_copy(job);
    runner_annotate(app->runner, created, tenant);
    ev_publish(app->events, tenant, id, EV_JOB_CREATED,
               json_pack("{s:o}", "job", created));
    /* The reply shows the job as submitted (queued), read before the runner
     * can start it. */
    if ((s = runner_submit(app->runner, tenant, id, priority, &req, &err)) !=
        TY_OK) {
        /* Stored but not schedulable (a quota lowered meanwhile): the job
         * fails with the reason rather than waiting forever. */
        ty_err e2 = {0};
        json_t *failed = NULL;
        if (store_job_finish(app->store, id, JOB_FAILED, err.msg, NULL, &e2) ==
                TY_OK &&
            store_job_get(app->store, tenant, id, &failed, &e2) == TY_OK) {
            runner_annotate(app->runner, failed, tenant);
            ev_publish(app->events, tenant, id, EV_JOB_FINISHED,
                       json_pack("{s:o}", "job", failed));
        }
        goto fail;
    }
    runner_annotate(app->runner, job, tenant);
    char location[128];
    snprintf(location, sizeof location, "/v1/jobs/%s", id);
    http_reply_header(r, "Location", location);
    http_reply_json(r, 202, job);
    job = NULL;
fail:
    if (s != TY_OK)
        http_reply_error(r, s, &err);
    json_decref(ds);
    json_decref(validation);
    json_decref(spec);
    json_decref(hp_norm);
    json_decref(job);
    json_decref(resources);
    json_decref(hp_in);
}

void api_jobs_list(ty_app *app, http_req *r)
{
    store_page page;
    if (!api_page(r, &page))
        return;
    const char *status = http_req_query(r, "status");
    static const char *const states[] = {JOB_QUEUED, JOB_RUNNING, JOB_SUCCEEDED,
                                         JOB_FAILED, JOB_CANCELLED};
    if (status) {
        int ok = 0;
        for (size_t i = 0; i < TY_ARRAY_LEN(states); i++)
            ok |= !strcmp(status, states[i]);
        if (!ok) {
            http_reply_problem(r, 400, "status",
                               "status must be queued, running, succeeded, "
                               "failed or cancelled");
            return;
        }
    }
    json_t *items;
    int64_t next;
    ty_err err = {0};
    ty_status s = store_job_list(app->store, api_tenant(r), status, page,
                                 &items, &next, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    runner_annotate(app->runner, items, api_tenant(r));
    api_reply_list(r, items, next);
}

void api_jobs_get(ty_app *app, http_req *r)
{
    json_t *doc;
    ty_err err = {0};
    ty_status s = store_job_get(app->store, api_tenant(r), http_req_param(r, 0),
                                &doc, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    runner_annotate(app->runner, doc, api_tenant(r));
    http_reply_json(r, 200, doc);
}

void api_jobs_metrics(ty_app *app, http_req *r)
{
    json_t *epochs;
    ty_err err = {0};
    const char *id = http_req_param(r, 0);
    ty_status s = store_job_epochs(app->store, api_tenant(r), id, &epochs, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    http_reply_json(r, 200, json_pack("{s:s, s:o}", "job", id, "epochs", epochs));
}

void api_jobs_cancel(ty_app *app, http_req *r)
{
    ty_err err = {0};
    const char *id = http_req_param(r, 0);
    int was_running = 0;
    json_t *doc;
    ty_status s = store_job_request_cancel(app->store, api_tenant(r), id,
                                           &was_running, &err);
    /* Queued: it leaves the scheduler (and a slot it was promised) now;
     * running: its worker is stopped. */
    if (s == TY_OK)
        runner_cancel(app->runner, id);
    if (s == TY_OK)
        s = store_job_get(app->store, api_tenant(r), id, &doc, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    runner_annotate(app->runner, doc, api_tenant(r));
    /* A running job's end is the runner's to publish. */
    if (!was_running)
        ev_publish(app->events, api_tenant(r), id, EV_JOB_FINISHED,
                   json_pack("{s:O}", "job", doc));
    /* 202: a running job stops within seconds; 200: it is cancelled now. */
    http_reply_json(r, was_running ? 202 : 200, doc);
}
