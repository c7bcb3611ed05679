/*
 * miglayout.c - the admin's MIG layout calls (jobs/miglayout.h):
 *   POST /v1/admin/mig-layout        change a GPU's layout: 200 done at
 *                                    once (an idle GPU) or not the
 *                                    server's to apply ("applied": false
 *                                    and the nvidia-smi commands), 202
 *                                    while its slots drain
 *   GET  /v1/admin/mig-layout        every GPU's layout and latest change
 *   GET  /v1/admin/mig-layout/{gpu}  one GPU's
 */
#include <stdlib.h>

#include "api/api.h"
#include "jobs/miglayout.h"
#include "jobs/service.h"

void api_mig_layout_apply(api_ctx *app, http_req *r)
{
    const json_t *body = api_json_object(r);
    if (!body)
        return;
    ty_err err = {0};
    jobs_mig_change c;
    json_t *doc = NULL;
    int status = 200;
    ty_status s = jobs_mig_change_parse(body, app->inventory, &c, &err);
    if (s == TY_OK)
        s = jobs_mig_layout_apply(app->jobs, &c, &doc, &status, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    http_reply_json(r, (unsigned)status, doc);
}

void api_mig_layout_list(api_ctx *app, http_req *r)
{
    http_reply_json(r, 200, jobs_mig_layout_list(app->jobs));
}

void api_mig_layout_get(api_ctx *app, http_req *r)
{
    const char *p = http_req_param(r, 0);
    char *end = NULL;
    long idx = p ? strtol(p, &end, 10) : -1;
    ty_err err = {0};
    json_t *doc = NULL;
    ty_status s;
    if (!p || !*p || *end || idx < 0 || idx > 1000000)
        /* not echoed: the path may hold any bytes */
        s = ty_fail(&err, TY_ENOTFOUND, "gpu",
                    "no such GPU: {gpu} is a GPU's index in GET /v1/devices");
    else
        s = jobs_mig_layout_get(app->jobs, (int)idx, &doc, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    http_reply_json(r, 200, doc);
}
