/*
 * cuda_internal.h - what the CUDA backend's source files share, host side:
 * the context behind nn_exec.device, the error-recording checks, the
 * launch helpers, the layout of the context's device scratch, and the
 * members the nn_backend_cuda table in backend.cu points at. Not a
 * public API (see backend.h); device-side helpers are in kernels.cuh,
 * which includes this header, never the reverse.
 *
 * It includes models/backend.h, not gpu/cuda/backend.h: backend.cu
 * includes both, and the headers stay a DAG (kernels.cuh ->
 * cuda_internal.h -> models/backend.h <- backend.h).
 *
 * Device scratch: nn_cuda_exec_init makes one cudaMalloc and points
 * ctx->d_scalars at its start. It holds, in order,
 *   NN_CUDA_SCALARS doubles        results that travel to h_scalars,
 *   NN_CUDA_PARTS x NN_CUDA_PARTIALS doubles, the per-block partial sums
 *                                  of a reduction (set k at k * PARTIALS),
 *   the cuBLAS workspace           (blas_workspace_bytes, backend.cu).
 * A reduction launches at most NN_CUDA_PARTIALS blocks, each writing its
 * partial sums; one block then adds them in a fixed tree into d_scalars,
 * one copy brings them to the host and the stream is synchronized. The
 * number of blocks depends only on the problem's size, so a sum has the
 * same bits on every run on the same device.
 */
#ifndef TY_CUDA_INTERNAL_H
#define TY_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <stddef.h>
#include <stdint.h>

/* The .cu files are C++: the C headers' declarations keep C linkage. */
#ifdef __cplusplus
extern "C" {
#endif

#include "common/ty.h"
#include "models/backend.h"

typedef struct {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    cudnnHandle_t dnn;
    /* Scalar results: kernels reduce into d_scalars (device), one
     * cudaMemcpyAsync brings them to h_scalars (pinned host) and the
     * stream is synchronized. NN_CUDA_SCALARS doubles each. */
    double *d_scalars, *h_scalars;
    /* The first failure; once set, kernels return without launching. */
    int failed;
    char what[256];
} nn_cuda_ctx;

#define NN_CUDA_SCALARS 64
#define NN_CUDA_PARTIALS 1024 /* most blocks in one reduction */
#define NN_CUDA_PARTS 2       /* sums a reduction may carry (loss, hits) */
#define NN_CUDA_THREADS \
    256 /* block size of elementwise kernels (and of
                                   the convolution, pooling, batch norm) */
#define NN_CUDA_MAX_BLOCKS (1u << 20) /* most blocks of nn_cuda_blocks_for */
#define NN_CUDA_COL_ROWS 16 /* threads splitting the rows of a column sum */

/* Bytes of the scratch before the cuBLAS workspace (a multiple of 256). */
#define NN_CUDA_SCRATCH_BYTES                                       \
    ((size_t)(NN_CUDA_SCALARS + NN_CUDA_PARTS * NN_CUDA_PARTIALS) * \
     sizeof(double))

/* Examples per cuDNN convolution call: larger batches run in chunks of at
 * most this many (fewer when the work arena is too small for a
 * deterministic algorithm at this size), so conv2d_work does not depend
 * on the batch size. */
#define NN_CUDA_CONV_BATCH 64u

/* The context of ex (ex must come from nn_cuda_exec_init). */
static inline nn_cuda_ctx *nn_cuda_ctx_of(const nn_exec *ex)
{
    return (nn_cuda_ctx *)ex->device;
}

static inline double *nn_cuda_partials(const nn_cuda_ctx *c)
{
    return c->d_scalars + NN_CUDA_SCALARS;
}

/* ---- errors ---- */

/* Records the first failure: call is the function that failed
 * ("cublasSgemm"), detail the library's message. */
void nn_cuda_fail(const nn_exec *ex, const char *call, const char *detail);

int nn_cuda_check_blas(const nn_exec *ex, cublasStatus_t e, const char *call);

/* Check a call's result; on failure record it (first one wins). Each
 * evaluates to 1 when the call succeeded. */
#define NN_CUDA_OK(ex, expr) nn_cuda_check_rt((ex), (expr), #expr)
#define NN_CUBLAS_OK(ex, expr) nn_cuda_check_blas((ex), (expr), #expr)
#define NN_CUDNN_OK(ex, expr) nn_cuda_check_dnn((ex), (expr), #expr)

static inline int nn_cuda_check_rt(const nn_exec *ex, cudaError_t e,
                                   const char *call)
{
    if (e == cudaSuccess)
        return 1;
    nn_cuda_fail(ex, call, cudaGetErrorString(e));
    return 0;
}

static inline int nn_cuda_check_dnn(const nn_exec *ex, cudnnStatus_t e,
                                    const char *call)
{
    if (e == CUDNN_STATUS_SUCCESS)
        return 1;
    nn_cuda_fail(ex, call, cudnnGetErrorString(e));
    return 0;
}

/* ---- launching ---- */

/* The context of ex, ready for work on this thread (its device made
 * current); NULL when ex has no context or it has already failed: the
 * caller returns at once. */
nn_cuda_ctx *nn_cuda_begin(const nn_exec *ex);

/* After a launch: records a launch failure naming kernel. 1 on success. */
int nn_cuda_launched(const nn_exec *ex, const char *kernel);

/* Grid for a grid-stride loop over len values with NN_CUDA_THREADS
 * threads per block; depends only on len. len > 0. */
unsigned nn_cuda_grid(size_t len);

/* Block size for a kernel that gives one block to each row of c values:
 * a multiple of 32, at most max_threads. */
unsigned nn_cuda_row_threads(uint32_t c, unsigned max_threads);

/* Blocks for the convolution, pooling and batch-norm kernels (conv.cu,
 * pool.cu, norm.cu's batch norm): one per NN_CUDA_THREADS of total values,
 * at least 1, at most NN_CUDA_MAX_BLOCKS (more than nn_cuda_grid's 16384;
 * those kernels grid-stride over the rest as well). */
static inline unsigned nn_cuda_blocks_for(size_t total)
{
    size_t b = (total + NN_CUDA_THREADS - 1) / NN_CUDA_THREADS;
    if (b < 1)
        b = 1;
    return b > NN_CUDA_MAX_BLOCKS ? NN_CUDA_MAX_BLOCKS : (unsigned)b;
}

/* Checks the launch just made by conv.cu, pool.cu or norm.cu's batch
 * norm; kernel names the kernel for the error. Unlike nn_cuda_launched the
 * record names the kernel bare ("CUDA error in bn_forward_kernel: ..."),
 * as those kernels' failures always have. 1 on success. */
static inline int nn_cuda_launch_ok(const nn_exec *ex, const char *kernel)
{
    return nn_cuda_check_rt(ex, cudaGetLastError(), kernel);
}

/* Adds the first nparts partial sums of each of the first nsums sets into
 * d_scalars[0 .. nsums), brings them to the host and waits for the stream:
 * out[0 .. nsums) gets them (zeros once the context has failed). */
void nn_cuda_finish_sums(const nn_exec *ex, unsigned nparts, int nsums,
                         double *out);

/* ---- the members of nn_backend_cuda (see models/backend.h) ----
 * Each is the models/backend.h member of the same name with the nn_cuda_
 * prefix; see there for the contracts. Pointers are device memory; ex
 * must come from nn_cuda_exec_init, and a context that has already failed
 * makes every call return at once. The table's memory, status and
 * supports members are backend.cu's own. */

/* matmul.cu */
void nn_cuda_gemm(const nn_exec *ex, float *c, const float *a, const float *b,
                  int trans_a, int trans_b, int m, int n, int k, float alpha,
                  float beta);

/* elementwise.cu */
void nn_cuda_bias_rows(const nn_exec *ex, float *out, const float *bias,
                       uint32_t n, uint32_t c);
void nn_cuda_bias_grad(const nn_exec *ex, float *db, const float *dout,
                       uint32_t n, uint32_t c);
void nn_cuda_act_forward(const nn_exec *ex, nn_op op, float *out,
                         const float *in, size_t len);
void nn_cuda_act_backward(const nn_exec *ex, nn_op op, float *din,
                          const float *dout, const float *in, const float *out,
                          size_t len);
void nn_cuda_dropout_forward(const nn_exec *ex, float *out, float *mask,
                             const float *in, size_t len, float rate,
                             ty_rng *rng);
void nn_cuda_dropout_backward(const nn_exec *ex, float *din, const float *dout,
                              const float *mask, size_t len);
void nn_cuda_leaky_relu_forward(const nn_exec *ex, float *out, const float *in,
                                size_t len, float slope);
void nn_cuda_leaky_relu_backward(const nn_exec *ex, float *din,
                                 const float *dout, const float *in, size_t len,
                                 float slope);
void nn_cuda_add(const nn_exec *ex, float *out, const float *a, const float *b,
                 size_t len);
void nn_cuda_scale(const nn_exec *ex, float *x, size_t len, float alpha);

/* loss.cu */
double nn_cuda_softmax_xent(const nn_exec *ex, float *dlogits, float *probs,
                            uint32_t *correct, const float *logits,
                            const int32_t *labels, uint32_t n, uint32_t c,
                            float grad_scale);
double nn_cuda_softmax_xent_smooth(const nn_exec *ex, float *dlogits,
                                   uint32_t *correct, const float *logits,
                                   const int32_t *labels, uint32_t n,
                                   uint32_t c, float smoothing,
                                   float grad_scale);
double nn_cuda_bce_logits(const nn_exec *ex, float *dlogits, float *probs,
                          uint32_t *correct, const float *logits,
                          const int32_t *labels, uint32_t n, float grad_scale);
double nn_cuda_mse(const nn_exec *ex, float *dpred, const float *pred,
                   const float *target, size_t len, float grad_scale);
double nn_cuda_huber(const nn_exec *ex, float *dpred, const float *pred,
                     const float *target, size_t len, float delta,
                     float grad_scale);
double nn_cuda_sum_squares(const nn_exec *ex, const float *x, size_t len);

/* optim.cu */
void nn_cuda_sgd(const nn_exec *ex, float *param, float *grad, float *buf,
                 size_t len, const nn_optim_args *s);
void nn_cuda_adam(const nn_exec *ex, float *param, float *grad, float *m,
                  float *v, size_t len, const nn_optim_args *s);

/* norm.cu */
void nn_cuda_layernorm_forward(const nn_exec *ex, float *out, float *mean,
                               float *rstd, const float *x, const float *gamma,
                               const float *beta, uint32_t n, uint32_t d,
                               float eps);
void nn_cuda_layernorm_backward(const nn_exec *ex, float *dx, float *dgamma,
                                float *dbeta, const float *dout, const float *x,
                                const float *gamma, const float *mean,
                                const float *rstd, uint32_t n, uint32_t d);
void nn_cuda_softmax_forward(const nn_exec *ex, float *out, const float *in,
                             uint32_t n, uint32_t c);
void nn_cuda_softmax_backward(const nn_exec *ex, float *din, const float *dout,
                              const float *out, uint32_t n, uint32_t c);
void nn_cuda_batchnorm_forward(const nn_exec *ex, float *out, float *mean,
                               float *invstd, float *running_mean,
                               float *running_var, const float *x,
                               const float *gamma, const float *beta,
                               uint32_t n, uint32_t c, uint32_t s, int training,
                               float momentum, float eps);
void nn_cuda_batchnorm_backward(const nn_exec *ex, float *dx, float *dgamma,
                                float *dbeta, const float *dout, const float *x,
                                const float *gamma, const float *mean,
                                const float *invstd, uint32_t n, uint32_t c,
                                uint32_t s, int batch_stats);

/* conv.cu. conv2d_work: floats of ex->work a convolution of geometry d
 * needs (the largest of the forward, backward-data and backward-filter
 * workspaces of the algorithms chosen for a chunk of NN_CUDA_CONV_BATCH
 * examples), asked of cuDNN on the calling thread's current device. 0
 * when no device can be asked. */
size_t nn_cuda_conv2d_work(const nn_conv_desc *d);
void nn_cuda_conv2d_forward(const nn_exec *ex, float *out, const float *in,
                            const float *weight, const float *bias, uint32_t n,
                            const nn_conv_desc *d);
void nn_cuda_conv2d_backward(const nn_exec *ex, float *din, float *dweight,
                             float *dbias, const float *dout, const float *in,
                             const float *weight, uint32_t n,
                             const nn_conv_desc *d);

/* pool.cu */
void nn_cuda_pool2d_forward(const nn_exec *ex, nn_op op, float *out,
                            int32_t *argmax, const float *in, uint32_t n,
                            const nn_conv_desc *d);
void nn_cuda_pool2d_backward(const nn_exec *ex, nn_op op, float *din,
                             const float *dout, const int32_t *argmax,
                             uint32_t n, const nn_conv_desc *d);

/* lp.cu */
void nn_cuda_cast(const nn_exec *ex, void *dst, nn_dtype dt, const float *src,
                  size_t len);
void nn_cuda_gemm_lp(const nn_exec *ex, float *c, const void *a, const void *b,
                     nn_dtype dt, int trans_a, int trans_b, int m, int n, int k,
                     float alpha, float beta);
int nn_cuda_lp_ok(const nn_exec *ex, nn_dtype dt);

/* kvcache.cu (decoding) */
void nn_cuda_kv_store(const nn_exec *ex, float *kc, float *vc, const float *k,
                      const float *v, uint32_t ld, const int32_t *tables,
                      uint32_t tstride, const int32_t *pos, uint32_t n,
                      uint32_t c, uint32_t bt);
void nn_cuda_kv_attention(const nn_exec *ex, float *out, const float *q,
                          uint32_t ldq, const float *kc, const float *vc,
                          const int32_t *tables, uint32_t tstride,
                          const int32_t *pos, uint32_t n, uint32_t h,
                          uint32_t d, uint32_t bt);
void nn_cuda_rows_gemm(const nn_exec *ex, float *out, const float *x,
                       const float *w, uint32_t n, uint32_t u, uint32_t k,
                       float beta);

/* seqpool.cu (issue 31) */
void nn_cuda_seq_pool_forward(const nn_exec *ex, float *out, const float *in,
                              const int32_t *lens, uint32_t b, uint32_t t,
                              uint32_t c, nn_seq_pool_mode mode);
void nn_cuda_seq_pool_backward(const nn_exec *ex, float *din,
                               const float *dout, const int32_t *lens,
                               uint32_t b, uint32_t t, uint32_t c,
                               nn_seq_pool_mode mode);

/* embedding.cu (issue 31) */
void nn_cuda_embedding_forward(const nn_exec *ex, float *out,
                               const int32_t *ids, const float *table,
                               uint32_t n, uint32_t c);
void nn_cuda_embedding_backward(const nn_exec *ex, float *dtable,
                                const float *dout, const int32_t *ids,
                                uint32_t n, uint32_t v, uint32_t c);
void nn_cuda_to_ids(const nn_exec *ex, int32_t *ids, const float *x, size_t len,
                    uint32_t bound, int32_t fallback);
double nn_cuda_xent_ignore(const nn_exec *ex, float *dlogits, uint32_t *counted,
                           const float *logits, const int32_t *targets,
                           uint32_t n, uint32_t v, int32_t ignore_index,
                           float grad_scale, double weight);

/* attention.cu */
void nn_cuda_attention_forward(const nn_exec *ex, float *out, float *att,
                               const float *q, const float *k, const float *v,
                               uint32_t b, uint32_t t, uint32_t h, uint32_t d,
                               uint32_t ld, const nn_attn_mask *m);
void nn_cuda_attention_backward(const nn_exec *ex, float *dq, float *dk,
                                float *dv, float *datt, const float *dout,
                                const float *q, const float *k, const float *v,
                                const float *att, uint32_t b, uint32_t t,
                                uint32_t h, uint32_t d, uint32_t ld,
                                const nn_attn_mask *m);
void nn_cuda_seq_lens(const nn_exec *ex, int32_t *lens, const float *x,
                      uint32_t b, uint32_t t);

/* graph.cu: host staging, fences, graphs */
void *nn_cuda_host_alloc(const nn_exec *ex, size_t bytes);
void nn_cuda_host_release(const nn_exec *ex, void *p);
void *nn_cuda_fence_create(const nn_exec *ex);
void nn_cuda_fence_record(const nn_exec *ex, void *fence);
void nn_cuda_fence_wait(const nn_exec *ex, void *fence);
void nn_cuda_fence_release(const nn_exec *ex, void *fence);
int nn_cuda_graph_begin(const nn_exec *ex);
int nn_cuda_graph_end(const nn_exec *ex, void **graph, ty_err *err);
void nn_cuda_graph_launch(const nn_exec *ex, void *graph);
void nn_cuda_graph_release(const nn_exec *ex, void *graph);

#ifdef __cplusplus
}
#endif

#endif
