/*
 * config.json of the model families beyond Qwen2 (model.h df_model_config_parse / _save,
 * src/model/config_pos.c): Qwen3, Llama 3.1 / 3.2 rope_scaling, Llama's attention_bias,
 * Qwen2 / Qwen3 sliding windows, Mistral (its window on every layer), OLMo 2 (post-norm layers,
 * q/k norms over the whole projections), Gemma 3's text model (gemma-3-1b-it), transformers 5's
 * rope_parameters, YaRN rope_scaling (its frequencies and attention factor by hand), Qwen3-MoE
 * (its experts' keys, defaults, sparse layers and their parameter count by hand); what stays
 * refused is
 * refused with a message naming the key and the value; saves round-trip.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"
#include "hf_configs.h"

#include "distflow/model.h"
#include "model/hf_io.h"
#include "model/ops.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A small config of `type` with `extra` keys appended (", \"key\": value ..."). */
static const char *small(char *buf, size_t cap, const char *type, const char *extra)
{
    snprintf(buf, cap,
             "{\"model_type\": \"%s\", \"vocab_size\": 100, \"hidden_size\": 64, "
             "\"intermediate_size\": 96, \"num_hidden_layers\": 4, \"num_attention_heads\": 4%s}",
             type, extra);
    return buf;
}

static void expect_error(const char *text, int code, const char *phrase)
{
    df_model_config c;
    df_clear_error();
    int rc = df_model_config_parse(text, "m/config.json", &c);
    const char *msg = df_last_error();
    if (rc != code || !strstr(msg, "m/config.json") || !strstr(msg, phrase))
        fail_msg("rc %d (want %d): \"%s\" should name m/config.json and say \"%s\"", rc, code, msg, phrase);
}

/* Qwen3-30B-A3B as published: 48 sparse layers of 128 experts, 8 a token renormalised, head_dim
 * 128; 30.53 B parameters (the model card's 30.5 B: 48 x (attention 2048 x (4096 + 2 x 512) +
 * 4096 x 2048, norms, router 128 x 2048, 128 x 3 x 768 x 2048) + 2 x 151936 x 2048 + 2048), of
 * which a token uses 3.3 B (verl's MFU count: 8 experts, the router, the attention, the head). */
static void test_qwen3_30b_a3b(void **state)
{
    (void)state;
    df_model_config c;
    assert_int_equal(df_model_config_parse(k_qwen3_30b_a3b, NULL, &c), DF_OK);
    assert_string_equal(c.model_type, "qwen3_moe");
    assert_true(c.num_experts == 128 && c.num_experts_per_tok == 8 && c.moe_intermediate_size == 768);
    assert_true(c.norm_topk_prob && c.qk_norm && !c.attention_bias && c.head_dim == 128);
    assert_int_equal(c.num_key_value_heads, 4);
    for (int64_t l = 0; l < 48; l++)
        assert_true(df_model_layer_moe(&c, l));
    int64_t floats, tensors;
    assert_int_equal(df_model_param_count(&c, &floats, &tensors), DF_OK);
    const int64_t attn = 2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048 + 2 * 2048 + 2 * 128;
    const int64_t moe = 128 * 2048 + 128 * 3 * 768 * 2048;
    assert_int_equal(floats, 48 * (attn + moe) + 2 * 151936 * 2048 + 2048);
    /* a layer: 2 norms, q / k / v / o, q_norm / k_norm, the router, 3 tensors an expert */
    assert_int_equal(tensors, 1 + 48 * (2 + 4 + 2 + 1 + 3 * 128) + 1 + 1);
    /* per token: 6 x (the active matmul weights) x tokens, verl's count */
    const double active = 48.0 * (2048.0 * (4096 + 2 * 512) + 4096.0 * 2048 + 2048.0 * (128 + 3 * 8 * 768)) +
                          2.0 * 151936 * 2048;
    assert_true(df_model_train_flops(&c, 1.0, 0.0) == 6.0 * active);
}

/* Qwen1.5-MoE-A2.7B: Qwen2's attention (q/k/v biases, no o_proj bias, no q/k norms, 16 heads of
 * 128), 24 sparse layers of 60 experts of 1408 (4 a token, unnormalised) beside a shared expert
 * of 5632 and its gate [1, 2048]; 14.32 B parameters (the model card's 14.3 B: 24 x (attention
 * 4 x 2048^2 + 3 x 2048 biases, norms, router 60 x 2048, 60 x 3 x 1408 x 2048, 3 x 5632 x 2048 +
 * 2048) + 2 x 151936 x 2048 + 2048). The MFU count adds the shared expert, which verl's
 * _estimate_qwen2_moe_flops leaves out. use_sliding_window false: no window. */
static void test_qwen15_moe_a27b(void **state)
{
    (void)state;
    df_model_config c;
    assert_int_equal(df_model_config_parse(k_qwen15_moe_a27b, NULL, &c), DF_OK);
    assert_string_equal(c.model_type, "qwen2_moe");
    assert_true(c.num_experts == 60 && c.num_experts_per_tok == 4 && c.moe_intermediate_size == 1408);
    assert_true(c.shared_expert_intermediate_size == 5632 && !c.norm_topk_prob);
    assert_true(c.attention_bias && !c.o_proj_bias && !c.qk_norm && c.head_dim == 128);
    assert_true(c.num_key_value_heads == 16 && c.sliding_window == 0 && c.rope_theta == 1e6);
    for (int64_t l = 0; l < 24; l++)
        assert_true(df_model_layer_moe(&c, l) && df_model_layer_window(&c, l) == 0);
    assert_int_equal(df_model_mlp_width(&c), 5632);
    assert_int_equal(df_model_shared_floats(&c), 3 * 5632 * 2048);
    int64_t floats, tensors;
    assert_int_equal(df_model_param_count(&c, &floats, &tensors), DF_OK);
    const int64_t attn = 4 * 2048 * 2048 + 3 * 2048 + 2 * 2048;
    const int64_t moe = 60 * 2048 + 60 * 3 * 1408 * 2048 + 3 * 5632 * 2048 + 2048;
    assert_int_equal(floats, 24 * (attn + moe) + 2 * 151936 * 2048 + 2048);
    assert_int_equal(floats, 14315784192);
    /* a layer: 2 norms, q / k / v / o, 3 biases, the router, 3 tensors an expert, the shared 3 + gate */
    assert_int_equal(tensors, 1 + 24 * (2 + 4 + 3 + 1 + 3 * 60 + 4) + 1 + 1);
    const double active = 24.0 * (2048.0 * 4 * 2048 + 2048.0 * (60 + 3 * 4 * 1408 + 3 * 5632 + 1)) +
                          2.0 * 151936 * 2048;
    assert_true(df_model_train_flops(&c, 1.0, 0.0) == 6.0 * active);
}

#define KV2 ", \"num_key_value_heads\": 2" /* small()'s 4 heads need it: Qwen2MoeConfig's default is 16 */

/* Qwen2MoeConfig's defaults where the keys are absent (60 experts, 4 a token, width 1408, a shared
 * expert of 5632, unnormalised; 16 key/value heads whatever the heads; rope_theta 1e4; q/k/v
 * biases); qkv_bias false drops them; what qwen2_moe is not is refused, naming it. */
static void test_qwen2_moe_defaults_and_refusals(void **state)
{
    (void)state;
    df_model_config c;
    char b[1024];
    assert_int_equal(df_model_config_parse("{\"model_type\": \"qwen2_moe\", \"vocab_size\": 100, \"hidden_size\": 64, "
                                           "\"intermediate_size\": 96, \"num_hidden_layers\": 4, "
                                           "\"num_attention_heads\": 32}", NULL, &c),
                     DF_OK);
    assert_true(c.num_experts == 60 && c.num_experts_per_tok == 4 && c.moe_intermediate_size == 1408);
    assert_true(c.shared_expert_intermediate_size == 5632 && !c.norm_topk_prob && c.decoder_sparse_step == 1);
    assert_true(c.num_key_value_heads == 16 && c.head_dim == 2 && c.rope_theta == 1e4 &&
                c.max_position_embeddings == 32768);
    assert_true(c.attention_bias && !c.o_proj_bias && !c.qk_norm && !c.tie_word_embeddings);
    int64_t floats, with_bias, tensors;
    assert_int_equal(df_model_param_count(&c, &with_bias, &tensors), DF_OK);
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "qwen2_moe",
                                                 ", \"num_key_value_heads\": 4, \"qkv_bias\": false, "
                                                 "\"shared_expert_intermediate_size\": 32, \"mlp_only_layers\": [3]"),
                                           NULL, &c),
                     DF_OK);
    assert_true(!c.attention_bias && !c.o_proj_bias && c.shared_expert_intermediate_size == 32);
    assert_true(df_model_layer_moe(&c, 2) && !df_model_layer_moe(&c, 3));
    assert_int_equal(df_model_mlp_width(&c), 1408);
    /* YaRN (Qwen2MoeRotaryEmbedding takes it), and on OLMoE's */
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "qwen2_moe", KV2 ", \"rope_scaling\": {\"rope_type\": "
                                                 "\"yarn\", \"factor\": 4.0}"), NULL, &c), DF_OK);
    assert_true(c.rope_type == DF_ROPE_YARN && c.rope_factor == 4.0);
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "olmoe", ", \"rope_scaling\": {\"rope_type\": "
                                                 "\"yarn\", \"factor\": 2.0}"), NULL, &c), DF_OK);
    assert_true(c.rope_type == DF_ROPE_YARN && c.rope_factor == 2.0);
    assert_int_equal(df_model_param_count(&c, &floats, &tensors), DF_OK);
    assert_true(floats < with_bias);
    /* attention_bias is not Qwen2MoeConfig's key: qkv_bias alone decides */
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "qwen2_moe", KV2 ", \"attention_bias\": false"), NULL, &c),
                     DF_OK);
    assert_true(c.attention_bias);
    expect_error(small(b, sizeof b, "qwen2_moe", KV2 ", \"use_sliding_window\": true"), DF_EUNSUPPORTED,
                 "key \"use_sliding_window\" true is not supported for qwen2_moe");
    expect_error(small(b, sizeof b, "qwen2_moe", KV2 ", \"shared_expert_intermediate_size\": 0"), DF_EINVAL,
                 "shared_expert_intermediate_size 0 must be > 0 in qwen2_moe");
    expect_error(small(b, sizeof b, "qwen2_moe", KV2 ", \"shared_expert_intermediate_size\": 2.5"), DF_EINVAL,
                 "key \"shared_expert_intermediate_size\" must be an integer");
    expect_error(small(b, sizeof b, "qwen2_moe", KV2 ", \"qkv_bias\": 1"), DF_EINVAL,
                 "key \"qkv_bias\" must be a boolean");
    /* built in code: a shared expert is qwen2_moe's only; no window, no o_proj bias */
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "qwen3_moe", ""), NULL, &c), DF_OK);
    c.shared_expert_intermediate_size = 8;
    assert_error_mentions(df_model_config_validate(&c), DF_EINVAL, "0 elsewhere");
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "qwen2_moe", KV2), NULL, &c), DF_OK);
    df_model_config v = c;
    v.sliding_window = 8;
    assert_error_mentions(df_model_config_validate(&v), DF_EUNSUPPORTED, "qwen2_moe with a sliding window");
    v = c;
    v.o_proj_bias = true;
    assert_error_mentions(df_model_config_validate(&v), DF_EINVAL, "does not exist in qwen2 / qwen2_moe");
}

/* A qwen2_moe save: Qwen2MoeForCausalLM with the shared expert's width and qkv_bias (not
   attention_bias), read back the same, fresh or over the published file. */
static void test_qwen2_moe_save(void **state)
{
    const char *dir = *state;
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    df_model_config c, back;
    assert_int_equal(df_model_config_parse(k_qwen15_moe_a27b, NULL, &c), DF_OK);
    c.attention_bias = false;
    c.shared_expert_intermediate_size = 4096;
    for (int fresh = 0; fresh < 2; fresh++) {
        assert_int_equal(df_model_config_save(&c, fresh ? NULL : k_qwen15_moe_a27b, path), DF_OK);
        json_error_t je;
        json_t *j = json_load_file(path, 0, &je);
        assert_non_null(j);
        assert_string_equal(json_string_value(json_array_get(json_object_get(j, "architectures"), 0)),
                            "Qwen2MoeForCausalLM");
        assert_int_equal(json_integer_value(json_object_get(j, "shared_expert_intermediate_size")), 4096);
        assert_true(json_is_false(json_object_get(j, "qkv_bias")));
        assert_null(json_object_get(j, "attention_bias"));
        assert_null(json_object_get(j, "head_dim"));
        assert_true(json_is_false(json_object_get(j, "use_sliding_window")));
        json_decref(j);
        assert_int_equal(df_model_config_load(path, &back), DF_OK);
        assert_true(back.shared_expert_intermediate_size == 4096 && !back.attention_bias && !back.o_proj_bias);
        assert_true(back.num_experts == 60 && back.num_experts_per_tok == 4 && back.moe_intermediate_size == 1408);
        assert_true(!back.norm_topk_prob && back.sliding_window == 0 && back.head_dim == 128);
    }
}

/* OLMoE-1B-7B-0924 as published: Llama's layer with q/k norms over the whole projections (2048
 * wide each: 16 heads of 128 = hidden, no head_dim key), 16 sparse layers of 64 experts of
 * intermediate_size 1024, 8 a token, unnormalised; 6.92 B parameters (the model card's 6.9 B: 16 x
 * (attention 4 x 2048^2, 4 norms of 2048, router 64 x 2048, 64 x 3 x 1024 x 2048) + 2 x 50304 x
 * 2048 + 2048), 1.3 B a token by verl's count. */
static void test_olmoe_1b_7b(void **state)
{
    (void)state;
    df_model_config c;
    assert_int_equal(df_model_config_parse(k_olmoe_1b_7b, NULL, &c), DF_OK);
    assert_string_equal(c.model_type, "olmoe");
    assert_true(c.num_experts == 64 && c.num_experts_per_tok == 8 && c.moe_intermediate_size == 1024);
    assert_true(!c.norm_topk_prob && c.qk_norm && c.qk_norm_full && !c.post_norm && !c.attention_bias);
    assert_true(c.head_dim == 128 && c.num_key_value_heads == 16 && c.sliding_window == 0 && c.rope_theta == 1e4);
    assert_true(c.n_eos == 1 && c.eos_token_ids[0] == 50279 && c.rms_norm_eps == 1e-5);
    for (int64_t l = 0; l < 16; l++)
        assert_true(df_model_layer_moe(&c, l));
    int64_t floats, tensors;
    assert_int_equal(df_model_param_count(&c, &floats, &tensors), DF_OK);
    const int64_t attn = 4 * 2048 * 2048 + 4 * 2048, moe = 64 * 2048 + 64 * 3 * 1024 * 2048;
    assert_int_equal(floats, 16 * (attn + moe) + 2 * 50304 * 2048 + 2048);
    assert_int_equal(floats, 6919161856);
    /* a layer: 2 norms, q / k / v / o, q_norm / k_norm, the router, 3 tensors an expert */
    assert_int_equal(tensors, 1 + 16 * (2 + 4 + 2 + 1 + 3 * 64) + 1 + 1);
    const double active = 16.0 * (2048.0 * 4 * 2048 + 2048.0 * (64 + 3 * 8 * 1024)) + 2.0 * 50304 * 2048;
    assert_true(df_model_train_flops(&c, 1.0, 0.0) == 6.0 * active);
}

/* OlmoeConfig's defaults where the keys are absent (64 experts, 8 a token, of intermediate_size,
 * unnormalised; key/value heads = heads; eos 50279); num_local_experts is its alias of num_experts;
 * what OLMoE is not is refused, naming the key. A fresh save writes OlmoeForCausalLM with its keys. */
static void test_olmoe_defaults_refusals_save(void **state)
{
    const char *dir = *state;
    df_model_config c, back;
    char b[1024], path[512];
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "olmoe", ""), NULL, &c), DF_OK);
    assert_true(c.num_experts == 64 && c.num_experts_per_tok == 8 && c.moe_intermediate_size == 96);
    assert_true(!c.norm_topk_prob && c.qk_norm_full && c.num_key_value_heads == 4 && c.head_dim == 16);
    assert_true(c.max_position_embeddings == 4096 && c.eos_token_ids[0] == 50279 && c.rms_norm_eps == 1e-5);
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "olmoe", ", \"num_local_experts\": 6, "
                                                 "\"num_experts_per_tok\": 2, \"norm_topk_prob\": true, "
                                                 "\"attention_bias\": true, \"clip_qkv\": null"),
                                           NULL, &c),
                     DF_OK);
    assert_true(c.num_experts == 6 && c.num_experts_per_tok == 2 && c.norm_topk_prob);
    assert_true(c.attention_bias && c.o_proj_bias); /* LlamaAttention's: o_proj's with q/k/v's */
    expect_error(small(b, sizeof b, "olmoe", ", \"clip_qkv\": 8.0"), DF_EUNSUPPORTED,
                 "key \"clip_qkv\" 8 is not supported");
    expect_error(small(b, sizeof b, "olmoe", ", \"clip_qkv\": \"8\""), DF_EINVAL,
                 "key \"clip_qkv\" must be a number or null");
    expect_error(small(b, sizeof b, "olmoe", ", \"use_sliding_window\": true"), DF_EUNSUPPORTED,
                 "olmoe has no sliding-window attention");
    expect_error(small(b, sizeof b, "olmoe", ", \"head_dim\": 32"), DF_EINVAL,
                 "olmoe: head_dim 32 x 4 heads must be hidden_size 64");
    expect_error(small(b, sizeof b, "olmoe", ", \"num_experts_per_tok\": 65"), DF_EINVAL,
                 "olmoe needs 1 <= num_experts_per_tok <= num_experts");
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "olmoe", ""), NULL, &c), DF_OK);
    df_model_config v = c;
    v.mlp_only_layers[0] = 1u;
    assert_error_mentions(df_model_config_validate(&v), DF_EINVAL, "olmoe: every layer is a sparse one");
    v = c;
    v.qk_norm_full = false;
    assert_error_mentions(df_model_config_validate(&v), DF_EINVAL, "olmo2 and olmoe over the whole projection");
    snprintf(path, sizeof path, "%s/config.json", dir);
    c.norm_topk_prob = true;
    assert_int_equal(df_model_config_save(&c, NULL, path), DF_OK);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "architectures"), 0)), "OlmoeForCausalLM");
    assert_int_equal(json_integer_value(json_object_get(j, "num_experts")), 64);
    assert_true(json_is_true(json_object_get(j, "norm_topk_prob")));
    assert_true(json_is_null(json_object_get(j, "clip_qkv")));
    assert_true(json_real_value(json_object_get(j, "router_aux_loss_coef")) == 0.01);
    assert_null(json_object_get(j, "head_dim"));
    assert_null(json_object_get(j, "moe_intermediate_size"));
    json_decref(j);
    assert_int_equal(df_model_config_load(path, &back), DF_OK);
    assert_true(back.num_experts == 64 && back.norm_topk_prob && back.qk_norm_full && back.head_dim == 16);
    assert_int_equal(back.moe_intermediate_size, 96);
}

/* Mixtral-8x7B as published: Mistral's attention without a window, every layer 8 experts of
 * intermediate_size 14336, 2 a token, renormalised; 46.70 B parameters (the model card's 46.7 B),
 * 12.88 B a token (verl's MFU count: 2 experts, the router, the attention, embedding and head).
 * Its keys refuse what Mixtral cannot be: a non-zero router jitter, dense layers, unnormalised
 * weights; a fresh save writes MixtralConfig's keys and reads back the same. */
static void test_mixtral_8x7b(void **state)
{
    (void)state;
    df_model_config c, back;
    assert_int_equal(df_model_config_parse(k_mixtral_8x7b, NULL, &c), DF_OK);
    assert_string_equal(c.model_type, "mixtral");
    assert_true(c.num_experts == 8 && c.num_experts_per_tok == 2 && c.moe_intermediate_size == 14336);
    assert_true(c.norm_topk_prob && !c.qk_norm && !c.attention_bias && !c.o_proj_bias && c.head_dim == 128);
    assert_true(c.num_key_value_heads == 8 && c.sliding_window == 0 && c.rope_theta == 1e6);
    for (int64_t l = 0; l < 32; l++)
        assert_true(df_model_layer_moe(&c, l) && df_model_layer_window(&c, l) == 0);
    int64_t floats, tensors;
    assert_int_equal(df_model_param_count(&c, &floats, &tensors), DF_OK);
    const int64_t attn = 4096 * 4096 + 2 * 1024 * 4096 + 4096 * 4096 + 2 * 4096;
    const int64_t moe = 8 * 4096 + 8 * 3 * 14336 * 4096;
    assert_int_equal(floats, 32 * (attn + moe) + 2 * 32000 * 4096 + 4096);
    assert_int_equal(tensors, 1 + 32 * (2 + 4 + 1 + 3 * 8) + 1 + 1);
    const double active = 32.0 * (4096.0 * (4096 + 2 * 1024) + 4096.0 * 4096 + 4096.0 * (8 + 3 * 2 * 14336)) +
                          2.0 * 32000 * 4096;
    assert_true(df_model_train_flops(&c, 1.0, 0.0) == 6.0 * active);
    char *text = NULL;
    assert_int_equal(df_model_config_to_json(&c, NULL, &text), DF_OK);
    json_t *j = json_loads(text, 0, NULL);
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "architectures"), 0)), "MixtralForCausalLM");
    assert_int_equal(json_integer_value(json_object_get(j, "num_local_experts")), 8);
    assert_true(json_number_value(json_object_get(j, "router_jitter_noise")) == 0.0);
    assert_null(json_object_get(j, "num_experts"));
    assert_null(json_object_get(j, "attention_bias"));
    assert_true(json_is_null(json_object_get(j, "sliding_window")));
    json_decref(j);
    assert_int_equal(df_model_config_parse(text, NULL, &back), DF_OK);
    assert_true(back.num_experts == 8 && back.num_experts_per_tok == 2 && back.moe_intermediate_size == 14336 &&
                back.norm_topk_prob && back.head_dim == 128);
    free(text);
    /* what Mixtral cannot be */
    char b[2048];
    snprintf(b, sizeof b, "%.*s, \"router_jitter_noise\": 0.01}", (int)strlen(k_mixtral_8x7b) - 1, k_mixtral_8x7b);
    expect_error(b, DF_EUNSUPPORTED, "router_jitter_noise");
    snprintf(b, sizeof b, "%.*s, \"attention_bias\": true}", (int)strlen(k_mixtral_8x7b) - 1, k_mixtral_8x7b);
    assert_int_equal(df_model_config_parse(b, NULL, &back), DF_OK); /* transformers ignores it too */
    assert_false(back.attention_bias);
    back = c;
    back.norm_topk_prob = false;
    assert_error_mentions(df_model_config_validate(&back), DF_EINVAL, "every layer is a sparse one");
    back = c;
    back.mlp_only_layers[0] = 1;
    assert_error_mentions(df_model_config_validate(&back), DF_EINVAL, "every layer is a sparse one");
    back = c;
    back.moe_intermediate_size = 64;
    assert_error_mentions(df_model_config_validate(&back), DF_EINVAL, "every layer is a sparse one");
}

static void test_qwen3(void **state)
{
    (void)state;
    df_model_config c;
    assert_int_equal(df_model_config_parse(k_qwen3_8b, NULL, &c), DF_OK);
    assert_string_equal(c.model_type, "qwen3");
    assert_true(c.qk_norm);
    assert_false(c.attention_bias || c.o_proj_bias);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.num_key_value_heads, 8);
    assert_true(c.rope_theta == 1e6);
    assert_int_equal(c.rope_type, DF_ROPE_DEFAULT);
    assert_int_equal(c.sliding_window, 0);
    assert_false(c.tie_word_embeddings);
    /* the layout: q_norm / k_norm [128] after o_proj, no biases */
    int64_t floats, tensors;
    assert_int_equal(df_model_param_count(&c, &floats, &tensors), DF_OK);
    assert_int_equal(tensors, 1 + 36 * 11 + 1 + 1);
    /* Qwen3Config's head_dim default is 128, not hidden / heads; attention_bias gives o_proj's too */
    char b[512];
    assert_int_equal(
        df_model_config_parse(small(b, sizeof b, "qwen3", ", \"attention_bias\": true"), NULL, &c), DF_OK);
    assert_int_equal(c.head_dim, 128);
    assert_true(c.attention_bias && c.o_proj_bias && c.qk_norm);
    df_param_desc *d;
    int n;
    int64_t total;
    assert_int_equal(df_model_layout(&c, &d, &n, &total), DF_OK);
    const char *want[] = {"q_proj.weight", "q_proj.bias",  "k_proj.weight", "k_proj.bias",
                          "v_proj.weight", "v_proj.bias",  "o_proj.weight", "o_proj.bias",
                          "q_norm.weight", "k_norm.weight"};
    for (int i = 0; i < 10; i++) {
        char full[96];
        snprintf(full, sizeof full, "model.layers.0.self_attn.%s", want[i]);
        assert_string_equal(d[2 + i].name, full);
    }
    assert_int_equal(d[9].shape[0], 64);   /* o_proj.bias [hidden] */
    assert_int_equal(d[10].shape[0], 128); /* q_norm [head_dim] */
    free(d);
}

static void test_llama3_rope(void **state)
{
    (void)state;
    df_model_config c;
    assert_int_equal(df_model_config_parse(k_llama32_1b, NULL, &c), DF_OK);
    assert_int_equal(c.rope_type, DF_ROPE_LLAMA3);
    assert_true(c.rope_factor == 32.0 && c.rope_low_freq_factor == 1.0 && c.rope_high_freq_factor == 4.0);
    assert_int_equal(c.rope_original_max_pos, 8192);
    assert_true(c.rope_theta == 500000.0);
    assert_false(c.qk_norm || c.o_proj_bias);
    /* the older spelling "type", and llama3 on a qwen2 (HF's rope functions are shared) */
    char b[512];
    const char *ty = ", \"rope_scaling\": {\"type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1, "
                     "\"high_freq_factor\": 4, \"original_max_position_embeddings\": 8192}";
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "qwen2", ty), NULL, &c), DF_OK);
    assert_int_equal(c.rope_type, DF_ROPE_LLAMA3);
    assert_true(c.rope_factor == 8.0);
    /* {"rope_type": "default"} is plain RoPE */
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "llama",
                                                 ", \"rope_scaling\": {\"rope_type\": "
                                                 "\"default\"}"),
                                           NULL, &c),
                     DF_OK);
    assert_int_equal(c.rope_type, DF_ROPE_DEFAULT);
}

/* Linear scaling (position interpolation; siiRL's example override): its factor, required and > 0,
   read from either spelling and written back with the object's own keys; in messages by name. */
static void test_linear_rope(void **state)
{
    const char *dir = *state;
    df_model_config c, back;
    char b[512], path[512];
    const char *lin = ", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.5}";
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "qwen2", lin), NULL, &c), DF_OK);
    assert_true(c.rope_type == DF_ROPE_LINEAR && c.rope_factor == 2.5);
    char name[48];
    assert_string_equal(df_model_rope_name(&c, name, sizeof name), "linear scaling x2.5");
    assert_int_equal(df_model_max_positions(&c), c.max_position_embeddings);
    snprintf(path, sizeof path, "%s/config.json", dir);
    for (int fresh = 0; fresh < 2; fresh++) {
        assert_int_equal(df_model_config_save(&c, fresh ? NULL : small(b, sizeof b, "qwen2", lin), path), DF_OK);
        assert_int_equal(df_model_config_load(path, &back), DF_OK);
        assert_true(back.rope_type == DF_ROPE_LINEAR && back.rope_factor == 2.5);
        json_t *j = json_load_file(path, 0, NULL);
        json_t *rs = json_object_get(j, "rope_scaling");
        assert_string_equal(json_string_value(json_object_get(rs, "rope_type")), "linear");
        assert_true(fresh ? !json_object_get(rs, "type") : !!json_object_get(rs, "type"));
        assert_int_equal(json_object_size(rs), fresh ? 2 : 3);
        json_decref(j);
    }
    expect_error(small(b, sizeof b, "llama", ", \"rope_scaling\": {\"rope_type\": \"linear\"}"), DF_EINVAL,
                 "key \"rope_scaling\" (linear) has no \"factor\"");
    expect_error(small(b, sizeof b, "llama", ", \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": \"2\"}"),
                 DF_EINVAL, "key \"rope_scaling.factor\" must be a number");
    expect_error(small(b, sizeof b, "llama", ", \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 0}"),
                 DF_EINVAL, "\"rope_scaling.factor\" must be > 0");
    c.rope_factor = -1;
    assert_int_equal(df_model_config_validate(&c), DF_EINVAL);
}

/*
 * YaRN (HF _compute_yarn_parameters, transformers 4.56) by hand: head_dim 16 (8 frequencies),
 * theta 1e4, factor 4, original_max_position_embeddings 32, beta_fast 32 / beta_slow 1.
 * The correction dims d(rot) = 16 ln(32 / (rot 2 pi)) / (2 ln 1e4):
 *   d(32) = 16 ln(1 / (2 pi)) / 18.4207 = -1.59636 -> floor -2 -> max(., 0) = 0 = lo
 *   d(1)  = 16 ln(32 / (2 pi)) / 18.4207 = 1.41394 -> ceil 2 -> min(., 15) = 2 = hi
 * ramp r_i = clamp((i - 0) / 2, 0, 1) = 0, 0.5, 1, 1, ...; e_i = 1 - r_i (extrapolation weight);
 * p_i = 1e4^(2i / 16) = 10^(i / 2); f_i = (1 / (4 p_i)) (1 - e_i) + (1 / p_i) e_i:
 *   f_0 = 1 (all extrapolated), f_1 = (10^-0.5 + 10^-0.5 / 4) / 2 = 0.19764235376052372,
 *   f_i = 10^(-i/2) / 4 for i >= 2 (all interpolated);
 * attention factor 0.1 ln 4 + 1 = 1.138629436111989.
 * Without truncate: lo = max(-1.59636, 0) = 0, hi = 1.41394, r_1 = 1 / 1.41394 = 0.70724,
 *   f_1 = 10^-0.5 (0.70724 / 4 + 0.29276) = 0.14849024701094485, f_i (i >= 2) as above.
 * The C code runs the chain in float32 as PyTorch does (powf, a reciprocal, a product, the
 * ramp's subtraction and division, two products and a sum: at most 8 roundings of u = 2^-24
 * each, relative): |f - f_exact| <= 8u |f| covers it with the double references here.
 */
static void expect_freqs(const df_model_config *c, const double *want, int n)
{
    float f[DF_MAX_HEAD_DIM / 2];
    df_rope_inv_freq(f, c);
    for (int i = 0; i < n; i++)
        if (!(fabs(f[i] - want[i]) <= 8 * ldexp(1.0, -24) * fabs(want[i])))
            fail_msg("yarn inv_freq[%d] = %.9g, want %.9g", i, f[i], want[i]);
}

static void test_yarn_rope(void **state)
{
    const char *dir = *state;
    df_model_config c, back, d;
    char b[1024], ex[512], path[512], name[48];
    const char *pre = ", \"head_dim\": 16, \"rope_theta\": 10000.0, \"max_position_embeddings\": 128";
    snprintf(ex, sizeof ex, "%s, \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, "
                            "\"original_max_position_embeddings\": 32}", pre);
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "qwen3", ex), NULL, &c), DF_OK);
    assert_int_equal(c.rope_type, DF_ROPE_YARN);
    assert_true(c.rope_factor == 4.0 && c.rope_original_max_pos == 32);
    assert_true(c.rope_beta_fast == 32 && c.rope_beta_slow == 1 && c.rope_truncate);
    assert_true(c.rope_mscale == 0 && c.rope_mscale_all_dim == 0);
    assert_true(fabs(c.rope_attention_factor - 1.138629436111989) < 1e-15);
    assert_true(df_rope_attention_factor(&c) == (float)c.rope_attention_factor);
    assert_string_equal(df_model_rope_name(&c, name, sizeof name), "yarn x4");
    assert_int_equal(df_model_max_positions(&c), 128);
    double want[8] = {1.0, 0.19764235376052372};
    for (int i = 2; i < 8; i++)
        want[i] = 0.25 * pow(10.0, -i / 2.0);
    expect_freqs(&c, want, 8);
    /* the tables carry the attention factor: position 0 is (factor, 0), position 1 rotated */
    float cs[2 * 8], sn[2 * 8];
    df_rope_model_table(cs, sn, 2, &c);
    assert_true(cs[3] == (float)c.rope_attention_factor && sn[3] == 0.0f);
    assert_true(fabs(cs[8] - 1.138629436111989 * cos(1.0)) < 1e-6 && fabs(sn[9] - 1.138629436111989 * sin(0.19764235376052372)) < 1e-6);
    /* truncate false: the correction range stays fractional */
    snprintf(ex, sizeof ex, "%s, \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, "
                            "\"original_max_position_embeddings\": 32, \"truncate\": false}", pre);
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "qwen3", ex), NULL, &c), DF_OK);
    assert_false(c.rope_truncate);
    want[1] = 0.14849024701094485;
    expect_freqs(&c, want, 8);
    /* no original_max_position_embeddings: max_position_embeddings (HF `or`), here 32 itself;
       beta_fast / beta_slow null or 0 are the defaults (HF `or 32` / `or 1`) */
    snprintf(ex, sizeof ex, ", \"head_dim\": 16, \"rope_theta\": 10000.0, \"max_position_embeddings\": 32, \"rope_scaling\": "
                            "{\"type\": \"yarn\", \"factor\": 4, \"beta_fast\": null, \"beta_slow\": 0}");
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "llama", ex), NULL, &c), DF_OK);
    assert_true(c.rope_type == DF_ROPE_YARN && c.rope_original_max_pos == 32);
    assert_true(c.rope_beta_fast == 32 && c.rope_beta_slow == 1);
    want[1] = 0.19764235376052372;
    expect_freqs(&c, want, 8);
    /* beta_fast / beta_slow swapped: lo = floor(d(1)) = 1, hi = ceil(d(32)) = -1: another table */
    snprintf(ex, sizeof ex, "%s, \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, "
                            "\"original_max_position_embeddings\": 32, \"beta_fast\": 1, \"beta_slow\": 32}, "
                            "\"num_key_value_heads\": 4", pre);
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "mistral", ex), NULL, &c), DF_OK);
    assert_true(c.rope_beta_fast == 1 && c.rope_beta_slow == 32);
    d = c;
    d.rope_beta_fast = 32, d.rope_beta_slow = 1;
    assert_false(df_rope_same(&c, &d));
    /* the attention factor: given; mscale / mscale_all_dim both (DeepSeek-V3's form); mscale alone
       does not count (HF `if mscale and mscale_all_dim`); a factor <= 1 gives 1 */
    const char *afs[][2] = {{"\"attention_factor\": 0.8", "0.8"},
                            {"\"mscale\": 1.0, \"mscale_all_dim\": 0.5", "1.0648216253695715"},
                            {"\"mscale\": 0.707", "1.138629436111989"},
                            {"\"mscale\": 0.5, \"mscale_all_dim\": 0", "1.138629436111989"}};
    for (int i = 0; i < 4; i++) {
        snprintf(ex, sizeof ex, "%s, \"rope_parameters\": {\"rope_type\": \"yarn\", \"rope_theta\": 10000.0, "
                                "\"factor\": 4.0, %s}", pre, afs[i][0]);
        assert_int_equal(df_model_config_parse(small(b, sizeof b, i % 2 ? "olmo2" : "qwen2", ex), NULL, &c), DF_OK);
        assert_true(fabs(c.rope_attention_factor - atof(afs[i][1])) < 1e-15);
        assert_true(c.rope_original_max_pos == 128);
    }
    snprintf(ex, sizeof ex, "%s, \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 0.5}", pre);
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "qwen3", ex), NULL, &c), DF_OK);
    assert_true(c.rope_attention_factor == 1.0);
    /* refused: other families, and malformed values, naming the key */
    snprintf(ex, sizeof ex, "%s, \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}", pre);
    expect_error(small(b, sizeof b, "phi3", ex), DF_EUNSUPPORTED,
                 "key \"rope_scaling\": rope_type \"yarn\" is not supported for phi3 models");
    expect_error(small(b, sizeof b, "gemma3_text",
                       ", \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"yarn\", \"factor\": 4.0}, "
                       "\"sliding_attention\": {\"rope_type\": \"default\"}}"),
                 DF_EUNSUPPORTED, "key \"rope_parameters.full_attention\": rope_type \"yarn\" is not supported");
    expect_error(small(b, sizeof b, "gemma3_text",
                       ", \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"default\"}, "
                       "\"sliding_attention\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}"),
                 DF_EUNSUPPORTED, "only plain RoPE");
    const char *bad[][2] = {
        {"\"original_max_position_embeddings\": 32", "key \"rope_scaling\" (yarn) has no \"factor\""},
        {"\"factor\": \"4\"", "key \"rope_scaling.factor\" must be a number, got a string"},
        {"\"factor\": 0", "key \"rope_scaling.factor\" must be a number > 0"},
        {"\"factor\": 4, \"beta_fast\": \"32\"", "key \"rope_scaling.beta_fast\" must be a number"},
        {"\"factor\": 4, \"beta_slow\": -1", "beta_fast and beta_slow must be > 0"},
        {"\"factor\": 4, \"original_max_position_embeddings\": 32.5",
         "key \"rope_scaling.original_max_position_embeddings\" must be an integer"},
        {"\"factor\": 4, \"original_max_position_embeddings\": 0",
         "key \"rope_scaling.original_max_position_embeddings\" must be > 0"},
        {"\"factor\": 4, \"attention_factor\": -1", "key \"rope_scaling.attention_factor\" must be a number > 0"},
        {"\"factor\": 4, \"mscale\": true", "key \"rope_scaling.mscale\" must be a number"},
        {"\"factor\": 4, \"truncate\": \"no\"", "key \"rope_scaling.truncate\" must be a boolean"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(ex, sizeof ex, "%s, \"rope_scaling\": {\"rope_type\": \"yarn\", %s}", pre, bad[i][0]);
        expect_error(small(b, sizeof b, "qwen3", ex), DF_EINVAL, bad[i][1]);
    }
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "qwen3", ", \"rope_theta\": 0, \"rope_scaling\": "
                                                 "{\"rope_type\": \"yarn\", \"factor\": 4}"), NULL, &d), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "rope_theta"));
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "qwen3", ", \"rope_theta\": 1, \"rope_scaling\": "
                                                 "{\"rope_type\": \"yarn\", \"factor\": 4}"), NULL, &d), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "yarn rope scaling needs rope_theta > 1 (got 1)"));
    /* save / load round trips, fresh and over the original (its "type" kept) */
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char *rts[] = {"\"rope_type\": \"yarn\", \"factor\": 4.0",
                         "\"type\": \"yarn\", \"factor\": 8.0, \"original_max_position_embeddings\": 16, "
                         "\"beta_fast\": 24.0, \"beta_slow\": 2.0, \"mscale\": 1.0, \"mscale_all_dim\": 0.5, "
                         "\"truncate\": false",
                         "\"rope_type\": \"yarn\", \"factor\": 2.0, \"attention_factor\": 0.9"};
    char orig[1024];
    for (int i = 0; i < 3; i++) {
        snprintf(ex, sizeof ex, "%s, \"rope_scaling\": {%s}", pre, rts[i]);
        small(orig, sizeof orig, "qwen3", ex);
        assert_int_equal(df_model_config_parse(orig, NULL, &c), DF_OK);
        for (int fresh = 0; fresh < 2; fresh++) {
            assert_int_equal(df_model_config_save(&c, fresh ? NULL : orig, path), DF_OK);
            assert_int_equal(df_model_config_load(path, &back), DF_OK);
            assert_int_equal(back.rope_type, DF_ROPE_YARN);
            assert_true(back.rope_factor == c.rope_factor && back.rope_original_max_pos == c.rope_original_max_pos);
            assert_true(back.rope_beta_fast == c.rope_beta_fast && back.rope_beta_slow == c.rope_beta_slow);
            assert_true(back.rope_mscale == c.rope_mscale && back.rope_mscale_all_dim == c.rope_mscale_all_dim);
            assert_true(back.rope_truncate == c.rope_truncate);
            assert_true(back.rope_attention_factor == c.rope_attention_factor);
            assert_true(df_rope_same(&c, &back));
            json_t *j = json_load_file(path, 0, NULL);
            json_t *rs = json_object_get(j, "rope_scaling");
            assert_string_equal(json_string_value(json_object_get(rs, "rope_type")), "yarn");
            assert_true(!fresh && i == 1 ? !!json_object_get(rs, "type") : !json_object_get(rs, "type"));
            /* a derived attention factor and the default truncate are left to HF to derive */
            assert_true((json_object_get(rs, "attention_factor") != NULL) == (i == 2));
            assert_true((json_object_get(rs, "truncate") != NULL) == (i == 1));
            assert_true((json_object_get(rs, "mscale") != NULL) == (i == 1));
            json_decref(j);
        }
    }
    /* a config built in code is checked too */
    assert_int_equal(df_model_config_validate(&c), DF_OK);
    d = c;
    d.rope_beta_slow = -1;
    assert_int_equal(df_model_config_validate(&d), DF_EINVAL);
    d = c;
    d.rope_attention_factor = 0;
    assert_int_equal(df_model_config_validate(&d), DF_EINVAL);
    d = c;
    snprintf(d.model_type, sizeof d.model_type, "phi3");
    assert_int_equal(df_model_config_validate(&d), DF_EINVAL);
}

static void test_llama_attention_bias(void **state)
{
    (void)state;
    df_model_config c;
    char b[512];
    assert_int_equal(
        df_model_config_parse(small(b, sizeof b, "llama", ", \"attention_bias\": true"), NULL, &c), DF_OK);
    assert_true(c.attention_bias && c.o_proj_bias);
    df_model *m;
    assert_int_equal(df_model_create(&c, &m), DF_OK);
    const df_param_desc *d = df_model_find_tensor(m, "model.layers.3.self_attn.o_proj.bias");
    assert_non_null(d);
    assert_int_equal(d->shape[0], 64);
    assert_ptr_equal(m->w.layers[3].bo, m->params + d->offset);
    assert_non_null(df_model_find_tensor(m, "model.layers.0.self_attn.v_proj.bias"));
    df_model_free(m);
    /* qwen2: q/k/v biases only, whatever attention_bias says */
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "qwen2", ""), NULL, &c), DF_OK);
    assert_true(c.attention_bias && !c.o_proj_bias);
    /* validate: the features must be the type's */
    c.o_proj_bias = true;
    assert_error_mentions(df_model_config_validate(&c), DF_EINVAL, "does not exist in qwen2");
    c.o_proj_bias = false, c.qk_norm = true;
    assert_error_mentions(df_model_config_validate(&c), DF_EINVAL, "q/k norms");
}

static void test_sliding_window(void **state)
{
    (void)state;
    df_model_config c;
    char b[1024];
    /* Qwen2Config: layers with index >= max_window_layers use the window */
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "qwen2",
                                                 ", \"use_sliding_window\": true, "
                                                 "\"sliding_window\": 16, \"max_window_layers\": 3"),
                                           NULL, &c),
                     DF_OK);
    assert_int_equal(c.sliding_window, 16);
    assert_int_equal(c.max_window_layers, 3);
    for (int l = 0; l < 4; l++)
        assert_int_equal(df_model_layer_window(&c, l), l >= 3 ? 16 : 0);
    /* defaults: sliding_window 4096, max_window_layers 28 (no layer of 4 windowed) */
    assert_int_equal(
        df_model_config_parse(small(b, sizeof b, "qwen3", ", \"use_sliding_window\": true"), NULL, &c),
        DF_OK);
    assert_int_equal(c.sliding_window, 4096);
    assert_int_equal(df_model_layer_window(&c, 3), 0);
    /* null sliding_window: no window (HF's None); use_sliding_window false: none either */
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "qwen2",
                                                 ", \"use_sliding_window\": true, "
                                                 "\"sliding_window\": null, \"max_window_layers\": 0"),
                                           NULL, &c),
                     DF_OK);
    assert_int_equal(df_model_layer_window(&c, 3), 0);
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "qwen2",
                                                 ", \"sliding_window\": 8, "
                                                 "\"max_window_layers\": 0"),
                                           NULL, &c),
                     DF_OK);
    assert_int_equal(df_model_layer_window(&c, 3), 0);
    /* layer_types (transformers >= 4.53) names the windowed layers */
    assert_int_equal(
        df_model_config_parse(small(b, sizeof b, "qwen2",
                                    ", \"use_sliding_window\": true, "
                                    "\"sliding_window\": 8, \"max_window_layers\": 3, \"layer_types\": "
                                    "[\"full_attention\", \"sliding_attention\", \"sliding_attention\", "
                                    "\"sliding_attention\"]"),
                              NULL, &c),
        DF_OK);
    assert_int_equal(c.max_window_layers, 1);
    assert_int_equal(df_model_layer_window(&c, 1), 8);
    /* a full layer after a windowed one (per-layer types: df_model_config.full_layers) */
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "qwen2",
                                                 ", \"use_sliding_window\": true, \"sliding_window\": 8, "
                                                 "\"layer_types\": [\"sliding_attention\", \"full_attention\", "
                                                 "\"sliding_attention\", \"full_attention\"]"),
                                           NULL, &c),
                     DF_OK);
    assert_int_equal(c.max_window_layers, 0);
    assert_true(df_model_layer_window(&c, 0) == 8 && df_model_layer_window(&c, 1) == 0 &&
                df_model_layer_window(&c, 2) == 8 && df_model_layer_window(&c, 3) == 0);
    char *out = NULL; /* and written back as they were read */
    assert_int_equal(df_model_config_to_json(&c, b, &out), DF_OK);
    json_t *j = json_loads(out, 0, NULL);
    json_t *lt = json_object_get(j, "layer_types");
    assert_string_equal(json_string_value(json_array_get(lt, 1)), "full_attention");
    assert_string_equal(json_string_value(json_array_get(lt, 2)), "sliding_attention");
    json_decref(j);
    free(out);
    expect_error(small(b, sizeof b, "qwen2",
                       ", \"layer_types\": [\"full_attention\", \"full_attention\", "
                       "\"full_attention\", \"sliding_attention\"]"),
                 DF_EUNSUPPORTED, "there is no window");
    expect_error(small(b, sizeof b, "qwen2", ", \"layer_types\": [\"full_attention\"]"), DF_EINVAL,
                 "key \"layer_types\" must be a list of num_hidden_layers (4) strings");
    expect_error(small(b, sizeof b, "qwen2", ", \"use_sliding_window\": true, \"sliding_window\": 0"),
                 DF_EINVAL, "key \"sliding_window\" must be > 0");
    expect_error(small(b, sizeof b, "llama", ", \"use_sliding_window\": true"), DF_EUNSUPPORTED,
                 "llama has no sliding-window attention");
}

/* MistralConfig: the Llama layer without biases, sliding_window (default 4096, null: none) on
   every layer, num_key_value_heads 8 by default; written back as transformers reads it. */
static void test_mistral(void **state)
{
    const char *dir = *state;
    df_model_config c, back;
    char b[1024], path[512];
    assert_int_equal(df_model_config_parse(k_mistral_v01, NULL, &c), DF_OK);
    assert_string_equal(c.model_type, "mistral");
    assert_true(!c.attention_bias && !c.o_proj_bias && !c.qk_norm);
    assert_int_equal(c.num_key_value_heads, 8);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.sliding_window, 4096);
    assert_int_equal(df_model_layer_window(&c, 0), 4096);
    assert_int_equal(df_model_layer_window(&c, 31), 4096);
    assert_true(c.bos_token_id == 1 && c.n_eos == 1 && c.eos_token_ids[0] == 2);
    assert_int_equal(df_model_config_parse(k_mistral_v03, NULL, &c), DF_OK);
    assert_int_equal(c.sliding_window, 0);
    assert_true(c.rope_theta == 1e6);
    /* defaults: 8 kv heads, a 4096 window; an attention_bias key is ignored as in transformers */
    assert_int_equal(df_model_config_parse("{\"model_type\": \"mistral\", \"vocab_size\": 100, \"hidden_size\": 64, "
                                           "\"intermediate_size\": 96, \"num_hidden_layers\": 2, "
                                           "\"num_attention_heads\": 16, \"attention_bias\": true, "
                                           "\"head_dim\": 8}", NULL, &c),
                     DF_OK);
    assert_true(c.num_key_value_heads == 8 && c.sliding_window == 4096 && !c.attention_bias);
    assert_int_equal(c.head_dim, 8);
    assert_int_equal(c.max_position_embeddings, 131072);
    expect_error(small(b, sizeof b, "mistral", ", \"sliding_window\": 0"), DF_EINVAL,
                 "key \"sliding_window\" must be > 0 or null");
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char *srcs[] = {k_mistral_v01, k_mistral_v03};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(df_model_config_parse(srcs[i], NULL, &c), DF_OK);
        for (int fresh = 0; fresh < 2; fresh++) {
            assert_int_equal(df_model_config_save(&c, fresh ? NULL : srcs[i], path), DF_OK);
            assert_int_equal(df_model_config_load(path, &back), DF_OK);
            assert_int_equal(back.sliding_window, c.sliding_window);
            assert_int_equal(back.max_window_layers, 0);
            assert_int_equal(back.num_key_value_heads, 8);
            json_t *j = json_load_file(path, 0, NULL);
            assert_non_null(j);
            assert_string_equal(json_string_value(json_array_get(json_object_get(j, "architectures"), 0)),
                                "MistralForCausalLM");
            json_t *sw = json_object_get(j, "sliding_window");
            assert_true(i == 0 ? json_integer_value(sw) == 4096 : json_is_null(sw));
            assert_null(json_object_get(j, "use_sliding_window")); /* MistralConfig has none */
            assert_null(json_object_get(j, "max_window_layers"));
            assert_null(json_object_get(j, "attention_bias"));
            json_decref(j);
        }
    }
    c.num_labels = 1; /* a Mistral critic */
    assert_int_equal(df_model_config_save(&c, NULL, path), DF_OK);
    json_t *j = json_load_file(path, 0, NULL);
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "architectures"), 0)),
                        "MistralForTokenClassification");
    json_decref(j);
}

/* Phi-3: Phi3Config's defaults, the window on every layer when set, LongRoPE (Phi-3 128k /
   Phi-3.5), what stays refused (dropout, longrope outside phi3), and save round trips. */
static void test_phi3(void **state)
{
    const char *dir = *state;
    df_model_config c, back;
    char b[1024], path[512];
    assert_int_equal(df_model_config_parse(k_phi3_mini, NULL, &c), DF_OK);
    assert_string_equal(c.model_type, "phi3");
    assert_true(!c.attention_bias && !c.o_proj_bias && !c.qk_norm && !c.tie_word_embeddings);
    assert_int_equal(c.head_dim, 96);
    assert_int_equal(c.num_key_value_heads, 32);
    assert_int_equal(df_model_layer_window(&c, 0), 2047);
    assert_int_equal(df_model_layer_window(&c, 31), 2047);
    assert_true(c.bos_token_id == 1 && c.n_eos == 1 && c.eos_token_ids[0] == 32000);
    /* defaults: no window, 4096 positions, eps 1e-5, bos 1 / eos 32000; attention_bias ignored */
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "phi3", ", \"attention_bias\": true"), NULL, &c), DF_OK);
    assert_true(c.sliding_window == 0 && !c.attention_bias && c.num_key_value_heads == 4);
    assert_int_equal(c.max_position_embeddings, 4096);
    assert_true(c.rms_norm_eps == 1e-5 && c.rope_theta == 1e4);
    assert_true(c.bos_token_id == 1 && c.eos_token_ids[0] == 32000);
    /* longrope (Phi-3 128k, Phi-3.5): head_dim / 2 factors in each list, phi3 only */
    const char *lr = ", \"max_position_embeddings\": 131072, \"original_max_position_embeddings\": 4096, "
                     "\"rope_scaling\": {\"type\": \"%s\", \"short_factor\": [%s], \"long_factor\": [%s]%s}";
    char ex[600];
    snprintf(ex, sizeof ex, lr, "longrope", "1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7", "2, 2, 2, 2, 2, 2, 2, 2", "");
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "phi3", ex), NULL, &c), DF_OK);
    assert_int_equal(c.rope_type, DF_ROPE_LONGROPE);
    assert_int_equal(c.rope_original_max_pos, 4096);
    assert_true(c.rope_attention_factor == sqrt(1 + log(32.0) / log(4096.0)));
    assert_int_equal(df_model_max_positions(&c), 4096);
    snprintf(ex, sizeof ex, lr, "su", "1, 1, 1, 1, 1, 1, 1, 1", "2, 2, 2, 2, 2, 2, 2, 2", ", \"attention_factor\": 1.5");
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "phi3", ex), NULL, &c), DF_OK);
    assert_true(c.rope_type == DF_ROPE_LONGROPE && c.rope_attention_factor == 1.5);
    /* Phi-3 128k / 3.5's window (262144) is longer than any sequence: no layer is windowed, so a
       backend without windowed attention (CUDA) runs it; the file keeps it */
    snprintf(ex, sizeof ex, lr, "longrope", "1, 1, 1, 1, 1, 1, 1, 1", "2, 2, 2, 2, 2, 2, 2, 2", "");
    strcat(ex, ", \"sliding_window\": 262144");
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "phi3", ex), NULL, &c), DF_OK);
    assert_int_equal(c.sliding_window, 262144);
    assert_int_equal(df_model_layer_window(&c, 3), 0);
    c.sliding_window = 4096; /* as long as the positions run: still nothing masked */
    assert_int_equal(df_model_layer_window(&c, 3), 0);
    c.sliding_window = 4095;
    assert_int_equal(df_model_layer_window(&c, 3), 4095);
    /* without original_max_position_embeddings: Phi3Config's 4096, as transformers reads it */
    snprintf(ex, sizeof ex, ", \"max_position_embeddings\": 131072, \"rope_scaling\": {\"type\": \"longrope\", "
                            "\"short_factor\": [1, 1, 1, 1, 1, 1, 1, 1], \"long_factor\": [2, 2, 2, 2, 2, 2, 2, 2]}");
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "phi3", ex), NULL, &c), DF_OK);
    assert_int_equal(c.rope_original_max_pos, 4096);
    snprintf(ex, sizeof ex, lr, "longrope", "1, 1, 1", "2, 2, 2", "");
    expect_error(small(b, sizeof b, "phi3", ex), DF_EINVAL, "\"short_factor\", a list of 8 numbers");
    snprintf(ex, sizeof ex, lr, "longrope", "1, 1, 1, 1, 1, 1, 1, 1", "2, 2, 2, 2, 2, 2, 2, 0", "");
    expect_error(small(b, sizeof b, "phi3", ex), DF_EINVAL, "long_factor[7] must be a number > 0");
    snprintf(ex, sizeof ex, lr, "longrope", "1, 1, 1, 1, 1, 1, 1, 1", "2, 2, 2, 2, 2, 2, 2, 2", "");
    expect_error(small(b, sizeof b, "llama", ex), DF_EUNSUPPORTED, "longrope is supported for phi3 models only");
    expect_error(small(b, sizeof b, "phi3", ", \"resid_pdrop\": 0.1"), DF_EUNSUPPORTED, "\"resid_pdrop\" 0.1");
    expect_error(small(b, sizeof b, "phi3", ", \"embd_pdrop\": \"0\""), DF_EINVAL, "\"embd_pdrop\" must be a number");
    expect_error(small(b, sizeof b, "qwen2", ", \"attention_dropout\": 0.05"), DF_EUNSUPPORTED,
                 "distflow has no dropout");
    /* the phi3 keys mean nothing to the others (transformers ignores them there) */
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "llama", ", \"resid_pdrop\": 0.1"), NULL, &c), DF_OK);
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(df_model_config_parse(k_phi3_mini, NULL, &c), DF_OK);
    for (int fresh = 0; fresh < 2; fresh++) {
        assert_int_equal(df_model_config_save(&c, fresh ? NULL : k_phi3_mini, path), DF_OK);
        assert_int_equal(df_model_config_load(path, &back), DF_OK);
        assert_int_equal(back.sliding_window, 2047);
        assert_int_equal(back.max_window_layers, 0);
        assert_int_equal(back.vocab_size, 32064);
        json_t *j = json_load_file(path, 0, NULL);
        assert_string_equal(json_string_value(json_array_get(json_object_get(j, "architectures"), 0)),
                            "Phi3ForCausalLM");
        assert_int_equal(json_integer_value(json_object_get(j, "sliding_window")), 2047);
        assert_null(json_object_get(j, "use_sliding_window"));
        assert_true(fresh ? !json_object_get(j, "attention_bias") : json_is_false(json_object_get(j, "attention_bias")));
        json_decref(j);
    }
}

/*
 * Phi-4-mini: partial_rotary_factor 0.75 rotates 96 of each head's 128 dims (HF int(head_dim *
 * factor)), so its LongRoPE lists have 48 factors; the published file parses to the published
 * size (3.84 B parameters, tied) and round-trips; bad factors and other families are refused.
 */
static void test_phi4_mini(void **state)
{
    const char *dir = *state;
    df_model_config c, back;
    char b[1024], path[512];
    assert_int_equal(df_model_config_parse(k_phi4_mini, NULL, &c), DF_OK);
    assert_true(c.head_dim == 128 && c.rope_dim == 96 && df_model_rope_dim(&c) == 96);
    assert_true(c.rope_type == DF_ROPE_LONGROPE && c.rope_short_factor[47] == 1.0 && c.rope_long_factor[47] == 47.77);
    assert_true(c.rope_attention_factor == sqrt(1 + log(32.0) / log(4096.0)));
    assert_true(c.tie_word_embeddings && c.vocab_size == 200064 && c.num_key_value_heads == 8);
    assert_true(c.bos_token_id == 199999 && c.n_eos == 1 && c.eos_token_ids[0] == 200020);
    assert_int_equal(df_model_max_positions(&c), 4096);
    assert_int_equal(df_model_layer_window(&c, 0), 0); /* 262144 over 4096 positions masks nothing */
    int64_t total = 0;
    assert_int_equal(df_model_param_count(&c, &total, NULL), DF_OK);
    assert_int_equal(total, 3836021760LL); /* Phi-4-mini's published 3.84 B */
    /* the rotated dims: 16 * f must be an even int >= 2; f in (0, 1] */
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "phi3", ", \"partial_rotary_factor\": 0.5"), NULL, &c),
                     DF_OK);
    assert_int_equal(c.rope_dim, 8);
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "phi3", ", \"partial_rotary_factor\": 1"), NULL, &c),
                     DF_OK);
    assert_int_equal(df_model_rope_dim(&c), 16);
    expect_error(small(b, sizeof b, "phi3", ", \"partial_rotary_factor\": 0.7"), DF_EINVAL,
                 "int(head_dim 16 * factor) = 11");
    expect_error(small(b, sizeof b, "phi3", ", \"partial_rotary_factor\": 0.1"), DF_EINVAL, "= 1)");
    expect_error(small(b, sizeof b, "phi3", ", \"partial_rotary_factor\": 1.5"), DF_EINVAL, "must be in (0, 1]");
    expect_error(small(b, sizeof b, "phi3", ", \"partial_rotary_factor\": -0.5"), DF_EINVAL, "must be in (0, 1]");
    expect_error(small(b, sizeof b, "phi3", ", \"partial_rotary_factor\": \"0.75\""), DF_EINVAL,
                 "\"partial_rotary_factor\" must be a number");
    expect_error(small(b, sizeof b, "llama", ", \"partial_rotary_factor\": 0.5"), DF_EUNSUPPORTED,
                 "not supported for llama");
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "qwen2", ", \"partial_rotary_factor\": 1.0"), NULL, &c),
                     DF_OK);
    /* longrope lists are sized by the rotated dims: 4 factors for 8 of 16 */
    const char *lr = ", \"partial_rotary_factor\": 0.5, \"rope_scaling\": {\"type\": \"longrope\", "
                     "\"short_factor\": [%s], \"long_factor\": [2, 2, 2, 2]}";
    char ex[300];
    snprintf(ex, sizeof ex, lr, "1, 1.5, 2, 3");
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "phi3", ex), NULL, &c), DF_OK);
    assert_true(c.rope_dim == 8 && c.rope_short_factor[3] == 3.0);
    snprintf(ex, sizeof ex, lr, "1, 1, 1, 1, 1, 1, 1, 1");
    expect_error(small(b, sizeof b, "phi3", ex), DF_EINVAL, "\"short_factor\", a list of 4 numbers");
    /* a model validated outside the parser: the rotated dims are even, <= head_dim, phi3's */
    c.rope_dim = 7;
    assert_int_equal(df_model_config_validate(&c), DF_EINVAL);
    c.rope_dim = 18;
    assert_int_equal(df_model_config_validate(&c), DF_EINVAL);
    df_model_config_defaults(&c);
    c.rope_dim = 64;
    assert_int_equal(df_model_config_validate(&c), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "qwen2 rotates whole heads"));
    /* save: the file's factor kept; a fresh file gets rope_dim / head_dim */
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(df_model_config_parse(k_phi4_mini, NULL, &c), DF_OK);
    for (int fresh = 0; fresh < 2; fresh++) {
        assert_int_equal(df_model_config_save(&c, fresh ? NULL : k_phi4_mini, path), DF_OK);
        assert_int_equal(df_model_config_load(path, &back), DF_OK);
        assert_true(back.rope_dim == 96 && back.rope_long_factor[46] == 44.16 && back.tie_word_embeddings);
        json_t *j = json_load_file(path, 0, NULL);
        assert_true(json_number_value(json_object_get(j, "partial_rotary_factor")) == 0.75);
        json_decref(j);
    }
    /* rope_dim / head_dim that HF's int() would truncate below rope_dim is raised to the next double */
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "phi3", ", \"head_dim\": 98"), NULL, &c), DF_OK);
    for (int64_t rd = 2; rd <= 98; rd += 2) {
        c.rope_dim = rd;
        assert_int_equal(df_model_config_save(&c, NULL, path), DF_OK);
        assert_int_equal(df_model_config_load(path, &back), DF_OK);
        if (df_model_rope_dim(&back) != rd)
            fail_msg("rope_dim %lld of head_dim 98 read back as %lld", (long long)rd, (long long)back.rope_dim);
    }
}

/* transformers 5 writes rope_parameters (with the theta) instead of rope_theta / rope_scaling. */
/* OLMo 2: the published 1B config, Olmo2Config's defaults, its layout (no input norm, full-width
   q/k norms, a post-feedforward norm), the features checked against the type, what stays refused,
   and save round trips (Olmo2ForCausalLM, no window keys, head_dim only when not derived). */
static void test_olmo2(void **state)
{
    const char *dir = *state;
    df_model_config c, back;
    char b[1024], path[512];
    assert_int_equal(df_model_config_parse(k_olmo2_1b, NULL, &c), DF_OK);
    assert_string_equal(c.model_type, "olmo2");
    assert_true(c.post_norm && c.qk_norm && c.qk_norm_full);
    assert_false(c.attention_bias || c.o_proj_bias || c.tie_word_embeddings);
    assert_true(c.hidden_size == 2048 && c.num_hidden_layers == 16 && c.intermediate_size == 8192);
    assert_true(c.num_attention_heads == 16 && c.num_key_value_heads == 16 && c.head_dim == 128);
    assert_true(c.vocab_size == 100352 && c.max_position_embeddings == 4096);
    assert_true(c.rope_theta == 500000.0 && c.rope_type == DF_ROPE_DEFAULT && c.rms_norm_eps == 1e-6);
    assert_true(c.sliding_window == 0 && c.bos_token_id == -1 && c.n_eos == 1 && c.eos_token_ids[0] == 100257);
    assert_int_equal(c.torch_dtype, DF_DTYPE_F32);
    /* the layout: 11 tensors a layer, q_norm / k_norm [2048], no input_layernorm */
    int64_t floats, tensors;
    assert_int_equal(df_model_param_count(&c, &floats, &tensors), DF_OK);
    assert_int_equal(tensors, 1 + 16 * 11 + 1 + 1);
    df_param_desc *d;
    int n;
    int64_t total;
    assert_int_equal(df_model_layout(&c, &d, &n, &total), DF_OK);
    assert_int_equal(total, floats);
    const char *want[11] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                            "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
                            "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                            "mlp.down_proj.weight", "post_feedforward_layernorm.weight"};
    for (int i = 0; i < 11; i++) {
        char full[96];
        snprintf(full, sizeof full, "model.layers.0.%s", want[i]);
        assert_string_equal(d[1 + i].name, full);
    }
    assert_true(d[5].ndim == 1 && d[5].shape[0] == 2048 && d[6].shape[0] == 2048 && d[11].shape[0] == 2048);
    /* 1.485B parameters: OLMo-2-0425-1B's count (embedding and head untied) */
    int64_t params = 0;
    for (int i = 0; i < n; i++)
        params += d[i].numel;
    assert_int_equal(params, 1484916736);
    free(d);
    /* Olmo2Config's defaults; GQA and attention_bias (all four projections) as the file says */
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "olmo2", ""), NULL, &c), DF_OK);
    assert_true(c.rms_norm_eps == 1e-5 && c.max_position_embeddings == 2048 && c.rope_theta == 10000.0);
    assert_true(c.num_key_value_heads == 4 && c.head_dim == 16 && !c.attention_bias && c.bos_token_id == -1);
    assert_true(c.n_eos == 1 && c.eos_token_ids[0] == 50279);
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "olmo2", ", \"attention_bias\": true, "
                                                 "\"num_key_value_heads\": 2, \"head_dim\": 32"), NULL, &c),
                     DF_OK);
    assert_true(c.attention_bias && c.o_proj_bias && c.num_key_value_heads == 2 && c.head_dim == 32);
    assert_int_equal(df_model_layout(&c, &d, &n, &total), DF_OK);
    assert_true(!strcmp(d[9].name, "model.layers.0.self_attn.q_norm.weight") && d[9].shape[0] == 128);
    assert_true(!strcmp(d[10].name, "model.layers.0.self_attn.k_norm.weight") && d[10].shape[0] == 64);
    free(d);
    /* refused as for llama, naming the key */
    expect_error(small(b, sizeof b, "olmo2", ", \"use_sliding_window\": true"), DF_EUNSUPPORTED,
                 "key \"use_sliding_window\" true: olmo2 has no sliding-window attention");
    expect_error(small(b, sizeof b, "olmo2", ", \"partial_rotary_factor\": 0.5"), DF_EUNSUPPORTED,
                 "\"partial_rotary_factor\" 0.5 is not supported for olmo2");
    expect_error(small(b, sizeof b, "olmo2", ", \"hidden_act\": \"gelu\""), DF_EUNSUPPORTED, "\"hidden_act\": \"gelu\"");
    expect_error(small(b, sizeof b, "olmo2", ", \"num_key_value_heads\": 3"), DF_EINVAL, "num_key_value_heads");
    /* a config whose features are not olmo2's is refused by validation, naming them */
    assert_int_equal(df_model_config_parse(k_olmo2_1b, NULL, &c), DF_OK);
    df_model_config v = c;
    v.post_norm = false;
    assert_error_mentions(df_model_config_validate(&v), DF_EINVAL, "olmo2: post-norm layers are not set");
    v = c;
    v.qk_norm_full = false; /* Qwen3's per-head norms */
    assert_error_mentions(df_model_config_validate(&v), DF_EINVAL, "olmo2: q/k norms are set per head");
    v = c;
    snprintf(v.model_type, sizeof v.model_type, "llama"); /* a llama with OLMo 2's layer */
    assert_error_mentions(df_model_config_validate(&v), DF_EINVAL, "llama: q/k norms are set over the whole projection");
    v.qk_norm = v.qk_norm_full = false;
    assert_error_mentions(df_model_config_validate(&v), DF_EINVAL, "llama: post-norm layers are set");
    v = c;
    v.sliding_window = 64;
    assert_error_mentions(df_model_config_validate(&v), DF_EINVAL, "olmo2 has no sliding-window attention");
    /* saves: Olmo2ForCausalLM, no window keys, head_dim only when it is not hidden / heads */
    snprintf(path, sizeof path, "%s/config.json", dir);
    for (int fresh = 0; fresh < 2; fresh++) {
        assert_int_equal(df_model_config_save(&c, fresh ? NULL : k_olmo2_1b, path), DF_OK);
        assert_int_equal(df_model_config_load(path, &back), DF_OK);
        assert_true(back.post_norm && back.qk_norm_full && back.rope_theta == 500000.0);
        assert_true(back.head_dim == 128 && back.num_key_value_heads == 16 && back.eos_token_ids[0] == 100257);
        json_t *j = json_load_file(path, 0, NULL);
        assert_non_null(j);
        assert_string_equal(json_string_value(json_array_get(json_object_get(j, "architectures"), 0)),
                            "Olmo2ForCausalLM");
        assert_null(json_object_get(j, "head_dim"));
        assert_null(json_object_get(j, "use_sliding_window"));
        assert_null(json_object_get(j, "sliding_window"));
        assert_null(json_object_get(j, "max_window_layers"));
        assert_true(json_is_false(json_object_get(j, "attention_bias")));
        assert_true(fresh || json_integer_value(json_object_get(j, "pad_token_id")) == 100277);
        json_decref(j);
    }
    c.head_dim = 64; /* not derived: written */
    assert_int_equal(df_model_config_save(&c, k_olmo2_1b, path), DF_OK);
    assert_int_equal(df_model_config_load(path, &back), DF_OK);
    assert_int_equal(back.head_dim, 64);
    c.head_dim = 128;
    c.num_labels = 1; /* an OLMo 2 critic */
    assert_int_equal(df_model_config_save(&c, NULL, path), DF_OK);
    json_t *j = json_load_file(path, 0, NULL);
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "architectures"), 0)),
                        "Olmo2ForTokenClassification");
    json_decref(j);
    assert_int_equal(df_model_config_load(path, &back), DF_OK);
    assert_true(back.num_labels == 1 && back.post_norm);
}

/* Gemma 3 (text): gemma-3-1b-it's published config and its 999,885,952 parameters, the sliding
   layers (every sixth full), Gemma3TextConfig's defaults, the per-type RoPE of transformers 5,
   every refusal naming its key and value, and save round trips (Gemma3ForCausalLM). */
static void test_gemma3(void **state)
{
    const char *dir = *state;
    df_model_config c, back;
    char b[1400], path[512];
    assert_int_equal(df_model_config_parse(k_gemma3_1b, NULL, &c), DF_OK);
    assert_string_equal(c.model_type, "gemma3_text");
    assert_true(c.post_norm && c.sandwich_norm && c.norm_plus_one && c.embed_scale && c.geglu);
    assert_true(c.qk_norm && !c.qk_norm_full && !c.attention_bias && !c.o_proj_bias && c.tie_word_embeddings);
    assert_true(c.hidden_size == 1152 && c.num_hidden_layers == 26 && c.intermediate_size == 6912);
    assert_true(c.num_attention_heads == 4 && c.num_key_value_heads == 1 && c.head_dim == 256);
    assert_true(c.vocab_size == 262144 && c.max_position_embeddings == 32768 && c.rms_norm_eps == 1e-6);
    assert_true(c.rope_theta == 1e6 && c.rope_local_theta == 1e4 && c.rope_type == DF_ROPE_DEFAULT);
    assert_true(c.query_pre_attn_scalar == 256 && df_model_q_scale(&c) == 1.0f);
    assert_true(df_model_embed_scale(&c) == (float)sqrt(1152.0));
    assert_true(c.bos_token_id == 2 && c.n_eos == 2 && c.eos_token_ids[1] == 106 && c.torch_dtype == DF_DTYPE_BF16);
    for (int64_t l = 0; l < 26; l++) { /* layers 5, 11, 17, 23 full; the others windowed, local RoPE */
        const bool full = (l + 1) % 6 == 0;
        assert_int_equal(df_model_layer_window(&c, l), full ? 0 : 512);
        assert_int_equal(df_model_layer_local_rope(&c, l), !full);
    }
    /* 13 tensors a layer; 999,885,952 parameters: embedding 262144 x 1152 (tied), per layer q / o
       2 x 1024 x 1152, k / v 2 x 256 x 1152, q/k norms 2 x 256, four norms 4 x 1152, MLP 3 x 6912 x
       1152, the final norm 1152 */
    int64_t floats, tensors;
    assert_int_equal(df_model_param_count(&c, &floats, &tensors), DF_OK);
    assert_int_equal(tensors, 1 + 26 * 13 + 1);
    df_param_desc *d;
    int n;
    int64_t total, params = 0;
    assert_int_equal(df_model_layout(&c, &d, &n, &total), DF_OK);
    const char *want[13] = {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                            "self_attn.v_proj.weight", "self_attn.o_proj.weight", "self_attn.q_norm.weight",
                            "self_attn.k_norm.weight", "post_attention_layernorm.weight",
                            "pre_feedforward_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                            "mlp.down_proj.weight", "post_feedforward_layernorm.weight"};
    for (int i = 0; i < 13; i++) {
        char full[96];
        snprintf(full, sizeof full, "model.layers.0.%s", want[i]);
        assert_string_equal(d[1 + i].name, full);
    }
    assert_true(d[6].shape[0] == 256 && d[7].shape[0] == 256 && d[9].shape[0] == 1152);
    for (int i = 0; i < n; i++)
        params += d[i].numel;
    assert_int_equal(params, 999885952);
    free(d);
    /* Gemma3TextConfig's defaults; layer_types wins over the pattern; q scale for qpas != head_dim */
    assert_int_equal(df_model_config_parse("{\"model_type\": \"gemma3_text\", \"vocab_size\": 100, \"hidden_size\": "
                                           "64, \"intermediate_size\": 96, \"num_hidden_layers\": 7, "
                                           "\"num_attention_heads\": 4}", NULL, &c), DF_OK);
    assert_true(c.num_key_value_heads == 4 && c.head_dim == 256 && c.sliding_window == 4096);
    assert_true(c.max_position_embeddings == 131072 && c.rope_theta == 1e6 && c.rope_local_theta == 1e4);
    assert_true(c.query_pre_attn_scalar == 256 && c.tie_word_embeddings && c.bos_token_id == 2);
    assert_true(df_model_layer_sliding(&c, 4) && !df_model_layer_sliding(&c, 5) && df_model_layer_sliding(&c, 6));
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "gemma3_text",
                                                 ", \"head_dim\": 16, \"query_pre_attn_scalar\": 24, "
                                                 "\"sliding_window_pattern\": 2, \"layer_types\": [\"full_attention\", "
                                                 "\"sliding_attention\", \"sliding_attention\", \"full_attention\"], "
                                                 "\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 8.0}"),
                                           NULL, &c), DF_OK);
    assert_true(!df_model_layer_sliding(&c, 0) && df_model_layer_sliding(&c, 1) && df_model_layer_sliding(&c, 2) &&
                !df_model_layer_sliding(&c, 3));
    assert_true(df_model_q_scale(&c) == (float)sqrt(16.0 / 24.0) && c.rope_type == DF_ROPE_LINEAR);
    /* transformers 5: rope_parameters per layer type */
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "gemma3_text",
                                                 ", \"rope_parameters\": {\"full_attention\": {\"rope_type\": "
                                                 "\"linear\", \"factor\": 8.0, \"rope_theta\": 1000000.0}, "
                                                 "\"sliding_attention\": {\"rope_type\": \"default\", "
                                                 "\"rope_theta\": 10000.0}}"),
                                           NULL, &c), DF_OK);
    assert_true(c.rope_type == DF_ROPE_LINEAR && c.rope_factor == 8 && c.rope_theta == 1e6 && c.rope_local_theta == 1e4);
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(df_model_config_save(&c, b, path), DF_OK);
    assert_int_equal(df_model_config_load(path, &back), DF_OK);
    assert_true(back.rope_type == DF_ROPE_LINEAR && back.rope_theta == 1e6 && back.rope_local_theta == 1e4);
    json_t *j = json_load_file(path, 0, NULL);
    json_t *rp = json_object_get(j, "rope_parameters");
    assert_true(json_number_value(json_object_get(json_object_get(rp, "sliding_attention"), "rope_theta")) == 1e4);
    assert_null(json_object_get(j, "rope_local_base_freq"));
    json_decref(j);
    expect_error(small(b, sizeof b, "gemma3_text", ", \"rope_parameters\": {\"full_attention\": {}, "
                       "\"sliding_attention\": {\"rope_type\": \"linear\", \"factor\": 2.0}}"),
                 DF_EUNSUPPORTED, "\"rope_parameters.sliding_attention\": only plain RoPE");
    expect_error(small(b, sizeof b, "gemma3_text", ", \"rope_parameters\": {\"full_attention\": {}}"),
                 DF_EINVAL, "must hold exactly the objects");
    /* refused, naming the key and the value */
    expect_error(small(b, sizeof b, "gemma3", ""), DF_EUNSUPPORTED, "only the text model, model_type \"gemma3_text\"");
    expect_error(small(b, sizeof b, "gemma3_text", ", \"final_logit_softcapping\": 30.0"), DF_EUNSUPPORTED,
                 "key \"final_logit_softcapping\" 30 is not supported");
    expect_error(small(b, sizeof b, "gemma3_text", ", \"attn_logit_softcapping\": 50.0"), DF_EUNSUPPORTED,
                 "key \"attn_logit_softcapping\" 50 is not supported");
    expect_error(small(b, sizeof b, "gemma3_text", ", \"attn_logit_softcapping\": \"x\""), DF_EUNSUPPORTED,
                 "key \"attn_logit_softcapping\" must be null");
    expect_error(small(b, sizeof b, "gemma3_text", ", \"use_bidirectional_attention\": true"), DF_EUNSUPPORTED,
                 "key \"use_bidirectional_attention\" must be false or null (distflow's decoders are causal), got true");
    expect_error(small(b, sizeof b, "gemma3_text", ", \"hidden_activation\": \"gelu\""), DF_EUNSUPPORTED,
                 "key \"hidden_activation\": \"gelu\" is not supported (gelu_pytorch_tanh)");
    expect_error(small(b, sizeof b, "gemma3_text", ", \"hidden_activation\": 1"), DF_EINVAL,
                 "key \"hidden_activation\" must be a string");
    expect_error(small(b, sizeof b, "gemma3_text", ", \"attention_dropout\": 0.1"), DF_EUNSUPPORTED,
                 "key \"attention_dropout\" 0.1 is not supported");
    expect_error(small(b, sizeof b, "gemma3_text", ", \"query_pre_attn_scalar\": 0"), DF_EINVAL,
                 "key \"query_pre_attn_scalar\" must be > 0 (got 0)");
    expect_error(small(b, sizeof b, "gemma3_text", ", \"rope_local_base_freq\": -1"), DF_EINVAL,
                 "key \"rope_local_base_freq\" must be > 0 (got -1)");
    expect_error(small(b, sizeof b, "gemma3_text", ", \"rope_local_base_freq\": \"10000\""), DF_EINVAL,
                 "key \"rope_local_base_freq\" must be a number, got a string");
    expect_error(small(b, sizeof b, "gemma3_text", ", \"sliding_window\": null"), DF_EUNSUPPORTED,
                 "key \"sliding_window\" null: gemma3_text needs its window");
    expect_error(small(b, sizeof b, "gemma3_text", ", \"sliding_window\": 0"), DF_EINVAL,
                 "key \"sliding_window\" must be > 0 (got 0)");
    expect_error(small(b, sizeof b, "gemma3_text", ", \"sliding_window_pattern\": 0"), DF_EINVAL,
                 "key \"sliding_window_pattern\" must be > 0 (got 0)");
    expect_error(small(b, sizeof b, "gemma3_text", ", \"layer_types\": [\"full_attention\"]"), DF_EINVAL,
                 "key \"layer_types\" must be a list of num_hidden_layers (4) strings");
    expect_error(small(b, sizeof b, "gemma3_text", ", \"layer_types\": [\"full_attention\", \"chunked\", "
                       "\"full_attention\", \"full_attention\"]"), DF_EUNSUPPORTED, "entry 1 is not");
    expect_error(small(b, sizeof b, "gemma3_text", ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 8.0}"),
                 DF_EUNSUPPORTED, "rope_type \"yarn\" is not supported");
    expect_error(small(b, sizeof b, "gemma3_text", ", \"mlp_bias\": true"), DF_EUNSUPPORTED, "key \"mlp_bias\" true");
    /* saves: Gemma3ForCausalLM, the file's keys kept, layer_types written for a fresh file */
    assert_int_equal(df_model_config_parse(k_gemma3_1b, NULL, &c), DF_OK);
    for (int fresh = 0; fresh < 2; fresh++) {
        assert_int_equal(df_model_config_save(&c, fresh ? NULL : k_gemma3_1b, path), DF_OK);
        assert_int_equal(df_model_config_load(path, &back), DF_OK);
        assert_true(back.sandwich_norm && back.norm_plus_one && back.geglu && back.embed_scale);
        assert_true(back.rope_local_theta == 1e4 && back.rope_theta == 1e6 && back.query_pre_attn_scalar == 256);
        assert_true(back.sliding_window == 512 && !memcmp(back.full_layers, c.full_layers, sizeof c.full_layers));
        assert_true(back.head_dim == 256 && back.num_key_value_heads == 1 && back.tie_word_embeddings);
        j = json_load_file(path, 0, NULL);
        assert_string_equal(json_string_value(json_array_get(json_object_get(j, "architectures"), 0)),
                            "Gemma3ForCausalLM");
        assert_string_equal(json_string_value(json_object_get(j, "hidden_activation")), "gelu_pytorch_tanh");
        assert_null(json_object_get(j, "hidden_act"));
        assert_null(json_object_get(j, "use_sliding_window"));
        assert_int_equal(json_integer_value(json_object_get(j, "query_pre_attn_scalar")), 256);
        assert_int_equal(json_integer_value(json_object_get(j, "rope_local_base_freq")), 10000);
        assert_true(json_is_null(json_object_get(j, "final_logit_softcapping")));
        assert_true(fresh ? json_array_size(json_object_get(j, "layer_types")) == 26
                          : json_integer_value(json_object_get(j, "sliding_window_pattern")) == 6);
        json_decref(j);
    }
    /* a config whose features are not gemma3_text's is refused by validation, naming them */
    df_model_config v = c;
    v.sandwich_norm = false;
    assert_error_mentions(df_model_config_validate(&v), DF_EINVAL, "gemma3_text: sandwich norms are not set");
    v = c;
    snprintf(v.model_type, sizeof v.model_type, "olmo2");
    v.qk_norm_full = true, v.sliding_window = 0;
    assert_error_mentions(df_model_config_validate(&v), DF_EINVAL, "olmo2: sandwich norms are set");
    v = c;
    v.sliding_window = 0;
    assert_error_mentions(df_model_config_validate(&v), DF_EINVAL, "gemma3_text needs a sliding_window > 0");
}

/* Gemma 2 (google/gemma-2-2b): Gemma 3's sandwich layer without q/k norms, one RoPE, the even
   layers windowed, the two soft-caps read, defaulted, nulled, refused when bad and written back. */
static void test_gemma2(void **state)
{
    const char *dir = *state;
    df_model_config c, back;
    char b[1400], path[512];
    assert_int_equal(df_model_config_parse(k_gemma2_2b, NULL, &c), DF_OK);
    assert_string_equal(c.model_type, "gemma2");
    assert_true(c.post_norm && c.sandwich_norm && c.norm_plus_one && c.embed_scale && c.geglu);
    assert_true(!c.qk_norm && !c.attention_bias && !c.o_proj_bias && c.tie_word_embeddings);
    assert_true(c.attn_logit_softcap == 50.0 && c.final_logit_softcap == 30.0);
    assert_true(c.num_attention_heads == 8 && c.num_key_value_heads == 4 && c.head_dim == 256);
    assert_true(c.rope_theta == 1e4 && c.rope_local_theta == 0 && c.query_pre_attn_scalar == 256);
    assert_true(df_model_embed_scale(&c) == (float)sqrt(2304.0));
    for (int64_t l = 0; l < 26; l++) { /* (l + 1) % 2 != 0: sliding; no local RoPE */
        assert_int_equal(df_model_layer_window(&c, l), l % 2 == 0 ? 4096 : 0);
        assert_false(df_model_layer_local_rope(&c, l));
    }
    /* 11 tensors a layer; 2,614,341,888 parameters (embedding 256000 x 2304 tied; per layer q / o
       2 x 2048 x 2304, k / v 2 x 1024 x 2304, four norms, MLP 3 x 9216 x 2304; the final norm) */
    int64_t floats, tensors;
    assert_int_equal(df_model_param_count(&c, &floats, &tensors), DF_OK);
    assert_int_equal(tensors, 1 + 26 * 11 + 1);
    assert_int_equal(floats, 2614341888LL);
    /* Gemma2Config's defaults; null soft-caps are none; layer_types wins; qpas 144 (27b) */
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "gemma2", ""), NULL, &c), DF_OK);
    assert_true(c.num_key_value_heads == 4 && c.head_dim == 256 && c.sliding_window == 4096);
    assert_true(c.max_position_embeddings == 8192 && c.rope_theta == 1e4 && c.query_pre_attn_scalar == 256);
    assert_true(c.attn_logit_softcap == 50 && c.final_logit_softcap == 30 && c.bos_token_id == 2);
    assert_true(df_model_layer_sliding(&c, 0) && !df_model_layer_sliding(&c, 1) && df_model_layer_sliding(&c, 2));
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "gemma2",
                                                 ", \"head_dim\": 16, \"query_pre_attn_scalar\": 144, "
                                                 "\"attn_logit_softcapping\": null, \"final_logit_softcapping\": null, "
                                                 "\"layer_types\": [\"full_attention\", \"sliding_attention\", "
                                                 "\"sliding_attention\", \"full_attention\"]"), NULL, &c), DF_OK);
    assert_true(c.attn_logit_softcap == 0 && c.final_logit_softcap == 0);
    assert_true(!df_model_layer_sliding(&c, 0) && df_model_layer_sliding(&c, 1) && !df_model_layer_sliding(&c, 3));
    assert_true(df_model_q_scale(&c) == (float)sqrt(16.0 / 144.0));
    expect_error(small(b, sizeof b, "gemma2", ", \"attn_logit_softcapping\": 0"), DF_EINVAL,
                 "key \"attn_logit_softcapping\" must be > 0 or null (got 0)");
    expect_error(small(b, sizeof b, "gemma2", ", \"final_logit_softcapping\": -3"), DF_EINVAL,
                 "key \"final_logit_softcapping\" must be > 0 or null (got -3)");
    expect_error(small(b, sizeof b, "gemma2", ", \"final_logit_softcapping\": \"30\""), DF_EINVAL,
                 "key \"final_logit_softcapping\" must be a number or null");
    expect_error(small(b, sizeof b, "gemma2", ", \"hidden_activation\": \"gelu\""), DF_EUNSUPPORTED,
                 "key \"hidden_activation\": \"gelu\" is not supported (gelu_pytorch_tanh)");
    expect_error(small(b, sizeof b, "gemma2", ", \"use_bidirectional_attention\": true"), DF_EUNSUPPORTED,
                 "key \"use_bidirectional_attention\" must be false or null");
    expect_error(small(b, sizeof b, "gemma2", ", \"sliding_window\": null"), DF_EUNSUPPORTED,
                 "key \"sliding_window\" null: gemma2 needs its window");
    expect_error(small(b, sizeof b, "gemma2", ", \"query_pre_attn_scalar\": -1"), DF_EINVAL,
                 "key \"query_pre_attn_scalar\" must be > 0");
    /* saves: Gemma2ForCausalLM, the soft-caps written back (null for none), for a fresh file and
       over the original */
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(df_model_config_parse(k_gemma2_2b, NULL, &c), DF_OK);
    c.attn_logit_softcap = 7.5;
    c.final_logit_softcap = 0;
    for (int fresh = 0; fresh < 2; fresh++) {
        assert_int_equal(df_model_config_save(&c, fresh ? NULL : k_gemma2_2b, path), DF_OK);
        assert_int_equal(df_model_config_load(path, &back), DF_OK);
        assert_string_equal(back.model_type, "gemma2");
        assert_true(back.attn_logit_softcap == 7.5 && back.final_logit_softcap == 0);
        assert_true(back.sandwich_norm && !back.qk_norm && back.query_pre_attn_scalar == 256);
        assert_true(back.sliding_window == 4096 && !memcmp(back.full_layers, c.full_layers, sizeof c.full_layers) &&
                    back.max_window_layers == c.max_window_layers);
        json_t *j = json_load_file(path, 0, NULL);
        assert_string_equal(json_string_value(json_array_get(json_object_get(j, "architectures"), 0)),
                            "Gemma2ForCausalLM");
        assert_true(json_number_value(json_object_get(j, "attn_logit_softcapping")) == 7.5);
        assert_true(json_is_null(json_object_get(j, "final_logit_softcapping")));
        assert_string_equal(json_string_value(json_object_get(j, "hidden_activation")), "gelu_pytorch_tanh");
        assert_null(json_object_get(j, "rope_local_base_freq"));
        json_decref(j);
    }
    /* validation: soft-caps are gemma2's; gemma2 has no q/k norms */
    df_model_config v;
    assert_int_equal(df_model_config_parse(k_gemma3_1b, NULL, &v), DF_OK);
    v.attn_logit_softcap = 50;
    assert_error_mentions(df_model_config_validate(&v), DF_EINVAL, "are gemma2's");
    v = c;
    v.qk_norm = true;
    assert_error_mentions(df_model_config_validate(&v), DF_EINVAL, "gemma2: its layer is the sandwich-norm one");
    v = c;
    v.final_logit_softcap = NAN;
    assert_error_mentions(df_model_config_validate(&v), DF_EINVAL, "must be >= 0 and finite");
}

/* ---- qwen3_moe (Qwen3MoeConfig): the experts' keys, their defaults, the sparse layers ---- */

/* The tiny 6-layer config whose parameters are counted by hand in test_qwen3_moe_layers:
   vocab 10, hidden 8, 2 heads of head_dim 8 / 2 = 4 (derived), 1 key/value head, dense MLPs of
   12, 3 experts of width 5 (k = 2), every 2nd layer sparse but layers 1 and 2 dense. */
static const char *const k_moe6 =
    "{\"model_type\": \"qwen3_moe\", \"vocab_size\": 10, \"hidden_size\": 8, \"intermediate_size\": 12, "
    "\"num_hidden_layers\": 6, \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"num_experts\": 3, "
    "\"num_experts_per_tok\": 2, \"moe_intermediate_size\": 5, \"norm_topk_prob\": true, "
    "\"decoder_sparse_step\": 2, \"mlp_only_layers\": [1, 2]}";

/* Qwen3MoeConfig's defaults where the keys are absent: 128 experts, 8 a token, width 768,
   norm_topk_prob false, every layer sparse; 4 key/value heads; head_dim derived (Qwen3MoeConfig has
   no head_dim default, unlike Qwen3Config's 128); Qwen3's attention (q/k norms, no biases). */
static void test_qwen3_moe_defaults(void **state)
{
    (void)state;
    df_model_config c;
    assert_int_equal(
        df_model_config_parse("{\"model_type\": \"qwen3_moe\", \"vocab_size\": 100, \"hidden_size\": 64, "
                              "\"intermediate_size\": 96, \"num_hidden_layers\": 4, "
                              "\"num_attention_heads\": 8}",
                              NULL, &c),
        DF_OK);
    assert_string_equal(c.model_type, "qwen3_moe");
    assert_int_equal(c.num_experts, 128);
    assert_int_equal(c.num_experts_per_tok, 8);
    assert_int_equal(c.moe_intermediate_size, 768);
    assert_false(c.norm_topk_prob);
    assert_int_equal(c.decoder_sparse_step, 1);
    for (int w = 0; w < DF_MAX_TYPED_LAYERS / 64; w++)
        assert_true(c.mlp_only_layers[w] == 0);
    assert_int_equal(c.num_key_value_heads, 4); /* Qwen3MoeConfig's, not the 8 heads */
    assert_int_equal(c.head_dim, 8);            /* 64 / 8, not Qwen3Config's 128 */
    assert_true(c.qk_norm && !c.qk_norm_full && !c.post_norm && !c.sandwich_norm);
    assert_true(!c.attention_bias && !c.o_proj_bias);
    assert_true(c.rope_theta == 10000.0 && c.rms_norm_eps == 1e-6 && c.max_position_embeddings == 32768);
    assert_false(c.tie_word_embeddings);
    assert_int_equal(c.sliding_window, 0);
    for (int64_t l = 0; l < 4; l++)
        assert_true(df_model_layer_moe(&c, l));
    assert_int_equal(df_model_mlp_width(&c), 768); /* the experts' 768 > intermediate_size 96 */
    /* 11 + 1 + 3 x 128 - 3 tensors a layer; the closed form agrees with the table */
    int64_t floats, tensors, total;
    df_param_desc *d;
    int n;
    assert_int_equal(df_model_param_count(&c, &floats, &tensors), DF_OK);
    assert_int_equal(tensors, 1 + 4 * (11 + 1 + 3 * 128 - 3) + 1 + 1);
    assert_int_equal(df_model_layout(&c, &d, &n, &total), DF_OK);
    assert_int_equal(n, tensors);
    assert_int_equal(total, floats);
    free(d);
    /* null is absent (HF's mlp_only_layers=None is []); an explicit head_dim and kv heads are read;
       attention_bias gives o_proj's too (Qwen3MoeAttention) */
    char b[1024];
    assert_int_equal(
        df_model_config_parse(small(b, sizeof b, "qwen3_moe",
                                    ", \"num_experts\": null, \"mlp_only_layers\": null, "
                                    "\"head_dim\": 32, \"num_key_value_heads\": 2, \"attention_bias\": true"),
                              NULL, &c),
        DF_OK);
    assert_true(c.num_experts == 128 && c.mlp_only_layers[0] == 0 && df_model_layer_moe(&c, 0));
    assert_true(c.head_dim == 32 && c.num_key_value_heads == 2 && c.attention_bias && c.o_proj_bias);
    /* num_experts 0: every layer dense (Qwen3MoeDecoderLayer's `num_experts > 0`), the dense count */
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "qwen3_moe", ", \"num_experts\": 0"), NULL, &c),
                     DF_OK);
    for (int64_t l = 0; l < 4; l++)
        assert_false(df_model_layer_moe(&c, l));
    assert_int_equal(df_model_mlp_width(&c), 96);
    assert_int_equal(df_model_param_count(&c, &floats, &tensors), DF_OK);
    assert_int_equal(tensors, 1 + 4 * 11 + 1 + 1);
    /* the keys mean nothing to a dense family (Qwen3Config ignores them): no experts there */
    assert_int_equal(
        df_model_config_parse(small(b, sizeof b, "qwen3", ", \"num_experts\": 8, \"num_experts_per_tok\": 2"),
                              NULL, &c),
        DF_OK);
    assert_true(c.num_experts == 0 && !df_model_layer_moe(&c, 0));
}

/* decoder_sparse_step 2 and mlp_only_layers [1, 2] on 6 layers: layers 3 and 5 sparse. The
   parameters by hand (each tensor padded to 16 floats):
     every layer: input / post-attention norms [8] -> 16 + 16; q_proj [2 x 4, 8] 64; k_proj / v_proj
       [4, 8] 32 + 32; o_proj [8, 8] 64; q_norm / k_norm [4] -> 16 + 16: 256, 8 tensors
     dense MLP: gate / up [12, 8] 96 + 96, down [8, 12] 96: 288, 3 tensors
     sparse MLP: router mlp.gate [3, 8] 24 -> 32; 3 experts x 3 projections [5, 8] 40 -> 48: 32 + 9 x 48
       = 464, 10 tensors
     embedding [10, 8] 80, final norm 16, lm_head 80
   total 80 + 6 x 256 + 4 x 288 + 2 x 464 + 16 + 80 = 3792 floats (3384 without the padding);
   tensors 1 + 6 x 8 + 4 x 3 + 2 x 10 + 1 + 1 = 83. */
static void test_qwen3_moe_layers(void **state)
{
    (void)state;
    df_model_config c;
    assert_int_equal(df_model_config_parse(k_moe6, NULL, &c), DF_OK);
    assert_true(c.num_experts == 3 && c.num_experts_per_tok == 2 && c.moe_intermediate_size == 5);
    assert_true(c.norm_topk_prob && c.decoder_sparse_step == 2 && c.head_dim == 4 &&
                c.num_key_value_heads == 1);
    assert_true(c.mlp_only_layers[0] == ((1u << 1) | (1u << 2)));
    for (int w = 1; w < DF_MAX_TYPED_LAYERS / 64; w++)
        assert_true(c.mlp_only_layers[w] == 0);
    for (int64_t l = 0; l < 6; l++)
        if (df_model_layer_moe(&c, l) != (l == 3 || l == 5))
            fail_msg("layer %lld: df_model_layer_moe %d, want %d", (long long)l, df_model_layer_moe(&c, l),
                     l == 3 || l == 5);
    assert_int_equal(df_model_expert_floats(&c), 3 * 48);
    assert_int_equal(df_model_mlp_width(&c), 12);
    int64_t floats, tensors, total;
    assert_int_equal(df_model_param_count(&c, &floats, &tensors), DF_OK);
    assert_int_equal(floats, 3792);
    assert_int_equal(tensors, 83);
    df_param_desc *d;
    int n;
    assert_int_equal(df_model_layout(&c, &d, &n, &total), DF_OK);
    assert_int_equal(n, 83);
    assert_int_equal(total, 3792);
    int routers = 0, experts = 0, dense = 0;
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(d[i].offset, off); /* contiguous, each padded to 16 */
        off += (d[i].numel + 15) / 16 * 16;
        long long l = -1;
        char rest[96] = "";
        if (sscanf(d[i].name, "model.layers.%lld.%95s", &l, rest) != 2)
            continue;
        if (!strcmp(rest, "mlp.gate.weight")) {
            assert_true((l == 3 || l == 5) && d[i].shape[0] == 3 && d[i].shape[1] == 8);
            routers++;
        } else if (!strncmp(rest, "mlp.experts.", 12)) {
            assert_true(l == 3 || l == 5);
            const bool down = strstr(rest, ".down_proj.weight") != NULL;
            assert_int_equal(d[i].shape[0], down ? 8 : 5);
            assert_int_equal(d[i].shape[1], down ? 5 : 8);
            experts++;
        } else if (!strncmp(rest, "mlp.", 4)) {
            assert_true(l != 3 && l != 5);
            dense++;
        }
    }
    assert_int_equal(off, total);
    assert_true(routers == 2 && experts == 2 * 9 && dense == 4 * 3);
    assert_string_equal(d[2 * 11 + 8 + 1].name,
                        "model.layers.2.mlp.gate_proj.weight"); /* layer 2: in the list */
    assert_string_equal(d[1 + 3 * 11 + 8].name, "model.layers.3.mlp.gate.weight");
    assert_string_equal(d[1 + 3 * 11 + 8 + 1 + 3 * 2 + 2].name,
                        "model.layers.3.mlp.experts.2.down_proj.weight");
    free(d);
    /* the views: router / experts in the sparse layers only, expert e's down_proj at
       experts + e E_f + 2 E_f / 3 */
    df_model *m;
    assert_int_equal(df_model_create(&c, &m), DF_OK);
    assert_int_equal(m->n_params, 3792);
    for (int64_t l = 0; l < 6; l++) {
        const df_layer_view *v = &m->w.layers[l];
        const bool sp = l == 3 || l == 5;
        assert_true(sp == (v->router != NULL) && sp == (v->experts != NULL) && sp == (v->w_gate == NULL) &&
                    sp == (v->w_up == NULL) && sp == (v->w_down == NULL));
    }
    const df_param_desc *t = df_model_find_tensor(m, "model.layers.5.mlp.gate.weight");
    assert_non_null(t);
    assert_ptr_equal(m->w.layers[5].router, m->params + t->offset);
    t = df_model_find_tensor(m, "model.layers.5.mlp.experts.1.down_proj.weight");
    assert_non_null(t);
    assert_ptr_equal(m->w.layers[5].experts + df_model_expert_floats(&c) + 2 * df_model_expert_floats(&c) / 3,
                     m->params + t->offset);
    assert_null(df_model_find_tensor(m, "model.layers.1.mlp.gate.weight"));
    assert_null(df_model_find_tensor(m, "model.layers.4.mlp.experts.0.up_proj.weight"));
    df_model_free(m);
    /* Every step of 1 .. 8 on 7 layers with every set of dense layers: the layers by the rule
       (l + 1) % step == 0 and l not listed, and the closed-form count equal to the table's */
    for (int64_t step = 1; step <= 8; step++)
        for (uint64_t mask = 0; mask < 128; mask++) {
            df_model_config v = c;
            v.num_hidden_layers = 7;
            v.decoder_sparse_step = step;
            v.mlp_only_layers[0] = mask;
            int64_t ls = 0;
            for (int64_t l = 0; l < 7; l++) {
                const bool want = (l + 1) % step == 0 && !(mask >> l & 1);
                assert_int_equal(df_model_layer_moe(&v, l), want);
                ls += want;
            }
            assert_int_equal(df_model_param_count(&v, &floats, &tensors), DF_OK);
            assert_int_equal(df_model_layout(&v, &d, &n, &total), DF_OK);
            free(d);
            if (n != tensors || total != floats ||
                floats != 80 + 7 * 256 + (7 - ls) * 288 + ls * 464 + 16 + 80)
                fail_msg(
                    "step %lld, dense mask 0x%llx: param_count %lld floats / %lld tensors, layout %lld / %d",
                    (long long)step, (unsigned long long)mask, (long long)floats, (long long)tensors,
                    (long long)total, n);
        }
    /* past the 256 layers mlp_only_layers can mark: layers >= 256 sparse, the count still the table's */
    char b[1024];
    snprintf(b, sizeof b,
             "{\"model_type\": \"qwen3_moe\", \"vocab_size\": 10, \"hidden_size\": 8, "
             "\"intermediate_size\": 12, \"num_hidden_layers\": 300, \"num_attention_heads\": 2, "
             "\"num_key_value_heads\": 1, \"num_experts\": 3, \"num_experts_per_tok\": 2, "
             "\"moe_intermediate_size\": 5, \"mlp_only_layers\": [0, 130, 255]}");
    assert_int_equal(df_model_config_parse(b, NULL, &c), DF_OK);
    assert_true(!df_model_layer_moe(&c, 0) && df_model_layer_moe(&c, 1) && !df_model_layer_moe(&c, 130) &&
                !df_model_layer_moe(&c, 255) && df_model_layer_moe(&c, 256) && df_model_layer_moe(&c, 299));
    assert_int_equal(df_model_param_count(&c, &floats, &tensors), DF_OK);
    assert_int_equal(tensors, 1 + 300 * 11 + 297 * 7 + 1 + 1);
    assert_int_equal(df_model_layout(&c, &d, &n, &total), DF_OK);
    free(d);
    assert_true(n == tensors && total == floats);
    /* a tensor count past INT_MAX is refused, not wrapped */
    c.num_experts = (int64_t)1 << 40;
    assert_error_mentions(df_model_param_count(&c, &floats, &tensors), DF_EINVAL, "overflows");
}

/* Malformed MoE keys are refused naming the key; configs built in code are checked too. */
static void test_qwen3_moe_refusals(void **state)
{
    (void)state;
    char b[1024], ex[256];
    const char *const bad[][2] = {
        {"\"mlp_only_layers\": 1", "key \"mlp_only_layers\" must be a list of layer indices, got an integer"},
        {"\"mlp_only_layers\": \"1, 2\"",
         "key \"mlp_only_layers\" must be a list of layer indices, got a string"},
        {"\"mlp_only_layers\": [0, 1.0]",
         "key \"mlp_only_layers\": entry 1 must be an integer, got a real number"},
        {"\"mlp_only_layers\": [\"1\"]", "key \"mlp_only_layers\": entry 0 must be an integer, got a string"},
        {"\"mlp_only_layers\": [-1]", "key \"mlp_only_layers\": entry 0 (-1) is not a layer index in [0, 4)"},
        {"\"mlp_only_layers\": [1, 4]",
         "key \"mlp_only_layers\": entry 1 (4) is not a layer index in [0, 4)"},
        {"\"num_experts\": 8.0", "key \"num_experts\" must be an integer, got a real number"},
        {"\"num_experts_per_tok\": \"8\"", "key \"num_experts_per_tok\" must be an integer, got a string"},
        {"\"moe_intermediate_size\": true",
         "key \"moe_intermediate_size\" must be an integer, got a boolean"},
        {"\"decoder_sparse_step\": 1.5", "key \"decoder_sparse_step\" must be an integer, got a real number"},
        {"\"norm_topk_prob\": \"true\"", "key \"norm_topk_prob\" must be a boolean, got a string"},
        {"\"norm_topk_prob\": 1", "key \"norm_topk_prob\" must be a boolean, got an integer"},
        {"\"output_router_logits\": \"false\"",
         "key \"output_router_logits\" must be a boolean, got a string"},
        {"\"router_aux_loss_coef\": \"0.001\"",
         "key \"router_aux_loss_coef\" must be a number, got a string"},
        {"\"num_experts\": -1", "num_experts -1 must be >= 0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(ex, sizeof ex, ", %s", bad[i][0]);
        expect_error(small(b, sizeof b, "qwen3_moe", ex), DF_EINVAL, bad[i][1]);
    }
    /* the ranges (df_model_config_validate's): one message names them all, and its values (k of
       E, width, step) tell which one was refused */
    const char *const range[][2] = {
        {"\"num_experts_per_tok\": 0", "(got 0 of 128, 768, 1)"},
        {"\"num_experts\": 4, \"num_experts_per_tok\": 5", "(got 5 of 4, 768, 1)"},
        {"\"moe_intermediate_size\": 0", "(got 8 of 128, 0, 1)"},
        {"\"moe_intermediate_size\": -768", "(got 8 of 128, -768, 1)"},
        {"\"decoder_sparse_step\": 0", "(got 8 of 128, 768, 0)"},
        {"\"decoder_sparse_step\": -1", "(got 8 of 128, 768, -1)"},
    };
    for (size_t i = 0; i < sizeof range / sizeof range[0]; i++) {
        snprintf(ex, sizeof ex, ", %s", range[i][0]);
        expect_error(small(b, sizeof b, "qwen3_moe", ex), DF_EINVAL,
                     "qwen3_moe needs 1 <= num_experts_per_tok <= num_experts, moe_intermediate_size > 0 and "
                     "decoder_sparse_step >= 1");
        expect_error(small(b, sizeof b, "qwen3_moe", ex), DF_EINVAL, range[i][1]);
    }
    /* the range's bounds are inclusive: k = E, width 1, a step past the layers (no sparse layer) */
    df_model_config c;
    assert_int_equal(
        df_model_config_parse(small(b, sizeof b, "qwen3_moe",
                                    ", \"num_experts\": 4, \"num_experts_per_tok\": 4, "
                                    "\"moe_intermediate_size\": 1, \"decoder_sparse_step\": 5, "
                                    "\"output_router_logits\": true, \"router_aux_loss_coef\": 0.02"),
                              NULL, &c),
        DF_OK);
    for (int64_t l = 0; l < 4; l++)
        assert_false(df_model_layer_moe(&c, l));
    /* an index past the 256 layers distflow can mark (HF would take it) */
    snprintf(b, sizeof b,
             "{\"model_type\": \"qwen3_moe\", \"vocab_size\": 10, \"hidden_size\": 8, "
             "\"intermediate_size\": 12, \"num_hidden_layers\": 300, \"num_attention_heads\": 2, "
             "\"num_key_value_heads\": 1, \"num_experts\": 3, \"num_experts_per_tok\": 2, "
             "\"mlp_only_layers\": [3, 256]}");
    expect_error(b, DF_EINVAL,
                 "key \"mlp_only_layers\": entry 1 (256) is not a layer index in [0, 300) that "
                 "distflow can mark (at most 256)");
    /* experts are qwen3_moe's: set on a dense family in code, refused */
    const char *dense[] = {"qwen3", "qwen2", "llama"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(df_model_config_parse(small(b, sizeof b, dense[i], ""), NULL, &c), DF_OK);
        assert_int_equal(df_model_config_validate(&c), DF_OK);
        c.num_experts = 4, c.num_experts_per_tok = 2, c.moe_intermediate_size = 8, c.decoder_sparse_step = 1;
        assert_error_mentions(df_model_config_validate(&c), DF_EINVAL, "experts are qwen3_moe's");
        int64_t floats, tensors;
        assert_int_equal(df_model_param_count(&c, &floats, &tensors), DF_EINVAL);
    }
    /* and in a qwen3_moe, the ranges and Qwen3's attention features */
    assert_int_equal(df_model_config_parse(k_moe6, NULL, &c), DF_OK);
    df_model_config v = c;
    v.num_experts = -2;
    assert_error_mentions(df_model_config_validate(&v), DF_EINVAL, "num_experts -2 must be >= 0");
    v = c;
    v.num_experts_per_tok = 4;
    assert_error_mentions(df_model_config_validate(&v), DF_EINVAL, "(got 4 of 3, 5, 2)");
    v = c;
    v.decoder_sparse_step = -2;
    assert_error_mentions(df_model_config_validate(&v), DF_EINVAL, "(got 2 of 3, 5, -2)");
    v = c;
    v.num_experts = 0; /* dense: the other keys are not read */
    v.num_experts_per_tok = 0, v.moe_intermediate_size = 0, v.decoder_sparse_step = 0;
    assert_int_equal(df_model_config_validate(&v), DF_OK);
    v = c;
    v.qk_norm = false;
    assert_int_equal(df_model_config_validate(&v), DF_EINVAL);
    v = c;
    v.attention_bias = true; /* Qwen3MoeAttention: o_proj's bias with q/k/v's */
    assert_int_equal(df_model_config_validate(&v), DF_EINVAL);
    v.o_proj_bias = true;
    assert_int_equal(df_model_config_validate(&v), DF_OK);
}

/* The q/k/v/o, norm, window and MoE fields a save must carry back. */
static void expect_same_moe(const df_model_config *a, const df_model_config *b)
{
    assert_string_equal(a->model_type, b->model_type);
    assert_true(a->vocab_size == b->vocab_size && a->hidden_size == b->hidden_size &&
                a->intermediate_size == b->intermediate_size && a->num_hidden_layers == b->num_hidden_layers);
    assert_true(a->num_attention_heads == b->num_attention_heads &&
                a->num_key_value_heads == b->num_key_value_heads && a->head_dim == b->head_dim);
    assert_true(a->qk_norm == b->qk_norm && a->attention_bias == b->attention_bias &&
                a->o_proj_bias == b->o_proj_bias);
    assert_true(a->sliding_window == b->sliding_window && a->max_window_layers == b->max_window_layers);
    assert_int_equal(a->num_experts, b->num_experts);
    assert_int_equal(a->num_experts_per_tok, b->num_experts_per_tok);
    assert_int_equal(a->moe_intermediate_size, b->moe_intermediate_size);
    assert_int_equal(a->norm_topk_prob, b->norm_topk_prob);
    assert_int_equal(a->decoder_sparse_step, b->decoder_sparse_step);
    assert_memory_equal(a->mlp_only_layers, b->mlp_only_layers, sizeof a->mlp_only_layers);
    assert_true(df_rope_same(a, b));
}

/* Saves: Qwen3MoeForCausalLM with the MoE keys; a fresh file gets transformers' load-balancing
   keys, a save over the original keeps its; head_dim only when it is not hidden / heads; re-parsed,
   the same config. */
static void test_qwen3_moe_save(void **state)
{
    (void)state;
    df_model_config c, back;
    char *out = NULL;
    assert_int_equal(df_model_config_parse(k_moe6, NULL, &c), DF_OK);
    assert_int_equal(df_model_config_to_json(&c, NULL, &out), DF_OK);
    json_t *j = json_loads(out, 0, NULL);
    assert_non_null(j);
    json_t *arch = json_object_get(j, "architectures");
    assert_true(json_array_size(arch) == 1);
    assert_string_equal(json_string_value(json_array_get(arch, 0)), "Qwen3MoeForCausalLM");
    assert_string_equal(json_string_value(json_object_get(j, "model_type")), "qwen3_moe");
    assert_int_equal(json_integer_value(json_object_get(j, "num_experts")), 3);
    assert_int_equal(json_integer_value(json_object_get(j, "num_experts_per_tok")), 2);
    assert_int_equal(json_integer_value(json_object_get(j, "moe_intermediate_size")), 5);
    assert_int_equal(json_integer_value(json_object_get(j, "decoder_sparse_step")), 2);
    assert_true(json_is_true(json_object_get(j, "norm_topk_prob")));
    json_t *dl = json_object_get(j, "mlp_only_layers");
    assert_true(json_is_array(dl) && json_array_size(dl) == 2);
    assert_true(json_integer_value(json_array_get(dl, 0)) == 1 &&
                json_integer_value(json_array_get(dl, 1)) == 2);
    assert_true(json_is_false(json_object_get(j, "output_router_logits")));
    json_t *coef = json_object_get(j, "router_aux_loss_coef");
    assert_true(json_is_real(coef) && json_real_value(coef) == 0.001);
    assert_null(json_object_get(j, "head_dim")); /* 8 / 2 = 4: derived, as Qwen3MoeAttention does */
    assert_int_equal(json_integer_value(json_object_get(j, "num_key_value_heads")), 1);
    assert_true(json_is_false(json_object_get(j, "attention_bias")));
    assert_true(json_is_false(json_object_get(j, "use_sliding_window")));
    assert_string_equal(json_string_value(json_object_get(j, "hidden_act")), "silu");
    json_decref(j);
    assert_int_equal(df_model_config_parse(out, NULL, &back), DF_OK);
    expect_same_moe(&c, &back);
    assert_memory_equal(&c, &back, sizeof c); /* nothing else lost either */
    free(out);
    /* a head_dim other than hidden / heads is written; an empty mlp_only_layers is [] */
    df_model_config h = c;
    h.head_dim = 16;
    memset(h.mlp_only_layers, 0, sizeof h.mlp_only_layers);
    assert_int_equal(df_model_config_to_json(&h, NULL, &out), DF_OK);
    j = json_loads(out, 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(j, "head_dim")), 16);
    dl = json_object_get(j, "mlp_only_layers");
    assert_true(json_is_array(dl) && json_array_size(dl) == 0);
    json_decref(j);
    assert_int_equal(df_model_config_parse(out, NULL, &back), DF_OK);
    expect_same_moe(&h, &back);
    assert_true(df_model_layer_moe(&back, 1));
    free(out);
    /* over the original: its load-balancing keys kept, the changed MoE keys written */
    const char *orig =
        "{\"model_type\": \"qwen3_moe\", \"vocab_size\": 10, \"hidden_size\": 8, \"intermediate_size\": 12, "
        "\"num_hidden_layers\": 6, \"num_attention_heads\": 2, \"num_key_value_heads\": 1, "
        "\"num_experts\": 3, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 5, "
        "\"decoder_sparse_step\": 2, \"mlp_only_layers\": [1, 2], \"output_router_logits\": true, "
        "\"router_aux_loss_coef\": 0.02, \"architectures\": [\"Qwen3MoeForCausalLM\"]}";
    assert_int_equal(df_model_config_parse(orig, NULL, &c), DF_OK);
    assert_false(c.norm_topk_prob);
    memset(c.mlp_only_layers, 0, sizeof c.mlp_only_layers);
    c.mlp_only_layers[0] = (1u << 0) | (1u << 5);
    c.num_experts = 6, c.num_experts_per_tok = 3, c.moe_intermediate_size = 7, c.norm_topk_prob = true;
    c.decoder_sparse_step = 1;
    assert_int_equal(df_model_config_to_json(&c, orig, &out), DF_OK);
    j = json_loads(out, 0, NULL);
    assert_true(json_is_true(json_object_get(j, "output_router_logits")));
    assert_true(json_real_value(json_object_get(j, "router_aux_loss_coef")) == 0.02);
    dl = json_object_get(j, "mlp_only_layers");
    assert_true(json_array_size(dl) == 2 && json_integer_value(json_array_get(dl, 0)) == 0 &&
                json_integer_value(json_array_get(dl, 1)) == 5);
    assert_true(json_is_true(json_object_get(j, "norm_topk_prob")));
    json_decref(j);
    assert_int_equal(df_model_config_parse(out, NULL, &back), DF_OK);
    expect_same_moe(&c, &back);
    for (int64_t l = 0; l < 6; l++)
        assert_int_equal(df_model_layer_moe(&back, l), l >= 1 && l <= 4);
    free(out);
    /* a qwen3_moe critic is a Qwen3MoeForTokenClassification */
    c.num_labels = 1;
    assert_int_equal(df_model_config_to_json(&c, NULL, &out), DF_OK);
    j = json_loads(out, 0, NULL);
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "architectures"), 0)),
                        "Qwen3MoeForTokenClassification");
    json_decref(j);
    assert_int_equal(df_model_config_parse(out, NULL, &back), DF_OK);
    assert_true(back.num_labels == 1 && back.num_experts == 6);
    free(out);
}

/* YaRN on qwen3_moe (Qwen3MoeRotaryEmbedding takes it): test_yarn_rope's frequencies, written back. */
static void test_qwen3_moe_yarn(void **state)
{
    (void)state;
    df_model_config c, q3, back;
    char b[1024], ex[512];
    snprintf(ex, sizeof ex,
             ", \"head_dim\": 16, \"rope_theta\": 10000.0, \"max_position_embeddings\": 128, "
             "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, "
             "\"original_max_position_embeddings\": 32}, \"num_experts\": 4, \"num_experts_per_tok\": 2");
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "qwen3_moe", ex), NULL, &c), DF_OK);
    assert_int_equal(c.rope_type, DF_ROPE_YARN);
    assert_true(c.rope_factor == 4.0 && c.rope_original_max_pos == 32);
    assert_true(fabs(c.rope_attention_factor - 1.138629436111989) < 1e-15);
    double want[8] = {1.0, 0.19764235376052372};
    for (int i = 2; i < 8; i++)
        want[i] = 0.25 * pow(10.0, -i / 2.0);
    expect_freqs(&c, want, 8);
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "qwen3", ex), NULL, &q3), DF_OK);
    assert_true(df_rope_same(&c, &q3));
    char *out = NULL;
    assert_int_equal(df_model_config_to_json(&c, NULL, &out), DF_OK);
    assert_int_equal(df_model_config_parse(out, NULL, &back), DF_OK);
    free(out);
    assert_int_equal(back.rope_type, DF_ROPE_YARN);
    expect_same_moe(&c, &back);
    /* a config built in code: yarn is valid for qwen3_moe, not for phi3 */
    assert_int_equal(df_model_config_validate(&c), DF_OK);
    snprintf(c.model_type, sizeof c.model_type, "phi3");
    c.num_experts = 0, c.qk_norm = false;
    assert_int_equal(df_model_config_validate(&c), DF_EINVAL);
}

static void test_rope_parameters(void **state)
{
    (void)state;
    df_model_config c;
    char b[1024];
    assert_int_equal(df_model_config_parse(small(b, sizeof b, "qwen3",
                                                 ", \"rope_parameters\": {\"rope_theta\": "
                                                 "1000000.0, \"rope_type\": \"default\"}"),
                                           NULL, &c),
                     DF_OK);
    assert_true(c.rope_theta == 1e6);
    assert_int_equal(
        df_model_config_parse(small(b, sizeof b, "llama",
                                    ", \"rope_theta\": 10.0, \"rope_parameters\": "
                                    "{\"rope_theta\": 500000.0, \"rope_type\": \"llama3\", \"factor\": 8.0, "
                                    "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                                    "\"original_max_position_embeddings\": 8192}"),
                              NULL, &c),
        DF_OK);
    assert_true(c.rope_theta == 500000.0); /* rope_parameters' theta first, as HF */
    assert_int_equal(c.rope_type, DF_ROPE_LLAMA3);
    expect_error(small(b, sizeof b, "llama",
                       ", \"rope_scaling\": {\"rope_type\": \"default\"}, \"rope_parameters\": "
                       "{\"rope_type\": \"llama3\"}"),
                 DF_EUNSUPPORTED, "both given and differ");
    expect_error(small(b, sizeof b, "qwen3",
                       ", \"rope_parameters\": {\"full_attention\": {\"rope_type\": "
                       "\"default\"}}"),
                 DF_EUNSUPPORTED, "per layer type");
}

/* What is not implemented is refused, naming the key and the value. */
static void test_refusals(void **state)
{
    (void)state;
    char b[1024], ex[256];
    const char *types[] = {"dynamic", "proportional", "ntk"}; /* longrope: phi3 only (test_phi3); yarn: test_yarn_rope */
    for (int i = 0; i < 3; i++) {
        snprintf(ex, sizeof ex, ", \"rope_scaling\": {\"rope_type\": \"%s\", \"factor\": 4.0}", types[i]);
        char want[96];
        snprintf(want, sizeof want, "key \"rope_scaling\": rope_type \"%s\" is not supported", types[i]);
        expect_error(small(b, sizeof b, "qwen3", ex), DF_EUNSUPPORTED, want);
    }
    expect_error(small(b, sizeof b, "qwen2", ", \"rope_scaling\": {\"factor\": 4.0}"), DF_EUNSUPPORTED,
                 "key \"rope_scaling\" names no rope_type");
    expect_error(small(b, sizeof b, "llama",
                       ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
                       "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0}"),
                 DF_EINVAL, "has no \"original_max_position_embeddings\"");
    expect_error(small(b, sizeof b, "llama",
                       ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": \"8\", "
                       "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                       "\"original_max_position_embeddings\": 8192}"),
                 DF_EINVAL, "key \"rope_scaling.factor\" must be a number");
    expect_error(small(b, sizeof b, "llama",
                       ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
                       "\"low_freq_factor\": 4.0, \"high_freq_factor\": 4.0, "
                       "\"original_max_position_embeddings\": 8192}"),
                 DF_EINVAL, "low_freq_factor < high_freq_factor");
    expect_error(small(b, sizeof b, "qwen2", ", \"rope_scaling\": 2"), DF_EINVAL,
                 "key \"rope_scaling\" must be an object or null");
    expect_error(small(b, sizeof b, "gemma", ""), DF_EUNSUPPORTED, "(qwen2, qwen2_moe, qwen3, qwen3_moe, llama, mistral, mixtral, phi3, olmo2, olmoe, gemma2, gemma3_text)");
}

/* Fresh saves and saves over an original round-trip every new field; an original's layout
   (rope_parameters, layer_types, "type") is kept and updated. */
static void test_save_roundtrip(void **state)
{
    const char *dir = *state;
    char path[512], b[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    df_model_config c, back;
    const char *srcs[] = {
        k_qwen3_8b,
        k_llama32_1b,
        k_qwen3_30b_a3b,
        small(b, sizeof b, "qwen3",
              ", \"use_sliding_window\": true, \"sliding_window\": 16, \"max_window_layers\": 2"),
    };
    for (int i = 0; i < 4; i++) {
        assert_int_equal(df_model_config_parse(srcs[i], NULL, &c), DF_OK);
        for (int fresh = 0; fresh < 2; fresh++) {
            assert_int_equal(df_model_config_save(&c, fresh ? NULL : srcs[i], path), DF_OK);
            assert_int_equal(df_model_config_load(path, &back), DF_OK);
            assert_string_equal(back.model_type, c.model_type);
            assert_int_equal(back.head_dim, c.head_dim);
            assert_int_equal(back.qk_norm, c.qk_norm);
            assert_int_equal(back.o_proj_bias, c.o_proj_bias);
            assert_int_equal(back.rope_type, c.rope_type);
            assert_true(back.rope_theta == c.rope_theta && back.rope_factor == c.rope_factor);
            assert_true(back.rope_low_freq_factor == c.rope_low_freq_factor);
            assert_true(back.rope_high_freq_factor == c.rope_high_freq_factor);
            assert_int_equal(back.rope_original_max_pos, c.rope_original_max_pos);
            assert_int_equal(back.sliding_window, c.sliding_window);
            assert_int_equal(back.max_window_layers, c.max_window_layers);
        }
    }
    /* rope_parameters stays the place of theta; layer_types is rewritten from the window */
    const char *v5 =
        small(b, sizeof b, "qwen2",
              ", \"rope_parameters\": {\"rope_theta\": 1000000.0, \"rope_type\": "
              "\"default\"}, \"use_sliding_window\": true, \"sliding_window\": 8, \"layer_types\": "
              "[\"full_attention\", \"full_attention\", \"sliding_attention\", \"sliding_attention\"]");
    assert_int_equal(df_model_config_parse(v5, NULL, &c), DF_OK);
    c.rope_theta = 2e6;
    c.max_window_layers = 3;
    assert_int_equal(df_model_config_save(&c, v5, path), DF_OK);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    assert_non_null(j);
    assert_null(json_object_get(j, "rope_theta"));
    assert_true(json_number_value(json_object_get(json_object_get(j, "rope_parameters"), "rope_theta")) ==
                2e6);
    json_t *lt = json_object_get(j, "layer_types");
    assert_string_equal(json_string_value(json_array_get(lt, 2)), "full_attention");
    assert_string_equal(json_string_value(json_array_get(lt, 3)), "sliding_attention");
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "architectures"), 0)),
                        "Qwen2ForCausalLM");
    json_decref(j);
    /* a qwen3 value model is a Qwen3ForTokenClassification */
    assert_int_equal(df_model_config_parse(k_qwen3_8b, NULL, &c), DF_OK);
    c.num_labels = 1;
    assert_int_equal(df_model_config_save(&c, NULL, path), DF_OK);
    j = json_load_file(path, 0, &je);
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "architectures"), 0)),
                        "Qwen3ForTokenClassification");
    json_decref(j);
    assert_int_equal(df_model_config_load(path, &back), DF_OK);
    assert_int_equal(back.num_labels, 1);
    assert_true(back.qk_norm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3), cmocka_unit_test(test_qwen3_30b_a3b),
        cmocka_unit_test(test_mixtral_8x7b), cmocka_unit_test(test_qwen15_moe_a27b),
        cmocka_unit_test(test_qwen2_moe_defaults_and_refusals), cmocka_unit_test(test_olmoe_1b_7b),
        cmocka_unit_test_setup_teardown(test_olmoe_defaults_refusals_save, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_qwen2_moe_save, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test(test_llama3_rope),
        cmocka_unit_test_setup_teardown(test_linear_rope, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_yarn_rope, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test(test_llama_attention_bias),
        cmocka_unit_test(test_sliding_window),
        cmocka_unit_test_setup_teardown(test_mistral, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_phi3, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_phi4_mini, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_olmo2, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_gemma3, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_gemma2, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test(test_qwen3_moe_defaults),
        cmocka_unit_test(test_qwen3_moe_layers),
        cmocka_unit_test(test_qwen3_moe_refusals),
        cmocka_unit_test(test_qwen3_moe_save),
        cmocka_unit_test(test_qwen3_moe_yarn),
        cmocka_unit_test(test_rope_parameters),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test_setup_teardown(test_save_roundtrip, df_test_mkdtemp, df_test_rmtree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
