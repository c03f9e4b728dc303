/* PF-PPO's weights and draws (include/distflow/algo.h; verl compute_pf_ppo_reweight_data). */
#include "distflow/algo.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int df_pf_ppo_method_parse(const char *name, df_pf_ppo_method *out)
{
    static const char *const names[] = {"pow", "max_min", "max_random"};
    for (int i = 0; name && i < 3; i++)
        if (!strcmp(name, names[i])) {
            *out = (df_pf_ppo_method)i;
            return DF_OK;
        }
    return df_error(DF_EINVAL, "unknown PF-PPO reweight_method \"%s\" (pow, max_min, max_random)",
                    name ? name : "(null)");
}

int df_pf_ppo_weights(const float *scores, int64_t n, df_pf_ppo_method method, double weight_pow, float *weights)
{
    if (n < 0 || (n > 0 && (!scores || !weights)))
        return df_error(DF_EINVAL, "df_pf_ppo_weights: bad arguments");
    if (!(weight_pow >= 0) || !isfinite(weight_pow))
        return df_error(DF_EINVAL, "PF-PPO weight_pow must be a finite number >= 0, got %g", weight_pow);
    float hi = -INFINITY, lo = INFINITY;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(scores[i]))
            return df_error(DF_EINVAL, "PF-PPO: sequence %lld has a non-finite score", (long long)i);
        hi = scores[i] > hi ? scores[i] : hi;
        lo = scores[i] < lo ? scores[i] : lo;
    }
    for (int64_t i = 0; i < n; i++) {
        float w;
        if (method == DF_PF_PPO_POW)
            w = powf(fabsf(scores[i]), (float)weight_pow);
        else if (method == DF_PF_PPO_MAX_MIN)
            w = scores[i] == hi || scores[i] == lo ? 1.0f : 0.0f;
        else
            w = scores[i] == hi ? 0.4f : 0.1f;
        w += 1e-8f; /* torch.clamp(weights + 1e-8, min=1e-8): no sequence has weight 0 */
        weights[i] = w > 1e-8f ? w : 1e-8f;
    }
    return DF_OK;
}

int df_pf_ppo_draw(const float *weights, int64_t n, int64_t n_draws, df_rng *rng, int64_t *draws)
{
    if (n_draws < 0 || (n_draws > 0 && (n < 1 || !weights || !rng || !draws)))
        return df_error(DF_EINVAL, "df_pf_ppo_draw: bad arguments");
    if (n_draws == 0)
        return DF_OK;
    double *cum = malloc((size_t)n * sizeof *cum), total = 0;
    if (!cum)
        return df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++) {
        if (!(weights[i] >= 0) || !isfinite(weights[i])) {
            free(cum);
            return df_error(DF_EINVAL, "PF-PPO: weight %lld is negative or not finite", (long long)i);
        }
        cum[i] = total += weights[i];
    }
    if (!(total > 0)) {
        free(cum);
        return df_error(DF_EINVAL, "PF-PPO: every weight is zero");
    }
    for (int64_t k = 0; k < n_draws; k++) {
        double u = df_rng_uniform(rng) * total; /* in [0, total) */
        int64_t lo = 0, hi = n - 1;             /* the first i with cum[i] > u */
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (cum[mid] > u)
                hi = mid;
            else
                lo = mid + 1;
        }
        draws[k] = lo;
    }
    free(cum);
    return DF_OK;
}
