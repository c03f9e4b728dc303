/* Agent groups in the DAG worker (docs/multi_agent.md, "Design: agent groups in the DAG worker"):
 * a node reaches its agent group's slot of role workers (df_worker_slot, the public node
 * context), and a group's model directory comes from its nodes' own actor_rollout_ref.model.path
 * (checked for agreement by df_train_check, loaded by the worker). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include "distflow/node.h"
#include "distflow/reward.h"
#include "distflow/worker.h"
#include "engine/hf_dir.h"
#include "util/fsutil.h"
#include "workers/worker_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- routing: a node of group g runs on slot g ---- */

static void test_slot_routing(void **state)
{
    (void)state;
    df_dag_worker w = {0};
    df_actor_worker a1 = {.model = (df_actor *)&a1}; /* a stand-in, never dereferenced */
    df_tokenizer *tok1 = (df_tokenizer *)&tok1;
    df_agent_slot slots[2] = {{.group = 0}, {.group = 1, .actor = &a1, .tok = tok1}};
    df_node n0 = {.node_id = "g0", .agent_group = 0}, n1 = {.node_id = "g1", .agent_group = 1},
            n7 = {.node_id = "g7", .agent_group = 7};

    /* without w->agents (a worker a test assembles) every node runs on w's own workers */
    assert_ptr_equal(df_worker_slot(&w, &n1).actor, &w.actor);
    w.agents = slots;
    w.n_agents = 2;
    df_agent_slot s = df_worker_slot(&w, &n1);
    assert_int_equal(s.group, 1);
    assert_ptr_equal(s.actor, &a1);
    assert_ptr_equal(s.tok, tok1);
    /* slot 0 is w's own fields, read at each call; NULL and unknown groups go there too */
    const df_node *zero[] = {&n0, NULL, &n7};
    for (int i = 0; i < 3; i++) {
        s = df_worker_slot(&w, zero[i]);
        assert_int_equal(s.group, 0);
        assert_ptr_equal(s.actor, &w.actor);
        assert_ptr_equal(s.rollout, &w.rollout);
        assert_ptr_equal(s.reference, &w.reference);
        assert_ptr_equal(s.critic, &w.critic);
        assert_ptr_equal(s.model_dir, w.model_dir);
    }
    /* the public node context answers for the node's group */
    df_node_ctx c0 = {.worker = &w, .node = &n0}, c1 = {.worker = &w, .node = &n1};
    assert_false(df_node_has_model(&c0, DF_ROLE_ACTOR));
    assert_true(df_node_has_model(&c1, DF_ROLE_ACTOR));
    assert_true(df_node_has_model(&c1, DF_ROLE_ROLLOUT));
    assert_ptr_equal(df_node_tokenizer(&c1), tok1);
    assert_null(df_node_tokenizer(&c0));
}

/* ---- per-node actor_rollout_ref.model.path ---- */

/* A GRPO workflow whose rollout node sets `rollout_path` and actor nodes `actor_path` (NULL: no
   config) as their model directory, into dir/wf.yaml. */
static void write_workflow(const char *dir, const char *rollout_path, const char *actor_path)
{
    char rp[1200] = "", ap[1200] = "", text[8192], path[1024];
    if (rollout_path)
        snprintf(rp, sizeof rp, "    config: {model.path: %s}\n", rollout_path);
    if (actor_path)
        snprintf(ap, sizeof ap, "    config: {actor_rollout_ref.model.path: %s}\n", actor_path);
    snprintf(text, sizeof text,
             "dag_id: grpo_paths\n"
             "nodes:\n"
             "  - node_id: rollout_actor\n    node_type: MODEL_INFERENCE\n    node_role: ROLLOUT\n%s"
             "    dependencies: []\n"
             "  - node_id: function_reward\n    node_type: COMPUTE\n    node_role: REWARD\n"
             "    dependencies: [rollout_actor]\n"
             "  - node_id: calculate_advantages\n    node_type: COMPUTE\n    node_role: ADVANTAGE\n"
             "    dependencies: [function_reward]\n"
             "  - node_id: actor_old_log_prob\n    node_type: MODEL_TRAIN\n    node_role: ACTOR\n"
             "    only_forward_compute: true\n%s    dependencies: [calculate_advantages]\n"
             "  - node_id: actor_train\n    node_type: MODEL_TRAIN\n    node_role: ACTOR\n%s"
             "    dependencies: [actor_old_log_prob]\n",
             rp, ap, ap);
    snprintf(path, sizeof path, "%s/wf.yaml", dir);
    assert_int_equal(df_write_file_atomic(path, text, strlen(text)), 0);
}

/* The two-group job's config text into yaml[cap] (its steps and checkpoints set by overrides). */
static void job_yaml(const char *dir, char *yaml, size_t cap)
{
    snprintf(yaml, cap,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 4,\n"
             "       max_prompt_length: 128, max_response_length: 8}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {optim: {lr: 0.01}, ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 8}\n"
             "  rollout: {n: 4, log_prob_micro_batch_size_per_gpu: 16}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "dag: {workflow_path: %s/wf.yaml}\n"
             "trainer: {logger: [], default_local_dir: %s/out}\n",
             dir, dir, dir, dir);
}

static df_config *job(const char *dir)
{
    char yaml[4096];
    job_yaml(dir, yaml, sizeof yaml);
    const char *ov[] = {"trainer.total_training_steps=1"};
    return df_test_config(yaml, "slots.yaml", ov, 1);
}

static void test_node_model_path_conflict(void **state)
{
    const char *dir = *state;
    df_test_two_models(dir);
    char b[1024], c[1024];
    snprintf(b, sizeof b, "%s/b/model", dir);
    snprintf(c, sizeof c, "%s/model", dir);
    write_workflow(dir, b, c); /* the rollout on b, the actor on the job's model */
    df_config *cfg = job(dir);
    df_plan *p = NULL;
    int rc = df_train_check(cfg, 1, NULL, NULL, &p);
    assert_error_mentions(rc, DF_EINVAL, "nodes 'rollout_actor' and 'actor_old_log_prob' of agent_group 0");
    assert_last_error_mentions("share one model");
    assert_null(p);
    df_config_free(cfg);

    write_workflow(dir, b, b); /* agreeing nodes pass */
    cfg = job(dir);
    if (df_train_check(cfg, 1, NULL, NULL, &p))
        fail_msg("%s", df_last_error());
    df_plan_free(p);
    df_config_free(cfg);
}

static void test_node_model_path_loads(void **state)
{
    const char *dir = *state;
    df_test_two_models(dir);
    char b[1024];
    snprintf(b, sizeof b, "%s/b/model", dir);
    write_workflow(dir, b, NULL); /* only the rollout node names it: the whole group follows */
    df_config *cfg = job(dir);
    df_dag_worker *w = NULL;
    if (df_dag_worker_create(cfg, NULL, &w))
        fail_msg("%s", df_last_error());
    assert_string_equal(w->model_dir, b);
    assert_string_equal(w->tokenizer_dir, b);
    df_model *mb = NULL, *ma = NULL;
    df_tokenizer *tb = NULL, *ta = NULL;
    char a[1024];
    snprintf(a, sizeof a, "%s/model", dir);
    assert_int_equal(df_hf_dir_load(b, b, NULL, &mb, &tb), 0);
    assert_int_equal(df_hf_dir_load(a, a, NULL, &ma, &ta), 0);
    const df_model *actor = df_actor_model(w->actor.model);
    assert_true(df_test_max_param_diff(actor, mb) == 0.0);
    assert_true(df_test_max_param_diff(actor, ma) > 0.0); /* the two models differ */
    df_model_free(ma);
    df_model_free(mb);
    df_tokenizer_free(ta);
    df_tokenizer_free(tb);
    df_dag_worker_free(w);
    df_config_free(cfg);
}


/* ---- two agent groups, each its own GRPO chain ---- */

/* A node of `grp` (suffix _<grp>) into text. */
static void chain(char *text, size_t cap, int grp, const char *model, const char *after)
{
    char cfg[1200] = "", dep[200] = "[]";
    if (model)
        snprintf(cfg, sizeof cfg, ", config: {model.path: %s}", model);
    if (after)
        snprintf(dep, sizeof dep, "[%s]", after);
    size_t n = strlen(text);
    snprintf(text + n, cap - n,
             "  - {node_id: rollout_%d, node_type: MODEL_INFERENCE, node_role: ROLLOUT, agent_group: %d,\n"
             "     dependencies: %s%s}\n"
             "  - {node_id: reward_%d, node_type: COMPUTE, node_role: REWARD, agent_group: %d,\n"
             "     dependencies: [rollout_%d]}\n"
             "  - {node_id: adv_%d, node_type: COMPUTE, node_role: ADVANTAGE, agent_group: %d,\n"
             "     dependencies: [reward_%d]}\n"
             "  - {node_id: old_%d, node_type: MODEL_TRAIN, node_role: ACTOR, only_forward_compute: true,\n"
             "     agent_group: %d, dependencies: [adv_%d]}\n"
             "  - {node_id: train_%d, node_type: MODEL_TRAIN, node_role: ACTOR, agent_group: %d,\n"
             "     dependencies: [old_%d]}\n",
             grp, grp, dep, cfg, grp, grp, grp, grp, grp, grp, grp, grp, grp, grp, grp, grp);
}

/* Group 0 on the job's model, group 1 on dir/b/model after it, into dir/wf.yaml. */
static void write_two_groups(const char *dir)
{
    char text[8192] = "dag_id: two_agents\nnodes:\n", b[1024], path[1024];
    snprintf(b, sizeof b, "%s/b/model", dir);
    chain(text, sizeof text, 0, NULL, NULL);
    chain(text, sizeof text, 1, b, "train_0");
    snprintf(path, sizeof path, "%s/wf.yaml", dir);
    assert_int_equal(df_write_file_atomic(path, text, strlen(text)), 0);
}

/* Run the nodes of agent group grp in graph order on *b (the step's prompts in ctx->input). */
static void run_group(df_dag_worker *w, int grp, const df_batch *prompts, df_batch **b)
{
    df_run_opts opts = {.release_batch = df_batch_free};
    df_node_ctx ctx = {.worker = w, .step = 1, .metrics = w->metrics, .input = prompts};
    for (int i = 0; i < df_task_graph_num_nodes(w->graph); i++) {
        df_node *n = df_task_graph_node_at(w->graph, i);
        if (n->agent_group == grp && df_node_run(n, &ctx, b, &opts))
            fail_msg("%s", df_last_error());
    }
}

/* The isolation test: updating agent 0 leaves agent 1's weights bit-identical, and the
   other way round. */
static void test_agent_isolation(void **state)
{
    const char *dir = *state;
    df_test_two_models(dir);
    write_two_groups(dir);
    df_config *cfg = job(dir);
    df_dag_worker *w = NULL;
    if (df_dag_worker_create(cfg, NULL, &w))
        fail_msg("%s", df_last_error());
    assert_int_equal(w->n_agents, 2);
    df_actor *a0 = w->actor.model, *a1 = w->agents[1].actor->model;
    assert_ptr_not_equal(a0, a1);
    df_model *init0 = df_test_model_copy(df_actor_model(a0)), *init1 = df_test_model_copy(df_actor_model(a1));
    assert_true(df_test_max_param_diff(init0, init1) > 0); /* two models */

    df_batch *prompts = NULL, *b = NULL;
    assert_int_equal(df_worker_next_prompts(w, 0, &prompts), 0);
    assert_int_equal(df_batch_copy(prompts, &b), 0);
    run_group(w, 0, prompts, &b);
    assert_true(df_test_max_param_diff(df_actor_model(a0), init0) > 0); /* agent 0 trained */
    assert_true(df_test_same_params(df_actor_model(a1), init1));                 /* agent 1 untouched */
    df_model *after0 = df_test_model_copy(df_actor_model(a0));
    run_group(w, 1, prompts, &b);
    assert_true(df_test_max_param_diff(df_actor_model(a1), init1) > 0);
    assert_true(df_test_same_params(df_actor_model(a0), after0));
    assert_int_equal(df_batch_size(b), df_batch_size(prompts) * 4); /* group 1 sampled the prompts */

    df_batch_free(b);
    df_batch_free(prompts);
    df_model_free(init0);
    df_model_free(init1);
    df_model_free(after0);
    df_dag_worker_free(w);
    df_config_free(cfg);
}

/* Two steps with a checkpoint each: global_step_<N>/actor_agent_1/ holds group 1's actor; a resumed
   run restores it. */
static void test_agent_checkpoints(void **state)
{
    const char *dir = *state;
    df_test_two_models(dir);
    write_two_groups(dir);
    const char *ov[] = {"trainer.total_training_steps=2", "trainer.save_freq=1"};
    char yaml[4096];
    job_yaml(dir, yaml, sizeof yaml);
    if (df_test_run(NULL, df_test_config(yaml, "two.yaml", ov, 2)))
        fail_msg("%s", df_last_error());
    /* each group's node metrics under its prefix (siiRL's add_prefix_to_metrics), none overwritten; the
       step's own (timing_s/step, the batch's data metrics: the last group's batch) without */
    json_t *lines = df_test_metrics(dir, "out", true), *step1 = json_array_get(lines, 0);
    const char *keys[] = {"agent_0_actor/pg_loss", "agent_1_actor/pg_loss", "agent_0_timing_s/gen",
                          "agent_1_timing_s/gen"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
        if (!json_is_number(json_object_get(step1, keys[k])))
            fail_msg("step 1 lacks %s", keys[k]);
    assert_null(json_object_get(step1, "actor/pg_loss"));
    assert_true(json_is_number(json_object_get(step1, "timing_s/step"))); /* the step's own: no prefix */
    json_decref(lines);
    char p[1200], *text = NULL;
    snprintf(p, sizeof p, "%s/out/global_step_2/trainer_state.json", dir);
    assert_int_equal(df_read_file(p, &text, NULL), 0);
    if (!strstr(text, "actor_agent_1/train_state.safetensors"))
        fail_msg("%s lacks agent group 1: %s", p, text);
    free(text);
    df_model *saved1 = NULL, *saved0 = NULL;
    snprintf(p, sizeof p, "%s/out/global_step_2/actor_agent_1", dir);
    assert_int_equal(df_hf_dir_load(p, NULL, NULL, &saved1, NULL), 0);
    snprintf(p, sizeof p, "%s/out/global_step_2/actor", dir);
    assert_int_equal(df_hf_dir_load(p, NULL, NULL, &saved0, NULL), 0);
    assert_true(df_test_max_param_diff(saved0, saved1) > 0);

    /* resumed: each group's actor as saved, its optimizer two steps on */
    const char *ov3[] = {"trainer.total_training_steps=3", "trainer.save_freq=1"};
    df_config *cfg = df_test_config(yaml, "two.yaml", ov3, 2);
    df_dag_worker *w = NULL;
    if (df_dag_worker_create(cfg, NULL, &w))
        fail_msg("%s", df_last_error());
    assert_int_equal(w->resumed_step, 2);
    assert_true(df_test_same_params(df_actor_model(w->agents[1].actor->model), saved1));
    assert_true(df_test_same_params(df_actor_model(w->actor.model), saved0));
    assert_int_equal(df_actor_step_count(w->agents[1].actor->model), df_actor_step_count(w->actor.model));
    assert_true(df_actor_step_count(w->agents[1].actor->model) > 0);
    df_dag_worker_free(w);
    df_config_free(cfg);
    df_model_free(saved0);
    df_model_free(saved1);
}

/* What the runtime does not do yet is refused before anything loads, naming the node. */
static void test_agents_refused(void **state)
{
    const char *dir = *state;
    df_test_two_models(dir);
    char text[8192] = "dag_id: parallel_agents\nnodes:\n", path[1024];
    chain(text, sizeof text, 0, NULL, NULL);
    chain(text, sizeof text, 1, NULL, NULL); /* group 1 beside group 0, not after it */
    snprintf(path, sizeof path, "%s/wf.yaml", dir);
    assert_int_equal(df_write_file_atomic(path, text, strlen(text)), 0);
    df_config *cfg = job(dir);
    df_plan *p = NULL;
    assert_error_mentions(df_train_check(cfg, 1, NULL, NULL, &p), DF_EUNSUPPORTED,
                          "node 'rollout_0': agent_group 0: multi-agent graphs (siiRL's MARFT, 2 agent groups) do "
                          "not run with a node that does not come before the next group's rollout node");
    df_config_free(cfg);

    /* an estimator reading a critic's values */
    write_two_groups(dir);
    const char *gae[] = {"algorithm.adv_estimator=gae"};
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], train_batch_size: 4}\n"
             "actor_rollout_ref: {model: {path: %s/model}, actor: {ppo_mini_batch_size: 4,\n"
             "                    ppo_micro_batch_size_per_gpu: 4}, rollout: {n: 2}}\n"
             "dag: {workflow_path: %s/wf.yaml}\n", dir, dir, dir);
    cfg = df_test_config(yaml, "gae.yaml", gae, 1);
    assert_error_mentions(df_train_check(cfg, 1, NULL, NULL, &p), DF_EUNSUPPORTED,
                          "node 'rollout_1': agent_group 1: multi-agent graphs (siiRL's MARFT, 2 agent groups) do "
                          "not run with algorithm.adv_estimator reading a critic's values");
    df_config_free(cfg);
}

/* Until each agent renders its own prompts, the groups read group 0's tokenizer: a group whose model
   has another is refused at setup. */
static void test_agent_other_tokenizer(void **state)
{
    const char *dir = *state;
    df_test_two_models(dir);
    const char *texts[] = {"a different corpus", "for a different tokenizer", "of another vocabulary"};
    char b[1024];
    snprintf(b, sizeof b, "%s/b", dir);
    df_test_tiny_model(b, texts, 3, 280, 32, 2, 13); /* replaces dir/b/model */
    write_two_groups(dir);
    df_config *cfg = job(dir);
    df_dag_worker *w = NULL;
    assert_error_mentions(df_dag_worker_create(cfg, NULL, &w), DF_EUNSUPPORTED,
                          "agent group 1: its model");
    assert_last_error_mentions("has another tokenizer than agent group 0's");
    assert_null(w);
    df_config_free(cfg);
}

/* ---- a critic per agent group, share_instance ---- */

/* A PPO chain of group grp (siiRL's ppo order) into text: `pol` inside its rollout and actor nodes'
   braces, `crit` inside its critic nodes' (e.g. ", agent_options: {share_instance: 0}"). */
static void ppo_chain(char *text, size_t cap, int grp, const char *pol, const char *crit, const char *after)
{
    char dep[200] = "[]";
    if (after)
        snprintf(dep, sizeof dep, "[%s]", after);
    size_t n = strlen(text);
    snprintf(text + n, cap - n,
             "  - {node_id: rollout_%d, node_type: MODEL_INFERENCE, node_role: ROLLOUT, agent_group: %d,\n"
             "     dependencies: %s%s}\n"
             "  - {node_id: reward_%d, node_type: COMPUTE, node_role: REWARD, agent_group: %d,\n"
             "     dependencies: [rollout_%d]}\n"
             "  - {node_id: value_%d, node_type: MODEL_TRAIN, node_role: CRITIC, only_forward_compute: true,\n"
             "     agent_group: %d, dependencies: [reward_%d]%s}\n"
             "  - {node_id: adv_%d, node_type: COMPUTE, node_role: ADVANTAGE, agent_group: %d,\n"
             "     dependencies: [value_%d]}\n"
             "  - {node_id: old_%d, node_type: MODEL_TRAIN, node_role: ACTOR, only_forward_compute: true,\n"
             "     agent_group: %d, dependencies: [adv_%d]%s}\n"
             "  - {node_id: train_%d, node_type: MODEL_TRAIN, node_role: ACTOR, agent_group: %d,\n"
             "     dependencies: [old_%d]%s}\n"
             "  - {node_id: critic_train_%d, node_type: MODEL_TRAIN, node_role: CRITIC, agent_group: %d,\n"
             "     dependencies: [train_%d]%s}\n",
             grp, grp, dep, pol, grp, grp, grp, grp, grp, grp, crit, grp, grp, grp, grp, grp, grp, pol, grp, grp,
             grp, pol, grp, grp, grp, crit);
}

/* Two PPO groups into dir/wf.yaml, group 1's nodes with pol / crit (see ppo_chain). */
static void write_ppo_groups(const char *dir, const char *pol, const char *crit)
{
    char text[8192] = "dag_id: two_ppo_agents\nnodes:\n", path[1024];
    ppo_chain(text, sizeof text, 0, "", "", NULL);
    ppo_chain(text, sizeof text, 1, pol, crit, "critic_train_0");
    snprintf(path, sizeof path, "%s/wf.yaml", dir);
    assert_int_equal(df_write_file_atomic(path, text, strlen(text)), 0);
}

/* The two-group PPO job (gae, a critic of the job's model), with `n` overrides. */
static df_config *ppo_job(const char *dir, const char **ov, int n)
{
    char yaml[4096], more[1200];
    job_yaml(dir, yaml, sizeof yaml);
    snprintf(more, sizeof more,
             "critic: {model: {path: %s/model}, optim: {lr: 0.01}, ppo_mini_batch_size: 4,\n"
             "         ppo_micro_batch_size_per_gpu: 8}\n", dir);
    strncat(yaml, more, sizeof yaml - strlen(yaml) - 1);
    const char *all[8] = {"algorithm.adv_estimator=gae"};
    for (int i = 0; i < n && i < 7; i++)
        all[i + 1] = ov[i];
    return df_test_config(yaml, "ppo.yaml", all, n + 1);
}

static df_model *critic_copy(df_critic *c)
{
    df_model *m = NULL;
    assert_int_equal(df_model_clone(df_critic_model(c), &m), 0);
    return m;
}

/* Group 1 with a critic of its own (its nodes' critic.model.path): two critic models, each updated
   by its own group's node only. */
static void test_agent_critics(void **state)
{
    const char *dir = *state;
    df_test_two_models(dir);
    char crit[1200], b[1024];
    snprintf(b, sizeof b, "%s/b/model", dir);
    snprintf(crit, sizeof crit, ", config: {critic.model.path: %s}", b);
    write_ppo_groups(dir, "", crit);
    const char *ov[] = {"trainer.total_training_steps=1"};
    df_config *cfg = ppo_job(dir, ov, 1);
    df_dag_worker *w = NULL;
    if (df_dag_worker_create(cfg, NULL, &w))
        fail_msg("%s", df_last_error());
    df_critic *c0 = w->critic.model, *c1 = w->agents[1].critic->model;
    assert_non_null(c0);
    assert_non_null(c1);
    assert_ptr_equal(w->agents[1].critic, &w->agents[1].own->critic);
    assert_ptr_not_equal(c0, c1);
    /* group 1's critic is b's model with the head the job's seed draws */
    df_model *vb = NULL;
    assert_int_equal(df_hf_dir_load(b, NULL, NULL, &vb, NULL), 0);
    assert_int_equal(df_model_to_value_model(&vb, df_worker_seed(w)), 0);
    assert_true(df_test_same_params(df_critic_model(c1), vb));
    df_model *init0 = critic_copy(c0), *init1 = critic_copy(c1);
    assert_true(df_test_max_param_diff(init0, init1) > 0);

    df_batch *prompts = NULL, *bt = NULL;
    assert_int_equal(df_worker_next_prompts(w, 0, &prompts), 0);
    assert_int_equal(df_batch_copy(prompts, &bt), 0);
    run_group(w, 0, prompts, &bt);
    assert_true(df_test_max_param_diff(df_critic_model(c0), init0) > 0); /* group 0's critic trained */
    assert_true(df_test_same_params(df_critic_model(c1), init1));                 /* group 1's untouched */
    df_model *after0 = critic_copy(c0);
    run_group(w, 1, prompts, &bt);
    assert_true(df_test_max_param_diff(df_critic_model(c1), init1) > 0);
    assert_true(df_test_same_params(df_critic_model(c0), after0));
    /* the later group's own models' weights-in-sync check (for fit.c) */
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_worker_check_agent_weights(w, m), 0);
    assert_true(df_metrics_get(m, "agent_1_actor/weights_in_sync", 0) == 1);
    assert_true(df_metrics_get(m, "agent_1_critic/weights_in_sync", 0) == 1);
    df_metrics_free(m);

    df_batch_free(bt);
    df_batch_free(prompts);
    df_model_free(vb);
    df_model_free(init0);
    df_model_free(init1);
    df_model_free(after0);
    df_dag_worker_free(w);
    df_config_free(cfg);

    /* a group's critic nodes name one critic model */
    char wf[1100], *text = NULL;
    snprintf(wf, sizeof wf, "%s/wf.yaml", dir);
    assert_int_equal(df_read_file(wf, &text, NULL), 0);
    char *last = strstr(strstr(text, "critic_train_1"), "/b/model}"); /* critic_train_1 on the job's model */
    memmove(last, last + 2, strlen(last + 2) + 1);
    assert_int_equal(df_write_file_atomic(wf, text, strlen(text)), 0);
    free(text);
    cfg = ppo_job(dir, ov, 1);
    df_plan *p = NULL;
    assert_error_mentions(df_train_check(cfg, 1, NULL, NULL, &p), DF_EINVAL,
                          "nodes 'value_1' and 'critic_train_1' of agent_group 1 set critic.model.path to");
    df_config_free(cfg);
}

/* Whether file dir/rel exists. */
static bool exists(const char *dir, const char *rel)
{
    char p[1400];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    return access(p, F_OK) == 0;
}

/* trainer_state.json's "agent_critics" of dir/out/global_step_<step>, compact (the caller frees). */
static char *agent_critics(const char *dir, int step)
{
    char p[1200];
    snprintf(p, sizeof p, "%s/out/global_step_%d/trainer_state.json", dir, step);
    json_t *o = json_load_file(p, 0, NULL);
    assert_non_null(o);
    char *text = json_dumps(json_object_get(o, "agent_critics"), JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(o);
    assert_non_null(text);
    return text;
}

/* critic_2_* of siiRL's file: share_instance 0 is group 0's critic itself, trained by both groups'
   nodes and saved once, as critic/. */
static void test_agent_shared_critic(void **state)
{
    const char *dir = *state;
    df_test_two_models(dir);
    write_ppo_groups(dir, "", ", agent_options: {share_instance: 0}");
    const char *ov[] = {"trainer.total_training_steps=1"};
    df_config *cfg = ppo_job(dir, ov, 1);
    df_dag_worker *w = NULL;
    if (df_dag_worker_create(cfg, NULL, &w))
        fail_msg("%s", df_last_error());
    assert_ptr_equal(w->agents[1].critic, &w->critic);
    assert_null(w->agents[1].own->critic.model); /* no second model */
    df_model *init = critic_copy(w->critic.model);
    df_batch *prompts = NULL, *bt = NULL;
    assert_int_equal(df_worker_next_prompts(w, 0, &prompts), 0);
    assert_int_equal(df_batch_copy(prompts, &bt), 0);
    run_group(w, 1, prompts, &bt); /* group 1's critic nodes train group 0's critic */
    assert_true(df_test_max_param_diff(df_critic_model(w->critic.model), init) > 0);
    df_batch_free(bt);
    df_batch_free(prompts);
    df_model_free(init);
    df_dag_worker_free(w);
    df_config_free(cfg);

    const char *ov2[] = {"trainer.total_training_steps=1", "trainer.save_freq=1"};
    if (df_test_run(NULL, ppo_job(dir, ov2, 2)))
        fail_msg("%s", df_last_error());
    char step[1200];
    snprintf(step, sizeof step, "%s/out/global_step_1", dir);
    assert_true(exists(step, "critic/train_state.safetensors"));
    assert_false(exists(step, "critic_agent_1"));
    assert_true(exists(step, "actor_agent_1/train_state.safetensors")); /* its actor is its own */
    char *text = agent_critics(dir, 1);
    assert_string_equal(text, "[null]");
    free(text);
}

/* Two steps saved: global_step_<N>/critic_agent_1/ holds group 1's critic, listed in
   trainer_state.json; a resumed run restores it bit-exact; a run sharing group 0's critic instead
   refuses that checkpoint. */
static void test_agent_critic_checkpoints(void **state)
{
    const char *dir = *state;
    df_test_two_models(dir);
    write_ppo_groups(dir, "", "");
    const char *ov[] = {"trainer.total_training_steps=2", "trainer.save_freq=1"};
    if (df_test_run(NULL, ppo_job(dir, ov, 2)))
        fail_msg("%s", df_last_error());
    json_t *lines = df_test_metrics(dir, "out", true), *step1 = json_array_get(lines, 0);
    assert_true(json_is_number(json_object_get(step1, "agent_1_critic/vf_loss")));
    assert_true(json_is_number(json_object_get(step1, "agent_0_critic/vf_loss")));
    json_decref(lines);
    char *text = agent_critics(dir, 2);
    assert_string_equal(text, "[\"critic_agent_1/train_state.safetensors\"]");
    free(text);
    df_model *saved1 = NULL, *saved0 = NULL;
    char p[1200];
    snprintf(p, sizeof p, "%s/out/global_step_2/critic_agent_1", dir);
    assert_int_equal(df_hf_dir_load(p, NULL, NULL, &saved1, NULL), 0);
    snprintf(p, sizeof p, "%s/out/global_step_2/critic", dir);
    assert_int_equal(df_hf_dir_load(p, NULL, NULL, &saved0, NULL), 0);

    const char *ov3[] = {"trainer.total_training_steps=3", "trainer.save_freq=1"};
    df_config *cfg = ppo_job(dir, ov3, 2);
    df_dag_worker *w = NULL;
    if (df_dag_worker_create(cfg, NULL, &w))
        fail_msg("%s", df_last_error());
    assert_int_equal(w->resumed_step, 2);
    df_critic *c1 = w->agents[1].critic->model;
    assert_true(df_test_same_params(df_critic_model(c1), saved1));
    assert_true(df_test_same_params(df_critic_model(w->critic.model), saved0));
    assert_true(df_test_max_param_diff(saved0, saved1) > 0);
    df_dag_worker_free(w);
    df_config_free(cfg);
    df_model_free(saved0);
    df_model_free(saved1);

    write_ppo_groups(dir, "", ", agent_options: {share_instance: 0}");
    cfg = ppo_job(dir, ov3, 2);
    assert_error_mentions(df_dag_worker_create(cfg, NULL, &w), DF_EINVAL,
                          "agent group 1: the checkpoint has a critic of its own and this run has none");
    df_config_free(cfg);
}

/* A group sharing group 0's rollout and actor samples from and trains group 0's policy; sharing
   one without the other, or a sharing node naming a model, is refused. */
static void test_agent_shared_policy(void **state)
{
    const char *dir = *state;
    df_test_two_models(dir);
    const char *share = ", agent_options: {share_instance: 0}";
    char text[8192] = "dag_id: shared\nnodes:\n", path[1024];
    snprintf(path, sizeof path, "%s/wf.yaml", dir);
    ppo_chain(text, sizeof text, 0, "", "", NULL);
    ppo_chain(text, sizeof text, 1, share, share, "critic_train_0");
    assert_int_equal(df_write_file_atomic(path, text, strlen(text)), 0);
    const char *ov[] = {"trainer.total_training_steps=1", "trainer.save_freq=1"};
    df_config *cfg = ppo_job(dir, ov, 2);
    df_dag_worker *w = NULL;
    if (df_dag_worker_create(cfg, NULL, &w))
        fail_msg("%s", df_last_error());
    assert_ptr_equal(w->agents[1].actor, &w->actor);
    assert_ptr_equal(w->agents[1].rollout, &w->rollout);
    assert_null(w->agents[1].own->actor.model);
    assert_null(w->agents[1].own->rollout.engine);
    df_model *init = df_test_model_copy(df_actor_model(w->actor.model));
    df_batch *prompts = NULL, *bt = NULL;
    assert_int_equal(df_worker_next_prompts(w, 0, &prompts), 0);
    assert_int_equal(df_batch_copy(prompts, &bt), 0);
    run_group(w, 1, prompts, &bt);
    assert_true(df_test_max_param_diff(df_actor_model(w->actor.model), init) > 0);
    df_batch_free(bt);
    df_batch_free(prompts);
    df_model_free(init);
    df_dag_worker_free(w);
    df_config_free(cfg);
    if (df_test_run(NULL, ppo_job(dir, ov, 2))) /* saved once: no actor_agent_1, no critic_agent_1 */
        fail_msg("%s", df_last_error());
    char step[1200];
    snprintf(step, sizeof step, "%s/out/global_step_1", dir);
    assert_true(exists(step, "actor/train_state.safetensors"));
    assert_false(exists(step, "actor_agent_1"));
    assert_false(exists(step, "critic_agent_1"));

    /* the actor shared, the rollout not: its engine would sample another policy than it trains */
    strcpy(text, "dag_id: half\nnodes:\n");
    ppo_chain(text, sizeof text, 0, "", "", NULL);
    ppo_chain(text, sizeof text, 1, share, share, "critic_train_0");
    char *r = strstr(text, "[critic_train_0]") + strlen("[critic_train_0]"); /* rollout_1's share dropped */
    assert_memory_equal(r, share, strlen(share));
    memmove(r, r + strlen(share), strlen(r + strlen(share)) + 1);
    assert_int_equal(df_write_file_atomic(path, text, strlen(text)), 0);
    df_plan *p = NULL;
    cfg = ppo_job(dir, ov, 1);
    assert_error_mentions(df_train_check(cfg, 1, NULL, NULL, &p), DF_EUNSUPPORTED,
                          "node 'old_1': agent_group 1: agent_options.share_instance 0: a group shares its "
                          "ROLLOUT and its ACTOR together");
    df_config_free(cfg);

    /* one actor node sharing, the other not */
    strcpy(text, "dag_id: mixed\nnodes:\n");
    ppo_chain(text, sizeof text, 0, "", "", NULL);
    ppo_chain(text, sizeof text, 1, "", "", "critic_train_0");
    r = strstr(text, "[adv_1]") + strlen("[adv_1]");
    memmove(r + strlen(share), r, strlen(r) + 1);
    memcpy(r, share, strlen(share));
    assert_int_equal(df_write_file_atomic(path, text, strlen(text)), 0);
    cfg = ppo_job(dir, ov, 1);
    assert_error_mentions(df_train_check(cfg, 1, NULL, NULL, &p), DF_EUNSUPPORTED,
                          "node 'old_1': agent_group 1: agent_options.share_instance 0: node 'train_1' of the "
                          "same group and role uses its own instance");
    df_config_free(cfg);
}

int main(void)
{
    /* a reward that varies between a random model's samples, so GRPO has advantages to train on */
    if (df_reward_register("test/digits", df_test_digit_share))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slot_routing),
        cmocka_unit_test_setup_teardown(test_node_model_path_conflict, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_node_model_path_loads, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_agent_isolation, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_agent_checkpoints, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_agents_refused, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_agent_other_tokenizer, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_agent_critics, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_agent_shared_critic, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_agent_critic_checkpoints, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_agent_shared_policy, df_test_mkdtemp, df_test_rmtree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
