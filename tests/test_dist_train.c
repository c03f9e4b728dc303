/*
 * test_dist_train.c — GRPO on several ranks follows the one-rank trajectory.
 *
 * mpi-test: np 2 4
 * (as a plain ctest it runs with one rank and checks the run against itself.)
 *
 * Rank 0 first trains alone (a one-rank communicator split from the world) for
 * the reference; then every rank trains the same job together: the same global
 * batch (data.train_batch_size prompts x rollout.n) split over the ranks, the
 * same seeds (each prompt's sampling stream is keyed by its dataset row, so it
 * does not depend on which rank generates it). The per-step metrics (score,
 * lengths, losses, gradient norm, validation) and the final weights must match
 * the reference up to float summation order. Variants: plain data parallelism,
 * trainer.balance_batch (samples move between ranks after the rollout), and an
 * actor on half as many DP ranks as the rollout (ulysses_sequence_parallel_size
 * 2: every rollout shard is redistributed to the actor's DP ranks).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"

#include "distflow/comm.h"
#include "distflow/reward.h"

#include <jansson.h>
#include <math.h>

static df_comm *world;
static char dir[256];

/* Train on `comm` into dir/<out>, with one dotted override. */
static void train(df_comm *comm, const char *out, const char *override)
{
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [%s/val.jsonl], train_batch_size: 8,\n"
             "       shuffle: false, max_prompt_length: 128, max_response_length: 12}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {optim: {lr: 0.01, weight_decay: 0.0}, ppo_mini_batch_size: 8,\n"
             "          ppo_micro_batch_size_per_gpu: 8, use_kl_loss: true, kl_loss_coef: 0.01}\n"
             "  rollout: {n: 4, log_prob_micro_batch_size_per_gpu: 8}\n"
             "  ref: {log_prob_micro_batch_size_per_gpu: 8}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "trainer: {total_training_steps: 3, save_freq: 3, test_freq: 3, logger: [],\n"
             "          default_local_dir: %s/%s}\n",
             dir, dir, dir, dir, out);
    if (df_test_run(comm, df_test_config(yaml, "dist.yaml", &override, 1)))
        fail_msg("rank %d: %s", df_comm_rank(world), df_last_error());
}

static void expect_close(json_t *a, json_t *b, const char *key, double tol, int line)
{
    json_t *x = json_object_get(a, key), *y = json_object_get(b, key);
    if (!json_is_number(x) || !json_is_number(y))
        fail_msg("line %d: %s missing", line, key);
    double u = json_number_value(x), v = json_number_value(y);
    if (fabs(u - v) > tol * (1 + fabs(u)))
        fail_msg("line %d: %s = %.9g on one rank, %.9g distributed", line, key, u, v);
}

/* Rank 0: the distributed run's metrics and weights equal the one-rank run's;
 * `moves`: samples must have moved between ranks in every step (several ranks). */
static void compare_with_reference(const char *out, bool moves)
{
    if (df_comm_rank(world) != 0)
        return;
    json_t *ref = df_test_metrics(dir, "ref", false), *got = df_test_metrics(dir, out, false);
    assert_int_equal(json_array_size(ref), 4); /* validation before training, 3 steps (the last validates) */
    assert_int_equal(json_array_size(got), json_array_size(ref));
    static const struct {
        const char *key;
        double tol;
    } keys[] = {{"critic/score/mean", 1e-6},   {"critic/score/max", 1e-6},  {"response_length/mean", 1e-9},
                {"response_length/max", 1e-9}, {"actor/pg_loss", 1e-4},     {"actor/kl_loss", 1e-4},
                {"actor/entropy", 1e-4},       {"actor/grad_norm", 1e-3},   {"actor/lr", 1e-12},
                {"perf/total_num_tokens", 1e-9}};
    for (size_t i = 1; i < json_array_size(ref); i++) {
        json_t *a = json_array_get(ref, i), *b = json_array_get(got, i);
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
            expect_close(a, b, keys[k].key, keys[k].tol, (int)i);
        assert_true(json_number_value(json_object_get(b, "actor/weights_in_sync")) == 1.0);
        double moved = json_number_value(json_object_get(b, "perf/redistributed_bytes"));
        if (moves && df_comm_size(world) > 1 && !(moved > 0))
            fail_msg("step %d: no samples moved between ranks", (int)i);
        if (!moves && moved != 0)
            fail_msg("step %d: %g bytes moved where the hand-offs are local", (int)i, moved);
    }
    expect_close(json_array_get(ref, 0), json_array_get(got, 0), "val-core/test/digits/reward/mean@1", 1e-6, 0);
    expect_close(json_array_get(ref, 3), json_array_get(got, 3), "val-core/test/digits/reward/mean@1", 1e-4, 3);
    json_decref(ref);
    json_decref(got);

    char p0[512], p1[512];
    snprintf(p0, sizeof p0, "%s/ref/global_step_3/actor", dir);
    snprintf(p1, sizeof p1, "%s/%s/global_step_3/actor", dir, out);
    df_model *m0, *m1;
    assert_int_equal(df_model_load(p0, &m0), 0);
    assert_int_equal(df_model_load(p1, &m1), 0);
    double diff = df_test_max_param_diff(m0, m1);
    print_message("%s: max |w_1rank - w_dist| = %.3g\n", out, diff);
    assert_true(diff < 1e-4);
    df_model_free(m0);
    df_model_free(m1);
}

static void test_data_parallel(void **state)
{
    (void)state;
    train(world, "dp", "trainer.balance_batch=false");
    assert_int_equal(df_comm_barrier(world), 0);
    compare_with_reference("dp", false);
}

static void test_balance_batch(void **state)
{
    (void)state;
    train(world, "balanced", "trainer.balance_batch=true");
    assert_int_equal(df_comm_barrier(world), 0);
    compare_with_reference("balanced", true);
}

static void test_actor_on_fewer_dp_ranks(void **state)
{
    (void)state;
    if (df_comm_size(world) % 2) {
        skip();
        return;
    }
    train(world, "actor_sp2", "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2");
    assert_int_equal(df_comm_barrier(world), 0);
    compare_with_reference("actor_sp2", true);
}

/* A validation set smaller than the number of ranks: some shards are empty, and validation still
   runs (every rank joins the reduction) with the one-rank run's numbers. */
static void test_val_set_smaller_than_world(void **state)
{
    (void)state;
    if (df_comm_size(world) < 2) {
        skip();
        return;
    }
    char ov[512];
    snprintf(ov, sizeof ov, "data.val_files=[%s/val1.jsonl]", dir);
    df_comm *self = NULL;
    assert_int_equal(df_comm_split(world, df_comm_rank(world), 0, &self), 0);
    if (df_comm_rank(world) == 0)
        train(self, "val1_ref", ov);
    df_comm_free(self);
    train(world, "val1", ov);
    assert_int_equal(df_comm_barrier(world), 0);
    if (df_comm_rank(world) != 0)
        return;
    json_t *ref = df_test_metrics(dir, "val1_ref", false), *got = df_test_metrics(dir, "val1", false);
    expect_close(json_array_get(ref, 0), json_array_get(got, 0), "val-core/test/digits/reward/mean@1", 1e-6, 0);
    json_decref(ref);
    json_decref(got);
}

/* Inputs on rank 0, the directory broadcast, then the one-rank reference run. */
static int setup(void **state)
{
    (void)state;
    if (df_comm_world(&world) || df_reward_register("test/digits", df_test_digit_share))
        return -1;
    if (!df_test_size_ok(df_comm_size(world)))
        return -1;
    if (df_comm_rank(world) == 0) {
        snprintf(dir, sizeof dir, "/tmp/df_dist_XXXXXX");
        if (!mkdtemp(dir))
            return -1;
        df_test_digits_inputs(dir, "train.jsonl", 64, "test/digits", true);
        df_test_digits_inputs(dir, "val.jsonl", 16, "test/digits", false);
        df_test_digits_inputs(dir, "val1.jsonl", 1, "test/digits", false);
    }
    if (df_comm_broadcast(world, dir, sizeof dir, 0))
        return -1;
    df_comm *self = NULL;
    if (df_comm_split(world, df_comm_rank(world), 0, &self))
        return -1;
    if (df_comm_rank(world) == 0)
        train(self, "ref", "trainer.balance_batch=false");
    df_comm_free(self);
    return df_comm_barrier(world);
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
        cmocka_unit_test(test_data_parallel),
        cmocka_unit_test(test_balance_batch),
        cmocka_unit_test(test_actor_on_fewer_dp_ranks),
        cmocka_unit_test(test_val_set_smaller_than_world),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
