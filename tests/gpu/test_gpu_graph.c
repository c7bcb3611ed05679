/*
 * test_gpu_graph.c - the trainer's CUDA-graph path on a real GPU (ctest
 * label "gpu"): the same runs with hyperparameters.cuda_graph true and
 * false must give the same bits.
 *
 * An MLP and a CNN with batchnorm train for 3 epochs of 250 examples in
 * batches of 32 (7 full steps and a short one an epoch) with AdamW under a
 * cosine schedule with warm-up - the learning rate, Adam's bias
 * corrections and AdamW's decay change every step, so a value baked into
 * the graph at capture instead of read from device memory shows - and
 * validation on. Graphs on: the first full step runs op by op, the second
 * is captured, every later full step replays it, the short step runs op
 * by op. The kernels are the same either way and run-to-run deterministic
 * on one device (tests/gpu/test_gpu_ops.c checks every op's bits twice),
 * so every weight, every epoch's training and validation loss and
 * accuracy must be identical, bit for bit; the epoch records must say
 * cuda_graph true (and false with the reason when turned off).
 *
 * Exit status: 0 passed, 1 a check failed, 77 skipped (no CUDA device, or
 * a binary built without TRAINYARD_HAVE_CUDA), with "SKIPPED: ..." on stdout.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/ty.h"
#include "models/safetensors.h"
#include "models/train/train.h"
#include "tests/unit/synth_data.h"

#if TRAINYARD_HAVE_CUDA
#include "gpu/cuda/backend.h"
#include "tests/gpu/gpu_testutil.h"

#define EPOCHS 3

typedef struct {
    train_epoch_metrics m[EPOCHS];
    char reason[EPOCHS][200];
    int n;
} run_log;

static void on_epoch(void *ctx, const train_epoch_metrics *m)
{
    run_log *r = ctx;
    if (r->n >= EPOCHS)
        return;
    r->m[r->n] = *m;
    snprintf(r->reason[r->n], sizeof r->reason[0], "%s",
             m->cuda_graph_reason ? m->cuda_graph_reason : "");
    r->n++;
}

static int train_once(const synth *s, const synth *v, const char *spec_text,
                      const char *path, int graph, const nn_exec *ex,
                      run_log *log)
{
    char hp[512];
    snprintf(hp, sizeof hp,
             "{\"epochs\":%d,\"batch_size\":32,\"optimizer\":\"adamw\","
             "\"learning_rate\":0.01,\"weight_decay\":0.05,\"lr_schedule\":"
             "{\"type\":\"cosine\",\"min_lr\":0.0005},\"warmup_steps\":3,"
             "\"seed\":11,\"cuda_graph\":%s}",
             EPOCHS, graph ? "true" : "false");
    memset(log, 0, sizeof *log);
    const train_callbacks cb = {.ctx = log, .on_epoch = on_epoch};
    return gpu_train_run(graph ? "cuda_graph true" : "cuda_graph false", s, v,
                         spec_text, hp, path, &nn_backend_cuda, ex, 1, cb,
                         NULL);
}

static int run_case(const char *name, const synth *s, const synth *v,
                    const char *spec, const nn_exec *ex)
{
    char gp[256], ep[256];
    snprintf(gp, sizeof gp, "/tmp/ty_gpu_graph_%d_%s_graph.st", (int)getpid(),
             name);
    snprintf(ep, sizeof ep, "/tmp/ty_gpu_graph_%d_%s_eager.st", (int)getpid(),
             name);
    run_log g, e;
    int rc = train_once(s, v, spec, gp, 1, ex, &g) ||
             train_once(s, v, spec, ep, 0, ex, &e);
    for (int k = 0; !rc && k < EPOCHS; k++) {
        if (g.n != EPOCHS || e.n != EPOCHS) {
            printf("FAIL: %s: %d and %d epoch records\n", name, g.n, e.n);
            rc = 1;
            break;
        }
        if (g.m[k].cuda_graph != 1) {
            printf("FAIL: %s: epoch %d did not replay a graph: %s\n", name,
                   k + 1, g.reason[k]);
            rc = 1;
        }
        if (e.m[k].cuda_graph != 0 || !strstr(e.reason[k], "cuda_graph")) {
            printf("FAIL: %s: epoch %d with cuda_graph false says %d (%s)\n",
                   name, k + 1, e.m[k].cuda_graph, e.reason[k]);
            rc = 1;
        }
        const train_epoch_metrics *x = &g.m[k], *y = &e.m[k];
        if (x->train_loss != y->train_loss ||
            x->train_accuracy != y->train_accuracy ||
            x->val_loss != y->val_loss || x->val_accuracy != y->val_accuracy) {
            printf("FAIL: %s: epoch %d: graph loss %.17g acc %.17g val %.17g "
                   "%.17g; op by op %.17g %.17g %.17g %.17g\n",
                   name, k + 1, x->train_loss, x->train_accuracy, x->val_loss,
                   x->val_accuracy, y->train_loss, y->train_accuracy,
                   y->val_loss, y->val_accuracy);
            rc = 1;
        }
    }
    if (!rc)
        rc = gpu_compare_models(name, gp, "graph", ep, "op by op", 0, 0);
    unlink(gp);
    unlink(ep);
    return rc;
}

static void fill(synth *s, uint32_t n, const uint32_t *shape, uint32_t ndim,
                 uint32_t classes, ty_rng *r)
{
    synth_init(s, TY_TASK_CLASSIFICATION, n, shape, ndim, TY_DTYPE_F32, classes,
               "none");
    for (size_t i = 0; i < (size_t)n * s->ds.features; i++)
        ((float *)s->x)[i] = ty_rng_normal(r);
    for (uint32_t i = 0; i < n; i++)
        s->y[i] = (int32_t)(ty_rng_u64(r) % classes);
}

int main(void)
{
    nn_exec ex;
    int open_rc = gpu_open(&ex);
    if (open_rc != 0)
        return open_rc;
    int rc = 0;
    ty_rng r;
    ty_rng_seed(&r, 21, 1);

    synth s, v;
    static const uint32_t flat[] = {16};
    fill(&s, 250, flat, 1, 4, &r);
    fill(&v, 64, flat, 1, 4, &r);
    rc |= run_case("mlp", &s, &v,
                   "{\"layers\":[{\"type\":\"dense\",\"units\":32},"
                   "{\"type\":\"relu\"},{\"type\":\"dense\",\"units\":4}]}",
                   &ex);
    synth_free(&s);
    synth_free(&v);

    static const uint32_t img[] = {1, 8, 8};
    fill(&s, 250, img, 3, 3, &r);
    fill(&v, 64, img, 3, 3, &r);
    rc |=
        run_case("cnn_batchnorm", &s, &v,
                 "{\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
                 "\"kernel_size\":3,\"padding\":1},{\"type\":\"batchnorm\"},"
                 "{\"type\":\"relu\"},{\"type\":\"maxpool2d\",\"pool_size\":2},"
                 "{\"type\":\"flatten\"},{\"type\":\"dense\",\"units\":3}]}",
                 &ex);
    synth_free(&s);
    synth_free(&v);

    nn_cuda_exec_free(&ex);
    return rc ? 1 : 0;
}

#else

int main(void)
{
    printf("SKIPPED: this binary was built without the CUDA backend\n");
    return 77;
}

#endif
