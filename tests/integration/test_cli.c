/*
 * Integration tests for the command-line client: the built binary run as a
 * subprocess (HOME and XDG_CONFIG_HOME in a temp folder) against a real
 * server, checking stdout, stderr, exit codes and what the server holds.
 * Covers login/logout and the config file's mode, every command group,
 * --json parsed with jansson, the exit-code table (job outcomes, 404, 4xx,
 * auth, unreachable, usage), and watch on jobs that succeed, fail and are
 * cancelled.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "harness.h"

static srv server;
static char home[PATH_MAX]; /* HOME and XDG_CONFIG_HOME live here */
static char admin_env_url[128], admin_env_key[160];
static char csv_ds[64]; /* uploaded by the group setup */
static char
    devices[PATH_MAX + 8]; /* the server's --devices (a simulated H200) */

/* ---- running the client ---- */

typedef struct {
    int code;        /* exit status, or -1 when it did not exit */
    char *out, *err; /* stdout and stderr, NUL-terminated */
    pid_t pid;
    char out_path[PATH_MAX], err_path[PATH_MAX];
} run_result;

static char *slurp(const char *path)
{
    char *buf = NULL;
    size_t len = 0;
    if (fs_read_all(path, 64u << 20, &buf, &len, NULL) != TY_OK)
        return strdup("");
    return buf;
}

/* Starts `trainyard args...` with env (NULL-terminated "NAME=VALUE", may
 * be NULL; TRAINYARD_URL/KEY are cleared first) and stdin from in_text
 * (NULL: /dev/null). */
static void run_start(run_result *r, const char *const *env,
                      const char *in_text, const char *const *args)
{
    static int seq;
    memset(r, 0, sizeof *r);
    char in_path[PATH_MAX];
    snprintf(r->out_path, sizeof r->out_path, "%s/run%d.out", home, seq);
    snprintf(r->err_path, sizeof r->err_path, "%s/run%d.err", home, seq);
    snprintf(in_path, sizeof in_path, "%s/run%d.in", home, seq++);
    if (in_text)
        write_file(in_path, in_text, strlen(in_text));
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int in = open(in_text ? in_path : "/dev/null", O_RDONLY);
        int out = open(r->out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int err = open(r->err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(in, 0);
        dup2(out, 1);
        dup2(err, 2);
        char xdg[PATH_MAX + 8];
        snprintf(xdg, sizeof xdg, "%s/xdg", home);
        setenv("HOME", home, 1);
        setenv("XDG_CONFIG_HOME", xdg, 1);
        unsetenv("TRAINYARD_URL");
        unsetenv("TRAINYARD_KEY");
        for (int i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        const char *argv[64] = {getenv("TRAINYARD_BIN")};
        int n = 1;
        for (int i = 0; args[i] && n < 63; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    r->pid = pid;
}

static void run_wait(run_result *r)
{
    int ws = 0;
    waitpid(r->pid, &ws, 0);
    r->code = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
    r->out = slurp(r->out_path);
    r->err = slurp(r->err_path);
}

static void run_free(run_result *r)
{
    free(r->out);
    free(r->err);
}

/* Runs to the end; on an unexpected code shows what it said. */
static void run_env(run_result *r, const char *const *env, const char *in,
                    const char *const *args)
{
    run_start(r, env, in, args);
    run_wait(r);
}

static const char *const *admin_env(void)
{
    static const char *env[3];
    env[0] = admin_env_url;
    env[1] = admin_env_key;
    env[2] = NULL;
    return env;
}

#define RUN(r, ...) \
    run_env((r), admin_env(), NULL, (const char *const[]){__VA_ARGS__, NULL})

/* stderr first, and stdout clipped: CMocka cuts long messages, and a
 * watch's stdout (every event) would hide why it exited. */
static void expect_code(const run_result *r, int code)
{
    if (r->code != code)
        fail_msg("exit %d, wanted %d\nstderr: %.1500s\nstdout (start): %.600s",
                 r->code, code, r->err, r->out);
}

/* Parses stdout as one JSON document. */
static json_t *out_json(const run_result *r)
{
    json_error_t e;
    json_t *j = json_loads(r->out, 0, &e);
    if (!j)
        fail_msg("stdout is not JSON (%s): %s", e.text, r->out);
    return j;
}

/* ---- setup ---- */

static int group_setup(void **state)
{
    temp_dir(home);
    const char *src = __FILE__;
    const char *cut = strstr(src, "tests/integration/test_cli.c");
    if (!cut)
        return -1;
    snprintf(devices, sizeof devices, "sim:%.*sgpu/sim/h200-7x1g.json",
             (int)(cut - src), src);
    const char *flags[] = {"--devices", devices, NULL};
    if (srv_start(&server, NULL, flags) != 0)
        return -1;
    snprintf(admin_env_url, sizeof admin_env_url, "TRAINYARD_URL=%s",
             server.base);
    snprintf(admin_env_key, sizeof admin_env_key, "TRAINYARD_KEY=%s",
             server.key);
    char path[PATH_MAX + 16], part[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/blobs.csv", home);
    make_blobs_csv(path, 150, 11);
    snprintf(part, sizeof part, "file=@%s", path);
    const char *parts[] = {"name=blobs", "format=csv", "label_column=species",
                           part, NULL};
    resp *r = http_upload(&server, "/v1/datasets", parts);
    int ok = r->status == 201 && r->json;
    if (ok)
        snprintf(csv_ds, sizeof csv_ds, "%s", str(r->json, "id"));
    resp_free(r);
    if (!ok)
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    srv_stop(&server, SIGTERM);
    srv_cleanup(&server);
    if (!getenv("TY_KEEP_TEST_DATA"))
        fs_remove_tree(home, NULL);
    return 0;
}

static char *home_file(const char *name)
{
    static char p[8][PATH_MAX];
    static int next;
    char *out = p[next++ % 8];
    snprintf(out, PATH_MAX, "%s/%s", home, name);
    return out;
}

/* A port nothing listens on: bound, then closed. */
static int closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* Submits a job over HTTP; returns its id in id. */
static void submit_http(const char *body, char id[64])
{
    resp *r = http_json(&server, "POST", "/v1/jobs", body);
    if (r->status != 202)
        fail_msg("submit: %ld %s", r->status, r->body);
    snprintf(id, 64, "%s", str(r->json, "id"));
    resp_free(r);
}

/* A job that trains until stopped; attempts 1: a lost worker fails it. */
static void long_job_body(char *b, size_t n, int attempts)
{
    snprintf(b, n,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"dense\", \"units\": 256},"
             " {\"type\": \"relu\"}, {\"type\": \"dense\", \"units\": 3}]},"
             " \"hyperparameters\": {\"epochs\": 100000, \"batch_size\": 4,"
             " \"max_attempts\": %d}}",
             csv_ds, attempts);
}

static int is_running(const json_t *job)
{
    const char *st = str(job, "status");
    return st && !strcmp(st, "running") &&
           json_integer_value(
               json_object_get(json_object_get(job, "progress"), "step")) > 0;
}

/* ---- tests ---- */

static void test_usage_errors(void **state)
{
    run_result r;
    RUN(&r, "help");
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, "Exit codes"));
    assert_non_null(strstr(r.out, "64 usage error"));
    run_free(&r);
    RUN(&r, "jobs", "--help");
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, "trainyard jobs submit"));
    run_free(&r);
    /* Unknown subcommand, unknown option, missing and extra arguments, an
     * option the command does not take, a bad --limit. */
    const char *const *bad[] = {
        (const char *const[]){"jobs", "frob", NULL},
        (const char *const[]){"jobs", "list", "--bogus", NULL},
        (const char *const[]){"jobs", "show", NULL},
        (const char *const[]){"models", "predict", "mdl_x", NULL},
        (const char *const[]){"models", "evaluate", "mdl_x", NULL},
        (const char *const[]){"models", "evaluate", "--dataset", "ds_x", NULL},
        (const char *const[]){"models", "evaluate", "mdl_x", "--dataset", "",
                              NULL},
        (const char *const[]){"models", "predict", "mdl_x", "in.json",
                              "--dataset", "ds_x", NULL},
        (const char *const[]){"datasets", "list", "--watch", NULL},
        (const char *const[]){"datasets", "upload", "x", "file=@/nonexistent",
                              NULL},
        (const char *const[]){"datasets", "list", "--limit", "zero", NULL},
        (const char *const[]){"tenants", "create", NULL},
        (const char *const[]){"jobs", "list", "--url", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        run_env(&r, admin_env(), NULL, bad[i]);
        expect_code(&r, 64);
        assert_true(strncmp(r.err, "trainyard: ", 11) == 0);
        run_free(&r);
    }
    /* No server anywhere: a usage error that says how to name one. */
    run_env(&r, NULL, NULL, (const char *const[]){"datasets", "list", NULL});
    expect_code(&r, 64);
    assert_non_null(strstr(r.err, "trainyard login"));
    run_free(&r);
}

static void test_login_logout(void **state)
{
    char cfg[PATH_MAX + 64], dir[PATH_MAX + 16], unreachable[64];
    snprintf(dir, sizeof dir, "%s/xdg/trainyard", home);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    run_result r;

    /* A wrong key on stdin: 5, and nothing saved. */
    run_env(&r, NULL,
            "ty_aaaaaaaaaaaaaaaaaaaa_"
            "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\n",
            (const char *const[]){"login", server.base, NULL});
    expect_code(&r, 5);
    assert_non_null(strstr(r.err, "refused the key"));
    assert_false(fs_exists(cfg));
    run_free(&r);

    /* Nothing listening: 7, saying what failed. */
    snprintf(unreachable, sizeof unreachable, "http://127.0.0.1:%d",
             closed_port());
    char keyfile[PATH_MAX + 16];
    snprintf(keyfile, sizeof keyfile, "%s/admin.key", server.data);
    run_env(&r, NULL, NULL,
            (const char *const[]){"login", unreachable, "--key-file", keyfile,
                                  NULL});
    expect_code(&r, 7);
    assert_non_null(strstr(r.err, "cannot reach"));
    assert_non_null(strstr(r.err, "connection failed"));
    assert_false(fs_exists(cfg));
    run_free(&r);

    /* TLS to a port that speaks plain HTTP: 7, naming TLS; a CA file that
     * does not exist is a usage error. */
    char https[96];
    snprintf(https, sizeof https, "https://127.0.0.1:%d", server.port);
    run_env(&r, NULL, NULL,
            (const char *const[]){"login", https, "--key-file", keyfile, NULL});
    expect_code(&r, 7);
    assert_non_null(strstr(r.err, "TLS"));
    run_free(&r);
    run_env(&r, NULL, NULL,
            (const char *const[]){"login", https, "--key-file", keyfile,
                                  "--cacert", "/nonexistent/ca.pem", NULL});
    expect_code(&r, 64);
    run_free(&r);
    assert_false(fs_exists(cfg));

    /* The right key from a file: saved 0600 in a 0700 folder. */
    run_env(&r, NULL, NULL,
            (const char *const[]){"login", server.base, "--key-file", keyfile,
                                  NULL});
    expect_code(&r, 0);
    run_free(&r);
    struct stat st;
    assert_int_equal(stat(cfg, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    json_t *saved = json_load_file(cfg, 0, NULL);
    assert_non_null(saved);
    assert_string_equal(str(saved, "url"), server.base);
    assert_string_equal(str(saved, "key"), server.key);
    json_decref(saved);

    /* Commands use the saved login... */
    run_env(&r, NULL, NULL, (const char *const[]){"datasets", "list", NULL});
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, csv_ds));
    run_free(&r);
    /* ...the environment overrides it, and a flag overrides both. */
    char env_url[96];
    snprintf(env_url, sizeof env_url, "TRAINYARD_URL=%s", unreachable);
    const char *env[] = {env_url, NULL};
    run_env(&r, env, NULL, (const char *const[]){"datasets", "list", NULL});
    expect_code(&r, 7);
    run_free(&r);
    run_env(
        &r, env, NULL,
        (const char *const[]){"datasets", "list", "--url", server.base, NULL});
    expect_code(&r, 0);
    run_free(&r);
    const char *bad_key[] = {"TRAINYARD_KEY=ty_wrong", NULL};
    run_env(&r, bad_key, NULL, (const char *const[]){"datasets", "list", NULL});
    expect_code(&r, 5);
    assert_non_null(strstr(r.err, "(HTTP 401)"));
    run_free(&r);

    /* A key on stdin (not a terminal) works as well. */
    char line[200];
    snprintf(line, sizeof line, "%s\n", server.key);
    run_env(&r, NULL, line, (const char *const[]){"login", server.base, NULL});
    expect_code(&r, 0);
    run_free(&r);

    run_env(&r, NULL, NULL, (const char *const[]){"logout", NULL});
    expect_code(&r, 0);
    assert_false(fs_exists(cfg));
    run_free(&r);
}

static void test_datasets(void **state)
{
    run_result r;
    char id[64], file[PATH_MAX + 16];
    snprintf(file, sizeof file, "file=@%s", home_file("blobs.csv"));
    RUN(&r, "datasets", "upload", "cli-blobs", "--format", "csv", file,
        "label_column=species");
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, "150 examples"));
    run_free(&r);

    RUN(&r, "--json", "datasets", "list");
    expect_code(&r, 0);
    json_t *page = out_json(&r);
    json_t *items = json_object_get(page, "items");
    assert_true(json_array_size(items) >= 2);
    assert_true(json_object_get(page, "next_cursor") != NULL);
    snprintf(id, sizeof id, "%s", str(json_array_get(items, 0), "id"));
    assert_string_equal(str(json_array_get(items, 0), "name"), "cli-blobs");
    json_decref(page);
    run_free(&r);

    /* Human table: both, with a size. */
    RUN(&r, "datasets", "list");
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, id));
    assert_non_null(strstr(r.out, csv_ds));
    assert_non_null(strstr(r.out, "KiB"));
    run_free(&r);
    /* Paging: one per page still lists both; --limit 1 lists one. */
    RUN(&r, "datasets", "list", "--limit", "1");
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, id));
    assert_null(strstr(r.out, csv_ds));
    run_free(&r);

    RUN(&r, "datasets", "show", id, "--json");
    expect_code(&r, 0);
    json_t *d = out_json(&r);
    assert_string_equal(str(d, "id"), id);
    assert_int_equal(json_integer_value(json_object_get(d, "num_examples")),
                     150);
    json_decref(d);
    run_free(&r);

    /* A 422 names its detail and field; nothing stored. */
    RUN(&r, "datasets", "upload", "bad", "--format", "csv", file,
        "label_column=nope");
    expect_code(&r, 4);
    assert_non_null(strstr(r.err, "trainyard: "));
    assert_non_null(strstr(r.err, "(HTTP 422): "));
    assert_non_null(strstr(r.err, "nope"));
    assert_non_null(strstr(r.err, "field: label_column"));
    run_free(&r);

    RUN(&r, "datasets", "rm", id);
    expect_code(&r, 0);
    run_free(&r);
    char path[128];
    snprintf(path, sizeof path, "/v1/datasets/%s", id);
    resp *h = http_get(&server, path);
    assert_int_equal(h->status, 404);
    resp_free(h);
    RUN(&r, "datasets", "show", id);
    expect_code(&r, 3);
    assert_non_null(strstr(r.err, "(HTTP 404)"));
    run_free(&r);
}

static char model_id[64];

/* Checks predict's table: the header row, then rows "i label [p]" for
 * inputs 0..n-1, each label a class of the blobs data set (probs) or a
 * number, each probability in (0, 1]. */
static void expect_prediction_table(const char *out, int n, int probs)
{
    char *copy = strdup(out), *save = NULL;
    char *line = strtok_r(copy, "\n", &save);
    assert_non_null(line);
    char h1[32] = "", h2[32] = "", h3[32] = "";
    int nh = sscanf(line, "%31s %31s %31s", h1, h2, h3);
    if (nh != (probs ? 3 : 2) || strcmp(h1, "INPUT") ||
        strcmp(h2, "PREDICTION") || (probs && strcmp(h3, "PROBABILITY")))
        fail_msg("bad header row '%s' in:\n%s", line, out);
    int rows = 0;
    while ((line = strtok_r(NULL, "\n", &save)) != NULL) {
        int idx = -1;
        char label[64] = "", extra[64] = "";
        double p = -1;
        int got = sscanf(line, "%d %63s %lf %63s", &idx, label, &p, extra);
        if (got != (probs ? 3 : 2) || idx != rows)
            fail_msg("bad row %d '%s' in:\n%s", rows, line, out);
        if (probs) {
            assert_true(!strcmp(label, "setosa") ||
                        !strcmp(label, "versicolor") ||
                        !strcmp(label, "virginica"));
            assert_true(p > 0 && p <= 1);
        } else {
            char *end;
            strtod(label, &end);
            assert_true(*label && !*end);
        }
        rows++;
    }
    assert_int_equal(rows, n);
    free(copy);
}

static void test_jobs_submit_watch_and_models(void **state)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"dataset\": \"%s\", \"name\": \"cli-short\", \"model\": "
             "{\"layers\": "
             "[{\"type\": \"dense\", \"units\": 8}, {\"type\": \"relu\"}, "
             "{\"type\": \"dense\", \"units\": 3}]}, \"hyperparameters\": "
             "{\"epochs\": 3, \"batch_size\": 16}}",
             csv_ds);
    write_file(home_file("job.json"), body, strlen(body));
    run_result r;
    RUN(&r, "jobs", "submit", home_file("job.json"), "--watch");
    expect_code(&r, 0);
    char job[64] = "";
    const char *p = strstr(r.out, "job_");
    assert_non_null(p);
    snprintf(job, sizeof job, "%.*s",
             (int)strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789_"), p);
    /* The final loss as the server has it. */
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s", job);
    resp *h = http_get(&server, path);
    assert_string_equal(str(h->json, "status"), "succeeded");
    char loss[64];
    snprintf(loss, sizeof loss, "loss %.4f",
             json_real_value(json_object_get(
                 json_object_get(h->json, "metrics"), "train_loss")));
    snprintf(model_id, sizeof model_id, "%s", str(h->json, "model"));
    resp_free(h);
    assert_non_null(strstr(r.out, "succeeded"));
    assert_non_null(strstr(r.out, loss));
    assert_non_null(strstr(r.out, model_id));
    /* Not a terminal: plain epoch lines on stderr. */
    assert_non_null(strstr(r.err, "epoch 3/3"));
    run_free(&r);

    /* Watching a finished job ends at once with its outcome; --json gives
     * one event per line, the last job.finished. */
    RUN(&r, "jobs", "watch", job, "--json");
    expect_code(&r, 0);
    char *last = NULL, *save = NULL;
    int lines = 0;
    for (char *l = strtok_r(r.out, "\n", &save); l;
         l = strtok_r(NULL, "\n", &save)) {
        json_t *ev = json_loads(l, 0, NULL);
        assert_non_null(ev);
        assert_non_null(str(ev, "id"));
        json_decref(ev);
        last = l;
        lines++;
    }
    assert_true(lines >= 2);
    json_t *ev = json_loads(last, 0, NULL);
    assert_string_equal(str(ev, "event"), "job.finished");
    assert_string_equal(
        str(json_object_get(json_object_get(ev, "data"), "job"), "status"),
        "succeeded");
    json_decref(ev);
    run_free(&r);

    /* From stdin, without --watch; list and show. */
    run_env(&r, admin_env(), body,
            (const char *const[]){"jobs", "submit", "-", NULL});
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, "Submitted job_"));
    run_free(&r);
    RUN(&r, "jobs", "list", "--status", "succeeded", "--json");
    expect_code(&r, 0);
    json_t *page = out_json(&r);
    int found = 0;
    size_t i;
    json_t *it;
    json_array_foreach (json_object_get(page, "items"), i, it) {
        found |= !strcmp(str(it, "id"), job);
        assert_string_equal(str(it, "status"), "succeeded");
    }
    assert_true(found);
    json_decref(page);
    run_free(&r);
    RUN(&r, "jobs", "show", job);
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, "cli-short"));
    run_free(&r);

    /* Models: list, show, download (the same bytes as GET /weights). */
    RUN(&r, "models", "list");
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, model_id));
    run_free(&r);
    RUN(&r, "models", "show", model_id, "--json");
    expect_code(&r, 0);
    json_t *m = out_json(&r);
    assert_string_equal(str(m, "job"), job);
    json_decref(m);
    run_free(&r);
    RUN(&r, "models", "download", model_id, "-o", home_file("m.safetensors"));
    expect_code(&r, 0);
    run_free(&r);
    snprintf(path, sizeof path, "/v1/models/%s/weights", model_id);
    h = http_get(&server, path);
    assert_int_equal(h->status, 200);
    char *got = NULL;
    size_t got_len = 0;
    assert_int_equal(fs_read_all(home_file("m.safetensors"), 64u << 20, &got,
                                 &got_len, NULL),
                     TY_OK);
    assert_int_equal(got_len, h->len);
    assert_memory_equal(got, h->body, h->len);
    free(got);
    resp_free(h);

    /* Predict: a header row, then one row per input: its index, a class
     * name, the class's probability; --json as is. */
    const char *in = "{\"inputs\": [[0, 0, 0, 0], [5, 5, 5, 5]]}";
    write_file(home_file("in.json"), in, strlen(in));
    RUN(&r, "models", "predict", model_id, home_file("in.json"));
    expect_code(&r, 0);
    expect_prediction_table(r.out, 2, 1);
    run_free(&r);
    run_env(&r, admin_env(), in,
            (const char *const[]){"models", "predict", model_id, "-", "--json",
                                  NULL});
    expect_code(&r, 0);
    json_t *pred = out_json(&r);
    assert_int_equal(json_array_size(json_object_get(pred, "predictions")), 2);
    assert_true(json_is_string(
        json_array_get(json_object_get(pred, "predictions"), 0)));
    json_decref(pred);
    run_free(&r);

    /* 404 and 422 from jobs. */
    RUN(&r, "jobs", "show", "job_nope");
    expect_code(&r, 3);
    run_free(&r);
    RUN(&r, "jobs", "watch", "job_nope");
    expect_code(&r, 3);
    assert_non_null(strstr(r.err, "(HTTP 404)"));
    run_free(&r);
    const char *bad = "{\"dataset\": \"ds_nope\", \"model\": {\"layers\": "
                      "[{\"type\": \"dense\", \"units\": 3}]}}";
    run_env(&r, admin_env(), bad,
            (const char *const[]){"jobs", "submit", "-", NULL});
    expect_code(&r, 4);
    assert_non_null(strstr(r.err, "(HTTP 422): "));
    assert_non_null(strstr(r.err, "field: dataset"));
    run_free(&r);
}

/* The value of a "key  value" line of cli_print_object's output, in buf;
 * fails the test when there is no such line. */
static const char *line_value(const char *out, const char *key, char *buf,
                              size_t size)
{
    size_t n = strlen(key);
    for (const char *l = out; l && *l;
         l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, key, n) || l[n] != ' ')
            continue;
        const char *v = l + n + strspn(l + n, " ");
        snprintf(buf, size, "%.*s", (int)strcspn(v, "\n"), v);
        return buf;
    }
    fail_msg("no %s line in:\n%s", key, out);
    return NULL;
}

/* evaluate: the server's loss and accuracy as key/value lines, --json as
 * is, the exit codes of a missing model and dataset; and predict's table
 * for a regression model, which has no probability column. */
static void test_models_evaluate(void **state)
{
    assert_true(*model_id); /* trained by test_jobs_submit_watch_and_models */
    char path[160], body[256];
    snprintf(path, sizeof path, "/v1/models/%s/evaluate", model_id);
    snprintf(body, sizeof body, "{\"dataset\": \"%s\"}", csv_ds);
    resp *h = http_json(&server, "POST", path, body);
    expect_status(h, 200);
    double loss = json_number_value(json_object_get(h->json, "loss"));
    double acc = json_number_value(json_object_get(h->json, "accuracy"));
    resp_free(h);

    run_result r;
    RUN(&r, "models", "evaluate", model_id, "--dataset", csv_ds);
    expect_code(&r, 0);
    char v[128];
    assert_string_equal(line_value(r.out, "model", v, sizeof v), model_id);
    assert_string_equal(line_value(r.out, "dataset", v, sizeof v), csv_ds);
    assert_string_equal(line_value(r.out, "num_examples", v, sizeof v), "150");
    /* Shown with 4 decimals (4 significant digits when tiny). */
    double got = strtod(line_value(r.out, "loss", v, sizeof v), NULL);
    assert_true(fabs(got - loss) <= 1e-4 + 1e-3 * fabs(loss));
    got = strtod(line_value(r.out, "accuracy", v, sizeof v), NULL);
    assert_true(fabs(got - acc) <= 1e-4);
    run_free(&r);

    RUN(&r, "--json", "models", "evaluate", model_id, "--dataset", csv_ds);
    expect_code(&r, 0);
    json_t *ev = out_json(&r);
    assert_string_equal(str(ev, "model"), model_id);
    assert_string_equal(str(ev, "dataset"), csv_ds);
    assert_int_equal(json_integer_value(json_object_get(ev, "num_examples")),
                     150);
    assert_true(json_is_number(json_object_get(ev, "loss")));
    json_decref(ev);
    run_free(&r);

    /* No such model: 3; no such dataset: the server's 422 on dataset. */
    RUN(&r, "models", "evaluate", "mdl_nope", "--dataset", csv_ds);
    expect_code(&r, 3);
    assert_non_null(strstr(r.err, "(HTTP 404)"));
    run_free(&r);
    RUN(&r, "models", "evaluate", model_id, "--dataset", "ds_nope");
    expect_code(&r, 4);
    assert_non_null(strstr(r.err, "(HTTP 422): "));
    assert_non_null(strstr(r.err, "field: dataset"));
    run_free(&r);

    /* Regression (4 features, as in.json has): predictions are numbers, no
     * probability column; evaluate's accuracy is null, shown as -. */
    char csv[PATH_MAX + 16], part[PATH_MAX + 32], ds[64], job[64];
    snprintf(csv, sizeof csv, "%s/linear.csv", home);
    FILE *f = fopen(csv, "w");
    assert_non_null(f);
    fprintf(f, "a,b,c,d,y\n");
    for (int i = 0; i < 60; i++)
        fprintf(f, "%d,%d,%d,%d,%d\n", i % 7, i % 5, i % 3, i % 2,
                i % 7 + 2 * (i % 5));
    fclose(f);
    snprintf(part, sizeof part, "file=@%s", csv);
    const char *parts[] = {"name=linear",     "format=csv", "label_column=y",
                           "task=regression", part,         NULL};
    h = http_upload(&server, "/v1/datasets", parts);
    expect_status(h, 201);
    snprintf(ds, sizeof ds, "%s", str(h->json, "id"));
    resp_free(h);
    char jb[512];
    snprintf(
        jb, sizeof jb,
        "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
        "\"dense\", \"units\": 1}]}, \"hyperparameters\": {\"epochs\": 2}}",
        ds);
    submit_http(jb, job);
    json_t *done = wait_job(&server, job, 120);
    assert_non_null(done);
    assert_string_equal(str(done, "status"), "succeeded");
    char reg[64];
    snprintf(reg, sizeof reg, "%s", str(done, "model"));
    json_decref(done);
    RUN(&r, "models", "predict", reg, home_file("in.json"));
    expect_code(&r, 0);
    expect_prediction_table(r.out, 2, 0);
    run_free(&r);
    RUN(&r, "models", "evaluate", reg, "--dataset", ds);
    expect_code(&r, 0);
    assert_string_equal(line_value(r.out, "accuracy", v, sizeof v), "-");
    run_free(&r);
}

static void test_watch_failed_and_cancelled(void **state)
{
    char body[1024], failing[64], cancelled[64];
    long_job_body(body, sizeof body, 1);
    submit_http(body, failing);
    json_decref(wait_job_until(&server, failing, 60, is_running));
    run_result w;
    run_start(&w, admin_env(), NULL,
              (const char *const[]){"jobs", "watch", failing, NULL});
    pid_t worker = find_worker(&server, failing);
    assert_true(worker > 0);
    assert_int_equal(kill(worker, SIGKILL), 0);
    run_wait(&w);
    expect_code(&w, 1);
    assert_non_null(strstr(w.out, "failed"));
    assert_non_null(strstr(w.err, "signal 9"));
    run_free(&w);

    submit_http(body, cancelled);
    json_decref(wait_job_until(&server, cancelled, 60, is_running));
    run_start(&w, admin_env(), NULL,
              (const char *const[]){"jobs", "watch", cancelled, NULL});
    run_result r;
    RUN(&r, "jobs", "cancel", cancelled);
    expect_code(&r, 0);
    run_free(&r);
    run_wait(&w);
    expect_code(&w, 2);
    assert_non_null(strstr(w.out, "cancelled"));
    run_free(&w);
    json_decref(wait_job(&server, cancelled, 30));

    /* Cancelling again is a conflict: 4. */
    RUN(&r, "jobs", "cancel", cancelled);
    expect_code(&r, 4);
    assert_non_null(strstr(r.err, "(HTTP 409)"));
    run_free(&r);
}

/* The line of a table that holds needle, in buf; fails the test when none
 * does. */
static const char *table_line(const char *out, const char *needle, char *buf,
                              size_t size)
{
    const char *at = strstr(out, needle);
    if (!at)
        fail_msg("no line with %s in:\n%s", needle, out);
    const char *start = at;
    while (start > out && start[-1] != '\n')
        start--;
    snprintf(buf, size, "%.*s", (int)strcspn(start, "\n"), start);
    return buf;
}

/* Issue 30, 6: a queued job shows its planned epochs ("0/5", not "0/0"),
 * and the tables say which metrics they show: training values in `jobs
 * list`, validation values in `models list`. */
static void test_list_progress_and_metric_headings(void **state)
{
    assert_true(*model_id); /* trained by test_jobs_submit_watch_and_models */
    char body[1024], running[64], queued[64], line[512], wrong[2048] = "";
    size_t o = 0;
#define WRONG(...)                                                             \
    (o += (size_t)snprintf(wrong + o, o < sizeof wrong ? sizeof wrong - o : 0, \
                           __VA_ARGS__))
    /* On the CPU, --max-jobs 1 (the default): a long job runs, the next one
     * waits. */
    snprintf(body, sizeof body,
             "{\"dataset\": \"%s\", \"resources\": {\"gpu\": \"none\"}, "
             "\"model\": {\"layers\": [{\"type\": \"dense\", \"units\": 3}]}, "
             "\"hyperparameters\": {\"epochs\": 100000, \"batch_size\": 4}}",
             csv_ds);
    submit_http(body, running);
    json_decref(wait_job_until(&server, running, 60, is_running));
    snprintf(body, sizeof body,
             "{\"dataset\": \"%s\", \"name\": \"cli-queued\", "
             "\"resources\": {\"gpu\": \"none\"}, \"model\": "
             "{\"layers\": [{\"type\": \"dense\", \"units\": 3}]}, "
             "\"hyperparameters\": {\"epochs\": 5}}",
             csv_ds);
    submit_http(body, queued);
    json_t *j = get_job(&server, queued);
    assert_string_equal(str(j, "status"), "queued");
    /* The API's progress names the planned epochs too. */
    const json_t *qp = json_object_get(j, "progress");
    if (json_integer_value(json_object_get(qp, "epochs")) != 5) {
        char *t = json_dumps(qp, JSON_COMPACT);
        WRONG("the queued job's progress has no epochs: %s\n", t);
        free(t);
    }
    json_decref(j);

    run_result r;
    RUN(&r, "jobs", "list");
    expect_code(&r, 0);
    const char *head = table_line(r.out, "STATUS", line, sizeof line);
    if (!strstr(head, "TRAIN LOSS") || !strstr(head, "TRAIN METRICS"))
        WRONG("`jobs list` does not say its metrics are training values: "
              "%s\n",
              head);
    table_line(r.out, queued, line, sizeof line);
    if (!strstr(line, " 0/5 "))
        WRONG("the queued job's row does not show 0/5 epochs: %s\n", line);
    run_free(&r);

    /* models list: the model's validation accuracy under VAL METRICS
     * ("acc 0.9926"; a regression's rmse and r2: test_cli_tabular.c). */
    char path[160], acc[32];
    snprintf(path, sizeof path, "/v1/models/%s", model_id);
    resp *h = http_get(&server, path);
    expect_status(h, 200);
    snprintf(acc, sizeof acc, " acc %.4f ",
             json_number_value(json_object_get(
                 json_object_get(h->json, "metrics"), "val_accuracy")));
    resp_free(h);
    RUN(&r, "models", "list");
    expect_code(&r, 0);
    head = table_line(r.out, "PARAMS", line, sizeof line);
    if (!strstr(head, "VAL METRICS") || !strstr(head, "VAL LOSS"))
        WRONG("`models list` does not say its metrics are validation "
              "values: %s\n",
              head);
    table_line(r.out, model_id, line, sizeof line);
    if (!strstr(line, acc))
        WRONG("the model's row does not show its validation accuracy "
              "(%s): %s\n",
              acc, line);
    run_free(&r);

    const char *both[] = {queued, running};
    for (int i = 0; i < 2; i++) {
        RUN(&r, "jobs", "cancel", both[i]);
        expect_code(&r, 0);
        run_free(&r);
        json_decref(wait_job(&server, both[i], 30));
    }
#undef WRONG
    if (o)
        fail_msg("%s", wrong);
}

static void test_devices(void **state)
{
    run_result r;
    RUN(&r, "devices");
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, "H200"));
    int slices = 0;
    for (const char *p = r.out; (p = strstr(p, "1g.18gb")); p++)
        slices++;
    assert_int_equal(slices, 7);
    run_free(&r);
    RUN(&r, "devices", "--json");
    expect_code(&r, 0);
    json_t *d = out_json(&r);
    json_t *g = json_array_get(json_object_get(d, "gpus"), 0);
    assert_int_equal(json_array_size(json_object_get(g, "slices")), 7);
    json_decref(d);
    run_free(&r);
}

static void test_tenants(void **state)
{
    run_result r;
    RUN(&r, "tenants", "create", "cli-team", "--max-running-jobs", "2",
        "--weight", "3", "--serving-rps", "2.5", "--serving-burst", "3",
        "--serving-max-concurrency", "4", "--serving-tokens-per-minute", "6000",
        "--json");
    expect_code(&r, 0);
    json_t *t = out_json(&r);
    char tid[64], tkey[160], key_env[200];
    snprintf(tid, sizeof tid, "%s", str(t, "id"));
    snprintf(tkey, sizeof tkey, "%s",
             str(json_object_get(t, "key"), "api_key"));
    json_t *q = json_object_get(t, "quota");
    assert_int_equal(json_integer_value(json_object_get(q, "max_running_jobs")),
                     2);
    assert_true(json_number_value(
                    json_object_get(q, "serving_requests_per_second")) == 2.5);
    assert_int_equal(json_integer_value(json_object_get(q, "serving_burst")),
                     3);
    assert_int_equal(
        json_integer_value(json_object_get(q, "serving_max_concurrency")), 4);
    assert_int_equal(
        json_integer_value(json_object_get(q, "serving_tokens_per_minute")),
        6000);
    json_decref(t);
    run_free(&r);

    RUN(&r, "tenants", "list");
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, "cli-team"));
    run_free(&r);
    RUN(&r, "tenants", "update", tid, "--max-running-jobs", "none",
        "--serving-tokens-per-minute", "none");
    expect_code(&r, 0);
    run_free(&r);
    char path[128];
    snprintf(path, sizeof path, "/v1/tenants/%s", tid);
    resp *h = http_get(&server, path);
    assert_true(json_is_null(json_object_get(json_object_get(h->json, "quota"),
                                             "max_running_jobs")));
    assert_true(json_is_null(json_object_get(json_object_get(h->json, "quota"),
                                             "serving_tokens_per_minute")));
    /* the other serving limits stay */
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(h->json, "quota"), "serving_burst")),
                     3);
    resp_free(h);

    RUN(&r, "tenants", "key-create", tid);
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, "ty_"));
    run_free(&r);
    RUN(&r, "tenants", "keys", tid, "--json");
    expect_code(&r, 0);
    t = out_json(&r);
    json_t *keys = json_object_get(t, "items");
    assert_int_equal(json_array_size(keys), 2);
    assert_true(strncmp(str(json_array_get(keys, 0), "id"), "key_", 4) == 0);
    json_decref(t);
    run_free(&r);

    /* As the tenant: its own data works, the admin's commands are 5. */
    snprintf(key_env, sizeof key_env, "TRAINYARD_KEY=%s", tkey);
    const char *env[] = {admin_env_url, key_env, NULL};
    run_env(&r, env, NULL, (const char *const[]){"datasets", "list", NULL});
    expect_code(&r, 0);
    run_free(&r);
    run_env(&r, env, NULL, (const char *const[]){"tenants", "list", NULL});
    expect_code(&r, 5);
    assert_non_null(strstr(r.err, "(HTTP 403)"));
    run_free(&r);
    run_env(&r, env, NULL,
            (const char *const[]){"tenants", "create", "x", NULL});
    expect_code(&r, 5);
    run_free(&r);

    /* Revoking every key of the tenant locks it out: 5. */
    RUN(&r, "tenants", "keys", tid, "--json");
    t = out_json(&r);
    run_free(&r);
    size_t i;
    json_t *k;
    json_array_foreach (json_object_get(t, "items"), i, k) {
        RUN(&r, "tenants", "key-revoke", tid, str(k, "id"));
        expect_code(&r, 0);
        run_free(&r);
    }
    json_decref(t);
    run_env(&r, env, NULL, (const char *const[]){"datasets", "list", NULL});
    expect_code(&r, 5);
    run_free(&r);
}

/* deployments: create from flags (the server holds what they say), list's
 * table, get by name, update, the exit codes of a taken name (4) and an
 * unknown deployment (3), the usage errors of the flags, and delete. The
 * deployment keeps min 0 replicas: nothing runs for it. */
static void test_deployments(void **state)
{
    assert_true(*model_id); /* trained by test_jobs_submit_watch_and_models */
    run_result r;
    RUN(&r, "deployments", "create", "cli-dep", "--model", model_id, "--min",
        "0", "--max", "2", "--gpu", "1g.18gb", "--max-batch-size", "16",
        "--max-queue-delay-us", "800", "--rps", "25.5", "--burst", "40",
        "--max-concurrency", "5", "--tokens-per-minute", "6000", "--priority",
        "3", "--json");
    expect_code(&r, 0);
    json_t *d = out_json(&r);
    char id[64], path[128];
    snprintf(id, sizeof id, "%s", str(d, "id"));
    json_decref(d);
    run_free(&r);
    snprintf(path, sizeof path, "/v1/deployments/%s", id);
    resp *h = http_get(&server, path);
    expect_status(h, 200);
    json_t *want = json_loads(
        "{\"replicas\": {\"min\": 0, \"max\": 2}, \"resources\": {\"gpu\": "
        "\"1g.18gb\"}, \"batching\": {\"max_batch_size\": 16, "
        "\"max_queue_delay_us\": 800}, \"limits\": {\"requests_per_second\": "
        "25.5, \"burst\": 40, \"max_concurrency\": 5, "
        "\"tokens_per_minute\": 6000}, \"priority\": 3}",
        0, NULL);
    const char *k;
    json_t *v;
    json_object_foreach (want, k, v) {
        json_t *got = json_object_get(h->json, k);
        const char *mk;
        json_t *mv;
        if (!json_is_object(v)) {
            assert_true(json_equal(got, v));
            continue;
        }
        json_object_foreach (v, mk, mv)
            if (!json_equal(json_object_get(got, mk), mv))
                fail_msg("%s.%s: %s", k, mk, h->body);
    }
    json_decref(want);
    assert_string_equal(str(h->json, "model"), model_id);
    resp_free(h);

    /* Without --json: a line saying what was made. */
    RUN(&r, "deployments", "create", "cli-dep2", "--model", model_id, "--min",
        "0");
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, "cli-dep2"));
    assert_non_null(strstr(r.out, model_id));
    run_free(&r);

    RUN(&r, "deployments", "list");
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, "NAME"));
    assert_non_null(strstr(r.out, "STATUS"));
    const char *row = strstr(r.out, id);
    assert_non_null(row);
    assert_non_null(strstr(row, "cli-dep"));
    assert_non_null(strstr(row, "0-2"));
    assert_non_null(strstr(row, "1g.18gb"));
    assert_non_null(strstr(r.out, "cli-dep2"));
    run_free(&r);
    RUN(&r, "deployments", "list", "--json");
    expect_code(&r, 0);
    d = out_json(&r);
    assert_int_equal(json_array_size(json_object_get(d, "items")), 2);
    json_decref(d);
    run_free(&r);

    char val[256];
    RUN(&r, "deployments", "get", "cli-dep");
    expect_code(&r, 0);
    assert_string_equal(line_value(r.out, "id", val, sizeof val), id);
    assert_string_equal(line_value(r.out, "model", val, sizeof val), model_id);
    assert_non_null(line_value(r.out, "status", val, sizeof val));
    run_free(&r);

    /* update: only what the flags name; --rps none lifts the rate limit. */
    RUN(&r, "deployments", "update", "cli-dep", "--max", "3", "--rps", "none",
        "--max-concurrency", "none", "--tokens-per-minute", "none");
    expect_code(&r, 0);
    assert_string_equal(line_value(r.out, "id", val, sizeof val), id);
    run_free(&r);
    h = http_get(&server, path);
    const json_t *rep = json_object_get(h->json, "replicas");
    assert_int_equal(json_integer_value(json_object_get(rep, "max")), 3);
    assert_int_equal(json_integer_value(json_object_get(rep, "min")), 0);
    const json_t *lim = json_object_get(h->json, "limits");
    assert_true(json_is_null(json_object_get(lim, "requests_per_second")));
    assert_true(json_is_null(json_object_get(lim, "max_concurrency")));
    assert_true(json_is_null(json_object_get(lim, "tokens_per_minute")));
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(h->json, "batching"),
                                           "max_batch_size")),
        16);
    resp_free(h);

    /* The server's refusals as exit codes, with its detail. */
    RUN(&r, "deployments", "create", "cli-dep", "--model", model_id, "--min",
        "0");
    expect_code(&r, 4);
    assert_non_null(strstr(r.err, "cli-dep"));
    run_free(&r);
    RUN(&r, "deployments", "update", "cli-dep", "--min", "9");
    expect_code(&r, 4);
    assert_non_null(strstr(r.err, "replicas.min"));
    run_free(&r);
    RUN(&r, "deployments", "get", "dep_aaaaaaaaaaaaaaaaaaaa");
    expect_code(&r, 3);
    run_free(&r);

    /* Usage errors: nothing is sent. */
    const char *const *bad[] = {
        (const char *const[]){"deployments", "create", "x", NULL},
        (const char *const[]){"deployments", "create", "--model", "m", NULL},
        (const char *const[]){"deployments", "create", "x", "--model", "m",
                              "--min", "two", NULL},
        (const char *const[]){"deployments", "create", "x", "--model", "m",
                              "--rps", "fast", NULL},
        (const char *const[]){"deployments", "update", "cli-dep", NULL},
        (const char *const[]){"deployments", "update", "cli-dep", "--gpu",
                              "any", NULL},
        (const char *const[]){"deployments", "get", NULL},
        (const char *const[]){"deployments", "list", "--model", "m", NULL},
        (const char *const[]){"deployments", "frob", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        run_env(&r, admin_env(), NULL, bad[i]);
        expect_code(&r, 64);
        run_free(&r);
    }
    h = http_get(&server, "/v1/deployments/x");
    expect_status(h, 404);
    resp_free(h);

    /* delete: 0 and a line saying so; gone once drained. */
    RUN(&r, "deployments", "delete", "cli-dep");
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, "Deleting"));
    assert_non_null(strstr(r.out, id));
    run_free(&r);
    RUN(&r, "deployments", "delete", "cli-dep2", "--json");
    expect_code(&r, 0);
    d = out_json(&r);
    assert_string_equal(str(d, "status"), "deleting");
    json_decref(d);
    run_free(&r);
    double deadline = now_seconds() + 60;
    long status = 0;
    while (now_seconds() < deadline) {
        h = http_get(&server, path);
        status = h->status;
        resp_free(h);
        if (status == 404)
            break;
        usleep(100000);
    }
    assert_int_equal(status, 404);
}

/* The stream drops (the server is killed and comes back on the same port):
 * watch reconnects with Last-Event-ID, which the new server does not hold,
 * so it gets `event: reset`, refetches the job, and still ends with the
 * job's outcome. Runs last: it restarts the shared server. */
static void test_watch_reconnects(void **state)
{
    char body[1024], job[64], listen[64];
    long_job_body(body, sizeof body, 3); /* survives the restart */
    submit_http(body, job);
    json_decref(wait_job_until(&server, job, 60, is_running));
    run_result w;
    run_start(&w, admin_env(), NULL,
              (const char *const[]){"--json", "jobs", "watch", job, NULL});
    /* The watcher has an event id once an event reached it: progress comes
     * about once a second while the job trains. */
    double deadline = now_seconds() + 30;
    for (;;) {
        char *seen = NULL;
        size_t n = 0;
        if (fs_read_all(w.out_path, 1 << 20, &seen, &n, NULL) == TY_OK && n) {
            free(seen);
            break;
        }
        free(seen);
        assert_true(now_seconds() < deadline);
        usleep(100000);
    }
    char data[PATH_MAX];
    snprintf(data, sizeof data, "%s", server.data);
    snprintf(listen, sizeof listen, "127.0.0.1:%d", server.port);
    srv_stop(&server, SIGKILL);
    const char *flags[] = {"--devices", devices, "--listen", listen, NULL};
    assert_int_equal(srv_start(&server, data, flags), 0);
    json_t *again = wait_job_until(&server, job, 60, is_running);
    if (!is_running(again))
        fail_msg("after the restart the job is %s: %s", str(again, "status"),
                 str(again, "error"));
    json_decref(again);
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s/cancel", job);
    resp *h = http_do(&server, "POST", path, NULL, NULL, 0, NULL);
    if (h->status != 202)
        fail_msg("cancel after the restart: %ld %s", h->status, h->body);
    resp_free(h);
    run_wait(&w);
    expect_code(&w, 2);
    /* The reset proves Last-Event-ID went out (without it the stream just
     * starts); the outcome came from the events or the refetch, whichever
     * the cancel beat. */
    assert_non_null(strstr(w.out, "\"event\":\"reset\""));
    run_free(&w);
}

/* `trainyard mig`: the advice as a table, a layout change applied and
 * followed with --watch, the status after it, and the errors: a layout
 * the client cannot read (64, nothing sent), one the server refuses (422:
 * 4, its field named), --from-advice when the advice keeps the GPU (64).
 * The GPU is cut back to seven 1g.18gb slices at the end. */
static void test_mig(void **state)
{
    (void)state;
    run_result r;
    RUN(&r, "mig", "advice");
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, "demand records replayed"));
    assert_non_null(strstr(r.out, "H200"));
    assert_non_null(strstr(r.out, "1g.18gb@0,"));
    run_free(&r);

    RUN(&r, "mig", "apply", "0", "--layout", "3g.71gb@4,3g.71gb@0",
        "--watch");
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, ": done"));
    run_free(&r);
    RUN(&r, "mig", "status", "0");
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, "GPU 0: 3g.71gb@4,3g.71gb@0"));
    assert_non_null(strstr(r.out, "-> 3g.71gb@4,3g.71gb@0"));
    run_free(&r);
    RUN(&r, "devices");
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, "3g.71gb"));
    assert_null(strstr(r.out, "1g.18gb"));
    run_free(&r);

    RUN(&r, "mig", "apply", "0", "--layout", "3g.71gb");
    expect_code(&r, 64);
    assert_non_null(strstr(r.err, "PROFILE@START"));
    run_free(&r);
    RUN(&r, "mig", "apply", "0");
    expect_code(&r, 64);
    run_free(&r);
    RUN(&r, "mig", "apply", "0", "--layout", "3g.71gb@5");
    expect_code(&r, 4);
    assert_non_null(strstr(r.err, "instances[0].start"));
    run_free(&r);
    /* --from-advice applies what the advice says for GPU 0 (the demand
     * the earlier tests recorded decides whether it keeps the layout). */
    RUN(&r, "mig", "advice", "--json");
    expect_code(&r, 0);
    json_t *adv = out_json(&r);
    run_free(&r);
    json_t *g0 = json_array_get(json_object_get(adv, "gpus"), 0);
    const int change = json_is_true(json_object_get(g0, "change"));
    char want[256] = "GPU 0: ";
    size_t k;
    json_t *x;
    json_array_foreach (json_object_get(json_object_get(g0, "advised"),
                                        "instances"),
                        k, x) {
        char one[48];
        snprintf(one, sizeof one, "%s%s@%lld", k ? "," : "",
                 json_string_value(json_object_get(x, "profile")),
                 (long long)json_integer_value(json_object_get(x, "start")));
        strncat(want, one, sizeof want - strlen(want) - 1);
    }
    json_decref(adv);
    RUN(&r, "mig", "apply", "0", "--from-advice", "--watch");
    if (change) {
        expect_code(&r, 0);
        assert_non_null(strstr(r.out, ": done"));
    } else {
        expect_code(&r, 64);
        assert_non_null(strstr(r.err, "nothing to apply"));
    }
    run_free(&r);
    RUN(&r, "mig", "status", "0");
    expect_code(&r, 0);
    if (change)
        assert_non_null(strstr(r.out, want));
    else
        assert_non_null(strstr(r.out, "GPU 0: 3g.71gb@4,3g.71gb@0"));
    run_free(&r);

    RUN(&r, "mig", "apply", "0", "--layout",
        "1g.18gb@0,1g.18gb@1,1g.18gb@2,1g.18gb@3,1g.18gb@4,1g.18gb@5,"
        "1g.18gb@6",
        "--watch");
    expect_code(&r, 0);
    run_free(&r);
    RUN(&r, "mig", "status");
    expect_code(&r, 0);
    assert_non_null(strstr(r.out, "GPU 0: 1g.18gb@0,1g.18gb@1"));
    run_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_login_logout),
        cmocka_unit_test(test_datasets),
        cmocka_unit_test(test_jobs_submit_watch_and_models),
        cmocka_unit_test(test_models_evaluate),
        cmocka_unit_test(test_watch_failed_and_cancelled),
        cmocka_unit_test(test_list_progress_and_metric_headings),
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_deployments),
        cmocka_unit_test(test_tenants),
        cmocka_unit_test(test_watch_reconnects),
        cmocka_unit_test(test_mig),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
