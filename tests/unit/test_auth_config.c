/* Unit tests for API keys (format, hashing, constant-time compare, checks
 * against a store, bootstrap) and `serve` flag parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/fsutil.h"
#include "common/sha256.h"
#include "server/auth.h"
#include "app/config.h"
#include "serve/modelcache.h"
#include "testutil.h"

static void test_sha256_known_vectors(void **state)
{
    uint8_t d[32];
    char hex[65];
    sha256_digest("", 0, d);
    sha256_hex(d, hex);
    assert_string_equal(
        hex,
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sha256_digest("abc", 3, d);
    sha256_hex(d, hex);
    assert_string_equal(
        hex,
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    /* Streaming in odd pieces gives the same digest as one shot. */
    const char *msg =
        "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha256_ctx c;
    sha256_init(&c);
    size_t len = strlen(msg);
    for (size_t i = 0; i < len; i += 3)
        sha256_update(&c, msg + i, len - i < 3 ? len - i : 3);
    sha256_final(&c, d);
    sha256_hex(d, hex);
    assert_string_equal(
        hex,
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_key_format(void **state)
{
    char key[AUTH_KEY_LEN + 1], id[TY_ID_MAX], id2[TY_ID_MAX];
    assert_int_equal(auth_key_generate(key, id, NULL), TY_OK);
    assert_int_equal(strlen(key), AUTH_KEY_LEN);
    assert_true(strncmp(key, "ty_", 3) == 0);
    assert_true(strncmp(id, "key_", 4) == 0);
    assert_int_equal(auth_key_id(key, id2), TY_OK);
    assert_string_equal(id, id2);
    char other[AUTH_KEY_LEN + 1];
    assert_int_equal(auth_key_generate(other, id2, NULL), TY_OK);
    assert_string_not_equal(key, other);
    assert_int_equal(auth_key_id("ty_short", id2), TY_EINVAL);
    key[10] = '!';
    assert_int_equal(auth_key_id(key, id2), TY_EINVAL);
}

static void test_equal_ct(void **state)
{
    uint8_t a[32] = {0}, b[32] = {0};
    assert_true(auth_equal_ct(a, b, 32));
    b[31] = 1;
    assert_false(auth_equal_ct(a, b, 32));
    b[31] = 0;
    b[0] = 0x80;
    assert_false(auth_equal_ct(a, b, 32));
}

static void test_bootstrap_and_check(void **state)
{
    const char *dir = tu_tmpdir; /* made and removed around the test */
    store *st;
    ty_err err;
    assert_int_equal(store_open(dir, &st, &err), TY_OK);
    char key[AUTH_KEY_LEN + 1];
    int created = 0;
    assert_int_equal(auth_bootstrap(st, dir, key, &created, &err), TY_OK);
    assert_int_equal(created, 1);
    char path[300];
    snprintf(path, sizeof path, "%s/admin.key", dir);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    char *text;
    assert_int_equal(fs_read_all(path, 1024, &text, NULL, &err), TY_OK);
    assert_int_equal(strncmp(text, key, AUTH_KEY_LEN), 0);
    free(text);
    /* Only the hash is stored: the key's text is nowhere in the database. */
    snprintf(path, sizeof path, "%s/trainyard.db", dir);
    size_t len;
    assert_int_equal(fs_read_all(path, 1 << 24, &text, &len, &err), TY_OK);
    assert_null(memmem(text, len, key + 4 + 20, 52));
    free(text);
    /* A second start creates nothing. */
    char again[AUTH_KEY_LEN + 1];
    assert_int_equal(auth_bootstrap(st, dir, again, &created, &err), TY_OK);
    assert_int_equal(created, 0);

    char header[128];
    store_key who;
    snprintf(header, sizeof header, "Bearer %s", key);
    assert_int_equal(auth_check(st, header, &who, &err), TY_OK);
    assert_int_equal(who.is_admin, 1);
    snprintf(header, sizeof header, "bearer   %s", key);
    assert_int_equal(auth_check(st, header, &who, &err), TY_OK);
    assert_int_equal(auth_check(st, NULL, &who, &err), TY_EINVAL);
    assert_int_equal(auth_check(st, "Basic abc", &who, &err), TY_EINVAL);
    assert_int_equal(auth_check(st, "Bearer nonsense", &who, &err),
                     TY_ENOTFOUND);
    /* The right id with a wrong secret. */
    char forged[AUTH_KEY_LEN + 1];
    memcpy(forged, key, sizeof forged);
    forged[AUTH_KEY_LEN - 1] = forged[AUTH_KEY_LEN - 1] == 'a' ? 'b' : 'a';
    snprintf(header, sizeof header, "Bearer %s", forged);
    assert_int_equal(auth_check(st, header, &who, &err), TY_ENOTFOUND);
    assert_null(strstr(err.msg, forged));
    store_close(st);
}

static void test_config_parse(void **state)
{
    ty_config c;
    config_defaults(&c);
    assert_string_equal(c.host, "127.0.0.1");
    assert_int_equal(c.port, 8080);
    assert_string_equal(c.data_dir, "./var");
    char *argv[] = {
        "serve",        "--listen", "0.0.0.0:9000",       "--data=/tmp/x",
        "--threads",    "8",        "--max-upload-bytes", "512M",
        "--max-jobs=2", NULL};
    int help = 0;
    ty_err err;
    assert_int_equal(config_parse_serve(9, argv, &c, &help, &err), TY_OK);
    assert_string_equal(c.host, "0.0.0.0");
    assert_int_equal(c.port, 9000);
    assert_string_equal(c.data_dir, "/tmp/x");
    assert_int_equal(c.http_threads, 8);
    assert_int_equal(c.max_jobs, 2);
    assert_int_equal(c.max_upload_bytes, 512ULL << 20);
    char *v6[] = {"serve", "--listen", "[::1]:0", NULL};
    assert_int_equal(config_parse_serve(3, v6, &c, &help, &err), TY_OK);
    assert_int_equal(c.ipv6, 1);
    assert_string_equal(c.host, "::1");
    assert_int_equal(c.port, 0);
    char *h[] = {"serve", "--help", NULL};
    assert_int_equal(config_parse_serve(2, h, &c, &help, &err), TY_OK);
    assert_int_equal(help, 1);

    char *bad[][3] = {
        {"serve", "--listen", "8080"}, {"serve", "--listen", "host:99999"},
        {"serve", "--threads", "0"},   {"serve", "--max-upload-bytes", "lots"},
        {"serve", "--bogus", "1"},     {"serve", "stray", "x"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err.msg[0] = '\0';
        assert_int_equal(config_parse_serve(3, bad[i], &c, &help, &err),
                         TY_EINVAL);
        assert_true(strlen(err.msg) > 0);
    }
    /* --min-free-bytes: a size, 0 turns the /readyz check off */
    config_defaults(&c);
    assert_int_equal(c.min_free_bytes, 256ULL << 20);
    char *mf[] = {"serve", "--min-free-bytes", "1G", NULL};
    assert_int_equal(config_parse_serve(3, mf, &c, &help, &err), TY_OK);
    assert_int_equal(c.min_free_bytes, 1ULL << 30);
    char *mf0[] = {"serve", "--min-free-bytes", "0", NULL};
    assert_int_equal(config_parse_serve(3, mf0, &c, &help, &err), TY_OK);
    assert_int_equal(c.min_free_bytes, 0);
    char *mfbad[] = {"serve", "--min-free-bytes", "lots", NULL};
    assert_int_equal(config_parse_serve(3, mfbad, &c, &help, &err), TY_EINVAL);
    char *missing[] = {"serve", "--data", NULL};
    assert_int_equal(config_parse_serve(2, missing, &c, &help, &err),
                     TY_EINVAL);
    assert_non_null(strstr(err.msg, "needs a value"));

    uint64_t n;
    assert_int_equal(config_parse_size("64K", &n), TY_OK);
    assert_int_equal(n, 65536);
    assert_int_equal(config_parse_size("2GiB", &n), TY_OK);
    assert_int_equal(n, 2ULL << 30);
    assert_int_equal(config_parse_size("-1", &n), TY_EINVAL);
    assert_int_equal(config_parse_size("1X", &n), TY_EINVAL);
}

/* --fetch-allow-networks: none by default; a list of addresses and networks,
 * checked at startup. */
static void test_config_fetch_allow_networks(void **state)
{
    ty_config c;
    config_defaults(&c);
    assert_string_equal(c.fetch_allow_networks, "");
    int help = 0;
    ty_err err;
    char *ok[] = {"serve", "--fetch-allow-networks",
                  "10.0.0.0/8,127.0.0.1, fd00::/8", NULL};
    assert_int_equal(config_parse_serve(3, ok, &c, &help, &err), TY_OK);
    assert_string_equal(c.fetch_allow_networks,
                        "10.0.0.0/8,127.0.0.1, fd00::/8");
    char *bad[] = {"serve", "--fetch-allow-networks=localhost", NULL};
    assert_int_equal(config_parse_serve(2, bad, &c, &help, &err), TY_EINVAL);
    assert_non_null(strstr(err.msg, "'localhost' is not an IPv4 or IPv6"));
    assert_string_equal(err.field, "--fetch-allow-networks");
}

/* --serve-device: auto by default (the model's training device when the
 * server has it), cuda is device 0; a device the binary or the machine
 * lacks is a startup error from the model cache, naming the flag (this
 * test machine has no GPU: with or without CUDA built in). */
static void test_config_serve_device(void **state)
{
    ty_config c;
    config_defaults(&c);
    assert_int_equal(c.serve_device, PLACE_DEVICE_AUTO);
    int help = 0;
    ty_err err = {0};
    char *cuda[] = {"serve", "--serve-device", "cuda", NULL};
    assert_int_equal(config_parse_serve(3, cuda, &c, &help, &err), TY_OK);
    assert_int_equal(c.serve_device, 0);
    char *cuda3[] = {"serve", "--serve-device=cuda:3", NULL};
    assert_int_equal(config_parse_serve(2, cuda3, &c, &help, &err), TY_OK);
    assert_int_equal(c.serve_device, 3);
    char *cpu[] = {"serve", "--serve-device", "cpu", NULL};
    assert_int_equal(config_parse_serve(3, cpu, &c, &help, &err), TY_OK);
    assert_int_equal(c.serve_device, -1);
    char *aut[] = {"serve", "--serve-device", "auto", NULL};
    assert_int_equal(config_parse_serve(3, aut, &c, &help, &err), TY_OK);
    assert_int_equal(c.serve_device, PLACE_DEVICE_AUTO);
    const char *bad[] = {"gpu",  "cuda:", "cuda:-1",    "cuda:x", "cuda:1x",
                         "CUDA", "",      "cuda:99999", "Auto"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *argv[] = {"serve", "--serve-device", (char *)bad[i], NULL};
        err.msg[0] = '\0';
        err.field[0] = '\0';
        assert_int_equal(config_parse_serve(3, argv, &c, &help, &err),
                         TY_EINVAL);
        assert_non_null(strstr(err.msg, "auto, cpu, cuda or cuda:N"));
        assert_string_equal(err.field, "--serve-device");
    }

    model_cache *mc = model_cache_create_on(4, -1, &err);
    assert_non_null(mc);
    model_cache_destroy(mc);
    err.msg[0] = '\0';
    mc = model_cache_create_on(4, 1000, &err);
    if (mc) {
        /* A machine with 1001 GPUs: nothing to check here. */
        model_cache_destroy(mc);
        return;
    }
    assert_non_null(strstr(err.msg, "--serve-device"));
    print_message("cuda:1000 refused: %s\n", err.msg);
}

/* --train-device: auto by default; cpu, cuda, cuda:N, auto parse; junk is
 * refused naming the flag; the last one given wins (the test harness puts
 * --train-device cpu first, and a test may name another after it). */
static void test_config_train_device(void **state)
{
    ty_config c;
    config_defaults(&c);
    assert_int_equal(c.train_device, PLACE_DEVICE_AUTO);
    int help = 0;
    ty_err err = {0};
    char *two[] = {"serve", "--train-device", "cpu", "--train-device=cuda:2",
                   NULL};
    assert_int_equal(config_parse_serve(4, two, &c, &help, &err), TY_OK);
    assert_int_equal(c.train_device, 2);
    char *cuda[] = {"serve", "--train-device", "cuda", NULL};
    assert_int_equal(config_parse_serve(3, cuda, &c, &help, &err), TY_OK);
    assert_int_equal(c.train_device, 0);
    char *cpu[] = {"serve", "--train-device", "cpu", NULL};
    assert_int_equal(config_parse_serve(3, cpu, &c, &help, &err), TY_OK);
    assert_int_equal(c.train_device, PLACE_DEVICE_CPU);
    char *aut[] = {"serve", "--train-device=auto", NULL};
    assert_int_equal(config_parse_serve(2, aut, &c, &help, &err), TY_OK);
    assert_int_equal(c.train_device, PLACE_DEVICE_AUTO);
    const char *bad[] = {"gpu", "cuda:", "cuda:-1", "cuda:x", "", "mig:0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *argv[] = {"serve", "--train-device", (char *)bad[i], NULL};
        err.msg[0] = '\0';
        assert_int_equal(config_parse_serve(3, argv, &c, &help, &err),
                         TY_EINVAL);
        assert_non_null(strstr(err.msg, "--train-device needs auto, cpu"));
        assert_string_equal(err.field, "--train-device");
    }
    char *none[] = {"serve", "--train-device", NULL};
    assert_int_equal(config_parse_serve(2, none, &c, &help, &err), TY_EINVAL);

    /* The usage names the flag and its default. */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    config_usage(f);
    fclose(f);
    assert_non_null(strstr(text, "--train-device DEV"));
    assert_non_null(strstr(text, "(default auto)"));
    free(text);
}

/* A given admin key: read from a file (whitespace around it ignored) or the
 * environment's value, never both; made the admin key of an empty store,
 * added to the admin tenant later, and never revived once revoked. */
static void test_given_admin_key(void **state)
{
    const char *dir = tu_tmpdir; /* made and removed around the test */
    ty_err err;
    char k1[AUTH_KEY_LEN + 1], k2[AUTH_KEY_LEN + 1], id1[TY_ID_MAX],
        id2[TY_ID_MAX], got[AUTH_KEY_LEN + 1];
    assert_int_equal(auth_key_generate(k1, id1, &err), TY_OK);
    assert_int_equal(auth_key_generate(k2, id2, &err), TY_OK);

    char file[300], text[200];
    snprintf(file, sizeof file, "%s/secret", dir);
    snprintf(text, sizeof text, "  %s\r\n\n", k1);
    assert_int_equal(fs_write_atomic(file, text, strlen(text), 0600, &err),
                     TY_OK);
    assert_int_equal(auth_key_given(file, NULL, got, &err), TY_OK);
    assert_string_equal(got, k1);
    assert_int_equal(auth_key_given("", k2, got, &err), TY_OK);
    assert_string_equal(got, k2);
    assert_int_equal(auth_key_given(NULL, "", got, &err), TY_ENOTFOUND);
    assert_int_equal(auth_key_given(file, k2, got, &err), TY_EINVAL);
    assert_non_null(strstr(err.msg, "given twice"));
    assert_int_equal(auth_key_given(NULL, "ty_short", got, &err), TY_EINVAL);
    assert_non_null(strstr(err.msg, "TRAINYARD_ADMIN_KEY"));
    assert_null(strstr(err.msg, "ty_short"));
    char upper[AUTH_KEY_LEN + 1];
    memcpy(upper, k1, sizeof upper);
    upper[10] = 'A';
    assert_int_equal(auth_key_given(NULL, upper, got, &err), TY_EINVAL);
    char missing[320];
    snprintf(missing, sizeof missing, "%s/none", dir);
    assert_int_equal(auth_key_given(missing, NULL, got, &err), TY_EINVAL);
    assert_non_null(strstr(err.msg, "--admin-key-file"));

    store *st;
    assert_int_equal(store_open(dir, &st, &err), TY_OK);
    store_admin_key_result r;
    assert_int_equal(auth_bootstrap_given(st, k1, &r, &err), TY_OK);
    assert_int_equal(r, STORE_ADMIN_KEY_CREATED);
    assert_int_equal(auth_bootstrap_given(st, k1, &r, &err), TY_OK);
    assert_int_equal(r, STORE_ADMIN_KEY_PRESENT);
    assert_int_equal(auth_bootstrap_given(st, k2, &r, &err), TY_OK);
    assert_int_equal(r, STORE_ADMIN_KEY_ADDED);
    /* No admin.key: the key lives where it was given. */
    char path[320];
    snprintf(path, sizeof path, "%s/admin.key", dir);
    struct stat sb;
    assert_int_not_equal(stat(path, &sb), 0);
    /* A generated bootstrap sees keys and makes none. */
    int created = 1;
    char made[AUTH_KEY_LEN + 1];
    assert_int_equal(auth_bootstrap(st, dir, made, &created, &err), TY_OK);
    assert_int_equal(created, 0);

    char header[128];
    store_key who1, who2;
    snprintf(header, sizeof header, "Bearer %s", k1);
    assert_int_equal(auth_check(st, header, &who1, &err), TY_OK);
    snprintf(header, sizeof header, "Bearer %s", k2);
    assert_int_equal(auth_check(st, header, &who2, &err), TY_OK);
    assert_int_equal(who1.is_admin, 1);
    assert_int_equal(who2.is_admin, 1);
    assert_string_equal(who1.tenant_id, who2.tenant_id);

    assert_int_equal(store_key_revoke(st, who2.tenant_id, id2, &err), TY_OK);
    assert_int_equal(auth_bootstrap_given(st, k2, &r, &err), TY_OK);
    assert_int_equal(r, STORE_ADMIN_KEY_REVOKED);
    assert_int_equal(auth_check(st, header, &who2, &err), TY_ENOTFOUND);

    /* The same id with another secret is a conflict, not a new key. */
    char forged[AUTH_KEY_LEN + 1];
    memcpy(forged, k1, sizeof forged);
    forged[AUTH_KEY_LEN - 1] = forged[AUTH_KEY_LEN - 1] == 'a' ? 'b' : 'a';
    assert_int_equal(auth_bootstrap_given(st, forged, &r, &err), TY_ECONFLICT);
    store_close(st);
}

static void test_config_tls(void **state)
{
    ty_config c;
    config_defaults(&c);
    assert_string_equal(c.tls_cert, "");
    int help = 0;
    ty_err err;
    char *both[] = {"serve", "--tls-cert", "c.pem", "--tls-key=k.pem", NULL};
    assert_int_equal(config_parse_serve(4, both, &c, &help, &err), TY_OK);
    assert_string_equal(c.tls_cert, "c.pem");
    assert_string_equal(c.tls_key, "k.pem");
    config_defaults(&c);
    char *cert_only[] = {"serve", "--tls-cert", "c.pem", NULL};
    assert_int_equal(config_parse_serve(3, cert_only, &c, &help, &err),
                     TY_EINVAL);
    assert_string_equal(err.field, "--tls-key");
    config_defaults(&c);
    char *key_only[] = {"serve", "--tls-key", "k.pem", NULL};
    assert_int_equal(config_parse_serve(3, key_only, &c, &help, &err),
                     TY_EINVAL);
    assert_string_equal(err.field, "--tls-cert");
    config_defaults(&c);
    char *empty[] = {"serve", "--admin-key-file=", NULL};
    assert_int_equal(config_parse_serve(2, empty, &c, &help, &err), TY_EINVAL);
}

/* The slow-client and auth-throttle flags (issue 16). */
static void test_config_client_limits(void **state)
{
    (void)state;
    ty_config c;
    config_defaults(&c);
    assert_int_equal(c.max_connections, 0);
    assert_int_equal(c.per_ip_connections, 256);
    assert_int_equal(c.header_timeout_s, 10);
    assert_int_equal(c.body_timeout_s, 20);
    assert_int_equal(c.body_min_rate, 1024);
    assert_int_equal(c.request_timeout_s, 3600);
    assert_true(c.auth_fail_rate == 1.0);
    assert_int_equal(c.auth_fail_burst, 30);
    int help = 0;
    ty_err err;
    char *all[] = {"serve",
                   "--max-connections=5000",
                   "--per-ip-connections=0",
                   "--header-timeout=3",
                   "--body-timeout=0",
                   "--body-min-rate=100",
                   "--request-timeout=60",
                   "--auth-fail-rate=0.5",
                   "--auth-fail-burst=7",
                   NULL};
    assert_int_equal(config_parse_serve(9, all, &c, &help, &err), TY_OK);
    assert_int_equal(c.max_connections, 5000);
    assert_int_equal(c.per_ip_connections, 0);
    assert_int_equal(c.header_timeout_s, 3);
    assert_int_equal(c.body_timeout_s, 0);
    assert_int_equal(c.body_min_rate, 100);
    assert_int_equal(c.request_timeout_s, 60);
    assert_true(c.auth_fail_rate == 0.5);
    assert_int_equal(c.auth_fail_burst, 7);
    const char *bad[][2] = {{"--header-timeout", "-1"},
                            {"--auth-fail-rate", "fast"},
                            {"--auth-fail-rate", "-2"},
                            {"--auth-fail-burst", "0"},
                            {"--per-ip-connections", "x"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        config_defaults(&c);
        char *argv[] = {"serve", (char *)bad[i][0], (char *)bad[i][1], NULL};
        assert_int_equal(config_parse_serve(3, argv, &c, &help, &err),
                         TY_EINVAL);
        assert_string_equal(err.field, bad[i][0]);
    }
}

/* --executor and the Slurm settings: defaults, values, refusals. */
static void test_config_executor(void **state)
{
    (void)state;
    ty_config c;
    ty_err err = {0};
    int help = 0;
    config_defaults(&c);
    assert_int_equal(c.executor_slurm, 0);
    assert_string_equal(c.slurm_api_version, "v0.0.38");
    assert_string_equal(c.slurm_workdir, "/tmp");
    char *argv[] = {"serve", "--executor", "slurm", "--slurm-url",
                    "http://head:6820", "--slurm-user", "trainyard",
                    "--slurm-jwt-key", "/etc/slurm/jwt.key", "--slurm-gpus",
                    "sim", "--slurm-partition", "gpu", "--slurm-poll", "0.5",
                    NULL};
    assert_int_equal(config_parse_serve(15, argv, &c, &help, &err), TY_OK);
    assert_int_equal(c.executor_slurm, 1);
    assert_string_equal(c.slurm_url, "http://head:6820");
    assert_string_equal(c.slurm_user, "trainyard");
    assert_string_equal(c.slurm_jwt_key, "/etc/slurm/jwt.key");
    assert_string_equal(c.slurm_partition, "gpu");
    assert_int_equal(c.slurm_gpu_sim, 1);
    assert_true(c.slurm_poll_s == 0.5);
    /* A value that goes into the batch script between quotes may hold no
     * quote; unknown choices are refused, naming the flag. */
    char *bad[][3] = {{"serve", "--executor", "kubernetes"},
                      {"serve", "--slurm-gpus", "rocm"},
                      {"serve", "--slurm-server-url", "http://x/'; rm -rf /"},
                      {"serve", "--slurm-user", ""}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err.msg[0] = '\0';
        assert_int_equal(config_parse_serve(3, bad[i], &c, &help, &err),
                         TY_EINVAL);
        assert_non_null(strstr(err.msg, bad[i][1]));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_known_vectors),
        cmocka_unit_test(test_key_format),
        cmocka_unit_test(test_equal_ct),
        cmocka_unit_test_setup_teardown(test_bootstrap_and_check,
                                        tu_tmpdir_setup, tu_tmpdir_teardown),
        cmocka_unit_test(test_config_parse),
        cmocka_unit_test(test_config_executor),
        cmocka_unit_test(test_config_fetch_allow_networks),
        cmocka_unit_test(test_config_serve_device),
        cmocka_unit_test(test_config_train_device),
        cmocka_unit_test_setup_teardown(test_given_admin_key, tu_tmpdir_setup,
                                        tu_tmpdir_teardown),
        cmocka_unit_test(test_config_tls),
        cmocka_unit_test(test_config_client_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
