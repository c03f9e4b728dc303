/*
 * The chained multi-agent runtime's setup (marft_run.h): siiRL's MultiAgentLoop collects the
 * graph's leading ROLLOUT nodes, one per agent group, as the agents of one episode; here the
 * first runs the whole chain and the others pass its batch on. train_cycle's skip is here too.
 */
#include "workers/dag/marft_run.h"

#include <stdlib.h>
#include <string.h>

/* Group grp's one ROLLOUT node, or NULL (none, or several). */
static df_node *group_rollout(df_task_graph *g, int grp)
{
    df_node *r = NULL;
    for (int i = 0; i < df_task_graph_num_nodes(g); i++) {
        df_node *n = df_task_graph_node_at(g, i);
        if (n->agent_group == grp && n->node_role == DF_ROLE_ROLLOUT) {
            if (r)
                return NULL;
            r = n;
        }
    }
    return r;
}

static bool depends_on(const df_node *n, const df_node *up)
{
    for (int i = 0; i < n->n_dependencies; i++)
        if (!strcmp(n->dependencies[i], up->node_id))
            return true;
    return false;
}

bool df_worker_marft_chained(df_task_graph *g, int n_groups)
{
    if (!g || n_groups < 2)
        return false;
    const df_node *prev = group_rollout(g, 0);
    for (int grp = 1; prev && grp < n_groups; grp++) {
        const df_node *r = group_rollout(g, grp);
        if (!r || !depends_on(r, prev))
            return false;
        prev = r;
    }
    return prev != NULL;
}

bool df_worker_marft_skip(void *user, const df_node *node)
{
    const df_dag_worker *w = user;
    const df_agent_options *o = node->agent_options;
    return o && o->train_cycle > 0 && w->n_agents > 1 &&
           !df_marft_node_runs(w->step, o->train_cycle, w->n_agents, node->agent_group);
}

/* Each agent's templates and tokenizer, in turn order. */
static int make_chain(df_dag_worker *w, df_marft_run *r)
{
    df_marft_agent *ag = calloc((size_t)r->n_agents, sizeof *ag);
    if (!ag)
        return df_error(DF_ENOMEM, "out of memory");
    for (int a = 0; a < r->n_agents; a++) {
        const df_agent_options *o = r->rollout[a]->agent_options;
        ag[a] = (df_marft_agent){.tokenizer = df_worker_slot(w, r->rollout[a]).tok,
                                 .pre_chat_template = o ? df_agent_options_kwarg(o, false, "pre_chat_template") : NULL,
                                 .post_chat_template = o ? df_agent_options_kwarg(o, true, "post_chat_template") : NULL};
    }
    int rc = df_marft_chain_create(ag, r->n_agents, &r->chain);
    free(ag);
    return rc;
}

/* The environment: the last agent's env_path (siiRL steps it after that agent). */
static int find_env(df_marft_run *r)
{
    const df_node *last = r->rollout[r->n_agents - 1];
    const df_agent_options *o = last->agent_options;
    if (!o || o->n_env_path == 0)
        return DF_OK;
    int rc = df_marft_env_resolve(o->env_path[0], &r->env);
    return rc ? df_error_wrap(rc, "node '%s': agent_options.env_path", last->node_id) : DF_OK;
}

/* The rollout nodes run the chain; the advantage nodes the agents' (their own function kept). */
static void bind_nodes(df_dag_worker *w, df_marft_run *r)
{
    for (int a = 0; a < r->n_agents; a++)
        ((df_node *)r->rollout[a])->fn = a == 0 ? df_marft_node_rollout : df_marft_node_pass;
    for (int i = 0; i < df_task_graph_num_nodes(w->graph); i++) {
        df_node *n = df_task_graph_node_at(w->graph, i);
        if (n->node_role == DF_ROLE_ADVANTAGE) {
            r->adv_fn = n->fn;
            n->fn = df_marft_node_advantage;
            r->n_adv++;
        }
    }
}

int df_worker_marft_setup(df_dag_worker *w)
{
    if (!df_worker_marft_chained(w->graph, w->n_agents))
        return DF_OK;
    const df_train_config *t = &w->global.cfg;
    df_marft_run *r = calloc(1, sizeof *r);
    const df_node **ro = calloc((size_t)w->n_agents, sizeof *ro);
    if (!r || !ro) {
        free(r), free(ro);
        return df_error(DF_ENOMEM, "out of memory");
    }
    r->n_agents = w->n_agents;
    r->rollout = ro;
    r->view = -1;
    for (int a = 0; a < r->n_agents; a++)
        ro[a] = group_rollout(w->graph, a);
    const struct df_train_rollout_multi_turn *mt = &t->actor_rollout_ref.rollout.multi_turn;
    r->max_turns = mt->max_assistant_turns.set ? mt->max_assistant_turns.v : 1;
    r->rewards_with_env = t->actor_rollout_ref.rollout.agent.rewards_with_env;
    w->marft = r;
    int rc = make_chain(w, r);
    if (!rc)
        rc = find_env(r);
    if (!rc && r->rewards_with_env && !r->env)
        rc = df_error(DF_EINVAL, "actor_rollout_ref.rollout.agent.rewards_with_env=true needs an environment: "
                      "agent_options.env_path on the last agent's rollout node ('%s')",
                      r->rollout[r->n_agents - 1]->node_id);
    if (!rc)
        bind_nodes(w, r);
    return rc;
}

const df_tokenizer *df_worker_marft_scorer_tok(const df_dag_worker *w)
{
    return w->marft ? df_worker_slot(w, w->marft->rollout[w->marft->n_agents - 1]).tok : w->tok;
}

void df_worker_marft_free(df_dag_worker *w)
{
    df_marft_run *r = w->marft;
    if (!r)
        return;
    df_marft_chain_free(r->chain);
    free(r->rollout);
    free(r->shared);
    free(r);
    w->marft = NULL;
}
