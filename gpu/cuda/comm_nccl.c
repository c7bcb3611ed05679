/*
 * comm_nccl.c - the NCCL engine of the collective seam (comm.h,
 * comm_nccl.h), for data-parallel ranks on CUDA devices. Built where CMake
 * finds CUDA and NCCL (TRAINYARD_HAVE_NCCL); otherwise every call says
 * the build has no NCCL. Plain C: NCCL's and the CUDA runtime's APIs are
 * C, and the scale runs as the backend's own kernel (nn_cuda_scale).
 *
 * Streams. The comm has its own stream; every collective runs there,
 * ordered after the work already queued on the caller's ex stream by an
 * event (recorded on ex's stream, waited for by the comm's stream), so the
 * backward pass keeps running on ex's stream while a bucket's all-reduce
 * runs beside it (the start/wait form, one pair of events per request).
 *
 * Reduce-scatter (ZeRO-1's buckets): one ncclReduce a rank's part, rooted
 * at that rank, in one ncclGroupStart/End (ncclReduceScatter needs equal
 * parts; the ranks' ranges cut a bucket anywhere), waited for and scaled
 * as an all-reduce.
 *
 * All-reduce with a scale: ncclAllReduce(ncclSum) in place on the comm's
 * stream, then, at wait, ex's stream waits on the collective's event and
 * the scale runs on ex's stream (nn_cuda_scale; skipped for a scale of
 * 1). A separate kernel, not NCCL's ncclAvg (a mean, not any scale) nor
 * its pre-multiplied sum (which scales each rank's input before the sum,
 * a different rounding from comm.h's (sum) * scale).
 *
 * No hangs. The communicator is made non-blocking (ncclConfig_t blocking
 * 0): init, collectives and finalize return at once (ncclInProgress while
 * NCCL works in the background). Every op that has to see a collective
 * finish polls: the collective's CUDA event and ncclCommGetAsyncError, a
 * short spin then naps, and gives up after the collective timeout; on a
 * timeout or an NCCL error it aborts the communicator (ncclCommAbort
 * stops its kernels, so nothing queued behind them waits forever), as
 * PyTorch's NCCL watchdog does. allreduce_wait therefore blocks the host
 * until its collective is done on the device, and the other ops (bcast,
 * barrier) until theirs are: an all-reduce still in flight on the GPU
 * never leaves the host waiting in a CUDA call it cannot give up. bcast
 * goes through page-locked chunks (BCAST_CHUNK bytes), so its copies are
 * stream work too and no copy into pageable memory blocks on the stream.
 *
 * Threads. The ops are one thread's (the trainer's), but abort may come
 * from any thread (a watchdog, a cancel): every op holds the comm's lock
 * while it runs; abort records its reason, aborts the NCCL communicator at
 * once when no op holds the lock, and otherwise leaves it to the op in
 * progress, which sees the request at its next poll (within a nap) and
 * fails with the reason.
 *
 * Failure. After the first failure the comm is broken: every later op
 * fails at once with TY_EDEVICE naming it. abort (comm.h) breaks this
 * rank's comm and aborts its NCCL communicator; NCCL carries no reason to
 * the peers: their collectives fail with NCCL's remote error where its
 * transport notices the closed connections, else at their collective
 * timeout. (The MPI engine's control channel has no NCCL twin.)
 */
#include "gpu/cuda/comm_nccl.h"

#if TRAINYARD_HAVE_NCCL

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* NCCL's header declares functions with empty parameter lists. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "gpu/cuda/backend.h"
#include "gpu/cuda/cuda_internal.h"

_Static_assert(NN_COMM_NCCL_ID_BYTES == NCCL_UNIQUE_ID_BYTES,
               "NN_COMM_NCCL_ID_BYTES is NCCL's unique id size");

#define WHY_MAX 400
#define SPIN_SECONDS 0.002             /* poll without sleeping this long */
#define NAP_NS 50000L                  /* then sleep this long between polls */
#define BCAST_CHUNK ((size_t)16 << 20) /* bcast's bytes per ncclBroadcast */

typedef struct {
    float *buf;
    size_t n;
    float scale;
    int used;
    cudaEvent_t ready; /* on ex's stream: the work before the collective */
    cudaEvent_t done;  /* on the comm's stream: the collective */
} inflight;

typedef struct {
    ncclComm_t nc; /* NULL once aborted or destroyed */
    int device;
    cudaStream_t stream;
    cudaEvent_t ev; /* bcast's and barrier's completion */
    float *d_one;   /* barrier's element */
    void *stage;    /* bcast's device chunk */
    void *pinned;   /* bcast's host chunk (page-locked) */
    size_t stage_bytes;
    /* Held by every op for its whole run; abort takes it only if free. */
    pthread_mutex_t lock;
    int broken;
    char why[WHY_MAX]; /* the first failure */
    /* An abort from another thread while an op runs: its reason, written
     * once (abort_claimed), then abort_req set; the op in progress takes
     * it at its next poll or at its end. */
    atomic_int abort_claimed, abort_req;
    char abort_why[WHY_MAX];
    inflight fl[NN_COMM_MAX_INFLIGHT];
} nccl_impl;

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Aborts the NCCL communicator (once): its kernels stop, its resources go. */
static void abort_nc(nccl_impl *m)
{
    if (!m->nc)
        return;
    (void)cudaSetDevice(m->device);
    (void)ncclCommAbort(m->nc);
    m->nc = NULL;
}

/* Marks the comm broken with the reason (first one wins), aborts the NCCL
 * communicator and returns TY_EDEVICE with the first reason. */
static ty_status broken_fail(nn_comm *c, ty_err *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ty_status broken_fail(nn_comm *c, ty_err *err, const char *fmt, ...)
{
    nccl_impl *m = c->impl;
    if (!m->broken) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m->why, sizeof m->why, fmt, ap);
        va_end(ap);
        m->broken = 1;
    }
    abort_nc(m);
    return ty_fail(err, TY_EDEVICE, NULL, "rank %d of %d: %s", c->rank,
                   c->world, m->why);
}

/* A pending abort (abort_req) becomes the comm's failure. m->lock held. */
static int take_abort(nn_comm *c)
{
    nccl_impl *m = c->impl;
    if (!atomic_load(&m->abort_req))
        return 0;
    if (!m->broken) {
        snprintf(m->why, sizeof m->why, "%s", m->abort_why);
        m->broken = 1;
    }
    abort_nc(m);
    return 1;
}

static ty_status check_usable(nn_comm *c, ty_err *err)
{
    nccl_impl *m = c->impl;
    take_abort(c);
    if (m->broken)
        return ty_fail(err, TY_EDEVICE, NULL,
                       "rank %d of %d: the communicator is broken: %s", c->rank,
                       c->world, m->why);
    if (cudaSetDevice(m->device) != cudaSuccess)
        return broken_fail(c, err, "cudaSetDevice(%d) failed: %s", m->device,
                           cudaGetErrorString(cudaGetLastError()));
    return TY_OK;
}

/* Every op runs between op_begin (the lock, then check_usable) and
 * op_end (an abort that came meanwhile, then the unlock). */
static ty_status op_begin(nn_comm *c, ty_err *err)
{
    nccl_impl *m = c->impl;
    pthread_mutex_lock(&m->lock);
    ty_status st = check_usable(c, err);
    if (st != TY_OK)
        pthread_mutex_unlock(&m->lock);
    return st;
}

static ty_status op_end(nn_comm *c, ty_status st)
{
    nccl_impl *m = c->impl;
    take_abort(c);
    pthread_mutex_unlock(&m->lock);
    return st;
}

/* NCCL's words for r: the error's name and its last message. */
static void nccl_text(ncclResult_t r, const ncclComm_t nc, char *buf,
                      size_t len)
{
    const char *last = ncclGetLastError(nc);
    snprintf(buf, len, "%s%s%s", ncclGetErrorString(r),
             last && *last ? ": " : "", last ? last : "");
}

static void nap(double waited)
{
    if (waited > SPIN_SECONDS) {
        struct timespec ts = {0, NAP_NS};
        nanosleep(&ts, NULL);
    }
}

/* The communicator's state once no NCCL call is in progress: polls
 * ncclCommGetAsyncError while it says ncclInProgress, up to the timeout.
 * r is what the call returned. TY_OK, or the comm broken (and aborted)
 * naming what. */
static ty_status settle(nn_comm *c, ncclResult_t r, const char *what,
                        ty_err *err)
{
    nccl_impl *m = c->impl;
    const double start = now_sec();
    char t[WHY_MAX];
    while (r == ncclInProgress) {
        if (atomic_load(&m->abort_req))
            return broken_fail(c, err, "%s stopped: %s", what, m->abort_why);
        double waited = now_sec() - start;
        if (waited > c->timeout_s)
            return broken_fail(c, err,
                               "%s did not complete within the collective "
                               "timeout of %g s (a peer died or stalled)",
                               what, c->timeout_s);
        nap(waited);
        ncclResult_t st = ncclSuccess;
        ncclResult_t q = ncclCommGetAsyncError(m->nc, &st);
        r = q != ncclSuccess ? q : st;
    }
    if (r != ncclSuccess) {
        nccl_text(r, m->nc, t, sizeof t);
        return broken_fail(c, err, "%s failed: %s", what, t);
    }
    return TY_OK;
}

/* Waits for ev (recorded after a collective on the comm's stream) with the
 * watchdog: NCCL's asynchronous error and the collective timeout. */
static ty_status poll_event(nn_comm *c, cudaEvent_t ev, const char *what,
                            ty_err *err)
{
    nccl_impl *m = c->impl;
    const double start = now_sec();
    char t[WHY_MAX];
    for (;;) {
        cudaError_t q = cudaEventQuery(ev);
        ncclResult_t st = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(m->nc, &st);
        if (r == ncclSuccess)
            r = st;
        if (r != ncclSuccess && r != ncclInProgress) {
            nccl_text(r, m->nc, t, sizeof t);
            return broken_fail(c, err, "%s failed: %s", what, t);
        }
        if (q == cudaSuccess)
            return TY_OK;
        if (atomic_load(&m->abort_req))
            return broken_fail(c, err, "%s stopped: %s", what, m->abort_why);
        if (q != cudaErrorNotReady)
            return broken_fail(c, err, "%s failed on the device: %s", what,
                               cudaGetErrorString(q));
        double waited = now_sec() - start;
        if (waited > c->timeout_s)
            return broken_fail(c, err,
                               "%s did not complete within the collective "
                               "timeout of %g s (a peer died or stalled); "
                               "the NCCL communicator was aborted",
                               what, c->timeout_s);
        nap(waited);
    }
}

/* ex's stream, checking that ex is a CUDA context on the comm's device. */
static ty_status ex_stream(nn_comm *c, const nn_exec *ex, cudaStream_t *out,
                           ty_err *err)
{
    nccl_impl *m = c->impl;
    const nn_cuda_ctx *x = ex ? nn_cuda_ctx_of(ex) : NULL;
    if (!x)
        return ty_fail(err, TY_EINVAL, NULL,
                       "the NCCL engine needs the CUDA execution context of "
                       "device %d",
                       m->device);
    if (x->device != m->device)
        return ty_fail(err, TY_EINVAL, NULL,
                       "the execution context is on device %d, the "
                       "communicator on device %d",
                       x->device, m->device);
    *out = x->stream;
    return TY_OK;
}

static ty_status cuda_call(nn_comm *c, cudaError_t e, const char *call,
                           ty_err *err)
{
    if (e == cudaSuccess)
        return TY_OK;
    return broken_fail(c, err, "%s failed: %s", call, cudaGetErrorString(e));
}

static ty_status ensure_events(nn_comm *c, inflight *f, ty_err *err)
{
    if (!f->ready &&
        cuda_call(c,
                  cudaEventCreateWithFlags(&f->ready, cudaEventDisableTiming),
                  "cudaEventCreate", err) != TY_OK)
        return TY_EDEVICE;
    if (!f->done &&
        cuda_call(c, cudaEventCreateWithFlags(&f->done, cudaEventDisableTiming),
                  "cudaEventCreate", err) != TY_OK)
        return TY_EDEVICE;
    return TY_OK;
}

/* Queues the reduce-scatter of [lo, hi) of buf on the comm's stream: one
 * ncclReduce a rank's part, rooted at that rank, in place, in one group
 * (ncclReduceScatter wants equal parts; ZeRO-1's ranges cut a bucket
 * anywhere). A part that is empty on one rank is empty on all (off is the
 * same everywhere), so every rank queues the same reduces. */
static ncclResult_t enqueue_reduce_scatter(nccl_impl *m, int world, float *buf,
                                           const size_t *off, size_t lo,
                                           size_t hi)
{
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess)
        return r;
    for (int q = 0; q < world && r == ncclSuccess; q++) {
        size_t a, b;
        nn_comm_part(off, q, lo, hi, &a, &b);
        if (b > a)
            r = ncclReduce(buf + a, buf + a, b - a, ncclFloat, ncclSum, q,
                           m->nc, m->stream);
    }
    ncclResult_t e = ncclGroupEnd();
    return r != ncclSuccess ? r : e;
}

/* Starts an all-reduce of buf[0..n) (off NULL) or the reduce-scatter of
 * the bucket [lo, hi) of buf under the ranges off; the wait scales what
 * this rank receives. */
static ty_status start_locked(nn_comm *c, const nn_exec *ex, float *buf,
                              size_t n, const size_t *off, size_t lo, size_t hi,
                              float scale, nn_comm_req *req, ty_err *err)
{
    nccl_impl *m = c->impl;
    cudaStream_t xs = NULL;
    ty_status st = ex_stream(c, ex, &xs, err);
    if (st != TY_OK)
        return st;
    int k = 0;
    while (k < NN_COMM_MAX_INFLIGHT && m->fl[k].used)
        k++;
    if (k == NN_COMM_MAX_INFLIGHT)
        return ty_fail(err, TY_ELIMIT, NULL,
                       "%d collectives are already in flight",
                       NN_COMM_MAX_INFLIGHT);
    inflight *f = &m->fl[k];
    if ((st = ensure_events(c, f, err)) != TY_OK ||
        (st = cuda_call(c, cudaEventRecord(f->ready, xs), "cudaEventRecord",
                        err)) != TY_OK ||
        (st = cuda_call(c, cudaStreamWaitEvent(m->stream, f->ready, 0),
                        "cudaStreamWaitEvent", err)) != TY_OK)
        return st;
    if (!off && n > 0 &&
        (st = settle(
             c,
             ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, m->nc, m->stream),
             "ncclAllReduce", err)) != TY_OK)
        return st;
    if (off && hi > lo &&
        (st = settle(c, enqueue_reduce_scatter(m, c->world, buf, off, lo, hi),
                     "the reduce-scatter's ncclReduce group", err)) != TY_OK)
        return st;
    if ((st = cuda_call(c, cudaEventRecord(f->done, m->stream),
                        "cudaEventRecord", err)) != TY_OK)
        return st;
    if (off) {
        size_t a, b;
        nn_comm_part(off, c->rank, lo, hi, &a, &b);
        f->buf = buf + a;
        f->n = b - a;
        nn_comm_count(c, NN_COMM_OP_REDUCE_SCATTER,
                      (uint64_t)(hi - lo) * sizeof(float));
    } else {
        f->buf = buf;
        f->n = n;
        nn_comm_count(c, NN_COMM_OP_ALLREDUCE, (uint64_t)n * sizeof(float));
    }
    f->scale = scale;
    f->used = 1;
    *req = k;
    return TY_OK;
}

static ty_status wait_locked(nn_comm *c, const nn_exec *ex, inflight *f,
                             ty_err *err)
{
    cudaStream_t xs = NULL;
    ty_status st = ex_stream(c, ex, &xs, err);
    if (st != TY_OK ||
        (st = poll_event(c, f->done, "ncclAllReduce", err)) != TY_OK ||
        (st = cuda_call(c, cudaStreamWaitEvent(xs, f->done, 0),
                        "cudaStreamWaitEvent", err)) != TY_OK)
        return st;
    if (f->scale != 1.0f && f->n > 0)
        nn_cuda_scale(ex, f->buf, f->n, f->scale);
    return TY_OK;
}

static ty_status nccl_allreduce_start(nn_comm *c, const nn_exec *ex, float *buf,
                                      size_t n, float scale, nn_comm_req *req,
                                      ty_err *err)
{
    ty_status st = op_begin(c, err);
    if (st != TY_OK)
        return st;
    return op_end(c, start_locked(c, ex, buf, n, NULL, 0, 0, scale, req, err));
}

static ty_status nccl_reduce_scatter_start(nn_comm *c, const nn_exec *ex,
                                           float *buf, const size_t *off,
                                           size_t lo, size_t hi, float scale,
                                           nn_comm_req *req, ty_err *err)
{
    if (off[0] != 0 || lo > hi || hi > off[c->world])
        return ty_fail(err, TY_EINTERNAL, NULL,
                       "a reduce-scatter of [%zu, %zu) outside its ranges "
                       "[%zu, %zu)",
                       lo, hi, off[0], off[c->world]);
    ty_status st = op_begin(c, err);
    if (st != TY_OK)
        return st;
    return op_end(c, start_locked(c, ex, buf, 0, off, lo, hi, scale, req, err));
}

static ty_status nccl_allreduce_wait(nn_comm *c, const nn_exec *ex,
                                     nn_comm_req req, ty_err *err)
{
    nccl_impl *m = c->impl;
    pthread_mutex_lock(&m->lock);
    if (req < 0 || req >= NN_COMM_MAX_INFLIGHT || !m->fl[req].used) {
        pthread_mutex_unlock(&m->lock);
        return ty_fail(err, TY_EINTERNAL, NULL,
                       "all-reduce request %d is not in flight", req);
    }
    m->fl[req].used = 0; /* released whatever happens */
    pthread_mutex_unlock(&m->lock);
    ty_status st = op_begin(c, err);
    if (st != TY_OK)
        return st;
    return op_end(c, wait_locked(c, ex, &m->fl[req], err));
}

static ty_status nccl_allreduce(nn_comm *c, const nn_exec *ex, float *buf,
                                size_t n, float scale, ty_err *err)
{
    nccl_impl *m = c->impl;
    ty_status st = op_begin(c, err);
    if (st != TY_OK)
        return st;
    nn_comm_req req;
    if ((st = start_locked(c, ex, buf, n, NULL, 0, 0, scale, &req, err)) ==
        TY_OK) {
        m->fl[req].used = 0;
        st = wait_locked(c, ex, &m->fl[req], err);
    }
    return op_end(c, st);
}

/* bcast's chunks: one of BCAST_CHUNK bytes (less for a smaller first
 * broadcast) on the device and one page-locked on the host. */
static ty_status ensure_stage(nn_comm *c, size_t bytes, ty_err *err)
{
    nccl_impl *m = c->impl;
    size_t want = bytes < BCAST_CHUNK ? bytes : BCAST_CHUNK;
    if (want <= m->stage_bytes)
        return TY_OK;
    if (m->stage)
        (void)cudaFree(m->stage);
    if (m->pinned)
        (void)cudaFreeHost(m->pinned);
    m->stage = m->pinned = NULL;
    m->stage_bytes = 0;
    ty_status st;
    if ((st = cuda_call(c, cudaMalloc(&m->stage, want), "cudaMalloc", err)) !=
            TY_OK ||
        (st = cuda_call(c, cudaMallocHost(&m->pinned, want), "cudaMallocHost",
                        err)) != TY_OK)
        return st;
    m->stage_bytes = want;
    return TY_OK;
}

/* Chunk by chunk through page-locked memory, so no copy call waits on the
 * stream: only poll_event does, under the timeout. */
static ty_status bcast_locked(nn_comm *c, unsigned char *buf, size_t bytes,
                              int root, ty_err *err)
{
    nccl_impl *m = c->impl;
    const int is_root = c->rank == root;
    ty_status st = ensure_stage(c, bytes, err);
    for (size_t off = 0; st == TY_OK && off < bytes; off += m->stage_bytes) {
        size_t len =
            bytes - off < m->stage_bytes ? bytes - off : m->stage_bytes;
        if (is_root) {
            memcpy(m->pinned, buf + off, len);
            st = cuda_call(c,
                           cudaMemcpyAsync(m->stage, m->pinned, len,
                                           cudaMemcpyHostToDevice, m->stream),
                           "cudaMemcpyAsync", err);
        }
        if (st == TY_OK)
            st = settle(c,
                        ncclBroadcast(m->stage, m->stage, len, ncclChar, root,
                                      m->nc, m->stream),
                        "ncclBroadcast", err);
        if (st == TY_OK && !is_root)
            st = cuda_call(c,
                           cudaMemcpyAsync(m->pinned, m->stage, len,
                                           cudaMemcpyDeviceToHost, m->stream),
                           "cudaMemcpyAsync", err);
        if (st == TY_OK)
            st = cuda_call(c, cudaEventRecord(m->ev, m->stream),
                           "cudaEventRecord", err);
        if (st == TY_OK)
            st = poll_event(c, m->ev, "ncclBroadcast", err);
        if (st == TY_OK && !is_root)
            memcpy(buf + off, m->pinned, len);
    }
    return st;
}

static ty_status nccl_bcast(nn_comm *c, void *buf, size_t bytes, int root,
                            ty_err *err)
{
    ty_status st = op_begin(c, err);
    if (st != TY_OK)
        return st;
    if (root < 0 || root >= c->world)
        return op_end(c, ty_fail(err, TY_EINTERNAL, NULL,
                                 "broadcast from rank %d in a world of %d",
                                 root, c->world));
    nn_comm_count(c, NN_COMM_OP_BCAST, bytes);
    return op_end(c, bcast_locked(c, buf, bytes, root, err));
}

static ty_status nccl_barrier(nn_comm *c, ty_err *err)
{
    nccl_impl *m = c->impl;
    ty_status st = op_begin(c, err);
    if (st != TY_OK)
        return st;
    if ((st = settle(c,
                     ncclAllReduce(m->d_one, m->d_one, 1, ncclFloat, ncclSum,
                                   m->nc, m->stream),
                     "the barrier's ncclAllReduce", err)) == TY_OK &&
        (st = cuda_call(c, cudaEventRecord(m->ev, m->stream), "cudaEventRecord",
                        err)) == TY_OK)
        st = poll_event(c, m->ev, "the barrier's ncclAllReduce", err);
    return op_end(c, st);
}

/* From any thread: the reason is set once; the NCCL communicator is
 * aborted here when no op runs, else by the op in progress at its next
 * poll (within a nap) or at its end. */
static void nccl_abort(nn_comm *c, const char *why)
{
    nccl_impl *m = c->impl;
    if (!atomic_exchange(&m->abort_claimed, 1)) {
        snprintf(m->abort_why, sizeof m->abort_why, "aborted on this rank: %s",
                 why && *why ? why : "no reason given");
        atomic_store(&m->abort_req, 1);
    }
    if (pthread_mutex_trylock(&m->lock) == 0) {
        take_abort(c);
        pthread_mutex_unlock(&m->lock);
    }
}

static void free_impl(nccl_impl *m)
{
    (void)cudaSetDevice(m->device);
    for (int k = 0; k < NN_COMM_MAX_INFLIGHT; k++) {
        if (m->fl[k].ready)
            (void)cudaEventDestroy(m->fl[k].ready);
        if (m->fl[k].done)
            (void)cudaEventDestroy(m->fl[k].done);
    }
    if (m->ev)
        (void)cudaEventDestroy(m->ev);
    if (m->stream)
        (void)cudaStreamDestroy(m->stream);
    if (m->d_one)
        (void)cudaFree(m->d_one);
    if (m->stage)
        (void)cudaFree(m->stage);
    if (m->pinned)
        (void)cudaFreeHost(m->pinned);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* A healthy communicator is finalized (its queued work flushed) under the
 * collective timeout, then destroyed; one that fails or stalls there, or
 * is broken, is aborted instead, which never waits for peers. No op may
 * run meanwhile (the caller's). */
static void nccl_destroy(nn_comm *c)
{
    if (!c)
        return;
    nccl_impl *m = c->impl;
    take_abort(c);
    if (m->nc && !m->broken && cudaSetDevice(m->device) == cudaSuccess) {
        ty_err e;
        if (settle(c, ncclCommFinalize(m->nc), "ncclCommFinalize", &e) ==
            TY_OK) {
            (void)ncclCommDestroy(m->nc);
            m->nc = NULL;
        }
    }
    abort_nc(m);
    free_impl(m);
    free(c);
}

static const nn_comm_ops nccl_ops = {
    .name = "nccl",
    .allreduce = nccl_allreduce,
    .allreduce_start = nccl_allreduce_start,
    .allreduce_wait = nccl_allreduce_wait,
    .reduce_scatter_start = nccl_reduce_scatter_start,
    .bcast = nccl_bcast,
    .barrier = nccl_barrier,
    .abort = nccl_abort,
    .destroy = nccl_destroy,
};

int nn_comm_nccl_available(void) { return 1; }

ty_status nn_comm_nccl_unique_id(void *out, ty_err *err)
{
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
        char t[WHY_MAX];
        nccl_text(r, NULL, t, sizeof t);
        return ty_fail(err, TY_EDEVICE, NULL,
                       "NCCL could not make a unique id: %s", t);
    }
    memcpy(out, id.internal, NN_COMM_NCCL_ID_BYTES);
    return TY_OK;
}

/* The comm's own CUDA objects on the current device. */
static ty_status make_cuda_objects(nccl_impl *m, ty_err *err)
{
    cudaError_t e =
        cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking);
    const char *call = "cudaStreamCreateWithFlags";
    if (e == cudaSuccess) {
        call = "cudaEventCreateWithFlags";
        e = cudaEventCreateWithFlags(&m->ev, cudaEventDisableTiming);
    }
    if (e == cudaSuccess) {
        call = "cudaMalloc";
        e = cudaMalloc((void **)&m->d_one, sizeof(float));
    }
    if (e == cudaSuccess) {
        call = "cudaMemset";
        e = cudaMemset(m->d_one, 0, sizeof(float));
    }
    if (e != cudaSuccess)
        return ty_fail(err, TY_EDEVICE, NULL, "%s on device %d failed: %s",
                       call, m->device, cudaGetErrorString(e));
    return TY_OK;
}

ty_status nn_comm_nccl_create(int rank, int world, const void *unique_id,
                              int device, double timeout_s, nn_comm **out,
                              ty_err *err)
{
    *out = NULL;
    int ndev = 0;
    if (world < 1 || rank < 0 || rank >= world || !unique_id)
        return ty_fail(err, TY_EINVAL, NULL,
                       "an NCCL rank needs 0 <= rank < world and a unique "
                       "id (rank %d, world %d)",
                       rank, world);
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess)
        return ty_fail(err, TY_EDEVICE, NULL, "no CUDA device for NCCL: %s",
                       cudaGetErrorString(e));
    if (device < 0 || device >= ndev)
        return ty_fail(err, TY_EINVAL, NULL,
                       "CUDA device %d does not exist (%d visible)", device,
                       ndev);
    if ((e = cudaSetDevice(device)) != cudaSuccess)
        return ty_fail(err, TY_EDEVICE, NULL, "cudaSetDevice(%d) failed: %s",
                       device, cudaGetErrorString(e));
    nn_comm *c = calloc(1, sizeof *c);
    nccl_impl *m = calloc(1, sizeof *m);
    if (!c || !m) {
        free(c);
        free(m);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    m->device = device;
    pthread_mutex_init(&m->lock, NULL);
    c->ops = &nccl_ops;
    c->rank = rank;
    c->world = world;
    c->local_world = 0; /* unknown here: the host comm's says */
    c->device_memory = 1;
    c->timeout_s = timeout_s > 0 ? timeout_s : NN_COMM_DEFAULT_TIMEOUT_S;
    c->impl = m;
    if (make_cuda_objects(m, err) != TY_OK) {
        free_impl(m);
        free(c);
        return TY_EDEVICE;
    }
    ncclUniqueId id;
    memcpy(id.internal, unique_id, NN_COMM_NCCL_ID_BYTES);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&m->nc, world, id, rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        char t[WHY_MAX];
        nccl_text(r, NULL, t, sizeof t);
        abort_nc(m);
        free_impl(m);
        free(c);
        return ty_fail(err, TY_EDEVICE, NULL,
                       "ncclCommInitRankConfig (rank %d of %d, device %d) "
                       "failed: %s",
                       rank, world, device, t);
    }
    /* Every rank's init meets the others': a missing peer is the
     * timeout, and settle aborts the half-made communicator. */
    if (settle(c, r, "ncclCommInitRankConfig", err) != TY_OK) {
        free_impl(m);
        free(c);
        return TY_EDEVICE;
    }
    *out = c;
    return TY_OK;
}

#else

int nn_comm_nccl_available(void) { return 0; }

static ty_status no_nccl(ty_err *err)
{
    return ty_fail(err, TY_EDEVICE, NULL,
                   "this build of trainyard has no NCCL engine (it is "
                   "built with the CUDA backend where CMake finds nccl.h "
                   "and libnccl: beside the CUDA toolkit, under NCCL_ROOT "
                   "or in the system's paths)");
}

ty_status nn_comm_nccl_unique_id(void *out, ty_err *err)
{
    (void)out;
    return no_nccl(err);
}

ty_status nn_comm_nccl_create(int rank, int world, const void *unique_id,
                              int device, double timeout_s, nn_comm **out,
                              ty_err *err)
{
    (void)rank, (void)world, (void)unique_id, (void)device, (void)timeout_s;
    *out = NULL;
    return no_nccl(err);
}

#endif

ty_status nn_comm_nccl_create_over(nn_comm *host, int device, double timeout_s,
                                   nn_comm **out, ty_err *err)
{
    unsigned char id[NN_COMM_NCCL_ID_BYTES] = {0};
    *out = NULL;
    if (!host || host->device_memory)
        return ty_fail(err, TY_EINVAL, NULL,
                       "the NCCL id travels over a host-memory comm");
    if (!nn_comm_nccl_available())
        return nn_comm_nccl_create(host->rank, host->world, id, device,
                                   timeout_s, out, err);
    ty_err e = {0};
    if (host->rank == 0 && nn_comm_nccl_unique_id(id, &e) != TY_OK) {
        host->ops->abort(host, e.msg);
        return ty_fail(err, TY_EDEVICE, NULL, "%s", e.msg);
    }
    ty_status st = host->ops->bcast(host, id, sizeof id, 0, err);
    if (st != TY_OK)
        return st;
    return nn_comm_nccl_create(host->rank, host->world, id, device, timeout_s,
                               out, err);
}
