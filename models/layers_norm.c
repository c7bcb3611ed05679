/*
 * layers_norm.c - the normalization layers (batchnorm, layernorm) and two
 * activations with their own options or shape rules (leaky_relu, softmax).
 *
 * batchnorm [nn.BatchNorm1d(C) on (C), nn.BatchNorm2d(C) on (C, H, W)]
 * normalizes each channel over the batch (and H, W). Its tensors are
 * "weight" (1) and "bias" (0), trainable, and the buffers "running_mean"
 * (0) and "running_var" (1), which only a training forward pass writes. The
 * forward pass keeps the per-channel mean and 1/std it used in the layer's
 * fixed scratch for backward.
 *
 * A training batch with a single value per channel (a batch of one (C)
 * example, or of one 1x1 image) has no variance to normalize by; PyTorch
 * raises. Such a batch is normalized with the running statistics instead,
 * exactly as in eval, and leaves them unchanged; its backward treats them
 * as constants. So the last, one-example minibatch of an epoch still trains
 * weight, bias and the layers below, and nothing becomes NaN.
 *
 * layernorm [nn.LayerNorm(list(in_shape)), elementwise affine] normalizes
 * each example over its whole shape; "weight" and "bias" have the input's
 * shape. Scratch: each example's mean and 1/std.
 */
#include "models/nn_internal.h"

#include <math.h>
#include <stdio.h>

#include "common/jsonutil.h"

static ty_status same_shape_plan(nn_layer *l, ty_err *err)
{
    l->out = l->in;
    return TY_OK;
}

static ty_status parse_eps(nn_layer *l, const json_t *obj, json_t *norm,
                           ty_err *err)
{
    double eps;
    ty_status st =
        tyjson_get_number(obj, "eps", "", 0, 0.0, 1.0, 1e-5, &eps, err);
    if (st != TY_OK)
        return st;
    if (!(eps > 0.0))
        return ty_fail(err, TY_EINVAL, "eps",
                       "eps must be above 0 and at most 1, got %g", eps);
    l->eps = (float)eps;
    json_object_set_new(norm, "eps", json_real(eps));
    return TY_OK;
}

/* ---- batchnorm ---- */

static const char *const batchnorm_keys[] = {"type", "momentum", "eps", NULL};

static ty_status batchnorm_parse(nn_layer *l, const json_t *obj, json_t *norm,
                                 ty_err *err)
{
    double momentum;
    ty_status st = tyjson_get_number(obj, "momentum", "", 0, 0.0, 1.0, 0.1,
                                     &momentum, err);
    if (st != TY_OK)
        return st;
    l->momentum = (float)momentum;
    json_object_set_new(norm, "momentum", json_real(momentum));
    return parse_eps(l, obj, norm, err);
}

/* Values per channel in one example: 1 for (C), H * W for (C, H, W). */
static uint32_t bn_spatial(const nn_layer *l)
{
    return l->in.ndim == 3 ? l->in.d[1] * l->in.d[2] : 1;
}

static ty_status batchnorm_plan(nn_layer *l, ty_err *err)
{
    if (l->in.ndim != 1 && l->in.ndim != 3) {
        char shape[96];
        nn_shape_format(&l->in, shape, sizeof shape);
        return ty_fail(err, TY_EINVAL, "",
                       "its input has shape %s but batchnorm needs a (C) "
                       "vector or a (C, H, W) image",
                       shape);
    }
    const uint32_t c = l->in.d[0];
    l->out = l->in;
    l->tensors[0] = (nn_tensor_desc){
        .suffix = "weight", .ndim = 1, .shape = {c}, .numel = c};
    l->tensors[1] = (nn_tensor_desc){
        .suffix = "bias", .ndim = 1, .shape = {c}, .offset = c, .numel = c};
    l->tensors[2] = (nn_tensor_desc){.suffix = "running_mean",
                                     .ndim = 1,
                                     .shape = {c},
                                     .numel = c,
                                     .buffer = 1};
    l->tensors[3] = (nn_tensor_desc){.suffix = "running_var",
                                     .ndim = 1,
                                     .shape = {c},
                                     .offset = c,
                                     .numel = c,
                                     .buffer = 1};
    l->n_tensors = 4;
    l->scratch_fixed = 2ull * c; /* mean, invstd */
    return TY_OK;
}

static void batchnorm_init(const nn_layer *l, float *params, float *buffers,
                           ty_rng *rng)
{
    const uint32_t c = l->in.d[0];
    for (uint32_t i = 0; i < c; i++) {
        params[i] = 1.0f;
        params[c + i] = 0.0f;
        buffers[i] = 0.0f;
        buffers[c + i] = 1.0f;
    }
}

/* Batch statistics need two values per channel; see the file comment. */
static int bn_batch_stats(const nn_layer *l, const nn_pass *p)
{
    return p->training && (uint64_t)p->n * bn_spatial(l) >= 2;
}

static void batchnorm_forward(const nn_layer *l, const nn_pass *p,
                              const float *params, const float *in, float *out,
                              float *scratch)
{
    const uint32_t c = l->in.d[0];
    float *running = p->buffers + l->buffer_offset;
    p->be->batchnorm_forward(p->ex, out, scratch, scratch + c, running,
                             running + c, in, params, params + c, p->n, c,
                             bn_spatial(l), bn_batch_stats(l, p), l->momentum,
                             l->eps);
}

static void batchnorm_backward(const nn_layer *l, const nn_pass *p,
                               const float *params, float *grads,
                               const float *in, const float *out,
                               const float *dout, float *din,
                               const float *scratch)
{
    const uint32_t c = l->in.d[0];
    p->be->batchnorm_backward(p->ex, din, grads, grads + c, dout, in, params,
                              scratch, scratch + c, p->n, c, bn_spatial(l),
                              bn_batch_stats(l, p));
}

const nn_layer_kind nn_batchnorm_kind = {
    .name = "batchnorm",
    .keys = batchnorm_keys,
    .parse = batchnorm_parse,
    .plan = batchnorm_plan,
    .init = batchnorm_init,
    .forward = batchnorm_forward,
    .backward = batchnorm_backward,
};

/* ---- layernorm ---- */

static const char *const layernorm_keys[] = {"type", "eps", NULL};

/* Values normalized together: the whole example, or on a sequence (T, C)
 * each position's C (nn.LayerNorm(C)); and the rows of them per example. */
static uint64_t ln_width(const nn_layer *l)
{
    return l->in.seq ? l->in.d[l->in.ndim - 1] : nn_shape_numel(&l->in);
}

static uint32_t ln_rows(const nn_layer *l)
{
    return l->in.seq ? l->in.d[0] : 1;
}

static ty_status layernorm_plan(nn_layer *l, ty_err *err)
{
    const uint64_t numel = ln_width(l);
    l->out = l->in;
    nn_tensor_desc w = {.suffix = "weight", .ndim = l->in.ndim, .numel = numel};
    for (uint32_t i = 0; i < l->in.ndim; i++)
        w.shape[i] = l->in.d[i];
    if (l->in.seq) {
        w.ndim = 1;
        w.shape[0] = (uint32_t)numel;
    }
    nn_tensor_desc b = w;
    b.suffix = "bias";
    b.offset = numel;
    l->tensors[0] = w;
    l->tensors[1] = b;
    l->n_tensors = 2;
    l->scratch_per_example = 2ull * ln_rows(l); /* mean, rstd per row */
    return TY_OK;
}

static void layernorm_init(const nn_layer *l, float *params, float *buffers,
                           ty_rng *rng)
{
    const uint64_t numel = ln_width(l);
    for (uint64_t i = 0; i < numel; i++) {
        params[i] = 1.0f;
        params[numel + i] = 0.0f;
    }
}

static void layernorm_forward(const nn_layer *l, const nn_pass *p,
                              const float *params, const float *in, float *out,
                              float *scratch)
{
    const uint32_t d = (uint32_t)ln_width(l), rows = p->n * ln_rows(l);
    p->be->layernorm_forward(p->ex, out, scratch, scratch + rows, in, params,
                             params + d, rows, d, l->eps);
}

static void layernorm_backward(const nn_layer *l, const nn_pass *p,
                               const float *params, float *grads,
                               const float *in, const float *out,
                               const float *dout, float *din,
                               const float *scratch)
{
    const uint32_t d = (uint32_t)ln_width(l), rows = p->n * ln_rows(l);
    p->be->layernorm_backward(p->ex, din, grads, grads + d, dout, in, params,
                              scratch, scratch + rows, rows, d);
}

const nn_layer_kind nn_layernorm_kind = {
    .name = "layernorm",
    .keys = layernorm_keys,
    .parse = parse_eps,
    .plan = layernorm_plan,
    .init = layernorm_init,
    .forward = layernorm_forward,
    .backward = layernorm_backward,
};

/* ---- leaky_relu [nn.LeakyReLU(negative_slope)] ---- */

static const char *const leaky_relu_keys[] = {"type", "negative_slope", NULL};

static ty_status leaky_relu_parse(nn_layer *l, const json_t *obj, json_t *norm,
                                  ty_err *err)
{
    double slope;
    ty_status st = tyjson_get_number(obj, "negative_slope", "", 0, -INFINITY,
                                     INFINITY, 0.01, &slope, err);
    if (st != TY_OK)
        return st;
    l->slope = (float)slope;
    json_object_set_new(norm, "negative_slope", json_real(slope));
    return TY_OK;
}

static void leaky_relu_forward(const nn_layer *l, const nn_pass *p,
                               const float *params, const float *in, float *out,
                               float *scratch)
{
    p->be->leaky_relu_forward(p->ex, out, in,
                              (size_t)p->n * nn_shape_numel(&l->in), l->slope);
}

static void leaky_relu_backward(const nn_layer *l, const nn_pass *p,
                                const float *params, float *grads,
                                const float *in, const float *out,
                                const float *dout, float *din,
                                const float *scratch)
{
    if (din)
        p->be->leaky_relu_backward(p->ex, din, dout, in,
                                   (size_t)p->n * nn_shape_numel(&l->in),
                                   l->slope);
}

const nn_layer_kind nn_leaky_relu_kind = {
    .name = "leaky_relu",
    .keys = leaky_relu_keys,
    .parse = leaky_relu_parse,
    .plan = same_shape_plan,
    .forward = leaky_relu_forward,
    .backward = leaky_relu_backward,
};

/* ---- softmax [nn.Softmax(dim=1)] over a rank-1 input ---- */

static const char *const softmax_keys[] = {"type", NULL};

static ty_status softmax_plan(nn_layer *l, ty_err *err)
{
    if (l->in.ndim != 1) {
        char shape[96];
        nn_shape_format(&l->in, shape, sizeof shape);
        return ty_fail(err, TY_EINVAL, "",
                       "its input has shape %s but softmax needs a vector; "
                       "add a {\"type\": \"flatten\"} layer before it",
                       shape);
    }
    l->out = l->in;
    return TY_OK;
}

static void softmax_forward(const nn_layer *l, const nn_pass *p,
                            const float *params, const float *in, float *out,
                            float *scratch)
{
    p->be->softmax_forward(p->ex, out, in, p->n, l->in.d[0]);
}

static void softmax_backward(const nn_layer *l, const nn_pass *p,
                             const float *params, float *grads, const float *in,
                             const float *out, const float *dout, float *din,
                             const float *scratch)
{
    if (din)
        p->be->softmax_backward(p->ex, din, dout, out, p->n, l->in.d[0]);
}

const nn_layer_kind nn_softmax_kind = {
    .name = "softmax",
    .keys = softmax_keys,
    .plan = softmax_plan,
    .forward = softmax_forward,
    .backward = softmax_backward,
};
