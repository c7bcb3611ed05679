/*
 * worker.c - the training worker process (see worker.h): reads
 * <job-dir>/job.json, trains on the device TRAINYARD_DEVICE names, and
 * tells its runner what happens as JSON lines on stdout.
 *
 * The job lifecycle protocol, worker side (what jobs/runner.c relies on):
 *
 * 1. Before anything else on stdout, one line
 *      {"event":"started", "pid": <pid>, "cuda_visible_devices": <string or
 *       null>, "trainyard_device": <string or null>,
 *       "capabilities": ["heartbeat", "preempt"],
 *       "cpu_kernels": {"provider", "core", "isa", "cpu_isa", "gemm_gflops"}}
 *    with the environment it was given (null: unset) and the CPU GEMM
 *    kernels it runs (models/cpu/kernels.h) with their single-thread SGEMM
 *    rate, measured for 50 ms just before the line. Its signal handlers
 *    are installed (and those signals unblocked) before this line, so a
 *    runner may send SIGTERM or SIGUSR1 once it has read it; before, the
 *    default action of SIGUSR1 would kill it. Bad usage (exit 64) prints
 *    nothing on stdout.
 * 2. From then on, a thread of its own prints {"event":"heartbeat"} every
 *    TRAINYARD_HEARTBEAT_MS milliseconds (default 2000; 10 to 3600000,
 *    anything else is the default with a note on stderr) for the worker's
 *    whole life: while loading data, during a long step, while saving. The
 *    first comes one interval after "started". It is stopped and joined
 *    before the worker exits, so no heartbeat follows the last line.
 *    Every line goes out whole under one mutex (emit): lines never
 *    interleave.
 * 3. Then what training says: "resume", "progress", "epoch" lines
 *    (jobs/runner.h), and at the end exactly one of
 *      {"event":"done"}                          exit 0: the model is written
 *      {"event":"error", "message"}              exit 2: training failed
 *      (nothing)                                 exit 3: SIGTERM or SIGINT
 *                                                (cancel, shutdown)
 *      {"event":"preempted", "epoch", "step",
 *       "checkpoint": bool}                      exit 4: SIGUSR1
 * 4. Preemption (SIGUSR1): the run stops at the next optimizer-step
 *    boundary, writes the checkpoint of that position there (mid-epoch,
 *    exactly resumable: train_job.preempt), prints "preempted" with the
 *    position (completed epochs, optimizer steps taken) and exits 4. The
 *    next start of the job resumes from it ("resume" line) and ends with
 *    the same weights bit for bit as a run never stopped. "checkpoint" says
 *    whether a checkpoint is on disk for the job (false: it starts over).
 *    A preemption before training started (reading job.json, opening the
 *    data) exits 4 at once without writing one, "epoch" and "step" null:
 *    the job simply restarts (from the checkpoint an earlier run left, if
 *    any; "checkpoint" says). Finishing normally wins: once the last
 *    optimizer step is taken the run completes and the worker prints
 *    "done" and exits 0 even when SIGUSR1 came meanwhile (the model is
 *    never lost). SIGTERM wins over SIGUSR1 (exit 3).
 * 5. TRAINYARD_DEVICE: "cpu" (or unset), "cuda", "cuda:N" (N within
 *    CUDA_VISIBLE_DEVICES), or "sim:<uuid>": a simulated GPU or MIG slice
 *    (tests, simulated inventories): the worker computes on the CPU and
 *    its epoch records say "device": "sim:<uuid>", so tests see where the
 *    job ran. <uuid> is 1 to 95 of [A-Za-z0-9._:/-]; anything else named
 *    "sim:" is an error.
 */
#include "jobs/worker.h"

#include "models/cpu/kernels.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "models/data/dataset.h"
#include "models/train/train.h"
#include "jobs/placement.h"
#if TRAINYARD_HAVE_CUDA
#include "gpu/cuda/backend.h"
#endif

#define WORKER_EXIT_FAILED 2
#define WORKER_EXIT_CANCELLED 3
#define WORKER_EXIT_PREEMPTED 4
#define WORKER_SIM_UUID_MAX 95

static volatile sig_atomic_t stop_requested;
static volatile sig_atomic_t preempt_requested;

static void on_term(int sig) { stop_requested = 1; }
static void on_usr1(int sig) { preempt_requested = 1; }

/* stdout is shared by the trainer's callbacks and the heartbeat thread. */
static pthread_mutex_t emit_mu = PTHREAD_MUTEX_INITIALIZER;

/* Prints ev as one line (and frees it), whole, under emit_mu. */
static void emit(json_t *ev)
{
    char *line = json_dumps(ev, JSON_COMPACT);
    json_decref(ev);
    if (!line)
        return;
    pthread_mutex_lock(&emit_mu);
    fputs(line, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    pthread_mutex_unlock(&emit_mu);
    free(line);
}

/* ---- heartbeats ---- */

long worker_heartbeat_ms(const char *value)
{
    if (!value || !*value)
        return WORKER_HEARTBEAT_DEFAULT_MS;
    if (*value < '0' || *value > '9') /* strtol takes blanks and signs */
        return -1;
    char *end = NULL;
    errno = 0;
    long ms = strtol(value, &end, 10);
    if (errno || end == value || *end || ms < WORKER_HEARTBEAT_MIN_MS ||
        ms > WORKER_HEARTBEAT_MAX_MS)
        return -1;
    return ms;
}

typedef struct {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;         /* signalled to stop */
    int stop;
    long interval_ms;
} heartbeat;

static void deadline_after(struct timespec *ts, long ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void *heartbeat_main(void *arg)
{
    heartbeat *hb = arg;
    struct timespec due;
    deadline_after(&due, hb->interval_ms);
    pthread_mutex_lock(&hb->mu);
    while (!hb->stop) {
        int rc = pthread_cond_timedwait(&hb->cv, &hb->mu, &due);
        if (hb->stop || rc != ETIMEDOUT)
            continue; /* stopped, or woken early: wait on for `due` */
        pthread_mutex_unlock(&hb->mu);
        emit(json_pack("{s:s}", "event", "heartbeat"));
        deadline_after(&due, hb->interval_ms);
        pthread_mutex_lock(&hb->mu);
    }
    pthread_mutex_unlock(&hb->mu);
    return NULL;
}

/* Starts the heartbeat thread (with the worker's signals blocked in it, so
 * they reach the main thread). -1 when it cannot. */
static int heartbeat_start(heartbeat *hb, long interval_ms)
{
    memset(hb, 0, sizeof *hb);
    hb->interval_ms = interval_ms;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        return -1;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int bad = pthread_cond_init(&hb->cv, &ca) != 0;
    pthread_condattr_destroy(&ca);
    if (bad)
        return -1;
    pthread_mutex_init(&hb->mu, NULL);
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    int rc = pthread_create(&hb->thread, NULL, heartbeat_main, hb);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_cond_destroy(&hb->cv);
        pthread_mutex_destroy(&hb->mu);
        return -1;
    }
    return 0;
}

/* Stops the thread and waits for it: no heartbeat after this returns. */
static void heartbeat_stop(heartbeat *hb)
{
    pthread_mutex_lock(&hb->mu);
    hb->stop = 1;
    pthread_cond_signal(&hb->cv);
    pthread_mutex_unlock(&hb->mu);
    pthread_join(hb->thread, NULL);
    pthread_cond_destroy(&hb->cv);
    pthread_mutex_destroy(&hb->mu);
}

/* ---- the trainer's reports ---- */

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

static void on_preempt(void *ctx, uint32_t epoch, uint64_t step,
                       int checkpointed)
{
    emit(json_pack("{s:s, s:i, s:I, s:b}", "event", "preempted", "epoch",
                   (int)epoch, "step", (json_int_t)step, "checkpoint",
                   checkpointed));
}

/* A preemption before training started: nothing written; the checkpoint
 * an earlier run left (checkpoint_path, may be NULL) is what the job
 * resumes from. */
static int preempted_before_training(const char *checkpoint_path)
{
    emit(json_pack("{s:s, s:n, s:n, s:b}", "event", "preempted", "epoch",
                   "step", "checkpoint",
                   checkpoint_path && fs_exists(checkpoint_path)));
    return WORKER_EXIT_PREEMPTED;
}

static int report_error(const char *msg)
{
    emit(json_pack("{s:s, s:s}", "event", "error", "message", msg));
    fprintf(stderr, "trainyard worker: %s\n", msg);
    return WORKER_EXIT_FAILED;
}

/* Whether s is a simulated device's uuid (see the header comment). */
static int sim_uuid_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > WORKER_SIM_UUID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                    "0123456789._:/-",
                    s[i]))
            return 0;
    return 1;
}

/* The device the runner named in TRAINYARD_DEVICE: "cuda" or "cuda:N"
 * (N within CUDA_VISIBLE_DEVICES) sets *device; "sim:<uuid>" leaves it -1
 * (the CPU computes) and sets *sim to the whole value, the label the epoch
 * records carry; anything else (the runner says "cpu") leaves it -1.
 * TY_EINVAL for a malformed cuda:N or sim:<uuid>, TY_EDEVICE for cuda when
 * this binary has no CUDA. */
static ty_status worker_device(int *device, const char **sim, ty_err *err)
{
    *device = -1;
    *sim = NULL;
    const char *d = getenv("TRAINYARD_DEVICE");
    if (d && !strncmp(d, "sim:", 4)) {
        if (!sim_uuid_ok(d + 4))
            return ty_fail(err, TY_EINVAL, NULL,
                           "TRAINYARD_DEVICE=%.120s is not sim:<uuid> (1 to "
                           "%d letters, digits and ._:/-)",
                           d, WORKER_SIM_UUID_MAX);
        *sim = d;
        return TY_OK;
    }
    if (!d || strncmp(d, "cuda", 4) != 0 || (d[4] != '\0' && d[4] != ':'))
        return TY_OK;
#if TRAINYARD_HAVE_CUDA
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

#if TRAINYARD_HAVE_CUDA
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
    int rc = WORKER_EXIT_FAILED;
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
        .preempt = &preempt_requested,
        .cb = {.on_progress = on_progress, .on_epoch = on_epoch,
               .on_resume = on_resume, .on_preempt = on_preempt},
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
    const char *sim = NULL;
    if (worker_device(&device, &sim, &err) != TY_OK)
        goto fail;
    worker_ctx wc = {.device = device};
    tj.cb.ctx = &wc;
    char label[16];
    place_device_label(device, label, sizeof label);
    if (device >= 0)
        tj.device_label = label;
    else if (sim)
        tj.device_label = sim;
    /* Cancel wins; a preemption while the data was loading restarts the
     * job without touching its checkpoint. */
    if (stop_requested) {
        rc = WORKER_EXIT_CANCELLED;
        goto done;
    }
    if (preempt_requested) {
        rc = preempted_before_training(tj.checkpoint_path);
        goto done;
    }
#if TRAINYARD_HAVE_CUDA
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
#if TRAINYARD_HAVE_CUDA
    if (device >= 0)
        nn_cuda_exec_free(&dev);
#endif
    if (s == TY_ECANCELLED) {
        rc = WORKER_EXIT_CANCELLED;
        goto done;
    }
    if (s == TY_EPREEMPTED) {
        rc = WORKER_EXIT_PREEMPTED; /* on_preempt said so */
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

/* SIGTERM and SIGINT cancel, SIGUSR1 preempts; all three unblocked (a
 * parent may have left them blocked, and they would never arrive). */
static void install_signals(void)
{
    struct sigaction sa = {0};
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

static void emit_started(void)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    const char *dev = getenv("TRAINYARD_DEVICE");
    const cpu_kernels_info *k = cpu_kernels_get();
    /* 50 ms, measured beside whatever else runs on the machine then. */
    double gflops = cpu_kernels_measure(0.05);
    emit(json_pack("{s:s, s:I, s:s?, s:s?, s:[s, s], s:{s:s, s:s, s:s, s:s, s:I}}",
                   "event", "started", "pid", (json_int_t)getpid(),
                   "cuda_visible_devices", cvd, "trainyard_device", dev,
                   "capabilities", "heartbeat", "preempt", "cpu_kernels",
                   "provider", k->provider, "core", k->core, "isa", k->isa,
                   "cpu_isa", k->cpu_isa, "gemm_gflops",
                   (json_int_t)(gflops + 0.5)));
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
    install_signals();
    emit_started();

    const char *hb_env = getenv("TRAINYARD_HEARTBEAT_MS");
    long hb_ms = worker_heartbeat_ms(hb_env);
    if (hb_ms < 0) {
        fprintf(stderr,
                "trainyard worker: TRAINYARD_HEARTBEAT_MS=%.32s is not %d to "
                "%d; heartbeats every %d ms\n",
                hb_env, WORKER_HEARTBEAT_MIN_MS, WORKER_HEARTBEAT_MAX_MS,
                WORKER_HEARTBEAT_DEFAULT_MS);
        hb_ms = WORKER_HEARTBEAT_DEFAULT_MS;
    }
    heartbeat hb;
    if (heartbeat_start(&hb, hb_ms) != 0)
        return report_error("cannot start the heartbeat thread");

    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/job.json", dir);
    json_error_t jerr;
    json_t *job = json_load_file(path, 0, &jerr);
    int rc;
    if (!job) {
        char msg[400];
        snprintf(msg, sizeof msg, "cannot read %s: %s", path, jerr.text);
        rc = report_error(msg);
    } else {
        rc = run(job);
        json_decref(job);
    }
    heartbeat_stop(&hb);
    return rc;
}
