/*
 * tenants.c - /v1/tenants and /v1/tenants/{id}/keys (see tenants.h).
 *
 * Only an admin key reaches these handlers (the routing table marks them
 * ROUTE_ADMIN, answered 403 before the handler for any id, so the answer
 * says nothing about which tenants exist), except GET /v1/tenants/{id}: a
 * tenant's key may read its own tenant (to see its quota and usage) and gets
 * 404 for any other, as for every other tenant's resource.
 *
 * A key's secret is shown once, in the reply that creates it; the store
 * keeps only its SHA-256 (auth.h).
 */
#include "api/tenants.h"

#include <stdio.h>
#include <string.h>

#include "api/api.h"
#include "common/ids.h"
#include "jobs/service.h"
#include "common/jsonutil.h"
#include "server/auth.h"

/* ---- pure checks ---- */

static int name_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

/* quota.<key>: an integer in [min, max] or null (absent on a create is
 * null; on a PATCH it leaves the field unset). null_means ends the message
 * ("unlimited"). */
static ty_status parse_limit(const json_t *quota, const char *key,
                             unsigned flag, int create, int64_t min,
                             int64_t max, const char *null_means, int64_t *out,
                             unsigned *set, ty_err *err)
{
    *out = STORE_UNLIMITED;
    if (!create && !json_object_get(quota, key))
        return TY_OK;
    if (tyjson_get_int(quota, key, "quota", 0, min, max, STORE_UNLIMITED, out,
                       err) != TY_OK) {
        char field[64];
        tyjson_path(field, sizeof field, "quota", key);
        if (max == INT64_MAX)
            return ty_fail(err, TY_EINVAL, field,
                           "%s must be a whole number >= %lld, or null for %s",
                           field, (long long)min, null_means);
        return ty_fail(err, TY_EINVAL, field,
                       "%s must be a whole number from %lld to %lld, or null "
                       "for %s",
                       field, (long long)min, (long long)max, null_means);
    }
    *set |= flag;
    return TY_OK;
}

/* quota.serving_requests_per_second: a number > 0 and at most
 * TENANT_SERVING_RPS_MAX, or null (unlimited); absent as in parse_limit. */
static ty_status parse_rps(const json_t *quota, int create, double *out,
                           unsigned *set, ty_err *err)
{
    *out = STORE_UNLIMITED;
    const json_t *v = json_object_get(quota, "serving_requests_per_second");
    if (!create && !v)
        return TY_OK;
    if (v && !json_is_null(v)) {
        if (!json_is_number(v) || !(json_number_value(v) > 0) ||
            json_number_value(v) > TENANT_SERVING_RPS_MAX)
            return ty_fail(err, TY_EINVAL, "quota.serving_requests_per_second",
                           "quota.serving_requests_per_second must be a "
                           "number > 0 and <= %d (requests a second to all "
                           "the tenant's deployments together), or null for "
                           "unlimited",
                           TENANT_SERVING_RPS_MAX);
        *out = json_number_value(v);
    }
    *set |= STORE_TENANT_SET_SERVING_RPS;
    return TY_OK;
}

ty_status tenant_body_parse(const json_t *body, int create, tenant_body *out,
                            ty_err *err)
{
    static const char *const keys[] = {"name", "weight", "quota", NULL};
    static const char *const quota_keys[] = {"max_gpu_slices",
                                             "max_running_jobs",
                                             "max_storage_bytes",
                                             "serving_requests_per_second",
                                             "serving_burst",
                                             "serving_max_concurrency",
                                             "serving_tokens_per_minute",
                                             NULL};
    memset(out, 0, sizeof *out);
    out->lim.weight = 1;
    out->lim.max_gpu_slices = out->lim.max_running_jobs =
        out->lim.max_storage_bytes = STORE_UNLIMITED;
    out->lim.serving_rps = STORE_UNLIMITED;
    out->lim.serving_burst = out->lim.serving_max_concurrency = STORE_UNLIMITED;
    out->lim.serving_tokens_per_minute = STORE_UNLIMITED;
    ty_status s = tyjson_check_keys(body, keys, "", err);
    if (s != TY_OK)
        return s;

    if (json_is_null(json_object_get(body, "name")))
        return ty_fail(err, TY_EINVAL, "name",
                       "name must be a string of 1 to %d letters, digits, "
                       "'.', '_' or '-'",
                       TENANT_NAME_MAX);
    if ((s = tyjson_get_string(body, "name", "", create, TENANT_NAME_MAX, NULL,
                               &out->name, err)) != TY_OK)
        return s;
    if (out->name) {
        for (const char *c = out->name; *c; c++)
            if (!name_char_ok(*c))
                return ty_fail(err, TY_EINVAL, "name",
                               "name may hold letters, digits, '.', '_' and "
                               "'-' only (1 to %d characters)",
                               TENANT_NAME_MAX);
    }

    const json_t *w = json_object_get(body, "weight");
    if (w) {
        if (!json_is_number(w) ||
            !(json_number_value(w) >= TENANT_WEIGHT_MIN) ||
            json_number_value(w) > TENANT_WEIGHT_MAX)
            return ty_fail(err, TY_EINVAL, "weight",
                           "weight must be a number from %g to %g (the "
                           "tenant's share relative to the others; default 1)",
                           TENANT_WEIGHT_MIN, TENANT_WEIGHT_MAX);
        out->lim.weight = json_number_value(w);
        out->set |= STORE_TENANT_SET_WEIGHT;
    }

    const json_t *quota = json_object_get(body, "quota");
    if (quota && !json_is_object(quota))
        return ty_fail(err, TY_EINVAL, "quota",
                       "quota must be an object with max_gpu_slices, "
                       "max_running_jobs, max_storage_bytes, "
                       "serving_requests_per_second, serving_burst, "
                       "serving_max_concurrency and "
                       "serving_tokens_per_minute (each optional)");
    if (quota &&
        (s = tyjson_check_keys(quota, quota_keys, "quota", err)) != TY_OK)
        return s;
    store_tenant_limits *lim = &out->lim;
    if ((s = parse_limit(quota, "max_gpu_slices", STORE_TENANT_SET_GPU_SLICES,
                         create, 0, INT64_MAX, "unlimited",
                         &lim->max_gpu_slices, &out->set, err)) != TY_OK ||
        (s = parse_limit(quota, "max_running_jobs",
                         STORE_TENANT_SET_RUNNING_JOBS, create, 0, INT64_MAX,
                         "unlimited", &lim->max_running_jobs, &out->set,
                         err)) != TY_OK ||
        (s = parse_limit(quota, "max_storage_bytes", STORE_TENANT_SET_STORAGE,
                         create, 0, INT64_MAX, "unlimited",
                         &lim->max_storage_bytes, &out->set, err)) != TY_OK ||
        (s = parse_rps(quota, create, &lim->serving_rps, &out->set, err)) !=
            TY_OK ||
        (s = parse_limit(quota, "serving_burst", STORE_TENANT_SET_SERVING_BURST,
                         create, 1, TENANT_SERVING_BURST_MAX,
                         "the rate rounded up", &lim->serving_burst, &out->set,
                         err)) != TY_OK ||
        (s = parse_limit(quota, "serving_max_concurrency",
                         STORE_TENANT_SET_SERVING_CONCURRENCY, create, 1,
                         TENANT_SERVING_CONCURRENCY_MAX, "unlimited",
                         &lim->serving_max_concurrency, &out->set, err)) !=
            TY_OK ||
        (s = parse_limit(quota, "serving_tokens_per_minute",
                         STORE_TENANT_SET_SERVING_TOKENS, create, 1,
                         TENANT_SERVING_TOKENS_MAX, "unlimited",
                         &lim->serving_tokens_per_minute, &out->set, err)) !=
            TY_OK)
        return s;
    if (create)
        out->set = STORE_TENANT_SET_WEIGHT | STORE_TENANT_SET_GPU_SLICES |
                   STORE_TENANT_SET_RUNNING_JOBS | STORE_TENANT_SET_STORAGE |
                   STORE_TENANT_SET_SERVING_RPS |
                   STORE_TENANT_SET_SERVING_BURST |
                   STORE_TENANT_SET_SERVING_CONCURRENCY |
                   STORE_TENANT_SET_SERVING_TOKENS;
    return TY_OK;
}

/* ---- handlers ---- */

/* A new key for the tenant: its representation with the secret ("api_key")
 * added, the only time the secret is shown. */
static ty_status new_key(char key[AUTH_KEY_LEN + 1], char key_id[TY_ID_MAX],
                         uint8_t hash[32], ty_err *err)
{
    ty_status s = auth_key_generate(key, key_id, err);
    if (s == TY_OK)
        auth_key_hash(key, hash);
    return s;
}

void api_tenants_create(api_ctx *app, http_req *r)
{
    const json_t *body = api_json_object(r);
    if (!body)
        return;
    ty_err err = {0};
    tenant_body tb;
    char id[TY_ID_MAX], key[AUTH_KEY_LEN + 1], key_id[TY_ID_MAX];
    uint8_t hash[32];
    json_t *doc = NULL;
    ty_status s;
    if ((s = tenant_body_parse(body, 1, &tb, &err)) != TY_OK ||
        (s = ty_id_new("tn_", id, &err)) != TY_OK ||
        (s = new_key(key, key_id, hash, &err)) != TY_OK ||
        (s = store_tenant_create(app->store, id, tb.name, &tb.lim, key_id, hash,
                                 &err)) != TY_OK ||
        (s = store_tenant_get(app->store, id, &doc, &err)) != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    /* The key row was written in the same transaction as the tenant, with
     * the same timestamp. */
    json_object_set_new(
        doc, "key",
        json_pack("{s:s, s:s, s:b, s:O, s:n, s:s}", "id", key_id, "tenant", id,
                  "admin", 0, "created_at", json_object_get(doc, "created_at"),
                  "revoked_at", "api_key", key));
    char location[96];
    snprintf(location, sizeof location, "/v1/tenants/%s", id);
    http_reply_header(r, "Location", location);
    http_reply_json(r, 201, doc);
}

void api_tenants_list(api_ctx *app, http_req *r)
{
    store_page page;
    if (!api_page(r, &page))
        return;
    json_t *items;
    int64_t next;
    ty_err err = {0};
    ty_status s = store_tenant_list(app->store, page, &items, &next, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    api_reply_list(r, items, next);
}

void api_tenants_get(api_ctx *app, http_req *r)
{
    const char *id = http_req_param(r, 0);
    const store_key *who = http_req_key(r);
    ty_err err = {0};
    json_t *doc;
    ty_status s;
    if (!who->is_admin && strcmp(id, who->tenant_id) != 0)
        s = ty_fail(&err, TY_ENOTFOUND, NULL, "tenant %s not found", id);
    else
        s = store_tenant_get(app->store, id, &doc, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    http_reply_json(r, 200, doc);
}

void api_tenants_update(api_ctx *app, http_req *r)
{
    const json_t *body = api_json_object(r);
    if (!body)
        return;
    const char *id = http_req_param(r, 0);
    ty_err err = {0};
    tenant_body tb;
    json_t *doc;
    ty_status s;
    if ((s = tenant_body_parse(body, 0, &tb, &err)) != TY_OK ||
        (s = store_tenant_update(app->store, id, tb.name, &tb.lim, tb.set,
                                 &err)) != TY_OK ||
        (s = store_tenant_get(app->store, id, &doc, &err)) != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    /* The scheduler takes the new weight and quotas from its next pass. */
    jobs_tenant_changed(app->jobs, id);
    http_reply_json(r, 200, doc);
}

void api_tenant_keys_create(api_ctx *app, http_req *r)
{
    const char *tenant_id = http_req_param(r, 0);
    ty_err err = {0};
    char key[AUTH_KEY_LEN + 1], key_id[TY_ID_MAX];
    uint8_t hash[32];
    json_t *doc;
    ty_status s;
    if ((s = new_key(key, key_id, hash, &err)) != TY_OK ||
        (s = store_key_create(app->store, tenant_id, key_id, hash, &doc,
                              &err)) != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    json_object_set_new(doc, "api_key", json_string(key));
    http_reply_json(r, 201, doc);
}

void api_tenant_keys_list(api_ctx *app, http_req *r)
{
    store_page page;
    if (!api_page(r, &page))
        return;
    json_t *items;
    int64_t next;
    ty_err err = {0};
    ty_status s = store_key_list(app->store, http_req_param(r, 0), page, &items,
                                 &next, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    api_reply_list(r, items, next);
}

void api_tenant_keys_revoke(api_ctx *app, http_req *r)
{
    ty_err err = {0};
    ty_status s = store_key_revoke(app->store, http_req_param(r, 0),
                                   http_req_param(r, 1), &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    http_reply_static(r, 204, NULL, "", 0);
}
