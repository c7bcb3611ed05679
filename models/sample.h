/*
 * sample.h - choosing a language model's next token from one row of
 * logits, as Hugging Face transformers' generate samples
 * (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper, then one
 * multinomial draw), with a per-sequence random state.
 *
 * The distribution, for temperature T > 0:
 *   1. x = logits / T;
 *   2. top-k (k > 0): keep the tokens whose x is at least the k-th largest
 *      x (ties at the k-th value are all kept, as HF's threshold keeps
 *      them; k beyond the vocabulary keeps every token);
 *   3. p = softmax(x) over the kept tokens;
 *   4. top-p (top_p < 1): order the kept tokens by p, most likely first,
 *      ties by lower id; keep the shortest leading run whose mass reaches
 *      top_p (a token is kept when the mass before it is below top_p, so
 *      at least one is kept);
 *   5. renormalize over what is kept.
 * The draw: one uniform u in [0, 1) (53 bits) from the sequence's state,
 * then the token by inverse CDF over the kept tokens in the order of
 * step 4. T = 0 is greedy: the largest logit, the lowest id on ties; it
 * draws nothing.
 *
 * Logprobs (OpenAI's `logprobs`): the chosen token's and the top
 * alternatives' natural-log probabilities under the final distribution
 * (step 5). At T = 0 they are those of softmax(logits) itself (temperature
 * 1, nothing filtered), the raw distribution vLLM reports, since greedy's
 * own distribution would be a point mass.
 *
 * Probabilities are computed in double from the logits: p = exp((l -
 * max) / T) / Z. The order of steps 2 and 4 is by the logits themselves,
 * then by id (HF's sort leaves ties in any order).
 *
 * Determinism: a draw depends only on the sequence's state (its seed and
 * stream, and how many draws it made) and its own logits, never on other
 * sequences; every call is allocation-free and single-threaded, and gives
 * the same token for the same inputs on every machine with IEEE floats
 * and the same libm exp/log.
 *
 * Cost per call: greedy without logprobs, one pass over the logits.
 * Otherwise a few passes over the logits (an exp per kept token), plus
 * O(v log k) for top-k's selection (a heap of k), plus ordering only the
 * tokens that top-p's cut, the draw and the alternatives read into (whole
 * buckets of similar logits are stepped over by their mass; sample.c).
 * Measured on v = 50257 (GPT-2), logits ~ N(0, 3^2), one core of a shared
 * 2-core AMD EPYC VM: greedy about 50 us, greedy with logprobs 400 us,
 * T = 1 with or without top-p 380-450 us (the exp per token is most of
 * it), top-k 50 about 120 us.
 */
#ifndef TY_SAMPLE_H
#define TY_SAMPLE_H

#include <stdint.h>

#include "common/rng.h"
#include "common/ty.h"

/* A request's sampling parameters (check them with sample_params_check). */
typedef struct {
    float temperature; /* >= 0; 0 = greedy */
    int32_t top_k;     /* >= 0; 0 = off; beyond the vocabulary = off */
    float top_p;       /* in (0, 1]; 1 = off */
    uint64_t seed;     /* seeds each sequence's state (sample_state_init) */
} sample_params;

/* The defaults: temperature 1, top_k off, top_p off, seed 0. */
#define SAMPLE_PARAMS_DEFAULT ((sample_params){1.0f, 0, 1.0f, 0})

/* One sequence's random state: copy it to checkpoint it. */
typedef struct {
    ty_rng rng;
    uint64_t draws; /* uniform numbers drawn so far */
} sample_state;

/* A token and its log-probability. */
typedef struct {
    uint32_t token;
    float logprob;
} sample_logprob;

/* Checks p for a request: TY_EINVAL naming "temperature" (negative, NaN or
 * infinite), "top_p" (NaN, <= 0 or > 1) or "top_k" (negative), with a
 * sentence a person can act on. TY_OK leaves err untouched. */
ty_status sample_params_check(const sample_params *p, ty_err *err);

/* Seeds st from seed and a stream number: one stream per sequence of a
 * request (the index of OpenAI's `n` choices), so a request's choices
 * differ and each is reproducible from the seed alone. */
void sample_state_init(sample_state *st, uint64_t seed, uint64_t stream);

/* What a call reports of logprobs: the caller sets top (n_top entries,
 * its own) and n_top; the call sets n_top_out. */
typedef struct {
    sample_logprob *top; /* the most likely tokens, most likely first */
    uint32_t n_top;      /* how many are wanted (0: the chosen one's only) */
    uint32_t n_top_out;  /* how many were written (fewer when fewer kept) */
} sample_logprobs;

/* The next token for one row of v logits (v >= 1; -inf entries are
 * tokens that may never be chosen) under p (checked), drawing from st
 * (untouched at temperature 0), working in scratch: v uint32s the caller
 * owns and may reuse across calls and sequences (one thread at a time);
 * its contents after a call are unspecified. out->token is the token.
 * With lp, out->logprob is its logprob and lp->top[0..lp->n_top_out) the
 * lp->n_top most likely tokens of the final distribution with theirs
 * (ties by lower id); with lp NULL, out->logprob is NaN and the work only
 * logprobs need is skipped (greedy is then one pass over the logits).
 * TY_EINVAL when a logit is NaN or +inf, or none is above -inf (nothing
 * is drawn; *out is untouched). */
ty_status sample_next(const sample_params *p, sample_state *st,
                      const float *logits, uint32_t v, uint32_t *scratch,
                      sample_logprob *out, sample_logprobs *lp, ty_err *err);

/* The whole final distribution, for tests and inspection: the kept tokens
 * in the order of the draw's walk (step 4's order) into scratch[0..n)
 * and their renormalized probabilities into probs[0..n) (v floats, the
 * caller's), *n the count. At temperature 0, softmax(logits) over every
 * token whose logit is above -inf. Errors as sample_next's. O(v log v). */
ty_status sample_dist(const sample_params *p, const float *logits, uint32_t v,
                      uint32_t *scratch, float *probs, uint32_t *n,
                      ty_err *err);

#endif
