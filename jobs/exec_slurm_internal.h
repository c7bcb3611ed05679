/*
 * exec_slurm_internal.h - the Slurm executor's pure rules, for its unit
 * test (tests/unit/test_exec_slurm.c), in jobs/exec_slurm_rules.c. Not for
 * use outside jobs/exec_slurm*.c.
 */
#ifndef TY_EXEC_SLURM_INTERNAL_H
#define TY_EXEC_SLURM_INTERNAL_H

#include <stddef.h>

#include "cluster/slurmrest.h"
#include "jobs/executor.h"

/* The most bytes of a gang's per-rank device list (a node's ranks). */
#define EXEC_SLURM_RANK_DEVICES_MAX 1024

/* What trainyard had asked of a Slurm job when it ended. */
typedef struct {
    long slurm_id;
    int lost;         /* cancelled because it went silent */
    int want_preempt; /* told to checkpoint and stop */
    int want_cancel;  /* cancelled through the API */
} exec_slurm_asked;

/* What a terminal Slurm state means for the job: *ws the worker's wait
 * status (the protocol's exit codes: COMPLETED and FAILED carry the
 * script's, which is the worker's), the end (executor.h), and why (n
 * bytes) for a loss, a failure or an outside cancel:
 *   COMPLETED, FAILED       EXITED with the exit code or the signal
 *   CANCELLED               ours: EXITED 3 (cancel) or 4 (preempt: it had
 *                           its grace to checkpoint); silent: LOST; else
 *                           OUTSIDE (scancel by someone else)
 *   OUT_OF_MEMORY           FAILED (running it again would not help)
 *   NODE_FAIL, PREEMPTED, TIMEOUT, BOOT_FAIL, DEADLINE: LOST (requeued
 *                           to resume from its last upload) */
exec_end exec_slurm_end_of(const exec_slurm_asked *p,
                           const slurm_job_info *info, int *ws, char *why,
                           size_t n);

/* The batch script of job_id (n bytes into buf): `exec COMMAND worker
 * --server URL --job ID`, the settings between single quotes (the config
 * is checked to hold no quote or newline). A data-parallel gang (ranks >
 * 1) puts `srun --mpi=pmix --kill-on-bad-exit=1` before it: one shim a
 * node, each running its worker as its child, which inherits the PMIx
 * environment and joins the job in MPI_Init; rank 0's shim alone talks to
 * the server (node/wremote.c). --kill-on-bad-exit=1: a rank that fails
 * ends the whole step, so no rank is left waiting in a collective, and
 * the job ends as any failed job. */
void exec_slurm_script(const char *command, const char *server_url,
                       const char *job_id, int ranks, int ranks_per_node,
                       char *buf, size_t n);

/* The Slurm job's shape for a worker of `ranks` ranks into sub (nodes,
 * tasks_per_node) and its gres per node into gres (n bytes): one worker
 * (ranks 1): nodes 0 (Slurm's one) and the slot's gres (slot_gres:
 * "gpu:1", "gpu:<profile>:1", "" or NULL for a CPU job); a CPU gang
 * (ranks_per_node 0): `ranks` nodes of one task; a gang of whole GPUs over
 * nodes: ranks / ranks_per_node nodes of ranks_per_node tasks and
 * "gpu:<ranks_per_node>" (every rank sees its node's GPUs and takes
 * cuda:<its local rank>, exec_slurm_rank_devices). */
void exec_slurm_shape(int ranks, int ranks_per_node, const char *slot_gres,
                      slurm_submit *sub, char *gres, size_t n);

/* TRAINYARD_RANK_DEVICES's value for a gang of ranks_per_node GPUs a node
 * (n bytes into buf): "cuda:0,cuda:1,..." (a rank's local index among
 * the GPUs Slurm makes visible), or with stand-in GRES (sim not NULL:
 * ranks_per_node devices) those sim devices. 1; 0 (buf "") when it does
 * not fit or a device holds a comma. */
int exec_slurm_rank_devices(int ranks_per_node, const char *const *sim,
                            char *buf, size_t n);

#endif
