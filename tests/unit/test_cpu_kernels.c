/*
 * test_cpu_kernels.c - the CPU engine's GEMM kernels chosen by CPUID
 * features (models/cpu/kernels.h).
 *
 * main() calls cpu_kernels_select() as the trainyard binary does, so this
 * program may execute itself again with OPENBLAS_CORETYPE set. ctest runs
 * it twice: as it is, and as `..._unrecognised` with OPENBLAS_CORETYPE=
 * Prescott, which makes OpenBLAS load its generic SSE3 kernels as it does
 * on a CPU it does not recognise (TY_EXPECT_DETECTED=Prescott tells the
 * test). In both runs the kernels in use must be the best the CPU's
 * features allow, and the engine's GEMM and convolution must agree with
 * double-precision references.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "models/backend.h"
#include "models/cpu/kernels.h"

char *openblas_get_corename(void);

/* ---- the decision, as a table ---- */

static void expect_decision(const char *policy, cpu_isa cpu, const char *loaded,
                            int want_rc, const char *want_core,
                            const char *reason_has)
{
    char core[32], reason[256];
    int rc = cpu_kernels_decide(policy, cpu, loaded, core, sizeof core, reason,
                                sizeof reason);
    if (rc != want_rc || strcmp(core, want_core) || !strstr(reason, reason_has))
        fail_msg(
            "decide(%s, %s, %s) = %d, '%s', '%s'; want %d, '%s', '...%s...'",
            policy ? policy : "NULL", cpu_isa_name(cpu), loaded, rc, core,
            reason, want_rc, want_core, reason_has);
}

static void test_decide(void **state)
{
    (void)state;
    /* An unrecognised CPU: OpenBLAS loaded Prescott. */
    expect_decision(NULL, CPU_ISA_AVX512, "Prescott", 0, "SkylakeX",
                    "CPUID: avx512");
    expect_decision("auto", CPU_ISA_AVX2, "Prescott", 0, "Haswell",
                    "CPUID: avx2");
    expect_decision("AUTO", CPU_ISA_AVX, "Prescott", 0, "Sandybridge",
                    "generic kernels");
    /* Recognised: what OpenBLAS chose already uses the best ISA. */
    expect_decision(NULL, CPU_ISA_AVX512, "Cooperlake", 0, "",
                    "best this CPU has");
    expect_decision(NULL, CPU_ISA_AVX2, "Zen", 0, "", "best this CPU has");
    /* A CPU with AVX2 only, OpenBLAS wrongly on Sandybridge kernels. */
    expect_decision(NULL, CPU_ISA_AVX2, "Sandybridge", 0, "Haswell",
                    "avx kernels");
    /* No AVX at all: nothing better to load. */
    expect_decision(NULL, CPU_ISA_GENERIC, "Prescott", 0, "", "no AVX");
    /* Policies. */
    expect_decision("openblas", CPU_ISA_AVX512, "Prescott", 0, "",
                    "own choice");
    expect_decision("Haswell", CPU_ISA_AVX512, "Cooperlake", 0, "Haswell",
                    "=Haswell");
    expect_decision("skylakex", CPU_ISA_AVX512, "SkylakeX", 0, "", "=skylakex");
    expect_decision("SkylakeX", CPU_ISA_AVX2, "Haswell", -1, "", "lacks");
    expect_decision("Pentium9", CPU_ISA_AVX512, "Haswell", -1, "",
                    "not an OpenBLAS");
}

static void test_core_isa(void **state)
{
    (void)state;
    assert_int_equal(cpu_openblas_core_isa("skylakex"), CPU_ISA_AVX512);
    assert_int_equal(cpu_openblas_core_isa("Cooperlake"), CPU_ISA_AVX512);
    assert_int_equal(cpu_openblas_core_isa("Haswell"), CPU_ISA_AVX2);
    assert_int_equal(cpu_openblas_core_isa("Zen"), CPU_ISA_AVX2);
    assert_int_equal(cpu_openblas_core_isa("Sandybridge"), CPU_ISA_AVX);
    assert_int_equal(cpu_openblas_core_isa("Prescott"), CPU_ISA_GENERIC);
    assert_int_equal(cpu_openblas_core_isa("nonsense"), CPU_ISA_GENERIC);
    for (int i = CPU_ISA_AVX; i < CPU_ISA_COUNT; i++)
        assert_int_equal(cpu_openblas_core_isa(cpu_isa_openblas_core(i)), i);
    assert_null(cpu_isa_openblas_core(CPU_ISA_GENERIC));
}

/* ---- CPUID against the kernel's own reading (/proc/cpuinfo) ---- */

static int cpuinfo_has(const char *flags, const char *flag)
{
    size_t n = strlen(flag);
    for (const char *p = flags; (p = strstr(p, flag)); p += n)
        if ((p == flags || p[-1] == ' ') &&
            (p[n] == ' ' || p[n] == '\n' || !p[n]))
            return 1;
    return 0;
}

static void test_features_match_cpuinfo(void **state)
{
    (void)state;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        skip();
    static char line[8192];
    char *flags = NULL;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "flags", 5)) {
            flags = strchr(line, ':');
            break;
        }
    fclose(f);
    if (!flags)
        skip(); /* not x86 */
    cpu_features ft;
    cpu_features_read(&ft);
    /* Linux lists a flag only when the OS supports it (xsave state) too. */
    assert_int_equal(!!ft.avx, cpuinfo_has(flags, "avx"));
    assert_int_equal(!!ft.avx2, cpuinfo_has(flags, "avx2"));
    assert_int_equal(!!ft.fma, cpuinfo_has(flags, "fma"));
    assert_int_equal(!!ft.avx512f, cpuinfo_has(flags, "avx512f"));
    assert_int_equal(!!ft.avx512bw, cpuinfo_has(flags, "avx512bw"));
    assert_int_equal(!!ft.avx512dq, cpuinfo_has(flags, "avx512dq"));
    assert_int_equal(!!ft.avx512vl, cpuinfo_has(flags, "avx512vl"));
    assert_int_equal(!!ft.avx512cd, cpuinfo_has(flags, "avx512cd"));
    assert_int_equal(!!ft.amx_tile, cpuinfo_has(flags, "amx_tile"));
    printf("cpuid: isa %s (avx2 %d fma %d avx512f %d bf16 %d amx %d)\n",
           cpu_isa_name(cpu_features_isa(&ft)), ft.avx2, ft.fma, ft.avx512f,
           ft.avx512_bf16, ft.amx_tile);
}

/* ---- what this process runs ---- */

static void test_selected_kernels(void **state)
{
    (void)state;
    cpu_features ft;
    cpu_features_read(&ft);
    cpu_isa best = cpu_features_isa(&ft);
    const cpu_kernels_info *k = cpu_kernels_get();
    printf("kernels: %s %s (%s), OpenBLAS detected %s: %s\n", k->provider,
           k->core, k->isa, k->detected, k->reason);
    assert_string_equal(k->provider, "openblas");
    assert_string_equal(k->core, openblas_get_corename());
    assert_string_equal(k->cpu_isa, cpu_isa_name(best));
    /* The kernels in use use the best ISA the CPU has. */
    assert_int_equal(cpu_openblas_core_isa(k->core), best);
    assert_string_equal(k->isa, cpu_isa_name(best));
    assert_int_equal(k->generic_fallback, best == CPU_ISA_GENERIC);
    const char *expect = getenv("TY_EXPECT_DETECTED");
    if (expect) {
        /* Forced "unrecognised": OpenBLAS loaded Prescott, trainyard moved. */
        assert_true(!strcasecmp(k->detected, expect));
        if (best > CPU_ISA_GENERIC) {
            assert_true(strcasecmp(k->core, expect) != 0);
            assert_non_null(strstr(k->reason, "chosen by the CPU's features"));
        }
    }
    double g = cpu_kernels_measure(0.02);
    assert_true(g > 0);
    assert_true(k->gemm_gflops == g);
}

/* ---- results against references, on the kernels in use ---- */

static uint64_t rng = 88172645463325252ull;
static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* A new buffer of n floats from frand(); fails the test when out of memory. */
static float *rand_floats(size_t n)
{
    float *p = malloc(n * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = frand();
    return p;
}

/* Each shape of the Fashion networks' dense layers, and odd sizes that
 * leave kernel tails, in every transpose combination (the backward pass's
 * GEMMs); one and two rows against a B past L2, and four against one
 * within it, take the GEMV path (models/cpu/matmul.c says when).
 * |ours - ref| <= 1e-5 * sum |a||b| per element. */
static void test_gemm_matches_reference(void **state)
{
    (void)state;
    static const int shapes[][3] = {
        {128, 256, 784}, {128, 10, 128},  {1, 256, 784},
        {37, 53, 71},    {3, 1024, 3136}, {64, 1, 5},
        {1, 1024, 3136}, {2, 1500, 701},  {4, 512, 1024}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                const int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                float *a = rand_floats((size_t)m * k);
                float *b = rand_floats((size_t)k * n);
                float *c = rand_floats((size_t)m * n);
                float *c0 = malloc(sizeof(float) * m * n);
                assert_non_null(c0);
                memcpy(c0, c, sizeof(float) * m * n);
                nn_backend_cpu.gemm(NULL, c, a, b, ta, tb, m, n, k, 0.5f,
                                    0.25f);
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < n; j++) {
                        double acc = 0, mag = 0;
                        for (int p = 0; p < k; p++) {
                            double x = ta ? a[p * m + i] : a[i * k + p];
                            double y = tb ? b[j * k + p] : b[p * n + j];
                            acc += x * y;
                            mag += fabs(x * y);
                        }
                        double ref = 0.5 * acc + 0.25 * c0[i * n + j];
                        double err = fabs(c[i * n + j] - ref);
                        if (err > 1e-5 * (0.5 * mag + 0.25) + 1e-7)
                            fail_msg("gemm %dx%dx%d ta %d tb %d: c[%d][%d] = "
                                     "%.9g, reference %.9g",
                                     m, n, k, ta, tb, i, j, c[i * n + j], ref);
                    }
                free(a);
                free(b);
                free(c);
                free(c0);
            }
}

/* beta 0 never reads C, on the GEMM and the GEMV paths alike: a NaN left
 * in C from an earlier step must not reach the result. (On Debian's
 * OpenBLAS 0.3.21 this holds even without the GEMV path's clearing of C,
 * whose SCAL writes zeros for 0; the test pins the contract for other
 * versions.) */
static void test_gemm_beta0_ignores_c(void **state)
{
    (void)state;
    static const int shapes[][3] = {
        {1, 1024, 3136}, {2, 1024, 1024}, {4, 64, 64}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        float *a = rand_floats((size_t)m * k), *b = rand_floats((size_t)k * n);
        float *c = rand_floats((size_t)m * n);
        for (int i = 0; i < m * n; i++)
            c[i] = NAN;
        nn_backend_cpu.gemm(NULL, c, a, b, 0, 1, m, n, k, 1.0f, 0.0f);
        for (int i = 0; i < m * n; i++)
            if (!isfinite(c[i]))
                fail_msg("gemm %dx%dx%d beta 0: c[%d] = %g", m, n, k, i, c[i]);
        free(a);
        free(b);
        free(c);
    }
}

/* conv2d_forward against a direct loop in double for one geometry. */
static void check_conv(const nn_conv_desc *d, uint32_t n)
{
    const uint32_t kh = d->kernel[0], kw = d->kernel[1],
                   cg = d->in_c / d->groups;
    const uint32_t fg = d->out_c / d->groups;
    size_t in_len = (size_t)n * d->in_c * d->in_h * d->in_w;
    size_t w_len = (size_t)d->out_c * cg * kh * kw;
    size_t out_len = (size_t)n * d->out_c * d->out_h * d->out_w;
    float *in = rand_floats(in_len), *w = rand_floats(w_len);
    float *bias = rand_floats(d->out_c);
    float *out = malloc(out_len * sizeof(float));
    assert_non_null(out);
    for (size_t i = 0; i < w_len; i++)
        w[i] *= 0.1f;
    size_t work = nn_backend_cpu.conv2d_work(d);
    nn_exec ex = {.work_floats = (work + 15) / 16 * 16};
    ex.work = aligned_alloc(64, (ex.work_floats ? ex.work_floats : 16) *
                                    sizeof(float));
    assert_non_null(ex.work);
    nn_backend_cpu.conv2d_forward(&ex, out, in, w, bias, n, d);
    for (uint32_t s = 0; s < n; s++)
        for (uint32_t f = 0; f < d->out_c; f++)
            for (uint32_t oh = 0; oh < d->out_h; oh++)
                for (uint32_t ow = 0; ow < d->out_w; ow++) {
                    double acc = bias[f], mag = fabs(bias[f]);
                    uint32_t g = f / fg;
                    for (uint32_t c = 0; c < cg; c++)
                        for (uint32_t i = 0; i < kh; i++)
                            for (uint32_t j = 0; j < kw; j++) {
                                int64_t ih = (int64_t)oh * d->stride[0] -
                                             d->pad[0] +
                                             (int64_t)i * d->dilation[0];
                                int64_t iw = (int64_t)ow * d->stride[1] -
                                             d->pad[1] +
                                             (int64_t)j * d->dilation[1];
                                if (ih < 0 || iw < 0 || ih >= d->in_h ||
                                    iw >= d->in_w)
                                    continue;
                                double x =
                                    in[(((size_t)s * d->in_c + g * cg + c) *
                                            d->in_h +
                                        ih) *
                                           d->in_w +
                                       iw];
                                double y =
                                    w[(((size_t)f * cg + c) * kh + i) * kw + j];
                                acc += x * y;
                                mag += fabs(x * y);
                            }
                    float got =
                        out[(((size_t)s * d->out_c + f) * d->out_h + oh) *
                                d->out_w +
                            ow];
                    if (fabs(got - acc) > 1e-5 * mag + 1e-7)
                        fail_msg("conv %ux%u k%ux%u pad %u,%u dil %u,%u stride "
                                 "%u,%u: "
                                 "out[%u][%u][%u][%u] = %.9g, reference %.9g",
                                 d->in_h, d->in_w, kh, kw, d->pad[0], d->pad[1],
                                 d->dilation[0], d->dilation[1], d->stride[0],
                                 d->stride[1], s, f, oh, ow, got, acc);
                }
    free(ex.work);
    free(in);
    free(w);
    free(bias);
    free(out);
}

#define CONV(ic, ih, iw, oc, oh, ow, k0, k1, s0, s1, p0, p1, d0, d1, g) \
    ((nn_conv_desc){.in_c = ic,                                         \
                    .in_h = ih,                                         \
                    .in_w = iw,                                         \
                    .out_c = oc,                                        \
                    .out_h = oh,                                        \
                    .out_w = ow,                                        \
                    .kernel = {k0, k1},                                 \
                    .stride = {s0, s1},                                 \
                    .pad = {p0, p1},                                    \
                    .dilation = {d0, d1},                               \
                    .groups = g})

/* The Fashion CNN's two convolutions, and "same" geometries (stride 1,
 * out_w == in_w: the im2col path that copies shifted runs) with dilation,
 * non-square kernels, planes smaller than the kernel's reach and groups;
 * then strided and "valid" ones (the row-by-row path). */
static void test_conv_matches_reference(void **state)
{
    (void)state;
    const nn_conv_desc ds[] = {
        CONV(1, 28, 28, 32, 28, 28, 5, 5, 1, 1, 2, 2, 1, 1, 1),
        CONV(32, 14, 14, 64, 14, 14, 5, 5, 1, 1, 2, 2, 1, 1, 1),
        CONV(3, 9, 9, 4, 9, 9, 3, 3, 1, 1, 2, 2, 2, 2, 1), /* dilated */
        CONV(2, 6, 7, 3, 6, 7, 3, 5, 1, 1, 1, 2, 1, 1, 1), /* 3x5 */
        CONV(2, 2, 2, 3, 2, 2, 5, 5, 1, 1, 2, 2, 1, 1, 1), /* tiny plane */
        CONV(2, 4, 3, 2, 6, 3, 3, 3, 1, 1, 2, 1, 1, 1, 1), /* taller out */
        CONV(4, 5, 5, 4, 5, 5, 3, 3, 1, 1, 1, 1, 1, 1, 2), /* groups */
        CONV(3, 9, 9, 4, 5, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1), /* strided */
        CONV(3, 8, 8, 4, 6, 6, 3, 3, 1, 1, 0, 0, 1, 1, 1), /* valid */
    };
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++)
        check_conv(&ds[i], 2);
}

int main(int argc, char **argv)
{
    (void)argc;
    cpu_kernels_select(argv); /* as the trainyard binary does */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decide),
        cmocka_unit_test(test_core_isa),
        cmocka_unit_test(test_features_match_cpuinfo),
        cmocka_unit_test(test_selected_kernels),
        cmocka_unit_test(test_gemm_matches_reference),
        cmocka_unit_test(test_gemm_beta0_ignores_c),
        cmocka_unit_test(test_conv_matches_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
