/*
 * backend_cpu_lp.h - the CPU backend's reduced-precision kernels
 * (backend_cpu_lp.c): the scalar conversions between fp32 and bf16 / fp16
 * that they are built on (tests use them as the reference), and the
 * kernels the nn_backend_cpu table points at.
 */
#ifndef TY_BACKEND_CPU_LP_H
#define TY_BACKEND_CPU_LP_H

#include <stdint.h>

#include "models/backend.h"

/* fp32 -> bf16 bits, round to nearest even; NaN -> 0x7fc0 (as torch). */
uint16_t nn_bf16_from_f32(float x);
/* bf16 bits -> fp32 (exact). */
float nn_bf16_to_f32(uint16_t h);
/* fp32 -> IEEE binary16 bits, round to nearest even: overflow -> +-inf,
 * subnormals kept, NaN -> a quiet NaN of the same sign (0x7e00). */
uint16_t nn_f16_from_f32(float x);
/* binary16 bits -> fp32 (exact, subnormals included). */
float nn_f16_to_f32(uint16_t h);

/* The members of models/backend.h of the same name, for nn_backend_cpu. */
void nn_cpu_cast(const nn_exec *ex, void *dst, nn_dtype dt, const float *src,
                 size_t len);
void nn_cpu_gemm_lp(const nn_exec *ex, float *c, const void *a, const void *b,
                    nn_dtype dt, int trans_a, int trans_b, int m, int n, int k,
                    float alpha, float beta);
int nn_cpu_lp_ok(const nn_exec *ex, nn_dtype dt);

#endif
