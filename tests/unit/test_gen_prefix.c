/*
 * test_gen_prefix.c - the generation engine's prefix cache across idle
 * gaps (node/gen_engine.c over models/nn_decode.h), with a tiny GPT:
 *
 *   - a prompt runs, finishes, and the engine goes idle; the same prompt
 *     again takes its full blocks from the cache (hit tokens counted) and
 *     writes the same greedy tokens as the first, uncached run;
 *   - under pressure the cached block unused longest is evicted first (a
 *     prompt hit again is kept, one left alone loses its tail), and a
 *     block evicted and rewritten never answers for its old tokens (the
 *     tokens after a partial hit are still the uncached run's);
 *   - a pool whose every unheld block is cached still admits a sequence
 *     that needs the whole pool (cached blocks count free);
 *   - the gauges: blocks used 0 and cached > 0 while idle, total kept.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "models/nn_decode.h"
#include "models/nn_internal.h"
#include "node/gen_engine.h"

#define T 64 /* the context: 4 blocks of 16 */
#define V 11
#define BT 16 /* the engine's block */

#define GPT                                                 \
    "{\"layers\": [{\"type\": \"embedding\", \"dim\": 16}," \
    " {\"type\": \"positional_embedding\"},"                \
    " {\"type\": \"transformer_block\", \"heads\": 2},"     \
    " {\"type\": \"layernorm\"}, {\"type\": \"lm_head\"}]}"

typedef struct {
    nn_net net;
    float *state;
} model;

static void build(model *m)
{
    memset(m, 0, sizeof *m);
    json_t *spec = json_loads(GPT, 0, NULL);
    assert_non_null(spec);
    uint32_t t = T;
    ty_err err = {0};
    assert_int_equal(nn_arch_build(spec, &t, 1, V, TY_TASK_LANGUAGE_MODELING,
                                   &m->net.arch, NULL, &err),
                     TY_OK);
    json_decref(spec);
    const nn_arch *a = &m->net.arch;
    m->state = malloc((a->param_count + a->buffer_count + 1) * 4);
    assert_non_null(m->state);
    ty_rng rng;
    ty_rng_seed(&rng, 17, 3);
    nn_arch_init_params(a, m->state, &rng);
    for (uint64_t i = 0; i < a->param_count; i++)
        m->state[i] += 0.3f * (2.0f * ty_rng_uniform(&rng) - 1.0f);
    m->net.params = m->state;
}

static void drop(model *m)
{
    gen_engine_forget(&m->net);
    nn_arch_free(&m->net.arch);
    free(m->state);
}

/* The engine's pool at `blocks` blocks for m (its policy: bytes / a
 * block's bytes). */
static void pool_of(const model *m, uint32_t blocks)
{
    const uint64_t one = nn_decoder_bytes(&m->net, 1, 1, BT);
    const uint64_t two = nn_decoder_bytes(&m->net, 1, 2, BT);
    gen_engine_set_kv_budget(&(gen_kv_budget){.bytes = (two - one) * blocks});
}

/* A greedy sequence that records its tokens. */
typedef struct {
    gen_seq s; /* first: the callbacks get it */
    uint32_t out[T];
    uint32_t n_out;
} greedy;

static ty_status next_greedy(gen_seq *s, const float *logits, uint32_t *scratch,
                             uint32_t *token, int *finished, ty_err *err)
{
    (void)scratch;
    (void)err;
    greedy *g = (greedy *)s;
    uint32_t best = 0;
    for (uint32_t v = 1; v < s->vocab; v++)
        if (logits[v] > logits[best])
            best = v;
    g->out[g->n_out++] = best;
    *token = best;
    *finished = g->n_out == s->max_tokens;
    return TY_OK;
}

static ty_status end_noop(gen_seq *s, ty_err *err)
{
    (void)s;
    (void)err;
    return TY_OK;
}

/* Runs ids (n of them) for max_tokens greedy tokens into out (max_tokens
 * of them) and gives the prompt tokens the prefix cache gave it. */
static uint64_t run(model *m, const uint32_t *ids, uint32_t n,
                    uint32_t max_tokens, uint32_t *out)
{
    gen_engine_totals t0, t1;
    gen_engine_totals_get(&t0);
    greedy g = {.s = {.net = &m->net,
                      .vocab = V,
                      .context = T,
                      .ids = ids,
                      .n = n,
                      .max_tokens = max_tokens,
                      .tenant = "t",
                      .next = next_greedy,
                      .end = end_noop}};
    ty_err err = {0};
    assert_int_equal(gen_engine_run(&g.s, &err), TY_OK);
    assert_int_equal(g.n_out, max_tokens);
    memcpy(out, g.out, max_tokens * sizeof *out);
    gen_engine_totals_get(&t1);
    /* idle again: nothing held */
    assert_int_equal(t1.running, 0);
    assert_int_equal(t1.kv_used, 0);
    return t1.prefix_hit_tokens - t0.prefix_hit_tokens;
}

/* n ids from seed, inside the vocabulary. */
static void ids_of(uint32_t seed, uint32_t *ids, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        ids[i] = (seed * 7 + i * (seed + 3) + i * i) % V;
}

static void same_tokens(const uint32_t *a, const uint32_t *b, uint32_t n,
                        const char *what)
{
    for (uint32_t i = 0; i < n; i++)
        if (a[i] != b[i])
            fail_msg("%s: token %u is %u, %u without the cache", what, i, b[i],
                     a[i]);
}

/* The same 40-token prompt 2 runs apart, the engine idle between: the
 * second takes its 2 full blocks (32 tokens; the block of its last token
 * always runs) and writes the same tokens. */
static void test_hit_after_idle(void **state)
{
    (void)state;
    model m;
    build(&m);
    pool_of(&m, 8);
    uint32_t p[40], a[8], b[8];
    ids_of(1, p, 40);
    assert_int_equal(run(&m, p, 40, 8, a), 0);
    gen_engine_totals t;
    gen_engine_totals_get(&t);
    assert_int_equal(t.kv_total, 8); /* the pool stays while idle */
    assert_int_equal(t.kv_cached, 2);
    assert_int_equal(run(&m, p, 40, 8, b), 32);
    same_tokens(a, b, 8, "the second run");
    /* a third, after another gap */
    assert_int_equal(run(&m, p, 40, 8, b), 32);
    same_tokens(a, b, 8, "the third run");
    drop(&m);
}

/* Six blocks; prompts of 33 tokens take 3 (2 cached after). A, B, A again
 * (A's blocks touched), then C needs 3 with 2 free: B's tail, the block
 * unused longest, goes. A still hits both blocks, B only its first, and
 * both write their uncached tokens. */
static void test_lru_eviction(void **state)
{
    (void)state;
    model m;
    build(&m);
    pool_of(&m, 6);
    uint32_t pa[33], pb[33], pc[33];
    uint32_t a[4], b[4], c[4], again[4];
    ids_of(2, pa, 33);
    ids_of(3, pb, 33);
    ids_of(4, pc, 33);
    assert_int_equal(run(&m, pa, 33, 4, a), 0);
    assert_int_equal(run(&m, pb, 33, 4, b), 0);
    assert_int_equal(run(&m, pa, 33, 4, again), 32);
    same_tokens(a, again, 4, "A hit");
    gen_engine_totals t;
    gen_engine_totals_get(&t);
    assert_int_equal(t.kv_cached, 4);
    assert_int_equal(run(&m, pc, 33, 4, c), 0); /* evicts B's tail */
    gen_engine_totals_get(&t);
    assert_int_equal(t.kv_cached, 5);
    assert_int_equal(run(&m, pa, 33, 4, again), 32);
    same_tokens(a, again, 4, "A after C");
    /* B's second block was evicted and rewritten by C: only the first
     * answers, and B's tokens are still its own */
    assert_int_equal(run(&m, pb, 33, 4, again), 16);
    same_tokens(b, again, 4, "B after its tail went");
    /* B took C's second block, the one unused longest then: C hits its
     * first only, and writes its own tokens */
    assert_int_equal(run(&m, pc, 33, 4, again), 16);
    same_tokens(c, again, 4, "C");
    drop(&m);
}

/* Four blocks, a whole context: two prompts leave 3 blocks cached and 1
 * free; a sequence that needs all 4 is admitted at once (the cached ones
 * count free) and evicts them, and its tokens are its uncached ones. */
static void test_full_of_cached_admits(void **state)
{
    (void)state;
    model m;
    build(&m);
    pool_of(&m, 4);
    uint32_t p1[32], p2[32], g[60], out[4], ref[4];
    ids_of(5, p1, 32);
    ids_of(6, p2, 32);
    ids_of(7, g, 60);
    /* the reference: g first, on an empty pool */
    assert_int_equal(run(&m, g, 60, 4, ref), 0);
    assert_int_equal(run(&m, p1, 32, 1, out), 0);
    assert_int_equal(run(&m, p2, 32, 1, out), 0);
    gen_engine_totals t;
    gen_engine_totals_get(&t);
    assert_int_equal(t.kv_total, 4);
    assert_int_equal(t.kv_cached, 3);
    assert_int_equal(run(&m, g, 60, 4, out), 0); /* g's own were evicted */
    same_tokens(ref, out, 4, "g on a pool of cached blocks");
    /* and p1's first block is gone with the rest */
    assert_int_equal(run(&m, p1, 32, 1, out), 0);
    drop(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hit_after_idle),
        cmocka_unit_test(test_lru_eviction),
        cmocka_unit_test(test_full_of_cached_admits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
