/*
 * conv_layers.c - per-layer forward/backward times of the Fashion-MNIST CNN
 * (issue 3's benchmark network) at batch 128, on 1 and 2 threads, with the
 * GFLOP/s of each conv layer against single-core OpenBLAS SGEMM peak.
 * A measuring tool, not a test. Build after the main build:
 *   cc -O2 -I. -Ibuild/generated bench/conv_layers.c build/libtrainyard_core.a \
 *      $(pkg-config --libs openblas jansson libmicrohttpd libcurl sqlite3 zlib) \
 *      -lpthread -lm -o build/conv_layers
 *   OPENBLAS_NUM_THREADS=1 build/conv_layers [reps]
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "models/nn_internal.h"

static const char *const spec_text = "{\"layers\":["
                                     "{\"type\":\"conv2d\",\"filters\":32,"
                                     "\"kernel_size\":5,\"padding\":\"same\"},"
                                     "{\"type\":\"relu\"},"
                                     "{\"type\":\"maxpool2d\",\"pool_size\":2},"
                                     "{\"type\":\"conv2d\",\"filters\":64,"
                                     "\"kernel_size\":5,\"padding\":\"same\"},"
                                     "{\"type\":\"relu\"},"
                                     "{\"type\":\"maxpool2d\",\"pool_size\":2},"
                                     "{\"type\":\"flatten\"},"
                                     "{\"type\":\"dense\",\"units\":1024},"
                                     "{\"type\":\"relu\"},"
                                     "{\"type\":\"dropout\",\"rate\":0.4},"
                                     "{\"type\":\"dense\",\"units\":10}]}";

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double sgemm_peak(void)
{
    const int n = 1024;
    float *a = calloc((size_t)n * n, 4), *b = calloc((size_t)n * n, 4),
          *c = calloc((size_t)n * n, 4);
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double t = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n,
                    b, n, 0, c, n);
        t = now() - t;
        if (2.0 * n * n * n / t > best)
            best = 2.0 * n * n * n / t;
    }
    free(a);
    free(b);
    free(c);
    return best / 1e9;
}

/* Multiply-adds of a conv layer per example. */
static double conv_macs(const nn_layer *l)
{
    return (double)nn_shape_numel(&l->out) * l->in.d[0] / l->groups *
           l->kernel[0] * l->kernel[1];
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 10;
    const uint32_t batch = 128, shape[] = {1, 28, 28};
    json_t *spec = json_loads(spec_text, 0, NULL);
    nn_arch arch;
    ty_err err;
    if (nn_arch_build(spec, shape, 3, 10, TY_TASK_CLASSIFICATION, &arch, NULL,
                      &err) != TY_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    json_decref(spec);
    double peak = sgemm_peak();
    printf("SGEMM 1024^3 on one thread: %.1f GFLOP/s\n", peak);
    float *params = malloc(arch.param_count * sizeof(float));
    float *grads = calloc(arch.param_count, sizeof(float));
    ty_rng rng;
    ty_rng_seed(&rng, 1, 1);
    nn_arch_init_params(&arch, params, &rng);
    for (int threads = 1; threads <= 2; threads++) {
        nn_workspace *ws = nn_workspace_create_for(&arch, batch, 1);
        nn_pool *pool = threads > 1 ? nn_pool_create(threads) : NULL;
        nn_workspace_set_pool(ws, pool);
        for (size_t i = 0; i < (size_t)batch * 784; i++)
            ws->act[0][i] = ty_rng_uniform(&rng);
        int32_t labels[128];
        for (uint32_t i = 0; i < batch; i++)
            labels[i] = (int32_t)(i % 10);
        const nn_pass p = {.be = arch.be,
                           .ex = ws->ex,
                           .n = batch,
                           .training = 1,
                           .rng = &rng};
        /* one real step so every buffer holds sensible values */
        nn_forward(&arch, params, ws, batch, 1, &rng);
        nn_loss(&arch, ws, batch, labels, NULL, NULL, 1);
        nn_backward(&arch, params, grads, ws, batch);
        printf("\n%d thread%s, batch %u, ms per batch (best of %d):\n", threads,
               threads > 1 ? "s" : "", batch, reps);
        double tf_all = 0, tb_all = 0;
        for (uint32_t i = 0; i < arch.n_layers; i++) {
            const nn_layer *l = &arch.layers[i];
            if (l->kind->alias)
                continue;
            const float *pp = params + l->param_offset;
            float *din = i == 0 ? NULL : ws->grad[1];
            double tf = 1e9, tb = 1e9;
            for (int r = 0; r < reps; r++) {
                double t = now();
                l->kind->forward(l, &p, pp, ws->act[i], ws->act[i + 1],
                                 ws->scratch[i]);
                t = now() - t;
                tf = t < tf ? t : tf;
                t = now();
                l->kind->backward(l, &p, pp, grads + l->param_offset,
                                  ws->act[i], ws->act[i + 1], ws->grad[0], din,
                                  ws->scratch[i]);
                t = now() - t;
                tb = t < tb ? t : tb;
            }
            tf_all += tf;
            tb_all += tb;
            printf("  %2u %-10s fwd %7.2f  bwd %7.2f", i, l->kind->name,
                   tf * 1e3, tb * 1e3);
            if (l->type == NN_LAYER_CONV2D) {
                double flop = 2.0 * conv_macs(l) * batch;
                double fb = din ? 2.0 : 1.0;
                double gf = flop / tf / 1e9, gb = fb * flop / tb / 1e9;
                printf("   fwd %5.1f GFLOP/s (%2.0f%% of peak)  bwd %5.1f "
                       "GFLOP/s (%2.0f%%)",
                       gf, 100 * gf / (peak * threads), gb,
                       100 * gb / (peak * threads));
            }
            printf("\n");
        }
        printf("  all layers: fwd %.2f bwd %.2f ms -> %.0f samples/s "
               "(layers only)\n",
               tf_all * 1e3, tb_all * 1e3, batch / (tf_all + tb_all));
        /* whole training steps: forward, loss, backward, Adam */
        float *m = calloc(arch.param_count, sizeof(float));
        float *v = calloc(arch.param_count, sizeof(float));
        nn_optim_args oa = {.lr = 1e-4f,
                            .beta1 = 0.9f,
                            .beta2 = 0.999f,
                            .eps = 1e-8f,
                            .one_minus_beta1 = 0.1f,
                            .one_minus_beta2 = 0.001f,
                            .step_size = 1e-4f,
                            .bias_correction2_sqrt = 1.0f};
        double best = 1e9;
        for (int r = 0; r < reps; r++) {
            double t = now();
            nn_forward(&arch, params, ws, batch, 1, &rng);
            nn_loss(&arch, ws, batch, labels, NULL, NULL, 1);
            nn_backward(&arch, params, grads, ws, batch);
            arch.be->adam(ws->ex, params, grads, m, v, arch.param_count, &oa);
            t = now() - t;
            best = t < best ? t : best;
        }
        printf("  training step (with Adam): %.2f ms -> %.0f samples/s\n",
               best * 1e3, batch / best);
        free(m);
        free(v);
        nn_workspace_destroy(ws);
        nn_pool_destroy(pool);
    }
    free(params);
    free(grads);
    nn_arch_free(&arch);
    return 0;
}
