/*
 * nn_decode.h - a language model run a few tokens at a time over a paged
 * key/value cache: what generation needs (issue 32 builds its scheduler
 * and APIs on it).
 *
 * A full forward (nn_net_predict) recomputes the whole window for every
 * new token. A decoder keeps, for each attention layer, the keys and
 * values of the positions it has seen, in fixed-size blocks from one pool
 * (vLLM's PagedAttention layout: a sequence holds a table of block ids),
 * so a step computes only its new tokens: a prompt's tokens in one step
 * (prefill), then one token per step. Rows of one step may belong to
 * different sequences; each row's numbers are computed apart from the
 * others', so a sequence decodes to the same logits alone or batched with
 * any others on the same device and build (batch invariance: the
 * attention reads one row's cache at a time, and the projections run on
 * the backend's rows_gemm, whose sums follow an order fixed by the width
 * alone, since a BLAS may order a row's sums differently as the row count
 * changes).
 *
 * Layers it runs: embedding, positional_embedding, dense, layernorm, relu,
 * tanh, sigmoid, gelu, dropout (off), attention and transformer_block
 * (causal only), lm_head. Any other is refused when the decoder is made.
 *
 * Not thread-safe: one thread steps a decoder (the net may be shared).
 */
#ifndef TY_NN_DECODE_H
#define TY_NN_DECODE_H

#include <stdint.h>

#include "common/ty.h"
#include "models/nn.h"
#include "models/pool.h"

typedef struct nn_decoder nn_decoder;

/* A sequence's place in the cache: its block table (block ids from the
 * decoder's pool, position j in blocks[j / block_tokens]) and how many
 * positions are cached. Zero-initialize; give back with
 * nn_kv_seq_release. */
typedef struct {
    int32_t *blocks;
    uint32_t n_blocks, cap;
    uint32_t len;
} nn_kv_seq;

/* One token of a step: its sequence, its id and its position. */
typedef struct {
    nn_kv_seq *seq;
    uint32_t token;
    uint32_t pos;
} nn_decode_row;

/* Bytes a decoder for net takes on its backend: the cache (n_blocks
 * blocks of block_tokens positions, for every attention layer, keys and
 * values) and a step's buffers for max_rows rows. */
uint64_t nn_decoder_bytes(const nn_net *net, uint32_t max_rows,
                          uint32_t n_blocks, uint32_t block_tokens);

/* A decoder for net (a language model; borrowed, it must outlive the
 * decoder) on net's backend. TY_EINVAL naming the layer it cannot run,
 * or a bad size; TY_ENOMEM. */
ty_status nn_decoder_create(const nn_net *net, uint32_t max_rows,
                            uint32_t n_blocks, uint32_t block_tokens,
                            nn_decoder **out, ty_err *err);
void nn_decoder_free(nn_decoder *d);

/* On a backend whose memory the host sees (the CPU), splits each step's
 * kernels over pool's threads (NULL: the calling thread alone); the split
 * never changes a row's numbers. The pool must outlive the decoder's use
 * of it. Returns 1 when set; 0 on other backends, where it does nothing. */
int nn_decoder_set_pool(nn_decoder *d, nn_pool *pool);

/* Blocks of the pool no sequence holds: free ones and cached ones (in
 * the prefix index, taken back when the pool needs them). */
uint32_t nn_decoder_free_blocks(const nn_decoder *d);
/* Of those, the cached ones: indexed, no sequence holding them. */
uint32_t nn_decoder_cached_blocks(const nn_decoder *d);

/* Gives seq room for positions [0, tokens): blocks from the pool as
 * needed. TY_ELIMIT when the pool has too few free blocks (seq unchanged),
 * TY_EINVAL past the model's context, TY_ENOMEM. */
ty_status nn_kv_seq_reserve(nn_decoder *d, nn_kv_seq *seq, uint32_t tokens,
                            ty_err *err);

/* Prefix caching (vLLM's automatic prefix caching): a block's keys and
 * values depend only on the tokens up to it, so prompts that begin with
 * the same full blocks of ids can share those blocks. The decoder keeps
 * an index of full prompt blocks, each keyed by its ids chained onto
 * the blocks before it (a match compares the ids, never the hash alone).
 *
 * nn_kv_seq_reserve_prefix reserves an empty seq's positions [0, tokens)
 * as nn_kv_seq_reserve does, but first takes the longest chain of
 * indexed blocks that matches the prompt's (ids, n_prompt of them)
 * first full blocks, short of the block of the prompt's last token
 * (that token must run for its logits): at most (n_prompt - 1) /
 * block_tokens blocks. Those are shared, counted by reference; seq->len
 * and *cached are their positions, so the sequence's rows start after
 * them, and its logits are the same bits as without the cache (batch
 * invariance: the shared blocks hold what the sequence would write).
 * Errors as nn_kv_seq_reserve's; TY_EINVAL when seq holds blocks.
 *
 * nn_kv_seq_publish indexes seq's full blocks of ids (n_ids: its prompt)
 * whose positions are computed (below seq->len). A sequence never writes
 * a shared block: its rows are past its len. A block no sequence holds
 * stays indexed, counted free, until the pool needs it (the one unused
 * longest goes first). */
ty_status nn_kv_seq_reserve_prefix(nn_decoder *d, nn_kv_seq *seq,
                                   const uint32_t *ids, uint32_t n_prompt,
                                   uint32_t tokens, uint32_t *cached,
                                   ty_err *err);
void nn_kv_seq_publish(nn_decoder *d, const nn_kv_seq *seq, const uint32_t *ids,
                       uint32_t n_ids);

/* Returns seq's blocks to the pool (a shared block once no sequence
 * holds it) and empties it. */
void nn_kv_seq_release(nn_decoder *d, nn_kv_seq *seq);

/* One step over n rows (at most max_rows): their logits (n, vocabulary)
 * into out (host memory). A sequence's rows in a step are its next
 * positions in order (the first at seq->len), within its reserved blocks;
 * afterwards seq->len counts them. TY_EINVAL naming the row otherwise (an
 * id outside the vocabulary too); the backend's status on a device
 * failure. */
ty_status nn_decoder_step(nn_decoder *d, const nn_decode_row *rows, uint32_t n,
                          float *out, ty_err *err);

#endif
