/*
 * Fuzz target: a workflow YAML (siiRL's DAG file) through df_workflow_load_text
 * (src/planner/workflow.c: the yaml_guard limits, !Ref resolution, per-node
 * config flattened with its 1 MiB cap, dependencies, validation), then what the
 * planner does with the graph. Property of an accepted file: the graph is
 * acyclic (its topological order holds every node, each after its
 * dependencies) and copies and prints.
 */
#include "fuzz.h"

#include "distflow/dag.h"

int df_fuzz_status;

static void count_warning(void *user, const char *message)
{
    DF_FUZZ_CHECK(message != NULL);
    ++*(int *)user;
}

static void check_graph(df_task_graph *g)
{
    int n_nodes = df_task_graph_num_nodes(g);
    df_node **order = NULL;
    int n = 0;
    DF_FUZZ_CHECK(df_task_graph_topo_order(g, &order, &n) == DF_OK && n == n_nodes);
    for (int i = 0; i < n; i++)
        for (int d = 0; d < order[i]->n_dependencies; d++) {
            const char *dep = order[i]->dependencies[d];
            bool earlier = false;
            for (int j = 0; j < i && !earlier; j++)
                earlier = !strcmp(order[j]->node_id, dep);
            DF_FUZZ_CHECK(earlier);
        }
    free(order);
    char *text = NULL;
    DF_FUZZ_CHECK(df_task_graph_print(g, &text) == DF_OK && text);
    free(text);
    df_task_graph *copy = NULL;
    DF_FUZZ_CHECK(df_task_graph_copy(g, "copy", &copy) == DF_OK &&
                  df_task_graph_num_nodes(copy) == n_nodes);
    df_task_graph_free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    df_clear_error(); /* a message left by the previous input must not count for this one */
    char *text = df_fuzz_cstr(data, size);
    df_task_graph *g = NULL;
    int warnings = 0;
    df_fuzz_status = df_workflow_load_text(text, "workflow.yaml", count_warning, &warnings, &g);
    if (df_fuzz_status == DF_OK) {
        check_graph(g);
        df_task_graph_free(g);
    } else {
        DF_FUZZ_CHECK(g == NULL && df_last_error()[0] != '\0');
    }
    free(text);
    return 0;
}
