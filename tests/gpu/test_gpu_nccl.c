/*
 * test_gpu_nccl.c - the NCCL engine of the collective seam
 * (gpu/cuda/comm_nccl.c) on real devices (ctest label "gpu").
 *
 * One rank (world 1, device 0):
 *   allreduce       device buffers (an odd length) against the host's
 *                   x * scale, for scales 0.25 and 0.3 and 1; the buffer is
 *                   doubled on ex's stream just before the call, unsynced,
 *                   so a collective not ordered after ex's work shows;
 *   start/wait      six buckets at once (one empty), waited out of order;
 *                   NN_COMM_MAX_INFLIGHT in flight, the next TY_ELIMIT;
 *                   a request not in flight TY_EINTERNAL;
 *   reduce-scatter  a bucket [lo, hi) of a buffer (ZeRO-1's): rank 0's
 *                   part, the bucket, scaled by 0.5; the rest untouched;
 *   bcast           host bytes from root 0 stay intact; root 1 refused;
 *   barrier         passes;
 *   create_over     the id made and broadcast over the self comm;
 *   destroy         a healthy comm finalizes;
 *   abort           a request in flight, then abort("..."): its wait and
 *                   every later op (allreduce, start, bcast, barrier) fail
 *                   at once with TY_EDEVICE naming the abort's reason;
 *   no hang         a world of 2 that only this rank joins: create is
 *                   TY_EDEVICE at its 3 s collective timeout (no timing is
 *                   asserted; a hang is ctest's timeout).
 * Two ranks (two threads, devices 0 and 1; only where two GPUs are
 * present, else a line saying it was skipped; also the reduce-scatter of
 * a bucket across uneven ranges, each rank's part the scaled sum): the
 * all-reduce with scale
 * 0.5 of buffers doubled unsynced on ex's stream against (2 x0 + 2 x1) *
 * 0.5, start/wait buckets, bcast of host bytes
 * from root 1, barrier; then rank 1 sits out an all-reduce, and rank 0's
 * fails at its collective timeout (the stalled peer) instead of hanging;
 * then, on a second pair of comms, rank 1 sits out again and a watchdog
 * thread aborts rank 0's comm while rank 0 waits (a 60 s timeout): the
 * all-reduce fails with the watchdog's reason.
 *
 * Exit status: 0 all passed, 1 a check failed, 77 skipped with
 * "SKIPPED: ..." (a build without CUDA or NCCL, or no CUDA device).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ty.h"
#include "gpu/cuda/backend.h"
#include "gpu/cuda/comm_nccl.h"
#include "models/train/comm.h"

#if TRAINYARD_HAVE_CUDA

static _Atomic int failures; /* the rank threads add to it */
static _Atomic int rank0_gave_up, rank0_aborted;

#define CHECK(cond, ...)                                 \
    do {                                                 \
        if (!(cond)) {                                   \
            printf("FAIL: %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                         \
            printf("\n");                                \
            failures++;                                  \
        }                                                \
    } while (0)

static float value(size_t i, int rank)
{
    return (float)((double)((i * 7919u + 13u * (unsigned)rank) % 2003u) /
                       1001.0 -
                   1.0);
}

/* A device buffer of n floats holding value(i, rank). */
static float *dev_fill(const nn_exec *ex, size_t n, int rank, float *host)
{
    for (size_t i = 0; i < n; i++)
        host[i] = value(i, rank);
    float *d = nn_backend_cuda.alloc(ex, (n ? n : 1) * sizeof(float));
    if (d && n)
        nn_backend_cuda.upload(ex, d, host, n * sizeof(float));
    return d;
}

/* Compares the device buffer with want[i], |got - want| <= 1e-6 |want|.
 * what names the case in a FAIL line. */
static void expect_dev(const nn_exec *ex, const float *d, const float *want,
                       size_t n, const char *what)
{
    float *got = malloc((n ? n : 1) * sizeof(float));
    if (n)
        nn_backend_cuda.download(ex, got, d, n * sizeof(float));
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (fabsf(got[i] - want[i]) > 1e-6f * fabsf(want[i])) {
            if (!bad)
                first = i;
            bad++;
        }
    CHECK(bad == 0, "%s: %zu of %zu values differ (first [%zu]: %g, want %g)",
          what, bad, n, first, bad ? got[first] : 0.0f,
          bad ? want[first] : 0.0f);
    free(got);
}

static void one_rank_allreduce(nn_comm *c, const nn_exec *ex)
{
    const size_t n = 100003;
    const float scales[] = {0.25f, 0.3f, 1.0f};
    float *host = malloc(n * sizeof(float));
    float *want = malloc(n * sizeof(float));
    for (int s = 0; s < 3; s++) {
        float *d = dev_fill(ex, n, 0, host);
        /* Doubled on ex's stream, not synchronized: the collective must
         * run after it. */
        nn_backend_cuda.scale(ex, d, n, 2.0f);
        for (size_t i = 0; i < n; i++)
            want[i] = (host[i] * 2.0f) * scales[s];
        ty_err err = {0};
        ty_status st = c->ops->allreduce(c, ex, d, n, scales[s], &err);
        CHECK(st == TY_OK, "allreduce (scale %g): %s", scales[s], err.msg);
        char what[64];
        snprintf(what, sizeof what, "allreduce with scale %g", scales[s]);
        expect_dev(ex, d, want, n, what);
        nn_backend_cuda.release(ex, d);
    }
    free(host);
    free(want);
}

/* Reduce-scatter at world 1 (ZeRO-1's buckets): rank 0's range is the
 * whole buffer, so its part of the bucket [lo, hi) is the bucket, scaled;
 * the values outside the bucket stay as they were. */
static void one_rank_reduce_scatter(nn_comm *c, const nn_exec *ex)
{
    const size_t n = 70001, lo = 1000, hi = 65537;
    const size_t off[2] = {0, n};
    float *host = malloc(n * sizeof(float));
    float *want = malloc(n * sizeof(float));
    float *d = dev_fill(ex, n, 0, host);
    for (size_t i = 0; i < n; i++)
        want[i] = i >= lo && i < hi ? host[i] * 0.5f : host[i];
    ty_err err = {0};
    nn_comm_req req = -1;
    CHECK(c->ops->reduce_scatter_start != NULL,
          "the NCCL engine reduce-scatters");
    if (c->ops->reduce_scatter_start) {
        ty_status st = c->ops->reduce_scatter_start(c, ex, d, off, lo, hi, 0.5f,
                                                    &req, &err);
        CHECK(st == TY_OK, "reduce_scatter_start: %s", err.msg);
        if (st == TY_OK)
            CHECK(c->ops->allreduce_wait(c, ex, req, &err) == TY_OK,
                  "its wait: %s", err.msg);
        expect_dev(ex, d, want, n, "reduce-scatter of a bucket, scale 0.5");
    }
    nn_backend_cuda.release(ex, d);
    free(host);
    free(want);
}

static void one_rank_buckets(nn_comm *c, const nn_exec *ex)
{
    enum { NB = 6 };
    const size_t sizes[NB] = {4096, 1, 0, 65537, 300, 25 * 1024 * 1024 / 4};
    float *d[NB], *host[NB];
    nn_comm_req req[NB];
    ty_err err = {0};
    for (int b = 0; b < NB; b++) {
        host[b] = malloc((sizes[b] ? sizes[b] : 1) * sizeof(float));
        d[b] = dev_fill(ex, sizes[b], 0, host[b]);
        ty_status st =
            c->ops->allreduce_start(c, ex, d[b], sizes[b], 0.5f, &req[b], &err);
        CHECK(st == TY_OK, "allreduce_start of bucket %d: %s", b, err.msg);
    }
    const int order[NB] = {3, 0, 5, 2, 1, 4};
    for (int k = 0; k < NB; k++) {
        int b = order[k];
        ty_status st = c->ops->allreduce_wait(c, ex, req[b], &err);
        CHECK(st == TY_OK, "allreduce_wait of bucket %d: %s", b, err.msg);
    }
    for (int b = 0; b < NB; b++) {
        for (size_t i = 0; i < sizes[b]; i++)
            host[b][i] *= 0.5f;
        char what[64];
        snprintf(what, sizeof what, "bucket %d of %zu floats", b, sizes[b]);
        expect_dev(ex, d[b], host[b], sizes[b], what);
        nn_backend_cuda.release(ex, d[b]);
        free(host[b]);
    }
    /* A full table, then one too many. */
    float *small =
        nn_backend_cuda.alloc(ex, NN_COMM_MAX_INFLIGHT * 16 * sizeof(float));
    nn_backend_cuda.zero(ex, small, NN_COMM_MAX_INFLIGHT * 16 * sizeof(float));
    nn_comm_req all[NN_COMM_MAX_INFLIGHT];
    int started = 0;
    for (int k = 0; k < NN_COMM_MAX_INFLIGHT; k++)
        if (c->ops->allreduce_start(c, ex, small + 16 * k, 16, 1.0f, &all[k],
                                    &err) == TY_OK)
            started++;
    CHECK(started == NN_COMM_MAX_INFLIGHT, "%d of %d requests started: %s",
          started, NN_COMM_MAX_INFLIGHT, err.msg);
    nn_comm_req extra;
    float *one = nn_backend_cuda.alloc(ex, sizeof(float));
    ty_status st = c->ops->allreduce_start(c, ex, one, 1, 1.0f, &extra, &err);
    CHECK(st == TY_ELIMIT, "request %d past the limit: %s, want TY_ELIMIT",
          NN_COMM_MAX_INFLIGHT + 1, ty_status_name(st));
    for (int k = 0; k < started; k++)
        CHECK(c->ops->allreduce_wait(c, ex, all[k], &err) == TY_OK,
              "wait of request %d: %s", k, err.msg);
    st = c->ops->allreduce_wait(c, ex, all[0], &err);
    CHECK(st == TY_EINTERNAL, "a wait on a finished request: %s",
          ty_status_name(st));
    nn_backend_cuda.release(ex, small);
    nn_backend_cuda.release(ex, one);
}

static void one_rank_bcast_barrier(nn_comm *c)
{
    unsigned char bytes[1000], want[1000];
    for (int i = 0; i < 1000; i++)
        bytes[i] = want[i] = (unsigned char)(i * 31 + 7);
    ty_err err = {0};
    CHECK(c->ops->bcast(c, bytes, sizeof bytes, 0, &err) == TY_OK,
          "bcast from root 0: %s", err.msg);
    CHECK(memcmp(bytes, want, sizeof bytes) == 0, "bcast changed the bytes");
    ty_status st = c->ops->bcast(c, bytes, sizeof bytes, 1, &err);
    CHECK(st == TY_EINTERNAL, "bcast from rank 1 of 1: %s", ty_status_name(st));
    CHECK(c->ops->barrier(c, &err) == TY_OK, "barrier: %s", err.msg);
}

/* Every op after abort("reason") fails at once naming it. */
static void expect_broken(nn_comm *c, const nn_exec *ex, const char *reason,
                          const char *when)
{
    ty_err err = {0};
    float *d = nn_backend_cuda.alloc(ex, 8 * sizeof(float));
    nn_comm_req req;
    unsigned char b[4] = {0};
    ty_status st[4] = {
        c->ops->allreduce(c, ex, d, 8, 1.0f, &err),
        TY_OK,
        TY_OK,
        TY_OK,
    };
    CHECK(st[0] == TY_EDEVICE && strstr(err.msg, reason),
          "%s: allreduce: %s (%s)", when, ty_status_name(st[0]), err.msg);
    st[1] = c->ops->allreduce_start(c, ex, d, 8, 1.0f, &req, &err);
    CHECK(st[1] == TY_EDEVICE && strstr(err.msg, reason),
          "%s: allreduce_start: %s (%s)", when, ty_status_name(st[1]), err.msg);
    st[2] = c->ops->bcast(c, b, sizeof b, 0, &err);
    CHECK(st[2] == TY_EDEVICE && strstr(err.msg, reason), "%s: bcast: %s (%s)",
          when, ty_status_name(st[2]), err.msg);
    st[3] = c->ops->barrier(c, &err);
    CHECK(st[3] == TY_EDEVICE && strstr(err.msg, reason),
          "%s: barrier: %s (%s)", when, ty_status_name(st[3]), err.msg);
    nn_backend_cuda.release(ex, d);
}

static void one_rank_abort(const nn_exec *ex)
{
    unsigned char id[NN_COMM_NCCL_ID_BYTES];
    nn_comm *c = NULL;
    ty_err err = {0};
    if (nn_comm_nccl_unique_id(id, &err) != TY_OK ||
        nn_comm_nccl_create(0, 1, id, 0, 30.0, &c, &err) != TY_OK) {
        CHECK(0, "a comm for the abort case: %s", err.msg);
        return;
    }
    float *d = nn_backend_cuda.alloc(ex, 1024 * sizeof(float));
    nn_backend_cuda.zero(ex, d, 1024 * sizeof(float));
    nn_comm_req req;
    CHECK(c->ops->allreduce_start(c, ex, d, 1024, 1.0f, &req, &err) == TY_OK,
          "allreduce_start before the abort: %s", err.msg);
    c->ops->abort(c, "the test stops the gang");
    c->ops->abort(c, "a second abort is harmless");
    ty_status st = c->ops->allreduce_wait(c, ex, req, &err);
    CHECK(st == TY_EDEVICE && strstr(err.msg, "the test stops the gang"),
          "the wait of a request in flight at the abort: %s (%s)",
          ty_status_name(st), err.msg);
    expect_broken(c, ex, "the test stops the gang", "after abort");
    nn_backend_cuda.release(ex, d);
    /* The CUDA context is still good for the rest of the job. */
    CHECK(nn_backend_cuda.status(ex, &err) == TY_OK,
          "the context after the comm's abort: %s", err.msg);
    c->ops->destroy(c);
}

static void one_rank_no_hang(void)
{
    unsigned char id[NN_COMM_NCCL_ID_BYTES];
    nn_comm *c = NULL;
    ty_err err = {0};
    CHECK(nn_comm_nccl_unique_id(id, &err) == TY_OK, "unique id: %s", err.msg);
    ty_status st = nn_comm_nccl_create(0, 2, id, 0, 3.0, &c, &err);
    CHECK(st == TY_EDEVICE && c == NULL && strstr(err.msg, "timeout"),
          "create in a world of 2 that rank 1 never joins: %s (%s)",
          ty_status_name(st), err.msg);
    if (c)
        c->ops->destroy(c);
}

static int one_rank(void)
{
    nn_exec ex;
    ty_err err = {0};
    memset(&ex, 0, sizeof ex);
    if (nn_cuda_exec_init(&ex, 0, &err) != TY_OK) {
        printf("FAIL: nn_cuda_exec_init: %s\n", err.msg);
        return 1;
    }
    unsigned char id[NN_COMM_NCCL_ID_BYTES];
    nn_comm *c = NULL;
    if (nn_comm_nccl_unique_id(id, &err) != TY_OK ||
        nn_comm_nccl_create(0, 1, id, 0, 30.0, &c, &err) != TY_OK) {
        printf("FAIL: a world-1 NCCL comm on device 0: %s\n", err.msg);
        nn_cuda_exec_free(&ex);
        return 1;
    }
    CHECK(strcmp(c->ops->name, "nccl") == 0 && c->device_memory == 1 &&
              c->world == 1 && c->rank == 0 && c->timeout_s == 30.0,
          "the comm's fields: %s, device_memory %d, rank %d of %d, %g s",
          c->ops->name, c->device_memory, c->rank, c->world, c->timeout_s);
    one_rank_allreduce(c, &ex);
    one_rank_buckets(c, &ex);
    one_rank_reduce_scatter(c, &ex);
    one_rank_bcast_barrier(c);
    CHECK(nn_backend_cuda.status(&ex, &err) == TY_OK, "the context: %s",
          err.msg);
    c->ops->destroy(c); /* healthy: finalized, then destroyed */

    nn_comm *over = NULL;
    ty_status st = nn_comm_nccl_create_over(nn_comm_self(), 0, 0, &over, &err);
    CHECK(st == TY_OK && over && over->world == 1 &&
              over->timeout_s == NN_COMM_DEFAULT_TIMEOUT_S,
          "create_over the self comm: %s", err.msg);
    if (over) {
        CHECK(over->ops->barrier(over, &err) == TY_OK,
              "barrier of the comm made over the self comm: %s", err.msg);
        over->ops->destroy(over);
    }
    one_rank_abort(&ex);
    one_rank_no_hang();
    nn_cuda_exec_free(&ex);
    return 0;
}

/* ---- two ranks, one thread each ------------------------------------- */

typedef struct {
    int rank;
    const unsigned char *id, *id2;
    int failures;
} rank_arg;

/* The watchdog's thread: aborts comm while its rank waits in a
 * collective (or, were it slow to get there, before: the same failure). */
static void *watchdog(void *p)
{
    nn_comm *c = p;
    struct timespec ts = {0, 500000000L};
    nanosleep(&ts, NULL);
    c->ops->abort(c, "the watchdog stops it");
    return NULL;
}

#define RCHECK(a, cond, ...)                                                 \
    do {                                                                     \
        if (!(cond)) {                                                       \
            printf("FAIL: rank %d: %s:%d: ", (a)->rank, __FILE__, __LINE__); \
            printf(__VA_ARGS__);                                             \
            printf("\n");                                                    \
            (a)->failures++;                                                 \
        }                                                                    \
    } while (0)

static void *rank_main(void *p)
{
    rank_arg *a = p;
    nn_exec ex;
    ty_err err = {0};
    memset(&ex, 0, sizeof ex);
    if (nn_cuda_exec_init(&ex, a->rank, &err) != TY_OK) {
        RCHECK(a, 0, "nn_cuda_exec_init: %s", err.msg);
        return NULL;
    }
    nn_comm *c = NULL;
    if (nn_comm_nccl_create(a->rank, 2, a->id, a->rank, 30.0, &c, &err) !=
        TY_OK) {
        RCHECK(a, 0, "create: %s", err.msg);
        nn_cuda_exec_free(&ex);
        return NULL;
    }
    const size_t n = 1 << 20;
    float *host = malloc(n * sizeof(float));
    float *want = malloc(n * sizeof(float));
    float *d = dev_fill(&ex, n, a->rank, host);
    /* Doubled on ex's stream just before, unsynced: the collective must
     * read the doubled values on both ranks. */
    nn_backend_cuda.scale(&ex, d, n, 2.0f);
    for (size_t i = 0; i < n; i++)
        want[i] = (value(i, 0) * 2.0f + value(i, 1) * 2.0f) * 0.5f;
    RCHECK(a, c->ops->allreduce(c, &ex, d, n, 0.5f, &err) == TY_OK,
           "allreduce: %s", err.msg);
    expect_dev(&ex, d, want, n, a->rank ? "rank 1's mean" : "rank 0's mean");
    nn_backend_cuda.release(&ex, d);

    /* Two buckets in flight at once. */
    nn_comm_req r0, r1;
    float *d2 = dev_fill(&ex, 4096, a->rank, host);
    d = dev_fill(&ex, n, a->rank, host);
    RCHECK(a,
           c->ops->allreduce_start(c, &ex, d, n, 1.0f, &r0, &err) == TY_OK &&
               c->ops->allreduce_start(c, &ex, d2, 4096, 1.0f, &r1, &err) ==
                   TY_OK &&
               c->ops->allreduce_wait(c, &ex, r1, &err) == TY_OK &&
               c->ops->allreduce_wait(c, &ex, r0, &err) == TY_OK,
           "two buckets: %s", err.msg);
    for (size_t i = 0; i < n; i++)
        want[i] = value(i, 0) + value(i, 1);
    expect_dev(&ex, d, want, n, "the sum of bucket 0");
    expect_dev(&ex, d2, want, 4096, "the sum of bucket 1");

    nn_backend_cuda.release(&ex, d);
    /* Reduce-scatter of the bucket [1000, n - 7) under the uneven ranges
     * [0, 300001) [300001, n): each rank's part of the bucket holds the
     * sum, scaled by 0.5. */
    const size_t off[3] = {0, 300001, n}, lo = 1000, hi = n - 7;
    d = dev_fill(&ex, n, a->rank, host);
    nn_comm_req rs;
    RCHECK(a,
           c->ops->reduce_scatter_start &&
               c->ops->reduce_scatter_start(c, &ex, d, off, lo, hi, 0.5f, &rs,
                                            &err) == TY_OK &&
               c->ops->allreduce_wait(c, &ex, rs, &err) == TY_OK,
           "reduce-scatter: %s", err.msg);
    {
        const size_t a0 = off[a->rank] > lo ? off[a->rank] : lo;
        const size_t b0 = off[a->rank + 1] < hi ? off[a->rank + 1] : hi;
        for (size_t i = a0; i < b0; i++)
            want[i] = (value(i, 0) + value(i, 1)) * 0.5f;
        float *part = d + a0;
        expect_dev(&ex, part, want + a0, b0 - a0,
                   a->rank ? "rank 1's reduce-scatter part"
                           : "rank 0's reduce-scatter part");
    }

    unsigned char bytes[4099];
    for (size_t i = 0; i < sizeof bytes; i++)
        bytes[i] = a->rank == 1 ? (unsigned char)(i * 13 + 1) : 0;
    RCHECK(a, c->ops->bcast(c, bytes, sizeof bytes, 1, &err) == TY_OK,
           "bcast from root 1: %s", err.msg);
    size_t bad = 0;
    for (size_t i = 0; i < sizeof bytes; i++)
        bad += bytes[i] != (unsigned char)(i * 13 + 1);
    RCHECK(a, bad == 0, "%zu of %zu broadcast bytes differ", bad, sizeof bytes);
    RCHECK(a, c->ops->barrier(c, &err) == TY_OK, "barrier: %s", err.msg);

    /* The stalled peer: rank 1 sits this all-reduce out; rank 0's fails at
     * its (short) timeout and breaks its comm. Rank 1 aborts only after
     * rank 0 has given up, so rank 0 sees the stall, not the abort. */
    if (a->rank == 0) {
        c->timeout_s = 3.0;
        ty_status st = c->ops->allreduce(c, &ex, d2, 4096, 1.0f, &err);
        RCHECK(a, st == TY_EDEVICE && strstr(err.msg, "timeout"),
               "an all-reduce rank 1 never joins: %s (%s)", ty_status_name(st),
               err.msg);
        st = c->ops->barrier(c, &err);
        RCHECK(a, st == TY_EDEVICE && strstr(err.msg, "timeout"),
               "the barrier after the timeout: %s (%s)", ty_status_name(st),
               err.msg);
        rank0_gave_up = 1;
    } else {
        struct timespec ts = {0, 10000000L};
        while (!rank0_gave_up)
            nanosleep(&ts, NULL);
        c->ops->abort(c, "rank 1 leaves");
    }
    c->ops->destroy(c);

    /* An abort from another thread ends the collective in progress: rank
     * 1 sits out again, rank 0 has a long timeout and a watchdog. */
    c = NULL;
    if (nn_comm_nccl_create(a->rank, 2, a->id2, a->rank, 60.0, &c, &err) !=
        TY_OK) {
        RCHECK(a, 0, "the second comm: %s", err.msg);
    } else if (a->rank == 0) {
        pthread_t w;
        pthread_create(&w, NULL, watchdog, c);
        ty_status st = c->ops->allreduce(c, &ex, d2, 4096, 1.0f, &err);
        RCHECK(a, st == TY_EDEVICE && strstr(err.msg, "the watchdog stops it"),
               "an all-reduce aborted from another thread: %s (%s)",
               ty_status_name(st), err.msg);
        pthread_join(w, NULL);
        rank0_aborted = 1;
    } else {
        struct timespec ts = {0, 10000000L};
        while (!rank0_aborted)
            nanosleep(&ts, NULL);
        c->ops->abort(c, "rank 1 leaves again");
    }
    if (c)
        c->ops->destroy(c);
    nn_backend_cuda.release(&ex, d);
    nn_backend_cuda.release(&ex, d2);
    free(host);
    free(want);
    nn_cuda_exec_free(&ex);
    return NULL;
}

static void two_ranks(void)
{
    unsigned char id[NN_COMM_NCCL_ID_BYTES], id2[NN_COMM_NCCL_ID_BYTES];
    ty_err err = {0};
    if (nn_comm_nccl_unique_id(id, &err) != TY_OK ||
        nn_comm_nccl_unique_id(id2, &err) != TY_OK) {
        CHECK(0, "unique id: %s", err.msg);
        return;
    }
    rank_arg args[2] = {{0, id, id2, 0}, {1, id, id2, 0}};
    pthread_t t[2];
    for (int r = 0; r < 2; r++)
        pthread_create(&t[r], NULL, rank_main, &args[r]);
    for (int r = 0; r < 2; r++) {
        pthread_join(t[r], NULL);
        failures += args[r].failures;
    }
}

int main(void)
{
    char why[256] = "";
    if (!nn_comm_nccl_available()) {
        ty_err err = {0};
        nn_comm *c = NULL;
        unsigned char id[NN_COMM_NCCL_ID_BYTES] = {0};
        ty_status st = nn_comm_nccl_create(0, 1, id, 0, 0, &c, &err);
        if (st != TY_EDEVICE || c || !strstr(err.msg, "no NCCL")) {
            printf("FAIL: create without NCCL: %s (%s)\n", ty_status_name(st),
                   err.msg);
            return 1;
        }
        printf("SKIPPED: this build has no NCCL engine (%s)\n", err.msg);
        return 77;
    }
    int ndev = nn_cuda_device_count(why, sizeof why);
    if (ndev == 0) {
        printf("SKIPPED: no CUDA device (%s)\n", why);
        return 77;
    }
    if (one_rank() != 0)
        return 1;
    if (ndev >= 2)
        two_ranks();
    else
        printf("two-rank case skipped: %d CUDA device (it needs 2)\n", ndev);
    if (failures) {
        printf("%d check(s) failed\n", failures);
        return 1;
    }
    printf("ok: the NCCL engine, world 1%s\n",
           ndev >= 2 ? " and world 2" : " (world 2 not run)");
    return 0;
}

#else

int main(void)
{
    printf("SKIPPED: built without the CUDA backend\n");
    return 77;
}

#endif
