/*
 * deployments.c - /v1/deployments: create a serving deployment, list,
 * show, change (PATCH) and delete.
 *
 * Thin handlers: each takes the body and the tenant, calls the deployment
 * controller (deploy/deploy.h) and renders what it gives. The spec's checks
 * (deploy/deployspec.h), whether the model exists and whether this host
 * could hold the replicas are the controller's: a mistake is a 422 naming
 * the field.
 */
#include <stdio.h>

#include "api/api.h"
#include "deploy/deploy.h"

/* Replies with doc (stolen), or the error. */
static void reply(http_req *r, ty_status s, const ty_err *err, unsigned status,
                  json_t *doc)
{
    if (s != TY_OK) {
        json_decref(doc);
        http_reply_error(r, s, err);
        return;
    }
    http_reply_json(r, status, doc);
}

void api_deployments_create(api_ctx *app, http_req *r)
{
    const json_t *body = api_json_object(r);
    if (!body)
        return;
    ty_err err = {0};
    json_t *doc = NULL;
    ty_status s = deploy_create(app->deploy, api_tenant(r), body, &doc, &err);
    const char *id = json_string_value(json_object_get(doc, "id"));
    if (s == TY_OK && id) {
        char location[128];
        snprintf(location, sizeof location, "/v1/deployments/%s", id);
        http_reply_header(r, "Location", location);
    }
    reply(r, s, &err, 201, doc);
}

void api_deployments_list(api_ctx *app, http_req *r)
{
    ty_err err = {0};
    json_t *items = NULL;
    ty_status s = deploy_list(app->deploy, api_tenant(r), &items, &err);
    if (s != TY_OK) {
        json_decref(items);
        http_reply_error(r, s, &err);
        return;
    }
    /* Every deployment in one page: a tenant has a handful, each holding
     * slices of this host. */
    api_reply_list(r, items, 0);
}

void api_deployments_get(api_ctx *app, http_req *r)
{
    ty_err err = {0};
    json_t *doc = NULL;
    ty_status s = deploy_get(app->deploy, api_tenant(r), http_req_param(r, 0),
                             &doc, &err);
    reply(r, s, &err, 200, doc);
}

void api_deployments_update(api_ctx *app, http_req *r)
{
    const json_t *body = api_json_object(r);
    if (!body)
        return;
    ty_err err = {0};
    json_t *doc = NULL;
    ty_status s = deploy_patch(app->deploy, api_tenant(r), http_req_param(r, 0),
                               body, &doc, &err);
    reply(r, s, &err, 200, doc);
}

void api_deployments_delete(api_ctx *app, http_req *r)
{
    ty_err err = {0};
    json_t *doc = NULL;
    ty_status s = deploy_delete(app->deploy, api_tenant(r),
                                http_req_param(r, 0), &doc, &err);
    /* 202: its replicas drain and stop after the reply. */
    reply(r, s, &err, 202, doc);
}
