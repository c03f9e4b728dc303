/*
 * kernels.h (internal) — runtime dispatch of the multi-compiled kernel
 * translation units (distflow/platform.h explains the variants).
 *
 * With DF_NATIVE=OFF on x86-64, CMake compiles each kernel TU once per variant
 * with -DDF_KVARIANT=<name> and that variant's -m flags. The TU's first
 * include is its layer's kernels_rename.h, which maps every function the TU
 * defines to <name>__<variant> (DF_KSYM), so the copies link side by side and
 * call each other directly. The layer's kernels_dispatch.c (baseline code)
 * defines the plain names as wrappers that call the active variant's copy
 * (DF_KDISPATCH). A missing rename shows as a duplicate symbol at link time,
 * a missing wrapper as an undefined one.
 * Without DF_KVARIANT (DF_NATIVE=ON, or a non-x86 build) the kernel TUs compile
 * once under their plain names and there is nothing to dispatch.
 */
#ifndef DF_UTIL_KERNELS_H
#define DF_UTIL_KERNELS_H

#include "distflow/platform.h"

/** Variant indices of a multi-variant build, lowest first. */
enum { DF_KV_GENERIC, DF_KV_AVX2, DF_KV_AVX512, DF_KV_COUNT };

/** The variants compiled in (df_kernels_compiled), a string literal. */
#if defined(DF_KERNELS_SINGLE)
#define DF_KERNELS_COMPILED DF_KERNELS_SINGLE
#else
#define DF_KERNELS_COMPILED "generic avx2 avx512"
#endif

/** Index of the variant in use (DF_KV_*; 0 in a single-variant build), selected
 *  on first use as df_kernels_init does, falling back to the best variant when
 *  DF_CPU_VARIANT is bad. Cheap: one atomic load after the first call. */
int df_kernels_index(void);

#define DF_KSYM__(n, v) n##__##v
#define DF_KSYM_(n, v) DF_KSYM__(n, v)
/** name__<variant> inside a variant TU. */
#define DF_KSYM(n) DF_KSYM_(n, DF_KVARIANT)

#if defined(DF_KVARIANT)
/* The copies stay internal even where the public header exports the plain name. */
#undef DF_API
#define DF_API
/* The -m flags CMake gives a variant must provide what its CPU check requires. */
#if defined(DF_KVARIANT_AVX2) && !(defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
#error "kernel variant avx2 compiled without -mavx2 -mfma -mf16c"
#endif
#if defined(DF_KVARIANT_AVX512) && !(defined(__AVX512F__) && defined(__AVX512BW__) &&   \
                                     defined(__AVX512DQ__) && defined(__AVX512VL__))
#error "kernel variant avx512 compiled without -mavx512f/bw/dq/vl"
#endif
#if (defined(DF_KVARIANT_GENERIC) && defined(__AVX__)) ||                                 \
    (defined(DF_KVARIANT_AVX2) && defined(__AVX512F__))
#error "kernel variant compiled with more than its CPU check covers"
#endif
#endif

/* Declare the variants of kernel `name` and define the plain name as a wrapper
 * calling the active one. params / args: the parenthesised parameter and
 * argument lists. */
#define DF_KVARIANTS_OF(name)                                                                     \
    extern __typeof__(name) name##__generic, name##__avx2, name##__avx512;                        \
    static __typeof__(name) *const name##_variants[DF_KV_COUNT] = {name##__generic, name##__avx2, \
                                                                   name##__avx512}

#define DF_KDISPATCH_VOID(name, params, args)                                                     \
    DF_KVARIANTS_OF(name);                                                                        \
    void name params { name##_variants[df_kernels_index()] args; }

#define DF_KDISPATCH(ret, name, params, args)                                                     \
    DF_KVARIANTS_OF(name);                                                                        \
    ret name params { return name##_variants[df_kernels_index()] args; }

#endif /* DF_UTIL_KERNELS_H */
