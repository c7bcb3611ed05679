/* Unit tests for the job service's scheduler slots and interconnect
 * domains (issue 33): the service gives the scheduler each slot's node and
 * NVLink domain from the inventory (jobs_create's sched_create), and again
 * after a MIG re-cut (miglayout.c's sched_sync, sched_slots_replace), so a
 * gang of 2 placed after a single job on GPU 0 takes the two GPUs of the
 * other domain (gpu/sim/h100-4x-2nvl.json: GPUs 0-1 in domain 1, 2-3 in
 * domain 2), not GPUs 1 and 2 as it does on the same host without
 * domains. The service is created, not run: the test drives its scheduler
 * under its lock, as the supervisor's pass would. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/inventory.h"
#include "jobs/env.h"
#include "jobs/kind.h"
#include "jobs/miglayout.h"
#include "jobs/service.h"
#include "sched/sched.h"
#include "store/store.h"
#include "testutil.h"

typedef struct {
    char dir[64];
    store *st;
    inventory *inv;
    jobs_service *js;
} fixture;

/* A service over sim file `sim` (under gpu/sim/, or an absolute path). */
static void open_service(fixture *f, const char *sim)
{
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/ty-jobs-domains-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    ty_err err = {0};
    if (store_open(f->dir, &f->st, &err) != TY_OK)
        fail_msg("store_open: %s", err.msg);
    char path[4096];
    if (sim[0] == '/') {
        snprintf(path, sizeof path, "%s", sim);
    } else {
        char rel[256];
        snprintf(rel, sizeof rel, "gpu/sim/%s", sim);
        tu_source_path(path, sizeof path, rel);
    }
    if (inv_sim_load(path, &f->inv, &err) != TY_OK)
        fail_msg("%s: %s", path, err.msg);
    jobs_env env = {.store = f->st,
                    .inventory = f->inv,
                    .max_jobs = 1,
                    .heartbeat_timeout_s = 30,
                    .retry_backoff_s = 1,
                    .max_attempts = 1,
                    .backfill_wait_s = 1e9,
                    .max_replicas = 1,
                    .tenant_replicas = 1};
    snprintf(env.data_dir, sizeof env.data_dir, "%s", f->dir);
    snprintf(env.jobs_dir, sizeof env.jobs_dir, "%s/jobs", f->dir);
    snprintf(env.self_exe, sizeof env.self_exe, "/bin/false");
    if (jobs_create(&env, &f->js, &err) != TY_OK)
        fail_msg("jobs_create: %s", err.msg);
}

static void close_service(fixture *f)
{
    jobs_stop(f->js);
    inv_destroy(f->inv);
    store_close(f->st);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    assert_int_equal(system(cmd), 0);
}

static int submit(sched *s, const char *id, int t, double at, int gang)
{
    const sched_job_desc d = {.id = id,
                              .tenant = t,
                              .submit_time = at,
                              .request = {.kind = SCHED_REQ_ANY},
                              .gang = gang};
    int j = -1;
    ty_err err = {0};
    if (sched_job_submit(s, &d, &j, &err) != TY_OK)
        fail_msg("submit %s: %s", id, err.msg);
    return j;
}

/* Places a single job (it takes slot 0, GPU 0) and then a gang of 2 on
 * the service's scheduler; the gang's slots into g[2]. Both jobs are
 * removed again. */
static void place_gang(fixture *f, double now, int g[2])
{
    jobs_lock(f->js);
    sched *s = jobs_sched(f->js);
    int t = -1;
    ty_err err = {0};
    assert_int_equal(sched_tenant_set(s, "ten_domains", 1, -1, -1, &t, &err),
                     TY_OK);
    sched_result r;
    int one = submit(s, "job_single", t, now, 1);
    sched_pass(s, now, &r);
    assert_int_equal(r.n_placements, 1);
    assert_int_equal(r.placements[0].slot, 0);
    int gang = submit(s, "job_gang", t, now + 1, 2);
    sched_pass(s, now + 1, &r);
    sched_job_info in;
    assert_int_equal(sched_job_get(s, gang, &in), TY_OK);
    assert_int_equal(in.state, SCHED_JOB_RUNNING);
    g[0] = in.gang_slots[0];
    g[1] = in.gang_slots[1];
    assert_int_equal(sched_job_remove(s, gang), TY_OK);
    assert_int_equal(sched_job_remove(s, one), TY_OK);
    jobs_unlock(f->js);
}

static void test_domains_at_start(void **state)
{
    (void)state;
    fixture f;
    open_service(&f, "h100-4x-2nvl.json");
    int g[2];
    place_gang(&f, 0, g);
    /* GPU 0 (domain 1) is taken: the gang goes inside domain 2 */
    assert_int_equal(g[0], 2);
    assert_int_equal(g[1], 3);
    close_service(&f);

    /* the same four H100s without domains: the first free ones */
    char dir[] = "/tmp/ty-nodomains-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/h100-4x.json", dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("{\"gpus\": [{\"model\": \"H100\"}, {\"model\": \"H100\"},"
          " {\"model\": \"H100\"}, {\"model\": \"H100\"}]}",
          fp);
    fclose(fp);
    open_service(&f, path);
    place_gang(&f, 0, g);
    assert_int_equal(g[0], 1);
    assert_int_equal(g[1], 2);
    close_service(&f);
    unlink(path);
    rmdir(dir);
}

/* After re-cuts (GPU 1 to MIG and back, each applied at once on an idle
 * GPU), the scheduler's new slot list still has the domains. */
static void test_domains_after_recut(void **state)
{
    (void)state;
    fixture f;
    open_service(&f, "h100-4x-2nvl.json");
    const mig_model *m = mig_model_find("H100");
    jobs_mig_change on = {.gpu = 1, .mig = 1, .n = 1, .timeout_s = 60};
    on.inst[0] = (mig_placed){mig_profile_find(m, "7g.80gb"), 0};
    jobs_mig_change off = {.gpu = 1, .mig = 0, .n = 0, .timeout_s = 60};
    const jobs_mig_change *steps[] = {&on, &off};
    for (int i = 0; i < 2; i++) {
        json_t *doc = NULL;
        int status = 0;
        ty_err err = {0};
        if (jobs_mig_layout_apply(f.js, steps[i], &doc, &status, &err) != TY_OK)
            fail_msg("re-cut %d: %s", i, err.msg);
        assert_int_equal(status, 200);
        json_decref(doc);
    }
    assert_int_equal(f.inv->slots[1].kind, INV_SLOT_GPU);
    assert_int_equal(f.inv->slots[1].domain, 1);
    int g[2];
    place_gang(&f, 10, g);
    assert_int_equal(g[0], 2);
    assert_int_equal(g[1], 3);
    close_service(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_domains_at_start),
        cmocka_unit_test(test_domains_after_recut),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
