/* worker_internal.h — the DAG worker's state, shared by its setup, loop and node functions. */
#ifndef DF_WORKER_INTERNAL_H
#define DF_WORKER_INTERNAL_H

#include "distflow/algo.h"
#include "distflow/comm.h"
#include "distflow/config.h"
#include "distflow/coordinator.h"
#include "distflow/dag.h"
#include "distflow/dataloader.h"
#include "distflow/metrics.h"
#include "distflow/rng.h"
#include "distflow/scheduler.h"
#include "distflow/train_config.h"
#include "distflow/worker.h"
#include "engine/actor.h"
#include "engine/critic.h"
#include "util/timeutil.h"
#include "workers/common/ckpt_files.h"
#include "workers/common/group_sum.h"
#include "workers/common/run_log.h"
#include "workers/common/prompts.h"
#include "workers/reward/rm_score.h"
#include "workers/reward/score_batch.h"
#include "workers/rollout/agent_loop.h"
#include "workers/rollout/rollout_batch.h"

#include <signal.h>
#include <stdio.h>

/* A node's data-parallel layout within its group (siiRL _get_node_dp_info):
 * dp_size DP ranks of mp consecutive group ranks each; distflow does not shard
 * models, so the mp ranks of a DP rank hold the same data and compute the same. */
typedef struct df_node_layout {
    int dp_size, mp, dp_rank, mp_rank;
} df_node_layout;

/*
 * The configuration one graph node runs with, resolved once (src/workers/common/resolve.c):
 * the typed keys (the global ones, with a workflow node's `config:` merged over them)
 * and what is derived from them. The worker holds one for the global configuration
 * (w->global) and one per node that overrides keys; df_worker_node_settings picks.
 */
typedef struct df_node_settings {
    df_config *owned;       /* the node's merged config (node_config.c), NULL for w->global */
    const df_config *src;   /* what cfg was resolved from: provenance (df_config_where) for messages */
    df_train_config cfg;    /* typed keys; strings point into src */
    df_actor_loss actor_loss;   /* df_worker_actor_loss(&cfg) */
    df_critic_loss critic_loss; /* df_worker_critic_loss(&cfg) */
    df_sampling_params sampling; /* rollout.* as this node samples (df_worker_resolve; needs the tokenizer) */
} df_node_settings;

/* The role workers: what each role's nodes own (workers/<role>/), held by the DAG worker. */

/* workers/rollout/: the rollout engine sampling from the actor's weights (verl's hybrid engine). */
typedef struct df_rollout_worker {
    df_rollout_engine *engine;
    df_sampling_params val_sp; /* rollout.val_kwargs.* (df_worker_resolve) */
    int64_t synced_step;       /* the actor's optimizer step the engine's weights are from
                                  (-1: none yet; df_worker_rollout_sync) */
    bool shared_w16;           /* a bf16 engine reading the actor's bf16 copy (both bf16) */
    df_agent_config *agent;    /* multi_turn.enable / dag.env_enable: the agent loop's tools,
                                  interactions or environment (df_worker_agent_setup); NULL: single-turn */
} df_rollout_worker;

/* workers/actor/: the policy being trained, its optimizer inside. */
typedef struct df_actor_worker {
    df_actor *model;       /* the policy; the rollout engine reads its weights */
    df_node_layout layout; /* its nodes' data-parallel layout */
    df_comm *dp;           /* its data-parallel group (owned), NULL on one rank */
} df_actor_worker;

/* workers/reference/: the frozen initial policy, when a KL term needs it. */
typedef struct df_reference_worker {
    df_actor *model;      /* use_kl_loss or use_kl_in_reward, else NULL */
    df_actor *in_actor;   /* instead of model: this LoRA actor with its adapters disabled (verl's
                             ref_in_actor; df_worker_ref_in_actor), borrowed */
    df_actor_params params; /* the reference's settings (its micro-batch limits), with in_actor */
} df_reference_worker;

/* workers/critic/: the value model of PPO. */
typedef struct df_critic_worker {
    df_critic *model;      /* when the graph has a CRITIC node, else NULL */
    df_node_layout layout;
    df_comm *dp;           /* its data-parallel group (owned), NULL on one rank */
} df_critic_worker;

/* What an agent group beyond 0 owns (agents.c); group 0's are the worker's own fields. */
typedef struct df_agent_own {
    df_rollout_worker rollout;
    df_actor_worker actor;
    df_reference_worker reference;
    df_critic_worker critic; /* when the group has CRITIC nodes of its own (no share_instance) */
    df_tokenizer *tok;       /* a chained graph's group whose model has its own tokenizer, else NULL */
    char model_dir[1024];
} df_agent_own;

/*
 * One agent group's models (docs/multi_agent.md, "Design: agent groups in the DAG worker"): the
 * role workers a node of the group runs on, its tokenizer and model directory. Slot 0 is the
 * single-agent job's: w->rollout, w->actor, w->reference, w->critic, w->tok, w->model_dir. A later
 * group's slot points at what it owns (own) and reads group 0's tokenizer; a role whose nodes set
 * agent_options.share_instance h points at group h's worker of that role, the same object
 * (df_worker_apply_shares). Node functions reach their node's slot through df_worker_slot.
 */
typedef struct df_agent_slot {
    int group; /* its agent_group */
    df_rollout_worker *rollout;
    df_actor_worker *actor;
    df_reference_worker *reference;
    df_critic_worker *critic;
    df_tokenizer *tok;
    const char *model_dir, *tokenizer_dir;
    df_agent_own *own; /* NULL in slot 0 */
} df_agent_slot;

/** Whether slot s beyond 0 holds its own critic model (not another group's through share_instance). */
static inline bool df_agent_slot_owns_critic(const df_agent_slot *s)
{
    return s->own && s->critic == &s->own->critic && s->critic->model;
}
/** Whether slot s beyond 0 holds its own actor (not another group's through share_instance). */
static inline bool df_agent_slot_owns_actor(const df_agent_slot *s)
{
    return s->own && s->actor == &s->own->actor && s->actor->model;
}

/* workers/reward/: the reward manager (or custom_reward_function) and the in-reward KL controller. */
typedef struct df_reward_worker {
    df_reward_manager_cfg cfg; /* reward_model.reward_manager, its overlong buffer, the custom function */
    df_reward_kwargs kwargs;   /* custom_reward_function.reward_kwargs.*, what cfg.kwargs points at */
    df_reward_model *rm;       /* reward_model.enable: the reward model (owned), else NULL */
    df_rm_scorer scorer;       /* how the reward node builds its inputs (rm_score.h) */
    df_tokenizer *rm_tok;      /* with input_tokenizer: the reward model's tokenizer (owned) */
    df_tokenizer *input_tok;   /* input_tokenizer when not the actor's tokenizer directory (owned) */
} df_reward_worker;

/* workers/advantage/: the estimator, and the KL penalty it subtracts from the rewards first. */
typedef struct df_advantage_worker {
    df_adv_estimator_fn fn; /* algorithm.adv_estimator */
    df_kl_ctrl *kl_ctrl;    /* algorithm.kl_ctrl when algorithm.use_kl_in_reward, else NULL */
} df_advantage_worker;

/* What the console's banner and summary report beyond the config and the models (workers/dag/console.c). */
typedef struct df_console_info {
    int64_t prompts[2], filtered[2]; /* data.train_files, data.val_files: prompts over the job, and those dropped */
    char resumed_from[2048];         /* the checkpoint directory this run continues from; "" on a fresh start */
    int64_t resumed_world;           /* the ranks that wrote it (0: a fresh start) */
    double t_fit;                    /* df_now() when the fit loop began */
    int64_t saved_step;              /* the last checkpoint this run wrote; 0: none */
    int64_t val_step;                /* the last validation of this run: its step, -1 when none */
    double val_score, val_acc;
} df_console_info;

struct df_dag_worker {
    const df_config *cfg;       /* the loaded config: provenance for messages, the planner's input */
    df_node_settings global;    /* the global typed config and its derived values */
    df_comm *comm; /* the world (borrowed) */
    int rank, world;
    df_plan *plan;
    df_comm *group;             /* the process group this rank's model nodes run in: comm or owned */
    int group_rank, group_size;
    df_node_layout *layouts;    /* [graph nodes], parallel to the graph's nodes */
    df_node_layout data_layout; /* the first node's: the dataloader shards by it */
    df_node_layout cur_layout;  /* layout of the batch the step holds now */
    df_node_role prev_role;     /* role of the node that ran last in this step */
    bool rebalance_next;        /* the ranks' row counts differ (PF-PPO): the next hand-off evens them */
    int metrics_group;          /* multi-agent: agent group of the node that ran last (-1: none yet) */
    int metrics_mark;           /* multi-agent: its first metric's position in w->metrics */
    df_data_buffers *buffers;   /* this rank's Data Coordinator buffers */
    char model_dir[1024], tokenizer_dir[1024], out_dir[1024];

    df_tokenizer *tok;
    df_dataset *train_ds, *val_ds;
    df_prompt_cache train_prompts, val_prompts;
    df_dataloader *dl;

    df_rollout_worker rollout;
    df_actor_worker actor;
    df_reference_worker reference;
    df_critic_worker critic;
    df_reward_worker reward;
    df_advantage_worker advantage;
    df_agent_slot *agents; /* [n_agents], one per agent group (df_worker_setup_agents); agents[0]: the above */
    int n_agents;

    df_task_graph *graph;
    df_node_settings **node_set; /* [n_node_set], parallel to graph nodes: a node's own settings or NULL */
    int n_node_set;
    int64_t step, total_steps;
    int64_t resumed_step; /* the checkpoint's global step this run continues from; 0: a fresh start */

    df_metrics *metrics; /* the current step's */
    df_run_log log;      /* rank 0: metrics.jsonl and trainer.logger's other sinks */
    bool console;        /* trainer.logger has "console": rank 0 prints the banner, steps and summary */
    df_console_info con; /* for the banner and the summary */
    struct df_embodied_setup *embodied; /* model_type=embodied: the environment and the action tokens
                                           (workers/embodied/); NULL otherwise */
    struct df_marft_run *marft; /* a chained multi-agent graph (workers/dag/marft_run.h); NULL otherwise */
    struct df_async *async; /* mode=async: this rank's side of the job (workers/dag/async.h); NULL: sync */
    const volatile sig_atomic_t *stop_flag; /* df_dag_worker_set_stop_flag; NULL: none */
    int stopped;                            /* the agreed stop flag's value when fit stopped early */
};

/** The rollout's responses per prompt (actor_rollout_ref.rollout.n). */
static inline int64_t df_worker_n_samples(const df_dag_worker *w)
{
    return w->global.cfg.actor_rollout_ref.rollout.n;
}
/** trainer.seed, the root of every seed the worker draws. */
static inline uint64_t df_worker_seed(const df_dag_worker *w)
{
    return (uint64_t)w->global.cfg.trainer.seed;
}

/**
 * Finish w->graph loaded from dag.workflow_path: nodes without an executable
 * get siiRL's default for their role (ROLLOUT -> generate, ACTOR ->
 * train_actor or, forward-only, compute_old_log_prob, ...), refs are resolved,
 * and every node's `config:` is merged over w->cfg (relative keys under the
 * role's branch, e.g. `rollout.temperature` on a ROLLOUT node means
 * actor_rollout_ref.rollout.temperature) and resolved into its own
 * df_node_settings (df_worker_settings_init). Keys a node's function does not
 * read per node are refused (DF_EUNSUPPORTED naming the file, node and the
 * keys it honours). Needs w->global resolved.
 */
int df_worker_setup_workflow(df_dag_worker *w);
/**
 * node_config.c: node n's `config:` merged over cfg (relative keys under the
 * role's branch; the planner's keys, df_worker_planner_node_keys, and the
 * function's own keys left out), every key checked against what ref's function
 * declared (df_exec_node_keys; ref NULL: none): DF_EUNSUPPORTED "<where>: <key>
 * cannot be changed per node (this node honours: ...)" for any other; a
 * per-node policy_loss.loss_mode checked against the registry. *out: the
 * merged config (caller frees), NULL when the node overrides no job key.
 * Errors start with `where` ("<file> node '<id>'").
 */
int df_worker_node_overrides(const df_config *cfg, const df_node *n, const char *ref, const char *where,
                             df_config **out);
/* train_check.c: siiRL's default function for a workflow node without executable_ref
 * (by role, type and forward-only), or NULL for a node that has none (it is skipped). */
const char *df_worker_default_exec(const df_node *n);
/* Node config keys the planner reads (siiRL's model_params; NULL-terminated): not config keys. */
extern const char *const df_worker_planner_node_keys[];
/* train_check.c: the plan for a job of `world` ranks: trainer.nnodes machines sharing them
 * (n_gpus_per_node = world / nnodes, a warning when it was set otherwise). */
int df_worker_plan(const df_config *c, int world, df_warn_fn warn, void *user, df_plan **out);
/* parallel.c: the config key of a role's model-parallel size and its value in t into *mp; NULL
 * (and *mp unchanged) for a role without a model. */
const char *df_worker_mp_key(df_node_role role, const df_train_config *t, int64_t *mp);
/**
 * The job's plugins, read from their files without running plugin code (load false:
 * df_train_check) or loaded (load true: the worker, after the check):
 * algorithm.adv_estimator and actor.policy_loss.loss_mode when they are plugin refs
 * ("path/to/libx.so:symbol", a descriptor object), registered under the ref (names that are not
 * refs are left to the registries); custom_reward_function.path / .name (verl's key): a shared
 * library exporting a df_reward_fn, stored in *score when loading, or a Python file (".py"),
 * read when checking and started when loading into *python (df_reward_python_open, batch mode
 * with reward_model.reward_manager=batch; the config's reward_kwargs its keyword arguments;
 * the caller closes it). score / python may be NULL when not loading; unchanged when no path is
 * set. c is resolved into t; c names keys in messages.
 * Errors: those of df_plugin_adv_estimator / df_plugin_policy_loss / df_plugin_check /
 * df_plugin_symbol / df_reward_python_open, naming the key; DF_EINVAL for reward_manager=batch
 * without a .py path.
 */
int df_worker_plugins(const df_config *c, const df_train_config *t, bool load, df_reward_fn *score,
                      df_reward_python **python);
/**
 * dag.env_enable / dag.environment_path (distflow/env.h): with env_enable, the environment the path
 * names is resolved — a config file, a built-in class or a plugin ref — and its config tried; a
 * plugin is read from its file (load false) or loaded (load true, df_plugin_env). *spec (may be
 * NULL) gets the spec, which the caller frees (df_env_spec_clear); unchanged without env_enable.
 * Errors name the key: env_enable without environment_path, environment_path without env_enable,
 * and df_env_spec_load's.
 */
struct df_env_spec;
int df_worker_env(const df_config *c, const df_train_config *t, bool load, struct df_env_spec *spec);
/**
 * actor_rollout_ref.rollout.multi_turn.* and dag.env_enable together: the multi-turn keys only with
 * multi_turn.enable, not both multi_turn.enable and dag.env_enable, the config files readable. With
 * `agent` (train): *agent is the loaded agent loop config (tools, interactions, environment through
 * their plugin loaders), NULL when neither is on. Errors name the key.
 */
int df_worker_multi_turn(const df_config *c, const df_train_config *t, df_agent_config **agent);
/** df_warn_fn for workflow warnings: stderr, rank 0 only (user = the worker). */
void df_worker_warn(void *user, const char *msg);
/** The node's settings, or &w->global when it has no overrides (or n is NULL). */
const df_node_settings *df_worker_node_settings(const df_dag_worker *w, const df_node *n);
void df_worker_free_node_configs(df_dag_worker *w);

/* ---- resolve.c: every value derived from the configuration, computed here once ---- */
/**
 * s from config c: the typed keys (df_train_config_resolve; strings borrowed
 * from c) and the loss settings derived from them. s->owned is left as it is;
 * s->sampling is filled later by df_worker_resolve. Errors: those of the resolver.
 */
int df_worker_settings_init(df_node_settings *s, const df_config *c);
/**
 * The optimizer block o (actor or critic) with its role's grad_clip: the
 * schedule's total steps are optim.total_training_steps when > 0, else
 * trainer_steps (the trainer's step count); warmup steps lr_warmup_steps when
 * > 0, else lr_warmup_steps_ratio x total; min_lr_ratio null means 0.
 */
void df_worker_optim(const struct df_train_optim *o, double grad_clip, int64_t trainer_steps, df_core_optim *out);
/**
 * The actor's PPO loss settings from t: actor.ppo_epochs, policy_loss.*, loss_agg_mode, clip
 * ratios, entropy_coeff, kl_loss_*, policy_drift_coeff (policy_loss "cpgd" when use_cpgd_loss or
 * adv_estimator=cpgd and loss_mode is vanilla), loss_agg_norm_length = loss_scale_factor else
 * data.max_response_length. Strings are borrowed from t.
 */
void df_worker_actor_loss(const df_train_config *t, df_actor_loss *l);
/** The critic's value-loss settings (critic.ppo_epochs, cliprange_value, loss_agg_mode) from t. */
void df_worker_critic_loss(const df_train_config *t, df_critic_loss *l);
/**
 * All the actor settings from w->global: optimizer (over w->total_steps),
 * batching in samples over the actor's DP size, the loss, the seed; the
 * temperature is the global rollout.temperature (df_worker_resolve replaces it
 * by the rollout nodes').
 */
void df_worker_actor_params(const df_dag_worker *w, df_actor_params *p);
/** The reference's parameters: the actor's, with the forward pass's limits from actor_rollout_ref.ref.log_prob_*. */
void df_worker_reference_params(const df_dag_worker *w, const df_actor_params *actor, df_actor_params *p);
/* Whether the reference is the actor with its LoRA adapters disabled (verl's ref_in_actor) rather
 * than a frozen copy of the base: the actor trains adapters and the reference's settings ask
 * nothing a copy alone would give (the actor's compute precision, its default storage for that
 * precision, no param_offload). */
bool df_worker_ref_in_actor(const df_actor_params *actor, const df_actor_params *ref);
/* The reference worker r holds one (a model, or the actor's base). */
bool df_worker_has_reference(const df_reference_worker *r);
/* The reference's log-probs of b into `col` (df_actor_compute_log_prob, or with in_actor
 * df_actor_compute_base_log_prob; entropy_mean as theirs); DF_EINVAL without a reference. */
int df_worker_ref_log_prob(const df_reference_worker *r, df_batch *b, const char *col, double *entropy_mean);
/* The actor's LoRA settings (actor_rollout_ref.model.lora_*, target_modules): df_role_lora_config. */
int df_worker_lora_config(const df_config *c, const df_train_config *t, df_lora_config *out);
/* The critic's (critic.model.lora_*, target_modules): df_role_lora_config. */
int df_worker_critic_lora_config(const df_config *c, const df_train_config *t, df_lora_config *out);
/** Critic settings (critic.*) from w->global, batching over the critic's DP size. */
void df_worker_critic_params(const df_dag_worker *w, df_critic_params *p);
/**
 * The temperature the actor and reference compute log-probs at: the one the
 * workflow's rollout nodes sample with (a node may override it), else the
 * global rollout.temperature. Rollout nodes at different temperatures are
 * refused (DF_EUNSUPPORTED naming both): the actor has one.
 */
int df_worker_actor_temperature(const df_dag_worker *w, float *t);
/**
 * The values that need the tokenizer, the data and the layouts, once at setup:
 * the sampling settings of w->global and of every node with its own settings,
 * w->rollout.val_sp, and *actor (may be NULL): df_worker_actor_params with
 * df_worker_actor_temperature. Errors: those of df_worker_actor_temperature.
 */
int df_worker_resolve(df_dag_worker *w, df_actor_params *actor);

/** Plan (every rank the same), take this rank's TaskGraph, make the process groups' communicators. */
int df_worker_setup_parallel(df_dag_worker *w);
/** Each node's layout and the actor's DP communicator (after the node configs exist). */
int df_worker_setup_layouts(df_dag_worker *w);
void df_worker_free_parallel(df_dag_worker *w);
/**
 * Index of `role`'s training node in w->graph (the last MODEL_TRAIN node of
 * the role that is not forward-only; with forward_ok also MODEL_INFERENCE
 * nodes, and, when the role has only forward-only ones, the first of them);
 * -1 when none.
 */
int df_worker_role_node(const df_dag_worker *w, df_node_role role, bool forward_ok);
/** Index of `node` among w->graph's nodes, -1 when not there. */
int df_worker_node_index(const df_dag_worker *w, const df_node *node);
const df_node_layout *df_worker_node_layout(const df_dag_worker *w, const df_node *node);

/**
 * df_run_opts.before_node for the worker (user = the worker): bring the batch
 * to `node`'s layout — a local hand-off when the layouts match, else a
 * redistribution through w->buffers (also forced before a DATA_REBALANCE node
 * and, with trainer.balance_batch, after the rollout). Collective over the
 * group when it redistributes.
 */
int df_worker_before_node(void *user, df_node *node, df_batch **batch);
/** df_run_opts.begin_pass for the worker (user = the worker): reset the hand-off state at the
 *  start of a pass over the graph (the batch has the dataloader's layout). */
void df_worker_begin_pass(void *user);

/**
 * This rank's next prompts from the dataloader, encoded, with a `uid` per
 * prompt: "s<step>-r<row>", or "s<step>-g<gen>-r<row>" for the gen-th extra
 * generation batch of a step (DAPO's dynamic sampling).
 */
int df_worker_next_prompts(df_dag_worker *w, int gen, df_batch **out);
/** Rollout: rollout.n responses per prompt of `prompts` with `node`'s sampling settings (seeded by
 *  step and gen) into *out. */
/** The weight sync (verl's hybrid engine resharding): the rollout engine's copy of the actor's
 *  weights (bf16: converted here), made once per actor optimizer step, before a generation. */
int df_worker_rollout_sync(df_dag_worker *w);
int df_worker_generate(df_dag_worker *w, const df_node *node, const df_batch *prompts, int64_t step, int gen,
                       df_batch **out);
/** w->reward.cfg from reward_model.reward_manager / overlong_buffer.*; DF_ENOTFOUND for an unknown manager. */
int df_worker_setup_reward(df_dag_worker *w);
/** reward_setup.c: with reward_model.enable, load the reward model (and its tokenizers) into w->reward. */
int df_worker_setup_reward_model(df_dag_worker *w);
void df_worker_free_reward(df_dag_worker *w);
/** Reward: scores, token_level_scores / _rewards, `acc`; critic/acc/mean into m (may be NULL); the
 *  responses decoded with the tokenizer of node's agent group (NULL: group 0's). With
 *  reward_model.enable (w->reward.rm) the reward model's rm_scores instead, and `score` without `acc`. */
int df_worker_reward(df_dag_worker *w, const df_node *node, df_batch *b, df_metrics *m);

/**
 * DAPO's group filter: the rows of `b` (columns uid and the metric's) whose
 * group has one sample or a metric with non-zero population std, in batch
 * order, into keep[] (capacity = rows) and *n_keep; kept groups into *groups.
 * metric: acc, score, seq_reward (sum of token_level_scores),
 * seq_final_reward (sum of token_level_rewards), or the name of a Python reward function's numeric
 * extra key (column DF_REWARD_EXTRA_PREFIX<metric>), as verl's dapo_ray_trainer. Errors: DF_EINVAL,
 * DF_ENOMEM.
 */
int df_dynamic_sampling_kept_rows(const df_batch *b, const char *metric, int64_t *keep, int64_t *n_keep,
                                  int64_t *groups);
/** mode=async: DAPO's next refill after a round that left `kept` of `target` groups, `taken`
 *  prompts taken in the step so far: the missing target - kept groups (0: none missing), or -1
 *  when taking them would pass max_gen x target prompts in the step (algorithm.filter_groups.
 *  max_num_gen_batches train batches, the synchronous run's bound in prompts; max_gen 0: none). */
int64_t df_dynamic_sampling_refill(int64_t target, int64_t kept, int64_t taken, int64_t max_gen);
/** Register DAPO's dynamic_sampling node function (DAGWorker.dynamic_sampling and siiRL's name). */
int df_worker_register_dynamic_sampling(void);
/** mode=async, trainer side (workers/dag/async_trainer.c): the next re-run of the rollout node
 *  takes `episodes` (>= 1) episodes from the rollout side, DAPO's refill of the groups still
 *  missing, instead of a batch. Every trainer rank sets the same value. */
void df_async_set_refill(df_dag_worker *w, int64_t episodes);
/** mode=async, trainer side: the groups of b (rows sharing a uid) with no row among keep[n_keep]
 *  (row indices of b) were taken but will not be trained on: each is reported to the rollout rank
 *  that made it as not accepted, so that its admission makes up for it (docs/async.md). A
 *  model-parallel replica reports nothing (its leader does). Errors: those of
 *  df_async_count_rejected, comm errors. */
int df_async_reject_groups(df_dag_worker *w, const df_batch *b, const int64_t *keep, int64_t n_keep);

/**
 * KL penalty in the reward (verl ray_trainer apply_kl_penalty): with beta =
 * df_kl_ctrl_value(ctrl) before the update, token_level_rewards (replaced) =
 * token_level_scores - beta * kl(old_log_probs, ref_log_prob) per response
 * token (df_kl_apply_in_reward, kl estimator `penalty`); then the controller
 * steps with current_kl = the mean over the group's samples of each sample's
 * token-mean KL and n_steps = the group's sample count (verl: batch_size),
 * recording actor/reward_kl_penalty and actor/reward_kl_penalty_coeff in m
 * (may be NULL). comm: the group the batch is split over (data parallel;
 * NULL = this batch alone), collective; replica: this rank holds a copy of
 * another rank's samples (model-parallel rank > 0) and is not counted. Every
 * rank gets the same current_kl bits. Errors: DF_EINVAL for a missing
 * token_level_scores / old_log_probs / ref_log_prob column or lengths that
 * differ, those of df_kl_apply_in_reward / df_kl_ctrl_step, comm errors; a
 * rank that fails still joins the collective, and the others then return
 * DF_EINTERNAL (another rank failed), so every rank returns an error.
 */
int df_kl_reward_apply(df_kl_ctrl *ctrl, const char *penalty, df_batch *b, df_comm *comm, bool replica,
                       df_metrics *m);
/** df_kl_reward_apply in the advantage node `node` when w->advantage.kl_ctrl is set (over w->group, node's layout). */
int df_worker_kl_in_reward(df_dag_worker *w, const df_node *node, df_batch *b, df_metrics *m);

/**
 * Whiten adv[n_tokens] in place with the statistics of the tokens of every
 * rank of `comm` (df_adv_whiten_sum / _ssd / _stats, two collectives: count
 * and sum, then the squared deviations about the global mean, each summed in
 * rank order so every rank gets the same bits); copy [n_tokens] (may be NULL)
 * receives the result too. NULL comm: this batch alone. rc: this rank's status
 * so far — every rank calls this, failed or not, with an empty shard or not;
 * a failed rank returns rc, the others DF_EINTERNAL ("other rank(s) ...
 * failed"), and none is left waiting. replica: this rank holds a copy of
 * another rank's samples (model-parallel rank > 0): its tokens are not counted
 * but it is whitened with the group's statistics. Errors: rc, those of
 * df_adv_whiten_*, comm errors, DF_ENOMEM.
 */
int df_worker_whiten_group(df_comm *comm, int rc, bool replica, int64_t n_tokens, float *adv, float *copy);
/** df_worker_whiten_group with the statistics over the tokens whose mask[n_tokens] is 1 (a
 *  multi-turn batch's response_mask; NULL: every token), every token whitened with them. */
int df_worker_whiten_group_masked(df_comm *comm, int rc, bool replica, int64_t n_tokens, const int32_t *mask,
                                  float *adv, float *copy);
/** True when the advantage node `node` whitens over its group: its layout has dp_size > 1 and
 *  algorithm.adv_estimator whitens (df_adv_estimator_whitens); the estimator then runs with
 *  defer_whiten. */
bool df_worker_defers_whiten(const df_dag_worker *w, const df_node *node);
/**
 * The advantage node's whitening over w->group (call when df_worker_defers_whiten):
 * df_worker_whiten_group on b's `advantages` (and `returns` for
 * reinforce_plus_plus_baseline), replicas by the node's layout. Collective: every
 * rank calls it with its status rc (b may be NULL when rc != 0). Returns rc, or
 * the group's error wrapped with the estimator's name.
 */
int df_worker_whiten_advantages(df_dag_worker *w, const df_node *node, int rc, df_batch *b);
/**
 * verl's rollout correction at advantage node `node` (decoupled mode, rollout_corr_node.c): with
 * rollout_is the batch gets column rollout_is_weights (df_rollout_correction), batch-normalised over
 * w->group with rollout_is_batch_normalize; with rollout_rs the rejected tokens leave column
 * response_mask (made when absent); metrics into m (may be NULL). Nothing unless
 * df_train_rollout_correction_decoupled. Collective
 * over w->group with batch normalisation: every rank calls it with its status rc. Returns the
 * merged status; errors those of the kernels, a batch without old_log_probs / rollout_log_probs,
 * DF_ENOMEM.
 */
int df_worker_rollout_correction(df_dag_worker *w, const df_node *node, int rc, df_batch *b, df_metrics *m);

/**
 * algorithm.use_pf_ppo after `node`'s advantages (pf_ppo.c): the data-parallel group's step batch
 * resampled with replacement to its own size (df_pf_ppo_weights / df_pf_ppo_draw over the whole
 * group's scores, the stream keyed by trainer.seed and the step, so the same on every rank and for
 * any number of ranks); *out this rank's drawn rows in draw order (their counts differ between
 * ranks: w->rebalance_next makes the next hand-off even them). Collective over w->group, failed
 * (rc != 0) or not. Errors: rc, those of the gather, DF_EINVAL (no token_level_scores), DF_ENOMEM.
 */
int df_worker_pf_ppo(df_dag_worker *w, const df_node *node, int rc, df_batch *batch, df_batch **out);
/**
 * For an estimator with DF_ADV_BATCH_COUNTS run by advantage node `node` over several
 * data-parallel ranks: the counts of `in` (this rank's shard; a replica's count nothing) summed
 * over w->group into *out, and *use true; else *use false and nothing is exchanged. Collective
 * when *use: every rank calls it with its status rc (in may be NULL when rc != 0). Returns the
 * merged status, as df_worker_group_sum.
 */
int df_worker_adv_batch_counts(df_dag_worker *w, const df_node *node, int rc, const df_adv_input *in,
                               df_adv_batch_counts *out, bool *use);

/**
 * ReMax: set F32 column reward_baselines of `out` (rows with `uid`) to the sum
 * of token_level_scores of the row of `greedy` (one response per prompt) with
 * the same uid. Errors: DF_EINVAL for missing columns, a uid of out without a
 * greedy row, a uid twice in greedy; DF_ENOMEM.
 */
int df_remax_set_baselines(df_batch *out, const df_batch *greedy);
/** <who>/weights_in_sync: the model's checksum agrees over w->group (collective); DF_EINTERNAL when not. */
int df_worker_check_in_sync(df_dag_worker *w, const df_model *model, const char *who, df_metrics *m);

/* ---- the PPO critic (critic_setup.c, nodes_critic.c) ---- */
/** The critic's layout and DP communicator when the graph has a CRITIC node (collective over w->group;
 *  parallel.c, as the actor's). */
int df_worker_setup_critic_comm(df_dag_worker *w);
/** Load critic.model.path (or group 0's critic nodes' own, df_worker_group_critic_path) as a value
 *  model and create w->critic.model when agent group 0 has a CRITIC node. */
int df_worker_setup_critic(df_dag_worker *w);
/**
 * The critics of agent groups 1..n-1 (after group 0's critic and the groups' actors): a group with
 * CRITIC nodes of its own gets a value model from its nodes' critic.model.path, else the global
 * one (df_worker_group_critic_path), with its own optimizer, group 0's critic settings, layout and
 * data-parallel group, created as group 0's is; a group whose critic nodes share another group's
 * (share_instance) has that group's already (df_worker_apply_shares). Errors name the group.
 */
int df_worker_setup_agent_critics(df_dag_worker *w);
/**
 * The critic model directory of agent group grp: its CRITIC nodes' own critic.model.path (per-node
 * config; df_train_check made them agree) or, when none sets one, the global critic.model.path.
 * Borrowed from the node's or the global settings.
 */
const char *df_worker_group_critic_path(const df_dag_worker *w, int grp);
void df_worker_free_critic(df_dag_worker *w);
/** Write the critic (when there is one) to `step_dir`/critic: an HF directory and its training state
 *  (train_state.safetensors, df_critic_save_state); rank 0 only (the ranks hold the same critic). */
int df_worker_save_critic(df_dag_worker *w, const char *step_dir);
/** Restore the critic (when there is one) from `step_dir`/critic/train_state.safetensors; every rank. */
int df_worker_load_critic(df_dag_worker *w, const char *step_dir);
/** critic/weights_in_sync: the critic's checksum agrees over w->group (collective); an error when not. */
int df_worker_check_critic_weights(df_dag_worker *w, df_metrics *m);
/**
 * agent_<g>_actor/weights_in_sync and agent_<g>_critic/weights_in_sync for every agent group g >= 1
 * holding its own actor / critic (a shared one is checked as its owner's), as
 * df_worker_check_in_sync (collective over w->group; DF_EINTERNAL when a model differs across
 * ranks). Nothing for a single-agent job. For fit.c beside group 0's checks.
 */
int df_worker_check_agent_weights(df_dag_worker *w, df_metrics *m);
/** Register DAGWorker.compute_value and DAGWorker.train_critic. */
int df_worker_register_critic_nodes(void);

/* ---- agent groups (agents.c) ---- */
/**
 * w->agents for the plan's agent groups (w->plan->n_agent_groups, 1 without a plan): slot 0 points
 * at the single-agent workers (w->rollout, w->actor, ...: call after they are set up or before,
 * the pointers stay valid). Errors: DF_ENOMEM.
 */
int df_worker_setup_agents(df_dag_worker *w);
/** Free what the slots beyond 0 own, and w->agents. */
void df_worker_free_agents(df_dag_worker *w);
/**
 * The slot node n runs on: that of its agent_group; slot 0 (w's own workers) for a NULL node, a
 * group beyond w->n_agents, or a worker without w->agents (one assembled by a test). Through
 * its pointers the caller may change the workers as through w's fields.
 */
df_agent_slot df_worker_slot(const df_dag_worker *w, const df_node *n);
/**
 * Multi-agent graphs (w->n_agents > 1): the metrics the node that ran last recorded get its group's
 * prefix "agent_<g>_" (siiRL's add_prefix_to_metrics), so two groups' actor/... do not overwrite
 * each other; `next` starts the next node's (NULL: the step's graph ended). Reset
 * w->metrics_group to -1 when a step starts. Nothing for one group. Errors: DF_ENOMEM.
 */
int df_worker_agent_metrics(df_dag_worker *w, const df_node *next);
/** The rollout engine's copy of slot s's actor weights, made once per actor optimizer step (see
 *  df_worker_rollout_sync, slot 0's). */
int df_worker_slot_sync(const df_agent_slot *s);

/** True when model node n of a rollout, actor or reference role sets actor_rollout_ref.model.path
 *  (or model.path) in its `config:`: its agent group's model directory. */
bool df_worker_node_sets_model_path(const df_node *n);
/** True when CRITIC model node n sets critic.model.path (or model.path) in its `config:`: its
 *  agent group's critic model directory. */
bool df_worker_node_sets_critic_path(const df_node *n);
/**
 * As df_worker_note_model_path for the critic: `path` (n's resolved critic.model.path) kept in
 * paths[n->agent_group] when n sets one (df_worker_node_sets_critic_path). Errors: DF_EINVAL
 * "<src>: nodes 'a' and 'b' of agent_group g set critic.model.path to X and Y ...", DF_ENOMEM.
 */
int df_worker_note_critic_path(char **paths, const df_node **from, int n_groups, const df_node *n, const char *path,
                               const char *src);
/**
 * agent_share.c: the agent_options.share_instance of graph g (groups agent groups) the worker runs,
 * beyond the plan's shape checks (df_task_graph_agent_groups): within a group, the model nodes of a
 * role all share the same group's instance or all own theirs; only groups >= 1 share (group 0's
 * models are the single-agent job's own); a group's ROLLOUT and ACTOR share together and with the
 * same group (the rollout engine samples from its group's actor's weights); a sharing node sets no
 * model path of its own (it takes the shared group's model). Errors: DF_EUNSUPPORTED
 * "<src> node '<id>': agent_group g: agent_options.share_instance ...: <why>", DF_ENOMEM.
 */
int df_worker_check_agent_shares(df_task_graph *g, int groups, const char *src);
/**
 * agent_share.c: after the slots are made (df_worker_setup_agent_dirs): slot g's worker of each
 * role whose nodes set agent_options.share_instance h becomes slot h's (the same pointer: one
 * model, one optimizer, trained by both groups' nodes), and with a shared actor the slot's model
 * directory is h's. df_worker_check_agent_shares vetted the graph.
 */
void df_worker_apply_shares(df_dag_worker *w);
/**
 * The model directory of n's agent group from a node that sets one (df_worker_node_sets_model_path;
 * others are skipped): `path` (the node's resolved actor_rollout_ref.model.path) kept in
 * paths[n->agent_group] (strdup'd, the caller frees; NULL: none yet), n in from[]. Errors:
 * DF_EINVAL "<src>: nodes 'a' and 'b' of agent_group g set actor_rollout_ref.model.path to X and
 * Y ..." when another node of the group set another; DF_ENOMEM.
 */
int df_worker_note_model_path(char **paths, const df_node **from, int n_groups, const df_node *n, const char *path,
                              const char *src);
/**
 * After df_worker_setup_workflow: group 0's model directory from its nodes' own
 * actor_rollout_ref.model.path (df_worker_note_model_path) into w->model_dir, and
 * w->tokenizer_dir with it unless data.tokenizer is set; a group whose nodes set none keeps the
 * global path. Errors: those of df_worker_note_model_path, a path too long (DF_EINVAL).
 */
int df_worker_setup_agent_dirs(df_dag_worker *w);
/**
 * The models of agent groups 1..n-1 (after group 0's, p its actor settings): each group's model
 * from its slot's directory as its actor (group 0's settings and data-parallel group), its
 * reference when a KL term needs one, on trainer.device, and its rollout engine, each only where
 * the group does not share another group's (share_instance, df_worker_apply_shares); every group reads
 * group 0's tokenizer (DF_EUNSUPPORTED when its directory holds another tokenizer.json and
 * data.tokenizer is unset). Errors name the group; those of loading and creating the models.
 */
int df_worker_setup_agent_models(df_dag_worker *w, const df_actor_params *p);
/**
 * agents_check.c: whether the worker runs multi-agent graph g (groups > 1 agent groups): the
 * chained layout (each group's rollout node after the previous group's: marft_run.h; an env_path
 * only on the last agent's rollout node; at most one advantage node per group) or independent
 * groups (every group its own rollout node, a later group's nodes after it and after every node
 * of the groups before; no chained-rollout options); in both share_instance as
 * df_worker_check_agent_shares allows, gae / gae_marft only with a CRITIC node in every group
 * (gae_marft only chained), no re-runs (remax, filter_groups), mode sync, no agent loop.
 * Errors: DF_EUNSUPPORTED "<src> node '<id>': agent_group g: multi-agent graphs (siiRL's MARFT, N
 * agent groups) do not run with <what>; what runs: ...", DF_EINVAL (rewards_with_env without an
 * environment, an env_path entry that does not resolve), DF_ENOMEM.
 */
int df_worker_check_agents_run(const df_train_config *t, df_task_graph *g, int groups, const char *src);
/** dag_worker.c: the chat template a checkpoint's model directories carry as chat_template.jinja:
 *  actor_rollout_ref.model.custom_chat_template's text when set (NULL: the tokenizer's own files). */
const char *df_worker_saved_chat_template(const df_dag_worker *w);
/** dag_worker.c: trainer.device's backend (opened at setup; for its peak FLOP/s and memory). */
df_backend df_worker_backend(const df_dag_worker *w);
/** dag_worker.c: trainer.device for slot s's actor and reference. */
int df_worker_set_device(df_dag_worker *w, const df_agent_slot *s);
/** dag_worker.c: slot s's rollout engine for a model of `cfg` (sized for the step's sequences),
 *  reading the actor's bf16 copy when both are bf16 (s->actor NULL: no actor, the async rollout side). */
int df_worker_create_rollout(df_dag_worker *w, const df_agent_slot *s, const df_model_config *cfg, bool actor_bf16);

/* ---- helpers of the node functions (nodes.c, nodes_critic.c) ---- */
/** The worker running the node function's graph. */
static inline df_dag_worker *df_node_worker(const df_node_ctx *ctx)
{
    return (df_dag_worker *)ctx->worker;
}
/** Record the node's wall time since t0 under verl's timing_s/<name> in ctx->metrics (when set). */
static inline void df_worker_timing(df_node_ctx *ctx, const char *name, double t0)
{
    char key[96];
    snprintf(key, sizeof key, "timing_s/%s", name);
    if (ctx->metrics)
        df_metrics_set(ctx->metrics, key, df_now() - t0);
}

/** Register the built-in node functions under their DAGWorker.* names (idempotent): each role
 *  worker's (workers/<role>/) with the config: keys they read per node. */
int df_worker_register_nodes(void);
/** workers/rollout/generate.c: DAGWorker.generate (and DAPO's dynamic_sampling). */
int df_worker_register_rollout_nodes(void);
/** workers/reward/reward_node.c: DAGWorker.compute_reward (and ReMax's compute_reward_baseline). */
int df_worker_register_reward_nodes(void);
/** workers/reward/reward_baseline.c: DAGWorker.compute_reward_baseline, ReMax's greedy baseline node. */
int df_worker_register_reward_baseline(void);
/** workers/advantage/advantage_node.c: DAGWorker.compute_advantage. */
int df_worker_register_advantage_nodes(void);
/** workers/actor/actor_nodes.c: DAGWorker.compute_old_log_prob and DAGWorker.train_actor. */
int df_worker_register_actor_nodes(void);
/** workers/reference/ref_node.c: DAGWorker.compute_ref_log_prob. */
int df_worker_register_reference_nodes(void);
/** DF_EINVAL "<node>: no input batch" when b is NULL (a node function's first check). */
static inline int df_worker_need_batch(const df_batch *b, const char *node)
{
    return b ? DF_OK : df_error(DF_EINVAL, "%s: no input batch", node);
}

#endif
