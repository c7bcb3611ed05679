/*
 * metrics.c - GET /metrics: the operator metrics (common/opmetrics.h) in
 * the Prometheus text format.
 *
 * The families that describe state rather than events are refilled here at
 * each scrape: jobs by tenant and state from the store (here), slots by
 * profile and the GPUs' telemetry from the inventory (opm_collect_inventory,
 * NVML re-read; a value the driver does not give, as on simulated GPUs, is
 * left out, never made up). A mutex keeps two scrapes from interleaving a
 * refill.
 *
 * The endpoint is public like /healthz, so a Prometheus scrapes it with no
 * key; what it tells everyone names no tenant, deployment or job: the
 * families labelled by them are summed over those labels
 * (metrics_render_public). An admin's key (Authorization: Bearer) gets the
 * whole registry, per tenant, deployment and job; a tenant's key gets the
 * public view (it would otherwise see the other tenants' ids), and a key
 * that fails is a 401 counted like any failed authentication
 * (reqkey_optional). GPU names, uuids and route templates are in both;
 * keys in neither (docs/operations.md, Metrics and logs).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "common/opmetrics.h"
#include "gpu/inventory.h"
#include "server/accesslog.h"
#include "server/reqkey.h"

static pthread_mutex_t scrape_mu = PTHREAD_MUTEX_INITIALIZER;

#define LABELS(...) ((const char *const[]){__VA_ARGS__, NULL})

static const char *const job_states[] = {JOB_QUEUED,  JOB_SCHEDULED,
                                         JOB_RUNNING, JOB_SUCCEEDED,
                                         JOB_FAILED,  JOB_CANCELLED};

/* Every state of a tenant with any job gets a series (0 when none), so a
 * rate or a comparison never sees a series vanish when a count drops. */
static ty_status collect_jobs(api_ctx *app, const opm_families *f, ty_err *err)
{
    json_t *rows = NULL;
    ty_status s = store_job_counts(app->store, &rows, err);
    if (s != TY_OK)
        return s;
    metrics_clear(f->jobs);
    size_t i;
    json_t *row;
    json_array_foreach (rows, i, row) {
        const char *tenant =
            json_string_value(json_object_get(row, "tenant_id"));
        if (!tenant)
            continue;
        for (size_t k = 0; k < sizeof job_states / sizeof job_states[0]; k++)
            metrics_add(f->jobs, LABELS(tenant, job_states[k]), 0);
        metrics_set(
            f->jobs,
            LABELS(tenant, json_string_value(json_object_get(row, "status"))),
            (double)json_integer_value(json_object_get(row, "n")));
    }
    json_decref(rows);
    return TY_OK;
}

void api_metrics(api_ctx *app, http_req *r)
{
    store_key who;
    if (reqkey_optional(r, &who) != TY_OK)
        return; /* answered */
    /* Every request finished before this one is counted first. */
    access_log_flush();
    const opm_families *f = opm();
    metrics_registry *reg = opm_registry();
    if (!reg) {
        http_reply_error(r, TY_ENOMEM, NULL);
        return;
    }
    ty_err err = {0};
    pthread_mutex_lock(&scrape_mu);
    ty_status s = collect_jobs(app, f, &err);
    if (s == TY_OK)
        opm_collect_inventory(app->inventory);
    size_t len = 0;
    char *text = NULL;
    if (s == TY_OK)
        text = who.is_admin ? metrics_render(reg, &len)
                            : metrics_render_public(reg, &len);
    pthread_mutex_unlock(&scrape_mu);
    if (s != TY_OK) {
        http_reply_error(r, s, &err);
        return;
    }
    if (!text) {
        http_reply_error(r, TY_ENOMEM, NULL);
        return;
    }
    http_reply_buffer(r, 200, "text/plain; version=0.0.4; charset=utf-8", text,
                      len);
}
