/*
 * buffers_internal.h (internal) — what buffers.c (the key -> batch store)
 * and redistribute.c (the collective exchange of a put) share.
 */
#ifndef DF_DATA_BUFFERS_INTERNAL_H
#define DF_DATA_BUFFERS_INTERNAL_H

#include "distflow/coordinator.h"

/** World ranks a layout covers: [0, dp_size * mp). */
static inline int64_t df_dp_layout_ranks(df_dp_layout l)
{
    return (int64_t)l.dp_size * l.mp;
}

/** DP rank of world rank r in l, or -1 when r is outside the layout. */
static inline int df_dp_layout_dp_rank(df_dp_layout l, int r)
{
    return r < df_dp_layout_ranks(l) ? r / l.mp : -1;
}

/** True when world rank r sends for its DP rank of l (mp_rank 0, inside the layout). */
static inline bool df_dp_layout_sender(df_dp_layout l, int r)
{
    return r < df_dp_layout_ranks(l) && r % l.mp == 0;
}

/**
 * The status every rank of w agrees on: an allreduce in which the lowest failing rank wins
 * (its rank in the high bits, its code in the low 8). *code = that rank's rc (0: none
 * failed), *who = its rank. Returns the allreduce's own error.
 */
int df_coord_agree(df_comm *w, int rc, int *code, int *who);

/** A store's device path (df_data_buffers_use_backend): the backend and its handle of the
 *  world's group (group_open). */
typedef struct df_payload_dev {
    df_backend be;
    void *h;
} df_payload_dev;

/**
 * df_comm_alltoallv's contract over `w` (host bytes in, *recv_out etc. malloc'd host
 * outputs) with the bytes moved by dev's alltoallv between buffers of its memory: the counts
 * over MPI first, the staging (alloc, upload) agreed over MPI before the device collective,
 * its outcome and the download agreed after it, so every rank returns the same status.
 * Errors: DF_ENOMEM, the backend's; on a rank that did not fail, DF_E* naming the one that did.
 */
int df_payload_alltoallv_dev(df_comm *w, const df_payload_dev *dev, const void *send,
                             const int64_t *send_counts, void **recv_out, int64_t **recv_counts_out,
                             int64_t **recv_displs_out);

/**
 * The collective half of df_data_buffers_put (see coordinator.h for the
 * protocol). `in` is borrowed and may be NULL on ranks that do not send;
 * `local_rc` is an error this rank already has (0 if none): it is folded into
 * the agreed status, so every rank still calls the same collectives.
 * *out receives the batch of this rank's destination DP rank, or NULL when
 * the rank is outside `dst`. `st` (non-NULL) receives the counts (not the
 * time). `dev` (NULL: MPI) moves the payloads through a backend (df_payload_alltoallv_dev).
 * Returns the agreed status: the same on every rank.
 */
int df_redistribute(df_comm *w, const df_payload_dev *dev, const char *key, const df_batch *in,
                    int local_rc, df_dp_layout src, df_dp_layout dst, const df_put_opts *opts,
                    df_batch **out, df_redist_stats *st);

#endif
