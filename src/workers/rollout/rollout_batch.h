/*
 * rollout_batch.h (internal) — what every RL or evaluation pass does first:
 * generate responses for a batch of prompts (scoring them: reward/score_batch.h).
 */
#ifndef DF_WORKER_ROLLOUT_BATCH_H
#define DF_WORKER_ROLLOUT_BATCH_H

#include "distflow/batch.h"
#include "distflow/model.h"
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
 * df_generate_batch with a turn handler (multi-turn, distflow/rollout.h df_turn_handler; NULL:
 * df_generate_batch): the batch also gets response_mask (int32 per response token, 1 on the
 * model's tokens, 0 on the appended ones; df_batch_response_mask), which the losses, the KL
 * penalty and the advantages read, and num_turns (int64 per sample, verl's: assistant turns +
 * appended replies + 1, logged as num_turns/{min,max,mean}).
 */
int df_generate_batch_turns(df_rollout_engine *e, const df_model *m, const df_batch *prompts,
                            int64_t n, const df_sampling_params *sp, const df_turn_handler *turns,
                            uint64_t seed, const char *label, df_batch **out);

/**
 * The multi-turn columns df_generate_batch_turns adds, onto a generated batch b of n rows:
 * response_mask from mask ([offsets[n]] int8, 1 on a model token, laid out as response_ids by
 * offsets [n + 1]) and num_turns from assistant_turns ([n]). Errors: DF_ENOMEM, the batch's
 * (DF_EINVAL for columns of another size).
 */
int df_generate_set_turn_columns(df_batch *b, int64_t n, const int64_t *offsets, const int8_t *mask,
                                 const int32_t *assistant_turns);

#endif
