/*
 * exec_slurm_rules.c - the Slurm executor's pure rules
 * (jobs/exec_slurm_internal.h): what a Slurm job's end means for its
 * trainyard job, the batch script, and the shape of the Slurm job a worker
 * or a gang asks for (nodes, tasks a node, gres, each rank's device).
 * Nothing here does I/O or takes a lock; jobs/exec_slurm.c calls them and
 * tests/unit/test_exec_slurm.c checks them.
 */
#include "jobs/exec_slurm_internal.h"

#include <stdio.h>
#include <string.h>

#include "node/protocol.h"
#include "node/wremote.h"

exec_end exec_slurm_end_of(const exec_slurm_asked *p,
                           const slurm_job_info *info, int *ws, char *why,
                           size_t n)
{
    int code = info->exit_code >= 0 ? info->exit_code : 1;
    *ws = (code & 0xff) << 8;
    why[0] = '\0';
    switch (info->state) {
        case SLURM_ST_COMPLETED: return EXEC_END_EXITED;
        case SLURM_ST_FAILED:
            if (info->exit_signal > 0)
                *ws = info->exit_signal & 0x7f;
            return EXEC_END_EXITED;
        case SLURM_ST_CANCELLED:
            if (p->lost) {
                snprintf(why, n,
                         "the worker (Slurm job %ld) sent nothing for too "
                         "long and was cancelled",
                         p->slurm_id);
                return EXEC_END_LOST;
            }
            if (p->want_preempt) {
                *ws = WPROTO_EXIT_PREEMPTED << 8;
                return EXEC_END_EXITED;
            }
            if (p->want_cancel) {
                *ws = WPROTO_EXIT_CANCELLED << 8;
                return EXEC_END_EXITED;
            }
            snprintf(why, n,
                     "Slurm job %ld was cancelled outside trainyard (scancel "
                     "or a cluster admin)",
                     p->slurm_id);
            return EXEC_END_OUTSIDE;
        case SLURM_ST_OUT_OF_MEMORY:
            snprintf(why, n,
                     "Slurm killed job %ld: it ran out of memory on node %s",
                     p->slurm_id, info->node[0] ? info->node : "?");
            return EXEC_END_FAILED;
        default:
            /* NODE_FAIL, PREEMPTED, TIMEOUT, BOOT_FAIL, DEADLINE: not the
             * job's fault; it resumes from its last uploaded checkpoint. */
            snprintf(why, n, "Slurm ended job %ld with %s%s%s", p->slurm_id,
                     info->state_name, info->node[0] ? " on node " : "",
                     info->node);
            return EXEC_END_LOST;
    }
}

void exec_slurm_script(const char *command, const char *server_url,
                       const char *job_id, int ranks, int ranks_per_node,
                       char *buf, size_t n)
{
    char per[48];
    snprintf(per, sizeof per, ", %d ranks a node (one a GPU)", ranks_per_node);
    snprintf(buf, n,
             "#!/bin/sh\n"
             "# trainyard training job %s: the remote worker (it downloads "
             "its job from the server and reports back over HTTP)%s\n"
             "exec %s'%s' worker " WREMOTE_ARG_SERVER " '%s' " WREMOTE_ARG_JOB
             " '%s'\n",
             job_id,
             ranks <= 1           ? ""
             : ranks_per_node > 0 ? per
                                  : ", one rank a node",
             ranks > 1 ? "srun --mpi=pmix --kill-on-bad-exit=1 " : "", command,
             server_url, job_id);
}

void exec_slurm_shape(int ranks, int ranks_per_node, const char *slot_gres,
                      slurm_submit *sub, char *gres, size_t n)
{
    snprintf(gres, n, "%s", slot_gres ? slot_gres : "");
    sub->nodes = 0;
    sub->tasks_per_node = 1;
    if (ranks <= 1)
        return;
    if (ranks_per_node > 0) {
        sub->nodes = ranks / ranks_per_node;
        sub->tasks_per_node = ranks_per_node;
        snprintf(gres, n, "gpu:%d", ranks_per_node);
    } else {
        sub->nodes = ranks;
    }
}

int exec_slurm_rank_devices(int ranks_per_node, const char *const *sim,
                            char *buf, size_t n)
{
    size_t at = 0;
    if (n)
        buf[0] = '\0';
    for (int i = 0; i < ranks_per_node; i++) {
        int w = sim ? snprintf(buf + at, n - at, "%s%s", i ? "," : "", sim[i])
                    : snprintf(buf + at, n - at, "%s" WPROTO_DEVICE_CUDA ":%d",
                               i ? "," : "", i);
        if (w < 0 || (size_t)w >= n - at || (sim && strchr(sim[i], ','))) {
            if (n)
                buf[0] = '\0';
            return 0;
        }
        at += (size_t)w;
    }
    return 1;
}
