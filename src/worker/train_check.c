/* What a workflow node may set per node, and siiRL's default functions (moved from node_config.c). */
#include "worker/worker_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- what a node function reads from its node's `config:` ----------------------- */

#define RO "actor_rollout_ref.rollout."
#define AC "actor_rollout_ref.actor."
static const struct {
    const char *exec;
    const char *keys[10];
} k_per_node[] = {
    {"DAGWorker.generate", {RO "temperature", RO "top_k", RO "top_p", RO "do_sample"}},
    {"DAGWorker.train_actor",
     {AC "clip_ratio_low", AC "clip_ratio_high", AC "clip_ratio_c", AC "entropy_coeff",
      AC "kl_loss_coef", AC "kl_loss_type", AC "loss_agg_mode", AC "policy_loss.loss_mode",
      AC "ppo_epochs"}},
    {"DAGWorker.train_critic", {"critic.cliprange_value", "critic.loss_agg_mode", "critic.ppo_epochs"}},
};
#define N_PER_NODE (sizeof k_per_node / sizeof *k_per_node)

const char *const df_worker_planner_node_keys[] = {"model_params", NULL};

const char *df_worker_default_exec(const df_node *n)
{
    bool model = n->node_type == DF_NODE_MODEL_TRAIN || n->node_type == DF_NODE_MODEL_INFERENCE;
    bool fwd = n->only_forward_compute;
    switch (n->node_role) {
    case DF_ROLE_ROLLOUT: return model ? "DAGWorker.generate" : NULL;
    case DF_ROLE_REWARD: return "DAGWorker.compute_reward";
    case DF_ROLE_ADVANTAGE: return "DAGWorker.compute_advantage";
    case DF_ROLE_ACTOR: return fwd ? "DAGWorker.compute_old_log_prob" : "DAGWorker.train_actor";
    case DF_ROLE_REFERENCE: return "DAGWorker.compute_ref_log_prob";
    case DF_ROLE_CRITIC: return fwd ? "DAGWorker.compute_value" : "DAGWorker.train_critic";
    default: return NULL;
    }
}

/* The k_per_node row of function fn, or -1. */
static int exec_row(df_node_fn fn)
{
    for (size_t r = 0; r < N_PER_NODE; r++) {
        df_node_fn f;
        if (fn && !df_exec_resolve(k_per_node[r].exec, &f) && f == fn)
            return (int)r;
    }
    return -1;
}

int df_worker_check_node_key(df_node_fn fn, const char *key, const char *where)
{
    int r = exec_row(fn);
    for (int i = 0; r >= 0 && i < 10 && k_per_node[r].keys[i]; i++)
        if (!strcmp(key, k_per_node[r].keys[i]))
            return DF_OK;
    char list[600] = "";
    for (int i = 0; r >= 0 && i < 10 && k_per_node[r].keys[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                 k_per_node[r].keys[i]);
    return df_error(DF_EUNSUPPORTED, "%s: %s cannot be changed per node (%s%s)", where, key,
                    r >= 0 ? "this node honours: " : "this node's function reads no per-node keys",
                    list);
}
#undef RO
#undef AC

