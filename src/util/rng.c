/* xoshiro256** seeded through splitmix64 (see include/distflow/rng.h). */
#include "distflow/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t df_rng_key(uint64_t seed, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t x = seed;
    uint64_t h = splitmix64(&x);
    x = h ^ a;
    h = splitmix64(&x);
    x = h ^ b;
    h = splitmix64(&x);
    x = h ^ c;
    return splitmix64(&x);
}

void df_rng_seed(df_rng *r, uint64_t key)
{
    uint64_t x = key;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t df_rng_u64(df_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double df_rng_uniform(df_rng *r) { return (double)(df_rng_u64(r) >> 11) * 0x1.0p-53; }

uint64_t df_rng_below(df_rng *r, uint64_t n)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t v;
    do
        v = df_rng_u64(r);
    while (v >= limit);
    return v % n;
}

double df_rng_normal(df_rng *r)
{
    double u1 = 1.0 - df_rng_uniform(r); /* (0, 1] so log is finite */
    double u2 = df_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void df_rng_shuffle_i64(df_rng *r, int64_t *v, int64_t n)
{
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)df_rng_below(r, (uint64_t)i + 1);
        int64_t t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}
