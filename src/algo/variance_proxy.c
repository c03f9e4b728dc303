/* Gradient-variance proxies of a step batch (include/distflow/algo.h, losses block; verl
 * compute_variance_proxy_metrics): per-response sums here, the metrics from the batch's totals. */
#include "distflow/algo.h"

#include "algo/algo_internal.h"

#include <math.h>

int df_variance_proxy_sums(int64_t n, const int64_t *offsets, const int32_t *mask, const float *advantages,
                           const float *old_log_probs, const float *sum_pi_squared, const float *is_weights,
                           double sums[DF_VPROXY_SUMS])
{
    int rc = df_algo_check_offsets("variance proxy", n, offsets);
    if (rc)
        return rc;
    if (!sums || (offsets[n] > 0 && (!advantages || !old_log_probs || !sum_pi_squared)))
        return df_error(DF_EINVAL, "variance proxy: NULL advantages, old_log_probs, sum_pi_squared or sums");
    for (int64_t i = 0; i < n; i++) {
        double a = 0, w = 0, w0 = 0, r = 0, k = 0;
        for (int64_t t = offsets[i]; t < offsets[i + 1]; t++) {
            if (mask && !mask[t])
                continue;
            const double wt = 1.0 - 2.0 * exp((double)old_log_probs[t]) + (double)sum_pi_squared[t];
            const double rho2 = is_weights ? (double)is_weights[t] * is_weights[t] : 1.0;
            a += advantages[t];
            w += wt * rho2;                 /* verl scales w by the squared IS weight */
            w0 += wt * rho2 / fmax(rho2, 1e-10); /* and divides it out again for proxy2 */
            r += is_weights ? is_weights[t] : 1.0;
            k += 1;
        }
        a /= k + 1e-8; /* verl masked_mean: an empty response counts with A = 0 */
        r /= k + 1e-8;
        sums[DF_VPROXY_N] += 1;
        sums[DF_VPROXY_A2W] += is_weights ? r * r * a * a * fmax(w0, 0.0) : a * a * fmax(w, 0.0);
        sums[DF_VPROXY_A2] += a * a;
        sums[DF_VPROXY_W] += w;
    }
    return DF_OK;
}

int df_variance_proxy_record(const double sums[DF_VPROXY_SUMS], double grad_norm, df_metrics *m)
{
    const double B = sums[DF_VPROXY_N];
    if (!(B > 0))
        return DF_OK;
    const double p1 = isnan(grad_norm) ? 0.0 : grad_norm * grad_norm, p2 = sums[DF_VPROXY_A2W] / B;
    const double p3 = isnan(grad_norm) || B < 2 ? 0.0 : fmax(0.0, (p2 - p1) / (B - 1));
    int rc = df_metrics_set(m, "variance_proxy/proxy1_signal_strength", p1);
    if (!rc)
        rc = df_metrics_set(m, "variance_proxy/proxy2_total_power", p2);
    if (!rc)
        rc = df_metrics_set(m, "variance_proxy/proxy3_pure_noise", p3);
    if (!rc)
        rc = df_metrics_set(m, "variance_proxy/expected_a_squared", sums[DF_VPROXY_A2] / B);
    if (!rc)
        rc = df_metrics_set(m, "variance_proxy/expected_w", sums[DF_VPROXY_W] / B);
    return rc;
}
