/*
 * jobreq.h - what a job asks of the scheduler, as POST /v1/jobs spells it:
 *
 *   "resources": {"gpu": "none" | "any" | "whole" | "<MIG profile>" |
 *                 {"min_memory_gb": n, "min_compute_slices": k}}
 *                 "workers": n (jobs only: n CPU processes that train
 *                 the model together, data-parallel; 1..JOBREQ_WORKERS_MAX,
 *                 default 1; with resources.gpu "none" or absent)
 *                 "gpus": n (jobs only: n whole GPUs of one node that train
 *                 the model together, one process each, data-parallel;
 *                 1..JOBREQ_GPUS_MAX; not with "workers"; resources.gpu
 *                 beside it absent, "whole", "any" or a memory minimum,
 *                 never a MIG profile; normalized to a whole-GPU request,
 *                 *workers = n)
 *                 "nodes": m, "gpus_per_node": n (jobs only, both or
 *                 neither: m Slurm nodes of n whole GPUs each, a rank a
 *                 GPU, *workers = m * n; not with "gpus" or "workers";
 *                 whether the executor can run it is the service's)
 *                 "min_workers": m (elastic: 1..workers, default workers;
 *                 the job runs with as many workers as it can get, from m
 *                 to n, chosen at each start, as torchrun's
 *                 --nnodes=MIN:MAX)}
 *   "priority": integer (higher runs first within the tenant; default 0)
 *
 * "whole" asks for a whole GPU: any slot with all 7 compute slices
 * (SCHED_REQ_MIN with min_compute_slices 7: a GPU with MIG off, or a 7g
 * MIG device), and stays "whole" in the normalized copy.
 *
 * Parsing is pure: the default ("none" on a host without GPU slots, "any"
 * otherwise) is the caller's to give, and whether this host could ever
 * satisfy the request is the scheduler's (sched_request_check).
 */
#ifndef TY_JOBREQ_H
#define TY_JOBREQ_H

#include <jansson.h>

#include "common/ty.h"
#include "sched/sched.h"

#define JOBREQ_PRIORITY_MAX 1000000
#define JOBREQ_WORKERS_MAX 64
#define JOBREQ_GPUS_MAX 64   /* resources.gpus, resources.gpus_per_node */
#define JOBREQ_NODES_MAX 256 /* resources.nodes */
#define JOBREQ_GANG_MAX 1024 /* nodes * gpus_per_node */

/* Parses `resources` (NULL: absent) into *out, *workers (1 when absent;
 * NULL: "workers" is not a key here, as for a deployment) and a normalized
 * copy {"gpu": ...} (with "workers" when above 1) into *normalized (new
 * reference; may be NULL). host_has_gpus picks the default, except for a
 * gang of workers, which is always "none". TY_EINVAL naming the field
 * ("resources", "resources.gpu", "resources.gpu.min_memory_gb",
 * "resources.workers", "resources.gpus", ...). */
ty_status jobreq_parse(const json_t *resources, int host_has_gpus,
                       sched_request *out, int *workers, json_t **normalized,
                       ty_err *err);

/* Parses resources.min_workers (NULL or absent: workers, not elastic)
 * given the job's parsed workers, into *min_workers, and adds it to
 * normalized (jobreq_parse's copy; may be NULL) when given. TY_EINVAL
 * naming "resources.min_workers" when it is not a whole number from 1 to
 * workers, or when workers is 1; TY_ENOMEM. */
ty_status jobreq_min_workers(const json_t *resources, int workers,
                             int *min_workers, json_t *normalized, ty_err *err);

/* The world size of an elastic gang's next start: the largest W in
 * [min_workers, workers] within can_run (how many workers the executor can
 * run now; < 0: no bound), or 0 when can_run < min_workers (the job waits).
 * workers below 1 counts as 1, a min_workers outside [1, workers] as
 * workers (not elastic). Pure. */
int jobreq_world(int workers, int min_workers, int can_run);

/* Parses `priority` (NULL: 0): an integer within +-JOBREQ_PRIORITY_MAX.
 * TY_EINVAL naming "priority". */
ty_status jobreq_priority(const json_t *priority, int *out, ty_err *err);

#endif
