/* Policy losses (include/distflow/algo.h; verl core_algos POLICY_LOSS_REGISTRY). */
#include "distflow/algo.h"

#include "algo/algo_internal.h"
#include "algo/loss_internal.h"
#include "util/fn_registry.h"

#include <math.h>

static const df_fn_entry k_builtin_losses[] = {
    {"vanilla", (df_any_fn)df_policy_loss_vanilla},
    /* losses block (policy_loss_ext.c, policy_loss_cov.c); verl registers the
       underscore names, its config comments spell clip-cov / kl-cov */
    {"gspo", (df_any_fn)df_policy_loss_gspo},
    {"gpg", (df_any_fn)df_policy_loss_gpg},
    {"cpgd", (df_any_fn)df_policy_loss_cpgd},
    {"clip_cov", (df_any_fn)df_policy_loss_clip_cov},
    {"kl_cov", (df_any_fn)df_policy_loss_kl_cov},
    {"clip-cov", (df_any_fn)df_policy_loss_clip_cov},
    {"kl-cov", (df_any_fn)df_policy_loss_kl_cov},
};

static df_fn_registry g_losses = {
    .kind = "policy loss",
    .builtins = k_builtin_losses,
    .n_builtins = sizeof k_builtin_losses / sizeof k_builtin_losses[0],
};

int df_policy_loss_lookup(const char *name, df_policy_loss_fn *fn)
{
    df_any_fn f;
    int rc = df_fn_registry_lookup(&g_losses, name, DF_EINVAL, &f);
    if (!rc)
        *fn = (df_policy_loss_fn)f;
    return rc;
}

int df_policy_loss_register(const char *name, df_policy_loss_fn fn)
{
    return df_fn_registry_add(&g_losses, name, (df_any_fn)fn);
}

/* One token of the dual-clip PPO loss; grad = dl/dlog_prob before weighting. */
typedef struct {
    double loss, grad, neg_log_ratio;
    bool clipped, clipped_lower;
} ppo_token;

static ppo_token vanilla_token(double lp, double old, double a, double lo, double hi, double c)
{
    ppo_token o;
    bool in_range;
    double d = df_loss_clamp_log_ratio(lp - old, &in_range); /* verl clamps before exp() */
    double r = exp(d);
    double l1 = -a * r;
    double l2 = -a * fmin(fmax(r, 1.0 - lo), 1.0 + hi);
    double lc = fmax(l1, l2);
    double l3 = -a * c;
    o.neg_log_ratio = -d;
    o.clipped = l2 > l1;                  /* verl pg_clipfrac: torch.gt(pg_losses2, pg_losses1) */
    o.clipped_lower = a < 0 && lc > l3;   /* verl pg_clipfrac_lower */
    o.loss = a < 0 ? fmin(lc, l3) : lc;
    /* Only the unclipped branch -A r depends on log_prob; the clamp of the
     * log-ratio (inclusive bounds, like torch.clamp's backward) also stops it. */
    bool live = !o.clipped && !o.clipped_lower && in_range;
    o.grad = live ? -a * r : 0.0;
    return o;
}

int df_policy_loss_vanilla(const df_policy_loss_input *in, df_policy_loss_output *out)
{
    int rc = df_loss_check_input("vanilla", in, out, true);
    if (rc)
        return rc;
    if (!(in->clip_ratio_c > 1.0f))
        return df_error(DF_EINVAL,
                        "policy loss vanilla: clip_ratio_c must be > 1 for dual-clip PPO, got %g",
                        (double)in->clip_ratio_c);
    if ((rc = df_loss_check_clip("vanilla", in)))
        return rc;
    const int64_t T = in->offsets[in->n];
    double loss = 0, kl = 0;
    int64_t n_clip = 0, n_lower = 0;
    for (int64_t t = 0; t < T; t++) {
        ppo_token o = vanilla_token(in->log_prob[t], in->old_log_prob[t], in->advantages[t],
                                    in->clip_ratio_low, in->clip_ratio_high, in->clip_ratio_c);
        loss += (double)in->weights[t] * o.loss;
        kl += o.neg_log_ratio;
        n_clip += o.clipped;
        n_lower += o.clipped_lower;
        if (out->grad)
            out->grad[t] = (float)((double)in->weights[t] * o.grad);
    }
    out->loss = loss;
    out->ppo_kl = T ? kl / (double)T : 0.0;
    out->pg_clipfrac = T ? (double)n_clip / (double)T : 0.0;
    out->pg_clipfrac_lower = T ? (double)n_lower / (double)T : 0.0;
    return DF_OK;
}
