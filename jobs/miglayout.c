/*
 * miglayout.c - a GPU's MIG layout changed while the server runs: the
 * drain, the re-cut and the record of each change (see miglayout.h).
 *
 * Invariants: a GPU has at most one change draining; while it drains, its
 * slots are SCHED_SLOT_DRAINING in the scheduler (every other slot in use,
 * or retired where an earlier re-cut retired it); the scheduler's slot
 * list and the inventory's have the same length and order at every
 * moment mu is free. Everything here runs under the service's mu.
 */
#include "jobs/miglayout.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "common/ids.h"
#include "common/jsonutil.h"
#include "common/log.h"
#include "jobs/state.h"
#include "store/store.h"

#define OVERRIDE_FILE "mig-layout.json"
#define OVERRIDE_MAX_BYTES (1u << 20)

typedef enum {
    CH_DRAINING = 0,
    CH_RECUT, /* seen only inside one call: the re-cut runs under mu */
    CH_DONE,
    CH_FAILED,
} ch_state;

static const char *const ch_state_names[] = {"draining", "recut", "done",
                                             "failed"};

/* The latest change of one GPU. */
typedef struct {
    int used;
    char id[TY_ID_MAX];
    ch_state state;
    jobs_mig_change req;
    json_t *before; /* {"mig": bool, "instances": [...]} */
    json_t *after;
    json_t *dropped; /* ids of queued jobs failed by the re-cut */
    char created_at[32];
    char finished_at[32];
    double deadline; /* monotonic */
    char error[512];
} mig_rec;

struct jobs_miglayout {
    mig_rec recs[INV_MAX_GPUS]; /* by inventory GPU index */
    json_t *overrides;          /* the override file's "gpus" object */
};

/* ---- parsing ---- */

/* The inventory's GPU whose index (as GET /v1/devices shows it) is idx,
 * or -1. */
static int gpu_by_index(const inventory *inv, int64_t idx)
{
    for (int g = 0; inv && g < inv->ngpus; g++)
        if (inv->gpus[g].index == idx)
            return g;
    return -1;
}

ty_status jobs_mig_change_parse(const json_t *body, const inventory *inv,
                                jobs_mig_change *out, ty_err *err)
{
    static const char *const keys[] = {"gpu",   "mig",       "instances",
                                       "drain", "timeout_s", NULL};
    memset(out, 0, sizeof *out);
    ty_status s = tyjson_check_keys(body, keys, "", err);
    int64_t idx = 0;
    int mig = 1;
    const char *drain = NULL;
    if (s == TY_OK)
        s = tyjson_get_int(body, "gpu", "", 1, 0, INT32_MAX, 0, &idx, err);
    if (s == TY_OK)
        s = tyjson_get_bool(body, "mig", "", 0, 1, &mig, err);
    if (s == TY_OK)
        s = tyjson_get_string(body, "drain", "", 0, 16, "wait", &drain, err);
    if (s == TY_OK)
        s = tyjson_get_number(body, "timeout_s", "", 0, 1,
                              JOBS_MIG_TIMEOUT_MAX_S,
                              JOBS_MIG_TIMEOUT_DEFAULT_S, &out->timeout_s, err);
    if (s != TY_OK)
        return s;
    if (!strcmp(drain, "wait"))
        out->drain = JOBS_MIG_DRAIN_WAIT;
    else if (!strcmp(drain, "preempt"))
        out->drain = JOBS_MIG_DRAIN_PREEMPT;
    else
        return ty_fail(err, TY_EINVAL, "drain",
                       "drain must be \"wait\" (the running jobs finish) or "
                       "\"preempt\" (they checkpoint and stop)");
    int g = gpu_by_index(inv, idx);
    if (g < 0)
        return ty_fail(err, TY_ENOTFOUND, "gpu", "this host has no GPU %lld",
                       (long long)idx);
    const inv_gpu *gpu = &inv->gpus[g];
    out->gpu = g;
    out->mig = mig;
    const json_t *insts = json_object_get(body, "instances");
    if (insts && !json_is_array(insts))
        return ty_fail(err, TY_EINVAL, "instances",
                       "instances must be an array of {\"profile\", "
                       "\"start\"}");
    size_t n = insts ? json_array_size(insts) : 0;
    const mig_model *m = mig_model_find(gpu->model);
    if (!mig) {
        if (n)
            return ty_fail(err, TY_EINVAL, "instances",
                           "instances need \"mig\": true");
        return TY_OK;
    }
    if (!m) {
        char known[128];
        mig_model_names(known, sizeof known);
        return ty_fail(err, TY_EINVAL, "mig",
                       "GPU %lld (%s) is not MIG-capable: trainyard knows "
                       "MIG profiles for %s",
                       (long long)idx, gpu->name, known);
    }
    if (!insts)
        return ty_fail(err, TY_EINVAL, "instances",
                       "instances is required with \"mig\": true (the GPU "
                       "instances to create, as in gpu/sim/*.json)");
    if ((s = inv_instances_parse(m, insts, "instances", NULL, out->inst,
                                 &out->n, err)) != TY_OK)
        return s;
    return TY_OK;
}

/* ---- documents ---- */

static json_t *layout_doc(int mig, const mig_placed *inst, int n)
{
    json_t *a = json_array();
    for (int i = 0; mig && i < n; i++)
        json_array_append_new(a, json_pack("{s:s, s:i}", "profile",
                                           inst[i].profile->name, "start",
                                           inst[i].start));
    return json_pack("{s:b, s:o}", "mig", mig, "instances", a);
}

static json_t *layout_now(jobs_service *r, int g)
{
    return json_pack("{s:b, s:o}", "mig", r->inv->gpus[g].mig_enabled,
                     "instances", inv_gpu_layout_json(r->inv, g));
}

/* The jobs holding GPU g's slots (what a drain waits on). */
static json_t *holders(jobs_service *r, int g)
{
    json_t *a = json_array();
    for (int k = 0; k < r->inv->nslots; k++) {
        if (r->inv->slots[k].gpu != g)
            continue;
        int j = sched_slot_holder(r->sched, k);
        sched_job_info info;
        if (j >= 0 && sched_job_get(r->sched, j, &info) == TY_OK)
            json_array_append_new(a, json_string(info.id));
    }
    return a;
}

static json_t *rec_json(jobs_service *r, int g, const mig_rec *c)
{
    return json_pack(
        "{s:s, s:i, s:s, s:b, s:s, s:f, s:O, s:O, s:o, s:O, s:s, s:s?, "
        "s:s?}",
        "id", c->id, "gpu", r->inv->gpus[g].index, "state",
        ch_state_names[c->state], "applied", c->state == CH_DONE, "drain",
        c->req.drain == JOBS_MIG_DRAIN_PREEMPT ? "preempt" : "wait",
        "timeout_s", c->req.timeout_s, "before", c->before, "after", c->after,
        "waiting_on", c->state == CH_DRAINING ? holders(r, g) : json_array(),
        "dropped_jobs", c->dropped, "created_at", c->created_at, "finished_at",
        c->finished_at[0] ? c->finished_at : NULL, "error",
        c->error[0] ? c->error : NULL);
}

static json_t *gpu_json(jobs_service *r, int g)
{
    const mig_rec *c = r->migl ? &r->migl->recs[g] : NULL;
    return json_pack("{s:i, s:s?, s:o, s:o}", "gpu", r->inv->gpus[g].index,
                     "model",
                     r->inv->gpus[g].model[0] ? r->inv->gpus[g].model : NULL,
                     "layout", layout_now(r, g), "change",
                     c && c->used ? rec_json(r, g, c) : json_null());
}

/* ---- the scheduler's slot list ---- */

/* Gives the scheduler the inventory's slots with their states: retired
 * where the inventory says so, draining on every GPU with a change
 * draining. dropped: as sched_slots_replace. */
static ty_status sched_sync(jobs_service *r, char (*dropped)[TY_ID_MAX],
                            size_t cap, size_t *nd, ty_err *err)
{
    int n = r->inv->nslots;
    sched_slot *sl = calloc((size_t)n + 1, sizeof *sl);
    uint8_t *st = calloc((size_t)n + 1, sizeof *st);
    if (!sl || !st) {
        free(sl);
        free(st);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    for (int k = 0; k < n; k++) {
        const inv_slot *s = &r->inv->slots[k];
        sl[k] =
            (sched_slot){.gpu = s->gpu,
                         .is_mig = s->kind == INV_SLOT_MIG,
                         .profile = s->profile,
                         .compute_slices = s->retired ? 1 : s->compute_slices,
                         .memory_bytes = s->memory_bytes,
                         .node = s->node,
                         .domain = s->domain};
        if (s->retired)
            st[k] = SCHED_SLOT_RETIRED;
        else if (r->migl && r->migl->recs[s->gpu].used &&
                 r->migl->recs[s->gpu].state == CH_DRAINING)
            st[k] = SCHED_SLOT_DRAINING;
    }
    ty_status s = sched_slots_replace(r->sched, sl, st, (size_t)n, NULL,
                                      dropped, cap, nd, err);
    free(sl);
    free(st);
    if (s == TY_OK)
        r->nslots = n;
    return s;
}

/* ---- the override file ---- */

static void override_path(const jobs_service *r, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s", r->env.data_dir, OVERRIDE_FILE);
}

/* Writes every re-cut GPU's layout to <data>/mig-layout.json. */
static void override_save(jobs_service *r, int g)
{
    if (!r->migl->overrides)
        r->migl->overrides = json_object();
    char key[16], path[PATH_MAX + 32];
    snprintf(key, sizeof key, "%d", r->inv->gpus[g].index);
    json_object_set_new(r->migl->overrides, key, layout_now(r, g));
    json_t *doc = json_pack("{s:s, s:O}", "source", r->inv->source_label,
                            "gpus", r->migl->overrides);
    char *text = doc ? json_dumps(doc, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(doc);
    override_path(r, path, sizeof path);
    ty_err err = {0};
    if (!text || fs_write_atomic(path, text, strlen(text), 0644, &err) != TY_OK)
        log_msg("error",
                "mig-layout: the new layout of GPU %d is applied "
                "but not saved (a restart goes back to the old one): %s",
                r->inv->gpus[g].index, text ? err.msg : "out of memory");
    free(text);
}

static ty_status books(jobs_service *r)
{
    if (!r->migl)
        r->migl = calloc(1, sizeof *r->migl);
    return r->migl ? TY_OK : TY_ENOMEM;
}

void miglayout_load(jobs_service *r)
{
    if (!r->inv || r->inv->source != INV_SOURCE_SIM || !r->env.data_dir[0])
        return;
    char path[PATH_MAX + 32];
    override_path(r, path, sizeof path);
    if (!fs_exists(path))
        return;
    char *text = NULL;
    size_t len = 0;
    ty_err err = {0};
    json_t *doc = NULL;
    if (fs_read_all(path, OVERRIDE_MAX_BYTES, &text, &len, &err) == TY_OK)
        doc = json_loadb(text, len, 0, NULL);
    free(text);
    const char *src = json_string_value(json_object_get(doc, "source"));
    json_t *gpus = json_object_get(doc, "gpus");
    if (!doc || !json_is_object(gpus) || !src) {
        log_msg("warn", "mig-layout: %s is not a layout file; ignored",
                OVERRIDE_FILE);
        json_decref(doc);
        return;
    }
    if (strcmp(src, r->inv->source_label) != 0) {
        log_msg("warn", "mig-layout: %s was written for %s, not %s; ignored",
                OVERRIDE_FILE, src, r->inv->source_label);
        json_decref(doc);
        return;
    }
    if (books(r) != TY_OK) {
        json_decref(doc);
        return;
    }
    const char *key;
    json_t *lay;
    json_object_foreach (gpus, key, lay) {
        json_t *body = json_deep_copy(lay);
        char *end = NULL;
        long idx = strtol(key, &end, 10);
        jobs_mig_change c;
        ty_status s = TY_EINVAL;
        if (json_is_object(body) && end && !*end) {
            json_object_set_new(body, "gpu", json_integer(idx));
            s = jobs_mig_change_parse(body, r->inv, &c, &err);
            if (s == TY_OK)
                s = inv_gpu_recut(r->inv, c.gpu, c.mig, c.inst, c.n, &err);
        }
        json_decref(body);
        if (s != TY_OK) {
            log_msg("warn", "mig-layout: GPU %s's saved layout not applied: %s",
                    key, err.msg);
            continue;
        }
        if (!r->migl->overrides)
            r->migl->overrides = json_object();
        json_object_set(r->migl->overrides, key, lay);
        log_msg("info", "mig-layout: GPU %s takes its saved layout (%s)", key,
                OVERRIDE_FILE);
    }
    json_decref(doc);
}

ty_status miglayout_sched_init(jobs_service *r, ty_err *err)
{
    for (int k = 0; r->inv && k < r->inv->nslots; k++)
        if (r->inv->slots[k].retired)
            return sched_sync(r, NULL, 0, NULL, err);
    return TY_OK;
}

void miglayout_free(jobs_service *r)
{
    if (!r->migl)
        return;
    for (int g = 0; g < INV_MAX_GPUS; g++) {
        json_decref(r->migl->recs[g].before);
        json_decref(r->migl->recs[g].after);
        json_decref(r->migl->recs[g].dropped);
    }
    json_decref(r->migl->overrides);
    free(r->migl);
    r->migl = NULL;
}

/* ---- the change's life ---- */

static void finish(jobs_service *r, int g, mig_rec *c, ch_state to,
                   const char *why)
{
    c->state = to;
    ty_now_iso(c->finished_at);
    if (why)
        snprintf(c->error, sizeof c->error, "%s", why);
    log_event(to == CH_DONE ? "info" : "warn", "mig_layout",
              json_pack("{s:s, s:i, s:s, s:s?}", "change", c->id, "gpu",
                        r->inv->gpus[g].index, "state", ch_state_names[to],
                        "error", why));
}

/* Change c failed while draining: its GPU's slots go back in use. */
static void fail_drain(jobs_service *r, int g, mig_rec *c, const char *why)
{
    finish(r, g, c, CH_FAILED, why);
    ty_err err = {0};
    if (sched_sync(r, NULL, 0, NULL, &err) != TY_OK)
        log_msg("error", "mig-layout: GPU %d stays drained: %s",
                r->inv->gpus[g].index, err.msg);
}

/* Whether run w holds a slot of GPU g (any member's, for a gang). */
static int on_gpu(jobs_service *r, const job_run *w, int g)
{
    sched_job_info info;
    if (w->slot < 0 || sched_job_get(r->sched, w->sjob, &info) != TY_OK)
        return 0;
    int n = info.gang_slots ? info.gang : 1;
    for (int m = 0; m < n; m++) {
        int k = info.gang_slots ? info.gang_slots[m] : w->slot;
        if (k >= 0 && k < r->inv->nslots && r->inv->slots[k].gpu == g)
            return 1;
    }
    return 0;
}

/* Stops every training job on GPU g's slots: it checkpoints and is
 * requeued (finish_worker's preempted path). Serving replicas are not
 * stopped here: their deployments move them, make before break (a
 * replacement on a slot in use first; deploy/replicas.c). */
static void preempt_gpu(jobs_service *r, int g)
{
    for (int i = 0; i < r->cap; i++) {
        job_run *w = &r->runs[i];
        if (!w->used || w->preempting || w->cancel || w->kind != &r->kinds[0] ||
            !on_gpu(r, w, g))
            continue;
        w->preempting = 1;
        r->exec->preempt(r->exec->impl, i);
        log_event("info", "job_preempt",
                  json_pack("{s:s, s:s, s:i}", "job", w->job_id, "for",
                            "mig-layout", "slot", w->slot));
    }
}

static int gpu_idle(jobs_service *r, int g)
{
    for (int k = 0; k < r->inv->nslots; k++)
        if (r->inv->slots[k].gpu == g &&
            (sched_slot_holder(r->sched, k) >= 0 || r->inv->slots[k].job_id[0]))
            return 0;
    return 1;
}

/* A queued serving replica that the new layout of GPU g would leave with
 * no slot at all (its deployment cannot run it): its id into who, 1; 0
 * when none. */
static int replica_stranded(jobs_service *r, int g, const mig_rec *c, char *who,
                            size_t n)
{
    size_t q = sched_queued_count(r->sched);
    if (!q)
        return 0;
    /* the slots after the re-cut: the other GPUs' in use, the new ones */
    sched_slot *sl =
        calloc((size_t)r->inv->nslots + MIG_COMPUTE_SLICES + 1, sizeof *sl);
    sched_wait *w = calloc(q, sizeof *w);
    int ns = 0, found = 0;
    if (!sl || !w)
        goto done;
    for (int k = 0; k < r->inv->nslots; k++) {
        const inv_slot *s = &r->inv->slots[k];
        if (s->gpu != g && !s->retired)
            sl[ns++] = (sched_slot){.gpu = s->gpu,
                                    .is_mig = s->kind == INV_SLOT_MIG,
                                    .profile = s->profile,
                                    .compute_slices = s->compute_slices,
                                    .memory_bytes = s->memory_bytes,
                                    .node = s->node,
                                    .domain = s->domain};
    }
    if (!c->req.mig)
        sl[ns++] = (sched_slot){.gpu = g,
                                .compute_slices = MIG_COMPUTE_SLICES,
                                .memory_bytes = r->inv->gpus[g].memory_bytes,
                                .node = r->inv->gpus[g].node,
                                .domain = r->inv->gpus[g].nvlink_domain};
    for (int i = 0; c->req.mig && i < c->req.n; i++) {
        const mig_profile *p = c->req.inst[i].profile;
        sl[ns++] = (sched_slot){.gpu = g,
                                .is_mig = 1,
                                .profile = p->name,
                                .compute_slices = p->compute_slices,
                                .memory_bytes = p->memory_mib << 20,
                                .node = r->inv->gpus[g].node,
                                .domain = r->inv->gpus[g].nvlink_domain};
    }
    sched_config cfg = {
        .max_cpu_jobs = -1, .max_serving = -1, .max_serving_per_tenant = -1};
    ty_err err = {0};
    sched *tmp = sched_create(&cfg, sl, (size_t)ns, &err);
    if (!tmp)
        goto done;
    size_t nw = sched_queue_report(r->sched, w, q);
    for (size_t i = 0; i < nw && !found; i++) {
        sched_job_info info;
        if (sched_job_get(r->sched, w[i].job, &info) != TY_OK || !info.serving)
            continue;
        if (sched_request_check(tmp, -1, &info.request, &err) != TY_OK) {
            snprintf(who, n, "%s", info.id);
            found = 1;
        }
    }
    sched_destroy(tmp);
done:
    free(sl);
    free(w);
    return found;
}

/* GPU g is idle: re-cut it, tell the scheduler, fail the queued training
 * jobs nothing can run any more, save the layout. */
static void recut(jobs_service *r, int g, mig_rec *c)
{
    char who[TY_ID_MAX], why[512];
    if (replica_stranded(r, g, c, who, sizeof who)) {
        snprintf(why, sizeof why,
                 "replica %s of a deployment is queued for a slice the new "
                 "layout removes from every GPU; change or scale down its "
                 "deployment first",
                 who);
        fail_drain(r, g, c, why);
        return;
    }
    c->state = CH_RECUT;
    ty_err err = {0};
    if (inv_gpu_recut(r->inv, g, c->req.mig, c->req.inst, c->req.n, &err) !=
        TY_OK) {
        fail_drain(r, g, c, err.msg);
        return;
    }
    size_t cap = sched_queued_count(r->sched) + 1, nd = 0;
    char(*dropped)[TY_ID_MAX] = calloc(cap, sizeof *dropped);
    c->state = CH_DONE; /* sched_sync: the GPU is no longer draining */
    ty_status s = dropped ? sched_sync(r, dropped, cap, &nd, &err)
                          : ty_fail(&err, TY_ENOMEM, NULL, "out of memory");
    if (s != TY_OK) {
        /* the inventory has the new layout; the scheduler keeps the
         * drained one until a restart (nothing is placed there) */
        c->state = CH_DRAINING;
        finish(r, g, c, CH_FAILED, err.msg);
        free(dropped);
        return;
    }
    for (size_t i = 0; i < nd && i < cap; i++) {
        snprintf(why, sizeof why,
                 "the MIG layout change %s of GPU %d left no slot that "
                 "satisfies the job's resources",
                 c->id, r->inv->gpus[g].index);
        store_job_finish(r->env.store, dropped[i], JOB_FAILED, why, NULL, &err);
        svc_log_transition(r, dropped[i], JOB_FAILED, why);
        json_array_append_new(c->dropped, json_string(dropped[i]));
    }
    free(dropped);
    finish(r, g, c, CH_DONE, NULL);
    override_save(r, g);
}

void miglayout_tick(jobs_service *r)
{
    if (!r->migl || !r->inv)
        return;
    double now = svc_now();
    for (int g = 0; g < r->inv->ngpus && g < INV_MAX_GPUS; g++) {
        mig_rec *c = &r->migl->recs[g];
        if (!c->used || c->state != CH_DRAINING)
            continue;
        if (gpu_idle(r, g)) {
            recut(r, g, c);
        } else if (now >= c->deadline) {
            char why[256];
            snprintf(why, sizeof why,
                     "timed out after %g s waiting for the jobs on GPU %d "
                     "to end",
                     c->req.timeout_s, r->inv->gpus[g].index);
            fail_drain(r, g, c, why);
        } else if (c->req.drain == JOBS_MIG_DRAIN_PREEMPT) {
            preempt_gpu(r, g);
        }
    }
}

/* A real GPU: what to run, never run here. */
static json_t *manual_doc(jobs_service *r, const jobs_mig_change *c)
{
    const inv_gpu *gpu = &r->inv->gpus[c->gpu];
    char cmds[MIG_CMDS_MAX][MIG_CMD_MAX];
    int n = mig_smi_commands(gpu->index, gpu->mig_enabled, c->mig, c->inst,
                             c->n, cmds);
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_string(cmds[i]));
    return json_pack(
        "{s:i, s:s, s:b, s:o, s:o, s:o, s:s}", "gpu", gpu->index, "state",
        "manual", "applied", 0, "before", layout_now(r, c->gpu), "after",
        layout_doc(c->mig, c->inst, c->n), "commands", a, "reason",
        "the server does not change a real GPU's MIG layout (NVML's "
        "GPU-instance calls are not built); stop the jobs on the GPU, run "
        "these commands as root, then restart the server");
}

ty_status jobs_mig_layout_apply(jobs_service *r, const jobs_mig_change *c,
                                json_t **out, int *http_status, ty_err *err)
{
    *out = NULL;
    if (!r->inv || c->gpu < 0 || c->gpu >= r->inv->ngpus ||
        c->gpu >= INV_MAX_GPUS)
        return ty_fail(err, TY_ENOTFOUND, "gpu", "this host has no such GPU");
    pthread_mutex_lock(&r->mu);
    ty_status s = TY_OK;
    if (r->inv->source == INV_SOURCE_NVML) {
        *out = manual_doc(r, c);
        *http_status = 200;
        goto done;
    }
    if (r->inv->source != INV_SOURCE_SIM) {
        s = ty_fail(err, TY_ECONFLICT, "gpu",
                    "this inventory's layout is not the server's to change "
                    "(a cluster's GRES change on the cluster)");
        goto done;
    }
    if ((s = books(r)) != TY_OK) {
        s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        goto done;
    }
    mig_rec *rec = &r->migl->recs[c->gpu];
    if (rec->used && rec->state == CH_DRAINING) {
        s = ty_fail(err, TY_ECONFLICT, "gpu",
                    "GPU %d is draining for change %s; wait for it to end",
                    r->inv->gpus[c->gpu].index, rec->id);
        goto done;
    }
    mig_rec n = {.used = 1, .state = CH_DRAINING, .req = *c};
    if ((s = ty_id_new("mig", n.id, err)) != TY_OK)
        goto done;
    n.before = layout_now(r, c->gpu);
    n.after = layout_doc(c->mig, c->inst, c->n);
    n.dropped = json_array();
    ty_now_iso(n.created_at);
    n.deadline = svc_now() + c->timeout_s;
    json_decref(rec->before);
    json_decref(rec->after);
    json_decref(rec->dropped);
    *rec = n;
    /* (a) no new placement on the GPU from now on */
    if ((s = sched_sync(r, NULL, 0, NULL, err)) != TY_OK) {
        finish(r, c->gpu, rec, CH_FAILED, err->msg);
        goto done;
    }
    log_event(
        "info", "mig_layout",
        json_pack("{s:s, s:i, s:s, s:s}", "change", rec->id, "gpu",
                  r->inv->gpus[c->gpu].index, "state", "draining", "drain",
                  c->drain == JOBS_MIG_DRAIN_PREEMPT ? "preempt" : "wait"));
    /* (b) the running jobs end or are stopped; (c) the re-cut, at once
     * when the GPU is idle, else from the tick that finds it so */
    if (gpu_idle(r, c->gpu))
        recut(r, c->gpu, rec);
    else if (c->drain == JOBS_MIG_DRAIN_PREEMPT)
        preempt_gpu(r, c->gpu);
    if (rec->state == CH_FAILED) {
        s = ty_fail(err, TY_ECONFLICT, "instances", "%s", rec->error);
        goto done;
    }
    *out = rec_json(r, c->gpu, rec);
    *http_status = rec->state == CH_DRAINING ? 202 : 200;
done:
    pthread_mutex_unlock(&r->mu);
    if (s == TY_OK && !*out)
        s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    if (s == TY_OK)
        supervisor_wake(r->sup);
    return s;
}

json_t *jobs_mig_layout_list(jobs_service *r)
{
    json_t *a = json_array();
    if (!r->inv)
        return json_pack("{s:o}", "gpus", a);
    pthread_mutex_lock(&r->mu);
    for (int g = 0; g < r->inv->ngpus && g < INV_MAX_GPUS; g++)
        json_array_append_new(a, gpu_json(r, g));
    pthread_mutex_unlock(&r->mu);
    return json_pack("{s:s, s:o}", "source", r->inv->source_label, "gpus", a);
}

ty_status jobs_mig_layout_get(jobs_service *r, int idx, json_t **out,
                              ty_err *err)
{
    int g = gpu_by_index(r->inv, idx);
    if (g < 0 || g >= INV_MAX_GPUS)
        return ty_fail(err, TY_ENOTFOUND, "gpu", "this host has no GPU %d",
                       idx);
    pthread_mutex_lock(&r->mu);
    *out = gpu_json(r, g);
    pthread_mutex_unlock(&r->mu);
    return *out ? TY_OK : ty_fail(err, TY_ENOMEM, NULL, "out of memory");
}
