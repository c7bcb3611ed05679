/*
 * kserve_stats.h - the KServe statistics extension's counters (GET
 * /v2/models[/{name}[/versions/1]]/stats), per tenant and model since the
 * server started; kserve.c records each infer and renders them.
 */
#ifndef TY_API_KSERVE_STATS_H
#define TY_API_KSERVE_STATS_H

#include <jansson.h>
#include <stdint.h>

/* What one infer request measured. */
typedef struct {
    uint64_t batch, input_ns, infer_ns, output_ns;
} infer_times;

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t kserve_now_ns(void);

/* Counts one infer of tenant's model id: ok or not, its total time and
 * its parts. Takes no lock (a per-thread table); an infer that finds no
 * memory for its entry is not counted. */
void kserve_stats_record(const char *tenant, const char *id, int ok,
                         uint64_t ns, const infer_times *t);

/* The statistics document of one model (zeros when it has none), version
 * "1". */
json_t *kserve_stats_json(const char *tenant, const char *id);

#endif
