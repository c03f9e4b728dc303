/* A status and a few sums agreed over a group in one collective (group_sum.h). */
#include "workers/common/group_sum.h"

#include <stdlib.h>
#include <string.h>

int df_worker_group_sum(df_comm *comm, int rc, const double *vals, int k, double *totals, const char *what,
                        const char *group)
{
    int size = comm ? df_comm_size(comm) : 1;
    for (int j = 0; j < k; j++)
        totals[j] = 0;
    const size_t row = (size_t)k + 1; /* k values, then the flag */
    double *mine = malloc(((size_t)size + 1) * row * sizeof *mine);
    if (!mine)
        return rc ? rc : df_error(DF_ENOMEM, "%s: out of memory for %d ranks", what, size);
    double *all = mine + row;
    memcpy(mine, vals, (size_t)k * sizeof *mine);
    mine[k] = rc != 0;
    int crc = comm ? df_comm_allgather(comm, mine, (int64_t)(row * sizeof *mine), all) : DF_OK;
    if (!comm)
        memcpy(all, mine, row * sizeof *mine);
    double failed = 0;
    for (int r = 0; !crc && r < size; r++) {
        for (int j = 0; j < k; j++)
            totals[j] += all[(size_t)r * row + (size_t)j];
        failed += all[(size_t)r * row + (size_t)k];
    }
    free(mine);
    if (rc)
        return rc;
    if (crc)
        return df_error_wrap(crc, "%s over %d ranks", what, size);
    if (failed > 0)
        return df_error(DF_EINTERNAL,
                        "%s: %.0f other rank(s) of the %s (%d ranks) failed; their own errors say why", what,
                        failed, group, size);
    return DF_OK;
}

int df_worker_agree(df_comm *comm, int rc, const char *what, const char *group)
{
    double zero = 0, total;
    return df_worker_group_sum(comm, rc, &zero, 1, &total, what, group);
}
