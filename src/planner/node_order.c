/* Small shared helpers of the scheduler: id-sorted node order. */
#include "planner/sched_internal.h"

#include <stdlib.h>
#include <string.h>

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
