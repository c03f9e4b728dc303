/*
 * sft_checkpoint.h (internal) — `distflow sft`'s checkpoints and resume (docs/checkpoints.md, "SFT"):
 * global_step_<N>/ is a Hugging Face directory of the fine-tuned model plus train_state.safetensors
 * (master weights, AdamW moments and step, lr schedule position) and trainer_state.json (step, seed,
 * dataloader position), saved crash-safely through workers/common/ckpt_files.h with verl's
 * latest_checkpointed_iteration.txt, so a resumed run ends bit-identical to an uninterrupted one.
 */
#ifndef DF_WORKER_SFT_CHECKPOINT_H
#define DF_WORKER_SFT_CHECKPOINT_H

#include "distflow/config.h"
#include "distflow/dataloader.h"
#include "distflow/sft_config.h"
#include "engine/actor.h"

/** What a save reads and a resume restores. */
typedef struct df_sft_ckpt {
    const df_config *cfg;      /**< for the places of keys in messages */
    const df_sft_config *t;    /**< its typed keys */
    const char *out_dir;       /**< trainer.default_local_dir, expanded */
    const char *tokenizer_dir; /**< the tokenizer files copied into each checkpoint */
    df_actor *actor;
    df_dataloader *dl;
    int64_t total_steps;
} df_sft_ckpt;

/**
 * Save global_step_<step>: into .global_step_<step>.tmp, renamed into place, then `latest`; then
 * trainer.max_ckpt_to_keep applied (a removal that fails is a warning). A kill at any point leaves
 * `latest` naming a complete checkpoint. Errors: DF_EIO naming the file (with strerror), DF_EINVAL
 * (non-finite weights: nothing written), DF_ENOMEM.
 */
int df_sft_checkpoint_save(const df_sft_ckpt *c, int64_t step);

/**
 * Before the first step: remove what a killed save left in out_dir, then trainer.resume_mode (auto:
 * the checkpoint `latest` names, if any; resume_path: trainer.resume_from_path; disable: none) and,
 * from a checkpoint, the actor's weights, AdamW state and lr schedule position and the dataloader
 * position restored, *resumed = its step (0: a fresh start). Errors name the file: DF_ENOTFOUND,
 * DF_EINVAL (malformed, another format, a dataset of another size, world size other than 1).
 */
int df_sft_checkpoint_resume(const df_sft_ckpt *c, int64_t *resumed);

#endif
