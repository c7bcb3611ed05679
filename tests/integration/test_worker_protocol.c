/*
 * test_worker_protocol.c - `trainyard worker` run directly, as jobs/supervisor.c
 * runs it: a job folder with job.json (dataset_path, validation, spec,
 * hyperparameters, checkpoint_path, model_path, threads, extra_meta), the
 * worker's stdout on a pipe, its stderr in worker.log, signals unblocked,
 * OPENBLAS_NUM_THREADS=1 and TRAINYARD_DEVICE in the environment. Checks
 * the lifecycle protocol (node/protocol.h): the "started"
 * line comes first and reports the environment it was given; heartbeats
 * come at the configured interval, long steps included, and every line is
 * whole JSON; a sim:<uuid> device computes on the CPU and labels the epoch
 * records; SIGUSR1 stops at a step boundary with a checkpoint and exit 4,
 * and the next run resumes from it to the same weights as a run never
 * stopped; SIGUSR1 before training exits 4 without writing one; SIGTERM
 * still exits 3.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "harness.h"
#include "models/data/dataset.h"

#define LINE_TIMEOUT_S 300.0
#define MAX_LINES 100000

/* ---- the job folder, as the runner writes it ---- */

/* A classification dataset of n examples of `features` floats (two
 * classes, the sign of the first feature) converted from NPY into
 * <dir>/ds.tyds. */
static void make_dataset(const char *dir, uint32_t n, uint32_t features,
                         char out[PATH_MAX])
{
    char xp[PATH_MAX], yp[PATH_MAX];
    snprintf(xp, sizeof xp, "%s/x.npy", dir);
    snprintf(yp, sizeof yp, "%s/y.npy", dir);
    snprintf(out, PATH_MAX, "%s/ds.tyds", dir);
    float *x = malloc((size_t)n * features * sizeof *x);
    int64_t *y = malloc(n * sizeof *y);
    assert_non_null(x);
    assert_non_null(y);
    uint32_t r = 12345;
    for (size_t i = 0; i < (size_t)n * features; i++) {
        r = r * 1103515245u + 12345u;
        x[i] = (float)((r >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    for (uint32_t i = 0; i < n; i++)
        y[i] = x[(size_t)i * features] > 0;
    write_npy_f32(xp, x, n, features);
    write_npy_i64(yp, y, n);
    free(x);
    free(y);
    ty_err err = {0};
    assert_int_equal(ds_convert_npy(xp, yp, TY_TASK_CLASSIFICATION, out, &err),
                     TY_OK);
}

/* <job_dir>/job.json for dataset ds with the spec and hyperparameters given
 * (JSON text), its checkpoint and model in job_dir, as write_job_file
 * writes it. */
static void write_job(const char *job_dir, const char *ds, const char *spec,
                      const char *hp)
{
    char ckpt[PATH_MAX], model[PATH_MAX], path[PATH_MAX];
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint.safetensors", job_dir);
    snprintf(model, sizeof model, "%s/model.safetensors", job_dir);
    snprintf(path, sizeof path, "%s/job.json", job_dir);
    json_t *j = json_pack(
        "{s:s, s:s, s:{s:f}, s:o, s:o, s:s, s:s, s:i, "
        "s:{s:s, s:s}}",
        "job_id", "job_worker_test", "dataset_path", ds, "validation", "split",
        0.1, "spec", json_loads(spec, 0, NULL), "hyperparameters",
        json_loads(hp, 0, NULL), "checkpoint_path", ckpt, "model_path", model,
        "threads", 1, "extra_meta", "trainyard.job", "job_worker_test",
        "trainyard.dataset", "ds_worker_test");
    assert_non_null(j);
    assert_int_equal(json_dump_file(j, path, JSON_INDENT(2)), 0);
    json_decref(j);
}

static void job_file(const char *job_dir, const char *name, char out[PATH_MAX])
{
    snprintf(out, PATH_MAX, "%s/%s", job_dir, name);
}

/* ---- a worker process and its lines ---- */

typedef struct {
    json_t *ev; /* the parsed line */
    double at;  /* when it was read (CLOCK_MONOTONIC) */
} line;

typedef struct {
    pid_t pid;
    int fd; /* its stdout; -1 at EOF */
    char buf[1 << 16];
    size_t len;
    line *lines;
    size_t n;    /* lines read */
    size_t next; /* the next line next_event returns */
} proc;

/* Starts `$TRAINYARD_BIN worker --job-dir job_dir` with env (NULL-
 * terminated "NAME=value"; "NAME" alone unsets) on top of ours, as the
 * runner does. usr1_pending: SIGUSR1 is raised, blocked, before exec, so
 * it is pending when the worker starts (a preemption that arrives while
 * it is loading, made certain). */
static void proc_start(proc *p, const char *job_dir, const char *const *env,
                       int usr1_pending)
{
    const char *bin = getenv("TRAINYARD_BIN");
    assert_non_null(bin);
    memset(p, 0, sizeof *p);
    p->lines = calloc(MAX_LINES, sizeof *p->lines);
    assert_non_null(p->lines);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    char log[PATH_MAX];
    job_file(job_dir, "worker.log", log);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDONLY);
        int logfd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        dup2(devnull, 0);
        dup2(fds[1], 1);
        dup2(logfd, 2);
        close(fds[0]);
        close(fds[1]);
        setenv("OPENBLAS_NUM_THREADS", "1", 1);
        for (int i = 0; env && env[i]; i++) {
            const char *eq = strchr(env[i], '=');
            if (!eq) {
                unsetenv(env[i]);
                continue;
            }
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)(eq - env[i]), env[i]);
            setenv(name, eq + 1, 1);
        }
        sigset_t set;
        sigemptyset(&set);
        if (usr1_pending) {
            sigaddset(&set, SIGUSR1);
            sigprocmask(SIG_BLOCK, &set, NULL);
            raise(SIGUSR1);
        } else {
            sigprocmask(SIG_SETMASK, &set, NULL);
        }
        execl(bin, "trainyard", "worker", "--job-dir", job_dir, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    p->pid = pid;
    p->fd = fds[0];
}

/* Reads what is there (waiting up to timeout_s for something); returns 0
 * at EOF. Each whole line must be a JSON object with an "event". */
static int proc_read(proc *p, double timeout_s)
{
    if (p->fd < 0)
        return 0;
    struct pollfd pfd = {.fd = p->fd, .events = POLLIN};
    int rc = poll(&pfd, 1, (int)(timeout_s * 1000));
    if (rc < 0 && errno == EINTR)
        return 1;
    assert_true(rc >= 0);
    if (rc == 0)
        return 1;
    ssize_t got = read(p->fd, p->buf + p->len, sizeof p->buf - p->len);
    if (got <= 0) {
        close(p->fd);
        p->fd = -1;
        return 0;
    }
    double at = now_seconds();
    p->len += (size_t)got;
    char *start = p->buf, *nl;
    while ((nl = memchr(start, '\n', p->len - (size_t)(start - p->buf)))) {
        *nl = '\0';
        json_error_t jerr;
        json_t *ev = json_loads(start, 0, &jerr);
        if (!ev || !json_is_string(json_object_get(ev, "event")))
            fail_msg("not a whole event line: '%s'", start);
        assert_true(p->n < MAX_LINES);
        p->lines[p->n++] = (line){.ev = ev, .at = at};
        start = nl + 1;
    }
    p->len -= (size_t)(start - p->buf);
    memmove(p->buf, start, p->len);
    assert_true(p->len < sizeof p->buf); /* no line that long */
    return 1;
}

static const char *kind_of(const json_t *ev)
{
    return json_string_value(json_object_get(ev, "event"));
}

/* The next line that is not a heartbeat, waiting for it; NULL at EOF. */
static const json_t *next_event(proc *p)
{
    double deadline = now_seconds() + LINE_TIMEOUT_S;
    for (;;) {
        while (p->next < p->n) {
            const json_t *ev = p->lines[p->next++].ev;
            if (strcmp(kind_of(ev), "heartbeat") != 0)
                return ev;
        }
        if (!proc_read(p, 1.0))
            return NULL;
        if (now_seconds() > deadline) {
            kill(p->pid, SIGKILL);
            fail_msg("no line from the worker in %.0f s", LINE_TIMEOUT_S);
        }
    }
}

/* The next event of kind `kind`, skipping others; fails at EOF. */
static const json_t *expect_event(proc *p, const char *kind)
{
    const json_t *ev;
    while ((ev = next_event(p)))
        if (!strcmp(kind_of(ev), kind))
            return ev;
    fail_msg("the worker's output ended without a '%s' line", kind);
    return NULL;
}

/* Reads to EOF and waits for the process: its exit status (-1 unless it
 * exited). */
static int proc_finish(proc *p)
{
    double deadline = now_seconds() + LINE_TIMEOUT_S;
    while (proc_read(p, 1.0))
        if (now_seconds() > deadline) {
            kill(p->pid, SIGKILL);
            fail_msg("the worker did not finish in %.0f s", LINE_TIMEOUT_S);
        }
    int ws = 0;
    assert_int_equal(waitpid(p->pid, &ws, 0), p->pid);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

static size_t count_events(const proc *p, const char *kind)
{
    size_t c = 0;
    for (size_t i = 0; i < p->n; i++)
        c += !strcmp(kind_of(p->lines[i].ev), kind);
    return c;
}

static void proc_free(proc *p)
{
    for (size_t i = 0; i < p->n; i++)
        json_decref(p->lines[i].ev);
    free(p->lines);
    if (p->fd >= 0)
        close(p->fd);
}

/* The first line is "started", with this pid and environment. */
static void assert_started(const proc *p, const char *cvd, const char *dev)
{
    assert_true(p->n >= 1);
    const json_t *ev = p->lines[0].ev;
    assert_string_equal(kind_of(ev), "started");
    assert_int_equal(json_integer_value(json_object_get(ev, "pid")), p->pid);
    const json_t *c = json_object_get(ev, "cuda_visible_devices");
    const json_t *d = json_object_get(ev, "trainyard_device");
    if (cvd)
        assert_string_equal(json_string_value(c), cvd);
    else
        assert_true(json_is_null(c));
    if (dev)
        assert_string_equal(json_string_value(d), dev);
    else
        assert_true(json_is_null(d));
    const json_t *caps = json_object_get(ev, "capabilities");
    assert_int_equal(json_array_size(caps), 2);
    assert_string_equal(json_string_value(json_array_get(caps, 0)),
                        "heartbeat");
    assert_string_equal(json_string_value(json_array_get(caps, 1)), "preempt");
    /* The CPU kernels it runs: OpenBLAS, a known instruction set, a rate. */
    const json_t *k = json_object_get(ev, "cpu_kernels");
    assert_true(json_is_object(k));
    assert_string_equal(json_string_value(json_object_get(k, "provider")),
                        "openblas");
    assert_non_null(json_string_value(json_object_get(k, "core")));
    const char *isa = json_string_value(json_object_get(k, "isa"));
    assert_non_null(isa);
    assert_true(!strcmp(isa, "generic") || !strcmp(isa, "avx") ||
                !strcmp(isa, "avx2") || !strcmp(isa, "avx512"));
    assert_true(json_integer_value(json_object_get(k, "gemm_gflops")) > 0);
}

static const char *small_spec =
    "{\"layers\":[{\"type\":\"dense\",\"units\":32},{\"type\":\"relu\"},"
    "{\"type\":\"dropout\",\"rate\":0.1},{\"type\":\"dense\",\"units\":2}]}";

/* A folder with a small dataset (n examples of 8 features). */
static void small_setup(char dir[PATH_MAX], char ds[PATH_MAX], uint32_t n)
{
    temp_dir(dir);
    make_dataset(dir, n, 8, ds);
}

/* Runs to preempt or cancel: 2000 examples of 64 features (1800 to train
 * on), 450 steps of 4 an epoch, 8 epochs, each step a fraction of a
 * millisecond: about a second in all, so a signal sent at the first
 * progress line finds steps still to run. */
static const char *preempt_spec =
    "{\"layers\":[{\"type\":\"dense\",\"units\":512},{\"type\":\"relu\"},"
    "{\"type\":\"dropout\",\"rate\":0.1},{\"type\":\"dense\",\"units\":512},"
    "{\"type\":\"relu\"},{\"type\":\"dense\",\"units\":2}]}";
static const char *preempt_hp =
    "{\"epochs\":8,\"batch_size\":4,\"seed\":17,\"optimizer\":\"adam\"}";
#define PREEMPT_STEPS 3600

static void preempt_setup(char dir[PATH_MAX], char ds[PATH_MAX])
{
    temp_dir(dir);
    make_dataset(dir, 2000, 64, ds);
    write_job(dir, ds, preempt_spec, preempt_hp);
}

/* ---- the tests ---- */

/* "started" first, with the environment; every epoch record says the sim
 * device; "done", exit 0, the model written. Then without
 * CUDA_VISIBLE_DEVICES on "cpu"; then a malformed sim device fails. */
static void test_started_line_and_sim_device(void **state)
{
    char dir[PATH_MAX], ds[PATH_MAX], model[PATH_MAX];
    small_setup(dir, ds, 200);
    write_job(dir, ds, small_spec,
              "{\"epochs\":2,\"batch_size\":32,\"seed\":3}");
    job_file(dir, "model.safetensors", model);
    const char *uuid = "MIG-5c3d1a2b-0000-4e5f-8a9b-0123456789ab";
    char dev[128], cvd[128];
    snprintf(dev, sizeof dev, "TRAINYARD_DEVICE=sim:%s", uuid);
    snprintf(cvd, sizeof cvd, "CUDA_VISIBLE_DEVICES=%s", uuid);
    const char *env[] = {dev, cvd, "TRAINYARD_HEARTBEAT_MS=100", NULL};
    proc p;
    proc_start(&p, dir, env, 0);
    assert_int_equal(proc_finish(&p), 0);
    assert_started(&p, uuid, dev + strlen("TRAINYARD_DEVICE="));
    assert_int_equal(count_events(&p, "started"), 1);
    assert_int_equal(count_events(&p, "epoch"), 2);
    for (size_t i = 0; i < p.n; i++)
        if (!strcmp(kind_of(p.lines[i].ev), "epoch"))
            assert_string_equal(
                json_string_value(json_object_get(p.lines[i].ev, "device")),
                dev + strlen("TRAINYARD_DEVICE="));
    assert_int_equal(count_events(&p, "done"), 1);
    assert_int_equal(count_events(&p, "preempted"), 0);
    assert_true(fs_exists(model));
    proc_free(&p);

    /* On the CPU, nothing visible. */
    unlink(model);
    char ckpt[PATH_MAX];
    job_file(dir, "checkpoint.safetensors", ckpt);
    unlink(ckpt);
    const char *env2[] = {"TRAINYARD_DEVICE=cpu", "CUDA_VISIBLE_DEVICES", NULL};
    proc_start(&p, dir, env2, 0);
    assert_int_equal(proc_finish(&p), 0);
    assert_started(&p, NULL, "cpu");
    const json_t *ep = NULL;
    for (size_t i = 0; i < p.n && !ep; i++)
        if (!strcmp(kind_of(p.lines[i].ev), "epoch"))
            ep = p.lines[i].ev;
    assert_non_null(ep);
    assert_string_equal(json_string_value(json_object_get(ep, "device")),
                        "cpu");
    proc_free(&p);

    /* A sim device without a uuid: started, then an error naming it. */
    unlink(model);
    unlink(ckpt);
    const char *env3[] = {"TRAINYARD_DEVICE=sim:", NULL};
    proc_start(&p, dir, env3, 0);
    assert_int_equal(proc_finish(&p), 2);
    assert_started(&p, NULL, "sim:");
    p.next = 0;
    const json_t *err = expect_event(&p, "error");
    assert_non_null(strstr(json_string_value(json_object_get(err, "message")),
                           "TRAINYARD_DEVICE"));
    assert_false(fs_exists(model));
    proc_free(&p);
    fs_remove_tree(dir, NULL);
}

/* Heartbeats every 50 ms through a run with a long step (a wide network,
 * one big batch: the step takes many intervals): every stretch between
 * two other lines that lasts 10 intervals has heartbeats in it, and over
 * the run they come no faster than the interval allows. */
static void test_heartbeats_during_long_steps(void **state)
{
    const double interval = 0.05;
    char dir[PATH_MAX], ds[PATH_MAX];
    temp_dir(dir);
    make_dataset(dir, 4096, 1024, ds);
    /* One step of 3686 examples through 6 M weights: about 130 GFLOP,
     * a second or more on one core. */
    write_job(dir, ds,
              "{\"layers\":[{\"type\":\"dense\",\"units\":2048},"
              "{\"type\":\"relu\"},{\"type\":\"dense\",\"units\":2048},"
              "{\"type\":\"relu\"},{\"type\":\"dense\",\"units\":2}]}",
              "{\"epochs\":1,\"batch_size\":4096,\"seed\":5}");
    const char *env[] = {"TRAINYARD_DEVICE=cpu", "TRAINYARD_HEARTBEAT_MS=50",
                         NULL};
    proc p;
    proc_start(&p, dir, env, 0);
    assert_int_equal(proc_finish(&p), 0);
    assert_started(&p, NULL, "cpu");
    size_t beats = count_events(&p, "heartbeat");
    double run_s = p.lines[p.n - 1].at - p.lines[0].at;
    /* No faster than the interval (each waits a whole one after the
     * last); not the 2 s default either. */
    assert_true(beats <= (size_t)(run_s / interval) + 2);
    assert_true(beats >= 4);
    /* Every long stretch without other lines (a step, saving) had
     * heartbeats; and there was such a stretch (else this proves
     * nothing). */
    double prev = p.lines[0].at, longest = 0;
    size_t in_stretch = 0;
    for (size_t i = 1; i < p.n; i++) {
        if (!strcmp(kind_of(p.lines[i].ev), "heartbeat")) {
            in_stretch++;
            continue;
        }
        double gap = p.lines[i].at - prev;
        if (gap > 10 * interval) {
            if (in_stretch == 0)
                fail_msg("%.2f s without a heartbeat before a '%s' line", gap,
                         kind_of(p.lines[i].ev));
        }
        if (gap > longest)
            longest = gap;
        prev = p.lines[i].at;
        in_stretch = 0;
    }
    if (longest <= 10 * interval)
        fail_msg("no step took long enough (%.2f s) to test heartbeats",
                 longest);
    proc_free(&p);
    fs_remove_tree(dir, NULL);
}

/* The run never stopped, into dir's model.safetensors. */
static void uninterrupted(const char *ds, char dir[PATH_MAX])
{
    temp_dir(dir);
    write_job(dir, ds, preempt_spec, preempt_hp);
    const char *env[] = {"TRAINYARD_DEVICE=cpu", NULL};
    proc p;
    proc_start(&p, dir, env, 0);
    assert_int_equal(proc_finish(&p), 0);
    assert_int_equal(count_events(&p, "done"), 1);
    proc_free(&p);
}

/* SIGUSR1 after the first progress line: a "preempted" line with the
 * position and a checkpoint, exit 4, no model. A worker preempted while
 * loading leaves that checkpoint alone (exit 4). The next run resumes
 * from it ("resume" at that step), finishes, and its model is the
 * uninterrupted run's, byte for byte. */
static void test_preempt_checkpoints_and_resumes(void **state)
{
    char dir[PATH_MAX], ds[PATH_MAX], ref[PATH_MAX];
    char ckpt[PATH_MAX], model[PATH_MAX], ref_model[PATH_MAX];
    preempt_setup(dir, ds);
    job_file(dir, "checkpoint.safetensors", ckpt);
    job_file(dir, "model.safetensors", model);
    const char *env[] = {"TRAINYARD_DEVICE=sim:GPU-0f0f0f0f-1111",
                         "CUDA_VISIBLE_DEVICES=GPU-0f0f0f0f-1111",
                         "TRAINYARD_HEARTBEAT_MS=100", NULL};
    proc p;
    proc_start(&p, dir, env, 0);
    const json_t *ev = next_event(&p);
    assert_non_null(ev);
    assert_string_equal(kind_of(ev), "started");
    expect_event(&p, "progress");
    assert_int_equal(kill(p.pid, SIGUSR1), 0);
    ev = expect_event(&p, "preempted");
    json_int_t step = json_integer_value(json_object_get(ev, "step"));
    assert_true(step >= 1 && step < PREEMPT_STEPS);
    assert_true(json_is_true(json_object_get(ev, "checkpoint")));
    assert_int_equal(json_integer_value(json_object_get(ev, "epoch")),
                     step / 450);
    assert_int_equal(proc_finish(&p), 4);
    assert_int_equal(count_events(&p, "done"), 0);
    assert_int_equal(count_events(&p, "error"), 0);
    assert_true(fs_exists(ckpt));
    assert_false(fs_exists(model));
    proc_free(&p);

    /* Preempted again while loading: nothing written, the checkpoint kept. */
    char *before = NULL, *after = NULL;
    size_t nb = 0, na = 0;
    assert_int_equal(fs_read_all(ckpt, 1 << 26, &before, &nb, NULL), TY_OK);
    proc_start(&p, dir, env, 1);
    assert_int_equal(proc_finish(&p), 4);
    assert_started(&p, "GPU-0f0f0f0f-1111", "sim:GPU-0f0f0f0f-1111");
    p.next = 0;
    ev = expect_event(&p, "preempted");
    assert_true(json_is_null(json_object_get(ev, "step")));
    assert_true(json_is_true(json_object_get(ev, "checkpoint")));
    assert_int_equal(count_events(&p, "progress"), 0);
    assert_int_equal(count_events(&p, "resume"), 0);
    assert_int_equal(fs_read_all(ckpt, 1 << 26, &after, &na, NULL), TY_OK);
    assert_int_equal(na, nb);
    assert_memory_equal(before, after, nb);
    free(before);
    free(after);
    proc_free(&p);

    /* Resumed where it stopped, to the end. */
    proc_start(&p, dir, env, 0);
    ev = expect_event(&p, "resume");
    assert_int_equal(json_integer_value(json_object_get(ev, "step")), step);
    assert_int_equal(proc_finish(&p), 0);
    assert_int_equal(count_events(&p, "done"), 1);
    assert_int_equal(count_events(&p, "preempted"), 0);
    assert_true(fs_exists(model));
    proc_free(&p);

    uninterrupted(ds, ref);
    job_file(ref, "model.safetensors", ref_model);
    char *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    assert_int_equal(fs_read_all(model, 1 << 26, &a, &la, NULL), TY_OK);
    assert_int_equal(fs_read_all(ref_model, 1 << 26, &b, &lb, NULL), TY_OK);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    free(a);
    free(b);
    fs_remove_tree(ref, NULL);
    fs_remove_tree(dir, NULL);
}

/* SIGUSR1 pending from the start (a preemption while the job loads):
 * "started" first, then "preempted" with no position and no checkpoint,
 * exit 4, nothing written; the job simply starts over next time. */
static void test_preempt_before_training(void **state)
{
    char dir[PATH_MAX], ds[PATH_MAX], ckpt[PATH_MAX], model[PATH_MAX];
    small_setup(dir, ds, 200);
    write_job(dir, ds, small_spec, "{\"epochs\":1,\"seed\":2}");
    job_file(dir, "checkpoint.safetensors", ckpt);
    job_file(dir, "model.safetensors", model);
    const char *env[] = {"TRAINYARD_DEVICE=cpu", NULL};
    proc p;
    proc_start(&p, dir, env, 1);
    assert_int_equal(proc_finish(&p), 4);
    assert_started(&p, NULL, "cpu");
    p.next = 1;
    const json_t *ev = next_event(&p);
    assert_non_null(ev);
    assert_string_equal(kind_of(ev), "preempted");
    assert_true(json_is_null(json_object_get(ev, "epoch")));
    assert_true(json_is_false(json_object_get(ev, "checkpoint")));
    assert_null(next_event(&p));
    assert_false(fs_exists(ckpt));
    assert_false(fs_exists(model));
    proc_free(&p);
    fs_remove_tree(dir, NULL);
}

/* SIGTERM keeps its meaning: cancelled, exit 3, no model, no
 * "preempted". */
static void test_sigterm_still_cancels(void **state)
{
    char dir[PATH_MAX], ds[PATH_MAX], model[PATH_MAX];
    preempt_setup(dir, ds);
    job_file(dir, "model.safetensors", model);
    const char *env[] = {"TRAINYARD_DEVICE=cpu", NULL};
    proc p;
    proc_start(&p, dir, env, 0);
    expect_event(&p, "progress");
    assert_int_equal(kill(p.pid, SIGTERM), 0);
    assert_int_equal(proc_finish(&p), 3);
    assert_int_equal(count_events(&p, "preempted"), 0);
    assert_int_equal(count_events(&p, "done"), 0);
    assert_false(fs_exists(model));
    proc_free(&p);
    fs_remove_tree(dir, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_started_line_and_sim_device),
        cmocka_unit_test(test_heartbeats_during_long_steps),
        cmocka_unit_test(test_preempt_checkpoints_and_resumes),
        cmocka_unit_test(test_preempt_before_training),
        cmocka_unit_test(test_sigterm_still_cancels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
