/*
 * cudnn_ops_check.cu - a standalone check of cudnn_ops.cu against the CPU
 * reference (nn_backend_cpu), for use until backend_cuda.cu and the CUDA
 * test wiring exist; not built by CMake. It makes its own minimal context
 * (stream + cuDNN handle) and stands in for nn_cuda_fail.
 *
 *   nvcc -std=c++17 -arch=sm_90 -I. gpu/cuda/cudnn_ops.cu \
 *        gpu/cuda/cudnn_ops_check.cu build/libtrainyard_core.a \
 *        -lcudnn -lopenblas -ljansson -lmicrohttpd -lsqlite3 -lcurl -lz -lm \
 *        -o /tmp/cudnn_ops_check && /tmp/cudnn_ops_check
 *
 * Exit 0 pass, 1 fail, 77 skipped (no device). Pooling and batch norm must
 * equal the CPU bit for bit; convolution within a float tolerance; every
 * CUDA result must repeat bit for bit.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* models/backend.h has no extern "C" of its own; nn_backend_cpu is C. */
extern "C" {
#include "models/backend.h"
}
#include "gpu/cuda/cuda_internal.h"
#include "gpu/cuda/cudnn_ops.h"

extern "C" void nn_cuda_fail(const nn_exec *ex, const char *call,
                             const char *detail)
{
    nn_cuda_ctx *c = nn_cuda_ctx_of(ex);
    if (c->failed)
        return;
    c->failed = 1;
    snprintf(c->what, sizeof c->what, "%s: %s", call, detail);
}

static int failures;
static nn_cuda_ctx ctx;
static nn_exec gex;

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (!(cond)) {                                                        \
            failures++;                                                       \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);              \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
        }                                                                     \
    } while (0)

static uint64_t rng_state = 88172645463325252ull;
static float frand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static float *host_rand(size_t n)
{
    float *x = (float *)malloc(n * sizeof *x + 4);
    for (size_t i = 0; i < n; i++)
        x[i] = frand();
    return x;
}

static void *dev_copy(const void *h, size_t bytes)
{
    void *d = NULL;
    cudaMalloc(&d, bytes ? bytes : 4);
    if (h)
        cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    else
        cudaMemset(d, 0, bytes ? bytes : 4);
    return d;
}

static void *host_copy(const void *d, size_t bytes)
{
    void *h = malloc(bytes + 4);
    cudaStreamSynchronize(ctx.stream);
    cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost);
    return h;
}

static void expect_same(const char *what, const void *a, const void *b,
                        size_t bytes)
{
    CHECK(memcmp(a, b, bytes) == 0, "%s differs from the reference bits",
          what);
}

static void expect_close(const char *what, const float *got,
                         const float *want, size_t n, float tol)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / (1.0 + fabs(want[i]));
        if (!(e <= worst))
            worst = e;
    }
    CHECK(worst <= tol, "%s: worst relative error %g > %g", what, worst,
          (double)tol);
}

static nn_conv_desc conv_desc(uint32_t c, uint32_t h, uint32_t w,
                              uint32_t f, uint32_t k, uint32_t stride,
                              uint32_t pad, uint32_t dil, uint32_t groups)
{
    nn_conv_desc d;
    memset(&d, 0, sizeof d);
    d.in_c = c, d.in_h = h, d.in_w = w, d.out_c = f;
    d.kernel[0] = d.kernel[1] = k;
    d.stride[0] = d.stride[1] = stride;
    d.pad[0] = d.pad[1] = pad;
    d.dilation[0] = d.dilation[1] = dil;
    d.groups = groups;
    d.out_h = (h + 2 * pad - dil * (k - 1) - 1) / stride + 1;
    d.out_w = (w + 2 * pad - dil * (k - 1) - 1) / stride + 1;
    return d;
}

static void check_conv(const char *name, uint32_t n, nn_conv_desc d,
                       int with_bias, int with_din)
{
    const size_t in_n = (size_t)n * d.in_c * d.in_h * d.in_w;
    const size_t out_n = (size_t)n * d.out_c * d.out_h * d.out_w;
    const size_t w_n = (size_t)d.out_c * (d.in_c / d.groups) * d.kernel[0] *
                       d.kernel[1];
    float *x = host_rand(in_n), *w = host_rand(w_n), *b = host_rand(d.out_c);
    float *dy = host_rand(out_n);
    float *dw0 = host_rand(w_n), *db0 = host_rand(d.out_c);
    /* CPU reference */
    size_t cw = nn_backend_cpu.conv2d_work(&d);
    nn_exec cex;
    memset(&cex, 0, sizeof cex);
    cex.work = (float *)malloc((cw ? cw : 1) * sizeof(float));
    cex.work_floats = cw;
    float *ry = (float *)malloc(out_n * 4), *rdx = (float *)malloc(in_n * 4);
    float *rdw = (float *)malloc(w_n * 4), *rdb = (float *)malloc(d.out_c * 4);
    memcpy(rdw, dw0, w_n * 4);
    memcpy(rdb, db0, d.out_c * 4);
    nn_backend_cpu.conv2d_forward(&cex, ry, x, w, with_bias ? b : NULL, n,
                                  &d);
    nn_backend_cpu.conv2d_backward(&cex, with_din ? rdx : NULL, rdw,
                                   with_bias ? rdb : NULL, dy, x, w, n, &d);
    /* CUDA, twice */
    size_t work = nn_cuda_conv2d_work(&d);
    float *dwork = (float *)dev_copy(NULL, work * 4);
    gex.work = dwork;
    gex.work_floats = work;
    float *gx = (float *)dev_copy(x, in_n * 4), *gw = (float *)dev_copy(w, w_n * 4);
    float *gb = (float *)dev_copy(b, d.out_c * 4);
    float *gdy = (float *)dev_copy(dy, out_n * 4);
    float *prev[4] = {0};
    for (int rep = 0; rep < 2; rep++) {
        float *gy = (float *)dev_copy(NULL, out_n * 4);
        float *gdx = (float *)dev_copy(NULL, in_n * 4);
        float *gdw = (float *)dev_copy(dw0, w_n * 4);
        float *gdb = (float *)dev_copy(db0, d.out_c * 4);
        nn_cuda_conv2d_forward(&gex, gy, gx, gw, with_bias ? gb : NULL, n, &d);
        nn_cuda_conv2d_backward(&gex, with_din ? gdx : NULL, gdw,
                                with_bias ? gdb : NULL, gdy, gx, gw, n, &d);
        float *hy = (float *)host_copy(gy, out_n * 4);
        float *hdx = (float *)host_copy(gdx, in_n * 4);
        float *hdw = (float *)host_copy(gdw, w_n * 4);
        float *hdb = (float *)host_copy(gdb, d.out_c * 4);
        CHECK(!ctx.failed, "%s: %s", name, ctx.what);
        if (ctx.failed)
            exit(1);
        char what[96];
        snprintf(what, sizeof what, "%s out", name);
        expect_close(what, hy, ry, out_n, 1e-5f);
        snprintf(what, sizeof what, "%s dweight", name);
        expect_close(what, hdw, rdw, w_n, 1e-4f);
        if (with_bias) {
            snprintf(what, sizeof what, "%s dbias", name);
            expect_close(what, hdb, rdb, d.out_c, 1e-4f);
        }
        if (with_din) {
            snprintf(what, sizeof what, "%s din", name);
            expect_close(what, hdx, rdx, in_n, 1e-5f);
        }
        if (rep == 1) {
            snprintf(what, sizeof what, "%s repeat", name);
            expect_same(what, hy, prev[0], out_n * 4);
            expect_same(what, hdx, prev[1], in_n * 4);
            expect_same(what, hdw, prev[2], w_n * 4);
            expect_same(what, hdb, prev[3], d.out_c * 4);
        }
        prev[0] = hy, prev[1] = hdx, prev[2] = hdw, prev[3] = hdb;
        cudaFree(gy), cudaFree(gdx), cudaFree(gdw), cudaFree(gdb);
    }
    printf("conv %-28s work %zu floats\n", name, work);
}

static void check_pool(const char *name, nn_op op, uint32_t n,
                       nn_conv_desc d)
{
    const size_t in_n = (size_t)n * d.in_c * d.in_h * d.in_w;
    const size_t out_n = (size_t)n * d.out_c * d.out_h * d.out_w;
    float *x = host_rand(in_n), *dy = host_rand(out_n);
    if (op == NN_OP_MAXPOOL2D && in_n > 8) {   /* ties and a NaN */
        x[1] = x[0];
        x[in_n / 2] = NAN;
    }
    float *ry = (float *)malloc(out_n * 4), *rdx = (float *)malloc(in_n * 4);
    int32_t *ra = (int32_t *)malloc(out_n * 4);
    nn_backend_cpu.pool2d_forward(NULL, op, ry, ra, x, n, &d);
    nn_backend_cpu.pool2d_backward(NULL, op, rdx, dy, ra, n, &d);
    float *gx = (float *)dev_copy(x, in_n * 4);
    float *gdy = (float *)dev_copy(dy, out_n * 4);
    float *gy = (float *)dev_copy(NULL, out_n * 4);
    float *gdx = (float *)dev_copy(NULL, in_n * 4);
    int32_t *ga = (int32_t *)dev_copy(NULL, out_n * 4);
    nn_cuda_pool2d_forward(&gex, op, gy, op == NN_OP_MAXPOOL2D ? ga : NULL,
                           gx, n, &d);
    nn_cuda_pool2d_backward(&gex, op, gdx, gdy, ga, n, &d);
    float *hy = (float *)host_copy(gy, out_n * 4);
    float *hdx = (float *)host_copy(gdx, in_n * 4);
    int32_t *ha = (int32_t *)host_copy(ga, out_n * 4);
    CHECK(!ctx.failed, "%s: %s", name, ctx.what);
    expect_same(name, hy, ry, out_n * 4);
    if (op == NN_OP_MAXPOOL2D)
        expect_same(name, ha, ra, out_n * 4);
    expect_same(name, hdx, rdx, in_n * 4);
    cudaFree(gx), cudaFree(gdy), cudaFree(gy), cudaFree(gdx), cudaFree(ga);
    printf("pool %s\n", name);
}

static void check_bn(const char *name, uint32_t n, uint32_t c, uint32_t s,
                     int training, int with_dx)
{
    const size_t len = (size_t)n * c * s;
    float *x = host_rand(len), *dy = host_rand(len);
    float *g = host_rand(c), *be = host_rand(c), *rm = host_rand(c);
    float *rv = host_rand(c), *dg0 = host_rand(c), *db0 = host_rand(c);
    for (uint32_t i = 0; i < c; i++)
        rv[i] = fabsf(rv[i]) + 0.5f;
    float *out = (float *)malloc(len * 4), *dx = (float *)malloc(len * 4);
    float *mean = (float *)malloc(c * 4), *inv = (float *)malloc(c * 4);
    float *rm2 = (float *)malloc(c * 4), *rv2 = (float *)malloc(c * 4);
    float *dg = (float *)malloc(c * 4), *db = (float *)malloc(c * 4);
    memcpy(rm2, rm, c * 4), memcpy(rv2, rv, c * 4);
    memcpy(dg, dg0, c * 4), memcpy(db, db0, c * 4);
    nn_backend_cpu.batchnorm_forward(NULL, out, mean, inv, rm2, rv2, x, g, be,
                                     n, c, s, training, 0.1f, 1e-5f);
    nn_backend_cpu.batchnorm_backward(NULL, with_dx ? dx : NULL, dg, db, dy,
                                      x, g, mean, inv, n, c, s, training);
    float *gx = (float *)dev_copy(x, len * 4), *gdy = (float *)dev_copy(dy, len * 4);
    float *gg = (float *)dev_copy(g, c * 4), *gbe = (float *)dev_copy(be, c * 4);
    float *grm = (float *)dev_copy(rm, c * 4), *grv = (float *)dev_copy(rv, c * 4);
    float *gdg = (float *)dev_copy(dg0, c * 4), *gdb = (float *)dev_copy(db0, c * 4);
    float *gout = (float *)dev_copy(NULL, len * 4), *gdx = (float *)dev_copy(NULL, len * 4);
    float *gm = (float *)dev_copy(NULL, c * 4), *gi = (float *)dev_copy(NULL, c * 4);
    nn_cuda_batchnorm_forward(&gex, gout, gm, gi, grm, grv, gx, gg, gbe, n, c,
                              s, training, 0.1f, 1e-5f);
    nn_cuda_batchnorm_backward(&gex, with_dx ? gdx : NULL, gdg, gdb, gdy, gx,
                               gg, gm, gi, n, c, s, training);
    CHECK(!ctx.failed, "%s: %s", name, ctx.what);
    char what[96];
#define SAME(field, dev, host, cnt)                                           \
    do {                                                                      \
        float *h_ = (float *)host_copy(dev, (cnt) * 4);                       \
        snprintf(what, sizeof what, "%s %s", name, field);                    \
        expect_same(what, h_, host, (cnt) * 4);                               \
        free(h_);                                                             \
    } while (0)
    SAME("out", gout, out, len);
    SAME("mean", gm, mean, c);
    SAME("invstd", gi, inv, c);
    SAME("running_mean", grm, rm2, c);
    SAME("running_var", grv, rv2, c);
    SAME("dgamma", gdg, dg, c);
    SAME("dbeta", gdb, db, c);
    if (with_dx)
        SAME("dx", gdx, dx, len);
    printf("batchnorm %s\n", name);
}

int main(void)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        printf("SKIP: no CUDA device (%s)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "none visible");
        return 77;
    }
    if (cudaStreamCreate(&ctx.stream) != cudaSuccess ||
        cudnnCreate(&ctx.dnn) != CUDNN_STATUS_SUCCESS ||
        cudnnSetStream(ctx.dnn, ctx.stream) != CUDNN_STATUS_SUCCESS) {
        printf("FAIL: no stream or cuDNN handle\n");
        return 1;
    }
    gex.device = &ctx;

    check_conv("3x3 pad1 +bias", 4, conv_desc(3, 12, 10, 8, 3, 1, 1, 1, 1), 1, 1);
    check_conv("1x1 no bias", 3, conv_desc(16, 7, 7, 8, 1, 1, 0, 1, 1), 0, 1);
    check_conv("5x5 s2 dil2 groups2", 5, conv_desc(4, 17, 15, 6, 5, 2, 2, 2, 2), 1, 1);
    check_conv("depthwise 3x3 no din", 2, conv_desc(8, 9, 9, 8, 3, 1, 1, 1, 8), 1, 0);
    check_conv("batch 150 (chunks)", 150, conv_desc(2, 8, 8, 4, 3, 2, 1, 1, 1), 1, 1);

    check_pool("max 2x2/2", NN_OP_MAXPOOL2D, 3, conv_desc(4, 8, 6, 4, 2, 2, 0, 1, 1));
    check_pool("max 3x3/2 pad1", NN_OP_MAXPOOL2D, 2, conv_desc(3, 9, 11, 3, 3, 2, 1, 1, 1));
    check_pool("max 3x3/1 pad1", NN_OP_MAXPOOL2D, 2, conv_desc(2, 7, 7, 2, 3, 1, 1, 1, 1));
    check_pool("avg 3x3/2 pad1", NN_OP_AVGPOOL2D, 2, conv_desc(3, 9, 11, 3, 3, 2, 1, 1, 1));
    check_pool("avg 2x2/1", NN_OP_AVGPOOL2D, 2, conv_desc(3, 6, 5, 3, 2, 1, 0, 1, 1));
    check_pool("avg global 7x7", NN_OP_AVGPOOL2D, 4, conv_desc(5, 7, 7, 5, 7, 1, 0, 1, 1));

    check_bn("train s=49", 6, 5, 49, 1, 1);
    check_bn("train s=1", 300, 70, 1, 1, 1);
    check_bn("train s=13 n=40 no dx", 40, 3, 13, 1, 0);
    check_bn("eval s=9", 4, 6, 9, 0, 1);

    cudnnDestroy(ctx.dnn);
    cudaStreamDestroy(ctx.stream);
    if (failures) {
        printf("FAILED: %d checks\n", failures);
        return 1;
    }
    printf("PASS\n");
    return 0;
}
