/*
 * backend/cuda/cuda_backend.h — the CUDA backend's operators (docs/cuda.md).
 *
 * Built only when CMake finds nvcc and the CUDA toolkit (DF_WITH_CUDA, default ON);
 * DF_HAVE_CUDA is then defined for the code that links it. Every operator is the
 * device twin of a CPU operator in src/model/ops.h (or src/engine, src/model/optim_step.c):
 * same shapes, same row-major layout, same formula, and the conformance tests
 * (tests/test_cuda_*.c) hold each one to the CPU float32 reference with an error bound
 * derived from its dtype. The engine's backend seam (distflow/backend.h) reaches them
 * through the CUDA vtable (backend_cuda.c).
 *
 * Memory: pointers named d_* or documented "device" are device memory from df_cuda_alloc;
 * everything else is host memory. All operators are asynchronous on the context's
 * stream; df_cuda_sync waits and reports a failure of any earlier launch.
 * Errors: every function returns DF_OK or a DF_E* code with df_last_error() naming the
 * CUDA / cuBLAS call and its message (DF_EINVAL for bad sizes, DF_ENOMEM for device
 * memory, DF_EUNSUPPORTED when no device is usable, DF_EINTERNAL otherwise).
 * Sizes and indices are int64_t: T * vocab and T * hidden never overflow.
 */
#ifndef DF_BACKEND_CUDA_H
#define DF_BACKEND_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "distflow/backend.h"
#include "distflow/comm.h"
#include "distflow/common.h"
#include "distflow/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/** One rank's device: its stream, cuBLAS handle and workspace. Not thread-safe. */
typedef struct df_cuda df_cuda;

typedef struct df_cuda_info {
    int device;            /**< CUDA ordinal in this process (after CUDA_VISIBLE_DEVICES) */
    char name[256];        /**< e.g. "NVIDIA H100 80GB HBM3" */
    int cc_major, cc_minor; /**< compute capability */
    int n_sm;              /**< multiprocessors */
    int64_t mem_bytes;     /**< global memory */
    int64_t l2_bytes;      /**< L2 cache */
    int runtime_version, driver_version; /**< e.g. 13000 */
} df_cuda_info;

/* ---- devices and contexts ------------------------------------------------------ */

/** Number of usable devices in *n (0 when there is no driver or no GPU: not an error). */
int df_cuda_device_count(int *n);
/**
 * The device a rank uses: its node-local rank (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID or
 * SLURM_LOCALID; 0 when none is set) modulo the device count, as one rank per GPU under
 * `mpirun -np N` expects. DF_EUNSUPPORTED with the reason when no device is usable.
 */
int df_cuda_local_device(int *device);
/** Context on `device` (< 0: df_cuda_local_device). DF_EUNSUPPORTED when no device is usable. */
int df_cuda_create(int device, df_cuda **out);
void df_cuda_free(df_cuda *c);
void df_cuda_get_info(const df_cuda *c, df_cuda_info *out);
/** The device's name (cudaDeviceProp.name), owned by c. */
const char *df_cuda_device_name(const df_cuda *c);
/** The most bytes of df_cuda_alloc's buffers live at once since c was created (df_memtrack). */
int64_t df_cuda_memory_peak(const df_cuda *c);
/** Wait for the context's stream; reports the first failure of any earlier launch. */
int df_cuda_sync(df_cuda *c);

/* ---- buffers --------------------------------------------------------------------- */

/** *d = bytes of device memory (plain cudaMalloc; bytes = 0 gives NULL). DF_ENOMEM names the size. */
int df_cuda_alloc(df_cuda *c, size_t bytes, void **d);
/** Free device memory from df_cuda_alloc (NULL is a no-op). */
void df_cuda_release(df_cuda *c, void *d);
/** Host → device; the host buffer may be reused when this returns. */
int df_cuda_upload(df_cuda *c, void *d_dst, const void *src, size_t bytes);
/** Device → host; waits for the stream first, so earlier launches' results are included. */
int df_cuda_download(df_cuda *c, void *dst, const void *d_src, size_t bytes);
/** Device → device on the stream (a colocated weight sync). */
int df_cuda_copy(df_cuda *c, void *d_dst, const void *d_src, size_t bytes);
/** d[0 .. n) = value (floats). */
int df_cuda_fill(df_cuda *c, float *d, int64_t n, float value);

/* ---- dtypes ------------------------------------------------------------------------ */

typedef enum df_cuda_dtype { DF_CUDA_F32 = 0, DF_CUDA_BF16 = 1 } df_cuda_dtype;

/** d_dst[n] = d_src rounded to bfloat16, nearest even (NaN stays NaN): df_bf16_from_f32. */
int df_cuda_f32_to_bf16(df_cuda *c, uint16_t *d_dst, const float *d_src, int64_t n);
/** d_dst[n] = d_src widened to float32 (exact). */
int df_cuda_bf16_to_f32(df_cuda *c, float *d_dst, const uint16_t *d_src, int64_t n);

/* ---- matmul (cuBLAS) ---------------------------------------------------------------- */

/**
 * Row-major C[M,N] = alpha · op(A) · op(B) + beta · C, C float32.
 *   op(A) = A [M,K], or A^T with A stored [K,M] when ta;
 *   op(B) = B [K,N], or B^T with B stored [N,K] when tb (PyTorch Linear weight layout).
 * (ta, tb) = (0, 1), (0, 0), (1, 0) are df_gemm_nt / _nn / _tn of src/model/ops.h.
 * dtype DF_CUDA_F32: A, B float32, true float32 arithmetic (TF32 is not allowed);
 * DF_CUDA_BF16: A, B bfloat16 with float32 accumulation (torch.autocast's bf16 matmul).
 * M, N <= 0 is a no-op; K = 0 gives C = beta · C. cublasGemmEx, CUBLAS_COMPUTE_32F.
 */
int df_cuda_gemm(df_cuda *c, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                 const void *d_A, const void *d_B, df_cuda_dtype dtype, float beta, float *d_C);

/* ---- mixed precision's matmuls (gemm16.cu) -------------------------------------------- */

/**
 * The seam's gemm_w16: C[M,N] = alpha A op(W) + beta C, A [M,K] float32 rounded to bfloat16
 * (nearest even, df_cuda_f32_to_bf16) into the context's workspace, W bfloat16 (a df_weights16
 * tensor in device memory): [N,K] with op(W) = W^T when tb, else [K,N]; then df_cuda_gemm
 * DF_CUDA_BF16 (tensor cores, float32 accumulation and C). The workspace grows to M*K
 * elements on first need (cudaMalloc; DF_ENOMEM naming the size).
 */
int df_cuda_gemm_w16(df_cuda *c, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                     const float *d_A, const uint16_t *d_W, float beta, float *d_C);
/**
 * The seam's gemm_bf16: df_cuda_gemm's shapes and (ta, tb) with both float32 operands rounded
 * to bfloat16 per call (two workspaces of M*K and K*N), float32 accumulation: autocast's
 * matmul of two activations (a weight gradient).
 */
int df_cuda_gemm_bf16(df_cuda *c, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                      const float *d_A, const float *d_B, float beta, float *d_C);
/** out[T,H] = table16[ids[t]] widened exactly to float32 (table16 [rows, H] bfloat16, device):
 *  df_embedding_fwd_bf16. */
int df_cuda_embedding_fwd_w16(df_cuda *c, float *d_out, const int32_t *d_ids,
                              const uint16_t *d_table16, int64_t T, int64_t H);

/* ---- embedding, RMSNorm, RoPE, SwiGLU (elementwise.cu) --------------------------------- */

/** out[T,H] = table[ids[t]] (ids device int32, in [0, rows of table)). df_embedding_fwd. */
int df_cuda_embedding_fwd(df_cuda *c, float *d_out, const int32_t *d_ids, const float *d_table,
                          int64_t T, int64_t H);
/** dtable[ids[t]] += dout[t] (atomic adds: the sum order of repeated ids varies). */
int df_cuda_embedding_bwd(df_cuda *c, float *d_dtable, const float *d_dout, const int32_t *d_ids,
                          int64_t T, int64_t H);
/** out[T,H] = x · rstd · w, rstd[T] = 1 / sqrt(mean(x[t]^2) + eps). df_rmsnorm_fwd. */
int df_cuda_rmsnorm_fwd(df_cuda *c, float *d_out, float *d_rstd, const float *d_x,
                        const float *d_w, int64_t T, int64_t H, float eps);
/** dx[T,H] += ..., dw[H] += ... (dw may be NULL), formulas of df_rmsnorm_bwd. */
int df_cuda_rmsnorm_bwd(df_cuda *c, float *d_dx, float *d_dw, const float *d_dout,
                        const float *d_x, const float *d_w, const float *d_rstd, int64_t T,
                        int64_t H);
/**
 * In place on x[T, n_heads * hd]: the first rd dims of each head (rd even, <= hd) rotated by
 * table rows pos[t] (device int32 < n_pos of the table), the rest passed; cos_t, sin_t
 * [n_pos, rd/2] device copies of df_rope_model_table's output, so the angles are bit-identical
 * to the CPU's. inverse: the transpose (the backward). df_rope_apply.
 */
int df_cuda_rope_apply(df_cuda *c, float *d_x, const int32_t *d_pos, int64_t T,
                       int64_t n_heads, int64_t hd, int64_t rd, const float *d_cos,
                       const float *d_sin, bool inverse);
/** out[n] = silu(gate) · up. df_swiglu_fwd. */
int df_cuda_swiglu_fwd(df_cuda *c, float *d_out, const float *d_gate, const float *d_up,
                       int64_t n);
/** dgate, dup OVERWRITTEN. df_swiglu_bwd. */
int df_cuda_swiglu_bwd(df_cuda *c, float *d_dgate, float *d_dup, const float *d_dout,
                       const float *d_gate, const float *d_up, int64_t n);
/** out[n] = gelu_tanh(gate) · up. df_geglu_fwd. */
int df_cuda_geglu_fwd(df_cuda *c, float *d_out, const float *d_gate, const float *d_up,
                      int64_t n);
/** dgate, dup OVERWRITTEN (dgate == gate, dup == up allowed). df_geglu_bwd. */
int df_cuda_geglu_bwd(df_cuda *c, float *d_dgate, float *d_dup, const float *d_dout,
                      const float *d_gate, const float *d_up, int64_t n);

/* ---- rows (rows.cu): the backend seam's row operators ----------------------------------- */

/** y[i, :] = b[N] for i < M (a Linear layer's bias rows). */
int df_cuda_rows_fill(df_cuda *c, float *d_y, const float *d_b, int64_t M, int64_t N);
/** db[N] += sum over M rows of dy[M, N] (a bias gradient; fixed summation order). */
int df_cuda_col_sum_add(df_cuda *c, float *d_db, const float *d_dy, int64_t M, int64_t N);
/** dst[j, :] = src[rows[j], :] for j < n, rows H wide (rows device int64). */
int df_cuda_gather_rows(df_cuda *c, float *d_dst, const float *d_src, const int64_t *d_rows,
                        int64_t n, int64_t H);
/** dst[rows[j], :] += src[j, :] for j < n (rows distinct, device int64). */
int df_cuda_scatter_add_rows(df_cuda *c, float *d_dst, const float *d_src,
                             const int64_t *d_rows, int64_t n, int64_t H);

/* ---- the engine's backend seam (backend_cuda.c) -------------------------------------------- */

/**
 * The CUDA backend of distflow/backend.h on context c (which must outlive it): device memory,
 * cuBLAS float32 matmuls (no TF32) and the operators of this header. df_acts_create_on with
 * it runs the training decoder (df_model_forward / df_model_backward) on the GPU.
 */
df_backend df_backend_cuda(df_cuda *c);
/**
 * df_backend_open_fn of "cuda" (df_backend_register): the CUDA backend on this rank's device
 * (df_cuda_local_device), its context created on first use and kept for the process's life.
 * Errors: DF_EUNSUPPORTED when no device is usable (naming why).
 */
int df_backend_cuda_open(df_backend *out);

/* ---- optimizer (optim.cu) ---------------------------------------------------------- */

/**
 * One AdamW update of p[n] from g[n] with moments m, v (all device float32), t = step (the
 * update's 1-based count, already incremented by the caller), the schedule's lr: the
 * formulas and scalar roundings of df_adamw_step (torch.optim.AdamW, single tensor).
 */
int df_cuda_adamw_step(df_cuda *c, float *d_p, const float *d_g, float *d_m, float *d_v,
                       int64_t n, const df_adamw_config *cfg, int64_t step, double lr);
/** *sumsq = sum_i x[i]^2 in double (host result; a fixed-order two-pass reduction). */
int df_cuda_sumsq(df_cuda *c, const float *d_x, int64_t n, double *sumsq);
/** x[n] *= s (gradient clipping). */
int df_cuda_scale(df_cuda *c, float *d_x, int64_t n, float s);

/* ---- attention (attention.cu) --------------------------------------------------------- */

/**
 * Causal attention over packed variable-length sequences, as df_attention_fwd:
 * out[T, nh*hd] and lse[T, nh] from q [T, nh*hd], k, v [T, nkv*hd]; sequences
 * [seq_offsets[s], seq_offsets[s+1]) (device int64, n_seqs + 1 entries, seq_offsets[n_seqs] = T),
 * max_len >= the longest sequence; GQA h → h / (nh / nkv); scale 1 / sqrt(hd); hd <= 256.
 * window 0: every earlier position; W > 0: the query at position i sees keys i - W < j <= i
 * (df_model_layer_window). softcap 0: none; C > 0 (Gemma 2's attn_logit_softcapping): each
 * scaled score s becomes C tanh(s / C) before the mask and the softmax, and lse is that of the
 * capped scores (df_attention_fwd). FlashAttention-2 tiling (Dao 2023, Algorithm 1): the
 * [L, L] scores never reach device memory; with a window only the key tiles a query tile can
 * see are read. DF_EINVAL for negative sizes or window, hd > 256, nh not a multiple of nkv, a
 * softcap < 0 or not finite.
 */
int df_cuda_attention_fwd(df_cuda *c, float *d_out, float *d_lse, const float *d_q,
                          const float *d_k, const float *d_v, const int64_t *d_seq_offsets,
                          int64_t n_seqs, int64_t T, int64_t max_len, int64_t nh, int64_t nkv,
                          int64_t hd, int64_t window, float softcap);
/** dq, dk, dv OVERWRITTEN from dout and the forward's out, lse (Algorithm 2), under the same
 * window and softcap (the capped score's gradient times 1 - tanh^2(s / C), tanh recomputed
 * from the raw scaled score s). df_attention_bwd. */
int df_cuda_attention_bwd(df_cuda *c, float *d_dq, float *d_dk, float *d_dv, const float *d_dout,
                          const float *d_out, const float *d_lse, const float *d_q,
                          const float *d_k, const float *d_v, const int64_t *d_seq_offsets,
                          int64_t n_seqs, int64_t T, int64_t max_len, int64_t nh, int64_t nkv,
                          int64_t hd, int64_t window, float softcap);

/* ---- KV cache in slots (kv.cu): the seam's df_backend_kv, the rollout's layout ------------ */

/*
 * The cache (distflow/backend.h df_backend_kv): per layer [slot][max_len][kv_dim], K and V
 * apart, float32 or bfloat16, kv->k / kv->v device memory. Twins of src/model/ops_kv.c. Rows,
 * slots and positions are not range-checked on the device (they are device memory): slot <
 * n_slots, pos < max_len, as the CPU requires. Errors: DF_EINVAL naming the operation for bad
 * sizes, a launch's failure as DF_EINTERNAL.
 */

/** df_kv_write: k, v [n, kv_dim] (device float32) to (layer, slot[r], pos[r]); a bf16 cache gets
 *  the CPU's bits (nearest even, a NaN's sign and top payload kept, made quiet). */
int df_cuda_kv_slots_write(df_cuda *c, const df_backend_kv *kv, int64_t layer, const float *d_k,
                           const float *d_v, const int32_t *d_slot, const int32_t *d_pos,
                           int64_t n);
/** df_kv_copy: positions [0, len) of slot src to slot dst (src != dst) in every layer, one
 *  kernel. */
int df_cuda_kv_slots_copy(df_cuda *c, const df_backend_kv *kv, int64_t src, int64_t dst,
                          int64_t len);
/** Device floats of scratch df_cuda_kv_slots_attention may use for nh heads over max_len
 *  positions: the partials of 16 (row, head) pairs' segments at hd 256; 0 when max_len fits one
 *  segment (256 positions). */
int64_t df_cuda_kv_slots_scratch_floats(int64_t nh, int64_t max_len);
/**
 * df_kv_attention: out[n, nh*hd] = for row r, head h, softmax(q_h . K_j / sqrt(hd)) . V_j over
 * positions j in [j0, pos[r]] of slot[r] in `layer` (j0 = 0, or pos[r] - window + 1 when
 * window > 0), GQA h / (nh / nkv); q [n, nh*hd] float32; bf16 K / V widened as read; scores,
 * softmax and sums float32; hd <= 256, nkv * hd <= kv_dim. Segments of 256 positions, each an
 * online softmax, merged in order; split over blocks (partials in d_scratch, of
 * df_cuda_kv_slots_scratch_floats(nh, kv->max_len) floats; may be NULL: no split) when rows
 * are few, with the same bits as unsplit: a row's result depends on no other row. softcap C > 0
 * (Gemma 2): each scaled score s becomes C tanh(s / C) before the softmax (0: none).
 */
int df_cuda_kv_slots_attention(df_cuda *c, float *d_out, const float *d_q, const df_backend_kv *kv,
                               int64_t layer, const int32_t *d_slot, const int32_t *d_pos,
                               int64_t n, int64_t nh, int64_t nkv, int64_t hd, int64_t window,
                               float softcap, float *d_scratch);

/* ---- vocabulary: log-probs, entropy, sampling (vocab.cu) -------------------------------- */

/** Device floats of scratch df_cuda_lmhead_fwd / _bwd / df_cuda_sample need for n rows, or any
 *  fewer (non-decreasing in n: the callers size it once for their largest n). */
int64_t df_cuda_vocab_scratch_floats(int64_t n, int64_t V, int64_t H);
/**
 * With z = (h W^T) / temperature, h [n,H], W [V,H], target [n] (device int32 in [0, V)), or
 * with softcap C > 0 (Gemma 2's final_logit_softcapping; 0: none) z = C tanh((h W^T) / C) /
 * temperature (Gemma2ForCausalLM.forward caps the logits, verl divides by the temperature):
 * logp[i] = z[i,target[i]] - lse[i], lse[i] = logsumexp(z[i]), entropy[i] (NULL = skip) =
 * lse[i] - sum_v softmax(z[i])_v z[i,v], sum_pi_sq[i] (NULL = skip) = sum_v softmax(z[i])_v^2.
 * Logits are computed in vocabulary tiles (cuBLAS) and reduced with an online log-sum-exp; the
 * [n, V] logits never exist. df_lmhead_fwd.
 */
int df_cuda_lmhead_fwd(df_cuda *c, float *d_logp, float *d_entropy, float *d_sum_pi_sq, float *d_lse,
                       const float *d_h, const float *d_W, const int32_t *d_target, int64_t n,
                       int64_t V, int64_t H, float temperature, float softcap, float *d_scratch);
/**
 * dh[n,H] OVERWRITTEN, dW[V,H] ACCUMULATED, from dlogp[n] and dentropy[n] (NULL = 0), with
 * the formulas of df_lmhead_bwd (entropy needed only when dentropy is given; with softcap C > 0
 * dL/dlogits gains the factor 1 - tanh^2(y / C), tanh recomputed from the raw logit y).
 */
int df_cuda_lmhead_bwd(df_cuda *c, float *d_dh, float *d_dW, const float *d_dlogp,
                       const float *d_dentropy, const float *d_h, const float *d_W,
                       const int32_t *d_target, const float *d_lse, const float *d_entropy,
                       int64_t n, int64_t V, int64_t H, float temperature, float softcap,
                       float *d_scratch);
/**
 * Mixed precision's head (the seam's lmhead_fwd_w16 / _bwd_w16; df_lmhead_fwd16 / _bwd16):
 * as df_cuda_lmhead_fwd / _bwd with W16 [V,H] bfloat16 (a df_weights16 LM head) and each row
 * block of h rounded to bfloat16 (the context's workspace), every logits tile a bf16 x bf16
 * cuBLAS product with float32 accumulation; the statistics float32 terms and double sums as
 * the float32 head. The backward rounds each tile's dL/dlogits to bfloat16 for dh = dlogits
 * W16 (OVERWRITTEN) and dW += dlogits^T h16 (float32 dW). Scratch: the float32 head's.
 */
int df_cuda_lmhead_fwd_w16(df_cuda *c, float *d_logp, float *d_entropy, float *d_sum_pi_sq,
                           float *d_lse, const float *d_h, const uint16_t *d_W16, const int32_t *d_target,
                           int64_t n, int64_t V, int64_t H, float temperature, float softcap,
                           float *d_scratch);
int df_cuda_lmhead_bwd_w16(df_cuda *c, float *d_dh, float *d_dW, const float *d_dlogp,
                           const float *d_dentropy, const float *d_h, const uint16_t *d_W16,
                           const int32_t *d_target, const float *d_lse, const float *d_entropy,
                           int64_t n, int64_t V, int64_t H, float temperature, float softcap,
                           float *d_scratch);
/**
 * Draw tok[i] from softmax(z[i]) with z = (h W^T) / temperature restricted as verl / vLLM do:
 * top_k > 0 keeps the k largest logits, 0 < top_p < 1 the smallest set of the highest
 * probabilities whose mass reaches top_p (applied after top-k); u [n] host uniforms in
 * [0, 1) pick by inverse CDF in the order of src/engine/sampling.c, so for the same u the
 * token is the CPU's up to float rounding at a CDF boundary. temperature = 0: greedy
 * (lowest argmax). logp[i] (may be NULL) = log-prob of tok[i] under the unrestricted
 * softmax(z[i]), as the rollout records old log-probs. tok, logp device; u may be NULL when
 * greedy (nothing is drawn). softcap C > 0 (Gemma 2): the raw logits y become C tanh(y / C)
 * first, as the CPU rollout's capped logits (0: none).
 */
int df_cuda_sample(df_cuda *c, int32_t *d_tok, float *d_logp, const float *d_h,
                   const float *d_W, int64_t n, int64_t V, int64_t H, float temperature,
                   float softcap, int64_t top_k, float top_p, const double *u, float *d_scratch);

/* ---- collectives on the GPU (nccl.cu) ---------------------------------------------------- */

/** An NCCL communicator over the ranks of one process group. */
typedef struct df_cuda_nccl df_cuda_nccl;

/**
 * NCCL communicator over exactly the ranks of `group` (a df_comm process group, as the
 * ProcessGroupManager builds them: the same ranks in the same order), each on its context's
 * device: rank 0 of the group draws NCCL's unique id and the group broadcasts it (MPI stays the
 * control plane). Collective over `group`. Errors: DF_EUNSUPPORTED when this build has no NCCL;
 * DF_EINTERNAL with NCCL's message (e.g. two ranks of the group on one GPU); DF_ENOMEM.
 */
int df_cuda_nccl_create(df_cuda *c, df_comm *group, df_cuda_nccl **out);
void df_cuda_nccl_free(df_cuda_nccl *n);
/** Ranks of the communicator. */
int df_cuda_nccl_size(const df_cuda_nccl *n);
/** NCCL's version code (e.g. 22803 for 2.28.3), 0 in a build without NCCL. */
int df_cuda_nccl_version(void);
/**
 * d[count] (device float32) summed over the communicator's ranks, in place, on the context's
 * stream (the gradient all-reduce). Collective: every rank calls it with the same count.
 * Like the all-to-all below it returns once the collective is done, having watched NCCL's
 * asynchronous error state meanwhile (a dead peer or a broken link: DF_EINTERNAL with NCCL's
 * message, the communicator aborted, every later call refused), not a wait that never ends.
 */
int df_cuda_nccl_allreduce_sum(df_cuda_nccl *n, float *d, int64_t count);
/**
 * The data coordinator's payload all-to-all (the seam's alltoallv): send_counts[p] bytes from
 * send (blocks back to back in rank order) to rank p, recv_counts[p] bytes from rank p into
 * recv (likewise), as one NCCL group of ncclSend / ncclRecv on the context's stream.
 * Collective; recv_counts[p] must be p's send_counts[this rank]. Errors: DF_EINVAL,
 * DF_EINTERNAL with NCCL's message, DF_EUNSUPPORTED without NCCL.
 */
int df_cuda_nccl_alltoallv(df_cuda_nccl *n, const void *send, const int64_t *send_counts,
                           void *recv, const int64_t *recv_counts);

/* ---- the module (module.c): libdistflow_cuda.so, which the CLI loads on demand ------------- */

/**
 * What the CLI calls in libdistflow_cuda.so (docs/cuda.md "The module"): the CLI does not link
 * the CUDA libraries (cudart, cuBLAS, NCCL: ~800 MB mapped, ~0.5 s cold), so it dlopens the module
 * beside it only when a command asks for the GPU (trainer.device=cuda, `distflow env`). The
 * module's own df_error / df_comm_* calls resolve against the CLI's exported API.
 * The size fields let the loader refuse a module of another build whose layouts differ.
 */
typedef struct df_cuda_module {
    size_t module_bytes;  /**< sizeof(df_cuda_module) */
    size_t ops_bytes;     /**< sizeof(df_backend_ops) */
    size_t info_bytes;    /**< sizeof(df_cuda_info) */
    df_backend_open_fn backend_open;          /**< df_backend_cuda_open */
    int (*device_count)(int *n);              /**< df_cuda_device_count */
    int (*nccl_version)(void);                /**< df_cuda_nccl_version */
    int (*create)(int device, df_cuda **out); /**< df_cuda_create */
    void (*get_info)(const df_cuda *c, df_cuda_info *out); /**< df_cuda_get_info */
    void (*free)(df_cuda *c);                 /**< df_cuda_free */
} df_cuda_module;

/** The module's entry point (its only exported symbol): the table above, static, never NULL. */
DF_API const df_cuda_module *df_cuda_module_get(void);
/** The entry point's name, for dlsym. */
#define DF_CUDA_MODULE_ENTRY "df_cuda_module_get"

#ifdef __cplusplus
}
#endif

#endif /* DF_BACKEND_CUDA_H */
