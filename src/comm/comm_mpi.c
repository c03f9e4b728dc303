/*
 * comm_mpi.c — the MPI backend (compiled when CMake defines DF_HAVE_MPI).
 * Each df_comm owns a heap MPI_Comm with MPI_ERRORS_RETURN, so a failing call
 * comes back as DF_EINTERNAL with MPI's error string instead of aborting.
 * Point-to-point messages and requests are in comm_mpi_p2p.c.
 */
#include "comm/comm_internal.h"

#ifdef DF_HAVE_MPI
#include "comm/comm_mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>

int df_comm_mpi_fail(df_comm *c, const char *what, const char *call, int err)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(err, s, &len) != MPI_SUCCESS)
        len = 0;
    s[len] = '\0';
    return df_comm_fail(c, DF_EINTERNAL, what, "%s failed: %s", call, len ? s : "unknown error");
}

static MPI_Datatype mpi_dtype(df_comm_dtype dt)
{
    switch (dt) {
    case DF_COMM_FLOAT32: return MPI_FLOAT;
    case DF_COMM_FLOAT64: return MPI_DOUBLE;
    case DF_COMM_INT64: return MPI_INT64_T;
    }
    return MPI_DATATYPE_NULL;
}

static MPI_Op mpi_op(df_comm_op op)
{
    switch (op) {
    case DF_COMM_SUM: return MPI_SUM;
    case DF_COMM_MAX: return MPI_MAX;
    case DF_COMM_MIN: return MPI_MIN;
    }
    return MPI_OP_NULL;
}

/* Complete a started collective, polling MPI_Test (which also drives the transfer, as MPI_Wait's
 * own loop does) until c->timeout_s, then abandoning it (c is unusable until df_comm_settle: MPI
 * orders a communicator's collectives). Past the first millisecond the poll yields the core
 * between tests: a spinning rank would slow the ranks it waits for. */
static int wait_req(df_comm *c, const char *what, MPI_Request *req)
{
    const double t0 = MPI_Wtime();
    for (;;) {
        int done = 0;
        MPI_TRY(c, what, MPI_Test(req, &done, MPI_STATUS_IGNORE));
        if (done)
            return 0;
        double waited = MPI_Wtime() - t0;
        if (waited > c->timeout_s) {
            PENDING(c) = *req;
            c->timed_out = 1;
            return df_comm_fail(c, DF_EINTERNAL, what,
                                "no reply after %.1f s (trainer.collective_timeout_s): a rank of "
                                "this group of %d stopped, hangs or is far behind; its own output "
                                "says why", waited, c->size);
        }
        if (waited > 1e-3)
            sched_yield();
    }
}

/* A collective: the blocking `call` without a timeout (MPI's tuned algorithms); with one, the
 * non-blocking `icall` (which fills req_) and wait_req. */
#define MPI_COLL(c, what, call, icall)                                                                       \
    do {                                                                                                     \
        if ((c)->timed_out)                                                                                  \
            return df_comm_fail((c), DF_EINTERNAL, (what), "an earlier collective of this group timed "      \
                                "out and was abandoned");                                                    \
        if ((c)->timeout_s <= 0) {                                                                           \
            MPI_TRY((c), (what), call);                                                                      \
            return 0;                                                                                        \
        }                                                                                                    \
        MPI_Request req_ = MPI_REQUEST_NULL;                                                                 \
        MPI_TRY((c), (what), icall);                                                                         \
        return wait_req((c), (what), &req_);                                                                 \
    } while (0)

static int m_barrier(df_comm *c)
{
    MPI_COLL(c, "barrier", MPI_Barrier(MCOMM(c)), MPI_Ibarrier(MCOMM(c), &req_));
}

static int m_bcast(df_comm *c, void *buf, int nbytes, int root)
{
    MPI_COLL(c, "broadcast", MPI_Bcast(buf, nbytes, MPI_BYTE, root, MCOMM(c)),
             MPI_Ibcast(buf, nbytes, MPI_BYTE, root, MCOMM(c), &req_));
}

static int m_allreduce(df_comm *c, void *buf, int count, df_comm_dtype dt, df_comm_op op)
{
    MPI_COLL(c, "allreduce", MPI_Allreduce(MPI_IN_PLACE, buf, count, mpi_dtype(dt), mpi_op(op), MCOMM(c)),
             MPI_Iallreduce(MPI_IN_PLACE, buf, count, mpi_dtype(dt), mpi_op(op), MCOMM(c), &req_));
}

static int m_allgather(df_comm *c, const void *send, int nbytes, void *recv)
{
    MPI_COLL(c, "allgather", MPI_Allgather(send, nbytes, MPI_BYTE, recv, nbytes, MPI_BYTE, MCOMM(c)),
             MPI_Iallgather(send, nbytes, MPI_BYTE, recv, nbytes, MPI_BYTE, MCOMM(c), &req_));
}

static int m_allgatherv(df_comm *c, const void *send, int nbytes, void *recv, const int *counts,
                        const int *displs)
{
    MPI_COLL(c, "allgatherv",
             MPI_Allgatherv(send, nbytes, MPI_BYTE, recv, counts, displs, MPI_BYTE, MCOMM(c)),
             MPI_Iallgatherv(send, nbytes, MPI_BYTE, recv, counts, displs, MPI_BYTE, MCOMM(c), &req_));
}

static int m_alltoallv(df_comm *c, const void *send, const int *scounts, const int *sdispls, void *recv,
                       const int *rcounts, const int *rdispls)
{
    MPI_COLL(c, "alltoallv",
             MPI_Alltoallv(send, scounts, sdispls, MPI_BYTE, recv, rcounts, rdispls, MPI_BYTE, MCOMM(c)),
             MPI_Ialltoallv(send, scounts, sdispls, MPI_BYTE, recv, rcounts, rdispls, MPI_BYTE, MCOMM(c),
                            &req_));
}

static int m_settle(df_comm *c)
{
    if (PENDING(c) != MPI_REQUEST_NULL)
        MPI_TRY(c, "settle", MPI_Wait(&PENDING(c), MPI_STATUS_IGNORE));
    int rc = df_comm_mpi_settle_dropped(c);
    if (!rc)
        c->timed_out = 0;
    return rc;
}

/* Wrap a fresh MPI communicator (MPI_COMM_NULL -> *child stays NULL). */
static int wrap(df_comm *parent, const char *what, MPI_Comm mc, df_comm **child)
{
    if (mc == MPI_COMM_NULL)
        return 0;
    mpi_impl *h = calloc(1, sizeof *h);
    int rank = 0, size = 0;
    if (h) {
        *h = (mpi_impl){.comm = mc, .pending = MPI_REQUEST_NULL};
        MPI_Comm_set_errhandler(mc, MPI_ERRORS_RETURN);
        MPI_Comm_rank(mc, &rank);
        MPI_Comm_size(mc, &size);
        *child = df_comm_new(&df_comm_mpi_ops, DF_COMM_MPI, h, rank, size);
    }
    if (!h || !*child) {
        free(h);
        MPI_Comm_free(&mc);
        return df_comm_fail(parent, DF_ENOMEM, what, "out of memory");
    }
    return 0;
}

static int m_split(df_comm *c, int color, int key, df_comm **child)
{
    MPI_Comm mc = MPI_COMM_NULL;
    int mcolor = color == DF_COMM_UNDEFINED ? MPI_UNDEFINED : color;
    MPI_TRY(c, "split", MPI_Comm_split(MCOMM(c), mcolor, key, &mc));
    return wrap(c, "split", mc, child);
}

static int m_from_ranks(df_comm *c, const int *ranks, int n, df_comm **child)
{
    MPI_Group parent_group = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
    MPI_Comm mc = MPI_COMM_NULL;
    MPI_TRY(c, "from_ranks", MPI_Comm_group(MCOMM(c), &parent_group));
    int err = MPI_Group_incl(parent_group, n, ranks, &group);
    MPI_Group_free(&parent_group);
    if (err != MPI_SUCCESS)
        return df_comm_mpi_fail(c, "from_ranks", "MPI_Group_incl", err);
    /* A fixed tag: groups created concurrently from one parent must be
     * created in the same order on their common members, as in MPI. */
    err = MPI_Comm_create_group(MCOMM(c), group, 0x4446, &mc);
    MPI_Group_free(&group);
    if (err != MPI_SUCCESS)
        return df_comm_mpi_fail(c, "from_ranks", "MPI_Comm_create_group", err);
    return wrap(c, "from_ranks", mc, child);
}

static void m_free(df_comm *c)
{
    mpi_impl *h = c->impl;
    if (!h)
        return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && h->comm != MPI_COMM_NULL && h->comm != MPI_COMM_WORLD)
        MPI_Comm_free(&h->comm);
    df_comm_mpi_p2p_free(h);
    free(h);
    c->impl = NULL;
}

const df_comm_ops df_comm_mpi_ops = {
    .barrier = m_barrier,
    .bcast = m_bcast,
    .allreduce = m_allreduce,
    .allgather = m_allgather,
    .allgatherv = m_allgatherv,
    .alltoallv = m_alltoallv,
    .split = m_split,
    .from_ranks = m_from_ranks,
    .settle = m_settle,
    .free_impl = m_free,
    .isend = df_comm_mpi_isend,
    .probe = df_comm_mpi_probe,
    .recv = df_comm_mpi_recv,
    .ibcast = df_comm_mpi_ibcast,
    .req_test = df_comm_mpi_req_test,
    .req_drop = df_comm_mpi_req_drop,
};

int df_comm_mpi_library(char *buf, size_t size)
{
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(v, &len) != MPI_SUCCESS)
        return df_error(DF_EINTERNAL, "MPI_Get_library_version failed");
    v[len < MPI_MAX_LIBRARY_VERSION_STRING ? len : MPI_MAX_LIBRARY_VERSION_STRING - 1] = '\0';
    v[strcspn(v, "\r\n")] = '\0';
    snprintf(buf, size, "%s", v);
    return 0;
}

int df_comm_mpi_initialized(void)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

int df_comm_mpi_world(df_comm *world, int *owned)
{
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin)
        return df_comm_fail(NULL, DF_EUNSUPPORTED, "world",
                            "MPI is already finalised and cannot start again");
    *owned = 0;
    if (!df_comm_mpi_initialized()) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return df_comm_fail(NULL, DF_EINTERNAL, "world", "MPI_Init_thread failed");
        *owned = 1;
    }
    /* Our own duplicate of MPI_COMM_WORLD: its error handler is ours to set and
     * our collectives cannot match an embedding program's messages. */
    mpi_impl *h = calloc(1, sizeof *h);
    if (!h)
        return df_comm_fail(NULL, DF_ENOMEM, "world", "out of memory");
    h->pending = MPI_REQUEST_NULL;
    if (*owned)
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int err = MPI_Comm_dup(MPI_COMM_WORLD, &h->comm);
    if (err != MPI_SUCCESS) {
        free(h);
        return df_comm_mpi_fail(NULL, "world", "MPI_Comm_dup", err);
    }
    MPI_Comm_set_errhandler(h->comm, MPI_ERRORS_RETURN);
    world->ops = &df_comm_mpi_ops;
    world->backend = DF_COMM_MPI;
    world->impl = h;
    MPI_Comm_rank(h->comm, &world->rank);
    MPI_Comm_size(h->comm, &world->size);
    return 0;
}

int df_comm_mpi_shutdown(df_comm *world, int owned)
{
    m_free(world);
    if (owned && MPI_Finalize() != MPI_SUCCESS)
        return df_comm_fail(NULL, DF_EINTERNAL, "shutdown", "MPI_Finalize failed");
    return 0;
}

void df_comm_mpi_abort(int code)
{
    MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
}

#else
/* Built without MPI: the single backend is the only one. */
typedef int df_comm_mpi_unused;
#endif
