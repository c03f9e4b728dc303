/*
 * Graph splitting: siiRL task_loader.discover_and_split_parallel_paths and its
 * helpers (split_by_fan_out_to_exits, split_by_reconverging_paths,
 * split_single_structure, generate_structural_signature), on index masks.
 */
#include "planner/dag_internal.h"
#include "planner/sched_internal.h"

#include <stdlib.h>
#include <string.h>

/* A graph seen as indices: adj[p * n + c] is 1 when node c depends on node p. */
typedef struct gview {
    df_task_graph *g;
    int n;
    int *by_id; /* node indices in id order */
    char *adj;
    char *is_exit;
} gview;

typedef struct glist {
    df_task_graph **a;
    int n, cap;
} glist;

static int glist_push(glist *l, df_task_graph *g)
{
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 8;
        df_task_graph **a = realloc(l->a, (size_t)cap * sizeof *a);
        if (!a) {
            df_task_graph_free(g);
            return df_error(DF_ENOMEM, "out of memory");
        }
        l->a = a;
        l->cap = cap;
    }
    l->a[l->n++] = g;
    return DF_OK;
}

/* Frees and clears: safe again after it, or after a failed view_init. */
static void view_free(gview *v)
{
    free(v->by_id);
    free(v->adj);
    free(v->is_exit);
    v->by_id = NULL, v->adj = NULL, v->is_exit = NULL;
}

static int view_init(gview *v, df_task_graph *g)
{
    int n = df_task_graph_num_nodes(g);
    size_t nn = (size_t)(n ? n : 1);
    *v = (gview){.g = g, .n = n};
    v->by_id = df_sched_sorted_ids(g);
    v->adj = calloc(nn * nn, 1);
    v->is_exit = malloc(nn);
    if (!v->by_id || !v->adj || !v->is_exit) {
        view_free(v);
        return df_error(DF_ENOMEM, "out of memory");
    }
    memset(v->is_exit, 1, nn);
    for (int c = 0; c < n; c++) {
        const df_node *node = df_task_graph_node_at(g, c);
        for (int d = 0; d < node->n_dependencies; d++) {
            int p = df_task_graph_index_of(g, node->dependencies[d]);
            if (p >= 0) {
                v->adj[(size_t)p * nn + (size_t)c] = 1;
                v->is_exit[p] = 0;
            }
        }
    }
    return DF_OK;
}

static bool edge(const gview *v, int p, int c) { return v->adj[(size_t)p * (size_t)v->n + (size_t)c]; }

/* mask |= start and everything reachable from it (siiRL get_all_downstream_nodes_recursive). */
static void mark_downstream(const gview *v, int start, char *mask)
{
    if (mask[start])
        return;
    mask[start] = 1;
    for (int c = 0; c < v->n; c++)
        if (edge(v, start, c))
            mark_downstream(v, c, mask);
}

/* mask |= every ancestor of node (not the node itself; siiRL get_all_ancestors). */
static void mark_ancestors(const gview *v, int node, char *mask)
{
    for (int p = 0; p < v->n; p++)
        if (edge(v, p, node) && !mask[p]) {
            mask[p] = 1;
            mark_ancestors(v, p, mask);
        }
}

/*
 * The subgraph of the masked nodes, in source insertion order, with dependencies
 * cut to the mask. *out = NULL when it is empty or invalid (siiRL logs and skips).
 */
static int make_subgraph(const gview *v, const char *mask, const char *id, df_task_graph **out)
{
    df_task_graph *sg;
    *out = NULL;
    int rc = df_task_graph_new(id, &sg);
    for (int i = 0; i < v->n && !rc; i++) {
        if (!mask[i])
            continue;
        const df_node *orig = df_task_graph_node_at(v->g, i);
        df_node *copy;
        if ((rc = df_node_copy(orig, &copy)))
            break;
        for (int d = 0; d < orig->n_dependencies; d++) {
            int p = df_task_graph_index_of(v->g, orig->dependencies[d]);
            if (p < 0 || !mask[p])
                df_node_remove_dependency(copy, orig->dependencies[d]);
        }
        rc = df_task_graph_add_node(sg, copy);
    }
    if (rc) {
        df_task_graph_free(sg);
        return rc;
    }
    if (df_task_graph_num_nodes(sg) == 0 || df_task_graph_validate(sg)) {
        df_clear_error();
        df_task_graph_free(sg);
        return DF_OK;
    }
    *out = sg;
    return DF_OK;
}

static int push_subgraph(const gview *v, const char *mask, const char *id, glist *out)
{
    df_task_graph *sg;
    int rc = make_subgraph(v, mask, id, &sg);
    return rc || !sg ? rc : glist_push(out, sg);
}

/* ---- fan-out to distinct exits ------------------------------------------- */

/* Try the children combination `combo` of fork; pushes subgraphs when their exits are disjoint. */
static int try_fan_combo(const gview *v, int fork, char **down, const int *combo, int r, int k,
                         glist *out)
{
    size_t n = (size_t)v->n;
    char *seen = calloc(n, 1), *mask = malloc(n), *anc = calloc(n, 1);
    int rc = seen && mask && anc ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    bool disjoint = true;
    for (int i = 0; i < r && !rc && disjoint; i++)
        for (size_t x = 0; x < n; x++)
            if (down[combo[i]][x] && v->is_exit[x]) {
                disjoint = disjoint && !seen[x];
                seen[x] = 1;
            }
    if (!rc && disjoint) {
        mark_ancestors(v, fork, anc);
        anc[fork] = 1;
        const char *gid = df_task_graph_id(v->g);
        const char *fid = df_task_graph_node_at(v->g, fork)->node_id;
        for (int i = 0; i < r && !rc; i++) {
            for (size_t x = 0; x < n; x++)
                mask[x] = (char)(anc[x] | down[combo[i]][x]);
            char id[512];
            snprintf(id, sizeof id, "%s_fan%d_%s_b%d", gid, k, fid, i + 1);
            rc = push_subgraph(v, mask, id, out);
        }
    }
    free(seen);
    free(mask);
    free(anc);
    return rc;
}

/* Next r-combination of 0..m-1 in itertools.combinations order; false after the last. */
static bool next_combo(int *c, int r, int m)
{
    int i = r - 1;
    while (i >= 0 && c[i] == m - r + i)
        i--;
    if (i < 0)
        return false;
    c[i]++;
    for (int j = i + 1; j < r; j++)
        c[j] = c[j - 1] + 1;
    return true;
}

/* Children of fork (id order) that reach an exit, with their downstream masks. */
static int fork_branches(const gview *v, int fork, char **down, int *m)
{
    *m = 0;
    for (int j = 0; j < v->n; j++) {
        int c = v->by_id[j];
        if (!edge(v, fork, c))
            continue;
        char *d = calloc((size_t)v->n, 1);
        if (!d)
            return df_error(DF_ENOMEM, "out of memory");
        mark_downstream(v, c, d);
        bool reaches = false;
        for (int x = 0; x < v->n; x++)
            reaches = reaches || (d[x] && v->is_exit[x]);
        if (reaches)
            down[(*m)++] = d;
        else
            free(d);
    }
    return DF_OK;
}

static int split_fan_out(const gview *v, int k, glist *out)
{
    int n_exits = 0, start = out->n, rc = DF_OK;
    for (int i = 0; i < v->n; i++)
        n_exits += v->is_exit[i];
    if (n_exits <= 1)
        return DF_OK;
    char **down = calloc((size_t)v->n, sizeof *down);
    int *combo = malloc((size_t)v->n * sizeof *combo);
    if (!down || !combo)
        rc = df_error(DF_ENOMEM, "out of memory");
    for (int f = 0; f < v->n && !rc && out->n == start; f++) {
        int fork = v->by_id[f], m = 0;
        rc = fork_branches(v, fork, down, &m);
        for (int r = m; r >= 2 && !rc && out->n == start; r--) {
            for (int i = 0; i < r; i++)
                combo[i] = i;
            do
                rc = try_fan_combo(v, fork, down, combo, r, k, out);
            while (!rc && out->n == start && next_combo(combo, r, m));
        }
        for (int i = 0; i < m; i++)
            free(down[i]);
    }
    free(down);
    free(combo);
    return rc;
}

/* ---- re-converging paths ------------------------------------------------- */

typedef struct path {
    int *v;
    int len;
} path;

typedef struct plist {
    path *a;
    int n, cap;
} plist;

static int plist_push(plist *l, const int *v, int len)
{
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 8;
        path *a = realloc(l->a, (size_t)cap * sizeof *a);
        if (!a)
            return df_error(DF_ENOMEM, "out of memory");
        l->a = a;
        l->cap = cap;
    }
    int *copy = malloc((size_t)(len ? len : 1) * sizeof *copy);
    if (!copy)
        return df_error(DF_ENOMEM, "out of memory");
    memcpy(copy, v, (size_t)len * sizeof *copy);
    l->a[l->n++] = (path){copy, len};
    return DF_OK;
}

static bool plist_has(const plist *l, const int *v, int len)
{
    for (int i = 0; i < l->n; i++)
        if (l->a[i].len == len && !memcmp(l->a[i].v, v, (size_t)len * sizeof *v))
            return true;
    return false;
}

static void plist_free(plist *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->a[i].v);
    free(l->a);
    *l = (plist){0};
}

/* All simple paths cur -> end, children in id order (siiRL find_all_paths_dfs). */
static int all_paths(const gview *v, int cur, int end, int *buf, int depth, plist *out)
{
    buf[depth++] = cur;
    if (cur == end)
        return plist_push(out, buf, depth);
    for (int j = 0; j < v->n; j++) {
        int c = v->by_id[j];
        int rc = edge(v, cur, c) ? all_paths(v, c, end, buf, depth, out) : DF_OK;
        if (rc)
            return rc;
    }
    return DF_OK;
}

/* Merge candidates: merge node -> the branches (path prefixes) that meet there. */
typedef struct cand {
    int merge;
    plist branches;
} cand;

/* Compare two paths from their ends; record their branches under the merge node. */
static int add_candidate(const path *p1, const path *p2, cand *cands, int *n_cands)
{
    int m1 = -1, m2 = -1;
    for (int k = 0; k < p1->len && k < p2->len; k++) {
        if (p1->v[p1->len - 1 - k] != p2->v[p2->len - 1 - k])
            break;
        m1 = p1->len - 1 - k;
        m2 = p2->len - 1 - k;
    }
    if (m1 <= 0 || m2 <= 0 || (m1 == m2 && !memcmp(p1->v, p2->v, (size_t)m1 * sizeof(int))))
        return DF_OK;
    int merge = p1->v[m1], c = 0;
    while (c < *n_cands && cands[c].merge != merge)
        c++;
    if (c == *n_cands)
        cands[(*n_cands)++] = (cand){.merge = merge};
    plist *b = &cands[c].branches;
    int rc = plist_has(b, p1->v, m1) ? DF_OK : plist_push(b, p1->v, m1);
    if (!rc && !plist_has(b, p2->v, m2))
        rc = plist_push(b, p2->v, m2);
    return rc;
}

/* One subgraph per branch of a merge (siiRL split_single_structure). */
static int split_single(const gview *v, const cand *cd, int k, int split_idx, glist *out)
{
    size_t n = (size_t)v->n;
    char *common = calloc(n, 1), *mask = malloc(n);
    int rc = common && mask ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    if (!rc)
        mark_downstream(v, cd->merge, common);
    const char *mid = df_task_graph_node_at(v->g, cd->merge)->node_id;
    for (int b = 0; b < cd->branches.n && !rc; b++) {
        memcpy(mask, common, n);
        for (int i = 0; i < cd->branches.a[b].len; i++)
            mask[cd->branches.a[b].v[i]] = 1;
        char id[512];
        snprintf(id, sizeof id, "%s_reconv%d_%s_s%d_b%d", df_task_graph_id(v->g), k, mid, split_idx,
                 b + 1);
        rc = push_subgraph(v, mask, id, out);
    }
    free(common);
    free(mask);
    return rc;
}

static int split_reconverging(const gview *v, int k, glist *out)
{
    plist paths = {0};
    int *buf = malloc((size_t)(v->n ? v->n : 1) * sizeof *buf);
    cand *cands = NULL;
    int n_cands = 0, rc = buf ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    /* entry and exit nodes in insertion order, as siiRL's get_entry_nodes / get_exit_nodes */
    for (int e = 0; e < v->n && !rc; e++) {
        if (df_task_graph_node_at(v->g, e)->n_dependencies)
            continue;
        for (int x = 0; x < v->n && !rc; x++)
            if (v->is_exit[x])
                rc = all_paths(v, e, x, buf, 0, &paths);
    }
    if (!rc && paths.n > 1 && !(cands = calloc((size_t)v->n, sizeof *cands)))
        rc = df_error(DF_ENOMEM, "out of memory");
    for (int i = 0; i < paths.n && cands && !rc; i++)
        for (int j = i + 1; j < paths.n && !rc; j++)
            rc = add_candidate(&paths.a[i], &paths.a[j], cands, &n_cands);
    /* merge nodes are distinct per candidate, so siiRL's signature dedupe never fires */
    for (int c = 0; c < n_cands && !rc; c++)
        if (cands[c].branches.n >= 2)
            rc = split_single(v, &cands[c], k, c, out);
    for (int c = 0; c < n_cands; c++)
        plist_free(&cands[c].branches);
    free(cands);
    plist_free(&paths);
    free(buf);
    return rc;
}

/* ---- signature and the driver ------------------------------------------- */

static int view_signature(const gview *vp, char **out)
{
    const gview v = *vp;
    df_task_graph *g = v.g;
    df_sbuf b = {0};
    df_sbuf_printf(&b, "struct_nodes:");
    for (int j = 0; j < v.n; j++) {
        const df_node *node = df_task_graph_node_at(g, v.by_id[j]);
        df_sbuf_printf(&b, "%sn(id:%s,t:%s,r:%s,d:[", j ? ";" : "", node->node_id,
                       df_node_type_name(node->node_type), df_node_role_name(node->node_role));
        /* sorted dependencies = parents in id order */
        bool first = true;
        for (int i = 0; i < v.n; i++)
            if (edge(&v, v.by_id[i], v.by_id[j])) {
                df_sbuf_printf(&b, "%s%s", first ? "" : ",", df_task_graph_node_at(g, v.by_id[i])->node_id);
                first = false;
            }
        df_sbuf_printf(&b, "])");
    }
    df_sbuf_printf(&b, "|struct_edges:");
    bool first = true;
    for (int i = 0; i < v.n; i++)
        for (int j = 0; j < v.n; j++)
            if (edge(&v, v.by_id[i], v.by_id[j])) {
                df_sbuf_printf(&b, "%se(%s->%s)", first ? "" : ",",
                               df_task_graph_node_at(g, v.by_id[i])->node_id,
                               df_task_graph_node_at(g, v.by_id[j])->node_id);
                first = false;
            }
    return df_sbuf_finish(&b, out);
}

int df_task_graph_signature(df_task_graph *g, char **out)
{
    gview v;
    int rc = view_init(&v, g);
    if (!rc)
        rc = view_signature(&v, out);
    view_free(&v);
    return rc;
}

void df_task_graph_list_free(df_task_graph **graphs, int n)
{
    for (int i = 0; graphs && i < n; i++)
        df_task_graph_free(graphs[i]);
    free(graphs);
}

static bool sig_seen(char **sigs, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(sigs[i], s))
            return true;
    return false;
}

/* Split the view's graph once (fan-out first, then re-convergence) into queue; *split tells
   whether it did. */
static int split_once(const gview *v, int k, glist *queue, bool *split)
{
    int before = queue->n, rc = split_fan_out(v, k, queue);
    if (!rc && queue->n == before)
        rc = split_reconverging(v, k, queue);
    *split = queue->n > before;
    return rc;
}

int df_task_graph_split(df_task_graph *g, df_task_graph ***out, int *n)
{
    *out = NULL;
    *n = 0;
    int rc = df_task_graph_validate(g);
    if (rc)
        return df_error_wrap(rc, "cannot split");
    if (df_task_graph_num_nodes(g) == 0)
        return DF_OK;
    glist queue = {0}, final = {0};
    char **sigs = NULL;
    int n_sigs = 0, k = 0, head = 0;
    df_task_graph *first;
    if (!(rc = df_task_graph_copy(g, NULL, &first)))
        rc = glist_push(&queue, first);
    while (!rc && head < queue.n) {
        df_task_graph *cur = queue.a[head];
        queue.a[head++] = NULL;
        char *sig = NULL;
        bool split = false;
        gview v; /* one view for both the signature and the split */
        if ((rc = view_init(&v, cur)) || (rc = view_signature(&v, &sig)) || sig_seen(sigs, n_sigs, sig)) {
            view_free(&v);
            free(sig);
            df_task_graph_free(cur);
            continue;
        }
        char **grown = realloc(sigs, (size_t)(n_sigs + 1) * sizeof *sigs);
        if (!grown) {
            view_free(&v);
            free(sig);
            df_task_graph_free(cur);
            rc = df_error(DF_ENOMEM, "out of memory");
            break;
        }
        sigs = grown;
        sigs[n_sigs++] = sig;
        rc = split_once(&v, ++k, &queue, &split);
        view_free(&v);
        if (rc || split)
            df_task_graph_free(cur);
        else
            rc = glist_push(&final, cur);
    }
    for (int i = 0; i < final.n && !rc; i++) {
        df_task_graph *renamed;
        char id[512];
        snprintf(id, sizeof id, "%s_split_%d", df_task_graph_id(g), i + 1);
        if (!(rc = df_task_graph_copy(final.a[i], id, &renamed))) {
            df_task_graph_free(final.a[i]);
            final.a[i] = renamed;
        }
    }
    df_task_graph_list_free(queue.a, queue.n);
    for (int i = 0; i < n_sigs; i++)
        free(sigs[i]);
    free(sigs);
    if (rc) {
        df_task_graph_list_free(final.a, final.n);
        return rc;
    }
    *out = final.a;
    *n = final.n;
    return DF_OK;
}
