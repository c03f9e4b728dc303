/* distflow data marft-demos: the planner / solver SFT rows of `make demo ALGO=marft` (marft_demos.h) */
#include "cli/cli.h"

#include "distflow/dag.h"
#include "distflow/marft_demos.h"
#include "distflow/rng.h"
#include "util/fsutil.h"
#include "util/sbuf.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD "data marft-demos"

/* The workflow's two rollout nodes, agent group 0 (the planner) and 1 (the solver), in turn order
   (siiRL chains its rollout nodes by agent group). */
static int rollout_agents(const df_task_graph *g, const char *path, const df_node *agents[2])
{
    int n = 0;
    agents[0] = agents[1] = NULL;
    for (int i = 0; i < df_task_graph_num_nodes(g); i++) {
        const df_node *nd = df_task_graph_node_at(g, i);
        if (nd->node_role != DF_ROLE_ROLLOUT)
            continue;
        n++;
        if (nd->agent_group < 0 || nd->agent_group > 1 || agents[nd->agent_group])
            return df_error(
                DF_EINVAL,
                "%s: rollout node '%s' (agent group %d): the demonstrations are for two "
                "agents, one rollout node in agent group 0 (the planner) and one in group 1 (the solver)",
                path, nd->node_id, nd->agent_group);
        agents[nd->agent_group] = nd;
    }
    if (n != 2 || !agents[0] || !agents[1])
        return df_error(DF_EINVAL,
                        "%s: %d rollout node(s); the demonstrations need two, in agent groups 0 "
                        "(the planner) and 1 (the solver)",
                        path, n);
    return DF_OK;
}

/* The chain of the two rollout nodes' pre / post chat templates, every agent on tok. */
static int make_chain(const df_node *const nodes[2], const df_tokenizer *tok, df_marft_chain **c)
{
    df_marft_agent a[2];
    for (int k = 0; k < 2; k++)
        a[k] = (df_marft_agent){
            .tokenizer = tok,
            .pre_chat_template = df_agent_options_kwarg(nodes[k]->agent_options, false, "pre_chat_template"),
            .post_chat_template =
                df_agent_options_kwarg(nodes[k]->agent_options, true, "post_chat_template")};
    return df_marft_chain_create(a, 2, c);
}

/* Append agent k's row for dataset row i as one JSON line: the verl RL columns (so `distflow eval`
   scores a solver-only file), the prompt as one user message and the demonstration as "response". */
static int put_row(df_sbuf *b, const df_dataset *ds, int64_t i, const df_node *node, int k,
                   const df_marft_demo *d, bool bare)
{
    json_t *row =
        json_pack("{s:s, s:[{s:s, s:s}], s:s, s:{s:s, s:s}, s:s, s:{s:s, s:i, s:I, s:b}}", "data_source",
                  df_dataset_data_source(ds, i), "prompt", "role", "user", "content", d->prompt[k], "ability",
                  df_dataset_ability(ds, i), "reward_model", "style", "rule", "ground_truth",
                  df_dataset_ground_truth(ds, i), "response", d->response[k], "extra_info", "agent",
                  node->node_id, "agent_group", k, "index", (json_int_t)i, "bare", bare && k == 1);
    char *line = row ? json_dumps(row, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(row);
    if (!line)
        return df_error(DF_ENOMEM, "out of memory");
    df_sbuf_puts(b, line);
    df_sbuf_put(b, "\n", 1);
    free(line);
    return DF_OK;
}

typedef struct demo_opts {
    const char *key, *bare_fmt;
    double bare;
    int64_t seed, agent;
} demo_opts;

/* Every row's demonstrations (o->agent: only that agent's, -1 both) as JSON lines in *text. */
static int make_rows(const df_dataset *ds, const df_marft_chain *c, const df_tokenizer *tok,
                     const df_node *const nodes[2], const demo_opts *o, char **text, int64_t *n_bare)
{
    df_sbuf b = {0};
    int rc = DF_OK;
    *n_bare = 0;
    for (int64_t i = 0; i < df_dataset_size(ds) && !rc; i++) {
        df_rng r;
        df_rng_seed(&r, df_rng_key((uint64_t)o->seed, (uint64_t)i, 0, 0));
        bool bare = df_rng_uniform(&r) < o->bare;
        char *episode = NULL, *solution = NULL;
        df_marft_demo d = {0};
        rc = df_marft_first_episode(ds, i, tok, &episode);
        if (!rc)
            rc = df_dataset_field(ds, i, o->key, &solution);
        if (!rc)
            rc = df_marft_demo_make(c, episode, solution, bare ? o->bare_fmt : NULL, &d);
        for (int k = 0; k < 2 && !rc; k++)
            if (o->agent < 0 || o->agent == k)
                rc = put_row(&b, ds, i, nodes[k], k, &d, bare);
        *n_bare += bare;
        df_marft_demo_free(&d);
        free(episode);
        free(solution);
        if (rc) {
            int64_t line = 0;
            const char *file = df_dataset_source(ds, i, &line);
            rc = df_error_wrap(rc, "%s:%lld", file ? file : "?", (long long)line);
        }
    }
    if (rc) {
        df_sbuf_free(&b);
        return rc;
    }
    return df_sbuf_finish(&b, text);
}

/* Load the inputs, write the rows; prints what it wrote. */
static int run(const char *workflow, const char *in, const char *out, const char *tokdir, const demo_opts *o)
{
    df_task_graph *g = NULL;
    df_tokenizer *tok = NULL;
    df_dataset *ds = NULL;
    df_marft_chain *c = NULL;
    const df_node *nodes[2];
    char *text = NULL, *made = NULL;
    int64_t n_bare = 0;
    df_dataset_opts dopt = {.reward_optional = true, .need_rows = true};
    int rc = df_workflow_load_ex(workflow, df_cli_warn, (void *)CMD, &g);
    if (!rc)
        rc = rollout_agents(g, workflow, nodes);
    if (!rc)
        rc = df_tokenizer_load(tokdir, &tok);
    if (!rc)
        rc = make_chain(nodes, tok, &c);
    if (!rc)
        rc = df_dataset_load(&in, 1, &dopt, &ds);
    if (!rc)
        rc = make_rows(ds, c, tok, nodes, o, &text, &n_bare);
    if (!rc) {
        rc = df_mkdir_parent_undoable(out, &made) || df_write_file_atomic(out, text, strlen(text));
        df_mkdir_settle(made, rc);
    }
    if (!rc)
        fprintf(stderr,
                "distflow " CMD ": %lld problems, %lld with a bare answer: wrote the rows of %s to %s\n",
                (long long)df_dataset_size(ds), (long long)(o->agent == 0 ? 0 : n_bare),
                o->agent < 0 ? "both agents" : nodes[o->agent]->node_id, out);
    free(text);
    df_marft_chain_free(c);
    df_dataset_free(ds);
    df_tokenizer_free(tok);
    df_task_graph_free(g);
    return rc;
}

int df_cmd_data_marft_demos(int argc, char **argv)
{
    const char *workflow = NULL, *in = NULL, *out = NULL, *tokdir = NULL;
    demo_opts o = {.key = "extra_info.answer", .bare_fmt = "The answer is {answer}.", .agent = -1};
    df_opt opts[] = {{"workflow", DF_OPT_PATH, &workflow,
                      "the MARFT workflow: its rollout nodes of agent groups 0 (planner) and 1 "
                      "(solver) and their pre_process_kwargs.pre_chat_template / "
                      "post_process_kwargs.post_chat_template (required)",
                      false},
                     {"in", DF_OPT_PATH, &in,
                      "synthetic rows with worked solutions (data synth --bare-answers 0) (required)", false},
                     {"out", DF_OPT_PATH, &out,
                      "output JSON lines: per problem the planner's row, then the solver's (required)",
                      false},
                     {"tokenizer", DF_OPT_PATH, &tokdir,
                      "tokenizer directory whose chat template the agents' prompts use (required)", false},
                     {"solution-key", DF_OPT_STR, &o.key,
                      "field with the worked solution (default extra_info.answer)", false},
                     {"bare-answers", DF_OPT_FLOAT, &o.bare,
                      "share of problems whose solver demonstration is a bare answer "
                      "(default 0)",
                      false},
                     {"bare-answer", DF_OPT_STR, &o.bare_fmt,
                      "with --bare-answers > 0: text of a bare answer, {answer} (which it must hold) "
                      "standing for the number (default \"The answer is {answer}.\", as data synth)",
                      false},
                     {"seed", DF_OPT_INT, &o.seed, "with --bare-answers > 0: seed of the bare-answer draw (default 0)",
                      false},
                     {"agent", DF_OPT_INT, &o.agent,
                      "write only agent 0's (planner) or 1's (solver) rows (default: both); bare answers "
                      "replace solver rows only", false},
                     {0}};
    char *pos[1];
    int n_pos, code;
    if (df_cli_parse(CMD, "--workflow W.yaml --in TRAIN.jsonl --out DEMOS.jsonl --tokenizer DIR [options]",
                     opts, argc, argv, pos, 0, &n_pos, &code))
        return code;
    static const df_opt_range ranges[] = {{"bare-answers", 0, 1}, {"agent", 0, 1}, {0}};
    if ((code = df_cli_require(CMD, opts)) || (code = df_cli_check_ranges(CMD, opts, ranges)) ||
        (code = df_cli_distinct(CMD, "out", out, "in", in)) ||
        (code = df_cli_distinct(CMD, "out", out, "workflow", workflow)))
        return code;
    if (df_cli_opt(opts, "bare-answer")->seen && o.bare == 0) { /* the text of bare answers, and none is drawn */
        fprintf(stderr, "distflow " CMD ": error: --bare-answer is the text of the bare answers: it needs "
                        "--bare-answers > 0\n");
        return 2;
    }
    if (df_cli_opt(opts, "seed")->seen && o.bare == 0) { /* the seed of a draw that does not happen */
        fprintf(stderr, "distflow " CMD ": error: --seed seeds the draw of bare answers: it needs --bare-answers > 0\n");
        return 2;
    }
    if (o.agent == 0 && o.bare > 0) { /* bare answers replace solver demonstrations only */
        fprintf(stderr, "distflow " CMD ": error: --agent 0 writes the planner's rows, which --bare-answers does not "
                        "change (it replaces solver demonstrations)\n");
        return 2;
    }
    if (!strstr(o.bare_fmt, "{answer}")) {
        fprintf(stderr, "distflow " CMD ": error: --bare-answer \"%s\" has no {answer}: every bare answer would "
                        "be the same text, whatever the problem's number\n", o.bare_fmt);
        return 2;
    }
    return run(workflow, in, out, tokdir, &o) ? df_cli_fail(CMD) : 0;
}
