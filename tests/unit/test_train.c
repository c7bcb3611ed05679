/* test_train.c - the training loop on small synthetic datasets: it learns
 * (classification and regression), reports, is deterministic, resumes
 * bit-identically after an epoch or mid-epoch, refuses another job's
 * checkpoint, stops on request and on a diverging loss, and applies its
 * preprocessing identically at predict time. Gradient accumulation steps as
 * one larger batch would, resumes exactly with accumulation and schedules,
 * and binary cross-entropy and Huber train, save and predict. With image
 * augmentation it is still deterministic and resumes exactly, and augments
 * training batches only. A preempted run (train_job.preempt) stops at a
 * step boundary with a checkpoint there and resumes bit-identically; one
 * preempted before any step writes nothing; one preempted after its last
 * step still writes its model. Also hyperparameter parsing and the
 * train/validation split. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "models/nn.h"
#include "models/safetensors.h"
#include "models/train/train.h"
#include "synth_data.h"
#include "testutil.h"

/* The suite's scratch folder (tu_tmpdir_setup makes it, teardown removes it). */
static const char *const dir = tu_tmpdir;

static void path_in(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
    unlink(buf);
}

typedef struct {
    int epochs_seen, progress_calls, resumed;
    uint32_t resume_epoch;
    uint64_t resume_step;
    uint32_t stop_after_epoch; /* set *stop after this epoch (0: never) */
    int stop_on_progress;      /* set *stop at the first progress report */
    volatile sig_atomic_t *stop;
    train_epoch_metrics first, last;
    double last_fraction;
    /* Preemption: set *preempt at the first progress report, or after
     * this epoch; what on_preempt said. */
    volatile sig_atomic_t *preempt;
    int preempt_on_progress;
    uint32_t preempt_after_epoch;
    uint64_t preempt_set_at; /* p->step when set from on_progress */
    int preempts, preempt_checkpointed;
    uint32_t preempt_epoch;
    uint64_t preempt_step;
    /* on_step: each step's loss (steps below 64), the first and last. */
    double step_loss[64];
    uint64_t first_step, last_step;
} cb_state;

static void on_progress(void *ctx, const train_progress *p)
{
    cb_state *c = ctx;
    c->progress_calls++;
    assert_true(p->fraction >= c->last_fraction && p->fraction <= 1.0);
    assert_true(p->step >= 1 && p->step <= p->total_steps);
    c->last_fraction = p->fraction;
    if (c->stop_on_progress) {
        *c->stop = 1;
        c->stop_on_progress = 0;
    }
    if (c->preempt_on_progress) {
        *c->preempt = 1;
        c->preempt_on_progress = 0;
        c->preempt_set_at = p->step;
    }
}

static void on_epoch(void *ctx, const train_epoch_metrics *m)
{
    cb_state *c = ctx;
    c->epochs_seen++;
    if (c->epochs_seen == 1)
        c->first = *m;
    c->last = *m;
    if (c->stop_after_epoch && m->epoch == c->stop_after_epoch)
        *c->stop = 1;
    if (c->preempt_after_epoch && m->epoch == c->preempt_after_epoch)
        *c->preempt = 1;
}

static void on_preempt(void *ctx, uint32_t epoch, uint64_t step,
                       int checkpointed)
{
    cb_state *c = ctx;
    c->preempts++;
    c->preempt_epoch = epoch;
    c->preempt_step = step;
    c->preempt_checkpointed = checkpointed;
}

static void on_step(void *ctx, uint64_t step, double loss)
{
    cb_state *c = ctx;
    if (!c->first_step)
        c->first_step = step;
    c->last_step = step;
    if (step < TY_ARRAY_LEN(c->step_loss))
        c->step_loss[step] = loss;
}

static void on_resume(void *ctx, uint32_t epoch, uint64_t step)
{
    cb_state *c = ctx;
    c->resumed++;
    c->resume_epoch = epoch;
    c->resume_step = step;
}

static json_t *spec_of(const char *text)
{
    json_t *j = json_loads(text, 0, NULL);
    assert_non_null(j);
    return j;
}

static train_hparams hparams_of(const char *text)
{
    json_t *j = json_loads(text, 0, NULL);
    assert_non_null(j);
    train_hparams hp;
    ty_err err;
    assert_int_equal(train_hparams_parse(j, &hp, NULL, &err), TY_OK);
    json_decref(j);
    return hp;
}

static train_job job_of(const json_t *spec, const train_hparams *hp,
                        const ty_dataset *ds, cb_state *cb,
                        volatile sig_atomic_t *stop, const char *ckpt,
                        const char *model)
{
    train_job j = {
        .spec = spec,
        .hp = hp,
        .train = ds,
        .checkpoint_path = ckpt,
        .model_path = model,
        .threads = 1,
        .stop = stop,
        .cb = {.ctx = cb,
               .on_progress = on_progress,
               .on_epoch = on_epoch,
               .on_resume = on_resume,
               .on_preempt = on_preempt,
               .on_step = on_step},
    };
    cb->stop = stop;
    return j;
}

static void assert_files_equal(const char *a, const char *b)
{
    char *da, *db;
    size_t la, lb;
    assert_int_equal(fs_read_all(a, 1 << 24, &da, &la, NULL), TY_OK);
    assert_int_equal(fs_read_all(b, 1 << 24, &db, &lb, NULL), TY_OK);
    assert_int_equal(la, lb);
    assert_memory_equal(da, db, la);
    free(da);
    free(db);
}

static const char *xor_spec =
    "{\"layers\":[{\"type\":\"dense\",\"units\":32},{\"type\":\"tanh\"},"
    "{\"type\":\"dense\",\"units\":2}]}";

static void test_classification_learns(void **state)
{
    synth s;
    synth_xor(&s, 1200, 1);
    uint32_t *tr, *va, ntr, nva;
    ty_err err;
    assert_int_equal(train_split(1200, 0.25, 7, &tr, &ntr, &va, &nva, &err),
                     TY_OK);
    json_t *spec = spec_of(xor_spec);
    train_hparams hp = hparams_of("{\"epochs\":30,\"batch_size\":32,"
                                  "\"learning_rate\":0.01,\"seed\":3}");
    char model[128], ckpt[128];
    path_in(model, sizeof model, "xor.safetensors");
    path_in(ckpt, sizeof ckpt, "xor.ckpt");
    cb_state cb = {0};
    volatile sig_atomic_t stop = 0;
    train_job job = job_of(spec, &hp, &s.ds, &cb, &stop, ckpt, model);
    job.train_idx = tr;
    job.n_train = ntr;
    job.val = &s.ds;
    job.val_idx = va;
    job.n_val = nva;
    json_t *extra = json_pack("{s:s}", "trainyard.job_id", "job-1");
    job.extra_meta = extra;
    train_epoch_metrics fin;
    ty_status st = train_run(&job, &fin, &err);
    if (st != TY_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(cb.epochs_seen, 30);
    assert_true(cb.progress_calls >= 1);
    assert_int_equal(cb.resumed, 0);
    assert_int_equal(fin.epoch, 30);
    assert_true(cb.first.train_loss > 2.0 * fin.train_loss);
    assert_true(fin.train_accuracy > 0.95);
    assert_true(fin.val_accuracy > 0.95);
    assert_true(fin.val_loss >= 0 && fin.val_loss < 0.3);
    assert_true(fin.samples_per_sec > 0);

    /* The saved model predicts what training measured. */
    nn_net *net;
    assert_int_equal(nn_net_load(model, &net, &err), TY_OK);
    assert_int_equal(nn_net_task(net), TY_TASK_CLASSIFICATION);
    assert_int_equal(nn_net_num_outputs(net), 2);
    assert_int_equal(nn_net_input_features(net), 4);
    assert_int_equal(nn_net_param_count(net), 4 * 32 + 32 + 32 * 2 + 2);
    const json_t *meta = nn_net_meta(net);
    json_t *classes = json_pack("[s, s]", "same", "different");
    assert_true(json_equal(json_object_get(meta, "classes"), classes));
    json_decref(classes);
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(meta, "preprocess"), "kind")),
                        "standardize");
    nn_workspace *ws = nn_workspace_create(net, 50);
    assert_non_null(ws);
    assert_int_equal(nn_workspace_max_batch(ws), 50);
    float x[50 * 4], probs[50 * 2];
    uint32_t hits = 0, total = 0;
    for (uint32_t first = 0; first < nva; first += 50) {
        uint32_t m = nva - first < 50 ? nva - first : 50;
        for (uint32_t i = 0; i < m; i++)
            memcpy(x + i * 4, (float *)s.x + (size_t)va[first + i] * 4,
                   4 * sizeof(float));
        assert_int_equal(nn_net_predict(net, ws, x, m, probs, &err), TY_OK);
        for (uint32_t i = 0; i < m; i++) {
            assert_float_equal(probs[2 * i] + probs[2 * i + 1], 1.0, 1e-6);
            assert_true(probs[2 * i] >= 0 && probs[2 * i + 1] >= 0);
            int pred = probs[2 * i + 1] > probs[2 * i];
            hits += pred == s.y[va[first + i]];
            total++;
        }
    }
    assert_float_equal((double)hits / total, fin.val_accuracy, 1.5 / nva);
    assert_int_equal(nn_net_predict(net, ws, x, 51, probs, &err), TY_EINVAL);
    /* evaluate over the whole dataset matches predict over it */
    double loss, acc;
    assert_int_equal(nn_net_evaluate(net, &s.ds, NULL, &loss, &acc, &err),
                     TY_OK);
    uint32_t all_hits = 0;
    for (uint32_t first = 0; first < 1200; first += 50) {
        assert_int_equal(
            nn_net_predict(net, ws, (float *)s.x + first * 4, 50, probs, &err),
            TY_OK);
        for (uint32_t i = 0; i < 50; i++)
            all_hits += (probs[2 * i + 1] > probs[2 * i]) == s.y[first + i];
    }
    assert_float_equal(acc, all_hits / 1200.0, 1.5 / 1200);
    assert_true(acc > 0.95 && loss < 0.3);
    nn_workspace_destroy(ws);
    nn_net_destroy(net);

    /* Extra metadata is merged; the engine's own keys stay. */
    st_file f;
    assert_int_equal(st_open(model, &f, &err), TY_OK);
    assert_string_equal(st_meta(&f, "trainyard.job_id"), "job-1");
    assert_string_equal(st_meta(&f, "trainyard.format"), "1");
    assert_string_equal(st_meta(&f, "trainyard.task"), "classification");
    assert_string_equal(st_meta(&f, "trainyard.input_shape"), "[4]");
    assert_string_equal(st_meta(&f, "trainyard.num_outputs"), "2");
    assert_int_equal(f.count, 4);
    st_close(&f);

    json_decref(extra);
    json_decref(spec);
    free(tr);
    free(va);
    synth_free(&s);
}

static void test_regression_learns(void **state)
{
    synth s;
    synth_linear(&s, 512, 2);
    json_t *spec =
        spec_of("{\"layers\":[{\"type\":\"dense\",\"units\":16},"
                "{\"type\":\"relu\"},{\"type\":\"dense\",\"units\":1}]}");
    train_hparams hp =
        hparams_of("{\"epochs\":40,\"batch_size\":16,\"optimizer\":"
                   "\"sgd\",\"learning_rate\":0.02,\"momentum\":0.9,"
                   "\"seed\":11}");
    char model[128];
    path_in(model, sizeof model, "lin.safetensors");
    cb_state cb = {0};
    train_job job = job_of(spec, &hp, &s.ds, &cb, NULL, NULL, model);
    train_epoch_metrics fin;
    ty_err err;
    ty_status st = train_run(&job, &fin, &err);
    if (st != TY_OK)
        fail_msg("%s", err.msg);
    assert_true(cb.first.train_loss > 10.0 * fin.train_loss);
    assert_true(fin.train_loss < 0.01);
    assert_float_equal(fin.train_accuracy, -1.0, 0);
    assert_float_equal(fin.val_loss, -1.0, 0);
    nn_net *net;
    assert_int_equal(nn_net_load(model, &net, &err), TY_OK);
    assert_true(json_is_null(json_object_get(nn_net_meta(net), "classes")));
    double loss, acc;
    assert_int_equal(nn_net_evaluate(net, &s.ds, NULL, &loss, &acc, &err),
                     TY_OK);
    assert_true(loss < 0.01);
    assert_float_equal(acc, -1.0, 0);
    nn_workspace *ws = nn_workspace_create(net, 4);
    float x[3] = {0.5f, -0.5f, 0.2f}, y;
    assert_int_equal(nn_net_predict(net, ws, x, 1, &y, &err), TY_OK);
    assert_float_equal(y, 2 * 0.5 + 1.5 + 0.1 + 1, 0.15);
    nn_workspace_destroy(ws);
    nn_net_destroy(net);
    json_decref(spec);
    synth_free(&s);
}

static const char *dropout_spec =
    "{\"layers\":[{\"type\":\"dense\",\"units\":16},{\"type\":\"gelu\"},"
    "{\"type\":\"dropout\",\"rate\":0.2},{\"type\":\"dense\",\"units\":2}]}";

static void run_ok(train_job *job, train_epoch_metrics *fin)
{
    ty_err err;
    ty_status st = train_run(job, fin, &err);
    if (st != TY_OK)
        fail_msg("%s: %s", ty_status_name(st), err.msg);
}

static void test_deterministic(void **state)
{
    synth s;
    synth_xor(&s, 300, 4);
    json_t *spec = spec_of(dropout_spec);
    train_hparams hp =
        hparams_of("{\"epochs\":3,\"batch_size\":32,\"seed\":99}");
    char a[128], b[128], c[128];
    path_in(a, sizeof a, "det_a.safetensors");
    path_in(b, sizeof b, "det_b.safetensors");
    path_in(c, sizeof c, "det_c.safetensors");
    cb_state cb = {0};
    train_epoch_metrics fa, fb;
    train_job job = job_of(spec, &hp, &s.ds, &cb, NULL, NULL, a);
    run_ok(&job, &fa);
    job.model_path = b;
    run_ok(&job, &fb);
    assert_files_equal(a, b);
    assert_memory_equal(&fa.train_loss, &fb.train_loss, sizeof(double));
    /* Another seed gives other weights. */
    train_hparams hp2 = hp;
    hp2.seed = 100;
    job.hp = &hp2;
    job.model_path = c;
    run_ok(&job, &fb);
    assert_int_equal(fs_file_size(a), fs_file_size(c));
    char *da, *dc;
    size_t la, lc;
    fs_read_all(a, 1 << 20, &da, &la, NULL);
    fs_read_all(c, 1 << 20, &dc, &lc, NULL);
    assert_memory_not_equal(da, dc, la);
    free(da);
    free(dc);
    json_decref(spec);
    synth_free(&s);
}

/* A run stopped (after an epoch or at the first progress report) and
 * resumed ends bit-identical to an uninterrupted one, optimizer state and
 * epoch metrics included, on data s with `threads` compute threads and the
 * loader's thread as train_job.prefetch says. */
static void resume_on(const synth *s, const char *spec_text,
                      const char *hp_text, int threads, int prefetch,
                      uint32_t stop_after_epoch, int stop_on_progress,
                      uint32_t want_epoch, uint64_t want_step)
{
    json_t *spec = spec_of(spec_text);
    train_hparams hp = hparams_of(hp_text);
    char full[128], full_ckpt[128], part[128], part_ckpt[128];
    path_in(full, sizeof full, "full.safetensors");
    path_in(full_ckpt, sizeof full_ckpt, "full.ckpt");
    path_in(part, sizeof part, "part.safetensors");
    path_in(part_ckpt, sizeof part_ckpt, "part.ckpt");
    train_epoch_metrics ff, fp;
    cb_state cb = {0};
    volatile sig_atomic_t stop = 0;
    train_job job = job_of(spec, &hp, &s->ds, &cb, &stop, full_ckpt, full);
    job.threads = threads;
    job.prefetch = prefetch;
    run_ok(&job, &ff);

    cb_state cb2 = {.stop_after_epoch = stop_after_epoch,
                    .stop_on_progress = stop_on_progress};
    job = job_of(spec, &hp, &s->ds, &cb2, &stop, part_ckpt, part);
    job.threads = threads;
    job.prefetch = prefetch;
    ty_err err;
    assert_int_equal(train_run(&job, &fp, &err), TY_ECANCELLED);
    assert_false(fs_exists(part));
    assert_true(fs_exists(part_ckpt));
    stop = 0;
    cb_state cb3 = {0};
    job = job_of(spec, &hp, &s->ds, &cb3, &stop, part_ckpt, part);
    job.threads = threads;
    job.prefetch = prefetch;
    run_ok(&job, &fp);
    assert_int_equal(cb3.resumed, 1);
    assert_int_equal(cb3.resume_epoch, want_epoch);
    assert_int_equal(cb3.resume_step, want_step);
    /* The epochs still to run, after the last finished one's record once
     * more (a crash may have lost it). */
    assert_int_equal(cb3.epochs_seen,
                     (int)(hp.epochs - want_epoch) + (want_epoch > 0));
    if (want_epoch > 0) {
        assert_int_equal(cb3.first.epoch, want_epoch);
        assert_string_equal(cb3.first.device, "cpu");
    }
    assert_files_equal(full, part);
    tu_assert_tensors_equal(full_ckpt, part_ckpt); /* optimizer state too */
    assert_memory_equal(&ff.train_loss, &fp.train_loss, sizeof(double));
    assert_memory_equal(&ff.val_loss, &fp.val_loss, sizeof(double));

    /* Resuming a finished run writes the same model again. */
    cb_state cb4 = {0};
    job = job_of(spec, &hp, &s->ds, &cb4, &stop, part_ckpt, part);
    job.threads = threads;
    job.prefetch = prefetch;
    run_ok(&job, &fp);
    assert_int_equal(cb4.resume_epoch, hp.epochs);
    assert_int_equal(cb4.epochs_seen, 1); /* the last one, repeated */
    assert_int_equal(cb4.first.epoch, hp.epochs);
    assert_memory_equal(&cb4.first.train_loss, &ff.train_loss, sizeof(double));
    assert_int_equal(fp.epoch, hp.epochs);
    assert_memory_equal(&ff.train_loss, &fp.train_loss, sizeof(double));
    assert_files_equal(full, part);
    json_decref(spec);
}

static void resume_case(const char *hp_text, uint32_t stop_after_epoch,
                        int stop_on_progress, uint32_t want_epoch,
                        uint64_t want_step)
{
    synth s;
    synth_xor(&s, 300, 5);
    resume_on(&s, dropout_spec, hp_text, 1, 0, stop_after_epoch,
              stop_on_progress, want_epoch, want_step);
    synth_free(&s);
}

static void test_resume_after_epoch(void **state)
{
    /* 300 examples / 32 = 10 steps an epoch; stop after epoch 2. */
    resume_case("{\"epochs\":4,\"batch_size\":32,\"seed\":5}", 2, 0, 2, 20);
}

static void test_resume_mid_epoch(void **state)
{
    /* Checkpoint every step; stop at the first progress report (step 1). */
    resume_case("{\"epochs\":2,\"batch_size\":32,\"seed\":6,"
                "\"optimizer\":\"sgd\",\"momentum\":0.5,"
                "\"checkpoint_every_steps\":1}",
                0, 1, 0, 1);
}

/* A run that max_steps ends in the middle of an epoch checkpoints that
 * position (the epoch not finished), so a resume with a larger max_steps
 * goes on from the next step of the same epoch: the same examples in the
 * same order and the same dropout stream, its losses and final weights
 * those of a run never stopped. (The checkpoint used to say "epoch
 * finished" with a step count inside it, and the resume failed with
 * "inconsistent position".) 300 examples / 32 = 10 steps an epoch; 15
 * stops in epoch 2. */
static void test_resume_after_max_steps_mid_epoch(void **state)
{
    synth s;
    synth_xor(&s, 300, 5);
    json_t *spec = spec_of(dropout_spec);
    train_hparams hp27 = hparams_of("{\"epochs\":3,\"batch_size\":32,"
                                    "\"seed\":7,\"max_steps\":27}");
    train_hparams hp15 = hparams_of("{\"epochs\":3,\"batch_size\":32,"
                                    "\"seed\":7,\"max_steps\":15}");
    char full[128], full_ckpt[128], part[128], part_ckpt[128], again[128];
    path_in(full, sizeof full, "full.safetensors");
    path_in(full_ckpt, sizeof full_ckpt, "full.ckpt");
    path_in(part, sizeof part, "part.safetensors");
    path_in(part_ckpt, sizeof part_ckpt, "part.ckpt");
    path_in(again, sizeof again, "again.safetensors");
    volatile sig_atomic_t stop = 0;
    train_epoch_metrics ff, fp;

    cb_state straight = {0};
    train_job job =
        job_of(spec, &hp27, &s.ds, &straight, &stop, full_ckpt, full);
    run_ok(&job, &ff);
    assert_int_equal(straight.first_step, 1);
    assert_int_equal(straight.last_step, 27);

    /* Stopped by max_steps 15: it writes its model and a checkpoint at
     * step 15, one epoch finished. */
    cb_state first = {0};
    job = job_of(spec, &hp15, &s.ds, &first, &stop, part_ckpt, part);
    run_ok(&job, &fp);
    assert_int_equal(first.last_step, 15);
    assert_true(fs_exists(part));
    assert_int_equal(fp.epoch, 2); /* the partial epoch's record */

    /* The same job again (a finished run retried) resumes at its end and
     * writes the same model. */
    cb_state retried = {0};
    job = job_of(spec, &hp15, &s.ds, &retried, &stop, part_ckpt, again);
    run_ok(&job, &fp);
    assert_int_equal(retried.resumed, 1);
    assert_int_equal(retried.resume_epoch, 1);
    assert_int_equal(retried.resume_step, 15);
    assert_int_equal(retried.first_step, 0); /* no step taken */
    assert_files_equal(part, again);

    /* Extended to max_steps 27: it resumes at step 15 and takes steps 16
     * to 27 as the straight run did. */
    cb_state rest = {0};
    job = job_of(spec, &hp27, &s.ds, &rest, &stop, part_ckpt, part);
    ty_err err;
    ty_status st = train_run(&job, &fp, &err);
    if (st != TY_OK)
        fail_msg("resuming with a larger max_steps: %s: %s", ty_status_name(st),
                 err.msg);
    assert_int_equal(rest.resumed, 1);
    assert_int_equal(rest.resume_epoch, 1);
    assert_int_equal(rest.resume_step, 15);
    assert_int_equal(rest.first_step, 16);
    assert_int_equal(rest.last_step, 27);
    for (uint64_t k = 16; k <= 27; k++)
        if (!(fabs(rest.step_loss[k] - straight.step_loss[k]) <=
              1e-12 * fabs(straight.step_loss[k])))
            fail_msg("step %llu: loss %.17g resumed, %.17g straight",
                     (unsigned long long)k, rest.step_loss[k],
                     straight.step_loss[k]);
    assert_files_equal(full, part);
    tu_assert_tensors_equal(full_ckpt, part_ckpt); /* optimizer state too */
    assert_memory_equal(&ff.train_loss, &fp.train_loss, sizeof(double));
    assert_int_equal(fp.epoch, 3);
    json_decref(spec);
    synth_free(&s);
}

/* Two worker threads, with layer sizes above the backend's split thresholds
 * (GEMMs, the Adam step and the gather run split): still bit-identical run
 * to run, and across a resume. */
static void test_two_threads_deterministic_and_resumable(void **state)
{
    synth s;
    synth_images_sized(&s, 640, 16, 12);
    json_t *spec =
        spec_of("{\"layers\":[{\"type\":\"flatten\"},"
                "{\"type\":\"dense\",\"units\":160},{\"type\":\"relu\"},"
                "{\"type\":\"dropout\",\"rate\":0.1},"
                "{\"type\":\"dense\",\"units\":2}]}");
    train_hparams hp = hparams_of("{\"epochs\":10,\"batch_size\":32,\"seed\":8,"
                                  "\"learning_rate\":0.01}");
    char a[128], b[128], ckpt[128];
    path_in(a, sizeof a, "t2_a.safetensors");
    path_in(b, sizeof b, "t2_b.safetensors");
    path_in(ckpt, sizeof ckpt, "t2.ckpt");
    cb_state cb = {0};
    volatile sig_atomic_t stop = 0;
    train_epoch_metrics fa, fb;
    train_job job = job_of(spec, &hp, &s.ds, &cb, &stop, NULL, a);
    job.threads = 2;
    run_ok(&job, &fa);
    assert_true(fa.train_accuracy > 0.8);
    cb_state cb2 = {.stop_after_epoch = 4};
    job = job_of(spec, &hp, &s.ds, &cb2, &stop, ckpt, b);
    job.threads = 2;
    ty_err err;
    assert_int_equal(train_run(&job, &fb, &err), TY_ECANCELLED);
    stop = 0;
    cb_state cb3 = {0};
    job = job_of(spec, &hp, &s.ds, &cb3, &stop, ckpt, b);
    job.threads = 2;
    run_ok(&job, &fb);
    assert_int_equal(cb3.resume_epoch, 4);
    assert_files_equal(a, b);
    assert_memory_equal(&fa.train_loss, &fb.train_loss, sizeof(double));
    json_decref(spec);
    synth_free(&s);
}

static void test_resume_mid_epoch_accumulating(void **state)
{
    /* 10 minibatches an epoch in groups of 3: 4 optimizer steps (the last
     * of one minibatch); a checkpoint after every step; stop at step 1. */
    resume_case("{\"epochs\":2,\"batch_size\":32,\"seed\":6,"
                "\"optimizer\":\"sgd\",\"momentum\":0.5,\"nesterov\":true,"
                "\"accumulation_steps\":3,\"checkpoint_every_steps\":1}",
                0, 1, 0, 1);
}

static void test_resume_with_schedule_and_clipping(void **state)
{
    /* 5 optimizer steps an epoch; stop after epoch 2 (step 10), inside
     * neither the warm-up nor the cosine's end. */
    resume_case("{\"epochs\":4,\"batch_size\":32,\"seed\":5,"
                "\"optimizer\":\"adamw\",\"learning_rate\":0.01,"
                "\"lr_schedule\":{\"type\":\"cosine\",\"min_lr\":0.0001},"
                "\"warmup_steps\":3,\"clip_grad_norm\":0.5,"
                "\"accumulation_steps\":2,\"label_smoothing\":0.1}",
                2, 0, 2, 10);
}

/* Every tensor of two safetensors files within tol. */
static void assert_tensors_close(const char *a, const char *b, double tol)
{
    st_file fa, fb;
    assert_int_equal(st_open(a, &fa, NULL), TY_OK);
    assert_int_equal(st_open(b, &fb, NULL), TY_OK);
    assert_int_equal(fa.count, fb.count);
    for (size_t i = 0; i < fa.count; i++) {
        const st_tensor *t = st_find(&fb, fa.tensors[i].name);
        assert_non_null(t);
        assert_int_equal(t->nbytes, fa.tensors[i].nbytes);
        const float *x = (const float *)fa.tensors[i].data;
        const float *y = (const float *)t->data;
        for (size_t k = 0; k < t->nbytes / sizeof(float); k++)
            if (fabs((double)x[k] - y[k]) > tol)
                fail_msg("%s[%zu]: %.9g vs %.9g", t->name, k, x[k], y[k]);
    }
    st_close(&fa);
    st_close(&fb);
}

/* k minibatches of b accumulated step as one batch of k * b: the same
 * weights up to float rounding, the epoch's last short group included
 * (300 = 3 * 96 + 12). No dropout, so the batches see the same network. */
static void test_accumulation_equals_large_batch(void **state)
{
    synth s;
    synth_xor(&s, 300, 9);
    json_t *spec = spec_of(xor_spec);
    const char *variants[][2] = {
        {"{\"epochs\":3,\"batch_size\":96,\"seed\":4,\"optimizer\":\"sgd\","
         "\"learning_rate\":0.1,\"momentum\":0.9}",
         "{\"epochs\":3,\"batch_size\":32,\"seed\":4,\"optimizer\":\"sgd\","
         "\"learning_rate\":0.1,\"momentum\":0.9,\"accumulation_steps\":3}"},
        {"{\"epochs\":2,\"batch_size\":96,\"seed\":4,\"clip_grad_norm\":0.3,"
         "\"loss\":\"cross_entropy\",\"label_smoothing\":0.05}",
         "{\"epochs\":2,\"batch_size\":32,\"seed\":4,\"clip_grad_norm\":0.3,"
         "\"label_smoothing\":0.05,\"accumulation_steps\":3}"},
    };
    for (size_t v = 0; v < 2; v++) {
        train_hparams big = hparams_of(variants[v][0]);
        train_hparams acc = hparams_of(variants[v][1]);
        char a[128], b[128];
        path_in(a, sizeof a, "acc_big.safetensors");
        path_in(b, sizeof b, "acc_small.safetensors");
        cb_state cb = {0}, cb2 = {0};
        train_epoch_metrics fa, fb;
        train_job job = job_of(spec, &big, &s.ds, &cb, NULL, NULL, a);
        run_ok(&job, &fa);
        job = job_of(spec, &acc, &s.ds, &cb2, NULL, NULL, b);
        run_ok(&job, &fb);
        assert_tensors_close(a, b, 2e-5);
        assert_float_equal(fa.train_loss, fb.train_loss, 1e-5);
        assert_float_equal(fa.train_accuracy, fb.train_accuracy, 0);
        /* A different grouping really is different. */
        train_hparams two = acc;
        two.accumulation_steps = 2;
        cb_state cb3 = {0};
        job = job_of(spec, &two, &s.ds, &cb3, NULL, NULL, b);
        run_ok(&job, &fb);
        assert_true(fabs(fa.train_loss - fb.train_loss) > 1e-6);
    }
    json_decref(spec);
    synth_free(&s);
}

/* Progress counts optimizer steps and reports the scheduled rate. */
typedef struct {
    uint64_t steps_per_epoch, total_steps, last_step;
    double lr;
    int calls;
} lr_seen;

static void on_progress_lr(void *ctx, const train_progress *p)
{
    lr_seen *l = ctx;
    l->steps_per_epoch = p->steps_per_epoch;
    l->total_steps = p->total_steps;
    l->last_step = p->step;
    l->lr = p->lr;
    l->calls++;
}

static void test_progress_counts_optimizer_steps(void **state)
{
    synth s;
    synth_xor(&s, 100, 3);
    json_t *spec = spec_of(xor_spec);
    /* 100 / 8 = 13 minibatches, in groups of 4: 4 steps an epoch. */
    train_hparams hp =
        hparams_of("{\"epochs\":2,\"batch_size\":8,\"seed\":2,"
                   "\"accumulation_steps\":4,\"learning_rate\":0.1,"
                   "\"lr_schedule\":{\"type\":\"step\","
                   "\"step_epochs\":1,\"gamma\":0.5}}");
    char model[128];
    path_in(model, sizeof model, "steps.safetensors");
    lr_seen seen = {0};
    train_job job = {.spec = spec,
                     .hp = &hp,
                     .train = &s.ds,
                     .model_path = model,
                     .threads = 1,
                     .cb = {.ctx = &seen, .on_progress = on_progress_lr}};
    run_ok(&job, NULL);
    assert_true(seen.calls >= 1);
    assert_int_equal(seen.steps_per_epoch, 4);
    assert_int_equal(seen.total_steps, 8);
    /* The first report is at step 1, epoch 1: the unscaled rate. */
    assert_true(seen.last_step >= 1 && seen.last_step <= 8);
    if (seen.last_step > 4)
        assert_float_equal(seen.lr, 0.05, 1e-12);
    else
        assert_float_equal(seen.lr, 0.1, 1e-12);
    json_decref(spec);
    synth_free(&s);
}

static void test_checkpoint_identity_new_hparams(void **state)
{
    synth s;
    synth_xor(&s, 100, 6);
    json_t *spec = spec_of(xor_spec);
    char model[128], ckpt[128];
    path_in(model, sizeof model, "idm.safetensors");
    path_in(ckpt, sizeof ckpt, "id.ckpt");
    ty_err err;
    const char *others[] = {
        "{\"epochs\":1,\"seed\":1,\"accumulation_steps\":3}",
        "{\"epochs\":1,\"seed\":1}",
        "{\"epochs\":1,\"seed\":1,\"accumulation_steps\":2,"
        "\"lr_schedule\":{\"type\":\"cosine\"}}",
        "{\"epochs\":1,\"seed\":1,\"accumulation_steps\":2,\"warmup_steps\":5}",
        "{\"epochs\":1,\"seed\":1,\"accumulation_steps\":2,\"clip_grad_norm\":"
        "1}",
        "{\"epochs\":1,\"seed\":1,\"accumulation_steps\":2,\"label_smoothing\":"
        "0.1}",
        "{\"epochs\":1,\"seed\":1,\"accumulation_steps\":2,\"optimizer\":"
        "\"adamw\"}",
        "{\"epochs\":1,\"seed\":1,\"accumulation_steps\":2,"
        "\"lr_schedule\":{\"type\":\"step\",\"step_epochs\":1}}",
    };
    train_hparams hp =
        hparams_of("{\"epochs\":1,\"seed\":1,\"accumulation_steps\":2}");
    cb_state cb = {0};
    train_job job = job_of(spec, &hp, &s.ds, &cb, NULL, ckpt, model);
    run_ok(&job, NULL);
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
        train_hparams o = hparams_of(others[i]);
        job.hp = &o;
        cb = (cb_state){0};
        assert_int_equal(train_run(&job, NULL, &err), TY_EINVAL);
        assert_non_null(strstr(err.msg, "checkpoint does not match this job"));
    }
    /* A constant schedule may be extended by more epochs ... */
    train_hparams more = hp;
    more.epochs = 2;
    job.hp = &more;
    cb = (cb_state){0};
    run_ok(&job, NULL);
    assert_int_equal(cb.resumed, 1);
    /* ... a cosine one may not: its curve spans the whole run. */
    path_in(ckpt, sizeof ckpt, "id_cos.ckpt");
    train_hparams cos1 = hparams_of("{\"epochs\":1,\"seed\":1,"
                                    "\"lr_schedule\":{\"type\":\"cosine\"}}");
    job.hp = &cos1;
    job.checkpoint_path = ckpt;
    cb = (cb_state){0};
    run_ok(&job, NULL);
    train_hparams cos2 = cos1;
    cos2.epochs = 2;
    job.hp = &cos2;
    cb = (cb_state){0};
    assert_int_equal(train_run(&job, NULL, &err), TY_EINVAL);
    json_decref(spec);
    synth_free(&s);
}

/* Binary cross-entropy on a 2-class dataset: a 1-unit model that learns,
 * saves its loss, and predicts [1 - p, p] as training measured. */
static void test_binary_cross_entropy_learns(void **state)
{
    synth s;
    synth_xor(&s, 800, 12);
    json_t *spec =
        spec_of("{\"layers\":[{\"type\":\"dense\",\"units\":32},"
                "{\"type\":\"tanh\"},{\"type\":\"dense\",\"units\":1}]}");
    train_hparams hp = hparams_of("{\"epochs\":30,\"batch_size\":32,"
                                  "\"learning_rate\":0.01,\"seed\":3,"
                                  "\"loss\":\"binary_cross_entropy\"}");
    char model[128];
    path_in(model, sizeof model, "bce.safetensors");
    cb_state cb = {0};
    train_epoch_metrics fin;
    train_job job = job_of(spec, &hp, &s.ds, &cb, NULL, NULL, model);
    run_ok(&job, &fin);
    assert_true(fin.train_accuracy > 0.95);
    assert_true(cb.first.train_loss > 2.0 * fin.train_loss);

    nn_net *net;
    ty_err err;
    assert_int_equal(nn_net_load(model, &net, &err), TY_OK);
    assert_int_equal(nn_net_num_outputs(net), 2);
    assert_int_equal(nn_net_param_count(net), 4 * 32 + 32 + 32 + 1);
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(nn_net_meta(net), "loss"), "kind")),
                        "binary_cross_entropy");
    nn_workspace *ws = nn_workspace_create(net, 100);
    float probs[200];
    uint32_t hits = 0;
    for (uint32_t first = 0; first < 800; first += 100) {
        assert_int_equal(
            nn_net_predict(net, ws, (float *)s.x + first * 4, 100, probs, &err),
            TY_OK);
        for (uint32_t i = 0; i < 100; i++) {
            assert_float_equal(probs[2 * i] + probs[2 * i + 1], 1.0, 1e-6);
            hits += (probs[2 * i + 1] > 0.5f) == s.y[first + i];
        }
    }
    double loss, acc;
    assert_int_equal(nn_net_evaluate(net, &s.ds, NULL, &loss, &acc, &err),
                     TY_OK);
    assert_float_equal(acc, hits / 800.0, 1e-9);
    assert_float_equal(acc, fin.train_accuracy, 0.03);
    assert_true(loss < 0.3);
    nn_workspace_destroy(ws);
    nn_net_destroy(net);
    st_file f;
    assert_int_equal(st_open(model, &f, &err), TY_OK);
    assert_string_equal(st_meta(&f, "trainyard.num_outputs"), "2");
    assert_string_equal(st_meta(&f, "trainyard.loss"),
                        "{\"kind\":\"binary_cross_entropy\"}");
    st_close(&f);

    /* The 2-unit spec does not fit this loss; the error says why. */
    json_t *two = spec_of(xor_spec);
    job.spec = two;
    assert_int_equal(train_run(&job, NULL, &err), TY_EINVAL);
    assert_string_equal(err.field, "model.layers[2].units");
    assert_non_null(strstr(err.msg, "binary_cross_entropy"));
    json_decref(two);
    json_decref(spec);
    synth_free(&s);
}

static void test_huber_learns(void **state)
{
    synth s;
    synth_linear(&s, 512, 2);
    json_t *spec =
        spec_of("{\"layers\":[{\"type\":\"dense\",\"units\":16},"
                "{\"type\":\"relu\"},{\"type\":\"dense\",\"units\":1}]}");
    train_hparams hp =
        hparams_of("{\"epochs\":40,\"batch_size\":16,\"optimizer\":"
                   "\"sgd\",\"learning_rate\":0.02,\"momentum\":0.9,"
                   "\"seed\":11,\"loss\":\"huber\",\"huber_delta\":0.5}");
    char model[128];
    path_in(model, sizeof model, "huber.safetensors");
    cb_state cb = {0};
    train_epoch_metrics fin;
    train_job job = job_of(spec, &hp, &s.ds, &cb, NULL, NULL, model);
    run_ok(&job, &fin);
    assert_true(cb.first.train_loss > 10.0 * fin.train_loss);
    nn_net *net;
    ty_err err;
    assert_int_equal(nn_net_load(model, &net, &err), TY_OK);
    double loss, acc;
    assert_int_equal(nn_net_evaluate(net, &s.ds, NULL, &loss, &acc, &err),
                     TY_OK);
    /* Evaluation uses the Huber loss too: below the MSE's half where small. */
    assert_true(loss < 0.01);
    assert_float_equal(
        json_number_value(json_object_get(
            json_object_get(nn_net_meta(net), "loss"), "huber_delta")),
        0.5, 0);
    nn_net_destroy(net);
    /* A classification loss for a regression dataset is refused. */
    train_hparams bad = hp;
    bad.loss.kind = NN_LOSS_CROSS_ENTROPY;
    job.hp = &bad;
    assert_int_equal(train_run(&job, NULL, &err), TY_EINVAL);
    assert_string_equal(err.field, "hyperparameters.loss");
    json_decref(spec);
    synth_free(&s);
}

/* ---- augmentation (models/train/loader.c) ---- */

static const char *image_spec =
    "{\"layers\":[{\"type\":\"flatten\"},{\"type\":\"dense\",\"units\":24},"
    "{\"type\":\"relu\"},{\"type\":\"dropout\",\"rate\":0.1},"
    "{\"type\":\"dense\",\"units\":2}]}";

/* With augmentation on, a run resumed mid-epoch (the loader restarts at the
 * checkpoint's step and redraws the same crops and flips) or after an epoch
 * is bit-identical to an uninterrupted one, with one and two compute
 * threads, prefetching on the loader's thread and inline. */
static void test_augment_resume(void **state)
{
    synth s;
    synth_images_sized(&s, 300, 8, 12); /* 10 steps an epoch */
    const char *mid =
        "{\"epochs\":2,\"batch_size\":32,\"seed\":21,"
        "\"checkpoint_every_steps\":1,\"learning_rate\":0.01,"
        "\"augment\":{\"crop_padding\":2,\"horizontal_flip\":true}}";
    resume_on(&s, image_spec, mid, 2, 1, 0, 1, 0, 1);
    resume_on(&s, image_spec, mid, 2, -1, 0, 1, 0, 1);
    resume_on(&s, image_spec, mid, 1, 1, 0, 1, 0, 1);
    resume_on(&s, image_spec, mid, 1, -1, 0, 1, 0, 1);
    const char *epochs = "{\"epochs\":3,\"batch_size\":32,\"seed\":22,"
                         "\"augment\":{\"crop_padding\":1}}";
    resume_on(&s, image_spec, epochs, 2, 1, 1, 0, 1, 10);
    /* Accumulating: the loader restarts at minibatch step * 3. */
    const char *accum =
        "{\"epochs\":2,\"batch_size\":32,\"seed\":23,"
        "\"accumulation_steps\":3,\"checkpoint_every_steps\":1,"
        "\"augment\":{\"crop_padding\":2,\"horizontal_flip\":true}}";
    resume_on(&s, image_spec, accum, 2, 1, 0, 1, 0, 1);
    resume_on(&s, image_spec, accum, 1, -1, 0, 1, 0, 1);
    synth_free(&s);
}

/* Same seed twice with augmentation on: identical weights; augmentation
 * does change them (it is applied); validation sees the plain images (its
 * metrics are the saved model's on the validation set). */
static void test_augment_deterministic_and_training_only(void **state)
{
    synth s, v;
    synth_images_sized(&s, 320, 8, 13);
    synth_images_sized(&v, 90, 8, 14);
    json_t *spec = spec_of(image_spec);
    train_hparams on = hparams_of(
        "{\"epochs\":3,\"batch_size\":32,\"seed\":5,\"learning_rate\":0.01,"
        "\"augment\":{\"crop_padding\":2,\"horizontal_flip\":true}}");
    train_hparams off = on;
    off.augment = (loader_augment){0};
    char a[128], b[128], c[128];
    path_in(a, sizeof a, "aug_a.safetensors");
    path_in(b, sizeof b, "aug_b.safetensors");
    path_in(c, sizeof c, "aug_c.safetensors");
    for (int threads = 1; threads <= 2; threads++) {
        cb_state cb = {0};
        train_epoch_metrics fa, fb, fc;
        train_job job = job_of(spec, &on, &s.ds, &cb, NULL, NULL, a);
        job.threads = threads;
        job.val = &v.ds;
        run_ok(&job, &fa);
        job.model_path = b;
        run_ok(&job, &fb);
        assert_files_equal(a, b);
        assert_memory_equal(&fa.train_loss, &fb.train_loss, sizeof(double));
        job.hp = &off;
        job.model_path = c;
        run_ok(&job, &fc);
        assert_true(fa.train_loss != fc.train_loss);
        nn_net *net;
        ty_err err;
        double loss, acc;
        assert_int_equal(nn_net_load(a, &net, &err), TY_OK);
        assert_int_equal(nn_net_evaluate(net, &v.ds, NULL, &loss, &acc, &err),
                         TY_OK);
        assert_float_equal(loss, fa.val_loss, 1e-6 * loss);
        assert_float_equal(acc, fa.val_accuracy, 0);
        nn_net_destroy(net);
    }
    json_decref(spec);
    synth_free(&s);
    synth_free(&v);
}

/* The loader's thread changes when a batch is made, never what is in it:
 * prefetching or not, the same weights bit for bit (per thread count). */
static void test_prefetch_changes_nothing(void **state)
{
    synth s;
    synth_images_sized(&s, 300, 8, 18);
    json_t *spec = spec_of(image_spec);
    train_hparams hp = hparams_of(
        "{\"epochs\":2,\"batch_size\":32,\"seed\":9,\"learning_rate\":0.01,"
        "\"augment\":{\"crop_padding\":1,\"horizontal_flip\":true}}");
    char a[128], b[128];
    path_in(a, sizeof a, "pf_on.safetensors");
    path_in(b, sizeof b, "pf_off.safetensors");
    for (int threads = 1; threads <= 2; threads++) {
        cb_state cb = {0}, cb2 = {0};
        train_epoch_metrics fa, fb;
        train_job job = job_of(spec, &hp, &s.ds, &cb, NULL, NULL, a);
        job.threads = threads;
        job.prefetch = 1;
        run_ok(&job, &fa);
        job = job_of(spec, &hp, &s.ds, &cb2, NULL, NULL, b);
        job.threads = threads;
        job.prefetch = -1;
        run_ok(&job, &fb);
        assert_files_equal(a, b);
        assert_memory_equal(&fa.train_loss, &fb.train_loss, sizeof(double));
    }
    json_decref(spec);
    synth_free(&s);
}

static void test_augment_errors(void **state)
{
    synth s;
    synth_xor(&s, 50, 15);
    json_t *spec = spec_of(xor_spec);
    train_hparams hp = hparams_of("{\"epochs\":1,\"seed\":1,"
                                  "\"augment\":{\"horizontal_flip\":true}}");
    char model[128];
    path_in(model, sizeof model, "augerr.safetensors");
    cb_state cb = {0};
    train_job job = job_of(spec, &hp, &s.ds, &cb, NULL, NULL, model);
    ty_err err;
    assert_int_equal(train_run(&job, NULL, &err), TY_EINVAL);
    assert_string_equal(err.field, "hyperparameters.augment");
    assert_false(fs_exists(model));
    json_decref(spec);
    synth_free(&s);

    synth_images_sized(&s, 50, 8, 16);
    spec = spec_of(image_spec);
    hp = hparams_of(
        "{\"epochs\":1,\"seed\":1,\"augment\":{\"crop_padding\":5}}");
    job = job_of(spec, &hp, &s.ds, &cb, NULL, NULL, model);
    assert_int_equal(train_run(&job, NULL, &err), TY_EINVAL);
    assert_string_equal(err.field, "hyperparameters.augment.crop_padding");
    json_decref(spec);
    synth_free(&s);
}

static void test_checkpoint_of_another_job(void **state)
{
    synth s;
    synth_xor(&s, 100, 6);
    json_t *spec = spec_of(xor_spec);
    json_t *other =
        spec_of("{\"layers\":[{\"type\":\"dense\",\"units\":8},"
                "{\"type\":\"relu\"},{\"type\":\"dense\",\"units\":2}]}");
    train_hparams hp = hparams_of("{\"epochs\":1,\"seed\":1}");
    char model[128], ckpt[128];
    path_in(model, sizeof model, "m.safetensors");
    path_in(ckpt, sizeof ckpt, "shared.ckpt");
    cb_state cb = {0};
    train_job job = job_of(spec, &hp, &s.ds, &cb, NULL, ckpt, model);
    run_ok(&job, NULL);
    job.spec = other;
    ty_err err;
    assert_int_equal(train_run(&job, NULL, &err), TY_EINVAL);
    assert_non_null(strstr(err.msg, "checkpoint does not match this job"));
    /* Another seed is another job too. */
    train_hparams hp2 = hp;
    hp2.seed = 2;
    job.spec = spec;
    job.hp = &hp2;
    assert_int_equal(train_run(&job, NULL, &err), TY_EINVAL);
    /* Nor is one with other augmentation (on image data). */
    synth im;
    synth_images_sized(&im, 64, 8, 17);
    json_t *ispec = spec_of(image_spec);
    train_hparams hi = hparams_of("{\"epochs\":1,\"seed\":1}");
    char ickpt[128], imodel[128];
    path_in(ickpt, sizeof ickpt, "aug.ckpt");
    path_in(imodel, sizeof imodel, "aug.safetensors");
    cb_state icb = {0};
    train_job ij = job_of(ispec, &hi, &im.ds, &icb, NULL, ickpt, imodel);
    run_ok(&ij, NULL);
    train_hparams hf = hi;
    hf.augment.horizontal_flip = 1;
    ij.hp = &hf;
    assert_int_equal(train_run(&ij, NULL, &err), TY_EINVAL);
    assert_non_null(strstr(err.msg, "checkpoint does not match this job"));
    json_decref(ispec);
    synth_free(&im);
    /* Nor is a job that asks for fewer epochs than were done. */
    train_hparams hp0 = hp;
    hp0.epochs = 2;
    job.hp = &hp0;
    run_ok(&job, NULL);
    job.hp = &hp;
    assert_int_equal(train_run(&job, NULL, &err), TY_EINVAL);
    assert_non_null(strstr(err.msg, "checkpoint does not match this job"));
    /* A model file is not a checkpoint. */
    job.hp = &hp;
    job.checkpoint_path = model;
    assert_int_equal(train_run(&job, NULL, &err), TY_EINVAL);
    json_decref(spec);
    json_decref(other);
    synth_free(&s);
}

static void test_cancel(void **state)
{
    synth s;
    synth_xor(&s, 100, 7);
    json_t *spec = spec_of(xor_spec);
    train_hparams hp = hparams_of("{\"epochs\":5,\"seed\":1}");
    char model[128];
    path_in(model, sizeof model, "cancel.safetensors");
    cb_state cb = {0};
    volatile sig_atomic_t stop = 1;
    train_job job = job_of(spec, &hp, &s.ds, &cb, &stop, NULL, model);
    ty_err err;
    assert_int_equal(train_run(&job, NULL, &err), TY_ECANCELLED);
    assert_int_equal(cb.epochs_seen, 0);
    assert_false(fs_exists(model));
    json_decref(spec);
    synth_free(&s);
}

/* ---- preemption (train_job.preempt) ---- */

/* A run preempted (at the first progress report, i.e. after step 1, or
 * after epoch preempt_after_epoch) returns TY_EPREEMPTED with a checkpoint
 * of exactly the position it stopped at and no model; run again it
 * resumes there and ends bit-identical to a run never stopped, optimizer
 * state included. */
static void preempt_case(const char *hp_text, int on_progress,
                         uint32_t after_epoch, uint32_t want_epoch,
                         uint64_t want_step)
{
    synth s;
    synth_xor(&s, 300, 11);
    json_t *spec = spec_of(dropout_spec);
    train_hparams hp = hparams_of(hp_text);
    char full[128], full_ckpt[128], part[128], part_ckpt[128];
    path_in(full, sizeof full, "pfull.safetensors");
    path_in(full_ckpt, sizeof full_ckpt, "pfull.ckpt");
    path_in(part, sizeof part, "ppart.safetensors");
    path_in(part_ckpt, sizeof part_ckpt, "ppart.ckpt");
    volatile sig_atomic_t stop = 0, preempt = 0;
    train_epoch_metrics ff, fp;
    cb_state cb = {0};
    train_job job = job_of(spec, &hp, &s.ds, &cb, &stop, full_ckpt, full);
    job.preempt = &preempt;
    run_ok(&job, &ff);
    assert_int_equal(cb.preempts, 0);

    cb_state cb2 = {.preempt = &preempt,
                    .preempt_on_progress = on_progress,
                    .preempt_after_epoch = after_epoch};
    job = job_of(spec, &hp, &s.ds, &cb2, &stop, part_ckpt, part);
    job.preempt = &preempt;
    ty_err err;
    assert_int_equal(train_run(&job, &fp, &err), TY_EPREEMPTED);
    assert_non_null(strstr(err.msg, "preempted"));
    assert_int_equal(cb2.preempts, 1);
    assert_int_equal(cb2.preempt_epoch, want_epoch);
    assert_int_equal(cb2.preempt_step, want_step);
    if (on_progress) /* it stopped at the boundary right after the report */
        assert_int_equal(cb2.preempt_step, cb2.preempt_set_at);
    assert_true(cb2.preempt_checkpointed);
    assert_true(fs_exists(part_ckpt));
    assert_false(fs_exists(part));

    /* Resumed (the flag cleared, as a new worker has it): exact. */
    preempt = 0;
    cb_state cb3 = {0};
    job = job_of(spec, &hp, &s.ds, &cb3, &stop, part_ckpt, part);
    job.preempt = &preempt;
    run_ok(&job, &fp);
    assert_int_equal(cb3.resumed, 1);
    assert_int_equal(cb3.resume_epoch, want_epoch);
    assert_int_equal(cb3.resume_step, want_step);
    assert_int_equal(cb3.preempts, 0);
    assert_files_equal(full, part);
    tu_assert_tensors_equal(full_ckpt, part_ckpt);
    assert_memory_equal(&ff.train_loss, &fp.train_loss, sizeof(double));
    json_decref(spec);
    synth_free(&s);
}

static void test_preempt_mid_epoch_resumes_exactly(void **state)
{
    /* No checkpoint_every_steps: the preemption's checkpoint is the only
     * mid-epoch one. 10 steps an epoch; stopped after step 1. */
    preempt_case("{\"epochs\":3,\"batch_size\":32,\"seed\":21}", 1, 0, 0, 1);
}

static void test_preempt_mid_epoch_accumulating(void **state)
{
    /* 10 minibatches an epoch in optimizer steps of 3 (4 steps, the last
     * of one minibatch), SGD with momentum: the boundary is an optimizer
     * step's. */
    preempt_case("{\"epochs\":2,\"batch_size\":32,\"seed\":22,"
                 "\"optimizer\":\"sgd\",\"momentum\":0.5,"
                 "\"accumulation_steps\":3}",
                 1, 0, 0, 1);
}

static void test_preempt_after_epoch(void **state)
{
    /* Set after epoch 1 (10 steps): it stops before epoch 2's first step,
     * where the epoch's checkpoint already is. */
    preempt_case("{\"epochs\":3,\"batch_size\":32,\"seed\":23}", 0, 1, 1, 10);
}

/* Preempted before its first step: no checkpoint (a fresh start is the
 * same run), no model, and the next run starts from scratch. */
static void test_preempt_before_any_step(void **state)
{
    synth s;
    synth_xor(&s, 100, 7);
    json_t *spec = spec_of(xor_spec);
    train_hparams hp = hparams_of("{\"epochs\":2,\"seed\":1}");
    char model[128], ckpt[128];
    path_in(model, sizeof model, "pre0.safetensors");
    path_in(ckpt, sizeof ckpt, "pre0.ckpt");
    cb_state cb = {0};
    volatile sig_atomic_t stop = 0, preempt = 1;
    train_job job = job_of(spec, &hp, &s.ds, &cb, &stop, ckpt, model);
    job.preempt = &preempt;
    ty_err err;
    assert_int_equal(train_run(&job, NULL, &err), TY_EPREEMPTED);
    assert_int_equal(cb.preempts, 1);
    assert_int_equal(cb.preempt_step, 0);
    assert_int_equal(cb.preempt_epoch, 0);
    assert_false(cb.preempt_checkpointed);
    assert_int_equal(cb.progress_calls, 0);
    assert_int_equal(cb.epochs_seen, 0);
    assert_false(fs_exists(ckpt));
    assert_false(fs_exists(model));
    /* Cancel wins over preemption. */
    stop = 1;
    assert_int_equal(train_run(&job, NULL, &err), TY_ECANCELLED);
    assert_int_equal(cb.preempts, 1);
    /* Run again: from scratch, to the end. */
    stop = preempt = 0;
    cb_state cb2 = {0};
    job = job_of(spec, &hp, &s.ds, &cb2, &stop, ckpt, model);
    job.preempt = &preempt;
    run_ok(&job, NULL);
    assert_int_equal(cb2.resumed, 0);
    assert_int_equal(cb2.epochs_seen, 2);
    assert_true(fs_exists(model));
    json_decref(spec);
    synth_free(&s);
}

/* A preemption that comes after the last optimizer step (here: in the
 * last epoch's on_epoch, after its checkpoint, before the model is
 * written) does not stop the run: finishing wins, the model is written
 * and is the uninterrupted run's. */
static void test_preempt_after_final_step_keeps_the_model(void **state)
{
    synth s;
    synth_xor(&s, 200, 9);
    json_t *spec = spec_of(xor_spec);
    train_hparams hp =
        hparams_of("{\"epochs\":2,\"batch_size\":32,\"seed\":4}");
    char a[128], b[128], ckpt[128];
    path_in(a, sizeof a, "late_a.safetensors");
    path_in(b, sizeof b, "late_b.safetensors");
    path_in(ckpt, sizeof ckpt, "late.ckpt");
    volatile sig_atomic_t stop = 0, preempt = 0;
    cb_state cb = {0};
    train_job job = job_of(spec, &hp, &s.ds, &cb, &stop, NULL, a);
    run_ok(&job, NULL);
    cb_state cb2 = {.preempt = &preempt, .preempt_after_epoch = 2};
    job = job_of(spec, &hp, &s.ds, &cb2, &stop, ckpt, b);
    job.preempt = &preempt;
    run_ok(&job, NULL);
    assert_true(preempt); /* it was set, and did not stop the run */
    assert_int_equal(cb2.preempts, 0);
    assert_int_equal(cb2.epochs_seen, 2);
    assert_files_equal(a, b);
    json_decref(spec);
    synth_free(&s);
}

static void test_diverging_loss(void **state)
{
    synth s;
    synth_linear(&s, 64, 8);
    for (uint32_t i = 0; i < 64; i++)
        s.yv[i] *= 1e4f;
    json_t *spec = spec_of("{\"layers\":[{\"type\":\"dense\",\"units\":8},"
                           "{\"type\":\"dense\",\"units\":1}]}");
    train_hparams hp = hparams_of("{\"epochs\":50,\"optimizer\":\"sgd\","
                                  "\"learning_rate\":10,\"seed\":1}");
    char model[128];
    path_in(model, sizeof model, "nan.safetensors");
    cb_state cb = {0};
    train_job job = job_of(spec, &hp, &s.ds, &cb, NULL, NULL, model);
    ty_err err;
    assert_int_equal(train_run(&job, NULL, &err), TY_EINVAL);
    assert_string_equal(err.field, "hyperparameters.learning_rate");
    assert_non_null(strstr(err.msg, "lower learning_rate"));
    assert_false(fs_exists(model));
    json_decref(spec);
    synth_free(&s);
}

/* Reads tensor name (F32) from a model file into out. */
static void read_tensor(const char *path, const char *name, float *out,
                        size_t n)
{
    st_file f;
    assert_int_equal(st_open(path, &f, NULL), TY_OK);
    const st_tensor *t = st_find(&f, name);
    assert_non_null(t);
    assert_int_equal(t->numel, n);
    memcpy(out, t->data, n * sizeof(float));
    st_close(&f);
}

/* softmax(W x + b) in double for a single dense layer with 2 outputs. */
static void manual_probs(const float *w, const float *b, const double *x,
                         uint32_t k, double *p)
{
    double z[2];
    for (int o = 0; o < 2; o++) {
        z[o] = b[o];
        for (uint32_t j = 0; j < k; j++)
            z[o] += (double)w[o * k + j] * x[j];
    }
    double m = fmax(z[0], z[1]);
    double e0 = exp(z[0] - m), e1 = exp(z[1] - m);
    p[0] = e0 / (e0 + e1);
    p[1] = e1 / (e0 + e1);
}

static void test_scale_255_at_predict(void **state)
{
    synth s;
    synth_images(&s, 400, 9);
    json_t *spec = spec_of("{\"layers\":[{\"type\":\"flatten\"},"
                           "{\"type\":\"dense\",\"units\":2}]}");
    train_hparams hp = hparams_of("{\"epochs\":15,\"batch_size\":16,"
                                  "\"learning_rate\":0.05,\"seed\":2}");
    char model[128];
    path_in(model, sizeof model, "img.safetensors");
    cb_state cb = {0};
    train_job job = job_of(spec, &hp, &s.ds, &cb, NULL, NULL, model);
    train_epoch_metrics fin;
    run_ok(&job, &fin);
    assert_true(fin.train_accuracy > 0.9); /* linearly separable */
    float w[2 * 16], b[2];
    read_tensor(model, "1.weight", w, 32);
    read_tensor(model, "1.bias", b, 2);
    nn_net *net;
    ty_err err;
    assert_int_equal(nn_net_load(model, &net, &err), TY_OK);
    const json_t *pre = json_object_get(nn_net_meta(net), "preprocess");
    assert_string_equal(json_string_value(json_object_get(pre, "kind")),
                        "scale");
    assert_float_equal(json_real_value(json_object_get(pre, "factor")),
                       1.0 / 255.0, 1e-15);
    json_t *classes = json_pack("[i, i]", 0, 1);
    assert_true(
        json_equal(json_object_get(nn_net_meta(net), "classes"), classes));
    json_decref(classes);
    nn_workspace *ws = nn_workspace_create(net, 8);
    float raw[8 * 16], probs[8 * 2];
    for (int i = 0; i < 8 * 16; i++)
        raw[i] = ((uint8_t *)s.x)[i];
    assert_int_equal(nn_net_predict(net, ws, raw, 8, probs, &err), TY_OK);
    for (int i = 0; i < 8; i++) {
        double x[16], p[2];
        for (int j = 0; j < 16; j++)
            x[j] = raw[i * 16 + j] / 255.0;
        manual_probs(w, b, x, 16, p);
        assert_float_equal(probs[2 * i], p[0], 1e-5);
        assert_float_equal(probs[2 * i + 1], p[1], 1e-5);
    }
    nn_workspace_destroy(ws);
    nn_net_destroy(net);
    json_decref(spec);
    synth_free(&s);
}

static void test_standardize_from_training_examples(void **state)
{
    synth s;
    synth_xor(&s, 200, 10);
    /* Train on the first 150 examples only: statistics must come from them. */
    uint32_t idx[150];
    for (int i = 0; i < 150; i++)
        idx[i] = (uint32_t)(i * 4 / 3); /* a spread-out subset */
    json_t *spec = spec_of("{\"layers\":[{\"type\":\"dense\",\"units\":2}]}");
    train_hparams hp = hparams_of("{\"epochs\":2,\"seed\":3}");
    char model[128];
    path_in(model, sizeof model, "std.safetensors");
    cb_state cb = {0};
    train_job job = job_of(spec, &hp, &s.ds, &cb, NULL, NULL, model);
    job.train_idx = idx;
    job.n_train = 150;
    run_ok(&job, NULL);
    nn_net *net;
    ty_err err;
    assert_int_equal(nn_net_load(model, &net, &err), TY_OK);
    const json_t *pre = json_object_get(nn_net_meta(net), "preprocess");
    assert_string_equal(json_string_value(json_object_get(pre, "kind")),
                        "standardize");
    const float *x = s.x;
    double mean[4] = {0}, var[4] = {0};
    for (int i = 0; i < 150; i++)
        for (int j = 0; j < 4; j++)
            mean[j] += x[idx[i] * 4 + j] / 150.0;
    for (int i = 0; i < 150; i++)
        for (int j = 0; j < 4; j++)
            var[j] += pow(x[idx[i] * 4 + j] - mean[j], 2) / 150.0;
    float fmean[4], fstd[4];
    for (int j = 0; j < 4; j++) {
        double m =
            json_real_value(json_array_get(json_object_get(pre, "mean"), j));
        double sd =
            json_real_value(json_array_get(json_object_get(pre, "std"), j));
        assert_float_equal(m, mean[j], 1e-5 * fmax(1, fabs(mean[j])));
        if (j == 3)
            assert_float_equal(sd, 1.0, 0); /* constant feature */
        else
            assert_float_equal(sd, sqrt(var[j]), 1e-5 * sqrt(var[j]));
        fmean[j] = (float)m;
        fstd[j] = (float)sd;
    }
    float w[8], b[2];
    read_tensor(model, "0.weight", w, 8);
    read_tensor(model, "0.bias", b, 2);
    nn_workspace *ws = nn_workspace_create(net, 5);
    float probs[10];
    assert_int_equal(nn_net_predict(net, ws, x + 190 * 4, 5, probs, &err),
                     TY_OK);
    for (int i = 0; i < 5; i++) {
        double z[4], p[2];
        for (int j = 0; j < 4; j++)
            z[j] = (x[(190 + i) * 4 + j] - fmean[j]) / fstd[j];
        manual_probs(w, b, z, 4, p);
        assert_float_equal(probs[2 * i], p[0], 1e-5);
        assert_float_equal(probs[2 * i + 1], p[1], 1e-5);
    }
    nn_workspace_destroy(ws);
    nn_net_destroy(net);
    json_decref(spec);
    synth_free(&s);
}

static void test_job_errors(void **state)
{
    synth s;
    synth_xor(&s, 50, 11);
    json_t *bad = spec_of("{\"layers\":[{\"type\":\"dense\",\"units\":3}]}");
    train_hparams hp = hparams_of("{\"epochs\":1,\"seed\":1}");
    char model[128];
    path_in(model, sizeof model, "err.safetensors");
    cb_state cb = {0};
    train_job job = job_of(bad, &hp, &s.ds, &cb, NULL, NULL, model);
    ty_err err;
    assert_int_equal(train_run(&job, NULL, &err), TY_EINVAL);
    assert_string_equal(err.field, "model.layers[0].units");
    json_t *spec = spec_of(xor_spec);
    job.spec = spec;
    uint32_t idx[2] = {3, 50};
    job.train_idx = idx;
    job.n_train = 2;
    assert_int_equal(train_run(&job, NULL, &err), TY_EINVAL);
    assert_non_null(strstr(err.msg, "out of range"));
    job.train_idx = NULL;
    s.y[7] = 2;
    assert_int_equal(train_run(&job, NULL, &err), TY_EINVAL);
    s.y[7] = 0;
    json_t *extra = json_pack("{s:i}", "n", 1);
    job.extra_meta = extra;
    assert_int_equal(train_run(&job, NULL, &err), TY_EINVAL);
    json_decref(extra);
    assert_false(fs_exists(model));
    json_decref(bad);
    json_decref(spec);
    synth_free(&s);
}

/* ---- hyperparameters and split ---- */

static void test_hparams_defaults(void **state)
{
    train_hparams hp;
    json_t *norm;
    ty_err err;
    assert_int_equal(train_hparams_parse(NULL, &hp, &norm, &err), TY_OK);
    assert_int_equal(hp.epochs, 10);
    assert_int_equal(hp.batch_size, 64);
    assert_int_equal(hp.optimizer, NN_OPTIM_ADAM);
    assert_float_equal(hp.learning_rate, 0.001, 0);
    assert_float_equal(hp.beta1, 0.9, 0);
    assert_float_equal(hp.beta2, 0.999, 0);
    assert_float_equal(hp.epsilon, 1e-8, 0);
    assert_float_equal(hp.weight_decay, 0, 0);
    assert_int_equal(hp.checkpoint_every_steps, 0);
    assert_true(hp.seed <= (1ull << 53));
    /* The chosen seed is written out, so the run can be repeated. */
    assert_int_equal(json_integer_value(json_object_get(norm, "seed")),
                     hp.seed);
    assert_string_equal(json_string_value(json_object_get(norm, "optimizer")),
                        "adam");
    assert_null(json_object_get(norm, "momentum"));
    train_hparams again;
    assert_int_equal(train_hparams_parse(norm, &again, NULL, &err), TY_OK);
    assert_memory_equal(&hp, &again, sizeof hp);
    json_decref(norm);

    json_t *sgd = json_pack("{s:s}", "optimizer", "sgd");
    assert_int_equal(train_hparams_parse(sgd, &hp, &norm, &err), TY_OK);
    assert_float_equal(hp.learning_rate, 0.01, 0);
    assert_float_equal(hp.momentum, 0, 0);
    assert_non_null(json_object_get(norm, "momentum"));
    assert_null(json_object_get(norm, "beta1"));
    json_decref(norm);
    json_decref(sgd);
}

/* testutil's, under the name the calls below use. */
static void expect_hp_error(const char *text, const char *field)
{
    tu_expect_hparams_error(text, field);
}

static void test_hparams_errors(void **state)
{
    expect_hp_error("{\"epoch\":3}", "hyperparameters.epoch");
    expect_hp_error("{\"epochs\":0}", "hyperparameters.epochs");
    expect_hp_error("{\"epochs\":100001}", "hyperparameters.epochs");
    expect_hp_error("{\"batch_size\":0}", "hyperparameters.batch_size");
    expect_hp_error("{\"batch_size\":65537}", "hyperparameters.batch_size");
    expect_hp_error("{\"optimizer\":\"rmsprop\"}", "hyperparameters.optimizer");
    expect_hp_error("{\"learning_rate\":0}", "hyperparameters.learning_rate");
    expect_hp_error("{\"learning_rate\":11}", "hyperparameters.learning_rate");
    expect_hp_error("{\"momentum\":0.9}", "hyperparameters.momentum");
    expect_hp_error("{\"optimizer\":\"sgd\",\"momentum\":1}",
                    "hyperparameters.momentum");
    expect_hp_error("{\"optimizer\":\"sgd\",\"beta1\":0.5}",
                    "hyperparameters.beta1");
    expect_hp_error("{\"beta2\":1.0}", "hyperparameters.beta2");
    expect_hp_error("{\"epsilon\":0}", "hyperparameters.epsilon");
    expect_hp_error("{\"weight_decay\":-1}", "hyperparameters.weight_decay");
    expect_hp_error("{\"seed\":-1}", "hyperparameters.seed");
    expect_hp_error("{\"seed\":9007199254740993}", "hyperparameters.seed");
    expect_hp_error("{\"checkpoint_every_steps\":-5}",
                    "hyperparameters.checkpoint_every_steps");
    expect_hp_error("{\"optimizer\":\"adamax\"}", "hyperparameters.optimizer");
    expect_hp_error("{\"nesterov\":true}", "hyperparameters.nesterov");
    expect_hp_error("{\"optimizer\":\"adamw\",\"momentum\":0.5}",
                    "hyperparameters.momentum");
    expect_hp_error("{\"optimizer\":\"sgd\",\"nesterov\":true}",
                    "hyperparameters.nesterov");
    expect_hp_error("{\"optimizer\":\"sgd\",\"momentum\":0.9,\"nesterov\":1}",
                    "hyperparameters.nesterov");
    expect_hp_error("{\"lr_schedule\":\"cosine\"}",
                    "hyperparameters.lr_schedule");
    expect_hp_error("{\"lr_schedule\":{}}", "hyperparameters.lr_schedule.type");
    expect_hp_error("{\"lr_schedule\":{\"type\":\"exponential\"}}",
                    "hyperparameters.lr_schedule.type");
    expect_hp_error("{\"lr_schedule\":{\"type\":\"step\"}}",
                    "hyperparameters.lr_schedule.step_epochs");
    expect_hp_error("{\"lr_schedule\":{\"type\":\"step\",\"step_epochs\":0}}",
                    "hyperparameters.lr_schedule.step_epochs");
    expect_hp_error("{\"lr_schedule\":{\"type\":\"step\",\"step_epochs\":2,"
                    "\"gamma\":0}}",
                    "hyperparameters.lr_schedule.gamma");
    expect_hp_error("{\"lr_schedule\":{\"type\":\"step\",\"step_epochs\":2,"
                    "\"gamma\":1.5}}",
                    "hyperparameters.lr_schedule.gamma");
    expect_hp_error("{\"lr_schedule\":{\"type\":\"cosine\",\"gamma\":0.5}}",
                    "hyperparameters.lr_schedule.gamma");
    expect_hp_error("{\"lr_schedule\":{\"type\":\"constant\",\"min_lr\":0}}",
                    "hyperparameters.lr_schedule.min_lr");
    expect_hp_error("{\"lr_schedule\":{\"type\":\"cosine\",\"min_lr\":0.5}}",
                    "hyperparameters.lr_schedule.min_lr");
    expect_hp_error("{\"lr_schedule\":{\"type\":\"cosine\",\"min_lr\":-1}}",
                    "hyperparameters.lr_schedule.min_lr");
    expect_hp_error("{\"warmup_steps\":-1}", "hyperparameters.warmup_steps");
    expect_hp_error("{\"warmup_steps\":1.5}", "hyperparameters.warmup_steps");
    expect_hp_error("{\"clip_grad_norm\":0}", "hyperparameters.clip_grad_norm");
    expect_hp_error("{\"clip_grad_norm\":-1}",
                    "hyperparameters.clip_grad_norm");
    expect_hp_error("{\"accumulation_steps\":0}",
                    "hyperparameters.accumulation_steps");
    expect_hp_error("{\"accumulation_steps\":1025}",
                    "hyperparameters.accumulation_steps");
    expect_hp_error("{\"loss\":\"hinge\"}", "hyperparameters.loss");
    expect_hp_error("{\"loss\":\"mse\",\"label_smoothing\":0.1}",
                    "hyperparameters.label_smoothing");
    expect_hp_error("{\"label_smoothing\":1}",
                    "hyperparameters.label_smoothing");
    expect_hp_error("{\"label_smoothing\":-0.1}",
                    "hyperparameters.label_smoothing");
    expect_hp_error("{\"loss\":\"mse\",\"huber_delta\":2}",
                    "hyperparameters.huber_delta");
    expect_hp_error("{\"huber_delta\":2}", "hyperparameters.huber_delta");
    /* ZeRO: stage 0 or 1 only (422 naming the field at submit). */
    expect_hp_error("{\"zero\":2}", "hyperparameters.zero");
    expect_hp_error("{\"zero\":3}", "hyperparameters.zero");
    expect_hp_error("{\"zero\":-1}", "hyperparameters.zero");
    expect_hp_error("{\"zero\":0.5}", "hyperparameters.zero");
    expect_hp_error("{\"zero\":\"1\"}", "hyperparameters.zero");
    expect_hp_error("{\"zero\":true}", "hyperparameters.zero");
    expect_hp_error("{\"loss\":\"huber\",\"huber_delta\":0}",
                    "hyperparameters.huber_delta");
}

static void test_hparams_new_defaults_and_round_trip(void **state)
{
    ty_err err;
    train_hparams hp;
    json_t *norm;
    /* AdamW: decoupled decay 0.01 by default, as torch. */
    json_t *j = json_pack("{s:s}", "optimizer", "adamw");
    assert_int_equal(train_hparams_parse(j, &hp, &norm, &err), TY_OK);
    assert_int_equal(hp.optimizer, NN_OPTIM_ADAMW);
    assert_float_equal(hp.weight_decay, 0.01, 0);
    assert_float_equal(hp.learning_rate, 0.001, 0);
    assert_int_equal(hp.accumulation_steps, 1);
    assert_int_equal(hp.lr_schedule.kind, TRAIN_LR_CONSTANT);
    assert_int_equal(hp.loss.kind, NN_LOSS_AUTO);
    assert_float_equal(hp.clip_grad_norm, 0, 0);
    assert_null(json_object_get(norm, "clip_grad_norm"));
    /* zero: 0 by default, and then not named (older jobs' normalized
     * hyperparameters stay as they were). */
    assert_int_equal(hp.zero, 0);
    assert_null(json_object_get(norm, "zero"));
    assert_null(json_object_get(norm, "loss"));
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(norm, "lr_schedule"), "type")),
                        "constant");
    json_decref(norm);
    json_decref(j);

    /* Everything spelled out comes back the same. */
    j = json_loads("{\"optimizer\":\"sgd\",\"momentum\":0.9,\"nesterov\":true,"
                   "\"lr_schedule\":{\"type\":\"step\",\"step_epochs\":3},"
                   "\"warmup_steps\":100,\"clip_grad_norm\":2.5,"
                   "\"accumulation_steps\":4,\"loss\":\"huber\",\"seed\":1,"
                   "\"zero\":1}",
                   0, NULL);
    assert_int_equal(train_hparams_parse(j, &hp, &norm, &err), TY_OK);
    assert_true(hp.nesterov);
    assert_int_equal(hp.lr_schedule.kind, TRAIN_LR_STEP);
    assert_int_equal(hp.lr_schedule.step_epochs, 3);
    assert_float_equal(hp.lr_schedule.gamma, 0.1, 0);
    assert_int_equal(hp.warmup_steps, 100);
    assert_float_equal(hp.clip_grad_norm, 2.5, 0);
    assert_int_equal(hp.accumulation_steps, 4);
    assert_int_equal(hp.loss.kind, NN_LOSS_HUBER);
    assert_float_equal(hp.loss.huber_delta, 1.0, 0);
    assert_int_equal(hp.zero, 1);
    assert_int_equal(json_integer_value(json_object_get(norm, "zero")), 1);
    assert_float_equal(json_number_value(json_object_get(
                           json_object_get(norm, "lr_schedule"), "gamma")),
                       0.1, 0);
    train_hparams again;
    assert_int_equal(train_hparams_parse(norm, &again, NULL, &err), TY_OK);
    assert_memory_equal(&hp, &again, sizeof hp);
    json_decref(norm);
    json_decref(j);

    /* The task settles the loss and the normalized object says which. */
    j = json_pack("{s:f}", "label_smoothing", 0.0);
    assert_int_equal(train_hparams_parse(j, &hp, &norm, &err), TY_OK);
    assert_int_equal(
        train_hparams_resolve_loss(&hp, TY_TASK_REGRESSION, 1, norm, &err),
        TY_OK);
    assert_int_equal(hp.loss.kind, NN_LOSS_MSE);
    assert_string_equal(json_string_value(json_object_get(norm, "loss")),
                        "mse");
    assert_null(json_object_get(norm, "label_smoothing"));
    assert_int_equal(train_hparams_parse(norm, &again, NULL, &err), TY_OK);
    assert_int_equal(again.loss.kind, NN_LOSS_MSE);
    json_decref(norm);
    json_decref(j);
    j = json_pack("{s:f}", "label_smoothing", 0.2);
    assert_int_equal(train_hparams_parse(j, &hp, &norm, &err), TY_OK);
    assert_int_equal(
        train_hparams_resolve_loss(&hp, TY_TASK_REGRESSION, 1, norm, &err),
        TY_EINVAL);
    assert_string_equal(err.field, "hyperparameters.label_smoothing");
    assert_int_equal(
        train_hparams_resolve_loss(&hp, TY_TASK_CLASSIFICATION, 3, norm, &err),
        TY_OK);
    assert_string_equal(json_string_value(json_object_get(norm, "loss")),
                        "cross_entropy");
    assert_float_equal(
        json_number_value(json_object_get(norm, "label_smoothing")), 0.2, 0);
    json_decref(norm);
    json_decref(j);
    j = json_pack("{s:s}", "loss", "binary_cross_entropy");
    assert_int_equal(train_hparams_parse(j, &hp, NULL, &err), TY_OK);
    assert_int_equal(
        train_hparams_resolve_loss(&hp, TY_TASK_CLASSIFICATION, 10, NULL, &err),
        TY_EINVAL);
    assert_string_equal(err.field, "hyperparameters.loss");
    json_decref(j);
}

static void test_split(void **state)
{
    uint32_t *tr, *va, ntr, nva;
    ty_err err;
    assert_int_equal(train_split(1000, 0.2, 42, &tr, &ntr, &va, &nva, &err),
                     TY_OK);
    assert_int_equal(ntr, 800);
    assert_int_equal(nva, 200);
    uint8_t seen[1000] = {0};
    for (uint32_t i = 0; i < ntr; i++)
        seen[tr[i]]++;
    for (uint32_t i = 0; i < nva; i++)
        seen[va[i]]++;
    for (int i = 0; i < 1000; i++)
        assert_int_equal(seen[i], 1);
    uint32_t *tr2, *va2, ntr2, nva2;
    assert_int_equal(train_split(1000, 0.2, 42, &tr2, &ntr2, &va2, &nva2, &err),
                     TY_OK);
    assert_memory_equal(tr, tr2, ntr * sizeof *tr);
    assert_memory_equal(va, va2, nva * sizeof *va);
    free(tr2);
    free(va2);
    assert_int_equal(train_split(1000, 0.2, 43, &tr2, &ntr2, &va2, &nva2, &err),
                     TY_OK);
    assert_memory_not_equal(va, va2, nva * sizeof *va);
    free(tr);
    free(va);
    free(tr2);
    free(va2);
    assert_int_equal(train_split(10, 0.0, 1, &tr, &ntr, &va, &nva, &err),
                     TY_OK);
    assert_int_equal(ntr, 10);
    assert_int_equal(nva, 0);
    assert_null(va);
    free(tr);
    assert_int_equal(train_split(1, 0.6, 1, &tr, &ntr, &va, &nva, &err),
                     TY_EINVAL);
    assert_int_equal(train_split(10, 1.0, 1, &tr, &ntr, &va, &nva, &err),
                     TY_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classification_learns),
        cmocka_unit_test(test_regression_learns),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_resume_after_epoch),
        cmocka_unit_test(test_resume_mid_epoch),
        cmocka_unit_test(test_resume_after_max_steps_mid_epoch),
        cmocka_unit_test(test_two_threads_deterministic_and_resumable),
        cmocka_unit_test(test_resume_mid_epoch_accumulating),
        cmocka_unit_test(test_resume_with_schedule_and_clipping),
        cmocka_unit_test(test_accumulation_equals_large_batch),
        cmocka_unit_test(test_progress_counts_optimizer_steps),
        cmocka_unit_test(test_checkpoint_identity_new_hparams),
        cmocka_unit_test(test_binary_cross_entropy_learns),
        cmocka_unit_test(test_huber_learns),
        cmocka_unit_test(test_augment_resume),
        cmocka_unit_test(test_augment_deterministic_and_training_only),
        cmocka_unit_test(test_prefetch_changes_nothing),
        cmocka_unit_test(test_augment_errors),
        cmocka_unit_test(test_checkpoint_of_another_job),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_preempt_mid_epoch_resumes_exactly),
        cmocka_unit_test(test_preempt_mid_epoch_accumulating),
        cmocka_unit_test(test_preempt_after_epoch),
        cmocka_unit_test(test_preempt_before_any_step),
        cmocka_unit_test(test_preempt_after_final_step_keeps_the_model),
        cmocka_unit_test(test_diverging_loss),
        cmocka_unit_test(test_scale_255_at_predict),
        cmocka_unit_test(test_standardize_from_training_examples),
        cmocka_unit_test(test_job_errors),
        cmocka_unit_test(test_hparams_defaults),
        cmocka_unit_test(test_hparams_errors),
        cmocka_unit_test(test_hparams_new_defaults_and_round_trip),
        cmocka_unit_test(test_split),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
