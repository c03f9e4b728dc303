/* Build options (distflow/platform.h), from definitions CMake gives this file. */
#include "util/kernels.h"

#ifndef DF_BUILD_TYPE
#define DF_BUILD_TYPE "unknown"
#endif
#ifndef DF_BUILD_COMPILER
#define DF_BUILD_COMPILER "unknown"
#endif
#ifndef DF_BUILD_NATIVE
#define DF_BUILD_NATIVE 0
#endif
#ifdef DF_HAVE_MPI
#define MPI_STR "yes"
#else
#define MPI_STR "no"
#endif
#if DF_BUILD_NATIVE
#define NATIVE_STR "ON"
#else
#define NATIVE_STR "OFF"
#endif
#define STR_(x) #x
#define STR(x) STR_(x)

const char *df_build_type(void) { return DF_BUILD_TYPE; }
const char *df_build_compiler(void) { return DF_BUILD_COMPILER; }
bool df_build_native(void) { return DF_BUILD_NATIVE; }

const char *df_build_summary(void)
{
    return DF_BUILD_TYPE ", " DF_BUILD_COMPILER ", DF_NATIVE=" NATIVE_STR ", kernels " DF_KERNELS_COMPILED
                         ", MPI " MPI_STR ", OpenMP " STR(_OPENMP);
}
