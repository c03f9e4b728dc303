/* sched_internal.h (internal) — helpers shared by src/planner/. */
#ifndef DF_SCHED_INTERNAL_H
#define DF_SCHED_INTERNAL_H

#include "distflow/scheduler.h"
#include "util/sbuf.h"

#include <stddef.h>

/* Node indices of g sorted by node id (strcmp, = Python's str order for UTF-8), malloc'd. */
int *df_sched_sorted_ids(const df_task_graph *g);

/** What an advantage node must come after (df_task_graph_order_log_probs_first). */
enum { DF_NEED_OLD_LOG_PROB = 1, DF_NEED_REF_LOG_PROB = 2 };

/**
 * Put g's ADVANTAGE nodes after the log-prob nodes `need` names (DF_NEED_*: the old-log-prob
 * node, role ACTOR with only_forward_compute; the REFERENCE node), as verl's order has them
 * (RayPPOTrainer.fit: old_log_prob -> ref -> values -> adv): algorithm.use_kl_in_reward needs
 * both, the optimal token baseline the old log-probs. An advantage node that already depends on
 * them (transitively) is left alone. With may_reorder (siiRL's built-in chains), a chain
 * advantage -> old -> reference -> rest becomes old -> reference -> advantage -> rest (the
 * advantage's own dependency moves to the old-log-prob node). Otherwise, or for any other
 * shape: DF_EINVAL naming `source` (e.g. "workflow file 'x.yaml'"), `why` (the setting that
 * needs the order, e.g. "algorithm.use_kl_in_reward=true subtracts ..."), the node and the
 * missing dependency. DF_ENOMEM.
 */
int df_task_graph_order_log_probs_first(df_task_graph *g, int need, bool may_reorder, const char *source,
                                        const char *why);

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
