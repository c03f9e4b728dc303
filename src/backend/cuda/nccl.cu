/*
 * nccl.cu — collectives on the GPU (cuda_backend.h): an NCCL communicator per process group,
 * made from the group's df_comm (MPI carries the unique id), the gradient all-reduce and the
 * data coordinator's payload all-to-all. Built
 * with NCCL when CMake finds it (DF_HAVE_NCCL); otherwise every call says NCCL is missing.
 */
#include "backend/cuda/cuda_internal.h"

#include <sched.h>
#include <stdlib.h>

#ifdef DF_HAVE_NCCL
#include <nccl.h>

struct df_cuda_nccl {
    df_cuda *c;
    ncclComm_t comm;
    int size;
};

static int nccl_fail(ncclResult_t r, const char *what)
{
    return df_error(DF_EINTERNAL, "NCCL: %s failed: %s", what, ncclGetErrorString(r));
}

/* Wait for the stream's work (the collective just queued), watching NCCL's asynchronous error
 * state: a peer that died or a broken link is reported, and the communicator aborted, where a
 * plain stream synchronisation would wait forever. An aborted communicator refuses later calls. */
static int nccl_wait(df_cuda_nccl *n, const char *what)
{
    for (;;) {
        cudaError_t q = cudaStreamQuery(n->c->stream);
        if (q == cudaSuccess)
            return DF_OK;
        if (q != cudaErrorNotReady)
            return df_error(DF_EINTERNAL, "CUDA: %s: %s", what, cudaGetErrorString(q));
        ncclResult_t a = ncclSuccess, r = ncclCommGetAsyncError(n->comm, &a);
        if (r == ncclSuccess && (a == ncclSuccess || a == ncclInProgress)) {
            sched_yield();
            continue;
        }
        ncclCommAbort(n->comm);
        n->comm = NULL;
        return nccl_fail(r != ncclSuccess ? r : a, what);
    }
}

static int nccl_live(const df_cuda_nccl *n, const char *what)
{
    if (!n)
        return df_error(DF_EINVAL, "%s: no communicator", what);
    return n->comm ? DF_OK
                   : df_error(DF_EINTERNAL, "%s: the NCCL communicator was aborted after an earlier error", what);
}

int df_cuda_nccl_create(df_cuda *c, df_comm *group, df_cuda_nccl **out)
{
    *out = NULL;
    if (!c || !group)
        return df_error(DF_EINVAL, "df_cuda_nccl_create: no context or group");
    int rank = df_comm_rank(group), size = df_comm_size(group);
    ncclUniqueId id;
    ncclResult_t r = ncclSuccess;
    if (rank == 0)
        r = ncclGetUniqueId(&id);
    /* every rank reaches the broadcast: a failed id becomes a failed init everywhere */
    int ok = r == ncclSuccess;
    int rc = df_comm_broadcast(group, &ok, sizeof ok, 0);
    if (!rc)
        rc = df_comm_broadcast(group, &id, sizeof id, 0);
    if (rc)
        return df_error_wrap(rc, "NCCL communicator: broadcasting the unique id");
    if (!ok)
        return rank == 0 ? nccl_fail(r, "ncclGetUniqueId")
                         : df_error(DF_EINTERNAL, "NCCL: rank 0 of the group could not draw a unique id");
    DFC_TRY(cudaSetDevice(c->device));
    df_cuda_nccl *n = (df_cuda_nccl *)calloc(1, sizeof *n);
    if (!n)
        return df_error(DF_ENOMEM, "NCCL communicator: out of memory");
    n->c = c;
    n->size = size;
    if ((r = ncclCommInitRank(&n->comm, size, id, rank)) != ncclSuccess) {
        free(n);
        return nccl_fail(r, "ncclCommInitRank");
    }
    *out = n;
    return DF_OK;
}

void df_cuda_nccl_free(df_cuda_nccl *n)
{
    if (!n)
        return;
    if (n->comm)
        ncclCommDestroy(n->comm);
    free(n);
}

int df_cuda_nccl_size(const df_cuda_nccl *n) { return n ? n->size : 0; }

int df_cuda_nccl_version(void)
{
    int v = 0;
    return ncclGetVersion(&v) == ncclSuccess ? v : 0;
}

int df_cuda_nccl_allreduce_sum(df_cuda_nccl *n, float *d, int64_t count)
{
    int rc = nccl_live(n, "df_cuda_nccl_allreduce_sum");
    if (rc || count < 0)
        return rc ? rc : df_error(DF_EINVAL, "df_cuda_nccl_allreduce_sum: count < 0");
    if (count == 0)
        return DF_OK;
    ncclResult_t r = ncclAllReduce(d, d, (size_t)count, ncclFloat32, ncclSum, n->comm, n->c->stream);
    return r == ncclSuccess ? nccl_wait(n, "ncclAllReduce") : nccl_fail(r, "ncclAllReduce");
}

int df_cuda_nccl_alltoallv(df_cuda_nccl *n, const void *send, const int64_t *send_counts,
                           void *recv, const int64_t *recv_counts)
{
    int rc = nccl_live(n, "df_cuda_nccl_alltoallv");
    if (rc || !send_counts || !recv_counts)
        return rc ? rc : df_error(DF_EINVAL, "df_cuda_nccl_alltoallv: no counts");
    const char *s = (const char *)send;
    char *r = (char *)recv;
    int64_t so = 0, ro = 0;
    ncclResult_t e = ncclGroupStart();
    /* one group: NCCL matches every send with its receive whatever the peers' order */
    for (int p = 0; p < n->size && e == ncclSuccess; p++) {
        if (send_counts[p] > 0)
            e = ncclSend(s + so, (size_t)send_counts[p], ncclUint8, p, n->comm, n->c->stream);
        if (e == ncclSuccess && recv_counts[p] > 0)
            e = ncclRecv(r + ro, (size_t)recv_counts[p], ncclUint8, p, n->comm, n->c->stream);
        so += send_counts[p];
        ro += recv_counts[p];
    }
    ncclResult_t end = ncclGroupEnd(); /* always closes the group it opened */
    if (e != ncclSuccess)
        return nccl_fail(e, "ncclSend / ncclRecv");
    return end == ncclSuccess ? nccl_wait(n, "ncclSend / ncclRecv") : nccl_fail(end, "ncclGroupEnd (alltoallv)");
}

#else /* no NCCL in this build */

static int no_nccl(void)
{
    return df_error(DF_EUNSUPPORTED, "this distflow was built without NCCL (CMake found none beside CUDA)");
}

int df_cuda_nccl_create(df_cuda *c, df_comm *group, df_cuda_nccl **out)
{
    (void)c, (void)group;
    *out = NULL;
    return no_nccl();
}

void df_cuda_nccl_free(df_cuda_nccl *n) { (void)n; }

int df_cuda_nccl_size(const df_cuda_nccl *n) { (void)n; return 0; }

int df_cuda_nccl_version(void) { return 0; }

int df_cuda_nccl_allreduce_sum(df_cuda_nccl *n, float *d, int64_t count)
{
    (void)n, (void)d, (void)count;
    return no_nccl();
}

int df_cuda_nccl_alltoallv(df_cuda_nccl *n, const void *send, const int64_t *send_counts,
                           void *recv, const int64_t *recv_counts)
{
    (void)n, (void)send, (void)send_counts, (void)recv, (void)recv_counts;
    return no_nccl();
}

#endif
