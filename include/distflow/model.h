/*
 * distflow/model.h — the Qwen2 / Qwen3 / Llama decoder (and OLMo 2's post-norm and Gemma 2 / Gemma 3's
 * sandwich-norm variants of it): configuration, parameter
 * layout, Hugging Face file I/O, and training forward / backward on packed
 * variable-length sequences.
 *
 * Parameter layout (llm.c style, docs/conventions.md §4): df_model_layout() is the single
 * source of truth for the order of tensors. Parameters, gradients and AdamW
 * moments are each one contiguous float32 blob with that same layout, so the
 * optimizer, clipping, checkpoints and all-reduce are flat loops. Order:
 *   model.embed_tokens.weight                    [vocab, hidden]
 *   for each layer i:
 *     model.layers.i.input_layernorm.weight      [hidden]                  (all but olmo2)
 *     model.layers.i.self_attn.q_proj.weight     [n_heads * head_dim, hidden]
 *     model.layers.i.self_attn.q_proj.bias       [n_heads * head_dim]      (attention_bias)
 *     model.layers.i.self_attn.k_proj.weight     [n_kv_heads * head_dim, hidden]
 *     model.layers.i.self_attn.k_proj.bias       [n_kv_heads * head_dim]   (attention_bias)
 *     model.layers.i.self_attn.v_proj.weight     [n_kv_heads * head_dim, hidden]
 *     model.layers.i.self_attn.v_proj.bias       [n_kv_heads * head_dim]   (attention_bias)
 *     model.layers.i.self_attn.o_proj.weight     [hidden, n_heads * head_dim]
 *     model.layers.i.self_attn.o_proj.bias       [hidden]                  (o_proj_bias)
 *     model.layers.i.self_attn.q_norm.weight     [head_dim]                (qk_norm; olmo2
 *                                                 qk_norm_full: [n_heads * head_dim])
 *     model.layers.i.self_attn.k_norm.weight     [head_dim]                (qk_norm; olmo2
 *                                                 qk_norm_full: [n_kv_heads * head_dim])
 *     model.layers.i.post_attention_layernorm.weight [hidden]  (pre-norm: the MLP's input norm;
 *                                                 post_norm: the attention output's norm)
 *     model.layers.i.pre_feedforward_layernorm.weight [hidden] (sandwich_norm: gemma3_text)
 *     model.layers.i.mlp.gate_proj.weight        [intermediate, hidden]
 *     model.layers.i.mlp.up_proj.weight          [intermediate, hidden]
 *     model.layers.i.mlp.down_proj.weight        [hidden, intermediate]
 *     model.layers.i.post_feedforward_layernorm.weight [hidden]       (post_norm: olmo2, gemma3_text)
 *   model.norm.weight                            [hidden]
 *   lm_head.weight                               [vocab, hidden]  (causal LM, absent when tied)
 *   score.weight                                 [num_labels, hidden] (value model only)
 *   score.bias                                   [num_labels]         (value model only)
 * Linear weights are stored as in PyTorch: [out_features, in_features], y = x W^T + b.
 */
#ifndef DISTFLOW_MODEL_H
#define DISTFLOW_MODEL_H

#include "distflow/backend.h"
#include "distflow/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum df_dtype { DF_DTYPE_F32 = 0, DF_DTYPE_BF16 = 1, DF_DTYPE_F16 = 2 } df_dtype;

#define DF_MAX_EOS 8
#define DF_MAX_TYPED_LAYERS 256 /**< layers whose attention type a config may set one by one
                                    (df_model_config.full_layers) */
#define DF_MAX_ROPE_FREQS 128 /**< RoPE frequencies per head at most: rope_dim / 2 (head_dim <= 256) */

/** RoPE frequencies (HF rope_scaling / rope_parameters "rope_type"). */
typedef enum df_rope_type {
    DF_ROPE_DEFAULT = 0, /**< inv_freq[i] = 1 / theta^(2i / head_dim) */
    DF_ROPE_LLAMA3 = 1,  /**< Llama 3.1 rescaling of those (HF _compute_llama3_parameters) */
    DF_ROPE_LONGROPE = 2, /**< Phi-3's LongRoPE with its short factors (HF _compute_longrope_parameters
                              at sequence lengths up to original_max_position_embeddings):
                              inv_freq[i] = 1 / (short_factor[i] theta^(2i / head_dim)), cos and sin
                              multiplied by attention_factor */
    DF_ROPE_LINEAR = 3,   /**< position interpolation: the default frequencies divided by rope_factor
                              (HF _compute_linear_scaling_rope_parameters) */
    DF_ROPE_YARN = 4      /**< YaRN (HF _compute_yarn_parameters, transformers 4.56): each frequency
                              blends the default one (extrapolation) and it divided by rope_factor
                              (interpolation) by a linear ramp over the dims between the correction
                              range of rope_beta_fast / rope_beta_slow rotations within
                              rope_original_max_pos positions; cos and sin multiplied by
                              rope_attention_factor (df_rope_yarn_attention when none is given) */
} df_rope_type;

/** The fields of HF config.json that define the architecture. */
typedef struct df_model_config {
    char model_type[32];             /**< "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "llama", "mistral", "mixtral",
                                          "phi3", "olmo2", "olmoe", "gemma2" or "gemma3_text" */
    int64_t vocab_size;
    int64_t hidden_size;
    int64_t intermediate_size;
    int64_t num_hidden_layers;
    int64_t num_attention_heads;
    int64_t num_key_value_heads;     /**< GQA: divides num_attention_heads */
    int64_t head_dim;                /**< hidden_size / num_attention_heads unless given */
    int64_t max_position_embeddings;
    double rope_theta;
    double rms_norm_eps;
    double initializer_range;        /**< std of the normal init (HF default 0.02) */
    bool tie_word_embeddings;
    bool attention_bias;             /**< q/k/v biases (true for qwen2) */
    bool o_proj_bias;                /**< an o_proj bias too (llama / qwen3 attention_bias) */
    bool qk_norm;                    /**< RMSNorms of q and k before RoPE: per head, weights
                                          q_norm / k_norm [head_dim] (qwen3), or over the whole
                                          projection with qk_norm_full (olmo2) */
    bool qk_norm_full;               /**< olmo2 (Olmo2Attention): q_norm over each token's
                                          n_heads * head_dim projection and k_norm over its
                                          n_kv_heads * head_dim one, before the split into heads
                                          (weights [n_heads * head_dim], [n_kv_heads * head_dim]) */
    bool post_norm;                  /**< olmo2 (Olmo2DecoderLayer): no input norm; each sublayer's
                                          OUTPUT is normalised before its residual add:
                                          h = x + post_attention_layernorm(attn(x)),
                                          x' = h + post_feedforward_layernorm(mlp(h)) */
    int64_t rope_dim;                /**< the leading dims of each head RoPE rotates (phi3
                                          partial_rotary_factor: HF's int(head_dim * factor);
                                          Phi-4-mini 96 of 128); 0 = all of head_dim (the
                                          parser's value then).
                                          df_model_rope_dim reads it */
    df_rope_type rope_type;
    double rope_factor;              /**< llama3: factor (8 for Llama 3.1); linear: the divisor;
                                          yarn: factor (required, > 0), the interpolated frequencies'
                                          divisor, used as given even where max_position_embeddings /
                                          original_max_position_embeddings differs (4.56 only warns) */
    double rope_low_freq_factor;     /**< llama3: low_freq_factor (1) */
    double rope_high_freq_factor;    /**< llama3: high_freq_factor (4) */
    int64_t rope_original_max_pos;   /**< llama3: original_max_position_embeddings (8192); longrope:
                                          the pretraining context, the short factors' range; yarn:
                                          rope_scaling's original_max_position_embeddings, else
                                          max_position_embeddings (HF's `get(...) or
                                          max_position_embeddings`), the context of the correction
                                          range */
    double rope_short_factor[DF_MAX_ROPE_FREQS]; /**< longrope: [rope_dim / 2] */
    double rope_long_factor[DF_MAX_ROPE_FREQS];  /**< longrope: [rope_dim / 2], past the short range
                                                      (read and written back; distflow does not run it) */
    double rope_attention_factor;    /**< longrope: the cos / sin multiplier (attention_factor, else
                                          sqrt(1 + ln(max_pos / original) / ln(original)) when
                                          max_position_embeddings > original, else 1); yarn: the same
                                          multiplier (attention_factor, else df_rope_yarn_attention:
                                          get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
                                          when both are given and non-zero, else get_mscale(factor) =
                                          0.1 ln(factor) + 1, 1 for factor <= 1) */
    double rope_beta_fast;           /**< yarn: beta_fast, the rotations bounding the extrapolated
                                          (high-frequency) dims (HF `get("beta_fast") or 32`: 32 when
                                          absent, null or 0) */
    double rope_beta_slow;           /**< yarn: beta_slow, the rotations bounding the interpolated
                                          (low-frequency) dims (HF `or 1`: 1 when absent, null or 0) */
    double rope_mscale;              /**< yarn: mscale (DeepSeek-V3's), 0 when absent; read with
                                          rope_mscale_all_dim for the default attention factor only */
    double rope_mscale_all_dim;      /**< yarn: mscale_all_dim, 0 when absent */
    bool rope_truncate;              /**< yarn: truncate (HF default true): the correction range's ends
                                          floored / ceiled to whole dims; false (gpt-oss) keeps them
                                          fractional */
    int64_t sliding_window;          /**< 0: every layer attends to all earlier positions. W > 0
                                          (qwen2 / qwen3 use_sliding_window, mistral, phi3,
                                          gemma3_text): layers with index >= max_window_layers,
                                          except those in full_layers, attend to the last W
                                          positions */
    int64_t max_window_layers;       /**< first layer with the window (HF Qwen2Config.layer_types) */
    uint64_t full_layers[DF_MAX_TYPED_LAYERS / 64]; /**< bit l (l < DF_MAX_TYPED_LAYERS): layer l
                                          attends fully although its index is >= max_window_layers
                                          (a layer_types list with full layers among windowed ones;
                                          gemma3_text: every sliding_window_pattern-th layer).
                                          df_model_layer_sliding reads it */
    bool norm_plus_one;              /**< gemma3_text (Gemma3RMSNorm): every RMSNorm scales by
                                          (1 + w), the stored weight w (HF's); the decoders form
                                          1 + w at run time (df_norm_shift_view) */
    bool sandwich_norm;              /**< gemma3_text (Gemma3DecoderLayer), with post_norm: each
                                          sublayer also normalises its INPUT: input_layernorm before
                                          the attention, pre_feedforward_layernorm before the MLP */
    bool embed_scale;                /**< gemma3_text (Gemma3TextScaledWordEmbedding): the token
                                          embeddings times float32(sqrt(hidden_size)) on the way in
                                          (df_model_embed_scale); a tied LM head reads them unscaled */
    bool geglu;                      /**< gemma3_text (Gemma3MLP, hidden_activation
                                          gelu_pytorch_tanh): down(gelu_tanh(gate) * up) instead of
                                          SwiGLU */
    double query_pre_attn_scalar;    /**< gemma3_text: attention scores scaled by
                                          query_pre_attn_scalar^-0.5 (Gemma3Attention.scaling);
                                          0: head_dim's (the other families). df_model_q_scale */
    double rope_local_theta;         /**< gemma3_text rope_local_base_freq: the RoPE base of the
                                          sliding layers (plain RoPE, no scaling; the full layers
                                          keep rope_theta and rope_scaling). 0: one RoPE for all */
    /* ---- gemma2 (Gemma2Config, modeling_gemma2.py): tanh soft-capping ---- */
    double attn_logit_softcap;       /**< gemma2 attn_logit_softcapping C (default 50; null: 0 =
                                          none): each attention score s, after the scaling and
                                          before the mask and softmax, becomes C tanh(s / C)
                                          (Gemma2Attention / eager_attention_forward). Backends
                                          run it only with df_backend_ops.attention_softcap */
    double final_logit_softcap;      /**< gemma2 final_logit_softcapping C (default 30; null: 0 =
                                          none): the LM head's logits z become C tanh(z / C)
                                          before temperature, log-softmax and sampling
                                          (Gemma2ForCausalLM.forward); not applied to a value /
                                          reward head (Gemma2ForTokenClassification has none) */
    /* ---- qwen3_moe (Qwen3MoeConfig, modeling_qwen3_moe.py): sparse MoE MLPs ---- */
    int64_t num_experts;             /**< experts per sparse layer (Qwen3MoeConfig default 128;
                                          mixtral: num_local_experts, default 8); 0: every layer
                                          dense (the other families) */
    int64_t num_experts_per_tok;     /**< k: experts each token is routed to (default 8) */
    int64_t moe_intermediate_size;   /**< each expert's SwiGLU width (default 768; mixtral:
                                          intermediate_size); the dense
                                          layers keep intermediate_size */
    bool norm_topk_prob;             /**< the k routing weights renormalised to sum to 1
                                          (Qwen3MoeConfig default false; Qwen3-30B-A3B: true) */
    int64_t decoder_sparse_step;     /**< layer l is sparse when (l + 1) % step == 0 and it is
                                          not in mlp_only_layers (default 1) */
    uint64_t mlp_only_layers[DF_MAX_TYPED_LAYERS / 64]; /**< bit l: layer l keeps the dense MLP
                                          (mlp_only_layers). df_model_layer_moe reads both */
    int64_t shared_expert_intermediate_size; /**< qwen2_moe (Qwen2MoeConfig, default 5632): the
                                          width of each sparse layer's shared expert, a SwiGLU
                                          every token passes through, scaled by sigmoid(x g) of
                                          its shared_expert_gate g [1, hidden]; 0: none (the
                                          other families) */
    int64_t bos_token_id;            /**< -1 when absent */
    int64_t eos_token_ids[DF_MAX_EOS]; /**< eos_token_id: an int gives one entry, a list its entries in order */
    int n_eos;                       /**< 0 when eos_token_id is absent or null (qwen2 default) */
    df_dtype torch_dtype;            /**< dtype written when saving */
    int64_t num_labels;              /**< 0: causal LM (lm_head). 1: value model — HF
                                          *ForTokenClassification with one label, verl's critic:
                                          no lm_head, a head score.weight [1, hidden] and
                                          score.bias [1] on the final-norm hidden states */
    bool seq_cls;                    /**< architectures *ForSequenceClassification (a reward
                                          model): the same head, num_labels 1, but HF's class
                                          has no score.bias, so a checkpoint without one loads
                                          with a zero bias (verl reads reward models through
                                          AutoModelForTokenClassification, whose missing bias
                                          transformers initialises to 0) */
} df_model_config;

/** One tensor of the flat parameter blob. */
typedef struct df_param_desc {
    char name[96];   /**< HF tensor name, e.g. "model.layers.0.mlp.up_proj.weight" */
    int ndim;        /**< 1 or 2 */
    int64_t shape[2];
    int64_t numel;
    int64_t offset;  /**< element offset into the blob */
} df_param_desc;

/** Views of one layer's tensors inside a blob (params or grads). bq / bk / bv are NULL without
 *  attention_bias, bo without o_proj_bias, q_norm / k_norm without qk_norm. The norms by their HF
 *  names: ln1 input_layernorm (NULL with post_norm unless sandwich_norm), ln2
 *  post_attention_layernorm, ln3 post_feedforward_layernorm (post_norm only, else NULL), ln_ff
 *  pre_feedforward_layernorm (sandwich_norm only). */
typedef struct df_layer_view {
    float *ln1, *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo, *q_norm, *k_norm, *ln2, *w_gate, *w_up,
        *w_down, *ln3;
    float *ln_ff; /**< pre_feedforward_layernorm [hidden] (sandwich_norm: gemma3_text), else NULL */
    /** A sparse MoE layer (df_model_layer_moe; w_gate / w_up / w_down NULL there): router the
     *  router's weight mlp.gate.weight [num_experts, hidden]; experts expert 0's gate_proj, each
     *  expert's gate_proj [moe_I, hidden], up_proj [moe_I, hidden], down_proj [hidden, moe_I] at
     *  experts + e df_model_expert_floats(cfg) + {0, 1, 2} df_model_expert_floats(cfg) / 3.
     *  NULL in a dense layer. */
    float *router, *experts;
    /** A qwen2_moe sparse layer's shared expert: its gate_proj [shared_I, hidden], up_proj and
     *  down_proj [hidden, shared_I] at shared + {0, 1, 2} df_model_shared_floats(cfg) / 3, and
     *  shared_gate mlp.shared_expert_gate.weight [1, hidden]. NULL elsewhere. */
    float *shared, *shared_gate;
} df_layer_view;

/** Views of a whole blob. lm_head == embed when embeddings are tied, NULL in a value model. */
typedef struct df_model_view {
    float *embed;
    df_layer_view *layers; /**< [num_hidden_layers], owned by whoever filled the view */
    float *final_norm;
    float *lm_head;      /**< NULL in a value model */
    float *score_weight; /**< value model: [num_labels, hidden]; else NULL */
    float *score_bias;   /**< value model: [num_labels]; else NULL */
} df_model_view;

typedef struct df_model {
    df_model_config cfg;
    int n_tensors;
    df_param_desc *tensors; /**< [n_tensors] in layout order */
    int64_t n_params;       /**< total float32 elements */
    float *params;          /**< [n_params], 64-byte aligned */
    df_model_view w;        /**< views into params */
    int64_t version;        /**< weight version: a fresh value (> 0, unique in the process) at every
                                 change of params through the API (df_model_weights_changed), so a
                                 derived copy (df_weights16) can tell whether it is current */
    char *config_json;      /**< config.json text it was loaded from (unknown keys kept on save), or NULL */
} df_model;

/* ---- configuration ------------------------------------------------------ */

/** Defaults of a Qwen2 config (values of Qwen2Config in transformers; no window, plain RoPE). */
DF_API void df_model_config_defaults(df_model_config *cfg);
/**
 * Parse HF config.json. model_type must be "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "llama", "mistral", "mixtral", "phi3",
 * "olmo2", "olmoe", "gemma2" or "gemma3_text" ("gemma3", the multimodal model, is refused naming the text type); vocab_size, hidden_size, intermediate_size, num_hidden_layers and num_attention_heads
 * are required; every other key falls back to the default of transformers'
 * Qwen2Config / Qwen3Config / LlamaConfig / MistralConfig / Phi3Config / Olmo2Config (null counts as absent). num_key_value_heads
 * defaults to num_attention_heads, head_dim to hidden_size / num_attention_heads
 * (qwen3: 128). attention_bias: qwen2 always has q/k/v biases (no such HF key; an
 * explicit false is honoured so our own files round-trip); for llama and qwen3 it is
 * read (default false) and gives q/k/v AND o_proj biases (LlamaAttention,
 * Qwen3Attention); mistral and phi3 have no biases and no such key (an attention_bias there is
 * ignored, as transformers does). qwen3 has q/k norms (qk_norm). olmo2 (Olmo2Config): post_norm and
 * full-width q/k norms (qk_norm, qk_norm_full), attention_bias read as llama's (q/k/v and o_proj), no
 * window (use_sliding_window true refused, as for llama). gemma3_text (Gemma3TextConfig, defaults
 * head_dim 256, 4 key/value heads, rope_theta 1e6, tied): post_norm with sandwich_norm,
 * norm_plus_one, embed_scale, geglu and per-head qk_norm always; attention_bias as llama's;
 * query_pre_attn_scalar (> 0, default 256), rope_local_base_freq (> 0, default 1e4: the sliding
 * layers' plain RoPE), sliding_window (> 0, default 4096) on the layers layer_types marks sliding,
 * else on all but every sliding_window_pattern-th (default 6); transformers 5's per-layer-type
 * rope_parameters; refused (DF_EUNSUPPORTED, naming key and value): final_logit_softcapping /
 * attn_logit_softcapping not null, use_bidirectional_attention not false / null,
 * hidden_activation other than gelu_pytorch_tanh (hidden_act is not read). gemma2 (Gemma2Config,
 * defaults vocabulary 256000, 4 key/value heads, head_dim 256, 8192 positions, rope_theta 1e4,
 * tied): gemma3_text's layer without qk_norm and without a local RoPE; query_pre_attn_scalar (> 0,
 * default 256); sliding_window (> 0, default 4096; null refused) on the layers layer_types marks
 * sliding, else on the even ones ((i + 1) % 2 != 0); attn_logit_softcapping (default 50) and
 * final_logit_softcapping (default 30): a number > 0, or null for none (0), else DF_EINVAL;
 * hidden_activation and use_bidirectional_attention as gemma3_text's. qwen3_moe (Qwen3MoeConfig,
 * defaults hidden 2048, intermediate 6144, 24 layers, 32 heads, 4 key/value heads, head_dim
 * hidden / heads): Qwen3's attention and the MoE keys (df_cfg_parse_moe: num_experts 128,
 * num_experts_per_tok 8, moe_intermediate_size 768, norm_topk_prob false, decoder_sparse_step 1,
 * mlp_only_layers []). mixtral (MixtralConfig, defaults Mistral's sizes, rope_theta 1e6, rms_norm_eps
 * 1e-5, no window): Mistral's attention and window, every layer sparse (df_cfg_parse_mixtral:
 * num_local_experts 8, num_experts_per_tok 2, experts of intermediate_size, renormalised;
 * router_jitter_noise other than 0 refused). qwen2_moe (Qwen2MoeConfig, defaults hidden 2048,
 * intermediate 5632, 24 layers, 16 heads, 16 key/value heads, 32768 positions, rope_theta 1e4):
 * Qwen2's attention with q/k/v biases when qkv_bias (default true), qwen3_moe's MoE keys with
 * Qwen2MoeConfig's defaults (num_experts 60, num_experts_per_tok 4, moe_intermediate_size 1408,
 * norm_topk_prob false) and shared_expert_intermediate_size (default 5632, > 0);
 * use_sliding_window true refused (transformers' versions disagree on which layers slide).
 * olmoe (OlmoeConfig, defaults vocabulary 50304, hidden and intermediate 2048, 16 layers and heads,
 * 4096 positions, rms_norm_eps 1e-5, eos 50279): Llama's layer with olmo2's full-width q/k norms
 * (qk_norm_full, no post_norm; head_dim must be hidden / heads), attention_bias as llama's, every
 * layer sparse with num_experts (alias num_local_experts; default 64) experts of
 * intermediate_size, num_experts_per_tok (8), norm_topk_prob (false); clip_qkv other than null and
 * use_sliding_window true refused.
 * RoPE: rope_theta, and rope_scaling
 * null or of rope_type (or "type") "default" or "llama3" (factor, low_freq_factor,
 * high_freq_factor, original_max_position_embeddings, all required) or "linear" (factor, a
 * number > 0, required) or "yarn" (qwen2, qwen3, llama, mistral, olmo2: factor, a number > 0,
 * required; beta_fast / beta_slow numbers (default 32 / 1, null or 0 the default as HF's `or`),
 * original_max_position_embeddings an integer > 0 (default max_position_embeddings),
 * attention_factor a number > 0, mscale / mscale_all_dim numbers, truncate a boolean (default
 * true); DF_ROPE_YARN) or, for phi3, "longrope" /
 * "su" (short_factor and long_factor, rope_dim / 2 numbers > 0 each; original_max_position_embeddings
 * from the object, else the config, else Phi3Config's 4096; attention_factor optional:
 * DF_ROPE_LONGROPE); transformers 5's
 * rope_parameters is read the same way (its rope_theta first). Sliding window (qwen2,
 * qwen3; HF Qwen2Config): with use_sliding_window true and sliding_window W (default
 * 4096; null: no window), the layers of index >= max_window_layers (default 28) attend
 * to their last W positions; a layer_types list, when present, names those layers
 * instead. mistral (MistralConfig): sliding_window W (default 4096; null: no window) on
 * every layer (max_window_layers 0); phi3 the same with default null. phi3's checkpoint fuses
 * projections (df_model_load). attention_dropout, and phi3's resid_pdrop / embd_pdrop, must be 0
 * (there is no dropout). phi3's partial_rotary_factor f (0 < f <= 1, default 1) gives rope_dim =
 * int(head_dim * f), which must be even and >= 2 (Phi-4-mini: 0.75); other families refuse a
 * factor other than 1 (their HF attention rotates whole heads). eos_token_id (int or list) fills eos_token_ids / n_eos in order.
 * torch_dtype (or "dtype") must be float32 / bfloat16 / float16.
 * architectures: *ForCausalLM (or absent) gives a causal LM, num_labels 0
 * whatever id2label says; *ForTokenClassification a value model, its label
 * count taken as transformers' PretrainedConfig does (len(id2label), else the
 * "num_labels" key, else 2), which must be 1; *ForSequenceClassification (a
 * reward model) the same head with seq_cls set (its score.bias optional).
 * Errors name the file and the key: DF_ENOTFOUND / DF_EIO (file), DF_EINVAL
 * (bad JSON, missing required key, wrong type, inconsistent sizes, a llama3 rope_scaling
 * without one of its keys), DF_EUNSUPPORTED (other model_type, a rope type other than
 * default / llama3 / linear / longrope / yarn (named; longrope outside phi3, yarn for phi3 and
 * gemma3_text), rope_scaling and rope_parameters both given and different,
 * layer_types with a full-attention layer after a windowed one past DF_MAX_TYPED_LAYERS, llama with
 * use_sliding_window true, hidden_act other than silu, mlp_bias true, a non-zero dropout,
 * a partial_rotary_factor other than 1 outside phi3, architectures
 * none of *ForCausalLM / *ForTokenClassification / *ForSequenceClassification or
 * mixing them, a classifier with other than one label (naming id2label or
 * num_labels), more than DF_MAX_EOS eos ids).
 */
DF_API int df_model_config_load(const char *path, df_model_config *cfg);
/** As df_model_config_load, from text; `source` names it in errors (NULL: "config.json"). */
DF_API int df_model_config_parse(const char *json_text, const char *source,
                                 df_model_config *cfg);

/**
 * Overrides of a config.json: verl's `actor_rollout_ref.model.override_config` /
 * `critic.model.override_config`, as JSON, merged into the file before it is parsed.
 */
typedef struct df_config_overrides {
    const char *json; /**< a JSON object's text; NULL or an empty object: no overrides */
    const char *who;  /**< the setting they come from, named in errors (NULL: "override_config") */
} df_config_overrides;

/**
 * Merge `ov` into the config.json text `config_json` (`source` names it in errors; NULL:
 * "config.json") as verl's update_model_config sets them on the transformers config: each key of
 * ov->json replaces the file's value (null included: it is a value, not a deletion), except that
 * an object given where the file holds an object merges into it, recursively
 * (`rope_scaling: {factor: 4}` changes that entry only). Only keys that change what distflow
 * computes may be overridden: those df_model_config_parse reads (model_type and architectures
 * excepted: they pick the model class, which transformers takes from the file too; attention_bias
 * not for mistral and phi3; resid_pdrop, embd_pdrop and partial_rotary_factor for phi3 only),
 * `classifier_dropout` when 0 (there is no dropout), and `use_cache` (a boolean; the rollout
 * always keeps a KV cache, training never does, as in verl).
 * *merged: malloc'd JSON text; `config_json` copied unchanged when there are no overrides.
 * Errors: DF_EINVAL (ov->json or config_json not a JSON object, use_cache not a boolean),
 * DF_EUNSUPPORTED naming ov->who and the key (any other key, a non-zero dropout), DF_ENOMEM.
 * Values are checked by the parse that follows, not here.
 */
DF_API int df_model_config_merge(const char *config_json, const char *source,
                                 const df_config_overrides *ov, char **merged);
/**
 * df_model_config_load with `ov` merged in first (df_model_config_merge; ov may be NULL). A
 * value that came from the overrides is reported as "<path> with <ov->who>: key ...".
 * Errors: df_model_config_load's and df_model_config_merge's.
 */
DF_API int df_model_config_load_ex(const char *path, const df_config_overrides *ov,
                                   df_model_config *cfg);
/**
 * Write an HF-compatible config.json to `path` (atomically: temporary + rename),
 * formatted as transformers does (indent 2, sorted keys). Every key of
 * `original_json` (the text the model was loaded from; NULL for a fresh file)
 * is kept and the known ones are updated: architectures ["<P>ForCausalLM"] with
 * P = Qwen2 / Qwen3 / Llama / Mistral / Phi3 / Olmo2 / Gemma2 / Gemma3 (a value model, and a *ForSequenceClassification one, which then
 * holds a score.bias: ["<P>ForTokenClassification"], id2label
 * {"0": "LABEL_0"}, label2id {"LABEL_0": 0}, and num_labels when the original has that
 * key), model_type, the sizes, head_dim (qwen2: only when it differs from hidden_size /
 * num_attention_heads), rope_theta and rope_scaling (or, when the original has it,
 * rope_parameters), use_sliding_window / sliding_window / max_window_layers (qwen2,
 * qwen3; layer_types when the original has it; mistral: sliding_window alone, an int or
 * null; llama and olmo2: none; gemma3_text: sliding_window, and layer_types for a fresh file or one
 * that has it, with query_pre_attn_scalar and rope_local_base_freq, or the per-type
 * rope_parameters when the original has them; gemma2: sliding_window, layer_types as gemma3_text's,
 * query_pre_attn_scalar, attn_logit_softcapping and final_logit_softcapping, null for 0), rms_norm_eps, initializer_range, tie_word_embeddings, attention_bias (llama,
 * qwen3, olmo2; qwen2 only when false; mistral only when the original has it),
 * bos_token_id, eos_token_id (an int for one id unless the original held a list),
 * torch_dtype. A fresh file also gets hidden_act, use_cache and transformers_version.
 * Errors: DF_EINVAL (invalid cfg or original), DF_EIO naming the path.
 */
DF_API int df_model_config_save(const df_model_config *cfg, const char *original_json,
                                const char *path);
/**
 * Check internal consistency (heads divide, sizes > 0, ...): DF_EINVAL; num_labels
 * must be 0 or 1 (DF_EINVAL below 0, DF_EUNSUPPORTED above 1). The attention features
 * must be those of model_type in HF (DF_EINVAL): qk_norm exactly for qwen3, olmo2 and
 * gemma3_text, qk_norm_full exactly for olmo2, post_norm for olmo2 and gemma3_text, sandwich_norm
 * exactly for gemma3_text and gemma2 (norm_plus_one, embed_scale, geglu and query_pre_attn_scalar
 * only there, rope_local_theta only in gemma3_text; code may switch the first three off; gemma2:
 * no q/k norms), attn_logit_softcap and final_logit_softcap >= 0 and finite, non-zero only in
 * gemma2, o_proj_bias
 * never for qwen2 and equal to attention_bias for llama / qwen3 / olmo2, no biases in mistral; llama3 RoPE needs
 * factor > 0, 0 < low_freq_factor < high_freq_factor, original_max_position_embeddings
 * > 0; sliding_window and max_window_layers >= 0, no window for llama and olmo2, one for
 * gemma3_text and gemma2.
 */
DF_API int df_model_config_validate(const df_model_config *cfg);
/**
 * The attention window of layer `layer`: cfg->sliding_window for a windowed layer
 * (df_model_layer_sliding), else 0 (all earlier positions); 0 too when the window
 * is at least df_model_max_positions (no sequence fills it, so it masks nothing: Phi-3 128k's
 * 262144 over 131072 positions; the CUDA backend runs such a model). A query at
 * position p attends to keys at positions p - W < j <= p (transformers' masking_utils
 * sliding_window_overlay with the causal mask: W keys, itself included).
 */
DF_API int64_t df_model_layer_window(const df_model_config *cfg, int64_t layer);
/**
 * Whether layer `layer` is a sliding-window layer of cfg (HF layer_types "sliding_attention"):
 * sliding_window > 0, index >= max_window_layers and not marked full (full_layers). True even
 * when the window masks nothing (df_model_layer_window 0): gemma3_text picks the layer's RoPE
 * by this type, not by the mask.
 */
DF_API bool df_model_layer_sliding(const df_model_config *cfg, int64_t layer);
/**
 * Whether layer `layer` rotates q / k with the local RoPE (df_model_local_rope): gemma3_text's
 * sliding layers when rope_local_theta > 0 (Gemma3RotaryEmbedding: rotary_emb_local). Else the
 * model's RoPE (df_rope_model_table of cfg).
 */
DF_API bool df_model_layer_local_rope(const df_model_config *cfg, int64_t layer);
/**
 * Whether layer `layer` is a sparse MoE layer (Qwen3MoeDecoderLayer's / Qwen2MoeDecoderLayer's test): num_experts > 0,
 * (layer + 1) % decoder_sparse_step == 0 and layer not in mlp_only_layers. False for every
 * layer of a dense family.
 */
DF_API bool df_model_layer_moe(const df_model_config *cfg, int64_t layer);
/** Floats of one expert in the blob: its gate_proj, up_proj and down_proj, each
 *  moe_intermediate_size x hidden_size rounded up to 16 floats (the layout's alignment). */
DF_API int64_t df_model_expert_floats(const df_model_config *cfg);
/** Floats of a sparse layer's shared expert in the blob (qwen2_moe): its three projections, each
 *  shared_expert_intermediate_size x hidden_size rounded up to 16 floats; 0 without one. */
DF_API int64_t df_model_shared_floats(const df_model_config *cfg);
/** Expert indices a token's route holds: the sparse layers times num_experts_per_tok (0 for a
 *  dense model). */
DF_API int64_t df_model_route_width(const df_model_config *cfg);
/** The first of layer `layer`'s num_experts_per_tok columns in a token's route: the sparse layers
 *  before it times num_experts_per_tok. */
DF_API int64_t df_model_route_col(const df_model_config *cfg, int64_t layer);
/** The widest MLP of cfg's layers: intermediate_size, or moe_intermediate_size or
 *  shared_expert_intermediate_size when larger and the model has sparse layers (what gate / up /
 *  act buffers of a layer call are sized by). */
DF_API int64_t df_model_mlp_width(const df_model_config *cfg);
/** *local = cfg with the local RoPE as its RoPE: rope_theta = rope_local_theta, plain RoPE (no
 *  scaling), for df_rope_model_table. cfg->rope_local_theta must be > 0. */
DF_API void df_model_local_rope(const df_model_config *cfg, df_model_config *local);
/** The factor the token embeddings are multiplied by on the way in: float32(sqrt(hidden_size))
 *  with embed_scale (HF casts the scale to the weights' dtype; distflow computes in float32), else
 *  1. */
DF_API float df_model_embed_scale(const df_model_config *cfg);
/**
 * The factor q is multiplied by after RoPE so that the attention's 1 / sqrt(head_dim) gives
 * query_pre_attn_scalar^-0.5 (gemma3_text): float32(sqrt(head_dim / query_pre_attn_scalar)),
 * 1 when query_pre_attn_scalar is 0 or head_dim (Gemma 3 1B / 4B / 12B).
 */
DF_API float df_model_q_scale(const df_model_config *cfg);
/**
 * The positions distflow runs for cfg, 0 .. N - 1: max_position_embeddings; with longrope the
 * short factors' range, min(original_max_position_embeddings, max_position_embeddings) (HF switches
 * to the long factors for a batch whose longest sequence passes it: distflow does not). Every
 * guard against positions past a model's range uses it.
 */
DF_API int64_t df_model_max_positions(const df_model_config *cfg);
/** What df_model_max_positions is called in messages: "max_position_embeddings", or for longrope
 *  "original_max_position_embeddings (longrope: the short factors' range)". */
DF_API const char *df_model_max_positions_name(const df_model_config *cfg);
/**
 * The dims of each head RoPE rotates, its first ones (HF Phi3 apply_rotary_pos_emb rotates
 * q[..., :rope_dim] and passes the rest): cfg->rope_dim, or head_dim when that is 0. Even.
 * The RoPE tables (df_rope_model_table) are [positions, rope_dim / 2].
 */
DF_API int64_t df_model_rope_dim(const df_model_config *cfg);
/** cfg's RoPE in messages, written into buf[cap] and returned: "default", "llama3 scaling",
 *  "linear scaling x<factor>", "longrope" or "yarn x<factor>". */
DF_API const char *df_model_rope_name(const df_model_config *cfg, char *buf, size_t cap);

/* ---- FLOP accounting ---------------------------------------------------- */

/**
 * Model FLOPs of one forward and backward over sequences of `tokens` tokens in all whose squared
 * lengths sum to `seqlen_sq`, as verl counts them for its MFU (verl/utils/flops_counter.py,
 * _estimate_qwen2_flops, which it uses for qwen2, qwen3, llama and mistral; here for every family,
 * gemma3_text's windows aside: df_model_train_flops_win):
 *   6 N tokens + 6 seqlen_sq head_dim n_heads n_layers,
 *   N = n_layers (3 H I + H (2 q + 2 kv)) + 2 V H,
 * q = n_heads head_dim, kv = n_kv_heads head_dim, I = intermediate_size, V = vocab_size (the
 * embedding counted as a matmul, biases, norms and the recomputation of gradient checkpointing
 * not at all). A sparse layer's 3 H I is _estimate_qwen2_moe_flops's H (E + 3 k moe_I), plus
 * H (3 shared_I + 1) for qwen2_moe's shared expert and gate (which verl leaves out). In double;
 * no error.
 */
DF_API double df_model_train_flops(const df_model_config *c, double tokens, double seqlen_sq);
/**
 * df_model_train_flops with `seqlen_win` = sum over the sequences of len * min(len,
 * sliding_window): for gemma3_text, verl's _estimate_gemma3_flops, which counts a sliding layer's
 * attention as seqlen_win (its queries see at most W keys) and a full one's as seqlen_sq; the
 * other families ignore it (verl's qwen2 estimate counts windowed layers whole). In double.
 */
DF_API double df_model_train_flops_win(const df_model_config *c, double tokens, double seqlen_sq,
                                       double seqlen_win);

/* ---- layout ------------------------------------------------------------- */

/**
 * The floats of cfg's parameter blob (*total: every tensor's numel rounded up
 * to 16, as df_model_layout places them) and its tensor count (*n_tensors; may
 * be NULL), in closed form, allocating nothing, with every product and sum
 * checked. Errors: df_model_config_validate's; DF_EINVAL when a count
 * overflows int64 or the tensors would not fit an int (sizes read from a file
 * are checked here before anything is allocated).
 */
DF_API int df_model_param_count(const df_model_config *cfg, int64_t *total, int64_t *n_tensors);
/**
 * Compute the tensor table for `cfg` (order documented above).
 * *descs receives a malloc'd array of *n descriptors; *total the element count.
 * Errors: df_model_param_count's, DF_ENOMEM.
 */
DF_API int df_model_layout(const df_model_config *cfg, df_param_desc **descs, int *n,
                           int64_t *total);
/** Fill `view` with pointers into `blob` (any blob with the layout of m). view->layers must hold num_hidden_layers entries. */
DF_API void df_model_view_of(const df_model *m, float *blob, df_model_view *view);
/** Descriptor by HF name, or NULL. */
DF_API const df_param_desc *df_model_find_tensor(const df_model *m, const char *name);

/* ---- bf16 weight copy (mixed precision, docs/mixed_precision.md) --------------- */

/** One layer's matmul weights in bfloat16, each with its float32 tensor's shape ([out, in]). */
typedef struct df_layer16 {
    const uint16_t *wq, *wk, *wv, *wo, *w_gate, *w_up, *w_down; /**< w_gate / w_up / w_down NULL in
                                                                   a sparse MoE layer */
    /** A sparse MoE layer (df_model_layer_moe): the router [num_experts, hidden] and expert 0's
     *  gate_proj, expert e's gate / up / down at experts + e df_weights16_expert_elems(cfg) +
     *  {0, 1, 2} df_weights16_expert_elems(cfg) / 3, always row-major. NULL in a dense layer. */
    const uint16_t *router, *experts;
    /** A qwen2_moe sparse layer's shared expert (gate / up / down at shared + {0, 1, 2}
     *  df_weights16_shared_elems(cfg) / 3) and its gate [1, hidden]; NULL elsewhere. */
    const uint16_t *shared, *shared_gate;
    /** false: row-major [out, in]. true: each tensor in the compute backend's packed layout
     *  for a forward (x W^T; the rollout's packed copy, backend gemm_w16_packed). */
    bool packed;
} df_layer16;

/**
 * A bfloat16 copy ("shadow") of a model's matmul weights: q/k/v/o and gate/up/down of every
 * layer and, with DF_W16_LM_HEAD, the LM head (the tied embedding when tie_word_embeddings; none
 * in a value model).
 * The float32 weights stay the master copy the optimizer updates; the shadow is what
 * mixed-precision matmuls read (backend gemm_w16), converted once per weight version by
 * df_weights16_refresh instead of at every matmul. Host memory, 64-byte aligned tensors.
 */
typedef struct df_weights16 df_weights16;

/** df_weights16_create_ex flags. */
enum {
    DF_W16_LM_HEAD = 1u << 0, /**< hold the LM head too (a causal LM; a value model has none) */
    /**
     * hold the token embedding (embed_tokens) too, which mixed precision's lookup reads (FSDP
     * MixedPrecision casts it with every other parameter). Tied embeddings with DF_W16_LM_HEAD
     * share the head's bf16 rows (the same tensor, no second copy); otherwise a copy of its own.
     */
    DF_W16_EMBED = 1u << 1,
};
/** An empty (all-zero) shadow for cfg's shapes, the LM head included (DF_W16_LM_HEAD). Errors:
 *  df_model_config_validate's, DF_ENOMEM. */
DF_API int df_weights16_create(const df_model_config *cfg, df_weights16 **out);
/** As df_weights16_create with `flags` (0: the layers' matmul weights only). DF_EINVAL for an
 *  unknown flag. */
DF_API int df_weights16_create_ex(const df_model_config *cfg, unsigned flags, df_weights16 **out);
/**
 * As df_weights16_create_ex with the copy in `be`'s memory (NULL or a host-memory backend: host
 * memory, as create_ex): df_weights16_layer / _lm_head / _embed then give device pointers that
 * the decoder passes to be's gemm_w16 / embedding_fwd_w16 / lmhead_*_w16 as they are. The
 * refreshes round with df_bf16_from_f32's bits either way: df_weights16_refresh / _refresh_model
 * on the host, then one upload per tensor (a [largest tensor] host staging buffer);
 * df_weights16_refresh_dev on the device. _refresh_release gives nothing back for such a copy,
 * _offload and _page_out do nothing. be must outlive the copy. The copy is NOT zeroed: refresh
 * it before reading. Errors: create_ex's, DF_ENOMEM naming the backend.
 */
DF_API int df_weights16_create_on(const df_backend *be, const df_model_config *cfg, unsigned flags,
                                  df_weights16 **out);
/**
 * Refresh a copy in a device's memory from m's weights held in the same device's memory:
 * `dsrc`, a view with m's layout into a float32 copy there (the forward's df_weights_dev or the
 * optimizer's master weights), at m's current version (the caller's promise). Every tensor goes
 * through the backend's bf16_from_f32 (the CPU's df_bf16_from_f32 bits), nothing crosses to the
 * host; the copy then holds m->version. A host copy, or a backend without bf16_from_f32:
 * df_weights16_refresh_model(w, m) (dsrc unused). Errors: DF_EINVAL (NULL), the backend's.
 */
DF_API int df_weights16_refresh_dev(df_weights16 *w, const df_model *m, const df_model_view *dsrc);
/** Whether w lives in a device's memory (df_weights16_create_on with a non-host backend). */
DF_API bool df_weights16_on_device(const df_weights16 *w);
/**
 * Convert `src` (float32 weights with cfg's shapes, host memory: a df_model's w) into the shadow,
 * rounding to nearest even (NaN stays NaN), one threaded pass. Call it after every change of the
 * weights (an optimizer step, a load, a weight sync). Errors: DF_EINVAL (NULL, a value model's
 * view for a causal LM's shadow or the reverse).
 */
DF_API int df_weights16_refresh(df_weights16 *w, const df_model_view *src);
/**
 * df_weights16_refresh from m's weights (m->w), recording m->version as the version the copy
 * holds, so df_weights16_is_current can check it before every use. Errors: those of
 * df_weights16_refresh (then the copy holds no version).
 */
DF_API int df_weights16_refresh_model(df_weights16 *w, const df_model *m);
/** The df_model.version the copy was last converted from by df_weights16_refresh_model; 0 when
 *  never, or when last refreshed from a bare view (df_weights16_refresh). */
DF_API int64_t df_weights16_source_version(const df_weights16 *w);
/** Whether w holds m's current weights: made by df_weights16_refresh_model from m at its current
 *  version (false for NULL arguments, and after any later df_model_weights_changed of m). */
DF_API bool df_weights16_is_current(const df_weights16 *w, const df_model *m);
/** Layer l's bf16 weights (l in [0, num_hidden_layers)). */
DF_API const df_layer16 *df_weights16_layer(const df_weights16 *w, int64_t l);
/** bf16 elements of one expert in a df_weights16: its three projections, each
 *  moe_intermediate_size x hidden_size rounded up to 32 elements (64 bytes). */
DF_API int64_t df_weights16_expert_elems(const df_model_config *cfg);
/** bf16 elements of a sparse layer's shared expert (qwen2_moe): its three projections, each
 *  shared_expert_intermediate_size x hidden_size rounded up to 32 elements; 0 without one. */
DF_API int64_t df_weights16_shared_elems(const df_model_config *cfg);
/** The LM head [vocab, hidden] in bf16, NULL for a value model or without DF_W16_LM_HEAD. */
DF_API const uint16_t *df_weights16_lm_head(const df_weights16 *w);
/** The token embedding [vocab, hidden] in bf16 (the LM head's rows when tied), NULL without
 *  DF_W16_EMBED. */
DF_API const uint16_t *df_weights16_embed(const df_weights16 *w);
/**
 * Whether this machine runs bf16 matmuls natively (oneDNN has AMX-BF16 or AVX512-BF16
 * kernels here): DF_OK, or DF_EUNSUPPORTED with the reason in df_last_error. Mixed precision
 * (DF_ACTS_BF16) needs it.
 */
DF_API int df_model_bf16_available(void);
/** Bytes the shadow holds (its tensors; for memory accounting). */
DF_API int64_t df_weights16_bytes(const df_weights16 *w);
/** Number of df_weights16_refresh calls so far (0: never filled). */
DF_API int64_t df_weights16_version(const df_weights16 *w);
DF_API void df_weights16_free(df_weights16 *w);

/* ---- lifetime and files --------------------------------------------------- */

/** Allocate a zero-initialised model for cfg. Errors: df_model_param_count's; DF_ENOMEM (before
 *  allocating) when weights, tensor table and layer views need more than the machine's physical
 *  memory, naming both sizes, or when an allocation fails. */
DF_API int df_model_create(const df_model_config *cfg, df_model **out);
/** Deep copy (e.g. the frozen reference model), with a version of its own. */
DF_API int df_model_clone(const df_model *src, df_model **out);
/**
 * Give m's weights a new version (m->version): every writer of m->params calls it after the
 * write, so copies made from the old values (df_weights16_refresh_model) are known stale.
 * The library's writers do: df_model_create / clone / init_random / load / to_value_model, the
 * optimizer step and the training-state load of the actor and critic. Code writing m->params
 * itself must call it too. Versions come from one process-wide counter (atomic), so a version
 * also names the model: a copy of one model never matches another, even one allocated at the
 * same address later. Releasing pages of weights whose bf16 copy is kept
 * (df_weights16_refresh_release) is not a change of the weights.
 */
DF_API void df_model_weights_changed(df_model *m);
DF_API void df_model_free(df_model *m);
/**
 * HF-style random init from a seeded generator: Linear and embedding weights
 * ~ N(0, initializer_range), biases 0, RMSNorm weights 1 (transformers'
 * Qwen2PreTrainedModel._init_weights). Each tensor draws from its own
 * generator keyed by (seed, its layout index), so a value model's score head
 * equals the one df_model_to_value_model draws with the same seed.
 */
DF_API int df_model_init_random(df_model *m, uint64_t seed);
/**
 * Load `dir`/config.json (df_model_config_load; its text is kept in
 * m->config_json) and the weights from `dir`/model.safetensors or, when that
 * is absent, the shards listed in `dir`/model.safetensors.index.json
 * ("weight_map"; each shard opened once). Weights may be f32, bf16 or f16 (also
 * f64 / i32 / i64), converted to f32. Every tensor of the layout must be present
 * exactly once with its shape (a *ForTokenClassification checkpoint: score.weight
 * and score.bias, no lm_head.weight; a *ForSequenceClassification one: score.weight,
 * and score.bias when it has one, else the bias is 0; phi3: each layer's q / k / v as one
 * self_attn.qkv_proj.weight and gate / up as one mlp.gate_up_proj.weight, split into the layout's
 * tensors, their rows in that order). Ignored: lm_head.weight of a tied model and
 * *.rotary_emb.inv_freq buffers; any other extra tensor is an error.
 * Errors name the file and the tensor: DF_ENOTFOUND (no config.json, no
 * weights, a shard named by the index is missing), DF_EINVAL (malformed file,
 * missing / unexpected / mis-shaped / duplicated tensor), DF_EUNSUPPORTED, DF_EIO.
 * *out is NULL on error.
 */
DF_API int df_model_load(const char *dir, df_model **out);
/**
 * df_model_load with `ov` merged into config.json first (df_model_config_load_ex; ov may be NULL):
 * the model is built from the merged config, and m->config_json holds the merged text, so a
 * checkpoint saved from m records the overrides (as verl saves the overridden HF config).
 * Errors: df_model_load's and df_model_config_merge's.
 */
DF_API int df_model_load_ex(const char *dir, const df_config_overrides *ov, df_model **out);
/**
 * Save m to `dir` (created if missing) in the Hugging Face layout, weights in
 * `dtype` (F32, BF16 round-to-nearest-even, F16) with HF tensor names and
 * safetensors metadata {"format": "pt"}; a tied model has no lm_head.weight; a
 * value model writes score.weight / score.bias and no lm_head.weight.
 *   config.json             df_model_config_save(m->cfg with torch_dtype = dtype,
 *                           m->config_json)
 *   generation_config.json  bos_token_id / eos_token_id (an existing file keeps
 *                           its other keys)
 *   weights                 max_shard_bytes == 0, or everything fits in one
 *                           shard: model.safetensors. Otherwise tensors fill
 *                           shards in layout order up to max_shard_bytes of
 *                           tensor data (a larger tensor gets its own shard):
 *                           model-00001-of-0000N.safetensors ... plus
 *                           model.safetensors.index.json {"metadata":
 *                           {"total_size": data bytes}, "weight_map": {...}}.
 *                           phi3: q / k / v and gate / up written fused, as
 *                           df_model_load reads them.
 * All files are written to temporaries first and renamed into place only when
 * every one is complete, so a failure while writing (disk full, I/O error)
 * leaves the directory as it was. Weight
 * files of an earlier save that the new one does not overwrite (a stale
 * model.safetensors, index or shard set) are then removed; other files
 * (tokenizer, ...) are untouched. Errors: DF_EINVAL (dtype, max_shard_bytes < 0),
 * DF_EIO naming the file, DF_ENOMEM.
 */
DF_API int df_model_save(const df_model *m, const char *dir, df_dtype dtype,
                         int64_t max_shard_bytes);

/**
 * A 64-bit checksum of the parameter bytes (m->params, n_params float32 in
 * native byte order), for checking that the ranks of a data-parallel group
 * hold bit-identical weights (allgather it and compare) at the cost of one
 * pass over memory. Not cryptographic; equal weights give equal checksums, and
 * any change of bits (including 0.0 versus -0.0, or NaN payloads) almost
 * surely changes it. Definition (src/model/checksum.c): the bytes are cut into
 * 1 MiB blocks; a block is read as 8-byte words (a last partial word
 * zero-padded) fed round-robin into four xxHash64-style lanes seeded with the
 * block index, folded and finalised with MurmurHash3's fmix64 and the block's
 * length; block hashes are summed mod 2^64 and the sum, xor the total byte
 * count, goes through fmix64 again. Blocks are hashed in parallel (OpenMP);
 * the result does not depend on the thread count.
 * Errors: DF_EINVAL when m, m->params or out is NULL.
 */
DF_API int df_model_param_checksum(const df_model *m, uint64_t *out);

/* ---- training forward / backward ------------------------------------------- */

/**
 * Packed variable-length sequences (no padding). Token t of sequence s sits at
 * row seq_offsets[s] + t and has position t. "Output rows" select the rows
 * whose next-token distribution is scored: row out_rows[j] predicts
 * out_targets[j]. Only output rows go through the LM head.
 */
typedef struct df_seq_batch {
    int64_t n_tokens;            /**< T */
    const int32_t *tokens;       /**< [T] */
    int64_t n_seqs;
    const int64_t *seq_offsets;  /**< [n_seqs + 1], seq_offsets[0] = 0, seq_offsets[n_seqs] = T */
    int64_t n_out;
    const int64_t *out_rows;     /**< [n_out] row indices, ascending */
    const int32_t *out_targets;  /**< [n_out] token ids */
    /** Router replay (a model with experts; docs/models.md "Router replay"): NULL, or
     *  [T, df_model_route_width(cfg)] expert indices, per token the sparse layers' k choices in
     *  layer order (df_model_route_col). The forward and its backward route each token to these
     *  experts instead of the router's top-k, their weights still the live softmax's (renormalised
     *  with norm_topk_prob); a -1 first entry for a layer leaves that token's routing there live.
     *  An index outside [0, num_experts): DF_EINVAL. */
    const int32_t *routes_in;
    /** NULL, or [T, df_model_route_width(cfg)] receiving the experts the forward routed each token
     *  to (the replayed ones where routes_in replays): a record to replay later. */
    int32_t *routes_out;
} df_seq_batch;

/** Saved activations and scratch for one micro-batch of at most max_tokens / max_out rows. */
typedef struct df_acts df_acts;

/**
 * Whether backend `be` runs every feature of cfg: DF_EUNSUPPORTED naming the feature and the
 * backend when not (a sliding window on a backend without ops->attention_window; Gemma 2's
 * attention or final-logit soft-cap, the latter on a causal LM, without ops->attention_softcap;
 * Gemma's scaled embedding or queries without ops->scale), else DF_OK. The rollout engine checks
 * it too.
 * df_acts_create_on checks it; callers that create activations lazily check it up front.
 */
DF_API int df_model_check_backend(const df_backend *be, const df_model_config *cfg);
/**
 * df_model_check_backend, and for DF_ACTS_BF16 in `flags` that the backend has mixed-precision
 * matmuls and lookup (ops->gemm_w16 and ops->embedding_fwd_w16 over host-memory bf16 weights;
 * the CPU only for now): DF_EUNSUPPORTED
 * naming the backend and the setting otherwise.
 */
DF_API int df_model_check_backend_ex(const df_backend *be, const df_model_config *cfg,
                                     unsigned flags);

/** Activations on the CPU backend (df_acts_create_on with df_backend_cpu()). */
DF_API int df_acts_create(const df_model_config *cfg, int64_t max_tokens, int64_t max_out,
                          df_acts **out);
/**
 * Activations in the memory of backend `be` (distflow/backend.h): df_model_forward /
 * df_model_backward (and the value head's) on them run every operator there. On a backend
 * without host memory (CUDA) the model's weights are read from the copy df_acts_load_weights
 * made and `grads` of the backward must be backend memory of n_params floats; logp / entropy /
 * values and their gradients stay host arrays. The value head's dot products are a GEMM there
 * (float sums) where the CPU sums them in double.
 * Errors: DF_EINVAL (sizes, no backend), DF_EUNSUPPORTED (head_dim, df_model_check_backend),
 * DF_ENOMEM naming the backend.
 */
DF_API int df_acts_create_on(const df_backend *be, const df_model_config *cfg,
                             int64_t max_tokens, int64_t max_out, df_acts **out);

/** df_acts_create_ex flags. */
enum {
    /**
     * Activation (gradient) checkpointing per decoder layer (HF's gradient_checkpointing_enable,
     * verl's enable_gradient_checkpointing): the forward keeps each layer's input (the residual
     * stream, [n_tokens, hidden]) and the head's rows, and the backward recomputes one layer's
     * activations from its input just before that layer's backward, into one layer's worth of
     * memory. The per-layer buffers shrink from num_hidden_layers copies to one; a training
     * step runs the decoder layers' forward (less the down projection) once more. The same
     * kernels run on the same inputs, so logits and gradients are the same to the bit.
     */
    DF_ACTS_CHECKPOINT = 1u << 0,
    /**
     * Mixed precision (torch.autocast(bfloat16) / FSDP MixedPrecision(param_dtype=bf16),
     * docs/mixed_precision.md): the decoder layers' matmuls (q/k/v/o, gate/up/down, forward
     * and backward) take bfloat16 operands with float32 accumulation; their weights come from
     * a bf16 copy (df_weights16) that df_acts_load_weights refreshes, which must be called
     * after every change of the weights and before the first forward. Weight gradients
     * round both operands per call. The embedding lookup reads the copy's bf16 table when it
     * holds one (DF_W16_EMBED: every copy df_acts_load_weights and the training roles make)
     * and widens the rows exactly; its gradient stays a float32 scatter-add. The LM head
     * reads the copy's bf16 head where the backend has lmhead_fwd_w16. Norms, attention, the
     * losses and every reduction stay float32, as do the master weights and gradients.
     * Refused (DF_EUNSUPPORTED) where the backend has no gemm_w16 / embedding_fwd_w16 or the
     * CPU no AMX-BF16 / AVX512-BF16 kernels (df_model_bf16_available).
     */
    DF_ACTS_BF16 = 1u << 1,
    /**
     * Forward passes only (a frozen model: the reference, verl's ref.compute_ref_log_prob
     * under torch.no_grad): the residual stream lives in two [max_tokens, hidden] buffers used
     * in turn (layer l reads one and writes the other) instead of num_hidden_layers + 1, the
     * per-layer buffers have one slot, and nothing only a backward reads (its gradient
     * scratch, the residual after attention) is allocated. The same kernels run on the same
     * inputs, so log-probs and values are the normal pass's to the bit; df_model_backward /
     * df_model_backward_values on such activations fail with DF_EINVAL.
     */
    DF_ACTS_FORWARD_ONLY = 1u << 2,
};

/**
 * df_acts_create_on with `flags` (DF_ACTS_CHECKPOINT, DF_ACTS_BF16, DF_ACTS_FORWARD_ONLY, any
 * of them together; with DF_ACTS_FORWARD_ONLY, DF_ACTS_CHECKPOINT changes nothing). Errors as
 * df_acts_create_on, DF_EINVAL for an unknown flag, DF_ACTS_BF16's.
 */
DF_API int df_acts_create_ex(const df_backend *be, const df_model_config *cfg,
                             int64_t max_tokens, int64_t max_out, unsigned flags, df_acts **out);
/**
 * *bytes = the backend memory df_acts_create_ex would allocate for these arguments, from the
 * same layout code and without allocating it (the host's small index arrays aside); with
 * DF_ACTS_BF16 the bf16 weight copy df_acts_load_weights makes included. Errors as
 * df_acts_create_ex's checks (nothing is allocated, so no DF_ENOMEM).
 */
DF_API int df_acts_bytes(const df_backend *be, const df_model_config *cfg, int64_t max_tokens,
                         int64_t max_out, unsigned flags, int64_t *bytes);
/** Backend memory held by a's buffers, in bytes (df_acts_bytes of its creation). */
DF_API int64_t df_acts_size(const df_acts *a);
/**
 * Copy m's weights into the backend's memory (a no-op on the CPU backend, which reads m's
 * own), or, with DF_ACTS_BF16, convert them into the bf16 copy the matmuls read (the one
 * conversion per weight version): call it after every change of m's parameters (an
 * optimizer step, a load, a weight sync); a mixed-precision forward refuses a model whose
 * copy it never made. The copy's layout is m's (df_model_view_of). Errors: DF_ENOMEM, the
 * backend's copy errors.
 */
DF_API int df_acts_load_weights(df_acts *a, const df_model *m);
/**
 * Mixed precision (DF_ACTS_BF16): read the layers' bf16 weights from `w`, a copy of m's that its
 * owner keeps and refreshes after every change of m (a role sharing one copy among the
 * activations it re-creates, or a frozen model that keeps only that copy); df_acts_load_weights
 * then leaves it alone. The lookup reads w's embedding when it holds one (DF_W16_EMBED), else
 * m's float32 one; the head likewise (DF_W16_LM_HEAD). `w` must outlive `a` or the next call. Errors: DF_EINVAL (activations
 * without DF_ACTS_BF16, NULL, another model's shape).
 */
DF_API int df_acts_share_weights16(df_acts *a, const df_weights16 *w, const df_model *m);
DF_API void df_acts_free(df_acts *a);

/**
 * Forward pass. For each output row j:
 *   logp[j]    = log softmax(logits_j / temperature)[out_targets[j]]
 *   entropy[j] = -sum_v p_v log p_v of that same distribution (NULL: not computed,
 *                which saves a multiply-add per logit; the backward then takes no dentropy)
 * The LM head is evaluated in vocabulary chunks; [n_out, vocab] logits are
 * never materialised. Activations needed by df_model_backward are kept in `a`.
 * Errors: DF_EINVAL if the batch exceeds the sizes `a` was created for, for a
 * sequence longer than m->cfg.max_position_embeddings (its positions 0 .. len - 1 must
 * lie in the model's range; one comparison per sequence, behind the commands' config
 * checks), for a value model (m->cfg.num_labels > 0) and for activations created with
 * a value model's config (they hold no LM-head scratch).
 */
DF_API int df_model_forward(const df_model *m, df_acts *a, const df_seq_batch *b,
                            float temperature, float *logp, float *entropy);

/** What df_model_forward_head computes per output row j ([n_out] host arrays each). */
typedef struct df_head_out {
    float *logp;      /**< required: df_model_forward's logp */
    float *entropy;   /**< NULL: not computed (df_model_forward's entropy) */
    float *sum_pi_sq; /**< NULL: not computed; sum_v p_v^2 of the same distribution, in (0, 1]:
                           verl's sum_pi_squared (calculate_sum_pi_squared_from_logits), which its
                           optimal token baseline reads. No gradient flows through it. */
} df_head_out;

/**
 * df_model_forward with the outputs in `out` (sum_pi_sq costs one multiply-add per logit). The
 * backward takes dentropy only when out->entropy was given. Errors: df_model_forward's, and
 * DF_EINVAL for a NULL out.
 */
DF_API int df_model_forward_head(const df_model *m, df_acts *a, const df_seq_batch *b,
                                 float temperature, const df_head_out *out);

/**
 * Backward pass of the last df_model_forward on `a`: given dL/dlogp [n_out]
 * and optionally dL/dentropy [n_out] (NULL = 0), ACCUMULATE dL/dparams into
 * `grads` ([n_params], layout of m). Zero grads once per optimizer step.
 * Errors: DF_EINVAL without a forward on `a`, after df_model_forward_values,
 * for a different batch or temperature, for dentropy != NULL after a
 * forward without entropy, and for activations created with DF_ACTS_FORWARD_ONLY.
 */
DF_API int df_model_backward(const df_model *m, df_acts *a, const df_seq_batch *b,
                             float temperature, const float *dlogp, const float *dentropy,
                             float *grads);

/* ---- value model (the PPO critic) ------------------------------------------ */

/**
 * Turn the causal LM *m into a value model in place (verl's critic: the actor's
 * checkpoint loaded as AutoModelForTokenClassification with num_labels = 1, so
 * the trunk is kept, lm_head is dropped and a fresh head is initialised):
 * cfg.num_labels = 1, score.weight [1, hidden] ~ N(0, initializer_range) drawn
 * from `seed`, score.bias [1] = 0 (transformers' _init_weights for nn.Linear).
 * Trunk tensors are copied by name, bit for bit; m->config_json is kept, so a
 * save keeps its unknown keys and writes *ForTokenClassification. The head is
 * the one df_model_init_random(seed) gives a value model. The old model is
 * freed and *m replaced (pointers into it become invalid). A model that
 * already has a value head is left as it is.
 * Errors: DF_EINVAL (m or *m NULL), DF_ENOMEM (*m unchanged).
 */
DF_API int df_model_to_value_model(df_model **m, uint64_t seed);

/**
 * Forward pass of a value model (num_labels == 1): for each output row j
 *   values[j] = score.weight . rmsnorm_final(h_L[out_rows[j]]) + score.bias
 * (HF Qwen2ForTokenClassification logits[..., 0] at that row; verl's critic
 * reads the value of response token t at the row that predicts it, i.e. the
 * same out_rows as df_model_forward). b->out_targets is not used and may be
 * NULL. The dot product is summed in double. `a` may come from df_acts_create
 * with the value model's config or the causal LM's (same shapes). Activations
 * for df_model_backward_values are kept in `a`.
 * Errors: DF_EINVAL (not a value model, batch larger than `a`, bad tokens / rows,
 * a sequence longer than m->cfg.max_position_embeddings, values NULL with n_out > 0).
 */
DF_API int df_model_forward_values(const df_model *m, df_acts *a, const df_seq_batch *b,
                                   float *values);

/**
 * Backward of the last df_model_forward_values on `a`: given dL/dvalues
 * [n_out], ACCUMULATE dL/dparams into `grads` ([n_params], layout of m):
 *   d score.weight += sum_j dvalues[j] xnf_j,  d score.bias += sum_j dvalues[j],
 *   d xnf_j = dvalues[j] score.weight, then the trunk as df_model_backward.
 * Errors: DF_EINVAL without a forward on `a`, after a df_model_forward
 * (log-prob) forward, for a different batch, or for activations created with
 * DF_ACTS_FORWARD_ONLY.
 */
DF_API int df_model_backward_values(const df_model *m, df_acts *a, const df_seq_batch *b,
                                    const float *dvalues, float *grads);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_MODEL_H */
