/* The PPO critic's clipped value loss (include/distflow/algo.h, df_value_loss). */
#include "distflow/algo.h"

#include "algo/algo_internal.h"

#include <math.h>

static int check(const df_value_loss_input *in, const df_value_loss_output *out)
{
    if (!in || !out)
        return df_error(DF_EINVAL, "value loss: NULL input or output");
    int rc = df_algo_check_offsets("value loss", in->n, in->offsets);
    if (rc)
        return rc;
    if (in->offsets[in->n] > 0 && (!in->vpreds || !in->values || !in->returns || !in->weights))
        return df_error(DF_EINVAL, "value loss: vpreds, values, returns and weights must all be given");
    if (!(in->cliprange_value >= 0) || !isfinite(in->cliprange_value))
        return df_error(DF_EINVAL, "value loss: cliprange_value must be a finite number >= 0, got %g",
                        in->cliprange_value);
    return DF_OK;
}

int df_value_loss(const df_value_loss_input *in, df_value_loss_output *out)
{
    int rc = check(in, out);
    if (rc)
        return rc;
    const int64_t T = in->offsets[in->n];
    const double c = in->cliprange_value;
    double loss = 0, vsum = 0;
    int64_t n_clip = 0, n_tok = 0;
    for (int64_t t = 0; t < T; t++) {
        double v = in->vpreds[t], old = in->values[t], ret = in->returns[t];
        double vc = fmin(fmax(v, old - c), old + c); /* verl clip_by_value (the same for c >= 0) */
        double l1 = (v - ret) * (v - ret), l2 = (vc - ret) * (vc - ret);
        bool clipped = l2 > l1; /* verl vf_clipfrac: torch.gt(vf_losses2, vf_losses1) */
        loss += (double)in->weights[t] * (clipped ? l2 : l1);
        const bool counted = !in->response_mask || in->response_mask[t] != 0;
        vsum += counted ? v : 0.0;
        n_clip += counted && clipped;
        n_tok += counted;
        /* l2 > l1 only when the clamp moved v (inside the range vc == v), so that
           branch has zero gradient; a tie takes the unclipped branch. */
        if (out->grad)
            out->grad[t] = clipped ? 0.0f : (float)((double)in->weights[t] * (v - ret));
    }
    out->loss = 0.5 * loss;
    out->vf_clipfrac = n_tok ? (double)n_clip / (double)n_tok : 0.0;
    out->vpred_mean = n_tok ? vsum / (double)n_tok : 0.0;
    return DF_OK;
}
