/* common.c - helpers shared by the API handlers (see api.h). */
#include "api/api.h"

#include <errno.h>
#include <pthread.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "store/blob.h"

#define DEFAULT_LIMIT 50

int api_query_number(http_req *r, const char *name, long long min,
                     long long max, long long dflt, long long *out)
{
    const char *v = http_req_query(r, name);
    *out = dflt;
    if (!v)
        return 1;
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || end == v || *end || n < min || n > max) {
        http_reply_problem(r, 400, name,
                           "%s must be a whole number from %lld to %lld", name,
                           min, max);
        return 0;
    }
    *out = n;
    return 1;
}

int api_page(http_req *r, store_page *page)
{
    page->cursor = 0;
    long long limit;
    if (!api_query_number(r, "limit", 1, API_LIST_MAX, DEFAULT_LIMIT, &limit))
        return 0;
    page->limit = (int)limit;
    const char *cursor = http_req_query(r, "cursor");
    if (cursor) {
        char *end;
        errno = 0;
        long long n =
            strncmp(cursor, "c", 1) == 0 ? strtoll(cursor + 1, &end, 10) : -1;
        if (n <= 0 || errno || *end) {
            http_reply_problem(r, 400, "cursor",
                               "cursor is not one this server gave out; pass "
                               "the next_cursor of the previous page");
            return 0;
        }
        page->cursor = n;
    }
    return 1;
}

void api_reply_list(http_req *r, json_t *items, int64_t next_cursor)
{
    json_t *body = json_object();
    json_object_set_new(body, "items", items);
    if (next_cursor > 0) {
        char c[32];
        snprintf(c, sizeof c, "c%lld", (long long)next_cursor);
        json_object_set_new(body, "next_cursor", json_string(c));
    } else {
        json_object_set_new(body, "next_cursor", json_null());
    }
    http_reply_json(r, 200, body);
}

const json_t *api_json_object(http_req *r)
{
    const json_t *body = http_req_json(r);
    if (!body) {
        http_reply_problem(r, 400, NULL,
                           "this endpoint needs a JSON object as the request "
                           "body (Content-Type: application/json)");
        return NULL;
    }
    if (!json_is_object(body)) {
        http_reply_problem(r, 400, NULL,
                           "the request body must be a JSON object");
        return NULL;
    }
    return body;
}

const char *api_tenant(http_req *r) { return http_req_key(r)->tenant_id; }

void api_retry_after(http_req *r, double seconds)
{
    char v[24];
    double up = ceil(seconds);
    snprintf(v, sizeof v, "%.0f", up < 1 ? 1 : up > 86400 ? 86400 : up);
    http_reply_header(r, "Retry-After", v);
}

void api_reply_gen_error(http_req *r, ty_status s, const ty_err *err)
{
    if (s == TY_EUNAVAILABLE || s == TY_ELIMIT)
        api_retry_after(r, err->retry_after_s > 0 ? err->retry_after_s : 1);
    http_reply_error(r, s, err);
}

void api_list(api_ctx *app, http_req *r, api_list_fn list)
{
    store_page page;
    if (!api_page(r, &page))
        return;
    json_t *items;
    int64_t next;
    ty_err err = {0};
    ty_status s = list(app->store, api_tenant(r), page, &items, &next, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    api_reply_list(r, items, next);
}

int api_resolve(api_ctx *app, http_req *r, store_ref_kind kind, const char *ref,
                char id[TY_ID_MAX])
{
    ty_err err = {0};
    ty_status s =
        store_ref_resolve(app->store, kind, api_tenant(r), ref, id, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return 0;
    }
    return 1;
}

int api_resolve_param(api_ctx *app, http_req *r, store_ref_kind kind,
                      char id[TY_ID_MAX])
{
    return api_resolve(app, r, kind, http_req_param(r, 0), id);
}

void api_get(api_ctx *app, http_req *r, store_ref_kind kind, api_get_fn get)
{
    json_t *doc;
    ty_err err = {0};
    char id[TY_ID_MAX];
    if (!api_resolve_param(app, r, kind, id))
        return;
    ty_status s = get(app->store, api_tenant(r), id, &doc, NULL, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    http_reply_json(r, 200, doc);
}

ty_status api_create_blob_resource(api_ctx *app, http_req *r,
                                   const char *tmp_path, const char *id,
                                   json_t *doc, api_insert_fn insert,
                                   const char *collection, ty_err *err)
{
    char sha[65];
    int64_t bytes = 0;
    struct stat sb;
    if (stat(tmp_path, &sb) != 0)
        return ty_fail(err, TY_EIO, NULL, "cannot read the converted upload");
    /* The quota is checked and the row inserted under the blob lock, so two
     * uploads of one tenant cannot both fit in the room left for one. */
    store_blob_lock(app->store);
    ty_status s = store_storage_check(app->store, api_tenant(r),
                                      (int64_t)sb.st_size, err);
    if (s == TY_OK)
        s = blob_import(app->data_dir, tmp_path, sha, &bytes, err);
    if (s == TY_OK &&
        (!doc || json_object_set_new(doc, "sha256", json_string(sha)) != 0 ||
         json_object_set_new(doc, "bytes", json_integer(bytes)) != 0))
        s = ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    if (s == TY_OK) {
        s = insert(app->store, api_tenant(r), id, sha, bytes, doc, err);
    }
    store_blob_unlock(app->store);
    if (s != TY_OK) {
        if (bytes)
            store_blob_release(app->store, sha);
        return s;
    }
    char location[128];
    snprintf(location, sizeof location, "%s/%s", collection, id);
    http_reply_header(r, "Location", location);
    http_reply_json(r, 201, json_incref(doc));
    return TY_OK;
}
