/*
 * comm_nccl.h - the NCCL engine of the collective seam
 * (models/train/comm.h): data-parallel ranks on CUDA devices, one device
 * per rank. Declared in every build; the engine itself is compiled where
 * CMake finds CUDA and NCCL (TRAINYARD_HAVE_NCCL), and elsewhere every call
 * but nn_comm_nccl_available is TY_EDEVICE "this build has no NCCL".
 *
 * Bootstrap. NCCL's ranks meet through a unique id that rank 0 makes
 * (nn_comm_nccl_unique_id) and every rank is given before create: through
 * the job's own channel, or over a host comm (nn_comm_nccl_create_over
 * broadcasts it over, e.g., the MPI engine, so a gang launched by mpirun
 * or srun needs nothing else).
 *
 * The comm it makes has device_memory 1: allreduce's buffers are device
 * memory of the rank's device and ex is that device's CUDA execution
 * context (nn_cuda_exec_init); bcast's bytes are host memory, as for every
 * engine. See comm_nccl.c for how the ops meet comm.h's contracts.
 */
#ifndef TY_CUDA_COMM_NCCL_H
#define TY_CUDA_COMM_NCCL_H

#ifdef __cplusplus
extern "C" {
#endif

#include "common/ty.h"
#include "models/train/comm.h"

/* Bytes of an NCCL unique id (NCCL_UNIQUE_ID_BYTES; checked against
 * nccl.h where the engine is built). */
#define NN_COMM_NCCL_ID_BYTES 128

/* 1 when this build has the NCCL engine. */
int nn_comm_nccl_available(void);

/* Makes a new unique id into out[0..NN_COMM_NCCL_ID_BYTES) (rank 0 does,
 * once per communicator). TY_EDEVICE with NCCL's reason. */
ty_status nn_comm_nccl_unique_id(void *out, ty_err *err);

/* Joins rank `rank` of `world` on CUDA device `device` to the communicator
 * named by unique_id (NN_COMM_NCCL_ID_BYTES bytes, the same on every
 * rank), with collective timeout timeout_s (<= 0: the default). The
 * communicator is made non-blocking, so a peer that never joins makes
 * this TY_EDEVICE after timeout_s instead of a hang. Sets the calling
 * thread's current device to `device`. *out is the caller's, freed by its
 * destroy. TY_EINVAL for a bad rank, world or device. */
ty_status nn_comm_nccl_create(int rank, int world, const void *unique_id,
                              int device, double timeout_s, nn_comm **out,
                              ty_err *err);

/* The same with the id made on host's rank 0 and broadcast over host
 * (any host-memory comm: MPI), taking host's rank and world. When rank 0
 * cannot make the id it aborts host with the reason, so the peers' bcast
 * fails with it instead of waiting. host stays the caller's. */
ty_status nn_comm_nccl_create_over(nn_comm *host, int device, double timeout_s,
                                   nn_comm **out, ty_err *err);

#ifdef __cplusplus
}
#endif

#endif
