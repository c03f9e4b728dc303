/*
 * The ADVANTAGE nodes of a chained multi-agent graph (siiRL DAGWorker.compute_multi_agent_advantage):
 * first every agent's scores (an agent without a reward node of its own gets the next agent's,
 * share_reward_in_agent: df_marft_share_reward), then
 *   gae_marft:        GAE chained across the agents of each episode (df_adv_gae_marft) in the one
 *                     node (of the last group), each agent's KL-in-reward and whitening in its view;
 *   other estimators: the advantage node's own function in an agent's view (per-agent GRPO: each
 *                     agent's responses grouped by the shared uid): for every agent when the graph
 *                     has one advantage node, for the node's group when each group has its own (siiRL's
 *                     earlier MARFT files).
 * What the per-agent passes record is prefixed agent_<g>_.
 */
#include "workers/dag/marft_run.h"

#include "distflow/algo.h"
#include "distflow/algo_desc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *col(int a, const char *name, char buf[DF_COL_NAME_MAX])
{
    return df_marft_column(a, name, buf, DF_COL_NAME_MAX) ? "" : buf;
}

/* Agents without scores of their own get zeros, then the next agent's (share_reward_in_agent);
 * token_level_rewards follow the scores. */
static int share_scores(df_dag_worker *w, df_batch *b)
{
    const int A = w->marft->n_agents;
    int64_t n = df_batch_size(b);
    const int64_t **off = calloc((size_t)A, sizeof *off);
    float **sc = calloc((size_t)A, sizeof *sc);
    bool *own = calloc((size_t)A, sizeof *own);
    int rc = off && sc && own ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    char name[DF_COL_NAME_MAX], like[DF_COL_NAME_MAX];
    for (int a = 0; !rc && a < A; a++) {
        own[a] = df_batch_has(b, col(a, "token_level_scores", name));
        if (!own[a] && a == A - 1)
            rc = df_error(DF_EINVAL, "compute_advantage: the last agent (group %d) has no token_level_scores: "
                          "give its group a REWARD node, or the environment's score "
                          "(actor_rollout_ref.rollout.agent.rewards_with_env)", a);
        if (!rc && !own[a])
            rc = df_batch_alloc_tok_f32_like(b, name, col(a, "response_ids", like), &sc[a]);
        if (!rc && !(off[a] = df_batch_offsets(b, col(a, "response_ids", like))))
            rc = df_error(DF_EINVAL, "compute_advantage: agent group %d has no response_ids", a);
        if (!rc && own[a])
            sc[a] = df_batch_data_mut(b, name);
    }
    if (!rc)
        rc = df_marft_share_reward(n, A, off, sc, own, w->global.cfg.algorithm.share_reward_in_agent);
    for (int a = 0; !rc && a < A; a++)
        if (!own[a] && !(rc = df_marft_column(a, "token_level_rewards", like, sizeof like)))
            rc = df_batch_set_tok_f32(b, like, off[a], sc[a]);
    free(off), free(sc), free(own);
    return rc;
}

/* Run fn in agent a's view; what it records is agent a's. */
static int in_view(df_node_ctx *ctx, df_batch *b, int a, int (*fn)(df_node_ctx *, df_batch *, void *), void *user)
{
    df_dag_worker *w = df_node_worker(ctx);
    int mark = ctx->metrics ? df_metrics_count(ctx->metrics) : 0;
    int rc = df_marft_view(w->marft, b, a);
    if (!rc)
        rc = fn(ctx, b, user);
    int vrc = df_marft_view(w->marft, b, -1);
    char prefix[32];
    snprintf(prefix, sizeof prefix, "agent_%d_", a);
    if (!rc && ctx->metrics)
        rc = df_metrics_prefix_from(ctx->metrics, mark, prefix);
    return rc ? rc : vrc;
}

static int run_own(df_node_ctx *ctx, df_batch *b, void *user)
{
    df_node_output out = {0};
    int rc = df_node_worker(ctx)->marft->adv_fn(ctx, b, &out);
    (void)user;
    if (out.batch) /* the advantage node edits its batch in place */
        df_batch_free(out.batch);
    return rc;
}

static int kl_in_reward(df_node_ctx *ctx, df_batch *b, void *user)
{
    (void)user;
    return df_worker_kl_in_reward(df_node_worker(ctx), ctx->node, b, ctx->metrics);
}

static int whiten(df_node_ctx *ctx, df_batch *b, void *user)
{
    int *status = user; /* collective: every rank joins, failed or not */
    *status = df_worker_whiten_advantages(df_node_worker(ctx), ctx->node, *status, b);
    return DF_OK;
}

/* gae_marft over all agents: each sequence one episode of one turn (use_all_traj=false). */
static int gae_marft(df_node_ctx *ctx, df_batch *b)
{
    df_dag_worker *w = df_node_worker(ctx);
    const int A = w->marft->n_agents;
    const int64_t n = df_batch_size(b);
    const bool defer = df_worker_defers_whiten(w, ctx->node);
    df_marft_agent_input *ag = calloc((size_t)A, sizeof *ag);
    float **adv = calloc((size_t)A, sizeof *adv), **ret = calloc((size_t)A, sizeof *ret);
    char **rid = calloc((size_t)(n ? n : 1), sizeof *rid);
    int64_t *len = malloc((size_t)(n ? n : 1) * sizeof *len);
    int rc = ag && adv && ret && rid && len ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    char name[DF_COL_NAME_MAX], like[DF_COL_NAME_MAX];
    for (int a = 0; !rc && a < A; a++) { /* a batch's columns stay where they are as others are added */
        const df_column *r = df_batch_column(b, col(a, "token_level_rewards", name));
        const df_column *v = df_batch_column(b, col(a, "values", name));
        if (!r || !v)
            rc = df_error(DF_EINVAL, "compute_advantage (gae_marft): agent group %d has no %s", a,
                          r ? "values (a CRITIC node of its own or shared)" : "token_level_rewards");
        else
            ag[a] = (df_marft_agent_input){.offsets = r->offsets, .token_level_rewards = r->data, .values = v->data};
        if (!rc)
            rc = df_batch_alloc_tok_f32_like(b, col(a, "advantages", name), col(a, "response_ids", like), &adv[a]);
        if (!rc)
            rc = df_batch_alloc_tok_f32_like(b, col(a, "returns", name), col(a, "response_ids", like), &ret[a]);
    }
    for (int64_t i = 0; !rc && i < n; i++) {
        char id[32];
        snprintf(id, sizeof id, "%lld", (long long)i);
        len[i] = 1;
        if (!(rid[i] = strdup(id)))
            rc = df_error(DF_ENOMEM, "out of memory");
    }
    const struct df_train_algorithm *alg = &w->global.cfg.algorithm;
    df_adv_marft_input in = {.n = n, .n_agents = A, .agents = ag, .request_id = (const char *const *)rid,
                             .traj_len = len, .gamma = (float)alg->gamma, .lam = (float)alg->lam, .defer_whiten = defer};
    if (!rc)
        rc = df_adv_gae_marft(&in, adv, ret);
    for (int64_t i = 0; rid && i < n; i++)
        free(rid[i]);
    free(rid), free(len), free(ag), free(adv), free(ret);
    for (int a = 0; defer && a < A; a++) /* every rank, every agent, failed or not */
        in_view(ctx, b, a, whiten, &rc);
    return rc;
}

int df_marft_node_advantage(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    df_dag_worker *w = df_node_worker(ctx);
    const df_adv_estimator_desc *d = df_adv_estimator_find(w->global.cfg.algorithm.adv_estimator);
    bool joint = d && (d->needs & DF_ADV_NEEDS_AGENTS);
    (void)out;
    int rc = df_worker_need_batch(batch, "compute_advantage");
    if (!rc) /* the first advantage node shares; later ones find every agent's scores */
        rc = share_scores(w, batch);
    const bool all = w->marft->n_adv == 1;
    for (int a = 0; !rc && a < w->marft->n_agents; a++)
        if (all || a == ctx->node->agent_group)
            rc = in_view(ctx, batch, a, joint ? kl_in_reward : run_own, NULL);
    if (!rc && joint)
        rc = gae_marft(ctx, batch);
    return rc;
}
