/*
 * test_gpu_transformer.c - the CUDA twins of the transformer ops (issue
 * 31: gelu_tanh, embedding, attention under its masks - causal or not,
 * per-sequence lengths including 0 and t, dropout multipliers - seq_lens,
 * seq_pool, cross-entropy with an ignore index) against the CPU backend
 * (ctest label "gpu"), and the attention captured in a CUDA graph against
 * op by op.
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

/* One attention configuration: b sequences of t tokens, h heads of d, the
 * mask's causal flag, lens (b values; NULL: none) and, with rate > 0,
 * dropout multipliers in keep. */
typedef struct {
    const char *name;
    uint32_t b, t, h, d;
    int causal;
    const int32_t *lens;
    float rate;
} attn_case;

/* The CPU and GPU ops on the same inputs (fused QKV, ld = 3 C): out, att
 * and keep's P * keep from the forward; the backward runs twice on the GPU
 * from the CPU's probabilities (each kernel on equal inputs) and must give
 * the same bits both times. b > h batches the GEMMs over sequences, b <= h
 * over heads (attention.cu), so the cases cover both. */
static void run_attention(const attn_case *ac)
{
    const uint32_t b = ac->b, t = ac->t, h = ac->h, d = ac->d;
    const uint32_t c = h * d, ld = 3 * c;
    const size_t nq = (size_t)b * t * ld, no = (size_t)b * t * c;
    const size_t na = (size_t)b * h * t * t;
    char what[160];
    float *qkv = hrand(nq, 1.5f), *dy = hrand(no, 1.0f);
    float *y = malloc(no * 4), *att = malloc(na * 4), *datt = malloc(na * 4);
    float *dq = malloc(nq * 4), *keep = NULL, *keep0 = NULL;
    if (!y || !att || !datt || !dq)
        exit(1);
    if (ac->rate > 0.0f) {
        keep = malloc(na * 4);
        keep0 = malloc(na * 4);
        if (!keep || !keep0)
            exit(1);
        for (size_t i = 0; i < na; i++)
            keep0[i] = ty_rng_uniform(&rng) < ac->rate
                           ? 0.0f
                           : 1.0f / (1.0f - ac->rate);
        memcpy(keep, keep0, na * 4);
    }
    nn_attn_mask cm = {.causal = ac->causal, .lens = ac->lens, .keep = keep};
    C->attention_forward(NULL, y, att, qkv, qkv + c, qkv + 2 * c, b, t, h, d,
                         ld, &cm);
    C->attention_backward(NULL, dq, dq + c, dq + 2 * c, datt, dy, qkv, qkv + c,
                          qkv + 2 * c, att, b, t, h, d, ld, &cm);

    float *d_qkv = up(qkv, nq * 4), *d_dy = up(dy, no * 4);
    float *d_y = up(y, no * 4), *d_att = up(att, na * 4);
    float *d_datt = up(att, na * 4), *d_dq[2];
    int32_t *d_lens = ac->lens ? up(ac->lens, b * sizeof(int32_t)) : NULL;
    float *d_keep = keep ? up(keep0, na * 4) : NULL;
    nn_attn_mask gm = {.causal = ac->causal, .lens = d_lens, .keep = d_keep};
    G->attention_forward(&dx, d_y, d_att, d_qkv, d_qkv + c, d_qkv + 2 * c, b, t,
                         h, d, ld, &gm);
    float *gy = down(d_y, no), *ga = down(d_att, na);
    float *gk = d_keep ? down(d_keep, na) : NULL;
    G->upload(&dx, d_att, att, na * 4);
    if (d_keep)
        G->upload(&dx, d_keep, keep, na * 4); /* the CPU's P * keep */
    for (int r = 0; r < 2; r++) {
        d_dq[r] = up(qkv, nq * 4);
        G->attention_backward(&dx, d_dq[r], d_dq[r] + c, d_dq[r] + 2 * c,
                              d_datt, d_dy, d_qkv, d_qkv + c, d_qkv + 2 * c,
                              d_att, b, t, h, d, ld, &gm);
    }
    status(ac->name);
    snprintf(what, sizeof what, "attention %s out", ac->name);
    close_to(what, gy, y, no, 1e-4, 1e-4);
    snprintf(what, sizeof what, "attention %s probabilities", ac->name);
    close_to(what, ga, att, na, 1e-4, 1e-4);
    if (gk) {
        snprintf(what, sizeof what, "attention %s P * keep", ac->name);
        close_to(what, gk, keep, na, 1e-4, 1e-4);
    }
    float *g0 = down(d_dq[0], nq), *g1 = down(d_dq[1], nq);
    snprintf(what, sizeof what, "attention %s dqkv", ac->name);
    close_to(what, g0, dq, nq, 1e-4, 1e-4);
    snprintf(what, sizeof what, "attention %s dqkv run to run", ac->name);
    same_bits(what, g0, g1, nq * 4);
    /* a length-0 sequence sees nothing: its outputs and gradients are 0 */
    for (uint32_t bi = 0; ac->lens && bi < b; bi++) {
        if (ac->lens[bi] > 0)
            continue;
        const float *o = gy + (size_t)bi * t * c;
        int bad = 0;
        for (size_t i = 0; i < (size_t)t * c; i++)
            bad |= o[i] != 0.0f;
        for (size_t i = 0; i < (size_t)t * ld; i++)
            bad |= g0[(size_t)bi * t * ld + i] != 0.0f;
        printf("%s attention %s: length-0 sequence %u all zeros\n",
               bad ? "FAIL:" : "ok  ", ac->name, bi);
        failures += bad;
    }
}

static void case_attention(void)
{
    /* lengths include 0 (sees nothing), t (no padding), 1 and odd ones */
    static const int32_t lens6[] = {0, 96, 37, 1, 95, 64};
    static const int32_t lens3[] = {128, 0, 50};
    /* out-of-range lengths are clamped to [0, t] on both backends */
    static const int32_t lens2[] = {-3, 1000};
    const attn_case cases[] = {
        {"causal", 2, 128, 4, 32, 1, NULL, 0.0f},
        {"bidirectional lens", 6, 96, 2, 16, 0, lens6, 0.0f},
        {"causal lens", 6, 96, 2, 16, 1, lens6, 0.0f},
        {"causal lens keep", 3, 128, 4, 32, 1, lens3, 0.25f},
        {"bidirectional keep", 2, 64, 4, 16, 0, NULL, 0.1f},
        {"clamped lens", 2, 40, 3, 8, 0, lens2, 0.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_attention(&cases[i]);
}

/* The forward and backward under a mask with lengths, captured in a CUDA
 * graph and replayed: the same bits as the same calls made op by op (the
 * trainer captures whole steps; nothing in the op may allocate, wait or
 * read a result on the host). */
static void case_attention_graph(void)
{
    const uint32_t b = 3, t = 64, h = 2, d = 16, c = h * d, ld = 3 * c;
    const size_t nq = (size_t)b * t * ld, no = (size_t)b * t * c;
    const size_t na = (size_t)b * h * t * t;
    static const int32_t lens[] = {64, 0, 17};
    float *qkv = hrand(nq, 1.5f), *dy = hrand(no, 1.0f);
    float *d_qkv = up(qkv, nq * 4), *d_dy = up(dy, no * 4);
    int32_t *d_lens = up(lens, sizeof lens);
    nn_attn_mask m = {.causal = 0, .lens = d_lens, .keep = NULL};
    float *d_y[2], *d_att[2], *d_datt[2], *d_dq[2];
    for (int r = 0; r < 2; r++) {
        d_y[r] = up(dy, no * 4);
        d_datt[r] = G->alloc(&dx, na * 4);
        d_att[r] = G->alloc(&dx, na * 4);
        d_dq[r] = up(qkv, nq * 4);
        if (!d_datt[r] || !d_att[r]) {
            printf("FAIL: out of device memory\n");
            exit(1);
        }
    }
    void *graph = NULL;
    ty_err err = {0};
    for (int r = 0; r < 2; r++) {
        if (r == 1 && G->graph_begin(&dx) != 0) {
            printf("FAIL: attention graph: graph_begin\n");
            failures++;
            return;
        }
        G->attention_forward(&dx, d_y[r], d_att[r], d_qkv, d_qkv + c,
                             d_qkv + 2 * c, b, t, h, d, ld, &m);
        G->attention_backward(&dx, d_dq[r], d_dq[r] + c, d_dq[r] + 2 * c,
                              d_datt[r], d_dy, d_qkv, d_qkv + c, d_qkv + 2 * c,
                              d_att[r], b, t, h, d, ld, &m);
        if (r == 1) {
            if (G->graph_end(&dx, &graph, &err) != 0) {
                printf("FAIL: attention graph: %s\n", err.msg);
                failures++;
                return;
            }
            G->graph_launch(&dx, graph);
        }
    }
    status("attention graph");
    float *y0 = down(d_y[0], no), *y1 = down(d_y[1], no);
    float *g0 = down(d_dq[0], nq), *g1 = down(d_dq[1], nq);
    same_bits("attention graph replay out", y0, y1, no * 4);
    same_bits("attention graph replay dqkv", g0, g1, nq * 4);
    G->graph_release(&dx, graph);
}

/* seq_lens: the first negative value of each row, or t; bit-exact. */
static void case_seq_lens(void)
{
    const uint32_t b = 7, t = 300;
    float *x = malloc((size_t)b * t * sizeof *x);
    if (!x)
        exit(1);
    for (size_t i = 0; i < (size_t)b * t; i++)
        x[i] = (float)(i % 50); /* ids, 0 included */
    /* row 1 has no negative value: length t */
    x[0 * t + 0] = -1.0f;     /* length 0 */
    x[2 * t + 31] = -1.0f;    /* at a warp's last lane */
    x[3 * t + 32] = -1.0f;    /* the next chunk's first */
    x[3 * t + 200] = -1.0f;   /* only the first counts */
    x[4 * t + t - 1] = -1.0f; /* the last position */
    x[5 * t + 150] = -0.5f;   /* any value below 0 */
    for (uint32_t j = 100; j < t; j++)
        x[6 * t + j] = -1.0f; /* right padding */
    int32_t want[7], got[7];
    C->seq_lens(NULL, want, x, b, t);
    float *d_x = up(x, (size_t)b * t * sizeof *x);
    int32_t *d_l = up(want, sizeof want);
    G->zero(&dx, d_l, sizeof want);
    G->seq_lens(&dx, d_l, d_x, b, t);
    status("seq_lens");
    G->download(&dx, got, d_l, sizeof got);
    same_bits("seq_lens", got, want, sizeof want);
    if (want[0] != 0 || want[1] != (int32_t)t || want[6] != 100) {
        printf("FAIL: seq_lens: cpu reference gave %d %d %d\n", want[0],
               want[1], want[6]);
        failures++;
    }
}

/* seq_pool: each mode forward and backward against the CPU, bit for bit
 * (both sum the positions in order), lengths 0, 1, partial and t. */
static void case_seq_pool(void)
{
    const uint32_t b = 5, t = 40, c = 70;
    const int32_t lens[5] = {0, 1, 17, 40, 39};
    const size_t nx = (size_t)b * t * c, no = (size_t)b * c;
    float *x = malloc(nx * sizeof *x), *g = malloc(no * sizeof *g);
    float *want = malloc(nx * sizeof *want);
    if (!x || !g || !want)
        exit(1);
    for (size_t i = 0; i < nx; i++)
        x[i] = 2.0f * ty_rng_uniform(&rng) - 1.0f;
    for (size_t i = 0; i < no; i++)
        g[i] = 2.0f * ty_rng_uniform(&rng) - 1.0f;
    float *d_x = up(x, nx * sizeof *x), *d_g = up(g, no * sizeof *g);
    int32_t *d_l = up(lens, sizeof lens);
    float *d_o = up(x, nx * sizeof *x);
    static const char *const names[] = {"mean", "first", "last"};
    for (int mode = 0; mode < 3; mode++) {
        char what[48];
        C->seq_pool_forward(NULL, want, x, lens, b, t, c,
                            (nn_seq_pool_mode)mode);
        G->seq_pool_forward(&dx, d_o, d_x, d_l, b, t, c,
                            (nn_seq_pool_mode)mode);
        status("seq_pool_forward");
        float *got = down(d_o, no);
        snprintf(what, sizeof what, "seq_pool %s forward", names[mode]);
        same_bits(what, got, want, no * sizeof *got);
        free(got);
        C->seq_pool_backward(NULL, want, g, lens, b, t, c,
                             (nn_seq_pool_mode)mode);
        G->seq_pool_backward(&dx, d_o, d_g, d_l, b, t, c,
                             (nn_seq_pool_mode)mode);
        status("seq_pool_backward");
        got = down(d_o, nx);
        snprintf(what, sizeof what, "seq_pool %s backward", names[mode]);
        same_bits(what, got, want, nx * sizeof *got);
        free(got);
    }
    free(x);
    free(g);
    free(want);
}

/* kv_store then kv_attention: three rows of two sequences, positions
 * across block boundaries, against the CPU (the cache bit for bit, the
 * attention within the sums' tolerance). */
static void case_kv_cache(void)
{
    const uint32_t h = 3, d = 40, c = h * d, bt = 4, nb = 10, ts = 5;
    const uint32_t n = 3, ld = 3 * c;
    /* sequence 0 holds blocks 7, 2, 9; sequence 1 blocks 0, 5 */
    const int32_t tables[3 * 5] = {7, 2, 9, 0, 0, 7, 2, 9, 0, 0,
                                   0, 5, 0, 0, 0};
    const int32_t pos[3] = {9, 10, 6};
    const size_t nc = (size_t)nb * bt * c, nq = (size_t)n * ld;
    float *kc = malloc(nc * 4), *vc = malloc(nc * 4), *q = malloc(nq * 4);
    float *want = malloc((size_t)n * c * 4);
    if (!kc || !vc || !q || !want)
        exit(1);
    for (size_t i = 0; i < nc; i++) {
        kc[i] = 2.0f * ty_rng_uniform(&rng) - 1.0f;
        vc[i] = 2.0f * ty_rng_uniform(&rng) - 1.0f;
    }
    for (size_t i = 0; i < nq; i++)
        q[i] = 2.0f * ty_rng_uniform(&rng) - 1.0f;
    float *d_kc = up(kc, nc * 4), *d_vc = up(vc, nc * 4), *d_q = up(q, nq * 4);
    int32_t *d_t = up(tables, sizeof tables), *d_p = up(pos, sizeof pos);
    float *d_o = up(want, (size_t)n * c * 4);
    C->kv_store(NULL, kc, vc, q + c, q + 2 * c, ld, tables, ts, pos, n, c, bt);
    G->kv_store(&dx, d_kc, d_vc, d_q + c, d_q + 2 * c, ld, d_t, ts, d_p, n, c,
                bt);
    status("kv_store");
    float *gk = down(d_kc, nc), *gv = down(d_vc, nc);
    same_bits("kv_store keys", gk, kc, nc * 4);
    same_bits("kv_store values", gv, vc, nc * 4);
    C->kv_attention(NULL, want, q, ld, kc, vc, tables, ts, pos, n, h, d, bt);
    G->kv_attention(&dx, d_o, d_q, ld, d_kc, d_vc, d_t, ts, d_p, n, h, d, bt);
    status("kv_attention");
    float *got = down(d_o, (size_t)n * c);
    close_to("kv_attention", got, want, (size_t)n * c, 1e-4, 1e-4);
    free(gk);
    free(gv);
    free(got);
    free(kc);
    free(vc);
    free(q);
    free(want);
}

/* rows_gemm: 9 rows against the CPU (within the sums' tolerance), and each
 * row's bits on the GPU alone equal to its bits among the 9 (batch
 * invariance on the device), beta 1 adding to what out held. */
static void case_rows_gemm(void)
{
    const uint32_t n = 9, u = 70, k = 131;
    float *x = malloc((size_t)n * k * 4), *w = malloc((size_t)u * k * 4);
    float *want = malloc((size_t)n * u * 4);
    if (!x || !w || !want)
        exit(1);
    for (size_t i = 0; i < (size_t)n * k; i++)
        x[i] = 2.0f * ty_rng_uniform(&rng) - 1.0f;
    for (size_t i = 0; i < (size_t)u * k; i++)
        w[i] = 2.0f * ty_rng_uniform(&rng) - 1.0f;
    for (size_t i = 0; i < (size_t)n * u; i++)
        want[i] = ty_rng_uniform(&rng);
    float *d_x = up(x, (size_t)n * k * 4), *d_w = up(w, (size_t)u * k * 4);
    float *d_o = up(want, (size_t)n * u * 4);
    C->rows_gemm(NULL, want, x, w, n, u, k, 1.0f);
    G->rows_gemm(&dx, d_o, d_x, d_w, n, u, k, 1.0f);
    status("rows_gemm");
    float *got = down(d_o, (size_t)n * u);
    close_to("rows_gemm", got, want, (size_t)n * u, 1e-4, 1e-4);
    for (uint32_t r = 0; r < n; r++)
        G->rows_gemm(&dx, d_o + (size_t)r * u, d_x + (size_t)r * k, d_w, 1, u,
                     k, 0.0f);
    status("rows_gemm alone");
    float *one = down(d_o, (size_t)n * u);
    G->rows_gemm(&dx, d_o, d_x, d_w, n, u, k, 0.0f);
    status("rows_gemm batched");
    float *all = down(d_o, (size_t)n * u);
    same_bits("rows_gemm: a row alone and among 9", one, all,
              (size_t)n * u * 4);
    free(one);
    free(all);
    free(got);
    free(x);
    free(w);
    free(want);
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
    double cl = C->xent_ignore(NULL, g, &cc, x, y, n, v, -1, 1.0f, 1.0);
    float *d_x = up(x, nl * 4), *d_g = up(x, nl * 4);
    int32_t *d_y = up(y, n * 4);
    double gl = G->xent_ignore(&dx, d_g, &gc, d_x, d_y, n, v, -1, 1.0f, 1.0);
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

    /* Into acc (a training step): nothing comes back, acc[NN_ACC_LOSS]
     * gets the mean times the weight on the stream, acc[NN_ACC_CORRECT]
     * stays; captured in a graph and replayed twice it adds twice, the
     * same bits as the calls made op by op. */
    const double w = 3.0, acc0[NN_ACC_COUNT] = {0.5, 7.0};
    double *d_acc[2];
    for (int r = 0; r < 2; r++)
        d_acc[r] = up(acc0, sizeof acc0);
    nn_exec ax = dx;
    ax.acc = d_acc[0];
    gc = 99;
    double r0 = G->xent_ignore(&ax, d_g, &gc, d_x, d_y, n, v, -1, 1.0f, w);
    r0 += G->xent_ignore(&ax, d_g, NULL, d_x, d_y, n, v, -1, 1.0f, w);
    ax.acc = d_acc[1];
    void *graph = NULL;
    ty_err err = {0};
    if (G->graph_begin(&ax) != 0) {
        printf("FAIL: xent_ignore graph_begin\n");
        failures++;
        return;
    }
    (void)G->xent_ignore(&ax, d_g, NULL, d_x, d_y, n, v, -1, 1.0f, w);
    if (G->graph_end(&ax, &graph, &err) != 0) {
        printf("FAIL: xent_ignore capture: %s\n", err.msg);
        failures++;
        return;
    }
    G->graph_launch(&ax, graph);
    G->graph_launch(&ax, graph);
    status("xent_ignore acc");
    double a0[NN_ACC_COUNT], a1[NN_ACC_COUNT];
    G->download(&dx, a0, d_acc[0], sizeof a0);
    G->download(&dx, a1, d_acc[1], sizeof a1);
    const double want = 0.5 + 2.0 * cl * w;
    if (r0 != 0.0 || gc != 0 || a0[NN_ACC_CORRECT] != 7.0 ||
        fabs(a0[NN_ACC_LOSS] - want) > 1e-5 * fabs(want)) {
        printf("FAIL: xent_ignore into acc: returned %g, counted %u, acc "
               "%.10g %g, want %.10g 7\n",
               r0, gc, a0[NN_ACC_LOSS], a0[NN_ACC_CORRECT], want);
        failures++;
    } else {
        printf("ok   xent_ignore into acc %.6f\n", a0[NN_ACC_LOSS]);
    }
    same_bits("xent_ignore acc graph replay", a1, a0, sizeof a0);
    G->graph_release(&ax, graph);
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
    for (int op = NN_OP_GELU_TANH; op < NN_OP_COUNT; op++)
        if (!G->supports((nn_op)op)) {
            printf("FAIL: nn_backend_cuda does not support %s\n",
                   nn_op_name((nn_op)op));
            failures++;
        }
    case_gelu_tanh();
    case_embedding();
    case_attention();
    case_attention_graph();
    case_seq_lens();
    case_seq_pool();
    case_kv_cache();
    case_rows_gemm();
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
