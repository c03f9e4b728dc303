/*
 * distflow/marft.h — multi-agent (MARFT) pieces beside the DAG: per-agent column names, the
 * alternating training of agents (train_cycle), and the chained prompts of siiRL's
 * MultiAgentLoop (siirl/execution/rollout_flow/multi_agent/multiagent_generate.py, with the
 * pre_process / post_process of examples/experimental/marft/config/process.py). The advantage
 * estimator (gae_marft) and share_reward_in_agent are in distflow/algo.h; the agent groups of a
 * workflow in distflow/dag.h. docs/multi_agent.md has what runs and what is left.
 *
 * A chained episode, as siiRL runs it: agents 0 .. A-1 take turns on one text, the episode.
 *   for each turn: for each agent a:
 *       prompt_a = the chat template of agent a's tokenizer applied to
 *                  [{"system", ""}, {"user", pre_a with ${prompt} := episode}] + generation prompt
 *       response = agent a's model on prompt_a
 *       episode  = episode + post_a + response
 *   after the last agent an environment (siiRL env_path, e.g. its MathEnv) may score the turn and
 *   give the next episode text (MathEnv: the episode + " This answer is right." / "wrong.").
 * The first episode is the data row's prompt as the first agent's chat template renders it
 * (siiRL decodes the dataloader's templated ids).
 */
#ifndef DISTFLOW_MARFT_H
#define DISTFLOW_MARFT_H

#include "distflow/common.h"
#include "distflow/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- per-agent columns (siiRL: agent_group_{g}_<column>) --------------------------------- */

/**
 * The name of agent group g's copy of `column` in a batch: "agent_group_<g>_<column>", as
 * siiRL's MultiAgentLoop and DAG worker prefix every agent's columns. The DAG worker keeps
 * every agent's prefixed in the batch and shows a node its own group's without the prefix while
 * it runs (src/workers/dag/marft_view.c), so no column is two agents'. Written into out[cap]. Errors: DF_EINVAL for g < 0, an empty or
 * NULL column, a column that already has an agent prefix, a name longer than cap - 1.
 */
DF_API int df_marft_column(int g, const char *column, char *out, size_t cap);

/**
 * The inverse of df_marft_column: true when `name` is "agent_group_<g>_<column>" with a
 * decimal g (no sign, no leading zero but "0") and a non-empty column; then *g and *column
 * (a pointer into name) are set (either may be NULL). False otherwise, nothing set.
 */
DF_API bool df_marft_column_split(const char *name, int *g, const char **column);

/* ---- train_cycle ------------------------------------------------------------------------- */

/**
 * Whether a node of agent group `g` with agent_options.train_cycle runs at global step `step`
 * in a graph of n_groups agent groups (siiRL DAGWorker's node loop): with train_cycle > 0,
 * only when (step / train_cycle) mod n_groups == g, so the agents train in turns of
 * train_cycle steps; always when train_cycle is 0 (unset). A node that does not run passes
 * its batch on. False for n_groups < 1, g outside [0, n_groups), step or train_cycle < 0.
 */
DF_API bool df_marft_node_runs(int64_t step, int64_t train_cycle, int n_groups, int g);

/* ---- chained prompts (siiRL MultiAgentLoop with process.py) ------------------------------ */

/**
 * siiRL's pre_chat_template syntax (Python string.Template) as a distflow Jinja template
 * (distflow/jinja.h): "${name}" and "$name" (name: [A-Za-z_][A-Za-z0-9_]*) become
 * "{{ name }}", "$$" becomes "$"; the literal text is kept as it is (a "{" that would open a
 * Jinja tag is written as a string expression, and so is a final newline, which the Jinja
 * renderer would drop). names[n_names]: the placeholders the template may use.
 * *jinja: malloc'd. Errors (DF_EINVAL, with the 1-based column): a name not in names (Python
 * raises KeyError), "$" followed by anything else (ValueError), an unclosed "${"; DF_ENOMEM.
 */
DF_API int df_marft_template_to_jinja(const char *tmpl, const char *const *names, int n_names, char **jinja);

/** One agent's part of a chained episode (a workflow node's agent_options). */
typedef struct df_marft_agent {
    const df_tokenizer *tokenizer; /**< the agent's own, whose chat template wraps its prompt; borrowed */
    const char *pre_chat_template; /**< pre_process_kwargs.pre_chat_template, siiRL's syntax above, with
                                        placeholders ${prompt} (the episode) and ${obs} (the
                                        environment's observation for this agent, "" when none);
                                        NULL or "" means "${prompt}" */
    const char *post_chat_template; /**< post_process_kwargs.post_chat_template: put between the
                                         episode and the agent's response; NULL means "" */
} df_marft_agent;

typedef struct df_marft_chain df_marft_chain;

/**
 * A chain of n_agents agents in turn order: each pre_chat_template converted
 * (df_marft_template_to_jinja with names prompt, obs) and parsed once; the
 * tokenizers and strings are copied or borrowed as their fields say (the
 * templates are copied). Errors: DF_EINVAL for n_agents < 1, a NULL agents /
 * tokenizer, a template that does not convert or parse (naming the agent);
 * DF_ENOMEM. Free with df_marft_chain_free.
 */
DF_API int df_marft_chain_create(const df_marft_agent *agents, int n_agents, df_marft_chain **out);
DF_API void df_marft_chain_free(df_marft_chain *c);

/**
 * Agent a's prompt text for the episode so far (siiRL AgentProcess.apply_pre_process with
 * process.py's pre_process): its pre template rendered with prompt = episode and obs (NULL:
 * ""), as the user message after an empty system message, through its tokenizer's chat template
 * with the generation prompt. Encode it without adding special tokens, as siiRL does.
 * *prompt: malloc'd. Errors: DF_EINVAL for an agent outside [0, n_agents), a NULL episode,
 * invalid UTF-8, the chat template's errors (distflow/tokenizer.h); DF_ENOMEM.
 */
DF_API int df_marft_chain_prompt(const df_marft_chain *c, int agent, const char *episode, const char *obs,
                                 char **prompt);

/**
 * The episode after agent a's response (siiRL apply_post_process with process.py's
 * post_process): episode + post_chat_template + response. *next: malloc'd. Errors: DF_EINVAL
 * for an agent outside [0, n_agents), a NULL episode or response; DF_ENOMEM.
 */
DF_API int df_marft_chain_pass(const df_marft_chain *c, int agent, const char *episode, const char *response,
                               char **next);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_MARFT_H */
