/*
 * verl's rollout correction at the advantage node (compute_rollout_correction_and_add_to_batch,
 * decoupled mode): with algorithm.rollout_correction.rollout_is the batch gets rollout_is_weights
 * (truncated importance weights of old_log_probs against the rollout engine's, which the policy
 * loss multiplies), with rollout_rs the rejected tokens / sequences leave response_mask, before the
 * estimator runs. rollout_is_batch_normalize divides the weights by their mean over the whole
 * data-parallel step batch. Kernels: src/algo/rollout_corr_is.c.
 */
#include "workers/worker_internal.h"

#include <stdlib.h>

/* This rank's weights (into the batch) and rejections (into mask_out), and the normalisation's sums. */
static int shard(const df_dag_worker *w, df_batch *b, int32_t **mask_out, double norm[2], df_metrics *m)
{
    const struct df_train_algorithm_rollout_correction *co = &w->global.cfg.algorithm.rollout_correction;
    int level = 0;
    df_rollout_rs rs = {0};
    int rc = df_rollout_is_parse(co->rollout_is, &level);
    if (!rc)
        rc = df_rollout_rs_parse(co->rollout_rs, co->rollout_rs_threshold, &rs);
    const df_column *old = df_batch_column(b, "old_log_probs"), *ro = df_batch_column(b, "rollout_log_probs");
    if (!rc && (!old || !ro))
        rc = df_error(DF_EINVAL, "algorithm.rollout_correction needs old_log_probs and the rollout's "
                                 "rollout_log_probs before the advantage; the batch lacks %s",
                      old ? "rollout_log_probs" : "old_log_probs");
    const int32_t *mask = NULL;
    if (!rc)
        rc = df_batch_response_mask(b, &mask);
    const int64_t n = rc ? 0 : df_batch_size(b), n_tok = rc ? 0 : old->offsets[n];
    float *wts = NULL;
    if (!rc && level)
        rc = df_batch_alloc_tok_f32_like(b, "rollout_is_weights", "response_ids", &wts);
    if (!rc && rs.n && !(*mask_out = malloc((size_t)(n_tok > 0 ? n_tok : 1) * sizeof **mask_out)))
        rc = df_error(DF_ENOMEM, "out of memory for the rejection mask of %lld tokens", (long long)n_tok);
    const df_rollout_corr_cfg cfg = {.is_level = level, .is_threshold = co->rollout_is_threshold, .rs = &rs};
    if (!rc)
        rc = df_rollout_correction(&cfg, n, old->offsets, mask, old->data, ro->data, wts, *mask_out, norm, m);
    return rc;
}

int df_worker_rollout_correction(df_dag_worker *w, const df_node *node, int rc, df_batch *b, df_metrics *m)
{
    if (!df_train_rollout_correction_decoupled(&w->global.cfg)) /* off, or in the loss (bypass) */
        return rc;
    const struct df_train_algorithm_rollout_correction *co = &w->global.cfg.algorithm.rollout_correction;
    const df_node_layout *l = df_worker_node_layout(w, node);
    int32_t *mask_out = NULL;
    double norm[2] = {0, 0};
    if (!rc)
        rc = shard(w, b, &mask_out, norm, m);
    if (co->rollout_is && co->rollout_is_batch_normalize) { /* collective: every rank, failed or not */
        double mine[2] = {l && l->mp_rank != 0 ? 0 : norm[0], l && l->mp_rank != 0 ? 0 : norm[1]}, tot[2];
        rc = df_worker_group_sum(w->group, rc, mine, 2, tot, "rollout_is_batch_normalize",
                                 "data-parallel group");
        if (!rc)
            rc = df_rollout_is_normalize(df_batch_size(b), df_batch_offsets(b, "response_ids"), NULL, tot,
                                         (float *)df_batch_column(b, "rollout_is_weights")->data, m);
    }
    if (!rc && mask_out) /* the rejected tokens leave the batch's response_mask (verl) */
        rc = df_batch_set_tok_i32(b, "response_mask", df_batch_offsets(b, "response_ids"), mask_out);
    free(mask_out);
    return rc;
}
