/*
 * LM head: log-probabilities of given tokens and entropies, streamed over
 * [DF_LMHEAD_ROWS, DF_LMHEAD_COLS] tiles of logits with an online log-sum-exp
 * (Milakov & Gimelshein 2018, "Online normalizer calculation for softmax"),
 * extended with a running sum of p * (z - m) for the entropy. Matches verl's
 * logprobs_from_logits + entropy_from_logits on logits / temperature.
 */
#include "model/ops.h"
#include "model/ops_math.h"

#include <math.h>

int64_t df_lmhead_scratch_floats(int64_t n, int64_t V, int64_t H)
{
    (void)H;
    int64_t r = n < DF_LMHEAD_ROWS ? n : DF_LMHEAD_ROWS;
    int64_t c = V < DF_LMHEAD_COLS ? V : DF_LMHEAD_COLS;
    return (r > 0 ? r : 1) * c;
}

/* Running state of one row: max m, s0 = sum e^(z-m), s1 = sum e^(z-m) (z-m), target logit. */
typedef struct {
    double m, s0, s1;
    float zt;
} row_state;

static void row_update(row_state *st, const float *z, int64_t nv, int64_t v0, int32_t target)
{
    float mb = -INFINITY;
    for (int64_t j = 0; j < nv; j++)
        mb = z[j] > mb ? z[j] : mb;
    if (target >= v0 && target < v0 + nv)
        st->zt = z[target - v0];
    double m_new = mb > st->m ? mb : st->m;
    float mf = (float)m_new;
    float a0 = 0.0f, a1 = 0.0f;
#pragma omp simd reduction(+ : a0, a1)
    for (int64_t j = 0; j < nv; j++) {
        float d = z[j] - mf, e = df_expf(d);
        a0 += e;
        a1 += e * d;
    }
    /* Shift the old sums to the new max: e^(z-m_new) = a e^(z-m_old), z - m_new = (z-m_old) + dm. */
    if (st->s0 > 0.0) {
        double dm = st->m - m_new, a = exp(dm);
        st->s1 = a * (st->s1 + dm * st->s0);
        st->s0 = a * st->s0;
    }
    st->s0 += a0;
    st->s1 += a1;
    st->m = m_new;
}

void df_lmhead_fwd_tiled(float *logp, float *entropy, float *lse, const float *h,
                         const float *W, const int32_t *target, int64_t n, int64_t V, int64_t H,
                         float temperature, int64_t RT, int64_t CT, float *scratch)
{
    const float inv_t = 1.0f / temperature;
    RT = RT < DF_LMHEAD_ROWS ? RT : DF_LMHEAD_ROWS; /* bounds the stack row state */
    for (int64_t r0 = 0; r0 < n; r0 += RT) {
        int64_t nr = n - r0 < RT ? n - r0 : RT;
        row_state st[DF_LMHEAD_ROWS];
        for (int64_t i = 0; i < nr; i++)
            st[i] = (row_state){-INFINITY, 0.0, 0.0, 0.0f};
        for (int64_t v0 = 0; v0 < V; v0 += CT) {
            int64_t nv = V - v0 < CT ? V - v0 : CT;
            df_gemm_nt(nr, nv, H, inv_t, h + r0 * H, W + v0 * H, 0.0f, scratch);
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < nr; i++)
                row_update(&st[i], scratch + i * nv, nv, v0, target[r0 + i]);
        }
        for (int64_t i = 0; i < nr; i++) {
            double l = st[i].m + log(st[i].s0);
            lse[r0 + i] = (float)l;
            logp[r0 + i] = (float)(st[i].zt - l);
            if (entropy)
                entropy[r0 + i] = (float)(log(st[i].s0) - st[i].s1 / st[i].s0);
        }
    }
}

void df_lmhead_bwd_tiled(float *dh, float *dW, const float *dlogp, const float *dentropy,
                         const float *h, const float *W, const int32_t *target, const float *lse,
                         const float *entropy, int64_t n, int64_t V, int64_t H, float temperature,
                         int64_t RT, int64_t CT, float *scratch)
{
    const float inv_t = 1.0f / temperature;
    for (int64_t r0 = 0; r0 < n; r0 += RT) {
        int64_t nr = n - r0 < RT ? n - r0 : RT;
        for (int64_t v0 = 0; v0 < V; v0 += CT) {
            int64_t nv = V - v0 < CT ? V - v0 : CT;
            df_gemm_nt(nr, nv, H, inv_t, h + r0 * H, W + v0 * H, 0.0f, scratch);
            /* In place: z -> dL/dlogits = dz / temperature (chain rule through z = logits / t). */
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < nr; i++) {
                float *z = scratch + i * nv;
                float l = lse[r0 + i];
                float gl = dlogp ? dlogp[r0 + i] * inv_t : 0.0f;
                float ge = dentropy ? dentropy[r0 + i] * inv_t : 0.0f;
                float ent = ge != 0.0f ? entropy[r0 + i] : 0.0f;
#pragma omp simd
                for (int64_t j = 0; j < nv; j++) {
                    float lp = z[j] - l, p = df_expf(lp);
                    z[j] = -gl * p - ge * p * (lp + ent);
                }
                int64_t t = target[r0 + i];
                if (t >= v0 && t < v0 + nv)
                    z[t - v0] += gl;
            }
            df_gemm_nn(nr, H, nv, 1.0f, scratch, W + v0 * H, v0 == 0 ? 0.0f : 1.0f,
                       dh + r0 * H);
            df_gemm_tn(nv, H, nr, 1.0f, scratch, h + r0 * H, 1.0f, dW + v0 * H);
        }
    }
}

void df_lmhead_fwd(float *logp, float *entropy, float *lse, const float *h, const float *W,
                   const int32_t *target, int64_t n, int64_t V, int64_t H, float temperature,
                   float *scratch)
{
    df_lmhead_fwd_tiled(logp, entropy, lse, h, W, target, n, V, H, temperature, DF_LMHEAD_ROWS,
                        DF_LMHEAD_COLS, scratch);
}

void df_lmhead_bwd(float *dh, float *dW, const float *dlogp, const float *dentropy,
                   const float *h, const float *W, const int32_t *target, const float *lse,
                   const float *entropy, int64_t n, int64_t V, int64_t H, float temperature,
                   float *scratch)
{
    df_lmhead_bwd_tiled(dh, dW, dlogp, dentropy, h, W, target, lse, entropy, n, V, H,
                        temperature, DF_LMHEAD_ROWS, DF_LMHEAD_COLS, scratch);
}
