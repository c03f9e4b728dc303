/* The chained multi-agent runtime (siiRL MARFT, docs/multi_agent.md): the rollout's prompts equal
 * the agents' templates applied by hand, each node sees its own agent's columns, train_cycle lets
 * one agent train at a time, and the advantage node shares the last agent's score. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"
#include "marft_fixture.h"

#include "distflow/marft.h"
#include "distflow/reward.h"
#include "distflow/worker.h"
#include "util/fsutil.h"
#include "workers/dag/marft_run.h"
#include "workers/worker_internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static df_dag_worker *worker(const char *dir, const char *const *ov, int n_ov)
{
    char yaml[4096];
    job_yaml(dir, yaml, sizeof yaml);
    df_config *cfg = df_test_config(yaml, "chain.yaml", ov, n_ov);
    df_dag_worker *w = NULL;
    if (df_dag_worker_create(cfg, NULL, &w))
        fail_msg("%s", df_last_error());
    /* the worker reads its config while it lives: freed with it below (df_config_free after) */
    return w;
}

static void worker_free(df_dag_worker *w)
{
    const df_config *cfg = w->cfg;
    df_dag_worker_free(w);
    df_config_free((df_config *)cfg);
}

/* ids[n] of the batch's column at row i, as a malloc'd copy. */
static char *decode_row(const df_tokenizer *tok, const df_batch *b, const char *col, int64_t i, bool skip)
{
    int64_t len;
    const int32_t *ids = df_batch_tok_i32(b, col, i, &len);
    assert_non_null(ids);
    char *text = NULL;
    assert_int_equal(df_tokenizer_decode(tok, ids, len, skip, &text), 0);
    return text;
}

static void assert_ids_equal(const df_tokenizer *tok, const char *text, const df_batch *b, const char *col, int64_t i)
{
    int32_t *want = NULL;
    int64_t nw, len;
    assert_int_equal(df_tokenizer_encode(tok, text, false, &want, &nw), 0);
    const int32_t *got = df_batch_tok_i32(b, col, i, &len);
    if (len != nw || memcmp(got, want, (size_t)nw * sizeof *want))
        fail_msg("%s row %lld: %lld tokens, the template applied by hand gives %lld (%s)", col, (long long)i,
                 (long long)len, (long long)nw, text);
    free(want);
}

/* Each row's prompts in b equal the templates applied by hand: the planner's is its template around
   the data's prompt (decoded with its tokenizer t0), the solver's its template around the episode
   after the planner's answer, encoded with its own tokenizer t1. */
static void check_chain_prompts(const df_batch *prompts, const df_batch *b, const df_tokenizer *t0,
                                const df_tokenizer *t1)
{
    df_marft_agent ag[2] = {{.tokenizer = t0, .pre_chat_template = PRE0, .post_chat_template = POST0},
                            {.tokenizer = t1, .pre_chat_template = PRE1, .post_chat_template = POST1}};
    df_marft_chain *c = NULL;
    assert_int_equal(df_marft_chain_create(ag, 2, &c), 0);
    for (int64_t i = 0; i < df_batch_size(b); i++) {
        char *episode = decode_row(t0, prompts, "prompt_ids", i / 2, false), *p0 = NULL, *p1 = NULL, *next = NULL;
        assert_int_equal(df_marft_chain_prompt(c, 0, episode, NULL, &p0), 0);
        assert_ids_equal(t0, p0, b, "agent_group_0_prompt_ids", i);
        char *answer = decode_row(t0, b, "agent_group_0_response_ids", i, false);
        assert_int_equal(df_marft_chain_pass(c, 0, episode, answer, &next), 0);
        assert_int_equal(df_marft_chain_prompt(c, 1, next, NULL, &p1), 0);
        assert_ids_equal(t1, p1, b, "agent_group_1_prompt_ids", i);
        assert_int_equal(df_batch_i64(b, "num_turns")[i], 1);
        free(episode), free(p0), free(p1), free(next), free(answer);
    }
    df_marft_chain_free(c);
}

/* The test: the chained rollout's prompts equal the templates applied by hand (one turn). */
static void test_chain_prompts(void **state)
{
    const char *dir = *state;
    df_test_two_models(dir);
    write_chain(dir, "", "");
    df_dag_worker *w = worker(dir, NULL, 0);
    assert_non_null(w->marft);
    assert_int_equal(w->marft->n_agents, 2);
    df_batch *prompts = NULL, *b = NULL;
    assert_int_equal(df_worker_next_prompts(w, 0, &prompts), 0);
    assert_int_equal(df_marft_generate(w, prompts, 2, NULL, 5, NULL, &b), 0);
    assert_int_equal(df_batch_size(b), 2 * df_batch_size(prompts));
    assert_false(df_batch_has(b, "prompt_ids")); /* each agent its own */
    assert_true(df_batch_has(b, "uid") && df_batch_has(b, "ground_truth"));
    check_chain_prompts(prompts, b, w->tok, w->tok);
    /* each sample its own stream: the two samples of a prompt differ somewhere */
    int64_t la, lb;
    const int32_t *ra = df_batch_tok_i32(b, "agent_group_0_response_ids", 0, &la);
    const int32_t *rb = df_batch_tok_i32(b, "agent_group_0_response_ids", 1, &lb);
    assert_true(la != lb || memcmp(ra, rb, (size_t)la * sizeof *ra));
    df_batch_free(b);
    df_batch_free(prompts);
    worker_free(w);
}

/* In the chained layout each agent has its own tokenizer: the solver's model with another one renders
   and decodes with it, and a step trains (independent groups refuse it: test_agent_slots). */
static void test_chain_own_tokenizers(void **state)
{
    const char *dir = *state;
    df_test_two_models(dir);
    const char *texts[] = {"Solve this: a different corpus", "ANSWER: for a different tokenizer", "of 12 digits"};
    char b_dir[1024];
    snprintf(b_dir, sizeof b_dir, "%s/b", dir);
    df_test_tiny_model(b_dir, texts, 3, 280, 32, 2, 13); /* replaces dir/b/model */
    write_chain(dir, "", "");
    const char *ov[] = {"trainer.total_training_steps=1"};
    df_dag_worker *w = worker(dir, ov, 1);
    const df_tokenizer *t1 = w->agents[1].tok;
    assert_ptr_not_equal(t1, w->tok);
    assert_true(df_tokenizer_vocab_size(t1) != df_tokenizer_vocab_size(w->tok));
    df_batch *prompts = NULL, *b = NULL;
    assert_int_equal(df_worker_next_prompts(w, 0, &prompts), 0);
    assert_int_equal(df_marft_generate(w, prompts, 2, NULL, 5, NULL, &b), 0);
    check_chain_prompts(prompts, b, w->tok, t1);
    df_batch_free(b);
    df_batch_free(prompts);
    if (df_dag_worker_fit(w))
        fail_msg("%s", df_last_error());
    worker_free(w);
    /* custom_chat_template replaces group 0's template only: refused rather than half applied */
    char yaml[4096];
    job_yaml(dir, yaml, sizeof yaml);
    const char *ov2[] = {"trainer.total_training_steps=1", "actor_rollout_ref.model.custom_chat_template='{{ x }}'"};
    df_config *cfg = df_test_config(yaml, "chain.yaml", ov2, 2);
    assert_int_equal(df_dag_worker_create(cfg, NULL, &w), DF_EUNSUPPORTED);
    if (!strstr(df_last_error(), "agent group 1 renders with its own tokenizer"))
        fail_msg("%s", df_last_error());
    df_config_free(cfg);
}

/* Two turns with siiRL's MathEnv after the solver (rewards_with_env): the environment's verdict ends
   the solver's episode text, so the planner's second prompt carries it; the solver's env_return is
   the environment's score of its own answer. */
static void test_chain_env_turns(void **state)
{
    const char *dir = *state;
    df_test_two_models(dir);
    write_chain(dir, "", ", obs_with_env: true, env_path: [examples/experimental/marft/config/math_env.py:MathEnv]");
    const char *ov[] = {"actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
                        "actor_rollout_ref.rollout.agent.rewards_with_env=true"};
    df_dag_worker *w = worker(dir, ov, 2);
    assert_non_null(w->marft->env);
    df_batch *prompts = NULL, *b = NULL;
    assert_int_equal(df_worker_next_prompts(w, 0, &prompts), 0);
    assert_int_equal(df_marft_generate(w, prompts, 2, NULL, 5, NULL, &b), 0);
    const float *env = df_batch_f32(b, "agent_group_1_env_return");
    assert_non_null(env);
    int64_t two = 0;
    for (int64_t i = 0; i < df_batch_size(b); i++) {
        char *answer = decode_row(w->tok, b, "agent_group_1_response_ids", i, true);
        double digits = 0;
        df_test_digit_share(NULL, answer, NULL, NULL, &digits);
        assert_true(env[i] == (float)digits); /* the digit-share scorer of test/digits on the solver's answer */
        char *p0 = decode_row(w->tok, b, "agent_group_0_prompt_ids", i, false);
        const int64_t turns = df_batch_i64(b, "num_turns")[i];
        assert_true(turns == 1 || turns == 2);
        if (turns == 2) { /* the planner's last prompt saw the first turn's verdict */
            two++;
            assert_non_null(strstr(p0, "This answer is wrong."));
        }
        free(answer), free(p0);
    }
    assert_true(two > 0);
    df_batch_free(b);
    df_batch_free(prompts);
    worker_free(w);
}

/* Per-agent columns: a node of group g reads group g's without the prefix; what it adds is its. */
static void test_views(void **state)
{
    (void)state;
    df_marft_run r = {.n_agents = 2, .view = -1};
    df_batch *b = df_batch_new(1);
    const int64_t off[] = {0, 2};
    const int32_t r0[] = {1, 2}, r1[] = {3, 4};
    const char *uid[] = {"u"};
    assert_int_equal(df_batch_set_str(b, "uid", uid), 0);
    assert_int_equal(df_batch_set_tok_i32(b, "agent_group_0_response_ids", off, r0), 0);
    assert_int_equal(df_batch_set_tok_i32(b, "agent_group_1_response_ids", off, r1), 0);
    assert_int_equal(df_marft_view(&r, b, 1), 0);
    assert_int_equal(df_batch_tok_i32(b, "response_ids", 0, NULL)[0], 3);
    assert_true(df_batch_has(b, "agent_group_0_response_ids") && df_batch_has(b, "uid"));
    const float lp[] = {-1, -2};
    assert_int_equal(df_batch_set_tok_f32(b, "old_log_probs", off, lp), 0); /* a node of group 1 adds it */
    assert_int_equal(df_marft_view(&r, b, 0), 0);
    assert_true(df_batch_has(b, "agent_group_1_old_log_probs") && df_batch_has(b, "agent_group_1_response_ids"));
    assert_false(df_batch_has(b, "old_log_probs"));
    assert_int_equal(df_batch_tok_i32(b, "response_ids", 0, NULL)[0], 1);
    assert_int_equal(df_marft_view(&r, b, -1), 0);
    assert_int_equal(df_batch_num_columns(b), 4);
    assert_true(df_batch_has(b, "uid") && df_batch_has(b, "agent_group_0_response_ids"));
    /* a group's column named as one of the batch's own */
    assert_int_equal(df_batch_set_str(b, "agent_group_0_uid", uid), 0);
    assert_error_mentions(df_marft_view(&r, b, 0), DF_EINTERNAL, "'uid' is agent group 0's and the batch's own");
    df_batch_free(b);
    free(r.shared);
}

/* A whole step: both agents train on their own responses (the planner on the solver's score,
   shared), their metrics under their prefixes. */
static void test_step_trains_both(void **state)
{
    const char *dir = *state;
    df_test_two_models(dir);
    write_chain(dir, "", "");
    const char *ov[] = {"trainer.total_training_steps=1", "trainer.logger=[console]"};
    df_dag_worker *w = worker(dir, ov, 2);
    df_model *i0 = df_test_model_copy(df_actor_model(w->actor.model)), *i1 = df_test_model_copy(df_actor_model(w->agents[1].actor->model));
    /* the console's lines into dir/console.txt */
    char out[1100];
    snprintf(out, sizeof out, "%s/console.txt", dir);
    fflush(stdout);
    int saved = dup(1), fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(saved >= 0 && fd >= 0 && dup2(fd, 1) >= 0);
    int rc = df_dag_worker_fit(w);
    fflush(stdout);
    dup2(saved, 1);
    close(saved), close(fd);
    if (rc)
        fail_msg("%s", df_last_error());
    char *text = NULL;
    assert_int_equal(df_read_file(out, &text, NULL), 0);
    /* the banner names the layout, the step line each agent's loss */
    const char *want[] = {"agents: 2 agent groups, chained (rollout_planner -> rollout_solver), up to 1 turn, "
                          "no environment\n  agent 1: ",
                          " | pg_loss[0] ", " | pg_loss[1] ", " | score "};
    for (size_t k = 0; k < sizeof want / sizeof *want; k++)
        if (!strstr(text, want[k]))
            fail_msg("the console lacks '%s':\n%s", want[k], text);
    free(text);
    assert_true(df_test_max_param_diff(df_actor_model(w->actor.model), i0) > 0);
    assert_true(df_test_max_param_diff(df_actor_model(w->agents[1].actor->model), i1) > 0);
    json_t *lines = df_test_metrics(dir, "out", true), *s1 = json_array_get(lines, 0);
    const char *keys[] = {"agent_0_actor/pg_loss", "agent_1_actor/pg_loss", "agent_0_critic/score/mean",
                          "agent_1_critic/score/mean", "agent_0_response_length/mean", "critic/score/mean",
                          "agent_1_critic/advantages/max"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
        if (!json_is_number(json_object_get(s1, keys[k])))
            fail_msg("step 1 lacks %s", keys[k]);
    /* shared reward: the planner's score is the solver's (same sequences, summed per response) */
    assert_true(json_real_value(json_object_get(s1, "agent_0_critic/score/mean")) ==
                json_real_value(json_object_get(s1, "agent_1_critic/score/mean")));
    json_decref(lines);
    df_model_free(i0);
    df_model_free(i1);
    worker_free(w);
}

/* train_cycle 1 with two agents: step 1 trains agent 1 only ((1 / 1) mod 2), step 2 agent 0 only. */
static void test_train_cycle(void **state)
{
    const char *dir = *state;
    df_test_two_models(dir);
    write_chain(dir, ", agent_options: {train_cycle: 1}", "");
    const char *ov[] = {"trainer.total_training_steps=1"};
    df_dag_worker *w = worker(dir, ov, 1);
    df_model *i0 = df_test_model_copy(df_actor_model(w->actor.model)), *i1 = df_test_model_copy(df_actor_model(w->agents[1].actor->model));
    if (df_dag_worker_fit(w))
        fail_msg("%s", df_last_error());
    assert_true(df_test_same_params(df_actor_model(w->actor.model), i0));
    assert_true(df_test_max_param_diff(df_actor_model(w->agents[1].actor->model), i1) > 0);
    json_t *lines = df_test_metrics(dir, "out", true), *s1 = json_array_get(lines, 0);
    assert_null(json_object_get(s1, "agent_0_actor/pg_loss"));
    assert_true(json_is_number(json_object_get(s1, "agent_1_actor/pg_loss")));
    json_decref(lines);
    df_model_free(i0);
    df_model_free(i1);
    worker_free(w);
}

/* Both agents' files of global_step_<k> under dir/a and dir/b are byte-identical. */
static void assert_same_step(const char *dir, const char *a, const char *b, int k)
{
    static const char *const rel[] = {"actor/model.safetensors", "actor/train_state.safetensors",
                                      "actor_agent_1/model.safetensors", "actor_agent_1/train_state.safetensors",
                                      "trainer_state.json"};
    for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
        char pa[1200], pb[1200], *x = NULL, *y = NULL;
        size_t nx = 0, ny = 0;
        snprintf(pa, sizeof pa, "%s/%s/global_step_%d/%s", dir, a, k, rel[i]);
        snprintf(pb, sizeof pb, "%s/%s/global_step_%d/%s", dir, b, k, rel[i]);
        assert_int_equal(df_read_file(pa, &x, &nx), 0);
        assert_int_equal(df_read_file(pb, &y, &ny), 0);
        if (nx != ny || memcmp(x, y, nx))
            fail_msg("%s and %s differ", pa, pb);
        free(x), free(y);
    }
}

/* Three steps straight, and one then a new run resuming to three: the same bits for both agents,
   with train_cycle 1 giving the steps to agent 1, 0, 1 (the resumed run trains both) and the
   environment's turns. */
static void test_resume_chained(void **state)
{
    const char *dir = *state;
    df_test_two_models(dir);
    write_chain(dir, ", agent_options: {train_cycle: 1}", ", obs_with_env: true, env_path: [math_env.py:MathEnv]");
    char yaml[4096], full[1200], part[1200];
    job_yaml(dir, yaml, sizeof yaml);
    snprintf(full, sizeof full, "trainer.default_local_dir=%s/full", dir);
    snprintf(part, sizeof part, "trainer.default_local_dir=%s/part", dir);
    const char *three[] = {full, "trainer.total_training_steps=3", "trainer.save_freq=1",
                           "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2"};
    if (df_test_run(NULL, df_test_config(yaml, "full.yaml", three, 4)))
        fail_msg("%s", df_last_error());
    three[0] = part;
    three[1] = "trainer.total_training_steps=1";
    if (df_test_run(NULL, df_test_config(yaml, "part.yaml", three, 4)))
        fail_msg("%s", df_last_error());
    three[1] = "trainer.total_training_steps=3"; /* resume_mode auto: from global_step_1 */
    if (df_test_run(NULL, df_test_config(yaml, "part.yaml", three, 4)))
        fail_msg("%s", df_last_error());
    assert_same_step(dir, "full", "part", 3);
}

/* One hand-made row of two agents through the advantage node with gae_marft (gamma = lam = 1, so
 * a return is the value-free sum of the rewards after it along the chain): the solver's score 1 at
 * its last token; shared, the planner's last token gets it too. Planner values [0.5, 0.25], solver
 * values [0.1, 0.2]:
 *   solver  t1: delta = 1 + 0 - 0.2 = 0.8;          g = 0.8;  return 0.8 + 0.2 = 1
 *           t0: delta = 0.2 - 0.1 = 0.1;            g = 0.9;  return 0.9 + 0.1 = 1
 *   planner t1: delta = 1 + 0.1 - 0.25 = 0.85;      g = 1.75; return 1.75 + 0.25 = 2
 *           t0: delta = 0.25 - 0.5 = -0.25;         g = 1.5;  return 1.5 + 0.5 = 2
 * Not shared, the planner's last delta is 0 + 0.1 - 0.25 and its returns are 1. Swapped agents or a
 * lost share give other numbers. */
static df_batch *gae_row(void)
{
    df_batch *b = df_batch_new(1);
    const int64_t off[] = {0, 2};
    const int32_t r0[] = {5, 6}, r1[] = {7, 8};
    const float s1[] = {0, 1}, v0[] = {0.5f, 0.25f}, v1[] = {0.1f, 0.2f};
    const char *uid[] = {"u"};
    assert_int_equal(df_batch_set_str(b, "uid", uid), 0);
    assert_int_equal(df_batch_set_tok_i32(b, "agent_group_0_response_ids", off, r0), 0);
    assert_int_equal(df_batch_set_tok_i32(b, "agent_group_1_response_ids", off, r1), 0);
    assert_int_equal(df_batch_set_tok_f32(b, "agent_group_1_token_level_scores", off, s1), 0);
    assert_int_equal(df_batch_set_tok_f32(b, "agent_group_1_token_level_rewards", off, s1), 0);
    assert_int_equal(df_batch_set_tok_f32(b, "agent_group_0_values", off, v0), 0);
    assert_int_equal(df_batch_set_tok_f32(b, "agent_group_1_values", off, v1), 0);
    return b;
}

static void assert_returns(const df_batch *b, const char *col, float want)
{
    int64_t len;
    const float *r = df_batch_tok_f32(b, col, 0, &len);
    assert_non_null(r);
    assert_int_equal(len, 2);
    for (int t = 0; t < 2; t++)
        assert_near(r[t], want, 1e-6);
}

static void test_gae_marft_node(void **state)
{
    const char *dir = *state;
    df_test_two_models(dir);
    write_chain_ex(dir, "", "", true);
    char crit[1200];
    snprintf(crit, sizeof crit, "critic.model.path=%s/model", dir);
    const char *ov[] = {"algorithm.adv_estimator=gae_marft", crit, "critic.ppo_micro_batch_size_per_gpu=2", "critic.ppo_mini_batch_size=4",
                        "algorithm.gamma=1", "algorithm.lam=1"};
    df_dag_worker *w = worker(dir, ov, 6);
    df_node *adv = df_task_graph_get_node(w->graph, "adv");
    df_node_ctx ctx = {.worker = w, .node = adv, .step = 1, .metrics = w->metrics};
    for (int share = 1; share >= 0; share--) {
        w->global.cfg.algorithm.share_reward_in_agent = share;
        df_batch *b = gae_row();
        df_node_output out = {0};
        if (adv->fn(&ctx, b, &out))
            fail_msg("%s", df_last_error());
        assert_returns(b, "agent_group_1_returns", 1.0f);
        assert_returns(b, "agent_group_0_returns", share ? 2.0f : 1.0f);
        assert_true(df_batch_has(b, "agent_group_0_advantages") && !df_batch_has(b, "advantages"));
        assert_near(df_batch_tok_f32(b, "agent_group_0_token_level_scores", 0, NULL)[1], share ? 1.0 : 0.0, 0);
        df_batch_free(b);
    }
    worker_free(w);
}

int main(void)
{
    if (df_reward_register("test/digits", df_test_digit_share))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_views),
        cmocka_unit_test_setup_teardown(test_chain_prompts, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_chain_own_tokenizers, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_chain_env_turns, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_step_trains_both, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_train_cycle, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_gae_marft_node, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_resume_chained, df_test_mkdtemp, df_test_rmtree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
