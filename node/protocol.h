/*
 * protocol.h - the worker protocol: how the server (jobs/supervisor.c,
 * jobs/service.c) and a `trainyard worker` process (node/worker.c) talk.
 * Every name on the wire - message kinds, fields, exit codes, environment
 * variables, the files in the job folder - is defined here once; the
 * worker builds its lines with the wproto_encode_* functions and the
 * server reads them with wproto_decode.
 *
 * Starting a worker: the server writes <data>/jobs/<id>/job.json
 * (WPROTO_JOB_FILE, the WPROTO_JOB_* keys: dataset paths resolved, the
 * spec, the hyperparameters, the checkpoint and model paths, the thread
 * count) and runs `trainyard worker --job-dir <dir>`, with stdin on
 * /dev/null, stdout a pipe to the server and stderr appended to
 * <dir>/worker.log (WPROTO_LOG_FILE).
 *
 * Where a worker runs (its environment):
 *   GPU job (resources.gpu not "none"), placed on inventory slot k:
 *     CUDA_VISIBLE_DEVICES = the slot's uuid ("MIG-..." or "GPU-...")
 *     TRAINYARD_DEVICE = "cuda:0" (nvml inventory: the only device the
 *       worker sees), "sim:<uuid>" (simulated inventory: the worker
 *       computes on the CPU), or "cpu" (nvml inventory on a server whose
 *       --train-device resolved to the CPU: the test suite on a GPU host)
 *   CPU job (resources.gpu "none"), at most --max-jobs at once:
 *     on a host without inventory slots, TRAINYARD_DEVICE = --train-device
 *     as before issue 5 ("cpu", "cuda:N"); on a host with slots, "cpu" and
 *     CUDA_VISIBLE_DEVICES="" (no GPU without a slot).
 *   OPENBLAS_NUM_THREADS=1 always (the engine runs its own thread pool).
 * TRAINYARD_DEVICE, as the worker reads it: "cpu" (or unset), "cuda",
 * "cuda:N" (N within CUDA_VISIBLE_DEVICES), or "sim:<uuid>": a simulated
 * GPU or MIG slice (tests, simulated inventories): the worker computes on
 * the CPU and its epoch records say "device": "sim:<uuid>", so tests see
 * where the job ran. <uuid> is 1 to 95 (WPROTO_SIM_UUID_MAX) of
 * [A-Za-z0-9._:/-]; anything else named "sim:" is an error.
 *
 * The worker prints one JSON object per line on stdout, each with
 * "event" (WPROTO_F_EVENT) naming its kind:
 *
 * 1. Before anything else on stdout, one line
 *      {"event":"started", "pid": <pid>, "cuda_visible_devices": <string or
 *       null>, "trainyard_device": <string or null>,
 *       "capabilities": ["heartbeat", "preempt"],
 *       "cpu_kernels": {"provider", "core", "isa", "cpu_isa", "gemm_gflops"}}
 *    with the environment it was given (null: unset) and the CPU GEMM
 *    kernels it runs (models/cpu/kernels.h) with their single-thread SGEMM
 *    rate, measured for 50 ms just before the line. The server stores it
 *    as placement.worker_saw. The worker's signal handlers are installed
 *    (and those signals unblocked) before this line, so the server may
 *    send SIGTERM or SIGUSR1 once it has read it; before, the default
 *    action of SIGUSR1 would kill it. Bad usage (exit 64) prints nothing
 *    on stdout.
 * 2. From then on, a thread of its own prints {"event":"heartbeat"} every
 *    TRAINYARD_HEARTBEAT_MS milliseconds (default 2000; 10 to 3600000,
 *    anything else is the default with a note on stderr) for the worker's
 *    whole life: while loading data, during a long step, while saving. The
 *    first comes one interval after "started". It is stopped and joined
 *    before the worker exits, so no heartbeat follows the last line. Lines
 *    never interleave. Any line counts as a heartbeat for the server: a
 *    worker silent for --heartbeat-timeout seconds is killed (SIGKILL) and
 *    handled as a crash.
 * 3. Then what training says:
 *      {"event":"progress", epoch, epochs, step, total_steps, fraction,
 *       loss, samples_per_sec, lr}
 *      {"event":"epoch", epoch, train_loss, train_accuracy, val_loss,
 *       val_accuracy, samples_per_sec, seconds, peak_memory_bytes, device,
 *       precision, loss_scale, skipped_steps, cuda_graph,
 *       device_memory_used_bytes (on a GPU), cuda_graph_reason; for
 *       regression also train_rmse, train_mae, train_r2, val_rmse,
 *       val_mae, val_r2, in the target's units, val_* null without a
 *       validation set}
 *      {"event":"resume", epoch, step}
 *    and at the end exactly one of
 *      {"event":"done"}                          exit 0: the model is written
 *      {"event":"error", "message"}              exit 2: training failed
 *                                                (not retried)
 *      (nothing)                                 exit 3: SIGTERM or SIGINT
 *                                                (cancel, shutdown)
 *      {"event":"preempted", "epoch", "step",
 *       "checkpoint": bool}                      exit 4: SIGUSR1
 * 4. Preemption (SIGUSR1): the run stops at the next optimizer-step
 *    boundary, writes the checkpoint of that position there (mid-epoch,
 *    exactly resumable: train_job.preempt), prints "preempted" with the
 *    position (completed epochs, optimizer steps taken) and exits 4. The
 *    next start of the job resumes from it ("resume" line) and ends with
 *    the same weights bit for bit as a run never stopped. "checkpoint" says
 *    whether a checkpoint is on disk for the job (false: it starts over).
 *    A preemption before training started (reading job.json, opening the
 *    data) exits 4 at once without writing one, "epoch" and "step" null:
 *    the job simply restarts (from the checkpoint an earlier run left, if
 *    any; "checkpoint" says). Finishing normally wins: once the last
 *    optimizer step is taken the run completes and the worker prints
 *    "done" and exits 0 even when SIGUSR1 came meanwhile (the model is
 *    never lost). SIGTERM wins over SIGUSR1 (exit 3).
 */
#ifndef TY_PROTOCOL_H
#define TY_PROTOCOL_H

#include <stdint.h>

#include <jansson.h>

#include "models/train/train.h"

/* ---- starting a worker ---- */

#define WPROTO_COMMAND "worker"        /* argv[1] of the worker */
#define WPROTO_ARG_JOB_DIR "--job-dir" /* then the job folder */
#define WPROTO_JOB_FILE "job.json"     /* in the job folder */
#define WPROTO_LOG_FILE "worker.log"   /* the worker's stderr */

/* job.json's keys. */
#define WPROTO_JOB_ID "job_id"
#define WPROTO_JOB_DATASET_PATH "dataset_path"
#define WPROTO_JOB_VALIDATION "validation" /* {dataset_path} or {split} */
#define WPROTO_JOB_SPLIT "split"
#define WPROTO_JOB_SPEC "spec"
#define WPROTO_JOB_HYPERPARAMETERS "hyperparameters"
#define WPROTO_JOB_CHECKPOINT_PATH "checkpoint_path"
#define WPROTO_JOB_MODEL_PATH "model_path"
#define WPROTO_JOB_THREADS "threads"
/* a data-parallel job's ranks (absent: 1); the worker joins them through
 * the MPI job mpirun started it in (models/train/comm.h) */
#define WPROTO_JOB_WORLD "world"
#define WPROTO_JOB_EXTRA_META "extra_meta"
/* hyperparameters.init_from's model file (local workers only) */
#define WPROTO_JOB_INIT_PATH "init_path"

/* The environment. */
#define WPROTO_ENV_DEVICE "TRAINYARD_DEVICE"
#define WPROTO_ENV_CUDA_VISIBLE "CUDA_VISIBLE_DEVICES"
#define WPROTO_ENV_BLAS_THREADS "OPENBLAS_NUM_THREADS"
#define WPROTO_ENV_HEARTBEAT_MS "TRAINYARD_HEARTBEAT_MS"
/* A gang of whole GPUs (resources.gpus): every rank's TRAINYARD_DEVICE and
 * CUDA_VISIBLE_DEVICES, comma-separated in rank order, in the environment
 * all its ranks share (mpirun gives them one); each worker takes its own
 * entry by its local rank (wproto_rank_env) before it opens a device. */
#define WPROTO_ENV_RANK_DEVICES "TRAINYARD_RANK_DEVICES"
#define WPROTO_ENV_RANK_CUDA_VISIBLE "TRAINYARD_RANK_CUDA_VISIBLE"
/* Where a rank learns its index on its node: Open MPI's mpirun, then
 * Slurm's srun. */
#define WPROTO_ENV_LOCAL_RANK_OMPI "OMPI_COMM_WORLD_LOCAL_RANK"
#define WPROTO_ENV_LOCAL_RANK_SLURM "SLURM_LOCALID"
/* TRAINYARD_DEVICE's values: "cpu", "cuda" or "cuda:N", "sim:<uuid>". */
#define WPROTO_DEVICE_CPU "cpu"
#define WPROTO_DEVICE_CUDA "cuda"
#define WPROTO_DEVICE_SIM_PREFIX "sim:"
#define WPROTO_SIM_UUID_MAX 95

#define WPROTO_HEARTBEAT_DEFAULT_MS 2000
#define WPROTO_HEARTBEAT_MIN_MS 10
#define WPROTO_HEARTBEAT_MAX_MS 3600000

/* ---- exit codes ---- */

#define WPROTO_EXIT_OK 0        /* "done": the model is written */
#define WPROTO_EXIT_FAILED 2    /* "error" says why; not retried */
#define WPROTO_EXIT_CANCELLED 3 /* SIGTERM or SIGINT */
#define WPROTO_EXIT_PREEMPTED 4 /* SIGUSR1: checkpointed ("preempted") */
#define WPROTO_EXIT_USAGE 64    /* bad usage; nothing on stdout */
#define WPROTO_EXIT_EXEC 127    /* the server's child could not exec */

/* ---- the lines ---- */

typedef enum {
    WPROTO_MSG_NONE = 0, /* not a message: unparsable, or no "event" */
    WPROTO_MSG_UNKNOWN,  /* an "event" this side does not know */
    WPROTO_MSG_STARTED,
    WPROTO_MSG_HEARTBEAT,
    WPROTO_MSG_PROGRESS,
    WPROTO_MSG_EPOCH,
    WPROTO_MSG_RESUME,
    WPROTO_MSG_DONE,
    WPROTO_MSG_ERROR,
    WPROTO_MSG_PREEMPTED,
    WPROTO_MSG_READY, /* a serving replica is listening (node/replica.h) */
    WPROTO_MSG_COUNT
} wproto_msg;

/* The fields, as the lines spell them. */
#define WPROTO_F_EVENT "event"
/* started */
#define WPROTO_F_PID "pid"
#define WPROTO_F_CUDA_VISIBLE_DEVICES "cuda_visible_devices"
#define WPROTO_F_TRAINYARD_DEVICE "trainyard_device"
#define WPROTO_F_CAPABILITIES "capabilities"
#define WPROTO_CAP_HEARTBEAT "heartbeat"
#define WPROTO_CAP_PREEMPT "preempt"
#define WPROTO_F_CPU_KERNELS "cpu_kernels"
/* progress, epoch, resume, preempted */
#define WPROTO_F_EPOCH "epoch"
#define WPROTO_F_EPOCHS "epochs"
#define WPROTO_F_STEP "step"
#define WPROTO_F_TOTAL_STEPS "total_steps"
#define WPROTO_F_FRACTION "fraction"
#define WPROTO_F_LOSS "loss"
#define WPROTO_F_SAMPLES_PER_SEC "samples_per_sec"
#define WPROTO_F_LR "lr"
#define WPROTO_F_TRAIN_LOSS "train_loss"
#define WPROTO_F_TRAIN_ACCURACY "train_accuracy"
#define WPROTO_F_VAL_LOSS "val_loss"
#define WPROTO_F_VAL_ACCURACY "val_accuracy"
/* regression epochs only (target units; val_* null without validation) */
#define WPROTO_F_TRAIN_RMSE "train_rmse"
#define WPROTO_F_TRAIN_MAE "train_mae"
#define WPROTO_F_TRAIN_R2 "train_r2"
#define WPROTO_F_VAL_RMSE "val_rmse"
#define WPROTO_F_VAL_MAE "val_mae"
#define WPROTO_F_VAL_R2 "val_r2"
/* Language models: the epoch's tokens per second and perplexities
 * (exp of the losses; val_perplexity null without validation); a
 * progress line measured at eval_every_steps has val_loss (and
 * val_perplexity for language models). */
#define WPROTO_F_TOKENS_PER_SEC "tokens_per_second"
#define WPROTO_F_TRAIN_PERPLEXITY "train_perplexity"
#define WPROTO_F_VAL_PERPLEXITY "val_perplexity"
#define WPROTO_F_SECONDS "seconds"
#define WPROTO_F_PEAK_MEMORY_BYTES "peak_memory_bytes"
#define WPROTO_F_DEVICE "device"
#define WPROTO_F_PRECISION "precision"
#define WPROTO_F_LOSS_SCALE "loss_scale"
#define WPROTO_F_SKIPPED_STEPS "skipped_steps"
#define WPROTO_F_CUDA_GRAPH "cuda_graph"
#define WPROTO_F_CUDA_GRAPH_REASON "cuda_graph_reason"
/* a data-parallel epoch's (train_epoch_metrics): its ranks, rank 0's
 * seconds in the all-reduces and their share of its steps' time */
#define WPROTO_F_WORLD_SIZE "world_size"
#define WPROTO_F_ALLREDUCE_SECONDS "allreduce_seconds"
#define WPROTO_F_ALLREDUCE_SHARE "allreduce_share"
/* ... and the optimizer state bytes rank 0 holds (ZeRO-1: its shard) */
#define WPROTO_F_OPTIMIZER_STATE_BYTES "optimizer_state_bytes"
#define WPROTO_F_COMM_BYTES "comm_bytes"
#define WPROTO_F_DEVICE_MEMORY_USED_BYTES "device_memory_used_bytes"
#define WPROTO_F_CHECKPOINT "checkpoint"
/* error */
#define WPROTO_F_MESSAGE "message"
/* ready (a serving replica's, node/replica.h: RPROTO_F_* there) */
#define WPROTO_F_SOCKET "socket"
#define WPROTO_F_FEATURES "features"
#define WPROTO_F_OUTPUTS "outputs"
#define WPROTO_F_LOAD_SECONDS "load_seconds"

/* Whether uuid (what follows "sim:") names a simulated device: 1 to
 * WPROTO_SIM_UUID_MAX of [A-Za-z0-9._:/-]. */
int wproto_sim_uuid_ok(const char *uuid);

/* Entry `index` (from 0) of list, a comma-separated list of a gang's
 * per-rank values (WPROTO_ENV_RANK_DEVICES), into out (n bytes). TY_OK;
 * TY_EINVAL with a sentence when the list has no such entry, the entry is
 * empty or it does not fit. Pure. */
ty_status wproto_rank_env(const char *list, int index, char *out, size_t n,
                          ty_err *err);

/* The name a message kind has on the wire ("started", ...); "" for NONE
 * and UNKNOWN. */
const char *wproto_msg_name(wproto_msg kind);

/* What the started line says of the worker's environment and CPU kernels
 * (strings borrowed; NULL environment values print as null). */
typedef struct {
    long pid;
    const char *cuda_visible_devices;
    const char *trainyard_device;
    const char *provider, *core, *isa, *cpu_isa; /* models/cpu/kernels.h */
    double gemm_gflops;
} wproto_started;

/* Encoders: each returns a new line object for the worker to print (one
 * line, compact), or NULL when out of memory. */
json_t *wproto_encode_started(const wproto_started *s);
json_t *wproto_encode_heartbeat(void);
json_t *wproto_encode_progress(const train_progress *p);
/* device_memory_used: what the GPU says is in use, or -1 (left out). */
json_t *wproto_encode_epoch(const train_epoch_metrics *m,
                            int64_t device_memory_used);
json_t *wproto_encode_resume(uint32_t epoch, uint64_t step);
/* positioned 0: preempted before training started (epoch, step null). */
json_t *wproto_encode_preempted(int positioned, uint32_t epoch, uint64_t step,
                                int checkpoint);
json_t *wproto_encode_done(void);
json_t *wproto_encode_error(const char *message);

/* What a serving replica's "ready" line says (node/replica.h; strings
 * borrowed): the socket it listens on, the model's input and output sizes
 * per example, the device label ("cpu", "cuda:N", "sim:<uuid>") and how
 * long loading took. */
typedef struct {
    const char *socket;
    uint64_t features;
    uint32_t outputs;
    const char *device;
    double load_seconds;
} wproto_ready;
json_t *wproto_encode_ready(const wproto_ready *r);

/* The kind of an already parsed line (msg borrowed; NULL or not an object
 * with an "event" string: WPROTO_MSG_NONE). */
wproto_msg wproto_kind(const json_t *msg);

/* Decodes one line (without its newline). Returns its kind; for anything
 * but WPROTO_MSG_NONE, *msg is the line's object (new reference, caller
 * decrefs) whose fields are read with the WPROTO_F_* names; for NONE,
 * *msg is NULL. */
wproto_msg wproto_decode(const char *line, json_t **msg);

#endif
