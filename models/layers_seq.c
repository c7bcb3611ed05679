/*
 * layers_seq.c - the layers that turn tokens into sequences and back
 * (issue 31): embedding, positional_embedding, lm_head and sequence_pool.
 *
 * A language model's input is a window of T token ids, carried as float
 * values (exact below 2^24); the embedding turns it into a sequence (T, C)
 * (nn_shape.seq), which dense, layernorm, attention and transformer_block
 * map position by position, and lm_head turns into (T, vocabulary) logits.
 * The vocabulary is the dataset's (nn_layer.vocab, from the arch).
 *
 * A tied lm_head owns no parameters: it multiplies by the embedding's
 * weight and adds its gradient there (nn_layer.tie_delta, set by
 * nn_seq_tie once the whole list is planned), as GPT-2 shares wte.
 */
#include "models/nn_internal.h"

#include <stdio.h>
#include <string.h>

#include "common/jsonutil.h"

#define SEQ_MAX_DIM 65536u
#define SEQ_MAX_VOCAB (1 << 24) /* ids are exact as floats below 2^24 */

static ty_status need_vocab(const nn_layer *l, ty_err *err)
{
    if (l->vocab)
        return TY_OK;
    return ty_fail(err, TY_EINVAL, "type",
                   "%s needs token ids: train it on a text or tokens dataset "
                   "(task language_modeling), at the top level of the model",
                   l->kind->name);
}

static ty_status need_seq(const nn_layer *l, ty_err *err)
{
    if (l->in.seq && l->in.ndim == 2)
        return TY_OK;
    char shape[96];
    nn_shape_format(&l->in, shape, sizeof shape);
    return ty_fail(err, TY_EINVAL, "",
                   "its input has shape %s but %s needs a sequence (T, C); "
                   "put an embedding layer before it",
                   shape, l->kind->name);
}

/* GPT-2's initialisation for token and position tables: normal(0, 0.02). */
static void init_normal(float *x, uint64_t n, ty_rng *rng)
{
    for (uint64_t i = 0; i < n; i++)
        x[i] = 0.02f * ty_rng_normal(rng);
}

/* ---- embedding {dim} [nn.Embedding(V, dim)]: (T) ids -> (T, dim) ---- */

static const char *const embedding_keys[] = {"type", "dim", "vocab_size", NULL};

/* vocab_size: a language model's is its dataset's (num_outputs), so the
 * spec may only repeat it and the normalized spec leaves it out (model
 * identities stay as they were); any other model names it (the server
 * fills it from a text dataset's vocabulary). */
static ty_status embedding_parse(nn_layer *l, const json_t *obj, json_t *norm,
                                 ty_err *err)
{
    int64_t dim, vocab;
    ty_status st;
    if ((st = tyjson_get_int(obj, "dim", "", 1, 1, SEQ_MAX_DIM, 0, &dim,
                             err)) != TY_OK ||
        (st = tyjson_get_int(obj, "vocab_size", "", 0, 1, SEQ_MAX_VOCAB, 0,
                             &vocab, err)) != TY_OK)
        return st;
    if (l->vocab && vocab && (uint64_t)vocab != l->vocab)
        return ty_fail(err, TY_EINVAL, "vocab_size",
                       "vocab_size %lld differs from the dataset's "
                       "vocabulary of %u tokens; leave it out",
                       (long long)vocab, l->vocab);
    if (!l->vocab) {
        if (!vocab)
            return ty_fail(err, TY_EINVAL, "vocab_size",
                           "embedding needs token ids: train it on a text "
                           "dataset (a CSV with text_column, or task "
                           "language_modeling), which gives it vocab_size");
        l->vocab = (uint32_t)vocab;
        json_object_set_new(norm, "vocab_size", json_integer(vocab));
    }
    l->dim = (uint32_t)dim;
    json_object_set_new(norm, "dim", json_integer(dim));
    return TY_OK;
}

static ty_status embedding_plan(nn_layer *l, ty_err *err)
{
    if (l->in.ndim != 1 || l->in.seq) {
        char shape[96];
        nn_shape_format(&l->in, shape, sizeof shape);
        return ty_fail(err, TY_EINVAL, "",
                       "its input has shape %s but embedding takes the "
                       "window of token ids; make it the first layer",
                       shape);
    }
    const uint32_t t = l->in.d[0];
    l->out = (nn_shape){.ndim = 2, .d = {t, l->dim}, .seq = 1};
    l->tensors[0] = (nn_tensor_desc){.suffix = "weight",
                                     .ndim = 2,
                                     .shape = {l->vocab, l->dim},
                                     .numel = (uint64_t)l->vocab * l->dim};
    l->n_tensors = 1;
    l->scratch_per_example = t; /* the ids as int32 */
    return TY_OK;
}

static void embedding_init(const nn_layer *l, float *params, float *buffers,
                           ty_rng *rng)
{
    init_normal(params, l->tensors[0].numel, rng);
}

static void embedding_forward(const nn_layer *l, const nn_pass *p,
                              const float *params, const float *in, float *out,
                              float *scratch)
{
    const size_t rows = (size_t)p->n * l->in.d[0];
    int32_t *ids = (int32_t *)scratch;
    /* An id outside the vocabulary (callers check; this keeps the gather
     * in bounds whatever comes) reads row 0. */
    p->be->to_ids(p->ex, ids, in, rows, l->vocab, 0);
    p->be->embedding_forward(p->ex, out, ids, params, (uint32_t)rows, l->dim);
    /* Padding (-1, after the text) is embedded as id 0 and masked by
     * length downstream. */
    if (p->lens)
        p->be->seq_lens(p->ex, p->lens, in, p->n, l->in.d[0]);
}

static void embedding_backward(const nn_layer *l, const nn_pass *p,
                               const float *params, float *grads,
                               const float *in, const float *out,
                               const float *dout, float *din,
                               const float *scratch)
{
    const size_t rows = (size_t)p->n * l->in.d[0];
    p->be->embedding_backward(p->ex, grads, dout, (const int32_t *)scratch,
                              (uint32_t)rows, l->vocab, l->dim);
    /* Ids have no gradient. */
    if (din)
        p->be->zero(p->ex, din, rows * sizeof *din);
}

const nn_layer_kind nn_embedding_kind = {
    .name = "embedding",
    .keys = embedding_keys,
    .parse = embedding_parse,
    .plan = embedding_plan,
    .init = embedding_init,
    .forward = embedding_forward,
    .backward = embedding_backward,
};

/* ---- positional_embedding {}: x (T, C) + a learned (T, C) table, as
 * GPT-2's wpe over positions 0..T-1 ---- */

static const char *const posemb_keys[] = {"type", NULL};

static ty_status posemb_plan(nn_layer *l, ty_err *err)
{
    ty_status st = need_seq(l, err);
    if (st != TY_OK)
        return st;
    l->out = l->in;
    l->tensors[0] =
        (nn_tensor_desc){.suffix = "weight",
                         .ndim = 2,
                         .shape = {l->in.d[0], l->in.d[1]},
                         .numel = (uint64_t)l->in.d[0] * l->in.d[1]};
    l->n_tensors = 1;
    return TY_OK;
}

static void posemb_init(const nn_layer *l, float *params, float *buffers,
                        ty_rng *rng)
{
    init_normal(params, l->tensors[0].numel, rng);
}

static void posemb_forward(const nn_layer *l, const nn_pass *p,
                           const float *params, const float *in, float *out,
                           float *scratch)
{
    const uint32_t tc = (uint32_t)l->tensors[0].numel;
    p->be->bias_rows(p->ex, out, params, p->n, tc);
    p->be->add(p->ex, out, out, in, (size_t)p->n * tc);
}

static void posemb_backward(const nn_layer *l, const nn_pass *p,
                            const float *params, float *grads, const float *in,
                            const float *out, const float *dout, float *din,
                            const float *scratch)
{
    const uint32_t tc = (uint32_t)l->tensors[0].numel;
    p->be->bias_grad(p->ex, grads, dout, p->n, tc);
    if (din)
        nn_copy_floats(p->be, p->ex, din, dout, (size_t)p->n * tc);
}

const nn_layer_kind nn_positional_embedding_kind = {
    .name = "positional_embedding",
    .keys = posemb_keys,
    .plan = posemb_plan,
    .init = posemb_init,
    .forward = posemb_forward,
    .backward = posemb_backward,
};

/* ---- lm_head {tie_embedding (true)}: (T, C) -> (T, V) logits = x W^T,
 * W (V, C): the embedding's weight when tied, else its own ---- */

static const char *const lm_head_keys[] = {"type", "tie_embedding", NULL};

static ty_status lm_head_parse(nn_layer *l, const json_t *obj, json_t *norm,
                               ty_err *err)
{
    int tie;
    ty_status st;
    if ((st = need_vocab(l, err)) != TY_OK ||
        (st = tyjson_get_bool(obj, "tie_embedding", "", 0, 1, &tie, err)) !=
            TY_OK)
        return st;
    l->tie = tie;
    json_object_set_new(norm, "tie_embedding", json_boolean(tie));
    return TY_OK;
}

static ty_status lm_head_plan(nn_layer *l, ty_err *err)
{
    ty_status st = need_seq(l, err);
    if (st != TY_OK)
        return st;
    const uint32_t c = l->in.d[1];
    l->out = (nn_shape){.ndim = 2, .d = {l->in.d[0], l->vocab}, .seq = 1};
    l->n_tensors = 0;
    if (!l->tie) {
        l->tensors[0] = (nn_tensor_desc){.suffix = "weight",
                                         .ndim = 2,
                                         .shape = {l->vocab, c},
                                         .numel = (uint64_t)l->vocab * c};
        l->n_tensors = 1;
    }
    return TY_OK;
}

static void lm_head_init(const nn_layer *l, float *params, float *buffers,
                         ty_rng *rng)
{
    if (!l->tie)
        init_normal(params, l->tensors[0].numel, rng);
}

static void lm_head_forward(const nn_layer *l, const nn_pass *p,
                            const float *params, const float *in, float *out,
                            float *scratch)
{
    const int rows = (int)(p->n * l->in.d[0]), c = (int)l->in.d[1];
    const float *w = l->tie ? params + l->tie_delta : params;
    p->be->gemm(p->ex, out, in, w, 0, 1, rows, (int)l->vocab, c, 1.0f, 0.0f);
}

static void lm_head_backward(const nn_layer *l, const nn_pass *p,
                             const float *params, float *grads, const float *in,
                             const float *out, const float *dout, float *din,
                             const float *scratch)
{
    const int rows = (int)(p->n * l->in.d[0]), c = (int)l->in.d[1];
    const float *w = l->tie ? params + l->tie_delta : params;
    float *dw = l->tie ? grads + l->tie_delta : grads;
    /* dW (V, C) += dout^T (V, rows) x (rows, C) */
    p->be->gemm(p->ex, dw, dout, in, 1, 0, (int)l->vocab, c, rows, 1.0f, 1.0f);
    /* dx (rows, C) = dout (rows, V) W (V, C) */
    if (din)
        p->be->gemm(p->ex, din, dout, w, 0, 0, rows, c, (int)l->vocab, 1.0f,
                    0.0f);
}

const nn_layer_kind nn_lm_head_kind = {
    .name = "lm_head",
    .keys = lm_head_keys,
    .parse = lm_head_parse,
    .plan = lm_head_plan,
    .init = lm_head_init,
    .forward = lm_head_forward,
    .backward = lm_head_backward,
};

/* ---- sequence_pool {mode (mean)}: (T, C) -> (C) over the positions that
 * are not padding [mean: the masked average; first: position 0, as BERT's
 * [CLS]; last: the last token of the text] ---- */

static const char *const seqpool_keys[] = {"type", "mode", NULL};

static ty_status seqpool_parse(nn_layer *l, const json_t *obj, json_t *norm,
                               ty_err *err)
{
    static const char *const modes[] = {"mean", "first", "last"};
    const json_t *m = json_object_get(obj, "mode");
    size_t k = 0;
    if (m) {
        for (k = 0; k < TY_ARRAY_LEN(modes); k++)
            if (json_is_string(m) && !strcmp(json_string_value(m), modes[k]))
                break;
        if (k == TY_ARRAY_LEN(modes))
            return ty_fail(err, TY_EINVAL, "mode",
                           "mode must be \"mean\", \"first\" or \"last\"");
    }
    l->pool_mode = (nn_seq_pool_mode)k;
    json_object_set_new(norm, "mode", json_string(modes[k]));
    return TY_OK;
}

static ty_status seqpool_plan(nn_layer *l, ty_err *err)
{
    ty_status st = need_seq(l, err);
    if (st != TY_OK)
        return st;
    l->out = (nn_shape){.ndim = 1, .d = {l->in.d[1]}};
    return TY_OK;
}

static void seqpool_forward(const nn_layer *l, const nn_pass *p,
                            const float *params, const float *in, float *out,
                            float *scratch)
{
    p->be->seq_pool_forward(p->ex, out, in, p->lens, p->n, l->in.d[0],
                            l->in.d[1], l->pool_mode);
}

static void seqpool_backward(const nn_layer *l, const nn_pass *p,
                             const float *params, float *grads, const float *in,
                             const float *out, const float *dout, float *din,
                             const float *scratch)
{
    if (din)
        p->be->seq_pool_backward(p->ex, din, dout, p->lens, p->n, l->in.d[0],
                                 l->in.d[1], l->pool_mode);
}

const nn_layer_kind nn_sequence_pool_kind = {
    .name = "sequence_pool",
    .keys = seqpool_keys,
    .parse = seqpool_parse,
    .plan = seqpool_plan,
    .forward = seqpool_forward,
    .backward = seqpool_backward,
};

ty_status nn_seq_tie(nn_arch *arch, ty_err *err)
{
    int emb = -1;
    for (uint32_t i = 0; i < arch->n_layers; i++) {
        nn_layer *l = &arch->layers[i];
        if (l->type == NN_LAYER_EMBEDDING && emb < 0)
            emb = (int)i;
        if (l->type != NN_LAYER_LM_HEAD || !l->tie)
            continue;
        char field[160];
        snprintf(field, sizeof field, "%s.tie_embedding", l->path);
        if (emb < 0)
            return ty_fail(err, TY_EINVAL, field,
                           "layer %u (lm_head): tie_embedding needs an "
                           "embedding layer before it; add one or set "
                           "tie_embedding to false",
                           i);
        const nn_layer *e = &arch->layers[emb];
        if (e->dim != l->in.d[1])
            return ty_fail(err, TY_EINVAL, field,
                           "layer %u (lm_head): its input has %u channels "
                           "but the embedding it shares (layer %d) has dim "
                           "%u; make them equal or set tie_embedding to false",
                           i, l->in.d[1], emb, e->dim);
        l->tie_delta = (int64_t)e->param_offset - (int64_t)l->param_offset;
    }
    return TY_OK;
}
