/*
 * Batch-level statistics of the advantage node over the whole data-parallel step batch:
 * whitening, and the counts the batch-level estimators scale by (gpg, cpgd).
 *
 * Advantage whitening over the whole data-parallel step batch. The estimators
 * that whiten (gae, reinforce_plus_plus, reinforce_plus_plus_baseline) would
 * otherwise use their rank's shard, as siiRL's DAG workers do; verl's single
 * controller whitens the whole batch, so an N-rank run would not reproduce the
 * one-rank run. The advantage node runs the estimator with defer_whiten and
 * whitens here with statistics gathered over the node's group in two rounds
 * (count and sum, then the squared deviations about the global mean), summed
 * in rank order so every rank applies the same bits.
 */
#include "workers/worker_internal.h"

#include "distflow/algo_desc.h"

#include <stdlib.h>
#include <string.h>

#define WHAT "whitening advantages"
#define GROUP "data-parallel group"

int df_worker_whiten_group(df_comm *comm, int rc, bool replica, int64_t n_tokens, float *adv, float *copy)
{
    return df_worker_whiten_group_masked(comm, rc, replica, n_tokens, NULL, adv, copy);
}

int df_worker_whiten_group_masked(df_comm *comm, int rc, bool replica, int64_t n_tokens, const int32_t *mask,
                                  float *adv, float *copy)
{
    /* round 1: (count, sum) and the failure flag; a replica's tokens are another rank's, counted there */
    double sum = 0;
    int64_t here = 0; /* this rank's counted tokens: the model's (mask 1) */
    if (!rc)
        rc = df_adv_whiten_masked_sum(n_tokens, adv, mask, &sum, &here);
    const bool counts = !rc && !replica;
    double mine[2] = {counts ? (double)here : 0, counts ? sum : 0}, tot[2] = {0, 0};
    rc = df_worker_group_sum(comm, rc, mine, 2, tot, WHAT, GROUP); /* the same verdict on every rank */
    const int64_t count = (int64_t)tot[0];
    const double total_sum = tot[1];
    /* round 2: the sum of squared deviations about the global mean, made by every rank too */
    double ssd = 0;
    if (!rc)
        rc = df_adv_whiten_masked_ssd(n_tokens, adv, mask, count, total_sum, &ssd);
    double mine2 = counts ? ssd : 0, tot2 = 0;
    rc = df_worker_group_sum(comm, rc, &mine2, 1, &tot2, WHAT, GROUP);
    if (!rc)
        rc = df_adv_whiten_masked_stats(n_tokens, adv, mask, count, total_sum, tot2, adv);
    if (!rc && copy && n_tokens > 0)
        memcpy(copy, adv, (size_t)n_tokens * sizeof *copy);
    return rc;
}

bool df_worker_defers_whiten(const df_dag_worker *w, const df_node *node)
{
    const df_node_layout *l = df_worker_node_layout(w, node);
    return l && l->dp_size > 1 && df_adv_estimator_whitens(w->global.cfg.algorithm.adv_estimator);
}

int df_worker_whiten_advantages(df_dag_worker *w, const df_node *node, int rc, df_batch *b)
{
    const df_node_layout *l = df_worker_node_layout(w, node);
    const int rc_in = rc; /* a local failure keeps its own message */
    const df_column *adv = NULL, *ret = NULL;
    if (!rc && !(adv = b ? df_batch_column(b, "advantages") : NULL))
        rc = df_error(DF_EINVAL, "whitening advantages: the batch has no advantages column");
    const char *name = w->global.cfg.algorithm.adv_estimator;
    if (!rc && df_adv_estimator_whitens_returns(name) && !(ret = df_batch_column(b, "returns")))
        rc = df_error(DF_EINVAL, "whitening advantages: the batch has no returns column (%s)", name);
    const int32_t *mask = NULL; /* multi-turn: the statistics of the model's tokens (verl masked_whiten) */
    if (!rc)
        rc = df_batch_response_mask(b, &mask);
    int64_t n_tok = rc ? 0 : adv->offsets[df_batch_size(b)];
    rc = df_worker_whiten_group_masked(w->group, rc, l && l->mp_rank != 0, n_tok, mask, rc ? NULL : adv->data,
                                       ret ? ret->data : NULL);
    if (rc && !rc_in)
        return df_error_wrap(rc, "algorithm.adv_estimator=%s over %d data-parallel ranks", name,
                             l ? l->dp_size : 1);
    return rc;
}

int df_worker_adv_batch_counts(df_dag_worker *w, const df_node *node, int rc, const df_adv_input *in,
                               df_adv_batch_counts *out, bool *use)
{
    const df_node_layout *l = df_worker_node_layout(w, node);
    const df_adv_estimator_desc *d = df_adv_estimator_find(w->global.cfg.algorithm.adv_estimator);
    *use = l && l->dp_size > 1 && d && (d->flags & DF_ADV_BATCH_COUNTS);
    if (!*use)
        return rc;
    df_adv_batch_counts c = {0};
    if (!rc && l->mp_rank == 0) /* a replica's samples are counted by the rank it copies */
        rc = df_adv_batch_counts_of(in, &c);
    /* counts below 2^53: exact as doubles */
    double mine[5] = {(double)c.n_samples, (double)c.n_nonzero_score, (double)c.n_flat_samples,
                      (double)c.n_groups, (double)c.n_flat_groups},
           tot[5] = {0};
    rc = df_worker_group_sum(w->group, rc, mine, 5, tot, "advantage batch counts", GROUP);
    *out = (df_adv_batch_counts){(int64_t)tot[0], (int64_t)tot[1], (int64_t)tot[2], (int64_t)tot[3],
                                 (int64_t)tot[4]};
    return rc;
}
