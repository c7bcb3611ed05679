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

#define RTOL 1e-3
#define ATOL 1e-4
#define HPARAMS                                              \
    "{\"epochs\":1,\"batch_size\":32,\"optimizer\":\"sgd\"," \
    "\"learning_rate\":0.05,\"momentum\":0.9,\"seed\":5}"

static int run_case(const char *name, const synth *s, const char *spec,
                    const nn_exec *ex)
{
    char cpu_path[256], gpu_path[256];
    snprintf(cpu_path, sizeof cpu_path, "/tmp/ty_gpu_train_%d_%s_cpu.st",
             (int)getpid(), name);
    snprintf(gpu_path, sizeof gpu_path, "/tmp/ty_gpu_train_%d_%s_cuda.st",
             (int)getpid(), name);
    const train_callbacks none = {0};
    train_epoch_metrics mc, mg;
    int rc = gpu_train_run(name, s, NULL, spec, HPARAMS, cpu_path, NULL, NULL,
                           -1, none, &mc) ||
             gpu_train_run(name, s, NULL, spec, HPARAMS, gpu_path,
                           &nn_backend_cuda, ex, -1, none, &mg);
    double lc = mc.train_loss, lg = mg.train_loss;
    if (!rc && !(fabs(lc - lg) <= 1e-3 * fabs(lc))) {
        printf("FAIL: %s: training loss cpu %.8g cuda %.8g\n", name, lc, lg);
        rc = 1;
    }
    if (!rc)
        rc = gpu_compare_models(name, cpu_path, "cpu", gpu_path, "cuda", RTOL,
                                ATOL);
    unlink(cpu_path);
    unlink(gpu_path);
    return rc;
}

int main(void)
{
    nn_exec ex;
    int open_rc = gpu_open(&ex);
    if (open_rc != 0)
        return open_rc;
    int rc = 0;

    /* MLP: 256 examples of 16 features, 4 classes: 8 steps. */
    synth mlp;
    static const uint32_t mlp_shape[] = {16};
    synth_init(&mlp, TY_TASK_CLASSIFICATION, 256, mlp_shape, 1, TY_DTYPE_F32, 4,
               "none");
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
    synth_init(&cnn, TY_TASK_CLASSIFICATION, 256, cnn_shape, 3, TY_DTYPE_F32, 3,
               "none");
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
