/*
 * test_plugin_algo.c — algorithms from plugins (df_plugin_adv_estimator /
 * df_plugin_policy_loss, src/planner/plugin_algo.c) with the example estimator
 * examples/plugins/adv_median.c: the descriptor read from the file without
 * running plugin code, then loaded and run on a hand-computed case; refs that
 * name the wrong kind of symbol are refused. DF_PLUGIN_DIR is build/plugins.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "distflow/algo_desc.h"
#include "distflow/dag.h"
#include "distflow/node.h"
#include "distflow/reward.h"
#include "testutil.h"
#include "tolerance.h"
#include "workers/worker_internal.h"

#include <string.h>

#define MEDIAN_REF DF_PLUGIN_DIR "/libadv_median.so:median_baseline"

/* Checked only: the needs come from the file, and the stand-in refuses to run. */
static void test_check_reads_descriptor(void **state)
{
    (void)state;
    int before = df_plugin_count();
    assert_int_equal(df_plugin_adv_estimator(MEDIAN_REF, false), 0);
    assert_int_equal(df_plugin_count(), before); /* nothing loaded */
    const df_adv_estimator_desc *d = df_adv_estimator_find(MEDIAN_REF);
    assert_non_null(d);
    assert_string_equal(d->name, MEDIAN_REF);
    assert_int_equal(d->needs, DF_ADV_NEEDS_GROUPS);
    assert_int_equal(d->flags, 0);
    assert_string_equal(df_adv_estimator_pipeline(d), "grpo");
    float a[1], r[1];
    df_adv_input in = {0};
    assert_int_equal(d->fn(&in, a, r), DF_EINTERNAL);
    assert_non_null(strstr(df_last_error(), "checked but not loaded"));
}

/* Loaded: groups {1, 0, 0} and {3, 1, 2, 6} of one-token rewards (scores) and a two-token sample.
 * Medians 0 and (2 + 3) / 2 = 2.5. */
static void test_load_and_run(void **state)
{
    (void)state;
    assert_int_equal(df_plugin_adv_estimator(MEDIAN_REF, true), 0);
    const df_adv_estimator_desc *d = df_adv_estimator_find(MEDIAN_REF);
    assert_non_null(d);
    assert_int_equal(d->needs, DF_ADV_NEEDS_GROUPS);
    assert_string_equal(d->summary, "outcome score minus the median score of the prompt's responses");
    const int64_t off[] = {0, 1, 2, 3, 4, 5, 7, 8};
    const float rew[] = {1, 0, 0, 3, 1, 0.5f, 1.5f, 6}; /* sample 5: 0.5 + 1.5 = 2 */
    const int64_t group[] = {0, 0, 0, 1, 1, 1, 1};
    df_adv_input in = {.n = 7, .offsets = off, .token_level_rewards = rew, .group = group};
    float adv[8], ret[8];
    assert_int_equal(d->fn(&in, adv, ret), 0);
    const float want[] = {1, 0, 0, 0.5f, -1.5f, -0.5f, -0.5f, 3.5f};
    for (int t = 0; t < 8; t++) {
        assert_float_equal(adv[t], want[t], 0); /* sums and halves of small integers: exact */
        assert_float_equal(ret[t], want[t], 0);
    }
    df_adv_estimator_fn fn;
    assert_int_equal(df_adv_estimator_lookup(MEDIAN_REF, &fn), 0);
    assert_true(fn == d->fn);
}

/* A function symbol is not a descriptor; a descriptor is not a loss; a missing one is named. */
static void test_wrong_symbols(void **state)
{
    (void)state;
    assert_int_equal(df_plugin_adv_estimator(DF_PLUGIN_DIR "/libreward_length.so:compute_length_reward", false),
                     DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "'compute_length_reward' is not a data object"));
    assert_int_equal(df_plugin_policy_loss(MEDIAN_REF, false), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "is not an object of"));
    assert_int_equal(df_plugin_adv_estimator(DF_PLUGIN_DIR "/libadv_median.so:no_such", false), DF_ENOTFOUND);
    assert_non_null(strstr(df_last_error(), "no exported symbol 'no_such'"));
    assert_int_equal(df_plugin_adv_estimator(DF_PLUGIN_DIR "/libnone.so:x", false), DF_ENOTFOUND);
}

/* What loading registered belongs to the plugin: unloading it removes the estimator, so no
   registry entry is left pointing into unmapped code. */
static void test_unload_removes(void **state)
{
    (void)state;
    assert_int_equal(df_plugin_adv_estimator(MEDIAN_REF, true), 0);
    assert_non_null(df_adv_estimator_find(MEDIAN_REF));
    df_exec_unload_plugins();
    assert_int_equal(df_plugin_count(), 0);
    assert_null(df_adv_estimator_find(MEDIAN_REF));
}

/* ---- through config check and train ------------------------------------------------------- */

static char dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/df_plugin_algo_XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    df_test_digits_inputs(dir, "train.jsonl", 8, "test/digits", true);
    return df_reward_register("test/digits", df_test_digit_share);
}

static int teardown(void **state)
{
    (void)state;
    df_exec_unload_plugins();
    return df_test_remove_tree(dir);
}

/*
 * A train job on dir's data and tiny model into yaml[cap]: train_batch_size `batch` prompts
 * (also the mini-batch), rollout.n `n`, `actor` more actor keys (", key: v" or ""), `more` more
 * top-level YAML lines (algorithm, dag, ...), `steps` steps into dir/`out`.
 */
static void job_yaml(char *yaml, size_t cap, int batch, int n, const char *actor, const char *more, int steps,
                     const char *out)
{
    int len = snprintf(yaml, cap,
                       "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: %d,\n"
                       "       max_prompt_length: 128, max_response_length: 6}\n"
                       "actor_rollout_ref:\n"
                       "  model: {path: %s/model}\n"
                       "  actor: {ppo_mini_batch_size: %d, ppo_micro_batch_size_per_gpu: 4%s}\n"
                       "  rollout: {n: %d, log_prob_micro_batch_size_per_gpu: 4}\n"
                       "  ref: {log_prob_micro_batch_size_per_gpu: 4}\n"
                       "%s"
                       "trainer: {total_training_steps: %d, save_freq: -1, test_freq: -1, val_before_train: false,\n"
                       "          logger: [], default_local_dir: %s/%s}\n",
                       dir, batch, dir, batch, actor, n, more, steps, dir, out);
    assert_true(len > 0 && (size_t)len < cap);
}

/* A train config using the plugin estimator, with rollout.n = n; written to dir/plugin_n<n>.yaml. */
static void write_config(int n, char *path, size_t cap)
{
    char yaml[2048];
    char alg[512], out[32];
    snprintf(alg, sizeof alg, "algorithm: {adv_estimator: '%s'}\n", MEDIAN_REF);
    snprintf(out, sizeof out, "out_n%d", n);
    job_yaml(yaml, sizeof yaml, 4, n, ", optim: {lr: 0.01}", alg, 2, out);
    snprintf(path, cap, "%s/plugin_n%d.yaml", dir, n);
    assert_int_equal(df_write_file_atomic(path, yaml, strlen(yaml)), 0);
}

/* `distflow config check`: accepted with n = 2; refused with n = 1 because the descriptor, read
   from the file, says the estimator needs groups. */
static void test_config_check_cli(void **state)
{
    (void)state;
    char path[512], cmd[2048], out[4096];
    for (int n = 1; n <= 2; n++) {
        write_config(n, path, sizeof path);
        /* rows of a data_source the CLI knows: "test/digits" is registered in this process only */
        snprintf(cmd, sizeof cmd, "%s/distflow config check %s data.train_files=[%s/tests/fixtures/"
                 "gsm8k_rows.jsonl] 2>&1", DF_BINARY_DIR, path, DF_SOURCE_DIR);
        int st = df_test_command(cmd, out, sizeof out);
        if (n == 2) {
            assert_int_equal(st, 0);
            assert_string_equal(out, "ok\n");
        } else {
            assert_int_not_equal(st, 0);
            assert_non_null(strstr(out, "libadv_median.so:median_baseline"));
            assert_non_null(strstr(out, "needs actor_rollout_ref.rollout.n"));
        }
    }
}

/* train: the check registers the file's descriptor, the worker loads the library and runs it (the
   checked stand-in would fail the first step); nothing is loaded by the check alone. */
static void test_train_uses_plugin(void **state)
{
    (void)state;
    df_exec_unload_plugins();
    char path[512];
    write_config(1, path, sizeof path);
    df_config *c = NULL;
    assert_int_equal(df_config_load(df_config_schema_train(), path, NULL, 0, &c), 0);
    assert_int_equal(df_train_check(c, 1, NULL, NULL, NULL), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "needs actor_rollout_ref.rollout.n"));
    assert_int_equal(df_plugin_count(), 0);
    df_config_free(c);

    write_config(2, path, sizeof path);
    assert_int_equal(df_config_load(df_config_schema_train(), path, NULL, 0, &c), 0);
    assert_int_equal(df_test_run(NULL, c), 0);
    assert_int_equal(df_plugin_count(), 1);
    assert_true(df_adv_estimator_find(MEDIAN_REF)->needs == DF_ADV_NEEDS_GROUPS);
    json_t *lines = df_test_metrics(dir, "out_n2", true);
    assert_int_equal(json_array_size(lines), 2);
    json_decref(lines);
}

/* Train one step with c (freed) into dir/out: its one metrics line, in an array the caller frees. */
static json_t *run_one_step(df_config *c, const char *out)
{
    if (df_test_run(NULL, c))
        fail_msg("%s", df_last_error());
    json_t *lines = df_test_metrics(dir, out, true);
    assert_int_equal(json_array_size(lines), 1);
    return lines;
}

/* The typed config reaches plugin algorithms, as verl's `config` argument: tests/plugins/algo_config.c's
   estimator gives every token algorithm.gamma as its advantage, its loss actor.clip_ratio_c per token
   under token-mean weights (sum 1 over the mini-batch's tokens, up to float rounding). */
static void test_algorithms_get_config(void **state)
{
    (void)state;
    char more[1024], yaml[2048];
    snprintf(more, sizeof more,
             "algorithm: {adv_estimator: '%s/test/libalgo_config.so:gamma_advantage', gamma: 0.25}\n",
             DF_PLUGIN_DIR);
    job_yaml(yaml, sizeof yaml, 4, 2,
             ", optim: {lr: 0.01}, clip_ratio_c: 2.5, policy_loss: {loss_mode: '" DF_PLUGIN_DIR
             "/test/libalgo_config.so:clip_c_loss'}",
             more, 1, "out_config");
    df_config *c = NULL;
    assert_int_equal(df_config_load_text(df_config_schema_train(), yaml, "config.yaml", NULL, 0, &c), 0);
    json_t *lines = run_one_step(c, "out_config"), *o = json_array_get(lines, 0);
    double lo = df_test_metric(o, "critic/advantages/min"), hi = df_test_metric(o, "critic/advantages/max");
    double pg = df_test_metric(o, "actor/pg_loss");
    print_message("advantages in [%g, %g], actor/pg_loss %.9g\n", lo, hi, pg);
    assert_true(lo == 0.25 && hi == 0.25);
    /* 8 responses of at most 6 tokens: the weights' float sum is 1 within 48 roundings */
    assert_near(pg, 2.5, 2.5 * 48 * DF_U32);
    json_decref(lines);
}

/* Both example plugins in one job, through public headers only: the workflow's reward node is
   reward_text.c (decodes with the node context's tokenizer), the estimator adv_median.c. The
   reward node's own mean score is the score the trainer logs: its scores are the ones trained on. */
static void test_text_reward_node(void **state)
{
    (void)state;
    char wf[1024], path[512], yaml[2048];
    snprintf(wf, sizeof wf,
             "dag_id: text_reward\n"
             "nodes:\n"
             "  - {node_id: rollout, node_type: MODEL_INFERENCE, node_role: ROLLOUT}\n"
             "  - {node_id: reward, node_type: COMPUTE, node_role: REWARD, dependencies: [rollout],\n"
             "     executable_ref: '%s/libreward_text.so:compute_text_reward'}\n"
             "  - {node_id: adv, node_type: COMPUTE, node_role: ADVANTAGE, dependencies: [reward]}\n"
             "  - {node_id: old, node_type: MODEL_TRAIN, node_role: ACTOR, only_forward_compute: true,\n"
             "     dependencies: [adv]}\n"
             "  - {node_id: train, node_type: MODEL_TRAIN, node_role: ACTOR, dependencies: [old]}\n",
             DF_PLUGIN_DIR);
    snprintf(path, sizeof path, "%s/text_reward.yaml", dir);
    assert_int_equal(df_write_file_atomic(path, wf, strlen(wf)), 0);
    char more[1024];
    snprintf(more, sizeof more, "algorithm: {adv_estimator: '%s'}\ndag: {workflow_path: %s}\n", MEDIAN_REF, path);
    job_yaml(yaml, sizeof yaml, 4, 2, ", optim: {lr: 0.01}", more, 2, "out_text");
    df_config *c = NULL;
    assert_int_equal(df_config_load_text(df_config_schema_train(), yaml, "text.yaml", NULL, 0, &c), 0);
    df_exec_unload_plugins();
    assert_int_equal(df_train_check(c, 1, NULL, NULL, NULL), 0); /* config check: nothing loaded */
    assert_int_equal(df_plugin_count(), 0);
    assert_int_equal(df_test_run(NULL, c), 0);
    assert_int_equal(df_plugin_count(), 2);
    json_t *lines = df_test_metrics(dir, "out_text", true), *o;
    size_t i;
    assert_int_equal(json_array_size(lines), 2);
    json_array_foreach(lines, i, o) {
        json_t *mine = json_object_get(o, "reward_text/score_mean"), *score = json_object_get(o, "critic/score/mean");
        json_t *chars = json_object_get(o, "reward_text/chars_mean");
        if (!json_is_number(mine) || !json_is_number(score) || !json_is_number(chars))
            fail_msg("step %zu: reward_text/score_mean, critic/score/mean or reward_text/chars_mean missing", i + 1);
        /* means of the same 0 / 1 scores over the same 8 responses: exact, printed alike */
        assert_true(json_number_value(mine) == json_number_value(score));
        assert_true(json_number_value(chars) > 0); /* the responses were decoded */
    }
    json_decref(lines);
}

/* What a node function declares it reads: a built-in's registration, a plugin's `<sym>_keys`
   object read from the file (no plugin loaded), nothing for a plugin that declares nothing. */
static void test_node_keys_api(void **state)
{
    (void)state;
    df_exec_unload_plugins();
    assert_int_equal(df_worker_register_nodes(), 0);
    df_node_keys k;
    assert_int_equal(df_exec_node_keys("DAGWorker.generate", &k), 0);
    assert_string_equal(k.global[0], "actor_rollout_ref.rollout.temperature");
    assert_string_equal(k.global[3], "actor_rollout_ref.rollout.do_sample");
    assert_string_equal(k.global[4], "actor_rollout_ref.model.path"); /* its agent group's model */
    assert_string_equal(k.global[5], "");
    assert_string_equal(k.own[0], "");
    assert_int_equal(df_exec_node_keys("siirl.dag_worker.dagworker:DAGWorker.train_critic", &k), 0);
    assert_string_equal(k.global[0], "critic.cliprange_value");
    assert_int_equal(df_exec_node_keys("DAGWorker.compute_reward", &k), 0);
    assert_string_equal(k.global[0], "");
    assert_int_equal(df_exec_node_keys(DF_PLUGIN_DIR "/libreward_length.so:compute_length_reward", &k), 0);
    assert_string_equal(k.own[0], "target_length");
    assert_string_equal(k.own[1], "");
    assert_string_equal(k.global[0], "");
    assert_int_equal(df_exec_node_keys(DF_PLUGIN_DIR "/libreward_text.so:compute_text_reward", &k), 0);
    assert_string_equal(k.own[0], "");
    assert_int_equal(df_plugin_count(), 0);
    assert_int_equal(df_exec_node_keys("DAGWorker.no_such", &k), DF_ENOTFOUND);
}

/* A plugin node's own `config:` key, declared by the library (compute_length_reward_keys): read
   from the file by config check, passed to the node by train (target 1000 makes every score
   L / 1000, so the node's mean score is its mean length / 1000; the default 16 would give
   length / 16); a key it does not declare is refused, naming the ones it does. */
static void test_node_own_keys(void **state)
{
    (void)state;
    char wf[1024], path[512], yaml[2048], cmd[2048], out[4096];
    for (int bad = 1; bad >= 0; bad--) {
        snprintf(wf, sizeof wf,
                 "dag_id: length_reward\n"
                 "nodes:\n"
                 "  - {node_id: rollout, node_type: MODEL_INFERENCE, node_role: ROLLOUT}\n"
                 "  - {node_id: reward, node_type: COMPUTE, node_role: REWARD, dependencies: [rollout],\n"
                 "     executable_ref: '%s/libreward_length.so:compute_length_reward',\n"
                 "     config: {%s: 1000}}\n"
                 "  - {node_id: adv, node_type: COMPUTE, node_role: ADVANTAGE, dependencies: [reward]}\n"
                 "  - {node_id: old, node_type: MODEL_TRAIN, node_role: ACTOR, only_forward_compute: true,\n"
                 "     dependencies: [adv]}\n"
                 "  - {node_id: train, node_type: MODEL_TRAIN, node_role: ACTOR, dependencies: [old]}\n",
                 DF_PLUGIN_DIR, bad ? "target_lenght" : "target_length");
        snprintf(path, sizeof path, "%s/length_reward.yaml", dir);
        assert_int_equal(df_write_file_atomic(path, wf, strlen(wf)), 0);
        char more[1024];
        snprintf(more, sizeof more, "algorithm: {adv_estimator: grpo}\ndag: {workflow_path: %s}\n", path);
        job_yaml(yaml, sizeof yaml, 4, 2, ", optim: {lr: 0.01}", more, 1, "out_length");
        snprintf(path, sizeof path, "%s/length.yaml", dir);
        assert_int_equal(df_write_file_atomic(path, yaml, strlen(yaml)), 0);
        snprintf(cmd, sizeof cmd, "%s/distflow config check %s 2>&1", DF_BINARY_DIR, path);
        int st = df_test_command(cmd, out, sizeof out);
        if (bad) {
            if (!st || !strstr(out, "node 'reward': target_lenght cannot be changed per node (this node "
                                    "honours: its own keys: target_length)"))
                fail_msg("config check exit %d: %s", st, out);
        } else if (st) {
            fail_msg("config check: %s", out);
        }
    }
    df_config *c = NULL;
    assert_int_equal(df_config_load(df_config_schema_train(), path, NULL, 0, &c), 0);
    assert_int_equal(df_test_run(NULL, c), 0);
    json_t *lines = df_test_metrics(dir, "out_length", true);
    assert_int_equal(json_array_size(lines), 1);
    json_t *o = json_array_get(lines, 0);
    json_t *len = json_object_get(o, "reward_length/response_length_mean");
    json_t *score = json_object_get(o, "reward_length/score_mean");
    assert_true(json_is_number(len) && json_is_number(score) && json_number_value(len) > 0);
    assert_true(fabs(json_number_value(score) * 1000 - json_number_value(len)) < 1e-9);
    json_decref(lines);
}

/* A plugin node asks the job's models for log-probs through the node context: right after the
   old-log-prob node, the actor's answer equals old_log_probs bit for bit at every step; the
   reference's equals them at step 1 (nothing trained yet) and differs at step 2 (the actor has
   been updated, the reference is frozen). */
static void test_node_model_log_probs(void **state)
{
    (void)state;
    const char *roles[] = {"actor", "reference"};
    for (int r = 0; r < 2; r++) {
        char wf[1024], path[512], yaml[2048], out_dir[64];
        snprintf(wf, sizeof wf,
                 "dag_id: probe\n"
                 "nodes:\n"
                 "  - {node_id: rollout, node_type: MODEL_INFERENCE, node_role: ROLLOUT}\n"
                 "  - {node_id: reward, node_type: COMPUTE, node_role: REWARD, dependencies: [rollout]}\n"
                 "  - {node_id: old, node_type: MODEL_TRAIN, node_role: ACTOR, only_forward_compute: true,\n"
                 "     dependencies: [reward]}\n"
                 "  - {node_id: ref, node_type: MODEL_TRAIN, node_role: REFERENCE, dependencies: [old]}\n"
                 "  - {node_id: probe, node_type: COMPUTE, node_role: DEFAULT, dependencies: [ref],\n"
                 "     executable_ref: '%s/test/libprobe_logp.so:probe_logp', config: {role: %s}}\n"
                 "  - {node_id: gen, node_type: COMPUTE, node_role: DEFAULT, dependencies: [probe],\n"
                 "     executable_ref: '%s/test/libprobe_logp.so:probe_generate'}\n"
                 "  - {node_id: adv, node_type: COMPUTE, node_role: ADVANTAGE, dependencies: [gen]}\n"
                 "  - {node_id: train, node_type: MODEL_TRAIN, node_role: ACTOR, dependencies: [adv]}\n",
                 DF_PLUGIN_DIR, roles[r], DF_PLUGIN_DIR);
        snprintf(path, sizeof path, "%s/probe_%s.yaml", dir, roles[r]);
        assert_int_equal(df_write_file_atomic(path, wf, strlen(wf)), 0);
        snprintf(out_dir, sizeof out_dir, "out_probe_%s", roles[r]);
        char more[1024];
        snprintf(more, sizeof more, "algorithm: {adv_estimator: grpo}\ndag: {workflow_path: %s}\n", path);
        job_yaml(yaml, sizeof yaml, 4, 2, ", optim: {lr: 0.05}, use_kl_loss: true, kl_loss_coef: 0.01", more, 2,
                 out_dir);
        df_config *c = NULL;
        assert_int_equal(df_config_load_text(df_config_schema_train(), yaml, "probe.yaml", NULL, 0, &c), 0);
        if (df_test_run(NULL, c))
            fail_msg("%s: %s", roles[r], df_last_error());
        json_t *lines = df_test_metrics(dir, out_dir, true);
        assert_int_equal(json_array_size(lines), 2);
        for (size_t i = 0; i < 2; i++) {
            json_t *d = json_object_get(json_array_get(lines, i), "probe/abs_diff_mean");
            if (!json_is_number(d))
                fail_msg("%s step %zu: no probe/abs_diff_mean", roles[r], i + 1);
            double v = json_number_value(d);
            bool want_zero = r == 0 || i == 0;
            if (want_zero ? v != 0 : !(v > 0))
                fail_msg("%s step %zu: probe/abs_diff_mean %g", roles[r], i + 1, v);
            json_t *g = json_object_get(json_array_get(lines, i), "probe/gen_rows_per_row");
            if (!json_is_number(g) || json_number_value(g) != 2) /* rollout.n responses per row */
                fail_msg("%s step %zu: probe/gen_rows_per_row is not 2", roles[r], i + 1);
        }
        json_decref(lines);
    }
}

/* DAPO's refill re-enters the graph: the dynamic-sampling node re-runs the nodes before it on new
   prompts, the workflow's own reward node included. That node scores the step's pass flat (0) and
   re-runs 0 / 1 per row, so exactly one refill fills the batch and every kept score came from a
   re-run of the plugin: train/num_gen_batches 2, critic/score/mean 0.5. */
static void test_refill_reenters_graph(void **state)
{
    (void)state;
    char wf[1024], path[512], yaml[2048];
    snprintf(wf, sizeof wf,
             "dag_id: refill\n"
             "nodes:\n"
             "  - {node_id: rollout, node_type: MODEL_INFERENCE, node_role: ROLLOUT}\n"
             "  - {node_id: reward, node_type: COMPUTE, node_role: REWARD, dependencies: [rollout],\n"
             "     executable_ref: '%s/test/libscore_const.so:pass_reward_node'}\n"
             "  - {node_id: ds, node_type: COMPUTE, executable_ref: DAGWorker.dynamic_sampling,\n"
             "     dependencies: [reward]}\n"
             "  - {node_id: adv, node_type: COMPUTE, node_role: ADVANTAGE, dependencies: [ds]}\n"
             "  - {node_id: old, node_type: MODEL_TRAIN, node_role: ACTOR, only_forward_compute: true,\n"
             "     dependencies: [adv]}\n"
             "  - {node_id: train, node_type: MODEL_TRAIN, node_role: ACTOR, dependencies: [old]}\n",
             DF_PLUGIN_DIR);
    snprintf(path, sizeof path, "%s/refill.yaml", dir);
    assert_int_equal(df_write_file_atomic(path, wf, strlen(wf)), 0);
    char more[1024];
    snprintf(more, sizeof more,
             "algorithm: {adv_estimator: grpo, filter_groups: {enable: true, metric: seq_reward}}\n"
             "dag: {workflow_path: %s}\n", path);
    job_yaml(yaml, sizeof yaml, 2, 2, ", optim: {lr: 0.01}", more, 1, "out_refill");
    df_config *c = NULL;
    assert_int_equal(df_config_load_text(df_config_schema_train(), yaml, "refill.yaml", NULL, 0, &c), 0);
    if (df_test_run(NULL, c))
        fail_msg("%s", df_last_error());
    json_t *lines = df_test_metrics(dir, "out_refill", true);
    assert_int_equal(json_array_size(lines), 1);
    json_t *o = json_array_get(lines, 0);
    json_t *gens = json_object_get(o, "train/num_gen_batches"), *score = json_object_get(o, "critic/score/mean");
    if (!json_is_number(gens) || json_number_value(gens) != 2)
        fail_msg("train/num_gen_batches is not 2");
    if (!json_is_number(score) || json_number_value(score) != 0.5)
        fail_msg("critic/score/mean is not 0.5: the refill was not scored by the workflow's reward node");
    json_decref(lines);
}

/* ReMax's greedy pass as "dag_id: <id>" with the nodes `mid` between the reward node (greedy_reward_node)
   and the advantage node, written to dir/<id>.yaml; the config into *c. */
static void remax_job(const char *id, const char *mid, const char *adv_dep, df_config **c)
{
    char wf[2048], path[512], more[1024], yaml[2048];
    snprintf(wf, sizeof wf,
             "dag_id: %s\n"
             "nodes:\n"
             "  - {node_id: rollout, node_type: MODEL_INFERENCE, node_role: ROLLOUT}\n"
             "  - {node_id: reward, node_type: COMPUTE, node_role: REWARD, dependencies: [rollout],\n"
             "     executable_ref: '%s/test/libscore_const.so:greedy_reward_node'}\n"
             "%s"
             "  - {node_id: adv, node_type: COMPUTE, node_role: ADVANTAGE, dependencies: [%s]}\n"
             "  - {node_id: old, node_type: MODEL_TRAIN, node_role: ACTOR, only_forward_compute: true,\n"
             "     dependencies: [adv]}\n"
             "  - {node_id: train, node_type: MODEL_TRAIN, node_role: ACTOR, dependencies: [old]}\n",
             id, DF_PLUGIN_DIR, mid, adv_dep);
    snprintf(path, sizeof path, "%s/%s.yaml", dir, id);
    assert_int_equal(df_write_file_atomic(path, wf, strlen(wf)), 0);
    snprintf(more, sizeof more, "algorithm: {adv_estimator: remax}\ndag: {workflow_path: %s}\n", path);
    job_yaml(yaml, sizeof yaml, 2, 2, ", optim: {lr: 0.01}", more, 1, id);
    assert_int_equal(df_config_load_text(df_config_schema_train(), yaml, "remax.yaml", NULL, 0, c), 0);
}

/* ReMax's baseline re-enters the graph: the reward_baseline node re-runs the rollout and the
   workflow's own reward node as a greedy pass. That node scores sampled responses 0 and greedy
   ones 1, so the advantages (0 - baseline) are -1 wherever a greedy response was scored by it
   (0 for a prompt whose greedy response is empty, which has no token to score). Without the
   baseline node, or with it after a training node, the workflow is refused. */
static void test_baseline_reenters_graph(void **state)
{
    (void)state;
    df_config *c = NULL;
    remax_job("out_remax", "  - {node_id: base, node_type: COMPUTE, executable_ref: DAGWorker.compute_reward_baseline,\n"
                           "     dependencies: [reward]}\n", "base", &c);
    json_t *lines = run_one_step(c, "out_remax"), *o = json_array_get(lines, 0);
    double lo = df_test_metric(o, "critic/advantages/min"), hi = df_test_metric(o, "critic/advantages/max");
    double score = df_test_metric(o, "critic/score/mean");
    print_message("advantages in [%g, %g], score mean %g\n", lo, hi, score);
    if (lo != -1 || hi > 0 || score != 0)
        fail_msg("advantages [%g, %g], score %g: the greedy pass was not scored by the workflow's reward node",
                 lo, hi, score);
    json_decref(lines);

    remax_job("no_base", "", "reward", &c);
    assert_error_mentions(df_train_check(c, 1, NULL, NULL, NULL), DF_EINVAL,
                          "node 'adv': algorithm.adv_estimator=remax needs reward_baselines");
    df_config_free(c);
    /* a baseline after the old-log-prob and training nodes would re-run the training */
    remax_job("late_base", "  - {node_id: base, node_type: COMPUTE, executable_ref: DAGWorker.compute_reward_baseline,\n"
                           "     dependencies: [late_train]}\n"
                           "  - {node_id: late_train, node_type: MODEL_TRAIN, node_role: ACTOR, dependencies: [reward]}\n",
              "base", &c);
    assert_error_mentions(df_train_check(c, 1, NULL, NULL, NULL), DF_EUNSUPPORTED,
                          "node 'base': the ReMax baseline re-runs every node before it greedily, and node "
                          "'late_train'");
    df_config_free(c);
}

/* verl's custom_reward_function: the example scorer, called as the reward manager calls it. */
static void test_custom_reward_example(void **state)
{
    (void)state;
    void (*fn)(void) = NULL;
    assert_int_equal(df_plugin_symbol(DF_PLUGIN_DIR "/libscore_gsm8k_format.so:compute_score", &fn), 0);
    df_reward_fn score = (df_reward_fn)fn;
    const struct {
        const char *response, *truth;
        double want;
    } cases[] = {{"so 6 * 7 = 42\n#### 42", "42", 1.0}, /* right */
                 {"#### 1,000", "1000", 1.0},             /* commas dropped, as verl */
                 {"I think #### 41", "42", 0.1},         /* the format, the wrong answer */
                 {"the answer is 42", "42", 0.0}};       /* no "#### " */
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        double s = -1;
        assert_int_equal(score("openai/gsm8k", cases[i].response, cases[i].truth, NULL, &s), 0);
        if (s != cases[i].want)
            fail_msg("'%s' vs '%s': %g, want %g", cases[i].response, cases[i].truth, s, cases[i].want);
    }
}

/* A plugin built on the public MATH checker (df_reward_math_last_boxed, df_reward_math_is_equiv). */
static void test_custom_reward_math_example(void **state)
{
    (void)state;
    void (*fn)(void) = NULL;
    assert_int_equal(df_plugin_symbol(DF_PLUGIN_DIR "/libscore_math_format.so:compute_score", &fn), 0);
    df_reward_fn score = (df_reward_fn)fn;
    const struct {
        const char *response, *truth;
        double want;
    } cases[] = {{"so $\\boxed{\\dfrac12}$", "\\frac{1}{2}", 1.0}, /* equal after normalisation */
                 {"\\boxed{0.5}", "\\frac{1}{2}", 1.0},
                 {"\\boxed{\\frac{2}{4}}", "\\frac{1}{2}", 0.1}, /* boxed, but not equal */
                 {"the answer is 1/2", "\\frac{1}{2}", 0.0}};        /* no box */
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        double s = -1;
        assert_int_equal(score("HuggingFaceH4/MATH-500", cases[i].response, cases[i].truth, NULL, &s), 0);
        if (s != cases[i].want)
            fail_msg("'%s' vs '%s': %g, want %g", cases[i].response, cases[i].truth, s, cases[i].want);
    }
}

/* A job with custom_reward_function: the check reads the library's symbol table (nothing
   loaded), train loads it and scores every response with it (0.25, whatever the data_source's
   own scorer would give); a missing symbol is refused by config check, naming the key. */
static void test_custom_reward_train(void **state)
{
    (void)state;
    char yaml[2048], cmd[2048], out[4096], path[512];
    const char *lib = DF_BINARY_DIR "/plugins/test/libscore_const.so";
    for (int bad = 1; bad >= 0; bad--) {
        char more[1024];
        snprintf(more, sizeof more, "algorithm: {adv_estimator: grpo}\ncustom_reward_function: {path: %s, name: %s}\n",
                 lib, bad ? "score_half" : "score_quarter");
        job_yaml(yaml, sizeof yaml, 4, 2, ", optim: {lr: 0.01}", more, 2, "out_custom");
        snprintf(path, sizeof path, "%s/custom.yaml", dir);
        assert_int_equal(df_write_file_atomic(path, yaml, strlen(yaml)), 0);
        snprintf(cmd, sizeof cmd, "%s/distflow config check %s 2>&1", DF_BINARY_DIR, path);
        int st = df_test_command(cmd, out, sizeof out);
        if (bad) {
            assert_int_not_equal(st, 0);
            assert_non_null(strstr(out, "custom_reward_function.path / .name"));
            assert_non_null(strstr(out, "no exported symbol 'score_half'"));
        } else {
            assert_int_equal(st, 0);
        }
    }
    df_config *c = NULL;
    assert_int_equal(df_config_load(df_config_schema_train(), path, NULL, 0, &c), 0);
    df_exec_unload_plugins();
    assert_int_equal(df_train_check(c, 1, NULL, NULL, NULL), 0);
    assert_int_equal(df_plugin_count(), 0);
    assert_int_equal(df_test_run(NULL, c), 0);
    assert_int_equal(df_plugin_count(), 1);
    json_t *lines = df_test_metrics(dir, "out_custom", true), *o;
    size_t i;
    assert_int_equal(json_array_size(lines), 2);
    json_array_foreach(lines, i, o) {
        json_t *score = json_object_get(o, "critic/score/mean");
        if (!json_is_number(score) || json_number_value(score) != 0.25)
            fail_msg("step %zu: critic/score/mean is not the custom reward's 0.25", i + 1);
    }
    json_decref(lines);
}

/* Without a worker behind the context the accessors give the one-rank answers, and the text
   reward refuses to run. */
static void test_context_without_worker(void **state)
{
    (void)state;
    df_node_ctx ctx = {0};
    assert_null(df_node_tokenizer(&ctx));
    assert_null(df_node_config(&ctx));
    assert_null(df_node_comm(&ctx));
    int dp = 0, r = 7, mp = 0, mr = 7;
    df_node_layout_of(&ctx, &dp, &r, &mp, &mr);
    assert_int_equal(dp, 1);
    assert_int_equal(r, 0);
    assert_int_equal(mp, 1);
    assert_int_equal(mr, 0);
    void (*fn)(void) = NULL;
    assert_int_equal(df_plugin_symbol(DF_PLUGIN_DIR "/libreward_text.so:compute_text_reward", &fn), 0);
    df_node_output out = {0};
    assert_int_equal(((df_node_fn)fn)(&ctx, NULL, &out), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "no tokenizer"));
    assert_false(df_node_has_model(&ctx, DF_ROLE_ACTOR));
    df_batch *b = df_batch_new(1), *g = NULL;
    assert_int_equal(df_node_log_probs(&ctx, DF_ROLE_ACTOR, b, "x", NULL), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "no DAG worker behind the node context"));
    assert_int_equal(df_node_values(&ctx, b), DF_EINVAL);
    assert_int_equal(df_node_generate(&ctx, b, &g), DF_EINVAL);
    assert_null(g);
    df_batch_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_reads_descriptor),
        cmocka_unit_test(test_custom_reward_example), cmocka_unit_test(test_custom_reward_math_example),
        cmocka_unit_test(test_load_and_run),
        cmocka_unit_test(test_wrong_symbols),
        cmocka_unit_test(test_unload_removes),
        cmocka_unit_test(test_config_check_cli),
        cmocka_unit_test(test_train_uses_plugin),
        cmocka_unit_test(test_algorithms_get_config),
        cmocka_unit_test(test_text_reward_node),
        cmocka_unit_test(test_custom_reward_train),
        cmocka_unit_test(test_node_keys_api),
        cmocka_unit_test(test_node_own_keys),
        cmocka_unit_test(test_node_model_log_probs),
        cmocka_unit_test(test_refill_reenters_graph),
        cmocka_unit_test(test_baseline_reenters_graph),
        cmocka_unit_test(test_context_without_worker),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
