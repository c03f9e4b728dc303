/*
 * decoder_layer.h (internal) — the one decoder layer of the Qwen2 / Qwen3 / Llama family
 * (HF modeling_qwen2.py / modeling_qwen3.py Qwen2DecoderLayer), written once against the
 * backend seam (distflow/backend.h) and run by training's forward and its checkpointed
 * recompute (forward.c) and by the rollout's prefill and decode (src/engine/rollout_forward.c):
 *
 *   n1 = rmsnorm1(x);  q, k, v = proj(n1) (+ biases);  q, k = qk_norm(q, k) (qwen3);  RoPE
 *   att = ATTENTION(q, k, v)
 *   h = x + o_proj(att) (+ bias);  n2 = rmsnorm2(h);  gate, up = proj(n2)
 *   x' = h + down(silu(gate) * up)
 *
 * and OLMo 2's post-norm layer (HF modeling_olmo2.py Olmo2DecoderLayer, post_norm), whose q/k
 * norms span the whole projection (Olmo2Attention, qk_norm_full):
 *
 *   q, k, v = proj(x) (+ biases);  q, k = qk_norm(q, k);  RoPE;  att = ATTENTION(q, k, v)
 *   h = x + rmsnorm2(o_proj(att) (+ bias));  x' = h + rmsnorm3(down(silu(gate(h)) * up(h)))
 *
 * and Gemma 3's sandwich layer (HF modeling_gemma3.py Gemma3DecoderLayer, post_norm with
 * sandwich_norm; every norm weight given as 1 + w, df_norm_shift_view; q / k per-head norms;
 * GeGLU; q scaled by df_model_q_scale; the sliding layers' RoPE the local one):
 *
 *   n1 = rmsnorm1(x);  q, k, v = proj(n1);  q, k = qk_norm(q, k);  RoPE;  att = ATTENTION(q, k, v)
 *   h = x + rmsnorm2(o_proj(att));  x' = h + rmsnorm3(down(gelu_tanh(gate(nf)) * up(nf))),
 *   nf = rmsnorm_ff(h)
 *
 * Only ATTENTION differs between the callers: causal attention over packed sequences saving
 * its log-sum-exp (training), or K / V written into the rollout's cache and the queries
 * attending over it (prefill and decode). The residual adds ride on the GEMMs (beta = 1).
 */
#ifndef DF_MODEL_DECODER_LAYER_H
#define DF_MODEL_DECODER_LAYER_H

#include "distflow/backend.h"
#include "distflow/model.h"

/**
 * The buffers of one layer call over T rows, in the backend's memory. Row-major; widths:
 * H hidden, I intermediate, qd = nh hd, kvd = nkv hd.
 */
typedef struct df_layer_bufs {
    const int32_t *pos;                /**< [T] positions (RoPE and the KV cache) */
    const float *rope_cos, *rope_sin;  /**< df_rope_model_table rows [n_pos, rope_dim / 2] */
    const float *rope_cos_local, *rope_sin_local; /**< the local RoPE's rows (df_model_local_rope),
                                            read by the layers df_model_layer_local_rope names */
    const float *ones;                 /**< [T] of 1 when the model has an o_proj bias */
    const float *x;                    /**< [T, H] residual stream in */
    float *xn1, *rstd1;                /**< [T, H], [T]: rmsnorm1's output and statistics;
                                            post_norm: o_proj's output (rmsnorm2's input) and
                                            rmsnorm2's statistics */
    float *qraw, *kraw;                /**< qk_norm: q / k before their norms ([T, qd], [T, kvd]);
                                            may be q / k (normalised in place) */
    float *qrstd, *krstd;              /**< qk_norm: [T, nh], [T, nkv] (qk_norm_full: [T] each) */
    float *q, *k, *v;                  /**< [T, qd] [T, kvd] [T, kvd], q and k after RoPE */
    float *att;                        /**< [T, qd] attention output */
    float *h;                          /**< [T, H] residual after attention; may be x */
    float *xn2, *rstd2, *gate, *up;    /**< [T, H], [T], [T, I], [T, I]; post_norm: xn2 the
                                            MLP's output (rmsnorm3's input), rstd2 rmsnorm3's.
                                            I: df_model_mlp_width (a sparse layer's experts use
                                            moe_intermediate_size of it) */
    float *act;                        /**< [T, I] silu(gate) * up (geglu: gelu_tanh(gate) * up) */
    float *xin, *rstdin;               /**< sandwich_norm: [T, H], [T]: input_layernorm's output
                                            (the projections' input) and statistics */
    float *xff, *rstdff;               /**< sandwich_norm: [T, H], [T]: pre_feedforward_layernorm's
                                            output (gate / up's input) and statistics; may be xn2 /
                                            rstd2 where nothing reads them again (each chunk's rows
                                            are read before down writes them) */
    int64_t mlp_rows;                  /**< rows gate / up / act hold: the MLP runs in chunks
                                            of that many rows ([mlp_rows, I] each); 0 or >= T:
                                            all T rows at once */
    struct df_moe_ws *moe;             /**< a model with experts: the sparse layers' scratch
                                            (moe.h) for mlp_rows rows (T when not chunked) */
    const int32_t *routes_in;          /**< router replay: this layer's k columns of row 0 of a
                                            [T, route_stride] route array (df_seq_batch), or NULL */
    int32_t *routes_out;               /**< the same of the record, or NULL */
    int64_t route_stride;
    float *xout;                       /**< [T, H] residual out, may be h; NULL: stop after
                                            gate / up (the checkpointed recompute; chunked, after
                                            n2: the backward projects each chunk itself); never
                                            NULL with post_norm (its norms come after the MLP) */
} df_layer_bufs;

/** The attention step: the packed one (kv == NULL) or the KV cache's. */
typedef struct df_layer_attn {
    /* packed causal attention over sequences (training) */
    const df_backend_seqs *seqs;  /**< offsets, n_seqs, max_len (window: set per layer) */
    float *lse;                   /**< [T, nh] saved for the backward */
    /* the rollout's KV cache */
    const df_backend_kv *kv;
    const int32_t *slot;          /**< [T] each row's slot; pos is bufs->pos */
    float *scratch;               /**< kv_scratch_floats(nh, kv->max_len) floats */
    /* Output rows only (prefill's last layer): after every row's K / V is written, only these
     * n_out rows (ascending) go on, gathered into xc / qc, with their slots and positions. */
    int64_t n_out;
    const int64_t *out_rows;      /**< [n_out], NULL: every row goes on */
    const int32_t *out_slot, *out_pos; /**< [n_out] */
    float *xc, *qc;               /**< [n_out, H] (the residual from here on), [n_out, qd] */
} df_layer_attn;

/**
 * Layer l of model config c over T rows: weights w (float32 view in the backend's memory),
 * w16 its bf16 copy (mixed precision: the matmuls go through gemm_w16) or NULL. With
 * at->out_rows the rows after the attention are the n_out output rows and the layer's
 * result is in at->xc. Returns the first failing operator's status (DF_OK when *err was
 * already set: nothing runs then) and keeps it in *err.
 */
int df_decoder_layer(const df_backend *be, const df_model_config *c, const df_layer_view *w,
                     const df_layer16 *w16, int64_t l, int64_t T, const df_layer_bufs *b,
                     const df_layer_attn *at, int *err);

/** The width of the q (n = nh) or k (n = nkv) norm's rows: head_dim (qwen3, per head) or the
 *  whole projection n head_dim (olmo2, qk_norm_full); T tokens make T n head_dim / width rows. */
static inline int64_t df_qk_norm_width(const df_model_config *c, int64_t n)
{
    return c->qk_norm_full ? n * c->head_dim : c->head_dim;
}

/** The MLP's activation: act[n] = gelu_tanh(gate) * up (c->geglu) or silu(gate) * up. */
void df_decoder_mlp_act(const df_backend *be, const df_model_config *c, float *act, const float *gate,
                        const float *up, int64_t n, int *err);

/**
 * Floats of the (1 + w) norm weights df_norm_shift_view makes for c (0 without norm_plus_one):
 * a row of max(hidden, head_dim) ones, the final norm, and per layer ln1, ln2, ln_ff, ln3 [hidden]
 * and q_norm, k_norm [head_dim].
 */
int64_t df_norm_shift_floats(const df_model_config *c);
/** Fill the first max(hidden, head_dim) floats of a df_norm_shift_floats blob (backend memory of
 *  be) with 1. Errors: the upload's. */
int df_norm_shift_init(const df_backend *be, const df_model_config *c, float *blob);
/**
 * Gemma3RMSNorm's weights: *out = *w with every norm (each layer's ln1 / ln2 / ln_ff / ln3 /
 * q_norm / k_norm and final_norm) pointing into `blob` (df_norm_shift_init'ed), which receives
 * 1 + w, one float32 add per element (HF: 1.0 + weight.float()); `layers` [num_hidden_layers]
 * receives out's layer views. The matmul weights stay w's. A norm backward given these weights
 * accumulates d(1 + w) = dw into w's gradient. Failures land in *err.
 */
void df_norm_shift_view(const df_backend *be, const df_model_config *c, const df_model_view *w, float *blob,
                        df_layer_view *layers, df_model_view *out, int *err);

/** Rows per MLP chunk for a call over T rows with buffers b (T when not chunked). */
static inline int64_t df_decoder_mlp_chunk(const df_layer_bufs *b, int64_t T)
{
    return b->mlp_rows > 0 && b->mlp_rows < T ? b->mlp_rows : T;
}

/**
 * The MLP's input projections of n rows: gate = n2 W_gate^T, up = n2 W_up^T ([n, H] in,
 * [n, I] out each; bf16 matmuls from w16 when given), exactly as df_decoder_layer computes
 * them, so a backward that projects a chunk again sees the forward's values to the bit.
 */
void df_decoder_mlp_in(const df_backend *be, const df_model_config *c, const df_layer_view *w,
                       const df_layer16 *w16, int64_t n, const float *xn2, float *gate, float *up,
                       int *err);

#endif /* DF_MODEL_DECODER_LAYER_H */
