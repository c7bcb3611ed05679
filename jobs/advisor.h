/*
 * advisor.h - the MIG layout advisor: replays a recorded demand trace on
 * the real scheduler (sched/sched.h) over a candidate inventory layout,
 * and searches the valid MIG partitions (gpu/mig.h) for the layout that
 * would have queued the least.
 *
 * Pure: no I/O, no clock, no store. The job service feeds it the demand
 * recorded in the store (store/demand.c) and today's inventory; bench/
 * advisor feeds it a generated trace.
 *
 * The replay (adv_replay) is a discrete-event simulation of the server's
 * own scheduling: the layout's slots become sched_slots (a MIG instance
 * one slot of its profile, a GPU with MIG off one whole slot), a
 * scheduler is made with the server's sched_config, every record is
 * submitted (sched_job_submit) at its arrival, sched_pass runs at every
 * arrival and completion and, while anything is queued, at least every
 * ADV_TICK_S seconds (the waits backfill_wait and preempt_wait run out
 * between events), a placed job completes (sched_job_remove) after its
 * remaining duration, and a preempted job is requeued at once
 * (sched_job_requeue: its checkpoint is assumed free) and later runs only
 * what it had left. Tenants get weight 1 and no quotas (quotas change
 * over time and are not recorded).
 *
 * Figures, over the window [t0, t1] (the replay stops at t1):
 *   slices(r)   what a record asks for in compute slices, the same for
 *               every layout: a profile's compute slices ("3g.40gb": 3),
 *               a minimum's min_compute_slices (at least 1), "any" 1; a
 *               gang of N whole GPUs 7 x N.
 *   wait(r)     seconds r spent queued within [t0, t1]: from its arrival
 *               to its start, plus from each preemption to its restart;
 *               a record still queued at t1 counts to t1, one withdrawn
 *               while queued to its withdrawal.
 *   queued slice-hours   sum over records of wait(r) x slices(r) / 3600.
 *               A record no slot of the layout can ever satisfy
 *               (sched_job_check refuses it: the server would answer 422)
 *               counts the whole window, t1 - t0, as its wait (however
 *               late in the window it came: a layout that cannot serve a
 *               request at all is worse than any that makes it wait), and
 *               is also counted in `unservable` and
 *               unservable_slice_hours.
 *   utilization held slice-hours (compute slices of the slots jobs hold,
 *               over time, within the window) / available slice-hours
 *               (7 per GPU x the window).
 *   served      records that started within the window; mean and p95
 *               wait over the servable records.
 */
#ifndef TY_ADVISOR_H
#define TY_ADVISOR_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"
#include "gpu/mig.h"
#include "sched/sched.h"

#define ADV_TICK_S 60.0
/* GPUs a replay counts held slice-hours of one by one. */
#define ADV_MAX_GPUS 64
/* Layouts a model can have: maximal partitions of 8 memory slices. */
#define ADV_MAX_LAYOUTS 256

/* One recorded request. */
typedef struct {
    double arrival; /* seconds, any epoch (the window's) */
    int tenant;     /* >= 0; any numbering */
    sched_request request;
    double duration; /* seconds it holds its slot once started (> 0) */
    int serving;     /* 1: a serving replica; 0: training */
    int gang;        /* 0 or 1: one slot; N >= 2: N whole GPUs */
    /* > 0: the request was withdrawn then (cancelled, or a replica the
     * deployment no longer wanted) if it was still queued: it leaves the
     * queue, its wait ends there. 0: never. */
    double withdraw;
} adv_record;

/* One GPU's layout. */
typedef struct {
    const mig_model *model; /* NULL: a model without MIG (whole GPU only) */
    int mig;                /* 0: MIG off, one whole-GPU slot */
    int n;                  /* mig: the instances */
    mig_placed inst[MIG_COMPUTE_SLICES];
    /* MIG off: the GPU's memory; 0 takes the model's. */
    uint64_t memory_bytes;
} adv_layout;

typedef struct {
    double queued_slice_hours;
    double unservable_slice_hours; /* part of queued_slice_hours */
    size_t unservable;
    double held_slice_hours;
    double available_slice_hours;
    /* Held slice-hours per GPU (the first ADV_MAX_GPUS; a GPU's available
     * slice-hours are 7 x the window). */
    double gpu_held_slice_hours[ADV_MAX_GPUS];
    double utilization; /* held / available; 0 with no GPU */
    size_t records;
    size_t served;
    size_t preemptions;
    double mean_wait_s; /* over servable records */
    double p95_wait_s;
} adv_result;

/* slices(r) as defined above. */
int adv_record_slices(const adv_record *r);

/* Replays recs[0..n) (any order) on the layouts gpus[0..ngpus) with the
 * scheduler configuration cfg over [t0, t1] into *out. Records arriving
 * outside [t0, t1) are ignored. TY_EINVAL for t1 <= t0, a bad config or
 * layout (err says which); TY_ENOMEM. */
ty_status adv_replay(const sched_config *cfg, const adv_layout *gpus, int ngpus,
                     const adv_record *recs, size_t n, double t0, double t1,
                     adv_result *out, ty_err *err);

/* Every maximal valid MIG partition of model m (no instance can be added
 * and mig_layout_check still pass), instances in order of start, into
 * out[0..cap); returns how many there are (may exceed cap: only cap
 * written). MIG off is not one of them. */
int adv_enumerate(const mig_model *m, adv_layout *out, int cap);

/* The search: for each GPU whose model has MIG, the layout among the
 * model's maximal partitions (one per set of slices: where an instance
 * starts changes nothing the scheduler sees) and MIG off that minimises
 * the replayed
 * queued slice-hours of the whole inventory (ties: higher utilization,
 * then the current layout). First every GPU of a model is tried with each
 * candidate at once (a uniform start, kept when better than today's);
 * then coordinate descent: GPU by GPU, each candidate with the others
 * fixed, until a round changes nothing (at most 4 rounds). advised[] gets
 * the result (GPUs without MIG keep theirs); *cur and *best the figures.
 * Same errors as adv_replay. */
ty_status adv_search(const sched_config *cfg, const adv_layout *current,
                     int ngpus, const adv_record *recs, size_t n, double t0,
                     double t1, adv_layout *advised, adv_result *cur,
                     adv_result *best, ty_err *err);

/* Whether two layouts are the same partition (instance order aside). */
int adv_layout_equal(const adv_layout *a, const adv_layout *b);

#endif
