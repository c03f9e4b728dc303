/*
 * TaskScheduler: apportion workers to subgraphs and place them on ranks
 * (siiRL siirl/execution/scheduler/task_scheduler.py, TaskScheduler).
 */
#include "planner/sched_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int df_apportion_parse(const char *s, df_apportion *out)
{
    if (s && !strcmp(s, "even"))
        *out = DF_APPORTION_EVEN;
    else if (s && !strcmp(s, "param_aware"))
        *out = DF_APPORTION_PARAM_AWARE;
    else
        return df_error(DF_EINVAL, "unknown apportion strategy '%s' (expected even or param_aware)",
                        s ? s : "(null)");
    return DF_OK;
}

int df_parse_model_params(const char *s, double *out)
{
    *out = 0;
    if (!s || !isdigit((unsigned char)s[0]))
        return df_error(DF_EINVAL, "model_params '%s': expected a number with an optional K/M/B suffix",
                        s ? s : "(null)");
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    double scale = 1;
    if (!strcasecmp(end, "B"))
        scale = 1e9;
    else if (!strcasecmp(end, "M"))
        scale = 1e6;
    else if (!strcasecmp(end, "K"))
        scale = 1e3;
    else if (*end || errno)
        return df_error(DF_EINVAL, "model_params '%s': unknown unit (expected K, M or B)", s);
    *out = x * scale;
    return DF_OK;
}

double df_sched_graph_params(const df_task_graph *g, df_sched_params_fallback fallback, void *user)
{
    int n = df_task_graph_num_nodes(g);
    bool model = false;
    double total = 0;
    for (int i = 0; i < n; i++) {
        const df_node *node = df_task_graph_node_at(g, i);
        if (node->node_type != DF_NODE_MODEL_TRAIN && node->node_type != DF_NODE_MODEL_INFERENCE)
            continue;
        model = true;
        const char *v = df_node_get_config(node, "model_params");
        double p = 0;
        if (v && df_parse_model_params(v, &p))
            df_clear_error(), p = 0; /* siiRL counts an unreadable size as 0 */
        else if (!v && fallback)
            p = fallback(node, user);
        if (p > 0)
            total += p;
    }
    return model ? total : (double)n;
}

double df_graph_estimate_params(const df_task_graph *g)
{
    return df_sched_graph_params(g, NULL, NULL);
}

void df_schedule_free(df_schedule *s)
{
    if (!s)
        return;
    free(s->graphs);
    free(s->sizes);
    free(s->graph_workers);
    free(s->rank_graph);
    free(s);
}

/* Stable sort of graph indices by key descending (Python sorted(..., reverse=True)). */
static void sort_desc(int *idx, int n, const double *k1, const int *k2)
{
    for (int i = 1; i < n; i++) {
        int x = idx[i], j = i;
        while (j > 0) {
            int y = idx[j - 1];
            double a1 = k2 ? k2[x] : 0, b1 = k2 ? k2[y] : 0;
            bool greater = a1 > b1 || (a1 == b1 && k1[x] > k1[y]);
            if (!greater)
                break;
            idx[j] = y;
            j--;
        }
        idx[j] = x;
    }
}

/* The remainder one each to the first graphs by id (siiRL sorts by graph_id for this). */
static void apportion_even(df_schedule *s, int extra)
{
    int n = s->n_graphs;
    int *by_id = malloc((size_t)n * sizeof *by_id);
    for (int i = 0; by_id && i < n; i++) {
        int j = i;
        while (j > 0 && strcmp(df_task_graph_id(s->graphs[by_id[j - 1]]), df_task_graph_id(s->graphs[i])) > 0) {
            by_id[j] = by_id[j - 1];
            j--;
        }
        by_id[j] = i;
    }
    for (int i = 0; i < n; i++)
        s->graph_workers[by_id ? by_id[i] : i] += extra / n + (i < extra % n);
    free(by_id);
}

/* siiRL _apportion_workers_to_tasks; `order` is the subgraphs sorted by size, largest first. */
static void apportion(df_schedule *s, const int *order, df_apportion how)
{
    int n = s->n_graphs, extra = s->n_workers - n;
    for (int i = 0; i < n; i++)
        s->graph_workers[i] = 1;
    double total = 0;
    for (int i = 0; i < n; i++)
        total += s->sizes[i] > 0 ? s->sizes[i] : 0;
    if (how == DF_APPORTION_PARAM_AWARE && total > 0)
        for (int w = 0; w < extra; w++)
            s->graph_workers[order[w % n]]++;
    else
        apportion_even(s, extra);
}

/* Place the workers of graph gi one by one (siiRL's scoring loop). */
static void place(df_schedule *s, int gi, const df_schedule_opts *o, int *load)
{
    char *mine = calloc((size_t)s->nnodes, 1); /* machines already running this graph */
    int placed = 0;
    for (int w = 0; w < s->graph_workers[gi]; w++) {
        int best = -1;
        double b0 = -INFINITY, b1 = -INFINITY, b2 = -INFINITY;
        for (int m = 0; m < s->nnodes; m++) {
            int r = m * s->gpus_per_node;
            while (r < (m + 1) * s->gpus_per_node && s->rank_graph[r] >= 0)
                r++;
            if (r == (m + 1) * s->gpus_per_node)
                continue; /* machine full */
            double c0 = o->no_node_cohesion ? 0 : (!placed || (mine && mine[m])) ? 1 : 0;
            double c1 = o->no_node_load ? 0 : -(double)load[m];
            double c2 = o->no_rank_preference ? 0 : -(double)r;
            if (c0 > b0 || (c0 == b0 && (c1 > b1 || (c1 == b1 && c2 > b2)))) {
                b0 = c0, b1 = c1, b2 = c2;
                best = r;
            }
        }
        if (best < 0)
            break; /* cannot happen: workers were apportioned to fit */
        s->rank_graph[best] = gi;
        load[best / s->gpus_per_node]++;
        if (mine)
            mine[best / s->gpus_per_node] = 1;
        placed++;
    }
    free(mine);
}

static int schedule_alloc(df_schedule *s, df_task_graph *const *graphs, int n)
{
    size_t nn = (size_t)(n ? n : 1);
    s->graphs = malloc(nn * sizeof *s->graphs);
    s->sizes = calloc(nn, sizeof *s->sizes);
    s->graph_workers = calloc(nn, sizeof *s->graph_workers);
    s->rank_graph = malloc((size_t)s->n_workers * sizeof *s->rank_graph);
    if (!s->graphs || !s->sizes || !s->graph_workers || !s->rank_graph)
        return df_error(DF_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++)
        s->graphs[i] = graphs[i];
    for (int r = 0; r < s->n_workers; r++)
        s->rank_graph[r] = -1;
    return DF_OK;
}

int df_schedule_create(df_task_graph *const *graphs, int n_graphs, int nnodes, int gpus_per_node,
                       const df_schedule_opts *opts, df_schedule **out)
{
    *out = NULL;
    if (nnodes < 1 || gpus_per_node < 1 || (int64_t)nnodes * gpus_per_node > (1 << 24))
        return df_error(DF_EINVAL, "bad cluster shape: trainer.nnodes=%d x trainer.n_gpus_per_node=%d",
                        nnodes, gpus_per_node);
    if (n_graphs < 0 || n_graphs > nnodes * gpus_per_node)
        return df_error(DF_EINVAL,
                        "%d subgraphs but only %d workers (trainer.nnodes=%d x trainer.n_gpus_per_node=%d)",
                        n_graphs, nnodes * gpus_per_node, nnodes, gpus_per_node);
    df_schedule_opts dflt = {0};
    const df_schedule_opts *o = opts ? opts : &dflt;
    df_schedule *s = calloc(1, sizeof *s);
    if (!s)
        return df_error(DF_ENOMEM, "out of memory");
    *s = (df_schedule){.nnodes = nnodes, .gpus_per_node = gpus_per_node,
                       .n_workers = nnodes * gpus_per_node, .n_graphs = n_graphs};
    int *order = malloc((size_t)(n_graphs ? n_graphs : 1) * sizeof *order);
    int *load = calloc((size_t)nnodes, sizeof *load);
    int rc = order && load ? schedule_alloc(s, graphs, n_graphs) : df_error(DF_ENOMEM, "out of memory");
    if (!rc && n_graphs > 0) {
        for (int i = 0; i < n_graphs; i++) {
            s->sizes[i] = o->size_fn ? o->size_fn(graphs[i], o->size_user) : df_graph_estimate_params(graphs[i]);
            order[i] = i;
        }
        sort_desc(order, n_graphs, s->sizes, NULL);
        apportion(s, order, o->apportion);
        /* placement order: (workers, size) descending, stable over the size order */
        sort_desc(order, n_graphs, s->sizes, s->graph_workers);
        for (int i = 0; i < n_graphs; i++)
            place(s, order[i], o, load);
    }
    free(order);
    free(load);
    if (rc) {
        df_schedule_free(s);
        return rc;
    }
    *out = s;
    return DF_OK;
}

df_task_graph *df_schedule_graph_of(const df_schedule *s, int rank)
{
    if (!s || rank < 0 || rank >= s->n_workers || s->rank_graph[rank] < 0)
        return NULL;
    return s->graphs[s->rank_graph[rank]];
}

int df_schedule_ranks_of(const df_schedule *s, int graph, int **ranks, int *n)
{
    *ranks = NULL;
    *n = 0;
    if (graph < 0 || graph >= s->n_graphs)
        return df_error(DF_EINVAL, "subgraph index %d out of range [0, %d)", graph, s->n_graphs);
    int count = 0;
    for (int r = 0; r < s->n_workers; r++)
        count += s->rank_graph[r] == graph;
    if (!count)
        return DF_OK;
    if (!(*ranks = malloc((size_t)count * sizeof **ranks)))
        return df_error(DF_ENOMEM, "out of memory");
    for (int r = 0; r < s->n_workers; r++)
        if (s->rank_graph[r] == graph)
            (*ranks)[(*n)++] = r;
    return DF_OK;
}
