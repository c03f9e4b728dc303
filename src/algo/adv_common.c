/* Shared pieces of the advantage estimators (adv_internal.h); whitening is in adv_whiten.c. */
#include "algo/adv_internal.h"

#include "algo/algo_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int check_finite(const char *who, const char *what, const df_adv_input *in, const float *x)
{
    for (int64_t i = 0; i < in->n; i++)
        for (int64_t t = in->offsets[i]; t < in->offsets[i + 1]; t++)
            if (!isfinite(x[t]))
                return df_error(DF_EINVAL, "%s: %s of sample %lld, token %lld is %g", who, what, (long long)i,
                                (long long)(t - in->offsets[i]), (double)x[t]);
    return DF_OK;
}

static int check_unit(const char *who, const char *name, float v)
{
    if (!(v >= 0 && v <= 1))
        return df_error(DF_EINVAL, "%s: %s must be in [0, 1], got %g", who, name, (double)v);
    return DF_OK;
}

int df_adv_check(const char *who, const df_adv_input *in, unsigned needs, const float *advantages,
                 const float *returns)
{
    if (!in)
        return df_error(DF_EINVAL, "%s: NULL input", who);
    int rc = df_algo_check_offsets(who, in->n, in->offsets);
    if (rc)
        return rc;
    const int64_t n = in->n, n_tok = in->offsets[n];
    if (n_tok > 0 && (!in->token_level_rewards || !advantages || !returns))
        return df_error(DF_EINVAL, "%s: NULL token_level_rewards, advantages or returns", who);
    if ((needs & DF_ADV_NEED_GROUP) && n > 0 && !in->group)
        return df_error(DF_EINVAL, "%s: group ids are NULL (%s compares the responses to one prompt)", who,
                        who);
    if ((needs & DF_ADV_NEED_VALUES) && n_tok > 0 && !in->values)
        return df_error(DF_EINVAL, "%s: values are NULL (%s needs a critic's values)", who, who);
    if ((needs & DF_ADV_NEED_BASELINES) && n > 0 && !in->reward_baselines)
        return df_error(DF_EINVAL,
                        "%s: reward_baselines are NULL (%s needs the reward of a greedy response "
                        "per sample)",
                        who, who);
    if ((needs & DF_ADV_NEED_GAMMA) && (rc = check_unit(who, "gamma", in->gamma)))
        return rc;
    if ((needs & DF_ADV_NEED_LAM) && (rc = check_unit(who, "lam", in->lam)))
        return rc;
    if (needs & DF_ADV_NEED_GROUP)
        for (int64_t i = 0; i < n; i++)
            if (in->group[i] < 0 || in->group[i] >= n)
                return df_error(DF_EINVAL, "%s: group id %lld of sample %lld is outside [0, %lld)", who,
                                (long long)in->group[i], (long long)i, (long long)n);
    if (n_tok > 0 && (rc = check_finite(who, "reward", in, in->token_level_rewards)))
        return rc;
    if ((needs & DF_ADV_NEED_VALUES) && n_tok > 0 && (rc = check_finite(who, "value", in, in->values)))
        return rc;
    if (needs & DF_ADV_NEED_BASELINES)
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(in->reward_baselines[i]))
                return df_error(DF_EINVAL, "%s: reward baseline of sample %lld is %g", who, (long long)i,
                                (double)in->reward_baselines[i]);
    return DF_OK;
}

void df_adv_groups_free(df_adv_groups *g)
{
    free(g->score), free(g->count), free(g->sum), free(g->mean), free(g->std), free(g->flat);
    memset(g, 0, sizeof *g);
}

int df_adv_groups_compute(const char *who, const df_adv_input *in, df_adv_groups *g)
{
    const int64_t n = in->n;
    size_t m = (size_t)(n > 0 ? n : 1);
    memset(g, 0, sizeof *g);
    g->score = malloc(m * sizeof *g->score);
    g->count = calloc(m, sizeof *g->count);
    g->sum = calloc(m, sizeof *g->sum);
    g->mean = calloc(m, sizeof *g->mean);
    g->std = calloc(m, sizeof *g->std);
    g->flat = calloc(m, sizeof *g->flat);
    /* first score of each group, to test flatness exactly (as torch.std == 0 does) */
    double *first = malloc(m * sizeof *first);
    if (!g->score || !g->count || !g->sum || !g->mean || !g->std || !g->flat || !first) {
        free(first);
        df_adv_groups_free(g);
        return df_error(DF_ENOMEM, "%s: out of memory for %lld samples", who, (long long)n);
    }
    for (int64_t i = 0; i < n; i++) {
        double s = 0;
        for (int64_t t = in->offsets[i]; t < in->offsets[i + 1]; t++)
            s += in->token_level_rewards[t];
        int64_t k = in->group[i];
        g->score[i] = s;
        if (g->count[k]++ == 0) {
            first[k] = s;
            g->flat[k] = true;
            g->n_groups++;
        } else if (s != first[k]) {
            g->flat[k] = false;
        }
        g->sum[k] += s;
    }
    /* two-pass variance: sum of squared deviations from the group mean */
    double *ssd = g->std;
    for (int64_t i = 0; i < n; i++) {
        int64_t k = in->group[i];
        double d = g->score[i] - g->sum[k] / (double)g->count[k];
        ssd[k] += d * d;
    }
    for (int64_t k = 0; k < n; k++) {
        if (g->count[k] >= 2) {
            g->mean[k] = g->sum[k] / (double)g->count[k];
            g->std[k] = sqrt(ssd[k] / (double)(g->count[k] - 1));
        } else {
            g->mean[k] = 0; /* verl: a group of one has mean 0, std 1 */
            g->std[k] = 1;
            g->flat[k] = false;
        }
        if (g->flat[k]) { /* exact: sum / count of equal scores can be off by an ulp */
            g->mean[k] = first[k];
            g->std[k] = 0;
            g->n_flat_groups++;
            g->n_flat_samples += g->count[k];
        }
    }
    free(first);
    return DF_OK;
}

void df_adv_broadcast(const df_adv_input *in, const double *a, float *advantages, float *returns)
{
    for (int64_t i = 0; i < in->n; i++)
        for (int64_t t = in->offsets[i]; t < in->offsets[i + 1]; t++) {
            advantages[t] = (float)a[i];
            if (returns)
                returns[t] = (float)a[i];
        }
}
