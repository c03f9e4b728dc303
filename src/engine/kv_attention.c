/*
 * Decode-time attention over the KV cache (df_kv_attention,
 * engine/rollout_internal.h). A kernel TU, compiled per instruction-set
 * variant (util/kernels.h): in rollout it is the largest share of the time
 * after the matmuls.
 */
#include "engine/kernels_rename.h" /* first: a kernel TU */

#include "engine/rollout_internal.h"

#include <math.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <omp.h>
#include <string.h>

#if defined(__AVX512F__)
/* a . b with two 16-lane FMA accumulators; the order depends only on n. */
static inline float dot16(const float *a, const float *b, int64_t n)
{
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
        s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}
#else
/* a . b with 16 independent partial sums: vectorisable without reassociation
 * flags, and the summation order depends only on n. */
static inline float dot16(const float *restrict a, const float *restrict b, int64_t n)
{
    float acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
#pragma omp simd
        for (int l = 0; l < 16; l++)
            acc[l] += a[i + l] * b[i + l];
    }
    for (int l = 0; i < n; i++, l++)
        acc[l] += a[i] * b[i];
    for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; l++)
            acc[l] += acc[l + w];
    return acc[0];
}
#endif

/* o[n] += p * v[n] */
static inline void axpy(float *restrict o, float p, const float *restrict v, int64_t n)
{
#pragma omp simd
    for (int64_t d = 0; d < n; d++)
        o[d] += p * v[d];
}

/* Attention of all nh query heads of one row over positions [0, len) of its
 * slot. Positions outer, heads inner: each K / V row is read once, whole. */
static void attend_row(float *out, const float *q, const float *K, const float *V, int64_t kvd,
                       int64_t len, int64_t nh, int64_t g, int64_t hd, float *sc, int64_t max_len)
{
    float scale = 1.0f / sqrtf((float)hd);
    for (int64_t j = 0; j < len; j++) {
        const float *kj = K + j * kvd;
        for (int64_t h = 0; h < nh; h++)
            sc[h * max_len + j] = dot16(q + h * hd, kj + h / g * hd, hd) * scale;
    }
    for (int64_t h = 0; h < nh; h++) {
        float *s = sc + h * max_len, mx = -INFINITY, sum = 0.0f;
        for (int64_t j = 0; j < len; j++)
            mx = s[j] > mx ? s[j] : mx;
        for (int64_t j = 0; j < len; j++)
            sum += (s[j] = expf(s[j] - mx));
        float inv = 1.0f / sum;
        for (int64_t j = 0; j < len; j++)
            s[j] *= inv;
    }
    memset(out, 0, (size_t)(nh * hd) * sizeof(float));
    for (int64_t j = 0; j < len; j++) {
        const float *vj = V + j * kvd;
        for (int64_t h = 0; h < nh; h++)
            axpy(out + h * hd, sc[h * max_len + j], vj + h / g * hd, hd);
    }
}

/* The first position the row at `pos` attends to: 0, or the start of its window. */
static inline int64_t window_start(int64_t pos, int64_t window)
{
    return window > 0 && pos + 1 > window ? pos + 1 - window : 0;
}

void df_kv_attention(float *out, const float *q, const df_kv_cache *kv, int64_t layer,
                     const int32_t *slot, const int32_t *pos, int64_t n, int64_t nh,
                     int64_t nkv, int64_t hd, int64_t window, float *scores)
{
    int64_t g = nh / nkv, qd = nh * hd, work = 0;
    for (int64_t r = 0; r < n; r++)
        work += ((int64_t)pos[r] + 1 - window_start(pos[r], window)) * qd;
#pragma omp parallel for schedule(dynamic, 2) if (work > DF_PAR_MIN_WORK)
    for (int64_t r = 0; r < n; r++) {
        float *sc = scores + (int64_t)omp_get_thread_num() * nh * kv->max_len;
        const int64_t j0 = window_start(pos[r], window);
        const float *K = df_kv_row(kv, kv->k, layer, slot[r], j0);
        const float *V = df_kv_row(kv, kv->v, layer, slot[r], j0);
        attend_row(out + r * qd, q + r * qd, K, V, kv->kv_dim, (int64_t)pos[r] + 1 - j0, nh, g,
                   hd, sc, kv->max_len);
    }
}
