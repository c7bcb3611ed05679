/*
 * backend.h - the compute backend interface of the neural-network engine.
 *
 * A backend is a table of kernels (function pointers filled with designated
 * initializers). Layers, losses and optimizers call only these, so a CUDA
 * backend can implement the same table and the engine above it does not
 * change. The CPU backend (models/cpu/) is the reference: every op has a
 * plain-C definition there, and tests compare other backends with it.
 *
 * Conventions (as in llm.c): outputs first, then inputs, then sizes; every
 * matrix is row-major; shapes are given in comments as (N, C) with N the
 * batch. Kernels that produce parameter gradients accumulate (+=); kernels
 * that produce activation gradients assign. Kernels never allocate and never
 * fail: arguments are checked by the caller when the plan is built.
 *
 * Every kernel takes an execution context first (nn_exec; NULL runs on the
 * calling thread alone). The CPU backend splits large kernels across the
 * context's worker pool; a GPU backend keeps its stream and library handles
 * there. Splits depend only on the thread count, so results are
 * reproducible for a given count.
 */
#ifndef TY_BACKEND_H
#define TY_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "common/rng.h"
#include "common/ty.h"
#include "models/pool.h"

/* Every op a backend may implement. The name table in models/cpu/backend.c
 * is guarded by a static_assert on NN_OP_COUNT. */
typedef enum {
    NN_OP_GEMM = 0,  /* C = alpha * op(A) op(B) + beta * C */
    NN_OP_BIAS_ROWS, /* broadcast a bias vector into every row */
    NN_OP_BIAS_GRAD, /* db += column sums of dout */
    NN_OP_RELU,
    NN_OP_TANH,
    NN_OP_SIGMOID,
    NN_OP_GELU,         /* exact: 0.5 x (1 + erf(x / sqrt 2)) */
    NN_OP_DROPOUT,      /* inverted dropout with a mask */
    NN_OP_SOFTMAX_XENT, /* softmax cross-entropy, mean over the batch */
    NN_OP_MSE,          /* mean squared error over all elements */
    NN_OP_SGD,          /* torch.optim.SGD step */
    NN_OP_ADAM,         /* torch.optim.Adam step (AdamW with decay_scale) */
    NN_OP_BATCHNORM,    /* per-channel batch normalization, train and eval */
    NN_OP_LAYERNORM,    /* per-example normalization with an affine map */
    NN_OP_LEAKY_RELU,
    NN_OP_SOFTMAX,             /* softmax over each row, as a layer */
    NN_OP_ADD,                 /* elementwise sum (residual blocks) */
    NN_OP_SOFTMAX_XENT_SMOOTH, /* cross-entropy with label smoothing */
    NN_OP_BCE_LOGITS,          /* binary cross-entropy on logits */
    NN_OP_HUBER,               /* Huber loss over all elements */
    NN_OP_SUM_SQUARES,         /* sum of squares (gradient norm for clipping) */
    NN_OP_SCALE,               /* x *= alpha */
    NN_OP_CONV2D,              /* nn.Conv2d forward and backward */
    NN_OP_MAXPOOL2D,           /* nn.MaxPool2d */
    NN_OP_AVGPOOL2D,           /* nn.AvgPool2d, count_include_pad */
    NN_OP_CAST,                /* fp32 -> bf16 / fp16, round to nearest even */
    NN_OP_GEMM_LP,             /* GEMM on bf16 / fp16 inputs, fp32 sums */
    /* Transformer ops (issue 31; see "Transformer ops" below). */
    NN_OP_GELU_TANH,   /* tanh approximation, GPT-2's "gelu_new" */
    NN_OP_EMBEDDING,   /* gather rows by token id; scatter-add backward */
    NN_OP_ATTENTION,   /* multi-head scaled dot-product attention, masked */
    NN_OP_XENT_IGNORE, /* per-position cross-entropy with an ignore index */
    NN_OP_SEQ_POOL,    /* a sequence to one vector, honouring padding */
    NN_OP_KV_CACHE,    /* decoding: a paged key/value cache and attention */
    NN_OP_COUNT
} nn_op;

/* The op's name, e.g. "gelu"; "?" when out of range. */
const char *nn_op_name(nn_op op);

/* Element types of reduced-precision training (mixed precision: fp32
 * master weights, GEMMs on 16-bit copies). bf16 is bfloat16 (8 exponent
 * bits, 7 mantissa bits), fp16 IEEE binary16 (5 and 10). */
typedef enum { NN_DT_F32 = 0, NN_DT_BF16, NN_DT_F16 } nn_dtype;

/* Bytes of one element of dt. */
static inline size_t nn_dtype_size(nn_dtype dt)
{
    return dt == NN_DT_F32 ? 4u : 2u;
}

/* "fp32", "bf16", "fp16". */
static inline const char *nn_dtype_name(nn_dtype dt)
{
    return dt == NN_DT_BF16 ? "bf16" : dt == NN_DT_F16 ? "fp16" : "fp32";
}

/* Hyperparameters of one optimizer step, resolved for this step. */
typedef struct {
    float lr;
    float weight_decay;
    float momentum;              /* sgd */
    float beta1, beta2, eps;     /* adam */
    float one_minus_beta1;       /* adam: 1 - beta1, rounded once from double */
    float one_minus_beta2;       /* as torch passes value=1-beta2 */
    float step_size;             /* adam: lr / (1 - beta1^t) */
    float bias_correction2_sqrt; /* adam: sqrt(1 - beta2^t) */
    int nesterov;                /* sgd: Nesterov momentum */
    int decoupled;               /* adam: AdamW; params are first multiplied by
                                 decay_scale (weight_decay is then 0) */
    float decay_scale; /* adamw: 1 - lr * wd, rounded once from double */
    /* When not NULL: the backend's memory holding this step's changing
     * values, NN_OPTIM_DYN floats in the order of nn_optim_dyn_slot, which
     * the kernels read when they run instead of the fields above (a
     * captured graph replays the kernels with the arguments of the step it
     * was captured in; the caller uploads these before each step). */
    const float *dyn;
} nn_optim_args;

/* The floats behind nn_optim_args.dyn. */
typedef enum {
    NN_OPTIM_DYN_LR = 0,
    NN_OPTIM_DYN_STEP_SIZE,
    NN_OPTIM_DYN_BIAS_CORRECTION2_SQRT,
    NN_OPTIM_DYN_DECAY_SCALE,
    NN_OPTIM_DYN
} nn_optim_dyn_slot;

/* The doubles behind nn_exec.acc. */
typedef enum {
    NN_ACC_LOSS = 0, /* summed loss, as the kernels return it */
    NN_ACC_CORRECT,  /* rows counted as correct */
    NN_ACC_COUNT
} nn_acc_slot;

/* Geometry of a 2-D convolution or pooling over NCHW activations: input
 * (N, in_c, in_h, in_w), output (N, out_c, out_h, out_w), pairs as [h, w].
 * Zero padding of pad on each side (pooling: padding never wins a max and
 * counts in an average); window element (ki, kj) of output (oh, ow) reads
 * input (oh * stride[0] - pad[0] + ki * dilation[0], likewise for w).
 * out_h = (in_h + 2 pad[0] - dilation[0] (kernel[0] - 1) - 1) / stride[0]
 * + 1, floored (ceil_mode off). Convolution weights are (out_c, in_c /
 * groups, kernel[0], kernel[1]); pooling has out_c == in_c, groups 1,
 * dilation 1. The caller checks every size when the plan is built. */
typedef struct {
    uint32_t in_c, in_h, in_w;
    uint32_t out_c, out_h, out_w;
    uint32_t kernel[2], stride[2], pad[2], dilation[2];
    uint32_t groups;
} nn_conv_desc;

/* Where kernels run; serves one calling thread at a time. */
typedef struct {
    nn_pool *pool; /* CPU: worker threads, or NULL */
    /* GPU backends: their per-context state (device, stream, library
     * handles, the first error seen); NULL on the CPU. */
    void *device;
    /* Per-part working memory: part i of a split (0 .. threads-1) may use
     * work + i * work_floats for the duration of one kernel call. Sized by
     * the workspace from its layers' work_per_thread. */
    float *work;
    size_t work_floats;
    /* When not NULL: NN_ACC_COUNT doubles of the backend's memory. Every
     * loss kernel with labels or targets then adds its summed loss to
     * acc[NN_ACC_LOSS] and its correct count to acc[NN_ACC_CORRECT] (in
     * the order the kernels run, each sum fixed-order, no atomics), returns
     * 0 and sets *correct to 0 instead of bringing them to the host: a
     * training step then never waits for the device, and the trainer
     * downloads acc when it reports. */
    double *acc;
    /* The run's training precision. Under NN_DT_BF16 / NN_DT_F16 a GPU
     * backend's fp32 convolutions may use Tensor Cores in TF32 (10-bit
     * mantissa inputs, fp32 sums; the CUDA backend still picks only
     * deterministic algorithms); under NN_DT_F32 (the default) they stay
     * exact fp32. The dense layers' reduced-precision GEMMs go through
     * cast and gemm_lp whatever this says. */
    nn_dtype precision;
} nn_exec;

/* What an attention may see, for NN_OP_ATTENTION (see attention_forward):
 * causal masks later keys, lens (device memory, one per sequence, or NULL)
 * masks padding keys, keep (device memory, or NULL) drops probabilities
 * (forward overwrites it with the dropped probabilities, backward reads
 * them).
 * A NULL nn_attn_mask pointer means {.causal = 1}. */
typedef struct {
    int causal;
    const int32_t *lens;
    float *keep;
} nn_attn_mask;

/* How NN_OP_SEQ_POOL makes one vector of a sequence (sequence_pool's
 * mode). */
typedef enum {
    NN_SEQ_POOL_MEAN = 0,
    NN_SEQ_POOL_FIRST,
    NN_SEQ_POOL_LAST
} nn_seq_pool_mode;

typedef struct nn_backend {
    const char *name;

    /* ---- memory and errors (every backend; the CPU's are plain malloc,
     * memcpy and memset). Every float pointer a kernel takes is the
     * backend's memory; scalar results (returned sums, *correct) are the
     * host's. */

    /* bytes of the backend's memory, 256-byte aligned; NULL when out of
     * memory. release(NULL) does nothing. */
    void *(*alloc)(const nn_exec *ex, size_t bytes);
    void (*release)(const nn_exec *ex, void *p);
    /* host -> backend and backend -> host copies; download returns once the
     * data is on the host (it waits for the kernels before it). */
    void (*upload)(const nn_exec *ex, void *dst, const void *src, size_t bytes);
    void (*download)(const nn_exec *ex, void *dst, const void *src,
                     size_t bytes);
    void (*zero)(const nn_exec *ex, void *dst, size_t bytes);
    /* backend -> backend copy (the regions may overlap only if equal). */
    void (*copy)(const nn_exec *ex, void *dst, const void *src, size_t bytes);
    /* Kernels never fail on the CPU; a GPU backend records its first
     * failed call (a CUDA, cuBLAS or cuDNN error, out of memory) in the
     * context and reports it here, with the call that failed, as
     * TY_EDEVICE. Callers check after each step. */
    ty_status (*status)(const nn_exec *ex, ty_err *err);

    /* 1 if this backend implements op. */
    int (*supports)(nn_op op);

    /* NN_OP_GEMM, row-major: C (m, n) = alpha * op(A) (m, k) * op(B) (k, n)
     * + beta * C, where op(X) is X or its transpose per trans_*. */
    void (*gemm)(const nn_exec *ex, float *c, const float *a, const float *b,
                 int trans_a, int trans_b, int m, int n, int k, float alpha,
                 float beta);

    /* NN_OP_BIAS_ROWS: out (n, c) rows all set to bias (c). */
    void (*bias_rows)(const nn_exec *ex, float *out, const float *bias,
                      uint32_t n, uint32_t c);

    /* NN_OP_BIAS_GRAD: db (c) += sum over rows of dout (n, c). */
    void (*bias_grad)(const nn_exec *ex, float *db, const float *dout,
                      uint32_t n, uint32_t c);

    /* Elementwise activations (NN_OP_RELU .. NN_OP_GELU, NN_OP_GELU_TANH)
     * over len values. backward gets both the forward input and output;
     * each op reads the one it needs (relu, tanh, sigmoid: out; gelu,
     * gelu_tanh: in). gelu_tanh is F.gelu(approximate="tanh"): 0.5 x (1 +
     * tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
    void (*act_forward)(const nn_exec *ex, nn_op op, float *out,
                        const float *in, size_t len);
    void (*act_backward)(const nn_exec *ex, nn_op op, float *din,
                         const float *dout, const float *in, const float *out,
                         size_t len);

    /* NN_OP_DROPOUT: mask (len) gets 0 or 1/(1-rate) per value, drawn from
     * rng in order; out = in * mask. backward: din = dout * mask. */
    void (*dropout_forward)(const nn_exec *ex, float *out, float *mask,
                            const float *in, size_t len, float rate,
                            ty_rng *rng);
    void (*dropout_backward)(const nn_exec *ex, float *din, const float *dout,
                             const float *mask, size_t len);

    /* NN_OP_SOFTMAX_XENT over logits (n, c) and labels (n) in [0, c).
     * Returns the summed (not mean) loss in double; *correct gets the count
     * of rows whose argmax is the label. dlogits (n, c), when not NULL,
     * gets (softmax - onehot) * grad_scale (grad_scale = 1/batch for the
     * mean); probs (n, c), when not NULL, gets the softmax. With labels
     * NULL only probs is computed (returns 0; dlogits must be NULL). */
    double (*softmax_xent)(const nn_exec *ex, float *dlogits, float *probs,
                           uint32_t *correct, const float *logits,
                           const int32_t *labels, uint32_t n, uint32_t c,
                           float grad_scale);

    /* NN_OP_MSE over pred and target (len). Returns the summed squared error
     * in double; dpred (len), when not NULL, gets 2 (pred - target) *
     * grad_scale (grad_scale = 1/len for the mean). */
    double (*mse)(const nn_exec *ex, float *dpred, const float *pred,
                  const float *target, size_t len, float grad_scale);

    /* NN_OP_SGD: one step over len parameters, as torch.optim.SGD
     * (dampening 0): g = grad + wd * p; buf = momentum * buf + g (buf may be
     * NULL when momentum is 0); p -= lr * buf, or with nesterov p -= lr *
     * (g + momentum * buf). The gradient is consumed: grad is zeroed for the
     * next accumulation. */
    void (*sgd)(const nn_exec *ex, float *param, float *grad, float *buf,
                size_t len, const nn_optim_args *s);

    /* NN_OP_ADAM: one step as torch.optim.Adam / AdamW (amsgrad off):
     * p *= decay_scale (AdamW: when decoupled); g = grad + wd * p; m = b1 m + (1-b1) g;
     * v = b2 v + (1-b2) g^2;
     * p -= step_size * m / (sqrt(v) / bias_correction2_sqrt + eps).
     * grad is zeroed. */
    void (*adam)(const nn_exec *ex, float *param, float *grad, float *m,
                 float *v, size_t len, const nn_optim_args *s);

    /* NN_OP_BATCHNORM over x (n, c, s), s the spatial size (1 for a (C)
     * input); gamma, beta, mean, invstd and the running statistics are (c).
     * training: mean and invstd get the batch's statistics over the n * s
     * values of each channel (biased variance; n * s >= 2), and
     * running_mean/running_var move towards them as torch does: r = (1 -
     * momentum) r + momentum * batch, with the unbiased variance for
     * running_var. Not training: mean and invstd come from the running
     * statistics, which are only read. out (n, c, s) = (x - mean) * invstd
     * * gamma + beta. */
    void (*batchnorm_forward)(const nn_exec *ex, float *out, float *mean,
                              float *invstd, float *running_mean,
                              float *running_var, const float *x,
                              const float *gamma, const float *beta, uint32_t n,
                              uint32_t c, uint32_t s, int training,
                              float momentum, float eps);
    /* dgamma, dbeta (c) += the parameter gradients; dx (n, c, s), when not
     * NULL, = the input gradient. batch_stats: mean and invstd were the
     * batch's (their own gradient flows into dx); else they were constants
     * (eval statistics). */
    void (*batchnorm_backward)(const nn_exec *ex, float *dx, float *dgamma,
                               float *dbeta, const float *dout, const float *x,
                               const float *gamma, const float *mean,
                               const float *invstd, uint32_t n, uint32_t c,
                               uint32_t s, int batch_stats);

    /* NN_OP_LAYERNORM over each row of x (n, d): mean and rstd (n) get the
     * row's mean and 1 / sqrt(biased variance + eps); out (n, d) = (x -
     * mean) * rstd * gamma + beta with gamma, beta (d). */
    void (*layernorm_forward)(const nn_exec *ex, float *out, float *mean,
                              float *rstd, const float *x, const float *gamma,
                              const float *beta, uint32_t n, uint32_t d,
                              float eps);
    /* dgamma, dbeta (d) += the parameter gradients; dx (n, d), when not
     * NULL, = the input gradient. */
    void (*layernorm_backward)(const nn_exec *ex, float *dx, float *dgamma,
                               float *dbeta, const float *dout, const float *x,
                               const float *gamma, const float *mean,
                               const float *rstd, uint32_t n, uint32_t d);

    /* NN_OP_LEAKY_RELU: out = in > 0 ? in : slope * in over len values;
     * backward: din = in > 0 ? dout : slope * dout (as torch, by the
     * input's sign). */
    void (*leaky_relu_forward)(const nn_exec *ex, float *out, const float *in,
                               size_t len, float slope);
    void (*leaky_relu_backward)(const nn_exec *ex, float *din,
                                const float *dout, const float *in, size_t len,
                                float slope);

    /* NN_OP_SOFTMAX: out (n, c) = softmax of each row of in (n, c).
     * backward: din = out * (dout - sum over the row of dout * out). */
    void (*softmax_forward)(const nn_exec *ex, float *out, const float *in,
                            uint32_t n, uint32_t c);
    void (*softmax_backward)(const nn_exec *ex, float *din, const float *dout,
                             const float *out, uint32_t n, uint32_t c);

    /* NN_OP_ADD: out (len) = a + b; out may be a or b. */
    void (*add)(const nn_exec *ex, float *out, const float *a, const float *b,
                size_t len);
    /* NN_OP_SOFTMAX_XENT_SMOOTH: softmax_xent with label smoothing eps, as
     * F.cross_entropy(label_smoothing=eps): the target is (1 - eps) onehot
     * + eps / c, the row's loss -sum_j target_j log softmax_j, dlogits
     * (softmax - target) * grad_scale. Labels are required. */
    double (*softmax_xent_smooth)(const nn_exec *ex, float *dlogits,
                                  uint32_t *correct, const float *logits,
                                  const int32_t *labels, uint32_t n, uint32_t c,
                                  float smoothing, float grad_scale);

    /* NN_OP_BCE_LOGITS over logits (n) and labels (n) in {0, 1}, as
     * F.binary_cross_entropy_with_logits: row loss max(x, 0) - x y +
     * log(1 + exp(-|x|)), summed in double and returned; dlogits (n), when
     * not NULL, gets (sigmoid(x) - y) * grad_scale; *correct counts rows
     * where (sigmoid(x) > 0.5) == y. probs (n, 2), when not NULL, gets
     * [1 - p, p]. With labels NULL only probs is computed (returns 0). */
    double (*bce_logits)(const nn_exec *ex, float *dlogits, float *probs,
                         uint32_t *correct, const float *logits,
                         const int32_t *labels, uint32_t n, float grad_scale);

    /* NN_OP_HUBER over pred and target (len), as F.huber_loss(delta): with
     * d = pred - target, 0.5 d^2 where |d| < delta, else delta (|d| - 0.5
     * delta); returns the sum in double. dpred (len), when not NULL, gets
     * clamp(d, -delta, delta) * grad_scale. */
    double (*huber)(const nn_exec *ex, float *dpred, const float *pred,
                    const float *target, size_t len, float delta,
                    float grad_scale);

    /* NN_OP_SUM_SQUARES: sum of x[i]^2 over len values, in double. Parts
     * sum their ranges, then the parts are added in order: the same result
     * for a given thread count. */
    double (*sum_squares)(const nn_exec *ex, const float *x, size_t len);

    /* NN_OP_SCALE: x (len) *= alpha. */
    void (*scale)(const nn_exec *ex, float *x, size_t len, float alpha);
    /* NN_OP_CONV2D: floats of ex->work each part needs for a convolution
     * of geometry d (forward and backward; 0 when none). Layers size their
     * work_per_thread with it, so conv kernels need an ex with that arena
     * (ex may not be NULL). */
    size_t (*conv2d_work)(const nn_conv_desc *d);

    /* NN_OP_CONV2D forward, cross-correlation as nn.Conv2d: out (n, out_c,
     * out_h, out_w) from in (n, in_c, in_h, in_w), weight (out_c, in_c /
     * groups, kh, kw) and bias (out_c; NULL for none). */
    void (*conv2d_forward)(const nn_exec *ex, float *out, const float *in,
                           const float *weight, const float *bias, uint32_t n,
                           const nn_conv_desc *d);

    /* NN_OP_CONV2D backward from dout (n, out_c, out_h, out_w): dweight
     * (as weight) and dbias (out_c; NULL: no bias) accumulate; din (as in)
     * is assigned, and skipped (no data-gradient work at all) when NULL. */
    void (*conv2d_backward)(const nn_exec *ex, float *din, float *dweight,
                            float *dbias, const float *dout, const float *in,
                            const float *weight, uint32_t n,
                            const nn_conv_desc *d);

    /* NN_OP_MAXPOOL2D / NN_OP_AVGPOOL2D forward: out (n, c, out_h, out_w)
     * from in (n, c, in_h, in_w). Max pooling writes each output's argmax
     * (the input index ih * in_w + iw within its plane; the first maximum
     * in window order on ties, NaN wins) to argmax (as out), unless argmax
     * is NULL; average pooling ignores argmax and divides by the full
     * window (padding counted). */
    void (*pool2d_forward)(const nn_exec *ex, nn_op op, float *out,
                           int32_t *argmax, const float *in, uint32_t n,
                           const nn_conv_desc *d);

    /* Pooling backward: din (n, c, in_h, in_w) is assigned from dout (n, c,
     * out_h, out_w): max routes each gradient to its argmax (from the
     * forward pass), average spreads it over the window. */
    void (*pool2d_backward)(const nn_exec *ex, nn_op op, float *din,
                            const float *dout, const int32_t *argmax,
                            uint32_t n, const nn_conv_desc *d);

    /* ---- host staging, fences and graphs (NULL where the backend has
     * none: the CPU's, where memory is the host's and every call is done
     * when it returns) ---- */

    /* Host memory the device copies from without staging (CUDA: pinned,
     * cudaHostAlloc); NULL when out of memory. NULL members: use malloc.
     * An upload from it is asynchronous: it reads src when the stream
     * reaches it, so src must not be rewritten until a fence recorded
     * after the upload has been waited for. (An upload from other host
     * memory has read src when it returns.) */
    void *(*host_alloc)(const nn_exec *ex, size_t bytes);
    void (*host_release)(const nn_exec *ex, void *p);

    /* Fences on the context's stream (CUDA: events). fence_create gives
     * NULL when out of resources; fence_record marks everything queued so
     * far; fence_wait returns once the stream has passed the last mark
     * (at once when never recorded). Used to reuse host_alloc buffers. */
    void *(*fence_create)(const nn_exec *ex);
    void (*fence_record)(const nn_exec *ex, void *fence);
    void (*fence_wait)(const nn_exec *ex, void *fence);
    void (*fence_release)(const nn_exec *ex, void *fence);

    /* Graphs: graph_begin starts capturing the calling thread's calls on
     * ex's stream (CUDA: cudaStreamBeginCapture), which are then recorded,
     * not run; graph_end stops and turns them into *graph, to be replayed
     * whole by graph_launch on the same stream after whatever is queued.
     * A replay runs the kernels with the arguments they had at capture
     * (pointers and scalars) and reads the memory they point at when it
     * runs: what changes from step to step must live in the backend's
     * memory (nn_exec.acc, nn_optim_args.dyn), uploaded before the launch.
     * Inside a capture nothing may allocate, release, download, read a
     * result on the host (loss kernels need acc; no sum_squares) or ask
     * status. graph_begin returns 0 on success; graph_end returns 0 and
     * sets *graph, or -1 with the reason in err (the capture is then
     * abandoned, none of its calls ran, and the context is still usable).
     * graph_release(NULL) does nothing. */
    int (*graph_begin)(const nn_exec *ex);
    int (*graph_end)(const nn_exec *ex, void **graph, ty_err *err);
    void (*graph_launch)(const nn_exec *ex, void *graph);
    void (*graph_release)(const nn_exec *ex, void *graph);
    /* ---- reduced precision (mixed-precision training) ---- */

    /* NN_OP_CAST: dst (len values of dt, bf16 or fp16) = src (len) rounded
     * to nearest, ties to even, as torch's .to(torch.bfloat16 /
     * torch.float16): fp16 values beyond its range become +-inf, values
     * below its smallest subnormal round to +-0, NaN stays NaN (its bits
     * may differ between backends). */
    void (*cast)(const nn_exec *ex, void *dst, nn_dtype dt, const float *src,
                 size_t len);

    /* NN_OP_GEMM_LP: gemm's row-major C (m, n) = alpha * op(A) op(B) +
     * beta * C with A and B of type dt (bf16 or fp16) and C fp32. Products
     * are exact in fp32 and sums are kept in fp32 (the order of the sums
     * is the backend's: the CPU adds along k in order, cuBLAS in its
     * own); beta 0 ignores C's old values. */
    void (*gemm_lp)(const nn_exec *ex, float *c, const void *a, const void *b,
                    nn_dtype dt, int trans_a, int trans_b, int m, int n, int k,
                    float alpha, float beta);

    /* 1 when this backend trains fast in dt on ex's device (ex NULL: the
     * calling thread's current device), so reduced precision is worth
     * using (always 1 for NN_DT_F32): CUDA needs compute capability 8.0 for bf16 and 7.0 for fp16.
     * The CPU backend says 0 (it has reference cast and gemm_lp kernels,
     * but trains every precision in fp32). */
    int (*lp_ok)(const nn_exec *ex, nn_dtype dt);

    /* ---- Transformer ops (issue 31) ----
     * The kernels a GPT-2 style model needs beyond the ops above (llm.c's
     * train_gpt2.c decomposition): token embedding, causal attention and
     * the per-position language-model loss; layernorm over the last axis
     * is NN_OP_LAYERNORM above (rows of (B*T, C)) and the MLP's GELU is
     * NN_OP_GELU_TANH. The spec layers of models/layers_seq.c and
     * layers_attn.c run them; tests/unit/test_nn_attention.c,
     * test_nn_transformer_ops.c, tests/parity/test_parity_ops.c (PyTorch)
     * and tests/gpu/test_gpu_transformer.c (CUDA against the CPU) check
     * them one by one. */

    /* NN_OP_EMBEDDING forward: out (n, c) row i = table (v, c) row ids[i],
     * as F.embedding. The caller checks every id is in [0, v). */
    void (*embedding_forward)(const nn_exec *ex, float *out, const int32_t *ids,
                              const float *table, uint32_t n, uint32_t c);
    /* NN_OP_EMBEDDING backward: dtable (v, c) += dout (n, c) row i into
     * row ids[i] (a parameter gradient: accumulates). Deterministic: every
     * element of dtable adds its tokens' values in token order, whatever
     * the thread count (the CPU splits the c columns over its parts), so
     * the result has the same bits for any pool. */
    void (*embedding_backward)(const nn_exec *ex, float *dtable,
                               const float *dout, const int32_t *ids,
                               uint32_t n, uint32_t v, uint32_t c);
    /* Part of NN_OP_EMBEDDING: token ids carried as float values (a
     * language model's input and targets) to int32: ids[i] = x[i] when x[i]
     * is a whole number in [0, bound), else fallback (the embedding uses 0,
     * the loss its ignore index -1). */
    void (*to_ids)(const nn_exec *ex, int32_t *ids, const float *x, size_t len,
                   uint32_t bound, int32_t fallback);

    /* NN_OP_ATTENTION forward, multi-head scaled dot-product
     * self-attention (the core after the QKV projection): for batch bi,
     * head hi, out = softmax(Q K^T / sqrt(d) + mask) V. Layout (B, T,
     * heads, head_dim): element di of head hi of token ti of sequence bi of
     * q is q[(bi * t + ti) * ld + hi * d + di], likewise k and v, so q, k
     * and v may be the three thirds of one fused QKV projection output (B,
     * T, 3 C) with ld = 3 C, C = h * d (or separate (B, T, C) tensors with
     * ld = C; ld >= h d). out is (B, T, C) (stride C = h * d).
     *
     * The mask (m; NULL means {.causal = 1}): query i of sequence bi sees
     * key j when j < m->lens[bi] (lens NULL: every key; a length is in [0,
     * t]: the rest of the sequence is padding, as nn.MultiheadAttention's
     * key_padding_mask) and, when m->causal, j <= i (attn_mask's upper
     * triangle). A row that sees no key (length 0) has P = 0 and out = 0.
     * Padded queries get outputs like any other (they see the keys before
     * the padding); what follows (sequence_pool) ignores them.
     *
     * att (b, h, t, t) gets the softmax probabilities P (0 where masked),
     * which backward needs. m->keep (b, h, t, t), when not NULL, holds
     * dropout multipliers (0 or 1/(1-rate), made by dropout_forward):
     * out = (P * keep) V, as nn.MultiheadAttention's dropout on the
     * attention weights; forward overwrites keep with P * keep (att still
     * gets P), which backward reads.
     * Rows are softmaxed with their maximum subtracted. The CPU runs each
     * (sequence, head) pair's two products through SGEMM, pairs split
     * over its parts (results do not depend on the thread count). */
    void (*attention_forward)(const nn_exec *ex, float *out, float *att,
                              const float *q, const float *k, const float *v,
                              uint32_t b, uint32_t t, uint32_t h, uint32_t d,
                              uint32_t ld, const nn_attn_mask *m);
    /* NN_OP_ATTENTION backward from dout (B, T, C), under the forward's
     * mask m: dq, dk, dv (stride ld, the layout of q, k, v; they may be
     * thirds of one (B, T, 3 C) gradient) are assigned (activation
     * gradients). datt (b, h, t, t) is working memory the kernel overwrites
     * (the gradient of the scores). With keep (now Pk = P * keep): dV =
     * Pk^T dO, and dS = Pk * dPk - P rowsum(Pk * dPk) (times 1/sqrt(d)),
     * dPk = dO V^T: the dropped gradient without dividing by P. */
    void (*attention_backward)(const nn_exec *ex, float *dq, float *dk,
                               float *dv, float *datt, const float *dout,
                               const float *q, const float *k, const float *v,
                               const float *att, uint32_t b, uint32_t t,
                               uint32_t h, uint32_t d, uint32_t ld,
                               const nn_attn_mask *m);
    /* Part of NN_OP_ATTENTION: each sequence's length, for the mask's
     * lens: lens[bi] = the position of the first value below 0 in row bi of
     * x (b, t) (token ids carried as floats, padding -1 after the text), or
     * t when there is none. */
    void (*seq_lens)(const nn_exec *ex, int32_t *lens, const float *x,
                     uint32_t b, uint32_t t);

    /* NN_OP_SEQ_POOL forward: out (b, c) from in (b, t, c) over each
     * sequence's first n positions, n = lens[bi] clamped to [0, t] (lens
     * NULL: t), the rest being padding. mode NN_SEQ_POOL_MEAN: their
     * average; _FIRST: position 0; _LAST: position n - 1. A sequence with
     * n = 0 pools to 0. backward: din (b, t, c) is assigned: dout's share
     * at the pooled positions (dout / n for the mean), 0 elsewhere. */
    void (*seq_pool_forward)(const nn_exec *ex, float *out, const float *in,
                             const int32_t *lens, uint32_t b, uint32_t t,
                             uint32_t c, nn_seq_pool_mode mode);
    void (*seq_pool_backward)(const nn_exec *ex, float *din, const float *dout,
                              const int32_t *lens, uint32_t b, uint32_t t,
                              uint32_t c, nn_seq_pool_mode mode);

    /* ---- Decoding with a key/value cache (NN_OP_KV_CACHE) ----
     * A language model generates one token at a time; each step runs the
     * new tokens only, their attention reading the keys and values the
     * earlier tokens left in a cache (models/nn_decode.h). The cache is
     * paged, as vLLM's: blocks of bt token slots, a slot holding one
     * attention layer's c = h d keys (or values) of one position; slot s of
     * block bi is at cache + ((size_t)bi * bt + s) * c. Row r of a step is
     * one token of one sequence at position pos[r]; that sequence's block
     * table is tables + r * tstride: position j lives in block
     * table[j / bt], slot j % bt. Every row is computed on its own (no sum
     * spans rows), so a row's result does not depend on the others. */

    /* Writes row r's key (k + r * ld) and value (v + r * ld), c values
     * each, into the slot of position pos[r]. */
    void (*kv_store)(const nn_exec *ex, float *kc, float *vc, const float *k,
                     const float *v, uint32_t ld, const int32_t *tables,
                     uint32_t tstride, const int32_t *pos, uint32_t n,
                     uint32_t c, uint32_t bt);
    /* out (n, c) row r, head hi: softmax over j in [0, pos[r]] of q_r .
     * K_j / sqrt(d) (max subtracted), times V_j summed in j order: causal
     * attention of the row's query (q + r * ldq, h heads of d) over its
     * sequence's cached positions, its own included (stored first). */
    void (*kv_attention)(const nn_exec *ex, float *out, const float *q,
                         uint32_t ldq, const float *kc, const float *vc,
                         const int32_t *tables, uint32_t tstride,
                         const int32_t *pos, uint32_t n, uint32_t h,
                         uint32_t d, uint32_t bt);
    /* out (n, u) = x (n, k) W^T, plus beta * out unless beta is 0, W (u,
     * k) row-major: a decode step's linear layers. Each output is a sum
     * over k in an order that depends on k alone, never on n, the row's
     * place or the threads, so a row gets the same bits however many rows
     * share the step (gemm promises no such thing); W is read once for
     * several rows, not once a row as one gemm per row would. */
    void (*rows_gemm)(const nn_exec *ex, float *out, const float *x,
                      const float *w, uint32_t n, uint32_t u, uint32_t k,
                      float beta);

    /* NN_OP_XENT_IGNORE: softmax cross-entropy of each row of logits (n, v)
     * against targets (n), skipping rows whose target is ignore_index, as
     * F.cross_entropy(ignore_index=..., reduction="mean"). The result is
     * that mean over the counted rows (0 when none) times weight (a
     * language model passes its number of windows, so the result counts
     * like the other losses' per-example sums; 1 gives the mean itself),
     * in double. Like the other losses (see nn_exec.acc) it is returned,
     * with *counted (may be NULL) set to the counted rows, when ex has no
     * acc; with acc it is added to acc[NN_ACC_LOSS] (acc[NN_ACC_CORRECT]
     * is left alone), 0 is returned and *counted gets 0, so nothing waits
     * for the device and a graph may capture the call. dlogits (n, v),
     * when not NULL, = (softmax - onehot) * grad_scale / counted on
     * counted rows and 0 on ignored ones (grad_scale 1: the mean's
     * gradient). A counted target must be in [0, v) (the caller checks). */
    double (*xent_ignore)(const nn_exec *ex, float *dlogits, uint32_t *counted,
                          const float *logits, const int32_t *targets,
                          uint32_t n, uint32_t v, int32_t ignore_index,
                          float grad_scale, double weight);
} nn_backend;

/* The CPU reference backend (OpenBLAS GEMM on one thread per part, plain C
 * elsewhere, split over nn_exec's pool). */
extern const nn_backend nn_backend_cpu;

#endif
