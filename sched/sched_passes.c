/*
 * sched_passes.c - sched_pass, the policy of sched.h step by step: pending
 * jobs onto the slots their victims left (0), serving jobs placed, or
 * preempting a training job, before any training job (1), overdue head
 * jobs and their reservations (2), the fair-share placement with best fit
 * and backfill (3), and the choice of preemption victims (4). The tenant
 * heap here orders tenants for the pass and for the report's simulated
 * order alike.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "sched/sched_internal.h"

/* ---- the pass ---- */

/* Heap of tenants by (key1, key2, tie), smallest first. */
int sched_tenant_less(const sched *s, int a, int b)
{
    const tenant_rec *x = &s->tenants[a], *y = &s->tenants[b];
    if (x->key1 != y->key1)
        return x->key1 < y->key1;
    if (x->key2 != y->key2)
        return x->key2 < y->key2;
    if (x->tie != y->tie)
        return x->tie < y->tie;
    return a < b;
}

void sched_heap_push(sched *s, int t)
{
    int i = s->nheap++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!sched_tenant_less(s, t, s->heap[p]))
            break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = t;
}

int sched_heap_pop(sched *s)
{
    int top = s->heap[0];
    int last = s->heap[--s->nheap];
    int i = 0, n = s->nheap;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && sched_tenant_less(s, s->heap[c + 1], s->heap[c]))
            c++;
        if (!sched_tenant_less(s, s->heap[c], last))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n > 0)
        s->heap[i] = last;
    return top;
}

/* Fair-share order: slices held over the recent past plus an eighth of
 * those held now, per unit of weight; then running jobs per weight, then
 * the older head. The history decides (it is what converges to the
 * weights); the small present term spreads the slots one pass hands out
 * and makes a fresh start (no history) follow the weights. */
void sched_tenant_key(sched *s, int t, int slices, int jobs, int head)
{
    tenant_rec *n = &s->tenants[t];
    n->key1 = (n->recent + slices / 8.0) / n->weight;
    n->key2 = jobs / n->weight;
    n->tie = head >= 0 ? s->jobs[head].seq : UINT64_MAX;
}

void sched_serving_key(sched *s, int t, int j)
{
    tenant_rec *n = &s->tenants[t];
    const job_rec *J = &s->jobs[j];
    n->key1 = -(double)J->priority;
    n->key2 = J->submit_time;
    n->tie = J->seq;
}

static void place(sched *s, int j, int slot, double now)
{
    sched_run_on(s, j, slot, now);
    s->placements[s->nplacements++] = (sched_placement){j, slot};
}

/* Gang j on slots[0..members) (ignored for a CPU gang): one placement. */
static void place_gang(sched *s, int j, const int *slots, double now)
{
    sched_run_gang(s, j, s->jobs[j].mask ? slots : NULL, now);
    s->gfail_mask = 0; /* its node's other free slots are no longer held */
    s->placements[s->nplacements++] = (sched_placement){j, s->jobs[j].slot};
}

/* Victim order, between the jobs on slots a and b: lowest priority, most
 * recent start, smaller slot, lower slot index. */
static int victim_before(const sched *s, int a, int b)
{
    const job_rec *x = &s->jobs[s->slots[a].holder],
                  *y = &s->jobs[s->slots[b].holder];
    if (x->priority != y->priority)
        return x->priority < y->priority;
    if (x->start_time != y->start_time)
        return x->start_time > y->start_time;
    int xs = s->slots[a].compute_slices, ys = s->slots[b].compute_slices;
    if (xs != ys)
        return xs < ys;
    return a < b;
}

/* Job h (QUEUED) becomes PENDING on `slot`, one of victim v's (RUNNING),
 * which becomes STOPPING, every member of a gang with it: the tenants'
 * counters move as if h held the slot. */
static void preempt(sched *s, int v, int h, int slot)
{
    job_rec *V = &s->jobs[v], *H = &s->jobs[h];
    int cs = s->slots[slot].compute_slices;
    tenant_rec *t = &s->tenants[H->tenant], *u = &s->tenants[V->tenant];
    V->state = SCHED_JOB_STOPPING;
    V->preempted_for = h;
    u->slices_share -= sched_job_slices(s, V);
    /* h leaves its lane but stays in its tenant's list */
    sched_lane_leave(s, h);
    sched_drop_holds(s, h);
    H->state = SCHED_JOB_PENDING;
    H->slot = slot;
    H->head_since = -1;
    t->slices += cs;
    t->slices_share += cs;
    t->jobs++;
    if (H->serving) {
        t->serving++;
        s->serving++;
    }
    s->slots[slot].reserved_for = h;
    s->preemptions[s->npreemptions++] = (sched_preemption){v, h, slot};
}

/* ---- step 1: serving jobs ---- */

/* Class c's best victim for a serving job into class_victim[c] and
 * victim_avail: a RUNNING training job on a slot of class c, not placed by
 * this very pass (step 0): no job is both started and stopped in one
 * result. */
static void class_victim_find(sched *s, int c)
{
    const class_rec *k = &s->classes[c];
    int best = -1;
    for (int i = 0; i < k->nslots && !k->off; i++) {
        int v = s->slots[k->slots[i]].holder;
        if (v < 0 || s->jobs[v].state != SCHED_JOB_RUNNING ||
            s->jobs[v].serving || s->jobs[v].start_time >= s->now)
            continue;
        if (best < 0 || victim_before(s, k->slots[i], best))
            best = k->slots[i];
    }
    s->class_victim[c] = best;
    if (best >= 0)
        s->victim_avail |= 1ull << c;
    else
        s->victim_avail &= ~(1ull << c);
}

/* Tenant n's best QUEUED serving job that could act now, or -1: a CPU job,
 * or one with a class in `usable` (its free, or victim-holding, slots
 * within the tenant's slice quota). */
static int serving_best(const sched *s, const tenant_rec *n, uint64_t usable)
{
    int best = -1;
    for (int l = 0; l < n->nslanes; l++) {
        int h = n->slanes[l].head;
        if (h < 0 || (l != 0 && !(s->masks[l] & usable)))
            continue;
        if (best < 0 || sched_job_before(&s->jobs[h], &s->jobs[best]))
            best = h;
    }
    return best;
}

/* What tenant n's serving jobs could use now: free classes within its slice
 * quota, and with serving_preempt those with a victim. */
static uint64_t serving_usable(const sched *s, const tenant_rec *n)
{
    if (sched_jobs_quota_full(n) || sched_serving_full(s, n))
        return 0;
    return sched_fit_mask(s, n) & (s->avail | s->victim_avail);
}

/* Puts tenant t back in the heap keyed by its best serving job that could
 * act now, if it has one. */
static void serving_push(sched *s, int t)
{
    tenant_rec *n = &s->tenants[t];
    if (n->queued_srv == 0 || sched_jobs_quota_full(n) ||
        sched_serving_full(s, n))
        return;
    int h = serving_best(s, n, serving_usable(s, n));
    if (h < 0)
        return;
    sched_serving_key(s, t, h);
    sched_heap_push(s, t);
}

/* Serving jobs, best first across tenants: each on its best-fit free slot,
 * or (serving_preempt) on the slot of the best victim among the classes
 * that satisfy it. What a job could use only shrinks during the pass
 * (slots taken, victims used, quotas filled), so a tenant's key in the
 * heap is never worse than its true best: one popped with an up-to-date
 * key holds the best job of all; one whose key went stale is re-keyed. */
static void pass_serving(sched *s, double now)
{
    s->victim_avail = 0;
    if (s->queued_srv == 0)
        return;
    if (s->cfg.serving_preempt)
        for (int c = 0; c < s->nclasses; c++)
            class_victim_find(s, c);
    s->nheap = 0;
    for (int t = 0; t < s->ntenants; t++)
        serving_push(s, t);
    while (s->nheap > 0) {
        int t = sched_heap_pop(s);
        tenant_rec *n = &s->tenants[t];
        if (sched_jobs_quota_full(n) || sched_serving_full(s, n))
            continue;
        uint64_t usable = serving_usable(s, n);
        int h = serving_best(s, n, usable);
        if (h < 0)
            continue;
        const job_rec *H = &s->jobs[h];
        if (H->seq != n->tie) { /* stale: its key job can no longer act */
            sched_serving_key(s, t, h);
            sched_heap_push(s, t);
            continue;
        }
        uint64_t fit = H->mask & usable;
        if (!H->mask) {
            place(s, h, -1, now);
        } else if (fit & s->avail) {
            place(s, h, sched_class_first_free(s, sched_ctz64(fit & s->avail)),
                  now);
        } else {
            int c = -1;
            for (uint64_t m = fit; m; m &= m - 1) {
                int k = sched_ctz64(m);
                if (c < 0 ||
                    victim_before(s, s->class_victim[k], s->class_victim[c]))
                    c = k;
            }
            int slot = s->class_victim[c], v = s->slots[slot].holder;
            preempt(s, v, h, slot);
            if (s->jobs[v].members > 1) /* a gang: its other classes too */
                for (int k = 0; k < s->nclasses; k++)
                    class_victim_find(s, k);
            else
                class_victim_find(s, c);
        }
        serving_push(s, t);
    }
}

/* Orders reservers: longest wait at the head first, then job order. */
static int reserver_before(const sched *s, int a, int b)
{
    const job_rec *x = &s->jobs[a], *y = &s->jobs[b];
    if (x->head_since != y->head_since)
        return x->head_since < y->head_since;
    return sched_job_before(x, y);
}

/* Whether gang j might fit now: its size against this pass's free whole
 * GPUs (a bound: placements only shrink them), then the search itself,
 * which leaves its members in out. */
static int gang_fits(sched *s, int j, uint64_t usable, int *out)
{
    const job_rec *J = &s->jobs[j];
    if (J->members > (J->spread ? s->gang_total : s->gang_room))
        return 0;
    /* a one-node gang that holds no node of its own sees what every such
     * gang sees: if k members of classes `usable` did not fit, k or more
     * will not either until something frees (nothing does within a pass
     * but a placed gang's reservation: place_gang forgets the failure) */
    usable &= J->mask;
    int plain =
        !J->spread && !(J->resv_node >= 0 && s->node_holder[J->resv_node] == j);
    if (plain && usable == s->gfail_mask && J->members >= s->gfail_k)
        return 0;
    int found = sched_gang_find(s, j, usable, out);
    if (!found && plain) {
        if (usable != s->gfail_mask || J->members < s->gfail_k)
            s->gfail_k = J->members;
        s->gfail_mask = usable;
    }
    return found;
}

/* Overdue gang h: placed if all its members fit now; else its node's free
 * slots of its classes (kept from pass to pass while it stays overdue at
 * the head, so what frees there is kept for it) are held from every later
 * training job, or, spreading, its classes are, as a single job's. */
static void reserve_gang(sched *s, int h, double now)
{
    job_rec *H = &s->jobs[h];
    tenant_rec *n = &s->tenants[H->tenant];
    uint64_t usable = H->mask & sched_fit_mask_n(s, n, H->members) & ~s->held;
    if (!usable)
        return;
    if (gang_fits(s, h, usable, s->gpick)) {
        place_gang(s, h, s->gpick, now);
        return;
    }
    if (H->spread) {
        for (uint64_t m = usable; m; m &= m - 1)
            s->class_holder[sched_ctz64(m)] = h;
        s->held |= usable;
        return;
    }
    int node = sched_gang_pick_node(s, h, usable);
    if (node < 0)
        return;
    H->resv_node = node;
    sched_node_hold(s, node, h);
}

/* Tenant n's best QUEUED CPU training job if it is a CPU gang, or -1. */
static int cpu_gang_head(const sched *s, const tenant_rec *n)
{
    int best = -1;
    for (int l = 0; l < n->nlanes; l++) {
        int h = n->lanes[l].head;
        if (h >= 0 && !s->masks[l] &&
            (best < 0 || sched_job_before(&s->jobs[h], &s->jobs[best])))
            best = h;
    }
    return best >= 0 && s->jobs[best].members > 1 ? best : -1;
}

/* The oldest CPU gang that heads its tenant's CPU jobs and has been queued
 * backfill_wait seconds starts if its places are free; else every CPU
 * place that frees is kept for it (cpu_holder): CPU singles cannot keep a
 * CPU gang waiting for ever. */
static void reserve_cpu(sched *s, double now)
{
    s->cpu_holder = -1;
    if (s->cfg.max_cpu_jobs < 0)
        return;
    int best = -1;
    for (int t = 0; t < s->ntenants; t++) {
        const tenant_rec *n = &s->tenants[t];
        if (n->queued == n->queued_gpu || sched_jobs_quota_full(n))
            continue;
        int h = cpu_gang_head(s, n);
        if (h < 0 || now - s->jobs[h].submit_time < s->cfg.backfill_wait)
            continue;
        const job_rec *H = &s->jobs[h], *B = best >= 0 ? &s->jobs[best] : 0;
        if (!B || H->submit_time < B->submit_time ||
            (H->submit_time == B->submit_time && H->seq < B->seq))
            best = h;
    }
    if (best < 0)
        return;
    if (s->cfg.max_cpu_jobs - s->cpu_running >= s->jobs[best].members)
        place_gang(s, best, NULL, now);
    else
        s->cpu_holder = best;
}

static void pass_reservations(sched *s, double now)
{
    int nres = 0;
    reserve_cpu(s, now);
    for (int t = 0; t < s->ntenants; t++) {
        tenant_rec *n = &s->tenants[t];
        if (n->queued_gpu == 0) {
            n->head_job = -1;
            continue;
        }
        /* the head among GPU jobs: CPU jobs never wait for slots */
        int h = sched_tenant_best(s, n, 1);
        job_rec *H = &s->jobs[h];
        if (h != n->head_job) {
            n->head_job = h;
            H->head_since = now;
        }
        /* waiting on its own quota is not waiting for capacity */
        if (sched_jobs_quota_full(n) ||
            !(H->mask & sched_fit_mask_n(s, n, H->members))) {
            H->head_since = now;
            continue;
        }
        if (now - H->head_since >= s->cfg.backfill_wait) {
            int i = nres++;
            while (i > 0 && reserver_before(s, h, s->order[i - 1])) {
                s->order[i] = s->order[i - 1];
                i--;
            }
            s->order[i] = h;
        }
    }
    for (int i = 0; i < nres; i++) {
        int h = s->order[i];
        job_rec *H = &s->jobs[h];
        tenant_rec *n = &s->tenants[H->tenant];
        if (sched_jobs_quota_full(n))
            continue;
        if (H->members > 1) {
            reserve_gang(s, h, now);
            continue;
        }
        uint64_t usable = H->mask & sched_fit_mask(s, n) & ~s->held;
        uint64_t free_now = usable & s->avail & ~s->gblock;
        if (free_now) {
            place(s, h, sched_class_first_free_for(s, sched_ctz64(free_now), h),
                  now);
        } else if (usable) {
            for (uint64_t m = usable; m; m &= m - 1)
                s->class_holder[sched_ctz64(m)] = h;
            s->held |= usable;
        }
    }
}

static void pass_fair_share(sched *s, double now)
{
    int cpu_free = s->cfg.max_cpu_jobs < 0 ? INT_MAX
                   : s->cpu_holder >= 0    ? 0 /* kept for a CPU gang */
                                        : s->cfg.max_cpu_jobs - s->cpu_running;
    s->nheap = 0;
    for (int t = 0; t < s->ntenants; t++) {
        tenant_rec *n = &s->tenants[t];
        if (n->queued == 0)
            continue;
        sched_tenant_key(s, t, n->slices_share, n->jobs,
                         sched_tenant_best(s, n, 0));
        sched_heap_push(s, t);
    }
    while (s->nheap > 0 &&
           ((s->avail & ~s->held & ~s->gblock) || cpu_free > 0)) {
        int t = sched_heap_pop(s);
        tenant_rec *n = &s->tenants[t];
        if (sched_jobs_quota_full(n))
            continue;
        uint64_t open = s->avail & ~s->held;
        uint64_t fit = sched_fit_mask(s, n) & open & ~s->gblock;
        int best = -1;
        for (int l = 0; l < n->nlanes; l++) {
            int h = n->lanes[l].head, k = s->lane_members[l];
            if (h < 0 || k > 1 ||
                (s->masks[l] ? !(s->masks[l] & fit) : cpu_free <= 0))
                continue;
            if (best < 0 || sched_job_before(&s->jobs[h], &s->jobs[best]))
                best = h;
        }
        /* gangs only where they come first, and only if all members fit */
        int gang = 0;
        for (int l = 1; l < n->nlanes; l++) {
            int h = n->lanes[l].head, k = s->lane_members[l];
            if (h < 0 || k < 2 ||
                (best >= 0 && !sched_job_before(&s->jobs[h], &s->jobs[best])))
                continue;
            if (!s->masks[l]
                    ? cpu_free < k
                    : !gang_fits(s, h,
                                 s->masks[l] & open & sched_fit_mask_n(s, n, k),
                                 s->gtry))
                continue;
            best = h;
            gang = 1;
            for (int m = 0; s->masks[l] && m < k; m++)
                s->gpick[m] = s->gtry[m];
        }
        if (best < 0)
            continue;
        if (gang) {
            if (!s->jobs[best].mask)
                cpu_free -= s->jobs[best].members;
            place_gang(s, best, s->gpick, now);
        } else {
            int slot = -1;
            if (s->jobs[best].mask)
                slot = sched_class_first_free_for(
                    s, sched_ctz64(s->jobs[best].mask & fit), best);
            else
                cpu_free--;
            place(s, best, slot, now);
        }
        if (n->queued > 0) {
            sched_tenant_key(s, t, n->slices_share, n->jobs,
                             sched_tenant_best(s, n, 0));
            sched_heap_push(s, t);
        }
    }
}

/* Whether the job on slot i (RUNNING) may be stopped for job h, which
 * then takes slot i. */
static int victim_ok(const sched *s, int i, int h, uint64_t allowed)
{
    const job_rec *V = &s->jobs[s->slots[i].holder], *H = &s->jobs[h];
    if (V->tenant == H->tenant)
        return 0;
    const slot_rec *sl = &s->slots[i];
    if (!(allowed & (1ull << sl->cls)))
        return 0;
    const tenant_rec *t = &s->tenants[H->tenant], *u = &s->tenants[V->tenant];
    int cs = sl->compute_slices;
    if (V->start_time >= s->now)
        return 0; /* placed by this very pass */
    if (t->max_slices >= 0 && t->slices + cs > t->max_slices)
        return 0;
    if (t->slices_share + cs > t->share + SCHED_EPS)
        return 0;
    /* a gang stops whole: its tenant stays at its share without all of it */
    return u->slices_share - sched_job_slices(s, V) >= u->share - SCHED_EPS;
}

static void pass_preemption(sched *s, double now)
{
    /* victims: RUNNING training jobs whose tenant is above its share and
     * stays at or above it without the whole job (victim_ok checks again
     * as the pass moves the counters; these only grow stricter) */
    int nv = 0;
    uint64_t vclasses = 0;
    for (int i = 0; i < s->nslots; i++) {
        int v = s->slots[i].holder;
        if (v < 0 || s->jobs[v].state != SCHED_JOB_RUNNING ||
            s->jobs[v].serving || s->jobs[v].start_time >= now ||
            sched_slot_gheld(s, i, -1))
            continue; /* a gang's reservation keeps what frees there */
        const tenant_rec *u = &s->tenants[s->jobs[v].tenant];
        if (u->slices_share - sched_job_slices(s, &s->jobs[v]) >=
            u->share - SCHED_EPS) {
            s->victims[nv++] = i;
            vclasses |= 1ull << s->slots[i].cls;
        }
    }
    if (nv == 0)
        return;
    /* beneficiaries: tenants below their share, furthest below first (a
     * heap: there may be a thousand, and most find no victim) */
    s->nheap = 0;
    for (int t = 0; t < s->ntenants; t++) {
        tenant_rec *n = &s->tenants[t];
        if (!sched_may_claim_share(n))
            continue;
        n->key1 = n->slices_share / n->weight;
        n->key2 = 0;
        n->tie = 0;
        sched_heap_push(s, t);
    }
    while (s->nheap > 0 && nv > 0) {
        tenant_rec *n = &s->tenants[sched_heap_pop(s)];
        int h = sched_tenant_best(s, n, 1);
        if (h < 0 || s->jobs[h].members > 1)
            continue; /* a gang waits for its reservation, never preempts */
        job_rec *H = &s->jobs[h];
        if (now - H->submit_time < s->cfg.preempt_wait)
            continue;
        uint64_t allowed = H->mask & sched_fit_mask(s, n) & ~s->off;
        for (uint64_t m = allowed & s->held; m; m &= m - 1)
            if (s->class_holder[sched_ctz64(m)] != h)
                allowed &= ~(1ull << sched_ctz64(m));
        if (!(allowed & vclasses) || (allowed & s->avail))
            continue;
        int best = -1;
        for (int i = 0; i < nv; i++)
            if (victim_ok(s, s->victims[i], h, allowed) &&
                (best < 0 || victim_before(s, s->victims[i], s->victims[best])))
                best = i;
        if (best < 0)
            continue;
        int slot = s->victims[best], v = s->slots[slot].holder;
        for (int i = nv - 1; i >= 0; i--) /* all of a gang's slots */
            if (s->slots[s->victims[i]].holder == v)
                s->victims[i] = s->victims[--nv];
        preempt(s, v, h, slot);
    }
}

void sched_pass(sched *s, double now, sched_result *out)
{
    s->nplacements = 0;
    s->npreemptions = 0;
    s->held = 0;
    for (int c = 0; c < s->nclasses; c++)
        s->class_holder[c] = -1;
    sched_node_holds_clear(s);
    s->gfail_mask = 0;

    /* 0: pending jobs whose slot the preempted job has left */
    for (int i = 0; i < s->nslots; i++) {
        const slot_rec *sl = &s->slots[i];
        if (sl->holder < 0 && sl->reserved_for >= 0)
            place(s, sl->reserved_for, i, now);
    }
    /* the recent average of each tenant's slices: an exponential moving
     * average with time constant fair_window, fed with what it held since
     * the last pass; it lets a tenant that integer slot counts keep just
     * under its share catch up over time */
    double dt = isnan(s->last_now) ? 0 : now - s->last_now;
    if (dt < 0)
        dt = 0;
    double keep = s->cfg.fair_window > 0 ? exp(-dt / s->cfg.fair_window) : 0;
    for (int t = 0; t < s->ntenants; t++) {
        tenant_rec *n = &s->tenants[t];
        n->recent = n->recent * keep + n->slices_share * (1 - keep);
    }
    s->last_now = now;
    s->now = now;
    sched_gang_room(s);
    sched_compute_shares(s);
    pass_serving(s, now);
    pass_reservations(s, now);
    pass_fair_share(s, now);
    if (s->cfg.preempt)
        pass_preemption(s, now);

    out->placements = s->placements;
    out->n_placements = s->nplacements;
    out->preemptions = s->preemptions;
    out->n_preemptions = s->npreemptions;
}
