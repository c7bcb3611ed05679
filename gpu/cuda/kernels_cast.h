/*
 * kernels_cast.h - the CUDA backend's reduced-precision members
 * (kernels_cast.cu), for the nn_backend_cuda table in backend_cuda.cu.
 * Each is the models/backend.h member of the same name with the nn_cuda_
 * prefix; see there for the contracts.
 */
#ifndef TY_KERNELS_CAST_H
#define TY_KERNELS_CAST_H

/* backend_cuda.h includes models/backend.h with C linkage. */
#include "gpu/cuda/backend_cuda.h"

void nn_cuda_cast(const nn_exec *ex, void *dst, nn_dtype dt, const float *src,
                  size_t len);
void nn_cuda_gemm_lp(const nn_exec *ex, float *c, const void *a, const void *b,
                     nn_dtype dt, int trans_a, int trans_b, int m, int n,
                     int k, float alpha, float beta);
int nn_cuda_lp_ok(const nn_exec *ex, nn_dtype dt);

#endif
