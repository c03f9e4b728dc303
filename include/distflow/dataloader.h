/*
 * distflow/dataloader.h — the dataloader of the training data (docs/architecture.md,
 * Data Coordinator).
 *
 * `rank` / `world` are the data-parallel rank and size (siiRL: dp_rank =
 * world_rank / mp, dp_size = world / mp; the mp ranks of a group build the
 * same loader and read the same rows). Global batch G = global_batch_size
 * (verl data.train_batch_size), a multiple of W = world.
 *
 * Every rank holds every row (a dataset loaded with shard_count 1) and draws
 * the same global order, so the rows of a step do not depend on W: a run on
 * W ranks reads, step for step, what one process reads, and a checkpoint's
 * position resumes on any number of ranks (docs/checkpoints.md).
 *
 * Order. N = the dataset's rows (after its filters). Epoch e visits the
 * positions [0, N) in the order of a permutation drawn from
 * df_rng_key(seed, e, 0, 0) (Fisher–Yates; the identity when shuffle is
 * false). Step s is the global batch perm[s G .. min((s + 1) G, N)), the
 * batch verl's single-controller loader draws; with drop_last a final batch
 * of fewer than G rows is skipped. Rank r takes its contiguous share of the
 * global batch, as verl's DataProto.chunk splits it over the workers: with L
 * rows in the batch, positions [floor(r L / W), floor((r + 1) L / W)) of it
 * (P = G / W rows each for a full batch; a short last batch without drop_last
 * gives some ranks one row fewer, or none).
 *
 * Each batch has columns (all of length = this rank's share):
 *   index        I64  global row number (df_dataset_global_index: the row's
 *                     place in the files; uids and per-prompt rollout seeds
 *                     come from it, so a row gets them on any world size)
 *   row          I64  position in the dataset (for df_dataset_* and caches
 *                     aligned with it)
 *   data_source  STR
 *   ground_truth STR  reward_model.ground_truth as text
 *   raw_prompt   STR  JSON text of the message list
 *   extra_info   STR  JSON text
 * (and those df_dataloader_add_column adds), and metadata "epoch" and "step"
 * (the step within the epoch).
 *
 * Position: (epoch, step) of the next batch, always normalised so that
 * 0 <= step < steps_per_epoch. Save it with df_dataloader_tell() in a
 * checkpoint and restore it with df_dataloader_seek() to resume exactly (the
 * same rows, G and seed; any world size).
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
 * [0, world), global_batch_size not a multiple of world, world > 1 over a
 * dataset holding one shard of the rows (the ranks need every row; one rank
 * reads any dataset whole), or rows that yield no batch
 * (none, or fewer than G with drop_last).
 */
DF_API int df_dataloader_create(const df_dataset *ds, int64_t global_batch_size, int rank,
                                int world, bool shuffle, uint64_t seed, bool drop_last,
                                df_dataloader **out);
DF_API void df_dataloader_free(df_dataloader *dl);

/** The most columns df_dataloader_add_column adds to a loader. */
#define DF_DATALOADER_MAX_FIELDS 4

/**
 * Every later batch also carries the STR column `key`: each row's field at that dotted path as
 * df_dataset_field gives it (a string as is, a number in decimal, true / false, null as "",
 * objects and arrays as compact JSON). For verl's data.reward_fn_key (e.g. "ability"), the
 * column a reward manager scores by. Every row is read here, so a batch never fails on it.
 * A key added before is not added again (DF_OK).
 * Errors: DF_EINVAL (no name, one of the batch's standard columns above, more than
 * DF_DATALOADER_MAX_FIELDS), DF_ENOTFOUND (a row without the field: its file and line), DF_ENOMEM.
 */
DF_API int df_dataloader_add_column(df_dataloader *dl, const char *key);

/** Rows the loader visits each epoch (N above). */
DF_API int64_t df_dataloader_rows(const df_dataloader *dl);

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
 * This rank's rows at (epoch, step) as positions in `ds` (what the df_dataset_*
 * accessors take; the batch's `row` column) into idx (capacity `cap`, at most
 * G / W are written), count in *n; df_dataset_global_index maps them to the
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
