/* data_metrics.h (internal) — verl's compute_data_metrics / throughput metrics on a finished step batch. */
#ifndef DF_WORKER_DATA_METRICS_H
#define DF_WORKER_DATA_METRICS_H

#include "distflow/batch.h"
#include "distflow/metrics.h"
#include "distflow/model.h"

#include <stdbool.h>

/**
 * From the step batch (response_ids, prompt_ids, token_level_scores,
 * token_level_rewards, advantages, returns — whichever are present) record,
 * with verl's names (verl/trainer/ppo/metric_utils.py, compute_data_metrics):
 * critic/score/{mean,max,min}, critic/rewards/{mean,max,min} (over the responses not aborted),
 * critic/advantages/{mean,max,min}, critic/returns/{mean,max,min},
 * response_length/{mean,max,min,clip_ratio}, response_length_non_aborted/{...},
 * response/aborted_ratio, prompt_length/{mean,max,min,clip_ratio};
 * with a critic's `values` column critic/values/{mean,max,min} (but not
 * critic/vf_explained_var, a global number: df_explained_var_sums);
 * with the dapo reward manager's overlong_buffer.log columns also
 * critic/overlong_reward/{mean,max,min} and critic/overlong/mean (the share of
 * penalised responses; verl keeps them as reward extra info).
 * A response of no tokens is verl's aborted one (an aborted request returns none): it is left
 * out of the score and reward statistics and of response_length_non_aborted.
 * Sequence scores are per-sample sums of the token-level values; advantages
 * and returns are token means over response tokens. clip_ratio is the fraction
 * of responses (prompts) whose length reached max_response_length
 * (max_prompt_length).
 */
int df_compute_data_metrics(const df_batch *b, int64_t max_response_length,
                            int64_t max_prompt_length, df_metrics *m);

/** Sum, in double and in order, of the n values of v (a row of a per-token F32 column: verl's
 *  .sum(dim=-1)); 0 when n <= 0. */
double df_row_sum_f32(const float *v, int64_t n);

/** Number of sums df_explained_var_sums accumulates. */
#define DF_EV_NSUMS 5

/**
 * Add the batch's response tokens to s = (n, sum r, sum r^2, sum d, sum d^2)
 * with r = returns and d = returns - values (TOK_F32 columns laid out alike;
 * nothing when either is missing). Sums of several shards (an all-reduce over
 * data-parallel ranks, each sample counted once) give the whole batch's.
 */
void df_explained_var_sums(const df_batch *b, double s[DF_EV_NSUMS]);

/**
 * verl's critic/vf_explained_var (metric_utils.py compute_data_metrics):
 * 1 - var(d) / (var(r) + 1e-5) from df_explained_var_sums' s, variances
 * unbiased as torch.var: (sum x^2 - (sum x)^2 / n) / (n - 1). False (and *out
 * untouched) for fewer than 2 tokens.
 */
bool df_explained_var(const double s[DF_EV_NSUMS], double *out);

/**
 * perf/total_num_tokens (prompt + response tokens of the batch), perf/throughput
 * (tokens per second per worker over timing_s/step) and
 * perf/time_per_step, as verl's compute_throughout_metrics.
 */
int df_compute_throughput_metrics(const df_batch *b, double step_seconds, int n_workers,
                                  df_metrics *m);

/** Add the batch's prompt tokens to tok[0] and its response tokens to tok[1]. */
void df_step_token_counts(const df_batch *b, double tok[2]);

/**
 * verl's compute_timing_metrics, per-token part: timing_per_token_ms/<name> = timing_s/<name> *
 * 1000 / tokens for gen (tokens = response_tokens) and ref, values, adv, update_critic,
 * update_actor (prompt + response tokens), each where m holds its timing_s and tokens > 0. Pass
 * the step's timings after the cross-rank reduction (the slowest rank's) and the tokens of the
 * whole step batch (summed over the data-parallel ranks), as verl's driver divides the stage's
 * wall time by the batch's tokens.
 */
void df_compute_timing_per_token(df_metrics *m, double prompt_tokens, double response_tokens);

/**
 * verl's perf/mfu/actor and perf/mfu/critic (fsdp_workers update_actor / update_critic): the
 * model FLOPs of `epochs` passes over the batch's sequences (prompt + response;
 * df_model_train_flops) over seconds times the device's peak FLOP/s (df_backend_peak_flops),
 * into m as `name`. This rank's batch and time: the cross-rank mean then averages the ranks'
 * utilisations (verl divides the whole batch's FLOPs by the world size and one rank's time).
 * Nothing when seconds or peak is not positive (an unknown device: verl logs 0).
 */
void df_record_mfu(df_metrics *m, const char *name, const df_model_config *c, const df_batch *b, int epochs,
                   double seconds, double peak);

/**
 * verl's perf/max_memory_allocated_gb and perf/max_memory_reserved_gb (fsdp_workers
 * update_actor: torch's peaks on the device, in GiB) from device_peak bytes
 * (df_backend_memory_peak: distflow keeps no allocator cache, so both are that peak), and
 * perf/cpu_memory_used_gb (psutil's used memory of the host) from host_used bytes
 * (df_host_memory_used_bytes). A negative input (unknown) sets none of its metrics.
 */
void df_record_memory(df_metrics *m, int64_t device_peak, int64_t host_used);

#endif
