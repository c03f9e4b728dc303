/* sched_internal.h (internal) — helpers shared by src/scheduler/. */
#ifndef DF_SCHED_INTERNAL_H
#define DF_SCHED_INTERNAL_H

#include "distflow/scheduler.h"
#include "util/sbuf.h"

#include <stddef.h>

/* Node indices of g sorted by node id (strcmp, = Python's str order for UTF-8), malloc'd. */
int *df_sched_sorted_ids(const df_task_graph *g);

#endif /* DF_SCHED_INTERNAL_H */
