/*
 * nn_internal.h - the engine's insides, shared by the spec parser, the
 * layers, the network, the optimizers and the trainer. Not a public API.
 *
 * An architecture (nn_arch) is the parsed spec: layers with their input and
 * output shapes and where their parameters sit in the one parameter block.
 * Each layer type is an nn_layer_kind: a vtable of parse / plan / init /
 * forward / backward, so a new layer (conv2d, pooling, norms) is a new kind
 * and a new entry in the kind table, with no change to the network code.
 *
 * Shapes are per example, without the batch: a rank-1 (C) vector, or up to
 * (C, H, W)-style rank 3 (4 allowed). Activations are (N, shape) row-major.
 */
#ifndef TY_NN_INTERNAL_H
#define TY_NN_INTERNAL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/rng.h"
#include "common/ty.h"
#include "models/backend.h"
#include "models/dataset.h"
#include "models/nn.h"

#define NN_MAX_DIMS 4
#define NN_MAX_PARAMS (1ull << 31)        /* trainable values per model */
#define NN_LAYER_MAX_TENSORS 4

typedef struct {
    uint32_t ndim;
    uint32_t d[NN_MAX_DIMS];
} nn_shape;

uint64_t nn_shape_numel(const nn_shape *s);
/* "[1, 28, 28]" into buf. */
void nn_shape_format(const nn_shape *s, char *buf, size_t n);

typedef enum {
    NN_LAYER_FLATTEN = 0,
    NN_LAYER_DENSE,
    NN_LAYER_RELU,
    NN_LAYER_TANH,
    NN_LAYER_SIGMOID,
    NN_LAYER_GELU,
    NN_LAYER_DROPOUT,
    NN_LAYER_KIND_COUNT
} nn_layer_type;

/* One named tensor of a layer, stored at params + offset (floats). The file
 * name is "<layer index>.<suffix>", as in PyTorch's nn.Sequential. */
typedef struct {
    const char *suffix;        /* "weight", "bias" */
    uint32_t ndim;
    uint32_t shape[NN_MAX_DIMS];
    uint64_t offset;           /* into the parameter block, in floats */
    uint64_t numel;
} nn_tensor_desc;

typedef struct nn_layer_kind nn_layer_kind;

typedef struct {
    nn_layer_type type;
    const nn_layer_kind *kind;
    uint32_t index;            /* position in the spec's list */
    nn_shape in, out;
    /* options, by kind */
    uint32_t units;            /* dense */
    int bias;                  /* dense */
    float rate;                /* dropout */
    /* parameters: [param_offset, param_offset + param_count) of the block */
    uint64_t param_offset, param_count;
    uint32_t n_tensors;
    nn_tensor_desc tensors[NN_LAYER_MAX_TENSORS];
    uint64_t scratch_per_example; /* training scratch (dropout mask), floats */
} nn_layer;

/* Everything a layer's forward/backward needs besides its buffers. */
typedef struct {
    const nn_backend *be;
    const nn_exec *ex;         /* where kernels run; NULL: this thread */
    uint32_t n;                /* rows in this batch */
    int training;              /* dropout active */
    ty_rng *rng;               /* dropout masks; training only */
} nn_pass;

struct nn_layer_kind {
    const char *name;
    const char *const *keys;   /* allowed spec keys, NULL-terminated */
    /* Output aliases the input (no data movement): flatten. */
    int alias;
    /* Identity when not training (dropout): inference may alias it. */
    int identity_in_eval;
    /* Reads the layer's options from obj (keys already checked) into l and
     * appends them, defaults filled, to norm. On error TY_EINVAL with
     * err->field relative to the layer ("units"). */
    ty_status (*parse)(nn_layer *l, const json_t *obj, json_t *norm,
                       ty_err *err);
    /* Sets l->out, l->tensors and l->scratch_per_example from l->in. On
     * error TY_EINVAL with a message and field relative to the layer. */
    ty_status (*plan)(nn_layer *l, ty_err *err);
    /* Initial values of the layer's parameters (params is the layer's). */
    void (*init)(const nn_layer *l, float *params, ty_rng *rng);
    /* out (n, l->out) from in (n, l->in). params is the layer's slice. */
    void (*forward)(const nn_layer *l, const nn_pass *p, const float *params,
                    const float *in, float *out, float *scratch);
    /* Parameter gradients accumulate into grads (the layer's slice); din
     * (n, l->in) is assigned, and skipped when NULL. */
    void (*backward)(const nn_layer *l, const nn_pass *p, const float *params,
                     float *grads, const float *in, const float *out,
                     const float *dout, float *din, const float *scratch);
};

/* The kind for a spec "type" name, or NULL. */
const nn_layer_kind *nn_layer_kind_find(const char *name, nn_layer_type *type);
/* "flatten, dense, ..." into buf. */
void nn_layer_kind_list(char *buf, size_t n);

typedef struct {
    nn_layer *layers;          /* n_layers, owned */
    uint32_t n_layers;
    nn_shape input;
    uint32_t num_outputs;
    ty_task task;
    uint64_t param_count;
    uint64_t max_numel;        /* largest activation per example */
    uint32_t first_param_layer;/* n_layers when none has parameters */
    const nn_backend *be;
} nn_arch;

/* Parses and validates model into arch (see nn_spec_validate for errors);
 * normalized may be NULL. On error arch is zeroed. */
ty_status nn_arch_build(const json_t *model, const uint32_t *input_shape,
                        uint32_t ndim, uint32_t num_outputs, ty_task task,
                        nn_arch *arch, json_t **normalized, ty_err *err);
void nn_arch_free(nn_arch *arch);

/* Draws every layer's initial parameters into params (param_count floats). */
void nn_arch_init_params(const nn_arch *arch, float *params, ty_rng *rng);

/* "classification" / "regression"; parse returns -1 when unknown. (Local to
 * the engine so it does not depend on the dataset module.) */
const char *nn_task_str(ty_task t);
int nn_task_from_str(const char *s);

/* Input preprocessing, applied while copying raw examples into the input
 * buffer (see nn.h "trainyard.preprocess"). */
typedef enum {
    NN_PRE_NONE = 0,
    NN_PRE_SCALE,
    NN_PRE_STANDARDIZE
} nn_pre_kind;

typedef struct {
    nn_pre_kind kind;
    double factor;             /* scale; applied as (float)factor */
    uint64_t features;
    float *mean, *std;         /* standardize: features each; owned */
} nn_preproc;

/* Builds pp from a dataset's "preprocess" name over the examples idx (NULL
 * = all) of ds. On error TY_EINVAL / TY_ENOMEM and pp is zeroed. */
ty_status nn_preproc_fit(nn_preproc *pp, const char *name, const ty_dataset *ds,
                         const uint32_t *idx, uint32_t n, ty_err *err);
/* Parses the JSON form ({"kind": ...}); TY_EFORMAT on anything malformed. */
ty_status nn_preproc_from_json(nn_preproc *pp, const json_t *j,
                               uint64_t features, ty_err *err);
/* The JSON form; NULL when out of memory. */
json_t *nn_preproc_to_json(const nn_preproc *pp);
void nn_preproc_free(nn_preproc *pp);
/* dst (n, features) = preprocessed raw rows src (n, features). */
void nn_preproc_apply(const nn_preproc *pp, float *dst, const float *src,
                      uint32_t n);
/* dst (n, features) = preprocessed examples idx[first..first+n) of ds (idx
 * NULL: the examples first..first+n). */
void nn_preproc_gather(const nn_preproc *pp, float *dst, const ty_dataset *ds,
                       const uint32_t *idx, uint32_t first, uint32_t n);

/* Buffers for forward (and, for a training workspace, backward) passes of up
 * to max_batch examples. Float data lives in one allocation. */
struct nn_workspace {
    const nn_arch *arch;
    uint32_t max_batch;
    int training;              /* has backward buffers */
    const nn_exec *ex;         /* borrowed; NULL runs kernels serially */
    float *mem;
    float *act[NN_MAX_LAYERS + 1];   /* act[0] input, act[i+1] layer i out */
    float *scratch[NN_MAX_LAYERS];   /* training: per-layer scratch */
    float *grad[2];                  /* training: activation-gradient ping-pong */
    int32_t *labels;                 /* (max_batch) class targets */
    float *targets;                  /* (max_batch, num_outputs) values */
};

/* A workspace for arch. training: keep every activation and add backward
 * buffers; else activations ping-pong between two buffers. NULL when out of
 * memory or when the sizes overflow. */
nn_workspace *nn_workspace_create_for(const nn_arch *arch, uint32_t max_batch,
                                      int training);

/* Forward pass over n rows already in ws->act[0]; returns the output (n,
 * num_outputs). rng is used by dropout when training. */
const float *nn_forward(const nn_arch *arch, const float *params,
                        nn_workspace *ws, uint32_t n, int training,
                        ty_rng *rng);

/* Loss of the last forward pass against targets (labels for classification,
 * values (n, num_outputs) for regression): returns the batch's summed loss
 * (per example for cross-entropy, per element for MSE). *correct counts
 * argmax hits (classification). When want_grad, the gradient of the batch
 * mean loss goes to the backward buffer. */
double nn_loss(const nn_arch *arch, nn_workspace *ws, uint32_t n,
               const int32_t *labels, const float *values, uint32_t *correct,
               int want_grad);

/* Backward pass after nn_forward(training) and nn_loss(want_grad):
 * accumulates parameter gradients into grads (param_count floats). */
void nn_backward(const nn_arch *arch, const float *params, float *grads,
                 nn_workspace *ws, uint32_t n);

/* Mean loss and accuracy (classification; else -1) over examples idx (NULL =
 * all) of ds, eval mode, in chunks of ws->max_batch. class_map maps ds class
 * indices to arch's (NULL = identity). TY_EINVAL if a label is out of range. */
ty_status nn_eval_examples(const nn_arch *arch, const float *params,
                           const nn_preproc *pp, nn_workspace *ws,
                           const ty_dataset *ds, const uint32_t *idx,
                           uint32_t n, const int32_t *class_map, double *loss,
                           double *accuracy, ty_err *err);

/* Metadata of a model file as nn.h describes it; new object or NULL. */
json_t *nn_model_metadata(const json_t *spec, ty_task task,
                          const nn_shape *input, uint32_t num_outputs,
                          const json_t *classes, const nn_preproc *pp);

#endif
