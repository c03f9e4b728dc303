/* Parameter layout, the single source of truth for tensor order (model.h). */
#include "distflow/model.h"
#include "distflow/rng.h"
#include "model/strutil.h"

#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void df_model_config_defaults(df_model_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->model_type, sizeof c->model_type, "qwen2");
    c->vocab_size = 151936;
    c->hidden_size = 4096;
    c->intermediate_size = 22016;
    c->num_hidden_layers = 32;
    c->num_attention_heads = 32;
    c->num_key_value_heads = 32;
    c->head_dim = 128; /* hidden_size / num_attention_heads; loaders derive it when absent */
    c->max_position_embeddings = 32768;
    c->rope_theta = 10000.0;
    c->rms_norm_eps = 1e-6;
    c->initializer_range = 0.02;
    c->tie_word_embeddings = false;
    c->attention_bias = true;
    c->rope_type = DF_ROPE_DEFAULT;
    c->rope_beta_fast = 32, c->rope_beta_slow = 1, c->rope_truncate = true; /* yarn's defaults */
    c->max_window_layers = 28;
    c->bos_token_id = -1;
    c->n_eos = 0;
    c->torch_dtype = DF_DTYPE_F32;
}

/* Floats of one tensor in the blob: numel rounded up to 16 (64-byte alignment). */
static int64_t padded(int64_t numel)
{
    return (numel + 15) / 16 * 16;
}

/* The sparse layers: qwen3_moe's, qwen2_moe's, mixtral's and olmoe's; k of E experts, each of a
   positive width. Every mixtral and olmoe layer is sparse, its experts intermediate_size wide (and
   mixtral's weights renormalised). A shared expert is qwen2_moe's, always there (of a positive
   width). */
static int validate_moe(const df_model_config *c, bool moe)
{
    const bool mixtral = !strcmp(c->model_type, "mixtral"), qwen2_moe = !strcmp(c->model_type, "qwen2_moe");
    const bool olmoe = !strcmp(c->model_type, "olmoe");
    bool dense = false;
    for (size_t i = 0; i < sizeof c->mlp_only_layers / sizeof c->mlp_only_layers[0]; i++)
        dense |= c->mlp_only_layers[i] != 0;
    if (c->num_experts < 0 || (c->num_experts > 0 && !moe && !mixtral && !olmoe))
        return df_error(DF_EINVAL, "%s: num_experts %lld must be >= 0, and experts are qwen3_moe's, qwen2_moe's, "
                        "mixtral's and olmoe's", c->model_type, (long long)c->num_experts);
    if (qwen2_moe ? c->shared_expert_intermediate_size <= 0 : c->shared_expert_intermediate_size != 0)
        return df_error(DF_EINVAL, "%s: shared_expert_intermediate_size %lld must be > 0 in qwen2_moe and 0 "
                        "elsewhere", c->model_type, (long long)c->shared_expert_intermediate_size);
    if ((mixtral || olmoe) && (c->num_experts < 1 || (mixtral && !c->norm_topk_prob) || c->decoder_sparse_step != 1 ||
                               dense || c->moe_intermediate_size != c->intermediate_size))
        return df_error(DF_EINVAL, "%s: every layer is a sparse one (num_experts %lld >= 1, %sno dense layers, "
                        "experts of intermediate_size)", c->model_type, (long long)c->num_experts,
                        mixtral ? "renormalised weights, " : "");
    if (c->num_experts > 0 && (c->num_experts_per_tok < 1 || c->num_experts_per_tok > c->num_experts ||
                               c->moe_intermediate_size <= 0 || c->decoder_sparse_step < 1))
        return df_error(DF_EINVAL, "%s needs 1 <= num_experts_per_tok <= num_experts, moe_intermediate_size "
                        "> 0 and decoder_sparse_step >= 1 (got %lld of %lld, %lld, %lld)", c->model_type,
                        (long long)c->num_experts_per_tok, (long long)c->num_experts,
                        (long long)c->moe_intermediate_size, (long long)c->decoder_sparse_step);
    return DF_OK;
}

/* The attention features each model_type has in Hugging Face: qwen2 and qwen2_moe q/k/v biases only; llama,
   qwen3 and olmo2 an o_proj bias exactly when they have q/k/v ones; mistral and phi3 no biases;
   q/k norms in qwen3 (per head) and olmo2 and olmoe (full width, olmoe with llama's pre-norm layer);
   the post-norm layer exactly in olmo2. */
static int validate_type(const df_model_config *c)
{
    const bool qwen2_moe = !strcmp(c->model_type, "qwen2_moe");
    bool qwen2 = !strcmp(c->model_type, "qwen2") || qwen2_moe, moe = !strcmp(c->model_type, "qwen3_moe");
    const bool qwen3 = !strcmp(c->model_type, "qwen3") || moe; /* Qwen3MoeAttention is Qwen3's */
    bool unbiased = !strcmp(c->model_type, "mistral") || !strcmp(c->model_type, "phi3") ||
                    !strcmp(c->model_type, "mixtral");
    bool olmo2 = !strcmp(c->model_type, "olmo2"), gemma3 = !strcmp(c->model_type, "gemma3_text");
    const bool gemma2 = !strcmp(c->model_type, "gemma2"), olmoe = !strcmp(c->model_type, "olmoe");
    if (!qwen2 && !qwen3 && !unbiased && !olmo2 && !olmoe && !gemma3 && !gemma2 && strcmp(c->model_type, "llama"))
        return df_error(DF_EUNSUPPORTED, "model_type \"%s\" is not supported (qwen2, qwen2_moe, qwen3, qwen3_moe, "
                        "llama, mistral, mixtral, phi3, olmo2, olmoe, gemma2, gemma3_text)", c->model_type);
    int rc = validate_moe(c, moe || qwen2_moe);
    if (rc)
        return rc;
    /* Gemma 2's soft-caps (0: none), its own */
    if (!(c->attn_logit_softcap >= 0 && isfinite(c->attn_logit_softcap)) ||
        !(c->final_logit_softcap >= 0 && isfinite(c->final_logit_softcap)) ||
        (!gemma2 && (c->attn_logit_softcap > 0 || c->final_logit_softcap > 0)))
        return df_error(DF_EINVAL, "%s: attn_logit_softcap %g and final_logit_softcap %g must be >= 0 and finite, "
                        "and are gemma2's", c->model_type, c->attn_logit_softcap, c->final_logit_softcap);
    if (gemma2 && (c->qk_norm || c->rope_local_theta > 0 || !c->sandwich_norm || !c->post_norm))
        return df_error(DF_EINVAL, "gemma2: its layer is the sandwich-norm one (post_norm, sandwich_norm) without "
                        "q/k norms or a local RoPE (set: %d %d %d %g)", c->post_norm, c->sandwich_norm, c->qk_norm,
                        c->rope_local_theta);
    gemma3 = gemma3 || gemma2; /* below, Gemma 2 shares Gemma 3's switches */
    if (unbiased && c->attention_bias)
        return df_error(DF_EINVAL, "%s has no attention biases (attention_bias set)", c->model_type);
    /* the parser sets all four for gemma3_text; only sandwich_norm shapes its layout, and code (the
       tests' variants) may switch the others off on a gemma3_text model */
    if (c->sandwich_norm != gemma3 || (!gemma3 && (c->norm_plus_one || c->embed_scale || c->geglu)))
        return df_error(DF_EINVAL, "%s: sandwich norms are %s; (1 + w) norms, the embedding scale and GeGLU "
                        "are gemma3_text's (set: %d %d %d)", c->model_type, c->sandwich_norm ? "set" : "not set",
                        c->norm_plus_one, c->embed_scale, c->geglu);
    if (c->query_pre_attn_scalar < 0 || !isfinite(c->query_pre_attn_scalar) || c->rope_local_theta < 0 ||
        !isfinite(c->rope_local_theta) || ((c->query_pre_attn_scalar > 0 || c->rope_local_theta > 0) && !gemma3) ||
        (gemma2 && c->rope_local_theta > 0))
        return df_error(DF_EINVAL, "%s: query_pre_attn_scalar %g and rope_local_theta %g must be >= 0 and "
                        "finite, and are gemma3_text's", c->model_type, c->query_pre_attn_scalar,
                        c->rope_local_theta);
    if (c->qk_norm != (qwen3 || olmo2 || olmoe || (gemma3 && !gemma2)) || c->qk_norm_full != (olmo2 || olmoe))
        return df_error(DF_EINVAL, "%s: q/k norms are %s (qwen3 has them per head, olmo2 and olmoe over the whole "
                        "projection, the others none)", c->model_type,
                        !c->qk_norm ? "not set" : c->qk_norm_full ? "set over the whole projection" : "set per head");
    if (c->post_norm != (olmo2 || gemma3))
        return df_error(DF_EINVAL, "%s: post-norm layers are %s (olmo2's layers normalise their sublayers' "
                        "outputs, gemma3_text's both, the others' their inputs)", c->model_type, c->post_norm ? "set" : "not set");
    /* OlmoeAttention's q_norm is hidden_size wide, whatever a head_dim key says */
    if (olmoe && c->head_dim * c->num_attention_heads != c->hidden_size)
        return df_error(DF_EINVAL, "olmoe: head_dim %lld x %lld heads must be hidden_size %lld (its q_norm is "
                        "hidden_size wide)", (long long)c->head_dim, (long long)c->num_attention_heads,
                        (long long)c->hidden_size);
    if (qwen2 ? c->o_proj_bias : c->o_proj_bias != c->attention_bias)
        return df_error(DF_EINVAL, "%s: an o_proj bias %s", c->model_type,
                        qwen2 ? "does not exist in qwen2 / qwen2_moe"
                              : "goes with the q/k/v biases (attention_bias) in llama, qwen3, olmo2 and gemma3_text");
    return DF_OK;
}

/* RoPE scaling and the sliding window. */
static int validate_positions(const df_model_config *c)
{
    if (c->rope_type == DF_ROPE_LLAMA3 &&
        (!(c->rope_factor > 0) || !(c->rope_low_freq_factor > 0) ||
         !(c->rope_high_freq_factor > c->rope_low_freq_factor) || c->rope_original_max_pos <= 0))
        return df_error(DF_EINVAL, "llama3 rope scaling needs factor > 0, 0 < low_freq_factor < "
                        "high_freq_factor and original_max_position_embeddings > 0 (got %g, %g, %g, %lld)",
                        c->rope_factor, c->rope_low_freq_factor, c->rope_high_freq_factor,
                        (long long)c->rope_original_max_pos);
    const int64_t rd = df_model_rope_dim(c);
    if (c->rope_type == DF_ROPE_LONGROPE) {
        bool ok = rd / 2 <= DF_MAX_ROPE_FREQS && c->rope_original_max_pos > 1 &&
                  c->rope_attention_factor > 0 && isfinite(c->rope_attention_factor);
        for (int64_t i = 0; ok && i < rd / 2; i++)
            ok = c->rope_short_factor[i] > 0 && c->rope_long_factor[i] > 0 && isfinite(c->rope_short_factor[i]) &&
                 isfinite(c->rope_long_factor[i]);
        if (!ok || strcmp(c->model_type, "phi3"))
            return df_error(DF_EINVAL, "longrope needs a phi3 model, rope_dim / 2 <= %d factors > 0 of each list, "
                            "original_max_position_embeddings > 1 and attention_factor > 0", DF_MAX_ROPE_FREQS);
    }
    if (c->rope_type == DF_ROPE_LINEAR && !(c->rope_factor > 0 && isfinite(c->rope_factor)))
        return df_error(DF_EINVAL, "linear rope scaling needs a factor > 0 (got %g)", c->rope_factor);
    if (c->rope_type == DF_ROPE_YARN) {
        bool fam = !strncmp(c->model_type, "qwen2", 5) || !strncmp(c->model_type, "qwen3", 5) ||
                   !strcmp(c->model_type, "llama") || !strcmp(c->model_type, "mistral") ||
                   !strcmp(c->model_type, "mixtral") || !strcmp(c->model_type, "olmo2") ||
                   !strcmp(c->model_type, "olmoe");
        bool ok = c->rope_factor > 0 && isfinite(c->rope_factor) && c->rope_beta_fast > 0 &&
                  isfinite(c->rope_beta_fast) && c->rope_beta_slow > 0 && isfinite(c->rope_beta_slow) &&
                  c->rope_original_max_pos > 0 && c->rope_attention_factor > 0 &&
                  isfinite(c->rope_attention_factor) && isfinite(c->rope_mscale) && isfinite(c->rope_mscale_all_dim);
        if (!ok || !fam)
            return df_error(DF_EINVAL, "yarn rope scaling needs a qwen2, qwen3, llama, mistral or olmo2 model (or their MoE variant) "
                            "(got %s), factor > 0, beta_fast and beta_slow > 0, original_max_position_embeddings "
                            "> 0 and attention_factor > 0 (got %g, %g, %g, %lld, %g)", c->model_type, c->rope_factor,
                            c->rope_beta_fast, c->rope_beta_slow, (long long)c->rope_original_max_pos,
                            c->rope_attention_factor);
        if (!(c->rope_theta > 1)) /* its correction range divides by ln rope_theta (HF: inf / NaN) */
            return df_error(DF_EINVAL, "yarn rope scaling needs rope_theta > 1 (got %g)", c->rope_theta);
    }
    if (c->rope_type != DF_ROPE_DEFAULT && c->rope_type != DF_ROPE_LLAMA3 && c->rope_type != DF_ROPE_LONGROPE &&
        c->rope_type != DF_ROPE_LINEAR && c->rope_type != DF_ROPE_YARN)
        return df_error(DF_EINVAL, "rope_type %d is not a df_rope_type", (int)c->rope_type);
    if (c->sliding_window < 0 || c->max_window_layers < 0)
        return df_error(DF_EINVAL, "sliding_window (%lld) and max_window_layers (%lld) must be >= 0",
                        (long long)c->sliding_window, (long long)c->max_window_layers);
    if (c->sliding_window > 0 && (!strcmp(c->model_type, "llama") || !strcmp(c->model_type, "olmo2") ||
                                  !strcmp(c->model_type, "olmoe")))
        return df_error(DF_EINVAL, "%s has no sliding-window attention", c->model_type);
    if (c->sliding_window > 0 && !strcmp(c->model_type, "qwen2_moe")) /* config_pos.c says why */
        return df_error(DF_EUNSUPPORTED, "qwen2_moe with a sliding window (%lld) is not supported",
                        (long long)c->sliding_window);
    if (c->sliding_window <= 0 && (!strcmp(c->model_type, "gemma3_text") || !strcmp(c->model_type, "gemma2")))
        return df_error(DF_EINVAL, "%s needs a sliding_window > 0 (got %lld)", c->model_type,
                        (long long)c->sliding_window);
    return DF_OK;
}

int64_t df_model_max_positions(const df_model_config *c)
{
    if (c->rope_type == DF_ROPE_LONGROPE && c->rope_original_max_pos < c->max_position_embeddings)
        return c->rope_original_max_pos;
    return c->max_position_embeddings;
}

const char *df_model_max_positions_name(const df_model_config *c)
{
    return c->rope_type == DF_ROPE_LONGROPE ? "original_max_position_embeddings (longrope: the short factors' range)"
                                            : "max_position_embeddings";
}

int64_t df_model_rope_dim(const df_model_config *c)
{
    return c->rope_dim ? c->rope_dim : c->head_dim;
}

const char *df_model_rope_name(const df_model_config *c, char *buf, size_t cap)
{
    if (c->rope_type == DF_ROPE_LINEAR)
        snprintf(buf, cap, "linear scaling x%g", c->rope_factor);
    else if (c->rope_type == DF_ROPE_YARN)
        snprintf(buf, cap, "yarn x%g", c->rope_factor);
    else
        snprintf(buf, cap, "%s", c->rope_type == DF_ROPE_LLAMA3     ? "llama3 scaling"
                                 : c->rope_type == DF_ROPE_LONGROPE ? "longrope"
                                                                    : "default");
    return buf;
}

bool df_model_layer_sliding(const df_model_config *c, int64_t layer)
{
    const bool full = layer >= 0 && layer < DF_MAX_TYPED_LAYERS &&
                      (c->full_layers[layer / 64] >> (layer % 64) & 1u);
    return c->sliding_window > 0 && layer >= c->max_window_layers && !full;
}

int64_t df_model_layer_window(const df_model_config *c, int64_t layer)
{
    /* a window no sequence can fill masks nothing (Phi-3 128k / 3.5: 262144 over 131072 positions) */
    if (c->sliding_window >= df_model_max_positions(c))
        return 0;
    return df_model_layer_sliding(c, layer) ? c->sliding_window : 0;
}

bool df_model_layer_local_rope(const df_model_config *c, int64_t layer)
{
    return c->rope_local_theta > 0 && df_model_layer_sliding(c, layer);
}

void df_model_local_rope(const df_model_config *c, df_model_config *local)
{
    *local = *c;
    local->rope_theta = c->rope_local_theta;
    local->rope_type = DF_ROPE_DEFAULT;
    local->rope_factor = 0;
}

bool df_model_layer_moe(const df_model_config *c, int64_t layer)
{
    const bool dense = layer >= 0 && layer < DF_MAX_TYPED_LAYERS &&
                       (c->mlp_only_layers[layer / 64] >> (layer % 64) & 1u);
    return c->num_experts > 0 && c->decoder_sparse_step > 0 && (layer + 1) % c->decoder_sparse_step == 0 && !dense;
}

static int64_t moe_layers(const df_model_config *c);

int64_t df_model_route_width(const df_model_config *c)
{
    return moe_layers(c) * c->num_experts_per_tok;
}

int64_t df_model_route_col(const df_model_config *c, int64_t layer)
{
    int64_t n = 0;
    for (int64_t l = 0; l < layer; l++)
        n += df_model_layer_moe(c, l);
    return n * c->num_experts_per_tok;
}

int64_t df_model_expert_floats(const df_model_config *c)
{
    return 3 * padded(c->moe_intermediate_size * c->hidden_size);
}

int64_t df_model_shared_floats(const df_model_config *c)
{
    return c->shared_expert_intermediate_size > 0 ? 3 * padded(c->shared_expert_intermediate_size * c->hidden_size) : 0;
}

int64_t df_model_mlp_width(const df_model_config *c)
{
    int64_t w = c->intermediate_size;
    if (moe_layers(c) > 0) {
        w = c->moe_intermediate_size > w ? c->moe_intermediate_size : w;
        w = c->shared_expert_intermediate_size > w ? c->shared_expert_intermediate_size : w;
    }
    return w;
}

float df_model_embed_scale(const df_model_config *c)
{
    return c->embed_scale ? (float)sqrt((double)c->hidden_size) : 1.0f;
}

float df_model_q_scale(const df_model_config *c)
{
    const double s = c->query_pre_attn_scalar;
    return s > 0 && s != (double)c->head_dim ? (float)sqrt((double)c->head_dim / s) : 1.0f;
}

int df_model_config_validate(const df_model_config *c)
{
    int rc = validate_type(c);
    if (!rc)
        rc = validate_positions(c);
    if (rc)
        return rc;
    struct { const char *k; int64_t v; } pos[] = {
        {"vocab_size", c->vocab_size},
        {"hidden_size", c->hidden_size},
        {"intermediate_size", c->intermediate_size},
        {"num_hidden_layers", c->num_hidden_layers},
        {"num_attention_heads", c->num_attention_heads},
        {"num_key_value_heads", c->num_key_value_heads},
        {"head_dim", c->head_dim},
        {"max_position_embeddings", c->max_position_embeddings},
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0)
            return df_error(DF_EINVAL, "%s must be > 0 (got %lld)", pos[i].k, (long long)pos[i].v);
    if (c->num_attention_heads % c->num_key_value_heads)
        return df_error(DF_EINVAL,
                        "num_attention_heads (%lld) must be a multiple of num_key_value_heads (%lld)",
                        (long long)c->num_attention_heads, (long long)c->num_key_value_heads);
    if (c->head_dim % 2)
        return df_error(DF_EINVAL, "head_dim (%lld) must be even for rotary embeddings",
                        (long long)c->head_dim);
    const int64_t rd = df_model_rope_dim(c);
    if (c->rope_dim < 0 || rd > c->head_dim || rd < 2 || rd % 2)
        return df_error(DF_EINVAL, "rope_dim %lld must be even, >= 2 and at most head_dim %lld",
                        (long long)c->rope_dim, (long long)c->head_dim);
    if (rd != c->head_dim && strcmp(c->model_type, "phi3"))
        return df_error(DF_EINVAL, "%s rotates whole heads (rope_dim %lld, head_dim %lld): a partial "
                        "rotary embedding is phi3's", c->model_type, (long long)rd, (long long)c->head_dim);
    if (!(c->rms_norm_eps > 0) || !(c->rope_theta > 0))
        return df_error(DF_EINVAL, "rms_norm_eps and rope_theta must be > 0");
    if (c->num_labels < 0)
        return df_error(DF_EINVAL, "num_labels must be >= 0 (got %lld)", (long long)c->num_labels);
    if (c->num_labels > 1)
        return df_error(DF_EUNSUPPORTED, "num_labels %lld is not supported (0: causal LM, 1: "
                        "value model)", (long long)c->num_labels);
    if (c->seq_cls && c->num_labels != 1)
        return df_error(DF_EINVAL, "a *ForSequenceClassification config (seq_cls) needs num_labels 1 "
                        "(got %lld)", (long long)c->num_labels);
    return DF_OK;
}

/* *sum += k * padded(d0 * d1) (d1 = 1 for a vector), false on int64 overflow. */
static bool count_add(int64_t *sum, int64_t k, int64_t d0, int64_t d1)
{
    int64_t numel, blk;
    return !__builtin_mul_overflow(d0, d1, &numel) && numel <= INT64_MAX - 15 &&
           !__builtin_mul_overflow(k, padded(numel), &blk) && !__builtin_add_overflow(*sum, blk, sum);
}

/* How many of c's layers are sparse (df_model_layer_moe), in closed form: a huge
   num_hidden_layers is refused by the overflow checks, not walked. */
static int64_t moe_layers(const df_model_config *c)
{
    if (c->num_experts <= 0 || c->decoder_sparse_step < 1)
        return 0;
    int64_t n = c->num_hidden_layers / c->decoder_sparse_step;
    for (int64_t l = c->decoder_sparse_step - 1; l < c->num_hidden_layers && l < DF_MAX_TYPED_LAYERS;
         l += c->decoder_sparse_step)
        n -= !df_model_layer_moe(c, l);
    return n;
}

int df_model_param_count(const df_model_config *c, int64_t *total, int64_t *n_tensors)
{
    int rc = df_model_config_validate(c);
    if (rc)
        return rc;
    const int64_t H = c->hidden_size, I = c->intermediate_size, V = c->vocab_size, L = c->num_hidden_layers;
    int64_t q, kv, layer = 0, sum = 0;
    bool ok = !__builtin_mul_overflow(c->num_attention_heads, c->head_dim, &q) &&
              !__builtin_mul_overflow(c->num_key_value_heads, c->head_dim, &kv);
    /* one layer: the norms, q / k / v / o (+ biases), the MLP; then the layers, embedding, norm, head */
    ok = ok && count_add(&layer, 2, H, 1) && count_add(&layer, 2, q, H) && count_add(&layer, 2, kv, H);
    if (c->attention_bias)
        ok = ok && count_add(&layer, 1, q, 1) && count_add(&layer, 2, kv, 1);
    if (c->o_proj_bias)
        ok = ok && count_add(&layer, 1, H, 1);
    if (c->sandwich_norm) /* input_layernorm and pre_feedforward_layernorm besides the two above */
        ok = ok && count_add(&layer, 2, H, 1);
    if (c->qk_norm && c->qk_norm_full)
        ok = ok && count_add(&layer, 1, q, 1) && count_add(&layer, 1, kv, 1);
    else if (c->qk_norm)
        ok = ok && count_add(&layer, 2, c->head_dim, 1);
    /* the MLPs: dense ones, and the sparse layers' routers and experts (and shared expert + gate) */
    const int64_t Ls = moe_layers(c), E = c->num_experts, Is = c->shared_expert_intermediate_size;
    int64_t sparse = 0;
    ok = ok && E <= INT64_MAX / 3 && count_add(&sparse, 1, E, H) && count_add(&sparse, 3 * E, c->moe_intermediate_size, H);
    if (Is > 0)
        ok = ok && count_add(&sparse, 3, Is, H) && count_add(&sparse, 1, 1, H);
    ok = ok && count_add(&sum, L, layer, 1) && count_add(&sum, 3 * (L - Ls), I, H) && count_add(&sum, Ls, sparse, 1);
    ok = ok && count_add(&sum, 1, V, H) && count_add(&sum, 1, H, 1);
    if (c->num_labels > 0)
        ok = ok && count_add(&sum, 1, c->num_labels, H) && count_add(&sum, 1, c->num_labels, 1);
    else if (!c->tie_word_embeddings)
        ok = ok && count_add(&sum, 1, V, H);
    /* two norms per layer: input and post-attention, or (post_norm) post-attention and post-feedforward */
    const int64_t per_layer = 9 + 3 * c->attention_bias + c->o_proj_bias + 2 * c->qk_norm + 2 * c->sandwich_norm;
    /* a sparse layer's router, 3 E experts' tensors (and the shared expert's 3 + its gate)
       instead of the dense 3 */
    const int64_t per_sparse = E < INT_MAX / 4 ? 1 + 3 * E - 3 + (Is > 0 ? 4 : 0) : INT_MAX;
    if (!ok || L > (INT_MAX - 4) / per_layer || (Ls > 0 && per_sparse > (INT_MAX - 4 - L * per_layer) / Ls))
        return df_error(DF_EINVAL,
                        "the model's size overflows: %lld layers of hidden_size %lld, intermediate_size %lld, "
                        "%lld x %lld attention heads and vocab_size %lld do not fit in 64-bit counts",
                        (long long)L, (long long)H, (long long)I, (long long)c->num_attention_heads,
                        (long long)c->head_dim, (long long)V);
    *total = sum;
    if (n_tensors)
        *n_tensors = 1 + L * per_layer + Ls * per_sparse + 1 + (c->num_labels > 0 ? 2 : !c->tie_word_embeddings);
    return DF_OK;
}

typedef struct {
    df_param_desc *d;
    int n, cap;
    int64_t total;
} layout_builder;

static int add(layout_builder *lb, const char *name, int64_t d0, int64_t d1)
{
    if (lb->n == lb->cap) {
        int cap = lb->cap ? 2 * lb->cap : 64;
        df_param_desc *nd = realloc(lb->d, (size_t)cap * sizeof *nd);
        if (!nd)
            return df_error(DF_ENOMEM, "out of memory building the parameter layout");
        lb->d = nd;
        lb->cap = cap;
    }
    df_param_desc *p = &lb->d[lb->n++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = d1 > 0 ? 2 : 1;
    p->shape[0] = d0;
    p->shape[1] = d1 > 0 ? d1 : 0;
    p->numel = d1 > 0 ? d0 * d1 : d0; /* no overflow: df_model_param_count bounded the sum */
    /* keep every tensor 16-float (64-byte) aligned inside the blob */
    p->offset = lb->total;
    lb->total += padded(p->numel);
    return DF_OK;
}

int df_model_layout(const df_model_config *c, df_param_desc **descs, int *n, int64_t *total)
{
    int64_t count;
    int rc = df_model_param_count(c, &count, NULL);
    if (rc)
        return rc;
    layout_builder lb = {0};
    int64_t H = c->hidden_size, I = c->intermediate_size, V = c->vocab_size;
    int64_t q = c->num_attention_heads * c->head_dim, kv = c->num_key_value_heads * c->head_dim;
    char nm[96];
    rc = add(&lb, "model.embed_tokens.weight", V, H);
    for (int64_t i = 0; !rc && i < c->num_hidden_layers; i++) {
#define L(suffix, d0, d1)                                                        \
    if (!rc) {                                                                   \
        snprintf(nm, sizeof nm, "model.layers.%lld." suffix, (long long)i);      \
        rc = add(&lb, nm, d0, d1);                                               \
    }
        if (!c->post_norm || c->sandwich_norm) L("input_layernorm.weight", H, 0);
        L("self_attn.q_proj.weight", q, H);
        if (c->attention_bias) L("self_attn.q_proj.bias", q, 0);
        L("self_attn.k_proj.weight", kv, H);
        if (c->attention_bias) L("self_attn.k_proj.bias", kv, 0);
        L("self_attn.v_proj.weight", kv, H);
        if (c->attention_bias) L("self_attn.v_proj.bias", kv, 0);
        L("self_attn.o_proj.weight", H, q);
        if (c->o_proj_bias) L("self_attn.o_proj.bias", H, 0);
        if (c->qk_norm) L("self_attn.q_norm.weight", c->qk_norm_full ? q : c->head_dim, 0);
        if (c->qk_norm) L("self_attn.k_norm.weight", c->qk_norm_full ? kv : c->head_dim, 0);
        L("post_attention_layernorm.weight", H, 0);
        if (c->sandwich_norm) L("pre_feedforward_layernorm.weight", H, 0);
        if (df_model_layer_moe(c, i)) { /* the router, then each expert's gate, up and down */
            const bool mixtral = !strcmp(c->model_type, "mixtral"); /* MixtralSparseMoeBlock's names */
            const char *block = mixtral ? "block_sparse_moe" : "mlp"; /* Qwen3MoeSparseMoeBlock's */
            const char *qwen[] = {"gate_proj", "up_proj", "down_proj"}, *mix[] = {"w1", "w3", "w2"};
            snprintf(nm, sizeof nm, "model.layers.%lld.%s.gate.weight", (long long)i, block);
            rc = add(&lb, nm, c->num_experts, H);
            for (int64_t e = 0; !rc && e < c->num_experts; e++) {
                const int64_t Im = c->moe_intermediate_size;
                for (int j = 0; j < 3 && !rc; j++) {
                    snprintf(nm, sizeof nm, "model.layers.%lld.%s.experts.%lld.%s.weight", (long long)i, block,
                             (long long)e, mixtral ? mix[j] : qwen[j]);
                    rc = add(&lb, nm, j < 2 ? Im : H, j < 2 ? H : Im);
                }
            }
            const int64_t Is = c->shared_expert_intermediate_size; /* Qwen2MoeSparseMoeBlock's */
            if (Is > 0) {
                L("mlp.shared_expert.gate_proj.weight", Is, H);
                L("mlp.shared_expert.up_proj.weight", Is, H);
                L("mlp.shared_expert.down_proj.weight", H, Is);
                L("mlp.shared_expert_gate.weight", 1, H);
            }
        } else {
            L("mlp.gate_proj.weight", I, H);
            L("mlp.up_proj.weight", I, H);
            L("mlp.down_proj.weight", H, I);
        }
        if (c->post_norm) L("post_feedforward_layernorm.weight", H, 0);
#undef L
    }
    if (!rc)
        rc = add(&lb, "model.norm.weight", H, 0);
    /* A value model replaces the LM head by the score head (tying has no effect there). */
    if (!rc && c->num_labels > 0) {
        rc = add(&lb, "score.weight", c->num_labels, H);
        if (!rc)
            rc = add(&lb, "score.bias", c->num_labels, 0);
    } else if (!rc && !c->tie_word_embeddings) {
        rc = add(&lb, "lm_head.weight", V, H);
    }
    if (!rc && lb.total != count) /* the closed form and the table must describe one blob */
        rc = df_error(DF_EINTERNAL, "parameter layout: %lld floats placed, %lld counted", (long long)lb.total,
                      (long long)count);
    if (rc) {
        free(lb.d);
        return rc;
    }
    *descs = lb.d;
    *n = lb.n;
    *total = lb.total;
    return DF_OK;
}

void df_model_view_of(const df_model *m, float *blob, df_model_view *v)
{
    const df_model_config *c = &m->cfg;
    const df_param_desc *d = m->tensors;
    int k = 0;
    v->embed = blob + d[k++].offset;
    for (int64_t i = 0; i < c->num_hidden_layers; i++) {
        df_layer_view *l = &v->layers[i];
        l->ln1 = c->post_norm && !c->sandwich_norm ? NULL : blob + d[k++].offset;
        l->wq = blob + d[k++].offset;
        l->bq = c->attention_bias ? blob + d[k++].offset : NULL;
        l->wk = blob + d[k++].offset;
        l->bk = c->attention_bias ? blob + d[k++].offset : NULL;
        l->wv = blob + d[k++].offset;
        l->bv = c->attention_bias ? blob + d[k++].offset : NULL;
        l->wo = blob + d[k++].offset;
        l->bo = c->o_proj_bias ? blob + d[k++].offset : NULL;
        l->q_norm = c->qk_norm ? blob + d[k++].offset : NULL;
        l->k_norm = c->qk_norm ? blob + d[k++].offset : NULL;
        l->ln2 = blob + d[k++].offset;
        l->ln_ff = c->sandwich_norm ? blob + d[k++].offset : NULL;
        l->w_gate = l->w_up = l->w_down = l->router = l->experts = l->shared = l->shared_gate = NULL;
        if (df_model_layer_moe(c, i)) {
            l->router = blob + d[k++].offset;
            l->experts = blob + d[k].offset;
            k += 3 * (int)c->num_experts;
            if (c->shared_expert_intermediate_size > 0) { /* three tensors one after another, then the gate */
                l->shared = blob + d[k].offset;
                k += 3;
                l->shared_gate = blob + d[k++].offset;
            }
        } else {
            l->w_gate = blob + d[k++].offset;
            l->w_up = blob + d[k++].offset;
            l->w_down = blob + d[k++].offset;
        }
        l->ln3 = c->post_norm ? blob + d[k++].offset : NULL;
    }
    v->final_norm = blob + d[k++].offset;
    v->lm_head = v->score_weight = v->score_bias = NULL;
    if (c->num_labels > 0) {
        v->score_weight = blob + d[k++].offset;
        v->score_bias = blob + d[k++].offset;
    } else {
        v->lm_head = c->tie_word_embeddings ? v->embed : blob + d[k++].offset;
    }
}

const df_param_desc *df_model_find_tensor(const df_model *m, const char *name)
{
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, name))
            return &m->tensors[i];
    return NULL;
}

/* What the weights, the tensor table and the layer views of a model need, against the machine's
   memory, before any of it is allocated. */
static int check_fits(const df_model_config *cfg)
{
    int64_t floats, tensors;
    int rc = df_model_param_count(cfg, &floats, &tensors);
    if (rc)
        return rc;
    double need = (double)floats * sizeof(float) + (double)tensors * sizeof(df_param_desc) +
                  (double)cfg->num_hidden_layers * sizeof(df_layer_view);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double have = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
    if (need > (double)SIZE_MAX / 2 || (have > 0 && need > have))
        return df_error(DF_ENOMEM, "the model needs %.3g GiB for %lld parameters, more than this machine's "
                                   "memory (%.3g GiB)", need / 1073741824.0, (long long)floats, have / 1073741824.0);
    return DF_OK;
}

int df_model_create(const df_model_config *cfg, df_model **out)
{
    int rc = check_fits(cfg);
    df_model *m = rc ? NULL : calloc(1, sizeof *m);
    if (rc || !m)
        return rc ? rc : df_error(DF_ENOMEM, "out of memory allocating the model");
    m->cfg = *cfg;
    rc = df_model_layout(cfg, &m->tensors, &m->n_tensors, &m->n_params);
    if (rc) {
        free(m);
        return rc;
    }
    const int64_t n_params = m->n_params;
    size_t bytes = ((size_t)n_params * sizeof(float) + 63) / 64 * 64;
    m->params = aligned_alloc(64, bytes);
    m->w.layers = calloc((size_t)cfg->num_hidden_layers, sizeof(df_layer_view));
    if (!m->params || !m->w.layers) {
        df_model_free(m); /* the message must not read m */
        return df_error(DF_ENOMEM, "out of memory allocating %lld parameters", (long long)n_params);
    }
    memset(m->params, 0, bytes);
    df_model_view_of(m, m->params, &m->w);
    df_model_weights_changed(m);
    *out = m;
    return DF_OK;
}

/* The last weight version handed out, process-wide: a version names a model too (model.h). */
static _Atomic int64_t last_version;

void df_model_weights_changed(df_model *m) { m->version = atomic_fetch_add(&last_version, 1) + 1; }

int df_model_clone(const df_model *src, df_model **out)
{
    df_model *m;
    int rc = df_model_create(&src->cfg, &m);
    if (rc)
        return rc;
    memcpy(m->params, src->params, (size_t)src->n_params * sizeof(float));
    df_model_weights_changed(m);
    if (src->config_json && !(m->config_json = strdup(src->config_json))) {
        df_model_free(m);
        return df_error(DF_ENOMEM, "out of memory cloning the model");
    }
    *out = m;
    return DF_OK;
}

void df_model_free(df_model *m)
{
    if (!m)
        return;
    free(m->tensors);
    free(m->params);
    free(m->w.layers);
    free(m->config_json);
    free(m);
}

/* HF _init_weights for tensor t: norms 1, biases 0, every other weight N(0, initializer_range)
 * from its own generator (keyed by seed and t), so one tensor can be re-drawn alone. */
static void init_tensor(df_model *m, int t, uint64_t seed)
{
    const df_param_desc *d = &m->tensors[t];
    float *p = m->params + d->offset;
    const char *nm = d->name;
    bool is_norm = strstr(nm, "layernorm") || !strcmp(nm, "model.norm.weight") ||
                   df_ends_with(nm, "_norm.weight"); /* qwen3's q_norm / k_norm */
    bool is_bias = df_ends_with(nm, ".bias");
    if (is_norm) { /* Gemma3RMSNorm scales by 1 + w: its weights start at 0 */
        for (int64_t i = 0; i < d->numel; i++)
            p[i] = m->cfg.norm_plus_one ? 0.0f : 1.0f;
    } else if (is_bias) {
        memset(p, 0, (size_t)d->numel * sizeof(float));
    } else {
        df_rng r;
        df_rng_seed(&r, df_rng_key(seed, (uint64_t)t, 0x1417, 0));
        for (int64_t i = 0; i < d->numel; i++)
            p[i] = (float)(df_rng_normal(&r) * m->cfg.initializer_range);
    }
}

int df_model_init_random(df_model *m, uint64_t seed)
{
    for (int t = 0; t < m->n_tensors; t++)
        init_tensor(m, t, seed);
    df_model_weights_changed(m);
    return DF_OK;
}

int df_model_to_value_model(df_model **mp, uint64_t seed)
{
    if (!mp || !*mp)
        return df_error(DF_EINVAL, "df_model_to_value_model: no model");
    df_model *src = *mp;
    if (src->cfg.num_labels > 0)
        return DF_OK;
    df_model_config c = src->cfg;
    c.num_labels = 1;
    df_model *m;
    int rc = df_model_create(&c, &m);
    if (rc)
        return df_error_wrap(rc, "df_model_to_value_model");
    if (src->config_json && !(m->config_json = strdup(src->config_json))) {
        df_model_free(m);
        return df_error(DF_ENOMEM, "df_model_to_value_model: out of memory");
    }
    /* The trunk by name; the head drawn as df_model_init_random would draw it. */
    for (int t = 0; t < m->n_tensors; t++) {
        const df_param_desc *d = &m->tensors[t];
        const df_param_desc *s = df_model_find_tensor(src, d->name);
        if (s)
            memcpy(m->params + d->offset, src->params + s->offset,
                   (size_t)d->numel * sizeof(float));
        else
            init_tensor(m, t, seed);
    }
    df_model_weights_changed(m);
    df_model_free(src);
    *mp = m;
    return DF_OK;
}
