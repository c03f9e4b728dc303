/* SRPO's per-group sampling filter and the embodied response mask (include/distflow/srpo.h): siiRL's
 * _filter_batch (siirl/user_interface/filter_interface/embodied.py) and the finish_step mask of
 * compute_advantage / RobDataParallelPPOActor.update_policy. */
#include "distflow/srpo.h"

#include <math.h>
#include <string.h>

static int check_filter(const df_embodied_filter_opts *o, const float *acc, const int64_t *finish_step,
                        int64_t n_groups, int n, const uint8_t *keep)
{
    if (!o || !acc || !keep || n < 1 || n_groups < 0)
        return df_error(DF_EINVAL, "df_embodied_filter: needs options, acc, keep, n >= 1 and n_groups >= 0");
    if (o->filter_accuracy && !(isfinite(o->accuracy_lower_bound) && isfinite(o->accuracy_upper_bound)))
        return df_error(DF_EINVAL, "df_embodied_filter: accuracy bounds must be finite");
    if (o->filter_truncated && (!finish_step || o->max_steps < 1))
        return df_error(DF_EINVAL, "df_embodied_filter: filter_truncated needs finish_step and max_steps >= 1");
    if (o->max_groups < 0)
        return df_error(DF_EINVAL, "df_embodied_filter: max_groups must be >= 0 (0: no limit), got %lld",
                        (long long)o->max_groups);
    return DF_OK;
}

/* Whether group g passes the accuracy and truncation tests (counting why not into st). */
static bool group_passes(const df_embodied_filter_opts *o, const float *acc, const int64_t *finish_step, int64_t g,
                         int n, df_embodied_filter_stats *st)
{
    const int64_t first = g * n;
    bool pass = true;
    if (o->filter_accuracy) {
        /* siiRL: acc_matrix.mean(dim=-1) and its comparison with the Python bounds are float32 (a
           bound of 0.1 is 0.100000001); the sum of n zeros and ones is exact in either precision */
        double sum = 0;
        for (int k = 0; k < n; k++)
            sum += acc[first + k];
        float mean = (float)(sum / n);
        if (!(mean >= (float)o->accuracy_lower_bound && mean <= (float)o->accuracy_upper_bound)) {
            st->out_of_bounds++;
            pass = false;
        }
    }
    if (o->filter_truncated) {
        bool truncated = false;
        for (int k = 0; k < n; k++)
            truncated |= finish_step[first + k] >= o->max_steps;
        if (truncated) {
            st->truncated++;
            pass = false;
        }
    }
    return pass;
}

int df_embodied_filter(const df_embodied_filter_opts *o, const float *acc, const int64_t *finish_step,
                       int64_t n_groups, int n, uint8_t *keep, int64_t *n_kept_rows, df_embodied_filter_stats *stats)
{
    int rc = check_filter(o, acc, finish_step, n_groups, n, keep);
    if (rc)
        return rc;
    df_embodied_filter_stats st = {.groups = n_groups};
    for (int64_t g = 0; g < n_groups; g++) {
        bool pass = group_passes(o, acc, finish_step, g, n, &st);
        if (pass && o->max_groups > 0 && st.kept >= o->max_groups) {
            st.over_max_groups++;
            pass = false;
        }
        st.kept += pass;
        memset(keep + g * n, pass ? 1 : 0, (size_t)n);
    }
    if (n_kept_rows)
        *n_kept_rows = st.kept * n;
    if (stats)
        *stats = st;
    return DF_OK;
}

int df_embodied_response_mask(const int64_t *finish_step, int64_t n, int64_t response_len, int action_token_len,
                              uint8_t *mask)
{
    if (!finish_step || !mask || n < 0 || response_len < 0 || action_token_len < 1)
        return df_error(DF_EINVAL, "df_embodied_response_mask: needs finish_step, mask, n >= 0, response_len >= 0 "
                                   "and action_token_len >= 1");
    for (int64_t i = 0; i < n; i++) {
        if (finish_step[i] < 0)
            return df_error(DF_EINVAL, "df_embodied_response_mask: row %lld has finish_step %lld < 0", (long long)i,
                            (long long)finish_step[i]);
        int64_t valid = finish_step[i] * action_token_len; /* siiRL: steps < finish_step * action_token_len */
        for (int64_t t = 0; t < response_len; t++)
            mask[i * response_len + t] = t < valid;
    }
    return DF_OK;
}

int64_t df_embodied_reward_position(int64_t finish_step, int action_token_len)
{
    return finish_step > 0 && action_token_len > 0 ? finish_step * action_token_len - 1 : -1;
}
