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

void df_attn_vec_fwd_head(float *out, float *lse, const float *q, const float *k,
                          const float *v, int64_t r0, int64_t L, int64_t h, int64_t kvh,
                          int64_t nh, int64_t nkv, int64_t hd);
void df_attn_vec_bwd_group(float *dq, float *dk, float *dv, const float *dout, const float *out,
                           const float *lse, const float *q, const float *k, const float *v,
                           int64_t r0, int64_t L, int64_t kvh, int64_t nh, int64_t nkv,
                           int64_t hd);

#endif /* DF_MODEL_OPS_ATTENTION_VEC_H */
