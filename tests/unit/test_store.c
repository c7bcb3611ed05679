/* Unit tests for the SQLite store: migrations, tenancy, job life cycle,
 * pagination, blob references, and persistence across reopen. */
#include <setjmp.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "store/store.h"
#include "testutil.h"

/* A store of its own per test, with the admin key key_a of tenant tn_a. */
typedef tu_store_fixture fixture;

static int setup(void **state)
{
    static const uint8_t hash[32] = {1};
    return tu_store_setup(state, "tn_a", "key_a", hash);
}

static json_t *ds_doc(const char *id)
{
    return json_pack("{s:s, s:s, s:s}", "id", id, "name", "n", "created_at",
                     "2026-01-01T00:00:00.000Z");
}

static void test_migrated_and_keys(void **state)
{
    fixture *f = *state;
    assert_int_equal(store_schema_version(f->st), 11);
    int64_t n = 0;
    ty_err err;
    assert_int_equal(store_key_count(f->st, &n, &err), TY_OK);
    assert_int_equal(n, 1);
    store_key k;
    uint8_t hash[32];
    assert_int_equal(store_key_lookup(f->st, "key_a", &k, hash, &err), TY_OK);
    assert_string_equal(k.tenant_id, "tn_a");
    assert_int_equal(k.is_admin, 1);
    assert_int_equal(hash[0], 1);
    assert_int_equal(store_key_lookup(f->st, "key_b", &k, hash, &err),
                     TY_ENOTFOUND);
}

static void test_datasets_are_per_tenant_and_paginate(void **state)
{
    fixture *f = *state;
    ty_err err;
    for (int i = 0; i < 5; i++) {
        char id[16];
        snprintf(id, sizeof id, "ds_%d", i);
        json_t *d = ds_doc(id);
        assert_int_equal(
            store_dataset_insert(f->st, "tn_a", id, "abc", 10, d, &err), TY_OK);
        json_decref(d);
    }
    json_t *doc;
    char sha[65];
    assert_int_equal(store_dataset_get(f->st, "tn_a", "ds_3", &doc, sha, &err),
                     TY_OK);
    assert_string_equal(json_string_value(json_object_get(doc, "id")), "ds_3");
    assert_string_equal(sha, "abc");
    json_decref(doc);
    /* Another tenant sees nothing. */
    assert_int_equal(store_dataset_get(f->st, "tn_b", "ds_3", &doc, NULL, &err),
                     TY_ENOTFOUND);

    store_page page = {0, 2};
    json_t *items;
    int64_t next;
    assert_int_equal(
        store_dataset_list(f->st, "tn_a", page, &items, &next, &err), TY_OK);
    assert_int_equal(json_array_size(items), 2);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(items, 0), "id")),
        "ds_4");
    assert_null(json_object_get(json_array_get(items, 0), "_seq"));
    assert_true(next > 0);
    json_decref(items);
    int pages = 1, seen = 2;
    while (next) {
        page.cursor = next;
        assert_int_equal(
            store_dataset_list(f->st, "tn_a", page, &items, &next, &err),
            TY_OK);
        seen += (int)json_array_size(items);
        pages++;
        json_decref(items);
    }
    assert_int_equal(seen, 5);
    assert_int_equal(pages, 3);

    int64_t refs = 0;
    assert_int_equal(store_blob_refs(f->st, "abc", &refs, &err), TY_OK);
    assert_int_equal(refs, 5);
    assert_int_equal(store_dataset_delete(f->st, "tn_b", "ds_1", sha, &err),
                     TY_ENOTFOUND);
    assert_int_equal(store_dataset_delete(f->st, "tn_a", "ds_1", sha, &err),
                     TY_OK);
    assert_int_equal(store_blob_refs(f->st, "abc", &refs, &err), TY_OK);
    assert_int_equal(refs, 4);
}

static void test_job_life_cycle(void **state)
{
    fixture *f = *state;
    ty_err err;
    json_t *d = ds_doc("ds_j");
    assert_int_equal(
        store_dataset_insert(f->st, "tn_a", "ds_j", "s", 1, d, &err), TY_OK);
    json_decref(d);
    json_t *v = json_pack("{s:f}", "split", 0.1),
           *spec = json_pack("{s:[]}", "layers"),
           *hp = json_pack("{s:i}", "epochs", 3);
    assert_int_equal(store_job_insert(f->st, "tn_a", "job_1", "j", "ds_j", v,
                                      spec, hp, 1234, &err),
                     TY_OK);
    json_t *job;
    assert_int_equal(store_job_get(f->st, "tn_a", "job_1", &job, &err), TY_OK);
    assert_string_equal(json_string_value(json_object_get(job, "status")),
                        "queued");
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(job, "hyperparameters"), "epochs")),
                     3);
    assert_int_equal(
        json_integer_value(json_object_get(job, "estimated_memory_bytes")),
        1234);
    /* Not started: no device yet. */
    assert_true(json_is_null(json_object_get(job, "device")));
    json_decref(job);

    /* The dataset is in use. */
    char sha[65];
    assert_int_equal(store_dataset_delete(f->st, "tn_a", "ds_j", sha, &err),
                     TY_ECONFLICT);
    assert_non_null(strstr(err.msg, "job_1"));

    char id[TY_ID_MAX];
    assert_int_equal(store_job_next_queued(f->st, id, &err), TY_OK);
    assert_string_equal(id, "job_1");
    assert_int_equal(store_job_start(f->st, "job_1", "cpu", &err), TY_OK);
    assert_int_equal(store_job_start(f->st, "job_1", "cuda:0", &err),
                     TY_ECONFLICT);
    assert_int_equal(store_job_get(f->st, "tn_a", "job_1", &job, &err), TY_OK);
    assert_string_equal(json_string_value(json_object_get(job, "device")),
                        "cpu");
    json_decref(job);
    assert_int_equal(store_job_next_queued(f->st, id, &err), TY_ENOTFOUND);

    json_t *m = json_pack("{s:i, s:f}", "epoch", 1, "train_loss", 0.5);
    assert_int_equal(store_job_epoch(f->st, "job_1", 1, m, &err), TY_OK);
    json_decref(m);
    m = json_pack("{s:i, s:f}", "epoch", 1, "train_loss",
                  0.4); /* a resumed epoch */
    assert_int_equal(store_job_epoch(f->st, "job_1", 1, m, &err), TY_OK);
    json_decref(m);
    json_t *epochs;
    assert_int_equal(store_job_epochs(f->st, "tn_a", "job_1", &epochs, &err),
                     TY_OK);
    assert_int_equal(json_array_size(epochs), 1);
    assert_true(json_real_value(json_object_get(json_array_get(epochs, 0),
                                                "train_loss")) < 0.45);
    json_decref(epochs);
    assert_int_equal(store_job_epochs(f->st, "tn_b", "job_1", &epochs, &err),
                     TY_ENOTFOUND);

    /* A crash: running jobs go back to the queue. */
    int64_t n = 0;
    assert_int_equal(store_job_requeue_running(f->st, NULL, &n, &err), TY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(store_job_start(f->st, "job_1", "cuda:1", &err), TY_OK);
    assert_int_equal(store_job_get(f->st, "tn_a", "job_1", &job, &err), TY_OK);
    assert_int_equal(json_integer_value(json_object_get(job, "attempts")), 2);
    /* The restarted run's device, which may differ from the first's. */
    assert_string_equal(json_string_value(json_object_get(job, "device")),
                        "cuda:1");
    json_decref(job);

    json_t *mdoc = json_pack("{s:s, s:s}", "id", "mdl_1", "created_at",
                             "2026-01-01T00:00:00.000Z");
    assert_int_equal(
        store_job_succeed(f->st, "job_1", "mdl_1", "msha", 99, mdoc, &err),
        TY_OK);
    json_decref(mdoc);
    assert_int_equal(store_job_get(f->st, "tn_a", "job_1", &job, &err), TY_OK);
    assert_string_equal(json_string_value(json_object_get(job, "status")),
                        "succeeded");
    assert_string_equal(json_string_value(json_object_get(job, "model")),
                        "mdl_1");
    json_decref(job);
    int running;
    assert_int_equal(
        store_job_request_cancel(f->st, "tn_a", "job_1", &running, &err),
        TY_ECONFLICT);
    json_t *model;
    assert_int_equal(store_model_get(f->st, "tn_a", "mdl_1", &model, sha, &err),
                     TY_OK);
    assert_string_equal(sha, "msha");
    json_decref(model);
    assert_int_equal(store_model_get(f->st, "tn_b", "mdl_1", &model, sha, &err),
                     TY_ENOTFOUND);
    json_decref(v);
    json_decref(spec);
    json_decref(hp);
}

/* An imported model: a row with no job, the tenant's own, counted as a
 * reference to its blob until deleted. */
static void test_model_insert_without_job(void **state)
{
    fixture *f = *state;
    ty_err err;
    char sha[65];
    json_t *doc = json_pack("{s:s, s:n, s:s}", "id", "mdl_imp", "job",
                            "created_at", "2026-01-01T00:00:00.000Z");
    assert_int_equal(
        store_model_insert(f->st, "tn_a", "mdl_imp", "isha", 42, doc, &err),
        TY_OK);
    /* Ids are unique. */
    assert_int_not_equal(
        store_model_insert(f->st, "tn_a", "mdl_imp", "isha", 42, doc, &err),
        TY_OK);
    json_decref(doc);
    json_t *model;
    assert_int_equal(
        store_model_get(f->st, "tn_a", "mdl_imp", &model, sha, &err), TY_OK);
    assert_string_equal(sha, "isha");
    assert_true(json_is_null(json_object_get(model, "job")));
    json_decref(model);
    assert_int_equal(
        store_model_get(f->st, "tn_b", "mdl_imp", &model, sha, &err),
        TY_ENOTFOUND);
    json_t *items;
    int64_t next;
    assert_int_equal(store_model_list(f->st, "tn_a", (store_page){0, 10},
                                      &items, &next, &err),
                     TY_OK);
    assert_int_equal(json_array_size(items), 1);
    json_decref(items);
    int64_t refs = 0;
    assert_int_equal(store_blob_refs(f->st, "isha", &refs, &err), TY_OK);
    assert_int_equal(refs, 1);
    assert_int_equal(store_model_delete(f->st, "tn_a", "mdl_imp", sha, &err),
                     TY_OK);
    assert_int_equal(store_blob_refs(f->st, "isha", &refs, &err), TY_OK);
    assert_int_equal(refs, 0);
}

static void test_cancel_queued_and_finish(void **state)
{
    fixture *f = *state;
    ty_err err;
    json_t *o = json_object();
    assert_int_equal(
        store_job_insert(f->st, "tn_a", "job_q", "q", "ds_x", o, o, o, 0, &err),
        TY_OK);
    int running = -1;
    assert_int_equal(
        store_job_request_cancel(f->st, "tn_b", "job_q", &running, &err),
        TY_ENOTFOUND);
    assert_int_equal(
        store_job_request_cancel(f->st, "tn_a", "job_q", &running, &err),
        TY_OK);
    assert_int_equal(running, 0);
    int changed = -1;
    assert_int_equal(
        store_job_finish(f->st, "job_q", JOB_FAILED, "x", &changed, &err),
        TY_OK);
    assert_int_equal(changed, 0); /* already finished */
    json_t *job;
    assert_int_equal(store_job_get(f->st, "tn_a", "job_q", &job, &err), TY_OK);
    assert_string_equal(json_string_value(json_object_get(job, "status")),
                        "cancelled");
    json_decref(job);
    json_decref(o);
}

/* A long run's curves: at most `points` points, each the mean of its
 * bucket; the best epoch kept exactly; epochs a page at a time. */
static void test_job_curves_downsample(void **state)
{
    fixture *f = *state;
    ty_err err;
    json_t *d = ds_doc("ds_c");
    assert_int_equal(
        store_dataset_insert(f->st, "tn_a", "ds_c", "s", 1, d, &err), TY_OK);
    json_decref(d);
    json_t *v = json_pack("{s:f}", "split", 0.1),
           *spec = json_pack("{s:[]}", "layers"),
           *hp = json_pack("{s:i}", "epochs", 1000);
    assert_int_equal(store_job_insert(f->st, "tn_a", "job_c", "c", "ds_c", v,
                                      spec, hp, 1, &err),
                     TY_OK);
    json_decref(v);
    json_decref(spec);
    json_decref(hp);
    assert_int_equal(store_job_start(f->st, "job_c", "cpu", &err), TY_OK);
    /* Loss 1000/e; validation accuracy peaks at epoch 700. */
    for (int e = 1; e <= 1000; e++) {
        json_t *m = json_pack("{s:i, s:f, s:f}", "epoch", e, "train_loss",
                              1000.0 / e, "val_accuracy", e == 700 ? 0.9 : 0.5);
        assert_int_equal(store_job_epoch(f->st, "job_c", e, m, &err), TY_OK);
        json_decref(m);
        /* Two step records an epoch; the second's loss is not finite. */
        assert_int_equal(store_job_step(f->st, "job_c", 2 * e - 1, e, e - 0.5,
                                        1.0, 0.1, &err),
                         TY_OK);
        assert_int_equal(
            store_job_step(f->st, "job_c", 2 * e, e, e, NAN, 0.1, &err), TY_OK);
    }
    json_t *job;
    assert_int_equal(store_job_get(f->st, "tn_a", "job_c", &job, &err), TY_OK);
    json_t *best = json_object_get(json_object_get(job, "metrics"), "best");
    assert_string_equal(json_string_value(json_object_get(best, "metric")),
                        "val_accuracy");
    assert_int_equal(json_integer_value(json_object_get(best, "epoch")), 700);
    json_decref(job);

    json_t *c;
    assert_int_equal(store_job_curves(f->st, "tn_a", "job_c", 100, &c, &err),
                     TY_OK);
    json_t *ep = json_object_get(c, "epochs"),
           *st = json_object_get(c, "steps");
    assert_int_equal(json_integer_value(json_object_get(ep, "total")), 1000);
    assert_int_equal(json_integer_value(json_object_get(ep, "per_point")), 10);
    json_t *pts = json_object_get(ep, "points");
    assert_int_equal(json_array_size(pts), 100);
    json_t *p0 = json_array_get(pts, 0);
    assert_int_equal(json_integer_value(json_object_get(p0, "epoch")), 10);
    double mean = 0;
    for (int e = 1; e <= 10; e++)
        mean += 1000.0 / e / 10;
    assert_true(fabs(json_number_value(json_object_get(p0, "train_loss")) -
                     mean) < 1e-9);
    assert_int_equal(
        json_integer_value(json_object_get(json_array_get(pts, 99), "epoch")),
        1000);
    /* 2000 steps in 100 points; the non-finite losses are gaps (null),
     * left out of the means. */
    assert_int_equal(json_integer_value(json_object_get(st, "total")), 2000);
    json_t *sp = json_object_get(st, "points");
    assert_int_equal(json_array_size(sp), 100);
    assert_true(
        fabs(json_number_value(json_object_get(json_array_get(sp, 0), "loss")) -
             1.0) < 1e-12);
    json_decref(c);
    /* Another tenant gets nothing. */
    assert_int_equal(store_job_curves(f->st, "tn_b", "job_c", 100, &c, &err),
                     TY_ENOTFOUND);

    /* A long run: the records stay under the cap and span the whole run
     * (the first step and the newest are kept). */
    for (int k = 2001; k <= 10000; k++)
        assert_int_equal(
            store_job_step(f->st, "job_c", k, 1000, k / 2.0, 1.0, 0.1, &err),
            TY_OK);
    assert_int_equal(store_job_curves(f->st, "tn_a", "job_c", 1000, &c, &err),
                     TY_OK);
    st = json_object_get(c, "steps");
    int64_t kept = json_integer_value(json_object_get(st, "total"));
    assert_true(kept <= STORE_STEPS_MAX && kept > STORE_STEPS_MAX / 2);
    sp = json_object_get(st, "points");
    /* The first bucket still has a record: the run's start is kept. */
    json_t *first = json_object_get(json_array_get(sp, 0), "step");
    assert_true(json_integer_value(first) <=
                json_integer_value(json_object_get(st, "per_point")));
    assert_int_equal(json_integer_value(json_object_get(
                         json_array_get(sp, json_array_size(sp) - 1), "step")),
                     10000);
    json_decref(c);

    /* The newest page, then the one after it. */
    json_t *page;
    int64_t total = 0;
    assert_int_equal(store_job_epochs_page(f->st, "tn_a", "job_c", 25, 25, 1,
                                           &page, &total, &err),
                     TY_OK);
    assert_int_equal(total, 1000);
    assert_int_equal(json_array_size(page), 25);
    assert_int_equal(
        json_integer_value(json_object_get(json_array_get(page, 0), "epoch")),
        975);
    json_decref(page);
}

static void test_reopen_keeps_data(void **state)
{
    fixture *f = *state;
    ty_err err;
    json_t *d = ds_doc("ds_keep");
    assert_int_equal(
        store_dataset_insert(f->st, "tn_a", "ds_keep", "k", 1, d, &err), TY_OK);
    json_decref(d);
    store_close(f->st);
    assert_int_equal(store_open(f->dir, &f->st, &err), TY_OK);
    assert_int_equal(store_schema_version(f->st), 11);
    json_t *doc;
    assert_int_equal(
        store_dataset_get(f->st, "tn_a", "ds_keep", &doc, NULL, &err), TY_OK);
    json_decref(doc);
}

/* A server with the Slurm executor stops: its Slurm jobs stay running (the
 * next server re-attaches them), the local ones go back to the queue. */
static void test_slurm_jobs_survive_restart(void **state)
{
    fixture *f = *state;
    ty_err err;
    json_t *d = ds_doc("ds_s");
    assert_int_equal(
        store_dataset_insert(f->st, "tn_a", "ds_s", "s", 1, d, &err), TY_OK);
    json_decref(d);
    const char *ids[] = {"job_local", "job_slurm"};
    for (int i = 0; i < 2; i++) {
        json_t *v = json_pack("{s:f}", "split", 0.1),
               *spec = json_pack("{s:[]}", "layers"),
               *hp = json_pack("{s:i}", "epochs", 3);
        assert_int_equal(store_job_insert(f->st, "tn_a", ids[i], "j", "ds_s", v,
                                          spec, hp, 1, &err),
                         TY_OK);
        json_decref(v);
        json_decref(spec);
        json_decref(hp);
    }
    json_t *local =
        json_pack("{s:s, s:i}", "executor", "local", "worker_pid", 42);
    json_t *slurm = json_pack("{s:s, s:{s:i, s:s}}", "executor", "slurm",
                              "slurm", "job_id", 7, "token_sha256", "ab");
    assert_int_equal(store_job_start_on(f->st, ids[0], "cpu", local, &err),
                     TY_OK);
    assert_int_equal(store_job_start_on(f->st, ids[1], "cpu", slurm, &err),
                     TY_OK);
    json_decref(local);
    json_decref(slurm);
    int64_t n = 0;
    assert_int_equal(store_job_requeue_running(f->st, "slurm", &n, &err),
                     TY_OK);
    assert_int_equal(n, 1);
    json_t *rows = NULL;
    assert_int_equal(store_job_running_on(f->st, "slurm", &rows, &err), TY_OK);
    assert_int_equal(json_array_size(rows), 1);
    json_t *row = json_array_get(rows, 0);
    assert_string_equal(json_string_value(json_object_get(row, "id")),
                        "job_slurm");
    json_t *sl = json_object_get(json_object_get(row, "placement"), "slurm");
    assert_int_equal(json_integer_value(json_object_get(sl, "job_id")), 7);
    assert_string_equal(json_string_value(json_object_get(row, "tenant_id")),
                        "tn_a");
    json_decref(rows);
    assert_int_equal(store_job_running_on(f->st, "local", &rows, &err), TY_OK);
    assert_int_equal(json_array_size(rows), 0);
    json_decref(rows);
    /* A server back on the local executor requeues them all. */
    assert_int_equal(store_job_requeue_running(f->st, NULL, &n, &err), TY_OK);
    assert_int_equal(n, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_migrated_and_keys, setup,
                                        tu_store_teardown),
        cmocka_unit_test_setup_teardown(
            test_datasets_are_per_tenant_and_paginate, setup,
            tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_slurm_jobs_survive_restart, setup,
                                        tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_job_life_cycle, setup,
                                        tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_cancel_queued_and_finish, setup,
                                        tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_model_insert_without_job, setup,
                                        tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_job_curves_downsample, setup,
                                        tu_store_teardown),
        cmocka_unit_test_setup_teardown(test_reopen_keeps_data, setup,
                                        tu_store_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
