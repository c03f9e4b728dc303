/* The reward node's reward-model mode: inputs, scores, rm_scores (rm_score.h). */
#include "workers/reward/rm_score.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Remove every occurrence of `pat` from s in place (Python's str.replace(pat, "")). */
static void remove_all(char *s, const char *pat)
{
    size_t n = strlen(pat);
    if (!n)
        return;
    char *w = s;
    for (const char *r = s; *r;) {
        if (!strncmp(r, pat, n)) {
            r += n;
            continue;
        }
        *w++ = *r++;
    }
    *w = '\0';
}

/* The row's messages with the decoded response appended as the assistant's turn, as JSON text. */
static int chat_json(const df_rm_scorer *s, const df_batch *b, int64_t i, char **out)
{
    *out = NULL;
    const char *raw = df_batch_str(b, "raw_prompt", i);
    if (!raw)
        return df_error(DF_EINVAL, "row %lld has no raw_prompt (the prompt's messages) to re-template",
                        (long long)i);
    int64_t len;
    const int32_t *ids = df_batch_tok_i32(b, "response_ids", i, &len);
    char *text = NULL;
    int rc = ids ? df_tokenizer_decode(s->input_tok, ids, len, false, &text)
                 : df_error(DF_EINVAL, "the batch has no response_ids column");
    if (rc)
        return rc;
    int32_t eos = df_tokenizer_eos_id(s->input_tok);
    const char *eos_text = eos >= 0 ? df_tokenizer_id_to_token(s->input_tok, eos) : NULL;
    if (eos_text)
        remove_all(text, eos_text);
    json_error_t err;
    json_t *msgs = json_loads(raw, 0, &err);
    if (!json_is_array(msgs))
        rc = df_error(DF_EINVAL, "row %lld: raw_prompt is not a JSON array of messages", (long long)i);
    else if (json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "assistant", "content", text)))
        rc = df_error(DF_EINVAL, "row %lld: the response is not valid UTF-8 text", (long long)i);
    if (!rc && !(*out = json_dumps(msgs, JSON_COMPACT)))
        rc = df_error(DF_ENOMEM, "out of memory");
    json_decref(msgs);
    free(text);
    return rc;
}

int df_rm_input(const df_rm_scorer *s, const df_batch *b, int64_t i, int32_t **ids, int64_t *n)
{
    *ids = NULL;
    *n = 0;
    int64_t np, nr;
    const int32_t *p = df_batch_tok_i32(b, "prompt_ids", i, &np),
                  *r = df_batch_tok_i32(b, "response_ids", i, &nr);
    if (!p || !r)
        return df_error(DF_EINVAL, "the reward model needs prompt_ids and response_ids columns");
    if (!s->input_tok) {
        if (!(*ids = malloc((size_t)(np + nr > 0 ? np + nr : 1) * sizeof **ids)))
            return df_error(DF_ENOMEM, "out of memory");
        memcpy(*ids, p, (size_t)np * sizeof *p);
        memcpy(*ids + np, r, (size_t)nr * sizeof *r);
        *n = np + nr;
        return np + nr > 0 ? DF_OK : df_error(DF_EINVAL, "row %lld is empty", (long long)i);
    }
    char *chat = NULL, *text = NULL;
    int rc = chat_json(s, b, i, &chat);
    if (!rc)
        rc = df_tokenizer_apply_chat_template_json(s->rm_tok, chat, NULL, false, NULL, &text);
    if (!rc)
        rc = df_tokenizer_encode(s->rm_tok, text, false, ids, n);
    free(chat);
    free(text);
    if (!rc && s->max_length > 0 && *n > s->max_length)
        *n = s->max_length; /* verl's postprocess_data, truncation "right": the first max_length */
    if (!rc && *n == 0)
        rc = df_error(DF_EINVAL, "row %lld: the reward model's chat template rendered nothing", (long long)i);
    if (rc) {
        free(*ids);
        *ids = NULL;
        return df_error_wrap(rc, "reward model input of row %lld", (long long)i);
    }
    return DF_OK;
}

/* The inputs of the rows with a response, packed: rows[k] is the batch row of sequence k. */
typedef struct {
    int64_t n, *offsets, *rows;
    int32_t *tokens;
    int64_t cap;
} rm_inputs;

static int add_input(rm_inputs *in, int64_t row, const int32_t *ids, int64_t n)
{
    int64_t end = in->offsets[in->n] + n;
    if (end > in->cap) {
        int64_t cap = end > 2 * in->cap ? end : 2 * in->cap;
        int32_t *t = realloc(in->tokens, (size_t)cap * sizeof *t);
        if (!t)
            return df_error(DF_ENOMEM, "out of memory");
        in->tokens = t;
        in->cap = cap;
    }
    memcpy(in->tokens + in->offsets[in->n], ids, (size_t)n * sizeof *ids);
    in->rows[in->n++] = row;
    in->offsets[in->n] = end;
    return DF_OK;
}

int df_rm_score_batch(const df_rm_scorer *s, df_batch *b)
{
    int64_t nb = df_batch_size(b);
    float *dst = NULL;
    int rc = df_batch_alloc_tok_f32_like(b, "rm_scores", "response_ids", &dst);
    if (rc)
        return rc;
    rm_inputs in = {.offsets = calloc((size_t)nb + 1, sizeof(int64_t)),
                    .rows = malloc((size_t)(nb ? nb : 1) * sizeof(int64_t))};
    float *scores = malloc((size_t)(nb ? nb : 1) * sizeof *scores);
    if (!in.offsets || !in.rows || !scores)
        rc = df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; i < nb && !rc; i++) {
        int64_t nr, n;
        int32_t *ids;
        if (!df_batch_tok_i32(b, "response_ids", i, &nr) || nr == 0)
            continue; /* nothing to place a score on (verl's slice drops it) */
        if (!(rc = df_rm_input(s, b, i, &ids, &n)))
            rc = add_input(&in, i, ids, n);
        free(ids);
    }
    if (!rc)
        rc = df_reward_model_score(s->model, in.n, in.offsets, in.tokens, scores);
    const int64_t *ro = df_batch_offsets(b, "response_ids");
    for (int64_t k = 0; k < in.n && !rc; k++)
        dst[ro[in.rows[k] + 1] - 1] = scores[k];
    free(in.offsets), free(in.rows), free(in.tokens), free(scores);
    return rc;
}
