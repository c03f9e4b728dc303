/*
 * agent_loop.h (internal) — the ROLLOUT node's multi-turn agent loop: a df_turn_handler
 * (distflow/rollout.h) built from actor_rollout_ref.rollout.multi_turn.* (tools, interactions) or
 * from dag.env_enable (an environment), verl's tool agent loop over distflow/agent.h and
 * distflow/env.h. docs/agents.md ("Running multi-turn GRPO") and docs/environments.md describe it.
 *
 * Per sequence (prompt row x sample) it keeps the conversation as JSON messages: the row's prompt
 * messages, then each model turn as raw text. When a turn ends:
 *   environment: the turn steps the episode; its observation is the next user message, or the
 *                episode ended (done);
 *   tools:       hermes calls are parsed and run through the sequence's tool session (malformed
 *                calls and tool failures become tool messages), each response cut to
 *                max_tool_response_length tokens; the tool messages are appended;
 *   no call:     with an interaction (and fewer than max_user_turns replies so far) its reply is
 *                the next user message, or it ends the conversation; without one: done.
 * The appended messages become token ids through df_agent_render_delta, so the final sequence is
 * the chat template's rendering of the whole conversation.
 *
 * Rewards (what the REWARD node reads, df_reward_naive):
 *   agent_reward  float per sample = sum of the tool calls' step rewards + sum of the interaction's
 *                 turn rewards (verl's tool_rewards and turn_scores), kept for dumps and plugins:
 *                 as in verl it does not enter the score (the rule scorer's, of the response);
 *   env_return    float per sample = the episode's return (df_env_episode.ret), which replaces
 *                 the rule score (an environment row has no ground truth to check).
 * Columns for metrics: tool_calls (int64, agent_loop/tool_calls/{min,max,mean}), env_success (int64, 0/1).
 */
#ifndef DF_WORKER_ROLLOUT_AGENT_LOOP_H
#define DF_WORKER_ROLLOUT_AGENT_LOOP_H

#include "distflow/agent.h"
#include "distflow/batch.h"
#include "distflow/env.h"
#include "distflow/rollout.h"
#include "distflow/tokenizer.h"
#include "workers/rollout/rollout_batch.h"

/** What the loop runs with: loaded once per job (df_agent_config_load), read-only after. */
typedef struct df_agent_config {
    df_tool_set *tools;                /* multi_turn.tool_config_path, or NULL */
    df_interaction_set *interactions;  /* multi_turn.interaction_config_path, or NULL */
    char *tools_json;                  /* the set's schemas for the chat template, or NULL */
    df_env_spec env;                   /* dag.environment_path (env.env NULL: none) */
    int64_t max_assistant_turns;       /* <= 0: no limit */
    int64_t max_user_turns;            /* <= 0: no limit */
    int max_parallel_calls;            /* >= 1 */
    int64_t max_tool_response_length;  /* tokens, >= 1 */
    const char *truncate_side;         /* left | middle | right (borrowed, static) */
    int64_t max_prompt_length;         /* data.max_prompt_length: a longer first prompt is an error
                                          (the data's filter measures the same rendering; an
                                          environment's observation is only known here); <= 0: none */
} df_agent_config;

/**
 * Load the tool / interaction configs (plugins through `loader`, e.g. df_plugin_tool; may be NULL)
 * and take the environment spec (moved into cfg; may be NULL). Paths may be NULL. Errors: the
 * loaders' (they name the file and entry), DF_ENOMEM. On error *cfg is cleared.
 */
int df_agent_config_load(df_agent_config *cfg, const char *tool_config_path, const char *interaction_config_path,
                         df_tool_plugin_loader tool_loader, df_tool_plugin_loader interaction_loader,
                         df_env_spec *env);

/** Free what df_agent_config_load made (NULL ok). */
void df_agent_config_clear(df_agent_config *cfg);

typedef struct df_agent_loop df_agent_loop;

/**
 * Start one generation over `prompts` (columns raw_prompt: JSON messages, extra_info: JSON with
 * optional tools_kwargs / interaction_kwargs, index: the global prompt index) with n_samples
 * responses each. *gen_prompts is a copy of prompts whose prompt_ids are the template's rendering
 * of what the model sees first: the row's messages with the tool schemas (tools), or the episode's
 * first observation (environment, raw_prompt replaced too; a row's samples play one episode, id its
 * `index`, seeded from env_seed). Generate from *gen_prompts with df_agent_loop_handler(*out).
 * Errors: DF_EINVAL (a row without raw_prompt, bad JSON, a template error naming the row, a first
 * prompt longer than cfg->max_prompt_length), a session's start error, DF_ENOMEM.
 */
int df_agent_loop_begin(const df_agent_config *cfg, const df_tokenizer *tok, const df_batch *prompts,
                        int64_t n_samples, uint64_t env_seed, df_agent_loop **out, df_batch **gen_prompts);

/** The turn handler of the loop (valid while it lives). */
const df_turn_handler *df_agent_loop_handler(df_agent_loop *l);

/**
 * After generation: set agent_reward, tool_calls (and with an environment env_return, env_success)
 * on `gen`, the generated batch (n_prompts x n_samples rows, prompt-major). Episodes the engine
 * stopped (length, turn limit) end as truncated. Errors: DF_EINVAL (a batch of another size),
 * DF_ENOMEM.
 */
int df_agent_loop_finish(df_agent_loop *l, df_batch *gen);

/** Release every session / episode and free the loop (NULL ok). */
void df_agent_loop_free(df_agent_loop *l);

/**
 * df_generate_batch_turns through an agent loop (cfg NULL: single-turn df_generate_batch):
 * begin, generate from the re-rendered prompts with the loop's handler, finish. *out as
 * df_generate_batch_turns's plus the loop's columns. Errors: the parts'.
 */
int df_agent_generate(const df_agent_config *cfg, const df_tokenizer *tok, df_rollout_engine *e, const df_model *m,
                      const df_batch *prompts, int64_t n, const df_sampling_params *sp, uint64_t seed,
                      uint64_t env_seed, const char *label, df_batch **out);

#endif
