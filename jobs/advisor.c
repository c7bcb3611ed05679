/*
 * advisor.c - the replay of a demand trace on the real scheduler, the
 * enumeration of MIG partitions and the search over them (see advisor.h).
 *
 * The replay keeps, per record, its state (not arrived, queued, running,
 * done, unservable), the time it has left to run and the time it last
 * became queued; the scheduler keeps everything else. Running records are
 * at most one per slot, so the next completion is a scan of them.
 */
#include "jobs/advisor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { R_WAITING = 0, R_QUEUED, R_RUNNING, R_DONE, R_UNSERVABLE };

typedef struct {
    int state;
    int sj;           /* scheduler handle while queued or running */
    int held;         /* compute slices held while running */
    double left;      /* seconds still to run */
    double run_start; /* while running */
    double queued_at; /* while queued */
    double wait;      /* seconds queued so far, within the window */
    int started;      /* placed at least once */
} rec_state;

int adv_record_slices(const adv_record *r)
{
    int per = 1;
    switch (r->request.kind) {
        case SCHED_REQ_PROFILE: {
            int g = atoi(r->request.profile); /* "3g.40gb" -> 3 */
            per = g >= 1 && g <= MIG_COMPUTE_SLICES ? g : 1;
            break;
        }
        case SCHED_REQ_MIN:
            per = r->request.min_compute_slices > 1
                      ? r->request.min_compute_slices
                      : 1;
            if (per > MIG_COMPUTE_SLICES)
                per = MIG_COMPUTE_SLICES;
            break;
        default: per = 1;
    }
    if (r->gang >= 2)
        return MIG_COMPUTE_SLICES * r->gang;
    return per;
}

/* The slots of a layout, appended to slots[*n]. */
static void layout_slots(const adv_layout *g, int gpu, sched_slot *slots,
                         size_t *n)
{
    if (!g->mig || !g->model) {
        uint64_t mem = g->memory_bytes;
        if (!mem && g->model)
            mem = g->model->memory_mib << 20;
        slots[(*n)++] = (sched_slot){.gpu = gpu,
                                     .is_mig = 0,
                                     .profile = NULL,
                                     .compute_slices = MIG_COMPUTE_SLICES,
                                     .memory_bytes = mem};
        return;
    }
    for (int i = 0; i < g->n; i++) {
        const mig_profile *p = g->inst[i].profile;
        slots[(*n)++] = (sched_slot){.gpu = gpu,
                                     .is_mig = 1,
                                     .profile = p->name,
                                     .compute_slices = p->compute_slices,
                                     .memory_bytes = p->memory_mib << 20};
    }
}

/* Records in arrival order (ties: trace order). */
typedef struct {
    double arrival;
    size_t i;
} arr_key;

static int cmp_key(const void *a, const void *b)
{
    const arr_key *x = a, *y = b;
    if (x->arrival != y->arrival)
        return x->arrival < y->arrival ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The record of a scheduler handle: its id is "r<index>". */
static size_t rec_of(sched *s, int sj)
{
    sched_job_info info;
    if (sched_job_get(s, sj, &info) != TY_OK)
        return SIZE_MAX;
    return (size_t)strtoull(info.id + 1, NULL, 10);
}

/* Adds sign x the compute slices job sj holds to the per-GPU rates;
 * returns them. Call while it holds its slots. */
static int held_slices(sched *s, const sched_slot *slots, int sj, int sign,
                       double *gpu_rate)
{
    sched_job_info info;
    if (sched_job_get(s, sj, &info) != TY_OK || info.slot < 0)
        return 0;
    int one = info.slot, sum = 0;
    const int *list = info.gang_slots ? info.gang_slots : &one;
    int k_n = info.gang_slots ? info.gang : 1;
    for (int k = 0; k < k_n; k++) {
        const sched_slot *sl = &slots[list[k]];
        sum += sl->compute_slices;
        if (sl->gpu < ADV_MAX_GPUS)
            gpu_rate[sl->gpu] += sign * sl->compute_slices;
    }
    return sum;
}

ty_status adv_replay(const sched_config *cfg, const adv_layout *gpus, int ngpus,
                     const adv_record *recs, size_t n, double t0, double t1,
                     adv_result *out, ty_err *err)
{
    memset(out, 0, sizeof *out);
    if (!(t1 > t0))
        return ty_fail(err, TY_EINVAL, "window", "the window is empty");
    size_t nslots = 0;
    sched_slot *slots =
        calloc((size_t)ngpus * MIG_COMPUTE_SLICES + 1, sizeof *slots);
    rec_state *st = calloc(n + 1, sizeof *st);
    arr_key *order = calloc(n + 1, sizeof *order);
    arr_key *wd = calloc(n + 1, sizeof *wd);
    double *waits = calloc(n + 1, sizeof *waits);
    size_t *running =
        calloc((size_t)ngpus * MIG_COMPUTE_SLICES + 1, sizeof *running);
    sched *s = NULL;
    ty_status rc = TY_OK;
    if (!slots || !st || !order || !wd || !waits || !running) {
        rc = ty_fail(err, TY_ENOMEM, NULL, "out of memory for the replay");
        goto done;
    }
    for (int g = 0; g < ngpus; g++)
        layout_slots(&gpus[g], g, slots, &nslots);
    s = sched_create(cfg, slots, nslots, err);
    if (!s) {
        rc = TY_EINVAL;
        goto done;
    }
    size_t m = 0, nwd = 0;
    int max_tenant = -1;
    for (size_t i = 0; i < n; i++) {
        if (recs[i].arrival < t0 || recs[i].arrival >= t1 ||
            recs[i].request.kind == SCHED_REQ_NONE)
            continue;
        order[m++] = (arr_key){recs[i].arrival, i};
        if (recs[i].withdraw > 0)
            wd[nwd++] = (arr_key){recs[i].withdraw, i};
        if (recs[i].tenant > max_tenant)
            max_tenant = recs[i].tenant;
    }
    qsort(order, m, sizeof *order, cmp_key);
    qsort(wd, nwd, sizeof *wd, cmp_key);
    for (int t = 0; t <= max_tenant; t++) {
        char tid[32];
        snprintf(tid, sizeof tid, "t%d", t);
        rc = sched_tenant_set(s, tid, 1.0, SCHED_UNLIMITED, SCHED_UNLIMITED,
                              NULL, err);
        if (rc != TY_OK)
            goto done;
    }
    out->records = m;
    out->available_slice_hours =
        (double)ngpus * MIG_COMPUTE_SLICES * (t1 - t0) / 3600.0;

    double now = t0, held_rate = 0, held_s = 0;
    double gpu_rate[ADV_MAX_GPUS] = {0}, gpu_s[ADV_MAX_GPUS] = {0};
    int ng = ngpus < ADV_MAX_GPUS ? ngpus : ADV_MAX_GPUS;
    size_t ai = 0, wi = 0, nrun = 0, nqueued = 0;
    for (;;) {
        double t_arr = ai < m ? order[ai].arrival : INFINITY;
        double t_end = INFINITY;
        for (size_t k = 0; k < nrun; k++) {
            const rec_state *r = &st[running[k]];
            if (r->run_start + r->left < t_end)
                t_end = r->run_start + r->left;
        }
        double t_tick = nqueued ? now + ADV_TICK_S : INFINITY;
        double t_wd = wi < nwd ? wd[wi].arrival : INFINITY;
        double t = fmin(fmin(t_arr, t_wd), fmin(t_end, t_tick));
        if (!(t < t1))
            break;
        held_s += held_rate * (t - now);
        for (int g = 0; g < ng; g++)
            gpu_s[g] += gpu_rate[g] * (t - now);
        now = t;
        /* Completions. */
        for (size_t k = 0; k < nrun;) {
            size_t i = running[k];
            rec_state *r = &st[i];
            if (r->run_start + r->left > now) {
                k++;
                continue;
            }
            held_slices(s, slots, r->sj, -1, gpu_rate);
            sched_job_remove(s, r->sj);
            held_rate -= r->held;
            r->state = R_DONE;
            r->left = 0;
            running[k] = running[--nrun];
        }
        /* Withdrawals of what is still queued. */
        for (; wi < nwd && wd[wi].arrival <= now; wi++) {
            rec_state *r = &st[wd[wi].i];
            if (r->state != R_QUEUED)
                continue;
            sched_job_remove(s, r->sj);
            r->wait += now - r->queued_at;
            r->state = R_DONE;
            nqueued--;
        }
        /* Arrivals. */
        for (; ai < m && order[ai].arrival <= now; ai++) {
            size_t i = order[ai].i;
            const adv_record *a = &recs[i];
            rec_state *r = &st[i];
            char id[32], tid[32];
            snprintf(id, sizeof id, "r%zu", i);
            snprintf(tid, sizeof tid, "t%d", a->tenant);
            sched_job_desc d = {.id = id,
                                .tenant = sched_tenant_find(s, tid),
                                .submit_time = a->arrival,
                                .request = a->request,
                                .serving = a->serving,
                                .gang = a->serving ? 0 : a->gang};
            ty_err e = {0};
            ty_status js = sched_job_submit(s, &d, &r->sj, &e);
            if (js == TY_ENOMEM) {
                rc = ty_fail(err, js, NULL, "%s", e.msg);
                goto done;
            }
            if (js != TY_OK) {
                r->state = R_UNSERVABLE;
                continue;
            }
            r->state = R_QUEUED;
            r->left = a->duration > 0 ? a->duration : 1;
            r->queued_at = now;
            nqueued++;
        }
        /* Passes until no preemption is outstanding: the victim stops at
         * once, and the next pass gives its slot to the pending job. */
        for (int round = 0; round < 8; round++) {
            sched_result res;
            sched_pass(s, now, &res);
            for (size_t k = 0; k < res.n_placements; k++) {
                size_t i = rec_of(s, res.placements[k].job);
                if (i >= n)
                    continue;
                rec_state *r = &st[i];
                r->wait += now - r->queued_at;
                r->state = R_RUNNING;
                r->run_start = now;
                r->held = held_slices(s, slots, r->sj, 1, gpu_rate);
                held_rate += r->held;
                running[nrun++] = i;
                nqueued--;
                r->started = 1;
            }
            for (size_t k = 0; k < res.n_preemptions; k++) {
                size_t i = rec_of(s, res.preemptions[k].victim);
                if (i >= n)
                    continue;
                rec_state *r = &st[i];
                ty_err e = {0};
                held_slices(s, slots, r->sj, -1, gpu_rate);
                if (sched_job_requeue(s, r->sj, &e) != TY_OK) {
                    held_slices(s, slots, r->sj, 1, gpu_rate);
                    continue;
                }
                r->left -= now - r->run_start;
                if (r->left < 1)
                    r->left = 1;
                held_rate -= r->held;
                r->held = 0;
                r->state = R_QUEUED;
                r->queued_at = now;
                nqueued++;
                out->preemptions++;
                for (size_t q = 0; q < nrun; q++)
                    if (running[q] == i) {
                        running[q] = running[--nrun];
                        break;
                    }
            }
            if (!res.n_preemptions)
                break;
        }
    }
    held_s += held_rate * (t1 - now);
    for (int g = 0; g < ng; g++)
        out->gpu_held_slice_hours[g] =
            (gpu_s[g] + gpu_rate[g] * (t1 - now)) / 3600.0;

    size_t nw = 0;
    double wsum = 0;
    for (size_t k = 0; k < m; k++) {
        size_t i = order[k].i;
        rec_state *r = &st[i];
        int slices = adv_record_slices(&recs[i]);
        if (r->state == R_UNSERVABLE) {
            double w = t1 - t0;
            out->unservable++;
            out->unservable_slice_hours += w * slices / 3600.0;
            out->queued_slice_hours += w * slices / 3600.0;
            continue;
        }
        if (r->state == R_QUEUED)
            r->wait += t1 - r->queued_at;
        out->served += (size_t)r->started;
        out->queued_slice_hours += r->wait * slices / 3600.0;
        waits[nw++] = r->wait;
        wsum += r->wait;
    }
    out->held_slice_hours = held_s / 3600.0;
    out->utilization = out->available_slice_hours > 0
                           ? out->held_slice_hours / out->available_slice_hours
                           : 0;
    if (nw) {
        qsort(waits, nw, sizeof *waits, cmp_double);
        out->mean_wait_s = wsum / (double)nw;
        size_t p = (size_t)ceil(0.95 * (double)nw);
        out->p95_wait_s = waits[p ? p - 1 : 0];
    }
done:
    sched_destroy(s);
    free(slots);
    free(st);
    free(order);
    free(wd);
    free(waits);
    free(running);
    return rc;
}

/* ---- enumeration ---- */

typedef struct {
    const mig_model *m;
    adv_layout *out;
    int cap;
    int count;
    mig_placed cur[MIG_COMPUTE_SLICES];
} enum_ctx;

/* Whether instance (p, start) can be added to layout inst[0..n). */
static int can_add(const mig_model *m, const mig_placed *inst, int n,
                   const mig_profile *p, int start)
{
    mig_placed tmp[MIG_COMPUTE_SLICES + 1];
    if (n >= MIG_COMPUTE_SLICES)
        return 0;
    memcpy(tmp, inst, (size_t)n * sizeof *tmp);
    tmp[n] = (mig_placed){p, start};
    int bad;
    ty_err e = {0};
    return mig_layout_check(m, tmp, n + 1, &bad, &e) == TY_OK;
}

static int is_maximal(const mig_model *m, const mig_placed *inst, int n)
{
    for (int pi = 0; pi < m->nprofiles; pi++)
        for (int st = 0; st < MIG_MEMORY_SLICES; st++)
            if (can_add(m, inst, n, &m->profiles[pi], st))
                return 0;
    return 1;
}

/* Depth first over memory slice positions: at `pos` either an instance
 * starts there or the slice stays empty. Instances come out ordered by
 * start, so each partition is produced once. */
static void enum_from(enum_ctx *c, int pos, int n)
{
    if (pos >= MIG_MEMORY_SLICES) {
        if (n > 0 && is_maximal(c->m, c->cur, n)) {
            if (c->count < c->cap) {
                adv_layout *l = &c->out[c->count];
                memset(l, 0, sizeof *l);
                l->model = c->m;
                l->mig = 1;
                l->n = n;
                memcpy(l->inst, c->cur, (size_t)n * sizeof *l->inst);
            }
            c->count++;
        }
        return;
    }
    for (int pi = 0; pi < c->m->nprofiles; pi++) {
        const mig_profile *p = &c->m->profiles[pi];
        if (can_add(c->m, c->cur, n, p, pos)) {
            c->cur[n] = (mig_placed){p, pos};
            enum_from(c, pos + p->memory_slices, n + 1);
        }
    }
    enum_from(c, pos + 1, n);
}

int adv_enumerate(const mig_model *m, adv_layout *out, int cap)
{
    enum_ctx c = {.m = m, .out = out, .cap = cap};
    if (m)
        enum_from(&c, 0, 0);
    return c.count;
}

/* ---- search ---- */

int adv_layout_equal(const adv_layout *a, const adv_layout *b)
{
    if (a->model != b->model || !a->mig != !b->mig)
        return 0;
    if (!a->mig)
        return 1;
    if (a->n != b->n)
        return 0;
    for (int i = 0; i < a->n; i++) {
        int found = 0;
        for (int j = 0; j < b->n && !found; j++)
            found = a->inst[i].profile == b->inst[j].profile &&
                    a->inst[i].start == b->inst[j].start;
        if (!found)
            return 0;
    }
    return 1;
}

/* Whether two layouts cut the same slices (the same profiles, as many of
 * each, wherever they start): the scheduler sees the same slots, so a
 * replay gives the same figures. */
static int same_slices(const adv_layout *a, const adv_layout *b)
{
    if (a->model != b->model || !a->mig != !b->mig || a->n != b->n)
        return 0;
    for (int i = 0; a->mig && i < a->n; i++) {
        int ca = 0, cb = 0;
        for (int j = 0; j < a->n; j++) {
            ca += a->inst[j].profile == a->inst[i].profile;
            cb += b->inst[j].profile == a->inst[i].profile;
        }
        if (ca != cb)
            return 0;
    }
    return 1;
}

/* The search's candidates for model m into cand: its maximal partitions,
 * one per set of slices (the first placement found), then MIG off.
 * Returns how many. */
static int candidates(const mig_model *m, adv_layout *cand)
{
    int nc = adv_enumerate(m, cand, ADV_MAX_LAYOUTS);
    if (nc > ADV_MAX_LAYOUTS)
        nc = ADV_MAX_LAYOUTS;
    int k = 0;
    for (int c = 0; c < nc; c++) {
        int dup = 0;
        for (int d = 0; d < k && !dup; d++)
            dup = same_slices(&cand[d], &cand[c]);
        if (!dup)
            cand[k++] = cand[c];
    }
    cand[k] = (adv_layout){.model = m, .mig = 0};
    return k + 1;
}

/* 1 when x is better than y: fewer queued slice-hours, then higher
 * utilization (equal within a rounding tolerance: no churn for
 * nothing). */
static int better(const adv_result *x, const adv_result *y)
{
    const double eps = 1e-6;
    if (x->queued_slice_hours < y->queued_slice_hours - eps)
        return 1;
    if (x->queued_slice_hours > y->queued_slice_hours + eps)
        return 0;
    return x->utilization > y->utilization + eps;
}

ty_status adv_search(const sched_config *cfg, const adv_layout *current,
                     int ngpus, const adv_record *recs, size_t n, double t0,
                     double t1, adv_layout *advised, adv_result *cur,
                     adv_result *best, ty_err *err)
{
    adv_layout *cand = calloc(ADV_MAX_LAYOUTS + 1, sizeof *cand);
    adv_layout *trial = calloc((size_t)ngpus + 1, sizeof *trial);
    ty_status rc = TY_OK;
    if (!cand || !trial) {
        rc = ty_fail(err, TY_ENOMEM, NULL, "out of memory for the search");
        goto done;
    }
    memcpy(advised, current, (size_t)ngpus * sizeof *advised);
    rc = adv_replay(cfg, current, ngpus, recs, n, t0, t1, cur, err);
    if (rc != TY_OK)
        goto done;
    *best = *cur;

    /* Uniform starts: every GPU of a model cut the same way. */
    for (int g = 0; g < ngpus; g++) {
        const mig_model *mm = current[g].model;
        int first = 1;
        for (int h = 0; h < g; h++)
            first &= current[h].model != mm;
        if (!mm || !first)
            continue;
        int nc = candidates(mm, cand);
        for (int c = 0; c < nc; c++) {
            memcpy(trial, advised, (size_t)ngpus * sizeof *trial);
            for (int h = 0; h < ngpus; h++)
                if (current[h].model == mm) {
                    trial[h] = cand[c];
                    trial[h].memory_bytes = current[h].memory_bytes;
                }
            adv_result r;
            rc = adv_replay(cfg, trial, ngpus, recs, n, t0, t1, &r, err);
            if (rc != TY_OK)
                goto done;
            if (better(&r, best)) {
                *best = r;
                memcpy(advised, trial, (size_t)ngpus * sizeof *trial);
            }
        }
    }

    /* Coordinate descent, GPU by GPU. */
    for (int round = 0; round < 4; round++) {
        int changed = 0;
        for (int g = 0; g < ngpus; g++) {
            const mig_model *mm = current[g].model;
            if (!mm)
                continue;
            int nc = candidates(mm, cand);
            for (int c = 0; c < nc; c++) {
                if (same_slices(&cand[c], &advised[g]))
                    continue;
                memcpy(trial, advised, (size_t)ngpus * sizeof *trial);
                trial[g] = cand[c];
                trial[g].memory_bytes = current[g].memory_bytes;
                adv_result r;
                rc = adv_replay(cfg, trial, ngpus, recs, n, t0, t1, &r, err);
                if (rc != TY_OK)
                    goto done;
                if (better(&r, best)) {
                    *best = r;
                    advised[g] = trial[g];
                    changed = 1;
                }
            }
        }
        if (!changed)
            break;
    }
    /* A GPU whose change buys nothing goes back to its current layout. */
    for (int g = 0; g < ngpus; g++) {
        if (adv_layout_equal(&advised[g], &current[g]))
            continue;
        memcpy(trial, advised, (size_t)ngpus * sizeof *trial);
        trial[g] = current[g];
        adv_result r;
        rc = adv_replay(cfg, trial, ngpus, recs, n, t0, t1, &r, err);
        if (rc != TY_OK)
            goto done;
        if (!better(best, &r)) {
            *best = r;
            advised[g] = current[g];
        }
    }
done:
    free(cand);
    free(trial);
    return rc;
}
