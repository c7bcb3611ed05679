/* health.c - liveness, readiness, and the OpenAPI document. */
#include "api/api.h"

extern const char ty_openapi_yaml[];
extern const unsigned long ty_openapi_yaml_len;

void api_healthz(api_ctx *app, http_req *r)
{
    http_reply_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

void api_readyz(api_ctx *app, http_req *r)
{
    ty_err err = {0};
    if (store_ping(app->store, &err) != TY_OK) {
        http_reply_problem(r, 503, NULL, "the database is not answering: %s",
                           err.msg);
        return;
    }
    http_reply_json(r, 200, json_pack("{s:s}", "status", "ready"));
}

void api_openapi(api_ctx *app, http_req *r)
{
    http_reply_static(r, 200, "application/yaml", ty_openapi_yaml,
                      ty_openapi_yaml_len);
}
