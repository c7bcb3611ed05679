/*
 * layers_residual.c - the residual block: out = f(x) + g(x), with f the
 * block's "layers" and g its "projection" list (absent: the identity). The
 * PyTorch equivalent is a module with two nn.Sequential children, .body and
 * .projection, whose forward returns body(x) + projection(x) (or + x).
 *
 * Both lists are sub-networks (nn_arch) built in parse and owned by the
 * layer. The block's parameter slice is [body params | projection params]
 * and its buffer slice likewise, so the children's own offsets work inside
 * it; the state-dict names ("i.body.j.weight", "i.projection.j.weight")
 * come from nn_spec.c's tensor walk.
 *
 * Everything the children keep between forward and backward lives in the
 * block's scratch, laid out from the batch size of the pass (so forward and
 * backward, which see the same n, agree):
 *   [body activations and scratch | projection's | g0 | g1 | gx]
 * where g0/g1 carry gradients between the children's layers and gx gets
 * the projection's input gradient before it is added into din. Every region
 * starts on a 64-byte boundary; the per-region slack is in scratch_fixed.
 * Inference workspaces give each layer this scratch too, so a block runs
 * there unchanged.
 */
#include "models/nn_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RES_ALIGN 16u /* floats */

static const char *const residual_keys[] = {"type", "layers", "projection",
                                            NULL};

static uint64_t align_up(uint64_t n)
{
    return (n + RES_ALIGN - 1) / RES_ALIGN * RES_ALIGN;
}

/* Where one sequence's activations and layer scratch are for a pass. */
typedef struct {
    float *acts[NN_MAX_LAYERS + 1];
    float *scratch[NN_MAX_LAYERS];
} seq_bufs;

/* Floats seq_layout uses for n examples. */
static uint64_t seq_size(const nn_arch *a, uint64_t n)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < a->n_layers; i++) {
        const nn_layer *l = &a->layers[i];
        if (!l->kind->alias)
            total += align_up(n * nn_shape_numel(&l->out));
        total += align_up(n * l->scratch_per_example + l->scratch_fixed);
    }
    return total;
}

/* Per-example and fixed floats that bound seq_size for any n. */
static void seq_need(const nn_arch *a, uint64_t *per, uint64_t *fixed)
{
    for (uint32_t i = 0; i < a->n_layers; i++) {
        const nn_layer *l = &a->layers[i];
        if (!l->kind->alias) {
            *per += nn_shape_numel(&l->out);
            *fixed += RES_ALIGN;
        }
        *per += l->scratch_per_example;
        *fixed += l->scratch_fixed + RES_ALIGN;
    }
}

static void seq_layout(const nn_arch *a, uint64_t n, const float *in, float *at,
                       seq_bufs *b)
{
    b->acts[0] = (float *)in; /* read only: layers never write their input */
    for (uint32_t i = 0; i < a->n_layers; i++) {
        const nn_layer *l = &a->layers[i];
        if (l->kind->alias) {
            b->acts[i + 1] = b->acts[i];
        } else {
            b->acts[i + 1] = at;
            at += align_up(n * nn_shape_numel(&l->out));
        }
        b->scratch[i] = at;
        at += align_up(n * l->scratch_per_example + l->scratch_fixed);
    }
}

typedef struct {
    float *body, *proj;  /* the children's regions */
    float *g0, *g1, *gx; /* gradient buffers (backward) */
} res_regions;

static uint64_t grad_numel(const nn_layer *l)
{
    uint64_t g = l->body->max_numel;
    if (l->proj && l->proj->max_numel > g)
        g = l->proj->max_numel;
    return g;
}

static res_regions res_layout(const nn_layer *l, uint64_t n, float *scratch)
{
    res_regions r;
    r.body = scratch;
    r.proj = r.body + seq_size(l->body, n);
    float *at = r.proj + (l->proj ? seq_size(l->proj, n) : 0);
    const uint64_t g = align_up(n * grad_numel(l));
    r.g0 = at;
    r.g1 = at + g;
    r.gx = at + 2 * g;
    return r;
}

/* The pass a child runs in: the same, with its own buffer block. */
static nn_pass child_pass(const nn_layer *l, const nn_pass *p, int proj)
{
    nn_pass s = *p;
    s.grad_hook = NULL; /* the top sequence's only */
    if (p->buffers)
        s.buffers =
            p->buffers + l->buffer_offset + (proj ? l->body->buffer_count : 0);
    return s;
}

/* Builds the list under key into *out (at depth), appending its normalized
 * form to norm. Inner errors keep their full path. */
static ty_status build_child(nn_layer *l, const json_t *list, const char *key,
                             uint32_t depth, nn_arch **out, json_t *norm,
                             ty_err *err)
{
    char path[sizeof l->path + 16];
    snprintf(path, sizeof path, "%s.%s", l->path, key);
    nn_arch *a = calloc(1, sizeof *a);
    if (!a)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory parsing the model");
    json_t *list_norm = NULL;
    ty_status st =
        l->build_seq(list, path, &l->in, depth, l->be, a, &list_norm, err);
    if (st != TY_OK) {
        free(a);
        /* An error inside the list already names its full path; say which
         * block it is in, too. */
        size_t len = strlen(l->path);
        if (err && !strncmp(err->field, l->path, len) && err->field[len] == '.')
            ty_err_prefix(err, "layer %u (residual)", l->index);
        return st;
    }
    *out = a;
    json_object_set_new(norm, key, list_norm);
    return TY_OK;
}

static ty_status residual_parse(nn_layer *l, const json_t *obj, json_t *norm,
                                ty_err *err)
{
    /* The children sit one level below the list this layer is in: one more
     * than the brackets in its path ("model.layers[2]" holds depth 1). */
    uint32_t depth = 0;
    for (const char *c = l->path; *c; c++)
        depth += *c == '[';
    const json_t *layers = json_object_get(obj, "layers");
    if (!layers)
        return ty_fail(err, TY_EINVAL, "layers",
                       "layers is required: the block's list of layers, such "
                       "as [{\"type\": \"dense\", \"units\": 64}, {\"type\": "
                       "\"relu\"}]");
    ty_status st = build_child(l, layers, "layers", depth, &l->body, norm, err);
    if (st != TY_OK)
        return st;
    const json_t *proj = json_object_get(obj, "projection");
    if (proj && !json_is_null(proj))
        st = build_child(l, proj, "projection", depth, &l->proj, norm, err);
    return st;
}

static int same_shape(const nn_shape *a, const nn_shape *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (uint32_t i = 0; i < a->ndim; i++)
        if (a->d[i] != b->d[i])
            return 0;
    return 1;
}

static ty_status residual_plan(nn_layer *l, ty_err *err)
{
    const nn_shape *f = &l->body->output;
    const nn_shape *g = l->proj ? &l->proj->output : &l->in;
    if (!same_shape(f, g)) {
        char fs[96], gs[96];
        nn_shape_format(f, fs, sizeof fs);
        nn_shape_format(g, gs, sizeof gs);
        if (l->proj)
            return ty_fail(err, TY_EINVAL, "projection",
                           "the projection outputs shape %s but the block's "
                           "layers output %s; the two are added, so they "
                           "must match",
                           gs, fs);
        return ty_fail(err, TY_EINVAL, "layers",
                       "the block's layers output shape %s but its input has "
                       "shape %s, so the two cannot be added; add a "
                       "\"projection\" list that maps the input to %s (a "
                       "dense layer for vectors, a 1x1 conv2d for images)",
                       fs, gs, fs);
    }
    l->out = *f;
    l->n_tensors = 0;
    l->param_count = l->body->param_count;
    l->buffer_count = l->body->buffer_count;
    l->work_per_thread = l->body->max_work;
    uint64_t per = 0, fixed = 0;
    seq_need(l->body, &per, &fixed);
    if (l->proj) {
        l->param_count += l->proj->param_count;
        l->buffer_count += l->proj->buffer_count;
        if (l->proj->max_work > l->work_per_thread)
            l->work_per_thread = l->proj->max_work;
        seq_need(l->proj, &per, &fixed);
        per += nn_shape_numel(&l->in); /* gx */
    }
    per += 2 * grad_numel(l); /* g0, g1 */
    fixed += 3 * RES_ALIGN;
    l->scratch_per_example = per;
    l->scratch_fixed = fixed;
    return TY_OK;
}

static void residual_init(const nn_layer *l, float *params, float *buffers,
                          ty_rng *rng)
{
    nn_seq_init(l->body, params, buffers, rng);
    if (l->proj)
        nn_seq_init(l->proj, params + l->body->param_count,
                    buffers ? buffers + l->body->buffer_count : NULL, rng);
}

static void residual_destroy(nn_layer *l)
{
    if (l->body) {
        nn_arch_free(l->body);
        free(l->body);
        l->body = NULL;
    }
    if (l->proj) {
        nn_arch_free(l->proj);
        free(l->proj);
        l->proj = NULL;
    }
}

static void residual_forward(const nn_layer *l, const nn_pass *p,
                             const float *params, const float *in, float *out,
                             float *scratch)
{
    const res_regions r = res_layout(l, p->n, scratch);
    seq_bufs b;
    seq_layout(l->body, p->n, in, r.body, &b);
    nn_pass sub = child_pass(l, p, 0);
    nn_seq_forward(l->body, &sub, params, b.acts, b.scratch);
    const float *f = b.acts[l->body->n_layers];
    const float *g = in;
    if (l->proj) {
        seq_layout(l->proj, p->n, in, r.proj, &b);
        sub = child_pass(l, p, 1);
        nn_seq_forward(l->proj, &sub, params + l->body->param_count, b.acts,
                       b.scratch);
        g = b.acts[l->proj->n_layers];
    }
    p->be->add(p->ex, out, f, g, (size_t)p->n * nn_shape_numel(&l->out));
}

static void residual_backward(const nn_layer *l, const nn_pass *p,
                              const float *params, float *grads,
                              const float *in, const float *out,
                              const float *dout, float *din,
                              const float *scratch)
{
    /* scratch is the region forward filled; the gradient buffers in it are
     * this call's own. */
    const res_regions r = res_layout(l, p->n, (float *)scratch);
    const size_t len = (size_t)p->n * nn_shape_numel(&l->in);
    seq_bufs b;
    seq_layout(l->body, p->n, in, r.body, &b);
    nn_pass sub = child_pass(l, p, 0);
    nn_seq_backward(l->body, &sub, params, grads, b.acts, b.scratch, dout, r.g0,
                    r.g1, din);
    if (l->proj) {
        const uint64_t off = l->body->param_count;
        seq_layout(l->proj, p->n, in, r.proj, &b);
        sub = child_pass(l, p, 1);
        nn_seq_backward(l->proj, &sub, params + off, grads + off, b.acts,
                        b.scratch, dout, r.g0, r.g1, din ? r.gx : NULL);
        if (din)
            p->be->add(p->ex, din, din, r.gx, len);
    } else if (din) {
        p->be->add(p->ex, din, din, dout, len);
    }
}

const nn_layer_kind nn_residual_kind = {
    .name = "residual",
    .keys = residual_keys,
    .parse = residual_parse,
    .plan = residual_plan,
    .init = residual_init,
    .destroy = residual_destroy,
    .forward = residual_forward,
    .backward = residual_backward,
};
