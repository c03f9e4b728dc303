/* A planner and a solver in siiRL's chained MARFT layout on the tiny test models, for the tests of
 * the multi-agent runtime (test_marft_run, test_marft_ranks). Include after testutil.h. */
#ifndef DF_TEST_MARFT_FIXTURE_H
#define DF_TEST_MARFT_FIXTURE_H

#include "util/fsutil.h"

#include <stdio.h>
#include <string.h>

#define PRE0 "Plan this: ${prompt}"
#define POST0 " PLAN: "
#define PRE1 "Solve this: ${prompt}"
#define POST1 " ANSWER: "

/* siiRL's value nodes: agent 0's critic, shared by agent 1 (share_instance: 0) */
#define CRITICS                                                                                              \
    "  - {node_id: value_0, node_type: MODEL_TRAIN, node_role: CRITIC, only_forward_compute: true, agent_group: 0,\n" \
    "     dependencies: [old_1]}\n"                                                                           \
    "  - {node_id: value_1, node_type: MODEL_TRAIN, node_role: CRITIC, only_forward_compute: true, agent_group: 1,\n" \
    "     dependencies: [value_0], agent_options: {share_instance: 0}}\n"

/* A planner (group 0, the job's model) and a solver (group 1, dir/b/model): the chained layout of
   siiRL's MARFT file, per-agent GRPO; `train_opts` the actors' agent_options (or ""), `env` the
   solver's environment entries (or ""), with `critics` siiRL's value nodes, into dir/wf.yaml. */
static inline void write_chain_ex(const char *dir, const char *train_opts, const char *env, bool critics)
{
    char text[8192], path[1024];
    snprintf(text, sizeof text,
             "dag_id: planner_solver\nnodes:\n"
             "  - {node_id: rollout_planner, node_type: MODEL_INFERENCE, node_role: ROLLOUT, agent_group: 0,\n"
             "     dependencies: [], agent_options: {pre_process_kwargs: {pre_chat_template: \"" PRE0 "\"},\n"
             "     post_process_kwargs: {post_chat_template: \"" POST0 "\"}}}\n"
             "  - {node_id: rollout_solver, node_type: MODEL_INFERENCE, node_role: ROLLOUT, agent_group: 1,\n"
             "     config: {model.path: %s/b/model}, dependencies: [rollout_planner],\n"
             "     agent_options: {pre_process_kwargs: {pre_chat_template: \"" PRE1 "\"},\n"
             "     post_process_kwargs: {post_chat_template: \"" POST1 "\"}%s}}\n"
             "  - {node_id: reward, node_type: COMPUTE, node_role: REWARD, agent_group: 1, dependencies: [rollout_solver]}\n"
             "  - {node_id: old_0, node_type: MODEL_TRAIN, node_role: ACTOR, only_forward_compute: true, agent_group: 0,\n"
             "     dependencies: [reward]}\n"
             "  - {node_id: old_1, node_type: MODEL_TRAIN, node_role: ACTOR, only_forward_compute: true, agent_group: 1,\n"
             "     dependencies: [old_0]}\n"
             "%s"
             "  - {node_id: adv, node_type: COMPUTE, node_role: ADVANTAGE, agent_group: 1, dependencies: [%s]}\n"
             "  - {node_id: train_0, node_type: MODEL_TRAIN, node_role: ACTOR, agent_group: 0, dependencies: [adv]%s}\n"
             "  - {node_id: train_1, node_type: MODEL_TRAIN, node_role: ACTOR, agent_group: 1, dependencies: [train_0]%s}\n",
             dir, env, critics ? CRITICS : "", critics ? "value_1" : "old_1", train_opts, train_opts);
    snprintf(path, sizeof path, "%s/wf.yaml", dir);
    assert_int_equal(df_write_file_atomic(path, text, strlen(text)), 0);
}

static inline void write_chain(const char *dir, const char *train_opts, const char *env)
{
    write_chain_ex(dir, train_opts, env, false);
}

static inline void job_yaml(const char *dir, char *yaml, size_t cap)
{
    snprintf(yaml, cap,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 4,\n"
             "       max_prompt_length: 200, max_response_length: 6}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {optim: {lr: 0.01}, ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 2}\n"
             "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 16}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "dag: {workflow_path: %s/wf.yaml}\n"
             "trainer: {logger: [], default_local_dir: %s/out}\n",
             dir, dir, dir, dir);
}

#endif
