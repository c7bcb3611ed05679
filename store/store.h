/*
 * store.h - trainyard's metadata store: SQLite in WAL mode with
 * synchronous=FULL, so a committed write survives power loss; schema
 * migrations are numbered and applied in order at open (PRAGMA user_version).
 *
 * One connection guarded by a mutex serves every thread. Rows come back as
 * JSON objects (jansson) already shaped as the API shows them; the caller
 * owns what it gets (json_decref). Every resource row carries its tenant, and
 * every lookup by id takes the tenant, so one tenant can never see another's
 * rows (they answer TY_ENOTFOUND).
 *
 * Blobs (datasets, weights) are files named by SHA-256 (blob.h); rows hold
 * the hash. A blob may be shared by several rows; store_blob_refs counts them.
 */
#ifndef TY_STORE_H
#define TY_STORE_H

#include <jansson.h>
#include <stdint.h>

#include "common/ids.h"
#include "common/ty.h"

typedef struct store store;

/* ---- the connection (db.c) ---- */

/* Opens (creating if needed) <data_dir>/trainyard.db and migrates it. */
ty_status store_open(const char *data_dir, store **out, ty_err *err);
void store_close(store *st);

/* The schema version the store is at (the number of migrations applied). */
int store_schema_version(store *st);

/* A cheap liveness query, for /readyz. */
ty_status store_ping(store *st, ty_err *err);

/* ---- tenants and keys (tenants.c) ---- */

typedef struct {
    char key_id[TY_ID_MAX];
    char tenant_id[TY_ID_MAX];
    int is_admin;
} store_key;

/* Number of API keys (revoked ones included). */
ty_status store_key_count(store *st, int64_t *count, ty_err *err);

/* What store_admin_key_ensure found or did. */
typedef enum {
    STORE_ADMIN_KEY_CREATED, /* the store had no keys: admin tenant + key */
    STORE_ADMIN_KEY_ADDED,   /* added to the admin tenant */
    STORE_ADMIN_KEY_PRESENT, /* already a live key (nothing changed) */
    STORE_ADMIN_KEY_REVOKED  /* revoked through the API: left revoked */
} store_admin_key_result;

/* Makes the key (id and SHA-256; the key itself is never stored) an admin
 * key unless it is known: with no keys at all it creates the tenant "admin"
 * (id new_tenant_id) and the key in it;
 * otherwise an unknown key joins the tenant of the oldest admin key. A key
 * revoked through the API stays revoked. TY_ECONFLICT when the id is known
 * with a different hash. One transaction. */
ty_status store_admin_key_ensure(store *st, const char *new_tenant_id,
                                 const char *key_id, const uint8_t hash[32],
                                 store_admin_key_result *result, ty_err *err);

/* Finds the live (unrevoked) key with this id and gives its stored hash.
 * TY_ENOTFOUND when none. */
ty_status store_key_lookup(store *st, const char *key_id, store_key *out,
                           uint8_t hash[32], ty_err *err);

/* ---- listing ---- */

/* A page of a list: items (new array) and the cursor of the next page
 * (0 when this is the last). Cursors are row sequence numbers, newest first. */
typedef struct {
    int64_t cursor; /* 0 = start from the newest */
    int limit;      /* 1..1000 */
} store_page;

/* ---- references: an id or a name (refs.c) ---- */

/* The most bytes of a dataset's, model's or job's name (the API refuses
 * longer ones), so of any reference to one. */
#define STORE_NAME_MAX 200

/* The kinds of resource a client may name by id or by name. */
typedef enum {
    STORE_REF_DATASET,
    STORE_REF_MODEL,
    STORE_REF_JOB,
    STORE_REF_KIND_COUNT
} store_ref_kind;

/* Resolves ref, an id or a name, to one of the tenant's resources of the
 * kind and writes its id into id: the resource whose id is ref (an id always
 * wins), else the newest of the tenant's resources named ref (the latest
 * created_at; on an equal created_at, the one created last). Only the
 * tenant's rows are read. TY_ENOTFOUND ("no dataset with id or name 'x'")
 * when neither matches; id is untouched on failure. */
ty_status store_ref_resolve(store *st, store_ref_kind kind,
                            const char *tenant_id, const char *ref,
                            char id[TY_ID_MAX], ty_err *err);

/* The kind's noun as messages spell it ("dataset", "model", "job"). */
const char *store_ref_noun(store_ref_kind kind);

/* ---- datasets (assets.c) ---- */

/* Inserts a dataset row; doc is the API representation (borrowed). */
ty_status store_dataset_insert(store *st, const char *tenant_id, const char *id,
                               const char *sha256, int64_t bytes,
                               const json_t *doc, ty_err *err);

/* The dataset's API representation, and its blob hash into sha256 (may be
 * NULL). TY_ENOTFOUND if it is not this tenant's. */
ty_status store_dataset_get(store *st, const char *tenant_id, const char *id,
                            json_t **doc, char sha256[65], ty_err *err);

ty_status store_dataset_list(store *st, const char *tenant_id, store_page page,
                             json_t **items, int64_t *next_cursor, ty_err *err);

/* Deletes the row and writes its blob hash into sha256. TY_ECONFLICT (with
 * the job named) while a queued or running job uses the dataset. */
ty_status store_dataset_delete(store *st, const char *tenant_id, const char *id,
                               char sha256[65], ty_err *err);

/* ---- jobs (jobs.c) ---- */

/* Job states, as the API spells them. */
#define JOB_QUEUED "queued"
/* Handed to a cluster (Slurm) that has not started its worker yet: it
 * holds its slot and quota as a running job does. */
#define JOB_SCHEDULED "scheduled"
#define JOB_RUNNING "running"
#define JOB_SUCCEEDED "succeeded"
#define JOB_FAILED "failed"
#define JOB_CANCELLED "cancelled"

/* Inserts a queued job, its progress at epoch 0 of hyperparameters'
 * epochs. spec and hyperparameters are the normalized objects, validation
 * {"split": f} or {"dataset": id} (all borrowed); estimated_memory_bytes
 * the job document's field of that name. */
ty_status store_job_insert(store *st, const char *tenant_id, const char *id,
                           const char *name, const char *dataset_id,
                           const json_t *validation, const json_t *spec,
                           const json_t *hyperparameters,
                           int64_t estimated_memory_bytes, ty_err *err);

/* The same, with what the job asks of the scheduler: resources (the
 * normalized {"gpu": ...} object; NULL stores none, shown as
 * {"gpu": "none"}) and priority (higher first within its tenant). */
ty_status store_job_insert_req(store *st, const char *tenant_id, const char *id,
                               const char *name, const char *dataset_id,
                               const json_t *validation, const json_t *spec,
                               const json_t *hyperparameters,
                               int64_t estimated_memory_bytes,
                               const json_t *resources, int64_t priority,
                               ty_err *err);

/* The job's API representation. */
ty_status store_job_get(store *st, const char *tenant_id, const char *id,
                        json_t **doc, ty_err *err);

/* The same representation, for the runner, without a tenant check; adds
 * "tenant_id". */
ty_status store_job_get_internal(store *st, const char *id, json_t **doc,
                                 ty_err *err);

ty_status store_job_list(store *st, const char *tenant_id, const char *status,
                         store_page page, json_t **items, int64_t *next_cursor,
                         ty_err *err);

/* Per-epoch metrics, oldest first (new array). */
ty_status store_job_epochs(store *st, const char *tenant_id, const char *id,
                           json_t **items, ty_err *err);

/* A page of the job's per-epoch metrics: limit records (-1: all) from
 * offset, oldest or newest_first (new array); *total: how many it has. */
ty_status store_job_epochs_page(store *st, const char *tenant_id,
                                const char *id, int64_t offset, int64_t limit,
                                int newest_first, json_t **items,
                                int64_t *total, ty_err *err);

/* The most per-step records a job keeps (store_job_step). */
#define STORE_STEPS_MAX 4000

/* Records a point of the job's per-step training curve: after `step`
 * optimizer steps of the run, in epoch `epoch` (1-based), at x epochs done
 * (fractional), the epoch's mean training loss so far and the learning
 * rate (non-finite: stored as null). A repeated step replaces the point.
 * Past STORE_STEPS_MAX records every other older one is dropped. */
ty_status store_job_step(store *st, const char *id, int64_t step, int64_t epoch,
                         double x, double loss, double lr, ty_err *err);

/* The job's curves in at most `points` points each (store/curves.c):
 * {job, points, epochs: {total, per_point, points: [{epoch, n, train_loss,
 * val_loss, train_accuracy, val_accuracy, train_rmse, val_rmse, val_mae,
 * val_r2 (the last four: regression, else null)}]}, steps: {total, per_point,
 * points: [{step, x, n, loss, lr}]}}; a point is the mean of the n
 * records of its bucket, at the bucket's last epoch or step. */
ty_status store_job_curves(store *st, const char *tenant_id, const char *id,
                           int points, json_t **doc, ty_err *err);

/* The oldest queued job's id into id; TY_ENOTFOUND when none is queued. */
ty_status store_job_next_queued(store *st, char id[TY_ID_MAX], ty_err *err);

/* queued -> running; counts an attempt, stamps started_at and records
 * the device this run trains on ("cpu", "cuda:N"; the job's "device").
 * TY_ECONFLICT if the job is not queued any more. */
ty_status store_job_start(store *st, const char *id, const char *device,
                          ty_err *err);

/* store_job_start, also recording where the run was placed (the job's
 * "placement", replaced; NULL keeps the previous one). A start after a
 * preemption (store_job_requeue with preempted) resumes the same attempt
 * and does not count a new one. */
ty_status store_job_start_on(store *st, const char *id, const char *device,
                             const json_t *placement, ty_err *err);

/* store_job_start_on, but the job is "scheduled": submitted to a cluster
 * whose scheduler has yet to start it. */
ty_status store_job_schedule_on(store *st, const char *id, const char *device,
                                const json_t *placement, ty_err *err);

/* A scheduled job's worker has started: it is running (*changed 1), or it
 * was not scheduled (*changed 0). */
ty_status store_job_mark_running(store *st, const char *id, int *changed,
                                 ty_err *err);

/* Merges patch into the job's placement (RFC 7386, as json_patch). */
ty_status store_job_placement_merge(store *st, const char *id,
                                    const json_t *patch, ty_err *err);

/* running -> queued for a run that stopped and will start again: after a
 * preemption (preempted 1: preemptions + 1, the next start counts no
 * attempt) or a crash to be retried (error says why; NULL clears it).
 * TY_ECONFLICT when the job is not running (cancelled meanwhile). */
ty_status store_job_requeue(store *st, const char *id, int preempted,
                            const char *error, ty_err *err);

/* Every queued job, oldest first, as rows {id, tenant_id, priority,
 * resources, submit_time (seconds since the epoch)} (new array). */
ty_status store_job_queued_all(store *st, json_t **rows, ty_err *err);

/* Replaces the job's progress and merges metrics into its latest metrics
 * (either may be NULL). */
ty_status store_job_progress(store *st, const char *id, const json_t *progress,
                             const json_t *metrics, ty_err *err);

/* Records an epoch's metrics (replacing a previous record of the same epoch,
 * as after a resume) and merges them into the latest metrics, where "best"
 * {metric, epoch, value} keeps the best epoch so far by the first of
 * val_accuracy (highest), val_loss (lowest), train_accuracy, train_loss the
 * records have. */
ty_status store_job_epoch(store *st, const char *id, int64_t epoch,
                          const json_t *metrics, ty_err *err);

/* running|queued -> failed or cancelled, with a message (may be NULL). Only
 * changes jobs that are not finished; *changed says whether it did. */
ty_status store_job_finish(store *st, const char *id, const char *status,
                           const char *error, int *changed, ty_err *err);

/* In one transaction: inserts the model row and marks the job succeeded with
 * that model, its progress completed (the last epoch and step, fraction 1,
 * no eta_seconds). model_doc is the model's API representation (borrowed). */
ty_status store_job_succeed(store *st, const char *id, const char *model_id,
                            const char *sha256, int64_t bytes,
                            const json_t *model_doc, ty_err *err);

/* A tenant's request to cancel: a queued job becomes cancelled at once
 * (*was_running = 0); a running one is left for the runner to stop
 * (*was_running = 1). Finished jobs answer TY_ECONFLICT. */
ty_status store_job_request_cancel(store *st, const char *tenant_id,
                                   const char *id, int *was_running,
                                   ty_err *err);

/* Puts every running job back in the queue (server start, after a crash or a
 * shutdown); *count says how many. keep_executor (NULL: none) names the
 * executor whose jobs stay running (placement.executor "slurm": they run
 * outside the server and are re-attached, store_job_running_on). */
ty_status store_job_requeue_running(store *st, const char *keep_executor,
                                    int64_t *count, ty_err *err);

/* The running jobs of an executor (placement.executor; "local" for jobs
 * without one), as store_job_queued_all's rows plus "placement". */
ty_status store_job_running_on(store *st, const char *executor, json_t **rows,
                               ty_err *err);

/* ---- change counters (db.c) ----
 *
 * A cache of some rows (the API keys, the models) built outside the store
 * stays coherent by comparing a counter: each is bumped after every
 * committed change to its rows, before the call that made the change
 * returns, and read without the store's lock. */
typedef enum {
    STORE_GEN_KEYS,   /* keys created or revoked, admin key ensured */
    STORE_GEN_MODELS, /* models inserted (imports, jobs) or deleted */
    STORE_GEN_COUNT
} store_gen;

uint64_t store_gen_get(store *st, store_gen which);

/* ---- models (assets.c) ---- */

/* A tenant's model by reference, as store_ref_resolve resolves it (an id
 * wins, else the newest of that name). *id (TY_ID_MAX) gets its id; doc and
 * sha256 as store_model_get. TY_ENOTFOUND ("no model with id or name 'x'")
 * when neither matches. */
ty_status store_model_find(store *st, const char *tenant_id, const char *ref,
                           char *id, json_t **doc, char sha256[65],
                           ty_err *err);

ty_status store_model_get(store *st, const char *tenant_id, const char *id,
                          json_t **doc, char sha256[65], ty_err *err);

/* Inserts a model that no job made (an import); doc is its API
 * representation (borrowed). */
ty_status store_model_insert(store *st, const char *tenant_id, const char *id,
                             const char *sha256, int64_t bytes,
                             const json_t *doc, ty_err *err);

ty_status store_model_list(store *st, const char *tenant_id, store_page page,
                           json_t **items, int64_t *next_cursor, ty_err *err);

ty_status store_model_delete(store *st, const char *tenant_id, const char *id,
                             char sha256[65], ty_err *err);

/* ---- deployments (deployments.c) ----
 *
 * A serving deployment's row: its id, tenant, name (unique per tenant),
 * spec (deploy/deployspec.h's deploy_spec_json, "model" resolved to the
 * model's id) and generation (bumped by the controller on every model
 * change). The running state (replicas, traffic) is not stored: the
 * controller (deploy/deploy.h) rebuilds it from these rows at start. */

/* TY_ECONFLICT (field "name", "a deployment named <name> exists") when the
 * tenant has one of that name; nothing stored on failure. */
ty_status store_deployment_insert(store *st, const char *tenant_id,
                                  const char *id, const char *name,
                                  const json_t *spec, int64_t generation,
                                  ty_err *err);

/* Replaces the spec and generation, sets updated_at. TY_ENOTFOUND. */
ty_status store_deployment_update(store *st, const char *tenant_id,
                                  const char *id, const json_t *spec,
                                  int64_t generation, ty_err *err);

/* TY_ENOTFOUND when the tenant has no such deployment. */
ty_status store_deployment_delete(store *st, const char *tenant_id,
                                  const char *id, ty_err *err);

/* Every deployment of every tenant, oldest first: *rows an array of
 * {"id", "tenant_id", "name", "spec", "generation", "created_at",
 * "updated_at"} (new reference). */
ty_status store_deployment_all(store *st, json_t **rows, ty_err *err);

/* ---- blobs (blob_refs.c) ---- */

/* The blob lock: held from a blob's import until its row commits, and from
 * a row's delete until its blob is released (store_blob_release takes it). */
void store_blob_lock(store *st);
void store_blob_unlock(store *st);

/* Removes blob sha256 if no dataset or model row references it any more. */
void store_blob_release(store *st, const char *sha256);

/* Removes the blobs no row references (left by a crash between a blob's
 * import and its row's commit, or a row's delete and the blob's); returns
 * how many. */
int store_blob_gc(store *st);

/* How many dataset and model rows reference this blob. */
ty_status store_blob_refs(store *st, const char *sha256, int64_t *refs,
                          ty_err *err);

/* ---- tenants (admin; tenants.c) ---- */

#define STORE_UNLIMITED (-1)

/* A tenant's fair-share weight and quotas; STORE_UNLIMITED where a quota is
 * not set. max_gpu_slices counts compute slices (a whole GPU of 7 slices
 * holds 7).
 *
 * The serving limits bound the requests of all the tenant's deployments
 * together (the serving controller enforces them; a request over one is
 * answered 429 with Retry-After):
 *   serving_rps: requests a second, a token bucket's refill rate (the API
 *     takes > 0 and <= 1000000); STORE_UNLIMITED = no rate limit.
 *   serving_burst: the bucket's size, the requests that may arrive at once
 *     (1..1000000); STORE_UNLIMITED = the default, serving_rps rounded up
 *     (at least 1). Meaningless while serving_rps is unlimited.
 *   serving_max_concurrency: requests in flight at once (1..100000);
 *     STORE_UNLIMITED = no bound.
 *   serving_tokens_per_minute: generation tokens a minute (1..1000000000),
 *     a bucket of that size refilled at a sixtieth of it a second; a
 *     generation reserves its prompt and max_tokens at admission and gets
 *     back what it did not use; STORE_UNLIMITED = no token limit.
 * The store writes any value below those ranges (0 included, so that a
 * struct initialized with the first four fields only is unlimited) as
 * unset, and reads unset back as STORE_UNLIMITED. */
typedef struct {
    double weight;
    int64_t max_gpu_slices;
    int64_t max_running_jobs;
    int64_t max_storage_bytes;
    double serving_rps;
    int64_t serving_burst;
    int64_t serving_max_concurrency;
    int64_t serving_tokens_per_minute;
} store_tenant_limits;

/* Which fields of a store_tenant_limits an update sets. */
enum {
    STORE_TENANT_SET_WEIGHT = 1u << 0,
    STORE_TENANT_SET_GPU_SLICES = 1u << 1,
    STORE_TENANT_SET_RUNNING_JOBS = 1u << 2,
    STORE_TENANT_SET_STORAGE = 1u << 3,
    STORE_TENANT_SET_SERVING_RPS = 1u << 4,
    STORE_TENANT_SET_SERVING_BURST = 1u << 5,
    STORE_TENANT_SET_SERVING_CONCURRENCY = 1u << 6,
    STORE_TENANT_SET_SERVING_TOKENS = 1u << 7,
};

/* Creates tenant id with its limits and its first (non-admin) key, in one
 * transaction; hash is the key's SHA-256. TY_ECONFLICT (field "name") if
 * another tenant has the name; on failure nothing is stored. */
ty_status store_tenant_create(store *st, const char *id, const char *name,
                              const store_tenant_limits *lim,
                              const char *key_id, const uint8_t hash[32],
                              ty_err *err);

/* The tenant's API representation: id, name, weight, quota (max_gpu_slices,
 * max_running_jobs, max_storage_bytes, serving_requests_per_second,
 * serving_burst, serving_max_concurrency, serving_tokens_per_minute; each
 * null when unset), usage
 * (storage_bytes, datasets, models, running_jobs), admin, created_at.
 * TY_ENOTFOUND when there is no such tenant. */
ty_status store_tenant_get(store *st, const char *id, json_t **doc,
                           ty_err *err);

/* Every tenant, newest first, paged like the other lists. */
ty_status store_tenant_list(store *st, store_page page, json_t **items,
                            int64_t *next_cursor, ty_err *err);

/* The tenant's weight and quotas, for quota checks, the scheduler and the
 * serving controller (every field filled). */
ty_status store_tenant_limits_get(store *st, const char *id,
                                  store_tenant_limits *out, ty_err *err);

/* Renames (name NULL = unchanged) and sets the limits named in set
 * (STORE_TENANT_SET_*), in one transaction. TY_ENOTFOUND, or TY_ECONFLICT
 * when the name is taken; on failure nothing changes. */
ty_status store_tenant_update(store *st, const char *id, const char *name,
                              const store_tenant_limits *lim, unsigned set,
                              ty_err *err);

/* Adds a key to the tenant (an admin key when the tenant holds admin keys)
 * and gives its representation (id, tenant, admin, created_at, revoked_at;
 * never the hash). TY_ENOTFOUND when there is no such tenant. */
ty_status store_key_create(store *st, const char *tenant_id, const char *key_id,
                           const uint8_t hash[32], json_t **doc, ty_err *err);

/* The tenant's keys, revoked ones included, newest first. TY_ENOTFOUND when
 * there is no such tenant. */
ty_status store_key_list(store *st, const char *tenant_id, store_page page,
                         json_t **items, int64_t *next_cursor, ty_err *err);

/* Revokes the tenant's key (again is fine: the first time stands). Takes
 * effect on the next request: keys are looked up on every request.
 * TY_ENOTFOUND if the tenant has no such key; TY_ECONFLICT for the last live
 * admin key. */
ty_status store_key_revoke(store *st, const char *tenant_id, const char *key_id,
                           ty_err *err);

/* ---- quotas (quota.c) ---- */

/* What the storage quota measures: the bytes of every dataset and model row
 * the tenant owns (a blob shared by two rows counts twice). */
ty_status store_tenant_storage(store *st, const char *id, int64_t *bytes,
                               ty_err *err);

/* TY_OK if a tenant using used bytes may store adding more under max
 * (STORE_UNLIMITED = no limit); else TY_ETOOBIG with the quota, the usage and
 * the size of what was refused in the message. */
ty_status store_storage_fits(int64_t used, int64_t adding, int64_t max,
                             ty_err *err);

/* The storage check for the tenant, with its quota and usage as the store
 * has them now: store_storage_fits, or TY_ENOTFOUND for no such tenant.
 * Caller holds the blob lock (store_blob_lock) from this check until the
 * new row is inserted, so two uploads of one tenant cannot both fit in the
 * room left for one. */
ty_status store_storage_check(store *st, const char *tenant_id, int64_t adding,
                              ty_err *err);

/* ---- metrics (jobs.c) ---- */

/* How many jobs each tenant has in each state, as rows {tenant_id, status,
 * n} (new array), for GET /metrics. */
ty_status store_job_counts(store *st, json_t **rows, ty_err *err);

/* ---- usage accounting (usage.c) ---- */

/* An interval in which a job or a serving replica holds a device slice
 * or CPU places (all strings borrowed). */
typedef struct {
    const char *tenant_id;
    const char *kind;    /* "training" | "serving" */
    const char *owner;   /* the job's id or the deployment's */
    const char *replica; /* a serving replica's id; NULL for a job */
    int device;          /* the GPU's index; -1: CPU places */
    const char *profile; /* MIG profile; "" a whole GPU; NULL CPU */
    int compute_slices;  /* the slice's (a whole GPU: the GPU's); 0 CPU */
    int gpu_slices;      /* the GPU's compute slices (7); 0 CPU */
    int64_t memory_bytes;
    int cpu;      /* CPU places held (a gang's ranks); 0 on a GPU */
    double start; /* unix seconds */
} store_usage_interval;

/* Records an open interval; its row id into *id. */
ty_status store_usage_open(store *st, const store_usage_interval *iv,
                           int64_t *id, ty_err *err);

/* Closes interval id at end (unix seconds; never before its start). An
 * interval already closed is left as it is. */
ty_status store_usage_close(store *st, int64_t id, double end, ty_err *err);

/* Stamps `at` (unix seconds) as a time the server was alive. */
ty_status store_usage_alive(store *st, double at, ty_err *err);

/* At start-up: closes every interval a crash left open at the latest time
 * the store proves the server alive (the stamp, or the latest start or end
 * written, whichever is later; never before the interval's start), and
 * stamps now. *closed: how many; *proven: that time. One transaction. */
ty_status store_usage_recover(store *st, double now, int64_t *closed,
                              double *proven, ty_err *err);

/* Interval id's row as stored (tests). TY_ENOTFOUND when none. */
ty_status store_usage_get(store *st, int64_t id, json_t **row, ty_err *err);

/* What the window query groups by. */
typedef enum {
    STORE_USAGE_TENANT,  /* "tenant": the tenant's id */
    STORE_USAGE_KIND,    /* "kind": training | serving */
    STORE_USAGE_PROFILE, /* "profile": "1g.10gb", "gpu" (whole), "cpu" */
    STORE_USAGE_DAY,     /* "day": "YYYY-MM-DD", UTC */
    STORE_USAGE_KEY_COUNT
} store_usage_key;

/* The key's name as the API spells it; NULL for none. */
const char *store_usage_key_name(store_usage_key k);
/* The key named `name` into *k: 1, or 0 for no such key. */
int store_usage_key_parse(const char *name, store_usage_key *k);

typedef struct {
    double from, to;       /* the window [from, to), unix seconds */
    double now;            /* where open intervals end */
    const char *tenant_id; /* NULL: every tenant */
    int nkeys;             /* 0..2 */
    store_usage_key keys[2];
} store_usage_query;

/* The intervals clipped to the window, summed per group of the keys (in
 * their order): rows {<key>: ..., slice_hours, gpu_hours, cpu_hours,
 * intervals} (new array), sorted by the keys; no keys: one row of the
 * totals. Grouped by day, an interval counts in each day it touches;
 * *intervals (may be NULL) gets how many intervals the window holds, each
 * once. TY_EINVAL for from >= to or a bad key. */
ty_status store_usage_window(store *st, const store_usage_query *q,
                             json_t **rows, int64_t *intervals, ty_err *err);

#endif
