/*
 * comm_mpi.h — state shared by the MPI backend's files: comm_mpi.c (communicators,
 * collectives) and comm_mpi_p2p.c (point-to-point messages and requests).
 * Included only where DF_HAVE_MPI is defined.
 */
#ifndef DF_COMM_MPI_H
#define DF_COMM_MPI_H

#include "comm/comm_internal.h"

#include <mpi.h>

/* A message header that df_comm_probe took off the wire (MPI_Mrecv) before df_comm_recv asked for
 * its message: the sender, the tag, the message's size and its chunk size. */
typedef struct mpi_probed {
    int src, tag;
    int64_t nbytes, chunk;
} mpi_probed;

/* A df_comm's MPI state. */
typedef struct mpi_impl {
    MPI_Comm comm;
    MPI_Request pending;  /* the collective a timeout abandoned (df_comm_settle) */
    MPI_Request *dropped; /* [n_dropped] ibroadcasts freed while pending (df_comm_settle) */
    int n_dropped;
    mpi_probed *probed; /* [n_probed] headers probed, not yet received; at most one per (src, tag) */
    int n_probed, cap_probed;
} mpi_impl;

#define MCOMM(c) (((mpi_impl *)(c)->impl)->comm)
#define PENDING(c) (((mpi_impl *)(c)->impl)->pending)

/* Sets "comm <what> (rank r of n): <call> failed: <MPI's error string>"; returns DF_EINTERNAL. */
int df_comm_mpi_fail(df_comm *c, const char *what, const char *call, int err);

#define MPI_TRY(c, what, call)                                                                               \
    do {                                                                                                     \
        int err_ = (call);                                                                                   \
        if (err_ != MPI_SUCCESS)                                                                             \
            return df_comm_mpi_fail((c), (what), #call, err_);                                               \
    } while (0)

/* comm_mpi_p2p.c: the point-to-point entries of df_comm_mpi_ops (see comm_internal.h). */
int df_comm_mpi_isend(df_comm *c, const void *buf, int64_t nbytes, int dest, int tag, df_comm_request *req);
int df_comm_mpi_probe(df_comm *c, int source, int tag, bool *found, int *src, int64_t *nbytes);
int df_comm_mpi_recv(df_comm *c, void *buf, int64_t nbytes, int source, int tag);
int df_comm_mpi_ibcast(df_comm *c, void *buf, int64_t nbytes, int root, df_comm_request *req);
int df_comm_mpi_req_test(df_comm_request *req, bool *done);
void df_comm_mpi_req_drop(df_comm_request *req);
/* Wait for the ibroadcasts handed over by df_comm_mpi_req_drop (df_comm_settle). */
int df_comm_mpi_settle_dropped(df_comm *c);
/* Free the point-to-point state of h (probed headers, dropped requests). */
void df_comm_mpi_p2p_free(mpi_impl *h);

#endif /* DF_COMM_MPI_H */
