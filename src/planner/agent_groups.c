/*
 * Agent groups of a multi-agent (siiRL MARFT) task graph (include/distflow/dag.h,
 * df_task_graph_agent_groups): how many, and the shapes siiRL's DAG worker
 * assumes of them (siirl/dag_worker/dagworker.py: multi_agent_group indexed by
 * agent_group, a shared instance looked up by group and role).
 */
#include "distflow/dag.h"

/* The node of group `grp` and role `role` that owns an instance (no share_instance), or NULL. */
static const df_node *owner_of(const df_task_graph *g, int grp, df_node_role role)
{
    for (int i = 0; i < df_task_graph_num_nodes(g); i++) {
        const df_node *n = df_task_graph_node_at(g, i);
        if (n->agent_group == grp && n->node_role == role &&
            !(n->agent_options && n->agent_options->share_instance >= 0))
            return n;
    }
    return NULL;
}

static int check_share(const df_task_graph *g, const df_node *n, int n_groups)
{
    int to = n->agent_options ? n->agent_options->share_instance : -1;
    const char *gid = df_task_graph_id(g);
    if (to < 0)
        return DF_OK;
    if (to >= n_groups || to == n->agent_group)
        return df_error(DF_EINVAL, "task graph '%s': node '%s' (agent group %d): agent_options.share_instance %d "
                        "must name another agent group, 0 .. %d", gid, n->node_id, n->agent_group, to,
                        n_groups - 1);
    if (!owner_of(g, to, n->node_role))
        return df_error(DF_EINVAL, "task graph '%s': node '%s': agent_options.share_instance %d: agent group %d has "
                        "no %s node with its own instance to share", gid, n->node_id, to, to,
                        df_node_role_name(n->node_role));
    return DF_OK;
}

int df_task_graph_agent_groups(const df_task_graph *g, int *n_groups)
{
    const int nn = df_task_graph_num_nodes(g);
    int top = 0;
    for (int i = 0; i < nn; i++)
        if (df_task_graph_node_at(g, i)->agent_group > top)
            top = df_task_graph_node_at(g, i)->agent_group;
    for (int grp = 0; grp <= top; grp++) {
        bool found = false;
        for (int i = 0; i < nn && !found; i++)
            found = df_task_graph_node_at(g, i)->agent_group == grp;
        if (!found)
            return df_error(DF_EINVAL, "task graph '%s': agent group %d has no node, but group %d has: agent groups "
                            "are numbered 0, 1, ... without gaps (siiRL indexes its agents by them)",
                            df_task_graph_id(g), grp, top);
    }
    for (int i = 0; i < nn; i++) {
        int rc = check_share(g, df_task_graph_node_at(g, i), top + 1);
        if (rc)
            return rc;
    }
    *n_groups = top + 1;
    return DF_OK;
}
