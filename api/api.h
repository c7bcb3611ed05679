/*
 * api.h - the REST API: the routing table and the handlers behind it, one
 * file per resource (datasets.c, jobs.c, models.c, inference.c, health.c),
 * plus helpers shared by them (common.c).
 */
#ifndef TY_API_H
#define TY_API_H

#include <jansson.h>
#include <stddef.h>

#include "app/app.h"
#include "server/http.h"
#include "server/router.h"

extern const route api_routes[];
extern const size_t api_routes_count;

/* ---- shared helpers (common.c) ---- */

/* Reads ?limit= (1..1000, default 50) and ?cursor=. Replies 400 and returns
 * 0 when either is malformed. */
int api_page(http_req *r, store_page *page);

/* Replies 200 {"items": items, "next_cursor": "..." | null}; items stolen. */
void api_reply_list(http_req *r, json_t *items, int64_t next_cursor);

/* The JSON body if it is an object; else replies 400 and returns NULL. */
const json_t *api_json_object(http_req *r);

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
void api_list(ty_app *app, http_req *r, api_list_fn list);

/* GET of one resource named by the first path parameter. */
void api_get(ty_app *app, http_req *r, api_get_fn get);

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
ty_status api_create_blob_resource(ty_app *app, http_req *r,
                                   const char *tmp_path, const char *id,
                                   json_t *doc, api_insert_fn insert,
                                   const char *collection, ty_err *err);

/* ---- handlers ---- */
void api_healthz(ty_app *app, http_req *r);
void api_readyz(ty_app *app, http_req *r);
void api_openapi(ty_app *app, http_req *r);

void api_datasets_create(ty_app *app, http_req *r);
void api_datasets_list(ty_app *app, http_req *r);
void api_datasets_get(ty_app *app, http_req *r);
void api_datasets_delete(ty_app *app, http_req *r);
void api_datasets_examples(ty_app *app, http_req *r); /* examples.c */

void api_jobs_create(ty_app *app, http_req *r);
void api_jobs_list(ty_app *app, http_req *r);
void api_jobs_get(ty_app *app, http_req *r);
void api_jobs_metrics(ty_app *app, http_req *r);
void api_jobs_cancel(ty_app *app, http_req *r);

void api_models_create(ty_app *app, http_req *r);
void api_models_list(ty_app *app, http_req *r);
void api_models_get(ty_app *app, http_req *r);
void api_models_delete(ty_app *app, http_req *r);
void api_models_weights(ty_app *app, http_req *r);
void api_models_predict(ty_app *app, http_req *r);
void api_models_evaluate(ty_app *app, http_req *r);

void api_kserve_live(ty_app *app, http_req *r);
void api_kserve_ready(ty_app *app, http_req *r);
void api_kserve_model(ty_app *app, http_req *r);
void api_kserve_model_ready(ty_app *app, http_req *r);
void api_kserve_infer(ty_app *app, http_req *r);

void api_devices_list(ty_app *app, http_req *r);

/* Server-Sent Events (events.c). */
void api_events_stream(ty_app *app, http_req *r);
void api_jobs_events(ty_app *app, http_req *r);
/* GET /metrics (api/metrics.c): Prometheus text, public like /healthz. */
void api_metrics(ty_app *app, http_req *r);

#endif
