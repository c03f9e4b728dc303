/*
 * Hugging Face config.json for Qwen2 / Qwen3 / Llama / Mistral / Phi-3 / OLMo 2: parse (with
 * the defaults of transformers' config classes) and write back (keeping unknown keys). The RoPE and sliding-window keys are config_pos.c's.
 */
#include "distflow/model.h"
#include "model/hf_io.h"
#include "model/strutil.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *df_cfg_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* A key's value, treating null as absent (HF writes null for "use the default"). */
json_t *df_cfg_get(json_t *root, const char *key)
{
    json_t *v = json_object_get(root, key);
    return json_is_null(v) ? NULL : v;
}

int df_cfg_wrong_type(const char *src, const char *key, const char *want, const json_t *v)
{
    return df_error(DF_EINVAL, "%s: key \"%s\" must be %s, got %s", src, key, want, df_cfg_type_name(v));
}

int df_cfg_get_int(json_t *root, const char *src, const char *key, bool required, int64_t *out)
{
    json_t *v = df_cfg_get(root, key);
    if (!v)
        return required ? df_error(DF_EINVAL, "%s: missing required key \"%s\"", src, key) : DF_OK;
    if (!json_is_integer(v))
        return df_cfg_wrong_type(src, key, "an integer", v);
    *out = (int64_t)json_integer_value(v);
    return DF_OK;
}

int df_cfg_get_num(json_t *root, const char *src, const char *key, double *out)
{
    json_t *v = df_cfg_get(root, key);
    if (!v)
        return DF_OK;
    if (!json_is_number(v))
        return df_cfg_wrong_type(src, key, "a number", v);
    *out = json_number_value(v);
    return DF_OK;
}

int df_cfg_get_bool(json_t *root, const char *src, const char *key, bool *out)
{
    json_t *v = df_cfg_get(root, key);
    if (!v)
        return DF_OK;
    if (!json_is_boolean(v))
        return df_cfg_wrong_type(src, key, "a boolean", v);
    *out = json_is_true(v);
    return DF_OK;
}

static int get_token_ids(json_t *root, const char *src, df_model_config *c)
{
    json_t *b = json_object_get(root, "bos_token_id");
    if (b && json_is_null(b)) {
        c->bos_token_id = -1;
    } else if (b) {
        if (!json_is_integer(b) || json_integer_value(b) < 0)
            return df_error(DF_EINVAL, "%s: key \"bos_token_id\" must be a non-negative integer "
                            "or null, got %s", src, df_cfg_type_name(b));
        c->bos_token_id = (int64_t)json_integer_value(b);
    }
    json_t *e = json_object_get(root, "eos_token_id");
    if (!e)
        return DF_OK;
    c->n_eos = 0;
    if (json_is_null(e))
        return DF_OK;
    size_t n = json_is_array(e) ? json_array_size(e) : 1;
    if (n > DF_MAX_EOS)
        return df_error(DF_EUNSUPPORTED, "%s: key \"eos_token_id\" lists %zu ids (at most %d)", src,
                        n, DF_MAX_EOS);
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_is_array(e) ? json_array_get(e, i) : e;
        if (!json_is_integer(x) || json_integer_value(x) < 0)
            return df_error(DF_EINVAL, "%s: key \"eos_token_id\" must be a non-negative integer "
                            "or a list of them, got %s", src, df_cfg_type_name(x));
        c->eos_token_ids[c->n_eos++] = (int64_t)json_integer_value(x);
    }
    return DF_OK;
}

static int parse_dtype(json_t *root, const char *src, df_model_config *c)
{
    /* transformers >= 4.56 writes "dtype"; older versions "torch_dtype". */
    const char *key = df_cfg_get(root, "torch_dtype") ? "torch_dtype" : "dtype";
    json_t *v = df_cfg_get(root, key);
    if (!v)
        return DF_OK;
    if (!json_is_string(v))
        return df_cfg_wrong_type(src, key, "a string", v);
    const char *s = json_string_value(v);
    if (!strcmp(s, "float32"))
        c->torch_dtype = DF_DTYPE_F32;
    else if (!strcmp(s, "bfloat16"))
        c->torch_dtype = DF_DTYPE_BF16;
    else if (!strcmp(s, "float16"))
        c->torch_dtype = DF_DTYPE_F16;
    else
        return df_error(DF_EUNSUPPORTED, "%s: key \"%s\": \"%s\" is not supported (float32, "
                        "bfloat16, float16)", src, key, s);
    return DF_OK;
}

/* A dropout probability other than 0: the engine has none (it computes what HF does with 0). */
static int check_dropout(json_t *root, const char *src, const char *key)
{
    json_t *v = df_cfg_get(root, key);
    if (v && !json_is_number(v))
        return df_cfg_wrong_type(src, key, "a number", v);
    if (v && json_number_value(v) != 0.0)
        return df_error(DF_EUNSUPPORTED, "%s: key \"%s\" %g is not supported: distflow has no dropout (set "
                        "<model>.override_config.%s=0.0 to train without it)", src, key, json_number_value(v), key);
    return DF_OK;
}

/*
 * partial_rotary_factor f: RoPE on the first int(head_dim * f) dims of each head (Phi-4-mini:
 * 0.75 of 128), as HF's Phi3 rotary embedding sizes its frequencies and Phi3Attention slices q
 * and k. The other families' attention rotates whole heads (HF would fail on their shapes), so
 * only 1 is accepted there. An odd or empty rotated part fails in HF too: refused here.
 */
static int parse_partial_rotary(json_t *root, const char *src, df_model_config *c)
{
    json_t *v = df_cfg_get(root, "partial_rotary_factor");
    if (!v)
        return DF_OK;
    if (!json_is_number(v))
        return df_cfg_wrong_type(src, "partial_rotary_factor", "a number", v);
    double f = json_number_value(v);
    if (f != 1.0 && strcmp(c->model_type, "phi3"))
        return df_error(DF_EUNSUPPORTED, "%s: key \"partial_rotary_factor\" %g is not supported for %s (its "
                        "attention rotates whole heads: 1.0)", src, f, c->model_type);
    int64_t rd = f > 0 && f <= 1 ? (int64_t)((double)c->head_dim * f) : 0;
    if (rd < 2 || rd % 2)
        return df_error(DF_EINVAL, "%s: key \"partial_rotary_factor\" %g must be in (0, 1] and give an even "
                        "number >= 2 of rotated dims (int(head_dim %lld * factor) = %lld)", src, f,
                        (long long)c->head_dim, (long long)rd);
    c->rope_dim = rd == c->head_dim ? 0 : rd; /* 0: the whole head, as without the key */
    return DF_OK;
}

/* A key that must be absent or null (a Gemma 2 feature Gemma3TextConfig still carries). */
static int check_null(json_t *root, const char *src, const char *key, const char *why)
{
    json_t *v = df_cfg_get(root, key);
    if (!v)
        return DF_OK;
    if (json_is_number(v))
        return df_error(DF_EUNSUPPORTED, "%s: key \"%s\" %g is not supported (%s; null)", src, key,
                        json_number_value(v), why);
    return df_error(DF_EUNSUPPORTED, "%s: key \"%s\" must be null (%s), got %s", src, key, why,
                    df_cfg_type_name(v));
}

/* The keys Gemma 2 and Gemma 3 share: use_bidirectional_attention (refused unless false / null),
   hidden_activation (gelu_pytorch_tanh only; their MLPs do not read hidden_act, so neither does
   distflow) and query_pre_attn_scalar (default 256, > 0). */
static int check_gemma_layer(json_t *root, const char *src, df_model_config *c)
{
    json_t *bi = df_cfg_get(root, "use_bidirectional_attention");
    if (bi && !json_is_false(bi))
        return df_error(DF_EUNSUPPORTED, "%s: key \"use_bidirectional_attention\" must be false or null "
                        "(distflow's decoders are causal), got %s", src,
                        json_is_true(bi) ? "true" : json_is_string(bi) ? json_string_value(bi) : df_cfg_type_name(bi));
    json_t *act = df_cfg_get(root, "hidden_activation");
    if (act && !json_is_string(act))
        return df_cfg_wrong_type(src, "hidden_activation", "a string", act);
    if (act && strcmp(json_string_value(act), "gelu_pytorch_tanh"))
        return df_error(DF_EUNSUPPORTED, "%s: key \"hidden_activation\": \"%s\" is not supported "
                        "(gelu_pytorch_tanh)", src, json_string_value(act));
    c->query_pre_attn_scalar = 256;
    int rc = df_cfg_get_num(root, src, "query_pre_attn_scalar", &c->query_pre_attn_scalar);
    if (!rc && !(c->query_pre_attn_scalar > 0 && isfinite(c->query_pre_attn_scalar)))
        return df_error(DF_EINVAL, "%s: key \"query_pre_attn_scalar\" must be > 0 (got %g)", src,
                        c->query_pre_attn_scalar);
    return rc;
}

/* Gemma3TextConfig's keys: the soft-caps, which Gemma 3 does not use (refused unless null), those
   shared with Gemma 2 (check_gemma_layer) and rope_local_base_freq (default 10000, > 0). */
static int check_gemma3(json_t *root, const char *src, df_model_config *c)
{
    int rc = check_null(root, src, "final_logit_softcapping", "tanh soft-capping of the logits");
    if (!rc)
        rc = check_null(root, src, "attn_logit_softcapping", "tanh soft-capping of the attention scores");
    if (!rc)
        rc = check_gemma_layer(root, src, c);
    c->rope_local_theta = 10000.0;
    if (!rc)
        rc = df_cfg_get_num(root, src, "rope_local_base_freq", &c->rope_local_theta);
    if (!rc && !(c->rope_local_theta > 0 && isfinite(c->rope_local_theta)))
        return df_error(DF_EINVAL, "%s: key \"rope_local_base_freq\" must be > 0 (got %g)", src,
                        c->rope_local_theta);
    return rc;
}

/* ---- gemma2 (Gemma2Config) ---- */

/* A Gemma 2 soft-cap: absent: the default; null: none (0); else a number > 0. */
static int get_softcap(json_t *root, const char *src, const char *key, double dflt, double *out)
{
    json_t *v = json_object_get(root, key); /* not df_cfg_get: null here means none, not the default */
    *out = !v ? dflt : 0.0;
    if (!v || json_is_null(v))
        return DF_OK;
    if (!json_is_number(v))
        return df_cfg_wrong_type(src, key, "a number or null", v);
    *out = json_number_value(v);
    if (!(*out > 0 && isfinite(*out)))
        return df_error(DF_EINVAL, "%s: key \"%s\" must be > 0 or null (got %g)", src, key, *out);
    return DF_OK;
}

/* Gemma2Config's keys beyond Qwen2Config's: the soft-caps (attn 50, final 30) and those shared
   with Gemma 3 (check_gemma_layer). */
static int check_gemma2(json_t *root, const char *src, df_model_config *c)
{
    int rc = get_softcap(root, src, "attn_logit_softcapping", 50.0, &c->attn_logit_softcap);
    if (!rc)
        rc = get_softcap(root, src, "final_logit_softcapping", 30.0, &c->final_logit_softcap);
    if (!rc)
        rc = check_gemma_layer(root, src, c);
    return rc;
}

/* Gemma2Config defaults where they differ from Qwen2Config, and its layer: Gemma 3's sandwich
   layer without q/k norms, one RoPE (rope_theta 10000) for every layer. */
static void gemma2_defaults(df_model_config *c)
{
    c->vocab_size = 256000;
    c->intermediate_size = 9216;
    c->num_key_value_heads = 4;
    c->max_position_embeddings = 8192;
    c->rope_theta = 10000.0;
    c->rms_norm_eps = 1e-6;
    c->attention_bias = false;
    c->tie_word_embeddings = true;
    c->bos_token_id = 2;
    c->eos_token_ids[0] = 1;
    c->n_eos = 1;
    c->post_norm = c->sandwich_norm = c->norm_plus_one = c->embed_scale = c->geglu = true;
}

/* Keys whose non-default values select features this engine does not have. */
static int check_unsupported(json_t *root, const char *src, bool phi3, bool gemma3)
{
    bool b = false;
    int rc = check_dropout(root, src, "attention_dropout");
    if (!rc && phi3) /* Phi3DecoderLayer's residual dropout, Phi3Model's embedding dropout */
        rc = check_dropout(root, src, "resid_pdrop");
    if (!rc && phi3)
        rc = check_dropout(root, src, "embd_pdrop");
    if (rc)
        return rc;
    if ((rc = df_cfg_get_bool(root, src, "mlp_bias", &b)))
        return rc;
    if (b)
        return df_error(DF_EUNSUPPORTED, "%s: key \"mlp_bias\" true is not supported", src);
    json_t *act = gemma3 ? NULL : df_cfg_get(root, "hidden_act");
    if (act && !json_is_string(act))
        return df_cfg_wrong_type(src, "hidden_act", "a string", act);
    if (act && strcmp(json_string_value(act), "silu"))
        return df_error(DF_EUNSUPPORTED, "%s: key \"hidden_act\": \"%s\" is not supported (silu)",
                        src, json_string_value(act));
    return DF_OK;
}

/*
 * The head: *ForCausalLM (or no architectures) is a causal LM, num_labels 0;
 * *ForTokenClassification a value model and *ForSequenceClassification a reward
 * model (the same head, read at a sequence's last token), whose label count follows
 * PretrainedConfig: len(id2label), else "num_labels", else 2. Only 1 is supported.
 */
static const char *const head_suffix[] = {NULL, "ForCausalLM", "ForTokenClassification",
                                          "ForSequenceClassification"};

static int parse_head(json_t *root, const char *src, df_model_config *c)
{
    json_t *arch = df_cfg_get(root, "architectures");
    if (arch && !json_is_array(arch))
        return df_cfg_wrong_type(src, "architectures", "a list of strings", arch);
    int kind = 0; /* an index of head_suffix */
    for (size_t i = 0; arch && i < json_array_size(arch); i++) {
        json_t *a = json_array_get(arch, i);
        if (!json_is_string(a))
            return df_cfg_wrong_type(src, "architectures", "a list of strings", a);
        const char *s = json_string_value(a);
        int k = 3;
        while (k > 0 && !df_ends_with(s, head_suffix[k]))
            k--;
        if (!k)
            return df_error(DF_EUNSUPPORTED, "%s: key \"architectures\": \"%s\" is not supported "
                            "(a *ForCausalLM, *ForTokenClassification or *ForSequenceClassification "
                            "model is needed)", src, s);
        if (kind && k != kind)
            return df_error(DF_EUNSUPPORTED, "%s: key \"architectures\" mixes *%s and *%s", src,
                            head_suffix[kind], head_suffix[k]);
        kind = k;
    }
    c->num_labels = 0;
    c->seq_cls = kind == 3;
    if (kind < 2)
        return DF_OK;
    const char *key = "id2label";
    json_t *labels = df_cfg_get(root, key);
    if (labels && !json_is_object(labels))
        return df_cfg_wrong_type(src, key, "an object", labels);
    int64_t n = 2;
    if (labels) {
        n = (int64_t)json_object_size(labels);
    } else {
        key = "num_labels";
        int rc = df_cfg_get_int(root, src, key, false, &n);
        if (rc)
            return rc;
    }
    if (n != 1)
        return df_error(DF_EUNSUPPORTED, "%s: key \"%s\" gives %lld labels%s; a *%s model is "
                        "supported only with one label (%s)", src, key, (long long)n,
                        df_cfg_get(root, key) ? "" : " (the default)", head_suffix[kind],
                        kind == 2 ? "a value model" : "a reward model's scalar score, as verl loads it");
    c->num_labels = 1;
    return DF_OK;
}

static int parse_root(json_t *root, const char *src, df_model_config *c)
{
    if (!json_is_object(root))
        return df_error(DF_EINVAL, "%s: config is not a JSON object", src);
    json_t *mt = df_cfg_get(root, "model_type");
    if (!mt)
        return df_error(DF_EINVAL, "%s: missing required key \"model_type\"", src);
    if (!json_is_string(mt))
        return df_cfg_wrong_type(src, "model_type", "a string", mt);
    const char *type = json_string_value(mt);
    bool llama = !strcmp(type, "llama"), qwen3 = !strcmp(type, "qwen3"), mistral = !strcmp(type, "mistral");
    bool phi3 = !strcmp(type, "phi3"), olmo2 = !strcmp(type, "olmo2"), gemma3 = !strcmp(type, "gemma3_text");
    bool gemma2 = !strcmp(type, "gemma2"), moe = !strcmp(type, "qwen3_moe"), mixtral = !strcmp(type, "mixtral");
    const bool qwen2_moe = !strcmp(type, "qwen2_moe"), olmoe = !strcmp(type, "olmoe");
    if (!strcmp(type, "gemma3")) /* Gemma3Config: the multimodal model, its text_config inside */
        return df_error(DF_EUNSUPPORTED, "%s: key \"model_type\": \"gemma3\" (Gemma3ForConditionalGeneration, "
                        "text and vision) is not supported; only the text model, model_type \"gemma3_text\" "
                        "(Gemma3ForCausalLM: gemma-3-1b, or a text-only export), is", src);
    if (!llama && !qwen3 && !moe && !qwen2_moe && !mistral && !mixtral && !phi3 && !olmo2 && !olmoe && !gemma3 &&
        !gemma2 && strcmp(type, "qwen2"))
        return df_error(DF_EUNSUPPORTED, "%s: key \"model_type\": \"%s\" is not supported (qwen2, qwen2_moe, "
                        "qwen3, qwen3_moe, llama, mistral, mixtral, phi3, olmo2, olmoe, gemma2, gemma3_text)", src, type);
    df_model_config_defaults(c);
    snprintf(c->model_type, sizeof c->model_type, "%s", type);
    if (llama) { /* LlamaConfig defaults where they differ from Qwen2Config */
        c->vocab_size = 32000;
        c->intermediate_size = 11008;
        c->max_position_embeddings = 2048;
        c->attention_bias = false;
        c->bos_token_id = 1;
        c->eos_token_ids[0] = 2;
        c->n_eos = 1;
    }
    if (qwen3) { /* Qwen3Config: no biases by default, q/k norms always */
        c->attention_bias = false;
        c->qk_norm = true;
    }
    if (mistral) { /* MistralConfig defaults where they differ from Qwen2Config */
        c->vocab_size = 32000;
        c->intermediate_size = 14336;
        c->num_key_value_heads = 8;
        c->max_position_embeddings = 4096 * 32;
        c->attention_bias = false;
        c->bos_token_id = 1;
        c->eos_token_ids[0] = 2;
        c->n_eos = 1;
    }
    if (phi3) { /* Phi3Config defaults where they differ from Qwen2Config */
        c->vocab_size = 32064;
        c->intermediate_size = 8192;
        c->max_position_embeddings = 4096;
        c->rms_norm_eps = 1e-5;
        c->rope_theta = 10000.0;
        c->attention_bias = false;
        c->bos_token_id = 1;
        c->eos_token_ids[0] = 32000;
        c->n_eos = 1;
    }
    if (olmo2) { /* Olmo2Config defaults where they differ from Qwen2Config; its layer's structure */
        c->vocab_size = 50304;
        c->intermediate_size = 11008;
        c->max_position_embeddings = 2048;
        c->rms_norm_eps = 1e-5;
        c->attention_bias = false;
        c->eos_token_ids[0] = 50279;
        c->n_eos = 1;
        c->qk_norm = c->qk_norm_full = c->post_norm = true;
    }
    if (gemma3) { /* Gemma3TextConfig defaults where they differ from Qwen2Config; its layer */
        c->vocab_size = 262208;
        c->intermediate_size = 9216;
        c->num_key_value_heads = 4;
        c->max_position_embeddings = 131072;
        c->rope_theta = 1000000.0;
        c->attention_bias = false;
        c->tie_word_embeddings = true;
        c->bos_token_id = 2;
        c->eos_token_ids[0] = 1;
        c->n_eos = 1;
        c->qk_norm = c->post_norm = c->sandwich_norm = c->norm_plus_one = true;
        c->embed_scale = c->geglu = true;
    }
    if (gemma2)
        gemma2_defaults(c);
    if (moe)
        df_cfg_moe_defaults(c);
    if (mixtral)
        df_cfg_mixtral_defaults(c);
    if (qwen2_moe)
        df_cfg_qwen2_moe_defaults(c);
    if (olmoe)
        df_cfg_olmoe_defaults(c);
    int rc = check_unsupported(root, src, phi3, gemma3 || gemma2);
    if (!rc && gemma3)
        rc = check_gemma3(root, src, c);
    if (!rc && gemma2)
        rc = check_gemma2(root, src, c);
    if (!rc)
        rc = parse_head(root, src, c);
    /* The sizes that define the tensors have no sensible default: require them. */
    static const char *const required[] = {"vocab_size", "hidden_size", "intermediate_size",
                                           "num_hidden_layers", "num_attention_heads"};
    int64_t *req_dst[] = {&c->vocab_size, &c->hidden_size, &c->intermediate_size,
                          &c->num_hidden_layers, &c->num_attention_heads};
    for (int i = 0; i < 5 && !rc; i++)
        rc = df_cfg_get_int(root, src, required[i], true, req_dst[i]);
    if (!mistral && !mixtral && !gemma3 && !gemma2 && !moe && !qwen2_moe) /* Mistral / MixtralConfig's 8,
                                                               Gemma3TextConfig's / Gemma2Config's / Qwen3MoeConfig's 4,
                                                               Qwen2MoeConfig's 16; the others' the heads */
        c->num_key_value_heads = c->num_attention_heads;
    if (!rc)
        rc = df_cfg_get_int(root, src, "num_key_value_heads", false, &c->num_key_value_heads);
    if (!rc)
        rc = df_cfg_get_int(root, src, "max_position_embeddings", false, &c->max_position_embeddings);
    c->head_dim = qwen3 ? 128 : gemma3 || gemma2 ? 256 : 0; /* Qwen3Config's, Gemma3TextConfig's / Gemma2Config's; the others derive it */
    if (!rc)
        rc = df_cfg_get_int(root, src, "head_dim", false, &c->head_dim);
    if (!rc && c->head_dim == 0) {
        if (c->num_attention_heads <= 0 || c->hidden_size % c->num_attention_heads)
            return df_error(DF_EINVAL, "%s: hidden_size (%lld) is not divisible by "
                            "num_attention_heads (%lld) and no head_dim is given", src,
                            (long long)c->hidden_size, (long long)c->num_attention_heads);
        c->head_dim = c->hidden_size / c->num_attention_heads;
    }
    if (!rc)
        rc = parse_partial_rotary(root, src, c);
    if (!rc)
        rc = df_cfg_parse_rope(root, src, c);
    if (!rc)
        rc = df_cfg_parse_window(root, src, c);
    if (!rc && (moe || qwen2_moe))
        rc = df_cfg_parse_moe(root, src, c);
    if (!rc && (mixtral || olmoe))
        rc = df_cfg_parse_mixtral(root, src, c);
    if (!rc)
        rc = df_cfg_get_num(root, src, "rms_norm_eps", &c->rms_norm_eps);
    if (!rc)
        rc = df_cfg_get_num(root, src, "initializer_range", &c->initializer_range);
    if (!rc)
        rc = df_cfg_get_bool(root, src, "tie_word_embeddings", &c->tie_word_embeddings);
    /* Qwen2 always has q/k/v biases and no such key; we honour an explicit
     * "attention_bias": false there only so our own files round-trip (Qwen2MoeConfig's key is
     * qkv_bias, default true). LlamaAttention and
     * Qwen3Attention (and Olmo2Attention) give o_proj a bias too when it is set; MistralAttention
     * has no biases and no such key (transformers ignores one). */
    if (!rc && !mistral && !mixtral && !phi3)
        rc = df_cfg_get_bool(root, src, qwen2_moe ? "qkv_bias" : "attention_bias", &c->attention_bias);
    c->o_proj_bias = c->attention_bias && (llama || qwen3 || moe || olmo2 || olmoe || gemma3 || gemma2);
    if (!rc)
        rc = get_token_ids(root, src, c);
    if (!rc)
        rc = parse_dtype(root, src, c);
    if (rc)
        return rc;
    rc = df_model_config_validate(c);
    return rc ? df_error_wrap(rc, "%s", src) : DF_OK;
}

int df_model_config_parse(const char *json_text, const char *source, df_model_config *cfg)
{
    const char *src = source ? source : "config.json";
    json_error_t jerr;
    json_t *root = json_loads(json_text, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return df_error(DF_EINVAL, "%s: invalid JSON: %s (line %d, column %d)", src, jerr.text,
                        jerr.line, jerr.column);
    int rc = parse_root(root, src, cfg);
    json_decref(root);
    return rc;
}

/* ---- writing ------------------------------------------------------------------ */

/* An integral value as an integer (HF's files write 256, 10000), else a real. */
json_t *df_json_number(double v)
{
    return v == floor(v) && fabs(v) < 9e15 ? json_integer((json_int_t)v) : json_real(v);
}

const char *df_dtype_torch_name(df_dtype d)
{
    return d == DF_DTYPE_BF16 ? "bfloat16" : d == DF_DTYPE_F16 ? "float16" : "float32";
}

static json_t *eos_json(const df_model_config *c, bool as_list)
{
    if (c->n_eos == 1 && !as_list)
        return json_integer(c->eos_token_ids[0]);
    json_t *a = json_array();
    for (int i = 0; a && i < c->n_eos; i++)
        json_array_append_new(a, json_integer(c->eos_token_ids[i]));
    return a;
}

/* Defaults a fresh config.json carries, as transformers writes them. */
static int set_fresh_defaults(json_t *o, bool llama, bool gemma3, bool gemma2)
{
    if (gemma2) { /* Gemma2Config: hidden_activation (the soft-caps: df_model_config_to_json) */
        int bad = json_object_set_new(o, "hidden_activation", json_string("gelu_pytorch_tanh"));
        bad |= json_object_set_new(o, "use_cache", json_true());
        return bad | json_object_set_new(o, "attention_dropout", json_real(0.0));
    }
    if (gemma3) { /* Gemma3TextConfig: hidden_activation; no soft-capping */
        int bad = json_object_set_new(o, "hidden_activation", json_string("gelu_pytorch_tanh"));
        bad |= json_object_set_new(o, "final_logit_softcapping", json_null());
        bad |= json_object_set_new(o, "attn_logit_softcapping", json_null());
        bad |= json_object_set_new(o, "use_cache", json_true());
        return bad | json_object_set_new(o, "attention_dropout", json_real(0.0));
    }
    int bad = json_object_set_new(o, "hidden_act", json_string("silu"));
    bad |= json_object_set_new(o, "use_cache", json_true());
    bad |= json_object_set_new(o, "attention_dropout", json_real(0.0));
    if (llama) {
        bad |= json_object_set_new(o, "mlp_bias", json_false());
        bad |= json_object_set_new(o, "pretraining_tp", json_integer(1));
    }
    return bad;
}

/* partial_rotary_factor when the heads are rotated in part: the file's value when it still gives
   rope_dim, else rope_dim / head_dim, raised to the next double if HF's int(head_dim * f) would
   truncate it below rope_dim. */
static int write_partial_rotary(json_t *o, const df_model_config *c)
{
    const int64_t rd = df_model_rope_dim(c);
    json_t *v = json_object_get(o, "partial_rotary_factor");
    if (json_is_number(v) && (int64_t)((double)c->head_dim * json_number_value(v)) == rd)
        return 0;
    if (!v && rd == c->head_dim)
        return 0;
    double f = (double)rd / (double)c->head_dim;
    if ((int64_t)((double)c->head_dim * f) < rd)
        f = nextafter(f, 2.0);
    return json_object_set_new(o, "partial_rotary_factor", json_real(f));
}

/* The HF class prefix of a model_type. */
const char *df_model_class_prefix(const char *model_type)
{
    return !strcmp(model_type, "llama")     ? "Llama"
           : !strcmp(model_type, "qwen3")   ? "Qwen3"
           : !strcmp(model_type, "qwen3_moe") ? "Qwen3Moe"
           : !strcmp(model_type, "qwen2_moe") ? "Qwen2Moe"
           : !strcmp(model_type, "mistral") ? "Mistral"
           : !strcmp(model_type, "mixtral") ? "Mixtral"
           : !strcmp(model_type, "phi3")    ? "Phi3"
           : !strcmp(model_type, "olmo2")   ? "Olmo2"
           : !strcmp(model_type, "olmoe")   ? "Olmoe"
           : !strcmp(model_type, "gemma3_text") ? "Gemma3"
           : !strcmp(model_type, "gemma2") ? "Gemma2"
                                            : "Qwen2";
}

int df_model_config_to_json(const df_model_config *c, const char *original_json, char **out)
{
    *out = NULL;
    int rc = df_model_config_validate(c);
    if (rc)
        return rc;
    json_t *o;
    if (original_json) {
        json_error_t jerr;
        o = json_loads(original_json, 0, &jerr);
        if (!json_is_object(o)) {
            json_decref(o);
            return df_error(DF_EINVAL, "original config.json text is not a JSON object (%s)",
                            jerr.text);
        }
    } else if (!(o = json_object())) {
        return df_error(DF_ENOMEM, "out of memory writing config.json");
    }
    bool llama = !strcmp(c->model_type, "llama"), qwen2 = !strcmp(c->model_type, "qwen2");
    const bool qwen2_moe = !strcmp(c->model_type, "qwen2_moe");
    bool derived_hd = qwen2 || qwen2_moe || !strcmp(c->model_type, "olmo2") || !strcmp(c->model_type, "olmoe") ||
                      !strcmp(c->model_type, "qwen3_moe"); /* no head_dim default */
    bool unbiased = !strcmp(c->model_type, "mistral") || !strcmp(c->model_type, "phi3") ||
                    !strcmp(c->model_type, "mixtral"); /* no such key */
    char arch[64];
    int bad = 0;
    const bool gemma3 = !strcmp(c->model_type, "gemma3_text"), gemma2 = !strcmp(c->model_type, "gemma2");
    if (!original_json)
        bad |= set_fresh_defaults(o, llama, gemma3, gemma2);
    if (gemma2) /* the soft-caps, 0 as null (none) */
        bad |= json_object_set_new(o, "attn_logit_softcapping", c->attn_logit_softcap > 0
                                   ? df_json_number(c->attn_logit_softcap) : json_null()) |
               json_object_set_new(o, "final_logit_softcapping", c->final_logit_softcap > 0
                                   ? df_json_number(c->final_logit_softcap) : json_null());
    if (gemma3 || gemma2)
        bad |= json_object_set_new(o, "query_pre_attn_scalar", df_json_number(c->query_pre_attn_scalar));
    bad |= df_cfg_write_rope(o, c) | df_cfg_write_window(o, c, !original_json) | write_partial_rotary(o, c);
    if (c->num_experts > 0)
        bad |= df_cfg_write_moe(o, c, !original_json);
    if (c->num_labels > 0) {
        /* transformers' form of one label: {"0": "LABEL_0"} and its inverse. */
        snprintf(arch, sizeof arch, "%sForTokenClassification", df_model_class_prefix(c->model_type));
        bad |= json_object_set_new(o, "architectures", json_pack("[s]", arch));
        bad |= json_object_set_new(o, "id2label", json_pack("{s:s}", "0", "LABEL_0"));
        bad |= json_object_set_new(o, "label2id", json_pack("{s:i}", "LABEL_0", 0));
        /* as verl's critic: transformers would otherwise put a 0.1 dropout before `score` */
        bad |= json_object_set_new(o, "classifier_dropout", json_real(0.0));
        if (json_object_get(o, "num_labels"))
            bad |= json_object_set_new(o, "num_labels", json_integer(c->num_labels));
    } else {
        snprintf(arch, sizeof arch, "%sForCausalLM", df_model_class_prefix(c->model_type));
        bad |= json_object_set_new(o, "architectures", json_pack("[s]", arch));
    }
    bad |= json_object_set_new(o, "model_type", json_string(c->model_type));
    bad |= json_object_set_new(o, "vocab_size", json_integer(c->vocab_size));
    bad |= json_object_set_new(o, "hidden_size", json_integer(c->hidden_size));
    bad |= json_object_set_new(o, "intermediate_size", json_integer(c->intermediate_size));
    bad |= json_object_set_new(o, "num_hidden_layers", json_integer(c->num_hidden_layers));
    bad |= json_object_set_new(o, "num_attention_heads", json_integer(c->num_attention_heads));
    bad |= json_object_set_new(o, "num_key_value_heads", json_integer(c->num_key_value_heads));
    /* Qwen2Config and Olmo2Config have no head_dim: write it only when it is not the derived value. */
    if (!derived_hd || json_object_get(o, "head_dim") ||
        c->head_dim * c->num_attention_heads != c->hidden_size)
        bad |= json_object_set_new(o, "head_dim", json_integer(c->head_dim));
    bad |= json_object_set_new(o, "max_position_embeddings",
                               json_integer(c->max_position_embeddings));
    bad |= json_object_set_new(o, "rms_norm_eps", json_real(c->rms_norm_eps));
    bad |= json_object_set_new(o, "initializer_range", json_real(c->initializer_range));
    bad |= json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
    if (qwen2_moe) /* Qwen2MoeConfig's key for the q/k/v biases */
        bad |= json_object_set_new(o, "qkv_bias", json_boolean(c->attention_bias));
    else if ((!qwen2 && !unbiased) || (qwen2 && !c->attention_bias) || json_object_get(o, "attention_bias"))
        bad |= json_object_set_new(o, "attention_bias", json_boolean(c->attention_bias));
    if (c->bos_token_id >= 0)
        bad |= json_object_set_new(o, "bos_token_id", json_integer(c->bos_token_id));
    else if (json_object_get(o, "bos_token_id"))
        bad |= json_object_set_new(o, "bos_token_id", json_null());
    bool eos_list = json_is_array(json_object_get(o, "eos_token_id"));
    if (c->n_eos > 0)
        bad |= json_object_set_new(o, "eos_token_id", eos_json(c, eos_list));
    else if (json_object_get(o, "eos_token_id"))
        bad |= json_object_set_new(o, "eos_token_id", json_null());
    bad |= json_object_set_new(o, "torch_dtype", json_string(df_dtype_torch_name(c->torch_dtype)));
    if (json_object_get(o, "dtype"))
        bad |= json_object_set_new(o, "dtype", json_string(df_dtype_torch_name(c->torch_dtype)));
    if (!json_object_get(o, "transformers_version"))
        bad |= json_object_set_new(o, "transformers_version",
                                   json_string(DF_HF_TRANSFORMERS_VERSION));
    char *s = bad ? NULL : df_json_dumps_py(o);
    json_decref(o);
    if (!s)
        return df_error(DF_ENOMEM, "out of memory writing config.json");
    *out = s;
    return DF_OK;
}

int df_model_config_save(const df_model_config *cfg, const char *original_json, const char *path)
{
    char *text;
    int rc = df_model_config_to_json(cfg, original_json, &text);
    if (rc)
        return df_error_wrap(rc, "%s", path);
    rc = df_write_file_atomic(path, text, strlen(text));
    free(text);
    return rc;
}
