/*
 * sched_books.c - the scheduler's books: which slot is free, held or
 * promised (per slot and per class), each tenant's lanes and queue list,
 * and the tenant counters a job's every change of state moves (slices,
 * jobs, queued), with the fair-share split those counters feed.
 *
 * The one place that changes those books: the rest of the scheduler moves
 * a job through sched_enqueue, sched_lane_leave, sched_dequeue,
 * sched_release and sched_run_on so that the invariants sched_check
 * verifies (see sched_internal.h) hold after every call.
 */
#include "sched/sched_internal.h"

/* ---- slots ---- */

/* gblock's bit for class c: set when every free slot of c is held by a
 * gang reservation. */
static void gblock_update(sched *s, int c)
{
    if (s->ghold_free[c] > 0 && s->ghold_free[c] >= s->classes[c].nfree)
        s->gblock |= 1ull << c;
    else
        s->gblock &= ~(1ull << c);
}

void sched_class_count(sched *s, int c, int delta)
{
    s->classes[c].nfree += delta;
    if (s->classes[c].nfree > 0)
        s->avail |= 1ull << c;
    else
        s->avail &= ~(1ull << c);
    gblock_update(s, c);
}

/* Slot i became free (+1) or stopped being free (-1): its class, its
 * node and the gang holds follow. */
static void slot_count(sched *s, int i, int delta)
{
    const slot_rec *sl = &s->slots[i];
    if (sl->off)
        return; /* a draining or retired slot is never free */
    s->node_free[sl->node * SCHED_MAX_CLASSES + sl->cls] += delta;
    if (sched_slot_gheld(s, i, -1))
        s->ghold_free[sl->cls] += delta;
    sched_class_count(s, sl->cls, delta);
}

static void slot_take(sched *s, int i, int job)
{
    slot_rec *sl = &s->slots[i];
    if (sl->reserved_for == job)
        sl->reserved_for = -1;
    else if (sl->reserved_for < 0)
        slot_count(s, i, -1);
    sl->holder = job;
}

static void slot_release(sched *s, int i)
{
    slot_rec *sl = &s->slots[i];
    sl->holder = -1;
    if (sl->reserved_for < 0)
        slot_count(s, i, +1);
}

static void slot_unreserve(sched *s, int i)
{
    slot_rec *sl = &s->slots[i];
    sl->reserved_for = -1;
    if (sl->holder < 0)
        slot_count(s, i, +1);
}

void sched_node_hold(sched *s, int n, int g)
{
    s->node_holder[n] = g;
    s->nheld_nodes++;
    for (uint64_t m = s->jobs[g].mask; m; m &= m - 1) {
        int c = sched_ctz64(m);
        s->ghold_free[c] += s->node_free[n * SCHED_MAX_CLASSES + c];
        gblock_update(s, c);
    }
}

void sched_node_holds_clear(sched *s)
{
    for (int n = 0; n < s->nnodes; n++)
        s->node_holder[n] = -1;
    s->nheld_nodes = 0;
    for (int c = 0; c < s->nclasses; c++)
        s->ghold_free[c] = 0;
    s->gblock = 0;
}

/* ---- lanes and tenant lists ---- */

/* Job J's lane in tenant t: its training or its serving lanes. */
static lane_rec *lane_of(tenant_rec *t, const job_rec *J)
{
    return J->serving ? &t->slanes[J->lane] : &t->lanes[J->lane];
}

static void lane_insert(sched *s, tenant_rec *t, int j)
{
    job_rec *J = s->jobs;
    lane_rec *l = lane_of(t, &J[j]);
    int after = l->tail;
    if (l->head >= 0 && sched_job_before(&J[j], &J[l->head]))
        after = -1;
    else
        while (after >= 0 && sched_job_before(&J[j], &J[after]))
            after = J[after].lprev;
    int next = after >= 0 ? J[after].lnext : l->head;
    J[j].lprev = after;
    J[j].lnext = next;
    if (after >= 0)
        J[after].lnext = j;
    else
        l->head = j;
    if (next >= 0)
        J[next].lprev = j;
    else
        l->tail = j;
    l->count++;
}

static void lane_unlink(sched *s, tenant_rec *t, int j)
{
    job_rec *J = s->jobs;
    lane_rec *l = lane_of(t, &J[j]);
    if (J[j].lprev >= 0)
        J[J[j].lprev].lnext = J[j].lnext;
    else
        l->head = J[j].lnext;
    if (J[j].lnext >= 0)
        J[J[j].lnext].lprev = J[j].lprev;
    else
        l->tail = J[j].lprev;
    J[j].lprev = J[j].lnext = -1;
    l->count--;
}

static void tlist_insert(sched *s, tenant_rec *t, int j)
{
    job_rec *J = s->jobs;
    int after = t->ttail;
    if (t->thead >= 0 && sched_list_before(&J[j], &J[t->thead]))
        after = -1;
    else
        while (after >= 0 && sched_list_before(&J[j], &J[after]))
            after = J[after].tprev;
    int next = after >= 0 ? J[after].tnext : t->thead;
    J[j].tprev = after;
    J[j].tnext = next;
    if (after >= 0)
        J[after].tnext = j;
    else
        t->thead = j;
    if (next >= 0)
        J[next].tprev = j;
    else
        t->ttail = j;
}

static void tlist_unlink(sched *s, tenant_rec *t, int j)
{
    job_rec *J = s->jobs;
    if (J[j].tprev >= 0)
        J[J[j].tprev].tnext = J[j].tnext;
    else
        t->thead = J[j].tnext;
    if (J[j].tnext >= 0)
        J[J[j].tnext].tprev = J[j].tprev;
    else
        t->ttail = J[j].tprev;
    J[j].tprev = J[j].tnext = -1;
}

void sched_enqueue(sched *s, int j)
{
    job_rec *J = &s->jobs[j];
    tenant_rec *t = &s->tenants[J->tenant];
    J->state = SCHED_JOB_QUEUED;
    J->slot = -1;
    J->head_since = -1;
    J->preempted_for = -1;
    J->resv_node = -1;
    lane_insert(s, t, j);
    tlist_insert(s, t, j);
    if (J->serving) {
        t->queued_srv++;
        s->queued_srv++;
    } else {
        t->queued++;
        if (J->mask)
            t->queued_gpu++;
    }
    s->queued++;
}

void sched_lane_leave(sched *s, int j)
{
    job_rec *J = &s->jobs[j];
    tenant_rec *t = &s->tenants[J->tenant];
    lane_unlink(s, t, j);
    if (J->serving) {
        t->queued_srv--;
        s->queued_srv--;
    } else {
        t->queued--;
        if (J->mask)
            t->queued_gpu--;
    }
    if (t->head_job == j)
        t->head_job = -1;
}

/* Clears reservations (backfill holds) naming job j. */
void sched_drop_holds(sched *s, int j)
{
    job_rec *J = &s->jobs[j];
    if (s->cpu_holder == j)
        s->cpu_holder = -1;
    if (J->resv_node >= 0 && s->node_holder[J->resv_node] == j) {
        int n = J->resv_node;
        s->node_holder[n] = -1;
        s->nheld_nodes--;
        for (uint64_t m = J->mask; m; m &= m - 1) {
            int c = sched_ctz64(m);
            s->ghold_free[c] -= s->node_free[n * SCHED_MAX_CLASSES + c];
            gblock_update(s, c);
        }
    }
    if (!s->held)
        return;
    for (int c = 0; c < s->nclasses; c++)
        if (s->class_holder[c] == j) {
            s->class_holder[c] = -1;
            s->held &= ~(1ull << c);
        }
}

/* ---- tenant counters and shares ---- */

/* Fills each tenant's share of slices: weighted among tenants with GPU work
 * (queued GPU training jobs, or slices held for running or pending jobs of
 * either kind). */
void sched_compute_shares(sched *s)
{
    double w = 0;
    for (int t = 0; t < s->ntenants; t++) {
        const tenant_rec *n = &s->tenants[t];
        if (n->queued_gpu > 0 || n->slices_share > 0)
            w += n->weight;
    }
    for (int t = 0; t < s->ntenants; t++) {
        tenant_rec *n = &s->tenants[t];
        n->share = (w > 0 && (n->queued_gpu > 0 || n->slices_share > 0))
                       ? s->total_slices * n->weight / w
                       : 0;
    }
}

/* Takes job j (QUEUED or PENDING) out of the queue. */
void sched_dequeue(sched *s, int j)
{
    job_rec *J = &s->jobs[j];
    tenant_rec *t = &s->tenants[J->tenant];
    if (J->state == SCHED_JOB_QUEUED)
        sched_lane_leave(s, j);
    tlist_unlink(s, t, j);
    s->queued--;
    sched_drop_holds(s, j);
}

/* Job j leaves the slot or CPU it holds (RUNNING, STOPPING) or waits for
 * (PENDING); the tenant's counters follow. */
void sched_release(sched *s, int j)
{
    job_rec *J = &s->jobs[j];
    tenant_rec *t = &s->tenants[J->tenant];
    int cs = sched_job_slices(s, J);
    switch (J->state) {
        case SCHED_JOB_PENDING:
            slot_unreserve(s, J->slot);
            t->slices -= cs;
            t->slices_share -= cs;
            t->jobs--;
            if (J->serving) {
                t->serving--;
                s->serving--;
            }
            break;
        case SCHED_JOB_RUNNING:
        case SCHED_JOB_STOPPING:
            if (J->slot >= 0 && J->members > 1)
                for (int m = 0; m < J->members; m++)
                    slot_release(s, J->gslots[m]);
            else if (J->slot >= 0)
                slot_release(s, J->slot);
            else if (!J->serving)
                s->cpu_running -= J->members;
            t->slices -= cs;
            if (J->state == SCHED_JOB_RUNNING)
                t->slices_share -= cs;
            t->jobs--;
            if (J->serving) {
                t->serving--;
                s->serving--;
            }
            break;
        case SCHED_JOB_QUEUED: break;
    }
    J->slot = -1;
}

void sched_run_on(sched *s, int j, int slot, double now)
{
    job_rec *J = &s->jobs[j];
    tenant_rec *t = &s->tenants[J->tenant];
    sched_dequeue(s, j);
    int cs = slot >= 0 ? s->slots[slot].compute_slices : 0;
    if (J->state == SCHED_JOB_QUEUED) { /* PENDING counted these already */
        t->slices += cs;
        t->slices_share += cs;
        t->jobs++;
        if (J->serving) {
            t->serving++;
            s->serving++;
        }
    }
    if (slot >= 0)
        slot_take(s, slot, j);
    else if (!J->serving)
        s->cpu_running++;
    J->state = SCHED_JOB_RUNNING;
    J->slot = slot;
    J->start_time = now;
    J->head_since = -1;
    J->preempted_for = -1;
}

void sched_run_gang(sched *s, int j, const int *slots, double now)
{
    job_rec *J = &s->jobs[j];
    tenant_rec *t = &s->tenants[J->tenant];
    sched_dequeue(s, j);
    int cs = 0;
    if (slots) {
        for (int m = 0; m < J->members; m++) {
            J->gslots[m] = slots[m];
            cs += s->slots[slots[m]].compute_slices;
            slot_take(s, slots[m], j);
        }
    } else {
        s->cpu_running += J->members;
    }
    t->slices += cs;
    t->slices_share += cs;
    t->jobs++;
    J->state = SCHED_JOB_RUNNING;
    J->slot = slots ? slots[0] : -1;
    J->start_time = now;
    J->head_since = -1;
    J->preempted_for = -1;
    J->resv_node = -1;
}
