/*
 * The reference worker's node: siiRL's DAGWorker.compute_ref_log_prob — log-probs
 * under the frozen reference policy, kept only when a KL term needs them.
 */
#include "workers/worker_internal.h"

#include "util/timeutil.h"

/* reference_log_prob: log-probs under the frozen reference (only when a KL term needs them). */
static int node_compute_ref_log_prob(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    df_dag_worker *w = df_node_worker(ctx);
    double t0 = df_now();
    int rc = df_worker_need_batch(batch, "compute_ref_log_prob");
    df_actor *ref = df_worker_slot(w, ctx->node).reference->model; /* the node's agent group's */
    if (!rc && ref)
        rc = df_actor_compute_log_prob(ref, batch, "ref_log_prob", NULL);
    (void)out;
    df_worker_timing(ctx, "ref", t0);
    return rc;
}

int df_worker_register_reference_nodes(void)
{
    /* the reference is its agent group's initial model (agents.c) */
    static const df_node_keys keys = {.global = {"actor_rollout_ref.model.path"}};
    return df_exec_register_keys("DAGWorker.compute_ref_log_prob", node_compute_ref_log_prob, &keys);
}
