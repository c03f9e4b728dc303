/*
 * test_async_train.c — the asynchronous runtime (actor_rollout_ref.rollout.mode=async,
 * docs/async.md): rollout and trainer on different ranks.
 *
 * mpi-test: np 2 3
 * (as a plain ctest, one rank: an asynchronous job needs a rollout rank and a trainer rank, and
 * one rank is refused with a message.)
 *
 * - max_staleness 0 reproduces the synchronous run: the rollout side may only start the next
 *   batch's episodes once the trainer's new weights have arrived, so every batch is sampled
 *   from the weights the synchronous run would sample it from, with the same seeds (a prompt's
 *   stream is keyed by its dataset row and step). Responses of up to 48 tokens end at different
 *   steps, so episodes reach the trainer out of prompt order, which it restores. On 2 ranks (one rollout rank, one trainer rank)
 *   the trainer also sees the batch in the synchronous run's order: every metric but the
 *   wall-clock ones equals the one-rank synchronous run's, bit for bit, at every step. On 3 ranks
 *   (two rollout ranks) the batch holds the same episodes in another order, so step 1 (the same
 *   initial weights) must show the same scores and lengths.
 * - The same at 2 ranks with a bf16 rollout and a mixed-precision actor: the weights go as bf16
 *   (the actor's copy, as is) and the metrics still equal the synchronous run's bit for bit.
 * - max_staleness 2 with room for 2 batches in flight: a consumed sample more than 2 versions
 *   behind is dropped (and the rollout side told, so that its admission makes up for it), the
 *   decoupled objective runs with the KV cache recomputed at every update, the job ends cleanly.
 * - PPO at max_staleness 1: the critic trains on the trainer side.
 * - A resumed run (2 ranks, max_staleness 0) equals the straight one bit for bit.
 * - async_training.partial_rollout=false: no response mixes policy versions.
 * - Multi-turn at max_staleness 0 equals the synchronous run as above (2 ranks: bit for bit;
 *   3 ranks: step 1): verl's GSM8K interaction with stop strings that end the model's turns
 *   often (every episode runs its own agent loop on the rollout side, replies masked out of the
 *   losses), and the grid_nav environment (an episode's grid, drawn in its first observation,
 *   seeded from its step as the synchronous rollout node seeds the batch's). The metrics the
 *   replies' mask enters (advantages, losses, KL) and num_turns would differ from the
 *   synchronous run's with a wrong mask, a wrong seed or without the turn handler. At
 *   max_staleness 1 (a batch ahead, the KV cache recomputed at updates) the job ends within
 *   the bound.
 * - DAPO's dynamic sampling (data where half the rows score 0 for every response, a group the filter
 *   drops): each step's refills take only the missing groups from the rollout side, whose
 *   admission makes up for the reported ones (else the trainer waits until the timeout), the
 *   batch trains on exactly train_batch_size kept groups, none of them filtered; with 2 rollout
 *   ranks each is told of its own. (A run that gives up, max_num_gen_batches, is not tested here: a
 *   failed trainer side leaves the rollout side's posted weights header pending, which crashes
 *   MPI_Finalize in this process; the CLI ends such a job with MPI_Abort. test_dapo.c checks the
 *   bound's arithmetic.)
 * - ReMax: the greedy baseline, decoded on the trainer side with its actor, is the synchronous
 *   run's (2 ranks: every metric bit for bit; 3: step 1's).
 * A run expected to succeed that fails on one rank ends the whole job there (df_test_run_ok: MPI_Abort), so a
 * failure never waits for collective_timeout_s and then hangs in MPI_Finalize.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static df_comm *world;
static char dir[256];

/* test/halves: 0 for every response to row i = 1 or 2 (mod 4) (its ground truth 3i + 1 is 0 or 3 mod 4),
   so DAPO's filter drops those groups: half of any 4 consecutive rows, or of any 4 consecutive even or
   odd rows (each rollout rank's shard holds some of both); else 1 + the response's length / 100, which
   varies within a group. */
static int halves_score(const char *data_source, const char *s, const char *gt, const char *extra, double *score)
{
    (void)data_source, (void)extra;
    int m = atoi(gt) % 4;
    *score = m == 1 || m == 2 ? 1.0 + (double)strlen(s) / 100.0 : 0.0;
    return 0;
}

/* Train on `comm` into dir/<out> with the overrides. Returns the status. */
static int train(df_comm *comm, const char *out, const char *const *ov, int n)
{
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 8,\n"
             "       shuffle: false, max_prompt_length: 128, max_response_length: 48}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {optim: {lr: 0.01, weight_decay: 0.0}, ppo_mini_batch_size: 8,\n"
             "          ppo_micro_batch_size_per_gpu: 8}\n"
             "  rollout: {n: 4, log_prob_micro_batch_size_per_gpu: 8}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "trainer: {total_training_steps: 3, val_before_train: false, logger: [], balance_batch: false,\n"
             "          collective_timeout_s: 20,\n"
             "          default_local_dir: %s/%s}\n",
             dir, dir, dir, out);
    return df_test_run(comm, df_test_config(yaml, "async.yaml", ov, n));
}

/* A run that must succeed: a failure ends the whole job at once (df_test_run_ok), not in a hang. */
static void train_ok(df_comm *comm, const char *out, const char *const *ov, int n)
{
    df_test_run_ok(train(comm, out, ov, n), out);
}

static double num(json_t *o, const char *key, int line)
{
    json_t *x = json_object_get(o, key);
    if (!json_is_number(x))
        fail_msg("line %d: %s missing", line, key);
    return json_number_value(x);
}

/* Metrics that depend on the clock or on the runtime's own bookkeeping. */
static bool clocked(const char *key)
{
    return df_test_clock_metric(key) || !strncmp(key, "fully_async/", 12);
}

/* Every metric of every line of a equals b's (the wall-clock ones aside), and b has no other. */
static void same_metrics(json_t *a, json_t *b)
{
    int bad = 0;
    assert_int_equal(json_array_size(a), json_array_size(b));
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *x = json_array_get(a, i), *y = json_array_get(b, i);
        const char *key;
        json_t *v;
        json_object_foreach(x, key, v)
        {
            if (clocked(key) || !json_is_number(v))
                continue;
            double u = json_number_value(v), w = num(y, key, (int)i);
            if (!(u == w || (isnan(u) && isnan(w))))
                print_error("line %zu: %s = %.17g synchronous, %.17g asynchronous\n", i, key, u, w), bad++;
        }
    }
    assert_int_equal(bad, 0);
}

#define IA DF_SOURCE_DIR "/examples/gsm8k_multiturn/config/interaction_config/gsm8k_interaction_config.yaml"

/* The multi-turn settings of a case: an interaction, or the guess_number environment. */
static const char *const MT_IA[] = {
    "actor_rollout_ref.rollout.multi_turn.enable=true",
    "actor_rollout_ref.rollout.multi_turn.interaction_config_path=" IA,
    "actor_rollout_ref.rollout.multi_turn.max_user_turns=2", "actor_rollout_ref.rollout.stop=[a, e, o]",
    "data.max_response_length=120"};
static const char *const MT_ENV[] = {
    "dag.env_enable=true", "dag.environment_path=grid_nav", "actor_rollout_ref.rollout.stop=[a, e, o]",
    "data.max_prompt_length=512", "data.max_response_length=400"};
#define MT_N 5

/* Multi-turn (settings mt) at max_staleness 0: the synchronous one-rank run's metrics. */
static void multi_turn_staleness0(const char *name, const char *const *mt)
{
    int W = df_comm_size(world);
    if (W < 2) {
        skip();
        return;
    }
    const char *ov[MT_N + 2];
    char r[64], ref[64];
    snprintf(r, sizeof r, "rollout.n_gpus_per_node=%d", W - 1);
    snprintf(ref, sizeof ref, "%s_ref", name);
    memcpy(ov, mt, MT_N * sizeof *ov);
    df_comm *self = NULL;
    assert_int_equal(df_comm_split(world, df_comm_rank(world), 0, &self), 0);
    if (df_comm_rank(world) == 0)
        train_ok(self, ref, ov, MT_N);
    df_comm_free(self);
    ov[MT_N] = "actor_rollout_ref.rollout.mode=async", ov[MT_N + 1] = r;
    train_ok(world, name, ov, MT_N + 2);
    assert_int_equal(df_comm_barrier(world), 0);
    if (df_comm_rank(world) != 0)
        return;
    json_t *sync = df_test_metrics(dir, ref, false), *got = df_test_metrics(dir, name, false);
    assert_int_equal(json_array_size(got), 3);
    json_t *x = json_array_get(sync, 0), *y = json_array_get(got, 0);
    print_message("%s: num_turns mean %.3f max %.0f, response_length/mean %.1f, score/mean %.4f\n", name,
                  num(x, "num_turns/mean", 0), num(x, "num_turns/max", 0), num(x, "response_length/mean", 0),
                  num(x, "critic/score/mean", 0));
    assert_true(num(x, "num_turns/max", 0) > 2); /* replies were appended */
    if (W == 2) {
        same_metrics(sync, got);
    } else { /* the same episodes at step 1, in another order */
        const char *keys[] = {"critic/score/mean", "response_length/mean", "num_turns/mean", "num_turns/max"};
        for (size_t k = 0; k < 4; k++)
            assert_float_equal(num(x, keys[k], 0), num(y, keys[k], 0), 1e-6 * (1 + fabs(num(x, keys[k], 0))));
    }
    json_decref(sync);
    json_decref(got);
}

static void test_multi_turn_interaction(void **state)
{
    (void)state;
    multi_turn_staleness0("mt_ia", MT_IA);
}

static void test_multi_turn_env(void **state)
{
    (void)state;
    multi_turn_staleness0("mt_env", MT_ENV);
}

/* Step i+1's largest version gap (of the samples consumed and dropped) within max_staleness S, or
   some sample dropped as too stale: none is ever trained on beyond the bound. */
static void gap_bounded(json_t *y, size_t i, int S)
{
    double gap = num(y, "fully_async/version_gap/max", (int)i);
    double dropped = num(y, "fully_async/count/dropped_stale_samples", (int)i);
    if (!(gap >= 0 && (gap <= S || dropped > 0)))
        fail_msg("step %zu: version gap %g > %d and nothing dropped", i + 1, gap, S);
}

/* Multi-turn at max_staleness 1, 2 batches in flight, the KV cache recomputed at every update and the
   decoupled objective: the rollout side works a batch ahead, an agent loop per episode in flight, and
   the job ends cleanly within the bound. (The tiny model's rollout outpaces the trainer, so weights
   rarely change mid-conversation here; test_rollout_stream_turns pins that case in the engine.) */
static void test_multi_turn_staleness1(void **state)
{
    (void)state;
    if (df_comm_size(world) < 2) {
        skip();
        return;
    }
    const char *ov[MT_N + 6];
    memcpy(ov, MT_IA, MT_N * sizeof *ov);
    ov[MT_N] = "actor_rollout_ref.rollout.mode=async", ov[MT_N + 1] = "rollout.n_gpus_per_node=1";
    ov[MT_N + 2] = "async_training.max_staleness=1", ov[MT_N + 3] = "async_training.max_concurrent_rollouts=16";
    ov[MT_N + 4] = "async_training.recompute_kv=true", ov[MT_N + 5] = "actor_rollout_ref.actor.use_decoupled_loss=true";
    train_ok(world, "mt1", ov, MT_N + 6);
    assert_int_equal(df_comm_barrier(world), 0);
    if (df_comm_rank(world) != 0)
        return;
    json_t *got = df_test_metrics(dir, "mt1", false);
    assert_int_equal(json_array_size(got), 3);
    for (size_t i = 0; i < 3; i++) {
        json_t *y = json_array_get(got, i);
        gap_bounded(y, i, 1);
        assert_true(num(y, "num_turns/max", (int)i) > 2);
        assert_true(num(y, "actor/behave_imp_weight", (int)i) > 0);
        print_message("mt1 step %zu: version gap max %g, multi-version responses %.3f\n", i + 1,
                      num(y, "fully_async/version_gap/max", (int)i),
                      num(y, "fully_async/multi_version_frac", (int)i));
    }
    json_decref(got);
}

static void test_staleness0_is_synchronous(void **state)
{
    (void)state;
    int W = df_comm_size(world);
    if (W < 2) { /* no room for both sides: refused */
        const char *ov[] = {"actor_rollout_ref.rollout.mode=async", "rollout.n_gpus_per_node=1"};
        assert_int_not_equal(train(world, "one", ov, 2), 0);
        assert_last_error_mentions("leave no trainer rank");
        return;
    }
    char r[64];
    snprintf(r, sizeof r, "rollout.n_gpus_per_node=%d", W - 1);
    const char *ov[] = {"actor_rollout_ref.rollout.mode=async", r};
    train_ok(world, "async0", ov, 2);
    assert_int_equal(df_comm_barrier(world), 0);
    if (df_comm_rank(world) != 0)
        return;
    json_t *ref = df_test_metrics(dir, "ref", false), *got = df_test_metrics(dir, "async0", false);
    assert_int_equal(json_array_size(got), 3);
    for (size_t i = 0; i < 3; i++) {
        json_t *y = json_array_get(got, i);
        assert_true(num(y, "fully_async/version_gap/max", (int)i) == 0);
        assert_true(num(y, "fully_async/stale_dropped_frac", (int)i) == 0);
    }
    if (W == 2) {
        same_metrics(ref, got);
    } else { /* the same episodes at step 1, in another order */
        json_t *x = json_array_get(ref, 0), *y = json_array_get(got, 0);
        const char *keys[] = {"critic/score/mean", "response_length/mean", "response_length/max"};
        for (size_t k = 0; k < 3; k++)
            assert_float_equal(num(x, keys[k], 0), num(y, keys[k], 0), 1e-6 * (1 + fabs(num(x, keys[k], 0))));
    }
    json_decref(ref);
    json_decref(got);
}

/* The same with a bf16 rollout and a mixed-precision actor: the trainer sends the actor's bf16 copy
   and the rollout engine reads it as received (async_weights.c), the synchronous run's engine reads
   the actor's copy itself: the same bits, so again every metric equals (2 ranks). */
static void test_staleness0_bf16_wire(void **state)
{
    (void)state;
    if (df_comm_size(world) != 2) {
        skip();
        return;
    }
    const char *ov[] = {"actor_rollout_ref.rollout.dtype=bfloat16",
                        "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
                        "actor_rollout_ref.rollout.mode=async", "rollout.n_gpus_per_node=1"};
    df_comm *self = NULL;
    assert_int_equal(df_comm_split(world, df_comm_rank(world), 0, &self), 0);
    if (df_comm_rank(world) == 0)
        train_ok(self, "ref16", ov, 2);
    df_comm_free(self);
    train_ok(world, "async16", ov, 4);
    assert_int_equal(df_comm_barrier(world), 0);
    if (df_comm_rank(world) != 0)
        return;
    json_t *ref = df_test_metrics(dir, "ref16", false), *got = df_test_metrics(dir, "async16", false);
    assert_int_equal(json_array_size(got), 3);
    same_metrics(ref, got);
    json_decref(ref);
    json_decref(got);
}

static void test_staleness2_bounded(void **state)
{
    (void)state;
    if (df_comm_size(world) < 2) {
        skip();
        return;
    }
    const char *ov[] = {"actor_rollout_ref.rollout.mode=async", "rollout.n_gpus_per_node=1",
                        "async_training.max_staleness=2", "async_training.max_concurrent_rollouts=16",
                        "actor_rollout_ref.actor.use_decoupled_loss=true", "trainer.total_training_steps=4",
                        "actor_rollout_ref.rollout.dtype=bfloat16", /* float32 where the CPU has no bf16 */
                        "async_training.recompute_kv=true"};
    train_ok(world, "async2", ov, 8);
    assert_int_equal(df_comm_barrier(world), 0);
    if (df_comm_rank(world) != 0)
        return;
    json_t *got = df_test_metrics(dir, "async2", false);
    assert_int_equal(json_array_size(got), 4);
    for (size_t i = 0; i < 4; i++) {
        json_t *y = json_array_get(got, i);
        /* a sample more than 2 versions behind is dropped, never trained on (a long episode admitted
           early may arrive after newer ones: AReaL's check at consumption) */
        gap_bounded(y, i, 2);
        assert_true(num(y, "actor/behave_imp_weight", (int)i) > 0);
        assert_true(num(y, "training/global_step", (int)i) == (double)(i + 1));
    }
    json_decref(got);
}

/* partial_rollout false: new weights wait until the sequences in flight have ended, so no response
   mixes versions; the run is otherwise as asynchronous as with true (staleness 1). */
static void test_no_partial_rollout(void **state)
{
    (void)state;
    if (df_comm_size(world) < 2) {
        skip();
        return;
    }
    const char *ov[] = {"actor_rollout_ref.rollout.mode=async", "rollout.n_gpus_per_node=1",
                        "async_training.max_staleness=1", "async_training.max_concurrent_rollouts=16",
                        "async_training.partial_rollout=false"};
    train_ok(world, "whole", ov, 5);
    assert_int_equal(df_comm_barrier(world), 0);
    if (df_comm_rank(world) != 0)
        return;
    json_t *got = df_test_metrics(dir, "whole", false);
    assert_int_equal(json_array_size(got), 3);
    for (size_t i = 0; i < 3; i++)
        assert_true(num(json_array_get(got, i), "fully_async/multi_version_frac", (int)i) == 0);
    json_decref(got);
}

/* A run stopped after step 2 (its checkpoint) and run again to step 3 equals the straight run: the
   rollout side starts from the trainer's restored weights and data position (2 ranks: bit for bit). */
static void test_resume(void **state)
{
    (void)state;
    if (df_comm_size(world) != 2) {
        skip();
        return;
    }
    const char *ov[] = {"actor_rollout_ref.rollout.mode=async", "rollout.n_gpus_per_node=1", "trainer.save_freq=1",
                        "trainer.total_training_steps=2"};
    train_ok(world, "resumed", ov, 4);
    ov[3] = "trainer.total_training_steps=3";
    train_ok(world, "resumed", ov, 4);
    assert_int_equal(df_comm_barrier(world), 0);
    if (df_comm_rank(world) != 0)
        return;
    json_t *straight = df_test_metrics(dir, "async0", false), *got = df_test_metrics(dir, "resumed", false);
    same_metrics(straight, got);
    json_decref(straight);
    json_decref(got);
}

/* PPO: the critic's nodes run on the trainer side as any other (the graph is the synchronous one
   but for its rollout node). */
static void test_ppo_staleness1(void **state)
{
    (void)state;
    if (df_comm_size(world) < 2) {
        skip();
        return;
    }
    char critic[320];
    snprintf(critic, sizeof critic, "critic.model.path=%s/model", dir);
    const char *ov[] = {"actor_rollout_ref.rollout.mode=async", "rollout.n_gpus_per_node=1",
                        "async_training.max_staleness=1", "async_training.max_concurrent_rollouts=16",
                        "algorithm.adv_estimator=gae", critic, "critic.ppo_mini_batch_size=8",
                        "critic.ppo_micro_batch_size_per_gpu=4"};
    train_ok(world, "ppo1", ov, 8);
    assert_int_equal(df_comm_barrier(world), 0);
    if (df_comm_rank(world) != 0)
        return;
    json_t *got = df_test_metrics(dir, "ppo1", false);
    assert_int_equal(json_array_size(got), 3);
    for (size_t i = 0; i < 3; i++) {
        json_t *y = json_array_get(got, i);
        gap_bounded(y, i, 1);
        assert_true(isfinite(num(y, "critic/vf_loss", (int)i)));
        assert_true(isfinite(num(y, "critic/advantages/mean", (int)i)));
    }
    json_decref(got);
}

/* DAPO in mode=async on `rollouts` rollout ranks at max_staleness `S`, with `extra` (or NULL). */
static int train_dapo(const char *out, int rollouts, int S, const char *extra)
{
    char files[320], r[64], st[64], conc[64];
    snprintf(files, sizeof files, "data.train_files=[%s/halves.jsonl]", dir);
    snprintf(r, sizeof r, "rollout.n_gpus_per_node=%d", rollouts);
    snprintf(st, sizeof st, "async_training.max_staleness=%d", S);
    snprintf(conc, sizeof conc, "async_training.max_concurrent_rollouts=%d", 8 * (S + 1));
    const char *ov[] = {"actor_rollout_ref.rollout.mode=async", r, st, conc, files, "algorithm.workflow_type=dapo",
                        "algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=score",
                        /* a lost report stalls the run: 30 s, not the suite's 20 s per collective,
                           since a loaded 2-core machine has stalled a rank's first episodes 10 s */
                        "trainer.collective_timeout_s=30", extra};
    return train(world, out, ov, extra ? 10 : 9);
}

/* Every step trains on exactly 8 kept groups (the batch) of the 8 + filtered taken; at least the 4 rows
   of the step's first 8 prompts that score 0 are filtered, and none of them is trained on (score >= 1). */
static void check_dapo(const char *out)
{
    json_t *got = df_test_metrics(dir, out, false);
    assert_int_equal(json_array_size(got), 3);
    for (size_t i = 0; i < 3; i++) {
        json_t *y = json_array_get(got, i);
        double filtered = num(y, "fully_async/count/filtered_samples", (int)i);
        double taken = filtered / num(y, "fully_async/filtered_frac", (int)i);
        if (!(filtered >= 4 && fabs(taken - filtered - 8) < 1e-3)) /* the fraction as logged: 6 digits */
            fail_msg("step %zu: %g filtered of %g taken", i + 1, filtered, taken);
        assert_true(num(y, "train/num_gen_batches", (int)i) >= 2);
        assert_true(num(y, "critic/score/min", (int)i) >= 1);
        assert_true(num(y, "training/global_step", (int)i) == (double)(i + 1));
    }
    json_decref(got);
}

/* max_staleness 0 (the rollout side never ahead: a refill exists only if the rejected ones were
   reported), on every rank but one as rollout ranks; then max_staleness 1 with one
   rollout rank (3 ranks: two trainer ranks, one of which often holds none of a small refill). */
static void test_dapo_refills(void **state)
{
    (void)state;
    int W = df_comm_size(world);
    if (W < 2) {
        skip();
        return;
    }
    df_test_run_ok(train_dapo("dapo0", W - 1, 0, NULL), "dapo0");
    df_test_run_ok(train_dapo("dapo1", 1, 1, NULL), "dapo1");
    /* with ReMax's baseline before the filter: the greedy pass of a refill decodes the refill's prompts,
       and from step 2 on the step's prompts are not the trainer dataloader's batch (the refills took
       prompts ahead of it): a baseline of other prompts fails the step ("no greedy response") */
    df_test_run_ok(train_dapo("dapo_remax", 1, 0, "algorithm.adv_estimator=remax"), "dapo_remax");
    assert_int_equal(df_comm_barrier(world), 0);
    if (df_comm_rank(world) != 0)
        return;
    check_dapo("dapo0");
    check_dapo("dapo1");
    check_dapo("dapo_remax");
}

/* Step 1's metrics of a ReMax run `out` against the synchronous one's: the same initial weights and
   prompts, so the same responses, scores and greedy baselines, whose float values the metrics sum in
   double in another order (the bound: that order's rounding; another response or baseline would move
   them by a digit's share of a response, ~1e-3). With several trainer ranks a token mean is the mean
   of the ranks' (metrics_reduce.c): only the extremes compare. */
static void same_step1(const char *out, bool token_means)
{
    json_t *ref = df_test_metrics(dir, "remax_ref", false), *got = df_test_metrics(dir, out, false);
    json_t *x = json_array_get(ref, 0), *y = json_array_get(got, 0);
    const char *keys[] = {"critic/score/mean", "critic/advantages/max", "critic/advantages/min",
                          "critic/advantages/mean"};
    for (size_t k = 0; k < (token_means ? 4 : 3); k++) {
        double u = num(x, keys[k], 0), v = num(y, keys[k], 0);
        if (!(fabs(u - v) <= 1e-9 * (1 + fabs(u))))
            fail_msg("%s step 1: %s = %.9g synchronous, %.9g asynchronous", out, keys[k], u, v);
    }
    json_decref(ref);
    json_decref(got);
}

/* ReMax: the reward_baseline node's greedy pass re-runs the rollout node, which decodes the step's
   prompts greedily on the trainer side with the trainer's actor: at max_staleness 0 the weights the
   samples came from, so the run is the synchronous one (2 ranks: bit for bit). 3 ranks: two rollout
   ranks (the batch's episodes in another order), then two trainer ranks each decoding its share. */
static void test_remax(void **state)
{
    (void)state;
    int W = df_comm_size(world);
    if (W < 2) {
        skip();
        return;
    }
    char r[64];
    snprintf(r, sizeof r, "rollout.n_gpus_per_node=%d", W - 1);
    const char *ov[] = {"actor_rollout_ref.rollout.mode=async", r, "algorithm.adv_estimator=remax"};
    train_ok(world, "remax", ov, 3);
    if (W > 2) {
        ov[1] = "rollout.n_gpus_per_node=1";
        train_ok(world, "remax_t2", ov, 3);
    }
    assert_int_equal(df_comm_barrier(world), 0);
    if (df_comm_rank(world) != 0)
        return;
    if (W == 2) {
        json_t *ref = df_test_metrics(dir, "remax_ref", false), *got = df_test_metrics(dir, "remax", false);
        same_metrics(ref, got);
        json_decref(ref);
        json_decref(got);
        return;
    }
    same_step1("remax", true);
    same_step1("remax_t2", false);
}

static int setup(void **state)
{
    (void)state;
    if (df_comm_world(&world) || df_reward_register("test/digits", df_test_digit_share) ||
        df_reward_register("test/halves", halves_score))
        return -1;
    if (!df_test_size_ok(df_comm_size(world)))
        return -1;
    if (df_test_shared_inputs(world, "df_async", 64, "test/digits", dir, sizeof dir))
        return -1;
    df_comm *self = NULL;
    if (df_comm_split(world, df_comm_rank(world), 0, &self))
        return -1;
    const char *remax[] = {"algorithm.adv_estimator=remax"};
    if (df_comm_rank(world) == 0 && train(self, "ref", NULL, 0))
        print_error("the synchronous reference: %s\n", df_last_error());
    if (df_comm_rank(world) == 0 && df_comm_size(world) > 1 && train(self, "remax_ref", remax, 1))
        print_error("the synchronous ReMax reference: %s\n", df_last_error());
    if (df_comm_rank(world) == 0)
        df_test_digits_inputs(dir, "halves.jsonl", 64, "test/halves", false);
    df_comm_free(self);
    return df_comm_barrier(world);
}

static int teardown(void **state)
{
    (void)state;
    return df_test_shared_cleanup(world, dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_staleness0_is_synchronous),
        cmocka_unit_test(test_staleness0_bf16_wire),
        cmocka_unit_test(test_staleness2_bounded),
        cmocka_unit_test(test_ppo_staleness1),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_no_partial_rollout),
        cmocka_unit_test(test_multi_turn_interaction),
        cmocka_unit_test(test_multi_turn_env),
        cmocka_unit_test(test_multi_turn_staleness1),
        cmocka_unit_test(test_dapo_refills),
        cmocka_unit_test(test_remax),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
