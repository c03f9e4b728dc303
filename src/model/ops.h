/*
 * ops.h (internal) — the model engine's operators as explicit forward /
 * backward pairs (docs/conventions.md §4, llm.c style). All tensors are row-major float32.
 * T = number of packed tokens, H = hidden size, nh / nkv = query / key-value
 * heads, hd = head dim. Backward functions ACCUMULATE (+=) into parameter
 * gradients; activation gradients are documented per function.
 * Threading: OpenMP inside each op; matmuls go through oneDNN. Ops never
 * allocate: scratch is passed in (or is a bounded per-thread stack tile).
 * Indices and sizes are int64_t, so T * vocab and T * hidden never overflow.
 */
#ifndef DF_MODEL_OPS_H
#define DF_MODEL_OPS_H

#include "distflow/backend.h"
#include "distflow/model.h"

#include <stdbool.h>
#include <stdint.h>

/** Largest head_dim the attention kernels accept (their per-thread tiles are sized by it). */
#define DF_MAX_HEAD_DIM 256
/**
 * Vocabulary tiling of the LM head and of rollout sampling (ops_vocab.c): a
 * work item is DF_LMHEAD_ITEM_ROWS rows x one group of DF_LMHEAD_GROUP
 * vocabulary columns; inside it a thread computes [DF_LMHEAD_ROWS,
 * DF_LMHEAD_COLS] tiles of logits into a stack buffer (kept in cache), weight
 * tile by weight tile, all row blocks of the item for each. Groups depend only
 * on the vocabulary size, so results do not depend on the thread count.
 */
#define DF_LMHEAD_ROWS 64
#define DF_LMHEAD_COLS 1024
#define DF_LMHEAD_GROUP 8192
#define DF_LMHEAD_ITEM_ROWS 512
/** Largest rows * cols of a tile (a per-thread stack buffer of this many floats). */
#define DF_LMHEAD_TILE_MAX (DF_LMHEAD_ROWS * DF_LMHEAD_COLS)

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
 * primitives by shape; df_mm_* and df_mm_w16 are not thread-safe (one context per
 * df_acts), df_mm16_tile is (the LM head's tiles).
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
/** Give the pages of c's operand buffers and scratchpads back to the OS between uses (their
 *  contents are dead after each call; df_pages_release); returns the bytes released. */
int64_t df_mm_ctx_release_pages(df_mm_ctx *c);
/** Bytes df_mm_ctx_create(max_elems) allocates: its two bf16 operand buffers. */
int64_t df_mm_ctx_bytes(int64_t max_elems);
/** Calls served by float32 sgemm because a primitive could not be created or run. */
int64_t df_mm_ctx_fallbacks(const df_mm_ctx *c);
/** dst[n] = src rounded to bfloat16 (nearest even; NaN stays NaN). */
void df_bf16_from_f32(uint16_t *dst, const float *src, int64_t n);
/** df_bf16_from_f32 on the calling thread only (inside a parallel region). */
void df_bf16_from_f32_serial(uint16_t *dst, const float *src, int64_t n);
/** As df_gemm_nt / _nn / _tn in bf16; c == NULL is exactly the float32 function. */
void df_mm_nt(df_mm_ctx *c, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
              const float *B, float beta, float *C);
void df_mm_nn(df_mm_ctx *c, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
              const float *B, float beta, float *C);
void df_mm_tn(df_mm_ctx *c, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
              const float *B, float beta, float *C);
/**
 * C[M,N] = alpha A op(W) + beta C with W already in bfloat16 (df_weights16) and A float32
 * [M,K] rounded to bfloat16 here, float32 accumulation: tb true: W [N,K] and op(W) = W^T
 * (a Linear forward x W^T); tb false: W [K,N] (its input gradient dy W). Rows of A beyond
 * the context's max_elems go in blocks. Errors: DF_EINVAL (no context, K > max_elems),
 * DF_EINTERNAL when oneDNN fails (no float32 fallback: there is no float32 W here).
 */
int df_mm_w16(df_mm_ctx *c, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
              const float *A, const uint16_t *W, float beta, float *C);

/**
 * Packed weights: a [N, K] bf16 weight reordered once into the blocked layout oneDNN's
 * matmul kernels read W^T in (its weights format "any"), so that the calls stop copying a
 * plain W into that layout each time: +20-30% at M = 64 rows (a decode step), ~5% at
 * M >= 1024, measured with weights streamed from memory. The layout is the CPU's (oneDNN's
 * choice), so a packed tensor is only for the context that packed it. df_mm_packed_bytes:
 * the bytes of the packed form (its own padding included; -1 when oneDNN has no
 * layout, df_last_error says so). df_mm_pack_w16: W [N, K] row-major into dst (df_mm_packed_bytes,
 * 64-byte aligned). df_mm_w16_packed: df_mm_w16 with tb true on a packed Wp; the same sums
 * per row, so the same values as df_mm_w16 up to the order of the K-sums inside the kernel.
 */
int64_t df_mm_packed_bytes(df_mm_ctx *c, int64_t N, int64_t K);
/** Whether an M-row matmul on a packed [N, K] weight runs a native bf16 kernel (AMX /
 *  AVX512-BF16) — oneDNN would otherwise serve the blocked layout with its slow reference
 *  kernel, should its fast kernels want another layout at this M on some CPU. */
bool df_mm_packed_native(df_mm_ctx *c, int64_t M, int64_t N, int64_t K);
int df_mm_pack_w16(df_mm_ctx *c, int64_t N, int64_t K, const uint16_t *W, uint16_t *dst);
int df_mm_w16_packed(df_mm_ctx *c, int64_t M, int64_t N, int64_t K, float alpha,
                     const float *A, const uint16_t *Wp, float beta, float *C);

/**
 * Column slices of a packed [N, K] weight: where oneDNN's layout keeps N blocks outermost, the
 * slice of columns [c0, c0 + w) starting at a multiple of `step` is the packed form of a w-column
 * weight of its own, at element c0 * the returned stride. Returns that stride (the padded K)
 * when every width in widths[0 .. n) slices so and step is a multiple of the column block; 0
 * when not (read the row-major weight then).
 */
int64_t df_mm_packed_col_stride(df_mm_ctx *c, int64_t N, int64_t K, int64_t step,
                                const int64_t *widths, int n_widths);
/** df_mm16_tile with tb true and beta 0 on a packed weight slice Bp (df_mm_packed_col_stride);
 *  thread-safe as df_mm16_tile, whose errors it has. */
int df_mm16_tile_packed(df_mm_ctx *c, int64_t M, int64_t N, int64_t K, float alpha,
                        const uint16_t *A, const uint16_t *Bp, float *C);

/**
 * A packed copy of a df_weights16's layer projections (df_mm_pack_w16) and, where its
 * vocabulary tiles can be cut from the packed form (df_mm_packed_col_stride), of its LM
 * head, for the forwards of one weight version: the rollout packs its bf16 copy at each
 * weight sync and decodes from it. The embedding stays the source's. Pages are reserved at
 * create and written by each pack; df_packed16_release gives them back (then the copy is
 * stale until packed again).
 */
typedef struct df_packed16 df_packed16;
typedef struct df_vocab_tiling df_vocab_tiling;
/** A copy for cfg's layers through mm (the context whose layout it holds; it must outlive
 *  the copy), with the LM head when `head` (the tiling its readers use; NULL: no head) slices.
 *  *out stays NULL (DF_OK) where a matmul of up to max_rows rows on the packed layout would
 *  not run a native kernel (df_mm_packed_native). DF_EINTERNAL when oneDNN fails; DF_ENOMEM. */
int df_packed16_create(const df_model_config *cfg, df_mm_ctx *mm, const df_vocab_tiling *head,
                       int64_t max_rows, df_packed16 **out);
/** Bytes df_packed16_create maps for these arguments on this CPU (0: none made, e.g. without
 *  native bf16 matmuls). */
int64_t df_packed16_bytes_for(const df_model_config *cfg, const df_vocab_tiling *head,
                              int64_t max_rows);
/** The packed LM head and its column-slice stride (df_vocab16.packed_stride), or NULL / 0. */
const uint16_t *df_packed16_lm_head(const df_packed16 *p, int64_t *stride);
/** Pack every layer of src (same shapes) into p; p then names src and its refresh count. */
int df_packed16_pack(df_packed16 *p, const df_weights16 *src);
/** Whether p holds src as it is now (packed since src's last refresh, pages not released). */
bool df_packed16_is_current(const df_packed16 *p, const df_weights16 *src);
/** Layer l's packed tensors (packed = true). */
const df_layer16 *df_packed16_layer(const df_packed16 *p, int64_t l);
/** Bytes the copy maps. */
int64_t df_packed16_bytes(const df_packed16 *p);
/** Give the pages back (df_pages_release); returns the bytes released. */
int64_t df_packed16_release(df_packed16 *p);
/** Bytes of p resident now (df_pages_resident; 0 for NULL, -1 when the kernel does not say). */
int64_t df_packed16_resident(const df_packed16 *p);
void df_packed16_free(df_packed16 *p);

/**
 * C[M,N] = alpha op(A) op(B) + beta C with both operands already bfloat16, float32
 * accumulation; ta: A is [K,M] (op = transpose), else [M,K]; tb: B is [N,K], else [K,N];
 * all row-major and contiguous. Safe to call from several OpenMP threads at once (the
 * vocabulary tiles of the LM head): its primitives live in a table of their own, never
 * evicted, and each thread has its own oneDNN stream. Errors: DF_EINVAL (no context),
 * DF_EINTERNAL (oneDNN failed); df_error is not called (threads), the caller reports.
 */
int df_mm16_tile(df_mm_ctx *c, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                 const uint16_t *A, const uint16_t *B, float beta, float *C);
/** oneDNN primitives this context has created so far (both caches): a rebuild counter. */
int64_t df_mm_ctx_created(const df_mm_ctx *c);

/**
 * The CPU backend with bf16 matmuls through *mm (a context of df_mm_ctx_create, owned by the
 * caller, read at each call; NULL there: float32 gemm, and gemm_w16 fails): gemm rounds both
 * operands, gemm_w16 reads a df_weights16 weight. What a rollout with bf16 weights runs on.
 */
df_backend df_backend_cpu_bf16(df_mm_ctx **mm);
/**
 * df_weights16_refresh from m's float32 weights for a frozen model kept in bf16 (a reference with
 * model_dtype bf16), giving each float32 tensor's whole pages back to the OS (madvise DONTNEED;
 * they then read as zeros) right after its conversion, so both copies are never resident whole:
 * every layer matmul weight; the embedding when w holds it (DF_W16_EMBED: the lookup reads the
 * copy); an untied LM head when head16 (the backend runs the bf16 head: lmhead_fwd_w16). Tied
 * embeddings are the head's rows: given back only when both readers use the copy. m then serves
 * only forward passes reading w (df_acts_share_weights16); norms and biases stay float32.
 * *released (may be NULL): the bytes given back. Errors: df_weights16_refresh's.
 */
int df_weights16_refresh_release(df_weights16 *w, df_model *m, bool head16, int64_t *released);
/**
 * Offload a frozen model's copy (ref.fsdp_config.param_offload): its blob moves to an unlinked
 * file in `dir` mapped over the same addresses (df_pages_to_file), so df_weights16_page_out can
 * give its pages back after every pass without losing them. Refreshes still work (they write
 * the file). Errors: DF_EIO naming the directory (the copy is then unchanged).
 */
int df_weights16_offload(df_weights16 *w, const char *dir);
/** The copy's pages back to the OS (an offloaded copy keeps its bytes in the file; the next
 *  read faults them in); returns the bytes released. */
int64_t df_weights16_page_out(df_weights16 *w);
/**
 * A copy's whole blob (*elems bf16 elements: every tensor in layout order, each padded to 32),
 * for a transfer to a copy made with the same config and flags (the async runtime's bf16
 * weights: src/workers/dag/async_weights.c). Read-only: the copy keeps its version.
 */
const uint16_t *df_weights16_blob(const df_weights16 *w, int64_t *elems);
/** The blob for writing it whole from elsewhere: the copy holds no version from now until
 *  df_weights16_write_end (a half-written copy is never current). */
uint16_t *df_weights16_write_begin(df_weights16 *w, int64_t *elems);
/**
 * After df_weights16_write_begin: the blob now holds what df_weights16_refresh_model(w, m) would
 * give (the writer's promise: a sender's df_weights16_blob of m's weights, same config and
 * flags). Counts as a refresh (df_weights16_version: a packed copy of w is re-packed) and records
 * m->version (df_weights16_is_current).
 */
void df_weights16_write_end(df_weights16 *w, const df_model *m);
/** Bytes df_weights16_create_ex allocates for cfg and flags (model.h; cfg valid). */
int64_t df_weights16_bytes_for(const df_model_config *cfg, unsigned flags);
/** Whether a copy made with `flags` holds the tensor of m that starts at p (a layer's q/k/v/o or
 *  gate/up/down; the LM head with DF_W16_LM_HEAD; the embedding with DF_W16_EMBED, or with
 *  DF_W16_LM_HEAD when tied): the tensors a bf16 reader does not read in float32. */
bool df_weights16_holds(const df_model *m, const float *p, unsigned flags);
/** Elements of the widest matmul input of `rows` rows of a cfg decoder (max(hidden, intermediate,
 *  heads x head_dim) per row): the max_elems of a df_mm_ctx serving those rows. */
int64_t df_mm_elems_for(const df_model_config *cfg, int64_t rows);

/* ---- embedding ------------------------------------------------------------ */

/** out[T,H] = table[ids[t]]. */
void df_embedding_fwd(float *out, const int32_t *ids, const float *table, int64_t T, int64_t H);
/** out[T,H] = table16[ids[t]] (bfloat16 rows) widened exactly to float32. */
void df_embedding_fwd_bf16(float *out, const int32_t *ids, const uint16_t *table16, int64_t T,
                           int64_t H);
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
/** As df_rope_table with the frequencies inv_freq[hd/2] (df_rope_inv_freq) instead of theta. */
void df_rope_table_freq(float *cos_t, float *sin_t, int64_t n_pos, int64_t hd,
                        const float *inv_freq);
/**
 * inv_freq[rope_dim / 2] of c's RoPE (over df_model_rope_dim's rd in hd's place) in float32 (not a per-variant kernel: src/model/rope.c):
 * DF_ROPE_DEFAULT 1 / theta^(2i / hd); DF_ROPE_LLAMA3 those rescaled as HF's
 * _compute_llama3_parameters (wavelength 2 pi / f above original_max_position_embeddings /
 * low_freq_factor: f / factor; below original_max_position_embeddings / high_freq_factor: f;
 * between: (1 - s) f / factor + s f with s = (original / wavelength - low) / (high - low));
 * DF_ROPE_LINEAR the default ones / factor (HF _compute_linear_scaling_rope_parameters);
 * DF_ROPE_LONGROPE 1 / (short_factor[i] theta^(2i / hd)) (HF _compute_longrope_parameters);
 * DF_ROPE_YARN the default ones blended with them / factor by YaRN's ramp (HF
 * _compute_yarn_parameters: the correction range in double, the ramp and blend in float32), each
 * operation in float32 as PyTorch evaluates it.
 */
void df_rope_inv_freq(float *inv_freq, const df_model_config *c);
/** The multiplier of c's cos / sin tables: LongRoPE's and YaRN's attention factor (in float32),
 *  else 1. */
float df_rope_attention_factor(const df_model_config *c);
/** YaRN's attention factor when rope_scaling gives none (HF _compute_yarn_parameters, in double):
 *  get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when both are non-zero, else
 *  get_mscale(factor), with get_mscale(s, m) = 1 for s <= 1, else 0.1 m ln(s) + 1 (m = 1 default). */
double df_rope_yarn_attention(const df_model_config *c);
/**
 * cos_t, sin_t [n_pos, df_model_rope_dim(c) / 2] of c's RoPE: df_rope_table_freq of df_rope_inv_freq, times
 * df_rope_attention_factor (HF multiplies emb.cos() / emb.sin() by attention_scaling). The tables
 * every decoder (training, rollout, any backend) rotates with.
 */
void df_rope_model_table(float *cos_t, float *sin_t, int64_t n_pos, const df_model_config *c);
/** Whether a and b rotate alike: the same head_dim, rotated dims, frequencies (bit for bit) and
 *  attention factor. */
bool df_rope_same(const df_model_config *a, const df_model_config *b);
/**
 * In place on x[T, n_heads * hd] with table rows pos[t] (< the table's n_pos): the first rd dims
 * of each head (rd even, <= hd) rotate as above with rd in hd's place (pairs (i, i + rd/2), the
 * table [n_pos, rd/2]); dims rd .. hd-1 pass unchanged (HF Phi3 apply_rotary_pos_emb's q_pass;
 * rd = hd: the whole head). inverse = true rotates by the negative angle: the backward pass (the
 * rotation's transpose) applied to a gradient.
 */
void df_rope_apply(float *x, const int32_t *pos, int64_t T, int64_t n_heads, int64_t hd,
                   int64_t rd, const float *cos_t, const float *sin_t, bool inverse);
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
 * window > 0 limits the mask to a sliding window: the query at position i of its
 * sequence sees keys i - window < j <= i (HF masking_utils sliding_window_overlay and
 * causal_mask_function); 0: all j <= i.
 * lse[T, nh] receives each row's log-sum-exp of the scaled scores (saved for
 * the backward pass); the [L, L] score matrix is never stored. Scale
 * 1 / sqrt(hd) as HF's eager attention. hd <= DF_MAX_HEAD_DIM. Parallel over
 * (sequence, head). Reference: FlashAttention-2 (Dao 2023), Algorithm 1; key tiles
 * wholly outside a row's window are skipped.
 * softcap C > 0 (Gemma 2's attn_logit_softcapping; 0: none): each scaled score s becomes
 * C tanh(s / C) before the mask and the softmax (HF modeling_gemma2.py eager_attention_forward),
 * and lse is that of the capped scores.
 */
void df_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                      const int64_t *seq_offsets, int64_t n_seqs, int64_t nh, int64_t nkv,
                      int64_t hd, int64_t window, float softcap);
/**
 * dq, dk, dv (same shapes as q, k, v) are OVERWRITTEN, given dout and the
 * forward's out and lse (and its window and softcap). Recomputes probabilities tile by tile
 * (FlashAttention-2, Algorithm 2). With softcap C > 0 the score gradient through the cap is
 * dS_raw = dS_capped (1 - tanh^2(s / C)), tanh recomputed from the raw scaled score s.
 * Parallel over (sequence, kv head).
 */
void df_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *out,
                      const float *lse, const float *q, const float *k, const float *v,
                      const int64_t *seq_offsets, int64_t n_seqs, int64_t nh, int64_t nkv,
                      int64_t hd, int64_t window, float softcap);

/* ---- attention over the rollout's KV cache (ops_kv.c, backend.h df_backend_kv) ---- */

/** Element (layer, slot, pos, 0) of one of kv's tensors (base: kv->k or kv->v). */
static inline void *df_kv_at(const df_backend_kv *kv, void *base, int64_t layer, int64_t slot,
                             int64_t pos)
{
    const int64_t i = ((layer * kv->n_slots + slot) * kv->max_len + pos) * kv->kv_dim;
    return (char *)base + i * (kv->dtype == DF_KV_BF16 ? 2 : 4);
}
/** Row r of k, v [n, kv_dim] into (layer, slot[r], pos[r]), rounded to nearest even in bf16. */
void df_kv_write(const df_backend_kv *kv, int64_t layer, const float *k, const float *v,
                 const int32_t *slot, const int32_t *pos, int64_t n);
/** Positions [0, len) of slot src into slot dst, every layer. */
void df_kv_copy(const df_backend_kv *kv, int64_t src, int64_t dst, int64_t len);
/** omp_get_max_threads() * nh * max_len: df_kv_attention's scores, one block per thread. */
int64_t df_kv_scratch_floats(int64_t nh, int64_t max_len);
/**
 * out[n, nh*hd] = for each row r and head h: softmax(q_h . K[slot_r][j0..pos_r] / sqrt(hd))
 * . V[slot_r][j0..pos_r] in layer `layer`, GQA by h / (nh / nkv), j0 = 0 or, with window > 0,
 * pos_r - window + 1 (df_model_layer_window). q: [n, nh*hd]. bf16 caches are widened to
 * float32 as they are read; scores, softmax and sums are float32 either way. Each row is
 * computed by one thread in a fixed order, so results do not depend on the thread count or
 * on the other rows. scores: df_kv_scratch_floats(nh, kv->max_len) floats. softcap C > 0
 * (Gemma 2): each scaled score s becomes C tanh(s / C) before the softmax, as df_attention_fwd.
 */
void df_kv_attention(float *out, const float *q, const df_backend_kv *kv, int64_t layer,
                     const int32_t *slot, const int32_t *pos, int64_t n, int64_t nh,
                     int64_t nkv, int64_t hd, int64_t window, float softcap, float *scores);

/* ---- SwiGLU MLP activation (Shazeer 2020) ---------------------------------- */

/** out[n] = silu(gate) * up, silu(g) = g * sigmoid(g) (HF Qwen2MLP with act_fn "silu"). */
void df_swiglu_fwd(float *out, const float *gate, const float *up, int64_t n);
/** dgate, dup OVERWRITTEN: dgate = dout * up * silu'(gate), dup = dout * silu(gate). dgate may
 *  be gate and dup may be up (in place: element i's inputs are read before its outputs are
 *  written); no other overlap. */
void df_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                   const float *up, int64_t n);

/* ---- GeGLU MLP activation (Shazeer 2020; Gemma 3) ---------------------------- */

/* GELU's tanh approximation (Hendrycks & Gimpel 2016; PyTorch gelu(approximate="tanh")):
 * 2 sqrt(2 / pi), 0.044715 and 3 x 0.044715, as float32 constants. */
#define DF_GELU_2K0 1.5957691216057308f
#define DF_GELU_K1 0.044715f
#define DF_GELU_3K1 0.134145f

/** out[n] = gelu_tanh(gate) * up, gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715
 *  g^3))) (HF Gemma3MLP with hidden_activation "gelu_pytorch_tanh"), evaluated as g sigmoid(2
 *  sqrt(2 / pi) (g + 0.044715 g^3)). */
void df_geglu_fwd(float *out, const float *gate, const float *up, int64_t n);
/** dgate, dup OVERWRITTEN: dgate = dout * up * gelu_tanh'(gate), dup = dout * gelu_tanh(gate).
 *  dgate may be gate and dup may be up (in place), as df_swiglu_bwd; no other overlap. */
void df_geglu_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                  const float *up, int64_t n);

/* ---- softmax statistics over the vocabulary (ops_vocab.c) -------------------- */
/*
 * For rows h[n, H] and weights W[V, H], z = (h W^T) * inv_t is computed tile by
 * tile (oneDNN sgemm on one thread per tile) and reduced while the tile is in
 * cache; the [n, V] logits never exist. Shared by the LM head and by rollout
 * sampling. Work items are (row item, column group) pairs run in parallel
 * (dynamic schedule); each owns its (row, group) statistics, merged across
 * groups in group order, so results do not depend on the thread count or
 * schedule. Each thread holds one DF_LMHEAD_TILE_MAX-float tile (256 KiB) on
 * its stack.
 */

/** Tile shape: rows per block (<= DF_LMHEAD_ROWS), columns per logits tile
 *  (rows * cols <= DF_LMHEAD_TILE_MAX), columns per work item (rounded up to a
 *  multiple of cols), rows per work item (rounded up to a multiple of rows). */
typedef struct df_vocab_tiling {
    int64_t rows, cols, group, item_rows;
} df_vocab_tiling;

/** {DF_LMHEAD_ROWS, DF_LMHEAD_COLS, DF_LMHEAD_GROUP, DF_LMHEAD_ITEM_ROWS}. */
df_vocab_tiling df_vocab_tiling_default(void);
/** The default with fewer columns per tile for large H (a weight tile <= 512 KiB)
 *  and fewer rows per item for large G * H (the backward's scratch <= 16 MiB):
 *  what df_lmhead_fwd / _bwd and rollout sampling use. */
df_vocab_tiling df_vocab_tiling_for(int64_t V, int64_t H);
/** t clamped to the limits above (each >= 1). */
df_vocab_tiling df_vocab_tiling_clamp(const df_vocab_tiling *t);
/** Column groups of a vocabulary of V: ceil(V / group) of a clamped tiling. */
int64_t df_vocab_groups(int64_t V, const df_vocab_tiling *t);

/** Softmax statistics of one row of z over one column group. */
typedef struct df_vstat {
    double s0;   /**< sum_v e^(z_v - m) */
    double s1;   /**< sum_v e^(z_v - m) (z_v - m); DF_VSTAT_ENTROPY only */
    double s2;   /**< sum_v e^(2 (z_v - m)); DF_VSTAT_SUMSQ only */
    float m;     /**< max_v z_v */
    int32_t arg; /**< lowest v with z_v = m (a vocabulary index); DF_VSTAT_ARGMAX only */
} df_vstat;

enum { DF_VSTAT_ENTROPY = 1, DF_VSTAT_ARGMAX = 2, DF_VSTAT_SUMSQ = 4 };

/**
 * st[n, G] (G = df_vocab_groups) = per-group statistics of z = (h W^T) * inv_t,
 * h [n, H], W [V, H]; with softcap C > 0 (Gemma 2's final_logit_softcapping; 0: none)
 * z = C tanh((h W^T) / C) * inv_t (Gemma2ForCausalLM.forward caps the logits, the sampler or
 * verl then divides by the temperature). zt (NULL = skip) [n] receives z[i, target[i]],
 * target[i] in [0, V). The max and exp passes are 16-lane vector loops
 * (df_v16_exp_softmax in ops_math.h: ~2 ulp); sums are float within a tile
 * row, double across tiles.
 */
void df_vocab_stats(df_vstat *st, float *zt, const int32_t *target, const float *h,
                    const float *W, int64_t n, int64_t V, int64_t H, float inv_t, float softcap,
                    unsigned flags, const df_vocab_tiling *t);

/** Whole-row statistics (the same fields over all V), merged in group order with
 *  the rescaling of the online softmax (Milakov & Gimelshein 2018). */
typedef struct df_vrow {
    double m, s0, s1; /**< log-sum-exp = m + log(s0); entropy = log(s0) - s1 / s0 */
    double s2;        /**< sum_v p_v^2 = s2 / s0^2 (DF_VSTAT_SUMSQ) */
    int32_t arg;      /**< lowest argmax (DF_VSTAT_ARGMAX) */
} df_vrow;
void df_vstat_merge(const df_vstat *st, int64_t G, df_vrow *out);

/**
 * Inverse-CDF draw from softmax(z) of one row: the smallest v whose cumulative
 * probability exceeds u (u in [0, 1), one uniform draw), as a sequential scan
 * over the vocabulary in id order would give (up to float rounding at the
 * boundary). st: the row's G statistics from df_vocab_stats with the same
 * h_row, W, inv_t, softcap and tiling; row: their df_vstat_merge. The group holding the
 * boundary is recomputed into buf and scanned. buf: 2 * t->group floats
 * (clamped tiling), 64-byte aligned. *z_tok receives z of the drawn token
 * (logp = z_tok - lse).
 */
int32_t df_vocab_draw(const df_vstat *st, int64_t G, const df_vrow *row, double u,
                      const float *h_row, const float *W, int64_t V, int64_t H, float inv_t,
                      float softcap, const df_vocab_tiling *t, float *buf, float *z_tok);

/**
 * The bf16 operands of a vocabulary-tiled head in mixed precision (autocast's logits
 * matmul; vLLM's bf16 logits): every logits tile is h16 W16^T on df_mm16_tile (bf16
 * products, float32 accumulation and result); softmax statistics, log-probs and entropies
 * stay float32 / double as in the float32 path. h: the n rows in bf16, padded with zero
 * rows to a multiple of the tiling's rows (df_vocab16_rows) so every tile has the same
 * shape; W: the [V, H] head in bf16 (df_weights16_lm_head).
 */
typedef struct df_vocab16 {
    df_mm_ctx *mm;
    const uint16_t *h, *W;
    int64_t packed_stride; /* 0: W row-major; else W packed, its column slices
                              (df_mm_packed_col_stride) at c0 * packed_stride */
} df_vocab16;
/** Rows b->h must hold for n rows under tiling t: n rounded up to t's (clamped) rows. */
int64_t df_vocab16_rows(int64_t n, const df_vocab_tiling *t);
/** df_vocab_stats over b's bf16 operands (b->h read from row 0). Errors: DF_EINTERNAL
 *  (a oneDNN failure; st then undefined). */
int df_vocab_stats16(df_vstat *st, float *zt, const int32_t *target, const df_vocab16 *b,
                     int64_t n, int64_t V, int64_t H, float inv_t, float softcap, unsigned flags,
                     const df_vocab_tiling *t);
/** df_vocab_draw for row `row` of b->h, its statistics from df_vocab_stats16. Returns -1
 *  when oneDNN fails. */
int32_t df_vocab_draw16(const df_vstat *st, int64_t G, const df_vrow *row, double u,
                        const df_vocab16 *b, int64_t row_index, int64_t V, int64_t H,
                        float inv_t, float softcap, const df_vocab_tiling *t, float *buf,
                        float *z_tok);

/* Row helpers (16-lane loops) for sampling from a materialised row of logits. */

/** max_j x[j] (NaN entries are ignored; -inf for n = 0). */
float df_row_max(const float *x, int64_t n);
/** Lowest j with x[j] == m, or n if none. */
int64_t df_row_find(const float *x, int64_t n, float m);
/** w[j] = e^(x[j] - shift) (w NULL: not stored); returns sum_j of them in double.
 *  shift >= max_j x[j] keeps every term in (0, 1]. */
double df_row_exp(float *w, const float *x, int64_t n, float shift);
/** w[j] = e^(x[j] * scale - shift) in double (x[j] * scale rounded to double
 *  first; a few ulp from libm's exp); returns their sum. For samplers that
 *  keep double-precision weights (top-k / top-p). */
double df_row_exp_f64(double *w, const float *x, int64_t n, double scale, double shift);
/** First j whose running sum w[0] + ... + w[j] (double, in order) exceeds
 *  target; when rounding leaves the total <= target, the last j with w[j] > 0
 *  (n - 1 if none): a sequential CDF walk. */
int64_t df_row_cdf_find(const float *w, int64_t n, double target);

/* ---- LM head: log-prob of given tokens, entropy and sum of p^2, in vocabulary tiles ---- */

/**
 * For rows h[n, H] and weights W[V, H], with z = (h W^T) / temperature:
 *   logp[i] = z[i, target[i]] - logsumexp(z[i])     (lse[i] saved)
 *   entropy[i] = logsumexp(z[i]) - sum_v softmax(z[i])_v z[i,v]  (NULL = skip;
 *   the entropy's extra multiply-add per logit is then not done)
 *   sum_pi_sq[i] = sum_v softmax(z[i])_v^2 = exp(logsumexp(2 z[i]) - 2 logsumexp(z[i]))
 *   (NULL = skip; verl calculate_sum_pi_squared_from_logits, for the optimal token baseline)
 * target[i] in [0, V). Streams over vocabulary tiles (df_vocab_stats) with an
 * online log-sum-exp (Milakov & Gimelshein 2018, "Online normalizer
 * calculation for softmax") extended with a running sum of p (z - m) for the
 * entropy. Matches verl's logprobs_from_logits / entropy_from_logits applied
 * to logits.div(temperature). softcap C > 0 (Gemma 2's final_logit_softcapping; 0: none):
 * z = C tanh((h W^T) / C) / temperature (df_vocab_stats). scratch: df_lmhead_scratch_floats(n, V, H)
 * floats, 8-byte aligned. Parallel over (row item, column group).
 */
void df_lmhead_fwd(float *logp, float *entropy, float *sum_pi_sq, float *lse, const float *h, const float *W,
                   const int32_t *target, int64_t n, int64_t V, int64_t H, float temperature,
                   float softcap, float *scratch);
/**
 * dh[n, H] OVERWRITTEN, dW[V, H] ACCUMULATED, from dlogp[n] and dentropy[n]
 * (NULL = 0). Recomputes logits tile by tile from lse (and entropy, needed
 * only when dentropy is given), with p = softmax(z):
 *   dz_v = dlogp (1[v = target] - p_v) - dentropy p_v (log p_v + entropy),
 *   dlogits = dz / temperature,  dh = dlogits W,  dW += dlogits^T h;
 * with softcap C > 0, dlogits = dz / temperature (1 - tanh^2(y / C)), y = h W^T the raw logit
 * (the derivative of C tanh(y / C)), tanh recomputed from y.
 * Per DF_LMHEAD_ITEM_ROWS rows, column groups run in parallel: each owns its
 * rows of dW and a partial dh in scratch, summed in group order afterwards
 * (deterministic).
 */
void df_lmhead_bwd(float *dh, float *dW, const float *dlogp, const float *dentropy,
                   const float *h, const float *W, const int32_t *target, const float *lse,
                   const float *entropy, int64_t n, int64_t V, int64_t H, float temperature,
                   float softcap, float *scratch);
/**
 * As df_lmhead_fwd / _bwd with an explicit tiling (clamped as
 * df_vocab_tiling_clamp); scratch holds df_lmhead_scratch_floats_tiled(n, V,
 * H, t) floats. For tests (small tiles exercise every boundary) and tuning.
 */
void df_lmhead_fwd_tiled(float *logp, float *entropy, float *sum_pi_sq, float *lse, const float *h,
                         const float *W, const int32_t *target, int64_t n, int64_t V, int64_t H,
                         float temperature, float softcap, const df_vocab_tiling *t, float *scratch);
void df_lmhead_bwd_tiled(float *dh, float *dW, const float *dlogp, const float *dentropy,
                         const float *h, const float *W, const int32_t *target, const float *lse,
                         const float *entropy, int64_t n, int64_t V, int64_t H, float temperature,
                         float softcap, const df_vocab_tiling *t, float *scratch);
/**
 * df_lmhead_fwd_tiled / _bwd_tiled in mixed precision: the logits tiles from b's bf16
 * operands (df_vocab16, rows padded per df_vocab16_rows), and in the backward dL/dlogits
 * rounded to bf16 before dW += dlogits^T h and dh = dlogits W (autocast's backward of a
 * bf16 Linear; dW stays a float32 accumulation), both GEMMs over a work item's rows and
 * 1024-column chunks of a group (larger work items suit it: the CPU backend's have 512
 * rows). The float32 h and W are not read. scratch: df_lmhead_scratch_floats16 floats.
 * Errors: DF_EINTERNAL (oneDNN).
 */
int df_lmhead_fwd16(float *logp, float *entropy, float *sum_pi_sq, float *lse, const df_vocab16 *b,
                    const int32_t *target, int64_t n, int64_t V, int64_t H, float temperature,
                    float softcap, const df_vocab_tiling *t, float *scratch);
int df_lmhead_bwd16(float *dh, float *dW, const float *dlogp, const float *dentropy,
                    const df_vocab16 *b, const int32_t *target, const float *lse,
                    const float *entropy, int64_t n, int64_t V, int64_t H, float temperature,
                    float softcap, const df_vocab_tiling *t, float *scratch);
/** Scratch floats of df_lmhead_fwd16 / _bwd16 (the backward's dh parts have padded rows). */
int64_t df_lmhead_scratch_floats16(int64_t n, int64_t V, int64_t H, const df_vocab_tiling *t);
/** Floats of scratch df_lmhead_fwd / _bwd need for n rows (df_vocab_tiling_for). */
int64_t df_lmhead_scratch_floats(int64_t n, int64_t V, int64_t H);
int64_t df_lmhead_scratch_floats_tiled(int64_t n, int64_t V, int64_t H, const df_vocab_tiling *t);

#endif /* DF_MODEL_OPS_H */
