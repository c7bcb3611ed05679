/*
 * nn.h - the neural-network engine's public face: model specs, trained
 * networks loaded for inference, and evaluation.
 *
 * A model spec is JSON: {"layers": [{"type": "dense", "units": 256}, ...]}.
 * The input shape comes from the dataset ((C, H, W) for images, (F) for
 * tables), the loss from the hyperparameters (train.h). Layer types and
 * their keys (unknown keys are errors); PyTorch's equivalent in brackets:
 *   flatten {}                                          [nn.Flatten]
 *   dense {units (1..65536), bias (true)}               [nn.Linear]
 *   conv2d {filters, kernel_size, stride (1), padding ("valid"; a number,
 *           "same" or "valid"), dilation (1), groups (1), bias (true)}
 *                                                       [nn.Conv2d]
 *   maxpool2d, avgpool2d {pool_size, stride (= pool_size), padding (0)}
 *                                 [nn.MaxPool2d, nn.AvgPool2d; count_include_pad]
 *   global_avgpool {}  (C, H, W) -> (C)    [mean over (H, W), one module]
 *   batchnorm {momentum (0.1), eps (1e-5)} [nn.BatchNorm1d on (C),
 *                                           nn.BatchNorm2d on (C, H, W)]
 *           (a training batch with one value per channel, which PyTorch
 *           rejects, is normalized with the running statistics, as in
 *           eval, and leaves them unchanged)
 *   layernorm {eps (1e-5)}       over the whole example [nn.LayerNorm(shape)]
 *   relu, tanh, sigmoid, gelu (exact erf form), softmax (rank 1) {}
 *   leaky_relu {negative_slope (0.01)}
 *   dropout {rate (0 <= rate < 1, default 0.5)}
 *   residual {layers, projection (absent: the identity)}: out = f(x) + g(x)
 *           with f the layer list and g the projection's layer list; both
 *           must give the same shape. [a module with .body and .projection
 *           nn.Sequential children]
 * Language models (task language_modeling: a window of T token ids in,
 * (T, V) next-token logits out, V the dataset's vocabulary; the layers in
 * models/layers_seq.c and layers_attn.c, tensor names as PyTorch's modules
 * name them in tools/trainyard_torch.py):
 *   embedding {dim, vocab_size} (T) ids -> (T, dim) [nn.Embedding(V, dim)];
 *           V is a language model's dataset vocabulary, else vocab_size
 *           (the server fills it from a text classification dataset)
 *   positional_embedding {}  x + a learned (T, C) table [GPT-2's wpe]
 *   attention {heads, causal (true), dropout (0), bias (true)}
 *           [nn.MultiheadAttention(C, heads, bias, batch_first=True) on
 *           (x, x, x) with the causal mask; "in_proj_weight" (3C, C) q, k,
 *           v rows, "in_proj_bias", "out_proj.weight", "out_proj.bias"]
 *   transformer_block {heads, mlp_ratio (4), dropout (0), causal (true)}
 *           GPT-2's pre-norm block x + attn(ln_1(x)), then + mlp(ln_2(x))
 *           with mlp Linear(C, rC), GELU(tanh), Linear(rC, C) ["ln_1.",
 *           "attn.", "ln_2.", "mlp.0.", "mlp.2." + the modules' names]
 *   lm_head {tie_embedding (true)}  (T, C) -> (T, V) = x W^T with W the
 *           embedding's weight (tied: no tensor of its own) or its own
 *           "weight" (V, C)
 *   sequence_pool {mode ("mean" | "first" | "last")}  (T, C) -> (C) over
 *           the positions that are not padding [a masked mean, x[:, 0],
 *           x[i, len_i - 1]]
 * Text classifiers (a CSV with text_column: rows of max_length ids padded
 * with -1 after the text) use the same layers without lm_head: the
 * padding is never attended to (nn.MultiheadAttention's key_padding_mask)
 * and sequence_pool skips it. causal false lets every position see every
 * other; dropout p drops attention weights and, in a block, the attention's
 * and the MLP's outputs before each residual sum (nanoGPT's Block), in
 * training only.
 * On a sequence (T, C) dense acts on the last axis (nn.Linear), layernorm
 * normalizes each position's C values (nn.LayerNorm(C)), and gelu takes
 * {approximate: "none" | "tanh"} everywhere.
 * kernel_size, stride, padding, dilation and pool_size take a number or an
 * [h, w] pair; the normalized spec spells pairs out as [h, w]. padding
 * "same" keeps H and W (stride 1 and an odd dilated kernel only). dense
 * applies to a rank-1 input; a rank>1 input must be flattened first (an
 * error names the layer otherwise). The last layer's output size must equal
 * the dataset's class count (classification) or y_dim (regression).
 *
 * A trained network is a safetensors file. Tensor names follow PyTorch's
 * nn.Sequential state dict for the same spec ("1.weight" [out, in],
 * "1.bias" [out] for a dense layer at index 1; conv weights [out,
 * in/groups, kh, kw]; batchnorm "i.weight", "i.bias", "i.running_mean",
 * "i.running_var"; a residual block's inner layers "i.body.j.weight" and
 * "i.projection.j.weight"), so PyTorch can load it (batchnorm's
 * num_batches_tracked is not written, and ignored when present). Its
 * __metadata__ holds string values:
 *   "trainyard.format"      "1"
 *   "trainyard.spec"        the normalized spec (JSON text)
 *   "trainyard.task"        "classification" | "regression" |
 *                           "language_modeling"
 *   "trainyard.input_shape" JSON array
 *   "trainyard.num_outputs" decimal
 *   "trainyard.classes"     JSON array (classification) or "null"
 *   "trainyard.preprocess"  JSON: {"kind":"none"} | {"kind":"scale","factor":f}
 *                           | {"kind":"standardize","mean":[..],"std":[..]}
 *                           | {"kind":"tabular","columns":[..]} (CSV columns,
 *                           models/data/tabular.h, models/preprocess_tab.c)
 *   "trainyard.loss"        JSON: {"kind":"cross_entropy","label_smoothing":x}
 *                           | {"kind":"binary_cross_entropy"} | {"kind":"mse"}
 *                           | {"kind":"huber","huber_delta":d}; absent in
 *                           older files: the task's default (cross_entropy,
 *                           mse). With binary_cross_entropy the network
 *                           ends in 1 unit (the logit of class 1) while
 *                           num_outputs and classes count 2 classes.
 *   "trainyard.target"      regression only, optional: JSON
 *                           {"kind":"standardize","mean":[..],"std":[..]}
 *                           (one per output column, double; std > 0): the
 *                           net was trained on (y - mean) / std and its
 *                           outputs are turned back with z * std + mean
 *                           (models/target.h); {"kind":"none"} or absent
 *                           (older files, imports): outputs as they are.
 *   "trainyard.tokenizer"   language models, optional: JSON, the tokenizer of
 *                           the data it learned ("byte"), null for token ids
 *                           made elsewhere
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
#include "models/data/dataset.h"
#include "models/backend.h"
#include "models/target.h"

#define NN_MAX_LAYERS 256

/* Losses, as PyTorch defines them (mean reduction):
 *   cross_entropy          F.cross_entropy(logits, y, label_smoothing=x)
 *   binary_cross_entropy   F.binary_cross_entropy_with_logits(logit, y) on a
 *                          2-class dataset: one output unit, the logit of
 *                          class 1; predictions are [1 - p, p]
 *   mse                    F.mse_loss
 *   huber                  F.huber_loss(delta=huber_delta)
 * NN_LOSS_AUTO is the task's default (cross_entropy for classification, mse
 * for regression), as files and requests without a loss get. */
typedef enum {
    NN_LOSS_AUTO = 0,
    NN_LOSS_CROSS_ENTROPY,
    NN_LOSS_BINARY_CROSS_ENTROPY,
    NN_LOSS_MSE,
    NN_LOSS_HUBER
} nn_loss_kind;

typedef struct {
    nn_loss_kind kind;
    double label_smoothing; /* cross_entropy: 0 <= x < 1 */
    double huber_delta;     /* huber: > 0 (1.0 by default) */
} nn_loss_spec;

/* "cross_entropy", ...; "auto" for NN_LOSS_AUTO; "?" when out of range. */
const char *nn_loss_name(nn_loss_kind kind);
/* The kind named s, or -1. */
int nn_loss_from_name(const char *s);

/* Replaces NN_LOSS_AUTO by the task's default and checks that the loss fits
 * the task and output count (num_outputs: classes or target values). On
 * failure TY_EINVAL with err->field "hyperparameters.loss" (or
 * ".label_smoothing", ".huber_delta") and loss unchanged. */
ty_status nn_loss_resolve(nn_loss_spec *loss, ty_task task,
                          uint32_t num_outputs, ty_err *err);

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

/* nn_spec_validate for a given loss (NULL: the task's default): with
 * binary_cross_entropy the last layer must output 1 value, not num_outputs
 * (2); the error says which. The loss is resolved as nn_loss_resolve does
 * and fails the same way. */
ty_status nn_spec_validate_for_loss(const json_t *model,
                                    const uint32_t *input_shape, uint32_t ndim,
                                    uint32_t num_outputs, ty_task task,
                                    const nn_loss_spec *loss,
                                    json_t **normalized, uint64_t *param_count,
                                    ty_err *err);

typedef struct nn_net nn_net;
typedef struct nn_workspace nn_workspace;

/* Loads a model safetensors file written by train_run (or shaped like one).
 * Fails with TY_EFORMAT naming what is wrong (missing tensor, wrong shape or
 * a dtype other than F32, a tensor the spec does not have, NaN/Inf weights,
 * bad metadata), TY_ENOTFOUND, TY_EIO, TY_ENOMEM. */
ty_status nn_net_load(const char *path, nn_net **out, ty_err *err);
/* nn_net_load for backend be (NULL: the CPU): the file is read and checked
 * on the host, then the parameters go to be's memory (be->alloc and upload
 * on ex). ex is a device context (NULL on the CPU), borrowed: it must
 * outlive the net and every workspace made for it, and serves one thread at
 * a time, so callers sharing it serialize predict and evaluate. Workspaces
 * for the net come from be; predict and evaluate stage their inputs on the
 * host, upload them, download results, and fail with be->status's
 * TY_EDEVICE when the device has failed. Besides nn_net_load's errors:
 * TY_ENOMEM when be is out of memory, TY_EDEVICE. */
ty_status nn_net_load_on(const char *path, const nn_backend *be,
                         const nn_exec *ex, nn_net **out, ty_err *err);
void nn_net_destroy(nn_net *net);

/* Parsed metadata: {"spec", "task", "input_shape", "num_outputs", "classes",
 * "preprocess", "loss"} as JSON values (borrowed; lives as long as net). */
const json_t *nn_net_meta(const nn_net *net);
/* What the API shows of a model that comes from the net itself, set on doc:
 * "task", "input_shape", "num_outputs", "classes", "param_count", "spec"
 * and "preprocess" (its kind). */
void nn_net_describe(const nn_net *net, json_t *doc);
ty_task nn_net_task(const nn_net *net);
uint64_t nn_net_input_features(const nn_net *net);
uint32_t nn_net_num_outputs(const nn_net *net);
uint64_t nn_net_param_count(const nn_net *net);

/* A buffer set for up to max_batch examples; NULL when out of memory. */
nn_workspace *nn_workspace_create(const nn_net *net, uint32_t max_batch);
void nn_workspace_destroy(nn_workspace *ws);

/* Runs the workspace's kernels on pool (models/pool.h; NULL: serially;
 * borrowed: it must outlive its use here), sizing the work arena for its
 * thread count. TY_ENOMEM leaves the workspace as it was. */
struct nn_pool;
ty_status nn_workspace_set_pool(nn_workspace *ws, struct nn_pool *pool);
uint32_t nn_workspace_max_batch(const nn_workspace *ws);

/* A language model (task language_modeling) takes prompts instead: row i
 * of x is up to T token ids (T = its context length, input_shape [T]) then
 * -1 to the row's end, and out (n, vocabulary) gets the next token's
 * probabilities after each prompt's last id (TY_EINVAL when a row has no
 * id). */
/* Runs n <= max_batch examples (row-major (n, features), in the units of the
 * uploaded data: the net applies its stored preprocessing) and writes
 * (n, num_outputs): class probabilities for classification (softmax, or
 * [1 - p, p] with p = sigmoid(logit) for binary_cross_entropy), predicted
 * values for regression, in the target's units ("trainyard.target").
 * Dropout is off. No allocation. */
ty_status nn_net_predict(const nn_net *net, nn_workspace *ws, const float *x,
                         uint32_t n, float *out, ty_err *err);

/* A token model's tokenizer (a language model's or a text classifier's:
 * the one of the data it learned, from
 * "trainyard.tokenizer"): whether it has one, text (UTF-8) to ids and ids
 * back to bytes (not necessarily whole UTF-8), as models/data/tokenizer.h
 * encodes and decodes (encoding takes the net's own lock: the encoder
 * keeps a cache). Without one: TY_EINVAL. Errors name "text" or "ids[i]". */
int nn_net_has_tokenizer(const nn_net *net);
/* The vocabulary of a model on token ids (its embedding's: a language
 * model's outputs, a text classifier's vocab_size); 0 for other models. */
uint32_t nn_net_token_vocab(const nn_net *net);
/* A language model's end-of-text token: 1 with *id when it has one (a
 * Hugging Face import whose config.json names an eos_token_id; generation
 * ends there), else 0. */
int nn_net_eos_token(const nn_net *net, uint32_t *id);
ty_status nn_net_encode(const nn_net *net, const char *text, size_t len,
                        uint32_t **ids, size_t *n, ty_err *err);
ty_status nn_net_decode(const nn_net *net, const uint32_t *ids, size_t n,
                        char **out, size_t *len, ty_err *err);

/* What the network's first layer sees for n raw rows x (n, features):
 * the stored preprocessing applied, into out (n, features). */
void nn_net_transform(const nn_net *net, const float *x, uint32_t n,
                      float *out);

/* Mean loss (the model's training loss, label smoothing included) and, for classification,
 * accuracy of net over every example of ds. class_map maps ds's class indices
 * to the net's (NULL when identical). accuracy is set to -1 for regression. */
ty_status nn_net_evaluate(const nn_net *net, const ty_dataset *ds,
                          const int32_t *class_map, double *loss,
                          double *accuracy, ty_err *err);

/* nn_net_evaluate, and for regression (reg not NULL) the metrics of the
 * net's predictions in the target's units into *reg (NAN each for
 * classification). loss stays the training objective: on standardized
 * targets when the model has "trainyard.target". */
ty_status nn_net_evaluate_metrics(const nn_net *net, const ty_dataset *ds,
                                  const int32_t *class_map, double *loss,
                                  double *accuracy, nn_reg_metrics *reg,
                                  ty_err *err);

/* Imports the safetensors file in_path (weights made elsewhere, e.g. a
 * PyTorch state dict) as a model file at out_path, and loads it into *net.
 * meta, when not NULL, is the import's metadata object {"spec", "task",
 * "input_shape", "classes" and/or "num_outputs", "preprocess" (optional,
 * {"kind": "none"} by default)} and replaces the file's own; when NULL the
 * file must carry trainyard metadata itself. Tensors are copied without
 * batchnorm's num_batches_tracked; everything else is checked as
 * nn_net_load does. Fails with TY_EINVAL (bad meta; err->field like
 * "metadata.spec.layers[1].units" or "metadata.task"), TY_EFORMAT (the file,
 * or weights that do not fit the spec; the message names the tensor),
 * TY_ENOMEM, TY_EIO; *net is then NULL and out_path may hold a partial
 * result for the caller to remove. */
ty_status nn_model_import(const char *in_path, const json_t *meta,
                          const char *out_path, nn_net **net, ty_err *err);

#endif
