/*
 * sample.c - the next token from one row of logits (sample.h).
 *
 * Greedy without logprobs is one pass (the argmax). Otherwise, in the
 * caller's scratch of v ids:
 *   prepare: top-k's threshold by a min-heap of k ids; then the kept ids
 *            laid out by bucket of their scaled logit x = (l - max) / T
 *            (half a nat wide: bucket b holds -x in [b/2, (b+1)/2), the
 *            last one everything lower), each bucket's mass (the sum of
 *            exp(x) over its tokens, in double, in id order) and Z, the
 *            sum of the buckets' masses in bucket order;
 *   order:   a bucket is put in the walk's order only when something
 *            reads into it, and only as far as it reads: its tokens are a
 *            max-heap (stored backwards from the bucket's end) popped to
 *            the bucket's front. Every token of a lower bucket comes
 *            before every token of a higher one, so the buckets in turn
 *            are the whole order, and idx[0..kept) is the walk once every
 *            kept bucket is read.
 * Top-p's cut, the draw and the alternatives step over a bucket whole by
 * its mass when what they look for lies beyond it, and read tokens one by
 * one only inside the bucket where it lies: a call orders a few buckets'
 * tokens, not the vocabulary. The sums are the same every time (whole
 * buckets by their masses, then tokens in order), so a draw is
 * deterministic; it can differ from a token-by-token sum only where u
 * lands within rounding (about 1e-16) of a boundary.
 *
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

/* Restores the heap property below position i of a heap of n ids whose
 * element j is at base[j * step]: the root is the token that comes first
 * (max_first) or last (!max_first). */
static void sift_down(uint32_t *base, ptrdiff_t step, uint32_t n, uint32_t i,
                      const float *w, int max_first)
{
#define AT(j) base[(ptrdiff_t)(j)*step]
    uint32_t t = AT(i);
    for (;;) {
        uint64_t c = 2 * (uint64_t)i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && (max_first ? before(w, AT(c + 1), AT(c))
                                    : before(w, AT(c), AT(c + 1))))
            c++;
        if (!(max_first ? before(w, AT(c), t) : before(w, t, AT(c))))
            break;
        AT(i) = AT(c);
        i = (uint32_t)c;
    }
    AT(i) = t;
#undef AT
}

static void heapify(uint32_t *base, ptrdiff_t step, uint32_t n, const float *w,
                    int max_first)
{
    for (uint32_t i = n / 2; i-- > 0;)
        sift_down(base, step, n, i, w, max_first);
}

/* Buckets of the scaled logit: BUCKETS of 1 / BUCKETS_PER_NAT nats. */
#define BUCKETS 64
#define BUCKETS_PER_NAT 2

/* The kept tokens by bucket: bucket b is idx[start[b] .. start[b] + n[b]),
 * its first ord[b] tokens in the walk's order, the rest a max-heap stored
 * backwards from the bucket's last slot (when heaped[b]). */
typedef struct {
    const float *w; /* the logits */
    uint32_t *idx;
    double max, inv_t; /* the largest logit, 1 / the temperature */
    double z;          /* the sum of mass[] */
    double mass[BUCKETS];
    uint32_t start[BUCKETS], n[BUCKETS], ord[BUCKETS];
    uint8_t heaped[BUCKETS];
    uint32_t m; /* kept tokens */
} walk;

/* A token's scaled logit, (w - max) / t: at most 0. */
static double walk_x(const walk *k, uint32_t token)
{
    return ((double)k->w[token] - k->max) * k->inv_t;
}

/* The token's bucket: never lower for a lower logit. */
static uint32_t bucket_of(double x)
{
    double b = -x * BUCKETS_PER_NAT;
    return b < BUCKETS - 1 ? (uint32_t)b : BUCKETS - 1;
}

/* The j-th token of bucket b in the walk's order (j < n[b]). */
static uint32_t walk_at(walk *k, uint32_t b, uint32_t j)
{
    uint32_t *seg = k->idx + k->start[b], n = k->n[b];
    /* The heap's element i is at seg[n - 1 - i]. */
    uint32_t *top = seg + n - 1;
    if (!k->heaped[b]) {
        heapify(top, -1, n - k->ord[b], k->w, 1);
        k->heaped[b] = 1;
    }
    while (k->ord[b] <= j) {
        uint32_t size = n - k->ord[b], first = top[0];
        top[0] = seg[k->ord[b]]; /* the heap's last element to its root */
        if (size > 2)
            sift_down(top, -1, size - 1, 0, k->w, 1);
        seg[k->ord[b]++] = first;
    }
    return seg[j];
}

/* The largest logit; TY_EINVAL on a NaN or +inf one or none above -inf. */
static ty_status scan_max(const float *w, uint32_t v, float *max, ty_err *err)
{
    float m = -INFINITY;
    for (uint32_t i = 0; i < v; i++) {
        float l = w[i];
        if (!(l < INFINITY)) /* NaN or +inf */
            return ty_fail(err, TY_EINVAL, NULL,
                           "the model's logits hold %s at token %u",
                           isnan(l) ? "NaN" : "+inf", i);
        if (l > m)
            m = l;
    }
    if (m == -INFINITY)
        return ty_fail(err, TY_EINVAL, NULL,
                       "every token's logit is -inf: nothing can be chosen");
    *max = m;
    return TY_OK;
}

/* Lays out the kept ids by bucket with their masses. greedy: the raw
 * distribution (temperature 1, nothing filtered). */
static void prepare(const sample_params *p, int greedy, const float *w,
                    uint32_t v, float max, uint32_t *idx, walk *k)
{
    memset(k, 0, sizeof *k);
    k->w = w;
    k->idx = idx;
    k->max = max;
    k->inv_t = greedy ? 1.0 : 1.0 / (double)p->temperature;
    uint32_t kk = greedy || p->top_k <= 0 ? 0 : (uint32_t)p->top_k;
    float thresh = -INFINITY;
    if (kk > 0 && kk < v) {
        /* The k best ids in a heap whose root is the worst of them. */
        for (uint32_t i = 0; i < kk; i++)
            idx[i] = i;
        heapify(idx, 1, kk, w, 0);
        /* i comes after every id in the heap, so it beats the worst only
         * by a larger logit. */
        float worst = w[idx[0]];
        for (uint32_t i = kk; i < v; i++)
            if (w[i] > worst) {
                idx[0] = i;
                sift_down(idx, 1, kk, 0, w, 0);
                worst = w[idx[0]];
            }
        thresh = worst;
    }
    for (uint32_t i = 0; i < v; i++)
        if (w[i] > -INFINITY && w[i] >= thresh) {
            double x = walk_x(k, i);
            uint32_t b = bucket_of(x);
            k->n[b]++;
            k->mass[b] += exp(x);
        }
    uint32_t at = 0;
    for (uint32_t b = 0; b < BUCKETS; b++) {
        k->start[b] = at;
        at += k->n[b];
        k->z += k->mass[b];
    }
    k->m = at;
    uint32_t next[BUCKETS];
    memcpy(next, k->start, sizeof next);
    for (uint32_t i = 0; i < v; i++)
        if (w[i] > -INFINITY && w[i] >= thresh)
            idx[next[bucket_of(walk_x(k, i))]++] = i;
}

/* Top-p's cut: the kept tokens are buckets [0, *cut) whole and the first
 * *cut_n of bucket *cut (*cut == BUCKETS: all). Returns the kept mass. */
static double walk_top_p(walk *k, float top_p, uint32_t *cut, uint32_t *cut_n)
{
    *cut = BUCKETS;
    *cut_n = 0;
    if (!(top_p < 1))
        return k->z;
    double thr = (double)top_p * k->z, cum = 0;
    for (uint32_t b = 0; b < BUCKETS; b++) {
        if (!k->n[b])
            continue;
        if (cum + k->mass[b] < thr) {
            cum += k->mass[b];
            continue;
        }
        /* A token is kept while the mass before it is below top_p. */
        uint32_t j = 0;
        while (j < k->n[b] && cum < thr)
            cum += exp(walk_x(k, walk_at(k, b, j++)));
        if (j < k->n[b]) {
            *cut = b;
            *cut_n = j;
            return cum;
        }
    }
    return cum;
}

static uint32_t kept_in(const walk *k, uint32_t b, uint32_t cut, uint32_t cut_n)
{
    return b < cut ? k->n[b] : b == cut ? cut_n : 0;
}

/* The token where the kept tokens' cumulative mass first passes target:
 * whole buckets by their masses, tokens one by one inside the bucket
 * where it lies. Rounding past the end picks the last kept token. */
static uint32_t walk_draw(walk *k, double target, uint32_t cut, uint32_t cut_n)
{
    double cum = 0;
    uint32_t last_b = 0;
    for (uint32_t b = 0; b < BUCKETS && b <= cut; b++) {
        uint32_t n = kept_in(k, b, cut, cut_n);
        if (!n)
            continue;
        last_b = b;
        if (b < cut && cum + k->mass[b] <= target) {
            cum += k->mass[b];
            continue;
        }
        for (uint32_t j = 0; j < n; j++) {
            uint32_t t = walk_at(k, b, j);
            cum += exp(walk_x(k, t));
            if (cum > target)
                return t;
        }
    }
    return walk_at(k, last_b, kept_in(k, last_b, cut, cut_n) - 1);
}

/* The first lp->n_top kept tokens of the walk, with their logprobs. */
static void fill_top(walk *k, double log_mass, uint32_t cut, uint32_t cut_n,
                     sample_logprobs *lp)
{
    uint32_t n = 0;
    for (uint32_t b = 0; b < BUCKETS && n < lp->n_top; b++)
        for (uint32_t j = 0; j < kept_in(k, b, cut, cut_n) && n < lp->n_top;
             j++) {
            uint32_t t = walk_at(k, b, j);
            lp->top[n++] =
                (sample_logprob){t, (float)(walk_x(k, t) - log_mass)};
        }
    lp->n_top_out = n;
}

ty_status sample_next(const sample_params *p, sample_state *st,
                      const float *logits, uint32_t v, uint32_t *scratch,
                      sample_logprob *out, sample_logprobs *lp, ty_err *err)
{
    float max;
    ty_status s = scan_max(logits, v, &max, err);
    if (s != TY_OK)
        return s;
    int greedy = p->temperature == 0;
    uint32_t tok = 0;
    if (greedy) {
        /* The first of the largest logits. */
        while (logits[tok] != max)
            tok++;
        if (!lp) {
            *out = (sample_logprob){tok, NAN};
            return TY_OK;
        }
    }
    walk k;
    prepare(p, greedy, logits, v, max, scratch, &k);
    uint32_t cut = BUCKETS, cut_n = 0;
    double mass = k.z;
    if (!greedy) {
        mass = walk_top_p(&k, p->top_p, &cut, &cut_n);
        tok = walk_draw(&k, draw_uniform(st) * mass, cut, cut_n);
    }
    if (!lp) {
        *out = (sample_logprob){tok, NAN};
        return TY_OK;
    }
    double log_mass = log(mass);
    *out = (sample_logprob){tok, (float)(walk_x(&k, tok) - log_mass)};
    fill_top(&k, log_mass, cut, cut_n, lp);
    return TY_OK;
}

ty_status sample_dist(const sample_params *p, const float *logits, uint32_t v,
                      uint32_t *scratch, float *probs, uint32_t *n, ty_err *err)
{
    float max;
    ty_status s = scan_max(logits, v, &max, err);
    if (s != TY_OK)
        return s;
    int greedy = p->temperature == 0;
    walk k;
    prepare(p, greedy, logits, v, max, scratch, &k);
    uint32_t cut = BUCKETS, cut_n = 0;
    double mass = greedy ? k.z : walk_top_p(&k, p->top_p, &cut, &cut_n);
    /* Reading every kept token orders the buckets in place: idx[0..r) is
     * then the walk (the buckets lie in order from the scratch's start). */
    uint32_t r = 0;
    for (uint32_t b = 0; b < BUCKETS; b++) {
        uint32_t kb = kept_in(&k, b, cut, cut_n);
        for (uint32_t j = 0; j < kb; j++, r++)
            probs[r] = (float)(exp(walk_x(&k, walk_at(&k, b, j))) / mass);
        if (kb < k.n[b])
            break;
    }
    *n = r;
    return TY_OK;
}
