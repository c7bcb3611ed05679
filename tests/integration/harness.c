/* harness.c - integration-test helpers (see harness.h). */
#include "harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "common/rng.h"
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/fsutil.h"

double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void temp_dir(char out[PATH_MAX])
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(out, PATH_MAX, "%s/trainyard-test-XXXXXX", base);
    if (!mkdtemp(out)) {
        perror("mkdtemp");
        abort();
    }
}

void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len) {
        perror(path);
        abort();
    }
    fclose(f);
}

static void write_npy(const char *path, const char *descr, const char *shape,
                      const void *data, size_t bytes)
{
    char header[128];
    int n = snprintf(header, sizeof header,
                     "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     descr, shape);
    size_t total = 10 + (size_t)n + 1;
    size_t pad = (64 - total % 64) % 64;
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    uint16_t hlen = (uint16_t)(n + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fwrite(&hlen, 2, 1, f);
    fwrite(header, 1, (size_t)n, f);
    for (size_t i = 0; i < pad; i++)
        fputc(' ', f);
    fputc('\n', f);
    fwrite(data, 1, bytes, f);
    fclose(f);
}

void write_npy_f32(const char *path, const float *data, size_t n, size_t cols)
{
    char shape[64];
    if (cols)
        snprintf(shape, sizeof shape, "(%zu, %zu)", n, cols);
    else
        snprintf(shape, sizeof shape, "(%zu,)", n);
    write_npy(path, "<f4", shape, data, n * (cols ? cols : 1) * sizeof(float));
}

void write_npy_i64(const char *path, const int64_t *data, size_t n)
{
    char shape[64];
    snprintf(shape, sizeof shape, "(%zu,)", n);
    write_npy(path, "<i8", shape, data, n * sizeof(int64_t));
}

int srv_start(srv *s, const char *data, const char *const *extra)
{
    const char *bin = getenv("TRAINYARD_BIN");
    if (!bin) {
        fprintf(stderr, "harness: TRAINYARD_BIN is not set\n");
        return -1;
    }
    memset(s, 0, sizeof *s);
    if (data)
        snprintf(s->data, sizeof s->data, "%s", data);
    else
        temp_dir(s->data);
    snprintf(s->log, sizeof s->log, "%s.server.log", s->data);
    int pipefd[2];
    if (pipe(pipefd) != 0)
        return -1;
    /* On the CPU on any machine, so the suite means the same everywhere;
     * a test that wants a GPU names --train-device again in extra (the
     * last one given wins). */
    const char *argv[32] = {bin,      "serve", "--listen",       "127.0.0.1:0",
                            "--data", s->data, "--train-device", "cpu"};
    int argc = 8;
    for (int i = 0; extra && extra[i] && argc < 30; i++)
        argv[argc++] = extra[i];
    argv[argc] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(pipefd[1], 1);
        int log = open(s->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (log >= 0)
            dup2(log, 2);
        close(pipefd[0]);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    close(pipefd[1]);
    s->pid = pid;
    FILE *out = fdopen(pipefd[0], "r");
    char line[1024];
    const char *scheme = "http";
    int key_given = 0;
    double deadline = now_seconds() + 60;
    while (fgets(line, sizeof line, out)) {
        if (strstr(line, "The admin API key from "))
            key_given = 1;
        char *p = strstr(line, "listening on http://127.0.0.1:");
        char *ps = strstr(line, "listening on https://127.0.0.1:");
        if (p || ps) {
            scheme = ps ? "https" : "http";
            s->port = ps ? atoi(ps + strlen("listening on https://127.0.0.1:"))
                         : atoi(p + strlen("listening on http://127.0.0.1:"));
            break;
        }
        if (now_seconds() > deadline)
            break;
    }
    /* The server writes nothing more to stdout that matters; keep the pipe
     * drained by closing our end (the server ignores SIGPIPE). */
    fclose(out);
    if (!s->port) {
        fprintf(stderr, "harness: the server did not start; its log is %s\n",
                s->log);
        srv_stop(s, SIGKILL);
        return -1;
    }
    snprintf(s->base, sizeof s->base, "%s://127.0.0.1:%d", scheme, s->port);
    if (key_given)
        return 0;
    char keyfile[PATH_MAX];
    snprintf(keyfile, sizeof keyfile, "%s/admin.key", s->data);
    FILE *k = fopen(keyfile, "r");
    if (!k || !fgets(s->key, sizeof s->key, k)) {
        fprintf(stderr, "harness: cannot read %s\n", keyfile);
        if (k)
            fclose(k);
        return -1;
    }
    fclose(k);
    s->key[strcspn(s->key, "\r\n")] = '\0';
    return 0;
}

int srv_stop(srv *s, int sig)
{
    int ws = 0;
    if (s->pid > 0) {
        kill(s->pid, sig);
        waitpid(s->pid, &ws, 0);
        s->pid = 0;
    }
    return ws;
}

void srv_cleanup(srv *s)
{
    if (s->data[0] && !getenv("TY_KEEP_TEST_DATA")) {
        fs_remove_tree(s->data, NULL);
        unlink(s->log);
    }
}

typedef struct {
    char *buf;
    size_t len;
} growbuf;

static size_t on_body(char *data, size_t size, size_t n, void *ctx)
{
    growbuf *g = ctx;
    size_t len = size * n;
    char *b = realloc(g->buf, g->len + len + 1);
    if (!b)
        return 0;
    memcpy(b + g->len, data, len);
    g->buf = b;
    g->len += len;
    g->buf[g->len] = '\0';
    return len;
}

typedef struct {
    char content_type[128];
    char location[256];
} headers;

static size_t on_header(char *data, size_t size, size_t n, void *ctx)
{
    headers *h = ctx;
    size_t len = size * n;
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)(len < 511 ? len : 511), data);
    line[strcspn(line, "\r\n")] = '\0';
    if (!strncasecmp(line, "Content-Type: ", 14))
        snprintf(h->content_type, sizeof h->content_type, "%s", line + 14);
    if (!strncasecmp(line, "Location: ", 10))
        snprintf(h->location, sizeof h->location, "%s", line + 10);
    return len;
}

static resp *perform(CURL *c, const srv *s, const char *path, const char *key,
                     struct curl_slist *hdrs)
{
    char url[1024], auth[256];
    snprintf(url, sizeof url, "%s%s", s->base, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    if (!key)
        key = s->key;
    if (*key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", key);
        hdrs = curl_slist_append(hdrs, auth);
    }
    hdrs = curl_slist_append(hdrs, "Expect:");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    growbuf body = {0};
    headers h = {0};
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &h);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 300L);
    if (*s->cacert)
        curl_easy_setopt(c, CURLOPT_CAINFO, s->cacert);
    resp *r = calloc(1, sizeof *r);
    CURLcode rc = curl_easy_perform(c);
    r->curl_code = (int)rc;
    if (rc != CURLE_OK) {
        fprintf(stderr, "harness: %s %s: %s\n", "request", url,
                curl_easy_strerror(rc));
        r->status = -1;
    } else {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    }
    r->body = body.buf ? body.buf : calloc(1, 1);
    r->len = body.len;
    snprintf(r->content_type, sizeof r->content_type, "%s", h.content_type);
    snprintf(r->location, sizeof r->location, "%s", h.location);
    if (strstr(r->content_type, "json"))
        r->json = json_loadb(r->body, r->len, 0, NULL);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    return r;
}

resp *http_do(const srv *s, const char *method, const char *path,
              const char *content_type, const void *body, size_t len,
              const char *key)
{
    CURL *c = curl_easy_init();
    struct curl_slist *hdrs = NULL;
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (!strcmp(method, "HEAD"))
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    if (content_type) {
        char ct[256];
        snprintf(ct, sizeof ct, "Content-Type: %s", content_type);
        hdrs = curl_slist_append(hdrs, ct);
    }
    return perform(c, s, path, key, hdrs);
}

resp *http_json(const srv *s, const char *method, const char *path,
                const char *json_text)
{
    return http_do(s, method, path, "application/json", json_text,
                   strlen(json_text), NULL);
}

resp *http_get(const srv *s, const char *path)
{
    return http_do(s, "GET", path, NULL, NULL, 0, NULL);
}

resp *http_upload(const srv *s, const char *path, const char *const *parts)
{
    CURL *c = curl_easy_init();
    curl_mime *mime = curl_mime_init(c);
    for (int i = 0; parts[i]; i++) {
        const char *eq = strchr(parts[i], '=');
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)(eq - parts[i]), parts[i]);
        curl_mimepart *p = curl_mime_addpart(mime);
        curl_mime_name(p, name);
        if (eq[1] == '@')
            curl_mime_filedata(p, eq + 2);
        else
            curl_mime_data(p, eq + 1, CURL_ZERO_TERMINATED);
    }
    curl_easy_setopt(c, CURLOPT_MIMEPOST, mime);
    resp *r = perform(c, s, path, NULL, NULL);
    curl_mime_free(mime);
    return r;
}

void resp_free(resp *r)
{
    if (!r)
        return;
    free(r->body);
    json_decref(r->json);
    free(r);
}

static int finished(const json_t *job)
{
    const char *st = json_string_value(json_object_get(job, "status"));
    return st && (!strcmp(st, "succeeded") || !strcmp(st, "failed") ||
                  !strcmp(st, "cancelled"));
}

json_t *wait_job_until(const srv *s, const char *job_id, double timeout_s,
                       int (*pred)(const json_t *job))
{
    char path[256];
    snprintf(path, sizeof path, "/v1/jobs/%s", job_id);
    double deadline = now_seconds() + timeout_s;
    json_t *job = NULL;
    while (now_seconds() < deadline) {
        resp *r = http_get(s, path);
        json_decref(job);
        job = r->json ? json_incref(r->json) : NULL;
        resp_free(r);
        if (job && (pred(job) || finished(job)))
            return job;
        usleep(100 * 1000);
    }
    return job;
}

json_t *wait_job(const srv *s, const char *job_id, double timeout_s)
{
    return wait_job_until(s, job_id, timeout_s, finished);
}

void make_blobs_csv(const char *path, int rows, uint64_t seed)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    fprintf(f, "a,b,species,c,d\n");
    ty_rng r;
    ty_rng_seed(&r, seed, 0);
    static const char *const names[] = {"setosa", "versicolor", "virginica"};
    for (int i = 0; i < rows; i++) {
        int k = i % 3;
        fprintf(f, "%.4f,%.4f,%s,%.4f,%.4f\n", 10.0 * k + ty_rng_normal(&r),
                5.0 - 3.0 * k + ty_rng_normal(&r), names[k],
                100.0 + ty_rng_normal(&r), 2.0 * k + ty_rng_normal(&r));
    }
    fclose(f);
}

int find_children(const srv *s, const char *command, const char *id,
                  pid_t *pids, int max)
{
    char want[PATH_MAX + 64], cmd_word[64];
    snprintf(want, sizeof want, "%s/jobs/%s", s->data, id);
    snprintf(cmd_word, sizeof cmd_word, " %s ", command);
    DIR *d = opendir("/proc");
    struct dirent *e;
    int found = 0;
    while (d && (e = readdir(d)) != NULL) {
        char path[300], cmd[4096];
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(cmd, 1, sizeof cmd - 1, f);
        fclose(f);
        for (size_t i = 0; i < n; i++)
            if (cmd[i] == '\0')
                cmd[i] = ' ';
        cmd[n] = '\0';
        if (strstr(cmd, cmd_word) && strstr(cmd, want) && found++ < max)
            pids[found - 1] = (pid_t)atoi(e->d_name);
    }
    if (d)
        closedir(d);
    return found;
}

pid_t find_child(const srv *s, const char *command, const char *id)
{
    pid_t pid = 0;
    return find_children(s, command, id, &pid, 1) > 0 ? pid : 0;
}

json_t *get_job(const srv *s, const char *id)
{
    char p[128];
    snprintf(p, sizeof p, "/v1/jobs/%s", id);
    resp *r = http_get(s, p);
    expect_status(r, 200);
    json_t *j = json_incref(r->json);
    resp_free(r);
    return j;
}

json_t *job_epochs(const srv *s, const char *id)
{
    char p[128];
    snprintf(p, sizeof p, "/v1/jobs/%s/metrics", id);
    resp *r = http_get(s, p);
    expect_status(r, 200);
    json_t *e = json_incref(json_object_get(r->json, "epochs"));
    resp_free(r);
    return e;
}

void sim_example(const char *name, char out[PATH_MAX])
{
    const char *src = __FILE__;
    const char *cut = strstr(src, "tests/integration/harness.c");
    if (!cut)
        fail_msg("cannot find the source tree from %s", src);
    snprintf(out, PATH_MAX, "%.*sgpu/sim/%s", (int)(cut - src), src, name);
    if (access(out, R_OK) != 0)
        fail_msg("missing example %s", out);
}

pid_t find_worker(const srv *s, const char *job_id)
{
    return find_child(s, "worker", job_id);
}

const char *str(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

void expect_status(resp *r, long status)
{
    if (r->status != status)
        fprintf(stderr, "expected %ld, got %ld (curl %d): %s\n", status,
                r->status, r->curl_code, r->body ? r->body : "");
    assert_int_equal(r->status, status);
}

void expect_refusal(const srv *s, resp *r, long status, const char *field,
                    const char *needle)
{
    const char *got = r->json ? str(r->json, "field") : NULL;
    const char *detail = r->json ? str(r->json, "detail") : NULL;
    if (r->status != status || (field && (!got || strcmp(got, field))) ||
        (needle && (!detail || !strstr(detail, needle))))
        fprintf(stderr, "%ld %.*s\n", r->status, (int)r->len, r->body);
    assert_int_equal(r->status, status);
    if (field) {
        assert_non_null(got);
        assert_string_equal(got, field);
    }
    if (needle) {
        assert_non_null(detail);
        assert_non_null(strstr(detail, needle));
    }
    assert_null(strstr(r->body, s->data)); /* no server paths */
    resp_free(r);
}

/* ---- raw HTTP ---- */

int raw_send_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
        if (n <= 0)
            return -1;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

void raw_read_reply(int fd, double timeout_s, raw_resp *out)
{
    static char buf[1 << 16];
    size_t len = 0;
    double end = now_seconds() + timeout_s;
    memset(out, 0, sizeof *out);
    out->status = -1;
    for (;;) {
        double left = end - now_seconds();
        if (left <= 0 || len >= sizeof buf - 1)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(left * 1000) + 1) <= 0)
            break;
        ssize_t n = recv(fd, buf + len, sizeof buf - 1 - len, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
        buf[len] = '\0';
        char *sep = strstr(buf, "\r\n\r\n");
        const char *cl = sep ? strcasestr(buf, "\r\nContent-Length: ") : NULL;
        if (sep && cl && cl < sep &&
            len >= (size_t)(sep + 4 - buf) + strtoul(cl + 18, NULL, 10))
            break;
        /* "100 Continue" is a whole reply of its own. */
        if (sep && !strncmp(buf, "HTTP/1.1 100", 12))
            break;
    }
    buf[len] = '\0';
    char *sep = strstr(buf, "\r\n\r\n");
    if (!sep || strncmp(buf, "HTTP/1.", 7) != 0)
        return;
    out->status = atoi(buf + 9);
    snprintf(out->head, sizeof out->head, "%.*s", (int)(sep - buf), buf);
    snprintf(out->body, sizeof out->body, "%s", sep + 4);
}

/* ---- the CLI ---- */

static char *slurp_file(const char *path)
{
    char *buf = NULL;
    size_t len = 0;
    if (fs_read_all(path, 16u << 20, &buf, &len, NULL) != TY_OK)
        return strdup("");
    return buf;
}

void cli_run(cli_result *r, const char *home, const char *url, const char *key,
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
        setenv("TRAINYARD_URL", url, 1);
        setenv("TRAINYARD_KEY", key, 1);
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
    r->out = slurp_file(out_path);
    r->err = slurp_file(err_path);
}

void cli_result_free(cli_result *r)
{
    free(r->out);
    free(r->err);
}

void cli_expect_code(const cli_result *r, int code)
{
    if (r->code != code)
        fail_msg("exit %d, wanted %d\nstderr: %.1500s\nstdout: %.1500s",
                 r->code, code, r->err, r->out);
}

void deploy_cpu_ready(const srv *s, const char *name, const char *model,
                      char *dpath)
{
    char body[256];
    snprintf(body, sizeof body,
             "{\"name\": \"%s\", \"model\": \"%s\", \"replicas\": "
             "{\"min\": 1, \"max\": 1}, \"resources\": {\"gpu\": \"none\"}}",
             name, model);
    resp *r = http_json(s, "POST", "/v1/deployments", body);
    expect_status(r, 201);
    snprintf(dpath, 128, "/v1/deployments/%s", str(r->json, "id"));
    resp_free(r);
    const double until = now_seconds() + 60;
    int ready = 0;
    while (!ready && now_seconds() < until) {
        r = http_get(s, dpath);
        ready = r->status == 200 && !strcmp(str(r->json, "status"), "ready");
        resp_free(r);
        if (!ready)
            usleep(100 * 1000);
    }
    if (!ready)
        fail_msg("%s not ready in 60 s (log: %s)", name, s->log);
}
