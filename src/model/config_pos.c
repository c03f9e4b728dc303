/*
 * The position-related keys of Hugging Face config.json (hf_io.h): RoPE (rope_theta,
 * rope_scaling, transformers 5's rope_parameters) and Qwen2 / Qwen3 sliding-window attention
 * (use_sliding_window, sliding_window, max_window_layers, layer_types), read and written back.
 */
#include "model/hf_io.h"
#include "model/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The llama3 entries of a rope_scaling / rope_parameters object `o` (named `key` in messages):
   all four are required, as HF's _validate_llama3_parameters requires them. */
static int parse_llama3(json_t *o, const char *src, const char *key, df_model_config *c)
{
    static const char *const nums[] = {"factor", "low_freq_factor", "high_freq_factor"};
    double *dst[] = {&c->rope_factor, &c->rope_low_freq_factor, &c->rope_high_freq_factor};
    char full[96];
    for (int i = 0; i < 3; i++) {
        json_t *v = df_cfg_get(o, nums[i]);
        snprintf(full, sizeof full, "%s.%s", key, nums[i]);
        if (!v)
            return df_error(DF_EINVAL, "%s: key \"%s\" (llama3) has no \"%s\"", src, key, nums[i]);
        if (!json_is_number(v))
            return df_cfg_wrong_type(src, full, "a number", v);
        *dst[i] = json_number_value(v);
    }
    const char *omp = "original_max_position_embeddings";
    snprintf(full, sizeof full, "%s.%s", key, omp);
    json_t *v = df_cfg_get(o, omp);
    if (!v)
        return df_error(DF_EINVAL, "%s: key \"%s\" (llama3) has no \"%s\"", src, key, omp);
    if (!json_is_integer(v))
        return df_cfg_wrong_type(src, full, "an integer", v);
    c->rope_original_max_pos = (int64_t)json_integer_value(v);
    c->rope_type = DF_ROPE_LLAMA3;
    return DF_OK;
}

/* Linear scaling (position interpolation, HF _compute_linear_scaling_rope_parameters): its factor,
   required; HF only warns below 1, so any number > 0 is taken. */
static int parse_linear(json_t *o, const char *src, const char *key, df_model_config *c)
{
    char full[96];
    snprintf(full, sizeof full, "%s.factor", key);
    json_t *v = df_cfg_get(o, "factor");
    if (!v)
        return df_error(DF_EINVAL, "%s: key \"%s\" (linear) has no \"factor\"", src, key);
    if (!json_is_number(v))
        return df_cfg_wrong_type(src, full, "a number", v);
    if (!(json_number_value(v) > 0) || !isfinite(json_number_value(v)))
        return df_error(DF_EINVAL, "%s: key \"%s\" must be > 0 (got %g)", src, full, json_number_value(v));
    c->rope_factor = json_number_value(v);
    c->rope_type = DF_ROPE_LINEAR;
    return DF_OK;
}

/* A longrope factor list: one finite number > 0 per rotated pair, rope_dim / 2 (HF's
   _validate_longrope_parameters). */
static int parse_factors(json_t *o, const char *src, const char *key, const char *name, double *out,
                         const df_model_config *c)
{
    json_t *a = json_object_get(o, name);
    const int64_t half = df_model_rope_dim(c) / 2;
    if (!json_is_array(a) || (int64_t)json_array_size(a) != half)
        return df_error(DF_EINVAL, "%s: key \"%s\" (longrope) must have \"%s\", a list of %lld numbers (the "
                        "rotated dims / 2: head_dim times partial_rotary_factor, halved)", src, key, name,
                        (long long)half);
    for (int64_t i = 0; i < half; i++) {
        json_t *v = json_array_get(a, (size_t)i);
        if (!json_is_number(v) || !(json_number_value(v) > 0) || !isfinite(json_number_value(v)))
            return df_error(DF_EINVAL, "%s: key \"%s\" (longrope): %s[%lld] must be a number > 0", src, key,
                            name, (long long)i);
        out[i] = json_number_value(v);
    }
    return DF_OK;
}

/* The paper's attention factor HF uses when none is given: sqrt(1 + ln s / ln original) for the
   extension s = max_position_embeddings / original_max_position_embeddings > 1, else 1. */
static double longrope_default_attention(const df_model_config *c)
{
    double s = (double)c->max_position_embeddings / (double)c->rope_original_max_pos;
    return s <= 1.0 ? 1.0 : sqrt(1.0 + log(s) / log((double)c->rope_original_max_pos));
}

/* Phi-3's LongRoPE (HF _compute_longrope_parameters): the factor lists, the context it was
   pretrained on (the object's original_max_position_embeddings, else the config's, else
   Phi3Config's default 4096) and the attention factor. phi3 only. */
static int parse_longrope(json_t *root, json_t *o, const char *src, const char *key, df_model_config *c)
{
    if (strcmp(c->model_type, "phi3"))
        return df_error(DF_EUNSUPPORTED, "%s: key \"%s\": longrope is supported for phi3 models only", src, key);
    if (df_model_rope_dim(c) / 2 > DF_MAX_ROPE_FREQS)
        return df_error(DF_EUNSUPPORTED, "%s: key \"%s\" (longrope): %lld rotated dims have more than %d "
                        "frequencies", src, key, (long long)df_model_rope_dim(c), DF_MAX_ROPE_FREQS);
    const char *omp = "original_max_position_embeddings";
    int rc = parse_factors(o, src, key, "short_factor", c->rope_short_factor, c);
    if (!rc)
        rc = parse_factors(o, src, key, "long_factor", c->rope_long_factor, c);
    c->rope_original_max_pos = 4096; /* Phi3Config.original_max_position_embeddings */
    if (!rc)
        rc = df_cfg_get_int(root, src, omp, false, &c->rope_original_max_pos);
    if (!rc)
        rc = df_cfg_get_int(o, src, omp, false, &c->rope_original_max_pos);
    if (!rc && c->rope_original_max_pos <= 1)
        return df_error(DF_EINVAL, "%s: %s must be > 1 with longrope (got %lld)", src, omp,
                        (long long)c->rope_original_max_pos);
    c->rope_attention_factor = longrope_default_attention(c);
    json_t *af = df_cfg_get(o, "attention_factor");
    if (!rc && af && (!json_is_number(af) || !(json_number_value(af) > 0)))
        return df_error(DF_EINVAL, "%s: key \"%s\" (longrope): attention_factor must be a number > 0", src, key);
    if (!rc && af)
        c->rope_attention_factor = json_number_value(af);
    if (!rc)
        c->rope_type = DF_ROPE_LONGROPE;
    return rc;
}

/* An optional number of a yarn object into *out (left as is when absent or null); `positive`: it
   must be > 0 (and finite), else any finite number. */
static int yarn_num(json_t *o, const char *src, const char *key, const char *name, bool positive, double *out)
{
    char full[96];
    snprintf(full, sizeof full, "%s.%s", key, name);
    json_t *v = df_cfg_get(o, name);
    if (!v)
        return DF_OK;
    if (!json_is_number(v))
        return df_cfg_wrong_type(src, full, "a number", v);
    double x = json_number_value(v);
    if (!isfinite(x) || (positive && !(x > 0)))
        return df_error(DF_EINVAL, "%s: key \"%s\" must be %s (got %g)", src, full,
                        positive ? "a number > 0" : "a finite number", x);
    *out = x;
    return DF_OK;
}

/* YaRN (HF _compute_yarn_parameters, transformers 4.56): factor required (> 0); beta_fast /
   beta_slow (HF `get(...) or 32` / `or 1`: absent, null or 0 give the default; else > 0, as
   math.log of a negative one raises); original_max_position_embeddings an integer > 0, else
   max_position_embeddings (`get(...) or max_position_embeddings`); attention_factor (> 0) or
   df_rope_yarn_attention of factor, mscale, mscale_all_dim; truncate a boolean (default true).
   The families whose HF rotary embedding takes it: qwen2, qwen3, llama, mistral, olmo2 (and their
   MoE variants). */
static int parse_yarn(json_t *o, const char *src, const char *key, df_model_config *c)
{
    static const char *const fams[] = {"qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "llama", "mistral", "mixtral",
                                       "olmo2", "olmoe"};
    bool ok = false;
    for (size_t i = 0; i < sizeof fams / sizeof fams[0]; i++)
        ok |= !strcmp(c->model_type, fams[i]);
    if (!ok)
        return df_error(DF_EUNSUPPORTED, "%s: key \"%s\": rope_type \"yarn\" is not supported for %s models "
                        "(qwen2, qwen2_moe, qwen3, qwen3_moe, llama, mistral, mixtral, olmo2 and olmoe only)", src, key,
                        c->model_type);
    if (!df_cfg_get(o, "factor"))
        return df_error(DF_EINVAL, "%s: key \"%s\" (yarn) has no \"factor\"", src, key);
    c->rope_factor = 0;
    c->rope_beta_fast = 32, c->rope_beta_slow = 1;
    c->rope_mscale = 0, c->rope_mscale_all_dim = 0;
    c->rope_truncate = true;
    int rc = yarn_num(o, src, key, "factor", true, &c->rope_factor);
    double bf = 0, bs = 0;
    if (!rc)
        rc = yarn_num(o, src, key, "beta_fast", false, &bf);
    if (!rc)
        rc = yarn_num(o, src, key, "beta_slow", false, &bs);
    if (!rc && (bf < 0 || bs < 0))
        return df_error(DF_EINVAL, "%s: key \"%s\" (yarn): beta_fast and beta_slow must be > 0 (got %g, %g)", src,
                        key, bf, bs);
    c->rope_beta_fast = bf != 0 ? bf : 32;
    c->rope_beta_slow = bs != 0 ? bs : 1;
    if (!rc)
        rc = yarn_num(o, src, key, "mscale", false, &c->rope_mscale);
    if (!rc)
        rc = yarn_num(o, src, key, "mscale_all_dim", false, &c->rope_mscale_all_dim);
    const char *omp = "original_max_position_embeddings";
    char full[96];
    snprintf(full, sizeof full, "%s.%s", key, omp);
    json_t *v = df_cfg_get(o, omp);
    if (!rc && v && !json_is_integer(v))
        return df_cfg_wrong_type(src, full, "an integer", v);
    if (!rc && v && json_integer_value(v) <= 0)
        return df_error(DF_EINVAL, "%s: key \"%s\" must be > 0 (got %lld)", src, full,
                        (long long)json_integer_value(v));
    c->rope_original_max_pos = v ? (int64_t)json_integer_value(v) : c->max_position_embeddings;
    json_t *tr = df_cfg_get(o, "truncate");
    snprintf(full, sizeof full, "%s.truncate", key);
    if (!rc && tr && !json_is_boolean(tr))
        return df_cfg_wrong_type(src, full, "a boolean", tr);
    if (tr)
        c->rope_truncate = json_is_true(tr);
    if (rc)
        return rc;
    c->rope_attention_factor = df_rope_yarn_attention(c);
    if ((rc = yarn_num(o, src, key, "attention_factor", true, &c->rope_attention_factor)))
        return rc;
    c->rope_type = DF_ROPE_YARN;
    return DF_OK;
}

/* One RoPE object: its type ("rope_type", or the older "type"), then that type's entries.
   `untyped_default`: a missing type means "default" (rope_parameters); else it is refused
   (HF's rotary embedding would look up a None type). */
static int parse_rope_obj(json_t *root, json_t *o, const char *src, const char *key, bool untyped_default,
                          df_model_config *c)
{
    if (!json_is_object(o))
        return df_cfg_wrong_type(src, key, "an object or null", o);
    if (json_object_get(o, "full_attention") || json_object_get(o, "sliding_attention"))
        return df_error(DF_EUNSUPPORTED,
                        "%s: key \"%s\": RoPE parameters per layer type are not "
                        "supported",
                        src, key);
    json_t *t = df_cfg_get(o, "rope_type");
    if (!t)
        t = df_cfg_get(o, "type");
    if (t && !json_is_string(t))
        return df_cfg_wrong_type(src, key, "an object whose rope_type is a string", t);
    const char *type = t ? json_string_value(t) : NULL;
    if (!type && !untyped_default)
        return df_error(DF_EUNSUPPORTED,
                        "%s: key \"%s\" names no rope_type (supported: "
                        "\"default\", \"llama3\", \"linear\", \"longrope\", \"yarn\")",
                        src, key);
    c->rope_type = DF_ROPE_DEFAULT;
    if (!type || !strcmp(type, "default"))
        return DF_OK;
    if (!strcmp(type, "llama3"))
        return parse_llama3(o, src, key, c);
    if (!strcmp(type, "linear"))
        return parse_linear(o, src, key, c);
    if (!strcmp(type, "longrope") || !strcmp(type, "su")) /* "su": its name in Phi-3's first configs */
        return parse_longrope(root, o, src, key, c);
    if (!strcmp(type, "yarn"))
        return parse_yarn(o, src, key, c);
    return df_error(DF_EUNSUPPORTED,
                    "%s: key \"%s\": rope_type \"%s\" is not supported (supported: "
                    "\"default\", \"llama3\", \"linear\", \"longrope\" (phi3), \"yarn\")",
                    src, key, type);
}

/* A theta inside a rope_parameters object `o` (named `key`) into *theta, when it has one. */
static int get_theta(json_t *o, const char *src, const char *key, double *theta)
{
    json_t *th = df_cfg_get(o, "rope_theta");
    char full[96];
    snprintf(full, sizeof full, "%s.rope_theta", key);
    if (th && !json_is_number(th))
        return df_cfg_wrong_type(src, full, "a number", th);
    if (th && !(json_number_value(th) > 0))
        return df_error(DF_EINVAL, "%s: key \"%s\" must be > 0 (got %g)", src, full, json_number_value(th));
    if (th)
        *theta = json_number_value(th);
    return DF_OK;
}

/* transformers 5's Gemma 3 rope_parameters, one object per layer type: full_attention (the
   model's RoPE, scaling allowed) and sliding_attention (plain RoPE; its theta is the local one). */
static int parse_rope_per_type(json_t *root, json_t *rp, const char *src, df_model_config *c)
{
    json_t *full = json_object_get(rp, "full_attention"), *sl = json_object_get(rp, "sliding_attention");
    if (!json_is_object(full) || !json_is_object(sl) || json_object_size(rp) != 2)
        return df_error(DF_EINVAL, "%s: key \"rope_parameters\" per layer type must hold exactly the objects "
                        "\"full_attention\" and \"sliding_attention\"", src);
    int rc = parse_rope_obj(root, full, src, "rope_parameters.full_attention", true, c);
    if (!rc)
        rc = get_theta(full, src, "rope_parameters.full_attention", &c->rope_theta);
    if (!rc)
        rc = get_theta(sl, src, "rope_parameters.sliding_attention", &c->rope_local_theta);
    json_t *t = df_cfg_get(sl, "rope_type");
    if (!rc && t && !(json_is_string(t) && !strcmp(json_string_value(t), "default")))
        return df_error(DF_EUNSUPPORTED, "%s: key \"rope_parameters.sliding_attention\": only plain RoPE "
                        "(rope_type \"default\") is supported on the sliding layers", src);
    return rc;
}

int df_cfg_parse_rope(json_t *root, const char *src, df_model_config *c)
{
    int rc = df_cfg_get_num(root, src, "rope_theta", &c->rope_theta);
    json_t *rs = df_cfg_get(root, "rope_scaling"), *rp = df_cfg_get(root, "rope_parameters");
    if (rc || (!rs && !rp))
        return rc;
    /* transformers 5 writes rope_parameters; a file carrying both must not disagree. */
    if (rs && rp && !json_equal(rs, rp))
        return df_error(DF_EUNSUPPORTED,
                        "%s: keys \"rope_scaling\" and \"rope_parameters\" are both "
                        "given and differ; keep one",
                        src);
    const bool per_type = json_is_object(rp) &&
                          (json_object_get(rp, "full_attention") || json_object_get(rp, "sliding_attention"));
    if (per_type && !strcmp(c->model_type, "gemma3_text"))
        return parse_rope_per_type(root, rp, src, c);
    if (rp) {
        rc = parse_rope_obj(root, rp, src, "rope_parameters", true, c);
        json_t *th = df_cfg_get(rp, "rope_theta");
        if (!rc && th && !json_is_number(th))
            return df_cfg_wrong_type(src, "rope_parameters.rope_theta", "a number", th);
        if (!rc && th)
            c->rope_theta = json_number_value(th);
        return rc;
    }
    return parse_rope_obj(root, rs, src, "rope_scaling", false, c);
}

/* Layers [0, first) full, then windowed except those set in c->full_layers: *first = the first
   sliding layer (L when none), bits for the full layers after it, from sliding[L]. */
static int set_layer_types(const bool *sliding, int64_t L, const char *src, const char *key, df_model_config *c,
                           int64_t *first)
{
    memset(c->full_layers, 0, sizeof c->full_layers);
    *first = L;
    for (int64_t i = 0; i < L; i++) {
        if (sliding[i] && *first == L)
            *first = i;
        if (sliding[i] || *first == L)
            continue;
        if (i >= DF_MAX_TYPED_LAYERS)
            return df_error(DF_EUNSUPPORTED, "%s: key \"%s\": full-attention layer %lld after a sliding one: at "
                            "most %d layers can be typed one by one", src, key, (long long)i, DF_MAX_TYPED_LAYERS);
        c->full_layers[i / 64] |= (uint64_t)1 << (i % 64);
    }
    return DF_OK;
}

/* layer_types: a list of num_hidden_layers "full_attention" / "sliding_attention" strings. */
static int parse_layer_types(json_t *lt, const char *src, df_model_config *c, int64_t *first)
{
    const int64_t L = c->num_hidden_layers;
    if (!json_is_array(lt) || (int64_t)json_array_size(lt) != L)
        return df_error(DF_EINVAL,
                        "%s: key \"layer_types\" must be a list of num_hidden_layers "
                        "(%lld) strings",
                        src, (long long)L);
    bool *sliding = malloc((size_t)(L > 0 ? L : 1) * sizeof *sliding);
    if (!sliding)
        return df_error(DF_ENOMEM, "%s: out of memory reading layer_types", src);
    int rc = DF_OK;
    for (size_t i = 0; !rc && i < json_array_size(lt); i++) {
        const char *s = json_string_value(json_array_get(lt, i));
        sliding[i] = s && !strcmp(s, "sliding_attention");
        if (!sliding[i] && !(s && !strcmp(s, "full_attention")))
            rc = df_error(DF_EUNSUPPORTED,
                          "%s: key \"layer_types\": entry %zu is not "
                          "\"full_attention\" or \"sliding_attention\"",
                          src, i);
    }
    if (!rc)
        rc = set_layer_types(sliding, L, src, "layer_types", c, first);
    free(sliding);
    return rc;
}

/* Gemma3TextConfig: sliding_window (default 4096; > 0) on the layers layer_types marks sliding,
   else on every layer but each sliding_window_pattern-th ((i + 1) % pattern == 0: full; default
   6, the older configs' key). */
static int parse_gemma3_window(json_t *root, const char *src, df_model_config *c)
{
    int64_t w = 4096, first = 0, pat = 6;
    /* gemma2 (Gemma2Config): no pattern key; layer i slides when (i + 1) % 2 != 0 (the even ones) */
    const bool gemma2 = !strcmp(c->model_type, "gemma2");
    pat = gemma2 ? 2 : pat;
    json_t *sw = json_object_get(root, "sliding_window");
    int rc = sw && json_is_null(sw) ? df_error(DF_EUNSUPPORTED, "%s: key \"sliding_window\" null: %s "
                                               "needs its window (an integer > 0)", src, c->model_type)
                                    : df_cfg_get_int(root, src, "sliding_window", false, &w);
    if (!rc && w <= 0)
        return df_error(DF_EINVAL, "%s: key \"sliding_window\" must be > 0 (got %lld)", src, (long long)w);
    if (rc)
        return rc;
    c->sliding_window = w;
    json_t *lt = df_cfg_get(root, "layer_types");
    if (lt)
        rc = parse_layer_types(lt, src, c, &first);
    else if (!gemma2 && !(rc = df_cfg_get_int(root, src, "sliding_window_pattern", false, &pat)) && pat <= 0)
        return df_error(DF_EINVAL, "%s: key \"sliding_window_pattern\" must be > 0 (got %lld)", src, (long long)pat);
    const int64_t L = c->num_hidden_layers;
    if (!rc && !lt) {
        bool *sliding = malloc((size_t)(L > 0 ? L : 1) * sizeof *sliding);
        if (!sliding)
            return df_error(DF_ENOMEM, "%s: out of memory reading sliding_window_pattern", src);
        for (int64_t i = 0; i < L; i++)
            sliding[i] = (i + 1) % pat != 0;
        rc = set_layer_types(sliding, L, src, "sliding_window_pattern", c, &first);
        free(sliding);
    }
    c->max_window_layers = first;
    return rc;
}

/* MistralConfig.sliding_window: an int (default 4096) or null; windowed attention on every
 * layer when set (modeling_mistral.py has no use_sliding_window / max_window_layers). Phi3Config's
 * is the same key with default None (`dflt` 0). */
static int parse_every_layer_window(json_t *root, const char *src, int64_t dflt, df_model_config *c)
{
    int64_t w = dflt;
    json_t *sw = json_object_get(root, "sliding_window");
    int rc;
    if (!sw || json_is_null(sw))
        w = sw ? 0 : dflt;
    else if ((rc = df_cfg_get_int(root, src, "sliding_window", false, &w)))
        return rc;
    else if (w <= 0)
        return df_error(DF_EINVAL, "%s: key \"sliding_window\" must be > 0 or null (got %lld)", src,
                        (long long)w);
    c->sliding_window = w;
    c->max_window_layers = 0;
    return DF_OK;
}

int df_cfg_parse_window(json_t *root, const char *src, df_model_config *c)
{
    bool use = false;
    int rc = df_cfg_get_bool(root, src, "use_sliding_window", &use);
    if (rc)
        return rc;
    if (!strcmp(c->model_type, "mistral")) /* MistralConfig: every layer, when set */
        return parse_every_layer_window(root, src, 4096, c);
    if (!strcmp(c->model_type, "phi3") || !strcmp(c->model_type, "mixtral")) /* Phi3Config, MixtralConfig:
                                                                                the same, no window by default */
        return parse_every_layer_window(root, src, 0, c);
    if (!strcmp(c->model_type, "gemma3_text") || !strcmp(c->model_type, "gemma2")) /* always windowed layers */
        return parse_gemma3_window(root, src, c);
    if (!strcmp(c->model_type, "llama") || !strcmp(c->model_type, "olmo2") || !strcmp(c->model_type, "olmoe")) {
        if (use)
            return df_error(DF_EUNSUPPORTED,
                            "%s: key \"use_sliding_window\" true: %s has no "
                            "sliding-window attention",
                            src, c->model_type);
        return DF_OK;
    }
    /* Qwen2MoeConfig's window layers are max_window_layers' upper ones in transformers < 4.53
       (like Qwen2's) and the even ones below it in later versions' layer_types: no published
       qwen2_moe model slides, so neither reading is guessed */
    if (use && !strcmp(c->model_type, "qwen2_moe"))
        return df_error(DF_EUNSUPPORTED, "%s: key \"use_sliding_window\" true is not supported for qwen2_moe "
                        "(transformers' versions disagree on which layers slide)", src);
    /* Qwen2Config: sliding_window = sliding_window if use_sliding_window else None (default
       4096; an explicit null is None, no window). */
    int64_t w = 4096;
    json_t *sw = json_object_get(root, "sliding_window");
    if (json_is_null(sw))
        w = 0;
    else if ((rc = df_cfg_get_int(root, src, "sliding_window", false, &w)))
        return rc;
    if ((rc = df_cfg_get_int(root, src, "max_window_layers", false, &c->max_window_layers)))
        return rc;
    if (use && sw && !json_is_null(sw) && w <= 0)
        return df_error(DF_EINVAL, "%s: key \"sliding_window\" must be > 0 (got %lld)", src, (long long)w);
    if (c->max_window_layers < 0)
        return df_error(DF_EINVAL, "%s: key \"max_window_layers\" must be >= 0 (got %lld)", src,
                        (long long)c->max_window_layers);
    c->sliding_window = use ? w : 0;
    json_t *lt = df_cfg_get(root, "layer_types");
    if (!lt)
        return DF_OK;
    int64_t first = 0;
    if ((rc = parse_layer_types(lt, src, c, &first)))
        return rc;
    if (c->sliding_window == 0) /* no window: every layer attends fully */
        memset(c->full_layers, 0, sizeof c->full_layers);
    if (first < c->num_hidden_layers && c->sliding_window == 0)
        return df_error(DF_EUNSUPPORTED,
                        "%s: key \"layer_types\" has sliding_attention layers but "
                        "there is no window (use_sliding_window false or sliding_window null)",
                        src);
    if (c->sliding_window > 0) /* HF reads the window's layers from layer_types */
        c->max_window_layers = first;
    return DF_OK;
}

/* ---- writing ------------------------------------------------------------------------------- */

/* A longrope object: its type where the file names one ("type" alone in Phi-3's files, which older
   transformers require to hold exactly type, short_factor and long_factor), the two lists; other
   entries (attention_factor, factor) stay as the file has them. */
static int write_longrope_obj(json_t *o, const df_model_config *c)
{
    const int64_t half = df_model_rope_dim(c) / 2;
    json_t *s = json_array(), *l = json_array();
    int bad = !s || !l;
    for (int64_t i = 0; !bad && i < half; i++) {
        bad |= json_array_append_new(s, json_real(c->rope_short_factor[i]));
        bad |= json_array_append_new(l, json_real(c->rope_long_factor[i]));
    }
    if (json_object_get(o, "rope_type"))
        bad |= json_object_set_new(o, "rope_type", json_string("longrope"));
    if (json_object_get(o, "type") || !json_object_get(o, "rope_type"))
        bad |= json_object_set_new(o, "type", json_string("longrope"));
    bad |= json_object_set_new(o, "short_factor", s);
    bad |= json_object_set_new(o, "long_factor", l);
    if (json_object_get(o, "attention_factor") || c->rope_attention_factor != longrope_default_attention(c))
        bad |= json_object_set_new(o, "attention_factor", json_real(c->rope_attention_factor));
    return bad;
}

/* A yarn object: its type (and "type" where the file has one), factor, original context (the
   effective one: HF's default is max_position_embeddings, so writing it changes nothing),
   beta_fast and beta_slow; truncate where the file has it or it is false; mscale / mscale_all_dim
   when set; attention_factor where the file has one or it is not the one they give
   (df_rope_yarn_attention), so that loading it back, here or in transformers, rotates alike.
   Another type's entries are dropped. */
static int write_yarn_obj(json_t *o, const df_model_config *c)
{
    static const char *const stale[] = {"low_freq_factor", "high_freq_factor", "short_factor", "long_factor"};
    for (int i = 0; i < 4; i++)
        json_object_del(o, stale[i]);
    int bad = json_object_set_new(o, "rope_type", json_string("yarn"));
    if (json_object_get(o, "type"))
        bad |= json_object_set_new(o, "type", json_string("yarn"));
    bad |= json_object_set_new(o, "factor", json_real(c->rope_factor));
    bad |= json_object_set_new(o, "original_max_position_embeddings", json_integer(c->rope_original_max_pos));
    bad |= json_object_set_new(o, "beta_fast", json_real(c->rope_beta_fast));
    bad |= json_object_set_new(o, "beta_slow", json_real(c->rope_beta_slow));
    if (json_object_get(o, "truncate") || !c->rope_truncate) /* a 4.55 key: written when it matters */
        bad |= json_object_set_new(o, "truncate", json_boolean(c->rope_truncate));
    const double *ms[] = {&c->rope_mscale, &c->rope_mscale_all_dim};
    const char *mk[] = {"mscale", "mscale_all_dim"};
    for (int i = 0; i < 2; i++) {
        if (*ms[i] != 0)
            bad |= json_object_set_new(o, mk[i], json_real(*ms[i]));
        else
            json_object_del(o, mk[i]);
    }
    if (json_object_get(o, "attention_factor") || c->rope_attention_factor != df_rope_yarn_attention(c))
        bad |= json_object_set_new(o, "attention_factor", json_real(c->rope_attention_factor));
    return bad;
}

/* The type and (llama3, linear) entries of a RoPE object, as HF writes them. */
static int write_rope_obj(json_t *o, const df_model_config *c)
{
    if (c->rope_type == DF_ROPE_LONGROPE)
        return write_longrope_obj(o, c);
    if (c->rope_type == DF_ROPE_YARN)
        return write_yarn_obj(o, c);
    static const char *const keys[] = {"factor", "low_freq_factor", "high_freq_factor",
                                       "original_max_position_embeddings"};
    bool llama3 = c->rope_type == DF_ROPE_LLAMA3, linear = c->rope_type == DF_ROPE_LINEAR;
    const char *type = llama3 ? "llama3" : linear ? "linear" : "default";
    int bad = json_object_set_new(o, "rope_type", json_string(type));
    if (json_object_get(o, "type"))
        bad |= json_object_set_new(o, "type", json_string(type));
    static const char *const yarn_keys[] = {"beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate",
                                            "attention_factor"};
    for (int i = 0; i < 6; i++) /* a yarn object turned into another type */
        json_object_del(o, yarn_keys[i]);
    if (!llama3) {
        for (int i = 0; i < 4; i++)
            json_object_del(o, keys[i]);
        if (linear)
            bad |= json_object_set_new(o, keys[0], json_real(c->rope_factor));
        return bad;
    }
    bad |= json_object_set_new(o, keys[0], json_real(c->rope_factor));
    bad |= json_object_set_new(o, keys[1], json_real(c->rope_low_freq_factor));
    bad |= json_object_set_new(o, keys[2], json_real(c->rope_high_freq_factor));
    bad |= json_object_set_new(o, keys[3], json_integer(c->rope_original_max_pos));
    return bad;
}

/* gemma3_text: the local RoPE's base, in the per-type rope_parameters when the file has them
   (then the model's RoPE goes into its full_attention object), else rope_local_base_freq. */
static int write_local_rope(json_t *o, const df_model_config *c, json_t **rp)
{
    json_t *full = json_is_object(*rp) ? json_object_get(*rp, "full_attention") : NULL;
    json_t *sl = json_is_object(*rp) ? json_object_get(*rp, "sliding_attention") : NULL;
    if (!json_is_object(full) || !json_is_object(sl))
        return json_object_set_new(o, "rope_local_base_freq", df_json_number(c->rope_local_theta));
    int bad = json_object_set_new(sl, "rope_type", json_string("default"));
    bad |= json_object_set_new(sl, "rope_theta", df_json_number(c->rope_local_theta));
    if (json_object_get(o, "rope_local_base_freq"))
        bad |= json_object_set_new(o, "rope_local_base_freq", df_json_number(c->rope_local_theta));
    bad |= write_rope_obj(full, c);
    bad |= json_object_set_new(full, "rope_theta", df_json_number(c->rope_theta));
    if (json_object_get(o, "rope_theta"))
        bad |= json_object_set_new(o, "rope_theta", df_json_number(c->rope_theta));
    *rp = NULL; /* written */
    return bad;
}

int df_cfg_write_rope(json_t *o, const df_model_config *c)
{
    json_t *rp = json_object_get(o, "rope_parameters"), *rs = json_object_get(o, "rope_scaling");
    int bad = 0;
    if (c->rope_local_theta > 0) {
        bad |= write_local_rope(o, c, &rp);
        if (!rp && json_is_object(json_object_get(o, "rope_parameters")))
            return bad;
    }
    if (c->rope_type == DF_ROPE_LONGROPE) /* Phi3Config keeps the pretraining context at the top */
        bad |= json_object_set_new(o, "original_max_position_embeddings", json_integer(c->rope_original_max_pos));
    if (json_is_object(rp)) { /* transformers 5: the theta lives there */
        bad |= write_rope_obj(rp, c);
        bad |= json_object_set_new(rp, "rope_theta", json_real(c->rope_theta));
        if (json_object_get(o, "rope_theta"))
            bad |= json_object_set_new(o, "rope_theta", json_real(c->rope_theta));
        if (json_is_object(rs))
            bad |= json_object_set(o, "rope_scaling", rp);
        return bad;
    }
    bad |= json_object_set_new(o, "rope_theta", json_real(c->rope_theta));
    if (json_is_object(rs))
        return bad | write_rope_obj(rs, c);
    if (c->rope_type == DF_ROPE_DEFAULT)
        return bad | json_object_set_new(o, "rope_scaling", json_null());
    json_t *n = json_object();
    bad |= !n || write_rope_obj(n, c);
    return bad | json_object_set_new(o, "rope_scaling", n);
}

/* layer_types as df_model_layer_sliding gives them. */
static int write_layer_types(json_t *o, const df_model_config *c)
{
    json_t *lt = json_array();
    int bad = !lt;
    for (int64_t l = 0; lt && l < c->num_hidden_layers; l++)
        bad |= json_array_append_new(
            lt, json_string(df_model_layer_sliding(c, l) ? "sliding_attention" : "full_attention"));
    return bad | json_object_set_new(o, "layer_types", lt);
}

int df_cfg_write_window(json_t *o, const df_model_config *c, bool fresh)
{
    if (!strcmp(c->model_type, "llama") || !strcmp(c->model_type, "olmo2") || !strcmp(c->model_type, "olmoe"))
        return 0;
    if (!strcmp(c->model_type, "gemma3_text") || !strcmp(c->model_type, "gemma2")) { /* layer_types (4.53+) */
        int bad = json_object_set_new(o, "sliding_window", json_integer(c->sliding_window));
        if (fresh || json_object_get(o, "layer_types"))
            bad |= write_layer_types(o, c);
        return bad;
    }
    if (!strcmp(c->model_type, "mistral") || !strcmp(c->model_type, "phi3") || !strcmp(c->model_type, "mixtral"))
        return json_object_set_new(o, "sliding_window",
                                   c->sliding_window > 0 ? json_integer(c->sliding_window) : json_null());
    const bool use = c->sliding_window > 0;
    int bad = json_object_set_new(o, "use_sliding_window", json_boolean(use));
    if (use)
        bad |= json_object_set_new(o, "sliding_window", json_integer(c->sliding_window));
    else if (fresh)
        bad |= json_object_set_new(o, "sliding_window", json_null());
    bad |= json_object_set_new(o, "max_window_layers", json_integer(c->max_window_layers));
    if (!json_object_get(o, "layer_types")) /* transformers < 4.53 writes none */
        return bad;
    return bad | write_layer_types(o, c);
}
