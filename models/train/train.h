/*
 * train.h - the training loop: hyperparameters, the run, its progress
 * reports, checkpoints and resume.
 *
 * Hyperparameters (the job request's "hyperparameters" object; unknown keys
 * are errors):
 *   epochs (1..100000, default 10), batch_size (1..65536, default 64),
 *   optimizer "sgd" | "adam" | "adamw" (default "adam"; torch.optim.SGD,
 *   Adam, AdamW),
 *   learning_rate (0 < lr <= 10; default 0.001 for adam/adamw, 0.01 for sgd),
 *   momentum (sgd; 0 <= m < 1; default 0), nesterov (sgd; default false;
 *   needs momentum > 0, as torch requires),
 *   weight_decay (>= 0): sgd and adam add it to the gradient as L2 (default
 *   0); adamw decays decoupled, p *= 1 - lr * wd before the Adam update
 *   (default 0.01, as torch.optim.AdamW),
 *   beta1 (0.9), beta2 (0.999), epsilon (1e-8) for adam and adamw,
 *   lr_schedule: {"type": "constant"} (default)
 *     | {"type": "step", "step_epochs": N >= 1, "gamma": 0 < g <= 1 (0.1)}:
 *       torch StepLR(step_size=N, gamma) stepped once per epoch, so the
 *       steps of epoch e (0-based) use lr * gamma^floor(e / N);
 *     | {"type": "cosine", "min_lr": 0 <= m <= learning_rate (0)}:
 *       torch CosineAnnealingLR(T_max = total optimizer steps of the run,
 *       eta_min = min_lr) stepped after every optimizer step: step t
 *       (0-based, whole run) uses min_lr + (lr - min_lr)(1 + cos(pi t/T))/2,
 *   warmup_steps (0..10^9, default 0): the scheduled rate of step t is
 *     multiplied by min(t + 1, W + 1) / (W + 1), the factor of torch
 *     LinearLR(start_factor=1/(W+1), end_factor=1, total_iters=W) stepped
 *     after every optimizer step. The product is exactly torch's
 *     LambdaLR(lambda t: warmup(t) * schedule(t) / lr); for "constant",
 *     "step" (its StepLR stepped per epoch) and a cosine with min_lr 0 it is
 *     also what chaining LinearLR with the schedule's scheduler gives (both
 *     multiplicative); for a cosine with min_lr > 0 chaining would differ
 *     and LambdaLR is the reference,
 *   clip_grad_norm (> 0; absent: no clipping): before each optimizer step
 *     the gradients are scaled as torch.nn.utils.clip_grad_norm_(max_norm)
 *     does: by max_norm / (norm + 1e-6) when that is below 1, with norm the
 *     L2 norm of all gradients together (computed in double),
 *   accumulation_steps (1..1024, default 1): the gradients of that many
 *     consecutive minibatches make one optimizer step, as the gradient of
 *     the mean loss over all their examples (k minibatches of b examples
 *     step exactly as one batch of k * b would, up to float rounding); an
 *     epoch's last group may be shorter and still steps. Steps, schedules,
 *     checkpoint_every_steps, progress and resume all count optimizer
 *     steps: an epoch has ceil(ceil(n / batch_size) / accumulation_steps),
 *     and checkpoints fall only between optimizer steps, so a resumed run
 *     continues exactly,
 *   loss: classification "cross_entropy" (default) with label_smoothing
 *     (0 <= x < 1, default 0), or "binary_cross_entropy" for exactly 2
 *     classes (the model ends in 1 unit); regression "mse" (default) or
 *     "huber" with huber_delta (> 0, default 1.0). See nn.h. Without a
 *     task train_hparams_parse leaves loss NN_LOSS_AUTO;
 *     train_hparams_resolve_loss settles it (and target_scaling),
 *   target_scaling (regression only) "standardize" (default) | "none": with
 *   "standardize" the net learns each target column as (y - mean) / std
 *   over the training examples and every output (predict, evaluate,
 *   metrics) is turned back into the target's units (models/target.h,
 *   "trainyard.target" in nn.h), as scikit-learn's TransformedTargetRegressor
 *   with a StandardScaler does; "none" trains on the raw targets. Given for
 *   a classification dataset it is an error. The default is settled by
 *   train_hparams_resolve_loss, which every submit runs and which spells
 *   "standardize" out in the job's hyperparameters; train_run takes an
 *   unsettled (absent) one as "none", so a job admitted before target
 *   scaling existed resumes from its checkpoint as it was trained,
 *   context_length (language models only: text and tokens datasets; 1..
 *   65536, default 128): each example is a window of that many tokens
 *   predicting the next token at every position; the training tokens are
 *   cut into consecutive windows (the last partial one dropped), shuffled
 *   each epoch by (seed, epoch); validation windows come from a held-out
 *   stretch at the end of the text (models/data/windows.h),
 *   max_steps (1..10^9; absent: none): the run stops after this many
 *   optimizer steps, or at the end of `epochs`, whichever comes first (the
 *   last epoch may end early; its record and the model are written as at
 *   any epoch's end); schedules count it as the run's length,
 *   eval_every_steps (1..10^9; absent: off): the validation loss is also
 *   measured every that many steps and reported with the progress
 *   (val_loss, and val_perplexity for language models),
 *   init_from (a model's id or name; absent: none): fine-tuning. The run
 *   starts from that model's weights instead of drawn ones; the job's spec
 *   must be the model's (the service names the first layer that differs)
 *   and its data of the same shape and outputs,
 *   seed (0..2^53; default chosen at random by train_hparams_parse and written
 *   into the normalized object, so every run is reproducible afterwards),
 *   checkpoint_every_steps (0 = only at the end of each epoch; default 0;
 *   counts optimizer steps),
 *   augment {"crop_padding": P (0..min(H, W)/2, default 0: off),
 *   "horizontal_flip": bool (default false)}: image augmentation of training
 *   batches only, for (C, H, W) inputs (any other shape is an error naming
 *   "hyperparameters.augment"): a random H x W crop of the preprocessed image
 *   zero-padded by P on each side, then a left-right flip with probability
 *   0.5 - torchvision's RandomCrop(size, padding=P) then
 *   RandomHorizontalFlip(), applied after preprocessing (so padding is 0 in
 *   the network's input space). Each example's draws come from a stream
 *   seeded by (seed, epoch, position in the epoch's order), so augmentation
 *   is deterministic and survives a mid-epoch resume,
 *   precision "fp32" (default) | "bf16" | "fp16" | "auto": mixed-precision
 *   training. The parameters, optimizer state and every op but the dense
 *   layers' GEMMs stay fp32 (fp32 master weights); under bf16/fp16 the
 *   dense layers multiply 16-bit copies of their input, weights and output
 *   gradient with fp32 sums, and GPU convolutions may use TF32 Tensor
 *   Cores. fp16 adds dynamic loss scaling (models/train/loss_scaler.h: the
 *   defaults of torch.cuda.amp.GradScaler) and skips steps whose
 *   gradients overflow. "auto" is bf16 where the device trains fast in it
 *   (nn_backend.lp_ok), else fp32. On the CPU every precision trains in
 *   fp32; on a GPU without support for an explicit bf16/fp16 the run fails
 *   naming hyperparameters.precision. The saved model is fp32, and so are
 *   validation's dense layers (its GPU convolutions may use TF32 as
 *   training's do). Epoch metrics say which precision ran.
 *
 * Determinism: the same seed, data and thread count give the same weights bit
 * for bit. Initial weights are drawn as PyTorch's defaults for nn.Linear
 * (uniform in +-1/sqrt(fan_in) for weight and bias) from a stream seeded by
 * seed; each epoch's shuffle and dropout masks come from streams seeded by
 * (seed, epoch), so a run resumed from an epoch checkpoint continues exactly.
 * When a core is left over, the next minibatch is gathered (and augmented)
 * on the data loader's own thread while the current step runs
 * (models/train/loader.h, train_job.prefetch); that changes no number.
 */
#ifndef TY_TRAIN_H
#define TY_TRAIN_H

#include <jansson.h>
#include <signal.h>
#include <stdint.h>

#include "common/ty.h"
#include "models/backend.h"
#include "models/data/dataset.h"
#include "models/nn.h"
#include "models/train/comm.h"
#include "models/train/loader.h"
#include "models/train/optim.h"

typedef enum {
    TRAIN_LR_CONSTANT = 0,
    TRAIN_LR_STEP,
    TRAIN_LR_COSINE
} train_lr_kind;

typedef struct {
    train_lr_kind kind;
    uint32_t step_epochs; /* step */
    double gamma;         /* step */
    double min_lr;        /* cosine */
} train_lr_schedule;

/* hyperparameters.precision as asked. */
typedef enum {
    TRAIN_PRECISION_FP32 = 0,
    TRAIN_PRECISION_BF16,
    TRAIN_PRECISION_FP16,
    TRAIN_PRECISION_AUTO
} train_precision;

/* hyperparameters.target_scaling (regression only). AUTO: absent; settled
 * to STANDARDIZE for regression by train_hparams_resolve_loss, and read
 * as NONE by train_run (see target_scaling above). */
#define TRAIN_INIT_FROM_MAX 200

typedef enum {
    TRAIN_TARGET_AUTO = 0,
    TRAIN_TARGET_STANDARDIZE,
    TRAIN_TARGET_NONE
} train_target_scaling;

/* Training rows train_rmse/_mae/_r2 are measured on at each epoch's end. */
#define TRAIN_METRIC_ROWS 10000u

typedef struct {
    uint32_t epochs;
    uint32_t batch_size;
    nn_optim_kind optimizer;
    double learning_rate;
    double momentum;
    double weight_decay;
    double beta1, beta2, epsilon;
    uint64_t seed;
    uint32_t checkpoint_every_steps;
    uint32_t accumulation_steps; /* >= 1 */
    int nesterov;
    uint32_t warmup_steps;
    train_lr_schedule lr_schedule;
    double clip_grad_norm;  /* 0: off */
    nn_loss_spec loss;      /* kind NN_LOSS_AUTO until resolved */
    loader_augment augment; /* parsed by loader_augment_parse */
    /* On a GPU: capture one training step as a CUDA graph and replay it
     * (default true; ignored on the CPU). Changes no number. */
    int cuda_graph;
    train_precision
        precision; /* as asked; train_precision_resolve settles it */
    /* Regression targets: standardized per column for training or taken
     * as they are (see target_scaling above). */
    train_target_scaling target_scaling;
    /* Language models (text and tokens datasets): the window of tokens
     * each example is (0 until resolved: TRAIN_DEFAULT_CONTEXT). */
    uint32_t context_length;
    uint64_t max_steps;        /* 0: no cap besides epochs */
    uint64_t eval_every_steps; /* 0: validation at epoch ends only */
    /* ZeRO stage: 0, or 1 (optimizer state sharded across the ranks of a
     * data-parallel run; nothing changes at world 1). */
    uint32_t zero;
    /* init_from as given ("" when absent): a model to start from; the
     * service resolves it (jobs/admission.c) and hands the trainer its
     * file as train_job.init_path. */
    char init_from[TRAIN_INIT_FROM_MAX + 1];
} train_hparams;

#define TRAIN_DEFAULT_CONTEXT 128u

/* Parses and validates hp (may be NULL: all defaults). On success fills *out
 * and, if normalized is not NULL, sets it to a new object with every value
 * spelled out (seed included). On failure TY_EINVAL with err->field like
 * "hyperparameters.batch_size". */
ty_status train_hparams_parse(const json_t *hp, train_hparams *out,
                              json_t **normalized, ty_err *err);

/* The optimizer's settings in hp (optimizer, learning_rate, momentum,
 * weight_decay, betas, epsilon, nesterov), for nn_optim_init. */
nn_optim_config train_hparams_optim(const train_hparams *hp);

/* Settles hp->loss for a dataset's task and outputs (classes or target
 * values), as nn_loss_resolve does, and when normalized is not NULL spells
 * it out there ("loss", and "label_smoothing" or "huber_delta"). On
 * failure TY_EINVAL with err->field "hyperparameters.loss" (or the field
 * that does not apply) and hp unchanged. */
ty_status train_hparams_resolve_loss(train_hparams *hp, ty_task task,
                                     uint32_t num_outputs, json_t *normalized,
                                     ty_err *err);

/* The learning rate of optimizer step `step` (0-based, whole run) under
 * hp's lr_schedule and warmup_steps (see above), in double, for a run of
 * steps_per_epoch optimizer steps an epoch and total_steps in all. */
double train_lr_at(const train_hparams *hp, uint64_t step,
                   uint64_t steps_per_epoch, uint64_t total_steps);

/* The precision a run of hp trains in on backend be (NULL: the CPU) and
 * context ex (may be NULL: the current device), into *out: fp32 when asked,
 * or when bf16/fp16 is asked of a host-visible (CPU) backend or "auto"
 * finds no fast bf16 (be->lp_ok). An explicit bf16/fp16 that a device
 * backend cannot train fast in is TY_EINVAL naming
 * hyperparameters.precision. */
ty_status train_precision_resolve(const train_hparams *hp, const nn_backend *be,
                                  const nn_exec *ex, nn_dtype *out,
                                  ty_err *err);

/* Splits examples 0..n-1 into a training and a validation set: a shuffle
 * seeded by (seed, stream 0x5b117), the last round(n * fraction) examples
 * for validation. Writes malloc'd index arrays (caller frees). fraction may
 * be 0 (empty validation set, *val_idx NULL). */
ty_status train_split(uint32_t n, double fraction, uint64_t seed,
                      uint32_t **train_idx, uint32_t *n_train,
                      uint32_t **val_idx, uint32_t *n_val, ty_err *err);

/* What the loop reports. */
typedef struct {
    uint32_t epoch; /* 1-based epoch in progress */
    uint32_t epochs;
    uint64_t step; /* optimizer steps taken so far, whole run */
    uint64_t steps_per_epoch;
    uint64_t total_steps;
    double fraction; /* of the whole run, 0..1 */
    double loss;     /* running mean training loss this epoch */
    /* The validation loss measured at this step (eval_every_steps); NAN
     * when none was. */
    double val_loss;
    double samples_per_sec; /* over this epoch so far */
    double lr;              /* learning rate of the last step */
} train_progress;

typedef struct {
    uint32_t epoch; /* 1-based, just finished */
    double train_loss;
    double train_accuracy; /* -1 for regression */
    double val_loss;       /* -1 when there is no validation set */
    double val_accuracy;   /* -1 for regression or no validation set */
    /* Regression, in the target's own units (models/target.h); NAN for
     * classification, val_* NAN without a validation set. train_*: the
     * net at the epoch's end (eval mode) on at most TRAIN_METRIC_ROWS of
     * the training examples (the first in the split's order); val_*: on
     * every validation example. */
    double train_rmse, train_mae, train_r2;
    double val_rmse, val_mae, val_r2;
    double samples_per_sec;
    /* Language models: samples_per_sec times the context length (0
     * otherwise). */
    double tokens_per_sec;
    double seconds; /* wall time of the epoch */
    /* The most bytes the run has held from the backend's alloc at once so
     * far (counted at every allocation the trainer makes through it);
     * equals train_memory_estimate's total for the run. */
    uint64_t peak_memory_bytes;
    /* Where and how the epoch ran. device: "cpu" or "cuda:N"; precision:
     * the resolved one ("fp32", "bf16", "fp16"); loss_scale: fp16's
     * dynamic loss scale after the epoch (0: not fp16); skipped_steps:
     * optimizer steps fp16 skipped this epoch for inf/NaN gradients;
     * cuda_graph: 1 when the epoch's full steps replayed a captured CUDA
     * graph, 0 when they ran op by op on a GPU, -1 on the CPU. */
    const char *device;
    const char *precision;
    double loss_scale;
    uint64_t skipped_steps;
    int cuda_graph;
    /* cuda_graph 0: why the steps ran op by op ("the network has dropout",
     * "capture failed: ..."); NULL otherwise. Static or the trainer's. */
    const char *cuda_graph_reason;
    /* Data parallelism: the ranks that trained (1 without a comm), the
     * seconds this rank spent in the epoch's gradient and loss
     * all-reduces (0 at world 1), and their share of its optimizer
     * steps' time (forward, backward, all-reduce, update). */
    uint32_t world_size;
    double allreduce_seconds;
    double allreduce_share;
    /* The bytes of optimizer state this rank holds (rank 0's, which holds
     * the largest shard): the whole model's without ZeRO, about 1/world
     * of it with hyperparameters.zero 1. */
    uint64_t optimizer_state_bytes;
    /* The bytes this rank sent in the epoch's all-reduces, reduce-scatters
     * and all-gathers, by the comm's ring measure (nn_comm_stats; 0 at
     * world 1): a step's gradients cost the same with ZeRO-1 as without. */
    uint64_t comm_bytes;
} train_epoch_metrics;

typedef struct {
    void *ctx;
    /* At most a few times a second. */
    void (*on_progress)(void *ctx, const train_progress *p);
    /* After each epoch, once its checkpoint is on disk; and once more for
     * the last finished epoch after a resume (a crash may have lost the
     * first call's effect), so receivers must treat a repeat as the same
     * record. */
    void (*on_epoch)(void *ctx, const train_epoch_metrics *m);
    /* After a run resumes from a checkpoint (epoch = completed epochs). */
    void (*on_resume)(void *ctx, uint32_t epoch, uint64_t step);
    /* When a preemption stops the run (train_job.preempt), just before
     * train_run returns TY_EPREEMPTED: the position it stopped at
     * (completed epochs, optimizer steps taken) and whether a checkpoint
     * of exactly that position is on disk (0: the run had taken no step,
     * or has no checkpoint_path; it starts over). */
    void (*on_preempt)(void *ctx, uint32_t epoch, uint64_t step,
                       int checkpointed);
    /* After every optimizer step of a run on a host-visible backend (the
     * CPU): the step (1-based, whole run) and the mean loss of its
     * examples, the global batch's. May be NULL. */
    void (*on_step)(void *ctx, uint64_t step, double loss);
} train_callbacks;

typedef struct {
    const json_t *spec; /* normalized model spec */
    const train_hparams *hp;
    const ty_dataset *train;   /* examples to learn from */
    const uint32_t *train_idx; /* which of them (NULL = all) */
    uint32_t n_train;
    const ty_dataset *val;   /* NULL for no validation */
    const uint32_t *val_idx; /* NULL = all of val */
    uint32_t n_val;
    const int32_t *val_class_map; /* val class index -> train index, or NULL */
    const char *checkpoint_path; /* written atomically; resumed from if present;
                                        NULL: no checkpoints */
    const char *model_path;      /* the final model, written atomically */
    const json_t *extra_meta;    /* object of strings added to the model's
                                        __metadata__ (may be NULL) */
    int threads;                 /* compute threads: the CPU backend's worker
                                        pool (OpenBLAS itself runs one thread per
                                        part); 0 = all cores; at most the core
                                        count */
    volatile sig_atomic_t *stop; /* when set, return TY_ECANCELLED soon */
    /* When set (may be NULL): stop at the next optimizer-step boundary,
     * write the checkpoint of that position there (a mid-epoch one, as
     * checkpoint_every_steps writes, so a resumed run continues exactly)
     * and return TY_EPREEMPTED. No checkpoint is written when the run has
     * taken no step yet (a fresh start is the same run) or the last one
     * written or resumed from is already of that position. The flag is
     * read only before a step that is still to run: once the last
     * optimizer step is taken the run finishes normally (validation, the
     * epoch's checkpoint, the model) and returns TY_OK, so a late
     * preemption never loses a finished model. stop wins over preempt. */
    volatile sig_atomic_t *preempt;
    train_callbacks cb;
    int prefetch; /* the data loader's own thread: 0 = when
                                        a core is left over by `threads`,
                                        1 = always, -1 = never (gather inline);
                                        the weights are the same either way */
    /* Where the kernels run: backend be (NULL: the CPU's) on the context
     * ex the caller made for it (NULL on the CPU; on a GPU the one
     * nn_cuda_exec_init made), which outlives the run. A failure the
     * backend reports after a step fails the job with TY_EDEVICE and the
     * backend's message. */
    const nn_backend *be;
    const nn_exec *ex;
    /* How the device is named in metrics ("cuda:0", or "sim:<uuid>" for a
     * simulated slice the CPU stands in for); NULL: the backend's name
     * ("cpu"). */
    const char *device_label;
    /* A model file (nn.h's format) whose weights a fresh run starts from
     * (hyperparameters.init_from, resolved); NULL: drawn ones. Every tensor
     * of the spec must be there with its shape; a resumed run ignores it. */
    const char *init_path;
    /* Data-parallel training (models/train/comm.h): this rank's
     * communicator, borrowed; NULL: the self comm (world 1). Every rank
     * runs train_run with the same job but its comm; batch_size stays the
     * global batch (divisible by the world size), each rank trains on its
     * share of every global minibatch and the gradients are averaged, so
     * the run steps as one process would (docs/jobs.md). Only rank
     * 0 calls the callbacks and writes checkpoints and the model; every
     * rank reads checkpoint_path on resume, so it must be on storage they
     * all see. On failure the rank aborts the comm, so no peer waits. */
    nn_comm *comm;
} train_job;

/* The compute threads a run uses for job.threads = requested on be (NULL:
 * the CPU's): 0 = all cores, at most the core count and 64; 1 on a
 * backend that is not host-visible (it runs on its own stream). */
int train_threads(int requested, const nn_backend *be);

/* What a training run takes from its backend's alloc, in bytes, by part.
 * Exact: train_run allocates exactly these (and nothing more through the
 * backend) before its first step and holds them to the end, so total is
 * also its peak. Host-side memory (the dataset, the loader's batches, a
 * device backend's host staging and mirror) is not counted. */
typedef struct {
    uint64_t state;       /* parameters and buffers (+1 float) */
    uint64_t grads;       /* one per parameter */
    uint64_t optimizer;   /* 0, 1 or 2 slots per parameter */
    uint64_t activations; /* the training workspace's float block:
                                  activations, layer scratch, activation
                                  gradients, labels, targets */
    uint64_t work;        /* per-thread work arena, all threads */
    uint64_t total;
    uint32_t batch_rows; /* min(batch_size, n_train) */
    uint64_t param_count;
    /* Mixed precision: the 16-bit copy of the parameters (its dense
     * layers' 16-bit scratch is in activations); 0 in fp32. In total. */
    uint64_t low_precision;
} train_memory;

/* train_memory for training the (validated) model spec on data of the
 * given input shape, task and outputs with hp (loss resolved) over n_train
 * examples on `threads` (as train_threads resolves them) on backend be
 * (NULL: the CPU's), in the precision hp resolves to on be's current
 * device (train_precision_resolve; fp32 where it would fail). TY_EINVAL
 * when the spec does not build. */
ty_status train_memory_estimate_spec(const json_t *spec,
                                     const uint32_t *input_shape, uint32_t ndim,
                                     uint32_t num_outputs, ty_task task,
                                     const train_hparams *hp, uint32_t n_train,
                                     int threads, const nn_backend *be,
                                     train_memory *out, ty_err *err);

/* The same for one rank of a data-parallel run of `world` ranks
 * (train_job.comm): its minibatches are batch_size / world rows, the rest
 * is a full replica's (the all-reduces take nothing from the backend),
 * but for hyperparameters.zero 1: the optimizer state of rank 0's shard
 * (the largest, ceil(param_count / world) parameters).
 * world 1 is train_memory_estimate_spec. */
ty_status train_memory_estimate_rank(const json_t *spec,
                                     const uint32_t *input_shape, uint32_t ndim,
                                     uint32_t num_outputs, ty_task task,
                                     const train_hparams *hp, uint32_t n_train,
                                     int threads, const nn_backend *be,
                                     uint32_t world, train_memory *out,
                                     ty_err *err);

/* Writes "about 3.2 GiB" style byte counts: n in B, KiB, MiB or GiB. */
void train_format_bytes(uint64_t n, char *buf, size_t len);

/* Trains, checkpointing at least at the end of every epoch, and writes the
 * final model (nn.h's format) to model_path. Preprocessing is computed from
 * the training examples (mean/std per feature for "standardize", with std 0
 * read as 1) and stored in the model. A loss that becomes NaN or Inf stops
 * the run with TY_EINVAL and a message suggesting a lower learning rate.
 * job->stop stops it with TY_ECANCELLED, job->preempt with TY_EPREEMPTED
 * (its checkpoint written; see train_job.preempt). *final gets the last
 * epoch's metrics. */
ty_status train_run(const train_job *job, train_epoch_metrics *final,
                    ty_err *err);

#endif
