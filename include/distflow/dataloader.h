/*
 * distflow/dataloader.h — the per-rank partitioned dataloader (DESIGN.md §1,
 * Data Coordinator).
 *
 * Every rank builds the same loader from the same dataset and seed; no rank
 * is special and nothing is exchanged. Epoch e visits the dataset in the order
 * of a permutation drawn from df_rng_key(seed, e, 0, 0) (Fisher–Yates; the
 * identity when shuffle is false). The permutation is cut into global batches
 * of global_batch_size rows (verl data.train_batch_size); rank r of W takes
 * the contiguous rows [r * G / W, (r + 1) * G / W) of each global batch, so
 * the ranks' shares are disjoint and together cover the global batch.
 * G must be a multiple of W (each rank gets G / W rows).
 * With drop_last the incomplete final global batch is skipped; without it,
 * its m < G rows are shared the same way: rank r takes [r * m / W, (r + 1) * m / W)
 * (some ranks may then receive fewer rows, or none).
 *
 * Each batch has columns (all of length = this rank's share):
 *   index        I64  dataset row
 *   data_source  STR
 *   ground_truth STR  reward_model.ground_truth as text
 *   raw_prompt   STR  JSON text of the message list
 *   extra_info   STR  JSON text
 * and metadata "epoch" and "step" (the step within the epoch).
 *
 * Position: (epoch, step) of the next batch, always normalised so that
 * 0 <= step < steps_per_epoch. Save it with df_dataloader_tell() in a
 * checkpoint and restore it with df_dataloader_seek() to resume exactly.
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
 * Create a loader over `ds` (borrowed: it must outlive the loader and must not
 * be filtered afterwards). Errors (DF_EINVAL): global_batch_size < 1, world < 1,
 * rank outside [0, world), global_batch_size not a multiple of world, or a
 * dataset that yields no batch (empty, or smaller than one global batch with
 * drop_last).
 */
DF_API int df_dataloader_create(const df_dataset *ds, int64_t global_batch_size, int rank,
                                int world, bool shuffle, uint64_t seed, bool drop_last,
                                df_dataloader **out);
DF_API void df_dataloader_free(df_dataloader *dl);

/** Batches per epoch: floor(N / G) with drop_last, ceil(N / G) without. */
DF_API int64_t df_dataloader_steps_per_epoch(const df_dataloader *dl);
/** Epoch of the next batch (0-based). */
DF_API int64_t df_dataloader_epoch(const df_dataloader *dl);
/** Step within the epoch of the next batch (0-based). */
DF_API int64_t df_dataloader_step(const df_dataloader *dl);

/** This rank's batch for the current position, then advance (rolling into the next epoch). */
DF_API int df_dataloader_next(df_dataloader *dl, df_batch **out);

/** This rank's batch at (epoch, step) without moving. DF_EINVAL for a position out of range. */
DF_API int df_dataloader_batch_at(const df_dataloader *dl, int64_t epoch, int64_t step,
                                  df_batch **out);

/**
 * This rank's dataset rows at (epoch, step) into idx (capacity `cap`), count in
 * *n. Same order as the batch's `index` column. DF_EINVAL for a bad position
 * or too small a buffer.
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
