/*
 * The built-in node functions, registered in the executable registry under siiRL's
 * DAGWorker.* names so any TaskGraph can name them: each role worker registers its
 * own (workers/<role>/), with the config: keys they read per node.
 */
#include "workers/worker_internal.h"
#include "workers/embodied/embodied_worker.h"

int df_worker_register_nodes(void)
{
    int (*const roles[])(void) = {df_worker_register_rollout_nodes, df_worker_register_reward_nodes,
                                  df_worker_register_advantage_nodes, df_worker_register_actor_nodes,
                                  df_worker_register_reference_nodes, df_worker_register_critic_nodes,
                                  df_worker_register_embodied_nodes};
    for (size_t i = 0; i < sizeof roles / sizeof *roles; i++) {
        int rc = roles[i]();
        if (rc)
            return rc;
    }
    return DF_OK;
}
