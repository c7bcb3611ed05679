/*
 * gen_internal.h - a generation request's state, shared by serve/generate.c
 * (the request: checks, text, reply) and serve/gen_engine.c (the engine
 * that steps many requests' sequences together). Not for other files.
 */
#ifndef TY_SERVE_GEN_INTERNAL_H
#define TY_SERVE_GEN_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"
#include "models/nn.h"
#include "models/nn_decode.h"
#include "models/sample.h"
#include "serve/generate.h"
#include "serve/model.h"
#include "serve/stop.h"

/* A request as parsed. */
typedef struct {
    const char *text;
    size_t text_len;
    int64_t max_tokens; /* 0: not given */
    sample_params sp;
    const char *stops[STOP_MAX_STRINGS];
    size_t stop_lens[STOP_MAX_STRINGS];
    uint32_t n_stops;
} gen_req;

/* A growing output text. */
typedef struct {
    char *p;
    size_t len, cap;
} text_buf;

/* A request being served: its model and prompt (serve_gen_open), then its
 * sequence in an engine (serve_gen_run) and its text. */
struct serve_gen {
    serve_model m;
    int model_open;
    gen_req q;
    json_t *body; /* q's strings point into it */
    const nn_net *net;
    uint32_t vocab, context, max_tokens;
    uint32_t *ids; /* the prompt's */
    size_t n;
    stop_matcher stop;
    text_buf out;
    uint32_t generated;
    const char *finish;
    serve_gen_chunk chunk; /* streaming: each piece of text as it comes */
    void *chunk_ctx;
    uint32_t choice; /* the seed's stream (OpenAI's choice index) */
    char tenant[TY_ID_MAX];
    double t_open, t_last; /* the request's arrival, the last token's time */
    /* logprobs (serve_gen_want_logprobs): per generated token, its id,
     * logprob and the lp_top most likely ones with theirs */
    int want_lp;
    uint32_t lp_top;
    sample_logprob *lp_tok;  /* max_tokens */
    sample_logprob *lp_alts; /* max_tokens * lp_top */
    uint32_t *lp_n_alts;     /* max_tokens */
    /* ---- in the engine (gen_engine.c) ---- */
    sample_state st;
    nn_kv_seq seq;
    uint32_t fed;        /* prompt tokens in the cache */
    uint32_t last_token; /* the last token written, fed next step */
    struct serve_gen *next;
    int done;         /* the engine is finished with it */
    ty_status status; /* its outcome */
    ty_err err;
    pthread_cond_t done_cv;
};

/* generate.c, for the engine: the next token from this sequence's logits
 * (sampled, counted, its text emitted); *finished when the sequence ended
 * (length, a stop string, or the stream's reader left). Then gen_end
 * flushes what the stop matcher held. */
ty_status gen_token(serve_gen *g, const float *logits, uint32_t *scratch,
                    int *finished, ty_err *err);
ty_status gen_end(serve_gen *g, ty_err *err);

/* gen_engine.c: hands g (opened, its sampler seeded) to its model's engine
 * and waits until its text is written; g's outcome. TY_EUNAVAILABLE when
 * the engine's queue is full. */
ty_status gen_engine_run(serve_gen *g, ty_err *err);

#endif
