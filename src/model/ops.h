/*
 * ops.h (internal) — the model engine's operators as explicit forward /
 * backward pairs (DESIGN.md §5, llm.c style). All tensors are row-major float32.
 * T = number of packed tokens, H = hidden size, nh / nkv = query / key-value
 * heads, hd = head dim. Backward functions ACCUMULATE (+=) into parameter
 * gradients; activation gradients are documented per function.
 * Threading: OpenMP inside each op; matmuls go through oneDNN. Ops never
 * allocate: scratch is passed in (or is a bounded per-thread stack tile).
 * Indices and sizes are int64_t, so T * vocab and T * hidden never overflow.
 */
#ifndef DF_MODEL_OPS_H
#define DF_MODEL_OPS_H

#include <stdbool.h>
#include <stdint.h>

/** Largest head_dim the attention kernels accept (their per-thread tiles are sized by it). */
#define DF_MAX_HEAD_DIM 256
/** LM-head tile: rows x vocabulary columns of logits that exist at one time. */
#define DF_LMHEAD_ROWS 256
#define DF_LMHEAD_COLS 4096

/* ---- matmul (oneDNN) ----------------------------------------------------- */
/*
 * Row-major float32 through dnnl_sgemm (JIT kernels for the host ISA; threads
 * from OpenMP). Called inside an OpenMP parallel region they run on one thread.
 * M, N <= 0 is a no-op; K = 0 gives C = beta * C.
 */

/** C[M,N] = alpha * A[M,K] · B[N,K]^T + beta * C. (PyTorch Linear weight layout for B.) */
void df_gemm_nt(int64_t M, int64_t N, int64_t K, float alpha, const float *A, const float *B,
                float beta, float *C);
/** C[M,N] = alpha * A[M,K] · B[K,N] + beta * C. */
void df_gemm_nn(int64_t M, int64_t N, int64_t K, float alpha, const float *A, const float *B,
                float beta, float *C);
/** C[M,N] = alpha * A[K,M]^T · B[K,N] + beta * C. */
void df_gemm_tn(int64_t M, int64_t N, int64_t K, float alpha, const float *A, const float *B,
                float beta, float *C);

/** y[M,N] = x[M,K] · W[N,K]^T + b[N] (b may be NULL): torch.nn.functional.linear. */
void df_linear_fwd(float *y, const float *x, const float *W, const float *b, int64_t M,
                   int64_t N, int64_t K);
/**
 * dx[M,K] += dy · W (dx may be NULL); dW[N,K] += dy^T · x; db[N] += column sums
 * of dy (db may be NULL).
 */
void df_linear_bwd(float *dx, float *dW, float *db, const float *dy, const float *x,
                   const float *W, int64_t M, int64_t N, int64_t K);

/* ---- bf16 matmuls (oneDNN matmul on AMX / AVX512-BF16) ---------------------- */
/*
 * Optional faster path for the model's Linear layers: A and B are rounded to
 * bfloat16 (round to nearest even), multiplied with float32 accumulation into
 * a float32 C: the arithmetic of torch.autocast(dtype=torch.bfloat16), so
 * results carry ~3 significant digits. Parameters, gradients and optimizer state
 * stay float32. A context owns the conversion scratch and a cache of oneDNN
 * primitives by shape; it is not thread-safe (one per df_acts).
 */
typedef struct df_mm_ctx df_mm_ctx;

/**
 * Context for operands of at most max_elems elements each (larger calls fall
 * back to float32). DF_EUNSUPPORTED when oneDNN has no AMX-BF16 / AVX512-BF16
 * kernel on this CPU (its reference bf16 path would be slower than float32);
 * DF_ENOMEM; DF_EINTERNAL when oneDNN has no CPU engine.
 */
int df_mm_ctx_create(int64_t max_elems, df_mm_ctx **out);
void df_mm_ctx_free(df_mm_ctx *c);
/** Calls served by float32 sgemm because a primitive could not be created or run. */
int64_t df_mm_ctx_fallbacks(const df_mm_ctx *c);
/** dst[n] = src rounded to bfloat16 (nearest even; NaN stays NaN). */
void df_bf16_from_f32(uint16_t *dst, const float *src, int64_t n);
/** As df_gemm_nt / _nn / _tn in bf16; c == NULL is exactly the float32 function. */
void df_mm_nt(df_mm_ctx *c, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
              const float *B, float beta, float *C);
void df_mm_nn(df_mm_ctx *c, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
              const float *B, float beta, float *C);
void df_mm_tn(df_mm_ctx *c, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
              const float *B, float beta, float *C);

/* ---- embedding ------------------------------------------------------------ */

/** out[T,H] = table[ids[t]]. */
void df_embedding_fwd(float *out, const int32_t *ids, const float *table, int64_t T, int64_t H);
/**
 * dtable[ids[t]] += dout[t]. Threads own column ranges and walk the tokens in
 * order, so repeated ids never race and the sum order is fixed.
 */
void df_embedding_bwd(float *dtable, const float *dout, const int32_t *ids, int64_t T, int64_t H);

/* ---- RMSNorm (Zhang & Sennrich 2019; HF Qwen2RMSNorm) ----------------------- */

/** out[T,H] = x * rstd * w, rstd[T] = 1 / sqrt(mean(x[t]^2) + eps) saved for the backward. */
void df_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *w, int64_t T,
                    int64_t H, float eps);
/**
 * dx[T,H] += d/dx (accumulates: the residual stream's gradient), dw[H] += d/dw
 * (dw may be NULL). With xhat = x rstd, g = dout w:
 *   dx = rstd (g - xhat mean(g xhat)),  dw = sum_t dout xhat.
 */
void df_rmsnorm_bwd(float *dx, float *dw, const float *dout, const float *x, const float *w,
                    const float *rstd, int64_t T, int64_t H);

/* ---- rotary position embedding (Su et al. 2021; HF rotate_half convention) -- */
/*
 * For each head of a row at position p, pairs (i, i + hd/2), i < hd/2, rotate
 * by angle a = p * inv_freq[i], inv_freq[i] = 1 / theta^(2i / hd):
 *   x'[i] = x[i] cos a - x[i + hd/2] sin a,  x'[i + hd/2] = x[i + hd/2] cos a + x[i] sin a
 * (HF apply_rotary_pos_emb with rotate_half). inv_freq and p * inv_freq are
 * rounded to float32 as HF's Qwen2RotaryEmbedding does, then cos / sin are
 * taken in double and rounded, so long positions agree with HF to ~1 ulp.
 */

/** cos_t, sin_t [n_pos, hd/2]: the rotation of positions 0 .. n_pos-1. */
void df_rope_table(float *cos_t, float *sin_t, int64_t n_pos, int64_t hd, double theta);
/**
 * In place on x[T, n_heads * hd] with table rows pos[t] (< the table's n_pos).
 * inverse = true rotates by the negative angle: the backward pass (the
 * rotation's transpose) applied to a gradient.
 */
void df_rope_apply(float *x, const int32_t *pos, int64_t T, int64_t n_heads, int64_t hd,
                   const float *cos_t, const float *sin_t, bool inverse);
/** As df_rope_apply(inverse = false) without a table (angles computed per token). */
void df_rope_fwd(float *x, const int32_t *pos, int64_t T, int64_t n_heads, int64_t hd,
                 double theta);
/** In place on the gradient: rotation by the negative angle (the transpose). */
void df_rope_bwd(float *dx, const int32_t *pos, int64_t T, int64_t n_heads, int64_t hd,
                 double theta);

/* ---- causal attention over packed variable-length sequences ----------------- */

/**
 * out[T, nh*hd] = softmax(q k^T / sqrt(hd) + causal mask) v, computed per
 * sequence [seq_offsets[s], seq_offsets[s+1]) and per head, with GQA (query head
 * h reads kv head h / (nh / nkv)). q: [T, nh*hd], k, v: [T, nkv*hd].
 * lse[T, nh] receives each row's log-sum-exp of the scaled scores (saved for
 * the backward pass); the [L, L] score matrix is never stored. Scale
 * 1 / sqrt(hd) as HF's eager attention. hd <= DF_MAX_HEAD_DIM. Parallel over
 * (sequence, head). Reference: FlashAttention-2 (Dao 2023), Algorithm 1.
 */
void df_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                      const int64_t *seq_offsets, int64_t n_seqs, int64_t nh, int64_t nkv,
                      int64_t hd);
/**
 * dq, dk, dv (same shapes as q, k, v) are OVERWRITTEN, given dout and the
 * forward's out and lse. Recomputes probabilities tile by tile
 * (FlashAttention-2, Algorithm 2). Parallel over (sequence, kv head).
 */
void df_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *out,
                      const float *lse, const float *q, const float *k, const float *v,
                      const int64_t *seq_offsets, int64_t n_seqs, int64_t nh, int64_t nkv,
                      int64_t hd);

/* ---- SwiGLU MLP activation (Shazeer 2020) ---------------------------------- */

/** out[n] = silu(gate) * up, silu(g) = g * sigmoid(g) (HF Qwen2MLP with act_fn "silu"). */
void df_swiglu_fwd(float *out, const float *gate, const float *up, int64_t n);
/** dgate, dup OVERWRITTEN: dgate = dout * up * silu'(gate), dup = dout * silu(gate). */
void df_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                   const float *up, int64_t n);

/* ---- LM head: log-prob of given tokens and entropy, in vocabulary chunks ---- */

/**
 * For rows h[n, H] and weights W[V, H], with z = (h W^T) / temperature:
 *   logp[i] = z[i, target[i]] - logsumexp(z[i])     (lse[i] saved)
 *   entropy[i] = logsumexp(z[i]) - sum_v softmax(z[i])_v z[i,v]  (NULL = skip)
 * target[i] in [0, V). Streams over [DF_LMHEAD_ROWS, DF_LMHEAD_COLS] tiles of
 * z with an online log-sum-exp, so the [n, V] logits never exist. Matches
 * verl's logprobs_from_logits / entropy_from_logits applied to
 * logits.div(temperature). scratch: df_lmhead_scratch_floats(n, V, H) floats.
 */
void df_lmhead_fwd(float *logp, float *entropy, float *lse, const float *h, const float *W,
                   const int32_t *target, int64_t n, int64_t V, int64_t H, float temperature,
                   float *scratch);
/**
 * dh[n, H] OVERWRITTEN, dW[V, H] ACCUMULATED, from dlogp[n] and dentropy[n]
 * (NULL = 0). Recomputes logits tile by tile from lse (and entropy, needed
 * only when dentropy is given), with p = softmax(z):
 *   dz_v = dlogp (1[v = target] - p_v) - dentropy p_v (log p_v + entropy),
 *   dlogits = dz / temperature,  dh = dlogits W,  dW += dlogits^T h.
 */
void df_lmhead_bwd(float *dh, float *dW, const float *dlogp, const float *dentropy,
                   const float *h, const float *W, const int32_t *target, const float *lse,
                   const float *entropy, int64_t n, int64_t V, int64_t H, float temperature,
                   float *scratch);
/**
 * As df_lmhead_fwd / _bwd with explicit tile sizes (rows_tile <= DF_LMHEAD_ROWS,
 * any cols_tile >= 1); scratch holds min(n, rows_tile) * min(V, cols_tile)
 * floats. For tests (small tiles exercise every boundary) and tuning.
 */
void df_lmhead_fwd_tiled(float *logp, float *entropy, float *lse, const float *h,
                         const float *W, const int32_t *target, int64_t n, int64_t V, int64_t H,
                         float temperature, int64_t rows_tile, int64_t cols_tile, float *scratch);
void df_lmhead_bwd_tiled(float *dh, float *dW, const float *dlogp, const float *dentropy,
                         const float *h, const float *W, const int32_t *target, const float *lse,
                         const float *entropy, int64_t n, int64_t V, int64_t H, float temperature,
                         int64_t rows_tile, int64_t cols_tile, float *scratch);
/** Floats of scratch df_lmhead_fwd / _bwd need for n rows. */
int64_t df_lmhead_scratch_floats(int64_t n, int64_t V, int64_t H);

#endif /* DF_MODEL_OPS_H */
