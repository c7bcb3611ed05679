/*
 * backend_cpu_norm.h - the CPU backend's kernels for batchnorm, layernorm,
 * leaky_relu, the softmax layer and the elementwise add (backend_cpu_norm.c),
 * declared for backend_cpu.c's nn_backend_cpu table. Each is the backend.h
 * member of the same name without the cpu_ prefix; see there for contracts.
 */
#ifndef TY_BACKEND_CPU_NORM_H
#define TY_BACKEND_CPU_NORM_H

#include "models/backend.h"

void cpu_batchnorm_forward(const nn_exec *ex, float *out, float *mean,
                           float *invstd, float *running_mean,
                           float *running_var, const float *x,
                           const float *gamma, const float *beta, uint32_t n,
                           uint32_t c, uint32_t s, int training,
                           float momentum, float eps);
void cpu_batchnorm_backward(const nn_exec *ex, float *dx, float *dgamma,
                            float *dbeta, const float *dout, const float *x,
                            const float *gamma, const float *mean,
                            const float *invstd, uint32_t n, uint32_t c,
                            uint32_t s, int batch_stats);
void cpu_layernorm_forward(const nn_exec *ex, float *out, float *mean,
                           float *rstd, const float *x, const float *gamma,
                           const float *beta, uint32_t n, uint32_t d,
                           float eps);
void cpu_layernorm_backward(const nn_exec *ex, float *dx, float *dgamma,
                            float *dbeta, const float *dout, const float *x,
                            const float *gamma, const float *mean,
                            const float *rstd, uint32_t n, uint32_t d);
void cpu_leaky_relu_forward(const nn_exec *ex, float *out, const float *in,
                            size_t len, float slope);
void cpu_leaky_relu_backward(const nn_exec *ex, float *din, const float *dout,
                             const float *in, size_t len, float slope);
void cpu_softmax_forward(const nn_exec *ex, float *out, const float *in,
                         uint32_t n, uint32_t c);
void cpu_softmax_backward(const nn_exec *ex, float *din, const float *dout,
                          const float *out, uint32_t n, uint32_t c);
void cpu_add(const nn_exec *ex, float *out, const float *a, const float *b,
             size_t len);

#endif
