/*
 * distflow/coordinator.h — the planning half of the Data Coordinator (DESIGN.md §1):
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
 * Nothing here talks MPI: the functions are pure and deterministic.
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

#include "distflow/batch.h"
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

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_COORDINATOR_H */
