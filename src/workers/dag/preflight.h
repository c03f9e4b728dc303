/*
 * preflight.h (internal) — the part of df_train_check that reads the run's files: what would
 * otherwise fail only while loading, or at the first reward or validation after a whole rollout.
 */
#ifndef DF_WORKER_DAG_PREFLIGHT_H
#define DF_WORKER_DAG_PREFLIGHT_H

#include "distflow/config.h"
#include "distflow/train_config.h"

#include <stdbool.h>

/**
 * c resolved into t; critic: the graph has a CRITIC node; train_scored:
 * a node of the graph scores the training responses with the reward registry (the built-in reward
 * or ReMax baseline node without reward_model.enable; a plugin's reward node or a reward model
 * scores its own way). In order:
 *  - trainer.val_only has data.val_files to validate on;
 *  - the model directories (actor_rollout_ref.model.path, data.tokenizer when set,
 *    critic.model.path with a critic, reward_model.model.path with reward_model.enable) exist and
 *    hold config.json (the tokenizer: tokenizer.json);
 *    a missing `Org/Name` gets "download it first" with the huggingface-cli line;
 *  - each of those models' max_position_embeddings (its config.json) holds the job's longest
 *    sequence (workers/common/max_pos.h: the policy's for the actor and the critic, the reward
 *    model's input for it);
 *  - every data.train_files / data.val_files file exists;
 *  - unless custom_reward_function.path scores everything: every data_source value of the
 *    validation rows, and with train_scored of the training rows, has a scorer in the reward
 *    registry (over the rows the run reads: the first data.*_max_samples of the files).
 * Errors (messages name the key, its value and where it was set, or file:line): DF_EUNSUPPORTED,
 * DF_EINVAL, DF_ENOTFOUND, those of df_dataset_scan_values.
 */
int df_train_preflight(const df_config *c, const df_train_config *t, bool critic, bool train_scored);

#endif
