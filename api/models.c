/*
 * models.c - /v1/models: import, list, show, delete, download weights.
 *
 * An import (multipart: a safetensors "weights" part, an optional
 * "metadata" JSON part, an optional "name") is rewritten into a trainyard
 * model file and loaded with every check a trained model gets
 * (nn_model_import) before it enters the blob folder; the 201 is sent after
 * the row commits. An imported model has no job and no dataset.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "api/api.h"
#include "deploy/deploy.h"
#include "common/ids.h"
#include "store/blob.h"
#include "serve/modelcache.h"

#define NAME_MAX_LEN 200

/* The import's form: which parts, checked. */
static ty_status read_import_form(http_req *r, const char **weights,
                                  json_t **meta, const char **name, ty_err *err)
{
    static const char *const parts[] = {"weights", "metadata", "name"};
    for (size_t i = 0; i < http_req_form_count(r); i++) {
        const char *part = http_req_form_name(r, i);
        int known = 0;
        for (size_t k = 0; k < TY_ARRAY_LEN(parts); k++)
            known |= !strcmp(part, parts[k]);
        if (!known)
            return ty_fail(err, TY_EINVAL, part,
                           "unknown form field '%s'; send weights (a "
                           "safetensors file), metadata (JSON) and name",
                           part);
    }
    *name = "imported";
    if (http_req_form_has(r, "name")) {
        *name = http_req_form_value(r, "name");
        if (!*name || !**name || strlen(*name) > NAME_MAX_LEN)
            return ty_fail(err, TY_EINVAL, "name",
                           "name must be 1 to %d characters", NAME_MAX_LEN);
    }
    if (http_req_form_has(r, "metadata")) {
        /* Read from the part's file: standardize statistics of a large input
         * can be more than a text field holds. */
        const char *path;
        json_error_t je;
        ty_status s = http_req_form_path(r, "metadata", &path, err);
        if (s != TY_OK)
            return s;
        *meta = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
        if (!*meta && json_error_code(&je) == json_error_out_of_memory)
            return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        if (!*meta)
            return ty_fail(err, TY_EINVAL, "metadata",
                           "metadata must be a JSON object: %s (line %d)",
                           je.text, je.line);
    }
    if (!http_req_form_has(r, "weights"))
        return ty_fail(err, TY_EINVAL, "weights",
                       "the file part 'weights' is missing: send the "
                       "safetensors file of the model's state dict");
    return http_req_form_path(r, "weights", weights, err);
}

/* The API representation of an imported model. */
static json_t *imported_doc(const char *id, const char *name, const nn_net *net)
{
    char now[32];
    ty_now_iso(now);
    json_t *doc = json_object();
    int bad = !doc; /* an allocation failed: no half document */
    bad |= json_object_set_new(doc, "id", json_string(id));
    bad |= json_object_set_new(doc, "name", json_string(name));
    bad |= json_object_set_new(doc, "job", json_null());
    bad |= json_object_set_new(doc, "dataset", json_null());
    nn_net_describe(net, doc);
    bad |= json_object_set_new(doc, "metrics", json_null());
    bad |= json_object_set_new(doc, "created_at", json_string(now));
    if (bad) {
        json_decref(doc);
        return NULL;
    }
    return doc;
}

void api_models_create(api_ctx *app, http_req *r)
{
    ty_err err = {0};
    json_t *meta = NULL, *doc = NULL;
    nn_net *net = NULL;
    const char *weights = NULL, *name = NULL;
    char out[PATH_MAX], id[TY_ID_MAX];
    int quota_refused = 0; /* 413, unlike the model's own size limits (422) */
    ty_status s;
    if (!http_req_is_multipart(r)) {
        http_reply_problem(r, 415, NULL,
                           "send the model as multipart/form-data: a weights "
                           "part (safetensors) and a metadata part (JSON)");
        return;
    }
    if ((s = read_import_form(r, &weights, &meta, &name, &err)) != TY_OK ||
        (s = http_req_temp_path(r, ".safetensors", out, sizeof out, &err)) !=
            TY_OK)
        goto fail;
    if ((s = nn_model_import(weights, meta, out, &net, &err)) != TY_OK) {
        if (!err.field[0])
            snprintf(err.field, sizeof err.field, "weights");
        goto fail;
    }
    if ((s = ty_id_new("mdl_", id, &err)) != TY_OK)
        goto fail;
    doc = imported_doc(id, name, net);
    if ((s = api_create_blob_resource(app, r, out, id, doc, store_model_insert,
                                      "/v1/models", &err)) != TY_OK) {
        quota_refused = s == TY_ETOOBIG;
        goto fail;
    }
    json_decref(doc);
    json_decref(meta);
    nn_net_destroy(net);
    return;
fail:
    json_decref(doc);
    json_decref(meta);
    nn_net_destroy(net);
    http_reply_error(r, s == TY_ETOOBIG && !quota_refused ? TY_EINVAL : s,
                     &err);
}

void api_models_list(api_ctx *app, http_req *r)
{
    api_list(app, r, store_model_list);
}

void api_models_get(api_ctx *app, http_req *r)
{
    api_get(app, r, STORE_REF_MODEL, store_model_get);
}

void api_models_delete(api_ctx *app, http_req *r)
{
    char sha[65], id[TY_ID_MAX];
    ty_err err = {0};
    if (!api_resolve_param(app, r, STORE_REF_MODEL, id))
        return;
    if (deploy_uses_model(app->deploy, api_tenant(r), id)) {
        http_reply_problem(r, 409, NULL,
                           "model %s is served by a deployment; delete the "
                           "deployment or move it to another model first",
                           id);
        return;
    }
    ty_status s = store_model_delete(app->store, api_tenant(r), id, sha, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    model_cache_evict(app->models, id);
    store_blob_release(app->store, sha);
    http_reply_static(r, 204, NULL, "", 0);
}

void api_models_weights(api_ctx *app, http_req *r)
{
    char sha[65], path[PATH_MAX], name[TY_ID_MAX + 16], id[TY_ID_MAX];
    json_t *doc;
    ty_err err = {0};
    if (!api_resolve_param(app, r, STORE_REF_MODEL, id))
        return;
    ty_status s =
        store_model_get(app->store, api_tenant(r), id, &doc, sha, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    json_decref(doc);
    blob_path(app->data_dir, sha, path, sizeof path);
    snprintf(name, sizeof name, "%s.safetensors", id);
    http_reply_file(r, 200, "application/octet-stream", path, name);
}
