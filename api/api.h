/*
 * api.h - the REST API: the routing table and the handlers behind it, one
 * file per resource (datasets.c, jobs.c, models.c, inference.c, kserve.c,
 * deployments.c, health.c),
 * plus helpers shared by them (common.c).
 */
#ifndef TY_API_H
#define TY_API_H

#include <jansson.h>
#include <stddef.h>

#include "server/http.h"
#include "server/router.h"
#include "serve/predict.h"
#include "store/store.h"

struct jobs_service;
struct model_cache;
struct inventory;
struct ev_hub;

/* What the handlers use of the running server: the services and the few
 * settings they read, handed to every handler. The composition root
 * (app/app.c) fills it at start; a handler never reaches past it. */
typedef struct api_ctx {
    store *store;
    struct jobs_service *jobs;   /* jobs/service.h */
    struct deploy_ctl *deploy;   /* deploy/deploy.h */
    struct model_cache *models;  /* serve/modelcache.h */
    struct inventory *inventory; /* gpu/inventory.h */
    struct ev_hub *events;       /* events/hub.h; NULL: no live events */
    const char *data_dir;        /* blobs live under it */
    /* Dataset URL fetches (common/fetch.h): --max-fetch-bytes,
     * --fetch-timeout, --fetch-hosts, --fetch-allow-networks. */
    uint64_t max_fetch_bytes;
    /* --max-upload-bytes: also the most a gzip upload may inflate to. */
    uint64_t max_upload_bytes;
    int fetch_timeout_s;
    const char *fetch_hosts;
    const char *fetch_allow_networks; /* "" = none */
    uint64_t min_free_bytes; /* /readyz: --min-free-bytes; 0 = no check */
} api_ctx;

extern const route api_routes[];
extern const size_t api_routes_count;

/* ---- shared helpers (common.c) ---- */

/* The most items a list or a page of one gives at once. */
#define API_LIST_MAX 1000

/* Reads ?limit= (1..API_LIST_MAX, default 50) and ?cursor=. Replies 400 and returns
 * 0 when either is malformed. */
int api_page(http_req *r, store_page *page);

/* Reads the query parameter `name` as a whole number from min to max into
 * *out (dflt when absent); replies 400 naming it and returns 0 when it is
 * malformed. */
int api_query_number(http_req *r, const char *name, long long min,
                     long long max, long long dflt, long long *out);

/* Replies 200 {"items": items, "next_cursor": "..." | null}; items stolen. */
void api_reply_list(http_req *r, json_t *items, int64_t next_cursor);

/* The JSON body if it is an object; else replies 400 and returns NULL. */
const json_t *api_json_object(http_req *r);

/* Sets the Retry-After header of a 429 (seconds, rounded up, at least
 * 1). */
void api_retry_after(http_req *r, double seconds);
/* A generation's error reply: a full engine queue (503) or a deployment's
 * limit (429) with Retry-After: err->retry_after_s rounded up, 1 when
 * it says none. */
void api_reply_gen_error(http_req *r, ty_status s, const ty_err *err);

/* The caller's tenant id. */
const char *api_tenant(http_req *r);

/* A store lister of the caller's resources (store_dataset_list, ...). */
typedef ty_status (*api_list_fn)(store *st, const char *tenant_id,
                                 store_page page, json_t **items,
                                 int64_t *next_cursor, ty_err *err);
/* A store getter of one of the caller's resources (store_dataset_get, ...). */
typedef ty_status (*api_get_fn)(store *st, const char *tenant_id,
                                const char *id, json_t **doc, char sha256[65],
                                ty_err *err);

/* GET of a list: reads the page parameters, replies with a page or the
 * error. */
void api_list(api_ctx *app, http_req *r, api_list_fn list);

/* The id of the caller's dataset, model or job that ref (an id or a
 * name) names, as store_ref_resolve resolves it (an id wins, else the
 * newest of that name), into id; 1. Else 0, after replying 404 "no <kind>
 * with id or name '<ref>'" (or the store's error). */
int api_resolve(api_ctx *app, http_req *r, store_ref_kind kind, const char *ref,
                char id[TY_ID_MAX]);

/* api_resolve of the first path parameter. */
int api_resolve_param(api_ctx *app, http_req *r, store_ref_kind kind,
                      char id[TY_ID_MAX]);

/* GET of one resource of the kind named (by id or name) by the first path
 * parameter. */
void api_get(api_ctx *app, http_req *r, store_ref_kind kind, api_get_fn get);

/* Records a new resource whose file is complete at tmp_path: moves the file
 * into the blob store, adds "sha256" and "bytes" to doc and inserts the row
 * with insert, all under the blob lock (so blob garbage collection never
 * sees the blob without its row), then replies 201 with doc and a Location
 * of collection + "/" + id. doc stays the caller's. On failure nothing is
 * kept and the status is returned for the caller to reply; TY_ETOOBIG only
 * when the tenant's storage quota refuses the file (store_storage_check). */
typedef ty_status (*api_insert_fn)(store *st, const char *tenant_id,
                                   const char *id, const char *sha256,
                                   int64_t bytes, const json_t *doc,
                                   ty_err *err);
ty_status api_create_blob_resource(api_ctx *app, http_req *r,
                                   const char *tmp_path, const char *id,
                                   json_t *doc, api_insert_fn insert,
                                   const char *collection, ty_err *err);

/* ---- handlers ---- */
void api_healthz(api_ctx *app, http_req *r);
void api_readyz(api_ctx *app, http_req *r);
void api_openapi(api_ctx *app, http_req *r);

void api_datasets_create(api_ctx *app, http_req *r);
void api_datasets_list(api_ctx *app, http_req *r);
void api_datasets_get(api_ctx *app, http_req *r);
void api_datasets_delete(api_ctx *app, http_req *r);
void api_datasets_examples(api_ctx *app, http_req *r); /* examples.c */

void api_jobs_create(api_ctx *app, http_req *r);
void api_jobs_list(api_ctx *app, http_req *r);
void api_jobs_get(api_ctx *app, http_req *r);
void api_jobs_metrics(api_ctx *app, http_req *r);
void api_jobs_curves(api_ctx *app, http_req *r);
void api_jobs_cancel(api_ctx *app, http_req *r);

void api_models_create(api_ctx *app, http_req *r);
void api_models_list(api_ctx *app, http_req *r);
void api_models_get(api_ctx *app, http_req *r);
void api_models_delete(api_ctx *app, http_req *r);
void api_models_weights(api_ctx *app, http_req *r);
void api_models_predict(api_ctx *app, http_req *r);
void api_models_evaluate(api_ctx *app, http_req *r);
void api_models_transform(api_ctx *app, http_req *r); /* transform.c */
void api_models_tokenize(api_ctx *app, http_req *r);  /* tokenize.c */
void api_models_detokenize(api_ctx *app, http_req *r);

/* Serving deployments (api/deployments.c; the controller: deploy/deploy.h):
 * create 201, list (one page, next_cursor null), get and update 200 by id
 * or name, delete 202 (the replicas drain after the reply). */
void api_deployments_create(api_ctx *app, http_req *r);
void api_deployments_list(api_ctx *app, http_req *r);
void api_deployments_get(api_ctx *app, http_req *r);
void api_deployments_update(api_ctx *app, http_req *r);
void api_deployments_delete(api_ctx *app, http_req *r);

/* KServe v2 (api/kserve.c). A model is named by id or name; the routes
 * with /versions/{version} take "1" only. */
void api_kserve_server(api_ctx *app, http_req *r);
void api_kserve_live(api_ctx *app, http_req *r);
void api_kserve_ready(api_ctx *app, http_req *r);
void api_kserve_model(api_ctx *app, http_req *r);
void api_kserve_model_ready(api_ctx *app, http_req *r);
void api_kserve_config(api_ctx *app, http_req *r);
void api_kserve_infer(api_ctx *app, http_req *r);
void api_kserve_generate(api_ctx *app, http_req *r); /* generate.c */
void api_kserve_generate_stream(api_ctx *app, http_req *r);
void api_openai_completions(api_ctx *app, http_req *r); /* openai.c */
void api_openai_chat(api_ctx *app, http_req *r);
void api_openai_models(api_ctx *app, http_req *r);

/* A text/event-stream reply fed by a producer on a thread of its own
 * (genstream.c): reserve a place first (0: too many streams, reply 503),
 * then start; produce(st, arg) pushes events and returns when done, and
 * arg_free(arg) runs after it (or at once when the stream cannot start;
 * an unused reservation is given back with unreserve). A push returns 1
 * once the client has left: the producer should stop. */
typedef struct api_gen_stream api_gen_stream;
typedef void (*api_gen_produce)(api_gen_stream *st, void *arg);
int api_gen_stream_reserve(void);
void api_gen_stream_unreserve(void);
void api_gen_stream_start(http_req *r, api_gen_produce produce, void *arg,
                          void (*arg_free)(void *arg));
/* "data: <obj's JSON>\n\n" (takes obj), or raw text. */
int api_gen_stream_event(api_gen_stream *st, json_t *obj);
int api_gen_stream_raw(api_gen_stream *st, const char *text, size_t n);

/* GET /v1/usage (api/usage.c): usage accounting in a window. */
void api_usage_get(api_ctx *app, http_req *r);

/* api/worker.c: the remote worker protocol (node/wremote.h) */
void api_worker_job(api_ctx *app, http_req *r);
void api_worker_blob(api_ctx *app, http_req *r);
void api_worker_checkpoint_get(api_ctx *app, http_req *r);
void api_worker_checkpoint_put(api_ctx *app, http_req *r);
void api_worker_model(api_ctx *app, http_req *r);
void api_worker_log(api_ctx *app, http_req *r);
void api_worker_events(api_ctx *app, http_req *r);
/* The worker routes' check (http_token_check, server/http.h): the attempt's
 * token of the job in the path, from the headers, before any body is
 * read. TY_EINVAL (401) for no token or an unknown one, TY_ECONFLICT (409)
 * when its attempt is over; holder gets "job:<id>" when it is good. */
ty_status api_worker_auth(api_ctx *app, http_req *r, char *holder,
                          size_t holder_len, ty_err *err);
void api_kserve_index(api_ctx *app, http_req *r);
void api_kserve_load(api_ctx *app, http_req *r);
void api_kserve_stats(api_ctx *app, http_req *r);
/* The Triton extensions this server does not offer (shared memory, trace,
 * logging, unload; listed in the README's KServe section): 400 with a v2
 * error saying so, so a client learns it at once. */
void api_kserve_unsupported(api_ctx *app, http_req *r);

void api_devices_list(api_ctx *app, http_req *r);

/* advice.c: GET /v1/admin/mig-advice (the MIG layout advisor). */
void api_admin_mig_advice(api_ctx *app, http_req *r);

/* MIG layout changes (api/miglayout.c; admin key). */
void api_mig_layout_apply(api_ctx *app, http_req *r);
void api_mig_layout_list(api_ctx *app, http_req *r);
void api_mig_layout_get(api_ctx *app, http_req *r);

/* Server-Sent Events (api/events.c; the stream itself: server/sse.c). */
void api_events_stream(api_ctx *app, http_req *r);
/* Parses a Last-Event-ID header value v (NULL: none, *id 0) into *id.
 * 0 when it is not the decimal id of an event (above EV_ID_MAX, signs,
 * blanks, trailing bytes). */
int api_parse_last_event_id(const char *v, uint64_t *id);
void api_jobs_events(api_ctx *app, http_req *r);
/* GET /metrics (api/metrics.c): Prometheus text, public like /healthz. */
void api_metrics(api_ctx *app, http_req *r);

/* ---- predicts (inference.c; KServe's infer too) ---- */

/* The predict service's view of the server. */
serve_env api_serve_env(api_ctx *app);

/* Runs fn (a predict or infer handler) for r where it belongs: on a
 * serving-pool thread when a deployment serves the model the first path
 * parameter names (by_name: as KServe names models), since it waits for a
 * replica; on a work thread when the body is over 64 KiB; else here, where
 * handing over would cost about what the work does. */
void api_predict_dispatch(api_ctx *app, http_req *r, int by_name,
                          http_offload_fn fn);

#endif
