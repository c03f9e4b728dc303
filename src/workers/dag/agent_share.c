/*
 * agent_options.share_instance in the DAG worker (docs/multi_agent.md): a node of agent group g
 * with share_instance h runs on group h's worker of its role, the same object (one model, one
 * optimizer, updated by both groups' training nodes), as siiRL's DAG worker looks a shared
 * instance up by group and role. What the worker runs of it is checked here at check time; the
 * slots are pointed at the shared workers at setup. Also the per-group weights-in-sync check.
 */
#include "workers/worker_internal.h"

#include <stdio.h>
#include <string.h>

static bool is_model(const df_node *n)
{
    return n->node_type == DF_NODE_MODEL_TRAIN || n->node_type == DF_NODE_MODEL_INFERENCE;
}

/* The group whose instance n runs on when not its own, else -1. */
static int share_of(const df_node *n)
{
    return n->agent_options ? n->agent_options->share_instance : -1;
}

/* The first model node of group grp and role `role`, or NULL. */
static const df_node *first_of(df_task_graph *g, int grp, df_node_role role)
{
    for (int i = 0; i < df_task_graph_num_nodes(g); i++) {
        const df_node *n = df_task_graph_node_at(g, i);
        if (n->agent_group == grp && n->node_role == role && is_model(n))
            return n;
    }
    return NULL;
}

static int refuse(const char *src, const df_node *n, const char *why)
{
    return df_error(DF_EUNSUPPORTED, "%s node '%s': agent_group %d: agent_options.share_instance %d: %s "
                    "(docs/multi_agent.md)", src, n->node_id, n->agent_group, share_of(n), why);
}

/* A node of a group whose actor is shared may not name a model: the group's is the shared one. */
static int check_node(df_task_graph *g, const df_node *n, const char *src)
{
    int to = share_of(n);
    const df_node *first = first_of(g, n->agent_group, n->node_role);
    if (first && share_of(first) != to) { /* named from a sharing node: its share_instance is the point */
        const df_node *sh = to >= 0 ? n : first, *other = sh == n ? first : n;
        char why[512];
        snprintf(why, sizeof why, "node '%s' of the same group and role %s; a group's %s nodes run on one "
                 "instance, all its own or all one other group's", other->node_id,
                 share_of(other) < 0 ? "uses its own instance" : "shares another group's",
                 df_node_role_name(n->node_role));
        return refuse(src, sh, why);
    }
    if (to < 0)
        return DF_OK;
    if (n->agent_group == 0)
        return refuse(src, n, "agent group 0's models are the single-agent job's own; only later groups share");
    if (df_worker_node_sets_model_path(n) || df_worker_node_sets_critic_path(n))
        return refuse(src, n, "the node sets a model path of its own, but runs on the shared group's model");
    return DF_OK;
}

/* Group grp's ROLLOUT and ACTOR share together, and its nodes name no model when they do. */
static int check_policy(df_task_graph *g, int grp, const char *src)
{
    const df_node *r = first_of(g, grp, DF_ROLE_ROLLOUT), *a = first_of(g, grp, DF_ROLE_ACTOR);
    int rs = r ? share_of(r) : -1, as = a ? share_of(a) : -1;
    if (rs != as)
        return refuse(src, rs >= 0 ? r : a,
                      "a group shares its ROLLOUT and its ACTOR together, with the same group: the rollout "
                      "engine samples from its group's actor's weights (a shared engine fed another actor's "
                      "weights would sample off-policy for both groups)");
    for (int i = 0; as >= 0 && i < df_task_graph_num_nodes(g); i++) {
        const df_node *n = df_task_graph_node_at(g, i);
        char why[512];
        snprintf(why, sizeof why, "the group's model is agent group %d's, but its node '%s' sets "
                 "actor_rollout_ref.model.path", as, n->node_id);
        if (n->agent_group == grp && df_worker_node_sets_model_path(n))
            return refuse(src, a, why);
    }
    return DF_OK;
}

int df_worker_check_agent_shares(df_task_graph *g, int groups, const char *src)
{
    int rc = DF_OK;
    for (int i = 0; !rc && i < df_task_graph_num_nodes(g); i++) {
        const df_node *n = df_task_graph_node_at(g, i);
        if (is_model(n))
            rc = check_node(g, n, src);
    }
    for (int grp = 1; !rc && grp < groups; grp++)
        rc = check_policy(g, grp, src);
    return rc;
}

void df_worker_apply_shares(df_dag_worker *w)
{
    for (int i = 0; w->agents && i < df_task_graph_num_nodes(w->graph); i++) {
        const df_node *n = df_task_graph_node_at(w->graph, i);
        int to = share_of(n), g = n->agent_group;
        if (to < 0 || g <= 0 || g >= w->n_agents || to >= w->n_agents || !is_model(n))
            continue;
        df_agent_slot *s = &w->agents[g];
        df_agent_slot h = to == 0 ? df_worker_slot(w, NULL) : w->agents[to]; /* h owns it: the plan's check */
        switch (n->node_role) {
        case DF_ROLE_ROLLOUT: s->rollout = h.rollout; break;
        case DF_ROLE_ACTOR:
            s->actor = h.actor;
            s->model_dir = h.model_dir; /* the group's model is the shared one */
            break;
        case DF_ROLE_REFERENCE: s->reference = h.reference; break;
        case DF_ROLE_CRITIC: s->critic = h.critic; break;
        default: break;
        }
    }
}

int df_worker_check_agent_weights(df_dag_worker *w, df_metrics *m)
{
    int rc = DF_OK;
    for (int g = 1; !rc && g < w->n_agents; g++) {
        const df_agent_slot *s = &w->agents[g];
        char who[48];
        snprintf(who, sizeof who, "agent_%d_actor", g);
        if (df_agent_slot_owns_actor(s))
            rc = df_worker_check_in_sync(w, df_actor_model(s->actor->model), who, m);
        snprintf(who, sizeof who, "agent_%d_critic", g);
        if (!rc && df_agent_slot_owns_critic(s))
            rc = df_worker_check_in_sync(w, df_critic_model(s->critic->model), who, m);
    }
    return rc;
}
