/*
 * backend.c - the CPU reference backend's table (nn_backend_cpu), its
 * memory (the host's: plain malloc, memcpy and memset) and the op names.
 *
 * The kernels live one op family to a file, as the CUDA backend's do:
 * matmul.c (GEMM), elementwise.c (bias, activations, dropout, add, scale),
 * loss.c (losses, sum of squares), optim.c (SGD, Adam), norm.c (batchnorm,
 * layernorm, the softmax layer), conv.c (convolution), pool.c (pooling) and
 * lp.c (reduced precision), embedding.c (token embedding, the
 * cross-entropy with an ignore index) and attention.c (causal attention);
 * cpu_internal.h declares them. Each kernel is
 * nn_cpu_<member> for the nn_backend member it fills.
 *
 * Parallelism comes from the execution context's worker pool, not from
 * OpenBLAS's threads (which must be set to 1: its own threading was several
 * times slower than one thread on these small GEMMs): a large GEMM is split
 * into column (or row) blocks, elementwise kernels and optimizer steps into
 * ranges. Every output element is computed by exactly one part, the same way
 * for a given thread count, so runs are bit-reproducible for that count
 * (elementwise results do not depend on it at all).
 */
#include "models/cpu/cpu_internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "common/ty.h"

static const char *const op_names[] = {
    [NN_OP_GEMM] = "gemm",
    [NN_OP_BIAS_ROWS] = "bias_rows",
    [NN_OP_BIAS_GRAD] = "bias_grad",
    [NN_OP_RELU] = "relu",
    [NN_OP_TANH] = "tanh",
    [NN_OP_SIGMOID] = "sigmoid",
    [NN_OP_GELU] = "gelu",
    [NN_OP_DROPOUT] = "dropout",
    [NN_OP_SOFTMAX_XENT] = "softmax_xent",
    [NN_OP_MSE] = "mse",
    [NN_OP_SGD] = "sgd",
    [NN_OP_ADAM] = "adam",
    [NN_OP_BATCHNORM] = "batchnorm",
    [NN_OP_LAYERNORM] = "layernorm",
    [NN_OP_LEAKY_RELU] = "leaky_relu",
    [NN_OP_SOFTMAX] = "softmax",
    [NN_OP_ADD] = "add",
    [NN_OP_SOFTMAX_XENT_SMOOTH] = "softmax_xent_smooth",
    [NN_OP_BCE_LOGITS] = "bce_logits",
    [NN_OP_HUBER] = "huber",
    [NN_OP_SUM_SQUARES] = "sum_squares",
    [NN_OP_SCALE] = "scale",
    [NN_OP_CONV2D] = "conv2d",
    [NN_OP_MAXPOOL2D] = "maxpool2d",
    [NN_OP_AVGPOOL2D] = "avgpool2d",
    [NN_OP_CAST] = "cast",
    [NN_OP_GEMM_LP] = "gemm_lp",
    [NN_OP_GELU_TANH] = "gelu_tanh",
    [NN_OP_EMBEDDING] = "embedding",
    [NN_OP_ATTENTION] = "attention",
    [NN_OP_XENT_IGNORE] = "xent_ignore",
    [NN_OP_SEQ_POOL] = "seq_pool",
    [NN_OP_KV_CACHE] = "kv_cache",
};
static_assert(TY_ARRAY_LEN(op_names) == NN_OP_COUNT,
              "every nn_op needs a name");

const char *nn_op_name(nn_op op)
{
    if ((unsigned)op >= NN_OP_COUNT || !op_names[op])
        return "?";
    return op_names[op];
}

static int nn_cpu_supports(nn_op op) { return (unsigned)op < NN_OP_COUNT; }

/* ---- memory: the host's ---- */

static void *nn_cpu_alloc(const nn_exec *ex, size_t bytes)
{
    (void)ex;
    return aligned_alloc(256, (bytes + 255) / 256 * 256 + (bytes ? 0 : 256));
}

static void nn_cpu_release(const nn_exec *ex, void *p)
{
    (void)ex;
    free(p);
}

static void nn_cpu_copy(const nn_exec *ex, void *dst, const void *src,
                        size_t bytes)
{
    (void)ex;
    if (bytes && dst != src)
        memmove(dst, src, bytes);
}

static void nn_cpu_zero(const nn_exec *ex, void *dst, size_t bytes)
{
    (void)ex;
    if (bytes)
        memset(dst, 0, bytes);
}

static ty_status nn_cpu_status(const nn_exec *ex, ty_err *err)
{
    (void)ex;
    (void)err;
    return TY_OK;
}

const nn_backend nn_backend_cpu = {
    .name = "cpu",
    .alloc = nn_cpu_alloc,
    .release = nn_cpu_release,
    .upload = nn_cpu_copy,
    .download = nn_cpu_copy,
    .zero = nn_cpu_zero,
    .copy = nn_cpu_copy,
    .status = nn_cpu_status,
    .supports = nn_cpu_supports,
    .gemm = nn_cpu_gemm,
    .bias_rows = nn_cpu_bias_rows,
    .bias_grad = nn_cpu_bias_grad,
    .act_forward = nn_cpu_act_forward,
    .act_backward = nn_cpu_act_backward,
    .dropout_forward = nn_cpu_dropout_forward,
    .dropout_backward = nn_cpu_dropout_backward,
    .softmax_xent = nn_cpu_softmax_xent,
    .mse = nn_cpu_mse,
    .sgd = nn_cpu_sgd,
    .adam = nn_cpu_adam,
    .batchnorm_forward = nn_cpu_batchnorm_forward,
    .batchnorm_backward = nn_cpu_batchnorm_backward,
    .layernorm_forward = nn_cpu_layernorm_forward,
    .layernorm_backward = nn_cpu_layernorm_backward,
    .leaky_relu_forward = nn_cpu_leaky_relu_forward,
    .leaky_relu_backward = nn_cpu_leaky_relu_backward,
    .softmax_forward = nn_cpu_softmax_forward,
    .softmax_backward = nn_cpu_softmax_backward,
    .add = nn_cpu_add,
    .softmax_xent_smooth = nn_cpu_softmax_xent_smooth,
    .bce_logits = nn_cpu_bce_logits,
    .huber = nn_cpu_huber,
    .sum_squares = nn_cpu_sum_squares,
    .scale = nn_cpu_scale,
    .conv2d_work = nn_cpu_conv2d_work,
    .conv2d_forward = nn_cpu_conv2d_forward,
    .conv2d_backward = nn_cpu_conv2d_backward,
    .pool2d_forward = nn_cpu_pool2d_forward,
    .pool2d_backward = nn_cpu_pool2d_backward,
    .cast = nn_cpu_cast,
    .gemm_lp = nn_cpu_gemm_lp,
    .lp_ok = nn_cpu_lp_ok,
    .embedding_forward = nn_cpu_embedding_forward, /* embedding.c */
    .embedding_backward = nn_cpu_embedding_backward,
    .to_ids = nn_cpu_to_ids,
    .attention_forward = nn_cpu_attention_forward, /* attention.c */
    .attention_backward = nn_cpu_attention_backward,
    .seq_lens = nn_cpu_seq_lens,
    .seq_pool_forward = nn_cpu_seq_pool_forward, /* attention.c */
    .seq_pool_backward = nn_cpu_seq_pool_backward,
    .kv_store = nn_cpu_kv_store, /* kvcache.c */
    .kv_attention = nn_cpu_kv_attention,
    .rows_gemm = nn_cpu_rows_gemm,
    .xent_ignore = nn_cpu_xent_ignore, /* embedding.c */
};
