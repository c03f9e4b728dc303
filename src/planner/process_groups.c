/*
 * ProcessGroupManager: which ranks run each model node, and one named group per
 * distinct rank list (siiRL siirl/execution/scheduler/process_group_manager.py).
 * Only the specs; communicators are created from them later.
 */
#include "planner/sched_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct pg_node {
    char *id;
    char *ranks; /* [n_workers] membership */
    int group;   /* index into groups */
} pg_node;

typedef struct pg_group {
    char name[32];
    int *ranks;
    int n;
} pg_group;

struct df_process_groups {
    pg_node *nodes; /* sorted by id */
    int n_nodes;
    pg_group *groups; /* sorted by rank list */
    int n_groups;
};

void df_process_groups_free(df_process_groups *pg)
{
    if (!pg)
        return;
    for (int i = 0; i < pg->n_nodes; i++) {
        free(pg->nodes[i].id);
        free(pg->nodes[i].ranks);
    }
    for (int i = 0; i < pg->n_groups; i++)
        free(pg->groups[i].ranks);
    free(pg->nodes);
    free(pg->groups);
    free(pg);
}

/* The entry for node id (kept sorted by id), added when absent; NULL when out of memory. */
static pg_node *node_entry(df_process_groups *pg, const char *id, int n_workers, int cap)
{
    int lo = 0, hi = pg->n_nodes;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        int c = strcmp(pg->nodes[mid].id, id);
        if (!c)
            return &pg->nodes[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (pg->n_nodes == cap)
        return NULL;
    pg_node e = {strdup(id), calloc((size_t)n_workers, 1), -1};
    if (!e.id || !e.ranks) {
        free(e.id);
        free(e.ranks);
        return NULL;
    }
    memmove(&pg->nodes[lo + 1], &pg->nodes[lo], (size_t)(pg->n_nodes - lo) * sizeof e);
    pg->nodes[lo] = e;
    pg->n_nodes++;
    return &pg->nodes[lo];
}

/* Python tuple order on ascending rank lists. */
static int cmp_ranks(const int *a, int na, const int *b, int nb)
{
    for (int i = 0; i < na && i < nb; i++)
        if (a[i] != b[i])
            return a[i] < b[i] ? -1 : 1;
    return na < nb ? -1 : na > nb;
}

/* Group for node's rank list: found, or inserted in sorted position. */
static int group_of(df_process_groups *pg, const pg_node *node, int n_workers, int *scratch)
{
    int n = 0;
    for (int r = 0; r < n_workers; r++)
        if (node->ranks[r])
            scratch[n++] = r;
    int pos = 0;
    while (pos < pg->n_groups) {
        int c = cmp_ranks(pg->groups[pos].ranks, pg->groups[pos].n, scratch, n);
        if (!c)
            return pos;
        if (c > 0)
            break;
        pos++;
    }
    int *copy = malloc((size_t)(n ? n : 1) * sizeof *copy);
    if (!copy)
        return -1;
    memcpy(copy, scratch, (size_t)n * sizeof *copy);
    memmove(&pg->groups[pos + 1], &pg->groups[pos], (size_t)(pg->n_groups - pos) * sizeof *pg->groups);
    pg->groups[pos] = (pg_group){.ranks = copy, .n = n};
    pg->n_groups++;
    return pos;
}

static int collect_nodes(df_process_groups *pg, const df_schedule *s, unsigned mask, int cap)
{
    for (int r = 0; r < s->n_workers; r++) {
        df_task_graph *g = df_schedule_graph_of(s, r);
        for (int i = 0; g && i < df_task_graph_num_nodes(g); i++) {
            const df_node *node = df_task_graph_node_at(g, i);
            if (!(mask & (1u << node->node_type)))
                continue;
            pg_node *e = node_entry(pg, node->node_id, s->n_workers, cap);
            if (!e)
                return df_error(DF_ENOMEM, "out of memory");
            e->ranks[r] = 1;
        }
    }
    return DF_OK;
}

int df_process_groups_create(const df_schedule *s, unsigned type_mask, df_process_groups **out)
{
    *out = NULL;
    unsigned mask = type_mask ? type_mask
                              : (1u << DF_NODE_MODEL_INFERENCE) | (1u << DF_NODE_MODEL_TRAIN);
    int cap = 0;
    for (int i = 0; i < s->n_graphs; i++)
        cap += df_task_graph_num_nodes(s->graphs[i]);
    df_process_groups *pg = calloc(1, sizeof *pg);
    int *scratch = malloc((size_t)s->n_workers * sizeof *scratch);
    if (pg) {
        pg->nodes = calloc((size_t)(cap ? cap : 1), sizeof *pg->nodes);
        pg->groups = calloc((size_t)(cap ? cap : 1), sizeof *pg->groups);
    }
    int rc = pg && scratch && pg->nodes && pg->groups ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    if (!rc)
        rc = collect_nodes(pg, s, mask, cap);
    for (int i = 0; i < (pg ? pg->n_nodes : 0) && !rc; i++)
        if (group_of(pg, &pg->nodes[i], s->n_workers, scratch) < 0)
            rc = df_error(DF_ENOMEM, "out of memory");
    /* groups are final now: name them in order, then point each node at its own */
    for (int i = 0; !rc && i < pg->n_groups; i++)
        snprintf(pg->groups[i].name, sizeof pg->groups[i].name, "process_group_%d", i + 1);
    for (int i = 0; !rc && i < pg->n_nodes; i++)
        pg->nodes[i].group = group_of(pg, &pg->nodes[i], s->n_workers, scratch);
    free(scratch);
    if (rc) {
        df_process_groups_free(pg);
        return rc;
    }
    *out = pg;
    return DF_OK;
}

int df_process_groups_count(const df_process_groups *pg) { return pg->n_groups; }

const char *df_process_groups_name(const df_process_groups *pg, int i)
{
    return i >= 0 && i < pg->n_groups ? pg->groups[i].name : NULL;
}

const int *df_process_groups_ranks(const df_process_groups *pg, int i, int *n)
{
    *n = i >= 0 && i < pg->n_groups ? pg->groups[i].n : 0;
    return *n ? pg->groups[i].ranks : NULL;
}

const int *df_process_groups_find(const df_process_groups *pg, const char *name, int *n)
{
    for (int i = 0; name && i < pg->n_groups; i++)
        if (!strcmp(pg->groups[i].name, name))
            return df_process_groups_ranks(pg, i, n);
    *n = 0;
    return NULL;
}

int df_process_groups_num_nodes(const df_process_groups *pg) { return pg->n_nodes; }

const char *df_process_groups_node_at(const df_process_groups *pg, int i)
{
    return i >= 0 && i < pg->n_nodes ? pg->nodes[i].id : NULL;
}

const char *df_process_groups_node_group(const df_process_groups *pg, const char *node_id)
{
    for (int i = 0; node_id && i < pg->n_nodes; i++)
        if (!strcmp(pg->nodes[i].id, node_id))
            return pg->groups[pg->nodes[i].group].name;
    return NULL;
}
