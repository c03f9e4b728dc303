/* sched_internal.h (internal) — helpers shared by src/scheduler/. */
#ifndef DF_SCHED_INTERNAL_H
#define DF_SCHED_INTERNAL_H

#include "distflow/scheduler.h"

#include <stddef.h>

/* A growable string; `failed` sticks after the first allocation failure. */
typedef struct df_sbuf {
    char *s;
    size_t len, cap;
    bool failed;
} df_sbuf;

void df_sbuf_printf(df_sbuf *b, const char *fmt, ...) DF_PRINTF(2, 3);
/* Hand the string to the caller (*out), or DF_ENOMEM (freeing it) when an append failed. */
int df_sbuf_finish(df_sbuf *b, char **out);

/* Node indices of g sorted by node id (strcmp, = Python's str order for UTF-8), malloc'd. */
int *df_sched_sorted_ids(const df_task_graph *g);

#endif /* DF_SCHED_INTERNAL_H */
