/*
 * sched_gang.c - where a gang fits: the free whole GPUs of each node, the
 * best-fit node (and interconnect domain) for a gang's members, the node
 * its reservation holds, and how large a gang the inventory could ever
 * take. Reads the books (sched_internal.h) and changes nothing: the pass
 * (sched_passes.c) places and holds through sched_books.c.
 *
 * A gang is placed all at once or not at all, so every question here is
 * "are there `members` free slots of these classes, on one node unless it
 * spreads", answered from the per-node free counts the books keep
 * (node_free): O(nodes x classes) per question, O(slots of one node) to
 * pick the members.
 */
#include "sched/sched_internal.h"

/* Slots of classes `mask` on node n, free or not. */
static int node_capacity(const sched *s, int n, uint64_t mask)
{
    int k = 0;
    for (int i = s->node_first[n]; i < s->node_first[n + 1]; i++)
        k += (mask >> s->slots[s->node_slots[i]].cls) & 1;
    return k;
}

int sched_gang_node_free(const sched *s, int n, uint64_t usable, int j)
{
    int g = s->node_holder[n];
    if (g >= 0 && g != j)
        return 0;
    const int *nf = &s->node_free[n * SCHED_MAX_CLASSES];
    int k = 0;
    for (uint64_t m = usable; m; m &= m - 1)
        k += nf[sched_ctz64(m)];
    return k;
}

static int slot_usable(const sched *s, int i, uint64_t usable)
{
    const slot_rec *sl = &s->slots[i];
    return sl->holder < 0 && sl->reserved_for < 0 && !sl->off &&
           ((usable >> sl->cls) & 1);
}

/* The non-zero domain of node n with at least k free usable slots and the
 * fewest of them (best fit), or 0 when none holds k. */
static int node_domain(const sched *s, int n, uint64_t usable, int k)
{
    int best = 0, best_free = 0;
    for (int a = s->node_first[n]; a < s->node_first[n + 1]; a++) {
        int i = s->node_slots[a], d = s->slots[i].domain;
        if (d == 0 || !slot_usable(s, i, usable))
            continue;
        int f = 0, seen = 0;
        for (int b = s->node_first[n]; b < s->node_first[n + 1]; b++) {
            int i2 = s->node_slots[b];
            if (s->slots[i2].domain != d || !slot_usable(s, i2, usable))
                continue;
            if (b < a) {
                seen = 1; /* counted from its first slot already */
                break;
            }
            f++;
        }
        if (!seen && f >= k && (best == 0 || f < best_free)) {
            best = d;
            best_free = f;
        }
    }
    return best;
}

/* Up to k free usable slots of node n (of domain d when d != 0) into
 * out; returns how many. */
static int node_take(const sched *s, int n, uint64_t usable, int d, int k,
                     int *out)
{
    int got = 0;
    for (int a = s->node_first[n]; a < s->node_first[n + 1] && got < k; a++) {
        int i = s->node_slots[a];
        if (slot_usable(s, i, usable) && (d == 0 || s->slots[i].domain == d))
            out[got++] = i;
    }
    return got;
}

int sched_gang_find(const sched *s, int j, uint64_t usable, int *out)
{
    const job_rec *J = &s->jobs[j];
    int k = J->members;
    usable &= J->mask;
    int best = -1, best_free = 0, best_dom = 0, total = 0;
    for (int n = 0; n < s->nnodes; n++) {
        int f = sched_gang_node_free(s, n, usable, j);
        total += f;
        if (f < k)
            continue;
        int d = s->domains ? node_domain(s, n, usable, k) : 0;
        /* one domain first, then the fewest free (best fit) */
        if (best < 0 || (d && !best_dom) ||
            ((d != 0) == (best_dom != 0) && f < best_free)) {
            best = n;
            best_free = f;
            best_dom = d;
        }
    }
    if (best >= 0)
        return node_take(s, best, usable, best_dom, k, out) == k;
    if (!J->spread || total < k)
        return 0;
    /* spread: the nodes with the most free first, so it spans few */
    int got = 0;
    while (got < k) {
        int pick = -1, pick_free = 0;
        for (int n = 0; n < s->nnodes; n++) {
            int f = sched_gang_node_free(s, n, usable, j);
            for (int m = 0; m < got && f > 0; m++)
                f -= s->slots[out[m]].node == n;
            if (f > pick_free) {
                pick = n;
                pick_free = f;
            }
        }
        if (pick < 0)
            return 0;
        /* node_take would return slots already taken: skip them */
        for (int a = s->node_first[pick];
             a < s->node_first[pick + 1] && got < k; a++) {
            int i = s->node_slots[a], dup = 0;
            if (!slot_usable(s, i, usable))
                continue;
            for (int m = 0; m < got; m++)
                dup |= out[m] == i;
            if (!dup)
                out[got++] = i;
        }
    }
    return 1;
}

/* Slots of classes `mask` on node n that a gang could get in time: all
 * but those serving replicas hold or are promised (they live on). */
static int node_reachable(const sched *s, int n, uint64_t mask)
{
    int k = 0;
    for (int a = s->node_first[n]; a < s->node_first[n + 1]; a++) {
        const slot_rec *sl = &s->slots[s->node_slots[a]];
        if (!((mask >> sl->cls) & 1) ||
            (sl->holder >= 0 && s->jobs[sl->holder].serving) ||
            (sl->reserved_for >= 0 && s->jobs[sl->reserved_for].serving))
            continue;
        k++;
    }
    return k;
}

int sched_gang_pick_node(const sched *s, int j, uint64_t usable)
{
    const job_rec *J = &s->jobs[j];
    usable &= J->mask;
    int r = J->resv_node;
    if (r >= 0 && (s->node_holder[r] < 0 || s->node_holder[r] == j) &&
        node_reachable(s, r, usable) >= J->members)
        return r;
    if (s->nheld_nodes >= s->nnodes)
        return -1;
    int best = -1, best_free = -1;
    for (int n = 0; n < s->nnodes; n++) {
        if (s->node_holder[n] >= 0)
            continue;
        int f = sched_gang_node_free(s, n, usable, j);
        if (f <= best_free || node_reachable(s, n, usable) < J->members)
            continue;
        best = n;
        best_free = f;
    }
    return best;
}

int sched_gang_nearest(const sched *s, int j, int *nfree)
{
    const job_rec *J = &s->jobs[j];
    int best = -1, best_free = -1;
    for (int n = 0; n < s->nnodes; n++) {
        if (node_capacity(s, n, J->mask) < J->members)
            continue;
        int f = sched_gang_node_free(s, n, J->mask, j);
        if (s->node_holder[n] == j) {
            best = n;
            best_free = f;
            break;
        }
        if (f > best_free) {
            best = n;
            best_free = f;
        }
    }
    *nfree = best_free < 0 ? 0 : best_free;
    return best;
}

int sched_gang_capacity(const sched *s, uint64_t mask, int spread)
{
    int most = 0, total = 0;
    for (int n = 0; n < s->nnodes; n++) {
        int k = node_capacity(s, n, mask);
        total += k;
        if (k > most)
            most = k;
    }
    return spread ? total : most;
}

void sched_gang_room(sched *s)
{
    s->gang_room = s->gang_total = 0;
    if (!s->whole)
        return;
    for (int n = 0; n < s->nnodes; n++) {
        const int *nf = &s->node_free[n * SCHED_MAX_CLASSES];
        int k = 0;
        for (uint64_t m = s->whole; m; m &= m - 1)
            k += nf[sched_ctz64(m)];
        s->gang_total += k;
        if (k > s->gang_room)
            s->gang_room = k;
    }
}
