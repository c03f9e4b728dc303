/*
 * test_dapo.c — DAPO's dynamic sampling: the group filter on a hand-made
 * batch, and the dapo pipeline end to end (generating extra batches until
 * the kept groups fill the train batch, or failing after
 * max_num_gen_batches), generation rounds of data.gen_batch_size prompts (verl's
 * DAPO recipe), the asynchronous runtime's refill bound, and a rank failing
 * alone: every rank returns an error, with no hang.
 *
 * mpi-test: np 2
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"

#include "distflow/comm.h"
#include "distflow/reward.h"
#include "workers/worker_internal.h"

#include <jansson.h>
#include <math.h>
#include <unistd.h>

static df_comm *world;
static char dir[256];
static long n_scored; /* responses this rank scored: the reward is called once per response, in order */

/* df_test_digit_share, counted */
static int counted_digit_share(const char *data_source, const char *s, const char *gt, const char *extra,
                               double *score)
{
    n_scored++;
    return df_test_digit_share(data_source, s, gt, extra, score);
}

/* Groups: a = {1, 1} (all right: dropped), b = {0, 1} (kept), c = {0} (one sample: kept),
 * d = {0, 0, 0} (all wrong: dropped). Kept rows 2, 3, 4; groups b and c. */
static void test_filter_keeps_varying_groups(void **state)
{
    (void)state;
    const char *uid[] = {"a", "a", "b", "b", "c", "d", "d", "d"};
    const float acc[] = {1, 1, 0, 1, 0, 0, 0, 0};
    df_batch *b = df_batch_new(8);
    assert_int_equal(df_batch_set_str(b, "uid", uid), 0);
    assert_int_equal(df_batch_set_f32(b, "acc", acc), 0);
    int64_t keep[8], n_keep, groups;
    assert_int_equal(df_dynamic_sampling_kept_rows(b, "acc", keep, &n_keep, &groups), 0);
    assert_int_equal(n_keep, 3);
    assert_int_equal(groups, 2);
    assert_int_equal(keep[0], 2);
    assert_int_equal(keep[1], 3);
    assert_int_equal(keep[2], 4);
    assert_error_mentions(df_dynamic_sampling_kept_rows(b, "accuracy", keep, &n_keep, &groups), DF_EINVAL,
                          "filter_groups.metric=accuracy");
    /* a Python reward function's numeric key (verl: any key of reward_extra_info): only a varies */
    const float fmt[] = {0, 1, 1, 1, 1, 0, 0, 0};
    assert_int_equal(df_batch_set_f32(b, DF_REWARD_EXTRA_PREFIX "fmt", fmt), 0);
    assert_int_equal(df_dynamic_sampling_kept_rows(b, "fmt", keep, &n_keep, &groups), 0);
    assert_int_equal(n_keep, 3); /* a's two rows and c's one */
    assert_int_equal(groups, 2);
    assert_true(keep[0] == 0 && keep[1] == 1 && keep[2] == 4);
    df_batch_free(b);
}

/* mode=async refills only the missing groups, within max_num_gen_batches train batches of prompts per
 * step (8 prompts a batch here). */
static void test_async_refill_bound(void **state)
{
    (void)state;
    assert_int_equal(df_dynamic_sampling_refill(8, 4, 8, 10), 4);
    assert_int_equal(df_dynamic_sampling_refill(8, 8, 8, 10), 0);  /* nothing missing */
    assert_int_equal(df_dynamic_sampling_refill(8, 4, 8, 1), -1);  /* one batch: no refill */
    assert_int_equal(df_dynamic_sampling_refill(8, 7, 15, 2), 1);  /* 16 prompts: within 2 batches */
    assert_int_equal(df_dynamic_sampling_refill(8, 6, 15, 2), -1); /* 17 would not be */
    assert_int_equal(df_dynamic_sampling_refill(8, 0, 800, 0), 8); /* 0: no bound */
}

/* The dapo config of these tests (metric, output dir and n_extra more overrides). */
static df_config *dapo_config_ov(const char *metric, const char *out, const char *const *extra, int n_extra)
{
    char yaml[4096], m[64];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 4,\n"
             "       max_prompt_length: 128, max_response_length: 10}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {optim: {lr: 0.01}, ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 8,\n"
             "          clip_ratio_low: 0.2, clip_ratio_high: 0.28, loss_agg_mode: token-mean}\n"
             "  rollout: {n: 4, log_prob_micro_batch_size_per_gpu: 8}\n"
             "algorithm: {adv_estimator: grpo, workflow_type: dapo,\n"
             "            filter_groups: {enable: true, max_num_gen_batches: 3}}\n"
             "trainer: {total_training_steps: 2, logger: [], default_local_dir: %s/%s}\n",
             dir, dir, dir, out);
    snprintf(m, sizeof m, "algorithm.filter_groups.metric=%s", metric);
    const char *ov[8] = {m};
    assert_true(n_extra < 8);
    for (int i = 0; i < n_extra; i++)
        ov[1 + i] = extra[i];
    return df_test_config(yaml, "dapo.yaml", ov, 1 + n_extra);
}

static df_config *dapo_config(const char *metric, const char *out, const char *extra)
{
    return dapo_config_ov(metric, out, &extra, extra ? 1 : 0);
}

static int train(const char *metric, const char *out, const char *extra)
{
    return df_test_run(world, dapo_config(metric, out, extra));
}

/* score varies within most groups: two steps train, each reporting its generation batches */
static void test_dapo_steps(void **state)
{
    (void)state;
    if (train("score", "score", NULL))
        fail_msg("%s", df_last_error());
    if (df_comm_rank(world) != 0)
        return;
    json_t *lines = df_test_metrics(dir, "score", false), *o;
    size_t i;
    json_array_foreach(lines, i, o) {
        double gens = json_number_value(json_object_get(o, "train/num_gen_batches"));
        assert_true(gens >= 1 && gens <= 3);
        assert_true(json_is_number(json_object_get(o, "actor/pg_loss")));
    }
    assert_int_equal(json_array_size(lines), 2);
    json_decref(lines);
}

/* The dataloader position in dir/<out>/global_step_<step>, as batches from the start: epoch x
 * per_epoch + step. */
static int64_t saved_position(const char *out, int step, int64_t per_epoch)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s/global_step_%d/data.json", dir, out, step);
    json_t *o = json_load_file(p, 0, NULL);
    if (!o)
        fail_msg("%s does not load", p);
    int64_t pos = json_integer_value(json_object_get(o, "epoch")) * per_epoch +
                  json_integer_value(json_object_get(o, "step"));
    json_decref(o);
    return pos;
}

/*
 * verl's DAPO recipe, data.gen_batch_size = 2 x train_batch_size: every round rolls out a dataloader
 * batch of 8 prompts (this rank scores its 8 / ranks of them x n = 4), each step trains on exactly
 * train_batch_size x n = 16 responses, and the dataloader counts generation batches: 16 rows make an
 * epoch of 2 (total_training_steps from it: 2 steps, where batches of train_batch_size would give 4),
 * and each checkpoint's data position has moved by the step's train/num_gen_batches.
 */
static void test_gen_batch_rounds(void **state)
{
    (void)state;
    int P = df_comm_size(world);
    char dumps[512];
    snprintf(dumps, sizeof dumps, "trainer.rollout_data_dir=%s/gen/rollouts", dir);
    const char *ov[] = {"data.gen_batch_size=8", "data.train_max_samples=16", "data.shuffle=false",
                        "trainer.total_training_steps=null", "trainer.total_epochs=1", "trainer.save_freq=1", dumps};
    long scored = n_scored;
    df_test_run_ok(df_test_run(world, dapo_config_ov("score", "gen", ov, 7)), "gen_batch_size=8");
    scored = n_scored - scored;
    assert_int_equal(df_comm_barrier(world), 0); /* rank 0's metrics.jsonl is complete */
    json_t *lines = df_test_metrics(dir, "gen", true), *o;
    assert_int_equal(json_array_size(lines), 2);
    int64_t rounds = 0;
    size_t i;
    json_array_foreach(lines, i, o) {
        double g = df_test_metric(o, "train/num_gen_batches");
        assert_true(g >= 1 && g <= 3 && g == floor(g));
        rounds += (int64_t)g;
        assert_int_equal(saved_position("gen", (int)i + 1, 2), rounds);
        json_t *rows = df_test_rollout_dumps(dir, "gen", (int)i + 1, NULL);
        assert_int_equal(json_array_size(rows), 4 * 4); /* train_batch_size x rollout.n, cut from 8 x 4 */
        json_decref(rows);
    }
    json_decref(lines);
    assert_int_equal(scored, rounds * (8 / P) * 4);
}

/* gen_batch_size below train_batch_size (allowed in verl): rounds of 2 prompts, at least two a step,
 * each still training on exactly train_batch_size x n responses. */
static void test_gen_batch_smaller(void **state)
{
    (void)state;
    int P = df_comm_size(world);
    char dumps[512];
    snprintf(dumps, sizeof dumps, "trainer.rollout_data_dir=%s/small/rollouts", dir);
    const char *ov[] = {"data.gen_batch_size=2", "algorithm.filter_groups.max_num_gen_batches=20", dumps};
    long scored = n_scored;
    df_test_run_ok(df_test_run(world, dapo_config_ov("score", "small", ov, 3)), "gen_batch_size=2");
    scored = n_scored - scored;
    assert_int_equal(df_comm_barrier(world), 0);
    json_t *lines = df_test_metrics(dir, "small", true), *o;
    assert_int_equal(json_array_size(lines), 2);
    int64_t rounds = 0;
    size_t i;
    json_array_foreach(lines, i, o) {
        double g = df_test_metric(o, "train/num_gen_batches");
        assert_true(g >= 2 && g == floor(g));
        rounds += (int64_t)g;
        json_t *rows = df_test_rollout_dumps(dir, "small", (int)i + 1, NULL);
        assert_int_equal(json_array_size(rows), 4 * 4);
        json_decref(rows);
    }
    json_decref(lines);
    assert_int_equal(scored, rounds * (2 / P) * 4);
}

/* The lines of a run's metrics.jsonl without timings (which differ between runs), as text. */
static char *metrics_text(const char *out)
{
    json_t *lines = df_test_metrics(dir, out, false), *o;
    size_t i;
    json_array_foreach(lines, i, o) {
        const char *k;
        void *tmp;
        json_t *v;
        json_object_foreach_safe(o, tmp, k, v) {
            bool clock = df_test_clock_metric(k);
            if (json_is_number(v) && clock)
                json_object_del(o, k);
        }
    }
    char *text = json_dumps(lines, JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
    json_decref(lines);
    return text;
}

/* A DAPO workflow in siiRL's style: the sampler a plain COMPUTE node named by siiRL's module path (an
 * alias), followed by `after` (a node, or nothing) before calculate_advantages. */
static void write_siirl_dapo(const char *path, const char *after)
{
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "dag_id: dapo_training_pipeline\nnodes:\n"
             "  - {node_id: rollout_actor, node_type: MODEL_INFERENCE, node_role: ROLLOUT}\n"
             "  - {node_id: function_reward, node_type: COMPUTE, node_role: REWARD, dependencies: [rollout_actor]}\n"
             "  - {node_id: dynamic_sampling, node_type: COMPUTE, executable_ref: siirl.algorithm.dapo.dynamic_sampling,\n"
             "     dependencies: [function_reward]}\n"
             "%s"
             "  - {node_id: calculate_advantages, node_type: COMPUTE, node_role: ADVANTAGE,\n"
             "     dependencies: [%s]}\n"
             "  - {node_id: actor_old_log_prob, node_type: MODEL_TRAIN, node_role: ACTOR, only_forward_compute: true,\n"
             "     dependencies: [calculate_advantages]}\n"
             "  - {node_id: reference_log_prob, node_type: MODEL_TRAIN, node_role: REFERENCE,\n"
             "     dependencies: [actor_old_log_prob]}\n"
             "  - {node_id: actor_train, node_type: MODEL_TRAIN, node_role: ACTOR, dependencies: [reference_log_prob]}\n",
             after ? after : "", after ? "postprocess_sampling" : "dynamic_sampling");
    assert_int_equal(df_write_file_atomic(path, yaml, strlen(yaml)), 0);
}

/* siiRL's workflow_dapo.yaml shapes: the sampler without the DYNAMIC_SAMPLING role, then a
 * POSTPROCESS_SAMPLING node (siiRL 2025-08) or the advantage node directly. On several ranks the
 * sampler's output must be rebalanced as after the built-in pipeline's DYNAMIC_SAMPLING node: the same
 * training, metric for metric (the redistribution moves whole rows; nothing is summed in another order). */
static void test_siirl_workflow_shape(void **state)
{
    (void)state;
    char wf[2][512];
    snprintf(wf[0], sizeof wf[0], "%s/siirl_dapo_postprocess.yaml", dir);
    snprintf(wf[1], sizeof wf[1], "%s/siirl_dapo_plain.yaml", dir);
    if (df_comm_rank(world) == 0) {
        write_siirl_dapo(wf[0], "  - {node_id: postprocess_sampling, node_type: COMPUTE, node_role: POSTPROCESS_SAMPLING,\n"
                                "     dependencies: [dynamic_sampling]}\n");
        write_siirl_dapo(wf[1], NULL);
    }
    df_comm_barrier(world);
    if (train("score", "builtin", NULL))
        fail_msg("%s", df_last_error());
    char *a = df_comm_rank(world) == 0 ? metrics_text("builtin") : NULL;
    for (int i = 0; i < 2; i++) {
        char ov[600], out[32];
        snprintf(ov, sizeof ov, "dag.workflow_path=%s", wf[i]);
        snprintf(out, sizeof out, "siirl%d", i);
        if (train("score", out, ov))
            fail_msg("%s: %s", wf[i], df_last_error());
        if (df_comm_rank(world) != 0)
            continue;
        char *b = metrics_text(out);
        if (strcmp(a, b))
            fail_msg("%s trains differently from the built-in dapo pipeline:\n%s\n%s", wf[i], a, b);
        free(b);
    }
    free(a);
}

/* acc is 0 for every response of a random model: no group varies, so the
 * sampler gives up after max_num_gen_batches, on every rank, with a message */
static void test_dapo_gives_up(void **state)
{
    (void)state;
    assert_error_mentions(train("acc", "acc", NULL), DF_EINVAL, "max_num_gen_batches=3");
}

/* rollout replicated over pairs of ranks: the sampler's counts and cut must not count a replica's
 * groups twice (the worker fails the step if the replicas' weights then differ) */
static void test_dapo_with_rollout_replicas(void **state)
{
    (void)state;
    if (df_comm_size(world) % 2) {
        skip();
        return;
    }
    if (train("score", "tp2", "actor_rollout_ref.rollout.tensor_model_parallel_size=2"))
        fail_msg("%s", df_last_error());
}

/* A batch without the metric's column on the last rank only: every rank returns an error, none waits
 * in the count's all-reduce. */
static void test_fails_on_one_rank(void **state)
{
    (void)state;
    int rank = df_comm_rank(world), size = df_comm_size(world);
    if (size < 2) {
        skip();
        return;
    }
    df_config *cfg = dapo_config("score", "fail", NULL);
    df_dag_worker *w = NULL;
    if (df_dag_worker_create(cfg, world, &w))
        fail_msg("%s", df_last_error());
    df_node_fn fn = NULL;
    assert_int_equal(df_exec_resolve("DAGWorker.dynamic_sampling", &fn), 0);
    /* two groups of rollout.n = 4 whose scores vary: enough for this rank's share */
    const char *uid[] = {"a", "a", "a", "a", "b", "b", "b", "b"};
    const float score[] = {0, 1, 0, 0, 1, 0, 1, 1};
    df_batch *b = df_batch_new(8);
    assert_int_equal(df_batch_set_str(b, "uid", uid), 0);
    bool bad = rank == size - 1;
    if (!bad)
        assert_int_equal(df_batch_set_f32(b, "score", score), 0);
    df_node_ctx ctx = {.worker = w, .node = df_task_graph_get_node(w->graph, "dynamic_sampling"), .step = 1};
    df_node_output out = {NULL};
    assert_non_null(ctx.node);
    alarm(60); /* a hang ends the test here rather than at ctest's timeout */
    int rc = fn(&ctx, b, &out);
    alarm(0);
    char want[128];
    snprintf(want, sizeof want, "1 other rank(s) of the group (%d ranks) failed", size);
    if (bad)
        assert_error_mentions(rc, DF_EINVAL, "the batch has no score column");
    else
        assert_error_mentions(rc, DF_EINTERNAL, want);
    assert_null(out.batch);
    df_batch_free(b);
    df_dag_worker_free(w);
    df_config_free(cfg);
}

static int setup(void **state)
{
    (void)state;
    if (df_comm_world(&world) || df_reward_register("test/digits", counted_digit_share))
        return -1;
    return df_test_shared_inputs(world, "df_dapo", 64, "test/digits", dir, sizeof dir);
}

static int teardown(void **state)
{
    (void)state;
    return df_test_shared_cleanup(world, dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_filter_keeps_varying_groups),
        cmocka_unit_test(test_async_refill_bound),
        cmocka_unit_test(test_dapo_steps),
        cmocka_unit_test(test_dapo_gives_up),
        cmocka_unit_test(test_gen_batch_rounds),
        cmocka_unit_test(test_gen_batch_smaller),
        cmocka_unit_test(test_siirl_workflow_shape),
        cmocka_unit_test(test_dapo_with_rollout_replicas),
        cmocka_unit_test(test_fails_on_one_rank),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
