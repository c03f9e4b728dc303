/* The public node context (include/distflow/node.h): the DAG worker behind a df_node_ctx. */
#include "distflow/node.h"

#include "workers/worker_internal.h"

const df_tokenizer *df_node_tokenizer(const df_node_ctx *ctx)
{
    const df_dag_worker *w = ctx ? ctx->worker : NULL;
    return w ? df_worker_slot(w, ctx->node).tok : NULL;
}

const df_train_config *df_node_config(const df_node_ctx *ctx)
{
    const df_dag_worker *w = ctx ? ctx->worker : NULL;
    return w ? &df_worker_node_settings(w, ctx->node)->cfg : NULL;
}

df_comm *df_node_comm(const df_node_ctx *ctx)
{
    const df_dag_worker *w = ctx ? ctx->worker : NULL;
    return w ? w->group : NULL;
}

void df_node_layout_of(const df_node_ctx *ctx, int *dp_size, int *dp_rank, int *mp_size, int *mp_rank)
{
    const df_dag_worker *w = ctx ? ctx->worker : NULL;
    const df_node_layout *l = w && ctx->node ? df_worker_node_layout(w, ctx->node) : NULL;
    df_node_layout one = {1, 1, 0, 0};
    if (!l)
        l = &one;
    if (dp_size)
        *dp_size = l->dp_size;
    if (dp_rank)
        *dp_rank = l->dp_rank;
    if (mp_size)
        *mp_size = l->mp;
    if (mp_rank)
        *mp_rank = l->mp_rank;
}

bool df_node_has_model(const df_node_ctx *ctx, df_node_role role)
{
    const df_dag_worker *w = ctx ? ctx->worker : NULL;
    if (!w)
        return false;
    df_agent_slot s = df_worker_slot(w, ctx->node); /* the node's agent group's models */
    switch (role) {
    case DF_ROLE_ACTOR:
    case DF_ROLE_ROLLOUT: return s.actor->model != NULL;
    case DF_ROLE_REFERENCE: return df_worker_has_reference(s.reference);
    case DF_ROLE_CRITIC: return s.critic->model != NULL;
    default: return false;
    }
}

/* The worker behind ctx, or DF_EINVAL naming the call (and its node) when there is none or no batch. */
static int worker_of(const df_node_ctx *ctx, const void *batch, const char *fn, df_dag_worker **w)
{
    const char *id = ctx && ctx->node ? ctx->node->node_id : "?";
    *w = ctx ? ctx->worker : NULL;
    if (!*w)
        return df_error(DF_EINVAL, "%s (node '%s'): no DAG worker behind the node context", fn, id);
    if (!batch)
        return df_error(DF_EINVAL, "%s (node '%s'): no batch", fn, id);
    return DF_OK;
}

int df_node_log_probs(const df_node_ctx *ctx, df_node_role role, df_batch *batch, const char *column,
                      double *entropy_mean)
{
    df_dag_worker *w;
    int rc = worker_of(ctx, batch, "df_node_log_probs", &w);
    if (rc)
        return rc;
    df_agent_slot s = df_worker_slot(w, ctx->node);
    const char *id = ctx->node ? ctx->node->node_id : "?";
    if (role == DF_ROLE_REFERENCE) { /* a model, or the LoRA actor's base */
        rc = df_worker_ref_log_prob(s.reference, batch, column, entropy_mean);
        return rc ? df_error_wrap(rc, "df_node_log_probs (node '%s')", id) : DF_OK;
    }
    if (role != DF_ROLE_ACTOR || !s.actor->model)
        return df_error(DF_EINVAL, "df_node_log_probs (node '%s'): log-probs come from the ACTOR or "
                        "REFERENCE model", id);
    return df_actor_compute_log_prob(s.actor->model, batch, column, entropy_mean);
}

int df_node_values(const df_node_ctx *ctx, df_batch *batch)
{
    df_dag_worker *w;
    int rc = worker_of(ctx, batch, "df_node_values", &w);
    df_critic *critic = rc ? NULL : df_worker_slot(w, ctx->node).critic->model;
    if (!rc && !critic)
        rc = df_error(DF_EINVAL, "df_node_values (node '%s'): the job has no critic",
                      ctx->node ? ctx->node->node_id : "?");
    return rc ? rc : df_critic_compute_values(critic, batch);
}

int df_node_generate(const df_node_ctx *ctx, const df_batch *prompts, df_batch **out)
{
    df_dag_worker *w;
    *out = NULL;
    int rc = worker_of(ctx, prompts, "df_node_generate", &w);
    if (rc)
        return rc;
    /* its own stream: generation indices from 0x100 up are the nodes', below DAPO's refills */
    int gen = 0x100 + (ctx->node ? df_worker_node_index(w, ctx->node) : 0);
    return df_worker_generate(w, ctx->node, prompts, ctx->step, gen, out);
}
