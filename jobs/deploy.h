/*
 * deploy.h - serving deployments: the controller that keeps each
 * deployment's replicas (`trainyard replica` processes, jobs/replica.h)
 * running as jobs of kind serving in the job service's scheduler, and the
 * calls behind /v1/deployments.
 *
 * The documents these calls give are the API's Deployment (openapi.yaml):
 * the spec (jobs/deployspec.h) with "id", "created_at", "updated_at",
 * "generation", "status", "replicas" (the spec's min and max, and
 * "desired", "ready"), "instances" (each replica: id, state, generation,
 * device, slot, gpu, profile, started_at, in_flight) and "traffic"
 * (requests, errors, rejected, latency and batch figures).
 *
 * Errors name the field, as the other services': TY_EINVAL (422) for a bad
 * spec or a model that does not exist ("model"), TY_ECONFLICT (409) for a
 * name taken, TY_ENOTFOUND (404) for another tenant's or an unknown
 * deployment.
 */
#ifndef TY_DEPLOY_H
#define TY_DEPLOY_H

#include <jansson.h>

#include "common/ty.h"

struct jobs_service;

/* POST /v1/deployments: body is the request (borrowed). *doc the new
 * deployment (new reference): its replicas are queued. */
ty_status jobs_deploy_create(struct jobs_service *js, const char *tenant,
                             const json_t *body, json_t **doc, ty_err *err);

/* GET /v1/deployments: the tenant's deployments, oldest first. */
ty_status jobs_deploy_list(struct jobs_service *js, const char *tenant,
                           json_t **items, ty_err *err);

/* GET /v1/deployments/{id} (id or name). */
ty_status jobs_deploy_get(struct jobs_service *js, const char *tenant,
                          const char *ref, json_t **doc, ty_err *err);

/* PATCH /v1/deployments/{id}: a new model rolls the replicas (new ones
 * started, traffic moved once they are ready, the old drained). */
ty_status jobs_deploy_patch(struct jobs_service *js, const char *tenant,
                            const char *ref, const json_t *body, json_t **doc,
                            ty_err *err);

/* DELETE /v1/deployments/{id}: stops routing to it, drains its replicas
 * and frees their slices; *doc is the deployment as it was, status
 * "deleting". */
ty_status jobs_deploy_delete(struct jobs_service *js, const char *tenant,
                             const char *ref, json_t **doc, ty_err *err);

#endif
