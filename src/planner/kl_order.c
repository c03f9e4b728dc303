/*
 * Node order for an advantage that reads log-probs (sched_internal.h): with
 * algorithm.use_kl_in_reward the penalty beta * KL(old_log_probs, ref_log_prob)
 * is subtracted from the reward before the advantage, the optimal token
 * baseline weighs tokens by old_log_probs and sum_pi_squared, and verl's rollout
 * correction weighs and rejects by old_log_probs against the rollout's, so the advantage
 * node must run after the old-log-prob (and reference) nodes — verl's
 * RayPPOTrainer.fit order. siiRL's built-in chains compute the advantage first;
 * they are rewired here, and any other graph is checked instead of silently
 * reordered.
 */
#include "planner/dag_internal.h"
#include "planner/sched_internal.h"

#include <stdlib.h>
#include <string.h>

/* The node functions are chosen by role (the workflow defaults, src/workers/common/node_config.c). */
static bool is_old_log_prob(const df_node *n)
{
    return n->node_role == DF_ROLE_ACTOR && n->only_forward_compute;
}

static bool is_reference(const df_node *n)
{
    return n->node_role == DF_ROLE_REFERENCE;
}

/* Which of the two log-prob kinds are among `a`'s transitive dependencies: bit 1 old, bit 2 reference. */
static int upstream_kinds(const df_task_graph *g, const df_node *a, int *found)
{
    int n = df_task_graph_num_nodes(g);
    int *stack = malloc((size_t)(n ? n : 1) * sizeof *stack);
    char *seen = calloc((size_t)(n ? n : 1), 1);
    if (!stack || !seen) {
        free(stack);
        free(seen);
        return df_error(DF_ENOMEM, "out of memory");
    }
    int top = 0;
    *found = 0;
    const df_node *cur = a;
    for (;;) {
        for (int k = 0; k < cur->n_dependencies; k++) {
            int j = df_task_graph_index_of(g, cur->dependencies[k]);
            if (j >= 0 && !seen[j]) {
                seen[j] = 1;
                stack[top++] = j;
            }
        }
        if (!top)
            break;
        cur = df_task_graph_node_at(g, stack[--top]);
        *found |= (is_old_log_prob(cur) ? 1 : 0) | (is_reference(cur) ? 2 : 0);
    }
    free(stack);
    free(seen);
    return DF_OK;
}

/* The one node of g that depends on `id`, or NULL when there is none or more than one. */
static df_node *sole_dependent(df_task_graph *g, const char *id)
{
    df_node **down = NULL, *r = NULL;
    int n = 0;
    if (df_task_graph_downstream_nodes(g, id, &down, &n))
        return NULL;
    if (n == 1)
        r = down[0];
    free(down);
    return r;
}

/*
 * A -> O -> R -> T... (advantage, old log-prob, reference, the rest) becomes
 * P -> O -> R -> A -> T..., P being A's one dependency. *done stays false
 * (graph untouched) when the chain does not have that shape.
 */
static int rewire_chain(df_task_graph *g, df_node *a, bool *done)
{
    *done = false;
    df_node *o = sole_dependent(g, a->node_id);
    df_node *r = o && is_old_log_prob(o) ? sole_dependent(g, o->node_id) : NULL;
    if (a->n_dependencies != 1 || !r || !is_reference(r) || o->n_dependencies != 1 || r->n_dependencies != 1)
        return DF_OK;
    df_node **after = NULL;
    int n_after = 0;
    int rc = df_task_graph_downstream_nodes(g, r->node_id, &after, &n_after);
    char *p = rc ? NULL : strdup(a->dependencies[0]);
    if (!rc && !p)
        rc = df_error(DF_ENOMEM, "out of memory");
    if (!rc) {
        df_node_remove_dependency(o, a->node_id);
        df_node_remove_dependency(a, p);
        rc = df_node_add_dependency(o, p);
    }
    if (!rc)
        rc = df_node_add_dependency(a, r->node_id);
    for (int i = 0; i < n_after && !rc; i++) {
        df_node_remove_dependency(after[i], r->node_id);
        rc = df_node_add_dependency(after[i], a->node_id);
    }
    free(after);
    free(p);
    if (!rc)
        rc = df_task_graph_validate(g);
    *done = !rc;
    return rc;
}

int df_task_graph_order_log_probs_first(df_task_graph *g, int need, bool may_reorder, const char *source,
                                        const char *why)
{
    df_node **adv = NULL;
    int n_adv = 0;
    int rc = df_task_graph_nodes_by_role(g, DF_ROLE_ADVANTAGE, &adv, &n_adv);
    for (int i = 0; i < n_adv && !rc; i++) {
        int found = 0;
        rc = upstream_kinds(g, adv[i], &found);
        if (rc || (found & need) == need)
            continue;
        bool done = false;
        if (may_reorder && (rc = rewire_chain(g, adv[i], &done)) == DF_OK && done)
            continue;
        if (rc)
            break;
        const int missing = need & ~found;
        const char *what = missing == DF_NEED_REF_LOG_PROB ? "the REFERENCE node"
                           : missing == DF_NEED_OLD_LOG_PROB
                               ? "the old-log-prob node (role ACTOR, only_forward_compute: true)"
                               : "the old-log-prob node (role ACTOR, only_forward_compute: true) "
                                 "and the REFERENCE node";
        rc = df_error(DF_EINVAL,
                      "%s: %s, but node '%s' (ADVANTAGE) does not depend on %s; order the nodes as verl "
                      "does: rollout -> reward -> actor_old_log_prob -> reference_log_prob -> "
                      "calculate_advantages -> actor_train",
                      source, why, adv[i]->node_id, what);
    }
    free(adv);
    return rc;
}
