/*
 * comm_internal.h — the backend interface behind include/distflow/comm.h.
 *
 * comm.c checks arguments, exchanges counts, converts int64 counts to MPI's int
 * and allocates outputs; a backend only moves bytes with counts already known
 * to fit in an int. Backends set df_error (through df_comm_fail) on failure.
 */
#ifndef DF_COMM_INTERNAL_H
#define DF_COMM_INTERNAL_H

#include "distflow/comm.h"

typedef struct df_comm_ops {
    int (*barrier)(df_comm *c);
    int (*bcast)(df_comm *c, void *buf, int nbytes, int root);
    /* in place, count elements */
    int (*allreduce)(df_comm *c, void *buf, int count, df_comm_dtype dt, df_comm_op op);
    int (*allgather)(df_comm *c, const void *send, int nbytes, void *recv);
    int (*allgatherv)(df_comm *c, const void *send, int nbytes, void *recv, const int *counts,
                      const int *displs);
    int (*alltoallv)(df_comm *c, const void *send, const int *scounts, const int *sdispls, void *recv,
                     const int *rcounts, const int *rdispls);
    /* *child left NULL when this rank joins no group */
    int (*split)(df_comm *c, int color, int key, df_comm **child);
    /* called only by members; ranks validated */
    int (*from_ranks)(df_comm *c, const int *ranks, int n, df_comm **child);
    /* finish a collective a timeout abandoned (NULL: the backend never times out) */
    int (*settle)(df_comm *c);
    void (*free_impl)(df_comm *c);
    /* Point-to-point (comm_p2p.c checked the arguments; sizes are whole messages, the backend
     * chunks them). isend / ibcast leave req->impl NULL when already complete. */
    int (*isend)(df_comm *c, const void *buf, int64_t nbytes, int dest, int tag, df_comm_request *req);
    int (*probe)(df_comm *c, int source, int tag, bool *found, int *src, int64_t *nbytes);
    int (*recv)(df_comm *c, void *buf, int64_t nbytes, int source, int tag);
    int (*ibcast)(df_comm *c, void *buf, int64_t nbytes, int root, df_comm_request *req);
    /* a pending request (req->impl set): test drives it and frees impl when done; drop abandons
     * it (see df_comm_request_free) and frees impl */
    int (*req_test)(df_comm_request *req, bool *done);
    void (*req_drop)(df_comm_request *req);
} df_comm_ops;

/* A non-blocking operation: its communicator, its name for errors and the backend's state
 * (NULL once complete). */
struct df_comm_request {
    df_comm *c;
    const char *what;
    void *impl;
};

struct df_comm {
    const df_comm_ops *ops;
    void *impl; /* backend handle (MPI: a heap MPI_Comm) */
    int rank, size;
    df_comm_backend backend;
    int is_world;
    int64_t max_chunk; /* broadcast / allreduce / send chunk, elements; INT_MAX (tests lower it) */
    double timeout_s;  /* collectives give up after this long (df_comm_set_timeout); <= 0: never */
    int timed_out;     /* a collective was abandoned: the next ones fail until df_comm_settle */
};

/* Sets the error "comm <what> (rank r of n): <message>" and returns code. */
int df_comm_fail(const df_comm *c, int code, const char *what, const char *fmt, ...) DF_PRINTF(4, 5);

/* A new communicator shell (ops, impl, rank, size set); NULL on ENOMEM. */
df_comm *df_comm_new(const df_comm_ops *ops, df_comm_backend backend, void *impl, int rank, int size);

/* Lower the broadcast / allreduce / send chunk size of `c` (> 0) so tests can check
 * chunking without 2 GiB buffers; children do not inherit it. A receiver reads a message's
 * chunk size from its header, so only senders (and every rank of a broadcast) need it. */
void df_comm_set_max_chunk(df_comm *c, int64_t max_chunk);

extern const df_comm_ops df_comm_single_ops;

#ifdef DF_HAVE_MPI
extern const df_comm_ops df_comm_mpi_ops;
/* 1 when MPI_Init has run (and MPI_Finalize has not). */
int df_comm_mpi_initialized(void);
/* Initialise MPI if needed and fill *world; *owned = 1 when we called MPI_Init. */
int df_comm_mpi_world(df_comm *world, int *owned);
/* MPI_Finalize when owned; frees world's impl. */
int df_comm_mpi_shutdown(df_comm *world, int owned);
/* MPI_Get_library_version's first line into buf[size] (callable without MPI_Init). */
int df_comm_mpi_library(char *buf, size_t size);
/* MPI_Abort(MPI_COMM_WORLD, code). */
void df_comm_mpi_abort(int code);
#endif

#endif /* DF_COMM_INTERNAL_H */
