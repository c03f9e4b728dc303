/* A trainer's metrics.jsonl and trainer.logger's other sinks (run_log.h). */
#include "workers/common/run_log.h"

#include "util/timeutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int df_run_log_open(df_run_log *l, const df_run_log_opts *o)
{
    memset(l, 0, sizeof *l);
    int rc = df_metrics_log_open(&l->metrics, o->out_dir, o->resumed_step);
    char *tb = rc ? NULL : df_tensorboard_dir(o->tensorboard_dir, o->project, o->experiment);
    if (!rc && !tb)
        rc = df_error(DF_ENOMEM, "out of memory");
    df_loggers_opts lo = {.names = o->logger->items, .n_names = o->logger->n, .tb_dir = tb,
                          .resume_step = o->resumed_step};
    if (!rc)
        rc = df_loggers_open(&lo, &l->sinks);
    const char *events = rc ? NULL : df_loggers_tensorboard_path(l->sinks);
    if (events && o->print)
        printf("TensorBoard event file: %s\n", events), fflush(stdout);
    free(tb);
    if (rc)
        df_run_log_close(l);
    return rc;
}

bool df_run_log_started(const df_run_log *l)
{
    return l->metrics.opened;
}

int df_run_log_step(df_run_log *l, int64_t step, const df_metrics *m, bool sync)
{
    char *line;
    int rc = df_metrics_to_json_at(m, step, df_unix_time(), &line);
    if (rc)
        return rc;
    rc = df_metrics_log_append(&l->metrics, line, sync);
    free(line);
    return rc ? rc : df_loggers_log(l->sinks, step, m);
}

void df_run_log_close(df_run_log *l)
{
    df_metrics_log_close(&l->metrics);
    df_loggers_close(l->sinks); /* each step is already on disk: nothing to report here */
    memset(l, 0, sizeof *l);
}
