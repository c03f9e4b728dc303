/*
 * test_mpi_failure.c — a failing rank ends the whole job, with no hang.
 *
 * Runs `mpiexec -np 2 distflow train` on a tiny GRPO job whose workflow has
 * an extra CUSTOM node (tests/plugins/fail_on_rank.c) that fails, or kills
 * its process, on rank 1 only; rank 0 runs on into the next collective. The
 * job must exit non-zero within 30 s, and for an error the message must name
 * the rank, the node and the cause. Skipped when distflow was built without
 * MPI.
 */
/* rounding-free (scripts/test-variants.sh skips it): exit codes, files, two runs of one build compared */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"
#include "util/timeutil.h"

#include <stdio.h>
#include <string.h>

static const char *WORKFLOW = "dag_id: grpo_with_injected_failure\n"
                              "nodes:\n"
                              "  - {node_id: rollout_actor, node_type: MODEL_INFERENCE, node_role: ROLLOUT}\n"
                              "  - {node_id: inject, node_type: CUSTOM, dependencies: [rollout_actor],\n"
                              "     executable_ref: \"%s/plugins/test/libfail_on_rank.so:%s\"}\n"
                              "  - {node_id: function_reward, node_type: COMPUTE, node_role: REWARD,\n"
                              "     dependencies: [inject]}\n"
                              "  - {node_id: calculate_advantages, node_type: COMPUTE, node_role: ADVANTAGE,\n"
                              "     dependencies: [function_reward]}\n"
                              "  - {node_id: actor_old_log_prob, node_type: MODEL_TRAIN, node_role: ACTOR,\n"
                              "     only_forward_compute: true, dependencies: [calculate_advantages]}\n"
                              "  - {node_id: actor_train, node_type: MODEL_TRAIN, node_role: ACTOR,\n"
                              "     dependencies: [actor_old_log_prob]}\n";

/* Run the job with the plugin function `fn`; its combined output into out[cap]. */
static int run_job(const char *dir, const char *fn, char *out, size_t cap, double *seconds)
{
    char path[512], cmd[4096];
    snprintf(path, sizeof path, "%s/wf.yaml", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, WORKFLOW, DF_BINARY_DIR, fn);
    fclose(f);
    snprintf(path, sizeof path, "%s/job.yaml", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 4,\n"
            "       max_prompt_length: 128, max_response_length: 8}\n"
            "actor_rollout_ref:\n"
            "  model: {path: %s/model}\n"
            "  actor: {ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 4}\n"
            "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 8}\n"
            "algorithm: {adv_estimator: grpo}\n"
            "dag: {workflow_path: %s/wf.yaml}\n"
            "trainer: {total_training_steps: 3, logger: [], default_local_dir: %s/out}\n",
            dir, dir, dir, dir);
    fclose(f);
    /* `timeout` bounds a hang so the test fails instead of stalling ctest */
    snprintf(cmd, sizeof cmd,
             "DF_TEST_FAIL_RANK=1 OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
             "OMPI_MCA_mpi_yield_when_idle=1 timeout -s KILL 90 %s --oversubscribe -np 2 %s/distflow train "
             "%s 2>&1",
             DF_MPIEXEC, DF_BINARY_DIR, path);
    double t0 = df_now();
    int status = df_test_command(cmd, out, cap);
    *seconds = df_now() - t0;
    return status;
}

static void test_error_on_one_rank_ends_job(void **state)
{
    static char out[1 << 16];
    double t;
    df_test_digits_inputs(*state, "train.jsonl", 16, "openai/gsm8k", true);
    int code = run_job(*state, "fail_node", out, sizeof out, &t);
    print_message("exit %d after %.1f s\n", code, t);
    assert_int_not_equal(code, 0);
    assert_true(t < 30);
    if (!strstr(out, "error on rank 1 of 2") || !strstr(out, "node 'inject'") ||
        !strstr(out, "injected failure at step 1"))
        fail_msg("the output does not name the rank, node and cause:\n%s", out);
}

static void test_killed_rank_ends_job(void **state)
{
    static char out[1 << 16];
    double t;
    df_test_digits_inputs(*state, "train.jsonl", 16, "openai/gsm8k", true);
    int code = run_job(*state, "kill_node", out, sizeof out, &t);
    print_message("exit %d after %.1f s\n", code, t);
    assert_int_not_equal(code, 0);
    assert_true(t < 30);
    if (strstr(out, "error on rank") || !strstr(out, "signal 9"))
        fail_msg("expected rank 1 to die by SIGKILL, not an error:\n%s", out);
}

int main(void)
{
    if (!DF_MPIEXEC[0]) {
        printf("distflow was built without MPI: skipping\n");
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_error_on_one_rank_ends_job, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_killed_rank_ends_job, df_test_mkdtemp, df_test_rmtree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
