/*
 * evaluate.h (internal) — generate and score a whole dataset: the validation
 * pass of training (verl's _validate) and `distflow eval`.
 */
#ifndef DF_WORKER_EVALUATE_H
#define DF_WORKER_EVALUATE_H

#include "distflow/comm.h"
#include "distflow/metrics.h"
#include "workers/common/prompts.h"
#include "workers/reward/score_batch.h"
#include "workers/rollout/agent_loop.h"
#include "workers/rollout/rollout_batch.h"

#include <stdio.h>

typedef struct df_eval_opts {
    df_sampling_params sp;
    int64_t n;             /* responses per prompt */
    uint64_t seed;
    int64_t batch_prompts; /* prompts per generation call; <= 0: all at once */
    const char *label;     /* progress-bar label; NULL: none */
    FILE *dump;            /* when non-NULL, one JSON line per response is written here
                              (df_gen_dump_rows: verl's _dump_generations keys input, output, gts,
                              score (+ step), the reward's extra infos, index, data_source) */
    bool with_step;        /* the dump's lines carry "step": step */
    int64_t step;
    df_comm *comm;         /* ranks evaluating disjoint shards: results are their totals; NULL: this rank's */
    bool replica;          /* this rank repeats another rank's shard: it adds nothing to the totals */
    bool gather;           /* with comm: rank 0 scores every rank's responses, in the dataset's order (below) */
    const df_agent_config *agent; /* multi-turn / environment rollouts (agent_loop.h); NULL: single-turn */
    /* the generation when not e's (a chained multi-agent rollout: marft_run.h): n responses per
       row of prompts into *out, the columns scored unprefixed; NULL: e's, through agent */
    int (*generate)(void *user, const df_batch *prompts, int64_t n, uint64_t seed, df_batch **out);
    void *gen_user;
} df_eval_opts;

typedef struct df_eval_result {
    int64_t n_prompts, n_responses;
    double score_mean, acc_mean;  /* over all responses */
    double response_length_mean;
} df_eval_result;

/**
 * Evaluate rows of `ds` (prompts already encoded in `pc`). With `metrics`,
 * records verl's validation metrics per data source (df_val_metrics_finish:
 * val-core/<data_source>/acc/mean@<n>, val-aux/<data_source>/reward/mean@<n>,
 * and with n > 1 std@n, best@N, worst@N, pass@k, ...; docs/validation.md), the
 * bootstrap keyed by o->seed and each prompt's dataset-wide index, plus
 * val-aux/response_length/mean. A response's reward is the sum of its
 * token_level_scores (verl's reward_tensor.sum(-1): the score plus dapo's
 * overlong penalty); with dapo's overlong_buffer.log, overlong_reward and
 * overlong are variables too (val-aux).
 * With o->comm it is collective: every rank joins the one reduction even when
 * its shard is empty or it failed (then every rank returns an error); an
 * empty shard is fine as long as the group has prompts. Each rank scores its
 * own responses and the sums are added over the ranks, so the metrics of one
 * and several ranks differ by the order of the sums (the last bits).
 *
 * With o->gather (`distflow eval`) each rank only generates; its responses go
 * to rank 0 of o->comm (NULL: this rank alone), which sorts them by the
 * dataset-wide index (a prompt's responses in their order) and scores them in
 * batches of o->batch_prompts prompts, cut as one rank's dataloader cuts them:
 * the same operations on the same values in the same order as on one rank,
 * so *res, the metrics and the dump are the same bits at any rank count
 * (given the same responses: each one's sampling is keyed by o->seed and its
 * prompt's dataset-wide index). Rank 0 alone fills `metrics` and writes
 * o->dump; *res is broadcast to every rank. The responses must fit rank 0's
 * memory and, serialized, 2^31 bytes (the comm's alltoallv).
 *
 * Errors: DF_EINVAL when there are no prompts at all, those of generation and
 * scoring (with gather, scoring's on rank 0), DF_EINTERNAL on the ranks whose
 * peer failed.
 */
int df_evaluate(df_rollout_engine *e, const df_model *m, const df_tokenizer *tok,
                const df_reward_manager_cfg *rcfg, const df_dataset *ds,
                const df_prompt_cache *pc, const df_eval_opts *o, df_metrics *metrics,
                df_eval_result *res);

#endif
