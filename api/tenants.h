/*
 * tenants.h - /v1/tenants and their keys (admin).
 *
 * A tenant owns datasets, jobs and models and holds API keys; its weight is
 * its fair share of the GPUs and its quota bounds compute slices, running
 * jobs, storage and the requests of all its serving deployments together.
 * These handlers store and show weight and quotas; the scheduler enforces
 * max_gpu_slices and max_running_jobs, the store enforces max_storage_bytes
 * on every upload (store_storage_check), and the serving controller the
 * serving_* limits. The body checks are a pure function so they can be
 * tested without a server.
 */
#ifndef TY_API_TENANTS_H
#define TY_API_TENANTS_H

#include <jansson.h>
#include <stdint.h>

#include "api/api.h"
#include "common/ty.h"
#include "server/http.h"
#include "store/store.h"

#define TENANT_NAME_MAX 64
/* Weights are ratios of each other: bounded so that no ratio of two
 * overflows or vanishes. */
#define TENANT_WEIGHT_MIN 1e-6
#define TENANT_WEIGHT_MAX 1e6
/* The serving limits' upper bounds (their lower: rate > 0, the others 1). */
#define TENANT_SERVING_RPS_MAX 1000000
#define TENANT_SERVING_BURST_MAX 1000000
#define TENANT_SERVING_CONCURRENCY_MAX 100000
#define TENANT_SERVING_TOKENS_MAX 1000000000

/* A checked POST or PATCH body. name is borrowed from the body (NULL when
 * absent); set says which fields of lim were given (STORE_TENANT_SET_*). */
typedef struct {
    const char *name;
    store_tenant_limits lim;
    unsigned set;
} tenant_body;

/* Checks a tenant body: name (1..TENANT_NAME_MAX of letters, digits, '.',
 * '_', '-'; required when creating; not null), weight (a number from
 * TENANT_WEIGHT_MIN to TENANT_WEIGHT_MAX, default 1),
 * quota.{max_gpu_slices, max_running_jobs, max_storage_bytes} (integers >= 0,
 * or null = unlimited, the default), quota.serving_requests_per_second (a
 * number > 0 and <= TENANT_SERVING_RPS_MAX, or null = unlimited),
 * quota.serving_burst (1..TENANT_SERVING_BURST_MAX, or null = the rate
 * rounded up), quota.serving_max_concurrency
 * (1..TENANT_SERVING_CONCURRENCY_MAX, or null = unlimited) and
 * quota.serving_tokens_per_minute (1..TENANT_SERVING_TOKENS_MAX generation
 * tokens a minute, or null = unlimited); null is
 * STORE_UNLIMITED in lim. Unknown keys are errors. On a create, every field
 * is set (defaults filled in); on a PATCH only those given. TY_EINVAL naming
 * the field ("quota.serving_burst"). */
ty_status tenant_body_parse(const json_t *body, int create, tenant_body *out,
                            ty_err *err);

/* ---- handlers ---- */
void api_tenants_create(api_ctx *app, http_req *r);
void api_tenants_list(api_ctx *app, http_req *r);
void api_tenants_get(api_ctx *app, http_req *r);
void api_tenants_update(api_ctx *app, http_req *r);
void api_tenant_keys_create(api_ctx *app, http_req *r);
void api_tenant_keys_list(api_ctx *app, http_req *r);
void api_tenant_keys_revoke(api_ctx *app, http_req *r);

#endif
