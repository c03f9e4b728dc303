/*
 * rollout_batch.h (internal) — the two steps every RL or evaluation pass
 * shares: generate responses for a batch of prompts, and score them.
 */
#ifndef DF_WORKER_ROLLOUT_BATCH_H
#define DF_WORKER_ROLLOUT_BATCH_H

#include "distflow/batch.h"
#include "distflow/model.h"
#include "distflow/reward.h"
#include "distflow/rollout.h"
#include "distflow/tokenizer.h"

/**
 * Generate n responses per row of `prompts` (column prompt_ids; `index`, when
 * present, keys each prompt's random stream so results do not depend on how
 * rows are split across ranks or batches). *out receives a new batch: each row
 * repeated n times (verl's repeat(interleave=True)) plus response_ids and
 * rollout_log_probs. `label` names the progress bar (NULL: none).
 */
int df_generate_batch(df_rollout_engine *e, const df_model *m, const df_batch *prompts,
                      int64_t n, const df_sampling_params *sp, uint64_t seed, const char *label,
                      df_batch **out);

/**
 * Decode each response (special tokens skipped, as verl) and run the reward
 * manager rcfg->manager selects (naive or dapo): adds token_level_scores and
 * the per-sample `score` and `acc` columns (F32), and with dapo's
 * overlong_buffer.log also `overlong_reward` and `overlong` (F32, 1.0 where
 * penalised). *n_empty (may be NULL) counts zero-length responses.
 */
int df_score_batch(const df_tokenizer *tok, const df_reward_manager_cfg *rcfg, df_batch *b,
                   int64_t *n_empty);

#endif
