/*
 * model.h - a tenant's model opened for one request of the predict
 * service (serve/predict.h, serve/lm.h, serve/transform.h, the KServe
 * handlers): its description for checking a request and rendering the
 * reply, and running examples through it, on a replica of its deployment
 * or in this process.
 */
#ifndef TY_SERVE_MODEL_H
#define TY_SERVE_MODEL_H

#include <jansson.h>
#include <stdint.h>

#include "common/ty.h"
#include "deploy/deploy.h"
#include "serve/modelcache.h"
#include "serve/table.h"
#include "store/store.h"

/* What the service reads: the store (model and dataset rows), the model
 * cache and the data folder (blobs). */
typedef struct serve_env {
    store *store;
    model_cache *models;
    const char *data_dir;
    struct deploy_ctl *deploy; /* deployments (deploy/deploy.h); NULL: none */
} serve_env;

/* ---- a model opened for one request ----
 *
 * What every protocol (REST /v1, KServe /v2) needs of a tenant's model:
 * its description for checking a request and rendering the reply, and a
 * way to run examples through it. The struct is the caller's (on its
 * stack); the fields above the line are read-only for the caller and valid
 * until serve_model_close, and at most until this thread's next
 * serve_model_open (the loaded model is held by the thread's model table,
 * serve/table.h): open one model at a time. */
typedef struct serve_model {
    char id[TY_ID_MAX];
    char name[SERVE_NAME_MAX]; /* the model's name ("" when none) */
    uint64_t features;         /* input values per example */
    uint32_t outputs;          /* output values per example */
    ty_task task;
    const json_t *input_shape; /* per example, without the batch: [1,28,28] */
    const json_t *classes;     /* classification: the label of each output
                                  index; NULL for regression */
    char device[64];           /* where it runs: "cpu", "cuda:0", or the
                                  replica's device once it has run there */
    int deployed;              /* a deployment serves it (deploy/deploy.h) */
    char deployment[DEPLOY_NAME_MAX]; /* its name, once admitted */
    double retry_after;               /* after TY_ELIMIT: seconds */
    /* ---- private ---- */
    const serve_env *env;
    model_entry *e;
    char tenant[TY_ID_MAX];
    char deploy_ref[SERVE_NAME_MAX];
    int deploy_by_name;
    int admitted, failed;
    deploy_call call;
} serve_model;

/* Opens the tenant's model named by ref: when by_name (KServe), the model
 * of the deployment of that name first; then the model whose id is ref,
 * else the newest of the tenant's models whose name is ref (names are not
 * unique; an id always wins: store_ref_resolve). TY_ENOTFOUND ("no model
 * with id or name '<ref>'") when neither exists or it is another tenant's; TY_EIO for a stored model
 * file that does not load (its detail names the file: for the log). On failure *m needs no close. */
ty_status serve_model_open(const serve_env *env, const char *tenant_id,
                           const char *ref, int by_name, serve_model *m,
                           ty_err *err);

/* Whether tenant's ref (as serve_model_open takes it) is served by a
 * deployment: its requests then run on a replica, and may wait for one,
 * so a handler runs them on a work thread. */
int serve_model_deployed(const serve_env *env, const char *tenant_id,
                         const char *ref, int by_name);

/* Admits a request to run on the model's deployment (its rate and
 * concurrency limits): TY_OK (nothing to do for a model without one);
 * TY_ELIMIT with m->retry_after (and err->retry_after_s) set and a
 * sentence for the 429. A model
 * admitted runs on a replica; one not admitted (an evaluation) runs in
 * this process. */
ty_status serve_model_admit(serve_model *m, ty_err *err);

/* serve_model_admit for a generation that may use tokens tokens (its
 * prompt and max_tokens), reserved from the tenant's and the deployment's
 * tokens-per-minute limits: TY_ELIMIT (err->retry_after_s and
 * m->retry_after set) when either has too few. Before serve_model_close,
 * the caller sets m->call.tokens_used to what the generation used: the
 * rest goes back. */
ty_status serve_model_admit_tokens(serve_model *m, uint64_t tokens,
                                   ty_err *err);

/* Runs n examples (x: n * features floats) through the model into out
 * (n * outputs floats): on a replica of its deployment when admitted
 * (serve/remote.h), else here in batches of MODEL_CACHE_BATCH. TY_ENOMEM,
 * or the device's error. */
ty_status serve_model_run(serve_model *m, const float *x, uint64_t n,
                          float *out, ty_err *err);

void serve_model_close(serve_model *m);

#endif
