/*
 * distflow/rng.h — seeded pseudo-random numbers.
 *
 * Every random draw in distflow comes from a df_rng whose seed is derived from
 * (config seed, rank, step, sample, ...) with df_rng_key(), so a run is
 * reproducible and independent of thread scheduling (docs/conventions.md §6).
 * Generator: xoshiro256** (Blackman & Vigna 2018), seeded through splitmix64.
 */
#ifndef DISTFLOW_RNG_H
#define DISTFLOW_RNG_H

#include "distflow/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct df_rng {
    uint64_t s[4];
} df_rng;

/** Mix a base seed with up to three stream coordinates into one 64-bit key. */
DF_API uint64_t df_rng_key(uint64_t seed, uint64_t a, uint64_t b, uint64_t c);

/** Seed `r` from a key (e.g. df_rng_key(seed, rank, step, sample)). */
DF_API void df_rng_seed(df_rng *r, uint64_t key);

/** Next raw 64-bit value. */
DF_API uint64_t df_rng_u64(df_rng *r);

/** Uniform double in [0, 1) with 53 random bits. */
DF_API double df_rng_uniform(df_rng *r);

/** Uniform integer in [0, n); n > 0. Unbiased (rejection sampling). */
DF_API uint64_t df_rng_below(df_rng *r, uint64_t n);

/** Standard normal N(0, 1) (Box–Muller; one value per call). */
DF_API double df_rng_normal(df_rng *r);

/** Fisher–Yates shuffle of `n` int64 values in place. */
DF_API void df_rng_shuffle_i64(df_rng *r, int64_t *v, int64_t n);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_RNG_H */
