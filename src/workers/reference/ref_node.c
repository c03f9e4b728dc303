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
    if (!rc && w->reference.model)
        rc = df_actor_compute_log_prob(w->reference.model, batch, "ref_log_prob", NULL);
    (void)out;
    df_worker_timing(ctx, "ref", t0);
    return rc;
}

int df_worker_register_reference_nodes(void)
{
    return df_exec_register("DAGWorker.compute_ref_log_prob", node_compute_ref_log_prob);
}
