/* The step's prompts: the dataloader's next batch, encoded, with a uid per prompt (worker_internal.h). */
#include "workers/worker_internal.h"

#include "workers/common/prompts.h"

#include <stdio.h>
#include <stdlib.h>

/* uid per prompt: the step, the generation batch and its dataset row, shared by its n responses. */
static int add_uids(df_batch *b, int64_t step, int gen)
{
    int64_t n = df_batch_size(b);
    const int64_t *idx = df_batch_i64(b, "index");
    char **uid = calloc((size_t)(n ? n : 1), sizeof *uid);
    char *buf = malloc((size_t)(n ? n : 1) * 64);
    if (!uid || !buf) {
        free(uid);
        free(buf);
        return df_error(DF_ENOMEM, "out of memory");
    }
    for (int64_t i = 0; i < n; i++) {
        uid[i] = buf + i * 64;
        if (gen)
            snprintf(uid[i], 64, "s%lld-g%d-r%lld", (long long)step, gen, (long long)idx[i]);
        else
            snprintf(uid[i], 64, "s%lld-r%lld", (long long)step, (long long)idx[i]);
    }
    int rc = df_batch_set_str(b, "uid", (const char *const *)uid);
    free(uid);
    free(buf);
    return rc;
}

int df_worker_next_prompts(df_dag_worker *w, int gen, df_batch **out)
{
    df_batch *b = NULL;
    int rc = df_dataloader_next(w->dl, &b);
    if (!rc)
        rc = df_prompts_attach(b, &w->train_prompts);
    if (!rc)
        rc = add_uids(b, w->step, gen);
    if (rc) {
        df_batch_free(b);
        return rc;
    }
    *out = b;
    return DF_OK;
}
