/*
 * comm.h - the collective seam of data-parallel training.
 *
 * A communicator (nn_comm) joins the `world` ranks of one training job;
 * each rank holds a full replica of the model and the trainer averages the
 * gradients through it (ZeRO-1: reduce-scatters them, each rank receiving
 * the sums of its own range, and all-gathers the updated ranges). Engines
 * fill an ops table (as a backend does):
 *
 *   "self"  world 1, every op a no-op (nn_comm_self); train_run uses it
 *           when the job gives none, so the loop always has a comm;
 *   "mpi"   Open MPI, for CPU ranks launched by mpirun or srun --mpi=pmix
 *           (models/train/comm_mpi.c, built where CMake finds MPI);
 *   "nccl"  CUDA devices (a device engine; see "Memory and ordering").
 *
 * Memory and ordering. The float buffers an op takes are the memory of the
 * run's backend: host memory on the CPU; device memory for an engine whose
 * `device_memory` is set (NCCL), which the trainer pairs only with a
 * backend that is not host-visible. Every op is ordered after the work
 * already queued on the execution context ex (NULL on the CPU): a host
 * engine runs when called, a stream engine enqueues on (or after) ex's
 * stream. allreduce_wait returns once later work on ex sees the result: a
 * host engine when buf holds it, a stream engine once ex's stream is
 * ordered after the collective (the host reads buf only through the
 * backend's download). bcast's bytes are host memory for every engine
 * (parameters travel as the trainer's host mirror or in place on the CPU).
 *
 * Failure. Every op returns a status and fills err with a sentence; none
 * hangs: a dead or stalled peer is TY_EDEVICE once a collective has
 * waited the engine's collective timeout (timeout_s), and a peer's abort
 * makes the collective it is in, or its next one, fail with the peer's
 * reason. After any failure the comm is broken: every later op fails at
 * once (TY_EDEVICE, naming the first failure) and only destroy is left.
 * Collectives are called by every rank in the same order with the same
 * sizes; a mismatch is the caller's bug.
 */
#ifndef TY_TRAIN_COMM_H
#define TY_TRAIN_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"
#include "models/backend.h"

/* The most non-blocking all-reduces one comm has in flight at once. */
#define NN_COMM_MAX_INFLIGHT 64

/* Collective timeout when the caller gives none (seconds). */
#define NN_COMM_DEFAULT_TIMEOUT_S 60.0

typedef struct nn_comm nn_comm;

/* A non-blocking collective in flight (an all-reduce or a
 * reduce-scatter): an index into the engine's table
 * (0..NN_COMM_MAX_INFLIGHT-1), valid from its start to allreduce_wait. */
typedef int nn_comm_req;

/* The ops whose traffic a comm counts (nn_comm.stats). */
typedef enum {
    NN_COMM_OP_ALLREDUCE,
    NN_COMM_OP_REDUCE_SCATTER,
    NN_COMM_OP_ALLGATHER,
    NN_COMM_OP_BCAST,
    NN_COMM_OP_COUNT
} nn_comm_op;

/* Traffic counters, per op: calls started and the bytes this rank sends
 * for them on a ring, the bandwidth-optimal schedule (nccl-tests' "bus
 * bytes"): an all-reduce of n bytes 2(N-1)/N * n, a reduce-scatter or
 * all-gather of n bytes in all (N-1)/N * n, a broadcast n (the root's).
 * A measure of an op's cost independent of the algorithm an engine picks,
 * for tests and benches: ZeRO-1's reduce-scatter plus all-gather is one
 * all-reduce's worth. The self engine counts nothing (it sends nothing). */
typedef struct {
    uint64_t calls[NN_COMM_OP_COUNT];
    uint64_t bytes[NN_COMM_OP_COUNT];
} nn_comm_stats;

typedef struct {
    const char *name; /* "self", "mpi", "nccl" */
    /* buf[0..n) = (sum over ranks of buf[0..n)) * scale, in place, on
     * every rank. scale 1/world gives the mean. Blocks until done (a host
     * engine) or until ordered on ex (a stream engine). */
    ty_status (*allreduce)(nn_comm *c, const nn_exec *ex, float *buf, size_t n,
                           float scale, ty_err *err);
    /* The same, started: *req names it until allreduce_wait. buf must not
     * be touched until then. TY_ELIMIT when NN_COMM_MAX_INFLIGHT are in
     * flight. */
    ty_status (*allreduce_start)(nn_comm *c, const nn_exec *ex, float *buf,
                                 size_t n, float scale, nn_comm_req *req,
                                 ty_err *err);
    /* Completes req (scale applied), an all-reduce or a reduce-scatter.
     * A req that fails is released too. */
    ty_status (*allreduce_wait)(nn_comm *c, const nn_exec *ex, nn_comm_req req,
                                ty_err *err);
    /* Lets the started all-reduces (and reduce-scatters: the MPI
     * engine's ring takes its next step here) advance without waiting
     * for any (an engine whose collectives advance only inside its
     * calls, as Open MPI's non-blocking ones do, tests them here); a
     * failure breaks the comm and surfaces at the next wait. NULL:
     * nothing to do (the engine progresses on its own). Cheap: the
     * trainer calls it after every layer's backward while buckets are in
     * flight. */
    void (*progress)(nn_comm *c);
    /* Copies bytes of host memory buf from rank root to every rank. */
    ty_status (*bcast)(nn_comm *c, void *buf, size_t bytes, int root,
                       ty_err *err);
    /* All-gather of a flat float buffer split by rank (host memory, as
     * bcast): off holds world + 1 ascending offsets (off[0] 0, the same on
     * every rank) and rank r's values are buf[off[r], off[r + 1]) on rank
     * r; afterwards every rank's buf holds every range. For ZeRO-1's
     * updated parameter slices (dp.c). NULL in an engine without it: the
     * caller sends each range with bcast instead. */
    ty_status (*allgather)(nn_comm *c, float *buf, const size_t *off,
                           ty_err *err);
    /* Reduce-scatter of one bucket, started (ZeRO-1's gradients, dp.c):
     * buf is the flat float buffer of allreduce (the backend's memory),
     * off holds world + 1 ascending offsets (off[0] 0, the same on every
     * rank) that give rank r the range [off[r], off[r + 1]), and the
     * bucket is [lo, hi) (lo <= hi <= off[world]). Once req is waited for
     * (allreduce_wait), rank r's part of the bucket, [lo, hi) intersected
     * with its range (nn_comm_part), holds (sum over ranks) * scale; the
     * rest of the bucket is undefined (the engine may have summed into
     * it). A rank whose range misses the bucket still joins. buf must not
     * be touched until the wait; off is read during the call only.
     * TY_ELIMIT as allreduce_start. NULL in an engine without it: the
     * caller all-reduces the bucket instead (allreduce_start). */
    ty_status (*reduce_scatter_start)(nn_comm *c, const nn_exec *ex, float *buf,
                                      const size_t *off, size_t lo, size_t hi,
                                      float scale, nn_comm_req *req,
                                      ty_err *err);
    /* Returns once every rank has entered it. */
    ty_status (*barrier)(nn_comm *c, ty_err *err);
    /* Breaks the comm on this rank and tells the peers (why: a sentence,
     * may be NULL), without waiting for them: their collectives fail with
     * it instead of waiting. Safe to call more than once and after a
     * failure. */
    void (*abort)(nn_comm *c, const char *why);
    /* Frees the comm (in-flight requests are abandoned; the engine's
     * runtime is finalized where this comm initialized it). NULL: no-op. */
    void (*destroy)(nn_comm *c);
} nn_comm_ops;

struct nn_comm {
    const nn_comm_ops *ops;
    int rank;  /* 0..world-1 */
    int world; /* >= 1 */
    /* Ranks on this machine, this one included (1..world): they share its
     * cores. mpirun's ranks on one host: world; srun's one rank a node: 1.
     * 0: the engine cannot tell (a caller assumes world, the cautious
     * split). */
    int local_world;
    /* 1: buffers are device memory (a stream engine); 0: host memory. */
    int device_memory;
    double timeout_s;    /* the collective timeout */
    void *impl;          /* the engine's */
    nn_comm_stats stats; /* what this rank's ops sent (zeroed at create) */
};

/* Rank r's part of the bucket [lo, hi) under the ranges off (as
 * reduce_scatter_start's): [*a, *b), empty (*a == *b) when r's range
 * misses the bucket. Pure; the engines and their tests share it. */
static inline void nn_comm_part(const size_t *off, int r, size_t lo, size_t hi,
                                size_t *a, size_t *b)
{
    size_t x = off[r] > lo ? off[r] : lo;
    size_t y = off[r + 1] < hi ? off[r + 1] : hi;
    *a = x;
    *b = y > x ? y : x;
}

/* Counts one started op of `bytes` bytes in all on c (nn_comm_stats's
 * ring measure), for the engines. */
static inline void nn_comm_count(nn_comm *c, nn_comm_op op, uint64_t bytes)
{
    const uint64_t w = c->world > 0 ? (uint64_t)c->world : 1;
    uint64_t sent = bytes;
    if (op == NN_COMM_OP_ALLREDUCE)
        sent = 2 * (bytes - bytes / w);
    else if (op == NN_COMM_OP_REDUCE_SCATTER || op == NN_COMM_OP_ALLGATHER)
        sent = bytes - bytes / w;
    if (w == 1)
        sent = 0;
    c->stats.calls[op]++;
    c->stats.bytes[op] += sent;
}

/* The world-1 comm: every op succeeds at once. allreduce multiplies buf
 * by scale on the host, and never reads buf when scale is 1 (= 1/world),
 * so it stands in on any backend. Static; destroy does nothing. */
nn_comm *nn_comm_self(void);

/* 1 when this build has the MPI engine. */
int nn_comm_mpi_available(void);

/* Joins the MPI job this process was launched in (mpirun, srun
 * --mpi=pmix; a process started alone is a world of 1), initializing MPI
 * unless it already is, with collective timeout timeout_s (<= 0: the
 * default). *out is the caller's, freed by its destroy. Without the MPI
 * engine in the build, or when MPI fails to start, TY_EDEVICE with why. */
ty_status nn_comm_mpi_create(double timeout_s, nn_comm **out, ty_err *err);

/* c, or the self comm when c is NULL (a job that gives none). */
static inline nn_comm *nn_comm_or_self(nn_comm *c)
{
    return c ? c : nn_comm_self();
}

#endif
