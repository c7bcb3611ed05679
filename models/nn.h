/*
 * nn.h - the neural-network engine's public face: model specs, trained
 * networks loaded for inference, and evaluation.
 *
 * A model spec is JSON: {"layers": [{"type": "dense", "units": 256}, ...]}.
 * The input shape comes from the dataset, the loss from the task (softmax
 * cross-entropy for classification, mean squared error for regression).
 * Layer types and their keys (unknown keys are errors):
 *   flatten {}                       dense {units (1..65536), bias (true)}
 *   relu {}  tanh {}  sigmoid {}     gelu {} (exact, erf form, as PyTorch)
 *   dropout {rate (0 <= rate < 1, default 0.5)}
 * dense applies to the last dimension of a rank-1 input; a rank>1 input must
 * be flattened first (an error names the layer otherwise). The last layer's
 * output size must equal the dataset's class count (classification) or
 * y_dim (regression).
 *
 * A trained network is a safetensors file. Tensor names follow PyTorch's
 * nn.Sequential state dict for the same spec ("1.weight" [out, in],
 * "1.bias" [out] for a dense layer at index 1), so PyTorch can load it. Its
 * __metadata__ holds string values:
 *   "trainyard.format"      "1"
 *   "trainyard.spec"        the normalized spec (JSON text)
 *   "trainyard.task"        "classification" | "regression"
 *   "trainyard.input_shape" JSON array
 *   "trainyard.num_outputs" decimal
 *   "trainyard.classes"     JSON array (classification) or "null"
 *   "trainyard.preprocess"  JSON: {"kind":"none"} | {"kind":"scale","factor":f}
 *                           | {"kind":"standardize","mean":[..],"std":[..]}
 * plus whatever extra metadata the trainer was given (train.h).
 *
 * Nets are immutable once loaded and may be shared between threads; each
 * concurrent caller brings its own nn_workspace.
 */
#ifndef TY_NN_H
#define TY_NN_H

#include <jansson.h>
#include <stdint.h>

#include "common/ty.h"
#include "models/dataset.h"

#define NN_MAX_LAYERS 256

/* Validates model (the "model" object of a job request) against the input
 * shape and output size. On success *normalized is a new object with every
 * default filled in ({"layers": [...]} with "type" first in each layer) and
 * *param_count the number of trainable parameters. On failure returns
 * TY_EINVAL with err->field like "model.layers[3].units" and a message that
 * names the layer ("layer 3 (dense): units must be ..."). */
ty_status nn_spec_validate(const json_t *model, const uint32_t *input_shape,
                           uint32_t ndim, uint32_t num_outputs, ty_task task,
                           json_t **normalized, uint64_t *param_count,
                           ty_err *err);

typedef struct nn_net nn_net;
typedef struct nn_workspace nn_workspace;

/* Loads a model safetensors file written by train_run (or shaped like one).
 * Fails with TY_EFORMAT naming what is wrong (missing tensor, wrong shape or
 * a dtype other than F32, a tensor the spec does not have, NaN/Inf weights,
 * bad metadata), TY_ENOTFOUND, TY_EIO, TY_ENOMEM. */
ty_status nn_net_load(const char *path, nn_net **out, ty_err *err);
void nn_net_destroy(nn_net *net);

/* Parsed metadata: {"spec", "task", "input_shape", "num_outputs", "classes",
 * "preprocess"} as JSON values (borrowed; lives as long as net). */
const json_t *nn_net_meta(const nn_net *net);
ty_task nn_net_task(const nn_net *net);
uint64_t nn_net_input_features(const nn_net *net);
uint32_t nn_net_num_outputs(const nn_net *net);
uint64_t nn_net_param_count(const nn_net *net);

/* A buffer set for up to max_batch examples; NULL when out of memory. */
nn_workspace *nn_workspace_create(const nn_net *net, uint32_t max_batch);
void nn_workspace_destroy(nn_workspace *ws);
uint32_t nn_workspace_max_batch(const nn_workspace *ws);

/* Runs n <= max_batch examples (row-major (n, features), in the units of the
 * uploaded data: the net applies its stored preprocessing) and writes
 * (n, num_outputs): softmax probabilities for classification, predicted
 * values for regression. Dropout is off. No allocation. */
ty_status nn_net_predict(const nn_net *net, nn_workspace *ws, const float *x,
                         uint32_t n, float *out, ty_err *err);

/* Mean loss (cross-entropy or MSE, as in training) and, for classification,
 * accuracy of net over every example of ds. class_map maps ds's class indices
 * to the net's (NULL when identical). accuracy is set to -1 for regression. */
ty_status nn_net_evaluate(const nn_net *net, const ty_dataset *ds,
                          const int32_t *class_map, double *loss,
                          double *accuracy, ty_err *err);

#endif
