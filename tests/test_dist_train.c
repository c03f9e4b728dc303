/*
 * test_dist_train.c — GRPO on several ranks follows the one-rank trajectory.
 *
 * mpi-test: np 2 4
 * (as a plain ctest it runs with one rank and checks the run against itself.)
 *
 * Rank 0 first trains alone (a one-rank communicator split from the world) for
 * the reference; then every rank trains the same job together: the same global
 * batch (data.train_batch_size prompts x rollout.n, shuffled: the dataloader's
 * order does not depend on the ranks) split over the ranks, the same seeds (each prompt's sampling stream is keyed by its dataset row, so it
 * does not depend on which rank generates it). What must match the reference,
 * and how closely, follows from rounding (tests/testtrain.h): the first step
 * (validation and rollout from the same initial weights, its losses and
 * gradient norm, and the weights after its Adam step, parameter by parameter);
 * after that only what rounding cannot move (the learning rate, the ranks'
 * weights in sync, where samples went). Later rollouts are not compared: the
 * worker's Adam (eps 1e-8) moves a weight whose gradient is rounding noise by
 * up to lr either way, so the two runs' second rollouts may sample other
 * tokens. Variants: plain data parallelism, trainer.balance_batch (samples
 * move between ranks after the rollout), and an actor on half as many DP ranks
 * as the rollout (ulysses_sequence_parallel_size 2: every rollout shard is
 * redistributed to the actor's DP ranks).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testtrain.h"
#include "testutil.h"

#include "distflow/comm.h"
#include "distflow/reward.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static df_comm *world;
static char dir[256];

/* Train on `comm` into dir/<out>, with one dotted override. */
static void train(df_comm *comm, const char *out, const char *override)
{
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [%s/val.jsonl], train_batch_size: 8,\n"
             "       shuffle: true, max_prompt_length: 128, max_response_length: 12}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {optim: {lr: 0.01, weight_decay: 0.0}, ppo_mini_batch_size: 8,\n"
             "          ppo_micro_batch_size_per_gpu: 8, use_kl_loss: true, kl_loss_coef: 0.01}\n"
             "  rollout: {n: 4, log_prob_micro_batch_size_per_gpu: 8}\n"
             "  ref: {log_prob_micro_batch_size_per_gpu: 8}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "trainer: {total_training_steps: 3, save_freq: 1, test_freq: 3, logger: [],\n"
             "          default_local_dir: %s/%s, rollout_data_dir: %s/%s/rollouts}\n",
             dir, dir, dir, dir, out, dir, out);
    if (df_test_run(comm, df_test_config(yaml, "dist.yaml", &override, 1)))
        fail_msg("rank %d: %s", df_comm_rank(world), df_last_error());
}

static double num(json_t *o, const char *key, int line)
{
    json_t *x = json_object_get(o, key);
    if (!json_is_number(x))
        fail_msg("line %d: %s missing", line, key);
    return json_number_value(x);
}

/* |a.key - b.key| <= bound plus the double rounding of a mean of a few dozen values. */
static void expect_within(json_t *a, json_t *b, const char *key, double bound, int line)
{
    double u = num(a, key, line), v = num(b, key, line);
    bound += df_tol_gamma(64, DF_U64) * fabs(u);
    if (!(fabs(u - v) <= bound))
        fail_msg("line %d: %s = %.9g on one rank, %.9g distributed (bound %.3g)", line, key, u, v, bound);
}

/* The job's sizes (train()): 32 responses of <= 12 tokens to prompts of <= 128, micro-batches of 8. */
#define POS (128 + 12)
#define MICRO_TOKENS (8 * POS)
#define RESPONSES 32
#define LR 0.01
#define ADAM_EPS 1e-8 /* the worker's (src/workers/dag/dag_worker.c) */
#define GRAD_CLIP 1.0 /* actor.grad_clip's default */

/*
 * Rank 0: the distributed run against the one-rank run; `moves`: samples must have moved between
 * ranks in every step (several ranks).
 *
 * Validation before training (line 0) and the first rollout decode from the same initial weights,
 * so their tokens are the same unless a draw (or a greedy argmax) lies within the logits' rounding
 * of a boundary: log-probs at most F apart (tb_forward_bound, 2e-4 here), a chance of <= F per
 * drawn token, <= 0.1 for the ~400 tokens of a run under this pessimistic F; observed log-prob
 * differences are ~1e-6, which puts the chance near 1e-3. These comparisons thus hold unless
 * rounding flipped a token (no bound survives that: the responses would differ). Given the same
 * tokens, scores and lengths agree but for the order of a mean. At step 1 the losses are at the
 * initial weights: pg_loss = -sum w A rho with rho = e^(log p - old) and each log-prob <= F apart
 * in the two runs, so <= 2F max|A| apart (token-mean: sum w = 1); kl_loss <= 2F (per token
 * |kl| <= F against the same reference); entropy <= F; grad_norm by
 * tt_e2e_grad_bound. The weights after step 1: tt_adam_first_step_check.
 */
/* verl's timing_per_token_ms: the stage's time (the slowest rank's) over the whole step batch's
   tokens, not a rank's: gen over the response tokens (response_length/mean times the responses:
   equal shards, so the ranks' mean of means is the batch's), update_actor over prompt + response
   tokens (perf/total_num_tokens, summed over the ranks). Each printed value has 10 digits. */
static void per_token_timing(json_t *o, int line)
{
    const double resp = num(o, "response_length/mean", line) * RESPONSES;
    const double want[2] = {num(o, "timing_s/gen", line) * 1000 / resp,
                            num(o, "timing_s/update_actor", line) * 1000 / num(o, "perf/total_num_tokens", line)};
    const char *key[2] = {"timing_per_token_ms/gen", "timing_per_token_ms/update_actor"};
    for (int k = 0; k < 2; k++)
        if (!(fabs(num(o, key[k], line) - want[k]) <= 4e-9 * want[k]))
            fail_msg("line %d: %s = %.10g, want %.10g", line, key[k], num(o, key[k], line), want[k]);
}

static void compare_with_reference(const char *out, bool moves)
{
    if (df_comm_rank(world) != 0)
        return;
    json_t *ref = df_test_metrics(dir, "ref", false), *got = df_test_metrics(dir, out, false);
    assert_int_equal(json_array_size(ref), 4); /* validation before training, 3 steps (the last validates) */
    assert_int_equal(json_array_size(got), json_array_size(ref));
    char p[512];
    snprintf(p, sizeof p, "%s/model", dir);
    df_model *m0;
    assert_int_equal(df_model_load(p, &m0), 0);
    const double F = tb_forward_bound(m0, POS, 1.0f);

    expect_within(json_array_get(ref, 0), json_array_get(got, 0), "val-aux/test/digits/reward/mean@1", 0, 0);
    json_t *a = json_array_get(ref, 1), *b = json_array_get(got, 1);
    const char *same[] = {"critic/score/mean",   "critic/score/max",      "response_length/mean",
                          "response_length/max", "perf/total_num_tokens", "actor/lr"};
    for (size_t k = 0; k < sizeof same / sizeof *same; k++)
        expect_within(a, b, same[k], 0, 1);
    double max_adv = fmax(fabs(num(a, "critic/advantages/max", 1)), fabs(num(a, "critic/advantages/min", 1)));
    int64_t T = (int64_t)ceil(num(a, "response_length/mean", 1) * RESPONSES);
    double gn = num(a, "actor/grad_norm", 1),
           dg = tt_e2e_grad_bound(m0, POS, MICRO_TOKENS, T, df_comm_size(world), gn, 1.0f);
    expect_within(a, b, "actor/pg_loss", 2 * F * max_adv * exp(2 * F), 1);
    expect_within(a, b, "actor/kl_loss", 2 * F, 1);
    expect_within(a, b, "actor/entropy", F, 1);
    expect_within(a, b, "actor/grad_norm", dg, 1);
    for (size_t i = 1; i < json_array_size(ref); i++) {
        json_t *x = json_array_get(ref, i), *y = json_array_get(got, i);
        expect_within(x, y, "actor/lr", 0, (int)i); /* the schedule: exact */
        per_token_timing(y, (int)i);
        assert_true(num(y, "actor/weights_in_sync", (int)i) == 1.0);
        double moved = json_number_value(json_object_get(y, "perf/redistributed_bytes")); /* 0 when absent */
        if (moves && df_comm_size(world) > 1 && !(moved > 0))
            fail_msg("step %d: no samples moved between ranks", (int)i);
        if (!moves && moved != 0)
            fail_msg("step %d: %g bytes moved where the hand-offs are local", (int)i, moved);
    }
    json_decref(ref);
    json_decref(got);

    char p0[512], p1[512];
    snprintf(p0, sizeof p0, "%s/ref/global_step_1/actor", dir);
    snprintf(p1, sizeof p1, "%s/%s/global_step_1/actor", dir, out);
    df_model *w0, *w1;
    assert_int_equal(df_model_load(p0, &w0), 0);
    assert_int_equal(df_model_load(p1, &w1), 0);
    int64_t free_params;
    double worst = tt_adam_first_step_check(m0, w0, w1, LR, ADAM_EPS, GRAD_CLIP, gn, dg, &free_params);
    print_message("%s: step-1 weights: max observed / bound %.3g (%lld of %lld parameters free: gradient at "
                  "rounding level), max |w_1rank - w_dist| %.3g, F %.3g\n",
                  out, worst, (long long)free_params, (long long)m0->n_params, df_test_max_param_diff(w0, w1),
                  F);
    df_model_free(w0);
    df_model_free(w1);
    df_model_free(m0);
}

/* Step `step`'s rollouts in dir/<out>/rollouts (trainer.rollout_data_dir): one <step>.jsonl, or one
   <step>.dp<d>.jsonl per data-parallel rank of the step's last stage. Counts, per dataset index, its
   lines into count[64] and returns the number of lines and files; *score_sum the scores' sum. */
static int read_rollouts(const char *out, int step, int count[64], int *files, double *score_sum)
{
    json_t *rows = df_test_rollout_dumps(dir, out, step, files);
    int lines = (int)json_array_size(rows);
    *score_sum = 0;
    for (int i = 0; i < lines; i++) {
        const json_t *row = json_array_get(rows, (size_t)i);
        int64_t idx = json_integer_value(json_object_get(row, "index"));
        assert_true(idx >= 0 && idx < 64);
        count[idx]++;
        *score_sum += json_number_value(json_object_get(row, "score"));
        assert_int_equal(json_integer_value(json_object_get(row, "step")), step);
    }
    json_decref(rows);
    return lines;
}

/* The distributed run's rollout dumps hold the one-rank run's rows, each once: every step 32 lines
   (8 prompts x 4) in `files` files; at step 1 (the same initial weights, see below) the same 8
   prompts 4 times each and the same scores but for the order of their sum. */
static void compare_rollouts(const char *out, int files)
{
    for (int step = 1; step <= 3; step++) {
        int c_ref[64] = {0}, c_got[64] = {0}, f_ref, f_got;
        double s_ref, s_got;
        assert_int_equal(read_rollouts("ref", step, c_ref, &f_ref, &s_ref), RESPONSES);
        assert_int_equal(read_rollouts(out, step, c_got, &f_got, &s_got), RESPONSES);
        assert_int_equal(f_ref, 1);
        assert_int_equal(f_got, files);
        for (int i = 0; step == 1 && i < 64; i++)
            assert_int_equal(c_got[i], c_ref[i]);
        if (step == 1)
            assert_near(s_got, s_ref, 2 * df_tol_gamma(RESPONSES, DF_U64) * RESPONSES);
    }
}

static void test_data_parallel(void **state)
{
    (void)state;
    train(world, "dp", "trainer.balance_batch=false");
    assert_int_equal(df_comm_barrier(world), 0);
    compare_with_reference("dp", false);
    if (df_comm_rank(world) == 0)
        compare_rollouts("dp", df_comm_size(world) > 1 ? df_comm_size(world) : 1);
}

/* verl's global_seqlen/... of trainer.balance_batch: each rank's prompt + response tokens before
 * and after the balancing hand-off, over the ranks (whole numbers, exact in double): the mean
 * is the batch's tokens over the ranks, the balanced extremes lie around it, minmax_diff is
 * max - min; and a run without balance_batch logs none. */
static void check_seqlen_balance(const char *out, bool on)
{
    if (df_comm_rank(world) != 0)
        return;
    json_t *lines = df_test_metrics(dir, out, false), *o; /* validation's step 0 first */
    size_t i;
    const double k = df_comm_size(world);
    json_array_foreach(lines, i, o) {
        if (!json_object_get(o, "actor/pg_loss"))
            continue; /* validation only */
        if (!on) {
            assert_null(json_object_get(o, "global_seqlen/mean"));
            continue;
        }
        const int line = (int)i + 1;
        double mean = num(o, "global_seqlen/mean", line), lo = num(o, "global_seqlen/min", line),
               hi = num(o, "global_seqlen/max", line);
        assert_true(mean * k == num(o, "perf/total_num_tokens", line));
        assert_true(lo <= mean && mean <= hi);
        assert_true(num(o, "global_seqlen/balanced_min", line) <= mean);
        assert_true(num(o, "global_seqlen/balanced_max", line) >= mean);
        assert_true(num(o, "global_seqlen/minmax_diff", line) == hi - lo);
    }
    json_decref(lines);
}

static void test_balance_batch(void **state)
{
    (void)state;
    train(world, "balanced", "trainer.balance_batch=true");
    assert_int_equal(df_comm_barrier(world), 0);
    compare_with_reference("balanced", true);
    check_seqlen_balance("balanced", true);
    check_seqlen_balance("dp", false);
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
    if (df_comm_rank(world) == 0) /* the actor's DP ranks hold the step's batch at its end */
        compare_rollouts("actor_sp2", df_comm_size(world) > 2 ? df_comm_size(world) / 2 : 1);
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
    /* greedy decoding from the same initial weights: the same tokens (see compare_with_reference) */
    json_t *ref = df_test_metrics(dir, "val1_ref", false), *got = df_test_metrics(dir, "val1", false);
    expect_within(json_array_get(ref, 0), json_array_get(got, 0), "val-aux/test/digits/reward/mean@1", 0, 0);
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
