/*
 * A GRPO step of a Llama 2-style job: a tiny `llama` model whose tokenizer is SentencePiece-style
 * (tests/fixtures/sp_tokenizers/llama2_legacy: byte_fallback, "▁" spaces, LlamaTokenizer) with
 * the Llama 2 chat template (tests/fixtures/chat_templates). Pins where the pieces meet: the
 * prompts are the template's rendering of each row's messages, encoded without adding a second
 * <s> (verl: apply_chat_template, then add_special_tokens=False); the rollout dump decodes them
 * back through the SentencePiece decoder (legacy: "<s> [INST] ..."), and responses are
 * scored and trained on. A Phi-3 job (the same tokenizer family) trains and checkpoints its model
 * in Phi-3's layout: fused qkv_proj / gate_up_proj tensors, Phi3ForCausalLM; a Phi-4-mini-like
 * one (partial rotary) trains LoRA adapters on the fused modules and checkpoints them as PEFT's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include "distflow/tokenizer.h"
#include "util/fsutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROWS DF_SOURCE_DIR "/tests/fixtures/gsm8k_rows.jsonl"


/* One GRPO step on dir/model from the fixture rows into dir/out, with `trainer` and `model`
   (more keys, "" for none). */
static void grpo_step(const char *dir, const char *model, const char *trainer, const char *name)
{
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s], val_files: [], train_batch_size: 4,\n"
             "       max_prompt_length: 128, max_response_length: 8}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model%s}\n"
             "  actor: {ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 8}\n"
             "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 8}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "trainer: {total_training_steps: 1, logger: [], default_local_dir: %s/out, %s}\n",
             ROWS, dir, model, dir, trainer);
    df_test_fit(yaml, name);
}

static void test_grpo_step(void **state)
{
    const char *dir = *state;
    df_test_sp_model(dir, "llama");
    char trainer[700];
    snprintf(trainer, sizeof trainer, "save_freq: -1, rollout_data_dir: %s/out/rollouts", dir);
    grpo_step(dir, "", trainer, "llama2.yaml");
    /* every dumped prompt is one of the rows' questions through the template, decoded */
    char *rows = NULL;
    assert_int_equal(df_read_file(ROWS, &rows, NULL), 0);
    json_t *dump = df_test_rollout_dumps(dir, "out", 1, NULL);
    assert_int_equal(json_array_size(dump), 8);
    size_t i;
    json_t *row;
    json_array_foreach(dump, i, row) {
        const char *input = json_string_value(json_object_get(row, "input"));
        assert_non_null(input);
        const char *pre = "<s> [INST] ", *post = " [/INST]";
        if (strncmp(input, pre, strlen(pre)) != 0 || strlen(input) < strlen(pre) + strlen(post) ||
            strcmp(input + strlen(input) - strlen(post), post) != 0)
            fail_msg("dumped prompt \"%s\" is not \"<s> [INST] question [/INST]\"", input);
        char question[512];
        snprintf(question, sizeof question, "\"content\": \"%.*s\"", (int)(strlen(input) - strlen(pre) - strlen(post)),
                 input + strlen(pre));
        /* the rows' JSON escapes the quotes around ####; compare up to them */
        char *q = strstr(question, "output the final answer after");
        assert_non_null(q);
        q[0] = '\0';
        if (!strstr(rows, question))
            fail_msg("dumped prompt \"%s\" is no row's question", input);
        assert_non_null(json_object_get(row, "output"));
    }
    json_decref(dump);
    free(rows);
    json_t *metrics = df_test_metrics(dir, "out", true);
    json_t *m = json_array_get(metrics, 0);
    assert_true(df_test_metric(m, "response_length/mean") > 0);
    assert_true(df_test_metric(m, "prompt_length/mean") > 20); /* the template's tokens and the question's */
    json_decref(metrics);
}

/* The safetensors header of `path` (its JSON text), malloc'd. */
static char *st_header(const char *path)
{
    char *st = NULL;
    size_t n = 0;
    assert_int_equal(df_read_file(path, &st, &n), 0);
    uint64_t hlen = 0; /* its little-endian length, then its JSON */
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | (unsigned char)st[i];
    assert_true(hlen + 8 <= n);
    st[8 + hlen] = '\0';
    memmove(st, st + 8, hlen + 1);
    return st;
}

/* One GRPO step of dir's `type` model, checkpointed; the actor's config.json must hold each of
 * cfg_has (NULL-ended), its safetensors header each of st_has and not st_lacks (NULL: no check).
 * Returns the actor loaded back. */
static df_model *checked_step(const char *dir, const char *type, const char *yaml, const char *const *cfg_has,
                              const char *const *st_has, const char *st_lacks)
{
    df_test_sp_model(dir, type);
    char path[600], *cfg = NULL;
    grpo_step(dir, "", "save_freq: 1", yaml);
    snprintf(path, sizeof path, "%s/out/global_step_1/actor/config.json", dir);
    assert_int_equal(df_read_file(path, &cfg, NULL), 0);
    for (; *cfg_has; cfg_has++)
        assert_non_null(strstr(cfg, *cfg_has));
    free(cfg);
    snprintf(path, sizeof path, "%s/out/global_step_1/actor/model.safetensors", dir);
    char *st = st_header(path);
    for (; *st_has; st_has++)
        assert_non_null(strstr(st, *st_has));
    if (st_lacks)
        assert_null(strstr(st, st_lacks));
    free(st);
    df_model *m = NULL;
    snprintf(path, sizeof path, "%s/out/global_step_1/actor", dir);
    assert_int_equal(df_model_load(path, &m), 0); /* and it loads back */
    return m;
}

/* One GRPO step of a phi3 model, checkpointed: the actor's files are Phi-3's (fused projections). */
static void test_phi3_step(void **state)
{
    static const char *const cfg[] = {"\"Phi3ForCausalLM\"", NULL};
    static const char *const st[] = {"model.layers.1.self_attn.qkv_proj.weight",
                                     "model.layers.1.mlp.gate_up_proj.weight", NULL};
    df_model_free(checked_step(*state, "phi3", "phi3.yaml", cfg, st, "q_proj"));
}

/* One GRPO step of a Gemma 3 text model (sandwich layers, (1 + w) norms, GeGLU, a window on its
   first layer with the local RoPE), checkpointed as Gemma3ForCausalLM with HF's tensor names; it
   loads back with its layer types. */
static void test_gemma3_step(void **state)
{
    static const char *const cfg[] = {"\"Gemma3ForCausalLM\"", "\"rope_local_base_freq\"", NULL};
    static const char *const st[] = {"model.layers.1.pre_feedforward_layernorm.weight",
                                     "model.layers.0.post_feedforward_layernorm.weight", NULL};
    df_model *m = checked_step(*state, "gemma3_text", "gemma3.yaml", cfg, st, NULL);
    assert_true(m->cfg.sandwich_norm && df_model_layer_window(&m->cfg, 0) == 8 && df_model_layer_window(&m->cfg, 1) == 0);
    df_model_free(m);
}

/* A LoRA GRPO step of a Phi-4-mini-like model (RoPE on half of each head: partial_rotary_factor
   0.5), o_proj excluded by PEFT's pattern over phi3's module names: the checkpoint's adapter holds
   qkv_proj, gate_up_proj and down_proj adapters, PEFT's files, and its actor keeps the factor. */
static void test_phi4_mini_lora_step(void **state)
{
    const char *dir = *state;
    df_test_sp_model(dir, "phi3");
    char path[600], *cfg = NULL;
    snprintf(path, sizeof path, "%s/model/config.json", dir);
    json_t *j = json_load_file(path, 0, NULL);
    assert_int_equal(json_object_set_new(j, "partial_rotary_factor", json_real(0.5)), 0);
    assert_int_equal(json_dump_file(j, path, 0), 0);
    json_decref(j);
    grpo_step(dir, ", lora_rank: 4, lora_alpha: 8, target_modules: all-linear, exclude_modules: '.*\\.o_proj'",
              "save_freq: 1", "phi4_mini_lora.yaml");
    snprintf(path, sizeof path, "%s/out/global_step_1/actor/lora_adapter/adapter_config.json", dir);
    assert_int_equal(df_read_file(path, &cfg, NULL), 0);
    assert_non_null(strstr(cfg, "\"target_modules\": [\n    \"down_proj\",\n    \"gate_up_proj\",\n    \"qkv_proj\"\n  ]"));
    free(cfg);
    snprintf(path, sizeof path, "%s/out/global_step_1/actor/lora_adapter/adapter_model.safetensors", dir);
    char *h = st_header(path);
    assert_non_null(strstr(h, "base_model.model.model.layers.1.self_attn.qkv_proj.lora_B.weight"));
    assert_non_null(strstr(h, "base_model.model.model.layers.0.mlp.gate_up_proj.lora_A.weight"));
    assert_null(strstr(h, "o_proj"));
    assert_null(strstr(h, "q_proj.lora"));
    free(h);
    df_model_config c;
    snprintf(path, sizeof path, "%s/out/global_step_1/actor/config.json", dir);
    assert_int_equal(df_model_config_load(path, &c), 0);
    assert_int_equal(df_model_rope_dim(&c), 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_grpo_step, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_phi3_step, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_gemma3_step, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_phi4_mini_lora_step, df_test_mkdtemp, df_test_rmtree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
