/* memtrack.h (internal) — bytes live and their peak, for an allocator that cannot say them itself
 * (cudaMalloc / cudaFree: the CUDA backend's perf/max_memory_allocated_gb). */
#ifndef DF_UTIL_MEMTRACK_H
#define DF_UTIL_MEMTRACK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" { /* the CUDA backend's .cu files use it */
#endif

/** Live allocations by address (an open-addressing table) with their sum and its peak. Zero it to start. */
typedef struct df_memtrack {
    const void **keys;
    int64_t *sizes;
    int64_t cap, n;   /* slots (a power of two or 0), allocations live */
    int64_t live, peak; /* bytes */
} df_memtrack;

/** Record p (not NULL, not recorded yet) as `bytes` live; raises peak. DF_ENOMEM (nothing recorded). */
int df_memtrack_add(df_memtrack *t, const void *p, int64_t bytes);
/** Forget p; an address never recorded (or NULL) changes nothing. */
void df_memtrack_remove(df_memtrack *t, const void *p);
/** Free the table (live and peak stay readable). */
void df_memtrack_free(df_memtrack *t);

#ifdef __cplusplus
}
#endif

#endif
