/* test_nn_transformer_graph.c - the transformer ops through fake_graph.h
 * (a CUDA stream and CUDA graphs on the CPU): the kernels queue with their
 * arguments and run at the next sync, a captured graph replays them on the
 * memory as it is at the replay, and the loss is a sync point without
 * nn_exec.acc (its mean comes back to the host; a violation inside a
 * capture) and queued into acc with it. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "fake_graph.h"
#include "testutil.h"

enum { Bn = 2, T = 6, H = 2, D = 4, C = H * D, LD = 3 * C, V = 9 };
enum { NQ = Bn * T * LD, NO = Bn * T * C, NA = Bn * H * T * T };

static void test_queued_and_replayed(void **state)
{
    (void)state;
    fake_graph_init();
    const nn_backend *g = &fake_graph, *cpu = &nn_backend_cpu;
    float qkv[NQ], dy[NO], tab[V * C], want[NO], watt[NA], wdq[NQ], wemb[NO];
    float wdat[NA], wdt[V * C] = {0}, got[NO];
    int32_t ids[Bn * T];
    tu_fill_uniform(qkv, NQ, 1, 33, 1.0f);
    tu_fill_uniform(dy, NO, 2, 33, 1.0f);
    tu_fill_uniform(tab, V * C, 3, 33, 1.0f);
    for (int i = 0; i < Bn * T; i++)
        ids[i] = (i * 5) % V;

    float *d_qkv = g->alloc(NULL, sizeof qkv),
          *d_dy = g->alloc(NULL, sizeof dy);
    float *d_out = g->alloc(NULL, NO * 4), *d_att = g->alloc(NULL, NA * 4);
    float *d_dat = g->alloc(NULL, NA * 4), *d_dq = g->alloc(NULL, NQ * 4);
    float *d_tab = g->alloc(NULL, sizeof tab), *d_emb = g->alloc(NULL, NO * 4);
    float *d_dt = g->alloc(NULL, sizeof tab);
    int32_t *d_ids = g->alloc(NULL, sizeof ids);
    assert_true(d_qkv && d_dy && d_out && d_att && d_dat && d_dq && d_tab &&
                d_emb && d_dt && d_ids);
    g->upload(NULL, d_dy, dy, sizeof dy);
    g->upload(NULL, d_tab, tab, sizeof tab);
    g->upload(NULL, d_ids, ids, sizeof ids);
    g->zero(NULL, d_dt, sizeof tab);

    /* Capture forward and backward, then write the inputs: the replay must
     * read them as they are at the launch. */
    uint64_t violations = fake_graph_violations;
    assert_int_equal(g->graph_begin(NULL), 0);
    g->attention_forward(NULL, d_out, d_att, d_qkv, d_qkv + C, d_qkv + 2 * C,
                         Bn, T, H, D, LD, NULL);
    g->attention_backward(NULL, d_dq, d_dq + C, d_dq + 2 * C, d_dat, d_dy,
                          d_qkv, d_qkv + C, d_qkv + 2 * C, d_att, Bn, T, H, D,
                          LD, NULL);
    g->embedding_forward(NULL, d_emb, d_ids, d_tab, Bn * T, C);
    g->embedding_backward(NULL, d_dt, d_emb, d_ids, Bn * T, V, C);
    void *graph = NULL;
    ty_err err;
    assert_int_equal(g->graph_end(NULL, &graph, &err), 0);
    assert_int_equal(fake_graph_violations, violations);
    g->upload(NULL, d_qkv, qkv, sizeof qkv);
    g->graph_launch(NULL, graph);
    g->download(NULL, got, d_out, sizeof got);

    cpu->attention_forward(NULL, want, watt, qkv, qkv + C, qkv + 2 * C, Bn, T,
                           H, D, LD, NULL);
    cpu->attention_backward(NULL, wdq, wdq + C, wdq + 2 * C, wdat, dy, qkv,
                            qkv + C, qkv + 2 * C, watt, Bn, T, H, D, LD, NULL);
    cpu->embedding_forward(NULL, wemb, ids, tab, Bn * T, C);
    cpu->embedding_backward(NULL, wdt, wemb, ids, Bn * T, V, C);
    assert_memory_equal(got, want, sizeof got);
    float gdq[NQ], gemb[NO], gdt[V * C];
    g->download(NULL, gdq, d_dq, sizeof gdq);
    g->download(NULL, gemb, d_emb, sizeof gemb);
    g->download(NULL, gdt, d_dt, sizeof gdt);
    assert_memory_equal(gdq, wdq, sizeof gdq);
    assert_memory_equal(gemb, wemb, sizeof gemb);
    assert_memory_equal(gdt, wdt, sizeof gdt);

    /* The loss waits for the queue (it reads the logits the queued
     * kernels wrote) and is a violation inside a capture. */
    int32_t tg[Bn * T];
    for (int i = 0; i < Bn * T; i++)
        tg[i] = i % 4 == 0 ? -1 : i % C;
    g->attention_forward(NULL, d_out, d_att, d_qkv, d_qkv + C, d_qkv + 2 * C,
                         Bn, T, H, D, LD, NULL); /* queued: logits = out */
    uint32_t cnt = 0;
    double l =
        g->xent_ignore(NULL, NULL, &cnt, d_out, tg, Bn * T, C, -1, 1.0f, 1.0);
    assert_float_equal(
        l,
        cpu->xent_ignore(NULL, NULL, NULL, want, tg, Bn * T, C, -1, 1.0f, 1.0),
        0);
    assert_int_equal(cnt, Bn * T - 3);
    assert_int_equal(g->graph_begin(NULL), 0);
    (void)g->xent_ignore(NULL, NULL, NULL, d_out, tg, Bn * T, C, -1, 1.0f, 1.0);
    void *g2 = NULL;
    assert_int_equal(g->graph_end(NULL, &g2, &err), 0);
    assert_true(fake_graph_violations > violations);

    /* With acc (a training step) the loss is queued like the others: no
     * violation in a capture, nothing comes back (0, *counted 0), and each
     * replay adds the mean times the weight to acc[NN_ACC_LOSS], leaving
     * acc[NN_ACC_CORRECT] alone. */
    double *d_acc = g->alloc(NULL, NN_ACC_COUNT * sizeof(double));
    assert_non_null(d_acc);
    const double acc0[NN_ACC_COUNT] = {
        [NN_ACC_LOSS] = 0.5, [NN_ACC_CORRECT] = 7.0};
    g->upload(NULL, d_acc, acc0, sizeof acc0);
    nn_exec aex = {.acc = d_acc};
    violations = fake_graph_violations;
    assert_int_equal(g->graph_begin(NULL), 0);
    cnt = 99;
    assert_float_equal(
        g->xent_ignore(&aex, NULL, &cnt, d_out, tg, Bn * T, C, -1, 1.0f, 3.0),
        0.0, 0);
    assert_int_equal(cnt, 0);
    void *g3 = NULL;
    assert_int_equal(g->graph_end(NULL, &g3, &err), 0);
    assert_int_equal(fake_graph_violations, violations);
    g->graph_launch(NULL, g3);
    g->graph_launch(NULL, g3);
    double acc[NN_ACC_COUNT];
    g->download(NULL, acc, d_acc, sizeof acc);
    assert_float_equal(acc[NN_ACC_LOSS], 0.5 + l * 3.0 + l * 3.0, 1e-12);
    assert_float_equal(acc[NN_ACC_CORRECT], 7.0, 0);

    g->graph_release(NULL, graph);
    g->graph_release(NULL, g2);
    g->graph_release(NULL, g3);
    g->release(NULL, d_acc);
    void *bufs[] = {d_qkv, d_dy,  d_out, d_att, d_dat,
                    d_dq,  d_tab, d_emb, d_dt,  d_ids};
    for (size_t i = 0; i < TY_ARRAY_LEN(bufs); i++)
        g->release(NULL, bufs[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queued_and_replayed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
