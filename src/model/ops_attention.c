/*
 * Causal attention over packed variable-length sequences (optionally limited to a sliding
 * window of the last W keys), flash-attention
 * style (Dao 2023, FlashAttention-2, Alg. 1 forward / Alg. 2 backward): keys are
 * visited in tiles of BK with an online softmax, the row log-sum-exp is saved,
 * and the backward pass recomputes probabilities from it. No [L, L] matrix
 * exists; per-thread scratch is two [hd, BK] tiles on the stack.
 * This file holds the entry points (threading over sequences and heads) and the
 * generic one-row-at-a-time kernels; head dims that are multiples of 16 go to
 * the register-blocked kernels of ops_attention_vec.c.
 */
#include "model/kernels_rename.h" /* first: a kernel TU (util/kernels.h) */

#include "model/ops.h"
#include "model/ops_attention_vec.h"
#include "model/ops_math.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#define BK DF_ATTN_BK

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* s[j] = scale * sum_d a[d] t[d][j] for all BK columns. */
static ALWAYS_INLINE void row_dot_tile(float *restrict s, const float *restrict a,
                                       const float *restrict t, int64_t hd, float scale)
{
    float acc[BK] = {0};
    for (int64_t d = 0; d < hd; d++) {
        float ad = a[d];
#pragma omp simd
        for (int j = 0; j < BK; j++)
            acc[j] += ad * t[d * BK + j];
    }
#pragma omp simd
    for (int j = 0; j < BK; j++)
        s[j] = acc[j] * scale;
}

/* Gemma 2's soft-cap of scores [j0, nv) (cap > 0): s = cap tanh(s / cap); with g (NULL: not
 * needed) the derivative 1 - tanh^2 of each, for the backward. */
static ALWAYS_INLINE void softcap_row(float *s, float *g, int64_t j0, int64_t nv, float cap)
{
    const float inv = 1.0f / cap;
    for (int64_t j = j0; j < nv; j++) {
        float t = tanhf(s[j] * inv);
        s[j] = cap * t;
        if (g)
            g[j] = 1.0f - t * t;
    }
}

/* ---- forward ------------------------------------------------------------------ */

#define BQ 64 /* query rows whose running max / sum are kept while keys stream by */

/* The first key row i sees in the tile at k0, as a tile offset: 0, or past the keys that left
 * its window (row - W < j). */
static ALWAYS_INLINE int64_t first_visible(int64_t i, int64_t k0, int64_t window)
{
    int64_t j0 = window > 0 ? i - window + 1 - k0 : 0;
    return j0 > 0 ? j0 : 0;
}

/* The first key tile (a multiple of BK) rows from q0 on can see. */
static ALWAYS_INLINE int64_t first_tile(int64_t q0, int64_t window)
{
    int64_t j = window > 0 ? q0 - window + 1 : 0;
    return j > 0 ? j / BK * BK : 0;
}

/* One (sequence, head): rows [r0, r0 + L). Output rows double as accumulators. */
static ALWAYS_INLINE void attn_fwd_head(float *out, float *lse, const float *q, const float *k,
                                        const float *v, int64_t r0, int64_t L, int64_t h,
                                        int64_t kvh, int64_t nh, int64_t nkv, int64_t hd,
                                        int64_t window, float softcap)
{
    const int64_t ldq = nh * hd, ldk = nkv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float kt[DF_MAX_HEAD_DIM * BK];
    const float *kh = k + r0 * ldk + kvh * hd, *vh = v + r0 * ldk + kvh * hd;
    const float *qh = q + r0 * ldq + h * hd;
    float *oh = out + r0 * ldq + h * hd;
    for (int64_t q0 = 0; q0 < L; q0 += BQ) {
        int64_t q1 = q0 + BQ < L ? q0 + BQ : L;
        float m[BQ], l[BQ];
        for (int64_t i = q0; i < q1; i++) {
            m[i - q0] = -INFINITY;
            l[i - q0] = 0.0f;
            memset(oh + i * ldq, 0, (size_t)hd * sizeof(float));
        }
        for (int64_t k0 = first_tile(q0, window); k0 < q1; k0 += BK) {
            int64_t nk = L - k0 < BK ? L - k0 : BK;
            df_attn_tile_t(kt, kh, ldk, k0, nk, hd);
            for (int64_t i = q0 > k0 ? q0 : k0; i < q1; i++) {
                int64_t nv = i - k0 + 1 < nk ? i - k0 + 1 : nk; /* causal: keys <= i */
                int64_t j0 = first_visible(i, k0, window);
                if (j0 >= nv) /* the whole tile left row i's window */
                    continue;
                float *oi = oh + i * ldq;
                float s[BK];
                row_dot_tile(s, qh + i * ldq, kt, hd, scale);
                if (softcap > 0.0f)
                    softcap_row(s, NULL, j0, nv, softcap);
                float mb = -INFINITY;
                for (int64_t j = j0; j < nv; j++)
                    mb = s[j] > mb ? s[j] : mb;
                float m_old = m[i - q0], m_new = mb > m_old ? mb : m_old;
                float alpha = df_expf(m_old - m_new); /* 0 on the first tile */
                float psum = 0.0f;
#pragma omp simd reduction(+ : psum)
                for (int64_t j = j0; j < nv; j++) {
                    s[j] = df_expf(s[j] - m_new);
                    psum += s[j];
                }
                l[i - q0] = l[i - q0] * alpha + psum;
                m[i - q0] = m_new;
                if (alpha != 1.0f) {
#pragma omp simd
                    for (int64_t d = 0; d < hd; d++)
                        oi[d] *= alpha;
                }
                for (int64_t j = j0; j < nv; j++) {
                    const float *vj = vh + (k0 + j) * ldk;
                    float pj = s[j];
#pragma omp simd
                    for (int64_t d = 0; d < hd; d++)
                        oi[d] += pj * vj[d];
                }
            }
        }
        for (int64_t i = q0; i < q1; i++) {
            float *oi = oh + i * ldq, inv = 1.0f / l[i - q0];
#pragma omp simd
            for (int64_t d = 0; d < hd; d++)
                oi[d] *= inv;
            lse[(r0 + i) * nh + h] = m[i - q0] + logf(l[i - q0]);
        }
    }
}

void df_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                      const int64_t *seq_offsets, int64_t n_seqs, int64_t nh, int64_t nkv,
                      int64_t hd, int64_t window, float softcap)
{
    assert(hd <= DF_MAX_HEAD_DIM && nh % nkv == 0);
    const int64_t grp = nh / nkv;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t task = 0; task < n_seqs * nh; task++) {
        int64_t s = task / nh, h = task % nh;
        int64_t r0 = seq_offsets[s], L = seq_offsets[s + 1] - r0;
        if (hd % 16 == 0)
            df_attn_vec_fwd_head(out, lse, q, k, v, r0, L, h, h / grp, nh, nkv, hd, window, softcap);
        else
            attn_fwd_head(out, lse, q, k, v, r0, L, h, h / grp, nh, nkv, hd, window, softcap);
    }
}

/* ---- backward ----------------------------------------------------------------- */

/*
 * One (sequence, kv head) with all query heads of its group, so dk / dv rows
 * have a single writer. With P = exp(S - lse), D_i = dO_i . O_i:
 *   dV_j += sum_i P_ij dO_i,  dS_ij = P_ij (dO_i . V_j - D_i),
 *   dQ_i += scale sum_j dS_ij K_j,  dK_j += scale sum_i dS_ij Q_i.
 */
static ALWAYS_INLINE void attn_bwd_group(float *dq, float *dk, float *dv, const float *dout,
                                         const float *out, const float *lse, const float *q,
                                         const float *k, const float *v, int64_t r0,
                                         int64_t L, int64_t kvh, int64_t nh, int64_t nkv,
                                         int64_t hd, int64_t window, float softcap)
{
    const int64_t ldq = nh * hd, ldk = nkv * hd, grp = nh / nkv;
    const float scale = 1.0f / sqrtf((float)hd);
    float kt[DF_MAX_HEAD_DIM * BK], vt[DF_MAX_HEAD_DIM * BK];
    const float *kh = k + r0 * ldk + kvh * hd, *vh = v + r0 * ldk + kvh * hd;
    float *dkh = dk + r0 * ldk + kvh * hd, *dvh = dv + r0 * ldk + kvh * hd;
    for (int64_t i = 0; i < L; i++) {
        memset(dkh + i * ldk, 0, (size_t)hd * sizeof(float));
        memset(dvh + i * ldk, 0, (size_t)hd * sizeof(float));
        for (int64_t h = kvh * grp; h < (kvh + 1) * grp; h++)
            memset(dq + (r0 + i) * ldq + h * hd, 0, (size_t)hd * sizeof(float));
    }
    for (int64_t k0 = 0; k0 < L; k0 += BK) {
        int64_t nk = L - k0 < BK ? L - k0 : BK;
        df_attn_tile_t(kt, kh, ldk, k0, nk, hd);
        df_attn_tile_t(vt, vh, ldk, k0, nk, hd);
        for (int64_t h = kvh * grp; h < (kvh + 1) * grp; h++) {
            const float *qh = q + r0 * ldq + h * hd, *oh = out + r0 * ldq + h * hd;
            const float *doh = dout + r0 * ldq + h * hd;
            float *dqh = dq + r0 * ldq + h * hd;
            /* rows past k0 + nk - 1 + W see none of the tile's keys */
            int64_t i1 = window > 0 && k0 + nk - 1 + window < L ? k0 + nk - 1 + window : L;
            for (int64_t i = k0; i < i1; i++) {
                int64_t nv = i - k0 + 1 < nk ? i - k0 + 1 : nk;
                int64_t j0 = first_visible(i, k0, window);
                if (j0 >= nv)
                    continue;
                const float *qi = qh + i * ldq, *doi = doh + i * ldq, *oi = oh + i * ldq;
                float *dqi = dqh + i * ldq;
                float Di = 0.0f;
#pragma omp simd reduction(+ : Di)
                for (int64_t d = 0; d < hd; d++)
                    Di += doi[d] * oi[d];
                float p[BK], dp[BK], g[BK];
                row_dot_tile(p, qi, kt, hd, scale);
                row_dot_tile(dp, doi, vt, hd, 1.0f);
                float li = lse[(r0 + i) * nh + h];
                if (softcap > 0.0f)
                    softcap_row(p, g, j0, nv, softcap);
#pragma omp simd
                for (int64_t j = j0; j < nv; j++) {
                    p[j] = df_expf(p[j] - li);
                    dp[j] = p[j] * (dp[j] - Di) * scale; /* scaled dS */
                }
                if (softcap > 0.0f) /* through the cap */
                    for (int64_t j = j0; j < nv; j++)
                        dp[j] *= g[j];
                for (int64_t j = j0; j < nv; j++) {
                    const float *kj = kh + (k0 + j) * ldk;
                    float *dkj = dkh + (k0 + j) * ldk, *dvj = dvh + (k0 + j) * ldk;
                    float pj = p[j], dsj = dp[j];
#pragma omp simd
                    for (int64_t d = 0; d < hd; d++) {
                        dqi[d] += dsj * kj[d];
                        dkj[d] += dsj * qi[d];
                        dvj[d] += pj * doi[d];
                    }
                }
            }
        }
    }
}

void df_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *out,
                      const float *lse, const float *q, const float *k, const float *v,
                      const int64_t *seq_offsets, int64_t n_seqs, int64_t nh, int64_t nkv,
                      int64_t hd, int64_t window, float softcap)
{
    assert(hd <= DF_MAX_HEAD_DIM && nh % nkv == 0);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t task = 0; task < n_seqs * nkv; task++) {
        int64_t s = task / nkv, g = task % nkv;
        int64_t r0 = seq_offsets[s], L = seq_offsets[s + 1] - r0;
        if (hd % 16 == 0)
            df_attn_vec_bwd_group(dq, dk, dv, dout, out, lse, q, k, v, r0, L, g, nh, nkv, hd,
                                  window, softcap);
        else
            attn_bwd_group(dq, dk, dv, dout, out, lse, q, k, v, r0, L, g, nh, nkv, hd, window,
                           softcap);
    }
}
