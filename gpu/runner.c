/*
 * runner.c - job runner thread and worker processes (see runner.h).
 *
 * One thread owns the workers: it starts them, polls their stdout pipes and
 * a wake-up eventfd, and reaps them. Other threads only touch the worker
 * table under the mutex (runner_cancel). Database writes of progress are
 * throttled to one a second per job; epoch records and outcomes are written
 * at once.
 */
#include "gpu/runner.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/ids.h"
#include "models/nn.h"
#include "server/blob.h"
#include "server/log.h"

#define LINE_MAX_BYTES 65536
#define CANCEL_GRACE_S 10.0

typedef struct {
    int used;
    char job_id[TY_ID_MAX];
    char dir[PATH_MAX];
    pid_t pid;
    int out_fd;                  /* -1 once EOF was read */
    char line[LINE_MAX_BYTES];
    size_t line_len;
    int done;                    /* the worker said the model is written */
    char error[512];             /* the worker's error message, if any */
    int cancel;                  /* a cancel was requested */
    double cancel_at;
    double last_progress_write;
    int resumed_from_epoch;      /* -1 unless this run resumed */
} worker;

struct runner {
    ty_app *app;
    pthread_t thread;
    pthread_mutex_t mu;
    int wake_fd;
    atomic_int stopping;
    int nworkers;                /* slots in use */
    int nslots;                  /* --max-jobs */
    worker *workers;             /* nslots of them */
    struct pollfd *pfd;          /* nslots + 1, for runner_main */
    worker **owner;              /* nslots + 1 */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void log_transition(const char *job, const char *to, const char *why)
{
    json_t *f = json_pack("{s:s, s:s}", "job", job, "status", to);
    if (why)
        json_object_set_new(f, "reason", json_string(why));
    log_event("info", "job", f);
}

/* ---- starting a worker ---- */

/* Writes job.json: what the worker needs, with blob paths resolved. */
static ty_status write_job_file(ty_app *app, const json_t *job,
                                const char *dir, ty_err *err)
{
    const char *tenant = json_string_value(json_object_get(job, "tenant_id"));
    const char *ds_id = json_string_value(json_object_get(job, "dataset"));
    char sha[65], path[PATH_MAX];
    json_t *ds = NULL, *vds = NULL;
    ty_status s = store_dataset_get(app->store, tenant, ds_id, &ds, sha, err);
    if (s != TY_OK)
        return s;
    blob_path(app->cfg.data_dir, sha, path, sizeof path);
    json_t *spec = json_object();
    json_object_set_new(spec, "job_id", json_object_get(job, "id")
                                            ? json_incref(json_object_get(job, "id"))
                                            : json_null());
    json_object_set_new(spec, "dataset_path", json_string(path));
    json_t *val = json_object_get(job, "validation");
    const char *val_id = json_string_value(json_object_get(val, "dataset"));
    if (val_id) {
        char vsha[65], vpath[PATH_MAX];
        s = store_dataset_get(app->store, tenant, val_id, &vds, vsha, err);
        if (s != TY_OK)
            goto done;
        blob_path(app->cfg.data_dir, vsha, vpath, sizeof vpath);
        json_object_set_new(spec, "validation",
                            json_pack("{s:s}", "dataset_path", vpath));
    } else {
        json_object_set(spec, "validation", val);
    }
    json_object_set(spec, "spec", json_object_get(job, "spec"));
    json_object_set(spec, "hyperparameters",
                    json_object_get(job, "hyperparameters"));
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/checkpoint.safetensors", dir);
    json_object_set_new(spec, "checkpoint_path", json_string(p));
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    json_object_set_new(spec, "model_path", json_string(p));
    json_object_set_new(spec, "threads", json_integer(app->cfg.worker_threads));
    json_object_set_new(spec, "extra_meta",
                        json_pack("{s:O, s:s}", "trainyard.job",
                                  json_object_get(job, "id"), "trainyard.dataset",
                                  ds_id));
    char *text = json_dumps(spec, JSON_INDENT(2));
    snprintf(p, sizeof p, "%s/job.json", dir);
    s = text ? fs_write_atomic(p, text, strlen(text), 0600, err)
             : ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    free(text);
done:
    json_decref(spec);
    json_decref(ds);
    json_decref(vds);
    return s;
}

extern char **environ;

/* The worker's environment: ours, with OPENBLAS_NUM_THREADS=1 (the engine
 * runs its own thread pool; OpenBLAS's would only compete with it) and
 * device_var ("TRAINYARD_DEVICE=cuda:0", borrowed) naming where the job
 * runs. Built before fork, since the child may only make async-signal-safe
 * calls. Caller frees the array. */
static char **worker_env(char *device_var)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 3, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "OPENBLAS_NUM_THREADS=", 21) != 0 &&
            strncmp(environ[i], "TRAINYARD_DEVICE=", 17) != 0)
            env[k++] = environ[i];
    env[k++] = "OPENBLAS_NUM_THREADS=1";
    env[k++] = device_var;
    env[k] = NULL;
    return env;
}

static ty_status spawn_worker(runner *r, worker *w, ty_err *err)
{
    /* Every job trains on the server's --train-device (issue 5's scheduler
     * will pick one per job). */
    char device_var[64];
    snprintf(device_var, sizeof device_var, "TRAINYARD_DEVICE=%s",
             r->app->train_dev.label);
    char **env = worker_env(device_var);
    if (!env)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        free(env);
        return ty_fail(err, TY_EIO, NULL, "pipe: %s", strerror(errno));
    }
    char log_path[PATH_MAX];
    snprintf(log_path, sizeof log_path, "%s/worker.log", w->dir);
    int log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (log_fd < 0) {
        close(pipefd[0]);
        close(pipefd[1]);
        free(env);
        return ty_fail(err, TY_EIO, NULL, "cannot open %s: %s", log_path,
                       strerror(errno));
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(pipefd[0]);
        close(pipefd[1]);
        close(log_fd);
        free(env);
        return ty_fail(err, TY_EIO, NULL, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        /* Child: only async-signal-safe calls until exec. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, 0);
        dup2(pipefd[1], 1);
        dup2(log_fd, 2);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        char *argv[] = {"trainyard", "worker", "--job-dir", w->dir, NULL};
        execve(r->app->self_exe, argv, env);
        _exit(127);
    }
    free(env);
    close(pipefd[1]);
    close(log_fd);
    pthread_mutex_lock(&r->mu);
    w->pid = pid;
    w->out_fd = pipefd[0];
    if (w->cancel) {
        w->cancel_at = now_s();
        kill(pid, SIGTERM);
    }
    pthread_mutex_unlock(&r->mu);
    return TY_OK;
}

/* Starts queued jobs while there are free slots. */
static void start_queued(runner *r)
{
    ty_app *app = r->app;
    while (!r->stopping && r->nworkers < app->cfg.max_jobs) {
        char id[TY_ID_MAX];
        ty_err err = {0};
        ty_status s = store_job_next_queued(app->store, id, &err);
        if (s == TY_ENOTFOUND)
            return;
        if (s != TY_OK) {
            log_msg("error", "runner: %s", err.msg);
            return;
        }
        json_t *job = NULL;
        /* Take the slot before marking the job running, so a cancel that
         * arrives from then on finds it (runner_cancel). */
        worker *w = NULL;
        pthread_mutex_lock(&r->mu);
        for (int i = 0; i < r->nslots && !w; i++)
            if (!r->workers[i].used)
                w = &r->workers[i];
        memset(w, 0, sizeof *w);
        w->used = 1;
        w->out_fd = -1;
        w->resumed_from_epoch = -1;
        snprintf(w->job_id, sizeof w->job_id, "%s", id);
        snprintf(w->dir, sizeof w->dir, "%s/%s", app->jobs_dir, id);
        r->nworkers++;
        pthread_mutex_unlock(&r->mu);
        if ((s = store_job_start(app->store, id, app->train_dev.label,
                                 &err)) != TY_OK) {
            pthread_mutex_lock(&r->mu);
            w->used = 0;
            r->nworkers--;
            pthread_mutex_unlock(&r->mu);
            if (s != TY_ECONFLICT) {
                log_msg("error", "runner: %s", err.msg);
                return;
            }
            continue; /* cancelled meanwhile */
        }

        if ((s = store_job_get_internal(app->store, id, &job, &err)) == TY_OK &&
            (s = fs_mkdirs(w->dir, 0700, &err)) == TY_OK &&
            (s = write_job_file(app, job, w->dir, &err)) == TY_OK)
            s = spawn_worker(r, w, &err);
        json_decref(job);
        if (s != TY_OK) {
            char msg[600];
            snprintf(msg, sizeof msg, "could not start the training process: %s",
                     err.msg);
            store_job_finish(app->store, id, JOB_FAILED, msg, NULL, &err);
            log_transition(id, JOB_FAILED, msg);
            pthread_mutex_lock(&r->mu);
            w->used = 0;
            r->nworkers--;
            pthread_mutex_unlock(&r->mu);
            continue;
        }
        log_transition(id, JOB_RUNNING, NULL);
    }
}

/* ---- following a worker ---- */

/* A number from a worker line, or JSON null for the -1 "not applicable". */
static json_t *metric(const json_t *ev, const char *key)
{
    json_t *v = json_object_get(ev, key);
    if (!json_is_number(v) || json_number_value(v) < 0)
        return json_null();
    return json_real(json_number_value(v));
}

static void handle_line(runner *r, worker *w, const char *line)
{
    ty_app *app = r->app;
    json_t *ev = json_loads(line, 0, NULL);
    const char *kind = json_string_value(json_object_get(ev, "event"));
    ty_err err = {0};
    if (!kind) {
        json_decref(ev);
        return;
    }
    if (!strcmp(kind, "progress")) {
        double t = now_s();
        int last = json_number_value(json_object_get(ev, "fraction")) >= 1.0;
        if (last || t - w->last_progress_write >= 1.0) {
            w->last_progress_write = t;
            json_t *progress = json_pack(
                "{s:O?, s:O?, s:O?, s:O?, s:O?}", "epoch",
                json_object_get(ev, "epoch"), "epochs",
                json_object_get(ev, "epochs"), "step",
                json_object_get(ev, "step"), "total_steps",
                json_object_get(ev, "total_steps"), "fraction",
                json_object_get(ev, "fraction"));
            if (w->resumed_from_epoch >= 0)
                json_object_set_new(progress, "resumed_from_epoch",
                                    json_integer(w->resumed_from_epoch));
            json_t *metrics = json_object();
            json_object_set_new(metrics, "train_loss", metric(ev, "loss"));
            json_object_set_new(metrics, "samples_per_sec",
                                metric(ev, "samples_per_sec"));
            json_object_set_new(metrics, "learning_rate", metric(ev, "lr"));
            store_job_progress(app->store, w->job_id, progress, metrics, &err);
            json_decref(progress);
            json_decref(metrics);
        }
    } else if (!strcmp(kind, "epoch")) {
        json_t *m = json_object();
        json_object_set(m, "epoch", json_object_get(ev, "epoch"));
        static const char *const keys[] = {"train_loss", "train_accuracy",
                                           "val_loss", "val_accuracy",
                                           "samples_per_sec", "seconds"};
        for (size_t i = 0; i < TY_ARRAY_LEN(keys); i++)
            json_object_set_new(m, keys[i], metric(ev, keys[i]));
        /* A byte count: kept whole (older workers do not send it). */
        json_t *peak = json_object_get(ev, "peak_memory_bytes");
        json_object_set_new(m, "peak_memory_bytes",
                            json_is_integer(peak) ? json_integer(
                                                        json_integer_value(peak))
                                                  : json_null());
        /* Where and how it ran: passed through when the worker said. */
        static const char *const where[] = {"device", "precision",
                                            "loss_scale", "skipped_steps",
                                            "cuda_graph", "cuda_graph_reason",
                                            "device_memory_used_bytes"};
        for (size_t i = 0; i < TY_ARRAY_LEN(where); i++) {
            json_t *v = json_object_get(ev, where[i]);
            json_object_set(m, where[i], v ? v : json_null());
        }
        store_job_epoch(app->store, w->job_id,
                        json_integer_value(json_object_get(ev, "epoch")), m,
                        &err);
        json_decref(m);
    } else if (!strcmp(kind, "resume")) {
        w->resumed_from_epoch =
            (int)json_integer_value(json_object_get(ev, "epoch"));
        log_event("info", "job_resume",
                  json_pack("{s:s, s:O?, s:O?}", "job", w->job_id, "epoch",
                            json_object_get(ev, "epoch"), "step",
                            json_object_get(ev, "step")));
    } else if (!strcmp(kind, "done")) {
        w->done = 1;
    } else if (!strcmp(kind, "error")) {
        snprintf(w->error, sizeof w->error, "%s",
                 json_string_value(json_object_get(ev, "message"))
                     ? json_string_value(json_object_get(ev, "message"))
                     : "training failed");
    }
    if (err.msg[0])
        log_msg("error", "runner: job %s: %s", w->job_id, err.msg);
    json_decref(ev);
}

static void read_output(runner *r, worker *w)
{
    char buf[8192];
    ssize_t n = read(w->out_fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        close(w->out_fd);
        w->out_fd = -1;
        return;
    }
    for (ssize_t i = 0; i < n; i++) {
        if (buf[i] == '\n') {
            w->line[w->line_len] = '\0';
            handle_line(r, w, w->line);
            w->line_len = 0;
        } else if (w->line_len < sizeof w->line - 1) {
            w->line[w->line_len++] = buf[i];
        }
    }
}

/* Registers the finished model: validates it by loading it, moves it into
 * the blob folder, and commits the model row with the job's success. */
static ty_status register_model(ty_app *app, worker *w, ty_err *err)
{
    char model_path[PATH_MAX];
    snprintf(model_path, sizeof model_path, "%s/model.safetensors", w->dir);
    nn_net *net = NULL;
    json_t *job = NULL, *doc = NULL;
    ty_status s = nn_net_load(model_path, &net, err);
    if (s != TY_OK) {
        ty_err_prefix(err, "the trained model could not be read back");
        return s;
    }
    char model_id[TY_ID_MAX], sha[65], now[32];
    int64_t bytes = 0;
    if ((s = store_job_get_internal(app->store, w->job_id, &job, err)) != TY_OK ||
        (s = ty_id_new("mdl_", model_id, err)) != TY_OK)
        goto done;
    store_now(now);
    doc = json_object();
    json_object_set_new(doc, "id", json_string(model_id));
    json_object_set(doc, "name", json_object_get(job, "name"));
    json_object_set_new(doc, "job", json_string(w->job_id));
    json_object_set(doc, "dataset", json_object_get(job, "dataset"));
    nn_net_describe(net, doc);
    /* Where it was trained: the job's device (its last run's). */
    json_t *device = json_object_get(job, "device");
    json_object_set_new(doc, "trained_on",
                        json_is_string(device) ? json_incref(device)
                                               : json_null());
    json_object_set(doc, "hyperparameters",
                    json_object_get(job, "hyperparameters"));
    json_object_set(doc, "metrics", json_object_get(job, "metrics"));
    pthread_mutex_lock(&app->blob_mu);
    s = blob_import(app->cfg.data_dir, model_path, sha, &bytes, err);
    if (s == TY_OK) {
        json_object_set_new(doc, "sha256", json_string(sha));
        json_object_set_new(doc, "bytes", json_integer(bytes));
        json_object_set_new(doc, "created_at", json_string(now));
        s = store_job_succeed(app->store, w->job_id, model_id, sha, bytes, doc,
                              err);
    }
    pthread_mutex_unlock(&app->blob_mu);
    if (s == TY_OK) {
        char ckpt[PATH_MAX];
        snprintf(ckpt, sizeof ckpt, "%s/checkpoint.safetensors", w->dir);
        unlink(ckpt);
    }
done:
    json_decref(doc);
    json_decref(job);
    nn_net_destroy(net);
    return s;
}

/* The worker has exited with wait status ws: record the outcome. */
static void finish_worker(runner *r, worker *w, int ws)
{
    ty_app *app = r->app;
    ty_err err = {0};
    char msg[700];
    const char *status;
    if (r->stopping) {
        /* Shutdown: the job stays running in the store and is requeued by
         * runner_stop (or by the next start). */
        return;
    }
    pthread_mutex_lock(&r->mu);
    int cancelled = w->cancel;
    pthread_mutex_unlock(&r->mu);
    if (cancelled) {
        status = JOB_CANCELLED;
        snprintf(msg, sizeof msg, "cancelled by request");
    } else if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0 && w->done) {
        ty_status s = register_model(app, w, &err);
        if (s == TY_OK) {
            log_transition(w->job_id, JOB_SUCCEEDED, NULL);
            return;
        }
        status = JOB_FAILED;
        snprintf(msg, sizeof msg, "%s", err.msg);
    } else if (w->error[0]) {
        status = JOB_FAILED;
        snprintf(msg, sizeof msg, "%s", w->error);
    } else if (WIFSIGNALED(ws)) {
        status = JOB_FAILED;
        snprintf(msg, sizeof msg,
                 "the training process was killed by signal %d (%s); its log "
                 "is %s/worker.log",
                 WTERMSIG(ws), strsignal(WTERMSIG(ws)), w->dir);
    } else {
        status = JOB_FAILED;
        snprintf(msg, sizeof msg,
                 "the training process exited with status %d without a "
                 "result; its log is %s/worker.log",
                 WIFEXITED(ws) ? WEXITSTATUS(ws) : -1, w->dir);
    }
    store_job_finish(app->store, w->job_id, status, msg, NULL, &err);
    log_transition(w->job_id, status, msg);
}

static void reap(runner *r)
{
    double t = now_s();
    for (int i = 0; i < r->nslots; i++) {
        worker *w = &r->workers[i];
        if (!w->used)
            continue;
        pthread_mutex_lock(&r->mu);
        if (w->cancel && w->pid > 0 && t - w->cancel_at > CANCEL_GRACE_S)
            kill(w->pid, SIGKILL);
        pthread_mutex_unlock(&r->mu);
        if (w->out_fd >= 0)
            continue;
        int ws = 0;
        pid_t p = waitpid(w->pid, &ws, WNOHANG);
        if (p == 0)
            continue;
        if (p < 0)
            ws = 0;
        finish_worker(r, w, ws);
        pthread_mutex_lock(&r->mu);
        w->used = 0;
        r->nworkers--;
        pthread_mutex_unlock(&r->mu);
    }
}

static void *runner_main(void *arg)
{
    runner *r = arg;
    struct pollfd *pfd = r->pfd;
    worker **owner = r->owner;
    while (!r->stopping) {
        start_queued(r);
        int n = 0;
        pfd[n].fd = r->wake_fd;
        pfd[n].events = POLLIN;
        owner[n++] = NULL;
        int exited_waiting = 0;
        for (int i = 0; i < r->nslots; i++) {
            worker *w = &r->workers[i];
            if (!w->used)
                continue;
            if (w->out_fd < 0) {
                exited_waiting = 1;
                continue;
            }
            pfd[n].fd = w->out_fd;
            pfd[n].events = POLLIN;
            owner[n++] = w;
        }
        int rc = poll(pfd, (nfds_t)n, exited_waiting ? 100 : 1000);
        if (rc > 0) {
            if (pfd[0].revents) {
                uint64_t v;
                if (read(r->wake_fd, &v, sizeof v) < 0) {
                    /* nothing to do: the counter was already drained */
                }
            }
            for (int i = 1; i < n; i++)
                if (pfd[i].revents)
                    read_output(r, owner[i]);
        }
        reap(r);
    }
    return NULL;
}

static void runner_free(runner *r)
{
    free(r->workers);
    free(r->pfd);
    free(r->owner);
    free(r);
}

ty_status runner_start(ty_app *app, runner **out, ty_err *err)
{
    runner *r = calloc(1, sizeof *r);
    if (!r)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    r->nslots = app->cfg.max_jobs;
    r->workers = calloc((size_t)r->nslots, sizeof *r->workers);
    r->pfd = calloc((size_t)r->nslots + 1, sizeof *r->pfd);
    r->owner = calloc((size_t)r->nslots + 1, sizeof *r->owner);
    if (!r->workers || !r->pfd || !r->owner) {
        runner_free(r);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    r->app = app;
    pthread_mutex_init(&r->mu, NULL);
    r->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (r->wake_fd < 0) {
        runner_free(r);
        return ty_fail(err, TY_EIO, NULL, "eventfd: %s", strerror(errno));
    }
    if (pthread_create(&r->thread, NULL, runner_main, r) != 0) {
        close(r->wake_fd);
        runner_free(r);
        return ty_fail(err, TY_EIO, NULL, "cannot start the runner thread");
    }
    *out = r;
    return TY_OK;
}

void runner_wake(runner *r)
{
    uint64_t one = 1;
    if (write(r->wake_fd, &one, sizeof one) < 0) {
        /* The counter is saturated, so a wake-up is pending anyway. */
    }
}

void runner_cancel(runner *r, const char *job_id)
{
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->nslots; i++) {
        worker *w = &r->workers[i];
        if (w->used && !strcmp(w->job_id, job_id) && !w->cancel) {
            w->cancel = 1;
            w->cancel_at = now_s();
            if (w->pid > 0)
                kill(w->pid, SIGTERM);
        }
    }
    pthread_mutex_unlock(&r->mu);
    runner_wake(r);
}

void runner_stop(runner *r)
{
    if (!r)
        return;
    r->stopping = 1;
    runner_wake(r);
    pthread_join(r->thread, NULL);
    /* Stop the workers and wait for them, then requeue their jobs. */
    for (int i = 0; i < r->nslots; i++)
        if (r->workers[i].used && r->workers[i].pid > 0)
            kill(r->workers[i].pid, SIGTERM);
    for (int i = 0; i < r->nslots; i++) {
        worker *w = &r->workers[i];
        if (!w->used || w->pid <= 0)
            continue;
        int ws;
        for (int tries = 0; tries < 100; tries++) {
            if (waitpid(w->pid, &ws, WNOHANG) != 0)
                break;
            if (tries == 99) {
                kill(w->pid, SIGKILL);
                waitpid(w->pid, &ws, 0);
            }
            usleep(50000);
        }
        if (w->out_fd >= 0)
            close(w->out_fd);
    }
    int64_t n = 0;
    ty_err err;
    store_job_requeue_running(r->app->store, &n, &err);
    if (n)
        log_msg("info", "requeued %lld running job(s) for the next start",
                (long long)n);
    close(r->wake_fd);
    pthread_mutex_destroy(&r->mu);
    runner_free(r);
}
