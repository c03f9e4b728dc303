/* Unit tests for include/distflow/dag.h: nodes, task graphs, pipelines, built-in
 * pipelines, executable resolution and the executor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "distflow/dag.h"
#include "util/fn_registry.h"


static df_node *node(df_task_graph *g, const char *id)
{
    df_node *n = df_task_graph_get_node(g, id);
    if (!n)
        fail_msg("node '%s' missing", id);
    return n;
}

/* Build a graph from "id:dep1,dep2" strings, COMPUTE nodes. */
static df_task_graph *graph_of(const char *const *specs, int n)
{
    df_task_graph *g;
    assert_int_equal(df_task_graph_new("g", &g), 0);
    for (int i = 0; i < n; i++) {
        char buf[128];
        strcpy(buf, specs[i]);
        char *colon = strchr(buf, ':');
        if (colon)
            *colon = '\0';
        df_node *nd;
        assert_int_equal(df_node_new(buf, DF_NODE_COMPUTE, DF_ROLE_DEFAULT, &nd), 0);
        for (char *d = colon ? strtok(colon + 1, ",") : NULL; d; d = strtok(NULL, ","))
            assert_int_equal(df_node_add_dependency(nd, d), 0);
        assert_int_equal(df_task_graph_add_node(g, nd), 0);
    }
    return g;
}

static void assert_ids(df_node **v, int n, const char *const *want, int n_want)
{
    if (n != n_want)
        fail_msg("got %d nodes, expected %d", n, n_want);
    for (int i = 0; i < n; i++)
        assert_string_equal(v[i]->node_id, want[i]);
    free(v);
}

/* df_task_graph_ancestors: what a node depends on, through other nodes too, and nothing else. */
static void test_ancestors(void **state)
{
    (void)state;
    const char *specs[] = {"a", "b:a", "d", "c:b,d", "e:a", "f:c"};
    df_task_graph *g = graph_of(specs, 6);
    bool up[6];
    assert_int_equal(df_task_graph_ancestors(g, node(g, "c"), up), 0);
    const bool want_c[] = {true, true, true, false, false, false}; /* a, b, d */
    assert_memory_equal(up, want_c, sizeof up);
    assert_int_equal(df_task_graph_ancestors(g, node(g, "f"), up), 0);
    const bool want_f[] = {true, true, true, true, false, false}; /* a, b, d, c; not e, not f */
    assert_memory_equal(up, want_f, sizeof up);
    assert_int_equal(df_task_graph_ancestors(g, node(g, "a"), up), 0);
    const bool none[6] = {false};
    assert_memory_equal(up, none, sizeof up);
    df_node *stray;
    assert_int_equal(df_node_new("stray", DF_NODE_COMPUTE, DF_ROLE_DEFAULT, &stray), 0);
    assert_error_mentions(df_task_graph_ancestors(g, stray, up), DF_EINVAL, "'stray' is not in it");
    df_node_free(stray);
    df_task_graph_free(g);
}

/* ====================================================================== enums, nodes */

static void test_enum_names(void **state)
{
    (void)state;
    assert_string_equal(df_node_type_name(DF_NODE_MODEL_INFERENCE), "MODEL_INFERENCE");
    assert_string_equal(df_node_type_name(DF_NODE_GET_FROM_BUFFER), "GET_FROM_BUFFER");
    assert_string_equal(df_node_role_name(DF_ROLE_DYNAMIC_SAMPLING), "DYNAMIC_SAMPLING");
    assert_string_equal(df_node_status_name(DF_STATUS_SKIPPED), "SKIPPED");
    assert_string_equal(df_node_type_name((df_node_type)99), "UNKNOWN");
    df_node_type t;
    df_node_role r;
    df_node_status s;
    assert_int_equal(df_node_type_parse("model_train", &t), 0); /* case-insensitive */
    assert_int_equal(t, DF_NODE_MODEL_TRAIN);
    assert_int_equal(df_node_role_parse("Reference", &r), 0);
    assert_int_equal(r, DF_ROLE_REFERENCE);
    assert_int_equal(df_node_role_parse("DATA_REBALANCE", &r), 0); /* newer siiRL workflow files */
    assert_int_equal(r, DF_ROLE_DATA_REBALANCE);
    assert_int_equal(df_node_role_parse("postprocess_sampling", &r), 0);
    assert_int_equal(r, DF_ROLE_POSTPROCESS_SAMPLING);
    assert_int_equal(df_node_status_parse("COMPLETED", &s), 0);
    assert_int_equal(s, DF_STATUS_COMPLETED);
    assert_error_mentions(df_node_type_parse("TRAIN", &t), DF_EINVAL, "'TRAIN'");
    assert_non_null(strstr(df_last_error(), "BARRIER_SYNC")); /* valid names listed */
    assert_int_equal(df_node_role_parse(NULL, &r), DF_EINVAL);
}

static void test_node_basics(void **state)
{
    (void)state;
    df_node *n;
    assert_int_equal(df_node_new("a", DF_NODE_MODEL_TRAIN, DF_ROLE_ACTOR, &n), 0);
    assert_int_equal(n->status, DF_STATUS_PENDING);
    assert_int_equal(df_node_add_dependency(n, "x"), 0);
    assert_int_equal(df_node_add_dependency(n, "y"), 0);
    assert_int_equal(df_node_add_dependency(n, "x"), 0); /* no duplicates */
    assert_int_equal(n->n_dependencies, 2);
    df_node_remove_dependency(n, "x");
    assert_int_equal(n->n_dependencies, 1);
    assert_string_equal(n->dependencies[0], "y");
    assert_int_equal(df_node_add_dependency(n, ""), DF_EINVAL);

    assert_int_equal(df_node_set_config(n, "ppo_epochs", "2"), 0);
    assert_int_equal(df_node_set_config(n, "lr", "1e-6"), 0);
    assert_int_equal(df_node_set_config(n, "ppo_epochs", "4"), 0); /* replaces */
    assert_int_equal(n->n_config, 2);
    assert_string_equal(df_node_get_config(n, "ppo_epochs"), "4");
    assert_null(df_node_get_config(n, "missing"));

    assert_int_equal(df_node_set_executable_ref(n, "DAGWorker.train_actor"), 0);
    n->status = DF_STATUS_COMPLETED;
    df_node *c;
    assert_int_equal(df_node_copy(n, &c), 0);
    assert_string_equal(c->node_id, "a");
    assert_string_equal(c->executable_ref, "DAGWorker.train_actor");
    assert_string_equal(df_node_get_config(c, "lr"), "1e-6");
    assert_int_equal(c->status, DF_STATUS_COMPLETED);
    assert_int_equal(c->node_role, DF_ROLE_ACTOR);
    df_node_free(c);
    df_node_free(n);

    /* siiRL: only COMPUTE / MODEL_TRAIN / MODEL_INFERENCE nodes take a role. */
    assert_error_mentions(df_node_new("b", DF_NODE_BARRIER_SYNC, DF_ROLE_ACTOR, &n), DF_EINVAL,
                          "node 'b'");
    assert_null(n);
    assert_int_equal(df_node_new("", DF_NODE_COMPUTE, DF_ROLE_DEFAULT, &n), DF_EINVAL);
    assert_int_equal(df_node_new("c", (df_node_type)42, DF_ROLE_DEFAULT, &n), DF_EINVAL);
}

/* ====================================================================== built-in pipelines */

static void test_grpo_pipeline(void **state)
{
    (void)state;
    df_task_graph *g;
    assert_int_equal(df_builtin_pipeline("grpo", &g), 0);
    assert_string_equal(df_task_graph_id(g), "grpo_training_pipeline");
    assert_int_equal(df_task_graph_num_nodes(g), 6);
    static const struct {
        const char *id, *ref, *dep;
        df_node_type type;
        df_node_role role;
        bool fwd;
    } want[] = {
        {"rollout_actor", "siirl.dag_worker.dagworker:DAGWorker.generate", NULL,
         DF_NODE_MODEL_INFERENCE, DF_ROLE_ROLLOUT, false},
        {"function_reward", "siirl.dag_worker.dagworker:DAGWorker.compute_reward",
         "rollout_actor", DF_NODE_COMPUTE, DF_ROLE_REWARD, false},
        {"calculate_advantages", "siirl.dag_worker.dagworker:DAGWorker.compute_advantage",
         "function_reward", DF_NODE_COMPUTE, DF_ROLE_ADVANTAGE, false},
        {"actor_old_log_prob", "siirl.dag_worker.dagworker:DAGWorker.compute_old_log_prob",
         "calculate_advantages", DF_NODE_MODEL_TRAIN, DF_ROLE_ACTOR, true},
        {"reference_log_prob", "siirl.dag_worker.dagworker:DAGWorker.compute_ref_log_prob",
         "actor_old_log_prob", DF_NODE_MODEL_TRAIN, DF_ROLE_REFERENCE, false},
        {"actor_train", "siirl.dag_worker.dagworker:DAGWorker.train_actor",
         "reference_log_prob", DF_NODE_MODEL_TRAIN, DF_ROLE_ACTOR, false},
    };
    df_node **order;
    int n;
    assert_int_equal(df_task_graph_topo_order(g, &order, &n), 0);
    assert_int_equal(n, 6);
    for (int i = 0; i < 6; i++) {
        const df_node *nd = order[i];
        assert_string_equal(nd->node_id, want[i].id);
        assert_string_equal(nd->executable_ref, want[i].ref);
        assert_int_equal(nd->node_type, want[i].type);
        assert_int_equal(nd->node_role, want[i].role);
        assert_int_equal(nd->only_forward_compute, want[i].fwd);
        assert_int_equal(nd->n_dependencies, want[i].dep ? 1 : 0);
        if (want[i].dep)
            assert_string_equal(nd->dependencies[0], want[i].dep);
        assert_int_equal(nd->status, DF_STATUS_PENDING);
        assert_null(nd->fn); /* resolution is a separate step */
    }
    free(order);
    df_node **v;
    assert_int_equal(df_task_graph_entry_nodes(g, &v, &n), 0);
    assert_ids(v, n, (const char *[]){"rollout_actor"}, 1);
    assert_int_equal(df_task_graph_exit_nodes(g, &v, &n), 0);
    assert_ids(v, n, (const char *[]){"actor_train"}, 1);
    assert_int_equal(df_task_graph_nodes_by_role(g, DF_ROLE_ACTOR, &v, &n), 0);
    assert_ids(v, n, (const char *[]){"actor_old_log_prob", "actor_train"}, 2);
    df_task_graph_free(g);
}

static void test_other_builtins(void **state)
{
    (void)state;
    df_task_graph *g;
    df_node **order;
    int n;
    assert_int_equal(df_builtin_pipeline("ppo", &g), 0);
    assert_int_equal(df_task_graph_topo_order(g, &order, &n), 0);
    assert_ids(order, n,
               (const char *[]){"rollout_actor", "function_reward", "compute_value",
                                "calculate_advantages", "actor_old_log_prob",
                                "reference_log_prob", "actor_train", "critic_train"},
               8);
    assert_true(node(g, "compute_value")->only_forward_compute);
    assert_int_equal(node(g, "critic_train")->node_role, DF_ROLE_CRITIC);
    df_task_graph_free(g);

    assert_int_equal(df_builtin_pipeline("dapo", &g), 0);
    assert_string_equal(df_task_graph_id(g), "dapo_training_pipeline");
    assert_int_equal(df_task_graph_topo_order(g, &order, &n), 0);
    assert_ids(order, n,
               (const char *[]){"rollout_actor", "function_reward", "dynamic_sampling",
                                "calculate_advantages", "actor_old_log_prob",
                                "reference_log_prob", "actor_train"},
               7);
    df_node *ds = node(g, "dynamic_sampling");
    assert_int_equal(ds->node_role, DF_ROLE_DYNAMIC_SAMPLING);
    assert_string_equal(ds->executable_ref,
                        "siirl.user_interface.filter_interface.dapo.dynamic_sampling");
    df_task_graph_free(g);

    assert_int_equal(df_builtin_pipeline("embodied", &g), 0);
    assert_int_equal(df_task_graph_num_nodes(g), 7);
    df_task_graph_free(g);

    assert_error_mentions(df_builtin_pipeline("grpo2", &g), DF_ENOTFOUND, "'grpo2'");
    assert_null(g);
}

/* ====================================================================== validation */

static void test_missing_dependency(void **state)
{
    (void)state;
    df_task_graph *g = graph_of((const char *[]){"a", "b:a,ghost"}, 2);
    assert_error_mentions(df_task_graph_validate(g), DF_EINVAL,
                          "node 'b' depends on 'ghost', which is not in the graph");
    df_node **order = (df_node **)1;
    int n = 7;
    assert_int_equal(df_task_graph_topo_order(g, &order, &n), DF_EINVAL);
    assert_null(order);
    assert_int_equal(n, 0);
    df_task_graph_free(g);

    /* Through the pipeline builder: the error names the pipeline. */
    df_pipeline *p = df_pipeline_new("pp", "test");
    const char *deps[] = {"nowhere"};
    assert_int_equal(df_pipeline_add_node(p, "x", "DAGWorker.generate", deps, 1,
                                          DF_NODE_COMPUTE, DF_ROLE_DEFAULT, false),
                     0);
    df_task_graph *out = (df_task_graph *)1;
    assert_error_mentions(df_pipeline_build(p, &out), DF_EINVAL, "invalid pipeline 'pp'");
    assert_non_null(strstr(df_last_error(), "'nowhere'"));
    assert_null(out);
    df_pipeline_free(p);
}

static void test_duplicate_id(void **state)
{
    (void)state;
    df_task_graph *g = graph_of((const char *[]){"a"}, 1);
    df_node *dup;
    assert_int_equal(df_node_new("a", DF_NODE_COMPUTE, DF_ROLE_DEFAULT, &dup), 0);
    assert_error_mentions(df_task_graph_add_node(g, dup), DF_EINVAL, "duplicate node id 'a'");
    assert_int_equal(df_task_graph_num_nodes(g), 1); /* dup was freed by the graph */
    /* An id edited into a duplicate after insertion is caught by validate. */
    df_node *b;
    assert_int_equal(df_node_new("b", DF_NODE_COMPUTE, DF_ROLE_DEFAULT, &b), 0);
    assert_int_equal(df_task_graph_add_node(g, b), 0);
    b->node_id[0] = 'a';
    assert_error_mentions(df_task_graph_validate(g), DF_EINVAL, "duplicate node id 'a'");
    df_task_graph_free(g);

    /* The builder keeps the first error and reports it at build time. */
    df_pipeline *p = df_pipeline_new("pp", NULL);
    assert_int_equal(df_pipeline_add_node(p, "x", "f", NULL, 0, DF_NODE_COMPUTE,
                                          DF_ROLE_DEFAULT, false),
                     0);
    assert_int_equal(df_pipeline_add_node(p, "x", "f", NULL, 0, DF_NODE_COMPUTE,
                                          DF_ROLE_DEFAULT, false),
                     DF_EINVAL);
    assert_int_equal(df_pipeline_add_node(p, "y", "f", NULL, 0, DF_NODE_DATA_LOAD,
                                          DF_ROLE_ACTOR, false),
                     DF_EINVAL); /* second error: not the one reported */
    df_clear_error();
    df_task_graph *out;
    assert_error_mentions(df_pipeline_build(p, &out), DF_EINVAL,
                          "node 'x' already exists in pipeline 'pp'");
    df_pipeline_free(p);
}

static void test_cycle(void **state)
{
    (void)state;
    /* entry -> a -> b -> c -> a, plus d hanging off c */
    df_task_graph *g = graph_of((const char *[]){"entry", "a:entry,c", "b:a", "c:b", "d:c"}, 5);
    assert_error_mentions(df_task_graph_validate(g), DF_EINVAL,
                          "task graph 'g': dependency cycle: a -> b -> c -> a");
    char *text;
    assert_int_equal(df_task_graph_print(g, &text), 0); /* still printable, marked invalid */
    assert_non_null(strstr(text, "invalid: task graph 'g': dependency cycle"));
    free(text);
    df_task_graph_free(g);

    g = graph_of((const char *[]){"self:self"}, 1);
    assert_error_mentions(df_task_graph_validate(g), DF_EINVAL, "dependency cycle: self -> self");
    df_task_graph_free(g);
}

/* ====================================================================== order and queries */

static void test_diamond(void **state)
{
    (void)state;
    /*     a
     *    / \      inserted as d, c, b, a: b and c become ready together after a;
     *   b   c     c was added before b, so c comes first.
     *    \ /
     *     d   */
    df_task_graph *g = graph_of((const char *[]){"d:b,c", "c:a", "b:a", "a"}, 4);
    df_node **v;
    int n;
    assert_int_equal(df_task_graph_validate(g), 0);
    assert_int_equal(df_task_graph_topo_order(g, &v, &n), 0);
    assert_ids(v, n, (const char *[]){"a", "c", "b", "d"}, 4);
    assert_int_equal(df_task_graph_entry_nodes(g, &v, &n), 0);
    assert_ids(v, n, (const char *[]){"a"}, 1);
    assert_int_equal(df_task_graph_exit_nodes(g, &v, &n), 0);
    assert_ids(v, n, (const char *[]){"d"}, 1);
    assert_int_equal(df_task_graph_downstream_nodes(g, "a", &v, &n), 0);
    assert_ids(v, n, (const char *[]){"c", "b"}, 2); /* insertion order */
    assert_int_equal(df_task_graph_downstream_nodes(g, "d", &v, &n), 0);
    assert_ids(v, n, NULL, 0);
    assert_int_equal(df_task_graph_upstream_nodes(g, "d", &v, &n), 0);
    assert_ids(v, n, (const char *[]){"b", "c"}, 2); /* declared order */
    assert_error_mentions(df_task_graph_downstream_nodes(g, "zz", &v, &n), DF_ENOTFOUND, "'zz'");

    /* Copy is deep and keeps the order; removing b rewires d to depend on c only. */
    df_task_graph *c;
    assert_int_equal(df_task_graph_copy(g, "g2", &c), 0);
    assert_string_equal(df_task_graph_id(c), "g2");
    assert_int_equal(df_task_graph_remove_node(g, "b"), 0);
    assert_int_equal(node(g, "d")->n_dependencies, 1);
    assert_int_equal(df_task_graph_topo_order(g, &v, &n), 0);
    assert_ids(v, n, (const char *[]){"a", "c", "d"}, 3);
    assert_error_mentions(df_task_graph_remove_node(g, "b"), DF_ENOTFOUND, "'b'");
    assert_int_equal(df_task_graph_topo_order(c, &v, &n), 0);
    assert_ids(v, n, (const char *[]){"a", "c", "b", "d"}, 4);
    df_task_graph_free(c);
    df_task_graph_free(g);

    /* Two independent chains: ties in insertion order (x1 before y1). */
    g = graph_of((const char *[]){"x1", "y1", "x2:x1", "y2:y1"}, 4);
    assert_int_equal(df_task_graph_topo_order(g, &v, &n), 0);
    assert_ids(v, n, (const char *[]){"x1", "y1", "x2", "y2"}, 4);
    assert_int_equal(df_task_graph_entry_nodes(g, &v, &n), 0);
    assert_ids(v, n, (const char *[]){"x1", "y1"}, 2);
    df_task_graph_free(g);

    df_task_graph *empty;
    assert_int_equal(df_task_graph_new("empty", &empty), 0);
    assert_int_equal(df_task_graph_topo_order(empty, &v, &n), 0);
    assert_ids(v, n, NULL, 0);
    df_task_graph_free(empty);
}

static void test_print(void **state)
{
    (void)state;
    df_task_graph *g;
    assert_int_equal(df_builtin_pipeline("grpo", &g), 0);
    assert_int_equal(df_node_set_config(node(g, "actor_train"), "ppo_epochs", "2"), 0);
    char *text;
    assert_int_equal(df_task_graph_print(g, &text), 0);
    assert_non_null(strstr(text, "TaskGraph 'grpo_training_pipeline' (6 nodes)\n"
                                 "[rollout_actor] MODEL_INFERENCE role=ROLLOUT status=PENDING\n"
                                 "  ref: siirl.dag_worker.dagworker:DAGWorker.generate\n"
                                 "  after: (entry node)\n"
                                 "  before: function_reward\n"));
    assert_non_null(strstr(text, "[actor_old_log_prob] MODEL_TRAIN role=ACTOR status=PENDING "
                                 "forward-only\n"));
    assert_non_null(strstr(text, "  config: ppo_epochs=2\n"
                                 "  after: reference_log_prob\n"
                                 "  before: (exit node)\n"));
    free(text);
    df_task_graph_free(g);
}

/* ====================================================================== resolution */

static int fn_generate(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    (void)ctx, (void)batch, (void)out;
    return 0;
}

static int fn_other(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    (void)ctx, (void)batch, (void)out;
    return 0;
}

static void test_resolve(void **state)
{
    (void)state;
    assert_int_equal(df_exec_register("DAGWorker.generate", fn_generate), 0);
    assert_int_equal(df_exec_register("dapo.dynamic_sampling", fn_other), 0);
    df_node_fn fn = NULL;
    assert_int_equal(df_exec_resolve("DAGWorker.generate", &fn), 0);
    assert_ptr_equal(fn, fn_generate);
    fn = NULL;
    assert_int_equal(df_exec_resolve("siirl.dag_worker.dagworker:DAGWorker.generate", &fn), 0);
    assert_ptr_equal(fn, fn_generate);
    assert_int_equal(
        df_exec_resolve("siirl.user_interface.filter_interface.dapo.dynamic_sampling", &fn), 0);
    assert_ptr_equal(fn, fn_other);
    assert_error_mentions(df_exec_resolve("DAGWorker.no_such_method", &fn), DF_ENOTFOUND,
                          "'DAGWorker.no_such_method'");
    assert_non_null(strstr(df_last_error(), "DAGWorker.generate")); /* registered names */
    assert_error_mentions(df_exec_resolve("siirl.dag_worker.dagworker:DAGWorker.nope", &fn),
                          DF_ENOTFOUND, "DAGWorker.nope");
    assert_error_mentions(df_exec_resolve("plugins/libmy.so:my_node", &fn), DF_ENOTFOUND,
                          "libmy.so:my_node"); /* no such file (tests/test_plugin.c loads real ones) */
    assert_int_equal(df_exec_resolve("", &fn), DF_EINVAL);
    assert_int_equal(df_exec_register("", fn_other), DF_EINVAL);
    assert_int_equal(df_exec_register("x", NULL), DF_EINVAL);

    /* Graph resolution: the first unresolvable node is named with its ref. */
    df_task_graph *g;
    assert_int_equal(df_builtin_pipeline("grpo", &g), 0);
    assert_error_mentions(df_task_graph_resolve(g), DF_ENOTFOUND, "node 'function_reward'");
    assert_non_null(strstr(df_last_error(), "DAGWorker.compute_reward"));
    assert_ptr_equal(node(g, "rollout_actor")->fn, fn_generate);
    const char *names[] = {"DAGWorker.compute_reward", "DAGWorker.compute_advantage",
                           "DAGWorker.compute_old_log_prob", "DAGWorker.compute_ref_log_prob",
                           "DAGWorker.train_actor"};
    for (int i = 0; i < 5; i++)
        assert_int_equal(df_exec_register(names[i], fn_other), 0);
    assert_int_equal(df_task_graph_resolve(g), 0);
    for (int i = 0; i < df_task_graph_num_nodes(g); i++)
        assert_non_null(df_task_graph_node_at(g, i)->fn);
    df_task_graph_free(g);
    for (int i = 0; i < 5; i++)
        df_exec_unregister(names[i]);
    df_exec_unregister("DAGWorker.generate");
    df_exec_unregister("dapo.dynamic_sampling");
    assert_int_equal(df_exec_resolve("DAGWorker.generate", &fn), DF_ENOTFOUND);
}

/* ====================================================================== executor */

/* ctx->user points at this log; node functions append their id. */
typedef struct {
    char calls[256];
    int flaky_failures; /* how many more times "flaky" fails with DF_ERETRY */
    df_batch *released[8];
    int n_released;
} run_log;

static run_log *g_log; /* for the release callback, which has no user pointer */

static void log_call(df_node_ctx *ctx)
{
    run_log *log = ctx->user;
    if (log->calls[0])
        strcat(log->calls, ",");
    strcat(log->calls, ctx->node->node_id);
}

static int fn_step(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    (void)batch, (void)out;
    log_call(ctx);
    return 0;
}

static int fn_flaky(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    (void)batch, (void)out;
    log_call(ctx);
    run_log *log = ctx->user;
    if (log->flaky_failures > 0) {
        log->flaky_failures--;
        return df_error(DF_ERETRY, "transient failure");
    }
    return 0;
}

/* Returns a new "batch" (any distinct pointer: the executor never dereferences it). */
static char g_batch_b;
static int fn_replace(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    log_call(ctx);
    assert_ptr_not_equal(batch, (df_batch *)&g_batch_b);
    out->batch = (df_batch *)&g_batch_b;
    return 0;
}

static int fn_expect_b(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    (void)out;
    log_call(ctx);
    assert_ptr_equal(batch, (df_batch *)&g_batch_b);
    assert_int_equal(ctx->step, 42);
    return 0;
}

static void release(df_batch *b) { g_log->released[g_log->n_released++] = b; }

static df_task_graph *run_graph(df_node_fn middle, int retry_limit)
{
    /* load -> middle -> (replace -> check) */
    df_task_graph *g = graph_of((const char *[]){"load", "flaky:load", "replace:flaky",
                                                 "check:replace"},
                                4);
    node(g, "load")->fn = fn_step;
    node(g, "flaky")->fn = middle;
    node(g, "flaky")->retry_limit = retry_limit;
    node(g, "replace")->fn = fn_replace;
    node(g, "check")->fn = fn_expect_b;
    return g;
}

static void test_run_ok_with_retry(void **state)
{
    (void)state;
    run_log log = {.flaky_failures = 1};
    g_log = &log;
    df_task_graph *g = run_graph(fn_flaky, 1);
    df_metrics *m = df_metrics_new();
    char batch_a;
    df_batch *batch = (df_batch *)&batch_a;
    df_node_ctx tmpl = {.step = 42, .metrics = m, .user = &log};
    df_run_opts opts = {.release_batch = release, .record_timing = true};
    assert_int_equal(df_task_graph_run(g, &tmpl, &batch, &opts), 0);
    assert_string_equal(log.calls, "load,flaky,flaky,replace,check"); /* flaky ran twice */
    for (int i = 0; i < 4; i++)
        assert_int_equal(df_task_graph_node_at(g, i)->status, DF_STATUS_COMPLETED);
    assert_int_equal(node(g, "flaky")->retries_done, 1);
    assert_ptr_equal(batch, (df_batch *)&g_batch_b); /* replaced batch handed back */
    assert_int_equal(log.n_released, 1);
    assert_ptr_equal(log.released[0], (df_batch *)&batch_a); /* the old one released */
    assert_true(df_metrics_has(m, "timing_s/flaky"));
    assert_true(df_metrics_get(m, "timing_s/check", -1) >= 0);

    /* A second run resets statuses and retry counters. */
    log = (run_log){.flaky_failures = 0};
    batch = (df_batch *)&batch_a;
    assert_int_equal(df_task_graph_run(g, &tmpl, &batch, NULL), 0);
    assert_string_equal(log.calls, "load,flaky,replace,check");
    assert_int_equal(node(g, "flaky")->retries_done, 0);
    df_metrics_free(m);
    df_task_graph_free(g);
}

static bool skip_flaky(void *user, const df_node *n)
{
    (void)user;
    return !strcmp(n->node_id, "flaky");
}

/* A skipped node (df_run_opts.skip_node: train_cycle) is not called and leaves the batch as it was. */
static void test_run_skip_node(void **state)
{
    (void)state;
    run_log log = {.flaky_failures = 100};
    g_log = &log;
    df_task_graph *g = run_graph(fn_flaky, 0);
    char batch_a;
    df_batch *batch = (df_batch *)&batch_a;
    df_node_ctx tmpl = {.step = 42, .user = &log};
    df_run_opts opts = {.release_batch = release, .skip_node = skip_flaky};
    assert_int_equal(df_task_graph_run(g, &tmpl, &batch, &opts), 0);
    assert_string_equal(log.calls, "load,replace,check");
    assert_int_equal(node(g, "flaky")->status, DF_STATUS_SKIPPED);
    assert_int_equal(node(g, "check")->status, DF_STATUS_COMPLETED);
    df_task_graph_free(g);
}

static void test_run_failure(void **state)
{
    (void)state;
    run_log log = {.flaky_failures = 100};
    g_log = &log;
    df_task_graph *g = run_graph(fn_flaky, 1);
    df_batch *batch = NULL;
    df_node_ctx tmpl = {.user = &log};
    int rc = df_task_graph_run(g, &tmpl, &batch, NULL);
    assert_error_mentions(rc, DF_ERETRY, "task graph 'g': node 'flaky'");
    assert_non_null(strstr(df_last_error(), "after 2 attempts"));
    assert_non_null(strstr(df_last_error(), "transient failure"));
    assert_string_equal(log.calls, "load,flaky,flaky"); /* one retry, then give up */
    assert_int_equal(node(g, "load")->status, DF_STATUS_COMPLETED);
    assert_int_equal(node(g, "flaky")->status, DF_STATUS_FAILED);
    assert_int_equal(node(g, "replace")->status, DF_STATUS_SKIPPED);
    assert_int_equal(node(g, "check")->status, DF_STATUS_SKIPPED);
    assert_null(batch);

    /* retry_limit 0: no retry at all. */
    log = (run_log){.flaky_failures = 1};
    node(g, "flaky")->retry_limit = 0;
    assert_int_equal(df_task_graph_run(g, &tmpl, &batch, NULL), DF_ERETRY);
    assert_string_equal(log.calls, "load,flaky");
    assert_non_null(strstr(df_last_error(), "node 'flaky' (no ref) failed: transient failure"));
    df_task_graph_free(g);
}

static void test_run_resolves_and_skips(void **state)
{
    (void)state;
    run_log log = {0};
    g_log = &log;
    /* A node with only a ref is resolved at run time; one with neither is SKIPPED. */
    df_task_graph *g = graph_of((const char *[]){"barrier", "work:barrier"}, 2);
    assert_int_equal(df_node_set_executable_ref(node(g, "work"), "test.step"), 0);
    df_node_ctx tmpl = {.user = &log};
    df_batch *batch = NULL;
    assert_error_mentions(df_task_graph_run(g, &tmpl, &batch, NULL), DF_ENOTFOUND,
                          "node 'work'");
    assert_int_equal(node(g, "work")->status, DF_STATUS_FAILED);
    assert_int_equal(df_exec_register("test.step", fn_step), 0);
    assert_int_equal(df_task_graph_run(g, &tmpl, &batch, NULL), 0);
    assert_int_equal(node(g, "barrier")->status, DF_STATUS_SKIPPED);
    assert_int_equal(node(g, "work")->status, DF_STATUS_COMPLETED);
    assert_string_equal(log.calls, "work");
    df_exec_unregister("test.step");

    /* An invalid graph does not run at all. */
    assert_int_equal(df_node_add_dependency(node(g, "barrier"), "work"), 0);
    log = (run_log){0};
    assert_error_mentions(df_task_graph_run(g, &tmpl, &batch, NULL), DF_EINVAL, "cycle");
    assert_string_equal(log.calls, "");
    df_task_graph_free(g);
}

/* The registry's aliases and its "closest" hint (src/util/fn_registry.h). */
static void fn_a(void) {}
static void fn_b(void) {}

static void test_registry_aliases_and_closest(void **state)
{
    (void)state;
    static const df_fn_entry builtins[] = {{"DAGWorker.generate", fn_a, NULL}};
    static const df_fn_alias aliases[] = {{"siirl.gen", "DAGWorker.generate"},
                                          {"other.dynamic_sampling", "DAGWorker.dynamic_sampling"}};
    df_fn_registry r = {.kind = "test", .builtins = builtins, .n_builtins = 1, .aliases = aliases, .n_aliases = 2};
    assert_ptr_equal(df_fn_registry_find(&r, "siirl.gen"), fn_a);
    assert_string_equal(df_fn_registry_alias_target(&r, "siirl.gen"), "DAGWorker.generate");
    assert_null(df_fn_registry_alias_target(&r, "DAGWorker.generate"));
    /* an alias of nothing registered finds nothing, and is no hint */
    assert_null(df_fn_registry_find(&r, "other.dynamic_sampling"));
    assert_string_equal(df_fn_registry_closest(&r, "x.dynamic_samplin"), "DAGWorker.generate");
    assert_int_equal(df_fn_registry_add(&r, "DAGWorker.dynamic_sampling", fn_b), 0);
    assert_ptr_equal(df_fn_registry_find(&r, "other.dynamic_sampling"), fn_b);
    /* by the function's own name first (generate vs dynamic_sampling), then the whole name */
    assert_string_equal(df_fn_registry_closest(&r, "DAGWorker.dynamic_samplin"), "DAGWorker.dynamic_sampling");
    /* a registered name before an alias that spells the same function closer */
    assert_string_equal(df_fn_registry_closest(&r, "other.dynamic_samplin"), "DAGWorker.dynamic_sampling");
    static const df_fn_alias only[] = {{"siirl.sample_groups", "DAGWorker.dynamic_sampling"}};
    r.aliases = only;
    r.n_aliases = 1;
    assert_string_equal(df_fn_registry_closest(&r, "x.sample_group"), "siirl.sample_groups");
    r.aliases = aliases;
    r.n_aliases = 2;
    assert_string_equal(df_fn_registry_closest(&r, "siirl.generate"), "DAGWorker.generate");
    /* a registered name shadows an alias of the same spelling */
    assert_int_equal(df_fn_registry_add(&r, "siirl.gen", fn_b), 0);
    assert_ptr_equal(df_fn_registry_find(&r, "siirl.gen"), fn_b);
    assert_null(df_fn_registry_alias_target(&r, "siirl.gen"));
    df_fn_registry_remove(&r, "siirl.gen");
    df_fn_registry_remove(&r, "DAGWorker.dynamic_sampling");
    free(r.extra);
    df_fn_registry r0 = {.kind = "empty"};
    assert_null(df_fn_registry_closest(&r0, "x"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_enum_names),
        cmocka_unit_test(test_ancestors),
        cmocka_unit_test(test_node_basics),
        cmocka_unit_test(test_grpo_pipeline),
        cmocka_unit_test(test_other_builtins),
        cmocka_unit_test(test_missing_dependency),
        cmocka_unit_test(test_duplicate_id),
        cmocka_unit_test(test_cycle),
        cmocka_unit_test(test_diamond),
        cmocka_unit_test(test_print),
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_run_ok_with_retry),
        cmocka_unit_test(test_run_failure),
        cmocka_unit_test(test_run_skip_node),
        cmocka_unit_test(test_run_resolves_and_skips),
        cmocka_unit_test(test_registry_aliases_and_closest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
