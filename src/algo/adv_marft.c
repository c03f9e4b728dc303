/*
 * Multi-agent (MARFT) advantages and rewards (include/distflow/algo.h, marft
 * block): gae_marft, siiRL's GAE chained across the agents and turns of an
 * episode, and share_reward_in_agent. Formulas and sources in the header.
 */
#include "algo/adv_internal.h"

#include "algo/algo_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define WHO "gae_marft"

/* ---- input checks ------------------------------------------------------------------------------ */

static int check_agent(const df_marft_agent_input *ag, int a, int64_t n, const float *adv, const float *ret)
{
    char who[64];
    snprintf(who, sizeof who, WHO " agent %d", a);
    int rc = df_algo_check_offsets(who, n, ag->offsets);
    if (rc)
        return rc;
    const int64_t n_tok = ag->offsets[n];
    if (n_tok > 0 && (!ag->token_level_rewards || !ag->values || !adv || !ret))
        return df_error(DF_EINVAL, "%s: NULL token_level_rewards, values, advantages or returns", who);
    for (int64_t i = 0; i < n; i++)
        for (int64_t t = ag->offsets[i]; t < ag->offsets[i + 1]; t++)
            if (!isfinite(ag->token_level_rewards[t]) || !isfinite(ag->values[t]))
                return df_error(DF_EINVAL, "%s: row %lld, token %lld: reward %g, value %g (must be finite)", who,
                                (long long)i, (long long)(t - ag->offsets[i]), (double)ag->token_level_rewards[t],
                                (double)ag->values[t]);
    return DF_OK;
}

static int check_input(const df_adv_marft_input *in, float *const *adv, float *const *ret)
{
    if (!in || !in->agents || !adv || !ret)
        return df_error(DF_EINVAL, WHO ": NULL input, agents or output arrays");
    if (in->n < 0 || in->n_agents < 1)
        return df_error(DF_EINVAL, WHO ": %lld rows and %d agents (need n >= 0, at least one agent)",
                        (long long)in->n, in->n_agents);
    if (!(in->gamma >= 0 && in->gamma <= 1) || !(in->lam >= 0 && in->lam <= 1))
        return df_error(DF_EINVAL, WHO ": gamma %g and lam %g must be in [0, 1]", (double)in->gamma,
                        (double)in->lam);
    if (in->n > 0 && (!in->request_id || !in->traj_len))
        return df_error(DF_EINVAL, WHO ": NULL request_id or traj_len (the episode of each row)");
    int rc = DF_OK;
    for (int a = 0; !rc && a < in->n_agents; a++)
        rc = check_agent(&in->agents[a], a, in->n, adv[a], ret[a]);
    return rc;
}

/*
 * The episodes as blocks of rows: starts[e] is the first row of episode e, whose
 * rows are starts[e] .. starts[e] + traj_len - 1, all with its request_id and
 * traj_len; episodes in order of first appearance and no request_id in two blocks.
 */
static int episodes_of(const df_adv_marft_input *in, int64_t **starts_out, int64_t *n_ep)
{
    const int64_t n = in->n;
    for (int64_t i = 0; i < n; i++)
        if (!in->request_id[i])
            return df_error(DF_EINVAL, WHO ": request_id of row %lld is NULL", (long long)i);
    int64_t *group = malloc((size_t)(n > 0 ? n : 1) * sizeof *group);
    int64_t *starts = malloc((size_t)(n > 0 ? n : 1) * sizeof *starts);
    int rc = group && starts ? df_group_ids(in->request_id, n, group) : df_error(DF_ENOMEM, WHO ": out of memory");
    int64_t e = 0;
    for (int64_t b = 0; !rc && b < n; e++) {
        const int64_t len = in->traj_len[b];
        const char *id = in->request_id[b];
        if (group[b] != e) /* its id had a block before this one */
            rc = df_error(DF_EINVAL, WHO ": request '%s': rows %lld and before are not contiguous, or more than "
                          "its traj_len", id, (long long)b);
        else if (len < 1 || len > n - b)
            rc = df_error(DF_EINVAL, WHO ": request '%s' (row %lld): traj_len %lld, but %lld rows from there",
                          id, (long long)b, (long long)len, (long long)(n - b));
        for (int64_t r = b + 1; !rc && r < b + len; r++)
            if (group[r] != e || in->traj_len[r] != len)
                rc = df_error(DF_EINVAL, WHO ": request '%s' (row %lld, traj_len %lld): row %lld is request '%s', "
                              "traj_len %lld; an episode's rows are contiguous and agree on traj_len",
                              id, (long long)b, (long long)len, (long long)r, in->request_id[r],
                              (long long)in->traj_len[r]);
        starts[e] = b;
        b += rc ? 0 : len;
    }
    free(group);
    if (rc) {
        free(starts);
        return rc;
    }
    *starts_out = starts;
    *n_ep = e;
    return DF_OK;
}

/* ---- the chained GAE --------------------------------------------------------------------------- */

/* Value of agent ag's first token in row r; 0 for an empty response (siiRL's critic masks it). */
static double first_value(const df_marft_agent_input *ag, int64_t r)
{
    return ag->offsets[r + 1] > ag->offsets[r] ? ag->values[ag->offsets[r]] : 0.0;
}

/* One episode, rows b .. b + len - 1: g runs through every agent and row (header formula). */
static void chain(const df_adv_marft_input *in, int64_t b, int64_t len, double *const *g_out, float *const *ret)
{
    const int A = in->n_agents;
    const double gamma = in->gamma, gl = (double)in->gamma * (double)in->lam;
    double g = 0;
    for (int64_t k = 0; k < len; k++) {
        const int64_t r = b + k;
        for (int a = A - 1; a >= 0; a--) {
            const df_marft_agent_input *ag = &in->agents[a];
            const int64_t s = ag->offsets[r], T = ag->offsets[r + 1] - s;
            for (int64_t t = T - 1; t >= 0; t--) {
                const double v = ag->values[s + t];
                double delta;
                if (t < T - 1) {
                    delta = gamma * ag->values[s + t + 1] - v;
                } else {
                    /* the step after an agent's turn: the next agent's, the next row's first agent's, or the end */
                    double v_next = a < A - 1 ? first_value(&in->agents[a + 1], r)
                                  : k > 0     ? first_value(&in->agents[0], r - 1)
                                              : 0.0;
                    delta = ag->token_level_rewards[s + t] + gamma * v_next - v;
                }
                g = delta + gl * g;
                g_out[a][s + t] = g;
                ret[a][s + t] = (float)(g + v);
            }
        }
    }
}

int df_adv_gae_marft(const df_adv_marft_input *in, float *const *advantages, float *const *returns)
{
    int rc = check_input(in, advantages, returns);
    int64_t *starts = NULL, n_ep = 0;
    if (!rc)
        rc = episodes_of(in, &starts, &n_ep);
    if (rc)
        return rc;
    const int A = in->n_agents;
    double **g = calloc((size_t)A, sizeof *g);
    rc = g ? DF_OK : df_error(DF_ENOMEM, WHO ": out of memory");
    for (int a = 0; !rc && a < A; a++) {
        int64_t n_tok = in->agents[a].offsets[in->n];
        if (!(g[a] = malloc((size_t)(n_tok > 0 ? n_tok : 1) * sizeof **g)))
            rc = df_error(DF_ENOMEM, WHO ": out of memory for agent %d's %lld tokens", a, (long long)n_tok);
    }
    for (int64_t e = 0; !rc && e < n_ep; e++)
        chain(in, starts[e], in->traj_len[starts[e]], g, returns);
    /* whitened per agent, over that agent's tokens of every row (siiRL masked_whiten per agent) */
    for (int a = 0; !rc && a < A; a++) {
        const int64_t n_tok = in->agents[a].offsets[in->n];
        if (!in->defer_whiten)
            df_adv_whiten_d(n_tok, g[a], advantages[a]);
        else
            for (int64_t t = 0; t < n_tok; t++)
                advantages[a][t] = (float)g[a][t];
    }
    for (int a = 0; g && a < A; a++)
        free(g[a]);
    free(g);
    free(starts);
    return rc;
}

int df_adv_gae_marft_single(const df_adv_input *in, float *advantages, float *returns)
{
    int rc = df_adv_check(WHO, in, DF_ADV_NEED_VALUES | DF_ADV_NEED_GAMMA | DF_ADV_NEED_LAM, advantages, returns);
    if (rc)
        return rc;
    for (int64_t i = 0; in->response_mask && i < in->n; i++)
        for (int64_t t = in->offsets[i]; t < in->offsets[i + 1]; t++)
            if (!in->response_mask[t])
                return df_error(DF_EINVAL, WHO ": sample %lld, token %lld is not the model's (response_mask 0): a "
                                "MARFT response is the model's tokens only", (long long)i,
                                (long long)(t - in->offsets[i]));
    const int64_t n_tok = in->offsets[in->n];
    double *g = malloc((size_t)(n_tok > 0 ? n_tok : 1) * sizeof *g);
    if (!g)
        return df_error(DF_ENOMEM, WHO ": out of memory for %lld tokens", (long long)n_tok);
    /* every sample an episode of one turn with one agent: chain() on each row alone */
    df_marft_agent_input ag = {in->offsets, in->token_level_rewards, in->values};
    df_adv_marft_input one = {.n = in->n, .n_agents = 1, .agents = &ag, .gamma = in->gamma, .lam = in->lam};
    for (int64_t i = 0; i < in->n; i++)
        chain(&one, i, 1, &g, &returns);
    df_adv_finish_whiten(in, n_tok, g, advantages);
    free(g);
    return DF_OK;
}

/* ---- share_reward_in_agent --------------------------------------------------------------------- */

int df_marft_share_reward(int64_t n, int n_agents, const int64_t *const *offsets, float *const *rewards,
                          const bool *has_own, bool share)
{
    const char *who = "share_reward_in_agent";
    if (n < 0 || n_agents < 1 || !offsets || !rewards || !has_own)
        return df_error(DF_EINVAL, "%s: %lld rows, %d agents, NULL arrays", who, (long long)n, n_agents);
    if (!has_own[n_agents - 1])
        return df_error(DF_EINVAL, "%s: the last agent (group %d) has no reward of its own; the reward node or "
                        "the environment scores it", who, n_agents - 1);
    for (int a = 0; a < n_agents; a++) {
        int rc = df_algo_check_offsets(who, n, offsets[a]);
        if (rc)
            return rc;
        if (offsets[a][n] > 0 && !rewards[a])
            return df_error(DF_EINVAL, "%s: agent %d's rewards are NULL", who, a);
    }
    for (int a = n_agents - 2; a >= 0; a--) {
        if (has_own[a])
            continue;
        const int64_t *o = offsets[a], *on = offsets[a + 1];
        for (int64_t i = 0; i < n; i++) {
            double score = 0; /* the next agent's, itself shared when it had none */
            for (int64_t t = on[i]; t < on[i + 1]; t++)
                score += rewards[a + 1][t];
            if (!isfinite(score))
                return df_error(DF_EINVAL, "%s: agent %d's reward in row %lld is %g", who, a + 1, (long long)i,
                                score);
            for (int64_t t = o[i]; t < o[i + 1]; t++)
                rewards[a][t] = 0.0f;
            if (share && o[i + 1] > o[i])
                rewards[a][o[i + 1] - 1] = (float)score;
        }
    }
    return DF_OK;
}
