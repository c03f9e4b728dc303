/*
 * test_pf_ppo_train.c — algorithm.use_pf_ppo through the DAG worker: PPO (gae) whose step batch is
 * resampled after the advantages (verl compute_advantage -> compute_pf_ppo_reweight_data).
 *
 * mpi-test: np 2 3
 * (as a plain ctest it runs with one rank and checks the run against itself.)
 *
 * Rank 0 first runs one step alone; then every rank runs the same step together. The first
 * rollout decodes from the same initial weights with each prompt's stream keyed by its dataset row,
 * so both runs score the same responses (unless rounding flips a drawn token: a chance well below
 * 1e-2 here, see test_dist_train), and PF-PPO draws from the whole step batch's scores with a
 * stream keyed by the seed and the step: the resampled batch — what trainer.rollout_data_dir dumps
 * at the end of the step — must hold the same lines, however many ranks drew them and however the
 * Data Coordinator spread them. A draw with replacement of 12 rows repeats one (a run without
 * PF-PPO dumps each row once). The ranks' drawn rows differ in number; the hand-off after the
 * advantage node evens them (each rank's dump holds 12 / N rows). Also: use_pf_ppo with another
 * estimator than gae is refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"

#include "distflow/comm.h"
#include "distflow/reward.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static df_comm *world;
static char dir[256];

#define ROWS 12 /* 6 prompts x 2 responses: a multiple of 2 and 3 ranks */

/* One PPO step on comm into dir/<out>, with PF-PPO as `pf` says (a verl key=value, or NULL). */
static int ppo(df_comm *comm, const char *out, const char *pf, const char *estimator)
{
    char yaml[4096], est[64];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 6, shuffle: false,\n"
             "       max_prompt_length: 128, max_response_length: 10}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {optim: {lr: 0.01, weight_decay: 0.0}, ppo_mini_batch_size: 3,\n"
             "          ppo_micro_batch_size_per_gpu: 1}\n"
             "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 2}\n"
             "critic:\n"
             "  model: {path: %s/model}\n"
             "  optim: {lr: 0.005, weight_decay: 0.0}\n"
             "  ppo_mini_batch_size: 3\n"
             "  ppo_micro_batch_size_per_gpu: 1\n"
             "algorithm: {adv_estimator: gae, gamma: 1.0, lam: 0.95}\n"
             "trainer: {total_training_steps: 1, save_freq: -1, logger: [], default_local_dir: %s/%s,\n"
             "          rollout_data_dir: %s/%s/rollouts}\n",
             dir, dir, dir, dir, out, dir, out);
    snprintf(est, sizeof est, "algorithm.adv_estimator=%s", estimator);
    const char *ov[] = {est, pf ? pf : "algorithm.use_pf_ppo=false"};
    return df_test_run(comm, df_test_config(yaml, "pf_ppo.yaml", ov, 2));
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Step 1's rollout dumps of dir/<out> (the resampled batch), one line each, sorted, into
   lines[ROWS]; returns how many there are. */
static int dump_lines(const char *out, char **lines)
{
    json_t *all = df_test_rollout_dumps(dir, out, 1, NULL);
    int n = (int)json_array_size(all);
    assert_true(n <= ROWS);
    for (int i = 0; i < n; i++)
        lines[i] = json_dumps(json_array_get(all, (size_t)i), JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(all);
    qsort(lines, (size_t)n, sizeof *lines, cmp_str);
    return n;
}

/* The lines of step 1's dump of data-parallel rank d in dir/<out> (one file per rank on N > 1). */
static int dp_lines(const char *out, int d)
{
    char p[600], *text = NULL;
    snprintf(p, sizeof p, "%s/%s/rollouts/1.dp%d.jsonl", dir, out, d);
    assert_int_equal(df_read_file(p, &text, NULL), 0);
    int n = 0;
    for (const char *c = text; *c; c++)
        n += *c == '\n';
    free(text);
    return n;
}

static int repeats(char **lines, int n)
{
    int r = 0;
    for (int i = 1; i < n; i++)
        r += !strcmp(lines[i], lines[i - 1]);
    return r;
}

static void test_same_draws_on_any_ranks(void **state)
{
    (void)state;
    df_comm *self = NULL;
    assert_int_equal(df_comm_split(world, df_comm_rank(world), 0, &self), 0);
    int rc = DF_OK;
    if (df_comm_rank(world) == 0) {
        rc = ppo(self, "ref", "algorithm.use_pf_ppo=true", "gae");
        if (!rc)
            rc = ppo(self, "plain", NULL, "gae");
        if (rc)
            print_error("the one-rank runs: %s\n", df_last_error());
    }
    df_comm_free(self);
    double failed = rc != DF_OK;
    assert_int_equal(df_comm_allreduce(world, &failed, 1, DF_COMM_FLOAT64, DF_COMM_MAX), 0);
    if (failed)
        fail_msg("the one-rank runs failed");
    rc = ppo(world, "dist", "algorithm.use_pf_ppo=true", "gae");
    if (rc)
        fail_msg("rank %d: %s", df_comm_rank(world), df_last_error());
    if (df_comm_rank(world) != 0)
        return;
    char *ref[ROWS], *got[ROWS], *plain[ROWS];
    assert_int_equal(dump_lines("ref", ref), ROWS);
    assert_int_equal(dump_lines("dist", got), ROWS);
    assert_int_equal(dump_lines("plain", plain), ROWS);
    for (int i = 0; i < ROWS; i++)
        if (strcmp(ref[i], got[i]))
            fail_msg("the resampled batches differ (%d ranks against one):\n%s\n%s", df_comm_size(world), ref[i],
                     got[i]);
    /* the Data Coordinator evened the ranks' drawn rows before the updates */
    for (int d = 0; df_comm_size(world) > 1 && d < df_comm_size(world); d++)
        if (dp_lines("dist", d) != ROWS / df_comm_size(world))
            fail_msg("data-parallel rank %d ends the step with %d rows, not %d", d, dp_lines("dist", d),
                     ROWS / df_comm_size(world));
    assert_int_equal(repeats(plain, ROWS), 0); /* each row once without PF-PPO */
    int rep = repeats(ref, ROWS);
    print_message("PF-PPO: %d of %d drawn rows repeat another\n", rep, ROWS);
    assert_true(rep > 0);
    for (int i = 0; i < ROWS; i++)
        free(ref[i]), free(got[i]), free(plain[i]);
}

/* Every rank refuses it the same way, before anything is loaded (df_train_check). */
static void test_refused_without_gae(void **state)
{
    (void)state;
    assert_int_equal(ppo(world, "refused", "algorithm.use_pf_ppo=true", "grpo"), DF_EINVAL);
    assert_last_error_mentions("algorithm.use_pf_ppo");
    assert_last_error_mentions("gae only");
}

static int setup(void **state)
{
    (void)state;
    if (df_comm_world(&world) || df_reward_register("test/digits", df_test_digit_share))
        return -1;
    if (!df_test_size_ok(df_comm_size(world)))
        return -1;
    return df_test_shared_inputs(world, "df_pf_ppo", ROWS / 2, "test/digits", dir, sizeof dir);
}

static int teardown(void **state)
{
    (void)state;
    return df_test_shared_cleanup(world, dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_draws_on_any_ranks),
        cmocka_unit_test(test_refused_without_gae),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
