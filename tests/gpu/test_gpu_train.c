/*
 * test_gpu_train.c - the trainer on the CUDA backend against the CPU
 * backend (ctest label "gpu").
 *
 * A small MLP and a small CNN train for a few SGD steps (momentum 0.9, no
 * dropout, one CPU thread) from the same seed: the same initial weights
 * (drawn on the host, uploaded), the same minibatches (the host loader,
 * uploaded) and the same hyperparameters; once through train_run with be
 * NULL (the CPU) and once with be = &nn_backend_cuda on an
 * nn_cuda_exec_init context. Each run writes its model file; every tensor
 * of the two files is compared.
 *
 * Tolerance, per weight: |cuda - cpu| <= 1e-3 |cpu| + 1e-4. The kernels
 * agree to about 1e-5 relative (tests/gpu/test_gpu_ops.c); 8 steps of SGD
 * at these learning rates grow that by no more than an order of magnitude,
 * and a wrong upload, download or stale buffer moves weights by 1e-2 or
 * more. The last epoch's training loss must agree to 1e-3 relative.
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

#define RTOL 1e-3
#define ATOL 1e-4

static double last_loss;

static void on_epoch(void *ctx, const train_epoch_metrics *m)
{
    (void)ctx;
    last_loss = m->train_loss;
}

/* Trains spec on ds into path on be (NULL: CPU) / ex; returns 0 on
 * success, with *loss the last epoch's training loss. */
static int train_once(const synth *s, const char *spec_text, const char *path,
                      const nn_backend *be, const nn_exec *ex, double *loss)
{
    json_t *spec = json_loads(spec_text, 0, NULL);
    json_t *hj = json_loads("{\"epochs\":1,\"batch_size\":32,\"optimizer\":"
                            "\"sgd\",\"learning_rate\":0.05,\"momentum\":0.9,"
                            "\"seed\":5}",
                            0, NULL);
    train_hparams hp;
    ty_err err = {0};
    int rc = 1;
    if (!spec || !hj || train_hparams_parse(hj, &hp, NULL, &err) != TY_OK) {
        printf("FAIL: setup: %s\n", err.msg);
        goto done;
    }
    train_job job = {.spec = spec, .hp = &hp, .train = &s->ds,
                     .model_path = path, .threads = 1, .prefetch = -1,
                     .cb = {.on_epoch = on_epoch}, .be = be, .ex = ex};
    train_epoch_metrics fin;
    if (train_run(&job, &fin, &err) != TY_OK) {
        printf("FAIL: training on %s: %s\n", be ? be->name : "cpu", err.msg);
        goto done;
    }
    *loss = last_loss;
    rc = 0;
done:
    json_decref(spec);
    json_decref(hj);
    return rc;
}

static int compare_models(const char *name, const char *cpu_path,
                          const char *gpu_path)
{
    st_file a, b;
    ty_err err;
    if (st_open(cpu_path, &a, &err) != TY_OK) {
        printf("FAIL: %s: %s\n", name, err.msg);
        return 1;
    }
    if (st_open(gpu_path, &b, &err) != TY_OK) {
        printf("FAIL: %s: %s\n", name, err.msg);
        st_close(&a);
        return 1;
    }
    int bad = a.count != b.count;
    double worst = 0.0;
    for (size_t i = 0; i < a.count && !bad; i++) {
        const st_tensor *x = &a.tensors[i], *y = st_find(&b, x->name);
        if (!y || y->numel != x->numel) {
            printf("FAIL: %s: tensor %s missing or reshaped\n", name, x->name);
            bad = 1;
            break;
        }
        for (uint64_t k = 0; k < x->numel; k++) {
            float u, v;
            memcpy(&u, (const char *)x->data + k * 4, 4);
            memcpy(&v, (const char *)y->data + k * 4, 4);
            double d = fabs((double)u - (double)v);
            double lim = RTOL * fabs((double)u) + ATOL;
            if (d / lim > worst)
                worst = d / lim;
            if (!(d <= lim)) {
                printf("FAIL: %s: %s[%llu] cpu %.8g cuda %.8g\n", name,
                       x->name, (unsigned long long)k, u, v);
                bad = 1;
                break;
            }
        }
    }
    if (!bad)
        printf("ok: %s: %zu tensors within tolerance (worst %.3f of it)\n",
               name, a.count, worst);
    st_close(&a);
    st_close(&b);
    return bad;
}

static int run_case(const char *name, const synth *s, const char *spec,
                    const nn_exec *ex)
{
    char cpu_path[256], gpu_path[256];
    snprintf(cpu_path, sizeof cpu_path, "/tmp/ty_gpu_train_%d_%s_cpu.st",
             (int)getpid(), name);
    snprintf(gpu_path, sizeof gpu_path, "/tmp/ty_gpu_train_%d_%s_cuda.st",
             (int)getpid(), name);
    double lc = 0, lg = 0;
    int rc = train_once(s, spec, cpu_path, NULL, NULL, &lc) ||
             train_once(s, spec, gpu_path, &nn_backend_cuda, ex, &lg);
    if (!rc && !(fabs(lc - lg) <= 1e-3 * fabs(lc))) {
        printf("FAIL: %s: training loss cpu %.8g cuda %.8g\n", name, lc, lg);
        rc = 1;
    }
    if (!rc)
        rc = compare_models(name, cpu_path, gpu_path);
    unlink(cpu_path);
    unlink(gpu_path);
    return rc;
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

    /* MLP: 256 examples of 16 features, 4 classes: 8 steps. */
    synth mlp;
    static const uint32_t mlp_shape[] = {16};
    synth_init(&mlp, TY_TASK_CLASSIFICATION, 256, mlp_shape, 1, TY_DTYPE_F32,
               4, "none");
    ty_rng r;
    ty_rng_seed(&r, 9, 1);
    for (size_t i = 0; i < 256u * 16; i++)
        ((float *)mlp.x)[i] = ty_rng_normal(&r);
    for (uint32_t i = 0; i < 256; i++)
        mlp.y[i] = (int32_t)(ty_rng_u64(&r) % 4);
    rc |= run_case("mlp", &mlp,
                   "{\"layers\":[{\"type\":\"dense\",\"units\":32},"
                   "{\"type\":\"relu\"},{\"type\":\"dense\",\"units\":4}]}",
                   &ex);
    synth_free(&mlp);

    /* CNN: 256 images (1, 8, 8), 3 classes: 8 steps. */
    synth cnn;
    static const uint32_t cnn_shape[] = {1, 8, 8};
    synth_init(&cnn, TY_TASK_CLASSIFICATION, 256, cnn_shape, 3, TY_DTYPE_F32,
               3, "none");
    for (size_t i = 0; i < 256u * 64; i++)
        ((float *)cnn.x)[i] = ty_rng_uniform(&r);
    for (uint32_t i = 0; i < 256; i++)
        cnn.y[i] = (int32_t)(ty_rng_u64(&r) % 3);
    rc |= run_case("cnn", &cnn,
                   "{\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
                   "\"kernel_size\":3,\"padding\":1},{\"type\":\"relu\"},"
                   "{\"type\":\"maxpool2d\",\"pool_size\":2},"
                   "{\"type\":\"flatten\"},{\"type\":\"dense\",\"units\":3}]}",
                   &ex);
    synth_free(&cnn);

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
