/*
 * layers_conv.c - the image layer kinds: conv2d, maxpool2d, avgpool2d and
 * global_avgpool, on (C, H, W) examples stored NCHW.
 *
 * Each reads its spec (sizes as a number or an [h, w] pair, normalized to
 * the pair), plans its output shape and checks every size there, so the
 * kernels (backend.h's conv2d_* and pool2d_*, described by an nn_conv_desc
 * built from the layer) never see an impossible geometry. PyTorch's
 * equivalents: nn.Conv2d, nn.MaxPool2d, nn.AvgPool2d (ceil_mode False,
 * count_include_pad True) and a mean over (H, W).
 */
#include "models/nn_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/jsonutil.h"

#define CONV_MAX_SIZE 4096       /* kernel, stride, dilation, padding */
#define CONV_MAX_OUT (1u << 26)  /* output values per example */
#define CONV_MAX_WORK (1u << 28) /* work arena floats per thread */

/* An integral JSON number (3 or 3.0) into *out; 0 when it is not one. */
static int int_value(const json_t *v, int64_t *out)
{
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return 1;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d != floor(d) || fabs(d) > 1e15)
            return 0;
        *out = (int64_t)d;
        return 1;
    }
    return 0;
}

/* obj[key] as a number (both dimensions) or an [h, w] pair, each in [min,
 * max]; absent or null gives def for both unless required. */
static ty_status get_pair(const json_t *obj, const char *key, int required,
                          int64_t min, int64_t max, uint32_t def,
                          uint32_t out[2], ty_err *err)
{
    const json_t *v = json_object_get(obj, key);
    int64_t x[2];
    if (!v || json_is_null(v)) {
        if (required)
            return ty_fail(err, TY_EINVAL, key,
                           "%s is required: a number or an [h, w] pair", key);
        out[0] = out[1] = def;
        return TY_OK;
    }
    if (json_is_array(v)) {
        if (json_array_size(v) != 2 ||
            !int_value(json_array_get(v, 0), &x[0]) ||
            !int_value(json_array_get(v, 1), &x[1]))
            return ty_fail(err, TY_EINVAL, key,
                           "%s must be an integer or an [h, w] pair of "
                           "integers",
                           key);
    } else if (int_value(v, &x[0])) {
        x[1] = x[0];
    } else {
        return ty_fail(err, TY_EINVAL, key,
                       "%s must be an integer or an [h, w] pair of integers",
                       key);
    }
    for (int i = 0; i < 2; i++)
        if (x[i] < min || x[i] > max)
            return ty_fail(err, TY_EINVAL, key,
                           "%s must be between %lld and %lld, got %lld", key,
                           (long long)min, (long long)max, (long long)x[i]);
    out[0] = (uint32_t)x[0];
    out[1] = (uint32_t)x[1];
    return TY_OK;
}

static json_t *pair_json(const uint32_t v[2])
{
    return json_pack("[II]", (json_int_t)v[0], (json_int_t)v[1]);
}

static ty_status need_image(const nn_layer *l, ty_err *err)
{
    if (l->in.ndim == 3)
        return TY_OK;
    char shape[96];
    nn_shape_format(&l->in, shape, sizeof shape);
    return ty_fail(err, TY_EINVAL, "",
                   "its input has shape %s but %s needs (C, H, W) input "
                   "(channels, height, width), such as an image dataset's",
                   shape, l->kind->name);
}

/* Output height and width of a sliding window (what: "kernel", "pool
 * window") over l->in; fails, naming field, when the (padded) input is
 * smaller than the (dilated) window. */
static ty_status window_out(nn_layer *l, const char *field, const char *what,
                            uint32_t out[2], ty_err *err)
{
    uint64_t eff[2], padded[2];
    for (int i = 0; i < 2; i++) {
        eff[i] = (uint64_t)l->dilation[i] * (l->kernel[i] - 1) + 1;
        padded[i] = (uint64_t)l->in.d[1 + i] + 2ull * l->pad[i];
    }
    if (padded[0] >= eff[0] && padded[1] >= eff[1]) {
        for (int i = 0; i < 2; i++)
            out[i] = (uint32_t)((padded[i] - eff[i]) / l->stride[i] + 1);
        return TY_OK;
    }
    return ty_fail(err, TY_EINVAL, field,
                   "the input (%u x %u, padding [%u, %u]) is too small for "
                   "the %s, which spans %llu x %llu; use a smaller %s or "
                   "more padding",
                   l->in.d[1], l->in.d[2], l->pad[0], l->pad[1], what,
                   (unsigned long long)eff[0], (unsigned long long)eff[1],
                   field);
}

static void desc_of(const nn_layer *l, nn_conv_desc *d)
{
    *d = (nn_conv_desc){.in_c = l->in.d[0],
                        .in_h = l->in.d[1],
                        .in_w = l->in.d[2],
                        .groups = 1};
    if (l->out.ndim == 3) {
        d->out_c = l->out.d[0];
        d->out_h = l->out.d[1];
        d->out_w = l->out.d[2];
    } else { /* global_avgpool: (C) is (C, 1, 1) */
        d->out_c = l->out.d[0];
        d->out_h = d->out_w = 1;
    }
    for (int i = 0; i < 2; i++) {
        d->kernel[i] = l->kernel[i];
        d->stride[i] = l->stride[i];
        d->pad[i] = l->pad[i];
        d->dilation[i] = l->dilation[i] ? l->dilation[i] : 1;
    }
    if (l->type == NN_LAYER_CONV2D)
        d->groups = l->groups;
}

/* ---- conv2d: out (F, OH, OW) = bias + W (F, C/groups, kh, kw) * in ---- */

static const char *const conv_keys[] = {"type",   "filters", "kernel_size",
                                        "stride", "padding", "dilation",
                                        "groups", "bias",    NULL};

static ty_status conv_parse(nn_layer *l, const json_t *obj, json_t *norm,
                            ty_err *err)
{
    int64_t filters, groups;
    int bias;
    ty_status st;
    if ((st = tyjson_get_int(obj, "filters", "", 1, 1, 65536, 0, &filters,
                             err)) != TY_OK ||
        (st = get_pair(obj, "kernel_size", 1, 1, CONV_MAX_SIZE, 0, l->kernel,
                       err)) != TY_OK ||
        (st = get_pair(obj, "stride", 0, 1, CONV_MAX_SIZE, 1, l->stride,
                       err)) != TY_OK ||
        (st = get_pair(obj, "dilation", 0, 1, CONV_MAX_SIZE, 1, l->dilation,
                       err)) != TY_OK ||
        (st = tyjson_get_int(obj, "groups", "", 0, 1, 65536, 1, &groups,
                             err)) != TY_OK ||
        (st = tyjson_get_bool(obj, "bias", "", 0, 1, &bias, err)) != TY_OK)
        return st;
    const json_t *pad = json_object_get(obj, "padding");
    const char *mode = json_is_string(pad) ? json_string_value(pad) : NULL;
    if (mode && !strcmp(mode, "same")) {
        if (l->stride[0] != 1 || l->stride[1] != 1)
            return ty_fail(err, TY_EINVAL, "padding",
                           "padding \"same\" needs stride 1, got stride [%u, "
                           "%u]; give padding as a number instead",
                           l->stride[0], l->stride[1]);
        for (int i = 0; i < 2; i++) {
            uint32_t span = l->dilation[i] * (l->kernel[i] - 1);
            if (span % 2)
                return ty_fail(err, TY_EINVAL, "padding",
                               "padding \"same\" needs an odd kernel (after "
                               "dilation), got kernel_size [%u, %u] with "
                               "dilation [%u, %u]; give padding as a number "
                               "instead",
                               l->kernel[0], l->kernel[1], l->dilation[0],
                               l->dilation[1]);
            l->pad[i] = span / 2;
        }
    } else if (!pad || json_is_null(pad) || (mode && !strcmp(mode, "valid"))) {
        l->pad[0] = l->pad[1] = 0;
    } else if (mode) {
        return ty_fail(err, TY_EINVAL, "padding",
                       "padding must be \"same\", \"valid\", a number or an "
                       "[h, w] pair, not \"%.32s\"",
                       mode);
    } else if ((st = get_pair(obj, "padding", 0, 0, CONV_MAX_SIZE, 0, l->pad,
                              err)) != TY_OK) {
        return st;
    }
    l->filters = (uint32_t)filters;
    l->groups = (uint32_t)groups;
    l->bias = bias;
    json_object_set_new(norm, "filters", json_integer(filters));
    json_object_set_new(norm, "kernel_size", pair_json(l->kernel));
    json_object_set_new(norm, "stride", pair_json(l->stride));
    json_object_set_new(norm, "padding", pair_json(l->pad));
    json_object_set_new(norm, "dilation", pair_json(l->dilation));
    json_object_set_new(norm, "groups", json_integer(groups));
    json_object_set_new(norm, "bias", json_boolean(bias));
    return TY_OK;
}

static ty_status conv_plan(nn_layer *l, ty_err *err)
{
    ty_status st;
    if ((st = need_image(l, err)) != TY_OK)
        return st;
    const uint32_t c = l->in.d[0];
    if (c % l->groups)
        return ty_fail(err, TY_EINVAL, "groups",
                       "groups (%u) must divide the input's %u channels",
                       l->groups, c);
    if (l->filters % l->groups)
        return ty_fail(err, TY_EINVAL, "filters",
                       "filters (%u) must be a multiple of groups (%u)",
                       l->filters, l->groups);
    uint32_t hw[2];
    if ((st = window_out(l, "kernel_size", "kernel", hw, err)) != TY_OK)
        return st;
    l->out = (nn_shape){.ndim = 3, .d = {l->filters, hw[0], hw[1]}};
    if (nn_shape_numel(&l->out) > CONV_MAX_OUT)
        return ty_fail(err, TY_EINVAL, "filters",
                       "the output has %llu values per example; the limit is "
                       "%u",
                       (unsigned long long)nn_shape_numel(&l->out),
                       CONV_MAX_OUT);
    /* fan_in <= 2^24 * 2^24: no overflow; one filter may not exceed the
     * model's parameter limit, so the weight count cannot overflow either. */
    uint64_t fan_in = (uint64_t)(c / l->groups) * l->kernel[0] * l->kernel[1];
    if (fan_in > NN_MAX_PARAMS)
        return ty_fail(err, TY_EINVAL, "kernel_size",
                       "each filter has %llu weights; the model limit is %llu",
                       (unsigned long long)fan_in,
                       (unsigned long long)NN_MAX_PARAMS);
    nn_tensor_desc *w = &l->tensors[0];
    *w = (nn_tensor_desc){
        .suffix = "weight",
        .ndim = 4,
        .shape = {l->filters, c / l->groups, l->kernel[0], l->kernel[1]},
        .numel = fan_in * l->filters};
    l->n_tensors = 1;
    if (l->bias) {
        l->tensors[1] = (nn_tensor_desc){.suffix = "bias",
                                         .ndim = 1,
                                         .shape = {l->filters},
                                         .offset = w->numel,
                                         .numel = l->filters};
        l->n_tensors = 2;
    }
    /* Plans are made for the arch's backend (l->be): the CPU's work arena
     * holds one example's unfolded input and a gradient partial, a GPU's
     * the convolution library's workspace. */
    nn_conv_desc d;
    desc_of(l, &d);
    if (fan_in * nn_shape_numel(&l->out) / l->filters > CONV_MAX_WORK ||
        l->be->conv2d_work(&d) > CONV_MAX_WORK)
        return ty_fail(err, TY_EINVAL, "kernel_size",
                       "the layer would need more than %u floats of working "
                       "memory per thread; use a smaller kernel, fewer "
                       "channels or a smaller input",
                       CONV_MAX_WORK);
    l->work_per_thread = l->be->conv2d_work(&d);
    return TY_OK;
}

/* As PyTorch's nn.Conv2d: weight and bias uniform in +-1/sqrt(fan_in),
 * fan_in = C/groups * kh * kw. */
static void conv_init(const nn_layer *l, float *params, float *buffers,
                      ty_rng *rng)
{
    const nn_tensor_desc *w = &l->tensors[0];
    float bound = 1.0f / sqrtf((float)(w->numel / l->filters));
    for (uint32_t t = 0; t < l->n_tensors; t++) {
        float *x = params + l->tensors[t].offset;
        for (uint64_t i = 0; i < l->tensors[t].numel; i++)
            x[i] = (2.0f * ty_rng_uniform(rng) - 1.0f) * bound;
    }
}

static void conv_forward(const nn_layer *l, const nn_pass *p,
                         const float *params, const float *in, float *out,
                         float *scratch)
{
    nn_conv_desc d;
    desc_of(l, &d);
    p->be->conv2d_forward(p->ex, out, in, params,
                          l->bias ? params + l->tensors[1].offset : NULL, p->n,
                          &d);
}

static void conv_backward(const nn_layer *l, const nn_pass *p,
                          const float *params, float *grads, const float *in,
                          const float *out, const float *dout, float *din,
                          const float *scratch)
{
    nn_conv_desc d;
    desc_of(l, &d);
    p->be->conv2d_backward(p->ex, din, grads,
                           l->bias ? grads + l->tensors[1].offset : NULL, dout,
                           in, params, p->n, &d);
}

const nn_layer_kind nn_conv2d_kind = {
    .name = "conv2d",
    .keys = conv_keys,
    .parse = conv_parse,
    .plan = conv_plan,
    .init = conv_init,
    .forward = conv_forward,
    .backward = conv_backward,
};

/* ---- maxpool2d, avgpool2d: (C, H, W) -> (C, OH, OW) ---- */

static const char *const pool_keys[] = {"type", "pool_size", "stride",
                                        "padding", NULL};

static ty_status pool_parse(nn_layer *l, const json_t *obj, json_t *norm,
                            ty_err *err)
{
    ty_status st;
    if ((st = get_pair(obj, "pool_size", 1, 1, CONV_MAX_SIZE, 0, l->kernel,
                       err)) != TY_OK)
        return st;
    if ((st = get_pair(obj, "stride", 0, 1, CONV_MAX_SIZE, 0, l->stride,
                       err)) != TY_OK)
        return st;
    if (!l->stride[0]) { /* absent: the window's own size */
        l->stride[0] = l->kernel[0];
        l->stride[1] = l->kernel[1];
    }
    if ((st = get_pair(obj, "padding", 0, 0, CONV_MAX_SIZE, 0, l->pad, err)) !=
        TY_OK)
        return st;
    /* PyTorch's rule, which also keeps every window on real input. */
    if (l->pad[0] > l->kernel[0] / 2 || l->pad[1] > l->kernel[1] / 2)
        return ty_fail(err, TY_EINVAL, "padding",
                       "padding [%u, %u] must be at most half of pool_size "
                       "[%u, %u] (as in PyTorch)",
                       l->pad[0], l->pad[1], l->kernel[0], l->kernel[1]);
    l->dilation[0] = l->dilation[1] = 1;
    json_object_set_new(norm, "pool_size", pair_json(l->kernel));
    json_object_set_new(norm, "stride", pair_json(l->stride));
    json_object_set_new(norm, "padding", pair_json(l->pad));
    return TY_OK;
}

static ty_status pool_plan(nn_layer *l, ty_err *err)
{
    ty_status st;
    uint32_t hw[2];
    if ((st = need_image(l, err)) != TY_OK ||
        (st = window_out(l, "pool_size", "pool window", hw, err)) != TY_OK)
        return st;
    l->out = (nn_shape){.ndim = 3, .d = {l->in.d[0], hw[0], hw[1]}};
    /* maxpool keeps each output's argmax (an int32 per float slot). */
    if (l->type == NN_LAYER_MAXPOOL2D)
        l->scratch_per_example = nn_shape_numel(&l->out);
    return TY_OK;
}

static nn_op pool_op(const nn_layer *l)
{
    return l->type == NN_LAYER_MAXPOOL2D ? NN_OP_MAXPOOL2D : NN_OP_AVGPOOL2D;
}

static void pool_forward(const nn_layer *l, const nn_pass *p,
                         const float *params, const float *in, float *out,
                         float *scratch)
{
    nn_conv_desc d;
    desc_of(l, &d);
    /* Argmax indices are only needed by a backward pass. */
    int32_t *argmax = p->training && l->type == NN_LAYER_MAXPOOL2D
                          ? (int32_t *)scratch
                          : NULL;
    p->be->pool2d_forward(p->ex, pool_op(l), out, argmax, in, p->n, &d);
}

static void pool_backward(const nn_layer *l, const nn_pass *p,
                          const float *params, float *grads, const float *in,
                          const float *out, const float *dout, float *din,
                          const float *scratch)
{
    if (!din)
        return;
    nn_conv_desc d;
    desc_of(l, &d);
    p->be->pool2d_backward(p->ex, pool_op(l), din, dout,
                           (const int32_t *)scratch, p->n, &d);
}

const nn_layer_kind nn_maxpool2d_kind = {
    .name = "maxpool2d",
    .keys = pool_keys,
    .parse = pool_parse,
    .plan = pool_plan,
    .forward = pool_forward,
    .backward = pool_backward,
};

const nn_layer_kind nn_avgpool2d_kind = {
    .name = "avgpool2d",
    .keys = pool_keys,
    .parse = pool_parse,
    .plan = pool_plan,
    .forward = pool_forward,
    .backward = pool_backward,
};

/* ---- global_avgpool: (C, H, W) -> (C), an average pool over the whole
 * plane ---- */

static const char *const gap_keys[] = {"type", NULL};

static ty_status gap_plan(nn_layer *l, ty_err *err)
{
    ty_status st;
    if ((st = need_image(l, err)) != TY_OK)
        return st;
    for (int i = 0; i < 2; i++) {
        l->kernel[i] = l->stride[i] = l->in.d[1 + i];
        l->pad[i] = 0;
        l->dilation[i] = 1;
    }
    l->out = (nn_shape){.ndim = 1, .d = {l->in.d[0]}};
    return TY_OK;
}

const nn_layer_kind nn_global_avgpool_kind = {
    .name = "global_avgpool",
    .keys = gap_keys,
    .plan = gap_plan,
    .forward = pool_forward,
    .backward = pool_backward,
};
