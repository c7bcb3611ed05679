/*
 * train_internal.h - the trainer's state, shared by the training loop
 * (run.c), checkpoints (checkpoint.c) and device steps (graph.c). Not a
 * public API.
 *
 * Position in a run is (epoch_done, epoch_step): completed epochs and
 * optimizer steps taken in the epoch in progress (each step is `accum`
 * minibatches; positions fall only between steps). Each epoch's order comes from a shuffle
 * seeded by (seed, epoch) and its dropout masks from a stream seeded the
 * same way, so a checkpoint only needs the parameters, the optimizer state,
 * the position, the dropout stream's state and the epoch's running sums to
 * continue exactly where it stopped, mid-epoch included.
 */
#ifndef TY_TRAIN_INTERNAL_H
#define TY_TRAIN_INTERNAL_H

#include "models/train/comm.h"
#include "models/train/loss_scaler.h"
#include "models/nn_internal.h"
#include "models/train/optim.h"
#include "models/train/train.h"

/* Random streams derived from the user's seed. */
#define TRAIN_STREAM_INIT 0x1417ull
#define TRAIN_STREAM_SHUFFLE(e) (0x50ff1e00000000ull + (uint64_t)(e))
#define TRAIN_STREAM_DROPOUT(e) (0xd60900000000ull + (uint64_t)(e))
/* Augmentation's stream is the loader's: LOADER_STREAM_AUGMENT in
 * models/train/loader.h. */

/* A gradient bucket: floats [lo, hi) of the gradient block. */
typedef struct {
    uint64_t lo, hi;
} dp_bucket;

/* The floats of the step's small all-reduce (dp_reduce_step: the loss
 * sum as a float pair, the hit count, the stop and preempt flags). */
#define DP_SCALARS 5

/* Data-parallel buckets (pure): bounds[0..nb) are the ascending offsets
 * where layers' parameters start (the first 0), p the parameter count.
 * Walks the layers from the last (the order backward finishes them, as
 * PyTorch DDP does), whole layers into a bucket until it holds at least
 * first_cap floats (the first bucket) or cap (the rest); a bucket over cap
 * (a large layer) goes as pieces of cap from its top; what is left at the
 * front is the last bucket. Writes up to max buckets to out (NULL: none)
 * and returns how many there are. */
uint32_t dp_plan_buckets(const uint64_t *bounds, uint32_t nb, uint64_t p,
                         uint64_t first_cap, uint64_t cap, dp_bucket *out,
                         uint32_t max);
/* How many of the n buckets (in plan order) may start once the gradients
 * [first_final, p) are final: the leading ones that lie wholly in it. */
uint32_t dp_buckets_ready(const dp_bucket *b, uint32_t n, uint64_t first_final);

typedef struct {
    const train_job *job;
    const train_hparams *hp;
    const ty_dataset *ds; /* job->train */
    uint32_t n_train;
    nn_arch arch;
    json_t *spec;     /* normalized, owned */
    json_t *identity; /* what a checkpoint must match, owned */
    /* The backend's memory (arch.be, kept here: arch is freed first). */
    const nn_backend *be;
    float *params, *grads; /* state block; param_count floats */
    /* Host mirror of [state block | optimizer slots] for initialisation,
     * checkpoints and the model file, moved by train_state_download /
     * _upload; NULL on a host-visible backend, where params and the slots
     * are read and written in place. */
    float *host;
    nn_optim opt;
    nn_workspace *ws; /* training workspace, batch_size rows */
    nn_pool *pool;    /* job->threads workers (NULL: serial) */
    nn_preproc pp;
    nn_target tg;   /* regression target scaling (cols 0: none) */
    uint32_t *perm; /* this epoch's order of training examples */
    uint64_t steps_per_epoch;
    /* position */
    uint32_t epoch_done;
    uint64_t step; /* optimizer steps, whole run */
    uint64_t epoch_step;
    ty_rng drop_rng;
    /* running sums of the epoch in progress */
    double loss_sum; /* per-example loss, summed */
    uint64_t hits, seen;
    train_epoch_metrics last; /* of the last completed epoch */
    int have_last;
    double last_report; /* CLOCK_MONOTONIC of the last on_progress */
    /* t->step of the checkpoint last written or resumed from (0 before
     * any: step 0 needs none, a fresh start is the same run). */
    uint64_t ckpt_step;
    uint32_t accum;        /* minibatches per optimizer step (>= 1) */
    uint64_t total_steps;  /* optimizer steps of the whole run */
    double lr;             /* learning rate of the last step */
    struct loader *loader; /* minibatches, prefetched (models/train/loader.h) */
    /* Bytes held from the backend's alloc now and at most so far, counted
     * at each allocation the trainer makes (train_peak). */
    uint64_t mem_live, mem_peak;
    /* Device runs (host != NULL; graph.c): the epoch's running sums
     * stay in the backend's memory (acc: NN_ACC_COUNT doubles, as loss
     * kernels add them) until the trainer reports, and the optimizer reads
     * each step's values from dyn (NN_OPTIM_DYN floats), both in the tail
     * of the grads allocation. NULL on a host-visible backend. */
    double *acc;
    float *dyn;
    uint64_t acc_step; /* t->step when acc was last read (and finite) */
    /* CUDA graphs: graph_on while the run captures and replays its
     * full-size steps; otherwise graph_reason says why not (static text
     * or graph_why). graph: the captured step, NULL until captured. */
    int graph_on;
    const char *graph_reason;
    char graph_why[200];
    void *graph;
    int eager_full;          /* a full-size step ran op by op this run */
    uint64_t graph_launches; /* replays this run (tests count them) */
    /* Mixed precision (train_precision_resolve): lp_params is the
     * parameters in `precision` (param_count values, the backend's memory;
     * NULL under fp32), refreshed from params by train_lp_refresh after
     * every change to them. fp16 only: the loss scaler and the steps it
     * skipped in the epoch in progress. */
    nn_dtype precision;
    void *lp_params;
    loss_scaler scaler;
    uint64_t epoch_skipped;
    /* Data parallelism (dp.c): the job's comm (the self comm when it gave
     * none), this rank's examples of each epoch in order (world > 1:
     * local_n of them in lperm), the flags the ranks agreed on at the last
     * step, the epoch's all-reduce and step seconds, and the parameter
     * check's interval (TRAINYARD_DP_CHECK_EVERY; 0: off). */
    nn_comm *comm;
    int rank, world;
    uint32_t *lperm;
    uint32_t local_n;
    int dp_stop, dp_preempt;
    double ar_seconds, step_seconds;
    uint64_t comm_mark; /* the comm's step-op bytes at the epoch's start */
    uint64_t check_every;
    /* ZeRO stage 1 (hyperparameters.zero 1 at world > 1; dp.c): this rank
     * owns parameters [zero_lo, zero_hi) of the flat block and keeps the
     * optimizer state of those only (opt.param_count = zero_hi - zero_lo).
     * Off: zero 0, [0, param_count). zero_full: NULL, or every slot's
     * whole-model state (host memory) while a checkpoint is written on
     * rank 0 or read on any rank; train_host_slot returns it then. */
    int zero;
    uint64_t zero_lo, zero_hi;
    float *zero_full;
    /* zero_off: every rank's range as world + 1 offsets (the seam's
     * allgather and reduce_scatter_start take them), then zero_ss's
     * world + 1 (2 r for rank r); zero_rs: the buckets
     * are reduce-scattered (each rank receives only its range's summed
     * gradients) rather than all-reduced: set with zero where the engine
     * has reduce_scatter_start and TRAINYARD_DP_REDUCE_SCATTER is not 0.
     * zero_ss: the ranks' sums of squares (2 floats a rank, a double's
     * bytes) for dp_grad_sum_squares. */
    size_t *zero_off;
    int zero_rs;
    float *zero_ss;
    /* A device rank (dp.c, world > 1 on a backend that is not host
     * visible, with a device engine): DP_SCALARS floats of the backend's
     * memory that carry the host's small all-reduces (the step's scalars,
     * the agreement flags), the tail of the grads allocation that acc and
     * dyn take at world 1 (train_graph_setup); NULL on the CPU. */
    float *dp_dev;
    /* Gradient buckets (dp.c, world > 1): ranges of the gradient block in
     * the order the backward pass finishes them; the step's requests (one
     * a bucket, then the scalars'), how many are started and waited for,
     * the overlap switch (TRAINYARD_DP_OVERLAP=0: off), and the first
     * failure of a start made from the backward hook. */
    dp_bucket *buckets;
    uint32_t n_buckets, n_started, n_waited;
    nn_comm_req *bucket_req;
    int overlap;
    ty_status hook_st;
    ty_err hook_err;
} trainer;

/* Casts the parameters into lp_params (nothing under fp32). */
void train_lp_refresh(const trainer *t);

/* train_memory for training arch (built on the run's backend) with hp over
 * n_train examples on `threads` compute threads (as train_threads gives),
 * one rank of `world` (its minibatches batch_size / world rows);
 * returns out->total. The layout arithmetic is the workspace's own
 * (nn_workspace_bytes) and the optimizer's (nn_optim_state_bytes). */
uint64_t train_memory_estimate(const nn_arch *arch, const train_hparams *hp,
                               uint32_t n_train, int threads, uint32_t world,
                               train_memory *out);

/* Where the host reads and writes the state block (parameters, then
 * buffers) and optimizer slot k: the mirror, or the memory itself. */
float *train_host_state(const trainer *t);
float *train_host_slot(const trainer *t, uint32_t k);
/* Copies the state block (and, with slots, the optimizer slots) between
 * the backend and the host mirror; nothing without a mirror. TY_EDEVICE
 * with the backend's message when it has failed. */
ty_status train_state_download(const trainer *t, int slots, ty_err *err);
ty_status train_state_upload(const trainer *t, ty_err *err);

/* ---- device steps and CUDA graphs (graph.c) ---- */

/* Bytes of the grads allocation for param_count p on backend be: the
 * gradients and, on a device, acc and dyn after them. */
uint64_t train_grads_bytes(const nn_backend *be, uint64_t p);
/* Points acc and dyn into the grads allocation, zeroes acc, hands dyn to
 * the optimizer, and decides graph_on / graph_reason. Device runs only. */
void train_graph_setup(trainer *t);
/* Releases the captured graph. */
void train_graph_free(trainer *t);
/* Puts the epoch's running sums (loss_sum, hits) into acc. */
void train_sums_upload(trainer *t);
/* Reads acc into loss_sum and hits when steps ran since the last read.
 * TY_EDEVICE when the backend failed; TY_EINVAL when the loss is not
 * finite, naming the steps (epoch e, 0-based). */
ty_status train_sums_read(trainer *t, uint32_t e, ty_err *err);
/* Uploads the next optimizer step's values (lr from the schedule, Adam's
 * bias corrections for step opt.t + 1) into dyn, and sets t->lr and
 * opt.lr to that lr. */
void train_dyn_upload(trainer *t);
/* Stops capturing and replaying for the rest of the run: graph_reason
 * gets why (printf-style), once. */
void train_graph_off(trainer *t, const char *fmt, ...);

/* ---- data parallelism (dp.c); each is a no-op at world 1 ---- */

/* Takes the job's comm, checks batch_size against the world size (TY_EINVAL
 * naming hyperparameters.batch_size) and the backend, and sizes lperm. */
ty_status dp_setup(trainer *t, ty_err *err);
/* Arms the backward hook for the minibatch about to run: last is 1 for the
 * step's last minibatch of this rank (its backward finishes the step's
 * gradients, so buckets start as they become final); else disarms it. */
void dp_backward_begin(trainer *t, int last);
/* Frees what dp_setup allocated for the buckets. */
void dp_free(trainer *t);
/* The rows of this rank's minibatches: batch_size / world (at most
 * n_train). */
uint32_t dp_rows(const trainer *t);
/* This rank's rows of a global minibatch of m rows. */
uint32_t dp_share(const trainer *t, uint32_t m);
/* The order the loader delivers this epoch on this rank: perm at world 1,
 * else this rank's share of every global minibatch of perm, in lperm.
 * Loader steps are the same at any world size. */
const uint32_t *dp_epoch_order(trainer *t);
/* After a step's minibatches: sums the gradients across ranks (buckets),
 * then the step's loss sum and hits (in place) and the stop and preempt
 * flags (into dp_stop, dp_preempt). On failure the comm is broken. */
ty_status dp_reduce_step(trainer *t, double *sum, uint32_t *hits, ty_err *err);
/* Rank 0's position must be every rank's; then its parameters, buffers and
 * optimizer state become every rank's (host state; before the upload). */
ty_status dp_sync_state(trainer *t, ty_err *err);
/* Every check_every steps: the parameters' checksum against rank 0's;
 * TY_EINTERNAL on a difference, on every rank. */
ty_status dp_check_params(trainer *t, ty_err *err);
/* After rank 0 did `what` (st: its status; TY_OK elsewhere): every rank
 * returns its own failure, or TY_EIO when rank 0 failed. */
ty_status dp_agree(trainer *t, ty_status st, const char *what, ty_err *err);
/* Tells job's peers this rank is failing with err, so none waits for it
 * (any time, even before the trainer is set up). */
void dp_abort(const train_job *job, const ty_err *err);
/* The epoch's world size, all-reduce seconds and share of step time into
 * m; starts the next epoch's counts. */
void dp_epoch_times(trainer *t, train_epoch_metrics *m);

/* ---- ZeRO stage 1 (dp.c); each is a no-op unless t->zero ---- */

/* Rank r's range [*lo, *hi) of a flat block of total elements split over
 * world ranks: contiguous, in rank order, sizes differing by at most one
 * (the first total % world ranks one more), so rank 0's is the largest.
 * A range may cut a tensor; with world > total some are empty. */
void dp_zero_range(uint64_t total, int r, int world, uint64_t *lo,
                   uint64_t *hi);
/* The global gradient's sum of squares (for clipping and fp16's finite
 * check) into *ss: the whole block's on this rank, or with zero_rs, where
 * a rank holds the summed gradients of its range only, the ranks' sums
 * over their ranges, exchanged (one all-gather of a double a rank) and
 * added in rank order, so every rank gets the same value; non-finite on
 * every rank when any rank's range has an inf or NaN. On failure the comm
 * is broken. */
ty_status dp_grad_sum_squares(trainer *t, double *ss, ty_err *err);
/* After this rank's shard step: zeroes the gradients outside the shard
 * (the kernel zeroed the shard's) and gathers every rank's updated
 * parameters, so every replica holds the same parameters again. */
ty_status dp_zero_after_step(trainer *t, ty_err *err);
/* Before rank 0 writes a checkpoint (called on every rank): the shards
 * of every slot into rank 0's zero_full, freed by dp_zero_release. */
ty_status dp_zero_collect(trainer *t, ty_err *err);
/* Before train_ckpt_resume: a zeroed zero_full to read the whole state
 * into (every rank reads the same checkpoint). */
ty_status dp_zero_full_alloc(trainer *t, ty_err *err);
/* After a resume (resumed: the checkpoint was read): this rank's shard of
 * zero_full into its optimizer state; frees zero_full. */
void dp_zero_take_shard(trainer *t, int resumed);
void dp_zero_release(trainer *t);

/* The run's identity as its checkpoints record it (identity.c): a new
 * object, or NULL when out of memory. */
json_t *train_run_identity(const trainer *t);

/* Writes the checkpoint for the trainer's current position, atomically. */
ty_status train_ckpt_save(const trainer *t, ty_err *err);

/* Writes the final model (nn.h's format, extra metadata merged in) to
 * job->model_path, atomically. */
ty_status train_save_model(const trainer *t, ty_err *err);

/* If job->checkpoint_path exists, restores parameters, optimizer state and
 * position from it and sets *resumed. A checkpoint of another job is
 * TY_EINVAL "checkpoint does not match this job"; a malformed one
 * TY_EFORMAT. */
ty_status train_ckpt_resume(trainer *t, int *resumed, ty_err *err);

#endif
