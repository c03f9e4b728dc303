/* KL penalties and the KL loss (include/distflow/algo.h; verl kl_penalty). */
#include "distflow/algo.h"

#include "algo/algo_internal.h"

#include <math.h>
#include <string.h>

typedef enum { KL_K1, KL_ABS, KL_K2, KL_K3 } kl_kind;

static const struct {
    const char *name;
    kl_kind kind;
} k_kl_names[] = {
    {"kl", KL_K1},  {"k1", KL_K1},         {"abs", KL_ABS}, {"mse", KL_K2},
    {"k2", KL_K2},  {"low_var_kl", KL_K3}, {"k3", KL_K3},
};

static int parse_kl(const char *type, kl_kind *k)
{
    for (size_t i = 0; type && i < sizeof k_kl_names / sizeof k_kl_names[0]; i++)
        if (!strcmp(type, k_kl_names[i].name)) {
            *k = k_kl_names[i].kind;
            return DF_OK;
        }
    return df_error(DF_EINVAL,
                    "unknown KL penalty type '%s' (known: kl, k1, abs, mse, k2, low_var_kl, k3)",
                    type ? type : "(null)");
}

/* One token: returns kl and stores d kl / d log_prob in *dkl. */
static double kl_token(kl_kind k, double lp, double ref, double *dkl)
{
    double x = lp - ref;
    switch (k) {
    case KL_K1: *dkl = 1.0; return x;
    case KL_ABS: *dkl = (x > 0) - (x < 0); return fabs(x);
    case KL_K2: *dkl = x; return 0.5 * x * x;
    case KL_K3: break;
    }
    /* k3 = e^y - y - 1 with y = ref - lp: unbiased and non-negative (Schulman 2020).
     * verl clamps y to [-20, 20] and the result to [-10, 10]; either clamp
     * makes the value constant, so the gradient is 0 there. */
    double y = fmin(fmax(-x, -20.0), 20.0);
    double v = exp(y) - y - 1.0;
    bool live = fabs(x) <= 20.0 && v >= -10.0 && v <= 10.0;
    *dkl = live ? 1.0 - exp(y) : 0.0;
    return fmin(fmax(v, -10.0), 10.0);
}

static int check_tokens(const char *type, int64_t n_tokens, const float *lp, const float *ref)
{
    if (n_tokens < 0)
        return df_error(DF_EINVAL, "KL %s: negative token count %lld", type, (long long)n_tokens);
    if (n_tokens > 0 && (!lp || !ref))
        return df_error(DF_EINVAL, "KL %s: NULL log-prob array", type);
    return DF_OK;
}

/* The KL kind of `type` and the checks of its token arrays. */
static int prepare(const char *type, int64_t n_tokens, const float *lp, const float *ref, kl_kind *k)
{
    int rc = parse_kl(type, k);
    return rc ? rc : check_tokens(type, n_tokens, lp, ref);
}

int df_kl_penalty(const char *type, int64_t n_tokens, const float *log_prob,
                  const float *ref_log_prob, float *out_kl, float *out_dkl_dlogp)
{
    kl_kind k;
    int rc = prepare(type, n_tokens, log_prob, ref_log_prob, &k);
    if (rc)
        return rc;
    for (int64_t t = 0; t < n_tokens; t++) {
        double d;
        double v = kl_token(k, log_prob[t], ref_log_prob[t], &d);
        if (out_kl)
            out_kl[t] = (float)v;
        if (out_dkl_dlogp)
            out_dkl_dlogp[t] = (float)d;
    }
    return DF_OK;
}

int df_kl_loss(const char *type, int64_t n_tokens, const float *log_prob,
               const float *ref_log_prob, const float *w, float kl_loss_coef, double *loss,
               float *grad)
{
    kl_kind k;
    int rc = prepare(type, n_tokens, log_prob, ref_log_prob, &k);
    if (rc)
        return rc;
    if (n_tokens > 0 && !w)
        return df_error(DF_EINVAL, "KL loss %s: NULL weight array", type);
    double s = 0;
    for (int64_t t = 0; t < n_tokens; t++) {
        double d;
        double v = kl_token(k, log_prob[t], ref_log_prob[t], &d);
        s += (double)w[t] * v;
        if (grad)
            grad[t] += (float)((double)kl_loss_coef * (double)w[t] * d);
    }
    if (loss)
        *loss = s;
    return DF_OK;
}

int df_kl_apply_in_reward(const char *type, int64_t n, const int64_t *offsets,
                          const float *token_level_scores, const float *old_log_prob,
                          const float *ref_log_prob, float beta, float *token_level_rewards,
                          double *mean_kl)
{
    return df_kl_apply_in_reward_masked(type, n, offsets, NULL, token_level_scores, old_log_prob,
                                        ref_log_prob, beta, token_level_rewards, mean_kl);
}

int df_kl_apply_in_reward_masked(const char *type, int64_t n, const int64_t *offsets,
                                 const int32_t *mask, const float *token_level_scores,
                                 const float *old_log_prob, const float *ref_log_prob, float beta,
                                 float *token_level_rewards, double *mean_kl)
{
    kl_kind k;
    int rc = parse_kl(type, &k);
    if (!rc)
        rc = df_algo_check_offsets("KL in reward", n, offsets);
    if (!rc)
        rc = check_tokens(type, offsets[n], old_log_prob, ref_log_prob);
    if (rc)
        return rc;
    if (offsets[n] > 0 && (!token_level_scores || !token_level_rewards))
        return df_error(DF_EINVAL, "KL in reward %s: NULL scores or rewards array", type);
    double total = 0;
    for (int64_t i = 0; i < n; i++) {
        double s = 0, d;
        int64_t len = 0;
        for (int64_t t = offsets[i]; t < offsets[i + 1]; t++) {
            double v = !mask || mask[t] ? kl_token(k, old_log_prob[t], ref_log_prob[t], &d) : 0.0;
            s += v;
            len += !mask || mask[t];
            token_level_rewards[t] = (float)((double)token_level_scores[t] - (double)beta * v);
        }
        total += len ? s / (double)len : 0.0;
    }
    if (mean_kl)
        *mean_kl = n ? total / (double)n : 0.0;
    return DF_OK;
}
