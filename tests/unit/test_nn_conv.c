/* test_nn_conv.c - conv2d, maxpool2d, avgpool2d and global_avgpool: spec
 * parsing and errors, forward against naive direct loops, backward against
 * central finite differences, thread-count determinism, and a whole
 * Fashion-MNIST CNN through forward and backward.
 *
 * Gradients are checked through L = sum(R * out) for a fixed random R
 * (summed in double), so dL/dout = R is fed to backward. Convolution and
 * average pooling are linear in each of input, weight and bias, so a
 * central difference is exact up to float rounding of the forward pass; a
 * step of 0.05 keeps that rounding small. Max pooling's inputs are distinct
 * values at least 0.01 apart and its step is 1e-3, so no step changes an
 * argmax. An analytic gradient passes when within 1e-3 relative plus 2e-3
 * absolute of the numeric one (the absolute part covers the forward's float
 * rounding divided by the step); a wrong index, factor or sign misses by
 * far more. Forward results must match the double-precision reference
 * within 1e-5 of the sum of the absolute products that make them. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/nn_internal.h"
#include "testutil.h"

#define N_ROWS 3

/* Uniform in [-scale, scale): testutil's fill on this suite's RNG stream. */
static void fill(float *x, size_t n, uint64_t seed, float scale)
{
    tu_fill_uniform(x, n, seed, 9, scale);
}

/* Distinct values k * 0.01 (k = 0 .. n-1, centered) in a shuffled order. */
static void fill_distinct(float *x, size_t n, uint64_t seed)
{
    ty_rng r;
    ty_rng_seed(&r, seed, 3);
    for (size_t i = 0; i < n; i++)
        x[i] = 0.01f * (float)i - 0.005f * (float)n;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(ty_rng_uniform(&r) * (double)i);
        if (j >= i)
            j = i - 1;
        float t = x[i - 1];
        x[i - 1] = x[j];
        x[j] = t;
    }
}

static ty_status try_build(const char *spec_text, const uint32_t *shape,
                           uint32_t ndim, uint32_t outputs, nn_arch *arch,
                           json_t **norm, ty_err *err)
{
    json_t *spec = json_loads(spec_text, 0, NULL);
    assert_non_null(spec);
    ty_status st = nn_arch_build(spec, shape, ndim, outputs, TY_TASK_REGRESSION,
                                 arch, norm, err);
    json_decref(spec);
    return st;
}

static void build(const char *spec_text, const uint32_t *shape, uint32_t ndim,
                  uint32_t outputs, nn_arch *arch)
{
    ty_err err;
    if (try_build(spec_text, shape, ndim, outputs, arch, NULL, &err) != TY_OK)
        fail_msg("%s: %s (%s)", spec_text, err.msg, err.field);
}

/* A pool of `threads` (1: none) with a work arena sized for arch. */
typedef struct {
    nn_pool *pool;
    nn_exec ex;
} exec_ctx;

static void exec_init(exec_ctx *c, const nn_arch *arch, int threads)
{
    c->pool = threads > 1 ? nn_pool_create(threads) : NULL;
    size_t per = (arch->max_work + 15) / 16 * 16;
    c->ex = (nn_exec){.pool = c->pool, .work_floats = per};
    if (per) {
        c->ex.work = aligned_alloc(64, per * (size_t)threads * sizeof(float));
        assert_non_null(c->ex.work);
    }
}

static void exec_free(exec_ctx *c)
{
    free(c->ex.work);
    nn_pool_destroy(c->pool);
}

/* ---- references: naive direct loops in double ---- */

static void ref_conv(const nn_layer *l, const float *params, const float *in,
                     uint32_t n, double *out, double *absum)
{
    const uint32_t C = l->in.d[0], H = l->in.d[1], W = l->in.d[2];
    const uint32_t F = l->out.d[0], OH = l->out.d[1], OW = l->out.d[2];
    const uint32_t G = l->groups, cg = C / G, fg = F / G;
    const uint32_t kh = l->kernel[0], kw = l->kernel[1];
    const float *bias = l->bias ? params + (size_t)F * cg * kh * kw : NULL;
    for (uint32_t s = 0; s < n; s++)
        for (uint32_t f = 0; f < F; f++)
            for (uint32_t oh = 0; oh < OH; oh++)
                for (uint32_t ow = 0; ow < OW; ow++) {
                    double acc = bias ? bias[f] : 0.0;
                    double ab = bias ? fabs(bias[f]) : 0.0;
                    uint32_t g = f / fg;
                    for (uint32_t c = 0; c < cg; c++)
                        for (uint32_t i = 0; i < kh; i++)
                            for (uint32_t j = 0; j < kw; j++) {
                                int64_t ih = (int64_t)oh * l->stride[0] -
                                             l->pad[0] + i * l->dilation[0];
                                int64_t iw = (int64_t)ow * l->stride[1] -
                                             l->pad[1] + j * l->dilation[1];
                                if (ih < 0 || iw < 0 || ih >= H || iw >= W)
                                    continue;
                                double x =
                                    in[(((size_t)s * C + g * cg + c) * H + ih) *
                                           W +
                                       iw];
                                double w =
                                    params[(((size_t)f * cg + c) * kh + i) *
                                               kw +
                                           j];
                                acc += x * w;
                                ab += fabs(x * w);
                            }
                    size_t o = (((size_t)s * F + f) * OH + oh) * OW + ow;
                    out[o] = acc;
                    absum[o] = ab;
                }
}

/* max (is_max) or count_include_pad average pooling. */
static void ref_pool(const nn_layer *l, int is_max, const float *in, uint32_t n,
                     double *out)
{
    const uint32_t C = l->in.d[0], H = l->in.d[1], W = l->in.d[2];
    const uint32_t OH = l->out.ndim == 3 ? l->out.d[1] : 1;
    const uint32_t OW = l->out.ndim == 3 ? l->out.d[2] : 1;
    for (uint32_t s = 0; s < n; s++)
        for (uint32_t c = 0; c < C; c++)
            for (uint32_t oh = 0; oh < OH; oh++)
                for (uint32_t ow = 0; ow < OW; ow++) {
                    double acc = is_max ? -INFINITY : 0.0;
                    for (uint32_t i = 0; i < l->kernel[0]; i++)
                        for (uint32_t j = 0; j < l->kernel[1]; j++) {
                            int64_t ih =
                                (int64_t)oh * l->stride[0] - l->pad[0] + i;
                            int64_t iw =
                                (int64_t)ow * l->stride[1] - l->pad[1] + j;
                            if (ih < 0 || iw < 0 || ih >= H || iw >= W)
                                continue;
                            double x =
                                in[(((size_t)s * C + c) * H + ih) * W + iw];
                            acc = is_max ? fmax(acc, x) : acc + x;
                        }
                    if (!is_max)
                        acc /= (double)l->kernel[0] * l->kernel[1];
                    out[(((size_t)s * C + c) * OH + oh) * OW + ow] = acc;
                }
}

/* ---- one layer under test ---- */

typedef struct {
    nn_arch arch;
    const nn_layer *l;
    exec_ctx ctx;
    uint32_t n, n_in, n_out;
    float *params, *grads, *in, *out, *scratch, *r, *din;
} layer_case;

static void case_init(layer_case *c, const char *spec, const uint32_t *shape,
                      uint32_t ndim, uint32_t n, int threads, int distinct)
{
    memset(c, 0, sizeof *c);
    /* The layer's output size is the model's output count: learn it from
     * the same layer followed by flatten and dense, then build it alone. */
    char buf[1024];
    snprintf(buf, sizeof buf,
             "%.*s,{\"type\":\"flatten\"},{\"type\":\"dense\","
             "\"units\":1}]}",
             (int)(strlen(spec) - 2), spec);
    nn_arch probe;
    build(buf, shape, ndim, 1, &probe);
    uint64_t numel = nn_shape_numel(&probe.layers[0].out);
    nn_arch_free(&probe);
    build(spec, shape, ndim, (uint32_t)numel, &c->arch);
    assert_int_equal(c->arch.n_layers, 1);
    c->l = &c->arch.layers[0];
    c->n = n;
    c->n_in = (uint32_t)nn_shape_numel(&c->l->in);
    c->n_out = (uint32_t)nn_shape_numel(&c->l->out);
    exec_init(&c->ctx, &c->arch, threads);
    size_t np = c->arch.param_count ? c->arch.param_count : 1;
    c->params = malloc(np * sizeof(float));
    c->grads = calloc(np, sizeof(float));
    c->in = malloc((size_t)n * c->n_in * sizeof(float));
    c->din = malloc((size_t)n * c->n_in * sizeof(float));
    c->out = malloc((size_t)n * c->n_out * sizeof(float));
    c->r = malloc((size_t)n * c->n_out * sizeof(float));
    c->scratch =
        malloc(((size_t)n * c->l->scratch_per_example + 1) * sizeof(float));
    ty_rng init;
    ty_rng_seed(&init, 77, 1);
    nn_arch_init_params(&c->arch, c->params, &init);
    if (distinct)
        fill_distinct(c->in, (size_t)n * c->n_in, 3);
    else
        fill(c->in, (size_t)n * c->n_in, 3, 1.0f);
    fill(c->r, (size_t)n * c->n_out, 4, 1.0f);
}

static void case_free(layer_case *c)
{
    free(c->params);
    free(c->grads);
    free(c->in);
    free(c->din);
    free(c->out);
    free(c->r);
    free(c->scratch);
    exec_free(&c->ctx);
    nn_arch_free(&c->arch);
}

static void case_forward(layer_case *c)
{
    nn_pass p = {
        .be = &nn_backend_cpu, .ex = &c->ctx.ex, .n = c->n, .training = 1};
    c->l->kind->forward(c->l, &p, c->params, c->in, c->out, c->scratch);
}

static void case_backward(layer_case *c, float *din)
{
    nn_pass p = {
        .be = &nn_backend_cpu, .ex = &c->ctx.ex, .n = c->n, .training = 1};
    c->l->kind->backward(c->l, &p, c->params, c->grads, c->in, c->out, c->r,
                         din, c->scratch);
}

static double objective(layer_case *c)
{
    case_forward(c);
    double s = 0;
    for (size_t i = 0; i < (size_t)c->n * c->n_out; i++)
        s += (double)c->r[i] * c->out[i];
    return s;
}

static void assert_grad_close(double analytic, double numeric, const char *what,
                              size_t i)
{
    double diff = fabs(analytic - numeric);
    double scale = fmax(fabs(analytic), fabs(numeric));
    if (diff > 1e-3 * scale + 2e-3)
        fail_msg("%s[%zu]: analytic %.7g vs numeric %.7g", what, i, analytic,
                 numeric);
}

static double fd(layer_case *c, float *x, float eps)
{
    float v = *x;
    *x = v + eps;
    double up = objective(c);
    *x = v - eps;
    double down = objective(c);
    *x = v;
    return (up - down) / (2.0 * eps);
}

/* Checks din, every weight and every bias gradient of the single layer in
 * spec against central differences. */
static void check_backward(const char *spec, const uint32_t *shape,
                           uint32_t ndim, int distinct, float eps)
{
    layer_case c;
    case_init(&c, spec, shape, ndim, N_ROWS, 1, distinct);
    objective(&c);
    case_backward(&c, c.din);
    double norm = 0;
    for (size_t i = 0; i < (size_t)c.n * c.n_in; i++) {
        assert_grad_close(c.din[i], fd(&c, &c.in[i], eps), "din", i);
        norm += fabs(c.din[i]);
    }
    assert_true(norm > 0.1); /* not vacuous */
    float *g = malloc((c.arch.param_count + 1) * sizeof(float));
    memcpy(g, c.grads, c.arch.param_count * sizeof(float));
    for (size_t i = 0; i < c.arch.param_count; i++)
        assert_grad_close(g[i], fd(&c, &c.params[i], eps), "dparam", i);
    if (c.arch.param_count) {
        /* Parameter gradients accumulate, and a backward without din (the
         * first layer's) gives the same parameter gradients. */
        objective(&c);
        case_backward(&c, NULL);
        for (size_t i = 0; i < c.arch.param_count; i++)
            assert_float_equal(c.grads[i], 2.0f * g[i],
                               1e-5 * fabs(g[i]) + 1e-6);
    }
    free(g);
    case_free(&c);
}

static const uint32_t img_2x6x5[] = {2, 6, 5};
static const uint32_t img_2x7x6[] = {2, 7, 6};
static const uint32_t img_1x7x8[] = {1, 7, 8};
static const uint32_t img_4x5x7[] = {4, 5, 7};
static const uint32_t img_4x3x3[] = {4, 3, 3};
static const uint32_t img_3x8x8[] = {3, 8, 8};

static void test_conv_backward_same(void **state)
{
    check_backward("{\"layers\":[{\"type\":\"conv2d\",\"filters\":3,"
                   "\"kernel_size\":3,\"padding\":\"same\"}]}",
                   img_2x6x5, 3, 0, 0.05f);
}

static void test_conv_backward_stride_pad_rect(void **state)
{
    check_backward("{\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
                   "\"kernel_size\":[3,2],\"stride\":2,\"padding\":1}]}",
                   img_2x7x6, 3, 0, 0.05f);
}

static void test_conv_backward_dilation(void **state)
{
    check_backward("{\"layers\":[{\"type\":\"conv2d\",\"filters\":2,"
                   "\"kernel_size\":3,\"dilation\":2,\"padding\":[2,1]}]}",
                   img_1x7x8, 3, 0, 0.05f);
    check_backward("{\"layers\":[{\"type\":\"conv2d\",\"filters\":2,"
                   "\"kernel_size\":[3,5],\"dilation\":[2,1],"
                   "\"padding\":\"same\"}]}",
                   img_1x7x8, 3, 0, 0.05f);
}

static void test_conv_backward_groups(void **state)
{
    check_backward("{\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
                   "\"kernel_size\":[2,3],\"groups\":2,\"stride\":[1,2],"
                   "\"bias\":false}]}",
                   img_4x5x7, 3, 0, 0.05f);
}

static void test_conv_backward_1x1(void **state)
{
    check_backward("{\"layers\":[{\"type\":\"conv2d\",\"filters\":3,"
                   "\"kernel_size\":1}]}",
                   img_4x3x3, 3, 0, 0.05f);
    check_backward("{\"layers\":[{\"type\":\"conv2d\",\"filters\":6,"
                   "\"kernel_size\":1,\"groups\":2}]}",
                   img_4x3x3, 3, 0, 0.05f);
    /* 1x1 with stride: goes through im2col */
    check_backward("{\"layers\":[{\"type\":\"conv2d\",\"filters\":2,"
                   "\"kernel_size\":1,\"stride\":2}]}",
                   img_3x8x8, 3, 0, 0.05f);
}

static void test_maxpool_backward(void **state)
{
    check_backward("{\"layers\":[{\"type\":\"maxpool2d\",\"pool_size\":2}]}",
                   img_2x6x5, 3, 1, 1e-3f);
    /* overlapping windows with padding */
    check_backward("{\"layers\":[{\"type\":\"maxpool2d\",\"pool_size\":3,"
                   "\"stride\":2,\"padding\":1}]}",
                   img_2x7x6, 3, 1, 1e-3f);
    check_backward("{\"layers\":[{\"type\":\"maxpool2d\",\"pool_size\":[3,2],"
                   "\"stride\":[1,3]}]}",
                   img_1x7x8, 3, 1, 1e-3f);
}

static void test_avgpool_backward(void **state)
{
    check_backward("{\"layers\":[{\"type\":\"avgpool2d\",\"pool_size\":2}]}",
                   img_2x6x5, 3, 0, 0.05f);
    check_backward("{\"layers\":[{\"type\":\"avgpool2d\",\"pool_size\":3,"
                   "\"stride\":2,\"padding\":1}]}",
                   img_2x7x6, 3, 0, 0.05f);
    check_backward("{\"layers\":[{\"type\":\"avgpool2d\",\"pool_size\":[2,3],"
                   "\"stride\":[3,1],\"padding\":[1,0]}]}",
                   img_1x7x8, 3, 0, 0.05f);
}

static void test_global_avgpool_backward(void **state)
{
    check_backward("{\"layers\":[{\"type\":\"global_avgpool\"}]}", img_2x6x5, 3,
                   0, 0.05f);
}

/* ---- forward against the references ---- */

static void check_forward(const char *spec, const uint32_t *shape, uint32_t n,
                          int threads)
{
    layer_case c;
    case_init(&c, spec, shape, 3, n, threads, 0);
    /* bias too, so a bias mistake shows */
    fill(c.params, c.arch.param_count, 5, 0.5f);
    case_forward(&c);
    size_t len = (size_t)n * c.n_out;
    double *ref = malloc(len * sizeof(double));
    double *ab = malloc(len * sizeof(double));
    int is_max = c.l->type == NN_LAYER_MAXPOOL2D;
    if (c.l->type == NN_LAYER_CONV2D) {
        ref_conv(c.l, c.params, c.in, n, ref, ab);
    } else {
        ref_pool(c.l, is_max, c.in, n, ref);
        for (size_t i = 0; i < len; i++)
            ab[i] = fabs(ref[i]) * 10.0;
    }
    for (size_t i = 0; i < len; i++)
        if (fabs(c.out[i] - ref[i]) > 1e-5 * ab[i] + 1e-6)
            fail_msg("%s out[%zu] = %.8g, reference %.8g", spec, i, c.out[i],
                     ref[i]);
    /* An inference pass (max pooling keeps no argmax then) gives the same
     * bits. */
    float *train_out = malloc(len * sizeof(float));
    memcpy(train_out, c.out, len * sizeof(float));
    nn_pass p = {.be = &nn_backend_cpu, .ex = &c.ctx.ex, .n = n};
    c.l->kind->forward(c.l, &p, c.params, c.in, c.out, NULL);
    assert_memory_equal(train_out, c.out, len * sizeof(float));
    free(train_out);
    free(ref);
    free(ab);
    case_free(&c);
}

static void test_conv_forward_reference(void **state)
{
    static const uint32_t bench2[] = {32, 14, 14};
    static const uint32_t bench1[] = {1, 28, 28};
    for (int threads = 1; threads <= 2; threads++) {
        check_forward("{\"layers\":[{\"type\":\"conv2d\",\"filters\":3,"
                      "\"kernel_size\":3,\"padding\":\"same\"}]}",
                      img_2x6x5, 3, threads);
        check_forward("{\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
                      "\"kernel_size\":[3,2],\"stride\":2,\"padding\":1}]}",
                      img_2x7x6, 5, threads);
        check_forward("{\"layers\":[{\"type\":\"conv2d\",\"filters\":2,"
                      "\"kernel_size\":3,\"dilation\":2,\"padding\":[2,1],"
                      "\"stride\":[2,3]}]}",
                      img_1x7x8, 2, threads);
        check_forward("{\"layers\":[{\"type\":\"conv2d\",\"filters\":6,"
                      "\"kernel_size\":[2,3],\"groups\":2,\"bias\":false}]}",
                      img_4x5x7, 3, threads);
        check_forward("{\"layers\":[{\"type\":\"conv2d\",\"filters\":6,"
                      "\"kernel_size\":1,\"groups\":2}]}",
                      img_4x3x3, 3, threads);
        check_forward("{\"layers\":[{\"type\":\"conv2d\",\"filters\":32,"
                      "\"kernel_size\":5,\"padding\":\"same\"}]}",
                      bench1, 3, threads);
        check_forward("{\"layers\":[{\"type\":\"conv2d\",\"filters\":64,"
                      "\"kernel_size\":5,\"padding\":\"same\"}]}",
                      bench2, 2, threads);
    }
}

static void test_pool_forward_reference(void **state)
{
    static const uint32_t odd[] = {3, 9, 7};
    for (int threads = 1; threads <= 2; threads++) {
        check_forward("{\"layers\":[{\"type\":\"maxpool2d\",\"pool_size\":2}]}",
                      odd, 4, threads);
        check_forward("{\"layers\":[{\"type\":\"maxpool2d\",\"pool_size\":3,"
                      "\"stride\":2,\"padding\":1}]}",
                      odd, 4, threads);
        check_forward(
            "{\"layers\":[{\"type\":\"maxpool2d\",\"pool_size\":[2,4],"
            "\"stride\":[3,1],\"padding\":[1,2]}]}",
            odd, 2, threads);
        check_forward("{\"layers\":[{\"type\":\"avgpool2d\",\"pool_size\":2}]}",
                      odd, 4, threads);
        check_forward("{\"layers\":[{\"type\":\"avgpool2d\",\"pool_size\":3,"
                      "\"stride\":1,\"padding\":1}]}",
                      odd, 4, threads);
        check_forward(
            "{\"layers\":[{\"type\":\"avgpool2d\",\"pool_size\":[4,2],"
            "\"stride\":[2,5],\"padding\":[2,1]}]}",
            odd, 2, threads);
        check_forward("{\"layers\":[{\"type\":\"global_avgpool\"}]}", odd, 3,
                      threads);
    }
}

static void test_global_avgpool_forward(void **state)
{
    static const uint32_t shape[] = {2, 3, 2};
    layer_case c;
    case_init(&c, "{\"layers\":[{\"type\":\"global_avgpool\"}]}", shape, 3, 2,
              1, 0);
    assert_int_equal(c.l->out.ndim, 1);
    assert_int_equal(c.l->out.d[0], 2);
    for (uint32_t i = 0; i < 24; i++)
        c.in[i] = (float)i;
    case_forward(&c);
    /* plane k holds 6k .. 6k+5: mean 6k + 2.5 */
    for (int k = 0; k < 4; k++)
        assert_float_equal(c.out[k], 6.0f * k + 2.5f, 1e-6);
    case_free(&c);
}

/* Ties go to the first maximum in window order, as in PyTorch; a window
 * clipped by padding starts at its first real element. */
static void test_maxpool_ties(void **state)
{
    static const uint32_t shape[] = {1, 4, 4};
    layer_case c;
    case_init(&c,
              "{\"layers\":[{\"type\":\"maxpool2d\",\"pool_size\":3,"
              "\"stride\":2,\"padding\":1}]}",
              shape, 3, 1, 1, 0);
    assert_int_equal(c.l->out.d[1], 2);
    for (int i = 0; i < 16; i++)
        c.in[i] = 1.0f;
    case_forward(&c);
    for (int i = 0; i < 4; i++)
        c.r[i] = (float)(i + 1);
    case_backward(&c, c.din);
    /* windows: rows [0,2) x cols [0,2); [0,2) x [1,4); [1,4) x [0,2);
     * [1,4) x [1,4): first elements (0,0), (0,1), (1,0), (1,1). */
    static const float want[16] = {1, 2, 0, 0, 3, 4, 0, 0,
                                   0, 0, 0, 0, 0, 0, 0, 0};
    for (int i = 0; i < 16; i++)
        assert_float_equal(c.din[i], want[i], 0);
    case_free(&c);

    case_init(&c, "{\"layers\":[{\"type\":\"maxpool2d\",\"pool_size\":2}]}",
              shape, 3, 1, 1, 0);
    static const float in[16] = {5, 5, 0, 7, 5, 5, 7, 7,
                                 0, 1, 2, 2, 1, 0, 2, 2};
    memcpy(c.in, in, sizeof in);
    case_forward(&c);
    static const float out[4] = {5, 7, 1, 2};
    for (int i = 0; i < 4; i++) {
        assert_float_equal(c.out[i], out[i], 0);
        c.r[i] = (float)(i + 1);
    }
    case_backward(&c, c.din);
    static const float want2[16] = {1, 0, 0, 2, 0, 0, 0, 0,
                                    0, 3, 4, 0, 0, 0, 0, 0};
    for (int i = 0; i < 16; i++)
        assert_float_equal(c.din[i], want2[i], 0);
    case_free(&c);
}

/* ---- spec: normalization and errors ---- */

static void test_conv_spec_normalized(void **state)
{
    static const uint32_t mnist[] = {1, 28, 28};
    nn_arch arch;
    json_t *norm;
    ty_err err;
    assert_int_equal(
        try_build("{\"layers\":[{\"type\":\"conv2d\",\"filters\":32,"
                  "\"kernel_size\":5,\"padding\":\"same\"},"
                  "{\"type\":\"maxpool2d\",\"pool_size\":2},"
                  "{\"type\":\"conv2d\",\"filters\":4,\"kernel_size\":[3,1],"
                  "\"stride\":[2,1],\"padding\":\"valid\",\"groups\":2},"
                  "{\"type\":\"avgpool2d\",\"pool_size\":[2,3],"
                  "\"stride\":1,\"padding\":[1,0]},"
                  "{\"type\":\"global_avgpool\"}]}",
                  mnist, 3, 4, &arch, &norm, &err),
        TY_OK);
    char *text = json_dumps(norm, JSON_COMPACT);
    assert_string_equal(
        text,
        "{\"layers\":[{\"type\":\"conv2d\",\"filters\":32,\"kernel_size\":[5,5]"
        ","
        "\"stride\":[1,1],\"padding\":[2,2],\"dilation\":[1,1],\"groups\":1,"
        "\"bias\":true},"
        "{\"type\":\"maxpool2d\",\"pool_size\":[2,2],\"stride\":[2,2],"
        "\"padding\":[0,0]},"
        "{\"type\":\"conv2d\",\"filters\":4,\"kernel_size\":[3,1],"
        "\"stride\":[2,1],\"padding\":[0,0],\"dilation\":[1,1],\"groups\":2,"
        "\"bias\":true},"
        "{\"type\":\"avgpool2d\",\"pool_size\":[2,3],\"stride\":[1,1],"
        "\"padding\":[1,0]},"
        "{\"type\":\"global_avgpool\"}]}");
    free(text);
    json_decref(norm);
    /* shapes: (32, 28, 28) -> (32, 14, 14) -> (4, 6, 14) -> (4, 7, 12) -> (4) */
    assert_int_equal(arch.layers[0].out.d[1], 28);
    assert_int_equal(arch.layers[1].out.d[1], 14);
    assert_int_equal(arch.layers[2].out.d[0], 4);
    assert_int_equal(arch.layers[2].out.d[1], 6);
    assert_int_equal(arch.layers[2].out.d[2], 14);
    assert_int_equal(arch.layers[3].out.d[1], 7);
    assert_int_equal(arch.layers[3].out.d[2], 12);
    assert_int_equal(arch.output.ndim, 1);
    assert_int_equal(arch.output.d[0], 4);
    /* PyTorch's state dict: 0.weight [32, 1, 5, 5], 0.bias, 2.weight
     * [4, 16, 3, 1], 2.bias */
    assert_int_equal(arch.n_tensors, 4);
    assert_string_equal(arch.tensors[0].name, "0.weight");
    assert_int_equal(arch.tensors[0].desc->ndim, 4);
    assert_int_equal(arch.tensors[0].desc->shape[0], 32);
    assert_int_equal(arch.tensors[0].desc->shape[1], 1);
    assert_int_equal(arch.tensors[0].desc->shape[3], 5);
    assert_string_equal(arch.tensors[2].name, "2.weight");
    assert_int_equal(arch.tensors[2].desc->shape[1], 16);
    assert_int_equal(arch.tensors[2].desc->shape[2], 3);
    assert_int_equal(arch.tensors[2].desc->shape[3], 1);
    assert_int_equal(arch.param_count, 32 * 25 + 32 + 4 * 16 * 3 + 4);
    nn_arch_free(&arch);
}

static void expect_error(const char *spec, const uint32_t *shape, uint32_t ndim,
                         const char *field, const char *msg)
{
    nn_arch arch;
    ty_err err;
    memset(&err, 0, sizeof err);
    assert_int_equal(try_build(spec, shape, ndim, 10, &arch, NULL, &err),
                     TY_EINVAL);
    if (strcmp(err.field, field))
        fail_msg("%s: field '%s', want '%s' (%s)", spec, err.field, field,
                 err.msg);
    if (!strstr(err.msg, msg))
        fail_msg("%s: message '%s' lacks '%s'", spec, err.msg, msg);
}

static void test_spec_errors(void **state)
{
    static const uint32_t img[] = {3, 8, 8};
    static const uint32_t vec[] = {64};
    expect_error("{\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
                 "\"kernel_size\":3,\"stride\":2,\"padding\":\"same\"}]}",
                 img, 3, "model.layers[0].padding", "stride 1");
    expect_error("{\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
                 "\"kernel_size\":2,\"padding\":\"same\"}]}",
                 img, 3, "model.layers[0].padding", "odd kernel");
    expect_error("{\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
                 "\"kernel_size\":9}]}",
                 img, 3, "model.layers[0].kernel_size",
                 "too small for the kernel, which spans 9 x 9");
    expect_error("{\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
                 "\"kernel_size\":[9,1],\"padding\":[0,3]}]}",
                 img, 3, "model.layers[0].kernel_size",
                 "input (8 x 8, padding [0, 3]) is too small for the kernel, "
                 "which spans 9 x 1");
    expect_error("{\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
                 "\"kernel_size\":3,\"dilation\":4}]}",
                 img, 3, "model.layers[0].kernel_size", "too small");
    expect_error("{\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
                 "\"kernel_size\":3,\"groups\":2}]}",
                 img, 3, "model.layers[0].groups", "divide");
    expect_error("{\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
                 "\"kernel_size\":3,\"groups\":3}]}",
                 img, 3, "model.layers[0].filters", "multiple of groups");
    expect_error("{\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
                 "\"kernel_size\":3}]}",
                 vec, 1, "model.layers[0]", "needs (C, H, W) input");
    expect_error("{\"layers\":[{\"type\":\"maxpool2d\",\"pool_size\":2}]}", vec,
                 1, "model.layers[0]", "needs (C, H, W) input");
    expect_error("{\"layers\":[{\"type\":\"global_avgpool\"}]}", vec, 1,
                 "model.layers[0]", "needs (C, H, W) input");
    expect_error("{\"layers\":[{\"type\":\"conv2d\",\"kernel_size\":3}]}", img,
                 3, "model.layers[0].filters", "filters");
    expect_error("{\"layers\":[{\"type\":\"conv2d\",\"filters\":0,"
                 "\"kernel_size\":3}]}",
                 img, 3, "model.layers[0].filters", "between 1 and 65536");
    expect_error("{\"layers\":[{\"type\":\"conv2d\",\"filters\":4}]}", img, 3,
                 "model.layers[0].kernel_size", "required");
    expect_error("{\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
                 "\"kernel_size\":[3,0]}]}",
                 img, 3, "model.layers[0].kernel_size", "between 1");
    expect_error("{\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
                 "\"kernel_size\":[3,3,3]}]}",
                 img, 3, "model.layers[0].kernel_size", "[h, w] pair");
    expect_error("{\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
                 "\"kernel_size\":3,\"padding\":\"full\"}]}",
                 img, 3, "model.layers[0].padding", "\"same\", \"valid\"");
    expect_error("{\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
                 "\"kernel_size\":3,\"padding\":-1}]}",
                 img, 3, "model.layers[0].padding", "between 0");
    expect_error("{\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
                 "\"kernel_size\":3,\"stride\":0}]}",
                 img, 3, "model.layers[0].stride", "between 1");
    expect_error("{\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
                 "\"kernel_size\":3,\"units\":3}]}",
                 img, 3, "model.layers[0].units", "");
    expect_error("{\"layers\":[{\"type\":\"maxpool2d\",\"pool_size\":2,"
                 "\"padding\":2}]}",
                 img, 3, "model.layers[0].padding", "at most half");
    expect_error("{\"layers\":[{\"type\":\"avgpool2d\",\"pool_size\":10}]}",
                 img, 3, "model.layers[0].pool_size", "too small");
    expect_error("{\"layers\":[{\"type\":\"maxpool2d\"}]}", img, 3,
                 "model.layers[0].pool_size", "required");
    /* dense straight after a conv asks for a flatten */
    expect_error("{\"layers\":[{\"type\":\"conv2d\",\"filters\":4,"
                 "\"kernel_size\":3},{\"type\":\"dense\",\"units\":10}]}",
                 img, 3, "model.layers[1]", "flatten");
}

/* ---- thread-count determinism ---- */

typedef struct {
    float *out, *din, *grads;
} run_result;

static void run_conv_net(int threads, uint32_t n, run_result *res)
{
    static const uint32_t shape[] = {3, 12, 11};
    layer_case c;
    case_init(&c,
              "{\"layers\":[{\"type\":\"conv2d\",\"filters\":8,"
              "\"kernel_size\":3,\"padding\":\"same\",\"groups\":1}]}",
              shape, 3, n, threads, 0);
    case_forward(&c);
    case_backward(&c, c.din);
    size_t no = (size_t)n * c.n_out, ni = (size_t)n * c.n_in;
    res->out = malloc(no * sizeof(float));
    res->din = malloc(ni * sizeof(float));
    res->grads = malloc(c.arch.param_count * sizeof(float));
    memcpy(res->out, c.out, no * sizeof(float));
    memcpy(res->din, c.din, ni * sizeof(float));
    memcpy(res->grads, c.grads, c.arch.param_count * sizeof(float));
    case_free(&c);
}

static void free_result(run_result *r)
{
    free(r->out);
    free(r->din);
    free(r->grads);
}

static void test_thread_determinism(void **state)
{
    const uint32_t n = 7;
    const size_t no = (size_t)n * 8 * 12 * 11, ni = (size_t)n * 3 * 12 * 11;
    const size_t np = 8 * 27 + 8;
    run_result one, two, again;
    run_conv_net(1, n, &one);
    run_conv_net(2, n, &two);
    run_conv_net(2, n, &again);
    /* the same thread count: the same bits */
    assert_memory_equal(two.out, again.out, no * sizeof(float));
    assert_memory_equal(two.din, again.din, ni * sizeof(float));
    assert_memory_equal(two.grads, again.grads, np * sizeof(float));
    /* another count: the same up to float rounding (only the weight
     * gradient's reduction order is meant to differ) */
    for (size_t i = 0; i < no; i++)
        assert_float_equal(one.out[i], two.out[i],
                           1e-6 * fabs(one.out[i]) + 1e-6);
    for (size_t i = 0; i < ni; i++)
        assert_float_equal(one.din[i], two.din[i],
                           1e-6 * fabs(one.din[i]) + 1e-6);
    for (size_t i = 0; i < np; i++)
        assert_float_equal(one.grads[i], two.grads[i],
                           1e-5 * fabs(one.grads[i]) + 1e-5);
    free_result(&one);
    free_result(&two);
    free_result(&again);
}

/* ---- whole networks ---- */

static const char *const fashion_cnn =
    "{\"layers\":["
    "{\"type\":\"conv2d\",\"filters\":32,\"kernel_size\":5,\"padding\":"
    "\"same\"},"
    "{\"type\":\"relu\"},"
    "{\"type\":\"maxpool2d\",\"pool_size\":2},"
    "{\"type\":\"conv2d\",\"filters\":64,\"kernel_size\":5,\"padding\":"
    "\"same\"},"
    "{\"type\":\"relu\"},"
    "{\"type\":\"maxpool2d\",\"pool_size\":2},"
    "{\"type\":\"flatten\"},"
    "{\"type\":\"dense\",\"units\":1024},"
    "{\"type\":\"relu\"},"
    "{\"type\":\"dropout\",\"rate\":0.4},"
    "{\"type\":\"dense\",\"units\":10}]}";

/* The benchmark CNN builds, and a training step (forward, loss, backward)
 * on two threads runs clean (under ASan in the Sanitize build) and gives
 * finite, non-zero gradients in every tensor. */
static void test_fashion_cnn_step(void **state)
{
    static const uint32_t mnist[] = {1, 28, 28};
    json_t *spec = json_loads(fashion_cnn, 0, NULL);
    nn_arch arch;
    ty_err err;
    assert_int_equal(nn_arch_build(spec, mnist, 3, 10, TY_TASK_CLASSIFICATION,
                                   &arch, NULL, &err),
                     TY_OK);
    json_decref(spec);
    assert_int_equal(arch.param_count,
                     832 + 51264 + 3136 * 1024 + 1024 + 10250);
    assert_int_equal(arch.layers[6].out.d[0], 3136);
    const uint32_t n = 9;
    nn_workspace *ws = nn_workspace_create_for(&arch, 16, 1);
    assert_non_null(ws);
    nn_pool *pool = nn_pool_create(2);
    assert_int_equal(nn_workspace_set_pool(ws, pool), TY_OK);
    float *params = malloc(arch.param_count * sizeof(float));
    float *grads = calloc(arch.param_count, sizeof(float));
    ty_rng rng;
    ty_rng_seed(&rng, 5, 5);
    nn_arch_init_params(&arch, params, &rng);
    fill(ws->act[0], (size_t)n * 784, 8, 1.0f);
    int32_t labels[9];
    for (uint32_t i = 0; i < n; i++)
        labels[i] = (int32_t)(i % 10);
    nn_forward(&arch, params, ws, n, 1, &rng);
    double loss = nn_loss(&arch, ws, n, labels, NULL, NULL, 1);
    assert_true(isfinite(loss) && loss > 0);
    nn_backward(&arch, params, grads, ws, n);
    /* Inference in its own workspace (activations ping-pong, one shared
     * scratch region) matches an eval pass in the training workspace. */
    nn_workspace *iws = nn_workspace_create_for(&arch, 16, 0);
    assert_non_null(iws);
    assert_int_equal(nn_workspace_set_pool(iws, pool), TY_OK);
    memcpy(iws->act[0], ws->act[0], (size_t)n * 784 * sizeof(float));
    const float *eval_out = nn_forward(&arch, params, ws, n, 0, NULL);
    const float *infer_out = nn_forward(&arch, params, iws, n, 0, NULL);
    assert_memory_equal(eval_out, infer_out, (size_t)n * 10 * sizeof(float));
    nn_workspace_destroy(iws);
    for (uint32_t t = 0; t < arch.n_tensors; t++) {
        const nn_named_tensor *nt = &arch.tensors[t];
        double norm = 0;
        for (uint64_t i = 0; i < nt->desc->numel; i++) {
            assert_true(isfinite(grads[nt->offset + i]));
            norm += fabs(grads[nt->offset + i]);
        }
        if (!(norm > 0))
            fail_msg("%s has a zero gradient", nt->name);
    }
    free(params);
    free(grads);
    nn_workspace_destroy(ws);
    nn_pool_destroy(pool);
    nn_arch_free(&arch);
}

/* A small all-image network's parameter gradients through nn_backward
 * (layers handing gradients to each other, the first conv skipping its
 * data gradient) against central differences of nn_loss. */
static void test_small_net_gradients(void **state)
{
    static const uint32_t shape[] = {2, 10, 12};
    json_t *spec = json_loads(
        "{\"layers\":["
        "{\"type\":\"conv2d\",\"filters\":4,\"kernel_size\":3,\"padding\":1},"
        "{\"type\":\"avgpool2d\",\"pool_size\":2},"
        "{\"type\":\"conv2d\",\"filters\":4,\"kernel_size\":[2,3],"
        "\"groups\":2,\"stride\":[1,2]},"
        "{\"type\":\"maxpool2d\",\"pool_size\":2,\"stride\":1},"
        "{\"type\":\"global_avgpool\"},"
        "{\"type\":\"dense\",\"units\":3}]}",
        0, NULL);
    nn_arch arch;
    ty_err err;
    if (nn_arch_build(spec, shape, 3, 3, TY_TASK_CLASSIFICATION, &arch, NULL,
                      &err) != TY_OK)
        fail_msg("%s", err.msg);
    json_decref(spec);
    const uint32_t n = 4;
    nn_workspace *ws = nn_workspace_create_for(&arch, n, 1);
    assert_non_null(ws);
    nn_pool *pool = nn_pool_create(2);
    assert_int_equal(nn_workspace_set_pool(ws, pool), TY_OK);
    float *params = malloc(arch.param_count * sizeof(float));
    float *grads = calloc(arch.param_count, sizeof(float));
    ty_rng rng;
    ty_rng_seed(&rng, 6, 6);
    nn_arch_init_params(&arch, params, &rng);
    float *x = malloc((size_t)n * 240 * sizeof(float));
    fill(x, (size_t)n * 240, 9, 2.0f);
    int32_t labels[4] = {0, 2, 1, 2};
    memcpy(ws->act[0], x, (size_t)n * 240 * sizeof(float));
    nn_forward(&arch, params, ws, n, 1, &rng);
    nn_loss(&arch, ws, n, labels, NULL, NULL, 1);
    nn_backward(&arch, params, grads, ws, n);
    const float eps = 1e-3f;
    size_t checked = 0;
    for (size_t i = 0; i < arch.param_count; i++) {
        double l[2];
        float w = params[i];
        for (int k = 0; k < 2; k++) {
            params[i] = w + (k ? -eps : eps);
            memcpy(ws->act[0], x, (size_t)n * 240 * sizeof(float));
            nn_forward(&arch, params, ws, n, 1, &rng);
            l[k] = nn_loss(&arch, ws, n, labels, NULL, NULL, 0) / n;
        }
        params[i] = w;
        double num = (l[0] - l[1]) / (2.0 * eps);
        /* mean cross-entropy: gradients are ~1e-2; float loss rounding
         * over a step of 1e-3 gives ~1e-4 of noise */
        if (fabs(grads[i] - num) > 2e-2 * fabs(num) + 3e-4)
            fail_msg("param %zu: analytic %.6g vs numeric %.6g", i, grads[i],
                     num);
        checked++;
    }
    assert_true(checked > 100);
    free(x);
    free(params);
    free(grads);
    nn_workspace_destroy(ws);
    nn_pool_destroy(pool);
    nn_arch_free(&arch);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_backward_same),
        cmocka_unit_test(test_conv_backward_stride_pad_rect),
        cmocka_unit_test(test_conv_backward_dilation),
        cmocka_unit_test(test_conv_backward_groups),
        cmocka_unit_test(test_conv_backward_1x1),
        cmocka_unit_test(test_maxpool_backward),
        cmocka_unit_test(test_avgpool_backward),
        cmocka_unit_test(test_global_avgpool_backward),
        cmocka_unit_test(test_conv_forward_reference),
        cmocka_unit_test(test_pool_forward_reference),
        cmocka_unit_test(test_global_avgpool_forward),
        cmocka_unit_test(test_maxpool_ties),
        cmocka_unit_test(test_conv_spec_normalized),
        cmocka_unit_test(test_spec_errors),
        cmocka_unit_test(test_thread_determinism),
        cmocka_unit_test(test_fashion_cnn_step),
        cmocka_unit_test(test_small_net_gradients),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
