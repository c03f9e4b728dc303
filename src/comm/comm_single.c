/*
 * comm_single.c — the single-process backend: world size 1. Every collective
 * over one rank is the identity (reductions) or a copy (gathers, exchanges),
 * so code written for N ranks runs unchanged without MPI.
 */
#include "comm/comm_internal.h"

#include <string.h>

static int single_barrier(df_comm *c)
{
    return 0;
}

static int single_bcast(df_comm *c, void *buf, int nbytes, int root)
{
    return 0;
}

static int single_allreduce(df_comm *c, void *buf, int count, df_comm_dtype dt, df_comm_op op)
{
    return 0; /* op over one rank leaves every element as it is */
}

static int single_allgather(df_comm *c, const void *send, int nbytes, void *recv)
{
    memmove(recv, send, (size_t)nbytes);
    return 0;
}

static int single_allgatherv(df_comm *c, const void *send, int nbytes, void *recv, const int *counts,
                             const int *displs)
{
    memmove((char *)recv + displs[0], send, (size_t)counts[0]);
    return 0;
}

static int single_alltoallv(df_comm *c, const void *send, const int *scounts, const int *sdispls, void *recv,
                            const int *rcounts, const int *rdispls)
{
    if (scounts[0] > 0)
        memmove((char *)recv + rdispls[0], (const char *)send + sdispls[0], (size_t)scounts[0]);
    return 0;
}

/* A new one-rank communicator in *child; op names a failure. */
static int single_child(df_comm *c, const char *op, df_comm **child)
{
    *child = df_comm_new(&df_comm_single_ops, DF_COMM_SINGLE, NULL, 0, 1);
    return *child ? 0 : df_comm_fail(c, DF_ENOMEM, op, "out of memory");
}

static int single_split(df_comm *c, int color, int key, df_comm **child)
{
    return color == DF_COMM_UNDEFINED ? 0 : single_child(c, "split", child);
}

static int single_from_ranks(df_comm *c, const int *ranks, int n, df_comm **child)
{
    return single_child(c, "from_ranks", child);
}

const df_comm_ops df_comm_single_ops = {
    .barrier = single_barrier,
    .bcast = single_bcast,
    .allreduce = single_allreduce,
    .allgather = single_allgather,
    .allgatherv = single_allgatherv,
    .alltoallv = single_alltoallv,
    .split = single_split,
    .from_ranks = single_from_ranks,
    .free_impl = NULL,
};
