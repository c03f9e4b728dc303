/*
 * The model kernels' plain names in a multi-variant build: each calls the copy
 * of the variant in use (util/kernels.h). One indirect call per op call; the
 * loops are inside. Compiled only when DF_NATIVE=OFF on x86-64.
 */
#include "distflow/optim.h"
#include "model/ops.h"
#include "util/kernels.h"

/* ops_attention.c */
DF_KDISPATCH_VOID(df_attention_fwd,
                  (float *out, float *lse, const float *q, const float *k, const float *v,
                   const int64_t *seq_offsets, int64_t n_seqs, int64_t nh, int64_t nkv,
                   int64_t hd, int64_t window, float softcap),
                  (out, lse, q, k, v, seq_offsets, n_seqs, nh, nkv, hd, window, softcap))
DF_KDISPATCH_VOID(df_attention_bwd,
                  (float *dq, float *dk, float *dv, const float *dout, const float *out,
                   const float *lse, const float *q, const float *k, const float *v,
                   const int64_t *seq_offsets, int64_t n_seqs, int64_t nh, int64_t nkv,
                   int64_t hd, int64_t window, float softcap),
                  (dq, dk, dv, dout, out, lse, q, k, v, seq_offsets, n_seqs, nh, nkv, hd, window, softcap))

/* ops_basic.c */
DF_KDISPATCH_VOID(df_embedding_fwd,
                  (float *out, const int32_t *ids, const float *table, int64_t T, int64_t H),
                  (out, ids, table, T, H))
DF_KDISPATCH_VOID(df_embedding_fwd_bf16,
                  (float *out, const int32_t *ids, const uint16_t *table16, int64_t T, int64_t H),
                  (out, ids, table16, T, H))
DF_KDISPATCH_VOID(df_embedding_bwd,
                  (float *dtable, const float *dout, const int32_t *ids, int64_t T, int64_t H),
                  (dtable, dout, ids, T, H))
DF_KDISPATCH_VOID(df_rmsnorm_fwd,
                  (float *out, float *rstd, const float *x, const float *w, int64_t T, int64_t H,
                   float eps),
                  (out, rstd, x, w, T, H, eps))
DF_KDISPATCH_VOID(df_rmsnorm_bwd,
                  (float *dx, float *dw, const float *dout, const float *x, const float *w,
                   const float *rstd, int64_t T, int64_t H),
                  (dx, dw, dout, x, w, rstd, T, H))
DF_KDISPATCH_VOID(df_rope_table,
                  (float *cos_t, float *sin_t, int64_t n_pos, int64_t hd, double theta),
                  (cos_t, sin_t, n_pos, hd, theta))
DF_KDISPATCH_VOID(df_rope_table_freq,
                  (float *cos_t, float *sin_t, int64_t n_pos, int64_t hd, const float *inv_freq),
                  (cos_t, sin_t, n_pos, hd, inv_freq))
DF_KDISPATCH_VOID(df_rope_apply,
                  (float *x, const int32_t *pos, int64_t T, int64_t n_heads, int64_t hd,
                   int64_t rd, const float *cos_t, const float *sin_t, bool inverse),
                  (x, pos, T, n_heads, hd, rd, cos_t, sin_t, inverse))
DF_KDISPATCH_VOID(df_rope_fwd,
                  (float *x, const int32_t *pos, int64_t T, int64_t n_heads, int64_t hd,
                   double theta),
                  (x, pos, T, n_heads, hd, theta))
DF_KDISPATCH_VOID(df_rope_bwd,
                  (float *dx, const int32_t *pos, int64_t T, int64_t n_heads, int64_t hd,
                   double theta),
                  (dx, pos, T, n_heads, hd, theta))
DF_KDISPATCH_VOID(df_swiglu_fwd, (float *out, const float *gate, const float *up, int64_t n),
                  (out, gate, up, n))
DF_KDISPATCH_VOID(df_swiglu_bwd,
                  (float *dgate, float *dup, const float *dout, const float *gate,
                   const float *up, int64_t n),
                  (dgate, dup, dout, gate, up, n))
DF_KDISPATCH_VOID(df_geglu_fwd, (float *out, const float *gate, const float *up, int64_t n),
                  (out, gate, up, n))
DF_KDISPATCH_VOID(df_geglu_bwd,
                  (float *dgate, float *dup, const float *dout, const float *gate,
                   const float *up, int64_t n),
                  (dgate, dup, dout, gate, up, n))

/* ops_vocab.c */
DF_KDISPATCH(df_vocab_tiling, df_vocab_tiling_default, (void), ())
DF_KDISPATCH(df_vocab_tiling, df_vocab_tiling_for, (int64_t V, int64_t H), (V, H))
DF_KDISPATCH(df_vocab_tiling, df_vocab_tiling_clamp, (const df_vocab_tiling *t), (t))
DF_KDISPATCH(int64_t, df_vocab_groups, (int64_t V, const df_vocab_tiling *t), (V, t))
DF_KDISPATCH(float, df_row_max, (const float *x, int64_t n), (x, n))
DF_KDISPATCH(int64_t, df_row_find, (const float *x, int64_t n, float m), (x, n, m))
DF_KDISPATCH(double, df_row_exp, (float *w, const float *x, int64_t n, float shift),
             (w, x, n, shift))
DF_KDISPATCH(double, df_row_exp_f64,
             (double *w, const float *x, int64_t n, double scale, double shift),
             (w, x, n, scale, shift))
DF_KDISPATCH(int64_t, df_row_cdf_find, (const float *w, int64_t n, double target),
             (w, n, target))
DF_KDISPATCH_VOID(df_vocab_stats,
                  (df_vstat *st, float *zt, const int32_t *target, const float *h,
                   const float *W, int64_t n, int64_t V, int64_t H, float inv_t, float softcap, unsigned flags,
                   const df_vocab_tiling *t),
                  (st, zt, target, h, W, n, V, H, inv_t, softcap, flags, t))
DF_KDISPATCH_VOID(df_vstat_merge, (const df_vstat *st, int64_t G, df_vrow *out), (st, G, out))
DF_KDISPATCH(int32_t, df_vocab_draw,
             (const df_vstat *st, int64_t G, const df_vrow *row, double u, const float *h_row,
              const float *W, int64_t V, int64_t H, float inv_t, float softcap, const df_vocab_tiling *t,
              float *buf, float *z_tok),
             (st, G, row, u, h_row, W, V, H, inv_t, softcap, t, buf, z_tok))
DF_KDISPATCH(int64_t, df_vocab16_rows, (int64_t n, const df_vocab_tiling *t), (n, t))
DF_KDISPATCH(int, df_vocab_stats16,
             (df_vstat *st, float *zt, const int32_t *target, const df_vocab16 *b, int64_t n,
              int64_t V, int64_t H, float inv_t, float softcap, unsigned flags, const df_vocab_tiling *t),
             (st, zt, target, b, n, V, H, inv_t, softcap, flags, t))
DF_KDISPATCH(int32_t, df_vocab_draw16,
             (const df_vstat *st, int64_t G, const df_vrow *row, double u, const df_vocab16 *b,
              int64_t row_index, int64_t V, int64_t H, float inv_t, float softcap, const df_vocab_tiling *t,
              float *buf, float *z_tok),
             (st, G, row, u, b, row_index, V, H, inv_t, softcap, t, buf, z_tok))

/* ops_lmhead.c */
DF_KDISPATCH(int64_t, df_lmhead_scratch_floats16,
             (int64_t n, int64_t V, int64_t H, const df_vocab_tiling *t), (n, V, H, t))
DF_KDISPATCH(int, df_lmhead_fwd16,
             (float *logp, float *entropy, float *sum_pi_sq, float *lse, const df_vocab16 *b,
              const int32_t *target, int64_t n, int64_t V, int64_t H, float temperature, float softcap,
              const df_vocab_tiling *t, float *scratch),
             (logp, entropy, sum_pi_sq, lse, b, target, n, V, H, temperature, softcap, t, scratch))
DF_KDISPATCH(int, df_lmhead_bwd16,
             (float *dh, float *dW, const float *dlogp, const float *dentropy,
              const df_vocab16 *b, const int32_t *target, const float *lse,
              const float *entropy, int64_t n, int64_t V, int64_t H, float temperature, float softcap,
              const df_vocab_tiling *t, float *scratch),
             (dh, dW, dlogp, dentropy, b, target, lse, entropy, n, V, H, temperature, softcap, t,
              scratch))
DF_KDISPATCH(int64_t, df_lmhead_scratch_floats, (int64_t n, int64_t V, int64_t H), (n, V, H))
DF_KDISPATCH(int64_t, df_lmhead_scratch_floats_tiled,
             (int64_t n, int64_t V, int64_t H, const df_vocab_tiling *t), (n, V, H, t))
DF_KDISPATCH_VOID(df_lmhead_fwd,
                  (float *logp, float *entropy, float *sum_pi_sq, float *lse, const float *h, const float *W,
                   const int32_t *target, int64_t n, int64_t V, int64_t H, float temperature, float softcap,
                   float *scratch),
                  (logp, entropy, sum_pi_sq, lse, h, W, target, n, V, H, temperature, softcap, scratch))
DF_KDISPATCH_VOID(df_lmhead_bwd,
                  (float *dh, float *dW, const float *dlogp, const float *dentropy,
                   const float *h, const float *W, const int32_t *target, const float *lse,
                   const float *entropy, int64_t n, int64_t V, int64_t H, float temperature, float softcap,
                   float *scratch),
                  (dh, dW, dlogp, dentropy, h, W, target, lse, entropy, n, V, H, temperature,
                   softcap, scratch))
DF_KDISPATCH_VOID(df_lmhead_fwd_tiled,
                  (float *logp, float *entropy, float *sum_pi_sq, float *lse, const float *h, const float *W,
                   const int32_t *target, int64_t n, int64_t V, int64_t H, float temperature, float softcap,
                   const df_vocab_tiling *t, float *scratch),
                  (logp, entropy, sum_pi_sq, lse, h, W, target, n, V, H, temperature, softcap, t, scratch))
DF_KDISPATCH_VOID(df_lmhead_bwd_tiled,
                  (float *dh, float *dW, const float *dlogp, const float *dentropy,
                   const float *h, const float *W, const int32_t *target, const float *lse,
                   const float *entropy, int64_t n, int64_t V, int64_t H, float temperature, float softcap,
                   const df_vocab_tiling *t, float *scratch),
                  (dh, dW, dlogp, dentropy, h, W, target, lse, entropy, n, V, H, temperature, softcap, t,
                   scratch))

/* ops_kv.c */
DF_KDISPATCH_VOID(df_kv_write,
                  (const df_backend_kv *kv, int64_t layer, const float *k, const float *v,
                   const int32_t *slot, const int32_t *pos, int64_t n),
                  (kv, layer, k, v, slot, pos, n))
DF_KDISPATCH_VOID(df_kv_copy, (const df_backend_kv *kv, int64_t src, int64_t dst, int64_t len),
                  (kv, src, dst, len))
DF_KDISPATCH(int64_t, df_kv_scratch_floats, (int64_t nh, int64_t max_len), (nh, max_len))
DF_KDISPATCH_VOID(df_kv_attention,
                  (float *out, const float *q, const df_backend_kv *kv, int64_t layer,
                   const int32_t *slot, const int32_t *pos, int64_t n, int64_t nh, int64_t nkv,
                   int64_t hd, int64_t window, float softcap, float *scores),
                  (out, q, kv, layer, slot, pos, n, nh, nkv, hd, window, softcap, scores))

/* optim_step.c */
DF_KDISPATCH(int, df_adamw_step, (df_adamw *o, float *p, const float *g, double lr),
             (o, p, g, lr))
DF_KDISPATCH(double, df_grad_norm, (const float *g, int64_t n), (g, n))
DF_KDISPATCH(double, df_clip_grad_norm, (float *g, int64_t n, double max_norm), (g, n, max_norm))
