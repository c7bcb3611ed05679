/*
 * supervisor.c - worker processes: spawn, follow, signal, reap (see
 * supervisor.h).
 *
 * Invariants: a place is `used` from supervisor_spawn until on_exit has
 * returned for it (or the supervisor stopped); its pipe is read until EOF
 * (out_fd -1 after), and it is reaped only after EOF, so every line a
 * worker printed reaches on_message before its exit reaches on_exit.
 */
#include "jobs/supervisor.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
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

#include "common/ids.h"
#include "common/log.h"

#define LINE_MAX_BYTES 65536
#define CANCEL_GRACE_S 10.0
#define ENV_VAR_MAX 512 /* "NAME=value" of the device variables */

typedef struct {
    int used;
    char job_id[TY_ID_MAX]; /* for the logs */
    pid_t pid;
    int out_fd; /* -1 once EOF was read */
    char line[LINE_MAX_BYTES];
    size_t line_len;
    int cancel; /* SIGTERM was sent */
    double cancel_at;
    int usr1_pending; /* SIGUSR1 waits for the first line */
    int started;      /* it printed a line: its handlers are in */
    int lost;         /* killed after heartbeat silence */
    double last_line; /* monotonic time of its last output */
} proc;

struct supervisor {
    int cap;
    char self_exe[PATH_MAX];
    double heartbeat_timeout_s;
    pthread_mutex_t *mu;
    supervisor_hooks hooks;
    pthread_t thread;
    int thread_started;
    int wake_fd;
    atomic_int stopping;
    proc *procs;
    struct pollfd *pfd; /* cap + 1, for supervisor_main */
    int *owner;         /* cap + 1: the place of pfd[i], -1 wake */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

supervisor *supervisor_create(int cap, const char *self_exe,
                              double heartbeat_timeout_s, pthread_mutex_t *mu,
                              const supervisor_hooks *hooks, ty_err *err)
{
    supervisor *s = calloc(1, sizeof *s);
    if (!s) {
        ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        return NULL;
    }
    s->cap = cap;
    snprintf(s->self_exe, sizeof s->self_exe, "%s", self_exe);
    s->heartbeat_timeout_s = heartbeat_timeout_s;
    s->mu = mu;
    s->hooks = *hooks;
    s->wake_fd = -1;
    s->procs = calloc((size_t)cap + 1, sizeof *s->procs);
    s->pfd = calloc((size_t)cap + 1, sizeof *s->pfd);
    s->owner = calloc((size_t)cap + 1, sizeof *s->owner);
    if (!s->procs || !s->pfd || !s->owner) {
        supervisor_destroy(s);
        ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        return NULL;
    }
    for (int i = 0; i < cap; i++)
        s->procs[i].out_fd = -1;
    return s;
}

void supervisor_destroy(supervisor *s)
{
    if (!s)
        return;
    if (s->wake_fd >= 0)
        close(s->wake_fd);
    free(s->procs);
    free(s->pfd);
    free(s->owner);
    free(s);
}

/* ---- starting a worker ---- */

extern char **environ;

/* Whether the environment entry "NAME=value" is name's. */
static int env_is(const char *entry, const char *name)
{
    size_t n = strlen(name);
    return !strncmp(entry, name, n) && entry[n] == '=';
}

/* The worker's environment: ours, with OPENBLAS_NUM_THREADS=1 (the engine
 * runs its own thread pool; OpenBLAS's would only compete with it),
 * device_var ("TRAINYARD_DEVICE=...") and, unless NULL, cvd_var
 * ("CUDA_VISIBLE_DEVICES=...") naming where the job runs, and a gang's
 * per-rank lists ranks_var and rank_cvds_var (NULL: none; all borrowed).
 * Built before fork, since the child may only make async-signal-safe
 * calls. Caller frees the array. */
static char **worker_env(char *device_var, char *cvd_var, char *ranks_var,
                         char *rank_cvds_var)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 6, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!env_is(environ[i], WPROTO_ENV_BLAS_THREADS) &&
            !env_is(environ[i], WPROTO_ENV_DEVICE) &&
            !env_is(environ[i], WPROTO_ENV_RANK_DEVICES) &&
            !env_is(environ[i], WPROTO_ENV_RANK_CUDA_VISIBLE) &&
            (!cvd_var || !env_is(environ[i], WPROTO_ENV_CUDA_VISIBLE)))
            env[k++] = environ[i];
    env[k++] = WPROTO_ENV_BLAS_THREADS "=1";
    env[k++] = device_var;
    if (cvd_var)
        env[k++] = cvd_var;
    if (ranks_var)
        env[k++] = ranks_var;
    if (rank_cvds_var)
        env[k++] = rank_cvds_var;
    env[k] = NULL;
    return env;
}

/* "NAME=a,b,c" of ranks values (new string; NULL when out of memory or a
 * value holds a comma, which *bad then says). */
static char *rank_list_var(const char *name, const char *const *values,
                           int ranks, int *bad)
{
    size_t len = strlen(name) + 2;
    for (int i = 0; i < ranks; i++) {
        if (strchr(values[i], ',')) {
            *bad = 1;
            return NULL;
        }
        len += strlen(values[i]) + 1;
    }
    char *v = malloc(len);
    if (!v)
        return NULL;
    size_t at = (size_t)snprintf(v, len, "%s=", name);
    for (int i = 0; i < ranks; i++)
        at +=
            (size_t)snprintf(v + at, len - at, "%s%s", i ? "," : "", values[i]);
    return v;
}

static ty_status spawn(supervisor *s, int place, const char *command,
                       const char *job_id, const char *dir, const char *device,
                       const char *cvd, int has_cvd, int ranks,
                       const char *mpirun, char *ranks_var, char *rank_cvds_var,
                       pid_t *pid_out, ty_err *err);

ty_status supervisor_spawn(supervisor *s, int place, const char *command,
                           const char *job_id, const char *dir,
                           const char *device, const char *cvd, int has_cvd,
                           pid_t *pid_out, ty_err *err)
{
    return supervisor_spawn_ranks(s, place, command, job_id, dir, device, cvd,
                                  has_cvd, 1, NULL, pid_out, err);
}

ty_status supervisor_spawn_ranks(supervisor *s, int place, const char *command,
                                 const char *job_id, const char *dir,
                                 const char *device, const char *cvd,
                                 int has_cvd, int ranks, const char *mpirun,
                                 pid_t *pid_out, ty_err *err)
{
    return spawn(s, place, command, job_id, dir, device, cvd, has_cvd, ranks,
                 mpirun, NULL, NULL, pid_out, err);
}

ty_status supervisor_spawn_gang(supervisor *s, int place, const char *command,
                                const char *job_id, const char *dir,
                                const char *const *devices,
                                const char *const *cvds, int ranks,
                                const char *mpirun, pid_t *pid_out, ty_err *err)
{
    if (ranks < 2)
        return ty_fail(err, TY_EINVAL, NULL,
                       "a gang of devices has 2 or more ranks");
    int bad = 0;
    char *dv = rank_list_var(WPROTO_ENV_RANK_DEVICES, devices, ranks, &bad);
    char *cv =
        dv ? rank_list_var(WPROTO_ENV_RANK_CUDA_VISIBLE, cvds, ranks, &bad)
           : NULL;
    ty_status st;
    if (bad)
        st = ty_fail(err, TY_EINVAL, NULL,
                     "a rank's device or CUDA_VISIBLE_DEVICES holds a comma");
    else if (!dv || !cv)
        st = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    else
        st = spawn(s, place, command, job_id, dir, devices[0], cvds[0], 1,
                   ranks, mpirun, dv, cv, pid_out, err);
    free(dv);
    free(cv);
    return st;
}

static ty_status spawn(supervisor *s, int place, const char *command,
                       const char *job_id, const char *dir, const char *device,
                       const char *cvd, int has_cvd, int ranks,
                       const char *mpirun, char *ranks_var, char *rank_cvds_var,
                       pid_t *pid_out, ty_err *err)
{
    if (ranks > 1 && (!mpirun || !mpirun[0]))
        return ty_fail(err, TY_EINVAL, NULL,
                       "a data-parallel job needs Open MPI's mpirun");
    proc *w = &s->procs[place];
    char device_var[ENV_VAR_MAX], cvd_var[ENV_VAR_MAX];
    char dir_arg[PATH_MAX], np_arg[16];
    snprintf(np_arg, sizeof np_arg, "%d", ranks);
    snprintf(device_var, sizeof device_var, "%s=%s", WPROTO_ENV_DEVICE, device);
    snprintf(cvd_var, sizeof cvd_var, "%s=%s", WPROTO_ENV_CUDA_VISIBLE, cvd);
    snprintf(dir_arg, sizeof dir_arg, "%s", dir);
    char **env = worker_env(device_var, has_cvd ? cvd_var : NULL, ranks_var,
                            rank_cvds_var);
    if (!env)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        free(env);
        return ty_fail(err, TY_EIO, NULL, "pipe: %s", strerror(errno));
    }
    char log_path[PATH_MAX];
    snprintf(log_path, sizeof log_path, "%s/%s", dir, WPROTO_LOG_FILE);
    int log_fd =
        open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (log_fd < 0) {
        close(pipefd[0]);
        close(pipefd[1]);
        free(env);
        return ty_fail(err, TY_EIO, NULL, "cannot open %s: %s", log_path,
                       strerror(errno));
    }
    /* The command line, made before fork: `trainyard <command> --job-dir
     * <dir>`, or for ranks > 1 mpirun starting that many of it on this
     * machine over shared memory (no network; no single-copy mechanism,
     * which containers forbid), which forwards SIGTERM and SIGUSR1 to
     * every rank; as root it wants to be told that is meant. */
    char *argv[24];
    int a = 0;
    const char *exe = s->self_exe;
    if (ranks > 1) {
        exe = mpirun;
        char *const mpi[] = {(char *)mpirun,
                             "-np",
                             np_arg,
                             "--oversubscribe",
                             "--bind-to",
                             "none",
                             "--mca",
                             "btl",
                             "self,vader",
                             "--mca",
                             "btl_vader_single_copy_mechanism",
                             "none"};
        for (size_t i = 0; i < sizeof mpi / sizeof mpi[0]; i++)
            argv[a++] = mpi[i];
        if (geteuid() == 0)
            argv[a++] = "--allow-run-as-root";
        argv[a++] = s->self_exe;
    } else {
        argv[a++] = "trainyard";
    }
    argv[a++] = (char *)command;
    argv[a++] = WPROTO_ARG_JOB_DIR;
    argv[a++] = dir_arg;
    argv[a] = NULL;
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
            _exit(WPROTO_EXIT_EXEC);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, 0);
        dup2(pipefd[1], 1);
        dup2(log_fd, 2);
        /* The server's SIGTERM/SIGINT handler writes to its stop pipe,
         * which this child shares until exec: a cancel's SIGTERM that
         * reached the child before exec (pending while blocked) stopped
         * the whole server. Default handling first, then unblock. */
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        sigemptyset(&dfl.sa_mask);
        sigaction(SIGTERM, &dfl, NULL);
        sigaction(SIGINT, &dfl, NULL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execve(exe, argv, env);
        _exit(WPROTO_EXIT_EXEC);
    }
    free(env);
    close(pipefd[1]);
    close(log_fd);
    memset(w, 0, sizeof *w);
    w->used = 1;
    snprintf(w->job_id, sizeof w->job_id, "%s", job_id);
    w->pid = pid;
    w->out_fd = pipefd[0];
    w->last_line = now_s();
    *pid_out = pid;
    return TY_OK;
}

/* ---- signals ---- */

void supervisor_preempt(supervisor *s, int place)
{
    proc *w = &s->procs[place];
    if (!w->used)
        return;
    /* Before its first line the worker has no SIGUSR1 handler yet
     * (node/protocol.h): the signal would kill it without a checkpoint.
     * read_output sends it then. */
    if (w->pid > 0 && w->started)
        kill(w->pid, SIGUSR1);
    else
        w->usr1_pending = 1;
}

void supervisor_cancel(supervisor *s, int place)
{
    proc *w = &s->procs[place];
    if (!w->used || w->cancel)
        return;
    w->cancel = 1;
    w->cancel_at = now_s();
    if (w->pid > 0)
        kill(w->pid, SIGTERM);
}

/* ---- following a worker ---- */

/* One whole line of place i's output. */
static void handle_line(supervisor *s, int i, const char *line)
{
    proc *w = &s->procs[i];
    json_t *msg = NULL;
    wproto_msg kind = wproto_decode(line, &msg);
    if (kind == WPROTO_MSG_NONE)
        return;
    if (!w->started) {
        /* "started" comes first from workers that have it; any line means
         * the signal handlers are in. */
        pthread_mutex_lock(s->mu);
        w->started = 1;
        if (w->usr1_pending && w->pid > 0)
            kill(w->pid, SIGUSR1);
        w->usr1_pending = 0;
        pthread_mutex_unlock(s->mu);
    }
    s->hooks.on_message(s->hooks.ctx, i, kind, msg);
    json_decref(msg);
}

static void read_output(supervisor *s, int i)
{
    proc *w = &s->procs[i];
    char buf[8192];
    ssize_t n = read(w->out_fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        pthread_mutex_lock(s->mu);
        close(w->out_fd);
        w->out_fd = -1;
        pthread_mutex_unlock(s->mu);
        return;
    }
    w->last_line = now_s();
    for (ssize_t k = 0; k < n; k++) {
        if (buf[k] == '\n') {
            w->line[w->line_len] = '\0';
            handle_line(s, i, w->line);
            w->line_len = 0;
        } else if (w->line_len < sizeof w->line - 1) {
            w->line[w->line_len++] = buf[k];
        }
    }
}

/* Leaves place w free. Caller holds mu. */
static void proc_release(proc *w)
{
    if (w->out_fd >= 0)
        close(w->out_fd);
    w->out_fd = -1;
    w->used = 0;
}

/* Kills workers past their cancel grace period or heartbeat timeout, and
 * reaps those that have exited. */
static void reap(supervisor *s)
{
    double t = now_s();
    double hb = s->heartbeat_timeout_s;
    pthread_mutex_lock(s->mu);
    for (int i = 0; i < s->cap; i++) {
        proc *w = &s->procs[i];
        if (!w->used || w->pid <= 0)
            continue;
        if (w->cancel && t - w->cancel_at > CANCEL_GRACE_S)
            kill(w->pid, SIGKILL);
        if (!w->lost && !w->cancel && w->out_fd >= 0 && hb > 0 &&
            t - w->last_line > hb) {
            w->lost = 1;
            kill(w->pid, SIGKILL);
            log_event("warn", "job_heartbeat_lost",
                      json_pack("{s:s, s:i, s:f}", "job", w->job_id, "pid",
                                (int)w->pid, "silent_s", t - w->last_line));
        }
        if (w->out_fd >= 0)
            continue;
        int ws = 0;
        pid_t p = waitpid(w->pid, &ws, WNOHANG);
        if (p == 0)
            continue;
        if (p < 0)
            ws = 0;
        if (s->stopping) {
            /* Shutdown: the job stays running in the store and is requeued
             * by its owner (or by the next start). */
            continue;
        }
        s->hooks.on_exit(s->hooks.ctx, i, ws, w->lost);
        proc_release(w);
    }
    pthread_mutex_unlock(s->mu);
}

static void *supervisor_main(void *arg)
{
    supervisor *s = arg;
    struct pollfd *pfd = s->pfd;
    int *owner = s->owner;
    while (!s->stopping) {
        pthread_mutex_lock(s->mu);
        s->hooks.on_tick(s->hooks.ctx);
        int n = 0;
        pfd[n].fd = s->wake_fd;
        pfd[n].events = POLLIN;
        owner[n++] = -1;
        int exited_waiting = 0;
        for (int i = 0; i < s->cap; i++) {
            proc *w = &s->procs[i];
            if (!w->used)
                continue;
            if (w->out_fd < 0) {
                exited_waiting = 1;
                continue;
            }
            pfd[n].fd = w->out_fd;
            pfd[n].events = POLLIN;
            owner[n++] = i;
        }
        pthread_mutex_unlock(s->mu);
        /* The timeout bounds how late a back-off, a heartbeat check or a
         * time-based scheduling decision (backfill, preemption wait) can
         * be. */
        int rc = poll(pfd, (nfds_t)n, exited_waiting ? 100 : 500);
        if (rc > 0) {
            if (pfd[0].revents) {
                uint64_t v;
                if (read(s->wake_fd, &v, sizeof v) < 0) {
                    /* nothing to do: the counter was already drained */
                }
            }
            for (int i = 1; i < n; i++)
                if (pfd[i].revents)
                    read_output(s, owner[i]);
        }
        reap(s);
    }
    return NULL;
}

ty_status supervisor_start(supervisor *s, ty_err *err)
{
    s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->wake_fd < 0)
        return ty_fail(err, TY_EIO, NULL, "eventfd: %s", strerror(errno));
    if (pthread_create(&s->thread, NULL, supervisor_main, s) != 0)
        return ty_fail(err, TY_EIO, NULL, "cannot start the runner thread");
    s->thread_started = 1;
    return TY_OK;
}

void supervisor_wake(supervisor *s)
{
    if (!s || s->wake_fd < 0)
        return;
    uint64_t one = 1;
    if (write(s->wake_fd, &one, sizeof one) < 0) {
        /* The counter is saturated, so a wake-up is pending anyway. */
    }
}

void supervisor_stop(supervisor *s)
{
    if (!s)
        return;
    s->stopping = 1;
    supervisor_wake(s);
    if (s->thread_started)
        pthread_join(s->thread, NULL);
    /* Stop the workers and wait for them. */
    for (int i = 0; i < s->cap; i++)
        if (s->procs[i].used && s->procs[i].pid > 0)
            kill(s->procs[i].pid, SIGTERM);
    for (int i = 0; i < s->cap; i++) {
        proc *w = &s->procs[i];
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
        w->out_fd = -1;
    }
    supervisor_destroy(s);
}
