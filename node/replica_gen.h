/*
 * replica_gen.h - generation in the serving replica (node/replica.c): a
 * connection that asks for a language model's tokens (rframe.h's
 * generation frames) is handed here once its request is read. Its
 * sequence runs in the replica's engine for the model (node/gen_engine.h,
 * continuous batching with every other generation), and a thread of its
 * own waits for it and closes the connection.
 */
#ifndef TY_NODE_REPLICA_GEN_H
#define TY_NODE_REPLICA_GEN_H

#include <stdint.h>

#include "models/nn.h"
#include "node/rframe.h"

/* Starts the generation r asks for, of the prompt ids (r->n_ids, taken:
 * freed here), on net, writing its frames to fd (non-blocking, taken:
 * closed here). A request the model cannot run (not a language model, an
 * id outside the vocabulary, past the context) is answered with an error
 * frame, as is a start that fails. */
void replica_gen_start(const nn_net *net, int fd, const rframe_gen_req *r,
                       uint32_t *ids);

/* Answers r with an error frame (status, msg) and closes fd. */
void replica_gen_refuse(int fd, uint32_t seq, uint32_t status, const char *msg);

/* Generations not finished yet: a drain waits for them. */
int replica_gen_running(void);

/* A heartbeat's engine figures (a language model's replica: replica.h)
 * and theirs. */
#define RPROTO_F_GENERATION "generation"
#define RPROTO_F_GEN_SEQUENCES "sequences"
#define RPROTO_F_GEN_WAITING "waiting"
#define RPROTO_F_GEN_KV_USED "kv_blocks_used"
#define RPROTO_F_GEN_KV_TOTAL "kv_blocks_total"
#define RPROTO_F_GEN_KV_CACHED "kv_blocks_cached"
#define RPROTO_F_GEN_PROMPT "prompt_tokens"
#define RPROTO_F_GEN_GENERATED "generated_tokens"
#define RPROTO_F_GEN_PREFIX_HIT "prefix_cache_hit_tokens"

/* The heartbeat's fields once net, a language model, is loaded
 * (replica.h's "generation": the engine's figures); NULL before, or for
 * another model. */
void replica_gen_loaded(const nn_net *net);
json_t *replica_gen_heartbeat(void);

#endif
