/*
 * Register-blocked attention kernels for head_dim a multiple of 16 (ops.h;
 * the generic kernels in ops_attention.c cover the rest). Same algorithm as
 * there (FlashAttention-2 tiling with an online softmax), but RB query rows are
 * processed together against a [hd, BK] transposed key tile, so each loaded
 * key / value vector feeds RB fused multiply-adds and scores stay in registers.
 */
#include "model/kernels_rename.h" /* first: a kernel TU (util/kernels.h) */

#include "model/ops_attention_vec.h"
#include "model/ops_math.h"

#include <math.h>
#include <string.h>

/* ISO C mode (-std=c11) disables FMA contraction; these kernels want it. */
#if defined(__clang__)
#pragma clang fp contract(fast)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
#endif

#define BK DF_ATTN_BK
#define QB 128 /* query rows per block (their softmax state lives on the stack) */
#define RB 4  /* query rows per register block */
#define DC 4  /* 16-float vectors per head-dim chunk held in registers */

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* s[r][0..1] = sum_d a_r[d] t[d][0..BK) for RB rows. */
static ALWAYS_INLINE void scores(df_v16 s[RB][2], const float *const a[RB], const float *t,
                                 int64_t hd)
{
    #pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
        s[r][0] = s[r][1] = df_v16_set1(0.0f);
    for (int64_t d = 0; d < hd; d++) {
        df_v16 t0 = df_v16_load(t + d * BK), t1 = df_v16_load(t + d * BK + 16);
        #pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            float ad = a[r][d];
            s[r][0] += ad * t0;
            s[r][1] += ad * t1;
        }
    }
}

/* Lanes of key tile k0 that row `row` may see: k0 + j <= row, j < nk and, with a window W,
 * row - W < k0 + j. */
static ALWAYS_INLINE void mask_row(df_v16 s[2], int64_t k0, int64_t nk, int64_t row,
                                   int64_t window, float fill)
{
    int64_t lim = row - k0 < nk - 1 ? row - k0 : nk - 1; /* last visible lane */
    int64_t first = window > 0 ? row - window + 1 - k0 : 0; /* first visible lane */
    if (lim >= BK - 1 && first <= 0)
        return;
    first = first < 0 ? 0 : first > BK ? BK : first;
    const df_v16i iota = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    df_v16i l = (df_v16i){0} + (int32_t)lim, f = (df_v16i){0} + (int32_t)first;
    s[0] = df_v16_select((iota <= l) & (iota >= f), s[0], df_v16_set1(fill));
    s[1] = df_v16_select((iota + 16 <= l) & (iota + 16 >= f), s[1], df_v16_set1(fill));
}

/*
 * acc_r[chunk] (+)= sum_{j < nj} w[r][j] * x_j[chunk] for RB rows: the P.V and
 * dS.K products. rows_out[r] == NULL skips the store for padding rows.
 */
static ALWAYS_INLINE void weighted_rows(float *const rows_out[RB], const float w[RB][BK],
                                        const float *x, int64_t ld, int64_t nj, int64_t hd,
                                        const float scale_in[RB])
{
    for (int64_t d0 = 0; d0 < hd; d0 += DC * 16) {
        const int nc = (int)((hd - d0) / 16 < DC ? (hd - d0) / 16 : DC);
        df_v16 acc[RB][DC] = {{{0}}};
        #pragma GCC unroll 4
        for (int r = 0; r < RB; r++)
            #pragma GCC unroll 4
            for (int c = 0; c < nc; c++)
                acc[r][c] = rows_out[r] ? df_v16_load(rows_out[r] + d0 + 16 * c) * scale_in[r]
                                        : df_v16_set1(0.0f);
        for (int64_t j = 0; j < nj; j++) {
            const float *xj = x + j * ld + d0;
            #pragma GCC unroll 4
            for (int c = 0; c < nc; c++) {
                df_v16 xv = df_v16_load(xj + 16 * c);
                #pragma GCC unroll 4
                for (int r = 0; r < RB; r++)
                    acc[r][c] += w[r][j] * xv;
            }
        }
        #pragma GCC unroll 4
        for (int r = 0; r < RB; r++)
            if (rows_out[r])
                #pragma GCC unroll 4
                for (int c = 0; c < nc; c++)
                    df_v16_store(rows_out[r] + d0 + 16 * c, acc[r][c]);
    }
}

/* Gemma 2's soft-cap on 16 lanes: s <- cap tanh(s / cap) (df_v16_tanh); *g (NULL: skipped) =
 * 1 - tanh^2, the cap's derivative. */
static ALWAYS_INLINE df_v16 softcap_v(df_v16 s, float cap, df_v16 *g)
{
    df_v16 t = df_v16_tanh(s * (1.0f / cap));
    if (g)
        *g = df_v16_set1(1.0f) - t * t;
    return t * cap;
}

/* ---- forward ----------------------------------------------------------------------- */

static ALWAYS_INLINE void fwd_head(float *out, float *lse, const float *q, const float *k,
                                   const float *v, int64_t r0, int64_t L, int64_t h,
                                   int64_t kvh, int64_t nh, int64_t nkv, int64_t window,
                                   float softcap, int64_t hd)
{
    const int64_t ldq = nh * hd, ldk = nkv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float kt[DF_MAX_HEAD_DIM * BK];
    const float *kh = k + r0 * ldk + kvh * hd, *vh = v + r0 * ldk + kvh * hd;
    const float *qh = q + r0 * ldq + h * hd;
    float *oh = out + r0 * ldq + h * hd;
    for (int64_t q0 = 0; q0 < L; q0 += QB) {
        const int64_t nq = L - q0 < QB ? L - q0 : QB, last = q0 + nq - 1;
        float m[QB], l[QB];
        for (int64_t i = 0; i < nq; i++) {
            m[i] = -INFINITY;
            l[i] = 0.0f;
            memset(oh + (q0 + i) * ldq, 0, (size_t)hd * sizeof(float));
        }
        /* With a window, keys before q0 - W + 1 are seen by no row of the block. */
        int64_t kfirst = window > 0 && q0 - window + 1 > 0 ? (q0 - window + 1) / BK * BK : 0;
        for (int64_t k0 = kfirst; k0 <= last; k0 += BK) {
            const int64_t nk = L - k0 < BK ? L - k0 : BK;
            /* rows past k0 + nk - 1 + W see nothing of this tile (W > 0) */
            const int64_t rlast = window > 0 && k0 + nk - 2 + window < last ? k0 + nk - 2 + window
                                                                            : last;
            df_attn_tile_t(kt, kh, ldk, k0, nk, hd);
            /* Rows before k0 see nothing of this tile; without a window the rest see at least
               key k0, with one a row may see none of it (the masked case below). */
            for (int64_t i0 = q0 > k0 ? q0 : k0; i0 <= rlast; i0 += RB) {
                int64_t row[RB];
                const float *qa[RB];
                float *dst[RB];
                #pragma GCC unroll 4
                for (int r = 0; r < RB; r++) {
                    row[r] = i0 + r <= last ? i0 + r : last; /* padding rows repeat the last */
                    qa[r] = qh + row[r] * ldq;
                    dst[r] = i0 + r <= last ? oh + row[r] * ldq : NULL;
                }
                df_v16 s[RB][2];
                scores(s, qa, kt, hd);
                float p[RB][BK], alpha[RB];
                #pragma GCC unroll 4
                for (int r = 0; r < RB; r++) {
                    s[r][0] *= scale;
                    s[r][1] *= scale;
                    if (softcap > 0.0f) {
                        s[r][0] = softcap_v(s[r][0], softcap, NULL);
                        s[r][1] = softcap_v(s[r][1], softcap, NULL);
                    }
                    mask_row(s[r], k0, nk, row[r], window, -INFINITY);
                    int64_t si = row[r] - q0;
                    float mb = df_v16_hmax(df_v16_max(s[r][0], s[r][1]));
                    float m_new = mb > m[si] ? mb : m[si];
                    /* nothing seen yet (all masked so far): weights 0, state unchanged */
                    const bool none = m_new == -INFINITY;
                    df_v16 mn = df_v16_set1(none ? 0.0f : m_new);
                    df_v16 p0 = df_v16_exp(s[r][0] - mn), p1 = df_v16_exp(s[r][1] - mn);
                    alpha[r] = none ? 1.0f : df_expf(m[si] - m_new); /* 0 on the first tile */
                    if (dst[r]) {
                        l[si] = l[si] * alpha[r] + df_v16_hsum(p0 + p1);
                        m[si] = m_new;
                    }
                    df_v16_store(p[r], p0);
                    df_v16_store(p[r] + 16, p1);
                }
                int64_t nj = rlast - k0 + 1 < nk ? rlast - k0 + 1 : nk;
                weighted_rows(dst, p, vh + k0 * ldk, ldk, nj, hd, alpha);
            }
        }
        for (int64_t i = 0; i < nq; i++) {
            float *oi = oh + (q0 + i) * ldq, inv = 1.0f / l[i];
            for (int64_t d = 0; d < hd; d++)
                oi[d] *= inv;
            lse[(r0 + q0 + i) * nh + h] = m[i] + logf(l[i]);
        }
    }
}

/* ---- backward ---------------------------------------------------------------------- */

/* y_j[chunk] += sum_r w[r][j] a_r[chunk] for j < nj: the dK and dV updates. */
static ALWAYS_INLINE void outer_acc(float *y, int64_t ld, const float w[RB][BK],
                                    const float *const a[RB], int64_t nj, int64_t hd)
{
    for (int64_t d0 = 0; d0 < hd; d0 += DC * 16) {
        const int nc = (int)((hd - d0) / 16 < DC ? (hd - d0) / 16 : DC);
        df_v16 av[RB][DC] = {{{0}}};
        #pragma GCC unroll 4
        for (int r = 0; r < RB; r++)
            #pragma GCC unroll 4
            for (int c = 0; c < nc; c++)
                av[r][c] = df_v16_load(a[r] + d0 + 16 * c);
        for (int64_t j = 0; j < nj; j++) {
            float *yj = y + j * ld + d0;
            #pragma GCC unroll 4
            for (int c = 0; c < nc; c++) {
                df_v16 acc = df_v16_load(yj + 16 * c);
                #pragma GCC unroll 4
                for (int r = 0; r < RB; r++)
                    acc += w[r][j] * av[r][c];
                df_v16_store(yj + 16 * c, acc);
            }
        }
    }
}

static ALWAYS_INLINE float dot_hd(const float *a, const float *b, int64_t hd)
{
    df_v16 acc = df_v16_set1(0.0f);
    for (int64_t d = 0; d < hd; d += 16)
        acc += df_v16_load(a + d) * df_v16_load(b + d);
    return df_v16_hsum(acc);
}

static ALWAYS_INLINE void bwd_group(float *dq, float *dk, float *dv, const float *dout,
                                    const float *out, const float *lse, const float *q,
                                    const float *k, const float *v, int64_t r0, int64_t L,
                                    int64_t kvh, int64_t nh, int64_t nkv, int64_t window,
                                    float softcap, int64_t hd)
{
    const int64_t ldq = nh * hd, ldk = nkv * hd, grp = nh / nkv, last = L - 1;
    const float scale = 1.0f / sqrtf((float)hd);
    const float ones[RB] = {1.0f, 1.0f, 1.0f, 1.0f};
    float kt[DF_MAX_HEAD_DIM * BK], vt[DF_MAX_HEAD_DIM * BK];
    const float *kh = k + r0 * ldk + kvh * hd, *vh = v + r0 * ldk + kvh * hd;
    float *dkh = dk + r0 * ldk + kvh * hd, *dvh = dv + r0 * ldk + kvh * hd;
    for (int64_t i = 0; i < L; i++) {
        memset(dkh + i * ldk, 0, (size_t)hd * sizeof(float));
        memset(dvh + i * ldk, 0, (size_t)hd * sizeof(float));
        memset(dq + (r0 + i) * ldq + kvh * grp * hd, 0, (size_t)(grp * hd) * sizeof(float));
    }
    for (int64_t k0 = 0; k0 < L; k0 += BK) {
        const int64_t nk = L - k0 < BK ? L - k0 : BK;
        df_attn_tile_t(kt, kh, ldk, k0, nk, hd);
        df_attn_tile_t(vt, vh, ldk, k0, nk, hd);
        /* rows past k0 + nk - 1 + W see nothing of this tile (W > 0) */
        const int64_t rlast = window > 0 && k0 + nk - 2 + window < last ? k0 + nk - 2 + window : last;
        for (int64_t h = kvh * grp; h < (kvh + 1) * grp; h++) {
            const float *qh = q + r0 * ldq + h * hd, *oh = out + r0 * ldq + h * hd;
            const float *doh = dout + r0 * ldq + h * hd;
            float *dqh = dq + r0 * ldq + h * hd;
            for (int64_t i0 = k0; i0 <= rlast; i0 += RB) {
                int64_t row[RB];
                const float *qa[RB], *da[RB];
                float *dst[RB];
                #pragma GCC unroll 4
                for (int r = 0; r < RB; r++) {
                    row[r] = i0 + r <= rlast ? i0 + r : rlast;
                    qa[r] = qh + row[r] * ldq;
                    da[r] = doh + row[r] * ldq;
                    dst[r] = i0 + r <= rlast ? dqh + row[r] * ldq : NULL;
                }
                df_v16 s[RB][2], dp[RB][2];
                scores(s, qa, kt, hd);
                scores(dp, da, vt, hd);
                float P[RB][BK], DS[RB][BK];
                #pragma GCC unroll 4
                for (int r = 0; r < RB; r++) {
                    if (!dst[r]) { /* padding row: contributes nothing */
                        memset(P[r], 0, sizeof P[r]);
                        memset(DS[r], 0, sizeof DS[r]);
                        continue;
                    }
                    float Di = dot_hd(da[r], oh + row[r] * ldq, hd);
                    df_v16 li = df_v16_set1(lse[(r0 + row[r]) * nh + h]);
                    s[r][0] *= scale;
                    s[r][1] *= scale;
                    df_v16 g[2] = {df_v16_set1(scale), df_v16_set1(scale)};
                    if (softcap > 0.0f) { /* dS through the cap: times 1 - tanh^2 */
                        s[r][0] = softcap_v(s[r][0], softcap, &g[0]);
                        s[r][1] = softcap_v(s[r][1], softcap, &g[1]);
                        g[0] *= scale;
                        g[1] *= scale;
                    }
                    mask_row(s[r], k0, nk, row[r], window, -INFINITY);
                    #pragma GCC unroll 2
                    for (int c = 0; c < 2; c++) {
                        df_v16 pv = df_v16_exp(s[r][c] - li);
                        df_v16_store(P[r] + 16 * c, pv);
                        df_v16_store(DS[r] + 16 * c, pv * (dp[r][c] - Di) * g[c]);
                    }
                }
                int64_t hi = i0 + RB - 1 < rlast ? i0 + RB - 1 : rlast;
                int64_t nj = hi - k0 + 1 < nk ? hi - k0 + 1 : nk;
                weighted_rows(dst, DS, kh + k0 * ldk, ldk, nj, hd, ones);
                outer_acc(dkh + k0 * ldk, ldk, DS, qa, nj, hd);
                outer_acc(dvh + k0 * ldk, ldk, P, da, nj, hd);
            }
        }
    }
}

/* Compile-time head dims for the common sizes; any other multiple of 16 runs generically. */
#define DISPATCH_HD16(fn, hd, ...)                                                    \
    do {                                                                              \
        switch (hd) {                                                                 \
        case 32: fn(__VA_ARGS__, 32); break;                                          \
        case 64: fn(__VA_ARGS__, 64); break;                                          \
        case 128: fn(__VA_ARGS__, 128); break;                                        \
        default: fn(__VA_ARGS__, hd); break;                                          \
        }                                                                             \
    } while (0)

void df_attn_vec_fwd_head(float *out, float *lse, const float *q, const float *k,
                          const float *v, int64_t r0, int64_t L, int64_t h, int64_t kvh,
                          int64_t nh, int64_t nkv, int64_t hd, int64_t window, float softcap)
{
    DISPATCH_HD16(fwd_head, hd, out, lse, q, k, v, r0, L, h, kvh, nh, nkv, window, softcap);
}

void df_attn_vec_bwd_group(float *dq, float *dk, float *dv, const float *dout, const float *out,
                           const float *lse, const float *q, const float *k, const float *v,
                           int64_t r0, int64_t L, int64_t kvh, int64_t nh, int64_t nkv,
                           int64_t hd, int64_t window, float softcap)
{
    DISPATCH_HD16(bwd_group, hd, dq, dk, dv, dout, out, lse, q, k, v, r0, L, kvh, nh, nkv,
                  window, softcap);
}
