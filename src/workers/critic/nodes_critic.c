/*
 * The critic's node functions — siiRL's DAGWorker.compute_value and
 * DAGWorker.train_critic (verl's critic_wg.compute_values / update_critic),
 * registered in the executable registry beside the other DAGWorker.* nodes.
 */
#include "workers/worker_internal.h"

#include "util/timeutil.h"
#include "workers/common/data_metrics.h"

#include <stdio.h>

/* The critic of the node's agent group. */
static df_critic *critic_of(const df_node_ctx *ctx)
{
    return df_worker_slot(df_node_worker(ctx), ctx->node).critic->model;
}

static int need_critic(df_node_ctx *ctx, const df_batch *b, const char *node)
{
    int rc = df_worker_need_batch(b, node);
    if (rc)
        return rc;
    if (!critic_of(ctx))
        return df_error(DF_EINVAL, "%s (node '%s'): this worker has no critic", node, ctx->node->node_id);
    return DF_OK;
}

/* compute_value: the critic's value of every response token, column `values` (GAE reads it). */
static int node_compute_value(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    double t0 = df_now();
    int rc = need_critic(ctx, batch, "compute_value");
    if (!rc)
        rc = df_critic_compute_values(critic_of(ctx), batch);
    (void)out;
    df_worker_timing(ctx, "values", t0);
    return rc;
}

/* critic_train: the value update on the step's values and returns, with the node's own loss
   settings when its workflow entry overrides them (the keys it registers with). */
static int node_train_critic(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    double t0 = df_now();
    df_dag_worker *w = df_node_worker(ctx);
    int rc = need_critic(ctx, batch, "train_critic");
    const df_node_settings *ns = df_worker_node_settings(w, ctx->node);
    df_critic *critic = critic_of(ctx);
    if (!rc && ns != &w->global)
        rc = df_critic_set_loss(critic, &ns->critic_loss);
    if (!rc)
        rc = df_critic_update(critic, batch, ctx->metrics);
    df_backend be = df_worker_backend(w);
    if (!rc)
        df_record_mfu(ctx->metrics, "perf/mfu/critic", &df_critic_model(critic)->cfg, batch, ns->critic_loss.ppo_epochs,
                      df_now() - t0, df_backend_peak_flops(&be));
    if (critic && ns != &w->global) /* back to the global settings (valid: the critic was created with them) */
        df_critic_set_loss(critic, &w->global.critic_loss);
    (void)out;
    df_worker_timing(ctx, "update_critic", t0);
    return rc;
}

int df_worker_register_critic_nodes(void)
{
    /* critic.model.path: its agent group's critic model (df_worker_group_critic_path) */
    static const df_node_keys train_keys = {
        .global = {"critic.cliprange_value", "critic.loss_agg_mode", "critic.ppo_epochs", "critic.model.path"}};
    static const df_node_keys value_keys = {.global = {"critic.model.path"}};
    int rc = df_exec_register_keys("DAGWorker.compute_value", node_compute_value, &value_keys);
    return rc ? rc : df_exec_register_keys("DAGWorker.train_critic", node_train_critic, &train_keys);
}
