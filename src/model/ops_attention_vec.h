/*
 * ops_attention_vec.h (internal) — register-blocked attention kernels for one
 * (sequence, head) forward / one (sequence, kv head) backward, head_dim a
 * multiple of 16 and <= DF_MAX_HEAD_DIM. Called by df_attention_fwd / _bwd,
 * which own the threading; argument meanings as there, r0 / L the sequence's
 * first row and length. The backward zeroes its own dk / dv rows and the dq
 * rows of the query heads of group kvh.
 */
#ifndef DF_MODEL_OPS_ATTENTION_VEC_H
#define DF_MODEL_OPS_ATTENTION_VEC_H

#include "model/ops.h"

#define DF_ATTN_BK 32 /* keys per tile: the scores of one query row fill two 16-float vectors */

/* Rows [k0, k0 + nk) of one head of x (row stride ld) transposed into t[hd][DF_ATTN_BK],
   zero padded to the full tile. */
static inline __attribute__((always_inline)) void df_attn_tile_t(float *restrict t, const float *x,
                                                                  int64_t ld, int64_t k0,
                                                                  int64_t nk, int64_t hd)
{
    for (int64_t j = 0; j < nk; j++) {
        const float *row = x + (k0 + j) * ld;
        for (int64_t d = 0; d < hd; d++)
            t[d * DF_ATTN_BK + j] = row[d];
    }
    for (int64_t j = nk; j < DF_ATTN_BK; j++)
        for (int64_t d = 0; d < hd; d++)
            t[d * DF_ATTN_BK + j] = 0.0f;
}

void df_attn_vec_fwd_head(float *out, float *lse, const float *q, const float *k,
                          const float *v, int64_t r0, int64_t L, int64_t h, int64_t kvh,
                          int64_t nh, int64_t nkv, int64_t hd, int64_t window, float softcap);
void df_attn_vec_bwd_group(float *dq, float *dk, float *dv, const float *dout, const float *out,
                           const float *lse, const float *q, const float *k, const float *v,
                           int64_t r0, int64_t L, int64_t kvh, int64_t nh, int64_t nkv,
                           int64_t hd, int64_t window, float softcap);

#endif /* DF_MODEL_OPS_ATTENTION_VEC_H */
