/* Agent groups (siiRL MARFT) in the workflow, the plan and the checks: siiRL's own
 * examples/experimental/marft/config/workflow_marft.yaml (tests/fixtures/siirl_workflows/, the
 * version of 2025-09-11, equal to siiRL's latest) parses with its agent_options, plans with two
 * agent groups, and is refused cleanly by df_train_check; the agent-group shape checks;
 * gae_marft's placement checks; the per-node keys its anchors set, accepted on every node when the
 * job agrees and refused naming the node, the key and the job's value when it does not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distflow/dag.h"
#include "distflow/scheduler.h"
#include "distflow/worker.h"
#include "workers/worker_internal.h"

#define MARFT DF_SOURCE_DIR "/tests/fixtures/siirl_workflows/2025-09-11_marft_workflow_marft.yaml"

/* A train config running workflow file `wf` (NULL: the built-in pipeline), with a critic. */
static df_config *job(const char *wf, const char *adv)
{
    char w[600], a[120];
    snprintf(w, sizeof w, "dag.workflow_path=%s", wf ? wf : "null");
    snprintf(a, sizeof a, "algorithm.adv_estimator=%s", adv);
    const char *ov[] = {w, a, "critic.model.path=" DF_SOURCE_DIR "/tests/golden/tiny_qwen2_value",
                        "critic.ppo_micro_batch_size_per_gpu=2", "actor_rollout_ref.rollout.n=1"};
    const char *yaml = "data: {train_batch_size: 4}\n"
                       "actor_rollout_ref: {actor: {ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 2}}\n"
                       "trainer: {nnodes: 1, n_gpus_per_node: 1}\n";
    return df_test_config(yaml, "job.yaml", ov, 5);
}

static void test_siirl_marft_parses(void **state)
{
    (void)state;
    df_task_graph *g = NULL;
    if (df_workflow_load(MARFT, &g))
        fail_msg("%s", df_last_error());
    int groups = 0;
    assert_int_equal(df_task_graph_agent_groups(g, &groups), 0);
    assert_int_equal(groups, 2);
    const df_node *r = df_task_graph_get_node(g, "rollout_actor");
    assert_int_equal(r->agent_group, 1);
    const df_agent_options *o = r->agent_options;
    assert_non_null(o);
    assert_true(o->obs_with_env);
    assert_string_equal(o->process_path, "examples/experimental/marft/config/process.py");
    assert_int_equal(o->n_env_path, 1);
    assert_string_equal(o->env_path[0], "examples/experimental/marft/config/math_env.py:MathEnv");
    /* the YAML's escapes resolved: "\\boxed{}" is one backslash */
    const char *pre = df_agent_options_kwarg(o, false, "pre_chat_template");
    assert_non_null(pre);
    assert_non_null(strstr(pre, "You are the **Actor**"));
    assert_non_null(strstr(pre, "within \\boxed{}.<|im_end|>\n ${prompt} <|im_start|> actor: "));
    assert_string_equal(df_agent_options_kwarg(o, true, "post_chat_template"), " <|im_start|> actor: ");
    assert_null(df_agent_options_kwarg(o, true, "pre_chat_template"));
    assert_int_equal(o->share_instance, -1);
    assert_int_equal(df_task_graph_get_node(g, "critic_2_value")->agent_options->share_instance, 0);
    assert_int_equal(df_task_graph_get_node(g, "actor_1_train")->agent_options->train_cycle, 15);
    assert_null(df_task_graph_get_node(g, "function_reward")->agent_options);
    /* copies keep them; the picture shows them */
    df_task_graph *c = NULL;
    assert_int_equal(df_task_graph_copy(g, NULL, &c), 0);
    const df_agent_options *co = df_task_graph_get_node(c, "rollout_actor")->agent_options;
    assert_ptr_not_equal(co, o);
    assert_string_equal(df_agent_options_kwarg(co, false, "pre_chat_template"), pre);
    assert_string_equal(co->env_path[0], o->env_path[0]);
    char *text = NULL;
    assert_int_equal(df_task_graph_print(c, &text), 0);
    assert_non_null(strstr(text, "[rollout_actor] MODEL_INFERENCE role=ROLLOUT status=PENDING\n  agent_group: 1\n"
                                 "  agent_options: obs_with_env, process_path examples/experimental/marft/config/"
                                 "process.py, env_path [examples/experimental/marft/config/math_env.py:MathEnv], "
                                 "pre_process_kwargs {pre_chat_template}, post_process_kwargs {post_chat_template}\n"));
    assert_non_null(strstr(text, "[critic_2_train] MODEL_TRAIN role=CRITIC status=PENDING\n  agent_group: 1\n"
                                 "  agent_options: share_instance 0\n"));
    free(text);
    df_task_graph_free(c);
    df_task_graph_free(g);
}

static void test_siirl_marft_plans(void **state)
{
    (void)state;
    df_config *cfg = job(MARFT, "gae_marft");
    df_plan *p = NULL;
    if (df_train_plan(cfg, 2, NULL, NULL, &p))
        fail_msg("%s", df_last_error());
    assert_int_equal(p->n_agent_groups, 2);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_int_equal(df_plan_print(p, f), 0);
    fclose(f);
    /* each group: the models of its own (agent 1 shares agent 0's critic), its checkpoint, its nodes */
    assert_non_null(strstr(text, "\n== agent groups (2)\n"
                                 "agent 0: models ROLLOUT, ACTOR, REFERENCE, CRITIC; checkpoint actor/ critic/\n"
                                 "  rollout_reasoner -> process_group_1\n"));
    assert_non_null(strstr(text, "agent 1: models ROLLOUT, ACTOR, REFERENCE; checkpoint actor_agent_1/\n"
                                 "  rollout_actor -> process_group_1\n"
                                 "  function_reward -> (no model: its subgraph's ranks)\n"));
    assert_non_null(strstr(text, "  critic_2_value -> process_group_1, CRITIC instance of agent 0\n"));
    free(text);
    df_plan_free(p);
    /* its nodes' per-node values (siiRL's run script's) must be the job's: this job's differ (the file
       trains with them on 4 ranks: test_marft_ranks) */
    p = NULL;
    assert_int_equal(df_train_check(cfg, 1, NULL, NULL, &p), DF_EUNSUPPORTED);
    assert_null(p);
    const char *want = MARFT " node 'rollout_reasoner': actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 "
                       "differs from the job's";
    if (!strstr(df_last_error(), want))
        fail_msg("'%s' lacks '%s'", df_last_error(), want);
    df_config_free(cfg);
}

/* `distflow plan` prints a refused multi-agent plan, agent groups included, then the refusal. */
static void test_cli_plan_shows_groups(void **state)
{
    char yaml[1024], cmd[4096];
    snprintf(yaml, sizeof yaml, "%s/job.yaml", (const char *)*state);
    FILE *f = fopen(yaml, "w");
    assert_non_null(f);
    fputs("trainer: {nnodes: 1, n_gpus_per_node: 2}\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 %s/distflow plan %s --world 2 dag.workflow_path=%s "
             "critic.model.path=/nonexistent 2>&1", DF_BINARY_DIR, yaml, MARFT);
    static char out[1 << 16];
    assert_int_equal(df_test_command(cmd, out, sizeof out), 1);
    const char *groups = strstr(out, "\n== agent groups (2)\nagent 0: models ROLLOUT, ACTOR, REFERENCE, CRITIC; "
                                     "checkpoint actor/ critic/\n");
    const char *err = strstr(out, "distflow plan: error: " MARFT " node 'rollout_reasoner': actor_rollout_ref.rollout."
                                     "log_prob_micro_batch_size_per_gpu=16 differs");
    if (!groups || !err || err < groups)
        fail_msg("the plan's agent groups, then the refusal, expected:\n%s", out);
    assert_non_null(strstr(out, "== planned for 2 ranks: a multi-agent graph, shown but refused (below)\n"));
}

/* gae_marft: several agent groups, its advantage node in the last one. */
static void test_gae_marft_placement(void **state)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/adv_first.yaml", (const char *)*state);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("dag_id: t\nnodes:\n"
          "  - {node_id: r0, node_type: MODEL_INFERENCE, node_role: ROLLOUT}\n"
          "  - {node_id: r1, node_type: MODEL_INFERENCE, node_role: ROLLOUT, agent_group: 1, dependencies: [r0]}\n"
          "  - {node_id: adv, node_type: COMPUTE, node_role: ADVANTAGE, dependencies: [r1]}\n",
          f);
    fclose(f);
    df_config *cfg = job(path, "gae_marft");
    assert_int_equal(df_train_check(cfg, 1, NULL, NULL, NULL), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "node 'adv': agent_group 0: algorithm.adv_estimator=gae_marft computes "
                                            "every agent's advantages in one node of the last agent group (1)"));
    df_config_free(cfg);
    cfg = job(NULL, "gae_marft"); /* the built-in ppo pipeline: one agent */
    assert_int_equal(df_train_check(cfg, 1, NULL, NULL, NULL), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "algorithm.adv_estimator=gae_marft chains GAE over the agent groups "
                                            "of a multi-agent workflow"));
    assert_non_null(strstr(df_last_error(), "built-in pipeline 'ppo' has one agent group: use gae"));
    df_config_free(cfg);
}

static void expect_groups_error(const char *nodes, const char *msg)
{
    char text[2048];
    snprintf(text, sizeof text, "dag_id: t\nnodes:\n%s", nodes);
    df_task_graph *g = NULL;
    if (df_workflow_load_text(text, "t.yaml", NULL, NULL, &g))
        fail_msg("%s", df_last_error());
    int n = 0;
    assert_int_equal(df_task_graph_agent_groups(g, &n), DF_EINVAL);
    if (!strstr(df_last_error(), msg))
        fail_msg("'%s' lacks '%s'", df_last_error(), msg);
    df_task_graph_free(g);
}

static void test_agent_group_shapes(void **state)
{
    (void)state;
    expect_groups_error("  - {node_id: a, node_type: MODEL_INFERENCE, node_role: ROLLOUT}\n"
                        "  - {node_id: b, node_type: MODEL_INFERENCE, node_role: ROLLOUT, agent_group: 2}\n",
                        "task graph 't': agent group 1 has no node, but group 2 has");
    expect_groups_error("  - {node_id: a, node_type: MODEL_TRAIN, node_role: CRITIC}\n"
                        "  - {node_id: b, node_type: MODEL_TRAIN, node_role: CRITIC, agent_group: 1,\n"
                        "     agent_options: {share_instance: 3}}\n",
                        "node 'b' (agent group 1): agent_options.share_instance 3 must name another agent group, "
                        "0 .. 1");
    expect_groups_error("  - {node_id: a, node_type: MODEL_TRAIN, node_role: ACTOR}\n"
                        "  - {node_id: b, node_type: MODEL_TRAIN, node_role: CRITIC, agent_group: 1,\n"
                        "     agent_options: {share_instance: 0}}\n",
                        "node 'b': agent_options.share_instance 0: agent group 0 has no CRITIC node with its own "
                        "instance to share");
    /* malformed options are load errors with the line */
    df_task_graph *g = NULL;
    assert_int_equal(df_workflow_load_text("dag_id: t\nnodes:\n  - node_id: a\n    node_type: COMPUTE\n"
                                           "    agent_options: {train_cycle: often}\n",
                                           "t.yaml", NULL, NULL, &g),
                     DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "t.yaml:5: node 'a': agent_options.train_cycle must be a non-negative "
                                            "integer, got 'often'"));
    assert_int_equal(df_workflow_load_text("dag_id: t\nnodes:\n  - node_id: a\n    node_type: COMPUTE\n"
                                           "    agent_options: {pre_process_kwargs: {t: [1]}}\n",
                                           "t.yaml", NULL, NULL, &g),
                     DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "agent_options.pre_process_kwargs.t must be a scalar"));
}

/* The job for the per-node keys: siiRL's run script's values (run_qwen2_5-3b_marft.sh: TP 4,
   memory 0.3, n 1) and the workflow's micro-batch, each replaced by `change` when not NULL. */
static df_config *keys_job(const char *change)
{
    const char *ov[] = {"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
                        "actor_rollout_ref.rollout.tensor_model_parallel_size=4",
                        "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
                        "actor_rollout_ref.rollout.n=1", change ? change : "actor_rollout_ref.rollout.n=1"};
    return df_test_config("data: {train_batch_size: 4}\n", "job.yaml", ov, 5);
}

/* Every node of siiRL's file with a `config:` through the per-node key check (*n_checked of them); the first
 * refusal. */
static int check_node_keys(const df_config *cfg, const df_task_graph *g, int *n_checked)
{
    *n_checked = 0;
    for (int i = 0; i < df_task_graph_num_nodes(g); i++) {
        const df_node *n = df_task_graph_node_at(g, i);
        if (!n->n_config)
            continue;
        char where[256];
        snprintf(where, sizeof where, "marft node '%s'", n->node_id);
        df_config *merged = NULL;
        int rc = df_worker_node_overrides(cfg, n, df_worker_default_exec(n), where, &merged);
        df_config_free(merged);
        if (rc)
            return rc;
        ++*n_checked;
    }
    return DF_OK;
}

static void test_siirl_marft_node_keys(void **state)
{
    (void)state;
    df_task_graph *g = NULL;
    if (df_workflow_load(MARFT, &g))
        fail_msg("%s", df_last_error());
    assert_int_equal(df_worker_register_nodes(), 0);
    df_config *cfg = keys_job(NULL);
    int checked = 0;
    if (check_node_keys(cfg, g, &checked))
        fail_msg("%s", df_last_error());
    assert_int_equal(checked, 6); /* two rollout, two old-log-prob and two actor_train nodes */
    df_config_free(cfg);
    /* one key off the file's value: refused at the first node, its rollout of agent 0 */
    static const struct {
        const char *job, *msg;
    } off[] = {
        {"actor_rollout_ref.rollout.n=2", "marft node 'rollout_reasoner': actor_rollout_ref.rollout.n=1 "
                                          "differs from the job's 2 (command line); "
                                          "distflow reads this key once for the job, not per node (every "
                                          "rollout node answers the same prompts, "
                                          "every agent of a multi-agent graph the same episodes"},
        {"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
         "marft node 'rollout_reasoner': actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 "
         "differs "
         "from the job's 4 (command line)"},
        {"actor_rollout_ref.rollout.tensor_model_parallel_size=2",
         "marft node 'rollout_reasoner': actor_rollout_ref.rollout.tensor_model_parallel_size=4 differs from "
         "the "
         "job's 2 (command line)"},
        {"actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
         "marft node 'rollout_reasoner': actor_rollout_ref.rollout.gpu_memory_utilization=0.3 differs from "
         "the "
         "job's 0.5 (command line); distflow reads this key once for the job, not per node (it has no effect "
         "in "
         "distflow: no KV-cache pool is sized): set the job's "
         "actor_rollout_ref.rollout.gpu_memory_utilization=0.3"},
    };
    for (size_t i = 0; i < sizeof off / sizeof *off; i++) {
        cfg = keys_job(off[i].job);
        assert_int_equal(check_node_keys(cfg, g, &checked), DF_EUNSUPPORTED);
        if (!strstr(df_last_error(), off[i].msg))
            fail_msg("'%s' lacks '%s'", df_last_error(), off[i].msg);
        df_config_free(cfg);
    }
    /* an actor node alone is checked the same way */
    cfg = keys_job("actor_rollout_ref.rollout.n=3");
    const df_node *old = df_task_graph_get_node(g, "actor_2_old_log_prob");
    df_config *merged = NULL;
    assert_int_equal(df_worker_node_overrides(cfg, old, df_worker_default_exec(old), "n", &merged),
                     DF_EUNSUPPORTED);
    assert_non_null(strstr(df_last_error(), "n: actor_rollout_ref.rollout.n=1 differs from the job's 3"));
    assert_null(merged);
    df_config_free(cfg);
    df_task_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_siirl_marft_parses),
        cmocka_unit_test(test_siirl_marft_plans),
        cmocka_unit_test_setup_teardown(test_cli_plan_shows_groups, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_gae_marft_placement, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test(test_agent_group_shapes),
        cmocka_unit_test(test_siirl_marft_node_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
