/*
 * worker.c - the training worker process (see worker.h): reads
 * <job-dir>/job.json, trains on the device TRAINYARD_DEVICE names, and
 * tells the server what happens as JSON lines on stdout.
 *
 * The worker protocol - the lines, their order, the signals, the exit
 * codes, the environment - is node/protocol.h's; this file is its worker
 * side. Every line goes out whole under one mutex (worker_emit), since the
 * trainer's callbacks and the heartbeat thread share stdout: lines never
 * interleave.
 */
#include "node/worker.h"

#include "models/cpu/kernels.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "gpu/cuda/comm_nccl.h"
#include "models/data/dataset.h"
#include "models/data/windows.h"
#include "models/train/train.h"
#include "node/placement.h"
#include "node/protocol.h"
#include "node/wremote.h"
#if TRAINYARD_HAVE_CUDA
#include "gpu/cuda/backend.h"
#endif

static volatile sig_atomic_t stop_requested;
static volatile sig_atomic_t preempt_requested;

static void on_term(int sig) { stop_requested = 1; }
static void on_usr1(int sig) { preempt_requested = 1; }

/* stdout is shared by the heartbeat thread and the process's own (the
 * trainer's callbacks; a replica's serving loop). */
static pthread_mutex_t emit_mu = PTHREAD_MUTEX_INITIALIZER;

void worker_emit(json_t *ev)
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

typedef struct {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* signalled to stop */
    int stop;
    long interval_ms;
    json_t *(*fields)(void); /* worker_process_def.heartbeat_fields */
} heartbeat;

long worker_heartbeat_ms(const char *value)
{
    if (!value || !*value)
        return WPROTO_HEARTBEAT_DEFAULT_MS;
    if (*value < '0' || *value > '9') /* strtol takes blanks and signs */
        return -1;
    char *end = NULL;
    errno = 0;
    long ms = strtol(value, &end, 10);
    if (errno || end == value || *end || ms < WPROTO_HEARTBEAT_MIN_MS ||
        ms > WPROTO_HEARTBEAT_MAX_MS)
        return -1;
    return ms;
}

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
        json_t *line = wproto_encode_heartbeat();
        json_t *more = hb->fields ? hb->fields() : NULL;
        if (line && more)
            json_object_update(line, more);
        json_decref(more);
        worker_emit(line);
        deadline_after(&due, hb->interval_ms);
        pthread_mutex_lock(&hb->mu);
    }
    pthread_mutex_unlock(&hb->mu);
    return NULL;
}

/* Starts the heartbeat thread at the interval TRAINYARD_HEARTBEAT_MS asks
 * for (a bad value is the default, with a note on stderr naming `trainyard
 * <who>`), with the process's signals blocked in it, so they reach the
 * main thread. -1 when it cannot. */
static int heartbeat_start(heartbeat *hb, const char *who,
                           json_t *(*fields)(void))
{
    const char *env = getenv(WPROTO_ENV_HEARTBEAT_MS);
    long interval_ms = worker_heartbeat_ms(env);
    if (interval_ms < 0) {
        fprintf(stderr,
                "trainyard %s: TRAINYARD_HEARTBEAT_MS=%.32s is not %d to "
                "%d; heartbeats every %d ms\n",
                who, env, WPROTO_HEARTBEAT_MIN_MS, WPROTO_HEARTBEAT_MAX_MS,
                WPROTO_HEARTBEAT_DEFAULT_MS);
        interval_ms = WPROTO_HEARTBEAT_DEFAULT_MS;
    }
    memset(hb, 0, sizeof *hb);
    hb->interval_ms = interval_ms;
    hb->fields = fields;
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
    worker_emit(wproto_encode_progress(p));
}

/* The CUDA device the worker trains on, or -1 (on_epoch's ctx). */
typedef struct {
    int device;
} worker_ctx;

static void on_epoch(void *ctx, const train_epoch_metrics *m)
{
    const worker_ctx *wc = ctx;
    /* On a GPU: what the device says is in use now, by every process on
     * it (cudaMemGetInfo total - free), this one's context and libraries
     * included; peak_memory_bytes is the trainer's own. Left out when the
     * question fails (the epoch still counts). */
    int64_t used = -1;
    uint64_t free_b = 0, total_b = 0;
    ty_err err = {0};
    if (wc && wc->device >= 0 &&
        place_cuda_memory(wc->device, &free_b, &total_b, &err) == TY_OK &&
        total_b >= free_b)
        used = (int64_t)(total_b - free_b);
    worker_emit(wproto_encode_epoch(m, used));
}

static void on_resume(void *ctx, uint32_t epoch, uint64_t step)
{
    worker_emit(wproto_encode_resume(epoch, step));
}

static void on_preempt(void *ctx, uint32_t epoch, uint64_t step,
                       int checkpointed)
{
    worker_emit(wproto_encode_preempted(1, epoch, step, checkpointed));
}

/* A preemption before training started: nothing written; the checkpoint
 * an earlier run left (checkpoint_path, may be NULL) is what the job
 * resumes from. */
static int preempted_before_training(const char *checkpoint_path)
{
    worker_emit(wproto_encode_preempted(
        0, 0, 0, checkpoint_path && fs_exists(checkpoint_path)));
    return WPROTO_EXIT_PREEMPTED;
}

int worker_fail(const char *who, const char *msg)
{
    worker_emit(wproto_encode_error(msg));
    fprintf(stderr, "trainyard %s: %s\n", who, msg);
    return WPROTO_EXIT_FAILED;
}

static int report_error(const char *msg)
{
    return worker_fail(WPROTO_COMMAND, msg);
}

/* The sim:<uuid> label is what the epoch records carry. */
ty_status worker_device(int *device, const char **sim, ty_err *err)
{
    *device = -1;
    *sim = NULL;
    const char *d = getenv(WPROTO_ENV_DEVICE);
    if (d && !strncmp(d, WPROTO_DEVICE_SIM_PREFIX,
                      strlen(WPROTO_DEVICE_SIM_PREFIX))) {
        if (!wproto_sim_uuid_ok(d + strlen(WPROTO_DEVICE_SIM_PREFIX)))
            return ty_fail(err, TY_EINVAL, NULL,
                           "TRAINYARD_DEVICE=%.120s is not sim:<uuid> (1 to "
                           "%d letters, digits and ._:/-)",
                           d, WPROTO_SIM_UUID_MAX);
        *sim = d;
        return TY_OK;
    }
    size_t k = strlen(WPROTO_DEVICE_CUDA);
    if (!d || strncmp(d, WPROTO_DEVICE_CUDA, k) != 0 ||
        (d[k] != '\0' && d[k] != ':'))
        return TY_OK;
#if TRAINYARD_HAVE_CUDA
    char *end = NULL;
    long n = d[k] == ':' ? strtol(d + k + 1, &end, 10) : 0;
    if (d[k] == ':' && (end == d + k + 1 || *end || n < 0 || n > 1024))
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
static ty_status check_device_memory(const train_job *tj, const ty_dataset *ds,
                                     int device, const char *label, ty_err *err)
{
    uint32_t outputs =
        ds->task == TY_TASK_CLASSIFICATION ? ds->num_classes : ds->y_dim;
    train_memory m;
    uint64_t free_b = 0, total_b = 0;
    ty_status s = train_memory_estimate_spec(
        tj->spec, ds->shape, ds->ndim, outputs, ds->task, tj->hp, tj->n_train,
        train_threads(tj->threads, tj->be), tj->be, &m, err);
    if (s == TY_OK)
        s = place_cuda_memory(device, &free_b, &total_b, err);
    if (s == TY_OK)
        s = place_check_device_memory(&m, PLACE_CUDA_LATE_BYTES, free_b, label,
                                      1, err);
    if (s != TY_OK)
        ty_err_prefix(err, "cannot train on %s", label);
    return s;
}
#endif

/* The model keeps its dataset's tokenizer (meta "tokenizer" of a text,
 * tokens or text-classification dataset, when there is one), for
 * tokenize, detokenize and text inputs: *extra becomes the job's extra
 * metadata plus "trainyard.tokenizer", and tj's extra_meta. */
static ty_status keep_tokenizer(const json_t *job, const json_t *meta,
                                json_t **extra, train_job *tj, ty_err *err)
{
    const json_t *tz = json_object_get(meta, "tokenizer");
    if (!tz)
        return TY_OK;
    const json_t *given = json_object_get(job, WPROTO_JOB_EXTRA_META);
    *extra = given ? json_deep_copy(given) : json_object();
    char *text = json_dumps(tz, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!*extra || !text ||
        json_object_set_new(*extra, "trainyard.tokenizer", json_string(text))) {
        free(text);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    free(text);
    tj->extra_meta = *extra;
    return TY_OK;
}

/* A language model's data (hp.context_length set): the token datasets'
 * windows (models/data/windows.h), validation a held-out stretch of the
 * text or a dataset of its own, and the tokenizer into the model's
 * metadata (a copy of the job's extra metadata in *extra). */
typedef struct {
    ty_tokens tok, vtok;
    json_t *extra;
} lm_data;

static ty_status open_lm(const json_t *job, const train_hparams *hp,
                         const char *ds_path, const char *val_path,
                         double split, ty_dataset *train, ty_dataset *val,
                         lm_data *lm, train_job *tj, ty_err *err)
{
    ty_status s;
    const uint32_t t = hp->context_length;
    if ((s = ty_tokens_open(ds_path, &lm->tok, err)) != TY_OK) {
        ty_err_prefix(err, "cannot open the training dataset");
        return s;
    }
    const uint64_t n = lm->tok.num_tokens;
    if (val_path) {
        if ((s = ty_tokens_open(val_path, &lm->vtok, err)) != TY_OK) {
            ty_err_prefix(err, "cannot open the validation dataset");
            return s;
        }
        if (lm->vtok.vocab_size != lm->tok.vocab_size)
            return ty_fail(err, TY_EINVAL, "validation",
                           "the validation dataset's vocabulary (%u tokens) "
                           "is not the training dataset's (%u)",
                           lm->vtok.vocab_size, lm->tok.vocab_size);
        if ((s = ds_windows_make(&lm->tok, 0, n, t, train, err)) != TY_OK ||
            (s = ds_windows_make(&lm->vtok, 0, lm->vtok.num_tokens, t, val,
                                 err)) != TY_OK)
            return s;
    } else {
        uint64_t n_train, n_val;
        ds_lm_split(n, split, &n_train, &n_val);
        if ((s = ds_windows_make(&lm->tok, 0, n_train, t, train, err)) != TY_OK)
            return s;
        if (n_val && (s = ds_windows_make(&lm->tok, n_train, n_val, t, val,
                                          err)) != TY_OK) {
            ty_err_prefix(err, "the held-out validation stretch (%llu tokens)",
                          (unsigned long long)n_val);
            return s;
        }
    }
    tj->train = train;
    tj->n_train = train->num_examples;
    if (val->num_examples) {
        tj->val = val;
        tj->n_val = val->num_examples;
    }
    return keep_tokenizer(job, lm->tok.meta, &lm->extra, tj, err);
}

static int run(const json_t *job)
{
    ty_err err = {0};
    ty_dataset train = {0}, val = {0};
    uint32_t *train_idx = NULL, *val_idx = NULL;
    int32_t *class_map = NULL;
    train_hparams hp;
    int rc = WPROTO_EXIT_FAILED;
    const char *ds_path =
        json_string_value(json_object_get(job, WPROTO_JOB_DATASET_PATH));
    const json_t *validation = json_object_get(job, WPROTO_JOB_VALIDATION);
    const char *val_path =
        json_string_value(json_object_get(validation, WPROTO_JOB_DATASET_PATH));
    lm_data lm = {0};
    int is_lm = 0;
    nn_comm *comm = NULL;  /* a data-parallel job's (WPROTO_JOB_WORLD) */
    nn_comm *dcomm = NULL; /* its NCCL comm over comm, on a CUDA device */
    if (!ds_path)
        return report_error("job.json has no dataset_path");
    if (train_hparams_parse(json_object_get(job, WPROTO_JOB_HYPERPARAMETERS),
                            &hp, NULL, &err) != TY_OK)
        goto fail;
    /* Admission spells context_length out for language models only. */
    is_lm = hp.context_length > 0;
    if (!is_lm && ty_dataset_open(ds_path, &train, &err) != TY_OK) {
        ty_err_prefix(&err, "cannot open the training dataset");
        goto fail;
    }

    train_job tj = {
        .spec = json_object_get(job, WPROTO_JOB_SPEC),
        .hp = &hp,
        .train = &train,
        .n_train = train.num_examples,
        .checkpoint_path =
            json_string_value(json_object_get(job, WPROTO_JOB_CHECKPOINT_PATH)),
        .model_path =
            json_string_value(json_object_get(job, WPROTO_JOB_MODEL_PATH)),
        .extra_meta = json_object_get(job, WPROTO_JOB_EXTRA_META),
        .init_path =
            json_string_value(json_object_get(job, WPROTO_JOB_INIT_PATH)),
        .threads =
            (int)json_integer_value(json_object_get(job, WPROTO_JOB_THREADS)),
        .stop = &stop_requested,
        .preempt = &preempt_requested,
        .cb = {.on_progress = on_progress,
               .on_epoch = on_epoch,
               .on_resume = on_resume,
               .on_preempt = on_preempt},
    };
    if (is_lm) {
        double split =
            json_number_value(json_object_get(validation, WPROTO_JOB_SPLIT));
        if (open_lm(job, &hp, ds_path, val_path, split, &train, &val, &lm, &tj,
                    &err) != TY_OK)
            goto fail;
    } else if (val_path) {
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
        double split =
            json_number_value(json_object_get(validation, WPROTO_JOB_SPLIT));
        uint32_t n_train = 0, n_val = 0;
        if (train_split(train.num_examples, split, hp.seed, &train_idx,
                        &n_train, &val_idx, &n_val, &err) != TY_OK)
            goto fail;
        tj.train_idx = train_idx;
        tj.n_train = n_train;
        if (n_val > 0) {
            tj.val = &train;
            tj.val_idx = val_idx;
            tj.n_val = n_val;
        }
    }
    if (!is_lm &&
        keep_tokenizer(job, train.meta, &lm.extra, &tj, &err) != TY_OK)
        goto fail;
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
        rc = WPROTO_EXIT_CANCELLED;
        goto done;
    }
    if (preempt_requested) {
        rc = preempted_before_training(tj.checkpoint_path);
        goto done;
    }
    /* A data-parallel job: this process is one of the ranks mpirun
     * started; they join before training, so one that cannot is an error
     * every rank sees (mpirun ends the others when one fails). */
    const json_int_t world =
        json_integer_value(json_object_get(job, WPROTO_JOB_WORLD));
    if (world > 1) {
        if (nn_comm_mpi_create(0, &comm, &err) != TY_OK)
            goto fail;
        if (comm->world != world) {
            ty_fail(&err, TY_EINVAL, NULL,
                    "the job has %lld workers but %d were started together",
                    (long long)world, comm->world);
            goto fail;
        }
        tj.comm = comm;
        /* The ranks on this machine share its cores (mpirun's all of
         * them, srun's one a node: comm->local_world): each takes its
         * part (the server's --worker-threads when given), and no rank
         * adds a loader thread to cores its peers compute on. */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        const long local = comm->local_world >= 1 ? comm->local_world : world;
        if (tj.threads <= 0)
            tj.threads = cores / local > 1 ? (int)(cores / local) : 1;
        if ((long)tj.threads * local >= cores)
            tj.prefetch = -1;
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
        /* A rank of a gang of whole GPUs (resources.gpus) on a real CUDA
         * device: the gradients go through NCCL, device to device, its
         * unique id handed out over the MPI comm the ranks just joined
         * (which stays for nothing else). A simulated device (sim:) or
         * the CPU keeps the MPI comm: its buffers are host memory. */
        if (comm) {
            if (nn_comm_nccl_create_over(comm, device, comm->timeout_s, &dcomm,
                                         &err) != TY_OK) {
                nn_cuda_exec_free(&dev);
                goto fail;
            }
            tj.comm = dcomm;
        }
    }
#endif
    ty_status s = train_run(&tj, &final, &err);
    /* NCCL's comm goes before the context its streams belong to. */
    if (dcomm) {
        dcomm->ops->destroy(dcomm);
        dcomm = NULL;
    }
#if TRAINYARD_HAVE_CUDA
    if (device >= 0)
        nn_cuda_exec_free(&dev);
#endif
    if (s == TY_ECANCELLED) {
        rc = WPROTO_EXIT_CANCELLED;
        goto done;
    }
    if (s == TY_EPREEMPTED) {
        rc = WPROTO_EXIT_PREEMPTED; /* on_preempt said so */
        goto done;
    }
    if (s != TY_OK)
        goto fail;
    worker_emit(wproto_encode_done());
    rc = 0;
    goto done;
fail:
    rc = report_error(err.msg[0] ? err.msg : "training failed");
done:
    if (comm)
        comm->ops->destroy(comm);
    free(train_idx);
    free(val_idx);
    free(class_map);
    if (is_lm) {
        ds_windows_free(&train);
        ds_windows_free(&val);
        ty_tokens_close(&lm.tok);
        ty_tokens_close(&lm.vtok);
    } else {
        ty_dataset_close(&train);
        ty_dataset_close(&val);
    }
    json_decref(lm.extra);
    return rc;
}

static void install_signals(void (*term)(int), void (*usr1)(int))
{
    struct sigaction sa = {0};
    sa.sa_handler = term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = usr1;
    sigaction(SIGUSR1, &sa, NULL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

/* The longest rank 0 of a data-parallel job waits for its peers' signal
 * handlers (ranks_ready): well below any heartbeat timeout worth setting;
 * ranks start in well under a second. */
#define RANKS_READY_WAIT_S 10.0

/* A data-parallel job's ranks, all started on this machine by mpirun:
 * rank 0 speaks for the job, and its first line tells the supervisor
 * that a preemption's SIGUSR1 finds the handlers in (supervisor_preempt
 * holds it until then); mpirun hands the signal to every rank, and a rank
 * slower to start than rank 0 would die of it, with no checkpoint. So
 * every other rank marks in the job folder, once its handlers are in, that
 * they are (a file named after mpirun's launch and the rank), and rank 0
 * says nothing before every mark is there, or RANKS_READY_WAIT_S have
 * passed; it removes the marks. Nothing for one process, nor for ranks
 * spread over machines (no shared folder; srun's signals are Slurm's). */
static void ranks_ready(const char *dir)
{
    const char *launch = getenv("PMIX_NAMESPACE");
    const char *size = getenv("OMPI_COMM_WORLD_SIZE");
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (!launch || !size || !local || !rank || strcmp(size, local) ||
        strchr(launch, '/') || strlen(launch) > 64)
        return;
    const long n = strtol(size, NULL, 10), r = strtol(rank, NULL, 10);
    if (n < 2 || n > 1024 || r < 0 || r >= n)
        return;
    char path[PATH_MAX];
    if (r > 0) {
        snprintf(path, sizeof path, "%s/.rank-ready.%s.%ld", dir, launch, r);
        int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0)
            close(fd);
        return;
    }
    /* 5 ms a look */
    const struct timespec tick = {.tv_nsec = 5000000};
    for (long looks = 0; looks * 0.005 < RANKS_READY_WAIT_S; looks++) {
        long seen = 0;
        for (long k = 1; k < n; k++) {
            snprintf(path, sizeof path, "%s/.rank-ready.%s.%ld", dir, launch,
                     k);
            seen += access(path, F_OK) == 0;
        }
        if (seen == n - 1)
            break;
        nanosleep(&tick, NULL);
    }
    for (long k = 1; k < n; k++) {
        snprintf(path, sizeof path, "%s/.rank-ready.%s.%ld", dir, launch, k);
        unlink(path);
    }
}

static void emit_started(void)
{
    const cpu_kernels_info *k = cpu_kernels_get();
    wproto_started st = {
        .pid = (long)getpid(),
        .cuda_visible_devices = getenv(WPROTO_ENV_CUDA_VISIBLE),
        .trainyard_device = getenv(WPROTO_ENV_DEVICE),
        .provider = k->provider,
        .core = k->core,
        .isa = k->isa,
        .cpu_isa = k->cpu_isa,
        /* 50 ms, measured beside whatever else runs on the machine then. */
        .gemm_gflops = cpu_kernels_measure(0.05)};
    worker_emit(wproto_encode_started(&st));
}

int worker_process(const worker_process_def *def, int argc, char **argv)
{
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], WPROTO_ARG_JOB_DIR) && i + 1 < argc)
            dir = argv[++i];
    }
    if (!dir) {
        fprintf(stderr,
                "usage: trainyard %s --job-dir DIR\n"
                "(started by `trainyard serve`; not meant to be run by "
                "hand)\n",
                def->who);
        return WPROTO_EXIT_USAGE;
    }
    install_signals(def->on_term, def->on_usr1);
    ranks_ready(dir);
    emit_started();

    heartbeat hb;
    if (heartbeat_start(&hb, def->who, def->heartbeat_fields) != 0)
        return worker_fail(def->who, "cannot start the heartbeat thread");

    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, def->file);
    json_error_t jerr;
    json_t *doc = json_load_file(path, 0, &jerr);
    int rc;
    if (!doc) {
        char msg[400];
        snprintf(msg, sizeof msg, "cannot read %s: %s", path, jerr.text);
        rc = worker_fail(def->who, msg);
    } else {
        rc = def->body(doc);
        json_decref(doc);
    }
    heartbeat_stop(&hb);
    return rc;
}

/* A rank of a gang of whole GPUs: its own TRAINYARD_DEVICE and
 * CUDA_VISIBLE_DEVICES from the gang's lists (WPROTO_ENV_RANK_DEVICES),
 * by its local rank, before anything reads them or initialises CUDA
 * (which reads CUDA_VISIBLE_DEVICES once). TY_OK with nothing to do
 * outside such a gang. */
static ty_status take_rank_device(ty_err *err)
{
    const char *devs = getenv(WPROTO_ENV_RANK_DEVICES);
    if (!devs)
        return TY_OK;
    const char *cvds = getenv(WPROTO_ENV_RANK_CUDA_VISIBLE);
    const char *lr = getenv(WPROTO_ENV_LOCAL_RANK_OMPI);
    if (!lr)
        lr = getenv(WPROTO_ENV_LOCAL_RANK_SLURM);
    char *end = NULL;
    long rank = lr ? strtol(lr, &end, 10) : -1;
    if (!lr || end == lr || *end || rank < 0 || rank > 4096)
        return ty_fail(err, TY_EINVAL, NULL,
                       "%s is set but this process has no local rank (%s "
                       "or %s)",
                       WPROTO_ENV_RANK_DEVICES, WPROTO_ENV_LOCAL_RANK_OMPI,
                       WPROTO_ENV_LOCAL_RANK_SLURM);
    char dev[256], cvd[256];
    ty_status s = wproto_rank_env(devs, (int)rank, dev, sizeof dev, err);
    if (s == TY_OK && cvds)
        s = wproto_rank_env(cvds, (int)rank, cvd, sizeof cvd, err);
    if (s != TY_OK)
        return s;
    if (setenv(WPROTO_ENV_DEVICE, dev, 1) != 0 ||
        (cvds && setenv(WPROTO_ENV_CUDA_VISIBLE, cvd, 1) != 0))
        return ty_fail(err, TY_ENOMEM, NULL, "setenv: out of memory");
    /* Only rank 0 speaks on stdout: the log says where each rank went. */
    fprintf(stderr, "trainyard %s: local rank %ld on %s=%s\n", WPROTO_COMMAND,
            rank, WPROTO_ENV_DEVICE, dev);
    return TY_OK;
}

int worker_main(int argc, char **argv)
{
    /* Started by Slurm on a node without the job folder: the shim that
     * fetches the job over HTTP and runs this command again as its child
     * with --job-dir (node/wremote.h). */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], WREMOTE_ARG_SERVER))
            return wremote_main(argc, argv);
    /* A data-parallel job's ranks but 0 are silent: mpirun hands every
     * rank's stdout to the server, and rank 0 speaks for the job (the
     * others' errors reach it through the comm, their stderr the log). */
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (!rank)
        rank = getenv("PMIX_RANK");
    if (rank && strcmp(rank, "0")) {
        int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            close(fd);
        }
    }
    ty_err err = {0};
    if (take_rank_device(&err) != TY_OK)
        return worker_fail(WPROTO_COMMAND, err.msg);
    /* SIGTERM and SIGINT cancel, SIGUSR1 preempts. */
    static const worker_process_def def = {.who = WPROTO_COMMAND,
                                           .file = WPROTO_JOB_FILE,
                                           .on_term = on_term,
                                           .on_usr1 = on_usr1,
                                           .body = run};
    return worker_process(&def, argc, argv);
}
