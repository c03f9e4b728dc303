/*
 * The reference worker's node: siiRL's DAGWorker.compute_ref_log_prob — log-probs
 * under the frozen reference policy, kept only when a KL term needs them.
 */
#include "workers/worker_internal.h"

#include "util/timeutil.h"

bool df_worker_ref_in_actor(const df_actor_params *actor, const df_actor_params *ref)
{
    /* a storage of its own (model_dtype fp32 beside bf16 compute) or param_offload needs a copy */
    return actor->optim.lora.rank > 0 && ref->bf16 == actor->bf16 && ref->bf16_weights == ref->bf16 &&
           !ref->offload_dir;
}

bool df_worker_has_reference(const df_reference_worker *r)
{
    return r->model || r->in_actor;
}

int df_worker_ref_log_prob(const df_reference_worker *r, df_batch *b, const char *col, double *entropy_mean)
{
    if (r->in_actor)
        return df_actor_compute_base_log_prob(r->in_actor, b, col, &r->params, entropy_mean);
    if (!r->model)
        return df_error(DF_EINVAL, "the job keeps no reference model (no KL term needs one)");
    return df_actor_compute_log_prob(r->model, b, col, entropy_mean);
}

/* reference_log_prob: log-probs under the frozen reference (only when a KL term needs them). */
static int node_compute_ref_log_prob(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    df_dag_worker *w = df_node_worker(ctx);
    double t0 = df_now();
    int rc = df_worker_need_batch(batch, "compute_ref_log_prob");
    const df_reference_worker *ref = df_worker_slot(w, ctx->node).reference; /* the node's agent group's */
    if (!rc && df_worker_has_reference(ref))
        rc = df_worker_ref_log_prob(ref, batch, "ref_log_prob", NULL);
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
