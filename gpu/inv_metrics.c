/*
 * inv_metrics.c - the inventory's operator metrics (common/opmetrics.h's
 * slot and GPU families), refilled at each scrape of GET /metrics.
 */
#include <pthread.h>
#include <stdio.h>

#include "common/opmetrics.h"
#include "gpu/inventory.h"

#define LABELS(...) ((const char *const[]){__VA_ARGS__, NULL})

static void set_known(metrics_family *family, const char *gpu, int v,
                      double scale)
{
    if (v != INV_UNKNOWN)
        metrics_set(family, LABELS(gpu), (double)v * scale);
}

void opm_collect_inventory(inventory *inv)
{
    const opm_families *f = opm();
    metrics_clear(f->slices);
    metrics_clear(f->slices_in_use);
    metrics_clear(f->gpu_info);
    metrics_clear(f->gpu_mem_total);
    metrics_clear(f->gpu_util);
    metrics_clear(f->gpu_mem_util);
    metrics_clear(f->gpu_temp);
    metrics_clear(f->gpu_power);
    if (!inv)
        return;
    inv_refresh(inv);
    pthread_mutex_lock(&inv->mu);
    for (int i = 0; i < inv->nslots; i++) {
        const inv_slot *s = &inv->slots[i];
        if (s->retired)
            continue;
        const char *profile = s->profile ? s->profile : "gpu";
        metrics_add(f->slices, LABELS(profile), 1);
        metrics_add(f->slices_in_use, LABELS(profile), s->job_id[0] ? 1 : 0);
    }
    for (int i = 0; i < inv->ngpus; i++) {
        const inv_gpu *g = &inv->gpus[i];
        char idx[16];
        snprintf(idx, sizeof idx, "%d", g->index);
        metrics_set(f->gpu_info, LABELS(idx, g->uuid, g->name, g->model), 1);
        if (g->memory_bytes)
            metrics_set(f->gpu_mem_total, LABELS(idx), (double)g->memory_bytes);
        set_known(f->gpu_util, idx, g->utilization_gpu_pct, 0.01);
        set_known(f->gpu_mem_util, idx, g->utilization_memory_pct, 0.01);
        set_known(f->gpu_temp, idx, g->temperature_c, 1);
        set_known(f->gpu_power, idx, g->power_mw, 0.001);
    }
    pthread_mutex_unlock(&inv->mu);
}
