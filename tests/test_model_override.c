/*
 * config.json overrides (verl's model.override_config; model.h df_model_config_merge,
 * df_model_config_load_ex, df_model_load_ex): values replace the file's, a mapping merges into a
 * mapping, keys the engine does not read are refused naming the setting, a value's error names the
 * file and the setting, the loaded model computes with the overridden values and its saves keep them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"
#include "hf_configs.h"

#include "distflow/model.h"
#include "util/fsutil.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WHO "actor_rollout_ref.model.override_config"

static int merge(const char *config, const char *ov_json, char **out)
{
    df_config_overrides ov = {.json = ov_json, .who = WHO};
    return df_model_config_merge(config, "m/config.json", &ov, out);
}

static int parse_merged(const char *config, const char *ov_json, df_model_config *c)
{
    char *text = NULL;
    int rc = merge(config, ov_json, &text);
    if (!rc)
        rc = df_model_config_parse(text, "m/config.json with " WHO, c);
    free(text);
    return rc;
}

static void test_no_overrides_keep_the_text(void **state)
{
    (void)state;
    const char *none[] = {NULL, "{}", " { \n} "};
    for (int i = 0; i < 3; i++) {
        char *out = NULL;
        assert_int_equal(merge(k_llama32_1b, none[i], &out), DF_OK);
        assert_string_equal(out, k_llama32_1b);
        free(out);
    }
    char *out = NULL;
    assert_int_equal(df_model_config_merge(k_llama32_1b, NULL, NULL, &out), DF_OK);
    assert_string_equal(out, k_llama32_1b);
    free(out);
}

static void test_values_replace_and_mappings_merge(void **state)
{
    (void)state;
    df_model_config c;
    /* one rope_scaling entry changes, the other three stay; the scalars replace the file's */
    assert_int_equal(parse_merged(k_llama32_1b,
                                  "{\"rope_scaling\": {\"factor\": 8.0}, \"max_position_embeddings\": 4096, "
                                  "\"rope_theta\": 10000, \"rms_norm_eps\": 1e-6, \"tie_word_embeddings\": false, "
                                  "\"attention_dropout\": 0, \"use_cache\": false, \"eos_token_id\": [1, 2]}",
                                  &c),
                     DF_OK);
    assert_int_equal(c.rope_type, DF_ROPE_LLAMA3);
    assert_true(c.rope_factor == 8.0);
    assert_true(c.rope_low_freq_factor == 1.0 && c.rope_high_freq_factor == 4.0);
    assert_int_equal(c.rope_original_max_pos, 8192);
    assert_int_equal(c.max_position_embeddings, 4096);
    assert_true(c.rope_theta == 10000.0 && c.rms_norm_eps == 1e-6);
    assert_false(c.tie_word_embeddings);
    assert_int_equal(c.n_eos, 2);
    assert_int_equal(c.eos_token_ids[1], 2);
    /* untouched keys are the file's */
    assert_int_equal(c.hidden_size, 2048);
    assert_int_equal(c.bos_token_id, 128000);

    /* null is a value: Mistral's window goes, and rope_scaling null gives plain RoPE */
    assert_int_equal(parse_merged(k_mistral_v01, "{\"sliding_window\": null}", &c), DF_OK);
    assert_int_equal(c.sliding_window, 0);
    assert_int_equal(parse_merged(k_mistral_v01, "{}", &c), DF_OK);
    assert_int_equal(c.sliding_window, 4096);
    assert_int_equal(parse_merged(k_llama32_1b, "{\"rope_scaling\": null}", &c), DF_OK);
    assert_int_equal(c.rope_type, DF_ROPE_DEFAULT);
    /* a dropout the engine does not have is refused by the parse, naming the override */
    assert_error_mentions(parse_merged(k_llama32_1b, "{\"attention_dropout\": 0.1}", &c), DF_EUNSUPPORTED,
                          "with " WHO ": key \"attention_dropout\" 0.1 is not supported");
    /* siiRL's example override (ppo_dag_trainer.yaml) on a model without rope_scaling: linear
       scaling by 2 */
    assert_int_equal(parse_merged(k_mistral_v01,
                                  "{\"attention_dropout\": 0.0, \"rope_scaling\": {\"type\": \"linear\", "
                                  "\"factor\": 2}}",
                                  &c),
                     DF_OK);
    assert_true(c.rope_type == DF_ROPE_LINEAR && c.rope_factor == 2.0);
    assert_error_mentions(parse_merged(k_mistral_v01, "{\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2}}", &c),
                          DF_EUNSUPPORTED, "rope_type \"dynamic\" is not supported");
    /* a mapping where the file has none is set whole */
    assert_int_equal(parse_merged(k_mistral_v01,
                                  "{\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 2.0, "
                                  "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                                  "\"original_max_position_embeddings\": 1024}}",
                                  &c),
                     DF_OK);
    assert_int_equal(c.rope_type, DF_ROPE_LLAMA3);
    assert_int_equal(c.rope_original_max_pos, 1024);
}

static void test_refused_keys(void **state)
{
    (void)state;
    static const struct {
        const char *config, *ov;
        int rc;
        const char *says;
    } cases[] = {
        {NULL, "{\"model_type\": \"qwen2\"}", DF_EUNSUPPORTED, WHO ".model_type: cannot be overridden"},
        {NULL, "{\"architectures\": [\"LlamaForTokenClassification\"]}", DF_EUNSUPPORTED,
         WHO ".architectures: cannot be overridden"},
        {NULL, "{\"pad_token_id\": 0}", DF_EUNSUPPORTED, WHO ".pad_token_id: distflow does not read \"pad_token_id\""},
        {NULL, "{\"output_hidden_states\": true}", DF_EUNSUPPORTED, WHO ".output_hidden_states"},
        {NULL, "{\"classifier_dropout\": 0.1}", DF_EUNSUPPORTED, WHO ".classifier_dropout: only 0 is supported"},
        {NULL, "{\"resid_pdrop\": 0.0}", DF_EUNSUPPORTED, WHO ".resid_pdrop: distflow does not read"}, /* phi3's */
        {NULL, "{\"query_pre_attn_scalar\": 64}", DF_EUNSUPPORTED, WHO ".query_pre_attn_scalar"}, /* gemma3's */
        {NULL, "{\"classifier_dropout\": \"0\"}", DF_EUNSUPPORTED, "got a string"},
        {NULL, "{\"use_cache\": \"no\"}", DF_EINVAL, WHO ".use_cache: must be a boolean"},
        {"mistral", "{\"attention_bias\": true}", DF_EUNSUPPORTED, WHO ".attention_bias: a mistral model"},
        {NULL, "[1]", DF_EINVAL, WHO ": not a JSON object"},
        {NULL, "{\"a\": ", DF_EINVAL, WHO ": not a JSON object"},
        {"[]", "{\"rope_theta\": 1}", DF_EINVAL, "m/config.json: not a JSON object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *config = !cases[i].config                     ? k_llama32_1b
                             : !strcmp(cases[i].config, "mistral") ? k_mistral_v01
                                                                   : cases[i].config;
        char *out = (char *)"untouched";
        assert_error_mentions(merge(config, cases[i].ov, &out), cases[i].rc, cases[i].says);
        assert_null(out);
    }
    /* the file is named too */
    char *out = NULL;
    assert_error_mentions(merge(k_llama32_1b, "{\"pad_token_id\": 0}", &out), DF_EUNSUPPORTED, "m/config.json");
}

/* gemma3_text's own keys: its attention scale, local RoPE base and layer pattern, checked as the
   file's (a soft-capping value refused naming the setting). */
static void test_gemma3_keys(void **state)
{
    (void)state;
    df_model_config c;
    assert_int_equal(parse_merged(k_gemma3_1b, "{\"query_pre_attn_scalar\": 128, \"rope_local_base_freq\": 20000, "
                                  "\"sliding_window_pattern\": 2, \"sliding_window\": 64}", &c),
                     DF_OK);
    assert_true(c.query_pre_attn_scalar == 128 && c.rope_local_theta == 2e4 && c.sliding_window == 64);
    assert_true(df_model_layer_sliding(&c, 0) && !df_model_layer_sliding(&c, 1));
    assert_error_mentions(parse_merged(k_gemma3_1b, "{\"final_logit_softcapping\": 30.0}", &c), DF_EUNSUPPORTED,
                          "\"final_logit_softcapping\" 30 is not supported");
}

/* Qwen3-MoE's expert keys change what is computed: they may be overridden (not on another family) */
static void test_moe_keys(void **state)
{
    (void)state;
    df_model_config c;
    assert_int_equal(parse_merged(k_qwen3_30b_a3b, "{\"norm_topk_prob\": false, \"num_experts_per_tok\": 4, "
                                  "\"mlp_only_layers\": [0, 47]}", &c), DF_OK);
    assert_true(!c.norm_topk_prob && c.num_experts_per_tok == 4);
    assert_true(!df_model_layer_moe(&c, 0) && df_model_layer_moe(&c, 1) && !df_model_layer_moe(&c, 47));
    assert_error_mentions(parse_merged(k_qwen3_8b, "{\"num_experts\": 8}", &c), DF_EUNSUPPORTED, "num_experts");
    /* Mixtral's own names for them; its attention has no biases, its router no jitter */
    assert_int_equal(parse_merged(k_mixtral_8x7b, "{\"num_experts_per_tok\": 3, \"num_local_experts\": 6}", &c),
                     DF_OK);
    assert_true(c.num_experts_per_tok == 3 && c.num_experts == 6);
    assert_error_mentions(parse_merged(k_mixtral_8x7b, "{\"num_experts\": 6}", &c), DF_EUNSUPPORTED, "num_experts");
    assert_error_mentions(parse_merged(k_mixtral_8x7b, "{\"attention_bias\": true}", &c), DF_EUNSUPPORTED,
                          "no attention biases");
    assert_error_mentions(parse_merged(k_mixtral_8x7b, "{\"router_jitter_noise\": 0.1}", &c), DF_EUNSUPPORTED,
                          "router_jitter_noise");
    /* Qwen2-MoE: qwen3_moe's keys, the shared expert's width and qkv_bias (its name for the q/k/v
       biases: attention_bias, which transformers does not read there, is refused) */
    assert_int_equal(parse_merged(k_qwen15_moe_a27b, "{\"num_experts_per_tok\": 2, \"norm_topk_prob\": true, "
                                  "\"shared_expert_intermediate_size\": 2816, \"qkv_bias\": false}", &c), DF_OK);
    assert_true(c.num_experts_per_tok == 2 && c.norm_topk_prob && c.shared_expert_intermediate_size == 2816);
    assert_true(!c.attention_bias && !c.o_proj_bias);
    assert_error_mentions(parse_merged(k_qwen15_moe_a27b, "{\"attention_bias\": false}", &c), DF_EUNSUPPORTED,
                          "qwen2_moe names its q/k/v biases qkv_bias");
    assert_error_mentions(parse_merged(k_qwen3_30b_a3b, "{\"shared_expert_intermediate_size\": 512}", &c),
                          DF_EUNSUPPORTED, "shared_expert_intermediate_size");
    /* OLMoE: its expert keys (num_local_experts the alias), clip_qkv refused unless null, no
       decoder_sparse_step (every layer sparse; OlmoeConfig has no such key) */
    assert_int_equal(parse_merged(k_olmoe_1b_7b, "{\"num_experts_per_tok\": 4, \"norm_topk_prob\": true, "
                                  "\"clip_qkv\": null}", &c), DF_OK);
    assert_true(c.num_experts_per_tok == 4 && c.norm_topk_prob && c.num_experts == 64);
    assert_error_mentions(parse_merged(k_olmoe_1b_7b, "{\"clip_qkv\": 8.0}", &c), DF_EUNSUPPORTED, "clip_qkv");
    assert_error_mentions(parse_merged(k_olmoe_1b_7b, "{\"decoder_sparse_step\": 2}", &c), DF_EUNSUPPORTED,
                          "decoder_sparse_step");
}

/* A value the parser refuses names the file and the setting it came from. */
static void test_bad_value_names_the_setting(void **state)
{
    (void)state;
    char d[] = "/tmp/df_override_XXXXXX", path[256];
    assert_non_null(mkdtemp(d));
    snprintf(path, sizeof path, "%s/config.json", d);
    assert_int_equal(df_write_file_atomic(path, k_llama32_1b, strlen(k_llama32_1b)), DF_OK);
    df_config_overrides ov = {.json = "{\"max_position_embeddings\": \"4096\"}", .who = WHO};
    df_model_config c;
    assert_error_mentions(df_model_config_load_ex(path, &ov, &c), DF_EINVAL,
                          "config.json with " WHO ": key \"max_position_embeddings\" must be an integer");
    ov.json = "{\"rope_scaling\": {\"rope_type\": \"dynamic\"}}";
    assert_error_mentions(df_model_config_load_ex(path, &ov, &c), DF_EUNSUPPORTED, "with " WHO);
    assert_last_error_mentions("dynamic");
    /* merged into llama3's object, rope_type yarn takes its factor (32); a bad yarn key is named */
    ov.json = "{\"rope_scaling\": {\"rope_type\": \"yarn\"}}";
    assert_int_equal(df_model_config_load_ex(path, &ov, &c), DF_OK);
    assert_true(c.rope_type == DF_ROPE_YARN && c.rope_factor == 32 && c.rope_original_max_pos == 8192);
    ov.json = "{\"rope_scaling\": {\"rope_type\": \"yarn\", \"beta_fast\": \"fast\"}}";
    assert_error_mentions(df_model_config_load_ex(path, &ov, &c), DF_EINVAL, "with " WHO);
    assert_last_error_mentions("rope_scaling.beta_fast");
    ov.json = "{\"num_attention_heads\": 3}"; /* 2048 / 3: the sizes disagree */
    assert_error_mentions(df_model_config_load_ex(path, &ov, &c), DF_EINVAL, "with " WHO);
    /* without overrides the file alone is named, as df_model_config_load does */
    ov.json = "{}";
    assert_int_equal(df_model_config_load_ex(path, &ov, &c), DF_OK);
    assert_int_equal(df_test_remove_tree(d), 0);
}

/* log p of every next token of one sequence, with activations made for m's config. */
static void logps(const df_model *m, float *out, int64_t n)
{
    int32_t tok[16];
    int64_t rows[15], off[2] = {0, n};
    int32_t tgt[15];
    for (int64_t i = 0; i < n; i++)
        tok[i] = (int32_t)((7 * i + 3) % m->cfg.vocab_size);
    for (int64_t i = 0; i + 1 < n; i++)
        rows[i] = i, tgt[i] = tok[i + 1];
    df_seq_batch b = {.n_tokens = n, .tokens = tok, .n_seqs = 1, .seq_offsets = off, .n_out = n - 1,
                      .out_rows = rows, .out_targets = tgt};
    df_acts *a = NULL;
    assert_int_equal(df_acts_create(&m->cfg, n, n, &a), DF_OK);
    assert_int_equal(df_acts_load_weights(a, m), DF_OK);
    assert_int_equal(df_model_forward(m, a, &b, 1.0f, out, NULL), DF_OK);
    df_acts_free(a);
}

/*
 * df_model_load_ex: the model is built and run with the merged config (a rope_theta override gives
 * the log-probs of the same weights with that theta, bit for bit, and not the file's; so does a
 * linear rope_scaling), and a save keeps the override.
 */
static void test_load_computes_with_overrides(void **state)
{
    (void)state;
    char d[] = "/tmp/df_override_XXXXXX", saved[300];
    assert_non_null(mkdtemp(d));
    df_model_config cfg;
    df_model_config_defaults(&cfg);
    cfg.vocab_size = 64, cfg.hidden_size = 32, cfg.intermediate_size = 48, cfg.num_hidden_layers = 2;
    cfg.num_attention_heads = 4, cfg.num_key_value_heads = 2, cfg.head_dim = 8, cfg.rope_theta = 10000.0;
    cfg.initializer_range = 0.5; /* weights large enough for attention to depend on positions */
    cfg.initializer_range = 0.5; /* weights large enough for attention to depend on positions */
    df_model *base = NULL, *m = NULL, *want = NULL, *again = NULL;
    assert_int_equal(df_model_create(&cfg, &base), DF_OK);
    assert_int_equal(df_model_init_random(base, 5), DF_OK);
    assert_int_equal(df_model_save(base, d, DF_DTYPE_F32, 0), DF_OK);

    df_config_overrides ov = {.json = "{\"rope_theta\": 50.0, \"max_position_embeddings\": 16, \"use_cache\": false}",
                              .who = WHO};
    assert_int_equal(df_model_load_ex(d, &ov, &m), DF_OK);
    assert_true(m->cfg.rope_theta == 50.0);
    assert_int_equal(m->cfg.max_position_embeddings, 16);
    assert_int_equal(df_model_clone(base, &want), DF_OK);
    want->cfg.rope_theta = 50.0;
    enum { N = 16 };
    float lp_m[N], lp_want[N], lp_base[N];
    logps(m, lp_m, N);
    logps(want, lp_want, N);
    logps(base, lp_base, N);
    assert_memory_equal(lp_m, lp_want, sizeof(float) * (N - 1));
    double diff = 0;
    for (int i = 0; i + 1 < N; i++)
        diff = fmax(diff, fabs(lp_m[i] - lp_base[i]));
    assert_true(diff > 1e-3); /* theta 50 vs 1e4 moves every position past the first (4.0 here) */
    /* siiRL's linear scaling by 2: the weights run with the frequencies halved */
    df_model *lin = NULL;
    df_config_overrides ov2 = {.json = "{\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2}}", .who = WHO};
    assert_int_equal(df_model_load_ex(d, &ov2, &lin), DF_OK);
    want->cfg.rope_theta = 10000.0, want->cfg.rope_type = DF_ROPE_LINEAR, want->cfg.rope_factor = 2.0;
    logps(lin, lp_m, N);
    logps(want, lp_want, N);
    assert_memory_equal(lp_m, lp_want, sizeof(float) * (N - 1));
    diff = 0;
    for (int i = 0; i + 1 < N; i++)
        diff = fmax(diff, fabs(lp_m[i] - lp_base[i]));
    assert_true(diff > 1e-3);
    df_model_free(lin);

    /* the save records the override; the file reloads to the same config without it */
    snprintf(saved, sizeof saved, "%s/saved", d);
    assert_int_equal(df_model_save(m, saved, DF_DTYPE_F32, 0), DF_OK);
    assert_int_equal(df_model_load(saved, &again), DF_OK);
    assert_true(again->cfg.rope_theta == 50.0);
    assert_int_equal(again->cfg.max_position_embeddings, 16);
    /* a key the engine does not model is kept from the merged text too */
    assert_non_null(strstr(again->config_json, "\"use_cache\": false"));
    /* a refused override loads nothing */
    df_model *none = (df_model *)&ov;
    ov.json = "{\"use_cache\": 1}";
    assert_error_mentions(df_model_load_ex(d, &ov, &none), DF_EINVAL, WHO ".use_cache");
    assert_null(none);
    df_model_free(again);
    df_model_free(want);
    df_model_free(m);
    df_model_free(base);
    assert_int_equal(df_test_remove_tree(d), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_overrides_keep_the_text),
        cmocka_unit_test(test_values_replace_and_mappings_merge),
        cmocka_unit_test(test_refused_keys),
        cmocka_unit_test(test_bad_value_names_the_setting),
        cmocka_unit_test(test_gemma3_keys),
        cmocka_unit_test(test_moe_keys),
        cmocka_unit_test(test_load_computes_with_overrides),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
