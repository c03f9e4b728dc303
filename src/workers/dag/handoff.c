/*
 * Data hand-off between the stages of a step (siiRL DAGWorker's
 * put_data_to_buffers / get_data_from_buffers around each node): when the next
 * node's data-parallel layout equals the current one and nothing forces a
 * rebalance, the batch stays where it is; otherwise the ranks redistribute it
 * through the Data Coordinator, with no central process.
 */
#include "workers/worker_internal.h"
#include "workers/common/data_metrics.h"
#include "workers/dag/marft_run.h"

#include <string.h>

/*
 * Rebalance before this node? DATA_REBALANCE and POSTPROCESS_SAMPLING nodes
 * (siiRL's postprocess_sampling rebalances within its group) and the node
 * after DAPO's dynamic sampling (which leaves ranks with unequal numbers of
 * groups) always; verl's trainer.balance_batch, or the asynchronous runtime's trainer side, right
 * after rollout. After PF-PPO's resampling (w->rebalance_next) too, by samples: a drawn group is
 * no longer whole, and equal counts need single samples.
 */
static bool forced(const df_dag_worker *w, const df_node *node)
{
    if (node->node_role == DF_ROLE_DATA_REBALANCE || node->node_role == DF_ROLE_POSTPROCESS_SAMPLING ||
        w->prev_role == DF_ROLE_DYNAMIC_SAMPLING)
        return true;
    /* mode=async: the trainer ranks took their episodes as they arrived (workers/dag/async.h) */
    bool uneven = w->async != NULL;
    return (w->global.cfg.trainer.balance_batch || uneven) && w->prev_role == DF_ROLE_ROLLOUT &&
           node->node_role != DF_ROLE_ROLLOUT;
}

/* The node's role for the hand-off: DAPO's sampling function is DYNAMIC_SAMPLING whatever role the
   workflow gave its node (siiRL's workflow_dapo.yaml files give it none). */
static df_node_role handoff_role(const df_node *node)
{
    df_node_fn ds = NULL;
    if (node->node_role == DF_ROLE_DEFAULT && node->fn && !df_exec_find("DAGWorker.dynamic_sampling", &ds) &&
        node->fn == ds)
        return DF_ROLE_DYNAMIC_SAMPLING;
    df_clear_error();
    return node->node_role;
}

/* verl's trainer.balance_batch metrics (log_seqlen_unbalance): this rank's prompt + response tokens
   before the balancing hand-off (global_seqlen/min, /max, /mean) and after it (/balanced_min,
   /balanced_max); the cross-rank reduction takes their minimum, maximum and mean, and fit.c adds
   /minmax_diff. */
static void seqlen_balance(df_metrics *m, const df_batch *b, bool after)
{
    double tok[2] = {0};
    df_step_token_counts(b, tok);
    static const char *const before_names[] = {"global_seqlen/min", "global_seqlen/max", "global_seqlen/mean"};
    static const char *const after_names[] = {"global_seqlen/balanced_min", "global_seqlen/balanced_max"};
    for (int i = 0; i < (after ? 2 : 3); i++)
        df_metrics_set(m, after ? after_names[i] : before_names[i], tok[0] + tok[1]);
}

int df_worker_before_node(void *user, df_node *node, df_batch **batch)
{
    df_dag_worker *w = user;
    int arc = df_worker_agent_metrics(w, node);
    if (arc)
        return arc;
    const df_node_layout *to = df_worker_node_layout(w, node);
    bool uneven = w->rebalance_next; /* PF-PPO's draws: counts per rank, not whole groups */
    bool force = (forced(w, node) || uneven) && to->dp_size > 1; /* one DP rank has nothing to balance */
    const bool balance = w->global.cfg.trainer.balance_batch && w->prev_role == DF_ROLE_ROLLOUT &&
                         node->node_role != DF_ROLE_ROLLOUT && *batch;
    w->prev_role = handoff_role(node);
    w->rebalance_next = false;
    if (!*batch) { /* a first node without input */
        w->cur_layout = *to;
        return DF_OK;
    }
    df_dp_layout src = {.dp_size = w->cur_layout.dp_size, .mp = w->cur_layout.mp};
    df_dp_layout dst = {.dp_size = to->dp_size, .mp = to->mp};
    if (balance)
        seqlen_balance(w->metrics, *batch, false);
    df_put_opts o = {.force = force, .keep_groups = !uneven};
    df_redist_stats st = {0};
    int rc = df_data_buffers_put(w->buffers, node->node_id, *batch, src, dst, &o, &st);
    *batch = NULL; /* the buffers own it now */
    if (!rc)
        rc = df_data_buffers_get(w->buffers, node->node_id, to->dp_size, to->dp_rank, batch);
    if (rc)
        return df_error_wrap(rc, "moving the batch from %d x %d to %d x %d ranks", src.dp_size, src.mp,
                             dst.dp_size, dst.mp);
    w->cur_layout = *to;
    if (balance)
        seqlen_balance(w->metrics, *batch, true);
    /* a chained multi-agent graph: the node sees its agent group's columns (marft_view.c) */
    if (w->marft && (rc = df_marft_view(w->marft, *batch, df_marft_node_view(w->marft, node))))
        return df_error_wrap(rc, "agent group %d's view of the batch", node->agent_group);
    if (!st.local) {
        df_metrics_add(w->metrics, "timing_s/redistribute", st.seconds);
        df_metrics_add(w->metrics, "perf/redistributed_bytes", (double)st.bytes_sent);
    }
    return DF_OK;
}

void df_worker_begin_pass(void *user)
{
    df_dag_worker *w = user;
    w->cur_layout = w->data_layout;
    w->prev_role = DF_ROLE_DEFAULT;
    if (w->marft) /* a fresh batch: nothing of it is any agent's view */
        w->marft->view = -1;
}
