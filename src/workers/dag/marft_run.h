/*
 * marft_run.h (internal) — the chained multi-agent runtime of the DAG worker (siiRL MARFT,
 * docs/multi_agent.md): a graph whose agent groups' ROLLOUT nodes follow one another at its head
 * (siiRL's MultiAgentLoop collects them so) runs one episode per sample through every agent in
 * turn, and the nodes after it each see their own group's columns.
 *
 *   marft_setup.c    which graphs are chained; the chain of prompts, the environment, train_cycle
 *   marft_rollout.c  the chained rollout (the first ROLLOUT node; the others pass the batch on),
 *                    and the validation's generation
 *   marft_view.c     per-agent columns: agent_group_<g>_<column> in the batch, unprefixed for a
 *                    node of group g while it runs
 *   marft_adv.c      the ADVANTAGE node(s): every agent's rewards, then gae_marft over all of them,
 *                    or the configured estimator per agent (all in one node, or each group's own)
 */
#ifndef DF_WORKER_DAG_MARFT_RUN_H
#define DF_WORKER_DAG_MARFT_RUN_H

#include "workers/worker_internal.h"

#include "distflow/marft.h"
#include "distflow/marft_env.h"
#include "workers/common/data_metrics.h"

typedef struct df_marft_run {
    int n_agents;
    const df_node **rollout;        /* [n_agents] each group's ROLLOUT node, in turn order */
    df_marft_chain *chain;          /* the agents' pre / post templates and tokenizers */
    const df_marft_env_class *env;  /* the environment stepped after the last agent, or NULL */
    bool rewards_with_env;          /* actor_rollout_ref.rollout.agent.rewards_with_env */
    int64_t max_turns;              /* multi_turn.max_assistant_turns (1 when unset) */
    df_node_fn adv_fn;              /* the ADVANTAGE nodes' own function, run in an agent's view */
    int n_adv;                      /* ADVANTAGE nodes: 1 computes every agent's, else each its group's */
    int view;                       /* the group whose columns are unprefixed now; -1: none */
    char (*shared)[DF_COL_NAME_MAX]; /* [n_shared] the batch's own columns when the view was entered */
    int n_shared, cap_shared;
} df_marft_run;

/**
 * When w's graph is a chained multi-agent graph, make w->marft (else leave it NULL): the chain from
 * each rollout node's agent_options and its group's tokenizer, the environment named by env_path,
 * and the rollout and advantage nodes bound to the chained functions. After the agents' models.
 * Errors: a template or environment that does not load (naming the node); DF_ENOMEM.
 */
int df_worker_marft_setup(df_dag_worker *w);
void df_worker_marft_free(df_dag_worker *w);

/** Whether the graph's agent groups form siiRL's chain (their rollout nodes one after another). */
bool df_worker_marft_chained(df_task_graph *g, int n_groups);

/** df_run_opts.skip_node: a node whose agent_options.train_cycle gives step w->step to another group. */
bool df_worker_marft_skip(void *user, const df_node *node);

/**
 * Show batch b as agent group g's (-1: every agent's columns prefixed): the columns the last view
 * made or unprefixed go back under its prefix, then agent_group_<g>_X become X. Errors: a
 * column of group g whose plain name is one of the batch's own (DF_EINTERNAL); DF_ENOMEM.
 */
int df_marft_view(df_marft_run *r, df_batch *b, int g);

/** The view a node runs in: its group's, or -1 for the rollout and advantage nodes (they read all). */
int df_marft_node_view(const df_marft_run *r, const df_node *node);

/**
 * The chained rollout over `prompts` (the dataloader's rows, prompt_ids rendered by agent 0's
 * tokenizer): n samples per row, each an episode through every agent for up to max_turns turns,
 * sampled with each agent's rollout node settings, or with val_sp for every agent (validation;
 * NULL: the nodes'). seed: the pass's root; label: the progress bars' (NULL: none). *out: the rows
 * repeated n times without prompt_ids, with each agent's columns agent_group_<g>_{prompt_ids,
 * response_ids, rollout_log_probs} (its last turn), num_turns, and with rewards_with_env the
 * environment's last score as agent_group_<last>_env_return. Errors: a prompt over
 * data.max_prompt_length in the first turn (naming the agent), the engines' and the environment's
 * (naming the agent or episode), DF_ENOMEM.
 */
int df_marft_generate(df_dag_worker *w, const df_batch *prompts, int64_t n, const df_sampling_params *val_sp,
                      uint64_t seed, const char *label, df_batch **out);

/**
 * The step's per-agent batch metrics into m (marft_metrics.c), leaving b in the last agent's view
 * for the step's own: *other_tokens the prompt and response tokens of the agents before the last,
 * their explained-variance sums added to ev_sums (model-parallel replicas add none).
 */
int df_marft_step_metrics(df_dag_worker *w, df_batch *b, df_metrics *m, double ev_sums[DF_EV_NSUMS],
                          double *other_tokens);

/** The tokenizer that decodes a step's or validation's batch at its end: the last agent's in a
 *  chained graph (the batch is shown as its), else group 0's. */
const df_tokenizer *df_worker_marft_scorer_tok(const df_dag_worker *w);

/** df_eval_opts.generate of a chained graph (user: the worker): df_marft_generate with
 *  rollout.val_kwargs, the batch shown as the last agent's (the scorer reads its answers). */
int df_marft_val_generate(void *user, const df_batch *prompts, int64_t n, uint64_t seed, df_batch **out);

/** The node functions the setup binds (marft_rollout.c, marft_adv.c). */
int df_marft_node_rollout(df_node_ctx *ctx, df_batch *batch, df_node_output *out);
int df_marft_node_pass(df_node_ctx *ctx, df_batch *batch, df_node_output *out);
int df_marft_node_advantage(df_node_ctx *ctx, df_batch *batch, df_node_output *out);

#endif
