/*
 * KL penalty in the reward (algorithm.use_kl_in_reward; verl ray_trainer
 * apply_kl_penalty, volcengine/verl@00401103): inside the advantage node,
 * before the estimator,
 *   token_level_rewards = token_level_scores - beta * kl(old_log_probs, ref_log_prob)
 * with beta from the algorithm.kl_ctrl controller. The controller is stepped
 * with the mean KL of the whole data-parallel batch, so every rank keeps the
 * same coefficient.
 */
#include "workers/worker_internal.h"


/* A per-token column of b with the response's lengths, or an error naming what is missing. */
static int token_column(const df_batch *b, const char *name, const int64_t *like, const df_column **out)
{
    const df_column *c = df_batch_column(b, name);
    if (!c || c->kind != DF_COL_TOK_F32)
        return df_error(
            DF_EINVAL,
            "KL in reward: the batch has no per-token %s column (algorithm.use_kl_in_reward needs the "
            "reward, old-log-prob and reference nodes to run before the advantage node)",
            name);
    int64_t n = df_batch_size(b);
    for (int64_t i = 0; like && i < n; i++) {
        int64_t len = c->offsets[i + 1] - c->offsets[i], want = like[i + 1] - like[i];
        if (len != want)
            return df_error(DF_EINVAL, "KL in reward: sample %lld has %lld %s but %lld token_level_scores",
                            (long long)i, (long long)len, name, (long long)want);
    }
    *out = c;
    return DF_OK;
}

/*
 * The group's mean of per-sample KL means and its sample count: every rank's
 * (sum, count) summed in rank order with the failure flag
 * (df_worker_group_sum), so the result is the same bits on every rank. Every
 * rank calls this, failed (rc != 0) or not, so that a local error ends the
 * call on every rank instead of leaving the others waiting. Replicas
 * (model-parallel ranks holding a copy of another rank's data) contribute
 * nothing.
 */
static int group_mean(df_comm *comm, int rc, double sum, double count, double *mean, int64_t *total)
{
    double mine[2] = {sum, count}, tot[2];
    rc = df_worker_group_sum(comm, rc, mine, 2, tot, "KL in reward: gathering the KL means",
                             "data-parallel group");
    if (rc)
        return rc;
    *mean = tot[1] > 0 ? tot[0] / tot[1] : 0.0;
    *total = (int64_t)tot[1];
    return DF_OK;
}

int df_kl_reward_apply(df_kl_ctrl *ctrl, const char *penalty, df_batch *b, df_comm *comm, bool replica,
                       df_metrics *m)
{
    int64_t n = b ? df_batch_size(b) : 0;
    const df_column *sc = NULL, *old = NULL, *ref = NULL;
    int rc = ctrl && b ? DF_OK : df_error(DF_EINVAL, "KL in reward: NULL controller or batch");
    if (!rc)
        rc = token_column(b, "token_level_scores", NULL, &sc);
    if (!rc)
        rc = token_column(b, "old_log_probs", sc->offsets, &old);
    if (!rc)
        rc = token_column(b, "ref_log_prob", sc->offsets, &ref);
    float *rewards = NULL;
    if (!rc) /* replaces the reward node's copy of the scores */
        rc = df_batch_alloc_tok_f32_like(b, "token_level_rewards", "token_level_scores", &rewards);
    double beta = rc ? 0 : df_kl_ctrl_value(ctrl), local = 0;
    const int32_t *mask = NULL; /* multi-turn: no KL on appended tokens (verl: kld * response_mask) */
    if (!rc)
        rc = df_batch_response_mask(b, &mask);
    if (!rc) /* looked up again: adding a column may move the column table */
        rc = df_kl_apply_in_reward_masked(penalty, n, df_batch_offsets(b, "token_level_scores"), mask,
                                          df_batch_column(b, "token_level_scores")->data,
                                          df_batch_column(b, "old_log_probs")->data,
                                          df_batch_column(b, "ref_log_prob")->data, (float)beta, rewards,
                                          &local);
    double mean = 0;
    int64_t total = 0;
    bool counted = !rc && !replica;
    rc = group_mean(comm, rc, counted ? local * (double)n : 0, counted ? (double)n : 0, &mean, &total);
    /* verl passes the batch size as n_steps: the global number of responses */
    if (!rc)
        rc = df_kl_ctrl_step(ctrl, mean, total, m);
    return rc ? df_error_wrap(rc, "algorithm.use_kl_in_reward (kl_penalty=%s)", penalty ? penalty : "(null)")
              : DF_OK;
}

int df_worker_kl_in_reward(df_dag_worker *w, const df_node *node, df_batch *b, df_metrics *m)
{
    if (!w->advantage.kl_ctrl)
        return DF_OK;
    const df_node_layout *l = df_worker_node_layout(w, node);
    return df_kl_reward_apply(w->advantage.kl_ctrl, w->global.cfg.algorithm.kl_penalty, b, w->group,
                              l && l->mp_rank != 0, m);
}
