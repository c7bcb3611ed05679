/* health.c - liveness, readiness, and the OpenAPI document. */
#include "api/api.h"
#include "jobs/service.h"

#include <sys/statvfs.h>

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
    /* A full disk answers uploads 507; say so before they are sent. The
     * figures are the disk's, never its path. */
    struct statvfs vfs;
    if (app->min_free_bytes && statvfs(app->data_dir, &vfs) == 0) {
        uint64_t free_bytes = (uint64_t)vfs.f_bavail * vfs.f_frsize;
        if (free_bytes < app->min_free_bytes) {
            http_reply_problem(r, 503, NULL,
                               "the server's disk is nearly full: %llu bytes "
                               "free, under the %llu bytes it needs to accept "
                               "work (--min-free-bytes)",
                               (unsigned long long)free_bytes,
                               (unsigned long long)app->min_free_bytes);
            return;
        }
    }
    /* Where training workers run: with Slurm, an unreachable slurmrestd
     * pauses new submissions but nothing else (the server still serves,
     * queues, and hears from running workers), so it is "degraded", not
     * 503. */
    json_t *exec = jobs_executor_status(app->jobs);
    int ok = !exec || json_is_true(json_object_get(exec, "ok"));
    json_t *body = json_pack("{s:s}", "status", ok ? "ready" : "degraded");
    if (exec)
        json_object_set_new(body, "executor", exec);
    http_reply_json(r, 200, body);
}

void api_openapi(api_ctx *app, http_req *r)
{
    http_reply_static(r, 200, "application/yaml", ty_openapi_yaml,
                      ty_openapi_yaml_len);
}
