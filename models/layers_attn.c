/*
 * layers_attn.c - self-attention layers on sequences (T, C) (issue 31):
 *
 *   attention {heads, causal (true), dropout (0), bias (true)}
 *       [nn.MultiheadAttention(C, heads, bias=bias, batch_first=True)
 *        called on (x, x, x) with the causal mask]: one fused projection
 *        qkv = x W_in^T + b_in (W_in (3C, C), q's rows first), the causal
 *        scaled dot-product core per head (NN_OP_ATTENTION), then
 *        out = y W_out^T + b_out;
 *   transformer_block {heads, mlp_ratio (4), dropout (0), causal (true)}
 *       GPT-2's pre-norm block: x1 = x + attn(ln_1(x)); out = x1 +
 *       mlp(ln_2(x1)), mlp = Linear(C, rC), GELU(tanh), Linear(rC, C).
 *
 * Tensor names follow the PyTorch modules (tools/trainyard_torch.py
 * builds the same): "in_proj_weight", "in_proj_bias", "out_proj.weight",
 * "out_proj.bias"; a block adds "ln_1.", "attn.", "ln_2.", "mlp.0.",
 * "mlp.2." in front. Projections start as GPT-2's do (weights normal(0,
 * 0.02), biases 0), layer norms as 1 and 0.
 *
 * Every buffer a layer needs from forward to backward, and backward's own
 * temporaries, are its scratch (per example), so the memory estimate
 * counts them, attention's (heads, T, T) probabilities and their gradient
 * included. Within a pass of n examples a buffer's place is a multiple of
 * n; forward and backward of one step see the same n.
 *
 * causal false lets every position see every other (an encoder, for
 * classifying text); on token inputs the padding after each text is never
 * seen (nn_pass.lens). dropout p, in training only, drops attention
 * weights (nn.MultiheadAttention's dropout) and, in a block, the
 * attention's and the MLP's outputs before each residual sum (nanoGPT's
 * attn_dropout and resid_dropout); its masks are scratch too.
 */
#include "models/nn_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/jsonutil.h"

/* ---- shared parsing ---- */

static ty_status parse_attn_opts(nn_layer *l, const json_t *obj, json_t *norm,
                                 ty_err *err)
{
    int64_t heads;
    int causal;
    double dropout;
    ty_status st;
    if ((st = tyjson_get_int(obj, "heads", "", 1, 1, 4096, 0, &heads, err)) !=
            TY_OK ||
        (st = tyjson_get_bool(obj, "causal", "", 0, 1, &causal, err)) !=
            TY_OK ||
        (st = tyjson_get_number(obj, "dropout", "", 0, 0.0, 1.0, 0.0, &dropout,
                                err)) != TY_OK)
        return st;
    if (dropout >= 1.0)
        return ty_fail(err, TY_EINVAL, "dropout",
                       "dropout must be at least 0 and below 1, got %g",
                       dropout);
    l->heads = (uint32_t)heads;
    l->causal = causal;
    l->rate = (float)dropout;
    json_object_set_new(norm, "heads", json_integer(heads));
    json_object_set_new(norm, "causal", json_boolean(causal));
    json_object_set_new(norm, "dropout", json_real(dropout));
    return TY_OK;
}

static ty_status check_seq_heads(const nn_layer *l, ty_err *err)
{
    if (!l->in.seq || l->in.ndim != 2) {
        char shape[96];
        nn_shape_format(&l->in, shape, sizeof shape);
        return ty_fail(err, TY_EINVAL, "",
                       "its input has shape %s but %s needs a sequence (T, "
                       "C); put an embedding layer before it",
                       shape, l->kind->name);
    }
    const uint32_t c = l->in.d[1];
    if (c % l->heads)
        return ty_fail(err, TY_EINVAL, "heads",
                       "heads (%u) must divide the %u channels of its input",
                       l->heads, c);
    return TY_OK;
}

/* Appends tensor (suffix, shape) to l at the running offset *off. */
static void add_tensor(nn_layer *l, const char *suffix, uint32_t a, uint32_t b,
                       uint64_t *off)
{
    nn_tensor_desc *d = &l->tensors[l->n_tensors++];
    *d = (nn_tensor_desc){.suffix = suffix,
                          .ndim = b ? 2 : 1,
                          .shape = {a, b},
                          .offset = *off,
                          .numel = (uint64_t)a * (b ? b : 1)};
    *off += d->numel;
}

/* ---- the pieces both layers run ---- */

/* out (rows, u) = x (rows, k) W^T + b (b may be NULL). */
static void linear(const nn_pass *p, float *out, const float *x, const float *w,
                   const float *b, uint32_t rows, uint32_t u, uint32_t k)
{
    if (b)
        p->be->bias_rows(p->ex, out, b, rows, u);
    p->be->gemm(p->ex, out, x, w, 0, 1, (int)rows, (int)u, (int)k, 1.0f,
                b ? 1.0f : 0.0f);
}

/* dW += dout^T x, db += column sums of dout, dx = dout W (when not NULL). */
static void linear_back(const nn_pass *p, float *dx, float *dw, float *db,
                        const float *dout, const float *x, const float *w,
                        uint32_t rows, uint32_t u, uint32_t k)
{
    p->be->gemm(p->ex, dw, dout, x, 1, 0, (int)u, (int)k, (int)rows, 1.0f,
                1.0f);
    if (db)
        p->be->bias_grad(p->ex, db, dout, rows, u);
    if (dx)
        p->be->gemm(p->ex, dx, dout, w, 0, 0, (int)rows, (int)k, (int)u, 1.0f,
                    0.0f);
}

/* An attention's four tensors (biases NULL without bias). */
typedef struct {
    const float *w_in, *b_in, *w_out, *b_out;
} attn_w;

typedef struct {
    float *w_in, *b_in, *w_out, *b_out;
} attn_g;

/* The mask of l's attention in pass p: its causality, the pass's lengths,
 * and keep (dropout multipliers, or NULL). */
static nn_attn_mask attn_mask(const nn_layer *l, const nn_pass *p, float *keep)
{
    return (nn_attn_mask){.causal = l->causal, .lens = p->lens, .keep = keep};
}

/* Whether l drops anything in pass p. */
static int drops(const nn_layer *l, const nn_pass *p)
{
    return p->training && l->rate > 0.0f;
}

/* Draws keep's dropout multipliers (len values) for an attention's
 * weights: dropout_forward's mask of a zeroed input (zero is sink's
 * length too, and is overwritten after). */
static void draw_keep(const nn_pass *p, float rate, float *keep, float *zero,
                      float *sink, size_t len)
{
    p->be->zero(p->ex, zero, len * sizeof *zero);
    p->be->dropout_forward(p->ex, sink, keep, zero, len, rate, p->rng);
}

/* Forward of the attention sub-layer on n sequences x (n, T, C) into out,
 * under mask m: keeps qkv (n T, 3C), y (n T, C) and att (n, h, T, T) for
 * backward. */
static void attn_forward(const nn_pass *p, uint32_t t, uint32_t c, uint32_t h,
                         const attn_w *w, const float *x, float *out,
                         float *qkv, float *y, float *att,
                         const nn_attn_mask *m)
{
    const uint32_t rows = p->n * t;
    linear(p, qkv, x, w->w_in, w->b_in, rows, 3 * c, c);
    p->be->attention_forward(p->ex, y, att, qkv, qkv + c, qkv + 2 * c, p->n, t,
                             h, c / h, 3 * c, m);
    linear(p, out, y, w->w_out, w->b_out, rows, c, c);
}

/* Its backward from dout (n T, C): parameter gradients into g, dx (may be
 * NULL) assigned. dy (n T, C), dqkv (n T, 3C) and datt (n, h, T, T) are
 * temporaries; dx may be dy. */
static void attn_backward(const nn_pass *p, uint32_t t, uint32_t c, uint32_t h,
                          const attn_w *w, const attn_g *g, const float *x,
                          const float *dout, float *dx, const float *qkv,
                          const float *y, const float *att, float *dy,
                          float *dqkv, float *datt, const nn_attn_mask *m)
{
    const uint32_t rows = p->n * t;
    linear_back(p, dy, g->w_out, g->b_out, dout, y, w->w_out, rows, c, c);
    p->be->attention_backward(p->ex, dqkv, dqkv + c, dqkv + 2 * c, datt, dy,
                              qkv, qkv + c, qkv + 2 * c, att, p->n, t, h, c / h,
                              3 * c, m);
    linear_back(p, dx, g->w_in, g->b_in, dqkv, x, w->w_in, rows, 3 * c, c);
}

/* Normal(0, 0.02) weights, zero biases, unit layer-norm gains: each tensor
 * by its suffix. */
static void init_tensors(const nn_layer *l, float *params, ty_rng *rng)
{
    for (uint32_t i = 0; i < l->n_tensors; i++) {
        const nn_tensor_desc *d = &l->tensors[i];
        float *x = params + d->offset;
        const char *s = d->suffix;
        int is_ln = !strncmp(s, "ln_", 3);
        int is_weight = strstr(s, "weight") != NULL;
        for (uint64_t k = 0; k < d->numel; k++)
            x[k] = !is_weight ? 0.0f
                   : is_ln    ? 1.0f
                              : 0.02f * ty_rng_normal(rng);
    }
}

/* ---- attention ---- */

static const char *const attention_keys[] = {"type",    "heads", "causal",
                                             "dropout", "bias",  NULL};

static ty_status attention_parse(nn_layer *l, const json_t *obj, json_t *norm,
                                 ty_err *err)
{
    int bias;
    ty_status st = parse_attn_opts(l, obj, norm, err);
    if (st != TY_OK ||
        (st = tyjson_get_bool(obj, "bias", "", 0, 1, &bias, err)) != TY_OK)
        return st;
    l->bias = bias;
    json_object_set_new(norm, "bias", json_boolean(bias));
    return TY_OK;
}

static ty_status attention_plan(nn_layer *l, ty_err *err)
{
    ty_status st = check_seq_heads(l, err);
    if (st != TY_OK)
        return st;
    const uint32_t t = l->in.d[0], c = l->in.d[1];
    uint64_t off = 0;
    l->out = l->in;
    l->n_tensors = 0;
    add_tensor(l, "in_proj_weight", 3 * c, c, &off);
    if (l->bias)
        add_tensor(l, "in_proj_bias", 3 * c, 0, &off);
    add_tensor(l, "out_proj.weight", c, c, &off);
    if (l->bias)
        add_tensor(l, "out_proj.bias", c, 0, &off);
    /* qkv 3TC, y TC, att hTT; backward: dy TC, dqkv 3TC, datt hTT; with
     * dropout, keep hTT */
    const uint64_t tc = (uint64_t)t * c, tt = (uint64_t)l->heads * t * t;
    l->scratch_per_example = 8 * tc + (l->rate > 0.0f ? 3 : 2) * tt;
    return TY_OK;
}

static attn_w attention_weights(const nn_layer *l, const float *params)
{
    const uint32_t c = l->in.d[1];
    const uint64_t cc = (uint64_t)c * c;
    attn_w w = {.w_in = params};
    if (l->bias) {
        w.b_in = params + 3 * cc;
        w.w_out = w.b_in + 3 * c;
        w.b_out = w.w_out + cc;
    } else {
        w.w_out = params + 3 * cc;
    }
    return w;
}

static void attention_init(const nn_layer *l, float *params, float *buffers,
                           ty_rng *rng)
{
    init_tensors(l, params, rng);
}

static void attention_forward_layer(const nn_layer *l, const nn_pass *p,
                                    const float *params, const float *in,
                                    float *out, float *scratch)
{
    const uint32_t t = l->in.d[0], c = l->in.d[1];
    const size_t tc = (size_t)p->n * t * c;
    const size_t tt = (size_t)p->n * l->heads * t * t;
    const attn_w w = attention_weights(l, params);
    float *qkv = scratch, *y = qkv + 3 * tc, *att = y + tc;
    float *dy = att + tt, *datt = dy + 4 * tc, *keep = datt + tt;
    if (drops(l, p))
        draw_keep(p, l->rate, keep, att, datt, tt);
    const nn_attn_mask m = attn_mask(l, p, drops(l, p) ? keep : NULL);
    attn_forward(p, t, c, l->heads, &w, in, out, qkv, y, att, &m);
}

static void attention_backward_layer(const nn_layer *l, const nn_pass *p,
                                     const float *params, float *grads,
                                     const float *in, const float *out,
                                     const float *dout, float *din,
                                     const float *scratch)
{
    const uint32_t t = l->in.d[0], c = l->in.d[1];
    const size_t tc = (size_t)p->n * t * c;
    const size_t tt = (size_t)p->n * l->heads * t * t;
    const attn_w w = attention_weights(l, params);
    const attn_w gw = attention_weights(l, grads);
    const attn_g g = {(float *)gw.w_in, (float *)gw.b_in, (float *)gw.w_out,
                      (float *)gw.b_out};
    const float *qkv = scratch, *y = qkv + 3 * tc, *att = y + tc;
    float *dy = (float *)att + tt, *dqkv = dy + tc, *datt = dqkv + 3 * tc;
    const nn_attn_mask m = attn_mask(l, p, l->rate > 0.0f ? datt + tt : NULL);
    attn_backward(p, t, c, l->heads, &w, &g, in, dout, din, qkv, y, att, dy,
                  dqkv, datt, &m);
}

const nn_layer_kind nn_attention_kind = {
    .name = "attention",
    .keys = attention_keys,
    .parse = attention_parse,
    .plan = attention_plan,
    .init = attention_init,
    .forward = attention_forward_layer,
    .backward = attention_backward_layer,
};

/* ---- transformer_block ---- */

static const char *const block_keys[] = {"type",    "heads",  "mlp_ratio",
                                         "dropout", "causal", NULL};

static ty_status block_parse(nn_layer *l, const json_t *obj, json_t *norm,
                             ty_err *err)
{
    double ratio;
    ty_status st = parse_attn_opts(l, obj, norm, err);
    if (st != TY_OK ||
        (st = tyjson_get_number(obj, "mlp_ratio", "", 0, 0.0, 64.0, 4.0, &ratio,
                                err)) != TY_OK)
        return st;
    if (!(ratio > 0.0))
        return ty_fail(err, TY_EINVAL, "mlp_ratio",
                       "mlp_ratio must be above 0 (GPT-2 uses 4)");
    l->eps = 1e-5f;
    /* hidden = round(ratio * C), set at plan from the input. */
    l->mlp_ratio = (float)ratio;
    if (ratio == floor(ratio))
        json_object_set_new(norm, "mlp_ratio", json_integer((json_int_t)ratio));
    else
        json_object_set_new(norm, "mlp_ratio", json_real(ratio));
    return TY_OK;
}

/* The block's tensors in order, at these offsets (in floats). */
typedef struct {
    const float *g1, *b1, *g2, *b2, *w1, *c1, *w2, *c2;
    attn_w a;
} block_w;

static block_w block_weights(const nn_layer *l, const float *p)
{
    const nn_tensor_desc *t = l->tensors;
    return (block_w){.g1 = p + t[0].offset,
                     .b1 = p + t[1].offset,
                     .a = {p + t[2].offset, p + t[3].offset, p + t[4].offset,
                           p + t[5].offset},
                     .g2 = p + t[6].offset,
                     .b2 = p + t[7].offset,
                     .w1 = p + t[8].offset,
                     .c1 = p + t[9].offset,
                     .w2 = p + t[10].offset,
                     .c2 = p + t[11].offset};
}

static ty_status block_plan(nn_layer *l, ty_err *err)
{
    ty_status st = check_seq_heads(l, err);
    if (st != TY_OK)
        return st;
    const uint32_t t = l->in.d[0], c = l->in.d[1];
    double h = floor((double)l->mlp_ratio * c + 0.5);
    if (h < 1.0 || h > 1048576.0)
        return ty_fail(err, TY_EINVAL, "mlp_ratio",
                       "mlp_ratio %g gives an MLP of %.0f units for %u "
                       "channels; it must be 1 to 1048576",
                       (double)l->mlp_ratio, h, c);
    const uint32_t r = l->hidden = (uint32_t)h;
    uint64_t off = 0;
    l->out = l->in;
    l->n_tensors = 0;
    add_tensor(l, "ln_1.weight", c, 0, &off);
    add_tensor(l, "ln_1.bias", c, 0, &off);
    add_tensor(l, "attn.in_proj_weight", 3 * c, c, &off);
    add_tensor(l, "attn.in_proj_bias", 3 * c, 0, &off);
    add_tensor(l, "attn.out_proj.weight", c, c, &off);
    add_tensor(l, "attn.out_proj.bias", c, 0, &off);
    add_tensor(l, "ln_2.weight", c, 0, &off);
    add_tensor(l, "ln_2.bias", c, 0, &off);
    add_tensor(l, "mlp.0.weight", r, c, &off);
    add_tensor(l, "mlp.0.bias", r, 0, &off);
    add_tensor(l, "mlp.2.weight", c, r, &off);
    add_tensor(l, "mlp.2.bias", c, 0, &off);
    /* forward: ln1 C + 2, qkv 3C, y C, x1 C, ln2 C + 2, fc R, gelu R per
     * position, att hTT; backward: big max(R, 3C), two of C, datt hTT. */
    const uint64_t big = r > 3 * c ? r : 3 * c;
    const uint64_t per_pos = 9ull * c + 4 + 2ull * r + big;
    l->scratch_per_example = (uint64_t)t * per_pos + 2ull * l->heads * t * t;
    /* dropout: keep hTT, two residual masks and a temporary of C */
    if (l->rate > 0.0f)
        l->scratch_per_example += (uint64_t)l->heads * t * t + 3ull * t * c;
    return TY_OK;
}

static void block_init(const nn_layer *l, float *params, float *buffers,
                       ty_rng *rng)
{
    init_tensors(l, params, rng);
}

/* Where the block's scratch buffers lie for a pass of n examples. */
typedef struct {
    float *ln1, *m1, *r1, *qkv, *y, *att, *x1, *ln2, *m2, *r2, *fc, *gl;
    float *big, *t1, *t2, *datt;
    float *keep, *ma, *mm, *t3; /* dropout only */
} block_buf;

static block_buf block_bufs(const nn_layer *l, uint32_t n, float *s)
{
    const size_t t = l->in.d[0], c = l->in.d[1], r = l->hidden;
    const size_t rows = (size_t)n * t, tt = (size_t)n * l->heads * t * t;
    const size_t big = r > 3 * c ? r : 3 * c;
    block_buf b;
    b.ln1 = s;
    b.m1 = b.ln1 + rows * c;
    b.r1 = b.m1 + rows;
    b.qkv = b.r1 + rows;
    b.y = b.qkv + rows * 3 * c;
    b.att = b.y + rows * c;
    b.x1 = b.att + tt;
    b.ln2 = b.x1 + rows * c;
    b.m2 = b.ln2 + rows * c;
    b.r2 = b.m2 + rows;
    b.fc = b.r2 + rows;
    b.gl = b.fc + rows * r;
    b.big = b.gl + rows * r;
    b.t1 = b.big + rows * big;
    b.t2 = b.t1 + rows * c;
    b.datt = b.t2 + rows * c;
    b.keep = b.datt + tt;
    b.ma = b.keep + tt;
    b.mm = b.ma + rows * c;
    b.t3 = b.mm + rows * c;
    return b;
}

static void block_forward(const nn_layer *l, const nn_pass *p,
                          const float *params, const float *in, float *out,
                          float *scratch)
{
    const uint32_t t = l->in.d[0], c = l->in.d[1], r = l->hidden;
    const uint32_t rows = p->n * t;
    const size_t len = (size_t)rows * c;
    const size_t tt = (size_t)p->n * l->heads * t * t;
    const block_w w = block_weights(l, params);
    const block_buf b = block_bufs(l, p->n, scratch);
    const int drop = drops(l, p);
    if (drop)
        draw_keep(p, l->rate, b.keep, b.att, b.datt, tt);
    const nn_attn_mask m = attn_mask(l, p, drop ? b.keep : NULL);
    p->be->layernorm_forward(p->ex, b.ln1, b.m1, b.r1, in, w.g1, w.b1, rows, c,
                             l->eps);
    /* x1 = x + drop(attn(ln_1(x))) */
    attn_forward(p, t, c, l->heads, &w.a, b.ln1, drop ? b.t1 : b.x1, b.qkv, b.y,
                 b.att, &m);
    if (drop)
        p->be->dropout_forward(p->ex, b.x1, b.ma, b.t1, len, l->rate, p->rng);
    p->be->add(p->ex, b.x1, b.x1, in, len);
    /* out = x1 + drop(mlp(ln_2(x1))) */
    p->be->layernorm_forward(p->ex, b.ln2, b.m2, b.r2, b.x1, w.g2, w.b2, rows,
                             c, l->eps);
    linear(p, b.fc, b.ln2, w.w1, w.c1, rows, r, c);
    p->be->act_forward(p->ex, NN_OP_GELU_TANH, b.gl, b.fc, (size_t)rows * r);
    linear(p, drop ? b.t1 : out, b.gl, w.w2, w.c2, rows, c, r);
    if (drop)
        p->be->dropout_forward(p->ex, out, b.mm, b.t1, len, l->rate, p->rng);
    p->be->add(p->ex, out, out, b.x1, len);
}

static void block_backward(const nn_layer *l, const nn_pass *p,
                           const float *params, float *grads, const float *in,
                           const float *out, const float *dout, float *din,
                           const float *scratch)
{
    const uint32_t t = l->in.d[0], c = l->in.d[1], r = l->hidden;
    const uint32_t rows = p->n * t;
    const size_t len = (size_t)rows * c;
    const block_w w = block_weights(l, params);
    const block_w gw = block_weights(l, grads);
    const block_buf b = block_bufs(l, p->n, (float *)scratch);
    const int drop = l->rate > 0.0f; /* backward runs in training only */
    const nn_attn_mask m = attn_mask(l, p, drop ? b.keep : NULL);
    /* the MLP: its output's gradient (through the dropout), dgl, then dfc
     * in place, then dln2 */
    const float *dmlp = dout;
    if (drop) {
        p->be->dropout_backward(p->ex, b.t3, dout, b.mm, len);
        dmlp = b.t3;
    }
    linear_back(p, b.big, (float *)gw.w2, (float *)gw.c2, dmlp, b.gl, w.w2,
                rows, c, r);
    p->be->act_backward(p->ex, NN_OP_GELU_TANH, b.big, b.big, b.fc, b.gl,
                        (size_t)rows * r);
    linear_back(p, b.t1, (float *)gw.w1, (float *)gw.c1, b.big, b.ln2, w.w1,
                rows, r, c);
    /* dx1 = ln_2's input gradient + the residual's dout */
    p->be->layernorm_backward(p->ex, b.t2, (float *)gw.g2, (float *)gw.b2, b.t1,
                              b.x1, w.g2, b.m2, b.r2, rows, c);
    p->be->add(p->ex, b.t2, b.t2, dout, len);
    /* the attention (its output's gradient through the dropout): dln1 into
     * t1 (its dy temporary too) */
    const float *dattn = b.t2;
    if (drop) {
        p->be->dropout_backward(p->ex, b.t3, b.t2, b.ma, len);
        dattn = b.t3;
    }
    const attn_g ga = {(float *)gw.a.w_in, (float *)gw.a.b_in,
                       (float *)gw.a.w_out, (float *)gw.a.b_out};
    attn_backward(p, t, c, l->heads, &w.a, &ga, b.ln1, dattn, b.t1, b.qkv, b.y,
                  b.att, b.t1, b.big, b.datt, &m);
    p->be->layernorm_backward(p->ex, din, (float *)gw.g1, (float *)gw.b1, b.t1,
                              in, w.g1, b.m1, b.r1, rows, c);
    if (din)
        p->be->add(p->ex, din, din, b.t2, len);
}

const nn_layer_kind nn_transformer_block_kind = {
    .name = "transformer_block",
    .keys = block_keys,
    .parse = block_parse,
    .plan = block_plan,
    .init = block_init,
    .forward = block_forward,
    .backward = block_backward,
};
