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
    return df_prompts_encode_rerendered(ds, tok, false, NULL, out);
}

int df_prompts_encode_rerendered(const df_dataset *ds, const df_tokenizer *tok, bool rerender,
                                 const char *tools_json, df_prompt_cache *out)
{
    int64_t n = df_dataset_size(ds);
    int32_t **ids = calloc((size_t)(n ? n : 1), sizeof *ids);
    int64_t *len = calloc((size_t)(n ? n : 1), sizeof *len);
    memset(out, 0, sizeof *out);
    if (!ids || !len) {
        free(ids);
        free(len);
        return df_error(DF_ENOMEM, "out of memory encoding %lld prompts", (long long)n);
    }
    int64_t bad = -1; /* first failing row; its message is re-created serially below */
#pragma omp parallel for schedule(dynamic, 64)
    for (int64_t i = 0; i < n; i++) {
        int rc = encode_row(ds, i, tok, rerender, tools_json, &ids[i], &len[i]);
        if (rc) {
#pragma omp critical(df_prompts_bad)
            if (bad < 0 || i < bad)
                bad = i;
        }
    }
    int rc = DF_OK;
    if (bad >= 0) {
        int64_t line, nb = 0;
        int32_t *b = NULL;
        const char *file = df_dataset_source(ds, bad, &line);
        rc = encode_row(ds, bad, tok, rerender, tools_json, &b, &nb);
        if (!rc)
            rc = df_error(DF_EINTERNAL, "tokenizer failed");
        rc = df_error_wrap(rc, "%s:%lld: encoding the prompt", file, (long long)line);
        free(b);
    }
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++)
        total += len[i];
    if (!rc) {
        out->offsets = malloc((size_t)(n + 1) * sizeof *out->offsets);
        out->tokens = malloc((size_t)(total ? total : 1) * sizeof *out->tokens);
        if (!out->offsets || !out->tokens)
            rc = df_error(DF_ENOMEM, "out of memory for %lld prompt tokens", (long long)total);
    }
    if (!rc) {
        out->n = n;
        out->offsets[0] = 0;
        for (int64_t i = 0; i < n; i++) {
            memcpy(out->tokens + out->offsets[i], ids[i], (size_t)len[i] * sizeof(int32_t));
            out->offsets[i + 1] = out->offsets[i] + len[i];
        }
    }
    for (int64_t i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
    free(len);
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
