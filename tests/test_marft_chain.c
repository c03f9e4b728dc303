/* distflow/marft.h: per-agent column names, train_cycle, siiRL's template syntax as Jinja, and
 * the chained multi-agent prompts: two turns of siiRL's own MARFT workflow (its reasoner and
 * actor templates, read from the workflow file) whose every prompt equals the templates applied
 * by hand (string substitution and ChatML written out here). */
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
#include "distflow/marft.h"
#include "distflow/tokenizer.h"

#define MARFT DF_SOURCE_DIR "/tests/fixtures/siirl_workflows/2025-09-11_marft_workflow_marft.yaml"
/* its tokenizer_config.json holds a ChatML template */
#define TOKENIZER DF_SOURCE_DIR "/tests/golden/rl_step"

static void test_columns(void **state)
{
    (void)state;
    char name[64];
    assert_int_equal(df_marft_column(1, "token_level_rewards", name, sizeof name), 0);
    assert_string_equal(name, "agent_group_1_token_level_rewards");
    int g = -1;
    const char *col = NULL;
    assert_true(df_marft_column_split(name, &g, &col));
    assert_int_equal(g, 1);
    assert_string_equal(col, "token_level_rewards");
    assert_true(df_marft_column_split("agent_group_12_values", &g, NULL) && g == 12);
    assert_true(df_marft_column_split("agent_group_0_x", &g, &col) && g == 0 && !strcmp(col, "x"));
    const char *bad[] = {"values", "agent_group__x", "agent_group_01_x", "agent_group_1_", "agent_group_1x",
                         "agent_group_-1_x", "agent_group_1234567890_x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (df_marft_column_split(bad[i], &g, &col))
            fail_msg("'%s' split", bad[i]);
    assert_int_equal(df_marft_column(-1, "values", name, sizeof name), DF_EINVAL);
    assert_int_equal(df_marft_column(0, "agent_group_1_values", name, sizeof name), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "already has an agent group prefix"));
    assert_int_equal(df_marft_column(0, "values", name, 16), DF_EINVAL);
}

/* siiRL's workflow: train_cycle 15 on both actors, two agents: agent 0 trains steps 0-14, 30-44. */
static void test_train_cycle(void **state)
{
    (void)state;
    for (int64_t s = 0; s < 60; s++) {
        bool first = (s / 15) % 2 == 0;
        assert_int_equal(df_marft_node_runs(s, 15, 2, 0), first);
        assert_int_equal(df_marft_node_runs(s, 15, 2, 1), !first);
        assert_true(df_marft_node_runs(s, 0, 2, 1));
    }
    assert_false(df_marft_node_runs(3, 15, 2, 2));
    assert_false(df_marft_node_runs(-1, 15, 2, 0));
}

static void expect_jinja(const char *tmpl, const char *want)
{
    static const char *const names[] = {"prompt", "obs"};
    char *j = NULL;
    if (df_marft_template_to_jinja(tmpl, names, 2, &j))
        fail_msg("%s: %s", tmpl, df_last_error());
    assert_string_equal(j, want);
    free(j);
}

static void expect_template_error(const char *tmpl, const char *msg)
{
    static const char *const names[] = {"prompt", "obs"};
    char *j = NULL;
    assert_int_equal(df_marft_template_to_jinja(tmpl, names, 2, &j), DF_EINVAL);
    assert_null(j);
    if (!strstr(df_last_error(), msg))
        fail_msg("'%s' lacks '%s'", df_last_error(), msg);
}

static void test_template_syntax(void **state)
{
    (void)state;
    expect_jinja("problem: ${prompt} <|im_end|>", "problem: {{ prompt }} <|im_end|>");
    expect_jinja("$prompt-$obs costs $$5", "{{ prompt }}-{{ obs }} costs $5");
    expect_jinja("{{x}} {% y %} {#z#} {a}", "{{ '{' }}{x}} {{ '{' }}% y %} {{ '{' }}#z#} {a}");
    expect_jinja("a\nb\n", "a\nb{{ '\\n' }}");
    expect_jinja("", "");
    expect_template_error("${nope}", "template column 1: unknown placeholder '${nope}' (known: ${prompt}, ${obs})");
    expect_template_error("x $5", "template column 3: invalid placeholder");
    expect_template_error("x ${prompt", "template column 3: '${' must hold a name and be closed by '}'");
    expect_template_error("${}", "template column 1");
}

/* tmpl with every "${prompt}" replaced by episode: siiRL's Template.substitute, by hand. */
static char *subst(const char *tmpl, const char *episode)
{
    static char out[16384];
    size_t n = 0;
    for (const char *p = tmpl; *p;) {
        if (!strncmp(p, "${prompt}", 9)) {
            n += (size_t)snprintf(out + n, sizeof out - n, "%s", episode);
            p += 9;
        } else {
            out[n++] = *p++;
        }
    }
    out[n] = 0;
    return out;
}

/* ChatML of [system "", user u] with the generation prompt, written out. */
static void expect_prompt(const char *got, const char *user)
{
    char want[20000];
    snprintf(want, sizeof want, "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n",
             user);
    assert_string_equal(got, want);
}

static void test_chain_siirl_marft(void **state)
{
    (void)state;
    df_tokenizer *tok = NULL;
    df_task_graph *g = NULL;
    if (df_tokenizer_load(TOKENIZER, &tok) || df_workflow_load(MARFT, &g))
        fail_msg("%s", df_last_error());
    const df_agent_options *r = df_task_graph_get_node(g, "rollout_reasoner")->agent_options;
    const df_agent_options *a = df_task_graph_get_node(g, "rollout_actor")->agent_options;
    df_marft_agent agents[2] = {
        {tok, df_agent_options_kwarg(r, false, "pre_chat_template"), df_agent_options_kwarg(r, true, "post_chat_template")},
        {tok, df_agent_options_kwarg(a, false, "pre_chat_template"), df_agent_options_kwarg(a, true, "post_chat_template")},
    };
    df_marft_chain *c = NULL;
    if (df_marft_chain_create(agents, 2, &c))
        fail_msg("%s", df_last_error());
    /* the first episode: the row's prompt as the first agent's chat template renders it */
    char *episode = strdup("<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n");
    const char *responses[2][2] = {{"Add 2 and 3.", "\\boxed{6}"}, {"Recount: 2+3.", "\\boxed{5}"}};
    const char *env[] = {" This answer is wrong.", " This answer is right."}; /* siiRL MathEnv's words */
    for (int turn = 0; turn < 2; turn++) {
        char *hand = strdup(episode); /* the episode by hand, next to the chain's */
        for (int k = 0; k < 2; k++) {
            char *prompt = NULL, *next = NULL;
            assert_int_equal(df_marft_chain_prompt(c, k, episode, NULL, &prompt), 0);
            expect_prompt(prompt, subst(agents[k].pre_chat_template, hand));
            assert_int_equal(df_marft_chain_pass(c, k, episode, responses[turn][k], &next), 0);
            size_t n = strlen(hand) + strlen(agents[k].post_chat_template) + strlen(responses[turn][k]) + 1;
            char *h2 = malloc(n);
            snprintf(h2, n, "%s%s%s", hand, agents[k].post_chat_template, responses[turn][k]);
            assert_string_equal(next, h2);
            free(hand), free(prompt), free(episode);
            hand = h2, episode = next;
        }
        /* the environment's next observation is the next turn's episode */
        size_t n = strlen(episode) + strlen(env[turn]) + 1;
        char *obs = malloc(n);
        snprintf(obs, n, "%s%s", episode, env[turn]);
        free(episode), free(hand);
        episode = obs;
    }
    assert_non_null(strstr(episode, " <|im_start|> reasoner: Add 2 and 3. <|im_start|> actor: \\boxed{6} This "
                                    "answer is wrong. <|im_start|> reasoner: Recount: 2+3."));
    free(episode);
    char *p = NULL;
    assert_int_equal(df_marft_chain_prompt(c, 2, "x", NULL, &p), DF_EINVAL);
    df_marft_chain_free(c);
    df_task_graph_free(g);
    df_tokenizer_free(tok);
}

/* ${obs}, "$$" and Jinja-looking text in a pre template; the defaults. */
static void test_chain_obs_and_literals(void **state)
{
    (void)state;
    df_tokenizer *tok = NULL;
    if (df_tokenizer_load(TOKENIZER, &tok))
        fail_msg("%s", df_last_error());
    df_marft_agent agents[2] = {{tok, "cost $$3 {{no}} [${obs}] $prompt\n", NULL}, {tok, NULL, NULL}};
    df_marft_chain *c = NULL;
    assert_int_equal(df_marft_chain_create(agents, 2, &c), 0);
    char *p = NULL;
    assert_int_equal(df_marft_chain_prompt(c, 0, "E", "seen", &p), 0);
    expect_prompt(p, "cost $3 {{no}} [seen] E\n");
    free(p);
    assert_int_equal(df_marft_chain_prompt(c, 0, "E", NULL, &p), 0);
    expect_prompt(p, "cost $3 {{no}} [] E\n");
    free(p);
    assert_int_equal(df_marft_chain_prompt(c, 1, "E {% x %}", NULL, &p), 0); /* default: ${prompt} */
    expect_prompt(p, "E {% x %}");
    free(p);
    assert_int_equal(df_marft_chain_pass(c, 1, "E", "r", &p), 0);
    assert_string_equal(p, "Er");
    free(p);
    df_marft_chain_free(c);
    agents[1].pre_chat_template = "${answer}";
    assert_int_equal(df_marft_chain_create(agents, 2, &c), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "agent 1 pre_chat_template: template column 1: unknown placeholder"));
    df_tokenizer_free(tok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_columns),
        cmocka_unit_test(test_train_cycle),
        cmocka_unit_test(test_template_syntax),
        cmocka_unit_test(test_chain_siirl_marft),
        cmocka_unit_test(test_chain_obs_and_literals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
