/*
 * hf_io.h (internal) — shared by the Hugging Face file readers and writers:
 * JSON text in the exact style of
 * Python's json.dumps(obj, indent=2, sort_keys=True) (what transformers writes
 * for config.json and the shard index), and config.json serialisation.
 */
#ifndef DF_MODEL_HF_IO_H
#define DF_MODEL_HF_IO_H

#include "distflow/model.h"
#include "util/fsutil.h"

#include <jansson.h>
#include <stddef.h>

/* ---- JSON output ---------------------------------------------------------- */

/**
 * Serialise `v` as Python's json.dumps(v, indent=2, sort_keys=True) does
 * (ensure_ascii, float repr, ", " / ": " separators), plus a trailing newline.
 * Returns a malloc'd string or NULL when out of memory.
 */
char *df_json_dumps_py(const json_t *v);
/** Python repr() of a double: shortest round-trip digits ("1e-06", "10000.0"). */
void df_format_double_py(double v, char *buf, size_t cap);

/* ---- config.json ---------------------------------------------------------- */

/**
 * config.json text for `cfg`: keys of `original_json` (may be NULL) are kept,
 * the known ones updated. *out is malloc'd. DF_EINVAL if original_json is not
 * a JSON object.
 */
int df_model_config_to_json(const df_model_config *cfg, const char *original_json, char **out);
/** torch's name of a dtype, as config.json's torch_dtype spells it: "float32", "bfloat16", "float16". */
const char *df_dtype_torch_name(df_dtype d);
/** The Hugging Face class prefix of a model_type: "Qwen2", "Qwen3" or "Llama" (Qwen2ForCausalLM, ...). */
const char *df_model_class_prefix(const char *model_type);

/* ---- config.json reading (config_json.c), for the readers of its parts ---- */

/** "an object", "a string", ...: v's JSON type in messages. */
const char *df_cfg_type_name(const json_t *v);
/** root[key], NULL when absent or null (HF writes null for "use the default"). */
json_t *df_cfg_get(json_t *root, const char *key);
/** DF_EINVAL: "src: key \"key\" must be <want>, got <type of v>". */
int df_cfg_wrong_type(const char *src, const char *key, const char *want, const json_t *v);
/** root[key] into *out when present (else *out unchanged, or DF_EINVAL when required). */
int df_cfg_get_int(json_t *root, const char *src, const char *key, bool required, int64_t *out);
int df_cfg_get_num(json_t *root, const char *src, const char *key, double *out);
int df_cfg_get_bool(json_t *root, const char *src, const char *key, bool *out);

/**
 * Read the config.json at `path`, merge `ov` into it (df_model_config_merge) and parse the result
 * into *cfg; *text (may be NULL) receives the merged text, malloc'd. Errors name the path, and
 * `ov->who` for a value that came from the overrides.
 */
int df_model_config_text_ex(const char *path, const df_config_overrides *ov, df_model_config *cfg,
                            char **text);

/* ---- tensor names of a checkpoint (hf_names.c) ---- */

/** One tensor of a Hugging Face checkpoint: n_parts layout tensors (indices into df_model.tensors),
 *  their rows in order. */
typedef struct df_hf_tensor {
    char name[96];
    int ndim;
    int64_t shape[2];
    int64_t numel;
    int n_parts;
    int part[3];
} df_hf_tensor;

/** Whether model_type stores fused projections (phi3: qkv_proj, gate_up_proj). */
bool df_model_fused_projections(const df_model_config *c);
/**
 * m's tensors as its checkpoint names and shapes them, in layout order: each layout tensor as it
 * is, except phi3's q / k / v weights of a layer (one "self_attn.qkv_proj.weight") and gate / up
 * weights (one "mlp.gate_up_proj.weight"). *out malloc'd, *n entries. Errors: DF_ENOMEM.
 */
int df_hf_tensor_table(const df_model *m, df_hf_tensor **out, int *n);

/* ---- positions: RoPE and the sliding window (config_pos.c) ---- */

/**
 * rope_theta, rope_scaling and transformers 5's rope_parameters (its rope_theta wins, as in
 * standardize_rope_params) into c->rope_*. Types "default" and "llama3" (its four keys
 * required); any other type is DF_EUNSUPPORTED naming it; both rope_scaling and
 * rope_parameters given: DF_EUNSUPPORTED. Errors name src and the key.
 */
int df_cfg_parse_rope(json_t *root, const char *src, df_model_config *c);
/**
 * use_sliding_window, sliding_window, max_window_layers and layer_types (HF Qwen2Config /
 * Qwen3Config: a window applies when use_sliding_window and sliding_window are set, to the
 * layers layer_types marks "sliding_attention", by default those with index >=
 * max_window_layers); full layers among windowed ones set c->full_layers (at most
 * DF_MAX_TYPED_LAYERS layers may be typed one by one). gemma3_text (Gemma3TextConfig):
 * sliding_window (default 4096, > 0) on the layers layer_types marks sliding, else on all but
 * every sliding_window_pattern-th (default 6). llama / olmo2 with use_sliding_window true:
 * DF_EUNSUPPORTED.
 */
int df_cfg_parse_window(json_t *root, const char *src, df_model_config *c);
/** Write c's RoPE keys into o (rope_parameters when o has it, else rope_theta / rope_scaling). */
int df_cfg_write_rope(json_t *o, const df_model_config *c);
/** Write c's sliding-window keys into o (qwen2 / qwen3); `fresh`: o is a new file. */
int df_cfg_write_window(json_t *o, const df_model_config *c, bool fresh);

/** Qwen3MoeConfig's defaults where they differ from Qwen2Config's: its sizes (hidden 2048,
 *  intermediate 6144, 24 layers, 32 heads, 4 key/value heads), Qwen3's attention (q/k norms, no
 *  biases) and the experts (128, 8 a token, width 768, norm_topk_prob false, every layer sparse). */
void df_cfg_moe_defaults(df_model_config *c);
/** Qwen2MoeConfig's defaults where they differ from Qwen2Config's: its sizes (hidden 2048,
 *  intermediate 5632, 24 layers, 16 heads and key/value heads, rope_theta 1e4, 32768 positions)
 *  and the experts (60, 4 a token, width 1408, a shared expert of 5632, norm_topk_prob false,
 *  every layer sparse); Qwen2's attention (q/k/v biases). */
void df_cfg_qwen2_moe_defaults(df_model_config *c);
/**
 * qwen3_moe's and qwen2_moe's keys: num_experts, num_experts_per_tok, moe_intermediate_size, decoder_sparse_step
 * (integers), norm_topk_prob (boolean), mlp_only_layers (a list of layer indices in
 * [0, num_hidden_layers), at most index 255; read after num_hidden_layers); output_router_logits
 * and router_aux_loss_coef type-checked only (the load-balancing loss is not part of RL's loss);
 * qwen2_moe also shared_expert_intermediate_size (an integer). The ranges are
 * df_model_config_validate's. Errors name src and the key.
 */
int df_cfg_parse_moe(json_t *root, const char *src, df_model_config *c);
/** MixtralConfig's defaults where they differ from Qwen2Config's (Mistral's sizes, rope_theta 1e6,
 *  rms_norm_eps 1e-5, 8 key/value heads, no window) and its experts (8, 2 a token, always
 *  renormalised, every layer sparse). */
void df_cfg_mixtral_defaults(df_model_config *c);
/**
 * mixtral's keys, after intermediate_size: num_local_experts and num_experts_per_tok (integers;
 * moe_intermediate_size becomes intermediate_size, the experts' width); router_jitter_noise a
 * number, DF_EUNSUPPORTED unless 0; output_router_logits and router_aux_loss_coef type-checked.
 * olmoe's too: num_experts (num_local_experts its alias), num_experts_per_tok, norm_topk_prob,
 * clip_qkv (null, else DF_EUNSUPPORTED); no router_jitter_noise.
 */
int df_cfg_parse_mixtral(json_t *root, const char *src, df_model_config *c);
/** OlmoeConfig's defaults where they differ from Qwen2Config's (vocabulary 50304, hidden and
 *  intermediate 2048, 16 layers and heads, 4096 positions, rms_norm_eps 1e-5, eos 50279, no
 *  biases) and its layer: q/k norms over the whole projections (qk_norm, qk_norm_full), every
 *  layer sparse with 64 experts of intermediate_size, 8 a token, norm_topk_prob false. */
void df_cfg_olmoe_defaults(df_model_config *c);
/** Write c's MoE keys into o (qwen3_moe's and qwen2_moe's, olmoe's, or mixtral's num_local_experts / num_experts_per_tok);
 *  `fresh`: also transformers' output_router_logits false, router_aux_loss_coef 0.001 (and
 *  mixtral's router_jitter_noise 0). Non-zero on a JSON failure. */
int df_cfg_write_moe(json_t *o, const df_model_config *c, bool fresh);

/** v as a JSON integer when it is integral (as HF's files write 256 or 10000), else a real. */
json_t *df_json_number(double v);

/** Value written as "transformers_version" when the original has none. */
#define DF_HF_TRANSFORMERS_VERSION "4.46.0"

#endif /* DF_MODEL_HF_IO_H */
