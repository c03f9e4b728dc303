/*
 * gen_dump.h (internal) — verl's _dump_generations, the one writer behind
 * trainer.validation_data_dir (the validation's responses) and trainer.rollout_data_dir (each
 * training step's rollouts): one JSON line per response, gathered in memory, then written
 * atomically as <dir>/<step>.jsonl, or <step>.dp<d>.jsonl from each of several data-parallel ranks.
 */
#ifndef DF_WORKER_DAG_GEN_DUMP_H
#define DF_WORKER_DAG_GEN_DUMP_H

#include "distflow/batch.h"
#include "distflow/tokenizer.h"

#include <stdbool.h>
#include <stdio.h>

/**
 * One JSON line per row of `b` to `f`, with verl's keys: input (the decoded prompt_ids), output
 * (the decoded response_ids, special tokens skipped), gts (ground_truth, null where absent), score
 * (the sequence score, df_sequence_score: the summed token_level_scores), step (with `with_step`),
 * then the reward's extra infos the batch holds — acc, overlong_reward, overlong (F32), pred (STR)
 * — and index, data_source. Errors: DF_EINVAL (no prompt_ids / response_ids / index /
 * data_source), decoding's, DF_ENOMEM, DF_EIO with strerror.
 */
int df_gen_dump_rows(FILE *f, const df_tokenizer *tok, const df_batch *b, bool with_step, int64_t step);

/**
 * Write buf[len] atomically (temp + rename) to <dir>/<step>.jsonl, or <step>.dp<dp_rank>.jsonl
 * when dp_size > 1, creating `dir` (a leading ~ expanded). `key` (the setting that named dir)
 * prefixes the message of an error: DF_EIO with strerror, DF_ENOMEM.
 */
int df_gen_dump_write(const char *dir, const char *key, int64_t step, int dp_rank, int dp_size,
                      const char *buf, size_t len);

#endif
