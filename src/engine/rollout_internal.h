/*
 * rollout_internal.h (internal) — the inference forward pass behind
 * df_rollout_generate: rows of (token, slot, position) run through the model's one
 * decoder layer (model/decoder_layer.h) on a compute backend,
 * each row's K / V written to its slot of the KV cache and its query attending
 * to that slot's positions [0, pos]. Prefill and decode are the same call:
 * prefill passes the prompt rows of a slot (a chunk of them when the prompt is longer
 * than the token budget; logits wanted for the last one), decode one row per active slot.
 */
#ifndef DF_ENGINE_ROLLOUT_INTERNAL_H
#define DF_ENGINE_ROLLOUT_INTERNAL_H

#include "distflow/backend.h"
#include "distflow/model.h"
#include "distflow/rollout.h"
#include "model/ops.h"
#include "model/weights_dev.h"

/** The engine's KV cache (backend.h df_backend_kv) in host memory: float32 or bf16 elements,
 *  2 * n_layers * n_slots * max_len * kv_dim of them, mapped once (two anonymous mappings: K, V;
 *  pages are taken as the rollout writes them). Errors: DF_ENOMEM. */
int df_kv_cache_init(df_backend_kv *kv, const df_model_config *cfg, int64_t n_slots,
                     int64_t max_len, df_kv_dtype dtype);
void df_kv_cache_release(df_backend_kv *kv);
/** Give the cache's pages back to the OS (madvise MADV_DONTNEED) keeping the mappings: they read
 *  as zeros and are faulted in again by the next writes. Errors: DF_EIO with strerror. */
int df_kv_cache_drop(df_backend_kv *kv);
/** Bytes of the cache resident in memory now (mincore), -1 when that cannot be read. */
int64_t df_kv_cache_resident(const df_backend_kv *kv);

/** The cache on backend be: host-memory backends take the mappings above; a device's is two of
 *  its buffers. Errors: DF_ENOMEM or the backend's. */
int df_kv_cache_init_on(const df_backend *be, df_backend_kv *kv, const df_model_config *cfg,
                        int64_t n_slots, int64_t max_len, df_kv_dtype dtype);
void df_kv_cache_release_on(const df_backend *be, df_backend_kv *kv);
/** free_cache_engine: the host's pages given back (df_kv_cache_drop); a device's buffers
 *  released (vLLM's sleep), made again by df_kv_cache_ready before the next forward. */
int df_kv_cache_drop_on(const df_backend *be, df_backend_kv *kv);
/** A device's buffers allocated again after a drop (a host cache: nothing to do). */
int df_kv_cache_ready(const df_backend *be, df_backend_kv *kv);
/** Bytes held now: the host's resident pages (df_kv_cache_resident), a device's buffers. */
int64_t df_kv_cache_resident_on(const df_backend *be, const df_backend_kv *kv);

/** Activations for up to rows_cap rows, of which up to out_cap output rows, in the memory of
 *  the backend given at init (every pointer below but h_slot / h_pos is the backend's). */
typedef struct df_infer_scratch {
    df_backend be;
    bool dev;             /**< be's memory is not the host's */
    int64_t rows_cap, out_cap;
    float *x, *xn, *rstd, *q, *k, *v, *att, *gate, *up, *act; /**< [rows_cap, width] */
    float *xc, *qc;       /**< [out_cap, H], [out_cap, qd]: the last layer's output rows */
    int32_t *slot, *pos;  /**< [out_cap] the output rows' slots and positions */
    float *ones;          /**< [rows_cap] of 1 (an o_proj bias's rank-1 GEMM), or NULL */
    float *scores;        /**< kv_attention's scratch, scores_floats of them */
    int64_t scores_floats;
    float *rope_cos, *rope_sin; /**< [max_len, rope_dim / 2] rotations of positions 0 .. max_len-1
                                     with the RoPE of the config given at init */
    float *rope_cos_local, *rope_sin_local; /**< the same of its local RoPE (gemma3's sliding
                                     layers, df_model_local_rope), else NULL */
    float *nshift;              /**< norm_plus_one: the (1 + w) norms (df_norm_shift_view), made at
                                     every forward from the weights it is given; else NULL */
    df_layer_view *nshift_layers; /**< [num_hidden_layers] host, with nshift */
    struct df_moe_ws *moe;        /**< a model with experts: the sparse layers' host scratch for
                                     rows_cap rows (model/moe.h), else NULL */
    /* dev only (else NULL): the batch's arrays copied per call, and the output rows' slots and
     * positions gathered on the host before their upload into slot / pos */
    int32_t *tok, *bslot, *bpos; /**< [rows_cap] */
    int64_t *orows;              /**< [out_cap] */
    int32_t *h_slot, *h_pos;     /**< [out_cap] host memory */
} df_infer_scratch;

/** One forward call: n rows, of which n_out (ascending rows) need the final hidden state. */
typedef struct df_infer_batch {
    int64_t n;
    const int32_t *tokens;   /**< [n] */
    const int32_t *slot;     /**< [n] KV slot of each row */
    const int32_t *pos;      /**< [n] position of each row (its KV index in the slot) */
    int64_t n_out;
    const int64_t *out_rows; /**< [n_out] ascending; NULL when every row is an output row */
    int32_t *routes_out;     /**< NULL, or [n, df_model_route_width] host memory receiving each
                                  row's experts per sparse layer (router replay's record,
                                  df_seq_batch.routes_out); -1 in a layer's k entries where the
                                  row did not run that layer's MLP (the last layer past the
                                  output rows) */
} df_infer_batch;

/** Allocate for rows_cap rows (out_cap of them output rows) on be (which must outlive s) and
 *  build the RoPE table of cfg (df_rope_model_table) for positions [0, max_len). Errors:
 *  DF_EUNSUPPORTED for head_dim > DF_MAX_HEAD_DIM, DF_ENOMEM, the backend's upload error. */
int df_infer_scratch_init(df_infer_scratch *s, const df_backend *be, const df_model_config *cfg,
                          int64_t rows_cap, int64_t out_cap, int64_t max_len);
void df_infer_scratch_release(df_infer_scratch *s);
/** Give the pages of s's per-row activation buffers back to the OS (df_pages_release: their
 *  contents are dead between forward calls; the RoPE tables and the ones are kept). cfg: the
 *  config of the init. Returns the bytes released (0 on a device: its buffers are kept). */
int64_t df_infer_scratch_drop(df_infer_scratch *s, const df_model_config *cfg);
/** Bytes of those buffers' pages resident now (whole pages, mincore), -1 when unknown; 0 on a
 *  device. */
int64_t df_infer_scratch_resident(const df_infer_scratch *s, const df_model_config *cfg);
/** Bytes df_infer_scratch_init allocates (with the CPU's kv_attention scratch for
 *  omp_get_max_threads() threads). */
int64_t df_infer_scratch_bytes(const df_model_config *cfg, int64_t rows_cap, int64_t out_cap,
                               int64_t max_len);

/** The weights one forward reads: the float32 view (backend memory), and the bf16 copy of
 *  the matmul weights (bf16 rollout, through gemm_w16) or NULL, and its packed layers. */
typedef struct df_infer_weights {
    const df_model_view *w;
    const df_weights16 *w16;
    const df_packed16 *p16; /**< w16's layers packed (gemm_w16_packed), or NULL */
} df_infer_weights;

/**
 * Run b through the model on backend `be` (the one decoder layer, decoder_layer.h, with the
 * KV cache's attention): writes every row's K / V into kv, and leaves the final-RMSNorm'd
 * hidden states of the n_out output rows in s->xn[0 .. n_out, H) (in out_rows order; backend
 * memory). b's arrays are host memory; s, kv and w are be's (s made on be). The
 * last layer runs past its K / V for the output rows only. With b->routes_out, each row's
 * routes (set to -1 first). Errors: DF_EINVAL if b->n is not
 * in [1, s->rows_cap] or n_out > s->out_cap; DF_ENOMEM if kv_attention's scratch must grow
 * (more threads than at init) and cannot; a backend operator's failure.
 */
int df_infer_forward(const df_backend *be, const df_model_config *c, const df_infer_weights *w,
                     df_backend_kv *kv, df_infer_scratch *s, const df_infer_batch *b);

/**
 * A device rollout reads `src` (a colocated actor's master weights on the same backend:
 * df_actor_device_weights) instead of a copy of its own whenever src holds the generating
 * model's current version (df_weights_dev_current): the weight sync is then no transfer at all,
 * and the engine's own copy is freed. Otherwise (before the actor's first step, another version)
 * it uploads its own as before. NULL stops sharing. src must outlive the engine's use of it.
 * Errors: DF_EINVAL for a host-memory engine or a source on another backend.
 */
int df_rollout_engine_share_device_weights(df_rollout_engine *e, const df_weights_dev *src);

#endif /* DF_ENGINE_ROLLOUT_INTERNAL_H */
