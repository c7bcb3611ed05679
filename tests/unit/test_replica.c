/* test_replica.c - `trainyard replica` run as the supervisor runs it
 * (node/replica.h): a job folder with replica.json, stdout a pipe, stderr
 * in worker.log, TRAINYARD_DEVICE and a short heartbeat in the
 * environment; the binary is $TRAINYARD_BIN (tests/CMakeLists.txt).
 * Checks: the started line first, then "ready" with the model's sizes and
 * the device, every line whole JSON (heartbeats from another thread); a
 * call's outputs are nn_net_predict's of the same file bit for bit, a
 * request bigger than max_batch_size too (in chunks); eight connections at
 * once are batched and each gets its own outputs; wrong cols is
 * RFRAME_ESHAPE (TY_EINVAL) and the connection goes on; a bad magic closes
 * only its connection; SIGUSR1 is ignored; SIGTERM with a request queued
 * still answers it, exits 0 and removes the socket; a missing model, a bad
 * replica.json or a missing one is an "error" line and exit 2; no
 * --job-dir is exit 64 with nothing on stdout. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/sockios.h>

#include "node/replica.h"
#include "node/rframe.h"
#include "models/cpu/kernels.h"
#include "models/nn_internal.h"
#include "models/safetensors.h"
#include "testutil.h"

#define FEATURES 4
#define OUTPUTS 3
#define HIDDEN 5
#define LINE_TIMEOUT_S 120.0
#define SIM_DEVICE "sim:GPU-replica-test"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void path_in(char out[PATH_MAX], const char *name)
{
    snprintf(out, PATH_MAX, "%s/%s", tu_tmpdir, name);
}

/* ---- the model: [4] -> dense 5 -> relu -> dense 3, softmax outputs ---- */

static void write_model(const char *path)
{
    json_t *spec = json_loads("{\"layers\":[{\"type\":\"dense\",\"units\":5},"
                              "{\"type\":\"relu\"},"
                              "{\"type\":\"dense\",\"units\":3}]}",
                              0, NULL);
    nn_shape in = {.ndim = 1, .d = {FEATURES}};
    nn_preproc pp = {.kind = NN_PRE_NONE, .features = FEATURES};
    json_t *classes = json_pack("[s, s, s]", "a", "b", "c");
    json_t *meta = nn_model_metadata(spec, TY_TASK_CLASSIFICATION, &in, OUTPUTS,
                                     classes, &pp);
    assert_non_null(meta);
    float w0[HIDDEN * FEATURES], b0[HIDDEN], w2[OUTPUTS * HIDDEN], b2[OUTPUTS];
    tu_fill_uniform(w0, TY_ARRAY_LEN(w0), 7, 0, 1.0f);
    tu_fill_uniform(b0, TY_ARRAY_LEN(b0), 7, 1, 0.5f);
    tu_fill_uniform(w2, TY_ARRAY_LEN(w2), 7, 2, 1.0f);
    tu_fill_uniform(b2, TY_ARRAY_LEN(b2), 7, 3, 0.5f);
    st_out_tensor t[] = {
        {.name = "0.weight",
         .dtype = ST_F32,
         .ndim = 2,
         .shape = {HIDDEN, FEATURES},
         .data = w0},
        {.name = "0.bias",
         .dtype = ST_F32,
         .ndim = 1,
         .shape = {HIDDEN},
         .data = b0},
        {.name = "2.weight",
         .dtype = ST_F32,
         .ndim = 2,
         .shape = {OUTPUTS, HIDDEN},
         .data = w2},
        {.name = "2.bias",
         .dtype = ST_F32,
         .ndim = 1,
         .shape = {OUTPUTS},
         .data = b2},
    };
    ty_err err = {0};
    assert_int_equal(st_write(path, meta, t, TY_ARRAY_LEN(t), &err), TY_OK);
    json_decref(meta);
    json_decref(classes);
    json_decref(spec);
}

/* What the engine in this process predicts for x (rows of FEATURES), run
 * in batches of `batch` rows as the replica runs them. */
static void expected(const char *model_path, const float *x, uint32_t rows,
                     uint32_t batch, float *out)
{
    nn_net *net = NULL;
    ty_err err = {0};
    assert_int_equal(nn_net_load(model_path, &net, &err), TY_OK);
    nn_workspace *ws = nn_workspace_create(net, batch);
    assert_non_null(ws);
    for (uint32_t i = 0; i < rows; i += batch) {
        uint32_t b = rows - i < batch ? rows - i : batch;
        assert_int_equal(nn_net_predict(net, ws, x + (size_t)i * FEATURES, b,
                                        out + (size_t)i * OUTPUTS, &err),
                         TY_OK);
    }
    nn_workspace_destroy(ws);
    nn_net_destroy(net);
}

/* <tmpdir>/replica.json; batching extra (JSON text) replaces the batching
 * object when given. */
static void write_config(const char *model_path, const char *socket_path,
                         const char *batching)
{
    char path[PATH_MAX];
    path_in(path, RPROTO_FILE);
    json_t *b = json_loads(batching, 0, NULL);
    assert_non_null(b);
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:i, s:o}", RPROTO_REPLICA_ID,
                          "rep_test", RPROTO_DEPLOYMENT_ID, "dep_test",
                          RPROTO_MODEL_PATH, model_path, RPROTO_SOCKET_PATH,
                          socket_path, RPROTO_THREADS, 1, RPROTO_BATCHING, b);
    assert_non_null(j);
    assert_int_equal(json_dump_file(j, path, 0), 0);
    json_decref(j);
}

/* ---- the process and its lines ---- */

typedef struct {
    pid_t pid;
    int fd; /* its stdout; -1 at EOF */
    char buf[1 << 16];
    size_t len;
    json_t *lines[4096]; /* every line but heartbeats, in order */
    size_t n, next;
    size_t heartbeats;
} proc;

/* The environment the supervisor gives a replica, on top of ours. */
static const char *const replica_env[] = {"OPENBLAS_NUM_THREADS=1",
                                          "TRAINYARD_DEVICE=" SIM_DEVICE,
                                          "TRAINYARD_HEARTBEAT_MS=10"};

/* Starts `$TRAINYARD_BIN replica [--job-dir <tmpdir>]` with stdin on
 * /dev/null, stdout a pipe to us, stderr appended to worker.log, every
 * signal unblocked and at its default. */
static proc *proc_start(int with_dir)
{
    extern char **environ;
    const char *bin = getenv("TRAINYARD_BIN");
    assert_non_null(bin);
    proc *p = calloc(1, sizeof *p);
    assert_non_null(p);
    const char *env[512];
    size_t ne = 0;
    for (char **e = environ; *e && ne < TY_ARRAY_LEN(env) - 4; e++) {
        int ours = 0;
        for (size_t k = 0; k < TY_ARRAY_LEN(replica_env); k++) {
            size_t n = strchr(replica_env[k], '=') - replica_env[k] + 1;
            ours |= !strncmp(*e, replica_env[k], n);
        }
        if (!ours)
            env[ne++] = *e;
    }
    for (size_t k = 0; k < TY_ARRAY_LEN(replica_env); k++)
        env[ne++] = replica_env[k];
    env[ne] = NULL;
    char log[PATH_MAX];
    path_in(log, "worker.log");
    int fds[2];
    assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_APPEND,
                                     0600);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    posix_spawnattr_setflags(&at,
                             POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    char *argv[] = {"trainyard", RPROTO_COMMAND,
                    with_dir ? WPROTO_ARG_JOB_DIR : NULL, tu_tmpdir, NULL};
    assert_int_equal(posix_spawn(&p->pid, bin, &fa, &at, argv, (char **)env),
                     0);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(fds[1]);
    p->fd = fds[0];
    return p;
}

/* Reads what comes within timeout_s; 0 at EOF. Every line must be a whole
 * JSON object with an "event". */
static int proc_read(proc *p, double timeout_s)
{
    if (p->fd < 0)
        return 0;
    struct pollfd pfd = {.fd = p->fd, .events = POLLIN};
    int rc = poll(&pfd, 1, (int)(timeout_s * 1000));
    if (rc <= 0)
        return 1;
    ssize_t got = read(p->fd, p->buf + p->len, sizeof p->buf - p->len - 1);
    if (got <= 0) {
        close(p->fd);
        p->fd = -1;
        return 0;
    }
    p->len += (size_t)got;
    char *start = p->buf, *nl;
    while ((nl = memchr(start, '\n', p->len - (size_t)(start - p->buf)))) {
        *nl = '\0';
        json_t *ev = json_loads(start, 0, NULL);
        const char *kind = json_string_value(json_object_get(ev, "event"));
        if (!kind)
            fail_msg("not a whole event line: '%s'", start);
        if (!strcmp(kind, "heartbeat")) {
            p->heartbeats++;
            json_decref(ev);
        } else {
            assert_true(p->n < TY_ARRAY_LEN(p->lines));
            p->lines[p->n++] = ev;
        }
        start = nl + 1;
    }
    p->len -= (size_t)(start - p->buf);
    memmove(p->buf, start, p->len);
    return 1;
}

/* The next line that is not a heartbeat (borrowed); NULL at EOF. */
static const json_t *next_line(proc *p)
{
    double deadline = now_s() + LINE_TIMEOUT_S;
    while (p->next >= p->n) {
        if (!proc_read(p, 0.5))
            return NULL;
        if (now_s() > deadline) {
            kill(p->pid, SIGKILL);
            fail_msg("no line from the replica in %.0f s", LINE_TIMEOUT_S);
        }
    }
    return p->lines[p->next++];
}

static const char *kind_of(const json_t *ev)
{
    return json_string_value(json_object_get(ev, "event"));
}

/* Waits for the process to end (reading its lines); its exit status. */
static int proc_wait(proc *p)
{
    double deadline = now_s() + LINE_TIMEOUT_S;
    while (proc_read(p, 0.5))
        if (now_s() > deadline)
            break;
    int st = 0;
    pid_t w;
    while ((w = waitpid(p->pid, &st, WNOHANG)) == 0 && now_s() < deadline)
        usleep(10000);
    if (w == 0) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, &st, 0);
        fail_msg("the replica did not exit");
    }
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

static void proc_free(proc *p)
{
    if (p->fd >= 0)
        close(p->fd);
    for (size_t i = 0; i < p->n; i++)
        json_decref(p->lines[i]);
    free(p);
}

/* Starts the replica and reads up to its ready line, checking it and the
 * started line before it. */
static proc *start_ready(const char *socket_path)
{
    proc *p = proc_start(1);
    const json_t *ev = next_line(p);
    assert_non_null(ev);
    assert_string_equal(kind_of(ev), "started");
    assert_int_equal(json_integer_value(json_object_get(ev, "pid")), p->pid);
    assert_string_equal(
        json_string_value(json_object_get(ev, "trainyard_device")), SIM_DEVICE);
    assert_non_null(json_object_get(ev, "cpu_kernels"));
    ev = next_line(p);
    assert_non_null(ev);
    assert_string_equal(kind_of(ev), "ready");
    assert_string_equal(json_string_value(json_object_get(ev, "socket")),
                        socket_path);
    assert_int_equal(json_integer_value(json_object_get(ev, "features")),
                     FEATURES);
    assert_int_equal(json_integer_value(json_object_get(ev, "outputs")),
                     OUTPUTS);
    assert_string_equal(json_string_value(json_object_get(ev, "device")),
                        SIM_DEVICE);
    assert_true(json_is_number(json_object_get(ev, "load_seconds")));
    assert_int_equal(access(socket_path, F_OK), 0);
    return p;
}

/* SIGTERM, then exit 0 with nothing more said and the socket removed. */
static void stop_clean(proc *p, const char *socket_path)
{
    assert_int_equal(kill(p->pid, SIGTERM), 0);
    assert_int_equal(proc_wait(p), WPROTO_EXIT_OK);
    assert_int_equal(p->next, p->n); /* no error line */
    assert_int_equal(access(socket_path, F_OK), -1);
    assert_int_equal(errno, ENOENT);
}

static void fill_rows(float *x, uint32_t rows, uint64_t seed)
{
    tu_fill_uniform(x, (size_t)rows * FEATURES, seed, 9, 3.0f);
}

/* ---- the tests ---- */

static void test_calls_match_the_engine(void **state)
{
    char model[PATH_MAX], sock[PATH_MAX];
    path_in(model, "model.safetensors");
    path_in(sock, RPROTO_SOCKET);
    write_model(model);
    write_config(model, sock,
                 "{\"max_batch_size\": 8, \"max_queue_delay_us\": 0}");
    proc *p = start_ready(sock);
    assert_int_equal(kill(p->pid, SIGUSR1), 0); /* ignored */

    ty_err err = {0};
    int fd = rframe_connect(sock, &err);
    assert_true(fd >= 0);
    /* 5 rows: one batch. */
    float x[20 * FEATURES], out[20 * OUTPUTS], want[20 * OUTPUTS];
    fill_rows(x, 5, 1);
    rframe_call_info info = {0};
    assert_int_equal(
        rframe_call(fd, 1, x, 5, FEATURES, out, OUTPUTS, &info, &err), TY_OK);
    expected(model, x, 5, 8, want);
    assert_memory_equal(out, want, 5 * OUTPUTS * sizeof(float));
    assert_int_equal(info.batch_rows, 5);
    assert_true(info.compute_ns > 0);

    /* 20 rows, more than max_batch_size: in chunks of 8. */
    fill_rows(x, 20, 2);
    assert_int_equal(
        rframe_call(fd, 2, x, 20, FEATURES, out, OUTPUTS, &info, &err), TY_OK);
    expected(model, x, 20, 8, want);
    assert_memory_equal(out, want, sizeof want);
    assert_int_equal(info.batch_rows, 8);

    /* Wrong cols: RFRAME_ESHAPE, the payload read past, the connection
     * still good. */
    assert_int_equal(
        rframe_call(fd, 3, x, 2, FEATURES + 1, out, OUTPUTS, &info, &err),
        TY_EINVAL);
    assert_non_null(strstr(err.msg, "4 input values"));
    assert_int_equal(
        rframe_call(fd, 4, x, 1, FEATURES, out, OUTPUTS, &info, &err), TY_OK);
    /* Row 0 alone, as the engine computes one row (a GEMV, whose last bit
     * may differ from the same row inside a GEMM on some CPUs). */
    expected(model, x, 1, 8, want);
    assert_memory_equal(out, want, OUTPUTS * sizeof(float));

    /* A bad magic closes that connection only. */
    int bad = rframe_connect(sock, &err);
    assert_true(bad >= 0);
    unsigned char junk[RFRAME_REQ_HDR_BYTES] = "not a frame, no";
    assert_int_equal(write(bad, junk, sizeof junk), (ssize_t)sizeof junk);
    char c;
    assert_int_equal(read(bad, &c, 1), 0);
    close(bad);
    assert_int_equal(
        rframe_call(fd, 5, x, 1, FEATURES, out, OUTPUTS, &info, &err), TY_OK);
    close(fd);
    stop_clean(p, sock);
    proc_free(p);
}

/* ---- eight clients at once ---- */

#define CLIENTS 8

typedef struct {
    int fd;
    uint32_t seq;
    pthread_barrier_t *go;
    float x[FEATURES], out[OUTPUTS];
    rframe_call_info info;
    ty_status s;
    ty_err err;
} client;

static void *client_main(void *arg)
{
    client *c = arg;
    pthread_barrier_wait(c->go);
    c->s = rframe_call(c->fd, c->seq, c->x, 1, FEATURES, c->out, OUTPUTS,
                       &c->info, &c->err);
    return NULL;
}

static void test_concurrent_calls_are_batched(void **state)
{
    char model[PATH_MAX], sock[PATH_MAX];
    path_in(model, "model.safetensors");
    path_in(sock, RPROTO_SOCKET);
    write_model(model);
    /* A batch runs when 8 rows wait, or after a second: the eight calls
     * below fill one unless one of them is a second late. */
    write_config(model, sock,
                 "{\"max_batch_size\": 8, \"max_queue_delay_us\": 1000000, "
                 "\"preferred_batch_sizes\": [8]}");
    proc *p = start_ready(sock);
    client cs[CLIENTS];
    pthread_t th[CLIENTS];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, CLIENTS);
    ty_err err = {0};
    for (int i = 0; i < CLIENTS; i++) {
        memset(&cs[i], 0, sizeof cs[i]);
        cs[i].fd = rframe_connect(sock, &err);
        assert_true(cs[i].fd >= 0);
        cs[i].seq = 100 + (uint32_t)i;
        cs[i].go = &go;
        fill_rows(cs[i].x, 1, 10 + (uint64_t)i);
    }
    for (int i = 0; i < CLIENTS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, client_main, &cs[i]), 0);
    for (int i = 0; i < CLIENTS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);
    uint32_t most = 0;
    for (int i = 0; i < CLIENTS; i++) {
        if (cs[i].s != TY_OK)
            fail_msg("client %d: %s", i, cs[i].err.msg);
        /* Its own row's outputs, whatever batch it ran in (a row's
         * outputs may differ in the last bit with the batch's size). */
        float want[OUTPUTS];
        expected(model, cs[i].x, 1, 1, want);
        for (int k = 0; k < OUTPUTS; k++)
            assert_true(fabsf(cs[i].out[k] - want[k]) <= 1e-6f);
        assert_true(cs[i].info.batch_rows >= 1 &&
                    cs[i].info.batch_rows <= CLIENTS);
        if (cs[i].info.batch_rows > most)
            most = cs[i].info.batch_rows;
        close(cs[i].fd);
    }
    assert_true(most > 1);
    stop_clean(p, sock);
    proc_free(p);
}

/* ---- draining ---- */

static void test_sigterm_answers_the_queued(void **state)
{
    char model[PATH_MAX], sock[PATH_MAX];
    path_in(model, "model.safetensors");
    path_in(sock, RPROTO_SOCKET);
    write_model(model);
    /* One row waits up to a second for more. */
    write_config(model, sock,
                 "{\"max_batch_size\": 8, \"max_queue_delay_us\": 1000000}");
    proc *p = start_ready(sock);
    ty_err err = {0};
    int fd = rframe_connect(sock, &err);
    assert_true(fd >= 0);
    float x[FEATURES], out[OUTPUTS], want[OUTPUTS];
    fill_rows(x, 1, 3);
    unsigned char hb[RFRAME_REQ_HDR_BYTES];
    rframe_req_hdr_encode(
        &(rframe_req_hdr){.seq = 77, .rows = 1, .cols = FEATURES}, hb);
    assert_int_equal(write(fd, hb, sizeof hb), (ssize_t)sizeof hb);
    assert_int_equal(write(fd, x, sizeof x), (ssize_t)sizeof x);
    /* Until the replica has read it all (nothing left unread on our side
     * of the socket): it is then queued. */
    double deadline = now_s() + LINE_TIMEOUT_S;
    int unread = 1;
    while (unread > 0 && now_s() < deadline) {
        assert_int_equal(ioctl(fd, SIOCOUTQ, &unread), 0);
        if (unread > 0)
            usleep(1000);
    }
    assert_int_equal(unread, 0);
    assert_int_equal(kill(p->pid, SIGTERM), 0);
    /* The reply still comes, whole. */
    unsigned char rb[RFRAME_REP_HDR_BYTES];
    assert_int_equal(recv(fd, rb, sizeof rb, MSG_WAITALL), (ssize_t)sizeof rb);
    rframe_rep_hdr h;
    assert_int_equal(rframe_rep_hdr_decode(rb, &h, &err), TY_OK);
    assert_int_equal(h.seq, 77);
    assert_int_equal(h.status, RFRAME_OK);
    assert_int_equal(h.rows, 1);
    assert_int_equal(h.cols, OUTPUTS);
    assert_int_equal(recv(fd, out, sizeof out, MSG_WAITALL),
                     (ssize_t)sizeof out);
    expected(model, x, 1, 8, want);
    assert_memory_equal(out, want, sizeof out);
    assert_int_equal(proc_wait(p), WPROTO_EXIT_OK);
    assert_int_equal(p->next, p->n);
    assert_int_equal(access(sock, F_OK), -1);
    /* The connection ends with the process. */
    char c;
    assert_int_equal(read(fd, &c, 1), 0);
    close(fd);
    proc_free(p);
}

/* ---- failures ---- */

/* The replica says "error" (containing msg_part) after "started" and
 * exits 2; no socket is left. */
static void expect_error_exit(const char *msg_part, const char *sock)
{
    proc *p = proc_start(1);
    const json_t *ev = next_line(p);
    assert_non_null(ev);
    assert_string_equal(kind_of(ev), "started");
    ev = next_line(p);
    assert_non_null(ev);
    assert_string_equal(kind_of(ev), "error");
    const char *msg = json_string_value(json_object_get(ev, "message"));
    assert_non_null(msg);
    if (!strstr(msg, msg_part))
        fail_msg("error '%s' does not say '%s'", msg, msg_part);
    assert_int_equal(proc_wait(p), WPROTO_EXIT_FAILED);
    assert_int_equal(p->next, p->n);
    assert_int_equal(access(sock, F_OK), -1);
    proc_free(p);
}

static void test_missing_model(void **state)
{
    char model[PATH_MAX], sock[PATH_MAX];
    path_in(model, "nothing-here.safetensors");
    path_in(sock, RPROTO_SOCKET);
    write_config(model, sock, "{}");
    expect_error_exit("nothing-here.safetensors", sock);
}

static void test_bad_config(void **state)
{
    char model[PATH_MAX], sock[PATH_MAX], path[PATH_MAX];
    path_in(model, "model.safetensors");
    path_in(sock, RPROTO_SOCKET);
    write_model(model);
    write_config(model, sock, "{\"max_batch_size\": 0}");
    expect_error_exit("batching.max_batch_size", sock);
    write_config(model, sock, "{\"preferred_batch_sizes\": [4, 4]}");
    expect_error_exit("batching.preferred_batch_sizes[1]", sock);
    write_config(model, sock, "{\"max_batch\": 4}");
    expect_error_exit("max_batch", sock);
    /* A socket path longer than a unix socket's. */
    char longsock[200];
    snprintf(longsock, sizeof longsock, "%s/%0120d.sock", tu_tmpdir, 0);
    write_config(model, longsock, "{}");
    expect_error_exit("socket_path", sock);
    /* No replica.json at all. */
    path_in(path, RPROTO_FILE);
    assert_int_equal(unlink(path), 0);
    expect_error_exit(RPROTO_FILE, sock);
}

static void test_usage(void **state)
{
    proc *p = proc_start(0);
    assert_int_equal(proc_wait(p), WPROTO_EXIT_USAGE);
    assert_int_equal(p->n, 0);
    assert_int_equal(p->heartbeats, 0);
    proc_free(p);
}

int main(int argc, char **argv)
{
    /* The GEMM kernels the trainyard binary picks, so that this process's
     * nn_net_predict is the replica's bit for bit. */
    cpu_kernels_select(argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_calls_match_the_engine,
                                        tu_tmpdir_setup, tu_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_calls_are_batched,
                                        tu_tmpdir_setup, tu_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_sigterm_answers_the_queued,
                                        tu_tmpdir_setup, tu_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_missing_model, tu_tmpdir_setup,
                                        tu_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_bad_config, tu_tmpdir_setup,
                                        tu_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_usage, tu_tmpdir_setup,
                                        tu_tmpdir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
