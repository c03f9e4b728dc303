/* The routed_experts batch field and packed micro-batches (routes.h). */
#include "engine/routes.h"

#include "engine/actor.h"
#include "engine/packing.h"

#include <stdlib.h>
#include <string.h>

int df_routes_replay(const df_model_config *c, const df_batch *b, int64_t s, int64_t e, df_seq_batch *sb)
{
    const df_column *col = df_batch_column(b, DF_ROUTES_COLUMN);
    const int64_t W = df_model_route_width(c);
    if (!col || col->kind != DF_COL_TOK_I32)
        return df_error(DF_EINVAL, "router replay: the batch has no per-token field %s (R2 records it in the "
                        "old-log-prob pass, R3 in the rollout)", DF_ROUTES_COLUMN);
    for (int64_t i = s; i < e; i++)
        if (col->offsets[i + 1] - col->offsets[i] != df_pack_row_tokens(b, i) * W)
            return df_error(DF_EINVAL, "router replay: sample %lld's %s holds %lld entries, not its %lld tokens "
                            "times %lld (the sparse layers' experts a token)", (long long)i, DF_ROUTES_COLUMN,
                            (long long)(col->offsets[i + 1] - col->offsets[i]), (long long)df_pack_row_tokens(b, i),
                            (long long)W);
    sb->routes_in = (const int32_t *)col->data + col->offsets[s];
    return DF_OK;
}

int df_routes_record_begin(const df_model_config *c, const df_batch *b, df_routes_rec *r)
{
    const int64_t n = df_batch_size(b), W = df_model_route_width(c);
    r->off = malloc((size_t)(n + 1) * sizeof(int64_t));
    r->data = NULL;
    if (r->off) {
        r->off[0] = 0;
        for (int64_t i = 0; i < n; i++)
            r->off[i + 1] = r->off[i] + df_pack_row_tokens(b, i) * W;
        r->data = malloc((size_t)(r->off[n] > 0 ? r->off[n] : 1) * sizeof(int32_t));
    }
    if (!r->off || !r->data) {
        free(r->off), free(r->data);
        *r = (df_routes_rec){0};
        return df_error(DF_ENOMEM, "router replay: out of memory for the batch's routes");
    }
    memset(r->data, 0xff, (size_t)r->off[n] * sizeof(int32_t)); /* -1: not computed */
    return DF_OK;
}

void df_routes_record_into(df_routes_rec *r, int64_t s, df_seq_batch *sb)
{
    sb->routes_out = r->data + r->off[s];
}

int df_routes_record_end(df_routes_rec *r, df_batch *b, int rc)
{
    if (!rc)
        rc = df_batch_set_tok_i32(b, DF_ROUTES_COLUMN, r->off, r->data);
    free(r->off), free(r->data);
    *r = (df_routes_rec){0};
    return rc;
}
