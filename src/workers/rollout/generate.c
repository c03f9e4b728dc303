/*
 * The rollout worker's node: siiRL's DAGWorker.generate — rollout.n responses per
 * prompt from the current policy through the rollout engine, with the node's own
 * sampling settings; in a greedy pass (DF_PASS_GREEDY: ReMax's baseline, re-run by
 * the reward_baseline node) one greedy response per prompt, as verl's
 * do_sample=False generation.
 */
#include "workers/worker_internal.h"

#include "util/timeutil.h"

int df_worker_rollout_sync(df_dag_worker *w)
{
    df_agent_slot s0 = df_worker_slot(w, NULL);
    return df_worker_slot_sync(&s0);
}

/* n responses per prompt, through the job's agent loop when it has one (multi_turn.enable or
 * dag.env_enable: agent_loop.h); an environment's episodes are seeded from the run's seed and the
 * global step, so every step plays new ones and a resumed run plays the same. */
static int generate_with_turns(df_dag_worker *w, const df_agent_slot *s, const df_batch *prompts, int64_t n,
                               const df_sampling_params *sp, uint64_t seed, int64_t step, const char *label,
                               df_batch **out)
{
    uint64_t env_seed = df_rng_key(df_worker_seed(w), 0xe57, (uint64_t)step, 0);
    return df_agent_generate(s->rollout->agent, s->tok, s->rollout->engine, df_actor_model(s->actor->model), prompts,
                             n, sp, seed, env_seed, label, out);
}

int df_worker_generate(df_dag_worker *w, const df_node *node, const df_batch *prompts, int64_t step, int gen,
                       df_batch **out)
{
    df_agent_slot s = df_worker_slot(w, node); /* the node's agent group's engine and tokenizer */
    int rc = df_worker_slot_sync(&s);
    if (rc)
        return rc;
    uint64_t seed = df_rng_key(df_worker_seed(w), 0x6e6, (uint64_t)step, (uint64_t)gen);
    if (s.group > 0) /* each agent group its own stream (group 0's as a single-agent job's) */
        seed = df_rng_key(seed, 0xa6e, (uint64_t)s.group, 0);
    /* a workflow node may override the sampling keys: its own settings, resolved at setup */
    const df_sampling_params node_sp = df_worker_node_settings(w, node)->sampling;
    return generate_with_turns(w, &s, prompts, df_worker_n_samples(w), &node_sp, seed, step,
                               w->console && w->rank == 0 ? "rollout" : NULL, out);
}

/* The node's settings decoded greedily (verl do_sample=False), one response per prompt; seed 0:
   argmax draws nothing. */
static int generate_greedy(df_dag_worker *w, const df_node *node, const df_batch *prompts, int64_t step,
                           df_batch **out)
{
    df_sampling_params sp = df_worker_node_settings(w, node)->sampling;
    sp.greedy = true;
    sp.temperature = 1.0f;
    sp.top_k = -1;
    sp.top_p = 1.0f;
    df_agent_slot s = df_worker_slot(w, node);
    int rc = df_worker_slot_sync(&s);
    if (rc)
        return rc;
    /* a multi-turn job's baseline converses as its samples do */
    return generate_with_turns(w, &s, prompts, 1, &sp, 0, step, w->console && w->rank == 0 ? "gen_max" : NULL, out);
}

/* rollout_actor: n responses per prompt from the current policy. */
static int node_generate(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    double t0 = df_now();
    df_dag_worker *w = df_node_worker(ctx);
    /* independent agent groups: a later group samples the step's prompts, not the batch the group
       before it trained on (a chained graph's rollout nodes run marft_rollout.c's instead) */
    const df_batch *prompts = ctx->node && ctx->node->agent_group > 0 ? ctx->input : batch;
    int rc = df_worker_need_batch(prompts, "generate");
    if (!rc && (ctx->flags & DF_PASS_GREEDY))
        rc = generate_greedy(w, ctx->node, prompts, ctx->step, &out->batch);
    else if (!rc)
        rc = df_worker_generate(w, ctx->node, prompts, ctx->step, ctx->pass, &out->batch);
    df_worker_timing(ctx, "gen", t0);
    return rc;
}

int df_worker_register_rollout_nodes(void)
{
    /* what a rollout node samples with: read from its own typed settings, so a workflow node may set it */
    static const df_node_keys keys = {.global = {"actor_rollout_ref.rollout.temperature", "actor_rollout_ref.rollout.top_k",
                                                 "actor_rollout_ref.rollout.top_p", "actor_rollout_ref.rollout.do_sample",
                                                 "actor_rollout_ref.model.path"}}; /* its agent group's model */
    int rc = df_exec_register_keys("DAGWorker.generate", node_generate, &keys);
    return rc ? rc : df_worker_register_dynamic_sampling();
}
