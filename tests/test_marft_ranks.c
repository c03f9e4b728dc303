/* The chained multi-agent pipeline (siiRL MARFT) on N ranks equals 1 rank: every episode's draws
 * are keyed by its prompt's dataset index, sample, agent and turn, so the agents' responses, and
 * every metric they decide, do not depend on how the batch is split; trainer.balance_batch moves
 * the rows, every agent's columns with them, through the Data Coordinator after the rollout.
 * On 4 ranks, siiRL's own MARFT workflow file trains as written (its nodes' rollout TP of 4).
 * mpi-test: np 2 4
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"
#include "marft_fixture.h"

#include "distflow/reward.h"
#include "distflow/worker.h"

#include <math.h>
#include <stdlib.h>

static df_comm *world;
static char dir[256];

static void fit(df_comm *comm, const char *out)
{
    char yaml[4096], outdir[512];
    job_yaml(dir, yaml, sizeof yaml);
    snprintf(outdir, sizeof outdir, "trainer.default_local_dir=%s/%s", dir, out);
    /* the whole dataset in the step's batch: the ranks split the same prompts as one rank takes */
    const char *ov[] = {"trainer.total_training_steps=1", "trainer.balance_batch=true", outdir, "data.train_batch_size=8",
                        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
                        "actor_rollout_ref.rollout.agent.rewards_with_env=true"};
    if (df_test_run(comm, df_test_config(yaml, "ranks.yaml", ov, 6)))
        fail_msg("rank %d: %s", df_comm_rank(world), df_last_error());
}

static void test_two_ranks_equal_one(void **state)
{
    (void)state;
    df_comm *self = NULL; /* rank 0 alone first: the reference */
    assert_int_equal(df_comm_split(world, df_comm_rank(world), 0, &self), 0);
    if (df_comm_rank(world) == 0)
        fit(self, "one");
    df_comm_free(self);
    fit(world, "all");
    if (df_comm_rank(world) != 0)
        return;
    json_t *la = df_test_metrics(dir, "one", false), *lb = df_test_metrics(dir, "all", false);
    json_t *a = json_array_get(la, 0), *b = json_array_get(lb, 0);
    /* means of the same per-sequence values summed in another order: equal to rounding; one sequence
       drawn differently moves a length mean by >= 1 / 16 and a score mean by ~1e-2 */
    static const char *const same[] = {"agent_0_response_length/mean", "agent_1_response_length/mean",
                                       "agent_0_critic/score/mean", "agent_1_critic/score/mean",
                                       "num_turns/mean", "agent_0_prompt_length/mean"};
    for (size_t k = 0; k < sizeof same / sizeof *same; k++)
        if (!(fabs(df_test_metric(a, same[k]) - df_test_metric(b, same[k])) <= 1e-9 * fmax(1, fabs(df_test_metric(a, same[k])))))
            fail_msg("%s: %.17g on one rank, %.17g on %d", same[k], df_test_metric(a, same[k]), df_test_metric(b, same[k]),
                     df_comm_size(world));
    json_decref(la), json_decref(lb);
}

#define SIIRL_MARFT DF_SOURCE_DIR "/tests/fixtures/siirl_workflows/2025-09-11_marft_workflow_marft.yaml"

/* siiRL's examples/experimental/marft workflow with its run script's keys (gae_marft, the MathEnv's
   rewards, three turns, its nodes' per-node values as the job's) on the tiny models: the reasoner
   trains at step 1 (train_cycle 15: steps 0-14 are agent 0's), the actor does not; the critic agent 1
   shares (agent 0's) learns from both agents' values; checkpoints as siiRL lays them out. */
static void test_siirl_marft_file(void **state)
{
    (void)state;
    if (df_comm_size(world) != 4) /* its rollout nodes ask for a tensor-parallel size of 4 */
        skip();
    char yaml[4096], wf[600], out[512], crit[600], act[600];
    job_yaml(dir, yaml, sizeof yaml);
    snprintf(wf, sizeof wf, "dag.workflow_path=%s", SIIRL_MARFT);
    snprintf(out, sizeof out, "trainer.default_local_dir=%s/siirl", dir);
    snprintf(crit, sizeof crit, "critic.model.path=%s/model", dir);
    snprintf(act, sizeof act, "actor_rollout_ref.model.path=%s/model", dir);
    const char *ov[] = {wf, out, crit, act, "algorithm.adv_estimator=gae_marft", "data.train_batch_size=8",
                        "actor_rollout_ref.rollout.n=1", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
                        "actor_rollout_ref.rollout.tensor_model_parallel_size=4",
                        "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
                        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
                        "actor_rollout_ref.rollout.agent.rewards_with_env=true",
                        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1", "critic.ppo_micro_batch_size_per_gpu=1",
                        "critic.ppo_mini_batch_size=4", "trainer.total_training_steps=1", "trainer.save_freq=1",
                        "data.max_prompt_length=4096"};
    if (df_test_run(world, df_test_config(yaml, "siirl_marft.yaml", ov, sizeof ov / sizeof *ov)))
        fail_msg("rank %d: %s", df_comm_rank(world), df_last_error());
    if (df_comm_rank(world) != 0)
        return;
    json_t *lines = df_test_metrics(dir, "siirl", false), *s1 = json_array_get(lines, 0);
    static const char *const has[] = {"agent_0_actor/pg_loss", "agent_0_critic/vf_loss", "agent_1_critic/vf_loss",
                                      "agent_1_critic/score/mean", "agent_0_critic/advantages/max", "num_turns/mean"};
    for (size_t k = 0; k < sizeof has / sizeof *has; k++)
        df_test_metric(s1, has[k]);
    assert_null(json_object_get(s1, "agent_1_actor/pg_loss")); /* train_cycle: not agent 1's step */
    json_decref(lines);
    char p[700];
    snprintf(p, sizeof p, "%s/siirl/global_step_1/actor_agent_1/config.json", dir);
    assert_true(df_file_exists(p));
    snprintf(p, sizeof p, "%s/siirl/global_step_1/critic_agent_1", dir); /* shared: saved once, as critic/ */
    assert_false(df_file_exists(p));
}

int main(void)
{
    if (df_comm_world(&world) || !df_test_size_ok(df_comm_size(world)) ||
        df_reward_register("test/digits", df_test_digit_share))
        return 1;
    if (df_comm_rank(world) == 0) {
        snprintf(dir, sizeof dir, "/tmp/df_marft_ranks_XXXXXX");
        if (!mkdtemp(dir))
            return 1;
        df_test_two_models(dir);
        write_chain(dir, "", ", obs_with_env: true, env_path: [math_env.py:MathEnv]");
    }
    if (df_comm_broadcast(world, dir, sizeof dir, 0))
        return 1;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_two_ranks_equal_one), cmocka_unit_test(test_siirl_marft_file)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    return df_test_shared_cleanup(world, dir) ? 1 : rc;
}
