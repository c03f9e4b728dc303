/*
 * The model-call view of an embodied batch (embodied_worker.h): siiRL's actor recomputes an
 * episode's log-probs call by call, each from that call's observation (RobDataParallelPPOActor:
 * input_ids [B, traj_len, L]); distflow's actor computes one (prompt, response) sequence per row, so
 * the episode rows are cut into call rows for it and its outputs copied back. The calls of an
 * episode are consecutive C-token slices of its response, so every per-token column keeps its bytes
 * and only its offsets change.
 */
#include "workers/embodied/embodied_worker.h"

#include <stdlib.h>
#include <string.h>

/* Episodes' shape: traj_len calls of C tokens each, checked against response_ids. */
static int shape(const df_batch *b, int64_t *T, int64_t *C)
{
    const int64_t n = df_batch_size(b), *lo = df_batch_offsets(b, DF_EMB_CALL_LENS),
                  *ro = df_batch_offsets(b, "response_ids"), *co = df_batch_offsets(b, DF_EMB_CALL_PROMPTS);
    if (!lo || !ro || !co)
        return df_error(DF_EINVAL, "embodied batch: needs response_ids, %s and %s", DF_EMB_CALL_PROMPTS,
                        DF_EMB_CALL_LENS);
    *T = n ? lo[1] : 1, *C = n && *T ? ro[1] / *T : 0;
    for (int64_t i = 0; i < n; i++) {
        const int32_t *len = (const int32_t *)df_batch_column(b, DF_EMB_CALL_LENS)->data + lo[i];
        int64_t sum = 0;
        for (int64_t k = 0; k < *T; k++)
            sum += len[k];
        if (lo[i + 1] - lo[i] != *T || ro[i + 1] - ro[i] != *T * *C || co[i + 1] - co[i] != sum || *C < 1)
            return df_error(DF_EINVAL, "embodied batch: row %lld is not %lld calls of %lld tokens", (long long)i,
                            (long long)*T, (long long)*C);
    }
    return DF_OK;
}

/* Whether column `c` is laid out as response_ids (one value per response token). */
static bool per_token(const df_batch *b, const df_column *c)
{
    const int64_t *ro = df_batch_offsets(b, "response_ids");
    if (c->kind != DF_COL_TOK_I32 && c->kind != DF_COL_TOK_F32)
        return false;
    return !memcmp(c->offsets, ro, (size_t)(df_batch_size(b) + 1) * sizeof *ro);
}

/* The per-row columns of b, repeated T times (the per-token ones are set by the caller). */
static int repeated_rows(const df_batch *b, int64_t T, df_batch **out)
{
    df_batch *rows = NULL;
    int rc = df_batch_copy(b, &rows);
    for (int i = df_batch_num_columns(b) - 1; !rc && i >= 0; i--) {
        const df_column *c = df_batch_column_at(b, i);
        if (c->kind == DF_COL_TOK_I32 || c->kind == DF_COL_TOK_F32)
            df_batch_drop(rows, c->name);
    }
    if (!rc)
        rc = df_batch_repeat_interleave(rows, T, out);
    df_batch_free(rows);
    return rc;
}

int df_embodied_calls_split(const df_batch *b, df_batch **calls)
{
    *calls = NULL;
    if (!df_batch_has(b, DF_EMB_CALL_PROMPTS))
        return DF_OK;
    int64_t T = 1, C = 1;
    int rc = shape(b, &T, &C);
    const int64_t n = df_batch_size(b), rows = n * T;
    df_batch *v = NULL;
    if (!rc)
        rc = repeated_rows(b, T, &v);
    int64_t *off = rc ? NULL : malloc((size_t)(rows + 1) * sizeof *off),
            *poff = rc ? NULL : malloc((size_t)(rows + 1) * sizeof *poff);
    if (!rc && (!off || !poff))
        rc = df_error(DF_ENOMEM, "out of memory");
    const int32_t *lens = rc ? NULL : df_batch_column(b, DF_EMB_CALL_LENS)->data;
    for (int64_t r = 0; !rc && r <= rows; r++) {
        off[r] = r * C;
        poff[r] = r ? poff[r - 1] + lens[r - 1] : 0;
    }
    if (!rc) /* call k's observation prompt */
        rc = df_batch_set_tok_i32(v, "prompt_ids", poff, df_batch_column(b, DF_EMB_CALL_PROMPTS)->data);
    for (int i = 0; !rc && i < df_batch_num_columns(b); i++) {
        const df_column *c = df_batch_column_at(b, i);
        if (!per_token(b, c))
            continue;
        rc = c->kind == DF_COL_TOK_I32 ? df_batch_set_tok_i32(v, c->name, off, c->data)
                                       : df_batch_set_tok_f32(v, c->name, off, c->data);
    }
    free(off), free(poff);
    if (rc) {
        df_batch_free(v);
        return rc;
    }
    *calls = v;
    return DF_OK;
}

int df_embodied_calls_join(const df_batch *calls, const char *col, df_batch *b)
{
    const df_column *c = df_batch_column(calls, col);
    const int64_t *ro = df_batch_offsets(b, "response_ids");
    if (!c || c->kind != DF_COL_TOK_F32 || !ro || c->offsets[df_batch_size(calls)] != ro[df_batch_size(b)])
        return df_error(DF_EINVAL, "embodied batch: the call view's %s does not cover the episodes' responses", col);
    return df_batch_set_tok_f32(b, col, ro, c->data);
}
