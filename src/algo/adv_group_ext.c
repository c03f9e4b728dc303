/*
 * Group estimators verl added after its first ones: rloo_vectorized and grpo_vectorized (the
 * vectorised rewrites, whose edge cases differ), grpo_passk (Pass@k) and opo (a length-weighted
 * baseline); include/distflow/algo.h, advest block.
 */
#include "algo/adv_internal.h"

#include <math.h>
#include <stdlib.h>

int df_adv_rloo_vectorized(const df_adv_input *in, float *advantages, float *returns)
{
    df_adv_groups g;
    double *a;
    int rc = df_adv_group_begin("rloo_vectorized", in, advantages, returns, &g, &a);
    if (rc)
        return rc;
    for (int64_t i = 0; i < in->n; i++) {
        const int64_t k = in->group[i], c = g.count[k];
        a[i] = c > 1 ? g.score[i] - (g.sum[k] - g.score[i]) / (double)(c - 1) : 0.0;
    }
    return df_adv_group_finish(in, &g, a, advantages, returns);
}

int df_adv_grpo_vectorized(const df_adv_input *in, float *advantages, float *returns)
{
    df_adv_groups g;
    double *a;
    int rc = df_adv_check_epsilon("grpo_vectorized", in);
    if (!rc)
        rc = df_adv_group_begin("grpo_vectorized", in, advantages, returns, &g, &a);
    if (rc)
        return rc;
    const double eps = in->epsilon;
    for (int64_t i = 0; i < in->n; i++) {
        const int64_t k = in->group[i];
        /* the variance floored at epsilon (the std itself above the floor); a group of one keeps 1 */
        const double std = g.count[k] < 2 || g.std[k] * g.std[k] >= eps ? g.std[k] : sqrt(eps);
        a[i] = g.score[i] - g.mean[k];
        if (in->norm_adv_by_std_in_grpo)
            a[i] /= std + eps;
    }
    return df_adv_group_finish(in, &g, a, advantages, returns);
}

/* Per group: its best sample (the first of its largest score), -1 for none yet, and the largest
   and second largest scores (repeats counted). */
typedef struct {
    int64_t best;
    double top, second;
} top2;

int df_adv_grpo_passk(const df_adv_input *in, float *advantages, float *returns)
{
    df_adv_groups g;
    double *a;
    int rc = df_adv_check_epsilon("grpo_passk", in);
    if (!rc)
        rc = df_adv_group_begin("grpo_passk", in, advantages, returns, &g, &a);
    if (rc)
        return rc;
    for (int64_t i = 0; i < in->n; i++)
        if (g.count[in->group[i]] < 2)
            return df_adv_group_release(&g, a, df_error(DF_EINVAL, "grpo_passk: sample %lld is its prompt's only "
                                      "response (Pass@k compares at least two: actor_rollout_ref.rollout.n >= 2)",
                                      (long long)i));
    top2 *tp = malloc((size_t)(in->n > 0 ? in->n : 1) * sizeof *tp);
    if (!tp)
        return df_adv_group_release(&g, a, df_error(DF_ENOMEM, "grpo_passk: out of memory for %lld samples",
                                                  (long long)in->n));
    for (int64_t i = 0; i < in->n; i++)
        tp[in->group[i]].best = -1;
    for (int64_t i = 0; i < in->n; i++) {
        top2 *t = &tp[in->group[i]];
        const double s = g.score[i];
        if (t->best < 0)
            *t = (top2){i, s, -INFINITY};
        else if (s > t->top)
            *t = (top2){i, s, t->top};
        else if (s > t->second)
            t->second = s;
        a[i] = 0.0;
    }
    for (int64_t i = 0; i < in->n; i++) {
        const int64_t k = in->group[i];
        if (tp[k].best != i)
            continue;
        a[i] = tp[k].top - tp[k].second;
        if (in->norm_adv_by_std_in_grpo)
            a[i] /= g.std[k] + (double)in->epsilon;
    }
    free(tp);
    return df_adv_group_finish(in, &g, a, advantages, returns);
}

int df_adv_opo(const df_adv_input *in, float *advantages, float *returns)
{
    df_adv_groups g;
    double *a;
    int rc = df_adv_group_begin("opo", in, advantages, returns, &g, &a);
    if (rc)
        return rc;
    double *len_sum = calloc((size_t)(in->n > 0 ? in->n : 1), sizeof *len_sum);
    double *wsum = calloc((size_t)(in->n > 0 ? in->n : 1), sizeof *wsum);
    if (!len_sum || !wsum) {
        free(len_sum), free(wsum);
        return df_adv_group_release(&g, a, df_error(DF_ENOMEM, "opo: out of memory for %lld samples", (long long)in->n));
    }
    for (int64_t i = 0; i < in->n; i++) {
        int64_t len; /* the model's tokens of sample i (response_mask) */
        df_loss_agg_count_masked(1, in->offsets + i, in->response_mask, &len, NULL);
        len_sum[in->group[i]] += (double)len;
        wsum[in->group[i]] += (double)len * g.score[i];
    }
    for (int64_t i = 0; i < in->n; i++) {
        const int64_t k = in->group[i];
        const double b = g.count[k] < 2 ? 0.0 : len_sum[k] > 0 ? wsum[k] / len_sum[k] : g.mean[k];
        a[i] = g.score[i] - b;
    }
    free(len_sum), free(wsum);
    return df_adv_group_finish(in, &g, a, advantages, returns);
}
