/*
 * A chained multi-agent step's batch metrics (siiRL's metrics per agent group): each agent's data
 * metrics under its prefix (agent_<g>_critic/score/mean, agent_<g>_response_length/mean, ...); the
 * step's unprefixed ones are then computed in the last agent's view (its score is the episode's),
 * with the tokens and the explained-variance sums of every agent.
 */
#include "workers/dag/marft_run.h"

#include "workers/common/data_metrics.h"

#include <stdio.h>

int df_marft_step_metrics(df_dag_worker *w, df_batch *b, df_metrics *m, double ev_sums[DF_EV_NSUMS],
                          double *other_tokens)
{
    const df_marft_run *r = w->marft;
    const df_train_config *t = &w->global.cfg;
    int rc = DF_OK;
    *other_tokens = 0;
    for (int a = 0; !rc && a < r->n_agents; a++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "agent_%d_", a);
        int mark = df_metrics_count(m);
        rc = df_marft_view(w->marft, b, a);
        if (!rc)
            rc = df_compute_data_metrics(b, t->actor_rollout_ref.rollout.response_length, t->data.max_prompt_length, m);
        if (!rc)
            rc = df_metrics_prefix_from(m, mark, prefix);
        if (rc || a == r->n_agents - 1) /* the caller counts the last agent's */
            continue;
        const int64_t *po = df_batch_offsets(b, "prompt_ids"), *ro = df_batch_offsets(b, "response_ids");
        int64_t n = df_batch_size(b);
        *other_tokens += (double)((po ? po[n] : 0) + (ro ? ro[n] : 0));
        if (w->cur_layout.mp_rank == 0)
            df_explained_var_sums(b, ev_sums);
    }
    return rc;
}
