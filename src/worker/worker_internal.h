/* worker_internal.h — the DAG worker's state, shared by its setup, loop and node functions. */
#ifndef DF_WORKER_INTERNAL_H
#define DF_WORKER_INTERNAL_H

#include "distflow/algo.h"
#include "distflow/config.h"
#include "distflow/dag.h"
#include "distflow/dataloader.h"
#include "distflow/metrics.h"
#include "distflow/rng.h"
#include "distflow/worker.h"
#include "engine/actor.h"
#include "worker/prompts.h"
#include "worker/rollout_batch.h"

#include <stdio.h>

struct df_dag_worker {
    const df_config *cfg;
    int rank, world;
    char model_dir[1024], tokenizer_dir[1024], out_dir[1024];

    df_tokenizer *tok;
    df_dataset *train_ds, *val_ds;
    df_prompt_cache train_prompts, val_prompts;
    df_dataloader *dl;

    df_actor *actor; /* the policy; the rollout engine reads its weights */
    df_actor *ref;   /* frozen reference (use_kl_loss), or NULL */
    df_rollout_engine *rollout;
    df_reward_manager_cfg reward;
    df_adv_estimator_fn adv_fn;
    df_task_graph *graph;

    df_sampling_params sp, val_sp;
    int64_t n_samples, val_n;
    int64_t max_prompt_len, max_response_len;
    int64_t step, total_steps;
    uint64_t seed;

    df_metrics *metrics; /* the current step's */
    FILE *metrics_file;
    bool console;
};

/** Register the built-in node functions under their DAGWorker.* names (idempotent). */
int df_worker_register_nodes(void);

#endif
