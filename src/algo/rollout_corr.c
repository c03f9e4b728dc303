/* Rollout-training mismatch: truncated importance sampling weights and the
 * diagnostics verl logs (include/distflow/algo.h, losses block). */
#include "distflow/algo.h"
#include "algo/loss_internal.h"
#include "distflow/metrics.h"

#include "algo/algo_internal.h"

#include <math.h>
#include <string.h>

int df_tis_weights(int64_t n_tokens, const float *old_log_prob, const float *rollout_log_prob, double cap,
                   const float *w_in, float *w_out)
{
    if (n_tokens < 0)
        return df_error(DF_EINVAL, "TIS weights: negative token count %lld", (long long)n_tokens);
    if (!(cap > 0) || !isfinite(cap))
        return df_error(DF_EINVAL, "TIS weights: tis_imp_ratio_cap must be a finite value > 0, got %g", cap);
    if (n_tokens > 0 && (!old_log_prob || !rollout_log_prob || !w_out))
        return df_error(DF_EINVAL, "TIS weights: NULL log-prob or output array");
    const double log_cap = log(cap);
    for (int64_t t = 0; t < n_tokens; t++) {
        /* min(exp(x), cap) = exp(min(x, ln cap)): no overflow for large x */
        double x = (double)old_log_prob[t] - (double)rollout_log_prob[t];
        double tis = exp(fmin(x, log_cap));
        w_out[t] = (float)((w_in ? (double)w_in[t] : 1.0) * tis);
    }
    return DF_OK;
}

/* Running sums of the per-token and per-sequence statistics. */
typedef struct {
    double diff_sum, diff_sq, diff_max;
    double kl, k3, chi2, is_sum, is_max, is_min;
    int64_t is_high;
    double tr_ppl, tr_log, ro_ppl, ro_log, lpd, lpd_abs, lpd_max, lpd_min, ppl_ratio, chi2_seq;
} mm_sums;

static void add_token(mm_sums *s, double old, double ro, double cap)
{
    double diff = fabs(exp(ro) - exp(old));
    s->diff_sum += diff;
    s->diff_sq += diff * diff;
    s->diff_max = fmax(s->diff_max, diff);
    double x = old - ro, xs = df_loss_clamp(x), rho = exp(xs);
    s->kl += ro - old;
    s->k3 += rho - xs - 1.0;
    s->chi2 += rho * rho;
    s->is_sum += rho;
    s->is_max = fmax(s->is_max, rho);
    s->is_min = fmin(s->is_min, rho);
    s->is_high += cap > 0 && rho > cap;
}

/* One sequence of len tokens, k > 0 of them counted (mask; all without one): per-sequence means
 * of both log-prob streams over the counted tokens. */
static void add_seq(mm_sums *s, const float *old, const float *ro, const int32_t *mask, int64_t len, int64_t k)
{
    double so = 0, sr = 0;
    for (int64_t t = 0; t < len; t++)
        if (!mask || mask[t])
            so += old[t], sr += ro[t];
    double mo = so / (double)k, mr = sr / (double)k, d = mr - mo;
    s->tr_ppl += exp(-mo);
    s->tr_log += -mo;
    s->ro_ppl += exp(-mr);
    s->ro_log += -mr;
    s->lpd += d;
    s->lpd_abs += fabs(d);
    s->lpd_max = fmax(s->lpd_max, d);
    s->lpd_min = fmin(s->lpd_min, d);
    s->ppl_ratio += exp(d);
    s->chi2_seq += exp(2.0 * df_loss_clamp(so - sr));
}

static void finish(const mm_sums *s, int64_t T, int64_t S, df_rollout_mismatch *o)
{
    double t = (double)T, n = (double)S;
    o->probs_diff_max = s->diff_max;
    o->probs_diff_mean = s->diff_sum / t;
    /* unbiased, as torch.std; the sums are of values in [0, 1], so no cancellation worry */
    double var = T > 1 ? (s->diff_sq - s->diff_sum * s->diff_sum / t) / (t - 1.0) : 0.0;
    o->probs_diff_std = sqrt(fmax(var, 0.0));
    o->kl = s->kl / t;
    o->k3_kl = s->k3 / t;
    o->chi2_token = s->chi2 / t - 1.0;
    o->is_mean = s->is_sum / t;
    o->is_max = s->is_max;
    o->is_min = s->is_min;
    o->is_fraction_high = (double)s->is_high / t;
    o->training_ppl = s->tr_ppl / n;
    o->training_log_ppl = s->tr_log / n;
    o->rollout_ppl = s->ro_ppl / n;
    o->rollout_log_ppl = s->ro_log / n;
    o->log_ppl_diff = s->lpd / n;
    o->log_ppl_abs_diff = s->lpd_abs / n;
    o->log_ppl_diff_max = s->lpd_max;
    o->log_ppl_diff_min = s->lpd_min;
    o->ppl_ratio = s->ppl_ratio / n;
    o->chi2_seq = s->chi2_seq / n - 1.0;
}

int df_rollout_mismatch_compute(int64_t n, const int64_t *offsets, const float *old_log_prob,
                                const float *rollout_log_prob, double cap, df_rollout_mismatch *out)
{
    return df_rollout_mismatch_compute_masked(n, offsets, NULL, old_log_prob, rollout_log_prob, cap, out);
}

int df_rollout_mismatch_compute_masked(int64_t n, const int64_t *offsets, const int32_t *mask,
                                       const float *old_log_prob, const float *rollout_log_prob, double cap,
                                       df_rollout_mismatch *out)
{
    int rc = df_algo_check_offsets("rollout mismatch", n, offsets);
    if (rc)
        return rc;
    if (!out || (offsets[n] > 0 && (!old_log_prob || !rollout_log_prob)))
        return df_error(DF_EINVAL, "rollout mismatch: NULL log-prob or output array");
    memset(out, 0, sizeof *out);
    int64_t T = 0; /* the model's tokens: appended ones have no sampler log-prob */
    df_loss_agg_count_masked(n, offsets, mask, &T, NULL);
    if (T == 0)
        return DF_OK;
    mm_sums s = {.is_min = INFINITY, .lpd_max = -INFINITY, .lpd_min = INFINITY};
    int64_t S = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t a = offsets[i], len = offsets[i + 1] - a, k = len;
        if (mask)
            df_loss_agg_count_masked(1, offsets + i, mask, &k, NULL);
        if (!k)
            continue; /* verl's masked mean would count an empty response as log-ppl 0 */
        S++;
        add_seq(&s, old_log_prob + a, rollout_log_prob + a, mask ? mask + a : NULL, len, k);
        for (int64_t t = a; t < a + len; t++)
            if (!mask || mask[t])
                add_token(&s, old_log_prob[t], rollout_log_prob[t], cap);
    }
    out->n_tokens = T;
    out->n_seqs = S;
    finish(&s, T, S, out);
    return DF_OK;
}

typedef struct named {
    const char *name;
    double v;
} named;

/* verl's compute_offpolicy_metrics (rollout_corr_helper.py) into kv; returns their count (13). */
static size_t offpolicy(const df_rollout_mismatch *mm, named *kv)
{
    const named o[] = {
        {"rollout_corr/training_ppl", mm->training_ppl},
        {"rollout_corr/training_log_ppl", mm->training_log_ppl},
        {"rollout_corr/kl", mm->kl},
        {"rollout_corr/k3_kl", mm->k3_kl},
        {"rollout_corr/rollout_ppl", mm->rollout_ppl},
        {"rollout_corr/rollout_log_ppl", mm->rollout_log_ppl},
        {"rollout_corr/log_ppl_diff", mm->log_ppl_diff},
        {"rollout_corr/log_ppl_abs_diff", mm->log_ppl_abs_diff},
        {"rollout_corr/log_ppl_diff_max", mm->log_ppl_diff_max},
        {"rollout_corr/log_ppl_diff_min", mm->log_ppl_diff_min},
        {"rollout_corr/ppl_ratio", mm->ppl_ratio},
        {"rollout_corr/chi2_token", mm->chi2_token},
        {"rollout_corr/chi2_seq", mm->chi2_seq},
    };
    memcpy(kv, o, sizeof o);
    return sizeof o / sizeof *o;
}

static int record(const named *kv, size_t n, df_metrics *m)
{
    for (size_t i = 0; i < n; i++) {
        int rc = df_metrics_set(m, kv[i].name, kv[i].v);
        if (rc)
            return rc;
    }
    return DF_OK;
}

int df_rollout_mismatch_record(const df_rollout_mismatch *mm, df_metrics *m)
{
    if (!mm || !m)
        return df_error(DF_EINVAL, "rollout mismatch: NULL statistics or metrics");
    if (mm->n_tokens == 0)
        return DF_OK;
    named kv[32] = {
        {"training/rollout_probs_diff_max", mm->probs_diff_max},
        {"training/rollout_probs_diff_mean", mm->probs_diff_mean},
        {"training/rollout_probs_diff_std", mm->probs_diff_std},
    };
    size_t n = 3 + offpolicy(mm, kv + 3);
    const named is[] = { /* an older verl's raw-ratio statistics */
        {"rollout_corr/rollout_is_mean", mm->is_mean},
        {"rollout_corr/rollout_is_max", mm->is_max},
        {"rollout_corr/rollout_is_min", mm->is_min},
        {"rollout_corr/rollout_is_ratio_fraction_high", mm->is_fraction_high},
    };
    memcpy(kv + n, is, sizeof is);
    return record(kv, n + sizeof is / sizeof *is, m);
}

int df_rollout_offpolicy_record(const df_rollout_mismatch *mm, df_metrics *m)
{
    if (!mm || !m)
        return df_error(DF_EINVAL, "rollout off-policy metrics: NULL statistics or metrics");
    named kv[16];
    return mm->n_tokens ? record(kv, offpolicy(mm, kv), m) : DF_OK;
}
