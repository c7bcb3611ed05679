/*
 * run.c - the training loop (see train.h): set up a network from the job,
 * resume from a checkpoint when one exists, run minibatch epochs with
 * validation, report progress, checkpoint, and write the final model.
 *
 * Everything a step touches is allocated before the first step: the
 * parameter and gradient blocks, the optimizer state, the workspace for
 * batch_size examples, the epoch's index permutation and the data loader's
 * batch buffers. The loader gathers each minibatch (converted to float,
 * preprocessed and augmented) - on its own thread, one minibatch ahead,
 * when a core is left over by the compute threads - and a step points the
 * workspace's input at it and runs forward, loss and backward; after
 * `accumulation_steps` such minibatches an optimizer step clips the summed
 * gradients (when asked), sets the scheduled learning rate and updates the
 * parameters. Nothing allocates.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "models/safetensors.h"
#include "models/train/loader.h"
#include "models/train/train_internal.h"

/* OpenBLAS's thread control (declared here to keep cblas.h out). */
void openblas_set_num_threads(int num_threads);

#define PROGRESS_INTERVAL 0.25 /* seconds between on_progress calls */

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static ty_status check_dataset_targets(const ty_dataset *ds, const char *what,
                                       ty_err *err)
{
    if (ds->task == TY_TASK_CLASSIFICATION &&
        (!ds->y_class || !ds->num_classes))
        return ty_fail(err, TY_EINVAL, NULL, "the %s data has no class labels",
                       what);
    if (ds->task != TY_TASK_CLASSIFICATION && (!ds->y_value || !ds->y_dim))
        return ty_fail(err, TY_EINVAL, NULL, "the %s data has no target values",
                       what);
    if (ds->task == TY_TASK_LANGUAGE_MODELING &&
        (!ds->num_classes || ds->y_dim != ds->features))
        return ty_fail(err, TY_EINVAL, NULL,
                       "the %s data is not a set of token windows", what);
    if (!ds->x || !ds->features)
        return ty_fail(err, TY_EINVAL, NULL, "the %s data has no features",
                       what);
    return TY_OK;
}

/* Index range and labels of every training example, checked once so the
 * steps need not. */
static ty_status check_train_examples(const trainer *t, ty_err *err)
{
    const ty_dataset *ds = t->ds;
    const uint32_t *idx = t->job->train_idx;
    for (uint32_t i = 0; i < t->n_train; i++) {
        uint32_t row = idx ? idx[i] : i;
        if (row >= ds->num_examples)
            return ty_fail(err, TY_EINVAL, NULL,
                           "training example index %u is out of range (%u "
                           "examples)",
                           row, ds->num_examples);
        if (ds->task == TY_TASK_CLASSIFICATION &&
            (ds->y_class[row] < 0 ||
             (uint32_t)ds->y_class[row] >= ds->num_classes))
            return ty_fail(err, TY_EINVAL, NULL,
                           "training example %u has class index %d, outside 0 "
                           "to %u",
                           row, ds->y_class[row], ds->num_classes - 1);
    }
    return TY_OK;
}

static ty_status check_extra_meta(const json_t *extra, ty_err *err)
{
    if (!extra)
        return TY_OK;
    if (!json_is_object(extra))
        return ty_fail(err, TY_EINVAL, NULL,
                       "extra metadata must be an object");
    const char *k;
    json_t *v;
    json_object_foreach ((json_t *)extra, k, v) {
        if (!json_is_string(v))
            return ty_fail(err, TY_EINVAL, NULL,
                           "extra metadata value '%.64s' must be a string", k);
    }
    return TY_OK;
}

/* Counts bytes the run now holds from the backend's alloc. */
static void train_mem_add(trainer *t, uint64_t bytes)
{
    t->mem_live += bytes;
    if (t->mem_live > t->mem_peak)
        t->mem_peak = t->mem_live;
}

static void trainer_free(trainer *t)
{
    /* First: its thread reads the dataset, the preprocessing and perm. */
    loader_destroy(t->loader);
    train_graph_free(t);
    json_decref(t->spec);
    json_decref(t->identity);
    /* The backend's memory goes through the workspace's context, so
     * before the workspace. */
    if (t->ws) {
        t->be->release(t->ws->ex, t->params);
        t->be->release(t->ws->ex, t->grads);
        t->be->release(t->ws->ex, t->lp_params);
    }
    free(t->host);
    nn_optim_free(&t->opt);
    dp_zero_release(t);
    nn_workspace_destroy(t->ws);
    nn_arch_free(&t->arch);
    nn_pool_destroy(t->pool);
    nn_preproc_free(&t->pp);
    nn_target_free(&t->tg);
    free(t->perm);
    free(t->lperm);
    dp_free(t);
}

static ty_status trainer_setup(trainer *t, const train_job *job, ty_err *err)
{
    ty_status st;
    memset(t, 0, sizeof *t);
    if (!job || !job->hp || !job->spec || !job->train || !job->model_path)
        return ty_fail(err, TY_EINVAL, NULL,
                       "a training job needs a spec, hyperparameters, training "
                       "data and a model path");
    t->job = job;
    t->hp = job->hp;
    t->ds = job->train;
    t->n_train = job->train_idx ? job->n_train : job->train->num_examples;
    const ty_dataset *ds = t->ds;
    const train_hparams *hp = t->hp;
    if (hp->epochs == 0 || hp->batch_size == 0)
        return ty_fail(err, TY_EINVAL, NULL,
                       "epochs and batch_size must be at least 1");
    if ((st = check_dataset_targets(ds, "training", err)) != TY_OK)
        return st;
    if (t->n_train == 0)
        return ty_fail(err, TY_EINVAL, NULL, "there are no training examples");
    if ((st = check_train_examples(t, err)) != TY_OK ||
        (st = check_extra_meta(job->extra_meta, err)) != TY_OK ||
        (st = loader_augment_check(&hp->augment, ds->shape, ds->ndim, err)) !=
            TY_OK)
        return st;
    /* A language model's windows (models/data/windows.h) carry the
     * vocabulary as num_classes. */
    uint32_t outputs =
        ds->task == TY_TASK_REGRESSION ? ds->y_dim : ds->num_classes;
    if (job->be && !nn_backend_host_visible(job->be) && !job->ex)
        return ty_fail(err, TY_EINVAL, NULL,
                       "the %s backend needs an execution context",
                       job->be->name);
    if ((st = nn_arch_build_on(job->spec, ds->shape, ds->ndim, outputs,
                               ds->task, &hp->loss, job->be, &t->arch, &t->spec,
                               err)) != TY_OK ||
        (st = train_precision_resolve(hp, t->arch.be, job->ex, &t->precision,
                                      err)) != TY_OK)
        return st;
    /* Before the workspace: dense layers plan their 16-bit scratch. */
    nn_arch_set_precision(&t->arch, t->precision);
    if (job->val) {
        const ty_dataset *v = job->val;
        if ((st = check_dataset_targets(v, "validation", err)) != TY_OK)
            return st;
        if (v->features != ds->features || v->task != ds->task ||
            (ds->task != TY_TASK_CLASSIFICATION && v->y_dim != ds->y_dim) ||
            (ds->task == TY_TASK_LANGUAGE_MODELING &&
             v->num_classes != ds->num_classes))
            return ty_fail(err, TY_EINVAL, NULL,
                           "the validation data does not have the training "
                           "data's shape and task");
    }

    /* The backend splits work over its own pool; OpenBLAS runs each part
     * on one thread (its threading is far slower on these sizes). Without
     * a pool (threads 1, or no threads to be had) everything is serial.
     * The pool comes first so the workspace sizes its work arena for it
     * once (train_memory_estimate counts that one arena; should the pool
     * not start, the arena is one thread's and the estimate an upper
     * bound). */
    t->be = t->arch.be;
    if ((st = dp_setup(t, err)) != TY_OK)
        return st;
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const int threads = train_threads(job->threads, t->be);
    openblas_set_num_threads(1);
    t->pool = threads > 1 ? nn_pool_create(threads) : NULL;
    const nn_exec base = {.pool = t->pool,
                          .device = job->ex ? job->ex->device : NULL,
                          .precision = t->precision};

    /* params is the state block: parameters, then buffers. */
    const uint64_t p = t->arch.param_count ? t->arch.param_count : 1;
    const uint64_t state = t->arch.param_count + t->arch.buffer_count + 1;
    const uint32_t rows = dp_rows(t); /* this rank's share of a batch */
    t->perm = malloc((size_t)t->n_train * sizeof *t->perm);
    t->ws = nn_workspace_create_on(&t->arch, rows, 1, &base);
    if (t->ws) {
        train_mem_add(t, t->ws->mem_bytes + t->ws->work_bytes);
        if ((t->params = t->be->alloc(t->ws->ex, state * sizeof(float))))
            train_mem_add(t, state * sizeof(float));
        const uint64_t gb = train_grads_bytes(t->be, p);
        if ((t->grads = t->be->alloc(t->ws->ex, gb))) {
            train_mem_add(t, gb);
            t->be->zero(t->ws->ex, t->grads, p * sizeof(float));
        }
    }
    if (t->ws && t->precision != NN_DT_F32) {
        const uint64_t lp = p * nn_dtype_size(t->precision);
        if ((t->lp_params = t->be->alloc(t->ws->ex, (size_t)lp)))
            train_mem_add(t, lp);
        t->ws->lp_params = t->lp_params;
    }
    if (!t->params || !t->grads || !t->perm || !t->ws ||
        (t->precision != NN_DT_F32 && !t->lp_params))
        return ty_fail(err, TY_ENOMEM, NULL,
                       "out of memory for the network's buffers");
    loss_scaler_init(&t->scaler);
    if (t->precision == NN_DT_F16)
        t->ws->loss_scale = t->scaler.scale;
    /* ZeRO-1: the state of this rank's shard only (dp_setup set it). */
    if ((st = nn_optim_init_on(&t->opt, train_hparams_optim(hp),
                               t->zero_hi - t->zero_lo, t->be, t->ws->ex,
                               err)) != TY_OK)
        return st;
    train_mem_add(t, t->opt.bytes);
    if (!nn_backend_host_visible(t->be)) {
        /* Zeroed: the slots' mirror uploads as the fresh state. */
        t->host = calloc(state + (uint64_t)t->opt.n_slots * p, sizeof(float));
        if (!t->host)
            return ty_fail(err, TY_ENOMEM, NULL,
                           "out of memory for the network's buffers");
        train_graph_setup(t);
    }
    const char *pre =
        json_string_value(json_object_get(ds->meta, "preprocess"));
    if ((st = nn_preproc_fit(&t->pp, pre, ds, job->train_idx, t->n_train,
                             err)) != TY_OK)
        return st;
    /* Regression targets in natural units (prices near 1e5) would leave
     * the loss and its gradients at that scale: the net learns them
     * standardized over the training split (models/target.h). Only when
     * asked: every submit settles the default to it (train.h), and a job
     * admitted before it existed has none and resumes as it began. */
    if (ds->task == TY_TASK_REGRESSION &&
        hp->target_scaling == TRAIN_TARGET_STANDARDIZE &&
        (st = nn_target_fit(&t->tg, ds, job->train_idx, t->n_train, err)) !=
            TY_OK)
        return st;
    t->accum = hp->accumulation_steps ? hp->accumulation_steps : 1;
    uint64_t batches =
        (t->n_train + (uint64_t)hp->batch_size - 1) / hp->batch_size;
    t->steps_per_epoch = (batches + t->accum - 1) / t->accum;
    t->total_steps = t->steps_per_epoch * hp->epochs;
    if (hp->max_steps && hp->max_steps < t->total_steps)
        t->total_steps = hp->max_steps;
    t->lr = hp->learning_rate;
    if (!(t->identity = train_run_identity(t)))
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");

    /* The loader's own thread pays off only on a core the compute threads
     * leave free: on a full machine it preempts a pool worker mid-GEMM and
     * the whole step waits for that part (measured on 2 cores, 2 threads:
     * steps ~5% slower than gathering inline, which costs ~3%). Nor is there
     * anything to overlap in a one-minibatch epoch (minibatches are not
     * prefetched across epochs: perm changes there). */
    int prefetch = job->prefetch > 0 || (job->prefetch == 0 && cores > threads);
    loader_config lc = {
        .ds = ds,
        .pp = &t->pp,
        .tg = &t->tg,
        .batch_size = rows,
        .n = t->world > 1 ? t->local_n : t->n_train,
        .outputs = nn_arch_target_width(&t->arch),
        .augment = hp->augment,
        .seed = hp->seed,
        .pool = t->pool,
        .prefetch = prefetch && batches > 1,
        .be = t->host ? t->be : NULL,
        .ex = t->ws->ex,
    };
    return loader_create(&lc, &t->loader, err);
}

/* The epoch's example order, handed to the loader from the minibatch of
 * the step a checkpoint may have restored; the dropout stream and sums start fresh
 * unless a mid-epoch checkpoint restored them. */
static void epoch_begin(trainer *t, uint32_t e)
{
    loader_stop(t->loader); /* before perm changes under it */
    for (uint32_t i = 0; i < t->n_train; i++)
        t->perm[i] = t->job->train_idx ? t->job->train_idx[i] : i;
    ty_rng shuffle;
    ty_rng_seed(&shuffle, t->hp->seed, TRAIN_STREAM_SHUFFLE(e));
    ty_rng_shuffle_u32(&shuffle, t->perm, t->n_train);
    loader_begin_epoch(t->loader, e, dp_epoch_order(t),
                       t->epoch_step * t->accum);
    if (t->epoch_step == 0) {
        ty_rng_seed(&t->drop_rng, t->hp->seed, TRAIN_STREAM_DROPOUT(e));
        t->loss_sum = 0.0;
        t->hits = t->seen = 0;
        t->epoch_skipped = 0;
    }
    if (t->acc)
        train_sums_upload(t);
}

/* Forward and backward over the loader's minibatch b, one minibatch of an
 * optimizer step over grad_rows examples: its gradients add to t->grads as
 * part of the mean over those. Returns the batch's summed per-example
 * loss. */
static double train_step(trainer *t, const loader_batch *b, uint32_t grad_rows,
                         uint32_t *hits)
{
    nn_workspace *ws = t->ws;
    const uint32_t c = t->arch.num_outputs, m = b->n;
    double sum;
    if (nn_backend_host_visible(t->arch.be)) {
        /* The step reads the loader's buffer in place; the workspace gets
         * its own input back after (validation gathers into that). */
        float *own = loader_bind_input(ws, b->x);
        nn_forward(&t->arch, t->params, ws, m, 1, &t->drop_rng);
        sum = nn_loss_scaled(&t->arch, ws, m, b->labels, b->targets, hits,
                             grad_rows);
        nn_backward(&t->arch, t->params, t->grads, ws, m);
        loader_bind_input(ws, own);
    } else {
        /* b was uploaded (upload_batch); the sums go to t->acc, so nothing
         * here waits for the device and a graph may capture it. */
        nn_forward(&t->arch, t->params, ws, m, 1, &t->drop_rng);
        ws->own.acc = t->acc;
        sum = nn_loss_scaled(&t->arch, ws, m, b->labels ? ws->labels : NULL,
                             b->targets ? ws->targets : NULL, hits, grad_rows);
        ws->own.acc = NULL;
        nn_backward(&t->arch, t->params, t->grads, ws, m);
    }
    /* MSE sums over elements; per example is that over the outputs. */
    return t->arch.task == TY_TASK_REGRESSION ? sum / c : sum;
}

void train_lp_refresh(const trainer *t)
{
    if (t->lp_params)
        t->be->cast(t->ws->ex, t->lp_params, t->precision, t->params,
                    (size_t)t->arch.param_count);
}

/* fp16's loss scaling at an optimizer step: gradients with an inf or NaN
 * skip the step (they are dropped; the optimizer, its step count and the
 * weights stay as they were, as GradScaler.step skips optimizer.step);
 * finite ones are divided by the scale they were made with. The scaler
 * then moves the scale the next steps' loss gradients get. The
 * finiteness is the global gradient's (dp_grad_sum_squares: with
 * ZeRO-1's reduce-scatter every rank checks the sum over all ranges), so
 * every rank skips or steps alike. With the reduce-scatter only this
 * rank's range is unscaled (the rest of the block holds partial sums no
 * one reads). *go: 1 when the step goes ahead. */
static ty_status loss_scale_admit(trainer *t, int *go, ty_err *err)
{
    const nn_exec *ex = t->ws->ex;
    const uint64_t p = t->arch.param_count;
    const float made_with = t->scaler.scale;
    double ss = 0.0;
    ty_status st = dp_grad_sum_squares(t, &ss, err);
    if (st != TY_OK)
        return st;
    *go = loss_scaler_update(&t->scaler, isfinite(ss));
    t->ws->loss_scale = t->scaler.scale;
    if (!*go) {
        t->be->zero(ex, t->grads, (size_t)p * sizeof(float));
        t->epoch_skipped++;
        return TY_OK;
    }
    if (t->zero_rs)
        t->be->scale(ex, t->grads + t->zero_lo,
                     (size_t)(t->zero_hi - t->zero_lo), 1.0f / made_with);
    else
        t->be->scale(ex, t->grads, (size_t)p, 1.0f / made_with);
    return TY_OK;
}

/* The optimizer step closing a group of minibatches: (fp16: check and
 * unscale,) clip, schedule, update (which zeroes the gradients), and
 * refresh the 16-bit copy of the weights. Fails only where the global
 * norm takes a collective (ZeRO-1's reduce-scatter; the comm is broken
 * then); a run at world 1 never does. */
static ty_status optimizer_step(trainer *t, ty_err *err)
{
    const train_hparams *hp = t->hp;
    t->lr = train_lr_at(hp, t->step, t->steps_per_epoch, t->total_steps);
    t->opt.lr = t->lr;
    ty_status st = TY_OK;
    int go = 1;
    if (t->precision == NN_DT_F16 &&
        ((st = loss_scale_admit(t, &go, err)) != TY_OK || !go))
        return st;
    if (hp->clip_grad_norm > 0.0) {
        /* The whole gradient's norm (every rank's ranges with ZeRO-1's
         * reduce-scatter); this rank's range is scaled. */
        double ss = 0.0;
        if ((st = dp_grad_sum_squares(t, &ss, err)) != TY_OK)
            return st;
        nn_optim_clip_to_norm(t->arch.be, t->ws->ex, t->grads + t->zero_lo,
                              t->zero_hi - t->zero_lo, sqrt(ss),
                              hp->clip_grad_norm);
    }
    /* ZeRO-1 steps this rank's shard (the whole block otherwise);
     * dp_zero_after_step then gathers the others' shards. */
    nn_optim_step(&t->opt, t->arch.be, t->ws->ex, t->params + t->zero_lo,
                  t->grads + t->zero_lo);
    train_lp_refresh(t);
    return TY_OK;
}

/* optimizer_step on a device (world 1: it cannot fail). */
static void device_optimizer_step(trainer *t)
{
    ty_err ignored = {0};
    (void)optimizer_step(t, &ignored);
}

/* The loader's batch b into the workspace's fixed input buffers (device
 * runs: the loader's slots are the host staging), queued on the stream;
 * the loader keeps b's slot until the device has read it. */
static void upload_batch(trainer *t, const loader_batch *b)
{
    nn_workspace *ws = t->ws;
    const nn_backend *be = t->be;
    const uint32_t m = b->n;
    be->upload(ws->ex, ws->act[0], b->x,
               (size_t)m * nn_shape_numel(&t->arch.input) * sizeof(float));
    if (b->labels)
        be->upload(ws->ex, ws->labels, b->labels, (size_t)m * sizeof(int32_t));
    if (b->targets)
        be->upload(ws->ex, ws->targets, b->targets,
                   (size_t)m * nn_arch_target_width(&t->arch) * sizeof(float));
    loader_uploaded(t->loader);
}

/* Captures train_step and optimizer_step over b (a full-size batch, already
 * uploaded) as t->graph; the capture runs nothing. On failure the run goes
 * on op by op (graph_reason says why) and the host's step count is as
 * before. */
static void capture_step(trainer *t, const loader_batch *b)
{
    const nn_backend *be = t->be;
    const uint64_t opt_t = t->opt.t;
    ty_err gerr = {0};
    if (be->graph_begin(t->ws->ex) != 0) {
        train_graph_off(t, "CUDA graph capture could not start");
        return;
    }
    uint32_t hits;
    train_step(t, b, b->n, &hits);
    device_optimizer_step(t);
    if (be->graph_end(t->ws->ex, &t->graph, &gerr) != 0) {
        t->graph = NULL;
        t->opt.t = opt_t;
        train_graph_off(t, "CUDA graph capture failed: %s", gerr.msg);
    }
}

/* One optimizer step over examples [first, end) of the epoch on a device:
 * this step's optimizer values and each minibatch are uploaded, then the
 * run's captured step is replayed (captured first at the run's second
 * full-size step), or the step runs op by op. Its sums go to t->acc. */
static void device_step(trainer *t, uint32_t first, uint32_t end)
{
    const uint32_t bs = t->hp->batch_size;
    train_dyn_upload(t);
    if (t->graph_on && end - first == bs && t->eager_full) {
        const loader_batch *b = loader_next(t->loader);
        upload_batch(t, b);
        if (!t->graph)
            capture_step(t, b); /* counts the step in opt.t */
        else
            t->opt.t++; /* nn_optim_step's count, not replayed */
        if (t->graph) {
            t->be->graph_launch(t->ws->ex, t->graph);
            t->graph_launches++;
            return;
        }
        uint32_t hits;
        train_step(t, b, bs, &hits);
        device_optimizer_step(t);
        return;
    }
    for (uint32_t i = first; i < end; i += bs) {
        const loader_batch *b = loader_next(t->loader);
        uint32_t hits;
        upload_batch(t, b);
        train_step(t, b, end - first, &hits);
    }
    device_optimizer_step(t);
    if (end - first == (uint64_t)bs * t->accum)
        t->eager_full = 1;
}

/* The epochs the run takes: max_steps may end it before hp->epochs. */
static uint32_t run_epochs(const trainer *t)
{
    uint64_t spe = t->steps_per_epoch ? t->steps_per_epoch : 1;
    uint64_t e = (t->total_steps + spe - 1) / spe;
    return e < t->hp->epochs ? (uint32_t)e : t->hp->epochs;
}

static void report_progress(const trainer *t, uint32_t e, double rate)
{
    if (!t->job->cb.on_progress || t->rank != 0)
        return;
    uint64_t total = t->total_steps;
    train_progress p = {
        .epoch = e + 1,
        .epochs = run_epochs(t),
        .step = t->step,
        .steps_per_epoch = t->steps_per_epoch,
        .total_steps = total,
        .fraction = total ? (double)t->step / (double)total : 1.0,
        .loss = t->seen ? t->loss_sum / (double)t->seen : 0.0,
        .val_loss = NAN,
        .samples_per_sec = rate,
        .lr = t->lr,
    };
    t->job->cb.on_progress(t->job->cb.ctx, &p);
}

/* eval_every_steps: the validation loss now, with the progress. */
static ty_status report_eval(trainer *t, uint32_t e, double rate, ty_err *err)
{
    const train_job *job = t->job;
    /* Every rank measures it (only rank 0 reports): none waits in a
     * collective, against its timeout, while another validates. */
    uint32_t n_val = job->val_idx ? job->n_val : job->val->num_examples;
    double loss, acc;
    ty_status st = nn_eval_examples_reg(
        &t->arch, t->params, &t->pp, &t->tg, t->ws, job->val, job->val_idx,
        n_val, job->val_class_map, &loss, &acc, NULL, err);
    if (st != TY_OK) {
        ty_err_prefix(err, "validation at step %llu",
                      (unsigned long long)t->step);
        return st;
    }
    if (!job->cb.on_progress || t->rank != 0)
        return TY_OK;
    uint64_t total = t->total_steps;
    train_progress p = {
        .epoch = e + 1,
        .epochs = run_epochs(t),
        .step = t->step,
        .steps_per_epoch = t->steps_per_epoch,
        .total_steps = total,
        .fraction = total ? (double)t->step / (double)total : 1.0,
        .loss = t->seen ? t->loss_sum / (double)t->seen : 0.0,
        .val_loss = loss,
        .samples_per_sec = rate,
        .lr = t->lr,
    };
    t->job->cb.on_progress(t->job->cb.ctx, &p);
    return TY_OK;
}

/* Where and how the run's epochs run, for their metrics. */
static void epoch_where(const trainer *t, train_epoch_metrics *m)
{
    m->device = t->job->device_label ? t->job->device_label : t->be->name;
    m->precision = nn_dtype_name(t->precision);
    m->cuda_graph = nn_backend_host_visible(t->be) ? -1 : t->graph_on;
    m->cuda_graph_reason = m->cuda_graph == 0 ? t->graph_reason : NULL;
}

/* The checkpoint of the trainer's position (epoch e in progress, or just
 * finished), its sums read back first on a device. */
static ty_status save_checkpoint(trainer *t, uint32_t e, ty_err *err)
{
    ty_status st = train_sums_read(t, e, err);
    if (st == TY_OK)
        st = dp_zero_collect(t, err);
    if (st == TY_OK && t->rank == 0)
        st = train_ckpt_save(t, err);
    dp_zero_release(t);
    st = dp_agree(t, st, "to write the checkpoint", err);
    if (st == TY_OK)
        t->ckpt_step = t->step;
    return st;
}

/* A preemption at the step boundary before epoch e's next step: the
 * checkpoint of this position unless one is already on disk (or no step
 * was taken), on_preempt, TY_EPREEMPTED. */
static ty_status preempt_here(trainer *t, uint32_t e, ty_err *err)
{
    const train_job *job = t->job;
    int checkpointed = job->checkpoint_path && t->step > 0;
    if (checkpointed && t->ckpt_step != t->step) {
        ty_status st = save_checkpoint(t, e, err);
        if (st != TY_OK)
            return st;
    }
    if (job->cb.on_preempt && t->rank == 0)
        job->cb.on_preempt(job->cb.ctx, t->epoch_done, t->step, checkpointed);
    return ty_fail(err, TY_EPREEMPTED, NULL,
                   "training was preempted after %llu steps (%u epochs "
                   "finished)%s",
                   (unsigned long long)t->step, t->epoch_done,
                   checkpointed ? "; its checkpoint is written" : "");
}

/* Regression: the net's RMSE, MAE and R^2 in the target's units on the
 * first TRAIN_METRIC_ROWS training examples, eval mode (train.h). */
static ty_status epoch_train_metrics(trainer *t, train_epoch_metrics *m,
                                     ty_err *err)
{
    const uint32_t n =
        t->n_train < TRAIN_METRIC_ROWS ? t->n_train : TRAIN_METRIC_ROWS;
    double loss, acc;
    nn_reg_metrics tm;
    ty_status st =
        nn_eval_examples_reg(&t->arch, t->params, &t->pp, &t->tg, t->ws, t->ds,
                             t->job->train_idx, n, NULL, &loss, &acc, &tm, err);
    if (st != TY_OK) {
        ty_err_prefix(err, "training metrics");
        return st;
    }
    m->train_rmse = tm.rmse;
    m->train_mae = tm.mae;
    m->train_r2 = tm.r2;
    return TY_OK;
}

static ty_status run_epoch(trainer *t, uint32_t e, ty_err *err)
{
    const train_job *job = t->job;
    const uint32_t bs = t->hp->batch_size;
    const double start = now_sec();
    uint64_t session_seen = 0;

    epoch_begin(t, e);
    while (t->epoch_step < t->steps_per_epoch && t->step < t->total_steps) {
        /* Ranks stop or yield together, at the step they agreed on. */
        const int dp = t->world > 1;
        if (dp ? t->dp_stop : job->stop && *job->stop)
            return ty_fail(err, TY_ECANCELLED, NULL, "training was cancelled");
        if (dp ? t->dp_preempt : job->preempt && *job->preempt)
            return preempt_here(t, e, err);
        const double step_start = now_sec();
        /* This step's minibatches: examples [first, end) of the epoch. */
        uint64_t first64 = t->epoch_step * t->accum * (uint64_t)bs;
        uint32_t first = (uint32_t)first64;
        uint32_t end = first64 + (uint64_t)t->accum * bs < t->n_train
                           ? (uint32_t)(first64 + (uint64_t)t->accum * bs)
                           : t->n_train;
        uint32_t m = end - first;
        uint32_t hits = 0;
        double sum = 0.0;
        /* The loader hands out the epoch's minibatches in order. */
        if (t->acc)
            device_step(t, first, end); /* sums into t->acc */
        for (uint32_t b = first; !t->acc && b < end && isfinite(sum); b += bs) {
            uint32_t mb_hits = 0;
            if (!dp_share(t, end - b < bs ? end - b : bs))
                continue; /* none of this minibatch is this rank's */
            dp_backward_begin(t, b + bs >= end); /* the step's last */
            const loader_batch *lb = loader_next(t->loader);
            if (t->host)
                upload_batch(t, lb); /* a device rank of a gang (dp.c) */
            sum += train_step(t, lb, m, &mb_hits);
            hits += mb_hits;
        }
        ty_status rst = dp_reduce_step(t, &sum, &hits, err);
        if (rst != TY_OK)
            return rst;
        if (!t->acc && isfinite(sum)) {
            if ((rst = optimizer_step(t, err)) != TY_OK ||
                (rst = dp_zero_after_step(t, err)) != TY_OK)
                return rst;
        }
        t->step_seconds += now_sec() - step_start;
        /* A device records its first failure; the step's sums are then
         * meaningless, so this comes before the loss check. */
        if (t->host) {
            ty_status st = t->be->status(t->ws->ex, err);
            if (st != TY_OK) {
                ty_err_prefix(err, "training on %s", t->be->name);
                return st;
            }
        }
        if (!isfinite(sum))
            return ty_fail(
                err, TY_EINVAL, "hyperparameters.learning_rate",
                "the training loss became %s at epoch %u, step %llu; "
                "try a lower learning_rate (now %g)",
                isnan(sum) ? "NaN" : "infinite", e + 1,
                (unsigned long long)t->step + 1, t->hp->learning_rate);
        t->step++;
        t->epoch_step++;
        if (job->cb.on_step && !t->acc && t->rank == 0)
            job->cb.on_step(job->cb.ctx, t->step, sum / (double)m);
        ty_status cst = dp_check_params(t, err);
        if (cst != TY_OK)
            return cst;
        t->loss_sum += sum;
        t->hits += hits;
        t->seen += m;
        session_seen += m;
        uint32_t every = t->hp->checkpoint_every_steps;
        if (every && t->step % every == 0 &&
            t->epoch_step < t->steps_per_epoch && job->checkpoint_path) {
            ty_status st = save_checkpoint(t, e, err);
            if (st != TY_OK)
                return st;
        }
        /* The first step of a run (or resumed run) reports at once, the
         * rest at most every PROGRESS_INTERVAL; eval_every_steps' reports
         * come on their steps. */
        double now = now_sec();
        uint64_t ev = t->hp->eval_every_steps;
        if (ev && t->step % ev == 0 && job->val && t->step < t->total_steps) {
            ty_status st = report_eval(
                t, e, now > start ? (double)session_seen / (now - start) : 0.0,
                err);
            if (st != TY_OK)
                return st;
            t->last_report = now;
        } else if (t->last_report < 0 ||
                   now - t->last_report >= PROGRESS_INTERVAL) {
            ty_status st = train_sums_read(t, e, err);
            if (st != TY_OK)
                return st;
            report_progress(
                t, e, now > start ? (double)session_seen / (now - start) : 0.0);
            t->last_report = now;
        }
    }

    ty_status sums_st = train_sums_read(t, e, err);
    if (sums_st != TY_OK)
        return sums_st;
    double seconds = now_sec() - start;
    train_epoch_metrics m = {
        .epoch = e + 1,
        .train_loss = t->loss_sum / (double)t->seen,
        .train_accuracy = t->arch.task == TY_TASK_CLASSIFICATION
                              ? (double)t->hits / (double)t->seen
                              : -1.0,
        .val_loss = -1.0,
        .val_accuracy = -1.0,
        .train_rmse = NAN,
        .train_mae = NAN,
        .train_r2 = NAN,
        .val_rmse = NAN,
        .val_mae = NAN,
        .val_r2 = NAN,
        .samples_per_sec = seconds > 0 ? (double)session_seen / seconds : 0.0,
        .tokens_per_sec =
            t->arch.task == TY_TASK_LANGUAGE_MODELING && seconds > 0
                ? (double)session_seen * t->arch.input.d[0] / seconds
                : 0.0,
        .seconds = seconds,
        .peak_memory_bytes = t->mem_peak,
        .loss_scale = t->precision == NN_DT_F16 ? t->scaler.scale : 0.0,
        .skipped_steps = t->epoch_skipped,
    };
    epoch_where(t, &m);
    dp_epoch_times(t, &m);
    const int reg = t->arch.task == TY_TASK_REGRESSION;
    if (reg) {
        ty_status st = epoch_train_metrics(t, &m, err);
        if (st != TY_OK)
            return st;
    }
    if (job->val) {
        uint32_t n_val = job->val_idx ? job->n_val : job->val->num_examples;
        if (n_val) {
            nn_reg_metrics vm;
            ty_status st = nn_eval_examples_reg(
                &t->arch, t->params, &t->pp, &t->tg, t->ws, job->val,
                job->val_idx, n_val, job->val_class_map, &m.val_loss,
                &m.val_accuracy, reg ? &vm : NULL, err);
            if (st != TY_OK) {
                ty_err_prefix(err, "validation");
                return st;
            }
            if (reg) {
                m.val_rmse = vm.rmse;
                m.val_mae = vm.mae;
                m.val_r2 = vm.r2;
            }
        }
    }
    /* max_steps may end the run in the middle of the epoch: then the
     * epoch is not finished, and the checkpoint keeps the position inside
     * it (its step, the dropout stream and the sums), so a resume with a
     * larger max_steps takes the epoch's next step, as a run never stopped
     * would. Its record is the partial epoch's. */
    const int finished = t->epoch_step >= t->steps_per_epoch;
    if (finished) {
        t->epoch_done = e + 1;
        t->epoch_step = 0;
    }
    t->last = m;
    t->have_last = 1;
    if (job->checkpoint_path) {
        ty_status st = save_checkpoint(t, e, err);
        if (st != TY_OK)
            return st;
    }
    if (job->cb.on_epoch && t->rank == 0)
        job->cb.on_epoch(job->cb.ctx, &m);
    return TY_OK;
}

/* hyperparameters.init_from: the state block (parameters and buffers)
 * from the model file at path, every tensor of the spec by its name and
 * shape, F32. */
static ty_status load_init(trainer *t, const char *path, ty_err *err)
{
    st_file f;
    ty_err inner = {0};
    if (st_open(path, &f, &inner) != TY_OK)
        return ty_fail(err, TY_EINVAL, "hyperparameters.init_from",
                       "the model to start from cannot be read: %s", inner.msg);
    float *state = train_host_state(t);
    ty_status st = TY_OK;
    for (uint32_t i = 0; i < t->arch.n_tensors && st == TY_OK; i++) {
        const nn_named_tensor *nt = &t->arch.tensors[i];
        const st_tensor *x = st_find(&f, nt->name);
        if (!x || x->dtype != ST_F32 || x->numel != nt->desc->numel)
            st = ty_fail(err, TY_EINVAL, "hyperparameters.init_from",
                         "the model to start from has no F32 tensor '%s' of "
                         "%llu values",
                         nt->name, (unsigned long long)nt->desc->numel);
        else
            memcpy(state + nt->offset, x->data, x->numel * sizeof(float));
    }
    st_close(&f);
    return st;
}

ty_status train_run(const train_job *job, train_epoch_metrics *final,
                    ty_err *err)
{
    trainer t;
    ty_status st = trainer_setup(&t, job, err);
    if (st != TY_OK)
        goto done;
    int resumed = 0;
    t.last_report = -1.0;
    /* ZeRO-1 reads the whole state and keeps its shard. */
    if ((st = dp_zero_full_alloc(&t, err)) != TY_OK)
        goto done;
    st = train_ckpt_resume(&t, &resumed, err);
    dp_zero_take_shard(&t, resumed && st == TY_OK);
    if (st != TY_OK)
        goto done;
    if (resumed) {
        t.ckpt_step = t.step;
        if (job->cb.on_resume && t.rank == 0)
            job->cb.on_resume(job->cb.ctx, t.epoch_done, t.step);
        /* The last finished epoch's record again: the crash that stopped
         * the run may have come between its checkpoint and the receiver
         * storing it (an integration test saw that record go missing). */
        if (t.have_last && job->cb.on_epoch && t.rank == 0) {
            epoch_where(&t, &t.last);
            job->cb.on_epoch(job->cb.ctx, &t.last);
        }
    } else {
        ty_rng init;
        ty_rng_seed(&init, t.hp->seed, TRAIN_STREAM_INIT);
        nn_arch_init_params(&t.arch, train_host_state(&t), &init);
        if (job->init_path &&
            (st = load_init(&t, job->init_path, err)) != TY_OK)
            goto done;
    }
    /* Every rank starts from rank 0's state, fresh or resumed (a resume
     * has uploaded its own). */
    if ((st = dp_sync_state(&t, err)) != TY_OK ||
        ((!resumed || t.world > 1) &&
         (st = train_state_upload(&t, err)) != TY_OK))
        goto done;
    /* The 16-bit weights follow the fp32 ones, fresh or resumed. */
    train_lp_refresh(&t);
    for (uint32_t e = t.epoch_done; e < t.hp->epochs && t.step < t.total_steps;
         e++)
        if ((st = run_epoch(&t, e, err)) != TY_OK)
            goto done;
    st = t.rank == 0 ? train_save_model(&t, err) : TY_OK;
    if ((st = dp_agree(&t, st, "to write the model", err)) != TY_OK)
        goto done;
    if (final) {
        memset(final, 0, sizeof *final);
        if (t.have_last)
            *final = t.last;
    }
done:
    /* No peer may wait for a rank that has failed. (A cancel or a
     * preemption is every rank's, at the step they agreed on.) */
    if (st != TY_OK && st != TY_ECANCELLED && st != TY_EPREEMPTED)
        dp_abort(job, err);
    trainer_free(&t);
    return st;
}
