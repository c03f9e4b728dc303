/*
 * Which multi-agent (siiRL MARFT) graphs the DAG worker runs (docs/multi_agent.md):
 *   chained:     the groups' ROLLOUT nodes one after another at the head of the graph (siiRL's
 *                layout): one episode through every agent (marft_run.h), each node of group g on
 *                group g's columns, one ADVANTAGE node for every agent;
 *   independent: agent groups that each own their models and run one after another on the step's
 *                prompts, each its own rollout -> reward -> advantage -> actor chain with a
 *                critic-free estimator.
 * What neither takes is refused here, naming the node and what it needs.
 */
#include "workers/worker_internal.h"
#include "workers/dag/marft_run.h"

#include "distflow/algo_desc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUNS "what runs: the chained layout (each group's rollout node after the previous group's, one " \
             "advantage node) or each agent group its own rollout -> reward -> advantage -> actor chain after the " \
             "previous group's (docs/multi_agent.md)"

static int refuse(const char *src, const df_node *n, int groups, const char *what)
{
    return df_error(DF_EUNSUPPORTED,
                    "%s node '%s': agent_group %d: multi-agent graphs (siiRL's MARFT, %d agent groups) do not run "
                    "with %s; " RUNS,
                    src, n->node_id, n->agent_group, groups, what);
}

/* What of node n a graph of this layout does not run, or NULL. */
static const char *node_needs(const df_node *n, bool chained, const df_node *last_rollout)
{
    const df_agent_options *o = n->agent_options;
    if (!o) /* critics and share_instance: agents.c, agent_share.c (df_worker_check_agent_shares) */
        return NULL;
    if (!chained && (o->obs_with_env || o->n_env_path || o->process_path || o->n_pre_kwargs || o->n_post_kwargs))
        return "the chained rollout's options (obs_with_env, env_path, process_path, pre_process_kwargs, "
               "post_process_kwargs) in groups whose rollout nodes do not follow one another";
    if (o->n_env_path && n != last_rollout)
        return "agent_options.env_path outside the last agent's rollout node (the environment steps after the "
               "last agent of each turn, as siiRL's MultiAgentLoop)";
    if (o->n_env_path > 1)
        return "more than one agent_options.env_path entry (siiRL runs the first only)";
    return NULL;
}

/* Whether every agent group has a CRITIC node (its own critic or a shared one). */
static bool critic_per_group(df_task_graph *g, int groups)
{
    for (int grp = 0; grp < groups; grp++) {
        bool found = false;
        for (int i = 0; i < df_task_graph_num_nodes(g) && !found; i++)
            found = df_task_graph_node_at(g, i)->agent_group == grp &&
                    df_task_graph_node_at(g, i)->node_role == DF_ROLE_CRITIC;
        if (!found)
            return false;
    }
    return true;
}

/* A job-wide setting the groups cannot share, or NULL; `critics`: every group has a critic. */
static const char *job_needs(const df_train_config *t, bool chained, bool critics)
{
    const df_adv_estimator_desc *d = df_adv_estimator_find(t->algorithm.adv_estimator);
    if (!chained && d && (d->needs & DF_ADV_NEEDS_AGENTS))
        return "algorithm.adv_estimator=gae_marft in independent groups (it chains GAE across the agents of one "
               "episode: the chained layout)";
    if (d && (d->needs & (DF_ADV_NEEDS_VALUES | DF_ADV_NEEDS_AGENTS)) && !critics)
        return "algorithm.adv_estimator reading a critic's values (gae, gae_marft) in an agent group without a "
               "CRITIC node";
    if (d && (d->needs & DF_ADV_NEEDS_BASELINES))
        return "algorithm.adv_estimator=remax (its greedy pass re-runs one rollout)";
    if (t->algorithm.filter_groups.enable)
        return "algorithm.filter_groups.enable (its refills re-run one rollout)";
    if (!strcmp(t->actor_rollout_ref.rollout.mode, "async"))
        return "actor_rollout_ref.rollout.mode=async";
    if (t->actor_rollout_ref.rollout.multi_turn.enable || t->dag.env_enable)
        return "multi_turn.enable or dag.env_enable (one agent loop for the job; a chained graph's turns are "
               "multi_turn.max_assistant_turns without it)";
    if (t->actor_rollout_ref.rollout.agent.rewards_with_env && !chained)
        return "actor_rollout_ref.rollout.agent.rewards_with_env outside a chained graph";
    return NULL;
}

/* A chained graph: at most one ADVANTAGE node per agent group (one node alone computes every agent's);
 * rewards_with_env needs the environment. */
static int check_chained(const df_train_config *t, df_task_graph *g, int groups, const char *src,
                         const df_node *last_rollout)
{
    for (int i = 0; i < df_task_graph_num_nodes(g); i++) {
        const df_node *n = df_task_graph_node_at(g, i);
        for (int j = 0; n->node_role == DF_ROLE_ADVANTAGE && j < i; j++) {
            const df_node *m = df_task_graph_node_at(g, j);
            if (m->node_role == DF_ROLE_ADVANTAGE && m->agent_group == n->agent_group)
                return refuse(src, n, groups, "a second advantage node in one agent group");
        }
    }
    const df_agent_options *o = last_rollout->agent_options;
    int rc = o && o->n_env_path ? df_marft_env_check(o->env_path[0]) : DF_OK;
    if (rc)
        return df_error_wrap(rc, "%s node '%s': agent_options.env_path", src, last_rollout->node_id);
    if (t->actor_rollout_ref.rollout.agent.rewards_with_env && (!o || !o->n_env_path))
        return df_error(DF_EINVAL, "%s: actor_rollout_ref.rollout.agent.rewards_with_env=true needs an environment: "
                        "agent_options.env_path on the last agent's rollout node ('%s')", src, last_rollout->node_id);
    return DF_OK;
}

/* Group grp's ROLLOUT node into *r (NULL when none); the count into *count. */
static void group_rollout(df_task_graph *g, int grp, const df_node **r, int *count)
{
    *r = NULL;
    *count = 0;
    for (int i = 0; i < df_task_graph_num_nodes(g); i++) {
        const df_node *n = df_task_graph_node_at(g, i);
        if (n->agent_group == grp && n->node_role == DF_ROLE_ROLLOUT && !(*count)++)
            *r = n;
    }
}

/* Group grp >= 1 starts at its one rollout node, after every node of the groups before it. */
static int check_order(df_task_graph *g, int grp, int groups, const char *src, bool *up, bool *down)
{
    const df_node *r;
    int count, nn = df_task_graph_num_nodes(g);
    group_rollout(g, grp, &r, &count);
    const df_node *first = NULL;
    for (int i = 0; i < nn && !first; i++)
        if (df_task_graph_node_at(g, i)->agent_group == grp)
            first = df_task_graph_node_at(g, i);
    if (count != 1)
        return refuse(src, first, groups, count ? "two rollout nodes in one group" : "a group without a rollout node");
    int ri = 0;
    while (df_task_graph_node_at(g, ri) != r)
        ri++;
    int rc = df_task_graph_ancestors(g, r, up);
    for (int i = 0; !rc && i < nn; i++) {
        const df_node *n = df_task_graph_node_at(g, i);
        if (n->agent_group < grp && !up[i])
            return refuse(src, n, groups, "a node that does not come before the next group's rollout node");
        if (n->agent_group != grp || n == r || (rc = df_task_graph_ancestors(g, n, down)))
            continue;
        if (!down[ri])
            return refuse(src, n, groups, "a node that does not come after its group's rollout node");
    }
    return rc;
}

int df_worker_check_agents_run(const df_train_config *t, df_task_graph *g, int groups, const char *src)
{
    int nn = df_task_graph_num_nodes(g);
    const bool chained = df_worker_marft_chained(g, groups);
    const df_node *last = NULL;
    int count;
    if (chained)
        group_rollout(g, groups - 1, &last, &count);
    /* the later groups' nodes first: they are what a single-agent worker lacked */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < nn; i++) {
            const df_node *n = df_task_graph_node_at(g, i);
            const char *what = (n->agent_group > 0) == (pass == 0) ? node_needs(n, chained, last) : NULL;
            if (what)
                return refuse(src, n, groups, what);
        }
    const char *what = job_needs(t, chained, critic_per_group(g, groups));
    for (int i = 0; what && i < nn; i++)
        if (df_task_graph_node_at(g, i)->agent_group > 0)
            return refuse(src, df_task_graph_node_at(g, i), groups, what);
    int rc = df_worker_check_agent_shares(g, groups, src);
    if (rc || chained)
        return rc ? rc : check_chained(t, g, groups, src, last);
    bool *up = malloc((size_t)(nn ? nn : 1) * sizeof *up), *down = malloc((size_t)(nn ? nn : 1) * sizeof *down);
    rc = up && down ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    for (int grp = 1; !rc && grp < groups; grp++)
        rc = check_order(g, grp, groups, src, up, down);
    free(up);
    free(down);
    return rc;
}
