/*
 * nn_util.c - the engine core's small shared helpers (declared in
 * nn_internal.h): shape arithmetic and printing, and copying floats in a
 * backend's memory.
 *
 * They sit below every other file of models/ and call none of them, so that
 * the layers, the losses and the network code can all use them without
 * calling each other both ways (they lived in layers.c and nn_net.c, which
 * made layers.c, the layer kinds, loss.c and nn_net.c one call circle).
 */
#include "models/nn_internal.h"

#include <stdio.h>
#include <string.h>

uint64_t nn_shape_numel(const nn_shape *s)
{
    uint64_t n = 1;
    for (uint32_t i = 0; i < s->ndim; i++)
        n *= s->d[i];
    return n;
}

void nn_shape_format(const nn_shape *s, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < s->ndim && used < n; i++) {
        int w = snprintf(buf + used, n - used, "%s%u", i ? ", " : "[", s->d[i]);
        if (w < 0)
            return;
        used += (size_t)w;
    }
    if (used < n)
        snprintf(buf + used, n - used, "]");
}

void nn_copy_floats(const nn_backend *be, const nn_exec *ex, float *dst,
                    const float *src, size_t len)
{
    if (nn_backend_host_visible(be)) {
        memcpy(dst, src, len * sizeof *dst);
        return;
    }
    be->copy(ex, dst, src, len * sizeof *dst);
}
