/* Unit tests for workflow files (df_workflow_load, include/distflow/dag.h) and
 * per-node config overrides (df_config_with_overrides, include/distflow/config.h). */
/* rounding-free (scripts/test-variants.sh skips it): parsing, text and integers only */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distflow/config.h"
#include "distflow/dag.h"
#include "distflow/scheduler.h"
#include "distflow/tokenizer.h"
#include "testutil.h"
#include "workers/worker_internal.h"

#define WF_DIR DF_SOURCE_DIR "/examples/workflows/"
#define FIXTURE DF_SOURCE_DIR "/tests/fixtures/workflow_grpo_siirl.yaml"


/* Warnings collected by the callback. */
typedef struct {
    char msgs[8][512];
    int n;
} warnings;

static void collect(void *user, const char *msg)
{
    warnings *w = user;
    if (w->n < 8)
        snprintf(w->msgs[w->n], sizeof w->msgs[0], "%s", msg);
    w->n++;
}

static df_node *node(df_task_graph *g, const char *id)
{
    df_node *n = df_task_graph_get_node(g, id);
    if (!n)
        fail_msg("node '%s' missing", id);
    return n;
}

/* Same ids (in order), types, roles, flags, groups, refs and dependencies. */
static void assert_same_graph(const df_task_graph *a, const df_task_graph *b)
{
    assert_string_equal(df_task_graph_id(a), df_task_graph_id(b));
    assert_int_equal(df_task_graph_num_nodes(a), df_task_graph_num_nodes(b));
    for (int i = 0; i < df_task_graph_num_nodes(a); i++) {
        const df_node *x = df_task_graph_node_at(a, i), *y = df_task_graph_node_at(b, i);
        assert_string_equal(x->node_id, y->node_id);
        assert_int_equal(x->node_type, y->node_type);
        assert_int_equal(x->node_role, y->node_role);
        assert_int_equal(x->only_forward_compute, y->only_forward_compute);
        assert_int_equal(x->agent_group, y->agent_group);
        assert_int_equal(x->retry_limit, y->retry_limit);
        assert_string_equal(x->executable_ref, y->executable_ref);
        assert_int_equal(x->n_dependencies, y->n_dependencies);
        for (int d = 0; d < x->n_dependencies; d++)
            assert_string_equal(x->dependencies[d], y->dependencies[d]);
        assert_int_equal(x->n_config, 0);
    }
}

/* ====================================================================== examples */

static void test_examples_match_builtins(void **state)
{
    (void)state;
    static const char *const names[] = {"grpo", "ppo", "dapo", "embodied_srpo"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char path[512];
        snprintf(path, sizeof path, WF_DIR "%s.yaml", names[i]);
        df_task_graph *file, *builtin;
        warnings w = {0};
        if (df_workflow_load_ex(path, collect, &w, &file))
            fail_msg("%s: %s", path, df_last_error());
        assert_int_equal(w.n, 0);
        assert_int_equal(df_builtin_pipeline(names[i], &builtin), 0);
        assert_same_graph(file, builtin);
        df_task_graph_free(file);
        df_task_graph_free(builtin);
    }
    /* the old name stays an alias */
    df_task_graph *a, *b;
    assert_int_equal(df_builtin_pipeline("embodied", &a), 0);
    assert_int_equal(df_builtin_pipeline("embodied_srpo", &b), 0);
    assert_same_graph(a, b);
    assert_string_equal(df_task_graph_id(a), "embodied_grpo_training_pipeline");
    df_task_graph_free(a);
    df_task_graph_free(b);
}

/* siiRL's own style: anchors, merge keys, aliases, lower-case enum names, no refs. */
static void test_siirl_fixture(void **state)
{
    (void)state;
    df_task_graph *g;
    warnings w = {0};
    if (df_workflow_load_ex(FIXTURE, collect, &w, &g))
        fail_msg("%s", df_last_error());
    assert_int_equal(w.n, 0);
    assert_string_equal(df_task_graph_id(g), "grpo_training_pipeline");
    assert_int_equal(df_task_graph_num_nodes(g), 6);
    df_node *r = node(g, "rollout");
    assert_int_equal(r->node_type, DF_NODE_MODEL_INFERENCE);
    assert_int_equal(r->node_role, DF_ROLE_ROLLOUT);
    assert_null(r->executable_ref);
    assert_int_equal(r->n_dependencies, 0);
    /* explicit rollout.n wins over the merged one; nested mapping flattened */
    assert_string_equal(df_node_get_config(r, "rollout.n"), "8");
    assert_string_equal(df_node_get_config(r, "model.path"), "Qwen/Qwen2.5-7B-Instruct");
    assert_string_equal(df_node_get_config(r, "rollout.log_prob_micro_batch_size_per_gpu"), "16");
    assert_string_equal(df_node_get_config(r, "rollout.temperature"), "0.7");
    assert_string_equal(df_node_get_config(r, "rollout.stop"), "[\"</answer>\", \"x\"]");
    assert_int_equal(r->n_config, 5);
    df_node *adv = node(g, "calculate_advantages");
    assert_int_equal(adv->node_type, DF_NODE_COMPUTE);
    assert_int_equal(adv->node_role, DF_ROLE_ADVANTAGE);
    df_node *old = node(g, "actor_old_log_prob");
    assert_int_equal(old->node_type, DF_NODE_MODEL_TRAIN);
    assert_int_equal(old->node_role, DF_ROLE_ACTOR);
    assert_true(old->only_forward_compute);
    assert_string_equal(old->dependencies[0], "calculate_advantages");
    df_node *tr = node(g, "actor_train");
    assert_int_equal(tr->node_role, DF_ROLE_ACTOR);
    assert_false(tr->only_forward_compute);
    assert_string_equal(df_node_get_config(tr, "rollout.n"), "16");
    assert_int_equal(tr->n_config, 3);
    df_node **order;
    int n;
    assert_int_equal(df_task_graph_topo_order(g, &order, &n), 0);
    assert_int_equal(n, 6);
    assert_string_equal(order[0]->node_id, "rollout");
    assert_string_equal(order[5]->node_id, "actor_train");
    free(order);
    df_task_graph_free(g);
}

static void test_fields_and_refs(void **state)
{
    (void)state;
    const char *text = "dag_id: d\n"
                       "global_config:\n"
                       "  sampling: {temp: 0.25}\n"
                       "nodes:\n"
                       "  - node_id: a\n"
                       "    node_type: DATA_LOAD\n"
                       "    func: my.loader\n"
                       "    agent_group: 2\n"
                       "    retry_limit: 3\n"
                       "  - node_id: b\n"
                       "    node_type: MODEL_INFERENCE\n"
                       "    node_role: ROLLOUT\n"
                       "    dependencies: [a]\n"
                       "    config:\n"
                       "      rollout.temperature: !Ref global_config.sampling.temp\n"
                       "      trainer.project_name: 'null'\n"
                       "      rollout.top_k:\n";
    df_task_graph *g;
    if (df_workflow_load_text(text, "t.yaml", NULL, NULL, &g))
        fail_msg("%s", df_last_error());
    df_node *a = node(g, "a");
    assert_int_equal(a->node_type, DF_NODE_DATA_LOAD);
    assert_string_equal(a->executable_ref, "my.loader");
    assert_int_equal(a->agent_group, 2);
    assert_int_equal(a->retry_limit, 3);
    df_node *b = node(g, "b");
    assert_string_equal(df_node_get_config(b, "rollout.temperature"), "0.25");
    assert_string_equal(df_node_get_config(b, "trainer.project_name"), "\"null\"");
    assert_string_equal(df_node_get_config(b, "rollout.top_k"), "null");
    df_task_graph_free(g);
}

/* ====================================================================== warnings */

static void test_python_only_options_warn(void **state)
{
    (void)state;
    const char *text = "dag_id: d\n"
                       "nodes:\n"
                       "  - node_id: a\n"
                       "    node_type: COMPUTE\n"
                       "    agent_options:\n"
                       "      process_path: my.module.fn\n"
                       "      env: []\n"
                       "    user_hook: 3\n";
    df_task_graph *g;
    warnings w = {0};
    assert_int_equal(df_workflow_load_text(text, "w.yaml", collect, &w, &g), 0);
    /* agent_options are read (test_marft_plan.c); an option siiRL's AgentArguments lacks is not */
    assert_int_equal(w.n, 2);
    assert_non_null(strstr(w.msgs[0], "w.yaml:7: node 'a': unknown agent option 'env' ignored"));
    assert_non_null(strstr(w.msgs[1], "w.yaml:8: node 'a': unknown node option 'user_hook'"));
    assert_string_equal(node(g, "a")->agent_options->process_path, "my.module.fn");
    df_task_graph_free(g);
    /* without a callback the warnings are dropped, the load still succeeds */
    assert_int_equal(df_workflow_load_text(text, "w.yaml", NULL, NULL, &g), 0);
    df_task_graph_free(g);
}

/* ====================================================================== errors */

static void expect_error(const char *text, int code, const char *msg)
{
    df_task_graph *g = (df_task_graph *)1;
    int rc = df_workflow_load_text(text, "bad.yaml", NULL, NULL, &g);
    assert_null(g);
    assert_error_mentions(rc, code, msg);
}

#define HEAD "dag_id: d\nnodes:\n"
#define NODE_A "  - node_id: a\n    node_type: COMPUTE\n"

/* Limits before and after parsing: flow nesting past 64 levels, and a node config value whose
   aliases of aliases would expand to 10^9 items (a billion laughs), refused at once. */
static void test_yaml_limits(void **state)
{
    (void)state;
    char text[4096], *p = text;
    p += sprintf(p, "dag_id: d\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for (int i = 1; i < 9; i++) {
        p += sprintf(p, "a%d: &a%d [", i, i);
        for (int k = 0; k < 10; k++)
            p += sprintf(p, "%s*a%d", k ? ", " : "", i - 1);
        p += sprintf(p, "]\n");
    }
    sprintf(p, "nodes:\n  - {node_id: a, node_type: COMPUTE, config: {actor_rollout_ref.rollout.stop: *a8}}\n");
    expect_error(text, DF_EINVAL, "node 'a': config value longer than 1 MiB once its aliases are expanded");
    p = text + sprintf(text, HEAD NODE_A "    config: {x: ");
    for (int i = 0; i < 100; i++)
        *p++ = '[';
    *p = '\0';
    expect_error(text, DF_EINVAL, "bad.yaml:5: flow collections ([ ] / { }) nested deeper than 64 levels");
}

static void test_malformed(void **state)
{
    (void)state;
    expect_error("", DF_EINVAL, "bad.yaml: the workflow file is empty");
    expect_error("- a\n- b\n", DF_EINVAL, "bad.yaml:1: a workflow file is a mapping");
    expect_error("nodes: []\n", DF_EINVAL, "missing dag_id");
    expect_error("dag_id: d\n", DF_EINVAL, "bad.yaml: the 'nodes' list is missing");
    expect_error("dag_id: d\nnodes: {a: 1}\n", DF_EINVAL, "bad.yaml:2: 'nodes' must be a list");
    expect_error("dag_id: d\nnodes: [\n", DF_EINVAL, "bad.yaml:3:");
    expect_error(HEAD "  - just_a_string\n", DF_EINVAL, "bad.yaml:3: node #1: each entry");
    expect_error(HEAD NODE_A "  - node_type: COMPUTE\n", DF_EINVAL,
                 "bad.yaml:5: node #2: missing node_id");
    expect_error(HEAD NODE_A NODE_A, DF_EINVAL,
                 "bad.yaml:5: node 'a': duplicate node id (node #1 has it too)");
    expect_error(HEAD "  - node_id: a\n    node_role: ACTOR\n", DF_EINVAL,
                 "bad.yaml:3: node 'a': missing node_type");
    expect_error(HEAD "  - node_id: a\n    node_type: TRAIN\n", DF_EINVAL,
                 "bad.yaml:4: node 'a': unknown node type 'TRAIN'");
    expect_error(HEAD "  - node_id: a\n    node_type: COMPUTE\n    node_role: ACTR\n", DF_EINVAL,
                 "bad.yaml:5: node 'a': unknown node role 'ACTR'");
    expect_error(HEAD "  - node_id: a\n    node_type: DATA_LOAD\n    node_role: ACTOR\n",
                 DF_EINVAL, "bad.yaml:5: node 'a':");
    expect_error(HEAD NODE_A "    only_forward_compute: maybe\n", DF_EINVAL,
                 "bad.yaml:5: node 'a': only_forward_compute must be true or false, got 'maybe'");
    expect_error(HEAD NODE_A "    agent_group: -1\n", DF_EINVAL,
                 "bad.yaml:5: node 'a': agent_group must be a non-negative integer");
    expect_error(HEAD NODE_A "    retry_limit: [1]\n", DF_EINVAL,
                 "bad.yaml:5: node 'a': retry_limit must be a non-negative integer");
    expect_error(HEAD NODE_A "    dependencies: b\n", DF_EINVAL,
                 "bad.yaml:5: node 'a': dependencies must be a list");
    expect_error(HEAD NODE_A "    dependencies:\n      - zz\n", DF_EINVAL,
                 "bad.yaml:6: node 'a': depends on 'zz', which is not a node of this workflow");
    expect_error(HEAD NODE_A "    config: [1, 2]\n", DF_EINVAL,
                 "bad.yaml:5: node 'a': config must be a mapping");
    expect_error(HEAD NODE_A "    executable_ref: {x: 1}\n", DF_EINVAL,
                 "bad.yaml:5: node 'a': executable_ref must be a string");
    expect_error(HEAD NODE_A "    executable_ref: x\n    func: y\n", DF_EINVAL,
                 "bad.yaml:6: node 'a': give either executable_ref or func");
    expect_error(HEAD NODE_A "    config:\n      k: !Ref global_config.nope\n", DF_EINVAL,
                 "bad.yaml:6: node 'a': unresolved reference 'global_config.nope'");
    expect_error(HEAD NODE_A "    config:\n      k: !Ref other.x\n", DF_EINVAL,
                 "bad.yaml:6: node 'a': !Ref 'other.x': only global_config");
    expect_error(HEAD NODE_A "    config:\n      k: [{a: 1}]\n", DF_EINVAL,
                 "bad.yaml:6: node 'a': config lists may not hold mappings");
    /* a cycle: validated after loading, named with the file */
    expect_error(HEAD "  - node_id: a\n    node_type: COMPUTE\n    dependencies: [b]\n"
                      "  - node_id: b\n    node_type: COMPUTE\n    dependencies: [a]\n",
                 DF_EINVAL, "bad.yaml: task graph 'd'");
    expect_error(HEAD "  - node_id: a\n    node_type: COMPUTE\n    dependencies: [a]\n",
                 DF_EINVAL, "cycle");
    df_task_graph *g = (df_task_graph *)1;
    assert_error_mentions(df_workflow_load("/nonexistent/wf.yaml", &g), DF_ENOTFOUND,
                          "workflow file: /nonexistent/wf.yaml: cannot open");
    assert_null(g);
}


/* ====================================================================== overrides */

static df_config *train_config(void)
{
    return df_test_config("actor_rollout_ref:\n  rollout:\n    temperature: 1.0\n    top_p: 0.9\n", "cfg.yaml",
                          NULL, 0);
}

static void test_config_with_overrides(void **state)
{
    (void)state;
    df_config *base = train_config(), *m;
    const char *keys[] = {"actor_rollout_ref.rollout.temperature", "actor_rollout_ref.actor.optim",
                          "trainer.project_name"};
    const char *vals[] = {"0.7", "{lr: 2e-5}", "${actor_rollout_ref.rollout.top_p}"};
    if (df_config_with_overrides(base, keys, vals, 3, "wf.yaml node 'rollout_actor'", &m))
        fail_msg("%s", df_last_error());
    /* parsed floats are strtod of their text: the double of the same C literal, exactly */
    assert_near(df_config_float(m, "actor_rollout_ref.rollout.temperature"), 0.7, 0);
    assert_near(df_config_float(m, "actor_rollout_ref.actor.optim.lr"), 2e-5, 0);
    assert_string_equal(df_config_str(m, "trainer.project_name"), "0.9");
    assert_string_equal(df_config_where(m, "actor_rollout_ref.rollout.temperature"),
                        "wf.yaml node 'rollout_actor'");
    assert_string_equal(df_config_where(m, "actor_rollout_ref.rollout.top_p"), "cfg.yaml:4");
    /* the base is untouched */
    assert_near(df_config_float(base, "actor_rollout_ref.rollout.temperature"), 1.0, 0);
    df_config_free(m);

    const char *bad_key[] = {"actor_rollout_ref.rollout.temprature"};
    const char *one[] = {"0.5"};
    m = (df_config *)1;
    assert_error_mentions(df_config_with_overrides(base, bad_key, one, 1, "wf.yaml node 'gen'", &m),
                          DF_EINVAL,
                          "wf.yaml node 'gen': 'actor_rollout_ref.rollout.temprature=0.5': "
                          "unknown key");
    assert_non_null(strstr(df_last_error(), "did you mean 'actor_rollout_ref.rollout.temperature'"));
    assert_null(m);
    const char *bad_val[] = {"hot"};
    assert_error_mentions(df_config_with_overrides(base, keys, bad_val, 1, "wf.yaml node 'gen'", &m),
                          DF_EINVAL, "actor_rollout_ref.rollout.temperature");
    assert_near(df_config_float(base, "actor_rollout_ref.rollout.temperature"), 1.0, 0);
    df_config *copy;
    assert_int_equal(df_config_copy(base, &copy), 0);
    assert_near(df_config_float(copy, "actor_rollout_ref.rollout.top_p"), 0.9, 0);
    df_config_free(copy);
    df_config_free(base);
}

/* The worker's per-node configs: relative keys, honoured keys, refusals. */
static int load_in_worker(const char *dir, const char *yaml, df_dag_worker *w)
{
    char path[512];
    snprintf(path, sizeof path, "%s/wf.yaml", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(yaml, f);
    fclose(f);
    memset(w, 0, sizeof *w);
    df_config *base = train_config();
    const char *key = "dag.workflow_path", *val = path;
    df_config *c;
    assert_int_equal(df_config_with_overrides(base, &key, &val, 1, "test", &c), 0);
    df_config_free(base);
    w->cfg = c;
    w->rank = 1; /* no warnings printed */
    w->actor.layout.dp_size = 1;
    w->world = 1;
    assert_int_equal(df_worker_settings_init(&w->global, w->cfg), 0); /* as df_dag_worker_create does first */
    assert_int_equal(df_worker_register_nodes(), 0);
    const char *name;
    int rc = df_pipeline_from_config(w->cfg, NULL, NULL, &name, &w->graph);
    if (!rc)
        assert_string_equal(name, "workflow");
    return rc ? rc : df_worker_setup_workflow(w);
}

static void unload(df_dag_worker *w)
{
    df_worker_free_node_configs(w);
    df_task_graph_free(w->graph);
    df_config_free((df_config *)w->cfg);
}

#define GEN_NODE "  - node_id: gen\n    node_type: MODEL_INFERENCE\n    node_role: ROLLOUT\n"
#define TRAIN_NODE                                                                               \
    "  - node_id: train\n    node_type: MODEL_TRAIN\n    node_role: ACTOR\n    dependencies: [gen]\n"

#define CRITIC_NODE                                                                              \
    "  - node_id: vf\n    node_type: MODEL_TRAIN\n    node_role: CRITIC\n    dependencies: [gen]\n"

static void test_worker_node_overrides(void **state)
{
    df_dag_worker w;
    int rc = load_in_worker(*state,
                            "dag_id: d\nnodes:\n" GEN_NODE
                            "    config:\n      rollout.temperature: 0.7\n"
                            "      actor_rollout_ref.rollout.top_k: 5\n" TRAIN_NODE
                            "    config: {actor.clip_ratio_high: 0.28, actor.ppo_epochs: 2}\n",
                            &w);
    if (rc)
        fail_msg("%s", df_last_error());
    df_node *gen = df_task_graph_get_node(w.graph, "gen"), *tr = df_task_graph_get_node(w.graph, "train");
    /* default executables by role */
    assert_string_equal(gen->executable_ref, "DAGWorker.generate");
    assert_string_equal(tr->executable_ref, "DAGWorker.train_actor");
    const df_node_settings *gs = df_worker_node_settings(&w, gen), *ts = df_worker_node_settings(&w, tr);
    assert_ptr_not_equal(gs, &w.global);
    assert_ptr_not_equal(gs->src, w.cfg);
    assert_near(gs->cfg.actor_rollout_ref.rollout.temperature, 0.7, 0); /* strtod: exact */
    assert_int_equal(gs->cfg.actor_rollout_ref.rollout.top_k, 5);
    assert_near(ts->cfg.actor_rollout_ref.rollout.temperature, 1.0, 0);
    assert_near(ts->cfg.actor_rollout_ref.actor.clip_ratio_high, 0.28, 0);
    assert_int_equal(ts->cfg.actor_rollout_ref.actor.ppo_epochs, 2);
    const df_actor_loss *al = &ts->actor_loss; /* resolved once, when the workflow was set up */
    assert_near(al->clip_ratio_high, 0.28, 0);
    assert_int_equal(al->ppo_epochs, 2);
    assert_near(al->clip_ratio_low, 0.2, 0); /* not overridden: the global value */
    al = &w.global.actor_loss; /* the global ones stay */
    assert_near(al->clip_ratio_high, 0.2, 0);
    assert_int_equal(al->ppo_epochs, 1);
    unload(&w);

    /* unknown key: file, node and a hint */
    rc = load_in_worker(*state, "dag_id: d\nnodes:\n" GEN_NODE "    config:\n      rollout.temprature: 0.7\n", &w);
    assert_error_mentions(rc, DF_EINVAL, "wf.yaml node 'gen': 'rollout.temprature=0.7': unknown key 'rollout.temprature' "
                          "(did you mean 'actor_rollout_ref.rollout.temperature'?)");
    assert_non_null(strstr(df_last_error(), "dag.workflow_path"));
    unload(&w);
    /* a key that exists but cannot change per node */
    rc = load_in_worker(*state,
                        "dag_id: d\nnodes:\n" GEN_NODE "    config:\n      rollout.ignore_eos: true\n", &w);
    assert_error_mentions(
        rc, DF_EUNSUPPORTED,
        "wf.yaml node 'gen': actor_rollout_ref.rollout.ignore_eos cannot be changed per node "
        "(this node honours: actor_rollout_ref.rollout.temperature");
    unload(&w);
    /* one read once for the job (siiRL's MARFT anchors): another value than the job's refused in setup too */
    rc = load_in_worker(*state, "dag_id: d\nnodes:\n" GEN_NODE "    config:\n      rollout.n: 8\n", &w);
    assert_error_mentions(rc, DF_EUNSUPPORTED,
                          "wf.yaml node 'gen': actor_rollout_ref.rollout.n=8 differs from the job's ");
    unload(&w);
    /* a loss mode that does not exist */
    rc = load_in_worker(*state, "dag_id: d\nnodes:\n" GEN_NODE TRAIN_NODE
                        "    config:\n      actor.policy_loss.loss_mode: nope\n", &w);
    assert_error_mentions(rc, DF_EINVAL, "wf.yaml node 'train'");
    assert_non_null(strstr(df_last_error(), "nope"));
    unload(&w);
    /* the critic's train node: its value-loss keys (relative to critic.), nothing else */
    rc = load_in_worker(*state, "dag_id: d\nnodes:\n" GEN_NODE CRITIC_NODE
                        "    config: {cliprange_value: 0.1, critic.ppo_epochs: 3, loss_agg_mode: seq-mean-token-sum}\n",
                        &w);
    if (rc)
        fail_msg("%s", df_last_error());
    df_node *vf = df_task_graph_get_node(w.graph, "vf");
    assert_string_equal(vf->executable_ref, "DAGWorker.train_critic");
    const df_critic_loss *l = &df_worker_node_settings(&w, vf)->critic_loss;
    assert_near(l->cliprange_value, 0.1, 0);
    assert_int_equal(l->ppo_epochs, 3);
    assert_string_equal(l->loss_agg_mode, "seq-mean-token-sum");
    l = &w.global.critic_loss; /* the global ones stay */
    assert_near(l->cliprange_value, 0.5, 0);
    assert_int_equal(l->ppo_epochs, 1);
    assert_string_equal(l->loss_agg_mode, "token-mean");
    unload(&w);
    rc = load_in_worker(*state, "dag_id: d\nnodes:\n" GEN_NODE CRITIC_NODE "    config: {ppo_mini_batch_size: 2}\n", &w);
    assert_error_mentions(rc, DF_EUNSUPPORTED,
                          "wf.yaml node 'vf': critic.ppo_mini_batch_size cannot be changed per node (this node "
                          "honours: critic.cliprange_value, critic.loss_agg_mode, critic.ppo_epochs, "
                          "critic.model.path)");
    unload(&w);
    rc = load_in_worker(*state, "dag_id: d\nnodes:\n" GEN_NODE CRITIC_NODE "    config: {loss_agg_mode: nope}\n", &w);
    assert_error_mentions(rc, DF_EINVAL, "wf.yaml node 'vf'");
    assert_non_null(strstr(df_last_error(), "nope"));
    unload(&w);
    /* a node whose function reads nothing per node */
    rc = load_in_worker(*state, "dag_id: d\nnodes:\n" GEN_NODE
                        "  - node_id: rw\n    node_type: COMPUTE\n    node_role: REWARD\n"
                        "    dependencies: [gen]\n    config: {algorithm.gamma: 0.5}\n", &w);
    assert_error_mentions(rc, DF_EUNSUPPORTED,
                          "node 'rw': algorithm.gamma cannot be changed per node (this node's "
                          "function reads no per-node keys)");
    unload(&w);
}

/* The actor's log-prob temperature is derived once, from the workflow's rollout node
   (old_log_probs at the sampler's temperature): a node's override reaches it, the global key
   when no node overrides, and two rollout nodes that disagree are refused. */
static void test_worker_actor_temperature(void **state)
{
    df_dag_worker w;
    int rc = load_in_worker(*state, "dag_id: d\nnodes:\n" GEN_NODE "    config: {rollout.temperature: 0.5}\n" TRAIN_NODE,
                            &w);
    if (rc)
        fail_msg("%s", df_last_error());
    float t = 0;
    assert_int_equal(df_worker_actor_temperature(&w, &t), 0);
    assert_true(t == 0.5f);
    assert_true(w.global.cfg.actor_rollout_ref.rollout.temperature == 1.0); /* the global key is not it */
    unload(&w);
    rc = load_in_worker(*state, "dag_id: d\nnodes:\n" GEN_NODE TRAIN_NODE, &w);
    if (rc)
        fail_msg("%s", df_last_error());
    assert_int_equal(df_worker_actor_temperature(&w, &t), 0);
    assert_true(t == 1.0f);
    unload(&w);
    rc = load_in_worker(*state,
                        "dag_id: d\nnodes:\n" GEN_NODE "    config: {rollout.temperature: 0.5}\n"
                        "  - node_id: gen2\n    node_type: MODEL_INFERENCE\n    node_role: ROLLOUT\n"
                        "    dependencies: [gen]\n    config: {rollout.temperature: 0.7}\n",
                        &w);
    if (rc)
        fail_msg("%s", df_last_error());
    assert_error_mentions(df_worker_actor_temperature(&w, &t), DF_EUNSUPPORTED, "temperatures 0.5 and 0.7");
    unload(&w);
}

/* Keys that reach the engine through the worker's resolution (resolve.c): rollout.ignore_eos drops every
   end-of-sequence stop; the old-log-prob pass takes rollout.log_prob_*, the reference's pass ref.log_prob_*. */
static void test_worker_passes_keys(void **state)
{
    const char *dir = *state;
    const char *texts[] = {"one two three", "four five six"};
    df_test_tiny_model(dir, texts, 2, 300, 16, 1, 1);
    char model[512];
    snprintf(model, sizeof model, "%s/model", dir);
    for (int ignore = 0; ignore < 2; ignore++) {
        const char *ov[] = {ignore ? "actor_rollout_ref.rollout.ignore_eos=true" : "actor_rollout_ref.rollout.ignore_eos=false",
                            "actor_rollout_ref.actor.use_dynamic_bsz=true",
                            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=2000",
                            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=1000",
                            "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=false",
                            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=3"};
        df_dag_worker w;
        memset(&w, 0, sizeof w);
        w.cfg = df_test_config(NULL, "cfg.yaml", ov, 6);
        w.actor.layout.dp_size = 1;
        w.world = 1;
        assert_int_equal(df_worker_settings_init(&w.global, w.cfg), 0);
        assert_int_equal(df_tokenizer_load(model, &w.tok), 0);
        df_actor_params a, r;
        assert_int_equal(df_worker_resolve(&w, NULL), 0);
        df_worker_actor_params(&w, &a);
        df_worker_reference_params(&w, &a, &r);
        assert_int_equal(w.global.sampling.ignore_eos, ignore);
        assert_int_equal(w.global.sampling.n_stop, ignore ? 0 : 1);
        assert_int_equal(w.rollout.val_sp.n_stop, ignore ? 0 : 1);
        assert_int_equal(a.max_token_len, 2000);
        assert_int_equal(a.logprob_max_token_len, 1000);
        assert_int_equal(a.logprob_micro_batch_size, 0);
        assert_int_equal(r.logprob_max_token_len, 0);
        assert_int_equal(r.logprob_micro_batch_size, 3);
        assert_int_equal(r.max_token_len, 2000); /* the rest is the actor's */
        df_tokenizer_free(w.tok);
        df_config_free((df_config *)w.cfg);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_examples_match_builtins),
        cmocka_unit_test(test_siirl_fixture),
        cmocka_unit_test(test_fields_and_refs),
        cmocka_unit_test(test_python_only_options_warn),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_yaml_limits),
        cmocka_unit_test(test_config_with_overrides),
        cmocka_unit_test_setup_teardown(test_worker_node_overrides, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_worker_actor_temperature, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_worker_passes_keys, df_test_mkdtemp, df_test_rmtree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
