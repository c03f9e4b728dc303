/* Chat-templated, tokenized prompts of a dataset (prompts.h). */
#include "workers/common/prompts.h"

#include <stdlib.h>
#include <string.h>

int df_prompts_render(const df_dataset *ds, int64_t i, const df_tokenizer *tok,
                      bool add_generation_prompt, char **text)
{
    int n = df_dataset_num_messages(ds, i);
    df_chat_message *msgs = calloc((size_t)(n > 0 ? n : 1), sizeof *msgs);
    if (!msgs)
        return df_error(DF_ENOMEM, "out of memory rendering a prompt");
    int rc = DF_OK;
    for (int j = 0; j < n && !rc; j++)
        rc = df_dataset_message(ds, i, j, &msgs[j].role, &msgs[j].content);
    if (!rc)
        rc = df_tokenizer_apply_chat_template(tok, msgs, n, add_generation_prompt, text);
    free(msgs);
    return rc;
}

int df_prompts_encode_json(const df_tokenizer *tok, const char *messages_json, const char *tools_json,
                           int32_t **ids, int64_t *n)
{
    char *text = NULL;
    int rc = df_tokenizer_apply_chat_template_json(tok, messages_json, tools_json, true, NULL, &text);
    if (!rc)
        rc = df_tokenizer_encode(tok, text, false, ids, n);
    free(text);
    return rc;
}

/* Row i's prompt ids: its messages rendered as the single-turn rollout sees them, or (rerender)
   its raw_prompt as the multi-turn agent loop renders it, with `tools`. */
static int encode_row(const df_dataset *ds, int64_t i, const df_tokenizer *tok, bool rerender, const char *tools,
                      int32_t **ids, int64_t *n)
{
    if (rerender)
        return df_prompts_encode_json(tok, df_dataset_raw_prompt(ds, i), tools, ids, n);
    char *text = NULL;
    int rc = df_prompts_render(ds, i, tok, true, &text);
    if (!rc)
        rc = df_tokenizer_encode(tok, text, false, ids, n);
    free(text);
    return rc;
}

int df_prompts_encode(const df_dataset *ds, const df_tokenizer *tok, df_prompt_cache *out)
{
    return df_prompts_encode_shared(ds, tok, false, NULL, NULL, out);
}

int df_prompts_encode_rerendered(const df_dataset *ds, const df_tokenizer *tok, bool rerender,
                                 const char *tools_json, df_prompt_cache *out)
{
    return df_prompts_encode_shared(ds, tok, rerender, tools_json, NULL, out);
}

/* Rows [lo, hi) encoded (OpenMP across rows) into ids[i - lo] / len[i - lo]; the first failing row,
   or INT64_MAX when none failed. */
static int64_t encode_range(const df_dataset *ds, const df_tokenizer *tok, bool rerender, const char *tools,
                            int64_t lo, int64_t hi, int32_t **ids, int64_t *len)
{
    int64_t bad = INT64_MAX;
#pragma omp parallel for schedule(dynamic, 64)
    for (int64_t i = lo; i < hi; i++) {
        if (encode_row(ds, i, tok, rerender, tools, &ids[i - lo], &len[i - lo])) {
#pragma omp critical(df_prompts_bad)
            if (i < bad)
                bad = i;
        }
    }
    return bad;
}

/* Row `bad`'s error again, serially: its message, naming the row's file:line. */
static int row_error(const df_dataset *ds, const df_tokenizer *tok, bool rerender, const char *tools, int64_t bad)
{
    int64_t line, nb = 0;
    int32_t *b = NULL;
    const char *file = df_dataset_source(ds, bad, &line);
    int rc = encode_row(ds, bad, tok, rerender, tools, &b, &nb);
    if (!rc)
        rc = df_error(DF_EINTERNAL, "tokenizer failed");
    free(b);
    return df_error_wrap(rc, "%s:%lld: encoding the prompt", file, (long long)line);
}

/* This rank's rows [lo, hi), encoded: their lengths and their tokens back to back (malloc'd). */
static int encode_share(const df_dataset *ds, const df_tokenizer *tok, bool rerender, const char *tools,
                        int64_t lo, int64_t hi, int64_t *bad, int64_t **len_out, int32_t **tok_out)
{
    int64_t n = hi - lo, total = 0;
    int32_t **ids = calloc((size_t)(n ? n : 1), sizeof *ids);
    int64_t *len = calloc((size_t)(n ? n : 1), sizeof *len);
    int32_t *flat = NULL;
    int rc = ids && len ? DF_OK : df_error(DF_ENOMEM, "out of memory encoding %lld prompts", (long long)n);
    if (!rc)
        *bad = encode_range(ds, tok, rerender, tools, lo, hi, ids, len);
    for (int64_t i = 0; !rc && i < n; i++)
        total += len[i];
    if (!rc && !(flat = malloc((size_t)(total ? total : 1) * sizeof *flat)))
        rc = df_error(DF_ENOMEM, "out of memory for %lld prompt tokens", (long long)total);
    for (int64_t i = 0, t = 0; !rc && i < n; t += len[i], i++)
        if (ids[i]) /* a failed row has none (the verdict reports it) */
            memcpy(flat + t, ids[i], (size_t)len[i] * sizeof *flat);
    for (int64_t i = 0; ids && i < n; i++)
        free(ids[i]);
    free(ids);
    if (rc) {
        free(len);
        free(flat);
        return rc;
    }
    *len_out = len;
    *tok_out = flat;
    return DF_OK;
}

int df_prompts_encode_shared(const df_dataset *ds, const df_tokenizer *tok, bool rerender, const char *tools_json,
                             df_comm *comm, df_prompt_cache *out)
{
    memset(out, 0, sizeof *out);
    int64_t n = df_dataset_size(ds), W = comm ? df_comm_size(comm) : 1, r = comm ? df_comm_rank(comm) : 0;
    int64_t lo = n * r / W, hi = n * (r + 1) / W, bad = INT64_MAX, *len = NULL;
    int32_t *flat = NULL;
    int rc = encode_share(ds, tok, rerender, tools_json, lo, hi, &bad, &len, &flat);
    int64_t verdict[2] = {rc ? 1 : 0, bad}; /* every rank reaches the same one */
    if (W > 1) {
        int64_t failed = verdict[0];
        int crc = df_comm_allreduce(comm, &failed, 1, DF_COMM_INT64, DF_COMM_MAX);
        if (!crc)
            crc = df_comm_allreduce(comm, &verdict[1], 1, DF_COMM_INT64, DF_COMM_MIN);
        if (crc) /* a lost collective: this rank's own verdict is all it can report */
            rc = rc ? rc : crc;
        else if (failed && !rc)
            rc = df_error(DF_ENOMEM, "another rank ran out of memory encoding the prompts");
    }
    if (!rc && verdict[1] != INT64_MAX)
        rc = row_error(ds, tok, rerender, tools_json, verdict[1]);
    void *all_len = len, *all_tok = flat;
    if (!rc && W > 1) {
        all_len = all_tok = NULL; /* the shares in rank order: the rows in order */
        rc = df_comm_allgatherv(comm, len, (hi - lo) * (int64_t)sizeof *len, &all_len, NULL, NULL);
        int64_t mine = 0;
        for (int64_t i = 0; !rc && i < hi - lo; i++)
            mine += len[i];
        if (!rc)
            rc = df_comm_allgatherv(comm, flat, mine * (int64_t)sizeof *flat, &all_tok, NULL, NULL);
        free(len);
        free(flat);
    }
    if (!rc && !(out->offsets = malloc((size_t)(n + 1) * sizeof *out->offsets)))
        rc = df_error(DF_ENOMEM, "out of memory encoding %lld prompts", (long long)n);
    if (!rc) {
        out->n = n;
        out->tokens = all_tok;
        out->offsets[0] = 0;
        for (int64_t i = 0; i < n; i++)
            out->offsets[i + 1] = out->offsets[i] + ((int64_t *)all_len)[i];
        all_tok = NULL;
    }
    free(all_len);
    free(all_tok);
    if (rc)
        df_prompt_cache_free(out);
    return rc;
}

void df_prompt_cache_free(df_prompt_cache *c)
{
    free(c->offsets);
    free(c->tokens);
    memset(c, 0, sizeof *c);
}

/* Rebuild the cache keeping rows where keep[i], truncating each to max_len per `mode`. */
static void rebuild(df_prompt_cache *c, const bool *keep, int64_t max_len, const char *mode)
{
    int64_t w = 0, t = 0;
    for (int64_t i = 0; i < c->n; i++) {
        if (keep && !keep[i])
            continue;
        int64_t s = c->offsets[i], L = c->offsets[i + 1] - s, cut = L > max_len ? L - max_len : 0;
        int64_t head = L - cut, skip = 0; /* right: keep the head */
        if (cut && !strcmp(mode, "left"))
            skip = cut; /* keep the tail */
        else if (cut && !strcmp(mode, "middle"))
            head = max_len / 2; /* keep both ends */
        int64_t tail = L - cut - head;
        memmove(c->tokens + t, c->tokens + s + skip, (size_t)head * sizeof(int32_t));
        memmove(c->tokens + t + head, c->tokens + s + L - tail, (size_t)tail * sizeof(int32_t));
        c->offsets[w] = t;
        t += head + tail;
        w++;
    }
    c->offsets[w] = t;
    c->n = w;
}

int df_prompts_limit(df_dataset *ds, df_prompt_cache *c, int64_t max_len, bool filter,
                     const char *truncation, int64_t *n_dropped)
{
    return df_prompts_limit_ex(ds, c, &(df_prompt_limits){max_len, filter, truncation, NULL}, n_dropped);
}

int df_prompts_limit_ex(df_dataset *ds, df_prompt_cache *c, const df_prompt_limits *lim, int64_t *n_dropped)
{
    const int64_t max_len = lim->max_len;
    const bool filter = lim->filter;
    const char *truncation = lim->truncation;
    *n_dropped = 0;
    int64_t first = -1, n_long = 0;
    for (int64_t i = 0; i < c->n; i++)
        if (c->offsets[i + 1] - c->offsets[i] > max_len) {
            n_long++;
            if (first < 0)
                first = i;
        }
    if (n_long == 0)
        return DF_OK;
    if (filter) {
        bool *keep = malloc((size_t)c->n * sizeof *keep);
        if (!keep)
            return df_error(DF_ENOMEM, "out of memory filtering prompts");
        for (int64_t i = 0; i < c->n; i++)
            keep[i] = c->offsets[i + 1] - c->offsets[i] <= max_len;
        *n_dropped = df_dataset_filter(ds, keep);
        rebuild(c, keep, max_len, "right");
        free(keep);
        return DF_OK;
    }
    int64_t line;
    const char *file = df_dataset_source(ds, first, &line);
    if (lim->rerendered_by && strcmp(truncation, "error")) /* a cut prompt is not what the model sees */
        return df_error(DF_EINVAL,
                        "%s:%lld: prompt has %lld tokens, more than data.max_prompt_length = %lld "
                        "(%lld prompts are too long), and data.truncation=%s cannot shorten it: with %s "
                        "the rollout renders each row's messages again; set data.filter_overlong_prompts=true",
                        file, (long long)line, (long long)(c->offsets[first + 1] - c->offsets[first]),
                        (long long)max_len, (long long)n_long, truncation, lim->rerendered_by);
    if (!strcmp(truncation, "error")) {
        return df_error(DF_EINVAL,
                        "%s:%lld: prompt has %lld tokens, more than data.max_prompt_length = %lld "
                        "(%lld prompts are too long; set data.filter_overlong_prompts=true or "
                        "data.truncation=left|right|middle)",
                        file, (long long)line, (long long)(c->offsets[first + 1] - c->offsets[first]),
                        (long long)max_len, (long long)n_long);
    }
    rebuild(c, NULL, max_len, truncation);
    return DF_OK;
}

int df_prompts_attach(df_batch *b, const df_prompt_cache *c)
{
    const int64_t *idx = df_batch_i64(b, "row");
    int64_t n = df_batch_size(b);
    if (!idx)
        return df_error(DF_EINVAL, "batch has no 'row' column to look prompts up by");
    int64_t *off = malloc((size_t)(n + 1) * sizeof *off);
    if (!off)
        return df_error(DF_ENOMEM, "out of memory");
    off[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        if (idx[i] < 0 || idx[i] >= c->n) {
            free(off);
            return df_error(DF_EINVAL, "prompt index %lld out of range", (long long)idx[i]);
        }
        off[i + 1] = off[i] + c->offsets[idx[i] + 1] - c->offsets[idx[i]];
    }
    int32_t *tok = malloc((size_t)(off[n] ? off[n] : 1) * sizeof *tok);
    int rc = tok ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; i < n && !rc; i++)
        memcpy(tok + off[i], c->tokens + c->offsets[idx[i]],
               (size_t)(off[i + 1] - off[i]) * sizeof *tok);
    if (!rc)
        rc = df_batch_set_tok_i32(b, "prompt_ids", off, tok);
    free(off);
    free(tok);
    return rc;
}
