/* The public node context (include/distflow/node.h): the DAG worker behind a df_node_ctx. */
#include "distflow/node.h"

#include "worker/worker_internal.h"

const df_tokenizer *df_node_tokenizer(const df_node_ctx *ctx)
{
    const df_dag_worker *w = ctx ? ctx->worker : NULL;
    return w ? w->tok : NULL;
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
