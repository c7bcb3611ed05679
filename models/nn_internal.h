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
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common/rng.h"
#include "common/ty.h"
#include "models/backend.h"
#include "models/data/dataset.h"
#include "models/nn.h"

#define NN_MAX_DIMS 4
#define NN_MAX_PARAMS (1ull << 31) /* trainable values per model */
#define NN_LAYER_MAX_TENSORS 12    /* a transformer block's */
#define NN_TENSOR_NAME_LEN 96      /* "3.body.0.running_mean" and longer */
#define NN_MAX_DEPTH 8             /* residual blocks inside residual blocks */

/* seq: 1 for a sequence (T, C), a language model's activations after its
 * embedding: position axis first, then channels. dense, layernorm and
 * lm_head act on each position's C values (the last axis), as nn.Linear
 * and nn.LayerNorm(C) do on (N, T, C). */
typedef struct {
    uint32_t ndim;
    uint32_t d[NN_MAX_DIMS];
    uint32_t seq;
} nn_shape;

/* The number of values in s (nn_util.c, as are the next two). */
uint64_t nn_shape_numel(const nn_shape *s);
/* "[1, 28, 28]" into buf (cut short to fit n bytes). */
void nn_shape_format(const nn_shape *s, char *buf, size_t n);

typedef enum {
    NN_LAYER_FLATTEN = 0,
    NN_LAYER_DENSE,
    NN_LAYER_RELU,
    NN_LAYER_TANH,
    NN_LAYER_SIGMOID,
    NN_LAYER_GELU,
    NN_LAYER_DROPOUT,
    NN_LAYER_BATCHNORM,
    NN_LAYER_LAYERNORM,
    NN_LAYER_LEAKY_RELU,
    NN_LAYER_SOFTMAX,
    NN_LAYER_RESIDUAL,
    NN_LAYER_CONV2D,
    NN_LAYER_MAXPOOL2D,
    NN_LAYER_AVGPOOL2D,
    NN_LAYER_GLOBAL_AVGPOOL,
    NN_LAYER_EMBEDDING, /* layers_seq.c: tokens and sequences */
    NN_LAYER_POSITIONAL_EMBEDDING,
    NN_LAYER_LM_HEAD,
    NN_LAYER_ATTENTION, /* layers_attn.c */
    NN_LAYER_TRANSFORMER_BLOCK,
    NN_LAYER_SEQUENCE_POOL, /* layers_seq.c */
    /* New kinds go here, with an entry in layers.c's table. */
    NN_LAYER_KIND_COUNT
} nn_layer_type;

/* One named tensor of a layer. Trainable tensors live in the layer's slice
 * of the parameter block; buffers (batchnorm's running statistics: saved,
 * never trained) in its slice of the buffer block. The file name is
 * "<layer index>.<suffix>", as in PyTorch's nn.Sequential. */
typedef struct {
    const char *suffix; /* "weight", "bias", "running_mean" */
    uint32_t ndim;
    uint32_t shape[NN_MAX_DIMS];
    uint64_t offset; /* into the layer's param (or buffer) slice */
    uint64_t numel;
    int buffer; /* 1: a buffer, not a trainable parameter */
} nn_tensor_desc;

/* A tensor of the whole model under its state-dict name, with its place in
 * the model's state block: [parameters | buffers], param_count +
 * buffer_count floats. A trainable tensor's offset is below param_count, so
 * the same offset addresses its gradient and optimizer state. */
typedef struct {
    char name[NN_TENSOR_NAME_LEN];
    const nn_tensor_desc *desc;
    uint64_t offset; /* into the state block, in floats */
} nn_named_tensor;

typedef struct nn_layer_kind nn_layer_kind;
typedef struct nn_arch nn_arch;

typedef struct {
    nn_layer_type type;
    const nn_layer_kind *kind;
    const nn_backend *be; /* the backend the plan is for (arch->be) */
    uint32_t index;       /* position in the spec's list */
    char path[128];       /* JSON path: "model.layers[2].layers[0]" */
    nn_shape in, out;
    /* options, by kind */
    uint32_t units;                                     /* dense */
    int bias;                                           /* dense, conv2d */
    float rate;                                         /* dropout */
    uint32_t filters, groups;                           /* conv2d */
    uint32_t kernel[2], stride[2], pad[2], dilation[2]; /* conv2d, pools */
    float eps, momentum; /* batchnorm, layernorm */
    float slope;         /* leaky_relu */
    int approximate;     /* gelu: 1 for the tanh approximation */
    /* sequences (layers_seq.c, layers_attn.c) */
    uint32_t vocab;  /* the arch's vocabulary (0: not a language model); an
                     * embedding's own vocab_size otherwise */
    uint32_t dim;    /* embedding */
    uint32_t heads;  /* attention, transformer_block */
    uint32_t hidden; /* transformer_block: the MLP's width */
    float mlp_ratio; /* transformer_block */
    int causal;      /* attention, transformer_block */
    nn_seq_pool_mode pool_mode; /* sequence_pool */
    int tie;                    /* lm_head: uses the embedding's weight */
    int64_t tie_delta;    /* lm_head tied: the embedding weight's offset from
                          this layer's parameters, in floats */
    nn_arch *body, *proj; /* residual: sub-networks, owned (proj NULL
                                  for the identity) */
    /* Builds a sub-list of layers (a residual block's body): the builder's
     * nn_arch_build_seq, set before parse and handed down so that a
     * composite kind does not call back up into the builder. */
    ty_status (*build_seq)(const json_t *layers, const char *path,
                           const nn_shape *in, uint32_t depth,
                           const nn_backend *be, nn_arch *sub, json_t **norm,
                           ty_err *err);
    /* parameters: [param_offset, param_offset + param_count) of the
     * parameter block; buffers likewise in the buffer block */
    uint64_t param_offset, param_count;
    uint64_t buffer_offset, buffer_count;
    uint32_t n_tensors;
    nn_tensor_desc tensors[NN_LAYER_MAX_TENSORS];
    /* Scratch the layer keeps from forward to backward (dropout's mask,
     * batchnorm's statistics, a residual block's inner activations): per
     * example, plus a fixed part. Allocated in inference workspaces too
     * (a residual block needs it there). */
    uint64_t scratch_per_example, scratch_fixed;
    /* Floats of working memory per worker thread, valid only during one
     * kernel call (im2col columns, per-thread gradient partials). */
    uint64_t work_per_thread;
    /* The arch's training precision (nn_arch_set_precision): a dense
     * layer under bf16/fp16 plans scratch for its 16-bit input copy and
     * gradient. */
    nn_dtype precision;
} nn_layer;

/* Called by nn_backward after each layer of the top sequence (in reverse
 * order) with first_final: the parameter gradients [first_final,
 * param_count) are final for this pass (no later layer of the pass adds to
 * them; a tied lm_head's share of the embedding counts as the embedding's),
 * and once more with 0 at the end. Data-parallel training starts a
 * bucket's all-reduce as soon as its gradients are final. On a stream
 * backend "final" means queued on ex. */
typedef void (*nn_grad_hook)(void *ctx, uint64_t first_final);

/* Everything a layer's forward/backward needs besides its buffers. */
typedef struct {
    const nn_backend *be;
    const nn_exec *ex; /* where kernels run (ex->work: the arena) */
    uint32_t n;        /* rows in this batch */
    int training;      /* dropout active, batchnorm uses batch stats */
    ty_rng *rng;       /* dropout masks; training only */
    /* The buffer block of the sequence being run; a layer's buffers are at
     * buffers + l->buffer_offset. Written only by training forward passes
     * (running statistics). */
    float *buffers;
    /* Reduced precision (training passes only; NN_DT_F32: none): dense
     * layers cast their input and output gradient to `precision` and run
     * gemm_lp against lp_params, the parameters of the block that starts
     * at lp_base, in that precision (a layer's copy is at lp_params +
     * (params - lp_base) elements). Needs an arch set to the same
     * precision (its dense scratch). */
    nn_dtype precision;
    const float *lp_base;
    const void *lp_params;
    /* Token sequences (backend memory, n values, NULL when the first layer
     * is not an embedding): how many positions of each are not padding.
     * The embedding fills it (seq_lens); attention and sequence_pool read
     * it. */
    int32_t *lens;
    /* The top sequence's backward only (composite layers' inner sequences
     * run without it): see nn_grad_hook. NULL: none. */
    nn_grad_hook grad_hook;
    void *hook_ctx;
} nn_pass;

struct nn_layer_kind {
    const char *name;
    const char *const *keys; /* allowed spec keys, NULL-terminated */
    /* Output aliases the input (no data movement): flatten. */
    int alias;
    /* Identity when not training (dropout): inference may alias it. */
    int identity_in_eval;
    /* Reads the layer's options from obj (keys already checked) into l and
     * appends them, defaults filled, to norm. On error TY_EINVAL with
     * err->field relative to the layer ("units"). l->in is already set (a
     * residual block builds its sub-networks here). */
    ty_status (*parse)(nn_layer *l, const json_t *obj, json_t *norm,
                       ty_err *err);
    /* Sets l->out, l->tensors and l->scratch_per_example from l->in. On
     * error TY_EINVAL with a message and field relative to the layer. */
    ty_status (*plan)(nn_layer *l, ty_err *err);
    /* Initial values of the layer's parameters and buffers (each the
     * layer's slice; buffers NULL when it has none). */
    void (*init)(const nn_layer *l, float *params, float *buffers, ty_rng *rng);
    /* Releases what parse allocated (residual); may be NULL. */
    void (*destroy)(nn_layer *l);
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

/* Kinds defined outside layers.c, for its table. */
extern const nn_layer_kind nn_batchnorm_kind; /* layers_norm.c */
extern const nn_layer_kind nn_layernorm_kind;
extern const nn_layer_kind nn_leaky_relu_kind;
extern const nn_layer_kind nn_softmax_kind;
extern const nn_layer_kind nn_residual_kind; /* layers_residual.c */
extern const nn_layer_kind nn_conv2d_kind;   /* layers_conv.c */
extern const nn_layer_kind nn_maxpool2d_kind;
extern const nn_layer_kind nn_avgpool2d_kind;
extern const nn_layer_kind nn_global_avgpool_kind;
extern const nn_layer_kind nn_embedding_kind; /* layers_seq.c */
extern const nn_layer_kind nn_positional_embedding_kind;
extern const nn_layer_kind nn_lm_head_kind;
extern const nn_layer_kind nn_sequence_pool_kind;
extern const nn_layer_kind nn_attention_kind; /* layers_attn.c */
extern const nn_layer_kind nn_transformer_block_kind;

/* The backend op of an activation layer (relu, tanh, sigmoid, gelu in its
 * approximation) (layers.c). */
nn_op nn_layer_act_op(const nn_layer *l);

/* Ties each tied lm_head of a built top-level arch to the embedding before
 * it (layers_seq.c). TY_EINVAL naming the head when there is none or its
 * dim is not the head's input width. */
ty_status nn_seq_tie(nn_arch *arch, ty_err *err);

struct nn_arch {
    nn_layer *layers; /* n_layers, owned */
    uint32_t n_layers;
    nn_shape input;
    nn_shape output; /* of the last layer */
    uint32_t num_outputs;
    ty_task task;
    /* A language model's vocabulary (num_outputs for that task), which
     * embedding and lm_head layers take; 0 otherwise. */
    uint32_t vocab;
    uint64_t param_count;
    uint64_t buffer_count; /* non-trainable state (running statistics) */
    uint64_t max_numel;    /* largest activation per example, input too */
    uint64_t scratch_per_example, scratch_fixed; /* sum over layers */
    uint64_t max_work;          /* largest work_per_thread of any layer */
    uint32_t first_param_layer; /* n_layers when none has parameters */
    uint32_t depth;             /* 0 for the model, +1 per residual level */
    const nn_backend *be;
    /* Top level only: every tensor, sub-networks' included, in state-dict
     * order ("0.weight", "2.body.0.weight", ...). */
    nn_named_tensor *tensors;
    uint32_t n_tensors;
    /* Top level only: the training loss, resolved (never NN_LOSS_AUTO).
     * num_outputs counts classes or target values; the network's own output
     * is `output`, 1 value for binary_cross_entropy. */
    nn_loss_spec loss;
    /* Training precision (nn_arch_set_precision; NN_DT_F32 as built). */
    nn_dtype precision;
};

/* Target values per example in workspaces and loader batches: a language
 * model's next tokens (its context length), else num_outputs. */
/* 1 when the arch's input is token ids (its first layer an embedding):
 * its workspaces keep each row's length for the padding mask. */
static inline int nn_arch_takes_tokens(const nn_arch *a)
{
    return a->n_layers && a->layers[0].type == NN_LAYER_EMBEDDING;
}

static inline uint32_t nn_arch_target_width(const nn_arch *a)
{
    return a->task == TY_TASK_LANGUAGE_MODELING ? a->input.d[0]
                                                : a->num_outputs;
}

/* Plans arch (and its sub-networks) for training in dt: dense layers get
 * the scratch their 16-bit copies need (none under NN_DT_F32), and the
 * scratch sums follow, so workspaces and memory estimates made after it
 * include them. Call before making any workspace for arch. */
void nn_arch_set_precision(nn_arch *arch, nn_dtype dt);

/* Floats of a dense layer's reduced-precision scratch for n rows of k
 * inputs and u outputs under dt: the input copy (n k values of dt), then,
 * on a 64-byte boundary, the output gradient's (n u). 0 under fp32. */
uint64_t nn_dense_lp_floats(nn_dtype dt, uint64_t n, uint64_t k, uint64_t u);

/* Parses and validates model into arch (see nn_spec_validate for errors);
 * normalized may be NULL. On error arch is zeroed. */
ty_status nn_arch_build(const json_t *model, const uint32_t *input_shape,
                        uint32_t ndim, uint32_t num_outputs, ty_task task,
                        nn_arch *arch, json_t **normalized, ty_err *err);
/* nn_arch_build for a loss (NULL: the task's default), resolved as
 * nn_loss_resolve does; with binary_cross_entropy the last layer must give
 * 1 value. */
ty_status nn_arch_build_for_loss(const json_t *model,
                                 const uint32_t *input_shape, uint32_t ndim,
                                 uint32_t num_outputs, ty_task task,
                                 const nn_loss_spec *loss, nn_arch *arch,
                                 json_t **normalized, ty_err *err);
/* nn_arch_build_for_loss planned for backend be (NULL: the CPU): arch->be
 * and every layer's work sizes (conv2d_work) are be's. */
ty_status nn_arch_build_on(const json_t *model, const uint32_t *input_shape,
                           uint32_t ndim, uint32_t num_outputs, ty_task task,
                           const nn_loss_spec *loss, const nn_backend *be,
                           nn_arch *arch, json_t **normalized, ty_err *err);
void nn_arch_free(nn_arch *arch);

/* Builds a sub-network (a residual block's body or projection) from the
 * layer list `layers` found at JSON path `path` ("model.layers[2].layers"),
 * for inputs of shape in, at nesting depth. Errors name the inner layer by
 * its full path. *norm gets the normalized list. On error sub is zeroed. */
ty_status nn_arch_build_seq(const json_t *layers, const char *path,
                            const nn_shape *in, uint32_t depth,
                            const nn_backend *be, nn_arch *sub, json_t **norm,
                            ty_err *err);

/* Draws every layer's initial parameters into the state block (param_count
 * + buffer_count floats: parameters, then buffers). */
void nn_arch_init_params(const nn_arch *arch, float *state, ty_rng *rng);
/* The same for a sequence whose parameters and buffers are apart. */
void nn_seq_init(const nn_arch *a, float *params, float *buffers, ty_rng *rng);

/* Runs a sequence's layers forward. acts[0] is the input, acts[i + 1] gets
 * layer i's output (an alias layer's entry equals its input's); scratch[i]
 * is layer i's scratch. p->buffers is the sequence's buffer block. */
void nn_seq_forward(const nn_arch *a, const nn_pass *p, const float *params,
                    float *const *acts, float *const *scratch);

/* Runs a sequence backward from dout (n, a->output): parameter gradients
 * accumulate into grads (the sequence's slice). g0 and g1 (n * a->max_numel
 * floats each; dout may be either) carry the gradient between layers.
 * din, when not NULL, gets the gradient of the sequence's input; when NULL,
 * layers before the first one with parameters are skipped. */
void nn_seq_backward(const nn_arch *a, const nn_pass *p, const float *params,
                     float *grads, float *const *acts, float *const *scratch,
                     const float *dout, float *g0, float *g1, float *din);

/* "classification" / "regression"; parse returns -1 when unknown. (Local to
 * the engine so it does not depend on the dataset module.) */
const char *nn_task_str(ty_task t);
int nn_task_from_str(const char *s);

/* Input preprocessing, applied while copying raw examples into the input
 * buffer (see nn.h "trainyard.preprocess"). */
typedef enum {
    NN_PRE_NONE = 0,
    NN_PRE_SCALE,
    NN_PRE_STANDARDIZE,
    NN_PRE_TABULAR /* CSV columns: impute + standardize, one-hot as is */
} nn_pre_kind;

typedef struct {
    nn_pre_kind kind;
    double factor; /* scale; applied as (float)factor */
    uint64_t features;
    float *mean, *std; /* standardize: features each; owned */
    /* tabular (preprocess_tab.c): per feature, in double; a one-hot
     * feature has std 0 and is copied as it is */
    double *tab_impute, *tab_mean, *tab_std;
    json_t *tab_columns; /* owned: the model's columns, with statistics */
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
/* Readies ds's examples for pp. A tabular model takes a dataset whose
 * columns it can map (by name; categories by their text, one it did not
 * see dropped: ds_tab_remap): when ds's one-hot layout is not the model's,
 * *view is ds with its features re-encoded in the model's layout into *x
 * (the caller's to free; meta and targets borrowed from ds), else *x is
 * NULL and ds is used as it is. A dataset with missing values or text
 * columns needs a tabular model. TY_EINVAL naming the column at fault,
 * TY_ENOMEM. */
ty_status nn_preproc_bind(const nn_preproc *pp, const ty_dataset *ds,
                          ty_dataset *view, float **x, ty_err *err);
/* The tabular kind's parts (preprocess_tab.c). */
ty_status nn_preproc_tab_fit(nn_preproc *pp, const ty_dataset *ds,
                             const uint32_t *idx, uint32_t n, ty_err *err);
ty_status nn_preproc_tab_from_json(nn_preproc *pp, const json_t *j,
                                   ty_err *err);
json_t *nn_preproc_tab_to_json(const nn_preproc *pp);
void nn_preproc_tab_row(const nn_preproc *pp, float *dst, const float *src);

/* Buffers for forward (and, for a training workspace, backward) passes of up
 * to max_batch examples. Float data lives in one allocation; the per-thread
 * work arena in another, sized for the pool it runs on. */
struct nn_workspace {
    const nn_arch *arch;
    uint32_t max_batch;
    int training;         /* has backward buffers */
    const nn_backend *be; /* arch->be when made; the memory's owner
                                  (the arch may be freed first) */
    const nn_exec *ex;    /* always &own */
    nn_exec own;          /* pool (NULL: serial) and work arena */
    float *mem;
    float *act[NN_MAX_LAYERS + 1]; /* act[0] input, act[i+1] layer i out */
    float *scratch[NN_MAX_LAYERS]; /* training: per-layer scratch */
    float *grad[2];                /* training: activation-gradient ping-pong */
    int32_t *labels;               /* (max_batch) class targets */
    float *targets; /* (max_batch, nn_arch_target_width) values */
    int32_t *ids;   /* language models: (max_batch, T) next-token ids */
    int32_t *lens;  /* token inputs: (max_batch) sequence lengths */
    /* Host staging: where the host writes an input batch, labels and
     * targets before nn_workspace_upload_* moves them to act[0], labels
     * and targets. On a host-visible backend (nn_backend_host_visible)
     * they are those buffers themselves and the uploads do nothing, so the
     * CPU path makes no copies; else one host allocation (host_mem). */
    float *host_in;       /* (max_batch, input) */
    int32_t *host_labels; /* (max_batch) */
    float *host_targets;  /* (max_batch, num_outputs) */
    void *host_mem;
    /* Not host-visible only: (max_batch, max(2, output)) backend floats
     * that predict's output is computed into before the download. */
    float *out;
    /* Bytes held from be->alloc now: the float block and the work arena
     * (what nn_workspace_bytes predicts for them). */
    uint64_t mem_bytes, work_bytes;
    /* Mixed precision, set by the trainer: training passes run the dense
     * layers in arch->precision against lp_params (param_count values of
     * it, borrowed; NULL: every pass in fp32), and the loss gradient of
     * nn_loss_scaled is multiplied by loss_scale (1 as made; fp16's
     * dynamic loss scale). */
    const void *lp_params;
    float loss_scale;
    /* Set by the trainer (NULL: none): nn_backward calls it (nn_grad_hook). */
    nn_grad_hook grad_hook;
    void *hook_ctx;
};

/* Where a workspace's regions lie in its one float allocation, in floats
 * from its start (every region 64-byte aligned), and how many floats the
 * work arena needs per thread. The one place the layout is computed: the
 * workspace is carved by it and memory estimates add it up. */
typedef struct {
    uint64_t act[NN_MAX_LAYERS + 1], scratch[NN_MAX_LAYERS];
    uint64_t grad; /* training: grad[0]; grad[1] = grad + big */
    uint64_t big;  /* max_batch * max_numel, rounded up */
    uint64_t labels, targets;
    uint64_t ids;             /* language models: the loss's token ids */
    uint64_t lens;            /* token inputs: sequence lengths */
    uint64_t out;             /* not host-visible only */
    uint64_t total;           /* floats of the allocation */
    uint64_t work_per_thread; /* floats of the arena per thread */
} nn_ws_layout;

/* Fills *lay for a workspace of arch (training or not) of max_batch rows on
 * a host-visible backend or not. -1 when max_batch is 0 or the size does
 * not fit in size_t. */
int nn_workspace_layout(const nn_arch *arch, uint32_t max_batch, int training,
                        int host_visible, nn_ws_layout *lay);

/* The bytes nn_workspace_create_on(arch, max_batch, training, ...) takes
 * from arch->be->alloc for its float block (returned) and, for `threads`
 * worker threads (<= 1: serial), its work arena (*work_bytes, may be NULL).
 * Host staging (plain malloc) is not counted. */
uint64_t nn_workspace_bytes(const nn_arch *arch, uint32_t max_batch,
                            int training, int threads, uint64_t *work_bytes);

/* 1 when be's memory is the host's (the CPU backend): the engine then
 * writes inputs and reads results in place. Every other backend goes
 * through host staging and upload/download. The one place that decides. */
static inline int nn_backend_host_visible(const nn_backend *be)
{
    return be == &nn_backend_cpu;
}

/* dst = src, len floats of be's memory (neither overlapping): memcpy on a
 * host-visible backend, a backend kernel otherwise. */
void nn_copy_floats(const nn_backend *be, const nn_exec *ex, float *dst,
                    const float *src, size_t len);

/* A workspace for arch. training: keep every activation and add backward
 * buffers; else activations ping-pong between two buffers. NULL when out of
 * memory or when the sizes overflow. */
nn_workspace *nn_workspace_create_for(const nn_arch *arch, uint32_t max_batch,
                                      int training);
/* The same on an execution context of arch->be (base: its pool and device;
 * NULL: serial on the host): every float buffer and the work arena come
 * from arch->be->alloc. base->device must outlive the workspace. */
nn_workspace *nn_workspace_create_on(const nn_arch *arch, uint32_t max_batch,
                                     int training, const nn_exec *base);

/* Move the first n rows of host_in to act[0], and of host_labels /
 * host_targets to labels / targets; nothing on a host-visible backend. */
void nn_workspace_upload_input(nn_workspace *ws, uint32_t n);
void nn_workspace_upload_targets(nn_workspace *ws, uint32_t n);

/* Forward pass over n rows already in ws->act[0]; returns the output (n,
 * num_outputs). params is the state block (parameters, then buffers: a
 * training pass updates running statistics there). rng is used by dropout
 * when training. */
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

/* nn_loss whose gradient (when grad_rows > 0) is that of the batch's summed
 * loss divided by grad_rows examples (times the output count for
 * mse/huber), instead of by n: the n rows are one part of a group of
 * grad_rows (gradient accumulation). grad_rows 0: no gradient. */
double nn_loss_scaled(const nn_arch *arch, nn_workspace *ws, uint32_t n,
                      const int32_t *labels, const float *values,
                      uint32_t *correct, uint32_t grad_rows);

/* The loss kernel for `loss` (resolved) over out (n, width), the network's
 * output, against labels (n) or targets (n, width): returns the summed loss
 * (per example for cross_entropy and binary_cross_entropy, per element for
 * mse and huber); *correct (may be NULL) counts hits for classification
 * (0 for regression); dout (n, width), when not NULL, gets the gradient of
 * the summed loss times grad_scale. No workspace: parity tests call it. */
double nn_loss_compute(const nn_loss_spec *loss, const nn_backend *be,
                       const nn_exec *ex, float *dout, const float *out,
                       const int32_t *labels, const float *targets, uint32_t n,
                       uint32_t width, uint32_t *correct, float grad_scale);

/* What predict returns from the network's output out (n, width): softmax
 * probabilities (cross_entropy), [1 - p, p] (binary_cross_entropy, dst (n,
 * 2)), or out itself (regression). */
void nn_loss_output(const nn_loss_spec *loss, const nn_backend *be,
                    const nn_exec *ex, float *dst, const float *out, uint32_t n,
                    uint32_t width);

/* The model file's "trainyard.loss" form ({"kind": ...}); NULL when out of
 * memory. */
json_t *nn_loss_to_json(const nn_loss_spec *loss);
/* Parses that form (NULL: NN_LOSS_AUTO) and resolves it for the task and
 * outputs; TY_EFORMAT on anything malformed. */
ty_status nn_loss_from_json(nn_loss_spec *loss, const json_t *j, ty_task task,
                            uint32_t num_outputs, ty_err *err);

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

/* nn_eval_examples for regression with target scaling: the loss is taken
 * on targets scaled by tg (NULL or cols 0: as they are), the training
 * objective; when reg is not NULL it gets the metrics of the outputs
 * unscaled by tg against ds's own targets (the target's units; NAN each
 * for classification). */
ty_status nn_eval_examples_reg(const nn_arch *arch, const float *params,
                               const nn_preproc *pp, const nn_target *tg,
                               nn_workspace *ws, const ty_dataset *ds,
                               const uint32_t *idx, uint32_t n,
                               const int32_t *class_map, double *loss,
                               double *accuracy, nn_reg_metrics *reg,
                               ty_err *err);

/* A loaded network (nn.h's nn_net), for the files that build and run it
 * (nn_net.c, nn_lm.c). */
struct nn_net {
    nn_arch arch;      /* built for arch.be, where params live */
    float *params;     /* the state block: param_count parameters,
                                  then buffer_count buffers; arch.be's
                                  memory (malloc on the CPU) */
    const nn_exec *ex; /* borrowed device context (NULL: the CPU);
                                  params' allocator and the base of every
                                  workspace made for the net */
    nn_preproc pp;
    nn_target tg; /* regression target scaling (cols 0: none) */
    json_t *meta; /* parsed metadata, see nn_net_meta */
    /* A language model's tokenizer ("trainyard.tokenizer"; NULL: none),
     * and the lock its encoder's word cache needs (nn_lm.c). */
    struct ty_tokenizer *tok;
    pthread_mutex_t tok_mu;
    /* Its end-of-text token (a Hugging Face import's eos_token_id), +1:
     * 0 when it has none. */
    uint32_t eos_plus1;
};

/* ---- language models (nn_lm.c) ---- */

/* Loads net's tokenizer from its description tz (not JSON null); a bad one
 * is TY_EFORMAT naming "trainyard.tokenizer". */
ty_status nn_lm_tokenizer_load(nn_net *net, const json_t *tz, ty_err *err);
void nn_lm_tokenizer_free(nn_net *net);
/* A language model's fields of its document: "tokenizer" (its type name,
 * or null), "tokenizer_info" (ty_tokenizer_describe), "context_length",
 * "vocab_size". */
void nn_lm_describe(const nn_net *net, json_t *doc);
/* Reads the end-of-text token from a Hugging Face import's config.json
 * (hf_config, "trainyard.hf_config"): its eos_token_id, when it is an id
 * of the vocabulary (a list: the first). */
void nn_lm_eos_load(nn_net *net, const json_t *hf_config);

/* Metadata of a model file as nn.h describes it; new object or NULL. */
json_t *nn_model_metadata(const json_t *spec, ty_task task,
                          const nn_shape *input, uint32_t num_outputs,
                          const json_t *classes, const nn_preproc *pp);

#endif
