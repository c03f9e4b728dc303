/* sched_internal.h (internal) — helpers shared by src/planner/. */
#ifndef DF_SCHED_INTERNAL_H
#define DF_SCHED_INTERNAL_H

#include "distflow/scheduler.h"
#include "util/sbuf.h"

#include <stddef.h>

/* Node indices of g sorted by node id (strcmp, = Python's str order for UTF-8), malloc'd. */
int *df_sched_sorted_ids(const df_task_graph *g);

/**
 * Put g's ADVANTAGE nodes after the old-log-prob node (role ACTOR,
 * only_forward_compute) and the REFERENCE node, as algorithm.use_kl_in_reward
 * needs (verl RayPPOTrainer.fit: old_log_prob -> ref -> values -> adv). An
 * advantage node that already depends on both (transitively) is left alone.
 * With may_reorder (siiRL's built-in chains), a chain advantage -> old ->
 * reference -> rest becomes old -> reference -> advantage -> rest (the
 * advantage's own dependency moves to the old-log-prob node). Otherwise, or
 * for any other shape: DF_EINVAL naming `source` (e.g. "workflow file 'x.yaml'"),
 * the node and the missing dependency. DF_ENOMEM.
 */
int df_task_graph_order_for_kl_in_reward(df_task_graph *g, bool may_reorder, const char *source);

/** The node id of ReMax's greedy pass in the built-in chains. */
#define DF_REWARD_BASELINE_NODE "reward_baseline"

/**
 * For an estimator that needs reward_baselines (ReMax): insert node
 * DF_REWARD_BASELINE_NODE (COMPUTE, DAGWorker.compute_reward_baseline) right
 * after g's one REWARD node, and make that node's dependents depend on it.
 * Errors: DF_EINTERNAL naming `source` when g has not exactly one REWARD node;
 * DF_EINVAL for an id already taken; DF_ENOMEM.
 */
int df_task_graph_add_reward_baseline(df_task_graph *g, const char *source);

/* Parameters of a model node without a `model_params` config (<= 0 counts as none). */
typedef double (*df_sched_params_fallback)(const df_node *n, void *user);

/* Size of g for param_aware: the sum of its model nodes' `model_params`
   (siiRL; an unreadable one counts 0, one without it fallback(n, user), or 0
   when fallback is NULL), or g's node count when it has no model node.
   df_graph_estimate_params is this with no fallback. */
double df_sched_graph_params(const df_task_graph *g, df_sched_params_fallback fallback, void *user);

#endif /* DF_SCHED_INTERNAL_H */
