/*
 * GRPO jobs on a Qwen3-MoE model (every layer 2 of 4 experts; docs/models.md): a step with each
 * router-replay mode (none, R2: recorded by the old-log-prob pass, R3: recorded by the rollout and
 * carried in the batch field routed_experts) trains and checkpoints the model in Qwen3-MoE's layout
 * (Qwen3MoeForCausalLM, mlp.gate / mlp.experts.<e>.* tensors); the settings that cannot go together
 * are refused naming them: R3 without the rollout's recording, the recording without R3, router
 * replay on a dense model. A Qwen2-MoE model (a shared expert beside the routed ones) trains under
 * R3 and is saved as Qwen2MoeForCausalLM with its shared expert's tensors, moved by the update.
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


/* One GRPO step with `extra` actor_rollout_ref keys; returns its status. */
static int grpo_step(const char *dir, const char *actor, const char *rollout)
{
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s], val_files: [], train_batch_size: 4,\n"
             "       max_prompt_length: 128, max_response_length: 8}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {ppo_mini_batch_size: 2, ppo_micro_batch_size_per_gpu: 4%s}\n"
             "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 8%s}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "trainer: {total_training_steps: 1, logger: [], default_local_dir: %s/out, save_freq: 1}\n",
             ROWS, dir, actor, rollout, dir);
    return df_test_run(NULL, df_test_config(yaml, "moe.yaml", NULL, 0));
}

static void test_modes(void **state)
{
    const char *dir = *state;
    df_test_sp_model(dir, "qwen3_moe");
    /* entropy_coeff: the random model's zero advantages alone would leave the weights unmoved */
    const char *actor[3] = {", entropy_coeff: 0.01", ", router_replay: {mode: R2}, entropy_coeff: 0.01",
                            ", router_replay: {mode: R3}, entropy_coeff: 0.01"};
    const char *rollout[3] = {"", "", ", enable_rollout_routing_replay: true"};
    for (int i = 0; i < 3; i++) {
        char out[600], path[700], *cfg = NULL;
        snprintf(out, sizeof out, "%s/out", dir);
        df_remove_tree(out);
        if (grpo_step(dir, actor[i], rollout[i]))
            fail_msg("mode %d: %s", i, df_last_error());
        /* two mini-batches: the second update's forward ran on weights the first moved */
        json_t *metrics = df_test_metrics(dir, "out", true);
        assert_true(df_test_metric(json_array_get(metrics, 0), "response_length/mean") > 0);
        json_decref(metrics);
        snprintf(path, sizeof path, "%s/global_step_1/actor/config.json", out);
        assert_int_equal(df_read_file(path, &cfg, NULL), 0);
        assert_non_null(strstr(cfg, "\"Qwen3MoeForCausalLM\""));
        free(cfg);
        df_model *m = NULL;
        snprintf(path, sizeof path, "%s/global_step_1/actor", out);
        assert_int_equal(df_model_load(path, &m), 0);
        assert_non_null(df_model_find_tensor(m, "model.layers.1.mlp.experts.3.down_proj.weight"));
        df_model_free(m);
    }
}

static void test_qwen2_moe(void **state)
{
    const char *dir = *state;
    df_test_sp_model(dir, "qwen2_moe");
    char path[700], *cfg = NULL;
    df_model *before = NULL, *after = NULL;
    snprintf(path, sizeof path, "%s/model", dir);
    assert_int_equal(df_model_load(path, &before), 0);
    /* as test_modes: the entropy bonus gives the update a gradient through every weight */
    if (grpo_step(dir, ", router_replay: {mode: R3}, entropy_coeff: 0.01", ", enable_rollout_routing_replay: true"))
        fail_msg("qwen2_moe R3: %s", df_last_error());
    snprintf(path, sizeof path, "%s/out/global_step_1/actor/config.json", dir);
    assert_int_equal(df_read_file(path, &cfg, NULL), 0);
    assert_non_null(strstr(cfg, "\"Qwen2MoeForCausalLM\""));
    assert_non_null(strstr(cfg, "\"shared_expert_intermediate_size\": 64"));
    free(cfg);
    snprintf(path, sizeof path, "%s/out/global_step_1/actor", dir);
    assert_int_equal(df_model_load(path, &after), 0);
    const char *names[2] = {"model.layers.1.mlp.shared_expert.down_proj.weight", "model.layers.0.mlp.shared_expert_gate.weight"};
    for (int i = 0; i < 2; i++) {
        const df_param_desc *a = df_model_find_tensor(before, names[i]), *b = df_model_find_tensor(after, names[i]);
        assert_true(a && b && a->numel == b->numel);
        int64_t moved = 0;
        for (int64_t j = 0; j < a->numel; j++)
            moved += before->params[a->offset + j] != after->params[b->offset + j];
        if (moved == 0) {
            int64_t all = 0;
            for (int64_t j = 0; j < before->n_params; j++)
                all += before->params[j] != after->params[j];
            fail_msg("%s: the update left it unchanged (%lld of %lld weights moved)", names[i], (long long)all,
                     (long long)before->n_params);
        }
    }
    df_model_free(before);
    df_model_free(after);
}

static void test_refusals(void **state)
{
    const char *dir = *state;
    df_test_sp_model(dir, "qwen3_moe");
    assert_error_mentions(grpo_step(dir, ", router_replay: {mode: R3}", ""), DF_EINVAL,
                          "enable_rollout_routing_replay");
    assert_error_mentions(grpo_step(dir, "", ", enable_rollout_routing_replay: true"), DF_EINVAL,
                          "R3 replays the experts the rollout records");
    df_test_sp_model(dir, "llama");
    assert_error_mentions(grpo_step(dir, ", router_replay: {mode: R2}", ""), DF_EINVAL, "needs a model with experts");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_modes, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_qwen2_moe, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_refusals, df_test_mkdtemp, df_test_rmtree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
