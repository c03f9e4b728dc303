/*
 * distflow/comm.h — the communication layer: process groups, collectives and
 * point-to-point messages.
 *
 * One interface, two backends (docs/conventions.md §5):
 *   - MPI (built when CMake finds MPI and DF_WITH_MPI=ON; compile definition
 *     DF_HAVE_MPI), one df_comm per MPI communicator;
 *   - single process, world size 1, with the same semantics (a collective over
 *     one rank copies its input to its output).
 *
 * Backend choice (made once, by the first df_comm_world() call):
 *   1. environment DF_COMM=single or DF_COMM=mpi forces a backend (mpi in a
 *      build without MPI is DF_EUNSUPPORTED);
 *   2. otherwise MPI is used when MPI is already initialised by the embedding
 *      program, or when a launcher started this process (any of
 *      OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK, PMI_SIZE is set: mpirun /
 *      mpiexec / srun);
 *   3. otherwise the single backend: a plain `distflow train` never touches
 *      MPI, so it starts fast and works where no MPI runtime is configured.
 * A build without MPI started by a launcher (case 2) fails with
 * DF_EUNSUPPORTED rather than run N independent one-rank jobs; DF_COMM=single
 * allows that explicitly.
 *
 * Collective rules (as in MPI): every rank of a communicator calls the same
 * collectives in the same order with matching arguments (same count, dtype,
 * op, root). Counts are int64_t bytes or elements; MPI takes int counts, so:
 *   - broadcast and allreduce split large buffers into chunks of at most
 *     INT_MAX elements (any size works);
 *   - allgather, allgatherv and alltoallv return DF_EINVAL when a count or a
 *     displacement (in bytes) exceeds INT_MAX. allgatherv and alltoallv first
 *     exchange the counts, so every rank sees the overflow and every rank
 *     returns the same error (no rank is left waiting in a collective).
 *
 * Errors: DF_EINVAL for bad arguments (NULL buffers with non-zero counts,
 * negative counts, roots or ranks out of range), DF_ENOMEM, DF_EINTERNAL when
 * MPI reports a failure (its error string is in the message; the library sets
 * MPI_ERRORS_RETURN on its communicators so MPI never aborts the job itself).
 * Every message names the operation and "rank r of n". Argument errors that
 * only one rank can see (e.g. a bad root) are the caller's bug: the other
 * ranks may then wait in the collective, as with MPI itself.
 *
 * Threading: call comm functions from one thread per process (MPI is
 * initialised with MPI_THREAD_FUNNELED). The world communicator is process
 * state, like MPI_COMM_WORLD.
 */
#ifndef DISTFLOW_COMM_H
#define DISTFLOW_COMM_H

#include "distflow/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A communicator: a set of ranks that run collectives together. Opaque. */
typedef struct df_comm df_comm;

/** Element types of df_comm_allreduce. */
typedef enum df_comm_dtype {
    DF_COMM_FLOAT32 = 0, /**< float */
    DF_COMM_FLOAT64 = 1, /**< double */
    DF_COMM_INT64 = 2    /**< int64_t */
} df_comm_dtype;

/** Reductions of df_comm_allreduce (element-wise over ranks). */
typedef enum df_comm_op { DF_COMM_SUM = 0, DF_COMM_MAX = 1, DF_COMM_MIN = 2 } df_comm_op;

/** Backends. */
typedef enum df_comm_backend { DF_COMM_SINGLE = 0, DF_COMM_MPI = 1 } df_comm_backend;

/** Color for df_comm_split: this rank joins no group (MPI_UNDEFINED). */
#define DF_COMM_UNDEFINED (-1)

/**
 * The world communicator (all processes of the job), initialising the backend
 * on first use (see the header comment for how it is chosen). `*out` is
 * borrowed: do not df_comm_free it; it stays valid until df_comm_shutdown().
 * Errors: DF_EUNSUPPORTED (DF_COMM=mpi or an mpirun launch in a build
 * without MPI, or a call after
 * df_comm_shutdown() finalised MPI, which cannot start twice), DF_EINVAL (bad
 * DF_COMM value), DF_EINTERNAL (MPI_Init failed).
 */
DF_API int df_comm_world(df_comm **out);

/**
 * Finalise the backend: MPI_Finalize when this library initialised MPI (an
 * embedding program that initialised MPI itself finalises it itself). Call it
 * once at exit, after every child communicator is freed. Safe to call when
 * df_comm_world was never called. Returns 0 or DF_EINTERNAL.
 */
DF_API int df_comm_shutdown(void);

/**
 * End the whole job now with exit status `code` (MPI_Abort on MPI_COMM_WORLD:
 * the launcher kills every rank, including ranks blocked in a collective).
 * For the CLI after a fatal error on one rank; library code returns errors
 * instead. Without a live MPI world it returns and the caller exits.
 */
DF_API void df_comm_abort(int code);

/**
 * The MPI library's version string (MPI_Get_library_version, which MPI allows
 * before MPI_Init and after MPI_Finalize), first line only, into buf[size].
 * DF_EUNSUPPORTED in a build without MPI.
 */
DF_API int df_comm_mpi_library_version(char *buf, size_t size);

/** This process's rank in `c`, 0 .. size-1. */
DF_API int df_comm_rank(const df_comm *c);

/** Number of ranks in `c` (>= 1). */
DF_API int df_comm_size(const df_comm *c);

/** The backend `c` runs on. */
DF_API df_comm_backend df_comm_backend_of(const df_comm *c);

/** Block until every rank of `c` has entered the barrier. */
DF_API int df_comm_barrier(df_comm *c);

/**
 * Collectives on c, and on communicators split or made from it afterwards, give up after
 * `seconds` (> 0; <= 0: wait forever, the default) with DF_EINTERNAL naming the collective, this
 * rank and the group's size: a rank that stopped or hangs no longer leaves its peers waiting
 * forever (trainer.collective_timeout_s). The abandoned collective leaves c unusable (its next
 * collectives fail at once) until df_comm_settle. MPI only: one process never waits. Group
 * creation (split, from_ranks) stays blocking.
 */
DF_API void df_comm_set_timeout(df_comm *c, double seconds);
/**
 * Wait, without a deadline, for the collective a timeout abandoned on c, and make c usable again
 * (for a caller that knows the late ranks will come). DF_OK at once when nothing was abandoned.
 */
DF_API int df_comm_settle(df_comm *c);

/**
 * Broadcast `nbytes` bytes of `buf` from rank `root` to every rank of `c`
 * (MPI_Bcast). On the root `buf` is the input, elsewhere the output; every
 * rank passes the same nbytes (>= 0; chunked above INT_MAX).
 * Errors: DF_EINVAL (root out of range, buf NULL with nbytes > 0).
 */
DF_API int df_comm_broadcast(df_comm *c, void *buf, int64_t nbytes, int root);

/**
 * In-place element-wise reduction over all ranks (MPI_Allreduce with
 * MPI_IN_PLACE): on return every rank's buf[i] = op over ranks of buf[i].
 * `buf` holds `count` elements of `dtype` ([count]); chunked above INT_MAX.
 * Floating-point sums may differ in the last bits from a sequential sum (MPI
 * picks the reduction order) but are identical on every rank.
 * Errors: DF_EINVAL (count < 0, buf NULL with count > 0, unknown dtype / op).
 */
DF_API int df_comm_allreduce(df_comm *c, void *buf, int64_t count, df_comm_dtype dtype, df_comm_op op);

/**
 * Gather `nbytes` bytes from every rank into `recv` ([size * nbytes] bytes,
 * rank r's block at offset r * nbytes) on every rank (MPI_Allgather). Every
 * rank passes the same nbytes. `send` and `recv` must not overlap.
 * Errors: DF_EINVAL (nbytes < 0 or > INT_MAX, NULL buffers with nbytes > 0).
 */
DF_API int df_comm_allgather(df_comm *c, const void *send, int64_t nbytes, void *recv);

/**
 * Gather a variable number of bytes from every rank, on every rank
 * (MPI_Allgatherv after an allgather of the counts). Rank r contributes
 * `send_bytes` bytes (0 is fine; `send` may then be NULL).
 * Outputs (each freed by the caller with free()):
 *   *recv_out   — the concatenation of all contributions in rank order
 *                 (total bytes = displs[size-1] + counts[size-1]); never NULL,
 *                 a 1-byte allocation when the total is 0;
 *   *counts_out — [size] bytes per rank (optional: pass NULL to skip);
 *   *displs_out — [size] byte offset of each rank's block (optional).
 * Errors: DF_EINVAL (send_bytes < 0, send NULL with send_bytes > 0, a total
 * above INT_MAX bytes — reported on every rank), DF_ENOMEM.
 */
DF_API int df_comm_allgatherv(df_comm *c, const void *send, int64_t send_bytes, void **recv_out,
                              int64_t **counts_out, int64_t **displs_out);

/**
 * Personalised all-to-all exchange of bytes (MPI_Alltoallv after an alltoall
 * of the counts). `send` holds the blocks for ranks 0..size-1 back to back:
 * `send_counts[d]` bytes for rank d (0 allowed), so the block for d starts at
 * the sum of send_counts[0..d-1]. Outputs (caller frees with free()):
 *   *recv_out   — the blocks received, in source-rank order; never NULL;
 *   *recv_counts_out — [size] bytes received from each rank (optional);
 *   *recv_displs_out — [size] offset of each source's block (optional).
 * This is the payload move of the Data Coordinator (docs/architecture.md).
 * Errors: DF_EINVAL (NULL send_counts, a negative count, send NULL with a
 * non-zero total, any send or receive total above INT_MAX bytes on any rank —
 * reported on every rank), DF_ENOMEM.
 */
DF_API int df_comm_alltoallv(df_comm *c, const void *send, const int64_t *send_counts, void **recv_out,
                             int64_t **recv_counts_out, int64_t **recv_displs_out);

/**
 * Split `parent` into disjoint groups (MPI_Comm_split): ranks passing the same
 * `color` (>= 0) form one child, ordered by `key` then by parent rank. A rank
 * passing DF_COMM_UNDEFINED gets *child = NULL and returns 0. Collective over
 * every rank of `parent`. Free the child with df_comm_free().
 * Errors: DF_EINVAL (color < 0 and not DF_COMM_UNDEFINED), DF_ENOMEM,
 * DF_EINTERNAL.
 */
DF_API int df_comm_split(df_comm *parent, int color, int key, df_comm **child);

/**
 * The group of parent ranks `ranks[0..n-1]` (MPI_Comm_create_group), in that
 * order: ranks[i] becomes rank i of the child — torch.distributed.new_group /
 * siiRL's ProcessGroupManager. Collective over the listed ranks only (every one
 * passes the same list); a caller not in the list gets *child = NULL without
 * communicating. Free the child with df_comm_free().
 * Errors: DF_EINVAL (n < 1, ranks NULL, a rank out of range or repeated),
 * DF_ENOMEM, DF_EINTERNAL.
 */
DF_API int df_comm_from_ranks(df_comm *parent, const int *ranks, int n, df_comm **child);

/** Free a communicator from split / from_ranks. NULL and the world are no-ops. */
DF_API void df_comm_free(df_comm *c);

/*
 * Point-to-point and non-blocking operations (the asynchronous runtime: rollout ranks send
 * finished episodes to trainer ranks, trainer rank 0 broadcasts weights that rollout ranks poll
 * for between decode steps).
 *
 * Messages are byte strings of any size (int64_t nbytes >= 0) with a tag (0 .. DF_COMM_TAG_MAX).
 * Between one sender and one receiver, messages on one tag arrive in the order they were sent
 * (MPI's non-overtaking rule, which the wire format relies on); messages from different senders
 * or on different tags have no order. P2P traffic never matches a collective (MPI keeps them
 * apart on one communicator) and is not stopped by a collective's timeout.
 *
 * Wire format (MPI): a message is a header message of two int64 {nbytes, chunk} followed by
 * ceil(nbytes / chunk) data messages of `chunk` bytes (the last one shorter), all on the same
 * tag; chunk is INT_MAX (MPI's int count) unless a test lowers it. df_comm_probe receives the
 * header (the communicator keeps it until df_comm_recv takes the message), so it can report the
 * whole size; the receiver reads the chunk size from the header, not from its own settings.
 * Single backend: a rank sends to itself; the message is copied into a queue at once.
 *
 * Requests: df_comm_isend and df_comm_ibroadcast return a df_comm_request that the caller
 * completes with df_comm_test (poll) or df_comm_wait (block), or drops with
 * df_comm_request_free. A request refers to its communicator: complete or free it before
 * df_comm_free / df_comm_shutdown. Timeouts: a blocking send / recv / wait gives up after the
 * communicator's df_comm_set_timeout (<= 0: waits forever) with DF_EINTERNAL naming the operation.
 */

/** df_comm_probe's source for a message from any rank. */
#define DF_COMM_ANY_SOURCE (-2)
/** The largest tag (MPI guarantees tags up to 32767). */
#define DF_COMM_TAG_MAX 32767

/** A pending non-blocking operation. Opaque. */
typedef struct df_comm_request df_comm_request;

/**
 * Blocking send of `nbytes` bytes of `buf` ([nbytes]; NULL allowed when nbytes is 0) to rank
 * `dest` of `c` with `tag`. Returns when `buf` may be reused (small messages usually before the
 * receiver takes them). Any size: above the chunk size (INT_MAX) the data travels in several
 * MPI messages, and the receiver still sees one message of nbytes.
 * Errors: DF_EINVAL (dest not a rank of c, tag outside 0..DF_COMM_TAG_MAX, nbytes < 0, buf NULL
 * with nbytes > 0), DF_ENOMEM, DF_EINTERNAL (MPI failed, or no receiver took the message within
 * the timeout: MPI may still read `buf` later, so treat this as fatal for the job or keep `buf`
 * alive).
 */
DF_API int df_comm_send(df_comm *c, const void *buf, int64_t nbytes, int dest, int tag);

/**
 * Non-blocking send: as df_comm_send, but returns at once with `*req` (never NULL on success;
 * NULL on error), which completes when `buf` may be reused; `buf` must stay valid and unchanged
 * until then. Errors as df_comm_send, without the timeout.
 */
DF_API int df_comm_isend(df_comm *c, const void *buf, int64_t nbytes, int dest, int tag, df_comm_request **req);

/**
 * Is a message with `tag` from `source` (a rank of c, or DF_COMM_ANY_SOURCE) waiting? Never
 * blocks (MPI_Improbe). Sets *found; when true, *src (optional: NULL to skip) to the sender's
 * rank and *nbytes (optional) to the message's whole size. Probing again before df_comm_recv
 * reports the same message (the earliest waiting one from that sender on that tag).
 * Errors: DF_EINVAL (bad source or tag, found NULL), DF_ENOMEM, DF_EINTERNAL.
 */
DF_API int df_comm_probe(df_comm *c, int source, int tag, bool *found, int *src, int64_t *nbytes);

/**
 * Blocking receive of the next message from rank `source` (not DF_COMM_ANY_SOURCE: probe first
 * to learn the sender) on `tag`, all its chunks, into `buf` ([nbytes]).
 * Errors: DF_EINVAL (bad arguments, or the message is not nbytes long: it then stays queued,
 * and df_comm_probe tells its size), DF_ENOMEM, DF_EINTERNAL (MPI failed; the timeout expired
 * before the message came, which leaves it queued for a later recv, or, rarely, in the middle
 * of a chunked message, whose partial data is then lost; single backend: nothing is queued,
 * which would wait forever).
 */
DF_API int df_comm_recv(df_comm *c, void *buf, int64_t nbytes, int source, int tag);

/**
 * Non-blocking broadcast of `nbytes` bytes of `buf` from `root` (MPI_Ibcast, chunked as
 * df_comm_broadcast; every rank passes the same nbytes). It is a collective: every rank of c
 * starts it in the same order as its other collectives. `buf` stays valid (and, on the root,
 * unchanged; elsewhere unread) until the request completes. Single backend: complete at once.
 * Errors: as df_comm_broadcast; DF_EINTERNAL when an earlier collective of c was abandoned.
 */
DF_API int df_comm_ibroadcast(df_comm *c, void *buf, int64_t nbytes, int root, df_comm_request **req);

/**
 * Drive `*req` (this is what moves its data: poll it regularly) and report whether it is done.
 * When *done, the request is freed and *req set to NULL. A NULL *req is done.
 * Errors: DF_EINVAL (NULL arguments), DF_EINTERNAL (MPI failed: the request stays pending; free
 * it with df_comm_request_free).
 */
DF_API int df_comm_test(df_comm_request **req, bool *done);

/**
 * Block until `*req` completes, then free it and set *req NULL (a NULL *req returns at once).
 * Gives up after the communicator's timeout with DF_EINTERNAL naming the operation ("isend",
 * "ibroadcast"), leaving the request pending: wait again, or free it.
 */
DF_API int df_comm_wait(df_comm_request **req);

/**
 * Drop a pending request and set *req NULL; NULL-safe. Sends are not taken back: a pending
 * isend still delivers its message in the background (keep `buf` valid until the peer receives
 * it). A pending ibroadcast cannot be cancelled (MPI): it is handed to the communicator, whose
 * collectives then fail until df_comm_settle waits for it.
 */
DF_API void df_comm_request_free(df_comm_request **req);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_COMM_H */
