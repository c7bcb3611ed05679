/* cluster/slurmrest against a live slurmrestd: the single-node cluster of
 * tests/slurm/cluster.sh. Not a ctest test by itself (it needs root and
 * the cluster); a suite script starts the cluster and runs it as
 *
 *   TRAINYARD_SLURM_ENV=DIR/env test_slurmrest_live
 *
 * Without TRAINYARD_SLURM_ENV it skips (exit 77). It checks, in both auth
 * modes (the token file `scontrol token` wrote, and tokens signed here
 * with the cluster's jwt key): ping; the nodes as 7 MIG slots of 1g.18gb;
 * a one-slice job as nobody that runs and COMPLETES with exit 0 and its
 * gres shown; `exit 3` FAILED with exit 3; a `sleep 60` cancelled; USR1
 * reaching a batch script that traps it; 8 of 7 slices refused with
 * Slurm's message; an unknown job TY_ENOTFOUND; a token file rewritten
 * while the client runs; one client shared by threads while its signed
 * token is renewed under them. Jobs are polled with a bounded loop; nothing
 * asserts on timing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster/slurm_inventory.h"
#include "cluster/slurmrest.h"

#define POLL_LIMIT_S 90

static struct {
    char url[256], key[1024], token_file[1024], user[64], version[32];
    char work[1024];
} env;

static int env_load(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cannot read %s\n", path);
        return -1;
    }
    char line[2048];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        char *eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq = '\0';
        const char *v = eq + 1;
        if (!strcmp(line, "SLURMRESTD_URL"))
            snprintf(env.url, sizeof env.url, "%s", v);
        else if (!strcmp(line, "SLURM_JWT_KEY"))
            snprintf(env.key, sizeof env.key, "%s", v);
        else if (!strcmp(line, "SLURM_TOKEN_FILE"))
            snprintf(env.token_file, sizeof env.token_file, "%s", v);
        else if (!strcmp(line, "SLURM_USER"))
            snprintf(env.user, sizeof env.user, "%s", v);
        else if (!strcmp(line, "SLURM_API_VERSION"))
            snprintf(env.version, sizeof env.version, "%s", v);
        else if (!strcmp(line, "SLURM_WORK_DIR"))
            snprintf(env.work, sizeof env.work, "%s", v);
    }
    fclose(f);
    if (!env.url[0] || !env.key[0] || !env.token_file[0] || !env.user[0] ||
        !env.work[0]) {
        fprintf(stderr, "%s lacks a setting cluster.sh writes\n", path);
        return -1;
    }
    return 0;
}

static slurmrest *client(int signed_mode, const char *token_file)
{
    slurmrest_config cfg = {
        .url = env.url,
        .api_version = env.version,
        .user = env.user,
        .token_file = signed_mode ? NULL : token_file,
        .jwt_key_file = signed_mode ? env.key : NULL,
        .token_lifespan_s = 600,
    };
    slurmrest *c = NULL;
    ty_err err = {0};
    if (slurmrest_create(&cfg, &c, &err) != TY_OK)
        fail_msg("slurmrest_create: %s", err.msg);
    return c;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Submits script as a job with gres (NULL: none); the job's id. */
static long submit(slurmrest *c, const char *name, const char *script,
                   const char *gres)
{
    char out[1200];
    snprintf(out, sizeof out, "%s/%s.out", env.work, name);
    const char *envv[] = {"PATH=/usr/bin:/bin", "TRAINYARD_TEST=1", NULL};
    slurm_submit s = {.name = name,
                      .script = script,
                      .cwd = env.work,
                      .stdout_path = out,
                      .gres = gres,
                      .time_limit_min = 5,
                      .env = envv};
    long id = 0;
    ty_err err = {0};
    if (slurmrest_submit(c, &s, &id, &err) != TY_OK)
        fail_msg("submit %s: %s", name, err.msg);
    assert_true(id > 0);
    return id;
}

/* Polls until the job is in a state `until` accepts (bounded). */
static void wait_job(slurmrest *c, long id, int (*until)(slurm_state),
                     slurm_job_info *info)
{
    ty_err err = {0};
    for (int i = 0; i < POLL_LIMIT_S * 5; i++) {
        if (slurmrest_job(c, id, info, &err) != TY_OK)
            fail_msg("job %ld: %s", id, err.msg);
        if (until(info->state))
            return;
        sleep_ms(200);
    }
    fail_msg("job %ld still %s (%s) after %d s", id, info->state_name,
             info->reason, POLL_LIMIT_S);
}

static int is_running(slurm_state st)
{
    return st == SLURM_ST_RUNNING || slurm_state_terminal(st);
}

static void test_ping(void **state)
{
    (void)state;
    for (int mode = 0; mode < 2; mode++) {
        slurmrest *c = client(mode, env.token_file);
        ty_err err = {0};
        if (slurmrest_ping(c, &err) != TY_OK)
            fail_msg("ping (%s): %s", mode ? "signed" : "token file",
                     err.msg);
        assert_string_equal(slurmrest_version(c), "v0.0.38");
        slurmrest_destroy(c);
    }
}

static void test_nodes_inventory(void **state)
{
    (void)state;
    slurmrest *c = client(1, NULL);
    slurm_node *nodes = NULL;
    size_t n = 0;
    ty_err err = {0};
    if (slurmrest_nodes(c, &nodes, &n, &err) != TY_OK)
        fail_msg("nodes: %s", err.msg);
    assert_int_equal(n, 1);
    assert_string_equal(nodes[0].gres, "gpu:1g.18gb:7");
    inventory *inv = NULL;
    if (slurm_inventory_build(nodes, n, env.url, &inv, &err) != TY_OK)
        fail_msg("inventory: %s", err.msg);
    assert_int_equal(inv->source, INV_SOURCE_SLURM);
    assert_int_equal(inv->nslots, 7);
    for (int i = 0; i < inv->nslots; i++) {
        assert_int_equal(inv->slots[i].kind, INV_SLOT_MIG);
        assert_string_equal(inv->slots[i].profile, "1g.18gb");
    }
    inv_destroy(inv);
    free(nodes);
    slurmrest_destroy(c);
}

/* Runs the one-slice job in auth mode `mode` and checks its whole life. */
static void one_slice_job(int mode)
{
    slurmrest *c = client(mode, env.token_file);
    char name[64];
    snprintf(name, sizeof name, "ty-live-slice-%d-%d", mode, (int)getpid());
    long id = submit(c, name,
                     "#!/bin/bash\nsleep 1; echo $CUDA_VISIBLE_DEVICES\n",
                     "gpu:1g.18gb:1");
    slurm_job_info info;
    ty_err err = {0};
    assert_int_equal(slurmrest_job(c, id, &info, &err), TY_OK);
    if (info.state != SLURM_ST_PENDING && info.state != SLURM_ST_RUNNING &&
        info.state != SLURM_ST_COMPLETING && info.state != SLURM_ST_COMPLETED)
        fail_msg("job %ld just submitted is %s", id, info.state_name);
    wait_job(c, id, slurm_state_terminal, &info);
    if (info.state != SLURM_ST_COMPLETED)
        fail_msg("job %ld ended %s (%s), exit %d signal %d", id,
                 info.state_name, info.reason, info.exit_code,
                 info.exit_signal);
    assert_int_equal(info.exit_code, 0);
    assert_int_equal(info.exit_signal, 0);
    assert_string_equal(info.gres, "gpu:1g.18gb:1");
    assert_string_equal(info.user, env.user);
    assert_string_equal(info.cwd, env.work);
    assert_true(info.node[0] != '\0');
    /* The job saw one of the node's devices. */
    char path[1200], line[64] = "";
    snprintf(path, sizeof path, "%s/%s.out", env.work, name);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    if (!fgets(line, sizeof line, f))
        line[0] = '\0';
    fclose(f);
    line[strcspn(line, "\n")] = '\0';
    if (!line[0])
        fail_msg("job %ld printed no CUDA_VISIBLE_DEVICES", id);
    slurmrest_destroy(c);
}

static void test_job_completes_token_file(void **state)
{
    (void)state;
    one_slice_job(0);
}

static void test_job_completes_signed(void **state)
{
    (void)state;
    one_slice_job(1);
}

static void test_job_fails(void **state)
{
    (void)state;
    slurmrest *c = client(1, NULL);
    long id = submit(c, "ty-live-exit3", "#!/bin/bash\nexit 3\n", NULL);
    slurm_job_info info;
    wait_job(c, id, slurm_state_terminal, &info);
    assert_int_equal(info.state, SLURM_ST_FAILED);
    assert_int_equal(info.exit_code, 3);
    assert_int_equal(info.exit_signal, 0);
    assert_string_equal(info.gres, "");
    slurmrest_destroy(c);
}

static void test_job_cancelled(void **state)
{
    (void)state;
    slurmrest *c = client(1, NULL);
    long id = submit(c, "ty-live-sleep60", "#!/bin/bash\nsleep 60\n",
                     "gpu:1g.18gb:1");
    slurm_job_info info;
    wait_job(c, id, is_running, &info);
    assert_int_equal(info.state, SLURM_ST_RUNNING);
    ty_err err = {0};
    if (slurmrest_cancel(c, id, 0, &err) != TY_OK)
        fail_msg("cancel %ld: %s", id, err.msg);
    wait_job(c, id, slurm_state_terminal, &info);
    assert_int_equal(info.state, SLURM_ST_CANCELLED);
    /* Cancelling an ended job is not an error. */
    assert_int_equal(slurmrest_cancel(c, id, 0, &err), TY_OK);
    slurmrest_destroy(c);
}

/* The fallback the caller may use: USR1 through slurmrestd reaches the
 * batch script itself (v0.0.38 signals every process of the job). */
static void test_job_signalled(void **state)
{
    (void)state;
    slurmrest *c = client(0, env.token_file);
    long id = submit(c, "ty-live-usr1",
                     "#!/bin/bash\ntrap 'exit 42' USR1\n"
                     "for i in $(seq 600); do sleep 0.1; done\nexit 1\n",
                     NULL);
    slurm_job_info info;
    wait_job(c, id, is_running, &info);
    assert_int_equal(info.state, SLURM_ST_RUNNING);
    sleep_ms(500); /* let bash set its trap */
    ty_err err = {0};
    if (slurmrest_cancel(c, id, SIGUSR1, &err) != TY_OK)
        fail_msg("signal %ld: %s", id, err.msg);
    wait_job(c, id, slurm_state_terminal, &info);
    assert_int_equal(info.state, SLURM_ST_FAILED);
    assert_int_equal(info.exit_code, 42);
    /* A signal v0.0.38 cannot name is refused here. */
    assert_int_equal(slurmrest_cancel(c, id, SIGSEGV, &err), TY_EINVAL);
    slurmrest_destroy(c);
}

static void test_refused_and_unknown(void **state)
{
    (void)state;
    slurmrest *c = client(1, NULL);
    const char *envv[] = {"PATH=/usr/bin:/bin", NULL};
    slurm_submit s = {.name = "ty-live-too-many",
                      .script = "#!/bin/bash\ntrue\n",
                      .cwd = env.work,
                      .gres = "gpu:1g.18gb:8",
                      .env = envv};
    long id = 0;
    ty_err err = {0};
    assert_int_equal(slurmrest_submit(c, &s, &id, &err), TY_EINVAL);
    if (!strstr(err.msg, "Requested node configuration is not available"))
        fail_msg("unexpected message: %s", err.msg);
    slurm_job_info info;
    assert_int_equal(slurmrest_job(c, 987654321, &info, &err), TY_ENOTFOUND);
    assert_int_equal(slurmrest_cancel(c, 987654321, 0, &err), TY_ENOTFOUND);
    slurmrest_destroy(c);
}

/* A token file rewritten while the client runs: a wrong token fails (as an
 * auth failure, TY_EIO) and the right one, written later, is read again. */
static void test_token_file_reread(void **state)
{
    (void)state;
    char path[1200], good[4096] = "";
    snprintf(path, sizeof path, "%s/ty-live-token-%d", env.work, (int)getpid());
    FILE *f = fopen(env.token_file, "r");
    assert_non_null(f);
    assert_non_null(fgets(good, sizeof good, f));
    fclose(f);

    f = fopen(path, "w");
    fputs(good, f);
    fclose(f);
    slurmrest *c = client(0, path);
    ty_err err = {0};
    assert_int_equal(slurmrest_ping(c, &err), TY_OK);

    sleep_ms(20);
    f = fopen(path, "w");
    fputs("eyJhbGciOiJIUzI1NiJ9.e30.not-a-signature\n", f);
    fclose(f);
    assert_int_equal(slurmrest_ping(c, &err), TY_EIO);
    assert_null(strstr(err.msg, "not-a-signature"));

    sleep_ms(20);
    f = fopen(path, "w");
    fputs(good, f);
    fclose(f);
    if (slurmrest_ping(c, &err) != TY_OK)
        fail_msg("ping after the good token came back: %s", err.msg);
    slurmrest_destroy(c);
    unlink(path);
}

static void *ping_loop(void *arg)
{
    slurmrest *c = arg;
    for (int i = 0; i < 30; i++) {
        ty_err err = {0};
        if (slurmrest_ping(c, &err) != TY_OK)
            return strdup(err.msg);
        sleep_ms(150);
    }
    return NULL;
}

/* Four threads on one client whose tokens live 3 s: renewed (after 2 s)
 * while the others use it. */
static void test_threads_share_a_client(void **state)
{
    (void)state;
    slurmrest_config cfg = {.url = env.url,
                            .user = env.user,
                            .jwt_key_file = env.key,
                            .token_lifespan_s = 3};
    slurmrest *c = NULL;
    ty_err err = {0};
    assert_int_equal(slurmrest_create(&cfg, &c, &err), TY_OK);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, ping_loop, c), 0);
    char *first = NULL;
    for (int i = 0; i < 4; i++) {
        void *r = NULL;
        pthread_join(t[i], &r);
        if (r && !first)
            first = r;
        else
            free(r);
    }
    if (first)
        fail_msg("a thread's ping failed: %s", first);
    slurmrest_destroy(c);
}

int main(void)
{
    const char *path = getenv("TRAINYARD_SLURM_ENV");
    if (!path || !*path) {
        fprintf(stderr, "test_slurmrest_live: TRAINYARD_SLURM_ENV is not set "
                        "(tests/slurm/cluster.sh start DIR prints it); "
                        "skipped\n");
        return 77;
    }
    if (env_load(path) != 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ping),
        cmocka_unit_test(test_nodes_inventory),
        cmocka_unit_test(test_job_completes_token_file),
        cmocka_unit_test(test_job_completes_signed),
        cmocka_unit_test(test_job_fails),
        cmocka_unit_test(test_job_cancelled),
        cmocka_unit_test(test_job_signalled),
        cmocka_unit_test(test_refused_and_unknown),
        cmocka_unit_test(test_token_file_reread),
        cmocka_unit_test(test_threads_share_a_client),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
