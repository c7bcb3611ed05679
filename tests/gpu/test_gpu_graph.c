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
 * a binary built without TY_HAVE_CUDA), with "SKIPPED: ..." on stdout.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/ty.h"
#include "models/safetensors.h"
#include "models/train.h"
#include "tests/unit/synth_data.h"

#if defined(TY_HAVE_CUDA) && TY_HAVE_CUDA
#include "gpu/cuda/backend_cuda.h"

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
    json_t *spec = json_loads(spec_text, 0, NULL);
    json_t *hj = json_pack(
        "{s:i, s:i, s:s, s:f, s:f, s:{s:s, s:f}, s:i, s:i, s:b}", "epochs",
        EPOCHS, "batch_size", 32, "optimizer", "adamw", "learning_rate", 0.01,
        "weight_decay", 0.05, "lr_schedule", "type", "cosine", "min_lr",
        0.0005, "warmup_steps", 3, "seed", 11, "cuda_graph", graph);
    train_hparams hp;
    ty_err err = {0};
    int rc = 1;
    memset(log, 0, sizeof *log);
    if (!spec || !hj || train_hparams_parse(hj, &hp, NULL, &err) != TY_OK ||
        train_hparams_resolve_loss(&hp, TY_TASK_CLASSIFICATION,
                                   s->ds.num_classes, NULL, &err) != TY_OK) {
        printf("FAIL: setup: %s\n", err.msg);
        goto done;
    }
    unlink(path);
    train_job job = {.spec = spec, .hp = &hp, .train = &s->ds, .val = &v->ds,
                     .model_path = path, .threads = 1, .prefetch = 1,
                     .cb = {.ctx = log, .on_epoch = on_epoch},
                     .be = &nn_backend_cuda, .ex = ex};
    train_epoch_metrics fin;
    if (train_run(&job, &fin, &err) != TY_OK) {
        printf("FAIL: training with cuda_graph %s: %s\n",
               graph ? "true" : "false", err.msg);
        goto done;
    }
    rc = 0;
done:
    json_decref(spec);
    json_decref(hj);
    return rc;
}

static int compare_models(const char *name, const char *a_path,
                          const char *b_path)
{
    st_file a, b;
    ty_err err;
    if (st_open(a_path, &a, &err) != TY_OK) {
        printf("FAIL: %s: %s\n", name, err.msg);
        return 1;
    }
    if (st_open(b_path, &b, &err) != TY_OK) {
        printf("FAIL: %s: %s\n", name, err.msg);
        st_close(&a);
        return 1;
    }
    int bad = a.count != b.count || a.count == 0;
    for (size_t i = 0; i < a.count && !bad; i++) {
        const st_tensor *x = &a.tensors[i], *y = st_find(&b, x->name);
        if (!y || y->numel != x->numel) {
            printf("FAIL: %s: tensor %s missing or reshaped\n", name, x->name);
            bad = 1;
            break;
        }
        double worst = 0.0;
        uint64_t differ = 0;
        for (uint64_t k = 0; k < x->numel; k++) {
            float u, w;
            memcpy(&u, (const char *)x->data + k * 4, 4);
            memcpy(&w, (const char *)y->data + k * 4, 4);
            if (memcmp(&u, &w, 4) != 0) {
                differ++;
                double d = fabs((double)u - (double)w) / (fabs((double)u) + 1e-12);
                if (d > worst)
                    worst = d;
            }
        }
        if (differ) {
            printf("FAIL: %s: %s: %llu of %llu values differ between graph "
                   "and op by op (worst relative %.3g)\n",
                   name, x->name, (unsigned long long)differ,
                   (unsigned long long)x->numel, worst);
            bad = 1;
        }
    }
    if (!bad)
        printf("ok: %s: %zu tensors bit-identical with and without graphs\n",
               name, a.count);
    st_close(&a);
    st_close(&b);
    return bad;
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
        rc = compare_models(name, gp, ep);
    unlink(gp);
    unlink(ep);
    return rc;
}

static void fill(synth *s, uint32_t n, const uint32_t *shape, uint32_t ndim,
                 uint32_t classes, ty_rng *r)
{
    synth_init(s, TY_TASK_CLASSIFICATION, n, shape, ndim, TY_DTYPE_F32,
               classes, "none");
    for (size_t i = 0; i < (size_t)n * s->ds.features; i++)
        ((float *)s->x)[i] = ty_rng_normal(r);
    for (uint32_t i = 0; i < n; i++)
        s->y[i] = (int32_t)(ty_rng_u64(r) % classes);
}

int main(void)
{
    char why[256] = "";
    if (nn_cuda_device_count(why, sizeof why) == 0) {
        printf("SKIPPED: no CUDA device (%s)\n", why);
        return 77;
    }
    nn_exec ex = {0};
    ty_err err;
    if (nn_cuda_exec_init(&ex, 0, &err) != TY_OK) {
        printf("FAIL: nn_cuda_exec_init: %s\n", err.msg);
        return 1;
    }
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
    rc |= run_case("cnn_batchnorm", &s, &v,
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
