/*
 * exec_slurm_internal.h - the Slurm executor's pure rules, for its unit
 * test (tests/unit/test_exec_slurm.c). Not for use outside jobs/exec_slurm.c.
 */
#ifndef TY_EXEC_SLURM_INTERNAL_H
#define TY_EXEC_SLURM_INTERNAL_H

#include <stddef.h>

#include "cluster/slurmrest.h"
#include "jobs/executor.h"

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
                       const char *job_id, int ranks, char *buf, size_t n);

#endif
