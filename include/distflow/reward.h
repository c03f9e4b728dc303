/*
 * distflow/reward.h — rule-based reward functions keyed by data_source, and the
 * naive reward manager (verl's NaiveRewardManager).
 *
 * A reward function has verl's compute_score(data_source, solution_str,
 * ground_truth, extra_info) shape. Built-in functions:
 *   "openai/gsm8k"          verl/utils/reward_score/gsm8k.py, method "strict"
 *   "synthetic/arithmetic"  the synthetic task (distflow/synth.h)
 * A plugin adds its own with df_reward_register() (the C counterpart of verl's
 * custom_reward_function).
 */
#ifndef DISTFLOW_REWARD_H
#define DISTFLOW_REWARD_H

#include "distflow/batch.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Score one response. `solution_str` is the decoded response text, `extra_info`
 * the row's extra_info JSON text (may be NULL). Writes *score; returns 0 or a
 * DF_E* status (with df_error) when scoring itself failed.
 */
typedef int (*df_reward_fn)(const char *data_source, const char *solution_str,
                            const char *ground_truth, const char *extra_info, double *score);

#define DF_REWARD_NAME_MAX 128

/**
 * Register `fn` under `name` (a data_source value); it shadows a built-in or
 * replaces an earlier registration of that name. Not thread-safe: register
 * during start-up (plugin loading), before scoring starts. Errors: DF_EINVAL
 * (NULL / empty / overlong name, NULL fn), DF_ENOMEM.
 */
DF_API int df_reward_register(const char *name, df_reward_fn fn);

/**
 * The function registered under `name`. DF_ENOTFOUND with a message naming
 * `name` and listing the registered names when there is none.
 */
DF_API int df_reward_lookup(const char *name, df_reward_fn *out);

/* ---- built-in scorers ------------------------------------------------------ */

/** Longest answer (bytes, after removing ',' and '$') the GSM8K scorer compares. */
#define DF_GSM8K_MAX_ANSWER 255

/**
 * verl's gsm8k extract_solution(method="strict") as in verl <= 0.3
 * (re.search): the FIRST match of `#### (\-?[0-9\.\,]+)` in the response,
 * with ',' and '$' removed, goes to out[cap]; false when there is no match
 * or it does not fit. (verl >= 0.4 reads only the last 300 characters and takes
 * the last match; the two agree whenever a response has one "####" near its
 * end, which is the format GSM8K training teaches.)
 */
DF_API bool df_reward_gsm8k_extract(const char *response, char *out, size_t cap);

/**
 * verl gsm8k compute_score(method="strict", format_score=0.0, score=1.0):
 * 1.0 when the extracted answer equals ground_truth as a string, else 0.0
 * (also 0.0 with no "#### <number>").
 */
DF_API int df_reward_gsm8k(const char *data_source, const char *solution_str,
                           const char *ground_truth, const char *extra_info, double *score);

/**
 * The synthetic task's scorer: the FIRST match of `#### (-?[0-9]+)` in the
 * whole response; 1.0 when it equals ground_truth as an integer ("007" == "7",
 * "-0" == "0"; any length), else 0.0.
 */
DF_API int df_reward_synthetic(const char *data_source, const char *solution_str,
                               const char *ground_truth, const char *extra_info, double *score);

/* ---- naive reward manager -------------------------------------------------- */

typedef struct df_reward_manager_cfg {
    /** Column whose value selects the reward function (verl data.reward_fn_key) ["data_source"]. */
    const char *reward_fn_key;
    /** When non-NULL, used for every row instead of the registry (verl custom_reward_function). */
    df_reward_fn compute_score;
} df_reward_manager_cfg;

/**
 * verl's NaiveRewardManager.__call__ over a batch with columns `response_ids`
 * (ragged), the reward_fn_key column (STR), `ground_truth` (STR) and optionally
 * `extra_info` (STR), plus the decoded responses [n] (decoding is the
 * caller's, so this module needs no tokenizer).
 *
 * Adds (or replaces) `token_level_scores` (TOK_F32, the lengths of
 * response_ids): zero except the row's score on its last response token, as
 * verl puts it at valid_response_length - 1. A zero-length response has no
 * token to carry its score: its row in token_level_scores stays empty, the
 * score is still reported in scores[i], and it is counted in *n_empty.
 *
 * Outputs (each may be NULL): scores[n] per-sample score, acc[n] 1.0 where the
 * score equals 1.0 else 0.0, *n_empty the number of zero-length responses.
 * `cfg` may be NULL (defaults).
 * On error the batch is left unchanged.
 * Errors: DF_ENOTFOUND (a missing column, or a data_source with no reward
 * function: the message names it and the row), DF_EINVAL (responses NULL, a
 * non-ragged response_ids), or the reward function's own status wrapped with
 * the row.
 */
DF_API int df_reward_naive(const df_reward_manager_cfg *cfg, df_batch *b,
                           const char *const *responses, float *scores, float *acc,
                           int64_t *n_empty);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_REWARD_H */
