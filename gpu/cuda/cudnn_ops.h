/*
 * cudnn_ops.h - the CUDA backend's convolution, pooling and batch-norm
 * kernels (cudnn_ops.cu), declared for the nn_backend_cuda table in
 * backend_cuda.cu. Each is the models/backend.h member of the same name
 * with the nn_cuda_ prefix; see there for the contracts. Pointers are
 * device memory; ex must come from nn_cuda_exec_init, and a context that
 * has already failed makes every call return at once.
 */
#ifndef TY_CUDNN_OPS_H
#define TY_CUDNN_OPS_H

#include "models/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Floats of ex->work a convolution of geometry d needs (the largest of the
 * forward, backward-data and backward-filter workspaces of the algorithms
 * chosen for a chunk of NN_CUDA_CONV_BATCH examples), asked of cuDNN on
 * the calling thread's current device. 0 when no device can be asked. */
size_t nn_cuda_conv2d_work(const nn_conv_desc *d);
void nn_cuda_conv2d_forward(const nn_exec *ex, float *out, const float *in,
                            const float *weight, const float *bias,
                            uint32_t n, const nn_conv_desc *d);
void nn_cuda_conv2d_backward(const nn_exec *ex, float *din, float *dweight,
                             float *dbias, const float *dout,
                             const float *in, const float *weight,
                             uint32_t n, const nn_conv_desc *d);
void nn_cuda_pool2d_forward(const nn_exec *ex, nn_op op, float *out,
                            int32_t *argmax, const float *in, uint32_t n,
                            const nn_conv_desc *d);
void nn_cuda_pool2d_backward(const nn_exec *ex, nn_op op, float *din,
                             const float *dout, const int32_t *argmax,
                             uint32_t n, const nn_conv_desc *d);
void nn_cuda_batchnorm_forward(const nn_exec *ex, float *out, float *mean,
                               float *invstd, float *running_mean,
                               float *running_var, const float *x,
                               const float *gamma, const float *beta,
                               uint32_t n, uint32_t c, uint32_t s,
                               int training, float momentum, float eps);
void nn_cuda_batchnorm_backward(const nn_exec *ex, float *dx, float *dgamma,
                                float *dbeta, const float *dout,
                                const float *x, const float *gamma,
                                const float *mean, const float *invstd,
                                uint32_t n, uint32_t c, uint32_t s,
                                int batch_stats);

/* Examples per cuDNN convolution call: larger batches run in chunks of at
 * most this many (fewer when the work arena is too small for a
 * deterministic algorithm at this size), so conv2d_work does not depend
 * on the batch size. */
#define NN_CUDA_CONV_BATCH 64u

#ifdef __cplusplus
}
#endif

#endif
