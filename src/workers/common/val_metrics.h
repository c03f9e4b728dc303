/*
 * val_metrics.h (internal) — verl's validation metrics (verl/trainer/ppo/metric_utils.py
 * process_validation_metrics, placed by ray_trainer._val_metrics_update) and the unbiased pass@k of
 * Chen et al. 2021 (arXiv 2107.03374, eq. 1), which verl does not have. docs/validation.md has the
 * formulas and the placement rule.
 *
 * Per prompt and per variable (reward, acc, and the reward's other numeric extra infos) over its n
 * responses: mean@n; for n > 1 std@n and, for each N of df_val_ns(n), best@N / worst@N (mean and
 * std over DF_VAL_BOOTSTRAP resamples of N responses drawn with replacement, of the resample's max /
 * min), maj@N (the same for the value of the majority prediction, where responses carry a `pred`),
 * and for acc pass@k for k = 1 and each k of df_val_ns(n). Each metric is then averaged over the
 * prompts of a data source.
 *
 * Ranks: a prompt's responses are all on one rank, so the per-prompt values are local; the sums
 * over prompts and the prompt counts live in a df_metrics that adds across ranks (DF_METRIC_SUM).
 * The bootstrap draws of a prompt come from df_rng_key(seed, DF_VAL_RNG_TAG, index, N), its
 * dataset-wide index: results do not depend on the rank count or the batch split.
 */
#ifndef DF_WORKER_VAL_METRICS_H
#define DF_WORKER_VAL_METRICS_H

#include "distflow/batch.h"
#include "distflow/metrics.h"

#include <stdbool.h>
#include <stdint.h>

#define DF_VAL_BOOTSTRAP 1000 /* verl's n_bootstrap */
#define DF_VAL_MAX_NS 64      /* more than the 63 sizes an int64 n can have */
#define DF_VAL_RNG_TAG 0xb005u /* separates the bootstrap's streams from generation's */

/** verl's gen_ns: 2, 4, 8, ... below n, then n itself; none for n <= 1. Writes ns[], returns the count. */
int df_val_ns(int64_t n, int64_t ns[DF_VAL_MAX_NS]);

/**
 * Unbiased pass@k of one prompt with c correct among n responses (Chen et al. 2021, eq. 1):
 * 1 - C(n-c, k) / C(n, k), computed as 1 - prod_{i=n-c+1..n} (1 - k/i) (their numerically stable
 * form); 1 when n - c < k. Needs 0 <= c <= n and 1 <= k <= n.
 */
double df_pass_at_k(int64_t n, int64_t c, int64_t k);

/**
 * verl's calc_maj_val on the resample s[N] (indices into v / pred): the prediction occurring most
 * often, ties going to the one whose first occurrence in s comes first; returns v at that first
 * occurrence.
 */
double df_val_maj(const double *v, const char *const *pred, const int64_t *s, int64_t N);

/**
 * One prompt's statistics of one variable: v[n] its responses' values, pred[n] their predictions
 * (NULL: no maj@N), `pass_at_k` for the correctness variable (v in {0, 1}; c = responses with
 * v == 1). Adds each metric's value to sums["<prefix><metric>"] with metric names as verl's
 * (mean@4, std@4, best@2/mean, best@2/std, worst@2/mean, ..., maj@4/std) plus pass@k.
 * The resamples of size N come from df_rng_key(seed, DF_VAL_RNG_TAG, index, N), shared by every
 * variable of the prompt (verl draws them all from one seed). Errors: DF_EINVAL (n < 1), DF_ENOMEM.
 */
int df_val_prompt_stats(const double *v, const char *const *pred, int64_t n, bool pass_at_k,
                        uint64_t seed, int64_t index, const char *prefix, df_metrics *sums);

/**
 * The sequence score verl sums into its validation `reward` and its dumps' `score`: row i's
 * token_level_scores summed (the score plus dapo's overlong penalty), or its `score` column where
 * the response is empty and has no token to carry it.
 */
double df_sequence_score(const df_batch *b, int64_t i);

/** Whether row i has a prediction (the reward manager's `pred`, where `pred_valid` says its scorer
 *  gave one; a `pred` column without `pred_valid` counts for every row). */
bool df_row_has_pred(const df_batch *b, int64_t i);

/**
 * Add a scored batch's prompts to `sums`. The batch holds the n responses of each prompt on
 * consecutive rows (as df_generate_batch leaves them) with columns `index` (I64, the dataset-wide
 * row), `data_source` (STR), token_level_scores / score (the variable `reward`,
 * df_sequence_score), and, where present, `acc`, `overlong_reward`, `overlong` (F32) and `pred`
 * (STR, the votes of maj@N, for the prompts whose rows df_row_has_pred). Sums are keyed "val\x1f<data_source>\x1f<var>\x1f<metric>" plus
 * "val\x1f<data_source>\x1fprompts"; they add across batches and ranks.
 * Errors: DF_EINVAL (a missing column, a prompt with other than n responses), DF_ENOMEM.
 */
int df_val_metrics_add(df_metrics *sums, const df_batch *b, int64_t n, uint64_t seed);

/**
 * verl's names from the sums (over every rank) of prompts with n responses each (df_val_metrics_add's
 * n): each metric averaged over its data source's prompts, as `<section>/<data_source>/<var>/<metric>`.
 * The section is val-core for the core variable (acc if the source has it, else reward) and a metric
 * starting with mean, maj, best or pass at the largest N (n), val-aux otherwise. Other keys of `sums`
 * are skipped. Errors: DF_ENOMEM.
 */
int df_val_metrics_finish(const df_metrics *sums, int64_t n, df_metrics *out);

#endif
