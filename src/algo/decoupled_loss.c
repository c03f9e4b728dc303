/* The decoupled PPO objective's behaviour importance weights (include/distflow/async.h;
 * AReaL ppo_actor_loss_fn with use_decoupled_loss and behav_imp_weight_cap). */
#include "distflow/async.h"

#include <math.h>
#include <string.h>

int df_behav_imp_weights(int64_t n_tokens, const float *prox_log_prob, const float *behav_log_prob,
                         const int32_t *mask, double cap, const float *w_in, float *w_out, df_behav_stats *st)
{
    if (n_tokens < 0)
        return df_error(DF_EINVAL, "behaviour importance weights: negative token count %lld",
                        (long long)n_tokens);
    if (!isfinite(cap) || (cap > 0 && cap <= 1))
        return df_error(DF_EINVAL,
                        "behaviour importance weights: behav_imp_weight_cap must be > 1 (or <= 0: no cap), "
                        "got %g (a cap of 1 or less would drop every token the proximal policy favours)",
                        cap);
    if (n_tokens > 0 && (!prox_log_prob || !behav_log_prob || !w_out))
        return df_error(DF_EINVAL, "behaviour importance weights: NULL log-prob or output array");
    df_behav_stats s;
    memset(&s, 0, sizeof s);
    for (int64_t t = 0; t < n_tokens; t++) {
        double x = (double)prox_log_prob[t] - (double)behav_log_prob[t];
        double r = exp(x);
        /* AReaL keeps r <= cap and drops the rest (NaN included: the comparison is false) */
        bool kept = cap <= 0 ? !isnan(r) : r <= cap;
        double b = kept ? r : 0.0;
        w_out[t] = (float)((w_in ? (double)w_in[t] : 1.0) * b);
        if (mask && !mask[t])
            continue;
        s.n_tokens++;
        if (kept) {
            s.n_kept++;
            s.weight_sum += r;
            s.approx_kl_sum += x;
        }
    }
    if (st)
        *st = s;
    return DF_OK;
}
