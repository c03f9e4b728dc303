/*
 * Validation generations (val_generations.h): verl's trainer.log_val_generations (the first N
 * printed on the console) and trainer.validation_data_dir (every one written as JSON lines).
 */
#include "workers/dag/val_generations.h"

#include "workers/dag/gen_dump.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int df_val_generations_begin(df_dag_worker *w, df_val_generations *g)
{
    const struct df_train_trainer *t = &w->global.cfg.trainer;
    memset(g, 0, sizeof *g);
    bool print = t->log_val_generations > 0 && w->rank == 0;
    bool dump = t->validation_data_dir && w->data_layout.mp_rank == 0; /* replicas repeat a shard */
    if (!print && !dump)
        return DF_OK;
    g->f = open_memstream(&g->buf, &g->len);
    return g->f ? DF_OK : df_error(DF_ENOMEM, "out of memory collecting validation generations");
}

/* The first n lines of the dump on the console: input, output, score (verl prints a table). */
static void print_samples(const char *buf, int64_t n, int64_t step)
{
    const char *line = buf;
    for (int64_t k = 0; k < n && *line; k++) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        json_t *row = json_loadb(line, len, 0, NULL);
        if (row)
            printf("[validation step %lld, sample %lld] score %.4f\n[input] %s\n[output] %s\n",
                    (long long)step, (long long)k + 1,
                    json_number_value(json_object_get(row, "score")),
                    json_string_value(json_object_get(row, "input")),
                    json_string_value(json_object_get(row, "output")));
        json_decref(row);
        line += len + (end ? 1 : 0);
    }
}

int df_val_generations_end(df_dag_worker *w, df_val_generations *g, int rc)
{
    if (!g->f)
        return rc;
    fclose(g->f);
    const struct df_train_trainer *t = &w->global.cfg.trainer;
    if (!rc && t->log_val_generations > 0 && w->rank == 0)
        print_samples(g->buf, t->log_val_generations, w->step), fflush(stdout);
    if (!rc && t->validation_data_dir && w->data_layout.mp_rank == 0) /* each DP rank validates its shard */
        rc = df_gen_dump_write(t->validation_data_dir, "trainer.validation_data_dir", w->step,
                               w->data_layout.dp_rank, w->data_layout.dp_size, g->buf, g->len);
    free(g->buf);
    memset(g, 0, sizeof *g);
    return rc;
}
