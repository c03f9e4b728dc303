/* trainer.rollout_data_dir (rollout_dump.h). */
#include "workers/dag/rollout_dump.h"
#include "workers/dag/marft_run.h"

#include "util/timeutil.h"
#include "workers/dag/gen_dump.h"

#include <stdio.h>
#include <stdlib.h>

/* This rank's rows to its file. */
static int dump(df_dag_worker *w, const char *dir, const df_batch *b)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len); /* the whole file first: it is renamed into place */
    int rc = f ? df_gen_dump_rows(f, df_worker_marft_scorer_tok(w), b, true, w->step)
               : df_error(DF_ENOMEM, "out of memory collecting the rollouts");
    if (f && fclose(f) && !rc)
        rc = df_error(DF_ENOMEM, "out of memory collecting the rollouts");
    if (!rc)
        rc = df_gen_dump_write(dir, "trainer.rollout_data_dir", w->step, w->cur_layout.dp_rank,
                               w->cur_layout.dp_size, buf, len);
    free(buf);
    return rc;
}

int df_worker_rollout_dump(df_dag_worker *w, const df_batch *b, df_metrics *m)
{
    const char *dir = w->global.cfg.trainer.rollout_data_dir;
    if (!dir)
        return DF_OK;
    double t0 = df_now();
    int rc = w->cur_layout.mp_rank == 0 ? dump(w, dir, b) : DF_OK;
    /* a write that failed on one rank (its disk, its permissions) stops every rank here, before the
       step's collectives would leave the others waiting for it */
    double failed = rc ? 1 : 0;
    int crc = df_comm_allreduce(w->group, &failed, 1, DF_COMM_FLOAT64, DF_COMM_SUM);
    if (!rc && !crc && failed > 0)
        rc = df_error(DF_EINTERNAL, "trainer.rollout_data_dir: %g other rank(s) failed to write their "
                                    "rollouts; their own errors say why", failed);
    rc = rc ? rc : crc;
    if (!rc)
        rc = df_metrics_set(m, "timing_s/dump_rollout_generations", df_now() - t0);
    return rc;
}
