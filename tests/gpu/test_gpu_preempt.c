/*
 * test_gpu_preempt.c - preemption (train_job.preempt) on the CUDA backend
 * (ctest label "gpu"): an MLP with dropout under Adam trains on the GPU
 * uninterrupted, then again preempted at its first progress report (after
 * step 1: the sums live on the device, the steps replay a CUDA graph from
 * the second full-size step) and after epoch 1. Each preempted run must
 * return TY_EPREEMPTED with its checkpoint written and no model; resumed,
 * it must end with the uninterrupted run's model, byte for byte (the
 * kernels are run-to-run deterministic, graph or not: test_gpu_graph.c).
 *
 * Exit status: 0 passed, 1 a check failed, 77 skipped (no CUDA device, or
 * a binary built without TRAINYARD_HAVE_CUDA), with "SKIPPED: ..." on stdout.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/ty.h"
#include "models/train/train.h"
#include "tests/unit/synth_data.h"

#if TRAINYARD_HAVE_CUDA
#include "gpu/cuda/backend.h"

typedef struct {
    volatile sig_atomic_t *preempt;
    int on_progress;      /* set *preempt at the first report */
    uint32_t after_epoch; /* or after this epoch */
    uint64_t resume_step;
    int resumed, preempts;
} ctl;

static void on_progress(void *ctx, const train_progress *p)
{
    ctl *c = ctx;
    if (c->on_progress) {
        *c->preempt = 1;
        c->on_progress = 0;
    }
}

static void on_epoch(void *ctx, const train_epoch_metrics *m)
{
    ctl *c = ctx;
    if (c->after_epoch && m->epoch == c->after_epoch)
        *c->preempt = 1;
}

static void on_resume(void *ctx, uint32_t epoch, uint64_t step)
{
    ctl *c = ctx;
    c->resumed++;
    c->resume_step = step;
}

static void on_preempt(void *ctx, uint32_t epoch, uint64_t step, int ck)
{
    ctl *c = ctx;
    c->preempts += ck ? 1 : 100; /* a preemption here must checkpoint */
}

static ty_status run(const synth *s, const json_t *spec,
                     const train_hparams *hp, const char *ckpt,
                     const char *model, ctl *c, const nn_exec *ex, ty_err *err)
{
    train_job job = {
        .spec = spec,
        .hp = hp,
        .train = &s->ds,
        .checkpoint_path = ckpt,
        .model_path = model,
        .threads = 1,
        .prefetch = -1,
        .preempt = c->preempt,
        .cb = {.ctx = c,
               .on_progress = on_progress,
               .on_epoch = on_epoch,
               .on_resume = on_resume,
               .on_preempt = on_preempt},
        .be = &nn_backend_cuda,
        .ex = ex,
    };
    return train_run(&job, NULL, err);
}

static int same_file(const char *a, const char *b)
{
    char *da = NULL, *db = NULL;
    size_t la = 0, lb = 0;
    int same = fs_read_all(a, 1 << 26, &da, &la, NULL) == TY_OK &&
               fs_read_all(b, 1 << 26, &db, &lb, NULL) == TY_OK && la == lb &&
               memcmp(da, db, la) == 0;
    free(da);
    free(db);
    return same;
}

/* One preempted-and-resumed case against the reference model ref. */
static int preempt_case(const char *name, const synth *s, const json_t *spec,
                        const train_hparams *hp, const char *dir,
                        const char *ref, int on_progress, uint32_t after_epoch,
                        const nn_exec *ex)
{
    char ckpt[512], model[512];
    snprintf(ckpt, sizeof ckpt, "%s/%s.ckpt", dir, name);
    snprintf(model, sizeof model, "%s/%s.safetensors", dir, name);
    volatile sig_atomic_t preempt = 0;
    ctl c = {.preempt = &preempt,
             .on_progress = on_progress,
             .after_epoch = after_epoch};
    ty_err err = {0};
    ty_status st = run(s, spec, hp, ckpt, model, &c, ex, &err);
    if (st != TY_EPREEMPTED || c.preempts != 1 || !fs_exists(ckpt) ||
        fs_exists(model)) {
        printf("FAIL: %s: preempted run gave %s (%s), preempts %d, "
               "checkpoint %d, model %d\n",
               name, ty_status_name(st), err.msg, c.preempts, fs_exists(ckpt),
               fs_exists(model));
        return 1;
    }
    preempt = 0;
    ctl c2 = {.preempt = &preempt};
    st = run(s, spec, hp, ckpt, model, &c2, ex, &err);
    if (st != TY_OK || c2.resumed != 1 || c2.resume_step == 0) {
        printf("FAIL: %s: resumed run gave %s (%s), resumed %d at step %llu\n",
               name, ty_status_name(st), err.msg, c2.resumed,
               (unsigned long long)c2.resume_step);
        return 1;
    }
    if (!same_file(ref, model)) {
        printf("FAIL: %s: the resumed model differs from the uninterrupted "
               "one\n",
               name);
        return 1;
    }
    printf("ok: %s (resumed at step %llu)\n", name,
           (unsigned long long)c2.resume_step);
    return 0;
}

int main(void)
{
    char why[256] = "";
    if (nn_cuda_device_count(why, sizeof why) == 0) {
        printf("SKIPPED: no CUDA device (%s)\n", why);
        return 77;
    }
    nn_exec ex = {0};
    ty_err err = {0};
    if (nn_cuda_exec_init(&ex, 0, &err) != TY_OK) {
        printf("FAIL: nn_cuda_exec_init: %s\n", err.msg);
        return 1;
    }
    char dir[] = "/tmp/ty_gpu_preempt_XXXXXX";
    if (!mkdtemp(dir)) {
        printf("FAIL: mkdtemp\n");
        return 1;
    }
    synth s;
    synth_xor(&s, 640, 3); /* 20 full steps of 32 an epoch */
    json_t *spec = json_loads(
        "{\"layers\":[{\"type\":\"dense\",\"units\":64},{\"type\":\"gelu\"},"
        "{\"type\":\"dropout\",\"rate\":0.2},{\"type\":\"dense\",\"units\":2}]"
        "}",
        0, NULL);
    json_t *hj = json_loads("{\"epochs\":3,\"batch_size\":32,\"seed\":8,"
                            "\"optimizer\":\"adam\"}",
                            0, NULL);
    train_hparams hp;
    int rc = 1;
    if (!spec || !hj || train_hparams_parse(hj, &hp, NULL, &err) != TY_OK) {
        printf("FAIL: setup: %s\n", err.msg);
        goto done;
    }
    char ref[512], ref_ckpt[512];
    snprintf(ref, sizeof ref, "%s/ref.safetensors", dir);
    snprintf(ref_ckpt, sizeof ref_ckpt, "%s/ref.ckpt", dir);
    volatile sig_atomic_t never = 0;
    ctl c = {.preempt = &never};
    ty_status st = run(&s, spec, &hp, ref_ckpt, ref, &c, &ex, &err);
    if (st != TY_OK) {
        printf("FAIL: uninterrupted run: %s\n", err.msg);
        goto done;
    }
    rc = preempt_case("mid_epoch", &s, spec, &hp, dir, ref, 1, 0, &ex);
    rc |= preempt_case("after_epoch", &s, spec, &hp, dir, ref, 0, 1, &ex);
done:
    json_decref(spec);
    json_decref(hj);
    synth_free(&s);
    fs_remove_tree(dir, NULL);
    nn_cuda_exec_free(&ex);
    return rc;
}

#else

int main(void)
{
    printf("SKIPPED: this binary was built without the CUDA backend\n");
    return 77;
}

#endif
