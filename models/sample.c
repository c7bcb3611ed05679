/*
 * sample.c - the next token from one row of logits (sample.h).
 *
 * Every call works the same way, in the caller's scratch of v ids:
 *   prepare: top-k's threshold by a min-heap of k ids, the kept ids
 *            gathered into idx[0..m), Z = the sum of exp((l - max) / T)
 *            over them, in double (the largest term is 1, and no
 *            temperature overflows it);
 *   walk:    idx[0..m) made a max-heap (most likely at the root, ties by
 *            lower id) and popped one token at a time, each popped token
 *            parked at the heap's end, so idx[m-1], idx[m-2], ... is the
 *            order of the draw's walk. Only as many tokens are popped as
 *            top-p's cut, the draw and the top-N alternatives need.
 * The order is by the logits themselves (dividing by T is monotonic, and
 * doing it in float first could round two logits to one value), then by
 * id: a total order, so the result never depends on how ties happened to
 * sit in memory.
 */
#include "models/sample.h"

#include <math.h>
#include <string.h>

ty_status sample_params_check(const sample_params *p, ty_err *err)
{
    if (isnan(p->temperature) || isinf(p->temperature) || p->temperature < 0)
        return ty_fail(err, TY_EINVAL, "temperature",
                       "temperature must be a finite number >= 0 (0 is "
                       "greedy decoding), not %g",
                       (double)p->temperature);
    if (isnan(p->top_p) || !(p->top_p > 0) || p->top_p > 1)
        return ty_fail(err, TY_EINVAL, "top_p",
                       "top_p must be in (0, 1] (1 keeps every token), not %g",
                       (double)p->top_p);
    if (p->top_k < 0)
        return ty_fail(err, TY_EINVAL, "top_k",
                       "top_k must be 0 (off) or a positive number of "
                       "tokens, not %d",
                       (int)p->top_k);
    return TY_OK;
}

void sample_state_init(sample_state *st, uint64_t seed, uint64_t stream)
{
    ty_rng_seed(&st->rng, seed, stream);
    st->draws = 0;
}

/* A uniform double in [0, 1) with 53 random bits. */
static double draw_uniform(sample_state *st)
{
    st->draws++;
    return (double)(ty_rng_u64(&st->rng) >> 11) * 0x1.0p-53;
}

/* Token a comes before token b in the walk: more likely, or as likely and
 * a lower id. */
static inline int before(const float *w, uint32_t a, uint32_t b)
{
    return w[a] > w[b] || (w[a] == w[b] && a < b);
}

/* Restores the heap property below position i of idx[0..n): the root is
 * the token that comes first (max_first) or last (!max_first). */
static void sift_down(uint32_t *idx, uint32_t n, uint32_t i, const float *w,
                      int max_first)
{
    uint32_t t = idx[i];
    for (;;) {
        uint64_t c = 2 * (uint64_t)i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && (max_first ? before(w, idx[c + 1], idx[c])
                                    : before(w, idx[c], idx[c + 1])))
            c++;
        if (!(max_first ? before(w, idx[c], t) : before(w, t, idx[c])))
            break;
        idx[i] = idx[c];
        i = (uint32_t)c;
    }
    idx[i] = t;
}

static void heapify(uint32_t *idx, uint32_t n, const float *w, int max_first)
{
    for (uint32_t i = n / 2; i-- > 0;)
        sift_down(idx, n, i, w, max_first);
}

/* The walk's state: the heap idx[0..heap) and the tokens popped so far,
 * idx[heap..m) (the first popped at m - 1). */
typedef struct {
    const float *w; /* the logits */
    uint32_t *idx;
    uint32_t m, heap;
    double max, t; /* the largest logit, the temperature */
    double z;      /* the sum of exp((w - max) / t) over the m kept tokens */
} walk;

static uint32_t walk_popped(const walk *k) { return k->m - k->heap; }

/* The j-th token of the walk's order (j < walk_popped). */
static uint32_t walk_at(const walk *k, uint32_t j)
{
    return k->idx[k->m - 1 - j];
}

/* Pops the next token; 0 when none is left. */
static int walk_pop(walk *k)
{
    if (!k->heap)
        return 0;
    uint32_t top = k->idx[0];
    k->heap--;
    k->idx[0] = k->idx[k->heap];
    k->idx[k->heap] = top;
    if (k->heap > 1)
        sift_down(k->idx, k->heap, 0, k->w, 1);
    return 1;
}

/* A token's scaled logit, (w - max) / t: at most 0. */
static double walk_x(const walk *k, uint32_t token)
{
    return ((double)k->w[token] - k->max) / k->t;
}

static double walk_prob(const walk *k, uint32_t token)
{
    return exp(walk_x(k, token)) / k->z;
}

/* Gathers the kept ids and Z, and heapifies them. greedy: the raw
 * distribution (temperature 1, nothing filtered). TY_EINVAL on a NaN or
 * +inf logit or none above -inf. */
static ty_status prepare(const sample_params *p, int greedy, const float *w,
                         uint32_t v, uint32_t *idx, walk *k, ty_err *err)
{
    float max = -INFINITY;
    for (uint32_t i = 0; i < v; i++) {
        float l = w[i];
        if (isnan(l) || l == INFINITY)
            return ty_fail(err, TY_EINVAL, NULL,
                           "the model's logits hold %s at token %u",
                           isnan(l) ? "NaN" : "+inf", i);
        if (l > max)
            max = l;
    }
    if (max == -INFINITY)
        return ty_fail(err, TY_EINVAL, NULL,
                       "every token's logit is -inf: nothing can be chosen");
    *k = (walk){.w = w,
                .idx = idx,
                .max = max,
                .t = greedy ? 1.0 : (double)p->temperature};

    uint32_t kk = greedy || p->top_k <= 0 ? 0 : (uint32_t)p->top_k;
    float thresh = -INFINITY;
    if (kk > 0 && kk < v) {
        /* The k best ids in a heap whose root is the worst of them. */
        uint32_t *h = idx;
        for (uint32_t i = 0; i < kk; i++)
            h[i] = i;
        heapify(h, kk, w, 0);
        for (uint32_t i = kk; i < v; i++)
            if (before(w, i, h[0])) {
                h[0] = i;
                sift_down(h, kk, 0, w, 0);
            }
        thresh = w[h[0]];
    }
    uint32_t m = 0;
    double z = 0;
    for (uint32_t i = 0; i < v; i++)
        if (w[i] > -INFINITY && w[i] >= thresh) {
            idx[m++] = i;
            z += exp(walk_x(k, i));
        }
    heapify(idx, m, w, 1);
    k->m = k->heap = m;
    k->z = z;
    return TY_OK;
}

/* Pops top-p's kept run: the tokens whose preceding mass is below top_p.
 * Returns the kept mass (1 when top_p is off; nothing is popped then). */
static double walk_top_p(walk *k, float top_p)
{
    if (!(top_p < 1))
        return 1.0;
    double cum = 0;
    while (cum < (double)top_p && walk_pop(k))
        cum += walk_prob(k, walk_at(k, walk_popped(k) - 1));
    /* What the walk parked beyond the cut is no longer drawable. */
    k->m = k->m - k->heap;
    k->idx += k->heap;
    k->heap = 0;
    return cum;
}

static void fill_top(walk *k, double log_norm, sample_logprob *top,
                     uint32_t n_top, uint32_t *n_top_out)
{
    while (walk_popped(k) < n_top && walk_pop(k))
        ;
    uint32_t n = walk_popped(k) < n_top ? walk_popped(k) : n_top;
    for (uint32_t j = 0; j < n; j++) {
        uint32_t t = walk_at(k, j);
        top[j] = (sample_logprob){t, (float)(walk_x(k, t) - log_norm)};
    }
    if (n_top_out)
        *n_top_out = n;
}

ty_status sample_next(const sample_params *p, sample_state *st,
                      const float *logits, uint32_t v, uint32_t *scratch,
                      sample_logprob *out, sample_logprob *top, uint32_t n_top,
                      uint32_t *n_top_out, ty_err *err)
{
    int greedy = p->temperature == 0;
    walk k;
    ty_status s = prepare(p, greedy, logits, v, scratch, &k, err);
    if (s != TY_OK)
        return s;
    uint32_t tok;
    double mass = 1.0;
    if (greedy) {
        /* The first of the largest logits. */
        tok = 0;
        while (logits[tok] != k.max)
            tok++;
    } else {
        mass = walk_top_p(&k, p->top_p);
        /* Inverse CDF over the kept tokens in the walk's order; rounding
         * that leaves the target beyond the sum picks the last one. */
        double target = draw_uniform(st) * mass, cum = 0;
        uint32_t j = 0;
        for (;;) {
            if (j == walk_popped(&k) && !walk_pop(&k)) {
                j--;
                break;
            }
            cum += walk_prob(&k, walk_at(&k, j));
            if (cum > target)
                break;
            j++;
        }
        tok = walk_at(&k, j);
    }
    double log_norm = log(k.z) + log(mass);
    *out = (sample_logprob){tok, (float)(walk_x(&k, tok) - log_norm)};
    if (n_top)
        fill_top(&k, log_norm, top, n_top, n_top_out);
    else if (n_top_out)
        *n_top_out = 0;
    return TY_OK;
}

ty_status sample_dist(const sample_params *p, const float *logits, uint32_t v,
                      uint32_t *scratch, float *probs, uint32_t *n, ty_err *err)
{
    int greedy = p->temperature == 0;
    walk k;
    ty_status s = prepare(p, greedy, logits, v, scratch, &k, err);
    if (s != TY_OK)
        return s;
    double mass = greedy ? 1.0 : walk_top_p(&k, p->top_p);
    while (walk_pop(&k))
        ;
    uint32_t r = walk_popped(&k);
    /* The walk's order is idx[m-1] down to idx[0]: reverse it in place,
     * then move it to the scratch's start. */
    for (uint32_t a = 0, b = r - 1; a < b; a++, b--) {
        uint32_t t = k.idx[a];
        k.idx[a] = k.idx[b];
        k.idx[b] = t;
    }
    memmove(scratch, k.idx, (size_t)r * sizeof *k.idx);
    for (uint32_t j = 0; j < r; j++)
        probs[j] = (float)(walk_prob(&k, scratch[j]) / mass);
    *n = r;
    return TY_OK;
}
