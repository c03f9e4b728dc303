/* Non-finite float32 search (finite.h). */
#include "util/finite.h"

#include <string.h>

enum { BLOCK = 1 << 16 }; /* elements per OpenMP work item */

static inline int bad_bits(const float *p)
{
    uint32_t b;
    memcpy(&b, p, sizeof b); /* bit test: isfinite() may fold away under -ffinite-math-only */
    return (b & 0x7f800000u) == 0x7f800000u;
}

int64_t df_first_nonfinite(const float *x, int64_t n)
{
    int64_t n_blocks = (n + BLOCK - 1) / BLOCK, first = n;
#pragma omp parallel for schedule(static) reduction(min : first) if (n_blocks > 1)
    for (int64_t k = 0; k < n_blocks; k++) {
        int64_t s = k * BLOCK, e = s + BLOCK < n ? s + BLOCK : n;
        int any = 0;
        for (int64_t i = s; i < e; i++) /* branch-free: vectorises */
            any |= bad_bits(x + i);
        for (int64_t i = s; any && i < e; i++)
            if (bad_bits(x + i)) {
                first = i < first ? i : first;
                break;
            }
    }
    return first < n ? first : -1;
}
