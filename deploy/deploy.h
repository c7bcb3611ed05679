/*
 * deploy.h - serving deployments: the controller that keeps each
 * deployment's replicas (`trainyard replica` processes, node/replica.h)
 * running as jobs of kind serving in the job service (jobs/kind.h: the
 * controller fills the serving kind's hooks; the service never calls it
 * by name), the calls behind /v1/deployments, and the request path of a
 * predict for a deployed model.
 *
 * The documents these calls give are the API's Deployment (openapi.yaml):
 * the spec (deploy/deployspec.h) with "id", "created_at", "updated_at",
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

#include "common/ids.h"
#include "common/ty.h"
#include "deploy/deployspec.h"
#include "node/rframe.h"

struct jobs_service;

/* The prefix of a replica's id ("rep_..."): the scheduler job id the
 * inventory names as a slot's holder. */
#define DEPLOY_REPLICA_ID_PREFIX "rep_"

/* The controller: its deployments, their replicas and traffic. */
typedef struct deploy_ctl deploy_ctl;

/* Makes the controller over js (borrowed: it outlives the controller),
 * reads the stored deployments (their replicas start once the service
 * runs) and adds the serving kind to js: between jobs_create and
 * jobs_run. TY_ENOMEM or the kind table's refusal; nothing is kept then. */
ty_status deploy_ctl_create(struct jobs_service *js, deploy_ctl **out,
                            ty_err *err);

/* Frees the controller after jobs_stop (which stopped every replica):
 * the folders of the replicas that were running go. NULL: nothing. */
void deploy_ctl_destroy(deploy_ctl *ctl);

/* POST /v1/deployments: body is the request (borrowed). *doc the new
 * deployment (new reference): its replicas are queued. */
ty_status deploy_create(deploy_ctl *ctl, const char *tenant, const json_t *body,
                        json_t **doc, ty_err *err);

/* GET /v1/deployments: the tenant's deployments, oldest first. */
ty_status deploy_list(deploy_ctl *ctl, const char *tenant, json_t **items,
                      ty_err *err);

/* GET /v1/deployments/{id} (id or name). */
ty_status deploy_get(deploy_ctl *ctl, const char *tenant, const char *ref,
                     json_t **doc, ty_err *err);

/* PATCH /v1/deployments/{id}: a new model rolls the replicas (new ones
 * started, traffic moved once they are ready, the old drained). */
ty_status deploy_patch(deploy_ctl *ctl, const char *tenant, const char *ref,
                       const json_t *body, json_t **doc, ty_err *err);

/* DELETE /v1/deployments/{id}: stops routing to it, drains its replicas
 * and frees their slices; *doc is the deployment as it was, status
 * "deleting". */
ty_status deploy_delete(deploy_ctl *ctl, const char *tenant, const char *ref,
                        json_t **doc, ty_err *err);

/* ---- the request path ----
 *
 * A predict for a deployed model: deploy_find says whether one
 * serves it (cheap: the HTTP thread asks it before handing the request to
 * a work thread); deploy_admit applies the deployment's limits;
 * deploy_pick chooses a ready replica (waiting for one to start when
 * there is none, which scales a deployment up from zero);
 * deploy_unpick gives it back after the call; deploy_finish ends
 * the admission. */

/* Which token limits a deploy_call's tokens were reserved from. */
enum { DEPLOY_TOKENS_TENANT = 1u << 0, DEPLOY_TOKENS_DEPLOYMENT = 1u << 1 };

typedef struct deploy_call {
    char deployment_id[TY_ID_MAX];
    char deployment_name[DEPLOY_NAME_MAX];
    char model_id[TY_ID_MAX];
    /* After deploy_pick: the replica's socket, serial (unique over
     * the server's life: a connection cache's key) and device. */
    char socket[108];
    uint64_t serial;
    char device[64];
    /* Generation tokens the request used (its prompt and the tokens it
     * generated), set by the caller before deploy_finish, which gives
     * back to the token limits what the admission reserved beyond it. */
    uint64_t tokens_used;
    /* ---- private ---- */
    void *dep, *rep, *tenant_bucket;
    uint64_t tokens_reserved; /* at admission, from the buckets below */
    unsigned tokens_from;     /* DEPLOY_TOKENS_* */
    double t0, queue_s, compute_s;
    uint32_t batch_rows;
    int failed;
} deploy_call;

/* Whether tenant has a deployment named ref (by_name) or one serving model
 * ref (its current model, or an old one its replicas still serve during a
 * rolling update); model_id (may be NULL; TY_ID_MAX bytes) gets the model
 * a request by that name goes to now (the old one until the traffic
 * moves). ctl may be NULL (then 0). */
int deploy_find(deploy_ctl *ctl, const char *tenant, const char *ref,
                int by_name, char *model_id);

/* Admits one request to the deployment deploy_find names (the same
 * arguments) into *c, for model_id (the model the request opened: only
 * replicas serving it answer, so a reply always comes from the model it
 * describes, also during a rolling update), reserving tokens generation
 * tokens (a generation's prompt and max_tokens; 0 for a predict) from the
 * tenant's and the deployment's tokens-per-minute limits, from both or
 * neither: TY_OK; TY_ELIMIT when its rate, concurrency or token limit is
 * reached (*retry_after_s: when enough is due, 60 for a request bigger
 * than a token limit; a person's sentence in err); TY_ENOTFOUND when
 * there is none (any more). */
ty_status deploy_admit(deploy_ctl *ctl, const char *tenant, const char *ref,
                       int by_name, const char *model_id, uint64_t tokens,
                       deploy_call *c, double *retry_after_s, ty_err *err);

/* A ready replica for c's model, not the one whose serial is avoid (0:
 * any), waiting up to wait_s seconds (negative: the server's
 * --replica-wait) when none is ready (and asking for
 * one when the deployment has none: a cold start). TY_OK; TY_ENOTFOUND
 * when no replica serves that model any more (a rolling update moved on:
 * run it elsewhere); TY_EUNAVAILABLE ("no replica of deployment <name> became
 * ready within N s") else. */
ty_status deploy_pick(deploy_ctl *ctl, deploy_call *c, uint64_t avoid,
                      double wait_s, ty_err *err);

/* After the call on the picked replica: ok 0 when the call failed (the
 * connection or the replica's run); info (NULL on failure) the reply's
 * batch and times. */
void deploy_unpick(deploy_ctl *ctl, deploy_call *c, int ok,
                   const rframe_call_info *info);

/* A generation's token taken from c's replica (first: with the prompt's
 * tokens, seconds since the request came; else since the last token):
 * the deployment's generation figures. */
void deploy_gen_token(deploy_ctl *ctl, deploy_call *c, int first,
                      uint32_t prompt_tokens, double seconds);

/* Ends the admission: its outcome (0 success, 1 a server-side error) and
 * figures are counted, and the tokens reserved beyond c->tokens_used go
 * back to the token limits. */
void deploy_finish(deploy_ctl *ctl, deploy_call *c, int failed);

/* The deployment replica rep_id (a scheduler job id, as the inventory
 * names a slot's holder) belongs to, when it is tenant's (tenant NULL: any
 * tenant's, for the admin): 1 with its id and name (TY_ID_MAX and
 * DEPLOY_NAME_MAX bytes); 0 when it is none of those. A replica is known
 * from its start to the tick after its exit (draining included), and its
 * slot is held only while it is known: a holder read before this call
 * may have exited and been forgotten since (then 0). */
int deploy_replica_owner(deploy_ctl *ctl, const char *tenant,
                         const char *rep_id, char *dep_id, char *dep_name);

/* Whether any of tenant's deployments serves model model_id (a model in
 * use cannot be deleted). */
int deploy_uses_model(deploy_ctl *ctl, const char *tenant,
                      const char *model_id);

#endif
