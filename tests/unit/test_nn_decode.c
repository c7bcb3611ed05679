/*
 * test_nn_decode.c - a language model stepped over the paged key/value
 * cache (models/nn_decode.h) against its full forward:
 *
 *   - a prompt in one step (prefill) and one token per step give, at
 *     every position, the logits the whole window gives there;
 *   - two sequences sharing steps (different lengths, blocks interleaved
 *     in the pool) each get their own logits, and a sequence's logits are
 *     the same bits alone or batched with the other (batch invariance);
 *   - the pool: reserving past it is TY_ELIMIT, releasing gives the
 *     blocks back;
 *   - prefix caching: a prompt that begins with another's full blocks
 *     shares them (reference counted, never its last block) and gets the
 *     bits a decoder without sharing gives; cached blocks count free and
 *     are evicted when the pool needs them; other ids do not match;
 *   - refusals: a row out of order, an id outside the vocabulary, a
 *     position without a block, a model that is not a causal language
 *     model;
 *   - the CPU's rows_gemm, the decode step's GEMM: within float rounding
 *     of a double reference, and every row the same bits whatever the row
 *     count, alone or among others, with or without worker threads.
 */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/nn_decode.h"
#include "models/nn_internal.h"
#include "models/pool.h"
#include "testutil.h"

#define T 10
#define V 11

#define GPT                                                        \
    "{\"layers\": [{\"type\": \"embedding\", \"dim\": 16},"        \
    " {\"type\": \"positional_embedding\"},"                       \
    " {\"type\": \"transformer_block\", \"heads\": 2},"            \
    " {\"type\": \"dense\", \"units\": 24}, {\"type\": \"gelu\"}," \
    " {\"type\": \"dense\", \"units\": 16, \"bias\": false},"      \
    " {\"type\": \"attention\", \"heads\": 4, \"bias\": false},"   \
    " {\"type\": \"layernorm\"}, {\"type\": \"lm_head\"}]}"

typedef struct {
    nn_net net;
    float *state;
} model;

static ty_status build(model *m, const char *text, uint32_t t, ty_task task,
                       ty_err *err)
{
    memset(m, 0, sizeof *m);
    json_t *spec = json_loads(text, 0, NULL);
    assert_non_null(spec);
    ty_status st = nn_arch_build(spec, &t, 1, V, task, &m->net.arch, NULL, err);
    json_decref(spec);
    if (st != TY_OK)
        return st;
    const nn_arch *a = &m->net.arch;
    m->state = malloc((a->param_count + a->buffer_count + 1) * 4);
    ty_rng rng;
    ty_rng_seed(&rng, 17, 3);
    nn_arch_init_params(a, m->state, &rng);
    for (uint64_t i = 0; i < a->param_count; i++)
        m->state[i] += 0.3f * (2.0f * ty_rng_uniform(&rng) - 1.0f);
    m->net.params = m->state;
    return TY_OK;
}

static void drop(model *m)
{
    nn_arch_free(&m->net.arch);
    free(m->state);
}

/* The full forward's logits (T, V) of one window of ids. */
static void full_logits(const model *m, const uint32_t *ids, float *out)
{
    const nn_arch *a = &m->net.arch;
    nn_workspace *ws = nn_workspace_create_for(a, 1, 0);
    assert_non_null(ws);
    for (int i = 0; i < T; i++)
        ws->act[0][i] = (float)ids[i];
    const float *y = nn_forward(a, m->state, ws, 1, 0, NULL);
    memcpy(out, y, T * V * 4);
    nn_workspace_destroy(ws);
}

static void close_rows(const float *got, const float *want, uint32_t rows,
                       const char *what)
{
    for (uint32_t i = 0; i < rows * V; i++)
        if (!(fabsf(got[i] - want[i]) <= 2e-5f * (1.0f + fabsf(want[i]))))
            fail_msg("%s: logit %u (position %u): %.8g, full forward %.8g",
                     what, i % V, i / V, got[i], want[i]);
}

static const uint32_t A_IDS[T] = {3, 7, 1, 10, 0, 5, 5, 2, 9, 4};
static const uint32_t B_IDS[T] = {8, 2, 6, 6, 1, 0, 3, 10, 7, 7};

static void test_prefill_and_steps(void **state)
{
    model m;
    ty_err err;
    assert_int_equal(build(&m, GPT, T, TY_TASK_LANGUAGE_MODELING, &err), TY_OK);
    float want[T * V], got[T * V];
    full_logits(&m, A_IDS, want);
    nn_decoder *d;
    assert_int_equal(nn_decoder_create(&m.net, 16, 8, 4, &d, &err), TY_OK);
    /* the prompt in one step */
    nn_kv_seq s = {0};
    nn_decode_row rows[T];
    assert_int_equal(nn_kv_seq_reserve(d, &s, T, &err), TY_OK);
    assert_int_equal(nn_decoder_free_blocks(d), 8 - 3);
    for (uint32_t i = 0; i < T; i++)
        rows[i] = (nn_decode_row){&s, A_IDS[i], i};
    assert_int_equal(nn_decoder_step(d, rows, T, got, &err), TY_OK);
    assert_int_equal(s.len, T);
    close_rows(got, want, T, "prefill");
    nn_kv_seq_release(d, &s);
    assert_int_equal(nn_decoder_free_blocks(d), 8);
    /* one token per step, the blocks reserved as it grows */
    for (uint32_t i = 0; i < T; i++) {
        assert_int_equal(nn_kv_seq_reserve(d, &s, i + 1, &err), TY_OK);
        rows[0] = (nn_decode_row){&s, A_IDS[i], i};
        assert_int_equal(nn_decoder_step(d, rows, 1, got + i * V, &err), TY_OK);
    }
    close_rows(got, want, T, "one token per step");
    nn_kv_seq_release(d, &s);
    nn_decoder_free(d);
    drop(&m);
}

static void test_two_sequences_and_batch_invariance(void **state)
{
    model m;
    ty_err err;
    assert_int_equal(build(&m, GPT, T, TY_TASK_LANGUAGE_MODELING, &err), TY_OK);
    float want_a[T * V], want_b[T * V];
    full_logits(&m, A_IDS, want_a);
    full_logits(&m, B_IDS, want_b);
    nn_decoder *d;
    assert_int_equal(nn_decoder_create(&m.net, 16, 12, 3, &d, &err), TY_OK);
    /* B alone, one token per step: the reference bits */
    nn_kv_seq b = {0};
    float alone[T * V];
    nn_decode_row row;
    for (uint32_t i = 0; i < T; i++) {
        assert_int_equal(nn_kv_seq_reserve(d, &b, i + 1, &err), TY_OK);
        row = (nn_decode_row){&b, B_IDS[i], i};
        assert_int_equal(nn_decoder_step(d, &row, 1, alone + i * V, &err),
                         TY_OK);
    }
    close_rows(alone, want_b, T, "B alone");
    nn_kv_seq_release(d, &b);
    /* A's prompt (6 tokens) and B's first token in one step, then each
     * step one token of each: blocks taken in turn, so interleaved */
    nn_kv_seq a = {0};
    float out[8 * V], got_a[T * V], got_b[T * V];
    nn_decode_row rows[8];
    assert_int_equal(nn_kv_seq_reserve(d, &a, 6, &err), TY_OK);
    assert_int_equal(nn_kv_seq_reserve(d, &b, 1, &err), TY_OK);
    for (uint32_t i = 0; i < 6; i++)
        rows[i] = (nn_decode_row){&a, A_IDS[i], i};
    rows[6] = (nn_decode_row){&b, B_IDS[0], 0};
    assert_int_equal(nn_decoder_step(d, rows, 7, out, &err), TY_OK);
    memcpy(got_a, out, 6 * V * 4);
    memcpy(got_b, out + 6 * V, V * 4);
    for (uint32_t i = 1; i < T; i++) {
        uint32_t n = 0;
        if (i + 5 < T) {
            assert_int_equal(nn_kv_seq_reserve(d, &a, i + 6, &err), TY_OK);
            rows[n++] = (nn_decode_row){&a, A_IDS[i + 5], i + 5};
        }
        assert_int_equal(nn_kv_seq_reserve(d, &b, i + 1, &err), TY_OK);
        rows[n++] = (nn_decode_row){&b, B_IDS[i], i};
        assert_int_equal(nn_decoder_step(d, rows, n, out, &err), TY_OK);
        if (n == 2)
            memcpy(got_a + (i + 5) * V, out, V * 4);
        memcpy(got_b + i * V, out + (n - 1) * V, V * 4);
    }
    close_rows(got_a, want_a, T, "A batched");
    close_rows(got_b, want_b, T, "B batched");
    /* B's bits alone and batched */
    for (uint32_t i = 0; i < T * V; i++)
        if (got_b[i] != alone[i])
            fail_msg("B's logit %u at position %u: %.9g batched, %.9g alone",
                     i % V, i / V, got_b[i], alone[i]);
    nn_kv_seq_release(d, &a);
    nn_kv_seq_release(d, &b);
    assert_int_equal(nn_decoder_free_blocks(d), 12);
    nn_decoder_free(d);
    drop(&m);
}

static void test_pool_and_refusals(void **state)
{
    model m;
    ty_err err;
    assert_int_equal(build(&m, GPT, T, TY_TASK_LANGUAGE_MODELING, &err), TY_OK);
    nn_decoder *d;
    assert_int_equal(nn_decoder_create(&m.net, 4, 3, 2, &d, &err), TY_OK);
    nn_kv_seq s = {0}, t2 = {0};
    assert_int_equal(nn_kv_seq_reserve(d, &s, 5, &err), TY_OK);
    assert_int_equal(nn_decoder_free_blocks(d), 0);
    /* full: the other sequence waits, nothing taken */
    assert_int_equal(nn_kv_seq_reserve(d, &t2, 1, &err), TY_ELIMIT);
    assert_int_equal(t2.n_blocks, 0);
    assert_int_equal(nn_kv_seq_reserve(d, &s, T + 1, &err), TY_EINVAL);
    assert_non_null(strstr(err.msg, "context"));
    float out[4 * V];
    nn_decode_row r = {&s, 1, 1}; /* position 0 comes first */
    assert_int_equal(nn_decoder_step(d, &r, 1, out, &err), TY_EINVAL);
    assert_non_null(strstr(err.msg, "next is 0"));
    r = (nn_decode_row){&s, V, 0};
    assert_int_equal(nn_decoder_step(d, &r, 1, out, &err), TY_EINVAL);
    assert_non_null(strstr(err.msg, "vocabulary"));
    assert_int_equal(s.len, 0);
    nn_decode_row rows[4];
    for (uint32_t i = 0; i < 4; i++)
        rows[i] = (nn_decode_row){&s, i, i};
    assert_int_equal(nn_decoder_step(d, rows, 4, out, &err), TY_OK);
    r = (nn_decode_row){&s, 2, 4};
    assert_int_equal(nn_decoder_step(d, &r, 1, out, &err), TY_OK);
    r = (nn_decode_row){&s, 2, 5}; /* the reserve's 3 blocks hold 6 */
    assert_int_equal(nn_decoder_step(d, &r, 1, out, &err), TY_OK);
    r = (nn_decode_row){&s, 2, 6};
    assert_int_equal(nn_decoder_step(d, &r, 1, out, &err), TY_EINVAL);
    assert_non_null(strstr(err.msg, "no block"));
    nn_kv_seq_release(d, &s);
    assert_int_equal(nn_decoder_free_blocks(d), 3);
    assert_int_equal(nn_kv_seq_reserve(d, &t2, 1, &err), TY_OK);
    nn_kv_seq_release(d, &t2);
    nn_decoder_free(d);
    drop(&m);
    /* models it cannot step */
    assert_int_equal(
        build(&m,
              "{\"layers\": [{\"type\": \"embedding\", \"dim\": 8},"
              " {\"type\": \"transformer_block\", \"heads\": 2, \"causal\": "
              "false}, {\"type\": \"lm_head\"}]}",
              T, TY_TASK_LANGUAGE_MODELING, &err),
        TY_OK);
    assert_int_equal(nn_decoder_create(&m.net, 4, 4, 4, &d, &err), TY_EINVAL);
    assert_non_null(strstr(err.msg, "not causal"));
    drop(&m);
    assert_int_equal(build(&m,
                           "{\"layers\": [{\"type\": \"dense\", \"units\": "
                           "4}, {\"type\": \"dense\", \"units\": 11}]}",
                           T, TY_TASK_CLASSIFICATION, &err),
                     TY_OK);
    assert_int_equal(nn_decoder_create(&m.net, 4, 4, 4, &d, &err), TY_EINVAL);
    assert_non_null(strstr(err.msg, "language model"));
    drop(&m);
}

/* Logits (n - from rows) of ids[from..n) for seq, after its first `from`
 * positions are in the cache: the rows in one step. */
static void feed(nn_decoder *d, nn_kv_seq *s, const uint32_t *ids,
                 uint32_t from, uint32_t n, float *out)
{
    ty_err err;
    nn_decode_row rows[T];
    for (uint32_t i = from; i < n; i++)
        rows[i - from] = (nn_decode_row){s, ids[i], i};
    assert_int_equal(nn_decoder_step(d, rows, n - from, out, &err), TY_OK);
}

/* Prefix caching: a second prompt that begins with the first's two full
 * blocks takes them (cached_tokens 2B) and its logits past them are the
 * bits of a decoder without sharing; shared blocks stay while either
 * holds them, count free once neither does, and are evicted only when
 * the pool needs them; a prompt's last block is never taken; other ids
 * do not match. */
static void test_prefix_cache(void **state)
{
    model m;
    ty_err err;
    assert_int_equal(build(&m, GPT, T, TY_TASK_LANGUAGE_MODELING, &err), TY_OK);
    /* Y: A's first 6 ids (two blocks of 3), then B's */
    uint32_t y[T];
    memcpy(y, A_IDS, 6 * sizeof *y);
    memcpy(y + 6, B_IDS + 6, 4 * sizeof *y);
    nn_decoder *d0, *d;
    assert_int_equal(nn_decoder_create(&m.net, 16, 8, 3, &d0, &err), TY_OK);
    assert_int_equal(nn_decoder_create(&m.net, 16, 8, 3, &d, &err), TY_OK);
    /* the reference: Y alone, no sharing */
    nn_kv_seq r = {0};
    float want[T * V], got[T * V];
    assert_int_equal(nn_kv_seq_reserve(d0, &r, T, &err), TY_OK);
    feed(d0, &r, y, 0, T, want);
    nn_kv_seq_release(d0, &r);
    nn_decoder_free(d0);

    /* a: A's first 8 ids as its prompt, nothing cached yet */
    nn_kv_seq a = {0}, b = {0}, c = {0};
    uint32_t cached = 99;
    assert_int_equal(
        nn_kv_seq_reserve_prefix(d, &a, A_IDS, 8, T, &cached, &err), TY_OK);
    assert_int_equal(cached, 0);
    assert_int_equal(a.len, 0);
    feed(d, &a, A_IDS, 0, 8, got);
    nn_kv_seq_publish(d, &a, A_IDS, 8); /* blocks 0 and 1 (6 of 8) */
    assert_int_equal(nn_decoder_free_blocks(d), 8 - 4);
    /* b: Y takes a's two blocks, computes the rest */
    assert_int_equal(nn_kv_seq_reserve_prefix(d, &b, y, T, T, &cached, &err),
                     TY_OK);
    assert_int_equal(cached, 6);
    assert_int_equal(b.len, 6);
    assert_int_equal(b.blocks[0], a.blocks[0]);
    assert_int_equal(b.blocks[1], a.blocks[1]);
    assert_true(b.blocks[2] != a.blocks[2]);
    assert_int_equal(nn_decoder_free_blocks(d), 8 - 6); /* 2 shared */
    /* a leaves: its own blocks come back, the shared ones stay b's */
    nn_kv_seq_release(d, &a);
    assert_int_equal(nn_decoder_free_blocks(d), 8 - 4);
    feed(d, &b, y, 6, T, got);
    for (uint32_t i = 0; i < 4 * V; i++)
        if (got[i] != want[6 * V + i])
            fail_msg("logit %u at position %u: %.9g shared, %.9g alone", i % V,
                     6 + i / V, got[i], want[6 * V + i]);
    nn_kv_seq_release(d, &b);
    /* nobody holds the two: cached, yet counted free */
    assert_int_equal(nn_decoder_free_blocks(d), 8);
    /* a prompt of exactly two blocks takes one: its last token runs */
    assert_int_equal(
        nn_kv_seq_reserve_prefix(d, &c, A_IDS, 6, 7, &cached, &err), TY_OK);
    assert_int_equal(cached, 3);
    nn_kv_seq_release(d, &c);
    /* one id other in the second block: only the first matches */
    uint32_t z[T];
    memcpy(z, A_IDS, sizeof z);
    z[4] = (z[4] + 1) % V;
    assert_int_equal(nn_kv_seq_reserve_prefix(d, &c, z, T, T, &cached, &err),
                     TY_OK);
    assert_int_equal(cached, 3);
    nn_kv_seq_release(d, &c);
    /* 4 fresh blocks come from the free ones, the cached ones stay */
    nn_kv_seq f1 = {0}, f2 = {0};
    assert_int_equal(nn_kv_seq_reserve(d, &f1, T, &err), TY_OK);
    assert_int_equal(
        nn_kv_seq_reserve_prefix(d, &c, A_IDS, 7, 7, &cached, &err), TY_OK);
    assert_int_equal(cached, 6);
    nn_kv_seq_release(d, &c);
    nn_kv_seq_release(d, &f1);
    /* the whole pool: the cached blocks are evicted for it */
    assert_int_equal(nn_kv_seq_reserve(d, &f1, T, &err), TY_OK);
    assert_int_equal(nn_kv_seq_reserve(d, &f2, T, &err), TY_OK);
    assert_int_equal(nn_decoder_free_blocks(d), 0);
    assert_int_equal(nn_kv_seq_reserve(d, &c, 1, &err), TY_ELIMIT);
    nn_kv_seq_release(d, &f1);
    nn_kv_seq_release(d, &f2);
    assert_int_equal(nn_decoder_free_blocks(d), 8);
    assert_int_equal(
        nn_kv_seq_reserve_prefix(d, &c, A_IDS, 7, 7, &cached, &err), TY_OK);
    assert_int_equal(cached, 0);
    nn_kv_seq_release(d, &c);
    /* a held prefix does not count as free for the rest */
    assert_int_equal(
        nn_kv_seq_reserve_prefix(d, &a, A_IDS, 8, T, &cached, &err), TY_OK);
    feed(d, &a, A_IDS, 0, 8, got);
    nn_kv_seq_publish(d, &a, A_IDS, 8);
    nn_kv_seq_release(d, &a); /* two cached blocks, six free */
    assert_int_equal(nn_kv_seq_reserve(d, &f1, 9, &err), TY_OK); /* 3 */
    assert_int_equal(nn_kv_seq_reserve(d, &f2, 9, &err), TY_OK); /* 3 */
    /* b would take the 2 cached and needs 2 more: none left */
    assert_int_equal(nn_kv_seq_reserve_prefix(d, &b, y, T, T, &cached, &err),
                     TY_ELIMIT);
    assert_int_equal(b.n_blocks, 0);
    assert_int_equal(nn_decoder_free_blocks(d), 2);
    nn_kv_seq_release(d, &b);
    nn_kv_seq_release(d, &f1);
    nn_kv_seq_release(d, &f2);
    assert_int_equal(nn_decoder_free_blocks(d), 8);
    nn_decoder_free(d);
    drop(&m);
}

/* rows_gemm against a double reference, and each row's bits alone (n = 1)
 * equal to its bits among n rows, for row counts that fill the 4-row
 * tiles and leave each remainder, odd widths (a 1-column tail) and k past
 * the last whole vector; beta 0 ignores a NaN in out, beta 1 adds. */
static void test_rows_gemm_batch_invariant(void **state)
{
    (void)state;
    enum { N = 11, U = 13, K = 37 };
    float x[N * K], w[U * K], bias[N * U];
    ty_rng rng;
    ty_rng_seed(&rng, 5, 1);
    for (int i = 0; i < N * K; i++)
        x[i] = 2.0f * ty_rng_uniform(&rng) - 1.0f;
    for (int i = 0; i < U * K; i++)
        w[i] = 2.0f * ty_rng_uniform(&rng) - 1.0f;
    for (int i = 0; i < N * U; i++)
        bias[i] = ty_rng_uniform(&rng);
    nn_pool *pool = nn_pool_create(3);
    assert_non_null(pool);
    const nn_exec with_pool = {.pool = pool};
    const nn_exec *execs[2] = {NULL, &with_pool};
    float alone[N * U], got[N * U];
    for (int e = 0; e < 2; e++)
        for (int beta = 0; beta < 2; beta++) {
            for (int r = 0; r < N; r++) {
                float *o = alone + r * U;
                for (int j = 0; j < U; j++)
                    o[j] = beta ? bias[r * U + j] : NAN;
                nn_backend_cpu.rows_gemm(execs[e], o, x + r * K, w, 1, U, K,
                                         (float)beta);
                for (int j = 0; j < U; j++) {
                    double want = beta ? bias[r * U + j] : 0.0;
                    for (int i = 0; i < K; i++)
                        want += (double)x[r * K + i] * w[j * K + i];
                    if (fabs(o[j] - want) > 1e-5 * (1 + fabs(want)))
                        fail_msg("row %d col %d: %.9g, want %.9g", r, j,
                                 (double)o[j], want);
                }
            }
            for (uint32_t n = 1; n <= N; n++) {
                for (uint32_t i = 0; i < n * U; i++)
                    got[i] = beta ? bias[i] : NAN;
                nn_backend_cpu.rows_gemm(execs[e], got, x, w, n, U, K,
                                         (float)beta);
                if (memcmp(got, alone, n * U * sizeof *got))
                    fail_msg("rows 0..%u: not the bits each row gets alone "
                             "(beta %d, %s)",
                             n - 1, beta, e ? "threads" : "no pool");
            }
        }
    nn_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefill_and_steps),
        cmocka_unit_test(test_two_sequences_and_batch_invariance),
        cmocka_unit_test(test_pool_and_refusals),
        cmocka_unit_test(test_prefix_cache),
        cmocka_unit_test(test_rows_gemm_batch_invariant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
