/*
 * comm.c — the backend-independent half of the comm layer: the world
 * communicator, argument checks, int64 -> int count checks and chunking, the
 * count exchanges of allgatherv / alltoallv and their output allocation.
 */
#include "comm/comm_internal.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The world communicator is process state, like MPI_COMM_WORLD. */
enum { WORLD_NONE = 0, WORLD_LIVE = 1, WORLD_DONE = 2 };
static struct {
    int state;
    int mpi_owned;
    df_comm comm;
} g_world;

int df_comm_fail(const df_comm *c, int code, const char *what, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c)
        return df_error(code, "comm %s (rank %d of %d): %s", what, c->rank, c->size, msg);
    return df_error(code, "comm %s: %s", what, msg);
}

df_comm *df_comm_new(const df_comm_ops *ops, df_comm_backend backend, void *impl, int rank, int size)
{
    df_comm *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->ops = ops;
    c->backend = backend;
    c->impl = impl;
    c->rank = rank;
    c->size = size;
    c->max_chunk = INT_MAX;
    return c;
}

void df_comm_set_max_chunk(df_comm *c, int64_t max_chunk)
{
    c->max_chunk = max_chunk > 0 && max_chunk < INT_MAX ? max_chunk : INT_MAX;
}

static int launched_by_mpi(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i]))
            return 1;
    return 0;
}

/* Which backend the world uses: DF_COMM env, else MPI when launched by mpirun. */
static int choose_backend(df_comm_backend *out)
{
    const char *force = getenv("DF_COMM");
    int want_mpi;
    if (force && !*force)
        force = NULL;
    if (force) {
        if (strcmp(force, "mpi") == 0)
            want_mpi = 1;
        else if (strcmp(force, "single") == 0)
            want_mpi = 0;
        else
            return df_comm_fail(NULL, DF_EINVAL, "world",
                                "environment DF_COMM=\"%s\": expected \"mpi\" or \"single\"", force);
    } else {
#ifdef DF_HAVE_MPI
        want_mpi = df_comm_mpi_initialized() || launched_by_mpi();
#else
        want_mpi = 0;
#endif
    }
#ifndef DF_HAVE_MPI
    if (want_mpi)
        return df_comm_fail(NULL, DF_EUNSUPPORTED, "world",
                            "DF_COMM=mpi but distflow was built without MPI "
                            "(configure with MPI installed and -DDF_WITH_MPI=ON)");
    /* N copies each believing it is the whole job would each train alone. */
    if (!force && launched_by_mpi())
        return df_comm_fail(NULL, DF_EUNSUPPORTED, "world",
                            "started by mpirun but distflow was built without MPI (rebuild "
                            "with libopenmpi-dev and -DDF_WITH_MPI=ON, or set DF_COMM=single "
                            "to run every process alone)");
#endif
    *out = want_mpi ? DF_COMM_MPI : DF_COMM_SINGLE;
    return 0;
}

int df_comm_world(df_comm **out)
{
    if (!out)
        return df_comm_fail(NULL, DF_EINVAL, "world", "out is NULL");
    *out = NULL;
    if (g_world.state == WORLD_LIVE) {
        *out = &g_world.comm;
        return 0;
    }
    df_comm_backend be = DF_COMM_SINGLE;
    int rc = choose_backend(&be);
    if (rc)
        return rc;
    if (g_world.state == WORLD_DONE && be == DF_COMM_MPI)
        return df_comm_fail(NULL, DF_EUNSUPPORTED, "world",
                            "MPI was finalised by df_comm_shutdown and cannot start again");
    memset(&g_world.comm, 0, sizeof g_world.comm);
    g_world.mpi_owned = 0;
    if (be == DF_COMM_SINGLE) {
        g_world.comm.ops = &df_comm_single_ops;
        g_world.comm.backend = DF_COMM_SINGLE;
        g_world.comm.rank = 0;
        g_world.comm.size = 1;
    } else {
#ifdef DF_HAVE_MPI
        rc = df_comm_mpi_world(&g_world.comm, &g_world.mpi_owned);
        if (rc)
            return rc;
#endif
    }
    g_world.comm.is_world = 1;
    g_world.comm.max_chunk = INT_MAX;
    g_world.state = WORLD_LIVE;
    *out = &g_world.comm;
    return 0;
}

int df_comm_shutdown(void)
{
    if (g_world.state != WORLD_LIVE)
        return 0;
    int rc = 0;
#ifdef DF_HAVE_MPI
    if (g_world.comm.backend == DF_COMM_MPI)
        rc = df_comm_mpi_shutdown(&g_world.comm, g_world.mpi_owned);
#endif
    if (g_world.comm.backend == DF_COMM_SINGLE)
        df_comm_single_ops.free_impl(&g_world.comm); /* messages to self nobody received */
    g_world.state = WORLD_DONE;
    return rc;
}

void df_comm_abort(int code)
{
#ifdef DF_HAVE_MPI
    if (g_world.state == WORLD_LIVE && g_world.comm.backend == DF_COMM_MPI)
        df_comm_mpi_abort(code);
#else
    (void)code;
#endif
}

int df_comm_mpi_library_version(char *buf, size_t size)
{
#ifdef DF_HAVE_MPI
    return df_comm_mpi_library(buf, size);
#else
    if (size)
        buf[0] = '\0';
    return df_error(DF_EUNSUPPORTED, "built without MPI (DF_WITH_MPI=OFF or MPI not found)");
#endif
}

int df_comm_rank(const df_comm *c)
{
    return c->rank;
}
int df_comm_size(const df_comm *c)
{
    return c->size;
}
df_comm_backend df_comm_backend_of(const df_comm *c)
{
    return c->backend;
}

void df_comm_set_timeout(df_comm *c, double seconds)
{
    if (c)
        c->timeout_s = seconds > 0 ? seconds : 0;
}

int df_comm_settle(df_comm *c)
{
    if (!c)
        return df_comm_fail(NULL, DF_EINVAL, "settle", "communicator is NULL");
    return c->timed_out && c->ops->settle ? c->ops->settle(c) : DF_OK;
}

int df_comm_barrier(df_comm *c)
{
    if (!c)
        return df_comm_fail(NULL, DF_EINVAL, "barrier", "communicator is NULL");
    return c->ops->barrier(c);
}

int df_comm_broadcast(df_comm *c, void *buf, int64_t nbytes, int root)
{
    if (!c)
        return df_comm_fail(NULL, DF_EINVAL, "broadcast", "communicator is NULL");
    if (root < 0 || root >= c->size)
        return df_comm_fail(c, DF_EINVAL, "broadcast", "root %d is not a rank (size %d)", root, c->size);
    if (nbytes < 0 || (!buf && nbytes > 0))
        return df_comm_fail(c, DF_EINVAL, "broadcast", "bad buffer (%lld bytes, buf %s)", (long long)nbytes,
                            buf ? "set" : "NULL");
    /* Every rank passes the same nbytes, so every rank cuts the same chunks. */
    for (int64_t off = 0; off < nbytes; off += c->max_chunk) {
        int64_t n = nbytes - off < c->max_chunk ? nbytes - off : c->max_chunk;
        int rc = c->ops->bcast(c, (char *)buf + off, (int)n, root);
        if (rc)
            return rc;
    }
    return 0;
}

static size_t dtype_size(df_comm_dtype dt)
{
    switch (dt) {
    case DF_COMM_FLOAT32: return sizeof(float);
    case DF_COMM_FLOAT64: return sizeof(double);
    case DF_COMM_INT64: return sizeof(int64_t);
    }
    return 0;
}

int df_comm_allreduce(df_comm *c, void *buf, int64_t count, df_comm_dtype dtype, df_comm_op op)
{
    if (!c)
        return df_comm_fail(NULL, DF_EINVAL, "allreduce", "communicator is NULL");
    size_t es = dtype_size(dtype);
    if (es == 0)
        return df_comm_fail(c, DF_EINVAL, "allreduce", "unknown dtype %d", (int)dtype);
    if (op != DF_COMM_SUM && op != DF_COMM_MAX && op != DF_COMM_MIN)
        return df_comm_fail(c, DF_EINVAL, "allreduce", "unknown op %d", (int)op);
    if (count < 0 || (!buf && count > 0))
        return df_comm_fail(c, DF_EINVAL, "allreduce", "bad buffer (%lld elements, buf %s)", (long long)count,
                            buf ? "set" : "NULL");
    for (int64_t off = 0; off < count; off += c->max_chunk) {
        int64_t n = count - off < c->max_chunk ? count - off : c->max_chunk;
        int rc = c->ops->allreduce(c, (char *)buf + off * (int64_t)es, (int)n, dtype, op);
        if (rc)
            return rc;
    }
    return 0;
}

int df_comm_allgather(df_comm *c, const void *send, int64_t nbytes, void *recv)
{
    if (!c)
        return df_comm_fail(NULL, DF_EINVAL, "allgather", "communicator is NULL");
    if (nbytes < 0 || nbytes > INT_MAX)
        return df_comm_fail(c, DF_EINVAL, "allgather", "%lld bytes per rank: must be in 0..INT_MAX (%d)",
                            (long long)nbytes, INT_MAX);
    if (nbytes > 0 && (!send || !recv))
        return df_comm_fail(c, DF_EINVAL, "allgather", "%s buffer is NULL", send ? "receive" : "send");
    if (nbytes == 0)
        return 0;
    return c->ops->allgather(c, send, (int)nbytes, recv);
}

/* int copies of int64 counts with prefix-sum displacements; -1 if any
 * count, displacement or the total is above INT_MAX. */
static int to_int_layout(const int64_t *counts, int n, int *icounts, int *idispls, int64_t *total)
{
    int64_t off = 0;
    int ok = 1;
    for (int i = 0; i < n; i++) {
        if (counts[i] > INT_MAX || off > INT_MAX)
            ok = 0;
        icounts[i] = ok ? (int)counts[i] : 0;
        idispls[i] = ok ? (int)off : 0;
        off += counts[i];
    }
    if (off > INT_MAX)
        ok = 0;
    *total = off;
    return ok ? 0 : -1;
}

/* Optional int64 counts / displacements outputs. */
static int give_layout(df_comm *c, const char *what, const int64_t *counts, int64_t **counts_out,
                       int64_t **displs_out)
{
    int n = c->size;
    if (counts_out) {
        *counts_out = malloc((size_t)n * sizeof(int64_t));
        if (!*counts_out)
            return df_comm_fail(c, DF_ENOMEM, what, "out of memory");
        memcpy(*counts_out, counts, (size_t)n * sizeof(int64_t));
    }
    if (displs_out) {
        *displs_out = malloc((size_t)n * sizeof(int64_t));
        if (!*displs_out) {
            if (counts_out) {
                free(*counts_out);
                *counts_out = NULL;
            }
            return df_comm_fail(c, DF_ENOMEM, what, "out of memory");
        }
        int64_t off = 0;
        for (int i = 0; i < n; i++) {
            (*displs_out)[i] = off;
            off += counts[i];
        }
    }
    return 0;
}

int df_comm_allgatherv(df_comm *c, const void *send, int64_t send_bytes, void **recv_out,
                       int64_t **counts_out, int64_t **displs_out)
{
    const char *what = "allgatherv";
    if (!c)
        return df_comm_fail(NULL, DF_EINVAL, what, "communicator is NULL");
    if (!recv_out)
        return df_comm_fail(c, DF_EINVAL, what, "recv_out is NULL");
    *recv_out = NULL;
    if (counts_out)
        *counts_out = NULL;
    if (displs_out)
        *displs_out = NULL;
    if (send_bytes < 0 || (!send && send_bytes > 0))
        return df_comm_fail(c, DF_EINVAL, what, "bad send buffer (%lld bytes, buf %s)", (long long)send_bytes,
                            send ? "set" : "NULL");
    int n = c->size;
    int64_t *counts = malloc((size_t)n * sizeof(int64_t));
    int *ic = malloc((size_t)n * sizeof(int));
    int *id = malloc((size_t)n * sizeof(int));
    char *recv = NULL;
    int rc = 0;
    if (!counts || !ic || !id) {
        rc = df_comm_fail(c, DF_ENOMEM, what, "out of memory for %d counts", n);
        goto done;
    }
    rc = c->ops->allgather(c, &send_bytes, (int)sizeof(int64_t), counts);
    if (rc)
        goto done;
    int64_t total;
    if (to_int_layout(counts, n, ic, id, &total) != 0) {
        rc = df_comm_fail(c, DF_EINVAL, what,
                          "%lld bytes in total (this rank sends %lld): above INT_MAX (%d), "
                          "which MPI counts cannot address; send in smaller pieces",
                          (long long)total, (long long)send_bytes, INT_MAX);
        goto done;
    }
    recv = malloc(total > 0 ? (size_t)total : 1);
    if (!recv) {
        rc = df_comm_fail(c, DF_ENOMEM, what, "out of memory for %lld bytes", (long long)total);
        goto done;
    }
    if (total > 0)
        rc = c->ops->allgatherv(c, send, (int)send_bytes, recv, ic, id);
    if (!rc)
        rc = give_layout(c, what, counts, counts_out, displs_out);
done:
    if (rc)
        free(recv);
    else
        *recv_out = recv;
    free(counts);
    free(ic);
    free(id);
    return rc;
}

/* Exchange per-destination counts: rcounts[s] = what rank s sends to us. */
static int exchange_counts(df_comm *c, const int64_t *scounts, int64_t *rcounts, int *tmp)
{
    int n = c->size, *cnt = tmp, *dsp = tmp + n;
    for (int i = 0; i < n; i++) {
        cnt[i] = (int)sizeof(int64_t);
        dsp[i] = i * (int)sizeof(int64_t);
    }
    return c->ops->alltoallv(c, scounts, cnt, dsp, rcounts, cnt, dsp);
}

int df_comm_alltoallv(df_comm *c, const void *send, const int64_t *send_counts, void **recv_out,
                      int64_t **recv_counts_out, int64_t **recv_displs_out)
{
    const char *what = "alltoallv";
    if (!c)
        return df_comm_fail(NULL, DF_EINVAL, what, "communicator is NULL");
    if (!recv_out)
        return df_comm_fail(c, DF_EINVAL, what, "recv_out is NULL");
    *recv_out = NULL;
    if (recv_counts_out)
        *recv_counts_out = NULL;
    if (recv_displs_out)
        *recv_displs_out = NULL;
    if (!send_counts)
        return df_comm_fail(c, DF_EINVAL, what, "send_counts is NULL");
    int n = c->size;
    int64_t stotal = 0;
    for (int d = 0; d < n; d++) {
        if (send_counts[d] < 0)
            return df_comm_fail(c, DF_EINVAL, what, "send_counts[%d] = %lld is negative", d,
                                (long long)send_counts[d]);
        stotal += send_counts[d];
    }
    if (stotal > 0 && !send)
        return df_comm_fail(c, DF_EINVAL, what, "send is NULL with %lld bytes to send", (long long)stotal);
    int64_t *rcounts = malloc((size_t)n * sizeof(int64_t));
    int *ints = malloc((size_t)n * 4 * sizeof(int));
    char *recv = NULL;
    int rc = 0;
    if (!rcounts || !ints) {
        rc = df_comm_fail(c, DF_ENOMEM, what, "out of memory for %d counts", n);
        goto done;
    }
    rc = exchange_counts(c, send_counts, rcounts, ints);
    if (rc)
        goto done;
    int *sc = ints, *sd = ints + n, *rcn = ints + 2 * n, *rd = ints + 3 * n;
    int64_t rtotal, s2;
    /* both layouts are needed, so no short-circuit */
    int bad = to_int_layout(send_counts, n, sc, sd, &s2) != 0;
    if (to_int_layout(rcounts, n, rcn, rd, &rtotal) != 0)
        bad = 1;
    /* Every rank must learn that some rank overflowed, or the others would
     * wait in the alltoallv forever. */
    int64_t any_bad = bad;
    rc = c->ops->allreduce(c, &any_bad, 1, DF_COMM_INT64, DF_COMM_MAX);
    if (rc)
        goto done;
    if (any_bad) {
        rc =
            df_comm_fail(c, DF_EINVAL, what,
                         "%s: a send or receive total above INT_MAX (%d) bytes, which MPI "
                         "counts cannot address (this rank sends %lld, receives %lld); send in "
                         "smaller pieces",
                         bad ? "on this rank" : "on another rank", INT_MAX, (long long)s2, (long long)rtotal);
        goto done;
    }
    recv = malloc(rtotal > 0 ? (size_t)rtotal : 1);
    if (!recv) {
        rc = df_comm_fail(c, DF_ENOMEM, what, "out of memory for %lld bytes", (long long)rtotal);
        goto done;
    }
    rc = c->ops->alltoallv(c, send, sc, sd, recv, rcn, rd);
    if (!rc)
        rc = give_layout(c, what, rcounts, recv_counts_out, recv_displs_out);
done:
    if (rc)
        free(recv);
    else
        *recv_out = recv;
    free(rcounts);
    free(ints);
    return rc;
}

int df_comm_split(df_comm *parent, int color, int key, df_comm **child)
{
    if (!parent || !child)
        return df_comm_fail(parent, DF_EINVAL, "split", "%s is NULL", parent ? "child" : "parent");
    *child = NULL;
    if (color < 0 && color != DF_COMM_UNDEFINED)
        return df_comm_fail(parent, DF_EINVAL, "split", "color %d: must be >= 0 or DF_COMM_UNDEFINED", color);
    int rc = parent->ops->split(parent, color, key, child);
    if (!rc && *child) /* a child keeps its parent's patience */
        (*child)->timeout_s = parent->timeout_s;
    return rc;
}

int df_comm_from_ranks(df_comm *parent, const int *ranks, int n, df_comm **child)
{
    const char *what = "from_ranks";
    if (!parent || !child)
        return df_comm_fail(parent, DF_EINVAL, what, "%s is NULL", parent ? "child" : "parent");
    *child = NULL;
    if (!ranks || n < 1)
        return df_comm_fail(parent, DF_EINVAL, what, "empty rank list (n = %d)", n);
    int member = 0;
    for (int i = 0; i < n; i++) {
        if (ranks[i] < 0 || ranks[i] >= parent->size)
            return df_comm_fail(parent, DF_EINVAL, what, "ranks[%d] = %d is not a rank (size %d)", i,
                                ranks[i], parent->size);
        for (int j = 0; j < i; j++)
            if (ranks[j] == ranks[i])
                return df_comm_fail(parent, DF_EINVAL, what,
                                    "rank %d is listed twice (ranks[%d] and ranks[%d])", ranks[i], j, i);
        if (ranks[i] == parent->rank)
            member = 1;
    }
    if (!member)
        return 0;
    int rc = parent->ops->from_ranks(parent, ranks, n, child);
    if (!rc && *child)
        (*child)->timeout_s = parent->timeout_s;
    return rc;
}

void df_comm_free(df_comm *c)
{
    if (!c || c->is_world)
        return;
    if (c->ops->free_impl)
        c->ops->free_impl(c);
    free(c);
}
