/*
 * The payload move of a put through a backend's fabric (buffers_internal.h,
 * df_payload_alltoallv_dev): df_comm_alltoallv's contract, host bytes in and out, with the
 * bytes carried by the backend's alltoallv (NCCL on CUDA) between device buffers.
 *
 * MPI keeps the control plane: the counts go first (an alltoallv of one 8-byte count per
 * destination), and the staging's outcome is agreed before the device collective, so no
 * rank enters it while another has already failed (a collective half-entered hangs).
 */
#include "coordinator/buffers_internal.h"

#include <stdlib.h>
#include <string.h>

/* Every rank gets the lowest failing rank's code; a failing rank keeps its own message. */
static int agree(df_comm *w, int rc, const char *stage)
{
    int code, who, crc = df_coord_agree(w, rc, &code, &who);
    if (crc)
        return df_error_wrap(crc, "device payload move: status allreduce after %s", stage);
    if (!code || rc)
        return rc;
    return df_error(code, "device payload move: rank %d failed %s (its own error says why)", who, stage);
}

/* got[s] = the bytes source s sends this rank: each rank's count for d is an 8-byte block. */
static int exchange_counts(df_comm *w, const int64_t *send_counts, int64_t *got)
{
    int size = df_comm_size(w);
    int64_t *eights = malloc((size_t)size * sizeof *eights);
    void *recv = NULL;
    if (!eights)
        return df_error(DF_ENOMEM, "device payload move: out of memory for %d counts", size);
    for (int d = 0; d < size; d++)
        eights[d] = (int64_t)sizeof(int64_t);
    int rc = df_comm_alltoallv(w, send_counts, eights, &recv, NULL, NULL);
    if (!rc)
        memcpy(got, recv, (size_t)size * sizeof *got);
    free(recv);
    free(eights);
    return rc;
}

static int64_t total(const int64_t *counts, int n)
{
    int64_t t = 0;
    for (int i = 0; i < n; i++)
        t += counts[i];
    return t;
}

int df_payload_alltoallv_dev(df_comm *w, const df_payload_dev *dev, const void *send,
                             const int64_t *send_counts, void **recv_out, int64_t **recv_counts_out,
                             int64_t **recv_displs_out)
{
    const df_backend_ops *o = dev->be.ops;
    void *ctx = dev->be.ctx;
    int size = df_comm_size(w);
    *recv_out = NULL;
    int64_t *got = calloc((size_t)size, sizeof *got), *displs = calloc((size_t)size, sizeof *displs);
    int rc = got && displs ? DF_OK : df_error(DF_ENOMEM, "device payload move: out of memory");
    rc = agree(w, rc, "allocating the counts");
    if (!rc)
        rc = exchange_counts(w, send_counts, got); /* fails on every rank alike */
    const int64_t n_send = rc ? 0 : total(send_counts, size), n_recv = rc ? 0 : total(got, size);
    void *dsend = NULL, *drecv = NULL, *host = NULL;
    if (!rc) {
        for (int s = 1; s < size; s++)
            displs[s] = displs[s - 1] + got[s - 1];
        if ((rc = o->alloc(ctx, (size_t)n_send, &dsend)) == DF_OK && n_send)
            rc = o->upload(ctx, dsend, send, (size_t)n_send);
        if (!rc)
            rc = o->alloc(ctx, (size_t)n_recv, &drecv);
        if (!rc && !(host = malloc((size_t)(n_recv ? n_recv : 1))))
            rc = df_error(DF_ENOMEM, "device payload move: out of memory for %lld bytes", (long long)n_recv);
        rc = agree(w, rc, "staging the payload on the device");
    }
    if (!rc) { /* every rank staged: all enter the device collective, all agree after it */
        rc = o->alltoallv(ctx, dev->h, dsend, send_counts, drecv, got);
        if (!rc && n_recv)
            rc = o->download(ctx, host, drecv, (size_t)n_recv);
        rc = agree(w, rc, "moving the payload on the device");
    }
    o->release(ctx, dsend);
    o->release(ctx, drecv);
    if (!rc) {
        *recv_out = host;
        if (recv_counts_out)
            *recv_counts_out = got, got = NULL;
        if (recv_displs_out)
            *recv_displs_out = displs, displs = NULL;
    } else {
        free(host);
    }
    free(got);
    free(displs);
    return rc;
}
