/* Unit tests for cluster/slurmrest: HMAC-SHA256 against RFC 4231, the HS256
 * JWT Slurm's auth/jwt takes against a token made with Python's hmac, the
 * config checks of slurmrest_create, the state names, and the reading of
 * v0.0.38 answers recorded from a live slurmrestd (tests/slurm/data/
 * v0.0.38, made with tests/slurm/cluster.sh): a submit, a job pending,
 * running, completed, failed (`exit 3`), cancelled, signalled and killed,
 * Slurm's refusals (8 of 7 MIG devices), an unknown job and a refused
 * token, and the node list. The live daemon itself is
 * tests/slurm/test_slurmrest_live.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/slurmrest.h"
#include "cluster/slurm.h"
#include "cluster/slurmrest_jwt.h"
#include "cluster/slurmrest_v0038.h"
#include "testutil.h"

/* tests/slurm/data/v0.0.38/<name> parsed (the caller decrefs). */
static json_t *recorded(const char *name)
{
    char rel[256], path[PATH_MAX];
    snprintf(rel, sizeof rel, "tests/slurm/data/v0.0.38/%s", name);
    tu_source_path(path, sizeof path, rel);
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    if (!doc)
        fail_msg("%s: %s", path, je.text);
    return doc;
}

static void hex(const uint8_t *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

static void test_hmac_rfc4231(void **state)
{
    (void)state;
    uint8_t mac[32];
    char h[65];
    /* RFC 4231 test case 2. */
    const char *msg = "what do ya want for nothing?";
    slurmrest_hmac_sha256((const uint8_t *)"Jefe", 4, msg, strlen(msg), mac);
    hex(mac, 32, h);
    assert_string_equal(
        h, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    /* Test case 6: a key longer than the block is hashed first. */
    uint8_t key[131];
    memset(key, 0xaa, sizeof key);
    msg = "Test Using Larger Than Block-Size Key - Hash Key First";
    slurmrest_hmac_sha256(key, sizeof key, msg, strlen(msg), mac);
    hex(mac, 32, h);
    assert_string_equal(
        h, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

static void test_base64url(void **state)
{
    (void)state;
    char out[16];
    assert_int_equal(slurmrest_base64url((const uint8_t *)"f", 1, out, 16), 2);
    assert_string_equal(out, "Zg");
    assert_int_equal(slurmrest_base64url((const uint8_t *)"fo", 2, out, 16), 3);
    assert_string_equal(out, "Zm8");
    assert_int_equal(slurmrest_base64url((const uint8_t *)"foo", 3, out, 16),
                     4);
    assert_string_equal(out, "Zm9v");
    const uint8_t url[] = {0xfb, 0xff, 0xfe};
    slurmrest_base64url(url, 3, out, 16);
    assert_string_equal(out, "-__-");
    assert_int_equal(slurmrest_base64url((const uint8_t *)"foo", 3, out, 4), 0);
}

static void test_jwt_known_vector(void **state)
{
    (void)state;
    /* Made with Python: base64url(header) "." base64url(claims), signed
     * with hmac.new(bytes(range(32)), ..., hashlib.sha256). */
    uint8_t key[32];
    for (int i = 0; i < 32; i++)
        key[i] = (uint8_t)i;
    char tok[512];
    ty_err err = {0};
    assert_int_equal(slurmrest_jwt_sign(key, sizeof key, "nobody", 1700000000,
                                        1700001800, tok, sizeof tok, &err),
                     TY_OK);
    assert_string_equal(
        tok, "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
             "eyJleHAiOjE3MDAwMDE4MDAsImlhdCI6MTcwMDAwMDAwMCwic3VuIjoibm9ib2R5"
             "In0.cNchj7oIsCr1dwlMe46hXrFm5DE-7VTiCfrKNhvdcBE");
    /* A name that would need escaping in the claims is refused. */
    assert_int_equal(slurmrest_jwt_sign(key, sizeof key, "a\"b", 1, 2, tok,
                                        sizeof tok, &err),
                     TY_EINVAL);
    assert_int_equal(slurmrest_jwt_sign(key, sizeof key, "nobody", 1, 2, tok,
                                        20, &err),
                     TY_EINVAL);
}

static void test_create_checks(void **state)
{
    (void)state;
    char dir[PATH_MAX], tok[PATH_MAX + 16], key[PATH_MAX + 16];
    assert_int_equal(tu_tmpdir_make(dir, sizeof dir), 0);
    snprintf(tok, sizeof tok, "%s/token", dir);
    snprintf(key, sizeof key, "%s/jwt.key", dir);
    FILE *f = fopen(tok, "w");
    fputs("SLURM_JWT=abc\n", f);
    fclose(f);
    f = fopen(key, "w");
    fputs("0123456789abcdef0123456789abcdef", f);
    fclose(f);

    slurmrest *c = NULL;
    ty_err err = {0};
    slurmrest_config cfg = {.url = "http://127.0.0.1:1", .user = "nobody",
                            .token_file = tok};
    assert_int_equal(slurmrest_create(&cfg, &c, &err), TY_OK);
    assert_string_equal(slurmrest_version(c), "v0.0.38");
    slurmrest_destroy(c);

    cfg.token_file = NULL;
    cfg.jwt_key_file = key;
    assert_int_equal(slurmrest_create(&cfg, &c, &err), TY_OK);
    slurmrest_destroy(c);

    slurmrest_config bad = cfg;
    bad.url = "ftp://x";
    assert_int_equal(slurmrest_create(&bad, &c, &err), TY_EINVAL);
    assert_string_equal(err.field, "url");
    bad = cfg;
    bad.api_version = "v0.0.40";
    assert_int_equal(slurmrest_create(&bad, &c, &err), TY_EINVAL);
    assert_string_equal(err.field, "api_version");
    bad = cfg;
    bad.user = "";
    assert_int_equal(slurmrest_create(&bad, &c, &err), TY_EINVAL);
    assert_string_equal(err.field, "user");
    bad = cfg;
    bad.token_file = tok; /* both */
    assert_int_equal(slurmrest_create(&bad, &c, &err), TY_EINVAL);
    bad = cfg;
    bad.jwt_key_file = NULL; /* neither */
    assert_int_equal(slurmrest_create(&bad, &c, &err), TY_EINVAL);
    bad = cfg;
    bad.jwt_key_file = "/nonexistent/jwt.key";
    assert_int_equal(slurmrest_create(&bad, &c, &err), TY_EINVAL);
    assert_string_equal(err.field, "jwt_key_file");
    assert_null(c);

    /* Nothing listens on port 1: a transport failure is TY_EIO. */
    cfg.timeout_s = 2;
    assert_int_equal(slurmrest_create(&cfg, &c, &err), TY_OK);
    assert_int_equal(slurmrest_ping(c, &err), TY_EIO);
    assert_non_null(strstr(err.msg, "127.0.0.1:1"));
    slurmrest_destroy(c);
    tu_tmpdir_remove(dir);
}

static void test_states(void **state)
{
    (void)state;
    assert_int_equal(slurm_state_parse("PENDING"), SLURM_ST_PENDING);
    assert_int_equal(slurm_state_parse("CANCELLED+"), SLURM_ST_CANCELLED);
    assert_int_equal(slurm_state_parse("OUT_OF_MEMORY"),
                     SLURM_ST_OUT_OF_MEMORY);
    assert_int_equal(slurm_state_parse("REQUEUED"), SLURM_ST_UNKNOWN);
    assert_int_equal(slurm_state_parse(NULL), SLURM_ST_UNKNOWN);
    assert_string_equal(slurm_state_name(SLURM_ST_NODE_FAIL), "NODE_FAIL");
    assert_string_equal(slurm_state_name(SLURM_ST_UNKNOWN), "UNKNOWN");
    assert_false(slurm_state_terminal(SLURM_ST_RUNNING));
    assert_false(slurm_state_terminal(SLURM_ST_COMPLETING));
    assert_true(slurm_state_terminal(SLURM_ST_COMPLETED));
    assert_true(slurm_state_terminal(SLURM_ST_OUT_OF_MEMORY));
}

static void test_v0038_submit_body(void **state)
{
    (void)state;
    const char *env[] = {"PATH=/usr/bin:/bin", "TY_JOB=job_1", NULL};
    slurm_submit s = {.name = "trainyard-job_1",
                      .script = "#!/bin/sh\ntrue\n",
                      .cwd = "/tmp/w",
                      .stdout_path = "/tmp/w/out",
                      .gres = "gpu:1g.18gb:1",
                      .partition = "",
                      .cpus = 2,
                      .memory_mb = 1024,
                      .time_limit_min = 30,
                      .env = env};
    ty_status st;
    ty_err err = {0};
    json_t *b = slurmrest_v0038_submit_body(&s, &st, &err);
    assert_non_null(b);
    assert_string_equal(json_string_value(json_object_get(b, "script")),
                        "#!/bin/sh\ntrue\n");
    json_t *j = json_object_get(b, "job");
    assert_string_equal(json_string_value(json_object_get(j, "gres")),
                        "gpu:1g.18gb:1");
    assert_string_equal(
        json_string_value(json_object_get(j, "standard_error")), "/tmp/w/out");
    assert_null(json_object_get(j, "partition"));
    assert_int_equal(json_integer_value(json_object_get(j, "cpus_per_task")),
                     2);
    assert_int_equal(
        json_integer_value(json_object_get(j, "memory_per_node")), 1024);
    assert_int_equal(json_integer_value(json_object_get(j, "time_limit")), 30);
    json_t *e = json_object_get(j, "environment");
    assert_string_equal(json_string_value(json_object_get(e, "TY_JOB")),
                        "job_1");
    /* One task on one node: no node count at all. */
    assert_null(json_object_get(j, "nodes"));
    assert_null(json_object_get(j, "tasks"));
    json_decref(b);

    /* A gang of 3 ranks, one a node: "nodes" an integer (slurmrestd
     * ignores an array), tasks_per_node 1, tasks 3. */
    s.nodes = 3;
    b = slurmrest_v0038_submit_body(&s, &st, &err);
    assert_non_null(b);
    j = json_object_get(b, "job");
    assert_true(json_is_integer(json_object_get(j, "nodes")));
    assert_int_equal(json_integer_value(json_object_get(j, "nodes")), 3);
    assert_int_equal(json_integer_value(json_object_get(j, "tasks_per_node")),
                     1);
    assert_int_equal(json_integer_value(json_object_get(j, "tasks")), 3);
    json_decref(b);
    s.nodes = 0;

    const char *none[] = {NULL};
    s.env = none;
    assert_null(slurmrest_v0038_submit_body(&s, &st, &err));
    assert_int_equal(st, TY_EINVAL);
    const char *bad[] = {"NOEQUALS", NULL};
    s.env = bad;
    assert_null(slurmrest_v0038_submit_body(&s, &st, &err));
    assert_int_equal(st, TY_EINVAL);
}

static void test_v0038_submit_replies(void **state)
{
    (void)state;
    ty_err err = {0};
    long id = 0;
    json_t *d = recorded("submit_ok.json");
    assert_int_equal(slurmrest_v0038_submit_reply(d, &id, &err), TY_OK);
    assert_int_equal(id, 1);
    json_decref(d);
    d = recorded("submit_too_many.json");
    assert_int_equal(slurmrest_v0038_submit_reply(d, &id, &err), TY_EINVAL);
    assert_non_null(
        strstr(err.msg, "Requested node configuration is not available"));
    json_decref(d);
}

static void job(const char *file, long id, slurm_job_info *info)
{
    ty_err err = {0};
    json_t *d = recorded(file);
    ty_status s = slurmrest_v0038_job_reply(d, id, info, &err);
    json_decref(d);
    if (s != TY_OK)
        fail_msg("%s: %s", file, err.msg);
}

static void test_v0038_jobs(void **state)
{
    (void)state;
    slurm_job_info j;
    job("job_running.json", 1, &j); /* recorded while still pending */
    assert_int_equal(j.state, SLURM_ST_PENDING);
    assert_string_equal(j.node, "");
    assert_int_equal(j.exit_code, -1);
    assert_string_equal(j.gres, "gpu:1g.18gb:1");
    assert_string_equal(j.user, "nobody");
    assert_string_equal(j.cwd, "/tmp/sl1/work");

    job("job_pending_resources.json", 2, &j); /* all 7 slices taken */
    assert_int_equal(j.state, SLURM_ST_PENDING);
    assert_string_equal(j.reason, "Resources");
    assert_int_equal(j.exit_code, -1);

    job("job_completed.json", 1, &j);
    assert_int_equal(j.state, SLURM_ST_COMPLETED);
    assert_string_equal(j.state_name, "COMPLETED");
    assert_string_equal(j.reason, "None");
    assert_int_equal(j.exit_code, 0);
    assert_int_equal(j.exit_signal, 0);
    assert_string_equal(j.node, "vm");
    assert_string_equal(j.gres, "gpu:1g.18gb:1");

    job("job_failed.json", 2, &j); /* exit 3: exit_code 768 */
    assert_int_equal(j.state, SLURM_ST_FAILED);
    assert_string_equal(j.reason, "NonZeroExitCode");
    assert_int_equal(j.exit_code, 3);
    assert_int_equal(j.exit_signal, 0);
    assert_string_equal(j.gres, "");

    job("job_sleep_running.json", 3, &j);
    assert_int_equal(j.state, SLURM_ST_RUNNING);
    assert_int_equal(j.exit_code, -1);

    job("job_cancelled.json", 3, &j); /* exit_code 15 */
    assert_int_equal(j.state, SLURM_ST_CANCELLED);
    assert_int_equal(j.exit_code, -1);
    assert_int_equal(j.exit_signal, SIGTERM);

    job("job_signalled.json", 4, &j); /* trapped USR1, exit 42 */
    assert_int_equal(j.state, SLURM_ST_FAILED);
    assert_int_equal(j.exit_code, 42);

    job("job_killed9.json", 5, &j);
    assert_int_equal(j.state, SLURM_ST_FAILED);
    assert_string_equal(j.reason, "JobLaunchFailure");
    assert_int_equal(j.exit_signal, SIGKILL);

    /* The answer is for another job: not trusted. */
    ty_err err = {0};
    json_t *d = recorded("job_completed.json");
    assert_int_equal(slurmrest_v0038_job_reply(d, 2, &j, &err), TY_EIO);
    json_decref(d);
}

static void test_v0038_errors(void **state)
{
    (void)state;
    ty_err err = {0};
    slurm_job_info j;
    json_t *d = recorded("job_unknown.json");
    assert_int_equal(slurmrest_v0038_job_reply(d, 999999, &j, &err),
                     TY_ENOTFOUND);
    assert_non_null(strstr(err.msg, "Unable to find JobId=999999"));
    json_decref(d);
    d = recorded("job_bad_token.json");
    assert_int_equal(slurmrest_v0038_errors(d, &err), TY_EIO);
    assert_non_null(strstr(err.msg, "token"));
    json_decref(d);
    /* slurmctld stopped: the same answer as a refused token. */
    d = recorded("job_ctld_down.json");
    assert_int_equal(slurmrest_v0038_job_reply(d, 2, &j, &err), TY_EIO);
    json_decref(d);
    d = recorded("ping.json");
    assert_int_equal(slurmrest_v0038_errors(d, &err), TY_OK);
    json_decref(d);
    /* An empty job list is an unknown job too. */
    d = json_pack("{s:[], s:[]}", "errors", "jobs");
    assert_int_equal(slurmrest_v0038_job_reply(d, 7, &j, &err), TY_ENOTFOUND);
    json_decref(d);
}

static void test_v0038_nodes(void **state)
{
    (void)state;
    ty_err err = {0};
    slurm_node *nodes = NULL;
    size_t n = 0;
    json_t *d = recorded("nodes.json");
    assert_int_equal(slurmrest_v0038_nodes_reply(d, &nodes, &n, &err), TY_OK);
    json_decref(d);
    assert_int_equal(n, 1);
    assert_string_equal(nodes[0].name, "vm");
    assert_string_equal(nodes[0].state, "idle");
    assert_string_equal(nodes[0].gres, "gpu:1g.18gb:7");
    assert_string_equal(nodes[0].partitions, "debug");
    assert_int_equal(nodes[0].cpus, 8);
    assert_int_equal(nodes[0].memory_mb, 19284);
    assert_string_equal(nodes[0].flags, "");
    assert_true(slurm_node_up(nodes[0].state, nodes[0].flags));
    free(nodes);
    /* state_flags joined: a lost node (allocated, NOT_RESPONDING) and a
     * drained one are not up (elastic gangs count the nodes that are). */
    d = json_pack("{s:[], s:[{s:s, s:s, s:[s], s:i}, {s:s, s:s, s:[s, s], "
                  "s:i}]}",
                  "errors", "nodes", "name", "node1", "state", "allocated",
                  "state_flags", "NOT_RESPONDING", "cpus", 2, "name", "node2",
                  "state", "idle", "state_flags", "DRAIN", "MAINTENANCE",
                  "cpus", 2);
    assert_int_equal(slurmrest_v0038_nodes_reply(d, &nodes, &n, &err), TY_OK);
    json_decref(d);
    assert_int_equal(n, 2);
    assert_string_equal(nodes[0].flags, "NOT_RESPONDING");
    assert_string_equal(nodes[1].flags, "DRAIN,MAINTENANCE");
    assert_false(slurm_node_up(nodes[0].state, nodes[0].flags));
    assert_false(slurm_node_up(nodes[1].state, nodes[1].flags));
    free(nodes);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hmac_rfc4231),
        cmocka_unit_test(test_base64url),
        cmocka_unit_test(test_jwt_known_vector),
        cmocka_unit_test(test_create_checks),
        cmocka_unit_test(test_states),
        cmocka_unit_test(test_v0038_submit_body),
        cmocka_unit_test(test_v0038_submit_replies),
        cmocka_unit_test(test_v0038_jobs),
        cmocka_unit_test(test_v0038_errors),
        cmocka_unit_test(test_v0038_nodes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
