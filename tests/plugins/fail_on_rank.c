/*
 * A node for the failure tests (test_mpi_failure): on the rank named by
 * DF_TEST_FAIL_RANK it fails with a message (fail_node) or kills its own
 * process with SIGKILL (kill_node); on every other rank it does nothing, so
 * those ranks run on into the next collective and would wait there forever
 * if the job did not end.
 */
#include "distflow/comm.h"
#include "distflow/dag.h"

#include <signal.h>
#include <stdlib.h>

DF_PLUGIN_DECLARE_ABI;

static int this_rank_fails(void)
{
    const char *r = getenv("DF_TEST_FAIL_RANK");
    df_comm *world;
    return r && !df_comm_world(&world) && df_comm_rank(world) == atoi(r);
}

DF_API int fail_node(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    (void)batch, (void)out;
    if (this_rank_fails())
        return df_error(DF_EINVAL, "injected failure at step %lld", (long long)ctx->step);
    return DF_OK;
}

DF_API int kill_node(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    (void)ctx, (void)batch, (void)out;
    if (this_rank_fails())
        raise(SIGKILL);
    return DF_OK;
}
