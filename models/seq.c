/*
 * seq.c - a sequence of layers at run time: initialise, forward, backward
 * and free, each through the layers' kind tables (nn_layer_kind), so that
 * nothing here knows a kind by name. The network runs its top sequence
 * through these, and a residual block its body and projection; the
 * builder (nn_spec.c) is handed to composite kinds as nn_layer.build_seq
 * rather than called by them, so the layer kinds, the builder and the
 * runner call down, never round a circle.
 */
#include <stdlib.h>
#include <string.h>

#include "models/nn_internal.h"

static void free_layers(nn_arch *arch)
{
    for (uint32_t i = 0; arch->layers && i < arch->n_layers; i++)
        if (arch->layers[i].kind && arch->layers[i].kind->destroy)
            arch->layers[i].kind->destroy(&arch->layers[i]);
}

void nn_arch_free(nn_arch *arch)
{
    if (!arch)
        return;
    free_layers(arch);
    free(arch->layers);
    free(arch->tensors);
    memset(arch, 0, sizeof *arch);
}

void nn_seq_init(const nn_arch *a, float *params, float *buffers, ty_rng *rng)
{
    for (uint32_t i = 0; i < a->n_layers; i++) {
        const nn_layer *l = &a->layers[i];
        if (l->kind->init)
            l->kind->init(l, params + l->param_offset,
                          l->buffer_count ? buffers + l->buffer_offset : NULL,
                          rng);
    }
}

void nn_seq_forward(const nn_arch *a, const nn_pass *p, const float *params,
                    float *const *acts, float *const *scratch)
{
    for (uint32_t i = 0; i < a->n_layers; i++) {
        const nn_layer *l = &a->layers[i];
        if (l->kind->alias)
            continue;
        l->kind->forward(l, p, params + l->param_offset, acts[i], acts[i + 1],
                         scratch[i]);
    }
}

void nn_seq_backward(const nn_arch *a, const nn_pass *p, const float *params,
                     float *grads, float *const *acts, float *const *scratch,
                     const float *dout, float *g0, float *g1, float *din)
{
    const float *cur = dout;
    /* The lowest parameter offset whose layer's backward has run: layers
     * write their own slice (a tied lm_head, which owns none, writes the
     * embedding's, which is lower and not final until the embedding ran). */
    uint64_t first_final = a->param_count;
    for (uint32_t i = a->n_layers; i-- > 0;) {
        const nn_layer *l = &a->layers[i];
        if (l->kind->alias)
            continue;
        /* Without a wanted input gradient, only layers after the first one
         * with parameters need the gradient of their input. */
        float *dst;
        if (i == 0)
            dst = din;
        else if (!din && i <= a->first_param_layer)
            dst = NULL;
        else
            dst = cur == g0 ? g1 : g0;
        l->kind->backward(l, p, params + l->param_offset,
                          grads + l->param_offset, acts[i], acts[i + 1], cur,
                          dst, scratch[i]);
        if (l->param_count && l->param_offset < first_final)
            first_final = l->param_offset;
        if (p->grad_hook)
            p->grad_hook(p->hook_ctx, dst ? first_final : 0);
        if (!dst)
            return;
        cur = dst;
    }
    if (p->grad_hook)
        p->grad_hook(p->hook_ctx, 0);
    /* Leading alias layers move no data: the gradient is where it was. */
    if (din && cur != din)
        nn_copy_floats(p->be, p->ex, din, cur,
                       (size_t)p->n * nn_shape_numel(&a->input));
}
