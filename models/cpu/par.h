/*
 * backend_cpu_par.h - how the CPU backend's kernels decide whether to split
 * a call over the execution context's pool (backend_cpu*.c share it).
 * Below the thresholds a call stays on the calling thread: a split costs a
 * few microseconds of hand-off.
 */
#ifndef TY_BACKEND_CPU_PAR_H
#define TY_BACKEND_CPU_PAR_H

#include "models/backend.h"

#define PAR_MIN_MACS (1u << 18)  /* GEMM multiply-adds */
#define PAR_MIN_ELEMS (1u << 15) /* values touched, other kernels */
#define PAR_ALIGN 16             /* floats: split points on 64-byte lines */

/* The pool to split `work` over, or NULL when it is below min_work (or
 * there is no context): nn_pool_run(NULL, fn, arg) then runs fn's one part
 * here. nn_pool_threads() of the result is the part count. */
static inline nn_pool *nn_cpu_pool_for(const nn_exec *ex, double work,
                                       double min_work)
{
    return ex && work >= min_work ? ex->pool : NULL;
}

#endif
