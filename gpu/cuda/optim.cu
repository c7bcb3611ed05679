/*
 * optim.cu - the CUDA backend's optimizer steps: SGD (momentum,
 * Nesterov, weight decay) and Adam/AdamW, as torch.optim, one thread per
 * parameter.
 *
 * Each update is written with the round-to-nearest intrinsics (__fmul_rn,
 * __fadd_rn, ...), which nvcc never fuses into FMAs, in exactly the order
 * of IEEE operations of models/cpu/optim.c's sgd_serial and adam_one (the CPU
 * builds with -std=c11, so no contraction there either): given the same
 * inputs, a step gives the CPU's bits.
 */
#include "gpu/cuda/cuda_internal.h"

#define GRID_STRIDE(i, len)                                                   \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (len); \
         i += (size_t)gridDim.x * blockDim.x)

/* The step's hyperparameters, by value (nn_optim_args is the host's). */
typedef struct {
    float lr, wd, momentum;
    float beta1, beta2, eps, one_minus_beta1, one_minus_beta2;
    float step_size, bias_correction2_sqrt, decay_scale;
    int nesterov, decoupled;
    const float *dyn; /* nn_optim_args.dyn: device memory, or NULL */
} optim_dev;

/* This step's lr, step_size, bias_correction2_sqrt and decay_scale: read
 * from dyn when the kernel runs (a replayed graph keeps the arguments of
 * its capture), else the arguments'. */
__device__ __forceinline__ void optim_dyn(optim_dev *o)
{
    if (!o->dyn)
        return;
    o->lr = o->dyn[NN_OPTIM_DYN_LR];
    o->step_size = o->dyn[NN_OPTIM_DYN_STEP_SIZE];
    o->bias_correction2_sqrt = o->dyn[NN_OPTIM_DYN_BIAS_CORRECTION2_SQRT];
    o->decay_scale = o->dyn[NN_OPTIM_DYN_DECAY_SCALE];
}

static optim_dev optim_of(const nn_optim_args *s)
{
    optim_dev o;
    o.lr = s->lr;
    o.wd = s->weight_decay;
    o.momentum = s->momentum;
    o.beta1 = s->beta1;
    o.beta2 = s->beta2;
    o.eps = s->eps;
    o.one_minus_beta1 = s->one_minus_beta1;
    o.one_minus_beta2 = s->one_minus_beta2;
    o.step_size = s->step_size;
    o.bias_correction2_sqrt = s->bias_correction2_sqrt;
    o.decay_scale = s->decay_scale;
    o.nesterov = s->nesterov;
    o.decoupled = s->decoupled;
    o.dyn = s->dyn;
    return o;
}

// param, grad, buf (len); buf NULL when momentum is 0
static __global__ void sgd_kernel(float *param, float *grad, float *buf,
                                  size_t len, optim_dev o)
{
    optim_dyn(&o);
    GRID_STRIDE(i, len)
    {
        float p = param[i];
        float g = __fadd_rn(grad[i], __fmul_rn(o.wd, p));
        if (buf) {
            float b = __fadd_rn(__fmul_rn(o.momentum, buf[i]), g);
            buf[i] = b;
            /* nesterov: p -= lr (g + momentum b); else p -= lr b */
            float step =
                o.nesterov ? __fadd_rn(g, __fmul_rn(o.momentum, b)) : b;
            param[i] = __fsub_rn(p, __fmul_rn(o.lr, step));
        } else {
            param[i] = __fsub_rn(p, __fmul_rn(o.lr, g));
        }
        grad[i] = 0.0f;
    }
}

void nn_cuda_sgd(const nn_exec *ex, float *param, float *grad, float *buf,
                 size_t len, const nn_optim_args *s)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !len)
        return;
    sgd_kernel<<<nn_cuda_grid(len), NN_CUDA_THREADS, 0, x->stream>>>(
        param, grad, buf, len, optim_of(s));
    (void)nn_cuda_launched(ex, "sgd_kernel");
}

/* adam_one of models/cpu/optim.c: p *= decay_scale (AdamW); g = grad + wd p;
 * m = b1 m + (1-b1) g; v = b2 v + (1-b2) g g; p -= step m / (sqrt(v) / bc2
 * + eps). */
static __global__ void adam_kernel(float *param, float *grad, float *m,
                                   float *v, size_t len, optim_dev o)
{
    optim_dyn(&o);
    GRID_STRIDE(i, len)
    {
        float p = o.decoupled ? __fmul_rn(param[i], o.decay_scale) : param[i];
        float g = __fadd_rn(grad[i], __fmul_rn(o.wd, p));
        float mi = __fadd_rn(__fmul_rn(o.beta1, m[i]),
                             __fmul_rn(o.one_minus_beta1, g));
        float vi = __fadd_rn(__fmul_rn(o.beta2, v[i]),
                             __fmul_rn(__fmul_rn(o.one_minus_beta2, g), g));
        m[i] = mi;
        v[i] = vi;
        grad[i] = 0.0f;
        float den = __fadd_rn(
            __fdiv_rn(__fsqrt_rn(vi), o.bias_correction2_sqrt), o.eps);
        param[i] = __fsub_rn(p, __fdiv_rn(__fmul_rn(o.step_size, mi), den));
    }
}

void nn_cuda_adam(const nn_exec *ex, float *param, float *grad, float *m,
                  float *v, size_t len, const nn_optim_args *s)
{
    nn_cuda_ctx *x = nn_cuda_begin(ex);
    if (!x || !len)
        return;
    adam_kernel<<<nn_cuda_grid(len), NN_CUDA_THREADS, 0, x->stream>>>(
        param, grad, m, v, len, optim_of(s));
    (void)nn_cuda_launched(ex, "adam_kernel");
}
