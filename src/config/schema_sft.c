/*
 * The `distflow sft` schema: verl's supervised fine-tuning trainer
 * (verl/trainer/config/sft_trainer.yaml, read by fsdp_sft_trainer.py, with its
 * optim/fsdp.yaml defaults). Keys marked "no effect" are accepted so that verl
 * scripts run unchanged. One line per key; see config_internal.h.
 */
#include "config/config_internal.h"

#define CKPT_CONTENTS "model|optimizer|extra|hf_model"

static const df_config_entry sft[] = {
    /* ---- data ---- */
    KI("data.train_batch_size", "256", 1, INF, "samples per optimizer step (all ranks)"),
    KIN("data.micro_batch_size", "null", 1, INF, "deprecated; use micro_batch_size_per_gpu"),
    KI("data.micro_batch_size_per_gpu", "4", 1, INF,
       "samples per forward/backward on one rank; also the validation batch size"),
    KL("data.train_files", "[~/data/gsm8k/train.parquet]", "training parquet file(s)"),
    KL("data.val_files", "[~/data/gsm8k/test.parquet]", "validation parquet file(s)"),
    KI("data.train_max_samples", "-1", -1, INF, "use at most this many training rows; -1: all"),
    KI("data.val_max_samples", "-1", -1, INF, "use at most this many validation rows; -1: all"),
    KS("data.prompt_key", "question", "single-turn: column holding the prompt"),
    KS("data.response_key", "answer", "single-turn: column holding the target response"),
    KLN("data.prompt_dict_keys", "null", "single-turn: keys to follow when the prompt column is a dict"),
    KLN("data.response_dict_keys", "null", "single-turn: keys to follow when the response column is a dict"),
    KB("data.multiturn.enable", "false", "train on chat conversations instead of prompt / response pairs"),
    KS("data.multiturn.messages_key", "messages", "multi-turn: column holding the message list"),
    KS("data.multiturn.tools_key", "tools", "multi-turn: column holding tool definitions"),
    KS("data.multiturn.enable_thinking_key", "enable_thinking",
       "multi-turn: column switching the chat template's thinking mode"),
    KI("data.max_length", "1024", 1, INF, "maximum tokens of prompt + response"),
    KE("data.truncation", "error", "error|left|right", "over-long sample: error, or cut the left / right"),
    KB("data.balance_dp_token", "false", "balance tokens across data-parallel ranks"),
    KSN("data.chat_template", "null", "Jinja chat template overriding the tokenizer's"),
    KB("data.use_shm", "false", "load data through /dev/shm (no effect)"),

    /* ---- model ---- */
    KS("model.partial_pretrain", "~/models/gemma-1.1-7b-it", "Hugging Face model directory to fine-tune"),
    KE("model.strategy", "fsdp2", "fsdp|fsdp2", "training backend name (no effect)"),
    KE("model.fsdp_config.model_dtype", "fp32", "fp32|bf16|fp16|float32|bfloat16|float16",
       "dtype of the master weights"),
    KB("model.fsdp_config.cpu_offload", "false", "offload to host memory (no effect)"),
    KB("model.fsdp_config.offload_params", "false", "offload parameters (no effect)"),
    KSN("model.external_lib", "null", "Python module to import for custom models (no effect)"),
    KB("model.enable_gradient_checkpointing", "true", "recompute activations in backward (no effect)"),
    KB("model.trust_remote_code", "false", "allow model code from the hub (no effect)"),
    KI("model.lora_rank", "0", 0, 0, "LoRA rank; LoRA is not supported yet, must be 0"),
    KF("model.lora_alpha", "16", 0, INF, "LoRA scaling factor (unused while lora_rank is 0)"),
    KS("model.target_modules", "all-linear", "LoRA target modules (unused while lora_rank is 0)"),
    KB("model.use_liger", "false", "Liger kernels (no effect)"),
    KB("model.use_shm", "false", "load the model through /dev/shm (no effect)"),

    /* ---- optim (sft_trainer.yaml over optim/fsdp.yaml) ---- */
    KF("optim.lr", "1e-5", 0, INF, "peak learning rate of AdamW"),
    KFL("optim.betas", "[0.9, 0.95]", 2, 0, 0.999999999, "AdamW (beta1, beta2), each in [0, 1)"),
    KF("optim.weight_decay", "0.01", 0, INF, "AdamW decoupled weight decay"),
    KI("optim.lr_warmup_steps", "-1", -INF, INF, "linear warmup steps; <= 0: use lr_warmup_steps_ratio"),
    KF("optim.lr_warmup_steps_ratio", "0.1", 0, 1, "warmup steps as a fraction of all steps"),
    KF("optim.clip_grad", "1.0", 0, INF, "clip the global gradient L2 norm to this value"),
    KE("optim.lr_scheduler", "cosine", "cosine|wsd",
       "schedule after warmup: cosine decay or warmup-stable-decay"),
    KF("optim.min_lr_ratio", "0.0", 0, 1, "final lr as a fraction of lr"),
    KF("optim.num_cycles", "0.5", 0, INF, "cosine half-waves (0.5 = one decay)"),

    /* ---- top level ---- */
    KI("ulysses_sequence_parallel_size", "1", 1, INF, "sequence parallel size (no effect)"),
    KB("use_remove_padding", "false", "pack sequences without padding (distflow always packs; no effect)"),

    /* ---- trainer ---- */
    KS("trainer.default_local_dir", "checkpoints/${trainer.project_name}/${trainer.experiment_name}",
       "checkpoint directory"),
    KSN("trainer.default_hdfs_dir", "null", "HDFS checkpoint copy (no effect)"),
    KS("trainer.project_name", "gsm8k-sft", "project name in logs"),
    KS("trainer.experiment_name", "test", "run name in logs"),
    KI("trainer.total_epochs", "4", 1, INF, "passes over the training set"),
    KIN("trainer.total_training_steps", "null", 1, INF, "stop after this many steps; null: from epochs"),
    KL("trainer.logger", "[console]",
       "logging backends: console, file (JSON lines); verl's default also lists wandb"),
    KI("trainer.seed", "1", -INF, INF, "global seed"),
    KI("trainer.save_freq", "-1", -1, INF, "checkpoint every this many steps; -1: end only"),
    KI("trainer.test_freq", "-1", -1, INF, "validate every this many steps; -1: end of epoch"),
    KI("trainer.nnodes", "1", 1, INF, "machines in the run"),
    KI("trainer.n_gpus_per_node", "8", 1, INF, "ranks (devices) per machine"),
    KIN("trainer.max_ckpt_to_keep", "null", 1, INF, "keep this many checkpoints; null: all"),
    KE("trainer.resume_mode", "auto", "auto|disable|resume_path",
       "auto: resume from the latest checkpoint in default_local_dir"),
    KSN("trainer.resume_from_path", "null", "checkpoint to resume when resume_mode is resume_path"),
    KLE("trainer.checkpoint.save_contents", "[model, optimizer, extra]", CKPT_CONTENTS,
        "what a checkpoint holds (hf_model: also a Hugging Face model directory)"),
    KLE("trainer.checkpoint.load_contents", "${trainer.checkpoint.save_contents}", CKPT_CONTENTS,
        "what to restore from a checkpoint"),
    KE("trainer.device", "cpu", "cpu|cuda", "compute device (verl default cuda; CUDA comes later)"),
};

static const df_config_schema sft_schema = {"sft", sft, (int)(sizeof sft / sizeof sft[0])};

const df_config_schema *df_config_schema_sft(void) { return &sft_schema; }
