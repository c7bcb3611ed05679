/*
 * Integration tests for HTTPS (`serve --tls-cert --tls-key`) and for an
 * admin key given to the server (TRAINYARD_ADMIN_KEY, --admin-key-file).
 *
 * A throwaway CA and a server certificate for 127.0.0.1 and localhost are
 * made with the openssl command at the start. The HTTPS server is driven
 * end to end with libcurl verifying against that CA: an upload, a training
 * job and its event stream (suspended and resumed connections over TLS).
 * Plain HTTP on the TLS port must get no HTTP answer, a client without the
 * CA must refuse the server, and bad TLS files must stop the start with a
 * message naming the flag.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "harness.h"

static char files[PATH_MAX];

static char *file_path(const char *name)
{
    static char p[4][PATH_MAX];
    static int next;
    char *out = p[next++ % 4];
    snprintf(out, PATH_MAX, "%s/%s", files, name);
    return out;
}

/* Runs a shell command in the files folder; fails the test if it fails. */
static void sh(const char *fmt, ...)
{
    char cmd[4096];
    int n = snprintf(cmd, sizeof cmd, "cd '%s' && ", files);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd + n, sizeof cmd - (size_t)n, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    if (rc != 0)
        fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
    assert_int_equal(rc, 0);
}

/* Runs `trainyard serve` with these flags on a fresh data folder, expecting
 * it to stop at once; returns its exit status, its output in out. */
static int serve_fails(const char *flags, char *out, size_t size)
{
    char data[PATH_MAX], cmd[8192];
    temp_dir(data);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && timeout 60 '%s' serve --listen 127.0.0.1:0 "
             "--data '%s' --devices none %s 2>&1",
             files, getenv("TRAINYARD_BIN"), data, flags);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, size - 1, p);
    out[n] = '\0';
    int ws = pclose(p);
    char keyfile[PATH_MAX + 16];
    snprintf(keyfile, sizeof keyfile, "%s/admin.key", data);
    struct stat st;
    int has_key = stat(keyfile, &st) == 0;
    fs_remove_tree(data, NULL);
    /* Checked before the data folder is touched: no admin key was made. */
    assert_false(has_key);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

static void start_tls(srv *s, const char *data)
{
    const char *extra[] = {"--tls-cert", file_path("server.pem"),
                           "--tls-key",  file_path("server.key"),
                           "--devices",  "none",
                           NULL};
    assert_int_equal(srv_start(s, data, extra), 0);
    assert_non_null(strstr(s->base, "https://"));
    snprintf(s->cacert, sizeof s->cacert, "%s", file_path("ca.pem"));
}

/* ---- HTTPS ---- */

static void test_https_end_to_end(void **state)
{
    (void)state;
    srv s;
    start_tls(&s, NULL);

    resp *r = http_get(&s, "/healthz");
    expect_status(r, 200);
    resp_free(r);

    char part[PATH_MAX + 8];
    snprintf(part, sizeof part, "file=@%s", file_path("blobs.csv"));
    const char *parts[] = {"name=blobs", "format=csv", "label_column=species",
                           part, NULL};
    r = http_upload(&s, "/v1/datasets", parts);
    expect_status(r, 201);
    char ds[64], job[64], body[512];
    snprintf(ds, sizeof ds, "%s", str(r->json, "id"));
    resp_free(r);

    snprintf(body, sizeof body,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"dense\", \"units\": 3}]}, \"hyperparameters\": {\"epochs\": "
             "3, \"batch_size\": 32}}",
             ds);
    r = http_json(&s, "POST", "/v1/jobs", body);
    expect_status(r, 202);
    snprintf(job, sizeof job, "%s", str(r->json, "id"));
    resp_free(r);

    /* The job's event stream ends after job.finished; over TLS the
     * connection is suspended while the job runs and resumed per event. */
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s/events", job);
    r = http_do(&s, "GET", path, NULL, NULL, 0, NULL);
    expect_status(r, 200);
    assert_non_null(strstr(r->content_type, "text/event-stream"));
    assert_non_null(strstr(r->body, "event: job.epoch"));
    assert_non_null(strstr(r->body, "event: job.finished"));
    resp_free(r);

    json_t *j = wait_job(&s, job, 120);
    assert_string_equal(str(j, "status"), "succeeded");
    json_decref(j);

    /* The dashboard and the public endpoints come over HTTPS too. */
    r = http_do(&s, "GET", "/", NULL, NULL, 0, "");
    expect_status(r, 200);
    assert_non_null(strstr(r->content_type, "text/html"));
    resp_free(r);

    assert_int_equal(srv_stop(&s, SIGTERM), 0);
    srv_cleanup(&s);
}

static void test_untrusted_certificate_is_refused(void **state)
{
    (void)state;
    srv s;
    start_tls(&s, NULL);
    /* The system's CAs do not know the throwaway CA. */
    s.cacert[0] = '\0';
    resp *r = http_get(&s, "/healthz");
    assert_int_equal(r->status, -1);
    assert_int_equal(r->curl_code, CURLE_PEER_FAILED_VERIFICATION);
    resp_free(r);

    /* A CA that did not sign the server's certificate. */
    snprintf(s.cacert, sizeof s.cacert, "%s", file_path("other-ca.pem"));
    r = http_get(&s, "/healthz");
    assert_int_equal(r->curl_code, CURLE_PEER_FAILED_VERIFICATION);
    resp_free(r);

    snprintf(s.cacert, sizeof s.cacert, "%s", file_path("ca.pem"));
    r = http_get(&s, "/healthz");
    expect_status(r, 200);
    resp_free(r);
    assert_int_equal(srv_stop(&s, SIGTERM), 0);
    srv_cleanup(&s);
}

static void test_certificate_for_another_name_is_refused(void **state)
{
    (void)state;
    /* Signed by the right CA, but for a name that is not 127.0.0.1. */
    const char *extra[] = {"--tls-cert", file_path("elsewhere.pem"),
                           "--tls-key",  file_path("server.key"),
                           "--devices",  "none",
                           NULL};
    srv s;
    assert_int_equal(srv_start(&s, NULL, extra), 0);
    snprintf(s.cacert, sizeof s.cacert, "%s", file_path("ca.pem"));
    resp *r = http_get(&s, "/healthz");
    assert_int_equal(r->status, -1);
    assert_int_equal(r->curl_code, CURLE_PEER_FAILED_VERIFICATION);
    resp_free(r);
    assert_int_equal(srv_stop(&s, SIGTERM), 0);
    srv_cleanup(&s);
}

/* Sends a plain HTTP request to the port; returns the bytes that came back
 * before the server closed the connection (or 10 s passed). */
static size_t plain_request(int port, char *buf, size_t size)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    const char *req = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      "Connection: close\r\n\r\n";
    assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    size_t got = 0;
    ssize_t n;
    while (got < size - 1 && (n = read(fd, buf + got, size - 1 - got)) > 0)
        got += (size_t)n;
    buf[got] = '\0';
    close(fd);
    return got;
}

static void test_plain_http_refused_on_tls_port(void **state)
{
    (void)state;
    srv s;
    start_tls(&s, NULL);

    char buf[4096];
    size_t got = plain_request(s.port, buf, sizeof buf);
    /* Whatever came back (a TLS alert, or nothing) is not HTTP. */
    assert_true(got < 5 || strncmp(buf, "HTTP/", 5) != 0);

    /* libcurl speaking plain HTTP gets no reply either. */
    srv plain = s;
    snprintf(plain.base, sizeof plain.base, "http://127.0.0.1:%d", s.port);
    resp *r = http_get(&plain, "/healthz");
    assert_int_equal(r->status, -1);
    resp_free(r);

    /* And the server is unharmed. */
    r = http_get(&s, "/healthz");
    expect_status(r, 200);
    resp_free(r);
    assert_int_equal(srv_stop(&s, SIGTERM), 0);
    srv_cleanup(&s);
}

static void test_bad_tls_files_stop_the_start(void **state)
{
    (void)state;
    char out[4096], flags[2 * PATH_MAX + 64];

    snprintf(flags, sizeof flags, "--tls-cert server.pem");
    assert_int_equal(serve_fails(flags, out, sizeof out), 64);
    assert_non_null(strstr(out, "--tls-key is missing"));

    snprintf(flags, sizeof flags,
             "--tls-cert missing.pem --tls-key server.key");
    assert_int_equal(serve_fails(flags, out, sizeof out), 64);
    assert_non_null(strstr(out, "--tls-cert missing.pem"));

    /* The key where the certificate should be, and the other way round. */
    snprintf(flags, sizeof flags, "--tls-cert server.key --tls-key server.key");
    assert_int_equal(serve_fails(flags, out, sizeof out), 64);
    assert_non_null(strstr(out, "no PEM certificate"));
    snprintf(flags, sizeof flags, "--tls-cert server.pem --tls-key server.pem");
    assert_int_equal(serve_fails(flags, out, sizeof out), 64);
    assert_non_null(strstr(out, "no PEM private key"));

    /* A key that is not the certificate's: found when HTTPS starts, after
     * the data folder was prepared, so only the message is checked. */
    char data[PATH_MAX], cmd[4 * PATH_MAX];
    temp_dir(data);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && timeout 60 '%s' serve --listen 127.0.0.1:0 --data "
             "'%s' --devices none --tls-cert server.pem --tls-key other-ca.key "
             "2>&1",
             files, getenv("TRAINYARD_BIN"), data);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int ws = pclose(p);
    fs_remove_tree(data, NULL);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) != 0);
    assert_non_null(strstr(out, "cannot start HTTPS"));
    assert_null(strstr(out, "listening on"));
}

/* ---- the command-line client over HTTPS ---- */

/* Runs `trainyard ARGS` with its config in cfg (XDG_CONFIG_HOME), stdout
 * and stderr together into out; returns the exit code. */
static int client(const char *cfg, char *out, size_t size, const char *args)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && env -u TRAINYARD_URL -u TRAINYARD_KEY "
             "XDG_CONFIG_HOME='%s' timeout 120 '%s' %s 2>&1 </dev/null",
             files, cfg, getenv("TRAINYARD_BIN"), args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, size - 1, p);
    out[n] = '\0';
    int ws = pclose(p);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

static void test_client_over_https(void **state)
{
    (void)state;
    srv s;
    start_tls(&s, NULL);
    char cfg[PATH_MAX], out[16384], args[4096];
    temp_dir(cfg);
    write_file(file_path("admin-key"), s.key, strlen(s.key));

    /* Without the CA the client refuses the server: exit 7, and says it
     * was the certificate. */
    snprintf(args, sizeof args, "login %s --key-file admin-key", s.base);
    int rc = client(cfg, out, sizeof out, args);
    if (rc != 7)
        fprintf(stderr, "%s\n", out);
    assert_int_equal(rc, 7);
    assert_non_null(strcasestr(out, "certificate"));

    /* With it, login stores the CA with the URL and key. */
    snprintf(args, sizeof args, "login %s --key-file admin-key --cacert ca.pem",
             s.base);
    assert_int_equal(client(cfg, out, sizeof out, args), 0);
    snprintf(args, sizeof args,
             "datasets upload blobs --format csv file=@blobs.csv "
             "label_column=species");
    rc = client(cfg, out, sizeof out, args);
    if (rc != 0)
        fprintf(stderr, "%s\n", out);
    assert_int_equal(rc, 0);
    char *ds = strstr(out, "ds_");
    assert_non_null(ds);
    char ds_id[64];
    snprintf(ds_id, sizeof ds_id, "%.*s",
             (int)strspn(ds, "ds_abcdefghijklmnopqrstuvwxyz234567"), ds);

    /* A job submitted and watched to its end over HTTPS. */
    char job[512];
    snprintf(job, sizeof job,
             "{\"dataset\": \"%s\", \"model\": {\"layers\": [{\"type\": "
             "\"dense\", \"units\": 3}]}, \"hyperparameters\": "
             "{\"epochs\": 2, \"batch_size\": 32}}",
             ds_id);
    write_file(file_path("job.json"), job, strlen(job));
    rc = client(cfg, out, sizeof out, "jobs submit job.json --watch");
    if (rc != 0)
        fprintf(stderr, "%s\n", out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "succeeded"));
    assert_non_null(strstr(out, "epoch 2/2"));

    /* Another CA on the command line overrides the saved one: refused. */
    rc = client(cfg, out, sizeof out, "jobs list --cacert other-ca.pem");
    assert_int_equal(rc, 7);

    /* Plain http:// to the TLS port: no reply, and the hint says why. */
    snprintf(args, sizeof args, "jobs list --url http://127.0.0.1:%d", s.port);
    assert_int_equal(client(cfg, out, sizeof out, args), 7);
    assert_non_null(strstr(out, "only https://"));

    assert_int_equal(srv_stop(&s, SIGTERM), 0);
    srv_cleanup(&s);
    fs_remove_tree(cfg, NULL);
}

/* ---- a given admin key ---- */

static void keygen(char key[128])
{
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "'%s' keygen", getenv("TRAINYARD_BIN"));
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    assert_non_null(fgets(key, 128, p));
    assert_int_equal(pclose(p), 0);
    key[strcspn(key, "\n")] = '\0';
    assert_int_equal(strlen(key), 76);
    assert_int_equal(strncmp(key, "ty_", 3), 0);
}

static long status_with(const srv *s, const char *key)
{
    resp *r = http_do(s, "GET", "/v1/tenants", NULL, NULL, 0, key);
    long st = r->status;
    resp_free(r);
    return st;
}

static void test_admin_key_given(void **state)
{
    (void)state;
    char k1[128], k2[128], other[128];
    keygen(k1);
    keygen(k2);
    keygen(other);
    assert_string_not_equal(k1, k2);

    /* First start: the key from the environment is the admin key; no
     * admin.key file is written. */
    char data[PATH_MAX];
    temp_dir(data);
    srv s;
    setenv("TRAINYARD_ADMIN_KEY", k1, 1);
    int started = srv_start(&s, data, NULL);
    unsetenv("TRAINYARD_ADMIN_KEY");
    assert_int_equal(started, 0);
    assert_string_equal(s.key, "");
    char keyfile[PATH_MAX + 16];
    snprintf(keyfile, sizeof keyfile, "%s/admin.key", data);
    struct stat st;
    assert_int_not_equal(stat(keyfile, &st), 0);
    assert_int_equal(status_with(&s, k1), 200);
    assert_int_equal(status_with(&s, other), 401);
    assert_int_equal(srv_stop(&s, SIGTERM), 0);

    /* Second start, the key rotated through a file (a Docker secret,
     * newline included): the new key joins, the old one still works. */
    char secret[PATH_MAX];
    snprintf(secret, sizeof secret, "%s", file_path("admin-secret"));
    char line[160];
    snprintf(line, sizeof line, "%s\n", k2);
    write_file(secret, line, strlen(line));
    const char *with_file[] = {"--admin-key-file", secret, NULL};
    assert_int_equal(srv_start(&s, data, with_file), 0);
    assert_int_equal(status_with(&s, k2), 200);
    assert_int_equal(status_with(&s, k1), 200);

    /* Both are keys of the one admin tenant. */
    resp *r = http_do(&s, "GET", "/v1/tenants", NULL, NULL, 0, k1);
    json_t *items = json_object_get(r->json, "items");
    assert_int_equal(json_array_size(items), 1);
    char admin[64], path[256], key_id[64];
    snprintf(admin, sizeof admin, "%s", str(json_array_get(items, 0), "id"));
    resp_free(r);
    snprintf(path, sizeof path, "/v1/tenants/%s/keys", admin);
    r = http_do(&s, "GET", path, NULL, NULL, 0, k1);
    expect_status(r, 200);
    assert_int_equal(json_array_size(json_object_get(r->json, "items")), 2);
    resp_free(r);

    /* Revoke the file's key through the API; a restart with the same file
     * must not bring it back. */
    snprintf(key_id, sizeof key_id, "key_%.20s", k2 + 3);
    snprintf(path, sizeof path, "/v1/tenants/%s/keys/%s", admin, key_id);
    r = http_do(&s, "DELETE", path, NULL, NULL, 0, k1);
    assert_true(r->status == 200 || r->status == 204);
    resp_free(r);
    assert_int_equal(status_with(&s, k2), 401);
    assert_int_equal(srv_stop(&s, SIGTERM), 0);
    assert_int_equal(srv_start(&s, data, with_file), 0);
    assert_int_equal(status_with(&s, k2), 401);
    assert_int_equal(status_with(&s, k1), 200);
    assert_int_equal(srv_stop(&s, SIGTERM), 0);
    srv_cleanup(&s);

    /* Bad keys stop the start before the data folder is touched. */
    char out[4096], flags[PATH_MAX + 64];
    write_file(file_path("bad-secret"), "hunter2\n", 8);
    snprintf(flags, sizeof flags, "--admin-key-file bad-secret");
    assert_int_equal(serve_fails(flags, out, sizeof out), 64);
    assert_non_null(strstr(out, "not a trainyard key"));
    assert_null(strstr(out, "hunter2"));
    /* A missing secret file is an error, not "no key given". */
    snprintf(flags, sizeof flags, "--admin-key-file no-such-secret");
    assert_int_equal(serve_fails(flags, out, sizeof out), 64);
    assert_non_null(strstr(out, "no-such-secret"));
    setenv("TRAINYARD_ADMIN_KEY", k1, 1);
    snprintf(flags, sizeof flags, "--admin-key-file admin-secret");
    int rc = serve_fails(flags, out, sizeof out);
    unsetenv("TRAINYARD_ADMIN_KEY");
    assert_int_equal(rc, 64);
    assert_non_null(strstr(out, "given twice"));
}

static int group_setup(void **state)
{
    (void)state;
    temp_dir(files);
    make_blobs_csv(file_path("blobs.csv"), 200, 3);
    /* A throwaway CA, a server certificate it signs for 127.0.0.1 and
     * localhost, and a second CA that signs nothing. */
    sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
       "-nodes -keyout ca.key -out ca.pem -days 2 -subj '/CN=trainyard test "
       "CA' 2>/dev/null");
    sh("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
       "-keyout server.key -out server.csr -subj '/CN=localhost' 2>/dev/null");
    sh("printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > san.cnf");
    sh("openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key "
       "-CAcreateserial -out server.pem -days 2 -extfile san.cnf "
       "2>/dev/null");
    sh("printf 'subjectAltName=DNS:elsewhere.example\\n' > elsewhere.cnf");
    sh("openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key "
       "-CAcreateserial -out elsewhere.pem -days 2 -extfile elsewhere.cnf "
       "2>/dev/null");
    sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
       "-nodes -keyout other-ca.key -out other-ca.pem -days 2 -subj "
       "'/CN=another CA' 2>/dev/null");
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    fs_remove_tree(files, NULL);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_https_end_to_end),
        cmocka_unit_test(test_untrusted_certificate_is_refused),
        cmocka_unit_test(test_certificate_for_another_name_is_refused),
        cmocka_unit_test(test_plain_http_refused_on_tls_port),
        cmocka_unit_test(test_bad_tls_files_stop_the_start),
        cmocka_unit_test(test_admin_key_given),
        cmocka_unit_test(test_client_over_https),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
