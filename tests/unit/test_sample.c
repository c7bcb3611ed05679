/* test_sample.c - the next token from logits (models/sample.h): greedy and
 * its ties, temperature's effect on the distribution, top-k (k = 1 is
 * greedy, ties at the k-th value kept, k past the vocabulary), top-p's
 * exact kept set on hand-made distributions (ties by id), seeded draws
 * reproducible and independent of other sequences, draw frequencies
 * against the expected distribution (a chi-square statistic over a fixed
 * seed's draws, so it cannot flake), logprobs and top alternatives, the
 * parameters' validation and bad logits; and 400 random rows (ties,
 * -inf, any parameters) against the definition written out naively:
 * the same draw, kept set, order, probabilities and alternatives. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/sample.h"
#include "testutil.h"

#define VMAX 4096

static uint32_t scratch[VMAX];

static sample_params params(float t, int32_t k, float p)
{
    return (sample_params){.temperature = t, .top_k = k, .top_p = p};
}

static uint32_t next_token(const sample_params *p, sample_state *st,
                           const float *logits, uint32_t v, float *logprob)
{
    sample_logprob out = {0};
    ty_err err = {0};
    sample_logprobs lp = {0};
    assert_int_equal(sample_next(p, st, logits, v, scratch, &out,
                                 logprob ? &lp : NULL, &err),
                     TY_OK);
    if (!logprob) {
        assert_true(isnan(out.logprob));
        return out.token;
    }
    *logprob = out.logprob;
    assert_int_equal(lp.n_top_out, 0);
    /* Greedy without logprobs: the same token. */
    if (p->temperature == 0) {
        sample_logprob bare;
        assert_int_equal(
            sample_next(p, st, logits, v, scratch, &bare, NULL, &err), TY_OK);
        assert_int_equal(bare.token, out.token);
    }
    return out.token;
}

/* The kept set and probabilities; ids into ids[]. */
static uint32_t dist(const sample_params *p, const float *logits, uint32_t v,
                     uint32_t *ids, float *probs)
{
    uint32_t n = 0;
    ty_err err = {0};
    assert_int_equal(sample_dist(p, logits, v, scratch, probs, &n, &err),
                     TY_OK);
    memcpy(ids, scratch, n * sizeof *ids);
    return n;
}

/* ---- greedy ---- */

static void test_greedy(void **state)
{
    (void)state;
    const float l[] = {1.0f, 3.0f, 2.0f, -5.0f};
    sample_params p = params(0, 0, 1);
    sample_state st;
    sample_state_init(&st, 7, 0);
    sample_state before = st;
    float lp;
    assert_int_equal(next_token(&p, &st, l, 4, &lp), 1);
    double z = exp(1.0) + exp(3.0) + exp(2.0) + exp(-5.0);
    assert_float_equal(lp, 3.0 - log(z), 1e-6);
    /* Greedy draws nothing. */
    assert_memory_equal(&st, &before, sizeof st);
    /* top-k and top-p do not change greedy's choice. */
    p = params(0, 2, 0.1f);
    assert_int_equal(next_token(&p, &st, l, 4, NULL), 1);
}

static void test_greedy_ties_lowest_id(void **state)
{
    (void)state;
    const float l[] = {1.0f, 5.0f, -INFINITY, 5.0f, 5.0f};
    sample_params p = params(0, 0, 1);
    sample_state st;
    sample_state_init(&st, 1, 0);
    float lp;
    assert_int_equal(next_token(&p, &st, l, 5, &lp), 1);
    assert_float_equal(lp, -log(exp(-4.0) + 3.0), 1e-6);
    const float one[] = {-3.0f};
    assert_int_equal(next_token(&p, &st, one, 1, &lp), 0);
    assert_float_equal(lp, 0.0, 1e-7);
}

/* ---- temperature ---- */

static void test_temperature(void **state)
{
    (void)state;
    const float l[] = {0.0f, 1.0f};
    uint32_t ids[2];
    float pr[2];
    const float temps[] = {0.25f, 0.5f, 1.0f, 2.0f, 10.0f};
    double prev = 2;
    for (size_t i = 0; i < TY_ARRAY_LEN(temps); i++) {
        sample_params p = params(temps[i], 0, 1);
        assert_int_equal(dist(&p, l, 2, ids, pr), 2);
        assert_int_equal(ids[0], 1);
        double want = 1.0 / (1.0 + exp(-1.0 / temps[i]));
        assert_float_equal(pr[0], want, 1e-6);
        assert_float_equal(pr[1], 1.0 - want, 1e-6);
        /* A higher temperature flattens the distribution. */
        assert_true(pr[0] < prev);
        prev = pr[0];
    }
    /* A temperature so small that x / T overflows: a point mass, not NaN. */
    sample_params p = params(1e-30f, 0, 1);
    assert_int_equal(dist(&p, l, 2, ids, pr), 2);
    assert_int_equal(ids[0], 1);
    assert_float_equal(pr[0], 1.0, 0);
    assert_float_equal(pr[1], 0.0, 0);
    sample_state st;
    sample_state_init(&st, 3, 0);
    float lp;
    for (int i = 0; i < 50; i++) {
        assert_int_equal(next_token(&p, &st, l, 2, &lp), 1);
        assert_float_equal(lp, 0.0, 0);
    }
}

/* ---- top-k ---- */

static void test_top_k_one_is_greedy(void **state)
{
    (void)state;
    float l[1000];
    tu_fill_uniform(l, 1000, 11, 0, 4.0f);
    sample_params g = params(0, 0, 1), k1 = params(1.5f, 1, 1);
    sample_state st;
    sample_state_init(&st, 99, 0);
    uint32_t want = next_token(&g, &st, l, 1000, NULL);
    for (int i = 0; i < 200; i++) {
        float lp;
        assert_int_equal(next_token(&k1, &st, l, 1000, &lp), want);
        assert_float_equal(lp, 0.0, 0);
    }
    assert_int_equal(st.draws, 200);
}

static void test_top_k_sets(void **state)
{
    (void)state;
    uint32_t ids[8];
    float pr[8];
    /* The three largest of eight, most likely first. */
    const float l[] = {0.1f, 2.0f, -1.0f, 3.0f, 0.5f, 2.5f, -INFINITY, 0.0f};
    sample_params p = params(1, 3, 1);
    assert_int_equal(dist(&p, l, 8, ids, pr), 3);
    assert_int_equal(ids[0], 3);
    assert_int_equal(ids[1], 5);
    assert_int_equal(ids[2], 1);
    double z = exp(3.0) + exp(2.5) + exp(2.0);
    assert_float_equal(pr[0], exp(3.0) / z, 1e-6);
    assert_float_equal(pr[2], exp(2.0) / z, 1e-6);
    /* Ties at the k-th value are all kept (HF's threshold), ordered by id. */
    const float t[] = {3.0f, 1.0f, 3.0f, 2.0f, 3.0f};
    p = params(1, 1, 1);
    assert_int_equal(dist(&p, t, 5, ids, pr), 3);
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 2);
    assert_int_equal(ids[2], 4);
    assert_float_equal(pr[1], 1.0 / 3, 1e-6);
    /* k past the vocabulary keeps every token above -inf; k = 0 too. */
    p = params(1, 100, 1);
    assert_int_equal(dist(&p, l, 8, ids, pr), 7);
    p = params(1, 0, 1);
    assert_int_equal(dist(&p, l, 8, ids, pr), 7);
    /* k over the count of finite logits: the -inf ones are still out. */
    p = params(1, 7, 1);
    assert_int_equal(dist(&p, l, 8, ids, pr), 7);
    for (uint32_t i = 0; i < 7; i++)
        assert_int_not_equal(ids[i], 6);
}

/* ---- top-p ---- */

static void test_top_p_exact_set(void **state)
{
    (void)state;
    /* Probabilities 0.05 0.5 0.15 0.1 0.2 at ids 0..4. */
    const double q[] = {0.05, 0.5, 0.15, 0.1, 0.2};
    float l[5];
    for (int i = 0; i < 5; i++)
        l[i] = (float)log(q[i]);
    uint32_t ids[5];
    float pr[5];
    struct {
        float top_p;
        uint32_t n;
        uint32_t ids[5];
        double mass;
    } cases[] = {
        {0.45f, 1, {1}, 0.5},
        {0.6f, 2, {1, 4}, 0.7},
        {0.75f, 3, {1, 4, 2}, 0.85},
        {0.9f, 4, {1, 4, 2, 3}, 0.95},
        {0.99f, 5, {1, 4, 2, 3, 0}, 1.0},
        {1e-6f, 1, {1}, 0.5},
    };
    for (size_t c = 0; c < TY_ARRAY_LEN(cases); c++) {
        sample_params p = params(1, 0, cases[c].top_p);
        assert_int_equal(dist(&p, l, 5, ids, pr), cases[c].n);
        for (uint32_t j = 0; j < cases[c].n; j++) {
            assert_int_equal(ids[j], cases[c].ids[j]);
            assert_float_equal(pr[j], q[ids[j]] / cases[c].mass, 1e-6);
        }
    }
    /* Equal logits: exactly half the mass is reached by ids 0 and 1 (0.25
     * each, exact in binary), so top_p = 0.5 keeps those two, not others. */
    const float eq[] = {1.0f, 1.0f, 1.0f, 1.0f};
    sample_params p = params(1, 0, 0.5f);
    assert_int_equal(dist(&p, eq, 4, ids, pr), 2);
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 1);
    assert_float_equal(pr[0], 0.5, 0);
    /* After top-k: the mass is the renormalized top-k's. */
    p = params(1, 3, 0.8f); /* 0.5 0.2 0.15 -> 0.588 0.235 0.176 */
    assert_int_equal(dist(&p, l, 5, ids, pr), 2);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 4);
    assert_float_equal(pr[0], 0.5 / 0.7, 1e-6);
}

/* ---- seeds ---- */

static void test_same_seed_same_draws(void **state)
{
    (void)state;
    float l[50];
    tu_fill_uniform(l, 50, 5, 0, 2.0f);
    float other[50];
    tu_fill_uniform(other, 50, 6, 0, 2.0f);
    sample_params p = params(0.9f, 20, 0.95f);
    sample_state a, b, c, d, noise;
    sample_state_init(&a, 1234, 0);
    sample_state_init(&b, 1234, 0);
    sample_state_init(&c, 1235, 0);
    sample_state_init(&d, 1234, 1);
    sample_state_init(&noise, 1234, 0);
    uint32_t seq_a[300];
    int differ_c = 0, differ_d = 0, distinct = 0;
    for (int i = 0; i < 300; i++) {
        seq_a[i] = next_token(&p, &a, l, 50, NULL);
        /* b interleaves with another sequence's draws, on other logits
         * and other parameters, through the same scratch. */
        sample_params q = params(1.3f, 0, 1);
        next_token(&q, &noise, other, 50, NULL);
        assert_int_equal(next_token(&p, &b, l, 50, NULL), seq_a[i]);
        differ_c += next_token(&p, &c, l, 50, NULL) != seq_a[i];
        differ_d += next_token(&p, &d, l, 50, NULL) != seq_a[i];
        distinct += i > 0 && seq_a[i] != seq_a[i - 1];
    }
    assert_true(differ_c > 100); /* another seed, another sequence */
    assert_true(differ_d > 100); /* another stream, another sequence */
    assert_true(distinct > 100); /* the draws do move */
    assert_int_equal(a.draws, 300);
    /* A checkpointed state resumes the same. */
    sample_state e = a, f = a;
    for (int i = 0; i < 20; i++)
        assert_int_equal(next_token(&p, &e, l, 50, NULL),
                         next_token(&p, &f, l, 50, NULL));
}

/* ---- frequencies ---- */

static void test_draw_frequencies(void **state)
{
    (void)state;
    /* q at ids permuted so the walk's order is not the id order; top-k 6
     * drops 0.02 and 0.01, then top-p 0.9 over the six (renormalized by
     * 0.97: 0.309 0.258 0.206 0.103 0.082 0.041; mass before the fifth
     * 0.876 < 0.9, before the sixth 0.959) keeps five, mass 0.93. */
    const double q[] = {0.3, 0.25, 0.2, 0.1, 0.08, 0.04, 0.02, 0.01};
    const uint32_t at[] = {5, 2, 7, 0, 3, 6, 1, 4};
    float l[8];
    for (int i = 0; i < 8; i++)
        l[at[i]] = (float)log(q[i]);
    sample_params p = params(1, 6, 0.9f);
    sample_state st;
    sample_state_init(&st, 20260101, 0);
    enum { N = 200000 };
    uint32_t count[8] = {0};
    for (int i = 0; i < N; i++) {
        float lp;
        uint32_t t = next_token(&p, &st, l, 8, &lp);
        count[t]++;
        for (int j = 0; j < 8; j++)
            if (at[j] == t)
                assert_float_equal(lp, log(q[j] / 0.93), 1e-5);
    }
    double chi2 = 0;
    for (int j = 0; j < 5; j++) {
        double e = N * q[j] / 0.93;
        chi2 += (count[at[j]] - e) * (count[at[j]] - e) / e;
    }
    for (int j = 5; j < 8; j++)
        assert_int_equal(count[at[j]], 0);
    /* 4 degrees of freedom: 18.47 is the 0.999 quantile. A draw that
     * favoured one token by 1% of its mass would be far over it. */
    print_message("chi-square %.2f over %d draws (df 4)\n", chi2, N);
    assert_true(chi2 < 18.47);
}

/* ---- logprobs and alternatives ---- */

static sample_logprobs *lpn(sample_logprobs *lp, sample_logprob *top,
                            uint32_t n)
{
    *lp = (sample_logprobs){.top = top, .n_top = n, .n_top_out = 99};
    return lp;
}

static void test_logprobs_and_top(void **state)
{
    (void)state;
    const double q[] = {0.05, 0.5, 0.15, 0.1, 0.2};
    float l[5];
    for (int i = 0; i < 5; i++)
        l[i] = (float)(2.0 * log(q[i]));  /* T = 2 undoes the factor */
    sample_params p = params(2, 0, 0.9f); /* keeps 1 4 2 3, mass 0.95 */
    sample_state st;
    sample_state_init(&st, 8, 0);
    sample_logprob out, top[8];
    sample_logprobs lp;
    ty_err err = {0};
    for (int i = 0; i < 40; i++) {
        assert_int_equal(
            sample_next(&p, &st, l, 5, scratch, &out, lpn(&lp, top, 3), &err),
            TY_OK);
        assert_float_equal(out.logprob, log(q[out.token] / 0.95), 1e-5);
        assert_int_not_equal(out.token, 0);
        assert_int_equal(lp.n_top_out, 3);
        const uint32_t want[] = {1, 4, 2};
        for (int j = 0; j < 3; j++) {
            assert_int_equal(top[j].token, want[j]);
            assert_float_equal(top[j].logprob, log(q[want[j]] / 0.95), 1e-5);
        }
    }
    /* More alternatives asked than kept: only the kept. */
    assert_int_equal(
        sample_next(&p, &st, l, 5, scratch, &out, lpn(&lp, top, 8), &err),
        TY_OK);
    assert_int_equal(lp.n_top_out, 4);
    assert_int_equal(top[3].token, 3);
    /* Without top-p the walk pops past the draw for the alternatives. */
    p = params(2, 0, 1);
    assert_int_equal(
        sample_next(&p, &st, l, 5, scratch, &out, lpn(&lp, top, 5), &err),
        TY_OK);
    assert_int_equal(lp.n_top_out, 5);
    assert_int_equal(top[4].token, 0);
    assert_float_equal(top[4].logprob, log(0.05), 1e-5);
    /* Greedy: the raw softmax's logprobs (temperature 1, unfiltered). */
    p = params(0, 1, 0.1f);
    assert_int_equal(
        sample_next(&p, &st, l, 5, scratch, &out, lpn(&lp, top, 2), &err),
        TY_OK);
    double z = 0;
    for (int i = 0; i < 5; i++)
        z += q[i] * q[i];
    assert_int_equal(out.token, 1);
    assert_float_equal(out.logprob, log(0.25 / z), 1e-5);
    assert_int_equal(lp.n_top_out, 2);
    assert_int_equal(top[1].token, 4);
    assert_float_equal(top[1].logprob, log(0.04 / z), 1e-5);
}

/* ---- validation and bad logits ---- */

static void expect_invalid(sample_params p, const char *field)
{
    ty_err err = {0};
    assert_int_equal(sample_params_check(&p, &err), TY_EINVAL);
    assert_string_equal(err.field, field);
    assert_non_null(strstr(err.msg, field));
}

static void test_validation(void **state)
{
    (void)state;
    expect_invalid(params(-0.5f, 0, 1), "temperature");
    expect_invalid(params(NAN, 0, 1), "temperature");
    expect_invalid(params(INFINITY, 0, 1), "temperature");
    expect_invalid(params(1, 0, 0), "top_p");
    expect_invalid(params(1, 0, -0.1f), "top_p");
    expect_invalid(params(1, 0, 1.01f), "top_p");
    expect_invalid(params(1, 0, NAN), "top_p");
    expect_invalid(params(1, -1, 1), "top_k");
    ty_err err = {0};
    sample_params ok[] = {params(0, 0, 1), params(1e-3f, 1, 1e-4f),
                          params(100, 1 << 30, 1), SAMPLE_PARAMS_DEFAULT};
    for (size_t i = 0; i < TY_ARRAY_LEN(ok); i++)
        assert_int_equal(sample_params_check(&ok[i], &err), TY_OK);
    assert_string_equal(err.msg, "");
    /* top_k past the vocabulary is clamped, not an error. */
    const float l[] = {0.0f, 1.0f};
    sample_params big = params(1, 1 << 30, 1);
    uint32_t ids[2];
    float pr[2];
    assert_int_equal(dist(&big, l, 2, ids, pr), 2);
}

static void test_bad_logits(void **state)
{
    (void)state;
    sample_params p = params(1, 0, 1);
    sample_state st;
    sample_state_init(&st, 1, 0);
    sample_logprob out = {77, 1.0f};
    ty_err err = {0};
    const float nan_row[] = {0.0f, NAN, 1.0f};
    assert_int_equal(
        sample_next(&p, &st, nan_row, 3, scratch, &out, NULL, &err), TY_EINVAL);
    assert_non_null(strstr(err.msg, "NaN"));
    const float inf_row[] = {0.0f, INFINITY};
    assert_int_equal(
        sample_next(&p, &st, inf_row, 2, scratch, &out, NULL, &err), TY_EINVAL);
    const float none[] = {-INFINITY, -INFINITY};
    assert_int_equal(sample_next(&p, &st, none, 2, scratch, &out, NULL, &err),
                     TY_EINVAL);
    assert_int_equal(out.token, 77);
    assert_int_equal(st.draws, 0);
    /* -inf tokens are never drawn, at any temperature. */
    const float masked[] = {-INFINITY, 0.0f, -INFINITY, 0.0f};
    p = params(50, 0, 1);
    for (int i = 0; i < 200; i++) {
        uint32_t t = next_token(&p, &st, masked, 4, NULL);
        assert_true(t == 1 || t == 3);
    }
}

/* A large vocabulary, top-k small: the same as the full distribution cut
 * by hand. */
static void test_large_vocab_top_k(void **state)
{
    (void)state;
    enum { V = 4000, K = 40 };
    float l[V], sorted[V];
    tu_fill_uniform(l, V, 21, 0, 6.0f);
    sample_params full = params(0.7f, 0, 1), k = params(0.7f, K, 1);
    uint32_t ids_full[V], ids_k[V];
    static float pr_full[V], pr_k[V];
    assert_int_equal(dist(&full, l, V, ids_full, pr_full), V);
    assert_int_equal(dist(&k, l, V, ids_k, pr_k), K);
    double mass = 0;
    for (int i = 0; i < K; i++)
        mass += pr_full[i];
    for (int i = 0; i < K; i++) {
        assert_int_equal(ids_k[i], ids_full[i]);
        assert_float_equal(pr_k[i], pr_full[i] / mass, 1e-6);
    }
    for (int i = 0; i < V; i++)
        sorted[i] = l[ids_full[i]];
    for (int i = 1; i < V; i++)
        assert_true(sorted[i - 1] >= sorted[i]);
}

/* ---- against a naive sampler ---- */

static const float *naive_l;

static int naive_cmp(const void *pa, const void *pb)
{
    uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
    if (naive_l[a] != naive_l[b])
        return naive_l[a] > naive_l[b] ? -1 : 1;
    return (a > b) - (a < b);
}

/* The definition, written out: sort every finite token (logit down, id
 * up), top-k's threshold, exp in double, top-p token by token. Returns
 * the kept count: their ids in order into ids, their unnormalized masses
 * into e, the kept mass into *mass. */
static uint32_t naive(const sample_params *p, const float *l, uint32_t v,
                      uint32_t *ids, double *e, double *mass)
{
    uint32_t m = 0;
    for (uint32_t i = 0; i < v; i++)
        if (l[i] > -INFINITY)
            ids[m++] = i;
    naive_l = l;
    qsort(ids, m, sizeof *ids, naive_cmp);
    if (p->top_k > 0 && (uint32_t)p->top_k < m) {
        float kth = l[ids[p->top_k - 1]];
        uint32_t k = (uint32_t)p->top_k;
        while (k < m && l[ids[k]] == kth)
            k++;
        m = k;
    }
    double max = l[ids[0]], z = 0;
    for (uint32_t j = 0; j < m; j++)
        z += e[j] = exp(((double)l[ids[j]] - max) / p->temperature);
    *mass = z;
    if (!(p->top_p < 1))
        return m;
    double cum = 0;
    uint32_t kept = 0;
    while (kept < m && cum < (double)p->top_p * z)
        cum += e[kept++];
    *mass = cum;
    return kept;
}

/* The inverse CDF over the naive kept tokens in order. */
static uint32_t naive_draw(const uint32_t *ids, const double *e, uint32_t kept,
                           double mass, double u)
{
    double target = u * mass, cum = 0;
    for (uint32_t j = 0; j < kept; j++) {
        cum += e[j];
        if (cum > target)
            return ids[j];
    }
    return ids[kept - 1];
}

static void test_matches_naive(void **state)
{
    (void)state;
    static float l[3000], pr[3000];
    static uint32_t ids[3000], nids[3000];
    static double ne[3000];
    ty_rng r;
    ty_rng_seed(&r, 4242, 0);
    for (int row = 0; row < 400; row++) {
        uint32_t v = 1 + ty_rng_below(&r, 3000);
        float scale = 0.1f + 20.0f * ty_rng_uniform(&r);
        int rounded = ty_rng_below(&r, 4) == 0; /* many ties */
        for (uint32_t i = 0; i < v; i++) {
            l[i] = ty_rng_normal(&r) * scale;
            if (rounded)
                l[i] = roundf(l[i]);
            if (ty_rng_below(&r, 10) == 0)
                l[i] = -INFINITY;
        }
        l[ty_rng_below(&r, v)] = 1.0f; /* one finite at least */
        sample_params p = params(
            0.05f + 3.0f * ty_rng_uniform(&r),
            ty_rng_below(&r, 2) ? 0 : (int32_t)(1 + ty_rng_below(&r, v + 5)),
            ty_rng_below(&r, 3) ? 0.01f + 0.98f * ty_rng_uniform(&r) : 1.0f);
        double mass;
        uint32_t nk = naive(&p, l, v, nids, ne, &mass);
        sample_state st;
        sample_state_init(&st, (uint64_t)row, 0);
        for (int draw = 0; draw < 50; draw++) {
            sample_state peek = st;
            double u = (double)(ty_rng_u64(&peek.rng) >> 11) * 0x1.0p-53;
            sample_logprob out, top[4];
            sample_logprobs lp = {.top = top, .n_top = 4};
            ty_err err = {0};
            assert_int_equal(
                sample_next(&p, &st, l, v, scratch, &out, &lp, &err), TY_OK);
            assert_int_equal(out.token, naive_draw(nids, ne, nk, mass, u));
            assert_int_equal(lp.n_top_out, nk < 4 ? nk : 4);
            for (uint32_t j = 0; j < lp.n_top_out; j++)
                assert_int_equal(top[j].token, nids[j]);
            for (uint32_t j = 0; j < nk; j++)
                if (nids[j] == out.token)
                    assert_float_equal(out.logprob, log(ne[j] / mass), 1e-5);
        }
        uint32_t n = dist(&p, l, v, ids, pr);
        assert_int_equal(n, nk);
        for (uint32_t j = 0; j < n; j++) {
            assert_int_equal(ids[j], nids[j]);
            double want = ne[j] / mass;
            assert_float_equal(pr[j], want, 1e-6 + 1e-5 * want);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_greedy_ties_lowest_id),
        cmocka_unit_test(test_temperature),
        cmocka_unit_test(test_top_k_one_is_greedy),
        cmocka_unit_test(test_top_k_sets),
        cmocka_unit_test(test_top_p_exact_set),
        cmocka_unit_test(test_same_seed_same_draws),
        cmocka_unit_test(test_draw_frequencies),
        cmocka_unit_test(test_logprobs_and_top),
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_bad_logits),
        cmocka_unit_test(test_large_vocab_top_k),
        cmocka_unit_test(test_matches_naive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
