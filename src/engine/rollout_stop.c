/*
 * Stop strings (df_sampling_params.stop, vLLM's SamplingParams.stop): each slot keeps the last
 * bytes of its text, as many as the longest stop string less one, so a string completed by the
 * next token's bytes is found however the tokens split it, without decoding the response again.
 */
#include "distflow/tokenizer.h"
#include "engine/rollout_engine.h"

#include <stdlib.h>
#include <string.h>

int df_rollout_stop_init(gen_ctx *g)
{
    const df_sampling_params *sp = g->sp;
    if (sp->n_stop_str <= 0)
        return DF_OK;
    int64_t longest = 0;
    for (int i = 0; i < sp->n_stop_str; i++) {
        int64_t n = (int64_t)strlen(sp->stop[i]);
        longest = n > longest ? n : longest;
    }
    g->stop_keep = longest - 1;
    g->stop_tail = malloc((size_t)(g->e->max_num_seqs * (g->stop_keep + 1)));
    g->stop_len = calloc((size_t)g->e->max_num_seqs, sizeof *g->stop_len);
    g->stop_buf_cap = 2 * DF_STOP_STR_MAX;
    g->stop_buf = malloc((size_t)g->stop_buf_cap);
    if (!g->stop_tail || !g->stop_len || !g->stop_buf)
        return df_error(DF_ENOMEM, "rollout: out of memory for stop strings");
    return DF_OK;
}

void df_rollout_stop_release(gen_ctx *g)
{
    free(g->stop_tail);
    free(g->stop_len);
    free(g->stop_buf);
}

void df_rollout_stop_reset(gen_ctx *g, int64_t si)
{
    if (g->stop_len)
        g->stop_len[si] = 0;
}

/* Whether needle[0, n) occurs in hay[0, m). */
static bool contains(const char *hay, int64_t m, const char *needle, int64_t n)
{
    for (int64_t i = 0; i + n <= m; i++)
        if (hay[i] == needle[0] && !memcmp(hay + i, needle, (size_t)n))
            return true;
    return false;
}

bool df_rollout_stop_hit(gen_ctx *g, int64_t si, int32_t tok)
{
    const df_sampling_params *sp = g->sp;
    const char *bytes = NULL;
    int64_t len = 0;
    if (df_tokenizer_is_special(sp->tokenizer, tok) ||
        df_tokenizer_token_bytes(sp->tokenizer, tok, &bytes, &len) != DF_OK)
        return false; /* no text (skip_special_tokens; an id that names no token) */
    char *tail = g->stop_tail + si * (g->stop_keep + 1);
    const int64_t tl = g->stop_len[si], n = tl + len;
    if (n > g->stop_buf_cap) {
        char *b = realloc(g->stop_buf, (size_t)n);
        if (!b) /* cannot happen for real vocabularies' tokens; search the token alone */
            return contains(bytes, len, sp->stop[0], (int64_t)strlen(sp->stop[0]));
        g->stop_buf = b;
        g->stop_buf_cap = n;
    }
    memcpy(g->stop_buf, tail, (size_t)tl);
    memcpy(g->stop_buf + tl, bytes, (size_t)len);
    bool hit = false;
    for (int i = 0; i < sp->n_stop_str && !hit; i++)
        hit = contains(g->stop_buf, n, sp->stop[i], (int64_t)strlen(sp->stop[i]));
    const int64_t keep = n < g->stop_keep ? n : g->stop_keep;
    memcpy(tail, g->stop_buf + n - keep, (size_t)keep);
    g->stop_len[si] = keep;
    return hit;
}
