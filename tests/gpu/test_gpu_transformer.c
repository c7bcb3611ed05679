/*
 * test_gpu_transformer.c - the CUDA twins of the transformer ops (issue
 * 31: gelu_tanh, embedding, causal attention, cross-entropy with an ignore
 * index) against the CPU backend (ctest label "gpu").
 *
 * Same inputs on both backends (fixed seeds, attention in the fused QKV
 * layout); |gpu - cpu| <= rtol |cpu| + atol max|cpu| with rtol 1e-5, atol
 * 1e-6 for elementwise results and rtol 1e-4, atol 1e-4 for sums
 * (attention, its gradients, the loss's gradient: CUDA's summation order
 * differs); the embedding scatter-add sums in token order on both, so its
 * gradient must be bit-identical; loss means within 1e-5 relative.
 * Each op runs twice on the GPU and must give the same bits both times.
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
#include "models/backend.h"

#if TRAINYARD_HAVE_CUDA

static const nn_backend *G = &nn_backend_cuda, *C = &nn_backend_cpu;
static nn_exec dx;
static ty_rng rng;
static int failures;

static float *hrand(size_t n, float scale)
{
    float *x = malloc(n * sizeof *x + 4);
    if (!x)
        exit(1);
    for (size_t i = 0; i < n; i++)
        x[i] = (2.0f * ty_rng_uniform(&rng) - 1.0f) * scale;
    return x;
}

static void *up(const void *h, size_t bytes)
{
    void *d = G->alloc(&dx, bytes ? bytes : 4);
    if (!d) {
        printf("FAIL: out of device memory\n");
        exit(1);
    }
    G->upload(&dx, d, h, bytes);
    return d;
}

static float *down(const void *d, size_t n)
{
    float *h = malloc(n * sizeof *h + 4);
    if (!h)
        exit(1);
    G->download(&dx, h, d, n * sizeof *h);
    return h;
}

static void status(const char *op)
{
    ty_err err = {0};
    if (G->status(&dx, &err) != TY_OK) {
        printf("FAIL: %s: %s\n", op, err.msg);
        exit(1);
    }
}

static void close_to(const char *what, const float *got, const float *want,
                     size_t n, double rtol, double atol)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(want[i]));
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - want[i]) <=
              rtol * fabs(want[i]) + atol * m)) {
            printf("FAIL: %s[%zu]: gpu %.8g, cpu %.8g\n", what, i, got[i],
                   want[i]);
            failures++;
            return;
        }
    printf("ok   %s (%zu values)\n", what, n);
}

static void same_bits(const char *what, const void *a, const void *b,
                      size_t bytes)
{
    if (memcmp(a, b, bytes) != 0) {
        printf("FAIL: %s: not the same bits\n", what);
        failures++;
    } else {
        printf("ok   %s (bits)\n", what);
    }
}

static void case_gelu_tanh(void)
{
    const size_t n = 10000;
    float *x = hrand(n, 6.0f), *dy = hrand(n, 1.0f);
    float *y = malloc(n * 4), *gx = malloc(n * 4);
    C->act_forward(NULL, NN_OP_GELU_TANH, y, x, n);
    C->act_backward(NULL, NN_OP_GELU_TANH, gx, dy, x, y, n);
    float *d_x = up(x, n * 4), *d_dy = up(dy, n * 4), *d_y = up(y, n * 4);
    float *d_o = up(y, n * 4), *d_g = up(y, n * 4);
    G->act_forward(&dx, NN_OP_GELU_TANH, d_o, d_x, n);
    G->act_backward(&dx, NN_OP_GELU_TANH, d_g, d_dy, d_x, d_y, n);
    status("gelu_tanh");
    float *o = down(d_o, n), *g = down(d_g, n);
    close_to("gelu_tanh out", o, y, n, 1e-5, 1e-6);
    close_to("gelu_tanh din", g, gx, n, 1e-5, 1e-6);
}

static void case_embedding(void)
{
    const uint32_t v = 300, c = 96, n = 4096;
    float *tab = hrand((size_t)v * c, 1.0f), *dy = hrand((size_t)n * c, 1.0f);
    int32_t *ids = malloc(n * sizeof *ids);
    for (uint32_t i = 0; i < n; i++)
        ids[i] = (int32_t)(ty_rng_uniform(&rng) * 40); /* heavy repeats */
    float *y = malloc((size_t)n * c * 4), *dt = hrand((size_t)v * c, 1.0f);
    float *dt0 = malloc((size_t)v * c * 4);
    memcpy(dt0, dt, (size_t)v * c * 4);
    C->embedding_forward(NULL, y, ids, tab, n, c);
    C->embedding_backward(NULL, dt, dy, ids, n, v, c);
    int32_t *d_ids = up(ids, n * 4);
    float *d_tab = up(tab, (size_t)v * c * 4),
          *d_dy = up(dy, (size_t)n * c * 4);
    float *d_y = up(y, (size_t)n * c * 4);
    float *d_dt[2];
    for (int r = 0; r < 2; r++) {
        d_dt[r] = up(dt0, (size_t)v * c * 4);
        G->embedding_backward(&dx, d_dt[r], d_dy, d_ids, n, v, c);
    }
    G->embedding_forward(&dx, d_y, d_ids, d_tab, n, c);
    status("embedding");
    float *gy = down(d_y, (size_t)n * c);
    same_bits("embedding out", gy, y, (size_t)n * c * 4);
    float *g0 = down(d_dt[0], (size_t)v * c),
          *g1 = down(d_dt[1], (size_t)v * c);
    same_bits("embedding dtable vs cpu", g0, dt, (size_t)v * c * 4);
    same_bits("embedding dtable run to run", g0, g1, (size_t)v * c * 4);
}

static void case_attention(void)
{
    const uint32_t b = 2, t = 128, h = 4, d = 32, c = h * d, ld = 3 * c;
    const size_t nq = (size_t)b * t * ld, no = (size_t)b * t * c;
    const size_t na = (size_t)b * h * t * t;
    float *qkv = hrand(nq, 1.5f), *dy = hrand(no, 1.0f);
    float *y = malloc(no * 4), *att = malloc(na * 4), *datt = malloc(na * 4);
    float *dq = malloc(nq * 4);
    C->attention_forward(NULL, y, att, qkv, qkv + c, qkv + 2 * c, b, t, h, d,
                         ld, NULL);
    C->attention_backward(NULL, dq, dq + c, dq + 2 * c, datt, dy, qkv, qkv + c,
                          qkv + 2 * c, att, b, t, h, d, ld, NULL);
    float *d_qkv = up(qkv, nq * 4), *d_dy = up(dy, no * 4);
    float *d_y = up(y, no * 4), *d_att = up(att, na * 4);
    float *d_datt = up(att, na * 4), *d_dq[2];
    G->attention_forward(&dx, d_y, d_att, d_qkv, d_qkv + c, d_qkv + 2 * c, b, t,
                         h, d, ld, NULL);
    float *gy = down(d_y, no), *ga = down(d_att, na);
    /* backward from the CPU's probabilities: each kernel on equal inputs */
    G->upload(&dx, d_att, att, na * 4);
    for (int r = 0; r < 2; r++) {
        d_dq[r] = up(qkv, nq * 4);
        G->attention_backward(&dx, d_dq[r], d_dq[r] + c, d_dq[r] + 2 * c,
                              d_datt, d_dy, d_qkv, d_qkv + c, d_qkv + 2 * c,
                              d_att, b, t, h, d, ld, NULL);
    }
    status("attention");
    close_to("attention out", gy, y, no, 1e-4, 1e-4);
    close_to("attention probabilities", ga, att, na, 1e-4, 1e-4);
    float *g0 = down(d_dq[0], nq), *g1 = down(d_dq[1], nq);
    close_to("attention dqkv", g0, dq, nq, 1e-4, 1e-4);
    same_bits("attention dqkv run to run", g0, g1, nq * 4);
}

static void case_xent_ignore(void)
{
    const uint32_t n = 700, v = 1000;
    const size_t nl = (size_t)n * v;
    float *x = hrand(nl, 4.0f), *g = malloc(nl * 4);
    int32_t *y = malloc(n * sizeof *y);
    for (uint32_t i = 0; i < n; i++)
        y[i] =
            i % 7 == 3 ? -1 : (int32_t)(ty_rng_uniform(&rng) * v) % (int32_t)v;
    uint32_t cc = 0, gc = 0;
    double cl = C->xent_ignore(NULL, g, &cc, x, y, n, v, -1, 1.0f);
    float *d_x = up(x, nl * 4), *d_g = up(x, nl * 4);
    int32_t *d_y = up(y, n * 4);
    double gl = G->xent_ignore(&dx, d_g, &gc, d_x, d_y, n, v, -1, 1.0f);
    status("xent_ignore");
    float *gg = down(d_g, nl);
    if (gc != cc || fabs(gl - cl) > 1e-5 * fabs(cl)) {
        printf("FAIL: xent_ignore: gpu %.10g over %u rows, cpu %.10g over %u\n",
               gl, gc, cl, cc);
        failures++;
    } else {
        printf("ok   xent_ignore loss %.6f over %u rows\n", gl, gc);
    }
    close_to("xent_ignore dlogits", gg, g, nl, 1e-4, 1e-4);
}

int main(void)
{
    char why[256] = "";
    if (nn_cuda_device_count(why, sizeof why) == 0) {
        printf("SKIPPED: no CUDA device (%s)\n", why);
        return 77;
    }
    ty_err err;
    if (nn_cuda_exec_init(&dx, 0, &err) != TY_OK) {
        printf("FAIL: nn_cuda_exec_init: %s\n", err.msg);
        return 1;
    }
    ty_rng_seed(&rng, 31, 1);
    for (int op = NN_OP_GELU_TANH; op <= NN_OP_XENT_IGNORE; op++)
        if (!G->supports((nn_op)op)) {
            printf("FAIL: nn_backend_cuda does not support %s\n",
                   nn_op_name((nn_op)op));
            failures++;
        }
    case_gelu_tanh();
    case_embedding();
    case_attention();
    case_xent_ignore();
    nn_cuda_exec_free(&dx);
    /* host and device buffers are released with the process */
    printf(failures ? "FAILED\n" : "all transformer ops match the CPU\n");
    return failures ? 1 : 0;
}

#else

int main(void)
{
    printf("SKIPPED: built without the CUDA backend\n");
    return 77;
}

#endif
