/*
 * No position past a model's max_position_embeddings is run silently: `train` (every model: actor,
 * critic, reward model, a workflow node's own model directory; rollout.max_model_len), `sft` and
 * `eval` refuse a longer job before anything is loaded or written, naming the keys, their values,
 * the model's config.json and its max_position_embeddings (workers/common/max_pos.h); a job exactly
 * at the limit runs. Behind them the engine refuses such a sequence itself: a rollout request whose
 * prompt + its slot's limit pass the range, a forward of a longer sequence (DF_EINVAL).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"

#include "distflow/config.h"
#include "distflow/model.h"
#include "distflow/reward.h"
#include "distflow/rollout.h"
#include "distflow/worker.h"
#include "util/fsutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The models' positions: every prompt of the digits data is far shorter than LIMIT - RESP. */
enum { LIMIT = 128, RESP = 16 };

static char dir[256];

static bool exists(const char *rel)
{
    char p[1024];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    return stat(p, &st) == 0;
}

/* dir/train.jsonl and dir/eval.jsonl (8 digit prompts), dir/model (LIMIT positions) and dir/big/model (32768), one
   tokenizer. */
static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/df_maxpos_XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    df_test_digits_inputs(dir, "train.jsonl", 8, "test/digits", false);
    df_test_digits_inputs(dir, "eval.jsonl", 8, "openai/gsm8k", false); /* a source the CLI scores */
    const char *texts[8];
    char store[8][128], big[512];
    for (int i = 0; i < 8; i++) { /* df_test_digits_inputs' prompts */
        snprintf(store[i], sizeof store[i], "Add %d and %d. What do you get?", i, 2 * i + 1);
        texts[i] = store[i];
    }
    df_test_tiny_model_ex(dir, texts, 8, 300, 32, 2, 7, LIMIT);
    snprintf(big, sizeof big, "%s/big", dir);
    if (df_mkdir_p(big))
        return -1;
    df_test_tiny_model(big, texts, 8, 300, 32, 2, 7);
    return df_reward_register("test/digits", df_test_digit_share);
}

static int teardown(void **state)
{
    (void)state;
    return df_test_remove_tree(dir);
}

/* A one-step GRPO job on `model` (relative to dir) with prompts of `prompt` tokens, into yaml[cap]. */
static void job_yaml(char *yaml, size_t cap, const char *model, int prompt, const char *out)
{
    snprintf(yaml, cap,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 4,\n"
             "       max_prompt_length: %d, max_response_length: %d}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/%s}\n"
             "  actor: {optim: {lr: 0.01}, ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 8}\n"
             "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 16}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "trainer: {total_training_steps: 1, save_freq: -1, logger: [], default_local_dir: %s/%s}\n",
             dir, prompt, RESP, dir, model, dir, out);
}

/* df_train_check of the job with overrides ov[n]: its status (the error kept). */
static int check(const char *model, int prompt, const char *const *ov, int n)
{
    char yaml[4096];
    job_yaml(yaml, sizeof yaml, model, prompt, "out");
    df_config *cfg = df_test_config(yaml, "job.yaml", ov, n);
    int rc = df_train_check(cfg, 1, NULL, NULL, NULL);
    df_config_free(cfg);
    return rc;
}

static void test_train_refused(void **state)
{
    (void)state;
    /* one token over: the policy's model */
    assert_error_mentions(check("model", LIMIT - RESP + 1, NULL, 0), DF_EINVAL,
                          "the job's sequences reach 129 tokens (data.max_prompt_length=113 (job.yaml:2) + "
                          "actor_rollout_ref.rollout.response_length=16 (derived from data.max_response_length))");
    assert_last_error_mentions("actor_rollout_ref.model.path=");
    assert_last_error_mentions("max_position_embeddings 128 (");
    assert_last_error_mentions("/model/config.json)");
    assert_int_equal(check("model", LIMIT - RESP, NULL, 0), DF_OK);
    /* rollout.max_model_len past the model (verl's sglang check), though the lengths fit */
    const char *mml[] = {"actor_rollout_ref.rollout.max_model_len=129"};
    assert_error_mentions(check("model", LIMIT - RESP, mml, 1), DF_EINVAL,
                          "actor_rollout_ref.rollout.max_model_len=129 (command line)");
    /* the critic's own model */
    char critic[600];
    snprintf(critic, sizeof critic, "critic.model.path=%s/model", dir);
    const char *gae[] = {"algorithm.adv_estimator=gae", critic, "critic.ppo_micro_batch_size_per_gpu=4",
                         "critic.ppo_mini_batch_size=4"};
    assert_error_mentions(check("big/model", LIMIT - RESP + 1, gae, 4), DF_EINVAL, "critic.model.path=");
    assert_last_error_mentions("max_position_embeddings 128");
    assert_int_equal(check("big/model", LIMIT - RESP, gae, 4), DF_OK);
    /* the reward model: its re-templated input's limit */
    char rm[600];
    snprintf(rm, sizeof rm, "reward_model.model.path=%s/model", dir);
    const char *rm_over[] = {"reward_model.enable=true", rm, "reward_model.micro_batch_size_per_gpu=4",
                             "reward_model.max_length=129"};
    assert_error_mentions(check("big/model", LIMIT - RESP, rm_over, 4), DF_EINVAL,
                          "reward_model.model.path=");
    assert_last_error_mentions("reward_model.max_length=129 (command line)");
    rm_over[3] = "reward_model.max_length=128";
    assert_int_equal(check("big/model", 1000, rm_over, 4), DF_OK); /* the policy's model is big */
}

/* A workflow whose model nodes set their own model directory (an agent group's). */
static void test_node_model_refused(void **state)
{
    (void)state;
    char text[4096], path[600], wf[700];
    snprintf(text, sizeof text,
             "dag_id: grpo_own_model\n"
             "nodes:\n"
             "  - {node_id: rollout_actor, node_type: MODEL_INFERENCE, node_role: ROLLOUT,\n"
             "     config: {model.path: %s/model}}\n"
             "  - {node_id: reward, node_type: COMPUTE, node_role: REWARD, dependencies: [rollout_actor]}\n"
             "  - {node_id: adv, node_type: COMPUTE, node_role: ADVANTAGE, dependencies: [reward]}\n"
             "  - {node_id: old, node_type: MODEL_TRAIN, node_role: ACTOR, only_forward_compute: true,\n"
             "     dependencies: [adv], config: {model.path: %s/model}}\n"
             "  - {node_id: train, node_type: MODEL_TRAIN, node_role: ACTOR, dependencies: [old],\n"
             "     config: {model.path: %s/model}}\n",
             dir, dir, dir);
    snprintf(path, sizeof path, "%s/wf.yaml", dir);
    assert_int_equal(df_write_file_atomic(path, text, strlen(text)), 0);
    snprintf(wf, sizeof wf, "dag.workflow_path=%s", path);
    const char *ov[] = {wf};
    assert_error_mentions(check("big/model", LIMIT - RESP + 1, ov, 1), DF_EINVAL, "node 'rollout_actor'");
    assert_last_error_mentions("actor_rollout_ref.model.path=");
    assert_last_error_mentions("max_position_embeddings 128");
    assert_int_equal(check("big/model", LIMIT - RESP, ov, 1), DF_OK);
}

/* `distflow train`: a non-zero exit naming the keys, and nothing written. */
static void test_train_cli_writes_nothing(void **state)
{
    (void)state;
    char yaml[4096], path[600], cmd[2048], out[8192];
    job_yaml(yaml, sizeof yaml, "model", LIMIT - RESP + 1, "cli_out");
    snprintf(path, sizeof path, "%s/cli.yaml", dir);
    assert_int_equal(df_write_file_atomic(path, yaml, strlen(yaml)), 0);
    snprintf(cmd, sizeof cmd, "%s/distflow train %s 2>&1", DF_BINARY_DIR, path);
    assert_int_not_equal(df_test_command(cmd, out, sizeof out), 0);
    if (!strstr(out, "data.max_prompt_length=113 (") || !strstr(out, "more than the model's max_position_embeddings 128"))
        fail_msg("unexpected output: %s", out);
    assert_false(exists("cli_out"));
}

/* Exactly at the limit: a step runs, its sequences up to LIMIT tokens through rollout and actor. */
static void test_train_at_limit_runs(void **state)
{
    (void)state;
    char yaml[4096];
    job_yaml(yaml, sizeof yaml, "model", LIMIT - RESP, "at_limit");
    df_test_fit(yaml, "limit.yaml");
    json_t *lines = df_test_metrics(dir, "at_limit", true);
    assert_int_equal(json_array_size(lines), 1);
    assert_true(df_test_metric(json_array_get(lines, 0), "response_length/max") <= RESP);
    json_decref(lines);
}

/*
 * actor_rollout_ref.model.override_config / critic.model.override_config: the checks read each
 * config.json with its role's overrides (a longer max_position_embeddings lets a job through; past
 * it, the message names the override), a key or value the loader refuses is refused by the check,
 * and a job past the file's range runs: the worker builds the model from the merged config (its
 * rollout engine refuses prompt + response past the file's 128 positions), and its checkpoint's
 * config.json records the override.
 */
static void test_override_config(void **state)
{
    (void)state;
    const char *ov[] = {"actor_rollout_ref.model.override_config.max_position_embeddings=256"};
    assert_int_equal(check("model", LIMIT - RESP + 1, ov, 1), DF_OK);
    assert_error_mentions(check("model", 256 - RESP + 1, ov, 1), DF_EINVAL, "max_position_embeddings 256 (");
    assert_last_error_mentions("/model/config.json with actor_rollout_ref.model.override_config)");
    /* the critic reads its own overrides, not the policy's */
    char critic[600];
    snprintf(critic, sizeof critic, "critic.model.path=%s/model", dir);
    const char *gae[] = {"algorithm.adv_estimator=gae", critic, "critic.ppo_micro_batch_size_per_gpu=4",
                         "critic.ppo_mini_batch_size=4", ov[0], "critic.model.override_config={}"};
    assert_error_mentions(check("model", LIMIT - RESP + 1, gae, 6), DF_EINVAL, "critic.model.path=");
    gae[5] = "critic.model.override_config={max_position_embeddings: 256}";
    assert_int_equal(check("model", LIMIT - RESP + 1, gae, 6), DF_OK);
    gae[5] = "critic.model.override_config.hidden_dropout=0";
    assert_error_mentions(check("model", 8, gae, 6), DF_EUNSUPPORTED, "critic.model.override_config.hidden_dropout");
    /* refused before anything is loaded, naming where the setting was made */
    const char *key[] = {"actor_rollout_ref.model.override_config.pad_token_id=0"};
    assert_error_mentions(check("model", 8, key, 1), DF_EUNSUPPORTED,
                          "actor_rollout_ref.model.override_config.pad_token_id: distflow does not read");
    assert_last_error_mentions("command line");
    const char *val[] = {"actor_rollout_ref.model.override_config.rope_theta=fast"};
    assert_error_mentions(check("model", 8, val, 1), DF_EINVAL,
                          "config.json with actor_rollout_ref.model.override_config: key \"rope_theta\"");

    char yaml[4096], cfg_path[600], *text = NULL;
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 4,\n"
             "       max_prompt_length: 80, max_response_length: 100}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model, override_config: {max_position_embeddings: 192}}\n"
             "  actor: {optim: {lr: 0.01}, ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 8}\n"
             "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 16}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "trainer: {total_training_steps: 1, save_freq: 1, logger: [], default_local_dir: %s/overridden}\n",
             dir, dir, dir);
    df_test_fit(yaml, "overridden.yaml");
    snprintf(cfg_path, sizeof cfg_path, "%s/overridden/global_step_1/actor/config.json", dir);
    assert_int_equal(df_read_file(cfg_path, &text, NULL), DF_OK);
    assert_non_null(strstr(text, "\"max_position_embeddings\": 192"));
    free(text);
}

static int sft(int max_length, const char *out)
{
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], prompt_key: prompt,\n"
             "       response_key: reward_model.ground_truth, train_batch_size: 4, micro_batch_size_per_gpu: 4,\n"
             "       max_length: %d}\n"
             "model: {partial_pretrain: %s/model}\n"
             "trainer: {total_training_steps: 1, save_freq: -1, logger: [], default_local_dir: %s/%s}\n",
             dir, max_length, dir, dir, out);
    df_config *cfg = NULL;
    if (df_config_load_text(df_config_schema_sft(), yaml, "sft.yaml", NULL, 0, &cfg))
        fail_msg("%s", df_last_error());
    int rc = df_sft_run(cfg, NULL, NULL);
    df_config_free(cfg);
    return rc;
}

static void test_sft(void **state)
{
    (void)state;
    assert_error_mentions(sft(LIMIT + 1, "sft_over"), DF_EINVAL, "model.partial_pretrain=");
    assert_last_error_mentions("reach 129 tokens (data.max_length=129 (sft.yaml:3))");
    assert_last_error_mentions("max_position_embeddings 128");
    assert_false(exists("sft_over"));
    assert_int_equal(sft(LIMIT, "sft_limit"), DF_OK);
    assert_true(exists("sft_limit/metrics.jsonl"));
}

/* `distflow eval`: a --max-prompt-length given must fit with the responses; the default shrinks. */
static void test_eval(void **state)
{
    (void)state;
    char cmd[2048], out[8192];
    const char *fmt = "%s/distflow eval --model %s/model --data %s/eval.jsonl --max-response-length %d %s "
                      "--output %s/%s 2>&1";
    snprintf(cmd, sizeof cmd, fmt, DF_BINARY_DIR, dir, dir, RESP, "--max-prompt-length 113", dir, "over.jsonl");
    assert_int_equal(df_test_command(cmd, out, sizeof out), 1);
    if (!strstr(out, "reach 129 tokens (--max-prompt-length 113 + --max-response-length 16)") ||
        !strstr(out, "max_position_embeddings 128"))
        fail_msg("unexpected output: %s", out);
    assert_false(exists("over.jsonl"));
    snprintf(cmd, sizeof cmd, fmt, DF_BINARY_DIR, dir, dir, RESP, "--max-prompt-length 112", dir, "limit.jsonl");
    if (df_test_command(cmd, out, sizeof out))
        fail_msg("at the limit: %s", out);
    assert_true(exists("limit.jsonl"));
    snprintf(cmd, sizeof cmd, fmt, DF_BINARY_DIR, dir, dir, RESP, "", dir, "default.jsonl"); /* 1024 shrinks */
    if (df_test_command(cmd, out, sizeof out) || !strstr(out, "n_prompts: 8"))
        fail_msg("the default length: %s", out);
    /* a response as long as the model's range leaves no room for a prompt */
    snprintf(cmd, sizeof cmd, fmt, DF_BINARY_DIR, dir, dir, LIMIT, "", dir, "none.jsonl");
    assert_int_equal(df_test_command(cmd, out, sizeof out), 1);
    if (!strstr(out, "--max-prompt-length 1024 (default) + --max-response-length 128"))
        fail_msg("unexpected output: %s", out);
}

/* The engine's own guards, behind the config checks: one comparison per request / sequence. */
static void test_engine_refuses(void **state)
{
    (void)state;
    df_model_config c = df_test_rollout_config(50);
    c.max_position_embeddings = 16;
    df_model *m = df_test_biased_model(&c, 5);
    df_rollout_engine *e = NULL;
    assert_int_equal(df_rollout_engine_create(&c, 2, 32, &e), 0); /* slots longer than the model */
    int32_t prompt[10];
    for (int i = 0; i < 10; i++)
        prompt[i] = (int32_t)(3 * i % 50);
    const int64_t off[2] = {0, 10};
    df_rollout_request req = {.n_prompts = 1, .prompt_offsets = off, .prompt_tokens = prompt, .n_samples = 2};
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.greedy = true;
    sp.max_new_tokens = 7; /* 10 + 7 = 17 positions */
    df_rollout_result res;
    assert_error_mentions(df_rollout_generate(e, m, &req, &sp, &res, NULL, NULL), DF_EINVAL,
                          "prompt 0 has 10 tokens and may grow by 7");
    assert_last_error_mentions("more than the model's max_position_embeddings 16");
    assert_null(res.tokens);
    sp.max_new_tokens = 6; /* positions 0 .. 15: runs to its length (no eos ids) */
    assert_int_equal(df_rollout_generate(e, m, &req, &sp, &res, NULL, NULL), 0);
    assert_int_equal(res.offsets[1] - res.offsets[0], 6);
    assert_int_equal(res.finish_reason[0], DF_FINISH_LENGTH);
    df_rollout_result_free(&res);
    df_rollout_engine_free(e);
    /* a slot shorter than the model clamps the response first: 10 + min(100, 14 - 10) = 14 */
    assert_int_equal(df_rollout_engine_create(&c, 2, 14, &e), 0);
    sp.max_new_tokens = 100;
    assert_int_equal(df_rollout_generate(e, m, &req, &sp, &res, NULL, NULL), 0);
    assert_int_equal(res.offsets[1] - res.offsets[0], 4);
    df_rollout_result_free(&res);
    df_rollout_engine_free(e);

    /* a forward (actor, reference, critic, reward model) of a sequence past the range */
    df_acts *a = NULL;
    assert_int_equal(df_acts_create(&c, 32, 32, &a), 0);
    int32_t tok[17], tgt[17];
    int64_t rows[17];
    float logp[17];
    for (int i = 0; i < 17; i++)
        tok[i] = tgt[i] = (int32_t)(7 * i % 50), rows[i] = i;
    int64_t so[2] = {0, 17};
    df_seq_batch b = {.n_tokens = 17, .tokens = tok, .n_seqs = 1, .seq_offsets = so, .n_out = 17,
                      .out_rows = rows, .out_targets = tgt};
    assert_error_mentions(df_model_forward(m, a, &b, 1.0f, logp, NULL), DF_EINVAL,
                          "sequence 0 has 17 tokens, more than the model's max_position_embeddings 16");
    int64_t two[3] = {0, 16, 17}; /* two sequences, the longer at the limit */
    b.n_seqs = 2, b.seq_offsets = two;
    assert_int_equal(df_model_forward(m, a, &b, 1.0f, logp, NULL), 0);
    df_acts_free(a);
    df_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_refused),      cmocka_unit_test(test_node_model_refused),
        cmocka_unit_test(test_train_cli_writes_nothing), cmocka_unit_test(test_train_at_limit_runs),
        cmocka_unit_test(test_sft),                cmocka_unit_test(test_eval),
        cmocka_unit_test(test_engine_refuses),     cmocka_unit_test(test_override_config),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
