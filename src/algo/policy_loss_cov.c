/* Covariance-selected policy losses clip_cov and kl_cov (include/distflow/algo.h,
 * losses block; Cui et al. 2025, arXiv 2505.22617). */
#include "distflow/algo.h"
#include "distflow/rng.h"

#include "algo/loss_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { KIND_CLIP = 1, KIND_KL = 2 };

/* A token's place in the selection order: smaller keys first (kl_cov negates cov). */
typedef struct {
    double key;
    int64_t index;
} sel_key;

static int key_cmp(const void *pa, const void *pb)
{
    const sel_key *a = pa, *b = pb;
    if (a->key != b->key)
        return a->key < b->key ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

static bool key_le(double key, int64_t index, double tkey, int64_t tindex)
{
    return key < tkey || (key == tkey && index <= tindex);
}

/* clip_cov's random key of batch token g: uniform [0, 1) from (seed, g). */
static double token_key(uint64_t seed, int64_t g)
{
    return (double)(df_rng_key(seed, (uint64_t)g, 0, 0) >> 11) * 0x1.0p-53;
}

/* PPO's ratio clip of one token, as verl's clip_by_origin (pg_losses2 > pg_losses1); *d is the
   clamped log-ratio. */
static bool ppo_clipped(const df_policy_loss_input *in, int64_t t, double *l1, double *l2, double *d,
                        bool *live)
{
    *d = df_loss_clamp_log_ratio((double)in->log_prob[t] - (double)in->old_log_prob[t], live);
    double r = exp(*d), A = in->advantages[t];
    *l1 = -A * r;
    *l2 = -A * fmin(fmax(r, 1.0 - in->clip_ratio_low), 1.0 + in->clip_ratio_high);
    return *l2 > *l1;
}

static int check_cov(const char *who, int kind, const df_policy_loss_input *in,
                     const df_policy_loss_output *out)
{
    int rc = df_loss_check_input(who, in, out, true);
    if (rc)
        return rc;
    double ratio = kind == KIND_CLIP ? in->clip_cov_ratio : in->kl_cov_ratio;
    if (!(ratio > 0))
        return df_error(DF_EINVAL, "policy loss %s: %s must be > 0, got %g", who,
                        kind == KIND_CLIP ? "clip_cov_ratio" : "kl_cov_ratio", ratio);
    if (kind == KIND_CLIP)
        return df_loss_check_clip(who, in);
    if (!(in->ppo_kl_coef >= 0))
        return df_error(DF_EINVAL, "policy loss %s: ppo_kl_coef must be >= 0, got %g", who, in->ppo_kl_coef);
    return DF_OK;
}

/* Selection key of token t given the means; false when t is not a candidate. `clipped`: t's
   ppo_clipped (clip_cov only; kl_cov ignores it). */
static bool candidate_key(int kind, const df_policy_loss_input *in, double adv_mean, double logp_mean,
                          int64_t t, bool clipped, double *key)
{
    double cov = ((double)in->advantages[t] - adv_mean) * ((double)in->log_prob[t] - logp_mean);
    if (kind == KIND_KL) {
        *key = -cov; /* largest covariance first */
        return true;
    }
    if (clipped || !(cov > in->clip_cov_lb && cov < in->clip_cov_ub))
        return false;
    *key = token_key(in->seed, in->token_base + t);
    return true;
}

static int compute_stats(int kind, const df_policy_loss_input *in, df_cov_stats *st)
{
    const int64_t T = in->offsets[in->n];
    memset(st, 0, sizeof *st);
    st->kind = kind;
    double sa = 0, sl = 0;
    int64_t n = 0; /* model tokens: verl's means, k and candidates are over response_mask */
    for (int64_t t = 0; t < T; t++)
        if (df_loss_model_token(in, t)) {
            sa += in->advantages[t];
            sl += in->log_prob[t];
            n++;
        }
    st->n_tokens = n;
    if (n == 0)
        return DF_OK;
    st->adv_mean = sa / (double)n;
    st->logp_mean = sl / (double)n;
    sel_key *keys = malloc((size_t)n * sizeof *keys);
    if (!keys)
        return df_error(DF_ENOMEM, "out of memory for %lld covariance keys", (long long)T);
    int64_t nc = 0;
    for (int64_t t = 0; t < T; t++) {
        if (!df_loss_model_token(in, t))
            continue;
        double l1, l2, d;
        bool live, clipped = kind == KIND_CLIP && ppo_clipped(in, t, &l1, &l2, &d, &live);
        if (candidate_key(kind, in, st->adv_mean, st->logp_mean, t, clipped, &keys[nc].key))
            keys[nc++].index = in->token_base + t;
    }
    /* verl: max(int(ratio * n_valid), 1), int() truncating the double product */
    double ratio = kind == KIND_CLIP ? in->clip_cov_ratio : in->kl_cov_ratio;
    int64_t k = (int64_t)(ratio * (double)n);
    k = k < 1 ? 1 : k;
    st->n_select = k < nc ? k : nc;
    if (st->n_select > 0) {
        qsort(keys, (size_t)nc, sizeof *keys, key_cmp);
        st->key_threshold = keys[st->n_select - 1].key;
        st->index_threshold = keys[st->n_select - 1].index;
    }
    free(keys);
    return DF_OK;
}

int df_cov_stats_compute(const char *loss_mode, const df_policy_loss_input *in, df_cov_stats *out)
{
    int kind = !loss_mode                       ? 0
               : !strcmp(loss_mode, "clip_cov") ? KIND_CLIP
               : !strcmp(loss_mode, "kl_cov")   ? KIND_KL
                                                : 0;
    if (!kind)
        return df_error(DF_EINVAL, "covariance statistics: unknown loss mode '%s' (known: clip_cov, kl_cov)",
                        loss_mode ? loss_mode : "(null)");
    df_policy_loss_output dummy = {0};
    int rc = check_cov(loss_mode, kind, in, &dummy);
    if (!rc && !out)
        rc = df_error(DF_EINVAL, "covariance statistics: NULL output");
    return rc ? rc : compute_stats(kind, in, out);
}

/* The statistics to select with: in->cov, or this call's own. */
static int stats_for(const char *who, int kind, const df_policy_loss_input *in, df_cov_stats *own,
                     const df_cov_stats **st)
{
    if (in->cov) {
        if (in->cov->kind != kind)
            return df_error(DF_EINVAL, "policy loss %s: covariance statistics were computed for %s", who,
                            in->cov->kind == KIND_CLIP ? "clip_cov" : "kl_cov");
        *st = in->cov;
        return DF_OK;
    }
    *st = own;
    return compute_stats(kind, in, own);
}

static bool selected(int kind, const df_policy_loss_input *in, const df_cov_stats *st, int64_t t,
                     bool clipped)
{
    double key;
    if (st->n_select == 0 || !candidate_key(kind, in, st->adv_mean, st->logp_mean, t, clipped, &key))
        return false;
    return key_le(key, in->token_base + t, st->key_threshold, st->index_threshold);
}

int df_policy_loss_clip_cov(const df_policy_loss_input *in, df_policy_loss_output *out)
{
    const df_cov_stats *st;
    df_cov_stats own;
    int rc = check_cov("clip_cov", KIND_CLIP, in, out);
    if (!rc)
        rc = stats_for("clip_cov", KIND_CLIP, in, &own, &st);
    if (rc)
        return rc;
    const int64_t T = in->offsets[in->n];
    double loss = 0, kl = 0;
    int64_t n_sel = 0, n_model = 0;
    for (int64_t t = 0; t < T; t++) {
        if (df_loss_skip_token(in, t, out->grad))
            continue;
        n_model++;
        double l1, l2, d, w = in->weights[t];
        bool live, clipped = ppo_clipped(in, t, &l1, &l2, &d, &live);
        bool sel = selected(KIND_CLIP, in, st, t, clipped);
        /* verl multiplies the loss by corr = 0: the token drops out entirely */
        loss += sel ? 0.0 : w * (clipped ? l2 : l1);
        n_sel += sel;
        kl -= d;
        if (out->grad)
            out->grad[t] = (float)(!sel && !clipped && live ? w * l1 : 0.0);
    }
    df_loss_output(out, loss, kl, n_sel, 0, n_model);
    return DF_OK;
}

int df_policy_loss_kl_cov(const df_policy_loss_input *in, df_policy_loss_output *out)
{
    const df_cov_stats *st;
    df_cov_stats own;
    int rc = check_cov("kl_cov", KIND_KL, in, out);
    if (!rc)
        rc = stats_for("kl_cov", KIND_KL, in, &own, &st);
    if (rc)
        return rc;
    const int64_t T = in->offsets[in->n];
    double loss = 0, kl_abs = 0;
    int64_t n_model = 0;
    for (int64_t t = 0; t < T; t++) {
        if (df_loss_skip_token(in, t, out->grad))
            continue;
        n_model++;
        bool live;
        double d = df_loss_clamp_log_ratio((double)in->log_prob[t] - (double)in->old_log_prob[t], &live);
        double A = in->advantages[t], w = in->weights[t], r = exp(d);
        bool sel = selected(KIND_KL, in, st, t, false);
        double pen = sel ? in->ppo_kl_coef : 0.0;
        loss += w * (-A * r + pen * fabs(d));
        kl_abs += fabs(d);
        if (out->grad) /* d|x|/dx = sign(x), 0 at 0 as torch.abs */
            out->grad[t] = (float)(live ? w * (-A * r + pen * (double)((d > 0) - (d < 0))) : 0.0);
    }
    df_loss_output(out, loss, kl_abs, 0, 0, n_model);
    return DF_OK;
}
