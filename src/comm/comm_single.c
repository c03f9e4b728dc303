/*
 * comm_single.c — the single-process backend: world size 1. Every collective
 * over one rank is the identity (reductions) or a copy (gathers, exchanges),
 * so code written for N ranks runs unchanged without MPI. A message a rank sends
 * itself is copied into the communicator's queue (impl) at once, so every send
 * and broadcast completes immediately.
 */
#include "comm/comm_internal.h"

#include <stdlib.h>
#include <string.h>

/* One queued message to self; the queue keeps send order (messages on one tag stay in order). */
typedef struct single_msg {
    struct single_msg *next;
    int tag;
    int64_t nbytes;
    unsigned char data[];
} single_msg;

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

static int single_isend(df_comm *c, const void *buf, int64_t nbytes, int dest, int tag, df_comm_request *req)
{
    single_msg *m = malloc(sizeof *m + (size_t)nbytes);
    if (!m)
        return df_comm_fail(c, DF_ENOMEM, req->what, "out of memory for %lld bytes", (long long)nbytes);
    *m = (single_msg){NULL, tag, nbytes};
    if (nbytes > 0)
        memcpy(m->data, buf, (size_t)nbytes);
    single_msg **tail = (single_msg **)&c->impl;
    while (*tail)
        tail = &(*tail)->next;
    *tail = m;
    return 0;
}

/* The link pointing at the first queued message on tag (NULL when none). */
static single_msg **find_tag(df_comm *c, int tag)
{
    for (single_msg **p = (single_msg **)&c->impl; *p; p = &(*p)->next)
        if ((*p)->tag == tag)
            return p;
    return NULL;
}

static int single_probe(df_comm *c, int source, int tag, bool *found, int *src, int64_t *nbytes)
{
    single_msg **p = find_tag(c, tag);
    *found = p != NULL;
    *src = 0;
    *nbytes = p ? (*p)->nbytes : 0;
    return 0;
}

static int single_recv(df_comm *c, void *buf, int64_t nbytes, int source, int tag)
{
    single_msg **p = find_tag(c, tag);
    if (!p)
        return df_comm_fail(c, DF_EINTERNAL, "recv", "no message on tag %d is queued, and a world of one "
                            "rank would wait forever for one", tag);
    single_msg *m = *p;
    if (m->nbytes != nbytes)
        return df_comm_fail(c, DF_EINVAL, "recv", "the message from rank 0 on tag %d has %lld bytes, not "
                            "%lld (it stays queued)", tag, (long long)m->nbytes, (long long)nbytes);
    if (nbytes > 0)
        memcpy(buf, m->data, (size_t)nbytes);
    *p = m->next;
    free(m);
    return 0;
}

static int single_ibcast(df_comm *c, void *buf, int64_t nbytes, int root, df_comm_request *req)
{
    return 0; /* the root's buffer is the output: complete at once */
}

static void single_free(df_comm *c)
{
    for (single_msg *m = c->impl, *next; m; m = next) {
        next = m->next;
        free(m);
    }
    c->impl = NULL;
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
    .free_impl = single_free,
    .isend = single_isend,
    .probe = single_probe,
    .recv = single_recv,
    .ibcast = single_ibcast,
};
