/*
 * The rollout's KV cache on the CPU (ops.h df_kv_*, backend.h df_backend_kv): writing rows,
 * copying a prompt's prefix between slots, and decode-time attention over it. A kernel TU,
 * compiled per instruction-set variant (util/kernels.h): in rollout the attention is the
 * largest share of the time after the matmuls. float32 or bfloat16 elements; a bf16 row is
 * widened to float32 as it is read, so the arithmetic after the load is the float32 one.
 */
#include "model/kernels_rename.h" /* first: a kernel TU */

#include "model/ops.h"

#include <math.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <omp.h>
#include <string.h>

/* Below this many multiply-adds a loop runs on one thread: waking the team costs more than
 * it saves (and spins when cores are oversubscribed). */
#define KV_PAR_MIN_WORK 32768

static inline float bf16_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest even; NaN stays a (quiet) NaN (as df_bf16_from_f32, one row). */
static inline uint16_t f32_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

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

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
/* 16 bf16 values (m of them) widened to float32. */
static inline __m512 load_bf16(const uint16_t *p, __mmask16 m)
{
    __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

/* dot16 with b in bf16: the same accumulators and order. */
static inline float dot16_bf(const float *a, const uint16_t *b, int64_t n)
{
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), load_bf16(b + i, 0xFFFF), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), load_bf16(b + i + 16, 0xFFFF), s1);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
        s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), load_bf16(b + i, m), s0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}
#else
/* dot16 with b in bf16, widened as it is read. */
static inline float dot16_bf(const float *restrict a, const uint16_t *restrict b, int64_t n)
{
    float acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
#pragma omp simd
        for (int l = 0; l < 16; l++)
            acc[l] += a[i + l] * bf16_f32(b[i + l]);
    }
    for (int l = 0; i < n; i++, l++)
        acc[l] += a[i] * bf16_f32(b[i]);
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

static inline void axpy_bf(float *restrict o, float p, const uint16_t *restrict v, int64_t n)
{
#pragma omp simd
    for (int64_t d = 0; d < n; d++)
        o[d] += p * bf16_f32(v[d]);
}

/* Attention of all nh query heads of one row over `len` positions of its slot starting at
 * K / V (element offsets into kv's tensors). Positions outer, heads inner: each K / V row is
 * read once, whole. */
static void attend_row(float *out, const float *q, const df_backend_kv *kv, const void *K,
                       const void *V, int64_t len, int64_t nh, int64_t g, int64_t hd, float softcap,
                       float *sc)
{
    const int64_t kvd = kv->kv_dim, max_len = kv->max_len;
    const bool bf = kv->dtype == DF_KV_BF16;
    const float *Kf = K, *Vf = V;
    const uint16_t *Kb = K, *Vb = V;
    float scale = 1.0f / sqrtf((float)hd);
    for (int64_t j = 0; j < len; j++)
        for (int64_t h = 0; h < nh; h++)
            sc[h * max_len + j] = (bf ? dot16_bf(q + h * hd, Kb + j * kvd + h / g * hd, hd)
                                      : dot16(q + h * hd, Kf + j * kvd + h / g * hd, hd)) *
                                  scale;
    if (softcap > 0.0f) { /* Gemma 2: s = C tanh(s / C) before the softmax (df_attention_fwd's) */
        const float inv = 1.0f / softcap;
        for (int64_t h = 0; h < nh; h++)
            for (int64_t j = 0; j < len; j++)
                sc[h * max_len + j] = softcap * tanhf(sc[h * max_len + j] * inv);
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
    for (int64_t j = 0; j < len; j++)
        for (int64_t h = 0; h < nh; h++) {
            if (bf)
                axpy_bf(out + h * hd, sc[h * max_len + j], Vb + j * kvd + h / g * hd, hd);
            else
                axpy(out + h * hd, sc[h * max_len + j], Vf + j * kvd + h / g * hd, hd);
        }
}

/* The first position the row at `pos` attends to: 0, or the start of its window. */
static inline int64_t window_start(int64_t pos, int64_t window)
{
    return window > 0 && pos + 1 > window ? pos + 1 - window : 0;
}

int64_t df_kv_scratch_floats(int64_t nh, int64_t max_len)
{
    return (int64_t)omp_get_max_threads() * nh * max_len;
}

void df_kv_attention(float *out, const float *q, const df_backend_kv *kv, int64_t layer,
                     const int32_t *slot, const int32_t *pos, int64_t n, int64_t nh,
                     int64_t nkv, int64_t hd, int64_t window, float softcap, float *scores)
{
    int64_t g = nh / nkv, qd = nh * hd, work = 0;
    for (int64_t r = 0; r < n; r++)
        work += ((int64_t)pos[r] + 1 - window_start(pos[r], window)) * qd;
#pragma omp parallel for schedule(dynamic, 2) if (work > KV_PAR_MIN_WORK)
    for (int64_t r = 0; r < n; r++) {
        float *sc = scores + (int64_t)omp_get_thread_num() * nh * kv->max_len;
        const int64_t j0 = window_start(pos[r], window);
        const void *K = df_kv_at(kv, kv->k, layer, slot[r], j0);
        const void *V = df_kv_at(kv, kv->v, layer, slot[r], j0);
        attend_row(out + r * qd, q + r * qd, kv, K, V, (int64_t)pos[r] + 1 - j0, nh, g, hd, softcap,
                   sc);
    }
}

/* One row of kv_dim floats into the cache's element type. */
static void put_row(const df_backend_kv *kv, void *dst, const float *src)
{
    if (kv->dtype == DF_KV_BF16) {
        uint16_t *d = dst;
        for (int64_t i = 0; i < kv->kv_dim; i++)
            d[i] = f32_bf16(src[i]);
    } else {
        memcpy(dst, src, (size_t)kv->kv_dim * sizeof(float));
    }
}

void df_kv_write(const df_backend_kv *kv, int64_t layer, const float *k, const float *v,
                 const int32_t *slot, const int32_t *pos, int64_t n)
{
    const int64_t kvd = kv->kv_dim;
#pragma omp parallel for schedule(static) if (n * kvd > KV_PAR_MIN_WORK)
    for (int64_t r = 0; r < n; r++) {
        put_row(kv, df_kv_at(kv, kv->k, layer, slot[r], pos[r]), k + r * kvd);
        put_row(kv, df_kv_at(kv, kv->v, layer, slot[r], pos[r]), v + r * kvd);
    }
}

void df_kv_copy(const df_backend_kv *kv, int64_t src, int64_t dst, int64_t len)
{
    const size_t bytes = (size_t)(len * kv->kv_dim) * (kv->dtype == DF_KV_BF16 ? 2u : 4u);
    for (int64_t l = 0; l < kv->n_layers; l++) {
        memcpy(df_kv_at(kv, kv->k, l, dst, 0), df_kv_at(kv, kv->k, l, src, 0), bytes);
        memcpy(df_kv_at(kv, kv->v, l, dst, 0), df_kv_at(kv, kv->v, l, src, 0), bytes);
    }
}
