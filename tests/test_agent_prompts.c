/*
 * data.max_prompt_length measures the prompt as the multi-turn rollout renders it. With tools, the
 * agent loop renders each row's messages again with the tools' JSON schemas in the system prompt
 * (Qwen2.5's template), hundreds of tokens more than the dataset's single-turn prompt. verl's
 * RLHFDataset measures with the tool schemas (rl_dataset.py, maybe_filter_out_long_prompts), and so
 * does distflow:
 *   - df_prompts_encode_rerendered gives the ids df_agent_loop_begin feeds the model, bit for bit;
 *   - df_prompts_limit_ex filters on that length; data.truncation cannot cut a prompt the loop
 *     renders again, so it is refused naming the key; the loop's own check refuses a longer
 *     first prompt (an environment's observation is only known there);
 *   - the DAG worker drops exactly the rows whose prompt with the tools is too long, where the
 *     dataset's own prompt would fit (a tiny model whose template is Qwen2.5's).
 */
#include "distflow/agent.h"
#include "distflow/dataset.h"
#include "workers/rollout/agent_loop.h"
#include "workers/worker_internal.h"

#include "testutil.h"

#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define QWEN DF_SHARED_DIR "/data/tokenizers/qwen2.5"
#define CALC_TOOLS DF_SOURCE_DIR "/examples/gsm8k_multiturn/config/tool_config/calculator_tool_config.yaml"
#define ROWS 12

static char dir[256];

static df_dataset *load_rows(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/train.jsonl", dir);
    const char *paths[1] = {path};
    df_dataset_opts o = {0};
    df_dataset *ds = NULL;
    assert_int_equal(df_dataset_load(paths, 1, &o, &ds), DF_OK);
    return ds;
}

static int64_t len_of(const df_prompt_cache *c, int64_t i) { return c->offsets[i + 1] - c->offsets[i]; }

/* The dataset's prompts with the tools are the ids the agent loop starts from, and longer. */
static void test_encode_as_the_loop(void **state)
{
    (void)state;
    df_tokenizer *tok = NULL;
    assert_int_equal(df_tokenizer_load(QWEN, &tok), DF_OK);
    df_agent_config cfg = {0};
    assert_int_equal(df_agent_config_load(&cfg, CALC_TOOLS, NULL, NULL, NULL, NULL), DF_OK);
    df_dataset *ds = load_rows();
    df_prompt_cache plain, tools;
    assert_int_equal(df_prompts_encode(ds, tok, &plain), DF_OK);
    assert_int_equal(df_prompts_encode_rerendered(ds, tok, true, cfg.tools_json, &tools), DF_OK);
    df_batch *b = df_batch_new(ROWS);
    const char *raw[ROWS];
    int64_t idx[ROWS];
    for (int64_t i = 0; i < ROWS; i++)
        raw[i] = df_dataset_raw_prompt(ds, i), idx[i] = i;
    assert_int_equal(df_batch_set_str(b, "raw_prompt", raw), DF_OK);
    assert_int_equal(df_batch_set_i64(b, "index", idx), DF_OK);
    df_agent_loop *l = NULL;
    df_batch *gp = NULL;
    assert_int_equal(df_agent_loop_begin(&cfg, tok, b, 1, 0, &l, &gp), DF_OK);
    for (int64_t i = 0; i < ROWS; i++) {
        int64_t n;
        const int32_t *ids = df_batch_tok_i32(gp, "prompt_ids", i, &n);
        assert_int_equal(n, len_of(&tools, i));
        assert_memory_equal(ids, tools.tokens + tools.offsets[i], (size_t)n * sizeof *ids);
        assert_true(len_of(&tools, i) > len_of(&plain, i) + 100); /* two tools' schemas */
    }
    print_message("row 0: %lld prompt tokens, %lld with the calculator and GSM8K tools\n",
                  (long long)len_of(&plain, 0), (long long)len_of(&tools, 0));
    df_agent_loop_free(l), df_batch_free(gp), df_batch_free(b);
    df_prompt_cache_free(&plain), df_prompt_cache_free(&tools), df_dataset_free(ds);
    df_agent_config_clear(&cfg), df_tokenizer_free(tok);
}

/* The limit on the rendering with the tools: filtered, truncation refused, the loop's check. */
static void test_limit_with_tools(void **state)
{
    (void)state;
    df_tokenizer *tok = NULL;
    assert_int_equal(df_tokenizer_load(QWEN, &tok), DF_OK);
    df_agent_config cfg = {0};
    assert_int_equal(df_agent_config_load(&cfg, CALC_TOOLS, NULL, NULL, NULL, NULL), DF_OK);
    df_dataset *ds = load_rows();
    df_prompt_cache pc;
    assert_int_equal(df_prompts_encode_rerendered(ds, tok, true, cfg.tools_json, &pc), DF_OK);
    /* the shortest prompt's length: the rows with longer numbers are over it */
    int64_t max = len_of(&pc, 0);
    for (int64_t i = 1; i < ROWS; i++)
        max = len_of(&pc, i) < max ? len_of(&pc, i) : max;
    int64_t dropped = -1, want = 0;
    for (int64_t i = 0; i < ROWS; i++)
        want += len_of(&pc, i) > max;
    assert_true(want > 0 && want < ROWS);
    df_prompt_limits lim = {max, false, "left", "actor_rollout_ref.rollout.multi_turn.enable"};
    assert_error_mentions(df_prompts_limit_ex(ds, &pc, &lim, &dropped), DF_EINVAL,
                          "data.truncation=left cannot shorten it: with actor_rollout_ref.rollout.multi_turn.enable");
    lim.truncation = "error";
    assert_error_mentions(df_prompts_limit_ex(ds, &pc, &lim, &dropped), DF_EINVAL, "data.filter_overlong_prompts=true");
    lim.filter = true;
    assert_int_equal(df_prompts_limit_ex(ds, &pc, &lim, &dropped), DF_OK);
    assert_int_equal(dropped, want);
    assert_int_equal(df_dataset_size(ds), ROWS - want);
    for (int64_t i = 0; i < pc.n; i++)
        assert_true(len_of(&pc, i) <= max);
    /* the loop refuses a first prompt over its limit, naming the row */
    df_batch *b = df_batch_new(1);
    const char *raw[1] = {"[{\"role\":\"user\",\"content\":\"Add 11 and 23. What do you get?\"}]"};
    assert_int_equal(df_batch_set_str(b, "raw_prompt", raw), DF_OK);
    cfg.max_prompt_length = max;
    df_agent_loop *l = NULL;
    df_batch *gp = NULL;
    assert_error_mentions(df_agent_loop_begin(&cfg, tok, b, 1, 0, &l, &gp), DF_EINVAL,
                          "row 0: rendering the prompt: the prompt has");
    cfg.max_prompt_length = 0;
    assert_int_equal(df_agent_loop_begin(&cfg, tok, b, 1, 0, &l, &gp), DF_OK);
    df_agent_loop_free(l), df_batch_free(gp), df_batch_free(b);
    df_prompt_cache_free(&pc), df_dataset_free(ds), df_agent_config_clear(&cfg), df_tokenizer_free(tok);
}

/* The tiny model's tokenizer given Qwen2.5's chat template, which lists tools in its system prompt. */
static void use_qwen_template(void)
{
    json_t *q = json_load_file(QWEN "/tokenizer_config.json", 0, NULL);
    char path[512];
    snprintf(path, sizeof path, "%s/model/tokenizer_config.json", dir);
    json_t *t = json_load_file(path, 0, NULL);
    assert_non_null(q);
    assert_non_null(t);
    json_object_set(t, "chat_template", json_object_get(q, "chat_template"));
    assert_int_equal(json_dump_file(t, path, JSON_INDENT(1)), 0);
    json_decref(q), json_decref(t);
}

/* The DAG worker's data: the rows over the limit with the tools are dropped (none without them). */
static void test_worker_filters_with_tools(void **state)
{
    (void)state;
    char model[512], yaml[2048];
    snprintf(model, sizeof model, "%s/model", dir);
    df_tokenizer *tok = NULL;
    assert_int_equal(df_tokenizer_load(model, &tok), DF_OK);
    df_agent_config cfg = {0};
    assert_int_equal(df_agent_config_load(&cfg, CALC_TOOLS, NULL, NULL, NULL, NULL), DF_OK);
    df_dataset *ds = load_rows();
    df_prompt_cache plain, tools;
    assert_int_equal(df_prompts_encode(ds, tok, &plain), DF_OK);
    assert_int_equal(df_prompts_encode_rerendered(ds, tok, true, cfg.tools_json, &tools), DF_OK);
    int64_t max = 0, longest_plain = 0, want = 0;
    for (int64_t i = 0; i < ROWS; i++) {
        max = i == 0 || len_of(&tools, i) < max ? len_of(&tools, i) : max;
        longest_plain = len_of(&plain, i) > longest_plain ? len_of(&plain, i) : longest_plain;
    }
    for (int64_t i = 0; i < ROWS; i++)
        want += len_of(&tools, i) > max;
    assert_true(longest_plain < max && want > 0 && want <= ROWS - 4);
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 4, shuffle: false,\n"
             "       max_prompt_length: %lld, max_response_length: 16, filter_overlong_prompts: true}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s}\n"
             "  actor: {ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 8}\n"
             "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 4,\n"
             "            multi_turn: {enable: true, tool_config_path: %s}}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "trainer: {total_training_steps: 1, save_freq: -1, test_freq: -1, logger: [],\n"
             "          default_local_dir: %s/out}\n",
             dir, (long long)max, model, CALC_TOOLS, dir);
    df_config *c = df_test_config(yaml, "prompts.yaml", NULL, 0);
    df_dag_worker *w = NULL;
    if (df_dag_worker_create(c, NULL, &w))
        fail_msg("%s", df_last_error());
    print_message("limit %lld: %lld of %d rows dropped (their longest prompt without tools: %lld)\n",
                  (long long)max, (long long)w->con.filtered[0], ROWS, (long long)longest_plain);
    assert_int_equal(w->con.filtered[0], want);
    assert_int_equal(w->con.prompts[0], ROWS - want);
    for (int64_t i = 0; i < w->train_prompts.n; i++)
        assert_true(len_of(&w->train_prompts, i) <= max);
    df_dag_worker_free(w), df_config_free(c);
    df_prompt_cache_free(&plain), df_prompt_cache_free(&tools), df_dataset_free(ds);
    df_agent_config_clear(&cfg), df_tokenizer_free(tok);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/df_agent_prompts_XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    df_test_digits_inputs(dir, "train.jsonl", ROWS, "openai/gsm8k", true);
    use_qwen_template();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    df_test_remove_tree(dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_as_the_loop),
        cmocka_unit_test(test_limit_with_tools),
        cmocka_unit_test(test_worker_filters_with_tools),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
