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
 * The collective half of df_data_buffers_put (see coordinator.h for the
 * protocol). `in` is borrowed and may be NULL on ranks that do not send;
 * `local_rc` is an error this rank already has (0 if none): it is folded into
 * the agreed status, so every rank still calls the same collectives.
 * *out receives the batch of this rank's destination DP rank, or NULL when
 * the rank is outside `dst`. `st` (non-NULL) receives the counts (not the
 * time). Returns the agreed status: the same on every rank.
 */
int df_redistribute(df_comm *w, const char *key, const df_batch *in, int local_rc, df_dp_layout src,
                    df_dp_layout dst, const df_put_opts *opts, df_batch **out, df_redist_stats *st);

#endif
