/*
 * models.c - /v1/models: import, list, show, delete, download weights.
 *
 * An import (multipart: a safetensors "weights" part, an optional
 * "metadata" JSON part, an optional "name") is rewritten into a trainyard
 * model file and loaded with every check a trained model gets
 * (nn_model_import) before it enters the blob folder; the 201 is sent after
 * the row commits. An imported model has no job and no dataset. With
 * "layout" hf-gpt2 the weights are a Hugging Face GPT-2 checkpoint, with
 * its "config" (config.json) and optionally "tokenizer" (tokenizer.json)
 * parts in place of the metadata (hf_gpt2_import); `.../weights?layout=
 * hf-gpt2` gives a GPT model back in that layout (hf_gpt2_export).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "deploy/deploy.h"
#include "common/ids.h"
#include "common/jsonutil.h"
#include "models/hf_gpt2.h"
#include "store/blob.h"
#include "serve/modelcache.h"

#define NAME_MAX_LEN 200

/* A JSON file part (read from its file: a tokenizer.json is megabytes)
 * into *out; TY_EINVAL naming the part when it is not JSON. */
static ty_status read_json_part(http_req *r, const char *part, json_t **out,
                                ty_err *err)
{
    const char *path;
    json_error_t je;
    ty_status s = http_req_form_path(r, part, &path, err);
    if (s != TY_OK)
        return s;
    *out = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!*out && json_error_code(&je) == json_error_out_of_memory)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    if (!*out)
        return ty_fail(err, TY_EINVAL, part,
                       "%s must be a JSON object: %s (line %d)", part, je.text,
                       je.line);
    return TY_OK;
}

/* The hf-gpt2 layout's parts: config (required) and tokenizer, in place
 * of metadata. */
static ty_status read_hf_parts(http_req *r, json_t **config, json_t **tok,
                               ty_err *err)
{
    if (http_req_form_has(r, "metadata"))
        return ty_fail(err, TY_EINVAL, "metadata",
                       "layout " HF_GPT2_LAYOUT " takes no metadata part: "
                       "config (config.json) gives the model's spec");
    if (!http_req_form_has(r, "config"))
        return ty_fail(
            err, TY_EINVAL, "config",
            "the file part 'config' is missing: layout " HF_GPT2_LAYOUT
            " needs the checkpoint's config.json");
    ty_status s = read_json_part(r, "config", config, err);
    if (s == TY_OK && http_req_form_has(r, "tokenizer"))
        s = read_json_part(r, "tokenizer", tok, err);
    return s;
}

/* The import's form: which parts, checked. *hf is set for layout hf-gpt2,
 * whose config and tokenizer parts go to *config and *tok. */
static ty_status read_import_form(http_req *r, const char **weights,
                                  json_t **meta, const char **name, int *hf,
                                  json_t **config, json_t **tok, ty_err *err)
{
    static const char *const parts[] = {"weights", "metadata", "name",
                                        "layout",  "config",   "tokenizer"};
    for (size_t i = 0; i < http_req_form_count(r); i++) {
        const char *part = http_req_form_name(r, i);
        int known = 0;
        for (size_t k = 0; k < TY_ARRAY_LEN(parts); k++)
            known |= !strcmp(part, parts[k]);
        if (!known)
            return ty_fail(err, TY_EINVAL, part,
                           "unknown form field '%s'; send weights (a "
                           "safetensors file), metadata (JSON) and name, or "
                           "layout " HF_GPT2_LAYOUT " with weights, config "
                           "and tokenizer",
                           part);
    }
    const char *layout = "trainyard";
    if (http_req_form_has(r, "layout") &&
        !(layout = http_req_form_value(r, "layout")))
        layout = "";
    *hf = !strcmp(layout, HF_GPT2_LAYOUT);
    if (!*hf && strcmp(layout, "trainyard"))
        return ty_fail(
            err, TY_EINVAL, "layout",
            "layout must be trainyard (the default) or " HF_GPT2_LAYOUT
            " (a Hugging Face GPT-2 checkpoint)");
    for (int i = 0; !*hf && i < 2; i++)
        if (http_req_form_has(r, i ? "tokenizer" : "config"))
            return ty_fail(err, TY_EINVAL, i ? "tokenizer" : "config",
                           "the %s part belongs to layout " HF_GPT2_LAYOUT
                           ": send layout=" HF_GPT2_LAYOUT " with it",
                           i ? "tokenizer" : "config");
    *name = "imported";
    if (http_req_form_has(r, "name")) {
        *name = http_req_form_value(r, "name");
        if (!*name || !**name || strlen(*name) > NAME_MAX_LEN)
            return ty_fail(err, TY_EINVAL, "name",
                           "name must be 1 to %d characters", NAME_MAX_LEN);
    }
    ty_status s = TY_OK;
    if (*hf)
        s = read_hf_parts(r, config, tok, err);
    else if (http_req_form_has(r, "metadata"))
        /* Read from the part's file: standardize statistics of a large input
         * can be more than a text field holds. */
        s = read_json_part(r, "metadata", meta, err);
    if (s != TY_OK)
        return s;
    if (!http_req_form_has(r, "weights"))
        return ty_fail(err, TY_EINVAL, "weights",
                       "the file part 'weights' is missing: send the "
                       "safetensors file of the model's state dict%s",
                       *hf ? " (model.safetensors)" : "");
    return http_req_form_path(r, "weights", weights, err);
}

/* A tokenizer.json the model carries, as its document shows it: its
 * type, how many ids it makes and its added tokens, not the whole file
 * (GPT-2's is 1.3 MB, in every listing of the model). NULL when the
 * tokenizer is not one (then the document keeps it as it is). */
static json_t *tokenizer_summary(const json_t *tz)
{
    const json_t *tj = json_object_get(tz, "tokenizer_json");
    const json_t *added = json_object_get(tj, "added_tokens");
    const char *key;
    const json_t *v;
    size_t i;
    json_int_t ids = 0;
    if (!json_is_object(tj))
        return NULL;
    json_object_foreach (
        (json_t *)json_object_get(json_object_get(tj, "model"), "vocab"), key,
        v)
        if (json_integer_value(v) >= ids)
            ids = json_integer_value(v) + 1;
    json_t *names = json_array();
    json_array_foreach (added, i, v) {
        if (json_integer_value(json_object_get(v, "id")) >= ids)
            ids = json_integer_value(json_object_get(v, "id")) + 1;
        json_array_append(names, json_object_get(v, "content"));
    }
    return json_pack("{s:s, s:I, s:o}", "type", "huggingface", "vocab_size",
                     ids, "added_tokens", names ? names : json_array());
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
    json_t *tz = tokenizer_summary(json_object_get(doc, "tokenizer"));
    if (tz)
        bad |= json_object_set_new(doc, "tokenizer", tz);
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
    json_t *meta = NULL, *doc = NULL, *config = NULL, *tok = NULL;
    nn_net *net = NULL;
    const char *weights = NULL, *name = NULL;
    char out[PATH_MAX], id[TY_ID_MAX];
    int quota_refused = 0; /* 413, unlike the model's own size limits (422) */
    int hf = 0;
    ty_status s;
    if (!http_req_is_multipart(r)) {
        http_reply_problem(r, 415, NULL,
                           "send the model as multipart/form-data: a weights "
                           "part (safetensors) and a metadata part (JSON)");
        return;
    }
    if ((s = read_import_form(r, &weights, &meta, &name, &hf, &config, &tok,
                              &err)) != TY_OK ||
        (s = http_req_temp_path(r, ".safetensors", out, sizeof out, &err)) !=
            TY_OK)
        goto fail;
    s = hf ? hf_gpt2_import(weights, config, tok, out, &net, &err)
           : nn_model_import(weights, meta, out, &net, &err);
    if (s != TY_OK) {
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
    json_decref(config);
    json_decref(tok);
    nn_net_destroy(net);
    return;
fail:
    json_decref(doc);
    json_decref(meta);
    json_decref(config);
    json_decref(tok);
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

/* The files of the hf-gpt2 layout, as `file` names them. */
static const char *const hf_files[] = {"model.safetensors", "config.json",
                                       "tokenizer.json"};

/* GET .../weights?layout=hf-gpt2[&file=...]: the model in Hugging Face's
 * GPT-2 layout (hf_gpt2_export), converted on each request from the
 * stored file; off the HTTP threads, as a conversion reads all of it. */
static void weights_hf_run(api_ctx *app, http_req *r)
{
    char sha[65], path[PATH_MAX], tmp[PATH_MAX], id[TY_ID_MAX];
    json_t *doc, *out = NULL;
    ty_err err = {0};
    const char *file = http_req_query(r, "file");
    size_t which = 0;
    while (file && which < TY_ARRAY_LEN(hf_files) &&
           strcmp(file, hf_files[which]))
        which++;
    if (which == TY_ARRAY_LEN(hf_files)) {
        http_reply_problem(r, 422, "file",
                           "file must be model.safetensors (the default), "
                           "config.json or tokenizer.json");
        return;
    }
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
    if (which == 0) {
        if ((s = http_req_temp_path(r, ".safetensors", tmp, sizeof tmp,
                                    &err)) == TY_OK &&
            (s = hf_gpt2_export(path, tmp, NULL, NULL, &err)) == TY_OK)
            http_reply_file(r, 200, "application/octet-stream", tmp,
                            hf_files[0]);
    } else {
        /* A file of the checkpoint folder, as the weights are: a download
         * named as transformers names it, indented as it writes it. */
        s = hf_gpt2_export(path, NULL, which == 1 ? &out : NULL,
                           which == 2 ? &out : NULL, &err);
        size_t len = 0;
        char *text =
            out ? tyjson_dumps_line(
                      out, JSON_INDENT(2) | (which == 1 ? JSON_SORT_KEYS : 0),
                      &len)
                : NULL;
        json_decref(out);
        if (s == TY_OK && !out)
            http_reply_problem(r, 404, "file",
                               "model %s has no tokenizer.json: only a GPT-2 "
                               "imported with a tokenizer part keeps one",
                               id);
        else if (s == TY_OK && !text)
            s = ty_fail(&err, TY_ENOMEM, NULL, "out of memory");
        else if (s == TY_OK) {
            char disp[64];
            snprintf(disp, sizeof disp, "attachment; filename=\"%s\"",
                     hf_files[which]);
            http_reply_header(r, "Content-Disposition", disp);
            http_reply_buffer(r, 200, "application/octet-stream", text, len);
            text = NULL;
        }
        free(text);
    }
    if (s != TY_OK)
        http_reply_error(r, s, &err);
}

void api_models_weights(api_ctx *app, http_req *r)
{
    char sha[65], path[PATH_MAX], name[TY_ID_MAX + 16], id[TY_ID_MAX];
    json_t *doc;
    ty_err err = {0};
    const char *layout = http_req_query(r, "layout");
    if (layout && !strcmp(layout, HF_GPT2_LAYOUT)) {
        if (!http_req_offload(r, weights_hf_run))
            weights_hf_run(app, r);
        return;
    }
    if (layout && strcmp(layout, "trainyard")) {
        http_reply_problem(
            r, 422, "layout",
            "layout must be trainyard (the default) or " HF_GPT2_LAYOUT);
        return;
    }
    if (http_req_query(r, "file")) {
        http_reply_problem(r, 422, "file",
                           "file applies to layout " HF_GPT2_LAYOUT " only");
        return;
    }
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
