/* A node for test_plugin_algo that asks a model of the job for log-probs through the public
 * node context: the model of role `role` (own config key: actor | reference) scores the batch
 * into probe_log_probs, and probe/abs_diff_mean is the token mean of |probe_log_probs -
 * old_log_probs|, so the test sees which model answered. */
#include <distflow/dag.h>
#include <distflow/node.h>

#include <math.h>
#include <string.h>

DF_PLUGIN_DECLARE_ABI;

DF_API const df_node_keys probe_logp_keys = {.own = {"role"}};

DF_API int probe_logp(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    (void)out;
    const char *r = df_node_get_config(ctx->node, "role");
    df_node_role role = r && !strcmp(r, "reference") ? DF_ROLE_REFERENCE : DF_ROLE_ACTOR;
    if (!df_node_has_model(ctx, role))
        return df_error(DF_EINVAL, "probe_logp: the job has no %s model", r ? r : "actor");
    int rc = df_node_log_probs(ctx, role, batch, "probe_log_probs", NULL);
    const df_column *p = rc ? NULL : df_batch_column(batch, "probe_log_probs");
    const df_column *o = rc ? NULL : df_batch_column(batch, "old_log_probs");
    if (!rc && (!p || !o))
        return df_error(DF_EINVAL, "probe_logp: needs old_log_probs before it");
    if (rc)
        return rc;
    const float *pd = p->data, *od = o->data;
    int64_t n = p->offsets[df_batch_size(batch)];
    double s = 0;
    for (int64_t t = 0; t < n; t++)
        s += fabs((double)pd[t] - od[t]);
    if (ctx->metrics)
        df_metrics_set(ctx->metrics, "probe/abs_diff_mean", n ? s / (double)n : 0);
    return DF_OK;
}

/* Generation through the node context: n responses per row of the batch it is given (the
 * rollout's output, so n * n rows); probe/gen_rows_per_row = rows out / rows in. */
DF_API int probe_generate(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    (void)out;
    df_batch *g = NULL;
    int rc = df_node_generate(ctx, batch, &g);
    if (rc)
        return rc;
    if (ctx->metrics && df_batch_size(batch))
        df_metrics_set(ctx->metrics, "probe/gen_rows_per_row",
                       (double)df_batch_size(g) / (double)df_batch_size(batch));
    if (!df_batch_offsets(g, "response_ids"))
        rc = df_error(DF_EINVAL, "probe_generate: no response_ids in the generated batch");
    df_batch_free(g);
    return rc;
}
