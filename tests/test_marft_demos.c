/*
 * test_marft_demos.c — the data path of `make demo ALGO=marft` (docs/demo.md, "ALGO=marft";
 * distflow/marft_demos.h): the planner's demonstration taken from a worked solution and every
 * malformed solution refused; one problem's planner and solver prompts written out by hand for
 * the demo's workflow; `distflow data marft-demos` writes, row for row, the prompts that
 * df_marft_chain builds from the workflow's templates (the chain the rollout runs), the bare
 * answers it was asked for, and fails on bare-answer input and on a workflow without two agents;
 * and examples/demo/sft_marft.yaml's chat template makes SFT encode each prompt into exactly the
 * tokens the rollout gives the agent.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "distflow/dag.h"
#include "distflow/marft_demos.h"
#include "testutil.h"
#include "util/fsutil.h"
#include "workers/common/prompts.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define WORKFLOW DF_SOURCE_DIR "/examples/demo/marft_workflow.yaml"
#define TASK "--min-steps 2 --max-steps 3 --max-operand 9 --max-value 30" /* examples/demo/task.args */
#define RAW_TEMPLATE "{{ messages[0]['content'] }}"

static void test_plan(void **state)
{
    (void)state;
    char *plan;
    int64_t n = 0;
    assert_int_equal(df_marft_demo_plan("12 + 7 = 19\n19 - 5 = 14\n14 * 2 = 28\n#### 28", &plan, &n), 0);
    assert_string_equal(plan, "12 + 7, then - 5, then * 2");
    assert_int_equal(n, 28);
    free(plan);
    assert_int_equal(df_marft_demo_plan("3 * 3 = 9\n#### 9\n", &plan, NULL), 0);
    assert_string_equal(plan, "3 * 3");
    free(plan);
    const char *bad[][2] = {
        {"The answer is 28.", "line 1"},                       /* a bare answer: nothing to plan */
        {"#### 28", "line 1"},                                 /* no operation line */
        {"12 + 7 = 19\n18 - 5 = 13\n#### 13", "value before"}, /* the chain breaks */
        {"12 + 7 = 20\n#### 20", "line 1"},                    /* wrong arithmetic */
        {"12 + 7 = 19\n19 - 5 = 14", "no final"},              /* no "#### N" */
        {"12 + 7 = 19\n#### 18", "last line's result"},        /* "#### N" disagrees */
        {"12 + 7 = 19\n#### 19\nmore", "after the final"},     /* text after it */
        {"12 / 2 = 6\n#### 6", "line 1"},                      /* not + - * */
        {"12 + 7 = 19 \n#### 19", "line 1"},                   /* trailing space */
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        plan = (char *)"unset";
        assert_int_equal(df_marft_demo_plan(bad[k][0], &plan, NULL), DF_EINVAL);
        assert_null(plan);
        if (!strstr(df_last_error(), bad[k][1]))
            fail_msg("'%s': error '%s' does not mention '%s'", bad[k][0], df_last_error(), bad[k][1]);
    }
}

/* The demo workflow's rollout nodes of agent groups 0 and 1. */
static void rollout_nodes(const df_task_graph *g, const df_node *nodes[2])
{
    nodes[0] = nodes[1] = NULL;
    for (int i = 0; i < df_task_graph_num_nodes(g); i++) {
        const df_node *nd = df_task_graph_node_at(g, i);
        if (nd->node_role == DF_ROLE_ROLLOUT) {
            assert_in_range(nd->agent_group, 0, 1);
            nodes[nd->agent_group] = nd;
        }
    }
    assert_non_null(nodes[0]);
    assert_non_null(nodes[1]);
}

/* df_marft_chain of the demo workflow's templates, on tok. */
static df_marft_chain *demo_chain(const df_tokenizer *tok)
{
    df_task_graph *g = NULL;
    if (df_workflow_load(WORKFLOW, &g))
        fail_msg("%s", df_last_error());
    const df_node *nodes[2];
    rollout_nodes(g, nodes);
    df_marft_agent a[2];
    for (int k = 0; k < 2; k++)
        a[k] =
            (df_marft_agent){tok, df_agent_options_kwarg(nodes[k]->agent_options, false, "pre_chat_template"),
                             df_agent_options_kwarg(nodes[k]->agent_options, true, "post_chat_template")};
    df_marft_chain *c = NULL;
    assert_int_equal(df_marft_chain_create(a, 2, &c), 0);
    df_task_graph_free(g);
    return c;
}

/* `distflow data synth` (the demo's task, n problems, bare-answer share `bare`) into dir/train.jsonl, and a
   tokenizer trained on it into dir/tok. */
static void make_data(const char *dir, int n, double bare)
{
    char cmd[2048], out[4096];
    snprintf(cmd, sizeof cmd,
             "%s/distflow data synth --out %s/train.jsonl --seed 1 " TASK " --bare-answers %g --n %d 2>&1 && "
             "%s/distflow data tokenizer --in %s/train.jsonl --vocab-size 400 --out %s/tok 2>&1",
             DF_BINARY_DIR, dir, bare, n, DF_BINARY_DIR, dir, dir);
    if (df_test_command(cmd, out, sizeof out))
        fail_msg("%s\n%s", cmd, out);
}

static df_tokenizer *load_tok(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tok", dir);
    df_tokenizer *t = NULL;
    if (df_tokenizer_load(path, &t))
        fail_msg("%s: %s", path, df_last_error());
    return t;
}

static void test_one_problem_by_hand(void **state)
{
    const char *dir = *state;
    make_data(dir, 20, 0);
    df_tokenizer *tok = load_tok(dir);
    df_marft_chain *c = demo_chain(tok);
    const char *ep =
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
        "Mia has 12 apples. She buys 7 more. She gives away 5. How many apples does Mia have now?"
        "<|im_end|>\n<|im_start|>assistant\n";
    df_marft_demo d;
    assert_int_equal(df_marft_demo_make(c, ep, "12 + 7 = 19\n19 - 5 = 14\n#### 14", NULL, &d), 0);
    /* siiRL's process.py by hand: an empty system message, the pre template around the episode as
       the user's, the generation prompt; the solver's episode has the planner's post template and plan */
    const char *head = "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n",
               *tail = "<|im_end|>\n<|im_start|>assistant\n";
    char want[2048];
    snprintf(want, sizeof want, "%sPlanner. %s%s", head, ep, tail);
    assert_string_equal(d.prompt[0], want);
    snprintf(want, sizeof want, "%sSolver. %sPlan: 12 + 7, then - 5%s", head, ep, tail);
    assert_string_equal(d.prompt[1], want);
    assert_string_equal(d.response[0], "12 + 7, then - 5");
    assert_string_equal(d.response[1], "12 + 7 = 19\n19 - 5 = 14\n#### 14");
    assert_int_equal(d.answer, 14);
    df_marft_demo_free(&d);
    /* a bare answer: the format's "{answer}"s replaced, the prompts unchanged */
    assert_int_equal(
        df_marft_demo_make(c, ep, "12 + 7 = 19\n19 - 5 = 14\n#### 14", "{answer}: {answer}!", &d), 0);
    assert_string_equal(d.response[1], "14: 14!");
    assert_string_equal(d.prompt[1] + strlen(head), want + strlen(head));
    df_marft_demo_free(&d);
    /* a malformed solution leaves nothing behind */
    assert_int_equal(df_marft_demo_make(c, ep, "The answer is 14.", NULL, &d), DF_EINVAL);
    assert_null(d.prompt[0]);
    assert_null(d.response[0]);
    df_marft_chain_free(c);
    df_tokenizer_free(tok);
}

/* `distflow data marft-demos` with extra options into dir/demos.jsonl: its exit status, output in out. */
static int marft_demos(const char *dir, const char *workflow, const char *opts, char *out, size_t cap)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s/distflow data marft-demos --workflow %s --in %s/train.jsonl --out %s/demos.jsonl "
             "--tokenizer %s/tok "
             "%s 2>&1",
             DF_BINARY_DIR, workflow, dir, dir, dir, opts);
    return df_test_command(cmd, out, cap);
}

static json_t *read_rows(const char *dir, const char *name)
{
    char path[1024], *text;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(df_read_file(path, &text, NULL), 0);
    json_t *rows = json_array();
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        json_t *r = json_loads(line, 0, NULL);
        assert_non_null(r);
        json_array_append_new(rows, r);
    }
    free(text);
    return rows;
}

static const char *str(json_t *row, const char *a, const char *b)
{
    json_t *v = json_object_get(row, a);
    return json_string_value(b ? json_object_get(v, b) : v);
}

static void test_cli_rows_equal_chain(void **state)
{
    const char *dir = *state;
    enum { N = 200 };
    make_data(dir, N, 0);
    char out[4096];
    if (marft_demos(dir, WORKFLOW, "--bare-answers 0.5 --seed 3", out, sizeof out))
        fail_msg("%s", out);
    df_tokenizer *tok = load_tok(dir);
    df_marft_chain *c = demo_chain(tok);
    json_t *rows = read_rows(dir, "demos.jsonl"), *train = read_rows(dir, "train.jsonl");
    assert_int_equal(json_array_size(rows), 2 * N);
    int n_bare = 0;
    for (size_t i = 0; i < N; i++) {
        json_t *p = json_array_get(rows, 2 * i), *s = json_array_get(rows, 2 * i + 1),
               *t = json_array_get(train, i);
        /* the chain the rollout runs, from the row's prompt as the chat template renders it */
        df_chat_message m = {"user", json_string_value(json_object_get(
                                         json_array_get(json_object_get(t, "prompt"), 0), "content"))};
        char *ep, *pp, *next, *sp;
        assert_int_equal(df_tokenizer_apply_chat_template(tok, &m, 1, true, &ep), 0);
        assert_int_equal(df_marft_chain_prompt(c, 0, ep, NULL, &pp), 0);
        assert_string_equal(str(json_array_get(json_object_get(p, "prompt"), 0), "content", NULL), pp);
        assert_int_equal(df_marft_chain_pass(c, 0, ep, str(p, "response", NULL), &next), 0);
        assert_int_equal(df_marft_chain_prompt(c, 1, next, NULL, &sp), 0);
        assert_string_equal(str(json_array_get(json_object_get(s, "prompt"), 0), "content", NULL), sp);
        /* the columns: the row's reward, each agent named; a bare answer or the worked solution */
        const char *gt = str(t, "reward_model", "ground_truth");
        assert_string_equal(str(s, "reward_model", "ground_truth"), gt);
        assert_string_equal(str(p, "extra_info", "agent"), "rollout_planner");
        assert_string_equal(str(s, "extra_info", "agent"), "rollout_solver");
        bool bare = json_is_true(json_object_get(json_object_get(s, "extra_info"), "bare"));
        char want[64];
        snprintf(want, sizeof want, "The answer is %s.", gt);
        if (bare)
            assert_string_equal(str(s, "response", NULL), want);
        else
            assert_string_equal(str(s, "response", NULL), str(t, "extra_info", "answer"));
        n_bare += bare;
        free(ep), free(pp), free(next), free(sp);
    }
    assert_in_range(n_bare, N / 2 - 30, N / 2 + 30);
    json_decref(rows);
    json_decref(train);
    /* --agent 1: the solver's rows alone (what `distflow eval` reads for the solver) */
    if (marft_demos(dir, WORKFLOW, "--agent 1", out, sizeof out))
        fail_msg("%s", out);
    rows = read_rows(dir, "demos.jsonl");
    assert_int_equal(json_array_size(rows), N);
    assert_string_equal(str(json_object_get(json_array_get(rows, 7), "extra_info"), "agent", NULL),
                        "rollout_solver");
    json_decref(rows);
    df_marft_chain_free(c);
    df_tokenizer_free(tok);
}

static void test_cli_refuses(void **state)
{
    const char *dir = *state;
    char out[4096];
    make_data(dir, 40, 1); /* every demonstration a bare answer: no operations to plan */
    assert_int_equal(marft_demos(dir, WORKFLOW, "", out, sizeof out), 1);
    if (!strstr(out, "train.jsonl:1") || !strstr(out, "The answer is"))
        fail_msg("%s", out);
    char path[1024];
    snprintf(path, sizeof path, "%s/demos.jsonl", dir);
    assert_false(df_file_exists(path));
    make_data(dir, 40, 0);
    /* a single-agent workflow: one rollout node */
    assert_int_equal(marft_demos(dir, DF_SOURCE_DIR "/examples/workflows/grpo.yaml", "", out, sizeof out), 1);
    if (!strstr(out, "1 rollout node(s)"))
        fail_msg("%s", out);
    assert_int_equal(marft_demos(dir, WORKFLOW, "--bare-answers 1.5", out, sizeof out), 2);
    assert_int_equal(marft_demos(dir, WORKFLOW, "--agent 2", out, sizeof out), 2);
    /* a bare-answer text with no bare answers drawn, or without the number's place; a seed of no
       draw; bare answers for the planner's rows alone: settings without effect */
    static const char *const refused[][2] = {
        {"--bare-answer 'Answer: {answer}'", "--bare-answer is the text of the bare answers: it needs --bare-answers > 0"},
        {"--seed 3", "--seed seeds the draw of bare answers: it needs --bare-answers > 0"},
        {"--agent 0 --bare-answers 0.5", "--agent 0 writes the planner's rows, which --bare-answers does not change"},
        {"--bare-answers 0.5 --bare-answer 'Done.'", "--bare-answer \"Done.\" has no {answer}"}};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        assert_int_equal(marft_demos(dir, WORKFLOW, refused[i][0], out, sizeof out), 2);
        if (!strstr(out, refused[i][1]))
            fail_msg("%s: %s", refused[i][0], out);
    }
    /* an input without rows */
    char in[1024];
    snprintf(in, sizeof in, "%s/train.jsonl", dir);
    assert_int_equal(df_write_file_atomic(in, "\n", 1), 0);
    assert_int_equal(marft_demos(dir, WORKFLOW, "", out, sizeof out), 1);
    if (!strstr(out, "train.jsonl: no rows"))
        fail_msg("%s", out);
    assert_false(df_file_exists(path));
}

/* SFT reads each prompt through data.chat_template (examples/demo/sft_marft.yaml's) and encodes it as RL
   prompts are (df_prompts_encode): the ids must be the chain prompt's own, and the first episode must come
   back from the dataloader's ids unchanged. */
static void test_sft_tokens_equal_rollout_tokens(void **state)
{
    const char *dir = *state;
    make_data(dir, 30, 0);
    char out[4096], *yaml;
    if (marft_demos(dir, WORKFLOW, "--bare-answers 0.5", out, sizeof out))
        fail_msg("%s", out);
    assert_int_equal(df_read_file(DF_SOURCE_DIR "/examples/demo/sft_marft.yaml", &yaml, NULL), 0);
    assert_non_null(strstr(yaml, "chat_template: \"" RAW_TEMPLATE "\"\n"));
    free(yaml);
    df_tokenizer *tok = load_tok(dir), *raw = load_tok(dir);
    assert_int_equal(df_tokenizer_set_chat_template(raw, RAW_TEMPLATE), 0);
    char path[1024];
    snprintf(path, sizeof path, "%s/demos.jsonl", dir);
    const char *paths[] = {path};
    df_dataset *ds;
    assert_int_equal(df_dataset_load(paths, 1, &(df_dataset_opts){.reward_optional = true}, &ds), 0);
    df_prompt_cache pc;
    assert_int_equal(df_prompts_encode(ds, raw, &pc), 0);
    assert_int_equal(pc.n, 60);
    for (int64_t i = 0; i < pc.n; i++) {
        const char *prompt;
        assert_int_equal(df_dataset_message(ds, i, 0, NULL, &prompt), 0);
        int32_t *ids;
        int64_t n;
        assert_int_equal(df_tokenizer_encode(tok, prompt, false, &ids, &n), 0);
        assert_int_equal(pc.offsets[i + 1] - pc.offsets[i], n);
        assert_memory_equal(pc.tokens + pc.offsets[i], ids, (size_t)n * sizeof *ids);
        /* the special-token strings are single tokens, not spelled out */
        assert_true(n < (int64_t)strlen(prompt) / 2);
        char *back;
        assert_int_equal(df_tokenizer_decode(tok, ids, n, false, &back), 0);
        assert_string_equal(back, prompt);
        free(back), free(ids);
    }
    df_prompt_cache_free(&pc);
    df_dataset_free(ds);
    df_tokenizer_free(raw);
    df_tokenizer_free(tok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan),
        cmocka_unit_test_setup_teardown(test_one_problem_by_hand, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_cli_rows_equal_chain, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_cli_refuses, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_sft_tokens_equal_rollout_tokens, df_test_mkdtemp,
                                        df_test_rmtree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
