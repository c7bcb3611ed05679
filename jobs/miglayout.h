/*
 * miglayout.h - changing a GPU's MIG layout while the server runs
 * (POST /v1/admin/mig-layout).
 *
 * A simulated GPU (--devices sim:<file>) is drained, then re-cut:
 *   draining  its slots take no new job at once (the scheduler's
 *             SCHED_SLOT_DRAINING); the training jobs on them finish
 *             ("wait", the default) or are stopped ("preempt": the job
 *             checkpoints and goes back to the queue, as a preemption
 *             victim does); a serving replica there is moved by its
 *             deployment either way, make before break (a replacement on
 *             a slot in use, then the old one drains: deploy/replicas.c)
 *   recut     once none of its slots is held: the inventory's slots for
 *             the GPU are replaced (inv_gpu_recut: its indices reused,
 *             further slots appended, the rest retired, so no other
 *             GPU's slot changes index) and the scheduler takes the new
 *             list (sched_slots_replace); a queued training job whose
 *             request no slot satisfies any more fails, saying why
 *   done      the new layout is in GET /v1/devices and is written to
 *             <data>/mig-layout.json, which a restart applies to the same
 *             simulated inventory file before the scheduler is made
 *   failed    timeout_s passed while draining, or a queued serving
 *             replica would lose every slot it can run on: the GPU's slots
 *             are back in use, the layout unchanged, `error` says why
 * A real GPU (NVML) is never re-cut by the server: the reply says
 * "applied": false and lists the nvidia-smi commands to run
 * (mig_smi_commands); NVML's GPU-instance calls are not built. A
 * cluster's GRES (--executor slurm) are the cluster's: 409.
 */
#ifndef TY_JOBS_MIGLAYOUT_H
#define TY_JOBS_MIGLAYOUT_H

#include <jansson.h>

#include "common/ty.h"
#include "gpu/inventory.h"
#include "gpu/mig.h"

struct jobs_service;

#define JOBS_MIG_TIMEOUT_DEFAULT_S 600
#define JOBS_MIG_TIMEOUT_MAX_S 604800 /* a week */

typedef enum {
    JOBS_MIG_DRAIN_WAIT = 0, /* the running jobs finish */
    JOBS_MIG_DRAIN_PREEMPT,  /* they are stopped (training: checkpoint) */
} jobs_mig_drain;

/* A layout change as asked for. */
typedef struct {
    int gpu; /* index into the inventory's gpus */
    int mig; /* 1: MIG on with inst[0..n); 0: MIG off */
    int n;
    mig_placed inst[MIG_COMPUTE_SLICES];
    jobs_mig_drain drain;
    double timeout_s;
} jobs_mig_change;

/* Parses and checks the body of POST /v1/admin/mig-layout against inv:
 * {"gpu": 0, "mig": true, "instances": [{"profile": "3g.40gb", "start":
 * 4}, ...], "drain": "wait"|"preempt", "timeout_s": 600}. "gpu" is the
 * GPU's index as GET /v1/devices shows it. TY_ENOTFOUND (field "gpu") for
 * a GPU the inventory does not have; TY_EINVAL naming the field for
 * everything else: an unknown key, MIG asked of a model without MIG
 * profiles, a profile the model does not have, a start its profile may
 * not use, overlapping instances, more than 7 compute slices. Pure. */
ty_status jobs_mig_change_parse(const json_t *body, const inventory *inv,
                                jobs_mig_change *out, ty_err *err);

/* Starts change c (parsed against the service's inventory). *out (new
 * reference) is the change's document, *http_status 200 when it is done
 * at once (an idle GPU) or cannot be applied by the server (NVML:
 * "applied": false and the commands), 202 while it drains. TY_ENOTFOUND
 * without an inventory, TY_ECONFLICT while another change of the GPU
 * drains or on a cluster's inventory, TY_ENOMEM. */
ty_status jobs_mig_layout_apply(struct jobs_service *js,
                                const jobs_mig_change *c, json_t **out,
                                int *http_status, ty_err *err);

/* GET /v1/admin/mig-layout: {"gpus": [...]}, per GPU its layout now and
 * its latest change (null when none). New reference. */
json_t *jobs_mig_layout_list(struct jobs_service *js);

/* GET /v1/admin/mig-layout/{gpu}: the same for one GPU. TY_ENOTFOUND. */
ty_status jobs_mig_layout_get(struct jobs_service *js, int gpu, json_t **out,
                              ty_err *err);

/* ---- for the job service (jobs/service.c, jobs/lifecycle.c) ---- */

/* Applies <data>/mig-layout.json to a simulated inventory before the
 * scheduler is made (a missing file: nothing; one written for another
 * inventory file, or a layout that no longer parses: logged, skipped). */
void miglayout_load(struct jobs_service *js);

/* Marks in the new scheduler the slots a saved layout retired (after
 * miglayout_load and sched_create). TY_ENOMEM. */
ty_status miglayout_sched_init(struct jobs_service *js, ty_err *err);

/* Before each scheduling pass: moves draining changes on (timeout,
 * preemptions, the re-cut once the GPU is idle). mu held. */
void miglayout_tick(struct jobs_service *js);

/* Frees the change records. */
void miglayout_free(struct jobs_service *js);

#endif
