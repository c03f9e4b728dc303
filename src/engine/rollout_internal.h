/*
 * rollout_internal.h (internal) — the inference forward pass behind
 * df_rollout_generate: rows of (token, slot, position) run through the model,
 * each row's K / V written to its slot of the KV cache and its query attending
 * to that slot's positions [0, pos]. Prefill and decode are the same call:
 * prefill passes every prompt row of a slot (logits wanted for the last one),
 * decode passes one row per active slot.
 */
#ifndef DF_ENGINE_ROLLOUT_INTERNAL_H
#define DF_ENGINE_ROLLOUT_INTERNAL_H

#include "distflow/model.h"

/* Below this many multiply-adds a loop runs on one thread: waking the team
 * costs more than it saves (and spins when cores are oversubscribed). */
#define DF_PAR_MIN_WORK 32768

/** KV cache, per layer [slot][max_len][kv_dim] (llama2.c layout), K and V apart. */
typedef struct df_kv_cache {
    int64_t n_layers, n_slots, max_len, kv_dim;
    float *k, *v; /**< [n_layers * n_slots * max_len * kv_dim] each */
} df_kv_cache;

/** Row (layer, slot, pos) of the K (or V) cache. */
static inline float *df_kv_row(const df_kv_cache *kv, float *base, int64_t layer, int64_t slot,
                               int64_t pos)
{
    return base + ((layer * kv->n_slots + slot) * kv->max_len + pos) * kv->kv_dim;
}

/** Activations for up to rows_cap rows. */
typedef struct df_infer_scratch {
    int64_t rows_cap;
    float *x, *xn, *rstd, *q, *k, *v, *att, *tmp, *gate, *up, *act; /**< [rows_cap, width] */
    int32_t *slot, *pos;  /**< [rows_cap] compacted copies for the last layer */
    float *scores;        /**< [n_threads_cap, nh, max_len] attention scores */
    int n_threads_cap;
    float *rope_cos, *rope_sin; /**< [max_len, hd / 2] rotations of positions 0 .. max_len-1
                                     with the RoPE of the config given at init */
} df_infer_scratch;

/** One forward call: n rows, of which n_out (ascending rows) need the final hidden state. */
typedef struct df_infer_batch {
    int64_t n;
    const int32_t *tokens;   /**< [n] */
    const int32_t *slot;     /**< [n] KV slot of each row */
    const int32_t *pos;      /**< [n] position of each row (its KV index in the slot) */
    int64_t n_out;
    const int64_t *out_rows; /**< [n_out] ascending; NULL when every row is an output row */
} df_infer_batch;

int df_kv_cache_init(df_kv_cache *kv, const df_model_config *cfg, int64_t n_slots,
                     int64_t max_len);
void df_kv_cache_release(df_kv_cache *kv);
/** Copy positions [0, len) of slot `src` into slot `dst` in every layer. */
void df_kv_cache_copy(df_kv_cache *kv, int64_t src, int64_t dst, int64_t len);

/** Allocate for rows_cap rows and build the RoPE table of cfg (df_rope_inv_freq) for
 *  positions [0, max_len). Errors: DF_EUNSUPPORTED for head_dim > DF_MAX_HEAD_DIM, DF_ENOMEM. */
int df_infer_scratch_init(df_infer_scratch *s, const df_model_config *cfg, int64_t rows_cap,
                          int64_t max_len);
void df_infer_scratch_release(df_infer_scratch *s);
/** Bytes df_infer_scratch_init allocates (with n_threads_cap = omp_get_max_threads()). */
int64_t df_infer_scratch_bytes(const df_model_config *cfg, int64_t rows_cap, int64_t max_len);

/**
 * out[n, nh*hd] = for each row r and head h: softmax(q_h . K[slot_r][0..pos_r] / sqrt(hd))
 * . V[slot_r][0..pos_r] in layer `layer`, GQA by h / (nh / nkv). q: [n, nh*hd].
 * window > 0: positions pos_r - window < j <= pos_r only (df_model_layer_window).
 * Each row is computed by one thread in a fixed order, so results do not
 * depend on the thread count or on the other rows. scores: per thread
 * [nh, max_len] floats.
 */
void df_kv_attention(float *out, const float *q, const df_kv_cache *kv, int64_t layer,
                     const int32_t *slot, const int32_t *pos, int64_t n, int64_t nh,
                     int64_t nkv, int64_t hd, int64_t window, float *scores);

/**
 * Run b through the model: writes every row's K / V into kv, and leaves the
 * final-RMSNorm'd hidden states of the n_out output rows in s->xn[0 .. n_out, H)
 * (in out_rows order). Errors: DF_EINVAL if b->n is not in [1, s->rows_cap];
 * DF_ENOMEM if the per-thread scores must grow (more threads than at init) and
 * cannot.
 */
int df_infer_forward(const df_model *m, df_kv_cache *kv, df_infer_scratch *s,
                     const df_infer_batch *b);

#endif /* DF_ENGINE_ROLLOUT_INTERNAL_H */
