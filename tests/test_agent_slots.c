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
#include "distflow/worker.h"
#include "engine/hf_dir.h"
#include "util/fsutil.h"
#include "workers/worker_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static df_config *job(const char *dir)
{
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 4,\n"
             "       max_prompt_length: 128, max_response_length: 4}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 4}\n"
             "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 8}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "dag: {workflow_path: %s/wf.yaml}\n"
             "trainer: {total_training_steps: 1, logger: [], default_local_dir: %s/out}\n",
             dir, dir, dir, dir);
    return df_test_config(yaml, "slots.yaml", NULL, 0);
}

/* The job's model (dir/model) and a second one of the same shape and tokenizer (dir/b/model). */
static void two_models(const char *dir)
{
    df_test_digits_inputs(dir, "train.jsonl", 8, "openai/gsm8k", true);
    const char *texts[8];
    char store[8][128], b[1024];
    for (int i = 0; i < 8; i++) { /* df_test_digits_inputs' prompts: the same tokenizer */
        snprintf(store[i], sizeof store[i], "Add %d and %d. What do you get?", i, 2 * i + 1);
        texts[i] = store[i];
    }
    snprintf(b, sizeof b, "%s/b", dir);
    assert_int_equal(df_mkdir_p(b), 0);
    df_test_tiny_model(b, texts, 8, 300, 32, 2, 11);
}

static void test_node_model_path_conflict(void **state)
{
    const char *dir = *state;
    two_models(dir);
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
    two_models(dir);
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
    assert_int_equal(df_hf_dir_load(b, b, &mb, &tb), 0);
    assert_int_equal(df_hf_dir_load(a, a, &ma, &ta), 0);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slot_routing),
        cmocka_unit_test_setup_teardown(test_node_model_path_conflict, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_node_model_path_loads, df_test_mkdtemp, df_test_rmtree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
