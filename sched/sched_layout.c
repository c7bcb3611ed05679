/*
 * sched_layout.c - a new slot list for a running scheduler
 * (sched_slots_replace: a GPU's MIG layout drained, then re-cut).
 *
 * The scheduler's books hang off the slot list (classes, best-fit order,
 * each job's class mask and lane), so a new list means new books: a fresh
 * scheduler is made over it, every tenant and job is carried over under
 * the same handle (queued ones to their lanes, running and stopping ones
 * onto their slots through the caller's map), and the two are swapped, so
 * the caller's pointer and handles stay valid and sched_check's invariants
 * hold as after any other call. A slot that is off (draining or retired)
 * is of a class of its own whose free count stays 0: no placement, no
 * preemption promise and no gang reservation can use it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/sched_internal.h"

int sched_slot_state(const sched *s, int slot)
{
    return slot >= 0 && slot < s->nslots ? s->slots[slot].off : 0;
}

/* Whether slot a (old) and slot b (new) are of the same kind. */
static int slot_same_kind(const slot_rec *a, const slot_rec *b)
{
    return a->compute_slices == b->compute_slices &&
           a->memory_bytes == b->memory_bytes && a->is_mig == b->is_mig &&
           strcmp(a->profile, b->profile) == 0;
}

/* Old job J (in use) into n at the same handle j, queued, with its mask
 * from n's slots: 1 done, 0 no slot satisfies its GPU request (not
 * added), -1 out of memory. */
static int carry_job(sched *n, int j, const job_rec *J, ty_err *err)
{
    uint64_t mask = sched_request_mask(n, &J->req);
    if (J->members > 1)
        mask &= n->whole;
    if (J->req.kind != SCHED_REQ_NONE && !mask)
        return 0;
    int lane = sched_lane_for(n, mask, J->members,
                              J->members > 1 && J->spread ? 1 : 0, err);
    if (lane < 0)
        return -1;
    tenant_rec *t = &n->tenants[J->tenant];
    if (sched_grow_lanes(n, J->serving ? &t->slanes : &t->lanes,
                         J->serving ? &t->nslanes : &t->nlanes, lane,
                         err) != TY_OK)
        return -1;
    job_rec *N = &n->jobs[j];
    *N = *J;
    N->gslots = NULL;
    if (J->members > 1 && mask) {
        N->gslots = calloc((size_t)J->members, sizeof *N->gslots);
        if (!N->gslots) {
            N->in_use = 0;
            ty_fail(err, TY_ENOMEM, NULL, "out of memory");
            return -1;
        }
    }
    N->lane = lane;
    N->mask = mask;
    N->min_slices = mask ? n->classes[sched_ctz64(mask)].compute_slices : 0;
    N->lprev = N->lnext = N->tprev = N->tnext = -1;
    sched_hash_insert(n, j);
    n->live++;
    sched_enqueue(n, j);
    return 1;
}

/* Old job J (RUNNING or STOPPING, carried queued as j) takes its slots in
 * n through map (old slot -> new). */
static void carry_running(sched *n, int j, const job_rec *J, const int *map)
{
    if (J->members > 1 && J->slot >= 0) {
        int *slots = n->gpick; /* scratch of n_slots: members <= n_slots */
        for (int m = 0; m < J->members; m++)
            slots[m] = map[J->gslots[m]];
        sched_run_gang(n, j, slots, J->start_time);
    } else if (J->members > 1) {
        sched_run_gang(n, j, NULL, J->start_time);
    } else {
        sched_run_on(n, j, J->slot >= 0 ? map[J->slot] : -1, J->start_time);
    }
    if (J->state == SCHED_JOB_STOPPING) {
        job_rec *N = &n->jobs[j];
        N->state = SCHED_JOB_STOPPING;
        n->tenants[N->tenant].slices_share -= sched_job_slices(n, N);
    }
}

ty_status sched_slots_replace(sched *s, const sched_slot *slots,
                              const uint8_t *states, size_t n_slots,
                              const int *remap, char (*dropped)[TY_ID_MAX],
                              size_t cap, size_t *ndropped, ty_err *err)
{
    if (ndropped)
        *ndropped = 0;
    sched *n = sched_create_states(&s->cfg, slots, states, n_slots, err);
    if (!n)
        return TY_EINVAL;
    ty_status st = TY_ENOMEM;
    int *map = calloc((size_t)s->nslots + 1, sizeof *map);
    if (!map)
        goto oom;
    for (int i = 0; i < s->nslots; i++) {
        int to = remap ? remap[i] : (i < n->nslots ? i : -1);
        map[i] = to >= 0 && to < n->nslots ? to : -1;
        int v = s->slots[i].holder;
        if (v < 0)
            continue;
        if (map[i] < 0 || n->slots[map[i]].off == 2 ||
            !slot_same_kind(&s->slots[i], &n->slots[map[i]])) {
            st =
                ty_fail(err, TY_ECONFLICT, "slots",
                        "slot %d is held by job %s and has no slot of its kind "
                        "in the new list",
                        i, s->jobs[v].id);
            goto fail;
        }
    }
    for (int t = 0; t < s->ntenants; t++) {
        const tenant_rec *o = &s->tenants[t];
        if (sched_tenant_set(n, o->id, o->weight, o->max_slices, o->max_jobs,
                             NULL, err) != TY_OK)
            goto fail;
        n->tenants[t].recent = o->recent;
        n->tenants[t].share = o->share;
    }
    while (n->job_cap < s->job_cap)
        if (sched_grow_jobs(n, err) != TY_OK)
            goto fail;
    size_t nd = 0;
    for (int j = 0; j < s->job_cap; j++) {
        const job_rec *J = &s->jobs[j];
        if (!J->in_use)
            continue;
        int r = carry_job(n, j, J, err);
        if (r < 0)
            goto fail;
        if (r == 0) {
            if (dropped && nd < cap)
                snprintf(dropped[nd], TY_ID_MAX, "%s", J->id);
            nd++;
            continue;
        }
        if (J->state == SCHED_JOB_RUNNING || J->state == SCHED_JOB_STOPPING)
            carry_running(n, j, J, map);
        else if (J->state == SCHED_JOB_QUEUED)
            n->jobs[j].head_since = J->head_since;
        /* PENDING: queued again; the job stopping for it stops for nobody */
    }
    /* the free list: the handles no job holds, lowest first */
    n->free_head = -1;
    for (int j = n->job_cap - 1; j >= 0; j--)
        if (!n->jobs[j].in_use) {
            memset(&n->jobs[j], 0, sizeof n->jobs[j]);
            n->jobs[j].hnext = n->free_head;
            n->free_head = j;
        }
    n->next_seq = s->next_seq;
    n->last_now = s->last_now;
    if (ndropped)
        *ndropped = nd;
    free(map);
    sched tmp = *s;
    *s = *n;
    *n = tmp;
    sched_destroy(n);
    return TY_OK;
oom:
    ty_fail(err, TY_ENOMEM, NULL, "out of memory replacing the slots");
fail:
    free(map);
    sched_destroy(n);
    return st;
}
