/*
 * dp.c - data-parallel training: the trainer's side of the collective
 * seam (comm.h). Every rank holds a full replica; run.c's loop calls these
 * at fixed points, in the same order on every rank.
 *
 * Invariants:
 *  - batch_size is the GLOBAL batch. Every rank computes the same global
 *    order of the epoch (the shuffle of (seed, epoch), as at world 1) and
 *    takes, of every global minibatch of m rows, the contiguous share
 *    [r*m/N, (r+1)*m/N) (dp_epoch_order). The order and the global
 *    minibatches depend on the seed and the global step only, so a run
 *    resumed at another world size continues the same global batches.
 *  - Each rank's loss gradient is scaled by 1 / (the step's GLOBAL example
 *    count), so summing the ranks' gradients (scale 1) gives exactly the
 *    gradient of the mean loss over the global batch, whatever the shares
 *    (the last minibatch of an epoch may split unevenly, or leave a rank
 *    none: it still joins the all-reduce with zero gradients).
 *  - The gradients are all-reduced once per optimizer step (accumulated
 *    minibatches stay local until then), in buckets planned once
 *    (dp_plan_buckets): whole layers from the last, the order the
 *    backward pass finishes them (as PyTorch DDP does), the first bucket
 *    closed from DP_FIRST_BUCKET_FLOATS, the others from DP_BUCKET_FLOATS,
 *    a larger layer in pieces of DP_BUCKET_FLOATS. During the backward
 *    pass of the step's last minibatch the workspace's grad hook
 *    (nn_grad_hook, called after every layer) starts each bucket once all
 *    its gradients are final, and lets the ones in flight progress (Open
 *    MPI advances them only inside MPI calls: the seam's progress op);
 *    dp_reduce_step starts the rest (all of them with
 *    TRAINYARD_DP_OVERLAP=0, or on a rank with no rows in the last
 *    minibatch), in the same order on every rank, then waits for all.
 *    The buckets and their reduction are the same with the overlap on or
 *    off, so the sums are bit for bit the same. Clipping, the loss scaler
 *    and the optimizer then see the global gradient. With ZeRO-1 (zero_rs)
 *    each bucket is reduce-scattered instead, the same buckets at the
 *    same points: a rank holds the global gradient of its own range only,
 *    and the norm that clipping and the loss scaler use is summed across
 *    ranks (dp_grad_sum_squares; see "ZeRO stage 1" below). ar_seconds
 *    counts the time in the hook and the wait: the communication the step
 *    does not hide.
 *  - The step's loss sum, hit count and the ranks' stop and preempt flags
 *    travel in one small all-reduce started after the buckets: every rank
 *    reports the global batch's loss and stops or yields at the same step.
 *  - Parameters, buffers and optimizer state are broadcast from rank 0 at
 *    the start and after a resume. Only rank 0 writes checkpoints and the
 *    model; every rank then learns rank 0's outcome (dp_agree), which is
 *    also the barrier the others wait at.
 *  - Debug: TRAINYARD_DP_CHECK_EVERY=N compares a checksum of the
 *    parameters across ranks every N optimizer steps and fails the run on
 *    a difference.
 *  - Device ranks (a backend that is not host visible with a device
 *    engine, NCCL: comm.h's "Memory and ordering"; dp_setup refuses any
 *    other pairing, and ZeRO-1 on a device). The buckets are the same
 *    ranges of the backend's gradient block (a device pointer plus an
 *    offset), all-reduced in place on the exec context's stream. The
 *    host's small all-reduces (the step's scalars, the agreement and
 *    position flags, the checksum's verdict) go through dp_dev, a few
 *    floats of the backend's memory (allreduce_host), after the buckets
 *    on the same stream. Broadcasts and the checksum use the trainer's
 *    host mirror (dp_sync_state runs before the upload; dp_check_params
 *    downloads first). Such a rank steps op by op, without acc or a
 *    graph (train_graph_setup), and brings each step's loss to the host
 *    as the CPU does, so the step loop and the scalars are the CPU's.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "models/train/train_internal.h"

/* 1 Mi floats (4 MiB) a bucket: a quarter of DDP's 25 MB default, so a
 * model of a few MB still makes several buckets whose reductions
 * pipeline. */
#define DP_BUCKET_FLOATS ((uint64_t)1 << 20)
/* The first bucket (the last layers, finished first) closes from 32 Ki
 * floats (128 KiB; DDP's first bucket is 1 MB): its all-reduce starts
 * early in the backward pass and hides behind the rest of it. */
#define DP_FIRST_BUCKET_FLOATS ((uint64_t)1 << 15)

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Rank r's share of a global minibatch of m rows: [lo, lo + n). */
static uint32_t share_of(uint32_t m, int r, int world, uint32_t *lo)
{
    uint64_t a = (uint64_t)m * (uint64_t)r / (uint64_t)world;
    uint64_t b = (uint64_t)m * (uint64_t)(r + 1) / (uint64_t)world;
    if (lo)
        *lo = (uint32_t)a;
    return (uint32_t)(b - a);
}

uint32_t dp_share(const trainer *t, uint32_t m)
{
    return t->world > 1 ? share_of(m, t->rank, t->world, NULL) : m;
}

/* Emits [lo, hi) as pieces of at most cap from its top. */
static uint32_t emit_pieces(uint64_t lo, uint64_t hi, uint64_t cap,
                            dp_bucket *out, uint32_t n, uint32_t max)
{
    while (hi > lo) {
        uint64_t len = hi - lo < cap ? hi - lo : cap;
        if (out && n < max)
            out[n] = (dp_bucket){hi - len, hi};
        n++;
        hi -= len;
    }
    return n;
}

uint32_t dp_plan_buckets(const uint64_t *bounds, uint32_t nb, uint64_t p,
                         uint64_t first_cap, uint64_t cap, dp_bucket *out,
                         uint32_t max)
{
    if (cap == 0)
        cap = 1;
    uint32_t n = 0;
    uint64_t hi = p, lo = p, want = first_cap ? first_cap : cap;
    for (uint32_t i = nb; i-- > 0;) {
        if (bounds[i] >= lo)
            continue; /* an empty layer or a repeated offset */
        lo = bounds[i];
        if (hi - lo >= want) {
            n = emit_pieces(lo, hi, cap, out, n, max);
            hi = lo;
            want = cap;
        }
    }
    return emit_pieces(0, hi, cap, out, n, max);
}

uint32_t dp_buckets_ready(const dp_bucket *b, uint32_t n, uint64_t first_final)
{
    uint32_t k = 0;
    while (k < n && b[k].lo >= first_final)
        k++;
    return k;
}

/* The buckets of t's model: its top-level layers' parameter offsets, in
 * the order they lie (ascending; any other order makes one boundary, 0,
 * so every bucket waits for the whole backward pass). */
static ty_status plan_buckets(trainer *t, ty_err *err)
{
    const nn_arch *a = &t->arch;
    uint64_t bounds[NN_MAX_LAYERS + 1];
    uint32_t nb = 0;
    bounds[nb++] = 0;
    for (uint32_t i = 0; i < a->n_layers; i++) {
        const nn_layer *l = &a->layers[i];
        if (!l->param_count || l->param_offset == bounds[nb - 1])
            continue;
        if (l->param_offset < bounds[nb - 1]) {
            nb = 1;
            break;
        }
        bounds[nb++] = l->param_offset;
    }
    const uint64_t p = a->param_count;
    uint32_t n = dp_plan_buckets(bounds, nb, p, DP_FIRST_BUCKET_FLOATS,
                                 DP_BUCKET_FLOATS, NULL, 0);
    t->buckets = malloc(((size_t)n + 1) * sizeof *t->buckets);
    t->bucket_req = malloc(((size_t)n + 1) * sizeof *t->bucket_req);
    if (!t->buckets || !t->bucket_req)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    t->n_buckets = dp_plan_buckets(bounds, nb, p, DP_FIRST_BUCKET_FLOATS,
                                   DP_BUCKET_FLOATS, t->buckets, n);
    return TY_OK;
}

void dp_free(trainer *t)
{
    free(t->buckets);
    free(t->bucket_req);
    free(t->zero_off);
    free(t->zero_ss);
    t->buckets = NULL;
    t->bucket_req = NULL;
    t->zero_off = NULL;
    t->zero_ss = NULL;
}

/* ZeRO-1's tables: every rank's range (zero_off) and the sums of squares'
 * exchange (zero_ss), and whether the buckets are reduce-scattered. */
static ty_status zero_setup(trainer *t, ty_err *err)
{
    const int w = t->world;
    /* Two tables of world + 1 offsets: the ranges, then zero_ss's. */
    t->zero_off = malloc(2 * ((size_t)w + 1) * sizeof *t->zero_off);
    t->zero_ss = malloc(2 * (size_t)w * sizeof *t->zero_ss);
    if (!t->zero_off || !t->zero_ss)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    for (int r = 0; r < w; r++) {
        uint64_t lo, hi;
        dp_zero_range(t->arch.param_count, r, w, &lo, &hi);
        t->zero_off[r] = (size_t)lo;
        t->zero_off[r + 1] = (size_t)hi;
    }
    for (int r = 0; r <= w; r++)
        t->zero_off[w + 1 + r] = 2 * (size_t)r;
    const char *rs = getenv("TRAINYARD_DP_REDUCE_SCATTER");
    t->zero_rs =
        t->comm->ops->reduce_scatter_start != NULL && !(rs && !strcmp(rs, "0"));
    return TY_OK;
}

/* The comm's bytes so far in the ops a step uses (broadcasts, the
 * start's and checkpoints', left out). */
static uint64_t step_op_bytes(const nn_comm *c)
{
    return c->stats.bytes[NN_COMM_OP_ALLREDUCE] +
           c->stats.bytes[NN_COMM_OP_REDUCE_SCATTER] +
           c->stats.bytes[NN_COMM_OP_ALLGATHER];
}

ty_status dp_setup(trainer *t, ty_err *err)
{
    const train_job *job = t->job;
    t->comm = nn_comm_or_self(job->comm);
    t->rank = t->comm->rank;
    t->world = t->comm->world;
    if (t->world < 1 || t->rank < 0 || t->rank >= t->world)
        return ty_fail(err, TY_EINTERNAL, NULL,
                       "the communicator says rank %d of %d", t->rank,
                       t->world);
    t->comm_mark = step_op_bytes(t->comm);
    const char *every = getenv("TRAINYARD_DP_CHECK_EVERY");
    t->check_every = every ? strtoull(every, NULL, 10) : 0;
    /* ZeRO-1 shards only across ranks: at world 1 the shard is the whole
     * block and zero 1 changes nothing. */
    t->zero = t->world > 1 && t->hp->zero == 1;
    dp_zero_range(t->arch.param_count, t->zero ? t->rank : 0,
                  t->zero ? t->world : 1, &t->zero_lo, &t->zero_hi);
    if (t->world == 1)
        return TY_OK;
    const uint32_t bs = t->hp->batch_size;
    if (bs % (uint32_t)t->world != 0)
        return ty_fail(err, TY_EINVAL, "hyperparameters.batch_size",
                       "batch_size %u is not divisible by the world size %d: "
                       "every rank takes an equal share of each global batch",
                       bs, t->world);
    /* A host engine (MPI) takes host memory, a device engine (NCCL) the
     * memory of a backend that is not host visible (comm.h). */
    const nn_backend *be = job->be ? job->be : &nn_backend_cpu;
    const int device = !nn_backend_host_visible(be);
    if (device != (t->comm->device_memory != 0))
        return ty_fail(err, TY_EINVAL, NULL,
                       "the %s engine cannot carry the %s backend's memory: "
                       "data-parallel training pairs CPU ranks with a host "
                       "engine (mpi) and CUDA devices with a device engine "
                       "(nccl)",
                       t->comm->ops->name, be->name);
    if (device && t->zero)
        return ty_fail(err, TY_EINVAL, "hyperparameters.zero",
                       "ZeRO-1 runs on CPU ranks only in this build "
                       "(hyperparameters.zero 1 with the %s engine on the %s "
                       "backend); use zero 0 on GPUs",
                       t->comm->ops->name, be->name);
    /* This rank's examples an epoch: its share of every global minibatch
     * (all full but the last). */
    uint64_t full = t->n_train / bs, rest = t->n_train % bs;
    t->local_n = (uint32_t)(full * (bs / (uint32_t)t->world)) +
                 share_of((uint32_t)rest, t->rank, t->world, NULL);
    t->lperm = malloc(((size_t)t->local_n + 1) * sizeof *t->lperm);
    if (!t->lperm)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    const char *ov = getenv("TRAINYARD_DP_OVERLAP");
    t->overlap = !(ov && !strcmp(ov, "0"));
    ty_status st = t->zero ? zero_setup(t, err) : TY_OK;
    return st != TY_OK ? st : plan_buckets(t, err);
}

uint32_t dp_rows(const trainer *t)
{
    uint32_t b = t->hp->batch_size / (uint32_t)(t->world > 1 ? t->world : 1);
    return b < t->n_train ? b : t->n_train;
}

const uint32_t *dp_epoch_order(trainer *t)
{
    if (t->world == 1)
        return t->perm;
    const uint32_t bs = t->hp->batch_size;
    uint32_t k = 0;
    for (uint32_t b = 0; b < t->n_train; b += bs) {
        uint32_t m = t->n_train - b < bs ? t->n_train - b : bs, lo;
        uint32_t n = share_of(m, t->rank, t->world, &lo);
        memcpy(t->lperm + k, t->perm + b + lo, (size_t)n * sizeof *t->lperm);
        k += n;
    }
    return t->lperm;
}

/* Floats of a float pair (hi, lo) that carry a double through a float
 * all-reduce with about 48 bits. */
static void split_double(double v, float *hi, float *lo)
{
    *hi = (float)v;
    *lo = (float)(v - (double)*hi);
}

/* v[0..n) (host floats, n <= DP_SCALARS) summed over the ranks, in
 * place. A host engine takes v itself. A device engine takes only the
 * backend's memory (comm.h), and no host engine is at hand on a device
 * rank, so v travels through dp_dev: uploaded on the exec context's
 * stream (after the work queued there, the gradient buckets included),
 * all-reduced there, and downloaded (which waits for the all-reduce). Two
 * small copies a call, next to the step's gradient traffic nothing. */
static ty_status allreduce_host(trainer *t, float *v, size_t n, ty_err *err)
{
    nn_comm *c = t->comm;
    const nn_exec *ex = t->ws->ex;
    if (!c->device_memory)
        return c->ops->allreduce(c, ex, v, n, 1.0f, err);
    if (!t->dp_dev || n > DP_SCALARS)
        return ty_fail(err, TY_EINTERNAL, NULL,
                       "no device buffer for the ranks' scalars");
    t->be->upload(ex, t->dp_dev, v, n * sizeof *v);
    ty_status st = c->ops->allreduce(c, ex, t->dp_dev, n, 1.0f, err);
    if (st == TY_OK)
        t->be->download(ex, v, t->dp_dev, n * sizeof *v);
    return st;
}

/* Waits for the oldest started request not yet waited for. */
static ty_status wait_oldest(trainer *t, ty_err *err)
{
    nn_comm *c = t->comm;
    return c->ops->allreduce_wait(c, t->ws->ex, t->bucket_req[t->n_waited++],
                                  err);
}

/* Starts the next bucket's all-reduce (the sum over ranks, in place), or
 * with zero_rs its reduce-scatter (each rank's range of it summed), first
 * waiting for the oldest when the engine's slots are full (one is kept
 * for the step's scalars). */
static ty_status start_bucket(trainer *t, ty_err *err)
{
    nn_comm *c = t->comm;
    ty_status st = TY_OK;
    if (t->n_started - t->n_waited >= NN_COMM_MAX_INFLIGHT - 1 &&
        (st = wait_oldest(t, err)) != TY_OK)
        return st;
    const dp_bucket *b = &t->buckets[t->n_started];
    if (t->zero_rs)
        st = c->ops->reduce_scatter_start(c, t->ws->ex, t->grads, t->zero_off,
                                          (size_t)b->lo, (size_t)b->hi, 1.0f,
                                          &t->bucket_req[t->n_started], err);
    else
        st = c->ops->allreduce_start(c, t->ws->ex, t->grads + b->lo,
                                     (size_t)(b->hi - b->lo), 1.0f,
                                     &t->bucket_req[t->n_started], err);
    if (st == TY_OK)
        t->n_started++;
    return st;
}

/* nn_grad_hook: the gradients [first_final, p) are final; starts the
 * buckets that lie in them and lets those in flight progress. A failure
 * is kept for dp_reduce_step. */
static void grad_ready(void *ctx, uint64_t first_final)
{
    trainer *t = ctx;
    if (t->hook_st != TY_OK)
        return;
    const double start = now_sec();
    uint32_t ready = dp_buckets_ready(t->buckets, t->n_buckets, first_final);
    while (t->n_started < ready && t->hook_st == TY_OK)
        t->hook_st = start_bucket(t, &t->hook_err);
    if (t->n_started > t->n_waited && t->comm->ops->progress)
        t->comm->ops->progress(t->comm);
    t->ar_seconds += now_sec() - start;
}

void dp_backward_begin(trainer *t, int last)
{
    if (t->world == 1)
        return;
    const int arm = last && t->overlap;
    t->ws->grad_hook = arm ? grad_ready : NULL;
    t->ws->hook_ctx = arm ? t : NULL;
}

ty_status dp_reduce_step(trainer *t, double *sum, uint32_t *hits, ty_err *err)
{
    if (t->world == 1)
        return TY_OK;
    const double start = now_sec();
    nn_comm *c = t->comm;
    const nn_exec *ex = t->ws->ex;
    const train_job *job = t->job;
    t->ws->grad_hook = NULL;
    t->ws->hook_ctx = NULL;
    /* The buckets the backward pass did not start (all of them with the
     * overlap off, or when this rank had no rows in the step's last
     * minibatch), in the same order on every rank, then the step's
     * scalars. */
    ty_status st = t->hook_st;
    if (st != TY_OK)
        *err = t->hook_err;
    while (st == TY_OK && t->n_started < t->n_buckets)
        st = start_bucket(t, err);
    float s[DP_SCALARS];
    split_double(*sum, &s[0], &s[1]);
    s[2] = (float)*hits;
    s[3] = job->stop && *job->stop ? 1.0f : 0.0f;
    s[4] = job->preempt && *job->preempt ? 1.0f : 0.0f;
    /* A host engine starts the scalars with the buckets; a device engine
     * takes them after (allreduce_host), on the same stream. */
    nn_comm_req sreq = -1;
    if (st == TY_OK && !c->device_memory)
        st = c->ops->allreduce_start(c, ex, s, DP_SCALARS, 1.0f, &sreq, err);
    /* Every request is released; err keeps the first failure. */
    while (t->n_waited < t->n_started) {
        ty_err later = {0};
        ty_status w = wait_oldest(t, st == TY_OK ? err : &later);
        if (st == TY_OK)
            st = w;
    }
    if (sreq >= 0) {
        ty_err later = {0};
        ty_status w =
            c->ops->allreduce_wait(c, ex, sreq, st == TY_OK ? err : &later);
        if (st == TY_OK)
            st = w;
    }
    if (st == TY_OK && c->device_memory)
        st = allreduce_host(t, s, DP_SCALARS, err);
    t->n_started = t->n_waited = 0;
    t->hook_st = TY_OK;
    if (st != TY_OK)
        return st;
    *sum = (double)s[0] + (double)s[1];
    *hits = (uint32_t)lrintf(s[2]);
    t->dp_stop = s[3] > 0.0f;
    t->dp_preempt = s[4] > 0.0f;
    t->ar_seconds += now_sec() - start;
    return TY_OK;
}

/* FNV-1a over the parameters' bytes. */
static uint64_t params_checksum(const trainer *t)
{
    const unsigned char *b = (const unsigned char *)train_host_state(t);
    const size_t n = (size_t)t->arch.param_count * sizeof(float);
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

ty_status dp_check_params(trainer *t, ty_err *err)
{
    if (t->world == 1 || !t->check_every || t->step % t->check_every != 0)
        return TY_OK;
    nn_comm *c = t->comm;
    /* A device rank sums the host mirror, brought up to date first. */
    ty_status st = train_state_download(t, 0, err);
    if (st != TY_OK)
        return st;
    uint64_t mine = params_checksum(t), root = mine;
    if ((st = c->ops->bcast(c, &root, sizeof root, 0, err)) != TY_OK)
        return st;
    float differ = mine != root ? 1.0f : 0.0f;
    if ((st = allreduce_host(t, &differ, 1, err)) != TY_OK)
        return st;
    if (differ > 0.0f)
        return ty_fail(err, TY_EINTERNAL, NULL,
                       "the ranks' parameters differ after step %llu (%g "
                       "rank(s) differ from rank 0; this rank's checksum "
                       "%016llx, rank 0's %016llx)",
                       (unsigned long long)t->step, (double)differ,
                       (unsigned long long)mine, (unsigned long long)root);
    return TY_OK;
}

ty_status dp_sync_state(trainer *t, ty_err *err)
{
    if (t->world == 1)
        return TY_OK;
    nn_comm *c = t->comm;
    /* The position first: every rank must have resumed from the same
     * checkpoint (or none). */
    uint64_t pos[2] = {t->step, t->epoch_done}, root[2] = {pos[0], pos[1]};
    ty_status st = c->ops->bcast(c, root, sizeof root, 0, err);
    if (st != TY_OK)
        return st;
    float differ = pos[0] != root[0] || pos[1] != root[1] ? 1.0f : 0.0f;
    if ((st = allreduce_host(t, &differ, 1, err)) != TY_OK)
        return st;
    if (differ > 0.0f)
        return ty_fail(err, TY_EINVAL, NULL,
                       "the ranks start from different positions (this rank "
                       "at step %llu, rank 0 at %llu): every rank must read "
                       "the same checkpoint",
                       (unsigned long long)pos[0], (unsigned long long)root[0]);
    const uint64_t state = t->arch.param_count + t->arch.buffer_count;
    if ((st = c->ops->bcast(c, train_host_state(t), state * sizeof(float), 0,
                            err)) != TY_OK)
        return st;
    /* ZeRO-1: each rank read its shard from the same checkpoint (the
     * position check above) or starts from zeros; nothing to send. */
    for (uint32_t k = 0; !t->zero && k < t->opt.n_slots; k++)
        if ((st = c->ops->bcast(c, train_host_slot(t, k),
                                t->arch.param_count * sizeof(float), 0, err)) !=
            TY_OK)
            return st;
    return TY_OK;
}

ty_status dp_agree(trainer *t, ty_status st, const char *what, ty_err *err)
{
    if (t->world == 1)
        return st;
    float failed = st != TY_OK ? 1.0f : 0.0f;
    ty_err inner = {0};
    ty_status cs = allreduce_host(t, &failed, 1, &inner);
    if (st != TY_OK)
        return st;
    if (cs != TY_OK) {
        *err = inner;
        return cs;
    }
    if (failed > 0.0f)
        return ty_fail(err, TY_EIO, NULL, "rank 0 failed %s", what);
    return TY_OK;
}

void dp_abort(const train_job *job, const ty_err *err)
{
    nn_comm *c = job ? job->comm : NULL;
    if (c && c->world > 1)
        c->ops->abort(c, err && err->msg[0] ? err->msg : NULL);
}

void dp_epoch_times(trainer *t, train_epoch_metrics *m)
{
    const uint64_t sent = step_op_bytes(t->comm);
    m->comm_bytes = sent - t->comm_mark;
    t->comm_mark = sent;
    m->world_size = (uint32_t)t->world;
    m->optimizer_state_bytes = t->opt.bytes;
    m->allreduce_seconds = t->ar_seconds;
    m->allreduce_share =
        t->step_seconds > 0 ? t->ar_seconds / t->step_seconds : 0.0;
    t->ar_seconds = t->step_seconds = 0.0;
}

/* ---- ZeRO stage 1 ----
 * The parameters are one flat block (the kernels are elementwise), so a
 * shard is a pointer offset and a length whatever tensors it cuts. Each
 * bucket of gradients is reduce-scattered (dp_reduce_step's buckets, the
 * seam's reduce_scatter_start): a rank receives the summed gradients of
 * its own range only. Clipping and fp16's finite check need the global
 * gradient's norm: each rank sums the squares of its range and one small
 * all-gather adds them up the same way everywhere (dp_grad_sum_squares).
 * Each rank steps its shard with its shard of the state, and the updated
 * shards travel back in one all-gather (the seam's allgather; one bcast a
 * rank on an engine without it). A ring's reduce-scatter plus all-gather
 * move what one all-reduce does (an all-reduce is the two), so ZeRO-1
 * costs the unsharded run's bytes; with the gradients all-reduced whole
 * (an engine without reduce_scatter_start, or
 * TRAINYARD_DP_REDUCE_SCATTER=0) it costs half as much again.
 * The sums are the same element for element as an all-reduce's up to the
 * order the ranks' contributions are added in (bit for bit at 2 ranks);
 * the norm is summed by range rather than over the whole block, so a
 * clipped run agrees with zero 0 to rounding, not bit for bit. */

ty_status dp_grad_sum_squares(trainer *t, double *ss, ty_err *err)
{
    const nn_exec *ex = t->ws->ex;
    if (!t->zero_rs) {
        *ss = t->be->sum_squares(ex, t->grads, (size_t)t->arch.param_count);
        return TY_OK;
    }
    const double start = now_sec();
    nn_comm *c = t->comm;
    double mine = t->be->sum_squares(ex, t->grads + t->zero_lo,
                                     (size_t)(t->zero_hi - t->zero_lo));
    /* A double's bytes as two floats a rank: the all-gather copies them
     * unchanged (no float arithmetic), so the ranks add the same doubles
     * in the same order. */
    memcpy(t->zero_ss + 2 * t->rank, &mine, sizeof mine);
    ty_status st = TY_OK;
    if (c->ops->allgather)
        st = c->ops->allgather(c, t->zero_ss, t->zero_off + t->world + 1, err);
    for (int r = 0; !c->ops->allgather && r < t->world && st == TY_OK; r++)
        st = c->ops->bcast(c, t->zero_ss + 2 * r, sizeof mine, r, err);
    if (st != TY_OK)
        return st;
    double sum = 0.0;
    for (int r = 0; r < t->world; r++) {
        double v;
        memcpy(&v, t->zero_ss + 2 * r, sizeof v);
        sum += v;
    }
    *ss = sum;
    t->ar_seconds += now_sec() - start;
    return TY_OK;
}

void dp_zero_range(uint64_t total, int r, int world, uint64_t *lo, uint64_t *hi)
{
    const uint64_t w = world > 0 ? (uint64_t)world : 1;
    const uint64_t base = total / w, extra = total % w, ur = (uint64_t)r;
    *lo = ur * base + (ur < extra ? ur : extra);
    *hi = *lo + base + (ur < extra ? 1 : 0);
}

ty_status dp_zero_after_step(trainer *t, ty_err *err)
{
    if (!t->zero)
        return TY_OK;
    const double start = now_sec();
    const nn_exec *ex = t->ws->ex;
    const uint64_t p = t->arch.param_count;
    if (t->zero_lo)
        t->be->zero(ex, t->grads, (size_t)t->zero_lo * sizeof(float));
    if (p > t->zero_hi)
        t->be->zero(ex, t->grads + t->zero_hi,
                    (size_t)(p - t->zero_hi) * sizeof(float));
    nn_comm *c = t->comm;
    ty_status st = TY_OK;
    const size_t *off = t->zero_off;
    if (c->ops->allgather)
        st = c->ops->allgather(c, t->params, off, err);
    for (int r = 0; !c->ops->allgather && r < t->world && st == TY_OK; r++)
        if (off[r + 1] > off[r])
            st = c->ops->bcast(c, t->params + off[r],
                               (off[r + 1] - off[r]) * sizeof(float), r, err);
    t->ar_seconds += now_sec() - start;
    return st;
}

ty_status dp_zero_collect(trainer *t, ty_err *err)
{
    if (!t->zero || !t->opt.n_slots)
        return TY_OK;
    const uint64_t p = t->arch.param_count;
    const uint64_t shard_max = p / (uint64_t)t->world + 1;
    float *scratch = NULL;
    if (t->rank == 0)
        t->zero_full = calloc((size_t)t->opt.n_slots * p + 1, sizeof(float));
    else
        scratch = malloc((size_t)shard_max * sizeof(float));
    /* Every rank joins the broadcasts, so a failed allocation still
     * ends in a collective error, not a hang: it is agreed on first. */
    float failed = (t->rank == 0 ? !t->zero_full : !scratch) ? 1.0f : 0.0f;
    ty_status st =
        t->comm->ops->allreduce(t->comm, t->ws->ex, &failed, 1, 1.0f, err);
    if (st == TY_OK && failed > 0.0f)
        st = ty_fail(err, TY_ENOMEM, NULL,
                     "out of memory gathering the optimizer state");
    for (uint32_t k = 0; st == TY_OK && k < t->opt.n_slots; k++)
        for (int r = 0; st == TY_OK && r < t->world; r++) {
            uint64_t lo, hi;
            dp_zero_range(p, r, t->world, &lo, &hi);
            if (hi == lo)
                continue;
            float *buf = r == t->rank   ? nn_optim_slot(&t->opt, k)
                         : t->rank == 0 ? t->zero_full + (size_t)k * p + lo
                                        : scratch;
            st = t->comm->ops->bcast(t->comm, buf,
                                     (size_t)(hi - lo) * sizeof(float), r, err);
            if (st == TY_OK && r == 0 && t->rank == 0)
                memcpy(t->zero_full + (size_t)k * p, buf,
                       (size_t)(hi - lo) * sizeof(float));
        }
    free(scratch);
    if (st != TY_OK)
        dp_zero_release(t);
    return st;
}

ty_status dp_zero_full_alloc(trainer *t, ty_err *err)
{
    /* Only for a job with a checkpoint path (whether or not its file
     * exists yet: train_ckpt_resume decides, and must find room). */
    if (!t->zero || !t->opt.n_slots || !t->job->checkpoint_path)
        return TY_OK;
    t->zero_full =
        calloc((size_t)t->opt.n_slots * t->arch.param_count + 1, sizeof(float));
    return t->zero_full ? TY_OK
                        : ty_fail(err, TY_ENOMEM, NULL,
                                  "out of memory reading the optimizer state");
}

void dp_zero_take_shard(trainer *t, int resumed)
{
    if (!t->zero_full)
        return;
    const uint64_t n = t->zero_hi - t->zero_lo;
    for (uint32_t k = 0; resumed && n && k < t->opt.n_slots; k++)
        memcpy(nn_optim_slot(&t->opt, k),
               t->zero_full + (size_t)k * t->arch.param_count + t->zero_lo,
               (size_t)n * sizeof(float));
    dp_zero_release(t);
}

void dp_zero_release(trainer *t)
{
    free(t->zero_full);
    t->zero_full = NULL;
}
