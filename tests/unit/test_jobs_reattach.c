/* Unit tests for the job service's restart with the Slurm executor
 * (jobs/service.c's reattach_running): gangs the store has running on
 * Slurm are taken back as gangs - a CPU gang (resources.workers 2) and a
 * gang of 2 whole GPUs (resources.gpus, its members' slots in the
 * placement's gang_slots) - their places held again in the scheduler and
 * the inventory. Before, the scheduler refused to restore a gang as a
 * single job and the restarted server failed both. The service is
 * created, not run; its Slurm client points at a closed port (nothing is
 * asked of Slurm before the executor's first round). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/slurmrest.h"
#include "gpu/inventory.h"
#include "jobs/env.h"
#include "jobs/executor.h"
#include "jobs/kind.h"
#include "jobs/service.h"
#include "sched/sched.h"
#include "store/store.h"
#include "testutil.h"

#define TENANT "ten_reattach"
#define SHA "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

/* Stores job id as the last server left it: scheduled on Slurm (job
 * slurm_id), with these resources and placement extras. */
static void running_on_slurm(store *st, const char *id, const char *resources,
                             long slurm_id, const char *extra)
{
    ty_err err = {0};
    json_error_t jerr;
    json_t *res = json_loads(resources, 0, &jerr);
    json_t *spec =
        json_pack("{s:[{s:s, s:i}]}", "layers", "type", "dense", "units", 2);
    json_t *hp = json_object();
    json_t *val = json_pack("{s:f}", "split", 0.1);
    assert_non_null(res);
    if (store_job_insert_req(st, TENANT, id, "gang", "ds_x", val, spec, hp, 0,
                             res, 0, &err) != TY_OK)
        fail_msg("insert %s: %s", id, err.msg);
    json_t *pl = json_loads(extra, 0, &jerr);
    assert_non_null(pl);
    json_object_set_new(pl, "executor", json_string("slurm"));
    json_object_set_new(pl, "slurm",
                        json_pack("{s:I, s:s, s:s}", "job_id",
                                  (json_int_t)slurm_id, "state", "RUNNING",
                                  "token_sha256", SHA));
    if (store_job_schedule_on(st, id, "cpu", pl, &err) != TY_OK)
        fail_msg("schedule %s: %s", id, err.msg);
    json_decref(pl);
    json_decref(res);
    json_decref(spec);
    json_decref(hp);
    json_decref(val);
}

static const char *status_of(store *st, const char *id, char *buf, size_t n)
{
    json_t *job = NULL;
    ty_err err = {0};
    assert_int_equal(store_job_get_internal(st, id, &job, &err), TY_OK);
    snprintf(buf, n, "%s", json_string_value(json_object_get(job, "status")));
    json_decref(job);
    return buf;
}

static void test_gangs_reattached(void **state)
{
    tu_store_fixture *f = *state;
    ty_err err = {0};
    char path[4096];
    tu_source_path(path, sizeof path, "gpu/sim/a100-2x-nomig.json");
    inventory *inv = NULL;
    if (inv_sim_load(path, &inv, &err) != TY_OK)
        fail_msg("%s: %s", path, err.msg);
    running_on_slurm(f->st, "job_cpugang",
                     "{\"gpu\": \"none\", \"workers\": 2}", 41,
                     "{\"slot\": null, \"world_size\": 2}");
    running_on_slurm(f->st, "job_gpugang", "{\"gpu\": \"whole\", \"gpus\": 2}",
                     42, "{\"slot\": 1, \"gang_slots\": [1, 0]}");

    slurmrest *rest = NULL;
    char token[300];
    snprintf(token, sizeof token, "%s/slurm.jwt", f->dir);
    FILE *tf = fopen(token, "w");
    assert_non_null(tf);
    fputs("header.payload.signature\n", tf);
    fclose(tf);
    const slurmrest_config rc = {.url = "http://127.0.0.1:9",
                                 .user = "trainyard",
                                 .token_file = token,
                                 .timeout_s = 1};
    if (slurmrest_create(&rc, &rest, &err) != TY_OK)
        fail_msg("slurmrest_create: %s", err.msg);
    const exec_slurm_config sc = {.rest = rest,
                                  .worker_command = "/bin/false",
                                  .server_url = "http://127.0.0.1:1",
                                  .workdir = "/tmp",
                                  .heartbeat_ms = 1000,
                                  .heartbeat_timeout_s = 600,
                                  .start_grace_s = 600,
                                  .poll_s = 3600,
                                  .preempt_grace_s = 60};
    jobs_env env = {.store = f->st,
                    .inventory = inv,
                    .slurm = &sc,
                    .max_jobs = 2,
                    .heartbeat_timeout_s = 30,
                    .retry_backoff_s = 1,
                    .max_attempts = 1,
                    .backfill_wait_s = 1e9,
                    .max_replicas = 1,
                    .tenant_replicas = 1};
    snprintf(env.data_dir, sizeof env.data_dir, "%s", f->dir);
    snprintf(env.jobs_dir, sizeof env.jobs_dir, "%s/jobs", f->dir);
    snprintf(env.self_exe, sizeof env.self_exe, "/bin/false");
    jobs_service *js = NULL;
    if (jobs_create(&env, &js, &err) != TY_OK)
        fail_msg("jobs_create: %s", err.msg);

    /* neither failed at the start */
    char st[32];
    assert_string_equal(status_of(f->st, "job_cpugang", st, sizeof st),
                        "scheduled");
    assert_string_equal(status_of(f->st, "job_gpugang", st, sizeof st),
                        "scheduled");
    /* both are gangs running in the scheduler, the GPU gang on its two
     * slots, which the inventory shows held by it */
    jobs_lock(js);
    sched *s = jobs_sched(js);
    sched_job_info in;
    int j = sched_job_find(s, "job_cpugang");
    assert_true(j >= 0);
    assert_int_equal(sched_job_get(s, j, &in), TY_OK);
    assert_int_equal(in.state, SCHED_JOB_RUNNING);
    assert_int_equal(in.gang, 2);
    j = sched_job_find(s, "job_gpugang");
    assert_true(j >= 0);
    assert_int_equal(sched_job_get(s, j, &in), TY_OK);
    assert_int_equal(in.state, SCHED_JOB_RUNNING);
    assert_int_equal(in.gang, 2);
    assert_non_null(in.gang_slots);
    assert_true((in.gang_slots[0] == 1 && in.gang_slots[1] == 0) ||
                (in.gang_slots[0] == 0 && in.gang_slots[1] == 1));
    jobs_unlock(js);
    assert_string_equal(inv->slots[0].job_id, "job_gpugang");
    assert_string_equal(inv->slots[1].job_id, "job_gpugang");

    jobs_stop(js);
    slurmrest_destroy(rest);
    inv_destroy(inv);
}

static int setup(void **state)
{
    static const uint8_t hash[32] = {1};
    return tu_store_setup(state, TENANT, "key_reattach", hash);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_gangs_reattached, setup,
                                        tu_store_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
