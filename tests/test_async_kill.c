/*
 * test_async_kill.c — a dead rank ends an asynchronous job (docs/async.md, "Failures").
 *
 * `distflow train` with actor_rollout_ref.rollout.mode=async on 3 ranks (2 trainer ranks, 1 rollout
 * rank) under mpiexec, as a child process. A straight run ends cleanly; then a run whose rollout
 * rank is killed mid-generation (DF_TEST_KILL_AT=gen, src/util/killpoint.h), and one whose trainer
 * rank 0 is killed between micro-batches of its first update. Each must end (no rank left waiting
 * for the dead one) within 30 s of the straight run's time: the kill comes before the straight run
 * would have ended, so the bound holds only if the job ends soon after it.
 */
/* rounding-free (scripts/test-variants.sh skips it): exit codes, files, two runs of one build compared */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testcli.h"

#include "util/timeutil.h"

static char dir[256];

static int run(const char *out, const char *kill_at, double *seconds)
{
    char yaml[512], outp[600], log[600];
    snprintf(yaml, sizeof yaml, "%s/async.yaml", dir);
    snprintf(outp, sizeof outp, "trainer.default_local_dir=%s/%s", dir, out);
    snprintf(log, sizeof log, "%s/%s.log", dir, out);
    const char *argv[] = {"train", yaml, outp, NULL};
    df_cli_run o = {.np = 3, .kill_at = kill_at, .log = log};
    double t0 = df_now();
    int rc = df_cli_exec(&o, argv);
    *seconds = df_now() - t0;
    return rc;
}

static void expect(int got, int want, const char *out)
{
    if (got == want)
        return;
    char log[600];
    snprintf(log, sizeof log, "%s/%s.log", dir, out);
    char *text = df_cli_log(log);
    /* the lines that say what went wrong, else the log's end */
    const char *err = strstr(text, "error");
    size_t n = strlen(text);
    fail_msg("%s: status %d, expected %d; log:\n%s", out, got, want, err ? err : n > 3000 ? text + n - 3000 : text);
}

static void test_dead_rank_ends_job(void **state)
{
    (void)state;
    if (!DF_MPIEXEC[0]) {
        skip(); /* built without MPI */
        return;
    }
    double straight, t;
    expect(run("straight", NULL, &straight), DF_CLI_OK, "straight");
    expect(run("rollout_killed", "gen:5@2", &t), DF_CLI_KILLED, "rollout_killed");
    if (!(t <= straight + 30))
        fail_msg("the job went on for %.1f s after its rollout rank died (straight run %.1f s)", t, straight);
    expect(run("trainer_killed", "update:1@0", &t), DF_CLI_KILLED, "trainer_killed");
    if (!(t <= straight + 30))
        fail_msg("the job went on for %.1f s after trainer rank 0 died (straight run %.1f s)", t, straight);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/df_async_kill_XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    df_test_digits_inputs(dir, "train.jsonl", 24, "openai/gsm8k", true);
    char yaml[2048], p[600];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 4,\n"
             "       max_prompt_length: 128, max_response_length: 8}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 1}\n"
             "  rollout: {n: 2, mode: async, log_prob_micro_batch_size_per_gpu: 8}\n"
             "rollout: {n_gpus_per_node: 1}\n"
             "async_training: {max_staleness: 1, max_concurrent_rollouts: 8}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "custom_reward_function: {path: %s/plugins/test/libscore_const.so, name: score_parity}\n"
             "trainer: {total_training_steps: 3, logger: [console]}\n",
             dir, dir, DF_BINARY_DIR);
    snprintf(p, sizeof p, "%s/async.yaml", dir);
    return df_write_file_atomic(p, yaml, strlen(yaml)) ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    return df_test_remove_tree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_dead_rank_ends_job)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
