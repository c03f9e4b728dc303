/*
 * ReMax's greedy pass as a node of the built-in chains (sched_internal.h).
 * verl's RayPPOTrainer.fit generates and scores the greedy responses inline
 * when adv_estimator is remax; here the pass is the reward_baseline node
 * (DAGWorker.compute_reward_baseline, src/workers/reward/reward_baseline.c),
 * which re-runs the rollout and reward nodes before it greedily.
 */
#include "planner/dag_internal.h"
#include "planner/sched_internal.h"

#include <stdlib.h>

int df_task_graph_add_reward_baseline(df_task_graph *g, const char *source)
{
    df_node **rew = NULL, **down = NULL, *b = NULL;
    int n_rew = 0, n_down = 0;
    int rc = df_task_graph_nodes_by_role(g, DF_ROLE_REWARD, &rew, &n_rew);
    if (!rc && n_rew != 1)
        rc = df_error(DF_EINTERNAL, "%s: expected one REWARD node to place the ReMax baseline after, found %d",
                      source, n_rew);
    const char *after = rc ? NULL : rew[0]->node_id;
    if (!rc)
        rc = df_task_graph_downstream_nodes(g, after, &down, &n_down);
    if (!rc)
        rc = df_node_new(DF_REWARD_BASELINE_NODE, DF_NODE_COMPUTE, DF_ROLE_DEFAULT, &b);
    if (!rc && !(rc = df_node_add_dependency(b, after)) &&
        !(rc = df_node_set_executable_ref(b, "siirl.dag_worker.dagworker:DAGWorker.compute_reward_baseline"))) {
        rc = df_task_graph_add_node(g, b); /* owns b from here */
        b = NULL;
    }
    for (int i = 0; !rc && i < n_down; i++) {
        df_node_remove_dependency(down[i], after);
        rc = df_node_add_dependency(down[i], DF_REWARD_BASELINE_NODE);
    }
    if (!rc)
        rc = df_task_graph_validate(g);
    df_node_free(b);
    free(rew);
    free(down);
    return rc;
}
