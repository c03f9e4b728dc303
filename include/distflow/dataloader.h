/*
 * distflow/dataloader.h — the per-rank partitioned dataloader (docs/architecture.md,
 * Data Coordinator; siiRL's partitioned dataset + sampler).
 *
 * `rank` / `world` are the data-parallel rank and size (siiRL: dp_rank =
 * world_rank / mp, dp_size = world / mp; the mp ranks of a group build the
 * same loader and read the same rows). Global batch G = global_batch_size
 * (verl data.train_batch_size), a multiple of W = world; each rank takes
 * P = G / W rows per step.
 *
 * Rows. Rank r owns the global rows r, r + W, r + 2W, ... (global row
 * numbers: df_dataset_global_index). The dataset is either
 *   - this rank's shard (loaded with shard_index = r, shard_count = W): the
 *     loader reads all of it; or
 *   - every row (shard_count 1): the loader picks the rows with global % W == r.
 * Both give the same rows after the same per-row filter. Local position p
 * (0-based, in dataset order) is this rank's p-th such row. Ranks use the same
 * number of rows, R = rows_per_rank, so they agree on the step count: with
 * every row loaded the loader computes the minimum over ranks itself; with a
 * shard it starts at this rank's own count, and the caller sets R to the
 * minimum over ranks of df_dataloader_rows_available (an allreduce MIN) with
 * df_dataloader_set_rows_per_rank before the first batch. Rows at positions
 * >= R are never read.
 *
 * Order. Epoch e visits the local positions [0, R) in the order of a
 * permutation drawn from df_rng_key(seed, e, 0, 0) (Fisher–Yates, the same on
 * every rank; the identity when shuffle is false). Step s takes positions
 * perm[s * P .. (s + 1) * P). With drop_last a final step with fewer than P
 * positions is skipped; without it, every rank takes the R - s * P left over.
 * With one rank this is the classic loader: a permutation of all N rows cut
 * into contiguous batches of G. Without shuffle, the ranks' rows at step s are
 * together exactly the global rows [s * G, (s + 1) * G) (before filtering).
 *
 * Each batch has columns (all of length = this rank's share):
 *   index        I64  global row number (uids and per-prompt rollout seeds
 *                     come from it, so a row gets them on any world size)
 *   row          I64  position in this rank's dataset (for df_dataset_*
 *                     and caches aligned with it; meaningful only on the
 *                     rank that loaded the batch)
 *   data_source  STR
 *   ground_truth STR  reward_model.ground_truth as text
 *   raw_prompt   STR  JSON text of the message list
 *   extra_info   STR  JSON text
 * and metadata "epoch" and "step" (the step within the epoch).
 *
 * Position: (epoch, step) of the next batch, always normalised so that
 * 0 <= step < steps_per_epoch. Save it with df_dataloader_tell() in a
 * checkpoint and restore it with df_dataloader_seek() to resume exactly (same
 * world size and rows_per_rank).
 */
#ifndef DISTFLOW_DATALOADER_H
#define DISTFLOW_DATALOADER_H

#include "distflow/batch.h"
#include "distflow/dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct df_dataloader df_dataloader;

/**
 * Create a loader for data-parallel rank `rank` of `world` over `ds`
 * (borrowed: it must outlive the loader and must not be filtered afterwards).
 * Errors (DF_EINVAL): global_batch_size < 1, world < 1, rank outside
 * [0, world), global_batch_size not a multiple of world, a dataset sharded
 * other than (rank, world) when world > 1, or rows that yield no batch (empty,
 * or fewer than P per rank with drop_last) — except for a sharded dataset with
 * world > 1, where that check waits for df_dataloader_set_rows_per_rank so that
 * all ranks fail together.
 */
DF_API int df_dataloader_create(const df_dataset *ds, int64_t global_batch_size, int rank,
                                int world, bool shuffle, uint64_t seed, bool drop_last,
                                df_dataloader **out);
DF_API void df_dataloader_free(df_dataloader *dl);

/**
 * Rows this rank could use: its shard's size in `ds` (after filtering). The
 * input to the allreduce MIN that gives every rank's rows_per_rank.
 */
DF_API int64_t df_dataloader_rows_available(const df_dataloader *dl);

/** Rows per rank in use (R above). */
DF_API int64_t df_dataloader_rows_per_rank(const df_dataloader *dl);

/**
 * Set R, the rows every rank uses (the minimum of df_dataloader_rows_available
 * over the data-parallel ranks); call it on every rank with the same value
 * before the first batch. Errors (DF_EINVAL): rows < 0 or more than this rank
 * has, rows that yield no batch, or a current position past the new epoch end.
 */
DF_API int df_dataloader_set_rows_per_rank(df_dataloader *dl, int64_t rows);

/** Batches per epoch: floor(R / P) with drop_last, ceil(R / P) without (W = 1: N / G). */
DF_API int64_t df_dataloader_steps_per_epoch(const df_dataloader *dl);
/** Epoch of the next batch (0-based). */
DF_API int64_t df_dataloader_epoch(const df_dataloader *dl);
/** Step within the epoch of the next batch (0-based). */
DF_API int64_t df_dataloader_step(const df_dataloader *dl);

/**
 * This rank's batch for the current position, then advance (rolling into the
 * next epoch). DF_EINVAL when rows_per_rank gives no batch.
 */
DF_API int df_dataloader_next(df_dataloader *dl, df_batch **out);

/** This rank's batch at (epoch, step) without moving. DF_EINVAL for a position out of range. */
DF_API int df_dataloader_batch_at(const df_dataloader *dl, int64_t epoch, int64_t step,
                                  df_batch **out);

/**
 * This rank's rows at (epoch, step) as positions in `ds` (what the df_dataset_*
 * accessors take; the batch's `row` column) into idx (capacity `cap`, at most
 * P are written), count in *n; df_dataset_global_index maps them to the
 * `index` column. DF_EINVAL for a bad position or too small a buffer.
 */
DF_API int df_dataloader_indices(const df_dataloader *dl, int64_t epoch, int64_t step,
                                 int64_t *idx, int64_t cap, int64_t *n);

/** Position of the next batch (for checkpoints). */
DF_API void df_dataloader_tell(const df_dataloader *dl, int64_t *epoch, int64_t *step);
/**
 * Resume at (epoch, step): 0 <= step <= steps_per_epoch (step == steps_per_epoch
 * means the start of epoch + 1), epoch >= 0. DF_EINVAL otherwise.
 */
DF_API int df_dataloader_seek(df_dataloader *dl, int64_t epoch, int64_t step);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_DATALOADER_H */
