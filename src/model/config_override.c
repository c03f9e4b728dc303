/*
 * verl's model.override_config: a mapping merged into config.json before it is parsed
 * (df_model_config_merge, distflow/model.h). verl sets each entry on the transformers config
 * object (update_model_config); only the keys this engine reads can change what it computes, so
 * every other key is refused rather than carried along without effect.
 */
#include "distflow/model.h"
#include "model/hf_io.h"
#include "util/fsutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The keys df_model_config_parse reads (config_json.c, config_pos.c) and checks. model_type and
   architectures are not among them: they pick the model class, which transformers takes from
   config.json whatever the override says. */
static const char *const READ_KEYS[] = {
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "max_position_embeddings", "rope_theta", "rope_scaling",
    "rope_parameters", "use_sliding_window", "sliding_window", "max_window_layers", "layer_types",
    "rms_norm_eps", "initializer_range", "tie_word_embeddings", "attention_bias", "bos_token_id",
    "eos_token_id", "torch_dtype", "dtype", "hidden_act", "mlp_bias", "num_labels", "id2label",
    "attention_dropout"};
/* ... and for gemma3_text only (Gemma3TextConfig's attention scale, local RoPE base, layer pattern,
   activation, and the features refused unless null / false). */
static const char *const GEMMA3_KEYS[] = {"query_pre_attn_scalar", "rope_local_base_freq", "sliding_window_pattern",
                                          "hidden_activation", "final_logit_softcapping", "attn_logit_softcapping",
                                          "use_bidirectional_attention"};
/* ... and for gemma2 only (Gemma2Config's attention scale, soft-caps, activation, and the feature
   refused unless null / false). */
static const char *const GEMMA2_KEYS[] = {"query_pre_attn_scalar", "hidden_activation", "final_logit_softcapping",
                                          "attn_logit_softcapping", "use_bidirectional_attention"};
/* ... and for qwen3_moe and qwen2_moe only (their configs' experts; output_router_logits and
   router_aux_loss_coef are type-checked only: no loss reads them, config_moe.c). */
static const char *const MOE_KEYS[] = {"num_experts", "num_experts_per_tok", "moe_intermediate_size",
                                       "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers"};
/* ... and for qwen2_moe only (Qwen2MoeConfig's shared expert and its name for the q/k/v biases). */
static const char *const QWEN2_MOE_KEYS[] = {"shared_expert_intermediate_size", "qkv_bias"};
/* ... and for mixtral only (MixtralConfig's experts; the jitter is read and refused unless 0). */
static const char *const MIXTRAL_KEYS[] = {"num_local_experts", "num_experts_per_tok", "router_jitter_noise"};
/* ... and for olmoe only (OlmoeConfig's experts, num_local_experts its alias; clip_qkv refused
   unless null). */
static const char *const OLMOE_KEYS[] = {"num_experts", "num_local_experts", "num_experts_per_tok", "norm_topk_prob",
                                         "clip_qkv"};
/* ... and for phi3 only (Phi3Config's dropouts, partial rotary factor, LongRoPE's context). */
static const char *const PHI3_KEYS[] = {"resid_pdrop", "embd_pdrop", "partial_rotary_factor",
                                        "original_max_position_embeddings"};

static bool listed(const char *key, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(key, list[i]))
            return true;
    return false;
}

#define LISTED(key, list) listed(key, list, sizeof list / sizeof *list)

static int check_key(const char *key, const json_t *v, const char *model_type, const char *who)
{
    if (!strcmp(key, "model_type") || !strcmp(key, "architectures"))
        return df_error(DF_EUNSUPPORTED, "%s.%s: cannot be overridden (it picks the model class, which "
                        "transformers takes from config.json too)", who, key);
    const bool phi3 = !strcmp(model_type, "phi3");
    const bool qwen2_moe = !strcmp(model_type, "qwen2_moe");
    if (!strcmp(key, "attention_bias") && (phi3 || !strcmp(model_type, "mistral") || !strcmp(model_type, "mixtral")))
        return df_error(DF_EUNSUPPORTED, "%s.attention_bias: a %s model has no attention biases "
                        "(transformers does not read the key)", who, model_type);
    if (!strcmp(key, "attention_bias") && qwen2_moe)
        return df_error(DF_EUNSUPPORTED, "%s.attention_bias: qwen2_moe names its q/k/v biases qkv_bias "
                        "(transformers does not read attention_bias)", who);
    if (LISTED(key, READ_KEYS) || (phi3 && LISTED(key, PHI3_KEYS)) ||
        (!strcmp(model_type, "gemma3_text") && LISTED(key, GEMMA3_KEYS)) ||
        (!strcmp(model_type, "gemma2") && LISTED(key, GEMMA2_KEYS)) ||
        ((!strcmp(model_type, "qwen3_moe") || qwen2_moe) && LISTED(key, MOE_KEYS)) ||
        (qwen2_moe && LISTED(key, QWEN2_MOE_KEYS)) ||
        (!strcmp(model_type, "olmoe") && LISTED(key, OLMOE_KEYS)) ||
        (!strcmp(model_type, "mixtral") && LISTED(key, MIXTRAL_KEYS)))
        return DF_OK;
    /* the critic's head dropout: verl sets it to 0 itself; 0 is what distflow computes */
    if (!strcmp(key, "classifier_dropout")) {
        if (json_is_number(v) && json_number_value(v) == 0.0)
            return DF_OK;
        return df_error(DF_EUNSUPPORTED, "%s.%s: only 0 is supported (distflow has no dropout), got %s",
                        who, key, json_is_number(v) ? "a non-zero value" : df_cfg_type_name(v));
    }
    if (!strcmp(key, "use_cache")) { /* no effect here as in verl's training: the rollout keeps a KV cache */
        if (json_is_boolean(v))
            return DF_OK;
        return df_error(DF_EINVAL, "%s.use_cache: must be a boolean, got %s", who, df_cfg_type_name(v));
    }
    return df_error(DF_EUNSUPPORTED, "%s.%s: distflow does not read \"%s\" from config.json, so overriding "
                    "it would change nothing (docs/models.md lists the keys it reads)", who, key, key);
}

static int merge(json_t *root, json_t *ov, const char *source, const char *who)
{
    json_t *mt = json_object_get(root, "model_type");
    const char *model_type = json_is_string(mt) ? json_string_value(mt) : "";
    const char *key;
    json_t *v;
    json_object_foreach(ov, key, v) {
        int rc = check_key(key, v, model_type, who);
        if (rc)
            return df_error_wrap(rc, "%s", source);
    }
    /* an object merges into an object (rope_scaling: {factor: 4} changes one entry); else replaced */
    return json_object_update_recursive(root, ov) ? df_error(DF_ENOMEM, "out of memory") : DF_OK;
}

static bool no_overrides(const df_config_overrides *ov)
{
    if (!ov || !ov->json)
        return true;
    const char *s = ov->json;
    while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')
        s++;
    if (*s++ != '{')
        return false;
    while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')
        s++;
    return *s == '}';
}

int df_model_config_merge(const char *config_json, const char *source, const df_config_overrides *ov,
                          char **merged)
{
    *merged = NULL;
    const char *src = source ? source : "config.json";
    if (no_overrides(ov)) {
        *merged = strdup(config_json);
        return *merged ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    }
    const char *who = ov->who ? ov->who : "override_config";
    json_error_t jerr;
    json_t *o = json_loads(ov->json, JSON_REJECT_DUPLICATES, &jerr);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        return df_error(DF_EINVAL, "%s: not a JSON object%s%s", who, o ? "" : ": ", o ? "" : jerr.text);
    }
    json_t *root = json_loads(config_json, JSON_REJECT_DUPLICATES, &jerr);
    int rc = DF_OK;
    if (!root)
        rc = df_error(DF_EINVAL, "%s: invalid JSON: %s (line %d, column %d)", src, jerr.text, jerr.line,
                      jerr.column);
    else if (!json_is_object(root))
        rc = df_error(DF_EINVAL, "%s: not a JSON object", src);
    if (!rc)
        rc = merge(root, o, src, who);
    if (!rc && !(*merged = json_dumps(root, JSON_INDENT(2))))
        rc = df_error(DF_ENOMEM, "out of memory");
    json_decref(root);
    json_decref(o);
    return rc;
}

/* "<source> with <who>": where a value in the merged text came from, for the parser's errors. */
static char *merged_source(const char *source, const df_config_overrides *ov)
{
    const char *who = no_overrides(ov) ? NULL : ov->who ? ov->who : "override_config";
    size_t n = strlen(source) + (who ? strlen(who) + 6 : 0) + 1;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s%s%s", source, who ? " with " : "", who ? who : "");
    return s;
}

int df_model_config_text_ex(const char *path, const df_config_overrides *ov, df_model_config *cfg,
                            char **text)
{
    char *file = NULL, *merged = NULL, *src = NULL;
    int rc = df_read_file(path, &file, NULL);
    if (!rc)
        rc = df_model_config_merge(file, path, ov, &merged);
    if (!rc && !(src = merged_source(path, ov)))
        rc = df_error(DF_ENOMEM, "out of memory");
    if (!rc)
        rc = df_model_config_parse(merged, src, cfg);
    free(file);
    free(src);
    if (!rc && text)
        *text = merged;
    else
        free(merged);
    return rc;
}

int df_model_config_load_ex(const char *path, const df_config_overrides *ov, df_model_config *cfg)
{
    return df_model_config_text_ex(path, ov, cfg, NULL);
}

int df_model_config_load(const char *path, df_model_config *cfg)
{
    return df_model_config_text_ex(path, NULL, cfg, NULL);
}
