/* hash.h (internal) — FNV-1a (64-bit) string hashing. */
#ifndef DF_UTIL_HASH_H
#define DF_UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* FNV-1a of the n bytes at s. */
static inline uint64_t df_fnv1a_n(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

/* FNV-1a of the NUL-terminated string s. */
static inline uint64_t df_fnv1a(const char *s)
{
    return df_fnv1a_n(s, strlen(s));
}

#endif /* DF_UTIL_HASH_H */
