/*
 * sft_checkpoint.h (internal) — `distflow sft`'s checkpoints and resume (docs/checkpoints.md, "SFT"):
 * global_step_<N>/ is a Hugging Face directory of the fine-tuned model plus train_state.safetensors
 * (master weights, AdamW moments and step, lr schedule position) and trainer_state.json (step, seed,
 * dataloader position), saved crash-safely through workers/common/ckpt_files.h with verl's
 * latest_checkpointed_iteration.txt, so a resumed run ends bit-identical to an uninterrupted one.
 */
#ifndef DF_WORKER_SFT_CHECKPOINT_H
#define DF_WORKER_SFT_CHECKPOINT_H

#include "distflow/comm.h"
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
    const char *chat_template; /**< data.chat_template's text, saved as chat_template.jinja (NULL: none) */
    const char *model_dir;     /**< the base model (a LoRA adapter's base_model_name_or_path) */
    df_actor *actor;
    df_dataloader *dl;
    int64_t total_steps;
    df_comm *comm;             /**< the data-parallel ranks (NULL: this process alone) */
    int rank, world;           /**< rank 0 writes; every rank reads */
} df_sft_ckpt;

/**
 * Save global_step_<step>: into .global_step_<step>.tmp, renamed into place, then `latest`; then
 * trainer.max_ckpt_to_keep applied (a removal that fails is a warning). A kill at any point leaves
 * `latest` naming a complete checkpoint. Collective over c->comm: the ranks hold the same weights,
 * optimizer state and dataloader position, so rank 0 writes them, and each stage's status is agreed
 * (every rank returns the same success or failure). Errors: DF_EIO naming the file (with strerror),
 * DF_EINVAL (non-finite weights: nothing written), DF_ENOMEM, DF_EINTERNAL (another rank failed).
 */
int df_sft_checkpoint_save(const df_sft_ckpt *c, int64_t step);

/**
 * Before the first step (collective over c->comm): rank 0 removes what a killed save left in
 * out_dir; then trainer.resume_mode picks the checkpoint (auto: the one `latest` names, if any;
 * resume_path: trainer.resume_from_path; disable: none) and every rank restores from it the actor's
 * weights, AdamW state and lr schedule position and the dataloader position; *resumed = its step
 * (0: a fresh start; any number of ranks). Errors name the file: DF_ENOTFOUND, DF_EINVAL (malformed,
 * another format, a dataset of another size), DF_EINTERNAL (another rank failed).
 */
int df_sft_checkpoint_resume(const df_sft_ckpt *c, int64_t *resumed);

#endif
