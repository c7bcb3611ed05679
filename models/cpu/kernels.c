/*
 * kernels.c - the CPU engine's GEMM kernels chosen by CPUID feature
 * bits (see kernels.h for why and how).
 *
 * Invariant: after cpu_kernels_select() returns, the info describes the
 * OpenBLAS core actually loaded in this process (openblas_get_corename()),
 * whatever was asked for.
 */
#include "models/cpu/kernels.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* OpenBLAS's own entry points (openblas_config.h, not in every cblas.h). */
char *openblas_get_corename(void);
void openblas_set_num_threads(int num_threads);

/* Set before the one re-execution: the core asked for, and the core
 * OpenBLAS chose at the first load (for the reason and the record). */
#define ENV_SET "TRAINYARD_CPU_KERNELS_SET"
#define ENV_DETECTED "TRAINYARD_CPU_KERNELS_DETECTED"

static const char *const isa_names[CPU_ISA_COUNT] = {
    [CPU_ISA_GENERIC] = "generic",
    [CPU_ISA_AVX] = "avx",
    [CPU_ISA_AVX2] = "avx2",
    [CPU_ISA_AVX512] = "avx512",
};
_Static_assert(sizeof isa_names / sizeof isa_names[0] == CPU_ISA_COUNT,
               "one name per ISA");

/* OpenBLAS x86-64 core names and the ISA their SGEMM kernels use
 * (kernel/x86_64/KERNEL.<core> in OpenBLAS 0.3.21). */
static const struct {
    const char *core;
    cpu_isa isa;
} openblas_cores[] = {
    {"Prescott", CPU_ISA_GENERIC},  {"Core2", CPU_ISA_GENERIC},
    {"Penryn", CPU_ISA_GENERIC},    {"Dunnington", CPU_ISA_GENERIC},
    {"Nehalem", CPU_ISA_GENERIC},   {"Atom", CPU_ISA_GENERIC},
    {"Opteron", CPU_ISA_GENERIC},   {"Opteron_SSE3", CPU_ISA_GENERIC},
    {"Barcelona", CPU_ISA_GENERIC}, {"Nano", CPU_ISA_GENERIC},
    {"Sandybridge", CPU_ISA_AVX},   {"Bulldozer", CPU_ISA_AVX},
    {"Piledriver", CPU_ISA_AVX},    {"Steamroller", CPU_ISA_AVX},
    {"Haswell", CPU_ISA_AVX2},      {"Zen", CPU_ISA_AVX2},
    {"Excavator", CPU_ISA_AVX2},    {"SkylakeX", CPU_ISA_AVX512},
    {"Cooperlake", CPU_ISA_AVX512}, {"SapphireRapids", CPU_ISA_AVX512},
};

const char *cpu_isa_name(cpu_isa isa)
{
    return isa >= 0 && isa < CPU_ISA_COUNT ? isa_names[isa] : "unknown";
}

/* The table row of a core name (case-insensitive), or -1. */
static int core_index(const char *core)
{
    for (size_t i = 0; i < sizeof openblas_cores / sizeof openblas_cores[0];
         i++)
        if (core && !strcasecmp(core, openblas_cores[i].core))
            return (int)i;
    return -1;
}

static int core_known(const char *core) { return core_index(core) >= 0; }

cpu_isa cpu_openblas_core_isa(const char *core)
{
    int i = core_index(core);
    return i >= 0 ? openblas_cores[i].isa : CPU_ISA_GENERIC;
}

const char *cpu_isa_openblas_core(cpu_isa isa)
{
    switch (isa) {
        case CPU_ISA_AVX512: return "SkylakeX";
        case CPU_ISA_AVX2: return "Haswell";
        case CPU_ISA_AVX: return "Sandybridge";
        default: return NULL;
    }
}

#if defined(__x86_64__) || defined(__i386__)
static unsigned long long xgetbv0(void)
{
    unsigned eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}
#endif

void cpu_features_read(cpu_features *f)
{
    memset(f, 0, sizeof *f);
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return;
    f->sse3 = !!(c & bit_SSE3);
    /* The OS must save the registers: XMM+YMM (XCR0 bits 1, 2), and for
     * AVX-512 also the opmask and both ZMM halves (bits 5, 6, 7); AMX
     * tiles are bits 17 and 18. */
    unsigned long long xcr0 = (c & bit_OSXSAVE) ? xgetbv0() : 0;
    int os_ymm = (xcr0 & 0x6) == 0x6;
    int os_zmm = os_ymm && (xcr0 & 0xe0) == 0xe0;
    int os_amx = (xcr0 & 0x60000) == 0x60000;
    f->avx = os_ymm && (c & bit_AVX);
    f->fma = os_ymm && (c & bit_FMA);
    if (__get_cpuid_max(0, NULL) < 7)
        return;
    __cpuid_count(7, 0, a, b, c, d);
    f->avx2 = os_ymm && (b & (1u << 5));
    f->avx512f = os_zmm && (b & (1u << 16));
    f->avx512dq = os_zmm && (b & (1u << 17));
    f->avx512cd = os_zmm && (b & (1u << 28));
    f->avx512bw = os_zmm && (b & (1u << 30));
    f->avx512vl = os_zmm && (b & (1u << 31));
    f->amx_bf16 = os_amx && (d & (1u << 22));
    f->amx_tile = os_amx && (d & (1u << 24));
    f->amx_int8 = os_amx && (d & (1u << 25));
    unsigned max7 = a;
    if (max7 >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        f->avx512_bf16 = os_zmm && (a & (1u << 5));
    }
#endif
}

cpu_isa cpu_features_isa(const cpu_features *f)
{
    if (f->avx512f && f->avx512cd && f->avx512bw && f->avx512dq &&
        f->avx512vl && f->avx2 && f->fma)
        return CPU_ISA_AVX512;
    if (f->avx2 && f->fma)
        return CPU_ISA_AVX2;
    if (f->avx)
        return CPU_ISA_AVX;
    return CPU_ISA_GENERIC;
}

int cpu_kernels_decide(const char *policy, cpu_isa cpu, const char *loaded,
                       char *core, int core_size, char *reason, int reason_size)
{
    cpu_isa have = cpu_openblas_core_isa(loaded);
    core[0] = '\0';
    if (policy && !strcasecmp(policy, "openblas")) {
        snprintf(reason, reason_size,
                 "TRAINYARD_CPU_KERNELS=openblas: OpenBLAS's own choice, %s",
                 loaded);
        return 0;
    }
    if (policy && *policy && strcasecmp(policy, "auto")) {
        if (!core_known(policy)) {
            snprintf(reason, reason_size,
                     "TRAINYARD_CPU_KERNELS=%s is not an OpenBLAS x86-64 core "
                     "trainyard knows (auto, openblas, SkylakeX, Haswell, "
                     "Sandybridge, Prescott, ...): kept %s",
                     policy, loaded);
            return -1;
        }
        if (cpu_openblas_core_isa(policy) > cpu) {
            snprintf(reason, reason_size,
                     "TRAINYARD_CPU_KERNELS=%s needs %s, which this CPU "
                     "lacks (CPUID): kept %s",
                     policy, cpu_isa_name(cpu_openblas_core_isa(policy)),
                     loaded);
            return -1;
        }
        if (strcasecmp(policy, loaded))
            snprintf(core, core_size, "%s", policy);
        snprintf(reason, reason_size, "TRAINYARD_CPU_KERNELS=%s", policy);
        return 0;
    }
    const char *want = cpu_isa_openblas_core(cpu);
    if (!want) {
        snprintf(reason, reason_size,
                 "this CPU reports no AVX (CPUID), so OpenBLAS's generic "
                 "kernels (%s) are the fastest it can run",
                 loaded);
        return 0;
    }
    if (have >= cpu) {
        snprintf(reason, reason_size,
                 "OpenBLAS chose %s, whose kernels use %s, the best this "
                 "CPU has (CPUID)",
                 loaded, cpu_isa_name(have));
        return 0;
    }
    snprintf(core, core_size, "%s", want);
    snprintf(reason, reason_size,
             "chosen by the CPU's features (CPUID: %s): OpenBLAS had loaded "
             "%s (%s kernels)",
             cpu_isa_name(cpu), loaded, cpu_isa_name(have));
    return 0;
}

static cpu_kernels_info g_info;
static int g_selected;

static void fill_info(const char *policy, cpu_isa cpu, const char *detected,
                      const char *reason)
{
    const char *now = openblas_get_corename();
    snprintf(g_info.provider, sizeof g_info.provider, "openblas");
    snprintf(g_info.core, sizeof g_info.core, "%s", now ? now : "unknown");
    snprintf(g_info.detected, sizeof g_info.detected, "%s", detected);
    cpu_isa in_use = cpu_openblas_core_isa(g_info.core);
    snprintf(g_info.isa, sizeof g_info.isa, "%s", cpu_isa_name(in_use));
    snprintf(g_info.cpu_isa, sizeof g_info.cpu_isa, "%s", cpu_isa_name(cpu));
    snprintf(g_info.policy, sizeof g_info.policy, "%s",
             policy && *policy ? policy : "auto");
    g_info.generic_fallback = in_use < cpu || in_use == CPU_ISA_GENERIC;
    if (in_use < cpu)
        snprintf(g_info.reason, sizeof g_info.reason,
                 "%s; these kernels use %s although the CPU has %s, so GEMM "
                 "runs several times slower than it could",
                 reason, cpu_isa_name(in_use), cpu_isa_name(cpu));
    else
        snprintf(g_info.reason, sizeof g_info.reason, "%s", reason);
}

void cpu_kernels_select(char **argv)
{
    cpu_features f;
    cpu_features_read(&f);
    cpu_isa cpu = cpu_features_isa(&f);
    const char *policy = getenv("TRAINYARD_CPU_KERNELS");
    const char *loaded = openblas_get_corename();
    if (!loaded)
        loaded = "unknown";
    const char *asked = getenv(ENV_SET);
    const char *first = getenv(ENV_DETECTED);
    char detected[32];
    snprintf(detected, sizeof detected, "%s", asked && first ? first : loaded);

    char core[32], reason[256];
    int rc = cpu_kernels_decide(policy, cpu, detected, core, sizeof core,
                                reason, sizeof reason);
    g_selected = 1;
    if (rc != 0 || !core[0] || !strcasecmp(core, loaded)) {
        /* Nothing to change: OpenBLAS's choice stands, or this process is
         * the re-execution (or a child of one) and runs what was asked. */
        fill_info(policy, cpu, detected, reason);
        return;
    }
    if (asked) {
        /* Asked once already and OpenBLAS still runs another core: it
         * ignores OPENBLAS_CORETYPE (not a DYNAMIC_ARCH build?). No loop. */
        char why[256];
        snprintf(why, sizeof why,
                 "%s; but OpenBLAS runs %s although OPENBLAS_CORETYPE=%s was "
                 "set (a build without DYNAMIC_ARCH?)",
                 reason, loaded, core);
        fill_info(policy, cpu, detected, why);
        return;
    }
    setenv("OPENBLAS_CORETYPE", core, 1);
    setenv(ENV_SET, core, 1);
    setenv(ENV_DETECTED, loaded, 1);
    execv("/proc/self/exe", argv);
    /* Only on failure: keep running on what is loaded. */
    char why[256];
    snprintf(why, sizeof why, "%s; re-executing to load %s failed (%s)", reason,
             core, strerror(errno));
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv(ENV_SET);
    unsetenv(ENV_DETECTED);
    fill_info(policy, cpu, loaded, why);
}

const cpu_kernels_info *cpu_kernels_get(void)
{
    if (!g_selected) {
        cpu_features f;
        cpu_features_read(&f);
        const char *loaded = openblas_get_corename();
        fill_info("openblas", cpu_features_isa(&f), loaded ? loaded : "unknown",
                  "OpenBLAS's own choice (this program does not select "
                  "kernels)");
        g_selected = 1;
    }
    return &g_info;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double cpu_kernels_measure(double seconds)
{
    enum { N = 256 };
    cpu_kernels_get();
    float *a = malloc(sizeof(float) * N * N * 3);
    if (!a)
        return 0;
    float *b = a + N * N, *c = b + N * N;
    for (int i = 0; i < N * N; i++) {
        a[i] = (float)(i % 17) / 17.0f - 0.5f;
        b[i] = (float)(i % 13) / 13.0f - 0.5f;
    }
    openblas_set_num_threads(1);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N,
                b, N, 0.0f, c, N);
    double best = 0;
    double t_end = now_s() + seconds;
    int reps = 0;
    do {
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a,
                    N, b, N, 0.0f, c, N);
        double dt = now_s() - t0;
        double rate = dt > 0 ? 2.0 * N * N * N / dt / 1e9 : 0;
        if (rate > best)
            best = rate;
        reps++;
    } while (reps < 3 || now_s() < t_end);
    free(a);
    g_info.gemm_gflops = best;
    return best;
}
