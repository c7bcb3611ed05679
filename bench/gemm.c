/*
 * gemm.c - the CPU engine's SGEMM rate at the Fashion networks' shapes, on
 * the kernels this process runs (not a test; bench/train_cpu runs it once
 * per OpenBLAS core with TRAINYARD_CPU_KERNELS=<core> and compares).
 *
 *   build/bench_gemm [seconds-per-shape] [openblas|blis|onednn]
 *
 * Selects the kernels as the trainyard binary does (cpu_kernels_select),
 * then times SGEMM on one thread (the engine runs OpenBLAS on one thread
 * and splits the work itself) at each shape, best of the repeats. Prints
 * one JSON line: the kernels, and per shape m, n, k and GFLOP/s, and the
 * rate over all shapes weighted by their flops.
 *
 *   build/bench_gemm rows [seconds-per-case]
 *
 * times, instead, OpenBLAS's SGEMM against one SGEMV per row of C for a
 * few rows (m = 1, 2, 4, 8) at dense layers' shapes, as a predict of a
 * few examples runs them (nn_cpu_gemm chooses between the two by shape,
 * models/cpu/matmul.c); one thread, best of the repeats, as a table.
 *
 * blis and onednn are the other candidate providers the engine could use,
 * timed on the same shapes for comparison: BLIS's CBLAS (Debian's
 * libblis4-serial: one thread, kernels chosen by CPU features at run time)
 * and oneDNN's dnnl_sgemm (libdnnl2, JIT by CPU features; run with
 * OMP_NUM_THREADS=1). Both are loaded with dlopen(RTLD_DEEPBIND), so that
 * nothing of them links into the product and OpenBLAS's symbols cannot
 * stand in for theirs; a library that is not installed exits 2 saying so.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>
#include <jansson.h>

#include "models/cpu/kernels.h"

void openblas_set_num_threads(int num_threads);

/* Row-major C (m, n) = A (m, k) B (k, n), with the transposes the layers
 * use. The MLP at batch 128 (forward, data and weight gradients) and the
 * CNN's per-sample im2col GEMMs and its 1024-unit dense layer. */
static const struct {
    const char *what;
    int ta, tb, m, n, k;
} shapes[] = {
    {"mlp dense 784->256 fwd", 0, 1, 128, 256, 784},
    {"mlp dense 784->256 dW", 1, 0, 256, 784, 128},
    {"mlp dense 256->128 fwd", 0, 1, 128, 128, 256},
    {"mlp dense 256->128 dX", 0, 0, 128, 256, 128},
    {"cnn conv1 5x5 1->32 fwd (per image)", 0, 0, 32, 784, 25},
    {"cnn conv1 dW (per image)", 0, 1, 32, 25, 784},
    {"cnn conv2 5x5 32->64 fwd (per image)", 0, 0, 64, 196, 800},
    {"cnn conv2 dW (per image)", 0, 1, 64, 800, 196},
    {"cnn conv2 dX (per image)", 1, 0, 800, 196, 64},
    {"cnn dense 3136->1024 fwd", 0, 1, 128, 1024, 3136},
    {"cnn dense 3136->1024 dW", 1, 0, 1024, 3136, 128},
    {"cnn dense 3136->1024 dX", 0, 0, 128, 3136, 1024},
    {"square 256", 0, 0, 256, 256, 256},
};

/* One SGEMM, row-major C (m, n) = op(A) op(B), by the chosen provider. */
typedef void (*cblas_sgemm_fn)(int, int, int, int, int, int, float,
                               const float *, int, const float *, int, float,
                               float *, int);
typedef int (*dnnl_sgemm_fn)(char, char, int64_t, int64_t, int64_t, float,
                             const float *, int64_t, const float *, int64_t,
                             float, float *, int64_t);
static cblas_sgemm_fn blis_sgemm;
static dnnl_sgemm_fn onednn_sgemm;

static void provider_sgemm(int ta, int tb, int m, int n, int k, const float *a,
                           int lda, const float *b, int ldb, float *c)
{
    if (blis_sgemm)
        blis_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                   tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda, b,
                   ldb, 0.0f, c, n);
    else if (onednn_sgemm)
        onednn_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a, lda, b,
                     ldb, 0.0f, c, n);
    else
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                    tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda, b,
                    ldb, 0.0f, c, n);
}

static void *open_provider(const char *const *names, const char *sym,
                           const char *package)
{
    for (; *names; names++) {
        void *h = dlopen(*names, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
        if (h) {
            void *f = dlsym(h, sym);
            if (f)
                return f;
        }
    }
    fprintf(stderr, "bench_gemm: %s not found (apt-get install %s)\n", sym,
            package);
    exit(2);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Dense layers' weights (out x in, as models/layers.c keeps them: C = A
 * B^T) that a predict of a few rows multiplies by: the README's MLP, the
 * CNN's dense layers, a wide MLP's, and squares between. */
static const struct {
    const char *what;
    int n, k;
} row_shapes[] = {
    {"mlp 784->256", 256, 784},
    {"mlp 256->128", 128, 256},
    {"mlp 128->10", 10, 128},
    {"cnn 3136->1024", 1024, 3136},
    {"cnn 1024->10", 10, 1024},
    {"512->512", 512, 512},
    {"1024->1024", 1024, 1024},
    {"2048->2048", 2048, 2048},
    {"wide 4096->4096", 4096, 4096},
    {"784->4096", 4096, 784},
    {"256->64", 64, 256},
    {"1024->256", 256, 1024},
    {"1024->512", 512, 1024},
};

/* C (m, n) = A (m, k) op(B), as one SGEMM or as one SGEMV per row. */
static void rows_run(int gemv, int tb, int m, int n, int k, const float *a,
                     const float *b, float *c)
{
    if (!gemv) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    m, n, k, 1.0f, a, k, b, tb ? k : n, 0.0f, c, n);
        return;
    }
    for (int i = 0; i < m; i++)
        if (tb) /* B (n, k) */
            cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, b, k,
                        a + (size_t)i * k, 1, 0.0f, c + (size_t)i * n, 1);
        else /* B (k, n) */
            cblas_sgemv(CblasRowMajor, CblasTrans, k, n, 1.0f, b, n,
                        a + (size_t)i * k, 1, 0.0f, c + (size_t)i * n, 1);
}

/* Seconds per call, the best over loops of calls of at least 1 ms each
 * for about `seconds`. */
static double rows_time(int gemv, int tb, int m, int n, int k, const float *a,
                        const float *b, float *c, double seconds)
{
    int reps = 1;
    for (;;) {
        double t0 = now_s();
        for (int r = 0; r < reps; r++)
            rows_run(gemv, tb, m, n, k, a, b, c);
        if (now_s() - t0 >= 1e-3 || reps >= 1 << 20)
            break;
        reps *= 2;
    }
    double best = 1e30, t_end = now_s() + seconds;
    int loops = 0;
    do {
        double t0 = now_s();
        for (int r = 0; r < reps; r++)
            rows_run(gemv, tb, m, n, k, a, b, c);
        double dt = (now_s() - t0) / reps;
        if (dt < best)
            best = dt;
        loops++;
    } while (loops < 3 || now_s() < t_end);
    return best;
}

static int rows_main(double per_case)
{
    static const int ms[] = {1, 2, 4, 8};
    const cpu_kernels_info *kin = cpu_kernels_get();
    printf("OpenBLAS core %s, one thread; microseconds per call, best of "
           "repeats; gemv/gemm < 1: one SGEMV per row is faster\n",
           kin->core);
    printf("%-16s %2s %8s %2s %10s %10s %10s %10s\n", "shape (in->out)", "B",
           "B floats", "m", "gemm us", "gemv us", "gemv/gemm", "max|diff|");
    for (size_t s = 0; s < sizeof row_shapes / sizeof row_shapes[0]; s++) {
        const int n = row_shapes[s].n, k = row_shapes[s].k, mmax = 8;
        float *a = malloc(sizeof(float) * mmax * k);
        float *b = malloc(sizeof(float) * (size_t)k * n);
        float *c = malloc(sizeof(float) * mmax * n);
        float *c2 = malloc(sizeof(float) * mmax * n);
        if (!a || !b || !c || !c2) {
            fprintf(stderr, "bench_gemm: out of memory\n");
            return 1;
        }
        for (int i = 0; i < mmax * k; i++)
            a[i] = (float)(i % 17) / 17.0f - 0.5f;
        for (size_t i = 0; i < (size_t)k * n; i++)
            b[i] = (float)(i % 13) / 13.0f - 0.5f;
        for (int tb = 1; tb >= 0; tb--)
            for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
                const int m = ms[mi];
                double tg = rows_time(0, tb, m, n, k, a, b, c, per_case);
                double tv = rows_time(1, tb, m, n, k, a, b, c2, per_case);
                double diff = 0;
                for (int i = 0; i < m * n; i++) {
                    double e = c[i] > c2[i] ? c[i] - c2[i] : c2[i] - c[i];
                    if (e > diff)
                        diff = e;
                }
                printf("%-16s %2s %8zu %2d %10.2f %10.2f %10.2f %10.1e\n",
                       row_shapes[s].what, tb ? "T" : "N", (size_t)n * k, m,
                       tg * 1e6, tv * 1e6, tv / tg, diff);
            }
        free(a);
        free(b);
        free(c);
        free(c2);
    }
    return 0;
}

int main(int argc, char **argv)
{
    cpu_kernels_select(argv);
    if (argc > 1 && !strcmp(argv[1], "rows")) {
        openblas_set_num_threads(1);
        double per_case = argc > 2 ? atof(argv[2]) : 0.2;
        return rows_main(per_case > 0 ? per_case : 0.2);
    }
    double per_shape = argc > 1 ? atof(argv[1]) : 0.3;
    if (per_shape <= 0)
        per_shape = 0.3;
    const char *provider = argc > 2 ? argv[2] : "openblas";
    openblas_set_num_threads(1);
    const cpu_kernels_info *k = cpu_kernels_get();
    /* What the JSON says of the kernels: OpenBLAS's selection, or the other
     * provider's own choice by CPU features. */
    const char *core = k->core, *isa = k->isa, *reason = k->reason;
    if (!strcmp(provider, "blis")) {
        static const char *const names[] = {
            "/usr/lib/x86_64-linux-gnu/blis-serial/libblis.so.4",
            "libblis.so.4", NULL};
        blis_sgemm = (cblas_sgemm_fn)open_provider(names, "cblas_sgemm",
                                                   "libblis4-serial");
        core = "blis", isa = "-", reason = "BLIS's own choice by CPU features";
    } else if (!strcmp(provider, "onednn")) {
        static const char *const names[] = {"libdnnl.so.2", "libdnnl.so.3",
                                            NULL};
        onednn_sgemm =
            (dnnl_sgemm_fn)open_provider(names, "dnnl_sgemm", "libdnnl2");
        core = "onednn", isa = "-", reason = "oneDNN's JIT by CPU features";
    } else if (strcmp(provider, "openblas")) {
        fprintf(stderr,
                "bench_gemm: unknown provider %s (openblas, blis, onednn)\n",
                provider);
        return 64;
    }
    json_t *out =
        json_pack("{s:s, s:s, s:s, s:s, s:s}", "provider", provider, "core",
                  core, "isa", isa, "cpu_isa", k->cpu_isa, "reason", reason);
    json_t *list = json_array();
    double flops_all = 0, time_all = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int m = shapes[s].m, n = shapes[s].n, kk = shapes[s].k;
        float *a = malloc(sizeof(float) * m * kk);
        float *b = malloc(sizeof(float) * kk * n);
        float *c = malloc(sizeof(float) * m * n);
        if (!a || !b || !c) {
            fprintf(stderr, "bench_gemm: out of memory\n");
            return 1;
        }
        for (int i = 0; i < m * kk; i++)
            a[i] = (float)(i % 17) / 17.0f - 0.5f;
        for (int i = 0; i < kk * n; i++)
            b[i] = (float)(i % 13) / 13.0f - 0.5f;
        const int lda = shapes[s].ta ? m : kk, ldb = shapes[s].tb ? kk : n;
        double best = 1e30, t_end = now_s() + per_shape;
        int reps = 0;
        provider_sgemm(shapes[s].ta, shapes[s].tb, m, n, kk, a, lda, b, ldb, c);
        do {
            double t0 = now_s();
            provider_sgemm(shapes[s].ta, shapes[s].tb, m, n, kk, a, lda, b, ldb,
                           c);
            double dt = now_s() - t0;
            if (dt < best)
                best = dt;
            reps++;
        } while (reps < 5 || now_s() < t_end);
        /* The provider's C against OpenBLAS's, so that a fast wrong GEMM
         * cannot pass for a fast one. */
        float *ref = malloc(sizeof(float) * m * n);
        if (!ref) {
            fprintf(stderr, "bench_gemm: out of memory\n");
            return 1;
        }
        cblas_sgemm(CblasRowMajor, shapes[s].ta ? CblasTrans : CblasNoTrans,
                    shapes[s].tb ? CblasTrans : CblasNoTrans, m, n, kk, 1.0f, a,
                    lda, b, ldb, 0.0f, ref, n);
        double maxref = 0, maxdiff = 0;
        for (int i = 0; i < m * n; i++) {
            double r = ref[i] < 0 ? -ref[i] : ref[i];
            double e = c[i] - ref[i] < 0 ? ref[i] - c[i] : c[i] - ref[i];
            if (r > maxref)
                maxref = r;
            if (e > maxdiff)
                maxdiff = e;
        }
        free(ref);
        double flops = 2.0 * m * n * kk;
        flops_all += flops;
        time_all += best;
        json_array_append_new(
            list, json_pack("{s:s, s:i, s:i, s:i, s:f, s:f}", "shape",
                            shapes[s].what, "m", m, "n", n, "k", kk, "gflops",
                            flops / best / 1e9, "rel_diff_vs_openblas",
                            maxref > 0 ? maxdiff / maxref : maxdiff));
        free(a);
        free(b);
        free(c);
    }
    json_object_set_new(out, "shapes", list);
    json_object_set_new(out, "weighted_gflops",
                        json_real(flops_all / time_all / 1e9));
    char *text = json_dumps(out, JSON_COMPACT);
    printf("%s\n", text);
    free(text);
    json_decref(out);
    return 0;
}
