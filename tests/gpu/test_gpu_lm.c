/*
 * test_gpu_lm.c - a whole GPT (issue 31's sequence layers: embedding,
 * positional embedding, two transformer blocks, layer norm, tied head) on
 * the CUDA backend against the CPU backend (ctest label "gpu"): from the
 * same weights and batch, the training-mode logits, the language-model
 * loss (with an ignored position) and every parameter's gradient. The
 * layers are the spec layers (models/layers_seq.c, layers_attn.c) running
 * the CUDA twins of their ops (to_ids, embedding, attention, cross-entropy
 * with an ignore index, layer norm, tanh GELU, GEMMs).
 *
 * Tolerance: |gpu - cpu| <= 1e-4 max|cpu| per tensor (cuBLAS and the CUDA
 * reductions sum in their own order); the loss within 1e-5 relative.
 *
 * Exit status: 0 passed, 1 failed, 77 skipped (no CUDA device, or a binary
 * built without TRAINYARD_HAVE_CUDA), with "SKIPPED: ..." on stdout.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "common/ty.h"
#include "gpu/cuda/backend.h"
#include "models/nn_internal.h"

#if TRAINYARD_HAVE_CUDA

#define T 16
#define V 61
#define N 4

static const char *const SPEC =
    "{\"layers\": [{\"type\": \"embedding\", \"dim\": 32},"
    " {\"type\": \"positional_embedding\"},"
    " {\"type\": \"transformer_block\", \"heads\": 4},"
    " {\"type\": \"transformer_block\", \"heads\": 2},"
    " {\"type\": \"layernorm\"}, {\"type\": \"lm_head\"}]}";

static int failures;

static void build(const nn_backend *be, nn_arch *a)
{
    json_t *spec = json_loads(SPEC, 0, NULL);
    uint32_t t = T;
    ty_err err;
    if (!spec || nn_arch_build_on(spec, &t, 1, V, TY_TASK_LANGUAGE_MODELING,
                                  NULL, be, a, NULL, &err) != TY_OK) {
        printf("FAIL: build: %s\n", spec ? err.msg : "spec");
        exit(1);
    }
    json_decref(spec);
}

/* One training pass on be: logits (N T V) and gradients (params) to the
 * host; returns the loss. */
static double pass(const nn_backend *be, const nn_exec *ex, const float *state,
                   const float *x, const float *y, float *logits,
                   float *grads)
{
    nn_arch a;
    build(be, &a);
    const size_t ns = a.param_count + a.buffer_count + 1;
    nn_workspace *ws = nn_workspace_create_on(&a, N, 1, ex);
    float *dp = be->alloc(ex, ns * sizeof(float));
    float *dg = be->alloc(ex, (a.param_count + 1) * sizeof(float));
    if (!ws || !dp || !dg) {
        printf("FAIL: out of memory on %s\n", be->name);
        exit(1);
    }
    be->upload(ex, dp, state, ns * sizeof(float));
    be->zero(ex, dg, (a.param_count + 1) * sizeof(float));
    memcpy(ws->host_in, x, (size_t)N * T * sizeof *x);
    memcpy(ws->host_targets, y, (size_t)N * T * sizeof *y);
    nn_workspace_upload_input(ws, N);
    nn_workspace_upload_targets(ws, N);
    const float *out = nn_forward(&a, dp, ws, N, 1, NULL);
    double loss = nn_loss(&a, ws, N, NULL, ws->targets, NULL, 1) / N;
    nn_backward(&a, dp, dg, ws, N);
    be->download(ex, logits, out, (size_t)N * T * V * sizeof(float));
    be->download(ex, grads, dg, a.param_count * sizeof(float));
    ty_err err;
    if (be->status(ex, &err) != TY_OK) {
        printf("FAIL: %s: %s\n", be->name, err.msg);
        exit(1);
    }
    be->release(ex, dp);
    be->release(ex, dg);
    nn_workspace_destroy(ws);
    nn_arch_free(&a);
    return loss;
}

static void compare(const char *what, const float *g, const float *c, size_t n)
{
    double max = 0, worst = 0;
    for (size_t i = 0; i < n; i++)
        max = fmax(max, fabs(c[i]));
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)g[i] - c[i]));
    int ok = worst <= 1e-4 * max && isfinite(worst);
    printf("%s %s: max|cpu| %.3g, max|gpu - cpu| %.3g\n", ok ? "ok" : "FAIL",
           what, max, worst);
    failures += !ok;
}

int main(void)
{
    char why[256] = "";
    if (nn_cuda_device_count(why, sizeof why) == 0) {
        printf("SKIPPED: no CUDA device (%s)\n", why);
        return 77;
    }
    nn_exec dx;
    ty_err err;
    memset(&dx, 0, sizeof dx);
    if (nn_cuda_exec_init(&dx, 0, &err) != TY_OK) {
        printf("FAIL: nn_cuda_exec_init: %s\n", err.msg);
        return 1;
    }
    nn_arch a;
    build(&nn_backend_cpu, &a);
    const size_t ns = a.param_count + a.buffer_count + 1;
    float *state = malloc(ns * sizeof *state);
    float x[N * T], y[N * T];
    ty_rng rng;
    ty_rng_seed(&rng, 31, 1);
    nn_arch_init_params(&a, state, &rng);
    for (size_t i = 0; i < a.param_count; i++)
        state[i] += 0.1f * (2.0f * ty_rng_uniform(&rng) - 1.0f);
    for (int i = 0; i < N * T; i++) {
        x[i] = (float)ty_rng_below(&rng, V);
        y[i] = (float)ty_rng_below(&rng, V);
    }
    y[3] = -1.0f; /* ignored */
    float *lc = malloc((size_t)N * T * V * sizeof *lc);
    float *lg = malloc((size_t)N * T * V * sizeof *lg);
    float *gc = calloc(a.param_count + 1, sizeof *gc);
    float *gg = calloc(a.param_count + 1, sizeof *gg);
    double loss_c = pass(&nn_backend_cpu, NULL, state, x, y, lc, gc);
    double loss_g = pass(&nn_backend_cuda, &dx, state, x, y, lg, gg);
    compare("logits", lg, lc, (size_t)N * T * V);
    int loss_ok = fabs(loss_g - loss_c) <= 1e-5 * fabs(loss_c);
    printf("%s loss: cpu %.7f gpu %.7f\n", loss_ok ? "ok" : "FAIL", loss_c,
           loss_g);
    failures += !loss_ok;
    for (uint32_t t = 0; t < a.n_tensors; t++) {
        const nn_named_tensor *nt = &a.tensors[t];
        if (!nt->desc->buffer)
            compare(nt->name, gg + nt->offset, gc + nt->offset,
                    nt->desc->numel);
    }
    nn_arch_free(&a);
    free(state);
    free(lc);
    free(lg);
    free(gc);
    free(gg);
    nn_cuda_exec_free(&dx);
    printf("%s\n", failures ? "FAILED" : "PASSED");
    return failures ? 1 : 0;
}

#else

int main(void)
{
    printf("SKIPPED: built without the CUDA backend\n");
    return 77;
}

#endif
