/*
 * distflow/coordinator.h — the Data Coordinator (docs/architecture.md):
 * length-balanced redistribution of samples between pipeline stages whose
 * data-parallel (DP) sizes differ, with no central process.
 *
 * The protocol, per hand-over between two stages:
 *   1. every source rank summarises its rows (df_batch_sample_infos) and may
 *      drop some (df_sample_infos_filter, siiRL's filter_plugin);
 *   2. the summaries are allgathered (df_sample_infos_serialize / _deserialize
 *      give a flat, self-contained wire form);
 *   3. every rank calls df_redistribution_plan on the same gathered infos and
 *      gets the same plan, whatever order the infos arrived in;
 *   4. each source rank asks the plan for its alltoallv send counts and the
 *      rows to send (df_redist_plan_send), each destination for its receive
 *      counts and the order in which the received rows form its batch
 *      (df_redist_plan_recv); the payloads are df_batch_serialize'd rows.
 * The planning functions talk no MPI: they are pure and deterministic. The
 * data buffers at the end of this header (df_data_buffers_put / _get) run
 * the whole protocol over a df_comm.
 *
 * Sources: siiRL's DataCoordinator.get_batch / _apply_length_balancing
 * (siirl/data_coordinator/data_buffer.py: equal-count partitions balanced on
 * SampleInfo.sum_tokens, partitions concatenated in order, each partition
 * longest first) and verl's karmarkar_karp / get_seqlen_balanced_partitions
 * (verl/utils/seqlen_balancing.py), which siiRL's DAG worker uses for DP
 * balancing. The workload is sum_tokens (prompt + response tokens), as in both;
 * callers who want another cost (e.g. a quadratic attention term) call
 * df_kk_partition with their own workloads.
 */
#ifndef DISTFLOW_COORDINATOR_H
#define DISTFLOW_COORDINATOR_H

#include "distflow/backend.h"
#include "distflow/batch.h"
#include "distflow/comm.h"
#include "distflow/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- sample summaries ------------------------------------------------------ */

/**
 * Summaries of every row of `b` (df_batch_sample_info for i = 0..n-1) with
 * src_rank = rank. *out receives a malloc'd array of df_batch_size(b) entries
 * (free() it; for an empty batch it is a valid zero-length allocation). uid
 * pointers borrow the batch's strings: they stay valid while `b` is unchanged.
 * Errors: DF_EINVAL (NULL batch or out, rank < 0), DF_ENOMEM.
 */
DF_API int df_batch_sample_infos(const df_batch *b, int rank, df_sample_info **out);

/**
 * Filter plugin (siiRL's `filter_plugin: Callable[[SampleInfo], bool]` of
 * DataCoordinator.get_batch): return true to keep the sample, false to drop it
 * before planning. `user` is passed through unchanged. Intended for DAPO's
 * dynamic sampling (drop groups whose rewards all agree): compute per-group
 * statistics from the gathered infos (uid / group, score) first, then pass them
 * through `user` so every rank makes the same decision.
 */
typedef bool (*df_sample_filter_fn)(const df_sample_info *info, void *user);

/**
 * Keep the infos `fn` accepts, compacted in place in their original order;
 * *n_kept receives their count. fn == NULL keeps everything.
 * Errors: DF_EINVAL (n < 0, NULL infos with n > 0, NULL n_kept).
 */
DF_API int df_sample_infos_filter(df_sample_info *infos, int64_t n, df_sample_filter_fn fn,
                                  void *user, int64_t *n_kept);

/**
 * Flat little-endian wire form of n infos for allgather:
 *   "DFSINFO\0", u32 version 1, u32 0, i64 n,
 *   n x {i64 prompt_length, i64 response_length, i64 sum_tokens, i64 group,
 *        f64 score, i32 src_rank, i32 uid_len (-1 = no uid), i64 src_index},
 *   then the uid bytes of every sample with uid_len > 0, in order.
 * *buf is malloc'd (free()). Errors: DF_EINVAL (bad arguments, uid over 2^31
 * bytes), DF_ENOMEM.
 */
DF_API int df_sample_infos_serialize(const df_sample_info *infos, int64_t n, uint8_t **buf,
                                     size_t *len);

/**
 * Inverse of df_sample_infos_serialize. *out receives one malloc'd block
 * holding the *n infos and their uid strings (a single free() releases both).
 * Several gathered buffers are decoded one by one and concatenated by the
 * caller. Errors: DF_EINVAL naming the byte offset (bad magic or version,
 * truncated, trailing bytes, negative counts or lengths, NUL inside a uid),
 * DF_ENOMEM. *out is untouched on failure.
 */
DF_API int df_sample_infos_deserialize(const uint8_t *buf, size_t len, df_sample_info **out,
                                       int64_t *n);

/* ---- Karmarkar–Karp partitioning ---------------------------------------- */

/**
 * Largest differencing method (Karmarkar & Karp 1982, multi-way form; verl's
 * karmarkar_karp): split n items with workloads[n] >= 0 into k >= 1 parts with
 * balanced sums. part_of[n] receives each item's part in [0, k); parts are
 * numbered by decreasing sum (part 0 is the heaviest), as verl's final state
 * orders its sets.
 *
 * Start: items sorted by (workload, index) ascending; each is a state of k
 * sets (one holding the item) — or, with equal_size, each run of k consecutive
 * sorted items is one state of k singletons, so every part ends with n / k
 * items. Step: pop the two states with the largest spread (max - min set sum),
 * pair the heaviest set of one with the lightest of the other, and so on.
 * Ties are broken deterministically: larger spread, then heavier top set (sum,
 * then item count), then the state created first; sets within a state by sum,
 * item count, then smallest item index. The result depends only on the
 * workloads and their order.
 *
 * n = 0 is fine (nothing written); n < k leaves parts empty.
 * Errors: DF_EINVAL for n < 0, k < 1, NULL arrays with n > 0, a negative
 * workload, or equal_size with n % k != 0; DF_ENOMEM.
 */
DF_API int df_kk_partition(const int64_t *workloads, int64_t n, int k, bool equal_size,
                           int64_t *part_of);

/* ---- redistribution plan ------------------------------------------------- */

/**
 * Where every sample goes. Destination d's batch is entries
 * [dest_offsets[d], dest_offsets[d + 1]) of src_rank / src_index, in that order.
 */
typedef struct df_redist_plan {
    int dest_dp_size;      /**< number of destination DP ranks */
    int src_size;          /**< 1 + the largest src_rank in the plan (0 when empty) */
    int64_t n;             /**< samples planned */
    int64_t *dest_offsets; /**< [dest_dp_size + 1] */
    int32_t *src_rank;     /**< [n] source rank of each planned row */
    int64_t *src_index;    /**< [n] row within that source rank's batch */
    int64_t *dest_tokens;  /**< [dest_dp_size] sum_tokens received by each destination */
} df_redist_plan;

/**
 * Balanced assignment of the gathered infos[n] to dest_dp_size destinations.
 * The result depends only on the set of infos, not their order: they are put
 * in canonical (src_rank, src_index) order first, so every rank computes the
 * same plan from its own copy of the allgather.
 *
 * Units: samples, or with keep_groups whole groups — samples sharing a uid
 * (or, without a uid, the same integer group >= 0; a sample with neither is
 * its own group), so GRPO's rollout.n responses of one prompt stay on one rank.
 * A unit's workload is its sum_tokens (summed over the group). Units are split
 * by df_kk_partition into equal-count parts (when the count is not a multiple
 * of dest_dp_size, zero-workload placeholders pad it, so counts differ by at
 * most one); part p (parts numbered heaviest first) goes to
 * destination p. Within a destination, units are ordered longest first as in
 * siiRL's LPT reordering (ties in canonical order), a group's samples kept
 * together in canonical order.
 *
 * *out receives a new plan (free with df_redist_plan_free).
 * Errors: DF_EINVAL (dest_dp_size < 1, n < 0, NULL arrays, negative src_rank,
 * src_index or sum_tokens, two infos with the same (src_rank, src_index)),
 * DF_ENOMEM.
 */
DF_API int df_redistribution_plan(const df_sample_info *infos, int64_t n, int dest_dp_size,
                                  bool keep_groups, df_redist_plan **out);

DF_API void df_redist_plan_free(df_redist_plan *p);

/**
 * What source rank `src_rank` sends: send_counts[dest_dp_size] rows per
 * destination (the alltoallv send counts, in rows), and *rows (malloc'd,
 * free(); *n_rows entries = their sum) its local row indices grouped by
 * destination 0, 1, ... and, within one destination, in that destination's
 * batch order. df_batch_select(local, rows) then slicing by send_counts gives
 * the per-destination payloads. A rank absent from the plan sends nothing.
 * Errors: DF_EINVAL (NULL arguments, src_rank < 0), DF_ENOMEM.
 */
DF_API int df_redist_plan_send(const df_redist_plan *p, int src_rank, int64_t *send_counts,
                               int64_t **rows, int64_t *n_rows);

/**
 * What destination `dest` receives: recv_counts[n_src] rows from each source
 * rank (alltoallv receive counts), and *perm (malloc'd, free(); *n_rows entries)
 * such that, with `recv` the received rows concatenated by source rank,
 * destination batch = df_batch_select(recv, perm).
 * Errors: DF_EINVAL (NULL arguments, dest outside [0, dest_dp_size), n_src
 * smaller than the plan's src_size), DF_ENOMEM.
 */
DF_API int df_redist_plan_recv(const df_redist_plan *p, int dest, int n_src,
                               int64_t *recv_counts, int64_t **perm, int64_t *n_rows);

/* ---- data buffers: put / get with redistribution ---------------------------
 *
 * siiRL's DAGWorker.put_data_to_buffers / get_data_from_buffers without the
 * DataCoordinator actor: every rank owns a df_data_buffers (key -> batch) and
 * a put that changes the data-parallel layout is one collective over the
 * world communicator that runs the protocol above (allgather of SampleInfo
 * wire forms, the same plan on every rank, one alltoallv of row payloads).
 */

/**
 * Data-parallel layout of a node: dp_size DP ranks, each a group of `mp`
 * consecutive world ranks (siiRL's tensor-parallel group; distflow does not
 * shard models, so the mp ranks of a group hold the same rows). World rank r
 * has dp_rank = r / mp and mp_rank = r % mp. The layout covers world ranks
 * [0, dp_size * mp), which must not exceed the world size; ranks beyond it
 * are outside the layout (a node that runs on a prefix of the world).
 */
typedef struct df_dp_layout {
    int dp_size; /**< >= 1 */
    int mp;      /**< >= 1, world ranks per DP rank */
} df_dp_layout;

/** Options of df_data_buffers_put; a zeroed struct (or NULL) means none. */
typedef struct df_put_opts {
    /** Redistribute even when source and destination layouts are equal (siiRL's
     *  enforce_buffer: DATA_REBALANCE nodes, verl's trainer.balance_batch). */
    bool force;
    /** Rows sharing a uid (or integer `index` group) land on the same
     *  destination: GRPO's rollout.n responses of one prompt stay together. */
    bool keep_groups;
    /** siiRL's filter_plugin, applied to each source row before planning;
     *  NULL keeps every row. Must decide the same way on every rank. */
    df_sample_filter_fn filter;
    void *filter_user; /**< passed to `filter` unchanged */
} df_put_opts;

/** What one put did on this rank (all counts are this rank's own). */
typedef struct df_redist_stats {
    int64_t rows_in;        /**< rows this rank offered: its batch's rows when it sends
                                 (mp_rank 0 inside the source layout), else 0 */
    int64_t rows_dropped;   /**< of rows_in, rows the filter dropped */
    int64_t rows_out;       /**< rows of the batch stored on this rank (0 if none) */
    int64_t info_bytes;     /**< bytes this rank put into the SampleInfo allgather */
    int64_t bytes_sent;     /**< payload bytes sent to other ranks */
    int64_t bytes_received; /**< payload bytes received from other ranks */
    int64_t bytes_self;     /**< payload bytes this rank sent to itself (a copy) */
    int64_t messages_sent;  /**< non-empty payload blocks sent to other ranks */
    double seconds;         /**< wall time of the put on this rank */
    bool local;             /**< true for a local hand-off (no communication) */
    bool device;            /**< the payloads moved through the device's fabric
                                 (df_data_buffers_use_backend), not MPI */
} df_redist_stats;

/** One rank's key -> batch store. Opaque. */
typedef struct df_data_buffers df_data_buffers;

/**
 * New empty store on `world` (borrowed: it must outlive the store; puts that
 * redistribute are collective over it). No communication.
 * Errors: DF_EINVAL (NULL world or out), DF_ENOMEM.
 */
DF_API int df_data_buffers_create(df_comm *world, df_data_buffers **out);

/** Free the store and every batch still in it. NULL is a no-op. */
DF_API void df_data_buffers_free(df_data_buffers *db);

/**
 * Move the payloads of every later collective put through backend `be`'s memory and
 * fabric (its alltoallv entry: NCCL on CUDA) instead of MPI, as siiRL's coordinator moves
 * tensors over NCCL: each sender uploads its serialized rows, the bytes move device to
 * device, each receiver downloads its own. MPI stays the control plane (the SampleInfo
 * allgather, the status agreements and the counts). A backend whose memory is the host's,
 * one without alltoallv (CUDA built without NCCL) or a world of one rank changes nothing
 * (DF_OK, no communication): the payloads stay on MPI. Otherwise collective over the
 * store's world — every rank calls it with the same backend (trainer.device is the job's):
 * it opens the backend's communicator over the world (group_open), kept until
 * df_data_buffers_free. `be` is copied; its context must outlive the store.
 * Errors: DF_EINVAL (NULL db or be), group_open's (e.g. NCCL refusing two ranks on one GPU).
 */
DF_API int df_data_buffers_use_backend(df_data_buffers *db, const df_backend *be);

/** True when the store's collective puts move payloads through a backend (see above). */
DF_API bool df_data_buffers_on_device(const df_data_buffers *db);

/**
 * Hand `batch` ([n rows], any columns) from a node laid out as `src` to one
 * laid out as `dst`, and store on this rank, under `key`, the batch of its
 * destination DP rank (siiRL DAGWorker.put_data_to_buffers; the storing half
 * of its DataCoordinator.get_batch with balance_partitions = dst.dp_size).
 *
 * `batch` is always consumed: the store owns or frees it, on error too. A
 * rank outside the source layout may pass NULL; every rank inside must pass
 * a batch (df_batch_new(0) when it has no rows). On success a batch stored
 * earlier under the same key is replaced (siiRL's internal_data_cache[key] =
 * data), or dropped on a rank that stores nothing; on failure it stays.
 *
 * Local hand-off: when src equals dst and there is neither force nor filter,
 * each rank stores its own batch as it is, without any communication.
 *
 * Otherwise it is collective over the world communicator — every rank calls
 * it with the same key, layouts and options (the filter must decide alike):
 *   1. each source rank with mp_rank 0 summarises its rows
 *      (df_batch_sample_infos with src_rank = its world rank), drops those
 *      opts->filter rejects, and the summaries are allgathered (mp replicas
 *      and ranks outside the source layout contribute none: the replicas hold
 *      the same rows, as in siiRL where only tp rank 0 puts);
 *   2. every rank computes df_redistribution_plan(dst.dp_size, keep_groups);
 *   3. each sender serializes (df_batch_serialize) its rows for each
 *      destination DP rank once and sends the same bytes to each of that DP
 *      rank's mp world ranks in ONE df_comm_alltoallv (or, on a store given a
 *      device by df_data_buffers_use_backend, one alltoallv of the backend's
 *      after the counts' exchange over MPI);
 *   4. each rank inside `dst` deserializes its parts, concatenates them in
 *      source-rank order and reorders them with df_redist_plan_recv's order:
 *      the rows of destination dp_rank, longest unit first. Replicas of one
 *      DP rank receive identical batches. Ranks outside `dst` store nothing.
 * The stored batches have the source batches' columns (column order and
 * metadata taken from the "reference" source: the lowest-ranked sender whose
 * batch has rows or columns, or world rank 0 when none has). The reference
 * sends every destination a part, with zero rows if need be, so a
 * destination that receives no rows still gets the columns and metadata.
 *
 * Errors are agreed: the status is reduced over the world before the
 * alltoallv and again at the end, so every rank returns the same code and
 * stores nothing when any rank failed (a rank whose own step failed keeps its
 * specific message; the others name that rank). Nothing hangs on a bad batch.
 *   DF_EINVAL — NULL db or empty key; a layout with dp_size or mp < 1 or
 *     covering more ranks than the world (these return at once, before any
 *     communication: the arguments are the same on every rank); NULL batch on
 *     a rank inside the source layout; source batches whose column sets or
 *     kinds differ (the message names the column and both ranks);
 *   DF_ENOMEM, DF_EINTERNAL (comm failure or a corrupted payload), and any
 *     error of the planning functions above.
 * `st` (may be NULL) receives this rank's counts; it is filled on success.
 */
DF_API int df_data_buffers_put(df_data_buffers *db, const char *key, df_batch *batch,
                               df_dp_layout src, df_dp_layout dst, const df_put_opts *opts,
                               df_redist_stats *st);

/**
 * Take the batch stored under `key` (siiRL DAGWorker.get_data_from_buffers,
 * which pops it): *out receives it and the caller owns it; the key is then
 * gone. (dp_size, dp_rank) must be the destination DP size and this rank's DP
 * rank of the put that stored it. No communication.
 * Errors: DF_EINVAL (NULL arguments, or a dp_size / dp_rank other than the
 * put's: the batch stays stored), DF_ENOTFOUND (nothing stored under key on
 * this rank).
 */
DF_API int df_data_buffers_get(df_data_buffers *db, const char *key, int dp_size, int dp_rank,
                               df_batch **out);

/** True when a batch is stored under `key` on this rank. */
DF_API bool df_data_buffers_has(const df_data_buffers *db, const char *key);

/** Number of keys stored on this rank. */
DF_API int df_data_buffers_count(const df_data_buffers *db);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_COORDINATOR_H */
