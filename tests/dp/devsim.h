/*
 * devsim.h - a simulated device for the data-parallel trainer's device
 * path (dp_train --devsim; tests/dp/run_dp.py's devsim case), so the path
 * a CUDA gang takes (a backend that is not host visible, a device engine:
 * comm.h's "Memory and ordering") runs and is checked on a CPU machine.
 *
 *  - devsim_backend(): the CPU backend's kernels under another name (so
 *    nn_backend_host_visible says no and the trainer keeps a host mirror,
 *    uploads batches, downloads what it reads). Its memory is malloc'd
 *    but every allocation is recorded: upload must write into it from
 *    elsewhere, download read from it into elsewhere.
 *  - devsim_comm(inner): the MPI engine with device_memory 1. Its float
 *    collectives take only devsim memory, bcast only host memory.
 * A breach (a host read of the device's memory that skips the seam: the
 * step's scalars or a flag all-reduced from host memory, a parameter
 * broadcast from the device block) fails the collective (TY_EINTERNAL) or
 * the backend's status (TY_EDEVICE), naming it; the run then fails.
 * Test-only: header-defined, one process one device.
 */
#ifndef TY_TESTS_DP_DEVSIM_H
#define TY_TESTS_DP_DEVSIM_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/backend.h"
#include "models/train/comm.h"

typedef struct {
    uintptr_t lo, hi;
} devsim_range;

static devsim_range *devsim_mem;
static size_t devsim_n, devsim_cap;
static char devsim_breach[256];
static nn_backend devsim_be;

static int devsim_owns(const void *p, size_t bytes)
{
    const uintptr_t a = (uintptr_t)p, b = a + bytes;
    for (size_t i = 0; i < devsim_n; i++)
        if (a >= devsim_mem[i].lo && b <= devsim_mem[i].hi)
            return 1;
    return 0;
}

static void devsim_fail(const char *what)
{
    if (!devsim_breach[0])
        snprintf(devsim_breach, sizeof devsim_breach, "devsim: %s", what);
}

static void *devsim_alloc(const nn_exec *ex, size_t bytes)
{
    (void)ex;
    if (devsim_n == devsim_cap) {
        size_t cap = devsim_cap ? 2 * devsim_cap : 64;
        devsim_range *m = realloc(devsim_mem, cap * sizeof *m);
        if (!m)
            return NULL;
        devsim_mem = m;
        devsim_cap = cap;
    }
    size_t n = (bytes + 255) / 256 * 256;
    void *p = aligned_alloc(256, n ? n : 256);
    if (p)
        devsim_mem[devsim_n++] =
            (devsim_range){(uintptr_t)p, (uintptr_t)p + (n ? n : 256)};
    return p;
}

static void devsim_release(const nn_exec *ex, void *p)
{
    (void)ex;
    for (size_t i = 0; p && i < devsim_n; i++)
        if (devsim_mem[i].lo == (uintptr_t)p) {
            devsim_mem[i] = devsim_mem[--devsim_n];
            break;
        }
    free(p);
}

static void devsim_upload(const nn_exec *ex, void *dst, const void *src,
                          size_t bytes)
{
    (void)ex;
    if (!devsim_owns(dst, bytes) || devsim_owns(src, bytes))
        devsim_fail("an upload not from the host into the device's memory");
    memcpy(dst, src, bytes);
}

static void devsim_download(const nn_exec *ex, void *dst, const void *src,
                            size_t bytes)
{
    (void)ex;
    if (!devsim_owns(src, bytes) || devsim_owns(dst, bytes))
        devsim_fail("a download not from the device's memory to the host");
    memcpy(dst, src, bytes);
}

static ty_status devsim_status(const nn_exec *ex, ty_err *err)
{
    (void)ex;
    if (!devsim_breach[0])
        return TY_OK;
    return ty_fail(err, TY_EDEVICE, NULL, "%s", devsim_breach);
}

static const nn_backend *devsim_backend(void)
{
    devsim_be = nn_backend_cpu;
    devsim_be.name = "devsim";
    devsim_be.alloc = devsim_alloc;
    devsim_be.release = devsim_release;
    devsim_be.upload = devsim_upload;
    devsim_be.download = devsim_download;
    devsim_be.status = devsim_status;
    return &devsim_be;
}

/* ---- the device engine: the MPI comm in c->impl ---- */

static nn_comm *devsim_inner(nn_comm *c) { return c->impl; }

static ty_status devsim_check(const float *buf, size_t n, ty_err *err)
{
    if (devsim_owns(buf, n * sizeof *buf))
        return TY_OK;
    devsim_fail("a device collective given host memory");
    return ty_fail(err, TY_EINTERNAL, NULL, "%s", devsim_breach);
}

static ty_status devsim_allreduce(nn_comm *c, const nn_exec *ex, float *buf,
                                  size_t n, float scale, ty_err *err)
{
    nn_comm *in = devsim_inner(c);
    ty_status st = devsim_check(buf, n, err);
    if (st == TY_OK)
        st = in->ops->allreduce(in, ex, buf, n, scale, err);
    c->stats = in->stats;
    return st;
}

static ty_status devsim_allreduce_start(nn_comm *c, const nn_exec *ex,
                                        float *buf, size_t n, float scale,
                                        nn_comm_req *req, ty_err *err)
{
    nn_comm *in = devsim_inner(c);
    ty_status st = devsim_check(buf, n, err);
    if (st == TY_OK)
        st = in->ops->allreduce_start(in, ex, buf, n, scale, req, err);
    c->stats = in->stats;
    return st;
}

static ty_status devsim_allreduce_wait(nn_comm *c, const nn_exec *ex,
                                       nn_comm_req req, ty_err *err)
{
    nn_comm *in = devsim_inner(c);
    return in->ops->allreduce_wait(in, ex, req, err);
}

static void devsim_progress(nn_comm *c)
{
    nn_comm *in = devsim_inner(c);
    if (in->ops->progress)
        in->ops->progress(in);
}

static ty_status devsim_bcast(nn_comm *c, void *buf, size_t bytes, int root,
                              ty_err *err)
{
    nn_comm *in = devsim_inner(c);
    if (devsim_owns(buf, bytes)) {
        devsim_fail("a broadcast of the device's memory (bcast takes host "
                    "memory)");
        return ty_fail(err, TY_EINTERNAL, NULL, "%s", devsim_breach);
    }
    ty_status st = in->ops->bcast(in, buf, bytes, root, err);
    c->stats = in->stats;
    return st;
}

static ty_status devsim_barrier(nn_comm *c, ty_err *err)
{
    nn_comm *in = devsim_inner(c);
    return in->ops->barrier(in, err);
}

static void devsim_abort(nn_comm *c, const char *why)
{
    nn_comm *in = devsim_inner(c);
    in->ops->abort(in, why);
}

static void devsim_destroy(nn_comm *c)
{
    nn_comm *in = devsim_inner(c);
    if (in->ops->destroy)
        in->ops->destroy(in);
    free(c);
}

static const nn_comm_ops devsim_comm_ops = {
    .name = "devsim",
    .allreduce = devsim_allreduce,
    .allreduce_start = devsim_allreduce_start,
    .allreduce_wait = devsim_allreduce_wait,
    .progress = devsim_progress,
    .bcast = devsim_bcast,
    .barrier = devsim_barrier,
    .abort = devsim_abort,
    .destroy = devsim_destroy,
};

/* A device engine over inner (taken: destroy frees both); NULL when out
 * of memory (inner is left to the caller then). */
static nn_comm *devsim_comm(nn_comm *inner)
{
    nn_comm *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    *c = *inner;
    c->ops = &devsim_comm_ops;
    c->impl = inner;
    c->device_memory = 1;
    return c;
}

#endif
