/*
 * predict.h - the predict service: what REST (POST /v1/models/{id}/predict
 * and /evaluate) and KServe v2 (POST /v2/models/{id}/infer) share. It opens
 * a tenant's model from the model cache, decodes the inputs, runs them in
 * batches of MODEL_CACHE_BATCH on the model's device and encodes the
 * outputs. The handlers in api/inference.c parse their protocol's request
 * and render the documents made here.
 *
 * Inputs are in the units of the uploaded data (pixel values 0-255, raw CSV
 * features); the model applies its own stored preprocessing.
 */
#ifndef TY_SERVE_PREDICT_H
#define TY_SERVE_PREDICT_H

#include <jansson.h>
#include <stdint.h>

#include "common/ty.h"
#include "serve/decode.h"
#include "serve/encode.h"
#include "serve/model.h"

/* POST /v1/models/{id}/predict: the inputs of body (scanned by
 * serve_predict_scan: an array of 1 to SERVE_MAX_EXAMPLES examples, each a
 * list of numbers, flat or nested in the input shape) through tenant_id's
 * model model_id, decoded from the text straight into floats
 * (serve/decode.h). The reply's JSON text is appended to *reply:
 * {"model", "outputs" (raw outputs per example), "predictions" (class
 * labels or values), "device", "deployment" (its name, or null when it ran
 * in this process)}, numbers as their shortest round-trip
 * float32 decimals (serve/encode.h). Errors name the field ("inputs[3]");
 * TY_EFORMAT (HTTP 400) only when the body is not valid JSON; TY_ELIMIT
 * (429) with *retry_after when the model's deployment is at its limits. */
ty_status serve_predict(const serve_env *env, const char *tenant_id,
                        const char *model_id, const serve_predict_body *b,
                        serve_buf *reply, double *retry_after, ty_err *err);

/* POST /v1/models/{id}/evaluate: the model's loss (and accuracy, for
 * classification) over dataset dataset_id (an id or a name, as
 * store_ref_resolve resolves it; the model too). *reply, with ids:
 * {"model", "dataset", "num_examples", "loss", "accuracy" (null for
 * regression), "device"}; for regression also "mse", "rmse", "mae", "r2"
 * in the target's units (nn_net_evaluate_metrics; loss stays the training
 * objective).
 * A deployed model's rate and concurrency limits apply: TY_ELIMIT with
 * *retry_after. */
ty_status serve_evaluate(const serve_env *env, const char *tenant_id,
                         const char *model_id, const char *dataset_id,
                         json_t **reply, double *retry_after, ty_err *err);

#endif
