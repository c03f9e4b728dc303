/*
 * distflow/lora.h — LoRA adapters (Hu et al., "LoRA: Low-Rank Adaptation of Large Language
 * Models", arXiv 2106.09685, eq. 3) on the decoder's linear layers, as PEFT's LoraConfig with
 * init_lora_weights=True, lora_dropout 0, bias "none" (verl's actor_rollout_ref.model.lora_rank /
 * lora_alpha / target_modules).
 *
 * A targeted weight W0 [out, in] becomes W = W0 + s B A, with A [r, in], B [out, r] and
 * s = lora_alpha / r. Only A and B train; every other tensor (embeddings, norms, biases, the
 * LM head, untargeted projections) stays the base model's.
 *
 * How distflow runs it (docs/lora.md): the model's own parameter blob always holds the MERGED
 * weights W = W0 + s B A (df_lora_merge after every change of A / B), so the forward, the
 * rollout, validation, weight sync and the HF save all read an ordinary model; the adapter keeps
 * a copy of every targeted W0 (bf16 when exact, else float32). The backward reads the merged W for the inputs'
 * gradients (exact: it is the forward's W) and, instead of the base weights' gradient
 * dW = dY^T X, accumulates the adapter's (arXiv 2106.09685 section 4.1):
 *   t = X A^T [T, r]     dB += s dY^T t          u = dY B [T, r]     dA += s u^T X
 * which are dW's projections s dW A^T and s B^T dW.
 *
 * Names: the adapter's tensors carry PEFT's names for a *ForCausalLM model,
 * "base_model.model.model.layers.<l>.self_attn.q_proj.lora_A.weight" ([r, in]) / ".lora_B.weight"
 * ([out, r]), mlp.gate_proj / up_proj / down_proj likewise.
 *
 * Fused modules (phi3): PEFT adapts each nn.Linear, and Phi-3's q / k / v are one, qkv_proj, as
 * gate / up are gate_up_proj. Its adapter is one A [r, H] shared by the parts and one B
 * [q + 2 kv, r] (resp. [2 I, r]) whose row blocks are the parts' B in order: the update s B A of
 * the fused weight, split by rows, is each part's s B_part A. distflow keeps the per-projection
 * views (df_lora_layer) with a[Q] = a[K] = a[V] the one A and b[K] / b[V] pointing into B, so the
 * merge and the backward are the unfused ones; A's gradient, accumulated by the three
 * projections into the same memory, is the fused module's s B^T dW.
 */
#ifndef DISTFLOW_LORA_H
#define DISTFLOW_LORA_H

#include "distflow/common.h"
#include "distflow/model.h"

#include <stdint.h>

/** The projections an adapter can target, in layout order (PEFT module names q_proj ... down_proj). */
typedef enum df_lora_target {
    DF_LORA_Q = 0, DF_LORA_K, DF_LORA_V, DF_LORA_O, DF_LORA_GATE, DF_LORA_UP, DF_LORA_DOWN,
    DF_LORA_N_TARGETS
} df_lora_target;

/** Every target: PEFT's "all-linear" on a causal LM (all linear layers but the LM head). */
#define DF_LORA_ALL_LINEAR ((1u << DF_LORA_N_TARGETS) - 1u)

typedef struct df_lora_config {
    int64_t rank;     /**< r >= 1 */
    double alpha;     /**< lora_alpha > 0; scale s = alpha / r (PEFT without use_rslora) */
    unsigned targets; /**< bit (1 << df_lora_target) per targeted projection, != 0 */
} df_lora_config;

/** One layer's adapter tensors inside a blob (params or grads); NULL where not targeted. */
typedef struct df_lora_layer {
    float *a[DF_LORA_N_TARGETS]; /**< [r, in] */
    float *b[DF_LORA_N_TARGETS]; /**< [out, r] */
} df_lora_layer;

typedef struct df_lora {
    df_lora_config cfg;
    float scale;            /**< alpha / rank */
    df_model_config mcfg;   /**< the model it adapts (shapes) */
    int n_tensors;
    df_param_desc *tensors; /**< [n_tensors]: per layer, per targeted module (df_lora_modules) in
                                 order, A then B;
                                 then a value model's score.weight and score.bias */
    int64_t n_params;       /**< floats of the adapter blob (each tensor rounded up to 16) */
    float *params;          /**< [n_params], 64-byte aligned */
    df_lora_layer *layers;  /**< [num_hidden_layers] views into params */
    float *base;            /**< float32 copies of the targeted W0, layer by layer in target order;
                                 NULL when base16 holds them */
    uint16_t *base16;       /**< the same as bfloat16 when every W0 is a bf16 value (a model read
                                 from bf16 files): exact at half the memory; else NULL */
    int64_t n_base;         /**< weights in the base copy */
    int64_t head;           /**< a value model (num_labels 1, PEFT's TOKEN_CLS): the offset in a
                                 blob of the fully trained score head (PEFT's modules_to_save
                                 "score"): score.weight [1, H]; -1 for a causal LM */
    int64_t head_bias;      /**< with head: the offset of score.bias [1]; else -1 */
} df_lora;

/** Name of a target as PEFT spells it ("q_proj", ..., "down_proj"). */
DF_API const char *df_lora_target_name(df_lora_target t);

/** A PEFT module: one adapter (one A, one B) over n_parts consecutive targets from `first`. */
typedef struct df_lora_module {
    const char *name;     /**< PEFT's module name ("q_proj", or phi3's "qkv_proj", "gate_up_proj") */
    df_lora_target first; /**< its first projection */
    int n_parts;          /**< 1, or the fused parts (qkv_proj 3, gate_up_proj 2) */
} df_lora_module;

/**
 * The modules of a model of config c with a projection in `targets` (DF_LORA_ALL_LINEAR: all), in
 * layout order, into mods[DF_LORA_N_TARGETS]; returns their count. The modules are the seven
 * projections, each its own, or for a model with fused projections (phi3) qkv_proj (q, k, v),
 * o_proj, gate_up_proj (gate, up), down_proj.
 */
DF_API int df_lora_modules(const df_model_config *c, unsigned targets, df_lora_module *mods);
/** The target mask bits of module m's projections. */
DF_API unsigned df_lora_module_mask(const df_lora_module *m);
/** Shape of target t's W0 in a model of config c: *out_dim rows, *in_dim columns. */
DF_API void df_lora_target_shape(const df_model_config *c, df_lora_target t, int64_t *out_dim,
                                 int64_t *in_dim);
/**
 * The target mask of verl's / PEFT's target_modules: "all-linear", or module names among
 * q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj and the fused modules' qkv_proj
 * (q, k and v) and gate_up_proj (gate and up), each projection named at most once. Either
 * spelling is accepted for either layout (the mask names projections); an adapter is created,
 * saved and compared by its model's modules (df_lora_create refuses part of a fused module).
 * Errors: DF_EINVAL naming the unknown or repeated name (`where` prefixes the message, e.g. the
 * config key), or an empty list.
 */
DF_API int df_lora_parse_targets(const char *const *names, int n, const char *where,
                                 unsigned *mask);

/**
 * PEFT's exclude_modules given as a string (LoraConfig.exclude_modules; verl's
 * actor_rollout_ref.model.exclude_modules): a regular expression that excludes every module whose
 * whole name it matches (Python's re.fullmatch; here PCRE2, whose syntax agrees for the usual
 * patterns). The names are PEFT's on a causal LM of config c (its num_hidden_layers and
 * df_lora_modules): "model.layers.<i>.self_attn.{q,k,v,o}_proj" and
 * "model.layers.<i>.mlp.{gate,up,down}_proj", for phi3 "model.layers.<i>.self_attn.qkv_proj" and
 * "model.layers.<i>.mlp.gate_up_proj" instead of the parts. A module of *targets that the pattern
 * matches in every layer is removed from *targets (all its parts); one it matches nowhere stays
 * (so ".*visual.*", a vision tower's pattern, changes nothing).
 * Errors (*targets unchanged): DF_EINVAL (not a regular expression; every target excluded),
 * DF_EUNSUPPORTED (a target matched in some layers and not in others, naming one of each: an
 * adapter covers every layer here), each prefixed by `where`.
 */
DF_API int df_lora_exclude(const char *pattern, const df_model_config *c, unsigned *targets,
                           const char *where);

/**
 * Adapters for model m: A drawn as PEFT's default init (nn.init.kaiming_uniform_ with
 * a = sqrt(5): uniform on [-1/sqrt(in), 1/sqrt(in)]) from a generator keyed by (seed, tensor
 * index), B zero, so the merged model starts exactly as the base; the targeted W0 are copied
 * from m->params (m must hold the base weights: nothing merged yet). m itself is unchanged.
 * A value model (the critic: num_labels 1) also trains its score head whole, as PEFT's TOKEN_CLS
 * task does (modules_to_save "score"): the adapter's blob then ends with a copy of the model's
 * score.weight and score.bias (tensors "base_model.model.score.weight" / ".bias"), which the merge
 * writes back. With fused modules (phi3) a module's parts are targeted together (one A, B split
 * by rows: see above). Errors: DF_EINVAL (rank < 1, alpha <= 0 or not finite, no target, num_labels
 * other than 0 and 1, part of a fused module targeted, naming the module), DF_ENOMEM.
 */
DF_API int df_lora_create(const df_model *m, const df_lora_config *cfg, uint64_t seed,
                          df_lora **out);
DF_API void df_lora_free(df_lora *l);
/** Views of a blob with l's layout (params or gradients): layers[num_hidden_layers]. */
DF_API void df_lora_view_of(const df_lora *l, float *blob, df_lora_layer *layers);
/** Descriptor by PEFT name, or NULL. */
DF_API const df_param_desc *df_lora_find_tensor(const df_lora *l, const char *name);

/**
 * Write the merged weights into m: every targeted W = W0 + s B A (a float32 GEMM onto the copy
 * of W0) and a value model's score head, then df_model_weights_changed(m). Other tensors are left
 * alone. Errors: DF_EINVAL when
 * m's config is not the adapter's.
 */
DF_API int df_lora_merge(const df_lora *l, df_model *m);

/**
 * Write the base weights W0 back into m's targeted tensors (the adapters disabled: verl's
 * reference "actor without LoRA"), then df_model_weights_changed(m); df_lora_merge puts the
 * adapters back. A value model's head is left as it is. Errors: DF_EINVAL (another shape).
 */
DF_API int df_lora_unmerge(const df_lora *l, df_model *m);

/**
 * Save the adapter in PEFT's layout to `dir` (created if missing): adapter_model.safetensors
 * (F32 tensors by PEFT name, metadata {"format": "pt"}) and adapter_config.json (sorted keys,
 * indent 2, as PEFT writes it: peft_type "LORA", task_type "CAUSAL_LM", r, lora_alpha (an integer
 * when integral), target_modules (the model's module names, sorted; all of them for DF_LORA_ALL_LINEAR),
 * lora_dropout 0.0, bias "none", fan_in_fan_out false, use_rslora false, use_dora false,
 * init_lora_weights true, base_model_name_or_path = base_model (may be NULL: null)). Both are
 * written to temporaries and fsynced first, then renamed, the config last, so a failure leaves
 * no adapter_config.json naming a partial file. Errors: DF_EIO naming the file, DF_ENOMEM.
 */
DF_API int df_lora_save_peft(const df_lora *l, const char *dir, const char *base_model);

/**
 * The settings of a PEFT adapter directory (`dir`/adapter_config.json: r, lora_alpha,
 * target_modules) into *out, with the checks df_lora_load_peft makes of the file alone (peft_type
 * LORA, no rsLoRA / DoRA / patterns / extra modules / biases). What verl's lora_adapter_path takes
 * the adapter's shape from. Errors as df_lora_load_peft's for the config file; *out zeroed.
 */
DF_API int df_lora_read_peft_config(const char *dir, df_lora_config *out);

/**
 * Read A / B from a PEFT adapter directory into l (whose base and shapes stay): `dir`/
 * adapter_config.json must say peft_type LORA, r == l's rank, lora_alpha == l's alpha (exactly),
 * the same target_modules set (a list of names, "all-linear", or one module name as a string),
 * use_rslora / use_dora false or absent, bias "none" or absent, rank_pattern / alpha_pattern
 * empty or absent, layers_to_transform null or absent, modules_to_save null, [] or absent;
 * lora_dropout and every other key are ignored. adapter_model.safetensors must hold exactly l's
 * tensors under their file names ("...lora_A.weight", not PEFT's in-memory
 * "...lora_A.<adapter>.weight"), F32 / BF16 / F16, the shapes of l's. l->params is written only
 * when every check passed. The caller merges after.
 * Errors name the file and the key / tensor: DF_ENOTFOUND (no directory / file), DF_EINVAL
 * (malformed JSON or safetensors, a missing / mistyped key, a missing / extra / mis-shaped
 * tensor, a config that differs from l's, naming both values), DF_EUNSUPPORTED (another
 * peft_type, use_rslora, use_dora, a non-empty rank_pattern / alpha_pattern / layers_to_transform
 * / modules_to_save, another bias, another tensor dtype), DF_EIO, DF_ENOMEM.
 */
DF_API int df_lora_load_peft(df_lora *l, const char *dir);

/**
 * Merge the PEFT adapter of `dir` into m (PEFT's merge_and_unload): its settings
 * (df_lora_read_peft_config), A and B (df_lora_load_peft) on m's targeted weights as they are
 * (the base), W = W0 + s B A. m is unchanged on error. Errors: those two functions', df_lora_create's.
 */
DF_API int df_lora_apply_peft(df_model *m, const char *dir);

/**
 * Train adapters through df_model_backward / df_model_backward_values on activations a: the
 * backward then accumulates l's gradients into `grads` ([l->n_params], in a's backend memory) and, when
 * its own `grads` argument is NULL, computes no gradient of the base model (every base tensor
 * frozen). A value model's score head (l->head) gets its gradient in l's blob, never in `grads`.
 * l == NULL detaches. The forward is unchanged (the model holds the merged weights). On a device
 * backend (memory not the host's) `grads` is backend memory and a copy of l->params is kept
 * there, uploaded now and by df_acts_lora_sync after every change of l->params. Errors:
 * DF_EINVAL (the adapter is for another model, NULL grads), DF_ENOMEM or the backend's (the
 * backward's [max_tokens, r] scratch, the device copy).
 */
DF_API int df_acts_set_lora(df_acts *a, const df_lora *l, float *grads);
/** After l->params changed (an optimizer step, a load): the device copy df_acts_set_lora keeps,
 *  uploaded (a no-op on host memory or without an adapter). Errors: the backend's. */
DF_API int df_acts_lora_sync(df_acts *a);

#endif /* DISTFLOW_LORA_H */
