/*
 * backend.h - the CUDA compute backend, the one header of gpu/cuda/ the
 * rest of the product includes: the same kernel table as the CPU backend
 * (models/backend.h), on an NVIDIA GPU, with cuBLAS for GEMM, cuDNN for
 * convolution, and own kernels for the rest. Built only when CMake finds
 * nvcc and cuDNN (TRAINYARD_HAVE_CUDA); a build without them has none of
 * these symbols. What the backend's own files share is in cuda_internal.h.
 * The other public header here is comm_nccl.h, the NCCL engine of the
 * collective seam, declared in every build.
 *
 * Every float pointer the kernels take is device memory from
 * nn_backend_cuda.alloc; scalar results (returned loss sums, *correct) land
 * on the host, which makes those calls synchronize. Kernels never fail in
 * the caller's eyes: the first failed CUDA, cuBLAS or cuDNN call is
 * recorded in the execution context (with the call's name and the
 * library's message) and later calls become no-ops; callers ask
 * nn_backend_cuda.status() after each step and fail the job with that
 * message.
 */
#ifndef TY_CUDA_BACKEND_H
#define TY_CUDA_BACKEND_H

#include <stddef.h>

/* The .cu files are C++: the C headers' declarations keep C linkage. */
#ifdef __cplusplus
extern "C" {
#endif

#include "common/ty.h"
#include "models/backend.h"

extern const nn_backend nn_backend_cuda;

typedef struct {
    char name[128]; /* "NVIDIA H200" */
    char uuid[64];  /* "GPU-..." (or "MIG-..." for a slice) */
    size_t total_bytes, free_bytes;
    int cc_major, cc_minor; /* compute capability */
} nn_cuda_device;

/* How many CUDA devices this process sees (CUDA_VISIBLE_DEVICES applies).
 * 0 when there are none or no driver; why (may be NULL) then gets the
 * reason, e.g. "no CUDA driver (CUDA driver version is insufficient ...)". */
int nn_cuda_device_count(char *why, size_t n);

/* Facts about device i (0-based). TY_EDEVICE with the CUDA message. */
ty_status nn_cuda_device_get(int i, nn_cuda_device *out, ty_err *err);

/* The CUDA runtime, cuBLAS and cuDNN versions this binary was linked
 * with, as "CUDA 13.0, cuBLAS 13.0.0, cuDNN 9.x.y". */
void nn_cuda_versions(char *buf, size_t n);

/* Makes ex a context on device `device`: its own stream, cuBLAS and cuDNN
 * handles bound to that stream, and small pinned buffers for scalar
 * results. ex->pool is NULL and ex->work/work_floats describe a device
 * arena set by the caller (nn_workspace). TY_EDEVICE naming the failed
 * call. */
ty_status nn_cuda_exec_init(nn_exec *ex, int device, ty_err *err);
void nn_cuda_exec_free(nn_exec *ex);

#ifdef __cplusplus
}
#endif

#endif
