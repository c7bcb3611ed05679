/*
 * cpu_internal.h - what the files of the CPU backend share: when a kernel
 * splits over the execution context's pool, the kernels that fill the
 * nn_backend_cpu table (backend.c), and the scalar bf16 / fp16 conversions
 * the reduced-precision kernels are built on (tests use them as the
 * reference). Not a public API: the engine reaches these kernels through
 * nn_backend_cpu.
 *
 * Each kernel is nn_cpu_<member>, the nn_backend member of models/backend.h
 * it fills; see there for its contract. The CUDA backend names its own
 * nn_cuda_<member> by the same rule.
 */
#ifndef TY_CPU_INTERNAL_H
#define TY_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "models/backend.h"

/* ---- splitting over the pool ----
 * Below the thresholds a call stays on the calling thread: a split costs a
 * few microseconds of hand-off. */

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

/* Sum of x (n) in 16 interleaved partial sums (one float accumulator would
 * chain every add on the last); the order is fixed, so the result is too. */
static inline float nn_cpu_row_sum(const float *restrict x, size_t n)
{
    float acc[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++)
            acc[k] += x[i + k];
    for (; i < n; i++)
        acc[i % 16] += x[i];
    for (int k = 8; k >= 1; k /= 2)
        for (int j = 0; j < k; j++)
            acc[j] += acc[j + k];
    return acc[0];
}

/* ---- matmul.c ---- */

void nn_cpu_gemm(const nn_exec *ex, float *c, const float *a, const float *b,
                 int trans_a, int trans_b, int m, int n, int k, float alpha,
                 float beta);

/* ---- elementwise.c ---- */

void nn_cpu_bias_rows(const nn_exec *ex, float *out, const float *bias,
                      uint32_t n, uint32_t c);
void nn_cpu_bias_grad(const nn_exec *ex, float *db, const float *dout,
                      uint32_t n, uint32_t c);
void nn_cpu_act_forward(const nn_exec *ex, nn_op op, float *out,
                        const float *in, size_t len);
void nn_cpu_act_backward(const nn_exec *ex, nn_op op, float *din,
                         const float *dout, const float *in, const float *out,
                         size_t len);
void nn_cpu_dropout_forward(const nn_exec *ex, float *out, float *mask,
                            const float *in, size_t len, float rate,
                            ty_rng *rng);
void nn_cpu_dropout_backward(const nn_exec *ex, float *din, const float *dout,
                             const float *mask, size_t len);
void nn_cpu_leaky_relu_forward(const nn_exec *ex, float *out, const float *in,
                               size_t len, float slope);
void nn_cpu_leaky_relu_backward(const nn_exec *ex, float *din,
                                const float *dout, const float *in, size_t len,
                                float slope);
void nn_cpu_add(const nn_exec *ex, float *out, const float *a, const float *b,
                size_t len);
void nn_cpu_scale(const nn_exec *ex, float *x, size_t len, float alpha);

/* ---- loss.c ---- */

double nn_cpu_softmax_xent(const nn_exec *ex, float *dlogits, float *probs,
                           uint32_t *correct, const float *logits,
                           const int32_t *labels, uint32_t n, uint32_t c,
                           float grad_scale);
double nn_cpu_mse(const nn_exec *ex, float *dpred, const float *pred,
                  const float *target, size_t len, float grad_scale);
double nn_cpu_softmax_xent_smooth(const nn_exec *ex, float *dlogits,
                                  uint32_t *correct, const float *logits,
                                  const int32_t *labels, uint32_t n, uint32_t c,
                                  float smoothing, float grad_scale);
double nn_cpu_bce_logits(const nn_exec *ex, float *dlogits, float *probs,
                         uint32_t *correct, const float *logits,
                         const int32_t *labels, uint32_t n, float grad_scale);
double nn_cpu_huber(const nn_exec *ex, float *dpred, const float *pred,
                    const float *target, size_t len, float delta,
                    float grad_scale);
double nn_cpu_sum_squares(const nn_exec *ex, const float *x, size_t len);

/* ---- optim.c ---- */

void nn_cpu_sgd(const nn_exec *ex, float *param, float *grad, float *buf,
                size_t len, const nn_optim_args *s);
void nn_cpu_adam(const nn_exec *ex, float *param, float *grad, float *m,
                 float *v, size_t len, const nn_optim_args *s);

/* ---- norm.c ---- */

void nn_cpu_batchnorm_forward(const nn_exec *ex, float *out, float *mean,
                              float *invstd, float *running_mean,
                              float *running_var, const float *x,
                              const float *gamma, const float *beta, uint32_t n,
                              uint32_t c, uint32_t s, int training,
                              float momentum, float eps);
void nn_cpu_batchnorm_backward(const nn_exec *ex, float *dx, float *dgamma,
                               float *dbeta, const float *dout, const float *x,
                               const float *gamma, const float *mean,
                               const float *invstd, uint32_t n, uint32_t c,
                               uint32_t s, int batch_stats);
void nn_cpu_layernorm_forward(const nn_exec *ex, float *out, float *mean,
                              float *rstd, const float *x, const float *gamma,
                              const float *beta, uint32_t n, uint32_t d,
                              float eps);
void nn_cpu_layernorm_backward(const nn_exec *ex, float *dx, float *dgamma,
                               float *dbeta, const float *dout, const float *x,
                               const float *gamma, const float *mean,
                               const float *rstd, uint32_t n, uint32_t d);
void nn_cpu_softmax_forward(const nn_exec *ex, float *out, const float *in,
                            uint32_t n, uint32_t c);
void nn_cpu_softmax_backward(const nn_exec *ex, float *din, const float *dout,
                             const float *out, uint32_t n, uint32_t c);

/* ---- conv.c ---- */

size_t nn_cpu_conv2d_work(const nn_conv_desc *d);
void nn_cpu_conv2d_forward(const nn_exec *ex, float *out, const float *in,
                           const float *weight, const float *bias, uint32_t n,
                           const nn_conv_desc *d);
void nn_cpu_conv2d_backward(const nn_exec *ex, float *din, float *dweight,
                            float *dbias, const float *dout, const float *in,
                            const float *weight, uint32_t n,
                            const nn_conv_desc *d);

/* ---- pool.c ---- */

void nn_cpu_pool2d_forward(const nn_exec *ex, nn_op op, float *out,
                           int32_t *argmax, const float *in, uint32_t n,
                           const nn_conv_desc *d);
void nn_cpu_pool2d_backward(const nn_exec *ex, nn_op op, float *din,
                            const float *dout, const int32_t *argmax,
                            uint32_t n, const nn_conv_desc *d);

/* ---- lp.c: reduced precision ---- */

/* fp32 -> bf16 bits, round to nearest even; NaN -> 0x7fc0 (as torch). */
uint16_t nn_cpu_bf16_from_f32(float x);
/* bf16 bits -> fp32 (exact). */
float nn_cpu_bf16_to_f32(uint16_t h);
/* fp32 -> IEEE binary16 bits, round to nearest even: overflow -> +-inf,
 * subnormals kept, NaN -> a quiet NaN of the same sign (0x7e00). */
uint16_t nn_cpu_f16_from_f32(float x);
/* binary16 bits -> fp32 (exact, subnormals included). */
float nn_cpu_f16_to_f32(uint16_t h);

void nn_cpu_cast(const nn_exec *ex, void *dst, nn_dtype dt, const float *src,
                 size_t len);
void nn_cpu_gemm_lp(const nn_exec *ex, float *c, const void *a, const void *b,
                    nn_dtype dt, int trans_a, int trans_b, int m, int n, int k,
                    float alpha, float beta);
int nn_cpu_lp_ok(const nn_exec *ex, nn_dtype dt);

/* ---- embedding.c: token ops (issue 31) ---- */

void nn_cpu_embedding_forward(const nn_exec *ex, float *out, const int32_t *ids,
                              const float *table, uint32_t n, uint32_t c);
void nn_cpu_embedding_backward(const nn_exec *ex, float *dtable,
                               const float *dout, const int32_t *ids,
                               uint32_t n, uint32_t v, uint32_t c);
void nn_cpu_to_ids(const nn_exec *ex, int32_t *ids, const float *x, size_t len,
                   uint32_t bound, int32_t fallback);
double nn_cpu_xent_ignore(const nn_exec *ex, float *dlogits, uint32_t *counted,
                          const float *logits, const int32_t *targets,
                          uint32_t n, uint32_t v, int32_t ignore_index,
                          float grad_scale, double weight);

/* ---- kvcache.c ---- */

void nn_cpu_kv_store(const nn_exec *ex, float *kc, float *vc, const float *k,
                     const float *v, uint32_t ld, const int32_t *tables,
                     uint32_t tstride, const int32_t *pos, uint32_t n,
                     uint32_t c, uint32_t bt);
void nn_cpu_kv_attention(const nn_exec *ex, float *out, const float *q,
                         uint32_t ldq, const float *kc, const float *vc,
                         const int32_t *tables, uint32_t tstride,
                         const int32_t *pos, uint32_t n, uint32_t h,
                         uint32_t d, uint32_t bt);

/* ---- rowgemm.c ---- */

void nn_cpu_rows_gemm(const nn_exec *ex, float *out, const float *x,
                      const float *w, uint32_t n, uint32_t u, uint32_t k,
                      float beta);

/* ---- attention.c ---- */

void nn_cpu_attention_forward(const nn_exec *ex, float *out, float *att,
                              const float *q, const float *k, const float *v,
                              uint32_t b, uint32_t t, uint32_t h, uint32_t d,
                              uint32_t ld, const nn_attn_mask *m);
void nn_cpu_attention_backward(const nn_exec *ex, float *dq, float *dk,
                               float *dv, float *datt, const float *dout,
                               const float *q, const float *k, const float *v,
                               const float *att, uint32_t b, uint32_t t,
                               uint32_t h, uint32_t d, uint32_t ld,
                               const nn_attn_mask *m);
void nn_cpu_seq_lens(const nn_exec *ex, int32_t *lens, const float *x,
                     uint32_t b, uint32_t t);
void nn_cpu_seq_pool_forward(const nn_exec *ex, float *out, const float *in,
                             const int32_t *lens, uint32_t b, uint32_t t,
                             uint32_t c, nn_seq_pool_mode mode);
void nn_cpu_seq_pool_backward(const nn_exec *ex, float *din, const float *dout,
                              const int32_t *lens, uint32_t b, uint32_t t,
                              uint32_t c, nn_seq_pool_mode mode);

#endif
