/* test_hf_gpt2.c - the GPT-2 checkpoint conversion (models/hf_gpt2.c) on a
 * tiny synthetic checkpoint written here in transformers' layout: every
 * tensor renamed, every Conv1D weight transposed value for value, F16 and
 * BF16 widened exactly, the spec and metadata the config gives, and export
 * giving back the same tensors bit for bit. Then each refusal: a config
 * GPT2LMHeadModel would compute differently, a tensor missing, misshapen,
 * of another dtype or of another model, a tied lm_head that differs, a
 * tokenizer with ids past the vocabulary, and an export of a model that is
 * not a GPT. The engine's loader is not involved (hf_gpt2_convert writes
 * the file only): the parity test (tests/parity/hf_gpt2.py) loads and runs
 * it against transformers. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/hf_gpt2.h"
#include "models/safetensors.h"
#include "testutil.h"

#define C 4
#define HEADS 2
#define L 2
#define T 3
#define V 5
#define MAXT 64

/* HF's tensors of a block, with trainyard's name and whether HF stores
 * the weight transposed; written out independently of the converter. */
static const struct {
    const char *hf, *ty;
    int transpose;
} block_map[] = {
    {"ln_1.weight", "ln_1.weight", 0},
    {"ln_1.bias", "ln_1.bias", 0},
    {"attn.c_attn.weight", "attn.in_proj_weight", 1},
    {"attn.c_attn.bias", "attn.in_proj_bias", 0},
    {"attn.c_proj.weight", "attn.out_proj.weight", 1},
    {"attn.c_proj.bias", "attn.out_proj.bias", 0},
    {"ln_2.weight", "ln_2.weight", 0},
    {"ln_2.bias", "ln_2.bias", 0},
    {"mlp.c_fc.weight", "mlp.0.weight", 1},
    {"mlp.c_fc.bias", "mlp.0.bias", 0},
    {"mlp.c_proj.weight", "mlp.2.weight", 1},
    {"mlp.c_proj.bias", "mlp.2.bias", 0},
};

/* One tensor of the synthetic checkpoint. */
typedef struct {
    char hf[64], ty[64];
    int transpose;
    uint32_t ndim;
    uint64_t shape[2]; /* HF's */
    uint64_t numel;
    float v[256];
} tensor;

typedef struct {
    const char *prefix; /* "transformer." or "" */
    st_dtype dtype;     /* F32, F16 or BF16 */
    uint32_t inner;     /* MLP width */
    int mask_buffers;   /* adds h.i.attn.bias, as older files have */
    int lm_head;        /* 0: absent, 1: equal to wte, 2: different */
    const char *drop;   /* an HF name (no prefix) left out */
    const char *grow;   /* an HF name (no prefix) one row longer */
    const char *extra;  /* a tensor GPT2LMHeadModel does not have */
    st_dtype drop_to;   /* with `grow` unset: `drop`'s dtype instead */
} ckpt_opts;

static tensor tensors[MAXT];
static size_t n_tensors;

/* A value exact in F16 and BF16, distinct within any tensor of <= 97
 * values and from one tensor to the next. */
static float value(size_t k, uint64_t i)
{
    return (float)((k * 13 + i) % 97) / 16.0f - 3.0f;
}

static void add(const char *hf, const char *ty, int transpose, uint64_t a,
                uint64_t b)
{
    tensor *t = &tensors[n_tensors];
    snprintf(t->hf, sizeof t->hf, "%s", hf);
    snprintf(t->ty, sizeof t->ty, "%s", ty);
    t->transpose = transpose;
    t->ndim = b ? 2 : 1;
    t->shape[0] = a;
    t->shape[1] = b;
    t->numel = a * (b ? b : 1);
    assert_true(t->numel <= 256);
    for (uint64_t i = 0; i < t->numel; i++)
        t->v[i] = value(n_tensors, i);
    n_tensors++;
}

/* The model's tensors in HF's shapes (inner: the MLP width). */
static void make_tensors(uint32_t inner)
{
    char hf[64], ty[64];
    n_tensors = 0;
    add("wte.weight", "0.weight", 0, V, C);
    add("wpe.weight", "1.weight", 0, T, C);
    for (int i = 0; i < L; i++)
        for (size_t k = 0; k < TY_ARRAY_LEN(block_map); k++) {
            const char *s = block_map[k].hf;
            uint64_t a = C, b = 0;
            if (!strcmp(s, "attn.c_attn.weight"))
                b = 3 * C;
            else if (!strcmp(s, "attn.c_attn.bias"))
                a = 3 * C;
            else if (!strcmp(s, "attn.c_proj.weight"))
                b = C;
            else if (!strcmp(s, "mlp.c_fc.weight"))
                b = inner;
            else if (!strcmp(s, "mlp.c_fc.bias"))
                a = inner;
            else if (!strcmp(s, "mlp.c_proj.weight"))
                a = inner, b = C;
            snprintf(hf, sizeof hf, "h.%d.%s", i, s);
            snprintf(ty, sizeof ty, "%d.%s", 2 + i, block_map[k].ty);
            add(hf, ty, block_map[k].transpose, a, b);
        }
    snprintf(ty, sizeof ty, "%d.weight", 2 + L);
    add("ln_f.weight", ty, 0, C, 0);
    snprintf(ty, sizeof ty, "%d.bias", 2 + L);
    add("ln_f.bias", ty, 0, C, 0);
}

static uint16_t f32_to_f16(float f) /* exact for the test's values */
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, e = (x >> 23) & 0xff, m = x & 0x7fffff;
    if (!e && !m)
        return (uint16_t)sign;
    return (uint16_t)(sign | ((e - 112) << 10) | (m >> 13));
}

/* Writes the checkpoint as opts says into dir/name. */
static void write_ckpt(const char *path, const ckpt_opts *o)
{
    static unsigned char data[MAXT + 8][1024];
    static char names[MAXT + 8][96];
    st_out_tensor out[MAXT + 8];
    size_t n = 0;
    for (size_t k = 0; k < n_tensors + 3; k++) {
        tensor extra_t = {0};
        const tensor *t = k < n_tensors ? &tensors[k] : NULL;
        const char *prefix = o->prefix;
        if (k == n_tensors) { /* lm_head */
            if (!o->lm_head)
                continue;
            extra_t = tensors[0];
            snprintf(extra_t.hf, sizeof extra_t.hf, "lm_head.weight");
            if (o->lm_head == 2)
                extra_t.v[3] += 1.0f;
            t = &extra_t;
            prefix = "";
        } else if (k == n_tensors + 1) {
            if (!o->extra)
                continue;
            extra_t = tensors[n_tensors - 1];
            snprintf(extra_t.hf, sizeof extra_t.hf, "%s", o->extra);
            t = &extra_t;
            prefix = "";
        } else if (k == n_tensors + 2) {
            if (!o->mask_buffers)
                continue;
            for (int i = 0; i < L; i++) {
                snprintf(names[n], sizeof names[n], "%sh.%d.attn.bias",
                         o->prefix, i);
                memset(data[n], 0, 4 * T * T);
                out[n] =
                    (st_out_tensor){names[n], ST_F32, 4, {1, 1, T, T}, data[n]};
                n++;
            }
            continue;
        }
        if (o->drop && !strcmp(t->hf, o->drop) && !o->drop_to)
            continue;
        snprintf(names[n], sizeof names[n], "%s%s", prefix, t->hf);
        st_dtype dt = o->dtype;
        if (o->drop && !strcmp(t->hf, o->drop))
            dt = o->drop_to;
        out[n] = (st_out_tensor){
            names[n], dt, t->ndim, {t->shape[0], t->shape[1]}, data[n]};
        uint64_t numel = t->numel;
        if (o->grow && !strcmp(t->hf, o->grow)) {
            out[n].shape[0]++;
            numel += t->ndim == 2 ? t->shape[1] : 1;
        }
        for (uint64_t i = 0; i < numel; i++) {
            float f = i < t->numel ? t->v[i] : 0.0f;
            if (dt == ST_F16) {
                uint16_t h = f32_to_f16(f);
                memcpy(data[n] + 2 * i, &h, 2);
            } else if (dt == ST_BF16) {
                uint32_t x;
                memcpy(&x, &f, 4);
                uint16_t h = (uint16_t)(x >> 16);
                memcpy(data[n] + 2 * i, &h, 2);
            } else if (dt == ST_I32) {
                int32_t x = (int32_t)f;
                memcpy(data[n] + 4 * i, &x, 4);
            } else {
                memcpy(data[n] + 4 * i, &f, 4);
            }
        }
        n++;
    }
    json_t *meta = json_pack("{s:s}", "format", "pt");
    ty_err err = {0};
    assert_int_equal(st_write(path, meta, out, n, &err), TY_OK);
    json_decref(meta);
}

static json_t *base_config(void)
{
    json_t *c = json_pack(
        "{s:s, s:[s], s:i, s:i, s:i, s:i, s:i, s:n, s:s, s:f, s:b, s:b, s:b,"
        " s:i, s:i, s:f}",
        "model_type", "gpt2", "architectures", "GPT2LMHeadModel", "n_embd", C,
        "n_head", HEADS, "n_layer", L, "n_positions", T, "vocab_size", V,
        "n_inner", "activation_function", "gelu_new", "layer_norm_epsilon",
        1e-5, "scale_attn_weights", 1, "scale_attn_by_inverse_layer_idx", 0,
        "reorder_and_upcast_attn", 0, "bos_token_id", 4, "eos_token_id", 4,
        "resid_pdrop", 0.1);
    assert_non_null(c);
    return c;
}

static void paths(char *in, char *out, size_t n)
{
    snprintf(in, n, "%s/model.safetensors", tu_tmpdir);
    snprintf(out, n, "%s/converted.safetensors", tu_tmpdir);
}

/* Converts a checkpoint made with o and config; the status, err filled. */
static ty_status convert(const ckpt_opts *o, const json_t *config,
                         const json_t *tok, ty_err *err)
{
    char in[512], out[512];
    paths(in, out, sizeof in);
    make_tensors(o->inner ? o->inner : 4 * C);
    write_ckpt(in, o);
    remove(out);
    memset(err, 0, sizeof *err);
    ty_status st = hf_gpt2_convert(in, config, tok, out, err);
    if (st != TY_OK)
        assert_null(strstr(err->msg, tu_tmpdir));
    return st;
}

/* The converted file holds exactly the expected tensors, F32, with every
 * value at its transposed place. */
static void check_converted(uint32_t inner)
{
    char in[512], out[512];
    paths(in, out, sizeof in);
    st_file f = {0};
    ty_err err = {0};
    assert_int_equal(st_open(out, &f, &err), TY_OK);
    assert_int_equal(f.count, n_tensors);
    for (size_t k = 0; k < n_tensors; k++) {
        const tensor *t = &tensors[k];
        const st_tensor *o = st_find(&f, t->ty);
        if (!o)
            fail_msg("%s (from %s) is not in the converted file", t->ty, t->hf);
        assert_int_equal(o->dtype, ST_F32);
        assert_int_equal(o->ndim, t->ndim);
        uint64_t rows = t->transpose ? t->shape[1] : t->shape[0];
        uint64_t cols = t->transpose ? t->shape[0] : t->shape[1];
        assert_int_equal(o->shape[0], rows);
        if (t->ndim == 2)
            assert_int_equal(o->shape[1], cols);
        for (uint64_t i = 0; i < t->numel; i++) {
            float got, want = t->v[i];
            uint64_t at = i;
            if (t->transpose) /* HF [a][b] is trainyard [b][a] */
                at = (i % t->shape[1]) * t->shape[0] + i / t->shape[1];
            memcpy(&got, (const char *)o->data + 4 * at, 4);
            if (got != want)
                fail_msg("%s[%llu] is %g, not %g (%s[%llu])", t->ty,
                         (unsigned long long)at, got, want, t->hf,
                         (unsigned long long)i);
        }
    }
    /* The metadata: a language model with the config's spec. */
    assert_string_equal(st_meta(&f, "trainyard.task"), "language_modeling");
    assert_string_equal(st_meta(&f, "trainyard.input_shape"), "[3]");
    assert_string_equal(st_meta(&f, "trainyard.num_outputs"), "5");
    assert_string_equal(st_meta(&f, "trainyard.classes"), "null");
    json_t *spec = json_loads(st_meta(&f, "trainyard.spec"), 0, NULL);
    const json_t *layers = json_object_get(spec, "layers");
    assert_int_equal(json_array_size(layers), 4 + L);
    const char *types[] = {"embedding",         "positional_embedding",
                           "transformer_block", "transformer_block",
                           "layernorm",         "lm_head"};
    for (size_t i = 0; i < 4 + L; i++)
        assert_string_equal(json_string_value(json_object_get(
                                json_array_get(layers, i), "type")),
                            types[i]);
    assert_int_equal(
        json_integer_value(json_object_get(json_array_get(layers, 0), "dim")),
        C);
    const json_t *blk = json_array_get(layers, 2);
    assert_int_equal(json_integer_value(json_object_get(blk, "heads")), HEADS);
    assert_int_equal(json_integer_value(json_object_get(blk, "mlp_ratio")),
                     inner / C);
    assert_true(json_is_true(json_object_get(blk, "causal")));
    assert_true(json_is_true(
        json_object_get(json_array_get(layers, 5), "tie_embedding")));
    json_decref(spec);
    st_close(&f);
}

static void test_convert_prefixed(void **state)
{
    (void)state;
    ckpt_opts o = {.prefix = "transformer.", .dtype = ST_F32};
    json_t *c = base_config();
    ty_err err;
    assert_int_equal(convert(&o, c, NULL, &err), TY_OK);
    check_converted(4 * C);
    json_decref(c);
}

/* GPT2Model's names (the hub's gpt2), mask buffers, a tied lm_head equal to
 * wte, n_inner 8 (mlp_ratio 2). */
static void test_convert_bare_names(void **state)
{
    (void)state;
    ckpt_opts o = {.prefix = "",
                   .dtype = ST_F32,
                   .inner = 2 * C,
                   .mask_buffers = 1,
                   .lm_head = 1};
    json_t *c = base_config();
    json_object_set_new(c, "n_inner", json_integer(2 * C));
    json_object_del(c, "n_positions");
    json_object_set_new(c, "n_ctx", json_integer(T)); /* older files */
    ty_err err;
    assert_int_equal(convert(&o, c, NULL, &err), TY_OK);
    check_converted(2 * C);
    json_decref(c);
}

static void test_convert_half_precision(void **state)
{
    (void)state;
    json_t *c = base_config();
    ty_err err;
    ckpt_opts o = {.prefix = "transformer.", .dtype = ST_F16};
    assert_int_equal(convert(&o, c, NULL, &err), TY_OK);
    check_converted(4 * C);
    o.dtype = ST_BF16;
    assert_int_equal(convert(&o, c, NULL, &err), TY_OK);
    check_converted(4 * C);
    json_decref(c);
}

/* F16's edge values widen exactly: subnormals, the largest, -0, inf. */
static void test_f16_edges(void **state)
{
    (void)state;
    static const uint16_t h[V * C] = {0x0001, 0x03ff, 0x8400, 0x7bff, 0x3c00,
                                      0x8000, 0x7c00, 0xfc00, 0x3555, 0xc000};
    static const float want[10] = {5.9604644775390625e-8f,
                                   6.0975551605224609e-5f,
                                   -6.103515625e-5f,
                                   65504.0f,
                                   1.0f,
                                   -0.0f,
                                   INFINITY,
                                   -INFINITY,
                                   0.333251953125f,
                                   -2.0f};
    char in[512], out[512];
    paths(in, out, sizeof in);
    ckpt_opts o = {.prefix = "transformer.", .dtype = ST_F16};
    make_tensors(4 * C);
    write_ckpt(in, &o);
    /* Patch wte's first values in the written file: it is the first
     * tensor in header order only if its offset is found, so find it. */
    st_file f = {0};
    ty_err err = {0};
    assert_int_equal(st_open(in, &f, &err), TY_OK);
    const st_tensor *wte = st_find(&f, "transformer.wte.weight");
    assert_non_null(wte);
    long off = (long)((const char *)wte->data - (const char *)f.map);
    st_close(&f);
    FILE *fp = fopen(in, "r+b");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, off, SEEK_SET), 0);
    assert_int_equal(fwrite(h, 2, 10, fp), 10);
    fclose(fp);
    json_t *c = base_config();
    assert_int_equal(hf_gpt2_convert(in, c, NULL, out, &err), TY_OK);
    json_decref(c);
    assert_int_equal(st_open(out, &f, &err), TY_OK);
    const st_tensor *t = st_find(&f, "0.weight");
    for (int i = 0; i < 10; i++) {
        float got;
        memcpy(&got, (const char *)t->data + 4 * i, 4);
        assert_memory_equal(&got, &want[i], 4);
    }
    st_close(&f);
}

/* Export gives back the checkpoint's tensors bit for bit, under
 * GPT2LMHeadModel's names, and a config with the upload's other keys. */
static void test_export_round_trip(void **state)
{
    (void)state;
    ckpt_opts o = {.prefix = "", .dtype = ST_F32, .inner = 2 * C};
    json_t *c = base_config();
    json_object_set_new(c, "n_inner", json_integer(2 * C));
    json_t *tok = json_pack("{s:{s:s, s:{s:i, s:i}}, s:[{s:i, s:s}]}", "model",
                            "type", "BPE", "vocab", "a", 0, "b", 3,
                            "added_tokens", "id", 4, "content", "<|end|>");
    ty_err err;
    assert_int_equal(convert(&o, c, tok, &err), TY_OK);
    char in[512], conv[512], back[512];
    paths(in, conv, sizeof in);
    snprintf(back, sizeof back, "%s/back.safetensors", tu_tmpdir);
    /* The model's tokenizer is the description models/data/tokenizer.h
     * loads. */
    st_file m = {0};
    assert_int_equal(st_open(conv, &m, &err), TY_OK);
    json_t *desc = json_loads(st_meta(&m, "trainyard.tokenizer"), 0, NULL);
    assert_string_equal(json_string_value(json_object_get(desc, "type")),
                        "huggingface");
    assert_true(json_equal(json_object_get(desc, "tokenizer_json"), tok));
    json_decref(desc);
    st_close(&m);
    json_t *config = NULL, *tok_back = NULL;
    assert_int_equal(hf_gpt2_export(conv, back, &config, &tok_back, &err),
                     TY_OK);
    st_file f = {0};
    assert_int_equal(st_open(back, &f, &err), TY_OK);
    assert_int_equal(f.count, n_tensors);
    assert_string_equal(st_meta(&f, "format"), "pt");
    for (size_t k = 0; k < n_tensors; k++) {
        char name[96];
        snprintf(name, sizeof name, "transformer.%s", tensors[k].hf);
        const st_tensor *t = st_find(&f, name);
        if (!t)
            fail_msg("%s is not exported", name);
        assert_int_equal(t->dtype, ST_F32);
        assert_int_equal(t->ndim, tensors[k].ndim);
        assert_int_equal(t->shape[0], tensors[k].shape[0]);
        assert_int_equal(t->nbytes, 4 * tensors[k].numel);
        assert_memory_equal(t->data, tensors[k].v, t->nbytes);
    }
    st_close(&f);
    assert_int_equal(json_integer_value(json_object_get(config, "n_inner")),
                     2 * C);
    assert_int_equal(json_integer_value(json_object_get(config, "n_layer")), L);
    assert_int_equal(
        json_integer_value(json_object_get(config, "bos_token_id")), 4);
    assert_true(json_is_true(json_object_get(config, "tie_word_embeddings")));
    assert_true(json_equal(tok, tok_back));
    json_decref(config);
    json_decref(tok_back);
    json_decref(tok);
    json_decref(c);
}

/* A config key set to v gives a TY_EINVAL naming "config.<key>". */
static void expect_config_refused(const char *key, json_t *v, const char *says)
{
    ckpt_opts o = {.prefix = "transformer.", .dtype = ST_F32};
    json_t *c = base_config();
    if (v)
        json_object_set_new(c, key, v);
    else
        json_object_del(c, key);
    ty_err err;
    assert_int_equal(convert(&o, c, NULL, &err), TY_EINVAL);
    char field[128];
    snprintf(field, sizeof field, "config.%s", key);
    assert_string_equal(err.field, field);
    if (!strstr(err.msg, says))
        fail_msg("'%s' not in: %s", says, err.msg);
    json_decref(c);
}

static void test_config_refusals(void **state)
{
    (void)state;
    expect_config_refused("activation_function", json_string("relu"), "relu");
    expect_config_refused("scale_attn_by_inverse_layer_idx", json_true(),
                          "scale_attn_by_inverse_layer_idx");
    expect_config_refused("reorder_and_upcast_attn", json_true(),
                          "reorder_and_upcast_attn");
    expect_config_refused("scale_attn_weights", json_false(), "sqrt");
    expect_config_refused("add_cross_attention", json_true(), "cross");
    expect_config_refused("layer_norm_epsilon", json_real(1e-6), "1e-06");
    expect_config_refused("model_type", json_string("llama"), "llama");
    expect_config_refused("n_head", json_integer(3), "divide");
    expect_config_refused("n_inner", json_integer(6), "multiple");
    expect_config_refused("n_embd", NULL, "n_embd");
    expect_config_refused("vocab_size", json_string("5"), "vocab_size");
}

/* A weights problem gives TY_EFORMAT on "weights", naming the tensor. */
static void expect_weights_refused(const ckpt_opts *o, const char *says)
{
    json_t *c = base_config();
    ty_err err;
    assert_int_equal(convert(o, c, NULL, &err), TY_EFORMAT);
    assert_string_equal(err.field, "weights");
    if (!strstr(err.msg, says))
        fail_msg("'%s' not in: %s", says, err.msg);
    json_decref(c);
}

static void test_weights_refusals(void **state)
{
    (void)state;
    ckpt_opts o = {.prefix = "transformer.", .dtype = ST_F32};
    o.drop = "h.1.mlp.c_fc.bias";
    expect_weights_refused(&o, "transformer.h.1.mlp.c_fc.bias (16) is missing");
    o.drop = "wte.weight";
    expect_weights_refused(&o, "wte.weight (or wte.weight) (5, 4) is missing");
    o.drop = NULL;
    o.grow = "h.0.attn.c_attn.weight";
    expect_weights_refused(&o, "transformer.h.0.attn.c_attn.weight is (5, "
                               "12); config.json makes it (4, 12)");
    o.grow = NULL;
    o.drop = "h.0.ln_2.weight";
    o.drop_to = ST_I32;
    expect_weights_refused(&o, "transformer.h.0.ln_2.weight is I32");
    o.drop = NULL;
    o.drop_to = 0;
    o.extra = "score.weight";
    expect_weights_refused(&o, "score.weight is not part of a GPT-2");
    o.extra = NULL;
    o.lm_head = 2;
    expect_weights_refused(&o, "lm_head.weight differs");
    /* A file that is not safetensors at all. */
    char in[512], out[512];
    paths(in, out, sizeof in);
    FILE *fp = fopen(in, "wb");
    fputs("not a safetensors file", fp);
    fclose(fp);
    json_t *c = base_config();
    ty_err err = {0};
    assert_int_equal(hf_gpt2_convert(in, c, NULL, out, &err), TY_EFORMAT);
    assert_string_equal(err.field, "weights");
    assert_null(strstr(err.msg, tu_tmpdir));
    json_decref(c);
}

/* Untied (tie_word_embeddings false): lm_head.weight becomes the lm_head
 * layer's weight, and export writes it back. */
static void test_untied(void **state)
{
    (void)state;
    ckpt_opts o = {.prefix = "transformer.", .dtype = ST_F32, .lm_head = 2};
    json_t *c = base_config();
    json_object_set_new(c, "tie_word_embeddings", json_false());
    ty_err err;
    assert_int_equal(convert(&o, c, NULL, &err), TY_OK);
    char in[512], conv[512], back[512];
    paths(in, conv, sizeof in);
    st_file f = {0};
    assert_int_equal(st_open(conv, &f, &err), TY_OK);
    const st_tensor *w = st_find(&f, "5.weight");
    assert_non_null(w);
    float v3;
    memcpy(&v3, (const char *)w->data + 12, 4);
    assert_true(v3 == tensors[0].v[3] + 1.0f);
    assert_non_null(
        strstr(st_meta(&f, "trainyard.spec"), "\"tie_embedding\":false"));
    st_close(&f);
    snprintf(back, sizeof back, "%s/back.safetensors", tu_tmpdir);
    json_t *config = NULL;
    assert_int_equal(hf_gpt2_export(conv, back, &config, NULL, &err), TY_OK);
    assert_true(json_is_false(json_object_get(config, "tie_word_embeddings")));
    assert_int_equal(st_open(back, &f, &err), TY_OK);
    assert_non_null(st_find(&f, "lm_head.weight"));
    st_close(&f);
    json_decref(config);
    /* Untied but without lm_head.weight: missing. */
    o.lm_head = 0;
    assert_int_equal(convert(&o, c, NULL, &err), TY_EFORMAT);
    assert_non_null(strstr(err.msg, "lm_head.weight (5, 4) is missing"));
    json_decref(c);
}

static void test_tokenizer_refused(void **state)
{
    (void)state;
    ckpt_opts o = {.prefix = "transformer.", .dtype = ST_F32};
    json_t *c = base_config();
    json_t *tok = json_pack("{s:{s:s, s:{s:i, s:i}}}", "model", "type", "BPE",
                            "vocab", "a", 0, "b", 5);
    ty_err err;
    assert_int_equal(convert(&o, c, tok, &err), TY_EINVAL);
    assert_string_equal(err.field, "tokenizer");
    assert_non_null(strstr(err.msg, "model.vocab['b']"));
    json_decref(tok);
    tok = json_pack("{s:{s:{s:i}}, s:[{s:i}]}", "model", "vocab", "a", 0,
                    "added_tokens", "id", 9);
    assert_int_equal(convert(&o, c, tok, &err), TY_EINVAL);
    assert_non_null(strstr(err.msg, "added_tokens[0].id"));
    json_decref(tok);
    tok = json_pack("[i]", 1);
    assert_int_equal(convert(&o, c, tok, &err), TY_EINVAL);
    assert_string_equal(err.field, "tokenizer");
    json_decref(tok);
    json_decref(c);
}

/* An MLP model file cannot be exported as GPT-2: a 422 on "layout" that
 * says why. */
static void test_export_refuses_other_models(void **state)
{
    (void)state;
    char path[512], back[512];
    snprintf(path, sizeof path, "%s/mlp.safetensors", tu_tmpdir);
    snprintf(back, sizeof back, "%s/back.safetensors", tu_tmpdir);
    float w[8] = {0}, b[2] = {0};
    st_out_tensor t[2] = {{"0.weight", ST_F32, 2, {2, 4}, w},
                          {"0.bias", ST_F32, 1, {2}, b}};
    json_t *meta =
        json_pack("{s:s, s:s, s:s, s:s, s:s}", "trainyard.format", "1",
                  "trainyard.task", "classification", "trainyard.spec",
                  "{\"layers\":[{\"type\":\"dense\",\"units\":2}]}",
                  "trainyard.input_shape", "[4]", "trainyard.num_outputs", "2");
    ty_err err = {0};
    assert_int_equal(st_write(path, meta, t, 2, &err), TY_OK);
    json_decref(meta);
    json_t *config = NULL;
    assert_int_equal(hf_gpt2_export(path, back, &config, NULL, &err),
                     TY_EINVAL);
    assert_string_equal(err.field, "layout");
    assert_non_null(strstr(err.msg, "not a language model"));
    assert_null(config);
    /* A language model whose third layer is not a block. */
    meta = json_pack(
        "{s:s, s:s, s:s, s:s, s:s}", "trainyard.format", "1", "trainyard.task",
        "language_modeling", "trainyard.spec",
        "{\"layers\":[{\"type\":\"embedding\",\"dim\":4},{\"type\":"
        "\"positional_embedding\"},{\"type\":\"dense\",\"units\":4},{\"type\":"
        "\"transformer_block\",\"heads\":2},{\"type\":\"layernorm\"},{\"type\""
        ":\"lm_head\"}]}",
        "trainyard.input_shape", "[4]", "trainyard.num_outputs", "2");
    assert_int_equal(st_write(path, meta, t, 2, &err), TY_OK);
    json_decref(meta);
    assert_int_equal(hf_gpt2_export(path, back, &config, NULL, &err),
                     TY_EINVAL);
    assert_non_null(strstr(err.msg, "layer 2 is dense, not transformer_block"));
    /* Blocks of two widths: GPT-2 has one n_inner. */
    meta = json_pack(
        "{s:s, s:s, s:s, s:s, s:s}", "trainyard.format", "1", "trainyard.task",
        "language_modeling", "trainyard.spec",
        "{\"layers\":[{\"type\":\"embedding\",\"dim\":4},{\"type\":"
        "\"positional_embedding\"},{\"type\":\"transformer_block\",\"heads\":"
        "2},{\"type\":\"transformer_block\",\"heads\":2,\"mlp_ratio\":2},"
        "{\"type\":\"layernorm\"},{\"type\":\"lm_head\"}]}",
        "trainyard.input_shape", "[4]", "trainyard.num_outputs", "2");
    assert_int_equal(st_write(path, meta, t, 2, &err), TY_OK);
    json_decref(meta);
    assert_int_equal(hf_gpt2_export(path, back, &config, NULL, &err),
                     TY_EINVAL);
    assert_non_null(strstr(err.msg, "layer 3 (transformer_block)"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_convert_prefixed),
        cmocka_unit_test(test_convert_bare_names),
        cmocka_unit_test(test_convert_half_precision),
        cmocka_unit_test(test_f16_edges),
        cmocka_unit_test(test_export_round_trip),
        cmocka_unit_test(test_config_refusals),
        cmocka_unit_test(test_weights_refusals),
        cmocka_unit_test(test_untied),
        cmocka_unit_test(test_tokenizer_refused),
        cmocka_unit_test(test_export_refuses_other_models),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
