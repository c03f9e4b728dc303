/*
 * siiRL's embodied_srpo pipeline in the DAG worker (docs/embodied.md): the env rollout in place of
 * DAGWorker.generate (siiRL's generate_embodied_mode), embodied_local_rank_sampling (the filter),
 * SRPO's reward in place of DAGWorker.compute_reward (EmbodiedRewardManager), and the actor's and
 * the reference's nodes run on the episodes' model-call view. The advantage node is the normal one:
 * GRPO over `uid` groups reads the rewards and response_mask the nodes here write.
 *
 * Like siiRL, the filter and the reward run on each rank's own rows (its prompt groups are whole:
 * the rollout repeats a prompt's n samples where it generates them), so no rank waits for another
 * before the advantage; the reward's successes are then clustered per rank, as siiRL's are.
 */
#include "workers/embodied/embodied_worker.h"
#include "workers/worker_internal.h"

#include "distflow/rng.h"
#include "util/timeutil.h"

#include <stdlib.h>
#include <string.h>

#define SAMPLING "algorithm.embodied_sampling."

/* The rollout in place of DAGWorker.generate: the step's prompts (and oversample_factor - 1 more
   batches of the dataloader) run as episodes from the current policy. */
static int node_env_rollout(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    df_dag_worker *w = df_node_worker(ctx);
    const df_embodied_setup *s = w->embodied;
    double t0 = df_now();
    int rc = df_worker_need_batch(batch, "embodied rollout");
    const int64_t k = w->global.cfg.algorithm.embodied_sampling.oversample_factor;
    df_batch *all = NULL, **parts = calloc((size_t)k, sizeof *parts);
    if (!rc && !parts)
        rc = df_error(DF_ENOMEM, "out of memory");
    for (int64_t g = 1; !rc && g < k; g++) /* uids "s<step>-g<g>-r<row>": new groups */
        rc = df_worker_next_prompts(w, (int)g, &parts[g]);
    if (!rc) {
        parts[0] = batch;
        rc = k > 1 ? df_batch_concat((const df_batch *const *)parts, (int)k, &all) : DF_OK;
    }
    const df_batch *prompts = all ? all : batch;
    int64_t np = rc ? 0 : df_batch_size(prompts);
    int64_t *task = malloc((size_t)(np ? np : 1) * sizeof *task), *trial = malloc((size_t)(np ? np : 1) * sizeof *trial);
    if (!rc && (!task || !trial))
        rc = df_error(DF_ENOMEM, "out of memory");
    if (!rc)
        rc = df_embodied_prompt_episodes(w->train_ds, prompts, task, trial);
    if (!rc && w->rollout.synced_step != df_actor_step_count(w->actor.model)) { /* the weight sync */
        if (!(rc = df_rollout_engine_load_weights(w->rollout.engine, df_actor_model(w->actor.model))))
            w->rollout.synced_step = df_actor_step_count(w->actor.model);
    }
    df_embodied_rollout_opts o = {.sp = df_worker_node_settings(w, ctx->node)->sampling,
                                  .seed = df_rng_key(df_worker_seed(w), 0x6e6, (uint64_t)ctx->step, (uint64_t)ctx->pass),
                                  .n = df_worker_n_samples(w),
                                  .label = w->console && w->rank == 0 ? "rollout" : NULL};
    if (!rc)
        rc = df_embodied_rollout(s, w->rollout.engine, df_actor_model(w->actor.model), w->tok, prompts, task, trial,
                                 &o, &out->batch);
    for (int64_t g = 1; parts && g < k; g++)
        df_batch_free(parts[g]);
    free(parts), free(task), free(trial);
    df_batch_free(all);
    df_worker_timing(ctx, "gen", t0);
    return rc;
}

/* siiRL's verify: acc = complete; and the episodes' metrics. */
static int verify(df_batch *b, const char *env, df_metrics *m)
{
    const int64_t n = df_batch_size(b), *done = df_batch_i64(b, "complete"), *fs = df_batch_i64(b, "finish_step"),
                  *bad = df_batch_i64(b, "invalid_actions");
    if (!done || !fs || !bad)
        return df_error(DF_EINVAL, "embodied batch: needs complete, finish_step and invalid_actions (an env rollout's)");
    float *acc = malloc((size_t)(n ? n : 1) * sizeof *acc);
    if (!acc)
        return df_error(DF_ENOMEM, "out of memory");
    double s[3] = {0, 0, 0};
    for (int64_t i = 0; i < n; i++)
        acc[i] = done[i] ? 1.0f : 0.0f, s[0] += acc[i], s[1] += (double)fs[i], s[2] += (double)bad[i];
    int rc = df_batch_set_f32(b, "acc", acc);
    free(acc);
    static const char *const names[3] = {"success_rate", "finish_step/mean", "invalid_actions/mean"};
    for (int j = 0; !rc && m && n && j < 3; j++) {
        char key[160];
        snprintf(key, sizeof key, "embodied/%s/%s", env, names[j]);
        df_metrics_set(m, key, s[j] / (double)n);
    }
    return rc;
}

/* embodied_local_rank_sampling: verify, then keep the groups algorithm.embodied_sampling passes. */
static int node_sampling(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    df_dag_worker *w = df_node_worker(ctx);
    const df_train_config *t = &w->global.cfg;
    const struct df_train_algorithm_embodied_sampling *k = &t->algorithm.embodied_sampling;
    int rc = df_worker_need_batch(batch, "embodied_local_rank_sampling");
    if (!rc)
        rc = verify(batch, t->actor_rollout_ref.embodied.env.env_name, ctx->metrics);
    const int n = (int)df_worker_n_samples(w);
    const int64_t rows = rc ? 0 : df_batch_size(batch), groups = rows / n;
    df_embodied_filter_opts fo = {.filter_accuracy = k->filter_accuracy, .accuracy_lower_bound = k->accuracy_lower_bound,
                                  .accuracy_upper_bound = k->accuracy_upper_bound, .filter_truncated = k->filter_truncated,
                                  .max_steps = t->actor_rollout_ref.embodied.env.max_steps,
                                  .max_groups = k->oversample_factor > 1 ? groups / k->oversample_factor : 0};
    uint8_t *keep = malloc((size_t)(rows ? rows : 1));
    int64_t *idx = malloc((size_t)(rows ? rows : 1) * sizeof *idx), kept = 0;
    df_embodied_filter_stats st = {0};
    if (!rc && (!keep || !idx))
        rc = df_error(DF_ENOMEM, "out of memory");
    if (!rc && groups * n != rows)
        rc = df_error(DF_EINVAL, "embodied_local_rank_sampling: %lld rows are not whole groups of rollout.n=%d",
                      (long long)rows, n);
    if (!rc)
        rc = df_embodied_filter(&fo, df_batch_f32(batch, "acc"), df_batch_i64(batch, "finish_step"), groups, n, keep,
                                NULL, &st);
    for (int64_t i = 0; !rc && i < rows; i++)
        if (keep[i])
            idx[kept++] = i;
    if (!rc && kept < rows)
        rc = df_batch_select(batch, idx, kept, &out->batch);
    const double v[5] = {(double)st.groups, (double)st.kept, (double)st.out_of_bounds, (double)st.truncated,
                         (double)st.over_max_groups};
    static const char *const names[5] = {"groups", "kept_groups", "out_of_bounds", "truncated", "over_max_groups"};
    for (int j = 0; !rc && ctx->metrics && j < 5; j++) { /* summed over the ranks */
        char key[96];
        snprintf(key, sizeof key, "embodied_sampling/%s", names[j]);
        df_metrics_set(ctx->metrics, key, v[j]);
    }
    free(keep), free(idx);
    return rc;
}

/* SRPO's reward in place of DAGWorker.compute_reward (EmbodiedRewardManager): reward_coef x the
   progress reward (success 1) at the last token of the last action that ran. */
static int node_reward(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    (void)out;
    df_dag_worker *w = df_node_worker(ctx);
    const df_train_config *t = &w->global.cfg;
    double t0 = df_now(), coef = 1.0;
    int rc = df_worker_need_batch(batch, "compute_reward");
    if (!rc)
        rc = verify(batch, t->actor_rollout_ref.embodied.env.env_name, NULL);
    if (!rc)
        rc = df_embodied_reward_coef(t, &coef);
    const int64_t n = rc ? 0 : df_batch_size(batch), *fs = rc ? NULL : df_batch_i64(batch, "finish_step");
    const df_column *emb = rc ? NULL : df_batch_column(batch, DF_EMB_EMBEDDING);
    if (!rc && !emb)
        rc = df_error(DF_EINVAL, "compute_reward: the embodied batch has no %s", DF_EMB_EMBEDDING);
    const int dim = n && emb ? (int)(emb->offsets[1] - emb->offsets[0]) : 1;
    bool *ok = malloc((size_t)(n ? n : 1) * sizeof *ok);
    float *r = malloc((size_t)(n ? n : 1) * sizeof *r), *tok = NULL;
    if (!rc && (!ok || !r))
        rc = df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; !rc && i < n; i++)
        ok[i] = df_batch_i64(batch, "complete")[i] != 0;
    df_srpo_opts so = df_srpo_defaults();
    if (!rc && n)
        rc = df_srpo_progress_reward(emb->data, ok, df_batch_i64(batch, "task_id"), n, dim, &so, r, NULL);
    if (!rc)
        rc = df_batch_alloc_tok_f32_like(batch, "token_level_scores", "response_ids", &tok);
    const int64_t *ro = rc ? NULL : df_batch_offsets(batch, "response_ids");
    double sum = 0;
    for (int64_t i = 0; !rc && i < n; i++) {
        int64_t pos = df_embodied_reward_position(fs[i], (int)t->actor_rollout_ref.embodied.action_token_len);
        r[i] = (float)(coef * r[i]);
        if (pos >= 0 && pos < ro[i + 1] - ro[i])
            tok[ro[i] + pos] = r[i];
        sum += r[i];
    }
    if (!rc)
        rc = df_batch_set_f32(batch, "score", r);
    const df_column *sc = rc ? NULL : df_batch_column(batch, "token_level_scores");
    if (sc)
        rc = df_batch_set_tok_f32(batch, "token_level_rewards", sc->offsets, sc->data);
    if (!rc && ctx->metrics && n) {
        double acc = 0;
        for (int64_t i = 0; i < n; i++)
            acc += ok[i];
        df_metrics_set(ctx->metrics, "critic/acc/mean", acc / (double)n);
        df_metrics_set(ctx->metrics, "embodied/reward_all", sum / (double)n);
    }
    free(ok), free(r);
    df_worker_timing(ctx, "reward", t0);
    return rc;
}

/* A built-in actor / reference node run on the episodes' model calls; `col`, `col2`: its output
 * columns (NULL: none), joined back where the node wrote them. */
static int on_calls(df_node_ctx *ctx, df_batch *batch, df_node_output *out, const char *ref, const char *col,
                    const char *col2)
{
    df_node_fn fn = NULL;
    df_batch *calls = NULL;
    int rc = df_worker_need_batch(batch, ref);
    if (!rc)
        rc = df_exec_find(ref, &fn);
    if (!rc)
        rc = df_embodied_calls_split(batch, &calls);
    if (!rc && !calls)
        return fn(ctx, batch, out);
    if (!rc)
        rc = fn(ctx, calls, out);
    if (!rc && col && df_batch_has(calls, col)) /* the reference writes none without a KL term */
        rc = df_embodied_calls_join(calls, col, batch);
    if (!rc && col2 && df_batch_has(calls, col2))
        rc = df_embodied_calls_join(calls, col2, batch);
    df_batch_free(calls);
    return rc;
}

static int node_old_log_prob(df_node_ctx *ctx, df_batch *b, df_node_output *out)
{
    /* sum_pi_squared: with actor.calculate_sum_pi_squared */
    return on_calls(ctx, b, out, "DAGWorker.compute_old_log_prob", "old_log_probs", "sum_pi_squared");
}
static int node_ref_log_prob(df_node_ctx *ctx, df_batch *b, df_node_output *out)
{
    return on_calls(ctx, b, out, "DAGWorker.compute_ref_log_prob", "ref_log_prob", NULL);
}
static int node_train_actor(df_node_ctx *ctx, df_batch *b, df_node_output *out)
{
    return on_calls(ctx, b, out, "DAGWorker.train_actor", NULL, NULL);
}

/* The built-in nodes an embodied job runs its own way, and the function it runs instead. */
static const struct {
    const char *ref;
    df_node_fn fn;
} k_bound[] = {
    {"DAGWorker.generate", node_env_rollout},
    {"DAGWorker.compute_reward", node_reward},
    {"DAGWorker.compute_old_log_prob", node_old_log_prob},
    {"DAGWorker.compute_ref_log_prob", node_ref_log_prob},
    {"DAGWorker.train_actor", node_train_actor},
};

int df_worker_embodied_setup(df_dag_worker *w)
{
    if (!df_embodied_enabled(&w->global.cfg))
        return DF_OK;
    if (!(w->embodied = calloc(1, sizeof *w->embodied)))
        return df_error(DF_ENOMEM, "out of memory");
    int rc = df_embodied_setup_init(w->embodied, w->cfg, &w->global.cfg, w->tok, true);
    for (size_t b = 0; !rc && b < sizeof k_bound / sizeof *k_bound; b++) {
        df_node_fn base = NULL;
        if ((rc = df_exec_find(k_bound[b].ref, &base)))
            break;
        for (int i = 0; i < df_task_graph_num_nodes(w->graph); i++) {
            df_node *nd = df_task_graph_node_at(w->graph, i);
            if (nd->fn == base)
                nd->fn = k_bound[b].fn;
        }
    }
    return rc;
}

void df_worker_embodied_free(df_dag_worker *w)
{
    if (w->embodied)
        df_embodied_setup_clear(w->embodied);
    free(w->embodied);
    w->embodied = NULL;
}

int df_worker_register_embodied_nodes(void)
{
    /* siiRL's function, after its filter_interface prefix, and the module it lived in before */
    static const char *const names[] = {"embodied.embodied_local_rank_sampling",
                                        "siirl.algorithm.embodied.embodied_local_rank_sampling",
                                        "siirl.algorithm.embodied.sampling.embodied_local_rank_sampling"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        int rc = df_exec_register(names[i], node_sampling);
        if (rc)
            return rc;
    }
    return DF_OK;
}
