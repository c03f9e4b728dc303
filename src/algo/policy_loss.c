/* Policy losses (include/distflow/algo.h; verl core_algos POLICY_LOSS_REGISTRY). */
#include "distflow/algo.h"
#include "distflow/algo_desc.h"

#include "algo/algo_internal.h"
#include "algo/loss_internal.h"
#include "util/fn_registry.h"

#include <math.h>

/* X(index, name, function, the aggregation its objective is defined with, summary); verl
   registers the underscore names of clip-cov / kl-cov, its config comments spell them with a hyphen */
#define BUILTIN_LOSSES(X)                                                                                  \
    X(0, "vanilla", df_policy_loss_vanilla, NULL, "PPO clipped surrogate with dual clip (Schulman 2017)")      \
    X(1, "gspo", df_policy_loss_gspo, "seq-mean-token-mean",                                                \
      "GSPO averages its sequence-level ratio loss over sequences, arXiv 2507.18071 eq. 7; verl's recipe sets it") \
    X(2, "gpg", df_policy_loss_gpg, NULL, "policy gradient without a ratio (GPG, Chu 2025)")                 \
    X(3, "cpgd", df_policy_loss_cpgd, NULL, "clipped policy gradient with policy drift (CPGD, Liu 2025)")      \
    X(4, "clip_cov", df_policy_loss_clip_cov, NULL, "Clip-Cov (Cui 2025, arXiv 2505.22617)")                 \
    X(5, "kl_cov", df_policy_loss_kl_cov, NULL, "KL-Cov (Cui 2025, arXiv 2505.22617)")                       \
    X(6, "clip-cov", df_policy_loss_clip_cov, NULL, "Clip-Cov (Cui 2025, arXiv 2505.22617)")                 \
    X(7, "kl-cov", df_policy_loss_kl_cov, NULL, "KL-Cov (Cui 2025, arXiv 2505.22617)")                       \
    X(8, "cispo", df_policy_loss_cispo, NULL, "clipped importance weight as data (CISPO, arXiv 2506.13585)")    \
    X(9, "sapo", df_policy_loss_sapo, "seq-mean-token-mean",                                                \
      "smooth gate on the ratio (SAPO, arXiv 2511.20347); verl aggregates it over sequences")               \
    X(10, "geo_mean", df_policy_loss_geo_mean, "seq-mean-token-mean",                                       \
      "geometric-mean sequence ratio (GMPO, arXiv 2507.20673); verl averages it over sequences")

#define DESC(i, nm, f, agg, sum) [i] = {nm, f, agg, sum},
static const df_policy_loss_desc k_builtin_descs[] = {BUILTIN_LOSSES(DESC)};
#undef DESC
#define ENTRY(i, nm, f, ...) [i] = {nm, (df_any_fn)f, &k_builtin_descs[i]},
static const df_fn_entry k_builtin_losses[] = {BUILTIN_LOSSES(ENTRY)};
#undef ENTRY
_Static_assert(sizeof k_builtin_losses / sizeof *k_builtin_losses ==
                   sizeof k_builtin_descs / sizeof *k_builtin_descs,
               "one registry entry per descriptor");

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
    return df_policy_loss_register_desc(&(df_policy_loss_desc){.name = name, .fn = fn});
}

int df_policy_loss_register_desc(const df_policy_loss_desc *d)
{
    if (!d)
        return df_error(DF_EINVAL, "policy loss registry: NULL descriptor");
    return df_fn_registry_add_data(&g_losses, d->name, (df_any_fn)d->fn, d, sizeof *d);
}

const df_policy_loss_desc *df_policy_loss_find(const char *name)
{
    const df_fn_entry *e = df_fn_registry_find_entry(&g_losses, name);
    return e ? e->data : NULL;
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
    int64_t n_clip = 0, n_lower = 0, n_model = 0;
    for (int64_t t = 0; t < T; t++) {
        if (df_loss_skip_token(in, t, out->grad)) /* an appended tool / user token */
            continue;
        n_model++;
        ppo_token o = vanilla_token(in->log_prob[t], in->old_log_prob[t], in->advantages[t],
                                    in->clip_ratio_low, in->clip_ratio_high, in->clip_ratio_c);
        loss += (double)in->weights[t] * o.loss;
        kl += o.neg_log_ratio;
        n_clip += o.clipped;
        n_lower += o.clipped_lower;
        if (out->grad)
            out->grad[t] = (float)((double)in->weights[t] * o.grad);
    }
    df_loss_output(out, loss, kl, n_clip, n_lower, n_model);
    return DF_OK;
}
