/* distflow/marft_env.h: the environment of a chained multi-agent episode. The built-in MathEnv
 * (siiRL's math_env.py) on GSM8K-style "#### 42", MATH "\boxed{}" and synthetic arithmetic rows,
 * right and wrong, with its observations written out by hand; that only the last agent's own
 * response is scored; how an env_path entry names a class (siiRL's literal entry, read from its
 * workflow file, is the built-in; other Python classes are refused); plugin classes loaded from
 * build/plugins/test/libmarft_env.so (tests/plugins/marft_env.c), and their mistakes refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distflow/dag.h"
#include "distflow/marft_env.h"
#include "distflow/reward.h"

#define MARFT DF_SOURCE_DIR "/tests/fixtures/siirl_workflows/2025-09-11_marft_workflow_marft.yaml"
#define LIB DF_BINARY_DIR "/plugins/test/libmarft_env.so"

/* A two-agent turn: a reasoner, then an actor answering. */
typedef struct {
    const char *episodes[2], *responses[2];
    df_marft_env_turn turn;
} two_agents;

static void make_turn(two_agents *t, const char *source, const char *reasoner, const char *actor,
                      const char *truth)
{
    static char ep0[512], ep1[1024];
    snprintf(ep0, sizeof ep0, "Q: what is 6 x 7? reasoner: %s", reasoner);
    snprintf(ep1, sizeof ep1, "%s actor: %s", ep0, actor);
    t->episodes[0] = ep0, t->episodes[1] = ep1;
    t->responses[0] = reasoner, t->responses[1] = actor;
    t->turn = (df_marft_env_turn){.n_agents = 2,
                                  .episodes = t->episodes,
                                  .responses = t->responses,
                                  .ground_truth = truth,
                                  .data_source = source};
}

/* MathEnv on one turn: its score, stop, and both observations = episode + siiRL's sentence. */
static void expect_math(const char *source, const char *actor, const char *truth, double score)
{
    two_agents t;
    make_turn(&t, source, "multiply the two numbers", actor, truth);
    df_marft_env_result r;
    if (df_marft_env_step(&df_marft_env_math, &t.turn, &r))
        fail_msg("%s", df_last_error());
    const char *tail = score == 1.0 ? " This answer is right." : " This answer is wrong.";
    assert_true(r.score == score);
    assert_int_equal(r.stop, score == 1.0);
    assert_int_equal(r.n_obs, 2);
    for (int a = 0; a < 2; a++) {
        char want[2048];
        snprintf(want, sizeof want, "%s%s", t.episodes[a], tail);
        assert_string_equal(r.obs[a], want);
    }
    df_marft_env_result_clear(&r);
    assert_null(r.obs);
    assert_int_equal(r.n_obs, 0);
}

static void test_math_env_scores(void **state)
{
    (void)state;
    /* GSM8K (verl's strict "#### <number>") */
    expect_math("openai/gsm8k", "6 x 7 = 42\n#### 42", "42", 1.0);
    expect_math("openai/gsm8k", "6 x 7 = 41\n#### 41", "42", 0.0);
    expect_math("openai/gsm8k", "the answer is 42", "42", 0.0); /* strict: no "####" */
    /* MATH (\boxed{}), by name and as the default of a row without a data source (siiRL's scorer) */
    expect_math("HuggingFaceH4/MATH-500", "so it is $\\boxed{\\frac{1}{2}}$", "\\frac{1}{2}", 1.0);
    expect_math("lighteval/MATH", "so it is $\\boxed{\\frac{1}{3}}$", "\\frac{1}{2}", 0.0);
    expect_math(NULL, "thus \\boxed{42}", "42", 1.0);
    expect_math("", "thus \\boxed{41}", "42", 0.0);
    expect_math(NULL, "#### 42", "42", 0.0); /* the math scorer reads boxes only */
    /* the synthetic arithmetic task */
    expect_math("synthetic/arithmetic", "7 * 6 = 42 #### 42", "42", 1.0);
    expect_math("synthetic/arithmetic", "#### 43", "42", 0.0);
    /* math_dapo's +1 / -1: right is a score of exactly 1 */
    expect_math("math_dapo", "Answer: 42", "42", 1.0);
    expect_math("math_dapo", "Answer: 41", "42", -1.0);
    /* the job's reward_kwargs reach the scorer: a found but wrong answer earns format_score, and is
       still wrong (siiRL: right only at a score of 1) */
    df_reward_kwargs kw = df_reward_kwargs_default();
    kw.format_score = 0.1;
    two_agents t;
    make_turn(&t, "openai/gsm8k", "x", "#### 41", "42");
    t.turn.reward_kwargs = &kw;
    df_marft_env_result r;
    assert_int_equal(df_marft_env_step(&df_marft_env_math, &t.turn, &r), 0);
    assert_true(r.score == 0.1);
    assert_false(r.stop);
    assert_non_null(strstr(r.obs[1], "#### 41 This answer is wrong."));
    df_marft_env_result_clear(&r);
}

/* siiRL scores the last agent's whole episode text; distflow its own response: the reasoner's right
   answer in the episode does not make the actor's wrong one right. */
static void test_math_env_last_agent_only(void **state)
{
    (void)state;
    two_agents t;
    make_turn(&t, "openai/gsm8k", "it is 42\n#### 42", "I think 40\n#### 40", "42");
    assert_non_null(strstr(t.episodes[1], "#### 42"));
    df_marft_env_result r;
    assert_int_equal(df_marft_env_step(&df_marft_env_math, &t.turn, &r), 0);
    assert_true(r.score == 0.0);
    assert_false(r.stop);
    df_marft_env_result_clear(&r);
    /* and the other way round: the actor's answer alone counts */
    make_turn(&t, "openai/gsm8k", "it is 40\n#### 40", "#### 42", "42");
    assert_int_equal(df_marft_env_step(&df_marft_env_math, &t.turn, &r), 0);
    assert_true(r.score == 1.0 && r.stop);
    df_marft_env_result_clear(&r);
    /* one agent alone: its episode is the one observation */
    const char *ep[] = {"E #### 42"}, *resp[] = {"#### 42"};
    df_marft_env_turn one = {.n_agents = 1,
                             .episodes = ep,
                             .responses = resp,
                             .ground_truth = "42",
                             .data_source = "openai/gsm8k"};
    assert_int_equal(df_marft_env_step(&df_marft_env_math, &one, &r), 0);
    assert_int_equal(r.n_obs, 1);
    assert_string_equal(r.obs[0], "E #### 42 This answer is right.");
    df_marft_env_result_clear(&r);
}

static void test_math_env_errors(void **state)
{
    (void)state;
    two_agents t;
    df_marft_env_result r;
    make_turn(&t, "openai/gsm8k", "x", "#### 42", NULL);
    assert_int_equal(df_marft_env_step(&df_marft_env_math, &t.turn, &r), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "MathEnv: the row has no reward_model.ground_truth"));
    assert_null(r.obs);
    make_turn(&t, "no/such_source", "x", "#### 42", "42");
    assert_int_equal(df_marft_env_step(&df_marft_env_math, &t.turn, &r), DF_ENOTFOUND);
    assert_non_null(strstr(df_last_error(), "no/such_source"));
    make_turn(&t, "openai/gsm8k", "x", "#### 42", "42");
    t.turn.n_agents = 0;
    assert_int_equal(df_marft_env_step(&df_marft_env_math, &t.turn, &r), DF_EINVAL);
    t.turn.n_agents = 2;
    t.responses[1] = NULL;
    assert_int_equal(df_marft_env_step(&df_marft_env_math, &t.turn, &r), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "agent 1 of 2 has no response text"));
    df_marft_env_result_clear(NULL);
}

/* The entry siiRL's workflow file writes (read from it) is the built-in; so is any directory before it. */
static void test_resolve_python_entries(void **state)
{
    (void)state;
    df_task_graph *g = NULL;
    if (df_workflow_load(MARFT, &g))
        fail_msg("%s", df_last_error());
    const df_agent_options *o = df_task_graph_get_node(g, "rollout_actor")->agent_options;
    assert_int_equal(o->n_env_path, 1);
    const df_marft_env_class *cls = NULL;
    assert_int_equal(df_marft_env_resolve(o->env_path[0], &cls), 0);
    assert_ptr_equal(cls, &df_marft_env_math);
    assert_string_equal(cls->name, "MathEnv");
    assert_int_equal(df_marft_env_check(o->env_path[0]), 0);
    df_task_graph_free(g);
    assert_int_equal(df_marft_env_resolve("/opt/x/math_env.py:MathEnv", &cls), 0);
    assert_ptr_equal(cls, &df_marft_env_math);
    assert_int_equal(df_marft_env_resolve("math_env.py:MathEnv", &cls), 0);
    assert_ptr_equal(cls, &df_marft_env_math);
    /* other Python classes: refused, naming what exists */
    const char *py[] = {"foo.py:Other", "examples/experimental/marft/config/code_env.py:CodeEnv",
                        "config/math_env.py:Other", "config/my_math_env.py:MathEnv"};
    for (size_t i = 0; i < sizeof py / sizeof *py; i++) {
        assert_int_equal(df_marft_env_resolve(py[i], &cls), DF_EUNSUPPORTED);
        assert_null(cls);
        char want[256];
        snprintf(want, sizeof want, "env_path entry '%s': a Python class distflow does not have", py[i]);
        assert_non_null(strstr(df_last_error(), want));
        assert_non_null(strstr(df_last_error(), "math_env.py:MathEnv' (siiRL's MathEnv) or a plugin "
                                                "'path/to/libx.so:symbol'"));
        assert_int_equal(df_marft_env_check(py[i]), DF_EUNSUPPORTED);
    }
    const char *bad[] = {"", "MathEnv", "math_env.py:", ":MathEnv", "module.mod:Class"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(df_marft_env_resolve(bad[i], &cls), DF_EINVAL);
        assert_non_null(strstr(df_last_error(), "env_path entry '"));
    }
    assert_int_equal(df_marft_env_resolve(NULL, &cls), DF_EINVAL);
    assert_int_equal(df_plugin_count(), 0);
}

/* A plugin class: checked from its file without loading, then loaded and stepped. */
static void test_resolve_plugin(void **state)
{
    (void)state;
    assert_int_equal(df_marft_env_check(LIB ":marft_env_length"), 0);
    assert_int_equal(df_plugin_count(), 0); /* only its file was read */
    const df_marft_env_class *cls = NULL;
    if (df_marft_env_resolve(LIB ":marft_env_length", &cls))
        fail_msg("%s", df_last_error());
    assert_int_equal(df_plugin_count(), 1);
    assert_string_equal(cls->name, "length");
    two_agents t;
    make_turn(&t, NULL, "abc", "hello!", NULL);
    df_marft_env_result r;
    assert_int_equal(df_marft_env_step(cls, &t.turn, &r), 0);
    assert_int_equal(r.n_obs, 2);
    assert_string_equal(r.obs[0], "0|abc");
    assert_string_equal(r.obs[1], "1|hello!");
    assert_true(r.score == 6.0 && r.stop);
    df_marft_env_result_clear(&r);

    /* its mistakes: too few observations (caught by the checked step), no step, not an object */
    assert_int_equal(df_marft_env_resolve(LIB ":marft_env_short", &cls), 0);
    assert_int_equal(df_marft_env_step(cls, &t.turn, &r), DF_EINVAL);
    assert_non_null(
        strstr(df_last_error(), "MARFT environment short: step gave 1 observations for 2 agents"));
    assert_null(r.obs);
    assert_int_equal(df_marft_env_resolve(LIB ":marft_env_no_step", &cls), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "the plugin's df_marft_env_class has no step function"));
    assert_null(cls);
    assert_int_equal(df_marft_env_check(LIB ":marft_env_fn"), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "env_path entry '" LIB ":marft_env_fn'"));
    assert_int_equal(df_marft_env_resolve(LIB ":nope", &cls), DF_ENOTFOUND);
    assert_int_equal(df_marft_env_check(DF_BINARY_DIR "/plugins/test/libnone.so:env"), DF_ENOTFOUND);
    df_exec_unload_plugins();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_math_env_scores), cmocka_unit_test(test_math_env_last_agent_only),
        cmocka_unit_test(test_math_env_errors), cmocka_unit_test(test_resolve_python_entries),
        cmocka_unit_test(test_resolve_plugin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
