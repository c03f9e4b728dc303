/*
 * The `distflow train` schema: siiRL's argument groups (siirl/params/) with
 * verl's key names (verl/trainer/config/ppo_trainer.yaml and its actor /
 * rollout / ref / critic sub-configs). Where siiRL and verl disagree on a
 * default, siiRL's is used. Keys marked "no effect" are accepted so that
 * siiRL / verl scripts run unchanged; distflow has nothing they would tune.
 *
 * Adding a key is one line (macros in config_internal.h):
 *   K<type>(key, default YAML text, [min, max,] help)   N suffix: nullable
 *   K<type>_FROM(key, other_key, ...)                   null -> other_key's value
 */
#include "config/config_internal.h"

#define ARR "actor_rollout_ref."
#define ACTOR ARR "actor."
#define ROLLOUT ARR "rollout."
#define REF ARR "ref."
#define KL_TYPES "kl|k1|abs|mse|k2|low_var_kl|k3|full"
#define LOSS_AGG "token-mean|seq-mean-token-sum|seq-mean-token-mean|seq-mean-token-sum-norm"
#define DTYPES "bfloat16|float16|float32"

/* An optimizer block (actor.optim, critic.optim), siiRL's OptimizerArguments. */
#define OPTIM(p, lr)                                                                             \
    KF(p "lr", lr, 0, INF, "peak learning rate of AdamW"),                                       \
    KI(p "lr_warmup_steps", "-1", -INF, INF,                                                     \
       "linear warmup steps; <= 0 means use lr_warmup_steps_ratio"),                             \
    KF(p "lr_warmup_steps_ratio", "0.0", 0, 1,                                                   \
       "warmup steps as a fraction of total_training_steps (used when lr_warmup_steps <= 0)"),  \
    KE(p "warmup_style", "constant", "constant|cosine",                                          \
       "schedule after warmup: constant, or cosine decay to min_lr_ratio * lr"),                 \
    KF(p "min_lr_ratio", "0.0", 0, 1, "cosine schedule: final lr as a fraction of lr"),          \
    KF(p "num_cycles", "0.5", 0, INF,                                                            \
       "cosine schedule: number of cosine half-waves (0.5 = one decay)"),                        \
    KF(p "weight_decay", "0.01", 0, INF, "AdamW decoupled weight decay"),                        \
    KFL(p "betas", "[0.9, 0.999]", 2, 0, 0.999999999, "AdamW (beta1, beta2), each in [0, 1)"),   \
    KI(p "total_training_steps", "-1", -1, INF,                                                  \
       "optimizer steps for the lr schedule; -1: set by the trainer from trainer.total_training_steps")

static const df_config_entry train[] = {
    /* ---- data (siiRL DataArguments, verl data/legacy_data.yaml) ---- */
    KSN("data.tokenizer", "null", "tokenizer directory; null: the one of actor_rollout_ref.model.path"),
    KL("data.train_files", "[~/data/rlhf/gsm8k/train.parquet]",
       "training parquet file(s); a single path is a one-item list"),
    KL("data.val_files", "[~/data/rlhf/gsm8k/test.parquet]",
       "validation parquet file(s); a single path is a one-item list"),
    KS("data.prompt_key", "prompt", "dataset column holding the prompt (chat messages or text)"),
    KS("data.reward_fn_key", "data_source", "dataset column that selects the reward function"),
    KI("data.max_prompt_length", "512", 1, INF, "maximum prompt length in tokens"),
    KI("data.max_response_length", "512", 1, INF, "maximum generated response length in tokens"),
    KI("data.train_batch_size", "1024", 1, INF, "prompts per training step (before rollout.n)"),
    KI_FROM("data.gen_batch_size", "data.train_batch_size", 1, INF,
            "prompts generated per step when dynamic sampling filters groups (DAPO)"),
    KIN("data.val_batch_size", "null", 1, INF,
        "prompts per validation batch; null: the whole validation set at once"),
    KI("data.train_max_samples", "-1", -1, INF, "use at most this many training rows; -1: all"),
    KI("data.val_max_samples", "-1", -1, INF, "use at most this many validation rows; -1: all"),
    KB("data.return_raw_chat", "false", "keep the un-templated chat in the batch (no effect)"),
    KB("data.shuffle", "true", "shuffle the training set every epoch"),
    KI_FROM("data.seed", "trainer.seed", -INF, INF,
            "seed of the data shuffle (distflow: null takes trainer.seed; verl: 1)"),
    KB("data.filter_overlong_prompts", "false",
       "drop prompts longer than max_prompt_length when loading"),
    KE("data.truncation", "error", "error|left|right|middle",
       "over-long prompt: error, or keep the left / right / both ends"),

    /* ---- actor_rollout_ref ---- */
    KB(ARR "hybrid_engine", "true", "actor and rollout share weights (always so in distflow; no effect)"),
    KS(ARR "model.path", "~/models/deepseek-llm-7b-chat",
       "Hugging Face model directory (config.json, safetensors, tokenizer.json)"),
    KSN(ARR "model.external_lib", "null", "Python module to import for custom models (no effect)"),
    KB(ARR "model.enable_gradient_checkpointing", "true",
       "recompute activations in backward (accepted; distflow keeps activations, no effect)"),
    KB(ARR "model.use_remove_padding", "false",
       "pack sequences without padding (distflow always packs; no effect)"),
    KB(ARR "model.use_fused_kernels", "false", "fused kernels (no effect)"),
    KB(ARR "model.trust_remote_code", "false", "allow model code from the hub (no effect)"),
    KB(ARR "model.use_liger", "false", "Liger kernels (no effect)"),
    KB(ARR "model.use_shm", "false", "load the model through /dev/shm (no effect)"),
    KI(ARR "model.lora_rank", "0", 0, 0, "LoRA rank; LoRA is not supported yet, must be 0"),
    KF(ARR "model.lora_alpha", "16", 0, INF, "LoRA scaling factor (unused while lora_rank is 0)"),
    KS(ARR "model.target_modules", "all-linear", "LoRA target modules (unused while lora_rank is 0)"),

    /* actor (siiRL ActorArguments, verl actor/dp_actor.yaml) */
    KE(ACTOR "strategy", "fsdp", "fsdp|fsdp2|megatron",
       "training backend name (every value runs distflow's data-parallel engine)"),
    KI(ACTOR "ppo_mini_batch_size", "256", 1, INF,
       "prompts per optimizer step (x rollout.n samples); splits each batch into mini-batches"),
    KIN(ACTOR "ppo_micro_batch_size", "null", 1, INF,
        "deprecated global micro-batch size; use ppo_micro_batch_size_per_gpu"),
    KIN(ACTOR "ppo_micro_batch_size_per_gpu", "1", 1, INF,
        "samples per forward/backward on one rank (gradient accumulation unit)"),
    KB(ACTOR "use_dynamic_bsz", "false",
       "form micro-batches by token budget (ppo_max_token_len_per_gpu) instead of sample count"),
    KI(ACTOR "ppo_max_token_len_per_gpu", "16384", 1, INF,
       "token budget of one micro-batch per rank when use_dynamic_bsz"),
    KI(ACTOR "ppo_epochs", "1", 1, INF, "passes over each batch per training step"),
    KB(ACTOR "shuffle", "false", "shuffle samples between ppo_epochs"),
    KF(ACTOR "grad_clip", "1.0", 0, INF, "clip the global gradient L2 norm to this value"),
    KF(ACTOR "clip_ratio", "0.2", 0, INF, "PPO clip epsilon (Schulman et al. 2017, eq. 7)"),
    KF_FROM(ACTOR "clip_ratio_low", ACTOR "clip_ratio", 0, INF,
            "lower clip epsilon (ratio >= 1 - low); null: clip_ratio (DAPO's decoupled clip)"),
    KF_FROM(ACTOR "clip_ratio_high", ACTOR "clip_ratio", 0, INF,
            "upper clip epsilon (ratio <= 1 + high); null: clip_ratio (DAPO: 0.28)"),
    KF(ACTOR "clip_ratio_c", "3.0", 1, INF,
       "dual-clip constant: bounds the loss of negative-advantage tokens (Ye et al. 2019)"),
    KF(ACTOR "entropy_coeff", "0", -INF, INF, "weight of the entropy bonus in the policy loss"),
    KB(ACTOR "use_kl_loss", "false", "add a KL(actor || ref) term to the loss (GRPO)"),
    KF(ACTOR "kl_loss_coef", "0.001", 0, INF, "weight of the KL loss when use_kl_loss"),
    KE(ACTOR "kl_loss_type", "low_var_kl", KL_TYPES,
       "KL estimator of the KL loss: kl (k1), abs, mse (k2), low_var_kl (k3), full"),
    KE(ACTOR "loss_agg_mode", "token-mean", LOSS_AGG,
       "how token losses are averaged: over all tokens, or per sequence then over sequences"),
    KS(ACTOR "policy_loss.loss_mode", "vanilla",
       "policy loss from the policy-loss registry (vanilla, gspo, gpg, clip-cov, kl-cov, cpgd, ...)"),
    KF(ACTOR "policy_loss.clip_cov_ratio", "0.0002", 0, 1, "clip-cov: fraction of tokens clipped"),
    KF(ACTOR "policy_loss.clip_cov_lb", "1.0", -INF, INF, "clip-cov: lower covariance bound"),
    KF(ACTOR "policy_loss.clip_cov_ub", "5.0", -INF, INF, "clip-cov: upper covariance bound"),
    KF(ACTOR "policy_loss.kl_cov_ratio", "0.0002", 0, 1, "kl-cov: fraction of tokens penalised"),
    KF(ACTOR "policy_loss.ppo_kl_coef", "0.1", 0, INF, "kl-cov: KL penalty coefficient"),
    KB(ACTOR "use_cpgd_loss", "false", "use the CPGD policy loss (siiRL)"),
    KF(ACTOR "policy_drift_coeff", "0.0", 0, INF, "CPGD policy-drift regulariser weight (siiRL)"),
    KB(ACTOR "recompute_old_log_prob", "true", "recompute old log-probs with the actor before the update"),
    KI(ACTOR "ulysses_sequence_parallel_size", "1", 1, INF, "sequence parallel size (no effect)"),
    KB(ACTOR "use_torch_compile", "true", "torch.compile (no effect)"),
    KB(ACTOR "fsdp_config.param_offload", "false", "offload parameters to host memory (no effect)"),
    KB(ACTOR "fsdp_config.optimizer_offload", "false", "offload optimizer state (no effect)"),
    OPTIM(ACTOR "optim.", "1e-6"),

    /* reference policy (siiRL RefArguments) */
    KIN(REF "log_prob_micro_batch_size", "null", 1, INF,
        "deprecated global micro-batch size; use log_prob_micro_batch_size_per_gpu"),
    KIN(REF "log_prob_micro_batch_size_per_gpu", "1", 1, INF,
        "samples per reference forward on one rank"),
    KB_FROM(REF "log_prob_use_dynamic_bsz", ACTOR "use_dynamic_bsz",
            "micro-batch the reference forward by token budget"),
    KI_FROM(REF "log_prob_max_token_len_per_gpu", ACTOR "ppo_max_token_len_per_gpu", 1, INF,
            "token budget of one reference micro-batch"),
    KB(REF "fsdp_config.param_offload", "false", "offload reference parameters (no effect)"),

    /* rollout (siiRL RolloutArguments, verl rollout/rollout.yaml) */
    KE(ROLLOUT "name", "vllm", "vllm|sglang|hf",
       "rollout engine name (every value runs distflow's engine: KV cache, continuous batching)"),
    KF(ROLLOUT "temperature", "1.0", 0, INF, "sampling temperature; 0 is greedy"),
    KI(ROLLOUT "top_k", "-1", -1, INF, "keep the k most likely tokens; -1 or 0: off"),
    KF(ROLLOUT "top_p", "1.0", 0, 1, "nucleus sampling mass; 1.0: off"),
    KB(ROLLOUT "do_sample", "true", "sample; false: greedy decoding"),
    KI(ROLLOUT "n", "1", 1, INF, "responses per prompt (the group size of GRPO)"),
    KI_FROM(ROLLOUT "prompt_length", "data.max_prompt_length", 1, INF, "prompt token budget"),
    KI_FROM(ROLLOUT "response_length", "data.max_response_length", 1, INF,
            "maximum new tokens per response"),
    KE(ROLLOUT "dtype", "bfloat16", DTYPES, "compute dtype of rollout matmuls"),
    KIN(ROLLOUT "log_prob_micro_batch_size", "null", 1, INF,
        "deprecated global micro-batch size; use log_prob_micro_batch_size_per_gpu"),
    KIN(ROLLOUT "log_prob_micro_batch_size_per_gpu", "1", 1, INF,
        "samples per old-log-prob forward on one rank"),
    KB_FROM(ROLLOUT "log_prob_use_dynamic_bsz", ACTOR "use_dynamic_bsz",
            "micro-batch the old-log-prob forward by token budget"),
    KI_FROM(ROLLOUT "log_prob_max_token_len_per_gpu", ACTOR "ppo_max_token_len_per_gpu", 1, INF,
            "token budget of one old-log-prob micro-batch"),
    KI(ROLLOUT "max_num_seqs", "1024", 1, INF, "sequences decoded concurrently per rank"),
    KI(ROLLOUT "max_num_batched_tokens", "8192", 1, INF, "tokens per prefill / decode step per rank"),
    KIN(ROLLOUT "max_model_len", "null", 1, INF,
        "KV cache length per sequence; null: prompt_length + response_length"),
    KB(ROLLOUT "ignore_eos", "false", "keep generating after the end-of-sequence token"),
    KI(ROLLOUT "seed", "0", -INF, INF, "seed of the rollout sampler (siiRL)"),
    KB(ROLLOUT "calculate_log_probs", "false", "also record rollout log-probs for debugging"),
    KF(ROLLOUT "gpu_memory_utilization", "0.5", 0, 1, "KV cache memory fraction (no effect)"),
    KI(ROLLOUT "tensor_model_parallel_size", "1", 1, INF, "rollout tensor parallel size (no effect)"),
    KB(ROLLOUT "enforce_eager", "true", "disable CUDA graphs (no effect)"),
    KB(ROLLOUT "free_cache_engine", "true", "free the KV cache after rollout (no effect)"),
    KB(ROLLOUT "enable_chunked_prefill", "true", "chunked prefill (no effect)"),
    KB(ROLLOUT "disable_log_stats", "true", "engine statistics logging (no effect)"),
    KI(ROLLOUT "val_kwargs.n", "1", 1, INF, "validation: responses per prompt"),
    KB(ROLLOUT "val_kwargs.do_sample", "false", "validation: sample; false: greedy"),
    KF(ROLLOUT "val_kwargs.temperature", "0", 0, INF, "validation: sampling temperature"),
    KI(ROLLOUT "val_kwargs.top_k", "-1", -1, INF, "validation: top-k; -1 or 0: off"),
    KF(ROLLOUT "val_kwargs.top_p", "1.0", 0, 1, "validation: nucleus mass; 1.0: off"),

    /* ---- critic (siiRL CriticArguments; used by gae) ---- */
    KE("critic.strategy", "fsdp", "fsdp|fsdp2|megatron", "training backend name (no effect)"),
    KS("critic.model.path", "~/models/deepseek-llm-7b-chat", "critic initialisation (HF directory)"),
    KS_FROM("critic.model.tokenizer_path", ARR "model.path", "tokenizer of the critic"),
    KB("critic.model.enable_gradient_checkpointing", "true", "recompute activations (no effect)"),
    KB("critic.model.use_remove_padding", "false", "pack sequences (always so; no effect)"),
    OPTIM("critic.optim.", "1e-5"),
    KI("critic.ppo_mini_batch_size", "256", 1, INF, "prompts per critic optimizer step"),
    KIN("critic.ppo_micro_batch_size", "null", 1, INF, "deprecated; use ppo_micro_batch_size_per_gpu"),
    KIN("critic.ppo_micro_batch_size_per_gpu", "null", 1, INF, "samples per critic micro-batch"),
    KB("critic.use_dynamic_bsz", "false", "micro-batch the critic by token budget"),
    KI("critic.ppo_max_token_len_per_gpu", "32768", 1, INF, "critic training token budget"),
    KI("critic.forward_max_token_len_per_gpu", "32768", 1, INF, "critic value forward token budget"),
    KI("critic.ppo_epochs", "1", 1, INF, "critic passes over each batch"),
    KB("critic.shuffle", "false", "shuffle between critic epochs"),
    KF("critic.grad_clip", "1.0", 0, INF, "critic global gradient-norm clip"),
    KF("critic.cliprange_value", "0.5", 0, INF, "value clipping range of the critic loss"),
    KE("critic.loss_agg_mode", "token-mean", LOSS_AGG, "critic loss aggregation"),
    KI_FROM("critic.rollout_n", ROLLOUT "n", 1, INF, "responses per prompt seen by the critic"),

    /* ---- reward (siiRL RewardModelArguments, CustomRewardArguments) ---- */
    KB("reward_model.enable", "false", "score with a reward model (not supported yet: rule rewards)"),
    KS("reward_model.reward_manager", "naive",
       "reward manager from the registry (naive, batch, dapo, parallel, ...)"),
    KB("reward_model.launch_reward_fn_async", "false", "compute rewards during log-prob passes"),
    KB("reward_model.overlong_buffer.enable", "false", "DAPO: penalise responses near the length limit"),
    KI("reward_model.overlong_buffer.len", "512", 0, INF, "DAPO: penalty ramp length in tokens"),
    KF("reward_model.overlong_buffer.penalty_factor", "1.0", 0, INF, "DAPO: maximum overlong penalty"),
    KB("reward_model.overlong_buffer.log", "false", "DAPO: log overlong statistics"),
    KSN("custom_reward_function.path", "null",
        "shared library with a custom reward (distflow's counterpart of a Python file)"),
    KS("custom_reward_function.name", "compute_score", "symbol of the custom reward in that library"),

    /* ---- algorithm (siiRL AlgorithmArguments) ---- */
    KF("algorithm.gamma", "1.0", 0, 1, "discount factor"),
    KF("algorithm.lam", "1.0", 0, 1, "GAE lambda (Schulman et al. 2016)"),
    KS("algorithm.adv_estimator", "gae",
       "advantage estimator from the registry (gae, grpo, rloo, reinforce_plus_plus, cpgd, ...)"),
    KB("algorithm.norm_adv_by_std_in_grpo", "true", "GRPO: divide group-relative advantages by the std"),
    KB("algorithm.use_kl_in_reward", "false", "subtract a KL(actor || ref) penalty from the reward"),
    KE("algorithm.kl_penalty", "kl", KL_TYPES, "KL estimator of the in-reward penalty"),
    KE("algorithm.kl_ctrl.type", "fixed", "fixed|adaptive", "KL coefficient controller"),
    KF("algorithm.kl_ctrl.kl_coef", "0.001", 0, INF, "(initial) in-reward KL coefficient"),
    KF("algorithm.kl_ctrl.target_kl", "0.1", 0, INF, "adaptive controller: target KL"),
    KF("algorithm.kl_ctrl.horizon", "1000", 1, INF, "adaptive controller: horizon (siiRL; verl: 10000)"),
    KS("algorithm.workflow_type", "default", "built-in workflow: default (PPO / GRPO), dapo, embodied"),
    KE("algorithm.weight_factor_in_cpgd", "STD_weight", "STD_weight|clip_filter_like_weight|naive",
       "CPGD advantage weighting (siiRL)"),
    KB("algorithm.filter_groups.enable", "false", "DAPO dynamic sampling: drop zero-variance groups"),
    KS("algorithm.filter_groups.metric", "acc", "DAPO: per-sample metric whose variance is tested"),
    KI("algorithm.filter_groups.max_num_gen_batches", "10", 0, INF,
       "DAPO: generation batches per step before giving up; 0: no limit"),

    /* ---- trainer (siiRL TrainingArguments) ---- */
    KS("trainer.project_name", "distflow_examples", "project name in logs"),
    KS("trainer.experiment_name", "gsm8k", "run name in logs"),
    KL("trainer.logger", "[console]",
       "logging backends: console, file (JSON lines); verl's default also lists wandb"),
    KI("trainer.log_val_generations", "0", 0, INF, "validation samples to print"),
    KI("trainer.total_epochs", "30", 1, INF, "passes over the training set"),
    KIN("trainer.total_training_steps", "null", 1, INF, "stop after this many steps; null: from epochs"),
    KS("trainer.default_local_dir", "checkpoints/${trainer.project_name}/${trainer.experiment_name}",
       "checkpoint directory"),
    KE("trainer.resume_mode", "auto", "auto|disable|resume_path",
       "auto: resume from the latest checkpoint in default_local_dir"),
    KSN("trainer.resume_from_path", "null", "checkpoint to resume when resume_mode is resume_path"),
    KI("trainer.seed", "1", -INF, INF, "global seed (not in verl's ppo_trainer.yaml; siiRL's)"),
    KI("trainer.test_freq", "-1", -1, INF, "validate every this many steps; -1: never"),
    KB("trainer.val_before_train", "true", "validate before the first step"),
    KB("trainer.val_only", "false", "validate and exit"),
    KI("trainer.save_freq", "-1", -1, INF, "checkpoint every this many steps; -1: never"),
    KIN("trainer.max_actor_ckpt_to_keep", "null", 1, INF, "keep this many actor checkpoints; null: all"),
    KIN("trainer.max_critic_ckpt_to_keep", "null", 1, INF, "keep this many critic checkpoints; null: all"),
    KI("trainer.critic_warmup", "0", 0, INF, "steps that train only the critic"),
    KB("trainer.balance_batch", "true", "balance tokens across data-parallel ranks (verl's default)"),
    KI("trainer.nnodes", "1", 1, INF, "machines in the run"),
    KI("trainer.n_gpus_per_node", "8", 1, INF, "ranks (devices) per machine"),
    KE("trainer.device", "cpu", "cpu|cuda", "compute device (siiRL / verl default cuda; CUDA comes later)"),
    KSN("trainer.rollout_data_dir", "null", "dump rollouts as JSON lines here; null: no dump"),
    KSN("trainer.validation_data_dir", "null", "dump validation generations here; null: no dump"),

    /* ---- dag (siiRL DagArguments) ---- */
    KSN("dag.custom_pipeline_fn", "null",
        "custom pipeline 'lib.so:symbol' (siiRL: 'module:function'); null: built-in"),
    KSN("dag.workflow_path", "null",
        "workflow DAG YAML in siiRL's format (examples/workflows/); replaces the built-in "
        "pipeline of algorithm.workflow_type; null: built-in"),
    KB("dag.enable_perf", "false", "print a per-rank timing table"),
};

static const df_config_schema train_schema = {"train", train, (int)(sizeof train / sizeof train[0])};

const df_config_schema *df_config_schema_train(void) { return &train_schema; }
