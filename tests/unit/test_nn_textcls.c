/*
 * test_nn_textcls.c - a text classifier's pieces (issue 31): the padding
 * mask, bidirectional attention, sequence_pool and dropout inside
 * attention and transformer blocks.
 *
 *   - NN_OP_SEQ_POOL and seq_lens on the CPU, exact values;
 *   - the masked attention op against a double-precision reference, with
 *     causal false, lengths 0, partial and full, and dropout multipliers;
 *   - a classifier (embedding, positional_embedding, bidirectional
 *     transformer_block, layernorm, sequence_pool, dense) sees no padding:
 *     a text padded to 8 gives the logits the same model gives it unpadded
 *     at length 3;
 *   - every parameter gradient against central differences, with padding
 *     and with dropout (the same masks drawn for each evaluation);
 *   - dropout is off outside training: a dropout 0.3 model evaluates as
 *     the same model at 0.
 */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/nn_internal.h"
#include "testutil.h"

#define CLS TY_TASK_CLASSIFICATION
#define V 13

static const nn_backend *B = &nn_backend_cpu;

/* ---- ops ---- */

static void test_seq_lens(void **state)
{
    const float x[3 * 4] = {5, 2, 1, 0, 4, -1, -1, -1, -1, -1, -1, -1};
    int32_t lens[3];
    B->seq_lens(NULL, lens, x, 3, 4);
    assert_int_equal(lens[0], 4);
    assert_int_equal(lens[1], 1);
    assert_int_equal(lens[2], 0);
}

static void test_seq_pool(void **state)
{
    /* 3 sequences of t = 3 positions, c = 2 */
    const float in[18] = {1,  2,  3,  4,  5,  6,  7,  8,  9,
                          10, 11, 12, 13, 14, 15, 16, 17, 18};
    const int32_t lens[3] = {2, 3, 0};
    float out[6], din[18];
    B->seq_pool_forward(NULL, out, in, lens, 3, 3, 2, NN_SEQ_POOL_MEAN);
    const float mean[6] = {2, 3, 9, 10, 0, 0};
    assert_memory_equal(out, mean, sizeof mean);
    B->seq_pool_forward(NULL, out, in, lens, 3, 3, 2, NN_SEQ_POOL_FIRST);
    const float first[6] = {1, 2, 7, 8, 0, 0};
    assert_memory_equal(out, first, sizeof first);
    B->seq_pool_forward(NULL, out, in, lens, 3, 3, 2, NN_SEQ_POOL_LAST);
    const float last[6] = {3, 4, 11, 12, 0, 0};
    assert_memory_equal(out, last, sizeof last);
    /* backward of the mean: half of dout on sequence 0's two positions,
     * nothing on its padding or on the empty sequence */
    const float dout[6] = {2, 4, 3, 6, 5, 5};
    B->seq_pool_backward(NULL, din, dout, lens, 3, 3, 2, NN_SEQ_POOL_MEAN);
    const float dmean[18] = {1, 2, 1, 2, 0, 0, 1, 2, 1,
                             2, 1, 2, 0, 0, 0, 0, 0, 0};
    assert_memory_equal(din, dmean, sizeof dmean);
    B->seq_pool_backward(NULL, din, dout, lens, 3, 3, 2, NN_SEQ_POOL_LAST);
    const float dlast[18] = {0, 0, 2, 4, 0, 0, 0, 0, 0,
                             0, 3, 6, 0, 0, 0, 0, 0, 0};
    assert_memory_equal(din, dlast, sizeof dlast);
}

/* Forward of one (sequence, head) pair in double under the mask: row i
 * sees keys j < n(i); keep multiplies the probabilities. */
static void ref_attention(const float *q, const float *k, const float *v,
                          const float *keep, uint32_t t, uint32_t d,
                          uint32_t ld, int causal, int32_t len, double *out)
{
    for (uint32_t i = 0; i < t; i++) {
        uint32_t n = causal ? i + 1 : t;
        if ((uint32_t)len < n)
            n = (uint32_t)len;
        double p[16], mx = -INFINITY, sum = 0;
        for (uint32_t j = 0; j < n; j++) {
            double s = 0;
            for (uint32_t e = 0; e < d; e++)
                s += (double)q[i * ld + e] * k[j * ld + e];
            p[j] = s / sqrt((double)d);
            mx = p[j] > mx ? p[j] : mx;
        }
        for (uint32_t j = 0; j < n; j++)
            sum += (p[j] = exp(p[j] - mx));
        for (uint32_t e = 0; e < d; e++) {
            double o = 0;
            for (uint32_t j = 0; j < n; j++)
                o +=
                    p[j] / sum * (keep ? keep[i * t + j] : 1.0) * v[j * ld + e];
            out[i * d + e] = o;
        }
    }
}

static void check_masked(int causal, int with_keep)
{
    enum { Bn = 3, T = 5, H = 2, D = 3, C = H * D, LD = 3 * C };
    float x[Bn * T * LD], out[Bn * T * C], att[Bn * H * T * T];
    float keep[Bn * H * T * T], keep0[Bn * H * T * T];
    tu_fill_uniform(x, TY_ARRAY_LEN(x), 31, 7, 1.0f);
    for (size_t i = 0; i < TY_ARRAY_LEN(keep); i++)
        keep0[i] = keep[i] = (i * 7 + 3) % 5 == 0 ? 0.0f : 1.25f;
    const int32_t lens[Bn] = {5, 2, 0};
    nn_attn_mask m = {
        .causal = causal, .lens = lens, .keep = with_keep ? keep : NULL};
    B->attention_forward(NULL, out, att, x, x + C, x + 2 * C, Bn, T, H, D, LD,
                         &m);
    for (uint32_t bi = 0; bi < Bn; bi++)
        for (uint32_t hi = 0; hi < H; hi++) {
            double want[T * D];
            const size_t o = (size_t)bi * T * LD + hi * D;
            const size_t pk = ((size_t)bi * H + hi) * T * T;
            ref_attention(x + o, x + C + o, x + 2 * C + o,
                          with_keep ? keep0 + pk : NULL, T, D, LD, causal,
                          lens[bi], want);
            for (uint32_t i = 0; i < T; i++)
                for (uint32_t e = 0; e < D; e++)
                    assert_float_equal(
                        out[((size_t)bi * T + i) * C + hi * D + e],
                        want[i * D + e], 2e-6);
            /* masked probabilities are 0; a row with no key is all 0 */
            for (uint32_t i = 0; i < T; i++)
                for (uint32_t j = 0; j < T; j++)
                    if ((int32_t)j >= lens[bi] || (causal && j > i))
                        assert_float_equal(att[pk + i * T + j], 0.0f, 0.0f);
        }
}

static void test_masked_attention(void **state)
{
    check_masked(0, 0);
    check_masked(1, 0);
    check_masked(0, 1);
}

/* ---- the classifier ---- */

#define CLASSIFIER(drop)                                                   \
    "{\"layers\": [{\"type\": \"embedding\", \"dim\": 8, \"vocab_size\": " \
    "13}, {\"type\": \"positional_embedding\"},"                           \
    " {\"type\": \"transformer_block\", \"heads\": 2, \"causal\": false,"  \
    " \"dropout\": " drop "},"                                             \
    " {\"type\": \"attention\", \"heads\": 4, \"causal\": false,"          \
    " \"dropout\": " drop "},"                                             \
    " {\"type\": \"layernorm\"}, {\"type\": \"sequence_pool\"},"           \
    " {\"type\": \"dense\", \"units\": 3}]}"

static void build(const char *text, uint32_t t, nn_arch *arch)
{
    json_t *spec = json_loads(text, 0, NULL);
    assert_non_null(spec);
    ty_err err;
    ty_status st = nn_arch_build(spec, &t, 1, 3, CLS, arch, NULL, &err);
    json_decref(spec);
    if (st != TY_OK)
        fail_msg("%s (%s)", err.msg, err.field);
}

static float *init_params(const nn_arch *a, uint64_t seed)
{
    float *p = malloc((a->param_count + a->buffer_count + 1) * 4);
    ty_rng rng;
    ty_rng_seed(&rng, seed, 3);
    nn_arch_init_params(a, p, &rng);
    for (uint64_t i = 0; i < a->param_count; i++)
        p[i] += 0.3f * (2.0f * ty_rng_uniform(&rng) - 1.0f);
    return p;
}

/* logits (n, 3) of rows x (n, t) in evaluation */
static void eval_logits(const nn_arch *a, const float *params, const float *x,
                        uint32_t n, float *out)
{
    const uint32_t t = a->input.d[0];
    nn_workspace *ws = nn_workspace_create_for(a, n, 0);
    assert_non_null(ws);
    memcpy(ws->act[0], x, (size_t)n * t * 4);
    const float *y = nn_forward(a, params, ws, n, 0, NULL);
    memcpy(out, y, (size_t)n * 3 * 4);
    nn_workspace_destroy(ws);
}

/* The spec's tensors in order are the same for t = 3 and t = 8 but the
 * positional table: copy the long model's parameters into the short one,
 * the positional table's first 3 rows only. */
static void test_padding_is_never_seen(void **state)
{
    nn_arch a8, a3;
    build(CLASSIFIER("0"), 8, &a8);
    build(CLASSIFIER("0"), 3, &a3);
    float *p8 = init_params(&a8, 5);
    float *p3 = calloc(a3.param_count + 1, 4);
    assert_int_equal(a8.n_tensors, a3.n_tensors);
    for (uint32_t k = 0; k < a3.n_tensors; k++) {
        const nn_named_tensor *s = &a8.tensors[k], *d = &a3.tensors[k];
        assert_string_equal(s->name, d->name);
        memcpy(p3 + d->offset, p8 + s->offset, d->desc->numel * 4);
    }
    const float x8[2 * 8] = {4, 9, 1, -1, -1, -1, -1, -1,
                             4, 9, 1, 7,  2,  12, 0,  3};
    const float x3[3] = {4, 9, 1};
    float y8[6], y3[3];
    eval_logits(&a8, p8, x8, 2, y8);
    eval_logits(&a3, p3, x3, 1, y3);
    for (int i = 0; i < 3; i++)
        assert_float_equal(y8[i], y3[i], 1e-5);
    /* and the unpadded row of the same batch does see its later tokens */
    int differs = 0;
    for (int i = 0; i < 3; i++)
        differs |= fabsf(y8[3 + i] - y8[i]) > 1e-4f;
    assert_true(differs);
    free(p8);
    free(p3);
    nn_arch_free(&a8);
    nn_arch_free(&a3);
}

typedef struct {
    nn_arch a;
    nn_workspace *ws;
    float *state, *grads;
    uint32_t n, t;
    float x[4 * 6];
    int32_t labels[4];
} fdc;

/* the batch's mean softmax cross-entropy, the dropout masks
 * drawn from the same seed every time */
static double objective(fdc *c, int grad)
{
    memcpy(c->ws->act[0], c->x, (size_t)c->n * c->t * 4);
    memcpy(c->ws->labels, c->labels, c->n * 4);
    ty_rng rng;
    ty_rng_seed(&rng, 99, 1);
    nn_forward(&c->a, c->state, c->ws, c->n, 1, &rng);
    return nn_loss(&c->a, c->ws, c->n, c->ws->labels, NULL, NULL, grad) / c->n;
}

static void fd_check(const char *spec)
{
    fdc c = {.n = 4, .t = 6};
    build(spec, c.t, &c.a);
    c.ws = nn_workspace_create_for(&c.a, c.n, 1);
    assert_non_null(c.ws);
    c.state = init_params(&c.a, 11);
    c.grads = calloc(c.a.param_count + 1, 4);
    /* lengths 6, 3, 1 and 0 */
    const float x[4 * 6] = {1, 5,  12, 3,  3,  8,  2,  7,  0,  -1, -1, -1,
                            9, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    memcpy(c.x, x, sizeof x);
    const int32_t labels[4] = {0, 2, 1, 2};
    memcpy(c.labels, labels, sizeof labels);
    objective(&c, 1);
    nn_backward(&c.a, c.state, c.grads, c.ws, c.n);
    const float eps = 1e-2f;
    for (uint32_t k = 0; k < c.a.n_tensors; k++) {
        const nn_named_tensor *nt = &c.a.tensors[k];
        const uint64_t numel = nt->desc->numel;
        const uint64_t step = numel > 16 ? numel / 16 : 1;
        double norm = 0;
        for (uint64_t e = 0; e < numel; e++)
            norm += fabs(c.grads[nt->offset + e]);
        if (!(norm > 1e-6))
            fail_msg("%s: gradient is zero", nt->name);
        for (uint64_t e = 0; e < numel; e += step) {
            float *p = &c.state[nt->offset + e];
            float keep = *p;
            *p = keep + eps;
            double up = objective(&c, 0);
            *p = keep - eps;
            double down = objective(&c, 0);
            *p = keep;
            tu_assert_grad_close(c.grads[nt->offset + e],
                                 (up - down) / (2.0 * eps), 5e-3, nt->name,
                                 (size_t)e);
        }
    }
    /* padding's embedding rows get nothing: id 0 appears only at x[8],
     * id 6 nowhere */
    const nn_named_tensor *emb = &c.a.tensors[0];
    for (uint32_t e = 0; e < 8; e++)
        assert_float_equal(c.grads[emb->offset + 6 * 8 + e], 0.0f, 0.0f);
    nn_workspace_destroy(c.ws);
    free(c.state);
    free(c.grads);
    nn_arch_free(&c.a);
}

static void test_gradients(void **state) { fd_check(CLASSIFIER("0")); }

static void test_gradients_with_dropout(void **state)
{
    fd_check(CLASSIFIER("0.3"));
}

static void test_dropout_off_in_evaluation(void **state)
{
    nn_arch a0, a3;
    build(CLASSIFIER("0"), 6, &a0);
    build(CLASSIFIER("0.3"), 6, &a3);
    assert_int_equal(a0.param_count, a3.param_count);
    float *p = init_params(&a0, 21);
    const float x[2 * 6] = {1, 5, 12, 3, 3, 8, 2, 7, 0, -1, -1, -1};
    float y0[6], y3[6];
    eval_logits(&a0, p, x, 2, y0);
    eval_logits(&a3, p, x, 2, y3);
    assert_memory_equal(y0, y3, sizeof y0);
    /* in training, dropout changes the output */
    nn_workspace *ws = nn_workspace_create_for(&a3, 2, 1);
    memcpy(ws->act[0], x, sizeof x);
    ty_rng rng;
    ty_rng_seed(&rng, 4, 1);
    const float *yt = nn_forward(&a3, p, ws, 2, 1, &rng);
    int differs = 0;
    for (int i = 0; i < 6; i++)
        differs |= yt[i] != y0[i];
    assert_true(differs);
    nn_workspace_destroy(ws);
    free(p);
    nn_arch_free(&a0);
    nn_arch_free(&a3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seq_lens),
        cmocka_unit_test(test_seq_pool),
        cmocka_unit_test(test_masked_attention),
        cmocka_unit_test(test_padding_is_never_seen),
        cmocka_unit_test(test_gradients),
        cmocka_unit_test(test_gradients_with_dropout),
        cmocka_unit_test(test_dropout_off_in_evaluation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
