/*
 * deployspec.h - what a deployment asks for, as POST and PATCH
 * /v1/deployments spell it (openapi.yaml's DeploymentCreate and
 * DeploymentPatch), parsed and validated, and rendered back:
 *
 *   {"name": "fashion",                       1..63 of [A-Za-z0-9._-],
 *                                             unique per tenant
 *    "model": "mdl_..." | a model name,       required on POST
 *    "replicas": {"min": 1, "max": 1},        0 <= min <= max, 1 <= max
 *                                             <= DEPLOY_MAX_REPLICAS (on
 *                                             POST max defaults to
 *                                             max(1, min))
 *    "resources": {"gpu": "none" | "any" | "whole" | "<MIG profile>" |
 *                  {"min_memory_gb", "min_compute_slices"}},
 *                                             as a job's (jobs/jobreq.h),
 *                                             plus "whole": a whole GPU
 *    "batching": {"max_batch_size": 1..DEPLOY_MAX_BATCH (default 32),
 *                 "max_queue_delay_us": 0..1000000 (default 500),
 *                 "preferred_batch_sizes": [..] (each 1..max_batch_size,
 *                 strictly increasing, at most DEPLOY_MAX_PREFERRED)},
 *    "limits": {"requests_per_second": > 0 and <= 1000000, or null
 *                                      (none),
 *               "burst": 1..1000000, only with a rate (default, also
 *                        when PATCH gives a new rate without a burst:
 *                        max(1, ceil(rps))),
 *               "max_concurrency": 1..100000 or null (none),
 *               "tokens_per_minute": 1..1000000000 or null (none):
 *                        generation tokens, a bucket of that size refilled
 *                        at a sixtieth of it a second; a generation
 *                        reserves its prompt and max_tokens},
 *    "autoscaling": {"target_in_flight": > 0 and <= 1000000 (requests
 *                     in flight per ready replica above which it scales
 *                     up; default max_batch_size),
 *                    "target_queue_ms": > 0 and <= 60000 or null (none:
 *                     the default): the median time a request of the last
 *                     10-20 s waited in a replica's batcher above which
 *                     it scales up too,
 *                    "scale_up_after_s": 0..600 (default 2),
 *                    "scale_down_after_s": 1..86400 (default 60)},
 *    "priority": integer (as a job's)}
 *
 * Unknown keys are errors, at every level. "name" and "model" are
 * required on POST. A member given as null takes its default on POST and
 * is left as it was on PATCH, except in "limits", where null means no
 * limit. PATCH takes any of "model", "replicas", "batching", "limits",
 * "autoscaling", "priority" (not "name", not "resources": a different
 * slice is a different deployment; either is a 422 naming it); each object
 * given replaces only the members it names ("preferred_batch_sizes" as a
 * whole).
 *
 * Parsing is pure: whether the model exists and the host could hold the
 * slices is the controller's (deploy/deploy.h).
 */
#ifndef TY_DEPLOYSPEC_H
#define TY_DEPLOYSPEC_H

#include <jansson.h>
#include <stdint.h>

#include "common/ids.h"
#include "common/ty.h"
#include "node/batcher.h"
#include "sched/sched.h"
#include "store/store.h"

#define DEPLOY_NAME_MAX 64
#define DEPLOY_MAX_REPLICAS 64
#define DEPLOY_MAX_BATCH BATCHER_MAX_BATCH
#define DEPLOY_MAX_PREFERRED BATCHER_MAX_PREFERRED
#define DEPLOY_GPU_MAX 48 /* "gpu" as given, normalized, as text */

typedef struct {
    char name[DEPLOY_NAME_MAX];
    /* as given: an id or a name (a model's whole name: the controller
     * resolves it, store_ref_resolve's rule) */
    char model[STORE_NAME_MAX + 1];
    int min_replicas, max_replicas;
    sched_request request;
    json_t *resources; /* normalized {"gpu": ...}; owned (deploy_spec_free) */
    uint32_t max_batch_size;
    uint32_t max_queue_delay_us;
    uint32_t preferred[DEPLOY_MAX_PREFERRED];
    int npreferred;
    double rps;                 /* 0: no rate limit */
    uint32_t burst;             /* tokens; with rps */
    uint32_t max_concurrency;   /* 0: none */
    uint32_t tokens_per_minute; /* generation tokens; 0: none */
    double target_in_flight;
    double target_queue_ms; /* 0: none */
    double scale_up_after_s;
    double scale_down_after_s;
    int priority;
} deploy_spec;

/* Parses a POST body into *out, with the defaults for what is missing;
 * host_has_gpus picks resources' default as a job's. TY_EINVAL naming the
 * field ("replicas.min", "batching.preferred_batch_sizes[2]", ...). On
 * failure *out holds nothing to free. */
ty_status deploy_spec_parse(const json_t *body, int host_has_gpus,
                            deploy_spec *out, ty_err *err);

/* Applies a PATCH body to *io (a copy of the current spec): only the
 * members given change; the result is checked as a whole (min <= max,
 * preferred sizes within max_batch_size). *model_changed is set when
 * "model" was given. On failure *io is unchanged. */
ty_status deploy_spec_patch(const json_t *body, deploy_spec *io,
                            int *model_changed, ty_err *err);

/* The spec as the API shows it: {"name", "model", "replicas": {"min",
 * "max"}, "resources", "batching", "limits", "autoscaling", "priority"}
 * (new reference; NULL when out of memory). */
json_t *deploy_spec_json(const deploy_spec *s);

/* A deep copy (the resources document is shared by reference count).
 * Whatever *dst held is overwritten, not freed. */
void deploy_spec_copy(deploy_spec *dst, const deploy_spec *src);

/* Releases what *s owns (the resources document) and clears the pointer;
 * s may be NULL, and freeing twice is harmless. */
void deploy_spec_free(deploy_spec *s);

#endif
