/*
 * The Optimal Token Baseline estimators (include/distflow/algo.h, advest block): a baseline per
 * token position and prompt group, each response weighted by the policy-gradient variance it has
 * accumulated up to that position (verl compute_optimal_token_baseline_advantage and
 * compute_multi_turn_optimal_token_baseline_advantage). One code path serves both: they differ in
 * what a position is (a token index, or the index among the model's tokens), in whether a sample
 * without model tokens stays in its group, and in the zero tail.
 */
#include "algo/adv_internal.h"

#include <math.h>
#include <stdlib.h>

/* verl's default epsilon of both estimators; verl's driver never passes another. Not in->epsilon:
   that is grpo's std guard (1e-6 by default), a different quantity that would pull the baseline
   toward 0 wherever a group's accumulated weight is small. */
#define OTB_EPS 1e-8
/* float rounding allowed above the bounds of a probability: log pi <= 0, sum pi^2 <= 1 */
#define OTB_SLACK 1e-5

typedef struct {
    const char *who;
    bool compact;   /* positions count the model's tokens only; a sample without any leaves its group */
    bool zero_tail; /* verl handle_zero_tail: a group's unique longest sample gets no baseline past
                       the second longest (lengths in model tokens) */
} otb_mode;

static bool is_model(const df_adv_input *in, int64_t t)
{
    return !in->response_mask || in->response_mask[t] != 0;
}

static int otb_check(const char *who, const df_adv_input *in, const float *adv, const float *ret)
{
    int rc = df_adv_check(who, in, DF_ADV_NEED_GROUP, adv, ret);
    if (rc || in->offsets[in->n] == 0)
        return rc;
    if (!in->old_log_probs || !in->sum_pi_squared)
        return df_error(
            DF_EINVAL,
            "%s: %s is NULL (%s weighs tokens by the actor's probabilities: set "
            "actor_rollout_ref.actor.calculate_sum_pi_squared: true, and run the old-log-prob pass "
            "before the advantage)",
            who, in->old_log_probs ? "sum_pi_squared" : "old_log_probs", who);
    for (int64_t i = 0; i < in->n; i++)
        for (int64_t t = in->offsets[i]; t < in->offsets[i + 1]; t++) {
            if (!is_model(in, t))
                continue; /* not read */
            const float lp = in->old_log_probs[t], sq = in->sum_pi_squared[t];
            if (!isfinite(lp) || lp > OTB_SLACK)
                return df_error(DF_EINVAL,
                                "%s: old log-prob of sample %lld, token %lld is %g (a log-probability: "
                                "finite, <= 0)",
                                who, (long long)i, (long long)(t - in->offsets[i]), (double)lp);
            if (!(sq >= 0 && sq <= 1 + OTB_SLACK))
                return df_error(DF_EINVAL,
                                "%s: sum_pi_squared of sample %lld, token %lld is %g, outside [0, 1]", who,
                                (long long)i, (long long)(t - in->offsets[i]), (double)sq);
        }
    return DF_OK;
}

static int otb(const otb_mode *md, const df_adv_input *in, float *advantages, float *returns)
{
    int rc = otb_check(md->who, in, advantages, returns);
    if (rc)
        return rc;
    const int64_t n = in->n, *off = in->offsets, n_tok = off[n];
    const size_t nt = (size_t)(n_tok > 0 ? n_tok : 1), ns = (size_t)(n > 0 ? n : 1);
    double *G = malloc(nt * sizeof *G), *W = malloc(nt * sizeof *W);
    int64_t *pos = malloc(nt * sizeof *pos);        /* each model token's position */
    int64_t *len = malloc(ns * sizeof *len);        /* model tokens of each sample */
    int64_t *start = calloc(ns + 1, sizeof *start); /* group k's members: member[start[k] .. start[k + 1]) */
    int64_t *member = malloc(ns * sizeof *member), *next = malloc(ns * sizeof *next);
    double *num = NULL, *den = NULL; /* per position of one group: sum G W, sum W */
    if (!G || !W || !pos || !len || !start || !member || !next)
        goto oom;

    /* G (reward-to-go of the model's rewards), W (cumulative w over the model's tokens), positions */
    int64_t max_len = 0; /* the longest sample's tokens: no position reaches it */
    for (int64_t i = 0; i < n; i++) {
        double g = 0, w = 0;
        for (int64_t t = off[i + 1] - 1; t >= off[i]; t--) {
            if (is_model(in, t))
                g += in->token_level_rewards[t];
            G[t] = g;
            returns[t] = (float)g;
            advantages[t] = 0.0f;
        }
        int64_t k = 0;
        for (int64_t t = off[i]; t < off[i + 1]; t++) {
            pos[t] = md->compact ? k : t - off[i];
            if (is_model(in, t)) {
                const double rho = in->rollout_is_weights ? in->rollout_is_weights[t] : 1.0;
                w += (1.0 - 2.0 * exp((double)in->old_log_probs[t]) + (double)in->sum_pi_squared[t]) * rho * rho;
                k++;
            }
            W[t] = w;
        }
        len[i] = k;
        if (off[i + 1] - off[i] > max_len)
            max_len = off[i + 1] - off[i];
    }
    num = malloc((size_t)(max_len > 0 ? max_len : 1) * sizeof *num);
    den = malloc((size_t)(max_len > 0 ? max_len : 1) * sizeof *den);
    if (!num || !den)
        goto oom;

    /* the members of each group, in sample order (compact: the samples with a model token) */
    for (int64_t i = 0; i < n; i++)
        if (!md->compact || len[i] > 0)
            start[in->group[i] + 1]++;
    for (int64_t k = 0; k < n; k++)
        start[k + 1] += start[k];
    for (int64_t k = 0; k < n; k++)
        next[k] = start[k];
    for (int64_t i = 0; i < n; i++)
        if (!md->compact || len[i] > 0)
            member[next[in->group[i]]++] = i;

    for (int64_t k = 0; k < n; k++) {
        const int64_t *mb = member + start[k], c = start[k + 1] - start[k];
        if (c == 0)
            continue;
        int64_t span = 0, longest = -1, l1 = -1, l2 = -1; /* l1 >= l2: the two largest lengths */
        for (int64_t j = 0; j < c; j++) {
            const int64_t i = mb[j];
            span = off[i + 1] - off[i] > span ? off[i + 1] - off[i] : span;
            if (len[i] > l1)
                l2 = l1, l1 = len[i], longest = i;
            else if (len[i] > l2)
                l2 = len[i];
        }
        /* a group of one keeps num = den = 0: baseline 0 */
        for (int64_t p = 0; p < span; p++)
            num[p] = den[p] = 0.0;
        for (int64_t j = 0; c > 1 && j < c; j++)
            for (int64_t t = off[mb[j]]; t < off[mb[j] + 1]; t++)
                if (is_model(in, t)) {
                    num[pos[t]] += G[t] * W[t];
                    den[pos[t]] += W[t];
                }
        /* the zero tail: the longest sample's positions from the second longest's length on, when
           it is the only longest (verl; with compacted positions a tie would cut at l1, which no
           position reaches, so uniqueness only matters for token-index positions) */
        const int64_t tail = md->zero_tail && c > 1 && l1 > l2 ? longest : -1;
        for (int64_t j = 0; j < c; j++) {
            const int64_t i = mb[j];
            for (int64_t t = off[i]; t < off[i + 1]; t++)
                if (is_model(in, t)) {
                    const double b = i == tail && pos[t] >= l2 ? 0.0 : num[pos[t]] / (den[pos[t]] + OTB_EPS);
                    advantages[t] = (float)(G[t] - b);
                }
        }
    }
    free(G), free(W), free(pos), free(len), free(start), free(member), free(next), free(num), free(den);
    return DF_OK;
oom:
    free(G), free(W), free(pos), free(len), free(start), free(member), free(next), free(num), free(den);
    return df_error(DF_ENOMEM, "%s: out of memory for %lld samples, %lld tokens", md->who, (long long)n,
                    (long long)n_tok);
}

int df_adv_optimal_token_baseline(const df_adv_input *in, float *advantages, float *returns)
{
    static const otb_mode md = {"optimal_token_baseline", false, false};
    return otb(&md, in, advantages, returns);
}

int df_adv_tir_optimal_token_baseline(const df_adv_input *in, float *advantages, float *returns)
{
    static const otb_mode md = {"tir_optimal_token_baseline", true, true};
    return otb(&md, in, advantages, returns);
}
