/*
 * lm_decode.c - generating with the key/value cache (models/nn_decode.h)
 * against recomputing the window for every token, on the CPU (not a test;
 * make bench-decode).
 *
 *   build/bench_decode [--layers 4] [--dim 128] [--heads 4] [--context 128]
 *       [--prompt 16] [--batch 8] [--seed 1]
 *
 * A GPT of the "GPT (character)" shape (byte vocabulary, random weights:
 * the speed does not depend on them) generates greedily from a prompt of
 * --prompt tokens to the end of its context, three ways, on one thread
 * (OpenBLAS's too):
 *   full     each new token by a forward of the whole window so far (what
 *            predict does), reading the last position's logits;
 *   cached   the decoder: the prompt in one step, then one token a step;
 *   batched  --batch sequences (different prompts) stepping together.
 * The first two must choose the same tokens (same_tokens). Then prefix
 * caching: the prefill of a prompt of context - 16 tokens cold and with
 * its full blocks cached by an earlier sequence of the same prompt (the
 * first token's latency; the logits must be the same bits). Prints one
 * JSON line: tokens/s of each, the ratios and the prefill times.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "common/rng.h"
#include "models/nn_decode.h"
#include "models/nn_internal.h"

void openblas_set_num_threads(int num_threads);

#define V 256u

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint32_t argmax(const float *x, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static int opt(int argc, char **argv, const char *name, int def)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name))
            return atoi(argv[i + 1]);
    return def;
}

/* Greedy tokens after the prompt up to t, one full forward each. */
static double run_full(const nn_net *net, const uint32_t *prompt, uint32_t np,
                       uint32_t t, uint32_t *toks)
{
    nn_workspace *ws = nn_workspace_create_for(&net->arch, 1, 0);
    if (!ws)
        exit(1);
    memcpy(toks, prompt, np * sizeof *toks);
    const double t0 = now_s();
    for (uint32_t len = np; len < t; len++) {
        for (uint32_t i = 0; i < t; i++)
            ws->act[0][i] = i < len ? (float)toks[i] : 0.0f;
        const float *y = nn_forward(&net->arch, net->params, ws, 1, 0, NULL);
        toks[len] = argmax(y + (size_t)(len - 1) * V, V);
    }
    const double s = now_s() - t0;
    nn_workspace_destroy(ws);
    return s;
}

/* The same with the decoder, b sequences at once (prompts shifted by the
 * sequence's index); toks gets sequence 0's tokens. */
static double run_cached(const nn_net *net, const uint32_t *prompt, uint32_t np,
                         uint32_t t, uint32_t b, uint32_t *toks)
{
    nn_decoder *d;
    ty_err err;
    const uint32_t blocks = b * ((t + 15) / 16);
    if (nn_decoder_create(net, b * np, blocks, 16, &d, &err) != TY_OK) {
        fprintf(stderr, "bench_decode: %s\n", err.msg);
        exit(1);
    }
    nn_kv_seq *seq = calloc(b, sizeof *seq);
    nn_decode_row *rows = calloc((size_t)b * np, sizeof *rows);
    float *out = malloc((size_t)b * np * V * sizeof *out);
    uint32_t *last = calloc(b, sizeof *last);
    if (!seq || !rows || !out || !last)
        exit(1);
    memcpy(toks, prompt, np * sizeof *toks);
    const double t0 = now_s();
    uint32_t n = 0;
    for (uint32_t s = 0; s < b; s++) {
        if (nn_kv_seq_reserve(d, &seq[s], t, &err) != TY_OK)
            exit(1);
        for (uint32_t i = 0; i < np; i++)
            rows[n++] = (nn_decode_row){&seq[s], (prompt[i] + s) % V, i};
    }
    for (uint32_t len = np; len < t; len++) {
        if (nn_decoder_step(d, rows, n, out, &err) != TY_OK) {
            fprintf(stderr, "bench_decode: %s\n", err.msg);
            exit(1);
        }
        /* each sequence's last row gives its next token */
        for (uint32_t s = 0, r = 0; s < b; s++) {
            while (r + 1 < n && rows[r + 1].seq == &seq[s])
                r++;
            last[s] = argmax(out + (size_t)r * V, V);
            r++;
        }
        toks[len] = last[0];
        for (uint32_t s = 0; s < b; s++)
            rows[s] = (nn_decode_row){&seq[s], last[s], len};
        n = b;
    }
    const double secs = now_s() - t0;
    for (uint32_t s = 0; s < b; s++)
        nn_kv_seq_release(d, &seq[s]);
    nn_decoder_free(d);
    free(seq);
    free(rows);
    free(out);
    free(last);
    return secs;
}

/* Prefix caching: the prompt's prefill (its first token's latency) with
 * nothing cached, and again for a second sequence of the same prompt,
 * whose full blocks but the last come from the first's (best of 5 each).
 * The two last rows' logits must be the same bits. */
static void run_prefix(const nn_net *net, const uint32_t *prompt, uint32_t np,
                       uint32_t t, double *cold, double *warm, uint32_t *cached,
                       int *same)
{
    nn_decoder *d;
    ty_err err;
    if (nn_decoder_create(net, np, 2 * ((t + 15) / 16), 16, &d, &err) !=
        TY_OK) {
        fprintf(stderr, "bench_decode: %s\n", err.msg);
        exit(1);
    }
    nn_decode_row *rows = calloc(np, sizeof *rows);
    float *out = malloc((size_t)np * V * sizeof *out);
    float *first = malloc(V * sizeof *first);
    if (!rows || !out || !first)
        exit(1);
    *cold = *warm = 1e30;
    *same = 1;
    for (int rep = 0; rep < 5; rep++) {
        nn_kv_seq a = {0}, b = {0};
        nn_kv_seq *s[2] = {&a, &b};
        for (int k = 0; k < 2; k++) {
            const double t0 = now_s();
            uint32_t from = 0, n = 0;
            if (nn_kv_seq_reserve_prefix(d, s[k], prompt, np, t, &from, &err) !=
                TY_OK)
                exit(1);
            for (uint32_t i = from; i < np; i++)
                rows[n++] = (nn_decode_row){s[k], prompt[i], i};
            if (nn_decoder_step(d, rows, n, out, &err) != TY_OK)
                exit(1);
            const double secs = now_s() - t0;
            const float *lastrow = out + (size_t)(n - 1) * V;
            if (!k) {
                nn_kv_seq_publish(d, &a, prompt, np);
                memcpy(first, lastrow, V * sizeof *first);
                *cold = secs < *cold ? secs : *cold;
            } else {
                *same &= !memcmp(first, lastrow, V * sizeof *first);
                *warm = secs < *warm ? secs : *warm;
                *cached = from;
            }
        }
        nn_kv_seq_release(d, &a);
        nn_kv_seq_release(d, &b);
        /* the next round's a finds the blocks too: start over */
        nn_decoder_free(d);
        if (nn_decoder_create(net, np, 2 * ((t + 15) / 16), 16, &d, &err) !=
            TY_OK)
            exit(1);
    }
    nn_decoder_free(d);
    free(rows);
    free(out);
    free(first);
}

int main(int argc, char **argv)
{
    const uint32_t layers = (uint32_t)opt(argc, argv, "--layers", 4);
    const uint32_t dim = (uint32_t)opt(argc, argv, "--dim", 128);
    const uint32_t heads = (uint32_t)opt(argc, argv, "--heads", 4);
    const uint32_t t = (uint32_t)opt(argc, argv, "--context", 128);
    const uint32_t np = (uint32_t)opt(argc, argv, "--prompt", 16);
    const uint32_t b = (uint32_t)opt(argc, argv, "--batch", 8);
    const uint64_t seed = (uint64_t)opt(argc, argv, "--seed", 1);
    if (!layers || !dim || !heads || np < 1 || np >= t || !b) {
        fprintf(stderr, "bench_decode: bad sizes\n");
        return 2;
    }
    openblas_set_num_threads(1);
    json_t *ls = json_array();
    json_array_append_new(ls, json_pack("{s:s, s:i}", "type", "embedding",
                                        "dim", (json_int_t)dim));
    json_array_append_new(ls,
                          json_pack("{s:s}", "type", "positional_embedding"));
    for (uint32_t i = 0; i < layers; i++)
        json_array_append_new(ls, json_pack("{s:s, s:i}", "type",
                                            "transformer_block", "heads",
                                            (json_int_t)heads));
    json_array_append_new(ls, json_pack("{s:s}", "type", "layernorm"));
    json_array_append_new(ls, json_pack("{s:s}", "type", "lm_head"));
    json_t *spec = json_pack("{s:o}", "layers", ls);
    nn_net net = {0};
    ty_err err;
    if (nn_arch_build(spec, &t, 1, V, TY_TASK_LANGUAGE_MODELING, &net.arch,
                      NULL, &err) != TY_OK) {
        fprintf(stderr, "bench_decode: %s\n", err.msg);
        return 1;
    }
    json_decref(spec);
    net.params = malloc((net.arch.param_count + 1) * sizeof *net.params);
    ty_rng rng;
    ty_rng_seed(&rng, seed, 3);
    nn_arch_init_params(&net.arch, net.params, &rng);
    uint32_t *prompt = malloc(np * sizeof *prompt);
    uint32_t *a = malloc(t * sizeof *a), *c = malloc(t * sizeof *c);
    uint32_t *prompt_long = malloc(t * sizeof *prompt_long);
    for (uint32_t i = 0; i < np; i++)
        prompt[i] = (uint32_t)ty_rng_below(&rng, V);
    for (uint32_t i = 0; i < t; i++)
        prompt_long[i] = (uint32_t)ty_rng_below(&rng, V);
    const uint32_t gen = t - np;
    const double full = run_full(&net, prompt, np, t, a);
    const double one = run_cached(&net, prompt, np, t, 1, c);
    const int same = !memcmp(a, c, t * sizeof *a);
    const double many = run_cached(&net, prompt, np, t, b, c);
    double cold, warm;
    uint32_t cached = 0;
    int same_prefix;
    run_prefix(&net, prompt_long, t - 16, t, &cold, &warm, &cached,
               &same_prefix);
    const double r_full = gen / full, r_one = gen / one;
    const double r_many = (double)gen * b / many;
    printf("{\"layers\": %u, \"dim\": %u, \"context\": %u, \"prompt\": %u, "
           "\"generated\": %u, \"full_tokens_per_s\": %.1f, "
           "\"cached_tokens_per_s\": %.1f, \"batched\": %u, "
           "\"batched_tokens_per_s\": %.1f, \"cached_over_full\": %.2f, "
           "\"batched_over_cached\": %.2f, \"same_tokens\": %s, "
           "\"prefix_prompt\": %u, \"prefix_cached_tokens\": %u, "
           "\"prefill_cold_ms\": %.3f, \"prefill_cached_ms\": %.3f, "
           "\"prefix_same_logits\": %s}\n",
           layers, dim, t, np, gen, r_full, r_one, b, r_many, r_one / r_full,
           r_many / r_one, same ? "true" : "false", t - 16, cached, cold * 1e3,
           warm * 1e3, same_prefix ? "true" : "false");
    free(prompt);
    free(prompt_long);
    free(a);
    free(c);
    free(net.params);
    nn_arch_free(&net.arch);
    return same && same_prefix ? 0 : 1;
}
