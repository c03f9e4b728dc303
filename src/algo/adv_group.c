/*
 * Outcome estimators that compare the responses to one prompt: grpo, rloo,
 * reinforce_plus_plus_baseline, gpg, gpg_paper, cpgd (include/distflow/algo.h, advest
 * block; formulas, sources and the differences from verl / siiRL there).
 */
#include "algo/adv_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int df_adv_group_begin(const char *who, const df_adv_input *in, const float *adv, const float *ret,
                       df_adv_groups *g, double **a)
{
    *a = NULL;
    int rc = df_adv_check(who, in, DF_ADV_NEED_GROUP, adv, ret);
    if (!rc)
        rc = df_adv_groups_compute(who, in, g);
    if (rc)
        return rc;
    *a = malloc((size_t)(in->n > 0 ? in->n : 1) * sizeof **a);
    if (!*a) {
        df_adv_groups_free(g);
        return df_error(DF_ENOMEM, "%s: out of memory for %lld samples", who, (long long)in->n);
    }
    return DF_OK;
}

int df_adv_group_finish(const df_adv_input *in, df_adv_groups *g, double *a, float *adv, float *ret)
{
    df_adv_broadcast(in, a, adv, ret);
    return df_adv_group_release(g, a, DF_OK);
}

int df_adv_group_release(df_adv_groups *g, double *a, int rc)
{
    df_adv_groups_free(g);
    free(a);
    return rc;
}

int df_adv_check_epsilon(const char *who, const df_adv_input *in)
{
    if (in && !(in->epsilon >= 0))
        return df_error(DF_EINVAL, "%s: epsilon must be >= 0, got %g", who, (double)in->epsilon);
    return DF_OK;
}

int df_adv_grpo(const df_adv_input *in, float *advantages, float *returns)
{
    df_adv_groups g;
    double *a;
    int rc = df_adv_check_epsilon("grpo", in);
    if (!rc)
        rc = df_adv_group_begin("grpo", in, advantages, returns, &g, &a);
    if (rc)
        return rc;
    for (int64_t i = 0; i < in->n; i++) {
        const int64_t k = in->group[i];
        a[i] = g.score[i] - g.mean[k];
        if (in->norm_adv_by_std_in_grpo)
            a[i] /= g.std[k] + (double)in->epsilon;
    }
    return df_adv_group_finish(in, &g, a, advantages, returns);
}

int df_adv_rloo(const df_adv_input *in, float *advantages, float *returns)
{
    df_adv_groups g;
    double *a;
    int rc = df_adv_group_begin("rloo", in, advantages, returns, &g, &a);
    if (rc)
        return rc;
    for (int64_t i = 0; i < in->n; i++) {
        const int64_t k = in->group[i], c = g.count[k];
        /* the mean of the other c - 1 scores; none for a group of one (verl keeps the score) */
        a[i] = c > 1 ? g.score[i] - (g.sum[k] - g.score[i]) / (double)(c - 1) : g.score[i];
    }
    return df_adv_group_finish(in, &g, a, advantages, returns);
}

int df_adv_reinforce_plus_plus_baseline(const df_adv_input *in, float *advantages, float *returns)
{
    const char *who = "reinforce_plus_plus_baseline";
    df_adv_groups g;
    double *a;
    int rc = df_adv_group_begin(who, in, advantages, returns, &g, &a);
    if (rc)
        return rc;
    const int64_t n_tok = in->offsets[in->n];
    double *tok = malloc((size_t)(n_tok > 0 ? n_tok : 1) * sizeof *tok);
    if (!tok)
        return df_adv_group_release(&g, a, df_error(DF_ENOMEM, "%s: out of memory for %lld tokens", who,
                                                  (long long)n_tok));
    for (int64_t i = 0; i < in->n; i++) {
        a[i] = g.score[i] - g.mean[in->group[i]];
        for (int64_t t = in->offsets[i]; t < in->offsets[i + 1]; t++)
            tok[t] = a[i];
    }
    /* whiten the broadcast values over tokens, as verl does after tiling to the response length;
       deferred: both outputs unwhitened, the caller whitens both (df_adv_estimator_whitens_returns) */
    df_adv_finish_whiten(in, n_tok, tok, advantages);
    if (n_tok > 0)
        memcpy(returns, advantages, (size_t)n_tok * sizeof *returns);
    free(tok);
    return df_adv_group_release(&g, a, DF_OK);
}

static void counts_of(const df_adv_input *in, const df_adv_groups *g, df_adv_batch_counts *c)
{
    *c = (df_adv_batch_counts){.n_samples = in->n, .n_flat_samples = g->n_flat_samples,
                               .n_groups = g->n_groups, .n_flat_groups = g->n_flat_groups};
    for (int64_t i = 0; i < in->n; i++)
        c->n_nonzero_score += g->score[i] != 0;
}

int df_adv_batch_counts_of(const df_adv_input *in, df_adv_batch_counts *out)
{
    df_adv_groups g;
    const float *none = in ? in->token_level_rewards : NULL; /* no outputs: checked for NULL only */
    int rc = df_adv_check("df_adv_batch_counts_of", in, DF_ADV_NEED_GROUP, none, none);
    if (!rc)
        rc = df_adv_groups_compute("df_adv_batch_counts_of", in, &g);
    if (rc)
        return rc;
    counts_of(in, &g, out);
    df_adv_groups_free(&g);
    return DF_OK;
}

/* The whole batch's counts: the caller's, or this input's own. */
static df_adv_batch_counts batch_counts(const df_adv_input *in, const df_adv_groups *g)
{
    df_adv_batch_counts c;
    if (in->batch_counts)
        return *in->batch_counts;
    counts_of(in, g, &c);
    return c;
}

/* GPG's advantage with a given alpha; F_norm = 1 as verl. */
static int gpg(const char *who, const df_adv_input *in, bool paper, float *advantages, float *returns)
{
    df_adv_groups g;
    double *a;
    int rc = df_adv_group_begin(who, in, advantages, returns, &g, &a);
    if (rc)
        return rc;
    const df_adv_batch_counts c = batch_counts(in, &g);
    /* paper: B - M, the samples outside flat groups, the only ones with a gradient;
     * verl: the samples with a non-zero score */
    const int64_t m = paper ? c.n_samples - c.n_flat_samples : c.n_nonzero_score;
    /* m = 0: every centred score is 0, so alpha does not matter (verl clamps m to 1) */
    const double alpha = (double)c.n_samples / (double)(m > 0 ? m : 1);
    for (int64_t i = 0; i < in->n; i++)
        a[i] = alpha * (g.score[i] - g.mean[in->group[i]]);
    return df_adv_group_finish(in, &g, a, advantages, returns);
}

int df_adv_gpg(const df_adv_input *in, float *advantages, float *returns)
{
    return gpg("gpg", in, false, advantages, returns);
}

int df_adv_gpg_paper(const df_adv_input *in, float *advantages, float *returns)
{
    return gpg("gpg_paper", in, true, advantages, returns);
}

enum cpgd_weight { CPGD_STD, CPGD_CLIP_FILTER, CPGD_NAIVE };

static int cpgd_options(const df_adv_input *in, enum cpgd_weight *mode, double *clip)
{
    const char *f = in->cpgd_weight_factor;
    if (!f || !strcmp(f, "STD_weight"))
        *mode = CPGD_STD;
    else if (!strcmp(f, "clip_filter_like_weight"))
        *mode = CPGD_CLIP_FILTER;
    else if (!strcmp(f, "naive"))
        *mode = CPGD_NAIVE;
    else
        return df_error(DF_EINVAL,
                        "cpgd: unknown weight factor '%s' (known: STD_weight, "
                        "clip_filter_like_weight, naive)",
                        f);
    int rc = df_adv_check_epsilon("cpgd", in);
    if (rc)
        return rc;
    if (!(in->cpgd_weight_clip >= 0))
        return df_error(DF_EINVAL, "cpgd: cpgd_weight_clip must be >= 0 (0: 3), got %g",
                        (double)in->cpgd_weight_clip);
    *clip = in->cpgd_weight_clip > 0 ? in->cpgd_weight_clip : 3.0;
    return DF_OK;
}

int df_adv_cpgd(const df_adv_input *in, float *advantages, float *returns)
{
    enum cpgd_weight mode = CPGD_STD;
    double clip = 3;
    int rc = in ? cpgd_options(in, &mode, &clip) : DF_OK;
    df_adv_groups g;
    double *a;
    if (!rc)
        rc = df_adv_group_begin("cpgd", in, advantages, returns, &g, &a);
    if (rc)
        return rc;
    /* clip-filter-like weight: groups over non-flat groups (MM-EUREKA's prompts ratio), capped */
    const df_adv_batch_counts c = batch_counts(in, &g);
    const int64_t valid_groups = c.n_groups - c.n_flat_groups;
    double w = valid_groups > 0 ? (double)c.n_groups / (double)valid_groups : 1.0;
    w = fmin(w, clip);
    for (int64_t i = 0; i < in->n; i++) {
        const int64_t k = in->group[i];
        const double centred = g.score[i] - g.mean[k];
        switch (mode) {
        case CPGD_STD: a[i] = centred / (g.std[k] + (double)in->epsilon); break;
        case CPGD_CLIP_FILTER: a[i] = g.flat[k] ? centred : w * centred; break;
        case CPGD_NAIVE: a[i] = centred; break;
        }
    }
    return df_adv_group_finish(in, &g, a, advantages, returns);
}
