/*
 * filter_nonzero_std.c — an example distflow plugin: a custom filter node,
 * DAPO's dynamic sampling (siiRL's filter_interface/dapo.py dynamic_sampling,
 * the DAPO paper's "dynamic sampling", arXiv 2503.14476 §3.2).
 *
 * Samples are grouped by the `uid` column (the GRPO group: the n responses to
 * one prompt). A group whose metric values are all equal (std 0) gives every
 * sample a zero GRPO advantage, so it is dropped; groups with differing
 * values and groups of a single sample are kept. The kept rows, in their
 * original order, go downstream as a new batch (df_batch_select).
 *
 * Node config:
 *     metric   "seq_final_reward" (default): sum of token_level_rewards per sample;
 *              "seq_reward": sum of token_level_scores; or the name of any
 *              per-sample float32 / int64 column (e.g. "acc")
 *
 * Metrics (siiRL's names): dapo_sampling/{kept_trajectories_ratio,
 * initial_trajectories, final_trajectories, kept_groups, total_groups}.
 *
 * df_plugin_init also registers the function as "filter.nonzero_std".
 */
#include <distflow/dag.h>

#include <stdlib.h>
#include <string.h>

DF_PLUGIN_DECLARE_ABI;

/* Per-sample metric values into v[n]. */
static int metric_values(const df_batch *b, const char *node_id, const char *metric, double *v)
{
    int64_t n = df_batch_size(b);
    const char *tok = !strcmp(metric, "seq_final_reward") ? "token_level_rewards"
                      : !strcmp(metric, "seq_reward")     ? "token_level_scores"
                                                          : NULL;
    if (tok) {
        const df_column *c = df_batch_column(b, tok);
        if (!c || c->kind != DF_COL_TOK_F32)
            return df_error(DF_EINVAL, "node '%s': metric '%s' needs the %s column", node_id,
                            metric, tok);
        const float *d = c->data;
        for (int64_t i = 0; i < n; i++) {
            double s = 0;
            for (int64_t t = c->offsets[i]; t < c->offsets[i + 1]; t++)
                s += d[t];
            v[i] = s;
        }
        return DF_OK;
    }
    const float *f = df_batch_f32(b, metric);
    const int64_t *q = f ? NULL : df_batch_i64(b, metric);
    if (!f && !q)
        return df_error(DF_EINVAL,
                        "node '%s': metric '%s' is neither seq_final_reward, seq_reward nor a "
                        "per-sample float32 / int64 column of the batch",
                        node_id, metric);
    for (int64_t i = 0; i < n; i++)
        v[i] = f ? (double)f[i] : (double)q[i];
    return DF_OK;
}

/* group[i] = index of the first sample with the same uid; a group's size and value range. */
static void group_rows(const df_batch *b, int64_t n, const double *v, int64_t *group,
                       int64_t *size, double *lo, double *hi)
{
    for (int64_t i = 0; i < n; i++) {
        const char *u = df_batch_str(b, "uid", i);
        int64_t g = i;
        for (int64_t j = 0; j < i; j++) /* O(n * groups) is fine at rollout batch sizes */
            if (group[j] == j && !strcmp(df_batch_str(b, "uid", j), u)) {
                g = j;
                break;
            }
        group[i] = g;
        if (g == i) {
            size[g] = 0;
            lo[g] = hi[g] = v[i];
        }
        size[g]++;
        lo[g] = v[i] < lo[g] ? v[i] : lo[g];
        hi[g] = v[i] > hi[g] ? v[i] : hi[g];
    }
}

DF_API int filter_nonzero_std(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    const char *id = ctx->node ? ctx->node->node_id : "filter_nonzero_std";
    if (!batch)
        return df_error(DF_EINVAL, "node '%s': no input batch", id);
    if (!df_batch_column(batch, "uid") || df_batch_column(batch, "uid")->kind != DF_COL_STR)
        return df_error(DF_EINVAL, "node '%s': the batch has no string uid column", id);
    const char *metric = ctx->node ? df_node_get_config(ctx->node, "metric") : NULL;
    metric = metric ? metric : "seq_final_reward";
    int64_t n = df_batch_size(batch), m = n ? n : 1;
    double *v = malloc((size_t)m * 3 * sizeof *v);
    int64_t *idx = malloc((size_t)m * 3 * sizeof *idx);
    if (!v || !idx) {
        free(v);
        free(idx);
        return df_error(DF_ENOMEM, "out of memory");
    }
    double *lo = v + m, *hi = v + 2 * m;
    int64_t *group = idx + m, *size = idx + 2 * m, kept = 0, groups = 0, kept_groups = 0;
    int rc = metric_values(batch, id, metric, v);
    if (!rc) {
        group_rows(batch, n, v, group, size, lo, hi);
        for (int64_t i = 0; i < n; i++) {
            int64_t g = group[i];
            int keep = size[g] == 1 || hi[g] > lo[g]; /* std > 0 <=> not all equal */
            if (g == i) {
                groups++;
                kept_groups += keep;
            }
            if (keep)
                idx[kept++] = i;
        }
        rc = df_batch_select(batch, idx, kept, &out->batch);
    }
    if (!rc && ctx->metrics) {
        df_metrics_set(ctx->metrics, "dapo_sampling/kept_trajectories_ratio",
                       n ? (double)kept / (double)n : 1.0);
        df_metrics_set(ctx->metrics, "dapo_sampling/initial_trajectories", (double)n);
        df_metrics_set(ctx->metrics, "dapo_sampling/final_trajectories", (double)kept);
        df_metrics_set(ctx->metrics, "dapo_sampling/kept_groups", (double)kept_groups);
        df_metrics_set(ctx->metrics, "dapo_sampling/total_groups", (double)groups);
    }
    free(v);
    free(idx);
    return rc;
}

DF_API int df_plugin_init(void)
{
    return df_exec_register("filter.nonzero_std", filter_nonzero_std);
}
