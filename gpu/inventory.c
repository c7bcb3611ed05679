/*
 * inventory.c - the device inventory's model, the simulated source, the
 * slot list and the JSON view (see inventory.h; NVML is in nvml.c).
 *
 * Invariants once an inventory is built: every MIG device belongs to a GPU
 * with MIG on; slots are in GPU order and point at GPUs and MIG devices of
 * this inventory; a simulated layout satisfies mig_layout_check.
 */
#include "gpu/inventory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "common/jsonutil.h"
#include "common/sha256.h"

#define SIM_MAX_FILE_BYTES (1u << 20)
#define SIM_MAX_MEMORY_GB 16384

ty_status inv_empty(inv_source source, const char *label, inventory **out,
                    ty_err *err)
{
    *out = NULL;
    inventory *inv = calloc(1, sizeof *inv);
    if (!inv)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory for the inventory");
    inv->source = source;
    snprintf(inv->source_label, sizeof inv->source_label, "%s", label);
    pthread_mutex_init(&inv->mu, NULL);
    *out = inv;
    return TY_OK;
}

void inv_destroy(inventory *inv)
{
    if (!inv)
        return;
    for (int i = 0; i < inv->ngpus; i++)
        free(inv->gpus[i].migs);
    free(inv->gpus);
    free(inv->slots);
    for (int i = 0; i < inv->nold_migs; i++)
        free(inv->old_migs[i]);
    free(inv->old_migs);
    if (inv->source_close)
        inv->source_close(inv->source_ctx);
    pthread_mutex_destroy(&inv->mu);
    free(inv);
}

ty_status inv_build_slots(inventory *inv, ty_err *err)
{
    int n = 0;
    for (int g = 0; g < inv->ngpus; g++)
        n += inv->gpus[g].mig_enabled ? inv->gpus[g].nmig : 1;
    /* a simulated GPU may be re-cut: room for each to grow to 7 slots */
    int cap = n + (inv->source == INV_SOURCE_SIM
                       ? inv->ngpus * (MIG_COMPUTE_SLICES - 1)
                       : 0);
    free(inv->slots);
    inv->slots = cap ? calloc((size_t)cap, sizeof *inv->slots) : NULL;
    if (cap && !inv->slots)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory for the slots");
    inv->nslots = n;
    inv->slot_cap = cap;
    int k = 0;
    for (int g = 0; g < inv->ngpus; g++) {
        inv_gpu *gpu = &inv->gpus[g];
        if (!gpu->mig_enabled) {
            inv_slot *s = &inv->slots[k++];
            s->kind = INV_SLOT_GPU;
            s->gpu = g;
            s->mig = -1;
            s->uuid = gpu->uuid;
            s->profile = NULL;
            s->compute_slices = MIG_COMPUTE_SLICES;
            s->memory_bytes = gpu->memory_bytes;
            s->node = gpu->node;
            s->domain = gpu->nvlink_domain;
            continue;
        }
        for (int m = 0; m < gpu->nmig; m++) {
            inv_slot *s = &inv->slots[k++];
            s->kind = INV_SLOT_MIG;
            s->gpu = g;
            s->mig = m;
            s->uuid = gpu->migs[m].uuid;
            s->profile = gpu->migs[m].profile;
            s->compute_slices = gpu->migs[m].compute_slices;
            s->memory_bytes = gpu->migs[m].memory_bytes;
            s->node = gpu->node;
            s->domain = gpu->nvlink_domain;
        }
    }
    return TY_OK;
}

/* ---- the simulated source ---- */

/* A UUID-shaped string made from the SHA-256 of seed: "GPU-xxxxxxxx-xxxx-
 * xxxx-xxxx-xxxxxxxxxxxx". The same GPU (or MIG device) of the same file
 * gets the same one on every start. */
static void fake_uuid(const char *prefix, const char *seed, char *out, size_t n)
{
    uint8_t d[32];
    char hex[65];
    sha256_digest(seed, strlen(seed), d);
    sha256_hex(d, hex);
    snprintf(out, n, "%s-%.8s-%.4s-%.4s-%.4s-%.12s", prefix, hex, hex + 8,
             hex + 12, hex + 16, hex + 20);
}

/* Parses gpus[i] into gpu. path is "gpus[i]". */
ty_status inv_instances_parse(const mig_model *m, const json_t *insts,
                              const char *field, const char *where,
                              mig_placed *out, int *n, ty_err *err)
{
    *n = 0;
    if (!where)
        where = m->model;
    const size_t count = json_array_size(insts);
    if (count > MIG_COMPUTE_SLICES)
        return ty_fail(err, TY_EINVAL, field,
                       "%s: %zu instances, but a GPU holds at most %d", where,
                       count, MIG_COMPUTE_SLICES);
    char ipath[128], ifield[160];
    for (size_t i = 0; i < count; i++) {
        static const char *const ikeys[] = {"profile", "start", NULL};
        tyjson_path_index(ipath, sizeof ipath, field, i);
        const json_t *io = json_array_get(insts, i);
        const char *pname = NULL;
        int64_t start = 0;
        ty_status s = tyjson_check_keys(io, ikeys, ipath, err);
        if (s == TY_OK)
            s = tyjson_get_string(io, "profile", ipath, 1, 31, NULL, &pname,
                                  err);
        if (s == TY_OK)
            s = tyjson_get_int(io, "start", ipath, 1, 0, MIG_MEMORY_SLICES - 1,
                               0, &start, err);
        if (s != TY_OK)
            return s;
        const mig_profile *p = mig_profile_find(m, pname);
        if (!p) {
            char names[160];
            mig_profile_names(m, names, sizeof names);
            tyjson_path(ifield, sizeof ifield, ipath, "profile");
            return ty_fail(err, TY_EINVAL, ifield,
                           "%s: a %s has no MIG profile '%s'; its profiles "
                           "are %s",
                           ipath, m->model, pname, names);
        }
        out[i].profile = p;
        out[i].start = (int)start;
    }
    int bad = -1;
    ty_err lerr = {0};
    if (mig_layout_check(m, out, (int)count, &bad, &lerr) != TY_OK) {
        tyjson_path_index(ipath, sizeof ipath, field, (size_t)bad);
        tyjson_path(ifield, sizeof ifield, ipath, "start");
        if (strcmp(where, m->model))
            return ty_fail(err, TY_EINVAL, ifield, "%s (%s): %s", where,
                           m->model, lerr.msg);
        return ty_fail(err, TY_EINVAL, ifield, "%s: %s", m->model, lerr.msg);
    }
    *n = (int)count;
    return TY_OK;
}

static ty_status sim_gpu(const json_t *obj, int index, const char *path,
                         inv_gpu *gpu, ty_err *err)
{
    static const char *const keys[] = {
        "model",     "name",          "mig", "memory_gb",
        "instances", "nvlink_domain", NULL};
    ty_status s = tyjson_check_keys(obj, keys, path, err);
    if (s != TY_OK)
        return s;
    const char *model_name = NULL, *name = NULL;
    int mig = 0;
    int64_t domain = 0;
    s = tyjson_get_string(obj, "model", path, 1, 31, NULL, &model_name, err);
    if (s == TY_OK)
        s = tyjson_get_string(obj, "name", path, 0, INV_NAME_MAX - 1, NULL,
                              &name, err);
    if (s == TY_OK)
        s = tyjson_get_bool(obj, "mig", path, 0, 0, &mig, err);
    /* 1..INV_MAX_DOMAIN; left out, the GPU is on no NVLink */
    if (s == TY_OK)
        s = tyjson_get_int(obj, "nvlink_domain", path, 0, 1, INV_MAX_DOMAIN, 0,
                           &domain, err);
    if (s != TY_OK)
        return s;

    const mig_model *m = mig_model_find(model_name);
    char field[128];
    gpu->index = index;
    gpu->mig_enabled = mig;
    gpu->nvlink_domain = (int)domain;
    gpu->utilization_gpu_pct = INV_UNKNOWN;
    gpu->utilization_memory_pct = INV_UNKNOWN;
    gpu->temperature_c = INV_UNKNOWN;
    gpu->power_mw = INV_UNKNOWN;
    char seed[64];
    snprintf(seed, sizeof seed, "trainyard-sim-gpu/%d", index);
    fake_uuid("GPU", seed, gpu->uuid, sizeof gpu->uuid);

    const json_t *memory_gb = json_object_get(obj, "memory_gb");
    if (m) {
        snprintf(gpu->model, sizeof gpu->model, "%s", m->model);
        snprintf(gpu->name, sizeof gpu->name, "%s",
                 name ? name : m->device_name);
        gpu->memory_bytes = m->memory_mib << 20;
        if (memory_gb) {
            tyjson_path(field, sizeof field, path, "memory_gb");
            return ty_fail(err, TY_EINVAL, field,
                           "%s: a %s's memory is fixed by its model; "
                           "memory_gb is only for models trainyard does not "
                           "know",
                           path, m->model);
        }
    } else {
        char known[128];
        mig_model_names(known, sizeof known);
        if (mig) {
            tyjson_path(field, sizeof field, path, "model");
            return ty_fail(err, TY_EINVAL, field,
                           "%s: model '%s' has no MIG profiles trainyard "
                           "knows; MIG needs one of %s",
                           path, model_name, known);
        }
        double gb = 0;
        s = tyjson_get_number(obj, "memory_gb", path, 0, 0.001,
                              SIM_MAX_MEMORY_GB, 0, &gb, err);
        if (s != TY_OK)
            return s;
        if (!memory_gb) {
            tyjson_path(field, sizeof field, path, "memory_gb");
            return ty_fail(err, TY_EINVAL, field,
                           "%s: model '%s' is not one trainyard knows (%s); "
                           "give its memory_gb",
                           path, model_name, known);
        }
        snprintf(gpu->name, sizeof gpu->name, "%s", name ? name : model_name);
        gpu->memory_bytes = (uint64_t)(gb * (double)(1ull << 30));
    }

    const json_t *insts = json_object_get(obj, "instances");
    tyjson_path(field, sizeof field, path, "instances");
    if (insts && !json_is_array(insts))
        return ty_fail(err, TY_EINVAL, field, "%s must be an array", field);
    size_t n = insts ? json_array_size(insts) : 0;
    if (!mig) {
        if (n)
            return ty_fail(err, TY_EINVAL, field,
                           "%s: instances need \"mig\": true (MIG is off on "
                           "this GPU)",
                           path);
        return TY_OK;
    }
    mig_placed placed[MIG_COMPUTE_SLICES];
    int np = 0;
    if ((s = inv_instances_parse(m, insts, field, path, placed, &np, err)) !=
        TY_OK)
        return s;
    gpu->migs = n ? calloc(n, sizeof *gpu->migs) : NULL;
    if (n && !gpu->migs)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory for the inventory");
    gpu->nmig = (int)n;
    for (size_t i = 0; i < n; i++) {
        inv_mig *d = &gpu->migs[i];
        const mig_profile *p = placed[i].profile;
        snprintf(d->profile, sizeof d->profile, "%s", p->name);
        d->gpu_instance_id = (int)i + 1;
        d->compute_instance_id = 0;
        d->compute_slices = p->compute_slices;
        d->memory_bytes = p->memory_mib << 20;
        d->placement_start = placed[i].start;
        d->placement_size = p->memory_slices;
        snprintf(seed, sizeof seed, "trainyard-sim-mig/%d/%d/%d", index,
                 d->gpu_instance_id, d->compute_instance_id);
        fake_uuid("MIG", seed, d->uuid, sizeof d->uuid);
    }
    return TY_OK;
}

ty_status inv_sim_parse(const json_t *doc, const char *label, inventory **out,
                        ty_err *err)
{
    *out = NULL;
    /* The file's name only: GET /v1/devices shows it to every tenant, and
     * the server's folders are none of theirs. */
    const char *slash = strrchr(label, '/');
    char src[PATH_MAX + 8];
    snprintf(src, sizeof src, "sim:%s", slash ? slash + 1 : label);
    inventory *inv = NULL;
    ty_status s = inv_empty(INV_SOURCE_SIM, src, &inv, err);
    if (s != TY_OK)
        return s;
    static const char *const keys[] = {"description", "gpus", NULL};
    const char *desc = NULL;
    s = tyjson_check_keys(doc, keys, "", err);
    if (s == TY_OK)
        s = tyjson_get_string(doc, "description", "", 0, 1000, NULL, &desc,
                              err);
    if (s != TY_OK)
        goto fail;
    const json_t *gpus = json_object_get(doc, "gpus");
    if (!json_is_array(gpus)) {
        s = ty_fail(err, TY_EINVAL, "gpus",
                    "gpus is required: an array of GPUs, [] for a CPU-only "
                    "host");
        goto fail;
    }
    size_t n = json_array_size(gpus);
    if (n > INV_MAX_GPUS) {
        s = ty_fail(err, TY_EINVAL, "gpus", "%zu GPUs; at most %d", n,
                    INV_MAX_GPUS);
        goto fail;
    }
    inv->gpus = n ? calloc(n, sizeof *inv->gpus) : NULL;
    if (n && !inv->gpus) {
        s = ty_fail(err, TY_ENOMEM, NULL, "out of memory for the inventory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        char path[32];
        tyjson_path_index(path, sizeof path, "gpus", i);
        inv->ngpus = (int)i + 1; /* so inv_destroy frees what was made */
        s = sim_gpu(json_array_get(gpus, i), (int)i, path, &inv->gpus[i], err);
        if (s != TY_OK)
            goto fail;
    }
    s = inv_build_slots(inv, err);
    if (s != TY_OK)
        goto fail;
    *out = inv;
    return TY_OK;
fail:
    inv_destroy(inv);
    if (err)
        ty_err_prefix(err, "%s", label);
    return s;
}

ty_status inv_sim_load(const char *path, inventory **out, ty_err *err)
{
    *out = NULL;
    char *text = NULL;
    size_t len = 0;
    ty_status s = fs_read_all(path, SIM_MAX_FILE_BYTES, &text, &len, err);
    if (s != TY_OK) {
        ty_err_prefix(err, "--devices sim:%s", path);
        return s;
    }
    json_error_t jerr;
    json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!doc)
        return ty_fail(err, TY_EFORMAT, NULL, "%s:%d:%d: not valid JSON: %s",
                       path, jerr.line, jerr.column, jerr.text);
    s = inv_sim_parse(doc, path, out, err);
    json_decref(doc);
    return s;
}

/* ---- the JSON view ---- */

void inv_slot_holder_json(const inv_slot *s, const inv_viewer *viewer,
                          json_t *obj)
{
    const char *state = "free";
    json_t *job = json_null(), *tenant = json_null();
    if (s->job_id[0]) {
        int mine =
            viewer->tenant_id && !strcmp(viewer->tenant_id, s->tenant_id);
        if (viewer->is_admin || mine) {
            state = "held";
            job = json_string(s->job_id);
            tenant = json_string(s->tenant_id);
        } else {
            state = "held_by_other_tenant";
        }
    }
    json_object_set_new(obj, "state", json_string(state));
    json_object_set_new(obj, "job", job);
    json_object_set_new(obj, "tenant", tenant);
}

static json_t *known_int(int v)
{
    return v == INV_UNKNOWN ? json_null() : json_integer(v);
}

static json_t *slot_json(const inventory *inv, int k, const inv_viewer *viewer)
{
    const inv_slot *s = &inv->slots[k];
    json_t *o = json_object();
    json_object_set_new(o, "slot", json_integer(k));
    json_object_set_new(o, "kind",
                        json_string(s->kind == INV_SLOT_MIG ? "mig" : "gpu"));
    json_object_set_new(o, "uuid", json_string(s->uuid));
    json_object_set_new(o, "profile",
                        s->profile ? json_string(s->profile) : json_null());
    json_object_set_new(o, "compute_slices", json_integer(s->compute_slices));
    json_object_set_new(o, "memory_bytes",
                        json_integer((json_int_t)s->memory_bytes));
    if (s->kind == INV_SLOT_MIG) {
        const inv_mig *m = &inv->gpus[s->gpu].migs[s->mig];
        json_object_set_new(o, "gpu_instance_id",
                            known_int(m->gpu_instance_id));
        json_object_set_new(o, "compute_instance_id",
                            known_int(m->compute_instance_id));
        json_object_set_new(o, "placement",
                            m->placement_start == INV_UNKNOWN
                                ? json_null()
                                : json_pack("{s:i, s:i}", "start",
                                            m->placement_start, "size",
                                            m->placement_size));
    } else {
        json_object_set_new(o, "gpu_instance_id", json_null());
        json_object_set_new(o, "compute_instance_id", json_null());
        json_object_set_new(o, "placement", json_null());
    }
    inv_slot_holder_json(s, viewer, o);
    return o;
}

json_t *inv_to_json(inventory *inv, const inv_viewer *viewer)
{
    inv_refresh(inv);
    pthread_mutex_lock(&inv->mu);
    json_t *gpus = json_array();
    for (int g = 0; g < inv->ngpus; g++) {
        const inv_gpu *gpu = &inv->gpus[g];
        json_t *o = json_object();
        json_object_set_new(o, "index", json_integer(gpu->index));
        json_object_set_new(o, "name", json_string(gpu->name));
        json_object_set_new(
            o, "model", gpu->model[0] ? json_string(gpu->model) : json_null());
        json_object_set_new(o, "uuid", json_string(gpu->uuid));
        json_object_set_new(o, "memory_bytes",
                            json_integer((json_int_t)gpu->memory_bytes));
        json_object_set_new(o, "mig", json_boolean(gpu->mig_enabled));
        json_object_set_new(o, "nvlink_domain",
                            gpu->nvlink_domain
                                ? json_integer(gpu->nvlink_domain)
                                : json_null());
        json_object_set_new(o, "utilization_gpu_percent",
                            known_int(gpu->utilization_gpu_pct));
        json_object_set_new(o, "utilization_memory_percent",
                            known_int(gpu->utilization_memory_pct));
        json_object_set_new(o, "temperature_c", known_int(gpu->temperature_c));
        json_object_set_new(o, "power_watts",
                            gpu->power_mw == INV_UNKNOWN
                                ? json_null()
                                : json_real(gpu->power_mw / 1000.0));
        json_t *slices = json_array();
        /* in index order; a re-cut GPU's appended slots come after the
         * other GPUs' (inventory.h), and retired slots are no device */
        for (int k = 0; k < inv->nslots; k++)
            if (inv->slots[k].gpu == g && !inv->slots[k].retired)
                json_array_append_new(slices, slot_json(inv, k, viewer));
        json_object_set_new(o, "slices", slices);
        json_array_append_new(gpus, o);
    }
    pthread_mutex_unlock(&inv->mu);
    json_t *doc = json_object();
    json_object_set_new(doc, "source", json_string(inv->source_label));
    json_object_set_new(
        doc, "reason", inv->reason[0] ? json_string(inv->reason) : json_null());
    json_object_set_new(doc, "gpus", gpus);
    return doc;
}

void inv_refresh(inventory *inv)
{
    if (inv && inv->source_refresh)
        inv->source_refresh(inv);
}

/* ---- re-cutting a simulated GPU ---- */

json_t *inv_gpu_layout_json(inventory *inv, int g)
{
    json_t *a = json_array();
    if (!inv || g < 0 || g >= inv->ngpus)
        return a;
    pthread_mutex_lock(&inv->mu);
    const inv_gpu *gpu = &inv->gpus[g];
    for (int m = 0; gpu->mig_enabled && m < gpu->nmig; m++) {
        const inv_mig *d = &gpu->migs[m];
        json_array_append_new(
            a, json_pack("{s:s, s:o}", "profile", d->profile, "start",
                         d->placement_start == INV_UNKNOWN
                             ? json_null()
                             : json_integer(d->placement_start)));
    }
    pthread_mutex_unlock(&inv->mu);
    return a;
}

/* Fills slot k for GPU g's MIG device m (m < 0: the whole GPU). */
static void slot_fill(inventory *inv, int k, int g, int m)
{
    inv_gpu *gpu = &inv->gpus[g];
    inv_slot *s = &inv->slots[k];
    memset(s, 0, sizeof *s);
    s->gpu = g;
    s->mig = m;
    s->node = gpu->node;
    s->domain = gpu->nvlink_domain; /* a re-cut keeps the GPU's place */
    if (m < 0) {
        s->kind = INV_SLOT_GPU;
        s->uuid = gpu->uuid;
        s->compute_slices = MIG_COMPUTE_SLICES;
        s->memory_bytes = gpu->memory_bytes;
        return;
    }
    s->kind = INV_SLOT_MIG;
    s->uuid = gpu->migs[m].uuid;
    s->profile = gpu->migs[m].profile;
    s->compute_slices = gpu->migs[m].compute_slices;
    s->memory_bytes = gpu->migs[m].memory_bytes;
}

ty_status inv_gpu_recut(inventory *inv, int g, int mig, const mig_placed *inst,
                        int n, ty_err *err)
{
    if (inv->source != INV_SOURCE_SIM)
        return ty_fail(err, TY_EINVAL, NULL,
                       "only a simulated inventory is re-cut by the server");
    if (g < 0 || g >= inv->ngpus)
        return ty_fail(err, TY_EINVAL, "gpu", "no GPU %d", g);
    inv_gpu *gpu = &inv->gpus[g];
    const mig_model *model = mig_model_find(gpu->model);
    if (mig && !model)
        return ty_fail(err, TY_EINVAL, "mig",
                       "GPU %d (%s) has no MIG profiles trainyard knows", g,
                       gpu->name);
    if (!mig)
        n = 0;
    if (n < 0 || n > MIG_COMPUTE_SLICES)
        return ty_fail(err, TY_EINVAL, "instances",
                       "%d instances; a GPU holds at most %d", n,
                       MIG_COMPUTE_SLICES);
    int bad = -1;
    if (mig && mig_layout_check(model, inst, n, &bad, err) != TY_OK)
        return TY_EINVAL;
    pthread_mutex_lock(&inv->mu);
    /* the GPU's indices, in use or retired, ascending: the new slots
     * take them in order, then the end of the list */
    int pool[MIG_COMPUTE_SLICES + 1], npool = 0;
    for (int k = 0; k < inv->nslots; k++) {
        if (inv->slots[k].gpu != g)
            continue;
        if (inv->slots[k].job_id[0]) {
            ty_status st = ty_fail(err, TY_ECONFLICT, "gpu",
                                   "slot %d of GPU %d is held by job %s", k, g,
                                   inv->slots[k].job_id);
            pthread_mutex_unlock(&inv->mu);
            return st;
        }
        if (npool < MIG_COMPUTE_SLICES + 1)
            pool[npool++] = k;
    }
    int need = mig ? n : 1;
    int grow = need > npool ? need - npool : 0;
    inv_mig *migs = n ? calloc((size_t)n, sizeof *migs) : NULL;
    void **old =
        realloc(inv->old_migs, (size_t)(inv->nold_migs + 1) * sizeof *old);
    if (old)
        inv->old_migs = old;
    if ((n && !migs) || !old || inv->nslots + grow > inv->slot_cap) {
        free(migs);
        pthread_mutex_unlock(&inv->mu);
        return ty_fail(err, TY_ENOMEM, NULL, "no room for GPU %d's new slots",
                       g);
    }
    for (int i = 0; i < n; i++) {
        inv_mig *d = &migs[i];
        const mig_profile *p = inst[i].profile;
        snprintf(d->profile, sizeof d->profile, "%s", p->name);
        d->gpu_instance_id = i + 1;
        d->compute_instance_id = 0;
        d->compute_slices = p->compute_slices;
        d->memory_bytes = p->memory_mib << 20;
        d->placement_start = inst[i].start;
        d->placement_size = p->memory_slices;
        char seed[96];
        snprintf(seed, sizeof seed, "trainyard-sim-mig/%d/%s@%d", gpu->index,
                 p->name, inst[i].start);
        fake_uuid("MIG", seed, d->uuid, sizeof d->uuid);
    }
    /* the old devices stay readable until the inventory is destroyed */
    if (gpu->migs)
        inv->old_migs[inv->nold_migs++] = gpu->migs;
    gpu->migs = migs;
    gpu->nmig = n;
    gpu->mig_enabled = mig ? 1 : 0;
    for (int i = 0; i < need; i++) {
        int k = i < npool ? pool[i] : inv->nslots++;
        slot_fill(inv, k, g, mig ? i : -1);
    }
    for (int i = need; i < npool; i++) {
        inv_slot *s = &inv->slots[pool[i]];
        memset(s, 0, sizeof *s);
        s->kind = INV_SLOT_MIG;
        s->gpu = g;
        s->mig = -1;
        s->uuid = "";
        s->node = gpu->node;
        s->retired = 1;
    }
    pthread_mutex_unlock(&inv->mu);
    return TY_OK;
}
