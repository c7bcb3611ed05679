/*
 * gemm_ceiling.cu - the hardware's own limit for the wide benchmark network:
 * bare cuBLAS GEMMs of exactly the shapes one training step of a dense MLP
 * runs, timed on their own, so a trainer's step can be set beside them.
 *
 * A dense layer of `in` -> `out` units at batch B runs three GEMMs per step,
 * oriented as trainyard's dense layer (models/layers.c) calls them, all
 * row-major with weights (out, in) as torch stores them:
 *   forward   y (B, out)    = x (B, in) W^T          m=B   n=out k=in
 *   dweight   dW (out, in) += dy^T (out, B) x (B, in) m=out n=in  k=B
 *   dinput    dx (B, in)    = dy (B, out) W          m=B   n=in  k=out
 * (the first layer needs no dinput, as in torch, whose input has no grad).
 * Each is 2 m n k FLOPs. Precisions:
 *   fp32  cublasSgemm, default math (no TF32: full fp32, as the fp32 tests)
 *   tf32  cublasSgemm with CUBLAS_TF32_TENSOR_OP_MATH (what torch does with
 *         allow_tf32), for reference only
 *   bf16  cublasGemmEx, bf16 inputs, fp32 accumulation (CUBLAS_COMPUTE_32F);
 *         y and dx are bf16, dW is fp32 (master gradients stay fp32)
 * Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so each
 * call passes B first with the sizes swapped.
 *
 * Usage: gemm_ceiling [--batch 1024] [--width 4096] [--layers 4]
 *                     [--in WIDTH] [--out WIDTH] [--iters 30]
 * Prints one line per GEMM shape and precision and a "step" line (all of a
 * step's GEMMs back to back). Exit: 0, 77 with no CUDA device (it says
 * why), 1 on a CUDA or cuBLAS error (naming the call).
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(call)                                                            \
    do {                                                                    \
        cudaError_t e_ = (call);                                            \
        if (e_ != cudaSuccess) {                                            \
            fprintf(stderr, "gemm_ceiling: %s failed: %s (%s:%d)\n", #call, \
                    cudaGetErrorString(e_), __FILE__, __LINE__);            \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

#define CKB(call)                                                           \
    do {                                                                    \
        cublasStatus_t s_ = (call);                                         \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                  \
            fprintf(stderr, "gemm_ceiling: %s failed: %s (%s:%d)\n", #call, \
                    cublasGetStatusString(s_), __FILE__, __LINE__);         \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

enum prec { P_FP32, P_TF32, P_BF16, P_COUNT };
static const char *const prec_name[P_COUNT] = {"fp32", "tf32", "bf16"};

/* One row-major GEMM of the step: C (m, n) = op(A) op(B) (+ C). */
typedef struct {
    const char *what; /* "L1 forward" */
    int ta, tb, m, n, k;
    float beta;
    int a, b, c; /* buffer indices */
    int c_fp32;  /* bf16 runs: C stays fp32 (weight gradients) */
} gemm_op;

#define MAX_LAYERS 16
#define MAX_OPS (3 * MAX_LAYERS)
#define MAX_BUFS (4 * MAX_LAYERS + 2)

typedef struct {
    size_t elems[MAX_BUFS];
    void *f32[MAX_BUFS];  /* fp32 copies */
    void *bf16[MAX_BUFS]; /* bf16 copies */
    int n;
} buffers;

static int buf_new(buffers *bs, size_t elems)
{
    bs->elems[bs->n] = elems;
    return bs->n++;
}

__global__ void fill_f32(float *x, size_t n, unsigned seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        x[i] = ((float)(h & 0xffffff) / 16777216.0f - 0.5f) * 0.02f;
    }
}

__global__ void to_bf16(__nv_bfloat16 *y, const float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16(x[i]);
}

static void run_gemm(cublasHandle_t h, enum prec p, const gemm_op *g,
                     const buffers *bs)
{
    const float alpha = 1.0f, beta = g->beta;
    const cublasOperation_t op_a = g->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = g->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int lda = g->ta ? g->m : g->k, ldb = g->tb ? g->k : g->n;
    if (p == P_BF16) {
        void *c = g->c_fp32 ? bs->f32[g->c] : bs->bf16[g->c];
        CKB(cublasGemmEx(h, op_b, op_a, g->n, g->m, g->k, &alpha,
                         bs->bf16[g->b], CUDA_R_16BF, ldb, bs->bf16[g->a],
                         CUDA_R_16BF, lda, &beta, c,
                         g->c_fp32 ? CUDA_R_32F : CUDA_R_16BF, g->n,
                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else {
        CKB(cublasSgemm(h, op_b, op_a, g->n, g->m, g->k, &alpha,
                        (const float *)bs->f32[g->b], ldb,
                        (const float *)bs->f32[g->a], lda, &beta,
                        (float *)bs->f32[g->c], g->n));
    }
}

static void add_op(gemm_op *ops, int *nops, int layer, const char *kind, int ta,
                   int tb, int m, int n, int k, float beta, int a, int b, int c,
                   int c_fp32)
{
    static char names[MAX_OPS][32];
    gemm_op *g = &ops[*nops];
    snprintf(names[*nops], sizeof names[*nops], "L%d %s", layer + 1, kind);
    *g = (gemm_op){names[*nops], ta, tb, m, n, k, beta, a, b, c, c_fp32};
    (*nops)++;
}

static double flops_of(const gemm_op *g)
{
    return 2.0 * g->m * (double)g->n * g->k;
}

/* Milliseconds per repetition of ops [from, to) run back to back. */
static double time_ops(cublasHandle_t h, cudaStream_t st, enum prec p,
                       const gemm_op *ops, int from, int to, const buffers *bs,
                       int iters)
{
    cudaEvent_t t0, t1;
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));
    for (int w = 0; w < 3; w++)
        for (int i = from; i < to; i++)
            run_gemm(h, p, &ops[i], bs);
    CK(cudaEventRecord(t0, st));
    for (int r = 0; r < iters; r++)
        for (int i = from; i < to; i++)
            run_gemm(h, p, &ops[i], bs);
    CK(cudaEventRecord(t1, st));
    CK(cudaEventSynchronize(t1));
    float ms = 0.0f;
    CK(cudaEventElapsedTime(&ms, t0, t1));
    CK(cudaEventDestroy(t0));
    CK(cudaEventDestroy(t1));
    return ms / iters;
}

static int arg_int(int argc, char **argv, const char *name, int dflt)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name))
            return atoi(argv[i + 1]);
    return dflt;
}

int main(int argc, char **argv)
{
    const int batch = arg_int(argc, argv, "--batch", 1024);
    const int width = arg_int(argc, argv, "--width", 4096);
    const int layers = arg_int(argc, argv, "--layers", 4);
    const int in0 = arg_int(argc, argv, "--in", width);
    const int out_last = arg_int(argc, argv, "--out", width);
    const int iters = arg_int(argc, argv, "--iters", 30);
    if (batch <= 0 || width <= 0 || layers <= 0 || layers > MAX_LAYERS ||
        in0 <= 0 || out_last <= 0 || iters <= 0) {
        fprintf(stderr, "gemm_ceiling: bad arguments (layers 1..%d)\n",
                MAX_LAYERS);
        return 2;
    }

    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        printf("gemm_ceiling: no CUDA device (%s)\n",
               e != cudaSuccess ? cudaGetErrorString(e)
                                : "none visible to this process");
        return 77;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    int rt = 0, blas_ver = 0;
    CK(cudaRuntimeGetVersion(&rt));

    cudaStream_t st;
    cublasHandle_t h;
    CK(cudaStreamCreate(&st));
    CKB(cublasCreate(&h));
    CKB(cublasSetStream(h, st));
    CKB(cublasGetVersion(h, &blas_ver));
    /* cuBLAS workspace: its default pool is fine for a ceiling. */
    printf("device: %s (cc %d.%d), CUDA runtime %d.%d, cuBLAS %d\n", prop.name,
           prop.major, prop.minor, rt / 1000, rt % 1000 / 10, blas_ver);
    printf("network: %d dense layers, %d -> %d x %d -> %d, batch %d\n", layers,
           in0, width, layers - 1, out_last, batch);

    /* Buffers: per layer x (B, in), W (out, in), y/dy (B, out), dW (out,
     * in), dx (B, in). Activations of layer i+1 reuse y of layer i. */
    buffers bs;
    memset(&bs, 0, sizeof bs);
    gemm_op ops[MAX_OPS];
    int nops = 0;
    int x = buf_new(&bs, (size_t)batch * in0);
    for (int l = 0; l < layers; l++) {
        int in = l == 0 ? in0 : width;
        int out = l == layers - 1 ? out_last : width;
        int w = buf_new(&bs, (size_t)out * in);
        int y = buf_new(&bs, (size_t)batch * out);
        int dy = buf_new(&bs, (size_t)batch * out);
        int dw = buf_new(&bs, (size_t)out * in);
        int dx = buf_new(&bs, (size_t)batch * in);
        add_op(ops, &nops, l, "forward", 0, 1, batch, out, in, 0.0f, x, w, y,
               0);
        add_op(ops, &nops, l, "dweight", 1, 0, out, in, batch, 1.0f, dy, x, dw,
               1);
        if (l > 0)
            add_op(ops, &nops, l, "dinput", 0, 0, batch, in, out, 0.0f, dy, w,
                   dx, 0);
        x = y;
    }
    size_t bytes = 0;
    for (int i = 0; i < bs.n; i++) {
        CK(cudaMalloc(&bs.f32[i], bs.elems[i] * sizeof(float)));
        CK(cudaMalloc(&bs.bf16[i], bs.elems[i] * sizeof(__nv_bfloat16)));
        fill_f32<<<1024, 256, 0, st>>>((float *)bs.f32[i], bs.elems[i],
                                       0x9e3779b9u * (unsigned)(i + 1));
        CK(cudaGetLastError());
        to_bf16<<<1024, 256, 0, st>>>((__nv_bfloat16 *)bs.bf16[i],
                                      (const float *)bs.f32[i], bs.elems[i]);
        CK(cudaGetLastError());
        bytes += bs.elems[i] * (sizeof(float) + sizeof(__nv_bfloat16));
    }
    CK(cudaStreamSynchronize(st));
    printf("device memory for the buffers: %.2f GiB\n",
           (double)bytes / (1u << 30));

    double step_flops = 0.0;
    for (int i = 0; i < nops; i++)
        step_flops += flops_of(&ops[i]);
    printf("\n%-14s %-5s %6s %6s %6s %10s %9s\n", "gemm", "prec", "m", "n", "k",
           "ms", "TFLOP/s");
    for (int p = 0; p < P_COUNT; p++) {
        CKB(cublasSetMathMode(h, p == P_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                             : CUBLAS_DEFAULT_MATH));
        for (int i = 0; i < nops; i++) {
            double ms =
                time_ops(h, st, (enum prec)p, ops, i, i + 1, &bs, iters);
            printf("%-14s %-5s %6d %6d %6d %10.4f %9.1f\n", ops[i].what,
                   prec_name[p], ops[i].m, ops[i].n, ops[i].k, ms,
                   flops_of(&ops[i]) / (ms * 1e9));
        }
        double ms = time_ops(h, st, (enum prec)p, ops, 0, nops, &bs, iters);
        printf("%-14s %-5s %20s %10.4f %9.1f   <- GEMM ceiling, %s\n",
               "step (all)", prec_name[p], "", ms, step_flops / (ms * 1e9),
               prec_name[p]);
    }
    printf("\nstep = %d GEMMs, %.1f GFLOP (forward + dweight + dinput, no "
           "dinput for layer 1)\n",
           nops, step_flops / 1e9);

    for (int i = 0; i < bs.n; i++) {
        CK(cudaFree(bs.f32[i]));
        CK(cudaFree(bs.bf16[i]));
    }
    CKB(cublasDestroy(h));
    CK(cudaStreamDestroy(st));
    return 0;
}
