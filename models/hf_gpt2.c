/*
 * hf_gpt2.c - GPT-2 checkpoints in Hugging Face's layout, in and out (see
 * hf_gpt2.h for the mapping).
 *
 * Both directions walk one table (gpt2_map): for every tensor of the model,
 * its name in each layout, its trainyard shape and whether it is a Conv1D
 * weight stored transposed in HF's. Import reads the checkpoint through
 * st_open (mapped, every offset checked), widens F16/BF16 to F32 and
 * transposes into one buffer; tensors already right are written straight
 * from the mapping. The written file is a plain trainyard model, so the
 * engine's loader checks it as it checks a trained one (NaN, shapes
 * against the spec).
 *
 * Export reads a trainyard model file, checks that its spec is one the
 * layout can say (the spec hf_gpt2_convert writes, trained or imported),
 * and writes GPT2LMHeadModel's names. An imported model keeps the upload's
 * config.json ("trainyard.hf_config") so that export gives back the keys
 * trainyard does not model (bos_token_id, dropout rates), and its
 * tokenizer.json as the model's tokenizer ("trainyard.tokenizer":
 * {"type": "huggingface", "tokenizer_json": {...}}, the description
 * models/data/tokenizer.h loads), which export gives back.
 */
#include "models/hf_gpt2.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonutil.h"
#include "models/safetensors.h"

#define CONFIG "config"
#define WEIGHTS "weights"
#define TOKENIZER "tokenizer"
#define LAYOUT "layout"
/* The transformer_block's LayerNorms use PyTorch's default eps (the
 * contract's block has no eps key), which is GPT-2's. */
#define BLOCK_EPS 1e-5
#define NAME_LEN 96
#define HF_PREFIX "transformer."

/* ---- the shared table ---- */

typedef struct {
    uint32_t n_embd, n_head, n_layer, n_positions, vocab, n_inner;
    int tied;
} gpt2_dims;

typedef struct {
    char hf[NAME_LEN]; /* without the "transformer." prefix, except lm_head */
    char ty[NAME_LEN];
    uint32_t ndim;
    uint64_t rows, cols; /* trainyard's shape; cols 0 for a vector */
    int transpose;       /* HF stores (cols, rows) */
} gpt2_entry;

typedef struct {
    gpt2_entry *e;
    size_t n;
} gpt2_map;

static void map_add(gpt2_map *m, const char *hf, const char *ty, uint64_t rows,
                    uint64_t cols, int transpose)
{
    gpt2_entry *e = &m->e[m->n++];
    snprintf(e->hf, sizeof e->hf, "%s", hf);
    snprintf(e->ty, sizeof e->ty, "%s", ty);
    e->ndim = cols ? 2 : 1;
    e->rows = rows;
    e->cols = cols;
    e->transpose = transpose;
}

/* Every tensor of the model described by d, in trainyard's state-dict
 * order. NULL entries when out of memory. */
static ty_status map_build(const gpt2_dims *d, gpt2_map *m, ty_err *err)
{
    static const struct {
        const char *hf, *ty;
        int rows, cols; /* 1: C, 3: 3C, 4: R (n_inner), 0: none */
        int transpose;
    } block[] = {
        {"ln_1.weight", "ln_1.weight", 1, 0, 0},
        {"ln_1.bias", "ln_1.bias", 1, 0, 0},
        {"attn.c_attn.weight", "attn.in_proj_weight", 3, 1, 1},
        {"attn.c_attn.bias", "attn.in_proj_bias", 3, 0, 0},
        {"attn.c_proj.weight", "attn.out_proj.weight", 1, 1, 1},
        {"attn.c_proj.bias", "attn.out_proj.bias", 1, 0, 0},
        {"ln_2.weight", "ln_2.weight", 1, 0, 0},
        {"ln_2.bias", "ln_2.bias", 1, 0, 0},
        {"mlp.c_fc.weight", "mlp.0.weight", 4, 1, 1},
        {"mlp.c_fc.bias", "mlp.0.bias", 4, 0, 0},
        {"mlp.c_proj.weight", "mlp.2.weight", 1, 4, 1},
        {"mlp.c_proj.bias", "mlp.2.bias", 1, 0, 0},
    };
    const uint64_t c = d->n_embd;
    const uint64_t size[5] = {0, c, 0, 3 * c, d->n_inner};
    size_t n = 5 + TY_ARRAY_LEN(block) * d->n_layer;
    char hf[NAME_LEN], ty[NAME_LEN];
    m->n = 0;
    m->e = calloc(n, sizeof *m->e);
    if (!m->e)
        return ty_fail(err, TY_ENOMEM, NULL,
                       "out of memory converting the GPT-2 model");
    map_add(m, "wte.weight", "0.weight", d->vocab, c, 0);
    map_add(m, "wpe.weight", "1.weight", d->n_positions, c, 0);
    for (uint32_t i = 0; i < d->n_layer; i++)
        for (size_t k = 0; k < TY_ARRAY_LEN(block); k++) {
            snprintf(hf, sizeof hf, "h.%u.%s", i, block[k].hf);
            snprintf(ty, sizeof ty, "%u.%s", 2 + i, block[k].ty);
            map_add(m, hf, ty, size[block[k].rows], size[block[k].cols],
                    block[k].transpose);
        }
    snprintf(ty, sizeof ty, "%u.weight", 2 + d->n_layer);
    map_add(m, "ln_f.weight", ty, c, 0, 0);
    snprintf(ty, sizeof ty, "%u.bias", 2 + d->n_layer);
    map_add(m, "ln_f.bias", ty, c, 0, 0);
    if (!d->tied) {
        snprintf(ty, sizeof ty, "%u.weight", 3 + d->n_layer);
        map_add(m, "lm_head.weight", ty, d->vocab, c, 0);
    }
    return TY_OK;
}

/* lm_head.weight sits outside "transformer." in GPT2LMHeadModel. */
static void hf_name(const gpt2_entry *e, const char *prefix, char *buf,
                    size_t n)
{
    if (!strcmp(e->hf, "lm_head.weight"))
        prefix = "";
    snprintf(buf, n, "%s%s", prefix, e->hf);
}

/* The spec of d: what the import writes and what the export accepts. */
static json_t *spec_of(const gpt2_dims *d)
{
    json_t *layers = json_array();
    int bad = !layers;
    bad |= json_array_append_new(layers,
                                 json_pack("{s:s, s:I}", "type", "embedding",
                                           "dim", (json_int_t)d->n_embd));
    bad |= json_array_append_new(
        layers, json_pack("{s:s}", "type", "positional_embedding"));
    for (uint32_t i = 0; i < d->n_layer; i++)
        bad |= json_array_append_new(
            layers,
            json_pack("{s:s, s:I, s:I, s:f, s:b}", "type", "transformer_block",
                      "heads", (json_int_t)d->n_head, "mlp_ratio",
                      (json_int_t)(d->n_inner / d->n_embd), "dropout", 0.0,
                      "causal", 1));
    bad |= json_array_append_new(
        layers, json_pack("{s:s, s:f}", "type", "layernorm", "eps", BLOCK_EPS));
    bad |=
        json_array_append_new(layers, json_pack("{s:s, s:b}", "type", "lm_head",
                                                "tie_embedding", d->tied));
    if (bad) {
        json_decref(layers);
        return NULL;
    }
    return json_pack("{s:o}", "layers", layers);
}

/* ---- config.json ---- */

/* A positive integer key (or, when alt is not NULL and key is absent, alt:
 * n_ctx for older files' n_positions). */
static ty_status config_uint(const json_t *c, const char *key, const char *alt,
                             int64_t max, uint32_t *out, ty_err *err)
{
    int64_t v;
    if (alt && !json_object_get(c, key) && json_object_get(c, alt))
        key = alt;
    ty_status st = tyjson_get_int(c, key, CONFIG, 1, 1, max, 0, &v, err);
    if (st == TY_OK)
        *out = (uint32_t)v;
    return st;
}

/* A boolean key that must be `want` (or absent) for the model to be
 * GPT-2 as trainyard computes it. */
static ty_status config_flag(const json_t *c, const char *key, int want,
                             const char *why, ty_err *err)
{
    int v;
    ty_status st = tyjson_get_bool(c, key, CONFIG, 0, want, &v, err);
    if (st != TY_OK)
        return st;
    char field[64];
    tyjson_path(field, sizeof field, CONFIG, key);
    if (v != want)
        return ty_fail(err, TY_EINVAL, field,
                       "config %s is %s: %s; trainyard's GPT-2 cannot compute "
                       "it",
                       key, v ? "true" : "false", why);
    return TY_OK;
}

static ty_status config_parse(const json_t *c, gpt2_dims *d, ty_err *err)
{
    const char *s;
    double eps;
    ty_status st;
    if (!json_is_object(c))
        return ty_fail(err, TY_EINVAL, CONFIG,
                       "config must be a JSON object (a GPT-2 config.json)");
    if ((st = tyjson_get_string(c, "model_type", CONFIG, 0, 64, "gpt2", &s,
                                err)) != TY_OK)
        return st;
    if (strcmp(s, "gpt2"))
        return ty_fail(err, TY_EINVAL, CONFIG ".model_type",
                       "config model_type is '%.64s'; layout " HF_GPT2_LAYOUT
                       " takes a GPT-2 checkpoint (model_type 'gpt2')",
                       s);
    if ((st = config_uint(c, "n_embd", NULL, 65536, &d->n_embd, err)) ||
        (st = config_uint(c, "n_head", NULL, 65536, &d->n_head, err)) ||
        (st = config_uint(c, "n_layer", NULL, NN_MAX_LAYERS - 4, &d->n_layer,
                          err)) ||
        (st = config_uint(c, "n_positions", "n_ctx", 1 << 20, &d->n_positions,
                          err)) ||
        (st = config_uint(c, "vocab_size", NULL, TY_DS_MAX_CLASSES, &d->vocab,
                          err)))
        return st;
    if (d->n_embd % d->n_head)
        return ty_fail(err, TY_EINVAL, CONFIG ".n_head",
                       "config n_head (%u) must divide n_embd (%u)", d->n_head,
                       d->n_embd);
    const json_t *inner = json_object_get(c, "n_inner");
    d->n_inner = 4 * d->n_embd;
    if (inner && !json_is_null(inner)) {
        uint32_t v;
        if ((st = config_uint(c, "n_inner", NULL, 1 << 24, &v, err)) != TY_OK)
            return st;
        if (v % d->n_embd)
            return ty_fail(err, TY_EINVAL, CONFIG ".n_inner",
                           "config n_inner (%u) must be a multiple of n_embd "
                           "(%u): the block's MLP width is mlp_ratio x n_embd",
                           v, d->n_embd);
        d->n_inner = v;
    }
    if ((st = tyjson_get_string(c, "activation_function", CONFIG, 0, 64,
                                "gelu_new", &s, err)) != TY_OK)
        return st;
    if (strcmp(s, "gelu_new") && strcmp(s, "gelu_pytorch_tanh"))
        return ty_fail(err, TY_EINVAL, CONFIG ".activation_function",
                       "config activation_function is '%.64s'; the "
                       "transformer_block's MLP is the tanh GELU (gelu_new or "
                       "gelu_pytorch_tanh)",
                       s);
    if ((st = tyjson_get_number(c, "layer_norm_epsilon", CONFIG, 0, 0, 1,
                                BLOCK_EPS, &eps, err)) != TY_OK)
        return st;
    if (eps != BLOCK_EPS)
        return ty_fail(err, TY_EINVAL, CONFIG ".layer_norm_epsilon",
                       "config layer_norm_epsilon is %g; the "
                       "transformer_block's LayerNorms use 1e-5",
                       eps);
    if ((st = config_flag(c, "scale_attn_weights", 1,
                          "attention scores not divided by sqrt(head size)",
                          err)) ||
        (st = config_flag(c, "scale_attn_by_inverse_layer_idx", 0,
                          "attention scores divided by the layer's index",
                          err)) ||
        (st = config_flag(c, "reorder_and_upcast_attn", 0,
                          "attention computed in another order", err)) ||
        (st = config_flag(c, "add_cross_attention", 0,
                          "blocks with cross-attention", err)) ||
        (st = tyjson_get_bool(c, "tie_word_embeddings", CONFIG, 0, 1, &d->tied,
                              err)))
        return st;
    return TY_OK;
}

/* ---- tokenizer.json ---- */

/* Checks that every id the tokenizer can produce (its model's vocab and
 * its added tokens) is below vocab: a larger one would index past the
 * embedding. */
static ty_status tokenizer_check(const json_t *t, uint32_t vocab, ty_err *err)
{
    const json_t *model = json_object_get(t, "model");
    const json_t *v = json_object_get(model, "vocab");
    const json_t *added = json_object_get(t, "added_tokens");
    const char *key;
    const json_t *id;
    size_t i;
    if (!json_is_object(t) || !json_is_object(v))
        return ty_fail(err, TY_EINVAL, TOKENIZER,
                       "tokenizer must be a Hugging Face tokenizer.json: an "
                       "object whose model has a vocab object");
    json_object_foreach ((json_t *)v, key, id)
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= vocab)
            return ty_fail(err, TY_EINVAL, TOKENIZER,
                           "tokenizer model.vocab['%.60s'] is not an id below "
                           "the model's vocab_size %u",
                           key, vocab);
    json_array_foreach (added, i, id) {
        const json_t *n = json_object_get(id, "id");
        if (!json_is_integer(n) || json_integer_value(n) < 0 ||
            json_integer_value(n) >= vocab)
            return ty_fail(err, TY_EINVAL, TOKENIZER,
                           "tokenizer added_tokens[%zu].id is not an id below "
                           "the model's vocab_size %u",
                           i, vocab);
    }
    return TY_OK;
}

/* ---- import ---- */

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f,
             m = h & 0x3ff, bits;
    if (e == 0x1f)
        bits = sign | 0x7f800000u | (m << 13);
    else if (e)
        bits = sign | ((e + 112) << 23) | (m << 13);
    else if (!m)
        bits = sign;
    else { /* subnormal: normalize */
        e = 113;
        while (!(m & 0x400)) {
            m <<= 1;
            e--;
        }
        bits = sign | (e << 23) | ((m & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Element i of t (F32, F16 or BF16) as float; the data may be unaligned. */
static float elem(const st_tensor *t, uint64_t i)
{
    const unsigned char *p = t->data;
    uint16_t h;
    uint32_t bits;
    float f;
    switch (t->dtype) {
        case ST_F16: memcpy(&h, p + 2 * i, 2); return f16_to_f32(h);
        case ST_BF16:
            memcpy(&h, p + 2 * i, 2);
            bits = (uint32_t)h << 16;
            memcpy(&f, &bits, sizeof f);
            return f;
        default: memcpy(&f, p + 4 * i, sizeof f); return f;
    }
}

/* t as e's trainyard tensor (transposed when e says) into out. */
static void convert_tensor(const st_tensor *t, const gpt2_entry *e, float *out)
{
    if (!e->transpose) {
        for (uint64_t i = 0; i < t->numel; i++)
            out[i] = elem(t, i);
        return;
    }
    /* HF (cols, rows) -> trainyard (rows, cols) */
    for (uint64_t r = 0; r < e->rows; r++)
        for (uint64_t c = 0; c < e->cols; c++)
            out[r * e->cols + c] = elem(t, c * e->rows + r);
}

static void format_shape(char *buf, size_t n, const uint64_t *d, uint32_t nd)
{
    size_t o = 0;
    int w = snprintf(buf, n, "(");
    o += w > 0 ? (size_t)w : 0;
    for (uint32_t i = 0; i < nd && o < n; i++) {
        w = snprintf(buf + o, n - o, "%s%llu", i ? ", " : "",
                     (unsigned long long)d[i]);
        o += w > 0 ? (size_t)w : 0;
    }
    if (o < n)
        snprintf(buf + o, n - o, ")");
}

/* Whether name is a mask buffer an older checkpoint carries in block i
 * ("h.<i>.attn.bias", "h.<i>.attn.masked_bias"): not a weight, dropped. */
static int is_mask_buffer(const char *name, const char *prefix)
{
    size_t p = strlen(prefix);
    if (strncmp(name, prefix, p) || strncmp(name + p, "h.", 2))
        return 0;
    const char *s = name + p + 2;
    if (*s < '0' || *s > '9')
        return 0;
    while (*s >= '0' && *s <= '9')
        s++;
    return !strcmp(s, ".attn.bias") || !strcmp(s, ".attn.masked_bias");
}

/* The HF tensor of entry e, checked: present, a float dtype, the shape
 * HF stores it in. TY_EFORMAT naming it otherwise. */
static ty_status find_hf(const st_file *f, const gpt2_entry *e,
                         const char *prefix, const st_tensor **out, ty_err *err)
{
    char name[NAME_LEN + 16], want[64], got[96];
    hf_name(e, prefix, name, sizeof name);
    const st_tensor *t = st_find(f, name);
    uint64_t shape[2] = {e->rows, e->cols};
    if (e->transpose) {
        shape[0] = e->cols;
        shape[1] = e->rows;
    }
    format_shape(want, sizeof want, shape, e->ndim);
    if (!t)
        return ty_fail(err, TY_EFORMAT, WEIGHTS,
                       "tensor %s %s is missing from the GPT-2 weights", name,
                       want);
    if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16)
        return ty_fail(err, TY_EFORMAT, WEIGHTS,
                       "tensor %s is %s; GPT-2 weights must be F32, F16 or "
                       "BF16",
                       name, st_dtype_name(t->dtype));
    if (t->ndim != e->ndim || t->shape[0] != shape[0] ||
        (e->ndim == 2 && t->shape[1] != shape[1])) {
        format_shape(got, sizeof got, t->shape, t->ndim);
        return ty_fail(err, TY_EFORMAT, WEIGHTS,
                       "tensor %s is %s; config.json makes it %s", name, got,
                       want);
    }
    *out = t;
    return TY_OK;
}

/* Every tensor of f is one of m's, a mask buffer, or a tied lm_head.weight
 * equal to wte; anything else is a model that is not GPT2LMHeadModel. */
static ty_status check_extra(const st_file *f, const gpt2_map *m,
                             const char *prefix, const gpt2_dims *d,
                             ty_err *err)
{
    char name[NAME_LEN + 16];
    for (size_t i = 0; i < f->count; i++) {
        const st_tensor *t = &f->tensors[i];
        int known = is_mask_buffer(t->name, prefix);
        for (size_t k = 0; k < m->n && !known; k++) {
            hf_name(&m->e[k], prefix, name, sizeof name);
            known = !strcmp(name, t->name);
        }
        if (known)
            continue;
        if (d->tied && !strcmp(t->name, "lm_head.weight")) {
            /* Tied: GPT2LMHeadModel uses wte; a different lm_head would
             * mean the file's model is not what it says. */
            const st_tensor *wte = NULL;
            ty_status st = find_hf(f, &m->e[0], prefix, &wte, err);
            if (st != TY_OK)
                return st;
            if (t->ndim != 2 || t->shape[0] != wte->shape[0] ||
                t->shape[1] != wte->shape[1] ||
                (t->dtype != ST_F32 && t->dtype != ST_F16 &&
                 t->dtype != ST_BF16))
                return ty_fail(err, TY_EFORMAT, WEIGHTS,
                               "tensor lm_head.weight is not shaped as %swte."
                               "weight (config tie_word_embeddings is true)",
                               prefix);
            for (uint64_t j = 0; j < t->numel; j++)
                if (elem(t, j) != elem(wte, j))
                    return ty_fail(err, TY_EFORMAT, WEIGHTS,
                                   "tensor lm_head.weight differs from "
                                   "%swte.weight although config "
                                   "tie_word_embeddings is true",
                                   prefix);
            continue;
        }
        return ty_fail(err, TY_EFORMAT, WEIGHTS,
                       "tensor %.100s is not part of a GPT-2 language model "
                       "(GPT2LMHeadModel) with this config",
                       t->name);
    }
    return TY_OK;
}

/* The model file's __metadata__ (strings). */
static json_t *import_metadata(const gpt2_dims *d, const json_t *config,
                               const json_t *tokenizer, ty_err *err)
{
    char num[16], shape[32];
    snprintf(num, sizeof num, "%u", d->vocab);
    snprintf(shape, sizeof shape, "[%u]", d->n_positions);
    json_t *spec = spec_of(d);
    char *spec_s = spec ? tyjson_dumps(spec, JSON_COMPACT) : NULL;
    char *config_s = tyjson_dumps(config, JSON_COMPACT | JSON_SORT_KEYS);
    json_t *desc = tokenizer ? json_pack("{s:s, s:O}", "type", "huggingface",
                                         "tokenizer_json", tokenizer)
                             : NULL;
    char *tok_s = desc ? tyjson_dumps(desc, JSON_COMPACT) : NULL;
    json_t *meta = NULL;
    if (spec_s && config_s && (!tokenizer || tok_s))
        meta =
            json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s}",
                      "trainyard.format", "1", "trainyard.spec", spec_s,
                      "trainyard.task", "language_modeling",
                      "trainyard.input_shape", shape, "trainyard.num_outputs",
                      num, "trainyard.classes", "null", "trainyard.preprocess",
                      "{\"kind\":\"none\"}", "trainyard.tokenizer",
                      tok_s ? tok_s : "null", "trainyard.hf_config", config_s);
    json_decref(desc);
    json_decref(spec);
    free(spec_s);
    free(config_s);
    free(tok_s);
    if (!meta)
        ty_fail(err, TY_ENOMEM, NULL,
                "out of memory converting the GPT-2 "
                "model");
    return meta;
}

ty_status hf_gpt2_convert(const char *weights_path, const json_t *config,
                          const json_t *tokenizer, const char *out_path,
                          ty_err *err)
{
    gpt2_dims d = {0};
    gpt2_map m = {0};
    st_file f = {0};
    st_out_tensor *out = NULL;
    float *buf = NULL;
    json_t *meta = NULL;
    ty_status st;
    if ((st = config_parse(config, &d, err)) != TY_OK)
        return st;
    if (tokenizer && (st = tokenizer_check(tokenizer, d.vocab, err)) != TY_OK)
        return st;
    if ((st = map_build(&d, &m, err)) != TY_OK)
        return st;
    if ((st = st_open(weights_path, &f, err)) != TY_OK) {
        if (st == TY_EFORMAT)
            ty_err_prefix(err, "the weights are not a valid safetensors file");
        snprintf(err->field, sizeof err->field, WEIGHTS);
        goto done;
    }
    const char *prefix = st_find(&f, HF_PREFIX "wte.weight") ? HF_PREFIX : "";
    if (!st_find(&f, HF_PREFIX "wte.weight") && !st_find(&f, "wte.weight")) {
        st = ty_fail(err, TY_EFORMAT, WEIGHTS,
                     "tensor " HF_PREFIX "wte.weight (or wte.weight) (%u, %u) "
                     "is missing: the weights are not a GPT-2 checkpoint",
                     d.vocab, d.n_embd);
        goto done;
    }
    const st_tensor **src = NULL;
    out = calloc(m.n, sizeof *out);
    src = calloc(m.n, sizeof *src);
    if (!out || !src) {
        free(src);
        st = ty_fail(err, TY_ENOMEM, NULL,
                     "out of memory converting the "
                     "GPT-2 model");
        goto done;
    }
    /* Which tensors need a copy (a transpose or a wider dtype), and how
     * many floats those take. */
    uint64_t floats = 0;
    for (size_t k = 0; k < m.n; k++) {
        if ((st = find_hf(&f, &m.e[k], prefix, &src[k], err)) != TY_OK) {
            free(src);
            goto done;
        }
        if (m.e[k].transpose || src[k]->dtype != ST_F32)
            floats += src[k]->numel;
    }
    if ((st = check_extra(&f, &m, prefix, &d, err)) != TY_OK) {
        free(src);
        goto done;
    }
    buf = floats ? malloc(floats * sizeof *buf) : NULL;
    if (floats && !buf) {
        free(src);
        st = ty_fail(err, TY_ENOMEM, NULL,
                     "out of memory converting the "
                     "GPT-2 model");
        goto done;
    }
    float *next = buf;
    for (size_t k = 0; k < m.n; k++) {
        const gpt2_entry *e = &m.e[k];
        out[k] = (st_out_tensor){.name = e->ty,
                                 .dtype = ST_F32,
                                 .ndim = e->ndim,
                                 .shape = {e->rows, e->cols},
                                 .data = src[k]->data};
        if (e->transpose || src[k]->dtype != ST_F32) {
            convert_tensor(src[k], e, next);
            out[k].data = next;
            next += src[k]->numel;
        }
    }
    free(src);
    if (!(meta = import_metadata(&d, config, tokenizer, err))) {
        st = TY_ENOMEM;
        goto done;
    }
    st = st_write(out_path, meta, out, m.n, err);
done:
    json_decref(meta);
    free(buf);
    free(out);
    st_close(&f);
    free(m.e);
    return st;
}

ty_status hf_gpt2_import(const char *weights_path, const json_t *config,
                         const json_t *tokenizer, const char *out_path,
                         nn_net **net, ty_err *err)
{
    *net = NULL;
    ty_status st =
        hf_gpt2_convert(weights_path, config, tokenizer, out_path, err);
    if (st != TY_OK)
        return st;
    st = nn_net_load(out_path, net, err);
    if (st == TY_EFORMAT || st == TY_ENOTFOUND) {
        ty_err_prefix(err, "the converted GPT-2 model does not load");
        snprintf(err->field, sizeof err->field, WEIGHTS);
        st = TY_EFORMAT;
    }
    return st;
}

/* ---- export ---- */

/* Fails the export: the model's spec has no GPT-2 equivalent. */
static ty_status not_gpt2(ty_err *err, const char *what)
{
    return ty_fail(err, TY_EINVAL, LAYOUT,
                   "layout " HF_GPT2_LAYOUT " needs a GPT: [embedding, "
                   "positional_embedding, transformer_block x N (causal, one "
                   "heads and mlp_ratio for all), layernorm (eps 1e-5), "
                   "lm_head]; %s",
                   what);
}

/* The layer of type `type` at index i of layers, or NULL with the refusal
 * in err. */
static const json_t *spec_layer(const json_t *layers, size_t i,
                                const char *type, ty_err *err)
{
    const json_t *l = json_array_get(layers, i);
    const char *t = json_string_value(json_object_get(l, "type"));
    char why[160];
    if (t && !strcmp(t, type))
        return l;
    snprintf(why, sizeof why, "layer %zu is %.40s, not %s", i, t ? t : "?",
             type);
    not_gpt2(err, why);
    return NULL;
}

/* A number key as an integer (mlp_ratio 4 or 4.0), or def when absent;
 * -1 when neither. */
static int64_t spec_int(const json_t *l, const char *key, int64_t def)
{
    const json_t *v = json_object_get(l, key);
    if (!v)
        return def;
    double x = json_number_value(v);
    if (!json_is_number(v) || x != floor(x) || x < 1 || x > (1 << 24))
        return -1;
    return (int64_t)x;
}

/* GPT-2's dimensions from a trainyard model's metadata, or the refusal. */
static ty_status dims_from_model(const st_file *f, gpt2_dims *d, ty_err *err)
{
    const char *task = st_meta(f, "trainyard.task");
    const char *outs = st_meta(f, "trainyard.num_outputs");
    const char *spec_s = st_meta(f, "trainyard.spec");
    const char *shape_s = st_meta(f, "trainyard.input_shape");
    if (!task || strcmp(task, "language_modeling"))
        return not_gpt2(err, "the model is not a language model");
    json_t *spec = spec_s ? json_loads(spec_s, 0, NULL) : NULL;
    json_t *shape = shape_s ? json_loads(shape_s, 0, NULL) : NULL;
    const json_t *layers = json_object_get(spec, "layers");
    size_t n = json_array_size(layers);
    ty_status st = TY_OK;
    const json_t *l;
    long v = outs ? strtol(outs, NULL, 10) : 0;
    if (!json_is_array(layers) || !json_is_array(shape) ||
        json_array_size(shape) != 1 || v < 1 || v > TY_DS_MAX_CLASSES) {
        st = ty_fail(err, TY_EFORMAT, NULL,
                     "the model's metadata is damaged (spec, input_shape or "
                     "num_outputs)");
        goto done;
    }
    d->vocab = (uint32_t)v;
    d->n_positions = (uint32_t)json_integer_value(json_array_get(shape, 0));
    if (n < 5) {
        st = not_gpt2(err, "the model has too few layers");
        goto done;
    }
    d->n_layer = (uint32_t)(n - 4);
    if (!(l = spec_layer(layers, 0, "embedding", err)) ||
        !spec_layer(layers, 1, "positional_embedding", err)) {
        st = TY_EINVAL;
        goto done;
    }
    d->n_embd = (uint32_t)spec_int(l, "dim", -1);
    for (size_t i = 2; i < n - 2; i++) {
        char why[128];
        if (!(l = spec_layer(layers, i, "transformer_block", err))) {
            st = TY_EINVAL;
            goto done;
        }
        int64_t heads = spec_int(l, "heads", -1),
                ratio = spec_int(l, "mlp_ratio", 4);
        const json_t *causal = json_object_get(l, "causal");
        if (heads < 1 || ratio < 1 || (causal && !json_is_true(causal)) ||
            (i > 2 && ((uint32_t)heads != d->n_head ||
                       (uint32_t)ratio * d->n_embd != d->n_inner))) {
            snprintf(why, sizeof why,
                     "layer %zu (transformer_block) is not causal or differs "
                     "from layer 2 in heads or mlp_ratio",
                     i);
            st = not_gpt2(err, why);
            goto done;
        }
        d->n_head = (uint32_t)heads;
        d->n_inner = (uint32_t)ratio * d->n_embd;
    }
    if (!(l = spec_layer(layers, n - 2, "layernorm", err))) {
        st = TY_EINVAL;
        goto done;
    }
    const json_t *eps = json_object_get(l, "eps");
    if (eps && json_number_value(eps) != BLOCK_EPS) {
        st = not_gpt2(err, "the final layernorm's eps is not 1e-5");
        goto done;
    }
    if (!(l = spec_layer(layers, n - 1, "lm_head", err))) {
        st = TY_EINVAL;
        goto done;
    }
    d->tied = !json_is_false(json_object_get(l, "tie_embedding"));
    if (d->n_embd < 1 || d->n_head < 1 || d->n_positions < 1)
        st = ty_fail(err, TY_EFORMAT, NULL, "the model's spec is damaged");
done:
    json_decref(spec);
    json_decref(shape);
    return st;
}

/* config.json for d: the imported one (when there is one) with the
 * architecture's keys set from the model. */
static json_t *export_config(const st_file *f, const gpt2_dims *d)
{
    const char *orig = st_meta(f, "trainyard.hf_config");
    json_t *c = orig ? json_loads(orig, 0, NULL) : NULL;
    if (!json_is_object(c)) {
        json_decref(c);
        c = json_pack("{s:f, s:f, s:f, s:f}", "attn_pdrop", 0.0, "embd_pdrop",
                      0.0, "resid_pdrop", 0.0, "initializer_range", 0.02);
    }
    if (!c)
        return NULL;
    const char *act =
        json_string_value(json_object_get(c, "activation_function"));
    if (!act || strcmp(act, "gelu_pytorch_tanh"))
        act = "gelu_new";
    int bad = json_object_set_new(c, "activation_function", json_string(act));
    bad |= json_object_set_new(c, "architectures",
                               json_pack("[s]", "GPT2LMHeadModel"));
    bad |= json_object_set_new(c, "model_type", json_string("gpt2"));
    bad |= json_object_set_new(c, "n_embd", json_integer(d->n_embd));
    bad |= json_object_set_new(c, "n_head", json_integer(d->n_head));
    bad |= json_object_set_new(c, "n_layer", json_integer(d->n_layer));
    bad |= json_object_set_new(c, "n_positions", json_integer(d->n_positions));
    if (json_object_get(c, "n_ctx"))
        bad |= json_object_set_new(c, "n_ctx", json_integer(d->n_positions));
    bad |= json_object_set_new(c, "vocab_size", json_integer(d->vocab));
    bad |= json_object_set_new(
        c, "n_inner",
        d->n_inner == 4 * d->n_embd ? json_null() : json_integer(d->n_inner));
    bad |= json_object_set_new(c, "layer_norm_epsilon", json_real(BLOCK_EPS));
    bad |= json_object_set_new(c, "scale_attn_weights", json_true());
    bad |=
        json_object_set_new(c, "scale_attn_by_inverse_layer_idx", json_false());
    bad |= json_object_set_new(c, "reorder_and_upcast_attn", json_false());
    bad |= json_object_set_new(c, "tie_word_embeddings", json_boolean(d->tied));
    bad |= json_object_set_new(c, "torch_dtype", json_string("float32"));
    if (bad) {
        json_decref(c);
        return NULL;
    }
    return c;
}

/* The model's tensors in HF's layout written to path. */
static ty_status export_weights(const st_file *f, const gpt2_dims *d,
                                const char *path, ty_err *err)
{
    gpt2_map m = {0};
    st_out_tensor *out = NULL;
    float *buf = NULL;
    json_t *meta = NULL;
    char(*names)[NAME_LEN + 16] = NULL;
    ty_status st = map_build(d, &m, err);
    if (st != TY_OK)
        return st;
    uint64_t floats = 0;
    for (size_t k = 0; k < m.n; k++)
        if (m.e[k].transpose)
            floats += m.e[k].rows * m.e[k].cols;
    out = calloc(m.n, sizeof *out);
    names = calloc(m.n, sizeof *names);
    buf = floats ? malloc(floats * sizeof *buf) : NULL;
    /* transformers' safetensors loader wants format "pt". */
    meta = json_pack("{s:s}", "format", "pt");
    if (!out || !names || (floats && !buf) || !meta) {
        st = ty_fail(err, TY_ENOMEM, NULL,
                     "out of memory exporting the GPT-2 model");
        goto done;
    }
    float *next = buf;
    for (size_t k = 0; k < m.n; k++) {
        const gpt2_entry *e = &m.e[k];
        const st_tensor *t = st_find(f, e->ty);
        if (!t || t->dtype != ST_F32 || t->ndim != e->ndim ||
            t->shape[0] != e->rows ||
            (e->ndim == 2 && t->shape[1] != e->cols)) {
            st =
                ty_fail(err, TY_EFORMAT, NULL,
                        "the model's tensor %s is missing or misshapen", e->ty);
            goto done;
        }
        hf_name(e, HF_PREFIX, names[k], sizeof names[k]);
        out[k] = (st_out_tensor){.name = names[k],
                                 .dtype = ST_F32,
                                 .ndim = e->ndim,
                                 .shape = {e->rows, e->cols},
                                 .data = t->data};
        if (e->transpose) {
            /* trainyard (rows, cols) -> HF (cols, rows) */
            for (uint64_t c = 0; c < e->cols; c++)
                for (uint64_t r = 0; r < e->rows; r++)
                    next[c * e->rows + r] = elem(t, r * e->cols + c);
            out[k].shape[0] = e->cols;
            out[k].shape[1] = e->rows;
            out[k].data = next;
            next += e->rows * e->cols;
        }
    }
    st = st_write(path, meta, out, m.n, err);
done:
    json_decref(meta);
    free(names);
    free(buf);
    free(out);
    free(m.e);
    return st;
}

/* The model's tokenizer.json into *out (NULL when its tokenizer is not a
 * Hugging Face one: a byte or learned BPE tokenizer has no such file). */
static ty_status export_tokenizer(const st_file *f, json_t **out, ty_err *err)
{
    const char *text = st_meta(f, "trainyard.tokenizer");
    *out = NULL;
    if (!text)
        return TY_OK;
    json_t *desc = json_loads(text, JSON_DECODE_ANY, NULL);
    if (!desc)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "the model's tokenizer metadata is damaged");
    const char *type = json_string_value(json_object_get(desc, "type"));
    json_t *tj = NULL;
    if (type && !strcmp(type, "huggingface"))
        tj = json_object_get(desc, "tokenizer_json");
    else if (json_object_get(desc, "model")) /* a bare tokenizer.json */
        tj = desc;
    if (json_is_object(tj))
        *out = json_incref(tj);
    json_decref(desc);
    return TY_OK;
}

ty_status hf_gpt2_export(const char *model_path, const char *weights_out,
                         json_t **config, json_t **tokenizer, ty_err *err)
{
    st_file f = {0};
    gpt2_dims d = {0};
    json_t *c = NULL, *t = NULL;
    ty_status st = st_open(model_path, &f, err);
    if (config)
        *config = NULL;
    if (tokenizer)
        *tokenizer = NULL;
    if (st != TY_OK)
        return st;
    if ((st = dims_from_model(&f, &d, err)) != TY_OK)
        goto done;
    if (config && !(c = export_config(&f, &d))) {
        st = ty_fail(err, TY_ENOMEM, NULL,
                     "out of memory exporting the GPT-2 model");
        goto done;
    }
    if (tokenizer && (st = export_tokenizer(&f, &t, err)) != TY_OK)
        goto done;
    if (weights_out && (st = export_weights(&f, &d, weights_out, err)) != TY_OK)
        goto done;
    if (config)
        *config = c, c = NULL;
    if (tokenizer)
        *tokenizer = t, t = NULL;
done:
    json_decref(c);
    json_decref(t);
    st_close(&f);
    return st;
}
