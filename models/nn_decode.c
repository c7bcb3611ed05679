/*
 * nn_decode.c - a language model stepped over a paged key/value cache (see
 * nn_decode.h). The layers' decode forms, one row per token:
 *
 *   embedding             gather the rows' ids
 *   positional_embedding  + the table's rows at the rows' positions (a
 *                         gather by position)
 *   dense, layernorm, activations   per row, as on a sequence
 *   attention             qkv = x W_in^T + b; the keys and values into the
 *                         cache (kv_store); each row's query over its
 *                         sequence's cached positions (kv_attention); the
 *                         output projection
 *   transformer_block     ln_1, the attention above, + x; ln_2, the MLP
 *                         (GELU tanh), + x1
 *   lm_head               logits = x W^T (the embedding's W when tied)
 *
 * Everything runs on the net's backend through backend.h's ops; the host
 * only checks rows, builds the step's ids, positions and block tables,
 * and uploads them.
 */
#include "models/nn_decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/nn_internal.h"

struct nn_decoder {
    const nn_net *net;
    const nn_arch *a;
    const nn_backend *be;
    const nn_exec *ex;
    nn_exec own; /* ex on the CPU once a pool is set */
    uint32_t max_rows, n_blocks, bt, tstride, t, c_max;
    float **kc, **vc;  /* per layer: its cache (attention layers only) */
    int32_t *free_ids; /* blocks no sequence holds and not indexed */
    uint32_t n_free;
    /* The prefix index (nn_kv_seq_reserve_prefix): per block, the
     * sequences holding it, and for an indexed block its chain key, the
     * indexed block before it (-1: the first) with that block's
     * generation then, its ids and the next in its bucket. A block's
     * generation changes when it leaves the index, so a block indexed
     * after a parent that was since reused never matches. Indexed blocks
     * no sequence holds wait on an LRU list, free for the taking. */
    uint32_t *ref, *gen, *parent_gen, *tok;
    uint8_t *indexed;
    uint64_t *key;
    int32_t *parent, *hnext, *buckets, *lru_prev, *lru_next;
    int32_t lru_head, lru_tail;
    uint32_t n_lru, hmask;
    /* a step's buffers on the backend: activations x and y (max_rows,
     * width), the widest layer's temporaries, layer norms' statistics */
    float *x, *y, *qkv, *att, *t1, *t2, *mean, *rstd, *logits;
    int32_t *ids, *pos, *tables;
    int32_t *h_ids, *h_pos, *h_tables; /* host staging */
    uint64_t width;                    /* floats per row of x, y, t1, t2 */
};

/* ---- what a decoder runs ---- */

static int attends(const nn_layer *l)
{
    return l->type == NN_LAYER_ATTENTION ||
           l->type == NN_LAYER_TRANSFORMER_BLOCK;
}

static ty_status check_layers(const nn_arch *a, ty_err *err)
{
    if (a->task != TY_TASK_LANGUAGE_MODELING)
        return ty_fail(err, TY_EINVAL, NULL,
                       "only a language model generates text; this model is "
                       "for %s",
                       ty_task_name(a->task));
    for (uint32_t i = 0; i < a->n_layers; i++) {
        const nn_layer *l = &a->layers[i];
        switch (l->type) {
            case NN_LAYER_EMBEDDING:
            case NN_LAYER_POSITIONAL_EMBEDDING:
            case NN_LAYER_DENSE:
            case NN_LAYER_LAYERNORM:
            case NN_LAYER_RELU:
            case NN_LAYER_TANH:
            case NN_LAYER_SIGMOID:
            case NN_LAYER_GELU:
            case NN_LAYER_DROPOUT:
            case NN_LAYER_LM_HEAD: break;
            case NN_LAYER_ATTENTION:
            case NN_LAYER_TRANSFORMER_BLOCK:
                if (l->causal)
                    break;
                return ty_fail(err, TY_EINVAL, NULL,
                               "layer %u (%s) is not causal: a model that "
                               "looks at later tokens cannot generate one "
                               "token at a time",
                               i, l->kind->name);
            default:
                return ty_fail(err, TY_EINVAL, NULL,
                               "layer %u (%s) has no decoding form yet; "
                               "generation runs embedding, "
                               "positional_embedding, dense, layernorm, "
                               "activations, attention, transformer_block "
                               "and lm_head",
                               i, l->kind->name);
        }
    }
    return TY_OK;
}

/* A row's widest value count at any layer but the head (whose logits
 * have a buffer of their own): an output, qkv, a block's MLP. */
static uint64_t row_width(const nn_arch *a)
{
    uint64_t w = 0;
    for (uint32_t i = 0; i < a->n_layers; i++) {
        const nn_layer *l = &a->layers[i];
        uint64_t o =
            l->out.ndim == 2 && l->type != NN_LAYER_LM_HEAD ? l->out.d[1] : 1;
        if (o > w)
            w = o;
        if (attends(l) && 3ull * l->in.d[1] > w)
            w = 3ull * l->in.d[1];
        if (l->type == NN_LAYER_TRANSFORMER_BLOCK && l->hidden > w)
            w = l->hidden;
    }
    return w;
}

/* The cache's floats for one attention layer: keys and values. */
static uint64_t layer_cache_floats(const nn_layer *l, uint32_t n_blocks,
                                   uint32_t bt)
{
    return 2ull * n_blocks * bt * l->in.d[1];
}

uint64_t nn_decoder_bytes(const nn_net *net, uint32_t max_rows,
                          uint32_t n_blocks, uint32_t block_tokens)
{
    const nn_arch *a = &net->arch;
    uint64_t floats = 0;
    for (uint32_t i = 0; i < a->n_layers; i++)
        if (attends(&a->layers[i]))
            floats += layer_cache_floats(&a->layers[i], n_blocks, block_tokens);
    const uint64_t w = row_width(a);
    const uint64_t tstride =
        block_tokens ? (a->input.d[0] + block_tokens - 1) / block_tokens : 0;
    /* x, y, qkv, att, t1, t2, logits, mean, rstd; ids, pos, tables */
    floats += (uint64_t)max_rows * (6 * w + a->num_outputs + 2 + 2 + tstride);
    return floats * sizeof(float);
}

/* ---- making one ---- */

static void *dev_alloc(nn_decoder *d, uint64_t floats, int *bad)
{
    void *p = d->be->alloc(d->ex, (size_t)(floats ? floats : 1) * 4);
    if (!p)
        *bad = 1;
    return p;
}

ty_status nn_decoder_create(const nn_net *net, uint32_t max_rows,
                            uint32_t n_blocks, uint32_t block_tokens,
                            nn_decoder **out, ty_err *err)
{
    *out = NULL;
    const nn_arch *a = &net->arch;
    ty_status s = check_layers(a, err);
    if (s != TY_OK)
        return s;
    if (!max_rows || !n_blocks || !block_tokens || block_tokens > 4096 ||
        n_blocks > (1u << 30))
        return ty_fail(err, TY_EINVAL, NULL,
                       "a decoder needs rows, blocks and block tokens (got "
                       "%u, %u, %u)",
                       max_rows, n_blocks, block_tokens);
    nn_decoder *d = calloc(1, sizeof *d);
    if (!d)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    d->net = net;
    d->a = a;
    d->be = a->be;
    d->ex = net->ex;
    d->max_rows = max_rows;
    d->n_blocks = n_blocks;
    d->bt = block_tokens;
    d->t = a->input.d[0];
    d->tstride = (d->t + block_tokens - 1) / block_tokens;
    d->width = row_width(a);
    d->kc = calloc(a->n_layers, sizeof *d->kc);
    d->vc = calloc(a->n_layers, sizeof *d->vc);
    d->free_ids = malloc((size_t)n_blocks * sizeof *d->free_ids);
    d->hmask = 1;
    while (d->hmask < n_blocks)
        d->hmask <<= 1;
    d->buckets = malloc((size_t)d->hmask * sizeof *d->buckets);
    d->hmask--;
    d->ref = calloc(n_blocks, sizeof *d->ref);
    d->gen = calloc(n_blocks, sizeof *d->gen);
    d->parent_gen = calloc(n_blocks, sizeof *d->parent_gen);
    d->tok = malloc((size_t)n_blocks * block_tokens * sizeof *d->tok);
    d->indexed = calloc(n_blocks, 1);
    d->key = calloc(n_blocks, sizeof *d->key);
    d->parent = calloc(n_blocks, sizeof *d->parent);
    d->hnext = calloc(n_blocks, sizeof *d->hnext);
    d->lru_prev = calloc(n_blocks, sizeof *d->lru_prev);
    d->lru_next = calloc(n_blocks, sizeof *d->lru_next);
    d->h_ids = malloc((size_t)max_rows * sizeof *d->h_ids);
    d->h_pos = malloc((size_t)max_rows * sizeof *d->h_pos);
    d->h_tables =
        malloc((size_t)max_rows * d->tstride * sizeof *d->h_tables + 1);
    int bad = !d->kc || !d->vc || !d->free_ids || !d->h_ids || !d->h_pos ||
              !d->h_tables || !d->buckets || !d->ref || !d->gen ||
              !d->parent_gen || !d->tok || !d->indexed || !d->key ||
              !d->parent || !d->hnext || !d->lru_prev || !d->lru_next;
    for (uint32_t i = 0; !bad && i < a->n_layers; i++)
        if (attends(&a->layers[i])) {
            const uint64_t half =
                layer_cache_floats(&a->layers[i], n_blocks, block_tokens) / 2;
            d->kc[i] = dev_alloc(d, half, &bad);
            d->vc[i] = dev_alloc(d, half, &bad);
        }
    const uint64_t rw = (uint64_t)max_rows * d->width;
    if (!bad) {
        d->x = dev_alloc(d, rw, &bad);
        d->y = dev_alloc(d, rw, &bad);
        d->qkv = dev_alloc(d, rw, &bad);
        d->att = dev_alloc(d, rw, &bad);
        d->t1 = dev_alloc(d, rw, &bad);
        d->t2 = dev_alloc(d, rw, &bad);
        d->logits = dev_alloc(d, (uint64_t)max_rows * a->num_outputs, &bad);
        d->mean = dev_alloc(d, max_rows, &bad);
        d->rstd = dev_alloc(d, max_rows, &bad);
        d->ids = dev_alloc(d, max_rows, &bad);
        d->pos = dev_alloc(d, max_rows, &bad);
        d->tables = dev_alloc(d, (uint64_t)max_rows * d->tstride, &bad);
    }
    if (bad) {
        nn_decoder_free(d);
        return ty_fail(err, TY_ENOMEM, NULL,
                       "out of memory for a decoder of %u blocks", n_blocks);
    }
    /* the pool: every block free, the lowest ids handed out first */
    for (uint32_t i = 0; i < n_blocks; i++)
        d->free_ids[i] = (int32_t)(n_blocks - 1 - i);
    d->n_free = n_blocks;
    for (uint32_t i = 0; i <= d->hmask; i++)
        d->buckets[i] = -1;
    d->lru_head = d->lru_tail = -1;
    *out = d;
    return TY_OK;
}

void nn_decoder_free(nn_decoder *d)
{
    if (!d)
        return;
    float *bufs[] = {d->x,  d->y,    d->qkv,  d->att,   d->t1,
                     d->t2, d->mean, d->rstd, d->logits};
    for (size_t i = 0; i < TY_ARRAY_LEN(bufs); i++)
        if (bufs[i])
            d->be->release(d->ex, bufs[i]);
    int32_t *ibufs[] = {d->ids, d->pos, d->tables};
    for (size_t i = 0; i < TY_ARRAY_LEN(ibufs); i++)
        if (ibufs[i])
            d->be->release(d->ex, ibufs[i]);
    for (uint32_t i = 0; d->kc && i < d->a->n_layers; i++) {
        if (d->kc[i])
            d->be->release(d->ex, d->kc[i]);
        if (d->vc[i])
            d->be->release(d->ex, d->vc[i]);
    }
    free(d->kc);
    free(d->vc);
    free(d->free_ids);
    free(d->buckets);
    free(d->ref);
    free(d->gen);
    free(d->parent_gen);
    free(d->tok);
    free(d->indexed);
    free(d->key);
    free(d->parent);
    free(d->hnext);
    free(d->lru_prev);
    free(d->lru_next);
    free(d->h_ids);
    free(d->h_pos);
    free(d->h_tables);
    free(d);
}

int nn_decoder_set_pool(nn_decoder *d, nn_pool *pool)
{
    if (!nn_backend_host_visible(d->be))
        return 0;
    d->own = (nn_exec){.pool = pool};
    d->ex = &d->own;
    return 1;
}

uint32_t nn_decoder_free_blocks(const nn_decoder *d)
{
    return d->n_free + d->n_lru;
}

uint32_t nn_decoder_cached_blocks(const nn_decoder *d) { return d->n_lru; }

/* ---- the prefix index ---- */

/* A full block's key: its ids chained onto the key of the blocks before
 * (0 before the first). Only a bucket's choice: a match compares ids. */
static uint64_t chain_key(uint64_t parent, const uint32_t *ids, uint32_t bt)
{
    uint64_t h = parent ^ 0x9e3779b97f4a7c15ull;
    for (uint32_t i = 0; i < bt; i++) {
        h = (h ^ ids[i]) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    return h;
}

static void lru_unlink(nn_decoder *d, int32_t b)
{
    const int32_t p = d->lru_prev[b], n = d->lru_next[b];
    if (p >= 0)
        d->lru_next[p] = n;
    else
        d->lru_head = n;
    if (n >= 0)
        d->lru_prev[n] = p;
    else
        d->lru_tail = p;
    d->n_lru--;
}

static void lru_push(nn_decoder *d, int32_t b)
{
    d->lru_prev[b] = d->lru_tail;
    d->lru_next[b] = -1;
    if (d->lru_tail >= 0)
        d->lru_next[d->lru_tail] = b;
    else
        d->lru_head = b;
    d->lru_tail = b;
    d->n_lru++;
}

/* The indexed block after parent (-1: a first block) whose ids are ids,
 * or -1. */
static int32_t index_find(const nn_decoder *d, uint64_t key, int32_t parent,
                          const uint32_t *ids)
{
    for (int32_t b = d->buckets[key & d->hmask]; b >= 0; b = d->hnext[b])
        if (d->key[b] == key && d->parent[b] == parent &&
            (parent < 0 || d->parent_gen[b] == d->gen[parent]) &&
            !memcmp(d->tok + (size_t)b * d->bt, ids, d->bt * sizeof *ids))
            return b;
    return -1;
}

static void index_add(nn_decoder *d, int32_t b, uint64_t key, int32_t parent,
                      const uint32_t *ids)
{
    d->indexed[b] = 1;
    d->key[b] = key;
    d->parent[b] = parent;
    d->parent_gen[b] = parent >= 0 ? d->gen[parent] : 0;
    memcpy(d->tok + (size_t)b * d->bt, ids, d->bt * sizeof *ids);
    int32_t *head = &d->buckets[key & d->hmask];
    d->hnext[b] = *head;
    *head = b;
}

static void index_remove(nn_decoder *d, int32_t b)
{
    int32_t *at = &d->buckets[d->key[b] & d->hmask];
    while (*at != b)
        at = &d->hnext[*at];
    *at = d->hnext[b];
    d->indexed[b] = 0;
    d->gen[b]++; /* blocks indexed after it no longer match */
}

/* A block for a sequence to write: a free one, else the indexed block
 * unused longest (evicted). The caller checked that one is there. */
static int32_t take_block(nn_decoder *d)
{
    int32_t b;
    if (d->n_free) {
        b = d->free_ids[--d->n_free];
    } else {
        b = d->lru_head;
        lru_unlink(d, b);
        index_remove(d, b);
    }
    d->ref[b] = 1;
    return b;
}

static void drop_block(nn_decoder *d, int32_t b)
{
    if (--d->ref[b])
        return;
    if (d->indexed[b])
        lru_push(d, b);
    else
        d->free_ids[d->n_free++] = b;
}

/* ---- sequences ---- */

static ty_status table_room(nn_decoder *d, nn_kv_seq *seq, uint32_t need,
                            ty_err *err)
{
    if (need <= seq->cap)
        return TY_OK;
    int32_t *b = realloc(seq->blocks, d->tstride * sizeof *b);
    if (!b)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    seq->blocks = b;
    seq->cap = d->tstride;
    return TY_OK;
}

ty_status nn_kv_seq_reserve(nn_decoder *d, nn_kv_seq *seq, uint32_t tokens,
                            ty_err *err)
{
    if (tokens > d->t)
        return ty_fail(err, TY_EINVAL, NULL,
                       "%u tokens are more than the model's context of %u",
                       tokens, d->t);
    const uint32_t need = (tokens + d->bt - 1) / d->bt;
    if (need <= seq->n_blocks)
        return TY_OK;
    const uint32_t avail = nn_decoder_free_blocks(d);
    if (need - seq->n_blocks > avail)
        return ty_fail(err, TY_ELIMIT, NULL,
                       "the cache has %u free blocks; %u more are needed",
                       avail, need - seq->n_blocks);
    ty_status s = table_room(d, seq, need, err);
    if (s != TY_OK)
        return s;
    while (seq->n_blocks < need)
        seq->blocks[seq->n_blocks++] = take_block(d);
    return TY_OK;
}

ty_status nn_kv_seq_reserve_prefix(nn_decoder *d, nn_kv_seq *seq,
                                   const uint32_t *ids, uint32_t n_prompt,
                                   uint32_t tokens, uint32_t *cached,
                                   ty_err *err)
{
    *cached = 0;
    if (seq->n_blocks)
        return ty_fail(err, TY_EINVAL, NULL,
                       "a sequence takes cached blocks only when it holds "
                       "none");
    if (n_prompt > tokens)
        return ty_fail(err, TY_EINVAL, NULL,
                       "a prompt of %u tokens is more than the %u reserved",
                       n_prompt, tokens);
    if (tokens > d->t)
        return ty_fail(err, TY_EINVAL, NULL,
                       "%u tokens are more than the model's context of %u",
                       tokens, d->t);
    const uint32_t need = (tokens + d->bt - 1) / d->bt;
    ty_status s = table_room(d, seq, need, err);
    if (s != TY_OK)
        return s;
    /* the longest indexed chain of the prompt's full blocks, short of
     * the block of its last token (that token must run for its logits) */
    const uint32_t most = n_prompt ? (n_prompt - 1) / d->bt : 0;
    uint32_t hit = 0, idle = 0;
    int32_t prev = -1;
    uint64_t key = 0;
    while (hit < most) {
        const uint32_t *t = ids + (size_t)hit * d->bt;
        key = chain_key(key, t, d->bt);
        const int32_t b = index_find(d, key, prev, t);
        if (b < 0)
            break;
        seq->blocks[hit++] = b;
        idle += !d->ref[b];
        prev = b;
    }
    const uint32_t avail = nn_decoder_free_blocks(d) - idle;
    if (need - hit > avail)
        return ty_fail(err, TY_ELIMIT, NULL,
                       "the cache has %u free blocks; %u more are needed",
                       avail, need - hit);
    for (uint32_t i = 0; i < hit; i++)
        if (!d->ref[seq->blocks[i]]++)
            lru_unlink(d, seq->blocks[i]);
    seq->n_blocks = hit;
    while (seq->n_blocks < need)
        seq->blocks[seq->n_blocks++] = take_block(d);
    seq->len = hit * d->bt;
    *cached = seq->len;
    return TY_OK;
}

void nn_kv_seq_publish(nn_decoder *d, const nn_kv_seq *seq, const uint32_t *ids,
                       uint32_t n_ids)
{
    uint32_t full = (n_ids < seq->len ? n_ids : seq->len) / d->bt;
    if (full > seq->n_blocks)
        full = seq->n_blocks;
    int32_t prev = -1;
    uint64_t key = 0;
    for (uint32_t j = 0; j < full; j++) {
        const uint32_t *t = ids + (size_t)j * d->bt;
        key = chain_key(key, t, d->bt);
        const int32_t b = seq->blocks[j];
        int32_t e = index_find(d, key, prev, t);
        if (e < 0) {
            if (d->indexed[b])
                return; /* indexed after a parent since reused */
            index_add(d, b, key, prev, t);
            e = b;
        }
        /* e may be another sequence's block of the same tokens: the
         * chain goes on through the indexed one */
        prev = e;
    }
}

void nn_kv_seq_release(nn_decoder *d, nn_kv_seq *seq)
{
    /* the last blocks first: a chain's tail is evicted before its head */
    for (uint32_t i = seq->n_blocks; i-- > 0;)
        drop_block(d, seq->blocks[i]);
    free(seq->blocks);
    memset(seq, 0, sizeof *seq);
}

/* ---- a step ---- */

/* Checks the rows and stages their ids, positions and tables. */
static ty_status stage(nn_decoder *d, const nn_decode_row *rows, uint32_t n,
                       ty_err *err)
{
    const uint32_t vocab = d->a->layers[0].vocab;
    if (n > d->max_rows)
        return ty_fail(err, TY_EINVAL, NULL,
                       "%u rows are more than the decoder's %u", n,
                       d->max_rows);
    for (uint32_t r = 0; r < n; r++) {
        const nn_decode_row *w = &rows[r];
        uint32_t want = w->seq->len;
        for (uint32_t q = 0; q < r; q++)
            want += rows[q].seq == w->seq;
        if (w->token >= vocab)
            return ty_fail(err, TY_EINVAL, NULL,
                           "row %u: token %u is outside the vocabulary of %u",
                           r, w->token, vocab);
        if (w->pos != want)
            return ty_fail(err, TY_EINVAL, NULL,
                           "row %u: position %u, but its sequence's next is "
                           "%u",
                           r, w->pos, want);
        if (w->pos >= w->seq->n_blocks * d->bt)
            return ty_fail(err, TY_EINVAL, NULL,
                           "row %u: position %u has no block reserved", r,
                           w->pos);
        d->h_ids[r] = (int32_t)w->token;
        d->h_pos[r] = (int32_t)w->pos;
        int32_t *tab = d->h_tables + (size_t)r * d->tstride;
        memcpy(tab, w->seq->blocks, w->seq->n_blocks * sizeof *tab);
        for (uint32_t k = w->seq->n_blocks; k < d->tstride; k++)
            tab[k] = 0; /* never read: positions past the reserve */
    }
    d->be->upload(d->ex, d->ids, d->h_ids, n * sizeof *d->ids);
    d->be->upload(d->ex, d->pos, d->h_pos, n * sizeof *d->pos);
    d->be->upload(d->ex, d->tables, d->h_tables,
                  (size_t)n * d->tstride * sizeof *d->tables);
    return TY_OK;
}

/* The tensor of l named suffix (NULL when it has none: a bias left out). */
static const float *tensor(const nn_layer *l, const float *params,
                           const char *suffix)
{
    for (uint32_t i = 0; i < l->n_tensors; i++)
        if (!strcmp(l->tensors[i].suffix, suffix))
            return params + l->tensors[i].offset;
    return NULL;
}

/* out (n, u) = x (n, k) W^T + b on rows_gemm, whose sums do not depend on
 * the row count (a BLAS may sum a row's products in another order when
 * the row count changes), so a row's numbers do not depend on the step's
 * other rows, while the weights are read once for several rows. */
static void linear(const nn_decoder *d, float *out, const float *x,
                   const float *w, const float *b, uint32_t n, uint32_t u,
                   uint32_t k)
{
    if (b)
        d->be->bias_rows(d->ex, out, b, n, u);
    d->be->rows_gemm(d->ex, out, x, w, n, u, k, b ? 1.0f : 0.0f);
}

/* An attention on x (n, C) into out, for layer i, whose tensors' names
 * start with pre ("" or "attn."). */
static void attention(nn_decoder *d, uint32_t i, const float *params,
                      const char *pre, const float *x, float *out, uint32_t n)
{
    const nn_layer *l = &d->a->layers[i];
    const uint32_t c = l->in.d[1], h = l->heads;
    char name[48];
    const float *w[4];
    static const char *const names[4] = {"in_proj_weight", "in_proj_bias",
                                         "out_proj.weight", "out_proj.bias"};
    for (int k = 0; k < 4; k++) {
        snprintf(name, sizeof name, "%s%s", pre, names[k]);
        w[k] = tensor(l, params, name);
    }
    linear(d, d->qkv, x, w[0], w[1], n, 3 * c, c);
    d->be->kv_store(d->ex, d->kc[i], d->vc[i], d->qkv + c, d->qkv + 2 * c,
                    3 * c, d->tables, d->tstride, d->pos, n, c, d->bt);
    d->be->kv_attention(d->ex, d->att, d->qkv, 3 * c, d->kc[i], d->vc[i],
                        d->tables, d->tstride, d->pos, n, h, c / h, d->bt);
    linear(d, out, d->att, w[2], w[3], n, c, c);
}

/* Layer i on the rows: x (n, its input width) into out. */
static void layer_step(nn_decoder *d, uint32_t i, const float *x, float *out,
                       uint32_t n)
{
    const nn_layer *l = &d->a->layers[i];
    const float *p = d->net->params + l->param_offset;
    const uint32_t c = l->in.ndim == 2 ? l->in.d[1] : 0;
    const size_t len = (size_t)n * (l->out.ndim == 2 ? l->out.d[1] : 0);
    switch (l->type) {
        case NN_LAYER_EMBEDDING:
            d->be->embedding_forward(d->ex, out, d->ids, p, n, l->dim);
            break;
        case NN_LAYER_POSITIONAL_EMBEDDING:
            d->be->embedding_forward(d->ex, d->t1, d->pos, p, n, c);
            d->be->add(d->ex, out, x, d->t1, len);
            break;
        case NN_LAYER_DENSE:
            linear(d, out, x, p, tensor(l, p, "bias"), n, l->units, c);
            break;
        case NN_LAYER_LAYERNORM:
            d->be->layernorm_forward(d->ex, out, d->mean, d->rstd, x, p, p + c,
                                     n, c, l->eps);
            break;
        case NN_LAYER_DROPOUT: nn_copy_floats(d->be, d->ex, out, x, len); break;
        case NN_LAYER_ATTENTION: attention(d, i, p, "", x, out, n); break;
        case NN_LAYER_TRANSFORMER_BLOCK: {
            const size_t nc = (size_t)n * c;
            const uint32_t r = l->hidden;
            /* x1 = x + attn(ln_1(x)) in t2; out = x1 + mlp(ln_2(x1)) */
            d->be->layernorm_forward(d->ex, d->t1, d->mean, d->rstd, x,
                                     tensor(l, p, "ln_1.weight"),
                                     tensor(l, p, "ln_1.bias"), n, c, l->eps);
            attention(d, i, p, "attn.", d->t1, d->t2, n);
            d->be->add(d->ex, d->t2, d->t2, x, nc);
            d->be->layernorm_forward(d->ex, d->t1, d->mean, d->rstd, d->t2,
                                     tensor(l, p, "ln_2.weight"),
                                     tensor(l, p, "ln_2.bias"), n, c, l->eps);
            linear(d, d->qkv, d->t1, tensor(l, p, "mlp.0.weight"),
                   tensor(l, p, "mlp.0.bias"), n, r, c);
            d->be->act_forward(d->ex, NN_OP_GELU_TANH, d->att, d->qkv,
                               (size_t)n * r);
            linear(d, out, d->att, tensor(l, p, "mlp.2.weight"),
                   tensor(l, p, "mlp.2.bias"), n, c, r);
            d->be->add(d->ex, out, out, d->t2, nc);
            break;
        }
        case NN_LAYER_LM_HEAD:
            linear(d, out, x, l->tie ? p + l->tie_delta : p, NULL, n, l->vocab,
                   c);
            break;
        default: /* activations */
            d->be->act_forward(d->ex, nn_layer_act_op(l), out, x, len);
            break;
    }
}

ty_status nn_decoder_step(nn_decoder *d, const nn_decode_row *rows, uint32_t n,
                          float *out, ty_err *err)
{
    if (!n)
        return TY_OK;
    ty_status s = stage(d, rows, n, err);
    if (s != TY_OK)
        return s;
    const nn_arch *a = d->a;
    float *x = d->x, *y = d->y;
    for (uint32_t i = 0; i < a->n_layers; i++) {
        float *dst = i + 1 == a->n_layers ? d->logits : y;
        layer_step(d, i, x, dst, n);
        y = x;
        x = dst;
    }
    const size_t bytes = (size_t)n * a->num_outputs * sizeof *out;
    if (nn_backend_host_visible(d->be))
        memcpy(out, d->logits, bytes);
    else
        d->be->download(d->ex, out, d->logits, bytes);
    if ((s = d->be->status(d->ex, err)) != TY_OK)
        return s;
    for (uint32_t r = 0; r < n; r++)
        if (rows[r].pos + 1 > rows[r].seq->len)
            rows[r].seq->len = rows[r].pos + 1;
    return TY_OK;
}
