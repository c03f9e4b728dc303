/* finite.h (internal) — find NaN / +-Inf in float32 arrays (the non-finite guards, docs/numerics.md). */
#ifndef DF_UTIL_FINITE_H
#define DF_UTIL_FINITE_H

#include <stdint.h>

/**
 * Index of the first element of x[0..n) that is NaN or +-Inf, or -1 when every element is
 * finite. Tests the exponent bits (so it holds under -ffast-math too); one pass over the
 * array, in blocks spread over the OpenMP threads, cheaper than the copy that usually precedes
 * it. x may be unaligned.
 */
int64_t df_first_nonfinite(const float *x, int64_t n);

#endif
