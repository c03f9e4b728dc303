/* The summaries of a batch's rows that ranks exchange before a redistribution
 * (include/distflow/coordinator.h, df_batch_sample_infos). */
#include "distflow/coordinator.h"

#include <stdlib.h>

int df_batch_sample_infos(const df_batch *b, int rank, df_sample_info **out)
{
    if (!b || !out || rank < 0)
        return df_error(DF_EINVAL, "sample infos: need a batch, an output and rank >= 0 (rank=%d)",
                        rank);
    int64_t n = df_batch_size(b);
    df_sample_info *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v)
        return df_error(DF_ENOMEM, "sample infos: out of memory for %lld rows", (long long)n);
    for (int64_t i = 0; i < n; i++) {
        v[i] = df_batch_sample_info(b, i);
        v[i].src_rank = rank;
    }
    *out = v;
    return DF_OK;
}
