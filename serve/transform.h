/*
 * transform.h - POST /v1/models/{id}/transform: what a model's network sees
 * of raw inputs (its stored encoding and preprocessing applied), for people
 * debugging their preprocessing.
 */
#ifndef TY_SERVE_TRANSFORM_H
#define TY_SERVE_TRANSFORM_H

#include <jansson.h>

#include "common/ty.h"
#include "serve/predict.h"

/* POST /v1/models/{id}/transform: body {"inputs": [rows]} (raw rows for a
 * tabular model, else each example's numbers, flat) -> *reply
 * {"model", "feature_names" (a tabular model's; else null), "transformed"
 * [[float32 values as JSON numbers that read back exactly]]}. */
ty_status serve_transform(const serve_env *env, const char *tenant_id,
                          const char *model_id, const json_t *body,
                          json_t **reply, ty_err *err);

#endif
