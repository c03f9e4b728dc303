/*
 * Environment plugins and the dag.env_enable / dag.environment_path keys (distflow/env.h,
 * distflow/dag.h df_plugin_env, src/workers/dag/train_check.c): the example plugin
 * examples/plugins/env_nim.c named by its ref in an environment config, loaded through the plan's
 * plugin loader and played through a vector; removed from the registry when plugins are unloaded;
 * the keys' errors from df_train_check, which reads a plugin's file without loading it.
 */
#include "distflow/config.h"
#include "distflow/dag.h"
#include "distflow/env.h"
#include "distflow/worker.h"

#include "testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define REF DF_PLUGIN_DIR "/libenv_nim.so:nim_env"

static char *write_file(const char *dir, const char *name, const char *body)
{
    char *path = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(body, f);
    fclose(f);
    return path;
}

/* One turn of episode i: the observation must be `obs`, done as given. */
static void turn(df_env_vec *v, int i, const char *text, const char *obs, bool done)
{
    char *m = NULL, want[512];
    bool d = !done;
    if (df_env_vec_turn(v, i, text, "user", &m, &d))
        fail_msg("%s", df_last_error());
    snprintf(want, sizeof want, "[{\"role\":\"user\",\"content\":\"%s\"}]", obs);
    assert_string_equal(m, want);
    assert_int_equal(d, done);
    free(m);
}

static void test_plugin_env(void **state)
{
    df_exec_unload_plugins();
    char *path = write_file(*state, "nim.yaml", "environment:\n  name: " REF "\n  config: {min_stones: 5, max_stones: 5}\n");
    df_env_spec spec;
    if (df_env_spec_load(path, df_plugin_env, &spec))
        fail_msg("%s", df_last_error());
    assert_string_equal(spec.env->name, REF);
    const df_env *e = NULL;
    assert_int_equal(df_env_class_lookup(REF, &e), DF_OK);
    df_env_vec *v = NULL;
    assert_int_equal(df_env_vec_create(&spec, 2, &v), DF_OK);
    assert_int_equal(df_env_vec_reset(v, 7, 0), DF_OK);
    assert_non_null(strstr(df_env_vec_observation(v, 0), "We play Nim with a pile of 5 stones."));
    /* episode 0 plays the winning line (leave 4), episode 1 does not; a bad move costs a turn */
    turn(v, 0, "<answer>4</answer>", "That is not a legal move: take 1, 2 or 3 stones, at most the 5 left, as "
                                     "<answer>k</answer>.", false);
    turn(v, 0, "<answer>1</answer>", "I take 1; 3 left in the pile. Your move.", false);
    turn(v, 0, "<answer>3</answer>", "You took the last stone. You win!", true);
    turn(v, 1, "<answer>2</answer>", "I take 3 and with it the last stone. I win.", true);
    assert_true(df_env_vec_episode(v, 0)->success && df_env_vec_episode(v, 0)->ret == 1.0);
    assert_true(!df_env_vec_episode(v, 1)->success && df_env_vec_episode(v, 1)->terminated);
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_env_vec_metrics(v, m), DF_OK);
    assert_true(df_metrics_get(m, "env/success_rate", -1) == 0.5);
    assert_true(df_metrics_get(m, "num_turns/max", -1) == 7); /* 1 + 3 model turns + 3 replies */
    df_metrics_free(m);
    df_env_vec_free(v);
    df_env_spec_clear(&spec);

    /* the plugin's config errors come through the spec */
    free(path);
    path = write_file(*state, "nim.yaml", "environment:\n  name: " REF "\n  config: {min_stones: 9, max_stones: 3}\n");
    assert_int_not_equal(df_env_spec_load(path, df_plugin_env, &spec), DF_OK);
    assert_non_null(strstr(df_last_error(), "nim: config.min_stones (9) is above config.max_stones (3)"));
    free(path);
    /* a misspelt option is no default: the host's reader refuses it, at its line */
    path = write_file(*state, "nim.yaml", "environment:\n  name: " REF "\n  config:\n    min_stone: 9\n");
    assert_int_equal(df_env_spec_load(path, df_plugin_env, &spec), DF_EINVAL);
    if (!strstr(df_last_error(), "nim.yaml:4:5, environment.config.min_stone): nim: unknown key config.min_stone "
                                 "(known: min_stones, max_stones, max_turns); did you mean 'min_stones'?"))
        fail_msg("%s", df_last_error());
    free(path);

    /* unloading the plugins removes the class */
    df_exec_unload_plugins();
    assert_int_equal(df_env_class_lookup(REF, &e), DF_ENOTFOUND);
    /* a ref to no file is the loader's error, naming the ref */
    assert_int_equal(df_env_spec_load(DF_PLUGIN_DIR "/libnone.so:env", df_plugin_env, &spec), DF_ENOTFOUND);
    assert_non_null(strstr(df_last_error(), "environment class '" DF_PLUGIN_DIR "/libnone.so:env'"));
}

/* A train config that passes every check before the files: df_train_check then fails on the data. */
static const char *const BASE = "data: {train_batch_size: 8}\n"
                                "actor_rollout_ref:\n"
                                "  actor: {ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 4}\n"
                                "  rollout: {n: 4}\n"
                                "algorithm: {adv_estimator: grpo}\n";

static char g_warn[1024];

static void collect(void *user, const char *msg)
{
    (void)user;
    snprintf(g_warn, sizeof g_warn, "%s", msg);
}

/* df_train_check with the overrides fails with `code`, its message holding `msg`; code 0: the
   environment's checks pass (the warning holds msg) and it fails later, on the run's files. */
static void check(const char *a, const char *b, int code, const char *msg)
{
    const char *ov[] = {a, b};
    df_config *c = NULL;
    if (df_config_load_text(df_config_schema_train(), BASE, "base.yaml", ov, b ? 2 : 1, &c))
        fail_msg("%s", df_last_error());
    g_warn[0] = 0;
    int rc = df_train_check(c, 1, collect, NULL, NULL);
    bool env_ok = code == 0;
    const char *text = env_ok ? g_warn : df_last_error();
    if (!strstr(text, msg))
        fail_msg("%s %s: \"%s\" lacks \"%s\"", a, b ? b : "", text, msg);
    if (env_ok) /* it went on to the run's files, which this config does not name */
        assert_int_not_equal(rc, DF_OK);
    else
        assert_int_equal(rc, code);
    df_config_free(c);
}

static void test_config_keys(void **state)
{
    df_exec_unload_plugins();
    check("dag.env_enable=true", NULL, DF_EINVAL, "command line: dag.env_enable needs "
                                                  "dag.environment_path");
    check("dag.environment_path=guess_number", NULL, DF_EINVAL,
          "dag.environment_path is set but dag.env_enable is false");
    check("dag.env_enable=true", "dag.environment_path=guess", DF_ENOTFOUND,
          "command line: dag.environment_path: unknown environment class 'guess' (known: grid_nav, guess_number)");
    char *bad = write_file(*state, "bad.yaml", "environment: {name: guess_number, config: {max_turns: 0}}\n");
    char ov[600];
    snprintf(ov, sizeof ov, "dag.environment_path=%s", bad);
    check("dag.env_enable=true", ov, DF_EINVAL, "config.max_turns must be an integer in [1, 1000]");
    free(bad);
    check("dag.env_enable=true", "dag.environment_path=guess_number", 0, ""); /* no warning: the rollout runs it */
    assert_string_equal(g_warn, "");
    /* a plugin ref is read from its file: no plugin code runs, nothing is registered */
    check("dag.env_enable=true", "dag.environment_path=" REF, 0, "");
    const df_env *e = NULL;
    assert_int_equal(df_env_class_lookup(REF, &e), DF_ENOTFOUND);
    check("dag.env_enable=true", "dag.environment_path=" DF_PLUGIN_DIR "/libnone.so:env", DF_ENOTFOUND,
          "dag.environment_path: plugin '" DF_PLUGIN_DIR "/libnone.so' (ref '" DF_PLUGIN_DIR "/libnone.so:env'): no such file");
}

static int setup(void **state) { return df_test_mkdtemp(state); }
static int teardown(void **state) { return df_test_rmtree(state); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_plugin_env, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_keys, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
