/* Rendering for the multi-turn loop (include/distflow/agent.h): the token ids that extend a KV-cached
 * conversation by new tool / user messages (the chat template's rendering with them minus its
 * rendering without them, as verl's multi-turn rollout takes a delta of two renderings), and the
 * truncation of a long tool response (verl's tool_agent_loop, in tokens). */
#include "distflow/agent.h"

#include "agent/agent_internal.h"
#include "util/sbuf.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static int render(const df_tokenizer *tok, json_t *msgs, const df_agent_render_opts *o, bool gen, char **text)
{
    char *m = json_dumps(msgs, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!m)
        return df_error(DF_ENOMEM, "out of memory");
    int rc = df_tokenizer_apply_chat_template_json(tok, m, o->tools_json, gen, o->extra_json, text);
    free(m);
    return rc;
}

static json_t *load_array(const char *text, const char *what)
{
    json_error_t e;
    json_t *a = json_loads(text ? text : "[]", 0, &e);
    if (!json_is_array(a)) {
        df_error(DF_EINVAL, "df_agent_render_delta: %s is not a JSON array%s%s", what, a ? "" : ": ", a ? "" : e.text);
        json_decref(a);
        return NULL;
    }
    return a;
}

/* The byte offset in `old` where the KV-cached sequence of a turn without text ends: a model turn whose
   tokens decode to nothing (ids past the tokenizer's vocabulary, an embedding's padding rows), stopped by
   an id that is no special token, is an empty assistant message (verl's agent loop appends it as it is).
   Nothing of it marks its place in `old`, but the model's tokens followed the rendering of the messages
   before it with the generation prompt: that rendering's end. -1 (with the error set). */
static long empty_turn_end(const df_tokenizer *tok, const char *old, json_t *msgs,
                           const df_agent_render_opts *o)
{
    json_t *head = json_copy(msgs);
    char *text = NULL;
    long end = -1;
    int rc = head ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    if (!rc)
        json_array_remove(head, json_array_size(head) - 1);
    if (!rc && !json_array_size(head))
        rc = df_error(DF_EINVAL, "df_agent_render_delta: the model's empty turn is the only message");
    if (!rc)
        rc = render(tok, head, o, true, &text);
    if (!rc && strncmp(old, text, strlen(text)))
        df_error(DF_EINVAL, "df_agent_render_delta: the last message has no content and kept_suffix is "
                            "empty, and the template's rendering of the messages before it with the "
                            "generation prompt does not begin the conversation's rendering, so where the "
                            "sequence ends cannot be found");
    else if (!rc)
        end = (long)strlen(text);
    free(text);
    json_decref(head);
    return end;
}

/* The byte offset in `old` where the KV-cached sequence ends: after the last old message's content and
   `kept` (the last occurrence of the two together), or -1 (with the error set). */
static long sequence_end(const df_tokenizer *tok, const char *old, json_t *msgs,
                         const df_agent_render_opts *o)
{
    const char *kept = o->kept_suffix ? o->kept_suffix : "";
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    json_t *c = json_object_get(last, "content");
    df_sbuf b = {0};
    df_sbuf_puts(&b, json_is_string(c) ? json_string_value(c) : "");
    df_sbuf_puts(&b, kept);
    char *needle = NULL;
    if (df_sbuf_finish(&b, &needle))
        return -1;
    long end = -1;
    if (!needle[0]) {
        end = empty_turn_end(tok, old, msgs, o);
    } else {
        for (const char *p = strstr(old, needle); p; p = strstr(p + 1, needle))
            end = (long)(p - old) + (long)strlen(needle);
        if (end < 0)
            df_error(DF_EINVAL, "df_agent_render_delta: the template does not write the last message's content%s%s "
                                "verbatim (store the model's raw text as the content)",
                     kept[0] ? " followed by " : "", kept);
    }
    free(needle);
    return end;
}

int df_agent_render_delta(const df_tokenizer *tok, const char *messages, const char *new_messages,
                          const df_agent_render_opts *opts, int32_t **ids, int64_t *n)
{
    *ids = NULL;
    *n = 0;
    df_agent_render_opts o = opts ? *opts : (df_agent_render_opts){0};
    json_t *old = load_array(messages, "messages"), *add = old ? load_array(new_messages, "new_messages") : NULL;
    json_t *all = add ? json_copy(old) : NULL;
    int rc = !old || !add ? DF_EINVAL : DF_OK;
    if (!rc && (!all || json_array_extend(all, add)))
        rc = df_error(DF_ENOMEM, "out of memory");
    if (!rc && !json_array_size(old))
        rc = df_error(DF_EINVAL, "df_agent_render_delta: messages is empty (nothing is cached yet)");
    char *before = NULL, *after = NULL;
    if (!rc && !(rc = render(tok, old, &o, false, &before)))
        rc = render(tok, all, &o, true, &after);
    size_t nb = before ? strlen(before) : 0;
    if (!rc && strncmp(before, after, nb)) {
        size_t i = 0;
        while (before[i] == after[i])
            i++;
        rc = df_error(DF_EINVAL, "df_agent_render_delta: the chat template renders the conversation differently "
                                 "once the new messages follow it (first difference at byte %zu), so the cached "
                                 "tokens cannot be extended",
                      i);
    }
    long end = rc ? -1 : sequence_end(tok, before, old, &o);
    if (!rc && end < 0)
        rc = DF_EINVAL;
    if (!rc) /* the template's text after the cached part of the old rendering, then the new part */
        rc = df_tokenizer_encode(tok, after + end, false, ids, n);
    free(before);
    free(after);
    json_decref(old);
    json_decref(add);
    json_decref(all);
    return rc;
}

/* ---- truncation ------------------------------------------------------------------------------------ */

/* Length of b[0..len) without a trailing incomplete UTF-8 sequence. */
static size_t trim_tail(const char *b, size_t len)
{
    size_t i = len;
    while (i > 0 && ((unsigned char)b[i - 1] & 0xC0) == 0x80 && len - i < 3)
        i--;
    if (i == 0)
        return len;
    unsigned char lead = (unsigned char)b[i - 1];
    size_t need = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return len - (i - 1) >= need ? len : i - 1;
}

/* Append the bytes of ids [n]; keep_end: drop leading continuation bytes, else a trailing partial char. */
static int put_tokens(const df_tokenizer *tok, const int32_t *ids, int64_t n, bool keep_end, df_sbuf *out)
{
    df_sbuf b = {0};
    for (int64_t i = 0; i < n; i++) {
        const char *bytes = NULL;
        int64_t n_bytes = 0;
        if (!df_tokenizer_token_bytes(tok, ids[i], &bytes, &n_bytes))
            df_sbuf_put(&b, bytes, (size_t)n_bytes);
    }
    size_t len = b.len, start = 0;
    char *s = NULL;
    if (df_sbuf_finish(&b, &s))
        return DF_ENOMEM;
    if (keep_end)
        while (start < len && ((unsigned char)s[start] & 0xC0) == 0x80)
            start++;
    else
        len = trim_tail(s, len);
    df_sbuf_put(out, s + start, len - start);
    free(s);
    return DF_OK;
}

int df_agent_truncate(const df_tokenizer *tok, const char *text, int64_t max_tokens, const char *side, char **out)
{
    *out = NULL;
    if (!tok || !text || !side)
        return df_error(DF_EINVAL, "df_agent_truncate: NULL argument");
    int mode = !strcmp(side, "left") ? 0 : !strcmp(side, "middle") ? 1 : !strcmp(side, "right") ? 2 : -1;
    if (mode < 0)
        return df_error(DF_EINVAL, "tool_response_truncate_side '%s': expected left, middle or right", side);
    if (max_tokens < 1)
        return df_error(DF_EINVAL, "max_tool_response_length is %lld, must be >= 1", (long long)max_tokens);
    int32_t *ids = NULL;
    int64_t n = 0;
    int rc = df_tokenizer_encode(tok, text, false, &ids, &n);
    if (rc)
        return rc;
    if (n <= max_tokens) {
        free(ids);
        *out = strdup(text);
        return *out ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    }
    df_sbuf b = {0};
    int64_t half = max_tokens / 2;
    if (mode == 0) {
        rc = put_tokens(tok, ids, max_tokens, false, &b);
        df_sbuf_puts(&b, "...(truncated)");
    } else if (mode == 2) {
        df_sbuf_puts(&b, "(truncated)...");
        rc = put_tokens(tok, ids + n - max_tokens, max_tokens, true, &b);
    } else {
        rc = put_tokens(tok, ids, half, false, &b);
        df_sbuf_puts(&b, "...(truncated)...");
        if (!rc)
            rc = put_tokens(tok, ids + n - half, half, true, &b);
    }
    free(ids);
    if (rc) {
        df_sbuf_free(&b);
        return df_error(DF_ENOMEM, "out of memory");
    }
    return df_sbuf_finish(&b, out);
}
