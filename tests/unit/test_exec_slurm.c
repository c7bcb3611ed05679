/* test_exec_slurm.c - what a Slurm job's end means for its trainyard job
 * (jobs/exec_slurm_internal.h): the worker's exit code passed through,
 * trainyard's own cancels and preemptions told apart from an outside
 * scancel, the cluster's failures requeued. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "cluster/slurmrest_v0038.h"
#include "jobs/exec_slurm_internal.h"
#include "node/protocol.h"

static slurm_job_info ended(slurm_state st, const char *name, int code,
                            int sig)
{
    slurm_job_info info;
    memset(&info, 0, sizeof info);
    info.state = st;
    snprintf(info.state_name, sizeof info.state_name, "%s", name);
    info.exit_code = code;
    info.exit_signal = sig;
    snprintf(info.node, sizeof info.node, "gpu07");
    return info;
}

static void test_exit_codes_pass_through(void **state)
{
    (void)state;
    exec_slurm_asked asked = {.slurm_id = 41};
    char why[300];
    int ws = -1;
    slurm_job_info done = ended(SLURM_ST_COMPLETED, "COMPLETED", 0, 0);
    assert_int_equal(exec_slurm_end_of(&asked, &done, &ws, why, sizeof why),
                     EXEC_END_EXITED);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    /* The worker's error (exit 2) and its preemption (exit 4). */
    slurm_job_info err = ended(SLURM_ST_FAILED, "FAILED", WPROTO_EXIT_FAILED, 0);
    assert_int_equal(exec_slurm_end_of(&asked, &err, &ws, why, sizeof why),
                     EXEC_END_EXITED);
    assert_int_equal(WEXITSTATUS(ws), WPROTO_EXIT_FAILED);
    slurm_job_info pre =
        ended(SLURM_ST_FAILED, "FAILED", WPROTO_EXIT_PREEMPTED, 0);
    assert_int_equal(exec_slurm_end_of(&asked, &pre, &ws, why, sizeof why),
                     EXEC_END_EXITED);
    assert_int_equal(WEXITSTATUS(ws), WPROTO_EXIT_PREEMPTED);
    /* Killed by a signal: a crash (retried by the service). */
    slurm_job_info killed = ended(SLURM_ST_FAILED, "FAILED", -1, SIGKILL);
    assert_int_equal(exec_slurm_end_of(&asked, &killed, &ws, why, sizeof why),
                     EXEC_END_EXITED);
    assert_true(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL);
}

static void test_cancels_told_apart(void **state)
{
    (void)state;
    char why[300];
    int ws = -1;
    slurm_job_info c = ended(SLURM_ST_CANCELLED, "CANCELLED", -1, SIGTERM);
    exec_slurm_asked ours = {.slurm_id = 7, .want_cancel = 1};
    assert_int_equal(exec_slurm_end_of(&ours, &c, &ws, why, sizeof why),
                     EXEC_END_EXITED);
    assert_int_equal(WEXITSTATUS(ws), WPROTO_EXIT_CANCELLED);
    /* A preemption cancelled after its grace: still a preemption. */
    exec_slurm_asked pre = {.slurm_id = 7, .want_preempt = 1,
                            .want_cancel = 1};
    assert_int_equal(exec_slurm_end_of(&pre, &c, &ws, why, sizeof why),
                     EXEC_END_EXITED);
    assert_int_equal(WEXITSTATUS(ws), WPROTO_EXIT_PREEMPTED);
    exec_slurm_asked silent = {.slurm_id = 7, .lost = 1, .want_cancel = 1};
    assert_int_equal(exec_slurm_end_of(&silent, &c, &ws, why, sizeof why),
                     EXEC_END_LOST);
    assert_non_null(strstr(why, "sent nothing"));
    exec_slurm_asked none = {.slurm_id = 7};
    assert_int_equal(exec_slurm_end_of(&none, &c, &ws, why, sizeof why),
                     EXEC_END_OUTSIDE);
    assert_non_null(strstr(why, "outside trainyard"));
    assert_non_null(strstr(why, "7"));
}

static void test_cluster_failures_requeue(void **state)
{
    (void)state;
    exec_slurm_asked asked = {.slurm_id = 9};
    char why[300];
    int ws = -1;
    static const struct {
        slurm_state st;
        const char *name;
    } lost[] = {{SLURM_ST_NODE_FAIL, "NODE_FAIL"},
                {SLURM_ST_PREEMPTED, "PREEMPTED"},
                {SLURM_ST_TIMEOUT, "TIMEOUT"},
                {SLURM_ST_BOOT_FAIL, "BOOT_FAIL"},
                {SLURM_ST_DEADLINE, "DEADLINE"}};
    for (size_t i = 0; i < sizeof lost / sizeof lost[0]; i++) {
        slurm_job_info info = ended(lost[i].st, lost[i].name, -1, 0);
        assert_int_equal(exec_slurm_end_of(&asked, &info, &ws, why, sizeof why),
                         EXEC_END_LOST);
        assert_non_null(strstr(why, lost[i].name));
        assert_non_null(strstr(why, "gpu07"));
    }
    slurm_job_info oom = ended(SLURM_ST_OUT_OF_MEMORY, "OUT_OF_MEMORY", -1, 0);
    assert_int_equal(exec_slurm_end_of(&asked, &oom, &ws, why, sizeof why),
                     EXEC_END_FAILED);
    assert_non_null(strstr(why, "out of memory"));
}

static void test_gang_script(void **state)
{
    (void)state;
    char buf[1024];
    exec_slurm_script("/opt/ty", "http://h:1", "job_a", 1, 0, buf, sizeof buf);
    assert_non_null(
        strstr(buf, "\nexec '/opt/ty' worker --server 'http://h:1' --job "
                    "'job_a'\n"));
    assert_null(strstr(buf, "srun"));
    exec_slurm_script("/opt/ty", "http://h:1", "job_a", 2, 0, buf, sizeof buf);
    assert_non_null(strstr(buf, "\nexec srun --mpi=pmix --kill-on-bad-exit=1 "
                                "'/opt/ty' worker --server 'http://h:1' "
                                "--job 'job_a'\n"));
    assert_non_null(strstr(buf, "one rank a node"));
    /* a gang of GPUs over nodes: srun starts every rank of every node */
    exec_slurm_script("/opt/ty", "http://h:1", "job_a", 6, 2, buf, sizeof buf);
    assert_non_null(strstr(buf, "\nexec srun --mpi=pmix --kill-on-bad-exit=1 "
                                "'/opt/ty' worker --server 'http://h:1' "
                                "--job 'job_a'\n"));
    assert_non_null(strstr(buf, "2 ranks a node"));
}

/* What a job asks of Slurm, as slurmrestd v0.0.38 gets it: one worker, a
 * CPU gang one rank a node, a gang of whole GPUs of m nodes of n. */
static void test_submission_json(void **state)
{
    (void)state;
    const char *env[4] = {"PATH=/usr/bin:/bin", NULL, NULL, NULL};
    slurm_submit sub = {.name = "trainyard-job_a",
                        .script = "#!/bin/sh\ntrue\n",
                        .cwd = "/w",
                        .stdout_path = "/w/out",
                        .cpus = 2,
                        .env = env};
    char gres[96];
    ty_status st;
    ty_err err = {0};

    /* one worker on a whole GPU: Slurm's one node, the slot's gres */
    exec_slurm_shape(1, 0, "gpu:1", &sub, gres, sizeof gres);
    sub.gres = gres[0] ? gres : NULL;
    json_t *b = slurmrest_v0038_submit_body(&sub, &st, &err);
    json_t *j = json_object_get(b, "job");
    assert_string_equal(json_string_value(json_object_get(j, "gres")), "gpu:1");
    assert_null(json_object_get(j, "nodes"));
    json_decref(b);

    /* a CPU gang of 3: 3 nodes, one task each, no gres */
    exec_slurm_shape(3, 0, "", &sub, gres, sizeof gres);
    sub.gres = gres[0] ? gres : NULL;
    b = slurmrest_v0038_submit_body(&sub, &st, &err);
    j = json_object_get(b, "job");
    assert_null(json_object_get(j, "gres"));
    assert_int_equal(json_integer_value(json_object_get(j, "nodes")), 3);
    assert_int_equal(json_integer_value(json_object_get(j, "tasks_per_node")),
                     1);
    assert_int_equal(json_integer_value(json_object_get(j, "tasks")), 3);
    json_decref(b);

    /* nodes 3, gpus_per_node 2: 3 nodes of 2 tasks, gpu:2 a node, each
     * rank's device by its local rank among the node's GPUs */
    char devs[EXEC_SLURM_RANK_DEVICES_MAX], e_ranks[sizeof devs + 32];
    exec_slurm_shape(6, 2, "gpu:1", &sub, gres, sizeof gres);
    sub.gres = gres[0] ? gres : NULL;
    assert_int_equal(exec_slurm_rank_devices(2, NULL, devs, sizeof devs), 1);
    snprintf(e_ranks, sizeof e_ranks, WPROTO_ENV_RANK_DEVICES "=%s", devs);
    env[1] = e_ranks;
    b = slurmrest_v0038_submit_body(&sub, &st, &err);
    assert_non_null(b);
    j = json_object_get(b, "job");
    assert_true(json_is_integer(json_object_get(j, "nodes")));
    assert_int_equal(json_integer_value(json_object_get(j, "nodes")), 3);
    assert_int_equal(json_integer_value(json_object_get(j, "tasks_per_node")),
                     2);
    assert_int_equal(json_integer_value(json_object_get(j, "tasks")), 6);
    assert_string_equal(json_string_value(json_object_get(j, "gres")), "gpu:2");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(j, "environment"),
                                          WPROTO_ENV_RANK_DEVICES)),
        "cuda:0,cuda:1");
    json_decref(b);

    /* stand-in GRES: the members' sim devices; a list that cannot be
     * sent is refused, not cut */
    const char *sim[] = {"sim:GPU-n1-0", "sim:GPU-n1-1"};
    assert_int_equal(exec_slurm_rank_devices(2, sim, devs, sizeof devs), 1);
    assert_string_equal(devs, "sim:GPU-n1-0,sim:GPU-n1-1");
    assert_int_equal(exec_slurm_rank_devices(2, sim, devs, 20), 0);
    assert_string_equal(devs, "");
    const char *comma[] = {"sim:a,b"};
    assert_int_equal(exec_slurm_rank_devices(1, comma, devs, sizeof devs), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exit_codes_pass_through),
        cmocka_unit_test(test_cancels_told_apart),
        cmocka_unit_test(test_cluster_failures_requeue),
        cmocka_unit_test(test_gang_script),
        cmocka_unit_test(test_submission_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
