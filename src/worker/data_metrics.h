/* data_metrics.h (internal) — verl's compute_data_metrics / throughput metrics on a finished step batch. */
#ifndef DF_WORKER_DATA_METRICS_H
#define DF_WORKER_DATA_METRICS_H

#include "distflow/batch.h"
#include "distflow/metrics.h"

/**
 * From the step batch (response_ids, prompt_ids, token_level_scores,
 * token_level_rewards, advantages, returns — whichever are present) record,
 * with verl's names (verl/trainer/ppo/metric_utils.py, compute_data_metrics):
 * critic/score/{mean,max,min}, critic/rewards/{mean,max,min},
 * critic/advantages/{mean,max,min}, critic/returns/{mean,max,min},
 * response_length/{mean,max,min,clip_ratio}, prompt_length/{mean,max,min,clip_ratio};
 * with a critic's `values` column critic/values/{mean,max,min} and
 * critic/vf_explained_var = 1 - var(returns - values) / (var(returns) + 1e-5)
 * (unbiased variances over response tokens, as torch.var; at least 2 tokens);
 * with the dapo reward manager's overlong_buffer.log columns also
 * critic/overlong_reward/{mean,max,min} and critic/overlong/mean (the share of
 * penalised responses; verl keeps them as reward extra info).
 * Sequence scores are per-sample sums of the token-level values; advantages
 * and returns are token means over response tokens. clip_ratio is the fraction
 * of responses (prompts) whose length reached max_response_length
 * (max_prompt_length).
 */
int df_compute_data_metrics(const df_batch *b, int64_t max_response_length,
                            int64_t max_prompt_length, df_metrics *m);

/**
 * perf/total_num_tokens (prompt + response tokens of the batch), perf/throughput
 * (tokens per second per worker over timing_s/step) and
 * perf/time_per_step, as verl's compute_throughout_metrics.
 */
int df_compute_throughput_metrics(const df_batch *b, double step_seconds, int n_workers,
                                  df_metrics *m);

#endif
