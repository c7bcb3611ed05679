/*
 * jobs.c - /v1/jobs: submit a training job, list, show, per-epoch metrics,
 * cancel.
 *
 * Thin handlers: each parses the request, calls the job service
 * (jobs/service.h) or the store, and renders the reply. What a submission
 * must pass (the dataset, the validation set, the model spec against the
 * dataset's shape, the hyperparameters, the memory, the quotas) is the
 * service's admission (jobs/admission.h): a mistake is a 422 naming the
 * field, not a job that fails minutes later.
 */
#include <stdio.h>
#include <string.h>

#include "api/api.h"
#include "common/ids.h"
#include "common/jsonutil.h"
#include "jobs/jobreq.h"
#include "jobs/service.h"

void api_jobs_create(api_ctx *app, http_req *r)
{
    const json_t *body = api_json_object(r);
    if (!body)
        return;
    const char *tenant = api_tenant(r);
    ty_err err = {0};
    json_t *job = NULL;
    static const char *const keys[] = {
        "name",      "dataset",  "validation", "model", "hyperparameters",
        "resources", "priority", NULL};
    job_submission sub = {0};
    json_t *resources = NULL;
    ty_status s;
    if ((s = tyjson_check_keys(body, keys, "", &err)) != TY_OK ||
        (s = tyjson_get_string(body, "dataset", "", 1, TY_ID_MAX, NULL,
                               &sub.dataset, &err)) != TY_OK ||
        (s = tyjson_get_string(body, "name", "", 0, 200, NULL, &sub.name,
                               &err)) != TY_OK)
        goto fail;
    /* What it asks of the scheduler; the job service checks that this
     * host could ever give it, and everything else. */
    if ((s = jobreq_parse(json_object_get(body, "resources"),
                          jobs_host_has_gpus(app->jobs), &sub.req, &resources,
                          &err)) != TY_OK ||
        (s = jobreq_priority(json_object_get(body, "priority"), &sub.priority,
                             &err)) != TY_OK)
        goto fail;
    sub.resources = resources;
    sub.validation = json_object_get(body, "validation");
    sub.model = json_object_get(body, "model");
    sub.hyperparameters = json_object_get(body, "hyperparameters");
    if ((s = jobs_submit(app->jobs, tenant, &sub, &job, &err)) != TY_OK)
        goto fail;
    char location[128];
    snprintf(location, sizeof location, "/v1/jobs/%s",
             json_string_value(json_object_get(job, "id")));
    http_reply_header(r, "Location", location);
    http_reply_json(r, 202, job);
    job = NULL;
fail:
    if (s != TY_OK)
        http_reply_error(r, s, &err);
    json_decref(job);
    json_decref(resources);
}

void api_jobs_list(api_ctx *app, http_req *r)
{
    store_page page;
    if (!api_page(r, &page))
        return;
    const char *status = http_req_query(r, "status");
    static const char *const states[] = {
        JOB_QUEUED, JOB_SCHEDULED, JOB_RUNNING,
        JOB_SUCCEEDED, JOB_FAILED, JOB_CANCELLED};
    if (status) {
        int ok = 0;
        for (size_t i = 0; i < TY_ARRAY_LEN(states); i++)
            ok |= !strcmp(status, states[i]);
        if (!ok) {
            http_reply_problem(r, 400, "status",
                               "status must be queued, scheduled, running, "
                               "succeeded, failed or cancelled");
            return;
        }
    }
    json_t *items;
    int64_t next;
    ty_err err = {0};
    ty_status s = store_job_list(app->store, api_tenant(r), status, page,
                                 &items, &next, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    jobs_annotate(app->jobs, items, api_tenant(r));
    api_reply_list(r, items, next);
}

void api_jobs_get(api_ctx *app, http_req *r)
{
    json_t *doc;
    ty_err err = {0};
    ty_status s = store_job_get(app->store, api_tenant(r), http_req_param(r, 0),
                                &doc, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    jobs_annotate(app->jobs, doc, api_tenant(r));
    http_reply_json(r, 200, doc);
}

void api_jobs_metrics(api_ctx *app, http_req *r)
{
    json_t *epochs;
    ty_err err = {0};
    const char *id = http_req_param(r, 0);
    ty_status s =
        store_job_epochs(app->store, api_tenant(r), id, &epochs, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    http_reply_json(r, 200,
                    json_pack("{s:s, s:o}", "job", id, "epochs", epochs));
}

void api_jobs_cancel(api_ctx *app, http_req *r)
{
    ty_err err = {0};
    int was_running = 0;
    json_t *doc;
    ty_status s = jobs_cancel(app->jobs, api_tenant(r), http_req_param(r, 0),
                              &doc, &was_running, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    /* 202: a running job stops within seconds; 200: it is cancelled now. */
    http_reply_json(r, was_running ? 202 : 200, doc);
}
