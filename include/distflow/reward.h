/*
 * distflow/reward.h — rule-based reward functions keyed by data_source, and the
 * reward managers selected by reward_model.reward_manager: "naive" (verl's
 * NaiveRewardManager) and "dapo" (verl's DAPORewardManager: naive scoring plus
 * DAPO's overlong penalty).
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

/**
 * verl's gsm8k extract_solution(method="strict") as in verl <= 0.3 and siiRL
 * (siirl/utils/reward_score/gsm8k.py; re.search): the FIRST match of
 * `#### (\-?[0-9\.\,]+)` in the whole response, with ',' and '$' removed, goes
 * to out[cap]; false when there is no match or it does not fit in out (the
 * scorer itself needs no buffer and compares answers of any length).
 * Current verl (verl/utils/reward_score/gsm8k.py at commit
 * b178a3cd56f58b2d502255daba591e92833930a7, since verl PR #2568) reads only the
 * last 300 characters and takes the LAST match; the two agree whenever a
 * response's only "#### <number>" lies in its last 300 characters, the format
 * GSM8K training teaches (distflow keeps the first-match reading).
 */
DF_API bool df_reward_gsm8k_extract(const char *response, char *out, size_t cap);

/**
 * verl gsm8k compute_score(method="strict", format_score=0.0, score=1.0):
 * 1.0 when the extracted answer (df_reward_gsm8k_extract's, however long)
 * equals ground_truth as a string, else 0.0 (also 0.0 with no
 * "#### <number>" or a NULL ground_truth).
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

/**
 * DAPO's overlong reward shaping (reward_model.overlong_buffer.*; DAPO, Yu et
 * al. 2025, arXiv 2503.14476, eq. 13). Zero-initialised = disabled.
 */
typedef struct df_overlong_buffer_cfg {
    bool enable;           /**< add the penalty (reward_model.overlong_buffer.enable) */
    int64_t len;           /**< ramp length in tokens (overlong_buffer.len), >= 0 */
    double penalty_factor; /**< penalty at the end of the ramp (overlong_buffer.penalty_factor), >= 0 */
    bool log;              /**< keep per-sample overlong_reward / overlong (overlong_buffer.log) */
} df_overlong_buffer_cfg;

typedef struct df_reward_manager_cfg {
    /** Column whose value selects the reward function (verl data.reward_fn_key) ["data_source"]. */
    const char *reward_fn_key;
    /** When non-NULL, used for every row instead of the registry (verl custom_reward_function). */
    df_reward_fn compute_score;
    /** Reward manager (reward_model.reward_manager): "naive" or "dapo"; NULL / "" = "naive". */
    const char *manager;
    /** dapo: data.max_response_length, the length the overlong ramp ends at (tokens). */
    int64_t max_resp_len;
    /** dapo: the overlong penalty; ignored by naive. */
    df_overlong_buffer_cfg overlong_buffer;
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

/* ---- DAPO reward manager and manager selection ----------------------------- */

/**
 * DAPO's overlong penalty for one response of `valid_len` tokens, as verl's
 * DAPORewardManager.__call__ (verl/workers/reward_manager/dapo.py, commit
 * 003364bc724da7d6efb63834fa1c496e1a55c888):
 *   expected_len = max_resp_len - ob->len
 *   exceed_len   = valid_len - expected_len
 *   penalty      = min(-exceed_len / ob->len * ob->penalty_factor, 0)
 * so 0 up to expected_len, then a linear ramp down to -penalty_factor at
 * max_resp_len (and below that past it, as verl). Returns 0.0 when `ob` is
 * NULL or not enabled. ob->len == 0 (verl divides by zero) is defined as the
 * ramp's limit, a step: -penalty_factor when valid_len >= max_resp_len, else 0.
 */
DF_API double df_reward_overlong_penalty(const df_overlong_buffer_cfg *ob, int64_t max_resp_len,
                                         int64_t valid_len);

/**
 * verl's DAPORewardManager.__call__: df_reward_naive's scoring, then, with
 * cfg->overlong_buffer.enable, each row's df_reward_overlong_penalty (length =
 * its response_ids row; max_resp_len = cfg->max_resp_len) added to the reward
 * on its last token of `token_level_scores`. As in verl the penalty changes
 * the reward only: scores[i] keeps the scorer's score and acc[i] is 1.0 where
 * that score equals 1.0 (verl keeps the scorer's "score" / "acc" in its extra
 * info). overlong_reward[n] (may be NULL) receives each row's penalty (0.0
 * when disabled); a zero-length response has no token to carry it.
 * Other outputs, `cfg` NULL and errors as df_reward_naive; also DF_EINVAL when
 * the buffer is enabled with max_resp_len < 1, a negative len or
 * penalty_factor (see df_reward_manager_check).
 */
DF_API int df_reward_dapo(const df_reward_manager_cfg *cfg, df_batch *b, const char *const *responses,
                          float *scores, float *acc, float *overlong_reward, int64_t *n_empty);

/**
 * Check `cfg` before scoring: the manager name is known ("naive", "dapo"; NULL
 * or "" mean "naive") — else DF_ENOTFOUND with a message naming it and listing
 * the known ones — and, for dapo with the buffer enabled, max_resp_len >= 1,
 * overlong_buffer.len >= 0 and penalty_factor >= 0 (DF_EINVAL). NULL cfg: 0.
 */
DF_API int df_reward_manager_check(const df_reward_manager_cfg *cfg);

/**
 * Run the manager cfg->manager selects: df_reward_naive or df_reward_dapo
 * (same arguments; overlong_reward[n], may be NULL, is all 0.0 for naive).
 * Errors: those of df_reward_manager_check, then of the manager.
 */
DF_API int df_reward_manager_run(const df_reward_manager_cfg *cfg, df_batch *b, const char *const *responses,
                                 float *scores, float *acc, float *overlong_reward, int64_t *n_empty);

/** True when cfg selects dapo with overlong_buffer.enable and .log: the caller keeps overlong columns. */
DF_API bool df_reward_manager_logs_overlong(const df_reward_manager_cfg *cfg);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_REWARD_H */
