/* Plugins: loading node functions and pipelines from shared libraries
 * (src/planner/plugin.c), the example plugins of examples/plugins/ run inside a
 * task graph, and every loader error. DF_PLUGIN_DIR is build/plugins. */
#include "distflow/config.h"
#include "distflow/dag.h"
#include "distflow/reward.h"
#include "distflow/model.h"
#include "distflow/scheduler.h"
#include "distflow/tokenizer.h"
#include "distflow/worker.h"
#include "engine/hf_dir.h"
#include "testutil.h"
#include "util/fsutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define REWARD_SO DF_PLUGIN_DIR "/libreward_length.so"
#define FILTER_SO DF_PLUGIN_DIR "/libfilter_nonzero_std.so"
#define BAD_SO(v) DF_PLUGIN_DIR "/test/libbad_" v ".so"


static int unload(void **state)
{
    (void)state;
    df_exec_unload_plugins();
    return 0;
}

/* Fake rollout: 7 samples in 4 GRPO groups with chosen response lengths. */
static const char *const k_uid[] = {"a", "a", "b", "b", "c", "c", "d"};
static const int64_t k_len[] = {4, 2, 6, 2, 9, 8, 3};
enum { N_FAKE = 7 };

static int fake_generate(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    (void)ctx;
    assert_null(batch); /* entry node */
    df_batch *b = df_batch_new(N_FAKE);
    int64_t offs[N_FAKE + 1] = {0};
    for (int i = 0; i < N_FAKE; i++)
        offs[i + 1] = offs[i] + k_len[i];
    int32_t ids[64];
    for (int t = 0; t < offs[N_FAKE]; t++)
        ids[t] = 100 + t;
    int rc = b ? df_batch_set_tok_i32(b, "response_ids", offs, ids) : DF_ENOMEM;
    if (!rc)
        rc = df_batch_set_str(b, "uid", k_uid);
    if (rc) {
        df_batch_free(b);
        return rc;
    }
    out->batch = b;
    return DF_OK;
}

/* rollout -> plugin reward (target 4) -> plugin filter; exact scores and rows kept. */
static void test_pipeline_runs_plugins(void **state)
{
    (void)state;
    df_pipeline *p = df_pipeline_new("plugin_test", "fake rollout + plugin reward + filter");
    assert_non_null(p);
    const char *const d_gen[] = {"rollout_actor"}, *const d_rew[] = {"function_reward"};
    df_node_spec gen = {.node_id = "rollout_actor", .fn = fake_generate,
                        .node_type = DF_NODE_MODEL_INFERENCE, .node_role = DF_ROLE_ROLLOUT};
    df_node_spec rew = {.node_id = "function_reward",
                        .func_ref = REWARD_SO ":compute_length_reward", .deps = d_gen,
                        .n_deps = 1, .node_role = DF_ROLE_REWARD};
    df_node_spec fil = {.node_id = "dynamic_sampling",
                        .func_ref = FILTER_SO ":filter_nonzero_std", .deps = d_rew,
                        .n_deps = 1};
    assert_int_equal(df_pipeline_add(p, &gen), 0);
    assert_int_equal(df_pipeline_add(p, &rew), 0);
    assert_int_equal(df_pipeline_add(p, &fil), 0);
    df_task_graph *g = NULL;
    assert_int_equal(df_pipeline_build(p, &g), 0);
    df_pipeline_free(p);
    assert_int_equal(df_node_set_config(df_task_graph_get_node(g, "function_reward"),
                                        "target_length", "4"), 0);
    assert_int_equal(df_task_graph_resolve(g), 0);
    assert_int_equal(df_plugin_count(), 2);

    df_metrics *m = df_metrics_new();
    df_node_ctx ctx = {.metrics = m};
    df_run_opts opts = {.release_batch = df_batch_free};
    df_batch *b = NULL;
    assert_int_equal(df_task_graph_run(g, &ctx, &b, &opts), 0);
    assert_int_equal(df_task_graph_get_node(g, "dynamic_sampling")->status, DF_STATUS_COMPLETED);

    /* scores 1 - |L - 4| / 4 clipped at 0: a {1, .5}, b {.5, .5}, c {0, 0}, d {.75}
     * -> b and c (all equal) dropped, the one-sample group d kept */
    assert_non_null(b);
    assert_int_equal(df_batch_size(b), 3);
    assert_string_equal(df_batch_str(b, "uid", 0), "a");
    assert_string_equal(df_batch_str(b, "uid", 1), "a");
    assert_string_equal(df_batch_str(b, "uid", 2), "d");
    const float want0[] = {0, 0, 0, 1.0f}, want1[] = {0, 0.5f}, want2[] = {0, 0, 0.75f};
    const float *want[] = {want0, want1, want2};
    const int64_t want_len[] = {4, 2, 3};
    for (int i = 0; i < 3; i++) {
        int64_t len = -1, len2 = -1;
        const float *s = df_batch_tok_f32(b, "token_level_scores", i, &len);
        const float *r = df_batch_tok_f32(b, "token_level_rewards", i, &len2);
        assert_non_null(s);
        assert_non_null(r);
        assert_int_equal(len, want_len[i]);
        assert_int_equal(len2, want_len[i]);
        for (int t = 0; t < len; t++) {
            assert_float_equal(s[t], want[i][t], 0);
            assert_float_equal(r[t], want[i][t], 0);
        }
    }
    int64_t len;
    assert_int_equal(df_batch_tok_i32(b, "response_ids", 2, &len)[0], 100 + 31); /* row d */
    /* exact: sums of small integers and of 1 - d / 4 (multiples of 1/4) in double, divided as here */
    assert_float_equal(df_metrics_get(m, "reward_length/response_length_mean", -1), 34.0 / 7, 0);
    assert_float_equal(df_metrics_get(m, "reward_length/score_mean", -1), 3.25 / 7, 0);
    assert_float_equal(df_metrics_get(m, "dapo_sampling/kept_trajectories_ratio", -1), 3.0 / 7, 0);
    assert_float_equal(df_metrics_get(m, "dapo_sampling/kept_groups", -1), 2, 0);
    assert_float_equal(df_metrics_get(m, "dapo_sampling/total_groups", -1), 4, 0);
    df_batch_free(b);
    df_metrics_free(m);
    df_task_graph_free(g);
}

/* One dlopen per file; df_plugin_init registrations; unload removes them. */
static void test_cache_init_and_unload(void **state)
{
    (void)state;
    df_node_fn f1 = NULL, f2 = NULL, f3 = NULL;
    assert_int_equal(df_exec_resolve(REWARD_SO ":compute_length_reward", &f1), 0);
    /* the same file through another spelling of its path is not loaded again */
    assert_int_equal(df_exec_resolve(DF_PLUGIN_DIR "/../plugins/libreward_length.so:"
                                                   "compute_length_reward", &f2), 0);
    assert_ptr_equal(f1, f2);
    assert_int_equal(df_plugin_count(), 1);
    /* registered by the plugin's df_plugin_init */
    assert_int_equal(df_exec_resolve("length_reward.compute", &f3), 0);
    assert_ptr_equal(f1, f3);
    /* "~/" expands to $HOME */
    char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    setenv("HOME", DF_PLUGIN_DIR, 1);
    assert_int_equal(df_exec_resolve("~/libreward_length.so:compute_length_reward", &f2), 0);
    assert_ptr_equal(f1, f2);
    if (home)
        setenv("HOME", home, 1);
    free(home);
    assert_int_equal(df_plugin_count(), 1);

    df_exec_unload_plugins();
    assert_int_equal(df_plugin_count(), 0);
    assert_error_mentions(df_exec_resolve("length_reward.compute", &f3), DF_ENOTFOUND,
                          "'length_reward.compute'");
}

/* dag.custom_pipeline_fn: a plugin function building the task graph. */
static void test_custom_pipeline(void **state)
{
    (void)state;
    df_task_graph *g = NULL;
    assert_int_equal(df_pipeline_from_plugin(REWARD_SO ":length_reward_pipeline", &g), 0);
    assert_string_equal(df_task_graph_id(g), "grpo_length_reward");
    assert_int_equal(df_task_graph_num_nodes(g), 6);
    df_node *r = df_task_graph_get_node(g, "function_reward");
    assert_non_null(r);
    assert_string_equal(r->executable_ref, "length_reward.compute");
    assert_int_equal(r->node_role, DF_ROLE_REWARD);
    assert_string_equal(r->dependencies[0], "rollout_actor");
    assert_true(df_task_graph_get_node(g, "actor_old_log_prob")->only_forward_compute);
    df_node_fn f = NULL;
    assert_int_equal(df_exec_resolve(r->executable_ref, &f), 0); /* init ran */
    df_task_graph_free(g);
    /* no such factory */
    assert_error_mentions(df_pipeline_from_plugin(REWARD_SO ":no_pipeline", &g), DF_ENOTFOUND,
                          "no exported symbol 'no_pipeline'");
    assert_null(g);
    /* its siiRL node order cannot take the KL in the reward: the error names the custom pipeline */
    df_config *cfg;
    assert_int_equal(df_config_load_text(df_config_schema_train(),
                                         "actor_rollout_ref: {model: {path: /nonexistent}}\n"
                                         "algorithm: {use_kl_in_reward: true}\n"
                                         "dag: {custom_pipeline_fn: '" REWARD_SO ":length_reward_pipeline'}\n",
                                         "kl.yaml", NULL, 0, &cfg),
                     0);
    const char *name;
    assert_error_mentions(df_pipeline_from_config(cfg, NULL, NULL, &name, &g), DF_EINVAL,
                          "kl.yaml:3: dag.custom_pipeline_fn: custom pipeline '" REWARD_SO
                          ":length_reward_pipeline': algorithm.use_kl_in_reward=true");
    df_config_free(cfg);
}

/* Node config errors and the filter's metric choices. */
static void test_plugin_node_errors(void **state)
{
    (void)state;
    df_node_fn reward = NULL, filter = NULL;
    assert_int_equal(df_exec_resolve(REWARD_SO ":compute_length_reward", &reward), 0);
    assert_int_equal(df_exec_resolve("filter.nonzero_std", &filter), DF_ENOTFOUND); /* not loaded */
    assert_int_equal(df_exec_resolve(FILTER_SO ":filter_nonzero_std", &filter), 0);
    df_node *nd = NULL;
    assert_int_equal(df_node_new("rew", DF_NODE_COMPUTE, DF_ROLE_REWARD, &nd), 0);
    assert_int_equal(df_node_set_config(nd, "target_length", "four"), 0);
    df_node_ctx ctx = {.node = nd};
    df_node_output out = {NULL};
    df_batch *b = NULL;
    assert_int_equal(fake_generate(&ctx, NULL, &out), 0);
    b = out.batch;
    assert_error_mentions(reward(&ctx, b, &out), DF_EINVAL, "config target_length='four'");
    assert_non_null(strstr(df_last_error(), "node 'rew'"));
    assert_int_equal(df_node_set_config(nd, "target_length", "2"), 0);
    assert_int_equal(reward(&ctx, b, &out), 0);

    /* metric = an int64 column: groups a {1,1} and c {2,2} drop; b {1,2} and d {5} stay */
    const int64_t acc[] = {1, 1, 1, 2, 2, 2, 5};
    assert_int_equal(df_batch_set_i64(b, "acc", acc), 0);
    assert_int_equal(df_node_set_config(nd, "metric", "acc"), 0);
    out.batch = NULL;
    assert_int_equal(filter(&ctx, b, &out), 0);
    assert_int_equal(df_batch_size(out.batch), 3);
    assert_int_equal(df_batch_i64(out.batch, "acc")[0], 1);
    assert_int_equal(df_batch_i64(out.batch, "acc")[1], 2);
    assert_int_equal(df_batch_i64(out.batch, "acc")[2], 5);
    df_batch_free(out.batch);
    out.batch = NULL;
    assert_int_equal(df_node_set_config(nd, "metric", "nope"), 0);
    assert_error_mentions(filter(&ctx, b, &out), DF_EINVAL, "metric 'nope'");
    assert_null(out.batch);
    df_batch_free(b);
    df_node_free(nd);
}

/* Loader errors: each names the file, the ref (so the symbol) and the problem. */
static void test_load_errors(void **state)
{
    const char *dir = *state;
    df_node_fn f = NULL;
    assert_error_mentions(df_exec_resolve(DF_PLUGIN_DIR "/libmissing.so:node", &f), DF_ENOTFOUND,
                          "no such file");
    assert_non_null(strstr(df_last_error(), "libmissing.so:node"));
    assert_error_mentions(df_exec_resolve(REWARD_SO ":no_such_node", &f), DF_ENOTFOUND,
                          "no exported symbol 'no_such_node'");
    assert_non_null(strstr(df_last_error(), "libreward_length.so"));
    assert_error_mentions(df_exec_resolve(BAD_SO("bad_abi") ":bad_node", &f), DF_EUNSUPPORTED,
                          "built for plugin ABI 99, this distflow has ABI 1");
    assert_non_null(strstr(df_last_error(), "libbad_bad_abi.so"));
    assert_error_mentions(df_exec_resolve(BAD_SO("no_abi") ":bad_node", &f), DF_EINVAL,
                          "does not export df_plugin_abi_version");
    assert_error_mentions(df_exec_resolve(BAD_SO("undefined_ref") ":bad_node", &f), DF_EINVAL,
                          "cannot load");
    assert_non_null(strstr(df_last_error(), "df_no_such_function_anywhere")); /* dlerror text */
    assert_error_mentions(df_exec_resolve(BAD_SO("init_fails") ":bad_node", &f), DF_EINVAL,
                          "df_plugin_init failed: bad_plugin: refusing to start (test)");
    /* what the failed init registered is gone with it */
    assert_int_equal(df_exec_resolve("bad_plugin.registered_then_failed", &f), DF_ENOTFOUND);
    df_reward_fn rf;
    assert_int_not_equal(df_reward_lookup("bad_plugin/reward", &rf), 0);
    assert_int_equal(df_plugin_count(), 1); /* only reward_length stayed loaded */

    /* not a shared library */
    char path[512];
    snprintf(path, sizeof path, "%s/libtext.so", dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("not an ELF file\n", fp);
    fclose(fp);
    char ref[600];
    snprintf(ref, sizeof ref, "%s:node", path);
    assert_error_mentions(df_exec_resolve(ref, &f), DF_EINVAL, "cannot load");
    assert_non_null(strstr(df_last_error(), "libtext.so"));

    /* malformed refs */
    void (*any)(void) = NULL;
    assert_error_mentions(df_plugin_symbol(REWARD_SO ":", &any), DF_EINVAL,
                          "expected 'path/to/libname.so:symbol'");
    assert_error_mentions(df_plugin_symbol(":sym", &any), DF_EINVAL, "expected");
    assert_error_mentions(df_plugin_symbol("libx.so", &any), DF_EINVAL, "expected");
    assert_null(any);
}

/* df_plugin_check / df_exec_check: the loader's verdicts from the file alone, no plugin code run. */
static void test_check_without_loading(void **state)
{
    const char *dir = *state;
    int loaded = df_plugin_count();
    /* its constructor aborts the process: only reading the file can pass here */
    assert_int_equal(df_plugin_check(BAD_SO("ctor_aborts") ":bad_node"), 0);
    assert_int_equal(df_exec_check(BAD_SO("ctor_aborts") ":bad_node"), 0);
    assert_int_equal(df_plugin_count(), loaded);
    assert_error_mentions(df_plugin_check(BAD_SO("ctor_aborts") ":not_a_function"), DF_EINVAL,
                          "'not_a_function' is not a function");
    assert_error_mentions(df_plugin_check(BAD_SO("ctor_aborts") ":nope"), DF_ENOTFOUND,
                          "no exported symbol 'nope'");
    assert_non_null(strstr(df_last_error(), "libbad_ctor_aborts.so:nope"));
    /* what df_exec_resolve refuses, df_plugin_check refuses with the same code and words */
    assert_error_mentions(df_plugin_check(BAD_SO("bad_abi") ":bad_node"), DF_EUNSUPPORTED,
                          "built for plugin ABI 99, this distflow has ABI 1");
    assert_error_mentions(df_plugin_check(BAD_SO("no_abi") ":bad_node"), DF_EINVAL,
                          "does not export df_plugin_abi_version");
    assert_error_mentions(df_plugin_check(BAD_SO("undefined_ref") ":bad_node"), DF_EINVAL,
                          "cannot load: undefined symbol: df_no_such_function_anywhere");
    assert_error_mentions(df_plugin_check(DF_PLUGIN_DIR "/libmissing.so:node"), DF_ENOTFOUND, "no such file");
    assert_error_mentions(df_plugin_check("libx.so"), DF_EINVAL, "expected 'path/to/libname.so:symbol'");
    char path[512], ref[600];
    snprintf(path, sizeof path, "%s/libtext.so", dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("not an ELF file\n", fp);
    fclose(fp);
    snprintf(ref, sizeof ref, "%s:node", path);
    assert_error_mentions(df_plugin_check(ref), DF_EINVAL, "cannot load: not an ELF file");
    /* an ELF file that is not a shared object: an object file of this build (ET_REL) */
    assert_error_mentions(df_plugin_check(DF_BINARY_DIR "/CMakeFiles/distflow_objs.dir/src/util/error.c.o:df_error"),
                          DF_EINVAL, "cannot load: not a shared object");
    assert_int_equal(df_plugin_check(REWARD_SO ":compute_length_reward"), 0);
    assert_int_equal(df_exec_check(FILTER_SO ":filter_nonzero_std"), 0);
    assert_int_equal(df_plugin_count(), loaded); /* nothing was loaded */
    /* the loader itself reads the file first: a wrong ABI never reaches dlopen */
    df_node_fn f;
    assert_error_mentions(df_exec_resolve(BAD_SO("bad_abi") ":bad_node", &f), DF_EUNSUPPORTED, "ABI 99");
    assert_int_equal(df_plugin_count(), loaded);
    /* names, aliases and siiRL spellings need no file; unknown names say what is closest */
    assert_int_equal(df_exec_register("DAGWorker.dynamic_sampling", fake_generate), 0);
    assert_int_equal(df_exec_check("siirl.algorithm.dapo.dynamic_sampling"), 0);
    assert_int_equal(df_exec_check("siirl.user_interface.filter_interface.dapo.dynamic_sampling"), 0);
    df_node_fn a, b;
    assert_int_equal(df_exec_resolve("siirl.algorithm.dapo.dapo.dynamic_sampling", &a), 0);
    assert_int_equal(df_exec_resolve("DAGWorker.dynamic_sampling", &b), 0);
    assert_ptr_equal(a, b);
    assert_error_mentions(df_exec_check("siirl.algorithm.dapo.dynamic_sampler"), DF_ENOTFOUND,
                          "no executable registered for 'siirl.algorithm.dapo.dynamic_sampler' (closest distflow "
                          "function: 'DAGWorker.dynamic_sampling';");
    df_exec_unregister("DAGWorker.dynamic_sampling");
    /* an alias of a name nobody registered is not found */
    assert_int_equal(df_exec_check("siirl.algorithm.dapo.dynamic_sampling"), DF_ENOTFOUND);
}

/* A tiny random model, its tokenizer and a dataset under dir. */
static void make_worker_inputs(const char *dir)
{
    char line[512], data[16 * 512] = "";
    const char *texts[16];
    char store[16][64];
    for (int i = 0; i < 16; i++) {
        snprintf(store[i], sizeof store[i], "Add %d and %d.", i, i + 1);
        texts[i] = store[i];
        snprintf(line, sizeof line,
                 "{\"data_source\": \"openai/gsm8k\", \"prompt\": [{\"role\": \"user\", "
                 "\"content\": \"Add %d and %d.\"}], \"reward_model\": {\"ground_truth\": \"%d\"}}\n",
                 i, i + 1, 2 * i + 1);
        strcat(data, line);
    }
    char *p = df_path_join(dir, "train.jsonl");
    assert_int_equal(df_write_file_atomic(p, data, strlen(data)), 0);
    free(p);
    df_test_tiny_model(dir, texts, 16, 280, 16, 1, 3);
}

/* dag.custom_pipeline_fn in the DAG worker: one GRPO step whose reward is the plugin's. */
static void test_worker_custom_pipeline(void **state)
{
    const char *dir = *state;
    make_worker_inputs(dir);
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 4,\n"
             "       max_prompt_length: 64, max_response_length: 6}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 8}\n"
             "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 8}\n"
             "  ref: {log_prob_micro_batch_size_per_gpu: 8}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "dag: {custom_pipeline_fn: '%s:length_reward_pipeline'}\n"
             "trainer: {total_training_steps: 1, save_freq: -1, logger: [], default_local_dir: %s/out}\n",
             dir, dir, REWARD_SO, dir);
    df_test_fit(yaml, "plugin.yaml");
    char *mpath = df_path_join(dir, "out/metrics.jsonl"), *text;
    assert_int_equal(df_read_file(mpath, &text, NULL), 0);
    /* the plugin's metrics reached the step's line: its reward node ran */
    assert_non_null(strstr(text, "\"reward_length/score_mean\""));
    assert_non_null(strstr(text, "\"reward_length/response_length_mean\""));
    free(text);
    free(mpath);

    /* a broken factory is reported with the config key */
    snprintf(yaml, sizeof yaml,
             "actor_rollout_ref: {model: {path: %s/model}, rollout: {n: 2}}\n"
             "dag: {custom_pipeline_fn: '%s:no_such_fn'}\n"
             "algorithm: {adv_estimator: grpo}\n",
             dir, REWARD_SO);
    df_config *cfg;
    df_dag_worker *w;
    assert_int_equal(df_config_load_text(df_config_schema_train(), yaml, "bad.yaml", NULL, 0, &cfg), 0);
    assert_error_mentions(df_dag_worker_create(cfg, NULL, &w), DF_ENOTFOUND,
                          "bad.yaml:2: dag.custom_pipeline_fn");
    assert_non_null(strstr(df_last_error(), "no exported symbol 'no_such_fn'"));
    df_config_free(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_pipeline_runs_plugins, unload),
        cmocka_unit_test_teardown(test_cache_init_and_unload, unload),
        cmocka_unit_test_teardown(test_custom_pipeline, unload),
        cmocka_unit_test_teardown(test_plugin_node_errors, unload),
        cmocka_unit_test_setup_teardown(test_load_errors, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_check_without_loading, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_worker_custom_pipeline, df_test_mkdtemp, df_test_rmtree),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    df_exec_unload_plugins();
    return rc;
}
