/*
 * Multi-turn SFT samples: per-message chat-template rendering and the
 * assistant-only loss mask (verl's MultiTurnSFTDataset; see sft_chat.h).
 */
#include "workers/sft/sft_chat.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Render `messages_json` (tools, extra may be NULL) and encode it without special tokens, as
   transformers' apply_chat_template(tokenize=True) does. */
static int render_ids(const df_tokenizer *tok, const char *messages_json, const char *tools_json, bool gen,
                      const char *extra_json, int32_t **ids, int64_t *n)
{
    char *text = NULL;
    int rc = df_tokenizer_apply_chat_template_json(tok, messages_json, tools_json, gen, extra_json, &text);
    if (!rc)
        rc = df_tokenizer_encode(tok, text, false, ids, n);
    free(text);
    return rc;
}

static int32_t *copy_ids(const int32_t *src, int64_t n)
{
    int32_t *d = malloc((size_t)(n ? n : 1) * sizeof *d);
    if (d && n)
        memcpy(d, src, (size_t)n * sizeof *d);
    return d;
}

int df_sft_chat_prefix_init(const df_tokenizer *tok, df_sft_chat_prefix *out)
{
    static const char one[] = "[{\"role\": \"user\", \"content\": \"\"}]";
    static const char two[] = "[{\"role\": \"user\", \"content\": \"\"}, {\"role\": \"user\", \"content\": \"\"}]";
    memset(out, 0, sizeof *out);
    int32_t *t1 = NULL, *t2 = NULL, *t3 = NULL;
    int64_t n1 = 0, n2 = 0, n3 = 0;
    int rc = render_ids(tok, one, NULL, false, NULL, &t1, &n1);
    if (!rc)
        rc = render_ids(tok, two, NULL, false, NULL, &t2, &n2);
    if (!rc)
        rc = render_ids(tok, one, NULL, true, NULL, &t3, &n3);
    if (!rc && (n2 < n1 || n1 - (n2 - n1) < 0 || n3 < n1))
        rc = df_error(DF_EINVAL, "chat template: cannot find its default system turn (one empty user turn "
                      "renders %lld tokens, two render %lld)", (long long)n1, (long long)n2);
    if (!rc) {
        out->n_system = n1 - (n2 - n1);
        out->n_gen = n3 - n1;
        out->system = copy_ids(t1, out->n_system);
        out->gen = copy_ids(t3 + n1, out->n_gen);
        if (!out->system || !out->gen)
            rc = df_error(DF_ENOMEM, "out of memory");
    }
    free(t1);
    free(t2);
    free(t3);
    if (rc)
        df_sft_chat_prefix_free(out);
    return rc ? df_error_wrap(rc, "multi-turn SFT") : DF_OK;
}

void df_sft_chat_prefix_free(df_sft_chat_prefix *p)
{
    free(p->system);
    free(p->gen);
    memset(p, 0, sizeof *p);
}

/* Appends ids[n] (with mask value m from token `from` on) to the growing sequence. */
typedef struct {
    int32_t *ids;
    uint8_t *mask;
    int64_t n, cap;
} seq;

static int seq_push(seq *s, const int32_t *ids, int64_t n, int64_t from, uint8_t m)
{
    if (s->n + n > s->cap) {
        int64_t cap = (s->n + n) * 2 + 64;
        int32_t *ni = realloc(s->ids, (size_t)cap * sizeof *ni);
        if (ni)
            s->ids = ni;
        uint8_t *nm = realloc(s->mask, (size_t)cap);
        if (nm)
            s->mask = nm;
        if (!ni || !nm)
            return df_error(DF_ENOMEM, "out of memory");
        s->cap = cap;
    }
    memcpy(s->ids + s->n, ids, (size_t)n * sizeof *ids);
    for (int64_t j = 0; j < n; j++)
        s->mask[s->n + j] = j >= from ? m : 0;
    s->n += n;
    return DF_OK;
}

/* The conversation as a checked message array (a new reference in *out). */
static int parse_messages(const char *messages_json, json_t **out)
{
    json_error_t e;
    json_t *msgs = json_loads(messages_json ? messages_json : "", JSON_DECODE_ANY, &e);
    int rc = DF_OK, assistants = 0;
    if (!msgs || !json_is_array(msgs))
        rc = df_error(DF_EINVAL, "the messages must be a JSON list of {role, content} objects");
    else if (json_array_size(msgs) == 0)
        rc = df_error(DF_EINVAL, "the message list is empty");
    size_t i;
    json_t *m;
    json_array_foreach(rc ? NULL : msgs, i, m)
    {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!json_is_object(m) || !role) {
            rc = df_error(DF_EINVAL, "message %zu is not an object with a string \"role\"", i);
            break;
        }
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "tool")) {
            rc = df_error(DF_EINVAL, "message %zu has role '%s' (system, user, assistant or tool)", i, role);
            break;
        }
        assistants += !strcmp(role, "assistant");
    }
    if (!rc && !assistants)
        rc = df_error(DF_EINVAL, "no assistant message: nothing to train on");
    if (rc)
        json_decref(msgs);
    else
        *out = msgs;
    return rc;
}

/* Message i alone: render, drop the default system turn, mask the assistant's tokens. */
static int push_message(const df_tokenizer *tok, const df_sft_chat_prefix *pre, json_t *msgs, size_t i,
                        const char *tools_json, const char *extra, seq *s)
{
    json_t *m = json_array_get(msgs, i);
    const char *role = json_string_value(json_object_get(m, "role"));
    json_t *one = json_pack("[O]", m);
    char *text = one ? json_dumps(one, JSON_COMPACT) : NULL;
    json_decref(one);
    if (!text)
        return df_error(DF_ENOMEM, "out of memory");
    int32_t *ids = NULL;
    int64_t n = 0;
    int rc = render_ids(tok, text, i == 0 ? tools_json : NULL, false, extra, &ids, &n);
    free(text);
    int64_t skip = i != 0 && strcmp(role, "system") ? pre->n_system : 0;
    if (!rc && (n < skip || memcmp(ids, pre->system, (size_t)skip * sizeof *ids)))
        rc = df_error(DF_EINVAL, "message %zu (%s) alone does not start with the template's default system "
                      "turn, so it cannot be rendered turn by turn", i, role);
    bool assistant = !strcmp(role, "assistant");
    if (!rc)
        rc = seq_push(s, ids + skip, n - skip, assistant ? pre->n_gen : 0, assistant ? 1 : 0);
    free(ids);
    return rc ? df_error_wrap(rc, "message %zu", i) : DF_OK;
}

/* verl's sanity check: the turns concatenated equal the whole conversation rendered at once. */
static int check_whole(const df_tokenizer *tok, const char *messages_json, const char *tools_json,
                       const char *extra, const seq *s, bool *mismatch)
{
    int32_t *ids = NULL;
    int64_t n = 0, k = 0;
    int rc = render_ids(tok, messages_json, tools_json, false, extra, &ids, &n);
    while (!rc && k < n && k < s->n && ids[k] == s->ids[k])
        k++;
    if (!rc && (k < n || n != s->n) && mismatch) /* verl's ignore_input_ids_mismatch: keep the turns */
        *mismatch = true;
    else if (!rc && (k < n || n != s->n))
        rc = df_error(DF_EINVAL, "rendering the messages one by one gives %lld tokens, the whole conversation "
                      "%lld, first differing at token %lld (a template that renders a turn differently in "
                      "context: consecutive tool messages, thinking tags on the last turn, ...)",
                      (long long)s->n, (long long)n, (long long)k);
    free(ids);
    return rc;
}

int df_sft_chat_encode(const df_tokenizer *tok, const df_sft_chat_prefix *pre, const char *messages_json,
                       const char *tools_json, int enable_thinking, bool *mismatch, int32_t **ids, uint8_t **mask,
                       int64_t *n)
{
    if (mismatch)
        *mismatch = false;
    json_t *msgs = NULL;
    int rc = parse_messages(messages_json, &msgs);
    if (rc)
        return rc;
    const char *extra = enable_thinking < 0 ? NULL
                        : enable_thinking   ? "{\"enable_thinking\": true}"
                                            : "{\"enable_thinking\": false}";
    seq s = {0};
    for (size_t i = 0; !rc && i < json_array_size(msgs); i++)
        rc = push_message(tok, pre, msgs, i, tools_json, extra, &s);
    if (!rc)
        rc = check_whole(tok, messages_json, tools_json, extra, &s, mismatch);
    json_decref(msgs);
    if (rc) {
        free(s.ids);
        free(s.mask);
        return rc;
    }
    *ids = s.ids ? s.ids : malloc(sizeof **ids);
    *mask = s.mask ? s.mask : malloc(1);
    *n = s.n;
    return *ids && *mask ? DF_OK : df_error(DF_ENOMEM, "out of memory");
}

/* ---- a dataset's rows ---------------------------------------------------------------------- */

/* Row i's tools (malloc'd JSON list text, or NULL) and enable_thinking (-1 / 0 / 1). */
static int row_options(const df_dataset *ds, int64_t i, const df_sft_chat_keys *k, char **tools, int *thinking)
{
    *tools = NULL;
    *thinking = -1;
    char *text = NULL;
    if (df_dataset_field(ds, i, k->tools_key, &text) == DF_OK && text[0]) { /* absent / null: no tools */
        json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
        if (!json_is_array(v) && !json_is_null(v)) {
            json_decref(v);
            free(text);
            return df_error(DF_EINVAL, "data.multiturn.tools_key '%s' must be a list of tool schemas",
                            k->tools_key);
        }
        if (json_is_array(v))
            *tools = json_dumps(v, JSON_COMPACT);
        json_decref(v);
    }
    free(text);
    text = NULL;
    if (df_dataset_field(ds, i, k->enable_thinking_key, &text) == DF_OK && text[0]) {
        if (strcmp(text, "true") && strcmp(text, "false")) {
            free(text);
            free(*tools);
            *tools = NULL;
            return df_error(DF_EINVAL, "data.multiturn.enable_thinking_key '%s' must be true, false or null",
                            k->enable_thinking_key);
        }
        *thinking = !strcmp(text, "true");
    }
    free(text);
    return DF_OK;
}

/* Row i tokenised, masked and cut to max_length per truncation. */
static int row_encode(const df_dataset *ds, int64_t i, const df_tokenizer *tok, const df_sft_chat_prefix *pre,
                      const df_sft_chat_keys *k, seq *s, bool *mismatch)
{
    char *msgs = NULL, *tools = NULL;
    int thinking;
    if (df_dataset_field(ds, i, k->messages_key, &msgs)) /* a row without it is malformed, not absent */
        return df_error(DF_EINVAL, "no data.multiturn.messages_key column \"%s\"", k->messages_key);
    int rc;
    if (!(rc = row_options(ds, i, k, &tools, &thinking)))
        rc = df_sft_chat_encode(tok, pre, msgs, tools, thinking, k->ignore_input_ids_mismatch ? mismatch : NULL,
                                &s->ids, &s->mask, &s->n);
    free(msgs);
    free(tools);
    if (!rc && s->n > k->max_length) {
        if (!strcmp(k->truncation, "error"))
            rc = df_error(DF_EINVAL, "the conversation has %lld tokens, more than data.max_length = %lld "
                          "(or set data.truncation=left|right)", (long long)s->n, (long long)k->max_length);
        else if (!strcmp(k->truncation, "left")) {
            int64_t cut = s->n - k->max_length;
            memmove(s->ids, s->ids + cut, (size_t)k->max_length * sizeof *s->ids);
            memmove(s->mask, s->mask + cut, (size_t)k->max_length);
        }
        s->n = k->max_length;
    }
    return rc;
}

int df_sft_chat_load(const df_dataset *ds, const df_tokenizer *tok, const df_sft_chat_prefix *pre,
                     const df_sft_chat_keys *k, df_prompt_cache *prompt, df_prompt_cache *response, float **mask,
                     df_sft_chat_stats *stats)
{
    int64_t n = df_dataset_size(ds);
    int rc = DF_OK;
    df_sft_chat_stats st = {.first_mismatched = -1};
    seq all = {0}; /* every row's tokens and mask, back to back */
    int64_t *start = calloc((size_t)n + 1, sizeof *start), *split = calloc((size_t)n + 1, sizeof *split);
    if (!start || !split)
        rc = df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; i < n && !rc; i++) {
        seq s = {0};
        bool mismatch = false;
        rc = row_encode(ds, i, tok, pre, k, &s, &mismatch);
        if (!rc && mismatch && st.mismatched++ == 0)
            st.first_mismatched = i;
        int64_t p = 0;
        while (!rc && p < s.n && !s.mask[p])
            p++;
        split[i] = all.n + (p > 0 || s.n == 0 ? p : 1); /* the first token has no logit: keep it in front */
        if (!rc)
            rc = seq_push(&all, s.ids, s.n, 0, 0);
        for (int64_t j = 0; !rc && j < s.n; j++)
            all.mask[all.n - s.n + j] = s.mask[j];
        start[i + 1] = all.n;
        free(s.ids);
        free(s.mask);
        int64_t line;
        const char *file = rc ? df_dataset_source(ds, i, &line) : NULL;
        if (file)
            rc = df_error_wrap(rc, "%s:%lld", file, (long long)line);
    }
    if (stats)
        *stats = st;
    int64_t np = 0, nr = 0;
    for (int64_t i = 0; !rc && i < n; i++) {
        np += split[i] - start[i];
        nr += start[i + 1] - split[i];
    }
    prompt->n = response->n = n;
    prompt->offsets = rc ? NULL : malloc((size_t)(n + 1) * sizeof(int64_t));
    response->offsets = rc ? NULL : malloc((size_t)(n + 1) * sizeof(int64_t));
    prompt->tokens = rc ? NULL : malloc((size_t)(np + 1) * sizeof(int32_t));
    response->tokens = rc ? NULL : malloc((size_t)(nr + 1) * sizeof(int32_t));
    *mask = rc ? NULL : malloc((size_t)(nr + 1) * sizeof(float));
    if (!rc && (!prompt->offsets || !response->offsets || !prompt->tokens || !response->tokens || !*mask))
        rc = df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; !rc && i < n; i++) {
        if (i == 0)
            prompt->offsets[0] = response->offsets[0] = 0;
        int64_t P = split[i] - start[i], R = start[i + 1] - split[i], ro = response->offsets[i];
        memcpy(prompt->tokens + prompt->offsets[i], all.ids + start[i], (size_t)P * sizeof(int32_t));
        memcpy(response->tokens + ro, all.ids + split[i], (size_t)R * sizeof(int32_t));
        for (int64_t j = 0; j < R; j++)
            (*mask)[ro + j] = all.mask[split[i] + j] ? 1.0f : 0.0f;
        prompt->offsets[i + 1] = prompt->offsets[i] + P;
        response->offsets[i + 1] = ro + R;
    }
    free(all.ids);
    free(all.mask);
    free(start);
    free(split);
    if (rc) {
        df_prompt_cache_free(prompt);
        df_prompt_cache_free(response);
        free(*mask);
        *mask = NULL;
    }
    return rc;
}
