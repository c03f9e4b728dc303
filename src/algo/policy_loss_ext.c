/* Policy losses gspo, gpg and cpgd (include/distflow/algo.h, losses block). */
#include "distflow/algo.h"

#include "algo/algo_internal.h"
#include "algo/loss_internal.h"

#include <math.h>

/* verl compute_policy_loss_gspo clamps the sequence log-ratio at this value. */
#define GSPO_LOG_RATIO_MAX 10.0

int df_loss_check_input(const char *who, const df_policy_loss_input *in, const df_policy_loss_output *out,
                        bool need_old)
{
    if (!in || !out)
        return df_error(DF_EINVAL, "policy loss %s: NULL input or output", who);
    int rc = df_algo_check_offsets(who, in->n, in->offsets);
    if (rc)
        return rc;
    if (in->offsets[in->n] > 0 &&
        (!in->log_prob || !in->advantages || !in->weights || (need_old && !in->old_log_prob)))
        return df_error(DF_EINVAL, "policy loss %s: log_prob, %sadvantages and weights must all be given",
                        who, need_old ? "old_log_prob, " : "");
    return DF_OK;
}

int df_loss_check_clip(const char *who, const df_policy_loss_input *in)
{
    if (!(in->clip_ratio_low >= 0.0f) || !(in->clip_ratio_high >= 0.0f))
        return df_error(DF_EINVAL, "policy loss %s: clip ratios must be >= 0, got low %g high %g", who,
                        (double)in->clip_ratio_low, (double)in->clip_ratio_high);
    return DF_OK;
}

/* Statistics of a loss: token means over this call's model tokens (n_model of them). */
typedef struct {
    double loss, kl;
    int64_t n_clip, n_model;
} loss_sums;

static void finish(const loss_sums *s, df_policy_loss_output *out)
{
    df_loss_output(out, s->loss, s->kl, s->n_clip, 0, s->n_model);
}

/* ---------------------------------------------------------------- gspo */

/* Mean log-ratio of the model tokens of [a, b) into *x; false when there are none. */
static bool seq_log_ratio(const df_policy_loss_input *in, int64_t a, int64_t b, double *x)
{
    double s = 0;
    int64_t n = 0;
    for (int64_t t = a; t < b; t++)
        if (df_loss_model_token(in, t)) {
            s += (double)in->log_prob[t] - (double)in->old_log_prob[t];
            n++;
        }
    *x = n ? s / (double)n : 0.0;
    return n > 0;
}

int df_policy_loss_gspo(const df_policy_loss_input *in, df_policy_loss_output *out)
{
    int rc = df_loss_check_input("gspo", in, out, true);
    if (!rc)
        rc = df_loss_check_clip("gspo", in);
    if (rc)
        return rc;
    const double lo = 1.0 - in->clip_ratio_low, hi = 1.0 + in->clip_ratio_high;
    loss_sums s = {0};
    for (int64_t i = 0; i < in->n; i++) {
        int64_t a = in->offsets[i], b = in->offsets[i + 1];
        double x;
        if (!seq_log_ratio(in, a, b, &x)) { /* no model token: nothing to train */
            for (int64_t t = a; t < b; t++)
                df_loss_skip_token(in, t, out->grad);
            continue;
        }
        bool live = x <= GSPO_LOG_RATIO_MAX; /* the clamp stops the gradient above it */
        double sr = exp(live ? x : GSPO_LOG_RATIO_MAX);
        double sc = fmin(fmax(sr, lo), hi);
        for (int64_t t = a; t < b; t++) {
            if (df_loss_skip_token(in, t, out->grad))
                continue;
            double A = in->advantages[t], w = in->weights[t];
            double l1 = -A * sr, l2 = -A * sc;
            bool clipped = l2 > l1;
            s.loss += w * (clipped ? l2 : l1);
            s.n_clip += clipped;
            s.n_model++;
            s.kl += (double)in->old_log_prob[t] - (double)in->log_prob[t];
            if (out->grad)
                out->grad[t] = (float)(live && !clipped ? w * l1 : 0.0);
        }
    }
    finish(&s, out);
    return DF_OK;
}

/* ---------------------------------------------------------------- gpg */

int df_policy_loss_gpg(const df_policy_loss_input *in, df_policy_loss_output *out)
{
    int rc = df_loss_check_input("gpg", in, out, false);
    if (rc)
        return rc;
    const int64_t T = in->offsets[in->n];
    double loss = 0;
    for (int64_t t = 0; t < T; t++) {
        if (df_loss_skip_token(in, t, out->grad))
            continue;
        double A = in->advantages[t], w = in->weights[t];
        loss += w * (-A * (double)in->log_prob[t]);
        if (out->grad)
            out->grad[t] = (float)(-w * A);
    }
    loss_sums s = {.loss = loss};
    finish(&s, out); /* verl reports no statistics for gpg */
    return DF_OK;
}

/* ---------------------------------------------------------------- cpgd */

/* The drift term D(d) (k3 of KL(pi_old || pi_theta)) and dD/dd, linear past r - 1 = c. */
static double cpgd_drift(double d, double c, double *dd)
{
    double em1 = expm1(d);
    if (c <= 0 || em1 <= c) {
        *dd = em1;
        return em1 - d;
    }
    double d0 = log1p(c);
    *dd = c;
    return (c - d0) + c * (d - d0);
}

static int check_cpgd(const df_policy_loss_input *in, df_policy_loss_output *out)
{
    int rc = df_loss_check_input("cpgd", in, out, true);
    if (!rc)
        rc = df_loss_check_clip("cpgd", in);
    if (!rc && !(in->policy_drift_coeff >= 0))
        rc = df_error(DF_EINVAL, "policy loss cpgd: policy_drift_coeff must be >= 0, got %g",
                      in->policy_drift_coeff);
    return rc;
}

int df_policy_loss_cpgd(const df_policy_loss_input *in, df_policy_loss_output *out)
{
    int rc = check_cpgd(in, out);
    if (rc)
        return rc;
    /* clip bounds on the log-ratio; clip_ratio_low >= 1 leaves no lower bound */
    const double up = log1p((double)in->clip_ratio_high);
    const double down = in->clip_ratio_low < 1.0f ? log1p(-(double)in->clip_ratio_low) : -INFINITY;
    const double alpha = in->policy_drift_coeff;
    const int64_t T = in->offsets[in->n];
    loss_sums s = {0};
    for (int64_t t = 0; t < T; t++) {
        if (df_loss_skip_token(in, t, out->grad))
            continue;
        bool live;
        double d = df_loss_clamp_log_ratio((double)in->log_prob[t] - (double)in->old_log_prob[t], &live);
        double A = in->advantages[t], w = in->weights[t];
        /* pessimistic clip: only the side that would increase the objective is cut */
        bool clipped = (A > 0 && d > up) || (A < 0 && d < down);
        double pg = -A * (clipped ? (A > 0 ? up : down) : d);
        double dD = 0, D = alpha != 0 ? cpgd_drift(d, in->cpgd_drift_clip, &dD) : 0.0;
        s.loss += w * (pg + alpha * D);
        s.n_clip += clipped;
        s.n_model++;
        s.kl -= d;
        if (out->grad)
            out->grad[t] = (float)(live ? w * ((clipped ? 0.0 : -A) + alpha * dD) : 0.0);
    }
    finish(&s, out);
    return DF_OK;
}
