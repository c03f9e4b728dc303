/* Small shared helpers of the scheduler: a string builder and id-sorted node order. */
#include "scheduler/sched_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void df_sbuf_printf(df_sbuf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int k = vsnprintf(b->s ? b->s + b->len : NULL, room, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->failed = true;
            return;
        }
        if ((size_t)k < room) {
            b->len += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap - b->len <= (size_t)k)
            cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->failed = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

int df_sbuf_finish(df_sbuf *b, char **out)
{
    if (!b->failed && !b->s)
        df_sbuf_printf(b, "%s", "");
    if (b->failed) {
        free(b->s);
        *b = (df_sbuf){0};
        return df_error(DF_ENOMEM, "out of memory");
    }
    *out = b->s;
    *b = (df_sbuf){0};
    return DF_OK;
}

int *df_sched_sorted_ids(const df_task_graph *g)
{
    int n = df_task_graph_num_nodes(g);
    int *idx = malloc((size_t)(n ? n : 1) * sizeof *idx);
    if (!idx)
        return NULL;
    /* insertion sort: graphs have tens of nodes, and it is stable */
    for (int i = 0; i < n; i++) {
        int j = i;
        const char *id = df_task_graph_node_at(g, i)->node_id;
        while (j > 0 && strcmp(df_task_graph_node_at(g, idx[j - 1])->node_id, id) > 0) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = i;
    }
    return idx;
}
