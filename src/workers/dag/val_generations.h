/*
 * val_generations.h (internal) — what validation shows of its generations: verl's
 * trainer.log_val_generations (the first N of rank 0's shard printed: input, output, score) and
 * trainer.validation_data_dir (each data-parallel rank's responses as JSON lines, the keys of
 * df_eval_opts.dump, in <dir>/<step>.jsonl, or <step>.dp<d>.jsonl with several DP ranks; written
 * atomically).
 */
#ifndef DF_WORKER_DAG_VAL_GENERATIONS_H
#define DF_WORKER_DAG_VAL_GENERATIONS_H

#include "workers/worker_internal.h"

#include <stdio.h>

typedef struct df_val_generations {
    FILE *f; /* the dump stream to give df_evaluate; NULL when neither setting asks for it */
    char *buf;
    size_t len;
} df_val_generations;

/** Before a validation: g->f collects the dump when this rank prints or writes it. DF_ENOMEM. */
int df_val_generations_begin(df_dag_worker *w, df_val_generations *g);
/**
 * After it (rc: the validation's status): print and write what the settings ask for, release g.
 * Returns rc, or the write's error (DF_EIO naming the file, under trainer.validation_data_dir).
 */
int df_val_generations_end(df_dag_worker *w, df_val_generations *g, int rc);

#endif
