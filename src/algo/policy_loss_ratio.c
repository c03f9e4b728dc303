/* Policy losses that reshape the importance ratio: cispo (clipped weight, no gradient through
 * it), sapo (a smooth gate) and geo_mean (the sequence's geometric-mean ratio); include/distflow/
 * algo.h, losses block. */
#include "distflow/algo.h"

#include "algo/algo_internal.h"
#include "algo/loss_internal.h"

#include <math.h>

/* ---------------------------------------------------------------- cispo */

int df_policy_loss_cispo(const df_policy_loss_input *in, df_policy_loss_output *out)
{
    int rc = df_loss_check_input("cispo", in, out, true);
    if (!rc)
        rc = df_loss_check_clip("cispo", in);
    if (rc)
        return rc;
    const double lo = 1.0 - in->clip_ratio_low, hi = 1.0 + in->clip_ratio_high;
    const int64_t T = in->offsets[in->n];
    double loss = 0, kl = 0;
    int64_t n_clip = 0, n_model = 0;
    for (int64_t t = 0; t < T; t++) {
        if (df_loss_skip_token(in, t, out->grad))
            continue;
        bool live;
        double d = df_loss_clamp_log_ratio((double)in->log_prob[t] - (double)in->old_log_prob[t], &live);
        double r = exp(d), c = fmin(fmax(r, lo), hi); /* data: no gradient flows through c */
        double A = in->advantages[t], w = in->weights[t];
        loss += w * (-c * A * (double)in->log_prob[t]);
        kl -= d;
        n_clip += r != c;
        n_model++;
        if (out->grad)
            out->grad[t] = (float)(-w * c * A);
    }
    df_loss_output(out, loss, kl, n_clip, 0, n_model);
    return DF_OK;
}

/* ---------------------------------------------------------------- sapo */

/* The logistic function without overflow for either sign of x. */
static double sigmoid(double x)
{
    if (x >= 0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

int df_policy_loss_sapo(const df_policy_loss_input *in, df_policy_loss_output *out)
{
    int rc = df_loss_check_input("sapo", in, out, true);
    if (rc)
        return rc;
    if (!(in->tau_pos > 0) || !(in->tau_neg > 0) || !isfinite(in->tau_pos) || !isfinite(in->tau_neg))
        return df_error(DF_EINVAL, "policy loss sapo: tau_pos and tau_neg must be > 0, got %g and %g", in->tau_pos,
                        in->tau_neg);
    const int64_t T = in->offsets[in->n];
    double loss = 0, kl = 0;
    int64_t n_model = 0;
    for (int64_t t = 0; t < T; t++) {
        if (df_loss_skip_token(in, t, out->grad))
            continue;
        bool live;
        double d = df_loss_clamp_log_ratio((double)in->log_prob[t] - (double)in->old_log_prob[t], &live);
        double r = exp(d), A = in->advantages[t], w = in->weights[t];
        double tau = A > 0 ? in->tau_pos : in->tau_neg, s = sigmoid(tau * (r - 1.0));
        loss += w * (-A * s * 4.0 / tau);
        kl -= d;
        n_model++;
        if (out->grad) /* d/dd of s 4 / tau: 4 s (1 - s) r */
            out->grad[t] = (float)(live ? -w * A * 4.0 * s * (1.0 - s) * r : 0.0);
    }
    df_loss_output(out, loss, kl, 0, 0, n_model);
    return DF_OK;
}

/* ---------------------------------------------------------------- geo_mean */

/* verl's guard in the means over a sequence's tokens */
#define GMPO_EPS 1e-8

/* m_t of one token and whether its derivative in d is 1 (else 0): the pessimistic side of the
   clipped log-ratio in A's direction. */
static double gmpo_term(double d, double A, double lo, double hi, bool *live)
{
    double s = A > 0 ? 1.0 : A < 0 ? -1.0 : 0.0, dc = fmin(fmax(d, -lo), hi);
    *live = s != 0 && s * d <= s * dc;
    return s * fmin(s * d, s * dc);
}

int df_policy_loss_geo_mean(const df_policy_loss_input *in, df_policy_loss_output *out)
{
    int rc = df_loss_check_input("geo_mean", in, out, true);
    if (!rc)
        rc = df_loss_check_clip("geo_mean", in);
    if (rc)
        return rc;
    const double lo = in->clip_ratio_low, hi = in->clip_ratio_high;
    double loss = 0, kl = 0;
    int64_t n_clip = 0, n_lower = 0, n_model = 0;
    for (int64_t i = 0; i < in->n; i++) {
        const int64_t a = in->offsets[i], b = in->offsets[i + 1];
        double msum = 0, asum = 0, wsum = 0;
        int64_t n_i = 0;
        bool live;
        for (int64_t t = a; t < b; t++) {
            if (!df_loss_model_token(in, t))
                continue;
            double d = (double)in->log_prob[t] - (double)in->old_log_prob[t], A = in->advantages[t];
            msum += gmpo_term(d, A, lo, hi, &live);
            asum += A;
            wsum += in->weights[t];
            n_i++;
            bool clipped = d < -lo || d > hi;
            n_clip += clipped && A > 0;
            n_lower += clipped && A < 0;
            kl -= d;
        }
        n_model += n_i;
        const double den = (double)n_i + GMPO_EPS, L = -(asum / den) * exp(msum / den);
        loss += wsum * L;
        for (int64_t t = a; t < b; t++) {
            if (df_loss_skip_token(in, t, out->grad) || !out->grad)
                continue;
            double d = (double)in->log_prob[t] - (double)in->old_log_prob[t];
            gmpo_term(d, in->advantages[t], lo, hi, &live);
            out->grad[t] = (float)(live ? wsum * L / den : 0.0);
        }
    }
    df_loss_output(out, loss, kl, n_clip, n_lower, n_model);
    return DF_OK;
}
