/* df_task_graph (include/distflow/dag.h; siiRL execution/dag/task_graph.py). */
#include "distflow/dag.h"
#include "planner/dag_internal.h"
#include "util/sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct df_task_graph {
    char *graph_id;
    df_node **nodes; /* insertion order */
    int n, cap;
    /* By node index, rebuilt from the dependency lists by refresh():
     * adj[i] = dependents of i (insertion order), rev_adj[i] = its dependencies
     * that exist (declared order). */
    int **adj, **rev_adj;
    int *n_adj, *n_rev;
    int n_built;
};

int df_task_graph_new(const char *graph_id, df_task_graph **out)
{
    *out = NULL;
    if (!graph_id || !graph_id[0])
        return df_error(DF_EINVAL, "task graph id must be a non-empty string");
    df_task_graph *g = calloc(1, sizeof *g);
    if (!g || !(g->graph_id = strdup(graph_id))) {
        free(g);
        return df_error(DF_ENOMEM, "out of memory creating task graph '%s'", graph_id);
    }
    *out = g;
    return DF_OK;
}

static void free_adj(df_task_graph *g)
{
    for (int i = 0; i < g->n_built; i++) {
        free(g->adj[i]);
        free(g->rev_adj[i]);
    }
    free(g->adj), free(g->rev_adj), free(g->n_adj), free(g->n_rev);
    g->adj = g->rev_adj = NULL;
    g->n_adj = g->n_rev = NULL;
    g->n_built = 0;
}

void df_task_graph_free(df_task_graph *g)
{
    if (!g)
        return;
    free_adj(g);
    for (int i = 0; i < g->n; i++)
        df_node_free(g->nodes[i]);
    free(g->nodes);
    free(g->graph_id);
    free(g);
}

const char *df_task_graph_id(const df_task_graph *g) { return g->graph_id; }

int df_task_graph_num_nodes(const df_task_graph *g) { return g->n; }

df_node *df_task_graph_node_at(const df_task_graph *g, int i)
{
    return i >= 0 && i < g->n ? g->nodes[i] : NULL;
}

int df_task_graph_index_of(const df_task_graph *g, const char *id)
{
    for (int i = 0; id && i < g->n; i++)
        if (!strcmp(g->nodes[i]->node_id, id))
            return i;
    return -1;
}

df_node *df_task_graph_get_node(const df_task_graph *g, const char *node_id)
{
    int i = df_task_graph_index_of(g, node_id);
    return i < 0 ? NULL : g->nodes[i];
}

int df_task_graph_ancestors(const df_task_graph *g, const df_node *node, bool *up)
{
    int me = -1;
    for (int i = 0; i < g->n; i++) {
        up[i] = false;
        me = g->nodes[i] == node ? i : me;
    }
    if (me < 0)
        return df_error(DF_EINVAL, "task graph '%s': node '%s' is not in it", g->graph_id,
                        node ? node->node_id : "(null)");
    int *stack = malloc((size_t)g->n * sizeof *stack), top = 0;
    if (!stack)
        return df_error(DF_ENOMEM, "out of memory");
    stack[top++] = me; /* depth-first over dependencies: each node pushed once */
    while (top) {
        const df_node *n = g->nodes[stack[--top]];
        for (int d = 0; d < n->n_dependencies; d++) {
            int k = df_task_graph_index_of(g, n->dependencies[d]);
            if (k >= 0 && !up[k] && k != me) {
                up[k] = true;
                stack[top++] = k;
            }
        }
    }
    free(stack);
    return DF_OK;
}

int df_task_graph_add_node(df_task_graph *g, df_node *node)
{
    if (!node)
        return df_error(DF_EINVAL, "task graph '%s': NULL node", g->graph_id);
    if (df_task_graph_index_of(g, node->node_id) >= 0) {
        int rc = df_error(DF_EINVAL, "task graph '%s': duplicate node id '%s'", g->graph_id,
                          node->node_id);
        df_node_free(node);
        return rc;
    }
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 8;
        df_node **nv = realloc(g->nodes, (size_t)cap * sizeof *nv);
        if (!nv) {
            df_node_free(node);
            return df_error(DF_ENOMEM, "task graph '%s': out of memory", g->graph_id);
        }
        g->nodes = nv;
        g->cap = cap;
    }
    g->nodes[g->n++] = node;
    return DF_OK;
}

int df_task_graph_remove_node(df_task_graph *g, const char *node_id)
{
    int i = df_task_graph_index_of(g, node_id);
    if (i < 0)
        return df_error(DF_ENOTFOUND, "task graph '%s': no node '%s' to remove", g->graph_id,
                        node_id ? node_id : "(null)");
    df_node *victim = g->nodes[i];
    memmove(&g->nodes[i], &g->nodes[i + 1], (size_t)(g->n - i - 1) * sizeof(df_node *));
    g->n--;
    for (int k = 0; k < g->n; k++)
        df_node_remove_dependency(g->nodes[k], victim->node_id);
    df_node_free(victim);
    return DF_OK;
}

/* Rebuild adj / rev_adj from the nodes' dependency lists (siiRL build_adjacency_lists). */
static int refresh(df_task_graph *g)
{
    free_adj(g);
    int n = g->n;
    g->adj = calloc((size_t)n + 1, sizeof *g->adj);
    g->rev_adj = calloc((size_t)n + 1, sizeof *g->rev_adj);
    g->n_adj = calloc((size_t)n + 1, sizeof *g->n_adj);
    g->n_rev = calloc((size_t)n + 1, sizeof *g->n_rev);
    if (!g->adj || !g->rev_adj || !g->n_adj || !g->n_rev)
        goto oom;
    g->n_built = n;
    for (int i = 0; i < n; i++)
        for (int d = 0; d < g->nodes[i]->n_dependencies; d++) {
            int j = df_task_graph_index_of(g, g->nodes[i]->dependencies[d]);
            if (j >= 0)
                g->n_adj[j]++, g->n_rev[i]++;
        }
    for (int i = 0; i < n; i++) {
        g->adj[i] = malloc(((size_t)g->n_adj[i] + 1) * sizeof(int));
        g->rev_adj[i] = malloc(((size_t)g->n_rev[i] + 1) * sizeof(int));
        if (!g->adj[i] || !g->rev_adj[i])
            goto oom;
        g->n_adj[i] = g->n_rev[i] = 0;
    }
    for (int i = 0; i < n; i++)
        for (int d = 0; d < g->nodes[i]->n_dependencies; d++) {
            int j = df_task_graph_index_of(g, g->nodes[i]->dependencies[d]);
            if (j >= 0) {
                g->adj[j][g->n_adj[j]++] = i;
                g->rev_adj[i][g->n_rev[i]++] = j;
            }
        }
    return DF_OK;
oom:
    free_adj(g);
    return df_error(DF_ENOMEM, "task graph '%s': out of memory building adjacency",
                    g->graph_id);
}

/*
 * Kahn's algorithm choosing, among ready nodes, the one added first. Writes
 * up to n indices into order and returns how many nodes were ordered (< n
 * means a cycle). done[] marks the ordered nodes. O(n^2 + E): graphs are small.
 */
static int kahn(const df_task_graph *g, int *order, char *done, int *indeg)
{
    int n = g->n, count = 0;
    for (int i = 0; i < n; i++) {
        indeg[i] = g->n_rev[i];
        done[i] = 0;
    }
    while (count < n) {
        int pick = -1;
        for (int i = 0; i < n && pick < 0; i++)
            if (!done[i] && indeg[i] == 0)
                pick = i;
        if (pick < 0)
            break;
        done[pick] = 1;
        order[count++] = pick;
        for (int k = 0; k < g->n_adj[pick]; k++)
            indeg[g->adj[pick][k]]--;
    }
    return count;
}

/* Describe one cycle among the nodes Kahn could not order: every such node has
 * an unordered dependency, so walking dependencies must revisit a node. */
static int report_cycle(const df_task_graph *g, const char *done)
{
    int n = g->n, *path = malloc((size_t)n * sizeof *path), *pos = malloc((size_t)n * sizeof *pos);
    if (!path || !pos) {
        free(path), free(pos);
        return df_error(DF_EINVAL, "task graph '%s': dependency cycle", g->graph_id);
    }
    for (int i = 0; i < n; i++)
        pos[i] = -1;
    int v = 0, len = 0;
    while (done[v])
        v++;
    while (pos[v] < 0) {
        pos[v] = len;
        path[len++] = v;
        int next = -1;
        for (int k = 0; k < g->n_rev[v] && next < 0; k++)
            if (!done[g->rev_adj[v][k]])
                next = g->rev_adj[v][k];
        v = next;
    }
    /* path[pos[v]..len) follows "depends on"; reversed it reads as "feeds".
     * Start at the cycle's earliest-added node so the message is stable. */
    int first = pos[v], cyc = len - first, start = 0;
    for (int k = 0; k < cyc; k++) /* k-th forward node is path[len - 1 - k] */
        if (path[len - 1 - k] < path[len - 1 - start])
            start = k;
    char msg[2048];
    size_t m = 0;
    for (int k = 0; k <= cyc && m < sizeof msg; k++) {
        int idx = path[len - 1 - (start + k) % cyc];
        m += (size_t)snprintf(msg + m, sizeof msg - m, k < cyc ? "%s -> " : "%s",
                              g->nodes[idx]->node_id);
    }
    free(path), free(pos);
    return df_error(DF_EINVAL, "task graph '%s': dependency cycle: %s", g->graph_id, msg);
}

/* Validate and, when order != NULL, fill it with the topological order. */
static int check_and_order(df_task_graph *g, int *order_out)
{
    for (int i = 0; i < g->n; i++) {
        const df_node *a = g->nodes[i];
        if (!a->node_id || !a->node_id[0])
            return df_error(DF_EINVAL, "task graph '%s': node %d has an empty id", g->graph_id,
                            i);
        for (int j = 0; j < i; j++)
            if (!strcmp(g->nodes[j]->node_id, a->node_id))
                return df_error(DF_EINVAL, "task graph '%s': duplicate node id '%s'",
                                g->graph_id, a->node_id);
        for (int d = 0; d < a->n_dependencies; d++)
            if (df_task_graph_index_of(g, a->dependencies[d]) < 0)
                return df_error(DF_EINVAL,
                                "task graph '%s': node '%s' depends on '%s', which is not in "
                                "the graph",
                                g->graph_id, a->node_id, a->dependencies[d]);
    }
    int rc = refresh(g);
    if (rc)
        return rc;
    int n = g->n;
    int *order = malloc(((size_t)n + 1) * sizeof *order);
    int *indeg = malloc(((size_t)n + 1) * sizeof *indeg);
    char *done = malloc((size_t)n + 1);
    if (!order || !indeg || !done) {
        free(order), free(indeg), free(done);
        return df_error(DF_ENOMEM, "task graph '%s': out of memory", g->graph_id);
    }
    int count = kahn(g, order, done, indeg);
    if (count < n)
        rc = report_cycle(g, done);
    else if (order_out)
        memcpy(order_out, order, (size_t)n * sizeof *order);
    free(order), free(indeg), free(done);
    return rc;
}

int df_task_graph_validate(df_task_graph *g) { return check_and_order(g, NULL); }

static int alloc_nodes(const df_task_graph *g, int n, df_node ***out)
{
    *out = malloc(((size_t)n + 1) * sizeof(df_node *));
    return *out ? DF_OK
                : df_error(DF_ENOMEM, "task graph '%s': out of memory", g->graph_id);
}

int df_task_graph_topo_order(df_task_graph *g, df_node ***order, int *n)
{
    *order = NULL;
    *n = 0;
    int *idx = malloc(((size_t)g->n + 1) * sizeof *idx);
    if (!idx)
        return df_error(DF_ENOMEM, "task graph '%s': out of memory", g->graph_id);
    int rc = check_and_order(g, idx);
    if (!rc)
        rc = alloc_nodes(g, g->n, order);
    if (!rc) {
        for (int i = 0; i < g->n; i++)
            (*order)[i] = g->nodes[idx[i]];
        *n = g->n;
    }
    free(idx);
    return rc;
}

/* Nodes i (insertion order) for which keep(g, i, arg) holds. */
static int collect(df_task_graph *g, int (*keep)(const df_task_graph *, int, int), int arg,
                   df_node ***out, int *n)
{
    *out = NULL;
    *n = 0;
    int rc = refresh(g);
    if (!rc)
        rc = alloc_nodes(g, g->n, out);
    if (rc)
        return rc;
    for (int i = 0; i < g->n; i++)
        if (keep(g, i, arg))
            (*out)[(*n)++] = g->nodes[i];
    return DF_OK;
}

static int is_entry(const df_task_graph *g, int i, int arg)
{
    (void)arg;
    return g->nodes[i]->n_dependencies == 0;
}

static int is_exit(const df_task_graph *g, int i, int arg)
{
    (void)arg;
    return g->n_adj[i] == 0;
}

static int depends_on(const df_task_graph *g, int i, int target)
{
    for (int k = 0; k < g->n_rev[i]; k++)
        if (g->rev_adj[i][k] == target)
            return 1;
    return 0;
}

static int has_role(const df_task_graph *g, int i, int role)
{
    return (int)g->nodes[i]->node_role == role;
}

int df_task_graph_entry_nodes(df_task_graph *g, df_node ***out, int *n)
{
    return collect(g, is_entry, 0, out, n);
}

int df_task_graph_exit_nodes(df_task_graph *g, df_node ***out, int *n)
{
    return collect(g, is_exit, 0, out, n);
}

int df_task_graph_downstream_nodes(df_task_graph *g, const char *node_id, df_node ***out,
                                   int *n)
{
    int t = df_task_graph_index_of(g, node_id);
    if (t < 0) {
        *out = NULL;
        *n = 0;
        return df_error(DF_ENOTFOUND, "task graph '%s': no node '%s'", g->graph_id,
                        node_id ? node_id : "(null)");
    }
    return collect(g, depends_on, t, out, n);
}

int df_task_graph_upstream_nodes(df_task_graph *g, const char *node_id, df_node ***out, int *n)
{
    *out = NULL;
    *n = 0;
    int t = df_task_graph_index_of(g, node_id);
    if (t < 0)
        return df_error(DF_ENOTFOUND, "task graph '%s': no node '%s'", g->graph_id,
                        node_id ? node_id : "(null)");
    int rc = refresh(g);
    if (!rc)
        rc = alloc_nodes(g, g->n_rev[t], out);
    if (rc)
        return rc;
    for (int k = 0; k < g->n_rev[t]; k++)
        (*out)[k] = g->nodes[g->rev_adj[t][k]];
    *n = g->n_rev[t];
    return DF_OK;
}

int df_task_graph_nodes_by_role(df_task_graph *g, df_node_role role, df_node ***out, int *n)
{
    return collect(g, has_role, (int)role, out, n);
}

int df_task_graph_copy(const df_task_graph *g, const char *new_id, df_task_graph **out)
{
    df_task_graph *c;
    int rc = df_task_graph_new(new_id ? new_id : g->graph_id, &c);
    for (int i = 0; !rc && i < g->n; i++) {
        df_node *node;
        rc = df_node_copy(g->nodes[i], &node);
        if (!rc)
            rc = df_task_graph_add_node(c, node);
    }
    if (rc) {
        df_task_graph_free(c);
        *out = NULL;
        return rc;
    }
    *out = c;
    return DF_OK;
}

void df_task_graph_reset(df_task_graph *g)
{
    for (int i = 0; i < g->n; i++) {
        g->nodes[i]->status = DF_STATUS_PENDING;
        g->nodes[i]->retries_done = 0;
    }
}

/* ---- text picture ------------------------------------------------------------ */

static void print_node(df_sbuf *b, const df_task_graph *g, int i)
{
    const df_node *nd = g->nodes[i];
    df_sbuf_printf(b, "[%s] %s role=%s status=%s%s\n", nd->node_id, df_node_type_name(nd->node_type),
              df_node_role_name(nd->node_role), df_node_status_name(nd->status),
              nd->only_forward_compute ? " forward-only" : "");
    if (nd->agent_group)
        df_sbuf_printf(b, "  agent_group: %d\n", nd->agent_group);
    if (nd->agent_options) {
        df_sbuf_printf(b, "  agent_options: ");
        df_agent_options_describe(nd->agent_options, b);
        df_sbuf_printf(b, "\n");
    }
    if (nd->executable_ref)
        df_sbuf_printf(b, "  ref: %s\n", nd->executable_ref);
    for (int k = 0; k < nd->n_config; k++)
        df_sbuf_printf(b, "%s%s=%s%s", k ? ", " : "  config: ", nd->config_keys[k],
                  nd->config_values[k], k + 1 == nd->n_config ? "\n" : "");
    if (nd->n_dependencies == 0)
        df_sbuf_printf(b, "  after: (entry node)\n");
    for (int k = 0; k < nd->n_dependencies; k++)
        df_sbuf_printf(b, "%s%s%s", k ? ", " : "  after: ", nd->dependencies[k],
                  k + 1 == nd->n_dependencies ? "\n" : "");
    if (!g->n_built || g->n_adj[i] == 0)
        df_sbuf_printf(b, "  before: (exit node)\n");
    for (int k = 0; g->n_built && k < g->n_adj[i]; k++)
        df_sbuf_printf(b, "%s%s%s", k ? ", " : "  before: ", g->nodes[g->adj[i][k]]->node_id,
                  k + 1 == g->n_adj[i] ? "\n" : "");
}

int df_task_graph_print(df_task_graph *g, char **out)
{
    *out = NULL;
    int *order = malloc(((size_t)g->n + 1) * sizeof *order);
    if (!order)
        return df_error(DF_ENOMEM, "task graph '%s': out of memory", g->graph_id);
    df_sbuf b = {0};
    int bad = check_and_order(g, order);
    if (bad == DF_ENOMEM) {
        free(order);
        return bad;
    }
    if (bad) { /* show the nodes as added, with the problem */
        df_sbuf_printf(&b, "TaskGraph '%s' (%d nodes, invalid: %s)\n", g->graph_id, g->n,
                  df_last_error());
        for (int i = 0; i < g->n; i++)
            order[i] = i;
        if (refresh(g))
            free_adj(g);
    } else {
        df_sbuf_printf(&b, "TaskGraph '%s' (%d nodes)\n", g->graph_id, g->n);
    }
    for (int k = 0; k < g->n; k++)
        print_node(&b, g, order[k]);
    free(order);
    if (df_sbuf_finish(&b, out))
        return df_error(DF_ENOMEM, "task graph '%s': out of memory printing", g->graph_id);
    return DF_OK;
}
