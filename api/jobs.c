/*
 * jobs.c - /v1/jobs: submit a training job, list, show, per-epoch metrics
 * (a page, all, or CSV), the curves downsampled for a chart, cancel.
 *
 * Thin handlers: each parses the request, calls the job service
 * (jobs/service.h) or the store, and renders the reply. What a submission
 * must pass (the dataset, the validation set, the model spec against the
 * dataset's shape, the hyperparameters, the memory, the quotas) is the
 * service's admission (jobs/admission.h): a mistake is a 422 naming the
 * field, not a job that fails minutes later.
 */
#include <stdint.h>
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
        (s = tyjson_get_string(body, "dataset", "", 1, STORE_NAME_MAX, NULL,
                               &sub.dataset, &err)) != TY_OK ||
        (s = tyjson_get_string(body, "name", "", 0, 200, NULL, &sub.name,
                               &err)) != TY_OK)
        goto out;
    /* What it asks of the scheduler; the job service checks that this
     * host could ever give it, and everything else. */
    if ((s = jobreq_parse(json_object_get(body, "resources"),
                          jobs_host_has_gpus(app->jobs), &sub.req,
                          &sub.workers, &resources, &err)) != TY_OK ||
        (s = jobreq_min_workers(json_object_get(body, "resources"), sub.workers,
                                &sub.min_workers, resources, &err)) != TY_OK ||
        (s = jobreq_priority(json_object_get(body, "priority"), &sub.priority,
                             &err)) != TY_OK)
        goto out;
    sub.resources = resources;
    sub.validation = json_object_get(body, "validation");
    sub.model = json_object_get(body, "model");
    sub.hyperparameters = json_object_get(body, "hyperparameters");
    const char *dry = http_req_query(r, "dry_run");
    if (dry && strcmp(dry, "true") && strcmp(dry, "false")) {
        s = ty_fail(&err, TY_EINVAL, "dry_run",
                    "dry_run must be true or false");
        goto out;
    }
    if (dry && !strcmp(dry, "true")) {
        /* The checks and the estimate, nothing stored. */
        if ((s = jobs_check(app->jobs, tenant, &sub, &job, &err)) != TY_OK)
            goto out;
        http_reply_json(r, 200, job);
        job = NULL;
        goto out;
    }
    if ((s = jobs_submit(app->jobs, tenant, &sub, &job, &err)) != TY_OK)
        goto out;
    char location[128];
    snprintf(location, sizeof location, "/v1/jobs/%s",
             json_string_value(json_object_get(job, "id")));
    http_reply_header(r, "Location", location);
    http_reply_json(r, 202, job);
    job = NULL;
out:
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
    static const char *const states[] = {JOB_QUEUED,  JOB_SCHEDULED,
                                         JOB_RUNNING, JOB_SUCCEEDED,
                                         JOB_FAILED,  JOB_CANCELLED};
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
    char id[TY_ID_MAX];
    if (!api_resolve_param(app, r, STORE_REF_JOB, id))
        return;
    ty_status s = store_job_get(app->store, api_tenant(r), id, &doc, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    jobs_annotate(app->jobs, doc, api_tenant(r));
    http_reply_json(r, 200, doc);
}

/* A number for a CSV cell: empty for null. */
static void csv_number(FILE *f, const json_t *v)
{
    if (json_is_integer(v))
        fprintf(f, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        fprintf(f, "%.9g", json_real_value(v));
    else if (json_is_string(v))
        fprintf(f, "%s", json_string_value(v)); /* device, precision */
    else if (json_is_true(v) || json_is_false(v))
        fprintf(f, "%s", json_is_true(v) ? "true" : "false");
}

/* The epochs as CSV, one record a row; the columns are the union of the
 * records' keys in the order first seen. */
static void reply_csv(http_req *r, const char *id, const json_t *epochs)
{
    json_t *cols = json_array();
    size_t i, j;
    json_t *e, *c;
    json_array_foreach (epochs, i, e) {
        const char *k;
        json_t *v;
        json_object_foreach ((json_t *)e, k, v) {
            int seen = 0;
            json_array_foreach (cols, j, c)
                seen |= !strcmp(json_string_value(c), k);
            if (!seen && !json_is_object(v) && !json_is_array(v))
                json_array_append_new(cols, json_string(k));
        }
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        json_decref(cols);
        http_reply_problem(r, 503, NULL, "out of memory");
        return;
    }
    json_array_foreach (cols, j, c)
        fprintf(f, "%s%s", j ? "," : "", json_string_value(c));
    fputc('\n', f);
    json_array_foreach (epochs, i, e) {
        json_array_foreach (cols, j, c) {
            if (j)
                fputc(',', f);
            csv_number(f, json_object_get(e, json_string_value(c)));
        }
        fputc('\n', f);
    }
    fclose(f);
    json_decref(cols);
    char disposition[128];
    snprintf(disposition, sizeof disposition,
             "attachment; filename=\"%s-metrics.csv\"", id);
    http_reply_header(r, "Content-Disposition", disposition);
    http_reply_buffer(r, 200, "text/csv; charset=utf-8", buf, len);
}

void api_jobs_metrics(api_ctx *app, http_req *r)
{
    long long offset, limit;
    const char *order = http_req_query(r, "order");
    const char *format = http_req_query(r, "format");
    if (order && strcmp(order, "asc") && strcmp(order, "desc")) {
        http_reply_problem(r, 400, "order", "order must be asc or desc");
        return;
    }
    if (format && strcmp(format, "json") && strcmp(format, "csv")) {
        http_reply_problem(r, 400, "format", "format must be json or csv");
        return;
    }
    /* Without limit: every epoch (a download, or a short run). */
    if (!api_query_number(r, "offset", 0, INT64_MAX, 0, &offset) ||
        !api_query_number(r, "limit", 1, API_LIST_MAX, -1, &limit))
        return;
    json_t *epochs;
    int64_t total = 0;
    ty_err err = {0};
    char id[TY_ID_MAX];
    if (!api_resolve_param(app, r, STORE_REF_JOB, id))
        return;
    ty_status s = store_job_epochs_page(app->store, api_tenant(r), id, offset,
                                        limit, order && !strcmp(order, "desc"),
                                        &epochs, &total, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    if (format && !strcmp(format, "csv")) {
        reply_csv(r, id, epochs);
        json_decref(epochs);
        return;
    }
    http_reply_json(r, 200,
                    json_pack("{s:s, s:I, s:o}", "job", id, "total",
                              (json_int_t)total, "epochs", epochs));
}

void api_jobs_curves(api_ctx *app, http_req *r)
{
    long long points;
    if (!api_query_number(r, "points", 10, 1000, 200, &points))
        return;
    json_t *doc;
    ty_err err = {0};
    char id[TY_ID_MAX];
    if (!api_resolve_param(app, r, STORE_REF_JOB, id))
        return;
    ty_status s = store_job_curves(app->store, api_tenant(r), id, (int)points,
                                   &doc, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    http_reply_json(r, 200, doc);
}

void api_jobs_cancel(api_ctx *app, http_req *r)
{
    ty_err err = {0};
    int was_running = 0;
    json_t *doc;
    char id[TY_ID_MAX];
    if (!api_resolve_param(app, r, STORE_REF_JOB, id))
        return;
    ty_status s =
        jobs_cancel(app->jobs, api_tenant(r), id, &doc, &was_running, &err);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    /* 202: a running job stops within seconds; 200: it is cancelled now. */
    http_reply_json(r, was_running ? 202 : 200, doc);
}
