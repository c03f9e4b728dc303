/*
 * Per-agent columns (siiRL's agent_group_<g>_ prefixes, dag_utils.py add_prefix_to_dataproto /
 * remove_prefix_from_dataproto): the batch keeps every agent's columns under its prefix, and a
 * node of group g sees group g's without it, so the role nodes read "response_ids",
 * "old_log_probs", ... as in a single-agent job. What a node adds is its group's. The batch's own
 * columns (the dataset's: uid, index, data_source, ground truth, ...) are every agent's and are
 * never prefixed: they are the unprefixed columns present when a view is entered.
 */
#include "workers/dag/marft_run.h"

#include <stdlib.h>
#include <string.h>

static bool is_shared(const df_marft_run *r, const char *name)
{
    for (int i = 0; i < r->n_shared; i++)
        if (!strcmp(r->shared[i], name))
            return true;
    return false;
}

/* The unprefixed columns of b, as the batch's own. */
static int remember_shared(df_marft_run *r, const df_batch *b)
{
    int n = df_batch_num_columns(b);
    if (n > r->cap_shared) {
        void *p = realloc(r->shared, (size_t)n * sizeof *r->shared);
        if (!p)
            return df_error(DF_ENOMEM, "out of memory");
        r->shared = p;
        r->cap_shared = n;
    }
    r->n_shared = 0;
    for (int i = 0; i < n; i++) {
        const char *name = df_batch_column_at(b, i)->name;
        if (!df_marft_column_split(name, NULL, NULL))
            memcpy(r->shared[r->n_shared++], name, DF_COL_NAME_MAX);
    }
    return DF_OK;
}

/* Column names of b, a snapshot: renames move columns. *names: malloc'd [*n]. */
static int snapshot(const df_batch *b, char (**names)[DF_COL_NAME_MAX], int *n)
{
    *n = df_batch_num_columns(b);
    *names = malloc((size_t)(*n ? *n : 1) * sizeof **names);
    if (!*names)
        return df_error(DF_ENOMEM, "out of memory");
    for (int i = 0; i < *n; i++)
        memcpy((*names)[i], df_batch_column_at(b, i)->name, DF_COL_NAME_MAX);
    return DF_OK;
}

/* The view's columns (unprefixed, not the batch's own) back under group g's prefix. */
static int leave(df_marft_run *r, df_batch *b, int g)
{
    char(*names)[DF_COL_NAME_MAX], to[DF_COL_NAME_MAX];
    int n, rc = snapshot(b, &names, &n);
    for (int i = 0; !rc && i < n; i++) {
        if (df_marft_column_split(names[i], NULL, NULL) || is_shared(r, names[i]))
            continue;
        rc = df_marft_column(g, names[i], to, sizeof to);
        if (!rc)
            rc = df_batch_rename(b, names[i], to);
        if (rc)
            df_error_wrap(rc, "agent group %d's column '%s'", g, names[i]);
    }
    free(names);
    return rc;
}

/* Group g's columns without their prefix; the others' stay as they are. */
static int enter(df_marft_run *r, df_batch *b, int g)
{
    char(*names)[DF_COL_NAME_MAX];
    int n, rc = remember_shared(r, b);
    if (!rc)
        rc = snapshot(b, &names, &n);
    else
        return rc;
    for (int i = 0; !rc && i < n; i++) {
        int cg;
        const char *col;
        if (!df_marft_column_split(names[i], &cg, &col) || cg != g)
            continue;
        if (is_shared(r, col))
            rc = df_error(DF_EINTERNAL, "column '%s' is agent group %d's and the batch's own", col, g);
        else
            rc = df_batch_rename(b, names[i], col);
    }
    free(names);
    return rc;
}

int df_marft_view(df_marft_run *r, df_batch *b, int g)
{
    if (!r || !b || r->view == g)
        return DF_OK;
    int rc = r->view >= 0 ? leave(r, b, r->view) : DF_OK;
    r->view = -1;
    if (!rc && g >= 0 && !(rc = enter(r, b, g)))
        r->view = g;
    return rc;
}

int df_marft_node_view(const df_marft_run *r, const df_node *node)
{
    if (!r || node->node_role == DF_ROLE_ROLLOUT || node->node_role == DF_ROLE_ADVANTAGE)
        return -1;
    return node->agent_group;
}
