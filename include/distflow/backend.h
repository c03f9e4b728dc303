/*
 * distflow/backend.h — the engine's compute-backend seam (docs/backend.md).
 *
 * A backend is a table of function pointers over its own memory (ggml's ggml_backend_i
 * is the model): buffers and copies, the matmul, and the fused operators the decoder
 * needs. The decoder layer (src/model/decoder_layer.c), which training's forward and
 * backward (src/model/forward.c, backward.c) and the rollout's prefill and decode
 * (src/engine/rollout_forward.c) all run, is written once against this table; the CPU backend (oneDNN + our kernels, src/model/backend_cpu.c) is the
 * first, the CUDA backend (src/backend/cuda/backend_cuda.c, docs/cuda.md) the second.
 *
 * Conventions for every operator:
 *   - pointers are in the backend's memory (host memory when ops->host_memory);
 *   - layouts are row-major, shapes as documented in src/model/ops.h, whose CPU function
 *     each operator is (the formula and its source are documented there);
 *   - float32 data; token ids and positions int32; offsets and row indices int64;
 *   - operators may run asynchronously (CUDA: in stream order); `sync` waits and
 *     reports the first failure of any earlier call;
 *   - return DF_OK or a DF_E* code with df_last_error() set (the CPU's never fail).
 */
#ifndef DISTFLOW_BACKEND_H
#define DISTFLOW_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "distflow/comm.h"
#include "distflow/common.h"
#include "distflow/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Packed variable-length sequences, in backend memory: what attention needs of a batch. */
typedef struct df_backend_seqs {
    const int64_t *offsets; /**< [n_seqs + 1], offsets[0] = 0, offsets[n_seqs] = T (backend memory) */
    int64_t n_seqs;
    int64_t T;              /**< total tokens */
    int64_t max_len;        /**< >= the longest sequence */
    int64_t window;         /**< 0: causal attention; W > 0: the query at position p attends to
                                 positions p - W < j <= p only (df_model_layer_window) */
    float softcap;          /**< 0: none; C > 0 (Gemma 2's attn_logit_softcapping): each scaled
                                 score s becomes C tanh(s / C) before the mask and the softmax
                                 (df_attention_fwd); only for a backend with attention_softcap */
} df_backend_seqs;

/** Element type of a KV cache. */
typedef enum df_kv_dtype {
    DF_KV_F32 = 0,  /**< float32 */
    DF_KV_BF16 = 1  /**< bfloat16 (K / V rounded to nearest even when written; scores, softmax
                         and the weighted sum of V in float32) */
} df_kv_dtype;

/**
 * The rollout's KV cache, in backend memory: per layer [slot][max_len][kv_dim] (llama2.c's
 * layout), K and V apart, each n_layers * n_slots * max_len * kv_dim elements of `dtype`.
 * Allocated once (alloc) for max_num_seqs slots of max_len positions; the kv_* operators
 * read and write it.
 */
typedef struct df_backend_kv {
    void *k, *v;
    int64_t n_layers, n_slots, max_len, kv_dim;
    df_kv_dtype dtype;
} df_backend_kv;

/** Bytes of one of kv's two tensors (K or V). */
static inline size_t df_backend_kv_bytes(const df_backend_kv *kv)
{
    return (size_t)(kv->n_layers * kv->n_slots * kv->max_len * kv->kv_dim) *
           (kv->dtype == DF_KV_BF16 ? 2u : 4u);
}

typedef struct df_backend_ops {
    const char *name;  /**< "cpu", "cuda" */
    bool host_memory;  /**< buffers are plain host pointers (no upload / download needed) */
    bool attention_window; /**< attention_fwd / attention_bwd take a window (df_backend_seqs
                                window > 0); without it df_model_check_backend refuses a model
                                with a sliding window and a window never reaches them */
    bool attention_softcap; /**< attention_fwd / _bwd take df_backend_seqs softcap > 0 and
                                 kv_attention its softcap; lmhead_fwd / _bwd (and _w16) and sample
                                 their final-logit softcap > 0 (Gemma 2). Without it
                                 df_model_check_backend refuses a model with either soft-cap and
                                 none reaches them */

    /* ---- memory ---- */
    /** *p = `bytes` of backend memory, 64-byte aligned; bytes 0 gives a valid minimal buffer. */
    int (*alloc)(void *ctx, size_t bytes, void **p);
    /** Free a buffer from alloc (NULL: no-op). */
    void (*release)(void *ctx, void *p);
    /** host → backend; the host buffer may be reused when it returns. */
    int (*upload)(void *ctx, void *dst, const void *src, size_t bytes);
    /** backend → host; includes the results of every earlier call. */
    int (*download)(void *ctx, void *dst, const void *src, size_t bytes);
    /** backend → backend (non-overlapping). */
    int (*copy)(void *ctx, void *dst, const void *src, size_t bytes);
    /** x[n] = 0. */
    int (*zero)(void *ctx, float *x, int64_t n);
    /** Wait for every earlier call; the first failure among them. */
    int (*sync)(void *ctx);

    /* ---- matmul ---- */
    /**
     * Row-major C[M,N] = alpha op(A) op(B) + beta C, all float32; op(A) = A [M,K] or, when ta,
     * A^T with A stored [K,M]; op(B) = B [K,N] or, when tb, B^T with B stored [N,K] (a Linear
     * weight). (ta, tb) = (0,1), (0,0), (1,0) are df_gemm_nt / _nn / _tn; (1,1) is refused.
     */
    int (*gemm)(void *ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                const float *A, const float *B, float beta, float *C);

    /**
     * Mixed precision (docs/mixed_precision.md): C[M,N] = alpha A op(W) + beta C with W a
     * bfloat16 weight of a df_weights16 (in this backend's memory: df_weights16_create_on) and A float32 rounded to
     * bfloat16 (nearest even) per call, float32 accumulation and result. tb true: W [N,K],
     * op(W) = W^T (a Linear forward y = x W^T); tb false: W [K,N] (its input gradient dy W).
     * NULL on a backend without bf16 matmuls: df_model_check_backend_ex refuses mixed
     * precision there (DF_ACTS_BF16).
     */
    int (*gemm_w16)(void *ctx, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                    const float *A, const uint16_t *W, float beta, float *C);
    /**
     * gemm_w16 with tb true on a weight of a packed df_weights16 (df_weights16_pack: the
     * backend's own layout for it, made by this backend's context). NULL where a backend has
     * no packed layout: the rollout then reads the plain copy.
     */
    int (*gemm_w16_packed)(void *ctx, int64_t M, int64_t N, int64_t K, float alpha,
                           const float *A, const uint16_t *Wp, float beta, float *C);
    /**
     * gemm with both operands rounded to bfloat16 (nearest even) per call, float32
     * accumulation and result: autocast's matmul of two activations (a weight gradient
     * dW += dy^T x, the o_proj bias's rank-1 product). Same shapes and (ta, tb) as gemm. What
     * mixed precision on a device runs wherever the CPU's gemm rounds (the CPU's gemm does it
     * itself under a bf16 context: df_backend_cpu_bf16, and this entry is that gemm). NULL on a
     * backend without it: df_model_check_backend_ex refuses mixed precision on a device then.
     */
    int (*gemm_bf16)(void *ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                     const float *A, const float *B, float beta, float *C);
    /**
     * dst[n] = src[n] (float32) rounded to bfloat16 with df_bf16_from_f32's bits (nearest even,
     * NaN stays a quiet NaN), both in backend memory: a df_weights16 on the device refreshed
     * from the device's float32 weights (df_weights16_refresh_dev). NULL: the copy is converted
     * on the host and uploaded.
     */
    int (*bf16_from_f32)(void *ctx, uint16_t *dst, const float *src, int64_t n);

    /* ---- rows ---- */
    /** y[i, :] = b for i < M (b [N]): a Linear layer's bias before its GEMM adds x W^T. */
    int (*rows_fill)(void *ctx, float *y, const float *b, int64_t M, int64_t N);
    /** db[N] += sum_i dy[i, :] over M rows (a bias gradient). */
    int (*col_sum_add)(void *ctx, float *db, const float *dy, int64_t M, int64_t N);
    /** dst[j, :] = src[rows[j], :] for j < n (rows int64, row width H). */
    int (*gather_rows)(void *ctx, float *dst, const float *src, const int64_t *rows, int64_t n,
                       int64_t H);
    /** dst[rows[j], :] += src[j, :] for j < n (rows distinct). */
    int (*scatter_add_rows)(void *ctx, float *dst, const float *src, const int64_t *rows,
                            int64_t n, int64_t H);

    /* ---- decoder operators (src/model/ops.h) ---- */
    /** df_embedding_fwd: out[T,H] = table[ids]. */
    int (*embedding_fwd)(void *ctx, float *out, const int32_t *ids, const float *table,
                         int64_t T, int64_t H);
    /**
     * Mixed precision's lookup: out[T,H] = table16[ids] widened exactly to float32, table16 a
     * df_weights16 embedding ([V, H] bfloat16, host memory on the CPU). NULL on a backend
     * without it: df_model_check_backend_ex refuses mixed precision there (DF_ACTS_BF16).
     */
    int (*embedding_fwd_w16)(void *ctx, float *out, const int32_t *ids, const uint16_t *table16,
                             int64_t T, int64_t H);
    /** df_embedding_bwd: dtable[ids[t]] += dout[t]. */
    int (*embedding_bwd)(void *ctx, float *dtable, const float *dout, const int32_t *ids,
                         int64_t T, int64_t H);
    /** df_rmsnorm_fwd: out[T,H], rstd[T]; out may be x (each row is read before written). */
    int (*rmsnorm_fwd)(void *ctx, float *out, float *rstd, const float *x, const float *w,
                       int64_t T, int64_t H, float eps);
    /** df_rmsnorm_bwd: dx[T,H] += ..., dw[H] += ... (dw may be NULL). */
    int (*rmsnorm_bwd)(void *ctx, float *dx, float *dw, const float *dout, const float *x,
                       const float *w, const float *rstd, int64_t T, int64_t H);
    /** df_rope_apply: x[T, n_heads*hd] in place, the first rd dims of each head rotated by the
     *  df_rope_model_table rows cos/sin [n_pos, rd/2], the others passed. */
    int (*rope_apply)(void *ctx, float *x, const int32_t *pos, int64_t T, int64_t n_heads,
                      int64_t hd, int64_t rd, const float *cos_t, const float *sin_t, bool inverse);
    /** df_attention_fwd over the sequences of s (and its window): out[T, nh*hd], lse[T, nh]. */
    int (*attention_fwd)(void *ctx, float *out, float *lse, const float *q, const float *k,
                         const float *v, const df_backend_seqs *s, int64_t nh, int64_t nkv,
                         int64_t hd);
    /** df_attention_bwd: dq, dk, dv OVERWRITTEN. */
    int (*attention_bwd)(void *ctx, float *dq, float *dk, float *dv, const float *dout,
                         const float *out, const float *lse, const float *q, const float *k,
                         const float *v, const df_backend_seqs *s, int64_t nh, int64_t nkv,
                         int64_t hd);
    /* ---- the rollout's KV cache (df_backend_kv); NULL where the backend has none yet (the
     *      rollout refuses it: df_rollout_engine_create_ex) ---- */
    /**
     * k, v [n, kv_dim] (float32) into layer `layer` of kv: row r at (slot[r], pos[r]), rounded
     * to kv->dtype. Rows must name distinct (slot, pos) cells.
     */
    int (*kv_write)(void *ctx, const df_backend_kv *kv, int64_t layer, const float *k,
                    const float *v, const int32_t *slot, const int32_t *pos, int64_t n);
    /** Positions [0, len) of slot src copied to slot dst (src != dst) in every layer. */
    int (*kv_copy)(void *ctx, const df_backend_kv *kv, int64_t src, int64_t dst, int64_t len);
    /** Floats of scratch kv_attention needs for nh heads over max_len positions (the CPU:
     *  one [nh, max_len] block per OpenMP thread, so it grows with omp_set_num_threads). */
    int64_t (*kv_scratch_floats)(void *ctx, int64_t nh, int64_t max_len);
    /**
     * df_kv_attention: out[n, nh*hd] = for each row r and head h, softmax(q_h . K_j / sqrt(hd))
     * . V_j over positions j in [0, pos[r]] of slot[r] in layer (the last `window` of them
     * when window > 0), GQA by h / (nh / nkv); q [n, nh*hd] float32, scores and sums float32;
     * softcap C > 0 (attention_softcap backends only: Gemma 2): each scaled score s is C tanh(s / C).
     * Each row's result does not depend on the other rows or on the thread count.
     */
    int (*kv_attention)(void *ctx, float *out, const float *q, const df_backend_kv *kv,
                        int64_t layer, const int32_t *slot, const int32_t *pos, int64_t n,
                        int64_t nh, int64_t nkv, int64_t hd, int64_t window, float softcap,
                        float *scratch);

    /** df_swiglu_fwd: out[n] = silu(gate) up. */
    int (*swiglu_fwd)(void *ctx, float *out, const float *gate, const float *up, int64_t n);
    /** df_swiglu_bwd: dgate, dup OVERWRITTEN; dgate == gate and dup == up allowed (in place). */
    int (*swiglu_bwd)(void *ctx, float *dgate, float *dup, const float *dout, const float *gate,
                      const float *up, int64_t n);
    /** df_geglu_fwd: out[n] = gelu_tanh(gate) up (Gemma 3's MLP). */
    int (*geglu_fwd)(void *ctx, float *out, const float *gate, const float *up, int64_t n);
    /** df_geglu_bwd: dgate, dup OVERWRITTEN; dgate == gate and dup == up allowed (in place). */
    int (*geglu_bwd)(void *ctx, float *dgate, float *dup, const float *dout, const float *gate,
                     const float *up, int64_t n);
    /** Floats of scratch lmhead_fwd / _bwd need for n rows of a [V, H] head, or any fewer rows
     *  (non-decreasing in n: df_acts sizes it once for max_out). */
    int64_t (*lmhead_scratch_floats)(void *ctx, int64_t n, int64_t V, int64_t H);
    /** df_lmhead_fwd: logp[n], entropy[n] and sum_pi_sq[n] (each NULL: skipped), lse[n];
     *  vocabulary-tiled. sum_pi_sq[i] = sum_v softmax(z_i)_v^2 (verl's sum_pi_squared).
     *  softcap C > 0 (attention_softcap backends only: Gemma 2's final_logit_softcapping; 0:
     *  none): z = C tanh(h W^T / C) / temperature. The same argument of lmhead_bwd, the _w16
     *  twins and sample. */
    int (*lmhead_fwd)(void *ctx, float *logp, float *entropy, float *sum_pi_sq, float *lse,
                      const float *h, const float *W, const int32_t *target, int64_t n, int64_t V,
                      int64_t H, float temperature, float softcap, float *scratch);
    /** df_lmhead_bwd: dh[n,H] OVERWRITTEN, dW[V,H] ACCUMULATED. dW NULL (a frozen head: LoRA,
     *  distflow/lora.h) skips the weight gradient. */
    int (*lmhead_bwd)(void *ctx, float *dh, float *dW, const float *dlogp, const float *dentropy,
                      const float *h, const float *W, const int32_t *target, const float *lse,
                      const float *entropy, int64_t n, int64_t V, int64_t H, float temperature,
                      float softcap, float *scratch);

    /* ---- sampling from the LM head (NULL where the backend has none: the rollout then
     *      downloads each row's logits and samples on the host) ---- */
    /** Floats of scratch `sample` needs for n rows of a [V, H] head, or any fewer rows
     *  (non-decreasing in n: the rollout sizes it once for max_num_seqs). */
    int64_t (*sample_scratch_floats)(void *ctx, int64_t n, int64_t V, int64_t H);
    /**
     * tok[i] drawn from the logits z = h[i] W^T (h [n, H], W [V, H]) with the sampler of
     * src/engine/sampling.c (df_sample_token_u): temperature (0: greedy, lowest argmax), then
     * top_k (<= 0: off), then top_p (1: off), the first kept token in id order whose running
     * probability exceeds u[i]; logp[i] (NULL: skipped) = log_softmax(z / T)[tok] over the
     * whole vocabulary (T = 1 when greedy). tok [n] int32 and logp [n] in backend memory; u [n]
     * HOST memory, uniforms in [0, 1) (NULL when greedy). The CUDA twin may pick a neighbour
     * where rounding puts u at a cumulative-probability boundary.
     */
    int (*sample)(void *ctx, int32_t *tok, float *logp, const float *h, const float *W, int64_t n,
                  int64_t V, int64_t H, float temperature, float softcap, int64_t top_k, float top_p,
                  const double *u, float *scratch);

    /* ---- mixed precision's LM head (NULL where the backend has none: the head then runs
     *      in float32, as lmhead_fwd / _bwd) ---- */
    /**
     * lmhead_fwd with the head W16 [V, H] in bfloat16 (a df_weights16 LM head) and h rounded
     * to bfloat16 here: every logits tile a bf16 x bf16 product with float32 accumulation
     * (autocast's logits matmul), softmax statistics, log-probs, entropies and sums of p^2
     * float32 / double as in lmhead_fwd. scratch: lmhead_scratch_floats's.
     */
    int (*lmhead_fwd_w16)(void *ctx, float *logp, float *entropy, float *sum_pi_sq, float *lse,
                          const float *h, const uint16_t *W16, const int32_t *target, int64_t n,
                          int64_t V, int64_t H, float temperature, float softcap, float *scratch);
    /** lmhead_bwd with W16 as above: dL/dlogits rounded to bfloat16 per tile for
     *  dh = dlogits W16 (OVERWRITTEN) and dW += dlogits^T h (h rounded; float32 dW); dW NULL as
     *  lmhead_bwd's. */
    int (*lmhead_bwd_w16)(void *ctx, float *dh, float *dW, const float *dlogp,
                          const float *dentropy, const float *h, const uint16_t *W16,
                          const int32_t *target, const float *lse, const float *entropy,
                          int64_t n, int64_t V, int64_t H, float temperature, float softcap,
                          float *scratch);

    /* ---- the optimizer over backend memory (docs/backend.md, "Where things live"). All six
     *      or none: NULL where a backend has none, and training then keeps the master weights,
     *      AdamW and the gradient all-reduce on the host. Each is the device twin of a host
     *      function of distflow/optim.h or distflow/comm.h. ---- */
    /**
     * df_adamw_step's update of p[n] from g[n] with moments m[n], v[n] (all float32), t = step
     * (the update's 1-based count: df_adamw's step after its increment) at learning rate lr:
     * the same formulas and the same float32 scalars rounded once from double, so the CPU's
     * is df_adamw_step itself. Errors: DF_EINVAL (step < 1, lr < 0 or not finite).
     */
    int (*adamw_step)(void *ctx, float *p, const float *g, float *m, float *v, int64_t n,
                      const df_adamw_config *cfg, int64_t step, double lr);
    /**
     * *norm (host) = sqrt(sum_i x[i]^2) of x[n], the squares exact and the sum in double, as
     * df_grad_norm; the order of the additions is the backend's (fixed for a given n and
     * thread count), so two backends' norms differ by at most (n - 1) u_f64 relative (plus
     * the square root's rounding). Waits for the earlier calls. The CPU's: df_grad_norm.
     */
    int (*grad_norm)(void *ctx, const float *x, int64_t n, double *norm);
    /** x[n] *= s in float32 (the clip's scaling, as df_clip_grad_norm's). The model calls it too
     *  (Gemma's scaled embedding and queries): df_model_check_backend refuses those without it. */
    int (*scale)(void *ctx, float *x, int64_t n, float s);
    /**
     * *h = the backend's handle for all-reducing over `group` (a df_comm of this process,
     * which must outlive the handle): collective over group, so every rank calls it at the
     * same point. The CPU's is the group itself; CUDA's an NCCL communicator (made once per
     * group and shared by every handle of it), or the group with a host staging buffer in a
     * build without NCCL. Errors: the communicator's (e.g. NCCL's), DF_ENOMEM.
     */
    int (*group_open)(void *ctx, df_comm *group, void **h);
    /** Give back a handle of group_open (NULL: no-op); not collective. */
    void (*group_close)(void *ctx, void *h);
    /**
     * x[n] (float32, backend memory) = its sum over the ranks of h's group, in place: what
     * df_comm_allreduce(group, x, n, DF_COMM_FLOAT32, DF_COMM_SUM) gives on host memory (the
     * CPU's is that call). Collective. The order of the ranks' additions is the
     * communicator's (MPI's or NCCL's).
     */
    int (*allreduce_sum)(void *ctx, void *h, float *x, int64_t n);

    /* ---- the Data Coordinator's payload move over the device's fabric (docs/cuda.md) ---- */
    /**
     * Personalised all-to-all of bytes in backend memory among the ranks of h's group (a
     * handle of group_open): what df_comm_alltoallv does on host memory, with the counts
     * already exchanged. send holds the blocks for ranks 0..size-1 back to back
     * (send_counts[d] bytes for rank d); recv receives the block of source s at the sum of
     * recv_counts[0..s-1]; recv_counts[s] (host) must equal s's send_counts[this rank].
     * Collective. NULL where the backend has none — the CPU's (its memory is the host's:
     * MPI moves it) and CUDA's without NCCL — and the coordinator then moves payloads over
     * MPI. CUDA's: NCCL grouped send / receive. Errors: the communicator's, DF_EINVAL.
     */
    int (*alltoallv)(void *ctx, void *h, const void *send, const int64_t *send_counts, void *recv,
                     const int64_t *recv_counts);

    /* ---- description ---- */
    /** The device's name as its driver gives it (CUDA: "NVIDIA H100 80GB HBM3"), for
     *  df_device_peak_flops; NULL (the entry or its result): a CPU. */
    const char *(*device_name)(void *ctx);
    /** The most bytes of device memory live at once since the backend opened: its alloc's
     *  buffers and its own scratch (CUDA: every cudaMalloc it made; it keeps no cache, so this
     *  is also what it reserved). NULL: memory the OS counts for the process — the CPU's. */
    int64_t (*memory_peak)(void *ctx);
} df_backend_ops;

/** A backend: its operator table and the context every operator receives. */
typedef struct df_backend {
    const df_backend_ops *ops;
    void *ctx;
} df_backend;

/** The CPU backend: oneDNN float32 matmuls and distflow's kernels; host memory. */
DF_API df_backend df_backend_cpu(void);

/** True when b is the CPU backend (its memory is the host's and its kernels are the CPU's). */
DF_API bool df_backend_is_cpu(const df_backend *b);

/**
 * The peak FLOP/s verl's MFU divides by (verl/utils/flops_counter.py _DEVICE_FLOPS, the dense
 * bf16 figure of each datasheet: H100 / H200 989e12, A100 312e12, ...; "CPU" 448e9, verl's
 * constant for any CPU): the first key of that table, in its reverse-sorted order ("H200" before
 * "H20"), contained in `device_name`; NULL is "CPU". 0 for a name the table lacks (verl: inf,
 * an MFU of 0).
 */
DF_API double df_device_peak_flops(const char *device_name);
/** df_device_peak_flops of b's device (its device_name entry; a CPU without one). */
DF_API double df_backend_peak_flops(const df_backend *b);

/**
 * The peak bytes of b's memory in use (verl's perf/max_memory_allocated_gb, torch's
 * max_memory_allocated of the device): its memory_peak entry, or the process's peak resident
 * set (getrusage) where it has none — the CPU's memory is the process's. -1 if unknown.
 */
DF_API int64_t df_backend_memory_peak(const df_backend *b);

/* ---- backends by name (trainer.device) ---- */

/** Opens a backend for this process (e.g. on its rank's GPU); DF_OK or a DF_E* code with df_last_error. */
typedef int (*df_backend_open_fn)(df_backend *out);

/**
 * Make backend `name` available to df_backend_open (the program that links it registers it: the
 * distflow CLI registers "cuda" when built with the CUDA backend). "cpu" is always there.
 * Errors: DF_EINVAL (empty name, "cpu", or more than 8 registered).
 */
DF_API int df_backend_register(const char *name, df_backend_open_fn open);
/** True when df_backend_open(name) can be tried in this build. */
DF_API bool df_backend_available(const char *name);
/** Comma-separated names of the available backends ("cpu" or "cpu, cuda"), for messages. */
DF_API const char *df_backend_names(void);
/**
 * The backend trainer.device names: "cpu", or a registered one (opened on first use; later
 * calls return the same backend). Errors: DF_EUNSUPPORTED naming the backends this build has,
 * or the backend's own (e.g. no GPU on this machine).
 */
DF_API int df_backend_open(const char *name, df_backend *out);

#ifdef __cplusplus
}
#endif

#endif /* DISTFLOW_BACKEND_H */
