/*
 * kernels.h - which GEMM kernels the CPU engine runs, chosen from the
 * CPU's feature bits, never from its model name.
 *
 * The engine's GEMMs (dense layers, im2col convolutions) go through
 * OpenBLAS. Debian's OpenBLAS is a DYNAMIC_ARCH build: it holds kernels for
 * every x86 generation and picks one when it loads, by CPU family and model.
 * A CPU it does not know (a cloud VM that hides the model, a CPU newer than
 * the library) gets its generic SSE3 "Prescott" kernels, several times
 * slower than the AVX2 or AVX-512 ones the CPU can run. OpenBLAS reads
 * OPENBLAS_CORETYPE only while it loads, before main(), so
 * cpu_kernels_select() runs first in main(): it reads CPUID (and XGETBV,
 * whether the OS saves the wider registers), names the kernel set the
 * features allow, and when OpenBLAS loaded another one it sets
 * OPENBLAS_CORETYPE and executes the program again, once. Child processes
 * (training workers) inherit the setting.
 *
 * TRAINYARD_CPU_KERNELS chooses the policy:
 *   auto      (default) by the CPU's features, over OPENBLAS_CORETYPE too
 *   openblas  whatever OpenBLAS chose itself (OPENBLAS_CORETYPE honoured)
 *   <core>    that OpenBLAS core, e.g. SkylakeX, Haswell, Sandybridge,
 *             Prescott (for comparisons; a core the CPU cannot run would
 *             crash, so a core needing features it lacks is refused)
 *
 * For a given core and thread count the results are bit-identical run to
 * run; different cores round differently in the last bits.
 */
#ifndef TY_CPU_KERNELS_H
#define TY_CPU_KERNELS_H

/* What CPUID and XGETBV say; each flag is set only when the OS also saves
 * the registers that the feature uses. */
typedef struct {
    int sse3, avx, fma, avx2;
    int avx512f, avx512cd, avx512bw, avx512dq, avx512vl, avx512_bf16;
    int amx_tile, amx_bf16, amx_int8;
} cpu_features;

/* The instruction sets, weakest first. */
typedef enum {
    CPU_ISA_GENERIC = 0, /* SSE3 or less: OpenBLAS's Prescott-class kernels */
    CPU_ISA_AVX,
    CPU_ISA_AVX2,   /* AVX2 + FMA */
    CPU_ISA_AVX512, /* AVX-512 F, CD, BW, DQ, VL */
    CPU_ISA_COUNT
} cpu_isa;

/* "generic", "avx", "avx2", "avx512". */
const char *cpu_isa_name(cpu_isa isa);

/* This CPU's features (all zero off x86). */
void cpu_features_read(cpu_features *f);

/* The strongest ISA the features allow, and the OpenBLAS core whose SGEMM
 * kernels use it ("SkylakeX", "Haswell", "Sandybridge"; NULL for generic:
 * OpenBLAS's own choice is kept). */
cpu_isa cpu_features_isa(const cpu_features *f);
const char *cpu_isa_openblas_core(cpu_isa isa);

/* The ISA an OpenBLAS core name's SGEMM kernels need (case-insensitive;
 * unknown names are CPU_ISA_GENERIC). */
cpu_isa cpu_openblas_core_isa(const char *core);

/* What the engine runs on, filled by cpu_kernels_select(). */
typedef struct {
    char provider[16];    /* "openblas" */
    char core[32];        /* openblas_get_corename() now, e.g. "SkylakeX" */
    char detected[32];    /* what OpenBLAS chose at its first load */
    char isa[16];         /* cpu_isa_name() of the core in use */
    char cpu_isa[16];     /* the best the CPU's features allow */
    char policy[32];      /* "auto", "openblas" or the forced core */
    char reason[512];     /* why this core, and what it costs */
    int generic_fallback; /* 1: kernels weaker than the CPU allows */
    double gemm_gflops;   /* measured single-thread SGEMM rate, 0 unmeasured */
} cpu_kernels_info;

/* Chooses the kernels as described above. Call it first thing in main(),
 * before any thread starts: it may execv("/proc/self/exe", argv) (once: a
 * marker in the environment stops a second time). Returns with the
 * choice recorded; never fails (an exec that fails keeps the kernels
 * OpenBLAS chose, and the reason says so). */
void cpu_kernels_select(char **argv);

/* The choice made by cpu_kernels_select(), or, in a program that never
 * called it, what OpenBLAS runs now (policy "openblas"). */
const cpu_kernels_info *cpu_kernels_get(void);

/* Measures single-thread SGEMM at n x n x n (n = 256: the size of the
 * engine's layers) for about `seconds`, records it in the info and returns
 * GFLOP/s. Sets OpenBLAS to one thread, as the engine runs it. */
double cpu_kernels_measure(double seconds);

/* The pure decision, for tests: the policy string (NULL = "auto"), the
 * CPU's best ISA and OpenBLAS's loaded core give the core to run ("" =
 * keep the loaded one) and the reason. Returns 0, or -1 when the policy
 * names a core this CPU cannot run (reason says why; the loaded core is
 * kept). */
int cpu_kernels_decide(const char *policy, cpu_isa cpu, const char *loaded,
                       char *core, int core_size, char *reason,
                       int reason_size);

#endif
