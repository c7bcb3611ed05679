/*
 * Integration tests for `trainyard models import` (issue 30): the built
 * client run as a subprocess against a real server. A state dict under
 * trainyard's names with a --metadata file imports and predicts; a file
 * that carries trainyard's metadata needs none; --json prints the server's
 * document; a PyTorch module's own names (fc1.weight) are refused with the
 * server's 422 passed through (exit 4), listing the expected names and the
 * converter; missing files and bad command lines are usage errors (64)
 * before anything is sent; a wrong key is 5, an unreachable server 7.
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
#include <sys/wait.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "harness.h"
#include "models/safetensors.h"

static srv server;
static char home[PATH_MAX];
static char env_url[128], env_key[160];

typedef struct {
    int code;
    char *out, *err;
} run_result;

static char *slurp(const char *path)
{
    char *buf = NULL;
    size_t len = 0;
    if (fs_read_all(path, 16u << 20, &buf, &len, NULL) != TY_OK)
        return strdup("");
    return buf;
}

/* Runs `trainyard args...` with TRAINYARD_URL and TRAINYARD_KEY set to url
 * and key (NULL: the test server's), HOME in the test folder. */
static void run_as(run_result *r, const char *url, const char *key,
                   const char *const *args)
{
    static int seq;
    char out_path[PATH_MAX + 32], err_path[PATH_MAX + 32];
    snprintf(out_path, sizeof out_path, "%s/run%d.out", home, seq);
    snprintf(err_path, sizeof err_path, "%s/run%d.err", home, seq++);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int in = open("/dev/null", O_RDONLY);
        int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(in, 0);
        dup2(out, 1);
        dup2(err, 2);
        if (chdir(home) != 0)
            _exit(126);
        setenv("HOME", home, 1);
        setenv("XDG_CONFIG_HOME", home, 1);
        setenv("TRAINYARD_URL", url ? url : env_url, 1);
        setenv("TRAINYARD_KEY", key ? key : env_key, 1);
        const char *argv[32] = {getenv("TRAINYARD_BIN")};
        int n = 1;
        for (int i = 0; args[i] && n < 31; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    r->code = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
    r->out = slurp(out_path);
    r->err = slurp(err_path);
}

#define RUN(r, ...) \
    run_as((r), NULL, NULL, (const char *const[]){__VA_ARGS__, NULL})

static void run_free(run_result *r)
{
    free(r->out);
    free(r->err);
}

static void expect_code(const run_result *r, int code)
{
    if (r->code != code)
        fail_msg("exit %d, wanted %d\nstderr: %.1500s\nstdout: %.600s", r->code,
                 code, r->err, r->out);
}

static void expect_err(const run_result *r, const char *needle)
{
    if (!strstr(r->err, needle))
        fail_msg("'%s' not on stderr: %.1500s", needle, r->err);
}

/* ---- the model: dense 5, relu, dense 3 on [4], classes a b c ---- */

static float w0[5 * 4], b0[5], w1[3 * 5], b1[3];

/* Writes the weights under the given names (NULL: trainyard's) to
 * home/file. */
static const char *write_weights(const char *file, const char *const *names)
{
    static const char *const ours[] = {"0.weight", "0.bias", "2.weight",
                                       "2.bias"};
    if (!names)
        names = ours;
    st_out_tensor t[4] = {
        {names[0], ST_F32, 2, {5, 4}, w0},
        {names[1], ST_F32, 1, {5}, b0},
        {names[2], ST_F32, 2, {3, 5}, w1},
        {names[3], ST_F32, 1, {3}, b1},
    };
    static char path[4][PATH_MAX + 64];
    static int next;
    char *p = path[next++ % 4];
    snprintf(p, PATH_MAX + 64, "%s/%s", home, file);
    ty_err err = {0};
    assert_int_equal(st_write(p, NULL, t, 4, &err), TY_OK);
    return p;
}

static const char *meta_file(void)
{
    static char p[PATH_MAX + 16];
    static const char text[] =
        "{\"spec\": {\"layers\": [{\"type\": \"dense\", \"units\": 5},"
        " {\"type\": \"relu\"}, {\"type\": \"dense\", \"units\": 3}]},"
        " \"task\": \"classification\", \"input_shape\": [4],"
        " \"classes\": [\"a\", \"b\", \"c\"]}";
    snprintf(p, sizeof p, "%s/meta.json", home);
    write_file(p, text, sizeof text - 1);
    return p;
}

/* The probabilities the model gives example x. */
static void expected(const float *x, double p[3])
{
    double h[5], z[3], m = -1e300, sum = 0;
    for (int o = 0; o < 5; o++) {
        h[o] = b0[o];
        for (int i = 0; i < 4; i++)
            h[o] += (double)w0[o * 4 + i] * x[i];
        h[o] = h[o] > 0 ? h[o] : 0;
    }
    for (int o = 0; o < 3; o++) {
        z[o] = b1[o];
        for (int i = 0; i < 5; i++)
            z[o] += (double)w1[o * 5 + i] * h[i];
        m = z[o] > m ? z[o] : m;
    }
    for (int o = 0; o < 3; o++)
        sum += (p[o] = exp(z[o] - m));
    for (int o = 0; o < 3; o++)
        p[o] /= sum;
}

/* The id in "Imported model mdl_... (" on stdout. */
static void imported_id(const run_result *r, char id[64])
{
    const char *p = strstr(r->out, "Imported model mdl_");
    if (!p)
        fail_msg("no 'Imported model' line: %s", r->out);
    p += strlen("Imported model ");
    size_t n = strcspn(p, " ");
    assert_true(n < 64);
    memcpy(id, p, n);
    id[n] = '\0';
}

/* ---- tests ---- */

static void test_import_predicts(void **state)
{
    run_result r;
    char id[64], path[128];
    RUN(&r, "models", "import", "from-torch",
        write_weights("good.safetensors", NULL), "--metadata", meta_file());
    expect_code(&r, 0);
    imported_id(&r, id);
    if (!strstr(r.out, "(from-torch): classification of 3 classes, input 4, "
                       "43 parameters"))
        fail_msg("the import's line: %s", r.out);
    run_free(&r);

    snprintf(path, sizeof path, "/v1/models/%s", id);
    resp *h = http_get(&server, path);
    expect_status(h, 200);
    assert_string_equal(str(h->json, "name"), "from-torch");
    resp_free(h);

    /* The server predicts what the weights say. */
    const float x[4] = {1, -2, 3, 0.5f};
    snprintf(path, sizeof path, "/v1/models/%s/predict", id);
    h = http_json(&server, "POST", path, "{\"inputs\": [[1, -2, 3, 0.5]]}");
    expect_status(h, 200);
    double want[3];
    expected(x, want);
    json_t *row = json_array_get(json_object_get(h->json, "outputs"), 0);
    for (int k = 0; k < 3; k++)
        assert_true(fabs(json_number_value(json_array_get(row, k)) - want[k]) <
                    1e-5);
    resp_free(h);

    /* A file that carries trainyard's metadata (a model's weights) needs
     * no --metadata; --json prints the server's document. */
    snprintf(path, sizeof path, "/v1/models/%s/weights", id);
    h = http_get(&server, path);
    expect_status(h, 200);
    char again[PATH_MAX + 32];
    snprintf(again, sizeof again, "%s/again.safetensors", home);
    write_file(again, h->body, h->len);
    resp_free(h);
    RUN(&r, "--json", "models", "import", "copy", again);
    expect_code(&r, 0);
    json_error_t je;
    json_t *doc = json_loads(r.out, 0, &je);
    if (!doc)
        fail_msg("--json printed no JSON: %s", r.out);
    assert_string_equal(str(doc, "name"), "copy");
    assert_int_equal(strncmp(str(doc, "id"), "mdl_", 4), 0);
    assert_int_equal(json_integer_value(json_object_get(doc, "param_count")),
                     43);
    json_decref(doc);
    run_free(&r);
}

/* A PyTorch module's own names: the server's 422 passed through, exit 4,
 * listing what the spec expects and pointing at the converter. */
static void test_module_names_refused(void **state)
{
    static const char *const names[] = {"fc1.weight", "fc1.bias", "fc2.weight",
                                        "fc2.bias"};
    run_result r;
    RUN(&r, "models", "import", "plain",
        write_weights("plain.safetensors", names), "--metadata", meta_file());
    expect_code(&r, 4);
    expect_err(&r, "HTTP 422");
    expect_err(&r, "the spec expects 4 tensors (0.weight, 0.bias, 2.weight, "
                   "...)");
    expect_err(&r, "4 the spec does not name (fc1.weight, fc1.bias, "
                   "fc2.weight, ...)");
    expect_err(&r, "tools/trainyard_torch.py convert");
    expect_err(&r, "(field: weights)");
    assert_null(strstr(r.err, server.data));
    assert_string_equal(r.out, "");
    run_free(&r);

    /* No metadata part and none in the file: the server names the field. */
    RUN(&r, "models", "import", "plain",
        write_weights("bare.safetensors", NULL));
    expect_code(&r, 4);
    expect_err(&r, "no trainyard metadata");
    expect_err(&r, "(field: metadata)");
    run_free(&r);
}

/* A port nothing listens on: bound, read, closed. */
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

static void test_usage_and_transport_errors(void **state)
{
    const char *good = write_weights("w.safetensors", NULL);
    run_result r;
    RUN(&r, "models", "import", "x", "missing.safetensors");
    expect_code(&r, 64);
    expect_err(&r, "cannot read the weights file missing.safetensors");
    run_free(&r);
    RUN(&r, "models", "import", "x", good, "--metadata", "missing.json");
    expect_code(&r, 64);
    expect_err(&r, "cannot read the metadata file missing.json");
    run_free(&r);
    RUN(&r, "models", "import", "x");
    expect_code(&r, 64);
    expect_err(&r, "import takes a NAME and a WEIGHTS.safetensors file");
    run_free(&r);
    RUN(&r, "models", "import", "x", good, "--dataset", "ds_1");
    expect_code(&r, 64);
    run_free(&r);
    RUN(&r, "models", "import", "@x", good);
    expect_code(&r, 64);
    run_free(&r);

    /* The help names the verb and its option. */
    RUN(&r, "models", "--help");
    expect_code(&r, 0);
    assert_non_null(strstr(r.out,
                           "trainyard models import NAME WEIGHTS.safetensors "
                           "[--metadata FILE]"));
    run_free(&r);

    run_as(&r, NULL, "ty_wrong",
           (const char *const[]){"models", "import", "x", good, "--metadata",
                                 meta_file(), NULL});
    expect_code(&r, 5);
    run_free(&r);
    char closed[64];
    snprintf(closed, sizeof closed, "http://127.0.0.1:%d", closed_port());
    run_as(&r, closed, NULL,
           (const char *const[]){"models", "import", "x", good, "--metadata",
                                 meta_file(), NULL});
    expect_code(&r, 7);
    run_free(&r);
}

static int group_setup(void **state)
{
    temp_dir(home);
    for (int i = 0; i < 20; i++)
        w0[i] = (float)((i * 7) % 11 - 5) / 8.0f;
    for (int i = 0; i < 5; i++)
        b0[i] = (float)(i - 2) / 10.0f;
    for (int i = 0; i < 15; i++)
        w1[i] = (float)((i * 5) % 9 - 4) / 6.0f;
    for (int i = 0; i < 3; i++)
        b1[i] = (float)i / 4.0f;
    if (srv_start(&server, NULL, NULL) != 0)
        return -1;
    snprintf(env_url, sizeof env_url, "%s", server.base);
    snprintf(env_key, sizeof env_key, "%s", server.key);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_import_predicts),
        cmocka_unit_test(test_module_names_refused),
        cmocka_unit_test(test_usage_and_transport_errors),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
