/*
 * score_batch.h (internal) — score a batch of generated responses: decode them
 * and run the configured reward manager (an RL step's reward node, evaluation).
 */
#ifndef DF_WORKER_SCORE_BATCH_H
#define DF_WORKER_SCORE_BATCH_H

#include "distflow/batch.h"
#include "distflow/dataloader.h"
#include "distflow/reward.h"
#include "distflow/tokenizer.h"

/**
 * Decode each response (special tokens skipped, as verl) and run the reward
 * manager rcfg->manager selects (naive or dapo): adds token_level_scores and
 * the per-sample `score` and `acc` columns (F32), and with dapo's
 * overlong_buffer.log also `overlong_reward` and `overlong` (F32, 1.0 where
 * penalised). *n_empty (may be NULL) counts zero-length responses.
 */
int df_score_batch(const df_tokenizer *tok, const df_reward_manager_cfg *rcfg, df_batch *b,
                   int64_t *n_empty);

/**
 * The column the reward manager selects a scorer by (verl's data.reward_fn_key; NULL, "" and
 * "data_source" are the batch's own data_source): any other key is added to every batch of dl
 * (df_dataloader_add_column, whose errors these are).
 */
int df_score_key_column(df_dataloader *dl, const char *reward_fn_key);

#endif
