/* worker.c - the training worker process (see worker.h). */
#include "server/worker.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "models/dataset.h"
#include "models/train.h"
#include "gpu/placement.h"
#ifdef TY_HAVE_CUDA
#include "gpu/cuda/backend_cuda.h"
#endif

static volatile sig_atomic_t stop_requested;

static void on_term(int sig) { stop_requested = 1; }

static void emit(json_t *ev)
{
    char *line = json_dumps(ev, JSON_COMPACT);
    json_decref(ev);
    if (!line)
        return;
    fputs(line, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    free(line);
}

static void on_progress(void *ctx, const train_progress *p)
{
    emit(json_pack("{s:s, s:i, s:i, s:I, s:I, s:f, s:f, s:f, s:f}", "event",
                   "progress", "epoch", (int)p->epoch, "epochs", (int)p->epochs,
                   "step", (json_int_t)p->step, "total_steps",
                   (json_int_t)p->total_steps, "fraction", p->fraction, "loss",
                   p->loss, "samples_per_sec", p->samples_per_sec, "lr",
                   p->lr));
}

/* The CUDA device the worker trains on, or -1 (on_epoch's ctx). */
typedef struct {
    int device;
} worker_ctx;

static void on_epoch(void *ctx, const train_epoch_metrics *m)
{
    const worker_ctx *wc = ctx;
    json_t *ev = json_pack("{s:s, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:I}",
                           "event", "epoch", "epoch", (int)m->epoch,
                           "train_loss", m->train_loss, "train_accuracy",
                           m->train_accuracy, "val_loss", m->val_loss,
                           "val_accuracy", m->val_accuracy, "samples_per_sec",
                           m->samples_per_sec, "seconds", m->seconds,
                           "peak_memory_bytes",
                           (json_int_t)m->peak_memory_bytes);
    if (ev) {
        if (m->device)
            json_object_set_new(ev, "device", json_string(m->device));
        if (m->precision)
            json_object_set_new(ev, "precision", json_string(m->precision));
        if (m->loss_scale > 0)
            json_object_set_new(ev, "loss_scale", json_real(m->loss_scale));
        json_object_set_new(ev, "skipped_steps",
                            json_integer((json_int_t)m->skipped_steps));
        if (m->cuda_graph >= 0)
            json_object_set_new(ev, "cuda_graph", json_boolean(m->cuda_graph));
        /* On a GPU: what the device says is in use now, by every process
         * on it (cudaMemGetInfo total - free), this one's context and
         * libraries included; peak_memory_bytes is the trainer's own.
         * Left out when the question fails (the epoch still counts). */
        uint64_t free_b = 0, total_b = 0;
        ty_err err = {0};
        if (wc && wc->device >= 0 &&
            place_cuda_memory(wc->device, &free_b, &total_b, &err) == TY_OK &&
            total_b >= free_b)
            json_object_set_new(ev, "device_memory_used_bytes",
                                json_integer((json_int_t)(total_b - free_b)));
        if (m->cuda_graph_reason)
            json_object_set_new(ev, "cuda_graph_reason",
                                json_string(m->cuda_graph_reason));
    }
    emit(ev);
}

static void on_resume(void *ctx, uint32_t epoch, uint64_t step)
{
    emit(json_pack("{s:s, s:i, s:I}", "event", "resume", "epoch", (int)epoch,
                   "step", (json_int_t)step));
}

static int report_error(const char *msg)
{
    emit(json_pack("{s:s, s:s}", "event", "error", "message", msg));
    fprintf(stderr, "trainyard worker: %s\n", msg);
    return 2;
}

/* The device the runner named in TRAINYARD_DEVICE: "cuda" or "cuda:N"
 * (N within CUDA_VISIBLE_DEVICES) sets *device; anything else (the runner
 * says "cpu") leaves it -1. TY_EDEVICE when this binary has no CUDA. */
static ty_status worker_device(int *device, ty_err *err)
{
    *device = -1;
    const char *d = getenv("TRAINYARD_DEVICE");
    if (!d || strncmp(d, "cuda", 4) != 0 || (d[4] != '\0' && d[4] != ':'))
        return TY_OK;
#ifdef TY_HAVE_CUDA
    char *end = NULL;
    long n = d[4] == ':' ? strtol(d + 5, &end, 10) : 0;
    if (d[4] == ':' && (end == d + 5 || *end || n < 0 || n > 1024))
        return ty_fail(err, TY_EINVAL, NULL,
                       "TRAINYARD_DEVICE=%.32s is not cuda or cuda:N", d);
    *device = (int)n;
    return TY_OK;
#else
    return ty_fail(err, TY_EDEVICE, NULL,
                   "TRAINYARD_DEVICE=%.32s but this binary was built without "
                   "the CUDA backend",
                   d);
#endif
}

#ifdef TY_HAVE_CUDA
/* Whether the run fits what device `device` has free now, with its
 * context and handles made (tj->ex): the trainer's bytes on the CUDA
 * backend plus PLACE_CUDA_LATE_BYTES for what is still to come. The
 * submit-time check compared with the device's total; another process
 * may hold memory since. TY_EINVAL with the breakdown when it does not
 * fit, TY_EDEVICE when the device cannot be asked. */
static ty_status check_device_memory(const train_job *tj,
                                     const ty_dataset *ds, int device,
                                     const char *label, ty_err *err)
{
    uint32_t outputs = ds->task == TY_TASK_CLASSIFICATION ? ds->num_classes
                                                          : ds->y_dim;
    train_memory m;
    uint64_t free_b = 0, total_b = 0;
    ty_status s = train_memory_estimate_spec(
        tj->spec, ds->shape, ds->ndim, outputs, ds->task, tj->hp, tj->n_train,
        train_threads(tj->threads, tj->be), tj->be, &m, err);
    if (s == TY_OK)
        s = place_cuda_memory(device, &free_b, &total_b, err);
    if (s == TY_OK)
        s = place_check_device_memory(&m, PLACE_CUDA_LATE_BYTES, free_b,
                                      label, 1, err);
    if (s != TY_OK)
        ty_err_prefix(err, "cannot train on %s", label);
    return s;
}
#endif

static int run(const json_t *job)
{
    ty_err err = {0};
    ty_dataset train = {0}, val = {0};
    uint32_t *train_idx = NULL, *val_idx = NULL;
    int32_t *class_map = NULL;
    train_hparams hp;
    int rc = 2;
    const char *ds_path = json_string_value(json_object_get(job, "dataset_path"));
    const json_t *validation = json_object_get(job, "validation");
    const char *val_path =
        json_string_value(json_object_get(validation, "dataset_path"));
    if (!ds_path)
        return report_error("job.json has no dataset_path");
    if (ty_dataset_open(ds_path, &train, &err) != TY_OK) {
        ty_err_prefix(&err, "cannot open the training dataset");
        goto fail;
    }
    if (train_hparams_parse(json_object_get(job, "hyperparameters"), &hp, NULL,
                            &err) != TY_OK)
        goto fail;

    train_job tj = {
        .spec = json_object_get(job, "spec"),
        .hp = &hp,
        .train = &train,
        .n_train = train.num_examples,
        .checkpoint_path =
            json_string_value(json_object_get(job, "checkpoint_path")),
        .model_path = json_string_value(json_object_get(job, "model_path")),
        .extra_meta = json_object_get(job, "extra_meta"),
        .threads = (int)json_integer_value(json_object_get(job, "threads")),
        .stop = &stop_requested,
        .cb = {.on_progress = on_progress, .on_epoch = on_epoch,
               .on_resume = on_resume},
    };
    if (val_path) {
        if (ty_dataset_open(val_path, &val, &err) != TY_OK) {
            ty_err_prefix(&err, "cannot open the validation dataset");
            goto fail;
        }
        json_t *vc = json_object_get(val.meta, "classes");
        if (train.task == TY_TASK_CLASSIFICATION && json_array_size(vc) > 0) {
            class_map = calloc(json_array_size(vc), sizeof *class_map);
            if (!class_map ||
                ty_dataset_class_map(vc, json_object_get(train.meta, "classes"),
                                     class_map, &err) != TY_OK)
                goto fail;
        }
        tj.val = &val;
        tj.n_val = val.num_examples;
        tj.val_class_map = class_map;
    } else {
        double split = json_number_value(json_object_get(validation, "split"));
        uint32_t n_train = 0, n_val = 0;
        if (train_split(train.num_examples, split, hp.seed, &train_idx, &n_train,
                        &val_idx, &n_val, &err) != TY_OK)
            goto fail;
        tj.train_idx = train_idx;
        tj.n_train = n_train;
        if (n_val > 0) {
            tj.val = &train;
            tj.val_idx = val_idx;
            tj.n_val = n_val;
        }
    }
    if (!tj.checkpoint_path || !tj.model_path || !tj.spec) {
        ty_fail(&err, TY_EINVAL, NULL, "job.json is incomplete");
        goto fail;
    }
    train_epoch_metrics final;
    int device = -1;
    if (worker_device(&device, &err) != TY_OK)
        goto fail;
    worker_ctx wc = {.device = device};
    tj.cb.ctx = &wc;
    char label[16];
    place_device_label(device, label, sizeof label);
    if (device >= 0)
        tj.device_label = label;
#ifdef TY_HAVE_CUDA
    nn_exec dev = {0};
    if (device >= 0) {
        if (nn_cuda_exec_init(&dev, device, &err) != TY_OK)
            goto fail;
        tj.be = &nn_backend_cuda;
        tj.ex = &dev;
        if (check_device_memory(&tj, &train, device, label, &err) != TY_OK) {
            nn_cuda_exec_free(&dev);
            goto fail;
        }
    }
#endif
    ty_status s = train_run(&tj, &final, &err);
#ifdef TY_HAVE_CUDA
    if (device >= 0)
        nn_cuda_exec_free(&dev);
#endif
    if (s == TY_ECANCELLED) {
        rc = 3;
        goto done;
    }
    if (s != TY_OK)
        goto fail;
    emit(json_pack("{s:s}", "event", "done"));
    rc = 0;
    goto done;
fail:
    rc = report_error(err.msg[0] ? err.msg : "training failed");
done:
    free(train_idx);
    free(val_idx);
    free(class_map);
    ty_dataset_close(&train);
    ty_dataset_close(&val);
    return rc;
}

int worker_main(int argc, char **argv)
{
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--job-dir") && i + 1 < argc)
            dir = argv[++i];
    }
    if (!dir) {
        fprintf(stderr, "usage: trainyard worker --job-dir DIR\n"
                        "(started by `trainyard serve`; not meant to be run "
                        "by hand)\n");
        return 64;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/job.json", dir);
    json_error_t jerr;
    json_t *job = json_load_file(path, 0, &jerr);
    if (!job) {
        char msg[400];
        snprintf(msg, sizeof msg, "cannot read %s: %s", path, jerr.text);
        return report_error(msg);
    }
    int rc = run(job);
    json_decref(job);
    return rc;
}
