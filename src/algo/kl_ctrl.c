/* In-reward KL coefficient controllers (include/distflow/algo.h, losses block;
 * verl FixedKLController / AdaptiveKLController, Ziegler et al. 2019). */
#include "distflow/algo.h"
#include "distflow/metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct df_kl_ctrl {
    bool adaptive;
    double value, target, horizon;
};

int df_kl_ctrl_create(const char *type, double kl_coef, double target_kl, double horizon, df_kl_ctrl **out)
{
    bool fixed = type && !strcmp(type, "fixed"), adaptive = type && !strcmp(type, "adaptive");
    if (!fixed && !adaptive)
        return df_error(DF_EINVAL, "unknown KL controller type '%s' (known: fixed, adaptive)",
                        type ? type : "(null)");
    if (!(kl_coef >= 0) || !isfinite(kl_coef))
        return df_error(DF_EINVAL, "KL controller: kl_coef must be a finite value >= 0, got %g", kl_coef);
    if (adaptive && !(target_kl > 0 && isfinite(target_kl)))
        return df_error(DF_EINVAL, "adaptive KL controller: target_kl must be > 0, got %g", target_kl);
    if (adaptive && !(horizon > 0 && isfinite(horizon)))
        return df_error(DF_EINVAL, "adaptive KL controller: horizon must be > 0, got %g", horizon);
    if (!out)
        return df_error(DF_EINVAL, "KL controller: NULL output");
    df_kl_ctrl *c = calloc(1, sizeof *c);
    if (!c)
        return df_error(DF_ENOMEM, "out of memory creating a KL controller");
    *c = (df_kl_ctrl){.adaptive = adaptive, .value = kl_coef, .target = target_kl, .horizon = horizon};
    *out = c;
    return DF_OK;
}

void df_kl_ctrl_free(df_kl_ctrl *c)
{
    free(c);
}

double df_kl_ctrl_value(const df_kl_ctrl *c)
{
    return c->value;
}

int df_kl_ctrl_set_value(df_kl_ctrl *c, double beta)
{
    if (!c)
        return df_error(DF_EINVAL, "KL controller: NULL controller");
    if (!(beta >= 0) || !isfinite(beta))
        return df_error(DF_EINVAL, "KL controller: coefficient must be a finite value >= 0, got %g", beta);
    c->value = beta;
    return DF_OK;
}

int df_kl_ctrl_update(df_kl_ctrl *c, double current_kl, int64_t n_steps)
{
    if (!c)
        return df_error(DF_EINVAL, "KL controller: NULL controller");
    if (!isfinite(current_kl))
        return df_error(DF_EINVAL, "KL controller: current KL is not finite (%g)", current_kl);
    if (n_steps < 0)
        return df_error(DF_EINVAL, "KL controller: negative step count %lld", (long long)n_steps);
    if (!c->adaptive)
        return DF_OK;
    /* a proportional controller with the error clipped to +-20% (Ziegler et al. eq. 2) */
    double e = fmin(fmax(current_kl / c->target - 1.0, -0.2), 0.2);
    c->value *= 1.0 + e * (double)n_steps / c->horizon;
    return DF_OK;
}

int df_kl_ctrl_step(df_kl_ctrl *c, double current_kl, int64_t n_samples, df_metrics *m)
{
    double beta = c ? c->value : 0.0;
    int rc = df_kl_ctrl_update(c, current_kl, n_samples);
    if (!rc && m && !(rc = df_metrics_set(m, "actor/reward_kl_penalty", current_kl)))
        rc = df_metrics_set(m, "actor/reward_kl_penalty_coeff", beta);
    return rc;
}
