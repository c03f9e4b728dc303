/* The set of metrics sinks a trainer opens from trainer.logger (logging/loggers.h). */
#include "logging/loggers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The names trainer.logger accepts; "file" and "jsonl" both name metrics.jsonl. */
static const char *const known[] = {"console", "file", "jsonl", "tensorboard"};
#define N_KNOWN (sizeof known / sizeof *known)
#define MAX_SINKS 1 /* tensorboard (metrics.jsonl and the console line are the trainers' own) */

struct df_loggers {
    df_metrics_sink sinks[MAX_SINKS];
    int n;
};

const char *df_logger_names(void) { return "console, file, jsonl, tensorboard"; }

bool df_loggers_has(const char *const *names, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], name))
            return true;
    return false;
}

int df_loggers_check_names(const char *const *names, int n, const char *key)
{
    for (int i = 0; i < n; i++) {
        if (!df_loggers_has(known, (int)N_KNOWN, names[i]))
            return df_error(DF_EUNSUPPORTED, "%s: logger '%s' is not available in distflow; the loggers are %s "
                            "(file and jsonl name metrics.jsonl in default_local_dir, which is always written)",
                            key, names[i], df_logger_names());
        if (!strcmp(names[i], "tensorboard") && !df_tensorboard_available())
            return df_error(DF_EUNSUPPORTED, "%s: logger 'tensorboard': this build of distflow has no TensorBoard "
                            "writer (configured without protobuf-c: install libprotobuf-c-dev and protobuf-c-compiler, "
                            "then reconfigure with DF_WITH_TENSORBOARD=ON)", key);
    }
    return DF_OK;
}

/* ---- the set ------------------------------------------------------------------------------------ */

int df_loggers_open(const df_loggers_opts *o, df_loggers **out)
{
    *out = NULL;
    int rc = df_loggers_check_names(o->names, o->n_names, "trainer.logger");
    df_loggers *l = rc ? NULL : calloc(1, sizeof *l);
    if (!rc && !l)
        rc = df_error(DF_ENOMEM, "out of memory");
    if (!rc && df_loggers_has(o->names, o->n_names, "tensorboard") &&
        !(rc = df_sink_tensorboard_open(o->tb_dir, o->resume_step, &l->sinks[l->n])))
        l->n++;
    if (rc) {
        df_loggers_close(l);
        return rc;
    }
    *out = l;
    return DF_OK;
}

int df_loggers_log(df_loggers *l, int64_t step, const df_metrics *m)
{
    for (int i = 0; l && i < l->n; i++) {
        int rc = l->sinks[i].log(l->sinks[i].self, step, m);
        if (rc)
            return rc;
    }
    return DF_OK;
}

int df_loggers_close(df_loggers *l)
{
    int rc = DF_OK;
    for (int i = 0; l && i < l->n; i++) {
        int r = l->sinks[i].close(l->sinks[i].self);
        rc = rc ? rc : r;
    }
    free(l);
    return rc;
}

const char *df_loggers_tensorboard_path(const df_loggers *l)
{
    for (int i = 0; l && i < l->n; i++)
        if (!strcmp(l->sinks[i].name, "tensorboard"))
            return l->sinks[i].file;
    return NULL;
}
