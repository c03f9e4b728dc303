/* Packing batch rows into model input (packing.h). */
#include "engine/packing.h"

#include <stdlib.h>
#include <string.h>

static int grow(void **buf, int64_t *cap, int64_t need, size_t elem)
{
    if (need <= *cap)
        return DF_OK;
    int64_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    void *nb = realloc(*buf, (size_t)c * elem);
    if (!nb)
        return df_error(DF_ENOMEM, "out of memory packing %lld tokens", (long long)need);
    *buf = nb;
    *cap = c;
    return DF_OK;
}

static int64_t row_len(const int64_t *off, int64_t i) { return off ? off[i + 1] - off[i] : 0; }

int df_pack_responses(df_packed *p, const df_batch *b, int64_t start, int64_t end)
{
    const int64_t *po = df_batch_offsets(b, "prompt_ids"), *ro = df_batch_offsets(b, "response_ids");
    if (!po || !ro)
        return df_error(DF_EINVAL, "batch needs prompt_ids and response_ids columns");
    const int32_t *pt = df_batch_column(b, "prompt_ids")->data;
    const int32_t *rt = df_batch_column(b, "response_ids")->data;
    int64_t n_seq = end - start, n_tok = 0, n_out = 0;
    for (int64_t i = start; i < end; i++) {
        if (row_len(po, i) < 1)
            return df_error(DF_EINVAL, "sample %lld has an empty prompt", (long long)i);
        n_tok += row_len(po, i) + row_len(ro, i);
        n_out += row_len(ro, i);
    }
    int rc = grow((void **)&p->tokens, &p->cap_tokens, n_tok, sizeof(int32_t));
    if (!rc)
        rc = grow((void **)&p->seq_offsets, &p->cap_seqs, n_seq + 1, sizeof(int64_t));
    int64_t cap_out = p->cap_out; /* out_rows and out_targets share one capacity */
    if (!rc)
        rc = grow((void **)&p->out_rows, &p->cap_out, n_out, sizeof(int64_t));
    if (!rc)
        rc = grow((void **)&p->out_targets, &cap_out, n_out, sizeof(int32_t));
    if (rc)
        return rc;
    int64_t t = 0, o = 0;
    p->seq_offsets[0] = 0;
    for (int64_t i = start; i < end; i++) {
        int64_t P = row_len(po, i), R = row_len(ro, i);
        memcpy(p->tokens + t, pt + po[i], (size_t)P * sizeof(int32_t));
        memcpy(p->tokens + t + P, rt + ro[i], (size_t)R * sizeof(int32_t));
        for (int64_t j = 0; j < R; j++) {
            p->out_rows[o + j] = t + P - 1 + j;
            p->out_targets[o + j] = rt[ro[i] + j];
        }
        t += P + R;
        o += R;
        p->seq_offsets[i - start + 1] = t;
    }
    p->sb = (df_seq_batch){.n_tokens = t, .tokens = p->tokens, .n_seqs = n_seq,
                           .seq_offsets = p->seq_offsets, .n_out = o, .out_rows = p->out_rows,
                           .out_targets = p->out_targets};
    return DF_OK;
}

void df_packed_free(df_packed *p)
{
    free(p->tokens);
    free(p->seq_offsets);
    free(p->out_rows);
    free(p->out_targets);
    memset(p, 0, sizeof *p);
}

int64_t df_pack_row_tokens(const df_batch *b, int64_t i)
{
    return row_len(df_batch_offsets(b, "prompt_ids"), i) +
           row_len(df_batch_offsets(b, "response_ids"), i);
}

/* Consecutive micro-batches of at most max_samples rows and `cap` tokens (a row above the cap
 * alone), greedily filled; their bounds into bd (n + 1 entries) when not NULL; their count. */
static int64_t fill(const df_batch *b, int64_t max_samples, int64_t cap, int64_t *bd)
{
    int64_t n = df_batch_size(b), k = 0, rows = 0, toks = 0;
    if (bd)
        bd[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t t = df_pack_row_tokens(b, i);
        bool full = rows > 0 && ((max_samples > 0 && rows + 1 > max_samples) ||
                                 (cap > 0 && toks + t > cap));
        if (full) {
            k++;
            if (bd)
                bd[k] = i;
            rows = 0;
            toks = 0;
        }
        rows++;
        toks += t;
    }
    if (n > 0 && bd)
        bd[k + 1] = n;
    return n > 0 ? k + 1 : 0;
}

int df_plan_micro_batches(const df_batch *b, int64_t max_samples, int64_t max_tokens,
                          int64_t **bounds, int64_t *n_mb)
{
    int64_t n = df_batch_size(b);
    int64_t *bd = malloc((size_t)(n + 1) * sizeof *bd);
    if (!bd)
        return df_error(DF_ENOMEM, "out of memory planning micro-batches");
    /* The fewest micro-batches the budget allows (greedy filling), then the smallest cap that
     * still gives no more of them: balanced token counts, as verl's rearrange_micro_batches
     * balances its partitions, so the largest micro-batch (the activations' size) is as small
     * as the count allows. Rows keep their order. */
    int64_t k = fill(b, max_samples, max_tokens, NULL), cap = max_tokens;
    if (max_tokens > 0 && k > 1) {
        int64_t lo = 1, hi = max_tokens;
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (fill(b, max_samples, mid, NULL) <= k)
                hi = mid;
            else
                lo = mid + 1;
        }
        cap = lo;
    }
    *n_mb = fill(b, max_samples, cap, bd);
    *bounds = bd;
    return DF_OK;
}

void df_plan_extent(const df_batch *b, const int64_t *bounds, int64_t n_mb, int64_t *max_tokens,
                    int64_t *max_out)
{
    const int64_t *ro = df_batch_offsets(b, "response_ids");
    *max_tokens = 0;
    *max_out = 0;
    for (int64_t m = 0; m < n_mb; m++) {
        int64_t t = 0, o = 0;
        for (int64_t i = bounds[m]; i < bounds[m + 1]; i++) {
            t += df_pack_row_tokens(b, i);
            o += row_len(ro, i);
        }
        if (t > *max_tokens)
            *max_tokens = t;
        if (o > *max_out)
            *max_out = o;
    }
}
