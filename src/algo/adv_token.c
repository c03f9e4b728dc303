/*
 * Advantage estimators built on per-token returns: gae, reinforce_plus_plus,
 * remax (include/distflow/algo.h, advest block; formulas and sources there).
 */
#include "algo/adv_internal.h"

#include <stdlib.h>

/* Scratch [n_tokens] doubles (at least one element so n_tokens = 0 is not a failure). */
static double *scratch(const char *who, int64_t n_tokens, int *rc)
{
    double *d = malloc((size_t)(n_tokens > 0 ? n_tokens : 1) * sizeof *d);
    *rc = d ? DF_OK : df_error(DF_ENOMEM, "%s: out of memory for %lld tokens", who, (long long)n_tokens);
    return d;
}

int df_adv_gae(const df_adv_input *in, float *advantages, float *returns)
{
    int rc = df_adv_check("gae", in, DF_ADV_NEED_VALUES | DF_ADV_NEED_GAMMA | DF_ADV_NEED_LAM, advantages,
                          returns);
    if (rc)
        return rc;
    const int64_t n_tok = in->offsets[in->n];
    double *gae = scratch("gae", n_tok, &rc);
    if (rc)
        return rc;
    const double gamma = in->gamma, gl = (double)in->gamma * (double)in->lam;
    const int32_t *mask = in->response_mask;
    for (int64_t i = 0; i < in->n; i++) {
        /* the state after a response's last token is terminal: V = 0, no carried advantage */
        double next_value = 0, last = 0;
        for (int64_t t = in->offsets[i + 1] - 1; t >= in->offsets[i]; t--) {
            const double v = in->values[t];
            const double delta = in->token_level_rewards[t] + gamma * next_value - v;
            /* an appended (tool / user) token is no step of the policy: the model token before it
               sees the next model token's value and advantage (verl's multi-turn GAE) */
            if (!mask || mask[t]) {
                last = delta + gl * last;
                next_value = v;
            }
            gae[t] = last;
            returns[t] = (float)(last + v);
        }
    }
    df_adv_finish_whiten(in, n_tok, gae, advantages);
    free(gae);
    return DF_OK;
}

/* Discounted reward-to-go of every token into ret (per sample, restarting at each response). */
static void reward_to_go(const df_adv_input *in, double gamma, double *ret)
{
    for (int64_t i = 0; i < in->n; i++) {
        double running = 0;
        for (int64_t t = in->offsets[i + 1] - 1; t >= in->offsets[i]; t--) {
            running = in->token_level_rewards[t] + gamma * running;
            ret[t] = running;
        }
    }
}

int df_adv_reinforce_plus_plus(const df_adv_input *in, float *advantages, float *returns)
{
    const char *who = "reinforce_plus_plus";
    int rc = df_adv_check(who, in, DF_ADV_NEED_GAMMA, advantages, returns);
    if (rc)
        return rc;
    const int64_t n_tok = in->offsets[in->n];
    double *ret = scratch(who, n_tok, &rc);
    if (rc)
        return rc;
    reward_to_go(in, in->gamma, ret);
    for (int64_t t = 0; t < n_tok; t++)
        returns[t] = (float)ret[t];
    df_adv_finish_whiten(in, n_tok, ret, advantages);
    free(ret);
    return DF_OK;
}

int df_adv_remax(const df_adv_input *in, float *advantages, float *returns)
{
    int rc = df_adv_check("remax", in, DF_ADV_NEED_BASELINES, advantages, returns);
    if (rc)
        return rc;
    double *ret = scratch("remax", in->offsets[in->n], &rc);
    if (rc)
        return rc;
    reward_to_go(in, 1.0, ret); /* verl: an undiscounted flip-cumsum-flip */
    for (int64_t i = 0; i < in->n; i++)
        for (int64_t t = in->offsets[i]; t < in->offsets[i + 1]; t++) {
            returns[t] = (float)ret[t];
            advantages[t] = (float)(ret[t] - (double)in->reward_baselines[i]);
        }
    free(ret);
    return DF_OK;
}
