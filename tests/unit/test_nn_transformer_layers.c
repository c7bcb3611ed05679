/*
 * test_nn_transformer_layers.c - the sequence layers of models/nn.h
 * (issue 31) as spec layers: embedding, positional_embedding, attention,
 * transformer_block, dense / layernorm / gelu(tanh) on (T, C), lm_head
 * (tied and not); their shapes, tensor names and errors at
 * submit, and every parameter gradient against central differences, for
 * both sum(R * logits) and the language-model loss (nn_loss).
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

#define LM TY_TASK_LANGUAGE_MODELING

static void build(const char *text, uint32_t t, uint32_t v, nn_arch *arch)
{
    json_t *spec = json_loads(text, 0, NULL);
    assert_non_null(spec);
    ty_err err;
    ty_status st = nn_arch_build(spec, &t, 1, v, LM, arch, NULL, &err);
    json_decref(spec);
    if (st != TY_OK)
        fail_msg("%s (%s)", err.msg, err.field);
}

#define GPT                                                \
    "{\"layers\": [{\"type\": \"embedding\", \"dim\": 8}," \
    " {\"type\": \"positional_embedding\"},"               \
    " {\"type\": \"transformer_block\", \"heads\": 2},"    \
    " {\"type\": \"layernorm\"}, {\"type\": \"lm_head\"}]}"

static void test_gpt_shapes_and_names(void **state)
{
    nn_arch a;
    build(GPT, 5, 11, &a);
    assert_int_equal(a.output.ndim, 2);
    assert_int_equal(a.output.d[0], 5);
    assert_int_equal(a.output.d[1], 11);
    const char *want[] = {"0.weight",
                          "1.weight",
                          "2.ln_1.weight",
                          "2.ln_1.bias",
                          "2.attn.in_proj_weight",
                          "2.attn.in_proj_bias",
                          "2.attn.out_proj.weight",
                          "2.attn.out_proj.bias",
                          "2.ln_2.weight",
                          "2.ln_2.bias",
                          "2.mlp.0.weight",
                          "2.mlp.0.bias",
                          "2.mlp.2.weight",
                          "2.mlp.2.bias",
                          "3.weight",
                          "3.bias"};
    assert_int_equal(a.n_tensors, TY_ARRAY_LEN(want));
    for (size_t i = 0; i < TY_ARRAY_LEN(want); i++)
        assert_string_equal(a.tensors[i].name, want[i]);
    /* wte 11x8, wpe 5x8, block 12 C^2 + 13 C (C = 8), ln_f 16; the tied
     * head has none of its own */
    const uint64_t c = 8;
    assert_int_equal(a.param_count, 88 + 40 + 12 * c * c + 13 * c + 16);
    /* attention's (heads, T, T) probabilities are in the block's scratch */
    assert_true(a.layers[2].scratch_per_example >= 2 * 2 * 5 * 5);
    nn_arch_free(&a);
}

static void test_spec_errors(void **state)
{
    uint32_t t = 8;
    tu_expect_spec_error("{\"layers\": [{\"type\": \"embedding\", \"dim\": 8},"
                         " {\"type\": \"dense\", \"units\": 3}]}",
                         &t, 1, 11, LM, "model.layers", "lm_head");
    tu_expect_spec_error("{\"layers\": [{\"type\": \"embedding\", \"dim\": 8},"
                         " {\"type\": \"transformer_block\", \"heads\": 3},"
                         " {\"type\": \"lm_head\"}]}",
                         &t, 1, 11, LM, "model.layers[1].heads", "must divide");
    tu_expect_spec_error(
        "{\"layers\": [{\"type\": \"embedding\", \"dim\": 8},"
        " {\"type\": \"transformer_block\", \"heads\": 2, \"dropout\": 1},"
        " {\"type\": \"lm_head\"}]}",
        &t, 1, 11, LM, "model.layers[1].dropout", "below 1");
    tu_expect_spec_error("{\"layers\": [{\"type\": \"embedding\", \"dim\": 8, "
                         "\"vocab_size\": 12}, {\"type\": \"lm_head\"}]}",
                         &t, 1, 11, LM, "model.layers[0].vocab_size",
                         "differs");
    tu_expect_spec_error(
        "{\"layers\": [{\"type\": \"embedding\", \"dim\": 8},"
        " {\"type\": \"dense\", \"units\": 6}, {\"type\": \"lm_head\"}]}",
        &t, 1, 11, LM, "model.layers[2].tie_embedding", "dim 8");
    tu_expect_spec_error("{\"layers\": [{\"type\": \"lm_head\", "
                         "\"tie_embedding\": false}]}",
                         &t, 1, 11, LM, "model.layers[0]", "sequence");
    tu_expect_spec_error("{\"layers\": [{\"type\": \"embedding\", \"dim\": "
                         "8}, {\"type\": \"positional_embedding\"},"
                         " {\"type\": \"embedding\", \"dim\": 8}]}",
                         &t, 1, 11, LM, "model.layers[2]", "first layer");
    /* token layers need token ids: a classifier's embedding names its
     * vocabulary (the server fills it from a text dataset) */
    uint32_t f = 4;
    tu_expect_spec_error("{\"layers\": [{\"type\": \"embedding\", \"dim\": 8},"
                         " {\"type\": \"flatten\"}, {\"type\": \"dense\", "
                         "\"units\": 3}]}",
                         &f, 1, 3, TY_TASK_CLASSIFICATION,
                         "model.layers[0].vocab_size", "text dataset");
    tu_expect_spec_error("{\"layers\": [{\"type\": \"embedding\", \"dim\": 8,"
                         " \"vocab_size\": 5}, {\"type\": \"lm_head\"}]}",
                         &f, 1, 3, TY_TASK_CLASSIFICATION,
                         "model.layers[1].type", "text or tokens dataset");
    tu_expect_spec_error("{\"layers\": [{\"type\": \"embedding\", \"dim\": 8,"
                         " \"vocab_size\": 5}, {\"type\": \"sequence_pool\","
                         " \"mode\": \"max\"}, {\"type\": \"dense\", "
                         "\"units\": 3}]}",
                         &f, 1, 3, TY_TASK_CLASSIFICATION,
                         "model.layers[1].mode", "mean");
    tu_expect_spec_error("{\"layers\": [{\"type\": \"sequence_pool\"},"
                         " {\"type\": \"dense\", \"units\": 3}]}",
                         &f, 1, 3, TY_TASK_CLASSIFICATION, "model.layers[0]",
                         "sequence");
    tu_expect_spec_error(
        "{\"layers\": [{\"type\": \"gelu\", \"approximate\": \"fast\"},"
        " {\"type\": \"dense\", \"units\": 3}]}",
        &f, 1, 3, TY_TASK_CLASSIFICATION, "model.layers[0].approximate",
        "tanh");
}

/* ---- finite differences ---- */

typedef struct {
    nn_arch a;
    nn_workspace *ws;
    float *state, *grads, *x, *r, *tg;
    uint32_t n, t, v;
    int use_loss; /* objective: the LM loss (else sum(R * logits)) */
} fdc;

static void fdc_setup(fdc *c, const char *spec, uint32_t n, uint32_t t,
                      uint32_t v, int use_loss, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    build(spec, t, v, &c->a);
    c->n = n;
    c->t = t;
    c->v = v;
    c->use_loss = use_loss;
    c->ws = nn_workspace_create_for(&c->a, n, 1);
    assert_non_null(c->ws);
    c->state = malloc((c->a.param_count + c->a.buffer_count + 1) * 4);
    c->grads = calloc(c->a.param_count + 1, 4);
    c->x = malloc((size_t)n * t * 4);
    c->tg = malloc((size_t)n * t * 4);
    c->r = malloc((size_t)n * t * v * 4);
    ty_rng rng;
    ty_rng_seed(&rng, seed, 3);
    nn_arch_init_params(&c->a, c->state, &rng);
    /* off the initial values: layer norms' 1 and 0, zero biases */
    for (uint64_t i = 0; i < c->a.param_count; i++)
        c->state[i] += 0.3f * (2.0f * ty_rng_uniform(&rng) - 1.0f);
    for (size_t i = 0; i < (size_t)n * t; i++) {
        c->x[i] = (float)ty_rng_below(&rng, v);
        c->tg[i] = (float)ty_rng_below(&rng, v);
    }
    c->tg[1] = -1.0f; /* an ignored position */
    tu_fill_uniform(c->r, (size_t)n * t * v, seed + 1, 9, 1.0f);
}

static void fdc_free(fdc *c)
{
    nn_workspace_destroy(c->ws);
    nn_arch_free(&c->a);
    free(c->state);
    free(c->grads);
    free(c->x);
    free(c->tg);
    free(c->r);
}

static double fdc_objective(fdc *c, int grad)
{
    memcpy(c->ws->act[0], c->x, (size_t)c->n * c->t * 4);
    memcpy(c->ws->targets, c->tg, (size_t)c->n * c->t * 4);
    const float *y = nn_forward(&c->a, c->state, c->ws, c->n, 1, NULL);
    double s = 0;
    if (c->use_loss) {
        s = nn_loss(&c->a, c->ws, c->n, NULL, c->ws->targets, NULL, grad) /
            c->n;
    } else {
        for (size_t i = 0; i < (size_t)c->n * c->t * c->v; i++)
            s += (double)c->r[i] * y[i];
        if (grad)
            memcpy(c->ws->grad[0], c->r, (size_t)c->n * c->t * c->v * 4);
    }
    return s;
}

/* Every tensor: up to 24 of its values, spread over it, against the
 * central difference; each tensor's gradient must be non-zero. */
static void fdc_check(fdc *c, float eps, double abs_tol)
{
    fdc_objective(c, 1);
    memset(c->grads, 0, c->a.param_count * 4);
    nn_backward(&c->a, c->state, c->grads, c->ws, c->n);
    for (uint32_t k = 0; k < c->a.n_tensors; k++) {
        const nn_named_tensor *nt = &c->a.tensors[k];
        const uint64_t numel = nt->desc->numel;
        const uint64_t step = numel > 24 ? numel / 24 : 1;
        double norm = 0;
        for (uint64_t e = 0; e < numel; e++)
            norm += fabs(c->grads[nt->offset + e]);
        if (!(norm > 1e-5))
            fail_msg("%s: gradient is zero", nt->name);
        for (uint64_t e = 0; e < numel; e += step) {
            float *p = &c->state[nt->offset + e];
            float keep = *p;
            *p = keep + eps;
            double up = fdc_objective(c, 0);
            *p = keep - eps;
            double down = fdc_objective(c, 0);
            *p = keep;
            tu_assert_grad_close(c->grads[nt->offset + e],
                                 (up - down) / (2.0 * eps), abs_tol, nt->name,
                                 (size_t)e);
        }
    }
}

static void test_gpt_gradients(void **state)
{
    fdc c;
    fdc_setup(&c, GPT, 2, 5, 11, 0, 7);
    fdc_check(&c, 1e-2f, 2e-2);
    fdc_free(&c);
}

static void test_gpt_loss_gradients(void **state)
{
    fdc c;
    fdc_setup(&c, GPT, 3, 4, 7, 1, 8);
    fdc_check(&c, 1e-2f, 2e-3);
    /* the loss of uniform logits would be log V; a real one is finite */
    double l = fdc_objective(&c, 0);
    assert_true(isfinite(l) && l > 0.0);
    fdc_free(&c);
}

static void test_attention_dense_gelu_untied(void **state)
{
    fdc c;
    fdc_setup(&c,
              "{\"layers\": [{\"type\": \"embedding\", \"dim\": 6},"
              " {\"type\": \"attention\", \"heads\": 3},"
              " {\"type\": \"dense\", \"units\": 10},"
              " {\"type\": \"gelu\", \"approximate\": \"tanh\"},"
              " {\"type\": \"dense\", \"units\": 6, \"bias\": false},"
              " {\"type\": \"layernorm\"},"
              " {\"type\": \"attention\", \"heads\": 1, \"bias\": false},"
              " {\"type\": \"lm_head\", \"tie_embedding\": false}]}",
              2, 6, 9, 0, 9);
    assert_string_equal(c.a.tensors[1].name, "1.in_proj_weight");
    assert_string_equal(c.a.tensors[4].name, "1.out_proj.bias");
    assert_string_equal(c.a.tensors[c.a.n_tensors - 1].name, "7.weight");
    fdc_check(&c, 1e-2f, 2e-2);
    fdc_free(&c);
}

/* The causal mask: logits at position i do not move when a later token
 * changes. */
static void test_causal(void **state)
{
    fdc c;
    fdc_setup(&c, GPT, 1, 6, 11, 0, 10);
    const size_t v = c.v;
    fdc_objective(&c, 0);
    float *before = malloc(6 * v * 4);
    memcpy(before, c.ws->act[c.a.n_layers], 6 * v * 4);
    c.x[4] = (float)(((int)c.x[4] + 3) % 11);
    fdc_objective(&c, 0);
    const float *after = c.ws->act[c.a.n_layers];
    for (size_t i = 0; i < 4 * v; i++)
        assert_float_equal(before[i], after[i], 0.0f);
    int moved = 0;
    for (size_t i = 4 * v; i < 6 * v; i++)
        moved |= before[i] != after[i];
    assert_true(moved);
    free(before);
    fdc_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_shapes_and_names),
        cmocka_unit_test(test_spec_errors),
        cmocka_unit_test(test_gpt_gradients),
        cmocka_unit_test(test_gpt_loss_gradients),
        cmocka_unit_test(test_attention_dense_gelu_untied),
        cmocka_unit_test(test_causal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
