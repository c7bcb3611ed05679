/*
 * placement.h - where jobs train and models serve: the CPU or one CUDA
 * device, and whether a job's training fits a device's memory.
 *
 * The server picks one training device at startup (--train-device
 * cpu|cuda[:N]|auto) and every job runs there; predictions run on the
 * device a model was trained on when this server has it, or on
 * --serve-device when that was given, else on the CPU. Issue 5's scheduler
 * (--devices, MIG) will choose per job; the pure functions here (resolve,
 * serve choice, memory fit) are what it builds on.
 *
 * Devices are ints: PLACE_DEVICE_CPU (-1), PLACE_DEVICE_AUTO (-2, a flag's
 * "auto", resolved at startup), or N >= 0 for CUDA device N as this process
 * numbers them (CUDA_VISIBLE_DEVICES applies).
 *
 * The pure functions take the device count and memory as arguments, so
 * they are tested on machines without a GPU; the place_cuda_* queries ask
 * the CUDA runtime and, in a binary without CUDA, see no devices.
 */
#ifndef TY_PLACEMENT_H
#define TY_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"
#include "models/train/train.h"

#define PLACE_DEVICE_CPU (-1)
#define PLACE_DEVICE_AUTO (-2)
#define PLACE_DEVICE_MAX 1024 /* highest N cuda:N parses to */

/*
 * Device memory a CUDA training run takes beside what the trainer
 * allocates itself (train_memory, counted exactly):
 *
 *   CUDA context                           ~300 MiB on an H100/H200: the
 *       local-memory reservation for thread stacks (1 KiB default stack x
 *       2048 threads per SM x 132 SMs = 264 MiB), the device heap (8 MiB)
 *       and printf buffer (1 MiB), and the context's own structures
 *   kernel modules loaded on first launch  ~160 MiB: ours, and the cuBLAS
 *       and cuDNN kernels the run uses (lazy loading, the CUDA 12+ default)
 *   cuBLAS                                  64 MiB: the 32 MiB workspace
 *       nn_cuda_exec_init gives it (Hopper) and the default workspace
 *       cublasCreate makes before that
 *   cuDNN                                  ~64 MiB: two handles (the
 *       context's and the workspace-sizing probe's) and cuDNN's internal
 *       buffers
 *   rounding and fragmentation             ~180 MiB: cudaMalloc granularity
 *       over the trainer's ~20 allocations, and what the items above miss
 *
 * = PLACE_CUDA_OVERHEAD_BYTES, 768 MiB. These are sizes from the CUDA,
 * cuBLAS and cuDNN documentation and typical measurements, not measured on
 * this code yet: on an otherwise idle device, an epoch's
 * device_memory_used_bytes minus its peak_memory_bytes is the real figure
 * (bench/gpu/run.sh records both), and this constant should follow it.
 *
 * PLACE_CUDA_LATE_BYTES is the part still to come once the worker's
 * context, cuBLAS and cuDNN handles exist (the kernel modules, the probe's
 * handle, cuDNN's buffers, rounding): what the worker keeps free beyond
 * the trainer's own bytes when it checks free memory before training.
 */
#define PLACE_CUDA_OVERHEAD_BYTES (768ull << 20)
#define PLACE_CUDA_LATE_BYTES (384ull << 20)

/* "cpu" or "cuda:N" into buf (at least 16 bytes); "auto" for AUTO. */
void place_device_label(int device, char *buf, size_t n);

/* The device a label names: "cuda:N" -> N, "cuda" -> 0; anything else
 * ("cpu", NULL, junk) -> PLACE_DEVICE_CPU. */
int place_label_device(const char *label);

/* Parses a device flag's value: "cpu", "cuda" (device 0), "cuda:N", and
 * "auto" when allow_auto. TY_EINVAL naming flag otherwise. */
ty_status place_parse_device(const char *flag, const char *val, int allow_auto,
                             int *out, ty_err *err);

/* Resolves a requested device against `count` CUDA devices (why: the
 * reason there are none, may be NULL): AUTO is device 0 when count > 0,
 * else the CPU; the CPU is the CPU; N must be below count, else TY_EDEVICE
 * with a message naming flag. Pure. */
ty_status place_resolve(const char *flag, int requested, int count,
                        const char *why, int *out, ty_err *err);

/* Where to run predictions for a model whose record says it was trained
 * on `trained_on` ("cuda:N", "cpu" or NULL for imported models):
 * serve_device when it is not AUTO (an operator's --serve-device), else
 * the training device when it is a CUDA device below `count`, else the
 * CPU. Pure. */
int place_serve_device(int serve_device, const char *trained_on, int count);

/* Whether a training run of m, plus `overhead` bytes the trainer does not
 * allocate itself, fits in `available` bytes of device `label`. TY_OK, or
 * TY_EINVAL on hyperparameters.batch_size with the breakdown: "the job
 * needs about 6.1 GiB on cuda:0 (parameters ..., plus 768 MiB for the CUDA
 * context and libraries) but the device has 5.0 GiB; ...". `is_free`
 * says what available is: 0 the device's total memory (a MIG slice's
 * size inside one), 1 the memory free right now (other processes hold the
 * rest). Pure. */
ty_status place_check_device_memory(const train_memory *m, uint64_t overhead,
                                    uint64_t available, const char *label,
                                    int is_free, ty_err *err);

/* A device this process can train or serve on. */
typedef struct {
    int device;           /* PLACE_DEVICE_CPU or N */
    char label[16];       /* "cpu", "cuda:0" */
    char name[128];       /* "NVIDIA H200"; "cpu" for the CPU */
    uint64_t total_bytes; /* device memory (a MIG slice's size); 0: CPU */
} place_device;

/* How many CUDA devices this process sees; 0 in a binary without CUDA or
 * without a driver or device, with the reason in why (may be NULL). */
int place_cuda_count(char *why, size_t n);

/* Resolves `requested` (place_resolve, against this process's devices)
 * and fills out with the device's name and memory. TY_EDEVICE naming flag
 * for a CUDA device this binary or machine lacks, or that cannot be
 * queried. */
ty_status place_device_open(const char *flag, int requested, place_device *out,
                            ty_err *err);

/* Free and total bytes on CUDA device `device` right now (cudaMemGetInfo;
 * inside a MIG slice, the slice's). TY_EDEVICE without CUDA or on a CUDA
 * error. */
ty_status place_cuda_memory(int device, uint64_t *free_bytes,
                            uint64_t *total_bytes, ty_err *err);

#endif
