/* loss_internal.h (internal) — checks and helpers shared by the policy losses
 * of src/algo/ beyond vanilla (policy_loss_ext.c, policy_loss_cov.c). */
#ifndef DF_ALGO_LOSS_INTERNAL_H
#define DF_ALGO_LOSS_INTERNAL_H

#include "distflow/algo.h"

/* verl clamps log-ratios to this range before exp() for stability (also rollout_corr_helper's
   SAFETY_BOUND). */
#define DF_LOSS_LOG_RATIO_CLAMP 20.0

/*
 * Check a policy loss's input: non-NULL in / out, a valid packed layout and,
 * when there are tokens, log_prob, advantages, weights and (need_old)
 * old_log_prob. `who` names the loss in the message.
 */
int df_loss_check_input(const char *who, const df_policy_loss_input *in, const df_policy_loss_output *out,
                        bool need_old);

/* DF_EINVAL unless both clip ratios are >= 0 (NaN included). */
int df_loss_check_clip(const char *who, const df_policy_loss_input *in);

/* Whether token t is the model's (response_mask not 0, or no mask): only those enter a loss. */
static inline bool df_loss_model_token(const df_policy_loss_input *in, int64_t t)
{
    return !in->response_mask || in->response_mask[t] != 0;
}

/* Token t is not the model's: it takes no part, and its gradient (grad may be NULL) is 0. */
static inline bool df_loss_skip_token(const df_policy_loss_input *in, int64_t t, float *grad)
{
    if (df_loss_model_token(in, t))
        return false;
    if (grad)
        grad[t] = 0.0f;
    return true;
}

/* Mean of a statistic summed over n model tokens (0 for none), as verl's masked_mean. */
static inline double df_loss_token_mean(double sum, int64_t n) { return n ? sum / (double)n : 0.0; }

/* A loss's output: its value and the token means of its statistics' sums over n_model tokens. */
static inline void df_loss_output(df_policy_loss_output *out, double loss, double kl, int64_t n_clip,
                                  int64_t n_lower, int64_t n_model)
{
    out->loss = loss;
    out->ppo_kl = df_loss_token_mean(kl, n_model);
    out->pg_clipfrac = df_loss_token_mean((double)n_clip, n_model);
    out->pg_clipfrac_lower = df_loss_token_mean((double)n_lower, n_model);
}

/* Clamp a log-ratio to +-DF_LOSS_LOG_RATIO_CLAMP (NaN stays NaN). */
static inline double df_loss_clamp(double x)
{
    return x < -DF_LOSS_LOG_RATIO_CLAMP  ? -DF_LOSS_LOG_RATIO_CLAMP
           : x > DF_LOSS_LOG_RATIO_CLAMP ? DF_LOSS_LOG_RATIO_CLAMP
                                         : x;
}

/* df_loss_clamp; *live = false when clamped. */
static inline double df_loss_clamp_log_ratio(double x, bool *live)
{
    *live = x >= -DF_LOSS_LOG_RATIO_CLAMP && x <= DF_LOSS_LOG_RATIO_CLAMP;
    return df_loss_clamp(x);
}

#endif /* DF_ALGO_LOSS_INTERNAL_H */
