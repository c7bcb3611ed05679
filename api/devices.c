/* devices.c - GET /v1/devices: the GPUs, their MIG slices and who holds
 * them, as the caller may see it (inv_slot_holder_json: the admin sees
 * every holder, a tenant its own jobs, and of another tenant's slices only
 * that they are held).
 *
 * On top of the inventory's view, for the dashboard's device map: the
 * names of the holders the caller may see (tenant_name, job_name: only
 * where "job" is set, so never another tenant's for a tenant key), each
 * slice's utilisation, and how many jobs wait (the caller's tenant's; the
 * admin: every tenant's). */
#include "api/api.h"

#include <string.h>

#include "deploy/deploy.h"
#include "gpu/inventory.h"

/* Snapshots taken at most while a replica exits under one (see
 * api_devices_list). */
#define SNAPSHOT_ATTEMPTS 3

/* The name of tenant id, looked up once per request in names (id -> name
 * or null). Borrowed from names; NULL when the store cannot say. */
static json_t *tenant_name(store *st, json_t *names, const char *id)
{
    json_t *name = json_object_get(names, id);
    if (name)
        return name;
    json_t *doc = NULL;
    ty_err err = {0};
    name = json_null();
    if (store_tenant_get(st, id, &doc, &err) == TY_OK) {
        const char *s = json_string_value(json_object_get(doc, "name"));
        if (s)
            name = json_string(s);
    }
    json_decref(doc);
    json_object_set_new(names, id, name);
    return name;
}

/* The job's name; null for a serving replica ("rep_...", not a job) or a
 * job the store no longer has. New reference. */
static json_t *job_name(store *st, const char *id)
{
    json_t *doc = NULL, *name = NULL;
    ty_err err = {0};
    if (store_job_get_internal(st, id, &doc, &err) == TY_OK) {
        const char *s = json_string_value(json_object_get(doc, "name"));
        if (s)
            name = json_string(s);
    }
    json_decref(doc);
    return name ? name : json_null();
}

/* Adds tenant_name, job_name and utilization_percent to each slice of
 * doc's GPUs. Names are set only where inv_slot_holder_json gave the
 * viewer the holder ("job" not null). A serving replica's slice names its
 * deployment ("deployment": {id, name}; job_name: the deployment's name)
 * rather than the replica's internal id alone. A whole GPU's utilisation
 * is the GPU's (NVML); a MIG slice's is null: NVML reports none per MIG
 * device. Returns how many slices the viewer sees held by a replica
 * ("rep_...") that no deployment has any more: one that exited, and was
 * forgotten, between the inventory's snapshot and the look-up. */
static int add_slice_details(api_ctx *app, const inv_viewer *viewer,
                             json_t *doc)
{
    int unowned = 0;
    store *st = app->store;
    json_t *names = json_object();
    size_t i, j;
    json_t *gpu, *slice;
    json_array_foreach (json_object_get(doc, "gpus"), i, gpu) {
        const char *kind;
        json_array_foreach (json_object_get(gpu, "slices"), j, slice) {
            const char *job = json_string_value(json_object_get(slice, "job"));
            const char *tenant =
                json_string_value(json_object_get(slice, "tenant"));
            json_t *tname = job && tenant && names
                                ? json_incref(tenant_name(st, names, tenant))
                                : NULL;
            json_object_set_new(slice, "tenant_name",
                                tname ? tname : json_null());
            char dep_id[TY_ID_MAX], dep_name[DEPLOY_NAME_MAX];
            if (job &&
                deploy_replica_owner(
                    app->deploy, viewer->is_admin ? NULL : viewer->tenant_id,
                    job, dep_id, dep_name)) {
                json_object_set_new(slice, "job_name", json_string(dep_name));
                json_object_set_new(
                    slice, "deployment",
                    json_pack("{s:s, s:s}", "id", dep_id, "name", dep_name));
            } else {
                unowned += job && !strncmp(job, DEPLOY_REPLICA_ID_PREFIX,
                                           strlen(DEPLOY_REPLICA_ID_PREFIX));
                json_object_set_new(slice, "job_name",
                                    job ? job_name(st, job) : json_null());
                json_object_set_new(slice, "deployment", json_null());
            }
            kind = json_string_value(json_object_get(slice, "kind"));
            json_t *util = kind && !strcmp(kind, "gpu")
                               ? json_object_get(gpu, "utilization_gpu_percent")
                               : NULL;
            json_object_set_new(slice, "utilization_percent",
                                util ? json_incref(util) : json_null());
        }
    }
    json_decref(names);
    return unowned;
}

/* The queued jobs of the viewer's tenant (admin: of every tenant); -1
 * when the store cannot say. */
static json_int_t queued_jobs(store *st, const inv_viewer *viewer)
{
    json_t *rows = NULL;
    ty_err err = {0};
    if (store_job_counts(st, &rows, &err) != TY_OK)
        return -1;
    json_int_t n = 0;
    size_t i;
    json_t *row;
    json_array_foreach (rows, i, row) {
        const char *status = json_string_value(json_object_get(row, "status"));
        const char *tenant =
            json_string_value(json_object_get(row, "tenant_id"));
        if (!status || strcmp(status, JOB_QUEUED) != 0)
            continue;
        if (viewer->is_admin ||
            (tenant && viewer->tenant_id && !strcmp(tenant, viewer->tenant_id)))
            n += json_integer_value(json_object_get(row, "n"));
    }
    json_decref(rows);
    return n;
}

void api_devices_list(api_ctx *app, http_req *r)
{
    const store_key *key = http_req_key(r);
    inv_viewer viewer = {.tenant_id = key->tenant_id,
                         .is_admin = key->is_admin};
    json_t *doc = NULL;
    /* A replica that exits between the snapshot and the deployments'
     * look-up would show as its bare "rep_..." id with no deployment: the
     * snapshot is taken again (it shows the slice free or held anew), a
     * few times at most. */
    for (int attempt = 0; attempt < SNAPSHOT_ATTEMPTS; attempt++) {
        json_decref(doc);
        if (app->inventory) {
            doc = inv_to_json(app->inventory, &viewer);
        } else {
            /* A server made without an inventory (tests): a CPU-only
             * host. */
            doc = json_pack("{s:s, s:n, s:[]}", "source", "none", "reason",
                            "gpus");
        }
        if (!doc) {
            http_reply_problem(r, 503, NULL,
                               "out of memory listing the devices");
            return;
        }
        if (add_slice_details(app, &viewer, doc) == 0)
            break;
    }
    json_int_t queued = queued_jobs(app->store, &viewer);
    json_object_set_new(doc, "queued_jobs",
                        queued < 0 ? json_null() : json_integer(queued));
    json_object_set_new(doc, "queued_jobs_scope",
                        json_string(viewer.is_admin ? "all" : "tenant"));
    http_reply_json(r, 200, doc);
}
