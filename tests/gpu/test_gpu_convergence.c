/*
 * test_gpu_convergence.c - issue 4's mixed-precision convergence bar
 * (ctest label "gpu"): the Fashion-MNIST CNN of tests/acceptance/fashion.py
 * (conv 32 5x5 same, relu, maxpool 2, conv 64 5x5 same, relu, maxpool 2,
 * flatten, dense 1024, relu, dropout 0.4, dense 10; Adam, lr 0.001, batch
 * 128, seed 1, 8 epochs, trained on the 60,000 training images scaled by
 * 1/255) trained on the GPU in bf16 and in fp32 must end within 0.5
 * percentage points of each other in accuracy on the 10,000 test images
 * (each model evaluated in fp32 on the GPU from its saved file). Both must
 * also clear the acceptance bar of 0.91, so two equally broken runs do not
 * pass.
 *
 * Data: the four IDX files (gzipped or not) from $TY_FASHION_DIR, else
 * /usr/share/datasets/fashion-mnist. TY_CONVERGENCE_EPOCHS overrides the
 * epoch count (the bar of 0.91 then applies only from 4 epochs).
 *
 * Exit status: 0 passed, 1 a check failed, 77 skipped (no CUDA device, a
 * GPU without bf16, the data missing, or a binary built without
 * TRAINYARD_HAVE_CUDA), with "SKIPPED: ..." on stdout.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "common/ty.h"
#include "models/nn.h"
#include "models/train/train.h"
#include "tests/unit/fashion_idx.h"
#include "tests/unit/synth_data.h"

#if TRAINYARD_HAVE_CUDA
#include "gpu/cuda/backend.h"
#include "tests/gpu/gpu_testutil.h"

#define GAP_LIMIT 0.005 /* 0.5 percentage points */
#define BAR 0.91

static const char *const cnn_spec =
    "{\"layers\":["
    "{\"type\":\"conv2d\",\"filters\":32,\"kernel_size\":5,\"padding\":"
    "\"same\"},"
    "{\"type\":\"relu\"},{\"type\":\"maxpool2d\",\"pool_size\":2},"
    "{\"type\":\"conv2d\",\"filters\":64,\"kernel_size\":5,\"padding\":"
    "\"same\"},"
    "{\"type\":\"relu\"},{\"type\":\"maxpool2d\",\"pool_size\":2},"
    "{\"type\":\"flatten\"},"
    "{\"type\":\"dense\",\"units\":1024},{\"type\":\"relu\"},"
    "{\"type\":\"dropout\",\"rate\":0.4},"
    "{\"type\":\"dense\",\"units\":10}]}";

static void on_epoch(void *ctx, const train_epoch_metrics *m)
{
    printf("  %s epoch %u: loss %.4f acc %.4f (%.1f s, %s, skipped %llu)\n",
           (const char *)ctx, m->epoch, m->train_loss, m->train_accuracy,
           m->seconds, m->precision, (unsigned long long)m->skipped_steps);
    fflush(stdout);
}

/* Trains in prec, then evaluates the saved model on test; *acc gets the
 * test accuracy. 0 on success. */
static int train_and_test(const synth *train, const synth *test,
                          const char *prec, uint32_t epochs, const nn_exec *ex,
                          double *acc)
{
    char hp_text[256], path[256];
    snprintf(hp_text, sizeof hp_text,
             "{\"epochs\":%u,\"batch_size\":128,\"optimizer\":\"adam\","
             "\"learning_rate\":0.001,\"seed\":1,\"precision\":\"%s\"}",
             epochs, prec);
    snprintf(path, sizeof path, "/tmp/ty_gpu_conv_%d_%s.st", (int)getpid(),
             prec);
    ty_err err = {0};
    int rc = 1;
    nn_net *net = NULL;
    const train_callbacks cb = {.ctx = (void *)prec, .on_epoch = on_epoch};
    train_epoch_metrics fin;
    if (gpu_train_run(prec, train, NULL, cnn_spec, hp_text, path,
                      &nn_backend_cuda, ex, 0, cb, &fin) != 0)
        goto done;
    if (strcmp(fin.precision, prec)) {
        printf("FAIL: asked %s, the run says %s\n", prec, fin.precision);
        goto done;
    }
    double loss;
    if (nn_net_load_on(path, &nn_backend_cuda, ex, &net, &err) != TY_OK ||
        nn_net_evaluate(net, &test->ds, NULL, &loss, acc, &err) != TY_OK) {
        printf("FAIL: evaluating the %s model: %s\n", prec, err.msg);
        goto done;
    }
    printf("%s: test accuracy %.4f, loss %.4f\n", prec, *acc, loss);
    rc = 0;
done:
    nn_net_destroy(net);
    unlink(path);
    return rc;
}

int main(void)
{
    char why[256] = "";
    if (nn_cuda_device_count(why, sizeof why) == 0) {
        printf("SKIPPED: no CUDA device (%s)\n", why);
        return 77;
    }
    const char *dir = getenv("TY_FASHION_DIR");
    if (!dir || !*dir)
        dir = "/usr/share/datasets/fashion-mnist";
    synth train, test;
    int r1 = fashion_load_set(dir, "train-images-idx3-ubyte",
                              "train-labels-idx1-ubyte", 0, &train);
    if (r1 != 0) {
        printf(r1 > 0 ? "SKIPPED: no Fashion-MNIST training files in %s\n"
                      : "FAIL: malformed Fashion-MNIST training files in %s\n",
               dir);
        return r1 > 0 ? 77 : 1;
    }
    int r2 = fashion_load_set(dir, "t10k-images-idx3-ubyte",
                              "t10k-labels-idx1-ubyte", 0, &test);
    if (r2 != 0) {
        printf(r2 > 0 ? "SKIPPED: no Fashion-MNIST test files in %s\n"
                      : "FAIL: malformed Fashion-MNIST test files in %s\n",
               dir);
        synth_free(&train);
        return r2 > 0 ? 77 : 1;
    }
    uint32_t epochs = 8;
    const char *e = getenv("TY_CONVERGENCE_EPOCHS");
    if (e && atoi(e) > 0)
        epochs = (uint32_t)atoi(e);

    nn_exec ex = {0};
    ty_err err;
    if (nn_cuda_exec_init(&ex, 0, &err) != TY_OK) {
        printf("FAIL: nn_cuda_exec_init: %s\n", err.msg);
        return 1;
    }
    int rc = 0;
    if (!nn_backend_cuda.lp_ok(&ex, NN_DT_BF16)) {
        printf("SKIPPED: this GPU does not train bf16\n");
        rc = 77;
        goto done;
    }
    double a32 = 0, a16 = 0;
    if (train_and_test(&train, &test, "fp32", epochs, &ex, &a32) ||
        train_and_test(&train, &test, "bf16", epochs, &ex, &a16)) {
        rc = 1;
        goto done;
    }
    double gap = fabs(a32 - a16);
    printf("gap: %.2f percentage points (limit %.2f)\n", 100 * gap,
           100 * GAP_LIMIT);
    if (!(gap <= GAP_LIMIT)) {
        printf("FAIL: bf16 %.4f vs fp32 %.4f\n", a16, a32);
        rc = 1;
    }
    if (epochs >= 4 && !(a32 >= BAR && a16 >= BAR)) {
        printf("FAIL: below the acceptance bar %.2f\n", BAR);
        rc = 1;
    }
done:
    nn_cuda_exec_free(&ex);
    synth_free(&train);
    synth_free(&test);
    return rc;
}

#else

int main(void)
{
    printf("SKIPPED: this binary was built without the CUDA backend\n");
    return 77;
}

#endif
