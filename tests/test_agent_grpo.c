/*
 * Multi-turn GRPO through the DAG worker (the ROLLOUT node's agent loop, agent_loop.h) on the tiny
 * random model: multi_turn.enable with verl's GSM8K interaction (examples/gsm8k_multiturn) and
 * stop strings that end the model's turns often, so every response holds several model turns and
 * interaction replies. Checks the run's metrics (num_turns above the single-turn 2, the replies'
 * tokens masked out of the response length the actor trains on) and, on several ranks, that the
 * distributed run's first step equals the one-rank run's: the same rollouts (each sequence's
 * conversation depends on its own tokens only), scores and turns. The same with verl's multi-turn
 * optimal token baseline (tir_optimal_token_baseline: positions over the model's tokens, the
 * interaction's replies skipped), whose variance proxies are summed over the ranks.
 *
 * mpi-test: np 2
 * (as a plain ctest it runs with one rank and checks the run against itself.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testbounds.h"
#include "testutil.h"

#include "distflow/comm.h"
#include "distflow/reward.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static df_comm *world;
static char dir[256];

#define IA DF_SOURCE_DIR "/examples/gsm8k_multiturn/config/interaction_config/gsm8k_interaction_config.yaml"

/* The one-step multi-turn config; `ov`: n_ov more overrides. */
static df_config *config(const char *out, const char *const *ov, int n_ov)
{
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 8,\n"
             "       shuffle: false, max_prompt_length: 100, max_response_length: 120}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {optim: {lr: 0.01, weight_decay: 0.0}, ppo_mini_batch_size: 8,\n"
             "          ppo_micro_batch_size_per_gpu: 8}\n"
             "  rollout:\n"
             "    n: 2\n"
             "    log_prob_micro_batch_size_per_gpu: 8\n"
             "    stop: ['a', 'e', 'o']\n"
             "    multi_turn: {enable: true, interaction_config_path: %s, max_user_turns: 2}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "trainer: {total_training_steps: 1, save_freq: -1, test_freq: -1, logger: [],\n"
             "          default_local_dir: %s/%s, rollout_data_dir: %s/%s/rollouts}\n",
             dir, dir, IA, dir, out, dir, out);
    return df_test_config(yaml, "agent.yaml", ov, n_ov);
}

static void train_ex(df_comm *comm, const char *out, const char *const *ov, int n_ov)
{
    if (df_test_run(comm, config(out, ov, n_ov)))
        fail_msg("rank %d: %s", df_comm_rank(world), df_last_error());
}

static void train(df_comm *comm, const char *out)
{
    train_ex(comm, out, NULL, 0);
}

static void test_multi_turn_grpo(void **state)
{
    (void)state;
    df_comm *self = NULL;
    assert_int_equal(df_comm_split(world, df_comm_rank(world), 0, &self), 0);
    if (df_comm_rank(world) == 0)
        train(self, "ref");
    df_comm_free(self);
    train(world, "dist");
    assert_int_equal(df_comm_barrier(world), 0);
    if (df_comm_rank(world) != 0)
        return;
    json_t *ref = df_test_metrics(dir, "ref", false), *got = df_test_metrics(dir, "dist", false);
    json_t *a = json_array_get(ref, 0), *b = json_array_get(got, 0);
    assert_non_null(a);
    assert_non_null(b);
    print_message("num_turns mean %.3f max %.0f, response_length/mean %.2f, score/mean %.4f\n",
                  df_test_metric(a, "num_turns/mean"), df_test_metric(a, "num_turns/max"), df_test_metric(a, "response_length/mean"),
                  df_test_metric(a, "critic/score/mean"));
    /* conversations: at most 1 + 3 model turns + 2 replies; the replies happened */
    assert_true(df_test_metric(a, "num_turns/max") > 2.0 && df_test_metric(a, "num_turns/max") <= 6.0);
    assert_true(df_test_metric(a, "num_turns/mean") > 2.0);
    assert_true(df_test_metric(a, "agent_loop/tool_calls/max") == 0.0); /* no tool config */
    const char *same[] = {"critic/score/mean", "critic/score/max", "response_length/mean", "num_turns/mean",
                          "num_turns/max", "num_turns/min", "perf/total_num_tokens"};
    for (size_t k = 0; k < sizeof same / sizeof *same; k++) {
        double u = df_test_metric(a, same[k]), v = df_test_metric(b, same[k]);
        if (fabs(u - v) > 1e-9 * fmax(1.0, fabs(u)))
            fail_msg("%s = %.9g on one rank, %.9g on %d", same[k], u, v, df_comm_size(world));
    }
    json_decref(ref);
    json_decref(got);
}

/*
 * tir_optimal_token_baseline on multi-turn responses, one rank and all of them. expected_w is the
 * mean over responses of W = sum over the model's tokens of w = 1 - 2 pi + sum pi^2, summed over
 * the ranks: in [0, 2 x 120 tokens], and the one-rank run's up to the forward passes' difference
 * (other micro-batches): each log-prob within F (tb_forward_bound), so pi within F (1 + F)
 * relative, and each logit within F / 2, so sum pi^2 (|d log S / d z_v| summing to <= 4) within
 * 2 F (1 + 2 F) relative; w within 4 F (1 + 2 F), W within 120 times that; plus metrics.jsonl's
 * 10 digits.
 */
static void test_multi_turn_tir_otb(void **state)
{
    (void)state;
    const char *ov[] = {"algorithm.adv_estimator=tir_optimal_token_baseline",
                        "actor_rollout_ref.actor.calculate_sum_pi_squared=true"};
    df_comm *self = NULL;
    assert_int_equal(df_comm_split(world, df_comm_rank(world), 0, &self), 0);
    if (df_comm_rank(world) == 0)
        train_ex(self, "otb_ref", ov, 2);
    df_comm_free(self);
    train_ex(world, "otb_dist", ov, 2);
    assert_int_equal(df_comm_barrier(world), 0);
    if (df_comm_rank(world) != 0)
        return;
    json_t *ref = df_test_metrics(dir, "otb_ref", false), *got = df_test_metrics(dir, "otb_dist", false);
    json_t *a = json_array_get(ref, 0), *b = json_array_get(got, 0);
    assert_true(df_test_metric(a, "num_turns/mean") > 2.0); /* replies to skip */
    char path[512];
    snprintf(path, sizeof path, "%s/model", dir);
    df_model *m;
    assert_int_equal(df_model_load(path, &m), 0);
    const double F = tb_forward_bound(m, 100 + 120, 1.0f);
    df_model_free(m);
    const double u = df_test_metric(a, "variance_proxy/expected_w"), v = df_test_metric(b, "variance_proxy/expected_w");
    const double bound = 120 * 4 * F * (1 + 2 * F) + 1e-9 * fmax(u, v);
    print_message("expected_w %.6f on one rank, %.6f on %d (bound %.2e)\n", u, v, df_comm_size(world), bound);
    assert_true(u > 0 && u <= 240.0);
    assert_true(fabs(u - v) <= bound);
    assert_true(df_test_metric(b, "variance_proxy/proxy3_pure_noise") >= 0);
    json_decref(ref);
    json_decref(got);
}

/* dir/<name>: train.jsonl's rows, each with verl's agent_name `agent`. */
static void rows_with_agent(const char *name, const char *agent)
{
    char *text = NULL, out[16384] = "", path[512];
    snprintf(path, sizeof path, "%s/train.jsonl", dir);
    assert_int_equal(df_read_file(path, &text, NULL), DF_OK);
    for (char *line = text, *end; (end = strchr(line, '\n')); line = end + 1) {
        size_t n = strlen(out);
        snprintf(out + n, sizeof out - n, "{\"agent_name\": \"%s\", %.*s\n", agent, (int)(end - line - 1), line + 1);
    }
    assert_true(strlen(out) < sizeof out - 1);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(df_write_file_atomic(path, out, strlen(out)), DF_OK);
    free(text);
}

/* A row that names verl's single-turn loop in a multi-turn job is refused at its line (distflow runs
 * one agent loop per job: the row would otherwise go through the tool loop unannounced); rank 0 alone. */
static void test_single_turn_rows_refused(void **state)
{
    (void)state;
    df_comm *self = NULL;
    assert_int_equal(df_comm_split(world, df_comm_rank(world), 0, &self), 0);
    if (df_comm_rank(world) == 0) {
        rows_with_agent("single.jsonl", "single_turn_agent");
        char ov[600];
        snprintf(ov, sizeof ov, "data.train_files=[%s/single.jsonl]", dir);
        const char *ovs[] = {ov};
        assert_int_equal(df_test_run(self, config("single", ovs, 1)), DF_EINVAL);
        if (!strstr(df_last_error(), "single.jsonl:1: agent_name \"single_turn_agent\": the tool loop is on"))
            fail_msg("error: %s", df_last_error());
    }
    df_comm_free(self);
}

static int setup(void **state)
{
    (void)state;
    if (df_comm_world(&world) || df_reward_register("test/digits", df_test_digit_share))
        return -1;
    if (df_comm_rank(world) == 0) {
        snprintf(dir, sizeof dir, "/tmp/df_agent_XXXXXX");
        if (!mkdtemp(dir))
            return -1;
        df_test_digits_inputs(dir, "train.jsonl", 16, "test/digits", true);
    }
    return df_comm_broadcast(world, dir, sizeof dir, 0) ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    df_comm_barrier(world);
    if (df_comm_rank(world) == 0)
        df_test_remove_tree(dir);
    df_comm_shutdown();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multi_turn_grpo),
        cmocka_unit_test(test_multi_turn_tir_otb),
        cmocka_unit_test(test_single_turn_rows_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
