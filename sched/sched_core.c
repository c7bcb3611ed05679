/*
 * sched_core.c - the scheduling policy of sched.h: creation, tenants,
 * requests and the calls that move one job (submit, remove, requeue,
 * restore).
 *
 * Not sched.c: the layer test counts x.c and x.h as one module, and
 * sched_internal.h includes sched.h, so a sched.c including the internal
 * header would close an include circle.
 *
 * The rest lives beside it, sharing the books declared in sched_internal.h:
 *   sched_books.c   slots, classes, lanes, tenant lists and counters
 *   sched_passes.c  sched_pass: reservations, fair share, preemption
 *   sched_report.c  sched_queue_report and the wait reasons
 *   sched_gang.c    where a gang fits: nodes, domains, reservations
 *   sched_check.c   sched_check, the invariant checker
 *   sched_layout.c  sched_slots_replace: a new slot list (MIG layout changes)
 */
#include "sched/sched.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/sched_internal.h"

/* ---- small helpers ---- */

static uint64_t fnv1a(const char *str)
{
    uint64_t h = 1469598103934665603ull;
    for (; *str; str++)
        h = (h ^ (unsigned char)*str) * 1099511628211ull;
    return h;
}

static double gib(uint64_t b) { return (double)b / (double)(1ull << 30); }

static uint64_t request_mask(const sched *s, const sched_request *r)
{
    uint64_t m = 0;
    for (int c = 0; c < s->nclasses; c++) {
        const class_rec *k = &s->classes[c];
        int ok = 0;
        if (k->off == 2)
            continue; /* retired: gone from the inventory */
        switch (r->kind) {
            case SCHED_REQ_NONE: ok = 0; break;
            case SCHED_REQ_ANY: ok = 1; break;
            case SCHED_REQ_PROFILE:
                ok = k->is_mig && strcmp(k->profile, r->profile) == 0;
                break;
            case SCHED_REQ_MIN:
                ok = k->compute_slices >= r->min_compute_slices &&
                     k->memory_bytes >= r->min_memory_bytes;
                break;
        }
        if (ok)
            m |= 1ull << c;
    }
    return m;
}

/* ---- creation ---- */

/* Whether slot sl is of class k: the same compute slices, memory, MIG and
 * profile. */
static int class_matches(const class_rec *k, const slot_rec *sl)
{
    return k->compute_slices == sl->compute_slices &&
           k->memory_bytes == sl->memory_bytes && k->is_mig == sl->is_mig &&
           k->off == sl->off && strcmp(k->profile, sl->profile) == 0;
}

static ty_status grow_jobs(sched *s, ty_err *err)
{
    int cap = s->job_cap ? s->job_cap * 2 : 64;
    job_rec *nj = realloc(s->jobs, (size_t)cap * sizeof *nj);
    if (!nj)
        goto oom;
    s->jobs = nj;
    sched_placement *np = realloc(s->placements, (size_t)cap * sizeof *np);
    if (!np)
        goto oom;
    s->placements = np;
    for (int i = cap - 1; i >= s->job_cap; i--) {
        memset(&nj[i], 0, sizeof nj[i]);
        nj[i].hnext = s->free_head;
        s->free_head = i;
    }
    s->job_cap = cap;
    /* the id hash: one bucket per job slot */
    int *nb = calloc((size_t)cap, sizeof *nb);
    if (!nb)
        goto oom;
    for (int i = 0; i < cap; i++)
        nb[i] = -1;
    for (int i = 0; i < cap; i++)
        if (nj[i].in_use) {
            size_t b = fnv1a(nj[i].id) & ((size_t)cap - 1);
            nj[i].hnext = nb[b];
            nb[b] = i;
        }
    free(s->buckets);
    s->buckets = nb;
    s->nbuckets = (size_t)cap;
    return TY_OK;
oom:
    return ty_fail(err, TY_ENOMEM, NULL, "out of memory growing the job table");
}

/* Makes *lanes (a tenant's training or serving lanes, *n of them) hold lane
 * `lane`: grown to the mask table's capacity, new lanes empty. */
static ty_status grow_lanes(const sched *s, lane_rec **lanes, int *n, int lane,
                            ty_err *err)
{
    if (*n > lane)
        return TY_OK;
    lane_rec *nl = realloc(*lanes, (size_t)s->mask_cap * sizeof *nl);
    if (!nl)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    for (int l = *n; l < s->mask_cap; l++)
        nl[l] = (lane_rec){-1, -1, 0};
    *lanes = nl;
    *n = s->mask_cap;
    return TY_OK;
}

static ty_status grow_tenants(sched *s, ty_err *err)
{
    int cap = s->tenant_cap ? s->tenant_cap * 2 : 16;
    tenant_rec *nt = realloc(s->tenants, (size_t)cap * sizeof *nt);
    if (!nt)
        goto oom;
    s->tenants = nt;
    int *nh = realloc(s->heap, (size_t)cap * sizeof *nh);
    if (!nh)
        goto oom;
    s->heap = nh;
    int *no = realloc(s->order, (size_t)cap * sizeof *no);
    if (!no)
        goto oom;
    s->order = no;
    s->tenant_cap = cap;
    return TY_OK;
oom:
    return ty_fail(err, TY_ENOMEM, NULL,
                   "out of memory growing the tenant table");
}

/* The dense index of the caller's node `id`, added if new; -1 out of
 * memory. Linear: an inventory has a few hundred nodes at most. */
static int node_index(sched *s, int id)
{
    for (int n = 0; n < s->nnodes; n++)
        if (s->node_id[n] == id)
            return n;
    int *ni = realloc(s->node_id, (size_t)(s->nnodes + 1) * sizeof *ni);
    if (!ni)
        return -1;
    s->node_id = ni;
    ni[s->nnodes] = id;
    return s->nnodes++;
}

/* The slots of each node (in slot order), its free counts and the gang
 * scratch, once the slots have their nodes. */
static ty_status nodes_index(sched *s)
{
    size_t nn = (size_t)s->nnodes + 1, ns = (size_t)s->nslots + 1;
    s->node_first = calloc(nn + 1, sizeof *s->node_first);
    s->node_slots = calloc(ns, sizeof *s->node_slots);
    s->node_free = calloc(nn * SCHED_MAX_CLASSES, sizeof *s->node_free);
    s->node_holder = calloc(nn, sizeof *s->node_holder);
    s->gpick = calloc(ns, sizeof *s->gpick);
    s->gtry = calloc(ns, sizeof *s->gtry);
    if (!s->node_first || !s->node_slots || !s->node_free || !s->node_holder ||
        !s->gpick || !s->gtry)
        return TY_ENOMEM;
    for (int i = 0; i < s->nslots; i++)
        s->node_first[s->slots[i].node + 1]++;
    for (int n = 0; n < s->nnodes; n++)
        s->node_first[n + 1] += s->node_first[n];
    int *fill = s->gtry; /* scratch: the next place of each node */
    for (int n = 0; n < s->nnodes; n++)
        fill[n] = s->node_first[n];
    for (int i = 0; i < s->nslots; i++)
        s->node_slots[fill[s->slots[i].node]++] = i;
    for (size_t n = 0; n < nn; n++)
        s->node_holder[n] = -1;
    return TY_OK;
}

static int class_cmp(const class_rec *a, const class_rec *b)
{
    if (a->compute_slices != b->compute_slices)
        return a->compute_slices < b->compute_slices ? -1 : 1;
    if (a->memory_bytes != b->memory_bytes)
        return a->memory_bytes < b->memory_bytes ? -1 : 1;
    return a->first_slot < b->first_slot ? -1 : a->first_slot > b->first_slot;
}

/* sched_create with each slot's state (NULL: all in use). */
static sched *create_with_states(const sched_config *cfg,
                                 const sched_slot *slots, const uint8_t *states,
                                 size_t n_slots, ty_err *err)
{
    if (!cfg || !(cfg->backfill_wait >= 0) || !(cfg->preempt_wait >= 0) ||
        !(cfg->fair_window >= 0)) {
        ty_fail(
            err, TY_EINVAL, "backfill_wait",
            "backfill_wait, preempt_wait and fair_window must be numbers >= 0");
        return NULL;
    }
    if (n_slots > (size_t)INT_MAX / 2) {
        ty_fail(err, TY_EINVAL, "slots", "too many slots (%zu)", n_slots);
        return NULL;
    }
    sched *s = calloc(1, sizeof *s);
    if (!s)
        goto oom;
    s->cfg = *cfg;
    s->free_head = -1;
    s->cpu_holder = -1;
    s->last_now = NAN;
    s->nslots = (int)n_slots;
    s->slots = calloc(n_slots ? n_slots : 1, sizeof *s->slots);
    s->victims = calloc(n_slots ? n_slots : 1, sizeof *s->victims);
    /* every preemption has a victim on a slot of its own */
    s->preemptions = calloc(n_slots ? n_slots : 1, sizeof *s->preemptions);
    if (!s->slots || !s->victims || !s->preemptions)
        goto oom;
    for (int c = 0; c < SCHED_MAX_CLASSES; c++)
        s->class_holder[c] = -1;

    /* slots into classes, classes in first-seen order for now */
    for (int i = 0; i < s->nslots; i++) {
        const sched_slot *in = &slots[i];
        slot_rec *sl = &s->slots[i];
        const char *prof = in->profile ? in->profile : "";
        if (in->compute_slices < 1 || in->compute_slices > 64) {
            ty_fail(err, TY_EINVAL, "slots.compute_slices",
                    "slot %d: compute_slices must be 1..64, not %d", i,
                    in->compute_slices);
            goto fail;
        }
        if (strlen(prof) >= SCHED_PROFILE_MAX) {
            ty_fail(err, TY_EINVAL, "slots.profile",
                    "slot %d: profile name longer than %d bytes", i,
                    SCHED_PROFILE_MAX - 1);
            goto fail;
        }
        snprintf(sl->profile, sizeof sl->profile, "%s", prof);
        sl->gpu = in->gpu;
        sl->is_mig = in->is_mig ? 1 : 0;
        sl->compute_slices = in->compute_slices;
        sl->memory_bytes = in->memory_bytes;
        sl->holder = sl->reserved_for = -1;
        sl->off = states && states[i] <= SCHED_SLOT_RETIRED ? states[i] : 0;
        sl->domain = in->domain;
        s->domains |= in->domain != 0;
        sl->node = node_index(s, in->node);
        if (sl->node < 0)
            goto oom;
        if (!sl->off)
            s->total_slices += sl->compute_slices;
        if (sl->compute_slices > s->max_class_slices)
            s->max_class_slices = sl->compute_slices;
        int c;
        for (c = 0; c < s->nclasses; c++)
            if (class_matches(&s->classes[c], sl))
                break;
        if (c == s->nclasses) {
            if (s->nclasses == SCHED_MAX_CLASSES) {
                ty_fail(err, TY_EINVAL, "slots",
                        "more than %d distinct kinds of slot",
                        SCHED_MAX_CLASSES);
                goto fail;
            }
            class_rec *k = &s->classes[s->nclasses++];
            snprintf(k->profile, sizeof k->profile, "%s", sl->profile);
            k->is_mig = sl->is_mig;
            k->compute_slices = sl->compute_slices;
            k->memory_bytes = sl->memory_bytes;
            k->off = sl->off;
            k->first_slot = i;
        }
        s->classes[c].nslots++;
    }
    /* best-fit order (insertion sort: a handful of classes) */
    for (int a = 1; a < s->nclasses; a++) {
        class_rec k = s->classes[a];
        int b = a - 1;
        while (b >= 0 && class_cmp(&k, &s->classes[b]) < 0) {
            s->classes[b + 1] = s->classes[b];
            b--;
        }
        s->classes[b + 1] = k;
    }
    for (int c = 0; c < s->nclasses; c++) {
        class_rec *k = &s->classes[c];
        k->slots = malloc((size_t)k->nslots * sizeof *k->slots);
        if (!k->slots)
            goto oom;
        k->nslots = 0;
    }
    for (int i = 0; i < s->nslots; i++) {
        slot_rec *sl = &s->slots[i];
        for (int c = 0; c < s->nclasses; c++) {
            class_rec *k = &s->classes[c];
            if (class_matches(k, sl)) {
                sl->cls = c;
                k->slots[k->nslots++] = i;
                break;
            }
        }
    }
    if (nodes_index(s) != TY_OK)
        goto oom;
    for (int i = 0; i < s->nslots; i++)
        if (!s->slots[i].off)
            s->node_free[s->slots[i].node * SCHED_MAX_CLASSES +
                         s->slots[i].cls]++;
    for (int c = 0; c < s->nclasses; c++) {
        if (s->classes[c].off)
            s->off |= 1ull << c;
        else
            sched_class_count(s, c, s->classes[c].nslots);
        if (!s->classes[c].is_mig)
            s->whole |= 1ull << c;
    }
    s->fit_upto = calloc((size_t)s->max_class_slices + 1, sizeof *s->fit_upto);
    if (!s->fit_upto)
        goto oom;
    for (int r = 0; r <= s->max_class_slices; r++)
        for (int c = 0; c < s->nclasses; c++)
            if (s->classes[c].compute_slices <= r)
                s->fit_upto[r] |= 1ull << c;

    s->mask_cap = 8;
    s->masks = calloc((size_t)s->mask_cap, sizeof *s->masks);
    s->lane_members = calloc((size_t)s->mask_cap, sizeof *s->lane_members);
    s->lane_spread = calloc((size_t)s->mask_cap, sizeof *s->lane_spread);
    if (!s->masks || !s->lane_members || !s->lane_spread)
        goto oom;
    s->lane_members[0] = 1;
    s->nmasks = 1; /* lane 0: CPU jobs */
    if (grow_jobs(s, err) != TY_OK || grow_tenants(s, err) != TY_OK)
        goto fail;
    return s;
oom:
    ty_fail(err, TY_ENOMEM, NULL, "out of memory creating the scheduler");
fail:
    sched_destroy(s);
    return NULL;
}

sched *sched_create(const sched_config *cfg, const sched_slot *slots,
                    size_t n_slots, ty_err *err)
{
    return create_with_states(cfg, slots, NULL, n_slots, err);
}

void sched_destroy(sched *s)
{
    if (!s)
        return;
    for (int c = 0; c < s->nclasses; c++)
        free(s->classes[c].slots);
    for (int t = 0; t < s->ntenants; t++) {
        free(s->tenants[t].lanes);
        free(s->tenants[t].slanes);
    }
    for (int j = 0; j < s->job_cap; j++)
        if (s->jobs[j].in_use)
            free(s->jobs[j].gslots);
    free(s->lane_members);
    free(s->lane_spread);
    free(s->node_id);
    free(s->node_first);
    free(s->node_slots);
    free(s->node_free);
    free(s->node_holder);
    free(s->gpick);
    free(s->gtry);
    free(s->slots);
    free(s->victims);
    free(s->fit_upto);
    free(s->masks);
    free(s->tenants);
    free(s->jobs);
    free(s->buckets);
    free(s->placements);
    free(s->preemptions);
    free(s->heap);
    free(s->order);
    free(s);
}

/* ---- tenants ---- */

int sched_tenant_find(const sched *s, const char *id)
{
    if (!id)
        return -1;
    for (int t = 0; t < s->ntenants; t++)
        if (strcmp(s->tenants[t].id, id) == 0)
            return t;
    return -1;
}

ty_status sched_tenant_set(sched *s, const char *id, double weight,
                           int64_t max_gpu_slices, int64_t max_running_jobs,
                           int *handle, ty_err *err)
{
    if (!id || !*id || strlen(id) >= TY_ID_MAX)
        return ty_fail(err, TY_EINVAL, "id",
                       "a tenant id of 1 to %d bytes is needed", TY_ID_MAX - 1);
    if (!(weight > 0) || !isfinite(weight))
        return ty_fail(err, TY_EINVAL, "weight",
                       "weight must be a finite number > 0, not %g", weight);
    int t = sched_tenant_find(s, id);
    if (t < 0) {
        if (s->ntenants == s->tenant_cap && grow_tenants(s, err) != TY_OK)
            return TY_ENOMEM;
        t = s->ntenants++;
        tenant_rec *n = &s->tenants[t];
        memset(n, 0, sizeof *n);
        snprintf(n->id, sizeof n->id, "%s", id);
        n->thead = n->ttail = n->head_job = -1;
    }
    tenant_rec *n = &s->tenants[t];
    n->weight = weight;
    n->max_slices = max_gpu_slices < 0 ? SCHED_UNLIMITED : max_gpu_slices;
    n->max_jobs = max_running_jobs < 0 ? SCHED_UNLIMITED : max_running_jobs;
    if (handle)
        *handle = t;
    return TY_OK;
}

void sched_tenant_usage(const sched *s, int t, int *slices, int *jobs,
                        double *share)
{
    if (t < 0 || t >= s->ntenants) {
        if (slices)
            *slices = 0;
        if (jobs)
            *jobs = 0;
        if (share)
            *share = 0;
        return;
    }
    const tenant_rec *n = &s->tenants[t];
    if (slices)
        *slices = n->slices;
    if (jobs)
        *jobs = n->jobs;
    if (share)
        *share = n->share;
}

/* ---- requests ---- */

void sched_request_text(const sched_request *r, char *buf, size_t n)
{
    switch (r->kind) {
        case SCHED_REQ_NONE: snprintf(buf, n, "the CPU"); break;
        case SCHED_REQ_ANY: snprintf(buf, n, "any GPU slot"); break;
        case SCHED_REQ_PROFILE:
            snprintf(buf, n, "a %s MIG slice", r->profile);
            break;
        case SCHED_REQ_MIN:
            snprintf(buf, n, "at least %d compute slices and %.1f GiB",
                     r->min_compute_slices, gib(r->min_memory_bytes));
            break;
    }
}

static void inventory_text(const sched *s, char *buf, size_t n)
{
    if (s->nslots == 0) {
        snprintf(buf, n, "this host has no GPU");
        return;
    }
    size_t off = (size_t)snprintf(buf, n, "this host has");
    int listed = 0;
    for (int c = 0; c < s->nclasses && off < n; c++) {
        const class_rec *k = &s->classes[c];
        if (k->off == 2)
            continue;
        off += (size_t)snprintf(buf + off, n - off,
                                "%s %d x %s (%d compute slices, %.1f GiB)",
                                listed++ ? "," : "", k->nslots,
                                k->is_mig ? k->profile : "whole GPU",
                                k->compute_slices, gib(k->memory_bytes));
    }
}

ty_status sched_request_check(const sched *s, int tenant,
                              const sched_request *req, ty_err *err)
{
    const char *field = "resources.gpu";
    switch (req->kind) {
        case SCHED_REQ_NONE: return TY_OK;
        case SCHED_REQ_ANY: break;
        case SCHED_REQ_PROFILE:
            if (!req->profile[0])
                return ty_fail(err, TY_EINVAL, field,
                               "a MIG profile name is needed");
            break;
        case SCHED_REQ_MIN:
            if (req->min_compute_slices < 0)
                return ty_fail(err, TY_EINVAL,
                               "resources.gpu.min_compute_slices",
                               "min_compute_slices must be >= 0");
            break;
        default:
            return ty_fail(err, TY_EINVAL, field,
                           "unknown kind of GPU request");
    }
    uint64_t m = request_mask(s, req);
    char want[96], have[400];
    sched_request_text(req, want, sizeof want);
    if (!m) {
        inventory_text(s, have, sizeof have);
        return ty_fail(err, TY_EINVAL, field,
                       "no device of this host can satisfy %s: %s", want, have);
    }
    if (tenant >= 0 && tenant < s->ntenants) {
        const tenant_rec *t = &s->tenants[tenant];
        int need = s->classes[sched_ctz64(m)].compute_slices;
        if (t->max_slices >= 0 && need > t->max_slices)
            return ty_fail(err, TY_EINVAL, field,
                           "%s takes at least %d compute slices here, above "
                           "the tenant's max_gpu_slices quota of %lld",
                           want, need, (long long)t->max_slices);
    }
    return TY_OK;
}

/* ---- jobs ---- */

int sched_job_find(const sched *s, const char *id)
{
    if (!id)
        return -1;
    size_t b = fnv1a(id) & (s->nbuckets - 1);
    for (int j = s->buckets[b]; j >= 0; j = s->jobs[j].hnext)
        if (strcmp(s->jobs[j].id, id) == 0)
            return j;
    return -1;
}

/* The lane of jobs with this mask, gang size and spread (a lane per size,
 * so a small gang is not stuck behind a big one of its tenant, nor a gang
 * that may spread behind one that may not), added if new. */
static int lane_for(sched *s, uint64_t mask, int members, int spread,
                    ty_err *err)
{
    for (int l = 0; l < s->nmasks; l++)
        if (s->masks[l] == mask && s->lane_members[l] == members &&
            s->lane_spread[l] == spread)
            return l;
    if (s->nmasks == s->mask_cap) {
        uint64_t *nm = realloc(s->masks, (size_t)s->mask_cap * 2 * sizeof *nm);
        if (!nm)
            goto oom;
        s->masks = nm;
        int *mm =
            realloc(s->lane_members, (size_t)s->mask_cap * 2 * sizeof *mm);
        if (!mm)
            goto oom;
        s->lane_members = mm;
        int *ms = realloc(s->lane_spread, (size_t)s->mask_cap * 2 * sizeof *ms);
        if (!ms)
            goto oom;
        s->lane_spread = ms;
        s->mask_cap *= 2;
    }
    s->masks[s->nmasks] = mask;
    s->lane_members[s->nmasks] = members;
    s->lane_spread[s->nmasks] = spread;
    return s->nmasks++;
oom:
    ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    return -1;
}

/* The classes a job may use: its request's, whole GPUs only in a gang. */
static uint64_t job_mask(const sched *s, const sched_job_desc *d)
{
    uint64_t m = request_mask(s, &d->request);
    return d->gang > 1 ? m & s->whole : m;
}

ty_status sched_job_check(const sched *s, const sched_job_desc *d, ty_err *err)
{
    if (d->gang < 0)
        return ty_fail(err, TY_EINVAL, "gang",
                       "a gang has 1 or more members, not %d", d->gang);
    if (d->gang > 1 && d->serving)
        return ty_fail(err, TY_EINVAL, "gang",
                       "a serving replica cannot be a gang");
    if (d->gang > 1 && d->request.kind == SCHED_REQ_PROFILE)
        return ty_fail(err, TY_EINVAL, "resources.gpu",
                       "a gang takes whole GPUs: a MIG profile (%s) cannot "
                       "be used in a gang (collectives do not run between "
                       "MIG slices)",
                       d->request.profile);
    ty_status st = sched_request_check(s, d->tenant, &d->request, err);
    if (st != TY_OK || d->gang <= 1)
        return st;
    int k = d->gang;
    if (d->request.kind == SCHED_REQ_NONE) {
        if (s->cfg.max_cpu_jobs >= 0 && k > s->cfg.max_cpu_jobs)
            return ty_fail(err, TY_EINVAL, "resources.workers",
                           "a gang of %d CPU workers is more than the %d "
                           "CPU jobs this server runs at once",
                           k, s->cfg.max_cpu_jobs);
        return TY_OK;
    }
    uint64_t m = job_mask(s, d);
    if (!m)
        return ty_fail(err, TY_EINVAL, "resources.gpu",
                       "a gang takes whole GPUs and no whole GPU (MIG off) "
                       "here satisfies its request");
    int cap = sched_gang_capacity(s, m, d->gang_spread);
    if (k > cap)
        return ty_fail(err, TY_EINVAL, "resources.gpus",
                       "a gang of %d whole GPUs%s cannot run here: the "
                       "largest %s %d that satisfy it",
                       k, d->gang_spread ? "" : " on one node",
                       d->gang_spread ? "inventory has" : "node has", cap);
    const tenant_rec *t = &s->tenants[d->tenant];
    int need = k * s->classes[sched_ctz64(m)].compute_slices;
    if (t->max_slices >= 0 && need > t->max_slices)
        return ty_fail(err, TY_EINVAL, "resources.gpus",
                       "a gang of %d whole GPUs takes %d compute slices, "
                       "above the tenant's max_gpu_slices quota of %lld",
                       k, need, (long long)t->max_slices);
    return TY_OK;
}

ty_status sched_job_submit(sched *s, const sched_job_desc *d, int *handle,
                           ty_err *err)
{
    if (!d->id || !*d->id || strlen(d->id) >= TY_ID_MAX)
        return ty_fail(err, TY_EINVAL, "id",
                       "a job id of 1 to %d bytes is needed", TY_ID_MAX - 1);
    if (d->tenant < 0 || d->tenant >= s->ntenants)
        return ty_fail(err, TY_EINVAL, "tenant", "unknown tenant %d",
                       d->tenant);
    if (!isfinite(d->submit_time))
        return ty_fail(err, TY_EINVAL, "submit_time",
                       "submit_time must be finite");
    if (sched_job_find(s, d->id) >= 0)
        return ty_fail(err, TY_EINVAL, "id", "job %s is already queued", d->id);
    ty_status st = sched_job_check(s, d, err);
    if (st != TY_OK)
        return st;
    uint64_t mask = job_mask(s, d);
    int members = d->gang > 1 ? d->gang : 1;
    int lane =
        lane_for(s, mask, members, members > 1 && d->gang_spread ? 1 : 0, err);
    if (lane < 0)
        return TY_ENOMEM;
    int *gslots = NULL;
    if (members > 1 && mask &&
        !(gslots = calloc((size_t)members, sizeof *gslots)))
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    tenant_rec *t = &s->tenants[d->tenant];
    if (grow_lanes(s, d->serving ? &t->slanes : &t->lanes,
                   d->serving ? &t->nslanes : &t->nlanes, lane, err) != TY_OK ||
        (s->free_head < 0 && grow_jobs(s, err) != TY_OK)) {
        free(gslots);
        return TY_ENOMEM;
    }

    int j = s->free_head;
    job_rec *J = &s->jobs[j];
    s->free_head = J->hnext;
    memset(J, 0, sizeof *J);
    J->in_use = 1;
    snprintf(J->id, sizeof J->id, "%s", d->id);
    J->tenant = d->tenant;
    J->priority = d->priority;
    J->submit_time = d->submit_time;
    J->seq = s->next_seq++;
    J->serving = d->serving ? 1 : 0;
    J->req = d->request;
    J->req.profile[SCHED_PROFILE_MAX - 1] = 0;
    J->lane = lane;
    J->mask = mask;
    J->min_slices = mask ? s->classes[sched_ctz64(mask)].compute_slices : 0;
    J->members = members;
    J->spread = d->gang_spread ? 1 : 0;
    J->gslots = gslots;
    J->resv_node = -1;
    J->lprev = J->lnext = J->tprev = J->tnext = -1;
    size_t b = fnv1a(J->id) & (s->nbuckets - 1);
    J->hnext = s->buckets[b];
    s->buckets[b] = j;
    s->live++;
    sched_enqueue(s, j);
    if (handle)
        *handle = j;
    return TY_OK;
}

ty_status sched_job_remove(sched *s, int j)
{
    if (sched_bad_job(s, j))
        return TY_ENOTFOUND;
    job_rec *J = &s->jobs[j];
    if (J->state == SCHED_JOB_QUEUED || J->state == SCHED_JOB_PENDING)
        sched_dequeue(s, j);
    if (J->state == SCHED_JOB_PENDING) {
        /* the victim keeps stopping; it no longer makes room for anyone */
        int v = s->slots[J->slot].holder;
        if (v >= 0 && s->jobs[v].preempted_for == j)
            s->jobs[v].preempted_for = -1;
    }
    sched_release(s, j);
    /* out of the id hash */
    size_t b = fnv1a(J->id) & (s->nbuckets - 1);
    int *p = &s->buckets[b];
    while (*p != j)
        p = &s->jobs[*p].hnext;
    *p = J->hnext;
    free(J->gslots);
    J->gslots = NULL;
    J->in_use = 0;
    J->hnext = s->free_head;
    s->free_head = j;
    s->live--;
    return TY_OK;
}

ty_status sched_job_requeue(sched *s, int j, ty_err *err)
{
    if (sched_bad_job(s, j))
        return ty_fail(err, TY_ENOTFOUND, NULL, "no such job");
    job_rec *J = &s->jobs[j];
    if (J->state != SCHED_JOB_RUNNING && J->state != SCHED_JOB_STOPPING)
        return ty_fail(err, TY_ECONFLICT, NULL, "job %s is not running", J->id);
    sched_release(s, j);
    sched_enqueue(s, j);
    return TY_OK;
}

ty_status sched_job_restore_running(sched *s, int j, int slot,
                                    double start_time, ty_err *err)
{
    if (sched_bad_job(s, j))
        return ty_fail(err, TY_ENOTFOUND, NULL, "no such job");
    job_rec *J = &s->jobs[j];
    if (J->state != SCHED_JOB_QUEUED)
        return ty_fail(err, TY_ECONFLICT, NULL, "job %s is not queued", J->id);
    if (J->members > 1)
        return ty_fail(err, TY_EINVAL, "slot",
                       "job %s is a gang: restore it with its members' slots",
                       J->id);
    if (slot < -1 || slot >= s->nslots)
        return ty_fail(err, TY_EINVAL, "slot", "no slot %d", slot);
    if ((slot < 0) != (J->mask == 0) ||
        (slot >= 0 && !(J->mask & (1ull << s->slots[slot].cls))))
        return ty_fail(err, TY_EINVAL, "slot",
                       "slot %d does not satisfy job %s", slot, J->id);
    if (slot >= 0 &&
        (s->slots[slot].holder >= 0 || s->slots[slot].reserved_for >= 0))
        return ty_fail(err, TY_ECONFLICT, "slot", "slot %d is held", slot);
    sched_run_on(s, j, slot, start_time);
    return TY_OK;
}

ty_status sched_job_restore_gang(sched *s, int j, const int *slots, int n,
                                 double start_time, ty_err *err)
{
    if (sched_bad_job(s, j))
        return ty_fail(err, TY_ENOTFOUND, NULL, "no such job");
    job_rec *J = &s->jobs[j];
    if (J->state != SCHED_JOB_QUEUED)
        return ty_fail(err, TY_ECONFLICT, NULL, "job %s is not queued", J->id);
    if (J->members < 2 || n != (J->mask ? J->members : 0))
        return ty_fail(err, TY_EINVAL, "slots",
                       "job %s needs %d member slots, not %d", J->id,
                       J->mask ? J->members : 0, n);
    for (int m = 0; m < n; m++) {
        int i = slots[m];
        if (i < 0 || i >= s->nslots || !(J->mask & (1ull << s->slots[i].cls)))
            return ty_fail(err, TY_EINVAL, "slots",
                           "slot %d does not satisfy job %s", i, J->id);
        if (s->slots[i].holder >= 0 || s->slots[i].reserved_for >= 0)
            return ty_fail(err, TY_ECONFLICT, "slots", "slot %d is held", i);
        for (int k = 0; k < m; k++)
            if (slots[k] == i)
                return ty_fail(err, TY_EINVAL, "slots",
                               "slot %d is named twice", i);
        if (!J->spread && s->slots[i].node != s->slots[slots[0]].node)
            return ty_fail(err, TY_EINVAL, "slots",
                           "job %s's members must share a node", J->id);
    }
    sched_run_gang(s, j, n ? slots : NULL, start_time);
    return TY_OK;
}

ty_status sched_job_get(const sched *s, int j, sched_job_info *out)
{
    if (sched_bad_job(s, j))
        return TY_ENOTFOUND;
    const job_rec *J = &s->jobs[j];
    out->id = J->id;
    out->tenant = J->tenant;
    out->priority = J->priority;
    out->submit_time = J->submit_time;
    out->request = J->req;
    out->state = J->state;
    out->slot = J->slot;
    out->start_time = J->start_time;
    out->head_since = J->state == SCHED_JOB_QUEUED ? J->head_since : -1;
    out->preempted_for = J->preempted_for;
    out->serving = J->serving;
    out->gang = J->members;
    out->gang_spread = J->spread;
    out->gang_slots = J->members > 1 && J->slot >= 0 ? J->gslots : NULL;
    return TY_OK;
}

int sched_slot_holder(const sched *s, int slot)
{
    return slot >= 0 && slot < s->nslots ? s->slots[slot].holder : -1;
}

size_t sched_queued_count(const sched *s) { return s->queued; }

/* ---- for sched_layout.c (sched_internal.h) ---- */

sched *sched_create_states(const sched_config *cfg, const sched_slot *slots,
                           const uint8_t *states, size_t n_slots, ty_err *err)
{
    return create_with_states(cfg, slots, states, n_slots, err);
}

uint64_t sched_request_mask(const sched *s, const sched_request *r)
{
    return request_mask(s, r);
}

int sched_lane_for(sched *s, uint64_t mask, int members, int spread,
                   ty_err *err)
{
    return lane_for(s, mask, members, spread, err);
}

ty_status sched_grow_lanes(const sched *s, lane_rec **lanes, int *n, int lane,
                           ty_err *err)
{
    return grow_lanes(s, lanes, n, lane, err);
}

ty_status sched_grow_jobs(sched *s, ty_err *err) { return grow_jobs(s, err); }

void sched_hash_insert(sched *s, int j)
{
    size_t b = fnv1a(s->jobs[j].id) & (s->nbuckets - 1);
    s->jobs[j].hnext = s->buckets[b];
    s->buckets[b] = j;
}
