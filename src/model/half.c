/*
 * float32 <-> bfloat16 / IEEE binary16 conversions (safetensors.h): scalar
 * reference versions and blocked array versions (OpenMP, F16C on x86).
 */
#include "model/safetensors.h"

#include <string.h>
#if defined(__F16C__)
#include <immintrin.h>
#endif

/* Elements per conversion block; more than 4 blocks go parallel. */
#define BLOCK 16384

/* ---- scalar conversions ------------------------------------------------------ */

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float df_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t df_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign and top payload, force quiet */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round half to even on the dropped 16 bits */
    return (uint16_t)(u >> 16);
}

float df_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) /* inf, or NaN with its payload widened and quieted (as F16C does) */
        return bits_f32(sign | 0x7f800000u | (man ? 0x400000u : 0) | (man << 13));
    if (exp == 0) {
        if (man == 0)
            return bits_f32(sign);
        /* subnormal: man * 2^-24, exact in float32 */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t df_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: keep the top payload bits, force quiet */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* >= 65520 (incl. inf) rounds to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: subnormal result */
        if (a < 0x33000000u) /* below 2^-25: rounds to zero */
            return sign;
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* value / 2^-24 = m * 2^(e - 126) */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u)))
            r++;
        return (uint16_t)(sign | r);
    }
    uint32_t v = a - 0x38000000u; /* rebias the exponent from 127 to 15 */
    v += 0xfffu + ((v >> 13) & 1u);
    return (uint16_t)(sign | (v >> 13));
}

/* ---- array conversions --------------------------------------------------------- */

/* Serial kernels on one block; the callers spread blocks over OpenMP threads.
 * With F16C (x86) half <-> float uses the hardware instructions, which round
 * to nearest even and handle subnormals, inf and NaN exactly as the scalar code. */
static void f16_block_to_f32(const unsigned char *s, float *d, int64_t n)
{
    int64_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 2 * i))));
#endif
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        d[i] = df_f16_to_f32(h);
    }
}

static void f32_block_to_f16(const float *s, uint16_t *d, int64_t n)
{
    int64_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; i++)
        d[i] = df_f32_to_f16(s[i]);
}

static void bf16_block_to_f32(const unsigned char *s, float *d, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        d[i] = df_bf16_to_f32(h);
    }
}

static void f32_block_to_bf16(const float *s, uint16_t *d, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        d[i] = df_f32_to_bf16(s[i]);
}

void df_half_from_f32_array(df_dtype dt, const float *src, void *dst, int64_t n)
{
    if (dt == DF_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * 4);
        return;
    }
    int64_t nb = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (nb > 4)
    for (int64_t b = 0; b < nb; b++) {
        int64_t lo = b * BLOCK, m = n - lo < BLOCK ? n - lo : BLOCK;
        if (dt == DF_DTYPE_BF16)
            f32_block_to_bf16(src + lo, (uint16_t *)dst + lo, m);
        else
            f32_block_to_f16(src + lo, (uint16_t *)dst + lo, m);
    }
}

void df_half_to_f32_array(df_dtype dt, const void *src_v, float *dst, int64_t n)
{
    const unsigned char *src = src_v;
    if (dt == DF_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * 4);
        return;
    }
    int64_t nb = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (nb > 4)
    for (int64_t b = 0; b < nb; b++) {
        int64_t lo = b * BLOCK, m = n - lo < BLOCK ? n - lo : BLOCK;
        if (dt == DF_DTYPE_BF16)
            bf16_block_to_f32(src + 2 * lo, dst + lo, m);
        else
            f16_block_to_f32(src + 2 * lo, dst + lo, m);
    }
}
