/*
 * layers.c - the layer kinds: what each reads from its spec, the shape and
 * parameters it plans, its initial values, forward and backward.
 *
 * Each kind is one nn_layer_kind table; kinds[] maps the spec "type" to it.
 * Forward and backward only call backend kernels, so they run unchanged on
 * any backend. Errors from parse and plan name fields relative to the layer
 * ("units"); nn_spec.c adds the layer's path and index.
 */
#include "models/nn_internal.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/jsonutil.h"

static void copy_rows(float *out, const float *in, const nn_layer *l,
                      const nn_pass *p)
{
    if (out != in)
        nn_copy_floats(p->be, p->ex, out, in,
                       (size_t)p->n * nn_shape_numel(&l->in));
}

/* ---- flatten [nn.Flatten]: (C, H, W) -> (C*H*W); the buffer is reused as
 * is. ---- */

static const char *const flatten_keys[] = {"type", NULL};

static ty_status flatten_plan(nn_layer *l, ty_err *err)
{
    l->out.ndim = 1;
    l->out.d[0] = (uint32_t)nn_shape_numel(&l->in);
    return TY_OK;
}

static const nn_layer_kind flatten_kind = {
    .name = "flatten",
    .keys = flatten_keys,
    .alias = 1,
    .plan = flatten_plan,
};

/* ---- dense [nn.Linear]: y (N, units) = x (N, in) W^T + b, W (units, in).
 * ---- */

static const char *const dense_keys[] = {"type", "units", "bias", NULL};

static ty_status dense_parse(nn_layer *l, const json_t *obj, json_t *norm,
                             ty_err *err)
{
    int64_t units;
    int bias;
    ty_status st =
        tyjson_get_int(obj, "units", "", 1, 1, 65536, 0, &units, err);
    if (st != TY_OK)
        return st;
    if ((st = tyjson_get_bool(obj, "bias", "", 0, 1, &bias, err)) != TY_OK)
        return st;
    l->units = (uint32_t)units;
    l->bias = bias;
    json_object_set_new(norm, "units", json_integer(units));
    json_object_set_new(norm, "bias", json_boolean(bias));
    return TY_OK;
}

/* A dense layer's input width, and its rows per example: 1 for a vector,
 * T for a sequence (T, C), whose positions it maps one by one. */
static uint32_t dense_k(const nn_layer *l)
{
    return l->in.seq ? l->in.d[1] : l->in.d[0];
}

static uint32_t dense_per(const nn_layer *l)
{
    return l->in.seq ? l->in.d[0] : 1;
}

static ty_status dense_plan(nn_layer *l, ty_err *err)
{
    if (l->in.seq && l->in.ndim == 2) {
        l->out = (nn_shape){.ndim = 2, .d = {l->in.d[0], l->units}, .seq = 1};
    } else if (l->in.ndim != 1) {
        char shape[96];
        nn_shape_format(&l->in, shape, sizeof shape);
        return ty_fail(err, TY_EINVAL, "",
                       "its input has shape %s but dense needs a vector; add "
                       "a {\"type\": \"flatten\"} layer before it",
                       shape);
    } else {
        l->out = (nn_shape){.ndim = 1, .d = {l->units}};
    }
    uint32_t in = dense_k(l);
    nn_tensor_desc *w = &l->tensors[0];
    *w = (nn_tensor_desc){.suffix = "weight",
                          .ndim = 2,
                          .shape = {l->units, in},
                          .numel = (uint64_t)l->units * in};
    l->n_tensors = 1;
    if (l->bias) {
        l->tensors[1] = (nn_tensor_desc){.suffix = "bias",
                                         .ndim = 1,
                                         .shape = {l->units},
                                         .offset = w->numel,
                                         .numel = l->units};
        l->n_tensors = 2;
    }
    /* Under reduced precision: 16-bit copies of the input (kept from
     * forward to backward) and of the output gradient. */
    l->scratch_per_example = l->scratch_fixed = 0;
    if (l->precision != NN_DT_F32) {
        l->scratch_per_example =
            ((uint64_t)dense_per(l) * (in + l->units) + 1) / 2;
        l->scratch_fixed = 16; /* the gradient copy's 64-byte boundary */
    }
    return TY_OK;
}

/* Elements of dt between the input copy's start and the gradient copy's. */
static uint64_t dense_lp_dy_offset(uint64_t n, uint64_t k)
{
    return (n * k + 31) / 32 * 32;
}

uint64_t nn_dense_lp_floats(nn_dtype dt, uint64_t n, uint64_t k, uint64_t u)
{
    if (dt == NN_DT_F32)
        return 0;
    return (dense_lp_dy_offset(n, k) + n * u + 1) / 2;
}

/* The layer's parameters in the pass's reduced precision. */
static const void *dense_lp_weights(const nn_pass *p, const float *params)
{
    return (const char *)p->lp_params +
           (size_t)(params - p->lp_base) * nn_dtype_size(p->precision);
}

/* As PyTorch's nn.Linear: weight and bias uniform in +-1/sqrt(fan_in). */
static void dense_init(const nn_layer *l, float *params, float *buffers,
                       ty_rng *rng)
{
    float bound = 1.0f / sqrtf((float)dense_k(l));
    for (uint32_t t = 0; t < l->n_tensors; t++) {
        float *x = params + l->tensors[t].offset;
        for (uint64_t i = 0; i < l->tensors[t].numel; i++)
            x[i] = (2.0f * ty_rng_uniform(rng) - 1.0f) * bound;
    }
}

static void dense_forward(const nn_layer *l, const nn_pass *p,
                          const float *params, const float *in, float *out,
                          float *scratch)
{
    const int n = (int)(p->n * dense_per(l)), k = (int)dense_k(l),
              units = (int)l->units;
    const float *w = params;
    /* The bias is broadcast first and the GEMM accumulates onto it: the bias
     * add costs no extra pass over the output. */
    if (l->bias)
        p->be->bias_rows(p->ex, out, params + l->tensors[1].offset, (uint32_t)n,
                         l->units);
    if (p->precision != NN_DT_F32) {
        /* x (n, k) to 16 bits in scratch, kept for backward's dW. */
        assert(l->precision == p->precision);
        p->be->cast(p->ex, scratch, p->precision, in, (size_t)n * k);
        p->be->gemm_lp(p->ex, out, scratch, dense_lp_weights(p, params),
                       p->precision, 0, 1, n, units, k, 1.0f,
                       l->bias ? 1.0f : 0.0f);
        return;
    }
    p->be->gemm(p->ex, out, in, w, 0, 1, n, units, k, 1.0f,
                l->bias ? 1.0f : 0.0f);
}

/* dense_backward under reduced precision: dout to 16 bits beside forward's
 * input copy, then dW += dout^T x and dx = dout W on the 16-bit values
 * (fp32 sums; dW accumulates into the fp32 gradient). */
static void dense_backward_lp(const nn_layer *l, const nn_pass *p,
                              const float *params, float *grads,
                              const float *dout, float *din,
                              const float *scratch)
{
    const int n = (int)(p->n * dense_per(l)), k = (int)dense_k(l),
              units = (int)l->units;
    const nn_dtype dt = p->precision;
    assert(l->precision == dt);
    const void *x_lp = scratch;
    void *dy_lp =
        (char *)scratch +
        dense_lp_dy_offset((uint64_t)n, (uint64_t)k) * nn_dtype_size(dt);
    p->be->cast(p->ex, dy_lp, dt, dout, (size_t)n * units);
    p->be->gemm_lp(p->ex, grads, dy_lp, x_lp, dt, 1, 0, units, k, n, 1.0f,
                   1.0f);
    if (l->bias)
        p->be->bias_grad(p->ex, grads + l->tensors[1].offset, dout, (uint32_t)n,
                         l->units);
    if (din)
        p->be->gemm_lp(p->ex, din, dy_lp, dense_lp_weights(p, params), dt, 0, 0,
                       n, k, units, 1.0f, 0.0f);
}

static void dense_backward(const nn_layer *l, const nn_pass *p,
                           const float *params, float *grads, const float *in,
                           const float *out, const float *dout, float *din,
                           const float *scratch)
{
    const int n = (int)(p->n * dense_per(l)), k = (int)dense_k(l),
              units = (int)l->units;
    if (p->precision != NN_DT_F32) {
        dense_backward_lp(l, p, params, grads, dout, din, scratch);
        return;
    }
    /* dW (units, k) += dout^T (units, n) x (n, k) */
    p->be->gemm(p->ex, grads, dout, in, 1, 0, units, k, n, 1.0f, 1.0f);
    if (l->bias)
        p->be->bias_grad(p->ex, grads + l->tensors[1].offset, dout, (uint32_t)n,
                         l->units);
    /* dx (n, k) = dout (n, units) W (units, k) */
    if (din)
        p->be->gemm(p->ex, din, dout, params, 0, 0, n, k, units, 1.0f, 0.0f);
}

static const nn_layer_kind dense_kind = {
    .name = "dense",
    .keys = dense_keys,
    .parse = dense_parse,
    .plan = dense_plan,
    .init = dense_init,
    .forward = dense_forward,
    .backward = dense_backward,
};

/* ---- elementwise activations [nn.ReLU, nn.Tanh, nn.Sigmoid, nn.GELU()
 * (approximate="none")]: shape unchanged. ---- */

static const char *const act_keys[] = {"type", NULL};

static ty_status same_shape_plan(nn_layer *l, ty_err *err)
{
    l->out = l->in;
    return TY_OK;
}

nn_op nn_layer_act_op(const nn_layer *l)
{
    switch (l->type) {
        case NN_LAYER_TANH: return NN_OP_TANH;
        case NN_LAYER_SIGMOID: return NN_OP_SIGMOID;
        case NN_LAYER_GELU:
            return l->approximate ? NN_OP_GELU_TANH : NN_OP_GELU;
        default: return NN_OP_RELU;
    }
}

static void act_forward(const nn_layer *l, const nn_pass *p,
                        const float *params, const float *in, float *out,
                        float *scratch)
{
    p->be->act_forward(p->ex, nn_layer_act_op(l), out, in,
                       (size_t)p->n * nn_shape_numel(&l->in));
}

static void act_backward(const nn_layer *l, const nn_pass *p,
                         const float *params, float *grads, const float *in,
                         const float *out, const float *dout, float *din,
                         const float *scratch)
{
    if (din)
        p->be->act_backward(p->ex, nn_layer_act_op(l), din, dout, in, out,
                            (size_t)p->n * nn_shape_numel(&l->in));
}

#define ACT_KIND(var, str)             \
    static const nn_layer_kind var = { \
        .name = str,                   \
        .keys = act_keys,              \
        .plan = same_shape_plan,       \
        .forward = act_forward,        \
        .backward = act_backward,      \
    }
ACT_KIND(relu_kind, "relu");
ACT_KIND(tanh_kind, "tanh");
ACT_KIND(sigmoid_kind, "sigmoid");

/* gelu {approximate: "none" | "tanh"} [nn.GELU(approximate=...)]. The
 * normalized spec names "tanh" only, so the specs of models made before
 * the key existed stay as they were (checkpoints compare them). */
static const char *const gelu_keys[] = {"type", "approximate", NULL};

static ty_status gelu_parse(nn_layer *l, const json_t *obj, json_t *norm,
                            ty_err *err)
{
    const json_t *a = json_object_get(obj, "approximate");
    const char *s = json_string_value(a);
    if (a && (!s || (strcmp(s, "none") && strcmp(s, "tanh"))))
        return ty_fail(err, TY_EINVAL, "approximate",
                       "approximate must be \"none\" (the exact erf form) "
                       "or \"tanh\" (GPT-2's approximation)");
    l->approximate = s && !strcmp(s, "tanh");
    if (l->approximate)
        json_object_set_new(norm, "approximate", json_string("tanh"));
    return TY_OK;
}

static const nn_layer_kind gelu_kind = {
    .name = "gelu",
    .keys = gelu_keys,
    .parse = gelu_parse,
    .plan = same_shape_plan,
    .forward = act_forward,
    .backward = act_backward,
};

/* ---- dropout [nn.Dropout(rate)]: inverted; the mask (scratch) holds 0 or
 * 1/(1-rate). ---- */

static const char *const dropout_keys[] = {"type", "rate", NULL};

static ty_status dropout_parse(nn_layer *l, const json_t *obj, json_t *norm,
                               ty_err *err)
{
    double rate;
    ty_status st =
        tyjson_get_number(obj, "rate", "", 0, 0.0, 1.0, 0.5, &rate, err);
    if (st != TY_OK)
        return st;
    if (rate >= 1.0)
        return ty_fail(err, TY_EINVAL, "rate",
                       "rate must be at least 0 and below 1, got %g", rate);
    l->rate = (float)rate;
    json_object_set_new(norm, "rate", json_real(rate));
    return TY_OK;
}

static ty_status dropout_plan(nn_layer *l, ty_err *err)
{
    l->out = l->in;
    l->scratch_per_example = nn_shape_numel(&l->in);
    return TY_OK;
}

static void dropout_forward(const nn_layer *l, const nn_pass *p,
                            const float *params, const float *in, float *out,
                            float *scratch)
{
    if (p->training && l->rate > 0.0f)
        p->be->dropout_forward(p->ex, out, scratch, in,
                               (size_t)p->n * nn_shape_numel(&l->in), l->rate,
                               p->rng);
    else
        copy_rows(out, in, l, p);
}

static void dropout_backward(const nn_layer *l, const nn_pass *p,
                             const float *params, float *grads, const float *in,
                             const float *out, const float *dout, float *din,
                             const float *scratch)
{
    if (!din)
        return;
    if (l->rate > 0.0f)
        p->be->dropout_backward(p->ex, din, dout, scratch,
                                (size_t)p->n * nn_shape_numel(&l->in));
    else
        copy_rows(din, dout, l, p);
}

static const nn_layer_kind dropout_kind = {
    .name = "dropout",
    .keys = dropout_keys,
    .identity_in_eval = 1,
    .parse = dropout_parse,
    .plan = dropout_plan,
    .forward = dropout_forward,
    .backward = dropout_backward,
};

/* ---- the kind table ---- */

static const nn_layer_kind *const kinds[] = {
    [NN_LAYER_FLATTEN] = &flatten_kind,
    [NN_LAYER_DENSE] = &dense_kind,
    [NN_LAYER_RELU] = &relu_kind,
    [NN_LAYER_TANH] = &tanh_kind,
    [NN_LAYER_SIGMOID] = &sigmoid_kind,
    [NN_LAYER_GELU] = &gelu_kind,
    [NN_LAYER_DROPOUT] = &dropout_kind,
    [NN_LAYER_BATCHNORM] = &nn_batchnorm_kind,
    [NN_LAYER_LAYERNORM] = &nn_layernorm_kind,
    [NN_LAYER_LEAKY_RELU] = &nn_leaky_relu_kind,
    [NN_LAYER_SOFTMAX] = &nn_softmax_kind,
    [NN_LAYER_RESIDUAL] = &nn_residual_kind,
    [NN_LAYER_CONV2D] = &nn_conv2d_kind,
    [NN_LAYER_MAXPOOL2D] = &nn_maxpool2d_kind,
    [NN_LAYER_AVGPOOL2D] = &nn_avgpool2d_kind,
    [NN_LAYER_GLOBAL_AVGPOOL] = &nn_global_avgpool_kind,
    [NN_LAYER_EMBEDDING] = &nn_embedding_kind,
    [NN_LAYER_POSITIONAL_EMBEDDING] = &nn_positional_embedding_kind,
    [NN_LAYER_LM_HEAD] = &nn_lm_head_kind,
    [NN_LAYER_ATTENTION] = &nn_attention_kind,
    [NN_LAYER_TRANSFORMER_BLOCK] = &nn_transformer_block_kind,
    [NN_LAYER_SEQUENCE_POOL] = &nn_sequence_pool_kind,
};
static_assert(TY_ARRAY_LEN(kinds) == NN_LAYER_KIND_COUNT,
              "every nn_layer_type needs a kind");

const nn_layer_kind *nn_layer_kind_find(const char *name, nn_layer_type *type)
{
    for (size_t i = 0; i < TY_ARRAY_LEN(kinds); i++)
        if (!strcmp(kinds[i]->name, name)) {
            if (type)
                *type = (nn_layer_type)i;
            return kinds[i];
        }
    return NULL;
}

void nn_arch_set_precision(nn_arch *arch, nn_dtype dt)
{
    arch->precision = dt;
    arch->scratch_per_example = arch->scratch_fixed = 0;
    for (uint32_t i = 0; i < arch->n_layers; i++) {
        nn_layer *l = &arch->layers[i];
        l->precision = dt;
        if (l->body)
            nn_arch_set_precision(l->body, dt);
        if (l->proj)
            nn_arch_set_precision(l->proj, dt);
        /* The kinds whose sizes depend on the precision plan again (they
         * planned once already, so they cannot fail now). */
        if (l->type == NN_LAYER_DENSE || l->type == NN_LAYER_RESIDUAL ||
            l->type == NN_LAYER_ATTENTION ||
            l->type == NN_LAYER_TRANSFORMER_BLOCK) {
            ty_status st = l->kind->plan(l, NULL);
            assert(st == TY_OK);
            (void)st;
        }
        arch->scratch_per_example += l->scratch_per_example;
        arch->scratch_fixed += l->scratch_fixed;
    }
}

void nn_layer_kind_list(char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < TY_ARRAY_LEN(kinds) && used < n; i++) {
        int w = snprintf(buf + used, n - used, "%s%s", i ? ", " : "",
                         kinds[i]->name);
        if (w < 0)
            return;
        used += (size_t)w;
    }
}
