/* Unit tests for include/distflow/scheduler.h: graph splitting, the task
 * scheduler, process groups and the `distflow plan` command. Expected values
 * are derived by hand from siiRL's algorithms (task_loader.py,
 * task_scheduler.py, process_group_manager.py); the comments say how. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distflow/config.h"
#include "distflow/model.h"
#include "distflow/scheduler.h"
#include "testutil.h"
#include "util/fsutil.h"

/* Build a graph from "id:TYPE:dep1,dep2" specs (TYPE: C compute, T train, I inference). */
static df_task_graph *graph_of(const char *gid, const char *const *specs, int n)
{
    df_task_graph *g;
    assert_int_equal(df_task_graph_new(gid, &g), 0);
    for (int i = 0; i < n; i++) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", specs[i]);
        char *type = strchr(buf, ':');
        *type++ = 0;
        char *deps = strchr(type, ':');
        *deps++ = 0;
        df_node_type t = *type == 'T' ? DF_NODE_MODEL_TRAIN : *type == 'I' ? DF_NODE_MODEL_INFERENCE : DF_NODE_COMPUTE;
        df_node *nd;
        assert_int_equal(df_node_new(buf, t, DF_ROLE_DEFAULT, &nd), 0);
        for (char *d = strtok(deps, ","); d; d = strtok(NULL, ","))
            assert_int_equal(df_node_add_dependency(nd, d), 0);
        assert_int_equal(df_task_graph_add_node(g, nd), 0);
    }
    return g;
}

/* "A,B,C": the node ids of g in order. */
static void assert_nodes(df_task_graph *g, const char *want)
{
    char got[512] = "";
    for (int i = 0; i < df_task_graph_num_nodes(g); i++) {
        strcat(got, i ? "," : "");
        strcat(got, df_task_graph_node_at(g, i)->node_id);
    }
    assert_string_equal(got, want);
}

static void assert_deps(df_task_graph *g, const char *id, const char *want)
{
    df_node *nd = df_task_graph_get_node(g, id);
    assert_non_null(nd);
    char got[256] = "";
    for (int i = 0; i < nd->n_dependencies; i++) {
        strcat(got, i ? "," : "");
        strcat(got, nd->dependencies[i]);
    }
    assert_string_equal(got, want);
}

/* ---- splitting ----------------------------------------------------------- */

static void test_split_chain(void **state)
{
    (void)state;
    static const char *const s[] = {"A:C:", "B:T:A", "C:T:B"};
    df_task_graph *g = graph_of("chain", s, 3), **out;
    int n;
    assert_int_equal(df_task_graph_split(g, &out, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(df_task_graph_id(out[0]), "chain_split_1");
    assert_nodes(out[0], "A,B,C");
    assert_deps(out[0], "C", "B");
    df_task_graph_list_free(out, n);
    df_task_graph_free(g);
}

/* Fork at A (the only node with two children): B reaches exit D, C reaches exit E,
 * disjoint -> {ancestors(A)=P, A} + downstream(B) and + downstream(C). */
static void test_split_fan_out(void **state)
{
    (void)state;
    static const char *const s[] = {"P:C:", "A:I:P", "B:T:A", "C:T:A", "D:C:B", "E:C:C"};
    df_task_graph *g = graph_of("fo", s, 6), **out;
    int n;
    assert_int_equal(df_task_graph_split(g, &out, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(df_task_graph_id(out[0]), "fo_split_1");
    assert_nodes(out[0], "P,A,B,D");
    assert_string_equal(df_task_graph_id(out[1]), "fo_split_2");
    assert_nodes(out[1], "P,A,C,E");
    assert_deps(out[1], "C", "A");
    df_task_graph_list_free(out, n);
    df_task_graph_free(g);
}

/* One exit, so no fan-out; paths A-B-D and A-C-D share suffix D -> merge D,
 * branches [A,B] and [A,C]; D keeps only its in-branch dependency. */
static void test_split_diamond(void **state)
{
    (void)state;
    static const char *const s[] = {"A:C:", "B:T:A", "C:T:A", "D:T:B,C"};
    df_task_graph *g = graph_of("dia", s, 4), **out;
    int n;
    assert_int_equal(df_task_graph_split(g, &out, &n), 0);
    assert_int_equal(n, 2);
    assert_nodes(out[0], "A,B,D");
    assert_deps(out[0], "D", "B");
    assert_nodes(out[1], "A,C,D");
    assert_deps(out[1], "D", "C");
    assert_string_equal(df_task_graph_id(out[1]), "dia_split_2");
    /* the input is untouched */
    assert_deps(g, "D", "B,C");
    df_task_graph_list_free(out, n);
    df_task_graph_free(g);
}

/* siiRL's ex1_reconverge: two entries meeting at C; paths end ...C-D-E and
 * differ at B / B1 -> merge C, branches [A,B] and [A1,B1]. */
static void test_split_reconverge_two_entries(void **state)
{
    (void)state;
    static const char *const s[] = {"A:C:", "B:C:A", "A1:C:", "B1:C:A1", "C:C:B,B1", "D_ex1:C:C", "E_ex1:T:D_ex1"};
    df_task_graph *g = graph_of("ex1", s, 7), **out;
    int n;
    assert_int_equal(df_task_graph_split(g, &out, &n), 0);
    assert_int_equal(n, 2);
    assert_nodes(out[0], "A,B,C,D_ex1,E_ex1");
    assert_nodes(out[1], "A1,B1,C,D_ex1,E_ex1");
    assert_deps(out[1], "C", "B1");
    df_task_graph_list_free(out, n);
    df_task_graph_free(g);
}

/* Multi-agent: a shared rollout R fans out to two agents' chains with their own
 * exits -> one subgraph per agent, R copied into both, agent_group kept. */
static void test_split_multi_agent(void **state)
{
    (void)state;
    static const char *const s[] = {"R:I:", "a0_reward:C:R", "a1_reward:C:R", "a0_train:T:a0_reward",
                                    "a1_train:T:a1_reward"};
    df_task_graph *g = graph_of("ma", s, 5), **out;
    df_task_graph_get_node(g, "a1_train")->agent_group = 1;
    int n;
    assert_int_equal(df_task_graph_split(g, &out, &n), 0);
    assert_int_equal(n, 2);
    assert_nodes(out[0], "R,a0_reward,a0_train");
    assert_nodes(out[1], "R,a1_reward,a1_train");
    assert_int_equal(df_task_graph_get_node(out[1], "a1_train")->agent_group, 1);
    df_task_graph_list_free(out, n);
    df_task_graph_free(g);
}

/* Fan-out then re-convergence inside one branch: Z forks to J1 -> K1 and to
 * M, whose J2a / J2b re-converge at K2. Pass 1 splits at Z ({K1} vs {K2});
 * pass 3 splits {Z,M,J2a,J2b,K2} at merge K2 (branches [Z,M,J2a], [Z,M,J2b]).
 * As in siiRL, a fork whose children are not all disjoint keeps only the first
 * disjoint pair: with Z -> J2a / J2b directly, J2b is dropped. Two disconnected
 * chains are left whole (no fork, no shared suffix). */
static void test_split_nested_and_disconnected(void **state)
{
    (void)state;
    static const char *const s[] = {"Z:C:", "J1:C:Z", "K1:T:J1", "M:C:Z", "J2a:C:M", "J2b:C:M", "K2:T:J2a,J2b"};
    df_task_graph *g = graph_of("nest", s, 7), **out;
    int n;
    assert_int_equal(df_task_graph_split(g, &out, &n), 0);
    assert_int_equal(n, 3);
    assert_nodes(out[0], "Z,J1,K1");
    assert_nodes(out[1], "Z,M,J2a,K2");
    assert_nodes(out[2], "Z,M,J2b,K2");
    assert_string_equal(df_task_graph_id(out[2]), "nest_split_3");
    df_task_graph_list_free(out, n);
    df_task_graph_free(g);

    static const char *const q[] = {"Z:C:", "J1:C:Z", "K1:T:J1", "J2a:C:Z", "J2b:C:Z", "K2:T:J2a,J2b"};
    g = graph_of("quirk", q, 6);
    assert_int_equal(df_task_graph_split(g, &out, &n), 0);
    assert_int_equal(n, 2);
    assert_nodes(out[0], "Z,J1,K1");
    assert_nodes(out[1], "Z,J2a,K2");
    df_task_graph_list_free(out, n);
    df_task_graph_free(g);

    static const char *const d[] = {"A:C:", "B:T:A", "X:C:", "Y:T:X"};
    g = graph_of("disc", d, 4);
    assert_int_equal(df_task_graph_split(g, &out, &n), 0);
    assert_int_equal(n, 1);
    assert_nodes(out[0], "A,B,X,Y");
    df_task_graph_list_free(out, n);
    df_task_graph_free(g);
}

static void test_split_invalid_and_empty(void **state)
{
    (void)state;
    static const char *const s[] = {"A:C:B", "B:C:A"};
    df_task_graph *g = graph_of("cyc", s, 2), **out;
    int n;
    assert_int_equal(df_task_graph_split(g, &out, &n), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "cycle"));
    assert_int_equal(n, 0);
    df_task_graph_free(g);
    g = graph_of("empty", NULL, 0);
    assert_int_equal(df_task_graph_split(g, &out, &n), 0);
    assert_int_equal(n, 0);
    df_task_graph_list_free(out, n);
    df_task_graph_free(g);
}

static void test_signature(void **state)
{
    (void)state;
    static const char *const s[] = {"B:T:A", "A:C:"};
    df_task_graph *g = graph_of("x", s, 2);
    char *sig;
    assert_int_equal(df_task_graph_signature(g, &sig), 0);
    assert_string_equal(sig, "struct_nodes:n(id:A,t:COMPUTE,r:DEFAULT,d:[]);"
                             "n(id:B,t:MODEL_TRAIN,r:DEFAULT,d:[A])|struct_edges:e(A->B)");
    free(sig);
    df_task_graph_free(g);
}

/* ---- scheduler ----------------------------------------------------------- */

static void test_parse_model_params(void **state)
{
    (void)state;
    double x;
    assert_int_equal(df_parse_model_params("70B", &x), 0);
    assert_true(x == 7e10);
    assert_int_equal(df_parse_model_params("500m", &x), 0);
    assert_true(x == 5e8);
    assert_int_equal(df_parse_model_params("100K", &x), 0);
    assert_true(x == 1e5);
    assert_int_equal(df_parse_model_params("1.5B", &x), 0);
    assert_true(x == 1.5e9);
    assert_int_equal(df_parse_model_params("1000000", &x), 0);
    assert_true(x == 1e6);
    assert_int_equal(df_parse_model_params("abc", &x), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "'abc'"));
    assert_int_equal(df_parse_model_params("7X", &x), DF_EINVAL);

    static const char *const s[] = {"a:T:", "b:I:a", "c:C:b"};
    df_task_graph *g = graph_of("p", s, 3);
    assert_true(df_graph_estimate_params(g) == 0.0); /* model nodes, no sizes */
    df_node_set_config(df_task_graph_get_node(g, "a"), "model_params", "7B");
    df_node_set_config(df_task_graph_get_node(g, "b"), "model_params", "500M");
    df_node_set_config(df_task_graph_get_node(g, "c"), "model_params", "9B"); /* not a model node */
    assert_true(df_graph_estimate_params(g) == 7.5e9);
    df_task_graph_free(g);
    static const char *const c[] = {"a:C:", "b:C:a"};
    g = graph_of("q", c, 2);
    assert_true(df_graph_estimate_params(g) == 2.0); /* no model nodes: node count */
    df_task_graph_free(g);
}

/* Sizes by graph id's position in a table passed as user data. */
typedef struct sized {
    df_task_graph **g;
    const double *size;
    int n;
} sized;

static double size_of(const df_task_graph *g, void *user)
{
    const sized *t = user;
    for (int i = 0; i < t->n; i++)
        if (t->g[i] == g)
            return t->size[i];
    return 0;
}

static df_task_graph *one_node(const char *gid, const char *nid, char type)
{
    char spec[64];
    snprintf(spec, sizeof spec, "%s:%c:", nid, type);
    const char *s[] = {spec};
    return graph_of(gid, s, 1);
}

static void assert_assignment(const df_schedule *s, const int *want)
{
    for (int r = 0; r < s->n_workers; r++)
        if (s->rank_graph[r] != want[r])
            fail_msg("rank %d: subgraph %d, expected %d", r, s->rank_graph[r], want[r]);
}

static void test_schedule_single_graph(void **state)
{
    (void)state;
    df_task_graph *g = one_node("g", "a", 'T');
    df_schedule *s;
    assert_int_equal(df_schedule_create(&g, 1, 1, 1, NULL, &s), 0);
    assert_int_equal(s->n_workers, 1);
    assert_int_equal(s->rank_graph[0], 0);
    assert_ptr_equal(df_schedule_graph_of(s, 0), g);
    assert_null(df_schedule_graph_of(s, 1));
    df_schedule_free(s);
    /* 1x8: every rank on the only graph */
    assert_int_equal(df_schedule_create(&g, 1, 1, 8, NULL, &s), 0);
    static const int all0[8] = {0};
    assert_assignment(s, all0);
    assert_int_equal(s->graph_workers[0], 8);
    int *r, n;
    assert_int_equal(df_schedule_ranks_of(s, 0, &r, &n), 0);
    assert_int_equal(n, 8);
    assert_int_equal(r[7], 7);
    free(r);
    assert_int_equal(df_schedule_ranks_of(s, 1, &r, &n), DF_EINVAL);
    df_schedule_free(s);
    df_task_graph_free(g);
}

/* 2x8, two subgraphs of size 0 (model nodes without model_params): param_aware
 * falls back to even, 1 + 7 each. The first placed graph (index 0: equal keys
 * keep input order) starts on rank 0 (node 0 wins the tie on load, rank 0 beats
 * 8), then cohesion keeps it on node 0; the other fills node 1. */
static void test_schedule_2x8(void **state)
{
    (void)state;
    df_task_graph *g[2] = {one_node("g_split_1", "a", 'T'), one_node("g_split_2", "b", 'T')};
    df_schedule *s;
    assert_int_equal(df_schedule_create(g, 2, 2, 8, NULL, &s), 0);
    int want[16];
    for (int r = 0; r < 16; r++)
        want[r] = r / 8;
    assert_assignment(s, want);
    assert_int_equal(s->graph_workers[0], 8);
    assert_int_equal(s->graph_workers[1], 8);
    df_schedule_free(s);
    df_task_graph_free(g[0]);
    df_task_graph_free(g[1]);
}

/* 2x4, param_aware sizes 3, 2, 1: one each, then the 5 extra cycle over
 * [g0, g1, g2] -> 3, 3, 2. Placement order g0, g1, g2 (workers, then size).
 * g0: ranks 0,1,2 (node 0, cohesion). g1: node 1 has load 0 vs 3 -> 4,5,6.
 * g2: loads tie at 3, rank 3 beats 7 -> 3; then node 0 is full -> 7. */
static void test_schedule_param_aware_uneven(void **state)
{
    (void)state;
    df_task_graph *g[3] = {one_node("x", "a", 'T'), one_node("y", "b", 'T'), one_node("z", "c", 'T')};
    static const double size[3] = {3e9, 2e9, 1e9};
    sized t = {g, size, 3};
    df_schedule_opts o = {.apportion = DF_APPORTION_PARAM_AWARE, .size_fn = size_of, .size_user = &t};
    df_schedule *s;
    assert_int_equal(df_schedule_create(g, 3, 2, 4, &o, &s), 0);
    static const int want[8] = {0, 0, 0, 2, 1, 1, 1, 2};
    assert_assignment(s, want);
    assert_true(s->sizes[0] == 3e9);
    df_schedule_free(s);

    /* 1x8 with sizes 0.5B, 7B, 1B: size order [1, 2, 0]; extra 5 -> 1,2,0,1,2
     * gives g1=3, g2=3, g0=2; placed g1 (3, 7B), g2 (3, 1B), g0 -> 1,1,1,2,2,2,0,0 */
    static const double size2[3] = {0.5e9, 7e9, 1e9};
    t.size = size2;
    assert_int_equal(df_schedule_create(g, 3, 1, 8, &o, &s), 0);
    static const int want2[8] = {1, 1, 1, 2, 2, 2, 0, 0};
    assert_assignment(s, want2);
    df_schedule_free(s);
    for (int i = 0; i < 3; i++)
        df_task_graph_free(g[i]);
}

/* even on 1x5 with graphs "c", "a", "b" (one COMPUTE node: size 1 each): the 2
 * extra go to "a" and "b" (id order) -> c=1, a=2, b=2; placed a, b, c. */
static void test_schedule_even_remainder_by_id(void **state)
{
    (void)state;
    df_task_graph *g[3] = {one_node("c", "n", 'C'), one_node("a", "n", 'C'), one_node("b", "n", 'C')};
    df_schedule_opts o = {.apportion = DF_APPORTION_EVEN};
    df_schedule *s;
    assert_int_equal(df_schedule_create(g, 3, 1, 5, &o, &s), 0);
    static const int want[5] = {1, 1, 2, 2, 0};
    assert_assignment(s, want);
    df_schedule_free(s);
    /* without node-load and rank terms on 2x2: every score ties at (1, 0, 0)
     * for a graph's first worker, so the first machine wins, as in siiRL */
    o.no_node_load = o.no_rank_preference = true;
    assert_int_equal(df_schedule_create(g, 3, 2, 2, &o, &s), 0);
    /* a=2 (ranks 0,1); c and b have equal keys and keep the size order
     * [c, a, b], so c is placed before b: node 0 is full -> c on 2, b on 3 */
    static const int want2[4] = {1, 1, 0, 2};
    assert_assignment(s, want2);
    df_schedule_free(s);
    df_apportion a;
    assert_int_equal(df_apportion_parse("even", &a), 0);
    assert_int_equal(a, DF_APPORTION_EVEN);
    assert_int_equal(df_apportion_parse("size", &a), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "'size'"));
    for (int i = 0; i < 3; i++)
        df_task_graph_free(g[i]);
}

static void test_schedule_errors(void **state)
{
    (void)state;
    df_task_graph *g[3] = {one_node("x", "a", 'T'), one_node("y", "b", 'T'), one_node("z", "c", 'T')};
    df_schedule *s = NULL;
    assert_int_equal(df_schedule_create(g, 3, 1, 2, NULL, &s), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "3 subgraphs but only 2 workers"));
    assert_null(s);
    assert_int_equal(df_schedule_create(g, 1, 0, 8, NULL, &s), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "trainer.nnodes=0"));
    /* no graphs: every rank idle */
    assert_int_equal(df_schedule_create(g, 0, 1, 2, NULL, &s), 0);
    assert_int_equal(s->rank_graph[0], -1);
    assert_int_equal(s->rank_graph[1], -1);
    df_schedule_free(s);
    for (int i = 0; i < 3; i++)
        df_task_graph_free(g[i]);
}

/* ---- process groups ------------------------------------------------------ */

/* The 2x4 schedule of test_schedule_param_aware_uneven: g0 ranks {0,1,2},
 * g1 {4,5,6}, g2 {3,7}. gen runs on g0's ranks, gen2 on g1's, shared (in both)
 * on their union; calc is COMPUTE. Rank lists in tuple order: (0,1,2) <
 * (0,1,2,4,5,6) < (4,5,6) -> process_group_1..3. */
static void test_process_groups(void **state)
{
    (void)state;
    static const char *const a[] = {"gen:I:", "shared:T:gen"};
    static const char *const b[] = {"gen2:I:", "shared:T:gen2"};
    static const char *const c[] = {"calc:C:"};
    df_task_graph *g[3] = {graph_of("x", a, 2), graph_of("y", b, 2), graph_of("z", c, 1)};
    static const double size[3] = {3e9, 2e9, 1e9};
    sized t = {g, size, 3};
    df_schedule_opts o = {.size_fn = size_of, .size_user = &t};
    df_schedule *s;
    assert_int_equal(df_schedule_create(g, 3, 2, 4, &o, &s), 0);
    df_process_groups *pg;
    assert_int_equal(df_process_groups_create(s, 0, &pg), 0);
    assert_int_equal(df_process_groups_count(pg), 3);
    int n;
    const int *r = df_process_groups_find(pg, "process_group_2", &n);
    assert_int_equal(n, 6);
    static const int want2[6] = {0, 1, 2, 4, 5, 6};
    assert_memory_equal(r, want2, sizeof want2);
    r = df_process_groups_ranks(pg, 2, &n);
    assert_int_equal(n, 3);
    assert_int_equal(r[0], 4);
    assert_string_equal(df_process_groups_name(pg, 2), "process_group_3");
    assert_string_equal(df_process_groups_node_group(pg, "gen"), "process_group_1");
    assert_string_equal(df_process_groups_node_group(pg, "shared"), "process_group_2");
    assert_string_equal(df_process_groups_node_group(pg, "gen2"), "process_group_3");
    assert_null(df_process_groups_node_group(pg, "calc"));
    assert_null(df_process_groups_find(pg, "process_group_9", &n));
    assert_int_equal(df_process_groups_num_nodes(pg), 3);
    assert_string_equal(df_process_groups_node_at(pg, 0), "gen");
    df_process_groups_free(pg);
    /* with COMPUTE nodes too: calc on (3,7) sorts before (4,5,6) */
    unsigned mask = (1u << DF_NODE_COMPUTE) | (1u << DF_NODE_MODEL_TRAIN) | (1u << DF_NODE_MODEL_INFERENCE);
    assert_int_equal(df_process_groups_create(s, mask, &pg), 0);
    assert_int_equal(df_process_groups_count(pg), 4);
    assert_string_equal(df_process_groups_node_group(pg, "calc"), "process_group_3");
    assert_string_equal(df_process_groups_node_group(pg, "gen2"), "process_group_4");
    r = df_process_groups_find(pg, "process_group_3", &n);
    assert_int_equal(n, 2);
    assert_int_equal(r[1], 7);
    df_process_groups_free(pg);
    df_schedule_free(s);
    for (int i = 0; i < 3; i++)
        df_task_graph_free(g[i]);
}

/* ---- distflow plan --------------------------------------------------------- */

static int run_cli(const char *args, char **out)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/distflow plan %s 2>&1", DF_BINARY_DIR, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, len = 0;
    *out = malloc(cap);
    size_t k;
    while ((k = fread(*out + len, 1, cap - 1 - len, p)) > 0)
        len += k;
    (*out)[len] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void assert_has(const char *text, const char *line)
{
    if (!strstr(text, line))
        fail_msg("output lacks '%s':\n%s", line, text);
}

#define MICRO "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
static void test_cli_plan(void **state)
{
    const char *dir = *state;
    char args[1024], *out, *dot = NULL;
    /* plan checks the config as `train` on 16 ranks would: 8 prompts x 4 samples / 16 ranks = 2 per rank */
    snprintf(args, sizeof args,
             "%s/examples/gsm8k/grpo.yaml" DF_TEST_FILES " trainer.nnodes=2 trainer.n_gpus_per_node=8 " MICRO
             "=2 --world 16 --dot %s/plan.dot",
             DF_SOURCE_DIR, dir);
    assert_int_equal(run_cli(args, &out), 0);
    assert_has(out, "== planned for 16 ranks (--world)\n== pipeline grpo\n");
    assert_has(out, "[actor_train] MODEL_TRAIN role=ACTOR");
    assert_has(out, "== subgraphs (1)\n[0] grpo_training_pipeline_split_1: rollout_actor function_reward "
                    "calculate_advantages actor_old_log_prob reference_log_prob actor_train\n");
    assert_has(out, "grpo_training_pipeline_split_1: 16 workers, ranks 0-15\n");
    assert_has(out, "rank 15 (node 1) -> grpo_training_pipeline_split_1\n");
    assert_has(out, "== process groups (1)\nprocess_group_1: ranks 0-15\n");
    assert_has(out, "node rollout_actor -> process_group_1\n");
    free(out);
    char path[512];
    snprintf(path, sizeof path, "%s/plan.dot", dir);
    assert_int_equal(df_read_file(path, &dot, NULL), 0);
    assert_has(dot, "digraph \"grpo_training_pipeline\" {");
    assert_has(dot, "\"0:function_reward\" -> \"0:calculate_advantages\";");
    free(dot);

    /* a workflow file; DOT quotes and backslashes in ids are escaped */
    snprintf(path, sizeof path, "%s/wf.yaml", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("dag_id: q\"g\nnodes:\n"
          "  - {node_id: 'gen \"a\"', node_type: MODEL_INFERENCE, node_role: ROLLOUT}\n"
          "  - {node_id: 'rew\\b', node_type: COMPUTE, node_role: REWARD, dependencies: ['gen \"a\"']}\n",
          f);
    fclose(f);
    snprintf(args, sizeof args, "%s/examples/gsm8k/grpo.yaml" DF_TEST_FILES " dag.workflow_path=%s trainer.nnodes=1 "
             "trainer.n_gpus_per_node=2 --world 2 --dot %s/wf.dot", DF_SOURCE_DIR, path, dir);
    assert_int_equal(run_cli(args, &out), 0);
    assert_has(out, "== pipeline workflow\n");
    free(out);
    snprintf(path, sizeof path, "%s/wf.dot", dir);
    assert_int_equal(df_read_file(path, &dot, NULL), 0);
    assert_has(dot, "digraph \"q\\\"g\" {");
    assert_has(dot, "\"0:gen \\\"a\\\"\" -> \"0:rew\\\\b\";");
    free(dot);

    /* PPO by adv_estimator=gae; an unknown workflow is refused */
    snprintf(args, sizeof args,
             "%s/examples/gsm8k/grpo.yaml" DF_TEST_FILES " algorithm.adv_estimator=gae trainer.nnodes=1 " MICRO
             "=4 critic.ppo_micro_batch_size_per_gpu=4 critic.ppo_mini_batch_size=8 --world 8 critic.model.path="
             DF_TEST_MODEL_DIR,
             DF_SOURCE_DIR);
    assert_int_equal(run_cli(args, &out), 0);
    assert_has(out, "== pipeline ppo\n");
    assert_has(out, "rank 7 (node 0) -> ppo_training_pipeline_split_1\n");
    free(out);
    snprintf(args, sizeof args, "%s/examples/gsm8k/grpo.yaml algorithm.workflow_type=bogus", DF_SOURCE_DIR);
    assert_int_equal(run_cli(args, &out), 1);
    assert_has(out, "bogus");
    free(out);
    /* what `train` would refuse on those ranks, plan refuses with train's message */
    snprintf(args, sizeof args, "%s/examples/gsm8k/grpo.yaml trainer.nnodes=1 --world 8", DF_SOURCE_DIR);
    assert_int_equal(run_cli(args, &out), 1);
    assert_has(out, "distflow plan: error: " MICRO "=16 (");
    assert_has(out, "does not divide the per-rank mini-batch of 4 samples");
    free(out);
}

/* Without --world, plan uses the ranks `distflow train` started the same way would have (not
   trainer.nnodes x n_gpus_per_node), and checks the run's files as train does. */
static void test_cli_plan_default_world(void **state)
{
    (void)state;
    char args[1024], *out;
    snprintf(args, sizeof args, "%s/examples/gsm8k/grpo.yaml" DF_TEST_FILES, DF_SOURCE_DIR);
    assert_int_equal(run_cli(args, &out), 0);
    assert_has(out, "== planned for 1 rank (as `distflow train` started the same way; --world N for others)\n");
    assert_has(out, "grpo_training_pipeline_split_1: 1 workers, ranks 0\n");
    free(out);
    if (DF_MPIEXEC[0]) { /* under mpirun: its world, printed once (rank 0) */
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -s KILL 60 "
                 "%s --oversubscribe -np 2 %s/distflow plan %s 2>&1", DF_MPIEXEC, DF_BINARY_DIR, args);
        static char text[1 << 16];
        assert_int_equal(df_test_command(cmd, text, sizeof text), 0);
        const char *first = strstr(text, "== planned for 2 ranks (as `distflow train`");
        if (!first || strstr(first + 1, "== planned for"))
            fail_msg("mpiexec -np 2 distflow plan: not one '== planned for 2 ranks' line:\n%s", text);
        assert_has(text, "grpo_training_pipeline_split_1: 2 workers, ranks 0-1\n");
    }
    /* the model directory is checked: a hub id gets the download hint */
    snprintf(args, sizeof args, "%s/examples/gsm8k/grpo.yaml" DF_TEST_FILES
             " actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct", DF_SOURCE_DIR);
    assert_int_equal(run_cli(args, &out), 1);
    assert_has(out, "distflow plan: error: command line: actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct: "
                    "no such directory. If that is a Hugging Face hub id: distflow reads local files only, so "
                    "download it first (huggingface-cli download Qwen/Qwen2.5-0.5B-Instruct --local-dir "
                    "Qwen2.5-0.5B-Instruct)");
    free(out);
}
#undef MICRO

static df_config *config_of(const char *yaml)
{
    return df_test_config(yaml, "m.yaml", NULL, 0);
}

static void assert_model_check(df_task_graph *g, const char *yaml, const char *msg)
{
    df_config *c = config_of(yaml);
    int rc = df_task_graph_check_models(g, c);
    if (!msg)
        assert_int_equal(rc, DF_OK);
    else {
        assert_int_equal(rc, DF_EINVAL);
        if (!strstr(df_last_error(), msg))
            fail_msg("'%s' lacks '%s'", df_last_error(), msg);
    }
    df_config_free(c);
}

/* Every model node's role needs a model in the config. */
static void test_check_models(void **state)
{
    (void)state;
    df_task_graph *g;
    assert_int_equal(df_builtin_pipeline("ppo", &g), 0);
    assert_model_check(g, "trainer: {seed: 1}\n", NULL);
    assert_model_check(g, "critic: {model: {path: ''}}\n",
                       "MODEL_TRAIN node 'compute_value' has role CRITIC, but critic.model.path: the key is not set");
    df_task_graph_free(g);

    const char *specs[] = {"gen:I:", "score:I:gen"};
    g = graph_of("g", specs, 2);
    assert_model_check(g, "trainer: {seed: 1}\n", "MODEL_INFERENCE node 'gen' has role DEFAULT, but that role has no model");
    df_task_graph_get_node(g, "gen")->node_role = DF_ROLE_ROLLOUT;
    df_task_graph_get_node(g, "score")->node_role = DF_ROLE_REWARD;
    assert_model_check(g, "trainer: {seed: 1}\n",
                       "node 'score' has role REWARD, but reward_model.model.path: reward_model.enable is false");
    assert_model_check(g, "reward_model: {enable: true}\n", NULL);
    df_task_graph_free(g);
}

static double params_of(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    df_model_config mc;
    df_param_desc *d;
    int n;
    int64_t total;
    assert_int_equal(df_model_config_load(path, &mc), 0);
    assert_int_equal(df_model_layout(&mc, &d, &n, &total), 0);
    free(d);
    return (double)total;
}

/* param_aware sizes from config.json of each model node's role, or its model_params. */
static void test_plan_sizes_from_config(void **state)
{
    const char *dir = *state;
    char wf[512], yaml[2048];
    snprintf(wf, sizeof wf, "%s/fan.yaml", dir);
    FILE *f = fopen(wf, "w");
    assert_non_null(f);
    fputs("dag_id: fan\nnodes:\n"
          "  - {node_id: gen, node_type: MODEL_INFERENCE, node_role: ROLLOUT}\n"
          "  - {node_id: act, node_type: MODEL_TRAIN, node_role: ACTOR, dependencies: [gen]}\n"
          "  - {node_id: cri, node_type: MODEL_TRAIN, node_role: CRITIC, dependencies: [gen]}\n"
          "  - {node_id: cri2, node_type: MODEL_TRAIN, node_role: CRITIC, dependencies: [gen],\n"
          "     config: {model_params: 2M}}\n",
          f);
    fclose(f);
    const char *actor = DF_SOURCE_DIR "/tests/golden/tiny_qwen2";
    snprintf(yaml, sizeof yaml,
             "actor_rollout_ref: {model: {path: %s}}\ncritic: {model: {path: %s/missing}}\n"
             "dag: {workflow_path: %s}\ntrainer: {nnodes: 1, n_gpus_per_node: 4}\n",
             actor, dir, wf);
    df_config *c = config_of(yaml);
    df_plan *p;
    if (df_plan_create(c, NULL, NULL, &p))
        fail_msg("%s", df_last_error());
    /* fan-out of gen to three exits: {gen, act}, {gen, cri}, {gen, cri2} */
    assert_int_equal(p->n_subgraphs, 3);
    double a = params_of(actor);
    assert_true(a > 1000);
    double want[3] = {2 * a, a /* critic config.json missing: 0 */, a + 2e6};
    for (int i = 0; i < 3; i++)
        assert_near(p->schedule->sizes[i], want[i], 0); /* parameter counts: integers, exact in double */
    df_plan_free(p);
    df_config_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_chain),
        cmocka_unit_test(test_split_fan_out),
        cmocka_unit_test(test_split_diamond),
        cmocka_unit_test(test_split_reconverge_two_entries),
        cmocka_unit_test(test_split_multi_agent),
        cmocka_unit_test(test_split_nested_and_disconnected),
        cmocka_unit_test(test_split_invalid_and_empty),
        cmocka_unit_test(test_signature),
        cmocka_unit_test(test_parse_model_params),
        cmocka_unit_test(test_schedule_single_graph),
        cmocka_unit_test(test_schedule_2x8),
        cmocka_unit_test(test_schedule_param_aware_uneven),
        cmocka_unit_test(test_schedule_even_remainder_by_id),
        cmocka_unit_test(test_schedule_errors),
        cmocka_unit_test(test_process_groups),
        cmocka_unit_test(test_check_models),
        cmocka_unit_test_setup_teardown(test_plan_sizes_from_config, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_cli_plan, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test(test_cli_plan_default_world),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
