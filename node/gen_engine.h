/*
 * gen_engine.h - continuous batching for text generation (see
 * gen_engine.c): a request hands its sequence to its model's engine and
 * waits while the engine steps it together with every other request's.
 *
 * The engine knows sequences, not requests: their prompt ids, how many
 * tokens they may write, and a callback that turns a step's logits into
 * the next token (serve/generate.c samples, emits text and says when the
 * sequence is finished), and one that ends it.
 */
#ifndef TY_NODE_GEN_ENGINE_H
#define TY_NODE_GEN_ENGINE_H

#include <pthread.h>
#include <stdint.h>

#include "common/ty.h"
#include "models/nn.h"
#include "models/nn_decode.h"

typedef struct gen_seq gen_seq;

struct gen_seq {
    /* ---- the caller's, set before gen_engine_run ---- */
    const nn_net *net; /* a language model, loaded while the run lasts */
    uint32_t vocab, context;
    const uint32_t *ids; /* the prompt */
    uint32_t n, max_tokens;
    const char *tenant; /* for the metrics */
    /* The next token from the logits (vocab values) of the sequence's
     * last position (scratch: vocab uint32s of the engine's); *finished
     * when it was the last. Called on the engine's thread. */
    ty_status (*next)(gen_seq *s, const float *logits, uint32_t *scratch,
                      uint32_t *token, int *finished, ty_err *err);
    /* The sequence is over (after its last token): flush what it holds. */
    ty_status (*end)(gen_seq *s, ty_err *err);
    /* ---- the engine's ---- */
    nn_kv_seq kv;
    uint32_t fed;              /* prompt tokens in the cache */
    uint32_t last_token;       /* the last token written, fed next step */
    struct gen_engine *engine; /* the engine it was handed to */
    gen_seq *link;
    int done;
    ty_status status;
    ty_err err;
    pthread_cond_t done_cv;
};

/* Hands s to its model's engine and waits until its text is written: s's
 * outcome (next's or end's error, the decoder's, TY_EUNAVAILABLE when 256
 * requests already wait for the model, TY_ENOMEM). */
ty_status gen_engine_run(gen_seq *s, ty_err *err);

/* gen_engine_run in two halves, so that one request can run several
 * sequences side by side (OpenAI's n and prompt lists): submit hands s to
 * its engine (TY_EUNAVAILABLE or TY_ENOMEM when it cannot; s is then not
 * in the engine and must not be waited for), wait waits for a submitted
 * s and gives its outcome. */
ty_status gen_engine_submit(gen_seq *s, ty_err *err);
ty_status gen_engine_wait(gen_seq *s, ty_err *err);

/* How big an engine's key/value cache is, the process's policy, set
 * before the first request (the server from --kv-cache, a replica from
 * its replica.json and its device). bytes: the budget on the CPU, and
 * wherever device_share is 0. device_share (0 < s <= 1): an engine whose
 * model sits on CUDA device `device` takes that share of the memory free
 * on the device when its cache is made, less the decoder's step buffers,
 * as vLLM's gpu_memory_utilization does: for a replica that holds a GPU
 * or a MIG slice alone (inside a slice, cudaMemGetInfo is the slice's).
 * When the device cannot be asked it falls back to bytes. Unset: 256 MiB
 * on every device. Either way the cache holds at least a whole context. */
typedef struct {
    uint64_t bytes;
    double device_share;
    int device;
} gen_kv_budget;
#define GEN_KV_DEFAULT_BYTES ((uint64_t)256 << 20)
/* A replica's share of its GPU or MIG slice's free memory. */
#define GEN_KV_DEVICE_SHARE 0.9
void gen_engine_set_kv_budget(const gen_kv_budget *b);

/* The blocks a cache gets under policy b (pure): a block takes `per`
 * bytes and a step's buffers `steps`; free_bytes is what its device has
 * free (read only when b->device_share > 0; UINT64_MAX when the device
 * could not be asked: b->bytes then). At least `least` blocks (a whole
 * context), at most GEN_KV_MAX_BLOCKS. */
#define GEN_KV_MAX_BLOCKS (1u << 20)
uint32_t gen_kv_blocks(const gen_kv_budget *b, uint64_t free_bytes,
                       uint64_t per, uint64_t steps, uint32_t least);

/* What the process's engines hold and have done, every model's together
 * (a replica reports them with its heartbeats): sequences in the caches
 * and waiting for them, the caches' blocks held by sequences, in the pools
 * and cached (no sequence holds them but their tokens are indexed for the
 * prefix cache: free for admission, kv_used does not count them), prompt
 * tokens fed (those found in the prefix cache among them) and tokens
 * written. */
typedef struct {
    long running, waiting, kv_used, kv_total, kv_cached;
    uint64_t prompt_tokens, generated_tokens;
    uint64_t prefix_hit_tokens; /* prompt tokens found in the cache */
} gen_engine_totals;
void gen_engine_totals_get(gen_engine_totals *t);

/* An engine keeps its cache while idle, so that its prefix index serves
 * the next request (the cache borrows the model's network). Whoever frees
 * a network that generated calls this first, when no request holds it:
 * it waits for net's engine thread to leave, then frees its cache (a
 * network loaded later at the same address starts cold). Another engine
 * that makes its cache frees the idle caches of the rest too. */
void gen_engine_forget(const nn_net *net);

#endif
