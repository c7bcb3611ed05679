/* nn_fd.h - finite-difference gradient checks of whole (small) networks
 * built from a spec, for the engine's layer tests.
 *
 * The checked scalar is L = sum(R * out) for a fixed random R, so backward
 * is fed dL/dout = R through nn_seq_backward with the input gradient
 * requested. Passes run in training mode; batchnorm's running statistics
 * move on every forward but do not change a training output. A gradient
 * passes when it is within 1% of the central difference, plus an absolute
 * floor that covers float rounding in the forward pass. */
#ifndef TY_TEST_NN_FD_H
#define TY_TEST_NN_FD_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/nn_internal.h"
#include "testutil.h"

/* Uniform in [-scale, scale): testutil's fill on the checks' RNG stream. */
static inline void fd_fill(float *x, size_t n, uint64_t seed, float scale)
{
    tu_fill_uniform(x, n, seed, 9, scale);
}

/* Builds spec for input shape (regression, outputs values); fails the test
 * with the error message otherwise. */
static inline void fd_build_arch(const char *spec_text, const uint32_t *shape,
                                 uint32_t ndim, uint32_t outputs, nn_arch *arch)
{
    json_t *spec = json_loads(spec_text, 0, NULL);
    assert_non_null(spec);
    ty_err err;
    ty_status st = nn_arch_build(spec, shape, ndim, outputs, TY_TASK_REGRESSION,
                                 arch, NULL, &err);
    json_decref(spec);
    if (st != TY_OK)
        fail_msg("%s (%s)", err.msg, err.field);
}

typedef struct {
    nn_arch arch;
    nn_workspace *ws;
    float *state; /* parameters, then buffers */
    float *grads, *x, *r, *din;
    uint32_t n;
    size_t nx, ny;
} fd_case;

static inline void fd_setup(fd_case *c, const char *spec, const uint32_t *shape,
                            uint32_t ndim, uint32_t outputs, uint32_t n,
                            uint64_t seed)
{
    memset(c, 0, sizeof *c);
    fd_build_arch(spec, shape, ndim, outputs, &c->arch);
    c->n = n;
    c->ws = nn_workspace_create_for(&c->arch, n, 1);
    assert_non_null(c->ws);
    c->nx = (size_t)n * nn_shape_numel(&c->arch.input);
    c->ny = (size_t)n * nn_shape_numel(&c->arch.output);
    size_t ns = c->arch.param_count + c->arch.buffer_count + 1;
    c->state = malloc(ns * sizeof(float));
    c->grads = calloc(c->arch.param_count + 1, sizeof(float));
    c->x = malloc(c->nx * sizeof(float));
    c->din = malloc(c->nx * sizeof(float));
    c->r = malloc(c->ny * sizeof(float));
    assert_true(c->state && c->grads && c->x && c->din && c->r);
    ty_rng init;
    ty_rng_seed(&init, seed, 1);
    nn_arch_init_params(&c->arch, c->state, &init);
    /* Move parameters off their initial values (batchnorm's weight 1 and
     * bias 0 would hide a misplaced factor). */
    for (uint64_t i = 0; i < c->arch.param_count; i++)
        c->state[i] += 0.3f * (2.0f * ty_rng_uniform(&init) - 1.0f);
    fd_fill(c->x, c->nx, seed + 1, 1.5f);
    fd_fill(c->r, c->ny, seed + 2, 1.0f);
}

/* Keeps inputs at least gap away from 0 (kinks of relu-like layers). */
static inline void fd_push_from_zero(fd_case *c, float gap)
{
    for (size_t i = 0; i < c->nx; i++)
        if (fabsf(c->x[i]) < gap)
            c->x[i] += c->x[i] < 0 ? -gap : gap;
}

static inline void fd_free(fd_case *c)
{
    nn_workspace_destroy(c->ws);
    nn_arch_free(&c->arch);
    free(c->state);
    free(c->grads);
    free(c->x);
    free(c->din);
    free(c->r);
}

/* The training-mode output for c->x (in the workspace's last activation);
 * dropout draws the same masks on every call. */
static inline const float *fd_forward(fd_case *c)
{
    ty_rng rng;
    ty_rng_seed(&rng, 1234, 5);
    memcpy(c->ws->act[0], c->x, c->nx * sizeof(float));
    return nn_forward(&c->arch, c->state, c->ws, c->n, 1, &rng);
}

static inline double fd_objective(fd_case *c)
{
    const float *y = fd_forward(c);
    double s = 0;
    for (size_t i = 0; i < c->ny; i++)
        s += (double)c->r[i] * y[i];
    return s;
}

/* Forward then backward: c->din and c->grads (zeroed first) get dL/dx and
 * dL/dparams. */
static inline void fd_backward(fd_case *c)
{
    fd_forward(c);
    memset(c->grads, 0, c->arch.param_count * sizeof(float));
    nn_pass p = {.be = c->arch.be,
                 .ex = c->ws->ex,
                 .n = c->n,
                 .training = 1,
                 .buffers = c->state + c->arch.param_count};
    nn_seq_backward(&c->arch, &p, c->state, c->grads, c->ws->act,
                    c->ws->scratch, c->r, c->ws->grad[0], c->ws->grad[1],
                    c->din);
}

static inline double fd_central(fd_case *c, float *v, float eps)
{
    float keep = *v;
    *v = keep + eps;
    double up = fd_objective(c);
    *v = keep - eps;
    double down = fd_objective(c);
    *v = keep;
    return (up - down) / (2.0 * eps);
}

/* Checks dL/dx and every trainable tensor's gradient; each of them must be
 * non-zero somewhere (the check is not vacuous). */
static inline void fd_check(fd_case *c, float eps, double abs_tol)
{
    fd_backward(c);
    double norm = 0;
    for (size_t i = 0; i < c->nx; i++) {
        tu_assert_grad_close(c->din[i], fd_central(c, &c->x[i], eps), abs_tol,
                             "din", i);
        norm += fabs(c->din[i]);
    }
    assert_true(norm > 1e-3);
    for (uint32_t t = 0; t < c->arch.n_tensors; t++) {
        const nn_named_tensor *nt = &c->arch.tensors[t];
        if (nt->desc->buffer)
            continue;
        double tn = 0;
        for (uint64_t k = 0; k < nt->desc->numel; k++) {
            size_t i = (size_t)(nt->offset + k);
            tu_assert_grad_close(c->grads[i], fd_central(c, &c->state[i], eps),
                                 abs_tol, nt->name, (size_t)k);
            tn += fabs(c->grads[i]);
        }
        if (!(tn > 1e-4))
            fail_msg("%s: gradient is zero", nt->name);
    }
}

#endif
