/* models.c - /v1/models: list, show, delete, download weights. */
#include <limits.h>
#include <stdio.h>

#include "api/api.h"
#include "server/blob.h"
#include "server/modelcache.h"

void api_models_list(ty_app *app, http_req *r)
{
    api_list(app, r, store_model_list);
}

void api_models_get(ty_app *app, http_req *r)
{
    api_get(app, r, store_model_get);
}

void api_models_delete(ty_app *app, http_req *r)
{
    char sha[65];
    ty_err err = {0};
    const char *id = http_req_param(r, 0);
    ty_status s = store_model_delete(app->store, api_tenant(r), id, sha, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    model_cache_evict(app->models, id);
    app_blob_release(app, sha);
    http_reply_static(r, 204, NULL, "", 0);
}

void api_models_weights(ty_app *app, http_req *r)
{
    char sha[65], path[PATH_MAX], name[TY_ID_MAX + 16];
    json_t *doc;
    ty_err err = {0};
    const char *id = http_req_param(r, 0);
    ty_status s = store_model_get(app->store, api_tenant(r), id, &doc, sha, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    json_decref(doc);
    blob_path(app->cfg.data_dir, sha, path, sizeof path);
    snprintf(name, sizeof name, "%s.safetensors", id);
    http_reply_file(r, 200, "application/octet-stream", path, name);
}
