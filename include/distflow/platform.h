/*
 * distflow/platform.h — what this build is and what this machine offers: the
 * build options, the CPU features used at run time, and the kernel variant
 * (instruction-set build of distflow's own hot kernels) in use.
 *
 * A DF_NATIVE=OFF build (the default) runs on any x86-64 CPU: its hot kernels
 * are compiled several times,
 *   "generic"  baseline x86-64 (SSE2),
 *   "avx2"     x86-64-v3: AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE (+ SSE4.2, POPCNT),
 *   "avx512"   x86-64-v4: the above + AVX-512 F/CD/BW/DQ/VL,
 * and the first kernel call picks the best one the CPU and the operating system
 * support (CPUID and XCR0). The environment variable DF_CPU_VARIANT (generic,
 * avx2, avx512; "auto" or empty = best) forces one, e.g. to test a lower variant
 * on a larger machine. A DF_NATIVE=ON build compiles everything once with
 * -march=native and has the single variant "native"; so does a build for a CPU
 * other than x86-64 ("generic"). Matmuls are oneDNN's, which dispatches on its own.
 */
#ifndef DISTFLOW_PLATFORM_H
#define DISTFLOW_PLATFORM_H

#include "distflow/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- build ------------------------------------------------------------------- */

/**
 * One line of build options, e.g. "Release, GNU 12.2.0, DF_NATIVE=OFF, kernels
 * generic avx2 avx512, MPI yes, OpenMP 201511" (what `distflow --version` prints).
 */
DF_API const char *df_build_summary(void);
/** CMAKE_BUILD_TYPE of the library, e.g. "Release". */
DF_API const char *df_build_type(void);
/** Compiler id and version, e.g. "GNU 12.2.0". */
DF_API const char *df_build_compiler(void);
/** true when built with DF_NATIVE=ON (-march=native, no kernel dispatch). */
DF_API bool df_build_native(void);

/* ---- CPU features -------------------------------------------------------------- */

/** Features distflow's kernels or oneDNN's use. The OS_* entries say whether the
 *  operating system saves the register state (XCR0), without which the
 *  instructions fault even when CPUID lists them. */
typedef enum df_cpu_feature {
    DF_CPU_SSE3,
    DF_CPU_SSSE3,
    DF_CPU_SSE41,
    DF_CPU_SSE42,
    DF_CPU_POPCNT,
    DF_CPU_AVX,
    DF_CPU_AVX2,
    DF_CPU_FMA,
    DF_CPU_F16C,
    DF_CPU_BMI1,
    DF_CPU_BMI2,
    DF_CPU_LZCNT,
    DF_CPU_MOVBE,
    DF_CPU_AVX512F,
    DF_CPU_AVX512CD,
    DF_CPU_AVX512BW,
    DF_CPU_AVX512DQ,
    DF_CPU_AVX512VL,
    DF_CPU_AVX512_VNNI,
    DF_CPU_AVX512_BF16,
    DF_CPU_AMX_TILE,
    DF_CPU_AMX_BF16,
    DF_CPU_OS_AVX,    /**< XCR0 bits 1-2: XMM and YMM state */
    DF_CPU_OS_AVX512, /**< XCR0 bits 5-7: opmask, ZMM_Hi256, Hi16_ZMM state */
    DF_CPU_OS_AMX,    /**< XCR0 bits 17-18: XTILECFG, XTILEDATA (Linux also needs a
                           per-process arch_prctl(ARCH_REQ_XCOMP_PERM), which oneDNN makes) */
    DF_CPU_N_FEATURES
} df_cpu_feature;

/** What CPUID and XGETBV report. All false (and empty strings) on other architectures. */
typedef struct df_cpu_info {
    bool has[DF_CPU_N_FEATURES];
    uint64_t xcr0;  /**< 0 when the OS has not enabled XSAVE (OSXSAVE clear) */
    char vendor[13]; /**< e.g. "GenuineIntel" */
    char brand[49];  /**< e.g. "Intel(R) Xeon(R) ...", trimmed */
} df_cpu_info;

/** Fill *out from CPUID leaves 1, 7 (subleaves 0 and 1), 0x80000001-4 and XCR0. */
DF_API void df_cpu_detect(df_cpu_info *out);
/** Lower-case name of a feature ("avx512bw", "os_avx512"); "?" when out of range. */
DF_API const char *df_cpu_feature_name(df_cpu_feature f);

/* ---- kernel variants ----------------------------------------------------------- */

/**
 * Select the kernel variant by name: "generic", "avx2", "avx512" ("native" in a
 * DF_NATIVE=ON build); NULL, "" or "auto" = the best this CPU supports.
 * Errors: DF_EINVAL for a name this build does not have (the message lists the
 * ones it has); DF_EUNSUPPORTED when the CPU or the OS lacks a feature the
 * variant needs (the message names the variant and the feature). On error the
 * variant in use does not change. Thread-safe; kernels already running finish
 * on the variant they started with.
 */
DF_API int df_kernels_select(const char *name);
/**
 * df_kernels_select(getenv("DF_CPU_VARIANT")), with the message prefixed by
 * "DF_CPU_VARIANT=<value>: ". The first kernel call does this by itself; a
 * program calls it first to report a bad value instead of running on the best
 * variant (what the first kernel call falls back to, noting why in
 * df_kernels_reason()).
 */
DF_API int df_kernels_init(void);
/** Name of the variant in use (selecting the default first if none is yet). */
DF_API const char *df_kernels_active(void);
/** Why that variant: e.g. "best this CPU supports", "forced by DF_CPU_VARIANT=avx2".
 *  Valid until the next selection. */
DF_API const char *df_kernels_reason(void);
/** The variants compiled in, space-separated, lowest first ("generic avx2 avx512"). */
DF_API const char *df_kernels_compiled(void);
/**
 * Whether variant `name` can run on a CPU with features *c: 0, or DF_EINVAL
 * (unknown name) / DF_EUNSUPPORTED (a feature missing) with the message set as
 * df_kernels_select does. Selects nothing.
 */
DF_API int df_kernels_check(const char *name, const df_cpu_info *c);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_PLATFORM_H */
